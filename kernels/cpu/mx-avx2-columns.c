/* MXFP8's quantize-and-compare pass with AVX2 over column-wise blocks: sixteen columns of a strip
 * of 32 rows at a time, one block a lane, through the fast steps of mx-avx2-private.h. */
#include <math.h>

#include "mx-avx2-private.h"

/* 16 columns of one row as floats, signs kept, in two vectors: f32 and f16 by 8 consecutive
 * elements each, bf16 by even and odd columns. Sixteen, not eight: a row of a group is then a
 * whole line or half of one, which the group's two passes read, where eight f32 columns left
 * the other half of each line to the next group, after the 32 lines of a strip (a row stride of
 * a multiple of 4 KiB puts them all in one L1 set) had left L1. */
INLINE void load_cols_values(const char *p, enum dli_dtype dtype, __m256 *x0, __m256 *x1)
{
	if (dtype == DLI_DTYPE_BF16) {
		__m256i w = _mm256_loadu_si256((const __m256i *)p);
		*x0 = _mm256_castsi256_ps(_mm256_slli_epi32(w, 16));
		*x1 = _mm256_castsi256_ps(_mm256_and_si256(w, _mm256_set1_epi32((int)0xffff0000u)));
		return;
	}
	if (dtype == DLI_DTYPE_F32) {
		*x0 = _mm256_loadu_ps((const float *)p);
		*x1 = _mm256_loadu_ps((const float *)p + 8);
		return;
	}
	*x0 = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p));
	*x1 = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p + 1));
}

/* The same as magnitude bits. */
INLINE void load_cols(const char *p, enum dli_dtype dtype, const struct consts *k, __m256i *a0,
		      __m256i *a1)
{
	__m256 x0, x1;
	load_cols_values(p, dtype, &x0, &x1);
	*a0 = _mm256_and_si256(_mm256_castps_si256(x0), k->absmask);
	*a1 = _mm256_and_si256(_mm256_castps_si256(x1), k->absmask);
}

/* The codes of eight column blocks whose amaxes are in `amax`: the reciprocals and scales, and
 * whether any lane needs the scalar path (0, NaN, inf, outside [2^-60, 2^60], or scaling above
 * fp8_max). */
INLINE bool lane_scales(__m256i amax, const struct consts *k, __m256 *rcp, __m256i *e_out)
{
	__m256i off = _mm256_sub_epi32(amax, _mm256_set1_epi32(0x21800000));
	__m256i bad = _mm256_cmpgt_epi32(off, _mm256_set1_epi32(0x5d800000 - 0x21800000));
	bad = _mm256_or_si256(bad, _mm256_cmpgt_epi32(_mm256_setzero_si256(), off));
	__m256i v = _mm256_castps_si256(_mm256_mul_ps(_mm256_castsi256_ps(amax), k->maxrcp));
	__m256i mz = _mm256_cmpeq_epi32(_mm256_and_si256(v, _mm256_set1_epi32(0x7fffff)),
					_mm256_setzero_si256());
	__m256i e = _mm256_add_epi32(_mm256_add_epi32(_mm256_srli_epi32(v, 23), mz),
				     _mm256_set1_epi32(1));
	*rcp = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_sub_epi32(_mm256_set1_epi32(254), e), 23));
	__m256i top = _mm256_castps_si256(_mm256_mul_ps(_mm256_castsi256_ps(amax), *rcp));
	bad = _mm256_or_si256(bad, _mm256_cmpgt_epi32(top, k->maxbits));
	*e_out = e;
	return _mm256_testz_si256(bad, bad);
}

/* The fast steps' mode for column blocks, one a lane, from their smallest nonzero magnitudes
 * less 1 (`lowm`, zeros wrapped to the top) and reciprocals: as batch_plan's (mx-avx2-rows.c), per
 * block. */
INLINE enum fast_mode lane_mode(__m256i lowm, __m256 rcp, const struct consts *k)
{
	__m256 lowest = _mm256_mul_ps(
		_mm256_castsi256_ps(_mm256_add_epi32(lowm, _mm256_set1_epi32(1))), rcp);
	if (_mm256_movemask_ps(_mm256_cmp_ps(lowest, k->half_sub, _CMP_LE_OQ)))
		return FAST_UNDER;
	if (_mm256_movemask_ps(_mm256_cmp_ps(lowest, k->min_normal, _CMP_LT_OQ)))
		return FAST_SUBNORMAL;
	return FAST_NORMAL;
}

/* The fast steps of a group of columns down a strip of 32 rows (row stride `stride` bytes), each
 * lane its own block and floor, the group's two vectors into a set of float lanes each. */
INLINE void cols_steps(const char *p, size_t stride, enum dli_dtype dtype, __m256i floor0,
		       __m256i floor1, const struct consts *k, const enum fast_mode mode,
		       struct fast_lanes fl[2])
{
	for (int i = 0; i < DLI_MX_BLOCK; i++) {
		if (dtype == DLI_DTYPE_BF16 && mode == FAST_NORMAL) {
			step_bf16_normal(_mm256_loadu_si256((const __m256i *)(p + i * stride)), k,
					 true, fl);
			continue;
		}
		__m256 x0, x1;
		load_cols_values(p + i * stride, dtype, &x0, &x1);
		step_fast(x0, floor0, k, mode, &fl[0], &fl[0].under);
		step_fast(x1, floor1, k, mode, &fl[1], &fl[1].under);
	}
}

/* COMPARE of rows [r0, r1) (whole strips of 32 rows but the tensor's last), column-wise blocks:
 * sixteen columns at a time, one column block a lane, so each lane has its own scale and nothing
 * is broadcast. A group with a lane the fast steps cannot take (see
 * lane_scales) goes to the scalar block. */
INLINE void cols_avx2(const struct mx_pass *ps, enum dli_dtype dtype, int64_t r0, int64_t r1,
		      struct dli_block_terms *t)
{
	const int mbits = ps->format == DLI_DTYPE_F8E4M3 ? 3 : 2;
	const int bias = ps->format == DLI_DTYPE_F8E4M3 ? 7 : 15;
	const struct consts k = {
		.maxrcp = _mm256_set1_ps(dli_mx_max_rcp(ps->format)),
		CONSTS_OF(ps->format, mbits, bias),
	};
	const size_t sz = dli_dtype_size(dtype);
	const int64_t cols = ps->cols, group = 16;
	const __m256i one = _mm256_set1_epi32(1);
	struct fast_lanes fl[2] = {fast_lanes_zero(), fast_lanes_zero()};
	struct fast_sums f = {.err = _mm256_setzero_pd(), .dqs = _mm256_setzero_pd(),
			      .xs = _mm256_setzero_pd()};
	__m256i emin_seen = _mm256_set1_epi32(255), emax_seen = _mm256_setzero_si256();
	uint64_t count = 0;

	for (int64_t r = r0; r < r1; r += DLI_MX_BLOCK) {
		int64_t m = r1 - r < DLI_MX_BLOCK ? r1 - r : DLI_MX_BLOCK;
		int64_t c = 0;
		for (; m == DLI_MX_BLOCK && c + group <= cols; c += group) {
			const char *p = ps->data + (size_t)(r * cols + c) * sz;
			const size_t stride = (size_t)cols * sz;
			__m256i m0 = _mm256_setzero_si256(), m1 = m0, a0, a1;
			__m256i low0 = _mm256_set1_epi32(-1), low1 = low0;
			for (int i = 0; i < DLI_MX_BLOCK; i++) {
				load_cols(p + i * stride, dtype, &k, &a0, &a1);
				m0 = _mm256_max_epu32(m0, a0);
				low0 = _mm256_min_epu32(low0, _mm256_sub_epi32(a0, one));
				m1 = _mm256_max_epu32(m1, a1);
				low1 = _mm256_min_epu32(low1, _mm256_sub_epi32(a1, one));
			}
			__m256 rcp0, rcp1;
			__m256i e0, e1;
			bool ok = lane_scales(m0, &k, &rcp0, &e0) &&
				  lane_scales(m1, &k, &rcp1, &e1);
			if (!ok) {
				for (int64_t j = c; j < c + group; j++)
					dli_mx_block_scalar(ps, r * cols + j, cols, DLI_MX_BLOCK, t);
				continue;
			}
			emin_seen = _mm256_min_epu32(emin_seen, e0);
			emax_seen = _mm256_max_epu32(emax_seen, e0);
			emin_seen = _mm256_min_epu32(emin_seen, e1);
			emax_seen = _mm256_max_epu32(emax_seen, e1);
			enum fast_mode mode = lane_mode(low0, rcp0, &k);
			enum fast_mode mode1 = lane_mode(low1, rcp1, &k);
			mode = mode1 > mode ? mode1 : mode;
			/* each lane's floor, as batch_plan's */
			__m256i floor0 = _mm256_slli_epi32(_mm256_add_epi32(e0, k.fbias), 23);
			__m256i floor1 = _mm256_slli_epi32(_mm256_add_epi32(e1, k.fbias), 23);
			if (mode == FAST_UNDER)
				cols_steps(p, stride, dtype, floor0, floor1, &k, FAST_UNDER, fl);
			else if (mode == FAST_SUBNORMAL)
				cols_steps(p, stride, dtype, floor0, floor1, &k, FAST_SUBNORMAL,
					   fl);
			else
				cols_steps(p, stride, dtype, floor0, floor1, &k, FAST_NORMAL, fl);
			count += (uint64_t)(DLI_MX_BLOCK * group);
			/* 32 terms a lane: to double now */
			flush_fast(fl, &f, t);
		}
		for (; c < cols; c++)
			dli_mx_block_scalar(ps, r * cols + c, cols, m, t);
	}
	t->count += count;
	double ferr = reduce_pd(f.err), fdqs = reduce_pd(f.dqs), fxs = reduce_pd(f.xs);
	t->err += ferr;
	t->dot += (fxs + fdqs - ferr) / 2; /* as in add_sums */
	t->dqs += fdqs;
	t->xs += fxs;
	add_scale_range(&emin_seen, &emax_seen, t);
}

void dli_mx_cols_avx2(const struct mx_pass *ps, int64_t r0, int64_t r1, struct dli_block_terms *t)
{
	switch (ps->dtype) {
	case DLI_DTYPE_F32:
		cols_avx2(ps, DLI_DTYPE_F32, r0, r1, t);
		break;
	case DLI_DTYPE_F16:
		cols_avx2(ps, DLI_DTYPE_F16, r0, r1, t);
		break;
	default:
		cols_avx2(ps, DLI_DTYPE_BF16, r0, r1, t);
		break;
	}
}
