/* The FP8 quantize-and-compare pass and the FP8 cast with AVX-512 (16 lanes), without a branch
 * per element. Compiled with AVX-512 flags and called only when the CPU has them. */
#include <immintrin.h>
#include <math.h>
#include <stdbool.h>
#include <string.h>

#include "cpu-private.h"
#include "fp8-private.h"

/* Elements per block: each float lane sums 64 terms, so a block's float sums stay within a few
 * ulps of 2^-24 * 64 of the exact sum before they are added into doubles. */
#define BLOCK 1024

/* The constants of the cast. Rounding to nearest even to a quantum Q, a power of two, is
 * (a + C) - C with C = Q * 2^23 in float arithmetic: floats in [C, 2C) are Q apart, so the
 * hardware's round-to-nearest-even does the work. Q is 2^(e - mbits) for |x| in [2^e, 2^(e+1)),
 * never below the smallest subnormal 2^(emin - mbits); C's bits are then e's bits plus a
 * constant, and a max_epi32 clamps e. Clamping |x| to the finite max before rounding is the
 * saturation: everything above the max rounds to the max or beyond it, where it would saturate. */
struct k512 {
	__m512 scale, maxv;
	__m512i maxbits, absmask, expmask, emin, cadd;
	/* The code from t = a + C: bits(t) - bits(C) + (e >> (23 - mbits)) - rebias. */
	__m512i rebias;
	__m512i nancode, signmask;
	int mshift;
};

static void k512_init(struct k512 *k, enum dli_dtype format, float scale)
{
	int mbits = format == DLI_DTYPE_F8E4M3 ? 3 : 2;
	int bias = format == DLI_DTYPE_F8E4M3 ? 7 : 15;

	k->scale = _mm512_set1_ps(scale);
	k->maxv = _mm512_set1_ps(format == DLI_DTYPE_F8E4M3 ? 448.0f : 57344.0f);
	k->maxbits = _mm512_castps_si512(k->maxv);
	k->absmask = _mm512_set1_epi32(0x7fffffff);
	k->expmask = _mm512_set1_epi32(0x7f800000);
	k->emin = _mm512_set1_epi32((1 - bias + 127) << 23);
	k->cadd = _mm512_set1_epi32((23 - mbits) << 23);
	k->rebias = _mm512_set1_epi32((127 - bias + 1) << mbits);
	k->nancode = _mm512_set1_epi32(format == DLI_DTYPE_F8E4M3 ? 0x7f : 0x7e);
	k->signmask = _mm512_set1_epi32(0x80);
	k->mshift = 23 - mbits;
}

/* Up to 16 elements from element i on, widened to float; lanes outside `m` read nothing and are
 * zero (a zero contributes nothing to any term and is neither an underflow nor an overflow). */
static inline __attribute__((always_inline)) __m512 load16(const void *data, enum dli_dtype dtype,
							    int64_t i, __mmask16 m)
{
	switch (dtype) {
	case DLI_DTYPE_F32:
		return _mm512_maskz_loadu_ps(m, (const float *)data + i);
	case DLI_DTYPE_F16:
		return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, (const uint16_t *)data + i));
	default: /* DLI_DTYPE_BF16: the upper half of a float */
		return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(
			_mm256_maskz_loadu_epi16(m, (const uint16_t *)data + i)), 16));
	}
}

static inline __mmask16 tail_mask(int64_t left)
{
	return left >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << left) - 1);
}

static inline double sum_pd(__m512 v)
{
	__m512d lo = _mm512_cvtps_pd(_mm512_castps512_ps256(v));
	__m256 upper = _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1));
	__m512d hi = _mm512_cvtps_pd(upper);
	return _mm512_reduce_add_pd(_mm512_add_pd(lo, hi));
}

/* Every element of the block is +-0. */
static bool block_zero(const void *data, enum dli_dtype dtype, int64_t i, int64_t n)
{
	__m512i bits = _mm512_setzero_si512();
	__m512i abs = _mm512_set1_epi32(0x7fffffff);

	for (int64_t j = 0; j < n; j += 16)
		bits = _mm512_or_si512(bits, _mm512_and_si512(abs, _mm512_castps_si512(
			load16(data, dtype, i + j, tail_mask(n - j)))));
	return _mm512_test_epi32_mask(bits, bits) == 0;
}

/* A block's terms in float lanes, before they go into doubles. */
struct block_sums {
	__m512 err, dot, dqs, xs;
	uint32_t under, over;
	uint32_t finite;         /* careful pass only: elements compared */
	uint32_t finite_nonzero; /* careful pass only */
};

/* One pass over a block: the cast, then the terms on magnitudes (|s| and |dq * scale| carry the
 * same sign, so every term is the same on magnitudes and the sign is never put back).
 *
 * The work is bound by vector operations, not memory, so each one counts: magnitudes are
 * compared and clamped as integers (the bits of non-negative floats order as the floats do),
 * which frees the floating-point pipes for the rounding and the sums, and the counts go through
 * popcnt on the scalar side. (Sum x * dq cannot be had from the other three sums through
 * a r = (a^2 + r^2 - (a - r)^2) / 2: where most values saturate or underflow, (a - r)^2 is nearly
 * a^2 and the difference cancels to noise.)
 *
 * The fast pass (careful = false) assumes finite x: a NaN or inf turns the block's sums NaN or
 * inf, and the caller then runs the careful pass, which zeroes the product of a non-finite x
 * (so it adds nothing anywhere) and counts what it compared. Underflow tests x, not s: a tiny x
 * whose product with the scale is 0 in float has still underflowed. */
static inline __attribute__((always_inline)) void
vec_step(const void *data, enum dli_dtype dtype, int64_t i, __mmask16 m, const struct k512 *k,
	 bool careful, struct block_sums *t)
{
	__m512 x = load16(data, dtype, i, m);
	__m512 s, c, r, af, d;
	__m512i a, ac, e;
	__mmask16 nz, uf, of;

	if (careful) {
		/* fpclass 0x99: QNaN, SNaN, +inf, -inf */
		__mmask16 fin = (__mmask16)(~_mm512_fpclass_ps_mask(x, 0x99) & m);
		s = _mm512_maskz_mul_ps(fin, x, k->scale);
		nz = _mm512_mask_test_epi32_mask(fin, _mm512_castps_si512(x), k->absmask);
		t->finite += (uint32_t)__builtin_popcount(fin);
		t->finite_nonzero += (uint32_t)__builtin_popcount(nz);
	} else {
		s = _mm512_mul_ps(x, k->scale);
		nz = _mm512_test_epi32_mask(_mm512_castps_si512(x), k->absmask);
	}
	a = _mm512_and_si512(_mm512_castps_si512(s), k->absmask);
	ac = _mm512_min_epi32(a, k->maxbits);
	e = _mm512_max_epi32(_mm512_and_si512(ac, k->expmask), k->emin);
	c = _mm512_castsi512_ps(_mm512_add_epi32(e, k->cadd));
	r = _mm512_sub_ps(_mm512_add_ps(_mm512_castsi512_ps(ac), c), c);
	af = _mm512_castsi512_ps(a);
	d = _mm512_sub_ps(af, r);
	uf = _mm512_mask_testn_epi32_mask(nz, _mm512_castps_si512(r), _mm512_castps_si512(r));
	of = _mm512_cmpgt_epi32_mask(a, k->maxbits);
	t->err = _mm512_fmadd_ps(d, d, t->err);
	t->dot = _mm512_fmadd_ps(af, r, t->dot);
	t->dqs = _mm512_fmadd_ps(r, r, t->dqs);
	t->xs = _mm512_fmadd_ps(af, af, t->xs);
	t->under += (uint32_t)__builtin_popcount(uf);
	t->over += (uint32_t)__builtin_popcount(of);
}

static inline __attribute__((always_inline)) void
block_pass(const void *data, enum dli_dtype dtype, int64_t b, int64_t bn, const struct k512 *k,
	   bool careful, struct block_sums *t)
{
	int64_t sz = (int64_t)dli_dtype_size(dtype);
	int64_t j;

	t->err = t->dot = t->dqs = t->xs = _mm512_setzero_ps();
	t->under = t->over = t->finite = t->finite_nonzero = 0;
	/* Whole vectors unmasked, then the masked tail: no mask arithmetic in the hot loop. */
	for (j = 0; j + 16 <= bn; j += 16) {
		if (!careful) /* the careful pass rereads the block from L1 */
			_mm_prefetch((const char *)data + (b + j) * sz + DLI_PREFETCH_BYTES,
				     _MM_HINT_T0);
		vec_step(data, dtype, b + j, 0xffff, k, careful, t);
	}
	if (j < bn)
		vec_step(data, dtype, b + j, tail_mask(bn - j), k, careful, t);
}

/* The float lanes are trusted when sum s^2 is well inside float range: then no s^2, s*r or
 * (s-r)^2 overflowed, and terms lost to float underflow are below 2^-24 of the sum. */
static inline bool in_range(float xs)
{
	return xs >= 0x1p-90f && xs <= 0x1p100f;
}

/* One block of any input type: the fast pass, and for a block whose float sums left the safe
 * range, the ladder of rare cases. */
static inline __attribute__((always_inline)) void
generic_block(const void *data, enum dli_dtype dtype, int64_t b, int64_t bn, enum dli_dtype format,
	      float scale, double inv2, const struct k512 *k, struct dli_stats_record *acc)
{
	int64_t sz = (int64_t)dli_dtype_size(dtype);
	uint64_t count = (uint64_t)bn;
	struct block_sums t;

	block_pass(data, dtype, b, bn, k, false, &t);
	if (!in_range(_mm512_reduce_add_ps(t.xs))) {
		/* Rare blocks, each redone from L1: zeros (every term exactly 0), then NaN and inf
		 * left out, and what is still out of float range (huge or tiny values) in double
		 * by the scalar path. */
		if (block_zero(data, dtype, b, bn)) {
			acc->fp8_count += count;
			return;
		}
		block_pass(data, dtype, b, bn, k, true, &t);
		if (!in_range(_mm512_reduce_add_ps(t.xs)) && t.finite_nonzero > 0) {
			dli_fp8_compare_scalar((const char *)data + b * sz, dtype, bn, format, scale,
					       acc);
			return;
		}
		count = t.finite;
	}
	acc->fp8_count += count;
	acc->underflows += t.under;
	acc->overflows += t.over;
	acc->err_sq += sum_pd(t.err) * inv2;
	acc->dot += sum_pd(t.dot) * inv2;
	acc->dq_sq += sum_pd(t.dqs) * inv2;
	acc->x_sq += sum_pd(t.xs) * inv2;
}

static inline __attribute__((always_inline)) void
compare_blocks(const void *data, enum dli_dtype dtype, int64_t n, enum dli_dtype format,
	       float scale, struct dli_stats_record *acc)
{
	struct k512 k;
	/* The lanes sum terms of s = x * scale, which the block scales back by 1/scale^2 in
	 * double: s stays near the format's range whatever the magnitude of x, so the float sums
	 * rarely leave float range. */
	double inv2 = 1.0 / ((double)scale * scale);

	k512_init(&k, format, scale);
	for (int64_t b = 0; b < n; b += BLOCK)
		generic_block(data, dtype, b, n - b < BLOCK ? n - b : BLOCK, format, scale, inv2, &k,
			      acc);
}

/* ---- bf16 input: the cast in 16-bit lanes ----
 *
 * A bf16 x = 1.m * 2^(E-127) has a 7-bit mantissa m. Where s = x * scale is at least the
 * format's smallest normal, the float product is fl(1.m * ms) * 2^(E-127+es) (scale = ms * 2^es,
 * ms in [1, 2)): its rounding to float, and then to the format's mantissa, depends on m alone.
 * So the cast's value r (dq * scale, an FP8 value and so exactly a bf16) is P(m) * 2^(E-127+es)
 * with P(m) = the format's rounding of fl(1.m * ms), in [1, 4]: in bf16 bits, |x| plus an entry
 * of a 128-entry table D, looked up 32 lanes at a time with two word permutes. Saturation is a
 * min on the bits (the values only grow with x); |x| > xov, a bf16 bound found once per call,
 * is an overflow; below xn (the first |x| whose product is normal in the format) lie the
 * underflows and the subnormal grid, rare in data scaled to the format: a vector holding one
 * takes the float path (vec_step's arithmetic) for its r.
 *
 * The lanes hold r * 2^J rather than r, with J chosen (from the scale) so that the table's
 * value for x = 0 is below 2^-124: its square, and its product with 0, vanish in the sums, so
 * zeros need no mask. The loop is bound by vector operations, the FMA pipes busiest (on Zen 4
 * compares into mask registers use them too), so it has only two such compares: the overflow
 * count comes from a running max of |x|, recounted only in blocks that overflowed.
 * Products of two bf16 are exact in float, so x^2, x r and r^2 are summed with vdpbf16ps (32
 * elements an instruction); the error s - r needs the full product and goes through float FMA
 * lanes. */
struct kbf16 {
	__m512i t0, t1, t2, t3; /* D[0..127], 32 a register */
	/* With VBMI, where D spans less than 256 (always, for these scales): D[m] - base at byte
	 * (m + base) mod 128 of tb0:tb1, looked up by one vpermi2b with index |x| + base. */
	__m512i tb0, tb1, base;
	bool bytes;
	__m512i maxr;           /* bf16 bits of the format's max * 2^J */
	__m512i xn1, xov, one, absmask, sign16, hi16, bit6;
	__m512 scale;           /* scale * 2^J */
	__m512 pj;              /* 2^J */
	double inv;             /* 2^-J / scale: r * 2^J back to dq */
};

/* The largest bf16 magnitude (bits 0 .. 0x7f7f) whose product with scale is <= limit, or -1. */
static int bf16_last_le(float scale, float limit)
{
	int lo = -1, hi = 0x7f7f; /* lo: known <= (or -1), hi + 1 .. : known > */

	while (lo < hi) {
		int mid = lo + (hi - lo + 1) / 2;
		uint32_t u = (uint32_t)mid << 16;
		float v;
		memcpy(&v, &u, sizeof(v));
		if (v * scale <= limit)
			lo = mid;
		else
			hi = mid - 1;
	}
	return lo;
}

/* The constants for one (format, scale); false for a scale outside [2^-40, 2^41) (where the
 * sums of r * 2^J could leave float range, and where bf16 subnormals could land in the
 * format's normal range; float-subnormal scales included): the generic path takes those. */
static bool kbf16_init(struct kbf16 *kb, const struct k512 *k, enum dli_dtype format, float scale)
{
	bool e4 = format == DLI_DTYPE_F8E4M3;
	int bias = e4 ? 7 : 15;
	float fmax = e4 ? 448.0f : 57344.0f;
	uint32_t sb, p0;
	int es, j, xn;
	int16_t d[128];
	float ms;

	memcpy(&sb, &scale, sizeof(sb));
	es = (int)(sb >> 23) - 127;
	if (es < -40 || es > 40)
		return false;
	sb = (sb & 0x7fffff) | (127u << 23);
	memcpy(&ms, &sb, sizeof(ms));
	/* P(m) for every m with the float path's rounding (the same arithmetic as vec_step):
	 * 1.m * ms is in [1, 4), in the format's normal range, far from its max. */
	for (int m = 0; m < 128; m += 16) {
		__m512i mi = _mm512_add_epi32(_mm512_set1_epi32(m), _mm512_set_epi32(
			15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0));
		__m512 x1 = _mm512_castsi512_ps(_mm512_or_si512(_mm512_slli_epi32(mi, 16),
								_mm512_set1_epi32(127 << 23)));
		__m512 s = _mm512_mul_ps(x1, _mm512_set1_ps(ms));
		__m512i e = _mm512_max_epi32(_mm512_and_si512(_mm512_castps_si512(s), k->expmask),
					     k->emin);
		__m512 c = _mm512_castsi512_ps(_mm512_add_epi32(e, k->cadd));
		__m512i p = _mm512_castps_si512(_mm512_sub_ps(_mm512_add_ps(s, c), c));
		/* bits16(P) - m for now; the exponent offset once P(0) is known */
		__m512i dv = _mm512_sub_epi32(_mm512_srli_epi32(p, 16), mi);
		_mm256_storeu_si256((__m256i *)(d + m), _mm512_cvtepi32_epi16(dv));
	}
	/* P(0) is 1.x or 2: its exponent k0 (0 or 1). With J = 1 - es - k0, r * 2^J has the bf16
	 * exponent E + k(m) - k0 + 1 - 127 (k(m) >= k0: P grows with m), so |x| + D[m] with
	 * D[m] = bits16(P(m)) - m - (126 + k0) * 128 (modulo 2^16) is its bits; x = 0 gives
	 * 1.x * 2^-126. */
	p0 = (uint32_t)(uint16_t)d[0];
	j = 1 - es - (int)((p0 >> 7) - 127);
	for (int m = 0; m < 128; m++)
		d[m] = (int16_t)(uint16_t)((uint32_t)(uint16_t)d[m] -
					   (uint32_t)(126 + (p0 >> 7) - 127) * 128u);
	{
		int dmin = 1 << 16, dmax = -1;
		uint8_t tb[128];
		for (int m = 0; m < 128; m++) {
			int v = (uint16_t)d[m];
			dmin = v < dmin ? v : dmin;
			dmax = v > dmax ? v : dmax;
		}
		kb->bytes = dmax - dmin <= 255 && __builtin_cpu_supports("avx512vbmi");
		for (int m = 0; m < 128; m++)
			tb[(m + dmin) & 127] = (uint8_t)((uint16_t)d[m] - dmin);
		kb->tb0 = _mm512_loadu_si512(tb);
		kb->tb1 = _mm512_loadu_si512(tb + 64);
		kb->base = _mm512_set1_epi16((short)dmin);
	}
	kb->t0 = _mm512_loadu_si512(d);
	kb->t1 = _mm512_loadu_si512(d + 32);
	kb->t2 = _mm512_loadu_si512(d + 64);
	kb->t3 = _mm512_loadu_si512(d + 96);
	xn = bf16_last_le(scale, nextafterf(ldexpf(1.0f, 1 - bias), 0.0f)) + 1;
	if (xn < 0x80) /* cannot happen for these scales; the table needs x normal */
		return false;
	kb->xn1 = _mm512_set1_epi16((short)(xn - 1));
	kb->xov = _mm512_set1_epi16((short)bf16_last_le(scale, fmax));
	{
		float mr = ldexpf(fmax, j);
		uint32_t mb;
		memcpy(&mb, &mr, sizeof(mb));
		kb->maxr = _mm512_set1_epi16((short)(mb >> 16));
	}
	kb->one = _mm512_set1_epi16(1);
	kb->absmask = _mm512_set1_epi16(0x7fff);
	kb->sign16 = _mm512_set1_epi16((short)0x8000);
	kb->hi16 = _mm512_set1_epi32((int)0xffff0000u);
	kb->bit6 = _mm512_set1_epi16(0x40);
	kb->scale = _mm512_set1_ps(ldexpf(scale, j));
	kb->pj = _mm512_set1_ps(ldexpf(1.0f, j));
	kb->inv = ldexp(1.0, -j) / (double)scale;
	return true;
}

/* r * 2^J for all 32 lanes by the float path: for vectors holding a value below xn. */
static __attribute__((noinline)) __m512i bf16_r_float(__m512i xa, const struct k512 *k,
						      const struct kbf16 *kb)
{
	__m512i h[2];

	h[0] = _mm512_slli_epi32(xa, 16);
	h[1] = _mm512_and_si512(xa, kb->hi16);
	for (int i = 0; i < 2; i++) {
		__m512 s = _mm512_mul_ps(_mm512_castsi512_ps(h[i]), k->scale);
		__m512i ac = _mm512_min_epi32(_mm512_castps_si512(s), k->maxbits);
		__m512i e = _mm512_max_epi32(_mm512_and_si512(ac, k->expmask), k->emin);
		__m512 c = _mm512_castsi512_ps(_mm512_add_epi32(e, k->cadd));
		__m512 r = _mm512_sub_ps(_mm512_add_ps(_mm512_castsi512_ps(ac), c), c);
		h[i] = _mm512_castps_si512(_mm512_mul_ps(r, kb->pj)); /* times 2^J: exact */
	}
	return _mm512_or_si512(_mm512_srli_epi32(h[0], 16), _mm512_and_si512(h[1], kb->hi16));
}

struct bf16_sums {
	__m512 xs, dot, dqs, err0, err1;
	__m512i xmax;
	uint32_t under;
};

/* One vector of 32 elements at p (lanes past `m` zero). x and r carry x's sign (their product
 * and squares do not care), so the float views of x for s - r come straight from memory: a
 * masked load keeps the odd elements, which are then the upper halves of 32-bit lanes, and the
 * same load one element earlier gives the even ones. */
__attribute__((target("avx512bf16"))) static inline __attribute__((always_inline)) void
bf16_step(const uint16_t *p, __mmask32 m, const struct k512 *k, const struct kbf16 *kb,
	  bool bytes, struct bf16_sums *t)
{
	__m512i x = _mm512_maskz_loadu_epi16(m, p);
	__m512 x1 = _mm512_castsi512_ps(_mm512_maskz_loadu_epi16(m & 0xaaaaaaaau, p));
	__m512 x0 = _mm512_castsi512_ps(_mm512_maskz_loadu_epi16((m << 1) & 0xaaaaaaaau, p - 1));
	__m512i xa = _mm512_and_si512(x, kb->absmask);
	/* |x| - 1 < xn - 1: a nonzero below xn (0 wraps around to the top) */
	__mmask32 low = _mm512_cmplt_epu16_mask(_mm512_sub_epi16(xa, kb->one), kb->xn1);
	__m512i r;
	__m512 d0, d1;

	if (bytes) {
		/* |x| + base + the byte of (m + base) mod 128, zero-extended (the high byte of each
		 * word zeroed by the mask): |x| + D[m]. Inline assembly, so that this function needs
		 * no VBMI target of its own. */
		__m512i ib = _mm512_add_epi16(xa, kb->base);
		__m512i tv = ib;
		__asm__("vpermi2b %[t1], %[t0], %[v]%{%[k]%}%{z%}"
			: [v] "+v"(tv)
			: [t0] "v"(kb->tb0), [t1] "v"(kb->tb1), [k] "Yk"((__mmask64)0x5555555555555555ull));
		r = _mm512_add_epi16(ib, tv);
	} else {
		__m512i a = _mm512_permutex2var_epi16(kb->t0, xa, kb->t1);
		__m512i b = _mm512_permutex2var_epi16(kb->t2, xa, kb->t3);
		__mmask32 b6 = _mm512_test_epi16_mask(xa, kb->bit6);
		r = _mm512_add_epi16(xa, _mm512_mask_blend_epi16(b6, a, b));
	}
	r = _mm512_min_epu16(r, kb->maxr);
	t->xmax = _mm512_max_epu16(t->xmax, xa);
	if (__builtin_expect(low != 0, 0)) {
		r = bf16_r_float(xa, k, kb);
		t->under += (uint32_t)__builtin_popcount(_mm512_mask_testn_epi16_mask(
			_mm512_test_epi16_mask(xa, xa), r, r));
	}
	r = _mm512_ternarylogic_epi32(r, x, kb->sign16, 0xf8); /* r | (x & sign) */
	t->xs = _mm512_dpbf16_ps(t->xs, (__m512bh)x, (__m512bh)x);
	t->dot = _mm512_dpbf16_ps(t->dot, (__m512bh)x, (__m512bh)r);
	t->dqs = _mm512_dpbf16_ps(t->dqs, (__m512bh)r, (__m512bh)r);
	d0 = _mm512_fmsub_ps(x0, kb->scale, _mm512_castsi512_ps(_mm512_slli_epi32(r, 16)));
	d1 = _mm512_fmsub_ps(x1, kb->scale, _mm512_castsi512_ps(_mm512_and_si512(r, kb->hi16)));
	t->err0 = _mm512_fmadd_ps(d0, d0, t->err0);
	t->err1 = _mm512_fmadd_ps(d1, d1, t->err1);
}

/* Overflows in bn elements at p: |x| > xov. */
static uint32_t bf16_overflows(const uint16_t *p, int64_t bn, const struct kbf16 *kb)
{
	uint32_t over = 0;

	for (int64_t j = 0; j < bn; j += 32) {
		__mmask32 m = bn - j >= 32 ? 0xffffffffu : (__mmask32)((1ull << (bn - j)) - 1);
		__m512i xa = _mm512_and_si512(_mm512_maskz_loadu_epi16(m, p + j), kb->absmask);
		over += (uint32_t)__builtin_popcount(_mm512_cmpgt_epu16_mask(xa, kb->xov));
	}
	return over;
}

/* The bf16 blocks. The sums are of x^2 (unscaled), x r 2^J and r^2 2^2J, (s - r)^2 2^2J: a block
 * is trusted when sum x^2 is in the safe range both unscaled and times (scale 2^J)^2 (then no
 * product overflowed, and what vdpbf16ps flushes to zero, or a float square loses to underflow,
 * is below 2^-24 of the sums; |s - r| <= |s|), and sum x r 2^J is 0 or above 2^-90 (a flushed
 * product is then negligible too: it is 0 only when every r is); any other block, NaN and inf
 * included, goes through the generic path.
 *
 * The loop is bound by vector operations, so a block's end costs little too: its float lanes
 * go into double lanes that are reduced once per call, and the range test is first made on the
 * float lanes (every lane of sum x^2 below `hi` and one at least `lo`, so that the sum is inside
 * the range both unscaled and scaled; one lane of sum x r at least 2^-90, or all of them 0), the
 * exact test in double only for a block that fails it. */
static inline __attribute__((always_inline)) __m512d widen_add(__m512d acc, __m512 v)
{
	__m512d lo = _mm512_cvtps_pd(_mm512_castps512_ps256(v));
	__m512d hi = _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)));
	return _mm512_add_pd(acc, _mm512_add_pd(lo, hi));
}

__attribute__((target("avx512bf16"))) static inline __attribute__((always_inline)) void
compare_bf16_body(const uint16_t *data, int64_t n, enum dli_dtype format, float scale,
		  const struct k512 *k, const struct kbf16 *kb, bool bytes,
		  struct dli_stats_record *acc)
{
	double inv = kb->inv, inv2 = inv * inv, ss = _mm512_cvtss_f32(kb->scale);
	__m512d axs = _mm512_setzero_pd(), adot = axs, adqs = axs, aerr = axs;
	__m512 lo, hi;
	const __m512 dmin = _mm512_set1_ps(0x1p-90f);
	uint64_t count = 0, under = 0, over = 0;

	ss *= ss;
	/* Sum x^2 < 16 hi <= 2^100 / max(1, ss) and >= lo >= 2^-90 / min(1, ss), with a factor 2 for
	 * the roundings of ss and of these quotients. */
	hi = _mm512_set1_ps((float)(ss > 1 ? 0x1p95 / ss : 0x1p95));
	lo = _mm512_set1_ps((float)(ss < 1 ? 0x1p-89 / ss : 0x1p-89));
	for (int64_t b = 0; b < n; b += BLOCK) {
		int64_t bn = n - b < BLOCK ? n - b : BLOCK;
		const uint16_t *p = data + b;
		struct bf16_sums t;
		int64_t j;

		t.xs = t.dot = t.dqs = t.err0 = t.err1 = _mm512_setzero_ps();
		t.xmax = _mm512_setzero_si512();
		t.under = 0;
		for (j = 0; j + 32 <= bn; j += 32) {
			_mm_prefetch((const char *)(p + j) + DLI_PREFETCH_BYTES, _MM_HINT_T0);
			bf16_step(p + j, 0xffffffffu, k, kb, bytes, &t);
		}
		if (j < bn) /* zero lanes add nothing and are neither under- nor overflows */
			bf16_step(p + j, (__mmask32)((1ull << (bn - j)) - 1), k, kb, bytes, &t);
		if (!(_mm512_cmp_ps_mask(t.xs, hi, _CMP_LE_OQ) == 0xffff &&
		      _mm512_cmp_ps_mask(t.xs, lo, _CMP_GE_OQ) != 0 &&
		      (_mm512_cmp_ps_mask(t.dot, dmin, _CMP_GE_OQ) != 0 ||
		       _mm512_test_epi32_mask(_mm512_castps_si512(t.dot),
					      _mm512_castps_si512(t.dot)) == 0))) {
			double xs = sum_pd(t.xs), dot = sum_pd(t.dot);
			if (!(xs >= 0x1p-90 && xs <= 0x1p100 && xs * ss >= 0x1p-90 &&
			      xs * ss <= 0x1p100 && (dot == 0 || dot >= 0x1p-90))) {
				generic_block(data, DLI_DTYPE_BF16, b, bn, format, scale,
					      1.0 / ((double)scale * scale), k, acc);
				continue;
			}
		}
		count += (uint64_t)bn;
		under += t.under;
		if (_mm512_cmpgt_epu16_mask(t.xmax, kb->xov))
			over += bf16_overflows(p, bn, kb);
		axs = widen_add(axs, t.xs);
		adot = widen_add(adot, t.dot);
		adqs = widen_add(adqs, t.dqs);
		aerr = widen_add(aerr, _mm512_add_ps(t.err0, t.err1)); /* 64 terms a lane */
	}
	acc->fp8_count += count;
	acc->underflows += under;
	acc->overflows += over;
	acc->x_sq += _mm512_reduce_add_pd(axs);
	acc->dot += _mm512_reduce_add_pd(adot) * inv;
	acc->dq_sq += _mm512_reduce_add_pd(adqs) * inv2;
	acc->err_sq += _mm512_reduce_add_pd(aerr) * inv2;
}

/* One copy of the loop per lookup. */
__attribute__((target("avx512bf16"))) static void
compare_bf16(const uint16_t *data, int64_t n, enum dli_dtype format, float scale,
	     const struct k512 *k, const struct kbf16 *kb, struct dli_stats_record *acc)
{
	if (kb->bytes)
		compare_bf16_body(data, n, format, scale, k, kb, true, acc);
	else
		compare_bf16_body(data, n, format, scale, k, kb, false, acc);
}

/* The bf16 table path: on when the CPU has vdpbf16ps; tests turn it off to reach the generic
 * path with bf16 input. */
int dli_fp8_avx512_bf16_table = 1;

void dli_fp8_compare_avx512(const void *data, enum dli_dtype dtype, int64_t n,
			    enum dli_dtype format, float scale, struct dli_stats_record *acc)
{
	/* One copy of the loop per input type, so the load is not a switch per vector. */
	switch (dtype) {
	case DLI_DTYPE_F32:
		compare_blocks(data, DLI_DTYPE_F32, n, format, scale, acc);
		break;
	case DLI_DTYPE_F16:
		compare_blocks(data, DLI_DTYPE_F16, n, format, scale, acc);
		break;
	default:
		if (dli_fp8_avx512_bf16_table && __builtin_cpu_supports("avx512bf16")) {
			struct k512 k;
			struct kbf16 kb;

			k512_init(&k, format, scale);
			if (kbf16_init(&kb, &k, format, scale)) {
				compare_bf16(data, n, format, scale, &k, &kb, acc);
				break;
			}
		}
		compare_blocks(data, DLI_DTYPE_BF16, n, format, scale, acc);
		break;
	}
}

static inline __attribute__((always_inline)) void
quantize(const void *data, enum dli_dtype dtype, int64_t n, enum dli_dtype format, float scale,
	 uint8_t *q)
{
	struct k512 k;

	k512_init(&k, format, scale);
	for (int64_t i = 0; i < n; i += 16) {
		__mmask16 m = tail_mask(n - i);
		__m512 s = _mm512_mul_ps(load16(data, dtype, i, m), k.scale);
		__m512 ac = _mm512_min_ps(_mm512_abs_ps(s), k.maxv); /* a NaN becomes the max... */
		__m512i e = _mm512_max_epi32(
			_mm512_and_si512(_mm512_castps_si512(ac), k.expmask), k.emin);
		__m512i c = _mm512_add_epi32(e, k.cadd);
		__m512i t = _mm512_castps_si512(_mm512_add_ps(ac, _mm512_castsi512_ps(c)));
		__m512i code = _mm512_add_epi32(_mm512_sub_epi32(t, c),
						_mm512_sub_epi32(_mm512_srli_epi32(e, k.mshift),
								 k.rebias));
		__mmask16 nan = _mm512_cmp_ps_mask(s, s, _CMP_UNORD_Q);

		code = _mm512_mask_mov_epi32(code, nan, k.nancode); /* ...and NaN again here */
		code = _mm512_or_si512(code, _mm512_and_si512(
			_mm512_srli_epi32(_mm512_castps_si512(s), 24), k.signmask));
		_mm_mask_storeu_epi8(q + i, m, _mm512_cvtepi32_epi8(code));
	}
}

void dli_fp8_quantize_avx512(const void *data, enum dli_dtype dtype, int64_t n,
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
