/* The vector steps that the AVX2 passes of block-scaled FP8 (mx-avx2-rows.c, mx-avx2-columns.c,
 * fp8-block-avx2.c) share, with their lanes and constants; for files built with AVX2, FMA, F16C. */
#ifndef DLI_MX_AVX2_PRIVATE_H
#define DLI_MX_AVX2_PRIVATE_H

#include <immintrin.h>
#include <math.h>

#include "mx-private.h"

/* A block of finite values whose amax lies in [2^-60, 2^60] goes through vector steps: its scale
 * is a power of two, so |x| * 2^(127 - e) is exact and its FP8 rounding times the scale is x
 * rounded in its own scale by the float trick of fp8-avx2.c (add and subtract a constant from x's
 * exponent, see step_fast; bf16 whose scaled values are all normals of the format: on its raw
 * bits, see step_bf16_normal), with no multiply; the terms are sums of non-negative products (x
 * and dq share their sign), summed in float lanes and widened to double every few blocks. */

#define INLINE static inline __attribute__((always_inline))

struct lanes {
	__m256 err, dot, dqs, xs;
	__m256i under, over;
};

/* The fast steps' float lanes: no sum x dq, no overflows. */
struct fast_lanes {
	__m256 err, dqs, xs;
	__m256i under;
};

INLINE struct fast_lanes fast_lanes_zero(void)
{
	return (struct fast_lanes){_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(),
				   _mm256_setzero_si256()};
}

struct consts {
	__m256i absmask, maxbits, expmask, emin, cadd;
	__m256 maxrcp;   /* float(1 / fp8_max) */
	__m256i chalf;   /* 23 - mbits in the exponent field, with the mantissa of 1.5 */
	__m256i fbias;   /* 1 - bias: the format's smallest normal exponent */
	__m256 half_sub; /* half the format's smallest subnormal */
	__m256 min_normal; /* the format's smallest normal */
	/* bf16's rounding to the format's mantissa in 16-bit lanes (step_bf16_normal): the lowest
	 * mantissa bit kept, half of it less 1, and the bits kept (sign, exponent, mantissa) */
	__m256i keep_lsb16, half16, keep16;
};

INLINE __m256d widen(__m256 v)
{
	return _mm256_add_pd(_mm256_cvtps_pd(_mm256_castps256_ps128(v)),
			     _mm256_cvtps_pd(_mm256_extractf128_ps(v, 1)));
}

INLINE double reduce_pd(__m256d v)
{
	__m128d h = _mm_add_pd(_mm256_castpd256_pd128(v), _mm256_extractf128_pd(v, 1));
	return _mm_cvtsd_f64(_mm_add_sd(h, _mm_unpackhi_pd(h, h)));
}

INLINE uint64_t sum_epi32(__m256i v)
{
	int32_t l[8];
	uint64_t s = 0;

	_mm256_storeu_si256((__m256i *)l, v);
	#pragma GCC unroll 8
	for (int i = 0; i < 8; i++)
		s += (uint32_t)l[i];
	return s;
}

INLINE uint32_t hmax_epu32(__m256i v)
{
	__m128i m = _mm_max_epu32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
	m = _mm_max_epu32(m, _mm_shuffle_epi32(m, 0x4e));
	m = _mm_max_epu32(m, _mm_shuffle_epi32(m, 0xb1));
	return (uint32_t)_mm_cvtsi128_si32(m);
}

/* The 32 magnitudes of a block as float bits, in four vectors (lane order does not matter: the
 * block's terms are sums). */
INLINE void load_abs(const char *p, enum dli_dtype dtype, const struct consts *k, __m256i a[4])
{
	if (dtype == DLI_DTYPE_BF16) {
		/* 16 bf16 a load: the even ones shifted up, the odd ones masked. */
		#pragma GCC unroll 8
		for (int h = 0; h < 2; h++) {
			__m256i w = _mm256_loadu_si256((const __m256i *)(p + 32 * h));
			a[2 * h] = _mm256_and_si256(_mm256_slli_epi32(w, 16), k->absmask);
			a[2 * h + 1] = _mm256_and_si256(w, _mm256_set1_epi32(0x7fff0000));
		}
		return;
	}
	#pragma GCC unroll 8
	for (int h = 0; h < 4; h++) {
		__m256 x = dtype == DLI_DTYPE_F32
				   ? _mm256_loadu_ps((const float *)p + 8 * h)
				   : _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p + h));
		a[h] = _mm256_and_si256(_mm256_castps_si256(x), k->absmask);
	}
}

/* The 32 values of a block as floats, signs kept, in four vectors (lane order free, as above):
 * bf16 by a shift and a mask, no magnitude mask, which the fast steps do without. */
INLINE void load_values(const char *p, enum dli_dtype dtype, __m256 x[4])
{
	if (dtype == DLI_DTYPE_BF16) {
		#pragma GCC unroll 8
		for (int h = 0; h < 2; h++) {
			__m256i w = _mm256_loadu_si256((const __m256i *)(p + 32 * h));
			x[2 * h] = _mm256_castsi256_ps(_mm256_slli_epi32(w, 16));
			x[2 * h + 1] = _mm256_castsi256_ps(
				_mm256_and_si256(w, _mm256_set1_epi32((int)0xffff0000u)));
		}
		return;
	}
	#pragma GCC unroll 8
	for (int h = 0; h < 4; h++)
		x[h] = dtype == DLI_DTYPE_F32
			       ? _mm256_loadu_ps((const float *)p + 8 * h)
			       : _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p + h));
}

INLINE void step(__m256i a, __m256 rcp, __m256 si, const struct consts *k, struct lanes *l)
{
	__m256 xa = _mm256_castsi256_ps(a);
	__m256 s = _mm256_mul_ps(xa, rcp);
	__m256i sb = _mm256_castps_si256(s);
	__m256i ac = _mm256_min_epi32(sb, k->maxbits); /* saturation */
	__m256i e = _mm256_max_epi32(_mm256_and_si256(ac, k->expmask), k->emin); /* subnormal grid */
	__m256 c = _mm256_castsi256_ps(_mm256_add_epi32(e, k->cadd));
	__m256 r = _mm256_sub_ps(_mm256_add_ps(_mm256_castsi256_ps(ac), c), c);
	__m256 dq = _mm256_mul_ps(r, si);
	__m256 d = _mm256_sub_ps(xa, dq);
	__m256i rz = _mm256_cmpeq_epi32(_mm256_castps_si256(r), _mm256_setzero_si256());
	__m256i xz = _mm256_cmpeq_epi32(a, _mm256_setzero_si256());

	l->err = _mm256_fmadd_ps(d, d, l->err);
	l->dot = _mm256_fmadd_ps(xa, dq, l->dot);
	l->dqs = _mm256_fmadd_ps(dq, dq, l->dqs);
	l->xs = _mm256_fmadd_ps(xa, xa, l->xs);
	l->under = _mm256_sub_epi32(l->under, _mm256_andnot_si256(xz, rz));
	l->over = _mm256_sub_epi32(l->over, _mm256_cmpgt_epi32(sb, k->maxbits));
}

/* What the fast steps of a batch or a tile must do beyond the rounding and the sums, in order of
 * work (a group of several takes the largest). */
enum fast_mode {
	FAST_NORMAL,    /* nothing: every nonzero scaled |x| is at least the smallest normal */
	FAST_SUBNORMAL, /* round some on the subnormals' grid (see step_fast's grid_floor) */
	FAST_UNDER,     /* that, and count underflows: (dq == 0) - (x == 0), x = 0 giving dq = 0 */
};

/* One step without the saturation and overflow count (a batch is taken only when no block's
 * largest element scales above fp8_max) and without sum x dq (flush derives it), in x's own scale:
 * with a power-of-two scale, rounding x * rcp to the format's grid and scaling back by si is
 * rounding x to that grid times si, so dq = (x + C) - C, two adds and no multiply, with
 * C = 1.5 * 2^(max(E, grid_floor) + 23 - mbits) from x's exponent E (the 1.5 keeps x + C in C's
 * binade for either sign of x, so x keeps its sign and needs no mask) and the block's
 * `grid_floor`, the format's smallest normal exponent times si (in the exponent field; below it
 * the grid is the subnormals'). dq and x - dq are exact and the same as |x| * rcp rounded, times
 * si. The underflows count in *under, which may be another set's (FP8 block scaling's tiles
 * count in one, and so keep a register for the steps). */
INLINE void step_fast(__m256 x, __m256i grid_floor, const struct consts *k, enum fast_mode mode,
		      struct fast_lanes *l, __m256i *under)
{
	__m256i e = _mm256_and_si256(_mm256_castps_si256(x), k->expmask);
	if (mode != FAST_NORMAL)
		e = _mm256_max_epi32(e, grid_floor);
	__m256 c = _mm256_castsi256_ps(_mm256_add_epi32(e, k->chalf));
	__m256 dq = _mm256_sub_ps(_mm256_add_ps(x, c), c);
	__m256 d = _mm256_sub_ps(x, dq);

	l->err = _mm256_fmadd_ps(d, d, l->err);
	l->dqs = _mm256_fmadd_ps(dq, dq, l->dqs);
	l->xs = _mm256_fmadd_ps(x, x, l->xs);
	if (mode == FAST_UNDER) {
		const __m256 zero = _mm256_setzero_ps();
		__m256i rz = _mm256_castps_si256(_mm256_cmp_ps(dq, zero, _CMP_EQ_OQ));
		__m256i xz = _mm256_castps_si256(_mm256_cmp_ps(x, zero, _CMP_EQ_OQ));
		*under = _mm256_add_epi32(_mm256_sub_epi32(*under, rz), xz);
	}
}

/* The fast steps of FAST_NORMAL for 16 bf16 at once, in their own 16-bit lanes, the even ones
 * into l[0] and the odd ones into l[1] (as load_values splits them, so the sums are step_fast's,
 * term for term). Every nonzero scaled |x| is a normal of the format and none is above fp8_max
 * (the caller's plan), and the scale is a power of two, so dq is x with its 7-bit mantissa
 * rounded to nearest even at the format's mbits: add half an ulp of the format less 1, plus the
 * lowest kept bit (ties go to even), and drop the bits below. A carry out of the mantissa steps
 * the exponent up, which is the right rounding; it never reaches the sign (the exponent of a
 * finite x below 2^60 is far from all ones), and fp8_max, on the format's grid, rounds to
 * itself, so nothing rounds above it. Zeros stay zeros. Integer operations on 16 lanes, where
 * step_fast's rounding is four float-lane operations a vector of 8. Sums x^2 only when sum_xs
 * (a compile-time constant): the bf16 passes are bound by these operations, 2 FMAs of 6 are x^2's,
 * and a caller given the statistics pass's sum of x^2 leaves them out (struct mx_pass's
 * xs_known). */
INLINE void step_bf16_normal(__m256i w, const struct consts *k, const bool sum_xs,
			     struct fast_lanes l[2])
{
	const __m256i high = _mm256_set1_epi32((int)0xffff0000u);
	__m256i odd = _mm256_cmpeq_epi16(_mm256_and_si256(w, k->keep_lsb16), k->keep_lsb16);
	__m256i q = _mm256_and_si256(_mm256_sub_epi16(_mm256_add_epi16(w, k->half16), odd),
				     k->keep16);
	__m256 x[2] = {_mm256_castsi256_ps(_mm256_slli_epi32(w, 16)),
		       _mm256_castsi256_ps(_mm256_and_si256(w, high))};
	__m256 dq[2] = {_mm256_castsi256_ps(_mm256_slli_epi32(q, 16)),
			_mm256_castsi256_ps(_mm256_and_si256(q, high))};

	#pragma GCC unroll 2
	for (int h = 0; h < 2; h++) {
		__m256 d = _mm256_sub_ps(x[h], dq[h]); /* exact: x and dq within an ulp of x */
		l[h].err = _mm256_fmadd_ps(d, d, l[h].err);
		l[h].dqs = _mm256_fmadd_ps(dq[h], dq[h], l[h].dqs);
		if (sum_xs)
			l[h].xs = _mm256_fmadd_ps(x[h], x[h], l[h].xs);
	}
}

/* The initializers of the consts every pass uses, for `format` (E4M3 or E5M2) of `mbits` mantissa
 * bits and exponent bias `bias`; a pass adds those of emin, cadd and maxrcp that it uses. A macro:
 * a function returning all the consts changed the code GCC made of the passes. */
#define CONSTS_OF(format, mbits, bias)                                                            \
	.absmask = _mm256_set1_epi32(0x7fffffff),                                                 \
	.maxbits = _mm256_set1_epi32(                                                             \
		(int)((format) == DLI_DTYPE_F8E4M3 ? 0x43e00000u : 0x47600000u)),                 \
	.expmask = _mm256_set1_epi32(0x7f800000),                                                 \
	.chalf = _mm256_set1_epi32(((23 - (mbits)) << 23) | 0x400000),                            \
	.fbias = _mm256_set1_epi32(1 - (bias)),                                                   \
	.half_sub = _mm256_set1_ps(ldexpf(1.0f, -(bias) - (mbits))),                              \
	.min_normal = _mm256_set1_ps(ldexpf(1.0f, 1 - (bias))),                                   \
	.keep_lsb16 = _mm256_set1_epi16((short)(1 << (7 - (mbits)))),                             \
	.half16 = _mm256_set1_epi16((short)((1 << (6 - (mbits))) - 1)),                          \
	.keep16 = _mm256_set1_epi16((short)(0xffff << (7 - (mbits))))

/* The sums of the fast batches: err, dqs, xs; their sum x dq is (xs + dqs - err) / 2 (x and dq
 * share sign and lie within 2^-(mbits+1) of each other or dq is 0, so nothing cancels). The
 * loops keep the float lanes in registers, in two sets (a block's even vectors in one, its odd
 * ones in the other, so that each sum's chain of FMAs, 4 cycles each, waits half as long), and
 * the rest here, in memory: in registers too, they left too few for the steps. */
struct fast_sums {
	__m256d err, dqs, xs;
	__m256i emin_seen, emax_seen; /* the E8M0 codes' range over the batches */
};

INLINE void flush(struct lanes *l, __m256d acc[4], struct dli_block_terms *t)
{
	acc[0] = _mm256_add_pd(acc[0], widen(l->err));
	acc[1] = _mm256_add_pd(acc[1], widen(l->dot));
	acc[2] = _mm256_add_pd(acc[2], widen(l->dqs));
	acc[3] = _mm256_add_pd(acc[3], widen(l->xs));
	t->under += sum_epi32(l->under);
	t->over += sum_epi32(l->over);
	l->err = l->dot = l->dqs = l->xs = _mm256_setzero_ps();
	l->under = l->over = _mm256_setzero_si256();
}

/* The fast lanes into f and t; `counted` (a compile-time constant): their underflow counts too,
 * which a caller whose steps count none (no FAST_UNDER step) leaves out. */
INLINE void flush_fast_lanes(struct fast_lanes l[2], struct fast_sums *f, struct dli_block_terms *t,
			     const bool counted)
{
	struct fast_lanes *a = &l[0], *b = &l[1];
	f->err = _mm256_add_pd(f->err, widen(_mm256_add_ps(a->err, b->err)));
	f->dqs = _mm256_add_pd(f->dqs, widen(_mm256_add_ps(a->dqs, b->dqs)));
	f->xs = _mm256_add_pd(f->xs, widen(_mm256_add_ps(a->xs, b->xs)));
	if (counted)
		t->under += sum_epi32(_mm256_add_epi32(a->under, b->under));
	a->err = a->dqs = a->xs = b->err = b->dqs = b->xs = _mm256_setzero_ps();
	a->under = b->under = _mm256_setzero_si256();
}

INLINE void flush_fast(struct fast_lanes l[2], struct fast_sums *f, struct dli_block_terms *t)
{
	flush_fast_lanes(l, f, t, true);
}

/* A pass's sums into *t: the steps' with saturation (acc: err, dot, dqs, xs) and the fast steps'
 * (f), whose sum x dq is (xs + dqs - err) / 2 (see struct fast_sums). */
INLINE void add_sums(const __m256d acc[4], const struct fast_sums *f, struct dli_block_terms *t)
{
	double ferr = reduce_pd(f->err), fdqs = reduce_pd(f->dqs), fxs = reduce_pd(f->xs);
	t->err += reduce_pd(acc[0]) + ferr;
	t->dot += reduce_pd(acc[1]) + (fxs + fdqs - ferr) / 2;
	t->dqs += reduce_pd(acc[2]) + fdqs;
	t->xs += reduce_pd(acc[3]) + fxs;
}

/* The scales of the E8M0 codes the vector steps took, from the smallest in emin_seen's lanes to
 * the largest in emax_seen's, into t's range: none when emax_seen is all 0 (their codes are 1 ..
 * 254, never 0, so no vector step ran). By address: passed by value, they changed rows_avx2's
 * code. */
INLINE void add_scale_range(const __m256i *emin_seen, const __m256i *emax_seen,
			    struct dli_block_terms *t)
{
	uint32_t emax = hmax_epu32(*emax_seen);
	if (emax) {
		/* the smallest: the complement of the largest complement */
		__m256i inv = _mm256_xor_si256(*emin_seen, _mm256_set1_epi32(-1));
		uint32_t emin = ~hmax_epu32(inv);
		double lo = dli_mx_scale_inv((uint8_t)emin), hi = dli_mx_scale_inv((uint8_t)emax);
		if (lo < t->lo)
			t->lo = lo;
		if (hi > t->hi)
			t->hi = hi;
	}
}

#endif
