/* The keys every feature shares: core/feature-keys-private.h. */
#include <string.h>

#include <dlinspect/plugin.h>

#include "feature-keys-private.h"

const struct dli_shared_key dli_shared_keys[DLI_KEY_COUNT] = {
	[DLI_KEY_ENABLED] = {"enabled", 0, false, false, "bool", "required",
			     "turns the feature on or off", NULL},
	[DLI_KEY_GEMMS] = {"gemms", DLI_FEATURE_GEMMS, false, true, "list of strings", "required",
			   "fprop, dgrad, wgrad (or gemms_struct: [{gemm: ..., <overrides>}])",
			   "this feature does not act per GEMM"},
	[DLI_KEY_GEMMS_STRUCT] = {"gemms_struct", DLI_FEATURE_GEMMS, false, false, NULL, NULL, NULL,
				  "this feature does not act per GEMM"},
	[DLI_KEY_TENSORS] = {"tensors", DLI_FEATURE_TENSORS, true, false, "list of strings",
			     "required",
			     "activation, gradient, weight, output, wgrad, dgrad or a host's own "
			     "(or tensors_struct)",
			     "this feature does not act per tensor"},
	[DLI_KEY_TENSORS_STRUCT] = {"tensors_struct", DLI_FEATURE_TENSORS, true, false, NULL, NULL,
				    NULL, "this feature does not act per tensor"},
	[DLI_KEY_FREQ] = {"freq", DLI_FEATURE_SCHEDULED, true, true, "int", "default 1",
			  "log when step % freq == 0", "this feature is not scheduled"},
	[DLI_KEY_START_STEP] = {"start_step", DLI_FEATURE_SCHEDULED, true, true, "int", "default 0",
				"first step", "this feature is not scheduled"},
	[DLI_KEY_END_STEP] = {"end_step", DLI_FEATURE_SCHEDULED, true, true, "int", "default -",
			      "last step, inclusive (absent: no end)", "this feature is not scheduled"},
	[DLI_KEY_START_END_LIST] = {"start_end_list", DLI_FEATURE_SCHEDULED, true, true,
				    "list of [start, end]", "default -",
				    "inclusive [start, end] ranges replacing start/end",
				    "this feature is not scheduled"},
	[DLI_KEY_IN_EVAL] = {"in_eval", DLI_FEATURE_MODIFIES, true, true, "bool", "default false",
			     "act in evaluation passes too (dli_mode_set)", NULL},
};

const struct dli_shared_key *dli_shared_key_find(const char *key)
{
	for (size_t i = 0; key && i < DLI_KEY_COUNT; i++)
		if (!strcmp(key, dli_shared_keys[i].key))
			return &dli_shared_keys[i];
	return NULL;
}

bool dli_shared_key_applies(const struct dli_shared_key *k, uint32_t flags, const char *entry_key)
{
	if (k->flag && !(flags & k->flag))
		return false;
	if (!entry_key)
		return true;
	return !strcmp(entry_key, "gemm") ? k->in_gemm_entry : k->in_tensor_entry;
}
