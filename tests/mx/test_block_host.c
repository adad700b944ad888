/* A block-scaled host's own copies (struct dli_block_quantized_tensor, dli_inspect_tensor_block;
 * docs/block-scaling.md, "The host's own tensor"):
 * - the host-copy pass over copies made by this project's quantizers in TransformerEngine's
 *   layouts (MXFP8 and NVFP4 from their quantize passes, FP8 block scaling's codes and fp32 scales
 *   written here by the recipe's rules, in the layouts of TransformerEngine's get_scale_shape),
 *   described by dli_block_quantized_te, gives the what-if pass's record: same counts and scale
 *   range, sums to 1e-12 (both scalar);
 * - through the core, stats of the host's recipe read the host's copy (made here with scales one
 *   power of two above the recipe's, so that it differs from any what-if) and are compared with a
 *   naive reference written here; other stats stay what-ifs; the column-wise FP8 block slot;
 *   LogNvfp4TensorStats from an NVFP4 copy; features without the call; precise refusals.
 * The independent ml_dtypes reference over TransformerEngine-shaped objects is the Python test's. */
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <dlinspect/dlinspect.h>

#include "check.h"
#include "dli-test.h"
#include "kernels-private.h"
#include "test-rng.h"

#define FC1 "model.layers.1.mlp.fc1"

static const struct dli_cpu_options scalar = {.simd = DLI_SIMD_SCALAR, .threads = 1};

static int64_t rup(int64_t a, int64_t m)
{
	return (a + m - 1) / m * m;
}

/* Spread magnitudes: 2^-24 .. 2^12 by block of 16, signs mixed, a few zeros. */
static void fill(float *x, int64_t n)
{
	int e = 0;
	for (int64_t i = 0; i < n; i++) {
		if (i % 16 == 0)
			e = (int)(next_u64() % 37) - 24;
		uint64_t u = next_u64();
		float m = 1.0f + (float)(u >> 40) / (float)(1ull << 24);
		x[i] = u % 40 == 0 ? 0.0f : ldexpf((u & 1) ? -m : m, e - (int)((u >> 8) % 9));
	}
}

static bool close_to(double a, double b, double tol)
{
	return a == b || fabs(a - b) <= tol * fmax(fabs(a), fabs(b));
}

/* `a` the host-copy pass, `b` the what-if. With NVFP4 their overflows may differ by a rounding:
 * the what-if counts |x * multiplier| > 6 in float, the copy (which has no multiplier) |x| > 6 *
 * its dequantization factor. */
static void check_same(const char *what, const struct dli_stats_record *a,
		       const struct dli_stats_record *b, bool nvfp4)
{
	uint64_t over_tol = nvfp4 ? 2 + b->overflows / 100 : 0;
	bool ok = a->fp8_count == b->fp8_count && a->underflows == b->underflows &&
		  a->overflows + over_tol >= b->overflows && b->overflows + over_tol >= a->overflows &&
		  close_to(a->err_sq, b->err_sq, 1e-12) &&
		  close_to(a->dot, b->dot, 1e-12) && close_to(a->dq_sq, b->dq_sq, 1e-12) &&
		  close_to(a->x_sq, b->x_sq, 1e-12) && a->scale_inv_min == b->scale_inv_min &&
		  a->scale_inv_max == b->scale_inv_max;
	if (!ok)
		fprintf(stderr, "%s: count %llu/%llu under %llu/%llu over %llu/%llu err %.17g/%.17g "
				"si %g/%g %g/%g\n", what, (unsigned long long)a->fp8_count,
			(unsigned long long)b->fp8_count, (unsigned long long)a->underflows,
			(unsigned long long)b->underflows, (unsigned long long)a->overflows,
			(unsigned long long)b->overflows, a->err_sq, b->err_sq, a->scale_inv_min,
			b->scale_inv_min, a->scale_inv_max, b->scale_inv_max);
	CHECK(ok);
}

/* NVFP4 codes one a byte (the quantizer's) packed as TransformerEngine stores them: two a byte,
 * the first in the low nibble, the column-wise copy transposed, each row padded to whole bytes. */
static uint8_t *pack_nvfp4(const uint8_t *q, int64_t rows, int64_t cols, bool colwise)
{
	int64_t r = colwise ? cols : rows, c = colwise ? rows : cols, bytes = (c + 1) / 2;
	uint8_t *p = calloc((size_t)(r * bytes + 1), 1);
	for (int64_t i = 0; p && i < r; i++)
		for (int64_t j = 0; j < c; j++) {
			uint8_t v = colwise ? q[j * cols + i] : q[i * cols + j];
			p[i * bytes + j / 2] |= (uint8_t)(j % 2 ? v << 4 : v);
		}
	return p;
}

/* FP8 block scaling's copy by the recipe's rules (power-of-two scales), codes in
 * TransformerEngine's layout (the column-wise copy transposed) and fp32 scale_invs in its scale
 * layout, indexed here from get_scale_shape's shapes. */
static void quantize_fb(const float *x, int64_t rows, int64_t cols, enum dli_dtype fmt, int dims,
			bool colwise, uint8_t *q, float *si)
{
	int64_t bh = dims == 2 || colwise ? 128 : 1, bw = dims == 2 || !colwise ? 128 : 1;
	for (int64_t r0 = 0; r0 < rows; r0 += bh)
		for (int64_t c0 = 0; c0 < cols; c0 += bw) {
			int64_t r1 = r0 + bh < rows ? r0 + bh : rows, c1 = c0 + bw < cols ? c0 + bw : cols;
			float amax = 0;
			for (int64_t i = r0; i < r1; i++)
				for (int64_t j = c0; j < c1; j++)
					amax = fmaxf(amax, fabsf(x[i * cols + j]));
			float scale = dli_fp8b_scale(amax, fmt, DLI_DTYPE_F32, true);
			int64_t bi = r0 / bh, bj = c0 / bw, k;
			if (dims == 2)
				k = colwise ? bj * rup((rows + 127) / 128, 4) + bi
					    : bi * rup((cols + 127) / 128, 4) + bj;
			else
				k = colwise ? bi * rup(cols, 4) + bj : bj * rup(rows, 4) + bi;
			si[k] = 1.0f / scale;
			for (int64_t i = r0; i < r1; i++)
				for (int64_t j = c0; j < c1; j++)
					q[colwise ? j * rows + i : i * cols + j] =
						dli_fp8_encode(x[i * cols + j] * scale, fmt);
		}
}

static void test_layouts(void)
{
	static const int64_t shapes[][2] = {{1, 1}, {31, 33}, {33, 31}, {127, 129}, {129, 127},
					    {200, 300}, {16, 64}};
	for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
		int64_t rows = shapes[s][0], cols = shapes[s][1], n = rows * cols;
		float *x = malloc((size_t)n * sizeof *x);
		uint8_t *q = malloc((size_t)n + 1);
		/* Big enough for every padded scale layout of these shapes. */
		size_t scale_bytes = (size_t)(rup(rows, 128) + 128) * (size_t)(rup(cols, 128) + 128) * 4;
		uint8_t *sc = calloc(scale_bytes, 1);
		if (!x || !q || !sc) {
			CHECK(false);
			goto next;
		}
		fill(x, n);
		for (int colwise = 0; colwise < 2; colwise++) {
			for (int f = 0; f < 2; f++) {
				enum dli_dtype fmt = f ? DLI_DTYPE_F8E5M2 : DLI_DTYPE_F8E4M3;
				struct dli_stats_record want, got;
				char what[128];
				/* MXFP8 */
				memset(sc, 0, scale_bytes);
				CHECK_INT(dli_cpu_mx_quantize(x, DLI_DTYPE_F32, rows, cols, fmt, colwise,
							      &scalar, q, sc), 0);
				struct dli_block_quantized_tensor b = dli_block_quantized_te(
					DLI_BLOCK_MXFP8, fmt, colwise, rows, cols, q, sc, NULL);
				CHECK_INT(dli_cpu_block_compare_quantized(x, DLI_DTYPE_F32, &b, &got), 0);
				CHECK_INT(dli_cpu_mx_compare(x, DLI_DTYPE_F32, rows, cols, fmt, colwise,
							     &scalar, &want), 0);
				snprintf(what, sizeof what, "mxfp8 %lldx%lld col %d fmt %d",
					 (long long)rows, (long long)cols, colwise, f);
				check_same(what, &got, &want, false);
				/* FP8 block scaling, 1-D and 2-D */
				for (int dims = 1; dims <= 2; dims++) {
					memset(sc, 0, scale_bytes);
					quantize_fb(x, rows, cols, fmt, dims, colwise, q, (float *)sc);
					b = dli_block_quantized_te(dims == 2 ? DLI_BLOCK_FP8_2D
									     : DLI_BLOCK_FP8_1D,
								   fmt, colwise, rows, cols, q, sc, NULL);
					CHECK_INT(dli_cpu_block_compare_quantized(x, DLI_DTYPE_F32, &b,
										  &got), 0);
					CHECK_INT(dli_cpu_fp8b_compare(x, DLI_DTYPE_F32, rows, cols, fmt,
								       dims, colwise, true, &scalar,
								       &want), 0);
					snprintf(what, sizeof what, "fp8 block %dd %lldx%lld col %d fmt %d",
						 dims, (long long)rows, (long long)cols, colwise, f);
					check_same(what, &got, &want, false);
				}
			}
			/* NVFP4, 1 x 16 and 16 x 16 */
			for (int dims = 1; dims <= 2; dims++) {
				struct dli_stats_record want, got;
				char what[128];
				float amax;
				memset(sc, 0, scale_bytes);
				CHECK_INT(dli_cpu_nvfp4_quantize(x, DLI_DTYPE_F32, rows, cols, dims, colwise,
								 &scalar, q, sc, &amax), 0);
				uint8_t *packed = pack_nvfp4(q, rows, cols, colwise);
				CHECK(packed != NULL);
				struct dli_block_quantized_tensor b = dli_block_quantized_te(
					dims == 2 ? DLI_BLOCK_NVFP4_2D : DLI_BLOCK_NVFP4, DLI_DTYPE_U8,
					colwise, rows, cols, packed, sc, &amax);
				CHECK_INT(dli_cpu_block_compare_quantized(x, DLI_DTYPE_F32, &b, &got), 0);
				CHECK_INT(dli_cpu_nvfp4_compare(x, DLI_DTYPE_F32, rows, cols, dims, colwise,
								&scalar, &want), 0);
				snprintf(what, sizeof what, "nvfp4 %dd %lldx%lld col %d", dims,
					 (long long)rows, (long long)cols, colwise);
				check_same(what, &got, &want, true);
				free(packed);
			}
		}
	next:
		free(x);
		free(q);
		free(sc);
	}
}

/* scale_inv_min/max leave out what padding holds and NaN: the E8M0 codes 0 and 255, fp32 +-0 and
 * NaN, the E4M3 codes 0x00, 0x80 (-0), 0x7f and 0xff (NaN); underflows count both zero codes of
 * the element formats (E4M3 0x80 and NVFP4 8 are -0). */
static void test_scale_rules(void)
{
	struct dli_stats_record rec;
	static uint8_t q[640], e8m0[4] = {0, 255, 127, 130};
	static uint8_t e4m3[8] = {0x00, 0x80, 0x7f, 0xff, 0x38, 0x40};
	static float fp32[20], x[128];
	float amax = 2688.0f; /* the E4M3 scale's value is the block's */

	struct dli_block_quantized_tensor mx =
		dli_block_quantized_te(DLI_BLOCK_MXFP8, DLI_DTYPE_F8E4M3, false, 1, 128, q, e8m0, NULL);
	CHECK_INT(dli_cpu_block_compare_quantized(NULL, DLI_DTYPE_F32, &mx, &rec), 0);
	CHECK(rec.scale_inv_min == 1.0 && rec.scale_inv_max == 8.0);

	fp32[0] = 0.0f;
	fp32[4] = -0.0f;
	fp32[8] = NAN;
	fp32[12] = 0.25f;
	fp32[16] = 4.0f;
	struct dli_block_quantized_tensor fb =
		dli_block_quantized_te(DLI_BLOCK_FP8_1D, DLI_DTYPE_F8E4M3, false, 1, 640, q, fp32, NULL);
	CHECK(fb.scale_strides[1] == 4);
	CHECK_INT(dli_cpu_block_compare_quantized(NULL, DLI_DTYPE_F32, &fb, &rec), 0);
	CHECK(rec.scale_inv_min == 0.25 && rec.scale_inv_max == 4.0);

	struct dli_block_quantized_tensor nv =
		dli_block_quantized_te(DLI_BLOCK_NVFP4, DLI_DTYPE_U8, false, 1, 96, q, e4m3, &amax);
	CHECK_INT(dli_cpu_block_compare_quantized(NULL, DLI_DTYPE_F32, &nv, &rec), 0);
	CHECK(rec.scale_inv_min == 1.0 && rec.scale_inv_max == 2.0);

	/* Underflows: x = 1 everywhere, block scale 1. FP8 codes 0x80, 0x00, 0x01 (the smallest
	 * subnormal, not zero), then 1.0; NVFP4 codes 8 and 0 in the first byte, 1 (0.5) after. */
	for (int i = 0; i < 128; i++)
		x[i] = 1.0f;
	memset(q, 0x38, sizeof q);
	q[0] = 0x80;
	q[1] = 0x00;
	q[2] = 0x01;
	e8m0[0] = e8m0[1] = 127;
	CHECK_INT(dli_cpu_block_compare_quantized(x, DLI_DTYPE_F32, &mx, &rec), 0);
	CHECK(rec.fp8_count == 128 && rec.underflows == 2 && rec.overflows == 0);
	memset(q, 0x22, sizeof q);
	q[0] = 0x08; /* element 0: -0 (low nibble), element 1: +0 */
	e4m3[0] = 0x38;
	CHECK_INT(dli_cpu_block_compare_quantized(x, DLI_DTYPE_F32, &nv, &rec), 0);
	CHECK(rec.fp8_count == 96 && rec.underflows == 2);
}

/* ---- Through the core ---- */

static double logged(const char *name, bool *found)
{
	char buf[1024];
	FILE *f = open_log(STATS_LOG);
	double v = NAN;
	*found = false;
	while (f && fgets(buf, sizeof buf, f)) {
		const char *n = strstr(buf, " - INFO - "), *val = strstr(buf, "value=");
		if (!n || !val)
			continue;
		n += strlen(" - INFO - ");
		if (strncmp(n, name, strlen(name)) || n[strlen(name)] != ' ')
			continue;
		v = strtod(val + strlen("value="), NULL);
		*found = true;
	}
	if (f)
		fclose(f);
	return v;
}

/* The logged value (%.9g) against a reference: to 1e-8 for the host-copy pass (double sums),
 * to 1e-5 for a what-if (the SIMD paths' float lanes). */
static void check_logged_tol(const char *name, double want, double tol)
{
	bool found;
	double got = logged(name, &found);
	bool ok = found && (got == want || fabs(got - want) <= tol * fmax(fabs(want), 1e-300));
	if (!ok)
		fprintf(stderr, "%s = %.17g (%s), expected %.17g\n", name, got,
			found ? "logged" : "not logged", want);
	CHECK(ok);
}

static void check_logged(const char *name, double want)
{
	check_logged_tol(name, want, 1e-8);
}

static void check_not_logged(const char *name)
{
	bool found;
	logged(name, &found);
	if (found)
		fprintf(stderr, "%s was logged\n", name);
	CHECK(!found);
}

/* The terms of hp against a copy, by the definition: every element's code and block scale looked
 * up from the layout TransformerEngine documents, written out here without the descriptor. */
struct terms {
	uint64_t count, under, over;
	double err, dot, dqs, xs, lo, hi;
};

static void naive_mx_row(const float *x, int64_t rows, int64_t cols, enum dli_dtype fmt,
			 const uint8_t *q, const uint8_t *sc, struct terms *t)
{
	int64_t sc_cols = rup((cols + 31) / 32, 4);
	memset(t, 0, sizeof *t);
	t->lo = INFINITY;
	for (int64_t i = 0; i < rows; i++)
		for (int64_t j = 0; j < cols; j++) {
			uint8_t e = sc[i * sc_cols + j / 32];
			double si = ldexp(1.0, e - 127);
			if (j % 32 == 0 && e) {
				t->lo = fmin(t->lo, si);
				t->hi = fmax(t->hi, si);
			}
			double v = x[i * cols + j], dq = (float)(dli_fp8_decode(q[i * cols + j], fmt) * si);
			t->count++;
			t->under += v != 0 && (q[i * cols + j] & 0x7f) == 0;
			t->over += fabs(v) > dli_fp8_max(fmt) * si;
			t->err += (v - dq) * (v - dq);
			t->dot += v * dq;
			t->dqs += dq * dq;
			t->xs += v * v;
		}
}

/* A host MXFP8 row-wise copy whose scales are one power of two above the recipe's: every block
 * re-encoded at the coarser scale. */
static void coarse_mx_row(const float *x, int64_t rows, int64_t cols, enum dli_dtype fmt,
			  uint8_t *q, uint8_t *sc)
{
	int64_t sc_cols = rup((cols + 31) / 32, 4);
	CHECK_INT(dli_cpu_mx_quantize(x, DLI_DTYPE_F32, rows, cols, fmt, false, &scalar, q, sc), 0);
	for (int64_t i = 0; i < rows; i++)
		for (int64_t j = 0; j < cols; j++) {
			uint8_t *e = &sc[i * sc_cols + j / 32];
			if (j % 32 == 0 && *e < 250)
				*e += 1;
			q[i * cols + j] = dli_fp8_encode(ldexpf(x[i * cols + j], 127 - *e), fmt);
		}
}

static void test_feature_mxfp8(void)
{
	struct dli_context *ctx = open_yaml(
		"mx:\n  enabled: True\n  layers: {layer_name_regex_pattern: fc1}\n"
		"  transformer_engine:\n"
		"    LogFp8TensorStats:\n"
		"      enabled: True\n"
		"      tensors: [activation]\n"
		"      stats: [underflows%, mse, scale_inv_min, scale_inv_max, overflows%,\n"
		"              mxfp8_mse, mxfp8_cos_sim, mxfp8_mse_columnwise, fp8_block_scaling_mse]\n"
		"    LogTensorStats:\n"
		"      enabled: True\n"
		"      tensors: [activation]\n"
		"      stats: [max]\n",
		NULL);
	CHECK(ctx != NULL);
	if (!ctx)
		return;
	enum { ROWS = 40, COLS = 70 };
	int64_t sc_cols = rup((COLS + 31) / 32, 4), n = ROWS * COLS;
	static float x[ROWS * COLS];
	static uint8_t q[ROWS * COLS], sc[128 * 8];
	fill(x, n);
	coarse_mx_row(x, ROWS, COLS, DLI_DTYPE_F8E4M3, q, sc);
	CHECK(sc_cols * rup(ROWS, 128) <= (int64_t)sizeof sc);
	struct dli_layer *l = layer(ctx, FC1);
	struct dli_tensor t = dli_tensor_2d(x, DLI_DTYPE_F32, ROWS, COLS);
	struct dli_block_quantized_tensor b =
		dli_block_quantized_te(DLI_BLOCK_MXFP8, DLI_DTYPE_F8E4M3, false, ROWS, COLS, q, sc, NULL);
	CHECK_INT(dli_inspect_tensor_block(l, DLI_TENSOR_ACTIVATION, &t, NULL, &b, NULL), 0);
	CHECK_INT(dli_step(ctx), 0);
	dli_destroy(ctx);

	struct terms h;
	struct dli_stats_record col, fb, whatif_row;
	naive_mx_row(x, ROWS, COLS, DLI_DTYPE_F8E4M3, q, sc, &h);
	CHECK_INT(dli_cpu_mx_compare(x, DLI_DTYPE_F32, ROWS, COLS, DLI_DTYPE_F8E4M3, true, &scalar,
				     &col), 0);
	CHECK_INT(dli_cpu_mx_compare(x, DLI_DTYPE_F32, ROWS, COLS, DLI_DTYPE_F8E4M3, false, &scalar,
				     &whatif_row), 0);
	CHECK_INT(dli_cpu_fp8b_compare(x, DLI_DTYPE_F32, ROWS, COLS, DLI_DTYPE_F8E4M3, 2, false,
				       true, &scalar, &fb), 0);
	/* The host's copy is coarser than the what-if (a power of two moves FP8's rounding only
	 * where values fall below its normal range: more underflows): a test whose copy matched it
	 * could not tell which one was read. */
	if (!(h.under > whatif_row.underflows + 20))
		fprintf(stderr, "host copy: under %llu err %g; what-if: under %llu err %g\n",
			(unsigned long long)h.under, h.err, (unsigned long long)whatif_row.underflows,
			whatif_row.err_sq);
	CHECK(h.under > whatif_row.underflows + 20);
	check_logged(FC1 "_activation_underflows%", 100.0 * (double)h.under / (double)n);
	check_logged(FC1 "_activation_overflows%", 100.0 * (double)h.over / (double)n);
	check_logged(FC1 "_activation_mse", h.err / (double)n);
	check_logged(FC1 "_activation_scale_inv_min", h.lo);
	check_logged(FC1 "_activation_scale_inv_max", h.hi);
	check_logged(FC1 "_activation_mxfp8_mse", h.err / (double)n);
	check_logged(FC1 "_activation_mxfp8_cos_sim", h.dot / sqrt(h.xs * h.dqs));
	/* No column-wise copy from the host, another recipe: what-ifs. */
	check_logged_tol(FC1 "_activation_mxfp8_mse_columnwise", col.err_sq / (double)n, 1e-5);
	check_logged_tol(FC1 "_activation_fp8_block_scaling_mse", fb.err_sq / (double)n, 1e-5);
	/* LogTensorStats has no block call: it got the plain one. */
	float mx = -INFINITY;
	for (int64_t i = 0; i < n; i++)
		mx = fmaxf(mx, x[i]);
	check_logged(FC1 "_activation_max", mx);
}

/* A strided hp (dli_inspect_tensor_block's strides): rows of a wider buffer whose padding holds
 * NaN. LogFp8TensorStats (strided) compares the host's copy with the view's elements;
 * LogTensorStats (no block call) gets the view's contiguous copy: a contiguous hp's values. */
static void test_feature_strided_hp(void)
{
	struct dli_context *ctx = open_yaml(
		"mx:\n  enabled: True\n  layers: {layer_name_regex_pattern: fc1}\n"
		"  transformer_engine:\n"
		"    LogFp8TensorStats:\n"
		"      enabled: True\n"
		"      tensors: [activation]\n"
		"      stats: [mse, underflows%]\n"
		"    LogTensorStats:\n"
		"      enabled: True\n"
		"      tensors: [activation]\n"
		"      stats: [max, l1_norm]\n",
		NULL);
	CHECK(ctx != NULL);
	if (!ctx)
		return;
	enum { ROWS = 40, COLS = 70, PITCH = 75 };
	int64_t n = ROWS * COLS;
	static float x[ROWS * COLS], wide[ROWS * PITCH];
	static uint8_t q[ROWS * COLS], sc[128 * 8];
	fill(x, n);
	coarse_mx_row(x, ROWS, COLS, DLI_DTYPE_F8E4M3, q, sc);
	for (int64_t i = 0; i < ROWS * PITCH; i++)
		wide[i] = i % PITCH < COLS ? x[i / PITCH * COLS + i % PITCH] : NAN;
	struct dli_tensor t = dli_tensor_2d(wide, DLI_DTYPE_F32, ROWS, COLS);
	const int64_t strides[2] = {PITCH, 1};
	struct dli_block_quantized_tensor b =
		dli_block_quantized_te(DLI_BLOCK_MXFP8, DLI_DTYPE_F8E4M3, false, ROWS, COLS, q, sc, NULL);
	CHECK_INT(dli_inspect_tensor_block(layer(ctx, FC1), DLI_TENSOR_ACTIVATION, &t, strides, &b,
					   NULL), 0);
	CHECK_INT(dli_step(ctx), 0);
	dli_destroy(ctx);
	struct terms h;
	naive_mx_row(x, ROWS, COLS, DLI_DTYPE_F8E4M3, q, sc, &h);
	check_logged(FC1 "_activation_mse", h.err / (double)n);
	check_logged(FC1 "_activation_underflows%", 100.0 * (double)h.under / (double)n);
	float mx = -INFINITY;
	double l1 = 0;
	for (int64_t i = 0; i < n; i++) {
		mx = fmaxf(mx, x[i]);
		l1 += fabs(x[i]);
	}
	check_logged(FC1 "_activation_max", mx);
	check_logged_tol(FC1 "_activation_l1_norm", l1, 1e-6);
}

/* FP8 block scaling's column-wise slot: the host's 1-D copies feed each direction; with only the
 * row-wise one, the column-wise stat is the (2-D) what-if. */
static void test_feature_fp8_block(void)
{
	enum { ROWS = 150, COLS = 260 };
	int64_t n = ROWS * COLS;
	float *x = malloc((size_t)n * sizeof *x);
	uint8_t *qr = malloc((size_t)n), *qc = malloc((size_t)n);
	float *sr = calloc((size_t)(rup(ROWS, 4) * 3), sizeof(float));
	float *scl = calloc((size_t)(2 * rup(COLS, 4)), sizeof(float));
	if (!x || !qr || !qc || !sr || !scl) {
		CHECK(false);
		goto out;
	}
	fill(x, n);
	quantize_fb(x, ROWS, COLS, DLI_DTYPE_F8E4M3, 1, false, qr, sr);
	quantize_fb(x, ROWS, COLS, DLI_DTYPE_F8E4M3, 1, true, qc, scl);
	struct dli_stats_record row, colr, two_d;
	CHECK_INT(dli_cpu_fp8b_compare(x, DLI_DTYPE_F32, ROWS, COLS, DLI_DTYPE_F8E4M3, 1, false, true,
				       &scalar, &row), 0);
	CHECK_INT(dli_cpu_fp8b_compare(x, DLI_DTYPE_F32, ROWS, COLS, DLI_DTYPE_F8E4M3, 1, true, true,
				       &scalar, &colr), 0);
	CHECK_INT(dli_cpu_fp8b_compare(x, DLI_DTYPE_F32, ROWS, COLS, DLI_DTYPE_F8E4M3, 2, false, true,
				       &scalar, &two_d), 0);
	CHECK(row.err_sq != colr.err_sq && colr.err_sq != two_d.err_sq);
	for (int both = 0; both < 2; both++) {
		struct dli_context *ctx = open_yaml(
			"fb:\n  enabled: True\n  layers: {layer_name_regex_pattern: fc1}\n"
			"  transformer_engine:\n"
			"    LogFp8TensorStats:\n"
			"      enabled: True\n"
			"      tensors: [activation]\n"
			"      stats: [fp8_block_scaling_mse, fp8_block_scaling_mse_columnwise, mse]\n",
			NULL);
		CHECK(ctx != NULL);
		if (!ctx)
			break;
		struct dli_tensor t = dli_tensor_2d(x, DLI_DTYPE_F32, ROWS, COLS);
		struct dli_block_quantized_tensor br = dli_block_quantized_te(
			DLI_BLOCK_FP8_1D, DLI_DTYPE_F8E4M3, false, ROWS, COLS, qr, sr, NULL);
		struct dli_block_quantized_tensor bc = dli_block_quantized_te(
			DLI_BLOCK_FP8_1D, DLI_DTYPE_F8E4M3, true, ROWS, COLS, qc, scl, NULL);
		CHECK_INT(dli_inspect_tensor_block(layer(ctx, FC1), DLI_TENSOR_ACTIVATION, &t, NULL,
						   &br, both ? &bc : NULL), 0);
		CHECK_INT(dli_step(ctx), 0);
		dli_destroy(ctx);
		check_logged(FC1 "_activation_fp8_block_scaling_mse", row.err_sq / (double)n);
		check_logged(FC1 "_activation_mse", row.err_sq / (double)n);
		/* The host's copy (double sums), or the 2-D what-if (float lanes). */
		check_logged_tol(FC1 "_activation_fp8_block_scaling_mse_columnwise",
				 (both ? colr.err_sq : two_d.err_sq) / (double)n, both ? 1e-8 : 1e-5);
	}
out:
	free(x);
	free(qr);
	free(qc);
	free(sr);
	free(scl);
}

/* LogNvfp4TensorStats reads a host's NVFP4 row-wise copy; LogFp8TensorStats' stats without a
 * prefix are not NVFP4's and say so once. */
static void test_feature_nvfp4(void)
{
	struct dli_context *ctx = open_yaml(
		"nv:\n  enabled: True\n  layers: {layer_name_regex_pattern: fc1}\n"
		"  transformer_engine:\n"
		"    LogNvfp4TensorStats:\n"
		"      enabled: True\n"
		"      tensors: [activation]\n"
		"      stats: [underflows%, mse]\n"
		"    LogFp8TensorStats:\n"
		"      enabled: True\n"
		"      tensors: [activation]\n"
		"      stats: [mse]\n",
		NULL);
	CHECK(ctx != NULL);
	if (!ctx)
		return;
	enum { ROWS = 20, COLS = 48 };
	int64_t n = ROWS * COLS;
	static float x[ROWS * COLS];
	static uint8_t q[ROWS * COLS], sc[128 * 4];
	float amax;
	fill(x, n);
	CHECK_INT(dli_cpu_nvfp4_quantize(x, DLI_DTYPE_F32, ROWS, COLS, 1, false, &scalar, q, sc,
					 &amax), 0);
	/* A host whose global amax is twice the tensor's: every value dequantizes twice as large. */
	float host_amax = 2 * amax;
	uint8_t *packed = pack_nvfp4(q, ROWS, COLS, false);
	CHECK(packed != NULL);
	struct dli_tensor t = dli_tensor_2d(x, DLI_DTYPE_F32, ROWS, COLS);
	struct dli_block_quantized_tensor b = dli_block_quantized_te(
		DLI_BLOCK_NVFP4, DLI_DTYPE_U8, false, ROWS, COLS, packed, sc, &host_amax);
	CHECK_INT(dli_inspect_tensor_block(layer(ctx, FC1), DLI_TENSOR_ACTIVATION, &t, NULL, &b,
					   NULL), 0);
	CHECK_INT(dli_step(ctx), 0);
	dli_destroy(ctx);
	double err = 0;
	uint64_t under = 0;
	for (int64_t i = 0; i < n; i++) {
		float s = dli_fp8_decode(sc[i / COLS * 4 + i % COLS / 16], DLI_DTYPE_F8E4M3);
		double dq = dli_nvfp4_decode(q[i]) * (s * host_amax * (1.0f / 2688.0f));
		err += (x[i] - dq) * (x[i] - dq);
		under += x[i] != 0 && (q[i] & 7) == 0;
	}
	check_logged(FC1 "_activation_nvfp4_mse", err / (double)n);
	check_logged(FC1 "_activation_nvfp4_underflows%", 100.0 * (double)under / (double)n);
	check_not_logged(FC1 "_activation_mse");
	CHECK_INT(count_lines(MESSAGE_LOG, "the host's copy is NVFP4"), 1);
	free(packed);
}

/* fp8_delayed_scaling_ stats share the host-copy slot with the unprefixed ones: a block-scaled
 * copy is not delayed scaling's, so neither is logged from it (TransformerEngine refuses such a
 * config) and the reason is said once; the mxfp8_ stats still read the copy. */
static void test_delayed_prefix_block(void)
{
	struct dli_context *ctx = open_yaml(
		"mx:\n  enabled: True\n  layers: {layer_name_regex_pattern: fc1}\n"
		"  transformer_engine:\n"
		"    LogFp8TensorStats:\n"
		"      enabled: True\n"
		"      tensors: [activation]\n"
		"      stats: [mse, fp8_delayed_scaling_mse, mxfp8_mse]\n",
		NULL);
	CHECK(ctx != NULL);
	if (!ctx)
		return;
	enum { ROWS = 8, COLS = 64 };
	int64_t n = ROWS * COLS;
	static float x[ROWS * COLS];
	static uint8_t q[ROWS * COLS], sc[128 * 4];
	fill(x, n);
	coarse_mx_row(x, ROWS, COLS, DLI_DTYPE_F8E4M3, q, sc);
	struct dli_tensor t = dli_tensor_2d(x, DLI_DTYPE_F32, ROWS, COLS);
	struct dli_block_quantized_tensor b =
		dli_block_quantized_te(DLI_BLOCK_MXFP8, DLI_DTYPE_F8E4M3, false, ROWS, COLS, q, sc, NULL);
	for (int step = 0; step < 2; step++) {
		CHECK_INT(dli_inspect_tensor_block(layer(ctx, FC1), DLI_TENSOR_ACTIVATION, &t, NULL,
						   &b, NULL), 0);
		CHECK_INT(dli_step(ctx), 0);
	}
	dli_destroy(ctx);
	struct terms h;
	naive_mx_row(x, ROWS, COLS, DLI_DTYPE_F8E4M3, q, sc, &h);
	check_logged(FC1 "_activation_mxfp8_mse", h.err / (double)n);
	check_not_logged(FC1 "_activation_fp8_delayed_scaling_mse");
	check_not_logged(FC1 "_activation_mse");
	CHECK_INT(count_lines(MESSAGE_LOG, "are a delayed-scaling host's"), 1);
}

/* A context whose LogFp8TensorStats logs the activation's mse from the host's copy. */
static struct dli_context *open_fp8_mse(void)
{
	return open_yaml("mx:\n  enabled: True\n  layers: {layer_name_regex_pattern: fc1}\n"
			 "  transformer_engine:\n"
			 "    LogFp8TensorStats:\n"
			 "      enabled: True\n"
			 "      tensors: [activation]\n"
			 "      stats: [mse]\n",
			 NULL);
}

/* Copies the pass cannot read fail the call, dli_last_error saying why. */
static void test_refusals(void)
{
	struct dli_context *ctx = open_fp8_mse();
	CHECK(ctx != NULL);
	if (!ctx)
		return;
	struct dli_layer *l = layer(ctx, FC1);
	static float x[8 * 64];
	static uint8_t q[8 * 64], sc[128 * 4];
	struct dli_tensor t = dli_tensor_2d(x, DLI_DTYPE_F32, 8, 64);
	struct {
		struct dli_block_quantized_tensor b;
		const char *why;
	} cases[] = {
		{dli_block_quantized_te(DLI_BLOCK_MXFP8, DLI_DTYPE_F8E4M3, false, 16, 32, q, sc, NULL),
		 "copy is 16 x 32, its high-precision tensor 8 x 64"},
		{dli_block_quantized_te(9, DLI_DTYPE_F8E4M3, false, 8, 64, q, sc, NULL),
		 "an unknown recipe"},
		{dli_block_quantized_te(DLI_BLOCK_MXFP8, DLI_DTYPE_U8, false, 8, 64, q, sc, NULL),
		 "needs codes of format f8e4m3 or f8e5m2"},
		{dli_block_quantized_te(DLI_BLOCK_MXFP8, DLI_DTYPE_F8E4M3, false, 8, 64, NULL, sc, NULL),
		 "no data or no scale_inv"},
		{dli_block_quantized_te(DLI_BLOCK_FP8_1D, DLI_DTYPE_F8E4M3, false, 8, 64, q, sc, NULL),
		 NULL},
	};
	cases[4].b.data_strides[0] = -64;
	cases[4].why = "a negative stride";
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		int r = dli_inspect_tensor_block(l, DLI_TENSOR_ACTIVATION, &t, NULL, &cases[i].b, NULL);
		const char *e = dli_last_error(ctx);
		bool ok = r == -EINVAL && strstr(e, cases[i].why) && strstr(e, FC1) &&
			  strstr(e, "activation");
		if (!ok)
			fprintf(stderr, "case %zu: %d '%s'\n", i, r, e);
		CHECK(ok);
	}
	/* NVFP4 without its amax; an older struct. */
	struct dli_block_quantized_tensor nv =
		dli_block_quantized_te(DLI_BLOCK_NVFP4, DLI_DTYPE_U8, false, 8, 64, q, sc, NULL);
	struct dli_stats_record rec;
	const char *why = NULL;
	CHECK_INT(dli_cpu_block_quantized_check(&nv, &why), -EINVAL);
	CHECK(why && strstr(why, "amax"));
	nv.size = 40;
	CHECK_INT(dli_cpu_block_compare_quantized(x, DLI_DTYPE_F32, &nv, &rec), -EINVAL);
	/* A CUDA tensor: refused with a message, nothing read. */
	struct dli_tensor dev = t;
	dev.device.type = DLI_DEVICE_CUDA;
	struct dli_block_quantized_tensor ok =
		dli_block_quantized_te(DLI_BLOCK_MXFP8, DLI_DTYPE_F8E4M3, false, 8, 64, q, sc, NULL);
	CHECK_INT(dli_inspect_tensor_block(l, DLI_TENSOR_ACTIVATION, &dev, NULL, &ok, NULL), -EINVAL);
	CHECK(strstr(dli_last_error(ctx), "CUDA") != NULL);
	/* A copy in CUDA memory, which a statistic needs: refused, nothing read. */
	struct dli_block_quantized_tensor on_device = ok;
	on_device.device.type = DLI_DEVICE_CUDA;
	CHECK_INT(dli_inspect_tensor_block(l, DLI_TENSOR_ACTIVATION, &t, NULL, &on_device, NULL),
		  -EINVAL);
	CHECK(strstr(dli_last_error(ctx), "is in CUDA memory") != NULL);
	CHECK_INT(dli_cpu_block_quantized_check(&on_device, &why), -EINVAL);
	dli_destroy(ctx);

	/* The same copy where no feature reads copies: the call goes on, its statistics logged. */
	ctx = open_yaml("plain:\n  enabled: True\n  layers: {layer_name_regex_pattern: fc1}\n"
			"  transformer_engine:\n"
			"    LogTensorStats: {enabled: True, tensors: [activation], stats: [max]}\n",
			NULL);
	CHECK(ctx != NULL);
	if (!ctx)
		return;
	x[5] = 3.5f;
	CHECK_INT(dli_inspect_tensor_block(layer(ctx, FC1), DLI_TENSOR_ACTIVATION, &t, NULL,
					   &on_device, NULL), 0);
	CHECK_INT(dli_step(ctx), 0);
	dli_destroy(ctx);
	check_logged(FC1 "_activation_max", 3.5);
}

/* Zero strides keep every code index small whatever the shape, so rows * cols (which indexes hp)
 * is bounded on its own: a copy of 2^64 elements, whose product wraps to hp's 0, is refused
 * rather than read past hp; an empty copy of 2^62 rows is not walked row by row. */
static void test_huge_shapes(void)
{
	static float x[64];
	static uint8_t q[64], sc[64];
	const int64_t big = INT64_C(1) << 32;
	struct dli_block_quantized_tensor b =
		dli_block_quantized_te(DLI_BLOCK_MXFP8, DLI_DTYPE_F8E4M3, false, big, big, q, sc, NULL);
	memset(b.data_strides, 0, sizeof b.data_strides);
	memset(b.scale_strides, 0, sizeof b.scale_strides);
	const char *why = NULL;
	CHECK_INT(dli_cpu_block_quantized_check(&b, &why), -EINVAL);
	CHECK(why && strstr(why, "more than 2^62 elements"));
	b.cols = (INT64_C(1) << 62) / big + 1;
	CHECK_INT(dli_cpu_block_quantized_check(&b, NULL), -EINVAL);
	b.cols = (INT64_C(1) << 62) / big;
	CHECK_INT(dli_cpu_block_quantized_check(&b, NULL), 0);

	struct dli_context *ctx = open_fp8_mse();
	CHECK(ctx != NULL);
	if (!ctx)
		return;
	struct dli_tensor t = dli_tensor_2d(x, DLI_DTYPE_F32, 0, big);
	b.cols = big;
	int r = dli_inspect_tensor_block(layer(ctx, FC1), DLI_TENSOR_ACTIVATION, &t, NULL, &b, NULL);
	CHECK_INT(r, -EINVAL);
	CHECK(strstr(dli_last_error(ctx), "more than 2^62 elements") != NULL);
	dli_destroy(ctx);

	struct dli_stats_record rec;
	b.rows = INT64_C(1) << 62;
	b.cols = 0;
	CHECK_INT(dli_cpu_block_compare_quantized(NULL, DLI_DTYPE_F32, &b, &rec), 0);
	CHECK(rec.fp8_count == 0 && rec.scale_inv_min == INFINITY && rec.scale_inv_max == 0);
}

/* The column-wise FP8 block stat mirrors the row-wise one only when no copy fed it: a host's
 * column-wise copy whose scales are all padding (zeros), or one the pass refuses, logs nothing
 * under the column-wise name, not the row-wise copy's range. */
static void test_mirror_only_unfed(void)
{
	enum { ROWS = 8, COLS = 256 };
	static uint8_t q[ROWS * COLS];
	static float sr[2 * 8], scl[COLS];
	for (size_t i = 0; i < sizeof sr / sizeof sr[0]; i++)
		sr[i] = 0.5f + (float)i;
	/* 0: no column-wise copy; 1: one whose scales are all zero; 2: one the pass refuses. */
	for (int zero_col = 0; zero_col < 3; zero_col++) {
		struct dli_context *ctx = open_yaml(
			"fb:\n  enabled: True\n  layers: {layer_name_regex_pattern: fc1}\n"
			"  transformer_engine:\n"
			"    LogFp8TensorStats:\n"
			"      enabled: True\n"
			"      tensors: [activation]\n"
			"      stats: [fp8_block_scaling_scale_inv_max,\n"
			"              fp8_block_scaling_scale_inv_max_columnwise]\n",
			NULL);
		CHECK(ctx != NULL);
		if (!ctx)
			return;
		struct dli_block_quantized_tensor br = dli_block_quantized_te(
			DLI_BLOCK_FP8_1D, DLI_DTYPE_F8E4M3, false, ROWS, COLS, q, sr, NULL);
		struct dli_block_quantized_tensor bc = dli_block_quantized_te(
			DLI_BLOCK_FP8_1D, DLI_DTYPE_F8E4M3, true, ROWS, COLS, q, scl, NULL);
		if (zero_col == 2)
			bc.scale_strides[0] = -1;
		/* No hp: the scale ranges only. */
		CHECK_INT(dli_inspect_tensor_block(layer(ctx, FC1), DLI_TENSOR_ACTIVATION, NULL, NULL,
						   &br, zero_col ? &bc : NULL),
			  zero_col == 2 ? -EINVAL : 0);
		CHECK_INT(dli_step(ctx), 0);
		dli_destroy(ctx);
		check_logged(FC1 "_activation_fp8_block_scaling_scale_inv_max", 0.5 + 15);
		if (zero_col)
			check_not_logged(FC1 "_activation_fp8_block_scaling_scale_inv_max_columnwise");
		else
			check_logged(FC1 "_activation_fp8_block_scaling_scale_inv_max_columnwise",
				     0.5 + 15);
	}
}

int main(void)
{
	test_layouts();
	test_scale_rules();
	test_feature_mxfp8();
	test_feature_strided_hp();
	test_feature_fp8_block();
	test_feature_nvfp4();
	test_delayed_prefix_block();
	test_refusals();
	test_huge_shapes();
	test_mirror_only_unfed();
	remove_log_dir();
	return check_exit();
}
