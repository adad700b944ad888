/* Statistics across ranks for the statistics features (docs/distributed.md): the config keys that
 * say which group reduces which tensor, and the share call that hands an accumulator to the core.
 * Header-only: each feature module compiles its own copy. */
#ifndef DLI_FEATURE_REDUCE_H
#define DLI_FEATURE_REDUCE_H

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <dlinspect/plugin.h>

/* The keys, appended to a feature's params; DLI_REDUCE_N_PARAMS of them. */
#define DLI_REDUCE_PARAMS                                                                          \
	{.key = "skip_reduction", .type = DLI_PARAM_BOOL, .default_value = "false",                \
	 .doc = "true: every rank logs the statistics of its own shards, not reduced across "      \
		"ranks (nvdlfw_inspect's skip_reduction)"},                                        \
	{.key = "weight_tensor_tp_group_reduce", .type = DLI_PARAM_BOOL, .default_value = "true",  \
	 .doc = "reduce weight statistics across the tensor-parallel group (TransformerEngine's "   \
		"set_weight_tensor_tp_group_reduce); false: each rank logs its weight shard"},     \
	{.key = "tensor_parallel_size", .type = DLI_PARAM_INT, .default_value = "1",               \
	 .doc = "ranks per tensor-parallel group, consecutive ranks (0..n-1, n..2n-1, ...): the "    \
		"group a weight is sharded over; activations and gradients reduce over the world", \
	 .bounded = true, .min = 1, .max = 1024}
#define DLI_REDUCE_N_PARAMS 3

/* A malloc'ed copy of `s`, or NULL. Not strdup: these files are copied into out-of-tree modules
 * built as strict C11 (the templates' -std=c11, no _GNU_SOURCE), where <string.h> does not
 * declare it and the implicit int it becomes cuts the pointer. */
static inline char *dli_feature_strdup(const char *s)
{
	size_t n = strlen(s) + 1;
	char *copy = malloc(n);
	return copy ? memcpy(copy, s, n) : NULL;
}

struct dli_reduce_conf {
	bool skip;       /* skip_reduction */
	bool weight_tp;  /* weight_tensor_tp_group_reduce */
	int tp_size;     /* tensor_parallel_size */
	char *where;     /* the block's "path:line:column"; its "line:column" is in every key */
};

/* Reads the keys from params[first ..]; 0 or -ENOMEM. */
static inline int dli_reduce_conf_read(struct dli_reduce_conf *rc, const struct dli_value *params,
				       size_t first, const char *where)
{
	rc->skip = params[first].u.b;
	rc->weight_tp = params[first + 1].u.b;
	rc->tp_size = (int)params[first + 2].u.i;
	rc->where = dli_feature_strdup(where ? where : "");
	return rc->where ? 0 : -ENOMEM;
}

static inline void dli_reduce_conf_free(struct dli_reduce_conf *rc)
{
	free(rc->where);
	rc->where = NULL;
}

/* Hands `acc`, this rank's shard of `tensor` in `layer`, to the core's reduction, in the group the
 * keys say: the world for activations and gradients, the rank's tensor-parallel group for weights
 * (none with weight_tensor_tp_group_reduce false or skip_reduction). A host without a
 * communicator, or without the call, leaves it per rank. */
static inline void dli_reduce_share(const struct dli_host *host, struct dli_context *ctx,
				    const struct dli_reduce_conf *rc, struct dli_stats_acc *acc,
				    const char *layer, int tensor, const char *role,
				    const struct dli_schedule *schedule)
{
	if (rc->skip || !DLI_HAS_MEMBER(host, struct dli_host, stats_acc_scope) ||
	    !host->stats_acc_share || host->world_size(ctx) <= 1)
		return;
	int ranks[1 << 10];
	size_t n = 0;
	if (tensor == DLI_TENSOR_WEIGHT) {
		int rank = host->rank(ctx), first = rank - rank % rc->tp_size;
		if (!rc->weight_tp || rc->tp_size == 1)
			return;
		/* Checked on every rank, not only where the last group runs past the world: the
		 * other ranks would reduce in groups that the last ranks never join. */
		if (rc->tp_size > (int)(sizeof ranks / sizeof ranks[0]) ||
		    host->world_size(ctx) % rc->tp_size != 0) {
			host->log(ctx, DLI_LOG_ERROR,
				  "%s: tensor_parallel_size %d does not divide the world of %d ranks "
				  "into groups; the weight statistics of layer '%s' stay per rank",
				  rc->where, rc->tp_size, host->world_size(ctx), layer);
			return;
		}
		for (int i = 0; i < rc->tp_size; i++)
			ranks[n++] = first + i;
	}
	const char *tname = host->tensor_name(ctx, tensor);
	char key[1024];
	/* The block by its line and column, not its file's path: the same config read from a copy,
	 * or through another spelling of the path (relative, absolute), must give every rank the
	 * same keys, or nothing would merge while every rank logged its own shard as reduced. */
	const char *place = rc->where + strlen(rc->where);
	for (int colons = 0; place > rc->where && colons < 2;)
		colons += *--place == ':';
	if (*place == ':')
		place++;
	snprintf(key, sizeof key, "%s|%s|%s|%s", place, layer, tname ? tname : "?", role);
	struct dli_stats_share share = {
		.size = sizeof share, .key = key, .schedule = schedule,
		.ranks = n ? ranks : NULL, .n_ranks = n};
	host->stats_acc_share(acc, &share);
}

/* Whether the statistics read at this step's end are this rank's own although they should have
 * been reduced (the collective failed; the core said so): features mark their lines. */
static inline bool dli_reduce_failed(const struct dli_host *host, struct dli_stats_acc *acc)
{
	return DLI_HAS_MEMBER(host, struct dli_host, stats_acc_scope) && host->stats_acc_scope &&
	       host->stats_acc_scope(acc) == DLI_SCOPE_FAILED;
}

#endif
