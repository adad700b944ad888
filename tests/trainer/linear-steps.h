/* The trainer tests' run of dlinspect-train's Linear: STEPS steps of one layer's forward and
 * backward, each step's output, dgrad and wgrad kept to be compared bit for bit with an
 * emulation. Included after IN, OUT, ROWS and STEPS are defined. */
#ifndef DLI_TEST_TRAINER_LINEAR_STEPS_H
#define DLI_TEST_TRAINER_LINEAR_STEPS_H

#include <stdio.h>
#include <string.h>

#include <dlinspect/dlinspect.h>

#include "data.h"
#include "linear.h"

struct result {
	float y[STEPS][ROWS * OUT], dx[STEPS][ROWS * IN], dw[STEPS][OUT * IN];
};

/* The formats of TransformerEngine's default (hybrid) FP8 recipe, by tensor id. */
static const enum dli_dtype formats[3] = {
	[DLI_TENSOR_ACTIVATION] = DLI_DTYPE_F8E4M3,
	[DLI_TENSOR_GRADIENT] = DLI_DTYPE_F8E5M2,
	[DLI_TENSOR_WEIGHT] = DLI_DTYPE_F8E4M3,
};

/* Fills one step's activation x [ROWS, IN], output gradient dy [ROWS, OUT] and weight w
 * [OUT, IN]; the emulations call it too, so that both sides see the same numbers. */
typedef void linear_inputs_fn(int step, float *x, float *dy, float *w);

/* The first of a's results that differs from b's, by name, or NULL when none does. */
static inline const char *differs(const struct result *a, const struct result *b)
{
	return memcmp(a->y, b->y, sizeof a->y)	  ? "output (fprop)" :
	       memcmp(a->dx, b->dx, sizeof a->dx) ? "dgrad" :
	       memcmp(a->dw, b->dw, sizeof a->dw) ? "wgrad" : NULL;
}

/* The trainer's Linear "model.layers.0.mlp.fc1" through `run` (its precision, recipe, GEMM and
 * dlinspect context, which gets a dli_step after every step when there is one): 0, or -1 with the
 * cause on stderr. */
static inline int run_linear(struct dlt_run *run, linear_inputs_fn *inputs, struct result *res)
{
	static float x[ROWS * IN], dy[ROWS * OUT];
	struct dlt_linear l;
	struct dli_error err;
	if (dlt_linear_init(&l, run, "model.layers.0.mlp.fc1", IN, OUT, ROWS, &err)) {
		fprintf(stderr, "dlt_linear_init: %s\n", err.message);
		return -1;
	}
	int r = 0;
	for (int s = 0; s < STEPS && !r; s++) {
		inputs(s, x, dy, l.w);
		if ((r = dlt_linear_forward(&l, run, x, ROWS, res->y[s])) ||
		    (r = dlt_linear_backward(&l, run, dy, res->dx[s])))
			break;
		memcpy(res->dw[s], l.dw, sizeof res->dw[s]);
		dlt_linear_step_end(&l, run);
		if (run->dli)
			dli_step(run->dli);
		run->step++;
	}
	if (run->error) {
		fprintf(stderr, "dlinspect call failed: %s\n", run->error_msg);
		r = -1;
	}
	dlt_linear_finish(&l);
	return r;
}

/* The block recipes' inputs: magnitudes that change from block to block and from step to step,
 * and one outlier (the story's corrupted record in small) at step 1, so that per-tensor and
 * per-block scales differ. */
static inline void block_inputs(int step, float *x, float *dy, float *w)
{
	static const float mag[STEPS] = {1.0f, 4.0f, 0.25f};
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

/* `scaling`'s recipe with its defaults and no dlinspect (every GEMM in FP8, nothing modified), on
 * block_inputs. */
static inline int run_recipe(enum dlt_scaling scaling, struct result *res)
{
	struct dlt_run run = {.precision = DLT_FP8, .gemm = &dlt_gemm_cpu};
	dlt_recipe_default(&run.recipe);
	run.recipe.scaling = scaling;
	return run_linear(&run, block_inputs, res);
}

#endif
