/* dli_cuda.so: the CUDA backend, a module of namespace DLI_BACKEND_NAMESPACE whose one backend
 * (struct dli_backend_ops, dlinspect/plugin.h) takes CUDA tensors. It checks a tensor, queues the
 * passes of kernels/cuda/passes.cu on the tensor's stream and leaves the result in the
 * accumulator's device record; only read() waits.
 *
 * Streams: an accumulator has one device record. Every add records an event on its stream, and an
 * add on another stream first makes that stream wait for the event (cudaStreamWaitEvent: the host
 * does not wait). So adds from several streams are serialized on the device, in the order they
 * were called, and the record, the scratch and the per-block parts need no more than one copy.
 * read() copies on the stream of the last add and waits for that stream: a stream passed to add
 * must stay alive until the accumulator is read or reset.
 *
 * reset() only marks the record stale; the next finalize starts it afresh, so reset never touches
 * the device either. */
#include <cuda_runtime.h>
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "convert.cuh"
#include "names-private.h"
#include "no-gpu.h"
#include "passes.h"

using namespace dli_cuda;

namespace {

/* Resident blocks of pass_threads threads an SM can hold at most (2048 threads on sm_80/sm_90). */
constexpr int max_blocks_per_sm = 8;
constexpr int err_len = DLI_BACKEND_ERR_SIZE; /* acc_create's message buffer */

struct occupancy {
	const void *fn;
	int blocks_per_sm;
};

struct dacc {
	int device;
	int sm_count;
	pthread_mutex_t lock; /* the core serializes calls on one accumulator; this makes it safe anyway */
	void *mem;            /* one allocation: record, scratch, parts */
	dli_stats_record *rec;
	pass_scratch *scratch;
	part *parts;
	unsigned max_parts;
	cudaEvent_t done;   /* recorded after each add, on its stream */
	cudaStream_t last;  /* the stream of the last add */
	bool queued;        /* `done` was recorded at least once */
	bool fresh;         /* no add since create or reset: the device record is stale */
	occupancy occ[32];
	int n_occ;
	char err[err_len];  /* the last failure (the backend ops have no way to hand it out yet) */
};

int cuda_errno(cudaError_t e)
{
	switch (e) {
	case cudaErrorMemoryAllocation: return -ENOMEM;
	case cudaErrorInvalidValue:
	case cudaErrorInvalidDevice:
	case cudaErrorInvalidResourceHandle: return -EINVAL;
	case cudaErrorNoDevice:
	case cudaErrorInsufficientDriver: return -ENODEV;
	default: return -EIO;
	}
}

int fail(char *buf, int rc, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
int fail(char *buf, int rc, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(buf, err_len, fmt, ap);
	va_end(ap);
	return rc;
}

/* A CUDA call's failure as a negative errno, its text in buf. */
int fail_cuda(char *buf, cudaError_t e, const char *what)
{
	return fail(buf, cuda_errno(e), "%s: %s (%s)", what, cudaGetErrorString(e),
		    cudaGetErrorName(e));
}

/* Makes `device` current for the scope and restores the host's device after: the backend runs
 * on the host's threads and must not change their current device. */
struct device_scope {
	int prev = -1;
	cudaError_t status;
	explicit device_scope(int device)
	{
		status = cudaGetDevice(&prev);
		if (status == cudaSuccess && prev != device)
			status = cudaSetDevice(device);
		else
			prev = -1;
	}
	~device_scope()
	{
		if (prev >= 0)
			cudaSetDevice(prev);
	}
};

struct lock_scope {
	pthread_mutex_t *m;
	explicit lock_scope(pthread_mutex_t *mutex) : m(mutex) { pthread_mutex_lock(m); }
	~lock_scope() { pthread_mutex_unlock(m); }
};

const char *dtype_name(enum dli_dtype d)
{
	const char *name = dli_dtype_name(d);
	return name ? name : "unknown dtype";
}

/* The element count of a device tensor on the accumulator's device, or a negative errno. */
long long check_tensor(dacc *a, const dli_tensor *t, const char *what)
{
	if (t->device.type != DLI_DEVICE_CUDA)
		return fail(a->err, -EINVAL, "the %s tensor is not in CUDA memory", what);
	if (t->device.index != a->device)
		return fail(a->err, -EINVAL,
			    "the %s tensor is on CUDA device %d, the accumulator on device %d", what,
			    t->device.index, a->device);
	if (!t->contiguous)
		return fail(a->err, -EINVAL,
			    "cannot read a non-contiguous %s tensor: pass a contiguous copy", what);
	if (t->ndim < 0 || t->ndim > DLI_TENSOR_MAX_DIMS)
		return fail(a->err, -EINVAL, "the %s tensor has an invalid ndim %d", what, t->ndim);
	long long n = 1;
	for (int i = 0; i < t->ndim; i++) {
		if (t->shape[i] < 0 || (t->shape[i] && n > INT64_MAX / t->shape[i]))
			return fail(a->err, -EINVAL,
				    "the %s tensor has an invalid shape (dim %d is %lld)", what, i,
				    (long long)t->shape[i]);
		n *= t->shape[i];
	}
	if (n && !t->data)
		return fail(a->err, -EINVAL, "the non-empty %s tensor has no data", what);
	const size_t size = dli_dtype_size(t->dtype);
	if (n && size && (uintptr_t)t->data % size)
		return fail(a->err, -EINVAL, "the %s tensor's data is not aligned to its %s elements",
			    what, dtype_name(t->dtype));
	return n;
}

/* Blocks per SM the kernel can keep resident (cached per accumulator: it depends on the device). */
int blocks_per_sm(dacc *a, const void *fn)
{
	for (int i = 0; i < a->n_occ; i++)
		if (a->occ[i].fn == fn)
			return a->occ[i].blocks_per_sm;
	int b = 0;
	if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&b, fn, pass_threads, 0) != cudaSuccess ||
	    b < 1)
		b = 1;
	if (b > max_blocks_per_sm)
		b = max_blocks_per_sm;
	if (a->n_occ < (int)(sizeof a->occ / sizeof a->occ[0]))
		a->occ[a->n_occ++] = occupancy{fn, b};
	return b;
}

/* Enough blocks for `work` units of `per_block` each, at most one resident wave: the passes are
 * grid-stride loops, and a second partial wave would only add a tail. */
unsigned grid_for(dacc *a, const void *fn, unsigned long long work, unsigned long long per_block)
{
	unsigned long long want = (work + per_block - 1) / per_block;
	unsigned long long cap = (unsigned long long)a->sm_count * blocks_per_sm(a, fn);
	if (cap > a->max_parts)
		cap = a->max_parts;
	if (want > cap)
		want = cap;
	return want ? (unsigned)want : 1u;
}

cudaError_t launch(const void *fn, unsigned grid, void *params, cudaStream_t stream)
{
	void *args[] = {params};
	return cudaLaunchKernel(fn, dim3(grid), dim3(pass_threads), args, 0, stream);
}

/* Orders this add after the previous one when it came on another stream. */
int order_after_last(dacc *a, cudaStream_t stream)
{
	if (a->queued && a->last != stream) {
		cudaError_t e = cudaStreamWaitEvent(stream, a->done, 0);
		if (e != cudaSuccess)
			return fail_cuda(a->err, e, "cudaStreamWaitEvent (ordering after the previous add)");
	}
	return 0;
}

int mark_queued(dacc *a, cudaStream_t stream)
{
	cudaError_t e = cudaEventRecord(a->done, stream);
	if (e != cudaSuccess)
		return fail_cuda(a->err, e, "cudaEventRecord");
	a->last = stream;
	a->queued = true;
	return 0;
}

/* The finalize kernel: merges n_parts parts into the record (afresh after a reset). */
int finalize(dacc *a, finalize_params fp, cudaStream_t stream)
{
	fp.parts = a->parts;
	fp.rec = a->rec;
	fp.scratch = a->scratch;
	if (a->fresh)
		fp.flags |= FIN_FRESH;
	cudaError_t e = launch(finalize_kernel(), 1, &fp, stream);
	if (e != cudaSuccess)
		return fail_cuda(a->err, e, "launching the statistics merge kernel");
	a->fresh = false;
	return 0;
}

/* ---- The table ---- */

void *acc_create(int device, char *err)
{
	char scratch_err[err_len];
	if (!err)
		err = scratch_err;
	int count = 0;
	cudaError_t e = cudaGetDeviceCount(&count);
	if (e != cudaSuccess) {
		if (dli_cuda_is_no_gpu(e))
			dli_cuda_describe(err, err_len, "cudaGetDeviceCount", e);
		else
			fail_cuda(err, e, "no usable CUDA device (cudaGetDeviceCount)");
		return NULL;
	}
	if (count == 0) {
		dli_cuda_describe(err, err_len, "cudaGetDeviceCount", cudaSuccess);
		return NULL;
	}
	if (device < 0 || device >= count) {
		fail(err, -EINVAL, "CUDA device %d does not exist (%d device%s)", device, count,
		     count == 1 ? "" : "s");
		return NULL;
	}
	device_scope ds(device);
	if (ds.status != cudaSuccess) {
		fail_cuda(err, ds.status, "cudaSetDevice");
		return NULL;
	}
	dacc *a = (dacc *)calloc(1, sizeof *a);
	if (!a) {
		fail(err, -ENOMEM, "out of memory");
		return NULL;
	}
	a->device = device;
	a->fresh = true;
	if ((e = cudaDeviceGetAttribute(&a->sm_count, cudaDevAttrMultiProcessorCount, device)) !=
	    cudaSuccess) {
		fail_cuda(err, e, "cudaDeviceGetAttribute");
		goto out_free;
	}
	a->max_parts = (unsigned)a->sm_count * max_blocks_per_sm;
	{
		/* Record and scratch first, each padded to 256 bytes, then the parts. */
		const size_t head = 512, size = head + a->max_parts * sizeof(part);
		if ((e = cudaMalloc(&a->mem, size)) != cudaSuccess) {
			fail_cuda(err, e, "cudaMalloc of the accumulator");
			goto out_free;
		}
		a->rec = (dli_stats_record *)a->mem;
		a->scratch = (pass_scratch *)((char *)a->mem + 256);
		a->parts = (part *)((char *)a->mem + head);
	}
	if ((e = cudaEventCreateWithFlags(&a->done, cudaEventDisableTiming)) != cudaSuccess) {
		fail_cuda(err, e, "cudaEventCreate");
		goto out_mem;
	}
	pthread_mutex_init(&a->lock, NULL);
	return a;

out_mem:
	cudaFree(a->mem);
out_free:
	free(a);
	return NULL;
}

void acc_destroy(void *dacc_)
{
	dacc *a = (dacc *)dacc_;
	if (!a)
		return;
	{
		device_scope ds(a->device);
		/* cudaFree waits for the device anyway; waiting for our own event first says why. */
		if (a->queued)
			cudaEventSynchronize(a->done);
		cudaEventDestroy(a->done);
		cudaFree(a->mem);
	}
	pthread_mutex_destroy(&a->lock);
	free(a);
}

int acc_add(void *dacc_, const dli_tensor *t, const dli_fp8_spec *fp8)
{
	dacc *a = (dacc *)dacc_;
	if (!a || !t)
		return -EINVAL;
	lock_scope ls(&a->lock);
	long long n = check_tensor(a, t, "input");
	if (n <= 0)
		return (int)n; /* an empty tensor adds nothing, as on the CPU */
	if (fp8 && fp8->format != DLI_DTYPE_F8E4M3 && fp8->format != DLI_DTYPE_F8E5M2)
		return fail(a->err, -EINVAL, "cannot compare against FP8 format %s: expected f8e4m3 or "
			    "f8e5m2", dtype_name(fp8->format));
	/* The CPU pass divides by the scale and refuses what it cannot divide by. */
	if (fp8 && !fp8->current_scaling && (!(fp8->scale > 0.0f) || fp8->scale > FLT_MAX))
		return fail(a->err, -EINVAL, "the FP8 comparison needs a positive finite scale, not %g",
			    (double)fp8->scale);
	const bool current = fp8 && fp8->current_scaling;
	const pass_mode first = !fp8 || current ? MODE_STATS : MODE_STATS_FP8;
	const void *fn = stats_pass_kernel(t->dtype, first, fp8 ? fp8->format : DLI_DTYPE_F8E4M3);
	const void *fn2 = current ? stats_pass_kernel(t->dtype, MODE_FP8, fp8->format) : NULL;
	if (!fn || (current && !fn2))
		return fail(a->err, -EINVAL, "cannot read a %s tensor: %s", dtype_name(t->dtype),
			    fp8 ? "the FP8 comparison takes f32, f16 or bf16"
				: "expected f32, f16, bf16, f8e4m3 or f8e5m2");

	device_scope ds(a->device);
	if (ds.status != cudaSuccess)
		return fail_cuda(a->err, ds.status, "cudaSetDevice");
	cudaStream_t stream = (cudaStream_t)t->device.stream;
	int rc = order_after_last(a, stream);
	if (rc)
		return rc;

	/* Scalar head up to the first 16-byte boundary, then whole warp tiles. */
	const size_t esize = dli_dtype_size(t->dtype);
	const unsigned long long epv = 16 / esize;
	unsigned long long head = ((16 - (uintptr_t)t->data % 16) % 16) / esize;
	if (head > (unsigned long long)n)
		head = (unsigned long long)n;
	pass_params p = {};
	p.data = t->data;
	p.n = (unsigned long long)n;
	p.head = head;
	p.n_warp_tiles = (p.n - head) / epv / warp_tile_vecs;
	p.parts = a->parts;
	p.scratch = a->scratch;
	p.scale = fp8 && !current ? fp8->scale : 1.0f;

	const unsigned long long tiles_per_block = pass_threads / 32;
	unsigned grid = grid_for(a, fn, p.n_warp_tiles, tiles_per_block);
	cudaError_t e = launch(fn, grid, &p, stream);
	if (e != cudaSuccess)
		return fail_cuda(a->err, e, "launching the statistics pass");

	finalize_params fp = {};
	fp.n_parts = grid;
	fp.n = p.n;
	fp.flags = FIN_STATS;
	if (fp8 && !current) {
		fp.flags |= FIN_FP8;
		fp.scale = fp8->scale;
	} else if (current) {
		fp.flags |= FIN_WRITE_SCALE;
		fp.fp8_max = fp8->format == DLI_DTYPE_F8E4M3 ? fp8_format<DLI_DTYPE_F8E4M3>::max
							     : fp8_format<DLI_DTYPE_F8E5M2>::max;
		fp.margin = fp8->margin;
	}
	if ((rc = finalize(a, fp, stream)))
		return rc;

	if (current) {
		/* The second pass reads the scale the finalize above left in the scratch. */
		grid = grid_for(a, fn2, p.n_warp_tiles, tiles_per_block);
		if ((e = launch(fn2, grid, &p, stream)) != cudaSuccess)
			return fail_cuda(a->err, e, "launching the FP8 comparison pass");
		finalize_params f2 = {};
		f2.n_parts = grid;
		f2.n = p.n;
		f2.flags = FIN_FP8 | FIN_SCALE_SCRATCH;
		if ((rc = finalize(a, f2, stream)))
			return rc;
	}
	return mark_queued(a, stream);
}

int acc_add_quantized(void *dacc_, const dli_tensor *hp, const dli_quantized_tensor *q)
{
	dacc *a = (dacc *)dacc_;
	if (!a || !q)
		return -EINVAL;
	lock_scope ls(&a->lock);
	const dli_tensor *qt = &q->data;
	if (qt->dtype != DLI_DTYPE_F8E4M3 && qt->dtype != DLI_DTYPE_F8E5M2)
		return fail(a->err, -EINVAL, "a quantized tensor has dtype %s: expected f8e4m3 or f8e5m2",
			    dtype_name(qt->dtype));
	if (!q->scale_inv || q->scale_inv_count < 1)
		return fail(a->err, -EINVAL, "a quantized tensor has no scale_inv");
	long long n = check_tensor(a, qt, "quantized");
	if (n < 0)
		return (int)n;
	const void *fn = quantized_pass_kernel(hp ? hp->dtype : DLI_DTYPE_F32, qt->dtype);
	if (hp) {
		long long n_hp = check_tensor(a, hp, "high-precision");
		if (n_hp < 0)
			return (int)n_hp;
		if (n_hp != n)
			return fail(a->err, -EINVAL, "a quantized tensor (%lld elements) and its "
				    "high-precision tensor (%lld) differ in size", n, n_hp);
		if (!fn)
			return fail(a->err, -EINVAL, "cannot compare a %s tensor: the FP8 comparison "
				    "takes f32, f16 or bf16", dtype_name(hp->dtype));
	}
	/* With several scale_invs (block scaling) which one dequantizes an element depends on the
	 * recipe's layout; like the CPU pass, only their range is taken then. */
	if (hp && q->scale_inv_count != 1)
		return fail(a->err, -ENOTSUP, "comparing with a quantized tensor needs per-tensor "
			    "scaling (1 scale_inv, not %lld)", (long long)q->scale_inv_count);
	if ((uintptr_t)q->scale_inv % sizeof(float))
		return fail(a->err, -EINVAL, "a quantized tensor's scale_inv is not aligned");

	device_scope ds(a->device);
	if (ds.status != cudaSuccess)
		return fail_cuda(a->err, ds.status, "cudaSetDevice");
	cudaStream_t stream = (cudaStream_t)qt->device.stream;
	int rc = order_after_last(a, stream);
	if (rc)
		return rc;

	pass_params p = {};
	p.data = hp ? hp->data : NULL;
	p.q = (const uint8_t *)qt->data;
	p.scale_inv = q->scale_inv;
	p.n_scale_inv = q->scale_inv_count;
	p.n = hp ? (unsigned long long)n : 0;
	p.parts = a->parts;
	/* Vectors (one per thread and step) when hp and the codes both start 16-byte aligned. */
	if (hp && (uintptr_t)hp->data % 16 == 0 && (uintptr_t)qt->data % 16 == 0)
		p.n_warp_tiles = p.n / (16 / dli_dtype_size(hp->dtype));
	const unsigned long long work = p.n_warp_tiles ? p.n_warp_tiles : p.n;
	const unsigned grid = grid_for(a, fn, work > (unsigned long long)p.n_scale_inv
						      ? work : (unsigned long long)p.n_scale_inv,
				       pass_threads);
	cudaError_t e = launch(fn, grid, &p, stream);
	if (e != cudaSuccess)
		return fail_cuda(a->err, e, "launching the quantized comparison pass");

	finalize_params fp = {};
	fp.n_parts = grid;
	fp.n = p.n;
	fp.flags = FIN_FP8 | FIN_SI_PART;
	if ((rc = finalize(a, fp, stream)))
		return rc;
	return mark_queued(a, stream);
}

int acc_read_record(void *dacc_, dli_stats_record *out)
{
	dacc *a = (dacc *)dacc_;
	if (!a || !out)
		return -EINVAL;
	lock_scope ls(&a->lock);
	if (a->fresh) {
		record_init(*out);
		return 0;
	}
	device_scope ds(a->device);
	if (ds.status != cudaSuccess)
		return fail_cuda(a->err, ds.status, "cudaSetDevice");
	cudaError_t e = cudaMemcpyAsync(out, a->rec, sizeof *out, cudaMemcpyDeviceToHost, a->last);
	if (e == cudaSuccess)
		e = cudaStreamSynchronize(a->last);
	if (e != cudaSuccess) {
		record_init(*out);
		return fail_cuda(a->err, e, "reading the statistics record from the device");
	}
	return 0;
}

/* The table's read: the whole record, then as much of it as the caller's struct holds. */
int acc_read(void *dacc, dli_stats_record *out, size_t size)
{
	if (!out)
		return -EINVAL;
	dli_stats_record rec;
	record_init(rec);
	int r = acc_read_record(dacc, &rec);
	memcpy(out, &rec, size < sizeof rec ? size : sizeof rec);
	return r;
}

void acc_reset(void *dacc_)
{
	dacc *a = (dacc *)dacc_;
	if (!a)
		return;
	lock_scope ls(&a->lock);
	a->fresh = true;
}


const struct dli_backend_ops ops = {
	sizeof(struct dli_backend_ops),
	acc_create,
	acc_destroy,
	acc_add,
	acc_add_quantized,
	acc_read,
	acc_reset,
};

const struct dli_backend_desc cuda_backend = {
	sizeof(struct dli_backend_desc),
	"cuda",
	DLI_DEVICE_CUDA,
	"statistics of tensors in CUDA device memory, computed on the tensor's stream",
	&ops,
};

const struct dli_backend_desc *const backends[] = {&cuda_backend};

const struct dli_module module = {
	sizeof(struct dli_module),
	DLI_ABI_MAJOR,
	DLI_ABI_MINOR,
	DLI_CUDA_BACKEND_FILE,
	DLI_BACKEND_NAMESPACE,
	"dlinspect's CUDA backend: statistics of CUDA tensors (loaded on the first one)",
	nullptr, 0, nullptr, 0, nullptr, 0,
	backends, 1,
};

} // namespace

/* Read without loading the file: a directory scan skips a backend (plugin.h). */
DLI_MODULE_NAMESPACE(DLI_BACKEND_NAMESPACE);

extern "C" DLI_EXPORT const struct dli_module *DLI_MODULE_ENTRY(const struct dli_host *host);

const struct dli_module *DLI_MODULE_ENTRY(const struct dli_host *)
{
	return &module;
}
