/* The statistics pass with AVX2, FMA and F16C (compiled with those flags and chosen at run time by
 * stats.c). Same structure as the AVX-512 file (whose top comment tells it), eight lanes wide. */
#include <immintrin.h>
#include <math.h>
#include <stdbool.h>

#include "cpu-private.h"

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
		       struct lanes *out)
{
	const __m256 vshift = _mm256_set1_ps(shift);
	struct lanes a0, a1; /* separate variables, not an array: they must live in registers */
	__m256 v[8];
	lanes_init(&a0);
	lanes_init(&a1);
	for (int64_t l = 0; l < lines; l++) {
		const unsigned char *q = p + l * LINE;
		_mm_prefetch((const char *)q + DLI_PREFETCH_BYTES, _MM_HINT_T0);
		int nv = load_line(q, dt, v);
		for (int k = 0; k < nv; k += 2) {
			lanes_add(&a0, v[k], vshift);
			lanes_add(&a1, v[k + 1], vshift);
		}
	}
	lanes_combine(&a0, &a1);
	*out = a0;
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
		  struct dlanes *a)
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
			_mm_prefetch((const char *)q + DLI_PREFETCH_BYTES, _MM_HINT_T0);
		int nv = load_line(q, dt, v);
		for (int k = 0; k < nv; k++)
			dlanes_add(a, v[k], vshift, full);
	}
}

INLINE double sum_pd(__m256d v)
{
	__m128d u = _mm_add_pd(_mm256_castpd256_pd128(v), _mm256_extractf128_pd(v, 1));
	return _mm_cvtsd_f64(u) + _mm_cvtsd_f64(_mm_unpackhi_pd(u, u));
}

/* Returns whether the float lanes could not have taken the block. */
INLINE bool block_double(const unsigned char *p, enum dli_dtype dt, int64_t n, float fshift,
			 struct dli_stats_record *r)
{
	const int64_t lines = n / (LINE / (int64_t)dli_dtype_size(dt));
	double dn = (double)n, shift = fshift, sd, sdd;
	struct dlanes a;
	dpass(p, dt, lines, shift, true, &a);
	sd = sum_pd(a.sd);
	sdd = sum_pd(a.sdd);
	/* As in block(); never taken when sd is NaN or infinite (then m2 is NaN either way). */
	if (sd * sd / dn > sdd - sd * sd / dn) {
		shift += sd / dn;
		dpass(p, dt, lines, shift, false, &a);
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
						  float shift, struct dli_stats_record *r)
{
	switch (dt) {
	case DLI_DTYPE_F32: return block_double(p, DLI_DTYPE_F32, n, shift, r);
	case DLI_DTYPE_BF16: return block_double(p, DLI_DTYPE_BF16, n, shift, r);
	case DLI_DTYPE_F16: return block_double(p, DLI_DTYPE_F16, n, shift, r);
	case DLI_DTYPE_F8E4M3: return block_double(p, DLI_DTYPE_F8E4M3, n, shift, r);
	case DLI_DTYPE_F8E5M2: return block_double(p, DLI_DTYPE_F8E5M2, n, shift, r);
	default: dli_stats_block_scalar(p, dt, n, r); return true;
	}
}

/* n: a positive multiple of the elements in a line; shift: a guess at the block's mean. rare: the
 * previous block needed the double lanes, so this one goes straight to them. Returns whether
 * this block needed them. */
INLINE bool block(const unsigned char *p, enum dli_dtype dt, int64_t n, float shift, bool rare,
		  struct dli_stats_record *r)
{
	if (rare)
		return block_rare(p, dt, n, shift, r);
	const int64_t lines = n / (LINE / (int64_t)dli_dtype_size(dt));
	struct lanes a;
	block_pass(p, dt, lines, shift, &a);
	float fmn = min_lanes(a.mn), fmx = max_lanes(a.mx);
	float amax = fmx > -fmn ? fmx : -fmn;
	double dn = (double)n, sd = sum_lanes(a.sd), sdd = sum_lanes(a.sdd), sa = sum_lanes(a.sa);
	/* NaN or an infinity reaches the sums (the shift is finite and bounded, so nothing else
	 * can make them non-finite). */
	if (!isfinite(sd + sdd + sa) || amax > LARGE || (amax > 0 && amax < SMALL)) {
		return block_rare(p, dt, n, shift, r);
	}
	/* A shift further from the mean than the spread would cost precision to cancellation:
	 * read the block again (from L1) around its own mean. Rare: the shift is the running mean
	 * of the chunk, so this happens for non-stationary data or a first block. */
	double c = sd * sd / dn;
	if (c > sdd - c) {
		shift = (float)((double)shift + sd / dn);
		block_pass(p, dt, lines, shift, &a);
		sd = sum_lanes(a.sd);
		sdd = sum_lanes(a.sdd);
		c = sd * sd / dn;
	}
	uint64_t zeros = count_lanes(a.zc);
	double m2 = sdd - c;
	dli_stats_record_init(r);
	r->count = (uint64_t)n;
	r->zero_count = zeros;
	r->min = fmn;
	r->max = fmx;
	r->amax = amax;
	r->min_nonzero_abs = min_lanes(a.mnz);
	r->sum = dn * shift + sd;
	r->sum_abs = sa;
	r->mean = r->sum / dn;
	/* sum(d)^2 / n <= sum(d^2) in exact arithmetic; rounding may cross it when all are equal. */
	r->m2 = m2 < 0 ? 0 : m2;
	/* Every term is positive, so this sum of squares has no cancellation to fear. */
	r->sum_sq = r->m2 + dn * r->mean * r->mean;
	return false;
}

/* The shift for a chunk's next block: the chunk's running mean, or where there is none (the first
 * block, or a mean that earlier blocks' NaN or infinities made non-finite) the block's first
 * element; 0 when that is not a finite number of moderate size either. */
INLINE float next_shift(const unsigned char *p, enum dli_dtype dt, const struct dli_stats_record *r)
{
	if (r->count && fabs(r->mean) <= LARGE)
		return (float)r->mean;
	__m256 v[8];
	load_line(p, dt, v);
	float s = _mm256_cvtss_f32(v[0]);
	return fabsf(s) <= LARGE ? s : 0.0f;
}

INLINE void chunk(const unsigned char *p, enum dli_dtype dt, int64_t n, struct dli_stats_record *r)
{
	const size_t es = dli_dtype_size(dt);
	const int64_t per_line = LINE / (int64_t)es;
	struct dli_stats_record b;
	bool rare = false;
	dli_stats_record_init(r);
	for (int64_t i = 0; i < n; i += DLI_STATS_BLOCK) {
		int64_t m = n - i < DLI_STATS_BLOCK ? n - i : DLI_STATS_BLOCK;
		int64_t whole = m - m % per_line;
		if (whole) {
			const unsigned char *q = p + (size_t)i * es;
			rare = block(q, dt, whole, next_shift(q, dt, r), rare, &b);
			dli_stats_merge(r, &b);
		}
		if (m > whole) {
			dli_stats_block_scalar(p + (size_t)(i + whole) * es, dt, m - whole, &b);
			dli_stats_merge(r, &b);
		}
	}
}

void dli_stats_chunk_avx2(const void *p, enum dli_dtype dt, int64_t n, struct dli_stats_record *r)
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
