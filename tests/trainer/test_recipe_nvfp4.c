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

/* Rows a multiple of 16 (the transform down the columns); columns with a partial block. */
#define IN    136
#define OUT   144
#define ROWS  160
#define STEPS 3

#include "linear-steps.h"

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
		block_inputs(s, x, dy, w);
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

int main(void)
{
	static struct result got, want, other;
	int failures = 0;
	const char *what;
	if (run_recipe(DLT_SCALING_NVFP4, &got)) {
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
