/* NVTX ranges (core/nvtx-private.h) through NVIDIA's header-only NVTX3: the header loads the
 * profiler's injection library named by NVTX_INJECTION64_PATH at the first call, so a run outside
 * nsys pays one call into an empty stub per range, and a run with ranges off pays nothing. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "context-private.h"
#include "messages-private.h"
#include "nvtx-private.h"

#ifdef DLI_HAVE_NVTX
#include <nvtx3/nvToolsExt.h>
#endif

const char *dli_nvtx_name(char *buf, size_t size, const char *a, const char *b, const char *c)
{
	snprintf(buf, size, "dlinspect/%s%s%s%s%s", a ? a : "?", b ? "/" : "", b ? b : "",
		 c ? "/" : "", c ? c : "");
	return buf;
}

/* Range names are formatted here, per thread: no allocation on the way into a feature. */
static _Thread_local char range_name[512];

#ifdef DLI_HAVE_NVTX
void dli_nvtx_push(const char *feature, const char *layer, const char *what)
{
	nvtxRangePushA(dli_nvtx_name(range_name, sizeof range_name, feature, layer, what));
}

void dli_nvtx_push_step(int64_t iteration)
{
	char it[24];
	snprintf(it, sizeof it, "%lld", (long long)iteration);
	nvtxRangePushA(dli_nvtx_name(range_name, sizeof range_name, "step", it, NULL));
}

void dli_nvtx_pop(void)
{
	nvtxRangePop();
}
#else
void dli_nvtx_push(const char *feature, const char *layer, const char *what)
{
	(void)range_name;
}

void dli_nvtx_push_step(int64_t iteration)
{
}

void dli_nvtx_pop(void)
{
}
#endif

int dli_nvtx_setup(struct dli_context *ctx, struct dli_error *err)
{
	if (err) {
		const char *env = getenv("DLINSPECT_NVTX");
		ctx->nvtx_env = -1;
		if (env && env[0]) {
			if (!strcmp(env, "1") || !strcasecmp(env, "true") || !strcasecmp(env, "on"))
				ctx->nvtx_env = 1;
			else if (!strcmp(env, "0") || !strcasecmp(env, "false") ||
				 !strcasecmp(env, "off"))
				ctx->nvtx_env = 0;
			else
				return dli_error_set(err, -EINVAL, NULL,
						     "DLINSPECT_NVTX='%s': expected 1 or 0 (or "
						     "true/false)",
						     env);
		}
	}
	bool want = ctx->nvtx_env >= 0 ? ctx->nvtx_env == 1 : ctx->config && ctx->config->nvtx;
#ifdef DLI_HAVE_NVTX
	ctx->nvtx = want;
#else
	ctx->nvtx = false;
	if (want) {
		char where[600] = "DLINSPECT_NVTX=1";
		if (ctx->nvtx_env < 0)
			snprintf(where, sizeof where, "%s:%d:%d: nvtx: true", ctx->config->path,
				 ctx->config->nvtx_where.line, ctx->config->nvtx_where.column);
		dli_log(ctx, DLI_LOG_WARNING,
			"%s: this libdlinspect was built without NVTX (no nvtx3/nvToolsExt.h from "
			"the CUDA toolkit at build time): no NVTX ranges are emitted",
			where);
	}
#endif
	return 0;
}
