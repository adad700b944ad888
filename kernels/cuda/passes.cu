/* The statistics record and FP8 comparison passes over device memory, and the kernel that merges
 * their per-block parts into an accumulator's record. Semantics are those of the CPU kernels
 * (kernels/kernels-private.h); the arithmetic is arranged for a memory-bound GPU pass.
 *
 * Layout of a pass: each warp reads 64 consecutive 16-byte vectors per step (two coalesced loads
 * per lane) in a grid-stride loop; the elements before the first 16-byte boundary and after the
 * last full warp tile go through a scalar loop. A lane's tile (2 vectors: 8 to 32 elements) is
 * reduced in float, tiles are merged in float for about 256 elements, then folded into double
 * totals; threads merge by shuffles, warps through shared memory, and each block writes one part.
 * The finalize kernel (one block) merges the parts and the result into the accumulator's record,
 * on the same stream, so nothing leaves the device.
 *
 * Cheap per element, exact in the rare cases: the NaN/inf counts, zero counts, minimum nonzero
 * |x|, overflows and underflows are each decided per tile from values the fast path computes
 * anyway (the float sum of |x|, the minimum |x|, the extremes) and only a tile that may contain
 * such an element is rescanned, from registers. amax is max(-min, max) and sum x^2 is
 * m2 + sum^2 / n, so neither costs a per-element operation. */
#include <cuda_runtime.h>
#include <float.h>
#include <math.h>

#include "convert.cuh"
#include "passes.h"

namespace dli_cuda {
namespace {

/* Elements a thread sums in float before folding them into its double totals: float error stays
 * at the level of one float block of the CPU kernels. */
constexpr int flush_elems = 256;

/* The double totals live in shared memory, one column per thread: they are touched once per
 * flush_elems elements, and keeping them out of registers lets four blocks share an SM. */
enum total_field { T_CNT, T_MEAN, T_M2, T_SUM, T_SUM_ABS, T_ERR_SQ, T_DQ_SQ, T_DOT, T_X_SQ, T_FIELDS };

/* A thread's registers: the float group since the last flush, extremes and counts. */
struct tacc {
	float g_n, g_sum, g_m2, g_abs; /* statistics: Chan aggregate of the tiles, sum |x| */
	float g_err, g_dq, g_dot, g_x; /* FP8 comparison */
	int g_elems;
	float min, max, minnz;
	unsigned nan, inf, zero, under, over, skipped; /* a thread sees far fewer than 2^32 */
};

__device__ __forceinline__ void tacc_init(tacc &a, double *tot)
{
	a.g_n = a.g_sum = a.g_m2 = a.g_abs = 0.0f;
	a.g_err = a.g_dq = a.g_dot = a.g_x = 0.0f;
	a.g_elems = 0;
	a.min = a.minnz = INFINITY;
	a.max = -INFINITY;
	a.nan = a.inf = a.zero = a.under = a.over = a.skipped = 0;
	for (int f = 0; f < T_FIELDS; f++)
		tot[f * pass_threads] = 0.0;
}

template <int MODE> __device__ __forceinline__ void flush(tacc &a, double *tot)
{
	if (MODE != MODE_FP8 && a.g_n > 0.0f) {
		double cnt = tot[T_CNT * pass_threads], mean = tot[T_MEAN * pass_threads],
		       m2 = tot[T_M2 * pass_threads];
		const double nb = a.g_n;
		chan_merge(cnt, mean, m2, nb, (double)a.g_sum / nb, (double)a.g_m2);
		tot[T_CNT * pass_threads] = cnt;
		tot[T_MEAN * pass_threads] = mean;
		tot[T_M2 * pass_threads] = m2;
		tot[T_SUM * pass_threads] += a.g_sum;
		tot[T_SUM_ABS * pass_threads] += a.g_abs;
	}
	if (MODE != MODE_STATS) {
		tot[T_ERR_SQ * pass_threads] += a.g_err;
		tot[T_DQ_SQ * pass_threads] += a.g_dq;
		tot[T_DOT * pass_threads] += a.g_dot;
		tot[T_X_SQ * pass_threads] += a.g_x;
	}
	a.g_n = a.g_sum = a.g_m2 = a.g_abs = 0.0f;
	a.g_err = a.g_dq = a.g_dot = a.g_x = 0.0f;
	a.g_elems = 0;
}

/* The thread's part: registers and its column of totals. */
__device__ __forceinline__ part tacc_part(const tacc &a, const double *tot)
{
	part p;
	part_init(p);
	p.cnt = tot[T_CNT * pass_threads];
	p.mean = tot[T_MEAN * pass_threads];
	p.m2 = tot[T_M2 * pass_threads];
	p.sum = tot[T_SUM * pass_threads];
	p.sum_abs = tot[T_SUM_ABS * pass_threads];
	p.err_sq = tot[T_ERR_SQ * pass_threads];
	p.dq_sq = tot[T_DQ_SQ * pass_threads];
	p.dot = tot[T_DOT * pass_threads];
	p.x_sq = tot[T_X_SQ * pass_threads];
	p.min = a.min;
	p.max = a.max;
	p.minnz = a.minnz;
	p.nan = a.nan;
	p.inf = a.inf;
	p.zero = a.zero;
	p.under = a.under;
	p.over = a.over;
	p.skipped = a.skipped;
	return p;
}

/* One tile of K elements (K a power of two; 1 in the scalar loop) into the thread's state. */
template <int MODE, int F, int K>
__device__ __forceinline__ void tile(tacc &a, double *tot, const float (&v)[K], float s, float inv)
{
	float tmin = INFINITY, tmax = -INFINITY, tamin = INFINITY;
#pragma unroll
	for (int i = 0; i < K; i++) {
		tmin = fminf(tmin, v[i]); /* fminf/fmaxf skip NaN: extremes are over non-NaN */
		tmax = fmaxf(tmax, v[i]);
		tamin = fminf(tamin, fabsf(v[i]));
	}
	/* A tile whose largest finite magnitude is past 2^50, or below 2^-50 (and nonzero), would
	 * overflow or flush the float squares below (d * d, x * x): std and l2_norm would read inf
	 * or 0 where the CPU kernels, which redo such blocks in double, give the value. It is summed
	 * in double, straight into the thread's totals. */
	const float tamax = fmaxf(-tmin, tmax);
	const bool wide = (tamax > 0x1p50f && tamax <= FLT_MAX) || (tamax > 0.0f && tamax < 0x1p-50f);
	/* The minimum nonzero |x|; a tile with a zero is rescanned (and its zeros counted). */
	float mnz = tamin;
	if (tamin == 0.0f) {
		mnz = INFINITY;
		unsigned zeros = 0;
#pragma unroll
		for (int i = 0; i < K; i++) {
			if (v[i] == 0.0f)
				zeros++;
			else
				mnz = fminf(mnz, fabsf(v[i]));
		}
		if (MODE != MODE_FP8)
			a.zero += zeros;
	}

	if (MODE != MODE_FP8) {
		/* Four interleaved chains: short dependency chains, few registers. */
		constexpr int C = K < 4 ? K : 4;
		float cs[C], ca[C];
#pragma unroll
		for (int i = 0; i < C; i++)
			cs[i] = ca[i] = 0.0f;
#pragma unroll
		for (int i = 0; i < K; i++) {
			cs[i % C] += v[i];
			ca[i % C] += fabsf(v[i]);
		}
		float ts = cs[0], tabs = ca[0];
#pragma unroll
		for (int i = 1; i < C; i++) {
			ts += cs[i];
			tabs += ca[i];
		}
		const float tmean = ts * (1.0f / K); /* exact: K is a power of two */
#pragma unroll
		for (int i = 0; i < C; i++)
			cs[i] = 0.0f;
#pragma unroll
		for (int i = 0; i < K; i++) {
			const float d = v[i] - tmean;
			cs[i % C] = fmaf(d, d, cs[i % C]);
		}
		float tm2 = cs[0];
#pragma unroll
		for (int i = 1; i < C; i++)
			tm2 += cs[i];
		/* A NaN or an infinity makes the float sum of |x| non-finite: count them. (A finite
		 * sum that overflows also lands here and finds nothing.) */
		if (!(tabs <= FLT_MAX)) {
			unsigned nans = 0, infs = 0;
#pragma unroll
			for (int i = 0; i < K; i++) {
				nans += v[i] != v[i];
				infs += fabsf(v[i]) == INFINITY;
			}
			a.nan += nans;
			a.inf += infs;
		}
		a.min = fminf(a.min, tmin);
		a.max = fmaxf(a.max, tmax);
		a.minnz = fminf(a.minnz, mnz);
		if (wide) {
			double ds = 0.0, da = 0.0, dm2 = 0.0;
#pragma unroll
			for (int i = 0; i < K; i++) {
				ds += v[i];
				da += fabs((double)v[i]);
			}
			const double dm = ds / K;
#pragma unroll
			for (int i = 0; i < K; i++) {
				const double d = v[i] - dm;
				dm2 += d * d;
			}
			double cnt = tot[T_CNT * pass_threads], mean = tot[T_MEAN * pass_threads],
			       m2 = tot[T_M2 * pass_threads];
			chan_merge(cnt, mean, m2, (double)K, dm, dm2);
			tot[T_CNT * pass_threads] = cnt;
			tot[T_MEAN * pass_threads] = mean;
			tot[T_M2 * pass_threads] = m2;
			tot[T_SUM * pass_threads] += ds;
			tot[T_SUM_ABS * pass_threads] += da;
		} else {
			/* Chan's formula in float for the group; the approximate divisions only touch
			 * the correction term, at float rounding level. */
			if (a.g_n == 0.0f) {
				a.g_m2 = tm2;
			} else {
				const float d = tmean - __fdividef(a.g_sum, a.g_n);
				a.g_m2 += tm2 + d * d * __fdividef(a.g_n * (float)K, a.g_n + (float)K);
			}
			a.g_sum += ts;
			a.g_abs += tabs;
			a.g_n += (float)K;
		}
	}

	if (MODE != MODE_STATS) {
		typedef fp8_format<F> fmt;
		/* Pair by pair: dq = decode(encode(x * s)) * (1 / s), nothing kept per element. */
		float te = 0.0f, tq = 0.0f, td = 0.0f, tx = 0.0f;
#pragma unroll
		for (int i = 0; i < K; i += 2) {
			float2 q;
			if (K == 1)
				q = make_float2(fp8_decode<F>(fp8_encode<F>(v[0] * s)), 0.0f);
			else
				q = fp8_round_trip2<F>(v[i] * s, v[i + 1] * s);
			float dq = q.x * inv, e = v[i] - dq;
			te = fmaf(e, e, te);
			tq = fmaf(dq, dq, tq);
			td = fmaf(v[i], dq, td);
			tx = fmaf(v[i], v[i], tx);
			if (K > 1) {
				dq = q.y * inv;
				e = v[i + 1] - dq;
				te = fmaf(e, e, te);
				tq = fmaf(dq, dq, tq);
				td = fmaf(v[i + 1], dq, td);
				tx = fmaf(v[i + 1], v[i + 1], tx);
			}
		}
		/* All terms are >= 0, so a finite total means every term was. A NaN or infinite x
		 * (left out of the comparison, as on the CPU), a float overflow or a wide tile
		 * (above) sends the tile to a per-element redo in double. */
		if (!wide && te + tq + td + tx <= FLT_MAX) {
			a.g_err += te;
			a.g_dq += tq;
			a.g_dot += td;
			a.g_x += tx;
		} else {
			double de = 0.0, dqq = 0.0, dd = 0.0, dx = 0.0;
			unsigned skipped = 0;
#pragma unroll
			for (int i = 0; i < K; i++) {
				if (!isfinite(v[i])) {
					skipped++;
					continue;
				}
				const double dq = fp8_decode<F>(fp8_encode<F>(v[i] * s)) * inv,
					     e = v[i] - dq;
				de += e * e;
				dqq += dq * dq;
				dd += v[i] * dq;
				dx += (double)v[i] * v[i];
			}
			a.skipped += skipped;
			tot[T_ERR_SQ * pass_threads] += de;
			tot[T_DQ_SQ * pass_threads] += dqq;
			tot[T_DOT * pass_threads] += dd;
			tot[T_X_SQ * pass_threads] += dx;
		}
		/* |x * s| is largest at an extreme and smallest at the minimum nonzero |x| (rounding
		 * is monotonic), so most tiles skip both counts; the rare tile is redone per element. */
		if (fmaxf(fabsf(tmin * s), fabsf(tmax * s)) > fmt::max) {
			unsigned over = 0;
#pragma unroll
			for (int i = 0; i < K; i++)
				over += isfinite(v[i]) && fabsf(v[i] * s) > fmt::max;
			a.over += over;
		}
		if (mnz * fabsf(s) < fmt::min_sub) {
			unsigned under = 0;
#pragma unroll
			for (int i = 0; i < K; i++)
				under += v[i] != 0.0f && isfinite(v[i]) &&
					 fp8_decode<F>(fp8_encode<F>(v[i] * s)) == 0.0f;
			a.under += under;
		}
	}
	a.g_elems += K;
}

template <int T, int MODE, int F>
__global__ void __launch_bounds__(pass_threads, MODE == MODE_STATS_FP8 ? 3 : 4) stats_pass(const pass_params p)
{
	typedef elem<T> E;
	constexpr int epv = E::per_vec, K = 2 * epv;
	const typename E::scalar *data = (const typename E::scalar *)p.data;
	__shared__ double totals[T_FIELDS * pass_threads];
	double *tot = totals + threadIdx.x;

	float s = 1.0f;
	if (MODE == MODE_STATS_FP8)
		s = p.scale;
	else if (MODE == MODE_FP8)
		s = p.scratch->scale;
	const float inv = 1.0f / s;

	tacc a;
	tacc_init(a, tot);
	const unsigned long long tid = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x;
	const unsigned long long threads = gridDim.x * (unsigned long long)blockDim.x;
	const unsigned lane = threadIdx.x & 31;

	const uint4 *vec = (const uint4 *)(data + p.head) + lane;
#pragma unroll 1
	for (unsigned long long w = tid >> 5; w < p.n_warp_tiles; w += threads >> 5) {
		const uint4 *at = vec + w * warp_tile_vecs;
		const uint4 u0 = __ldg(at), u1 = __ldg(at + 32);
		float v[K];
		E::widen(u0, v);
		E::widen(u1, v + epv);
		tile<MODE, F, K>(a, tot, v, s, inv);
		if (a.g_elems >= flush_elems)
			flush<MODE>(a, tot);
	}

	/* The head before the first 16-byte boundary and the rest after the last warp tile. */
	const unsigned long long vec_elems = p.n_warp_tiles * warp_tile_vecs * epv;
	const unsigned long long n_scalar = p.n - vec_elems;
#pragma unroll 1
	for (unsigned long long i = tid; i < n_scalar; i += threads) {
		const unsigned long long j = i < p.head ? i : i + vec_elems;
		const float v[1] = {E::to_float(data[j])};
		tile<MODE, F, 1>(a, tot, v, s, inv);
		if (a.g_elems >= flush_elems)
			flush<MODE>(a, tot);
	}
	flush<MODE>(a, tot);

	part t = tacc_part(a, tot);
	__shared__ part shared[pass_threads / 32];
	block_reduce(t, shared);
	if (threadIdx.x == 0)
		p.parts[blockIdx.x] = t;
}

/* The comparison of a high-precision tensor with the host's FP8 codes, dequantized with
 * scale_inv[0] as dli_cpu_fp8_compare_quantized does (dq = float(decode(q) * scale_inv); a NaN
 * or infinite x is left out); plus the range of the scale_inv array. hp and q are read as vectors
 * when both are 16-byte aligned (p.n_warp_tiles then counts hp vectors), else element by
 * element. */
template <int H, int F>
__global__ void __launch_bounds__(pass_threads, 4) quantized_pass(const pass_params p)
{
	typedef elem<H> E;
	typedef fp8_format<F> fmt;
	constexpr int epv = E::per_vec; /* 4 or 8: the codes of a vector are one or two words */
	const typename E::scalar *hp = (const typename E::scalar *)p.data;

	const float si = p.n ? p.scale_inv[0] : 1.0f;
	/* Saturated: |x| > fp8_max * scale_inv, the product rounded to float as TransformerEngine
	 * computes it and as dli_cpu_fp8_compare_quantized does (an element at the amax the scale
	 * came from lies within that rounding of the limit). */
	const float limit = __fmul_rn(fmt::max, si);
	part t;
	part_init(t);
	float ge = 0.0f, gq = 0.0f, gd = 0.0f, gx = 0.0f;
	int gel = 0;
	unsigned under = 0, over = 0, skipped = 0;
	const unsigned long long tid = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x;
	const unsigned long long threads = gridDim.x * (unsigned long long)blockDim.x;

	auto one = [&](float x, float qv) {
		if (!isfinite(x)) {
			skipped++;
			return;
		}
		const float dq = qv * si, e = x - dq;
		/* Magnitudes whose float squares would overflow or flush (as in tile()) go straight
		 * into the double totals. */
		const float m = fmaxf(fabsf(x), fabsf(dq));
		if (m > 0x1p50f || (m > 0.0f && m < 0x1p-50f)) {
			const double dd = dq, de = (double)x - dd;
			t.err_sq += de * de;
			t.dq_sq += dd * dd;
			t.dot += (double)x * dd;
			t.x_sq += (double)x * x;
		} else {
			ge = fmaf(e, e, ge);
			gq = fmaf(dq, dq, gq);
			gd = fmaf(x, dq, gd);
			gx = fmaf(x, x, gx);
		}
		under += x != 0.0f && qv == 0.0f;
		over += fabsf(x) > limit;
	};
	auto fold = [&]() {
		t.err_sq += ge;
		t.dq_sq += gq;
		t.dot += gd;
		t.x_sq += gx;
		ge = gq = gd = gx = 0.0f;
		gel = 0;
	};

#pragma unroll 1
	for (unsigned long long i = tid; i < p.n_warp_tiles; i += threads) {
		float x[epv], qv[epv];
		E::widen(__ldg((const uint4 *)hp + i), x);
		if (epv == 4) {
			fp8_decode4<F>(__ldg((const uint32_t *)p.q + i), qv);
		} else {
			const uint2 w = __ldg((const uint2 *)p.q + i);
			fp8_decode4<F>(w.x, qv);
			fp8_decode4<F>(w.y, qv + 4);
		}
#pragma unroll
		for (int k = 0; k < epv; k++)
			one(x[k], qv[k]);
		if ((gel += epv) >= flush_elems)
			fold();
	}
	const unsigned long long done = p.n_warp_tiles * epv;
#pragma unroll 1
	for (unsigned long long i = done + tid; i < p.n; i += threads) {
		one(E::to_float(hp[i]), fp8_decode<F>(p.q[i]));
		if (++gel >= flush_elems)
			fold();
	}
	fold();
	t.under = under;
	t.over = over;
	t.skipped = skipped;

	/* "Nonzero ones for the min": a zero scale_inv marks an unused block in block scaling. */
#pragma unroll 1
	for (long long i = (long long)tid; i < p.n_scale_inv; i += (long long)threads) {
		const float v = p.scale_inv[i];
		if (v != 0.0f)
			t.si_min = fminf(t.si_min, v);
		t.si_max = fmaxf(t.si_max, v);
	}

	__shared__ part shared[pass_threads / 32];
	block_reduce(t, shared);
	if (threadIdx.x == 0)
		p.parts[blockIdx.x] = t;
}

__global__ void __launch_bounds__(pass_threads) finalize(const finalize_params p)
{
	part acc;
	part_init(acc);
#pragma unroll 1
	for (unsigned i = threadIdx.x; i < p.n_parts; i += blockDim.x)
		part_merge(acc, p.parts[i]);
	__shared__ part shared[pass_threads / 32];
	block_reduce(acc, shared);
	if (threadIdx.x != 0)
		return;

	dli_stats_record r;
	record_init(r);
	if (p.flags & FIN_STATS) {
		r.count = p.n;
		r.nan_count = acc.nan;
		r.inf_count = acc.inf;
		r.zero_count = acc.zero;
		r.min = acc.min;
		r.max = acc.max;
		/* +inf/-inf extremes (no non-NaN element) give 0, as in the empty record. */
		r.amax = fmax(0.0, fmax(-(double)acc.min, (double)acc.max));
		r.min_nonzero_abs = acc.minnz;
		r.sum = acc.sum;
		r.sum_abs = acc.sum_abs;
		r.mean = acc.mean;
		r.m2 = acc.m2;
		/* sum x^2 = m2 + sum^2 / n: two non-negative terms, no cancellation. What a direct
		 * sum gives for NaN (NaN) and inf (+inf) elements is restated, since m2 is NaN then. */
		if (acc.nan)
			r.sum_sq = NAN;
		else if (acc.inf)
			r.sum_sq = INFINITY;
		else
			r.sum_sq = acc.cnt > 0.0 ? acc.m2 + acc.sum * acc.sum / acc.cnt : 0.0;
		if (p.flags & FIN_WRITE_SCALE)
			p.scratch->scale = fp8_current_scale((float)r.amax, p.fp8_max, p.margin);
	}
	if (p.flags & FIN_FP8) {
		r.fp8_count = p.n - acc.skipped;
		r.underflows = acc.under;
		r.overflows = acc.over;
		r.err_sq = acc.err_sq;
		r.dq_sq = acc.dq_sq;
		r.dot = acc.dot;
		r.x_sq = acc.x_sq;
		if (p.flags & FIN_SI_PART) {
			r.scale_inv_min = acc.si_min;
			r.scale_inv_max = acc.si_max;
		} else {
			/* What a host would store to dequantize with, as the CPU pass records it. */
			const float sc = (p.flags & FIN_SCALE_SCRATCH) ? p.scratch->scale : p.scale;
			r.scale_inv_min = r.scale_inv_max = 1.0f / sc;
		}
	}
	if (p.flags & FIN_FRESH)
		record_init(*p.rec);
	record_merge(*p.rec, r);
}

} // namespace

/* ---- Kernel tables ---- */

template <int MODE, int F> static const void *by_input(enum dli_dtype dtype)
{
	switch (dtype) {
	case DLI_DTYPE_F32: return (const void *)stats_pass<DLI_DTYPE_F32, MODE, F>;
	case DLI_DTYPE_F16: return (const void *)stats_pass<DLI_DTYPE_F16, MODE, F>;
	case DLI_DTYPE_BF16: return (const void *)stats_pass<DLI_DTYPE_BF16, MODE, F>;
	default: return NULL;
	}
}

template <int MODE> static const void *by_format(enum dli_dtype dtype, enum dli_dtype format)
{
	switch (format) {
	case DLI_DTYPE_F8E4M3: return by_input<MODE, DLI_DTYPE_F8E4M3>(dtype);
	case DLI_DTYPE_F8E5M2: return by_input<MODE, DLI_DTYPE_F8E5M2>(dtype);
	default: return NULL;
	}
}

const void *stats_pass_kernel(enum dli_dtype dtype, enum pass_mode mode, enum dli_dtype format)
{
	/* MODE_STATS ignores the format; E4M3 names its one instance. */
	const int any = DLI_DTYPE_F8E4M3;
	switch (mode) {
	case MODE_STATS:
		switch (dtype) {
		case DLI_DTYPE_F8E4M3:
			return (const void *)stats_pass<DLI_DTYPE_F8E4M3, MODE_STATS, any>;
		case DLI_DTYPE_F8E5M2:
			return (const void *)stats_pass<DLI_DTYPE_F8E5M2, MODE_STATS, any>;
		default: return by_input<MODE_STATS, any>(dtype);
		}
	case MODE_STATS_FP8: return by_format<MODE_STATS_FP8>(dtype, format);
	case MODE_FP8: return by_format<MODE_FP8>(dtype, format);
	}
	return NULL;
}

template <int F> static const void *quantized_by_input(enum dli_dtype hp_dtype)
{
	switch (hp_dtype) {
	case DLI_DTYPE_F32: return (const void *)quantized_pass<DLI_DTYPE_F32, F>;
	case DLI_DTYPE_F16: return (const void *)quantized_pass<DLI_DTYPE_F16, F>;
	case DLI_DTYPE_BF16: return (const void *)quantized_pass<DLI_DTYPE_BF16, F>;
	default: return NULL;
	}
}

const void *quantized_pass_kernel(enum dli_dtype hp_dtype, enum dli_dtype format)
{
	switch (format) {
	case DLI_DTYPE_F8E4M3: return quantized_by_input<DLI_DTYPE_F8E4M3>(hp_dtype);
	case DLI_DTYPE_F8E5M2: return quantized_by_input<DLI_DTYPE_F8E5M2>(hp_dtype);
	default: return NULL;
	}
}

const void *finalize_kernel(void)
{
	return (const void *)finalize;
}

} // namespace dli_cuda
