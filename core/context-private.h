/* The context and layer handles: what dli_init builds and the dispatch hot path reads. Types only,
 * but for dli_context_create: each file's functions are declared in its own header. */
#ifndef DLI_CONTEXT_PRIVATE_H
#define DLI_CONTEXT_PRIVATE_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include <dlinspect/plugin.h>

#include "config-types-private.h"
#include "registry-private.h"

struct dli_loader;
struct dli_backend_ops;

/* A context's CUDA backend (the module dli_cuda.so), loaded on the first CUDA tensor one of its
 * accumulators sees, and unloaded by dli_destroy after every accumulator is gone. */
struct dli_stats_backend {
	struct dli_context *ctx;
	pthread_mutex_t lock; /* serializes the one load attempt */
	atomic_bool tried;    /* a load was attempted: once per context, so one message at most */
	_Atomic(const struct dli_backend_ops *) ops; /* NULL when absent or unusable */
	struct dli_loader *loader; /* the backend's module, loaded through a loader of its own */
	atomic_bool hist_warned; /* "no histograms of CUDA tensors" was said (once per context) */
	char why[640]; /* why the load failed (set before `tried`): each refused call's last error */
};

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
	bool messages_only; /* the default file logger beside a host logger (no statistics) */
	bool host; /* dli_options.logger_ops: the host's, not created or destroyed here */
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
	struct dli_logger_desc host_logger; /* the descriptor of dli_options.logger_ops, if given */
	char host_logger_name[64];

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
	atomic_bool call_refused; /* a dli_layer_plan or dli_mode_set was refused (core/plan.c) */
	bool eval_step_said; /* a dli_step in DLI_MODE_EVAL was warned about (core/diagnose.c) */

	bool stepped; /* dli_step ran: the silent no-ops were reported (core/diagnose.c) */
	/* A feature took a tensor of the iteration at this value + 1 (0: none yet), so that
	 * dli_destroy can say when no dli_step ever logged what they gathered. */
	_Atomic int64_t inspected_at;
	atomic_bool freq_default_said; /* dli_call's line about a base block without freq, once */

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
		/* No answer's `next` goes past this (core/dispatch.c's host_next): the iteration
		 * from which a periodic reload may put an edit in force; 0: no periodic reload.
		 * Written by dli_reload_cap, where the iteration changes (dli_init, dli_step,
		 * dli_iteration_set: never beside other calls), read by the calls. */
		int64_t cap;
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

#endif
