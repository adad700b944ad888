/* TestDummyFeature: TransformerEngine's feature for its own tests, which asks to inspect every
 * selected tensor and does nothing with it (so a layer stays on its debug path). Here so that the
 * peer's test configs load; it has no use in training. */
#include <errno.h>
#include <stdlib.h>

#include <dlinspect/plugin.h>

static int dli_dummy_create(const struct dli_feature_create_args *args, void **instance,
			    struct dli_error *err)
{
	bool *once = malloc(sizeof(*once));

	(void)err;
	if (!once)
		return -ENOMEM;
	*once = args->params[0].u.b;
	*instance = once;
	return 0;
}

static void dli_dummy_destroy(void *instance)
{
	free(instance);
}

/* inspect_only_once: answer "no, never again", as the peer's (False, None); else always yes. */
static bool dli_dummy_inspect_tensor_enabled(const struct dli_feature_call *c, int tensor,
					     int64_t iteration, int64_t *next)
{
	const bool *once = c->instance;

	(void)tensor;
	*next = *once ? DLI_NEVER : iteration + 1;
	return !*once;
}

static int dli_dummy_inspect_tensor(const struct dli_feature_call *c, int tensor,
				    const struct dli_tensor *hp,
				    const struct dli_quantized_tensor *rowwise,
				    const struct dli_quantized_tensor *colwise)
{
	(void)c, (void)tensor, (void)hp, (void)rowwise, (void)colwise;
	return 0;
}

static const struct dli_feature_ops dli_dummy_ops = {
	.size = sizeof(struct dli_feature_ops),
	.create = dli_dummy_create,
	.destroy = dli_dummy_destroy,
	.inspect_tensor_enabled = dli_dummy_inspect_tensor_enabled,
	.inspect_tensor = dli_dummy_inspect_tensor,
};

static const struct dli_param_desc dli_dummy_params[] = {
	{.key = "inspect_only_once", .type = DLI_PARAM_BOOL, .default_value = "false",
	 .doc = "true: inspect_tensor_enabled answers no, for good, at the first call"},
};

static const struct dli_feature_desc dli_dummy_feature = {
	.size = sizeof(struct dli_feature_desc),
	.name = "TestDummyFeature",
	.doc = "TransformerEngine's test feature: inspects the selected tensors and does nothing.",
	.flags = DLI_FEATURE_GEMMS | DLI_FEATURE_TENSORS,
	.params = dli_dummy_params,
	.n_params = 1,
	.param_size = DLI_PARAM_SIZE,
	.ops = &dli_dummy_ops,
};
static const struct dli_feature_desc *const dli_dummy_features[] = {&dli_dummy_feature};

/* How `extensions: [transformer_engine]` finds this module without loading it. */
DLI_MODULE_NAMESPACE("transformer_engine");

static const struct dli_module dli_dummy_module = {
	.size = sizeof(struct dli_module),
	.abi_major = DLI_ABI_MAJOR,
	.abi_minor = DLI_ABI_MINOR,
	.name = "test_dummy_feature",
	.ns = "transformer_engine",
	.doc = "TransformerEngine's TestDummyFeature, for the peer's test configs.",
	.features = dli_dummy_features,
	.n_features = 1,
};

DLI_EXPORT const struct dli_module *DLI_MODULE_ENTRY(const struct dli_host *host)
{
	if (!host || host->abi_major != DLI_ABI_MAJOR)
		return NULL;
	return &dli_dummy_module;
}
