/* LogFp8TensorStats: how much FP8 quantization loses on the selected tensors (underflows, overflows,
 * mse, ...), for the host's own quantized tensor (no prefix, or `fp8_delayed_scaling_`: the host's
 * recipe) and, with the `fp8_current_scaling_` or `mxfp8_` prefix, for what that recipe would do
 * to the high-precision tensor (`mxfp8_..._columnwise`: MXFP8's column-wise copy). Logged at the
 * scheduled steps as `{layer}_{tensor}_{stat}`, the stat spelled as in the config. */
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
#define DLI_LFS_MX "mxfp8_"
#define DLI_LFS_FB_PREFIX "fp8_block_scaling_"
#define DLI_LFS_COL "_columnwise"
#define DLI_LFS_N_BASE 7
#define DLI_LFS_N_KNOWN (7 * DLI_LFS_N_BASE)

#define DLI_LFS_SEVEN_S(p, s) \
	p "underflows%" s, p "overflows%" s, p "scale_inv_min" s, p "scale_inv_max" s, p "mse" s, \
		p "cos_sim" s, p "sqnr_db" s
#define DLI_LFS_SEVEN(p) DLI_LFS_SEVEN_S(p, "")
/* TransformerEngine's names for recipes with block scaling, with and without `_columnwise`. */
#define DLI_LFS_BLOCK(p, s) p "underflows%" s, p "scale_inv_min" s, p "scale_inv_max" s, p "mse" s

/* The stats as configs write them (TransformerEngine's `[<recipe>_]<stat>[_columnwise]`): those of
 * the host's quantized tensor, without a prefix or with the delayed-scaling one (a host quantizes
 * with its own recipe: TransformerEngine refuses fp8_delayed_scaling_ stats unless that is the
 * training recipe), then the what-ifs: current scaling, MXFP8 row-wise and column-wise, FP8
 * block scaling (128 x 128 blocks, the same in both copies). After them, names create() refuses
 * with the reason: NVFP4 (LogNvfp4TensorStats' names) and `_columnwise` of per-tensor recipes
 * (TransformerEngine refuses those too). */
static const char *const dli_lfs_names[] = {
	DLI_LFS_SEVEN(""), DLI_LFS_SEVEN(DLI_LFS_DELAYED), DLI_LFS_SEVEN(DLI_LFS_PREFIX),
	DLI_LFS_SEVEN(DLI_LFS_MX), DLI_LFS_SEVEN_S(DLI_LFS_MX, DLI_LFS_COL),
	DLI_LFS_SEVEN(DLI_LFS_FB_PREFIX), DLI_LFS_SEVEN_S(DLI_LFS_FB_PREFIX, DLI_LFS_COL),
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

/* What a stat is computed from, one accumulator each: the host's quantized tensor, or one
 * what-if quantization of the high-precision tensor. */
enum { DLI_LFS_Q, DLI_LFS_CURRENT, DLI_LFS_MX_ROW, DLI_LFS_MX_COL, DLI_LFS_FB, DLI_LFS_N_KINDS };
/* Each kind's role in the key of its reduction across ranks (feature-reduce.h). */
static const char *const dli_lfs_kind_names[DLI_LFS_N_KINDS] = {
	[DLI_LFS_Q] = "q", [DLI_LFS_CURRENT] = "whatif", [DLI_LFS_MX_ROW] = "mxfp8",
	[DLI_LFS_MX_COL] = "mxfp8_columnwise", [DLI_LFS_FB] = "fp8_block",
};

static int dli_lfs_kind(int name)
{
	/* FP8 block scaling's what-if is TransformerEngine's default Float8BlockQuantizer: 128 x 128
	 * blocks, so its column-wise copy has the row-wise copy's values: one accumulator. */
	static const int kinds[] = {DLI_LFS_Q, DLI_LFS_Q, DLI_LFS_CURRENT, DLI_LFS_MX_ROW,
				    DLI_LFS_MX_COL, DLI_LFS_FB, DLI_LFS_FB};
	return kinds[name / DLI_LFS_N_BASE];
}

struct dli_lfs {
	const struct dli_host *host;
	struct dli_context *ctx;
	struct dli_schedule schedule; /* ranges copied: config memory is gone after create */
	uint64_t tensors;
	int format; /* index in dli_lfs_formats */
	double margin;
	int names[DLI_LFS_N_KNOWN]; /* indexes in dli_lfs_names, in config order */
	size_t n_names;
	bool need[DLI_LFS_N_KINDS]; /* some stat is of that kind */
	struct dli_reduce_conf reduce; /* across ranks (feature-reduce.h) */
};

/* Per (layer, tensor): one accumulator per kind of comparison, for the current step. */
struct dli_lfs_tensor {
	int id;
	struct dli_stats_acc *acc[DLI_LFS_N_KINDS];
	atomic_bool added[DLI_LFS_N_KINDS], warned;
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
	self->need[dli_lfs_kind(name)] = true;
}

/* A name the config accepted that this dlinspect cannot compute: says why in err. */
static bool dli_lfs_refuse(const char *stat, struct dli_error *err)
{
	const char *col = strstr(stat, "_columnwise");
	if (!strncmp(stat, "nvfp4_", 6)) {
		snprintf(err->message, sizeof(err->message),
			 "stats: '%s': NVFP4 statistics belong to TransformerEngine's "
			 "LogNvfp4TensorStats (stats: [underflows%%, mse], logged as nvfp4_<stat>), "
			 "not to LogFp8TensorStats",
			 stat);
		return true;
	}
	if (col) {
		snprintf(err->message, sizeof(err->message),
			 "stats: '%s': column-wise statistics exist only for block-scaled recipes "
			 "(" DLI_LFS_MX ", " DLI_LFS_FB_PREFIX "), as in TransformerEngine: with per-tensor "
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
		bool known = false;
		for (int k = 0; k < DLI_LFS_N_KNOWN; k++)
			if (!strcmp(stat, dli_lfs_names[k])) {
				dli_lfs_want(self, k);
				known = true;
			}
		if (!known && dli_lfs_refuse(stat, err)) {
			free(self);
			return -ENOTSUP;
		}
	}
	/* The block-scaled passes are a host call of ABI 1.2. */
	if ((self->need[DLI_LFS_MX_ROW] || self->need[DLI_LFS_MX_COL] || self->need[DLI_LFS_FB]) &&
	    (!DLI_HAS_MEMBER(args->host, struct dli_host, stats_add_block) ||
	     !args->host->stats_add_block)) {
		free(self);
		snprintf(err->message, sizeof(err->message),
			 "stats: the " DLI_LFS_MX " and " DLI_LFS_FB_PREFIX " statistics need a host with "
			 "the block-scaled passes (stats_add_block); this host is older");
		return -ENOTSUP;
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

	for (size_t i = 0; l && i < l->n; i++)
		for (int k = 0; k < DLI_LFS_N_KINDS; k++)
			self->host->stats_acc_destroy(l->t[i].acc[k]);
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
		for (int kind = 0; kind < DLI_LFS_N_KINDS; kind++) {
			if (!self->need[kind])
				continue;
			if (!(t->acc[kind] = self->host->stats_acc_create(self->ctx)))
				goto nomem;
			dli_reduce_share(self->host, self->ctx, &self->reduce, t->acc[kind], layer_name,
					 id, dli_lfs_kind_names[kind], &self->schedule);
		}
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
	if (t->acc[DLI_LFS_CURRENT] && hp) {
		struct dli_fp8_spec spec = {.format = dli_lfs_format(self, tensor),
					    .current_scaling = 1, .margin = self->margin};
		if ((r = host->stats_add(t->acc[DLI_LFS_CURRENT], hp, &spec)) == 0)
			atomic_store(&t->added[DLI_LFS_CURRENT], true);
	}
	/* MXFP8 is a what-if from hp even when the host trains in MXFP8: a quantized tensor's
	 * descriptor holds float scale_invs, not E8M0 block scales, and the codec is bit-exact to
	 * TransformerEngine's, so the what-if is the tensor such a host made (docs/block-scaling.md). */
	for (int kind = DLI_LFS_MX_ROW; kind <= DLI_LFS_FB && hp; kind++) {
		if (!t->acc[kind])
			continue;
		struct dli_block_spec spec = {.size = sizeof(spec),
					      .recipe = kind == DLI_LFS_FB ? DLI_BLOCK_FP8_2D
									   : DLI_BLOCK_MXFP8,
					      .format = dli_lfs_format(self, tensor),
					      .columnwise = kind == DLI_LFS_MX_COL,
					      .pow2_scales = 1};
		int rb = host->stats_add_block(t->acc[kind], hp, &spec);
		if (rb == 0)
			atomic_store(&t->added[kind], true);
		r = r ? r : rb;
	}
	const struct dli_quantized_tensor *q = rowwise ? rowwise : colwise;
	if (t->acc[DLI_LFS_Q] && q) {
		int rq = host->stats_add_quantized(t->acc[DLI_LFS_Q], hp, q);
		if (rq == 0)
			atomic_store(&t->added[DLI_LFS_Q], true);
		r = r ? r : rq;
	} else if (t->acc[DLI_LFS_Q] && !atomic_exchange(&t->warned, true)) {
		host->log(c->ctx, DLI_LOG_WARNING,
			  "LogFp8TensorStats: layer '%s', tensor '%s': the host passed no quantized "
			  "tensor, so the stats without a what-if prefix ('" DLI_LFS_PREFIX "', '"
			  DLI_LFS_MX "') are not logged (reported once)",
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
		struct dli_stats_record rec[DLI_LFS_N_KINDS];
		bool have[DLI_LFS_N_KINDS], any = false;
		for (int kind = 0; kind < DLI_LFS_N_KINDS; kind++) {
			bool added = atomic_exchange(&t->added[kind], false);
			any = any || added;
			have[kind] = active && added && host->stats_acc_read(t->acc[kind], &rec[kind]) == 0;
			/* A what-if: count, since a tensor of only NaN and infinities still has
			 * overflows% and mse. */
			if (have[kind])
				have[kind] = rec[kind].fp8_count ||
					     (kind == DLI_LFS_Q ? rec[kind].scale_inv_max > 0
								: rec[kind].count > 0);
		}
		if (!any)
			continue;
		for (size_t k = 0; k < self->n_names; k++) {
			int idx = self->names[k], kind = dli_lfs_kind(idx);
			if (!have[kind])
				continue;
			/* A failed reduction: this rank's shards only, under names that say so. */
			char name[512], mark[32] = "";
			if (dli_reduce_failed(host, t->acc[kind]))
				snprintf(mark, sizeof(mark), "_rank%d", host->rank(c->ctx));
			snprintf(name, sizeof(name), "%s_%s_%s%s", c->layer_name,
				 host->tensor_name(c->ctx, t->id), dli_lfs_names[idx], mark);
			host->emit_scalar(c->ctx, name, iteration,
					  host->stats_value(&rec[kind],
							    dli_lfs_stats[idx % DLI_LFS_N_BASE]));
		}
		for (int kind = 0; kind < DLI_LFS_N_KINDS; kind++)
			host->stats_acc_reset(t->acc[kind]);
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
				  ", of current scaling applied to the hp tensor; with " DLI_LFS_MX
				  " (and the suffix " DLI_LFS_COL "), of MXFP8's row-wise (column-wise) "
				  "blocks; with " DLI_LFS_FB_PREFIX ", of FP8 block scaling (128 x 128 blocks, "
				  "power-of-two scales)",
			   .choices = dli_lfs_names},
	[DLI_LFS_UNDERFLOWS] = {.key = "underflows", .type = DLI_PARAM_BOOL, .default_value = "false",
				.doc = "older form: true adds underflows%"},
	[DLI_LFS_OVERFLOWS] = {.key = "overflows", .type = DLI_PARAM_BOOL, .default_value = "false",
			       .doc = "older form: true adds overflows%"},
	[DLI_LFS_FORMAT] = {.key = "fp8_format", .type = DLI_PARAM_STRING, .default_value = "hybrid",
			    .doc = "format of the " DLI_LFS_PREFIX " and " DLI_LFS_MX " stats' elements: "
				   "e4m3, e5m2, or hybrid "
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
	.flags = DLI_FEATURE_GENERIC | DLI_FEATURE_TENSORS | DLI_FEATURE_SCHEDULED |
		 DLI_FEATURE_STRIDED, /* reads tensors through the host calls only */
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
