/* LogFp8TensorStats: how much FP8 quantization loses on the selected tensors (underflows, overflows,
 * mse, ...), for the host's own quantized tensor (no prefix, or `fp8_delayed_scaling_`: the host's
 * recipe) and, with the `fp8_current_scaling_` prefix, for what current scaling would do to the
 * high-precision tensor. Logged at the scheduled steps as `{layer}_{tensor}_{stat}`, the stat
 * spelled as in the config. */
#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <dlinspect/plugin.h>

#include "feature-reduce.h"
#include "feature-util.h"

#define DLI_LFS_PREFIX "fp8_current_scaling_"
#define DLI_LFS_DELAYED "fp8_delayed_scaling_"
#define DLI_LFS_N_BASE 7
#define DLI_LFS_N_KNOWN (3 * DLI_LFS_N_BASE)

#define DLI_LFS_SEVEN(p) \
	p "underflows%", p "overflows%", p "scale_inv_min", p "scale_inv_max", p "mse", p "cos_sim", \
		p "sqnr_db"
/* TransformerEngine's names for recipes with block scaling, with and without `_columnwise`. */
#define DLI_LFS_BLOCK(p, s) p "underflows%" s, p "scale_inv_min" s, p "scale_inv_max" s, p "mse" s

/* The stats as configs write them (TransformerEngine's `[<recipe>_]<stat>[_columnwise]`): those of
 * the host's quantized tensor, without a prefix or with the delayed-scaling one (a host quantizes
 * with its own recipe: TransformerEngine refuses fp8_delayed_scaling_ stats unless that is the
 * training recipe), then current scaling's what-if. After them, names create() refuses with the
 * reason: block-scaled recipes and NVFP4 (no such formats here yet) and `_columnwise` of
 * per-tensor recipes (TransformerEngine refuses those too). */
static const char *const dli_lfs_names[] = {
	DLI_LFS_SEVEN(""), DLI_LFS_SEVEN(DLI_LFS_DELAYED), DLI_LFS_SEVEN(DLI_LFS_PREFIX),
	DLI_LFS_BLOCK("mxfp8_", ""), DLI_LFS_BLOCK("mxfp8_", "_columnwise"),
	DLI_LFS_BLOCK("fp8_block_scaling_", ""), DLI_LFS_BLOCK("fp8_block_scaling_", "_columnwise"),
	DLI_LFS_BLOCK("", "_columnwise"), DLI_LFS_BLOCK(DLI_LFS_DELAYED, "_columnwise"),
	DLI_LFS_BLOCK(DLI_LFS_PREFIX, "_columnwise"), DLI_LFS_BLOCK("nvfp4_", ""), NULL,
};
static const enum dli_stat dli_lfs_stats[DLI_LFS_N_BASE] = {
	DLI_STAT_UNDERFLOWS_PCT, DLI_STAT_OVERFLOWS_PCT, DLI_STAT_SCALE_INV_MIN,
	DLI_STAT_SCALE_INV_MAX, DLI_STAT_MSE, DLI_STAT_COS_SIM, DLI_STAT_SQNR_DB,
};
static const char *const dli_lfs_formats[] = {"e4m3", "e5m2", "hybrid", NULL};

enum { DLI_LFS_STATS, DLI_LFS_UNDERFLOWS, DLI_LFS_OVERFLOWS, DLI_LFS_FORMAT, DLI_LFS_MARGIN,
       DLI_LFS_REDUCE };

struct dli_lfs {
	const struct dli_host *host;
	struct dli_context *ctx;
	struct dli_schedule schedule; /* ranges copied: config memory is gone after create */
	uint64_t tensors;
	int format; /* index in dli_lfs_formats */
	double margin;
	int names[DLI_LFS_N_KNOWN]; /* indexes in dli_lfs_names, in config order */
	size_t n_names;
	bool quantized, whatif; /* some stat needs the host's quantized tensor / current scaling */
	struct dli_reduce_conf reduce; /* across ranks (feature-reduce.h) */
};

/* Per (layer, tensor): one accumulator per kind of comparison, for the current step. */
struct dli_lfs_tensor {
	int id;
	struct dli_stats_acc *q, *whatif;
	atomic_bool added_q, added_whatif, warned;
	_Atomic int64_t weight_step;
};

struct dli_lfs_layer {
	size_t n;
	struct dli_lfs_tensor t[];
};

static void dli_lfs_want(struct dli_lfs *self, int name)
{
	for (size_t i = 0; i < self->n_names; i++)
		if (self->names[i] == name)
			return; /* `underflows: true` and `stats: [underflows%]` are the same stat */
	self->names[self->n_names++] = name;
	if (name < 2 * DLI_LFS_N_BASE)
		self->quantized = true;
	else
		self->whatif = true;
}

/* A name the config accepted that this dlinspect cannot compute: says why in err. */
static bool dli_lfs_refuse(const char *stat, struct dli_error *err)
{
	const char *col = strstr(stat, "_columnwise");
	if (!strncmp(stat, "mxfp8_", 6) || !strncmp(stat, "fp8_block_scaling_", 18)) {
		snprintf(err->message, sizeof(err->message),
			 "stats: '%s' needs the %s format, which dlinspect does not have yet "
			 "(block-scaled formats are a planned feature); the per-tensor recipes' "
			 "stats (" DLI_LFS_PREFIX "..., " DLI_LFS_DELAYED "...) work today",
			 stat, stat[0] == 'm' ? "MXFP8" : "FP8 block-scaling");
		return true;
	}
	if (!strncmp(stat, "nvfp4_", 6)) {
		snprintf(err->message, sizeof(err->message),
			 "stats: '%s': NVFP4 statistics belong to TransformerEngine's "
			 "LogNvfp4TensorStats, which needs the NVFP4 format; dlinspect has neither yet",
			 stat);
		return true;
	}
	if (col) {
		snprintf(err->message, sizeof(err->message),
			 "stats: '%s': column-wise statistics exist only for block-scaled recipes "
			 "(mxfp8_, fp8_block_scaling_), as in TransformerEngine: with per-tensor "
			 "scaling the column-wise tensor holds the same values as the row-wise one",
			 stat);
		return true;
	}
	return false;
}

static int dli_lfs_create(const struct dli_feature_create_args *args, void **instance,
			  struct dli_error *err)
{
	const struct dli_value *p = args->params;
	struct dli_lfs *self;

	/* A host may lack the statistics calls (a test's stand-in table): refuse to make an
	 * instance there rather than crash at the first tensor. */
	if (!DLI_HAS_MEMBER(args->host, struct dli_host, fp8_scale) || !args->host->stats_add) {
		snprintf(err->message, sizeof(err->message), "the host has no statistics calls");
		return -ENOTSUP;
	}
	if (!(self = calloc(1, sizeof(*self))))
		return -ENOMEM;
	self->host = args->host;
	self->ctx = args->ctx;
	self->tensors = args->tensors;
	self->margin = p[DLI_LFS_MARGIN].u.f;
	for (int i = 0; dli_lfs_formats[i]; i++)
		if (!strcmp(p[DLI_LFS_FORMAT].u.s, dli_lfs_formats[i]))
			self->format = i;
	for (size_t i = 0; p[DLI_LFS_STATS].set && i < p[DLI_LFS_STATS].u.list.n; i++) {
		const char *stat = p[DLI_LFS_STATS].u.list.items[i];
		for (int k = 0; k < DLI_LFS_N_KNOWN; k++)
			if (!strcmp(stat, dli_lfs_names[k]))
				dli_lfs_want(self, k);
		if (dli_lfs_refuse(stat, err)) {
			free(self);
			return -ENOTSUP;
		}
	}
	if (p[DLI_LFS_UNDERFLOWS].u.b)
		dli_lfs_want(self, 0);
	if (p[DLI_LFS_OVERFLOWS].u.b)
		dli_lfs_want(self, 1);
	if (!self->n_names) {
		free(self);
		snprintf(err->message, sizeof(err->message),
			 "no statistic to log: give 'stats' (e.g. [underflows%%, mse, "
			 DLI_LFS_PREFIX "mse]) or 'underflows: true' / 'overflows: true'");
		return -EINVAL;
	}
	if (dli_feature_schedule_copy(&self->schedule, args->schedule)) {
		free(self);
		return -ENOMEM;
	}
	if (dli_reduce_conf_read(&self->reduce, p, DLI_LFS_REDUCE, args->where)) {
		free((void *)self->schedule.ranges);
		free(self);
		return -ENOMEM;
	}
	*instance = self;
	return 0;
}

static void dli_lfs_destroy(void *instance)
{
	struct dli_lfs *self = instance;

	if (self) {
		free((void *)self->schedule.ranges);
		dli_reduce_conf_free(&self->reduce);
	}
	free(self);
}

static void dli_lfs_layer_detach(void *instance, void *layer_state)
{
	const struct dli_lfs *self = instance;
	struct dli_lfs_layer *l = layer_state;

	for (size_t i = 0; l && i < l->n; i++) {
		self->host->stats_acc_destroy(l->t[i].q);
		self->host->stats_acc_destroy(l->t[i].whatif);
	}
	free(l);
}

static int dli_lfs_layer_attach(void *instance, const char *layer_name, void **layer_state)
{
	const struct dli_lfs *self = instance;
	size_t n = (size_t)__builtin_popcountll(self->tensors), k = 0;
	struct dli_lfs_layer *l = calloc(1, sizeof(*l) + n * sizeof(l->t[0]));

	if (!l)
		return -ENOMEM;
	for (int id = 0; id < 64; id++) {
		if (!(self->tensors >> id & 1u))
			continue;
		struct dli_lfs_tensor *t = &l->t[k];
		t->id = id;
		atomic_init(&t->weight_step, -1);
		l->n = ++k;
		if (self->quantized && !(t->q = self->host->stats_acc_create(self->ctx)))
			goto nomem;
		if (self->whatif && !(t->whatif = self->host->stats_acc_create(self->ctx)))
			goto nomem;
		if (t->q)
			dli_reduce_share(self->host, self->ctx, &self->reduce, t->q, layer_name, id, "q",
					 &self->schedule);
		if (t->whatif)
			dli_reduce_share(self->host, self->ctx, &self->reduce, t->whatif, layer_name, id,
					 "whatif", &self->schedule);
	}
	*layer_state = l;
	return 0;
nomem:
	dli_lfs_layer_detach(instance, l);
	return -ENOMEM;
}

static bool dli_lfs_inspect_tensor_enabled(const struct dli_feature_call *c, int tensor,
					   int64_t iteration, int64_t *next)
{
	const struct dli_lfs *self = c->instance;

	return self->host->schedule_query(&self->schedule, iteration, next);
}

static enum dli_dtype dli_lfs_format(const struct dli_lfs *self, int tensor)
{
	if (self->format == 0)
		return DLI_DTYPE_F8E4M3;
	if (self->format == 1)
		return DLI_DTYPE_F8E5M2;
	return dli_feature_hybrid_format(tensor);
}

static int dli_lfs_inspect_tensor(const struct dli_feature_call *c, int tensor,
				  const struct dli_tensor *hp, const struct dli_quantized_tensor *rowwise,
				  const struct dli_quantized_tensor *colwise)
{
	const struct dli_lfs *self = c->instance;
	const struct dli_host *host = self->host;
	struct dli_lfs_layer *l = c->layer_state;
	struct dli_lfs_tensor *t = NULL;
	int r = 0;

	for (size_t i = 0; i < l->n && !t; i++)
		if (l->t[i].id == tensor)
			t = &l->t[i];
	if (!t)
		return 0;
	if (tensor == DLI_TENSOR_WEIGHT) { /* the same weight in every microbatch: count it once */
		int64_t step = host->iteration(c->ctx);
		if (atomic_exchange(&t->weight_step, step) == step)
			return 0;
	}
	if (t->whatif && hp) {
		struct dli_fp8_spec spec = {.format = dli_lfs_format(self, tensor),
					    .current_scaling = 1, .margin = self->margin};
		if ((r = host->stats_add(t->whatif, hp, &spec)) == 0)
			atomic_store(&t->added_whatif, true);
	}
	const struct dli_quantized_tensor *q = rowwise ? rowwise : colwise;
	if (t->q && q) {
		int rq = host->stats_add_quantized(t->q, hp, q);
		if (rq == 0)
			atomic_store(&t->added_q, true);
		r = r ? r : rq;
	} else if (t->q && !atomic_exchange(&t->warned, true)) {
		host->log(c->ctx, DLI_LOG_WARNING,
			  "LogFp8TensorStats: layer '%s', tensor '%s': the host passed no quantized "
			  "tensor, so the stats without the '" DLI_LFS_PREFIX "' prefix are not "
			  "logged (reported once)",
			  c->layer_name, host->tensor_name(c->ctx, tensor));
	}
	return r;
}

static void dli_lfs_step_end(const struct dli_feature_call *c, int64_t iteration)
{
	const struct dli_lfs *self = c->instance;
	const struct dli_host *host = self->host;
	struct dli_lfs_layer *l = c->layer_state;
	bool active = host->schedule_active(&self->schedule, iteration);

	for (size_t i = 0; i < l->n; i++) {
		struct dli_lfs_tensor *t = &l->t[i];
		/* An accumulator that saw nothing this step (or only empty tensors) logs nothing
		 * rather than NaNs. A quantized tensor without hp still gives its scale_inv range. */
		bool added_q = atomic_exchange(&t->added_q, false);
		bool added_w = atomic_exchange(&t->added_whatif, false);
		if (!added_q && !added_w)
			continue;
		struct dli_stats_record q, w;
		bool have_q = active && added_q && host->stats_acc_read(t->q, &q) == 0 &&
			      (q.fp8_count || q.scale_inv_max > 0);
		/* count: a tensor of only NaN and infinities still has overflows% and mse. */
		bool have_w = active && added_w && host->stats_acc_read(t->whatif, &w) == 0 &&
			      (w.fp8_count || w.count);
		for (size_t k = 0; k < self->n_names; k++) {
			int idx = self->names[k];
			bool whatif = idx >= 2 * DLI_LFS_N_BASE;
			if (!(whatif ? have_w : have_q))
				continue;
			char name[512], mark[32] = "";
			if (dli_reduce_failed(host, whatif ? t->whatif : t->q))
				snprintf(mark, sizeof(mark), "_rank%d", host->rank(c->ctx));
			snprintf(name, sizeof(name), "%s_%s_%s%s", c->layer_name,
				 host->tensor_name(c->ctx, t->id), dli_lfs_names[idx], mark);
			host->emit_scalar(c->ctx, name, iteration,
					  host->stats_value(whatif ? &w : &q,
							    dli_lfs_stats[idx % DLI_LFS_N_BASE]));
		}
		host->stats_acc_reset(t->q);
		host->stats_acc_reset(t->whatif);
	}
}

static const struct dli_feature_ops dli_lfs_ops = {
	.size = sizeof(struct dli_feature_ops),
	.create = dli_lfs_create,
	.destroy = dli_lfs_destroy,
	.layer_attach = dli_lfs_layer_attach,
	.layer_detach = dli_lfs_layer_detach,
	.inspect_tensor_enabled = dli_lfs_inspect_tensor_enabled,
	.inspect_tensor = dli_lfs_inspect_tensor,
	.step_end = dli_lfs_step_end,
};

static const struct dli_param_desc dli_lfs_params[] = {
	/* `type`: the seed form's spelling, as for collect_tensor_stats. */
	[DLI_LFS_STATS] = {.key = "stats", .alias = "type", .type = DLI_PARAM_STRING_LIST,
			   .doc = "underflows%, overflows%, scale_inv_min, scale_inv_max, mse, cos_sim, "
				  "sqnr_db of the host's FP8 tensor (also with the prefix "
				  DLI_LFS_DELAYED "); with the prefix " DLI_LFS_PREFIX
				  ", of current scaling applied to the hp tensor",
			   .choices = dli_lfs_names},
	[DLI_LFS_UNDERFLOWS] = {.key = "underflows", .type = DLI_PARAM_BOOL, .default_value = "false",
				.doc = "older form: true adds underflows%"},
	[DLI_LFS_OVERFLOWS] = {.key = "overflows", .type = DLI_PARAM_BOOL, .default_value = "false",
			       .doc = "older form: true adds overflows%"},
	[DLI_LFS_FORMAT] = {.key = "fp8_format", .type = DLI_PARAM_STRING, .default_value = "hybrid",
			    .doc = "format of the " DLI_LFS_PREFIX " stats: e4m3, e5m2, or hybrid "
				   "(E5M2 for gradient/dgrad/wgrad, E4M3 otherwise)",
			    .choices = dli_lfs_formats},
	[DLI_LFS_MARGIN] = {.key = "margin", .type = DLI_PARAM_FLOAT, .default_value = "0",
			    .doc = "current scaling's margin: scale = fp8_max / amax / 2^margin",
			    DLI_FP8_MARGIN_RANGE},
	DLI_REDUCE_PARAMS, /* from DLI_LFS_REDUCE on */
};

static const char *const dli_lfs_aliases[] = {"collect_fp8_tensor_stats", NULL};

static const struct dli_feature_desc dli_lfs_feature = {
	.size = sizeof(struct dli_feature_desc),
	.name = "LogFp8TensorStats",
	.aliases = dli_lfs_aliases,
	.doc = "Logs FP8 quantization error stats of the selected tensors at the scheduled steps.",
	.flags = DLI_FEATURE_GENERIC | DLI_FEATURE_TENSORS | DLI_FEATURE_SCHEDULED,
	.params = dli_lfs_params,
	.n_params = sizeof(dli_lfs_params) / sizeof(dli_lfs_params[0]),
	.param_size = DLI_PARAM_SIZE,
	.ops = &dli_lfs_ops,
};
static const struct dli_feature_desc *const dli_lfs_features[] = {&dli_lfs_feature};

/* How `extensions: [transformer_engine]` finds this module without loading it. */
DLI_MODULE_NAMESPACE("transformer_engine");

static const struct dli_module dli_lfs_module = {
	.size = sizeof(struct dli_module),
	.abi_major = DLI_ABI_MAJOR,
	.abi_minor = DLI_ABI_MINOR,
	.name = "log_fp8_tensor_stats",
	.ns = "transformer_engine",
	.doc = "TransformerEngine's LogFp8TensorStats: FP8 quantization error at scheduled steps.",
	.features = dli_lfs_features,
	.n_features = 1,
};

DLI_EXPORT const struct dli_module *DLI_MODULE_ENTRY(const struct dli_host *host)
{
	if (!host || host->abi_major != DLI_ABI_MAJOR)
		return NULL;
	return &dli_lfs_module;
}
