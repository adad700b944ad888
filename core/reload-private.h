/* Live config reload (core/reload.c). */
#ifndef DLI_RELOAD_PRIVATE_H
#define DLI_RELOAD_PRIVATE_H

#include <dlinspect/dlinspect.h>

/* Reload state from the options and the environment, after the config is in force (0 or -EINVAL
 * with *err set); the check dli_step makes; freeing. */
int dli_reload_init(struct dli_context *ctx, const struct dli_options *o, const char *path,
		    struct dli_error *err);
void dli_reload_at_step(struct dli_context *ctx);
/* Sets ctx->reload.cap for the iteration in force (after dli_step and dli_iteration_set). */
void dli_reload_cap(struct dli_context *ctx);
void dli_reload_finish(struct dli_context *ctx);

#endif
