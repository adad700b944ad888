/* The trainer's model: an input Linear, a stack of pre-LayerNorm residual MLP blocks
 * (LayerNorm, fc1, GELU, fc2) and a final LayerNorm and output Linear, with explicit forward and
 * backward, and Adam with global gradient-norm clipping. Linear names follow Megatron:
 * model.input_layer, model.layers.{i}.mlp.fc1 / fc2, model.output_layer. */
#ifndef DLT_MODEL_H
#define DLT_MODEL_H

#include "linear.h"

struct dlt_model_options {
	int d_in, d_out, width, layers, batch;
	uint64_t seed;
	float lr;         /* Adam's peak learning rate */
	float clip;       /* global gradient-norm clip; <= 0 none */
	int64_t steps;    /* for the schedule: linear warm-up, then cosine decay to 10% */
};

struct dlt_layernorm {
	int dim;
	float *gamma, *beta, *dgamma, *dbeta;
	float *mean, *rstd; /* per row, kept for the backward pass */
	const float *x;
};

struct dlt_block {
	struct dlt_layernorm ln;
	struct dlt_linear fc1, fc2;
	float *ln_out, *pre, *act, *tmp; /* rows x width, rows x 4 width, rows x 4 width, rows x width */
};

struct dlt_param {
	float *p, *g, *m, *v;
	size_t n;
	bool sharded; /* tensor parallelism: each TP rank holds a block (fc1, fc2) */
};

struct dlt_model {
	struct dlt_model_options o;
	int hidden;      /* the MLPs' hidden features this rank holds: 4 x width, or its TP block */
	struct dlt_linear input, output;
	struct dlt_block *blocks;
	struct dlt_layernorm ln_f;
	float **h;       /* layers + 1 residual streams, rows x width */
	float *z, *y, *dy, *dz, *dh, *dhid, *dhid2;
	struct dlt_param *params;
	size_t n_params;
	int64_t adam_t;
	size_t n_grads;  /* elements of all parameters */
	float *gacc;     /* gradients accumulated over microbatches, and summed across DP ranks */
};

/* Builds and initializes the model (weights from o->seed); every Linear gets its dlinspect handle
 * through run. 0, -ENOMEM, or dli_layer_get's error with *err filled. Free with dlt_model_finish. */
int dlt_model_init(struct dlt_model *m, const struct dlt_model_options *o, struct dlt_run *run,
		   struct dli_error *err);
void dlt_model_finish(struct dlt_model *m);

/* One training step on x[rows x d_in] against target[rows x d_out] with mask[rows] (0 = not in
 * the loss): forward, masked mean-squared-error loss into *loss, backward, clipped Adam update and
 * the recipe's end-of-step scale update. The caller then calls dli_step and advances run->step. */
int dlt_model_train_step(struct dlt_model *m, struct dlt_run *run, const float *x,
			 const float *target, const float *mask, int rows, double *loss);

/* The parts of dlt_model_train_step, for microbatches and data parallelism: a forward and backward
 * pass over `rows` rows whose loss is normalized by `loss_rows` (the masked-in rows of the whole
 * batch), leaving the gradients of this pass in the parameters and the sum of squared errors in
 * *loss_sum; then the update (clipped Adam, the recipe's scale update). */
int dlt_model_forward_backward(struct dlt_model *m, struct dlt_run *run, const float *x,
			       const float *target, const float *mask, int rows, double loss_rows,
			       double *loss_sum);
int dlt_model_update(struct dlt_model *m, struct dlt_run *run);

/* A step on a batch of `rows` rows split into pieces: with run->comm, this data-parallel rank's
 * shard (rows * dp_rank / dp_size ..), itself in `micro` microbatches; the gradients of the pieces
 * are added in order, then across the DP ranks in rank order (parallel.h), and the FP8 amaxes of
 * delayed scaling are the world's maxima. The same model and loss on every DP rank, and, bit for
 * bit, those of one process taking the same pieces as microbatches. -EINVAL when a piece would be
 * empty. */
int dlt_model_train_step_split(struct dlt_model *m, struct dlt_run *run, const float *x,
			       const float *target, const float *mask, int rows, int micro,
			       double *loss);

/* FNV-1a over the bytes of every parameter this rank holds: equal models, equal hashes. */
uint64_t dlt_model_hash(const struct dlt_model *m);

/* Calls fn on every Linear of the model, in forward order. */
void dlt_model_each_linear(struct dlt_model *m, void (*fn)(struct dlt_linear *, void *), void *arg);

#endif
