/* The FP8 quantize-and-compare pass and the FP8 cast with AVX2 (8 lanes), without a branch per
 * element. The same arithmetic as fp8-avx512.c, which explains it; compiled with AVX2, FMA and
 * F16C flags and called only when the CPU has them. */
#include <immintrin.h>
#include <stdbool.h>
#include <string.h>

#include "cpu-private.h"
#include "fp8-private.h"

#define BLOCK 512 /* each float lane sums 64 terms */

struct k256 {
	__m256 scale, maxv;
	__m256i maxbits, absmask, infbits, expmask, emin, cadd, rebias, nancode, signmask;
	int mshift;
};

static void k256_init(struct k256 *k, enum dli_dtype format, float scale)
{
	int mbits = format == DLI_DTYPE_F8E4M3 ? 3 : 2;
	int bias = format == DLI_DTYPE_F8E4M3 ? 7 : 15;

	k->scale = _mm256_set1_ps(scale);
	k->maxv = _mm256_set1_ps(format == DLI_DTYPE_F8E4M3 ? 448.0f : 57344.0f);
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
}

/* 8 elements from p on, widened to float. */
static inline __attribute__((always_inline)) __m256 load8(const void *p, enum dli_dtype dtype)
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
static inline __attribute__((always_inline)) __m256 load_tail(const void *p, enum dli_dtype dtype,
							       int64_t left)
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

static inline bool in_range(float xs)
{
	return xs >= 0x1p-90f && xs <= 0x1p100f;
}

static bool block_zero(const char *p, enum dli_dtype dtype, int64_t n)
{
	size_t sz = dli_dtype_size(dtype);
	__m256 bits = _mm256_setzero_ps();
	__m256 abs = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
	int64_t j = 0;

	for (; j + 8 <= n; j += 8)
		bits = _mm256_or_ps(bits, _mm256_and_ps(abs, load8(p + j * (int64_t)sz, dtype)));
	if (j < n)
		bits = _mm256_or_ps(bits, _mm256_and_ps(abs, load_tail(p + j * (int64_t)sz, dtype,
									n - j)));
	return _mm256_testz_si256(_mm256_castps_si256(bits), _mm256_castps_si256(bits));
}

/* A block's terms in float lanes; the counts as int32 lanes (a true compare is -1: subtracting
 * it counts). */
struct block_sums {
	__m256 err, dot, dqs, xs;
	__m256i under, over;
	uint32_t finite, finite_nonzero; /* careful pass only */
};

/* One vector of a block pass (fp8-avx512.c explains the fast and the careful pass):
 * magnitudes clamped and compared as integers, underflow tested on x. `lanes` has a bit for
 * each real element (the tail's zero padding is not one). */
static inline __attribute__((always_inline)) void
vec_step(__m256 xv, unsigned lanes, const struct k256 *k, bool careful, struct block_sums *t)
{
	const __m256i izero = _mm256_setzero_si256();
	__m256i x = _mm256_castps_si256(xv);
	__m256i xabs = _mm256_and_si256(x, k->absmask);
	__m256i xz = _mm256_cmpeq_epi32(xabs, izero);
	__m256 s = _mm256_mul_ps(xv, k->scale);
	__m256i a, ac, e, rz, uf;
	__m256 c, r, af, d;

	if (careful) {
		__m256i fin = _mm256_cmpgt_epi32(k->infbits, xabs);
		unsigned fm = (unsigned)_mm256_movemask_ps(_mm256_castsi256_ps(fin)) & lanes;
		unsigned nzm = fm & ~(unsigned)_mm256_movemask_ps(_mm256_castsi256_ps(xz));

		s = _mm256_and_ps(s, _mm256_castsi256_ps(fin)); /* a NaN or inf x adds nothing */
		xz = _mm256_or_si256(xz, _mm256_xor_si256(fin, _mm256_set1_epi32(-1)));
		t->finite += (uint32_t)__builtin_popcount(fm);
		t->finite_nonzero += (uint32_t)__builtin_popcount(nzm);
	}
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

static inline __attribute__((always_inline)) void
block_pass(const char *p, enum dli_dtype dtype, int64_t bn, const struct k256 *k, bool careful,
	   struct block_sums *t)
{
	int64_t sz = (int64_t)dli_dtype_size(dtype);
	int64_t j = 0;

	t->err = t->dot = t->dqs = t->xs = _mm256_setzero_ps();
	t->under = t->over = _mm256_setzero_si256();
	t->finite = t->finite_nonzero = 0;
	for (; j + 8 <= bn; j += 8) {
		if (!careful) /* the careful pass rereads the block from L1 */
			_mm_prefetch(p + j * sz + DLI_PREFETCH_BYTES, _MM_HINT_T0);
		vec_step(load8(p + j * sz, dtype), 0xff, k, careful, t);
	}
	if (j < bn)
		vec_step(load_tail(p + j * sz, dtype, bn - j), (1u << (bn - j)) - 1, k, careful, t);
}

static inline __attribute__((always_inline)) void
compare_blocks(const void *data, enum dli_dtype dtype, int64_t n, enum dli_dtype format,
	       float scale, struct dli_stats_record *acc)
{
	struct k256 k;
	size_t sz = dli_dtype_size(dtype);
	double inv2 = 1.0 / ((double)scale * scale);

	k256_init(&k, format, scale);
	for (int64_t b = 0; b < n; b += BLOCK) {
		int64_t bn = n - b < BLOCK ? n - b : BLOCK;
		const char *p = (const char *)data + b * (int64_t)sz;
		uint64_t count = (uint64_t)bn;
		struct block_sums t;

		block_pass(p, dtype, bn, &k, false, &t);
		/* The same range test and the same rare-block ladder as fp8-avx512.c. */
		if (!in_range((float)sum_pd(t.xs))) {
			if (block_zero(p, dtype, bn)) {
				acc->fp8_count += count;
				continue;
			}
			block_pass(p, dtype, bn, &k, true, &t);
			if (!in_range((float)sum_pd(t.xs)) && t.finite_nonzero > 0) {
				dli_fp8_compare_scalar(p, dtype, bn, format, scale, acc);
				continue;
			}
			count = t.finite;
		}
		acc->fp8_count += count;
		acc->underflows += sum_epi32(t.under);
		acc->overflows += sum_epi32(t.over);
		acc->err_sq += sum_pd(t.err) * inv2;
		acc->dot += sum_pd(t.dot) * inv2;
		acc->dq_sq += sum_pd(t.dqs) * inv2;
		acc->x_sq += sum_pd(t.xs) * inv2;
	}
}

void dli_fp8_compare_avx2(const void *data, enum dli_dtype dtype, int64_t n,
			  enum dli_dtype format, float scale, struct dli_stats_record *acc)
{
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
