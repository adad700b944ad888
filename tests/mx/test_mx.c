/* MXFP8 in the C kernels and through the core (docs/block-scaling.md): the scale rules at their
 * edges, the passes against a naive reference written here (per block: amax, the E8M0 code from
 * frexp, x * 2^(127 - e) cast by the FP8 encoder the fp8 tests check, decode * 2^(e - 127)) for
 * f32, f16 and bf16 input in both directions, thread-count independence, and LogFp8TensorStats'
 * mxfp8_ statistics and FakeQuant's MXFP8 formats through the real core. The bit-exactness against
 * ml_dtypes over every bf16 pattern is interop.py's. */
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

#include "test-rng.h"

/* Spread magnitudes: 2^-30 .. 2^20 per block, 2^-20 within it, signs mixed, a few zeros. */
static float random_value(int64_t i)
{
	static int block_exp;
	if (i % 32 == 0)
		block_exp = (int)(next_u64() % 51) - 30;
	uint64_t u = next_u64();
	if (u % 50 == 0)
		return 0.0f;
	float m = 1.0f + (float)(u >> 40) / (float)(1ull << 24);
	float v = ldexpf(m, block_exp - (int)((u >> 8) % 21));
	return (u & 1) ? -v : v;
}

static uint8_t naive_e8m0(float amax, enum dli_dtype format)
{
	float v = amax * (float)(1.0 / dli_fp8_max(format));
	int ex;
	if (v == 0.0f)
		return 0;
	if (isinf(v))
		return 254;
	double m = frexp(v, &ex);
	int e = (m == 0.5 ? ex - 1 : ex) + 127;
	return (uint8_t)(e < 0 ? 0 : e > 254 ? 254 : e);
}

struct terms {
	uint64_t count, under, over;
	double err, dot, dqs, xs, lo, hi;
};

/* The naive pass over a rows x cols matrix of floats: dq (may be NULL) and the terms. */
static void naive(const float *x, int64_t rows, int64_t cols, enum dli_dtype format, bool colwise,
		  float *dq, struct terms *t)
{
	int64_t outer = colwise ? cols : rows, inner = colwise ? rows : cols;
	memset(t, 0, sizeof(*t));
	t->lo = INFINITY;
	for (int64_t o = 0; o < outer; o++)
		for (int64_t b = 0; b < inner; b += 32) {
			int64_t m = inner - b < 32 ? inner - b : 32;
			float amax = 0;
			for (int64_t k = 0; k < m; k++) {
				int64_t i = colwise ? (b + k) * cols + o : o * cols + b + k;
				amax = fmaxf(amax, fabsf(x[i]));
			}
			uint8_t e = naive_e8m0(amax, format);
			float rcp = ldexpf(1.0f, 127 - e);
			double si = ldexp(1.0, e - 127);
			if (e) {
				t->lo = fmin(t->lo, si);
				t->hi = fmax(t->hi, si);
			}
			for (int64_t k = 0; k < m; k++) {
				int64_t i = colwise ? (b + k) * cols + o : o * cols + b + k;
				float s = x[i] * rcp;
				uint8_t q = dli_fp8_encode(s, format);
				double d = (double)dli_fp8_decode(q, format) * si;
				if (dq)
					dq[i] = (float)d;
				if (!isfinite(x[i]))
					continue;
				t->count++;
				t->under += x[i] != 0 && (q & 0x7f) == 0;
				t->over += fabsf(s) > dli_fp8_max(format);
				t->err += (x[i] - d) * (x[i] - d);
				t->dot += x[i] * d;
				t->dqs += d * d;
				t->xs += (double)x[i] * x[i];
			}
		}
}

static bool close_to(double a, double b, double tol)
{
	return a == b || fabs(a - b) <= tol * fmax(fabs(a), fabs(b));
}

/* Counts and the scale range exactly, the sums to `tol` (the scalar path's double sums to 1e-12,
 * the AVX2 path's float lanes to 1e-5). */
static void check_terms(const char *what, const struct dli_stats_record *r, const struct terms *t,
			double tol)
{
	bool ok = r->fp8_count == t->count && r->underflows == t->under &&
		  r->overflows == t->over && close_to(r->err_sq, t->err, tol) &&
		  close_to(r->dot, t->dot, tol) && close_to(r->dq_sq, t->dqs, tol) &&
		  close_to(r->x_sq, t->xs, tol) && r->scale_inv_min == t->lo &&
		  r->scale_inv_max == t->hi;
	if (!ok)
		fprintf(stderr, "%s: count %llu/%llu under %llu/%llu over %llu/%llu err %.17g/%.17g "
				"si %g/%g %g/%g\n", what, (unsigned long long)r->fp8_count,
			(unsigned long long)t->count, (unsigned long long)r->underflows,
			(unsigned long long)t->under, (unsigned long long)r->overflows,
			(unsigned long long)t->over, r->err_sq, t->err, r->scale_inv_min, t->lo,
			r->scale_inv_max, t->hi);
	CHECK(ok);
}

/* A float's bf16 bits (its mantissa cut) and a bf16's value. */
static uint16_t bf16_bits(float f)
{
	uint32_t u;
	memcpy(&u, &f, 4);
	return (uint16_t)(u >> 16);
}

static float bf16_value(uint16_t b)
{
	uint32_t u = (uint32_t)b << 16;
	float f;
	memcpy(&f, &u, 4);
	return f;
}

static uint16_t to_half(float f) /* round to nearest even, for values in f16's normal range */
{
	uint32_t u;
	memcpy(&u, &f, 4);
	uint32_t sign = (u >> 16) & 0x8000, a = u & 0x7fffffff;
	if (a >= 0x477ff000)
		return (uint16_t)(sign | 0x7bff);
	if (a < 0x38800000)
		return (uint16_t)sign; /* below f16's normals: 0 (the generator avoids them) */
	uint32_t m = a - (112u << 23);
	uint32_t r = (m >> 13) + (((m & 0x1fff) > 0x1000) || ((m & 0x1fff) == 0x1000 && (m >> 13 & 1)));
	return (uint16_t)(sign | r);
}

static float from_half(uint16_t h)
{
	uint32_t sign = (uint32_t)(h & 0x8000) << 16, e = h >> 10 & 0x1f, m = h & 0x3ff, u;
	float f;
	if (e == 0)
		return (sign ? -1.0f : 1.0f) * (float)m * 0x1p-24f;
	u = sign | (e + 112) << 23 | m << 13;
	memcpy(&f, &u, 4);
	return f;
}

/* ---- The rules at their edges ---- */

static void test_rules(void)
{
	CHECK_INT(dli_mx_e8m0(0.0f, DLI_DTYPE_F8E4M3), 0);
	CHECK_INT(dli_mx_e8m0(INFINITY, DLI_DTYPE_F8E4M3), 0xfe);
	CHECK_INT(dli_mx_e8m0(NAN, DLI_DTYPE_F8E4M3), 0xff);
	/* An amax of exactly fp8_max * 2^k gives 2^k: float(448 * float(1/448)) is 1. */
	CHECK_INT(dli_mx_e8m0(448.0f, DLI_DTYPE_F8E4M3), 127);
	CHECK_INT(dli_mx_e8m0(57344.0f, DLI_DTYPE_F8E5M2), 127);
	CHECK_INT(dli_mx_e8m0(449.0f, DLI_DTYPE_F8E4M3), 128); /* rounded up, never down */
	CHECK_INT(dli_mx_e8m0(1.0f, DLI_DTYPE_F8E4M3), 127 - 8); /* 1/448 -> 2^-8 */
	CHECK_INT(dli_mx_e8m0(FLT_TRUE_MIN, DLI_DTYPE_F8E4M3), 0);
	CHECK(dli_mx_rcp(0) == 0x1p127f);
	CHECK(dli_mx_rcp(127) == 1.0f);
	CHECK(dli_mx_rcp(0xfe) == 0x1p-127f);
	CHECK(isnan(dli_mx_rcp(0xff)));
	CHECK(dli_mx_scale_inv(0) == 0x1p-127);
	CHECK(dli_mx_scale_inv(254) == 0x1p127);
	int64_t sr, sc;
	dli_mx_scale_shape(129, 33, false, &sr, &sc);
	CHECK(sr == 256 && sc == 4);
	dli_mx_scale_shape(129, 33, true, &sr, &sc);
	CHECK(sr == 8 && sc == 128);

	/* One row of three blocks: all zeros (code 0, zero codes), one with an infinity (0xfe:
	 * the infinity saturates, the finite values scale by 2^-127 and vanish), one with a NaN
	 * (left out of the amax, a NaN code). */
	float x[96] = {0};
	x[32] = INFINITY;
	x[33] = 1000.0f;
	x[64] = NAN;
	x[65] = 448.0f;
	x[66] = -3.0f;
	uint8_t q[96], s[4 * 128];
	CHECK_INT(dli_cpu_mx_quantize(x, DLI_DTYPE_F32, 1, 96, DLI_DTYPE_F8E4M3, false, NULL, q, s),
		  0);
	CHECK(s[0] == 0 && s[1] == 0xfe && s[2] == 127 && s[3] == 0);
	CHECK(q[0] == 0 && q[31] == 0);
	CHECK(q[32] == 0x7e && q[33] == 0);
	CHECK((q[64] & 0x7f) == 0x7f && q[65] == 0x7e && q[66] == dli_fp8_encode(-3.0f, DLI_DTYPE_F8E4M3));
	struct dli_stats_record r;
	CHECK_INT(dli_cpu_mx_compare(x, DLI_DTYPE_F32, 1, 96, DLI_DTYPE_F8E4M3, false, NULL, &r), 0);
	CHECK(r.fp8_count == 94 && r.underflows == 1); /* 1000 in the infinity's block */
	CHECK(r.scale_inv_min == 1.0 && r.scale_inv_max == 0x1p127);
	/* Bad arguments. */
	CHECK_INT(dli_cpu_mx_compare(x, DLI_DTYPE_I32, 1, 96, DLI_DTYPE_F8E4M3, false, NULL, &r),
		  -EINVAL);
	CHECK_INT(dli_cpu_mx_compare(x, DLI_DTYPE_F32, 1, 96, DLI_DTYPE_F32, false, NULL, &r),
		  -EINVAL);
	CHECK_INT(dli_cpu_mx_compare(x, DLI_DTYPE_F32, -1, 96, DLI_DTYPE_F8E4M3, false, NULL, &r),
		  -EINVAL);
	CHECK_INT(dli_cpu_mx_compare(x, DLI_DTYPE_F32, 0, 96, DLI_DTYPE_F8E4M3, false, NULL, &r), 0);
	CHECK(r.fp8_count == 0);
}

/* ---- The passes against the naive reference: dtypes, directions, odd shapes, threads ---- */

static void test_passes(enum dli_simd simd, double tol)
{
	const struct dli_cpu_options opt = {simd, 0};
	static const int64_t shapes[][2] = {{1, 1}, {31, 33}, {33, 31}, {127, 129}, {129, 127},
					    {64, 96}, {300, 70}, {40, 600}, {3, 2048}};
	for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
		int64_t rows = shapes[si][0], cols = shapes[si][1], n = rows * cols;
		float *x = malloc((size_t)n * sizeof *x), *dq = malloc((size_t)n * sizeof *x);
		float *fq = malloc((size_t)n * sizeof *x), *xh = malloc((size_t)n * sizeof *x);
		uint16_t *h = malloc((size_t)n * 2), *b = malloc((size_t)n * 2);
		if (!x || !dq || !fq || !xh || !h || !b) {
			CHECK(false);
			free(x), free(dq), free(fq), free(xh), free(h), free(b);
			return;
		}
		for (int64_t i = 0; i < n; i++)
			x[i] = random_value(i);
		/* A NaN or an infinity in some blocks (each path has its own way with those), the
		 * infinity's block otherwise of moderate values, so that its terms are not lost in
		 * the rest's. */
		if (n > 1000) {
			x[n / 3] = NAN;
			x[n / 2] = -INFINITY;
			for (int64_t i = n / 2 + 1; i < n / 2 + 8; i++)
				x[i] = ldexpf(1.0f, 10);
		}
		for (int fmt = 0; fmt < 2; fmt++)
			for (int col = 0; col < 2; col++) {
				enum dli_dtype f = fmt ? DLI_DTYPE_F8E5M2 : DLI_DTYPE_F8E4M3;
				struct dli_stats_record r;
				struct terms t;
				char what[128];
				snprintf(what, sizeof what, "%lldx%lld %s %s", (long long)rows,
					 (long long)cols, fmt ? "e5m2" : "e4m3", col ? "col" : "row");
				/* f32 */
				naive(x, rows, cols, f, col, dq, &t);
				CHECK_INT(dli_cpu_mx_compare(x, DLI_DTYPE_F32, rows, cols, f, col, &opt, &r), 0);
				check_terms(what, &r, &t, tol);
				CHECK_INT(dli_cpu_mx_fake_quantize(x, DLI_DTYPE_F32, rows, cols, f, col, NULL, fq), 0);
				CHECK(memcmp(fq, dq, (size_t)n * sizeof *fq) == 0);
				/* f16 and bf16: the same values rounded to them. */
				for (int64_t i = 0; i < n; i++) {
					h[i] = to_half(x[i]);
					xh[i] = from_half(h[i]);
				}
				naive(xh, rows, cols, f, col, dq, &t);
				CHECK_INT(dli_cpu_mx_compare(h, DLI_DTYPE_F16, rows, cols, f, col, &opt, &r), 0);
				check_terms(what, &r, &t, tol);
				for (int64_t i = 0; i < n; i++) {
					uint32_t u;
					memcpy(&u, &x[i], 4);
					b[i] = (uint16_t)(u >> 16);
					u = (uint32_t)b[i] << 16;
					memcpy(&xh[i], &u, 4);
				}
				naive(xh, rows, cols, f, col, dq, &t);
				CHECK_INT(dli_cpu_mx_compare(b, DLI_DTYPE_BF16, rows, cols, f, col, &opt, &r), 0);
				check_terms(what, &r, &t, tol);
				CHECK_INT(dli_cpu_mx_fake_quantize(b, DLI_DTYPE_BF16, rows, cols, f, col, NULL, fq), 0);
				CHECK(memcmp(fq, dq, (size_t)n * sizeof *fq) == 0);
				/* Given the statistics pass's sum of x^2, as the statistics feature
				 * calls it: the AVX2 path then leaves it out of its fast steps on
				 * bf16, which take batches whose values all scale to the format's
				 * normals, so here values within 2^6 of each other in a row. */
				for (int64_t i = 0; i < n; i++) {
					uint64_t u = next_u64();
					float m = 1.0f + (float)(u >> 40) / (float)(1ull << 24);
					float v = ldexpf(m, (int)(i / cols % 9) - 4 -
								    (int)(u >> 8 & 3));
					b[i] = bf16_bits((u & 1) ? -v : v);
					xh[i] = bf16_value(b[i]);
				}
				struct dli_stats_record st;
				CHECK_INT(dli_cpu_stats(b, DLI_DTYPE_BF16, n, NULL, &st), 0);
				naive(xh, rows, cols, f, col, dq, &t);
				CHECK_INT(dli_cpu_mx_compare_sum_sq(b, DLI_DTYPE_BF16, rows, cols,
								    f, col, st.sum_sq, &opt, &r),
					  0);
				check_terms(what, &r, &t, tol);
			}
		free(x), free(dq), free(fq), free(xh), free(h), free(b);
	}
}

/* Threads split rows into chunks; the terms add in chunk order, so any thread count gives the
 * same bits. */
static void test_threads(void)
{
	int64_t rows = 4096, cols = 1000, n = rows * cols;
	float *x = malloc((size_t)n * sizeof *x);
	if (!x) {
		CHECK(false);
		return;
	}
	for (int64_t i = 0; i < n; i++)
		x[i] = random_value(i);
	for (int col = 0; col < 2; col++) {
		struct dli_stats_record a, b;
		struct dli_cpu_options one = {DLI_SIMD_AUTO, 1}, four = {DLI_SIMD_AUTO, 4};
		CHECK_INT(dli_cpu_mx_compare(x, DLI_DTYPE_F32, rows, cols, DLI_DTYPE_F8E4M3, col, &one, &a), 0);
		CHECK_INT(dli_cpu_mx_compare(x, DLI_DTYPE_F32, rows, cols, DLI_DTYPE_F8E4M3, col, &four, &b), 0);
		CHECK(a.fp8_count == (uint64_t)n && a.fp8_count == b.fp8_count &&
		      a.underflows == b.underflows && a.err_sq == b.err_sq && a.dot == b.dot &&
		      a.dq_sq == b.dq_sq && a.scale_inv_min == b.scale_inv_min &&
		      a.scale_inv_max == b.scale_inv_max);
	}
	free(x);
}

/* ---- Through the core: LogFp8TensorStats' mxfp8_ stats, FakeQuant's MXFP8 formats ---- */

static double logged(const char *name)
{
	char buf[1024];
	FILE *f = open_log(STATS_LOG);
	double v = NAN;
	bool found = false;
	while (f && fgets(buf, sizeof buf, f)) {
		const char *n = strstr(buf, " - INFO - ");
		const char *val = strstr(buf, "value=");
		if (!n || !val)
			continue;
		n += strlen(" - INFO - ");
		if (strncmp(n, name, strlen(name)) || n[strlen(name)] != ' ')
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

/* The logged value (%.9g) of a pass that may sum in float lanes (the AVX2 path): to 1e-5. */
static void check_logged(const char *name, double want)
{
	double got = logged(name);
	bool ok = got == want || fabs(got - want) <= 1e-5 * fmax(fabs(want), 1e-300);
	if (!ok)
		fprintf(stderr, "%s = %.17g, expected %.17g\n", name, got, want);
	CHECK(ok);
}

static void test_feature_stats(void)
{
	struct dli_context *ctx = open_yaml(
		"mx:\n  enabled: True\n  layers: {layer_name_regex_pattern: fc1}\n"
		"  transformer_engine:\n"
		"    LogFp8TensorStats:\n"
		"      enabled: True\n"
		"      tensors: [activation, gradient]\n"
		"      stats: [mxfp8_underflows%, mxfp8_scale_inv_min, mxfp8_scale_inv_max, mxfp8_mse,\n"
		"              mxfp8_underflows%_columnwise, mxfp8_mse_columnwise,\n"
		"              mxfp8_scale_inv_max_columnwise, mxfp8_cos_sim, mxfp8_overflows%]\n",
		NULL);
	CHECK(ctx != NULL);
	if (!ctx)
		return;
	struct dli_layer *l = layer(ctx, FC1);
	int64_t rows = 70, cols = 45, n = rows * cols;
	float x[70 * 45];
	/* Magnitudes set by the column (2^-16 .. 2^14): a row's blocks span 2^30 and lose their
	 * small elements, a column's blocks do not, so the two directions' stats differ widely. */
	for (int64_t i = 0; i < n; i++)
		x[i] = ldexpf(random_value(0) < 0 ? -1.5f : 1.25f, (int)(i % cols % 16) * 2 - 16) *
		       (1.0f + (float)(i % 7) / 8.0f);
	struct dli_tensor t = {.data = x, .dtype = DLI_DTYPE_F32, .ndim = 2, .shape = {rows, cols},
			       .contiguous = true};
	CHECK_INT(dli_inspect_tensor(l, DLI_TENSOR_ACTIVATION, &t, NULL, NULL), 0);
	CHECK_INT(dli_inspect_tensor(l, DLI_TENSOR_GRADIENT, &t, NULL, NULL), 0);
	CHECK_INT(dli_step(ctx), 0);
	dli_destroy(ctx);
	/* fp8_format's default, hybrid: E4M3 for activations, E5M2 for gradients. */
	for (int g = 0; g < 2; g++) {
		enum dli_dtype f = g ? DLI_DTYPE_F8E5M2 : DLI_DTYPE_F8E4M3;
		const char *name = g ? "gradient" : "activation";
		char key[256];
		struct terms row, col;
		naive(x, rows, cols, f, false, NULL, &row);
		naive(x, rows, cols, f, true, NULL, &col);
#define KEY(s) (snprintf(key, sizeof key, FC1 "_%s_" s, name), key)
		check_logged(KEY("mxfp8_underflows%%"), 100.0 * (double)row.under / (double)n);
		check_logged(KEY("mxfp8_scale_inv_min"), row.lo);
		check_logged(KEY("mxfp8_scale_inv_max"), row.hi);
		check_logged(KEY("mxfp8_mse"), row.err / (double)n);
		check_logged(KEY("mxfp8_cos_sim"), row.dot / sqrt(row.xs * row.dqs));
		check_logged(KEY("mxfp8_overflows%%"), 100.0 * (double)row.over / (double)n);
		check_logged(KEY("mxfp8_underflows%%_columnwise"), 100.0 * (double)col.under / (double)n);
		check_logged(KEY("mxfp8_mse_columnwise"), col.err / (double)n);
		check_logged(KEY("mxfp8_scale_inv_max_columnwise"), col.hi);
#undef KEY
		/* The two directions see different blocks: a test whose data gave the same numbers
		 * could not tell them apart (E5M2 has the range for a span of 2^30: no underflows). */
		CHECK(row.err != col.err && (g || row.under > 10 * col.under + 10));
	}
}

/* FP8 block scaling's what-if (TransformerEngine's default Float8BlockQuantizer: 128 x 128
 * blocks, power-of-two scales) against a naive reference: per block, fp8_max / amax in float,
 * rounded down to a power of two by frexp. */
static void naive_fb(const float *x, int64_t rows, int64_t cols, enum dli_dtype format,
		     struct terms *t)
{
	memset(t, 0, sizeof(*t));
	t->lo = INFINITY;
	for (int64_t r0 = 0; r0 < rows; r0 += 128)
		for (int64_t c0 = 0; c0 < cols; c0 += 128) {
			float amax = 0, scale = 1;
			for (int64_t r = r0; r < rows && r < r0 + 128; r++)
				for (int64_t c = c0; c < cols && c < c0 + 128; c++)
					amax = fmaxf(amax, fabsf(x[r * cols + c]));
			if (amax > 0 && isfinite(amax)) {
				int ex;
				frexpf(dli_fp8_max(format) / amax, &ex);
				scale = ldexpf(1.0f, ex - 1);
			}
			double si = 1.0f / scale;
			t->lo = fmin(t->lo, si);
			t->hi = fmax(t->hi, si);
			for (int64_t r = r0; r < rows && r < r0 + 128; r++)
				for (int64_t c = c0; c < cols && c < c0 + 128; c++) {
					float xv = x[r * cols + c];
					uint8_t q = dli_fp8_encode(xv * scale, format);
					double d = (double)dli_fp8_decode(q, format) * si;
					t->count++;
					t->under += xv != 0 && (q & 0x7f) == 0;
					t->err += (xv - d) * (xv - d);
				}
		}
}

static void test_feature_block_scaling(void)
{
	struct dli_context *ctx = open_yaml(
		"fb:\n  enabled: True\n  layers: {layer_name_regex_pattern: fc1}\n"
		"  transformer_engine:\n"
		"    LogFp8TensorStats:\n"
		"      enabled: True\n"
		"      tensors: [activation]\n"
		"      stats: [fp8_block_scaling_underflows%, fp8_block_scaling_mse,\n"
		"              fp8_block_scaling_scale_inv_min, fp8_block_scaling_scale_inv_max,\n"
		"              fp8_block_scaling_mse_columnwise]\n",
		NULL);
	CHECK(ctx != NULL);
	if (!ctx)
		return;
	struct dli_layer *l = layer(ctx, FC1);
	int64_t rows = 200, cols = 300, n = rows * cols;
	float *x = malloc((size_t)n * sizeof *x);
	if (!x) {
		CHECK(false);
		dli_destroy(ctx);
		return;
	}
	/* Blocks of very different magnitudes (by column band), and spread inside each. */
	for (int64_t i = 0; i < n; i++)
		x[i] = ldexpf(random_value(i), (int)(i % cols / 128) * 12 - 12);
	struct dli_tensor t = {.data = x, .dtype = DLI_DTYPE_F32, .ndim = 2, .shape = {rows, cols},
			       .contiguous = true};
	CHECK_INT(dli_inspect_tensor(l, DLI_TENSOR_ACTIVATION, &t, NULL, NULL), 0);
	CHECK_INT(dli_step(ctx), 0);
	dli_destroy(ctx);
	struct terms ref;
	naive_fb(x, rows, cols, DLI_DTYPE_F8E4M3, &ref);
	CHECK(ref.under > 0);
	check_logged(FC1 "_activation_fp8_block_scaling_underflows%", 100.0 * (double)ref.under / (double)n);
	check_logged(FC1 "_activation_fp8_block_scaling_mse", ref.err / (double)n);
	check_logged(FC1 "_activation_fp8_block_scaling_mse_columnwise", ref.err / (double)n);
	check_logged(FC1 "_activation_fp8_block_scaling_scale_inv_min", ref.lo);
	check_logged(FC1 "_activation_fp8_block_scaling_scale_inv_max", ref.hi);
	free(x);
}

static void test_fake_quant(void)
{
	for (int fmt = 0; fmt < 2; fmt++) {
		char yaml[512];
		snprintf(yaml, sizeof yaml,
			 "fq:\n  enabled: True\n  layers: {layer_name_regex_pattern: fc1}\n"
			 "  transformer_engine:\n"
			 "    FakeQuant: {enabled: True, gemms: [fprop], tensors: [activation], "
			 "quant_format: MXFP8%s}\n", fmt ? "E5M2" : "E4M3");
		struct dli_context *ctx = open_yaml(yaml, NULL);
		CHECK(ctx != NULL);
		if (!ctx)
			return;
		struct dli_layer *l = layer(ctx, FC1);
		int64_t rows = 5, cols = 40, n = rows * cols;
		float x[200], out[200], dq[200];
		for (int64_t i = 0; i < n; i++)
			x[i] = random_value(i);
		struct dli_tensor in = {.data = x, .dtype = DLI_DTYPE_F32, .ndim = 2,
					.shape = {rows, cols}, .contiguous = true};
		struct dli_tensor o = in;
		o.data = out;
		int64_t next;
		CHECK(!dli_fp8_gemm_enabled(l, DLI_GEMM_FPROP, &next));
		CHECK_INT(dli_modify_tensor(l, DLI_GEMM_FPROP, DLI_TENSOR_ACTIVATION, &in, NULL, &o), 0);
		struct terms t;
		naive(x, rows, cols, fmt ? DLI_DTYPE_F8E5M2 : DLI_DTYPE_F8E4M3, false, dq, &t);
		CHECK(memcmp(out, dq, sizeof(float) * (size_t)n) == 0);
		dli_destroy(ctx);
	}
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
	check_error(SEC "    FakeQuant: {enabled: True, gemms: [fprop], tensors: [activation], "
			"quant_format: MXFP8E4M3, margin: 1}\n",
		    (const char *const[]){"<string>:5:5:", "margin: applies to the per-tensor formats",
					   "MXFP8E4M3", NULL});
	check_error(SEC "    FakeQuant: {enabled: True, gemms: [fprop], tensors: [activation], "
			"quant_format: MXFP8E4M2}\n",
		    (const char *const[]){"<string>:5:", "MXFP8E4M2", NULL});
	check_error(SEC "    LogFp8TensorStats: {enabled: True, tensors: [activation], "
			"stats: [nvfp4_mse]}\n",
		    (const char *const[]){"<string>:5:5:", "LogNvfp4TensorStats", NULL});
	check_error(SEC "    LogFp8TensorStats: {enabled: True, tensors: [activation], "
			"stats: [mxfp8_amax]}\n",
		    (const char *const[]){"<string>:5:", "mxfp8_amax", NULL});
}

int main(void)
{
	test_rules();
	test_passes(DLI_SIMD_SCALAR, 1e-12);
	if (dli_simd_detect() >= DLI_SIMD_AVX2)
		test_passes(DLI_SIMD_AVX2, 1e-5);
	else
		printf("the AVX2 pass: skipped, this CPU has no AVX2\n");
	test_threads();
	test_feature_stats();
	test_feature_block_scaling();
	test_fake_quant();
	test_errors();
	remove_log_dir();
	return check_exit();
}
