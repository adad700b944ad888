/* Layer handles by name (a lock-free table), the GEMM and tensor name lookups, and the host calls
 * that take names instead of handles. */
#include <errno.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "context-private.h"
#include "dispatch-private.h"
#include "error-private.h"
#include "layers-private.h"
#include "names-private.h"

/* ---- Names ---- */

int dli_gemm_from_name(const char *name)
{
	for (int g = 0; g < DLI_GEMM_COUNT; g++)
		if (name && !strcmp(name, dli_gemm_name(g)))
			return g;
	return -1;
}

int dli_tensor_id(const struct dli_context *ctx, const char *name)
{
	if (!name)
		return -1;
	for (int t = 0; t < DLI_TENSOR_STANDARD_COUNT; t++)
		if (!strcmp(name, dli_standard_tensor_name(t)))
			return t;
	for (size_t t = DLI_TENSOR_STANDARD_COUNT; ctx && ctx->config && t < ctx->n_tensors; t++)
		if (!strcmp(name, ctx->config->tensor_names[t]))
			return (int)t;
	return -1;
}

const char *dli_layer_name(const struct dli_layer *layer)
{
	return layer ? layer->name : NULL;
}

/* ---- Layer handles by name ---- */

static uint64_t name_hash(const char *s)
{
	uint64_t h = 1469598103934665603ull; /* FNV-1a */
	for (; *s; s++)
		h = (h ^ (unsigned char)*s) * 1099511628211ull;
	return h;
}

static struct dli_layer *table_find(const struct dli_layer_table *t, const char *name, uint64_t h)
{
	for (size_t i = h & t->mask;; i = (i + 1) & t->mask) {
		struct dli_layer *l = atomic_load_explicit(&t->slots[i], memory_order_acquire);
		if (!l || !strcmp(l->name, name))
			return l;
	}
}

struct dli_layer_table *dli_layer_table_create(size_t cap)
{
	struct dli_layer_table *t = calloc(1, sizeof *t);
	if (!t || !(t->slots = calloc(cap, sizeof *t->slots))) {
		free(t);
		return NULL;
	}
	t->mask = cap - 1;
	return t;
}

static void table_put(struct dli_layer_table *t, struct dli_layer *l)
{
	size_t i = name_hash(l->name) & t->mask;
	while (atomic_load_explicit(&t->slots[i], memory_order_relaxed))
		i = (i + 1) & t->mask;
	atomic_store_explicit(&t->slots[i], l, memory_order_release);
}

struct dli_layer *dli_layer_find(struct dli_context *ctx, const char *name)
{
	return table_find(atomic_load_explicit(&ctx->layers, memory_order_acquire), name,
			  name_hash(name));
}

int dli_layer_get(struct dli_context *ctx, const char *name, struct dli_layer **out,
		  struct dli_error *err)
{
	if (out)
		*out = NULL;
	if (!ctx || !name || !out)
		return dli_error_set(err, -EINVAL, NULL, "dli_layer_get: NULL argument");
	uint64_t h = name_hash(name);
	struct dli_layer *l = table_find(atomic_load_explicit(&ctx->layers, memory_order_acquire),
					 name, h);
	if (l) {
		*out = l;
		return 0;
	}
	pthread_mutex_lock(&ctx->layers_lock);
	struct dli_layer_table *t = atomic_load_explicit(&ctx->layers, memory_order_relaxed);
	int r = 0;
	if ((l = table_find(t, name, h)))
		goto done;
	if (ctx->n_layers == ctx->cap_layer_list) {
		size_t cap = ctx->cap_layer_list ? 2 * ctx->cap_layer_list : 64;
		struct dli_layer **list = realloc(ctx->layer_list, cap * sizeof *list);
		if (!list) {
			r = dli_error_set(err, -ENOMEM, NULL, "out of memory");
			goto done;
		}
		ctx->layer_list = list;
		ctx->cap_layer_list = cap;
	}
	if ((ctx->n_layers + 1) * 2 > t->mask + 1) {
		/* Readers may still walk the old table: keep it until dli_destroy. */
		struct dli_layer_table *grown = dli_layer_table_create(2 * (t->mask + 1));
		if (!grown) {
			r = dli_error_set(err, -ENOMEM, NULL, "out of memory");
			goto done;
		}
		for (size_t i = 0; i < ctx->n_layers; i++)
			table_put(grown, ctx->layer_list[i]);
		grown->older = t;
		atomic_store_explicit(&ctx->layers, grown, memory_order_release);
		t = grown;
	}
	if ((r = dli_layer_create(ctx, name, &l, err)))
		goto done;
	ctx->layer_list[ctx->n_layers++] = l;
	table_put(t, l);
done:
	pthread_mutex_unlock(&ctx->layers_lock);
	*out = r ? NULL : l;
	return r;
}

void dli_layer_table_destroy(struct dli_layer_table *t)
{
	for (struct dli_layer_table *older; t; t = older) {
		older = t->older;
		free(t->slots);
		free(t);
	}
}

/* ---- String-taking calls: one lock-free hash lookup, then the handle call. ---- */

static struct dli_layer *layer_by_name(struct dli_context *ctx, const char *name)
{
	if (!ctx || !name)
		return NULL;
	struct dli_layer *l = dli_layer_find(ctx, name);
	if (l)
		return l;
	struct dli_error err;
	if (dli_layer_get(ctx, name, &l, &err)) {
		dli_log(ctx, DLI_LOG_ERROR, "%s", err.message);
		return NULL;
	}
	return l;
}

bool dli_fp8_gemm_enabled_by_name(struct dli_context *ctx, const char *layer, const char *gemm,
				  int64_t *next)
{
	struct dli_layer *l = layer_by_name(ctx, layer);
	int g = dli_gemm_from_name(gemm);
	if (!l || g < 0)
		return answer_default(true, next);
	return dli_fp8_gemm_enabled(l, (enum dli_gemm)g, next);
}

bool dli_modify_tensor_enabled_by_name(struct dli_context *ctx, const char *layer, const char *gemm,
				       const char *tensor, int64_t *next)
{
	struct dli_layer *l = layer_by_name(ctx, layer);
	int g = dli_gemm_from_name(gemm);
	if (!l || g < 0)
		return answer_default(false, next);
	return dli_modify_tensor_enabled(l, (enum dli_gemm)g, dli_tensor_id(ctx, tensor), next);
}

bool dli_inspect_tensor_enabled_by_name(struct dli_context *ctx, const char *layer,
					const char *tensor, int64_t *next)
{
	struct dli_layer *l = layer_by_name(ctx, layer);
	if (!l)
		return answer_default(false, next);
	return dli_inspect_tensor_enabled(l, dli_tensor_id(ctx, tensor), next);
}

int dli_inspect_tensor_by_name(struct dli_context *ctx, const char *layer, const char *tensor,
			       const struct dli_tensor *hp)
{
	if (!ctx || !layer || !tensor)
		return -EINVAL;
	struct dli_layer *l = layer_by_name(ctx, layer);
	return l ? dli_inspect_tensor(l, dli_tensor_id(ctx, tensor), hp, NULL, NULL) : 0;
}
