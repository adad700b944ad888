/* FakeQuant: rounds the selected tensors to FP8 values (per-tensor current scaling, or MXFP8's
 * row-wise 32-element blocks, then back to f32) and runs their GEMMs in high precision, to see
 * what FP8 rounding alone does to training, without the FP8 GEMM. As TransformerEngine's
 * FakeQuant. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <dlinspect/plugin.h>

#include "feature-util.h"

struct dli_fq {
	const struct dli_host *host;
	enum dli_dtype format;
	bool mxfp8; /* MXFP8E4M3 / MXFP8E5M2: block scales instead of one per-tensor scale */
	double margin;
	uint32_t gemms;
};

enum { DLI_FQ_FORMAT, DLI_FQ_MARGIN };

static const char *const dli_fq_formats[] = {"FP8E4M3", "FP8E5M2", "MXFP8E4M3", "MXFP8E5M2", NULL};

static int dli_fq_create(const struct dli_feature_create_args *args, void **instance,
			 struct dli_error *err)
{
	struct dli_fq *self;

	if (!dli_feature_has_casts(args->host, err))
		return -ENOTSUP;
	if (!(self = calloc(1, sizeof(*self))))
		return -ENOMEM;
	self->host = args->host;
	/* The config checked quant_format against the choices. */
	const char *qf = args->params[DLI_FQ_FORMAT].u.s;
	self->mxfp8 = !strncmp(qf, "MX", 2);
	self->format = strstr(qf, "E5M2") ? DLI_DTYPE_F8E5M2 : DLI_DTYPE_F8E4M3;
	self->margin = args->params[DLI_FQ_MARGIN].u.f;
	/* MXFP8's block scales have no margin (TransformerEngine's have none either): a margin
	 * there would be silently ignored. The MXFP8 cast is a host call of ABI 1.2. */
	if (self->mxfp8 && args->params[DLI_FQ_MARGIN].set && self->margin != 0) {
		snprintf(err->message, sizeof(err->message),
			 "margin: applies to the per-tensor formats (FP8E4M3, FP8E5M2) only; %s "
			 "scales each 32-element block by a power of two from its own amax",
			 qf);
		free(self);
		return -EINVAL;
	}
	if (self->mxfp8 && (!DLI_HAS_MEMBER(args->host, struct dli_host, block_fake_quant) ||
			    !args->host->block_fake_quant)) {
		snprintf(err->message, sizeof(err->message),
			 "quant_format: %s needs a host with the MXFP8 cast (block_fake_quant); "
			 "this host is older", qf);
		free(self);
		return -ENOTSUP;
	}
	self->gemms = args->gemms;
	*instance = self;
	return 0;
}

static void dli_fq_destroy(void *instance)
{
	free(instance);
}

/* The fake-quantized tensors feed a high-precision GEMM. The core asks only for gemms in the
 * mask; the mask is checked here too so a stray call cannot turn off the wrong GEMM. */
static bool dli_fq_fp8_gemm_enabled(const struct dli_feature_call *c, enum dli_gemm gemm,
				    int64_t iteration, int64_t *next)
{
	const struct dli_fq *self = c->instance;

	*next = DLI_NEVER;
	return (unsigned)gemm >= DLI_GEMM_COUNT || !(self->gemms & (1u << gemm));
}

static bool dli_fq_modify_tensor_enabled(const struct dli_feature_call *c, enum dli_gemm gemm,
					 int tensor, int64_t iteration, int64_t *next)
{
	*next = DLI_NEVER;
	return true;
}

static int dli_fq_modify_tensor(const struct dli_feature_call *c, enum dli_gemm gemm, int tensor,
				const struct dli_tensor *in, const struct dli_quantizer *quantizer,
				struct dli_tensor *out)
{
	const struct dli_fq *self = c->instance;
	float scale;

	if (!in || !out || out->dtype != DLI_DTYPE_F32)
		return -EINVAL;
	if (!dli_feature_cast_input(in))
		return -ENOTSUP;
	if (self->mxfp8) {
		/* Row-wise blocks: what TransformerEngine's dequantize() of an MXFP8 tensor reads. */
		struct dli_block_spec spec = {.size = sizeof(spec), .recipe = DLI_BLOCK_MXFP8,
					      .format = self->format};
		return self->host->block_fake_quant(in, out, &spec);
	}
	return dli_feature_current_cast(self->host, in, out, self->format, self->margin, &scale);
}

static const struct dli_feature_ops dli_fq_ops = {
	.size = sizeof(struct dli_feature_ops),
	.create = dli_fq_create,
	.destroy = dli_fq_destroy,
	.fp8_gemm_enabled = dli_fq_fp8_gemm_enabled,
	.modify_tensor_enabled = dli_fq_modify_tensor_enabled,
	.modify_tensor = dli_fq_modify_tensor,
};

static const struct dli_param_desc dli_fq_params[] = {
	[DLI_FQ_FORMAT] = {.key = "quant_format", .type = DLI_PARAM_STRING,
			   .doc = "FP8 format the values are rounded to: FP8E4M3 or FP8E5M2 (per-tensor "
				  "current scaling), MXFP8E4M3 or MXFP8E5M2 (32-element row-wise blocks)",
			   .choices = dli_fq_formats, .required = true},
	[DLI_FQ_MARGIN] = {.key = "margin", .type = DLI_PARAM_FLOAT, .default_value = "0",
			   .doc = "headroom in powers of two: scale = fp8_max / amax / 2^margin (per-tensor "
				  "formats only)",
			   DLI_FP8_MARGIN_RANGE},
};

static const struct dli_feature_desc dli_fq_feature = {
	.size = sizeof(struct dli_feature_desc),
	.name = "FakeQuant",
	.doc = "Rounds the selected tensors to FP8 values and runs their GEMMs in high precision.",
	.flags = DLI_FEATURE_GEMMS | DLI_FEATURE_TENSORS | DLI_FEATURE_MODIFIES,
	.params = dli_fq_params,
	.n_params = sizeof(dli_fq_params) / sizeof(dli_fq_params[0]),
	.param_size = DLI_PARAM_SIZE,
	.ops = &dli_fq_ops,
};
static const struct dli_feature_desc *const dli_fq_features[] = {&dli_fq_feature};

/* How `extensions: [transformer_engine]` finds this module without loading it. */
DLI_MODULE_NAMESPACE("transformer_engine");

static const struct dli_module dli_fq_module = {
	.size = sizeof(struct dli_module),
	.abi_major = DLI_ABI_MAJOR,
	.abi_minor = DLI_ABI_MINOR,
	.name = "fake_quant",
	.ns = "transformer_engine",
	.doc = "TransformerEngine's FakeQuant: FP8 rounding with high-precision GEMMs.",
	.features = dli_fq_features,
	.n_features = 1,
};

DLI_EXPORT const struct dli_module *DLI_MODULE_ENTRY(const struct dli_host *host)
{
	if (!host || host->abi_major != DLI_ABI_MAJOR)
		return NULL;
	return &dli_fq_module;
}
