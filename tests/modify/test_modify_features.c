/* PerTensorScaling and FakeQuant through the real core (dli_init with YAML text, the modules from
 * the build tree): which (gemm, tensor) they modify, that fp8_gemm_enabled follows FakeQuant, that
 * every modify_tensor output equals, bit for bit, a reference computed here with the kernels'
 * encode/decode and the current-scaling formula written out, and the config errors. */
#include <errno.h>
#include <float.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <dlinspect/dlinspect.h>

#include "check.h"
#include "dli-test.h"
#include "kernels-private.h" /* dli_fp8_encode/decode, for the reference */

#define N 4099 /* more than one 4096-element cast chunk, and no multiple of a SIMD width */

/* ---- Data ---- */

static uint64_t rng = 0x9e3779b97f4a7c15ull;

static float uniform(void)
{
	rng = rng * 6364136223846793005ull + 1442695040888963407ull;
	return (float)((rng >> 40) * 0x1p-24) * 2.0f - 1.0f;
}

/* Values over many binades (so that current scaling both keeps and flushes some), +0 and -0, and
 * two outliers that set the amax. */
static void fill(float *x, size_t n)
{
	for (size_t i = 0; i < n; i++)
		x[i] = uniform() * ldexpf(1.0f, (int)(i % 25) - 20);
	x[7] = 0.0f;
	x[8] = -0.0f;
	x[100] = 3000.0f;
	x[n - 1] = -70000.0f;
}

/* ---- The reference (docs/statistics.md, written out) ---- */

/* TransformerEngine's amax kernel reduces with fmaxf, which skips NaN. */
static float ref_amax(const float *x, size_t n)
{
	float a = 0.0f;
	for (size_t i = 0; i < n; i++)
		if (!isnan(x[i]) && fabsf(x[i]) > a)
			a = fabsf(x[i]);
	return a;
}

/* fp8_max / amax in float, as TransformerEngine divides; 2^-margin is exact for these margins. */
static float ref_scale(float amax, enum dli_dtype fmt, int margin)
{
	if (!(amax > 0.0f) || isinf(amax))
		return 1.0f;
	float s = (fmt == DLI_DTYPE_F8E4M3 ? 448.0f : 57344.0f) / amax;
	s = ldexpf(s, -margin);
	return isinf(s) ? FLT_MAX : s;
}

static bool same_float(float a, float b)
{
	return (isnan(a) && isnan(b)) || !memcmp(&a, &b, sizeof a);
}

/* ---- Checking one modify_tensor call ---- */

struct want {
	enum dli_dtype format; /* what the feature should quantize to */
	int margin;
	float force_scale; /* nonzero: the expected scale, instead of the one from ref_amax */
};

/* modify_tensor on f32 `x` into an `out_dtype` buffer equals the reference; returns its scale. */
static float check_modify(struct dli_layer *l, enum dli_gemm g, int t, const float *x, size_t n,
			  const struct dli_quantizer *q, enum dli_dtype out_dtype, struct want w,
			  const char *what)
{
	float scale = w.force_scale ? w.force_scale : ref_scale(ref_amax(x, n), w.format, w.margin);
	float *out = calloc(n + 1, sizeof *out);
	struct dli_tensor in = tensor((void *)x, DLI_DTYPE_F32, (int64_t)n);
	struct dli_tensor o = tensor(out, out_dtype, (int64_t)n);
	int r = dli_modify_tensor(l, g, t, &in, q, &o);
	check_count++;
	if (r) {
		check_failures++;
		fprintf(stderr, "%s: modify_tensor returned %d\n", what, r);
		free(out);
		return scale;
	}
	size_t bad = 0, first = 0;
	for (size_t i = 0; i < n; i++) {
		uint8_t code = dli_fp8_encode(x[i] * scale, w.format);
		bool ok = out_dtype == DLI_DTYPE_F32
				  ? same_float(out[i], dli_fp8_decode(code, w.format) * (1.0f / scale))
				  : ((uint8_t *)out)[i] == code;
		if (!ok && !bad++)
			first = i;
	}
	check_count++;
	if (bad) {
		check_failures++;
		fprintf(stderr, "%s: %zu of %zu elements differ from the reference, first x[%zu] = %a\n",
			what, bad, n, first, x[first]);
	}
	free(out);
	return scale;
}

/* ---- PerTensorScaling ---- */

static const char pts_yaml[] =
	"pts_margin0:\n"
	"  enabled: true\n"
	"  layers: {layer_name_regex_pattern: 'pts0$'}\n"
	"  transformer_engine:\n"
	"    PerTensorScaling:\n"
	"      enabled: true\n"
	"      gemms: [fprop, dgrad, wgrad]\n"
	"      tensors: [activation, gradient, weight]\n"
	"pts_margin1:\n"
	"  enabled: true\n"
	"  layers: {layer_name_regex_pattern: 'pts1$'}\n"
	"  transformer_engine:\n"
	"    PerTensorScaling: {enabled: true, gemms: [fprop, dgrad], tensors: [activation, gradient],\n"
	"                       margin: 1}\n";

static void test_pts_selection(void)
{
	struct dli_context *ctx = open_yaml(pts_yaml, NULL);
	CHECK(ctx != NULL);
	if (!ctx)
		return;
	struct dli_layer *l0 = layer(ctx, "model.pts0"), *l1 = layer(ctx, "model.pts1");
	struct dli_layer *other = layer(ctx, "model.other");
	int64_t next = 0;
	CHECK(dli_modify_tensor_enabled(l0, DLI_GEMM_FPROP, DLI_TENSOR_ACTIVATION, &next));
	CHECK_INT(next, DLI_NEVER);
	CHECK(dli_modify_tensor_enabled(l0, DLI_GEMM_WGRAD, DLI_TENSOR_GRADIENT, &next));
	CHECK(!dli_modify_tensor_enabled(l0, DLI_GEMM_FPROP, DLI_TENSOR_OUTPUT, &next));
	CHECK(dli_modify_tensor_enabled(l1, DLI_GEMM_DGRAD, DLI_TENSOR_GRADIENT, &next));
	CHECK(!dli_modify_tensor_enabled(l1, DLI_GEMM_WGRAD, DLI_TENSOR_GRADIENT, &next));
	CHECK(!dli_modify_tensor_enabled(l1, DLI_GEMM_FPROP, DLI_TENSOR_WEIGHT, &next));
	CHECK(!dli_modify_tensor_enabled(other, DLI_GEMM_FPROP, DLI_TENSOR_ACTIVATION, &next));
	/* PerTensorScaling changes the scale, not where the GEMM runs. */
	for (int g = 0; g < DLI_GEMM_COUNT; g++)
		CHECK(dli_fp8_gemm_enabled(l0, (enum dli_gemm)g, &next) && next == DLI_NEVER);
	float x[4] = {1, 2, 3, 4}, y[4];
	struct dli_tensor in = tensor(x, DLI_DTYPE_F32, 4), out = tensor(y, DLI_DTYPE_F32, 4);
	CHECK_INT(dli_modify_tensor(l1, DLI_GEMM_WGRAD, DLI_TENSOR_GRADIENT, &in, NULL, &out), -ENOENT);
	dli_destroy(ctx);
}

/* f32 out, no quantizer: the hybrid format by tensor, margins 0 and 1, with and without a NaN,
 * and the quantizer's format when one is given. */
static void test_pts_values(void)
{
	struct dli_context *ctx = open_yaml(pts_yaml, NULL);
	CHECK(ctx != NULL);
	if (!ctx)
		return;
	struct dli_layer *l0 = layer(ctx, "model.pts0"), *l1 = layer(ctx, "model.pts1");
	float *x = malloc(N * sizeof *x);
	fill(x, N);
	const enum dli_dtype E4 = DLI_DTYPE_F8E4M3, E5 = DLI_DTYPE_F8E5M2;

	float s = check_modify(l0, DLI_GEMM_FPROP, DLI_TENSOR_ACTIVATION, x, N, NULL, DLI_DTYPE_F32,
			       (struct want){E4, 0, 0}, "pts activation e4m3 margin 0");
	CHECK(s == 448.0f / 70000.0f);
	check_modify(l0, DLI_GEMM_FPROP, DLI_TENSOR_WEIGHT, x, N, NULL, DLI_DTYPE_F32,
		     (struct want){E4, 0, 0}, "pts weight e4m3 margin 0");
	check_modify(l0, DLI_GEMM_DGRAD, DLI_TENSOR_GRADIENT, x, N, NULL, DLI_DTYPE_F32,
		     (struct want){E5, 0, 0}, "pts gradient e5m2 margin 0");
	s = check_modify(l1, DLI_GEMM_FPROP, DLI_TENSOR_ACTIVATION, x, N, NULL, DLI_DTYPE_F32,
			 (struct want){E4, 1, 0}, "pts activation e4m3 margin 1");
	CHECK(s == 448.0f / 70000.0f / 2);
	check_modify(l1, DLI_GEMM_DGRAD, DLI_TENSOR_GRADIENT, x, N, NULL, DLI_DTYPE_F32,
		     (struct want){E5, 1, 0}, "pts gradient e5m2 margin 1");

	/* The host's quantizer decides the format, whatever the tensor. */
	struct dli_quantizer q = {.size = sizeof q, .format = E5};
	check_modify(l0, DLI_GEMM_FPROP, DLI_TENSOR_ACTIVATION, x, N, &q, DLI_DTYPE_F32,
		     (struct want){E5, 0, 0}, "pts activation with an e5m2 quantizer");
	/* A quantizer from a host whose struct ends before `format`: hybrid again. */
	q.size = offsetof(struct dli_quantizer, format);
	check_modify(l0, DLI_GEMM_FPROP, DLI_TENSOR_ACTIVATION, x, N, &q, DLI_DTYPE_F32,
		     (struct want){E4, 0, 0}, "pts activation with an old quantizer");

	/* A NaN is left out of the amax (as TransformerEngine's fmaxf reduction does): the rest
	 * of the tensor is scaled as without it, and the NaN comes out NaN. */
	x[50] = NAN;
	x[51] = -NAN;
	check_modify(l0, DLI_GEMM_FPROP, DLI_TENSOR_ACTIVATION, x, N, NULL, DLI_DTYPE_F32,
		     (struct want){E4, 0, 448.0f / 70000.0f}, "pts activation with a NaN");
	check_modify(l1, DLI_GEMM_DGRAD, DLI_TENSOR_GRADIENT, x, N, NULL, DLI_DTYPE_F32,
		     (struct want){E5, 1, 57344.0f / 70000.0f / 2}, "pts gradient with a NaN");
	float *y = malloc(N * sizeof *y);
	struct dli_tensor in = tensor(x, DLI_DTYPE_F32, N), out = tensor(y, DLI_DTYPE_F32, N);
	CHECK_INT(dli_modify_tensor(l0, DLI_GEMM_FPROP, DLI_TENSOR_ACTIVATION, &in, NULL, &out), 0);
	CHECK(isnan(y[50]) && isnan(y[51]));

	/* An inf amax has no usable scale: scale 1, and inf saturates to the finite max. */
	x[50] = INFINITY;
	x[51] = 1.0f;
	check_modify(l0, DLI_GEMM_FPROP, DLI_TENSOR_ACTIVATION, x, N, NULL, DLI_DTYPE_F32,
		     (struct want){E4, 0, 1.0f}, "pts activation with an inf");
	CHECK_INT(dli_modify_tensor(l0, DLI_GEMM_FPROP, DLI_TENSOR_ACTIVATION, &in, NULL, &out), 0);
	CHECK(y[50] == 448.0f && y[N - 1] == -448.0f && y[51] == 1.0f);

	/* All zeros: amax 0, scale 1, signs kept. */
	for (size_t i = 0; i < N; i++)
		x[i] = i & 1 ? -0.0f : 0.0f;
	check_modify(l0, DLI_GEMM_FPROP, DLI_TENSOR_ACTIVATION, x, N, NULL, DLI_DTYPE_F32,
		     (struct want){E4, 0, 1.0f}, "pts zeros");

	/* bf16 input: the same values, cast from their bf16 bits. */
	fill(x, N);
	uint16_t *b = malloc(N * sizeof *b);
	for (size_t i = 0; i < N; i++) {
		uint32_t u;
		memcpy(&u, &x[i], 4);
		b[i] = (uint16_t)(u >> 16);
		u = (uint32_t)b[i] << 16;
		memcpy(&x[i], &u, 4); /* x now holds exactly the bf16 values */
	}
	float scale = ref_scale(ref_amax(x, N), E4, 0);
	struct dli_tensor bin = tensor(b, DLI_DTYPE_BF16, N);
	CHECK_INT(dli_modify_tensor(l0, DLI_GEMM_FPROP, DLI_TENSOR_ACTIVATION, &bin, NULL, &out), 0);
	size_t bad = 0;
	for (size_t i = 0; i < N; i++)
		bad += !same_float(y[i], dli_fp8_decode(dli_fp8_encode(x[i] * scale, E4), E4) *
						 (1.0f / scale));
	CHECK_INT(bad, 0);
	free(b);
	free(y);
	free(x);
	dli_destroy(ctx);
}

/* FP8 out: the codes, and scale_inv through the quantizer. */
static void test_pts_codes(void)
{
	struct dli_context *ctx = open_yaml(pts_yaml, NULL);
	CHECK(ctx != NULL);
	if (!ctx)
		return;
	struct dli_layer *l0 = layer(ctx, "model.pts0"), *l1 = layer(ctx, "model.pts1");
	float *x = malloc(N * sizeof *x);
	fill(x, N);
	const enum dli_dtype E4 = DLI_DTYPE_F8E4M3, E5 = DLI_DTYPE_F8E5M2;
	float scale_inv = 0;
	struct dli_quantizer q = {.size = sizeof q, .format = E4, .scale_inv_out = &scale_inv};

	float s = check_modify(l0, DLI_GEMM_FPROP, DLI_TENSOR_ACTIVATION, x, N, &q, E4,
			       (struct want){E4, 0, 0}, "pts codes e4m3 margin 0");
	CHECK(same_float(scale_inv, 1.0f / s));
	q.format = E5;
	s = check_modify(l1, DLI_GEMM_DGRAD, DLI_TENSOR_GRADIENT, x, N, &q, E5,
			 (struct want){E5, 1, 0}, "pts codes e5m2 margin 1");
	CHECK(same_float(scale_inv, 1.0f / s));
	x[3] = NAN;
	s = check_modify(l1, DLI_GEMM_FPROP, DLI_TENSOR_ACTIVATION, x, N, &q, E5,
			 (struct want){E5, 1, 0}, "pts codes e5m2 with a NaN");
	CHECK(same_float(scale_inv, 1.0f / s) && s == 57344.0f / 70000.0f / 2);

	/* Empty: nothing to cast, scale 1. */
	scale_inv = 0;
	struct dli_tensor ein = tensor(NULL, DLI_DTYPE_F32, 0), eout = tensor(NULL, E5, 0);
	CHECK_INT(dli_modify_tensor(l0, DLI_GEMM_FPROP, DLI_TENSOR_ACTIVATION, &ein, &q, &eout), 0);
	CHECK(scale_inv == 1.0f);

	/* Refusals. */
	uint8_t *codes = malloc(N);
	struct dli_tensor in = tensor(x, DLI_DTYPE_F32, N), out = tensor(codes, E5, N);
	enum dli_gemm F = DLI_GEMM_FPROP;
	int A = DLI_TENSOR_ACTIVATION;
	q.scale_inv_out = NULL;
	CHECK_INT(dli_modify_tensor(l0, F, A, &in, &q, &out), -EINVAL); /* codes, no scale_inv */
	CHECK_INT(dli_modify_tensor(l0, F, A, &in, NULL, &out), -EINVAL); /* codes, no quantizer */
	q.scale_inv_out = &scale_inv;
	q.size = offsetof(struct dli_quantizer, scale_inv_out); /* an old host: no scale_inv_out */
	CHECK_INT(dli_modify_tensor(l0, F, A, &in, &q, &out), -EINVAL);
	q.size = sizeof q;
	out.dtype = E4; /* neither f32 nor the quantizer's format */
	CHECK_INT(dli_modify_tensor(l0, F, A, &in, &q, &out), -EINVAL);
	out.dtype = DLI_DTYPE_F64;
	CHECK_INT(dli_modify_tensor(l0, F, A, &in, &q, &out), -EINVAL);
	q.format = DLI_DTYPE_F16; /* a quantizer without an FP8 format */
	out.dtype = DLI_DTYPE_F32;
	CHECK_INT(dli_modify_tensor(l0, F, A, &in, &q, &out), -EINVAL);
	q.format = E5;
	out.dtype = E5;
	out.shape[0] = N - 1;
	CHECK_INT(dli_modify_tensor(l0, F, A, &in, &q, &out), -EINVAL);
	out.shape[0] = N;
	in.dtype = DLI_DTYPE_F64;
	CHECK_INT(dli_modify_tensor(l0, F, A, &in, &q, &out), -ENOTSUP);
	in.dtype = DLI_DTYPE_I32;
	CHECK_INT(dli_modify_tensor(l0, F, A, &in, &q, &out), -ENOTSUP);
	in.dtype = DLI_DTYPE_F32;
	in.contiguous = false;
	CHECK_INT(dli_modify_tensor(l0, F, A, &in, &q, &out), -ENOTSUP);
	in.contiguous = true;
	in.device.type = DLI_DEVICE_CUDA;
	CHECK_INT(dli_modify_tensor(l0, F, A, &in, &q, &out), -ENOTSUP);
	in.device.type = DLI_DEVICE_CPU;
	CHECK_INT(dli_modify_tensor(l0, F, A, NULL, &q, &out), -EINVAL);
	CHECK_INT(dli_modify_tensor(l0, F, A, &in, &q, &out), 0);
	free(codes);
	free(x);
	dli_destroy(ctx);
}

/* The seed form: lowercase name, margin beside the selection keys. */
static void test_pts_seed_form(void)
{
	struct dli_context *ctx = open_yaml(
		"seed:\n"
		"  enabled: True\n"
		"  layers: {layer_types: [fc1]}\n"
		"  transformer_engine:\n"
		"    per_tensor_scaling: {enabled: true, margin: 1, gemms: [fprop], tensors: [activation]}\n",
		NULL);
	CHECK(ctx != NULL);
	if (!ctx)
		return;
	struct dli_layer *l = layer(ctx, "model.layers.0.mlp.fc1");
	int64_t next = 0;
	CHECK(dli_modify_tensor_enabled(l, DLI_GEMM_FPROP, DLI_TENSOR_ACTIVATION, &next));
	CHECK(!dli_modify_tensor_enabled(l, DLI_GEMM_DGRAD, DLI_TENSOR_GRADIENT, &next));
	CHECK(!dli_modify_tensor_enabled(l, DLI_GEMM_FPROP, DLI_TENSOR_WEIGHT, &next));
	float *x = malloc(N * sizeof *x);
	fill(x, N);
	float s = check_modify(l, DLI_GEMM_FPROP, DLI_TENSOR_ACTIVATION, x, N, NULL, DLI_DTYPE_F32,
			       (struct want){DLI_DTYPE_F8E4M3, 1, 0}, "seed per_tensor_scaling");
	CHECK(s == 448.0f / 70000.0f / 2);
	free(x);
	dli_destroy(ctx);
}

/* ---- FakeQuant ---- */

static void test_fake_quant(void)
{
	struct dli_context *ctx = open_yaml(
		"fq_e4m3:\n"
		"  enabled: true\n"
		"  layers: {layer_name_regex_pattern: 'fc1$'}\n"
		"  transformer_engine:\n"
		"    FakeQuant:\n"
		"      enabled: true\n"
		"      gemms: [fprop]\n"
		"      tensors: [activation, weight]\n"
		"      quant_format: FP8E4M3\n"
		"fq_e5m2:\n"
		"  enabled: true\n"
		"  layers: {layer_name_regex_pattern: 'fc2$'}\n"
		"  transformer_engine:\n"
		"    FakeQuant: {enabled: true, gemms: [dgrad, wgrad], tensors: [gradient],\n"
		"                quant_format: FP8E5M2, margin: 1}\n",
		NULL);
	CHECK(ctx != NULL);
	if (!ctx)
		return;
	struct dli_layer *fc1 = layer(ctx, "mlp.fc1"), *fc2 = layer(ctx, "mlp.fc2");
	struct dli_layer *proj = layer(ctx, "attention.proj");
	int64_t next = 0;
	/* The fake-quantized tensors feed high-precision GEMMs: exactly the configured ones. */
	CHECK(!dli_fp8_gemm_enabled(fc1, DLI_GEMM_FPROP, &next) && next == DLI_NEVER);
	CHECK(dli_fp8_gemm_enabled(fc1, DLI_GEMM_DGRAD, &next) && next == DLI_NEVER);
	CHECK(dli_fp8_gemm_enabled(fc1, DLI_GEMM_WGRAD, &next) && next == DLI_NEVER);
	CHECK(dli_fp8_gemm_enabled(fc2, DLI_GEMM_FPROP, &next) && next == DLI_NEVER);
	CHECK(!dli_fp8_gemm_enabled(fc2, DLI_GEMM_DGRAD, &next) && next == DLI_NEVER);
	CHECK(!dli_fp8_gemm_enabled(fc2, DLI_GEMM_WGRAD, &next) && next == DLI_NEVER);
	for (int g = 0; g < DLI_GEMM_COUNT; g++)
		CHECK(dli_fp8_gemm_enabled(proj, (enum dli_gemm)g, &next));

	CHECK(dli_modify_tensor_enabled(fc1, DLI_GEMM_FPROP, DLI_TENSOR_ACTIVATION, &next));
	CHECK_INT(next, DLI_NEVER);
	CHECK(dli_modify_tensor_enabled(fc1, DLI_GEMM_FPROP, DLI_TENSOR_WEIGHT, &next));
	CHECK(!dli_modify_tensor_enabled(fc1, DLI_GEMM_DGRAD, DLI_TENSOR_GRADIENT, &next));
	CHECK(dli_modify_tensor_enabled(fc2, DLI_GEMM_WGRAD, DLI_TENSOR_GRADIENT, &next));
	CHECK(!dli_modify_tensor_enabled(fc2, DLI_GEMM_FPROP, DLI_TENSOR_ACTIVATION, &next));

	float *x = malloc(N * sizeof *x);
	fill(x, N);
	const enum dli_dtype E4 = DLI_DTYPE_F8E4M3, E5 = DLI_DTYPE_F8E5M2;
	check_modify(fc1, DLI_GEMM_FPROP, DLI_TENSOR_ACTIVATION, x, N, NULL, DLI_DTYPE_F32,
		     (struct want){E4, 0, 0}, "fake_quant e4m3 activation");
	/* Its own format, not the host's quantizer's. */
	struct dli_quantizer q = {.size = sizeof q, .format = E5};
	check_modify(fc1, DLI_GEMM_FPROP, DLI_TENSOR_WEIGHT, x, N, &q, DLI_DTYPE_F32,
		     (struct want){E4, 0, 0}, "fake_quant e4m3 weight, e5m2 quantizer");
	float s = check_modify(fc2, DLI_GEMM_DGRAD, DLI_TENSOR_GRADIENT, x, N, NULL, DLI_DTYPE_F32,
			       (struct want){E5, 1, 0}, "fake_quant e5m2 margin 1");
	CHECK(s == 57344.0f / 70000.0f / 2);
	x[9] = NAN;
	check_modify(fc2, DLI_GEMM_WGRAD, DLI_TENSOR_GRADIENT, x, N, NULL, DLI_DTYPE_F32,
		     (struct want){E5, 1, 57344.0f / 70000.0f / 2}, "fake_quant e5m2 with a NaN");

	/* Dequantized values only (f32, f16, bf16): FakeQuant never hands out codes. */
	uint8_t *codes = malloc(N);
	float scale_inv = 0;
	q.format = E4;
	q.scale_inv_out = &scale_inv;
	struct dli_tensor in = tensor(x, DLI_DTYPE_F32, N), out = tensor(codes, E4, N);
	CHECK_INT(dli_modify_tensor(fc1, DLI_GEMM_FPROP, DLI_TENSOR_ACTIVATION, &in, &q, &out),
		  -EINVAL);
	out.dtype = DLI_DTYPE_F64;
	CHECK_INT(dli_modify_tensor(fc1, DLI_GEMM_FPROP, DLI_TENSOR_ACTIVATION, &in, &q, &out),
		  -EINVAL);
	in.device.type = DLI_DEVICE_CUDA;
	out = tensor(x, DLI_DTYPE_F32, N);
	CHECK_INT(dli_modify_tensor(fc1, DLI_GEMM_FPROP, DLI_TENSOR_ACTIVATION, &in, NULL, &out),
		  -ENOTSUP);
	CHECK(scale_inv == 0);
	/* A refused tensor is named with what is wrong with it, not a bare "Invalid argument". */
	static const struct {
		int field, rc;
		const char *why;
	} bad[] = {
		{0, -EINVAL, "refused: Invalid argument (-22): out is not contiguous: the cast writes "
			     "it densely; in: f32[4099] cpu:0, out: f32[4099] cpu:0 non-contiguous"},
		{1, -EINVAL, "refused: Invalid argument (-22): out has 4098 elements, in 4099"},
		{2, -EINVAL, "refused: Invalid argument (-22): out has elements but no data"},
		{3, -EINVAL, "refused: Invalid argument (-22): the tensor has an invalid ndim; in: f32 "
			     "with ndim 9"},
		{4, -EINVAL, "refused: Invalid argument (-22): the tensor has a negative or "
			     "overflowing shape"},
	};
	float *y = malloc(N * sizeof *y);
	for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
		in = tensor(x, DLI_DTYPE_F32, N);
		out = tensor(y, DLI_DTYPE_F32, N);
		if (bad[i].field == 0)
			out.contiguous = false;
		else if (bad[i].field == 1)
			out.shape[0] = N - 1;
		else if (bad[i].field == 2)
			out.data = NULL;
		else if (bad[i].field == 3)
			in.ndim = DLI_TENSOR_MAX_DIMS + 1;
		else
			in.shape[0] = -N;
		CHECK_INT(dli_modify_tensor(fc1, DLI_GEMM_FPROP, DLI_TENSOR_ACTIVATION, &in, NULL, &out),
			  bad[i].rc);
		CHECK_CONTAINS(dli_last_error(ctx), bad[i].why);
	}
	free(y);
	free(codes);
	free(x);
	dli_destroy(ctx);
}

/* ---- Config errors ---- */

/* dli_init fails; the message holds every part, and the error's line is `line`. */
static void check_config_error(const char *yaml, int line, const char *const *parts)
{
	struct dli_error err = {0};
	struct dli_context *ctx = open_yaml(yaml, &err);
	CHECK(ctx == NULL);
	dli_destroy(ctx);
	CHECK_INT(err.code, -EINVAL);
	CHECK_STR(err.file, "<string>");
	CHECK_INT(err.line, line);
	for (size_t i = 0; parts[i]; i++)
		CHECK_CONTAINS(err.message, parts[i]);
}

#define HEAD "s:\n  enabled: true\n  layers: {layer_name_regex_pattern: fc1}\n  transformer_engine:\n"

static void test_config_errors(void)
{
	check_config_error(HEAD "    FakeQuant: {enabled: true, gemms: [fprop], tensors: [activation],\n"
				"                quant_format: FP8E4M4}\n",
			   6,
			   (const char *const[]){"<string>:6:", "unknown quant_format 'FP8E4M4'",
						 "did you mean 'FP8E4M3'?", "FP8E4M3, FP8E5M2", NULL});
	check_config_error(HEAD "    FakeQuant: {enabled: true, gemms: [fprop], tensors: [activation]}\n",
			   5, (const char *const[]){"FakeQuant needs 'quant_format'", NULL});
	check_config_error(HEAD "    PerTensorScaling: {enabled: true, gemms: [fprop], tensors: "
				"[activation], margin: one}\n",
			   5, (const char *const[]){"expected a number, got 'one'", NULL});
	/* Out of the schema's range, or NaN: refused by the run as by check (issue 13, item 3). */
	static const char *const margins[] = {"1e308", "-1e308", ".nan", "127", "-126.5"};
	for (size_t i = 0; i < sizeof margins / sizeof margins[0]; i++) {
		char yaml[512], got[64];
		snprintf(yaml, sizeof yaml, HEAD "    FakeQuant: {enabled: true, gemms: [fprop], "
			 "tensors: [activation],\n                quant_format: FP8E4M3, margin: %s}\n",
			 margins[i]);
		snprintf(got, sizeof got, "got '%s'", margins[i]);
		check_config_error(yaml, 6,
				   (const char *const[]){"<string>:6:", "FakeQuant.margin: expected a "
							 "number in [-126, 126], ", got, NULL});
		snprintf(yaml, sizeof yaml, HEAD "    PerTensorScaling: {enabled: true, gemms: [fprop], "
			 "tensors: [activation], margin: %s}\n", margins[i]);
		check_config_error(yaml, 5,
				   (const char *const[]){"PerTensorScaling.margin: expected a number in "
							 "[-126, 126], ", got, NULL});
	}
	check_config_error(HEAD "    PerTensorScaling: {enabled: true, gemms: [fprop], tensors: "
				"[activation], margn: 1}\n",
			   5, (const char *const[]){"margn", "did you mean 'margin'?", NULL});
	check_config_error(HEAD "    PerTensorScaling: {enabled: true, tensors: [activation]}\n", 5,
			   (const char *const[]){"PerTensorScaling needs 'gemms'", NULL});
	/* Two modifiers on one (gemm, tensor) of one section: the second place, naming the first. */
	check_config_error(HEAD "    PerTensorScaling: {enabled: true, gemms: [fprop, dgrad],\n"
				"                       tensors: [activation, gradient]}\n"
				"    FakeQuant: {enabled: true, gemms: [dgrad], tensors: [gradient],\n"
				"                quant_format: FP8E5M2}\n",
			   7,
			   (const char *const[]){"<string>:7:", "FakeQuant and PerTensorScaling",
						 "(at <string>:5:", "would both modify the same tensor",
						 NULL});

	/* Side by side on different tensors of one section is fine. */
	struct dli_context *ctx = open_yaml(
		HEAD "    PerTensorScaling: {enabled: true, gemms: [fprop], tensors: [activation]}\n"
		     "    FakeQuant: {enabled: true, gemms: [fprop], tensors: [weight],\n"
		     "                quant_format: FP8E4M3}\n",
		NULL);
	CHECK(ctx != NULL);
	if (ctx) {
		struct dli_layer *l = layer(ctx, "fc1");
		CHECK(dli_modify_tensor_enabled(l, DLI_GEMM_FPROP, DLI_TENSOR_ACTIVATION, NULL));
		CHECK(dli_modify_tensor_enabled(l, DLI_GEMM_FPROP, DLI_TENSOR_WEIGHT, NULL));
		CHECK(!dli_fp8_gemm_enabled(l, DLI_GEMM_FPROP, NULL));
	}
	dli_destroy(ctx);

	/* Two sections that both select a layer: found when the layer is resolved. */
	ctx = open_yaml("a:\n  enabled: true\n  layers: {layer_types: [fc]}\n"
			"  transformer_engine:\n"
			"    PerTensorScaling: {enabled: true, gemms: [fprop], tensors: [activation]}\n"
			"b:\n  enabled: true\n  layers: {layer_numbers: [1]}\n"
			"  transformer_engine:\n"
			"    FakeQuant: {enabled: true, gemms: [fprop], tensors: [activation],\n"
			"                quant_format: FP8E4M3}\n",
			NULL);
	CHECK(ctx != NULL);
	if (ctx) {
		struct dli_layer *l = NULL;
		struct dli_error err = {0};
		CHECK(layer(ctx, "layers.0.fc1") != NULL);
		CHECK_INT(dli_layer_get(ctx, "layers.1.fc1", &l, &err), -EINVAL);
		CHECK_INT(err.line, 10);
		CHECK_CONTAINS(err.message, "layer 'layers.1.fc1': FakeQuant (section 'b', here) and "
					    "PerTensorScaling (section 'a', at <string>:5:");
	}
	dli_destroy(ctx);
}

int main(void)
{
	test_pts_selection();
	test_pts_values();
	test_pts_codes();
	test_pts_seed_form();
	test_fake_quant();
	test_config_errors();
	remove_log_dir();
	return check_exit();
}
