/* The context's lifecycle (core/context.c). */
#ifndef DLI_LIFECYCLE_PRIVATE_H
#define DLI_LIFECYCLE_PRIVATE_H

#include <stdbool.h>

#include <dlinspect/dlinspect.h>

/* dli_init, and without loggers when `with_loggers` is false: for `dlinspect check`, which must not
 * write logs (messages then go to stderr). dli_context_destroy is dli_destroy (core/context.c). */
int dli_context_create(const struct dli_options *options, bool with_loggers,
		       struct dli_context **out, struct dli_error *err);
void dli_context_destroy(struct dli_context *ctx);

#endif
