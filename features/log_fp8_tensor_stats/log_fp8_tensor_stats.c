/* LogFp8TensorStats: how much FP8 quantization loses on the selected tensors (underflows, overflows,
 * mse, ...), for the host's own quantized tensor (no prefix, or `fp8_delayed_scaling_`: the host's
 * recipe; per-tensor, or a block-scaled host's copy) and, with the `fp8_current_scaling_`,
 * `mxfp8_` or `fp8_block_scaling_` prefix, for what that recipe would do to the high-precision
 * tensor (`..._columnwise`: the column-wise copy), unless the host trains in it and passed its
 * copy (docs/block-scaling.md, "The host's own tensor"). Logged at the
 * scheduled steps as `{layer}_{tensor}_{stat}`, the stat spelled as in the config. */
#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#include <dlinspect/plugin.h>

#include "feature-util.h"
#include "stats-skeleton.h"

#define DLI_LFS_PREFIX "fp8_current_scaling_"
#define DLI_LFS_DELAYED "fp8_delayed_scaling_"
#define DLI_LFS_MX "mxfp8_"
#define DLI_LFS_FB_PREFIX "fp8_block_scaling_"
#define DLI_LFS_COL "_columnwise"

/* The stats as configs write them (TransformerEngine's `[<recipe>_]<stat>[_columnwise]`): those of
 * the host's quantized tensor, without a prefix or with the delayed-scaling one (a host quantizes
 * with its own recipe: TransformerEngine refuses fp8_delayed_scaling_ stats unless that is the
 * training recipe), then the what-ifs: current scaling, MXFP8 row-wise and column-wise, FP8
 * block scaling (128 x 128 blocks, the same in both copies). After them, names create() refuses
 * with the reason: NVFP4 (LogNvfp4TensorStats' names) and `_columnwise` of per-tensor recipes
 * (TransformerEngine refuses those too). */
static const char *const dli_lfs_names[] = {
	DLI_SF_FP8_NAMES("", ""), DLI_SF_FP8_NAMES(DLI_LFS_DELAYED, ""),
	DLI_SF_FP8_NAMES(DLI_LFS_PREFIX, ""), DLI_SF_FP8_NAMES(DLI_LFS_MX, ""),
	DLI_SF_FP8_NAMES(DLI_LFS_MX, DLI_LFS_COL), DLI_SF_FP8_NAMES(DLI_LFS_FB_PREFIX, ""),
	DLI_SF_FP8_NAMES(DLI_LFS_FB_PREFIX, DLI_LFS_COL), DLI_SF_BLOCK_NAMES("", DLI_LFS_COL),
	DLI_SF_BLOCK_NAMES(DLI_LFS_DELAYED, DLI_LFS_COL), DLI_SF_BLOCK_NAMES(DLI_LFS_PREFIX, DLI_LFS_COL),
	DLI_SF_BLOCK_NAMES("nvfp4_", ""), NULL,
};
static const char *const dli_lfs_formats[] = {"e4m3", "e5m2", "hybrid", NULL};

enum { DLI_LFS_STATS, DLI_LFS_UNDERFLOWS, DLI_LFS_OVERFLOWS, DLI_LFS_FORMAT, DLI_LFS_MARGIN,
       DLI_LFS_REDUCE };

/* What a stat is computed from, one accumulator (skeleton slot) each: the host's quantized
 * tensor, or one what-if quantization of the high-precision tensor; each kind's role in the key
 * of its reduction across ranks (feature-reduce.h). */
enum { DLI_LFS_Q, DLI_LFS_CURRENT, DLI_LFS_MX_ROW, DLI_LFS_MX_COL, DLI_LFS_FB, DLI_LFS_FB_COL,
       DLI_LFS_N_KINDS };
static const char *const dli_lfs_kind_names[DLI_LFS_N_KINDS] = {
	[DLI_LFS_Q] = "q", [DLI_LFS_CURRENT] = "whatif", [DLI_LFS_MX_ROW] = "mxfp8",
	[DLI_LFS_MX_COL] = "mxfp8_columnwise", [DLI_LFS_FB] = "fp8_block",
	[DLI_LFS_FB_COL] = "fp8_block_columnwise",
};
/* FP8 block scaling's what-if is TransformerEngine's default Float8BlockQuantizer: 128 x 128
 * blocks, so its column-wise copy has the row-wise copy's values, and the column-wise slot logs
 * the row-wise one's record (the skeleton's mirror) unless a host's 1-D copy fed it. */
static const struct dli_sf_recipe dli_lfs_recipes[] = {
	{.stats = DLI_SF_FP8, .slot = DLI_LFS_Q},
	{.prefix = DLI_LFS_DELAYED, .stats = DLI_SF_FP8, .slot = DLI_LFS_Q},
	{.prefix = DLI_LFS_PREFIX, .stats = DLI_SF_FP8, .slot = DLI_LFS_CURRENT},
	{.prefix = DLI_LFS_MX, .stats = DLI_SF_FP8, .slot = DLI_LFS_MX_ROW},
	{.prefix = DLI_LFS_MX, .suffix = DLI_LFS_COL, .stats = DLI_SF_FP8, .slot = DLI_LFS_MX_COL},
	{.prefix = DLI_LFS_FB_PREFIX, .stats = DLI_SF_FP8, .slot = DLI_LFS_FB},
	{.prefix = DLI_LFS_FB_PREFIX, .suffix = DLI_LFS_COL, .stats = DLI_SF_FP8, .slot = DLI_LFS_FB_COL},
};
#define DLI_LFS_N_RECIPES (sizeof(dli_lfs_recipes) / sizeof(dli_lfs_recipes[0]))

struct dli_lfs {
	struct dli_sf sf; /* first: the skeleton's methods take the instance */
	int format;       /* index in dli_lfs_formats */
	double margin;
	bool delayed;     /* some stat has the fp8_delayed_scaling_ prefix */
};

/* A name the config accepted that this dlinspect cannot compute: says why in err. */
static void dli_lfs_refuse(const char *stat, struct dli_error *err)
{
	if (!strncmp(stat, "nvfp4_", 6))
		snprintf(err->message, sizeof(err->message),
			 "stats: '%s': NVFP4 statistics belong to TransformerEngine's "
			 "LogNvfp4TensorStats (stats: [underflows%%, mse], logged as nvfp4_<stat>), "
			 "not to LogFp8TensorStats",
			 stat);
	else if (strstr(stat, "_columnwise"))
		snprintf(err->message, sizeof(err->message),
			 "stats: '%s': column-wise statistics exist only for block-scaled recipes "
			 "(" DLI_LFS_MX ", " DLI_LFS_FB_PREFIX "), as in TransformerEngine: with per-tensor "
			 "scaling the column-wise tensor holds the same values as the row-wise one",
			 stat);
}

static int dli_lfs_want(struct dli_lfs *self, const char *stat, struct dli_error *err)
{
	int r = dli_sf_want(&self->sf, stat, dli_lfs_recipes, DLI_LFS_N_RECIPES, err);

	if (r == -ENOENT) {
		dli_lfs_refuse(stat, err);
		r = -ENOTSUP;
	}
	return r;
}

static int dli_lfs_create(const struct dli_feature_create_args *args, void **instance,
			  struct dli_error *err)
{
	const struct dli_value *p = args->params;
	int r;
	struct dli_lfs *self = dli_sf_create(args, sizeof(*self), err, &r);

	if (!self)
		return r;
	/* The host's copies may feed every slot but the current-scaling what-if. */
	self->sf.quantized_slots = ((1u << DLI_LFS_N_KINDS) - 1u) & ~(1u << DLI_LFS_CURRENT);
	self->sf.mirror[DLI_LFS_FB_COL] = DLI_LFS_FB + 1;
	self->margin = p[DLI_LFS_MARGIN].u.f;
	for (int i = 0; dli_lfs_formats[i]; i++)
		if (!strcmp(p[DLI_LFS_FORMAT].u.s, dli_lfs_formats[i]))
			self->format = i;
	for (size_t i = 0; !r && p[DLI_LFS_STATS].set && i < p[DLI_LFS_STATS].u.list.n; i++)
		r = dli_lfs_want(self, p[DLI_LFS_STATS].u.list.items[i], err);
	/* The block-scaled passes are a host call of ABI 1.2. */
	uint32_t block = 1u << DLI_LFS_MX_ROW | 1u << DLI_LFS_MX_COL | 1u << DLI_LFS_FB |
			 1u << DLI_LFS_FB_COL;
	if (!r && (self->sf.slots & block) &&
	    (!DLI_HAS_MEMBER(args->host, struct dli_host, stats_add_block) ||
	     !args->host->stats_add_block)) {
		snprintf(err->message, sizeof(err->message),
			 "stats: the " DLI_LFS_MX " and " DLI_LFS_FB_PREFIX " statistics need a host with "
			 "the block-scaled passes (stats_add_block); this host is older");
		r = -ENOTSUP;
	}
	if (!r && p[DLI_LFS_UNDERFLOWS].u.b)
		r = dli_lfs_want(self, "underflows%", err);
	if (!r && p[DLI_LFS_OVERFLOWS].u.b)
		r = dli_lfs_want(self, "overflows%", err);
	for (size_t k = 0; !r && k < self->sf.n_stats; k++)
		self->delayed = self->delayed || !strncmp(self->sf.stats[k].log_name, DLI_LFS_DELAYED,
							  strlen(DLI_LFS_DELAYED));
	if (!r && !self->sf.n_stats) {
		snprintf(err->message, sizeof(err->message),
			 "no statistic to log: give 'stats' (e.g. [underflows%%, mse, "
			 DLI_LFS_PREFIX "mse]) or 'underflows: true' / 'overflows: true'");
		r = -EINVAL;
	}
	if (!r)
		r = dli_sf_reduce_read(&self->sf, p, DLI_LFS_REDUCE, args->where, dli_lfs_kind_names);
	if (r) {
		dli_sf_destroy(self);
		return r;
	}
	*instance = self;
	return 0;
}

static enum dli_dtype dli_lfs_format(const struct dli_lfs *self, int tensor)
{
	if (self->format == 0)
		return DLI_DTYPE_F8E4M3;
	if (self->format == 1)
		return DLI_DTYPE_F8E5M2;
	return dli_feature_hybrid_format(tensor);
}

static bool dli_lfs_is_fp8b(const struct dli_block_quantized_tensor *b)
{
	return b && (b->recipe == DLI_BLOCK_FP8_1D || b->recipe == DLI_BLOCK_FP8_2D);
}

/* Slot `kind` from the host's block-scaled copy `b`. */
static int dli_lfs_add_host_block(const struct dli_feature_call *c, struct dli_sf_tensor *t,
				  unsigned kind, const struct dli_tensor *hp,
				  const struct dli_block_quantized_tensor *b)
{
	const struct dli_host *host = ((const struct dli_lfs *)c->instance)->sf.host;
	return dli_sf_added(t, kind, host->stats_add_block_quantized(t->acc[kind], hp, b));
}

/* Chooses what to compute; the rest is the skeleton's (stats-skeleton.h). `rowwise`/`colwise` are
 * a per-tensor host's copies, `brow`/`bcol` a block-scaled host's (dli_inspect_tensor_block): a
 * stat of the host's recipe reads the host's copy, every other one is a what-if from hp. */
static int dli_lfs_inspect(const struct dli_feature_call *c, int tensor, const struct dli_tensor *hp,
			   const struct dli_quantized_tensor *rowwise,
			   const struct dli_quantized_tensor *colwise,
			   const struct dli_block_quantized_tensor *brow,
			   const struct dli_block_quantized_tensor *bcol)
{
	const struct dli_lfs *self = c->instance;
	const struct dli_host *host = self->sf.host;
	struct dli_sf_tensor *t = dli_sf_tensor(c, tensor);
	int r = 0;

	if (!t || dli_sf_weight_seen(c, t))
		return 0;
	if (t->acc[DLI_LFS_CURRENT] && hp) {
		struct dli_fp8_spec spec = {.format = dli_lfs_format(self, tensor),
					    .current_scaling = 1, .margin = self->margin};
		r = dli_sf_added(t, DLI_LFS_CURRENT, host->stats_add(t->acc[DLI_LFS_CURRENT], hp, &spec));
	}
	/* The host's copy for each block-scaled slot, where its recipe is the slot's. */
	const struct dli_block_quantized_tensor *from_host[DLI_LFS_N_KINDS] = {
		[DLI_LFS_MX_ROW] = brow && brow->recipe == DLI_BLOCK_MXFP8 ? brow : NULL,
		[DLI_LFS_MX_COL] = bcol && bcol->recipe == DLI_BLOCK_MXFP8 ? bcol : NULL,
		[DLI_LFS_FB] = dli_lfs_is_fp8b(brow) ? brow : NULL,
		[DLI_LFS_FB_COL] = dli_lfs_is_fp8b(bcol) ? bcol : NULL,
	};
	/* FP8 block scaling's what-if (128 x 128) is the same in both copies: the column-wise slot
	 * mirrors the row-wise one's what-if rather than running it twice. */
	bool fb_whatif = false;
	for (int kind = DLI_LFS_MX_ROW; kind <= DLI_LFS_FB_COL; kind++) {
		int rb;
		if (!t->acc[kind])
			continue;
		if (from_host[kind]) {
			rb = dli_lfs_add_host_block(c, t, (unsigned)kind, hp, from_host[kind]);
			/* A refused copy still fed its slot: the column-wise one then logs nothing,
			 * not the row-wise record under its name (the skeleton's mirror). */
			if (rb)
				atomic_store(&t->added[kind], true);
		} else if (!hp || (kind == DLI_LFS_FB_COL && fb_whatif)) {
			continue;
		} else {
			struct dli_block_spec spec = {
				.size = sizeof(spec),
				.recipe = kind >= DLI_LFS_FB ? DLI_BLOCK_FP8_2D : DLI_BLOCK_MXFP8,
				.format = dli_lfs_format(self, tensor),
				.columnwise = kind == DLI_LFS_MX_COL || kind == DLI_LFS_FB_COL,
				.pow2_scales = 1};
			fb_whatif = kind == DLI_LFS_FB;
			rb = dli_sf_added(t, (unsigned)kind,
					  host->stats_add_block(t->acc[kind], hp, &spec));
		}
		r = r ? r : rb;
	}
	/* Without a prefix: the host's own copy, per-tensor or block-scaled (TransformerEngine's
	 * "current training recipe"). */
	const struct dli_quantized_tensor *q = rowwise ? rowwise : colwise;
	const struct dli_block_quantized_tensor *b = brow ? brow : bcol;
	/* Not NVFP4: an FP8 recipe, or one the host call refuses with the reason. */
	bool b_fp8 = b && b->recipe != DLI_BLOCK_NVFP4 && b->recipe != DLI_BLOCK_NVFP4_2D;
	/* The delayed-scaling stats share slot Q: a block-scaled copy there would be logged under
	 * fp8_delayed_scaling_ names, which TransformerEngine refuses unless the host trains in
	 * delayed scaling; so that config logs neither, and says why. */
	const char *why_not = NULL;
	if (!b)
		why_not = "the host passed no quantized tensor";
	else if (!b_fp8)
		why_not = "the host's copy is NVFP4, whose stats are LogNvfp4TensorStats'";
	else if (self->delayed)
		why_not = "the host's copy is block-scaled, and the '" DLI_LFS_DELAYED "' stats are "
			  "a delayed-scaling host's (TransformerEngine refuses them for other recipes)";
	if (t->acc[DLI_LFS_Q] && q) {
		int rq = dli_sf_added(t, DLI_LFS_Q, host->stats_add_quantized(t->acc[DLI_LFS_Q], hp, q));
		r = r ? r : rq;
	} else if (t->acc[DLI_LFS_Q] && !why_not) {
		int rq = dli_lfs_add_host_block(c, t, DLI_LFS_Q, hp, b);
		r = r ? r : rq;
	} else if (t->acc[DLI_LFS_Q] && !atomic_exchange(&t->warned, true)) {
		host->log(c->ctx, DLI_LOG_WARNING,
			  "LogFp8TensorStats: layer '%s', tensor '%s': %s, so the stats without a "
			  "what-if prefix ('" DLI_LFS_PREFIX "', '" DLI_LFS_MX "', '"
			  DLI_LFS_FB_PREFIX "') are not logged (reported once)",
			  c->layer_name, host->tensor_name(c->ctx, tensor), why_not);
	}
	return dli_sf_weight_done(t, r);
}

static int dli_lfs_inspect_tensor(const struct dli_feature_call *c, int tensor,
				  const struct dli_tensor *hp, const struct dli_quantized_tensor *rowwise,
				  const struct dli_quantized_tensor *colwise)
{
	return dli_lfs_inspect(c, tensor, hp, rowwise, colwise, NULL, NULL);
}

static int dli_lfs_inspect_tensor_block(const struct dli_feature_call *c, int tensor,
					const struct dli_tensor *hp,
					const struct dli_block_quantized_tensor *rowwise,
					const struct dli_block_quantized_tensor *colwise)
{
	return dli_lfs_inspect(c, tensor, hp, NULL, NULL, rowwise, colwise);
}

static const struct dli_feature_ops dli_lfs_ops = {
	.size = sizeof(struct dli_feature_ops),
	.create = dli_lfs_create,
	.destroy = dli_sf_destroy,
	.layer_attach = dli_sf_layer_attach,
	.layer_detach = dli_sf_layer_detach,
	.inspect_tensor_enabled = dli_sf_inspect_tensor_enabled,
	.inspect_tensor = dli_lfs_inspect_tensor,
	.step_end = dli_sf_step_end,
	.inspect_tensor_block = dli_lfs_inspect_tensor_block,
};

static const struct dli_param_desc dli_lfs_params[] = {
	/* `type`: the seed form's spelling, as for collect_tensor_stats. */
	[DLI_LFS_STATS] = {.key = "stats", .alias = "type", .type = DLI_PARAM_STRING_LIST,
			   .doc = "underflows%, overflows%, scale_inv_min, scale_inv_max, mse, cos_sim, "
				  "sqnr_db of the host's FP8 tensor, per-tensor or block-scaled (also with "
				  "the prefix " DLI_LFS_DELAYED "); with the prefix " DLI_LFS_PREFIX
				  ", of current scaling applied to the hp tensor; with " DLI_LFS_MX
				  " (and the suffix " DLI_LFS_COL "), of MXFP8's row-wise (column-wise) "
				  "blocks; with " DLI_LFS_FB_PREFIX ", of FP8 block scaling (128 x 128 blocks, "
				  "power-of-two scales); the block-scaled ones from the host's own copy "
				  "when it trains in that recipe",
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
