/* Element conversions for the CUDA kernels: 16-byte vectors of each dtype to floats, and the FP8
 * cast (docs/statistics.md) on the device. Shared with tests/cuda, which checks the cast bit for
 * bit against the CPU encoder. */
#ifndef DLI_CUDA_CONVERT_CUH
#define DLI_CUDA_CONVERT_CUH

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <float.h>
#include <stdint.h>

#include <dlinspect/tensor.h>

namespace dli_cuda {

/* Per-format constants. min_sub is the smallest subnormal: a nonzero |x * scale| below it may
 * round to zero, which is what the underflow test needs to know. */
template <int F> struct fp8_format;
template <> struct fp8_format<DLI_DTYPE_F8E4M3> {
	static constexpr __nv_fp8_interpretation_t interp = __NV_E4M3;
	static constexpr float max = 448.0f;
	static constexpr float min_sub = 0x1p-9f;
};
template <> struct fp8_format<DLI_DTYPE_F8E5M2> {
	static constexpr __nv_fp8_interpretation_t interp = __NV_E5M2;
	static constexpr float max = 57344.0f;
	static constexpr float min_sub = 0x1p-16f;
};

/* How many elements of dtype T one 16-byte vector holds, and how to widen them. */
template <int T> struct elem;
template <> struct elem<DLI_DTYPE_F32> {
	static constexpr int per_vec = 4;
	typedef float scalar;
	static __device__ __forceinline__ float to_float(scalar v) { return v; }
	static __device__ __forceinline__ void widen(const uint4 &u, float *out)
	{
		out[0] = __uint_as_float(u.x);
		out[1] = __uint_as_float(u.y);
		out[2] = __uint_as_float(u.z);
		out[3] = __uint_as_float(u.w);
	}
};
/* bf16 is the top half of an f32: a shift or a mask widens it exactly. */
template <> struct elem<DLI_DTYPE_BF16> {
	static constexpr int per_vec = 8;
	typedef uint16_t scalar;
	static __device__ __forceinline__ float to_float(scalar v) { return __uint_as_float((uint32_t)v << 16); }
	static __device__ __forceinline__ void widen(const uint4 &u, float *out)
	{
		const uint32_t w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
		for (int i = 0; i < 4; i++) {
			out[2 * i] = __uint_as_float(w[i] << 16);
			out[2 * i + 1] = __uint_as_float(w[i] & 0xffff0000u);
		}
	}
};
template <> struct elem<DLI_DTYPE_F16> {
	static constexpr int per_vec = 8;
	typedef uint16_t scalar;
	static __device__ __forceinline__ float to_float(scalar v)
	{
		return __half2float(__ushort_as_half(v));
	}
	static __device__ __forceinline__ void widen(const uint4 &u, float *out)
	{
		const uint32_t w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
		for (int i = 0; i < 4; i++) {
			out[2 * i] = __half2float(__ushort_as_half((unsigned short)(w[i] & 0xffffu)));
			out[2 * i + 1] = __half2float(__ushort_as_half((unsigned short)(w[i] >> 16)));
		}
	}
};
/* Four FP8 codes of a 32-bit word to floats, through f16, which holds every FP8 value exactly
 * (one instruction per pair on sm_89 and later). */
template <int F> __device__ __forceinline__ void fp8_decode4(uint32_t w, float *out)
{
	const __half2_raw lo = __nv_cvt_fp8x2_to_halfraw2((__nv_fp8x2_storage_t)(w & 0xffffu),
							    fp8_format<F>::interp);
	const __half2_raw hi = __nv_cvt_fp8x2_to_halfraw2((__nv_fp8x2_storage_t)(w >> 16),
							    fp8_format<F>::interp);
	out[0] = __half2float(__ushort_as_half(lo.x));
	out[1] = __half2float(__ushort_as_half(lo.y));
	out[2] = __half2float(__ushort_as_half(hi.x));
	out[3] = __half2float(__ushort_as_half(hi.y));
}

template <int F> __device__ __forceinline__ float fp8_decode(uint8_t q)
{
	return __half2float(__ushort_as_half(__nv_cvt_fp8_to_halfraw(q, fp8_format<F>::interp).x));
}

template <int F> struct elem_fp8 {
	static constexpr int per_vec = 16;
	typedef uint8_t scalar;
	static __device__ __forceinline__ float to_float(scalar v) { return fp8_decode<F>(v); }
	static __device__ __forceinline__ void widen(const uint4 &u, float *out)
	{
		fp8_decode4<F>(u.x, out);
		fp8_decode4<F>(u.y, out + 4);
		fp8_decode4<F>(u.z, out + 8);
		fp8_decode4<F>(u.w, out + 12);
	}
};
template <> struct elem<DLI_DTYPE_F8E4M3> : elem_fp8<DLI_DTYPE_F8E4M3> {};
template <> struct elem<DLI_DTYPE_F8E5M2> : elem_fp8<DLI_DTYPE_F8E5M2> {};

/* The cast: round to nearest even, saturate to the finite max, NaN stays NaN. This is what
 * TransformerEngine's static_cast to __nv_fp8_e4m3/e5m2 does (one cvt.rn.satfinite per pair on
 * sm_89 and later). */
template <int F> __host__ __device__ __forceinline__ uint8_t fp8_encode(float x)
{
	return (uint8_t)__nv_cvt_float_to_fp8(x, __NV_SATFINITE, fp8_format<F>::interp);
}

/* decode(encode(a)), decode(encode(b)) for a pair: the quantized values in the scaled domain. */
template <int F> __device__ __forceinline__ float2 fp8_round_trip2(float a, float b)
{
	const __nv_fp8x2_storage_t q =
		__nv_cvt_float2_to_fp8x2(make_float2(a, b), __NV_SATFINITE, fp8_format<F>::interp);
	const __half2_raw h = __nv_cvt_fp8x2_to_halfraw2(q, fp8_format<F>::interp);
	return make_float2(__half2float(__ushort_as_half(h.x)), __half2float(__ushort_as_half(h.y)));
}

/* The current-scaling scale, as dli_fp8_scale computes it (docs/statistics.md): fp8_max / amax
 * / 2^margin in double, rounded once; 1 for an amax of 0, inf or NaN (or a NaN margin); FLT_MAX
 * when the quotient overflows and FLT_MIN when a huge margin would make it vanish. */
__host__ __device__ __forceinline__ float fp8_current_scale(float amax, float fp8_max, double margin)
{
	if (!(amax > 0.0f) || amax > FLT_MAX)
		return 1.0f;
	const double s = (double)fp8_max / (double)amax / exp2(margin);
	if (s != s)
		return 1.0f;
	if (s >= (double)FLT_MAX)
		return FLT_MAX;
	if (s < (double)FLT_MIN)
		return FLT_MIN;
	return (float)s;
}

} // namespace dli_cuda

#endif
