/* Diagnostics (core/diagnose.c): tensors described, dli_last_error, failed modify calls and the
 * config the host's calls never reached. */
#ifndef DLI_DIAGNOSE_PRIVATE_H
#define DLI_DIAGNOSE_PRIVATE_H

#include <stddef.h>
#include <stdint.h>

#include <dlinspect/plugin.h>

#include "error-private.h" /* dli_clip_name */

struct dli_binding;

/* Reports a failed dli_modify_tensor (`b` NULL when no feature modifies at this iteration):
 * every one in the message log and dli_last_error, the first also on stderr. */
void dli_modify_failed(struct dli_layer *l, const struct dli_binding *b, int gemm, int tensor,
		       int64_t iteration, int rc, const struct dli_tensor *in,
		       const struct dli_tensor *out);

/* "bf16[4x8] cuda:0 non-contiguous", or "NULL". */
void dli_tensor_describe(char *buf, size_t size, const struct dli_tensor *t);

/* Stores `text` as this thread's dli_last_error for `ctx`. */
void dli_last_error_set(const struct dli_context *ctx, const char *text);

/* Warns once about config that the host's calls never reached: sections that selected none of the
 * layers the host asked for, features configured for GEMMs or tensors the host never asked about.
 * Called at the end of the first step, or at dli_destroy when no step ran. */
void dli_report_silent_noops(struct dli_context *ctx);

/* Warns, at dli_destroy, when features took tensors but no dli_step ever ran: nothing they
 * gathered was logged. */
void dli_report_unstepped(struct dli_context *ctx);

/* Warns once per context when dli_step ends an iteration in DLI_MODE_EVAL (a host that did not
 * switch back after its evaluation pass inspects nothing from then on). */
void dli_report_step_in_eval(struct dli_context *ctx);

#endif
