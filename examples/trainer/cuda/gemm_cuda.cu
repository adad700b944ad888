/* The trainer's CUDA GEMM backend (gemm_cuda.h): packs the host FP8 codes into cuBLASLt's TN
 * layout, runs dli_tc_fp8_gemm, copies the result back. Buffers grow to the largest GEMM seen and
 * are reused, so a training step allocates nothing after the first. */
#include <cuda_runtime.h>
#include <stdlib.h>

#include "gemm_cuda.h"
#include "tc-private.h"

using namespace dli_tc_impl;

namespace {

struct cuda_backend {
	struct dli_tc *tc;
	const struct dlt_gemm_backend *fallback;
	cudaStream_t stream;
	void *dev;	       /* x codes | w codes | y, each 256-byte aligned */
	size_t dev_bytes;
	float *dev_scale_inv;  /* x's, w's */
	uint8_t *host;	       /* the same layout, for packing and unpacking */
	size_t host_bytes;
	struct dli_error err;
};

int64_t up16(int64_t v)
{
	return (v + 15) / 16 * 16;
}

size_t up256(size_t v)
{
	return (v + 255) / 256 * 256;
}

int cuda_failed(cuda_backend *b, const char *what, cudaError_t e)
{
	return fail(&b->err, e == cudaErrorMemoryAllocation ? -ENOMEM : -EIO,
		    "cuda gemm backend: %s: %s", what, cudaGetErrorString(e));
}

int reserve(cuda_backend *b, size_t bytes)
{
	if (bytes > b->host_bytes) {
		void *h = realloc(b->host, bytes);
		if (!h)
			return fail(&b->err, -ENOMEM, "cuda gemm backend: out of memory");
		b->host = (uint8_t *)h;
		b->host_bytes = bytes;
	}
	if (bytes > b->dev_bytes) {
		cudaFree(b->dev);
		b->dev = NULL;
		b->dev_bytes = 0;
		const cudaError_t e = cudaMalloc(&b->dev, bytes);
		if (e != cudaSuccess) {
			cudaGetLastError();
			return cuda_failed(b, "cudaMalloc", e);
		}
		b->dev_bytes = bytes;
	}
	return 0;
}

int cuda_run(void *state, const struct dlt_gemm *g)
{
	cuda_backend *b = (cuda_backend *)state;
	const bool native = g->fp8 && g->a.codes && g->b.codes && g->a.scale_inv &&
			    g->b.scale_inv && is_fp8(g->a.format) && is_fp8(g->b.format) &&
			    !(g->a.format == DLI_DTYPE_F8E5M2 && g->b.format == DLI_DTYPE_F8E5M2);
	if (!native)
		return b->fallback->run(b->fallback->state, g);
	if (!g->c || g->m < 0 || g->n < 0 || g->k < 0)
		return fail(&b->err, -EINVAL, "cuda gemm backend: bad GEMM (m %d n %d k %d)", g->m,
			    g->n, g->k);
	const int64_t m = g->m, n = g->n, k = g->k;
	if (m == 0 || n == 0)
		return 0;
	if (k == 0) {
		memset(g->c, 0, (size_t)(m * n) * sizeof(float));
		return 0;
	}

	/* x = op(a) as M x K and w = op(b)^T as N x K, k contiguous, zeros around. */
	const int64_t M = up16(m), N = up16(n), K = up16(k);
	const size_t x_bytes = up256((size_t)(M * K)), w_bytes = up256((size_t)(N * K));
	const size_t y_bytes = (size_t)(M * N) * sizeof(float);
	int r = reserve(b, x_bytes + w_bytes + y_bytes);
	if (r < 0)
		return r;
	uint8_t *hx = b->host, *hw = b->host + x_bytes;
	memset(b->host, 0, x_bytes + w_bytes);
	for (int64_t i = 0; i < m; i++)
		for (int64_t j = 0; j < k; j++)
			hx[i * K + j] = g->trans_a ? g->a.codes[j * m + i] : g->a.codes[i * k + j];
	for (int64_t i = 0; i < n; i++)
		for (int64_t j = 0; j < k; j++)
			hw[i * K + j] = g->trans_b ? g->b.codes[i * k + j] : g->b.codes[j * n + i];
	const float scale_inv[2] = {g->a.scale_inv[0], g->b.scale_inv[0]};

	uint8_t *dx = (uint8_t *)b->dev, *dw = dx + x_bytes;
	float *dy = (float *)(dw + w_bytes);
	cudaError_t e = cudaMemcpyAsync(b->dev, b->host, x_bytes + w_bytes, cudaMemcpyHostToDevice,
					b->stream);
	if (e == cudaSuccess)
		e = cudaMemcpyAsync(b->dev_scale_inv, scale_inv, sizeof scale_inv,
				    cudaMemcpyHostToDevice, b->stream);
	if (e != cudaSuccess)
		return cuda_failed(b, "copying the operands", e);

	struct dli_tc_gemm tg;
	memset(&tg, 0, sizeof tg);
	tg.m = M;
	tg.n = N;
	tg.k = K;
	tg.x = dx;
	tg.x_type = g->a.format;
	tg.x_scale_inv = b->dev_scale_inv;
	tg.w = dw;
	tg.w_type = g->b.format;
	tg.w_scale_inv = b->dev_scale_inv + 1;
	tg.y = dy;
	tg.y_type = DLI_DTYPE_F32;
	tg.alpha = 1.0f;
	tg.beta = 0.0f;
	tg.stream = b->stream;
	r = dli_tc_fp8_gemm(b->tc, &tg, &b->err);
	if (r < 0)
		return r;

	float *hy = (float *)(b->host + x_bytes + w_bytes);
	e = cudaMemcpyAsync(hy, dy, y_bytes, cudaMemcpyDeviceToHost, b->stream);
	if (e == cudaSuccess)
		e = cudaStreamSynchronize(b->stream);
	if (e != cudaSuccess)
		return cuda_failed(b, "running the GEMM", e);
	for (int64_t i = 0; i < m; i++)
		memcpy(g->c + i * n, hy + i * N, (size_t)n * sizeof(float));
	return 0;
}

} // namespace

extern "C" int dlt_gemm_cuda_create(const struct dlt_gemm_backend *fallback,
				    struct dlt_gemm_backend *out, struct dli_error *err)
{
	if (!out || !fallback || !fallback->run)
		return fail(err, -EINVAL, "dlt_gemm_cuda_create: %s is NULL",
			    !out ? "out" : "the fallback backend");
	memset(out, 0, sizeof *out);
	cuda_backend *b = (cuda_backend *)calloc(1, sizeof *b);
	if (!b)
		return fail(err, -ENOMEM, "dlt_gemm_cuda_create: out of memory");
	b->fallback = fallback;
	int r = dli_tc_create(DLI_TC_DEFAULT_WORKSPACE, &b->tc, err);
	if (r < 0) {
		free(b);
		return r;
	}
	cudaError_t e = cudaStreamCreateWithFlags(&b->stream, cudaStreamNonBlocking);
	if (e == cudaSuccess)
		e = cudaMalloc(&b->dev_scale_inv, 2 * sizeof(float));
	if (e != cudaSuccess) {
		cudaGetLastError();
		r = fail(err, -ENOMEM, "dlt_gemm_cuda_create: %s", cudaGetErrorString(e));
		if (b->stream)
			cudaStreamDestroy(b->stream);
		dli_tc_destroy(b->tc);
		free(b);
		return r;
	}
	out->name = "cuda (cuBLASLt FP8, fp32 accumulation)";
	out->state = b;
	out->run = cuda_run;
	return 0;
}

extern "C" void dlt_gemm_cuda_destroy(struct dlt_gemm_backend *backend)
{
	if (!backend || !backend->state)
		return;
	cuda_backend *b = (cuda_backend *)backend->state;
	cudaStreamSynchronize(b->stream);
	cudaFree(b->dev);
	cudaFree(b->dev_scale_inv);
	cudaStreamDestroy(b->stream);
	dli_tc_destroy(b->tc);
	free(b->host);
	free(b);
	backend->state = NULL;
	backend->run = NULL;
}

extern "C" const char *dlt_gemm_cuda_last_error(const struct dlt_gemm_backend *backend)
{
	if (!backend || !backend->state)
		return "";
	return ((const cuda_backend *)backend->state)->err.message;
}
