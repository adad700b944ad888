/* The statistics pass with AVX2, FMA and F16C (compiled with those flags and chosen at run time by
 * stats.c). Same structure as the AVX-512 file (whose top comment tells it), eight lanes wide. */
#include <immintrin.h>
#include <math.h>
#include <stdbool.h>

#include "cpu-private.h"
#include "runs-private.h"

#define INLINE static inline __attribute__((always_inline))
#define LINE 64 /* a cache line: one prefetch each */

/* The magnitudes outside which a block goes to the double path (see stats-avx512.c). */
#define SMALL 0x1p-50f
#define LARGE 0x1p50f

/* 16 FP8 bytes at p as 16 halves (E5M2: its upper byte; E4M3: the same bits below the sign, which
 * scales every value by 2^-8 since the bias is 7 instead of 15; its one NaN made a half NaN). */
INLINE __m256i fp8_to_half(const unsigned char *p, enum dli_dtype dt)
{
	__m256i b = _mm256_cvtepu8_epi16(_mm_loadu_si128((const __m128i *)p));
	if (dt == DLI_DTYPE_F8E5M2)
		return _mm256_slli_epi16(b, 8);
	__m256i mag = _mm256_and_si256(b, _mm256_set1_epi16(0x7f));
	__m256i sign = _mm256_and_si256(b, _mm256_set1_epi16(0x80));
	__m256i h = _mm256_or_si256(_mm256_slli_epi16(mag, 7), _mm256_slli_epi16(sign, 8));
	__m256i nan = _mm256_cmpeq_epi16(mag, _mm256_set1_epi16(0x7f));
	return _mm256_blendv_epi8(h, _mm256_set1_epi16(0x7e00), nan);
}

/* Decodes the cache line at p into floats; returns how many vectors of 8 it made. The element
 * order within a line does not matter to any statistic, which lets bf16 skip the lane shuffle:
 * even elements are a 32-bit lane shifted up, odd ones the lane with its low half cleared. */
INLINE int load_line(const unsigned char *p, enum dli_dtype dt, __m256 v[8])
{
	switch (dt) {
	case DLI_DTYPE_F32:
		v[0] = _mm256_loadu_ps((const float *)p);
		v[1] = _mm256_loadu_ps((const float *)(p + 32));
		return 2;
	case DLI_DTYPE_BF16:
		for (int k = 0; k < 2; k++) {
			__m256i w = _mm256_loadu_si256((const __m256i *)(p + 32 * k));
			v[2 * k] = _mm256_castsi256_ps(_mm256_slli_epi32(w, 16));
			v[2 * k + 1] = _mm256_castsi256_ps(
				_mm256_and_si256(w, _mm256_set1_epi32((int)0xffff0000u)));
		}
		return 4;
	case DLI_DTYPE_F16:
		for (int k = 0; k < 4; k++)
			v[k] = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(p + 16 * k)));
		return 4;
	case DLI_DTYPE_F8E5M2:
	case DLI_DTYPE_F8E4M3:
		for (int k = 0; k < 4; k++) {
			__m256i h = fp8_to_half(p + 16 * k, dt);
			v[2 * k] = _mm256_cvtph_ps(_mm256_castsi256_si128(h));
			v[2 * k + 1] = _mm256_cvtph_ps(_mm256_extracti128_si256(h, 1));
			if (dt == DLI_DTYPE_F8E4M3) {
				v[2 * k] = _mm256_mul_ps(v[2 * k], _mm256_set1_ps(256.0f));
				v[2 * k + 1] = _mm256_mul_ps(v[2 * k + 1], _mm256_set1_ps(256.0f));
			}
		}
		return 8;
	default:
		return 0;
	}
}

INLINE double sum_lanes(__m256 v)
{
	__m256d t = _mm256_add_pd(_mm256_cvtps_pd(_mm256_castps256_ps128(v)),
				  _mm256_cvtps_pd(_mm256_extractf128_ps(v, 1)));
	__m128d u = _mm_add_pd(_mm256_castpd256_pd128(t), _mm256_extractf128_pd(t, 1));
	return _mm_cvtsd_f64(u) + _mm_cvtsd_f64(_mm_unpackhi_pd(u, u));
}

INLINE double sum_pd(__m256d v)
{
	__m128d u = _mm_add_pd(_mm256_castpd256_pd128(v), _mm256_extractf128_pd(v, 1));
	return _mm_cvtsd_f64(u) + _mm_cvtsd_f64(_mm_unpackhi_pd(u, u));
}

/* The sum of eight 32-bit counts. */
INLINE uint64_t count_lanes(__m256i v)
{
	int32_t c[8];
	uint64_t s = 0;
	_mm256_storeu_si256((__m256i *)c, v);
	for (int i = 0; i < 8; i++)
		s += (uint64_t)c[i];
	return s;
}

INLINE float min_lanes(__m256 v)
{
	float f[8], m;
	_mm256_storeu_ps(f, v);
	m = f[0];
	for (int i = 1; i < 8; i++)
		m = f[i] < m ? f[i] : m;
	return m;
}

INLINE float max_lanes(__m256 v)
{
	float f[8], m;
	_mm256_storeu_ps(f, v);
	m = f[0];
	for (int i = 1; i < 8; i++)
		m = f[i] > m ? f[i] : m;
	return m;
}

/* Float lanes of one block's first-order terms. Deviations d = x - shift from a shift close to the
 * block's mean give its mean (shift + sum d / n) and m2 (sum d^2 - (sum d)^2 / n) in one pass,
 * without the cancellation of sum x^2 - n mean^2. */
struct lanes {
	__m256 mn, mx, mnz, sa, sd, sdd;
	__m256i zc;
};

INLINE void lanes_init(struct lanes *a)
{
	a->mn = a->mnz = _mm256_set1_ps(INFINITY);
	a->mx = _mm256_set1_ps(-INFINITY);
	a->sa = a->sd = a->sdd = _mm256_setzero_ps();
	a->zc = _mm256_setzero_si256();
}

/* min/max take the accumulator as second operand: x86 returns the second one when either is NaN,
 * so NaN elements leave the extrema alone (a block holding one is redone in double anyway; the
 * sums tell, since NaN reaches them). */
INLINE void lanes_add(struct lanes *a, __m256 x, __m256 shift)
{
	const __m256 absmask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
	__m256 ab = _mm256_and_ps(x, absmask), d = _mm256_sub_ps(x, shift);
	a->mn = _mm256_min_ps(x, a->mn);
	a->mx = _mm256_max_ps(x, a->mx);
	a->sa = _mm256_add_ps(a->sa, ab);
	a->sd = _mm256_add_ps(a->sd, d);
	a->sdd = _mm256_fmadd_ps(d, d, a->sdd);
	__m256 z = _mm256_cmp_ps(x, _mm256_setzero_ps(), _CMP_EQ_OQ);
	a->zc = _mm256_sub_epi32(a->zc, _mm256_castps_si256(z)); /* a true compare is -1 */
	a->mnz = _mm256_min_ps(_mm256_blendv_ps(ab, _mm256_set1_ps(INFINITY), z), a->mnz);
}

INLINE void lanes_combine(struct lanes *a, const struct lanes *b)
{
	a->mn = _mm256_min_ps(a->mn, b->mn);
	a->mx = _mm256_max_ps(a->mx, b->mx);
	a->mnz = _mm256_min_ps(a->mnz, b->mnz);
	a->sa = _mm256_add_ps(a->sa, b->sa);
	a->sd = _mm256_add_ps(a->sd, b->sd);
	a->sdd = _mm256_add_ps(a->sdd, b->sdd);
	a->zc = _mm256_add_epi32(a->zc, b->zc);
}

/* One read of `lines` cache lines. Two sets of accumulators, alternating, halve the dependency
 * chains so the adds and FMAs keep up with memory. */
INLINE void block_pass(const unsigned char *p, enum dli_dtype dt, int64_t lines, float shift,
		       int64_t pf, struct lanes *out)
{
	const __m256 vshift = _mm256_set1_ps(shift);
	struct lanes a0, a1; /* separate variables, not an array: they must live in registers */
	__m256 v[8];
	lanes_init(&a0);
	lanes_init(&a1);
	for (int64_t l = 0; l < lines; l++) {
		const unsigned char *q = p + l * LINE;
		_mm_prefetch((const char *)q + pf, _MM_HINT_T0);
		int nv = load_line(q, dt, v);
		for (int k = 0; k < nv; k += 2) {
			lanes_add(&a0, v[k], vshift);
			lanes_add(&a1, v[k + 1], vshift);
		}
	}
	lanes_combine(&a0, &a1);
	*out = a0;
}

INLINE void block_sums(const unsigned char *p, enum dli_dtype dt, int64_t lines, float shift,
		       int64_t pf, struct dli_stats_sums *o)
{
	struct lanes a;
	block_pass(p, dt, lines, shift, pf, &a);
	o->mn = min_lanes(a.mn);
	o->mx = max_lanes(a.mx);
	o->mnz = min_lanes(a.mnz);
	o->zc = count_lanes(a.zc);
	o->sd = sum_lanes(a.sd);
	o->sdd = sum_lanes(a.sdd);
	o->sa = sum_lanes(a.sa);
}

/* ---- 16-bit elements: extrema and counts in 16-bit lanes ----
 *
 * Zen 3 runs 256-bit integer operations on any of its four vector pipes, float adds, compares,
 * min and max on two, FMAs on the other two; the generic loop has seven float operations besides
 * its FMA per 8 elements. Here the extrema, the zero count and the least nonzero magnitude come
 * from integer operations on the 16-bit patterns, as in the AVX-512 file's bf16 loop (whose
 * comment tells how), and the float pipes do only the sums: per vector w of 16 bf16, 20
 * operations of which 9 float ones, against 24 and 18 in the generic loop (L2-resident, 0.30
 * TSC cycles an element against 1.02 on a Zen 3 EPYC, family 25 model 1). */

/* The largest of 16 signed (unsigned) 16-bit lanes, and the least of 16 unsigned ones, through
 * phminposuw (the least of 8 unsigned words). */
INLINE int max_epi16_lanes(__m256i v)
{
	__m128i m = _mm_max_epi16(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
	/* signed to unsigned order (flip the sign bit), then the largest as the least complement */
	m = _mm_xor_si128(m, _mm_set1_epi16(0x7fff));
	return (int16_t)(_mm_cvtsi128_si32(_mm_minpos_epu16(m)) ^ 0x7fff);
}

INLINE unsigned max_epu16_lanes(__m256i v)
{
	__m128i m = _mm_max_epu16(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
	return (uint16_t)~_mm_cvtsi128_si32(_mm_minpos_epu16(_mm_xor_si128(m, _mm_set1_epi16(-1))));
}

INLINE unsigned min_epu16_lanes(__m256i v)
{
	__m128i m = _mm_min_epu16(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
	return (uint16_t)_mm_cvtsi128_si32(_mm_minpos_epu16(m));
}

INLINE uint64_t count16_lanes(__m256i v)
{
	return count_lanes(_mm256_madd_epi16(v, _mm256_set1_epi16(1)));
}

/* A 16-bit pattern of dt (bf16 or f16) as a float. */
INLINE float bits16_float(unsigned bits, enum dli_dtype dt)
{
	if (dt == DLI_DTYPE_F16)
		return _cvtsh_ss((unsigned short)bits);
	uint32_t u = (uint32_t)bits << 16;
	float f;
	__builtin_memcpy(&f, &u, sizeof(f));
	return f;
}

/* Extrema from the lanes' reductions (see stats-avx512.c's block_sums_bf16): smax, the largest
 * element whose sign is clear (negative when there is none); umax, the negative of largest
 * magnitude when one is there (below 0x8000 when none); mnz, the least nonzero magnitude. */
INLINE void extrema16(int smax, unsigned umax, float mnz, uint64_t zc, enum dli_dtype dt, float *mn,
		      float *mx)
{
	*mx = smax >= 0 ? bits16_float((unsigned)smax, dt) : zc ? -0.0f : -mnz;
	*mn = umax >= 0x8000 ? bits16_float(umax, dt) : zc ? 0.0f : mnz;
}

/* The same for f32 in 32-bit lanes: smax, umax and umin (the least magnitude - 1, +-0 wrapped
 * to the top) reduced across lanes, and the extrema and least nonzero magnitude they give. */
INLINE void extrema32(__m256i smax, __m256i umax, __m256i umin, uint64_t zc, float *mn, float *mx,
		      float *mnz)
{
	int32_t l[8];
	int32_t sm = INT32_MIN;
	uint32_t uu = 0, mu = 0xffffffffu, u;
	_mm256_storeu_si256((__m256i *)l, smax);
	for (int i = 0; i < 8; i++)
		sm = l[i] > sm ? l[i] : sm;
	_mm256_storeu_si256((__m256i *)l, umax);
	for (int i = 0; i < 8; i++)
		uu = (uint32_t)l[i] > uu ? (uint32_t)l[i] : uu;
	_mm256_storeu_si256((__m256i *)l, umin);
	for (int i = 0; i < 8; i++)
		mu = (uint32_t)l[i] < mu ? (uint32_t)l[i] : mu;
	u = mu + 1;
	__builtin_memcpy(mnz, &u, sizeof(*mnz));
	if (mu == 0xffffffffu)
		*mnz = INFINITY;
	if (sm >= 0)
		__builtin_memcpy(mx, &sm, sizeof(*mx));
	else
		*mx = zc ? -0.0f : -*mnz;
	if (uu >= 0x80000000u)
		__builtin_memcpy(mn, &uu, sizeof(*mn));
	else
		*mn = zc ? 0.0f : *mnz;
}

/* f32: extrema and counts as bf16 above, in 32-bit integer lanes, and the sums in double lanes,
 * so that a tensor's moments are those of a double loop (to ~1e-16 a term) wherever its blocks
 * begin: shards of a tensor and the tensor in one call agree to 1e-12 and better (tests/mpi).
 * Each half of a 32-byte load converts exactly to four doubles (vcvtps2pd from memory). Around a
 * shift of 0 the deviations are the elements themselves: 10 double operations per 8 elements (2
 * conversions, and per 4 doubles |x|, the adds of x and |x| in pairs into the sums, the square),
 * against 4 with float sums; a nonzero shift (data whose mean is far from 0 against its spread,
 * where sum x^2 - n mean^2 would cancel) adds the subtraction, 2 more. The integer side takes 4
 * operations (|x|, its least, the two extrema) where a block holds no zero, 7 where it counts
 * zeros (below), so a zero-free block costs 14 where float sums cost 11.
 * Four double sums, not more, so that no accumulator is spilled (a spill puts a store and a
 * reload into its chain); the squares alternate between two, for the FMA latency. */
#define F32_NEAR 16.0 /* mean^2 / var up to which f32's double sums need no shift (4 bits lost) */

struct lanes32 {
	__m256i smax, umax, umin, zc;
};

struct sums32 {
	__m256d sa, sd, sdd[2];
};

/* zeros: count the zeros, and keep them out of the least magnitude (u = |x| - 1 wraps +-0 to
 * the top); else the least |x| itself, which is 0 exactly when the block holds a zero. */
INLINE void lanes32_add(struct lanes32 *a, struct sums32 *f, const unsigned char *q, int half,
			__m256d shift, bool shifted, bool zeros)
{
	const __m256d absmask = _mm256_castsi256_pd(_mm256_set1_epi64x(0x7fffffffffffffffll));
	__m256i w = _mm256_loadu_si256((const __m256i *)q);
	__m256i aw = _mm256_and_si256(w, _mm256_set1_epi32(0x7fffffff));
	a->smax = _mm256_max_epi32(a->smax, w);
	a->umax = _mm256_max_epu32(a->umax, w);
	if (zeros) {
		__m256i u = _mm256_add_epi32(aw, _mm256_set1_epi32(-1));
		a->umin = _mm256_min_epu32(a->umin, u);
		a->zc = _mm256_add_epi32(a->zc, _mm256_srli_epi32(u, 31));
	} else {
		a->umin = _mm256_min_epu32(a->umin, aw);
	}
	__m256d x0 = _mm256_cvtps_pd(_mm_loadu_ps((const float *)q));
	__m256d x1 = _mm256_cvtps_pd(_mm_loadu_ps((const float *)q + 4));
	__m256d d0 = shifted ? _mm256_sub_pd(x0, shift) : x0;
	__m256d d1 = shifted ? _mm256_sub_pd(x1, shift) : x1;
	f->sa = _mm256_add_pd(f->sa, _mm256_add_pd(_mm256_and_pd(x0, absmask),
						   _mm256_and_pd(x1, absmask)));
	f->sd = _mm256_add_pd(f->sd, _mm256_add_pd(d0, d1));
	f->sdd[half] = _mm256_fmadd_pd(d1, d1, _mm256_fmadd_pd(d0, d0, f->sdd[half]));
}

/* Returns false, having filled nothing, when zeros is false and the block holds a zero. Each line
 * prefetches the bytes DLI_PREFETCH_BYTES on, as the contiguous pass does; the last
 * DLI_PREFETCH_BYTES of the block at +tail, where those bytes lie (block()). */
INLINE bool f32_pass(const unsigned char *p, int64_t lines, float shift, bool shifted, bool zeros,
		     int64_t tail, struct dli_stats_sums *o)
{
	const int64_t near = lines - DLI_PREFETCH_BYTES / LINE;
	const __m256d vshift = _mm256_set1_pd(shift);
	struct lanes32 a = {
		.smax = _mm256_set1_epi32(INT32_MIN), .umax = _mm256_setzero_si256(),
		.umin = _mm256_set1_epi32(-1), .zc = _mm256_setzero_si256()};
	struct sums32 f = {_mm256_setzero_pd(), _mm256_setzero_pd(),
			   {_mm256_setzero_pd(), _mm256_setzero_pd()}};
	for (int64_t l = 0; l < lines; l++) {
		const unsigned char *q = p + l * LINE;
		_mm_prefetch((const char *)q + (l < near ? DLI_PREFETCH_BYTES : tail), _MM_HINT_T0);
		/* Without these, GCC 12 interleaves the two halves and spills two of the sums. */
		lanes32_add(&a, &f, q, 0, vshift, shifted, zeros);
		__asm__("" : "+x"(f.sa), "+x"(f.sd), "+x"(f.sdd[0]), "+x"(f.sdd[1]));
		lanes32_add(&a, &f, q + 32, 1, vshift, shifted, zeros);
		__asm__("" : "+x"(f.sa), "+x"(f.sd), "+x"(f.sdd[0]), "+x"(f.sdd[1]));
	}
	if (!zeros) {
		/* No zero: the least |x| minus 1 is what the counting loop keeps. */
		__m256i zero = _mm256_cmpeq_epi32(a.umin, _mm256_setzero_si256());
		if (!_mm256_testz_si256(zero, zero))
			return false;
		a.umin = _mm256_add_epi32(a.umin, _mm256_set1_epi32(-1));
	}
	o->zc = count_lanes(a.zc);
	extrema32(a.smax, a.umax, a.umin, o->zc, &o->mn, &o->mx, &o->mnz);
	o->sd = sum_pd(f.sd);
	o->sdd = sum_pd(_mm256_add_pd(f.sdd[0], f.sdd[1]));
	o->sa = sum_pd(f.sa);
	return true;
}

/* zeros: whether to count zeros from the start (the previous block held some); a block that
 * turns out to hold one is read again (from L1) counting them. */
static void block_sums_f32(const unsigned char *p, int64_t lines, float shift, bool zeros,
			   int64_t tail, struct dli_stats_sums *o)
{
	if (shift == 0) {
		if (zeros || !f32_pass(p, lines, 0, false, false, tail, o))
			f32_pass(p, lines, 0, false, true, tail, o);
	} else {
		if (zeros || !f32_pass(p, lines, shift, true, false, tail, o))
			f32_pass(p, lines, shift, true, true, tail, o);
	}
}

struct lanes16 {
	__m256i smax, umax, umin, zc; /* 16-bit lanes */
	__m256 sa, sd, sdd, sdd2; /* sdd2: unshifted blocks only (lanes16_add) */
};

/* Seven accumulators and four constants, so that everything stays in the 16 registers: a spilled
 * accumulator would put a store and a reload into its dependency chain. zeros: count zeros, and
 * keep them out of the least magnitude (u = |x| - 1 wraps +-0 to the top; the zero count takes
 * the top bit of u, set only for +-0 since nonzero magnitudes are below 0x7fff, rather than a
 * compare against a zero register); else the least |x| itself, which is 0 exactly when the block
 * holds a zero (lanes16_block), three operations fewer: 14 a vector of 16 where there were 17.
 * That counts on Zen 1, which runs each 256-bit operation as two 128-bit halves: the loop alone
 * in L1 went from 10.9 to 8.8 cycles a vector, `bench stats` stats_bf16 on one thread from 6.4
 * to 7.0 GB/s (three alternating runs, a 13-14 GB/s read). shifted: whether the deviations are from `shift`; else from 0, the
 * elements themselves (see next_shift), which frees the shift's register for a second sum of
 * squares (sdd2, added to sdd at the block's end), each square one FMA: 17 operations instead
 * of 20, and 5 % faster on a 256 KiB tensor (L2) than one sum. */
INLINE void lanes16_add(struct lanes16 *a, __m256i w, __m256 shift, bool shifted, bool zeros)
{
	const __m256i hi = _mm256_set1_epi32((int)0xffff0000u);
	__m256i aw = _mm256_and_si256(w, _mm256_set1_epi16(0x7fff));
	a->smax = _mm256_max_epi16(a->smax, w);
	a->umax = _mm256_max_epu16(a->umax, w);
	if (zeros) {
		__m256i u = _mm256_add_epi16(aw, _mm256_set1_epi16(-1));
		a->umin = _mm256_min_epu16(a->umin, u);
		a->zc = _mm256_add_epi16(a->zc, _mm256_srli_epi16(u, 15));
	} else {
		a->umin = _mm256_min_epu16(a->umin, aw);
	}
	__m256 ax0 = _mm256_castsi256_ps(_mm256_slli_epi32(aw, 16));
	__m256 ax1 = _mm256_castsi256_ps(_mm256_and_si256(aw, hi));
	a->sa = _mm256_add_ps(a->sa, _mm256_add_ps(ax0, ax1));
	__m256 d0 = _mm256_castsi256_ps(_mm256_slli_epi32(w, 16));
	__m256 d1 = _mm256_castsi256_ps(_mm256_and_si256(w, hi));
	if (shifted) {
		d0 = _mm256_sub_ps(d0, shift);
		d1 = _mm256_sub_ps(d1, shift);
	}
	a->sd = _mm256_add_ps(a->sd, _mm256_add_ps(d0, d1));
	if (shifted) {
		a->sdd = _mm256_add_ps(a->sdd, _mm256_fmadd_ps(d0, d0, _mm256_mul_ps(d1, d1)));
	} else {
		a->sdd = _mm256_fmadd_ps(d0, d0, a->sdd);
		a->sdd2 = _mm256_fmadd_ps(d1, d1, a->sdd2);
	}
}

/* bf16 blocks are twice DLI_STATS_BLOCK, so that the block's end (reductions, checks, the merge
 * in double) comes half as often; each float lane still adds at most 2 * BLOCK16 / 32 terms,
 * and each 16-bit count lane at most BLOCK16 / 16. */
#define BLOCK16 (2 * DLI_STATS_BLOCK)

/* For a pass over a view's block of `bytes` that prefetches DLI_PREFETCH_BYTES ahead in the order
 * the view is read: the offset at which the block's last DLI_PREFETCH_BYTES prefetch, into the
 * next block, from pf (dli_runs_cursor_block's, runs-private.h); 0 where pf is. Against every
 * line prefetching at pf (a whole block ahead: 8 KiB, or 8 KiB and a row slice's gap), measured
 * on the AVX2 machine (Zen 3, 4 KiB pages) in six alternating rounds of `dlinspect bench stats
 * --only colblock,rowslice`, medians of the ratio to the read bandwidth, 1 / 2 threads:
 * stats_f32_colblock 0.78 / 0.78 -> 0.82 / 0.82, stats_f32_rowslice 0.81 / 0.80 -> 0.85 / 0.82,
 * stats_bf16_colblock 0.76 / 0.73 -> 0.80 / 0.79, stats_bf16_rowslice 0.76 / 0.75 -> 0.82 /
 * 0.81. */
INLINE int64_t runs_tail_pf(int64_t pf, int64_t bytes)
{
	return pf ? pf - bytes + DLI_PREFETCH_BYTES : 0;
}

/* Prefetches as f32_pass does. */
INLINE void lanes16_loop(const unsigned char *p, int64_t lines, __m256 vshift, bool shifted,
			 bool zeros, int64_t tail, struct lanes16 *a)
{
	const int64_t near = 2 * (lines - DLI_PREFETCH_BYTES / LINE);
	for (int64_t h = 0; h < 2 * lines; h++) {
		const unsigned char *q = p + h * 32;
		_mm_prefetch((const char *)q + (h < near ? DLI_PREFETCH_BYTES : tail), _MM_HINT_T0);
		lanes16_add(a, _mm256_loadu_si256((const __m256i *)q), vshift, shifted, zeros);
	}
}

/* One block's lanes, not reduced: deviations from `shift`, one loop for a shift of 0 (which needs
 * no subtraction) and one for any other; zeros as lanes16_add's. */
INLINE void lanes16_pass(const unsigned char *p, int64_t lines, float shift, bool zeros,
			 int64_t tail, struct lanes16 *a)
{
	*a = (struct lanes16){
		.smax = _mm256_set1_epi16((short)0x8000), .umax = _mm256_setzero_si256(),
		.umin = _mm256_set1_epi16(-1), .zc = _mm256_setzero_si256(),
		.sa = _mm256_setzero_ps(), .sd = _mm256_setzero_ps(), .sdd = _mm256_setzero_ps(),
		.sdd2 = _mm256_setzero_ps()};
	if (shift == 0) {
		lanes16_loop(p, lines, _mm256_setzero_ps(), false, zeros, tail, a);
		a->sdd = _mm256_add_ps(a->sdd, a->sdd2);
	} else {
		lanes16_loop(p, lines, _mm256_set1_ps(shift), true, zeros, tail, a);
	}
}

/* One block's lanes, with its least magnitude as |x| - 1 and its zeros counted, as the counting
 * pass keeps them. zeros: count from the start (the block before held a zero); else a block that
 * turns out to hold one is read again (from L1) counting them. Returns whether it holds one. */
INLINE bool lanes16_block(const unsigned char *p, int64_t lines, float shift, bool zeros,
			  int64_t tail, struct lanes16 *a)
{
	if (!zeros) {
		lanes16_pass(p, lines, shift, false, tail, a);
		__m256i z = _mm256_cmpeq_epi16(a->umin, _mm256_setzero_si256());
		if (_mm256_testz_si256(z, z)) {
			a->umin = _mm256_add_epi16(a->umin, _mm256_set1_epi16(-1));
			return false;
		}
	}
	lanes16_pass(p, lines, shift, true, tail, a);
	return !_mm256_testz_si256(a->zc, a->zc);
}

/* o's extrema, least nonzero magnitude and zero count (zc) from bf16 extrema lanes as struct
 * lanes16 keeps them. */
INLINE void extrema16_sums(__m256i smax, __m256i umax, __m256i umin, uint64_t zc,
			   struct dli_stats_sums *o)
{
	unsigned um = min_epu16_lanes(umin);
	o->zc = zc;
	o->mnz = um == 0xffff ? INFINITY : bits16_float(um + 1, DLI_DTYPE_BF16);
	extrema16(max_epi16_lanes(smax), max_epu16_lanes(umax), o->mnz, zc, DLI_DTYPE_BF16, &o->mn,
		  &o->mx);
}

static void block_sums_bf16(const unsigned char *p, int64_t lines, float shift, bool zeros,
			    int64_t tail, struct dli_stats_sums *o)
{
	struct lanes16 a;
	lanes16_block(p, lines, shift, zeros, tail, &a);
	extrema16_sums(a.smax, a.umax, a.umin, count16_lanes(a.zc), o);
	o->sd = sum_lanes(a.sd);
	o->sdd = sum_lanes(a.sdd);
	o->sa = sum_lanes(a.sa);
}

/* ---- Blocks holding NaN or infinities: counts and extrema only ----
 *
 * In such a block every sum (sum, sum |x|, sum x^2 and the deviations' sums) is NaN or infinite
 * whatever the finite elements add, and which one follows from the counts and extrema alone: NaN
 * when the block holds a NaN, or both infinities; else the infinity it holds (+inf for the sums of
 * magnitudes and squares). So such a block needs no float arithmetic at all: one integer pass
 * over its bit patterns (the magnitudes' bits order as the magnitudes do) gives the counts of
 * NaN, infinities and zeros, the extrema without NaN, and the least nonzero magnitude, exactly.
 * That keeps tensors full of NaN or infinities, the ones this tool exists to catch, at the speed of
 * clean ones. Elements of 16 bits (bf16, f16) and 32 (f32); FP8 blocks go to the double lanes. */
struct nf_counts {
	uint64_t n, nan, inf, zeros;
	float mn, mx, mnz;
};

/* Fills *r from *c when the block holds NaN or an infinity, and returns whether it did. */
INLINE bool nf_record(const struct nf_counts *c, struct dli_stats_record *r)
{
	if (!c->nan && !c->inf)
		return false;
	bool both = c->mx == INFINITY && c->mn == -INFINITY;
	double s = c->nan || both ? NAN : c->mx == INFINITY ? INFINITY : -INFINITY;
	double m = c->nan ? NAN : INFINITY;
	struct dli_stats_dblock b = {
		.n = c->n, .nan = c->nan, .inf = c->inf, .zeros = c->zeros,
		.min = c->mn, .max = c->mx, .min_nonzero_abs = c->mnz,
		.shift = 0, .sd = s, .sdd = m, .sum_abs = m, .sum_sq = m};
	dli_stats_dblock_record(&b, SMALL, LARGE, r);
	return true;
}

/* 16-bit elements (dt bf16 or f16; inf16 the bits of +inf), each lane from u = |x| - 1 (+-0
 * wrapped to 0xffff, negative as a signed number) where it can, to keep the loop's constants
 * few: NaN lanes, found by u above inf16 - 1, become the neutral value of each reduction (-1 for
 * the signed max, whose "none" is any negative value; 0 for the unsigned one, 0xffff for u's
 * least); NaN and infinities are counted together (inf is that count less the NaN), since the
 * finite sum below needs the mask of both anyway; zeros by u's top bit.
 *
 * finite_sq, when set: where a bf16 block's sum of x^2 over its finite elements goes, for the
 * FP8 compares, which leave NaN and infinities out of their x_sq (fp8-private.h) and are spared
 * summing it where they are given it (dli_cpu_stats_finite_sq). Those elements' magnitudes are
 * squared in float lanes (exact: 8 significant bits squared fit float's 24), two sums of n / 16
 * terms a lane (the clean pass's bf16 lanes add as many pairs), added in double at the block's
 * end. The range check is on that sum S, not on the largest finite magnitude as the clean pass's
 * (block()), which would cost one more operation and one more accumulator: S is trusted in
 * [SMALL^2, LARGE^2] (no square overflowed, and those that fell below float's normals, n at
 * most, lost less than n 2^-150 in all, under 2^-37 of S), and where it is 0 with no finite
 * element but +-0; else (magnitudes past float-square range, or all tiny) it is NaN, "not
 * known", and the compares sum x^2 themselves. f16 (whose compares sum x^2 anyway) gets NaN.
 * 5 vector operations per 16 elements on top of the counts' 14. */
INLINE bool nf_block16(const unsigned char *p, enum dli_dtype dt, int64_t n, int64_t pf,
		       struct dli_stats_record *r, double *finite_sq)
{
	const bool squares = finite_sq && dt == DLI_DTYPE_BF16;
	const unsigned inf16 = dt == DLI_DTYPE_F16 ? 0x7c00 : 0x7f80;
	const __m256i absmask = _mm256_set1_epi16(0x7fff), ones = _mm256_set1_epi16(-1);
	const __m256i below_inf = _mm256_set1_epi16((short)(inf16 - 1));
	const __m256i hi = _mm256_set1_epi32((int)0xffff0000u), zero = _mm256_setzero_si256();
	__m256i smax = ones, umax = zero, umin = ones, zc = zero, nanc = zero, nfc = zero;
	__m256 sq0 = _mm256_setzero_ps(), sq1 = _mm256_setzero_ps();
	for (int64_t i = 0; i < n; i += 16) {
		_mm_prefetch((const char *)p + 2 * i + pf, _MM_HINT_T0);
		__m256i w = _mm256_loadu_si256((const __m256i *)(p + 2 * i));
		__m256i aw = _mm256_and_si256(w, absmask);
		__m256i u = _mm256_add_epi16(aw, ones);
		__m256i nan = _mm256_cmpgt_epi16(u, below_inf);
		__m256i nonfinite = _mm256_cmpgt_epi16(aw, below_inf);
		smax = _mm256_max_epi16(smax, _mm256_or_si256(w, nan));
		umax = _mm256_max_epu16(umax, _mm256_andnot_si256(nan, w));
		umin = _mm256_min_epu16(umin, _mm256_or_si256(u, nan));
		zc = _mm256_add_epi16(zc, _mm256_srli_epi16(u, 15));
		nanc = _mm256_sub_epi16(nanc, nan);
		nfc = _mm256_sub_epi16(nfc, nonfinite);
		if (squares) {
			/* as bf16's clean lanes: even elements shifted up, odd ones masked */
			__m256i fa = _mm256_andnot_si256(nonfinite, aw);
			__m256 x0 = _mm256_castsi256_ps(_mm256_slli_epi32(fa, 16));
			__m256 x1 = _mm256_castsi256_ps(_mm256_and_si256(fa, hi));
			sq0 = _mm256_fmadd_ps(x0, x0, sq0);
			sq1 = _mm256_fmadd_ps(x1, x1, sq1);
		}
		/* Without this, GCC 12 keeps two accumulators in memory (a store and a reload in
		 * their chains) and copies others back each iteration. */
		__asm__("" : "+x"(smax), "+x"(umax), "+x"(umin), "+x"(zc), "+x"(nanc), "+x"(nfc),
			"+x"(sq0), "+x"(sq1));
	}
	struct nf_counts c = {.n = (uint64_t)n, .nan = count16_lanes(nanc),
			      .zeros = count16_lanes(zc)};
	c.inf = count16_lanes(nfc) - c.nan;
	unsigned um = min_epu16_lanes(umin);
	c.mnz = um == 0xffff ? INFINITY : bits16_float(um + 1, dt);
	extrema16(max_epi16_lanes(smax), max_epu16_lanes(umax), c.mnz, c.zeros, dt, &c.mn, &c.mx);
	if (squares) {
		double s = sum_lanes(sq0) + sum_lanes(sq1);
		bool known = s == 0 ? c.mnz == INFINITY /* no finite element but +-0 */
				    : s >= (double)SMALL * SMALL && s <= (double)LARGE * LARGE;
		*finite_sq = known ? s : NAN;
	} else if (finite_sq) {
		*finite_sq = NAN;
	}
	return nf_record(&c, r);
}

INLINE bool nf_block32(const unsigned char *p, int64_t n, int64_t pf, struct dli_stats_record *r)
{
	const __m256i absmask = _mm256_set1_epi32(0x7fffffff), vinf = _mm256_set1_epi32(0x7f800000);
	const __m256i low = _mm256_set1_epi32(INT32_MIN), zero = _mm256_setzero_si256();
	__m256i smax = low, umax = zero, umin = _mm256_set1_epi32(-1), zc = zero, nanc = zero,
		infc = zero;
	for (int64_t i = 0; i < n; i += 8) {
		_mm_prefetch((const char *)p + 4 * i + pf, _MM_HINT_T0);
		__m256i w = _mm256_loadu_si256((const __m256i *)(p + 4 * i));
		__m256i aw = _mm256_and_si256(w, absmask);
		__m256i nan = _mm256_cmpgt_epi32(aw, vinf);
		smax = _mm256_max_epi32(smax, _mm256_blendv_epi8(w, low, nan));
		umax = _mm256_max_epu32(umax, _mm256_andnot_si256(nan, w));
		umin = _mm256_min_epu32(umin, _mm256_or_si256(_mm256_add_epi32(aw,
			_mm256_set1_epi32(-1)), nan));
		zc = _mm256_sub_epi32(zc, _mm256_cmpeq_epi32(aw, zero));
		nanc = _mm256_sub_epi32(nanc, nan);
		infc = _mm256_sub_epi32(infc, _mm256_cmpeq_epi32(aw, vinf));
	}
	struct nf_counts c = {.n = (uint64_t)n, .nan = count_lanes(nanc), .inf = count_lanes(infc),
			      .zeros = count_lanes(zc)};
	extrema32(smax, umax, umin, c.zeros, &c.mn, &c.mx, &c.mnz);
	return nf_record(&c, r);
}

/* Whether the block (n a multiple of a line's elements) holds NaN or an infinity; then *r is its
 * record, and *finite_sq (when set) its sum of x^2 over the finite elements, NaN where not known
 * (see nf_block16; f32, whose compares sum x^2 themselves, is not summed). Always false for the
 * FP8 dtypes, which leave such blocks to the double lanes. */
INLINE bool nf_block(const unsigned char *p, enum dli_dtype dt, int64_t n, int64_t pf,
		     struct dli_stats_record *r, double *finite_sq)
{
	switch (dt) {
	case DLI_DTYPE_F32:
		if (finite_sq)
			*finite_sq = NAN;
		return nf_block32(p, n, pf, r);
	case DLI_DTYPE_BF16: return nf_block16(p, DLI_DTYPE_BF16, n, pf, r, finite_sq);
	case DLI_DTYPE_F16: return nf_block16(p, DLI_DTYPE_F16, n, pf, r, finite_sq);
	default: return false;
	}
}

/* The AVX-512 path's way with such blocks: the record only, no finite sum. */
bool dli_stats_nonfinite_block_avx2(const void *p, enum dli_dtype dt, int64_t n, int64_t pf,
				    struct dli_stats_record *r)
{
	return (dt == DLI_DTYPE_BF16 || dt == DLI_DTYPE_F16) && nf_block(p, dt, n, pf, r, NULL);
}

/* ---- Blocks the float lanes cannot take: double lanes (see stats-avx512.c) ---- */
struct dlanes {
	__m256 mn, mx, mnz;
	__m256i zc;
	__m256d sa, sq, sd, sdd;
	uint64_t nan, inf;
};

/* full: every term; else only sd and sdd (a second pass around a better shift). */
INLINE void dlanes_add(struct dlanes *a, __m256 x, __m256d shift, bool full)
{
	const __m256d absmask = _mm256_castsi256_pd(_mm256_set1_epi64x(0x7fffffffffffffffll));
	__m256d h[2] = {_mm256_cvtps_pd(_mm256_castps256_ps128(x)),
			_mm256_cvtps_pd(_mm256_extractf128_ps(x, 1))};
	for (int k = 0; k < 2; k++) {
		__m256d d = _mm256_sub_pd(h[k], shift);
		a->sd = _mm256_add_pd(a->sd, d);
		a->sdd = _mm256_fmadd_pd(d, d, a->sdd);
		if (full) {
			a->sa = _mm256_add_pd(a->sa, _mm256_and_pd(h[k], absmask));
			a->sq = _mm256_fmadd_pd(h[k], h[k], a->sq);
		}
	}
	if (!full)
		return;
	/* As lanes_add: NaN elements leave the extrema alone. */
	const __m256 absmask_ps = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
	__m256 ab = _mm256_and_ps(x, absmask_ps);
	__m256 z = _mm256_cmp_ps(x, _mm256_setzero_ps(), _CMP_EQ_OQ);
	a->mn = _mm256_min_ps(x, a->mn);
	a->mx = _mm256_max_ps(x, a->mx);
	a->zc = _mm256_sub_epi32(a->zc, _mm256_castps_si256(z));
	a->mnz = _mm256_min_ps(_mm256_blendv_ps(ab, _mm256_set1_ps(INFINITY), z), a->mnz);
	a->nan += (uint64_t)__builtin_popcount((unsigned)_mm256_movemask_ps(
		_mm256_cmp_ps(x, x, _CMP_UNORD_Q)));
	a->inf += (uint64_t)__builtin_popcount((unsigned)_mm256_movemask_ps(
		_mm256_cmp_ps(ab, _mm256_set1_ps(INFINITY), _CMP_EQ_OQ)));
}

INLINE void dpass(const unsigned char *p, enum dli_dtype dt, int64_t lines, double shift, bool full,
		  int64_t pf, struct dlanes *a)
{
	const __m256d vshift = _mm256_set1_pd(shift);
	__m256 v[8];
	a->sd = a->sdd = _mm256_setzero_pd();
	if (full) {
		a->mn = a->mnz = _mm256_set1_ps(INFINITY);
		a->mx = _mm256_set1_ps(-INFINITY);
		a->zc = _mm256_setzero_si256();
		a->sa = a->sq = _mm256_setzero_pd();
		a->nan = a->inf = 0;
	}
	for (int64_t l = 0; l < lines; l++) {
		const unsigned char *q = p + l * LINE;
		if (full) /* the block may come from memory: see block() */
			_mm_prefetch((const char *)q + pf, _MM_HINT_T0);
		int nv = load_line(q, dt, v);
		for (int k = 0; k < nv; k++)
			dlanes_add(a, v[k], vshift, full);
	}
}

/* Returns whether the float lanes could not have taken the block. */
INLINE bool block_double(const unsigned char *p, enum dli_dtype dt, int64_t n, float fshift,
			 int64_t pf, struct dli_stats_record *r)
{
	const int64_t lines = n / (LINE / (int64_t)dli_dtype_size(dt));
	double dn = (double)n, shift = fshift, sd, sdd;
	struct dlanes a;
	dpass(p, dt, lines, shift, true, pf, &a);
	sd = sum_pd(a.sd);
	sdd = sum_pd(a.sdd);
	/* As in block(); never taken when sd is NaN or infinite (then m2 is NaN either way). */
	if (sd * sd / dn > sdd - sd * sd / dn) {
		shift += sd / dn;
		dpass(p, dt, lines, shift, false, 0, &a);
		sd = sum_pd(a.sd);
		sdd = sum_pd(a.sdd);
	}
	struct dli_stats_dblock b = {
		.n = (uint64_t)n, .nan = a.nan, .inf = a.inf, .zeros = count_lanes(a.zc),
		.min = min_lanes(a.mn), .max = max_lanes(a.mx), .min_nonzero_abs = min_lanes(a.mnz),
		.shift = shift, .sd = sd, .sdd = sdd, .sum_abs = sum_pd(a.sa), .sum_sq = sum_pd(a.sq)};
	return dli_stats_dblock_record(&b, SMALL, LARGE, r);
}

/* Not inlined into each instance of block(): a rare path, one copy per dtype. */
__attribute__((noinline)) static bool block_rare(const unsigned char *p, enum dli_dtype dt, int64_t n,
						  float shift, int64_t pf, struct dli_stats_record *r)
{
	switch (dt) {
	case DLI_DTYPE_F32: return block_double(p, DLI_DTYPE_F32, n, shift, pf, r);
	case DLI_DTYPE_BF16: return block_double(p, DLI_DTYPE_BF16, n, shift, pf, r);
	case DLI_DTYPE_F16: return block_double(p, DLI_DTYPE_F16, n, shift, pf, r);
	case DLI_DTYPE_F8E4M3: return block_double(p, DLI_DTYPE_F8E4M3, n, shift, pf, r);
	case DLI_DTYPE_F8E5M2: return block_double(p, DLI_DTYPE_F8E5M2, n, shift, pf, r);
	default: dli_stats_block_scalar(p, dt, n, r); return true;
	}
}

/* Which way a block went, for the next one: blocks of one kind come in stretches. */
enum kind {
	CLEAN,     /* float lanes */
	ZEROS,     /* float lanes, f32 or bf16 with zeros: the next block counts them from the start */
	NONFINITE, /* NaN or infinities: the integer pass (nf_block) */
	EXTREME,   /* the double lanes: magnitudes the float lanes cannot take, or FP8 NaN/inf */
};

/* finite_sq as block()'s. */
INLINE enum kind block_odd_of(const unsigned char *p, enum dli_dtype dt, int64_t n, float shift,
			      int64_t pf, struct dli_stats_record *r, double *finite_sq)
{
	if (nf_block(p, dt, n, pf, r, finite_sq))
		return NONFINITE;
	enum kind k = block_rare(p, dt, n, shift, pf, r) ? EXTREME : CLEAN;
	if (finite_sq)
		*finite_sq = r->sum_sq;
	return k;
}

/* Also not inlined, for the same reason; one copy with the finite sum (nonnull: its squares are
 * then no branch in the integer pass's loop) and one without (a view's pass). */
__attribute__((noinline, nonnull)) static enum kind
block_odd_finite(const unsigned char *p, enum dli_dtype dt, int64_t n, float shift, int64_t pf,
		 struct dli_stats_record *r, double *finite_sq)
{
	return block_odd_of(p, dt, n, shift, pf, r, finite_sq);
}

__attribute__((noinline)) static enum kind block_odd_plain(const unsigned char *p,
							   enum dli_dtype dt, int64_t n,
							   float shift, int64_t pf,
							   struct dli_stats_record *r)
{
	return block_odd_of(p, dt, n, shift, pf, r, NULL);
}

INLINE enum kind block_odd(const unsigned char *p, enum dli_dtype dt, int64_t n, float shift,
			   int64_t pf, struct dli_stats_record *r, double *finite_sq)
{
	return finite_sq ? block_odd_finite(p, dt, n, shift, pf, r, finite_sq)
			 : block_odd_plain(p, dt, n, shift, pf, r);
}

/* n: a positive multiple of the elements in a line; shift: a guess at the block's mean. prev: how
 * the previous block went; after a NONFINITE or EXTREME one, this one goes straight to the same
 * path (in data full of NaN, the float pass would be wasted on every block), and back to the
 * float lanes when it finds none. pf: how far ahead of each line the first pass over the block,
 * whichever path takes it, prefetches (DLI_PREFETCH_BYTES; for a view, where its next bytes are:
 * runs-private.h); the integer pass needs it as much as the float one, since in data full of NaN
 * it reads every block from memory, and a view's runs start where no hardware prefetcher looks.
 * tail: the f32 and bf16 float passes prefetch DLI_PREFETCH_BYTES ahead in the order they read,
 * the last DLI_PREFETCH_BYTES of the block at +tail (pf for a contiguous tensor; for a view,
 * runs_tail_pf).
 * finite_sq, when set: the block's sum of x^2 over its finite elements; its record's sum_sq where
 * that is finite, else the integer pass's sum (bf16) or NaN, not known. Returns how this block
 * went. */
INLINE enum kind block(const unsigned char *p, enum dli_dtype dt, int64_t n, float shift,
		       enum kind prev, int64_t pf, int64_t tail, struct dli_stats_record *r,
		       double *finite_sq)
{
	if (prev == NONFINITE && nf_block(p, dt, n, pf, r, finite_sq))
		return NONFINITE;
	if (prev == EXTREME)
		return block_odd(p, dt, n, shift, pf, r, finite_sq);
	const int64_t lines = n / (LINE / (int64_t)dli_dtype_size(dt));
	struct dli_stats_sums a;
	if (dt == DLI_DTYPE_BF16)
		block_sums_bf16(p, lines, shift, prev == ZEROS, tail, &a);
	else if (dt == DLI_DTYPE_F32)
		block_sums_f32(p, lines, shift, prev == ZEROS, tail, &a);
	else
		block_sums(p, dt, lines, shift, pf, &a);
	float amax = a.mx > -a.mn ? a.mx : -a.mn;
	double dn = (double)n, sd = a.sd, sdd = a.sdd, sa = a.sa;
	/* NaN or an infinity reaches the sums (the shift is finite and bounded, so nothing else
	 * can make them non-finite but squares past float range). f32's double sums take every
	 * finite magnitude: a float squared is far inside double's range. */
	if (!isfinite(sd + sdd + sa) ||
	    (dt != DLI_DTYPE_F32 && (amax > LARGE || (amax > 0 && amax < SMALL))))
		return block_odd(p, dt, n, shift, pf, r, finite_sq);
	/* A shift further from the mean than the spread (4 spreads for f32's double sums) would
	 * cost precision to cancellation: read the block again (from L1) around its own mean.
	 * Rare: the shift is the running mean of the chunk (or 0, for f32 data centred there), so
	 * this happens for non-stationary data or a first block. */
	double c = sd * sd / dn;
	if (c > (dt == DLI_DTYPE_F32 ? F32_NEAR : 1.0) * (sdd - c)) {
		shift = (float)((double)shift + sd / dn);
		if (dt == DLI_DTYPE_BF16)
			block_sums_bf16(p, lines, shift, a.zc > 0, tail, &a);
		else if (dt == DLI_DTYPE_F32)
			block_sums_f32(p, lines, shift, a.zc > 0, tail, &a);
		else
			block_sums(p, dt, lines, shift, pf, &a);
	}
	dli_stats_sums_record(&a, n, shift, r);
	if (finite_sq)
		*finite_sq = r->sum_sq;
	return (dt == DLI_DTYPE_F32 || dt == DLI_DTYPE_BF16) && a.zc ? ZEROS : CLEAN;
}

/* bf16's float lanes skip the subtraction of the shift where it is 0 (lanes16_add), which is
 * worth taking wherever the cancellation it brings is small: where the mean^2 is at most this
 * times the variance, the block's m2 = sum x^2 - (sum x)^2 / n keeps all but a third of a bit
 * (sum x^2 is at most 1.25 m2), and block()'s check (a read around the block's own mean past
 * mean^2 = variance) bounds it at one bit for blocks that stray. */
#define BF16_NEAR 0.25

/* Whether the first line at p (bf16), as a sample of its block, has a mean^2 within BF16_NEAR of
 * its variance (false when it holds NaN or an infinity). */
INLINE bool bf16_line_centred(const unsigned char *p)
{
	__m256 v[8];
	load_line(p, DLI_DTYPE_BF16, v);
	__m256 s = _mm256_add_ps(_mm256_add_ps(v[0], v[1]), _mm256_add_ps(v[2], v[3]));
	__m256 q = _mm256_fmadd_ps(v[0], v[0], _mm256_mul_ps(v[1], v[1]));
	q = _mm256_fmadd_ps(v[2], v[2], _mm256_fmadd_ps(v[3], v[3], q));
	const double n = LINE / 2;
	double mean = sum_lanes(s) / n, m2 = sum_lanes(q) - mean * mean * n;
	return mean * mean * n <= BF16_NEAR * m2;
}

/* The shift for a chunk's next block: the chunk's running mean, or where there is none (the first
 * block, or a mean that earlier blocks' NaN or infinities made non-finite) the block's first
 * element; 0 when that is not a finite number of moderate size either. f32 and bf16 take 0
 * where the data are centred near it (F32_NEAR, BF16_NEAR; bf16's first block by its first
 * line). */
INLINE float next_shift(const unsigned char *p, enum dli_dtype dt, const struct dli_stats_record *r)
{
	/* f32's double sums lose at most 4 bits to cancellation around 0 (see F32_NEAR) and skip
	 * a subtraction there; a first block tries 0 too, and is read again around its own mean
	 * when that is far from 0. */
	if (dt == DLI_DTYPE_F32 &&
	    (!r->count || r->mean * r->mean * (double)r->count <= F32_NEAR * r->m2))
		return 0;
	if (dt == DLI_DTYPE_BF16 &&
	    (r->count ? r->mean * r->mean * (double)r->count <= BF16_NEAR * r->m2
		      : bf16_line_centred(p)))
		return 0;
	if (r->count && fabs(r->mean) <= LARGE)
		return (float)r->mean;
	__m256 v[8];
	load_line(p, dt, v);
	float s = _mm256_cvtss_f32(v[0]);
	return fabsf(s) <= LARGE ? s : 0.0f;
}

/* ---- bf16 blocks in groups ----
 *
 * The end of a block (its lanes reduced, checked, turned into a record and merged in double) costs
 * about a tenth of the block's own pass on cache-resident data. So whole bf16 blocks go in groups
 * of up to GROUP16 around one shift:
 * each block's float lanes (the same 256 terms a lane as a block on its own) are widened into
 * double lanes and its extrema lanes folded into the group's, in vector registers, and only the
 * group is reduced and merged. The group's checks are those of a block: a block whose sums are not
 * finite (NaN, infinities, or squares past float range) ends the group before it and takes the
 * per-block path; a group whose magnitudes are out of the float lanes' range, or whose mean is
 * further from its shift than its spread, is read again block by block (from L2: a group is
 * 128 KiB). Measured (Zen 3, one thread, best of 3000 calls): a 256 KiB tensor resident in L2,
 * 16.5 -> 18.2 GB/s; from memory the pass is bound by the read either way. */
#define GROUP16 16

struct group16 {
	__m256i smax, umax, umin; /* 16-bit lanes, as struct lanes16's */
	__m256i zc;               /* 32-bit lanes */
	__m256d sd, sdd, sa;
	int64_t n;
};

INLINE void group16_init(struct group16 *g)
{
	g->smax = _mm256_set1_epi16((short)0x8000);
	g->umax = _mm256_setzero_si256();
	g->umin = _mm256_set1_epi16(-1);
	g->zc = _mm256_setzero_si256();
	g->sd = g->sdd = g->sa = _mm256_setzero_pd();
	g->n = 0;
}

INLINE __m256d widen_add(__m256d acc, __m256 v)
{
	return _mm256_add_pd(acc, _mm256_add_pd(_mm256_cvtps_pd(_mm256_castps256_ps128(v)),
						_mm256_cvtps_pd(_mm256_extractf128_ps(v, 1))));
}

/* Adds one block of n elements to the group, or returns false (adding nothing) when its sums are
 * not finite. */
INLINE bool group16_add(struct group16 *g, const struct lanes16 *a, int64_t n)
{
	__m256 t = _mm256_add_ps(a->sd, _mm256_add_ps(a->sdd, a->sa));
	if (_mm256_movemask_ps(_mm256_cmp_ps(_mm256_sub_ps(t, t), _mm256_setzero_ps(),
					     _CMP_EQ_OQ)) != 0xff)
		return false;
	g->smax = _mm256_max_epi16(g->smax, a->smax);
	g->umax = _mm256_max_epu16(g->umax, a->umax);
	g->umin = _mm256_min_epu16(g->umin, a->umin);
	g->zc = _mm256_add_epi32(g->zc, _mm256_madd_epi16(a->zc, _mm256_set1_epi16(1)));
	g->sd = widen_add(g->sd, a->sd);
	g->sdd = widen_add(g->sdd, a->sdd);
	g->sa = widen_add(g->sa, a->sa);
	g->n += n;
	return true;
}

/* The group's record, or false when it must be read again block by block (see above). */
INLINE bool group16_record(const struct group16 *g, float shift, struct dli_stats_record *r)
{
	struct dli_stats_sums o;
	double dn = (double)g->n;
	extrema16_sums(g->smax, g->umax, g->umin, count_lanes(g->zc), &o);
	o.sd = sum_pd(g->sd);
	o.sdd = sum_pd(g->sdd);
	o.sa = sum_pd(g->sa);
	float amax = o.mx > -o.mn ? o.mx : -o.mn;
	double c = o.sd * o.sd / dn;
	if (amax > LARGE || (amax > 0 && amax < SMALL) || c > o.sdd - c)
		return false;
	dli_stats_sums_record(&o, g->n, shift, r);
	return true;
}

/* The group of whole bf16 blocks from the chunk's element i on (p + 2 i, or the view's cursor c
 * there), merged into *r. Returns the blocks it took, and leaves the cursor after them. Where it
 * takes fewer than it read, *prev and *solo say how the next blocks go: a block whose sums were
 * not finite ends the group and goes straight to block_odd (*prev EXTREME); a group that failed
 * its checks takes none, and its blocks (*solo of them) go one at a time. May take none.
 * *prev on entry: CLEAN, or ZEROS where the block before held a zero (its first block then
 * counts them from the start, as block() does); a group that took its blocks leaves ZEROS when
 * its last held one. *sum_sq: the taken blocks' sum of x^2 (all finite). */
INLINE int64_t group_bf16(const unsigned char *p, const struct dli_cpu_runs *v, int64_t first,
			  int64_t i, int64_t n, struct dli_runs_cursor *c, unsigned char *scratch,
			  struct dli_stats_record *r, enum kind *prev, int64_t *solo, double *sum_sq)
{
	const int64_t bs = BLOCK16, nb = (n - i) / bs < GROUP16 ? (n - i) / bs : GROUP16;
	struct group16 g;
	struct lanes16 a;
	struct dli_stats_record b;
	float shift = 0;
	int64_t k = 0;
	bool zeros = *prev == ZEROS;
	group16_init(&g);
	for (; k < nb; k++) {
		int64_t pf = DLI_PREFETCH_BYTES;
		const unsigned char *q = v ? dli_runs_cursor_block(c, bs, scratch, &pf)
					   : p + (size_t)(i + k * bs) * 2;
		if (k == 0)
			shift = next_shift(q, DLI_DTYPE_BF16, r);
		zeros = lanes16_block(q, bs / 32, shift, zeros, v ? runs_tail_pf(pf, bs * 2) : pf,
				      &a);
		if (!group16_add(&g, &a, bs))
			break;
	}
	const bool bad = k < nb;
	if (k == 0 || group16_record(&g, shift, &b)) {
		if (k) {
			dli_stats_merge(r, &b);
			*sum_sq = b.sum_sq;
		}
		*prev = bad ? EXTREME : zeros ? ZEROS : CLEAN;
	} else {
		*solo = k + bad;
		k = 0;
	}
	if (v && k < nb)
		dli_runs_cursor_init(c, v, first + i + k * bs);
	return k;
}

/* The blocks come from p, or, when v is set, from the view v's elements from `first` on (through
 * scratch where a block spans runs): the same blocks either way (kernels/cpu/runs-private.h).
 * finite_sq, when set: the chunk's sum of x^2 over its finite elements, the blocks' (block())
 * added in order as the merge adds their sum_sq (so it is r->sum_sq itself where that is finite);
 * not finite where a block's is not known. */
INLINE void chunk_from(const unsigned char *p, const struct dli_cpu_runs *v, int64_t first,
		       unsigned char *scratch, enum dli_dtype dt, int64_t n, struct dli_stats_record *r,
		       double *finite_sq)
{
	double fsq = 0, bsq;
	const size_t es = dli_dtype_size(dt);
	const int64_t per_line = LINE / (int64_t)es;
	const int64_t bs = dt == DLI_DTYPE_BF16 ? BLOCK16 : DLI_STATS_BLOCK;
	struct dli_stats_record b;
	enum kind prev = CLEAN;
	int64_t solo = 0; /* bf16 blocks to take one at a time (see group_bf16) */
	struct dli_runs_cursor c;
	if (v)
		dli_runs_cursor_init(&c, v, first);
	dli_stats_record_init(r);
	for (int64_t i = 0; i < n;) {
		if (dt == DLI_DTYPE_BF16 && (prev == CLEAN || prev == ZEROS) && !solo &&
		    n - i >= bs) {
			int64_t k = group_bf16(p, v, first, i, n, &c, scratch, r, &prev, &solo, &bsq);
			i += k * bs;
			if (k) {
				fsq += bsq;
				continue;
			}
		}
		int64_t m = n - i < bs ? n - i : bs;
		int64_t whole = m - m % per_line;
		int64_t pf = DLI_PREFETCH_BYTES;
		const unsigned char *q = v ? dli_runs_cursor_block(&c, m, scratch, &pf)
					   : p + (size_t)i * es;
		if (whole) {
			int64_t tail = v ? runs_tail_pf(pf, whole * (int64_t)es) : pf;
			prev = block(q, dt, whole, next_shift(q, dt, r), prev, pf, tail, &b,
				     finite_sq ? &bsq : NULL);
			dli_stats_merge(r, &b);
			if (finite_sq)
				fsq += bsq;
		}
		if (m > whole) {
			const unsigned char *tail = q + (size_t)whole * es;
			dli_stats_block_scalar(tail, dt, m - whole, &b);
			dli_stats_merge(r, &b);
			if (finite_sq)
				fsq += b.nan_count || b.inf_count
					       ? dli_stats_finite_sum_sq_scalar(tail, dt, m - whole)
					       : b.sum_sq;
		}
		solo -= solo > 0;
		i += bs;
	}
	if (finite_sq)
		*finite_sq = fsq;
}

INLINE void chunk(const unsigned char *p, enum dli_dtype dt, int64_t n, struct dli_stats_record *r,
		  double *finite_sq)
{
	chunk_from(p, NULL, 0, NULL, dt, n, r, finite_sq);
}

/* dli_cpu_stats_runs asks for no finite sum: a view's integer pass does not square. */
void dli_stats_runs_avx2(const struct dli_cpu_runs *v, int64_t first, int64_t n,
			 unsigned char *scratch, struct dli_stats_record *r)
{
	switch (v->dtype) {
	case DLI_DTYPE_F32:
		chunk_from(NULL, v, first, scratch, DLI_DTYPE_F32, n, r, NULL);
		break;
	case DLI_DTYPE_BF16:
		chunk_from(NULL, v, first, scratch, DLI_DTYPE_BF16, n, r, NULL);
		break;
	case DLI_DTYPE_F16:
		chunk_from(NULL, v, first, scratch, DLI_DTYPE_F16, n, r, NULL);
		break;
	case DLI_DTYPE_F8E4M3:
		chunk_from(NULL, v, first, scratch, DLI_DTYPE_F8E4M3, n, r, NULL);
		break;
	case DLI_DTYPE_F8E5M2:
		chunk_from(NULL, v, first, scratch, DLI_DTYPE_F8E5M2, n, r, NULL);
		break;
	default: dli_stats_record_init(r); break;
	}
}

void dli_stats_chunk_finite_avx2(const void *p, enum dli_dtype dt, int64_t n,
				 struct dli_stats_record *r, double *finite_sq)
{
	/* One instance per dtype, so each inner loop is straight-line code for its format. */
	*finite_sq = NAN;
	switch (dt) {
	case DLI_DTYPE_F32: chunk(p, DLI_DTYPE_F32, n, r, finite_sq); break;
	case DLI_DTYPE_BF16: chunk(p, DLI_DTYPE_BF16, n, r, finite_sq); break;
	case DLI_DTYPE_F16: chunk(p, DLI_DTYPE_F16, n, r, finite_sq); break;
	case DLI_DTYPE_F8E4M3: chunk(p, DLI_DTYPE_F8E4M3, n, r, finite_sq); break;
	case DLI_DTYPE_F8E5M2: chunk(p, DLI_DTYPE_F8E5M2, n, r, finite_sq); break;
	default: dli_stats_record_init(r); break;
	}
}

void dli_stats_chunk_avx2(const void *p, enum dli_dtype dt, int64_t n, struct dli_stats_record *r)
{
	double unused;
	dli_stats_chunk_finite_avx2(p, dt, n, r, &unused);
}
