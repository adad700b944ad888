/* dlinspect-train --recipe nvfp4: three steps of one Linear's forward and backward must give
 * exactly (bit for bit) the output, dgrad and wgrad of an emulation written here from
 * NVFP4BlockScaling's defaults: every copy cast with dli_block_fake_quant (the codec, checked
 * against ml_dtypes by nvfp4-recipe-interop), fprop reading the activation row-wise and the
 * weight in 16 x 16 tiles, dgrad the gradient row-wise rounded stochastically and the weight's
 * tiles, wgrad the column-wise copies of gradient (stochastic) and activation through the
 * Hadamard transform; the n-th stochastic cast of the process has seed n (fp8_recipe.h). Each
 * option must matter on these inputs: an emulation without it must differ. */
#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <dlinspect/dlinspect.h>
#include <dlinspect/stats.h>

#include "data.h"
#include "linear.h"

/* Rows a multiple of 16 (the transform down the columns); columns with a partial block. */
#define IN    136
#define OUT   144
#define ROWS  160
#define STEPS 3

struct result {
	float y[STEPS][ROWS * OUT], dx[STEPS][ROWS * IN], dw[STEPS][OUT * IN];
};

static void inputs(int step, float *x, float *dy, float *w)
{
	static const float mag[STEPS] = { 1.0f, 4.0f, 0.25f };
	uint64_t s = 4321 + (uint64_t)step;
	for (int i = 0; i < ROWS; i++)
		for (int j = 0; j < IN; j++)
			x[i * IN + j] = mag[step] *
					(1.0f + (float)(i % 7) + 3.0f * (float)(j / 40)) *
					dlt_rng_normal(&s);
	if (step == 1)
		x[5 * IN + 3] = 3e4f;
	for (int i = 0; i < ROWS; i++)
		for (int j = 0; j < OUT; j++)
			dy[i * OUT + j] = 1e-3f / mag[step] *
					  (1.0f + (float)(j % 5) * (float)(i / 50)) *
					  dlt_rng_normal(&s);
	s = 77;
	for (int i = 0; i < OUT; i++)
		for (int j = 0; j < IN; j++)
			w[i * IN + j] = 0.05f * (1.0f + (float)(i / 30)) * dlt_rng_normal(&s);
}

static int run_trainer(struct result *res)
{
	struct dlt_linear l;
	struct dli_error err;
	static float x[ROWS * IN], dy[ROWS * OUT];
	struct dlt_run run = { .precision = DLT_FP8, .gemm = &dlt_gemm_cpu };
	dlt_recipe_default(&run.recipe);
	run.recipe.scaling = DLT_SCALING_NVFP4;
	if (dlt_linear_init(&l, &run, "model.layers.0.mlp.fc1", IN, OUT, ROWS, &err)) {
		fprintf(stderr, "dlt_linear_init failed\n");
		return -1;
	}
	int r = 0;
	for (int s = 0; s < STEPS && !r; s++) {
		inputs(s, x, dy, l.w);
		if ((r = dlt_linear_forward(&l, &run, x, ROWS, res->y[s])) ||
		    (r = dlt_linear_backward(&l, &run, dy, res->dx[s])))
			break;
		memcpy(res->dw[s], l.dw, sizeof res->dw[s]);
		dlt_linear_step_end(&l, &run);
		run.step++;
	}
	dlt_linear_finish(&l);
	return r;
}

/* What the emulation leaves out, to show that it matters. */
enum { ALL = 0, NO_SR = 1, NO_RHT = 2, NO_2D = 4 };

static void cast(const float *x, int rows, int cols, int recipe, int col, int sr, uint64_t seed,
		 int rht, float *out)
{
	struct dli_block_spec spec = { .size = sizeof spec,
				       .recipe = recipe,
				       .columnwise = col,
				       .stochastic_rounding = sr,
				       .seed = seed,
				       .rht = rht };
	struct dli_tensor in = { .data = (void *)x,
				 .dtype = DLI_DTYPE_F32,
				 .ndim = 2,
				 .shape = { rows, cols },
				 .contiguous = true };
	struct dli_tensor o = in;
	o.data = out;
	if (dli_block_fake_quant(&in, &o, &spec)) {
		fprintf(stderr, "dli_block_fake_quant failed\n");
		exit(1);
	}
}

static void emulate(int without, struct result *res)
{
	static float x[ROWS * IN], dy[ROWS * OUT], w[OUT * IN];
	static float a[ROWS * IN], g[ROWS * OUT], wt[OUT * IN];
	int sr = !(without & NO_SR), rht = !(without & NO_RHT);
	int wrec = without & NO_2D ? DLI_BLOCK_NVFP4 : DLI_BLOCK_NVFP4_2D;
	uint64_t seed = 0;
	for (int s = 0; s < STEPS; s++) {
		inputs(s, x, dy, w);
		cast(x, ROWS, IN, DLI_BLOCK_NVFP4, 0, 0, 0, 0, a);
		cast(w, OUT, IN, wrec, 0, 0, 0, 0, wt);
		cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, ROWS, OUT, IN, 1.0f, a, IN, wt,
			    IN, 0.0f, res->y[s], OUT);
		cast(dy, ROWS, OUT, DLI_BLOCK_NVFP4, 0, sr, ++seed, 0, g);
		cast(w, OUT, IN, wrec, 1, 0, 0, 0, wt);
		cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, ROWS, IN, OUT, 1.0f, g, OUT,
			    wt, IN, 0.0f, res->dx[s], IN);
		cast(dy, ROWS, OUT, DLI_BLOCK_NVFP4, 1, sr, ++seed, rht, g);
		cast(x, ROWS, IN, DLI_BLOCK_NVFP4, 1, 0, 0, rht, a);
		cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, OUT, IN, ROWS, 1.0f, g, OUT, a,
			    IN, 0.0f, res->dw[s], IN);
	}
}

static const char *differs(const struct result *a, const struct result *b)
{
	return memcmp(a->y, b->y, sizeof a->y)      ? "output (fprop)"
	       : memcmp(a->dx, b->dx, sizeof a->dx) ? "dgrad"
	       : memcmp(a->dw, b->dw, sizeof a->dw) ? "wgrad"
						    : NULL;
}

int main(void)
{
	static struct result got, want, other;
	int failures = 0;
	const char *what;
	if (run_trainer(&got)) {
		printf("FAIL --recipe nvfp4: the trainer's Linear failed\n");
		return 1;
	}
	emulate(ALL, &want);
	if ((what = differs(&got, &want))) {
		printf("FAIL --recipe nvfp4: %s differs from the emulation\n", what);
		failures++;
	} else
		printf(
		    "ok   --recipe nvfp4 = its emulation (16 x 16 weights, stochastic gradients, "
		    "transformed wgrad operands)\n");
	static const struct {
		int without;
		const char *name, *result;
	} opts[] = { { NO_SR, "stochastic rounding", "dgrad" },
		     { NO_RHT, "the Hadamard transform", "wgrad" },
		     { NO_2D, "16 x 16 weight tiles", "output (fprop)" } };
	for (size_t i = 0; i < sizeof opts / sizeof opts[0]; i++) {
		emulate(opts[i].without, &other);
		what = differs(&other, &want);
		if (!what || strcmp(what, opts[i].result)) {
			printf("FAIL without %s the first difference should be in %s, is in %s\n",
			       opts[i].name, opts[i].result, what ? what : "nothing");
			failures++;
		}
	}
	return failures ? 1 : 0;
}
