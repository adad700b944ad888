/* The FP8 quantize-and-compare pass and the FP8 cast with AVX2 (8 lanes), without a branch per
 * element. The same cast as fp8-avx512.c, which explains it; the compare pass takes groups of
 * vectors through a fast step checked once a group (see "Fast steps" below) and the rest through
 * careful steps that leave NaN and infinities out. Compiled with AVX2, FMA and F16C flags and
 * called only when the CPU has them. */
#include <immintrin.h>
#include <math.h>
#include <stdbool.h>
#include <string.h>

#include "cpu-private.h"
#include "fp8-private.h"

#define LINE_BYTES 64 /* a cache line: one prefetch each */

#define INLINE static inline __attribute__((always_inline))

/* Elements per block: each float lane sums at most 64 terms (two sets of lanes, 8 a vector), so
 * a block's float sums stay within a few ulps of 2^-24 * 64 of the exact sum before they are
 * added into doubles. */
#define BLOCK 1024
/* Elements per group of fast steps: eight steps a range check (four cache lines of bf16 or f32).
 * Measured on Zen 3 with cache-resident bf16: groups of 64 took about 6% more time (twice the
 * checks), groups of 256 1-7% more (a longer unrolled loop, and a NaN spoils more of a group). */
#define GROUP 64
#define GROUP16 128 /* bf16: 16 elements a fast step */

struct k256 {
	__m256 scale, maxv;
	__m256i maxbits, absmask, infbits, expmask, emin, cadd, rebias, nancode, signmask;
	int mshift;
	/* The fast steps' range: nonzero |x| at most xn1 lands
	 * below the format's normals, above xov beyond its max; as float bits, and as bf16 bits. */
	__m256i xn1, xov, xn1_16, xov_16;
	__m256 kround, kround1; /* K = 2^(23 - mbits) of the fast steps' rounding, and K - 1 */
};

static void k256_init(struct k256 *k, enum dli_dtype format, float scale)
{
	int mbits = format == DLI_DTYPE_F8E4M3 ? 3 : 2;
	int bias = format == DLI_DTYPE_F8E4M3 ? 7 : 15;
	float fmax = format == DLI_DTYPE_F8E4M3 ? 448.0f : 57344.0f;
	int64_t xn1 = dli_fp8_f32_last_le(scale, nextafterf(ldexpf(1.0f, 1 - bias), 0.0f));
	int64_t xov = dli_fp8_f32_last_le(scale, fmax);

	k->scale = _mm256_set1_ps(scale);
	k->maxv = _mm256_set1_ps(fmax);
	k->maxbits = _mm256_castps_si256(k->maxv);
	k->absmask = _mm256_set1_epi32(0x7fffffff);
	k->infbits = _mm256_set1_epi32(0x7f800000);
	k->expmask = _mm256_set1_epi32(0x7f800000);
	k->emin = _mm256_set1_epi32((1 - bias + 127) << 23);
	k->cadd = _mm256_set1_epi32((23 - mbits) << 23);
	k->rebias = _mm256_set1_epi32((127 - bias + 1) << mbits);
	k->nancode = _mm256_set1_epi32(format == DLI_DTYPE_F8E4M3 ? 0x7f : 0x7e);
	k->signmask = _mm256_set1_epi32(0x80);
	k->mshift = 23 - mbits;
	/* Both are >= 0 for every finite scale > 0 (2^-149 times the largest float is below
	 * both limits); a bf16 b is at most the float bound f when b << 16 <= f. */
	k->xn1 = _mm256_set1_epi32((int)xn1);
	k->xov = _mm256_set1_epi32((int)xov);
	k->xn1_16 = _mm256_set1_epi16((short)(xn1 >> 16));
	k->xov_16 = _mm256_set1_epi16((short)(xov >> 16));
	k->kround = _mm256_set1_ps(ldexpf(1.0f, 23 - mbits));
	k->kround1 = _mm256_set1_ps(ldexpf(1.0f, 23 - mbits) - 1.0f);
}

/* 8 elements from p on, widened to float. */
INLINE __m256 load8(const void *p, enum dli_dtype dtype)
{
	switch (dtype) {
	case DLI_DTYPE_F32:
		return _mm256_loadu_ps((const float *)p);
	case DLI_DTYPE_F16:
		return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p));
	default:
		return _mm256_castsi256_ps(_mm256_slli_epi32(
			_mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)p)), 16));
	}
}

/* The last n % 8 elements, zero-padded: a zero adds nothing to any term. */
INLINE __m256 load_tail(const void *p, enum dli_dtype dtype, int64_t left)
{
	unsigned char buf[32] = { 0 };

	memcpy(buf, p, (size_t)left * dli_dtype_size(dtype));
	return load8(buf, dtype);
}

static inline double sum_pd(__m256 v)
{
	__m256d s = _mm256_add_pd(_mm256_cvtps_pd(_mm256_castps256_ps128(v)),
				  _mm256_cvtps_pd(_mm256_extractf128_ps(v, 1)));
	__m128d h = _mm_add_pd(_mm256_castpd256_pd128(s), _mm256_extractf128_pd(s, 1));
	return _mm_cvtsd_f64(_mm_add_sd(h, _mm_unpackhi_pd(h, h)));
}

static inline uint64_t sum_epi32(__m256i v)
{
	int32_t l[8];
	uint64_t s = 0;

	_mm256_storeu_si256((__m256i *)l, v);
	for (int i = 0; i < 8; i++)
		s += (uint32_t)l[i];
	return s;
}

static inline bool in_range(double xs)
{
	return xs >= 0x1p-90 && xs <= 0x1p100;
}

/* A block's terms in float lanes from vec_step; the counts as int32 lanes (a true compare is
 * -1: subtracting it counts). */
struct block_sums {
	__m256 err, dot, dqs, xs;
	__m256i under, over;
	uint32_t count;          /* elements compared (all but NaN and inf) */
	uint32_t finite_nonzero; /* vec_step only: the fast steps' are in the fast lanes */
};

/* One vector of a block pass: the cast, then the terms on magnitudes (|s| and |dq * scale| share
 * their sign, so every term is the same on magnitudes and the sign never comes back). Magnitudes
 * are clamped and compared as integers (non-negative floats order as their bits do), which leaves
 * the floating-point pipes to the rounding and the sums. Sum x dq is summed, not derived from the
 * other three (as the fast steps may): where most values saturate or underflow, that difference
 * cancels to noise. A NaN or infinite x is zeroed before any term and is not counted, so a
 * block holding one needs no second pass. Underflow is tested on x, not s: a tiny nonzero x whose
 * product with the scale is 0 in float has still underflowed. `lanes` has a bit for each real
 * element (the tail's zero padding is not one). */
INLINE void vec_step(__m256 xv, unsigned lanes, const struct k256 *k, struct block_sums *t)
{
	const __m256i izero = _mm256_setzero_si256();
	__m256i x = _mm256_castps_si256(xv);
	__m256i xabs = _mm256_and_si256(x, k->absmask);
	__m256i xz = _mm256_cmpeq_epi32(xabs, izero);
	__m256 s = _mm256_mul_ps(xv, k->scale);
	__m256i a, ac, e, rz, uf;
	__m256 c, r, af, d;

	__m256i fin = _mm256_cmpgt_epi32(k->infbits, xabs);
	unsigned fm = (unsigned)_mm256_movemask_ps(_mm256_castsi256_ps(fin)) & lanes;
	unsigned nzm = fm & ~(unsigned)_mm256_movemask_ps(_mm256_castsi256_ps(xz));

	s = _mm256_and_ps(s, _mm256_castsi256_ps(fin)); /* a NaN or inf x adds nothing */
	xz = _mm256_or_si256(xz, _mm256_xor_si256(fin, _mm256_set1_epi32(-1)));
	t->count += (uint32_t)__builtin_popcount(fm);
	t->finite_nonzero += (uint32_t)__builtin_popcount(nzm);
	a = _mm256_and_si256(_mm256_castps_si256(s), k->absmask);
	ac = _mm256_min_epi32(a, k->maxbits);
	e = _mm256_max_epi32(_mm256_and_si256(ac, k->expmask), k->emin);
	c = _mm256_castsi256_ps(_mm256_add_epi32(e, k->cadd));
	r = _mm256_sub_ps(_mm256_add_ps(_mm256_castsi256_ps(ac), c), c);
	af = _mm256_castsi256_ps(a);
	d = _mm256_sub_ps(af, r);
	rz = _mm256_cmpeq_epi32(_mm256_castps_si256(r), izero);
	uf = _mm256_andnot_si256(xz, rz);
	t->err = _mm256_fmadd_ps(d, d, t->err);
	t->dot = _mm256_fmadd_ps(af, r, t->dot);
	t->dqs = _mm256_fmadd_ps(r, r, t->dqs);
	t->xs = _mm256_fmadd_ps(af, af, t->xs);
	t->under = _mm256_sub_epi32(t->under, uf);
	t->over = _mm256_sub_epi32(t->over, _mm256_cmpgt_epi32(a, k->maxbits));
}

/* ---- Fast steps ----
 *
 * For groups of vectors whose nonzero magnitudes all lie in [xn, xov] (finite, no underflow or
 * overflow to count, no saturation or subnormal grid to apply), checked once per group from the
 * running minimum of |x| - 1 (zeros wrap around to the top) and maximum of |x|. A group that
 * held another value has it taken out: on bf16, where it reached at most four positions (element
 * i of each vector), the lanes of the sums those positions reached are put back as they were
 * before the group and the positions redone by the careful step (a lone NaN costs one careful
 * step, not a second pass); otherwise the whole group is redone a vector at a time with the bad
 * lanes masked (redo_group). As in fp8-avx512.c, the loop is bound by vector operations, so each
 * one counts: the range checks are integer min/max (on 16-bit lanes for bf16, which needs then
 * only a shift and an and to widen 16 elements), and the fast steps sum three terms from which
 * the pass gets the four (fast_core). Per 16 bf16: 18 vector operations (the range check 4, the
 * widening 2, each set of 8 lanes 6), against 48 in vec_step. (On Zen 3 such a loop sustains
 * about three a cycle, whichever pipes they need: their count is what matters. Moving work from
 * the FMA pipes to the adders at the cost of one integer operation, as an integer-built rounding
 * constant does, was slower. Also measured, cache-resident and at 128 MiB, and left out: one set
 * rounded by the adders, (s + C) - C, about 5% slower; K s built on s's exponent bits, or by a
 * second multiply, for g = K s - s on an adder, no gain; the register copy fmsub takes costs
 * nothing measurable. The loop runs at about 13.4 GB/s on cache-resident bf16, so it is bound
 * by its operations, not by memory: taking out any two or three of them a step, results aside,
 * gained about 11%.) */
struct fast_lanes {
	/* sums of s^2, s d and d^2 (d = s - r), in two sets for the dependency chains */
	__m256 xs0, xs1, sd0, sd1, err0, err1;
};

/* s is a normal float there, in [2^E, 2^(E+1)) say, and its rounding to the format's quantum
 * q = 2^(E - mbits) takes one FMA and no exponent mask: with K = 2^(23 - mbits), K s is exact,
 * g = K s - s rounds once onto K s's float grid, which is q apart, and r = K s - g (exact) is s
 * rounded to q. (For s within 2^-20 of 2^E, K s - s falls into the binade below, whose grid is
 * q / 2 apart: s still rounds to 2^E there.) A tie (s halfway between two multiples of q) needs
 * s's 24-bit significand M to be even, and g's rounding to even then makes M - r / q even: r
 * rounds to even as well. The error d = s - r = g - (K - 1) s is g's rounding error, exact, so
 * one more FMA gives it without r; the sums are then s^2, s d and d^2, and the pass gets
 * sum r^2 = sum s^2 - 2 sum s d + sum d^2 and sum s r = sum s^2 - sum s d, without cancellation
 * (|d| <= 2^-(mbits+1) |s|). Every float of the fast range of both formats was checked against
 * an integer rounding (r) and against s - r (d). */
INLINE void fast_core(__m256 xa, const struct k256 *k, bool sum_xs, __m256 *xs, __m256 *sd,
		      __m256 *err)
{
	__m256 s = _mm256_mul_ps(xa, k->scale);
	__m256 d = _mm256_fnmadd_ps(s, k->kround1, _mm256_fmsub_ps(s, k->kround, s));

	if (sum_xs)
		*xs = _mm256_fmadd_ps(s, s, *xs);
	*sd = _mm256_fmadd_ps(s, d, *sd);
	*err = _mm256_fmadd_ps(d, d, *err);
}

/* 16 bf16 (their bits), into both sets; sum s^2 only when sum_xs (the pass is bound by the FMA
 * pipes, which take 12 of the 18 operations, and the caller may know it: see xs_known). */
INLINE void fast_bf16(__m256i bits, const struct k256 *k, bool sum_xs, struct fast_lanes *f,
		      __m256i *lowm, __m256i *xmax)
{
	__m256i aw = _mm256_and_si256(bits, _mm256_set1_epi16(0x7fff));
	*lowm = _mm256_min_epu16(*lowm, _mm256_add_epi16(aw, _mm256_set1_epi16(-1)));
	*xmax = _mm256_max_epu16(*xmax, aw);
	fast_core(_mm256_castsi256_ps(_mm256_slli_epi32(aw, 16)), k, sum_xs, &f->xs0, &f->sd0,
		  &f->err0);
	fast_core(_mm256_castsi256_ps(_mm256_and_si256(aw, _mm256_set1_epi32((int)0xffff0000u))), k,
		  sum_xs, &f->xs1, &f->sd1, &f->err1);
}

/* 8 f32 or f16 at p, into set `odd`. */
INLINE void fast_8(const char *p, enum dli_dtype dtype, bool odd, const struct k256 *k,
		   struct fast_lanes *f, __m256i *lowm, __m256i *xmax)
{
	__m256i xa = _mm256_and_si256(_mm256_castps_si256(load8(p, dtype)), k->absmask);
	*lowm = _mm256_min_epu32(*lowm, _mm256_add_epi32(xa, _mm256_set1_epi32(-1)));
	*xmax = _mm256_max_epu32(*xmax, xa);
	if (odd)
		fast_core(_mm256_castsi256_ps(xa), k, true, &f->xs1, &f->sd1, &f->err1);
	else
		fast_core(_mm256_castsi256_ps(xa), k, true, &f->xs0, &f->sd0, &f->err0);
}

/* Whether every lane of lowm is >= lo and every lane of xmax <= hi, unsigned, in 16- or 32-bit
 * lanes: the saturating differences lo - lowm and xmax - hi are zero then (AVX2 has no unsigned
 * compare; for 32-bit lanes a >= b is max(a, b) == a). */
INLINE bool group_ok(__m256i lowm, __m256i xmax, __m256i lo, __m256i hi, bool w16)
{
	if (w16)
		return _mm256_testz_si256(_mm256_or_si256(_mm256_subs_epu16(lo, lowm),
							  _mm256_subs_epu16(xmax, hi)),
					  _mm256_set1_epi16(-1));
	__m256i a = _mm256_cmpeq_epi32(_mm256_max_epu32(lowm, lo), lowm);
	__m256i b = _mm256_cmpeq_epi32(_mm256_min_epu32(xmax, hi), xmax);
	return _mm256_movemask_epi8(_mm256_and_si256(a, b)) == -1;
}

/* Positions (element i of each of a bf16 group's eight vectors) at most this many of which failed
 * the range check are taken out of the group's fast sums and redone by one careful step each; a
 * group with more is redone whole by redo_group. (f32 and f16 groups are always redone whole:
 * their loop runs slower when this path is there, and their pass is bound by memory anyway.) */
#define FEW_POSITIONS 4

/* The positions of a bf16 group that failed its check, as bit 2i for position i (the byte mask
 * of its 16-bit lanes, one bit of each pair kept), and the float lanes of the fast sums they
 * reached, as sign bits: position 2m went to lane m of set 0 (m0), 2m + 1 to lane m of set 1
 * (m1). */
INLINE unsigned failed_positions(__m256i lowm, __m256i xmax, const struct k256 *k, __m256 *m0,
				 __m256 *m1)
{
	__m256i bad = _mm256_xor_si256(
		_mm256_cmpeq_epi16(_mm256_or_si256(_mm256_subs_epu16(k->xn1_16, lowm),
						   _mm256_subs_epu16(xmax, k->xov_16)),
				   _mm256_setzero_si256()),
		_mm256_set1_epi32(-1));

	*m0 = _mm256_castsi256_ps(_mm256_slli_epi32(bad, 16));
	*m1 = _mm256_castsi256_ps(bad);
	return (unsigned)_mm256_movemask_epi8(bad) & 0x55555555u;
}

/* The fast groups of a block from element j on, while each group's range check holds: the sums
 * go straight into f's lanes, which stay in registers through the loop. Returns where it
 * stopped: the first group that failed, or the first element after the last whole group. For a
 * group that failed, f holds the sums with it, before the copy of them from before it, and lowm
 * and xmax its check's running bounds. */
INLINE int64_t fast_groups(const char *p, enum dli_dtype dtype, int64_t j, int64_t bn,
			   const struct k256 *k, bool sum_xs, struct fast_lanes *f, struct fast_lanes *before,
			   __m256i *lowm_out, __m256i *xmax_out)
{
	const int64_t sz = (int64_t)dli_dtype_size(dtype);
	const bool w16 = dtype == DLI_DTYPE_BF16;
	const int group = w16 ? GROUP16 : GROUP;
	const __m256i lo = w16 ? k->xn1_16 : k->xn1, hi = w16 ? k->xov_16 : k->xov;
	struct fast_lanes a = *f;

	for (; j + group <= bn; j += group) {
		const char *q = p + j * sz;
		struct fast_lanes saved = a;
		__m256i lowm = _mm256_set1_epi32(-1), xmax = _mm256_setzero_si256();

		/* A line each: one every other line left the bf16 loop 20% slower at 128 MiB;
		 * distances from 1 to 16 KiB, or the prefetches spread through the steps, made
		 * no difference that the noise did not hide. */
		for (int i = 0; i < group * sz; i += LINE_BYTES)
			_mm_prefetch(q + i + DLI_PREFETCH_BYTES, _MM_HINT_T0);
		if (w16) {
#pragma GCC unroll 8
			for (int i = 0; i < GROUP16; i += 16)
				fast_bf16(_mm256_loadu_si256((const __m256i *)(q + i * sz)), k,
					  sum_xs, &a, &lowm, &xmax);
		} else {
#pragma GCC unroll 8
			for (int i = 0; i < GROUP; i += 8)
				fast_8(q + i * sz, dtype, i & 8, k, &a, &lowm, &xmax);
		}
		if (__builtin_expect(!group_ok(lowm, xmax, lo, hi, w16), 0)) {
			*before = saved;
			*lowm_out = lowm;
			*xmax_out = xmax;
			break;
		}
	}
	*f = a;
	return j;
}

/* The elements of the bf16 group at q at the positions in pos (bit 2i for position i; eight
 * elements each, one a vector), each position's through one careful step. */
INLINE void redo_positions(const char *q, unsigned pos, const struct k256 *k, struct block_sums *t)
{
	for (; pos; pos &= pos - 1) {
		int at = __builtin_ctz(pos) / 2;
		uint16_t e[8];

		for (int v = 0; v < 8; v++)
			memcpy(&e[v], q + (size_t)(v * 16 + at) * 2, 2);
		vec_step(load8(e, DLI_DTYPE_BF16), 0xff, k, t);
	}
}

/* A group whose range check failed, a vector at a time: the lanes outside the fast steps' range
 * (NaN, inf, underflows, overflows) are zeroed for the fast step, where a zero adds nothing, and
 * taken by the careful step alone, with every other lane zeroed there. A lone NaN thus costs one
 * careful step and a few masks, not a second pass over the group. */
INLINE void redo_group(const char *q, enum dli_dtype dtype, const struct k256 *k, bool sum_xs,
		       struct block_sums *t, struct fast_lanes *f)
{
	const int64_t sz = (int64_t)dli_dtype_size(dtype);
	const bool w16 = dtype == DLI_DTYPE_BF16;
	const int group = w16 ? GROUP16 : GROUP;
	const int vec = w16 ? 16 : 8;

	for (int i = 0; i < group; i += vec) {
		const char *v = q + i * sz;
		__m256i lowm = _mm256_set1_epi32(-1), xmax = _mm256_setzero_si256();
		__m256i bits, xa, bad;
		unsigned badm;

		if (w16) {
			bits = _mm256_loadu_si256((const __m256i *)v);
			xa = _mm256_and_si256(bits, _mm256_set1_epi16(0x7fff));
			/* nonzero |x| - 1 below xn - 1, or |x| above xov (unsigned) */
			bad = _mm256_or_si256(
				_mm256_subs_epu16(k->xn1_16,
						  _mm256_add_epi16(xa, _mm256_set1_epi16(-1))),
				_mm256_subs_epu16(xa, k->xov_16));
			bad = _mm256_xor_si256(_mm256_cmpeq_epi16(bad, _mm256_setzero_si256()),
					       _mm256_set1_epi32(-1));
		} else {
			__m256i x1;
			bits = _mm256_castps_si256(load8(v, dtype));
			xa = _mm256_and_si256(bits, k->absmask);
			x1 = _mm256_add_epi32(xa, _mm256_set1_epi32(-1));
			bad = _mm256_xor_si256(
				_mm256_and_si256(
					_mm256_cmpeq_epi32(_mm256_max_epu32(x1, k->xn1), x1),
					_mm256_cmpeq_epi32(_mm256_min_epu32(xa, k->xov), xa)),
				_mm256_set1_epi32(-1));
		}
		badm = (unsigned)_mm256_movemask_epi8(bad);
		/* the fast step on the vector with its bad lanes zeroed */
		if (w16) {
			fast_bf16(_mm256_andnot_si256(bad, bits), k, sum_xs, f, &lowm, &xmax);
		} else {
			__m256 good = _mm256_castsi256_ps(_mm256_andnot_si256(bad, xa));
			fast_core(good, k, true, &f->xs0, &f->sd0, &f->err0);
		}
		t->count += (uint32_t)(vec - __builtin_popcount(badm) / (32 / vec));
		if (badm == 0)
			continue;
		/* the bad lanes through the careful step, as floats */
		if (w16) {
			__m256i only = _mm256_and_si256(bad, bits);
			/* elements 2m (low halves) and 2m + 1 (high halves), m = 0 .. 7: bit m of
			 * each lane mask is the sign of its half moved to the top */
			unsigned even = (unsigned)_mm256_movemask_ps(
				_mm256_castsi256_ps(_mm256_slli_epi32(bad, 16)));
			unsigned odd = (unsigned)_mm256_movemask_ps(_mm256_castsi256_ps(bad));

			if (even)
				vec_step(_mm256_castsi256_ps(_mm256_slli_epi32(only, 16)), even, k, t);
			if (odd)
				vec_step(_mm256_castsi256_ps(_mm256_and_si256(
						 only, _mm256_set1_epi32((int)0xffff0000u))),
					 odd, k, t);
		} else {
			unsigned lanes = (unsigned)_mm256_movemask_ps(_mm256_castsi256_ps(bad));
			vec_step(_mm256_castsi256_ps(_mm256_and_si256(bad, bits)), lanes, k, t);
		}
	}
}

/* One pass over a block into t (vec_step's terms) and f (the fast steps'): when `fast`, groups
 * through the fast steps first, the rest by vec_step. Every vec_step is careful: NaN and
 * infinities are left out where they are met, so a block holding one needs no second pass.
 * Returns the number of groups redone. */
INLINE int block_pass(const char *p, enum dli_dtype dtype, int64_t bn, const struct k256 *k,
		      bool fast, bool sum_xs, struct block_sums *t, struct fast_lanes *f)
{
	int64_t sz = (int64_t)dli_dtype_size(dtype);
	int64_t j = 0;
	int redone = 0;
	const bool w16 = dtype == DLI_DTYPE_BF16;
	const int group = w16 ? GROUP16 : GROUP;

	t->err = t->dot = t->dqs = t->xs = _mm256_setzero_ps();
	t->under = t->over = _mm256_setzero_si256();
	t->count = t->finite_nonzero = 0;
	f->xs0 = f->xs1 = f->sd0 = f->sd1 = f->err0 = f->err1 = _mm256_setzero_ps();
	while (fast && j + group <= bn) {
		struct fast_lanes before;
		__m256i lowm, xmax;
		__m256 m0, m1;
		int64_t stop = fast_groups(p, dtype, j, bn, k, sum_xs, f, &before, &lowm, &xmax);
		unsigned pos;

		t->count += (uint32_t)(stop - j);
		j = stop;
		if (j + group > bn)
			break;
		/* the group failed: a few positions are taken out of its sums and redone, else
		 * the whole group */
		pos = w16 ? failed_positions(lowm, xmax, k, &m0, &m1) : ~0u;
		if (__builtin_popcount(pos) <= FEW_POSITIONS) {
			f->xs0 = _mm256_blendv_ps(f->xs0, before.xs0, m0);
			f->sd0 = _mm256_blendv_ps(f->sd0, before.sd0, m0);
			f->err0 = _mm256_blendv_ps(f->err0, before.err0, m0);
			f->xs1 = _mm256_blendv_ps(f->xs1, before.xs1, m1);
			f->sd1 = _mm256_blendv_ps(f->sd1, before.sd1, m1);
			f->err1 = _mm256_blendv_ps(f->err1, before.err1, m1);
			t->count += (uint32_t)(group - 8 * __builtin_popcount(pos));
			redo_positions(p + j * sz, pos, k, t);
		} else {
			*f = before;
			redo_group(p + j * sz, dtype, k, sum_xs, t, f);
		}
		j += group;
		redone++;
	}
	for (; j + 8 <= bn; j += 8) {
		_mm_prefetch(p + j * sz + DLI_PREFETCH_BYTES, _MM_HINT_T0);
		vec_step(load8(p + j * sz, dtype), 0xff, k, t);
	}
	if (j < bn)
		vec_step(load_tail(p + j * sz, dtype, bn - j), (1u << (bn - j)) - 1, k, t);
	return redone;
}

/* Whether blocks try the fast groups: where values outside their range are common (many
 * underflows or overflows, or NaN), most groups would be done twice; after a block that redid
 * more than half of its groups, the blocks go straight to vec_step, and every 32nd of them tries
 * the groups again. (One NaN or underflow in a block costs one group: not worth turning off.) */
struct fast_mode {
	bool off;
	unsigned since; /* blocks since it went off */
};

/* Float lanes added into double ones: the sum of the fast steps' lanes over the whole call is
 * reduced once at its end, not per block. */
INLINE __m256d widen_add(__m256d acc, __m256 v)
{
	return _mm256_add_pd(acc, _mm256_add_pd(_mm256_cvtps_pd(_mm256_castps256_ps128(v)),
						_mm256_cvtps_pd(_mm256_extractf128_ps(v, 1))));
}

INLINE double reduce_pd(__m256d v)
{
	__m128d h = _mm_add_pd(_mm256_castpd256_pd128(v), _mm256_extractf128_pd(v, 1));
	return _mm_cvtsd_f64(_mm_add_sd(h, _mm_unpackhi_pd(h, h)));
}

/* sum_xs false (xs_known, bf16): the fast steps' sum of s^2 is left out of x_sq, dot and dq_sq
 * (fp8-private.h). */
INLINE void compare_blocks(const void *data, enum dli_dtype dtype, int64_t n, enum dli_dtype format,
			   float scale, bool sum_xs, struct dli_stats_record *acc)
{
	struct k256 k;
	size_t sz = dli_dtype_size(dtype);
	double inv2 = 1.0 / ((double)scale * scale);
	struct fast_mode fm = { false, 0 };
	/* the fast steps' sums over the call, and the count of what they compared; the careful
	 * steps' sums over the call (reduced once at the end, as the fast ones) */
	__m256d fxs = _mm256_setzero_pd(), fsd = fxs, ferr = fxs;
	__m256d cerr = fxs, cdot = fxs, cdqs = fxs, cxs = fxs;
	uint64_t fcount = 0;

	k256_init(&k, format, scale);
	for (int64_t b = 0; b < n; b += BLOCK) {
		int64_t bn = n - b < BLOCK ? n - b : BLOCK;
		const char *p = (const char *)data + b * (int64_t)sz;
		struct block_sums t;
		struct fast_lanes f;
		bool fast = !fm.off || ++fm.since % 32 == 0;
		int redone = block_pass(p, dtype, bn, &k, fast, sum_xs, &t, &f);
		__m256 fx = _mm256_add_ps(f.xs0, f.xs1), fsdv = _mm256_add_ps(f.sd0, f.sd1),
		       fe = _mm256_add_ps(f.err0, f.err1);

		if (fast) {
			fm.off = 2 * redone > bn / (dtype == DLI_DTYPE_BF16 ? GROUP16 : GROUP);
			fm.since = 0;
		}
		/* Only fast steps: their s^2 lie in [2^-28, 2^32], so the block's float sums are in
		 * range, and every element was compared. */
		if (fast && redone == 0 && bn % (dtype == DLI_DTYPE_BF16 ? GROUP16 : GROUP) == 0) {
			fxs = widen_add(fxs, fx);
			fsd = widen_add(fsd, fsdv);
			ferr = widen_add(ferr, fe);
			fcount += (uint64_t)bn;
			continue;
		}
		/* The float lanes are trusted when sum s^2 is well inside float range: then no s^2,
		 * s r or (s - r)^2 overflowed, and terms lost to float underflow are below 2^-24 of
		 * the sum. Outside it: a block whose finite elements are all +-0 (every term 0; the
		 * fast steps' nonzero s^2 are at least 2^-28), else one with tiny or huge values,
		 * which the scalar path takes in double. Without the fast steps' s^2 (whose sums
		 * are in range anyway), the careful steps' own sum is held to the range. */
		double bxs = sum_pd(fx);
		if (sum_xs ? !in_range(bxs + sum_pd(t.xs))
			   : t.finite_nonzero > 0 && !in_range(sum_pd(t.xs))) {
			if (bxs == 0 && t.finite_nonzero == 0) {
				acc->fp8_count += t.count;
				continue;
			}
			dli_fp8_compare_scalar(p, dtype, bn, format, scale, acc);
			continue;
		}
		fxs = widen_add(fxs, fx);
		fsd = widen_add(fsd, fsdv);
		ferr = widen_add(ferr, fe);
		cerr = widen_add(cerr, t.err);
		cdot = widen_add(cdot, t.dot);
		cdqs = widen_add(cdqs, t.dqs);
		cxs = widen_add(cxs, t.xs);
		acc->fp8_count += t.count;
		/* a block redone for a NaN or inf has none of these */
		if (!_mm256_testz_si256(t.under, t.under))
			acc->underflows += sum_epi32(t.under);
		if (!_mm256_testz_si256(t.over, t.over))
			acc->overflows += sum_epi32(t.over);
	}
	double sx = reduce_pd(fxs), ssd = reduce_pd(fsd), se = reduce_pd(ferr);
	acc->fp8_count += fcount;
	acc->err_sq += (se + reduce_pd(cerr)) * inv2;
	acc->dot += (sx - ssd + reduce_pd(cdot)) * inv2;
	acc->dq_sq += (sx - 2 * ssd + se + reduce_pd(cdqs)) * inv2;
	acc->x_sq += (sx + reduce_pd(cxs)) * inv2;
}

void dli_fp8_compare_avx2(const void *data, enum dli_dtype dtype, int64_t n,
			  enum dli_dtype format, float scale, bool xs_known,
			  struct dli_stats_record *acc)
{
	/* f32 and f16 sum s^2 whatever xs_known (fp8.c passes it for bf16 only): their pass is
	 * bound by memory, not by the FMAs. */
	switch (dtype) {
	case DLI_DTYPE_F32:
		compare_blocks(data, DLI_DTYPE_F32, n, format, scale, true, acc);
		break;
	case DLI_DTYPE_F16:
		compare_blocks(data, DLI_DTYPE_F16, n, format, scale, true, acc);
		break;
	default:
		if (xs_known)
			compare_blocks(data, DLI_DTYPE_BF16, n, format, scale, false, acc);
		else
			compare_blocks(data, DLI_DTYPE_BF16, n, format, scale, true, acc);
		break;
	}
}

static inline __attribute__((always_inline)) __m128i quantize8(__m256 x, const struct k256 *k)
{
	__m256 s = _mm256_mul_ps(x, k->scale);
	/* a NaN becomes the max here, and NaN again below */
	__m256 ac = _mm256_min_ps(_mm256_and_ps(s, _mm256_castsi256_ps(k->absmask)), k->maxv);
	__m256i e = _mm256_max_epi32(_mm256_and_si256(_mm256_castps_si256(ac), k->expmask),
				     k->emin);
	__m256i c = _mm256_add_epi32(e, k->cadd);
	__m256i t = _mm256_castps_si256(_mm256_add_ps(ac, _mm256_castsi256_ps(c)));
	__m256i code = _mm256_add_epi32(_mm256_sub_epi32(t, c),
					_mm256_sub_epi32(_mm256_srli_epi32(e, k->mshift),
							 k->rebias));
	__m256 nan = _mm256_cmp_ps(s, s, _CMP_UNORD_Q);
	__m128i p;

	code = _mm256_blendv_epi8(code, k->nancode, _mm256_castps_si256(nan));
	code = _mm256_or_si256(code, _mm256_and_si256(
		_mm256_srli_epi32(_mm256_castps_si256(s), 24), k->signmask));
	p = _mm_packus_epi32(_mm256_castsi256_si128(code), _mm256_extracti128_si256(code, 1));
	return _mm_packus_epi16(p, p); /* the 8 codes in the low 8 bytes */
}

static inline __attribute__((always_inline)) void
quantize(const void *data, enum dli_dtype dtype, int64_t n, enum dli_dtype format, float scale,
	 uint8_t *q)
{
	struct k256 k;
	size_t sz = dli_dtype_size(dtype);
	int64_t i = 0;

	k256_init(&k, format, scale);
	const char *p = data;

	for (; i + 8 <= n; i += 8)
		_mm_storel_epi64((__m128i *)(q + i), quantize8(load8(p + i * (int64_t)sz, dtype), &k));
	if (i < n) {
		unsigned char out[16];
		__m256 x = load_tail(p + i * (int64_t)sz, dtype, n - i);
		_mm_storeu_si128((__m128i *)out, quantize8(x, &k));
		memcpy(q + i, out, (size_t)(n - i));
	}
}

void dli_fp8_quantize_avx2(const void *data, enum dli_dtype dtype, int64_t n,
			   enum dli_dtype format, float scale, uint8_t *q)
{
	switch (dtype) {
	case DLI_DTYPE_F32:
		quantize(data, DLI_DTYPE_F32, n, format, scale, q);
		break;
	case DLI_DTYPE_F16:
		quantize(data, DLI_DTYPE_F16, n, format, scale, q);
		break;
	default:
		quantize(data, DLI_DTYPE_BF16, n, format, scale, q);
		break;
	}
}
