/* The context and layer handles: what dli_init builds and the dispatch hot path reads. */
#ifndef DLI_CONTEXT_PRIVATE_H
#define DLI_CONTEXT_PRIVATE_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include <dlinspect/plugin.h>

#include "config-private.h"
#include "registry-private.h"
#include "stats-private.h"

struct dli_loader;

/* A created feature instance (one per config target). */
struct dli_instance {
	const struct dli_target *target;
	const struct dli_feature_ops *ops;
	void *state;
};

/* One instance attached to one layer. `call` comes first: features get &binding->call. */
struct dli_binding {
	struct dli_feature_call call;
	const struct dli_instance *instance;
	const struct dli_feature_ops *ops;
	atomic_bool asked; /* the host asked a call this binding serves (core/diagnose.c) */
	atomic_bool planned_on; /* a dli_layer_plan found it on: the host should act on it */
};

/* The features answering one (call, gemm, tensor) of a layer, and the cached combined answer:
 * (next << 1) | enabled, valid while iteration < next; 0 = nothing cached. The cache makes a call
 * between scheduled steps one relaxed load and one compare. */
struct dli_slot {
	_Atomic uint64_t cache;
	uint32_t n;
	struct dli_binding **bindings;
};

struct dli_layer {
	struct dli_context *ctx;
	char *name;
	/* NULL for a layer no section selects: every call answers its default after this check. */
	struct dli_slot *slots;
	struct dli_slot *fp8;     /* [gemm] */
	struct dli_slot *modify;  /* [gemm * n_tensors + tensor] */
	struct dli_slot *inspect; /* [tensor] */
	struct dli_slot *postq;   /* [gemm * n_tensors + tensor] */
	struct dli_binding *bindings; /* every attached instance, for step_end and dli_call */
	size_t n_bindings;
	/* What the host asked about this layer, set off the hot path (a slot's first answer, and
	 * actions): bit g per GEMM, bit t per tensor. */
	_Atomic uint32_t gemms_asked;
	_Atomic uint64_t tensors_asked;
	atomic_bool planned; /* the host took dli_layer_plan of this layer */
};

struct dli_logger_instance {
	/* The module's descriptor, not a registry entry: a reload replaces the registry while other
	 * threads (a feature's writer thread logging a message) may be reading this. */
	const struct dli_logger_desc *desc;
	void *state;
	atomic_bool failed; /* a write error was reported once already */
};

/* Layer handles by name: open addressing, read without a lock (slots are published with release
 * stores, a grown table replaces the old one which is kept until dli_destroy). */
struct dli_layer_table {
	size_t mask;
	_Atomic(struct dli_layer *) *slots;
	struct dli_layer_table *older;
};

struct dli_context {
	struct dli_host host;
	uint64_t serial; /* unique in the process, from 1: tags this thread's dli_last_error */
	int64_t iteration;
	/* enum dli_mode; changed only between calls (dli_mode_set). Beside `iteration`: the hot path
	 * reads both, from one cache line. */
	int mode;
	bool nvtx; /* NVTX ranges on (core/nvtx.c); set at dli_init and at a reload only */
	int rank, world_size;
	int log_level;
	char *log_dir;
	size_t n_tensors; /* config->n_tensor_names */

	struct dli_config *config;
	struct dli_loader *loader;
	struct dli_registry registry;
	struct dli_instance *instances; /* one per config target, same order */
	size_t n_instances;
	struct dli_logger_instance *loggers;
	size_t n_loggers;

	struct dli_stats_backend cuda; /* statistics of CUDA tensors (core/stats.c) */
	struct dli_reduce *reduce; /* statistics across ranks (core/reduce.c); NULL: per rank */

	pthread_mutex_t layers_lock; /* taken only to add a layer */
	_Atomic(struct dli_layer_table *) layers;
	size_t n_layers;
	struct dli_layer **layer_list; /* creation order, under layers_lock */
	size_t cap_layer_list;

	/* Failed inspect calls of features: the first is reported when it happens, the count at
	 * dli_destroy (core/dispatch.c). */
	atomic_ullong inspect_failures;
	atomic_ullong modify_failures; /* the same for dli_modify_tensor */

	bool stepped; /* dli_step ran: the silent no-ops were reported (core/diagnose.c) */

	/* The host table's request_stop: 0 none, 1 the first request is writing its reason, 2 set.
	 * dli_step returns -ECANCELED from then on (core/context.c). */
	atomic_int stop_state;
	char stop_reason[900];
	bool stop_logged; /* the first -ECANCELED was written to the message log */
	/* Live config reload (core/reload.c). */
	struct dli_reload {
		char *path;          /* the config file; NULL: nothing to re-read */
		int every;           /* check every `every` steps; 0: only on dli_config_reload */
		int since;           /* steps since the last check */
		atomic_bool requested; /* dli_config_reload (async-signal-safe) */
		uint64_t hash;       /* content of the config in force */
		uint64_t refused;    /* content last refused (0: none), not parsed again */
		bool refused_said;   /* a refusal went to stderr already */
		bool ext_from_options; /* options.extensions replaced the config's */
		char **declared;     /* options.tensor_names, copied (NULL when not given) */
		size_t n_declared;
		bool declared_given;
	} reload;
	int nvtx_env; /* DLINSPECT_NVTX: -1 unset, else 0/1 (wins over the config's `nvtx`) */

#ifdef DLI_DEBUG_CHECKS
	atomic_int calls_in_flight; /* dli_step checks it is 0 */
#endif
};

/* Reports a feature's failed inspect call: the first of the context as an error (message log and
 * stderr) naming layer, tensor, iteration and feature; every one counted. */
void dli_inspect_failed(struct dli_layer *l, const struct dli_binding *b, const char *call,
			int gemm, int tensor, int64_t iteration, int rc);

/* Reports a failed dli_modify_tensor (`b` NULL when no feature modifies at this iteration):
 * every one in the message log and dli_last_error, the first also on stderr. */
void dli_modify_failed(struct dli_layer *l, const struct dli_binding *b, int gemm, int tensor,
		       int64_t iteration, int rc, const struct dli_tensor *in,
		       const struct dli_tensor *out);

/* The layer and tensor of the inspect call this thread is in, for messages of code that only sees
 * a tensor (statistics refusals): writes " (layer 'x', tensor 'y')" into buf, or "" outside such a
 * call (core/dispatch.c). */
void dli_call_site(char *buf, size_t size);

/* Set by dli_layer_plan while it asks the slots (core/dispatch.c). */
extern _Thread_local bool dli_planning;

/* "bf16[4x8] cuda:0 non-contiguous", or "NULL" (core/diagnose.c). */
void dli_tensor_describe(char *buf, size_t size, const struct dli_tensor *t);

/* Stores `text` as this thread's dli_last_error for `ctx` (core/diagnose.c). */
void dli_last_error_set(const struct dli_context *ctx, const char *text);

/* Warns once about config that the host's calls never reached: sections that selected none of the
 * layers the host asked for, features configured for GEMMs or tensors the host never asked about.
 * Called at the end of the first step, or at dli_destroy when no step ran (core/diagnose.c). */
void dli_report_silent_noops(struct dli_context *ctx);

/* dli_log for messages that go only to the message logs, never to stderr, whatever the level. */
void dli_log_quiet(struct dli_context *ctx, enum dli_log_level level, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

/* The host table every module gets (each context copies it). Entries may look at it before any
 * context exists, e.g. for `dlinspect plugins`. */
extern const struct dli_host dli_host_template;

/* dli_init without loggers when `with_loggers` is false: for `dlinspect check`, which must not write
 * logs. Messages then go to stderr. */
int dli_context_open(const struct dli_options *options, bool with_loggers, struct dli_context **out,
		     struct dli_error *err);

/* The plugin search path: `extra` dirs, then $DLINSPECT_PLUGIN_PATH (':'-separated), then the
 * install dir. *out is an array of owned strings; free with dli_search_dirs_free. */
int dli_search_dirs(const char *const *extra, size_t n_extra, char ***out, size_t *n,
		    struct dli_error *err);
void dli_search_dirs_free(char **dirs, size_t n);

/* Builds the handle for `name` (dispatch.c); called by dli_layer_get under layers_lock. */
int dli_layer_create(struct dli_context *ctx, const char *name, struct dli_layer **out,
		     struct dli_error *err);
void dli_layer_destroy(struct dli_layer *layer);
/* Builds, into a new *staged, the tables `l` would have under ctx's current feature instances;
 * dli_layer_commit swaps them into `l` (whose old tables are then detached and freed), and
 * dli_layer_unstage drops a staged copy not committed (core/reload.c). */
int dli_layer_stage(struct dli_layer *l, struct dli_layer **staged, struct dli_error *err);
void dli_layer_commit(struct dli_layer *l, struct dli_layer *staged);
void dli_layer_unstage(struct dli_layer *staged);

/* Creates ctx->instances from ctx->config's targets / destroys them (core/context.c). */
int dli_context_create_instances(struct dli_context *ctx, struct dli_error *err);
void dli_context_destroy_instances(struct dli_context *ctx);

/* Reload state from the options and the environment, after the config is in force (0 or -EINVAL
 * with *err set); the check dli_step makes; freeing (core/reload.c). */
int dli_reload_init(struct dli_context *ctx, const struct dli_options *o, const char *path,
		    struct dli_error *err);
void dli_reload_at_step(struct dli_context *ctx);
void dli_reload_finish(struct dli_context *ctx);

/* Drops every cached answer (dli_iteration_set). */
void dli_layer_forget(struct dli_layer *layer);

/* The handle for `name` if it exists, else NULL. Lock-free: the string-taking calls use it on every
 * call. */
struct dli_layer *dli_layer_find(struct dli_context *ctx, const char *name);

/* Fans a histogram out to the loggers that take them, same error rule as scalars. */
int dli_context_emit_histogram(struct dli_context *ctx, const char *name, int64_t iteration,
			       const struct dli_histogram *h);

/* Fans a scalar out to every logger; reports each logger's first failure once. */
int dli_context_emit_scalar(struct dli_context *ctx, const char *name, int64_t iteration,
			    double value);

#endif
