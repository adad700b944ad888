/* Live config reload: dli_step re-reads the config file every N steps (or when dli_config_reload
 * asked) and, when its content changed and is valid, swaps the new config in between two steps.
 *
 * The swap needs no lock on the hot path: dli_step runs alone on its context (dlinspect.h's thread
 * contract), so every layer handle's tables are rebuilt aside ("staged") against the new feature
 * instances, and only when every one of them could be built are they swapped in, all before dli_step
 * returns. A refusal at any point leaves the old config, its instances and tables untouched. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config-private.h"
#include "config-yaml-private.h"
#include "context-private.h"
#include "dispatch-private.h"
#include "error-private.h"
#include "fsutil-private.h"
#include "instances-private.h"
#include "loader-private.h"
#include "messages-private.h"
#include "nvtx-private.h"
#include "reduce-private.h"
#include "reload-private.h"

/* Larger than this is refused before parsing: the limit dli_init reads a config under. */
#define RELOAD_MAX_BYTES MAX_CONFIG_BYTES

static uint64_t content_hash(const char *text, size_t len)
{
	uint64_t h = 1469598103934665603ull; /* FNV-1a; never 0 for the tests above: 0 is "none" */
	for (size_t i = 0; i < len; i++)
		h = (h ^ (unsigned char)text[i]) * 1099511628211ull;
	return h ? h : 1;
}

/* The file's bytes, NUL-terminated, owned by the caller; NULL with *err set. */
static char *read_file(const char *path, size_t *len, struct dli_error *err)
{
	FILE *f;
	int r = dli_fopen_file(path, &f);
	if (r) {
		dli_error_set(err, r, NULL, "cannot open config '%s': %s", path, dli_file_error(r));
		return NULL;
	}
	char *text;
	r = dli_read_all(f, RELOAD_MAX_BYTES, &text, len);
	fclose(f);
	if (r == -EFBIG)
		dli_error_set(err, r, NULL, "cannot read config '%s': larger than %u MiB, the limit",
			      path, RELOAD_MAX_BYTES >> 20);
	else if (r)
		dli_error_set(err, r, NULL, "cannot read config '%s': %s", path, strerror(-r));
	return r ? NULL : text;
}

int dli_config_reload(struct dli_context *ctx)
{
	if (!ctx)
		return -EINVAL;
	if (!ctx->reload.path)
		return -ENOENT;
	/* Lock-free atomic_bool: a plain store, safe in a signal handler. */
	atomic_store_explicit(&ctx->reload.requested, true, memory_order_relaxed);
	return 0;
}

void dli_reload_cap(struct dli_context *ctx)
{
	struct dli_reload *rl = &ctx->reload;
	if (!rl->path)
		return;
	/* The check comes at the step that brings `since` to `every`; the edit is in force after. */
	int64_t left = rl->every - rl->since; /* >= 1; no wrap past DLI_NEVER */
	if (rl->every)
		rl->cap = ctx->iteration > DLI_NEVER - left ? DLI_NEVER : ctx->iteration + left;
}

int dli_reload_init(struct dli_context *ctx, const struct dli_options *o, const char *path,
		    struct dli_error *err)
{
	struct dli_reload *rl = &ctx->reload;
	int every = o->config_reload_steps;
	if (every < -1)
		return dli_error_set(err, -EINVAL, NULL,
				     "dli_init: options.config_reload_steps is %d: expected -1 (from the "
				     "environment), 0 (off) or a number of steps",
				     every);
	const char *env = getenv("DLINSPECT_CONFIG_RELOAD_STEPS");
	if (every == -1 && env && env[0]) {
		char *end;
		errno = 0;
		long v = strtol(env, &end, 10);
		/* digits only: strtol would also take blanks and a sign before them */
		if (errno || *end || env[0] < '0' || env[0] > '9' || v > 1000000000)
			return dli_error_set(err, -EINVAL, NULL,
					     "DLINSPECT_CONFIG_RELOAD_STEPS='%s': expected 0 (off) or "
					     "a number of steps",
					     env);
		every = (int)v;
	}
	rl->every = every > 0 ? every : 0;
	rl->ext_from_options = o->extensions != NULL;
	if (o->tensor_names) {
		rl->declared = calloc(o->n_tensor_names + 1, sizeof *rl->declared);
		if (!rl->declared)
			return dli_error_set(err, -ENOMEM, NULL, "out of memory");
		for (size_t i = 0; i < o->n_tensor_names; i++)
			if (!(rl->declared[rl->n_declared++] = strdup(o->tensor_names[i])))
				return dli_error_set(err, -ENOMEM, NULL, "out of memory");
		rl->declared_given = true;
	}
	if (!path) {
		if (rl->every)
			dli_log(ctx, DLI_LOG_WARNING,
				"config reload every %d steps asked, but the config is YAML text, not "
				"a file: nothing to re-read, reload stays off",
				rl->every);
		rl->every = 0;
		return 0;
	}
	if (!(rl->path = strdup(path)))
		return dli_error_set(err, -ENOMEM, NULL, "out of memory");
	/* The content in force; a file changed since dli_init parsed it reads as "changed" at the
	 * first check (or, rarely, as unchanged when it changed in between: edit it again). */
	size_t len;
	struct dli_error rerr;
	char *text = read_file(path, &len, &rerr);
	rl->hash = text ? content_hash(text, len) : 0;
	free(text);
	dli_reload_cap(ctx);
	return 0;
}

void dli_reload_finish(struct dli_context *ctx)
{
	struct dli_reload *rl = &ctx->reload;
	for (size_t i = 0; i < rl->n_declared; i++)
		free(rl->declared[i]);
	free(rl->declared);
	free(rl->path);
	rl->declared = NULL;
	rl->path = NULL;
}

/* Whether two YAML trees say the same (for the `loggers` key, which a reload does not apply). */
static bool same_tree(const struct dli_node *a, const struct dli_node *b)
{
	if (!a || !b)
		return a == b;
	if (a->kind != b->kind || a->n != b->n)
		return false;
	if (a->kind == DLI_NODE_SCALAR)
		return a->plain == b->plain && !strcmp(a->text, b->text);
	for (size_t i = 0; i < a->n; i++)
		if ((a->kind == DLI_NODE_MAP && !same_tree(a->keys[i], b->keys[i])) ||
		    !same_tree(a->items[i], b->items[i]))
			return false;
	return true;
}

static const struct dli_node *top_value(const struct dli_config *cfg, const char *key)
{
	for (size_t i = 0; cfg->root && cfg->root->kind == DLI_NODE_MAP && i < cfg->root->n; i++)
		if (!strcmp(cfg->root->keys[i]->text, key))
			return cfg->root->items[i];
	return NULL;
}

/* Modules the new config's `extensions` names that are not loaded yet. Loaded modules stay loaded
 * until dli_destroy (a reload never unloads code: nothing else may still point into it). */
static int load_new_modules(struct dli_context *ctx, struct dli_config *cfg, struct dli_error *err)
{
	if (ctx->reload.ext_from_options || !cfg->has_extensions)
		return 0;
	for (size_t i = 0; i < cfg->n_extensions; i++) {
		const struct dli_config_entry *e = &cfg->extensions[i];
		char clip[DLI_CLIP_NAME + 4];
		int r = dli_loader_load(ctx->loader, e->name, err);
		if (r)
			return dli_error_prefix(err, &e->where, "extensions: '%s': ",
						dli_clip_name(clip, sizeof clip, e->name));
	}
	return 0;
}

/* What a reload replaces, kept aside until the new one is known to work. */
struct generation {
	struct dli_config *config;
	struct dli_registry registry;
	struct dli_instance *instances;
	size_t n_instances;
	size_t n_tensors;
};

static void generation_take(struct generation *g, struct dli_context *ctx)
{
	g->config = ctx->config;
	g->registry = ctx->registry;
	g->instances = ctx->instances;
	g->n_instances = ctx->n_instances;
	g->n_tensors = ctx->n_tensors;
}

static void generation_put(struct dli_context *ctx, const struct generation *g)
{
	ctx->config = g->config;
	ctx->registry = g->registry;
	ctx->instances = g->instances;
	ctx->n_instances = g->n_instances;
	ctx->n_tensors = g->n_tensors;
}

/* Builds everything of `cfg` (parsed, owned: consumed whatever happens) and, when all of it could
 * be built, swaps it in. Runs inside dli_step, under layers_lock. */
static int apply(struct dli_context *ctx, struct dli_config *cfg, struct dli_error *err)
{
	struct generation old, fresh = {.config = cfg};
	struct dli_layer **staged = NULL;
	int r;
	generation_take(&old, ctx);
	if ((r = load_new_modules(ctx, cfg, err)) ||
	    (r = dli_registry_init(&fresh.registry, ctx->loader, err)))
		goto fail_config;
	if (ctx->reload.declared_given) {
		cfg->declared_tensors = (const char *const *)ctx->reload.declared;
		cfg->n_declared_tensors = ctx->reload.n_declared;
		cfg->tensors_declared = true;
	}
	/* The host may hold tensor ids (dli_tensor_id): the old names keep theirs. */
	if ((r = dli_config_seed_tensors(cfg, old.config->tensor_names, old.config->n_tensor_names))) {
		dli_error_set(err, r, NULL, "out of memory");
		goto fail_registry;
	}
	if ((r = dli_config_resolve(cfg, &fresh.registry, err)))
		goto fail_registry;
	/* Loggers are kept (re-creating them would reopen their files); they point at their modules'
	 * descriptors, which stay loaded, so nothing of theirs changes here. */
	for (size_t i = 0; i < ctx->n_loggers; i++)
		if (!ctx->loggers[i].host &&
		    !dli_registry_logger(&fresh.registry, ctx->loggers[i].desc->name)) {
			r = dli_error_set(err, -EINVAL, NULL, "logger '%s' is gone from the registry",
					  ctx->loggers[i].desc->name);
			goto fail_registry;
		}
	fresh.n_tensors = cfg->n_tensor_names;
	generation_put(ctx, &fresh); /* features' create may ask the host about the new config */
	dli_reduce_generation(ctx, +1); /* new accumulators may share the old ones' keys */
	if ((r = dli_instances_create(ctx, err)))
		goto fail_instances;
	fresh.instances = ctx->instances;
	fresh.n_instances = ctx->n_instances;
	staged = calloc(ctx->n_layers + 1, sizeof *staged);
	if (!staged) {
		r = dli_error_set(err, -ENOMEM, NULL, "out of memory");
		goto fail_instances;
	}
	for (size_t i = 0; i < ctx->n_layers; i++)
		if ((r = dli_layer_stage(ctx->layer_list[i], &staged[i], err)))
			goto fail_layers;

	/* Nothing can fail from here: the switch. Old tables detach from the old instances, which
	 * then finish (as at dli_destroy: what they hold is written through the loggers). */
	for (size_t i = 0; i < ctx->n_layers; i++)
		dli_layer_commit(ctx->layer_list[i], staged[i]);
	free(staged);
	ctx->instances = old.instances;
	ctx->n_instances = old.n_instances;
	dli_instances_destroy(ctx);
	ctx->instances = fresh.instances;
	ctx->n_instances = fresh.n_instances;
	dli_registry_finish(&old.registry);
	if (!same_tree(top_value(old.config, "loggers"), top_value(cfg, "loggers")))
		dli_log(ctx, DLI_LOG_WARNING,
			"%s: the reloaded config changes 'loggers': loggers are created once, by "
			"dli_init, and keep their settings; restart the run to apply this change",
			cfg->path);
	dli_config_destroy(old.config);
	return 0;

fail_layers:
	for (size_t i = 0; i < ctx->n_layers; i++)
		dli_layer_unstage(staged[i]);
	free(staged);
fail_instances:
	dli_instances_destroy(ctx);
	dli_reduce_generation(ctx, -1);
	generation_put(ctx, &old);
fail_registry:
	dli_registry_finish(&fresh.registry);
fail_config:
	dli_config_destroy(cfg);
	return r;
}

static void refuse(struct dli_context *ctx, uint64_t hash, const struct dli_error *e)
{
	struct dli_reload *rl = &ctx->reload;
	rl->refused = hash;
	const char *fmt = "config reload refused at iteration %lld, the config in force stays: %s";
	/* Every refusal in the message log, the first also on stderr: a job's terminal should say
	 * once that its edits are not taken, not at every check. */
	if (!rl->refused_said)
		dli_log(ctx, DLI_LOG_ERROR, fmt, (long long)ctx->iteration, e->message);
	else
		dli_log_quiet(ctx, DLI_LOG_ERROR, fmt, (long long)ctx->iteration, e->message);
	rl->refused_said = true;
}

void dli_reload_at_step(struct dli_context *ctx)
{
	struct dli_reload *rl = &ctx->reload;
	if (!rl->path)
		return;
	bool asked = atomic_exchange_explicit(&rl->requested, false, memory_order_relaxed);
	if (!asked && (!rl->every || ++rl->since < rl->every))
		return;
	rl->since = 0;
	struct dli_error err = {0};
	size_t len;
	char *text = read_file(rl->path, &len, &err);
	if (!text) {
		/* An editor replacing the file may leave it missing for a moment: say it quietly
		 * and look again at the next check. */
		dli_log_quiet(ctx, DLI_LOG_WARNING, "config reload: %s; checking again later",
			      err.message);
		return;
	}
	size_t blank = strspn(text, " \t\r\n");
	if (blank == len) {
		/* Likely an editor truncating the file before writing it again: an empty config would
		 * turn every feature off for a step. Look again at the next check. */
		dli_log_quiet(ctx, DLI_LOG_INFO, "config '%s' is empty: not reloaded (being written?)",
			      rl->path);
		free(text);
		return;
	}
	uint64_t h = content_hash(text, len);
	if (h == rl->hash || h == rl->refused) {
		if (asked)
			dli_log_quiet(ctx, DLI_LOG_INFO, "config '%s' %s: not reloaded", rl->path,
				      h == rl->hash ? "is unchanged" : "is the content refused before");
		free(text);
		return;
	}
	struct dli_config *cfg;
	int r = dli_config_create(rl->path, text, &cfg, &err);
	free(text);
	if (!r) {
		pthread_mutex_lock(&ctx->layers_lock);
		r = apply(ctx, cfg, &err);
		pthread_mutex_unlock(&ctx->layers_lock);
	}
	if (r) {
		refuse(ctx, h, &err);
		return;
	}
	rl->hash = h;
	rl->refused = 0;
	dli_nvtx_setup(ctx, NULL); /* `nvtx` may have changed; takes effect after this step */
	dli_log(ctx, DLI_LOG_INFO,
		"config '%s' reloaded at the end of iteration %lld: %zu sections, %zu feature "
		"instances, in force from iteration %lld",
		rl->path, (long long)ctx->iteration, ctx->config->n_sections, ctx->n_instances,
		(long long)ctx->iteration + 1);
	for (size_t i = 0; i < ctx->config->n_warnings; i++)
		dli_log(ctx, DLI_LOG_WARNING, "%s", ctx->config->warnings[i]);
}
