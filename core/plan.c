/* A layer's plan in one call (dli_layer_plan) and the pass mode it answers for (dli_mode_set). */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "context-private.h"
#include "diagnose-private.h"
#include "dispatch-private.h"
#include "messages-private.h"

/* A call refused for how the host called it: dli_last_error and the message log, the first of
 * the run also on stderr (a host that ignores the code would otherwise go on with a zero plan:
 * no FP8, nothing inspected). */
static int refused(struct dli_context *ctx, const char *text)
{
	dli_last_error_set(ctx, text);
	if (!atomic_exchange(&ctx->call_refused, true))
		dli_log(ctx, DLI_LOG_ERROR, "%s (later ones go to the message log only)", text);
	else
		dli_log_quiet(ctx, DLI_LOG_ERROR, "%s", text);
	return -EINVAL;
}

int dli_mode_set(struct dli_context *ctx, enum dli_mode mode)
{
	char text[256];
	if (!ctx)
		return -EINVAL;
	if (mode != DLI_MODE_TRAIN && mode != DLI_MODE_EVAL) {
		snprintf(text, sizeof text,
			 "dli_mode_set: mode %d is neither DLI_MODE_TRAIN (0) nor DLI_MODE_EVAL (1); the "
			 "mode stays %s",
			 (int)mode, ctx->mode == DLI_MODE_EVAL ? "DLI_MODE_EVAL" : "DLI_MODE_TRAIN");
		return refused(ctx, text);
	}
	ctx->mode = (int)mode;
	return 0;
}

enum dli_mode dli_mode_get(const struct dli_context *ctx)
{
	return ctx ? (enum dli_mode)ctx->mode : DLI_MODE_TRAIN;
}

/* The size of the plan as first published: a caller built against these headers or later. */
#define PLAN_SIZE_1 (offsetof(struct dli_layer_plan, any) + sizeof(bool))

static void earliest(int64_t *soonest, int64_t next)
{
	if (next < *soonest)
		*soonest = next;
}

/* The individual calls, asked in a row: the plan is by construction what they answer, and each
 * answer after the first of a step comes from the slot's cache. */
int dli_layer_plan(struct dli_layer *l, struct dli_layer_plan *plan)
{
	char text[512], lname[DLI_CLIP_NAME + 4];
	if (!l || !plan)
		return -EINVAL;
	if (plan->size < PLAN_SIZE_1) {
		snprintf(text, sizeof text,
			 "dli_layer_plan refused the plan of layer '%s': its size is %u, expected "
			 "sizeof(struct dli_layer_plan) (%zu); set it before the call: struct "
			 "dli_layer_plan plan = {.size = sizeof plan}",
			 dli_clip_name(lname, sizeof lname, l->name), (unsigned)plan->size,
			 sizeof(struct dli_layer_plan));
		return refused(l->ctx, text);
	}
	uint32_t size = plan->size;
	if (!atomic_load_explicit(&l->planned, memory_order_relaxed))
		atomic_store_explicit(&l->planned, true, memory_order_relaxed);
	dli_planning = true;
	memset(plan, 0, PLAN_SIZE_1);
	plan->size = size;
	plan->iteration = l->ctx->iteration;
	int64_t soonest = DLI_NEVER, nx;
	int nt = (int)l->ctx->n_tensors;
	for (int g = 0; g < DLI_GEMM_COUNT; g++) {
		plan->fp8[g] = dli_fp8_gemm_enabled(l, (enum dli_gemm)g, &nx);
		earliest(&soonest, nx);
		/* A layer no section selects answers the defaults: nothing to walk. */
		for (int t = 0; l->slots && t < nt; t++) {
			if (dli_modify_tensor_enabled(l, (enum dli_gemm)g, t, &nx))
				plan->modify[g] |= 1ull << t;
			earliest(&soonest, nx);
			if (dli_inspect_tensor_postquantize_enabled(l, (enum dli_gemm)g, t, &nx))
				plan->postquantize[g] |= 1ull << t;
			earliest(&soonest, nx);
		}
	}
	for (int t = 0; l->slots && t < nt; t++) {
		if (dli_inspect_tensor_enabled(l, t, &nx))
			plan->inspect |= 1ull << t;
		earliest(&soonest, nx);
	}
	dli_planning = false;
	plan->next = soonest;
	plan->any = plan->inspect != 0;
	for (int g = 0; g < DLI_GEMM_COUNT; g++)
		plan->any = plan->any || plan->modify[g] || plan->postquantize[g];
	return 0;
}
