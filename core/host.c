/* The host table every module gets: the core's functions behind struct dli_host (plugin.h). */
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>

#include "context-private.h"
#include "fp8-private.h"
#include "fsutil-private.h"
#include "host-private.h"
#include "messages-private.h"
#include "names-private.h"
#include "reduce-private.h"
#include "schedule-private.h"
#include "stats-private.h"

static void host_log(struct dli_context *ctx, enum dli_log_level level, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
static void host_log(struct dli_context *ctx, enum dli_log_level level, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	dli_log_va(ctx, level, false, fmt, ap);
	va_end(ap);
}

/* The thread's refusal text: what dli_inspect_failed and dli_modify_failed append (stats.c). */
static void host_fail_reason(struct dli_context *ctx, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
static void host_fail_reason(struct dli_context *ctx, const char *fmt, ...)
{
	va_list ap;
	(void)ctx;
	va_start(ap, fmt);
	vsnprintf(dli_stats_refusal, sizeof dli_stats_refusal, fmt, ap);
	va_end(ap);
}

static int host_log_level(const struct dli_context *ctx)
{
	return ctx->log_level;
}

static int64_t host_iteration(const struct dli_context *ctx)
{
	return ctx->iteration;
}

static int host_rank(const struct dli_context *ctx)
{
	return ctx->rank;
}

static int host_world_size(const struct dli_context *ctx)
{
	return ctx->world_size;
}

static const char *host_log_dir(const struct dli_context *ctx)
{
	return ctx->log_dir;
}

static const char *host_gemm_name(enum dli_gemm gemm)
{
	return dli_gemm_name(gemm);
}

static const char *host_tensor_name(const struct dli_context *ctx, int tensor)
{
	if (tensor < 0 || (size_t)tensor >= ctx->n_tensors)
		return NULL;
	return ctx->config ? ctx->config->tensor_names[tensor] : NULL;
}

/* The first request wins; those racing it (other threads' features) are dropped, not waited for. */
static void host_request_stop(struct dli_context *ctx, const char *reason)
{
	int none = 0;
	if (!ctx || !atomic_compare_exchange_strong(&ctx->stop_state, &none, 1))
		return;
	snprintf(ctx->stop_reason, sizeof ctx->stop_reason, "%s",
		 reason && reason[0] ? reason : "a feature asked the host to stop");
	atomic_store(&ctx->stop_state, 2);
}

const struct dli_host dli_host_template = {
	.size = sizeof(struct dli_host),
	.abi_major = DLI_ABI_MAJOR,
	.abi_minor = DLI_ABI_MINOR,
	.log = host_log,
	.iteration = host_iteration,
	.rank = host_rank,
	.world_size = host_world_size,
	.log_dir = host_log_dir,
	.emit_scalar = dli_context_emit_scalar,
	.emit_histogram = dli_context_emit_histogram,
	.fp8_cast = dli_fp8_cast,
	.schedule_active = dli_schedule_active,
	.schedule_next = dli_schedule_next,
	.schedule_query = dli_schedule_query,
	.gemm_name = host_gemm_name,
	.tensor_name = host_tensor_name,
	/* Statistics (core/stats.c, kernels/). */
	.stats_acc_create = dli_stats_acc_create,
	.stats_acc_destroy = dli_stats_acc_destroy,
	.stats_add = dli_stats_add,
	.stats_add_quantized = dli_stats_add_quantized,
	.stats_acc_read = dli_stats_acc_read,
	.stats_acc_reset = dli_stats_acc_reset,
	.stats_value = dli_stats_value,
	.stat_name = dli_stat_name,
	.fp8_scale = dli_fp8_scale,
	.tensor_amax = dli_tensor_amax,
	.stats_acc_histogram = dli_stats_acc_histogram,
	.stats_acc_read_histogram = dli_stats_acc_read_histogram,
	.make_dirs = dli_make_dirs,
	.stats_acc_read_sized = dli_stats_acc_read_sized,
	.stats_value_sized = dli_stats_value_sized,
	.request_stop = host_request_stop,
	.stats_add_block = dli_stats_add_block,
	.block_fake_quant = dli_block_fake_quant,
	.stats_acc_share = dli_stats_acc_share,
	.stats_acc_scope = dli_stats_acc_scope,
	.stats_add_block_quantized = dli_stats_add_block_quantized,
	.block_dynamic_range = dli_tensor_block_range,
	.fail_reason = host_fail_reason,
	.log_level = host_log_level,
};
