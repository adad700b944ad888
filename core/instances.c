/* Feature instances: one created per config target (dli_init, a config reload). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "context-private.h"
#include "error-private.h"
#include "instances-private.h"

int dli_instances_create(struct dli_context *ctx, struct dli_error *err)
{
	struct dli_config *cfg = ctx->config;
	ctx->instances = calloc(cfg->n_targets + 1, sizeof *ctx->instances);
	if (!ctx->instances)
		return dli_error_set(err, -ENOMEM, NULL, "out of memory");
	for (size_t i = 0; i < cfg->n_targets; i++) {
		const struct dli_target *t = &cfg->targets[i];
		const struct dli_feature_desc *d = t->feature->desc;
		struct dli_feature_create_args args = {
			.size = sizeof args,
			.ctx = ctx,
			.host = &ctx->host,
			.where = t->where_text,
			.section = t->section->name,
			.params = t->params,
			.n_params = d->n_params,
			.schedule = (d->flags & DLI_FEATURE_SCHEDULED) ? &t->schedule : NULL,
			.gemms = (d->flags & DLI_FEATURE_GEMMS) ? t->gemms : 0,
			.tensors = (d->flags & DLI_FEATURE_TENSORS) ? t->tensors : 0,
		};
		struct dli_instance *inst = &ctx->instances[ctx->n_instances];
		inst->target = t;
		inst->ops = d->ops;
		struct dli_error perr = {.code = -EINVAL};
		int r = d->ops->create(&args, &inst->state, &perr);
		if (r) {
			*err = perr;
			err->code = r;
			if (!err->message[0]) /* the module said nothing: its errno says something */
				snprintf(err->message, sizeof err->message, "%s (%d)", strerror(-r), r);
			/* Which file the failing code lives in, as the loader's messages name a module:
			 * a plugin dir may hold a stale or foreign build of it. */
			return dli_error_prefix(err, &t->where,
						"%s.%s: module '%s' (%s) could not create the feature: ",
						t->section->name, d->name, t->feature->module->name,
						t->feature->path);
		}
		ctx->n_instances++;
	}
	return 0;
}

void dli_instances_destroy(struct dli_context *ctx)
{
	for (size_t i = ctx->n_instances; i-- > 0;)
		if (ctx->instances[i].ops->destroy)
			ctx->instances[i].ops->destroy(ctx->instances[i].state);
	free(ctx->instances);
	ctx->instances = NULL;
	ctx->n_instances = 0;
}
