/* Statistics accumulators: the merged record a statistics feature keeps per (layer, tensor), filled
 * by the CPU kernels for host tensors and by the CUDA backend for device tensors, whose records
 * stay on the device until the accumulator is read at step end. */
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "context-private.h"
#include "error-private.h"
#include "loader-private.h"
#include "messages-private.h"
#include "names-private.h"
#include "stats-private.h"
#include "strided-private.h"

/* The pass shared within one dli_inspect_tensor (stats-private.h). The tensor is borrowed and
 * unchanged for the whole call, so the features after the first need not read it again: a
 * LogTensorStats and a DetectNonFinite on one tensor cost one pass, not two. */
static _Thread_local struct {
	const struct dli_tensor *t; /* the dispatch's tensor; NULL outside one */
	bool valid;
	const void *data;
	enum dli_dtype dtype;
	int64_t n;
	struct dli_stats_record pass;
	double finite_sq; /* the pass's sum of finite x^2 (dli_cpu_stats_finite_sq) */
} shared;

_Thread_local unsigned long long dli_stats_host_passes;

void dli_stats_share_begin(const struct dli_tensor *t)
{
	shared.t = t;
	shared.valid = false;
}

void dli_stats_share_end(void)
{
	shared.t = NULL;
	shared.valid = false;
}

/* One device accumulator per CUDA device the tensors came from. */
struct dli_stats_device {
	int device;
	void *dacc; /* NULL when the backend could not make one (reported once) */
};

struct dli_stats_acc {
	struct dli_context *ctx;
	struct dli_stats_backend *backend;
	pthread_mutex_t lock; /* guards host, devices and the backend calls on them */
	struct dli_stats_record host;
	struct dli_stats_device *devices;
	size_t n_devices;
	atomic_bool warned; /* a tensor it cannot read was reported */

	/* Value histogram of the host tensors, when turned on (stats_acc_histogram): the counts since
	 * the last reset, and what the last read handed out (borrowed by the caller until the next
	 * read, reset or destroy). hist_device: a CUDA tensor came in since the reset, so the counts
	 * miss its values. All under lock. */
	uint64_t *hist_counts;
	double *hist_limits, *hist_buckets;
	bool hist_on; /* collection is on; the arrays are made by the first tensor that adds counts */
	bool hist_device;

	struct dli_share *share; /* registered with stats_acc_share (core/reduce.c), or NULL */
	/* Called with the share set when the accumulator goes (the reduction's dli_reduce_forget). */
	void (*forget)(struct dli_context *ctx, struct dli_stats_acc *acc);
};

static const char *dtype_name(enum dli_dtype d)
{
	const char *name = dli_dtype_name(d);
	return name ? name : "unknown dtype";
}

/* ---- The per-context backend ---- */

void dli_stats_backend_init(struct dli_stats_backend *b, struct dli_context *ctx)
{
	memset(b, 0, sizeof *b);
	b->ctx = ctx;
	pthread_mutex_init(&b->lock, NULL);
}

void dli_stats_backend_finish(struct dli_stats_backend *b)
{
	dli_loader_destroy(b->loader);
	b->loader = NULL;
	atomic_store(&b->ops, NULL);
	pthread_mutex_destroy(&b->lock);
}

/* The module of the backend of CUDA tensors (kernels/cuda/meson.build builds it). */
#define CUDA_BACKEND_MODULE "dli_cuda"

/* The CUDA backend of the modules `loader` holds, or NULL. */
static const struct dli_backend_ops *backend_find(const struct dli_loader *loader)
{
	for (size_t i = 0; i < dli_loader_count(loader); i++) {
		const struct dli_module *m = dli_loader_module(loader, i);
		for (size_t k = 0; k < m->n_backends; k++)
			if (m->backends[k]->device == DLI_DEVICE_CUDA)
				return m->backends[k]->ops;
	}
	return NULL;
}

/* Loads the CUDA backend module from the context's plugin search path, through a loader of the
 * backend's own: the context's loader stays as dli_init made it (no lock guards its module list).
 * On failure err says why. */
static int backend_open(struct dli_stats_backend *b, struct dli_error *err)
{
	char **own = NULL;
	size_t n_dirs = 0;
	const char *const *dirs = dli_loader_dirs(b->ctx->loader, &n_dirs);
	int r;

	/* A context without a config has no loader; its search path is the default one. */
	if (!b->ctx->loader) {
		if ((r = dli_search_dirs(NULL, 0, &own, &n_dirs, err)))
			return r;
		dirs = (const char *const *)own;
	}
	r = dli_loader_create(&b->ctx->host, dirs, n_dirs, &b->loader, err);
	if (!r && (r = dli_loader_load(b->loader, CUDA_BACKEND_MODULE, err)) == -ENOENT) {
		char list[640] = "";
		for (size_t d = 0, off = 0; d < n_dirs && off < sizeof list; d++)
			off += (size_t)snprintf(list + off, sizeof list - off, "%s%s", d ? ", " : "",
						dirs[d] ? dirs[d] : "");
		dli_error_set(err, -ENOENT, NULL, "no %s.so in %s%s", CUDA_BACKEND_MODULE,
			      n_dirs ? "the plugin dirs " : "an empty plugin path", list);
	}
	dli_search_dirs_free(own, n_dirs);
	const struct dli_backend_ops *ops = r ? NULL : backend_find(b->loader);
	if (!r && !ops)
		r = dli_error_set(err, -ENOEXEC, NULL, "%s.so has no backend for CUDA tensors",
				  CUDA_BACKEND_MODULE);
	if (r) {
		dli_loader_destroy(b->loader);
		b->loader = NULL;
		return r;
	}
	atomic_store_explicit(&b->ops, ops, memory_order_release);
	return 0;
}

/* src into dst[size], cut short when it does not fit. */
static void copy_text(char *dst, size_t size, const char *src)
{
	size_t n = strnlen(src, size - 1);
	memcpy(dst, src, n);
	dst[n] = '\0';
}

/* The backend, loading it on first use. After the first attempt this is one atomic load. */
static const struct dli_backend_ops *backend_get(struct dli_stats_acc *acc)
{
	struct dli_stats_backend *b = acc->backend;
	const struct dli_backend_ops *ops = atomic_load_explicit(&b->ops, memory_order_acquire);
	if (ops || atomic_load(&b->tried))
		return ops;
	struct dli_error err = {0};
	int r = 0;
	pthread_mutex_lock(&b->lock);
	if (!atomic_load(&b->tried)) {
		r = backend_open(b, &err);
		if (r) {
			int n = snprintf(b->why, sizeof b->why,
					 "statistics of CUDA tensors need dlinspect built with CUDA "
					 "(nvcc found at build time, meson option cuda) and its backend "
					 "%s.so on the plugin path: ", CUDA_BACKEND_MODULE);
			if (n > 0 && (size_t)n < sizeof b->why)
				copy_text(b->why + n, sizeof b->why - (size_t)n, err.message);
		}
		atomic_store(&b->tried, true);
	}
	ops = atomic_load(&b->ops);
	pthread_mutex_unlock(&b->lock);
	if (r)
		dli_log(acc->ctx, DLI_LOG_ERROR,
			"%s. CUDA tensors get no statistics in this run (reported once)", b->why);
	return ops;
}

/* The device accumulator for `device`, made on first use. Called under acc->lock. */
static void *device_acc(struct dli_stats_acc *acc, const struct dli_backend_ops *be, int device)
{
	for (size_t i = 0; i < acc->n_devices; i++)
		if (acc->devices[i].device == device)
			return acc->devices[i].dacc;
	struct dli_stats_device *v = realloc(acc->devices, (acc->n_devices + 1) * sizeof *v);
	if (!v)
		return NULL;
	acc->devices = v;
	char why[256] = "";
	void *dacc = be->acc_create(device, why);
	/* Kept even when NULL, so a device the backend refuses is reported once, not per call. */
	v[acc->n_devices++] = (struct dli_stats_device){device, dacc};
	if (!dacc)
		dli_log(acc->ctx, DLI_LOG_ERROR,
			"statistics: the CUDA backend could not make an accumulator on device %d: %s",
			device, why[0] ? why : "unknown error");
	return dacc;
}

/* ---- Accumulators ---- */

struct dli_stats_acc *dli_stats_acc_create(struct dli_context *ctx)
{
	struct dli_stats_acc *acc = calloc(1, sizeof *acc);
	if (!acc)
		return NULL;
	acc->backend = &ctx->cuda;
	acc->ctx = ctx;
	pthread_mutex_init(&acc->lock, NULL);
	dli_stats_record_init(&acc->host);
	return acc;
}

void dli_stats_acc_destroy(struct dli_stats_acc *acc)
{
	if (!acc)
		return;
	if (acc->share && acc->forget)
		acc->forget(acc->ctx, acc);
	const struct dli_backend_ops *be = atomic_load(&acc->backend->ops);
	for (size_t i = 0; i < acc->n_devices; i++)
		if (acc->devices[i].dacc)
			be->acc_destroy(acc->devices[i].dacc);
	free(acc->devices);
	free(acc->hist_counts);
	free(acc->hist_limits);
	free(acc->hist_buckets);
	pthread_mutex_destroy(&acc->lock);
	free(acc);
}

_Thread_local char dli_stats_refusal[384];

/* Says once per accumulator why a tensor was refused, and every time to the failing call's
 * dli_last_error (dli_stats_refusal); returns rc. */
static int vrefuse(struct dli_stats_acc *acc, int rc, const char *fmt, va_list ap)
{
	char text[sizeof dli_stats_refusal];
	vsnprintf(text, sizeof text, fmt, ap);
	memcpy(dli_stats_refusal, text, sizeof text);
	if (!atomic_exchange(&acc->warned, true)) {
		char site[256];
		dli_call_site(site, sizeof site);
		dli_log(acc->ctx, DLI_LOG_ERROR,
			"statistics%s: %s; the tensor is skipped (further refusals for this tensor are "
			"not reported)", site, text);
	}
	return rc;
}

/* vrefuse with -EINVAL: a tensor the host described wrongly. */
static int refuse(struct dli_stats_acc *acc, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int refuse(struct dli_stats_acc *acc, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	int r = vrefuse(acc, -EINVAL, fmt, ap);
	va_end(ap);
	return r;
}

/* vrefuse with -ENOTSUP: a valid tensor this pass cannot read. */
static int unsupported(struct dli_stats_acc *acc, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
static int unsupported(struct dli_stats_acc *acc, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	int r = vrefuse(acc, -ENOTSUP, fmt, ap);
	va_end(ap);
	return r;
}

/* Element count of a host tensor the CPU kernels can read, or a negative errno. `fp8_pass` limits
 * the dtypes to those the quantize-and-compare pass takes. */
static int64_t host_tensor_numel(struct dli_stats_acc *acc, const struct dli_tensor *t,
				 bool fp8_pass)
{
	bool ok = t->dtype == DLI_DTYPE_F32 || t->dtype == DLI_DTYPE_F16 ||
		  t->dtype == DLI_DTYPE_BF16;
	if (!fp8_pass)
		ok = ok || t->dtype == DLI_DTYPE_F8E4M3 || t->dtype == DLI_DTYPE_F8E5M2;
	if (!ok && !dli_dtype_name(t->dtype))
		return refuse(acc, "cannot read a tensor of unknown dtype %d: %s", (int)t->dtype,
			      fp8_pass ? "the FP8 comparison takes f32, f16 or bf16"
				       : "expected f32, f16, bf16, f8e4m3 or f8e5m2");
	if (!ok)
		return refuse(acc, "cannot read a tensor of dtype %s: %s", dtype_name(t->dtype),
			      fp8_pass ? "the FP8 comparison takes f32, f16 or bf16"
				       : "expected f32, f16, bf16, f8e4m3 or f8e5m2");
	if (!t->contiguous && !dli_view_of(t))
		return refuse(acc, "cannot read a non-contiguous %s tensor: pass a contiguous copy, or "
				   "its strides (dli_inspect_tensor_strided)",
			      dtype_name(t->dtype));
	if (t->ndim < 0 || t->ndim > DLI_TENSOR_MAX_DIMS)
		return refuse(acc, "a tensor has an invalid ndim %d", t->ndim);
	int64_t n = 1;
	for (int i = 0; i < t->ndim; i++) {
		if (t->shape[i] < 0)
			return refuse(acc, "a tensor has an invalid shape (dim %d is %lld)", i,
				      (long long)t->shape[i]);
		if (t->shape[i] == 0)
			n = 0; /* empty, whatever the other dimensions (tensor.h) */
	}
	for (int i = 0; i < t->ndim && n; i++) {
		if (n > INT64_MAX / t->shape[i])
			return refuse(acc, "a tensor's element count overflows 64 bits (at dim %d, "
					   "%lld)", i, (long long)t->shape[i]);
		n *= t->shape[i];
	}
	if (n && !t->data)
		return refuse(acc, "a non-empty %s tensor has no data", dtype_name(t->dtype));
	return n;
}

static void merge_host(struct dli_stats_acc *acc, const struct dli_stats_record *r)
{
	pthread_mutex_lock(&acc->lock);
	dli_stats_merge(&acc->host, r);
	pthread_mutex_unlock(&acc->lock);
}

/* The histogram's arrays, made on first need (under acc->lock): a config that asks for histograms
 * of many layers' tensors costs their memory only for the tensors the host passes. */
static bool hist_arrays(struct dli_stats_acc *acc)
{
	if (acc->hist_counts)
		return true;
	uint64_t *counts = calloc(DLI_HISTOGRAM_BUCKETS, sizeof *counts);
	double *limits = malloc(DLI_HISTOGRAM_BUCKETS * sizeof *limits);
	double *buckets = malloc(DLI_HISTOGRAM_BUCKETS * sizeof *buckets);
	if (!counts || !limits || !buckets) {
		free(counts);
		free(limits);
		free(buckets);
		return false;
	}
	acc->hist_counts = counts;
	acc->hist_limits = limits;
	acc->hist_buckets = buckets;
	return true;
}

/* merge_host, plus the histogram of the n elements of t when the accumulator keeps one. The pass
 * runs outside the lock into its own counts (12 KiB, allocated per call: an accumulator may take
 * tensors from several threads), which then add to the accumulator's exactly. */
static int merge_host_hist(struct dli_stats_acc *acc, const struct dli_stats_record *r,
			   const struct dli_tensor *t, int64_t n)
{
	pthread_mutex_lock(&acc->lock);
	bool want = acc->hist_on;
	pthread_mutex_unlock(&acc->lock);
	uint64_t *counts = NULL;
	if (want) {
		/* A view has no histogram pass of its own: it reads the view's copy. */
		if (!(t = dli_view_resolve(t)) ||
		    !(counts = malloc(DLI_HISTOGRAM_BUCKETS * sizeof *counts)))
			return -ENOMEM;
		int e = dli_cpu_histogram(t->data, t->dtype, n, NULL, counts);
		if (e) {
			free(counts);
			return e;
		}
	}
	pthread_mutex_lock(&acc->lock);
	dli_stats_merge(&acc->host, r);
	/* Turned off in between: the counts have nowhere to go. */
	bool lost = counts && acc->hist_on && !hist_arrays(acc);
	for (int k = 0; counts && acc->hist_on && !lost && k < DLI_HISTOGRAM_BUCKETS; k++)
		acc->hist_counts[k] += counts[k];
	pthread_mutex_unlock(&acc->lock);
	free(counts);
	return lost ? -ENOMEM : 0;
}

/* A CUDA tensor: queued through the backend, never waited for. */
static int add_device(struct dli_stats_acc *acc, const struct dli_tensor *t,
		      const struct dli_fp8_spec *fp8, const struct dli_tensor *hp,
		      const struct dli_quantized_tensor *q)
{
	const struct dli_backend_ops *be = backend_get(acc);
	if (!be) {
		/* Every refused call's dli_last_error says why; the message log said it once. */
		copy_text(dli_stats_refusal, sizeof dli_stats_refusal, acc->backend->why);
		return -ENOTSUP;
	}
	pthread_mutex_lock(&acc->lock);
	bool no_hist = acc->hist_on && t && !acc->hist_device;
	if (acc->hist_on && t)
		acc->hist_device = true;
	void *dacc = device_acc(acc, be, q ? q->data.device.index : t->device.index);
	int r = !dacc ? -EIO : q ? be->add_quantized(dacc, hp, q) : be->add(dacc, t, fp8);
	pthread_mutex_unlock(&acc->lock);
	if (no_hist && !atomic_exchange(&acc->backend->hist_warned, true))
		dli_log(acc->ctx, DLI_LOG_WARNING,
			"statistics: histograms of CUDA tensors are not supported yet (the CUDA backend "
			"has no histogram kernel); their other statistics are logged, their histograms "
			"are not (reported once)");
	return r;
}

int dli_stats_add(struct dli_stats_acc *acc, const struct dli_tensor *t,
		  const struct dli_fp8_spec *fp8)
{
	if (!acc || !t)
		return -EINVAL;
	if (fp8 && fp8->format != DLI_DTYPE_F8E4M3 && fp8->format != DLI_DTYPE_F8E5M2)
		return refuse(acc, "cannot compare against FP8 format %s: expected f8e4m3 or f8e5m2",
			      dtype_name(fp8->format));
	if (t->device.type == DLI_DEVICE_CUDA)
		return add_device(acc, t, fp8, NULL, NULL);
	if (t->device.type != DLI_DEVICE_CPU)
		return refuse(acc, "a tensor is on an unknown device type %d", (int)t->device.type);
	int64_t n = host_tensor_numel(acc, t, fp8 != NULL);
	if (n <= 0)
		return (int)n; /* an empty tensor adds nothing */
	struct dli_view *view = dli_view_of(t); /* NULL but in a strided dispatch */

	struct dli_stats_record rec, cmp, pass;
	double finite_sq = NAN; /* a view's pass gives none: its compare sums x^2 itself */
	int r = 0;
	if (shared.valid && shared.t == t && shared.data == t->data && shared.dtype == t->dtype &&
	    shared.n == n) {
		pass = shared.pass;
		finite_sq = shared.finite_sq;
	} else {
		r = view ? dli_view_stats(view, &pass)
			 : dli_cpu_stats_finite_sq(t->data, t->dtype, n, NULL, &pass, &finite_sq);
		if (!r && view && isfinite(pass.sum_sq))
			finite_sq = pass.sum_sq;
		dli_stats_host_passes++;
		if (!r && shared.t == t) {
			shared.pass = pass;
			shared.finite_sq = finite_sq;
			shared.data = t->data;
			shared.dtype = t->dtype;
			shared.n = n;
			shared.valid = true;
		}
	}
	/* dli_cpu_stats promises the fields up to m2; the FP8 terms stay empty until a comparison
	 * fills them, whatever the SIMD path left there. */
	dli_stats_record_init(&rec);
	memcpy(&rec, &pass, offsetof(struct dli_stats_record, fp8_count));
	if (!r && fp8) {
		/* Current scaling needs the tensor's amax before quantizing: the pass above has it,
		 * so the comparison costs one more pass, not two. The record's amax skips NaNs, as
		 * an fmaxf-based amax kernel does, so one NaN does not hide every other element's
		 * quantization error. */
		float scale = fp8->current_scaling
				      ? dli_fp8_scale((float)rec.amax, fp8->format, fp8->margin)
				      : fp8->scale;
		/* The pass's sum of finite x^2 spares the comparison one term (kernels-private.h). */
		const struct dli_tensor *c = view ? dli_view_contiguous(view) : t;
		struct dli_cpu_options scalar;
		r = c ? dli_cpu_fp8_compare_sum_sq(
			    c->data, t->dtype, n, fp8->format, scale, finite_sq,
			    dli_fp8_compare_opts(rec.min_nonzero_abs, scale, NULL, &scalar), &cmp)
		      : -ENOMEM;
		if (!r)
			dli_stats_merge(&rec, &cmp);
	}
	if (r)
		return r;
	return merge_host_hist(acc, &rec, t, n);
}

/* Merges the record of a host copy compared with hp (n elements; NULL: the scale range only).
 * The comparison leaves NaN and infinite hp elements out. Rare, so only then: the element counts
 * of hp join the record, so that finalizing counts an infinity as an overflow and its mse as
 * infinite, as for the current-scaling pass (kernels/record.c). */
static int merge_compared(struct dli_stats_acc *acc, const struct dli_tensor *hp, int64_t n,
			  struct dli_stats_record *rec)
{
	if (hp && rec->fp8_count < (uint64_t)n) {
		struct dli_stats_record pass;
		int r = dli_cpu_stats(hp->data, hp->dtype, n, NULL, &pass);
		if (r)
			return r;
		memcpy(rec, &pass, offsetof(struct dli_stats_record, fp8_count));
	}
	merge_host(acc, rec);
	return 0;
}

/* Whether `t`'s shape has a 0 and no negative extent: no elements, on any device (an invalid ndim
 * is no: the checks that follow refuse it). */
static bool empty_shape(const struct dli_tensor *t)
{
	bool zero = false;
	if (t->ndim < 0 || t->ndim > DLI_TENSOR_MAX_DIMS)
		return false;
	for (int i = 0; i < t->ndim; i++) {
		if (t->shape[i] < 0)
			return false;
		zero |= t->shape[i] == 0;
	}
	return zero;
}

int dli_stats_add_quantized(struct dli_stats_acc *acc, const struct dli_tensor *hp,
			    const struct dli_quantized_tensor *q)
{
	if (!acc || !q)
		return -EINVAL;
	/* The comparison has no strided form: a view's hp is its copy. */
	if (hp && !(hp = dli_view_resolve(hp)))
		return -ENOMEM;
	const struct dli_tensor *qt = &q->data;
	if (hp && hp->device.type != qt->device.type)
		return refuse(acc, "a quantized tensor and its high-precision tensor are on different "
				   "devices");
	if (qt->dtype != DLI_DTYPE_F8E4M3 && qt->dtype != DLI_DTYPE_F8E5M2)
		return refuse(acc, "a quantized tensor has dtype %s: expected f8e4m3 or f8e5m2",
			      dtype_name(qt->dtype));
	if (!q->scale_inv || q->scale_inv_count < 1)
		return refuse(acc, "a quantized tensor has no scale_inv (scale_inv %s, scale_inv_count "
				   "%lld)",
			      q->scale_inv ? "set" : "NULL", (long long)q->scale_inv_count);
	/* Empty, as below (the CUDA backend would still record the scale_inv). */
	if (qt->device.type == DLI_DEVICE_CUDA) {
		if (empty_shape(qt) && (!hp || empty_shape(hp)))
			return 0;
		return add_device(acc, NULL, NULL, hp, q);
	}
	/* Which of several scale_invs (block scaling) dequantizes an element depends on the
	 * recipe's layout; the kernel takes only their range then, and refuses to compare. */
	if (hp && q->scale_inv_count != 1)
		return unsupported(acc, "comparing with a quantized tensor needs per-tensor scaling (1 "
					"scale_inv, not %lld); a block-scaled host passes its copies "
					"to dli_inspect_tensor_block",
				   (long long)q->scale_inv_count);
	int64_t n = host_tensor_numel(acc, qt, false);
	if (n < 0)
		return (int)n;
	if (hp) {
		int64_t n_hp = host_tensor_numel(acc, hp, true);
		if (n_hp < 0)
			return (int)n_hp;
		if (n_hp != n)
			return refuse(acc, "a quantized tensor (%lld elements) and its high-precision "
					   "tensor (%lld) differ in size", (long long)n, (long long)n_hp);
	}
	/* An empty tensor gives no statistics, its quantizer's scale_inv included: an empty
	 * microbatch or rank's shard must not move the scale_inv range of the others' (nor log a
	 * step of its own), as TransformerEngine skips an empty tensor. */
	if (n == 0)
		return 0;
	struct dli_stats_record rec;
	int r = dli_cpu_fp8_compare_quantized(hp ? hp->data : NULL, hp ? hp->dtype : DLI_DTYPE_F32,
					      qt->data, qt->dtype, q->scale_inv, q->scale_inv_count,
					      n, NULL, &rec);
	return r ? r : merge_compared(acc, hp, n, &rec);
}

static void matrix_view(const struct dli_tensor *t, int64_t n, int64_t *rows, int64_t *cols);

/* A block-scaled copy the host made (ABI 1.4): its own codes and scales against hp. */
int dli_stats_add_block_quantized(struct dli_stats_acc *acc, const struct dli_tensor *hp,
				  const struct dli_block_quantized_tensor *q)
{
	if (!acc || !q)
		return -EINVAL;
	const char *why = NULL;
	/* The size first: `device` is a member of the 1.4 struct. */
	if (q->size >= sizeof *q && q->device.type != DLI_DEVICE_CPU)
		return refuse(acc, "the host's block-scaled copy (recipe %d, %s) is in %s memory: "
				   "block-scaled copies are read from host memory only for now (the "
				   "CUDA backend has no block-scaled pass); pass host copies",
			      q->recipe, q->columnwise ? "column-wise" : "row-wise",
			      q->device.type == DLI_DEVICE_CUDA ? "CUDA" : "device");
	if (dli_cpu_block_quantized_check(q, &why))
		return refuse(acc, "cannot read the host's block-scaled copy (recipe %d, %s, %lld x "
				   "%lld): %s",
			      q->recipe, q->columnwise ? "column-wise" : "row-wise",
			      (long long)q->rows, (long long)q->cols, why);
	/* The comparison has no strided form: a view's hp is its copy. */
	if (hp && !(hp = dli_view_resolve(hp)))
		return -ENOMEM;
	if (hp && hp->device.type == DLI_DEVICE_CUDA)
		return refuse(acc, "the host's block-scaled copies of a CUDA tensor are not read yet "
				   "(the CUDA backend has no block-scaled pass): pass host copies");
	if (hp && hp->device.type != DLI_DEVICE_CPU)
		return refuse(acc, "a tensor is on an unknown device type %d", (int)hp->device.type);
	int64_t n = q->rows * q->cols; /* at most 2^62: checked with the shape */
	if (hp) {
		int64_t n_hp = host_tensor_numel(acc, hp, true);
		if (n_hp < 0)
			return (int)n_hp;
		int64_t rows, cols;
		matrix_view(hp, n_hp, &rows, &cols);
		if (n_hp != n || (n && cols != q->cols))
			return refuse(acc, "the host's block-scaled copy is %lld x %lld, its "
					   "high-precision tensor %lld x %lld (rows x its last "
					   "dimension)",
				      (long long)q->rows, (long long)q->cols, (long long)rows,
				      (long long)cols);
	}
	struct dli_stats_record rec;
	int r = dli_cpu_block_compare_quantized(hp ? hp->data : NULL,
						hp ? hp->dtype : DLI_DTYPE_F32, q, &rec);
	return r ? r : merge_compared(acc, hp, n, &rec);
}

static int acc_merge(struct dli_stats_acc *acc, struct dli_stats_record *out);

/* A module's record may be smaller (older headers) or larger (newer) than ours: only `size` bytes
 * of `out` are ever touched. */
int dli_stats_acc_read_sized(struct dli_stats_acc *acc, struct dli_stats_record *out, size_t size)
{
	if (!acc || !out || size < DLI_STATS_RECORD_SIZE_1_0)
		return -EINVAL;
	struct dli_stats_record merged;
	int r = acc_merge(acc, &merged);
	size_t n = size < sizeof merged ? size : sizeof merged;
	memcpy(out, &merged, n);
	if (size > n)
		memset((char *)out + n, 0, size - n);
	return r;
}

/* ABI 1.0: exactly the 1.0 record, whatever the record grows to. */
int dli_stats_acc_read(struct dli_stats_acc *acc, struct dli_stats_record *out)
{
	return dli_stats_acc_read_sized(acc, out, DLI_STATS_RECORD_SIZE_1_0);
}

double dli_stats_value_sized(const struct dli_stats_record *r, size_t size, enum dli_stat stat)
{
	/* Every statistic of today finalizes from the 1.0 terms; one that needs a later term checks
	 * here that `size` covers it. */
	if (!r || size < DLI_STATS_RECORD_SIZE_1_0)
		return NAN;
	return dli_stats_value(r, stat);
}

static int acc_merge(struct dli_stats_acc *acc, struct dli_stats_record *out)
{
	const struct dli_backend_ops *be = atomic_load(&acc->backend->ops);
	int first = 0;
	pthread_mutex_lock(&acc->lock);
	*out = acc->host;
	for (size_t i = 0; i < acc->n_devices; i++) {
		if (!acc->devices[i].dacc)
			continue;
		struct dli_stats_record d;
		int r = be->read(acc->devices[i].dacc, &d, sizeof d);
		if (r == 0)
			dli_stats_merge(out, &d);
		else if (!first)
			first = r;
	}
	pthread_mutex_unlock(&acc->lock);
	return first;
}

void dli_stats_acc_reset(struct dli_stats_acc *acc)
{
	if (!acc)
		return;
	const struct dli_backend_ops *be = atomic_load(&acc->backend->ops);
	pthread_mutex_lock(&acc->lock);
	dli_stats_record_init(&acc->host);
	if (acc->hist_counts)
		memset(acc->hist_counts, 0, DLI_HISTOGRAM_BUCKETS * sizeof *acc->hist_counts);
	acc->hist_device = false;
	for (size_t i = 0; i < acc->n_devices; i++)
		if (acc->devices[i].dacc)
			be->reset(acc->devices[i].dacc);
	pthread_mutex_unlock(&acc->lock);
}

/* ---- Histograms ---- */

int dli_stats_acc_histogram(struct dli_stats_acc *acc, bool on)
{
	if (!acc)
		return -EINVAL;
	pthread_mutex_lock(&acc->lock);
	if (on == acc->hist_on) {
		/* Already in that state: keep the counts. */
		pthread_mutex_unlock(&acc->lock);
		return 0;
	}
	/* On: the arrays come with the first counts (hist_arrays). Off: freed outside the lock. */
	uint64_t *old_counts = acc->hist_counts;
	double *old_limits = acc->hist_limits, *old_buckets = acc->hist_buckets;
	acc->hist_on = on;
	acc->hist_counts = NULL;
	acc->hist_limits = NULL;
	acc->hist_buckets = NULL;
	acc->hist_device = false;
	pthread_mutex_unlock(&acc->lock);
	free(old_counts);
	free(old_limits);
	free(old_buckets);
	return 0;
}

int dli_stats_acc_read_histogram(struct dli_stats_acc *acc, struct dli_histogram *out)
{
	if (!acc || !out)
		return -EINVAL;
	memset(out, 0, sizeof *out);
	pthread_mutex_lock(&acc->lock);
	int r = !acc->hist_on ? -EINVAL : acc->hist_device ? -ENOTSUP : 0;
	if (!r) {
		const struct dli_stats_record *h = &acc->host;
		uint64_t num = 0;
		for (int k = 0; acc->hist_counts && k < DLI_HISTOGRAM_BUCKETS; k++)
			num += acc->hist_counts[k];
		out->num = (double)num;
		out->min = out->num > 0 ? h->min : 0;
		out->max = out->num > 0 ? h->max : 0;
		out->sum = h->sum;
		out->sum_squares = h->sum_sq;
		if (out->num > 0) {
			out->n_buckets = dli_histogram_compact(acc->hist_counts, acc->hist_limits,
							       acc->hist_buckets);
			out->bucket_limit = acc->hist_limits;
			out->bucket = acc->hist_buckets;
		}
	}
	pthread_mutex_unlock(&acc->lock);
	return r;
}

/* The rows x cols view block-scaled formats take: cols is the last dimension. */
static void matrix_view(const struct dli_tensor *t, int64_t n, int64_t *rows, int64_t *cols)
{
	*cols = t->ndim > 0 ? t->shape[t->ndim - 1] : 1;
	*rows = *cols ? n / *cols : 0;
}

int dli_stats_add_block(struct dli_stats_acc *acc, const struct dli_tensor *t,
			const struct dli_block_spec *spec)
{
	if (!acc || !t || !spec)
		return -EINVAL;
	if (!(t = dli_view_resolve(t))) /* the block passes read a view's copy */
		return -ENOMEM;
	bool nvfp4 = spec->recipe == DLI_BLOCK_NVFP4 || spec->recipe == DLI_BLOCK_NVFP4_2D;
	/* A 1.2 module's spec stops before the NVFP4 recipe options (ABI 1.3), which this pass
	 * does not do: asked for, they are refused rather than ignored. */
	if (spec->size >= offsetof(struct dli_block_spec, rht_seed) + sizeof(spec->rht_seed) &&
	    (spec->stochastic_rounding || spec->rht))
		return refuse(acc, "the block-scaled statistics round to nearest-even without the "
				   "Hadamard transform: stochastic_rounding and rht are for "
				   "block_fake_quant only");
	if (spec->size < offsetof(struct dli_block_spec, stochastic_rounding) ||
	    (spec->recipe != DLI_BLOCK_MXFP8 && spec->recipe != DLI_BLOCK_FP8_1D &&
	     spec->recipe != DLI_BLOCK_FP8_2D && !nvfp4) ||
	    (!nvfp4 && spec->format != DLI_DTYPE_F8E4M3 && spec->format != DLI_DTYPE_F8E5M2))
		return refuse(acc, "cannot compare against block-scaled recipe %d with elements of "
				   "%s: expected MXFP8 or FP8 block scaling with f8e4m3 or f8e5m2, or NVFP4",
			      spec->recipe, dtype_name(spec->format));
	if (t->device.type == DLI_DEVICE_CUDA)
		return refuse(acc, "block-scaled statistics of a CUDA tensor are not supported yet (the "
				   "CUDA backend has no block-scaled pass): pass a host copy");
	if (t->device.type != DLI_DEVICE_CPU)
		return refuse(acc, "a tensor is on an unknown device type %d", (int)t->device.type);
	int64_t n = host_tensor_numel(acc, t, true);
	if (n <= 0)
		return (int)n;
	int64_t rows, cols;
	matrix_view(t, n, &rows, &cols);
	struct dli_stats_record rec, cmp, pass;
	double finite_sq;
	int r = dli_cpu_stats_finite_sq(t->data, t->dtype, n, NULL, &pass, &finite_sq);
	dli_stats_record_init(&rec);
	memcpy(&rec, &pass, offsetof(struct dli_stats_record, fp8_count));
	/* NVFP4's global scale comes from the amax this statistics pass has just found, so that
	 * its compare reads the tensor once instead of twice; all three compares are spared a term
	 * by its sum of finite x^2, NVFP4's a count by its zeros (kernels-private.h). */
	if (!r && nvfp4)
		r = dli_cpu_nvfp4_compare_known(t->data, t->dtype, rows, cols,
						spec->recipe == DLI_BLOCK_NVFP4_2D ? 2 : 1,
						spec->columnwise != 0, (float)pass.amax, finite_sq,
						pass.zero_count, NULL, &cmp);
	else if (!r && spec->recipe == DLI_BLOCK_MXFP8)
		r = dli_cpu_mx_compare_sum_sq(t->data, t->dtype, rows, cols, spec->format,
					      spec->columnwise != 0, finite_sq, NULL, &cmp);
	else if (!r)
		r = dli_cpu_fp8b_compare_sum_sq(t->data, t->dtype, rows, cols, spec->format,
						spec->recipe == DLI_BLOCK_FP8_2D ? 2 : 1,
						spec->columnwise != 0, spec->pow2_scales != 0,
						finite_sq, NULL, &cmp);
	if (r)
		return r;
	dli_stats_merge(&rec, &cmp);
	return merge_host_hist(acc, &rec, t, n);
}

/* ---- For the reduction across ranks (core/reduce.c) ---- */

struct dli_context *dli_stats_acc_context(const struct dli_stats_acc *acc)
{
	return acc->ctx;
}

struct dli_share *dli_stats_acc_get_share(const struct dli_stats_acc *acc)
{
	return acc->share;
}

void dli_stats_acc_set_share(struct dli_stats_acc *acc, struct dli_share *share,
			     void (*forget)(struct dli_context *ctx, struct dli_stats_acc *acc))
{
	acc->share = share;
	acc->forget = forget;
}

int dli_stats_acc_local(struct dli_stats_acc *acc, struct dli_stats_record *rec, uint64_t *counts,
			bool *has_hist)
{
	int r = acc_merge(acc, rec);
	pthread_mutex_lock(&acc->lock);
	*has_hist = acc->hist_on;
	if (acc->hist_counts)
		memcpy(counts, acc->hist_counts, DLI_HISTOGRAM_BUCKETS * sizeof *counts);
	else if (acc->hist_on)
		memset(counts, 0, DLI_HISTOGRAM_BUCKETS * sizeof *counts);
	pthread_mutex_unlock(&acc->lock);
	return r;
}

void dli_stats_acc_replace(struct dli_stats_acc *acc, const struct dli_stats_record *rec,
			   const uint64_t *counts)
{
	const struct dli_backend_ops *be = atomic_load(&acc->backend->ops);
	pthread_mutex_lock(&acc->lock);
	/* The device records are in `rec` already (dli_stats_acc_local read them). */
	for (size_t i = 0; i < acc->n_devices; i++)
		if (acc->devices[i].dacc)
			be->reset(acc->devices[i].dacc);
	acc->host = *rec;
	/* Out of memory for the arrays: the merged histogram cannot be kept (read says none). */
	if (acc->hist_on && counts && hist_arrays(acc))
		memcpy(acc->hist_counts, counts, DLI_HISTOGRAM_BUCKETS * sizeof *counts);
	pthread_mutex_unlock(&acc->lock);
}
