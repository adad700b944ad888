/* Telling the host about calls that do nothing: config its calls never reach (warned once, after the
 * first step), failing dli_modify_tensor calls (each in the message log), and dli_last_error. */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "context-private.h"
#include "diagnose-private.h"
#include "escape-private.h"
#include "messages-private.h"
#include "names-private.h"
#include "stats-private.h"

/* ---- dli_last_error: one buffer per thread, tagged with the context it belongs to ----
 * The tag is the context's serial number, not its address: a context created where a destroyed one
 * was must not inherit that one's error. */

static _Thread_local struct {
	uint64_t serial;
	char text[2048];
} last_error;

void dli_last_error_set(const struct dli_context *ctx, const char *text)
{
	last_error.serial = ctx->serial;
	snprintf(last_error.text, sizeof last_error.text, "%s", text);
}

const char *dli_last_error(const struct dli_context *ctx)
{
	return ctx && last_error.serial == ctx->serial ? last_error.text : "";
}

/* ---- Failing dli_modify_tensor ---- */

/* "bf16[4x8] cuda:0 non-contiguous": what a host checks first when a feature refuses a tensor. */
void dli_tensor_describe(char *buf, size_t size, const struct dli_tensor *t)
{
	if (!t) {
		snprintf(buf, size, "NULL");
		return;
	}
	/* what is out of range is said as such, not printed as if it were valid */
	char dtype[32], device[48];
	if (dli_dtype_name(t->dtype))
		snprintf(dtype, sizeof dtype, "%s", dli_dtype_name(t->dtype));
	else
		snprintf(dtype, sizeof dtype, "dtype(%d)", (int)t->dtype);
	if (t->device.type == DLI_DEVICE_CPU || t->device.type == DLI_DEVICE_CUDA)
		snprintf(device, sizeof device, "%s:%d",
			 t->device.type == DLI_DEVICE_CPU ? "cpu" : "cuda", t->device.index);
	else
		snprintf(device, sizeof device, "device type %d", (int)t->device.type);
	if (t->ndim < 0 || t->ndim > DLI_TENSOR_MAX_DIMS) {
		snprintf(buf, size, "%s with ndim %d %s%s", dtype, t->ndim, device,
			 t->contiguous ? "" : " non-contiguous");
		return;
	}
	size_t off = (size_t)snprintf(buf, size, "%s[", dtype);
	for (int i = 0; i < t->ndim && off < size; i++)
		off += (size_t)snprintf(buf + off, size - off, "%s%lld", i ? "x" : "",
					(long long)t->shape[i]);
	if (off < size)
		snprintf(buf + off, size - off, "] %s%s", device, t->contiguous ? "" : " non-contiguous");
}

void dli_modify_failed(struct dli_layer *l, const struct dli_binding *b, int gemm, int tensor,
		       int64_t iteration, int rc, const struct dli_tensor *in,
		       const struct dli_tensor *out)
{
	struct dli_context *ctx = l->ctx;
	const char *tname = ctx->host.tensor_name(ctx, tensor);
	const char *gname = ctx->host.gemm_name((enum dli_gemm)gemm);
	char why[1600], tin[128], tout[128], text[2048], gdesc[48], tdesc[300];
	if (b) {
		const struct dli_target *t = b->instance->target;
		dli_tensor_describe(tin, sizeof tin, in);
		dli_tensor_describe(tout, sizeof tout, out);
		/* The feature's own reason (host fail_reason), when it gave one. */
		char sname[DLI_CLIP_NAME + 4], where[DLI_CLIP_NAME + 4];
		snprintf(why, sizeof why,
			 "feature %s (section '%s', %s) refused: %s (%d)%s%s; in: %s, out: %s",
			 t->feature->desc->name, dli_clip_name(sname, sizeof sname, t->section->name),
			 dli_clip_name(where, sizeof where, t->where_text),
			 strerror(rc < 0 ? -rc : rc), rc, dli_stats_refusal[0] ? ": " : "",
			 dli_stats_refusal, tin, tout);
	} else {
		snprintf(why, sizeof why,
			 "no feature modifies it at this iteration%s (%s; ask "
			 "dli_modify_tensor_enabled or dli_layer_plan first)",
			 ctx->mode != DLI_MODE_TRAIN ? " in an evaluation pass" : "",
			 strerror(rc < 0 ? -rc : rc));
	}
	/* ids out of range by their number */
	if (gname)
		snprintf(gdesc, sizeof gdesc, "%s", gname);
	else
		snprintf(gdesc, sizeof gdesc, "id %d (not a GEMM)", gemm);
	char tclip[DLI_CLIP_NAME + 4];
	if (tname)
		snprintf(tdesc, sizeof tdesc, "'%s'", dli_clip_name(tclip, sizeof tclip, tname));
	else
		snprintf(tdesc, sizeof tdesc, "id %d (not a tensor of this context)", tensor);
	char lname[DLI_CLIP_NAME + 4];
	snprintf(text, sizeof text,
		 "dli_modify_tensor failed on layer '%s', gemm %s, tensor %s, iteration %lld: %s",
		 dli_clip_name(lname, sizeof lname, l->name), gdesc, tdesc, (long long)iteration,
		 why);
	dli_last_error_set(ctx, text);
	/* Every failure is in the message log; the terminal gets the first only. */
	if (atomic_fetch_add(&ctx->modify_failures, 1) == 0)
		dli_log(ctx, DLI_LOG_ERROR, "%s (later failures go to the message log only)", text);
	else
		dli_log_quiet(ctx, DLI_LOG_ERROR, "%s", text);
}

/* ---- Config the host's calls never reached ---- */

/* "[fprop, wgrad]" from a bit mask; "(none)" when empty. */
static void gemm_list(char *buf, size_t size, uint32_t mask)
{
	if (!mask) {
		snprintf(buf, size, "(none)");
		return;
	}
	size_t off = (size_t)snprintf(buf, size, "[");
	for (int g = 0; g < DLI_GEMM_COUNT && off < size; g++)
		if (mask >> g & 1u)
			off += (size_t)snprintf(buf + off, size - off, "%s%s", off > 1 ? ", " : "",
						dli_gemm_name(g));
	if (off < size)
		snprintf(buf + off, size - off, "]");
}

static void tensor_list(struct dli_context *ctx, char *buf, size_t size, uint64_t mask)
{
	if (!mask) {
		snprintf(buf, size, "(none)");
		return;
	}
	size_t off = (size_t)snprintf(buf, size, "[");
	for (size_t t = 0; t < ctx->n_tensors && off < size; t++)
		if (mask >> t & 1u)
			off += (size_t)snprintf(buf + off, size - off, "%s%s", off > 1 ? ", " : "",
						ctx->host.tensor_name(ctx, (int)t));
	if (off < size)
		snprintf(buf + off, size - off, "]");
}

static void warn(struct dli_context *ctx, const char *text)
{
	/* A mistake that makes the whole config do nothing: said where people look, as the
	 * config's loud warnings are. */
	char line[4096];
	dli_log_quiet(ctx, DLI_LOG_WARNING, "%s", text);
	if (ctx->log_level < DLI_LOG_WARNING)
		return; /* the user asked for errors only (DLINSPECT_LOG_LEVEL): the terminal too */
	dli_escape(line, sizeof line, text); /* layer names are the host's: one line whatever they hold */
	fprintf(stderr, "dlinspect: warning: %s\n", line);
}

/* Sections that selected none of the layers the host asked for. */
static void report_sections(struct dli_context *ctx, const bool *bound)
{
	const struct dli_config *cfg = ctx->config;
	char text[1024];
	for (size_t s = 0; s < cfg->n_sections; s++) {
		const struct dli_section *sec = &cfg->sections[s];
		bool used = false;
		for (size_t i = sec->first_target; i < sec->first_target + sec->n_targets; i++)
			used = used || bound[i];
		if (!sec->enabled || !sec->n_targets || used)
			continue;
		snprintf(text, sizeof text,
			 "section '%s' (%s:%d:%d) selected none of the %zu layers the host asked for "
			 "(e.g. '%s'): its features never act; check its 'layers:' block",
			 sec->name, cfg->path, sec->where.line, sec->where.column, ctx->n_layers,
			 ctx->layer_list[0]->name);
		warn(ctx, text);
	}
}

/* Features bound to layers on which the host never asked a call they serve. */
static void report_targets(struct dli_context *ctx, const bool *bound, const bool *asked,
			   const uint32_t *gemms, const uint64_t *tensors)
{
	const struct dli_config *cfg = ctx->config;
	char text[2048], want_g[64], want_t[384], got_g[64], got_t[384];
	for (size_t i = 0; i < ctx->n_instances; i++) {
		if (!bound[i] || asked[i])
			continue;
		const struct dli_target *t = &cfg->targets[i];
		const struct dli_feature_desc *d = t->feature->desc;
		gemm_list(want_g, sizeof want_g, t->gemms);
		tensor_list(ctx, want_t, sizeof want_t, t->tensors);
		gemm_list(got_g, sizeof got_g, gemms[i]);
		tensor_list(ctx, got_t, sizeof got_t, tensors[i]);
		snprintf(text, sizeof text,
			 "%s in section '%s' (%s), configured for%s%s%s%s, never acted: on the layers "
			 "it selects the host asked only about gemms %s and tensors %s",
			 d->name, t->section->name, t->where_text,
			 (d->flags & DLI_FEATURE_GEMMS) ? " gemms " : "",
			 (d->flags & DLI_FEATURE_GEMMS) ? want_g : "",
			 (d->flags & DLI_FEATURE_TENSORS) ? " tensors " : "",
			 (d->flags & DLI_FEATURE_TENSORS) ? want_t
			 : (d->flags & DLI_FEATURE_GEMMS) ? "" : " its calls",
			 got_g, got_t);
		warn(ctx, text);
	}
}

void dli_report_silent_noops(struct dli_context *ctx)
{
	/* No layer asked at all (a tool, an init-and-destroy): nothing to compare the config with. */
	if (!ctx->config || !ctx->n_layers || !ctx->n_instances)
		return;
	size_t n = ctx->n_instances;
	bool *bound = calloc(n, sizeof *bound), *asked = calloc(n, sizeof *asked);
	uint32_t *gemms = calloc(n, sizeof *gemms);
	uint64_t *tensors = calloc(n, sizeof *tensors);
	if (!bound || !asked || !gemms || !tensors)
		goto done;
	pthread_mutex_lock(&ctx->layers_lock);
	for (size_t k = 0; k < ctx->n_layers; k++) {
		const struct dli_layer *l = ctx->layer_list[k];
		for (size_t b = 0; b < l->n_bindings; b++) {
			size_t i = (size_t)(l->bindings[b].instance - ctx->instances);
			const struct dli_binding *bd = &l->bindings[b];
			bound[i] = true;
			/* On a layer the host plans, a feature no plan turned on is not judged: the
			 * host had no reason to act on it yet. */
			asked[i] = asked[i] || atomic_load(&bd->asked) ||
				   (atomic_load(&l->planned) && !atomic_load(&bd->planned_on));
			gemms[i] |= atomic_load(&l->gemms_asked);
			tensors[i] |= atomic_load(&l->tensors_asked);
		}
	}
	report_sections(ctx, bound);
	report_targets(ctx, bound, asked, gemms, tensors);
	pthread_mutex_unlock(&ctx->layers_lock);
done:
	free(bound);
	free(asked);
	free(gemms);
	free(tensors);
}

void dli_report_unstepped(struct dli_context *ctx)
{
	int64_t at = atomic_load(&ctx->inspected_at);
	char text[512];
	if (!at)
		return;
	/* The statistics features log at dli_step only, as TransformerEngine does: a host that
	 * never calls it gets empty statistics logs and no other sign. */
	snprintf(text, sizeof text,
		 "no dli_step ran in this context: features took tensors (the last at iteration %lld) "
		 "but statistics are logged only when dli_step ends an iteration; call dli_step(ctx) "
		 "after each iteration's last backward",
		 (long long)(at - 1));
	warn(ctx, text);
}

void dli_report_step_in_eval(struct dli_context *ctx)
{
	char text[512];
	if (ctx->mode != DLI_MODE_EVAL || ctx->eval_step_said)
		return;
	ctx->eval_step_said = true;
	snprintf(text, sizeof text,
		 "dli_step ended iteration %lld in DLI_MODE_EVAL: until dli_mode_set(ctx, "
		 "DLI_MODE_TRAIN) nothing is inspected and only features with in_eval modify; switch "
		 "back after each evaluation pass (said once)",
		 (long long)ctx->iteration);
	warn(ctx, text);
}
