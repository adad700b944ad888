/* LogTensorStats: statistics (min, max, std, ...) of the selected tensors, accumulated over a step's
 * inspect_tensor calls and written to the loggers at the scheduled steps as
 * `{layer}_{tensor}_{stat}`; with `histogram` listed, also the value histogram, to the loggers that
 * take histograms, as `{layer}_{tensor}_histogram`; with `max_blockwise_dynamic_range` listed
 * (TransformerEngine's, with block_size and dims), the largest dynamic range within a block. */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <dlinspect/plugin.h>

#include "feature-util.h"
#include "stats-skeleton.h"

#define BDR "max_blockwise_dynamic_range"

static const char *const dli_lts_stat_names[] = {DLI_SF_PLAIN_NAMES, "histogram",
						 BDR "{block_size,dims}", NULL};
/* One accumulator per tensor for the statistics' pass, slot 0; one more per distinct
 * max_blockwise_dynamic_range, slots 1 and up, fed the statistic's value of each call (its
 * record's max is the max over the step's calls, and across ranks). "stats" and "blockwise<slot>"
 * their roles in the reduction's key. */
static const struct dli_sf_recipe dli_lts_recipe = {.stats = DLI_SF_PLAIN};
static const char *const dli_lts_roles[DLI_SF_MAX_SLOTS] = {
    "stats", "blockwise1", "blockwise2", "blockwise3",
    "blockwise4", "blockwise5", "blockwise6", "blockwise7"};

struct dli_lts {
	struct dli_sf sf; /* first: the skeleton's methods take the instance */
	struct {
		int64_t block_size;
		int dims;
	} blocks[DLI_SF_MAX_SLOTS]; /* slot s >= 1: its max_blockwise_dynamic_range */
};

/* `max_blockwise_dynamic_range{block_size=B,dims=D}` as the core hands it over (either key may be
 * absent: TransformerEngine's defaults 32 and 1) into a slot of its own, logged as TransformerEngine
 * names it. */
static int want_blockwise(struct dli_lts *self, const char *text, struct dli_error *err)
{
	int64_t block_size = 32, dims = 1;
	const char *at = text + strlen(BDR "{");

	while (*at && *at != '}') {
		int64_t *dst = !strncmp(at, "block_size=", 11) ? &block_size
			       : !strncmp(at, "dims=", 5)      ? &dims
							       : NULL;
		char *end;
		if (!dst)
			break;
		*dst = strtoll(strchr(at, '=') + 1, &end, 10);
		at = *end == ',' ? end + 1 : end;
	}
	if (*at != '}') {
		snprintf(err->message, sizeof(err->message), "stats: cannot read '%s'", text);
		return -EINVAL;
	}
	if (block_size < 1 || dims < 1 || dims > 2) {
		snprintf(err->message, sizeof(err->message),
			 "stats: " BDR ": %s must be %s, got %" PRId64,
			 block_size < 1 ? "block_size" : "dims",
			 block_size < 1 ? "a positive integer" : "1 or 2",
			 block_size < 1 ? block_size : dims);
		return -EINVAL;
	}
	unsigned slot = 1;
	while (slot < DLI_SF_MAX_SLOTS && self->blocks[slot].block_size &&
	       (self->blocks[slot].block_size != block_size || self->blocks[slot].dims != dims))
		slot++;
	if (slot == DLI_SF_MAX_SLOTS) {
		snprintf(err->message, sizeof(err->message),
			 "stats: at most %d different " BDR " (block_size, dims) in one feature",
			 DLI_SF_MAX_SLOTS - 1);
		return -EINVAL;
	}
	self->blocks[slot].block_size = block_size;
	self->blocks[slot].dims = (int)dims;
	char name[96];
	snprintf(name, sizeof name, BDR "_block_size_%" PRId64 "_dims_%d", block_size, (int)dims);
	return dli_sf_want_as(&self->sf, DLI_STAT_MAX, slot, name, true, err);
}

static int dli_lts_create(const struct dli_feature_create_args *args, void **instance,
			  struct dli_error *err)
{
	const struct dli_host *host = args->host;
	const struct dli_value *stats = &args->params[0];
	int r;
	struct dli_lts *self = dli_sf_create(args, sizeof(*self), err, &r);

	if (!self)
		return r;
	/* The config checked every name against the choices. */
	for (size_t i = 0; i < stats->u.list.n && !r; i++) {
		const char *name = stats->u.list.items[i];
		if (!strcmp(name, "histogram"))
			self->sf.histogram = true;
		else if (!strncmp(name, BDR "{", strlen(BDR "{")))
			r = want_blockwise(self, name, err);
		else
			r = dli_sf_want(&self->sf, name, &dli_lts_recipe, 1, err);
	}
	if (!r && self->sf.histogram) {
		self->sf.slots |= 1u; /* the accumulator is fed even when only `histogram` is listed */
		if (!DLI_HAS_MEMBER(host, struct dli_host, stats_acc_read_histogram) ||
		    !host->stats_acc_histogram || !host->stats_acc_read_histogram) {
			snprintf(err->message, sizeof(err->message),
				 "this dlinspect has no histograms (stats: histogram needs a newer host)");
			r = -ENOTSUP;
		}
	}
	if (!r && self->sf.slots >> 1 && !DLI_HAS_MEMBER(host, struct dli_host, block_dynamic_range)) {
		snprintf(err->message, sizeof(err->message),
			 "this dlinspect has no " BDR " (it needs ABI 1.5)");
		r = -ENOTSUP;
	}
	if (!r)
		r = dli_sf_reduce_read(&self->sf, args->params, 1, args->where, dli_lts_roles);
	if (r) {
		dli_sf_destroy(self);
		return r;
	}
	*instance = self;
	return 0;
}

/* Slot `slot`'s max_blockwise_dynamic_range of hp: of both orientations (the larger) for the
 * activation and the weight, as TransformerEngine does; fed to the slot's accumulator as a
 * one-element tensor. A CUDA tensor is said once per (layer, tensor) and left out. */
static int add_blockwise(const struct dli_feature_call *c, struct dli_sf_tensor *t, unsigned slot,
			 const struct dli_tensor *hp)
{
	const struct dli_lts *self = c->instance;
	const struct dli_host *host = self->sf.host;
	const char *tensor = host->tensor_name(c->ctx, t->id);
	bool both = tensor && (!strcmp(tensor, "activation") || !strcmp(tensor, "weight")) &&
		    self->blocks[slot].dims == 1;
	double v, w;
	int r = host->block_dynamic_range(hp, self->blocks[slot].block_size,
					  self->blocks[slot].dims, false, &v);
	if (!r && both && !(r = host->block_dynamic_range(hp, self->blocks[slot].block_size, 1,
							   true, &w)))
		v = isnan(v) || isnan(w) ? NAN : (w > v ? w : v);
	/* An empty tensor has no blocks, but it was fed: the slot logs what the other ranks' shards
	 * give it, as slot 0 does (a rank's own empty step logs nothing either way). */
	if (r == -ENODATA)
		return dli_sf_added(t, slot, 0);
	if (r == -ENOTSUP) {
		if (!atomic_exchange(&t->warned, true))
			host->log(c->ctx, DLI_LOG_WARNING,
				  "LogTensorStats: %s of %s %s is not logged: it reads host memory "
				  "only, and this tensor is on a device",
				  BDR, c->layer_name, tensor ? tensor : "?");
		return 0;
	}
	if (r)
		return dli_feature_fail(host, c->ctx, r,
					BDR " reads contiguous f32, f16, bf16, f8e4m3 or f8e5m2 tensors "
					"(dtype code %d given)", (int)hp->dtype);
	float value = (float)v;
	struct dli_tensor one = {.data = &value, .dtype = DLI_DTYPE_F32, .ndim = 1,
				 .shape = {1}, .contiguous = true,
				 .device = {.type = DLI_DEVICE_CPU}};
	return dli_sf_added(t, slot, host->stats_add(t->acc[slot], &one, NULL));
}

/* Everything but the passes themselves is the skeleton's (stats-skeleton.h). */
static int dli_lts_inspect_tensor(const struct dli_feature_call *c, int tensor,
				  const struct dli_tensor *hp, const struct dli_quantized_tensor *rowwise,
				  const struct dli_quantized_tensor *colwise)
{
	const struct dli_lts *self = c->instance;
	struct dli_sf_tensor *t = dli_sf_tensor(c, tensor);
	int r = 0;

	(void)rowwise;
	(void)colwise;
	if (!t)
		return 0;
	if (!hp)
		return -EINVAL;
	if (dli_sf_weight_seen(c, t))
		return 0;
	if (self->sf.slots & 1u)
		r = dli_sf_added(t, 0, self->sf.host->stats_add(t->acc[0], hp, NULL));
	for (unsigned s = 1; s < DLI_SF_MAX_SLOTS && !r; s++)
		if (self->sf.slots >> s & 1u)
			r = add_blockwise(c, t, s, hp);
	return dli_sf_weight_done(t, r);
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
		"that take histograms, e.g. tensorboard); max_blockwise_dynamic_range (the largest "
		"dynamic range within a block; block_size, default 32, and dims, 1 or 2, default 1, "
		"as `- max_blockwise_dynamic_range: {block_size: 32, dims: 1}`)",
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
	.flags = DLI_FEATURE_TENSORS | DLI_FEATURE_SCHEDULED |
		 DLI_FEATURE_STRIDED, /* reads tensors through the host calls only */
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
