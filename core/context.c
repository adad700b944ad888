/* The context: the options, dli_init/dli_destroy (what a run loads and makes, in order), and
 * stepping. */
#include <errno.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "config-private.h"
#include "config-values-private.h"
#include "context-private.h"
#include "diagnose-private.h"
#include "dispatch-private.h"
#include "error-private.h"
#include "fsutil-private.h"
#include "host-private.h"
#include "instances-private.h"
#include "layers-private.h"
#include "lifecycle-private.h"
#include "loader-private.h"
#include "messages-private.h"
#include "nvtx-private.h"
#include "reduce-private.h"
#include "reload-private.h"
#include "stats-private.h"

/* The members of struct dli_options in ABI 1.0: a host built against that header has no more. */
#define DLI_OPTIONS_SIZE_1_0 offsetof(struct dli_options, tensor_names)

/* Writes `size` bytes, the host's struct, never more: a host built against an older header passes
 * its smaller struct. */
void dli_options_init_sized(struct dli_options *o, size_t size)
{
	if (!o || size < sizeof o->size)
		return;
	memset(o, 0, size);
	o->size = (uint32_t)(size < sizeof *o ? size : sizeof *o);
	if (DLI_HAS_MEMBER(o, struct dli_options, world_size))
		o->world_size = 1;
	if (DLI_HAS_MEMBER(o, struct dli_options, log_level))
		o->log_level = -1;
	if (DLI_HAS_MEMBER(o, struct dli_options, config_reload_steps))
		o->config_reload_steps = -1;
}

/* The symbol of 1.0, which every host built before 1.3 calls, whatever the size of its struct:
 * only the 1.0 members are certain to be there. */
void(dli_options_init)(struct dli_options *o)
{
	dli_options_init_sized(o, DLI_OPTIONS_SIZE_1_0);
}

/* ---- Steps ---- */

int64_t dli_iteration_get(const struct dli_context *ctx)
{
	return ctx ? ctx->iteration : -EINVAL;
}

void dli_iteration_set(struct dli_context *ctx, int64_t iteration)
{
	if (!ctx)
		return;
	/* Refused, not clamped: a jump to 0 would silently restart every schedule. */
	if (iteration < 0) {
		dli_log(ctx, DLI_LOG_ERROR,
			"dli_iteration_set(%lld): an iteration is >= 0; the iteration stays %lld",
			(long long)iteration, (long long)ctx->iteration);
		return;
	}
	ctx->iteration = iteration;
	dli_reload_cap(ctx);
	pthread_mutex_lock(&ctx->layers_lock);
	for (size_t i = 0; i < ctx->n_layers; i++)
		dli_layer_forget(ctx->layer_list[i]);
	pthread_mutex_unlock(&ctx->layers_lock);
}

int dli_step(struct dli_context *ctx)
{
	if (!ctx)
		return -EINVAL;
	/* The last iteration there is: nothing may end it (features' `next` answers and the cache
	 * words would wrap). */
	if (ctx->iteration == DLI_NEVER) {
		dli_log(ctx, DLI_LOG_ERROR, "dli_step at iteration %lld: the iteration cannot grow "
					    "further; the step is not ended",
			(long long)ctx->iteration);
		return -EOVERFLOW;
	}
	dli_report_step_in_eval(ctx);
#ifdef DLI_DEBUG_CHECKS
	int busy = atomic_load(&ctx->calls_in_flight);
	if (busy)
		dli_log(ctx, DLI_LOG_ERROR,
			"dli_step ran while %d other call(s) on this context were in flight: the "
			"host must not call dli_step concurrently with other calls",
			busy);
#endif
	bool nvtx = DLI_NVTX_ON(ctx);
	if (nvtx)
		dli_nvtx_push_step(ctx->iteration);
	pthread_mutex_lock(&ctx->layers_lock);
	/* Across ranks first, so that step_end reads whole tensors' statistics (core/reduce.c). */
	if (ctx->reduce)
		dli_reduce_step(ctx, ctx->iteration);
	for (size_t i = 0; i < ctx->n_layers; i++) {
		struct dli_layer *l = ctx->layer_list[i];
		for (size_t k = 0; k < l->n_bindings; k++) {
			const struct dli_feature_ops *ops = l->bindings[k].ops;
			if (!DLI_HAS_MEMBER(ops, struct dli_feature_ops, step_end) || !ops->step_end)
				continue;
			if (nvtx)
				dli_nvtx_push(l->bindings[k].instance->target->feature->desc->name,
					      l->name, "step_end");
			ops->step_end(&l->bindings[k].call, ctx->iteration);
			if (nvtx)
				dli_nvtx_pop();
		}
	}
	if (ctx->reduce)
		dli_reduce_step_end(ctx);
	pthread_mutex_unlock(&ctx->layers_lock);
	if (!ctx->stepped) {
		dli_report_silent_noops(ctx);
		ctx->stepped = true;
	}
	/* A new config comes in between this iteration's records and the flush below. */
	dli_reload_at_step(ctx);
	int first = 0;
	for (size_t i = 0; i < ctx->n_loggers; i++) {
		struct dli_logger_instance *l = &ctx->loggers[i];
		const struct dli_logger_ops *ops = l->desc->ops;
		if (!DLI_HAS_MEMBER(ops, struct dli_logger_ops, flush) || !ops->flush)
			continue;
		if (nvtx)
			dli_nvtx_push(l->desc->name, "flush", NULL);
		int r = ops->flush(l->state);
		if (nvtx)
			dli_nvtx_pop();
		/* The code dli_step returns needs its reason beside it: without one, dli_last_error
		 * would show nothing, or an older call's error, for a step that failed here. */
		if (r < 0 && !first) {
			char text[512];
			first = r;
			snprintf(text, sizeof text, "dli_step: logger '%s' could not flush: %s",
				 l->desc->name, strerror(-r));
			dli_last_error_set(ctx, text);
		}
		if (r < 0 && !atomic_exchange(&l->failed, true))
			dli_log(ctx, DLI_LOG_ERROR, "logger '%s' could not flush: %s (training continues)",
				l->desc->name, strerror(-r));
	}
	ctx->iteration++;
	dli_reload_cap(ctx);
	if (nvtx)
		dli_nvtx_pop();
	/* dli_step runs alone, so a request made during the step is complete (state 2) by now. */
	if (atomic_load(&ctx->stop_state) == 2) {
		char text[1024];
		snprintf(text, sizeof text, "dli_step: a feature asked the host to stop: %s",
			 ctx->stop_reason);
		dli_last_error_set(ctx, text);
		/* The feature told the terminal already: the message log gets it once more. */
		if (!ctx->stop_logged)
			dli_log_quiet(ctx, DLI_LOG_ERROR, "%s (every later dli_step returns -ECANCELED)",
				      text);
		ctx->stop_logged = true;
		return -ECANCELED;
	}
	return first;
}

/* ---- Init ---- */

static int parse_level(const char *s, int *out)
{
	for (int i = 0; i < 4; i++) {
		if (!strcasecmp(s, dli_log_level_names[i]) || (s[0] == '0' + i && !s[1])) {
			*out = i;
			return 0;
		}
	}
	if (!strcasecmp(s, "warn")) {
		*out = DLI_LOG_WARNING;
		return 0;
	}
	return -EINVAL;
}

/* nvdlfw_inspect's NVDLFW_INSPECT_LOG_LEVEL: Python logging's level names, any case. An unknown
 * name is INFO there (and here, with a warning: it is likely a typo). */
static int parse_nv_level(const char *s, int *out)
{
	static const struct {
		const char *name;
		int level;
	} names[] = {
		{"DEBUG", DLI_LOG_DEBUG},   {"INFO", DLI_LOG_INFO},       {"WARNING", DLI_LOG_WARNING},
		{"WARN", DLI_LOG_WARNING},  {"ERROR", DLI_LOG_ERROR},     {"CRITICAL", DLI_LOG_ERROR},
		{"FATAL", DLI_LOG_ERROR},
	};
	for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
		if (!strcasecmp(s, names[i].name)) {
			*out = names[i].level;
			return 0;
		}
	}
	*out = DLI_LOG_INFO;
	return -EINVAL;
}

/* "1"/"0" as the Megatron flow sets NV_DEBUG_TOOL_ENABLED, and the usual words. 1, 0, or -EINVAL. */
static int parse_switch(const char *s)
{
	static const char *const on[] = {"1", "true", "yes", "on"}, *const off[] = {"0", "false",
										   "no", "off"};
	for (size_t i = 0; i < 4; i++) {
		if (!strcasecmp(s, on[i]))
			return 1;
		if (!strcasecmp(s, off[i]))
			return 0;
	}
	return -EINVAL;
}

/* The config when the host names none: $DLINSPECT_CONFIG, else the Megatron flow's
 * $NV_DEBUG_TOOL_CONFIG, which counts only while $NV_DEBUG_TOOL_ENABLED is on (its toggle there).
 * *path stays NULL for the default run. docs/logging.md has the table. */
static int config_path_from_env(struct dli_context *ctx, const struct dli_options *o,
				const char **path, struct dli_error *err)
{
	*path = o->config_path;
	if (o->config_yaml || *path)
		return 0;
	const char *dli = getenv("DLINSPECT_CONFIG");
	if (dli && dli[0]) {
		*path = dli;
		return 0;
	}
	const char *nv = getenv("NV_DEBUG_TOOL_CONFIG"), *enabled = getenv("NV_DEBUG_TOOL_ENABLED");
	int on = enabled && enabled[0] ? parse_switch(enabled) : 0;
	if (on < 0)
		return dli_error_set(err, -EINVAL, NULL,
				     "NV_DEBUG_TOOL_ENABLED='%s': expected 1 or 0 (or true/false)",
				     enabled);
	if (nv && nv[0] && on)
		*path = nv;
	else if (nv && nv[0] && !(enabled && enabled[0])) /* =0 is the user's choice: no noise */
		dli_log(ctx, DLI_LOG_WARNING,
			"NV_DEBUG_TOOL_CONFIG is set but NV_DEBUG_TOOL_ENABLED is not 1: debugging "
			"stays off (set NV_DEBUG_TOOL_ENABLED=1, or DLINSPECT_CONFIG)");
	return 0;
}

static int load_modules(struct dli_context *ctx, const struct dli_options *o, struct dli_error *err)
{
	struct dli_config *cfg = ctx->config;
	int r = 0;
	if (o->extensions) {
		size_t i = 0;
		for (; i < o->n_extensions && !r; i++)
			r = o->extensions[i] ? dli_loader_load(ctx->loader, o->extensions[i], err)
					     : dli_error_set(err, -EINVAL, NULL, "is NULL");
		if (r)
			return dli_error_prefix(err, NULL, "options.extensions[%zu]: ", i - 1);
	} else if (cfg->has_extensions) {
		for (size_t i = 0; i < cfg->n_extensions; i++) {
			const struct dli_config_entry *e = &cfg->extensions[i];
			char clip[DLI_CLIP_NAME + 4];
			if ((r = dli_loader_load(ctx->loader, e->name, err)))
				return dli_error_prefix(err, &e->where, "extensions: '%s': ",
							dli_clip_name(clip, sizeof clip, e->name));
		}
	} else if ((r = dli_loader_load_all(ctx->loader, err))) {
		return r;
	}
	/* The base namespace is always there, as in nvdlfw_inspect: a feature block directly in a
	 * section means its feature, whatever 'extensions' lists. */
	if (o->extensions || cfg->has_extensions) {
		struct dli_error ignored;
		dli_loader_load(ctx->loader, "base_log_tensor_stats", &ignored);
	}
	/* The file logger is the default logger: bring it even when 'extensions' leaves it out. */
	if (!cfg->has_loggers) {
		struct dli_error ignored;
		dli_loader_load(ctx->loader, "file", &ignored);
	}
	return 0;
}

/* dli_options.logger_ops: checked as a module's logger table is (loader-check.c), described by a
 * descriptor of the context's own so that messages name it. */
static int add_host_logger(struct dli_context *ctx, const struct dli_options *o,
			   struct dli_logger_instance *li, struct dli_error *err)
{
	const struct dli_logger_ops *ops = o->logger_ops;
	if (!DLI_HAS_MEMBER(ops, struct dli_logger_ops, log_scalar) || !ops->log_scalar)
		return dli_error_set(err, -EINVAL, NULL,
				     "dli_init: options.logger_ops (size %u) has no log_scalar: set "
				     "size = sizeof(struct dli_logger_ops) and log_scalar",
				     (unsigned)ops->size);
	snprintf(ctx->host_logger_name, sizeof ctx->host_logger_name, "%s",
		 o->logger_name && o->logger_name[0] ? o->logger_name : "host");
	ctx->host_logger = (struct dli_logger_desc){
		.size = sizeof ctx->host_logger, .name = ctx->host_logger_name,
		.doc = "the host's own logger (dli_options.logger_ops)", .ops = ops};
	*li = (struct dli_logger_instance){.desc = &ctx->host_logger, .state = o->logger,
					   .host = true};
	return 0;
}

/* With `validate_only` (dlinspect check), each logger's validate method instead of create: its own
 * checks of its params, with the messages a run would give, and no file opened. */
static int create_loggers(struct dli_context *ctx, const struct dli_options *o, bool validate_only,
			  struct dli_error *err)
{
	struct dli_config *cfg = ctx->config;
	static const struct dli_logger_config none;
	size_t n = cfg->has_loggers ? cfg->n_loggers : 1;
	ctx->loggers = calloc(n + 1, sizeof *ctx->loggers); /* + the host's */
	if (!ctx->loggers)
		return dli_error_set(err, -ENOMEM, NULL, "out of memory");
	if (o->logger_ops && !validate_only) {
		/* Last, so that the files have a step's records before a host's code sees them. */
		int r = add_host_logger(ctx, o, &ctx->loggers[n], err);
		if (r)
			return r;
	}
	for (size_t i = 0; i < n; i++) {
		const struct dli_logger_config *lc = cfg->has_loggers ? &cfg->loggers[i] : &none;
		const struct dli_logger_entry *e = lc->logger;
		const struct dli_value *params = lc->params;
		if (!cfg->has_loggers) {
			e = dli_registry_logger(&ctx->registry, "file");
			if (!e) {
				/* Not a return: a host's logger, last, still gets the statistics. */
				dli_log(ctx, DLI_LOG_WARNING, "the default 'file' logger module was not "
							      "found: statistics will not be written%s",
					o->logger_ops && !validate_only ? " to files (the host's logger "
									  "still gets them)" : "");
				break;
			}
			struct dli_value *defaults;
			int r = dli_config_params(cfg, NULL, e->desc->params, e->desc->n_params, "file",
						  &defaults, err);
			if (r)
				return r;
			params = defaults;
		}
		struct dli_logger_create_args args = {
			.size = sizeof args,
			.ctx = ctx,
			.host = &ctx->host,
			.where = lc->where_text ? lc->where_text : "(default logger)",
			.params = params,
			.n_params = e->desc->n_params,
			.log_dir = ctx->log_dir,
			.rank = ctx->rank,
			.world_size = ctx->world_size,
		};
		struct dli_logger_instance *li = &ctx->loggers[ctx->n_loggers];
		li->desc = e->desc;
		struct dli_error perr = {.code = -EINVAL};
		const struct dli_logger_ops *ops = e->desc->ops;
		int r = !validate_only ? ops->create(&args, &li->state, &perr)
			: DLI_HAS_MEMBER(ops, struct dli_logger_ops, validate) && ops->validate
			? ops->validate(&args, &perr) : 0;
		if (r) {
			*err = perr;
			err->code = r;
			/* The module's name and file, as a feature's create failure gives them: a
			 * plugin dir may hold a stale or foreign build of it. */
			return dli_error_prefix(err, lc->where_text ? &lc->where : NULL,
						"loggers.%s (module '%s', %s): %s: ", e->desc->name,
						e->module->name, e->path,
						validate_only ? "invalid logger parameters"
							      : "could not create the logger");
		}
		if (validate_only)
			continue;
		li->messages_only = !cfg->has_loggers && o->default_logger_messages_only;
		ctx->n_loggers++;
		/* nvdlfw_inspect's line, so that its message log and ours say the same. */
		if (!cfg->has_loggers && !li->messages_only) {
			const char *dir = o->log_dir ? o->log_dir : getenv("DLINSPECT_LOG_DIR");
			dli_log(ctx, DLI_LOG_INFO, "Default logging to file enabled at %s",
				dir && dir[0] ? dir : ".");
		}
	}
	if (o->logger_ops && !validate_only) {
		ctx->loggers[ctx->n_loggers] = ctx->loggers[n];
		ctx->n_loggers++;
	}
	return 0;
}

/* The first message log line: what this run loaded, so a log read later says how it was made. */
static void log_start(struct dli_context *ctx)
{
	char modules[512] = "";
	size_t off = 0;
	for (size_t i = 0; i < dli_loader_count(ctx->loader) && off < sizeof modules; i++)
		off += (size_t)snprintf(modules + off, sizeof modules - off, "%s%s", i ? ", " : "",
					dli_loader_module(ctx->loader, i)->name);
	dli_log(ctx, DLI_LOG_INFO,
		"dlinspect %s started: config %s, %zu sections, %zu feature instances, modules: %s; "
		"rank %d of %d, iteration %lld",
		DLI_VERSION_STRING, ctx->config->path, ctx->config->n_sections, ctx->n_instances,
		modules, ctx->rank, ctx->world_size, (long long)ctx->iteration);
}

/* nvdlfw_inspect's two lines about the config it read (docs/logging.md): where it came from, and
 * every section's name, enabled or not, as Python prints a list of str. The file logger's escaping
 * of control characters and `\` is repr's; a name holding both quote marks is written between
 * single quotes without repr's `\'`, which that escaping would double. */
static void log_config_read(struct dli_context *ctx, const struct dli_options *o)
{
	const struct dli_config *cfg = ctx->config;
	size_t size = 3;
	for (size_t i = 0; i < cfg->n_sections; i++)
		size += strlen(cfg->sections[i].name) + 4;
	char *list = malloc(size), *p = list;
	dli_log(ctx, DLI_LOG_INFO, "Reading config from %s.",
		!o->config_yaml ? cfg->path
		: o->config_origin ? o->config_origin : "YAML text");
	if (!list)
		return;
	*p++ = '[';
	for (size_t i = 0; i < cfg->n_sections; i++) {
		const char *name = cfg->sections[i].name;
		char q = strchr(name, '\'') && !strchr(name, '"') ? '"' : '\'';
		p += sprintf(p, "%s%c%s%c", i ? ", " : "", q, name, q);
	}
	strcpy(p, "]");
	dli_log(ctx, DLI_LOG_INFO, "Loaded configs for %s.", list);
	free(list);
}

/* The public names of the context's lifecycle (dlinspect.h). */
int dli_init(const struct dli_options *options, struct dli_context **out, struct dli_error *err)
{
	return dli_context_create(options, true, out, err);
}

void dli_destroy(struct dli_context *ctx)
{
	dli_context_destroy(ctx);
}

int dli_context_create(const struct dli_options *options, bool with_loggers,
		       struct dli_context **out, struct dli_error *err)
{
	struct dli_options defaults;
	dli_options_init(&defaults);
	if (!out)
		return dli_error_set(err, -EINVAL, NULL, "dli_init: `out` is NULL");
	/* A zeroed struct (memset, `= {0}`) has size 0, and a size below 1.0's struct is no
	 * version's: copying it would run without the config and log dir the caller set, and say
	 * nothing. */
	if (options && options->size < DLI_OPTIONS_SIZE_1_0) {
		if (err)
			memset(err, 0, sizeof *err);
		*out = NULL;
		if (options->size == 0)
			return dli_error_set(err, -EINVAL, NULL,
					     "dli_init: options.size is 0: initialize the options with "
					     "dli_options_init(&options) (or set size = sizeof(struct "
					     "dli_options)) before setting fields");
		return dli_error_set(err, -EINVAL, NULL,
				     "dli_init: options.size is %u, smaller than any version's struct "
				     "dli_options (%zu bytes at least): initialize the options with "
				     "dli_options_init(&options)",
				     (unsigned)options->size, (size_t)DLI_OPTIONS_SIZE_1_0);
	}
	/* Copy what the caller's (maybe older, smaller) struct holds over our defaults. */
	if (options) {
		size_t n = options->size < sizeof defaults ? options->size : sizeof defaults;
		memcpy(&defaults, options, n);
		defaults.size = sizeof defaults;
	}
	const struct dli_options *o = &defaults;
	*out = NULL;
	if (err)
		memset(err, 0, sizeof *err);
	/* Values no host means: refused, not clamped (a rank of -1 would name log files
	 * "globalrank--1"). A world_size of 0 or 1 is "not said": only a larger one bounds the rank. */
	if (o->rank < 0 || o->world_size < 0 || (o->world_size > 1 && o->rank >= o->world_size))
		return dli_error_set(err, -EINVAL, NULL,
				     "dli_init: options.rank is %d and options.world_size %d: expected "
				     "0 <= rank < world_size (a world_size of 0 or 1 leaves the rank "
				     "unbounded)",
				     o->rank, o->world_size);
	if (o->initial_iteration < 0)
		return dli_error_set(err, -EINVAL, NULL,
				     "dli_init: options.initial_iteration is %lld: expected an iteration "
				     ">= 0",
				     (long long)o->initial_iteration);
	if (o->log_level < -1 || o->log_level > DLI_LOG_DEBUG)
		return dli_error_set(err, -EINVAL, NULL,
				     "dli_init: options.log_level is %d: expected -1 (from the environment) "
				     "or %d (error) to %d (debug)",
				     o->log_level, DLI_LOG_ERROR, DLI_LOG_DEBUG);
	struct dli_context *ctx = calloc(1, sizeof *ctx);
	if (!ctx)
		return dli_error_set(err, -ENOMEM, NULL, "out of memory");
	ctx->host = dli_host_template;
	static atomic_uint_fast64_t serials;
	ctx->serial = atomic_fetch_add(&serials, 1) + 1;
	ctx->rank = o->rank;
	ctx->world_size = o->world_size > 0 ? o->world_size : 1;
	ctx->iteration = o->initial_iteration;
	ctx->n_tensors = DLI_TENSOR_STANDARD_COUNT;
	ctx->log_level = DLI_LOG_INFO;
	pthread_mutex_init(&ctx->layers_lock, NULL);
	dli_stats_backend_init(&ctx->cuda, ctx);
	char **dirs = NULL;
	size_t n_dirs = 0;
	int r = 0;
	const char *path = NULL;
	struct dli_layer_table *t = dli_layer_table_create(64);
	if (!t) {
		r = dli_error_set(err, -ENOMEM, NULL, "out of memory");
		goto fail;
	}
	atomic_store(&ctx->layers, t);

	const char *env_level = getenv("DLINSPECT_LOG_LEVEL");
	const char *nv_level = getenv("NVDLFW_INSPECT_LOG_LEVEL");
	bool nv_level_unknown = false;
	if (o->log_level >= 0)
		ctx->log_level = o->log_level;
	else if (env_level && env_level[0]) {
		if (parse_level(env_level, &ctx->log_level)) {
			r = dli_error_set(err, -EINVAL, NULL, "DLINSPECT_LOG_LEVEL='%s': expected "
							      "error, warning, info or debug (or 0-3)",
					  env_level);
			goto fail;
		}
	} else if (nv_level && nv_level[0])
		nv_level_unknown = parse_nv_level(nv_level, &ctx->log_level) != 0;
	if ((r = config_path_from_env(ctx, o, &path, err)))
		goto fail;
	if (nv_level_unknown)
		dli_log(ctx, DLI_LOG_WARNING,
			"NVDLFW_INSPECT_LOG_LEVEL='%s' is no logging level (DEBUG, INFO, WARNING, ERROR, "
			"CRITICAL): using INFO, as nvdlfw_inspect does",
			nv_level);
	const char *log_dir = o->log_dir ? o->log_dir : getenv("DLINSPECT_LOG_DIR");
	/* Absolute from here on, as nvdlfw_inspect's log files are (Python's FileHandler takes the
	 * absolute path at initialize): files opened later (at the first line, the first dump) must
	 * not land somewhere else because the host changed its working directory meanwhile. */
	if (!(ctx->log_dir = dli_abs_path(log_dir && log_dir[0] ? log_dir : "."))) {
		r = dli_error_set(err, -ENOMEM, NULL, "out of memory");
		goto fail;
	}

	if (!o->config_yaml && !path) {
		/* The default run: no module loaded, no layer selected, every call a pointer check;
		 * a host's logger still gets the host's own scalars (dli_log_scalar). */
		if (o->logger_ops) {
			if (!(ctx->loggers = calloc(1, sizeof *ctx->loggers))) {
				r = dli_error_set(err, -ENOMEM, NULL, "out of memory");
				goto fail;
			}
			if ((r = add_host_logger(ctx, o, &ctx->loggers[0], err)))
				goto fail;
			ctx->n_loggers = 1;
		}
		*out = ctx;
		return 0;
	}
	/* YAML text is named "<string>" in messages, even when a config_path is also set. */
	if ((r = dli_config_create(o->config_yaml ? NULL : path, o->config_yaml, &ctx->config,
				   err)))
		goto fail;
	if ((r = dli_search_dirs(o->plugin_dirs, o->n_plugin_dirs, &dirs, &n_dirs, err))) {
		dli_error_prefix(err, NULL, "dli_init: options.plugin_dirs: ");
		goto fail;
	}
	if ((r = dli_loader_create(&ctx->host, (const char *const *)dirs, n_dirs, &ctx->loader, err)))
		goto fail;
	dli_loader_allow_paths(ctx->loader, o->allow_module_paths);
	if ((r = load_modules(ctx, o, err)))
		goto fail;
	if ((r = dli_registry_init(&ctx->registry, ctx->loader, err)))
		goto fail;
	/* dlinspect check (no loggers) opens no communicator: it runs on one process. */
	if (with_loggers && (r = dli_reduce_open(ctx, o, err)))
		goto fail;
	if (DLI_HAS_MEMBER(o, struct dli_options, n_tensor_names) && o->tensor_names) {
		for (size_t i = 0; i < o->n_tensor_names; i++)
			if (!o->tensor_names[i] || !o->tensor_names[i][0]) {
				r = dli_error_set(err, -EINVAL, NULL,
						  "dli_init: options.tensor_names[%zu] is %s", i,
						  o->tensor_names[i] ? "empty" : "NULL");
				goto fail;
			}
		ctx->config->declared_tensors = o->tensor_names;
		ctx->config->n_declared_tensors = o->n_tensor_names;
		ctx->config->tensors_declared = true;
	}
	if ((r = dli_config_resolve(ctx->config, &ctx->registry, err)))
		goto fail;
	ctx->n_tensors = ctx->config->n_tensor_names;
	if ((r = create_loggers(ctx, o, !with_loggers, err)))
		goto fail;
	if ((r = dli_instances_create(ctx, err)))
		goto fail;
	if ((r = dli_nvtx_setup(ctx, err)))
		goto fail;
	log_start(ctx);
	log_config_read(ctx, o);
	dli_reduce_announce(ctx);
	ctx->stepped = !with_loggers; /* `dlinspect check` has no host calls to judge */
	for (size_t i = 0; i < ctx->config->n_warnings; i++) {
		dli_log(ctx, DLI_LOG_WARNING, "%s", ctx->config->warnings[i]);
		/* A tensor name nobody declared is invisible in a run: say so where people look. */
		if (ctx->config->warnings_loud[i] && with_loggers && ctx->log_level >= DLI_LOG_WARNING)
			dli_stderr_line(NULL, ctx->config->warnings[i]);
	}
	if (with_loggers && (r = dli_reload_init(ctx, o, o->config_yaml ? NULL : path, err)))
		goto fail;
	dli_search_dirs_free(dirs, n_dirs);
	*out = ctx;
	return 0;
fail:
	dli_search_dirs_free(dirs, n_dirs);
	if (err && !err->code)
		err->code = r;
	ctx->stepped = true; /* nothing ran: no silent no-op to report */
	dli_context_destroy(ctx);
	return r;
}

void dli_context_destroy(struct dli_context *ctx)
{
	if (!ctx)
		return;
	if (!ctx->stepped) {
		dli_report_silent_noops(ctx);
		dli_report_unstepped(ctx);
	}
	for (size_t i = 0; i < ctx->n_layers; i++)
		dli_layer_destroy(ctx->layer_list[i]);
	free(ctx->layer_list);
	dli_layer_table_destroy(atomic_load(&ctx->layers));
	dli_instances_destroy(ctx);
	unsigned long long failures = atomic_load(&ctx->inspect_failures);
	if (failures > 1)
		dli_log(ctx, DLI_LOG_ERROR,
			"%llu inspect calls of features failed in this run (the first is reported above)",
			failures);
	failures = atomic_load(&ctx->modify_failures);
	if (failures > 1)
		dli_log(ctx, DLI_LOG_ERROR,
			"%llu dli_modify_tensor calls failed in this run (each is in the message log; "
			"the first is reported above)",
			failures);
	for (size_t i = 0; i < ctx->n_loggers; i++) {
		struct dli_logger_instance *l = &ctx->loggers[i];
		const struct dli_logger_ops *ops = l->desc->ops;
		int r = DLI_HAS_MEMBER(ops, struct dli_logger_ops, flush) && ops->flush
				? ops->flush(l->state)
				: 0;
		/* The last step's records are written here: a failure must not go unsaid. */
		if (r < 0 && !atomic_exchange(&l->failed, true))
			dli_log(ctx, DLI_LOG_ERROR, "logger '%s' could not write its last records: %s",
				l->desc->name, strerror(-r));
	}
	/* Loggers go last but before their code is unloaded: messages above may still use them. */
	size_t n_loggers = ctx->n_loggers;
	ctx->n_loggers = 0;
	for (size_t i = n_loggers; i-- > 0;)
		if (!ctx->loggers[i].host && ctx->loggers[i].desc->ops->destroy)
			ctx->loggers[i].desc->ops->destroy(ctx->loggers[i].state);
	free(ctx->loggers);
	/* After the loggers wrote their last records (closing may finalize MPI, which a rank that
	 * did not come can make slow), and after every shared accumulator went with the layers and
	 * instances above. */
	dli_reduce_close(ctx);
	/* Every accumulator went with the layers and instances above: the backend can go. */
	dli_stats_backend_finish(&ctx->cuda);
	dli_registry_finish(&ctx->registry);
	dli_loader_destroy(ctx->loader);
	dli_config_destroy(ctx->config);
	dli_reload_finish(ctx);
	pthread_mutex_destroy(&ctx->layers_lock);
	free(ctx->log_dir);
	free(ctx);
}
