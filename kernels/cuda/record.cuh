/* The partial record the CUDA passes reduce (per thread, per block, per tensor) and the device
 * copy of the record arithmetic of kernels/record.c: the backend links nothing from the core, so
 * the merge is restated here and tests/cuda compares the two. */
#ifndef DLI_CUDA_RECORD_CUH
#define DLI_CUDA_RECORD_CUH

#include <math.h>
#include <stdint.h>

#include <dlinspect/stats.h>

namespace dli_cuda {

/* What one pass reduces. min, max and minnz stay float because every element is a float; the
 * sums are double, merged across threads and blocks. (cnt, mean, m2) is the Chan aggregate of the
 * statistics pass; the FP8 fields are those of the comparison passes. */
struct part {
	double cnt;        /* elements in (mean, m2); exact as a double up to 2^53 */
	double mean, m2;
	double sum, sum_abs;
	double err_sq, dq_sq, dot, x_sq;
	unsigned long long nan, inf, zero, under, over;
	unsigned long long skipped; /* non-finite x, left out of the FP8 comparison as on the CPU */
	float min, max, minnz; /* over non-NaN elements; minnz over nonzero ones */
	float si_min, si_max;  /* scale_inv range (add_quantized) */
};

__host__ __device__ __forceinline__ void part_init(part &p)
{
	p.cnt = p.mean = p.m2 = p.sum = p.sum_abs = 0.0;
	p.err_sq = p.dq_sq = p.dot = p.x_sq = 0.0;
	p.nan = p.inf = p.zero = p.under = p.over = p.skipped = 0;
	p.min = INFINITY;
	p.max = -INFINITY;
	p.minnz = INFINITY;
	p.si_min = INFINITY;
	p.si_max = 0.0f;
}

/* Chan's parallel formula for (n, mean, m2): exact up to rounding in any merge order. */
__host__ __device__ __forceinline__ void chan_merge(double &na, double &ma, double &m2a, double nb,
						    double mb, double m2b)
{
	if (nb == 0.0)
		return;
	if (na == 0.0) {
		na = nb;
		ma = mb;
		m2a = m2b;
		return;
	}
	/* Grouped as kernels/record.c groups it, so the same inputs give the same bits. */
	double n = na + nb, d = mb - ma, fb = nb / n;
	ma += d * fb;
	m2a += m2b + d * d * (na * fb);
	na = n;
}

__host__ __device__ __forceinline__ void part_merge(part &a, const part &b)
{
	chan_merge(a.cnt, a.mean, a.m2, b.cnt, b.mean, b.m2);
	a.sum += b.sum;
	a.sum_abs += b.sum_abs;
	a.err_sq += b.err_sq;
	a.dq_sq += b.dq_sq;
	a.dot += b.dot;
	a.x_sq += b.x_sq;
	a.nan += b.nan;
	a.inf += b.inf;
	a.zero += b.zero;
	a.under += b.under;
	a.over += b.over;
	a.skipped += b.skipped;
	a.min = fminf(a.min, b.min);
	a.max = fmaxf(a.max, b.max);
	a.minnz = fminf(a.minnz, b.minnz);
	a.si_min = fminf(a.si_min, b.si_min);
	a.si_max = fmaxf(a.si_max, b.si_max);
}

#ifdef __CUDACC__
/* a (+)= the part of lane + offset, for a shuffle-down tree. Field by field, so that only one
 * field of the other lane is live at a time (this runs at the end of register-heavy passes). */
__device__ __forceinline__ void part_shfl_merge(part &a, int offset)
{
	const unsigned all = 0xffffffffu;
	{
		const double nb = __shfl_down_sync(all, a.cnt, offset);
		const double mb = __shfl_down_sync(all, a.mean, offset);
		const double m2b = __shfl_down_sync(all, a.m2, offset);
		chan_merge(a.cnt, a.mean, a.m2, nb, mb, m2b);
	}
	a.sum += __shfl_down_sync(all, a.sum, offset);
	a.sum_abs += __shfl_down_sync(all, a.sum_abs, offset);
	a.err_sq += __shfl_down_sync(all, a.err_sq, offset);
	a.dq_sq += __shfl_down_sync(all, a.dq_sq, offset);
	a.dot += __shfl_down_sync(all, a.dot, offset);
	a.x_sq += __shfl_down_sync(all, a.x_sq, offset);
	a.nan += __shfl_down_sync(all, a.nan, offset);
	a.inf += __shfl_down_sync(all, a.inf, offset);
	a.zero += __shfl_down_sync(all, a.zero, offset);
	a.under += __shfl_down_sync(all, a.under, offset);
	a.over += __shfl_down_sync(all, a.over, offset);
	a.skipped += __shfl_down_sync(all, a.skipped, offset);
	a.min = fminf(a.min, __shfl_down_sync(all, a.min, offset));
	a.max = fmaxf(a.max, __shfl_down_sync(all, a.max, offset));
	a.minnz = fminf(a.minnz, __shfl_down_sync(all, a.minnz, offset));
	a.si_min = fminf(a.si_min, __shfl_down_sync(all, a.si_min, offset));
	a.si_max = fmaxf(a.si_max, __shfl_down_sync(all, a.si_max, offset));
}

/* The merge of every thread's part of the block, valid in thread 0. blockDim.x is a multiple of
 * 32 and at most 1024; `shared` holds blockDim.x / 32 parts. */
__device__ __forceinline__ void block_reduce(part &p, part *shared)
{
	const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
#pragma unroll 1
	for (int off = 16; off > 0; off >>= 1)
		part_shfl_merge(p, off);
	if (lane == 0)
		shared[warp] = p;
	__syncthreads();
	if (warp == 0) {
		if (lane < warps)
			p = shared[lane];
		else
			part_init(p);
#pragma unroll 1
		for (int off = 16; off > 0; off >>= 1)
			part_shfl_merge(p, off);
	}
}
#endif

/* ---- struct dli_stats_record, as kernels/record.c defines it ---- */

__host__ __device__ __forceinline__ void record_init(dli_stats_record &r)
{
	r.count = r.nan_count = r.inf_count = r.zero_count = 0;
	r.min = INFINITY;
	r.max = -INFINITY;
	r.amax = 0.0;
	r.min_nonzero_abs = INFINITY;
	r.sum = r.sum_abs = r.sum_sq = r.mean = r.m2 = 0.0;
	r.fp8_count = r.underflows = r.overflows = 0;
	r.err_sq = r.dot = r.dq_sq = r.x_sq = 0.0;
	r.scale_inv_min = INFINITY;
	r.scale_inv_max = 0.0;
}

/* Extrema as kernels/record.c combines them: plain comparisons that keep `a` on ties (+0 vs -0). */
__host__ __device__ __forceinline__ double lesser(double a, double b)
{
	return b < a ? b : a;
}

__host__ __device__ __forceinline__ double greater(double a, double b)
{
	return b > a ? b : a;
}

/* into = into (+) from: counts add, extrema combine, (mean, m2) by Chan's formula. */
__host__ __device__ __forceinline__ void record_merge(dli_stats_record &into,
						      const dli_stats_record &from)
{
	double na = (double)into.count;
	chan_merge(na, into.mean, into.m2, (double)from.count, from.mean, from.m2);
	into.count += from.count;
	into.nan_count += from.nan_count;
	into.inf_count += from.inf_count;
	into.zero_count += from.zero_count;
	into.min = lesser(into.min, from.min);
	into.max = greater(into.max, from.max);
	into.amax = greater(into.amax, from.amax);
	into.min_nonzero_abs = lesser(into.min_nonzero_abs, from.min_nonzero_abs);
	into.sum += from.sum;
	into.sum_abs += from.sum_abs;
	into.sum_sq += from.sum_sq;
	into.fp8_count += from.fp8_count;
	into.underflows += from.underflows;
	into.overflows += from.overflows;
	into.err_sq += from.err_sq;
	into.dot += from.dot;
	into.dq_sq += from.dq_sq;
	into.x_sq += from.x_sq;
	into.scale_inv_min = lesser(into.scale_inv_min, from.scale_inv_min);
	into.scale_inv_max = greater(into.scale_inv_max, from.scale_inv_max);
}

} // namespace dli_cuda

#endif
