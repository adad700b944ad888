/* LogTensorStats: statistics (min, max, std, ...) of the selected tensors, accumulated over a step's
 * inspect_tensor calls and written to the loggers at the scheduled steps as
 * `{layer}_{tensor}_{stat}`; with `histogram` listed, also the value histogram, to the loggers that
 * take histograms, as `{layer}_{tensor}_histogram`. */
#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <dlinspect/plugin.h>

#include "feature-reduce.h"
#include "feature-util.h"

/* The instance: one config block (or tensors_struct entry). Config memory is gone after create,
 * so the schedule's ranges are copied and the stat names turned into ids. */
struct dli_lts {
	const struct dli_host *host;
	struct dli_context *ctx;
	struct dli_schedule schedule;
	uint64_t tensors;
	enum dli_stat stats[DLI_STAT_COUNT];
	size_t n_stats;
	bool histogram; /* `histogram` listed: the accumulators keep one */
	struct dli_reduce_conf reduce; /* across ranks (feature-reduce.h) */
};

/* Per (layer, tensor): the accumulator of the current step. */
struct dli_lts_tensor {
	int id;
	struct dli_stats_acc *acc;
	atomic_bool added;
	_Atomic int64_t weight_step; /* the step the weight was last added in */
};

struct dli_lts_layer {
	size_t n;
	struct dli_lts_tensor t[];
};

static const char *const dli_lts_stat_names[] = {
	"min", "max", "mean", "std", "var", "l1_norm", "l2_norm", "cur_amax", "dynamic_range",
	"nan_count", "inf_count", "zero%", "histogram", NULL,
};

static int dli_lts_create(const struct dli_feature_create_args *args, void **instance,
			  struct dli_error *err)
{
	const struct dli_host *host = args->host;
	const struct dli_value *stats = &args->params[0];
	struct dli_lts *self;

	/* A host may lack the statistics calls (a test's stand-in table): refuse to make an
	 * instance there rather than crash at the first tensor. */
	if (!DLI_HAS_MEMBER(args->host, struct dli_host, fp8_scale) || !args->host->stats_add) {
		snprintf(err->message, sizeof(err->message), "the host has no statistics calls");
		return -ENOTSUP;
	}
	if (!(self = calloc(1, sizeof(*self))))
		return -ENOMEM;
	self->host = host;
	self->ctx = args->ctx;
	self->tensors = args->tensors;
	if (dli_feature_schedule_copy(&self->schedule, args->schedule)) {
		free(self);
		return -ENOMEM;
	}
	/* The config checked every name against the choices: host stat names, and `histogram`. */
	size_t n_hist = 0;
	for (size_t i = 0; i < stats->u.list.n; i++) {
		if (!strcmp(stats->u.list.items[i], "histogram")) {
			n_hist++;
			continue;
		}
		for (int s = 0; s < DLI_STAT_COUNT && self->n_stats < DLI_STAT_COUNT; s++)
			if (!strcmp(stats->u.list.items[i], host->stat_name((enum dli_stat)s)))
				self->stats[self->n_stats++] = (enum dli_stat)s;
	}
	self->histogram = n_hist > 0;
	if (self->histogram && (!DLI_HAS_MEMBER(host, struct dli_host, stats_acc_read_histogram) ||
				!host->stats_acc_histogram || !host->stats_acc_read_histogram)) {
		free((void *)self->schedule.ranges);
		free(self);
		snprintf(err->message, sizeof(err->message),
			 "this dlinspect has no histograms (stats: histogram needs a newer host)");
		return -ENOTSUP;
	}
	if (self->n_stats + n_hist != stats->u.list.n) {
		free((void *)self->schedule.ranges);
		free(self);
		snprintf(err->message, sizeof(err->message), "this dlinspect lacks a listed statistic");
		return -EINVAL;
	}
	if (dli_reduce_conf_read(&self->reduce, args->params, 1, args->where)) {
		free((void *)self->schedule.ranges);
		free(self);
		return -ENOMEM;
	}
	*instance = self;
	return 0;
}

static void dli_lts_destroy(void *instance)
{
	struct dli_lts *self = instance;

	if (self) {
		free((void *)self->schedule.ranges);
		dli_reduce_conf_free(&self->reduce);
	}
	free(self);
}

static void dli_lts_layer_detach(void *instance, void *layer_state)
{
	const struct dli_lts *self = instance;
	struct dli_lts_layer *l = layer_state;

	for (size_t i = 0; l && i < l->n; i++)
		self->host->stats_acc_destroy(l->t[i].acc);
	free(l);
}

static int dli_lts_layer_attach(void *instance, const char *layer_name, void **layer_state)
{
	const struct dli_lts *self = instance;
	size_t n = (size_t)__builtin_popcountll(self->tensors), k = 0;
	struct dli_lts_layer *l = calloc(1, sizeof(*l) + n * sizeof(l->t[0]));

	if (!l)
		return -ENOMEM;
	for (int id = 0; id < 64; id++) {
		if (!(self->tensors >> id & 1u))
			continue;
		l->t[k].id = id;
		atomic_init(&l->t[k].weight_step, -1);
		l->n = ++k;
		if (!(l->t[k - 1].acc = self->host->stats_acc_create(self->ctx)) ||
		    (self->histogram && self->host->stats_acc_histogram(l->t[k - 1].acc, true))) {
			dli_lts_layer_detach(instance, l);
			return -ENOMEM;
		}
		dli_reduce_share(self->host, self->ctx, &self->reduce, l->t[k - 1].acc, layer_name, id,
				 "stats", &self->schedule);
	}
	*layer_state = l;
	return 0;
}

static bool dli_lts_inspect_tensor_enabled(const struct dli_feature_call *c, int tensor,
					   int64_t iteration, int64_t *next)
{
	const struct dli_lts *self = c->instance;

	return self->host->schedule_query(&self->schedule, iteration, next);
}

static int dli_lts_inspect_tensor(const struct dli_feature_call *c, int tensor,
				  const struct dli_tensor *hp, const struct dli_quantized_tensor *rowwise,
				  const struct dli_quantized_tensor *colwise)
{
	const struct dli_lts *self = c->instance;
	struct dli_lts_layer *l = c->layer_state;
	struct dli_lts_tensor *t = NULL;

	for (size_t i = 0; i < l->n && !t; i++)
		if (l->t[i].id == tensor)
			t = &l->t[i];
	if (!t)
		return 0;
	if (!hp)
		return -EINVAL;
	/* Microbatches merge, but the weight is the same tensor in each of them: count it once. */
	if (tensor == DLI_TENSOR_WEIGHT) {
		int64_t step = self->host->iteration(c->ctx);
		if (atomic_exchange(&t->weight_step, step) == step)
			return 0;
	}
	int r = self->host->stats_add(t->acc, hp, NULL);
	if (r == 0)
		atomic_store(&t->added, true);
	return r;
}

static void dli_lts_step_end(const struct dli_feature_call *c, int64_t iteration)
{
	const struct dli_lts *self = c->instance;
	const struct dli_host *host = self->host;
	struct dli_lts_layer *l = c->layer_state;
	bool active = host->schedule_active(&self->schedule, iteration);

	for (size_t i = 0; i < l->n; i++) {
		struct dli_lts_tensor *t = &l->t[i];
		if (!atomic_exchange(&t->added, false))
			continue;
		/* Only empty tensors added: no statistics, rather than a line of NaNs. */
		struct dli_stats_record rec;
		if (active && host->stats_acc_read(t->acc, &rec) == 0 && rec.count) {
			const char *tensor = host->tensor_name(c->ctx, t->id);
			/* A failed reduction: this rank's shards only, under names that say so. */
			char mark[32] = "";
			if (dli_reduce_failed(host, t->acc))
				snprintf(mark, sizeof(mark), "_rank%d", host->rank(c->ctx));
			for (size_t k = 0; k < self->n_stats; k++) {
				struct dli_feature_tag tag;
				const char *name = dli_feature_tag(&tag, "%s_%s_%s%s", c->layer_name,
								   tensor, host->stat_name(self->stats[k]),
								   mark);
				if (name)
					host->emit_scalar(c->ctx, name, iteration,
							  host->stats_value(&rec, self->stats[k]));
				dli_feature_tag_free(&tag);
			}
			/* -ENOTSUP (CUDA tensors) was reported by the host; an all-NaN step has no
			 * values to show. */
			struct dli_histogram h;
			if (self->histogram && host->stats_acc_read_histogram(t->acc, &h) == 0 &&
			    h.num > 0) {
				struct dli_feature_tag tag;
				const char *name = dli_feature_tag(&tag, "%s_%s_histogram%s",
								   c->layer_name, tensor, mark);
				if (name)
					host->emit_histogram(c->ctx, name, iteration, &h);
				dli_feature_tag_free(&tag);
			}
		}
		host->stats_acc_reset(t->acc);
	}
}

static const struct dli_feature_ops dli_lts_ops = {
	.size = sizeof(struct dli_feature_ops),
	.create = dli_lts_create,
	.destroy = dli_lts_destroy,
	.layer_attach = dli_lts_layer_attach,
	.layer_detach = dli_lts_layer_detach,
	.inspect_tensor_enabled = dli_lts_inspect_tensor_enabled,
	.inspect_tensor = dli_lts_inspect_tensor,
	.step_end = dli_lts_step_end,
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
