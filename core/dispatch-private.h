/* Layer handles' per-call tables and the calls that read them (core/dispatch.c). */
#ifndef DLI_DISPATCH_PRIVATE_H
#define DLI_DISPATCH_PRIVATE_H

#include <stdbool.h>
#include <stdint.h>

#include <dlinspect/plugin.h>

struct dli_binding;

/* Reports a feature's failed inspect call: the first of the context as an error (message log and
 * stderr) naming layer, tensor, iteration and feature; every one counted. */
void dli_inspect_failed(struct dli_layer *l, const struct dli_binding *b, const char *call,
			int gemm, int tensor, int64_t iteration, int rc);

/* Set by dli_layer_plan while it asks the slots. */
extern _Thread_local bool dli_planning;

/* Builds the handle for `name`; called by dli_layer_get under layers_lock. */
int dli_layer_create(struct dli_context *ctx, const char *name, struct dli_layer **out,
		     struct dli_error *err);
void dli_layer_destroy(struct dli_layer *layer);
/* Builds, into a new *staged, the tables `l` would have under ctx's current feature instances;
 * dli_layer_commit swaps them into `l` (whose old tables are then detached and freed), and
 * dli_layer_unstage drops a staged copy not committed (core/reload.c). */
int dli_layer_stage(struct dli_layer *l, struct dli_layer **staged, struct dli_error *err);
void dli_layer_commit(struct dli_layer *l, struct dli_layer *staged);
void dli_layer_unstage(struct dli_layer *staged);

/* Drops every cached answer (dli_iteration_set). */
void dli_layer_forget(struct dli_layer *layer);

/* A call's answer when no feature applies. */
static inline bool answer_default(bool dflt, int64_t *next)
{
	if (next)
		*next = DLI_NEVER;
	return dflt;
}

#endif
