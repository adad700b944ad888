/* dlinspect host API: what a training program calls at each GEMM and for each tensor it watches.
 *
 * Ownership in one paragraph: dli_init returns a context the caller owns and frees with dli_destroy.
 * Layer handles belong to the context and stay valid until dli_destroy. Every string and tensor passed
 * in is borrowed for the duration of the call only.
 *
 * NULL, one rule for every function: no call crashes on a NULL pointer argument. A NULL context,
 * layer handle or name makes a *_enabled call (and its _by_name form) answer its default, with *next
 * = DLI_NEVER; dli_layer_name, dli_tensor_id and dli_gemm_from_name answer NULL / -1 (dli_tensor_id
 * still knows the standard names); every call returning int returns -EINVAL (dli_iteration_get
 * too); void calls do nothing (dli_destroy, dli_iteration_set, dli_log, dli_options_init). A NULL
 * out-pointer a call must fill (dli_init's `out`, dli_layer_get's `out`, dli_layer_plan's `plan`) is
 * -EINVAL; dli_mode_get(NULL) answers DLI_MODE_TRAIN and dli_last_error(NULL) "". Tensors are
 * checked by whoever reads them: a NULL `in`/`out` of dli_modify_tensor is -EINVAL when a feature
 * would act (else -ENOENT, nothing to do), inspect calls hand NULL tensors to the features, which
 * refuse what they need. `next` and `err` may always be NULL.
 *
 * Threads, per function (tests/unit/test_threads.c holds the contract to it, also under TSan):
 * - Any thread, concurrently with each other and with every call below, on one context:
 *   dli_layer_get, dli_layer_name, dli_tensor_id, the handle calls (dli_fp8_gemm_enabled,
 *   dli_modify_tensor_enabled, dli_modify_tensor, dli_inspect_tensor_enabled, dli_inspect_tensor,
 *   dli_inspect_tensor_postquantize_enabled, dli_inspect_tensor_postquantize, dli_call), the
 *   *_by_name calls (which create a missing layer as dli_layer_get does: the layer table grows
 *   under a lock while lookups go on without one), dli_log, dli_layer_plan, dli_last_error (its
 *   text is the calling thread's own), dli_config_reload (also from a signal handler). Calls on one layer from several
 *   threads are fine too: features lock what they share (docs/plugins.md).
 * - Not concurrently with any other call on the same context: dli_step, dli_iteration_set,
 *   dli_mode_set and dli_destroy (after which no call may use the context or its handles).
 *   dli_iteration_get and dli_mode_get read what these change: call them from the thread that
 *   steps, or between steps. A core
 *   built with DLI_DEBUG_CHECKS defined reports a dli_step that overlaps modify, inspect or
 *   dli_call calls.
 * - No shared state: dli_options_init, dli_gemm_from_name, dli_fp8_cast (on tensors no other thread
 *   writes), dli_fp8_current_scale. dli_init builds a new context and may run beside calls on
 *   other contexts, but it reads the environment, and the loggers' `timestamp` setting sets
 *   NVDLFW_INSPECT_LOG_TIMESTAMP (setenv): create contexts before starting threads that change
 *   or read the environment (docs/logging.md). */
#ifndef DLINSPECT_H
#define DLINSPECT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <dlinspect/stats.h>
#include <dlinspect/tensor.h>
#include <dlinspect/version.h>

#ifdef __cplusplus
extern "C" {
#endif

struct dli_context;
struct dli_layer;
struct dli_comm_ops;
struct dli_logger_ops;

/* "Never": the next_iteration of an answer that cannot change again. */
#define DLI_NEVER INT64_MAX

/* The three GEMMs of a Linear layer (TransformerEngine's names). */
enum dli_gemm {
	DLI_GEMM_FPROP = 0,
	DLI_GEMM_DGRAD,
	DLI_GEMM_WGRAD,
	DLI_GEMM_COUNT
};

/* Tensor ids. The six standard tensors have fixed ids; a host's own tensor names (as used in the
 * config's `tensors:` lists) get ids from dli_tensor_id(). */
enum dli_tensor_kind {
	DLI_TENSOR_ACTIVATION = 0,
	DLI_TENSOR_GRADIENT,
	DLI_TENSOR_WEIGHT,
	DLI_TENSOR_OUTPUT,
	DLI_TENSOR_WGRAD,
	DLI_TENSOR_DGRAD,
	DLI_TENSOR_STANDARD_COUNT
};

enum dli_log_level {
	DLI_LOG_ERROR = 0,
	DLI_LOG_WARNING,
	DLI_LOG_INFO,
	DLI_LOG_DEBUG,
};

/* Error details filled by failing calls. `message` is complete on its own; where a config is
 * involved it starts with "path:line:column: " and `file`, `line`, `column` (1-based) say the same. */
struct dli_error {
	int code; /* the negative errno the call returned */
	char file[512]; /* config path, "<string>" for YAML text, "" when no config is involved */
	int line;
	int column;
	char message[1024];
};

/* Options for dli_init. Fill with dli_options_init() first, then set what you need: fields added in
 * later versions keep their defaults for callers built against older headers. A zeroed struct
 * (size 0), or a size smaller than any version's struct, is refused by dli_init with -EINVAL
 * rather than read as "no field set". */
struct dli_options {
	uint32_t size; /* sizeof(struct dli_options); set by dli_options_init */
	const char *config_path; /* YAML file; NULL = $DLINSPECT_CONFIG, and if unset, no config */
	const char *config_yaml; /* YAML text instead of a file (wins over config_path) */
	const char *log_dir; /* NULL = $DLINSPECT_LOG_DIR, and if unset "." */
	const char *const *plugin_dirs; /* searched before $DLINSPECT_PLUGIN_PATH and the install dir;
					 * a NULL or empty entry is refused */
	size_t n_plugin_dirs;           /* ignored when plugin_dirs is NULL */
	const char *const *extensions; /* when non-NULL, replaces the config's `extensions` list */
	size_t n_extensions;
	int rank;       /* global rank of this process (file names, logger `ranks`); >= 0 */
	int world_size; /* 0 or 1: one process (the rank is not bounded); else rank < world_size */
	int64_t initial_iteration; /* >= 0 */
	int log_level; /* enum dli_log_level; -1 = $DLINSPECT_LOG_LEVEL, and if unset INFO; others refused */
	/* The host's own tensor names, besides the standard ones (borrowed for dli_init). When
	 * non-NULL (n may be 0), a config naming any other tensor in a TransformerEngine-style
	 * feature is refused with a did-you-mean; when NULL, such a name is taken as the host's and
	 * warned about (message log and stderr, once). See docs/config.md, "Tensor names". */
	const char *const *tensor_names;
	size_t n_tensor_names;
	/* Whether an `extensions` entry (the config's, or `extensions` above) may be a path to a
	 * module file instead of a module or namespace name. Off by default, so that a config cannot
	 * make dlinspect load code from outside the plugin dirs; no environment variable turns it on
	 * (docs/security.md). */
	bool allow_module_paths;
	/* Live reload (docs/config.md, "Reloading"): every this many steps, dli_step re-reads the
	 * config file and applies it when its content changed. 0 = never (dli_config_reload still
	 * asks for one check); -1 (the default) = $DLINSPECT_CONFIG_RELOAD_STEPS, and if unset 0. */
	int config_reload_steps;
	/* A communicator the host provides (docs/distributed.md), e.g. over torch.distributed: its
	 * table (dlinspect/plugin.h; open and close are not called) and state, borrowed until
	 * dli_destroy. NULL: the one DLINSPECT_COMMUNICATOR names, if any. */
	const struct dli_comm_ops *comm_ops;
	void *comm;
	/* ABI 1.3: the name messages give the host's communicator ("torch"), borrowed for dli_init;
	 * NULL: "host". */
	const char *comm_name;
	/* DLINSPECT_1.6: a logger of the host's own, beside the config's (the Python package's hands the
	 * statistics to Python objects, nvdlfw_inspect's statistics_logger): its table
	 * (dlinspect/plugin.h; log_scalar is required, create, destroy and validate are not called,
	 * log_text neither: messages stay in the message log) and state, borrowed until dli_destroy.
	 * It receives every scalar and histogram the config's loggers receive, after them, on the
	 * same threads (a logger method runs on whichever thread emits). NULL: none. */
	const struct dli_logger_ops *logger_ops;
	void *logger;
	const char *logger_name; /* in messages, borrowed for dli_init; NULL: "host" */
	/* DLINSPECT_1.6: when the config has no `loggers` key, the default file logger writes statistics
	 * and messages; true: only the message log (nvdlfw_inspect's default_logging_enabled=False
	 * beside a host logger). A config's `loggers` key is followed as written either way. */
	bool default_logger_messages_only;
	/* DLINSPECT_1.6: what config_yaml was made from, as the message log's "Reading config from {origin}." line
	 * says it (nvdlfw_inspect's line; the Python package passes "Python dictionary" for a dict, as
	 * nvdlfw_inspect writes it); NULL: "YAML text". Borrowed for dli_init. A library older than
	 * this member ignores it, as it ignores every member past its own struct. */
	const char *config_origin;
};

/* Sets every field to its default. A call compiles to dli_options_init_sized with the size of the
 * struct in the header the host was built with, so the library writes exactly that struct, whatever
 * its own version (ABI 1.3). The function dli_options_init, which programs built against earlier
 * headers call, writes only the members of 1.0 (up to log_level) and sets size to match: set a later
 * member after it as usual, and set `size = sizeof(struct dli_options)` too if you call it (or
 * rebuild against this header). Accepts NULL. */
void dli_options_init(struct dli_options *options);
void dli_options_init_sized(struct dli_options *options, size_t size);
#define dli_options_init(options) dli_options_init_sized((options), sizeof(struct dli_options))

/* Reads the config, loads the modules it names and creates the feature and logger instances.
 * On success *out is a new context owned by the caller (free with dli_destroy) and 0 is returned;
 * on failure a negative errno is returned, *out is NULL and *err (if non-NULL) says why. */
int dli_init(const struct dli_options *options, struct dli_context **out, struct dli_error *err);

/* Writes what the loggers and dumps still hold of the steps dli_step ended, flushes and closes
 * loggers, unloads modules, frees the context and every layer handle. Statistics gathered since the
 * last dli_step (an iteration no dli_step ended) are not logged, as TransformerEngine logs them only
 * at its step; when features took tensors and no dli_step ran at all, a warning says so (message
 * log and stderr). Accepts NULL. */
void dli_destroy(struct dli_context *ctx);

/* Returns in *out the handle for the layer called `name` (borrowed: valid until dli_destroy; the
 * same name always gives the same handle). Layer selection is resolved here, once. Fails with
 * -EINVAL when two features that both modify a tensor, or one feature configured twice, select the
 * same (layer, gemm, tensor) through different sections; *err names both places. Also fails with
 * -EINVAL when a section's layer_name_regex_pattern cannot be decided for `name` (PCRE2's match or
 * depth limit); *err names the pattern, the section and the layer. A failed name is not cached:
 * asking again fails again. Thread-safe. */
int dli_layer_get(struct dli_context *ctx, const char *name, struct dli_layer **out,
		  struct dli_error *err);

/* The layer's name (borrowed from the handle). */
const char *dli_layer_name(const struct dli_layer *layer);

/* Id of a tensor name: the standard names map to enum dli_tensor_kind, a name used in the config
 * to its own id, any other name to -1 (a tensor nothing selects; calls with it answer defaults). */
int dli_tensor_id(const struct dli_context *ctx, const char *name);

/* "fprop"/"dgrad"/"wgrad" to enum dli_gemm; -1 for anything else. */
int dli_gemm_from_name(const char *name);

/* ---- Calls through a layer handle: no string work, no allocation, no lock. ----
 * Each *_enabled call returns the answer for the current iteration and, if `next` is non-NULL,
 * stores the first iteration at which the answer may differ (DLI_NEVER if it cannot), so a host can
 * skip every debug call until then. With several features: enabled = any, next = the earliest.
 * With periodic config reloads on (options.config_reload_steps), `next` is never past the first
 * iteration at which a reload may put an edited config in force. dli_config_reload's check is not
 * foreseen: a host that requests one asks again after the dli_step that follows. */

/* Default true: the GEMM runs in FP8 unless a feature (DisableFP8GEMM, DisableFP8Layer) says no. */
bool dli_fp8_gemm_enabled(struct dli_layer *layer, enum dli_gemm gemm, int64_t *next);

/* Default false. */
bool dli_modify_tensor_enabled(struct dli_layer *layer, enum dli_gemm gemm, int tensor,
			       int64_t *next);

/* Lets the one feature that modifies (gemm, tensor) write `out` from `in` (both borrowed; `out`
 * is allocated by the host with the shape and dtype the host expects). -ENOENT when no feature
 * modifies it at this iteration. `quantizer` may be NULL. */
int dli_modify_tensor(struct dli_layer *layer, enum dli_gemm gemm, int tensor,
		      const struct dli_tensor *in, const struct dli_quantizer *quantizer,
		      struct dli_tensor *out);

/* Default false. */
bool dli_inspect_tensor_enabled(struct dli_layer *layer, int tensor, int64_t *next);

/* Hands the high-precision tensor and, when the host has them, its row-wise and column-wise
 * quantized forms (each may be NULL) to every feature inspecting it at this iteration. All borrowed.
 * A no-op returning 0 when none does. */
int dli_inspect_tensor(struct dli_layer *layer, int tensor, const struct dli_tensor *hp,
		       const struct dli_quantized_tensor *rowwise,
		       const struct dli_quantized_tensor *colwise);

/* dli_inspect_tensor of a strided view (ABI 1.3): `hp` describes the view's shape, dtype and device,
 * and `hp->data` points at its element [0, ..., 0]; `strides` holds hp->ndim steps in elements (not
 * bytes), any sign, so that element [i0, i1, ...] is at data + sum(ik * strides[k]) elements:
 * e.g. the Q third of a fused QKV output of shape [T, 3h] is shape [T, h], strides [3h, 1], data
 * at the output's start (K: data + h). NULL strides, or strides of the dense row-major layout,
 * make it dli_inspect_tensor (hp->contiguous is then ignored). All borrowed for the call: the
 * strides are read before it returns, nothing is kept.
 * - What is read: the statistics features (LogTensorStats, LogFp8TensorStats, DetectNonFinite,
 *   LogNvfp4TensorStats, and any feature declaring DLI_FEATURE_STRIDED) read the view in place:
 *   dimensions contiguous with each other are merged into runs, and when the innermost run has
 *   stride 1 and is at least 256 bytes long the statistics pass reads the runs at memory speed,
 *   with the same result, bit for bit, as on a contiguous copy. Everything else is copied once
 *   per call into one contiguous buffer (allocated and freed by the call) that all its readers
 *   share: shorter runs, an inner stride other than 1, the FP8 and block-scaled what-if passes,
 *   histograms, and every feature that does not declare DLI_FEATURE_STRIDED (DumpTensors, most
 *   third-party features), which get that copy as a contiguous tensor.
 * - Refused with -EINVAL (and dli_last_error naming the layer, the tensor and the dimension):
 *   a stride of 0 on a dimension of more than one element (a broadcast: its statistics would
 *   count elements several times), a view reaching beyond 2^63 bytes, a CUDA tensor (the CUDA
 *   backend reads contiguous tensors only: pass a contiguous one), a non-empty view without data.
 *   A stride of a dimension of one element is never used. Strides that point outside the host's
 *   allocation cannot be detected: they read whatever memory is there, or crash.
 * - Overlapping views (two indices at one address) are read as the elements they list.
 * Threads: as dli_inspect_tensor (several threads may call it at once). A no-op returning 0
 * when no feature inspects the tensor, without a look at the strides. */
int dli_inspect_tensor_strided(struct dli_layer *layer, int tensor, const struct dli_tensor *hp,
			       const int64_t *strides, const struct dli_quantized_tensor *rowwise,
			       const struct dli_quantized_tensor *colwise);

/* dli_inspect_tensor_strided for a host that trains in a block-scaled recipe (ABI 1.4): its
 * row-wise and column-wise copies as the quantizer made them (struct dli_block_quantized_tensor,
 * stats.h; dli_block_quantized_te describes TransformerEngine's layouts), each may be NULL, as may
 * `strides` (a contiguous hp). Features that know block-scaled tensors read them
 * (LogFp8TensorStats: its statistics without a recipe prefix and those of the copy's recipe;
 * LogNvfp4TensorStats: an NVFP4 row-wise copy; docs/block-scaling.md, "The host's own tensor");
 * every other feature gets dli_inspect_tensor's call with no quantized tensor. A copy the
 * statistics cannot read (a CUDA one, a size that does not match hp, an unknown recipe or
 * format) fails that feature's call with dli_last_error saying why. All borrowed for the call;
 * threads and no-op as dli_inspect_tensor. */
int dli_inspect_tensor_block(struct dli_layer *layer, int tensor, const struct dli_tensor *hp,
			     const int64_t *strides, const struct dli_block_quantized_tensor *rowwise,
			     const struct dli_block_quantized_tensor *colwise);

/* Default false. */
bool dli_inspect_tensor_postquantize_enabled(struct dli_layer *layer, enum dli_gemm gemm, int tensor,
					     int64_t *next);

/* No-op returning 0 when no feature inspects it. */
int dli_inspect_tensor_postquantize(struct dli_layer *layer, enum dli_gemm gemm, int tensor,
				    const struct dli_quantized_tensor *q);

/* A call a plugin declared by name (its descriptor's `calls`). `args` is passed through untouched.
 * Returns -EINVAL for a NULL layer or name, -ENOSYS when no loaded module declares `name` (except
 * DLI_CALL_LOG_TENSOR_STATS, the core's own call: 0, as in the default run), 0 when none of the layer's features does,
 * else what the feature returned (the first non-zero one when several do). */
int dli_call(struct dli_layer *layer, const char *name, void *args);

/* The generic call that feeds the base namespace's LogTensorStats (nvdlfw_inspect's
 * `debug_api.log_tensor_stats`): dli_call(layer, DLI_CALL_LOG_TENSOR_STATS, &args). The statistics
 * of `tensor` are logged at once, one line per configured statistic and call, when the feature's
 * schedule selects the iteration. TransformerEngine's LogTensorStats is fed by dli_inspect_tensor
 * instead; see docs/config.md, "Namespaces". Everything is borrowed for the call. */
#define DLI_CALL_LOG_TENSOR_STATS "log_tensor_stats"
struct dli_log_tensor_stats_args {
	uint32_t size;           /* sizeof(struct dli_log_tensor_stats_args) */
	const char *tensor_name; /* as in the config's `tensors:` (any name the host likes) */
	const struct dli_tensor *tensor;
	int64_t iteration;       /* the step to log at; -1: the context's current iteration (other
	                          * negative values: -EINVAL) */
	/* ABI 1.3: tensor->ndim strides in elements for a strided view of `tensor`, or NULL for a
	 * contiguous tensor; read as dli_inspect_tensor_strided reads them (what is read in place,
	 * what is copied, what is refused). Borrowed for the call. A host built against older
	 * headers passes a smaller `size` and no strides. */
	const int64_t *strides;
};

/* ---- String-taking convenience calls: one hash lookup, then the handle call. ----
 * Names are borrowed. An unknown gemm name answers the default. */
bool dli_fp8_gemm_enabled_by_name(struct dli_context *ctx, const char *layer, const char *gemm,
				  int64_t *next);
bool dli_modify_tensor_enabled_by_name(struct dli_context *ctx, const char *layer, const char *gemm,
				       const char *tensor, int64_t *next);
bool dli_inspect_tensor_enabled_by_name(struct dli_context *ctx, const char *layer,
					const char *tensor, int64_t *next);
int dli_inspect_tensor_by_name(struct dli_context *ctx, const char *layer, const char *tensor,
			       const struct dli_tensor *hp);

/* ---- Steps ----
 * dli_step ends the current iteration: features' step_end runs (statistics are finalized and sent to
 * the loggers with the iteration that just ended), loggers flush, then the iteration increments.
 * It must not run concurrently with other calls on the same context. At iteration INT64_MAX
 * (DLI_NEVER, the last there is) it does nothing and returns -EOVERFLOW. Once a feature asked the
 * host to stop (DetectNonFinite with `on_detect: stop`, or its `abort_after_batch_num`: see
 * docs/features.md), every dli_step still ends its step and then returns -ECANCELED, with
 * dli_last_error naming the reason; dlinspect itself never exits. A logger whose flush fails (a
 * full disk) does not stop the step either: dli_step returns the first such error, with
 * dli_last_error naming the logger and the reason (docs/logging.md), and the next step tries
 * again. */
int dli_step(struct dli_context *ctx);

/* Asks the next dli_step to re-read the config file (docs/config.md, "Reloading"): a valid new
 * config replaces the old one at that step boundary, an invalid one is refused (message log) and
 * the old one stays. Only sets a flag: callable from any thread, at any time, and from a signal
 * handler (e.g. a host's SIGHUP handler; dlinspect installs none). Returns 0, -EINVAL for NULL,
 * -ENOENT when the context has no config file (no config, or YAML text). */
int dli_config_reload(struct dli_context *ctx);
int64_t dli_iteration_get(const struct dli_context *ctx);
/* Jumps to `iteration` (e.g. resuming from a checkpoint); cached answers are dropped. A negative
 * iteration is refused: an error in the message log, and the iteration stays. Same threading rule
 * as dli_step. */
void dli_iteration_set(struct dli_context *ctx, int64_t iteration);

/* ---- Evaluation passes (docs/config.md, "Evaluation passes") ----
 * Validation batches run inside a training iteration must neither merge into that step's
 * statistics nor, unless configured, be modified: the host says which pass it is running. */
enum dli_mode {
	DLI_MODE_TRAIN = 0, /* the default */
	DLI_MODE_EVAL,
};

/* Sets the mode of the calls that follow on `ctx`. In DLI_MODE_EVAL: inspect_tensor_enabled and
 * inspect_tensor_postquantize_enabled answer false (next DLI_NEVER), dli_inspect_tensor*,
 * dli_inspect_tensor_by_name and dli_call do nothing and return 0, so no statistic of an
 * evaluation pass reaches the step's records; modify_tensor_enabled answers true only for a
 * modifying feature configured with `in_eval: true` (and dli_modify_tensor runs only those);
 * fp8_gemm_enabled answers as in training (the model evaluated is the model trained).
 * Answers and their `next` hold for the mode they were asked in: a host that caches them (or a
 * struct dli_layer_plan) asks again after switching. The mode stays until set again: the first
 * dli_step that runs in DLI_MODE_EVAL warns (message log and stderr). Same threading rule as
 * dli_step: not concurrently with other calls on the context. Returns 0, or -EINVAL for another value (the
 * mode stays; dli_last_error and the message log say why). */
int dli_mode_set(struct dli_context *ctx, enum dli_mode mode);
enum dli_mode dli_mode_get(const struct dli_context *ctx);

/* ---- A layer's plan in one call ---- */

/* Everything a layer's *_enabled calls answer at the current iteration and mode. Tensor sets are
 * bit masks, bit t for tensor id t (ids are below 64: docs/config.md, "Tensor names"). */
struct dli_layer_plan {
	uint32_t size;      /* sizeof(struct dli_layer_plan): set by the caller */
	int64_t iteration;  /* the iteration the plan is for */
	int64_t next;       /* the first iteration at which any answer below may differ, or DLI_NEVER */
	bool fp8[DLI_GEMM_COUNT];             /* dli_fp8_gemm_enabled */
	uint64_t inspect;                     /* dli_inspect_tensor_enabled */
	uint64_t modify[DLI_GEMM_COUNT];      /* dli_modify_tensor_enabled, per GEMM */
	uint64_t postquantize[DLI_GEMM_COUNT]; /* dli_inspect_tensor_postquantize_enabled, per GEMM */
	bool any; /* some tensor is inspected or modified: false = no debug call needed until next */
};

/* Fills `plan` (caller memory, `size` set) with the answers of every *_enabled call of `layer`
 * for every GEMM and tensor id, exactly as the individual calls give them now, and their earliest
 * `next`: a host calls it once per layer and makes no debug call until plan->next (or a mode
 * switch). Returns 0, or -EINVAL when plan is NULL or its size is smaller than this version's
 * first one (a plan of `= {0}`: dli_last_error and the message log say so, the first such
 * refusal also on stderr). Thread-safe like the individual calls; no allocation. */
#if defined(__cplusplus) && defined(__GNUC__)
/* In C++ the function's name hides the struct's (g++ -Wshadow); the struct is named `struct
 * dli_layer_plan` wherever it is used, as here. */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wshadow"
#endif
int dli_layer_plan(struct dli_layer *layer, struct dli_layer_plan *plan);
#if defined(__cplusplus) && defined(__GNUC__)
#pragma GCC diagnostic pop
#endif

/* ---- Errors of calls that return a code ----
 * The text of the last failing call on `ctx` made by this thread (dli_modify_tensor,
 * dli_inspect_tensor*, naming layer, GEMM, tensor, iteration and why; dli_step, naming the stop
 * request or the logger that could not flush; dli_layer_plan and dli_mode_set, refused for their
 * arguments), or "" when none failed.
 * Borrowed: thread-local, valid until the next failing call on this thread; successful calls do
 * not clear it (as errno). Every failing call also leaves the text in the message log; the first
 * failure of a kind is also written to stderr. */
const char *dli_last_error(const struct dli_context *ctx);

/* ---- FP8 casts (docs/statistics.md), for hosts and features without their own ----
 * Casting is round-to-nearest-even of x * scale, saturating to the format's finite max; NaN stays
 * NaN; -0 stays -0. */

/* Casts `in` (f32, f16 or bf16, contiguous, in host memory) with `scale` to `format`
 * (DLI_DTYPE_F8E4M3 or DLI_DTYPE_F8E5M2). `out` (same element count, contiguous host memory,
 * allocated by the caller, written densely) receives the FP8 codes when its dtype is `format`, or, when it is DLI_DTYPE_F32, the
 * dequantized values decode(code) / scale (fake quantization); f16 or bf16 (DLI_ABI_MINOR 6 on):
 * those values rounded to nearest even, as the host's own dequantize writes its input's dtype.
 * Both tensors are borrowed. Returns
 * 0, or -EINVAL for mismatched sizes, dtypes, a layout that is not contiguous or a scale that is
 * not finite and > 0, -ENOTSUP for device memory. A feature that returns the code of a refused
 * cast (or of the host table's tensor_amax) gets the reason in the failing call's dli_last_error. */
int dli_fp8_cast(const struct dli_tensor *in, struct dli_tensor *out, enum dli_dtype format,
		 float scale);

/* The current-scaling scale: fp8_max / amax / 2^margin (448 for E4M3, 57344 for E5M2); 1 for an
 * amax of 0, inf or NaN; FLT_MAX when the result is infinite. */
float dli_fp8_current_scale(float amax, enum dli_dtype format, double margin);

/* Block-scaled fake quantization (docs/block-scaling.md), what the host table's block_fake_quant
 * gives features, for hosts that emulate a block-scaled recipe: out = dequant(quant(in)) under
 * `spec` (MXFP8, or FP8 block scaling in 1 x 128 / 128 x 128 blocks), `in` viewed as rows x cols
 * (cols its last dimension). `in` f32, f16 or bf16, `out` f32 (DLI_ABI_MINOR 6 on also f16 or bf16: the
 * f32 values rounded to nearest even) of the same element count, both contiguous host memory
 * (borrowed). 0, -EINVAL, -ENOTSUP for device memory, -ENOMEM. Since
 * DLINSPECT_1.2. Since 1.3 also NVFP4 (DLI_BLOCK_NVFP4: 1 x 16 blocks, 16 x 1 with `columnwise`;
 * DLI_BLOCK_NVFP4_2D: 16 x 16 tiles) with the recipe's stochastic rounding and random Hadamard
 * transform (the spec's 1.3 members); -EINVAL for the transform with 16 x 16 tiles or a length
 * along the blocks that is not a multiple of 16. A spec of 1.2's size is read as before. */
struct dli_block_spec; /* dlinspect/stats.h */
int dli_block_fake_quant(const struct dli_tensor *in, struct dli_tensor *out,
			 const struct dli_block_spec *spec);

/* ---- Messages ----
 * Writes a message through the loaders' message logs (file logger: nvdlfw_inspect_logs/), filtered
 * by the context's level. `fmt` is printf-style. */
void dli_log(struct dli_context *ctx, enum dli_log_level level, const char *fmt, ...)
#if defined(__GNUC__)
	__attribute__((format(printf, 3, 4)))
#endif
	;

/* Sends one scalar of the host's own (a loss, a learning rate) to every logger, as a feature's
 * statistic goes: the file logger's statistics log, TensorBoard, the host logger of
 * dli_options.logger_ops. `name` is borrowed for the call (non-empty; a logger may refuse one it
 * cannot write, e.g. TensorBoard's tag rules); `iteration` >= 0 (usually dli_iteration_get's).
 * Returns 0, -EINVAL for a NULL context or name, an empty name or a negative iteration, or the
 * first logger error (reported once in the message log, as for statistics). Thread-safe like the
 * handle calls; not during dli_step. nvdlfw_inspect's MetricLogger.log_scalar. Since
 * DLINSPECT_1.6. */
int dli_log_scalar(struct dli_context *ctx, const char *name, int64_t iteration, double value);

/* ---- Checking a tensor anywhere (Hugging Face's detect_overflow) ---- */
/* Whether `t` (borrowed for the call; a dtype the statistics read: f32, f16, bf16, f8e4m3,
 * f8e5m2, contiguous, host or CUDA memory) holds a NaN or an infinity. When it does, writes one warning line to the
 * message log (stderr when no logger takes messages, as with no config) naming `where` (borrowed,
 * may be NULL), the iteration, the NaN and inf counts and the finite abs-min/abs-max, and returns
 * true. Works on any context, with or without a config; nothing in the config selects it. A CUDA
 * tensor is read on its stream and waited for. false for a clean tensor, a NULL context or
 * tensor, and a tensor that cannot be read (that also writes one line saying why). Thread-safe
 * like the handle calls. Since DLINSPECT_1.2. */
bool dli_detect_overflow(struct dli_context *ctx, const struct dli_tensor *t, const char *where);

/* ---- What the reduction across ranks costs (docs/distributed.md) ---- */
/* Counts since dli_init of the statistics reduction across ranks: the steps at which at least one
 * group reduced, the collectives it started (an all-gather per group and step, two when the
 * records outgrew the agreed size) and the bytes those collectives gathered on this rank. Any
 * pointer may be NULL. 0, or -ENOTSUP (counts 0) when the context has no communicator;
 * -EINVAL for a NULL context. Call between steps (not during dli_step). Since DLINSPECT_1.3. */
int dli_reduce_counters(struct dli_context *ctx, uint64_t *steps, uint64_t *collectives,
			uint64_t *bytes);

/* The tensor reduction group (nvdlfw_inspect's and TransformerEngine's
 * set_tensor_reduction_group; docs/distributed.md): from the next step on, the statistics of
 * every tensor but the weight are reduced across the world ranks `ranks` (borrowed for the call:
 * n sorted, distinct ranks of the communicator's world, this rank among them) instead of the
 * whole world; NULL or n == 0: the whole world again (the default). Weights keep their
 * tensor-parallel groups. Every rank calls it at the same point, each with its own group (the
 * data-parallel ranks of its pipeline stage, say). 0; -EINVAL (err says why) for a list that is
 * not sorted, not distinct, outside the world or without this rank; -ENOTSUP without a
 * communicator, unless the group is the world or this rank alone (nothing changes then). `err`
 * may be NULL. Call between steps. Since DLINSPECT_1.5. */
int dli_reduction_group_set(struct dli_context *ctx, const int *ranks, size_t n,
			    struct dli_error *err);

#ifdef __cplusplus
}
#endif

#endif
