/* NVFP4 in the C kernels and through the core (docs/block-scaling.md, "NVFP4"): the scale and
 * rounding rules at their edges, the compare pass against a naive reference written here (per
 * block: amax, the E4M3 scale through the FP8 encoder the fp8 tests check, E2M1 by searching the
 * nearest of the eight magnitudes, ties to the even one) for f32, f16 and bf16 input, thread-count
 * independence, and LogNvfp4TensorStats' statistics and errors through the real core. The
 * bit-exactness against ml_dtypes over every bf16 pattern is interop.py's. */
#include <errno.h>
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <dlinspect/dlinspect.h>

#include "check.h"
#include "dli-test.h"
#include "kernels-private.h"

#define FC1 "model.layers.1.mlp.fc1"

#define TEST_RNG_SEED 0x2545f4914f6cdd1dull
#include "test-rng.h"

/* Blocks of 16 with their own magnitude, spread over 2^-30 .. 2^10, values within 2^-8 of it. */
static float random_value(int64_t i)
{
	static int block_exp;
	if (i % 16 == 0)
		block_exp = (int)(next_u64() % 41) - 30;
	double u = (double)(next_u64() >> 11) / 9007199254740992.0;
	float v = ldexpf((float)(1.0 + u), block_exp - (int)(next_u64() % 8));
	return next_u64() & 1 ? -v : v;
}

/* The nearest E2M1 magnitude by search; a tie goes to the even code (index). */
static int naive_e2m1(float s)
{
	static const float v[8] = {0, 0.5f, 1, 1.5f, 2, 3, 4, 6};
	float a = fabsf(s);
	int best = 0;
	if (a > 6)
		a = 6;
	for (int k = 1; k < 8; k++) {
		float d = fabsf(a - v[k]), db = fabsf(a - v[best]);
		if (d < db || (d == db && k % 2 == 0))
			best = k;
	}
	return (signbit(s) ? 8 : 0) | best;
}

struct terms {
	uint64_t count, under;
	double err;
};

/* rows x cols, 1 x 16 blocks (dims 1) or 16 x 16 tiles (dims 2), row-wise, with the global
 * scale from amax; NaN and the infinities are left out of the compare (a block's amax leaves
 * NaN out only). */
static void naive_amax(const float *x, int64_t rows, int64_t cols, int dims, float amax,
		       struct terms *t)
{
	static const float v[8] = {0, 0.5f, 1, 1.5f, 2, 3, 4, 6};
	memset(t, 0, sizeof(*t));
	float s_enc = amax == 0 ? 1.0f : fminf(2688.0f / amax, FLT_MAX);
	if (s_enc == 0)
		s_enc = 1;
	float s_dec = (float)(1.0 / s_enc);
	int64_t bh = dims == 2 ? 16 : 1;
	for (int64_t r0 = 0; r0 < rows; r0 += bh)
		for (int64_t c0 = 0; c0 < cols; c0 += 16) {
			float bmax = 0;
			for (int64_t r = r0; r < r0 + bh && r < rows; r++)
				for (int64_t c = c0; c < c0 + 16 && c < cols; c++)
					if (fabsf(x[r * cols + c]) > bmax)
						bmax = fabsf(x[r * cols + c]);
			float sdb = bmax * (s_enc * (1.0f / 6.0f));
			uint8_t sc = dli_fp8_encode(sdb, DLI_DTYPE_F8E4M3);
			float scf = dli_fp8_decode(sc, DLI_DTYPE_F8E4M3);
			float enc = fminf(1.0f / (scf * s_dec), FLT_MAX);
			float factor = scf * amax * (1.0f / 2688.0f);
			for (int64_t r = r0; r < r0 + bh && r < rows; r++)
				for (int64_t c = c0; c < c0 + 16 && c < cols; c++) {
					float xv = x[r * cols + c];
					if (isnan(xv) || isinf(xv))
						continue;
					int q = naive_e2m1(xv * enc);
					float dq = (q & 8 ? -v[q & 7] : v[q & 7]) * factor;
					t->count++;
					t->under += xv != 0 && (q & 7) == 0;
					t->err += ((double)xv - dq) * ((double)xv - dq);
				}
		}
}

/* The same with the tensor's own amax. */
static void naive(const float *x, int64_t rows, int64_t cols, int dims, struct terms *t)
{
	float amax = 0;
	for (int64_t i = 0; i < rows * cols; i++)
		if (fabsf(x[i]) > amax)
			amax = fabsf(x[i]);
	naive_amax(x, rows, cols, dims, amax, t);
}

static bool close_to(double a, double b, double tol)
{
	return a == b || fabs(a - b) <= tol * fmax(fabs(a), fabs(b));
}

/* The sums of a pass that may take the AVX2 path, against double sums: that path sums in float
 * lanes within a group of blocks (widened to double after each), as the MXFP8 pass does, so to
 * the MXFP8 tests' 1e-5 (tests/mx/test_mx.c). The scalar path is held to 1e-12. */
#define SIMD_SUMS 1e-5

static void test_rules(void)
{
	CHECK(dli_nvfp4_global_scale(0.0f) == 1.0f);
	CHECK(dli_nvfp4_global_scale(INFINITY) == 1.0f);
	CHECK(dli_nvfp4_global_scale(2688.0f) == 1.0f);
	CHECK(dli_nvfp4_global_scale(1e-45f) == FLT_MAX); /* 2688 / 2^-149 overflows */
	CHECK(dli_nvfp4_global_scale(1.0f) == 2688.0f);
	/* A block whose amax is the tensor's gets 448 (= amax * 2688 / amax / 6). */
	CHECK_INT(dli_nvfp4_block_scale(3.0f, dli_nvfp4_global_scale(3.0f)), 0x7e);
	CHECK_INT(dli_nvfp4_block_scale(INFINITY, 1.0f), 0x7e); /* saturates to 448 */
	CHECK_INT(dli_nvfp4_block_scale(0.0f, 2688.0f), 0);
	CHECK(dli_nvfp4_block_encode(0, 2688.0f) == FLT_MAX); /* 1 / 0 clamped */
	/* Ties to even, saturation, the sign of zero, NaN. */
	static const float in[] = {0.25f, 0.2500001f, 0.75f, 1.25f, 1.75f, 2.5f, 3.5f, 5.0f,
				   5.0001f, 1e30f, INFINITY, -0.0f, -0.1f, -5.5f};
	static const uint8_t want[] = {0, 1, 2, 2, 4, 4, 6, 6, 7, 7, 7, 8, 8, 15};
	for (size_t i = 0; i < sizeof(in) / sizeof(in[0]); i++) {
		if (dli_nvfp4_encode(in[i]) != want[i])
			fprintf(stderr, "encode(%g) = %#x, expected %#x\n", in[i],
				dli_nvfp4_encode(in[i]), want[i]);
		CHECK_INT(dli_nvfp4_encode(in[i]), want[i]);
		CHECK_INT(dli_nvfp4_encode(in[i]), naive_e2m1(in[i]));
	}
	CHECK_INT(dli_nvfp4_encode(NAN), 7);
	CHECK(dli_nvfp4_decode(15) == -6.0f && dli_nvfp4_decode(3) == 1.5f);
	int64_t sr, sc;
	dli_nvfp4_scale_shape(129, 33, false, &sr, &sc);
	CHECK(sr == 256 && sc == 4);
	dli_nvfp4_scale_shape(129, 33, true, &sr, &sc);
	CHECK(sr == 128 && sc == 12);
}

static uint16_t bf16_of(float f) /* truncation: the test's values need not round */
{
	uint32_t u;
	memcpy(&u, &f, 4);
	return (uint16_t)(u >> 16);
}

static float of_bf16(uint16_t h)
{
	uint32_t u = (uint32_t)h << 16;
	float f;
	memcpy(&f, &u, 4);
	return f;
}

/* n f32 values and their n bf16 patterns (a test fills them); false, with nothing left allocated
 * and the failure checked, when memory is short. */
static bool alloc_inputs(int64_t n, float **x, uint16_t **h)
{
	*x = malloc((size_t)n * sizeof(float));
	*h = malloc((size_t)n * sizeof(uint16_t));
	CHECK(*x && *h);
	if (*x && *h)
		return true;
	free(*x);
	free(*h);
	return false;
}

static void test_passes(void)
{
	static const int64_t shapes[][2] = {{1, 1}, {15, 17}, {17, 15}, {31, 33}, {33, 129},
					    {129, 127}, {64, 256}};
	for (size_t s = 0; s < sizeof(shapes) / sizeof(shapes[0]); s++) {
		int64_t rows = shapes[s][0], cols = shapes[s][1], n = rows * cols;
		float *x;
		uint16_t *h;
		if (!alloc_inputs(n, &x, &h))
			return;
		for (int64_t i = 0; i < n; i++) {
			h[i] = bf16_of(random_value(i));
			x[i] = of_bf16(h[i]);
		}
		for (int dims = 1; dims <= 2; dims++) {
			struct terms t;
			struct dli_stats_record r32, r16;
			naive(x, rows, cols, dims, &t);
			CHECK_INT(dli_cpu_nvfp4_compare(x, DLI_DTYPE_F32, rows, cols, dims, false, NULL,
							&r32), 0);
			CHECK_INT(dli_cpu_nvfp4_compare(h, DLI_DTYPE_BF16, rows, cols, dims, false, NULL,
							&r16), 0);
			CHECK(r32.fp8_count == t.count && r32.underflows == t.under);
			CHECK(close_to(r32.err_sq, t.err, SIMD_SUMS));
			if (!close_to(r32.err_sq, t.err, SIMD_SUMS) || r32.underflows != t.under)
				fprintf(stderr, "%lldx%lld dims %d: under %llu/%llu err %.17g/%.17g\n",
					(long long)rows, (long long)cols, dims,
					(unsigned long long)r32.underflows,
					(unsigned long long)t.under, r32.err_sq, t.err);
			CHECK(r16.underflows == r32.underflows &&
			      close_to(r16.err_sq, r32.err_sq, SIMD_SUMS));
			/* The scalar reference and the dispatcher's path (AVX2 where there is one). */
			struct dli_cpu_options so = {DLI_SIMD_SCALAR, 1};
			struct dli_stats_record rs;
			CHECK_INT(dli_cpu_nvfp4_compare(h, DLI_DTYPE_BF16, rows, cols, dims, false, &so,
							&rs), 0);
			CHECK(rs.fp8_count == t.count && rs.underflows == t.under &&
			      close_to(rs.err_sq, t.err, 1e-12));
			CHECK(rs.fp8_count == r16.fp8_count && rs.underflows == r16.underflows &&
			      rs.overflows == r16.overflows && close_to(rs.err_sq, r16.err_sq, SIMD_SUMS) &&
			      close_to(rs.dot, r16.dot, SIMD_SUMS) &&
			      close_to(rs.dq_sq, r16.dq_sq, SIMD_SUMS) &&
			      close_to(rs.x_sq, r16.x_sq, SIMD_SUMS) &&
			      rs.scale_inv_min == r16.scale_inv_min &&
			      rs.scale_inv_max == r16.scale_inv_max);
		}
		free(x);
		free(h);
	}
}

static void test_threads(void)
{
	int64_t rows = 1024, cols = 2048, n = rows * cols;
	float *x = malloc((size_t)n * sizeof(float));
	CHECK(x != NULL);
	if (!x)
		return;
	for (int64_t i = 0; i < n; i++)
		x[i] = random_value(i);
	for (int dims = 1; dims <= 2; dims++) {
		struct dli_stats_record a, b;
		struct dli_cpu_options o1 = {DLI_SIMD_AUTO, 1}, o4 = {DLI_SIMD_AUTO, 4};
		CHECK_INT(dli_cpu_nvfp4_compare(x, DLI_DTYPE_F32, rows, cols, dims, dims == 1, &o1, &a),
			  0);
		CHECK_INT(dli_cpu_nvfp4_compare(x, DLI_DTYPE_F32, rows, cols, dims, dims == 1, &o4, &b),
			  0);
		CHECK(a.fp8_count == b.fp8_count && a.underflows == b.underflows &&
		      a.err_sq == b.err_sq && a.dot == b.dot && a.x_sq == b.x_sq);
	}
	free(x);
}

static bool same_record(const struct dli_stats_record *a, const struct dli_stats_record *b)
{
	return a->fp8_count == b->fp8_count && a->underflows == b->underflows &&
	       a->overflows == b->overflows && !memcmp(&a->err_sq, &b->err_sq, sizeof(double)) &&
	       !memcmp(&a->dot, &b->dot, sizeof(double)) &&
	       !memcmp(&a->dq_sq, &b->dq_sq, sizeof(double)) &&
	       !memcmp(&a->x_sq, &b->x_sq, sizeof(double)) &&
	       a->scale_inv_min == b->scale_inv_min && a->scale_inv_max == b->scale_inv_max;
}

static bool near_sum(double a, double b)
{
	return (isnan(a) && isnan(b)) || close_to(a, b, SIMD_SUMS);
}

static bool near_record(const struct dli_stats_record *a, const struct dli_stats_record *b)
{
	return a->fp8_count == b->fp8_count && a->underflows == b->underflows &&
	       a->overflows == b->overflows && near_sum(a->err_sq, b->err_sq) &&
	       near_sum(a->dot, b->dot) && near_sum(a->dq_sq, b->dq_sq) &&
	       near_sum(a->x_sq, b->x_sq) && a->scale_inv_min == b->scale_inv_min &&
	       a->scale_inv_max == b->scale_inv_max;
}

/* The compare given the amax (what the core passes from its statistics pass, so that the tensor
 * is read once) gives the record of the compare that finds it, on every path, layout and dtype,
 * with NaN and infinities in the data too (and the dispatcher's path the scalar one's); given the
 * sum of finite x^2 too, the same record where that is not used, and where it is (the AVX2 pass on
 * bf16, row-wise) x_sq is that sum and the other terms near; given another amax, the naive
 * reference's result with that amax; given NaN or a negative amax, -EINVAL. */
static void test_given_amax(void)
{
	static const int64_t shapes[][2] = {{1, 1}, {15, 17}, {33, 129}, {48, 4096}};
	static const enum dli_dtype dtypes[] = {DLI_DTYPE_F32, DLI_DTYPE_BF16, DLI_DTYPE_F16};
	static const enum dli_simd paths[] = {DLI_SIMD_SCALAR, DLI_SIMD_AUTO};
	for (size_t s = 0; s < sizeof(shapes) / sizeof(shapes[0]); s++) {
		int64_t rows = shapes[s][0], cols = shapes[s][1], n = rows * cols;
		float *x;
		uint16_t *h;
		if (!alloc_inputs(n, &x, &h))
			return;
		uint16_t *f16 = malloc((size_t)n * sizeof(uint16_t));
		CHECK(f16 != NULL);
		if (!f16) {
			free(x);
			free(h);
			return;
		}
		/* kinds: 1 NaN and infinities, 2 zeros (every third element and some whole
		 * blocks), 3 zeros and NaN (a finite amax: the known zeros' accounting then
		 * meets the blocks set apart for NaN) */
		for (int kind = 0; kind < 4; kind++) {
			const int nonfinite = kind & 1, zeros = kind >> 1;
			for (int64_t i = 0; i < n; i++) {
				float v = random_value(i);
				if (zeros && (i % 3 == 0 || (i / 16) % 11 == 5))
					v = i & 1 ? -0.0f : 0.0f;
				h[i] = bf16_of(v);
				x[i] = of_bf16(h[i]);
				/* any finite f16 pattern (an all-ones exponent loses its top bit) */
				f16[i] = (uint16_t)next_u64();
				if ((f16[i] & 0x7c00) == 0x7c00)
					f16[i] &= 0xbfff;
			}
			if (nonfinite)
				for (int64_t i = 7; i < n; i += 1000) {
					x[i] = i % 3 || zeros ? NAN : (i % 2 ? INFINITY : -INFINITY);
					h[i] = bf16_of(x[i]);
					f16[i] = i % 3 ? 0x7e00 : (i % 2 ? 0x7c00 : 0xfc00);
				}
			for (size_t d = 0; d < sizeof(dtypes) / sizeof(dtypes[0]); d++) {
				const void *data = dtypes[d] == DLI_DTYPE_F32 ? (const void *)x
						   : dtypes[d] == DLI_DTYPE_BF16 ? (const void *)h
										 : (const void *)f16;
				struct dli_stats_record st;
				double fsq;
				CHECK_INT(dli_cpu_stats_finite_sq(data, dtypes[d], n, NULL, &st, &fsq),
					  0);
				struct dli_stats_record scalar[3];
				for (size_t p = 0; p < 2; p++)
					for (int layout = 0; layout < 3; layout++) {
						struct dli_cpu_options o = {paths[p], 1};
						int dims = layout == 2 ? 2 : 1;
						bool colwise = layout == 1;
						struct dli_stats_record a, b, k, w;
						CHECK_INT(dli_cpu_nvfp4_compare(data, dtypes[d], rows, cols,
										dims, colwise, &o, &a),
							  0);
						CHECK_INT(dli_cpu_nvfp4_compare_known(
								  data, dtypes[d], rows, cols, dims, colwise,
								  (float)st.amax, NAN, 0, &o, &b),
							  0);
						CHECK_INT(dli_cpu_nvfp4_compare_known(
								  data, dtypes[d], rows, cols, dims, colwise,
								  (float)st.amax, fsq, st.zero_count, &o, &k),
							  0);
						/* a count of zeros the data contradict (none, where
						 * the blocks set apart hold some): counted again */
						if (kind == 3) {
							CHECK_INT(dli_cpu_nvfp4_compare_known(
									  data, dtypes[d], rows, cols,
									  dims, colwise, (float)st.amax,
									  fsq, 0, &o, &w),
								  0);
							CHECK(same_record(&a, &w));
						}
						CHECK(same_record(&a, &k) ||
						      (p && dtypes[d] == DLI_DTYPE_BF16 && layout == 0 &&
						       near_record(&a, &k) && k.x_sq == fsq));
						if (!same_record(&a, &b))
							fprintf(stderr,
								"%lldx%lld dtype %d path %d layout %d "
								"nonfinite %d: err %.17g / %.17g\n",
								(long long)rows, (long long)cols,
								(int)dtypes[d], (int)paths[p], layout,
								nonfinite, a.err_sq, b.err_sq);
						CHECK(same_record(&a, &b));
						/* and the scalar path's, but for the AVX2
						 * path's float sums (NaN and inf where it
						 * has them) */
						if (!p)
							scalar[layout] = a;
						else
							CHECK(near_record(&scalar[layout], &a));
					}
			}
			/* Four times the amax of the finite data: every block scale smaller, against
			 * the naive reference with that amax. */
			for (int dims = 1; !nonfinite && dims <= 2; dims++) {
				float amax = 0;
				for (int64_t i = 0; i < n; i++)
					amax = fabsf(x[i]) > amax ? fabsf(x[i]) : amax;
				struct terms t;
				struct dli_stats_record r;
				naive_amax(x, rows, cols, dims, 4 * amax, &t);
				CHECK_INT(dli_cpu_nvfp4_compare_known(x, DLI_DTYPE_F32, rows, cols, dims,
								      false, 4 * amax, NAN, 0, NULL, &r),
					  0);
				CHECK(r.fp8_count == t.count && r.underflows == t.under &&
				      close_to(r.err_sq, t.err, SIMD_SUMS));
			}
		}
		free(x);
		free(h);
		free(f16);
	}
	struct dli_stats_record r;
	float one = 1.0f;
	CHECK_INT(dli_cpu_nvfp4_compare_known(&one, DLI_DTYPE_F32, 1, 1, 1, false, NAN, 1.0, 0, NULL,
					      &r),
		  -EINVAL);
	CHECK_INT(dli_cpu_nvfp4_compare_known(&one, DLI_DTYPE_F32, 1, 1, 1, false, -1.0f, 1.0, 0, NULL,
					      &r),
		  -EINVAL);
}

/* Puts one of the kinds of block holding NaN or an infinity into the 16 values at b (kind 0
 * leaves them as they are); kinds up to NAN_KINDS hold NaN only. */
#define NAN_KINDS 7
#define NONFINITE_KINDS 10
static void make_nonfinite(float *b, int kind)
{
	for (int k = 0; k < 16; k++) {
		switch (kind) {
		case 1: /* the first element */
			b[k] = k == 0 ? NAN : b[k];
			break;
		case 2: /* the last, with its sign bit set */
			b[k] = k == 15 ? -NAN : b[k];
			break;
		case 3: /* several, in both halves */
			b[k] = k == 3 || k == 7 || k == 8 || k == 12 ? NAN : b[k];
			break;
		case 4: /* all */
			b[k] = NAN;
			break;
		case 5: /* all but one */
			b[k] = k == 9 ? b[k] : NAN;
			break;
		case 6: /* among zeros */
			b[k] = k == 4 ? NAN : 0.0f;
			break;
		case 7: /* +inf: the scale saturates */
			b[k] = k == 5 ? INFINITY : b[k];
			break;
		case 8: /* -inf and NaN */
			b[k] = k == 10 ? -INFINITY : k == 2 ? NAN : b[k];
			break;
		case 9: /* all infinite */
			b[k] = k % 2 ? INFINITY : -INFINITY;
			break;
		}
	}
}

/* Blocks holding NaN or an infinity, which the AVX2 pass leaves out of its groups and does eight
 * at a time (with a row's last whole blocks), their NaN and infinities masked out: every kind of
 * make_nonfinite in rows of two segments of groups with whole and partial blocks after them, of
 * one group and whole blocks, and of whole blocks only. With NaN only (a finite amax), against
 * the naive reference and the scalar path; with infinities (an infinite amax: every nonzero
 * block scale's factor infinite), the scalar path's counts and scale range, on one thread and
 * two; and where no finite element rounds to 0, the sums infinite, not NaN (elements left out
 * must not add 0 * inf). */
static void test_nonfinite_blocks(void)
{
	static const int64_t shapes[][2] = {
		{3, 8192 + 2 * 128 + 3 * 16 + 5}, {5, 128 + 7 * 16}, {4, 5 * 16}, {2, 4096}};
	for (size_t s = 0; s < sizeof(shapes) / sizeof(shapes[0]); s++) {
		int64_t rows = shapes[s][0], cols = shapes[s][1], n = rows * cols;
		float *x;
		uint16_t *h;
		if (!alloc_inputs(n, &x, &h))
			return;
		for (int with_inf = 0; with_inf < 2; with_inf++) {
			int kinds = with_inf ? NONFINITE_KINDS : NAN_KINDS;
			uint64_t left_out = 0;
			for (int64_t i = 0; i < n; i++)
				x[i] = of_bf16(bf16_of(random_value(i)));
			/* half the whole blocks clean, the others of every kind in turn */
			for (int64_t r = 0, b = 0; r < rows; r++)
				for (int64_t c = 0; c + 16 <= cols; c += 16, b++)
					if (next_u64() & 1)
						make_nonfinite(x + r * cols + c, 1 + (int)(b % (kinds - 1)));
			for (int64_t i = 0; i < n; i++) {
				h[i] = bf16_of(x[i]);
				left_out += isnan(x[i]) || isinf(x[i]);
			}
			for (int d = 0; d < 2; d++) {
				enum dli_dtype dtype = d ? DLI_DTYPE_BF16 : DLI_DTYPE_F32;
				const void *data = d ? (const void *)h : (const void *)x;
				struct dli_stats_record st, scalar, one, two;
				struct dli_cpu_options so = {DLI_SIMD_SCALAR, 1}, o1 = {DLI_SIMD_AUTO, 1},
						       o2 = {DLI_SIMD_AUTO, 2};
				double fsq;
				CHECK_INT(dli_cpu_stats_finite_sq(data, dtype, n, NULL, &st, &fsq), 0);
				CHECK(with_inf ? isinf(st.amax) : isfinite(st.amax));
				/* given the sum of finite x^2 as the core gives it: the bf16 rows' AVX2
				 * groups leave theirs out */
				CHECK_INT(dli_cpu_nvfp4_compare_known(data, dtype, rows, cols, 1, false,
								      (float)st.amax, NAN, 0, &so, &scalar),
					  0);
				CHECK_INT(dli_cpu_nvfp4_compare_known(data, dtype, rows, cols, 1, false,
								      (float)st.amax, fsq, st.zero_count, &o1,
								      &one),
					  0);
				CHECK_INT(dli_cpu_nvfp4_compare_known(data, dtype, rows, cols, 1, false,
								      (float)st.amax, fsq, st.zero_count, &o2,
								      &two),
					  0);
				CHECK(scalar.fp8_count == (uint64_t)n - left_out);
				if (!near_record(&scalar, &one) || !near_record(&scalar, &two))
					fprintf(stderr,
						"%lldx%lld dtype %d inf %d: count %llu / %llu / %llu "
						"under %llu / %llu over %llu / %llu err %.17g / %.17g "
						"scale %g..%g / %g..%g\n",
						(long long)rows, (long long)cols, (int)dtype, with_inf,
						(unsigned long long)scalar.fp8_count,
						(unsigned long long)one.fp8_count,
						(unsigned long long)two.fp8_count,
						(unsigned long long)scalar.underflows,
						(unsigned long long)one.underflows,
						(unsigned long long)scalar.overflows,
						(unsigned long long)one.overflows, scalar.err_sq, one.err_sq,
						scalar.scale_inv_min, scalar.scale_inv_max,
						one.scale_inv_min, one.scale_inv_max);
				CHECK(near_record(&scalar, &one));
				CHECK(near_record(&scalar, &two));
				if (with_inf)
					continue;
				struct terms t;
				naive_amax(x, rows, cols, 1, (float)st.amax, &t);
				CHECK(one.fp8_count == t.count && one.underflows == t.under &&
				      close_to(one.err_sq, t.err, SIMD_SUMS) &&
				      close_to(scalar.err_sq, t.err, 1e-12));
			}
		}
		free(x);
		free(h);
	}

	/* magnitudes 1 .. 1.75 (no code 0 in their blocks), blocks all infinite, all NaN and with
	 * a NaN, among the groups and the last whole blocks of the rows */
	enum { ROWS = 2, COLS = 2 * 128 + 3 * 16 };
	static float y[ROWS * COLS];
	static const int64_t blocks[][2] = {{0, 3}, {1, 17}, {4, 1}, {0, 16}, {9, 17}, {4, 18}};
	for (int64_t i = 0; i < ROWS * COLS; i++)
		y[i] = 1.0f + (float)(i % 7) / 8.0f;
	for (size_t b = 0; b < sizeof(blocks) / sizeof(blocks[0]); b++)
		make_nonfinite(y + blocks[b][1] * 16, (int)blocks[b][0]);
	struct dli_stats_record scalar, one;
	struct dli_cpu_options so = {DLI_SIMD_SCALAR, 1}, o1 = {DLI_SIMD_AUTO, 1};
	CHECK_INT(dli_cpu_nvfp4_compare_known(y, DLI_DTYPE_F32, ROWS, COLS, 1, false, INFINITY, NAN,
					      0, &so, &scalar),
		  0);
	CHECK_INT(dli_cpu_nvfp4_compare_known(y, DLI_DTYPE_F32, ROWS, COLS, 1, false, INFINITY, NAN,
					      0, &o1, &one),
		  0);
	CHECK(isinf(scalar.err_sq) && isinf(scalar.dq_sq) && isfinite(scalar.x_sq));
	CHECK(near_record(&scalar, &one));
}

/* Tensors whose amax is near 2^-100, where the AVX2 pass hands over to the scalar one (below it,
 * dequantized values could be subnormal): blocks spread down into the subnormals, both sides of
 * that line give the naive reference's counts and sums and the scalar path's record. */
static void test_tiny_amax(void)
{
	int64_t rows = 8, cols = 1024, n = rows * cols;
	float *x = malloc((size_t)n * sizeof(float));
	CHECK(x != NULL);
	if (!x)
		return;
	float amax = 0;
	for (int64_t i = 0; i < n; i++) {
		x[i] = random_value(i);
		amax = fabsf(x[i]) > amax ? fabsf(x[i]) : amax;
	}
	/* amax in [2^-99, 2^-98), [2^-100, 2^-99), [2^-101, 2^-100) and [2^-121, 2^-120), where
	 * most dequantized values are subnormal */
	static const int targets[] = {-99, -100, -101, -121};
	int exponent = ilogbf(amax);
	for (size_t k = 0; k < sizeof(targets) / sizeof(targets[0]); k++) {
		for (int64_t i = 0; i < n; i++)
			x[i] = ldexpf(x[i], targets[k] - exponent);
		exponent = targets[k];
		struct terms t;
		struct dli_stats_record a, s;
		struct dli_cpu_options so = {DLI_SIMD_SCALAR, 1};
		naive(x, rows, cols, 1, &t);
		CHECK_INT(dli_cpu_nvfp4_compare(x, DLI_DTYPE_F32, rows, cols, 1, false, NULL, &a), 0);
		CHECK_INT(dli_cpu_nvfp4_compare(x, DLI_DTYPE_F32, rows, cols, 1, false, &so, &s), 0);
		CHECK(a.fp8_count == t.count && a.underflows == t.under &&
		      close_to(a.err_sq, t.err, SIMD_SUMS));
		CHECK(near_record(&s, &a));
	}
	free(x);
}

/* ---- Through the core ---- */

static double logged(const char *name)
{
	char buf[1024];
	FILE *f = open_log(STATS_LOG);
	double v = NAN;
	bool found = false;
	while (f && fgets(buf, sizeof buf, f)) {
		const char *nm = strstr(buf, " - INFO - ");
		const char *val = strstr(buf, "value=");
		if (!nm || !val)
			continue;
		nm += strlen(" - INFO - ");
		if (strncmp(nm, name, strlen(name)) || nm[strlen(name)] != ' ')
			continue;
		v = strtod(val + strlen("value="), NULL);
		found = true;
	}
	if (f)
		fclose(f);
	if (!found)
		fprintf(stderr, "nothing logged as %s\n", name);
	CHECK(found);
	return v;
}

/* A logged value (%.9g) of a pass that may take the AVX2 path: to SIMD_SUMS. */
static void check_logged(const char *name, double want)
{
	double got = logged(name);
	bool ok = got == want || fabs(got - want) <= SIMD_SUMS * fmax(fabs(want), 1e-300);
	if (!ok)
		fprintf(stderr, "%s = %.17g, expected %.17g\n", name, got, want);
	CHECK(ok);
}

static void test_feature(void)
{
	struct dli_context *ctx = open_yaml(
		"nv:\n  enabled: True\n  layers: {layer_name_regex_pattern: fc1}\n"
		"  transformer_engine:\n"
		"    LogNvfp4TensorStats:\n"
		"      enabled: True\n"
		"      tensors: [activation, weight]\n"
		"      stats: [underflows%, mse]\n",
		NULL);
	CHECK(ctx != NULL);
	if (!ctx)
		return;
	struct dli_layer *l = layer(ctx, FC1);
	int64_t rows = 48, cols = 40, n = rows * cols;
	static float x[48 * 40];
	for (int64_t i = 0; i < n; i++)
		x[i] = random_value(i);
	struct dli_tensor t = {.data = x, .dtype = DLI_DTYPE_F32, .ndim = 2, .shape = {rows, cols},
			       .contiguous = true};
	CHECK_INT(dli_inspect_tensor(l, DLI_TENSOR_ACTIVATION, &t, NULL, NULL), 0);
	CHECK_INT(dli_inspect_tensor(l, DLI_TENSOR_WEIGHT, &t, NULL, NULL), 0);
	CHECK_INT(dli_step(ctx), 0);
	dli_destroy(ctx);
	struct terms a, w;
	naive(x, rows, cols, 1, &a);
	naive(x, rows, cols, 2, &w);
	check_logged(FC1 "_activation_nvfp4_underflows%", 100.0 * (double)a.under / (double)n);
	check_logged(FC1 "_activation_nvfp4_mse", a.err / (double)n);
	check_logged(FC1 "_weight_nvfp4_underflows%", 100.0 * (double)w.under / (double)n);
	check_logged(FC1 "_weight_nvfp4_mse", w.err / (double)n);
	/* 16 x 16 tiles lose more than 1 x 16 blocks here: the data tells the two apart. */
	CHECK(w.under > a.under && a.under > 0);
}

static void check_error(const char *yaml, const char *const *parts)
{
	struct dli_error err;
	struct dli_context *ctx = open_yaml(yaml, &err);
	CHECK(ctx == NULL);
	dli_destroy(ctx);
	if (ctx)
		return;
	for (size_t i = 0; parts[i]; i++) {
		if (!strstr(err.message, parts[i]))
			fprintf(stderr, "error \"%s\" lacks \"%s\"\n", err.message, parts[i]);
		CHECK(strstr(err.message, parts[i]) != NULL);
	}
}

#define SEC "s:\n  enabled: True\n  layers: {layer_name_regex_pattern: fc1}\n  transformer_engine:\n"

static void test_errors(void)
{
	check_error(SEC "    LogNvfp4TensorStats: {enabled: True, tensors: [activation], "
			"stats: [overflows%]}\n",
		    (const char *const[]){"<string>:5:", "overflows%", NULL});
	check_error(SEC "    LogNvfp4TensorStats: {enabled: True, tensors: [activation], "
			"stats: [nvfp4_mse]}\n",
		    (const char *const[]){"<string>:5:", "nvfp4_mse", NULL});
	check_error(SEC "    LogFp8TensorStats: {enabled: True, tensors: [activation], "
			"stats: [nvfp4_mse]}\n",
		    (const char *const[]){"<string>:5:5:", "LogNvfp4TensorStats", NULL});
}

int main(void)
{
	test_rules();
	test_passes();
	test_threads();
	test_given_amax();
	test_nonfinite_blocks();
	test_tiny_amax();
	test_feature();
	test_errors();
	remove_log_dir();
	return check_exit();
}
