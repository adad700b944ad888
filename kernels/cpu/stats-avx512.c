/* The statistics pass with AVX-512 (F, BW, DQ, VL; compiled with those flags and chosen at run time
 * by stats.c). Same structure as the AVX2 file: per L1-sized block, one pass that reads memory
 * (with software prefetch) into float lanes of extrema, counts and sums of deviations from a shift
 * near the mean; a second pass over the block (still in L1) only when the shift was poor; a
 * double-precision redo for blocks with NaN, infinities or extreme magnitudes; and a Chan merge
 * of each block into the chunk's record in double. */
#include <immintrin.h>
#include <math.h>

#include "cpu-private.h"

#define INLINE static inline __attribute__((always_inline))
#define LINE 64 /* a cache line: one prefetch each */

/* Below this magnitude a float square loses bits to flushing (x^2 < 2^-100 leaves 2^-49 of room
 * under the smallest normal), above it a block's sum of squares could overflow; blocks whose
 * largest magnitude is outside go to the double path. So do blocks holding NaN or infinities,
 * where the double path reproduces a naive loop's NaN/inf arithmetic exactly. */
#define SMALL 0x1p-50f
#define LARGE 0x1p50f

/* Decodes the cache line at p into floats; returns how many vectors of 16 it made. The element
 * order within a line does not matter to any statistic, which lets bf16 skip the lane shuffle:
 * even elements are a 32-bit lane shifted up, odd ones the lane with its low half cleared. */
INLINE int load_line(const unsigned char *p, enum dli_dtype dt, __m512 v[4])
{
	switch (dt) {
	case DLI_DTYPE_F32:
		v[0] = _mm512_loadu_ps(p);
		return 1;
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
		       struct lanes *out)
{
	const __m512 vshift = _mm512_set1_ps(shift);
	struct lanes a0, a1; /* separate variables, not an array: they must live in registers */
	__m512 v[8];
	lanes_init(&a0);
	lanes_init(&a1);
	for (int64_t s = 0; s < steps; s++) {
		const unsigned char *q = p + s * 2 * LINE;
		_mm_prefetch((const char *)q + DLI_PREFETCH_BYTES, _MM_HINT_T0);
		_mm_prefetch((const char *)q + LINE + DLI_PREFETCH_BYTES, _MM_HINT_T0);
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

/* n: a positive multiple of the elements in two lines; shift: a guess at the block's mean. */
INLINE void block(const unsigned char *p, enum dli_dtype dt, int64_t n, float shift,
		  struct dli_stats_record *r)
{
	const int64_t steps = n / (2 * LINE / (int64_t)dli_dtype_size(dt));
	struct lanes a;
	block_pass(p, dt, steps, shift, &a);
	float fmn = _mm512_reduce_min_ps(a.mn), fmx = _mm512_reduce_max_ps(a.mx);
	float amax = fmx > -fmn ? fmx : -fmn;
	double dn = (double)n, sd = sum_lanes(a.sd), sdd = sum_lanes(a.sdd), sa = sum_lanes(a.sa);
	/* NaN or an infinity reaches the sums (the shift is finite and bounded, so nothing else
	 * can make them non-finite). */
	if (!isfinite(sd + sdd + sa) || amax > LARGE || (amax > 0 && amax < SMALL)) {
		dli_stats_block_scalar(p, dt, n, r);
		return;
	}
	/* A shift further from the mean than the spread would cost precision to cancellation:
	 * read the block again (from L1) around its own mean. Rare: the shift is the running mean
	 * of the chunk, so this happens for non-stationary data or a first block. */
	double c = sd * sd / dn;
	if (c > sdd - c) {
		shift = (float)((double)shift + sd / dn);
		block_pass(p, dt, steps, shift, &a);
		sd = sum_lanes(a.sd);
		sdd = sum_lanes(a.sdd);
		c = sd * sd / dn;
	}
	double m2 = sdd - c;
	dli_stats_record_init(r);
	r->count = (uint64_t)n;
	r->zero_count = (uint64_t)_mm512_reduce_add_epi32(a.zc);
	r->min = fmn;
	r->max = fmx;
	r->amax = amax;
	r->min_nonzero_abs = _mm512_reduce_min_ps(a.mnz);
	r->sum = dn * shift + sd;
	r->sum_abs = sa;
	r->mean = r->sum / dn;
	/* sum(d)^2 / n <= sum(d^2) in exact arithmetic; rounding may cross it when all are equal. */
	r->m2 = m2 < 0 ? 0 : m2;
	/* Every term is positive, so this sum of squares has no cancellation to fear. */
	r->sum_sq = r->m2 + dn * r->mean * r->mean;
}

/* The shift for a chunk's next block: the chunk's running mean, or for its first block the first
 * element; 0 when that is not a finite number of moderate size. */
INLINE float next_shift(const unsigned char *p, enum dli_dtype dt, const struct dli_stats_record *r)
{
	float s;
	if (r->count) {
		s = (float)r->mean;
	} else {
		__m512 v[4];
		load_line(p, dt, v);
		s = _mm512_cvtss_f32(v[0]);
	}
	return fabsf(s) <= LARGE ? s : 0.0f;
}

INLINE void chunk(const unsigned char *p, enum dli_dtype dt, int64_t n, struct dli_stats_record *r)
{
	const size_t es = dli_dtype_size(dt);
	const int64_t per_step = 2 * LINE / (int64_t)es;
	struct dli_stats_record b;
	dli_stats_record_init(r);
	for (int64_t i = 0; i < n; i += DLI_STATS_BLOCK) {
		int64_t m = n - i < DLI_STATS_BLOCK ? n - i : DLI_STATS_BLOCK;
		int64_t whole = m - m % per_step;
		if (whole) {
			const unsigned char *q = p + (size_t)i * es;
			block(q, dt, whole, next_shift(q, dt, r), &b);
			dli_stats_merge(r, &b);
		}
		if (m > whole) {
			dli_stats_block_scalar(p + (size_t)(i + whole) * es, dt, m - whole, &b);
			dli_stats_merge(r, &b);
		}
	}
}

void dli_stats_chunk_avx512(const void *p, enum dli_dtype dt, int64_t n, struct dli_stats_record *r)
{
	/* One instance per dtype, so each inner loop is straight-line code for its format. */
	switch (dt) {
	case DLI_DTYPE_F32: chunk(p, DLI_DTYPE_F32, n, r); break;
	case DLI_DTYPE_BF16: chunk(p, DLI_DTYPE_BF16, n, r); break;
	case DLI_DTYPE_F16: chunk(p, DLI_DTYPE_F16, n, r); break;
	case DLI_DTYPE_F8E4M3: chunk(p, DLI_DTYPE_F8E4M3, n, r); break;
	case DLI_DTYPE_F8E5M2: chunk(p, DLI_DTYPE_F8E5M2, n, r); break;
	default: dli_stats_record_init(r); break;
	}
}
