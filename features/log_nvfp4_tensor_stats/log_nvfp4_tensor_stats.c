/* LogNvfp4TensorStats: how much NVFP4 quantization (TransformerEngine's NVFP4BlockScaling recipe)
 * loses on the selected tensors: underflows% and mse of the row-wise NVFP4 copy, the host's own
 * when it trains in NVFP4 (dli_inspect_tensor_block), else a what-if from the high-precision
 * tensor (16 x 16 tiles for weights, 1 x 16 blocks otherwise, as the recipe's defaults quantize
 * them). Logged at the scheduled steps as `{layer}_{tensor}_nvfp4_{stat}`,
 * TransformerEngine's names. The rules are docs/block-scaling.md's ("NVFP4"). */
#include <errno.h>
#include <stdio.h>

#include <dlinspect/plugin.h>

#include "stats-skeleton.h"

/* TransformerEngine's stats for NVFP4 (check_if_stat_is_supported of its LogNvfp4TensorStats),
 * logged with its prefix. */
static const char *const dli_lns_names[] = {"underflows%", "mse", NULL};
static const struct dli_sf_recipe dli_lns_recipe = {
	.log_prefix = "nvfp4_",
	.stats = DLI_SF_STAT_BIT(DLI_STAT_UNDERFLOWS_PCT) | DLI_SF_STAT_BIT(DLI_STAT_MSE)};

enum { DLI_LNS_STATS, DLI_LNS_REDUCE };

/* The one accumulator's role in its reduction key (feature-reduce.h). */
static const char *const dli_lns_roles[DLI_SF_MAX_SLOTS] = {"nvfp4"};

static int dli_lns_create(const struct dli_feature_create_args *args, void **instance,
			  struct dli_error *err)
{
	const struct dli_value *p = args->params;
	struct dli_sf *self;
	int r;

	if (!DLI_HAS_MEMBER(args->host, struct dli_host, stats_add_block) ||
	    !args->host->stats_add_block) {
		snprintf(err->message, sizeof(err->message),
			 "LogNvfp4TensorStats needs a host with the block-scaled passes "
			 "(stats_add_block, ABI 1.2); this host is older");
		return -ENOTSUP;
	}
	if (!(self = dli_sf_create(args, sizeof(*self), err, &r)))
		return r;
	for (size_t i = 0; !r && p[DLI_LNS_STATS].set && i < p[DLI_LNS_STATS].u.list.n; i++)
		r = dli_sf_want(self, p[DLI_LNS_STATS].u.list.items[i], &dli_lns_recipe, 1, err);
	if (!r && !self->n_stats) {
		snprintf(err->message, sizeof(err->message),
			 "no statistic to log: give 'stats' ([underflows%%, mse])");
		r = -EINVAL;
	}
	/* Across ranks as TransformerEngine reduces this feature's buffers, with the keys of the
	 * other statistics features (docs/distributed.md). */
	if (!r)
		r = dli_sf_reduce_read(self, p, DLI_LNS_REDUCE, args->where, dli_lns_roles);
	if (r) {
		dli_sf_destroy(self);
		return r;
	}
	*instance = self;
	return 0;
}

/* Chooses what to compute; the rest is the skeleton's (stats-skeleton.h). */
static int dli_lns_inspect_tensor(const struct dli_feature_call *c, int tensor,
				  const struct dli_tensor *hp, const struct dli_quantized_tensor *rowwise,
				  const struct dli_quantized_tensor *colwise)
{
	const struct dli_sf *self = c->instance;
	struct dli_sf_tensor *t = dli_sf_tensor(c, tensor);

	(void)rowwise;
	(void)colwise;
	if (!t || !hp || dli_sf_weight_seen(c, t))
		return 0;
	/* NVFP4BlockScaling's defaults: 16 x 16 tiles for weights, 1 x 16 blocks for the rest. */
	struct dli_block_spec spec = {.size = sizeof(spec),
				      .recipe = tensor == DLI_TENSOR_WEIGHT ? DLI_BLOCK_NVFP4_2D
									    : DLI_BLOCK_NVFP4};
	return dli_sf_weight_done(t, dli_sf_added(t, 0, self->host->stats_add_block(t->acc[0], hp,
										     &spec)));
}

/* A host training in NVFP4: its row-wise copy, as TransformerEngine's feature reads it; any
 * other host's call is the what-if above. */
static int dli_lns_inspect_tensor_block(const struct dli_feature_call *c, int tensor,
					const struct dli_tensor *hp,
					const struct dli_block_quantized_tensor *rowwise,
					const struct dli_block_quantized_tensor *colwise)
{
	const struct dli_sf *self = c->instance;
	struct dli_sf_tensor *t;

	(void)colwise;
	if (!rowwise || (rowwise->recipe != DLI_BLOCK_NVFP4 && rowwise->recipe != DLI_BLOCK_NVFP4_2D))
		return dli_lns_inspect_tensor(c, tensor, hp, NULL, NULL);
	if (!(t = dli_sf_tensor(c, tensor)) || dli_sf_weight_seen(c, t))
		return 0;
	return dli_sf_weight_done(
	    t, dli_sf_added(t, 0, self->host->stats_add_block_quantized(t->acc[0], hp, rowwise)));
}

static const struct dli_feature_ops dli_lns_ops = {
	.size = sizeof(struct dli_feature_ops),
	.create = dli_lns_create,
	.destroy = dli_sf_destroy,
	.layer_attach = dli_sf_layer_attach,
	.layer_detach = dli_sf_layer_detach,
	.inspect_tensor_enabled = dli_sf_inspect_tensor_enabled,
	.inspect_tensor = dli_lns_inspect_tensor,
	.step_end = dli_sf_step_end,
	.inspect_tensor_block = dli_lns_inspect_tensor_block,
};

static const struct dli_param_desc dli_lns_params[] = {
	[DLI_LNS_STATS] = {.key = "stats", .type = DLI_PARAM_STRING_LIST,
			   .doc = "underflows% (nonzero values whose E2M1 code is +-0, in % of the "
				  "elements) and mse of the tensor's row-wise NVFP4 copy: the host's "
				  "own when it trains in NVFP4, else quantized here from the "
				  "high-precision tensor (16 x 16 tiles for weights, 1 x 16 blocks "
				  "otherwise); logged as nvfp4_<stat>",
			   .choices = dli_lns_names},
	DLI_REDUCE_PARAMS, /* from DLI_LNS_REDUCE on */
};

static const struct dli_feature_desc dli_lns_feature = {
	.size = sizeof(struct dli_feature_desc),
	.name = "LogNvfp4TensorStats",
	.doc = "Logs NVFP4 quantization error stats (the host's NVFP4 copy, or a what-if from the "
	       "high-precision tensor) of the selected tensors at the scheduled steps.",
	.flags = DLI_FEATURE_GENERIC | DLI_FEATURE_TENSORS | DLI_FEATURE_SCHEDULED |
		 DLI_FEATURE_STRIDED, /* reads tensors through the host calls only */
	.params = dli_lns_params,
	.n_params = sizeof(dli_lns_params) / sizeof(dli_lns_params[0]),
	.param_size = DLI_PARAM_SIZE,
	.ops = &dli_lns_ops,
};
static const struct dli_feature_desc *const dli_lns_features[] = {&dli_lns_feature};

DLI_MODULE_NAMESPACE("transformer_engine");

static const struct dli_module dli_lns_module = {
	.size = sizeof(struct dli_module),
	.abi_major = DLI_ABI_MAJOR,
	.abi_minor = DLI_ABI_MINOR,
	.name = "log_nvfp4_tensor_stats",
	.ns = "transformer_engine",
	.doc = "TransformerEngine's LogNvfp4TensorStats: NVFP4 quantization error at scheduled steps.",
	.features = dli_lns_features,
	.n_features = 1,
};

DLI_EXPORT const struct dli_module *DLI_MODULE_ENTRY(const struct dli_host *host)
{
	if (!host || host->abi_major != DLI_ABI_MAJOR)
		return NULL;
	return &dli_lns_module;
}
