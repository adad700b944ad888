/* LogNvfp4TensorStats: how much NVFP4 quantization (TransformerEngine's NVFP4BlockScaling recipe)
 * loses on the selected tensors, as a what-if from the high-precision tensor: underflows% and mse
 * of its row-wise NVFP4 copy (16 x 16 tiles for weights, 1 x 16 blocks otherwise, as the recipe's
 * defaults quantize them). Logged at the scheduled steps as `{layer}_{tensor}_nvfp4_{stat}`,
 * TransformerEngine's names. The rules are docs/block-scaling.md's ("NVFP4"). */
#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <dlinspect/plugin.h>

#include "feature-util.h"

/* TransformerEngine's stats for NVFP4 (check_if_stat_is_supported of its LogNvfp4TensorStats). */
static const char *const dli_lns_names[] = {"underflows%", "mse", NULL};
static const enum dli_stat dli_lns_stats[] = {DLI_STAT_UNDERFLOWS_PCT, DLI_STAT_MSE};
#define DLI_LNS_N 2

enum { DLI_LNS_STATS };

struct dli_lns {
	const struct dli_host *host;
	struct dli_context *ctx;
	struct dli_schedule schedule; /* ranges copied: config memory is gone after create */
	uint64_t tensors;
	int names[DLI_LNS_N]; /* indexes in dli_lns_names, in config order */
	size_t n_names;
};

struct dli_lns_tensor {
	int id;
	struct dli_stats_acc *acc;
	atomic_bool added;
	_Atomic int64_t weight_step;
};

struct dli_lns_layer {
	size_t n;
	struct dli_lns_tensor t[];
};

static int dli_lns_create(const struct dli_feature_create_args *args, void **instance,
			  struct dli_error *err)
{
	const struct dli_value *p = args->params;
	struct dli_lns *self;

	if (!DLI_HAS_MEMBER(args->host, struct dli_host, stats_add_block) ||
	    !args->host->stats_add_block) {
		snprintf(err->message, sizeof(err->message),
			 "LogNvfp4TensorStats needs a host with the block-scaled passes "
			 "(stats_add_block, ABI 1.2); this host is older");
		return -ENOTSUP;
	}
	if (!(self = calloc(1, sizeof(*self))))
		return -ENOMEM;
	self->host = args->host;
	self->ctx = args->ctx;
	self->tensors = args->tensors;
	for (size_t i = 0; p[DLI_LNS_STATS].set && i < p[DLI_LNS_STATS].u.list.n; i++) {
		const char *stat = p[DLI_LNS_STATS].u.list.items[i];
		for (int k = 0; k < DLI_LNS_N; k++) {
			bool seen = false;
			if (strcmp(stat, dli_lns_names[k]))
				continue;
			for (size_t j = 0; j < self->n_names; j++)
				seen = seen || self->names[j] == k;
			if (!seen)
				self->names[self->n_names++] = k;
		}
	}
	if (!self->n_names) {
		free(self);
		snprintf(err->message, sizeof(err->message),
			 "no statistic to log: give 'stats' ([underflows%%, mse])");
		return -EINVAL;
	}
	if (dli_feature_schedule_copy(&self->schedule, args->schedule)) {
		free(self);
		return -ENOMEM;
	}
	*instance = self;
	return 0;
}

static void dli_lns_destroy(void *instance)
{
	struct dli_lns *self = instance;

	if (self)
		free((void *)self->schedule.ranges);
	free(self);
}

static void dli_lns_layer_detach(void *instance, void *layer_state)
{
	const struct dli_lns *self = instance;
	struct dli_lns_layer *l = layer_state;

	for (size_t i = 0; l && i < l->n; i++)
		self->host->stats_acc_destroy(l->t[i].acc);
	free(l);
}

static int dli_lns_layer_attach(void *instance, const char *layer_name, void **layer_state)
{
	const struct dli_lns *self = instance;
	size_t n = (size_t)__builtin_popcountll(self->tensors), k = 0;
	struct dli_lns_layer *l = calloc(1, sizeof(*l) + n * sizeof(l->t[0]));

	(void)layer_name;
	if (!l)
		return -ENOMEM;
	for (int id = 0; id < 64; id++) {
		if (!(self->tensors >> id & 1u))
			continue;
		struct dli_lns_tensor *t = &l->t[k];
		t->id = id;
		atomic_init(&t->weight_step, -1);
		l->n = ++k;
		if (!(t->acc = self->host->stats_acc_create(self->ctx))) {
			dli_lns_layer_detach(instance, l);
			return -ENOMEM;
		}
	}
	*layer_state = l;
	return 0;
}

static bool dli_lns_inspect_tensor_enabled(const struct dli_feature_call *c, int tensor,
					   int64_t iteration, int64_t *next)
{
	const struct dli_lns *self = c->instance;

	(void)tensor;
	return self->host->schedule_query(&self->schedule, iteration, next);
}

static int dli_lns_inspect_tensor(const struct dli_feature_call *c, int tensor,
				  const struct dli_tensor *hp, const struct dli_quantized_tensor *rowwise,
				  const struct dli_quantized_tensor *colwise)
{
	const struct dli_lns *self = c->instance;
	const struct dli_host *host = self->host;
	struct dli_lns_layer *l = c->layer_state;
	struct dli_lns_tensor *t = NULL;
	int r;

	(void)rowwise;
	(void)colwise;
	for (size_t i = 0; i < l->n && !t; i++)
		if (l->t[i].id == tensor)
			t = &l->t[i];
	if (!t || !hp)
		return 0;
	if (tensor == DLI_TENSOR_WEIGHT) { /* the same weight in every microbatch: count it once */
		int64_t step = host->iteration(c->ctx);
		if (atomic_exchange(&t->weight_step, step) == step)
			return 0;
	}
	/* NVFP4BlockScaling's defaults: 16 x 16 tiles for weights, 1 x 16 blocks for the rest. */
	struct dli_block_spec spec = {.size = sizeof(spec),
				      .recipe = tensor == DLI_TENSOR_WEIGHT ? DLI_BLOCK_NVFP4_2D
									    : DLI_BLOCK_NVFP4};
	if ((r = host->stats_add_block(t->acc, hp, &spec)) == 0)
		atomic_store(&t->added, true);
	return r;
}

static void dli_lns_step_end(const struct dli_feature_call *c, int64_t iteration)
{
	const struct dli_lns *self = c->instance;
	const struct dli_host *host = self->host;
	struct dli_lns_layer *l = c->layer_state;
	bool active = host->schedule_active(&self->schedule, iteration);

	for (size_t i = 0; i < l->n; i++) {
		struct dli_lns_tensor *t = &l->t[i];
		struct dli_stats_record rec;
		bool added = atomic_exchange(&t->added, false);

		/* Nothing seen this step (or only empty tensors): nothing logged rather than NaN. */
		if (active && added && host->stats_acc_read(t->acc, &rec) == 0 && rec.count > 0)
			for (size_t k = 0; k < self->n_names; k++) {
				char name[512];
				snprintf(name, sizeof(name), "%s_%s_nvfp4_%s", c->layer_name,
					 host->tensor_name(c->ctx, t->id), dli_lns_names[self->names[k]]);
				host->emit_scalar(c->ctx, name, iteration,
						  host->stats_value(&rec, dli_lns_stats[self->names[k]]));
			}
		if (added)
			host->stats_acc_reset(t->acc);
	}
}

static const struct dli_feature_ops dli_lns_ops = {
	.size = sizeof(struct dli_feature_ops),
	.create = dli_lns_create,
	.destroy = dli_lns_destroy,
	.layer_attach = dli_lns_layer_attach,
	.layer_detach = dli_lns_layer_detach,
	.inspect_tensor_enabled = dli_lns_inspect_tensor_enabled,
	.inspect_tensor = dli_lns_inspect_tensor,
	.step_end = dli_lns_step_end,
};

static const struct dli_param_desc dli_lns_params[] = {
	[DLI_LNS_STATS] = {.key = "stats", .type = DLI_PARAM_STRING_LIST,
			   .doc = "underflows% (nonzero values whose E2M1 code is +-0, in % of the "
				  "elements) and mse of the tensor's row-wise NVFP4 copy, quantized "
				  "here from the high-precision tensor (16 x 16 tiles for weights, "
				  "1 x 16 blocks otherwise); logged as nvfp4_<stat>",
			   .choices = dli_lns_names},
};

static const struct dli_feature_desc dli_lns_feature = {
	.size = sizeof(struct dli_feature_desc),
	.name = "LogNvfp4TensorStats",
	.doc = "Logs NVFP4 quantization error stats (what-if from the high-precision tensor) of the "
	       "selected tensors at the scheduled steps.",
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
