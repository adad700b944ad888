/* DisableFP8Layer: runs all three GEMMs (fprop, dgrad, wgrad) of the selected layers in high
 * precision, whatever the host's FP8 recipe says. */
#include <dlinspect/plugin.h>

/* The feature has no parameters and no state: the instance stays NULL. */
static int dli_disable_layer_create(const struct dli_feature_create_args *args, void **instance,
				    struct dli_error *err)
{
	*instance = NULL;
	return 0;
}

static void dli_disable_layer_destroy(void *instance)
{
}

static bool dli_disable_layer_fp8_gemm_enabled(const struct dli_feature_call *c, enum dli_gemm gemm,
					       int64_t iteration, int64_t *next)
{
	/* The answer depends on the config alone, so it never changes. */
	*next = DLI_NEVER;
	return false;
}

static const struct dli_feature_ops dli_disable_layer_ops = {
	.size = sizeof(struct dli_feature_ops),
	.create = dli_disable_layer_create,
	.destroy = dli_disable_layer_destroy,
	.fp8_gemm_enabled = dli_disable_layer_fp8_gemm_enabled,
};

/* DisableQuantizationLayer: TransformerEngine's name from 2.13 on (the same behaviour). */
static const char *const dli_disable_layer_aliases[] = {"disable_fp8_layer",
							"DisableQuantizationLayer", NULL};

static const struct dli_feature_desc dli_disable_layer_feature = {
	.size = sizeof(struct dli_feature_desc),
	.name = "DisableFP8Layer",
	.aliases = dli_disable_layer_aliases,
	.doc = "Runs every GEMM of the selected layers in high precision instead of FP8.",
	.flags = 0,
	.ops = &dli_disable_layer_ops,
};
static const struct dli_feature_desc *const dli_disable_layer_features_list[] = {&dli_disable_layer_feature};

/* How `extensions: [transformer_engine]` finds this module without loading it. */
DLI_MODULE_NAMESPACE("transformer_engine");

static const struct dli_module dli_disable_layer_module = {
	.size = sizeof(struct dli_module),
	.abi_major = DLI_ABI_MAJOR,
	.abi_minor = DLI_ABI_MINOR,
	.name = "disable_fp8_layer",
	.ns = "transformer_engine",
	.doc = "TransformerEngine's DisableFP8Layer: keeps whole layers out of FP8.",
	.features = dli_disable_layer_features_list,
	.n_features = 1,
};

DLI_EXPORT const struct dli_module *DLI_MODULE_ENTRY(const struct dli_host *host)
{
	if (!host || host->abi_major != DLI_ABI_MAJOR)
		return NULL;
	return &dli_disable_layer_module;
}
