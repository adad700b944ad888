/* DisableFP8GEMM: runs the selected GEMMs (gemms / gemms_struct) of the selected layers in high
 * precision, whatever the host's FP8 recipe says. */
#include <errno.h>
#include <stdlib.h>

#include <dlinspect/plugin.h>

struct dli_disable_gemm {
	uint32_t gemms; /* bit (1u << enum dli_gemm) per gemm kept out of FP8 */
};

static int dli_disable_gemm_create(const struct dli_feature_create_args *args, void **instance,
				   struct dli_error *err)
{
	struct dli_disable_gemm *self = calloc(1, sizeof(*self));

	if (!self)
		return -ENOMEM;
	/* An args table from an older core may end before `gemms`: then nothing is disabled. */
	if (DLI_HAS_MEMBER(args, struct dli_feature_create_args, gemms))
		self->gemms = args->gemms;
	*instance = self;
	return 0;
}

static void dli_disable_gemm_destroy(void *instance)
{
	free(instance);
}

static bool dli_disable_gemm_fp8_gemm_enabled(const struct dli_feature_call *c, enum dli_gemm gemm,
					      int64_t iteration, int64_t *next)
{
	const struct dli_disable_gemm *self = c->instance;

	/* The answer depends on the config alone, so it never changes. The core only asks for gemms in
	 * the mask, but the mask is checked here too so a stray call cannot disable the wrong GEMM. */
	*next = DLI_NEVER;
	if ((unsigned)gemm >= DLI_GEMM_COUNT)
		return true;
	return !(self->gemms & (1u << gemm));
}

static const struct dli_feature_ops dli_disable_gemm_ops = {
	.size = sizeof(struct dli_feature_ops),
	.create = dli_disable_gemm_create,
	.destroy = dli_disable_gemm_destroy,
	.fp8_gemm_enabled = dli_disable_gemm_fp8_gemm_enabled,
};

/* DisableQuantizationGEMM: TransformerEngine's name from 2.13 on (the same behaviour). */
static const char *const dli_disable_gemm_aliases[] = {"disable_fp8_gemm", "DisableQuantizationGEMM",
						       NULL};

static const struct dli_feature_desc dli_disable_gemm_feature = {
	.size = sizeof(struct dli_feature_desc),
	.name = "DisableFP8GEMM",
	.aliases = dli_disable_gemm_aliases,
	.doc = "Runs the selected GEMMs (gemms) in high precision instead of FP8.",
	.flags = DLI_FEATURE_GEMMS,
	.ops = &dli_disable_gemm_ops,
};
static const struct dli_feature_desc *const dli_disable_gemm_features_list[] = {&dli_disable_gemm_feature};

/* How `extensions: [transformer_engine]` finds this module without loading it. */
DLI_MODULE_NAMESPACE("transformer_engine");

static const struct dli_module dli_disable_gemm_module = {
	.size = sizeof(struct dli_module),
	.abi_major = DLI_ABI_MAJOR,
	.abi_minor = DLI_ABI_MINOR,
	.name = "disable_fp8_gemm",
	.ns = "transformer_engine",
	.doc = "TransformerEngine's DisableFP8GEMM: keeps chosen GEMMs out of FP8.",
	.features = dli_disable_gemm_features_list,
	.n_features = 1,
};

DLI_EXPORT const struct dli_module *DLI_MODULE_ENTRY(const struct dli_host *host)
{
	if (!host || host->abi_major != DLI_ABI_MAJOR)
		return NULL;
	return &dli_disable_gemm_module;
}
