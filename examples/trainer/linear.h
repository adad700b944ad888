/* A Linear layer (y = x . W^T, W out x in, no bias) whose three GEMMs run and consult dlinspect the
 * way TransformerEngine's Linear does (REFERENCE.md): the *_enabled answers, taken at once with
 * dli_layer_plan, cached until the plan's next iteration, fp8_gemm_enabled per GEMM, modify_tensor where a feature asks,
 * inspect_tensor on activation, weight, gradient, output, dgrad and wgrad. */
#ifndef DLT_LINEAR_H
#define DLT_LINEAR_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include <dlinspect/dlinspect.h>

#include "fp8_recipe.h"
#include "gemm.h"
#include "parallel.h"

enum dlt_precision {
	DLT_FP32, /* every GEMM in fp32 */
	DLT_BF16, /* operands rounded to bf16, fp32 accumulation */
	DLT_FP8,  /* operands cast to FP8 with the run's recipe (delayed scaling by default); a GEMM
		   * dlinspect keeps out of FP8 runs in fp32 */
};

/* What every Linear of a run shares. */
struct dlt_run {
	struct dli_context *dli; /* NULL: no dlinspect at all (not one call) */
	enum dlt_precision precision;
	struct dlt_recipe recipe;
	const struct dlt_gemm_backend *gemm;
	int64_t step;  /* the current iteration; the host keeps it equal to dlinspect's */
	FILE *trace;   /* when set, one line "ITERATION LAYER" per round of *_enabled queries */
	uint64_t queries, inspects, modifies; /* debug calls made */
	bool timed;          /* measure the time spent inside dlinspect calls (the benchmark) */
	double dli_seconds;  /* that time, when timed */
	int error;     /* the first failure of a dlinspect call (negative errno), 0 if none */
	char error_msg[256];
	/* When set (the CUDA path), inspect_tensor gets device copies: `mirror` copies the tensor x
	 * (and q's FP8 codes and scale_inv, when q is non-NULL) into device buffers kept per `slot`
	 * and rewrites the descriptors to point at them, so dlinspect measures them with its CUDA
	 * kernels. A slot's buffers are reused next step on the same stream, after the statistics
	 * queued on them. 0 or a negative errno (the host copy is then inspected instead). */
	int (*mirror)(void *state, const void *slot, struct dli_tensor *x,
		      struct dli_quantized_tensor *q);
	void *mirror_state;
	/* --inject-nonfinite: at step inject_step (-1: never), the forward GEMM result of the Linear
	 * named inject_layer gets inject_value (NaN or +inf) in one element, before dlinspect sees
	 * it, as an overflowing matmul would leave it. */
	int64_t inject_step;
	const char *inject_layer;
	float inject_value;
	/* Data and tensor parallelism (parallel.h); NULL in one process. */
	const struct dlt_comm *comm;
	/* Forward-backward passes so far: several per step with microbatches (--microbatches, and a
	 * data-parallel rank's shard), so that a cast is remade for each microbatch's tensors. */
	int64_t pass;
};

/* Per input tensor of the GEMMs (activation, gradient, weight: ids 0..2 of enum dli_tensor_kind). */
struct dlt_operand_state {
	struct dlt_fp8_meta meta;
	float *cast;       /* FP8: dequantized values (a block-scaled recipe's row-wise copy); bf16:
			    * rounded values */
	float *cast_col;   /* a block-scaled recipe's column-wise copy (dequantized) */
	uint8_t *codes;    /* FP8 codes (the per-tensor recipes) */
	int64_t cast_step; /* the step `cast` was made at; -1 none */
	bool cast_ok[2];   /* at cast_step: the row-wise / column-wise copy was made */
	float *modified[2]; /* modify_tensor's output for the row-wise / column-wise GEMM, lazily */
	int64_t cast_pass;  /* the run's pass `cast` was made in (with cast_step) */
};

#define DLT_N_OPERANDS 3

struct dlt_linear {
	char name[96];
	struct dli_layer *layer; /* NULL without dlinspect */
	int in, out, max_rows;
	float *w, *dw;           /* out x in */
	struct dlt_operand_state op[DLT_N_OPERANDS];
	const float *x;          /* the last forward's input, borrowed until its backward */
	int rows;
	float *scratch;          /* modify_tensor of an output (output, dgrad, wgrad) */
	/* The plan from the last dli_layer_plan: valid until next_query. */
	int64_t next_query;
	bool fp8[DLI_GEMM_COUNT];
	bool inspect[DLI_TENSOR_STANDARD_COUNT];
	bool modify[DLI_GEMM_COUNT][DLI_TENSOR_STANDARD_COUNT];
	/* Tensor parallelism (Megatron's names): a column-parallel Linear holds a block of the
	 * output features (its dgrad is a partial sum, summed over the TP group in backward), a
	 * row-parallel one a block of the input features (its output is summed over the TP group
	 * in forward). */
	enum { DLT_TP_NONE, DLT_TP_COLUMN, DLT_TP_ROW } tp_mode;
	/* The tensors (bits of 1 << enum dli_tensor_kind) that every rank of the TP group holds
	 * whole: inspected on TP rank 0 only (an empty tensor on the others), so that the
	 * statistics reduced across ranks count each element once. */
	unsigned tp_whole;
};

/* Allocates the layer's weight (zeroed: the caller initializes it), its buffers for up to
 * `max_rows` rows, and gets its dlinspect handle when run->dli is set. 0, -ENOMEM, or what
 * dli_layer_get returned (with *err filled). Free with dlt_linear_finish. */
int dlt_linear_init(struct dlt_linear *l, struct dlt_run *run, const char *name, int in, int out,
		    int max_rows, struct dli_error *err);
void dlt_linear_finish(struct dlt_linear *l);

/* y[rows x out] = x[rows x in] . W^T. x is borrowed until dlt_linear_backward. */
int dlt_linear_forward(struct dlt_linear *l, struct dlt_run *run, const float *x, int rows,
		       float *y);

/* From dy[rows x out]: dx[rows x in] (dgrad; skipped when dx is NULL, as for a first layer whose
 * input needs no gradient) and l->dw (wgrad). */
int dlt_linear_backward(struct dlt_linear *l, struct dlt_run *run, const float *dy, float *dx);

/* Monotonic seconds, for run->timed. */
double dlt_now(void);

/* End of step: the delayed-scaling update of the layer's three scales (nothing for the other
 * recipes, whose scales come from the tensor being cast). */
void dlt_linear_step_end(struct dlt_linear *l, struct dlt_run *run);

#endif
