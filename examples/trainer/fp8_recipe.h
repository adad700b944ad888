/* Per-tensor delayed scaling as TransformerEngine's DelayedScaling recipe does it: each tensor keeps
 * an amax history; its scale comes from the history (max or most recent) and the margin, and is
 * updated once per step; E4M3 in the forward pass, E5M2 for gradients (the hybrid format). */
#ifndef DLT_FP8_RECIPE_H
#define DLT_FP8_RECIPE_H

#include <stddef.h>
#include <stdint.h>

#include <dlinspect/tensor.h>

enum dlt_amax_algo {
	DLT_AMAX_MAX,         /* the largest amax in the history */
	DLT_AMAX_MOST_RECENT, /* the amax of the last step */
};

struct dlt_recipe {
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

/* End of step: the scale from the history (dli_fp8_current_scale's rules: an amax of 0, inf or
 * NaN gives 1), then the history moves on to a fresh slot. */
void dlt_fp8_meta_update(struct dlt_fp8_meta *m, const struct dlt_recipe *r);

/* The value of an FP8 code (exact in f32). */
float dlt_fp8_decode(uint8_t code, enum dli_dtype format);

/* Round-to-nearest-even to bf16, kept in f32 (the bf16 run's operands). */
void dlt_round_bf16(const float *x, size_t n, float *out);

#endif
