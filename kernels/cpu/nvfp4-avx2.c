/* NVFP4's row-wise compare with AVX2 (kernels/cpu/nvfp4.c has the rules and the scalar reference):
 * eight 1 x 16 blocks at a time, their amaxes in one vector (integer maxima of the magnitude bits)
 * and their E4M3 scales, multipliers and dequantization factors computed in its lanes by the scalar
 * rules' float operations (the E4M3 rounding by integer nearest-even on the dropped mantissa bits,
 * or on multiples of 2^-9 below 2^-6), then each block's elements eight a vector, as magnitudes
 * (x and its dequantized value share their sign): |x| * multiplier rounded to float, its E2M1
 * value by the float rounding trick (see elements), times the factor. The sums are in float
 * lanes over a group (16 terms a lane), of x and dq scaled by a power of two that brings the
 * group's largest magnitude near 1, then widened into double lanes, as the MXFP8 pass sums them
 * (within about 1e-6 of the scalar pass's double sums; see elements); sum x dq is derived from
 * the other three. Each group's scales are computed while the group before it is worked on. The
 * vector loop is a function with no call inside, so that the sums stay in registers; blocks
 * holding NaN or an infinity are left out of it and gathered, with a row's last whole blocks,
 * into groups of eight done after a segment of the row (NaN and the infinities masked out), a
 * row's last partial block by the scalar block; the global amax (when the caller does not give
 * it) has its own AVX2 pass.
 *
 * The pass is compute-bound at about 11 cycles per 8 elements on Zen 3 whatever the input width:
 * the elements about 7.3 (the counts 1.8 of them, the sum of x^2 0.65), each group's maxima and
 * scales 2.6, the widening 0.5, measured by leaving each out (docs/block-scaling.md, NVFP4
 * Performance); the FMAs hold more than their pipes, so operations removed elsewhere barely show.
 * Where the caller knows the sum of x^2 and the zeros (xs_known: bf16 only; f32, twice the bytes
 * an element, is well over its target), the groups leave the sum out, as MXFP8's fast steps do,
 * and count the zeros as underflows (nvfp4-private.h), 4 operations fewer per 8 elements. */
#include <float.h>
#include <math.h>
#include <immintrin.h>
#include <string.h>

#include "avx2-private.h"
#include "nvfp4-private.h"

static inline __m256 load8(const void *data, enum dli_dtype dtype, int64_t i)
{
	if (dtype == DLI_DTYPE_F32)
		return _mm256_loadu_ps((const float *)data + i);
	__m128i h = _mm_loadu_si128((const __m128i *)((const uint16_t *)data + i));
	return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

static inline float hmax(__m256 v)
{
	__m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
	m = _mm_max_ps(m, _mm_movehl_ps(m, m));
	m = _mm_max_ss(m, _mm_movehdup_ps(m));
	return _mm_cvtss_f32(m);
}

static inline double hsum(__m256d v)
{
	__m128d s = _mm_add_pd(_mm256_castpd256_pd128(v), _mm256_extractf128_pd(v, 1));
	return _mm_cvtsd_f64(_mm_add_sd(s, _mm_unpackhi_pd(s, s)));
}

float dli_nvfp4_amax_avx2(const void *data, enum dli_dtype dtype, int64_t i0, int64_t i1)
{
	const __m256 absmask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
	__m256 m0 = _mm256_setzero_ps(), m1 = _mm256_setzero_ps();
	float m;
	int64_t i = i0;

	/* max(a, m) is m when a is NaN: NaN left out, as fmaxf leaves it. The pass is a read of
	 * the tensor: prefetched as the read reference of `dlinspect bench stats` is. */
	const size_t sz = dtype == DLI_DTYPE_F32 ? 4 : 2;
	for (; i + 16 <= i1; i += 16) {
		/* 16 elements: one line of f32, half of one of bf16 */
		_mm_prefetch((const char *)data + (size_t)i * sz + DLI_PREFETCH_BYTES, _MM_HINT_T0);
		m0 = _mm256_max_ps(_mm256_and_ps(load8(data, dtype, i), absmask), m0);
		m1 = _mm256_max_ps(_mm256_and_ps(load8(data, dtype, i + 8), absmask), m1);
	}
	m = hmax(_mm256_max_ps(m0, m1));
	for (; i < i1; i++) {
		float a;
		if (dtype == DLI_DTYPE_F32) {
			a = fabsf(((const float *)data)[i]);
		} else {
			uint32_t u = (uint32_t)((const uint16_t *)data)[i] << 16;
			memcpy(&a, &u, sizeof(a));
			a = fabsf(a);
		}
		m = a > m ? a : m;
	}
	return m;
}

/* The E4M3 value (round to nearest-even, saturating) of v in [0, inf], eight lanes. */
static inline __m256 e4m3_round(__m256 v)
{
	v = _mm256_min_ps(v, _mm256_set1_ps(448.0f));
	__m256i u = _mm256_castps_si256(v);
	/* normal (>= 2^-6): three mantissa bits, nearest-even on the 20 bits dropped */
	__m256i odd = _mm256_and_si256(_mm256_srli_epi32(u, 20), _mm256_set1_epi32(1));
	__m256i rn = _mm256_and_si256(
		_mm256_add_epi32(_mm256_add_epi32(u, _mm256_set1_epi32(0x7ffff)), odd),
		_mm256_set1_epi32((int)0xfff00000u));
	/* subnormal: multiples of 2^-9 */
	__m256 sub = _mm256_mul_ps(
		_mm256_round_ps(_mm256_mul_ps(v, _mm256_set1_ps(512.0f)),
				_MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC),
		_mm256_set1_ps(1.0f / 512.0f));
	return _mm256_blendv_ps(_mm256_castsi256_ps(rn), sub,
				_mm256_cmp_ps(v, _mm256_set1_ps(0x1p-6f), _CMP_LT_OQ));
}

/* A block's 16 magnitudes as float bits in two vectors (lane order does not matter: the block's
 * terms are sums); bf16 by one load, the even elements shifted up and the odd ones masked. */
static inline void load_abs16(const char *data, enum dli_dtype dtype, int64_t i, __m256i a[2])
{
	const __m256i absmask = _mm256_set1_epi32(0x7fffffff);
	if (dtype == DLI_DTYPE_F32) {
		a[0] = _mm256_and_si256(_mm256_loadu_si256((const __m256i *)((const float *)data + i)),
					absmask);
		a[1] = _mm256_and_si256(
			_mm256_loadu_si256((const __m256i *)((const float *)data + i + 8)), absmask);
		return;
	}
	__m256i w = _mm256_loadu_si256((const __m256i *)((const uint16_t *)data + i));
	a[0] = _mm256_and_si256(_mm256_slli_epi32(w, 16), absmask);
	a[1] = _mm256_and_si256(w, _mm256_set1_epi32(0x7fff0000));
}

/* The running sums in double lanes, added to once a group. */
struct dsums {
	__m256d err, dqs, xs;
};

/* A group's sums in float lanes, of x and dq scaled by its power of two. */
struct fsums {
	__m256 err, dqs, xs;
};

/* The E2M1 rounding's constants (see elements), made in registers once a segment and hidden from
 * the compiler: otherwise it rebuilds them in every block from general registers by broadcasts,
 * which run on one pipe only on Zen 3. */
struct e2m1_constants {
	__m256 six;
	__m256i exponent; /* the exponent field's mask */
	__m256i one;      /* 1.0f's bits */
	__m256i shift;    /* 22 in the exponent field */
};

static inline __attribute__((always_inline)) void e2m1_constants_init(struct e2m1_constants *k)
{
	k->six = _mm256_set1_ps(6.0f);
	k->exponent = _mm256_set1_epi32(0x7f800000);
	k->one = _mm256_set1_epi32(127 << 23);
	k->shift = _mm256_set1_epi32(22 << 23);
	__asm__("" : "+x"(k->six), "+x"(k->exponent), "+x"(k->one), "+x"(k->shift));
}

/* Eight magnitudes m of one block, with its multiplier, its dequantization factor times f, and
 * the power of two f of its group: the E2M1 value r of m * enc (the scalar rules'
 * s = x * enc and |s|: the product's magnitude is the same), rounded by the float trick: add and
 * subtract C = 2^(max(exponent, 0) + 22), which rounds to one mantissa bit (steps of 0.5 below 2,
 * 1 up to 4, 2 up to 8) to nearest-even, after clamping to 6. Each tie lands on the code the
 * scalar comparisons give (0.25 -> 0, 0.75 -> 1, 1.25 -> 1, 1.75 -> 2, 2.5 -> 2, 3.5 -> 4,
 * 5 -> 4), and above 5 the clamp gives 6. dq f = r * (dqs f) is the scalar's e2m1_values[c] * dqs
 * times f (see block_scales). x and dq share their sign, so the terms are those of the
 * magnitudes. keep, when not NULL, marks the lanes compared; the others hold m = 0.
 *
 * The sums are of x f and dq f in float lanes: scaling by a power of two is exact, and keeps the
 * squares of the group's largest values near 1, far from float's overflow and underflow (x^2 of
 * data beyond 2^64 or below 2^-75 would leave float's range unscaled). x f - dq f is exact where
 * the two are within a factor of 2 or dq is 0 (nearly every element), so a term is rounded once,
 * by its FMA, and a lane adds 16 of them before they are widened: about 1e-6 relative. Terms of
 * blocks 2^75 below the group's largest magnitude vanish (below 2^-150 of the group's sum of
 * squares).
 *
 * Both counts share one register, so that the sums and the constants stay in registers too: an
 * overflow (|s| > 6, compared as integers: s is not negative and not NaN, so its bits order as
 * its values) adds 1 to both 16-bit halves of a lane, (r == 0) less (x == 0) adds to the whole
 * lane; the low half is then underflows plus overflows, the high half overflows (see
 * counts_widen). known (xs_known): x^2 is not summed and (r == 0) is counted whole, zeros too. */
static inline __attribute__((always_inline)) void
elements(__m256i mb, __m256 enc, __m256 dqs, __m256 f, const struct e2m1_constants *k,
	 __m256i *counts, struct fsums *sum, const __m256i *keep, bool known)
{
	const __m256 six = k->six;
	__m256 m = _mm256_castsi256_ps(mb);
	__m256 s = _mm256_mul_ps(m, enc);
	__m256 sc = _mm256_min_ps(s, six);
	__m256i e = _mm256_max_epi32(_mm256_and_si256(_mm256_castps_si256(sc), k->exponent),
				     k->one);
	__m256 c = _mm256_castsi256_ps(_mm256_add_epi32(e, k->shift));
	__m256 r = _mm256_sub_ps(_mm256_add_ps(sc, c), c);
	__m256 dq = _mm256_mul_ps(r, dqs);
	/* Lanes left out (keep): m is 0 there, so r is, but r * dqs is NaN for an infinite dqs. */
	if (keep)
		dq = _mm256_and_ps(dq, _mm256_castsi256_ps(*keep));
	__m256i rz = _mm256_cmpeq_epi32(_mm256_castps_si256(r), _mm256_setzero_si256());
	__m256i ov = _mm256_cmpgt_epi32(_mm256_castps_si256(s), _mm256_castps_si256(six));
	if (known) {
		*counts = _mm256_sub_epi16(_mm256_sub_epi32(*counts, rz), ov);
	} else {
		__m256i xz = _mm256_cmpeq_epi32(mb, _mm256_setzero_si256());
		/* one operation on the counts' chain, the rest beside it */
		*counts = _mm256_add_epi32(*counts,
					   _mm256_sub_epi16(_mm256_sub_epi32(xz, rz), ov));
	}
	/* m f - dq in one rounding, one operation fewer than xf - dq: m f is xf exactly */
	__m256 d = _mm256_fmsub_ps(m, f, dq);
	sum->err = _mm256_fmadd_ps(d, d, sum->err);
	sum->dqs = _mm256_fmadd_ps(dq, dq, sum->dqs);
	if (!known) {
		__m256 xf = _mm256_mul_ps(m, f);
		sum->xs = _mm256_fmadd_ps(xf, xf, sum->xs);
	}
}

static inline void fsums_reset(struct fsums *a)
{
	a->err = a->dqs = a->xs = _mm256_setzero_ps();
}

/* The float sums times 1 / f^2 (exact: a power of two) added into the double ones. */
static inline __attribute__((always_inline)) void fsums_widen(const struct fsums *a, double unscale,
							      struct dsums *sum)
{
	const __m256d u = _mm256_set1_pd(unscale);
	const __m256 v[3] = { a->err, a->dqs, a->xs };
	__m256d *w[3] = { &sum->err, &sum->dqs, &sum->xs };
	#pragma GCC unroll 8
	for (int k = 0; k < 3; k++) {
		*w[k] = _mm256_fmadd_pd(_mm256_cvtps_pd(_mm256_castps256_ps128(v[k])), u, *w[k]);
		*w[k] = _mm256_fmadd_pd(_mm256_cvtps_pd(_mm256_extractf128_ps(v[k], 1)), u, *w[k]);
	}
}

/* The power of two f that brings a largest magnitude (its float bits, finite) to [1, 4), as
 * f's exponent field (1 .. 254: f is never subnormal); unscale_of gives 1 / f^2 in double. */
static inline uint32_t scale_exponent(uint32_t max_bits)
{
	int e = 254 - (int)(max_bits >> 23);
	return (uint32_t)(e < 1 ? 1 : e);
}

static inline double unscale_of(uint32_t fe)
{
	uint64_t u = (uint64_t)(1023 + 2 * (127 - (int)fe)) << 52;
	double d;
	memcpy(&d, &u, sizeof(d));
	return d;
}

/* The underflows and overflows in the lanes of counts (see elements) into *t. A block adds at
 * most 2 to a lane's low half: it stays below 2^16 for a segment (SEGMENT groups of 8 blocks)
 * and the blocks gathered from it (at most as many), or a row's last whole blocks (fewer than
 * 8, and at most 7 gathered before them), after each of which this runs. */
static inline void counts_widen(__m256i counts, struct dli_block_terms *t)
{
	uint32_t u[8];
	_mm256_storeu_si256((__m256i *)u, counts);
	#pragma GCC unroll 8
	for (int k = 0; k < 8; k++) {
		t->under += (u[k] & 0xffff) - (u[k] >> 16);
		t->over += u[k] >> 16;
	}
}

static inline void dsums_reset(struct dsums *a)
{
	a->err = a->dqs = a->xs = _mm256_setzero_pd();
}

/* One whole block of finite values whose magnitudes are in a[2], into the float sums. */
static inline __attribute__((always_inline)) void
block16(const __m256i a[2], __m256 enc, __m256 dqs, __m256 f, const struct e2m1_constants *k,
	__m256i *counts, struct fsums *sum, bool known)
{
	elements(a[0], enc, dqs, f, k, counts, sum, NULL, known);
	elements(a[1], enc, dqs, f, k, counts, sum, NULL, known);
}

static inline double hmin_ps(__m256 v)
{
	__m128 m = _mm_min_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
	m = _mm_min_ps(m, _mm_movehl_ps(m, m));
	m = _mm_min_ss(m, _mm_movehdup_ps(m));
	return _mm_cvtss_f32(m);
}

/* Groups of eight blocks in a row segment (see rows) */
#define SEGMENT 64

/* What the vector groups have summed so far. */
struct state {
	struct dsums sum;
	__m256i counts; /* the underflows and overflows (see elements), widened per segment */
	__m256 lo, hi;  /* the scale range, in lanes (+inf / -inf while none) */
	uint64_t count;
	uint64_t zeros; /* those of the blocks blocks_masked takes */
};

/* The scalar rules' constants for one pass, in every lane. */
struct rule_constants {
	__m256 mult;  /* S_enc * float(1/6) */
	__m256 s_dec; /* float(1 / S_enc) */
	__m256 amax;
};

static inline struct rule_constants rule_constants_of(const struct nv_pass *ps)
{
	return (struct rule_constants){
		.mult = _mm256_set1_ps(ps->s_enc * (1.0f / 6.0f)),
		.s_dec = _mm256_set1_ps((float)(1.0 / (double)ps->s_enc)),
		.amax = _mm256_set1_ps(ps->amax),
	};
}

/* Eight blocks' E4M3 scales, multipliers (into enc) and dequantization factors (into dqs) from
 * their maxima bm (all but NaN: an infinity saturates the scale) by the scalar rules' float
 * operations in the lanes of one vector, the scale range over those of a nonzero scale and not
 * left out into *lo and *hi, the power of two f (see elements) from the largest of fm (the
 * blocks' largest finite magnitudes) into *factor and *unscale, the factors times f into dqs.
 *
 * r * (dqs f) is the scalar's dq = r * dqs, rounded, times f, exactly, when the pass's amax is
 * at least 2^-100 (dli_nvfp4_rows_avx2 asks for it) and at least every magnitude (it is the
 * data's: an infinity in the data makes it infinite): a nonzero scale is at least 2^-9, so dqs
 * is 0 or at least about amax 2^-20.4 and r * dqs, r >= 0.5, is 0 or a normal float; dqs f is
 * normal (at least 2^-20.4: the largest of fm, at most amax, times f is at least 1) and finite
 * where amax is; r * dqs cannot overflow where dqs is finite (dqs is at most FLT_MAX / 2688
 * then), and an infinite or NaN dqs (an infinite amax) stays so. The multiplication by f leaves
 * the elements' work. */
static inline __attribute__((always_inline)) void
block_scales(__m256 bm, __m256 fm, __m256 left_out, const struct rule_constants *k, __m256 *lo,
	     __m256 *hi, float enc[8], float dqs[8], float *factor, double *unscale)
{
	__m256 vs = e4m3_round(_mm256_mul_ps(bm, k->mult));
	__m256 ve = _mm256_min_ps(_mm256_div_ps(_mm256_set1_ps(1.0f), _mm256_mul_ps(vs, k->s_dec)),
				  _mm256_set1_ps(FLT_MAX));
	__m256 vd = _mm256_mul_ps(_mm256_mul_ps(vs, k->amax), _mm256_set1_ps(1.0f / 2688.0f));
	__m256 unused = _mm256_or_ps(_mm256_cmp_ps(vs, _mm256_setzero_ps(), _CMP_EQ_OQ), left_out);
	*lo = _mm256_min_ps(*lo, _mm256_blendv_ps(vd, _mm256_set1_ps(INFINITY), unused));
	*hi = _mm256_max_ps(*hi, _mm256_blendv_ps(vd, _mm256_set1_ps(-INFINITY), unused));
	/* each block's from memory: a broadcast load costs no vector pipe, a permute does */
	_mm256_storeu_ps(enc, ve);
	float gmax = hmax(fm);
	uint32_t gbits, fe;
	memcpy(&gbits, &gmax, sizeof(gbits));
	fe = scale_exponent(gbits);
	gbits = fe << 23;
	memcpy(factor, &gbits, sizeof(gbits));
	_mm256_storeu_ps(dqs, _mm256_mul_ps(vd, _mm256_broadcast_ss(factor)));
	*unscale = unscale_of(fe);
}

/* The eight blocks at p: their maxima (NaN and inf have the largest magnitude bits) and their
 * scales (block_scales). Returns the mask of the blocks holding NaN or an infinity, left out. */
static inline __attribute__((always_inline)) int
group_scales(const char *p, enum dli_dtype dtype, const struct rule_constants *k, __m256 *lo,
	     __m256 *hi, float enc[8], float dqs[8], float *factor, double *unscale)
{
	const size_t gbytes = 8 * DLI_NVFP4_BLOCK * (dtype == DLI_DTYPE_F32 ? 4 : 2);
	__m256i m[8];
	#pragma GCC unroll 8
	for (size_t b = 0; b < gbytes; b += 64)
		_mm_prefetch(p + b + DLI_PREFETCH_BYTES, _MM_HINT_T0);
	#pragma GCC unroll 8
	for (int j = 0; j < 8; j++) {
		__m256i a[2];
		load_abs16(p, dtype, j * DLI_NVFP4_BLOCK, a);
		m[j] = _mm256_max_epu32(a[0], a[1]);
	}
	__m256i amax = dli_avx2_hmax8(m);
	__m256 nf = _mm256_castsi256_ps(_mm256_cmpgt_epi32(amax, _mm256_set1_epi32(0x7f7fffff)));
	__m256 bm = _mm256_andnot_ps(nf, _mm256_castsi256_ps(amax));
	block_scales(bm, bm, nf, k, lo, hi, enc, dqs, factor, unscale);
	return _mm256_movemask_ps(nf);
}

/* n_groups groups of eight blocks from element i0 on, into *st, with no call inside: every vector
 * register is a caller's to save, so a call in this loop would keep the sums in memory. Each
 * group's scales are computed one group ahead, so that their chain of dependent operations (the
 * maxima, the E4M3 rounding, a division) runs while the previous group's elements are worked on
 * instead of holding them up. The groups' blocks holding NaN or an infinity are left out and
 * marked in bad_masks, one byte a group. known: see elements (xs_known). */
static inline __attribute__((always_inline)) void
segment(const struct nv_pass *ps, enum dli_dtype dtype, int64_t i0, int n_groups,
	struct state *st, uint8_t *bad_masks, bool known)
{
	const size_t gbytes = 8 * DLI_NVFP4_BLOCK * (dtype == DLI_DTYPE_F32 ? 4 : 2);
	const struct rule_constants k = rule_constants_of(ps);
	struct dsums sum = st->sum;
	__m256i counts = st->counts;
	uint64_t count = 0;
	const char *p = ps->data + (size_t)i0 * (gbytes / (8 * DLI_NVFP4_BLOCK));
	float enc[2][8], dqs[2][8], factor[2];
	double unscale[2];
	struct e2m1_constants e2m1;
	e2m1_constants_init(&e2m1);
	int bad = group_scales(p, dtype, &k, &st->lo, &st->hi, enc[0], dqs[0], &factor[0],
			       &unscale[0]);

	for (int g = 0; g < n_groups; g++, p += gbytes) {
		int next_bad = 0;
		if (g + 1 < n_groups)
			next_bad = group_scales(p + gbytes, dtype, &k, &st->lo, &st->hi,
						enc[(g + 1) & 1], dqs[(g + 1) & 1],
						&factor[(g + 1) & 1], &unscale[(g + 1) & 1]);
		bad_masks[g] = (uint8_t)bad;
		struct fsums fs;
		fsums_reset(&fs);
		__m256 f = _mm256_broadcast_ss(&factor[g & 1]);
		#pragma GCC unroll 8
		for (int j = 0; j < 8; j++) {
			if (bad >> j & 1)
				continue;
			__m256i a[2];
			__m256 ej = _mm256_broadcast_ss(&enc[g & 1][j]);
			__m256 dj = _mm256_broadcast_ss(&dqs[g & 1][j]);
			load_abs16(p, dtype, j * DLI_NVFP4_BLOCK, a);
			block16(a, ej, dj, f, &e2m1, &counts, &fs, known);
			count += DLI_NVFP4_BLOCK;
		}
		fsums_widen(&fs, unscale[g & 1], &sum);
		bad = next_bad;
	}
	st->sum = sum;
	st->counts = counts;
	st->count += count;
}

__attribute__((noinline)) static void segment_f32(const struct nv_pass *ps, int64_t i0, int n,
						  struct state *st, uint8_t *bad_masks)
{
	segment(ps, DLI_DTYPE_F32, i0, n, st, bad_masks, false);
}

__attribute__((noinline)) static void segment_bf16(const struct nv_pass *ps, int64_t i0, int n,
						   struct state *st, uint8_t *bad_masks)
{
	segment(ps, DLI_DTYPE_BF16, i0, n, st, bad_masks, false);
}

__attribute__((noinline)) static void segment_bf16_xs_known(const struct nv_pass *ps, int64_t i0,
							    int n, struct state *st,
							    uint8_t *bad_masks)
{
	segment(ps, DLI_DTYPE_BF16, i0, n, st, bad_masks, true);
}

/* The first n_groups of a segment's bad_masks that are not 0, as bits: found by a vector
 * comparison, since a branch on each group's byte would mispredict on each such group. */
static inline uint64_t groups_marked(const uint8_t bad_masks[SEGMENT], int n_groups)
{
	_Static_assert(SEGMENT == 64, "one bit a group in 64 bits");
	const __m256i zero = _mm256_setzero_si256();
	uint32_t lo = (uint32_t)_mm256_movemask_epi8(
		_mm256_cmpeq_epi8(_mm256_loadu_si256((const __m256i *)bad_masks), zero));
	uint32_t hi = (uint32_t)_mm256_movemask_epi8(
		_mm256_cmpeq_epi8(_mm256_loadu_si256((const __m256i *)(bad_masks + 32)), zero));
	uint64_t marked = ~((uint64_t)hi << 32 | lo);
	return n_groups < 64 ? marked & ((1ull << n_groups) - 1) : marked;
}

/* Up to eight whole blocks anywhere in the tensor, from elements at[0 .. n) on (the blocks holding
 * NaN or an infinity that the segments leave out, a row's last whole blocks), as one group: their
 * maxima in the lanes of one vector, NaN left out (an infinity saturates the scale, as the scalar
 * block takes it), their scales by block_scales (f from their largest finite magnitude), their
 * elements but NaN and the infinities compared, those lanes zeroed and left out. Gathered so that
 * the chain of dependent operations of the scales runs once for eight such blocks, not for each;
 * the elements are read a second time, from the cache. The counts go into st's (widened after
 * each segment and row), the zeros compared into st->zeros. */
static inline __attribute__((always_inline)) void
blocks_masked(const struct nv_pass *ps, enum dli_dtype dtype, const int64_t at[8], int n,
	      struct state *st)
{
	const __m256i inf = _mm256_set1_epi32(0x7f800000);
	const struct rule_constants k = rule_constants_of(ps);
	__m256i scale_max[8], finite_max = _mm256_setzero_si256(), counts = st->counts;
	float enc[8], dqs[8], factor;
	double unscale;
	struct e2m1_constants e2m1;
	struct fsums fs;
	uint64_t kept = 0;

	/* the lanes past n repeat block 0 (maxima are not changed by it), left out of the range */
	#pragma GCC unroll 8
	for (int j = 0; j < 8; j++) {
		__m256i a[2], s[2];
		load_abs16(ps->data, dtype, at[j < n ? j : 0], a);
		#pragma GCC unroll 2
		for (int h = 0; h < 2; h++) {
			s[h] = _mm256_andnot_si256(_mm256_cmpgt_epi32(a[h], inf), a[h]);
			finite_max = _mm256_max_epu32(
				finite_max, _mm256_and_si256(_mm256_cmpgt_epi32(inf, a[h]), a[h]));
		}
		scale_max[j] = _mm256_max_epu32(s[0], s[1]);
	}
	__m256 absent = _mm256_castsi256_ps(_mm256_cmpgt_epi32(
		_mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7), _mm256_set1_epi32(n - 1)));
	block_scales(_mm256_castsi256_ps(dli_avx2_hmax8(scale_max)),
		     _mm256_castsi256_ps(finite_max), absent, &k, &st->lo, &st->hi, enc, dqs,
		     &factor, &unscale);
	e2m1_constants_init(&e2m1);
	fsums_reset(&fs);
	const __m256 f = _mm256_broadcast_ss(&factor);
	for (int j = 0; j < n; j++) {
		__m256i a[2];
		const __m256 ej = _mm256_broadcast_ss(&enc[j]), dj = _mm256_broadcast_ss(&dqs[j]);
		load_abs16(ps->data, dtype, at[j], a);
		#pragma GCC unroll 2
		for (int h = 0; h < 2; h++) {
			__m256i keep = _mm256_cmpgt_epi32(inf, a[h]);
			__m256i zero = _mm256_cmpeq_epi32(a[h], _mm256_setzero_si256());
			kept += (uint64_t)__builtin_popcount(
				(unsigned)_mm256_movemask_ps(_mm256_castsi256_ps(keep)));
			st->zeros += (uint64_t)__builtin_popcount(
				(unsigned)_mm256_movemask_ps(_mm256_castsi256_ps(zero)));
			elements(_mm256_and_si256(a[h], keep), ej, dj, f, &e2m1, &counts, &fs,
				 &keep, false);
		}
	}
	fsums_widen(&fs, unscale, &st->sum);
	st->counts = counts;
	st->count += kept;
}

__attribute__((noinline)) static void blocks_masked_f32(const struct nv_pass *ps,
							const int64_t at[8], int n, struct state *st)
{
	blocks_masked(ps, DLI_DTYPE_F32, at, n, st);
}

__attribute__((noinline)) static void blocks_masked_bf16(const struct nv_pass *ps,
							 const int64_t at[8], int n, struct state *st)
{
	blocks_masked(ps, DLI_DTYPE_BF16, at, n, st);
}

/* Adds the block from element i on to those gathered for blocks_masked, which takes them eight
 * at a time. */
static inline void gather(const struct nv_pass *ps, int64_t i, int64_t gathered[8], int *n,
			  struct state *st)
{
	gathered[(*n)++] = i;
	if (*n < 8)
		return;
	if (ps->dtype == DLI_DTYPE_F32)
		blocks_masked_f32(ps, gathered, 8, st);
	else
		blocks_masked_bf16(ps, gathered, 8, st);
	*n = 0;
}

bool dli_nvfp4_rows_avx2_take(const struct nv_pass *ps)
{
	/* f32 and bf16, row-wise (AVX-512 machines run it too), but for tensors whose amax is below
	 * 2^-100, where the dequantized values could be subnormal (see block_scales) */
	return ps->mode == NV_COMPARE && ps->dims == 1 && !ps->columnwise &&
	       ps->dtype != DLI_DTYPE_F16 && !(ps->amax < 0x1p-100f) &&
	       (ps->simd == DLI_SIMD_AVX2 || ps->simd == DLI_SIMD_AVX512);
}

void dli_nvfp4_rows_avx2(const struct nv_pass *ps, int64_t r0, int64_t r1, struct dli_block_terms *t)
{
	const enum dli_dtype dtype = ps->dtype == DLI_DTYPE_F32 ? DLI_DTYPE_F32 : DLI_DTYPE_BF16;
	const int64_t cols = ps->cols, full = cols / DLI_NVFP4_BLOCK * DLI_NVFP4_BLOCK;
	const int64_t group = 8 * DLI_NVFP4_BLOCK;
	struct state st = { .lo = _mm256_set1_ps(INFINITY), .hi = _mm256_set1_ps(-INFINITY) };
	uint8_t bad_masks[SEGMENT] = { 0 };
	int64_t gathered[8];
	int n_gathered = 0;

	dsums_reset(&st.sum);
	st.counts = _mm256_setzero_si256();
	for (int64_t r = r0; r < r1; r++) {
		int64_t c = 0;
		/* Eight blocks at a time: their amaxes in one vector, their scales in its lanes; in
		 * segments of up to SEGMENT groups, whose blocks holding NaN or an infinity are
		 * gathered for blocks_masked. */
		while (c + group <= full) {
			int64_t n = (full - c) / group;
			int n_groups = n < SEGMENT ? (int)n : SEGMENT;
			if (dtype == DLI_DTYPE_F32)
				segment_f32(ps, r * cols + c, n_groups, &st, bad_masks);
			else if (ps->xs_known)
				segment_bf16_xs_known(ps, r * cols + c, n_groups, &st, bad_masks);
			else
				segment_bf16(ps, r * cols + c, n_groups, &st, bad_masks);
			for (uint64_t m = groups_marked(bad_masks, n_groups); m; m &= m - 1) {
				int g = __builtin_ctzll(m);
				for (unsigned b = bad_masks[g]; b; b &= b - 1)
					gather(ps,
					       r * cols + c +
						       (g * 8 + __builtin_ctz(b)) * DLI_NVFP4_BLOCK,
					       gathered, &n_gathered, &st);
			}
			counts_widen(st.counts, t);
			st.counts = _mm256_setzero_si256();
			c += n_groups * group;
		}
		/* The rest of the whole blocks gathered too. */
		for (; c < full; c += DLI_NVFP4_BLOCK)
			gather(ps, r * cols + c, gathered, &n_gathered, &st);
		if (full < cols) {
			dli_nvfp4_block_scalar(ps, r, full, cols - full, t);
			if (ps->xs_known) /* bf16 */
				for (int64_t k = r * cols + full; k < (r + 1) * cols; k++)
					t->zeros += (((const uint16_t *)ps->data)[k] & 0x7fff) == 0;
		}
		counts_widen(st.counts, t);
		st.counts = _mm256_setzero_si256();
	}
	if (n_gathered) {
		if (dtype == DLI_DTYPE_F32)
			blocks_masked_f32(ps, gathered, n_gathered, &st);
		else
			blocks_masked_bf16(ps, gathered, n_gathered, &st);
		counts_widen(st.counts, t);
	}
	t->count += st.count;
	t->zeros += st.zeros;
	double err = hsum(st.sum.err), dqs = hsum(st.sum.dqs), xs = hsum(st.sum.xs);
	t->err += err;
	t->dqs += dqs;
	t->xs += xs;
	/* x and dq share their sign, and dq is 0 or within a factor of about 2 of x: sum x dq is
	 * (sum x^2 + sum dq^2 - sum (x - dq)^2) / 2 with nothing cancelling. A dq that overflowed
	 * to inf (the only way a sum of squares of floats is infinite in double) belongs to a
	 * nonzero x, so sum x dq is inf too. */
	t->dot += isinf(dqs) ? dqs : (xs + dqs - err) / 2;
	double l = hmin_ps(st.lo), h = hmax(st.hi);
	if (l < t->lo)
		t->lo = l;
	if (h > t->hi)
		t->hi = h;
}
