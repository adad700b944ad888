/* Delayed scaling for the trainer's FP8 GEMMs (see fp8_recipe.h); the casts are dlinspect's own
 * (dli_fp8_cast), so the codes are bit for bit those dlinspect's statistics assume. */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <dlinspect/dlinspect.h>
#include <dlinspect/stats.h>

#include "fp8_recipe.h"

const char *const dlt_scaling_names[DLT_SCALING_COUNT] = {
	[DLT_SCALING_DELAYED] = "delayed", [DLT_SCALING_CURRENT] = "current",
	[DLT_SCALING_MXFP8] = "mxfp8", [DLT_SCALING_BLOCK] = "block",
	[DLT_SCALING_NVFP4] = "nvfp4",
};

void dlt_recipe_default(struct dlt_recipe *r)
{
	r->scaling = DLT_SCALING_DELAYED;
	r->history_len = 1024;
	r->algo = DLT_AMAX_MAX;
	r->margin = 0;
}

float dlt_fp8_decode(uint8_t code, enum dli_dtype format)
{
	bool e4m3 = format == DLI_DTYPE_F8E4M3;
	int mbits = e4m3 ? 3 : 2, bias = e4m3 ? 7 : 15;
	int e = (code & 0x7f) >> mbits, m = code & ((1 << mbits) - 1);
	float sign = code & 0x80 ? -1.0f : 1.0f, v;
	if (e4m3 && e == 15 && m == 7)
		return NAN;
	if (!e4m3 && e == 31)
		return m ? NAN : sign * INFINITY;
	if (e == 0)
		v = ldexpf((float)m, 1 - bias - mbits);
	else
		v = ldexpf((float)((1 << mbits) + m), e - bias - mbits);
	return sign * v;
}

static void build_table(struct dlt_fp8_meta *m)
{
	for (int c = 0; c < 256; c++)
		m->table[c] = dlt_fp8_decode((uint8_t)c, m->format) * (1.0f / m->scale);
}

int dlt_fp8_meta_init(struct dlt_fp8_meta *m, const struct dlt_recipe *r, enum dli_dtype format)
{
	memset(m, 0, sizeof *m);
	m->format = format;
	m->history_len = r->history_len > 0 ? r->history_len : 1;
	if (!(m->history = calloc((size_t)m->history_len, sizeof *m->history)))
		return -ENOMEM;
	m->scale = m->scale_inv = 1.0f;
	build_table(m);
	return 0;
}

void dlt_fp8_meta_finish(struct dlt_fp8_meta *m)
{
	free(m->history);
	m->history = NULL;
}

float dlt_amax(const float *x, size_t n)
{
	/* On |x|'s bits an unsigned max is the float max with NaN above inf, and it vectorizes
	 * without -ffast-math. */
	uint32_t best = 0;
	for (size_t i = 0; i < n; i++) {
		uint32_t b;
		memcpy(&b, &x[i], 4);
		b &= 0x7fffffffu;
		best = b > best ? b : best;
	}
	float a;
	memcpy(&a, &best, 4);
	return a;
}

static int cast_with_scale(struct dlt_fp8_meta *m, const float *x, size_t n, uint8_t *codes,
			   float *dq)
{
	struct dli_tensor in = {.data = (void *)x, .dtype = DLI_DTYPE_F32, .ndim = 1,
				.shape = {(int64_t)n}, .contiguous = true};
	struct dli_tensor out = in;
	out.data = codes;
	out.dtype = m->format;
	int r = dli_fp8_cast(&in, &out, m->format, m->scale);
	if (r)
		return r;
	for (size_t i = 0; i < n; i++)
		dq[i] = m->table[codes[i]];
	return 0;
}

int dlt_fp8_quantize(struct dlt_fp8_meta *m, const float *x, size_t n, uint8_t *codes, float *dq)
{
	float a = dlt_amax(x, n);
	float *slot = &m->history[m->pos];
	/* A tensor cast twice in a step (it never is in this trainer) keeps the larger amax. */
	if (!(a <= *slot))
		*slot = a;
	return cast_with_scale(m, x, n, codes, dq);
}

int dlt_fp8_quantize_current(struct dlt_fp8_meta *m, const struct dlt_recipe *r, const float *x,
			     size_t n, uint8_t *codes, float *dq)
{
	float s = dli_fp8_current_scale(dlt_amax(x, n), m->format, r->margin);
	if (s != m->scale) {
		m->scale = s;
		m->scale_inv = 1.0f / s;
		build_table(m);
	}
	return cast_with_scale(m, x, n, codes, dq);
}

/* NVFP4BlockScaling's treatment of tensor `kind` (fp8_recipe.h). */
static void dlt_nvfp4_spec(int kind, int rows, bool columnwise, struct dli_block_spec *spec)
{
	static uint64_t stochastic_casts;

	spec->recipe = kind == DLI_TENSOR_WEIGHT ? DLI_BLOCK_NVFP4_2D : DLI_BLOCK_NVFP4;
	if (kind == DLI_TENSOR_GRADIENT) {
		spec->stochastic_rounding = 1;
		spec->seed = ++stochastic_casts;
	}
	/* The wgrad GEMM's operands; rht_seed 0: TransformerEngine's fixed sign vector. */
	spec->rht = columnwise && kind != DLI_TENSOR_WEIGHT && rows % 16 == 0;
}

int dlt_block_quantize(enum dlt_scaling scaling, int kind, enum dli_dtype format, const float *x,
		       int rows, int cols, bool columnwise, float *dq)
{
	struct dli_block_spec spec = {.size = sizeof spec, .format = format,
				      .columnwise = columnwise};
	if (scaling == DLT_SCALING_MXFP8)
		spec.recipe = DLI_BLOCK_MXFP8;
	else if (scaling == DLT_SCALING_NVFP4)
		dlt_nvfp4_spec(kind, rows, columnwise, &spec);
	else {
		/* Float8BlockScaling's defaults: x and gradient 1-D, weight 2-D, power-of-two
		 * scales. */
		spec.recipe = kind == DLI_TENSOR_WEIGHT ? DLI_BLOCK_FP8_2D : DLI_BLOCK_FP8_1D;
		spec.pow2_scales = 1;
	}
	struct dli_tensor in = {.data = (void *)x, .dtype = DLI_DTYPE_F32, .ndim = 2,
				.shape = {rows, cols}, .contiguous = true};
	struct dli_tensor out = in;
	out.data = dq;
	return dli_block_fake_quant(&in, &out, &spec);
}

void dlt_fp8_meta_update(struct dlt_fp8_meta *m, const struct dlt_recipe *r)
{
	float a = m->history[m->pos];
	if (r->algo == DLT_AMAX_MAX)
		for (int i = 0; i < m->history_len && !isnan(a); i++)
			if (!(m->history[i] <= a)) /* NaN wins: it gives scale 1, as a spike would not */
				a = m->history[i];
	float s = dli_fp8_current_scale(a, m->format, r->margin);
	if (s != m->scale) {
		m->scale = s;
		m->scale_inv = 1.0f / s;
		build_table(m);
	}
	m->pos = (m->pos + 1) % m->history_len;
	m->history[m->pos] = 0.0f;
}

void dlt_round_bf16(const float *x, size_t n, float *out)
{
	for (size_t i = 0; i < n; i++) {
		uint32_t b;
		memcpy(&b, &x[i], 4);
		if ((b & 0x7fffffffu) > 0x7f800000u)
			b |= 0x00400000u; /* NaN stays a (quiet) NaN */
		else
			b += 0x7fffu + ((b >> 16) & 1u); /* round to nearest even; inf stays inf */
		b &= 0xffff0000u;
		memcpy(&out[i], &b, 4);
	}
}
