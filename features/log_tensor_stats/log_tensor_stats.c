/* LogTensorStats: statistics (min, max, std, ...) of the selected tensors, accumulated over a step's
 * inspect_tensor calls and written to the loggers at the scheduled steps as
 * `{layer}_{tensor}_{stat}`; with `histogram` listed, also the value histogram, to the loggers that
 * take histograms, as `{layer}_{tensor}_histogram`. */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include <dlinspect/plugin.h>

#include "stats-skeleton.h"

static const char *const dli_lts_stat_names[] = {DLI_SF_PLAIN_NAMES, "histogram", NULL};
/* One accumulator per tensor; "stats" its role in the reduction's key. */
static const struct dli_sf_recipe dli_lts_recipe = {.stats = DLI_SF_PLAIN};
static const char *const dli_lts_roles[] = {"stats"};

static int dli_lts_create(const struct dli_feature_create_args *args, void **instance,
			  struct dli_error *err)
{
	const struct dli_host *host = args->host;
	const struct dli_value *stats = &args->params[0];
	int r;
	struct dli_sf *self = dli_sf_create(args, sizeof(*self), err, &r);

	if (!self)
		return r;
	self->slots = 1u; /* the accumulator is fed even when only `histogram` is listed */
	/* The config checked every name against the choices. */
	for (size_t i = 0; i < stats->u.list.n && !r; i++)
		if (!strcmp(stats->u.list.items[i], "histogram"))
			self->histogram = true;
		else
			r = dli_sf_want(self, stats->u.list.items[i], &dli_lts_recipe, 1, err);
	if (!r && self->histogram &&
	    (!DLI_HAS_MEMBER(host, struct dli_host, stats_acc_read_histogram) ||
	     !host->stats_acc_histogram || !host->stats_acc_read_histogram)) {
		snprintf(err->message, sizeof(err->message),
			 "this dlinspect has no histograms (stats: histogram needs a newer host)");
		r = -ENOTSUP;
	}
	if (!r)
		r = dli_sf_reduce_read(self, args->params, 1, args->where, dli_lts_roles);
	if (r) {
		dli_sf_destroy(self);
		return r;
	}
	*instance = self;
	return 0;
}

/* Everything but the pass itself is the skeleton's (stats-skeleton.h). */
static int dli_lts_inspect_tensor(const struct dli_feature_call *c, int tensor,
				  const struct dli_tensor *hp, const struct dli_quantized_tensor *rowwise,
				  const struct dli_quantized_tensor *colwise)
{
	const struct dli_sf *self = c->instance;
	struct dli_sf_tensor *t = dli_sf_tensor(c, tensor);

	if (!t)
		return 0;
	if (!hp)
		return -EINVAL;
	if (dli_sf_weight_seen(c, t))
		return 0;
	return dli_sf_added(t, 0, self->host->stats_add(t->acc[0], hp, NULL));
}

static const struct dli_feature_ops dli_lts_ops = {
	.size = sizeof(struct dli_feature_ops),
	.create = dli_lts_create,
	.destroy = dli_sf_destroy,
	.layer_attach = dli_sf_layer_attach,
	.layer_detach = dli_sf_layer_detach,
	.inspect_tensor_enabled = dli_sf_inspect_tensor_enabled,
	.inspect_tensor = dli_lts_inspect_tensor,
	.step_end = dli_sf_step_end,
};

static const struct dli_param_desc dli_lts_params[] = {
	{.key = "stats", .alias = "type", .type = DLI_PARAM_STRING_LIST,
	 .doc = "statistics to log: min, max, mean, std, var, l1_norm, l2_norm, cur_amax, "
		"dynamic_range, nan_count, inf_count, zero%; histogram (the value histogram, to loggers "
		"that take histograms, e.g. tensorboard)",
	 .choices = dli_lts_stat_names, .required = true},
	DLI_REDUCE_PARAMS,
};

static const char *const dli_lts_aliases[] = {"collect_tensor_stats", NULL};

static const struct dli_feature_desc dli_lts_feature = {
	.size = sizeof(struct dli_feature_desc),
	.name = "LogTensorStats",
	.aliases = dli_lts_aliases,
	.doc = "Logs statistics of the selected tensors at the scheduled steps.",
	/* Not generic: directly in a section, LogTensorStats is the base namespace's. */
	.flags = DLI_FEATURE_TENSORS | DLI_FEATURE_SCHEDULED,
	.params = dli_lts_params,
	.n_params = sizeof(dli_lts_params) / sizeof(dli_lts_params[0]),
	.param_size = DLI_PARAM_SIZE,
	.ops = &dli_lts_ops,
};
static const struct dli_feature_desc *const dli_lts_features[] = {&dli_lts_feature};

/* How `extensions: [transformer_engine]` finds this module without loading it. */
DLI_MODULE_NAMESPACE("transformer_engine");

static const struct dli_module dli_lts_module = {
	.size = sizeof(struct dli_module),
	.abi_major = DLI_ABI_MAJOR,
	.abi_minor = DLI_ABI_MINOR,
	.name = "log_tensor_stats",
	.ns = "transformer_engine",
	.doc = "TransformerEngine's LogTensorStats: per-tensor statistics at scheduled steps.",
	.features = dli_lts_features,
	.n_features = 1,
};

DLI_EXPORT const struct dli_module *DLI_MODULE_ENTRY(const struct dli_host *host)
{
	if (!host || host->abi_major != DLI_ABI_MAJOR)
		return NULL;
	return &dli_lts_module;
}
