/* The parts of TransformerEngine's NVFP4 recipe beyond the plain cast (nvfp4.c): stochastic
 * rounding of the E2M1 codes from a seeded counter-based generator, the 16 x 16 random Hadamard
 * transform and its inverse, and a fake-quantizer that applies them. Scalar: hosts emulating the
 * recipe and FakeQuant use it, the statistics do not. Rules: docs/block-scaling.md. */
#include <errno.h>
#include <float.h>
#include <math.h>
#include <stdlib.h>
#ifdef DLI_HAVE_X86_SIMD
#include <xmmintrin.h>
#endif

#include "cpu-private.h"
#include "load-private.h"
#include "nvfp4-recipe-private.h"

#define B DLI_NVFP4_BLOCK

uint64_t dli_nvfp4_mix64(uint64_t z)
{
	z += 0x9E3779B97F4A7C15ull;
	z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
	z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
	return z ^ (z >> 31);
}

static inline uint8_t rbits_keyed(uint64_t key, uint64_t index)
{
	return (uint8_t)(dli_nvfp4_mix64(key + index) >> 56);
}

uint8_t dli_nvfp4_rbits(uint64_t seed, uint64_t index)
{
	return rbits_keyed(dli_nvfp4_mix64(seed), index);
}

uint32_t dli_nvfp4_rht_signs(uint64_t seed)
{
	return seed ? (uint32_t)(dli_nvfp4_mix64(seed) & 0xffffu) : DLI_NVFP4_RHT_TE_SIGNS;
}

/* The grid spacing of E2M1 magnitudes at a (0, 0.5, ..., 2, 3, 4, 6). */
static inline float e2m1_step(float a)
{
	return a >= 4.0f ? 2.0f : a >= 2.0f ? 1.0f : 0.5f;
}

uint8_t dli_nvfp4_encode_sr(float s, uint8_t rbits)
{
	if (isnan(s))
		return 0x7;
	float a = fabsf(s);
	/* The jitter is a multiple of 2^-9 at most one step: it can carry t into the next region
	 * (1.9 + 0.5 -> 2.4), so the floor uses t's own spacing. An infinity stays infinite and
	 * saturates. */
	float t = a + (float)rbits * (1.0f / 256.0f) * e2m1_step(a);
	float st = e2m1_step(t);
	float q = floorf(t / st) * st;
	uint8_t mag = q >= 6.0f ? 7 : q >= 4.0f ? 6 : q >= 3.0f ? 5 : (uint8_t)(q * 2.0f);
	return (uint8_t)(((float_bits(s) >> 28) & 0x8) | mag);
}

/* coef[o][k]: the sign of input k in output o, +-1 (forward: s_k H_ko; inverse: s_o H_ok). */
static void rht_coef(uint32_t signs, bool inverse, double coef[B][B])
{
	for (int o = 0; o < B; o++)
		for (int k = 0; k < B; k++) {
			int h = 0;
			for (unsigned b = (unsigned)(k & o); b; b &= b - 1)
				h ^= 1;
			coef[o][k] = (h ^ (signs >> (inverse ? o : k))) & 1 ? -1.0 : 1.0;
		}
}

static inline void rht16(const float *x, ptrdiff_t stride, double coef[B][B], float *y,
			 ptrdiff_t ystride)
{
	double in[B];

	for (int i = 0; i < B; i++)
		in[i] = x[i * stride];
	for (int o = 0; o < B; o++) {
		/* in index order; the sign on each term (exact), so that zeros sum to +0 */
		double acc = 0.0;
		for (int k = 0; k < B; k++)
			acc += coef[o][k] * in[k];
		y[o * ystride] = (float)(acc * 0.25);
	}
}

void dli_nvfp4_rht16(const float *x, ptrdiff_t stride, uint32_t signs, bool inverse, float *y,
		     ptrdiff_t ystride)
{
	double coef[B][B];

	rht_coef(signs, inverse, coef);
	rht16(x, stride, coef, y, ystride);
}

static int rht_matrix(float *w, int64_t rows, int64_t cols, bool columnwise, uint32_t signs,
		      bool inverse)
{
	double coef[B][B];

	if ((columnwise ? rows : cols) % B)
		return -EINVAL;
	rht_coef(signs, inverse, coef);
	if (columnwise) {
		for (int64_t r = 0; r < rows; r += B)
			for (int64_t c = 0; c < cols; c++)
				rht16(w + r * cols + c, (ptrdiff_t)cols, coef, w + r * cols + c,
				      (ptrdiff_t)cols);
	} else {
		for (int64_t i = 0; i < rows * cols; i += B)
			rht16(w + i, 1, coef, w + i, 1);
	}
	return 0;
}

static bool shape_ok(const void *data, enum dli_dtype dtype, int64_t rows, int64_t cols)
{
	return (dtype == DLI_DTYPE_F32 || dtype == DLI_DTYPE_F16 || dtype == DLI_DTYPE_BF16) &&
	       rows >= 0 && cols >= 0 && !(cols && rows > INT64_MAX / cols / 4) &&
	       !(rows * cols > 0 && !data);
}

int dli_cpu_nvfp4_rht(const void *data, enum dli_dtype dtype, int64_t rows, int64_t cols,
		      bool columnwise, uint32_t signs, bool inverse, float *out)
{
	if (!shape_ok(data, dtype, rows, cols) || (rows * cols > 0 && !out))
		return -EINVAL;
	if ((columnwise ? rows : cols) % B)
		return -EINVAL;
	for (int64_t i = 0; i < rows * cols; i++)
		out[i] = load(data, dtype, i);
	return rht_matrix(out, rows, cols, columnwise, signs, inverse);
}

/* One block of the stochastic pass: rows [r0, r0 + h), columns [c0, c0 + w) of the f32 matrix w. */
static void sr_block(const float *x, int64_t rows, int64_t cols, bool columnwise, int64_t r0,
		     int64_t h, int64_t c0, int64_t w, float s_enc, float amax, uint64_t key,
		     float *out)
{
	float bmax = 0.0f;

	for (int64_t r = r0; r < r0 + h; r++)
		for (int64_t c = c0; c < c0 + w; c++) {
			float a = fabsf(x[r * cols + c]);
			bmax = a > bmax ? a : bmax; /* NaN left out */
		}
	uint8_t sc = dli_nvfp4_block_scale(bmax, s_enc);
	float enc = dli_nvfp4_block_encode(sc, s_enc);
	float dqs = dli_nvfp4_dequant_scale(sc, amax);
	for (int64_t r = r0; r < r0 + h; r++)
		for (int64_t c = c0; c < c0 + w; c++) {
			uint64_t idx = (uint64_t)(columnwise ? c * rows + r : r * cols + c);
			uint8_t q =
			    dli_nvfp4_encode_sr(x[r * cols + c] * enc, rbits_keyed(key, idx));
			out[r * cols + c] = dli_nvfp4_decode(q) * dqs;
		}
}

/* The stochastic fake-quantizer over an f32 matrix, in the floating-point environment the rules
 * assume (nearest-even, no FTZ/DAZ), the thread's own restored after. */
static void sr_fake(const float *x, int64_t rows, int64_t cols, int dims, bool columnwise,
		    uint64_t seed, float *out)
{
	float amax = 0.0f;
	unsigned csr = dli_csr_exact();
	for (int64_t i = 0; i < rows * cols; i++) {
		float a = fabsf(x[i]);
		amax = a > amax ? a : amax;
	}
	float s_enc = dli_nvfp4_global_scale(amax);
	uint64_t key = dli_nvfp4_mix64(seed);
	for (int64_t r = 0; r < rows; r += B) {
		int64_t h = rows - r < B ? rows - r : B;
		if (dims == 2) {
			for (int64_t c = 0; c < cols; c += B)
				sr_block(x, rows, cols, false, r, h, c, cols - c < B ? cols - c : B,
					 s_enc, amax, key, out);
		} else if (columnwise) {
			for (int64_t c = 0; c < cols; c++)
				sr_block(x, rows, cols, true, r, h, c, 1, s_enc, amax, key, out);
		} else {
			for (int64_t rr = r; rr < r + h; rr++)
				for (int64_t c = 0; c < cols; c += B)
					sr_block(x, rows, cols, false, rr, 1, c,
						 cols - c < B ? cols - c : B, s_enc, amax, key,
						 out);
		}
	}
	dli_csr_restore(csr);
}

int dli_cpu_nvfp4_fake_quantize_opts(const void *data, enum dli_dtype dtype, int64_t rows,
				     int64_t cols, int dims, bool columnwise,
				     const struct dli_nvfp4_opts *opts,
				     const struct dli_cpu_options *o, float *out)
{
	if (!opts || (!opts->stochastic && !opts->rht))
		return dli_cpu_nvfp4_fake_quantize(data, dtype, rows, cols, dims, columnwise, o,
						   out);
	if (!shape_ok(data, dtype, rows, cols) || (dims != 1 && dims != 2) ||
	    (rows * cols > 0 && !out))
		return -EINVAL;
	/* The transform runs along 1-D blocks; TransformerEngine applies it to no 16 x 16 tile. */
	if (opts->rht && (dims != 1 || (columnwise ? rows : cols) % B))
		return -EINVAL;
	if (rows * cols == 0)
		return 0;
	enum dli_simd simd = dli_cpu_simd(o);
	if (simd == DLI_SIMD_AUTO)
		return -ENOTSUP;
	/* A float copy of the input, transformed in place when asked. */
	float *w = malloc((size_t)(rows * cols) * sizeof(float));
	int r = 0;
	if (!w)
		return -ENOMEM;
	for (int64_t i = 0; i < rows * cols; i++)
		w[i] = load(data, dtype, i);
	if (opts->rht)
		r = rht_matrix(w, rows, cols, columnwise, opts->signs, false);
	if (!r && opts->stochastic)
		sr_fake(w, rows, cols, dims, columnwise, opts->seed, out);
	else if (!r)
		r = dli_cpu_nvfp4_fake_quantize(w, DLI_DTYPE_F32, rows, cols, dims, columnwise, o,
						out);
	if (!r && opts->rht)
		r = rht_matrix(out, rows, cols, columnwise, opts->signs, true);
	free(w);
	return r;
}
