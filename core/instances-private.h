/* Feature instances (core/instances.c). */
#ifndef DLI_INSTANCES_PRIVATE_H
#define DLI_INSTANCES_PRIVATE_H

#include <dlinspect/plugin.h>

/* Creates ctx->instances from ctx->config's targets / destroys them. */
int dli_instances_create(struct dli_context *ctx, struct dli_error *err);
void dli_instances_destroy(struct dli_context *ctx);

#endif
