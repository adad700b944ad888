/* Statistics accumulators behind the host table's stats_* calls (core/stats.c): host memory goes
 * through the CPU kernels, device memory through the CUDA backend module. */
#ifndef DLI_STATS_PRIVATE_H
#define DLI_STATS_PRIVATE_H

#include <dlinspect/plugin.h>

#include "kernels-private.h"

/* The host table members of the same names; see dlinspect/plugin.h for their contracts. */
struct dli_stats_acc *dli_stats_acc_create(struct dli_context *ctx);
void dli_stats_acc_destroy(struct dli_stats_acc *acc);
int dli_stats_add(struct dli_stats_acc *acc, const struct dli_tensor *t,
		  const struct dli_fp8_spec *fp8);
int dli_stats_add_quantized(struct dli_stats_acc *acc, const struct dli_tensor *hp,
			    const struct dli_quantized_tensor *q);
int dli_stats_acc_read(struct dli_stats_acc *acc, struct dli_stats_record *out);
void dli_stats_acc_reset(struct dli_stats_acc *acc);
int dli_stats_acc_histogram(struct dli_stats_acc *acc, bool on);
int dli_stats_acc_read_histogram(struct dli_stats_acc *acc, struct dli_histogram *out);
/* The host table's tensor_amax (defined in core/fp8.c, beside the casts it serves). */
int dli_tensor_amax(const struct dli_tensor *t, float *amax);

#endif
