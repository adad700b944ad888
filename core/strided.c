/* Strided views of host tensors: checking a host's strides, collapsing the dimensions that are
 * contiguous together into runs, the one contiguous copy made for whatever cannot read runs, and
 * the thread-local "view being dispatched" through which the host calls recognize a view. */
#include <errno.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "context-private.h"
#include "strided-private.h"

_Thread_local unsigned long long dli_view_gathers;

/* The view this thread dispatches: set only for the duration of one dispatch. */
static _Thread_local struct dli_view *current;

static int bad(char *why, size_t size, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int bad(char *why, size_t size, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(why, size, fmt, ap);
	va_end(ap);
	return -EINVAL;
}

int dli_view_init(struct dli_view *v, const struct dli_tensor *t, const int64_t *strides,
		  char *why, size_t why_size)
{
	memset(v, 0, sizeof *v);
	if (!t || !strides)
		return bad(why, why_size, "no tensor or no strides");
	v->t = *t;
	v->t.contiguous = false;
	if (t->device.type == DLI_DEVICE_CUDA)
		return bad(why, why_size,
			   "strides of a CUDA tensor are not supported (the CUDA backend reads "
			   "contiguous tensors only): pass a contiguous tensor with strides NULL");
	if (t->device.type != DLI_DEVICE_CPU)
		return bad(why, why_size, "the tensor is on an unknown device type %d",
			   (int)t->device.type);
	const int64_t es = (int64_t)dli_dtype_size(t->dtype);
	if (!es)
		return bad(why, why_size, "the tensor has an unknown dtype %d", (int)t->dtype);
	if (t->ndim < 0 || t->ndim > DLI_TENSOR_MAX_DIMS)
		return bad(why, why_size, "the tensor has an invalid ndim %d", t->ndim);
	int64_t n = 1;
	for (int i = 0; i < t->ndim; i++) {
		if (t->shape[i] < 0)
			return bad(why, why_size, "the tensor has an invalid shape (dim %d is %lld)", i,
				   (long long)t->shape[i]);
		if (t->shape[i] == 0)
			n = 0; /* empty, whatever the other dimensions (tensor.h) */
	}
	for (int i = 0; i < t->ndim && n; i++) {
		if (n > INT64_MAX / es / t->shape[i])
			return bad(why, why_size, "the tensor's size in bytes overflows 64 bits (at dim "
						  "%d, %lld)", i, (long long)t->shape[i]);
		n *= t->shape[i];
	}
	if (n == 0) {
		/* Nothing is read: any strides will do. */
		v->t.contiguous = true;
		return DLI_VIEW_CONTIGUOUS;
	}
	if (!t->data)
		return bad(why, why_size, "a non-empty view has no data");

	/* A dim of one element has no step: its stride is never used. */
	int64_t dense = 1, span = 0;
	bool is_dense = true;
	for (int i = t->ndim - 1; i >= 0; i--) {
		int64_t len = t->shape[i], s = strides[i];
		if (len == 1)
			continue;
		if (s == 0)
			return bad(why, why_size,
				   "dim %d has %lld elements and stride 0 (a broadcast): statistics "
				   "would count each element %lld times; pass the tensor before it is "
				   "broadcast",
				   i, (long long)len, (long long)len);
		is_dense = is_dense && s == dense;
		dense *= len;
		/* The farthest byte the view reaches from data must be representable. */
		uint64_t a = s < 0 ? 0 - (uint64_t)s : (uint64_t)s;
		if (a > (uint64_t)(INT64_MAX / es / (len - 1)) ||
		    (int64_t)a * es * (len - 1) > INT64_MAX - span)
			return bad(why, why_size,
				   "stride %lld of dim %d (%lld elements) reaches beyond 2^63 bytes",
				   (long long)s, i, (long long)len);
		span += (int64_t)a * es * (len - 1);
	}
	if (is_dense) {
		v->t.contiguous = true;
		return DLI_VIEW_CONTIGUOUS;
	}

	/* Collapse: an outer dim whose stride is the inner dim's extent continues it. */
	int64_t len[DLI_TENSOR_MAX_DIMS], step[DLI_TENSOR_MAX_DIMS];
	int m = 0;
	for (int i = 0; i < t->ndim; i++) {
		if (t->shape[i] == 1)
			continue;
		int64_t extent;
		if (m > 0 && !__builtin_mul_overflow(strides[i], t->shape[i], &extent) &&
		    step[m - 1] == extent) {
			len[m - 1] *= t->shape[i];
			step[m - 1] = strides[i];
			continue;
		}
		len[m] = t->shape[i];
		step[m] = strides[i];
		m++;
	}
	struct dli_cpu_runs *r = &v->runs;
	r->base = t->data;
	r->dtype = t->dtype;
	r->n = n;
	r->run_len = len[m - 1];
	r->inner = step[m - 1] * es;
	r->n_outer = m - 1;
	for (int i = 0; i < m - 1; i++) {
		r->outer[i] = len[i];
		r->step[i] = step[i] * es;
	}
	/* Outer steps of any sign, overlapping ones too, are only where runs start: the pass reads
	 * runs in the view's order whatever they are. */
	v->direct = step[m - 1] == 1 && r->run_len * es >= DLI_VIEW_MIN_RUN_BYTES;
	return DLI_VIEW_STRIDED;
}

void dli_view_finish(struct dli_view *v)
{
	free(v->copy);
	v->copy = NULL;
}

const struct dli_tensor *dli_view_contiguous(struct dli_view *v)
{
	if (v->copy)
		return &v->copy_t;
	if (v->copy_failed)
		return NULL;
	size_t bytes = (size_t)v->runs.n * dli_dtype_size(v->runs.dtype);
	if (!(v->copy = malloc(bytes))) {
		v->copy_failed = true;
		return NULL;
	}
	dli_cpu_runs_gather(&v->runs, v->copy);
	dli_view_gathers++;
	v->copy_t = v->t;
	v->copy_t.data = v->copy;
	v->copy_t.contiguous = true;
	return &v->copy_t;
}

struct dli_view *dli_view_enter(struct dli_view *v)
{
	struct dli_view *prev = current;
	current = v;
	return prev;
}

void dli_view_leave(struct dli_view *prev)
{
	current = prev;
}

struct dli_view *dli_view_of(const struct dli_tensor *t)
{
	struct dli_view *v = current;
	return v && t == &v->t ? v : NULL;
}

const struct dli_tensor *dli_view_resolve(const struct dli_tensor *t)
{
	struct dli_view *v = dli_view_of(t);
	return v ? dli_view_contiguous(v) : t;
}

int dli_view_stats(struct dli_view *v, struct dli_stats_record *out)
{
	if (v->direct)
		return dli_cpu_stats_runs(&v->runs, NULL, out);
	const struct dli_tensor *c = dli_view_contiguous(v);
	if (!c)
		return -ENOMEM;
	return dli_cpu_stats(c->data, c->dtype, v->runs.n, NULL, out);
}

/* ---- log_tensor_stats with strides (dli_call) ---- */

int dli_call_view_begin(struct dli_call_view *cv, struct dli_layer *l, const char *name,
			void *args)
{
	const struct dli_log_tensor_stats_args *a = args;
	cv->active = cv->strided = false;
	if (!a || strcmp(name, DLI_CALL_LOG_TENSOR_STATS) ||
	    !DLI_HAS_MEMBER(a, struct dli_log_tensor_stats_args, strides) || !a->strides ||
	    !a->tensor)
		return 0;
	char why[512];
	int r = dli_view_init(&cv->view, a->tensor, a->strides, why, sizeof why);
	if (r < 0) {
		dli_view_refused(l, "dli_call(log_tensor_stats)", a->tensor_name, why);
		return r;
	}
	/* A newer host's members past ours are not passed on: the features were built with ours. */
	memcpy(&cv->as_view, a, sizeof cv->as_view);
	cv->as_view.size = sizeof cv->as_view;
	cv->as_view.tensor = &cv->view.t;
	cv->as_copy = cv->as_view;
	cv->as_copy.strides = NULL;
	if (r == DLI_VIEW_CONTIGUOUS) {
		cv->as_view.strides = NULL;
	} else {
		cv->strided = true;
		cv->outer = dli_view_enter(&cv->view);
	}
	cv->active = true;
	return 0;
}

void *dli_call_view_args(struct dli_call_view *cv, uint32_t flags)
{
	if (!cv->strided || (flags & DLI_FEATURE_STRIDED))
		return &cv->as_view;
	const struct dli_tensor *c = dli_view_contiguous(&cv->view);
	if (!c)
		return NULL;
	cv->as_copy.tensor = c;
	return &cv->as_copy;
}

void dli_call_view_end(struct dli_call_view *cv)
{
	if (!cv->active)
		return;
	if (cv->strided)
		dli_view_leave(cv->outer);
	dli_view_finish(&cv->view);
}
