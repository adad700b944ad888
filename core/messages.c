/* Messages: dli_log and its fan-out to the loggers' log_text, scalars and histograms fanned out to
 * every logger, and the inspect call a message comes from. */
#include <errno.h>
#include <stdatomic.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "context-private.h"
#include "escape-private.h"
#include "diagnose-private.h"
#include "messages-private.h"

const char *const dli_log_level_names[4] = {"error", "warning", "info", "debug"};

/* "dlinspect: [what: ]text" on stderr, one line whatever the text holds: messages quote layer names,
 * which are the host's (core/escape-private.h). */
void dli_stderr_line(const char *what, const char *text)
{
	char line[4096];
	size_t n = dli_escape(line, sizeof line, text);
	/* The terminal gets the start of a very long text; the message log has all of it. */
	fprintf(stderr, "dlinspect: %s%s%s%s\n", what ? what : "", what ? ": " : "", line,
		n >= sizeof line ? "..." : "");
}

void dli_log_va(struct dli_context *ctx, enum dli_log_level level, bool quiet, const char *fmt,
		va_list ap)
{
	if (!ctx || !fmt || (int)level < 0 || (int)level > ctx->log_level)
		return;
	/* Most messages fit the stack buffer; a longer one (a host's log_message of a long text) is
	 * formatted again on the heap rather than cut without a word. */
	char buf[2048], *text = buf, *heap = NULL;
	va_list again;
	va_copy(again, ap);
	int n = vsnprintf(buf, sizeof buf, fmt, ap);
	if (n >= (int)sizeof buf && (heap = malloc((size_t)n + 1))) {
		vsnprintf(heap, (size_t)n + 1, fmt, again);
		text = heap;
	}
	va_end(again);
	size_t taken = 0;
	for (size_t i = 0; i < ctx->n_loggers; i++) {
		const struct dli_logger_ops *ops = ctx->loggers[i].desc->ops;
		if (!ctx->loggers[i].host && DLI_HAS_MEMBER(ops, struct dli_logger_ops, log_text) &&
		    ops->log_text) {
			ops->log_text(ctx->loggers[i].state, level, text);
			taken++;
		}
	}
	/* Errors always reach the terminal too; other messages only when no logger took them. */
	if (!quiet && (level == DLI_LOG_ERROR || (!taken && level <= DLI_LOG_WARNING)))
		dli_stderr_line(dli_log_level_names[level], text);
	free(heap);
}

void dli_log(struct dli_context *ctx, enum dli_log_level level, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	dli_log_va(ctx, level, false, fmt, ap);
	va_end(ap);
}

void dli_log_quiet(struct dli_context *ctx, enum dli_log_level level, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	dli_log_va(ctx, level, true, fmt, ap);
	va_end(ap);
}

/* Folds logger `l`'s result `r` for `what` `name` into the fan-out's first error, which is
 * returned. A failure is reported once per logger: a full disk would otherwise flood every other
 * log. */
static int logger_result(struct dli_context *ctx, struct dli_logger_instance *l, int r, int first,
			 const char *what, const char *name, int64_t iteration)
{
	if (r >= 0)
		return first;
	if (!atomic_exchange(&l->failed, true))
		dli_log(ctx, DLI_LOG_ERROR,
			"logger '%s' could not write %s'%s' at iteration %lld: %s (further errors of "
			"this logger are not reported; training continues)",
			l->desc->name, what, name, (long long)iteration, strerror(-r));
	return first ? first : r;
}

int dli_context_emit_scalar(struct dli_context *ctx, const char *name, int64_t iteration,
			    double value)
{
	int first = 0;
	for (size_t i = 0; i < ctx->n_loggers; i++) {
		struct dli_logger_instance *l = &ctx->loggers[i];
		if (l->messages_only)
			continue;
		int r = l->desc->ops->log_scalar(l->state, name, iteration, value);
		first = logger_result(ctx, l, r, first, "", name, iteration);
	}
	return first;
}

int dli_log_scalar(struct dli_context *ctx, const char *name, int64_t iteration, double value)
{
	if (!ctx)
		return -EINVAL;
	if (!name || !name[0] || iteration < 0) {
		char clip[DLI_CLIP_NAME + 4];
		dli_log(ctx, DLI_LOG_ERROR, "dli_log_scalar(%s%s%s, %lld): %s; nothing logged",
			name ? "'" : "", name ? dli_clip_name(clip, sizeof clip, name) : "NULL",
			name ? "'" : "", (long long)iteration,
			!name ? "the name is NULL" : !name[0] ? "the name is empty"
							     : "an iteration is >= 0");
		return -EINVAL;
	}
	return dli_context_emit_scalar(ctx, name, iteration, value);
}

int dli_context_emit_histogram(struct dli_context *ctx, const char *name, int64_t iteration,
			       const struct dli_histogram *h)
{
	int first = 0;
	for (size_t i = 0; i < ctx->n_loggers; i++) {
		struct dli_logger_instance *l = &ctx->loggers[i];
		const struct dli_logger_ops *ops = l->desc->ops;
		if (l->messages_only || !DLI_HAS_MEMBER(ops, struct dli_logger_ops, log_histogram) ||
		    !ops->log_histogram)
			continue;
		int r = ops->log_histogram(l->state, name, iteration, h);
		first = logger_result(ctx, l, r, first, "the histogram ", name, iteration);
	}
	return first;
}

/* The inspect call this thread is in: set around the features' inspect methods only (a thread-local
 * store each, core/dispatch.c), so that a statistics refusal can name what it refused. */
_Thread_local const struct dli_layer *dli_site_layer;
_Thread_local int dli_site_tensor;

void dli_call_site(char *buf, size_t size)
{
	const struct dli_layer *site_layer = dli_site_layer;
	const char *tname = site_layer ? site_layer->ctx->host.tensor_name(site_layer->ctx,
									     dli_site_tensor)
				       : NULL;
	char lname[DLI_CLIP_NAME + 4], tclip[DLI_CLIP_NAME + 4];
	if (site_layer)
		snprintf(buf, size, " (layer '%s', tensor '%s')",
			 dli_clip_name(lname, sizeof lname, site_layer->name),
			 dli_clip_name(tclip, sizeof tclip, tname));
	else if (size)
		buf[0] = 0;
}
