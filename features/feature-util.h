/* Logic that several bundled features share, header-only so that each module still links nothing
 * but what the host table gives it. Not installed: out-of-tree plugins copy what they need. */
#ifndef DLI_FEATURE_UTIL_H
#define DLI_FEATURE_UTIL_H

#include <errno.h>
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

#endif
