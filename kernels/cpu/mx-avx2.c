/* MXFP8's quantize-and-compare pass with AVX2 (8 lanes), row-wise and column-wise, and FP8 block
 * scaling's 128 x 128 tiles. A block of 32 finite values whose amax lies in [2^-60, 2^60] goes
 * through vector steps: its scale is a power of two, so |x| * 2^(127 - e) is exact and its FP8
 * rounding times the scale is x rounded in its own scale by the float trick of fp8-avx2.c (add
 * and subtract a constant from x's exponent, see step_fast; bf16 whose scaled values are all
 * normals of the format: on its raw bits, see step_bf16_normal), with no multiply; the terms
 * are sums of non-negative products (x and dq share their sign), summed in float lanes and
 * widened to double every few blocks. Every other block (NaN, infinities, huge or tiny
 * magnitudes, a row's partial last block) goes to the one-block path (vector steps that leave
 * NaN and infinities out, or the scalar reference); a batch of eight blocks sends only those
 * there, after a call-free loop over the row's batches (a call would keep the sums in memory:
 * every vector register is the caller's to save). Compiled with AVX2, FMA and F16C flags. */
#include <immintrin.h>
#include <math.h>
#include <string.h>

#include "avx2-private.h"
#include "mx-private.h"

#define INLINE static inline __attribute__((always_inline))
/* Blocks summed in float lanes before the sums go to double: 4 terms a lane a block, so at most
 * 64 terms a lane, and non-negative terms keep the float sums within 64 * 2^-24 of exact. */
#define FLUSH_BLOCKS 16

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

/* Eight blocks at a time: their amaxes gathered into one vector, their E8M0 codes, scale
 * reciprocals and scales computed in its lanes, and each block's broadcast from there, so that
 * no scalar work sits between two blocks. */
#define BATCH 8

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

/* dli_avx2_hmax8 (avx2-private.h) for sixteen 16-bit lanes (bf16 magnitude bits), the maxima
 * widened to float bits at the end: a level more of unpacks, but no widening of each block's
 * maximum first. */
INLINE __m256i hmax8_16(const __m256i m[8])
{
	__m256i t[4], u[2];
	#pragma GCC unroll 8
	for (int i = 0; i < 4; i++)
		t[i] = _mm256_max_epu16(_mm256_unpacklo_epi16(m[2 * i], m[2 * i + 1]),
					_mm256_unpackhi_epi16(m[2 * i], m[2 * i + 1]));
	#pragma GCC unroll 8
	for (int i = 0; i < 2; i++)
		u[i] = _mm256_max_epu16(_mm256_unpacklo_epi32(t[2 * i], t[2 * i + 1]),
					_mm256_unpackhi_epi32(t[2 * i], t[2 * i + 1]));
	__m256i v = _mm256_max_epu16(_mm256_unpacklo_epi64(u[0], u[1]),
				     _mm256_unpackhi_epi64(u[0], u[1]));
	__m128i w = _mm_max_epu16(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
	return _mm256_slli_epi32(_mm256_cvtepu16_epi32(w), 16);
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
 * step_fast's rounding is four float-lane operations a vector of 8. */
INLINE void step_bf16_normal(__m256i w, const struct consts *k, struct fast_lanes l[2])
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
		l[h].xs = _mm256_fmadd_ps(x[h], x[h], l[h].xs);
	}
}

/* The rounding constants of step_bf16_normal for a format of mbits mantissa bits. */
#define BF16_ROUNDING(mbits)                                                                      \
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

/* One block through the fast steps, its grid_floor broadcast from memory: a broadcast load costs no
 * vector pipe, a lane permute does. */
INLINE void fast_block(const char *p, enum dli_dtype dtype, const int32_t *grid_floor,
		       const struct consts *k, enum fast_mode mode, struct fast_lanes l[2])
{
	if (dtype == DLI_DTYPE_BF16 && mode == FAST_NORMAL) {
		step_bf16_normal(_mm256_loadu_si256((const __m256i *)p), k, l);
		step_bf16_normal(_mm256_loadu_si256((const __m256i *)p + 1), k, l);
		return;
	}
	__m256 x[4];
	__m256i fb = _mm256_castps_si256(_mm256_broadcast_ss((const float *)grid_floor));
	load_values(p, dtype, x);
	#pragma GCC unroll 8
	for (int h = 0; h < 4; h++)
		step_fast(x[h], fb, k, mode, &l[h & 1], &l[h & 1].under);
}

/* The blocks of a batch not in bad_mask through the fast steps. A loop, not unrolled: unrolled,
 * GCC merged the variants and ran out of registers for the sums. */
INLINE void fast_blocks(const char *p, enum dli_dtype dtype, size_t bstride, int bad_mask,
			const int32_t *grid_floors, const struct consts *k,
			const enum fast_mode mode, struct fast_lanes l[2])
{
	#pragma GCC unroll 1
	for (int b = 0; b < BATCH; b++)
		if (!(bad_mask >> b & 1))
			fast_block(p + b * bstride, dtype, grid_floors + b, k, mode, l);
}

/* What a batch's fast steps need, worked out from its amaxes. */
struct plan {
	int bad;    /* the blocks left to the one-block path, bit b for block b */
	enum fast_mode mode;
	int32_t grid_floors[BATCH]; /* each block's (see step_fast) */
};

/* The plan of a batch of eight full blocks at p (stride `bstride` bytes between blocks), the codes
 * of the blocks it takes into f's range. A block is left to the one-block path for an amax that
 * is 0, NaN, inf or outside [2^-60, 2^60], or that scales above fp8_max; the others go through
 * the fast steps, so that a lone NaN costs its own block the one-block path, not the batch. */
INLINE void batch_plan(const char *p, enum dli_dtype dtype, size_t bstride,
		       const struct consts *k, struct fast_sums *f, struct plan *pl)
{
	__m256i m[BATCH], amax, lowm = _mm256_set1_epi32(-1), one = _mm256_set1_epi32(1);
	if (dtype == DLI_DTYPE_BF16) {
		/* bf16 in its own 16-bit lanes (a bf16's magnitude bits are the top half of its
		 * float's, so maxima and minima carry over), widened once a block */
		const __m256i abs16 = _mm256_set1_epi16(0x7fff), one16 = _mm256_set1_epi16(1);
		__m256i low16 = _mm256_set1_epi16(-1);
		#pragma GCC unroll 8
		for (int b = 0; b < BATCH; b++) {
			const __m256i *q = (const __m256i *)(p + b * bstride);
			__m256i a0 = _mm256_and_si256(_mm256_loadu_si256(q), abs16);
			__m256i a1 = _mm256_and_si256(_mm256_loadu_si256(q + 1), abs16);
			m[b] = _mm256_max_epu16(a0, a1);
			low16 = _mm256_min_epu16(low16, _mm256_min_epu16(_mm256_sub_epi16(a0, one16),
									 _mm256_sub_epi16(a1, one16)));
		}
		/* as float bits less 1: ((lo + 1) << 16) - 1, 0xffff (no nonzero) wrapping to the
		 * top */
		__m256i lo = _mm256_and_si256(_mm256_min_epu16(low16, _mm256_srli_epi32(low16, 16)),
					      _mm256_set1_epi32(0xffff));
		lowm = _mm256_sub_epi32(_mm256_slli_epi32(_mm256_add_epi32(lo, one), 16), one);
		amax = hmax8_16(m);
	} else {
		#pragma GCC unroll 8
		for (int b = 0; b < BATCH; b++) {
			__m256i a[4];
			load_abs(p + b * bstride, dtype, k, a);
			m[b] = _mm256_max_epu32(_mm256_max_epu32(a[0], a[1]),
						_mm256_max_epu32(a[2], a[3]));
			/* the batch's smallest nonzero magnitude, less 1 (zeros wrap to the top) */
			#pragma GCC unroll 8
			for (int h = 0; h < 4; h++)
				lowm = _mm256_min_epu32(lowm, _mm256_sub_epi32(a[h], one));
		}
		amax = dli_avx2_hmax8(m);
	}
	/* in [2^-60, 2^60] as unsigned bits: amax - 2^-60 <= 2^60 - 2^-60 */
	__m256i off = _mm256_sub_epi32(amax, _mm256_set1_epi32(0x21800000));
	__m256i bad = _mm256_cmpgt_epi32(off, _mm256_set1_epi32(0x5d800000 - 0x21800000));
	bad = _mm256_or_si256(bad, _mm256_cmpgt_epi32(_mm256_setzero_si256(), off));
	/* the code: v = amax * float(1 / fp8_max) (a normal float here), its exponent field,
	 * plus 1 when its mantissa is nonzero */
	__m256i v = _mm256_castps_si256(_mm256_mul_ps(_mm256_castsi256_ps(amax), k->maxrcp));
	__m256i e = _mm256_srli_epi32(v, 23);
	__m256i mz = _mm256_cmpeq_epi32(_mm256_and_si256(v, _mm256_set1_epi32(0x7fffff)),
					_mm256_setzero_si256());
	e = _mm256_add_epi32(_mm256_add_epi32(e, mz), _mm256_set1_epi32(1)); /* mz: -1 or 0 */
	__m256 rcp = _mm256_castsi256_ps(
		_mm256_slli_epi32(_mm256_sub_epi32(_mm256_set1_epi32(254), e), 23));
	/* the largest element scaled: above fp8_max only by the rounding of v */
	__m256i top = _mm256_castps_si256(_mm256_mul_ps(_mm256_castsi256_ps(amax), rcp));
	bad = _mm256_or_si256(bad, _mm256_cmpgt_epi32(top, k->maxbits));
	int bad_mask = _mm256_movemask_ps(_mm256_castsi256_ps(bad));
	pl->bad = bad_mask;
	if (bad_mask == 0xff)
		return;
	/* the codes of the blocks taken here (the others: 0, which no code of theirs is) */
	e = _mm256_andnot_si256(bad, e);
	f->emin_seen = _mm256_min_epu32(f->emin_seen, _mm256_or_si256(e, _mm256_and_si256(
								      bad, _mm256_set1_epi32(255))));
	f->emax_seen = _mm256_max_epu32(f->emax_seen, e);
	/* No underflow to count when the batch's smallest nonzero |x| times the smallest of its
	 * blocks' reciprocals (the largest code's) is above half the format's smallest subnormal:
	 * every scaled nonzero value is then above it too, and rounds to a nonzero code (half of
	 * it, a tie, would round to the even 0). The blocks left out count in that smallest |x|,
	 * which can only make the mode FAST_UNDER where it need not be. */
	__m256i emax8 = _mm256_max_epu32(e, _mm256_permute2x128_si256(e, e, 0x01));
	emax8 = _mm256_max_epu32(emax8, _mm256_shuffle_epi32(emax8, 0x4e));
	emax8 = _mm256_max_epu32(emax8, _mm256_shuffle_epi32(emax8, 0xb1));
	__m256 rcpmin = _mm256_castsi256_ps(
		_mm256_slli_epi32(_mm256_sub_epi32(_mm256_set1_epi32(254), emax8), 23));
	__m256i lmin = _mm256_min_epu32(lowm, _mm256_permute2x128_si256(lowm, lowm, 0x01));
	lmin = _mm256_min_epu32(lmin, _mm256_shuffle_epi32(lmin, 0x4e));
	lmin = _mm256_min_epu32(lmin, _mm256_shuffle_epi32(lmin, 0xb1));
	lmin = _mm256_add_epi32(lmin, one); /* the smallest nonzero |x| (the min of |x| - 1, + 1) */
	__m256 lowest = _mm256_mul_ps(_mm256_castsi256_ps(lmin), rcpmin);
	/* likewise, no value on the subnormals' grid when it is at least the smallest normal */
	pl->mode = _mm256_movemask_ps(_mm256_cmp_ps(lowest, k->half_sub, _CMP_LE_OQ))
			   ? FAST_UNDER
		   : _mm256_movemask_ps(_mm256_cmp_ps(lowest, k->min_normal, _CMP_LT_OQ))
			   ? FAST_SUBNORMAL
			   : FAST_NORMAL;
	/* each block's grid_floor (see step_fast): the format's smallest normal exponent, 1 - bias,
	 * plus log2(si) = e - 127, in the exponent field; from memory (see fast_block) */
	_mm256_storeu_si256((__m256i *)pl->grid_floors,
			    _mm256_slli_epi32(_mm256_add_epi32(e, k->fbias), 23));
}

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

/* One full block by the one-block path: the scalar code, the vector steps with saturation and
 * overflow counts, or nothing but its count for zeros. */
INLINE void one_block(const struct mx_pass *ps, enum dli_dtype dtype, const char *p, int64_t idx,
		      const struct consts *k, struct lanes *l, __m256d acc[4], int *pending,
		      uint64_t *count, struct dli_block_terms *t)
{
	__m256i a[4];
	load_abs(p, dtype, k, a);
	uint32_t amax_bits = hmax_epu32(_mm256_max_epu32(_mm256_max_epu32(a[0], a[1]),
							 _mm256_max_epu32(a[2], a[3])));
	uint32_t block_n = DLI_MX_BLOCK; /* the elements compared: the finite ones */
	if (amax_bits >= 0x7f800000u) {
		/* NaN or an infinity. They are left out of every term (the main pass counts them):
		 * their lanes are zeroed, and the amax is that of the finite values, plus inf. */
		__m256i finm = _mm256_set1_epi32(0x7f7fffff), fmax8 = _mm256_setzero_si256();
		unsigned nonfinite = 0;
		bool inf = false;
		#pragma GCC unroll 8
		for (int h = 0; h < 4; h++) {
			__m256i nf = _mm256_cmpgt_epi32(a[h], finm);
			inf = inf || !_mm256_testz_si256(
					     _mm256_cmpeq_epi32(a[h], _mm256_set1_epi32(0x7f800000)),
					     _mm256_set1_epi32(-1));
			nonfinite += (unsigned)__builtin_popcount(
				(unsigned)_mm256_movemask_ps(_mm256_castsi256_ps(nf)));
			a[h] = _mm256_andnot_si256(nf, a[h]);
			fmax8 = _mm256_max_epu32(fmax8, a[h]);
		}
		uint32_t fmax_bits = hmax_epu32(fmax8);
		if (fmax_bits != 0 && (fmax_bits > 0x5d800000u || fmax_bits < 0x21800000u)) {
			dli_mx_block_scalar(ps, idx, 1, DLI_MX_BLOCK, t);
			return;
		}
		block_n = DLI_MX_BLOCK - nonfinite;
		if (inf) {
			/* Code 0xfe: every finite x is scaled by 2^-127, far below the format's
			 * subnormals from |x| <= 2^60, so each nonzero one underflows to a zero dq:
			 * err and x^2 are both x^2. */
			double sid = dli_mx_scale_inv(0xfe);
			if (sid < t->lo)
				t->lo = sid;
			if (sid > t->hi)
				t->hi = sid;
			#pragma GCC unroll 8
			for (int h = 0; h < 4; h++) {
				__m256 xa = _mm256_castsi256_ps(a[h]);
				__m256i xz = _mm256_cmpeq_epi32(a[h], _mm256_setzero_si256());
				l->err = _mm256_fmadd_ps(xa, xa, l->err);
				l->xs = _mm256_fmadd_ps(xa, xa, l->xs);
				/* nonzero finite lanes; the zeroed non-finite ones count as zeros */
				l->under = _mm256_add_epi32(l->under, _mm256_set1_epi32(1));
				l->under = _mm256_add_epi32(l->under, xz);
			}
			*count += block_n;
			if (++*pending == FLUSH_BLOCKS) {
				flush(l, acc, t);
				*pending = 0;
			}
			return;
		}
		amax_bits = fmax_bits;
	}
	if (amax_bits == 0) { /* all zeros: nothing to add but the count */
		*count += block_n;
		return;
	}
	/* Magnitudes whose squares a float would lose: the scalar reference, in double. */
	if (amax_bits > 0x5d800000u || amax_bits < 0x21800000u) { /* 2^60, 2^-60 */
		dli_mx_block_scalar(ps, idx, 1, DLI_MX_BLOCK, t);
		return;
	}
	float amax;
	memcpy(&amax, &amax_bits, sizeof(amax));
	uint8_t e = dli_mx_e8m0(amax, ps->format);
	double sid = dli_mx_scale_inv(e);
	__m256 rcp = _mm256_set1_ps(dli_mx_rcp(e)), si = _mm256_set1_ps((float)sid);
	if (sid < t->lo)
		t->lo = sid;
	if (sid > t->hi)
		t->hi = sid;
	#pragma GCC unroll 8
	for (int h = 0; h < 4; h++)
		step(a[h], rcp, si, k, l);
	*count += block_n;
	if (++*pending == FLUSH_BLOCKS) {
		flush(l, acc, t);
		*pending = 0;
	}
}

INLINE void flush_fast(struct fast_lanes l[2], struct fast_sums *f, struct dli_block_terms *t)
{
	struct fast_lanes *a = &l[0], *b = &l[1];
	f->err = _mm256_add_pd(f->err, widen(_mm256_add_ps(a->err, b->err)));
	f->dqs = _mm256_add_pd(f->dqs, widen(_mm256_add_ps(a->dqs, b->dqs)));
	f->xs = _mm256_add_pd(f->xs, widen(_mm256_add_ps(a->xs, b->xs)));
	t->under += sum_epi32(_mm256_add_epi32(a->under, b->under));
	a->err = a->dqs = a->xs = b->err = b->dqs = b->xs = _mm256_setzero_ps();
	a->under = b->under = _mm256_setzero_si256();
}

/* Batches in a row segment (rows_avx2) */
#define SEGMENT 32

/* n batches from p on through the fast steps into *f, their counts into *count; masks[i] is batch
 * i's blocks left to the one-block path. No call inside: every vector register is the caller's
 * to save, so a call in this loop would keep the sums in memory. */
INLINE void batches(const char *p, enum dli_dtype dtype, int n, const struct consts *k,
		    struct fast_sums *fp, int *fast_pending, uint64_t *count,
		    struct dli_block_terms *t, uint8_t *masks)
{
	const size_t bstride = DLI_MX_BLOCK * dli_dtype_size(dtype);
	struct fast_lanes l[2] = {fast_lanes_zero(), fast_lanes_zero()};
	struct plan plans[2];
	int pend = *fast_pending;
	uint64_t cnt = 0;

	/* Each batch is planned one batch ahead, before the steps of the one before it: the plan
	 * is a long chain (amaxes, codes, floors) that the steps wait on, and so it runs while
	 * the steps before it do. */
	if (n > 0)
		batch_plan(p, dtype, bstride, k, fp, &plans[0]);
	for (int i = 0; i < n; i++, p += BATCH * bstride) {
		#pragma GCC unroll 8
		for (size_t j = 0; j < BATCH * bstride; j += 64)
			_mm_prefetch(p + j + DLI_PREFETCH_BYTES, _MM_HINT_T0);
		if (i + 1 < n)
			batch_plan(p + BATCH * bstride, dtype, bstride, k, fp, &plans[(i + 1) & 1]);
		const struct plan *pl = &plans[i & 1];
		/* The blocks read again (from L1): without this, GCC keeps the plan's vectors for
		 * the steps and, with too few registers for them all, spills them to the stack. */
		__asm__ volatile("" ::: "memory");
		masks[i] = (uint8_t)pl->bad;
		if (pl->bad == 0xff)
			continue;
		if (pl->mode == FAST_UNDER)
			fast_blocks(p, dtype, bstride, pl->bad, pl->grid_floors, k, FAST_UNDER, l);
		else if (pl->mode == FAST_SUBNORMAL)
			fast_blocks(p, dtype, bstride, pl->bad, pl->grid_floors, k, FAST_SUBNORMAL,
				    l);
		else
			fast_blocks(p, dtype, bstride, pl->bad, pl->grid_floors, k, FAST_NORMAL, l);
		cnt += (uint64_t)(BATCH - __builtin_popcount((unsigned)pl->bad)) * DLI_MX_BLOCK;
		/* 16 terms a lane a batch (two sets of lanes): four batches, then double */
		if (++pend == 4) {
			flush_fast(l, fp, t);
			pend = 0;
		}
	}
	flush_fast(l, fp, t); /* the lanes stay here */
	*fast_pending = pend;
	*count += cnt;
}

#define BATCHES(name, dt)                                                                         \
	__attribute__((noinline)) static void name(const char *p, int n, const struct consts *k,  \
						   struct fast_sums *f, int *pend, uint64_t *count,  \
						   struct dli_block_terms *t, uint8_t *masks)       \
	{                                                                                         \
		batches(p, dt, n, k, f, pend, count, t, masks);                                   \
	}
BATCHES(batches_f32, DLI_DTYPE_F32)
BATCHES(batches_bf16, DLI_DTYPE_BF16)
BATCHES(batches_f16, DLI_DTYPE_F16)

INLINE void rows_avx2(const struct mx_pass *ps, enum dli_dtype dtype, int64_t r0, int64_t r1,
		      struct dli_block_terms *t)
{
	const int mbits = ps->format == DLI_DTYPE_F8E4M3 ? 3 : 2;
	const int bias = ps->format == DLI_DTYPE_F8E4M3 ? 7 : 15;
	const struct consts k = {
		.absmask = _mm256_set1_epi32(0x7fffffff),
		.maxbits = _mm256_set1_epi32((int)(ps->format == DLI_DTYPE_F8E4M3 ? 0x43e00000u
										  : 0x47600000u)),
		.expmask = _mm256_set1_epi32(0x7f800000),
		.emin = _mm256_set1_epi32((1 - bias + 127) << 23),
		.cadd = _mm256_set1_epi32((23 - mbits) << 23),
		.maxrcp = _mm256_set1_ps(dli_mx_max_rcp(ps->format)),
		.chalf = _mm256_set1_epi32(((23 - mbits) << 23) | 0x400000),
		.fbias = _mm256_set1_epi32(1 - bias),
		.half_sub = _mm256_set1_ps(ldexpf(1.0f, -bias - mbits)),
		.min_normal = _mm256_set1_ps(ldexpf(1.0f, 1 - bias)),
		BF16_ROUNDING(mbits),
	};
	const size_t sz = dli_dtype_size(dtype), bstride = DLI_MX_BLOCK * sz;
	const int64_t cols = ps->cols, full = cols / DLI_MX_BLOCK * DLI_MX_BLOCK;
	struct lanes l = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(),
			  _mm256_setzero_ps(), _mm256_setzero_si256(), _mm256_setzero_si256()};
	__m256d acc[4] = {_mm256_setzero_pd(), _mm256_setzero_pd(), _mm256_setzero_pd(),
			  _mm256_setzero_pd()};
	struct fast_sums f = {.err = acc[0], .dqs = acc[0], .xs = acc[0],
			      .emin_seen = _mm256_set1_epi32(255),
			      .emax_seen = _mm256_setzero_si256()};
	int pending = 0, fast_pending = 0;
	uint64_t count = 0;
	uint8_t masks[SEGMENT];

	for (int64_t r = r0; r < r1; r++) {
		const char *row = ps->data + (size_t)(r * cols) * sz;
		int64_t c = 0;
		/* The row's batches in segments: the fast steps first (a call-free loop), then the
		 * blocks they left out. */
		while (c + BATCH * DLI_MX_BLOCK <= full) {
			int64_t nb = (full - c) / (BATCH * DLI_MX_BLOCK);
			int n = nb < SEGMENT ? (int)nb : SEGMENT;
			const char *p = row + (size_t)c * sz;
			if (dtype == DLI_DTYPE_F32)
				batches_f32(p, n, &k, &f, &fast_pending, &count, t, masks);
			else if (dtype == DLI_DTYPE_BF16)
				batches_bf16(p, n, &k, &f, &fast_pending, &count, t, masks);
			else
				batches_f16(p, n, &k, &f, &fast_pending, &count, t, masks);
			for (int i = 0; i < n; i++)
				for (int b = 0; masks[i] && b < BATCH; b++)
					if (masks[i] >> b & 1)
						one_block(ps, dtype, p + ((size_t)i * BATCH + b) * bstride,
							  r * cols + c + ((int64_t)i * BATCH + b) * DLI_MX_BLOCK,
							  &k, &l, acc, &pending, &count, t);
			c += (int64_t)n * BATCH * DLI_MX_BLOCK;
		}
		for (; c < full; c += DLI_MX_BLOCK)
			one_block(ps, dtype, row + (size_t)c * sz, r * cols + c, &k, &l, acc,
				  &pending, &count, t);
		if (full < cols)
			dli_mx_block_scalar(ps, r * cols + full, 1, cols - full, t);
	}
	flush(&l, acc, t);
	t->count += count;
	double ferr = reduce_pd(f.err), fdqs = reduce_pd(f.dqs), fxs = reduce_pd(f.xs);
	t->err += reduce_pd(acc[0]) + ferr;
	t->dot += reduce_pd(acc[1]) + (fxs + fdqs - ferr) / 2;
	t->dqs += reduce_pd(acc[2]) + fdqs;
	t->xs += reduce_pd(acc[3]) + fxs;
	uint32_t emax = hmax_epu32(f.emax_seen);
	if (emax) { /* a fast batch ran: its codes are 1 .. 254, never 0 */
		__m256i inv = _mm256_xor_si256(f.emin_seen, _mm256_set1_epi32(-1));
		uint32_t emin = ~hmax_epu32(inv);
		double lo = dli_mx_scale_inv((uint8_t)emin), hi = dli_mx_scale_inv((uint8_t)emax);
		if (lo < t->lo)
			t->lo = lo;
		if (hi > t->hi)
			t->hi = hi;
	}
}

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
 * less 1 (`lowm`, zeros wrapped to the top) and reciprocals: as batch_plan's, per block. */
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
					 fl);
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
		.absmask = _mm256_set1_epi32(0x7fffffff),
		.maxbits = _mm256_set1_epi32((int)(ps->format == DLI_DTYPE_F8E4M3 ? 0x43e00000u
										  : 0x47600000u)),
		.expmask = _mm256_set1_epi32(0x7f800000),
		.maxrcp = _mm256_set1_ps(dli_mx_max_rcp(ps->format)),
		.chalf = _mm256_set1_epi32(((23 - mbits) << 23) | 0x400000),
		.fbias = _mm256_set1_epi32(1 - bias),
		.half_sub = _mm256_set1_ps(ldexpf(1.0f, -bias - mbits)),
		.min_normal = _mm256_set1_ps(ldexpf(1.0f, 1 - bias)),
		BF16_ROUNDING(mbits),
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
	t->dot += (fxs + fdqs - ferr) / 2; /* as in rows_avx2 */
	t->dqs += fdqs;
	t->xs += fxs;
	uint32_t emax = hmax_epu32(emax_seen);
	if (emax) { /* a vector group ran: its codes are 1 .. 254 */
		uint32_t emin = ~hmax_epu32(_mm256_xor_si256(emin_seen, _mm256_set1_epi32(-1)));
		double lo = dli_mx_scale_inv((uint8_t)emin), hi = dli_mx_scale_inv((uint8_t)emax);
		if (lo < t->lo)
			t->lo = lo;
		if (hi > t->hi)
			t->hi = hi;
	}
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

/* FP8 block scaling's 128 x 128 tiles with power-of-two scales: the same exact-scaling argument
 * as MXFP8's, one scale a tile (dli_fp8b_scale, as the scalar pass computes it). A tile is read
 * twice, its amax and smallest magnitude first (from memory, with the rows a few ahead
 * prefetched: each row of a tile is a short run of its own page, which the hardware prefetchers
 * barely follow), then its steps (from L2). */

/* Rows ahead of the current one that the tile passes prefetch. */
#define FB_AHEAD 8
/* The bytes of each row of the next tile that a tile's first pass prefetches, its steps the
 * rest: for f32 a quarter, so that memory works for the next tile during the first pass too,
 * not only during the steps (measured: 5 to 8% faster than none or half); for 16-bit types none
 * (measured: a quarter was 7% slower for bf16, whose first pass is short). */
INLINE size_t first_share(size_t sz)
{
	return sz == 4 ? DLI_FP8B_BLOCK * sz / 4 : 0;
}

/* The steps over one row of a tile. `clean`: NaN and infinities zeroed, which leaves them out
 * of every term (a zero adds nothing, and is no underflow); the caller counts them out. */
INLINE void tile_row(const char *p, enum dli_dtype dtype, __m256 rb, __m256 sb, __m256i fb,
		     const struct consts *k, const enum fast_mode mode, const bool sat,
		     const bool clean,
		     struct fast_lanes fl[2], struct lanes *l)
{
	const size_t sz = dli_dtype_size(dtype);
	const __m256i finm = _mm256_set1_epi32(0x7f7fffff);

	/* p made opaque to the compiler, so that it cannot hoist the row's loads and its sum x x,
	 * the same in each of tile_loop's variants of a row, above their branch: GCC did, and kept
	 * the row's sixteen vectors on the stack */
	__asm__ volatile("" : "+r"(p));
	if (dtype == DLI_DTYPE_BF16 && mode == FAST_NORMAL && !sat && !clean) {
		#pragma GCC unroll 8
		for (int j = 0; j < DLI_FP8B_BLOCK; j += 16)
			step_bf16_normal(_mm256_loadu_si256((const __m256i *)(p + (size_t)j * 2)), k,
					 fl);
		return;
	}
	#pragma GCC unroll 4
	for (int j = 0; j < DLI_FP8B_BLOCK; j += DLI_MX_BLOCK) {
		if (sat) {
			__m256i a[4];
			load_abs(p + (size_t)j * sz, dtype, k, a);
			#pragma GCC unroll 4
			for (int h = 0; h < 4; h++) {
				a[h] = _mm256_andnot_si256(_mm256_cmpgt_epi32(a[h], finm), a[h]);
				step(a[h], rb, sb, k, l);
			}
			continue;
		}
		__m256 x[4];
		load_values(p + (size_t)j * sz, dtype, x);
		#pragma GCC unroll 4
		for (int h = 0; h < 4; h++) {
			if (clean) {
				__m256i a = _mm256_and_si256(_mm256_castps_si256(x[h]), k->absmask);
				x[h] = _mm256_andnot_ps(
					_mm256_castsi256_ps(_mm256_cmpgt_epi32(a, finm)), x[h]);
			}
			step_fast(x[h], fb, k, mode, &fl[h & 1], &fl[0].under);
		}
	}
}

/* The steps over one tile of `rows` rows (row stride `stride` bytes), with no call inside, so
 * that the sums stay in registers. `sat`: the tile's largest element scales above fp8_max (an
 * infinity in the tile makes its scale 1), so step's saturation and overflow counts, into l and
 * acc, every row cleaned; else the fast steps into f. `clean`: the tile holds NaN or infinities,
 * in the rows whose bits are set in nf_rows (bit r % 64 of word r / 64), which are cleaned. In
 * FAST_UNDER, only the rows whose bits are set in under_rows (as nf_rows's) hold a value that
 * can underflow and count underflows; the others take FAST_SUBNORMAL's steps, the same rounding
 * without the count. For bf16, the rows whose bits are clear in sub_rows (as nf_rows's) hold no
 * nonzero value below the format's smallest normal times si, and take FAST_NORMAL's steps
 * (step_bf16_normal) in any mode, unless they hold NaN or infinities. `next`, unless NULL: the
 * next tile (as many rows, same stride), whose rows past their first_share are prefetched a row
 * a row, so that memory works for it while the steps work here (from L2, where the tile's first
 * pass left it). */
INLINE void tile_loop(const char *p, const char *next, enum dli_dtype dtype, size_t stride,
		      int64_t rows,
		      const float *rcp, const float *si, const int32_t *grid_floor,
		      const uint64_t nf_rows[2], const uint64_t under_rows[2],
		      const uint64_t sub_rows[2], const struct consts *k, const enum fast_mode mode,
		      const bool sat,
		      const bool clean, struct fast_sums *fp, struct lanes *lp,
		      __m256d acc[4], struct dli_block_terms *t)
{
	struct fast_lanes fl[2] = {fast_lanes_zero(), fast_lanes_zero()};
	struct lanes l = *lp;
	__m256 rb = _mm256_broadcast_ss(rcp), sb = _mm256_broadcast_ss(si);
	__m256i fb = _mm256_castps_si256(_mm256_broadcast_ss((const float *)grid_floor));

	for (int64_t r = 0; r < rows; r++, p += stride) {
		if (next) {
			#pragma GCC unroll 8
			for (size_t j = first_share(dli_dtype_size(dtype));
			     j < DLI_FP8B_BLOCK * dli_dtype_size(dtype); j += 64)
				_mm_prefetch(next + (size_t)r * stride + j, _MM_HINT_T0);
		}
		bool nf = clean && (nf_rows[r >> 6] >> (r & 63) & 1);
		bool normal = dtype == DLI_DTYPE_BF16 && mode != FAST_NORMAL &&
			      !(sub_rows[r >> 6] >> (r & 63) & 1);
		if (sat)
			tile_row(p, dtype, rb, sb, fb, k, mode, true, true, fl, &l);
		else if (normal && !nf)
			tile_row(p, dtype, rb, sb, fb, k, FAST_NORMAL, false, false, fl, &l);
		else if (mode == FAST_UNDER && !(under_rows[r >> 6] >> (r & 63) & 1)) {
			if (nf)
				tile_row(p, dtype, rb, sb, fb, k, FAST_SUBNORMAL, false, true, fl,
					 &l);
			else
				tile_row(p, dtype, rb, sb, fb, k, FAST_SUBNORMAL, false, false, fl,
					 &l);
		} else if (nf)
			tile_row(p, dtype, rb, sb, fb, k, mode, false, true, fl, &l);
		else
			tile_row(p, dtype, rb, sb, fb, k, mode, false, false, fl, &l);
		/* 16 terms a lane a row (the fast steps' two sets: 8): 64, then double */
		if (sat && r % 4 == 3)
			flush(&l, acc, t);
		else if (!sat && r % 8 == 7)
			flush_fast(fl, fp, t);
	}
	if (sat)
		flush(&l, acc, t);
	else
		flush_fast(fl, fp, t);
	*lp = l;
}

/* One tile_loop a mode, with or without NaN (tile_steps) */
#define TILE_MODES(dt, clean)                                                                     \
	do {                                                                                      \
		if (mode == FAST_UNDER)                                                           \
			tile_loop(p, next, dt, stride, rows, rcp, si, grid_floor, nf_rows,        \
				  under_rows, sub_rows, k, FAST_UNDER, false, clean, f, l, acc,   \
				  t);                                                             \
		else if (mode == FAST_SUBNORMAL)                                                  \
			tile_loop(p, next, dt, stride, rows, rcp, si, grid_floor, nf_rows,        \
				  under_rows, sub_rows, k, FAST_SUBNORMAL, false, clean, f, l,    \
				  acc, t);                                                        \
		else                                                                              \
			tile_loop(p, next, dt, stride, rows, rcp, si, grid_floor, nf_rows,        \
				  under_rows, sub_rows, k, FAST_NORMAL, false, clean, f, l, acc,  \
				  t);                                                             \
	} while (0)

#define TILE_STEPS(name, dt)                                                                      \
	__attribute__((noinline)) static void name(                                               \
		const char *p, const char *next, size_t stride, int64_t rows, const float *rcp,   \
		const float *si,                                                                  \
		const int32_t *grid_floor, const uint64_t nf_rows[2],                             \
		const uint64_t under_rows[2], const uint64_t sub_rows[2],                         \
		const struct consts *k, enum fast_mode mode,                                      \
		bool sat, bool clean, struct fast_sums *f, struct lanes *l,                       \
		__m256d acc[4], struct dli_block_terms *t)                                        \
	{                                                                                         \
		if (sat)                                                                          \
			tile_loop(p, next, dt, stride, rows, rcp, si, grid_floor, nf_rows,        \
				  under_rows, sub_rows, k, FAST_UNDER, true, true, f, l, acc, t); \
		else if (clean)                                                                   \
			TILE_MODES(dt, true);                                                     \
		else                                                                              \
			TILE_MODES(dt, false);                                                    \
	}
TILE_STEPS(tile_steps_f32, DLI_DTYPE_F32)
TILE_STEPS(tile_steps_bf16, DLI_DTYPE_BF16)
TILE_STEPS(tile_steps_f16, DLI_DTYPE_F16)

/* A tile's largest magnitude bits in the lanes of *m, its smallest nonzero one less 1 in those
 * of *lowm (zeros wrap to the top), and the rows that hold NaN or an infinity as bits of nf_rows
 * (row r0 + i: bit i % 64 of word i / 64), with in *fin the largest magnitude of the lanes of
 * rows that hold none in that lane (the rest of the finite amax is in the rows of nf_rows), each
 * row's smallest nonzero magnitudes less 1 in row_low[i] (for under_rows_of), the rows FB_AHEAD
 * ahead prefetched, and, unless `next` is NULL, the first_share of each row of the next tile. */
INLINE void tile_bounds(const char *data, enum dli_dtype dtype, int64_t cols, int64_t r0,
			int64_t r1, int64_t c0, const char *next, const struct consts *k,
			__m256i *m_out, __m256i *lowm_out, __m256i *fin_out, uint64_t nf_rows[2],
			__m256i *row_low)
{
	const size_t sz = dli_dtype_size(dtype), stride = (size_t)cols * sz;
	const __m256i one = _mm256_set1_epi32(1), finm = _mm256_set1_epi32(0x7f7fffff);
	__m256i m = _mm256_setzero_si256(), lowm = _mm256_set1_epi32(-1), fin = m;

	for (int64_t r = r0; r < r1; r++) {
		const char *p = data + (size_t)(r * cols + c0) * sz;
		if (next)
			for (size_t j = 0; j < first_share(sz); j += 64)
				_mm_prefetch(next + (size_t)(r - r0) * stride + j, _MM_HINT_T0);
		if (r + FB_AHEAD < r1)
			for (size_t j = 0; j < DLI_FP8B_BLOCK * sz; j += 64)
				_mm_prefetch(p + FB_AHEAD * stride + j, _MM_HINT_T0);
		__m256i mr = _mm256_setzero_si256(), lr = _mm256_set1_epi32(-1);
		#pragma GCC unroll 4
		for (int j = 0; j < DLI_FP8B_BLOCK; j += DLI_MX_BLOCK) {
			__m256i a[4];
			load_abs(p + (size_t)j * sz, dtype, k, a);
			mr = _mm256_max_epu32(mr, _mm256_max_epu32(_mm256_max_epu32(a[0], a[1]),
								   _mm256_max_epu32(a[2], a[3])));
			#pragma GCC unroll 4
			for (int h = 0; h < 4; h++)
				lr = _mm256_min_epu32(lr, _mm256_sub_epi32(a[h], one));
		}
		row_low[r - r0] = lr;
		lowm = _mm256_min_epu32(lowm, lr);
		m = _mm256_max_epu32(m, mr);
		/* magnitudes are below 2^31: a signed compare */
		__m256i nfv = _mm256_cmpgt_epi32(mr, finm);
		fin = _mm256_max_epu32(fin, _mm256_andnot_si256(nfv, mr));
		int nf = _mm256_movemask_ps(_mm256_castsi256_ps(nfv));
		nf_rows[(r - r0) >> 6] |= (uint64_t)(nf != 0) << ((r - r0) & 63);
	}
	*fin_out = fin;
	*m_out = m;
	*lowm_out = lowm;
}

/* The same for bf16, in its own 16-bit lanes (16 elements a vector, no widening): a bf16's
 * magnitude bits are the top half of its float's, so the extremes carry over, widened once (but
 * row_low's, kept in 16-bit lanes). */
INLINE void tile_bounds_bf16(const char *data, int64_t cols, int64_t r0, int64_t r1, int64_t c0,
			     __m256i *m_out, __m256i *lowm_out, __m256i *fin_out,
			     uint64_t nf_rows[2], __m256i *row_low)
{
	const size_t stride = (size_t)cols * 2;
	const __m256i abs16 = _mm256_set1_epi16(0x7fff), one16 = _mm256_set1_epi16(1);
	const __m256i fin16 = _mm256_set1_epi16(0x7f7f);
	__m256i m = _mm256_setzero_si256(), low = _mm256_set1_epi16(-1), fin = m;
	uint16_t mv[16], lv[16], fv[16];
	uint32_t mx = 0, lo = 0xffff, fx = 0;

	for (int64_t r = r0; r < r1; r++) {
		const char *p = data + (size_t)(r * cols + c0) * 2;
		if (r + FB_AHEAD < r1)
			for (size_t j = 0; j < DLI_FP8B_BLOCK * 2; j += 64)
				_mm_prefetch(p + FB_AHEAD * stride + j, _MM_HINT_T0);
		__m256i mr = _mm256_setzero_si256(), lr = _mm256_set1_epi16(-1);
		#pragma GCC unroll 8
		for (int j = 0; j < DLI_FP8B_BLOCK; j += 16) {
			__m256i a = _mm256_and_si256(
				_mm256_loadu_si256((const __m256i *)(p + (size_t)j * 2)), abs16);
			mr = _mm256_max_epu16(mr, a);
			lr = _mm256_min_epu16(lr, _mm256_sub_epi16(a, one16));
		}
		row_low[r - r0] = lr;
		low = _mm256_min_epu16(low, lr);
		m = _mm256_max_epu16(m, mr);
		__m256i nfv = _mm256_cmpgt_epi16(mr, fin16); /* below 2^15: signed */
		fin = _mm256_max_epu16(fin, _mm256_andnot_si256(nfv, mr));
		int nf = _mm256_movemask_epi8(nfv);
		nf_rows[(r - r0) >> 6] |= (uint64_t)(nf != 0) << ((r - r0) & 63);
	}
	_mm256_storeu_si256((__m256i *)mv, m);
	_mm256_storeu_si256((__m256i *)lv, low);
	_mm256_storeu_si256((__m256i *)fv, fin);
	for (int i = 0; i < 16; i++) {
		mx = mv[i] > mx ? mv[i] : mx;
		lo = lv[i] < lo ? lv[i] : lo;
		fx = fv[i] > fx ? fv[i] : fx;
	}
	*fin_out = _mm256_set1_epi32((int)(fx << 16));
	/* as float bits: the largest, and the smallest nonzero less 1 (0xffff: none, which wraps
	 * to 0xffffffff as the 32-bit lanes would) */
	*m_out = _mm256_set1_epi32((int)(mx << 16));
	*lowm_out = _mm256_set1_epi32((int)(((lo + 1) << 16) - 1));
}

/* The rows (bits as nf_rows's) that hold a nonzero magnitude of at most `limit` (float bits; for
 * bf16 a power of two, whose bf16 bits are its top half, or one less, the largest bf16 below
 * it), from their row_low of tile_bounds or
 * tile_bounds_bf16: the magnitude less 1 at most limit less 1, unsigned. */
INLINE void under_rows_of(const __m256i *row_low, int64_t rows, uint32_t limit, bool bf16,
			  uint64_t under_rows[2])
{
	const __m256i lim = bf16 ? _mm256_set1_epi16((short)((limit >> 16) - 1))
				 : _mm256_set1_epi32((int)(limit - 1));

	for (int64_t r = 0; r < rows; r++) {
		__m256i v = row_low[r];
		__m256i hit = bf16 ? _mm256_cmpeq_epi16(_mm256_min_epu16(v, lim), v)
				   : _mm256_cmpeq_epi32(_mm256_min_epu32(v, lim), v);
		under_rows[r >> 6] |= (uint64_t)!_mm256_testz_si256(hit, hit) << (r & 63);
	}
}

static void fb_strip(const char *data, enum dli_dtype dtype, int64_t cols, int64_t r0, int64_t r1,
		     enum dli_dtype format, dli_fb_tile_fn scalar_tile, void *ctx,
		     struct dli_block_terms *t)
{
	const int mbits = format == DLI_DTYPE_F8E4M3 ? 3 : 2;
	const int bias = format == DLI_DTYPE_F8E4M3 ? 7 : 15;
	const struct consts k = {
		.absmask = _mm256_set1_epi32(0x7fffffff),
		.maxbits = _mm256_set1_epi32((int)(format == DLI_DTYPE_F8E4M3 ? 0x43e00000u
									     : 0x47600000u)),
		.expmask = _mm256_set1_epi32(0x7f800000),
		.emin = _mm256_set1_epi32((1 - bias + 127) << 23),
		.cadd = _mm256_set1_epi32((23 - mbits) << 23),
		.chalf = _mm256_set1_epi32(((23 - mbits) << 23) | 0x400000),
		.fbias = _mm256_set1_epi32(1 - bias),
		.half_sub = _mm256_set1_ps(ldexpf(1.0f, -bias - mbits)),
		.min_normal = _mm256_set1_ps(ldexpf(1.0f, 1 - bias)),
		BF16_ROUNDING(mbits),
	};
	const uint32_t maxbits = format == DLI_DTYPE_F8E4M3 ? 0x43e00000u : 0x47600000u;
	const size_t sz = dli_dtype_size(dtype), stride = (size_t)cols * sz;
	struct lanes l = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(),
			  _mm256_setzero_ps(), _mm256_setzero_si256(), _mm256_setzero_si256()};
	__m256d acc[4] = {_mm256_setzero_pd(), _mm256_setzero_pd(), _mm256_setzero_pd(),
			  _mm256_setzero_pd()};
	struct fast_sums f = {.err = acc[0], .dqs = acc[0], .xs = acc[0]};
	uint64_t count = 0;
	__m256i row_low[DLI_FP8B_BLOCK]; /* tile_bounds's, a row of the tile each */

	for (int64_t c0 = 0; c0 < cols; c0 += DLI_FP8B_BLOCK) {
		if (c0 + DLI_FP8B_BLOCK > cols) { /* a partial tile: the scalar pass */
			scalar_tile(ctx, r0, c0);
			continue;
		}
		__m256i m, lowm, fin_lanes;
		uint64_t nf_rows[2] = {0, 0}, under_rows[2] = {0, 0};
		uint64_t sub_rows[2] = {~0ull, ~0ull}; /* unless found otherwise, every row */
		const char *tile = data + (size_t)(r0 * cols + c0) * sz;
		const char *next =
			c0 + 2 * DLI_FP8B_BLOCK <= cols ? tile + DLI_FP8B_BLOCK * sz : NULL;
		if (dtype == DLI_DTYPE_BF16)
			tile_bounds_bf16(data, cols, r0, r1, c0, &m, &lowm, &fin_lanes, nf_rows,
					 row_low);
		else
			tile_bounds(data, dtype, cols, r0, r1, c0, next, &k, &m, &lowm, &fin_lanes,
				    nf_rows, row_low);
		uint32_t amax_bits = hmax_epu32(m), fin_bits = amax_bits;
		uint64_t nonfinite = 0;
		if (amax_bits > 0x7f7fffffu) {
			/* NaN or an infinity: a second look (from cache) at the rows that hold
			 * them for the largest finite magnitude, an infinity (the scalar pass's
			 * amax, with NaN left out) and the count of both, which the terms leave
			 * out; the rest of the finite amax came with the first. */
			const __m256i finm = _mm256_set1_epi32(0x7f7fffff);
			__m256i fm = fin_lanes, inf = _mm256_setzero_si256();
			for (int64_t r = r0; r < r1; r++) {
				if (!(nf_rows[(r - r0) >> 6] >> ((r - r0) & 63) & 1))
					continue;
				const char *p = data + (size_t)(r * cols + c0) * sz;
				for (int j = 0; j < DLI_FP8B_BLOCK; j += DLI_MX_BLOCK) {
					__m256i a[4];
					load_abs(p + (size_t)j * sz, dtype, &k, a);
					for (int h = 0; h < 4; h++) {
						__m256i nf = _mm256_cmpgt_epi32(a[h], finm);
						nonfinite += (uint64_t)__builtin_popcount((unsigned)
							_mm256_movemask_ps(_mm256_castsi256_ps(nf)));
						fm = _mm256_max_epu32(fm, _mm256_andnot_si256(nf, a[h]));
						inf = _mm256_or_si256(inf, _mm256_cmpeq_epi32(
							a[h], _mm256_set1_epi32(0x7f800000)));
					}
				}
			}
			fin_bits = hmax_epu32(fm);
			amax_bits = _mm256_testz_si256(inf, inf) ? fin_bits : 0x7f800000u;
		}
		if (fin_bits != 0 && (fin_bits > 0x5d800000u || fin_bits < 0x21800000u)) {
			scalar_tile(ctx, r0, c0); /* beyond the float lanes' range */
			continue;
		}
		float amax, fin;
		memcpy(&amax, &amax_bits, sizeof(amax));
		memcpy(&fin, &fin_bits, sizeof(fin));
		float scale = dli_fp8b_scale(amax, format, dtype, true), si = 1.0f / scale;
		if (si < t->lo)
			t->lo = si;
		if (si > t->hi)
			t->hi = si;
		count += (uint64_t)((r1 - r0) * DLI_FP8B_BLOCK) - nonfinite;
		if (fin_bits == 0)
			continue;
		float top = fin * scale; /* exact: the scale is a power of two */
		uint32_t top_bits;
		memcpy(&top_bits, &top, sizeof(top_bits));
		/* Without saturation, the fast steps, as MXFP8's batches (see batch), with the
		 * underflows counted only when the smallest nonzero |x| can underflow. */
		uint32_t lmin = ~hmax_epu32(_mm256_xor_si256(lowm, _mm256_set1_epi32(-1))) + 1;
		float lowest;
		memcpy(&lowest, &lmin, sizeof(lowest));
		float low_scaled = lowest * scale;
		enum fast_mode mode = low_scaled <= ldexpf(1.0f, -bias - mbits) ? FAST_UNDER
				      : low_scaled < ldexpf(1.0f, 1 - bias)   ? FAST_SUBNORMAL
									       : FAST_NORMAL;
		/* the row sets below are for the fast steps: the steps with saturation count
		 * underflows in every row. Rows with no value on the subnormal grid are taken
		 * apart only in tiles without NaN or infinities: an infinity sets the scale to
		 * 1, which puts most rows on that grid, and looking for the others made the
		 * bench's _nan tiles 8 % slower). */
		bool sat = top_bits > maxbits, clean = nonfinite > 0;
		if (!sat && mode == FAST_UNDER) {
			/* half the smallest subnormal times si: exact, a power of two within
			 * float's normals (the scale is at most fp8_max * 2^60) */
			float limit = ldexpf(1.0f, -bias - mbits) / scale;
			uint32_t limit_bits;
			memcpy(&limit_bits, &limit, sizeof(limit_bits));
			under_rows_of(row_low, r1 - r0, limit_bits, dtype == DLI_DTYPE_BF16,
				      under_rows);
		}
		if (!sat && !clean && dtype == DLI_DTYPE_BF16 && mode != FAST_NORMAL) {
			/* the rows with a nonzero |x| below the smallest normal times si (exact,
			 * as limit's above), whose bits less 1 are the largest bf16 below it */
			float normal_limit = ldexpf(1.0f, 1 - bias) / scale;
			uint32_t normal_bits;
			memcpy(&normal_bits, &normal_limit, sizeof(normal_bits));
			sub_rows[0] = sub_rows[1] = 0;
			under_rows_of(row_low, r1 - r0, normal_bits - 1, true, sub_rows);
		}
		uint32_t sbits;
		memcpy(&sbits, &scale, sizeof(sbits));
		/* the fast steps' grid_floor: the format's smallest normal exponent plus log2(si),
		 * that is 127 - the scale's exponent field, in the exponent field */
		const int32_t grid_floor =
			(int32_t)((uint32_t)(1 - bias + 254 - (int)(sbits >> 23)) << 23);
		if (dtype == DLI_DTYPE_F32)
			tile_steps_f32(tile, next, stride, r1 - r0, &scale, &si, &grid_floor,
				       nf_rows, under_rows, sub_rows, &k, mode, sat, clean, &f, &l, acc,
				       t);
		else if (dtype == DLI_DTYPE_BF16)
			tile_steps_bf16(tile, next, stride, r1 - r0, &scale, &si, &grid_floor,
					nf_rows, under_rows, sub_rows, &k, mode, sat, clean, &f, &l,
					acc, t);
		else
			tile_steps_f16(tile, next, stride, r1 - r0, &scale, &si, &grid_floor,
				       nf_rows, under_rows, sub_rows, &k, mode, sat, clean, &f, &l, acc,
				       t);
	}
	t->count += count;
	double ferr = reduce_pd(f.err), fdqs = reduce_pd(f.dqs), fxs = reduce_pd(f.xs);
	t->err += reduce_pd(acc[0]) + ferr;
	/* the fast steps' sum x dq, as in rows_avx2 */
	t->dot += reduce_pd(acc[1]) + (fxs + fdqs - ferr) / 2;
	t->dqs += reduce_pd(acc[2]) + fdqs;
	t->xs += reduce_pd(acc[3]) + fxs;
}

void dli_fb_strip_avx2(const void *data, enum dli_dtype dtype, int64_t cols, int64_t r0,
		       int64_t r1, enum dli_dtype format, dli_fb_tile_fn scalar_tile, void *ctx,
		       struct dli_block_terms *t)
{
	switch (dtype) {
	case DLI_DTYPE_F32:
		fb_strip(data, DLI_DTYPE_F32, cols, r0, r1, format, scalar_tile, ctx, t);
		break;
	case DLI_DTYPE_F16:
		fb_strip(data, DLI_DTYPE_F16, cols, r0, r1, format, scalar_tile, ctx, t);
		break;
	default:
		fb_strip(data, DLI_DTYPE_BF16, cols, r0, r1, format, scalar_tile, ctx, t);
		break;
	}
}

void dli_mx_rows_avx2(const struct mx_pass *ps, int64_t r0, int64_t r1, struct dli_block_terms *t)
{
	switch (ps->dtype) {
	case DLI_DTYPE_F32:
		rows_avx2(ps, DLI_DTYPE_F32, r0, r1, t);
		break;
	case DLI_DTYPE_F16:
		rows_avx2(ps, DLI_DTYPE_F16, r0, r1, t);
		break;
	default:
		rows_avx2(ps, DLI_DTYPE_BF16, r0, r1, t);
		break;
	}
}
