/* What every statistics feature (LogTensorStats, LogFp8TensorStats, LogNvfp4TensorStats, the base
 * namespace's LogTensorStats) shares, so that each comes down to parsing its own parameters and
 * choosing what to compute: the host check, the schedule, the statistic names (the one parser of
 * `[<recipe>_]<stat>[_suffix]`), the per-(layer, tensor) accumulators with their reduction across
 * ranks, and the step-end loop that reads, names, emits and resets. Compiled into each statistics
 * module (stats-skeleton.c); written against <dlinspect/plugin.h> alone, so an out-of-tree feature
 * may copy the two files. docs/plugins.md, "A statistics feature", shows a minimal one. */
#ifndef DLI_STATS_SKELETON_H
#define DLI_STATS_SKELETON_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include <dlinspect/plugin.h>

#include "feature-reduce.h"

/* The names as configs write them, for the `choices` of a feature's `stats` key (the core checks
 * the config against them, with did-you-mean, and in any letter case in the base namespace).
 * They are the host's stat_name spellings; dli_sf_want() checks each against the host. */
#define DLI_SF_PLAIN_NAMES                                                                         \
	"min", "max", "mean", "std", "var", "l1_norm", "l2_norm", "cur_amax", "dynamic_range",      \
		"nan_count", "inf_count", "zero%"
/* The quantize-and-compare statistics, `p` and `s` a recipe's prefix and suffix. */
#define DLI_SF_FP8_NAMES(p, s)                                                                     \
	p "underflows%" s, p "overflows%" s, p "scale_inv_min" s, p "scale_inv_max" s, p "mse" s,  \
		p "cos_sim" s, p "sqnr_db" s
/* TransformerEngine's subset for recipes with block scaling. */
#define DLI_SF_BLOCK_NAMES(p, s) p "underflows%" s, p "scale_inv_min" s, p "scale_inv_max" s, p "mse" s

/* Sets of enum dli_stat, for struct dli_sf_recipe. */
#define DLI_SF_STAT_BIT(s) (UINT32_C(1) << (s))
#define DLI_SF_PLAIN (DLI_SF_STAT_BIT(DLI_STAT_UNDERFLOWS_PCT) - 1)
#define DLI_SF_FP8 (DLI_SF_STAT_BIT(DLI_STAT_COUNT) - DLI_SF_STAT_BIT(DLI_STAT_UNDERFLOWS_PCT))

/* Accumulators per tensor: a feature computes each statistic from one of them (a "slot"), e.g.
 * the host's quantized tensor and each what-if quantization of the high-precision one. */
#define DLI_SF_MAX_SLOTS 8

/* How a config name becomes a statistic: `{prefix}{stat}{suffix}`, `stat` a host statistic in
 * `stats`, computed from accumulator `slot` and logged as `{layer}_{tensor}_{log_prefix}{name}`. */
struct dli_sf_recipe {
	const char *prefix, *suffix, *log_prefix; /* NULL reads as "" */
	uint32_t stats;                           /* DLI_SF_STAT_BIT per accepted statistic */
	unsigned slot;
};

/* One statistic to log, in the order the config listed them. */
struct dli_sf_stat {
	enum dli_stat stat;
	unsigned slot;
	char *log_name; /* `{log_prefix}{name}`, owned */
	/* Logged with "_max_over_orientations" appended for the activation and the weight, whose
	 * both orientations the feature covers (TransformerEngine's max_blockwise_dynamic_range). */
	bool orientations;
};

/* The instance's shared part: the first member of a statistics feature's instance, so that the
 * dli_sf_* methods below take the instance as it is. Made by dli_sf_create, freed by
 * dli_sf_destroy. */
struct dli_sf {
	const struct dli_host *host;
	struct dli_context *ctx;
	struct dli_schedule schedule; /* ranges copied: config memory is gone after create */
	uint64_t tensors;
	struct dli_sf_stat *stats;
	size_t n_stats, cap_stats;
	uint32_t slots;           /* bit per slot some statistic (or the histogram) reads */
	uint32_t quantized_slots; /* slots fed the host's quantized tensor: see dli_sf_step_end */
	bool histogram;           /* slot 0 keeps a value histogram, logged as `..._histogram` */
	/* mirror[s] = m + 1: slot s, when nothing fed it in a step, logs slot m's record (two names
	 * for one computation, e.g. a what-if whose column-wise copy holds the row-wise values);
	 * 0: none. */
	unsigned char mirror[DLI_SF_MAX_SLOTS];
	/* Across ranks (feature-reduce.h), when dli_sf_reduce_read was called: each slot's role in
	 * its reduction key. */
	bool reduce_on;
	struct dli_reduce_conf reduce;
	const char *const *roles;
};

/* Per (layer, tensor): one accumulator per used slot, for the current step. */
struct dli_sf_tensor {
	int id;
	struct dli_stats_acc *acc[DLI_SF_MAX_SLOTS];
	atomic_bool added[DLI_SF_MAX_SLOTS];
	atomic_bool warned;          /* for a feature's report-once messages */
	_Atomic int64_t weight_step; /* the step the weight was last added in */
};

struct dli_sf_layer {
	size_t n;
	struct dli_sf_tensor t[];
};

/* An instance of `size` bytes (>= sizeof(struct dli_sf), zeroed) for `args`: checks that the host
 * has the statistics calls ("the host has no statistics calls", -ENOTSUP) and copies the schedule
 * and the tensors. NULL with err->message set and *r the error. */
void *dli_sf_create(const struct dli_feature_create_args *args, size_t size, struct dli_error *err,
		    int *r);
/* For the ops table's destroy: frees what dli_sf_create and dli_sf_want made, and the instance. */
void dli_sf_destroy(void *instance);

/* Wants the statistic the config calls `name`: the first of `recipes` that takes it decides the
 * statistic, the slot and the log name. A name already wanted is skipped. 0; -ENOENT when no
 * recipe takes it (err says so; a feature that refuses such a name may say why instead); -EINVAL when this host does
 * not know the statistic ("this dlinspect lacks a listed statistic" in err); -ENOMEM. */
int dli_sf_want(struct dli_sf *sf, const char *name, const struct dli_sf_recipe *recipes,
		size_t n_recipes, struct dli_error *err);

/* Wants statistic `stat` of accumulator `slot` under the log name `log_name` (copied), with
 * `orientations` as in struct dli_sf_stat: for a statistic the feature names itself. A log name
 * already wanted is skipped. 0, -EINVAL for a slot out of range (err says so), or -ENOMEM. */
int dli_sf_want_as(struct dli_sf *sf, enum dli_stat stat, unsigned slot, const char *log_name,
		   bool orientations, struct dli_error *err);

/* Reads feature-reduce.h's keys from params[first ..] and reduces each used slot across ranks,
 * `roles[slot]` naming it in the key (static strings). 0 or -ENOMEM. */
int dli_sf_reduce_read(struct dli_sf *sf, const struct dli_value *params, size_t first,
		       const char *where, const char *const *roles);

/* For the ops table. layer_attach makes the accumulators of every selected tensor (and slot), with
 * the histogram and the reduction as configured; inspect_tensor_enabled is the schedule's. */
int dli_sf_layer_attach(void *instance, const char *layer_name, void **layer_state);
void dli_sf_layer_detach(void *instance, void *layer_state);
bool dli_sf_inspect_tensor_enabled(const struct dli_feature_call *c, int tensor, int64_t iteration,
				   int64_t *next);

/* The layer's accumulators for `tensor`, NULL when the instance does not select it. */
struct dli_sf_tensor *dli_sf_tensor(const struct dli_feature_call *c, int tensor);
/* Whether `t` is the weight and was already added in this step: microbatches merge, but the
 * weight is the same tensor in each of them, so it counts once. Marks it added otherwise. */
bool dli_sf_weight_seen(const struct dli_feature_call *c, struct dli_sf_tensor *t);
/* After a call that went through dli_sf_weight_seen: when it failed (r) and fed no slot, the
 * weight is taken as not seen in this step, so that a later call of the step (the tensor the
 * host meant) counts. Returns r. */
int dli_sf_weight_done(struct dli_sf_tensor *t, int r);
/* Marks slot `slot` of `t` as fed this step when r is 0; returns r. */
int dli_sf_added(struct dli_sf_tensor *t, unsigned slot, int r);

/* The record to log: `{layer}_{tensor}_{log_name}{mark}` for each wanted statistic whose slot has
 * a record (have[slot]), in the config's order, then the histogram of `hist_acc` when the feature
 * keeps one. mark[slot] is "" or "_rank<r>" (a failed reduction). Returns 0 or the first error
 * (a logger's, or -ENOMEM for a tag). */
int dli_sf_emit(const struct dli_sf *sf, struct dli_context *ctx, const char *layer,
		const char *tensor, int64_t iteration, const struct dli_stats_record *rec,
		const bool *have, const char (*mark)[32], struct dli_stats_acc *hist_acc);

/* For the ops table's step_end: for every tensor fed this step, at a scheduled step, reads each
 * slot and emits (dli_sf_emit); then resets. A slot that saw nothing, or only empty tensors,
 * logs nothing rather than NaN: it needs FP8-compared elements or any element, or for a slot
 * the host's quantized tensors may feed a scale_inv (a quantized tensor without hp still has
 * its scale_inv range). A slot with a mirror that nothing fed this step logs its mirror's
 * record; one fed only empty tensors logs nothing. */
void dli_sf_step_end(const struct dli_feature_call *c, int64_t iteration);

#endif
