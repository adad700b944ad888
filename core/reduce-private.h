/* Statistics across ranks (core/reduce.c, docs/distributed.md): the context's communicator, the
 * accumulators features shared with stats_acc_share, and their reduction at each dli_step. */
#ifndef DLI_REDUCE_PRIVATE_H
#define DLI_REDUCE_PRIVATE_H

#include <stdbool.h>
#include <stdint.h>

#include <dlinspect/dlinspect.h>
#include <dlinspect/plugin.h>

struct dli_reduce;

/* Picks the communicator: the host's (options->comm_ops), else the module DLINSPECT_COMMUNICATOR
 * names (loaded by name from the plugin path). Sets ctx->rank and ctx->world_size from it. No
 * communicator: ctx->reduce stays NULL and 0 is returned. Runs before the loggers are made. */
int dli_reduce_open(struct dli_context *ctx, const struct dli_options *options,
		    struct dli_error *err);
/* Says once (INFO) how this run treats statistics across ranks; after the loggers exist. */
void dli_reduce_announce(struct dli_context *ctx);
/* Reduces the shared accumulators whose schedule selects `iteration`; dli_step, before step_end. */
void dli_reduce_step(struct dli_context *ctx, int64_t iteration);
/* Empties the accumulators dli_reduce_step filled with their group's merge; dli_step, after every
 * step_end read them. Accepts a context without a communicator. */
void dli_reduce_step_end(struct dli_context *ctx);
/* Closes the communicator; after every accumulator is gone. Accepts a context without one. */
void dli_reduce_close(struct dli_context *ctx);

/* The host table members (plugin.h). */
int dli_stats_acc_share(struct dli_stats_acc *acc, const struct dli_stats_share *share);
int dli_stats_acc_scope(struct dli_stats_acc *acc);
/* A config reload (core/reload.c) makes its feature instances while the old ones, sharing the
 * same keys, still exist: +1 before it makes them, -1 when it gives them up. A key is refused as
 * a duplicate only within one generation. Destroying an accumulator removes its share. */
void dli_reduce_generation(struct dli_context *ctx, int delta);
/* Removes a destroyed accumulator's share (dli_stats_acc_set_share hands it to core/stats.c). */
void dli_reduce_forget(struct dli_context *ctx, struct dli_stats_acc *acc);

#endif
