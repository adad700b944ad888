/* Logic that several bundled features share, header-only so that each module still links nothing
 * but what the host table gives it. Not installed: out-of-tree plugins copy what they need. */
#ifndef DLI_FEATURE_UTIL_H
#define DLI_FEATURE_UTIL_H

#include <errno.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <dlinspect/plugin.h>

/* The range of a current-scaling `margin` (scale = fp8_max / amax / 2^margin): beyond +-126 the
 * scale leaves float's normal range for any amax near 1, so every value would be 0 or saturated. */
#define DLI_FP8_MARGIN_RANGE .bounded = true, .min = -126, .max = 126

/* *dst = *src with its own copy of the ranges: config memory is gone after create. 0 or -ENOMEM;
 * free((void *)dst->ranges) when done (NULL without ranges). */
static inline int dli_feature_schedule_copy(struct dli_schedule *dst, const struct dli_schedule *src)
{
	*dst = *src;
	if (!src->n_ranges)
		return 0;
	size_t bytes = src->n_ranges * sizeof(struct dli_int_pair);
	struct dli_int_pair *ranges = malloc(bytes);
	if (!ranges)
		return -ENOMEM;
	dst->ranges = memcpy(ranges, src->ranges, bytes);
	return 0;
}

/* TransformerEngine's hybrid recipe: E5M2's range for the backward pass's tensors (gradients),
 * E4M3's precision for the forward pass's. */
static inline enum dli_dtype dli_feature_hybrid_format(int tensor)
{
	bool backward = tensor == DLI_TENSOR_GRADIENT || tensor == DLI_TENSOR_DGRAD ||
			tensor == DLI_TENSOR_WGRAD;
	return backward ? DLI_DTYPE_F8E5M2 : DLI_DTYPE_F8E4M3;
}

/* Whether the host has the statistics calls (a test's stand-in table may lack them): a feature
 * refuses to make an instance there rather than crash at the first tensor. Says so in err. */
static inline bool dli_feature_has_stats(const struct dli_host *host, struct dli_error *err)
{
	if (DLI_HAS_MEMBER(host, struct dli_host, fp8_scale) && host->stats_add)
		return true;
	snprintf(err->message, sizeof(err->message), "the host has no statistics calls");
	return false;
}

/* Whether the host has the current-scaling cast calls (ABI 1.1: a 1.0 host has none); says so in
 * err when not. */
static inline bool dli_feature_has_casts(const struct dli_host *host, struct dli_error *err)
{
	if (DLI_HAS_MEMBER(host, struct dli_host, tensor_amax) && host->tensor_amax &&
	    host->fp8_cast && host->fp8_scale)
		return true;
	snprintf(err->message, sizeof(err->message), "the host has no FP8 cast calls");
	return false;
}

/* Says why the feature's method fails (the host's fail_reason, ABI 1.5: the reason joins the call's
 * dli_last_error; an older host has none) and gives r back: `return dli_feature_fail(...)`. */
static inline int dli_feature_fail(const struct dli_host *host, struct dli_context *ctx, int r,
				   const char *fmt, ...) __attribute__((format(printf, 4, 5)));
static inline int dli_feature_fail(const struct dli_host *host, struct dli_context *ctx, int r,
				   const char *fmt, ...)
{
	char text[384];
	va_list ap;

	if (!DLI_HAS_MEMBER(host, struct dli_host, fail_reason) || !host->fail_reason)
		return r;
	va_start(ap, fmt);
	vsnprintf(text, sizeof text, fmt, ap);
	va_end(ap);
	host->fail_reason(ctx, "%s", text);
	return r;
}

/* Whether the host's casts read `in`: contiguous f32, f16 or bf16 in host memory. */
static inline bool dli_feature_cast_input(const struct dli_tensor *in)
{
	return in->device.type == DLI_DEVICE_CPU && in->contiguous &&
	       (in->dtype == DLI_DTYPE_F32 || in->dtype == DLI_DTYPE_F16 ||
		in->dtype == DLI_DTYPE_BF16);
}

/* Whether the host's casts write `out`'s dtype as dequantized values: f32, or f16 / bf16 (their
 * f32 values rounded, as the host's own dequantize writes its input's dtype) from ABI 1.6 on. */
static inline bool dli_feature_dequant_out(const struct dli_host *host, const struct dli_tensor *out)
{
	return out->dtype == DLI_DTYPE_F32 ||
	       ((out->dtype == DLI_DTYPE_F16 || out->dtype == DLI_DTYPE_BF16) &&
		(host->abi_major > 1 || host->abi_minor >= 6));
}

/* Per-tensor current scaling (docs/statistics.md), the cast of FakeQuant and PerTensorScaling:
 * scale = fp8_max / amax(in) / 2^margin, out = cast(in * scale) (FP8 codes, or for an f32 `out`
 * the dequantized values). *scale gets the scale. 0 or the host's error. */
static inline int dli_feature_current_cast(const struct dli_host *host, const struct dli_tensor *in,
					   struct dli_tensor *out, enum dli_dtype format,
					   double margin, float *scale)
{
	float amax;
	int r = host->tensor_amax(in, &amax);

	if (r)
		return r;
	*scale = host->fp8_scale(amax, format, margin);
	return host->fp8_cast(in, out, format, *scale);
}

/* A log tag ("{layer}_{tensor}_{stat}") of any length: layer names come from the host and have no
 * limit, and a tag cut short could make two layers' statistics one. Formatted into `t->buf` when it
 * fits, else into memory of its own; release with dli_feature_tag_free. NULL when out of memory. */
struct dli_feature_tag {
	char buf[256];
	char *heap;
};

#if defined(__GNUC__)
__attribute__((format(printf, 2, 3)))
#endif
static inline const char *dli_feature_tag(struct dli_feature_tag *t, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	int n = vsnprintf(t->buf, sizeof t->buf, fmt, ap);
	va_end(ap);
	t->heap = NULL;
	if (n < 0)
		return NULL;
	if ((size_t)n < sizeof t->buf)
		return t->buf;
	if (!(t->heap = malloc((size_t)n + 1)))
		return NULL;
	va_start(ap, fmt);
	vsnprintf(t->heap, (size_t)n + 1, fmt, ap);
	va_end(ap);
	return t->heap;
}

static inline void dli_feature_tag_free(struct dli_feature_tag *t)
{
	free(t->heap);
	t->heap = NULL;
}

#endif
