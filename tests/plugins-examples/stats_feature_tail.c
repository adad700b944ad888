/* What docs/plugins.md's statistics feature leaves out, appended to the page's code block by
 * test_plugins_examples.sh: the descriptor it describes in words ("its descriptor gives `stats`
 * ... and the flags DLI_FEATURE_TENSORS | DLI_FEATURE_SCHEDULED"), the module and the entry. */
static const struct dli_param_desc my_params[] = {
	{.key = "stats", .type = DLI_PARAM_STRING_LIST, .choices = my_names, .required = true,
	 .doc = "the statistics to log"},
};

static const struct dli_feature_desc my_feature = {
	.size = sizeof(struct dli_feature_desc),
	.name = "MyStats",
	.doc = "docs/plugins.md's minimal statistics feature",
	.flags = DLI_FEATURE_TENSORS | DLI_FEATURE_SCHEDULED,
	.params = my_params,
	.n_params = 1,
	.param_size = DLI_PARAM_SIZE,
	.ops = &my_ops,
};
static const struct dli_feature_desc *const my_features[] = {&my_feature};

static const struct dli_module my_module = {
	.size = sizeof(struct dli_module),
	.abi_major = DLI_ABI_MAJOR,
	.abi_minor = DLI_ABI_MINOR,
	.name = "my_stats",
	.features = my_features,
	.n_features = 1,
};

DLI_EXPORT const struct dli_module *DLI_MODULE_ENTRY(const struct dli_host *host)
{
	return host && host->abi_major == DLI_ABI_MAJOR ? &my_module : NULL;
}
