/* NVFP4's row-wise compare with AVX2 (kernels/cpu/nvfp4.c has the rules and the scalar reference):
 * eight 1 x 16 blocks at a time, their amaxes in one vector and their E4M3 scales, multipliers and
 * dequantization factors computed in its lanes by the scalar rules' float operations (the E4M3
 * rounding by integer nearest-even on the dropped mantissa bits, or on multiples of 2^-9 below
 * 2^-6), then each block's elements eight a vector: x * multiplier rounded to float, the E2M1
 * magnitude code as the count of the seven rounding boundaries it passes (the scalar code's
 * comparisons), the dequantized value looked up from the eight magnitudes times the factor, the
 * sign put back. The sums are in double lanes: products of two floats are exact in double, so
 * only the order of the additions differs from the scalar pass. Blocks holding NaN or an infinity,
 * and a row's last partial block, go to the scalar block; the global amax has its own AVX2 pass. */
#include <float.h>
#include <math.h>
#include <immintrin.h>
#include <string.h>

#include "nvfp4-private.h"

static const float e2m1_values[8] = { 0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f };

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

struct acc {
	__m256d err, dot, dqs, xs;
	__m256i under, over; /* 32-bit lane counts, widened per row */
};

/* Four of the eight float lanes, as doubles, into the sums. */
static inline void add4(struct acc *a, __m128 x, __m128 dq)
{
	__m256d xd = _mm256_cvtps_pd(x), dd = _mm256_cvtps_pd(dq), d = _mm256_sub_pd(xd, dd);
	a->err = _mm256_fmadd_pd(d, d, a->err);
	a->dot = _mm256_fmadd_pd(xd, dd, a->dot);
	a->dqs = _mm256_fmadd_pd(dd, dd, a->dqs);
	a->xs = _mm256_fmadd_pd(xd, xd, a->xs);
}

static inline void elements(struct acc *a, __m256 x, __m256 enc, __m256 mags)
{
	const __m256 absmask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
	__m256 s = _mm256_mul_ps(x, enc), m = _mm256_and_ps(s, absmask);
	/* Each comparison is -1 where it holds: their sum is minus the code. */
	__m256i c = _mm256_castps_si256(_mm256_cmp_ps(m, _mm256_set1_ps(0.25f), _CMP_GT_OQ));
	c = _mm256_add_epi32(c, _mm256_castps_si256(_mm256_cmp_ps(m, _mm256_set1_ps(0.75f), _CMP_GE_OQ)));
	c = _mm256_add_epi32(c, _mm256_castps_si256(_mm256_cmp_ps(m, _mm256_set1_ps(1.25f), _CMP_GT_OQ)));
	c = _mm256_add_epi32(c, _mm256_castps_si256(_mm256_cmp_ps(m, _mm256_set1_ps(1.75f), _CMP_GE_OQ)));
	c = _mm256_add_epi32(c, _mm256_castps_si256(_mm256_cmp_ps(m, _mm256_set1_ps(2.5f), _CMP_GT_OQ)));
	c = _mm256_add_epi32(c, _mm256_castps_si256(_mm256_cmp_ps(m, _mm256_set1_ps(3.5f), _CMP_GE_OQ)));
	__m256 over = _mm256_cmp_ps(m, _mm256_set1_ps(5.0f), _CMP_GT_OQ);
	c = _mm256_add_epi32(c, _mm256_castps_si256(over));
	c = _mm256_sub_epi32(_mm256_setzero_si256(), c);
	__m256 dq = _mm256_permutevar8x32_ps(mags, c);
	dq = _mm256_or_ps(dq, _mm256_andnot_ps(absmask, x)); /* x's sign (the magnitude's is +) */
	/* underflow: x != 0 and code 0; overflow: |s| > 6 */
	__m256i zero_code = _mm256_cmpeq_epi32(c, _mm256_setzero_si256());
	__m256i nonzero_x = _mm256_castps_si256(
		_mm256_cmp_ps(x, _mm256_setzero_ps(), _CMP_NEQ_OQ));
	a->under = _mm256_sub_epi32(a->under, _mm256_and_si256(zero_code, nonzero_x));
	a->over = _mm256_sub_epi32(a->over, _mm256_castps_si256(
					     _mm256_cmp_ps(m, _mm256_set1_ps(6.0f), _CMP_GT_OQ)));
	add4(a, _mm256_castps256_ps128(x), _mm256_castps256_ps128(dq));
	add4(a, _mm256_extractf128_ps(x, 1), _mm256_extractf128_ps(dq, 1));
}

static inline uint64_t lanes(__m256i v)
{
	uint32_t u[8];
	uint64_t n = 0;
	_mm256_storeu_si256((__m256i *)u, v);
	for (int k = 0; k < 8; k++)
		n += u[k];
	return n;
}

float dli_nvfp4_amax_avx2(const void *data, enum dli_dtype dtype, int64_t i0, int64_t i1)
{
	const __m256 absmask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
	__m256 m0 = _mm256_setzero_ps(), m1 = _mm256_setzero_ps();
	float m;
	int64_t i = i0;

	/* max(a, m) is m when a is NaN: NaN left out, as fmaxf leaves it. */
	for (; i + 16 <= i1; i += 16) {
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

void dli_nvfp4_rows_avx2(const struct nv_pass *ps, int64_t r0, int64_t r1, struct dli_block_terms *t)
{
	const int64_t cols = ps->cols, full = cols / DLI_NVFP4_BLOCK * DLI_NVFP4_BLOCK;
	const __m256 absmask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
	const __m256 vals = _mm256_loadu_ps(e2m1_values);
	const enum dli_dtype dtype = ps->dtype == DLI_DTYPE_F32 ? DLI_DTYPE_F32 : DLI_DTYPE_BF16;
	/* The scalar rules' constants: S_enc * float(1/6), float(1 / S_enc). */
	const float mult = ps->s_enc * (1.0f / 6.0f), s_dec = (float)(1.0 / (double)ps->s_enc);
	const int64_t group = 8 * DLI_NVFP4_BLOCK;

	for (int64_t r = r0; r < r1; r++) {
		struct acc a = { _mm256_setzero_pd(), _mm256_setzero_pd(), _mm256_setzero_pd(),
				 _mm256_setzero_pd(), _mm256_setzero_si256(), _mm256_setzero_si256() };
		uint64_t count = 0;
		int64_t c = 0;
		/* Eight blocks at a time: their scales in the lanes of one vector. */
		for (; c + group <= full; c += group) {
			float bm[8], enc[8], dqs[8], scf[8];
			int bad = 0;
			for (int k = 0; k < 8; k++) {
				int64_t i = r * cols + c + k * DLI_NVFP4_BLOCK;
				__m256 m0 = _mm256_and_ps(load8(ps->data, dtype, i), absmask);
				__m256 m1 = _mm256_and_ps(load8(ps->data, dtype, i + 8), absmask);
				__m256 nf = _mm256_or_ps(
					_mm256_cmp_ps(m0, _mm256_set1_ps(FLT_MAX), _CMP_NLE_UQ),
					_mm256_cmp_ps(m1, _mm256_set1_ps(FLT_MAX), _CMP_NLE_UQ));
				if (_mm256_movemask_ps(nf))
					bad |= 1 << k;
				bm[k] = bad >> k & 1 ? 0.0f : hmax(_mm256_max_ps(m0, m1));
			}
			__m256 vs = e4m3_round(_mm256_mul_ps(_mm256_loadu_ps(bm), _mm256_set1_ps(mult)));
			__m256 ve = _mm256_min_ps(
				_mm256_div_ps(_mm256_set1_ps(1.0f),
					      _mm256_mul_ps(vs, _mm256_set1_ps(s_dec))),
				_mm256_set1_ps(FLT_MAX));
			__m256 vd = _mm256_mul_ps(_mm256_mul_ps(vs, _mm256_set1_ps(ps->amax)),
						  _mm256_set1_ps(1.0f / 2688.0f));
			_mm256_storeu_ps(enc, ve);
			_mm256_storeu_ps(dqs, vd);
			_mm256_storeu_ps(scf, vs);
			for (int k = 0; k < 8; k++) {
				int64_t i = r * cols + c + k * DLI_NVFP4_BLOCK;
				if (bad >> k & 1) {
					dli_nvfp4_block_scalar(ps, r, c + k * DLI_NVFP4_BLOCK,
							       DLI_NVFP4_BLOCK, t);
					continue;
				}
				if (scf[k] != 0.0f) {
					if (dqs[k] < t->lo)
						t->lo = dqs[k];
					if (dqs[k] > t->hi)
						t->hi = dqs[k];
				}
				__m256 mags = _mm256_mul_ps(vals, _mm256_set1_ps(dqs[k]));
				__m256 ven = _mm256_set1_ps(enc[k]);
				elements(&a, load8(ps->data, dtype, i), ven, mags);
				elements(&a, load8(ps->data, dtype, i + 8), ven, mags);
				count += DLI_NVFP4_BLOCK;
			}
		}
		/* The rest of the whole blocks one at a time, the scale by the scalar rules. */
		for (; c < full; c += DLI_NVFP4_BLOCK) {
			int64_t i = r * cols + c;
			__m256 x0 = load8(ps->data, dtype, i), x1 = load8(ps->data, dtype, i + 8);
			__m256 m0 = _mm256_and_ps(x0, absmask), m1 = _mm256_and_ps(x1, absmask);
			/* NaN or inf anywhere: the scalar block (it leaves them out). */
			__m256 bad = _mm256_or_ps(
				_mm256_cmp_ps(m0, _mm256_set1_ps(FLT_MAX), _CMP_NLE_UQ),
				_mm256_cmp_ps(m1, _mm256_set1_ps(FLT_MAX), _CMP_NLE_UQ));
			if (_mm256_movemask_ps(bad)) {
				dli_nvfp4_block_scalar(ps, r, c, DLI_NVFP4_BLOCK, t);
				continue;
			}
			float bmax = hmax(_mm256_max_ps(m0, m1));
			uint8_t sc = dli_nvfp4_block_scale(bmax, ps->s_enc);
			float enc = dli_nvfp4_block_encode(sc, ps->s_enc);
			float dqs = dli_nvfp4_dequant_scale(sc, ps->amax);
			if (sc & 0x7f) {
				if (dqs < t->lo)
					t->lo = dqs;
				if (dqs > t->hi)
					t->hi = dqs;
			}
			/* The eight magnitudes times the factor, each product as the scalar's. */
			__m256 mags = _mm256_mul_ps(vals, _mm256_set1_ps(dqs));
			__m256 ve = _mm256_set1_ps(enc);
			elements(&a, x0, ve, mags);
			elements(&a, x1, ve, mags);
			count += DLI_NVFP4_BLOCK;
		}
		t->count += count;
		t->under += lanes(a.under);
		t->over += lanes(a.over);
		t->err += hsum(a.err);
		t->dot += hsum(a.dot);
		t->dqs += hsum(a.dqs);
		t->xs += hsum(a.xs);
		if (full < cols)
			dli_nvfp4_block_scalar(ps, r, full, cols - full, t);
	}
}
