/* The trainer's Linear against a direct emulation, as TransformerEngine tests its debug features:
 * for every subset of GEMMs that DisableFP8GEMM keeps out of FP8, for DisableFP8Layer, for
 * PerTensorScaling and for FakeQuant, three steps of forward and backward must give exactly
 * (bit for bit) the output, dgrad and wgrad of an independent emulation: the same GEMMs through
 * cblas_sgemm on operands that are either the fp32 tensor, its cast with a delayed scale (from
 * the largest amax of the earlier steps), or its cast with the current scale (from its own amax). */
#include <cblas.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <dlinspect/dlinspect.h>

#define IN 48
#define OUT 40
#define ROWS 32
#define STEPS 3

#include "linear-steps.h"

enum op { RAW, DELAYED, CURRENT };

/* What the emulation does to each (gemm, input tensor); tensor ids 0..2 as in dlinspect. */
struct plan {
	enum op op[DLI_GEMM_COUNT][3];
};

/* Inputs whose magnitude changes from step to step, so that delayed and current scales differ. */
static void inputs(int step, float *x, float *dy, float *w)
{
	static const float mag[STEPS] = {1.0f, 4.0f, 0.25f};
	uint64_t s = 1234 + (uint64_t)step;
	for (int i = 0; i < ROWS * IN; i++)
		x[i] = mag[step] * dlt_rng_normal(&s);
	for (int i = 0; i < ROWS * OUT; i++)
		dy[i] = 1e-3f / mag[step] * dlt_rng_normal(&s);
	s = 99;
	for (int i = 0; i < OUT * IN; i++)
		w[i] = 0.1f * dlt_rng_normal(&s);
}

static int run_trainer(const char *yaml, struct result *res)
{
	struct dli_options o;
	struct dli_context *ctx;
	struct dli_error err;
	dli_options_init(&o);
	o.config_yaml = yaml;
	o.log_dir = ".";
	if (dli_init(&o, &ctx, &err)) {
		fprintf(stderr, "dli_init: %s\n", err.message);
		return -1;
	}
	struct dlt_run run = {.dli = ctx, .precision = DLT_FP8, .gemm = &dlt_gemm_cpu};
	dlt_recipe_default(&run.recipe);
	int r = run_linear(&run, inputs, res);
	dli_destroy(ctx);
	return r;
}

static float amax_of(const float *x, int n)
{
	float a = 0;
	for (int i = 0; i < n; i++)
		a = fabsf(x[i]) > a ? fabsf(x[i]) : a;
	return a;
}

static void cast(const float *x, int n, enum dli_dtype format, float scale, float *out)
{
	struct dli_tensor in = {.data = (void *)x, .dtype = DLI_DTYPE_F32, .ndim = 1, .shape = {n},
				.contiguous = true};
	struct dli_tensor o = in;
	o.data = out;
	if (dli_fp8_cast(&in, &o, format, scale)) {
		fprintf(stderr, "dli_fp8_cast failed\n");
		exit(1);
	}
}

static const float *operand(enum op op, int t, const float *x, int n, const float *delayed,
			    float *buf)
{
	if (op == RAW)
		return x;
	float scale = op == DELAYED ? delayed[t] :
				      dli_fp8_current_scale(amax_of(x, n), formats[t], 0.0);
	cast(x, n, formats[t], scale, buf);
	return buf;
}

static void emulate(const struct plan *p, struct result *res)
{
	float x[ROWS * IN], dy[ROWS * OUT], w[OUT * IN], b1[OUT * IN], b2[OUT * IN];
	float history_max[3] = {0, 0, 0}, delayed[3];
	for (int s = 0; s < STEPS; s++) {
		inputs(s, x, dy, w);
		for (int t = 0; t < 3; t++) /* step 0: an empty history gives scale 1 */
			delayed[t] = dli_fp8_current_scale(history_max[t], formats[t], 0.0);
		const float *a = operand(p->op[DLI_GEMM_FPROP][DLI_TENSOR_ACTIVATION],
					 DLI_TENSOR_ACTIVATION, x, ROWS * IN, delayed, b1);
		const float *wt = operand(p->op[DLI_GEMM_FPROP][DLI_TENSOR_WEIGHT], DLI_TENSOR_WEIGHT,
					  w, OUT * IN, delayed, b2);
		cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, ROWS, OUT, IN, 1.0f, a, IN, wt,
			    IN, 0.0f, res->y[s], OUT);
		const float *g = operand(p->op[DLI_GEMM_DGRAD][DLI_TENSOR_GRADIENT],
					 DLI_TENSOR_GRADIENT, dy, ROWS * OUT, delayed, b1);
		wt = operand(p->op[DLI_GEMM_DGRAD][DLI_TENSOR_WEIGHT], DLI_TENSOR_WEIGHT, w, OUT * IN,
			     delayed, b2);
		cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, ROWS, IN, OUT, 1.0f, g, OUT, wt,
			    IN, 0.0f, res->dx[s], IN);
		g = operand(p->op[DLI_GEMM_WGRAD][DLI_TENSOR_GRADIENT], DLI_TENSOR_GRADIENT, dy,
			    ROWS * OUT, delayed, b1);
		a = operand(p->op[DLI_GEMM_WGRAD][DLI_TENSOR_ACTIVATION], DLI_TENSOR_ACTIVATION, x,
			    ROWS * IN, delayed, b2);
		cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, OUT, IN, ROWS, 1.0f, g, OUT, a, IN,
			    0.0f, res->dw[s], IN);
		/* The recipe's history: max over every step so far (shorter than its 1024 slots). */
		float am[3] = {[DLI_TENSOR_ACTIVATION] = amax_of(x, ROWS * IN),
			       [DLI_TENSOR_GRADIENT] = amax_of(dy, ROWS * OUT),
			       [DLI_TENSOR_WEIGHT] = amax_of(w, OUT * IN)};
		for (int t = 0; t < 3; t++)
			history_max[t] = am[t] > history_max[t] ? am[t] : history_max[t];
	}
}

static int failures;

static void check(const char *name, const char *yaml, const struct plan *p)
{
	static struct result got, want;
	memset(&got, 0, sizeof got);
	memset(&want, 0, sizeof want);
	if (run_trainer(yaml, &got)) {
		printf("FAIL %s: the trainer's Linear failed\n", name);
		failures++;
		return;
	}
	emulate(p, &want);
	const char *what = differs(&got, &want);
	if (what) {
		printf("FAIL %s: %s differs from the emulation\n", name, what);
		failures++;
	} else
		printf("ok   %s\n", name);
}

static void plan_fill(struct plan *p, enum op op)
{
	for (int g = 0; g < DLI_GEMM_COUNT; g++)
		for (int t = 0; t < 3; t++)
			p->op[g][t] = op;
}

#define SECTION "s:\n  enabled: true\n  layers: {layer_name_regex_pattern: 'fc1$'}\n" \
		"  transformer_engine:\n"

int main(void)
{
	static const char *const gemm_names[DLI_GEMM_COUNT] = {"fprop", "dgrad", "wgrad"};
	char yaml[1024], name[128];
	struct plan p;

	/* DisableFP8GEMM: every subset of the three GEMMs (the empty one is the default run). */
	for (unsigned mask = 0; mask < 8; mask++) {
		char list[64] = "";
		plan_fill(&p, DELAYED);
		for (int g = 0; g < DLI_GEMM_COUNT; g++) {
			if (!(mask >> g & 1u))
				continue;
			for (int t = 0; t < 3; t++)
				p.op[g][t] = RAW;
			snprintf(list + strlen(list), sizeof list - strlen(list), "%s%s",
				 list[0] ? ", " : "", gemm_names[g]);
		}
		snprintf(yaml, sizeof yaml, SECTION "    DisableFP8GEMM: {enabled: true, gemms: [%s]}\n",
			 list);
		snprintf(name, sizeof name, "DisableFP8GEMM [%s] = those GEMMs fp32, the others FP8",
			 list);
		check(name, mask ? yaml : NULL, &p);
	}

	plan_fill(&p, RAW);
	check("DisableFP8Layer = every GEMM fp32",
	      SECTION "    DisableFP8Layer: {enabled: true}\n", &p);

	/* PerTensorScaling on activation and gradient: current scaling for both GEMMs each feeds;
	 * the weight keeps its delayed scale. */
	plan_fill(&p, DELAYED);
	p.op[DLI_GEMM_FPROP][DLI_TENSOR_ACTIVATION] = p.op[DLI_GEMM_WGRAD][DLI_TENSOR_ACTIVATION] =
		CURRENT;
	p.op[DLI_GEMM_DGRAD][DLI_TENSOR_GRADIENT] = p.op[DLI_GEMM_WGRAD][DLI_TENSOR_GRADIENT] =
		CURRENT;
	check("PerTensorScaling (activation, gradient) = their casts with the current amax",
	      SECTION "    PerTensorScaling:\n      enabled: true\n"
		      "      gemms: [fprop, dgrad, wgrad]\n      tensors: [activation, gradient]\n",
	      &p);

	/* FakeQuant on fprop: its operands quantized with current scaling, then an fp32 GEMM. The
	 * CPU's FP8 GEMM is also fp32 on dequantized values, so what tells the two apart here is
	 * the scale: current, not delayed. */
	plan_fill(&p, DELAYED);
	p.op[DLI_GEMM_FPROP][DLI_TENSOR_ACTIVATION] = p.op[DLI_GEMM_FPROP][DLI_TENSOR_WEIGHT] =
		CURRENT;
	check("FakeQuant (fprop: activation, weight, E4M3) = quantize-dequantize, then fp32 GEMM",
	      SECTION "    FakeQuant:\n      enabled: true\n      gemms: [fprop]\n"
		      "      tensors: [activation, weight]\n      quant_format: FP8E4M3\n",
	      &p);

	/* The test means something only if FP8 and fp32 differ on these inputs. */
	static struct result fp8, fp32;
	plan_fill(&p, DELAYED);
	emulate(&p, &fp8);
	plan_fill(&p, RAW);
	emulate(&p, &fp32);
	if (!memcmp(fp8.y, fp32.y, sizeof fp8.y) || !memcmp(fp8.dw, fp32.dw, sizeof fp8.dw)) {
		printf("FAIL the FP8 and fp32 emulations agree: the inputs test nothing\n");
		failures++;
	}
	return failures ? 1 : 0;
}
