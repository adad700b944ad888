/* The statistics pass with AVX-512 (F, BW, DQ, VL; compiled with those flags and chosen at run time
 * by stats.c). Same structure as the AVX2 file: per L1-sized block, one pass that reads memory
 * (with software prefetch) into float lanes of extrema, counts and sums of deviations from a shift
 * near the mean; a second pass over the block (still in L1) only when the shift was poor; for
 * bf16 and f16 blocks holding NaN or infinities, the AVX2 kernel's integer pass; a redo in double
 * lanes for the other blocks with NaN, infinities or extreme magnitudes; and a Chan merge of
 * each block into the chunk's record in double. f32 is not here: it takes the AVX2 file's
 * kernel, whose sums are double lanes (see dli_stats_chunk_avx512). */
#include <immintrin.h>
#include <math.h>
#include <stdbool.h>

#include "cpu-private.h"
#include "runs-private.h"

#define INLINE static inline __attribute__((always_inline))
#define LINE 64 /* a cache line: one prefetch each */

/* Below this magnitude a float square loses bits to flushing (x^2 < 2^-100 leaves 2^-49 of room
 * under the smallest normal), above it a block's sum of squares could overflow; blocks whose
 * largest magnitude is outside go to the double path. So do FP8 blocks holding NaN or infinities,
 * where the double path reproduces a naive loop's NaN/inf arithmetic exactly (bf16 and f16 ones
 * go to the AVX2 kernel's integer pass, which gives the same record). */
#define SMALL 0x1p-50f
#define LARGE 0x1p50f

/* Decodes the cache line at p into floats; returns how many vectors of 16 it made. The element
 * order within a line does not matter to any statistic, which lets bf16 skip the lane shuffle:
 * even elements are a 32-bit lane shifted up, odd ones the lane with its low half cleared. */
INLINE int load_line(const unsigned char *p, enum dli_dtype dt, __m512 v[4])
{
	switch (dt) {
	case DLI_DTYPE_BF16: {
		__m512i w = _mm512_loadu_si512(p);
		v[0] = _mm512_castsi512_ps(_mm512_slli_epi32(w, 16));
		v[1] = _mm512_castsi512_ps(_mm512_and_si512(w, _mm512_set1_epi32((int)0xffff0000u)));
		return 2;
	}
	case DLI_DTYPE_F16:
		v[0] = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)p));
		v[1] = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(p + 32)));
		return 2;
	case DLI_DTYPE_F8E5M2:
	case DLI_DTYPE_F8E4M3:
		for (int k = 0; k < 2; k++) {
			__m512i b = _mm512_cvtepu8_epi16(_mm256_loadu_si256((const __m256i *)(p + 32 * k)));
			__m512i h;
			if (dt == DLI_DTYPE_F8E5M2) {
				/* E5M2 is the upper byte of an IEEE half, infinities and NaNs included. */
				h = _mm512_slli_epi16(b, 8);
			} else {
				/* E4M3 as a half with the same bits below the sign: exponent bias 7 instead
				 * of 15 scales every value (subnormals too) by 2^-8, undone below. The one
				 * NaN (S.1111.111) becomes a half NaN. */
				__m512i mag = _mm512_and_si512(b, _mm512_set1_epi16(0x7f));
				__m512i sign = _mm512_and_si512(b, _mm512_set1_epi16(0x80));
				h = _mm512_or_si512(_mm512_slli_epi16(mag, 7), _mm512_slli_epi16(sign, 8));
				__mmask32 nan = _mm512_cmpeq_epi16_mask(mag, _mm512_set1_epi16(0x7f));
				h = _mm512_mask_mov_epi16(h, nan, _mm512_set1_epi16(0x7e00));
			}
			v[2 * k] = _mm512_cvtph_ps(_mm512_castsi512_si256(h));
			v[2 * k + 1] = _mm512_cvtph_ps(_mm512_extracti64x4_epi64(h, 1));
			if (dt == DLI_DTYPE_F8E4M3) {
				v[2 * k] = _mm512_mul_ps(v[2 * k], _mm512_set1_ps(256.0f));
				v[2 * k + 1] = _mm512_mul_ps(v[2 * k + 1], _mm512_set1_ps(256.0f));
			}
		}
		return 4;
	default:
		return 0;
	}
}

INLINE double sum_lanes(__m512 v)
{
	__m512d lo = _mm512_cvtps_pd(_mm512_castps512_ps256(v));
	__m512d hi = _mm512_cvtps_pd(_mm512_extractf32x8_ps(v, 1));
	return _mm512_reduce_add_pd(_mm512_add_pd(lo, hi));
}

/* Float lanes of one block's first-order terms. Deviations d = x - shift from a shift close to the
 * block's mean give its mean (shift + sum d / n) and m2 (sum d^2 - (sum d)^2 / n) in one pass,
 * without the cancellation of sum x^2 - n mean^2. */
struct lanes {
	__m512 mn, mx, mnz, sa, sd, sdd;
	__m512i zc;
};

INLINE void lanes_init(struct lanes *a)
{
	a->mn = a->mnz = _mm512_set1_ps(INFINITY);
	a->mx = _mm512_set1_ps(-INFINITY);
	a->sa = a->sd = a->sdd = _mm512_setzero_ps();
	a->zc = _mm512_setzero_si512();
}

/* min/max take the accumulator as second operand: x86 returns the second one when either is NaN,
 * so NaN elements leave the extrema alone (a block holding one is redone in double anyway; the
 * sums tell, since NaN reaches them). */
INLINE void lanes_add(struct lanes *a, __m512 x, __m512 shift)
{
	__m512 ab = _mm512_abs_ps(x), d = _mm512_sub_ps(x, shift);
	a->mn = _mm512_min_ps(x, a->mn);
	a->mx = _mm512_max_ps(x, a->mx);
	a->sa = _mm512_add_ps(a->sa, ab);
	a->sd = _mm512_add_ps(a->sd, d);
	a->sdd = _mm512_fmadd_ps(d, d, a->sdd);
	__mmask16 z = _mm512_cmp_ps_mask(x, _mm512_setzero_ps(), _CMP_EQ_OQ);
	a->zc = _mm512_mask_sub_epi32(a->zc, z, a->zc, _mm512_set1_epi32(-1));
	a->mnz = _mm512_mask_min_ps(a->mnz, (__mmask16)~z, ab, a->mnz);
}

INLINE void lanes_combine(struct lanes *a, const struct lanes *b)
{
	a->mn = _mm512_min_ps(a->mn, b->mn);
	a->mx = _mm512_max_ps(a->mx, b->mx);
	a->mnz = _mm512_min_ps(a->mnz, b->mnz);
	a->sa = _mm512_add_ps(a->sa, b->sa);
	a->sd = _mm512_add_ps(a->sd, b->sd);
	a->sdd = _mm512_add_ps(a->sdd, b->sdd);
	a->zc = _mm512_add_epi32(a->zc, b->zc);
}

/* One read of `steps` pairs of cache lines. Two sets of accumulators, alternating, halve the
 * dependency chains so the adds and FMAs keep up with memory. */
INLINE void block_pass(const unsigned char *p, enum dli_dtype dt, int64_t steps, float shift,
		       int64_t pf, struct lanes *out)
{
	const __m512 vshift = _mm512_set1_ps(shift);
	struct lanes a0, a1; /* separate variables, not an array: they must live in registers */
	__m512 v[8];
	lanes_init(&a0);
	lanes_init(&a1);
	for (int64_t s = 0; s < steps; s++) {
		const unsigned char *q = p + s * 2 * LINE;
		_mm_prefetch((const char *)q + pf, _MM_HINT_T0);
		_mm_prefetch((const char *)q + LINE + pf, _MM_HINT_T0);
		int nv = load_line(q, dt, v);
		nv += load_line(q + LINE, dt, v + nv);
		for (int k = 0; k < nv; k += 2) {
			lanes_add(&a0, v[k], vshift);
			lanes_add(&a1, v[k + 1], vshift);
		}
	}
	lanes_combine(&a0, &a1);
	*out = a0;
}

INLINE void block_sums(const unsigned char *p, enum dli_dtype dt, int64_t steps, float shift,
		       int64_t pf, struct dli_stats_sums *o)
{
	struct lanes a;
	block_pass(p, dt, steps, shift, pf, &a);
	o->mn = _mm512_reduce_min_ps(a.mn);
	o->mx = _mm512_reduce_max_ps(a.mx);
	o->mnz = _mm512_reduce_min_ps(a.mnz);
	o->zc = (uint64_t)_mm512_reduce_add_epi32(a.zc);
	o->sd = sum_lanes(a.sd);
	o->sdd = sum_lanes(a.sdd);
	o->sa = sum_lanes(a.sa);
}

/* ---- bf16 with vdpbf16ps: 32 elements a vector, most work in 16-bit lanes ----
 *
 * The pass is bound by vector operations (Zen 4 runs two 512-bit ones a cycle), so it counts
 * them, per vector w of 32 bf16 (u = |w| - 1 in 16-bit lanes: 0xffff for +-0, below 0x7fff for
 * anything else; the bits of magnitudes order as the magnitudes do):
 *  - extrema: max_epi16(w) is the largest element whose sign bit is clear (as a signed 16-bit
 *    number a negative is below every non-negative), max_epu16(w) the negative of largest
 *    magnitude (as an unsigned number every negative is above every non-negative); where a block
 *    has no element of one sign, its max (min) is -0 or the negative (0 or the positive) of least
 *    magnitude, known from the zero count and min_epu16(u): two operations for min and max;
 *  - the zero count (u >> 15 summed in 16-bit lanes) and the least nonzero magnitude
 *    (min_epu16(u) + 1), sharing u;
 *  - sum |x| with one vdpbf16ps of |w| against ones (products by 1 are exact; it flushes bf16
 *    subnormals, which are below 2^-126 and so below float rounding of a block's sum of
 *    magnitudes once the block's largest magnitude is at least SMALL);
 *  - the deviations d of the even and odd elements (vpslld 16, vpandd) and their sums and sums of
 *    squares in float, as for the other dtypes.
 * Sixteen operations for 32 elements against 22 in the generic loop. */
struct lanes16 {
	__m512i smax, umax, umin, zc; /* 16-bit lanes */
	__m512 sa, sd0, sd1, sdd0, sdd1;
};

INLINE void lanes16_init(struct lanes16 *a)
{
	a->smax = _mm512_set1_epi16((short)0x8000);
	a->umax = _mm512_setzero_si512();
	a->umin = _mm512_set1_epi16(-1);
	a->zc = _mm512_setzero_si512();
	a->sa = a->sd0 = a->sd1 = a->sdd0 = a->sdd1 = _mm512_setzero_ps();
}

DLI_TARGET_BF16 INLINE void lanes16_add(struct lanes16 *a, __m512i w,
							       __m512 shift)
{
	const __m512i hi = _mm512_set1_epi32((int)0xffff0000u);
	__m512 x0 = _mm512_castsi512_ps(_mm512_slli_epi32(w, 16));
	__m512 x1 = _mm512_castsi512_ps(_mm512_and_si512(w, hi));
	__m512i aw = _mm512_and_si512(w, _mm512_set1_epi16(0x7fff));
	__m512i u = _mm512_sub_epi16(aw, _mm512_set1_epi16(1));
	a->smax = _mm512_max_epi16(a->smax, w);
	a->umax = _mm512_max_epu16(a->umax, w);
	a->umin = _mm512_min_epu16(a->umin, u);
	a->zc = _mm512_add_epi16(a->zc, _mm512_srli_epi16(u, 15));
	a->sa = _mm512_dpbf16_ps(a->sa, (__m512bh)aw, (__m512bh)_mm512_set1_epi16(0x3f80));
	__m512 d0 = _mm512_sub_ps(x0, shift), d1 = _mm512_sub_ps(x1, shift);
	a->sd0 = _mm512_add_ps(a->sd0, d0);
	a->sd1 = _mm512_add_ps(a->sd1, d1);
	a->sdd0 = _mm512_fmadd_ps(d0, d0, a->sdd0);
	a->sdd1 = _mm512_fmadd_ps(d1, d1, a->sdd1);
}

INLINE void lanes16_combine(struct lanes16 *a, const struct lanes16 *b)
{
	a->smax = _mm512_max_epi16(a->smax, b->smax);
	a->umax = _mm512_max_epu16(a->umax, b->umax);
	a->umin = _mm512_min_epu16(a->umin, b->umin);
	a->zc = _mm512_add_epi16(a->zc, b->zc);
	a->sa = _mm512_add_ps(a->sa, b->sa);
	a->sd0 = _mm512_add_ps(_mm512_add_ps(a->sd0, a->sd1), _mm512_add_ps(b->sd0, b->sd1));
	a->sdd0 = _mm512_add_ps(_mm512_add_ps(a->sdd0, a->sdd1), _mm512_add_ps(b->sdd0, b->sdd1));
}

INLINE float bf16_float(uint32_t bits)
{
	uint32_t u = bits << 16;
	float f;
	__builtin_memcpy(&f, &u, sizeof(f));
	return f;
}

/* Not inlined: block() is inlined into code for CPUs without vdpbf16ps too. */
DLI_TARGET_BF16 __attribute__((noinline)) static void
block_sums_bf16(const unsigned char *p, int64_t steps, float shift, int64_t pf, struct dli_stats_sums *o)
{
	const __m512 vshift = _mm512_set1_ps(shift);
	const __m512i lo16 = _mm512_set1_epi32(0xffff);
	struct lanes16 a0, a1;
	lanes16_init(&a0);
	lanes16_init(&a1);
	for (int64_t s = 0; s < steps; s++) {
		const unsigned char *q = p + s * 2 * LINE;
		_mm_prefetch((const char *)q + pf, _MM_HINT_T0);
		_mm_prefetch((const char *)q + LINE + pf, _MM_HINT_T0);
		lanes16_add(&a0, _mm512_loadu_si512(q), vshift);
		lanes16_add(&a1, _mm512_loadu_si512(q + LINE), vshift);
	}
	lanes16_combine(&a0, &a1);
	/* 16-bit lanes to 32-bit ones (sign- or zero-extended) for the reductions; each zero count
	 * lane is at most 2 * 2 * DLI_STATS_BLOCK / 32. */
	int smax = _mm512_reduce_max_epi32(_mm512_max_epi32(
		_mm512_srai_epi32(_mm512_slli_epi32(a0.smax, 16), 16), _mm512_srai_epi32(a0.smax, 16)));
	uint32_t umax = _mm512_reduce_max_epu32(_mm512_max_epu32(
		_mm512_and_si512(a0.umax, lo16), _mm512_srli_epi32(a0.umax, 16)));
	uint32_t umin = _mm512_reduce_min_epu32(_mm512_min_epu32(
		_mm512_and_si512(a0.umin, lo16), _mm512_srli_epi32(a0.umin, 16)));
	o->zc = (uint64_t)_mm512_reduce_add_epi32(_mm512_madd_epi16(a0.zc, _mm512_set1_epi16(1)));
	o->mnz = umin == 0xffff ? INFINITY : bf16_float(umin + 1);
	/* No element with its sign clear: all are negative or -0, and the largest is -0 or the
	 * negative of least magnitude. Likewise for the least where no sign is set. */
	o->mx = smax >= 0 ? bf16_float((uint32_t)smax) : o->zc ? -0.0f : -o->mnz;
	o->mn = umax >= 0x8000 ? bf16_float(umax) : o->zc ? 0.0f : o->mnz;
	o->sd = sum_lanes(a0.sd0);
	o->sdd = sum_lanes(a0.sdd0);
	o->sa = sum_lanes(a0.sa);
}

/* ---- Blocks the float lanes cannot take: double lanes ----
 *
 * An FP8 block holding NaN or infinities, or any block with magnitudes outside [SMALL, LARGE], is
 * read again (it is in L1) into double lanes. There the square of every float is exact and no
 * block sum can overflow, and NaN and infinities flow through the sums as in a naive double loop,
 * in any order: a sum holding a NaN, or both infinities, is NaN, one holding one infinity is that
 * infinity. Extrema and the counts of zeros, NaN and infinities come from float lanes, exactly. */
struct dlanes {
	__m512 mn, mx, mnz;
	__m512i zc;
	__m512d sa, sq, sd, sdd;
	uint64_t nan, inf;
};

/* full: every term; else only sd and sdd (a second pass around a better shift). */
INLINE void dlanes_add(struct dlanes *a, __m512 x, __m512d shift, bool full)
{
	__m512d h[2] = {_mm512_cvtps_pd(_mm512_castps512_ps256(x)),
			_mm512_cvtps_pd(_mm512_extractf32x8_ps(x, 1))};
	for (int k = 0; k < 2; k++) {
		__m512d d = _mm512_sub_pd(h[k], shift);
		a->sd = _mm512_add_pd(a->sd, d);
		a->sdd = _mm512_fmadd_pd(d, d, a->sdd);
		if (full) {
			a->sa = _mm512_add_pd(a->sa, _mm512_abs_pd(h[k]));
			a->sq = _mm512_fmadd_pd(h[k], h[k], a->sq);
		}
	}
	if (!full)
		return;
	/* As lanes_add: NaN elements leave the extrema alone. */
	__m512 ab = _mm512_abs_ps(x);
	__mmask16 z = _mm512_cmp_ps_mask(x, _mm512_setzero_ps(), _CMP_EQ_OQ);
	a->mn = _mm512_min_ps(x, a->mn);
	a->mx = _mm512_max_ps(x, a->mx);
	a->zc = _mm512_mask_sub_epi32(a->zc, z, a->zc, _mm512_set1_epi32(-1));
	a->mnz = _mm512_mask_min_ps(a->mnz, (__mmask16)~z, ab, a->mnz);
	/* fpclass 0x81: quiet or signalling NaN; 0x18: +inf or -inf */
	a->nan += (uint64_t)__builtin_popcount(_mm512_fpclass_ps_mask(x, 0x81));
	a->inf += (uint64_t)__builtin_popcount(_mm512_fpclass_ps_mask(x, 0x18));
}

INLINE void dpass(const unsigned char *p, enum dli_dtype dt, int64_t steps, double shift, bool full,
		  struct dlanes *a)
{
	const __m512d vshift = _mm512_set1_pd(shift);
	__m512 v[8];
	a->sd = a->sdd = _mm512_setzero_pd();
	if (full) {
		a->mn = a->mnz = _mm512_set1_ps(INFINITY);
		a->mx = _mm512_set1_ps(-INFINITY);
		a->zc = _mm512_setzero_si512();
		a->sa = a->sq = _mm512_setzero_pd();
		a->nan = a->inf = 0;
	}
	for (int64_t s = 0; s < steps; s++) {
		const unsigned char *q = p + s * 2 * LINE;
		if (full) { /* the block may come from memory: see block() */
			_mm_prefetch((const char *)q + DLI_PREFETCH_BYTES, _MM_HINT_T0);
			_mm_prefetch((const char *)q + LINE + DLI_PREFETCH_BYTES, _MM_HINT_T0);
		}
		int nv = load_line(q, dt, v);
		nv += load_line(q + LINE, dt, v + nv);
		for (int k = 0; k < nv; k++)
			dlanes_add(a, v[k], vshift, full);
	}
}

/* Returns whether the float lanes could not have taken the block. */
INLINE bool block_double(const unsigned char *p, enum dli_dtype dt, int64_t n, float fshift,
			 struct dli_stats_record *r)
{
	const int64_t steps = n / (2 * LINE / (int64_t)dli_dtype_size(dt));
	double dn = (double)n, shift = fshift, sd, sdd;
	struct dlanes a;
	dpass(p, dt, steps, shift, true, &a);
	sd = _mm512_reduce_add_pd(a.sd);
	sdd = _mm512_reduce_add_pd(a.sdd);
	/* As in block(); never taken when sd is NaN or infinite (then m2 is NaN either way). */
	if (sd * sd / dn > sdd - sd * sd / dn) {
		shift += sd / dn;
		dpass(p, dt, steps, shift, false, &a);
		sd = _mm512_reduce_add_pd(a.sd);
		sdd = _mm512_reduce_add_pd(a.sdd);
	}
	struct dli_stats_dblock b = {
		.n = (uint64_t)n, .nan = a.nan, .inf = a.inf,
		.zeros = (uint64_t)_mm512_reduce_add_epi32(a.zc),
		.min = _mm512_reduce_min_ps(a.mn), .max = _mm512_reduce_max_ps(a.mx),
		.min_nonzero_abs = _mm512_reduce_min_ps(a.mnz),
		.shift = shift, .sd = sd, .sdd = sdd,
		.sum_abs = _mm512_reduce_add_pd(a.sa), .sum_sq = _mm512_reduce_add_pd(a.sq)};
	return dli_stats_dblock_record(&b, SMALL, LARGE, r);
}

/* Not inlined into each instance of block(): a rare path, one copy per dtype. */
__attribute__((noinline)) static bool block_rare(const unsigned char *p, enum dli_dtype dt, int64_t n,
						  float shift, struct dli_stats_record *r)
{
	switch (dt) {
	case DLI_DTYPE_BF16: return block_double(p, DLI_DTYPE_BF16, n, shift, r);
	case DLI_DTYPE_F16: return block_double(p, DLI_DTYPE_F16, n, shift, r);
	case DLI_DTYPE_F8E4M3: return block_double(p, DLI_DTYPE_F8E4M3, n, shift, r);
	case DLI_DTYPE_F8E5M2: return block_double(p, DLI_DTYPE_F8E5M2, n, shift, r);
	default: dli_stats_block_scalar(p, dt, n, r); return true;
	}
}

/* Which way a block went, for the next one: blocks of one kind come in stretches. */
enum kind {
	CLEAN,     /* float lanes */
	NONFINITE, /* bf16 or f16 holding NaN or infinities: the AVX2 kernel's integer pass */
	RARE,      /* the double lanes: magnitudes the float lanes cannot take, or FP8 NaN/inf */
};

/* Not inlined either. A bf16 or f16 block holding NaN or an infinity needs no float arithmetic
 * (its sums follow from its counts and extrema): the AVX2 kernel's integer pass over its bits
 * gives its record, at the speed of a clean block (stats-avx2.c); other blocks go to the double
 * lanes. */
__attribute__((noinline)) static enum kind block_odd(const unsigned char *p, enum dli_dtype dt,
						     int64_t n, float shift, int64_t pf,
						     struct dli_stats_record *r)
{
	if (dli_stats_nonfinite_block_avx2(p, dt, n, pf, r))
		return NONFINITE;
	return block_rare(p, dt, n, shift, r) ? RARE : CLEAN;
}

/* n: a positive multiple of the elements in two lines; shift: a guess at the block's mean.
 * bf16dp: bf16 input through block_sums_bf16 (the CPU has vdpbf16ps). prev: how the previous
 * block went; after a NONFINITE or RARE one, this one goes straight to the same path (in data full
 * of NaN, the float pass would be wasted on every block), and back to the float lanes when it
 * finds none. Returns how this block went. */
INLINE enum kind block(const unsigned char *p, enum dli_dtype dt, bool bf16dp, int64_t n,
		       float shift, enum kind prev, int64_t pf, struct dli_stats_record *r)
{
	if (prev == NONFINITE && dli_stats_nonfinite_block_avx2(p, dt, n, pf, r))
		return NONFINITE;
	if (prev == RARE)
		return block_odd(p, dt, n, shift, pf, r);
	const int64_t steps = n / (2 * LINE / (int64_t)dli_dtype_size(dt));
	struct dli_stats_sums a;
	if (bf16dp)
		block_sums_bf16(p, steps, shift, pf, &a);
	else
		block_sums(p, dt, steps, shift, pf, &a);
	float amax = a.mx > -a.mn ? a.mx : -a.mn;
	double dn = (double)n, sd = a.sd, sdd = a.sdd, sa = a.sa;
	/* NaN or an infinity reaches the sums (the shift is finite and bounded, so nothing else
	 * can make them non-finite). */
	if (!isfinite(sd + sdd + sa) || amax > LARGE || (amax > 0 && amax < SMALL))
		return block_odd(p, dt, n, shift, pf, r);
	/* A shift further from the mean than the spread would cost precision to cancellation:
	 * read the block again (from L1) around its own mean. Rare: the shift is the running mean
	 * of the chunk, so this happens for non-stationary data or a first block. */
	double c = sd * sd / dn;
	if (c > sdd - c) {
		shift = (float)((double)shift + sd / dn);
		if (bf16dp)
			block_sums_bf16(p, steps, shift, pf, &a);
		else
			block_sums(p, dt, steps, shift, pf, &a);
	}
	dli_stats_sums_record(&a, n, shift, r);
	return CLEAN;
}

/* The shift for a chunk's next block: the chunk's running mean, or where there is none (the first
 * block, or a mean that earlier blocks' NaN or infinities made non-finite) the block's first
 * element; 0 when that is not a finite number of moderate size either. */
INLINE float next_shift(const unsigned char *p, enum dli_dtype dt, const struct dli_stats_record *r)
{
	if (r->count && fabs(r->mean) <= LARGE)
		return (float)r->mean;
	__m512 v[4];
	load_line(p, dt, v);
	float s = _mm512_cvtss_f32(v[0]);
	return fabsf(s) <= LARGE ? s : 0.0f;
}

/* The blocks come from p, or, when v is set, from the view v's elements from `first` on (through
 * scratch where a block spans runs): the same blocks either way (kernels/cpu/runs-private.h). */
INLINE void chunk_from(const unsigned char *p, const struct dli_cpu_runs *v, int64_t first,
		       unsigned char *scratch, enum dli_dtype dt, bool bf16dp, int64_t n,
		       struct dli_stats_record *r)
{
	const size_t es = dli_dtype_size(dt);
	const int64_t per_step = 2 * LINE / (int64_t)es;
	/* bf16 through vdpbf16ps: twice the block, so that its float lanes add as many terms as
	 * the generic loop's do (32 elements a vector against 16), and the block's end
	 * (reductions, checks and the merge in double: 15-20% of the time at DLI_STATS_BLOCK)
	 * comes half as often. */
	const int64_t bs = bf16dp ? 2 * DLI_STATS_BLOCK : DLI_STATS_BLOCK;
	struct dli_stats_record b;
	enum kind prev = CLEAN;
	struct dli_runs_cursor c;
	if (v)
		dli_runs_cursor_init(&c, v, first);
	dli_stats_record_init(r);
	for (int64_t i = 0; i < n; i += bs) {
		int64_t m = n - i < bs ? n - i : bs;
		int64_t whole = m - m % per_step;
		int64_t pf = DLI_PREFETCH_BYTES;
		const unsigned char *q = v ? dli_runs_cursor_block(&c, m, scratch, &pf)
					   : p + (size_t)i * es;
		if (whole) {
			prev = block(q, dt, bf16dp, whole, next_shift(q, dt, r), prev, pf, &b);
			dli_stats_merge(r, &b);
		}
		if (m > whole) {
			dli_stats_block_scalar(q + (size_t)whole * es, dt, m - whole, &b);
			dli_stats_merge(r, &b);
		}
	}
}

INLINE void chunk(const unsigned char *p, enum dli_dtype dt, bool bf16dp, int64_t n,
		  struct dli_stats_record *r)
{
	chunk_from(p, NULL, 0, NULL, dt, bf16dp, n, r);
}

static void chunk_bf16dp(const void *p, int64_t n, struct dli_stats_record *r)
{
	chunk(p, DLI_DTYPE_BF16, true, n, r);
}

/* bf16 through vdpbf16ps when the CPU has it; tests turn it off to reach the generic loop. */
int dli_stats_avx512_bf16dp = 1;

void dli_stats_chunk_avx512(const void *p, enum dli_dtype dt, int64_t n, struct dli_stats_record *r)
{
	/* One instance per dtype, so each inner loop is straight-line code for its format. f32 goes
	 * to the AVX2 kernel: its sums in double lanes make a tensor's moments independent of where
	 * its blocks begin (shards and one call agree to 1e-12), and a port of them to AVX-512 could
	 * not be run where this was written. */
	switch (dt) {
	case DLI_DTYPE_F32: dli_stats_chunk_avx2(p, dt, n, r); break;
	case DLI_DTYPE_BF16:
		if (dli_stats_avx512_bf16dp && DLI_CPU_HAS("avx512bf16"))
			chunk_bf16dp(p, n, r);
		else
			chunk(p, DLI_DTYPE_BF16, false, n, r);
		break;
	case DLI_DTYPE_F16: chunk(p, DLI_DTYPE_F16, false, n, r); break;
	case DLI_DTYPE_F8E4M3: chunk(p, DLI_DTYPE_F8E4M3, false, n, r); break;
	case DLI_DTYPE_F8E5M2: chunk(p, DLI_DTYPE_F8E5M2, false, n, r); break;
	default: dli_stats_record_init(r); break;
	}
}

/* The view's elements [first, first + n): the chunks above over runs (runs-private.h). */
void dli_stats_runs_avx512(const struct dli_cpu_runs *v, int64_t first, int64_t n,
			   unsigned char *scratch, struct dli_stats_record *r)
{
	switch (v->dtype) {
	case DLI_DTYPE_F32: dli_stats_runs_avx2(v, first, n, scratch, r); break; /* as above */
	case DLI_DTYPE_BF16:
		if (dli_stats_avx512_bf16dp && DLI_CPU_HAS("avx512bf16"))
			chunk_from(NULL, v, first, scratch, DLI_DTYPE_BF16, true, n, r);
		else
			chunk_from(NULL, v, first, scratch, DLI_DTYPE_BF16, false, n, r);
		break;
	case DLI_DTYPE_F16: chunk_from(NULL, v, first, scratch, DLI_DTYPE_F16, false, n, r); break;
	case DLI_DTYPE_F8E4M3:
		chunk_from(NULL, v, first, scratch, DLI_DTYPE_F8E4M3, false, n, r);
		break;
	case DLI_DTYPE_F8E5M2:
		chunk_from(NULL, v, first, scratch, DLI_DTYPE_F8E5M2, false, n, r);
		break;
	default: dli_stats_record_init(r); break;
	}
}
