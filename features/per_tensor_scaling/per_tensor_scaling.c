/* PerTensorScaling: quantizes the selected tensors with per-tensor current scaling (the scale from
 * the tensor's own amax, docs/statistics.md) instead of the host's recipe, e.g. delayed scaling.
 * modify_tensor writes the FP8 codes (out dtype = the format; scale_inv to the quantizer's
 * scale_inv_out) or, for an f32 `out`, the quantized-then-dequantized values. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

#include <dlinspect/plugin.h>

#include "feature-util.h"

struct dli_pts {
	const struct dli_host *host;
	double margin;
};

static int dli_pts_create(const struct dli_feature_create_args *args, void **instance,
			  struct dli_error *err)
{
	struct dli_pts *self;

	if (!dli_feature_has_casts(args->host, err))
		return -ENOTSUP;
	if (!(self = calloc(1, sizeof(*self))))
		return -ENOMEM;
	self->host = args->host;
	self->margin = args->params[0].u.f;
	*instance = self;
	return 0;
}

static void dli_pts_destroy(void *instance)
{
	free(instance);
}

static bool dli_pts_modify_tensor_enabled(const struct dli_feature_call *c, enum dli_gemm gemm,
					  int tensor, int64_t iteration, int64_t *next)
{
	*next = DLI_NEVER; /* the config alone decides */
	return true;
}

/* The host's format when it says one; else TransformerEngine's hybrid recipe. */
static enum dli_dtype dli_pts_format(int tensor, const struct dli_quantizer *q)
{
	if (q && DLI_HAS_MEMBER(q, struct dli_quantizer, format))
		return q->format;
	return dli_feature_hybrid_format(tensor);
}

static int dli_pts_modify_tensor(const struct dli_feature_call *c, enum dli_gemm gemm, int tensor,
				 const struct dli_tensor *in, const struct dli_quantizer *quantizer,
				 struct dli_tensor *out)
{
	const struct dli_pts *self = c->instance;
	enum dli_dtype format = dli_pts_format(tensor, quantizer);
	float *scale_inv_out = NULL;
	float scale;
	int r;

	if (!in || !out)
		return dli_feature_fail(self->host, c->ctx, -EINVAL, "PerTensorScaling: %s is NULL",
					!in ? "in" : "out");
	if (format != DLI_DTYPE_F8E4M3 && format != DLI_DTYPE_F8E5M2)
		return dli_feature_fail(self->host, c->ctx, -EINVAL,
					"PerTensorScaling: the quantizer's format is not f8e4m3 or "
					"f8e5m2");
	if (!dli_feature_cast_input(in))
		return dli_feature_fail(self->host, c->ctx, -ENOTSUP,
					"PerTensorScaling reads contiguous f32, f16 or bf16 in host "
					"memory");
	if (out->dtype == format) {
		/* Codes mean nothing without the scale_inv that decodes them. */
		if (quantizer && DLI_HAS_MEMBER(quantizer, struct dli_quantizer, scale_inv_out))
			scale_inv_out = quantizer->scale_inv_out;
		if (!scale_inv_out)
			return dli_feature_fail(self->host, c->ctx, -EINVAL,
						"PerTensorScaling: FP8 codes out need the quantizer's "
						"scale_inv_out, which receives 1 / scale");
	} else if (!dli_feature_dequant_out(self->host, out)) {
		return dli_feature_fail(self->host, c->ctx, -EINVAL,
					"PerTensorScaling: out must be f32, f16 or bf16 (the "
					"dequantized values%s) or the format's FP8 codes",
					out->dtype == DLI_DTYPE_F16 || out->dtype == DLI_DTYPE_BF16
						? "; f32 only: this host is older than ABI 1.6"
						: "");
	}
	if ((r = dli_feature_current_cast(self->host, in, out, format, self->margin, &scale)))
		return r;
	if (scale_inv_out)
		*scale_inv_out = 1.0f / scale;
	return 0;
}

static const struct dli_feature_ops dli_pts_ops = {
	.size = sizeof(struct dli_feature_ops),
	.create = dli_pts_create,
	.destroy = dli_pts_destroy,
	.modify_tensor_enabled = dli_pts_modify_tensor_enabled,
	.modify_tensor = dli_pts_modify_tensor,
};

static const struct dli_param_desc dli_pts_params[] = {
	{.key = "margin", .type = DLI_PARAM_FLOAT, .default_value = "0",
	 .doc = "headroom in powers of two: scale = fp8_max / amax / 2^margin", DLI_FP8_MARGIN_RANGE},
};

static const char *const dli_pts_aliases[] = {"per_tensor_scaling", NULL};

static const struct dli_feature_desc dli_pts_feature = {
	.size = sizeof(struct dli_feature_desc),
	.name = "PerTensorScaling",
	.aliases = dli_pts_aliases,
	.doc = "Quantizes the selected tensors with per-tensor current scaling (scale from their own "
	       "amax).",
	.flags = DLI_FEATURE_GEMMS | DLI_FEATURE_TENSORS | DLI_FEATURE_MODIFIES,
	.params = dli_pts_params,
	.n_params = sizeof(dli_pts_params) / sizeof(dli_pts_params[0]),
	.param_size = DLI_PARAM_SIZE,
	.ops = &dli_pts_ops,
};
static const struct dli_feature_desc *const dli_pts_features[] = {&dli_pts_feature};

/* How `extensions: [transformer_engine]` finds this module without loading it. */
DLI_MODULE_NAMESPACE("transformer_engine");

static const struct dli_module dli_pts_module = {
	.size = sizeof(struct dli_module),
	.abi_major = DLI_ABI_MAJOR,
	.abi_minor = DLI_ABI_MINOR,
	.name = "per_tensor_scaling",
	.ns = "transformer_engine",
	.doc = "TransformerEngine's PerTensorScaling: current scaling for chosen tensors.",
	.features = dli_pts_features,
	.n_features = 1,
};

DLI_EXPORT const struct dli_module *DLI_MODULE_ENTRY(const struct dli_host *host)
{
	if (!host || host->abi_major != DLI_ABI_MAJOR)
		return NULL;
	return &dli_pts_module;
}
