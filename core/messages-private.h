/* Messages (core/messages.c): the message log and stderr, the loggers' fan-out, and the inspect
 * call a message comes from. */
#ifndef DLI_MESSAGES_PRIVATE_H
#define DLI_MESSAGES_PRIVATE_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <dlinspect/dlinspect.h>
#include <dlinspect/plugin.h>

struct dli_layer;

/* "error", "warning", "info", "debug": enum dli_log_level's names. */
extern const char *const dli_log_level_names[4];

/* "dlinspect: [what: ]text" on stderr, one line whatever the text holds: messages quote layer names,
 * which are the host's (core/escape-private.h). */
void dli_stderr_line(const char *what, const char *text);

/* dli_log's body; `quiet` keeps the message off stderr whatever its level. */
void dli_log_va(struct dli_context *ctx, enum dli_log_level level, bool quiet, const char *fmt,
		va_list ap);

/* dli_log for messages that go only to the message logs, never to stderr, whatever the level. */
void dli_log_quiet(struct dli_context *ctx, enum dli_log_level level, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

/* Fans a scalar out to every logger; reports each logger's first failure once. */
int dli_context_emit_scalar(struct dli_context *ctx, const char *name, int64_t iteration,
			    double value);

/* Fans a histogram out to the loggers that take them, same error rule as scalars. */
int dli_context_emit_histogram(struct dli_context *ctx, const char *name, int64_t iteration,
			       const struct dli_histogram *h);

/* The layer and tensor of the inspect call this thread is in (set by core/dispatch.c around the
 * features' inspect methods; NULL outside one). */
extern _Thread_local const struct dli_layer *dli_site_layer;
extern _Thread_local int dli_site_tensor;

/* For messages of code that only sees a tensor (statistics refusals): writes
 * " (layer 'x', tensor 'y')" into buf, or "" outside an inspect call. */
void dli_call_site(char *buf, size_t size);

#endif
