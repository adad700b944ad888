/* Statistics accumulators behind the host table's stats_* calls (core/stats.c): host memory goes
 * through the CPU kernels, device memory through the CUDA backend module. */
#ifndef DLI_STATS_PRIVATE_H
#define DLI_STATS_PRIVATE_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>

#include <dlinspect/plugin.h>

#include "kernels-private.h"


struct dli_stats_backend;

void dli_stats_backend_init(struct dli_stats_backend *b, struct dli_context *ctx);
void dli_stats_backend_finish(struct dli_stats_backend *b);

/* Why the statistics last refused a tensor on this thread, or why a feature said it failed (host
 * fail_reason); "" when neither since the dispatcher cleared it: a failing feature call's
 * dli_last_error ends with it. */
extern _Thread_local char dli_stats_refusal[384];

/* The host table members of the same names; see dlinspect/plugin.h for their contracts. */
struct dli_stats_acc *dli_stats_acc_create(struct dli_context *ctx);
void dli_stats_acc_destroy(struct dli_stats_acc *acc);
int dli_stats_add(struct dli_stats_acc *acc, const struct dli_tensor *t,
		  const struct dli_fp8_spec *fp8);
int dli_stats_add_quantized(struct dli_stats_acc *acc, const struct dli_tensor *hp,
			    const struct dli_quantized_tensor *q);
int dli_stats_acc_read(struct dli_stats_acc *acc, struct dli_stats_record *out);
int dli_stats_acc_read_sized(struct dli_stats_acc *acc, struct dli_stats_record *out, size_t size);
double dli_stats_value_sized(const struct dli_stats_record *r, size_t size, enum dli_stat stat);
void dli_stats_acc_reset(struct dli_stats_acc *acc);
int dli_stats_acc_histogram(struct dli_stats_acc *acc, bool on);
int dli_stats_acc_read_histogram(struct dli_stats_acc *acc, struct dli_histogram *out);
/* One read of a tensor for every feature that inspects it (core/dispatch.c brackets each
 * dli_inspect_tensor with these): between begin and end, on the calling thread, the first
 * statistics pass over `t` (that very descriptor) is kept, and a later stats_add of `t` merges the
 * kept record instead of reading the tensor again. The record is the same bits either way. */
void dli_stats_share_begin(const struct dli_tensor *t);
void dli_stats_share_end(void);
/* Statistics passes over host tensors that this thread made (tests count reads with it). */
extern _Thread_local unsigned long long dli_stats_host_passes;

/* The host table's stats_add_block. */
int dli_stats_add_block_quantized(struct dli_stats_acc *acc, const struct dli_tensor *hp,
				  const struct dli_block_quantized_tensor *q);
int dli_stats_add_block(struct dli_stats_acc *acc, const struct dli_tensor *t,
			const struct dli_block_spec *spec);

/* For the reduction across ranks (core/reduce.c): the accumulator's merged local record (waiting
 * for device work) and, when it keeps a histogram, its counts (DLI_HISTOGRAM_BUCKETS of them) into
 * `counts`; and the reduced record and counts put back in place of what it held. */
int dli_stats_acc_local(struct dli_stats_acc *acc, struct dli_stats_record *rec, uint64_t *counts,
			bool *has_hist);
void dli_stats_acc_replace(struct dli_stats_acc *acc, const struct dli_stats_record *rec,
			   const uint64_t *counts);
struct dli_context *dli_stats_acc_context(const struct dli_stats_acc *acc);
/* The accumulator's entry in the reduction, NULL when not shared; `forget` is called with the
 * share still set when the accumulator is destroyed (the reduction drops it there: statistics
 * never call the reduction themselves). */
struct dli_share;
struct dli_share *dli_stats_acc_get_share(const struct dli_stats_acc *acc);
void dli_stats_acc_set_share(struct dli_stats_acc *acc, struct dli_share *share,
			     void (*forget)(struct dli_context *ctx, struct dli_stats_acc *acc));

#endif
