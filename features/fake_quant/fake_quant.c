/* FakeQuant: rounds the selected tensors to FP8 values (per-tensor current scaling, or MXFP8's
 * row-wise 32-element blocks, then back to f32) and runs their GEMMs in high precision, to see
 * what FP8 rounding alone does to training, without the FP8 GEMM. As TransformerEngine's
 * FakeQuant; dlinspect adds FP8 block scaling and NVFP4 (docs/block-scaling.md). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <dlinspect/plugin.h>

#include "feature-util.h"

enum dli_fq_opt { DLI_FQ_AUTO = -1, DLI_FQ_OFF = 0, DLI_FQ_ON = 1 };

struct dli_fq_block {
	int recipe;        /* 0 (not a block format), DLI_BLOCK_FP8_1D or DLI_BLOCK_NVFP4 */
	int dim;           /* block_scaling_dim: 1, 2, or 0 for the recipe's (2 for weights) */
	int sr, rht;       /* enum dli_fq_opt */
	uint64_t seed, rht_seed;
};

struct dli_fq {
	const struct dli_host *host;
	enum dli_dtype format;
	bool mxfp8; /* MXFP8E4M3 / MXFP8E5M2: block scales instead of one per-tensor scale */
	double margin;
	uint32_t gemms;
	struct dli_fq_block block; /* FP8BLOCK* and NVFP4 */
};

enum {
	DLI_FQ_FORMAT,
	DLI_FQ_MARGIN,
	DLI_FQ_BLOCK_DIM,
	DLI_FQ_SR,
	DLI_FQ_RHT,
	DLI_FQ_SEED,
	DLI_FQ_RHT_SEED,
};

static const char *const dli_fq_formats[] = {"FP8E4M3",      "FP8E5M2",      "MXFP8E4M3", "MXFP8E5M2",
					     "FP8BLOCKE4M3", "FP8BLOCKE5M2", "NVFP4",     NULL};

/* ---- FP8 block scaling and NVFP4 (docs/block-scaling.md, "FakeQuant") ----
 * They emulate a recipe: each tensor gets the recipe's treatment for its kind, and each GEMM the
 * copy it reads (row-wise or column-wise), unless the config says otherwise. */

/* Which copy GEMM `gemm` reads of an input tensor (docs/block-scaling.md): the column-wise one
 * for the weight in dgrad and for the activation and gradient in wgrad. */
static bool dli_fq_columnwise(enum dli_gemm gemm, int tensor)
{
	return (gemm == DLI_GEMM_DGRAD && tensor == DLI_TENSOR_WEIGHT) ||
	       (gemm == DLI_GEMM_WGRAD &&
		(tensor == DLI_TENSOR_ACTIVATION || tensor == DLI_TENSOR_GRADIENT));
}

static int dli_fq_block_dim(const struct dli_fq_block *b, int tensor)
{
	return b->dim ? b->dim : tensor == DLI_TENSOR_WEIGHT ? 2 : 1;
}

static int dli_fq_opt(const struct dli_value *v)
{
	return v->set ? (v->u.b ? DLI_FQ_ON : DLI_FQ_OFF) : DLI_FQ_AUTO;
}

/* The block options of quant_format `qf`; an option that the format does not read is an error
 * rather than silently ignored. 0 or -EINVAL / -ENOTSUP with err filled. */
static int dli_fq_block_parse(const struct dli_feature_create_args *args, const char *qf,
			      struct dli_fq_block *b, struct dli_error *err)
{
	const struct dli_value *p = args->params;
	bool nvfp4 = !strcmp(qf, "NVFP4");

	b->recipe = nvfp4 ? DLI_BLOCK_NVFP4 : !strncmp(qf, "FP8BLOCK", 8) ? DLI_BLOCK_FP8_1D : 0;
	b->dim = p[DLI_FQ_BLOCK_DIM].set ? (int)p[DLI_FQ_BLOCK_DIM].u.i : 0;
	b->sr = dli_fq_opt(&p[DLI_FQ_SR]);
	b->rht = dli_fq_opt(&p[DLI_FQ_RHT]);
	b->seed = (uint64_t)p[DLI_FQ_SEED].u.i;
	b->rht_seed = (uint64_t)p[DLI_FQ_RHT_SEED].u.i;
	if (!b->recipe && p[DLI_FQ_BLOCK_DIM].set) {
		snprintf(err->message, sizeof(err->message),
			 "block_scaling_dim: applies to FP8BLOCKE4M3, FP8BLOCKE5M2 and NVFP4 only, "
			 "not %s", qf);
		return -EINVAL;
	}
	static const int nv_only[] = {DLI_FQ_SR, DLI_FQ_RHT, DLI_FQ_SEED, DLI_FQ_RHT_SEED};
	for (size_t i = 0; i < sizeof(nv_only) / sizeof(nv_only[0]); i++)
		if (!nvfp4 && p[nv_only[i]].set) {
			snprintf(err->message, sizeof(err->message),
				 "%s: applies to NVFP4 only, not %s",
				 i == 0 ? "stochastic_rounding" : i == 1 ? "random_hadamard_transform" :
				 i == 2 ? "seed" : "rht_seed", qf);
			return -EINVAL;
		}
	/* The transform runs along 1-D blocks; TransformerEngine applies it to no 16 x 16 tile. */
	if (b->rht == DLI_FQ_ON &&
	    (b->dim == 2 || (!b->dim && (args->tensors & (1ull << DLI_TENSOR_WEIGHT))))) {
		snprintf(err->message, sizeof(err->message),
			 "random_hadamard_transform: needs 1 x 16 blocks, and %s; set "
			 "block_scaling_dim: 1", b->dim == 2 ? "block_scaling_dim is 2" :
			 "weights get 16 x 16 tiles by default");
		return -EINVAL;
	}
	/* NVFP4 through block_fake_quant is ABI 1.3. */
	if (b->recipe && (!DLI_HAS_MEMBER(args->host, struct dli_host, block_fake_quant) ||
			  !args->host->block_fake_quant ||
			  (nvfp4 && args->host->abi_minor < 3))) {
		snprintf(err->message, sizeof(err->message),
			 "quant_format: %s needs a host with its cast (block_fake_quant, ABI 1.%d); "
			 "this host is older", qf, nvfp4 ? 3 : 2);
		return -ENOTSUP;
	}
	return 0;
}

/* FNV-1a of a layer name: the layer's share of the stochastic rounding's seed. */
static uint64_t dli_fq_name_hash(const char *s)
{
	uint64_t h = 0xcbf29ce484222325ull;

	for (; s && *s; s++)
		h = (h ^ (unsigned char)*s) * 0x100000001b3ull;
	return h;
}

static int dli_fq_block_modify(const struct dli_fq *self, const struct dli_feature_call *c,
			       enum dli_gemm gemm, int tensor, const struct dli_tensor *in,
			       struct dli_tensor *out)
{
	const struct dli_fq_block *b = &self->block;
	bool col = dli_fq_columnwise(gemm, tensor);
	int dim = dli_fq_block_dim(b, tensor);
	struct dli_block_spec spec = {.size = sizeof(spec), .format = self->format,
				      .columnwise = col};

	if (b->recipe == DLI_BLOCK_FP8_1D) {
		/* Float8BlockScaling's quantizer: power-of-two scales by default. */
		spec.recipe = dim == 2 ? DLI_BLOCK_FP8_2D : DLI_BLOCK_FP8_1D;
		spec.pow2_scales = 1;
		return self->host->block_fake_quant(in, out, &spec);
	}
	/* NVFP4BlockScaling's defaults: stochastic rounding for gradients, the transform for the
	 * wgrad GEMM's operands (the column-wise copies of activation and gradient). */
	spec.recipe = dim == 2 ? DLI_BLOCK_NVFP4_2D : DLI_BLOCK_NVFP4;
	spec.stochastic_rounding = b->sr == DLI_FQ_AUTO ? tensor == DLI_TENSOR_GRADIENT : b->sr;
	spec.rht = b->rht == DLI_FQ_AUTO ? dim == 1 && gemm == DLI_GEMM_WGRAD &&
						   (tensor == DLI_TENSOR_ACTIVATION ||
						    tensor == DLI_TENSOR_GRADIENT)
					 : b->rht;
	spec.rht_seed = b->rht_seed;
	/* Fresh random bits per iteration, layer, GEMM and tensor; the same run gives the same
	 * bits. */
	spec.seed = b->seed ^ dli_fq_name_hash(c->layer_name) ^
		    ((uint64_t)self->host->iteration(c->ctx) * 0x9E3779B97F4A7C15ull) ^
		    ((uint64_t)gemm << 56) ^ ((uint64_t)(unsigned)tensor << 48);
	return self->host->block_fake_quant(in, out, &spec);
}

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
	int r = dli_fq_block_parse(args, qf, &self->block, err);
	if (r) {
		free(self);
		return r;
	}
	if (self->block.recipe && args->params[DLI_FQ_MARGIN].set && self->margin != 0) {
		snprintf(err->message, sizeof(err->message),
			 "margin: applies to the per-tensor formats (FP8E4M3, FP8E5M2) only; %s "
			 "scales each block from its own amax", qf);
		free(self);
		return -EINVAL;
	}
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

	if (!in || !out)
		return dli_feature_fail(self->host, c->ctx, -EINVAL, "FakeQuant: %s is NULL",
					!in ? "in" : "out");
	if (!dli_feature_dequant_out(self->host, out))
		return dli_feature_fail(self->host, c->ctx, -EINVAL,
					"FakeQuant writes the dequantized values: out must be f32, "
					"f16 or bf16%s", out->dtype == DLI_DTYPE_F16 ||
					out->dtype == DLI_DTYPE_BF16 ? " (f32 only: this host "
					"is older than ABI 1.6)" : "");
	if (!dli_feature_cast_input(in))
		return dli_feature_fail(self->host, c->ctx, -ENOTSUP,
					"FakeQuant reads contiguous f32, f16 or bf16 in host memory");
	if (self->block.recipe)
		return dli_fq_block_modify(self, c, gemm, tensor, in, out);
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
			   .doc = "format the values are rounded to: FP8E4M3 or FP8E5M2 (per-tensor "
				  "current scaling), MXFP8E4M3 or MXFP8E5M2 (32-element row-wise blocks), "
				  "FP8BLOCKE4M3 or FP8BLOCKE5M2 (Float8BlockScaling), NVFP4 "
				  "(NVFP4BlockScaling)",
			   .choices = dli_fq_formats, .required = true},
	[DLI_FQ_MARGIN] = {.key = "margin", .type = DLI_PARAM_FLOAT, .default_value = "0",
			   .doc = "headroom in powers of two: scale = fp8_max / amax / 2^margin (per-tensor "
				  "formats only)",
			   DLI_FP8_MARGIN_RANGE},
	[DLI_FQ_BLOCK_DIM] = {.key = "block_scaling_dim", .type = DLI_PARAM_INT,
			      .doc = "FP8BLOCK*, NVFP4: 1 (1 x 128 / 1 x 16 blocks) or 2 (128 x 128 / "
				     "16 x 16); default the recipe's: 2 for weights, 1 otherwise",
			      .bounded = true, .min = 1, .max = 2},
	[DLI_FQ_SR] = {.key = "stochastic_rounding", .type = DLI_PARAM_BOOL,
		       .doc = "NVFP4: round the elements stochastically; default the recipe's: "
			      "gradients only"},
	[DLI_FQ_RHT] = {.key = "random_hadamard_transform", .type = DLI_PARAM_BOOL,
			.doc = "NVFP4: the 16 x 16 random Hadamard transform before the cast, undone "
			       "after; default the recipe's: activation and gradient in wgrad"},
	[DLI_FQ_SEED] = {.key = "seed", .type = DLI_PARAM_INT, .default_value = "0",
			 .doc = "NVFP4: the stochastic rounding's seed (mixed with the iteration, "
				"layer, GEMM and tensor)"},
	[DLI_FQ_RHT_SEED] = {.key = "rht_seed", .type = DLI_PARAM_INT, .default_value = "0",
			     .doc = "NVFP4: the transform's sign vector: 0 TransformerEngine's fixed "
				    "one, else drawn from this seed"},
};

static const struct dli_feature_desc dli_fq_feature = {
	.size = sizeof(struct dli_feature_desc),
	.name = "FakeQuant",
	.doc = "Rounds the selected tensors to FP8 (or NVFP4) values and runs their GEMMs in high "
	       "precision.",
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
