/* The trainer's Linear layer and its dlinspect calls (see linear.h). Between two scheduled
 * iterations a layer makes no debug call at all: one integer compare per forward. */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "linear.h"

double dlt_now(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* Brackets a dlinspect call for the benchmark's direct measure; two loads when not timed. */
#define TIMED(run, call)                                                                   \
	do {                                                                               \
		double t0_ = (run)->timed ? dlt_now() : 0.0;                               \
		call;                                                                      \
		if ((run)->timed)                                                          \
			(run)->dli_seconds += dlt_now() - t0_;                             \
	} while (0)

static const char *const tensor_names[DLI_TENSOR_STANDARD_COUNT] = {
	"activation", "gradient", "weight", "output", "wgrad", "dgrad",
};

/* The GEMMs each input tensor feeds: [0] row-wise, [1] column-wise (REFERENCE.md). */
static const enum dli_gemm feeds[DLT_N_OPERANDS][2] = {
	[DLI_TENSOR_ACTIVATION] = {DLI_GEMM_FPROP, DLI_GEMM_WGRAD},
	[DLI_TENSOR_GRADIENT] = {DLI_GEMM_DGRAD, DLI_GEMM_WGRAD},
	[DLI_TENSOR_WEIGHT] = {DLI_GEMM_FPROP, DLI_GEMM_DGRAD},
};

/* Keeps the first failure for the run's summary; training goes on, as dlinspect's own calls do. */
static void note_error(struct dlt_run *run, const struct dlt_linear *l, const char *call, int t,
		       int r)
{
	if (run->error)
		return;
	run->error = r;
	snprintf(run->error_msg, sizeof run->error_msg, "%s(%s, %s): %s", call, l->name,
		 tensor_names[t], strerror(-r));
}

int dlt_linear_init(struct dlt_linear *l, struct dlt_run *run, const char *name, int in, int out,
		    int max_rows, struct dli_error *err)
{
	int r = -ENOMEM;
	memset(l, 0, sizeof *l);
	snprintf(l->name, sizeof l->name, "%s", name);
	l->in = in;
	l->out = out;
	l->max_rows = max_rows;
	size_t nw = (size_t)in * out, nx = (size_t)max_rows * in, ng = (size_t)max_rows * out;
	size_t n[DLT_N_OPERANDS] = {[DLI_TENSOR_ACTIVATION] = nx, [DLI_TENSOR_GRADIENT] = ng,
				    [DLI_TENSOR_WEIGHT] = nw};
	static const enum dli_dtype formats[DLT_N_OPERANDS] = {
		[DLI_TENSOR_ACTIVATION] = DLI_DTYPE_F8E4M3, [DLI_TENSOR_GRADIENT] = DLI_DTYPE_F8E5M2,
		[DLI_TENSOR_WEIGHT] = DLI_DTYPE_F8E4M3,
	};
	if (!(l->w = calloc(nw, sizeof *l->w)) || !(l->dw = calloc(nw, sizeof *l->dw)))
		goto fail;
	for (int t = 0; t < DLT_N_OPERANDS; t++) {
		struct dlt_operand_state *s = &l->op[t];
		s->cast_step = -1;
		if (dlt_fp8_meta_init(&s->meta, &run->recipe, formats[t]))
			goto fail;
		/* The cast buffers serve the FP8 and the bf16 runs only. */
		if (run->precision != DLT_FP32 &&
		    (!(s->cast = malloc(n[t] * sizeof(float))) || !(s->codes = malloc(n[t]))))
			goto fail;
		if (run->precision == DLT_FP8 && dlt_scaling_blocked(run->recipe.scaling) &&
		    !(s->cast_col = malloc(n[t] * sizeof(float))))
			goto fail;
	}
	for (int g = 0; g < DLI_GEMM_COUNT; g++)
		l->fp8[g] = true; /* dlinspect's default answer */
	l->next_query = DLI_NEVER;
	if (run->dli) {
		if ((r = dli_layer_get(run->dli, name, &l->layer, err)))
			goto fail;
		l->next_query = 0; /* ask at the first forward */
	}
	return 0;
fail:
	dlt_linear_finish(l);
	return r;
}

void dlt_linear_finish(struct dlt_linear *l)
{
	free(l->w);
	free(l->dw);
	for (int t = 0; t < DLT_N_OPERANDS; t++) {
		struct dlt_operand_state *s = &l->op[t];
		dlt_fp8_meta_finish(&s->meta);
		free(s->cast);
		free(s->cast_col);
		free(s->codes);
		free(s->modified[0]);
		free(s->modified[1]);
	}
	free(l->scratch);
	memset(l, 0, sizeof *l);
}

/* Step 1 of TransformerEngine's call pattern, in one call: every answer of the layer, and the
 * earliest iteration at which one of them may change. */
static void query(struct dlt_linear *l, struct dlt_run *run)
{
	struct dli_layer_plan plan = {.size = sizeof plan};
	if (run->trace)
		fprintf(run->trace, "%" PRId64 " %s\n", run->step, l->name);
	run->queries++;
	if (dli_layer_plan(l->layer, &plan)) {
		l->next_query = run->step + 1; /* cannot happen with a valid handle: ask again */
		return;
	}
	for (int t = 0; t < DLI_TENSOR_STANDARD_COUNT; t++) {
		l->inspect[t] = plan.inspect >> t & 1u;
		for (int g = 0; g < DLI_GEMM_COUNT; g++)
			l->modify[g][t] = plan.modify[g] >> t & 1u;
	}
	for (int g = 0; g < DLI_GEMM_COUNT; g++)
		l->fp8[g] = plan.fp8[g];
	l->next_query = plan.next;
}

static struct dli_tensor view(const float *data, int rows, int cols)
{
	return (struct dli_tensor){.data = (void *)data, .dtype = DLI_DTYPE_F32, .ndim = 2,
				   .shape = {rows, cols}, .contiguous = true};
}

/* Whether tensor t is cast with the recipe this step: some GEMM it feeds runs in FP8 on the cast
 * (not on a feature's modified copy). */
static bool uses_cast(const struct dlt_linear *l, const struct dlt_run *run, int t, int k)
{
	enum dli_gemm g = feeds[t][k];
	return run->precision == DLT_FP8 && l->fp8[g] && !l->modify[g][t];
}

/* Whether the cast was made in this step's current pass (a microbatch has its own tensors). */
static bool cast_current(const struct dlt_operand_state *s, const struct dlt_run *run)
{
	return s->cast_step == run->step && s->cast_pass == run->pass;
}

/* Whether tensor t of the layer is inspected as an empty tensor here: every rank of the TP group
 * holds it whole, and TP rank 0 hands it for the group. */
static bool tp_elsewhere(const struct dlt_linear *l, const struct dlt_run *run, int t)
{
	return run->comm && run->comm->tp_size > 1 && run->comm->tp_rank != 0 &&
	       (l->tp_whole >> t & 1u);
}

/* Casts tensor t once per step (a weight in fprop serves dgrad too; an activation serves wgrad). */
static int cast(struct dlt_linear *l, struct dlt_run *run, int t, const float *hp, int rows,
		int cols)
{
	struct dlt_operand_state *s = &l->op[t];
	size_t n = (size_t)rows * cols;
	if (run->precision == DLT_FP32 || cast_current(s, run))
		return 0;
	bool row = run->precision == DLT_BF16 || uses_cast(l, run, t, 0);
	bool col = run->precision == DLT_BF16 || uses_cast(l, run, t, 1);
	int r = 0;
	if (!row && !col)
		return 0; /* both GEMMs high precision or modified: nothing to cast, no amax */
	if (run->precision == DLT_BF16)
		dlt_round_bf16(hp, n, s->cast);
	else if (run->recipe.scaling == DLT_SCALING_DELAYED)
		r = dlt_fp8_quantize(&s->meta, hp, n, s->codes, s->cast);
	else if (run->recipe.scaling == DLT_SCALING_CURRENT)
		r = dlt_fp8_quantize_current(&s->meta, &run->recipe, hp, n, s->codes, s->cast);
	else {
		/* A block-scaled recipe quantizes each copy a GEMM reads from the high-precision
		 * tensor: row-wise for the GEMM that reduces along the rows' elements, column-wise
		 * for the one that reduces down the columns (the `feeds` table). */
		if (row)
			r = dlt_block_quantize(run->recipe.scaling, t, s->meta.format, hp, rows, cols,
					       false, s->cast);
		if (!r && col)
			r = dlt_block_quantize(run->recipe.scaling, t, s->meta.format, hp, rows, cols,
					       true, s->cast_col);
		if (r)
			return r;
		s->cast_ok[0] = row;
		s->cast_ok[1] = col;
		s->cast_step = run->step;
		s->cast_pass = run->pass;
		return 0;
	}
	if (r)
		return r;
	/* A per-tensor cast serves both GEMMs. */
	s->cast_ok[0] = s->cast_ok[1] = true;
	s->cast_step = run->step;
	s->cast_pass = run->pass;
	return 0;
}

/* The operand GEMM feeds[t][k] reads for tensor t: a feature's modified copy, the FP8 or bf16 cast,
 * or the fp32 tensor itself. */
static int operand(struct dlt_linear *l, struct dlt_run *run, int t, int k, const float *hp,
		   int rows, int cols, struct dlt_operand *op)
{
	struct dlt_operand_state *s = &l->op[t];
	enum dli_gemm g = feeds[t][k];
	*op = (struct dlt_operand){.values = hp, .format = DLI_DTYPE_F32};
	if (l->modify[g][t]) {
		size_t bytes = (size_t)rows * cols * sizeof(float);
		if (!s->modified[k] && !(s->modified[k] = malloc(bytes)))
			return -ENOMEM;
		/* The quantizer says how this host would cast the tensor (format, current scale; a
		 * block-scaled recipe has no one scale). */
		struct dli_quantizer q = {.size = sizeof q, .format = s->meta.format,
					  .scale = s->cast_col ? NULL : &s->meta.scale};
		struct dli_tensor in = view(hp, rows, cols), out = view(s->modified[k], rows, cols);
		run->modifies++;
		int r;
		TIMED(run, r = dli_modify_tensor(l->layer, g, t, &in, &q, &out));
		if (r == 0) {
			op->values = s->modified[k];
			return 0;
		}
		note_error(run, l, "modify_tensor", t, r); /* and run unmodified */
	}
	if (run->precision == DLT_BF16 || (run->precision == DLT_FP8 && l->fp8[g])) {
		int r = cast(l, run, t, hp, rows, cols);
		if (r)
			return r;
		if (!cast_current(s, run) || !s->cast_ok[k])
			return 0; /* fp32 after a failed modify, where no cast was planned */
		op->values = k && s->cast_col ? s->cast_col : s->cast;
		/* A block-scaled copy hands no codes: the GEMM runs on its dequantized values (a
		 * dlt_operand carries one scale_inv, not one per block). */
		if (run->precision == DLT_FP8 && !s->cast_col) {
			op->codes = s->codes;
			op->format = s->meta.format;
			op->scale_inv = &s->meta.scale_inv;
		}
	}
	return 0;
}

/* Hands inspect_tensor device copies when the run has a mirror (the CUDA path); `slot` is any
 * address unique to the (layer, tensor). On failure the host tensor is inspected as it is. */
static void mirror(struct dlt_run *run, const void *slot, struct dli_tensor *x,
		   struct dli_quantized_tensor *q)
{
	if (!run->mirror)
		return;
	struct dli_tensor hx = *x;
	struct dli_quantized_tensor hq;
	if (q)
		hq = *q;
	if (run->mirror(run->mirror_state, slot, x, q)) {
		*x = hx;
		if (q)
			*q = hq;
	}
}

/* inspect_tensor on an input tensor, with its FP8 form for each GEMM that reads the cast. */
static void inspect_input(struct dlt_linear *l, struct dlt_run *run, int t, const float *hp,
			  int rows, int cols)
{
	if (!l->inspect[t])
		return;
	struct dlt_operand_state *s = &l->op[t];
	struct dli_tensor x = view(hp, tp_elsewhere(l, run, t) ? 0 : rows, cols);
	struct dli_quantized_tensor q = {.data = x, .scale_inv = &s->meta.scale_inv,
					 .scale_inv_count = 1};
	q.data.data = s->codes;
	q.data.dtype = s->meta.format;
	/* A block-scaled recipe's copies are not handed over: this trainer casts them with
	 * dli_block_fake_quant, which gives the dequantized values, not codes and block scales (a
	 * host that has those passes them with dli_inspect_tensor_block). LogFp8TensorStats's
	 * mxfp8_ and fp8_block_scaling_ stats quantize the high-precision tensor themselves, with
	 * the same rules (docs/block-scaling.md). */
	bool have = run->precision == DLT_FP8 && cast_current(s, run) &&
		    !dlt_scaling_blocked(run->recipe.scaling);
	const struct dli_quantized_tensor *row = have && uses_cast(l, run, t, 0) ? &q : NULL;
	const struct dli_quantized_tensor *col = have && uses_cast(l, run, t, 1) ? &q : NULL;
	mirror(run, &s->meta, &x, row || col ? &q : NULL);
	run->inspects++;
	int r;
	TIMED(run, r = dli_inspect_tensor(l->layer, t, &x, row, col));
	if (r)
		note_error(run, l, "inspect_tensor", t, r);
}

/* A GEMM's result: modify_tensor when a feature asks (in place, through the scratch buffer), then
 * inspect_tensor. */
static int result(struct dlt_linear *l, struct dlt_run *run, enum dli_gemm g, int t, float *c,
		  int rows, int cols)
{
	struct dli_tensor x = view(c, rows, cols);
	if (l->modify[g][t]) {
		size_t n = (size_t)rows * cols;
		/* Big enough for the three results: output, dgrad and wgrad. */
		size_t cap = (size_t)l->max_rows * (l->in > l->out ? l->in : l->out);
		if (cap < (size_t)l->in * l->out)
			cap = (size_t)l->in * l->out;
		if (!l->scratch && !(l->scratch = malloc(cap * sizeof(float))))
			return -ENOMEM;
		struct dli_tensor out = view(l->scratch, rows, cols);
		run->modifies++;
		int r;
		TIMED(run, r = dli_modify_tensor(l->layer, g, t, &x, NULL, &out));
		if (r == 0)
			memcpy(c, l->scratch, n * sizeof(float));
		else
			note_error(run, l, "modify_tensor", t, r);
	}
	if (l->inspect[t]) {
		if (tp_elsewhere(l, run, t))
			x.shape[0] = 0;
		mirror(run, &l->inspect[t], &x, NULL);
		run->inspects++;
		int r;
		TIMED(run, r = dli_inspect_tensor(l->layer, t, &x, NULL, NULL));
		if (r)
			note_error(run, l, "inspect_tensor", t, r);
	}
	return 0;
}

static int gemm(struct dlt_run *run, int m, int n, int k, const struct dlt_operand *a, bool ta,
		const struct dlt_operand *b, bool tb, float *c)
{
	struct dlt_gemm g = {.m = m, .n = n, .k = k, .trans_a = ta, .trans_b = tb, .a = *a,
			     .b = *b, .c = c, .fp8 = a->codes && b->codes};
	return run->gemm->run(run->gemm->state, &g);
}

int dlt_linear_forward(struct dlt_linear *l, struct dlt_run *run, const float *x, int rows,
		       float *y)
{
	if (rows > l->max_rows)
		return -EINVAL;
	/* The only debug work between scheduled iterations: this compare. */
	if (run->step >= l->next_query)
		TIMED(run, query(l, run));
	l->x = x;
	l->rows = rows;
	struct dlt_operand a, w;
	int r;
	/* Cast before the operands: an activation whose fprop is modified may still feed an FP8
	 * wgrad, and TransformerEngine casts both usages in the forward pass. */
	if ((r = cast(l, run, DLI_TENSOR_ACTIVATION, x, rows, l->in)) ||
	    (r = cast(l, run, DLI_TENSOR_WEIGHT, l->w, l->out, l->in)) ||
	    (r = operand(l, run, DLI_TENSOR_ACTIVATION, 0, x, rows, l->in, &a)) ||
	    (r = operand(l, run, DLI_TENSOR_WEIGHT, 0, l->w, l->out, l->in, &w)))
		return r;
	inspect_input(l, run, DLI_TENSOR_ACTIVATION, x, rows, l->in);
	inspect_input(l, run, DLI_TENSOR_WEIGHT, l->w, l->out, l->in);
	/* fprop: y[rows x out] = x[rows x in] . W^T */
	if ((r = gemm(run, rows, l->out, l->in, &a, false, &w, true, y)))
		return r;
	/* Row-parallel: each TP rank has multiplied its block of the input features. */
	if (l->tp_mode == DLT_TP_ROW && run->comm && run->comm->tp_size > 1 &&
	    (r = run->comm->sum(run->comm->state, DLT_GROUP_TP, y, (size_t)rows * l->out)))
		return r;
	if (run->step == run->inject_step && run->inject_layer && !strcmp(l->name, run->inject_layer))
		y[(size_t)(rows / 2) * l->out + l->out / 2] = run->inject_value;
	return result(l, run, DLI_GEMM_FPROP, DLI_TENSOR_OUTPUT, y, rows, l->out);
}

/* Column-parallel: each TP rank's dgrad covers its block of the output features only. */
static int tp_dgrad_sum(struct dlt_linear *l, struct dlt_run *run, float *dx, int rows)
{
	if (l->tp_mode != DLT_TP_COLUMN || !run->comm || run->comm->tp_size == 1)
		return 0;
	return run->comm->sum(run->comm->state, DLT_GROUP_TP, dx, (size_t)rows * l->in);
}

int dlt_linear_backward(struct dlt_linear *l, struct dlt_run *run, const float *dy, float *dx)
{
	struct dlt_operand g, w, a;
	int rows = l->rows, r;
	if ((r = cast(l, run, DLI_TENSOR_GRADIENT, dy, rows, l->out)))
		return r;
	inspect_input(l, run, DLI_TENSOR_GRADIENT, dy, rows, l->out);
	if (dx) {
		/* dgrad: dx[rows x in] = dy[rows x out] . W */
		if ((r = operand(l, run, DLI_TENSOR_GRADIENT, 0, dy, rows, l->out, &g)) ||
		    (r = operand(l, run, DLI_TENSOR_WEIGHT, 1, l->w, l->out, l->in, &w)) ||
		    (r = gemm(run, rows, l->in, l->out, &g, false, &w, false, dx)) ||
		    (r = tp_dgrad_sum(l, run, dx, rows)) ||
		    (r = result(l, run, DLI_GEMM_DGRAD, DLI_TENSOR_DGRAD, dx, rows, l->in)))
			return r;
	}
	/* wgrad: dW[out x in] = dy^T . x */
	if ((r = operand(l, run, DLI_TENSOR_GRADIENT, 1, dy, rows, l->out, &g)) ||
	    (r = operand(l, run, DLI_TENSOR_ACTIVATION, 1, l->x, rows, l->in, &a)) ||
	    (r = gemm(run, l->out, l->in, rows, &g, true, &a, false, l->dw)))
		return r;
	return result(l, run, DLI_GEMM_WGRAD, DLI_TENSOR_WGRAD, l->dw, l->out, l->in);
}

void dlt_linear_step_end(struct dlt_linear *l, struct dlt_run *run)
{
	if (run->precision != DLT_FP8 || run->recipe.scaling != DLT_SCALING_DELAYED)
		return;
	for (int t = 0; t < DLT_N_OPERANDS; t++)
		dlt_fp8_meta_update(&l->op[t].meta, &run->recipe);
}
