/* The base namespace's LogTensorStats (nvdlfw_inspect's generic one): statistics of a tensor the host
 * hands over through the generic call "log_tensor_stats", logged at once as `{layer}_{tensor}_{stat}`.
 * TransformerEngine's LogTensorStats (features/log_tensor_stats) is another feature, fed by
 * inspect_tensor and logged at step end; docs/config.md, "Namespaces", compares the two. */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include <dlinspect/plugin.h>

#include "stats-skeleton.h"

/* The peer's set. The config matches them case-insensitively in this namespace and hands over
 * these spellings, which are also the log names' (the peer lowercases them). */
static const char *const dli_blts_stat_names[] = {
	"min", "max", "mean", "std", "l1_norm", "l2_norm", NULL,
};
static const struct dli_sf_recipe dli_blts_recipe = {
	.stats = DLI_SF_STAT_BIT(DLI_STAT_MIN) | DLI_SF_STAT_BIT(DLI_STAT_MAX) |
		 DLI_SF_STAT_BIT(DLI_STAT_MEAN) | DLI_SF_STAT_BIT(DLI_STAT_STD) |
		 DLI_SF_STAT_BIT(DLI_STAT_L1_NORM) | DLI_SF_STAT_BIT(DLI_STAT_L2_NORM)};

static int dli_blts_create(const struct dli_feature_create_args *args, void **instance,
			   struct dli_error *err)
{
	const struct dli_value *stats = &args->params[0];
	int r;
	struct dli_sf *self = dli_sf_create(args, sizeof(*self), err, &r);

	if (!self)
		return r;
	for (size_t i = 0; i < stats->u.list.n && !r; i++)
		r = dli_sf_want(self, stats->u.list.items[i], &dli_blts_recipe, 1, err);
	if (r) {
		dli_sf_destroy(self);
		return r;
	}
	*instance = self;
	return 0;
}

/* Whether `name` is one of the instance's tensors (names, not ids: the generic call passes names). */
static bool dli_blts_selects(const struct dli_sf *self, const char *name)
{
	for (int id = 0; id < 64; id++) {
		const char *t;
		if ((self->tensors >> id & 1u) && (t = self->host->tensor_name(self->ctx, id)) &&
		    !strcmp(t, name))
			return true;
	}
	return false;
}

/* Per layer: whether its first call that reached LogTensorStats was said in the message log. One
 * record for all the instances bound to the layer (a tensors_struct block makes one instance per
 * entry; nvdlfw_inspect says the line once per layer): found by the layer's name pointer, which the
 * core keeps for the layer's life, and freed with the layer's last binding. */
struct dli_blts_layer {
	struct dli_blts_layer *next;
	const char *layer_name;
	size_t refs;
	atomic_bool said;
};

static pthread_mutex_t dli_blts_layers_lock = PTHREAD_MUTEX_INITIALIZER;
static struct dli_blts_layer *dli_blts_layers;

static int dli_blts_layer_attach(void *instance, const char *layer_name, void **layer_state)
{
	struct dli_blts_layer *l;

	(void)instance;
	pthread_mutex_lock(&dli_blts_layers_lock);
	for (l = dli_blts_layers; l && l->layer_name != layer_name; l = l->next)
		;
	if (!l && (l = calloc(1, sizeof(*l)))) {
		l->layer_name = layer_name;
		atomic_init(&l->said, false);
		l->next = dli_blts_layers;
		dli_blts_layers = l;
	}
	if (l)
		l->refs++;
	pthread_mutex_unlock(&dli_blts_layers_lock);
	*layer_state = l;
	return l ? 0 : -ENOMEM;
}

static void dli_blts_layer_detach(void *instance, void *layer_state)
{
	struct dli_blts_layer **p;

	(void)instance;
	pthread_mutex_lock(&dli_blts_layers_lock);
	for (p = &dli_blts_layers; *p && *p != layer_state; p = &(*p)->next)
		;
	if (*p && --(*p)->refs == 0) {
		struct dli_blts_layer *gone = *p;
		*p = gone->next;
		free(gone);
	}
	pthread_mutex_unlock(&dli_blts_layers_lock);
}

static int dli_blts_call(const struct dli_feature_call *c, const char *name, void *args)
{
	const struct dli_sf *self = c->instance;
	const struct dli_host *host = self->host;
	const struct dli_log_tensor_stats_args *a = args;

	if (strcmp(name, DLI_CALL_LOG_TENSOR_STATS))
		return 0;
	/* strides (ABI 1.3) is the core's business (core/strided.c): a 1.2 host's args end before. */
	if (!a || a->size < offsetof(struct dli_log_tensor_stats_args, strides) ||
	    !a->tensor_name || !a->tensor)
		return -EINVAL;
	/* -1 is "now"; another negative step is a host's mistake, not step 0 or now. */
	if (a->iteration < -1)
		return -EINVAL;
	if (!dli_blts_selects(self, a->tensor_name))
		return 0;
	/* nvdlfw_inspect's line, once per layer (its key holds no tensor), whether or not the
	 * schedule selects the iteration (docs/logging.md). Read before written: later calls, from
	 * any thread, leave the record's cache line shared. */
	struct dli_blts_layer *l = c->layer_state;
	if (l && !atomic_load_explicit(&l->said, memory_order_relaxed) &&
	    !atomic_exchange(&l->said, true))
		host->log(c->ctx, DLI_LOG_INFO,
			  "LAYER=%s: Feature=LogTensorStats, API=log_tensor_stats, TENSOR=%s: Called",
			  c->layer_name, a->tensor_name);
	int64_t iteration = a->iteration >= 0 ? a->iteration : host->iteration(c->ctx);
	if (!host->schedule_active(&self->schedule, iteration))
		return 0;
	/* One call, one set of lines, as the peer logs them: nothing is merged across calls. */
	struct dli_stats_acc *acc = host->stats_acc_create(c->ctx);
	struct dli_stats_record rec;
	const bool have[1] = {true};
	const char mark[1][32] = {""};
	int r;

	if (!acc)
		return -ENOMEM;
	if ((r = host->stats_add(acc, a->tensor, NULL)) == 0 &&
	    (r = host->stats_acc_read(acc, &rec)) == 0 && rec.count)
		r = dli_sf_emit(self, c->ctx, c->layer_name, a->tensor_name, iteration, &rec, have,
				mark, NULL);
	host->stats_acc_destroy(acc);
	return r;
}

static const struct dli_feature_ops dli_blts_ops = {
	.size = sizeof(struct dli_feature_ops),
	.create = dli_blts_create,
	.destroy = dli_sf_destroy,
	.layer_attach = dli_blts_layer_attach,
	.layer_detach = dli_blts_layer_detach,
	.call = dli_blts_call,
};

static const struct dli_param_desc dli_blts_params[] = {
	{.key = "stats", .alias = "type", .type = DLI_PARAM_STRING_LIST,
	 .doc = "statistics to log: min, max, mean, std, l1_norm, l2_norm (any letter case)",
	 .choices = dli_blts_stat_names, .required = true},
};

static const char *const dli_blts_aliases[] = {"collect_tensor_stats", NULL};
static const char *const dli_blts_calls[] = {DLI_CALL_LOG_TENSOR_STATS, NULL};

static const struct dli_feature_desc dli_blts_feature = {
	.size = sizeof(struct dli_feature_desc),
	.name = "LogTensorStats",
	.aliases = dli_blts_aliases,
	.doc = "Logs statistics of tensors the host passes to the generic call log_tensor_stats.",
	.flags = DLI_FEATURE_GENERIC | DLI_FEATURE_TENSORS | DLI_FEATURE_SCHEDULED |
		 DLI_FEATURE_STRIDED, /* reads tensors through the host calls only */
	.params = dli_blts_params,
	.n_params = sizeof(dli_blts_params) / sizeof(dli_blts_params[0]),
	.param_size = DLI_PARAM_SIZE,
	.calls = dli_blts_calls,
	.ops = &dli_blts_ops,
};
static const struct dli_feature_desc *const dli_blts_features[] = {&dli_blts_feature};

/* How `extensions: [base]` finds this module without loading it. */
DLI_MODULE_NAMESPACE("base");

static const struct dli_module dli_blts_module = {
	.size = sizeof(struct dli_module),
	.abi_major = DLI_ABI_MAJOR,
	.abi_minor = DLI_ABI_MINOR,
	.name = "base_log_tensor_stats",
	.ns = "base",
	.doc = "nvdlfw_inspect's generic LogTensorStats: statistics of tensors passed to "
	       "log_tensor_stats.",
	.features = dli_blts_features,
	.n_features = 1,
};

DLI_EXPORT const struct dli_module *DLI_MODULE_ENTRY(const struct dli_host *host)
{
	if (!host || host->abi_major != DLI_ABI_MAJOR)
		return NULL;
	return &dli_blts_module;
}
