/* Dispatch: building a layer handle's per-call tables once, and the host calls that read them.
 *
 * Hot-path rule: a call through a handle does no string work, takes no lock and allocates nothing.
 * A layer no section selects answers after one pointer check; a selected layer between its
 * scheduled steps answers from its slot cache (one relaxed atomic load and a compare, after the check
 * of the pass mode: core/plan.c). */
#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "context-private.h"
#include "diagnose-private.h"
#include "dispatch-private.h"
#include "error-private.h"
#include "messages-private.h"
#include "nvtx-private.h"
#include "stats-private.h"
#include "strided-private.h"

#define HAS_OP(ops, name) (DLI_HAS_MEMBER(ops, struct dli_feature_ops, name) && (ops)->name)

#ifdef DLI_DEBUG_CHECKS
#define CALL_ENTER(ctx) atomic_fetch_add(&(ctx)->calls_in_flight, 1)
#define CALL_LEAVE(ctx) atomic_fetch_sub(&(ctx)->calls_in_flight, 1)
#else
#define CALL_ENTER(ctx) ((void)0)
#define CALL_LEAVE(ctx) ((void)0)
#endif

enum call_kind { CALL_FP8, CALL_MODIFY, CALL_INSPECT, CALL_POSTQ };

static uint64_t cache_word(bool enabled, int64_t next)
{
	return ((uint64_t)next << 1) | (enabled ? 1u : 0u);
}

/* A `next` as the host gets it: no later than the first iteration at which a periodic reload may
 * put an edited config in force (docs/config.md, "Reloading"), or a host that skips its calls until
 * then (dli_layer_plan's pattern, TransformerEngine's layers) would never see the edit. The cap is
 * above the iteration whenever it is set (dli_reload_cap). */
static inline int64_t host_next(const struct dli_context *ctx, int64_t next)
{
	int64_t cap = ctx->reload.cap;
	return cap && next > cap ? cap : next;
}

/* ---- Building a handle ---- */

static bool binding_serves(const struct dli_binding *b, enum call_kind kind, int gemm, int tensor)
{
	const struct dli_target *t = b->instance->target;
	const struct dli_feature_ops *ops = b->ops;
	bool g = gemm < 0 || (t->gemms >> gemm & 1u);
	bool te = tensor < 0 || (t->tensors >> tensor & 1u);
	switch (kind) {
	case CALL_FP8:
		return HAS_OP(ops, fp8_gemm_enabled) && g;
	case CALL_MODIFY:
		return HAS_OP(ops, modify_tensor) && g && te;
	case CALL_INSPECT:
		return HAS_OP(ops, inspect_tensor) && te;
	case CALL_POSTQ:
		return HAS_OP(ops, inspect_tensor_postquantize) && g && te;
	}
	return false;
}

static int slot_fill(struct dli_layer *l, struct dli_slot *s, enum call_kind kind, int gemm,
		     int tensor, struct dli_binding **pool, size_t *used)
{
	s->bindings = pool + *used;
	for (size_t i = 0; i < l->n_bindings; i++)
		if (binding_serves(&l->bindings[i], kind, gemm, tensor))
			s->bindings[s->n++] = &l->bindings[i];
	*used += s->n;
	return 0;
}

/* Every slot starts uncached, empty ones too: the first answer goes through slot_ask, which notes
 * what the host asked (core/diagnose.c), and caches an empty slot's default for good. */
static void slot_reset(struct dli_slot *s)
{
	atomic_store_explicit(&s->cache, 0, memory_order_relaxed);
}

static void layer_reset(struct dli_layer *l)
{
	size_t nt = l->ctx->n_tensors;
	for (int g = 0; g < DLI_GEMM_COUNT; g++)
		slot_reset(&l->fp8[g]);
	for (size_t i = 0; i < DLI_GEMM_COUNT * nt; i++) {
		slot_reset(&l->modify[i]);
		slot_reset(&l->postq[i]);
	}
	for (size_t t = 0; t < nt; t++)
		slot_reset(&l->inspect[t]);
}

void dli_layer_forget(struct dli_layer *l)
{
	if (l->slots)
		layer_reset(l);
}

/* Two sections selecting this layer may configure the same feature, or two modifying features,
 * for one (gemm, tensor): only visible now that the layer's name is known. */
static int check_conflicts(struct dli_layer *l, const struct dli_instance **matched, size_t n,
			   struct dli_error *err)
{
	for (size_t i = 0; i < n; i++) {
		for (size_t k = 0; k < i; k++) {
			const struct dli_target *a = matched[k]->target, *b = matched[i]->target;
			if (a->section == b->section || !dli_target_overlaps(a, b))
				continue;
			const struct dli_feature_desc *da = a->feature->desc, *db = b->feature->desc;
			const struct dli_where *wa = &a->section->where, *wb = &b->section->where;
			/* One block in two sections (an alias or a '<<' merge): "here" and "at"
			 * would be the same place, so name the sections' own. */
			if (a->feature == b->feature && a->where.line == b->where.line &&
			    a->where.column == b->where.column)
				return dli_error_set(
				    err, -EINVAL, &b->where,
				    "layer '%s': %s is configured twice for the same "
				    "gemm/tensor, by section '%s' (at %s:%d:%d) and by section "
				    "'%s' (at %s:%d:%d), both with the block here (one has it "
				    "through an alias or a '<<' merge)",
				    l->name, db->name, b->section->name, wb->file, wb->line,
				    wb->column, a->section->name, wa->file, wa->line, wa->column);
			if (a->feature == b->feature)
				return dli_error_set(err, -EINVAL, &b->where,
						     "layer '%s': %s is configured twice for the same "
						     "gemm/tensor, by section '%s' here and by section "
						     "'%s' at %s",
						     l->name, db->name, b->section->name, a->section->name,
						     a->where_text);
			if ((da->flags & DLI_FEATURE_MODIFIES) && (db->flags & DLI_FEATURE_MODIFIES))
				return dli_error_set(err, -EINVAL, &b->where,
						     "layer '%s': %s (section '%s', here) and %s "
						     "(section '%s', at %s) would both modify the same "
						     "tensor; only one feature may modify a (gemm, tensor)",
						     l->name, db->name, b->section->name, da->name,
						     a->section->name, a->where_text);
		}
	}
	return 0;
}

/* Fills l's bindings and slots from ctx's feature instances (l->ctx and l->name set, the rest
 * zero). On failure what was built is left for layer_unbuild. */
static int layer_build(struct dli_layer *l, struct dli_error *err)
{
	struct dli_context *ctx = l->ctx;
	const char *name = l->name;
	const struct dli_instance **matched = calloc(ctx->n_instances + 1, sizeof *matched);
	int r = 0;
	if (!matched) {
		r = dli_error_set(err, -ENOMEM, NULL, "out of memory");
		goto fail;
	}
	size_t n = 0;
	for (size_t i = 0; i < ctx->n_instances; i++) {
		const struct dli_section *s = ctx->instances[i].target->section;
		char why[128] = "";
		int m = s->enabled ? dli_selector_match(&s->selector, name, why, sizeof why) : 0;
		if (m < 0) {
			/* "Could not tell" is never "not selected" (docs/config.md, "Layers"). */
			r = dli_error_set(err, m, &s->selector.pattern_where,
					  "section '%s': layer_name_regex_pattern '%s' could not be "
					  "matched against layer '%s': %s; simplify the pattern (it "
					  "backtracks too much)",
					  s->name, s->selector.pattern, name, why);
			goto fail;
		}
		if (m)
			matched[n++] = &ctx->instances[i];
	}
	if (n == 0) {
		free(matched);
		return 0;
	}
	if ((r = check_conflicts(l, matched, n, err)))
		goto fail;
	l->bindings = calloc(n, sizeof *l->bindings);
	if (!l->bindings) {
		r = dli_error_set(err, -ENOMEM, NULL, "out of memory");
		goto fail;
	}
	for (size_t i = 0; i < n; i++) {
		struct dli_binding *b = &l->bindings[i];
		b->instance = matched[i];
		b->ops = matched[i]->ops;
		b->call = (struct dli_feature_call){matched[i]->state, NULL, ctx, l->name};
		if (HAS_OP(b->ops, layer_attach) &&
		    (r = b->ops->layer_attach(b->call.instance, l->name, &b->call.layer_state))) {
			dli_error_set(err, r, &matched[i]->target->where,
				      "layer '%s': %s could not attach to the layer", name,
				      matched[i]->target->feature->desc->name);
			goto fail;
		}
		l->n_bindings++;
	}
	size_t nt = ctx->n_tensors;
	size_t n_slots = DLI_GEMM_COUNT + 2 * DLI_GEMM_COUNT * nt + nt;
	l->slots = calloc(n_slots, sizeof *l->slots);
	/* Each slot lists at most every binding: one pool sized for the worst case. */
	struct dli_binding **pool = calloc(n_slots * n, sizeof *pool);
	if (!l->slots || !pool) {
		free(pool);
		r = dli_error_set(err, -ENOMEM, NULL, "out of memory");
		goto fail;
	}
	l->fp8 = l->slots;
	l->modify = l->fp8 + DLI_GEMM_COUNT;
	l->postq = l->modify + DLI_GEMM_COUNT * nt;
	l->inspect = l->postq + DLI_GEMM_COUNT * nt;
	size_t used = 0;
	for (int g = 0; g < DLI_GEMM_COUNT; g++) {
		slot_fill(l, &l->fp8[g], CALL_FP8, g, -1, pool, &used);
		for (size_t t = 0; t < nt; t++) {
			slot_fill(l, &l->modify[g * nt + t], CALL_MODIFY, g, (int)t, pool, &used);
			slot_fill(l, &l->postq[g * nt + t], CALL_POSTQ, g, (int)t, pool, &used);
		}
	}
	for (size_t t = 0; t < nt; t++)
		slot_fill(l, &l->inspect[t], CALL_INSPECT, -1, (int)t, pool, &used);
	layer_reset(l);
	free(matched);
	return 0;
fail:
	free(matched);
	return r;
}

/* Detaches the features and frees what layer_build made; l->ctx and l->name stay. */
static void layer_unbuild(struct dli_layer *l)
{
	for (size_t i = 0; i < l->n_bindings; i++) {
		struct dli_binding *b = &l->bindings[i];
		if (HAS_OP(b->ops, layer_detach))
			b->ops->layer_detach(b->call.instance, b->call.layer_state);
	}
	if (l->slots)
		free(l->slots[0].bindings);
	free(l->slots);
	free(l->bindings);
	l->slots = l->fp8 = l->modify = l->inspect = l->postq = NULL;
	l->bindings = NULL;
	l->n_bindings = 0;
}

int dli_layer_create(struct dli_context *ctx, const char *name, struct dli_layer **out,
		     struct dli_error *err)
{
	struct dli_layer *l = calloc(1, sizeof *l);
	int r;
	*out = NULL;
	if (!l || !(l->name = strdup(name))) {
		free(l);
		return dli_error_set(err, -ENOMEM, NULL, "out of memory");
	}
	l->ctx = ctx;
	if ((r = layer_build(l, err))) {
		dli_layer_destroy(l);
		return r;
	}
	*out = l;
	return 0;
}

void dli_layer_destroy(struct dli_layer *l)
{
	if (!l)
		return;
	layer_unbuild(l);
	free(l->name);
	free(l);
}

/* The tables a layer's handle reads, exchanged between a handle and a staged copy (field by field:
 * the handle's other fields, atomics among them, stay). */
#define SWAP_FIELD(a, b, f)                 \
	do {                                \
		__typeof__((a)->f) t_ = (a)->f; \
		(a)->f = (b)->f;            \
		(b)->f = t_;                \
	} while (0)

static void layer_swap_tables(struct dli_layer *a, struct dli_layer *b)
{
	SWAP_FIELD(a, b, slots);
	SWAP_FIELD(a, b, fp8);
	SWAP_FIELD(a, b, modify);
	SWAP_FIELD(a, b, inspect);
	SWAP_FIELD(a, b, postq);
	SWAP_FIELD(a, b, bindings);
	SWAP_FIELD(a, b, n_bindings);
}

int dli_layer_stage(struct dli_layer *l, struct dli_layer **staged, struct dli_error *err)
{
	struct dli_layer *s = calloc(1, sizeof *s);
	*staged = NULL;
	if (!s)
		return dli_error_set(err, -ENOMEM, NULL, "out of memory");
	s->ctx = l->ctx;
	s->name = l->name; /* features keep the handle's name pointer (dli_feature_call) */
	int r = layer_build(s, err);
	if (r) {
		layer_unbuild(s);
		free(s);
		return r;
	}
	*staged = s;
	return 0;
}

void dli_layer_unstage(struct dli_layer *staged)
{
	if (!staged)
		return;
	layer_unbuild(staged);
	free(staged);
}

void dli_layer_commit(struct dli_layer *l, struct dli_layer *staged)
{
	layer_swap_tables(l, staged);
	dli_layer_unstage(staged); /* now the old tables: their features detach */
}

/* ---- Answers ---- */

/* What the host asked, for the silent no-op warnings: a read before each write keeps the line
 * shared once the bits are set. Off the hot path (first answers, actions, evaluation passes). */
static void note_asked(struct dli_layer *l, int gemm, int tensor)
{
	if (gemm >= 0 && !(atomic_load_explicit(&l->gemms_asked, memory_order_relaxed) >> gemm & 1u))
		atomic_fetch_or_explicit(&l->gemms_asked, 1u << gemm, memory_order_relaxed);
	if (tensor >= 0 &&
	    !(atomic_load_explicit(&l->tensors_asked, memory_order_relaxed) >> tensor & 1u))
		atomic_fetch_or_explicit(&l->tensors_asked, 1ull << tensor, memory_order_relaxed);
}

static void note_binding(const struct dli_binding *b)
{
	struct dli_binding *w = (struct dli_binding *)b;
	if (!atomic_load_explicit(&w->asked, memory_order_relaxed))
		atomic_store_explicit(&w->asked, true, memory_order_relaxed);
}

_Thread_local bool dli_planning;

/* A plan asks every slot, so its questions say nothing about what the host uses: the host's
 * actions do (and slot_ask notes which features a plan turned on). */
static void note_slot(struct dli_layer *l, const struct dli_slot *s, enum call_kind kind, int gemm,
		      int tensor)
{
	if (dli_planning)
		return;
	note_asked(l, gemm, tensor);
	for (uint32_t i = 0; i < s->n; i++)
		note_binding(s->bindings[i]);
}

/* One feature's answer; a feature without the *_enabled method is always on. */
static bool ask(const struct dli_binding *b, enum call_kind kind, int gemm, int tensor, int64_t it,
		int64_t *next)
{
	const struct dli_feature_ops *ops = b->ops;
	*next = DLI_NEVER;
	switch (kind) {
	case CALL_FP8:
		return ops->fp8_gemm_enabled(&b->call, (enum dli_gemm)gemm, it, next);
	case CALL_MODIFY:
		return HAS_OP(ops, modify_tensor_enabled)
			       ? ops->modify_tensor_enabled(&b->call, (enum dli_gemm)gemm, tensor, it, next)
			       : true;
	case CALL_INSPECT:
		return HAS_OP(ops, inspect_tensor_enabled)
			       ? ops->inspect_tensor_enabled(&b->call, tensor, it, next)
			       : true;
	case CALL_POSTQ:
		return HAS_OP(ops, inspect_tensor_postquantize_enabled)
			       ? ops->inspect_tensor_postquantize_enabled(&b->call, (enum dli_gemm)gemm,
									  tensor, it, next)
			       : true;
	}
	return false;
}

/* Asks every feature of the slot and caches the combined answer. FP8 is on unless a feature turns
 * it off; the other calls are on when any feature wants them. */
__attribute__((noinline)) static bool slot_ask(struct dli_layer *l, struct dli_slot *s,
					       enum call_kind kind, int gemm, int tensor, int64_t *next)
{
	int64_t it = l->ctx->iteration, soonest = DLI_NEVER;
	bool answer = kind == CALL_FP8;
	note_slot(l, s, kind, gemm, tensor);
	for (uint32_t i = 0; i < s->n; i++) {
		int64_t nx;
		bool a = ask(s->bindings[i], kind, gemm, tensor, it, &nx);
		answer = kind == CALL_FP8 ? answer && a : answer || a;
		/* A plan's FP8 answer is what the host uses; its other answers are acted on, and
		 * so are a modifying feature's (FakeQuant's FP8 answer follows its modify one). */
		if (dli_planning && kind == CALL_FP8 &&
		    !(s->bindings[i]->instance->target->feature->desc->flags & DLI_FEATURE_MODIFIES))
			note_binding(s->bindings[i]);
		else if (dli_planning && a)
			atomic_store_explicit(&s->bindings[i]->planned_on, true, memory_order_relaxed);
		if (nx < soonest)
			soonest = nx;
	}
	/* The cache holds the capped `next`: its answers are then re-asked at a reload, whose
	 * swap drops the caches anyway, and the cached path has nothing more to do. */
	soonest = host_next(l->ctx, soonest);
	if (soonest > it)
		atomic_store_explicit(&s->cache, cache_word(answer, soonest), memory_order_relaxed);
	if (next)
		*next = soonest > it ? soonest : it < DLI_NEVER ? it + 1 : DLI_NEVER; /* no wrap */
	return answer;
}

static inline bool slot_answer(struct dli_layer *l, struct dli_slot *s, enum call_kind kind, int gemm,
			       int tensor, int64_t *next)
{
	uint64_t c = atomic_load_explicit(&s->cache, memory_order_relaxed);
	if ((int64_t)(c >> 1) > l->ctx->iteration) {
		if (next)
			*next = (int64_t)(c >> 1);
		return c & 1u;
	}
	return slot_ask(l, s, kind, gemm, tensor, next);
}

/* ---- Evaluation passes (dli_mode_set): nothing is inspected, only `in_eval` features modify ----
 * Rare next to training calls, so not cached: the slot caches hold training answers only. FP8
 * answers do not depend on the pass and never come here. */

/* Out of line, as slot_ask: inlined, it would give the cached path a stack frame. */
__attribute__((noinline)) static bool eval_answer(struct dli_layer *l, struct dli_slot *s,
						  enum call_kind kind, int gemm, int tensor,
						  int64_t *next)
{
	note_slot(l, s, kind, gemm, tensor);
	int64_t it = l->ctx->iteration, soonest = DLI_NEVER;
	bool answer = false;
	for (uint32_t i = 0; kind == CALL_MODIFY && i < s->n; i++) {
		int64_t nx;
		if (!s->bindings[i]->instance->target->in_eval)
			continue;
		answer = ask(s->bindings[i], kind, gemm, tensor, it, &nx) || answer;
		if (nx < soonest)
			soonest = nx;
	}
	if (next)
		*next = host_next(l->ctx, soonest > it ? soonest : it < DLI_NEVER ? it + 1 : DLI_NEVER);
	return answer;
}

static inline bool in_eval(const struct dli_layer *l)
{
	return l->ctx->mode != DLI_MODE_TRAIN;
}

static inline bool tensor_ok(const struct dli_layer *l, int tensor)
{
	return tensor >= 0 && (size_t)tensor < l->ctx->n_tensors;
}

/* A call's answer where no feature applies (no layer, a layer no section selects, a gemm or tensor
 * that does not exist): the default, until a reload may change that. */
static inline bool no_feature(struct dli_layer *l, bool dflt, int64_t *next)
{
	if (next)
		*next = l ? host_next(l->ctx, DLI_NEVER) : DLI_NEVER;
	return dflt;
}

bool dli_fp8_gemm_enabled(struct dli_layer *l, enum dli_gemm gemm, int64_t *next)
{
	if (!l || !l->slots || (unsigned)gemm >= DLI_GEMM_COUNT)
		return no_feature(l, true, next);
	return slot_answer(l, &l->fp8[gemm], CALL_FP8, gemm, -1, next);
}

bool dli_modify_tensor_enabled(struct dli_layer *l, enum dli_gemm gemm, int tensor, int64_t *next)
{
	if (!l || !l->slots || (unsigned)gemm >= DLI_GEMM_COUNT || !tensor_ok(l, tensor))
		return no_feature(l, false, next);
	struct dli_slot *s = &l->modify[gemm * l->ctx->n_tensors + (size_t)tensor];
	if (in_eval(l))
		return eval_answer(l, s, CALL_MODIFY, gemm, tensor, next);
	return slot_answer(l, s, CALL_MODIFY, gemm, tensor, next);
}

bool dli_inspect_tensor_enabled(struct dli_layer *l, int tensor, int64_t *next)
{
	if (!l || !l->slots || !tensor_ok(l, tensor))
		return no_feature(l, false, next);
	if (in_eval(l))
		return eval_answer(l, &l->inspect[tensor], CALL_INSPECT, -1, tensor, next);
	return slot_answer(l, &l->inspect[tensor], CALL_INSPECT, -1, tensor, next);
}

bool dli_inspect_tensor_postquantize_enabled(struct dli_layer *l, enum dli_gemm gemm, int tensor,
					     int64_t *next)
{
	if (!l || !l->slots || (unsigned)gemm >= DLI_GEMM_COUNT || !tensor_ok(l, tensor))
		return no_feature(l, false, next);
	struct dli_slot *s = &l->postq[gemm * l->ctx->n_tensors + (size_t)tensor];
	if (in_eval(l))
		return eval_answer(l, s, CALL_POSTQ, gemm, tensor, next);
	return slot_answer(l, s, CALL_POSTQ, gemm, tensor, next);
}

/* ---- Actions: only features whose answer is "on" at this iteration act. ---- */

/* The NVTX range around one feature's action (core/nvtx.c): formatting only when ranges are on. */
static void range_push(const struct dli_layer *l, const struct dli_binding *b, int tensor)
{
	const char *tname = l->ctx->host.tensor_name(l->ctx, tensor);
	dli_nvtx_push(b->instance->target->feature->desc->name, l->name, tname ? tname : "?");
}

int dli_modify_tensor(struct dli_layer *l, enum dli_gemm gemm, int tensor, const struct dli_tensor *in,
		      const struct dli_quantizer *quantizer, struct dli_tensor *out)
{
	if (!l)
		return -EINVAL;
	int64_t it = l->ctx->iteration, nx;
	if (!l->slots || (unsigned)gemm >= DLI_GEMM_COUNT || !tensor_ok(l, tensor)) {
		dli_modify_failed(l, NULL, gemm, tensor, it, -ENOENT, in, out);
		return -ENOENT;
	}
	struct dli_slot *s = &l->modify[gemm * l->ctx->n_tensors + (size_t)tensor];
	const struct dli_binding *acting = NULL;
	bool eval = in_eval(l);
	int r = -ENOENT;
	CALL_ENTER(l->ctx);
	note_slot(l, s, CALL_MODIFY, gemm, tensor);
	for (uint32_t i = 0; i < s->n; i++) {
		const struct dli_binding *b = s->bindings[i];
		if (eval && !b->instance->target->in_eval)
			continue;
		if (ask(b, CALL_MODIFY, gemm, tensor, it, &nx)) {
			acting = b;
			bool nvtx = DLI_NVTX_ON(l->ctx);
			if (nvtx)
				range_push(l, b, tensor);
			dli_stats_refusal[0] = '\0';
			r = in && out ? b->ops->modify_tensor(&b->call, gemm, tensor, in, quantizer, out)
				      : -EINVAL;
			if (nvtx)
				dli_nvtx_pop();
			break;
		}
	}
	CALL_LEAVE(l->ctx);
	if (r)
		dli_modify_failed(l, acting, gemm, tensor, it, r, in, out);
	return r;
}

/* Called on the failure path only: the hot path stays a compare. The host gets the error code back
 * from the call, but a trainer may look at it only at the end of the run, or never: the first
 * failure is said at once, where a user watching the run or its message log sees it. */
void dli_inspect_failed(struct dli_layer *l, const struct dli_binding *b, const char *call,
			int gemm, int tensor, int64_t iteration, int rc)
{
	struct dli_context *ctx = l->ctx;
	const struct dli_target *t = b->instance->target;
	const char *tname = ctx->host.tensor_name(ctx, tensor);
	char gemm_text[32] = "", text[1024];
	if (gemm >= 0)
		snprintf(gemm_text, sizeof gemm_text, ", gemm %s", ctx->host.gemm_name(gemm));
	char lname[DLI_CLIP_NAME + 4], tclip[DLI_CLIP_NAME + 4], sname[DLI_CLIP_NAME + 4];
	char where[DLI_CLIP_NAME + 4];
	snprintf(text, sizeof text,
		 "%s failed on layer '%s', tensor '%s'%s, iteration %lld: feature %s (section '%s', "
		 "%s): %s (%d)",
		 call, dli_clip_name(lname, sizeof lname, l->name),
		 dli_clip_name(tclip, sizeof tclip, tname), gemm_text, (long long)iteration,
		 t->feature->desc->name, dli_clip_name(sname, sizeof sname, t->section->name),
		 dli_clip_name(where, sizeof where, t->where_text), strerror(rc < 0 ? -rc : rc), rc);
	/* What the statistics said of the tensor, when that is why. */
	size_t len = strlen(text);
	if (dli_stats_refusal[0] && len < sizeof text)
		snprintf(text + len, sizeof text - len, ": %s", dli_stats_refusal);
	dli_stats_refusal[0] = '\0';
	dli_last_error_set(ctx, text);
	if (atomic_fetch_add(&ctx->inspect_failures, 1) != 0)
		return;
	dli_log(ctx, DLI_LOG_ERROR,
		"%s; training continues, later failures are counted and reported at the end", text);
}

/* dli_inspect_tensor, and with `view` set its strided form: hp is then the view's descriptor, which
 * the features that declare DLI_FEATURE_STRIDED get (their host calls read it through the view);
 * the others get the view's contiguous copy, made once for all of them (core/strided.c). */
struct block_copies {
	const struct dli_block_quantized_tensor *rowwise, *colwise;
};

static int inspect(struct dli_layer *l, int tensor, const struct dli_tensor *hp,
		   struct dli_view *view, const struct dli_quantized_tensor *rowwise,
		   const struct dli_quantized_tensor *colwise, const struct block_copies *block)
{
	if (!l)
		return -EINVAL;
	if (!l->slots || !tensor_ok(l, tensor))
		return 0;
	struct dli_slot *s = &l->inspect[tensor];
	note_slot(l, s, CALL_INSPECT, -1, tensor);
	if (in_eval(l))
		return 0;
	int64_t it = l->ctx->iteration, nx;
	int first = 0;
	CALL_ENTER(l->ctx);
	struct dli_view *outer = view ? dli_view_enter(view) : NULL;
	/* Every feature here gets `hp`: one statistics pass over it serves them all. */
	if (s->n > 1)
		dli_stats_share_begin(hp);
	for (uint32_t i = 0; i < s->n; i++) {
		const struct dli_binding *b = s->bindings[i];
		if (!ask(b, CALL_INSPECT, -1, tensor, it, &nx))
			continue;
		/* A read before the write keeps the line shared once it is set. */
		int64_t mark = it < DLI_NEVER ? it + 1 : DLI_NEVER; /* no wrap */
		if (atomic_load_explicit(&l->ctx->inspected_at, memory_order_relaxed) != mark)
			atomic_store_explicit(&l->ctx->inspected_at, mark, memory_order_relaxed);
		/* Before the view's copy too: its failure must not carry a reason an earlier
		 * feature's call left (one that went on after a refusal). */
		dli_stats_refusal[0] = '\0';
		if (!hp) /* why, should the feature refuse it */
			snprintf(dli_stats_refusal, sizeof dli_stats_refusal,
				 "the tensor (hp) is NULL");
		const struct dli_tensor *arg = hp;
		if (view && !(b->instance->target->feature->desc->flags & DLI_FEATURE_STRIDED) &&
		    !(arg = dli_view_contiguous(view))) {
			dli_inspect_failed(l, b, "inspect_tensor", -1, tensor, it, -ENOMEM);
			first = first ? first : -ENOMEM;
			continue;
		}
		dli_site_layer = l;
		dli_site_tensor = tensor;
		bool nvtx = DLI_NVTX_ON(l->ctx);
		if (nvtx)
			range_push(l, b, tensor);
		/* A block-scaled host's copies go to the features that read them; the others
		 * see a call without quantized tensors. */
		int r = !block ? b->ops->inspect_tensor(&b->call, tensor, arg, rowwise, colwise)
			: HAS_OP(b->ops, inspect_tensor_block)
				? b->ops->inspect_tensor_block(&b->call, tensor, arg, block->rowwise,
							       block->colwise)
				: b->ops->inspect_tensor(&b->call, tensor, arg, NULL, NULL);
		if (nvtx)
			dli_nvtx_pop();
		dli_site_layer = NULL;
		if (r)
			dli_inspect_failed(l, b, "inspect_tensor", -1, tensor, it, r);
		if (r && !first)
			first = r;
	}
	if (s->n > 1)
		dli_stats_share_end();
	if (view)
		dli_view_leave(outer);
	CALL_LEAVE(l->ctx);
	return first;
}

int dli_inspect_tensor(struct dli_layer *l, int tensor, const struct dli_tensor *hp,
		       const struct dli_quantized_tensor *rowwise,
		       const struct dli_quantized_tensor *colwise)
{
	return inspect(l, tensor, hp, NULL, rowwise, colwise, NULL);
}

/* A view the host described wrongly: said as a failing inspect call is (dli_inspect_failed). */
void dli_view_refused(struct dli_layer *l, const char *call, const char *tensor_name,
		      const char *why)
{
	struct dli_context *ctx = l->ctx;
	char text[1024], lname[DLI_CLIP_NAME + 4], tclip[DLI_CLIP_NAME + 4];
	snprintf(text, sizeof text, "%s refused a view on layer '%s', tensor '%s', iteration %lld: %s",
		 call, dli_clip_name(lname, sizeof lname, l->name),
		 dli_clip_name(tclip, sizeof tclip, tensor_name), (long long)ctx->iteration, why);
	dli_last_error_set(ctx, text);
	if (atomic_fetch_add(&ctx->inspect_failures, 1) == 0)
		dli_log(ctx, DLI_LOG_ERROR, "%s (later failures go to the message log only)", text);
	else
		dli_log_quiet(ctx, DLI_LOG_ERROR, "%s", text);
}

/* dli_inspect_tensor_strided, and with `block` set dli_inspect_tensor_block. */
static int inspect_strided(struct dli_layer *l, int tensor, const struct dli_tensor *hp,
			   const int64_t *strides, const struct dli_quantized_tensor *rowwise,
			   const struct dli_quantized_tensor *colwise,
			   const struct block_copies *block)
{
	/* NULL strides: the dense layout, whatever hp->contiguous says (the header's promise) */
	if (!strides && hp && !hp->contiguous) {
		struct dli_tensor dense = *hp;
		dense.contiguous = true;
		return inspect(l, tensor, &dense, NULL, rowwise, colwise, block);
	}
	/* Nothing reads the tensor: the plain call's answer (and its notes) without a look at it. */
	if (!strides || !hp || !l || !l->slots || !tensor_ok(l, tensor) || in_eval(l) ||
	    !l->inspect[tensor].n)
		return inspect(l, tensor, hp, NULL, rowwise, colwise, block);
	struct dli_view v;
	char why[512];
	int r = dli_view_init(&v, hp, strides, why, sizeof why);
	if (r < 0) {
		note_slot(l, &l->inspect[tensor], CALL_INSPECT, -1, tensor);
		dli_view_refused(l, "dli_inspect_tensor_strided",
				 l->ctx->host.tensor_name(l->ctx, tensor), why);
		return r;
	}
	r = inspect(l, tensor, &v.t, r == DLI_VIEW_STRIDED ? &v : NULL, rowwise, colwise, block);
	dli_view_finish(&v);
	return r;
}

int dli_inspect_tensor_strided(struct dli_layer *l, int tensor, const struct dli_tensor *hp,
			       const int64_t *strides, const struct dli_quantized_tensor *rowwise,
			       const struct dli_quantized_tensor *colwise)
{
	return inspect_strided(l, tensor, hp, strides, rowwise, colwise, NULL);
}

int dli_inspect_tensor_block(struct dli_layer *l, int tensor, const struct dli_tensor *hp,
			     const int64_t *strides, const struct dli_block_quantized_tensor *rowwise,
			     const struct dli_block_quantized_tensor *colwise)
{
	const struct block_copies block = {rowwise, colwise};
	return inspect_strided(l, tensor, hp, strides, NULL, NULL, &block);
}

int dli_inspect_tensor_postquantize(struct dli_layer *l, enum dli_gemm gemm, int tensor,
				    const struct dli_quantized_tensor *q)
{
	if (!l)
		return -EINVAL;
	if (!l->slots || (unsigned)gemm >= DLI_GEMM_COUNT || !tensor_ok(l, tensor))
		return 0;
	struct dli_slot *s = &l->postq[gemm * l->ctx->n_tensors + (size_t)tensor];
	note_slot(l, s, CALL_POSTQ, gemm, tensor);
	if (in_eval(l))
		return 0;
	int64_t it = l->ctx->iteration, nx;
	int first = 0;
	CALL_ENTER(l->ctx);
	for (uint32_t i = 0; i < s->n; i++) {
		const struct dli_binding *b = s->bindings[i];
		if (!ask(b, CALL_POSTQ, gemm, tensor, it, &nx))
			continue;
		dli_site_layer = l;
		dli_site_tensor = tensor;
		bool nvtx = DLI_NVTX_ON(l->ctx);
		if (nvtx)
			range_push(l, b, tensor);
		dli_stats_refusal[0] = '\0';
		int r = b->ops->inspect_tensor_postquantize(&b->call, gemm, tensor, q);
		if (nvtx)
			dli_nvtx_pop();
		dli_site_layer = NULL;
		if (r)
			dli_inspect_failed(l, b, "inspect_tensor_postquantize", gemm, tensor, it, r);
		if (r && !first)
			first = r;
	}
	CALL_LEAVE(l->ctx);
	return first;
}

/* What a dli_call range names: the tensor of a log_tensor_stats call, else the call. */
static const char *call_what(const char *name, const void *args)
{
	const struct dli_log_tensor_stats_args *a = args;
	if (a && !strcmp(name, DLI_CALL_LOG_TENSOR_STATS) &&
	    a->size >= offsetof(struct dli_log_tensor_stats_args, tensor) && a->tensor_name)
		return a->tensor_name;
	return name;
}

/* nvdlfw_inspect's LogTensorStats warns, once per process, when a call reaches a block that gives
 * no freq, whose default the core applies: the same line after the first log_tensor_stats call that
 * a base-namespace block without freq takes (its tensor is the block's), once per context. */
static void say_freq_default(struct dli_layer *l, const struct dli_target *t, const char *name,
			     const void *args)
{
	const struct dli_log_tensor_stats_args *a = args;
	int id;

	if (t->freq_given || !(t->feature->desc->flags & DLI_FEATURE_GENERIC) ||
	    !(t->feature->desc->flags & DLI_FEATURE_SCHEDULED) ||
	    strcmp(name, DLI_CALL_LOG_TENSOR_STATS) || !a ||
	    a->size < offsetof(struct dli_log_tensor_stats_args, tensor) || !a->tensor_name ||
	    atomic_load_explicit(&l->ctx->freq_default_said, memory_order_relaxed))
		return;
	id = dli_tensor_id(l->ctx, a->tensor_name);
	if (id < 0 || !(t->tensors >> id & 1u) ||
	    atomic_exchange(&l->ctx->freq_default_said, true))
		return;
	dli_log(l->ctx, DLI_LOG_WARNING,
		"Frequency of logging is not provided. Using freq = 1 train step as default.");
}

int dli_call(struct dli_layer *l, const char *name, void *args)
{
	if (!l || !name)
		return -EINVAL;
	/* log_tensor_stats is the core's own call (dlinspect.h), not a plugin's: a run that loaded
	 * no module declaring it (the default run, with no config) has nothing selecting the tensor,
	 * as nvdlfw_inspect returns {} without a config, rather than a call it does not know. */
	if (!dli_registry_has_call(&l->ctx->registry, name))
		return strcmp(name, DLI_CALL_LOG_TENSOR_STATS) ? -ENOSYS : 0;
	bool eval = in_eval(l);
	/* log_tensor_stats args with strides: a view (core/strided.c). */
	struct dli_call_view cv;
	int r = eval ? (cv.active = false, 0) : dli_call_view_begin(&cv, l, name, args);
	if (r)
		return r;
	CALL_ENTER(l->ctx);
	for (size_t i = 0; i < l->n_bindings && !r; i++) {
		const struct dli_binding *b = &l->bindings[i];
		const char *const *calls = b->instance->target->feature->desc->calls;
		for (size_t k = 0; calls && calls[k]; k++) {
			if (!strcmp(calls[k], name) && HAS_OP(b->ops, call)) {
				note_binding(b);
				/* Evaluation passes feed no statistics (dli_mode_set). */
				if (eval)
					break;
				bool nvtx = DLI_NVTX_ON(l->ctx);
				if (nvtx)
					dli_nvtx_push(b->instance->target->feature->desc->name,
						      l->name, call_what(name, args));
				void *a = cv.active ? dli_call_view_args(&cv, b->instance->target
									       ->feature->desc->flags)
						    : args;
				/* NULL from the view is its copy failing; the host's own NULL args
				 * go to the feature, which says what it needs (-EINVAL). */
				r = a || !cv.active ? b->ops->call(&b->call, name, a) : -ENOMEM;
				if (nvtx)
					dli_nvtx_pop();
				say_freq_default(l, b->instance->target, name, args);
				break;
			}
		}
	}
	CALL_LEAVE(l->ctx);
	dli_call_view_end(&cv);
	return r;
}
