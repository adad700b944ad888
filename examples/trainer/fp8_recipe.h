/* Per-tensor delayed scaling as TransformerEngine's DelayedScaling recipe does it: each tensor keeps
 * an amax history; its scale comes from the history (max or most recent) and the margin, and is
 * updated once per step; E4M3 in the forward pass, E5M2 for gradients (the hybrid format). */
#ifndef DLT_FP8_RECIPE_H
#define DLT_FP8_RECIPE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <dlinspect/tensor.h>

enum dlt_amax_algo {
	DLT_AMAX_MAX,         /* the largest amax in the history */
	DLT_AMAX_MOST_RECENT, /* the amax of the last step */
};

/* How the FP8 GEMM inputs are scaled (--recipe; docs/trainer.md, "Recipes"). Every recipe casts the
 * activation and the weight to E4M3 and the gradient to E5M2. */
enum dlt_scaling {
	DLT_SCALING_DELAYED, /* per tensor, the scale from the amax history (DelayedScaling) */
	DLT_SCALING_CURRENT, /* per tensor, the scale from the tensor's own amax (Float8CurrentScaling) */
	DLT_SCALING_MXFP8,   /* 32-element blocks, E8M0 scales (MXFP8BlockScaling) */
	DLT_SCALING_BLOCK,   /* 1 x 128 blocks (activation, gradient), 128 x 128 (weight), fp32
			      * power-of-two scales (Float8BlockScaling) */
	DLT_SCALING_NVFP4,   /* E2M1 elements, 1 x 16 blocks (16 x 16 for weights) with E4M3 scales
			      * and an fp32 tensor scale; stochastic rounding for gradients, the
			      * random Hadamard transform on the wgrad GEMM's operands
			      * (NVFP4BlockScaling) */
	DLT_SCALING_COUNT
};

/* "delayed", "current", "mxfp8", "block", "nvfp4". */
extern const char *const dlt_scaling_names[DLT_SCALING_COUNT];

/* Whether the recipe scales blocks (its row-wise and column-wise copies differ), not tensors. */
static inline bool dlt_scaling_blocked(enum dlt_scaling s)
{
	return s == DLT_SCALING_MXFP8 || s == DLT_SCALING_BLOCK || s == DLT_SCALING_NVFP4;
}

struct dlt_recipe {
	enum dlt_scaling scaling; /* default: delayed */
	int history_len;   /* TransformerEngine's default: 1024 */
	enum dlt_amax_algo algo; /* default: max */
	double margin;     /* scale = fp8_max / amax / 2^margin; default 0 */
};

/* TransformerEngine's defaults: history 1024, max, margin 0. */
void dlt_recipe_default(struct dlt_recipe *r);

/* The scaling state of one tensor (a Linear's activation, weight or gradient). */
struct dlt_fp8_meta {
	enum dli_dtype format;
	float scale, scale_inv;  /* used by every cast until the next update */
	float *history;          /* history_len amaxes; [pos] is the current step's slot */
	int history_len, pos;
	float table[256];        /* decode(code) / scale, rebuilt when the scale changes */
};

/* Starts with scale 1 and an empty history (TransformerEngine's initial state). 0 or -ENOMEM;
 * free with dlt_fp8_meta_finish. */
int dlt_fp8_meta_init(struct dlt_fp8_meta *m, const struct dlt_recipe *r, enum dli_dtype format);
void dlt_fp8_meta_finish(struct dlt_fp8_meta *m);

/* max |x| over n floats (NaN wins, as the cast's amax does). */
float dlt_amax(const float *x, size_t n);

/* Casts n floats with the current scale: `codes` get the FP8 bytes, `dq` the dequantized values
 * decode(code) / scale (bit for bit what dli_fp8_cast gives for an f32 output). The tensor's amax
 * goes into this step's history slot. 0 or what dli_fp8_cast returned. */
int dlt_fp8_quantize(struct dlt_fp8_meta *m, const float *x, size_t n, uint8_t *codes, float *dq);

/* Current scaling: the scale from x's own amax and the margin (dli_fp8_current_scale), then the
 * cast as dlt_fp8_quantize; the history is not touched. */
int dlt_fp8_quantize_current(struct dlt_fp8_meta *m, const struct dlt_recipe *r, const float *x,
			     size_t n, uint8_t *codes, float *dq);

/* A block-scaled recipe's cast of a rows x cols row-major tensor of kind `kind` (enum
 * dli_tensor_kind: activation, gradient or weight) in `format`, dequantized into dq (fp32):
 * dlinspect's dli_block_fake_quant with MXFP8 blocks, or FP8 block scaling's 1 x 128 blocks (128 x 1
 * for the column-wise copy) for activations and gradients and 128 x 128 for weights, power-of-two
 * scales. `columnwise` picks the copy whose blocks run down the columns. NVFP4 (`format` not
 * read): NVFP4BlockScaling's defaults, 16 x 16 tiles for weights, 1 x 16 blocks otherwise,
 * stochastic rounding for gradients (the n-th stochastic cast of the process has seed n, so a
 * run is reproducible), the random Hadamard transform (TransformerEngine's signs) on the
 * column-wise copies of activations and gradients when the rows are a multiple of 16 (not
 * otherwise: TransformerEngine refuses such a shape). 0 or what dli_block_fake_quant returned. */
int dlt_block_quantize(enum dlt_scaling scaling, int kind, enum dli_dtype format, const float *x,
		       int rows, int cols, bool columnwise, float *dq);

/* End of step: the scale from the history (dli_fp8_current_scale's rules: an amax of 0, inf or
 * NaN gives 1), then the history moves on to a fresh slot. */
void dlt_fp8_meta_update(struct dlt_fp8_meta *m, const struct dlt_recipe *r);

/* The value of an FP8 code (exact in f32). */
float dlt_fp8_decode(uint8_t code, enum dli_dtype format);

/* Round-to-nearest-even to bf16, kept in f32 (the bf16 run's operands). */
void dlt_round_bf16(const float *x, size_t n, float *out);

#endif
