/* FP8 casts on the device for the trainer's CUDA path: quantize (with the transpose and the amax
 * delayed scaling records), dequantize, and the scale update. The cast itself is the backend's
 * (kernels/cuda/convert.cuh), so these codes are bit for bit those dlinspect's statistics assume. */
#include <cuda_runtime.h>

#include "convert.cuh"
#include "tc-private.h"

using namespace dli_cuda;
using namespace dli_tc_impl;

namespace {

constexpr int threads = 256;
constexpr int max_blocks = 4096; /* grid-stride loops beyond: enough to fill any current GPU */
constexpr int tile = 32;	    /* the transposing kernel's square tile, in a 32 x 8 block */

/* |x| as bits: for non-negative floats (NaN included, above inf) the integer order is the float
 * order, so an unsigned max is max |x| with NaN winning, with no float compare to drop it. */
__device__ __forceinline__ uint32_t abs_bits(float v)
{
	return __float_as_uint(v) & 0x7fffffffu;
}

/* The block's largest |x| bits into *amax (zeroed before the launch). */
__device__ void block_amax(uint32_t m, float *amax)
{
	__shared__ uint32_t warp_max[32];
	const int lane = (threadIdx.y * blockDim.x + threadIdx.x) & 31;
	const int warp = (threadIdx.y * blockDim.x + threadIdx.x) >> 5;
	const int warps = (blockDim.x * blockDim.y + 31) >> 5;
#pragma unroll
	for (int o = 16; o > 0; o >>= 1)
		m = max(m, __shfl_xor_sync(0xffffffffu, m, o));
	if (lane == 0)
		warp_max[warp] = m;
	__syncthreads();
	if (warp == 0) {
		m = lane < warps ? warp_max[lane] : 0u;
#pragma unroll
		for (int o = 16; o > 0; o >>= 1)
			m = max(m, __shfl_xor_sync(0xffffffffu, m, o));
		if (lane == 0 && m != 0)
			atomicMax(reinterpret_cast<unsigned int *>(amax), m);
	}
}

template <int F>
__global__ void __launch_bounds__(threads)
quantize_flat(const float *__restrict__ x, int64_t n, const float *__restrict__ scale,
	      uint8_t *__restrict__ out, float *amax, float *scale_inv)
{
	const float s = *scale;
	uint32_t m = 0;
	for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
	     i += (int64_t)gridDim.x * blockDim.x) {
		const float v = x[i];
		m = max(m, abs_bits(v));
		if (out)
			out[i] = fp8_encode<F>(v * s);
	}
	if (amax)
		block_amax(m, amax);
	if (scale_inv && blockIdx.x == 0 && threadIdx.x == 0)
		*scale_inv = 1.0f / s;
}

/* Each block casts 32 x 32 tiles, writing the codes in place and, through shared memory, the
 * tile's transpose, so both writes stay coalesced. */
template <int F>
__global__ void __launch_bounds__(tile * 8)
quantize_transpose(const float *__restrict__ x, int64_t rows, int64_t cols,
		   const float *__restrict__ scale, uint8_t *__restrict__ out,
		   uint8_t *__restrict__ out_t, float *amax, float *scale_inv)
{
	__shared__ uint8_t codes[tile][tile + 1];
	const float s = *scale;
	const int64_t tiles_c = (cols + tile - 1) / tile;
	const int64_t tiles = tiles_c * ((rows + tile - 1) / tile);
	uint32_t m = 0;
	for (int64_t t = blockIdx.x; t < tiles; t += gridDim.x) {
		const int64_t r0 = t / tiles_c * tile, c0 = t % tiles_c * tile;
		for (int i = threadIdx.y; i < tile; i += blockDim.y) {
			const int64_t r = r0 + i, c = c0 + threadIdx.x;
			if (r < rows && c < cols) {
				const float v = x[r * cols + c];
				m = max(m, abs_bits(v));
				const uint8_t q = fp8_encode<F>(v * s);
				if (out)
					out[r * cols + c] = q;
				codes[i][threadIdx.x] = q;
			}
		}
		__syncthreads();
		for (int i = threadIdx.y; i < tile; i += blockDim.y) {
			const int64_t c = c0 + i, r = r0 + threadIdx.x;
			if (c < cols && r < rows)
				out_t[c * rows + r] = codes[threadIdx.x][i];
		}
		__syncthreads();
	}
	if (amax)
		block_amax(m, amax);
	if (scale_inv && blockIdx.x == 0 && threadIdx.x == 0 && threadIdx.y == 0)
		*scale_inv = 1.0f / s;
}

template <int F>
__global__ void __launch_bounds__(threads)
dequantize_kernel(const uint8_t *__restrict__ codes, int64_t n, const float *__restrict__ scale_inv,
		  float *__restrict__ out)
{
	const float si = *scale_inv;
	for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
	     i += (int64_t)gridDim.x * blockDim.x)
		out[i] = fp8_decode<F>(codes[i]) * si;
}

/* One thread: the history is a handful of floats. */
template <int F>
__global__ void scale_update_kernel(const float *__restrict__ history, int len, double margin,
				    float *scale, float *scale_inv)
{
	uint32_t m = 0;
	for (int i = 0; i < len; i++)
		m = max(m, abs_bits(history[i]));
	const float s = fp8_current_scale(__uint_as_float(m), fp8_format<F>::max, margin);
	*scale = s;
	if (scale_inv)
		*scale_inv = 1.0f / s;
}

int blocks_for(int64_t n, int per_block)
{
	const int64_t b = (n + per_block - 1) / per_block;
	return b < 1 ? 1 : b > max_blocks ? max_blocks : (int)b;
}

int launched(const char *what, struct dli_error *err)
{
	const cudaError_t e = cudaGetLastError();
	if (e != cudaSuccess)
		return fail(err, -EIO, "%s: kernel launch failed: %s", what, cudaGetErrorString(e));
	return 0;
}

} // namespace

extern "C" int dli_tc_quantize(const struct dli_tc_quantize *q, struct dli_error *err)
{
	if (!q)
		return fail(err, -EINVAL, "dli_tc_quantize: arguments are NULL");
	if (!is_fp8(q->format))
		return fail(err, -EINVAL, "dli_tc_quantize: format is %s, not e4m3 or e5m2",
			    dtype_name(q->format));
	if (q->rows < 0 || q->cols < 0)
		return fail(err, -EINVAL, "dli_tc_quantize: negative size %lld x %lld",
			    (long long)q->rows, (long long)q->cols);
	if (q->rows > 0 && q->cols > INT64_MAX / q->rows)
		return fail(err, -EINVAL, "dli_tc_quantize: %lld x %lld elements overflow",
			    (long long)q->rows, (long long)q->cols);
	const int64_t n = q->rows * q->cols;
	if (n > 0 && (!q->x || !q->scale))
		return fail(err, -EINVAL, "dli_tc_quantize: %s is NULL", q->x ? "scale" : "x");
	if (n == 0 && !q->scale && q->scale_inv)
		return fail(err, -EINVAL, "dli_tc_quantize: scale is NULL");
	cudaStream_t stream = (cudaStream_t)q->stream;

	if (q->amax) {
		const cudaError_t e = cudaMemsetAsync(q->amax, 0, sizeof(float), stream);
		if (e != cudaSuccess)
			return fail(err, -EIO, "dli_tc_quantize: clearing amax: %s",
				    cudaGetErrorString(e));
	}
	if (n == 0 && !q->scale_inv)
		return 0;
	const bool e4m3 = q->format == DLI_DTYPE_F8E4M3;
	if (q->out_t && n > 0) {
		const int64_t tiles = ((q->rows + tile - 1) / tile) * ((q->cols + tile - 1) / tile);
		const int blocks = blocks_for(tiles, 1);
		const dim3 block(tile, 8);
		if (e4m3)
			quantize_transpose<DLI_DTYPE_F8E4M3><<<blocks, block, 0, stream>>>(
				q->x, q->rows, q->cols, q->scale, q->out, q->out_t, q->amax, q->scale_inv);
		else
			quantize_transpose<DLI_DTYPE_F8E5M2><<<blocks, block, 0, stream>>>(
				q->x, q->rows, q->cols, q->scale, q->out, q->out_t, q->amax, q->scale_inv);
	} else {
		const int blocks = blocks_for(n, threads);
		if (e4m3)
			quantize_flat<DLI_DTYPE_F8E4M3><<<blocks, threads, 0, stream>>>(
				q->x, n, q->scale, q->out, q->amax, q->scale_inv);
		else
			quantize_flat<DLI_DTYPE_F8E5M2><<<blocks, threads, 0, stream>>>(
				q->x, n, q->scale, q->out, q->amax, q->scale_inv);
	}
	return launched("dli_tc_quantize", err);
}

extern "C" int dli_tc_dequantize(const uint8_t *codes, int64_t n, enum dli_dtype format,
				 const float *scale_inv, float *out, void *stream, struct dli_error *err)
{
	if (!is_fp8(format))
		return fail(err, -EINVAL, "dli_tc_dequantize: format is %s, not e4m3 or e5m2",
			    dtype_name(format));
	if (n < 0)
		return fail(err, -EINVAL, "dli_tc_dequantize: negative count %lld", (long long)n);
	if (n == 0)
		return 0;
	if (!codes || !scale_inv || !out)
		return fail(err, -EINVAL, "dli_tc_dequantize: %s is NULL",
			    !codes ? "codes" : !scale_inv ? "scale_inv" : "out");
	const int blocks = blocks_for(n, threads);
	if (format == DLI_DTYPE_F8E4M3)
		dequantize_kernel<DLI_DTYPE_F8E4M3>
			<<<blocks, threads, 0, (cudaStream_t)stream>>>(codes, n, scale_inv, out);
	else
		dequantize_kernel<DLI_DTYPE_F8E5M2>
			<<<blocks, threads, 0, (cudaStream_t)stream>>>(codes, n, scale_inv, out);
	return launched("dli_tc_dequantize", err);
}

extern "C" int dli_tc_scale_update(const float *amax_history, int history_len,
				   enum dli_dtype format, double margin, float *scale,
				   float *scale_inv, void *stream, struct dli_error *err)
{
	if (!is_fp8(format))
		return fail(err, -EINVAL, "dli_tc_scale_update: format is %s, not e4m3 or e5m2",
			    dtype_name(format));
	if (history_len < 1)
		return fail(err, -EINVAL, "dli_tc_scale_update: history_len %d is below 1",
			    history_len);
	if (!amax_history || !scale)
		return fail(err, -EINVAL, "dli_tc_scale_update: %s is NULL",
			    !amax_history ? "amax_history" : "scale");
	if (format == DLI_DTYPE_F8E4M3)
		scale_update_kernel<DLI_DTYPE_F8E4M3><<<1, 1, 0, (cudaStream_t)stream>>>(
			amax_history, history_len, margin, scale, scale_inv);
	else
		scale_update_kernel<DLI_DTYPE_F8E5M2><<<1, 1, 0, (cudaStream_t)stream>>>(
			amax_history, history_len, margin, scale, scale_inv);
	return launched("dli_tc_scale_update", err);
}
