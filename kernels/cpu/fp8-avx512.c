/* The FP8 quantize-and-compare pass and the FP8 cast with AVX-512 (16 lanes), without a branch
 * per element. Compiled with AVX-512 flags and called only when the CPU has them. */
#include <immintrin.h>
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

static inline __attribute__((always_inline)) void
compare_blocks(const void *data, enum dli_dtype dtype, int64_t n, enum dli_dtype format,
	       float scale, struct dli_stats_record *acc)
{
	struct k512 k;
	/* The lanes sum terms of s = x * scale, which the block scales back by 1/scale^2 in
	 * double: s stays near the format's range whatever the magnitude of x, so the float sums
	 * rarely leave float range. */
	double inv2 = 1.0 / ((double)scale * scale);
	int64_t sz = (int64_t)dli_dtype_size(dtype);

	k512_init(&k, format, scale);
	for (int64_t b = 0; b < n; b += BLOCK) {
		int64_t bn = n - b < BLOCK ? n - b : BLOCK;
		uint64_t count = (uint64_t)bn;
		struct block_sums t;

		block_pass(data, dtype, b, bn, &k, false, &t);
		if (!in_range(_mm512_reduce_add_ps(t.xs))) {
			/* Rare blocks, each redone from L1: zeros (every term exactly 0), then NaN
			 * and inf left out, and what is still out of float range (huge or tiny
			 * values) in double by the scalar path. */
			if (block_zero(data, dtype, b, bn)) {
				acc->fp8_count += count;
				continue;
			}
			block_pass(data, dtype, b, bn, &k, true, &t);
			if (!in_range(_mm512_reduce_add_ps(t.xs)) && t.finite_nonzero > 0) {
				dli_fp8_compare_scalar((const char *)data + b * sz, dtype, bn,
						       format, scale, acc);
				continue;
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
}

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
