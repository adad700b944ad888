/* NVTX ranges around dlinspect's work (core/nvtx.c): `nvtx: true` in the config or DLINSPECT_NVTX=1
 * makes an nsys profile show what debugging costs. Without NVTX3's header at build time the ranges
 * are compiled out and DLI_NVTX_ON is the constant 0. */
#ifndef DLI_NVTX_PRIVATE_H
#define DLI_NVTX_PRIVATE_H

#include <stddef.h>
#include <stdint.h>

struct dli_context;
struct dli_error;

/* The hot path's test: one load of a flag that changes only at dli_init and at a reload (inside
 * dli_step), so push and pop of one call always pair. */
#ifdef DLI_HAVE_NVTX
#define DLI_NVTX_ON(ctx) __builtin_expect(!!(ctx)->nvtx, 0)
#else
#define DLI_NVTX_ON(ctx) 0
#endif

/* "dlinspect/a/b/c" (b and c left out when NULL) into buf, truncated to `size`; returns buf.
 * No allocation. */
const char *dli_nvtx_name(char *buf, size_t size, const char *a, const char *b, const char *c);

/* Pushes a range "dlinspect/feature/layer/what" (formatted into a per-thread buffer), or
 * "dlinspect/step/<iteration>"; pops the innermost. Only called when DLI_NVTX_ON. */
void dli_nvtx_push(const char *feature, const char *layer, const char *what);
void dli_nvtx_push_step(int64_t iteration);
void dli_nvtx_pop(void);

/* Sets ctx->nvtx from DLINSPECT_NVTX (which wins) or the config's `nvtx`, warning when asked in a
 * build without NVTX; at dli_init and after a reload. 0, or -EINVAL with *err for a bad
 * DLINSPECT_NVTX (err may be NULL after init: then the variable was checked already). */
int dli_nvtx_setup(struct dli_context *ctx, struct dli_error *err);

#endif
