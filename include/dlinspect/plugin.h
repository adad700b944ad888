/* dlinspect module ABI: what a feature or logger plugin implements and what the host gives it.
 *
 * A module is a shared object exporting one symbol, DLI_MODULE_ENTRY. The host calls it with its
 * function table and gets back a static module descriptor. A plugin links nothing from the core:
 * everything it needs comes through `struct dli_host`.
 *
 * Compatibility (docs/plugins.md, "ABI and versions"): every table starts with its size and only
 * grows at its end, and each member says the minor version that added it. The host reads a
 * plugin's descriptors and ops tables only as far as their size covers (what lies beyond reads as
 * NULL / 0), so a plugin built against older headers of the same major keeps loading; a plugin
 * reads a host table member added after the minor it needs only after DLI_HAS_MEMBER says the host
 * has it. `struct dli_param_desc` has no size of its own: its array stride is the descriptor's
 * `param_size` (1.1), or, when that is 0, the size it had at the module's abi_minor.
 *
 * Threads (each method says more; docs/plugins.md has the table): create, destroy, step_end and a
 * logger's flush never run concurrently with any other method of the instance; layer_attach runs
 * under the host's layer lock, alone among attaches and step_end; the per-call methods (*_enabled,
 * modify_tensor, inspect_tensor*, call) and a logger's log_* methods may run on several threads
 * at once. destroy follows only a successful create, with what create stored. */
#ifndef DLINSPECT_PLUGIN_H
#define DLINSPECT_PLUGIN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <dlinspect/dlinspect.h>
#include <dlinspect/stats.h>
#include <dlinspect/tensor.h>
#include <dlinspect/version.h>

#ifdef __cplusplus
extern "C" {
#endif

#define DLI_MODULE_ENTRY dli_module_entry
#define DLI_MODULE_ENTRY_NAME "dli_module_entry"

#if defined(__GNUC__)
#define DLI_EXPORT __attribute__((visibility("default")))
#else
#define DLI_EXPORT
#endif

/* True when the table `p` (whose first member is its size) is large enough to hold `member`. */
#define DLI_HAS_MEMBER(p, type, member) \
	((p)->size >= offsetof(type, member) + sizeof(((type *)0)->member))

/* The sizes of the tables as ABI 1.0 defined them: what a module built against 1.0 headers fills,
 * and the least the host accepts; and the param element's size at each minor, for the stride of a
 * params array whose descriptor has no param_size. */
#define DLI_MODULE_SIZE_1_0 (offsetof(struct dli_module, n_loggers) + sizeof(size_t))
#define DLI_FEATURE_DESC_SIZE_1_0 (offsetof(struct dli_feature_desc, ops) + sizeof(void *))
#define DLI_LOGGER_DESC_SIZE_1_0 (offsetof(struct dli_logger_desc, ops) + sizeof(void *))
#define DLI_PARAM_DESC_SIZE_1_0 \
	((offsetof(struct dli_param_desc, required) + sizeof(bool) + sizeof(void *) - 1) / \
	 sizeof(void *) * sizeof(void *))

#define DLI_PARAM_DESC_SIZE_1_1 \
	((offsetof(struct dli_param_desc, max) + sizeof(double) + sizeof(void *) - 1) / \
	 sizeof(void *) * sizeof(void *))

/* For a descriptor's `param_size`. */
#define DLI_PARAM_SIZE sizeof(struct dli_param_desc)

/* ---- Parameters ----
 * A feature or logger declares its keys; the core parses and validates the config against them
 * (types, choices, did-you-mean for unknown keys) and hands the values over in schema order. */

enum dli_param_type {
	DLI_PARAM_BOOL = 0,
	DLI_PARAM_INT,
	DLI_PARAM_FLOAT,
	DLI_PARAM_STRING,
	DLI_PARAM_STRING_LIST, /* a YAML sequence of strings; a bare scalar is a one-item list */
	DLI_PARAM_INT_PAIRS,   /* [[a, b], ...], e.g. start_end_list */
};

/* An array element, not a sized table: see `param_size` in the descriptors for how it grows. */
struct dli_param_desc {
	/* ABI 1.0 */
	const char *key;
	const char *alias; /* older spelling accepted for the same key (e.g. `type` for `stats`), or NULL */
	enum dli_param_type type;
	const char *default_value; /* as YAML text ("1", "[min, max]"); NULL = no default */
	const char *doc;           /* one line, shown by `dlinspect plugins --explain` */
	/* NULL-terminated allowed strings (STRING, STRING_LIST), or NULL. In a STRING_LIST, a choice
	 * spelled `name{key,key}` (ABI 1.5; an older dlinspect takes the spelling as a name) takes
	 * parameters that are positive integers (the config's reader checks that, at the value's
	 * place): a config lists it as `name` or as `name: {key: 4}`, and the feature gets `name{}`
	 * or `name{key=4}` (the keys given, in the choice's order; it checks their upper bounds). */
	const char *const *choices;
	bool required;

	/* ABI 1.1: the inclusive range of an INT or FLOAT value, when `bounded` (a module of ABI 1.0
	 * reads as unbounded). The core refuses a value outside it, and NaN for every FLOAT,
	 * bounded or not, with the value's file:line:column; `dlinspect plugins --explain` shows
	 * it. Use -INFINITY / INFINITY for a side without a bound. */
	bool bounded;
	double min, max;
#ifdef DLI_TEST_ABI_GROWTH
	int test_growth; /* test builds only: proves that a 1.1 plugin loads after this grew */
#endif
};

struct dli_int_pair {
	int64_t first, second;
};

struct dli_value {
	enum dli_param_type type;
	bool set; /* given in the config (false: the default, or no value when there is no default) */
	union {
		bool b;
		int64_t i;
		double f;
		const char *s;
		struct {
			const char *const *items;
			size_t n;
		} list;
		struct {
			const struct dli_int_pair *items;
			size_t n;
		} pairs;
	} u;
	const char *where; /* "path:line:column" of the value, for the plugin's own error messages */
};

/* ---- Scheduling (freq, start_step, end_step, start_end_list) ----
 * Parsed by the core for every feature flagged DLI_FEATURE_SCHEDULED; evaluated with the host's
 * schedule_active / schedule_next. */
struct dli_schedule {
	int64_t freq;       /* >= 1 */
	int64_t start_step; /* 0 when absent */
	int64_t end_step;   /* inclusive; DLI_NEVER when absent */
	const struct dli_int_pair *ranges; /* start_end_list, inclusive; NULL when absent */
	size_t n_ranges;
};

/* ---- The host table ----
 * Grouped by the minor version that added each member, as SQLite's sqlite3ext.h is. A member of
 * the group a module was built for is always there and never NULL; one added later than the
 * minor a module requires must be checked with DLI_HAS_MEMBER(host, struct dli_host, member)
 * when the module should also run on an older host. Unless a method says otherwise, every host
 * method may be called from any thread, concurrently. */

/* Records merged over a step: what a statistics feature keeps per (layer, tensor). */
struct dli_stats_acc;

/* A value histogram, as TensorBoard's HistogramProto holds one: bucket i counts the values in
 * (bucket_limit[i-1], bucket_limit[i]]; the first bucket starts at -inf. All borrowed. */
struct dli_histogram {
	double min, max, num, sum, sum_squares;
	size_t n_buckets;
	const double *bucket_limit;
	const double *bucket;
};

/* How an accumulator's statistics are reduced across ranks (stats_acc_share, ABI 1.2). */
struct dli_stats_share {
	uint32_t size;       /* sizeof(struct dli_stats_share) */
	/* The same text on every rank of the group for the same accumulator, unique on the rank:
	 * e.g. the feature block's "path:line:column", the layer, the tensor and a role. */
	const char *key;
	/* Steps at which it is reduced (borrowed for the accumulator's life); NULL: every step. */
	const struct dli_schedule *schedule;
	/* The group, as sorted world ranks including the caller's; NULL / 0: the whole world. */
	const int *ranks;
	size_t n_ranks;
};

enum dli_scope {
	DLI_SCOPE_RANK = 0,
	DLI_SCOPE_GROUP = 1,
	DLI_SCOPE_FAILED = -1,
};

struct dli_host {
	uint32_t size;
	uint16_t abi_major, abi_minor;

	/* ---- ABI 1.0 ---- */
	/* Writes a message to the message logs, like dli_log(). */
	void (*log)(struct dli_context *ctx, enum dli_log_level level, const char *fmt, ...)
#if defined(__GNUC__)
		__attribute__((format(printf, 3, 4)))
#endif
		;
	int64_t (*iteration)(const struct dli_context *ctx);
	int (*rank)(const struct dli_context *ctx);
	int (*world_size)(const struct dli_context *ctx);
	/* The context's log dir (borrowed, lives as long as the context). */
	const char *(*log_dir)(const struct dli_context *ctx);
	/* Sends one scalar to every logger. `name` is borrowed. Returns 0 or the first logger error. */
	int (*emit_scalar)(struct dli_context *ctx, const char *name, int64_t iteration, double value);
	bool (*schedule_active)(const struct dli_schedule *s, int64_t iteration);
	/* The first iteration > `iteration` that the schedule selects, or DLI_NEVER. */
	int64_t (*schedule_next)(const struct dli_schedule *s, int64_t iteration);
	/* Whether the schedule selects `iteration`, and in *next the first iteration at which that
	 * answer may change: the iteration after it when selected (conservative), else the next
	 * selected one. What an *_enabled method of a scheduled feature usually returns. */
	bool (*schedule_query)(const struct dli_schedule *s, int64_t iteration, int64_t *next);
	const char *(*gemm_name)(enum dli_gemm gemm);
	/* Name of a tensor id (borrowed, lives as long as the context); NULL for an unknown id. */
	const char *(*tensor_name)(const struct dli_context *ctx, int tensor);

	/* Statistics (docs/statistics.md). */
	/* A new, empty accumulator owned by the caller (free with stats_acc_destroy); NULL when out
	 * of memory. */
	struct dli_stats_acc *(*stats_acc_create)(struct dli_context *ctx);
	void (*stats_acc_destroy)(struct dli_stats_acc *acc); /* accepts NULL */
	/* One pass over `t` (borrowed for the call) merged into `acc`; with `fp8` non-NULL the same
	 * pass also quantizes each element and fills the FP8 terms. A CPU tensor is done when this
	 * returns; a CUDA tensor is queued on its stream and nothing waits for it. Thread-safe on one
	 * accumulator. -EINVAL for a tensor it cannot read (dtype, layout), -ENOTSUP for a device
	 * without a backend. */
	int (*stats_add)(struct dli_stats_acc *acc, const struct dli_tensor *t,
			 const struct dli_fp8_spec *fp8);
	/* A tensor the host quantized: records its scale_inv range and, when `hp` is non-NULL,
	 * compares hp with dequant(q) for the FP8 terms. */
	int (*stats_add_quantized)(struct dli_stats_acc *acc, const struct dli_tensor *hp,
				   const struct dli_quantized_tensor *q);
	/* The merge of everything added since the last reset. Waits for queued device work: call it
	 * from step_end, not on the hot path. Writes exactly DLI_STATS_RECORD_SIZE_1_0 bytes, the
	 * record as ABI 1.0 defined it, in every later version too: a module that wants what a newer
	 * record holds calls stats_acc_read_sized (1.1). */
	int (*stats_acc_read)(struct dli_stats_acc *acc, struct dli_stats_record *out);
	void (*stats_acc_reset)(struct dli_stats_acc *acc);
	/* A finalized statistic (NaN where undefined, e.g. std of one element). Reads only the
	 * DLI_STATS_RECORD_SIZE_1_0 bytes of `r` (borrowed); stats_value_sized (1.1) reads newer ones. */
	double (*stats_value)(const struct dli_stats_record *r, enum dli_stat stat);
	/* "min", "underflows%", ... as in configs and log names; NULL when out of range, so that
	 * the first stat giving NULL is the number of statistics this host knows. */
	const char *(*stat_name)(enum dli_stat stat);
	/* The current-scaling scale: fp8_max / amax / 2^margin; 1 for an amax of 0, inf or NaN;
	 * FLT_MAX for an infinite result. */
	float (*fp8_scale)(float amax, enum dli_dtype format, double margin);

	/* Histograms. Sends one histogram to every logger that takes them (others skip it).
	 * `name` and `h` are borrowed. */
	int (*emit_histogram)(struct dli_context *ctx, const char *name, int64_t iteration,
			      const struct dli_histogram *h);

	/* ---- ABI 1.1 (check DLI_HAS_MEMBER first to run on a 1.0 host) ----
	 * Modules built before DLI_ABI_MINOR was raised to 1 say 1.0 but may use these: every host
	 * that shipped them fills them in. */

	/* FP8 casts, as dli_fp8_cast in dlinspect.h (for modify_tensor features): out f16 or bf16
	 * from a host of ABI 1.6 on (abi_minor), f32 before. */
	int (*fp8_cast)(const struct dli_tensor *in, struct dli_tensor *out, enum dli_dtype format,
			float scale);

	/* The amax that current scaling starts from (for modify_tensor features). Stores in *amax max |x| over the non-NaN elements of `t` (borrowed;
	 * f32, f16 or bf16, contiguous, host memory): NaNs are skipped, as TransformerEngine's
	 * fmaxf-based amax kernel and the stats' current-scaling pass do, so one NaN does not change
	 * how the rest of the tensor is scaled; an inf element gives inf (and fp8_scale then 1); an
	 * empty or all-NaN tensor gives 0. Returns 0, -EINVAL for a tensor it cannot read (dtype,
	 * layout, shape), -ENOTSUP for device memory. */
	int (*tensor_amax)(const struct dli_tensor *t, float *amax);

	/* Value histograms of an accumulator's tensors, over fixed exponential buckets: TensorFlow's default limits 0, +-1e-12 * 1.1^k below 1e20, and
	 * +-DBL_MAX (1551 buckets; NaNs in none, -inf in the first, +inf in the last). */
	/* Turns collection on or off (freeing the counts) for the tensors stats_add takes from then
	 * on; stats_add_quantized adds nothing to it. The counts (about 36 KiB) are allocated by the
	 * first tensor that adds to them, so an accumulator nobody feeds costs nothing; that
	 * stats_add returns -ENOMEM when they cannot be. Idempotent. */
	int (*stats_acc_histogram)(struct dli_stats_acc *acc, bool on);
	/* The histogram of everything added since the last reset: counts add exactly across
	 * microbatches; num is the count of non-NaN values; min, max, sum and sum_squares come from
	 * the merged record (sum and sum_squares are NaN when a NaN was added). Runs of empty buckets
	 * are collapsed into one, as TensorFlow does; no buckets (n_buckets 0) when num is 0. The
	 * arrays belong to the accumulator and stay valid until its next read, reset or destroy.
	 * -EINVAL when collection is off; -ENOTSUP when a CUDA tensor was added since the reset (the
	 * CUDA backend has no histogram yet; the host says so once in the message log). */
	int (*stats_acc_read_histogram)(struct dli_stats_acc *acc, struct dli_histogram *out);

	/* The file system, for loggers. mkdir -p: creates
	 * `path` (borrowed) and its missing parents (mode 0755); a component that already exists as
	 * a directory is fine. 0 or a negative errno; -ENOTDIR when a component is a file. */
	int (*make_dirs)(const char *path);
	/* stats_acc_read for a record of `size` bytes (the caller's sizeof(struct dli_stats_record)):
	 * writes min(size, the host's record size) bytes and zeroes the rest of `out`, so neither an
	 * older module's smaller record is overrun nor a newer module's larger one left unset.
	 * -EINVAL when size < DLI_STATS_RECORD_SIZE_1_0. */
	int (*stats_acc_read_sized)(struct dli_stats_acc *acc, struct dli_stats_record *out,
				    size_t size);
	/* stats_value of a record of `size` bytes; NaN for a statistic whose terms lie beyond it. */
	double (*stats_value_sized)(const struct dli_stats_record *r, size_t size, enum dli_stat stat);

	/* ---- ABI 1.2 (check DLI_HAS_MEMBER first to run on an older host) ---- */
	/* Asks the host program to stop (a feature that found NaN/Inf, say): from then on every
	 * dli_step of `ctx` ends its step as usual and returns -ECANCELED, with dli_last_error
	 * naming `reason` (borrowed, copied; the first request's reason is kept, later ones are
	 * ignored). dlinspect never exits or aborts the process: stopping is the host's decision.
	 * Any thread, concurrently. */
	void (*request_stop)(struct dli_context *ctx, const char *reason);

	/* Block-scaled formats (docs/block-scaling.md), ABI 1.2 too. stats_add_block: stats_add
	 * with the quantize-and-compare terms of `spec`'s block-scaled quantization instead of a
	 * per-tensor one (scale_inv_min/max over the blocks' scales). The tensor is viewed as
	 * rows x cols, cols its last dimension. Host memory only for now: -ENOTSUP for a CUDA
	 * tensor; -EINVAL for a spec it does not know (recipe, format, size) or with the NVFP4
	 * recipe options of ABI 1.3 set (stochastic_rounding, rht: block_fake_quant only). */
	int (*stats_add_block)(struct dli_stats_acc *acc, const struct dli_tensor *t,
			       const struct dli_block_spec *spec);
	/* out = dequant(quant(in)) under `spec` (for modify_tensor features): in f32, f16 or bf16,
	 * out f32 (f16 or bf16 too from a host of ABI 1.6 on: the f32 values rounded to nearest
	 * even) of the same element count, both contiguous host memory (borrowed). 0, -EINVAL,
	 * -ENOTSUP for device memory. dli_block_fake_quant (dlinspect.h): NVFP4 and its recipe
	 * options from ABI 1.3. */
	int (*block_fake_quant)(const struct dli_tensor *in, struct dli_tensor *out,
				const struct dli_block_spec *spec);

	/* Statistics across ranks (docs/distributed.md), ABI 1.2 too. */
	/* Declares that `acc` holds this rank's shard of a tensor whose statistics are reduced
	 * across a group of ranks: at every dli_step whose iteration share->schedule selects, before
	 * any step_end, the core gathers the records of all shared accumulators of the step (one
	 * collective per group, records batched), merges them in rank order and puts the merge back
	 * into each accumulator, so that stats_acc_read and stats_acc_read_histogram give the
	 * statistics of the whole tensor, bit-identical on every rank of the group. `share` is
	 * copied except its schedule, which must live as long as the accumulator. 0; -ENOTSUP when
	 * the run has no communicator (the accumulator stays per rank, said once by the core);
	 * -EINVAL for a bad share (a rank outside the world, the caller not in its group). */
	int (*stats_acc_share)(struct dli_stats_acc *acc, const struct dli_stats_share *share);
	/* What the last dli_step did with `acc`: DLI_SCOPE_RANK (not shared, or a group of one),
	 * DLI_SCOPE_GROUP (reduced across its group) or DLI_SCOPE_FAILED (shared, but the
	 * collective failed or timed out: this rank's shard only, and the core said so). */
	int (*stats_acc_scope)(struct dli_stats_acc *acc);

	/* ---- ABI 1.4 ---- */
	/* stats_add_quantized for a block-scaled copy the host made: each block dequantized with
	 * its own scale (docs/block-scaling.md, "The host's own tensor"), compared with `hp` for the
	 * FP8 terms (NVFP4: underflows and the error sums), scale_inv_min/max over the blocks' scales
	 * (the E8M0 code 0, fp32 and E4M3 zeros and NaN left out, as padding). `hp` may be NULL:
	 * the scale range only. -EINVAL, with the reason in the message log and the failing call's
	 * dli_last_error: a copy whose size, recipe, format, shape or strides it cannot read, an hp
	 * of another shape, or a CUDA hp (host memory only for now, as stats_add_block). */
	int (*stats_add_block_quantized)(struct dli_stats_acc *acc, const struct dli_tensor *hp,
					 const struct dli_block_quantized_tensor *q);

	/* ---- ABI 1.5 ---- */
	/* TransformerEngine's max_blockwise_dynamic_range of one orientation (docs/statistics.md,
	 * "Blockwise dynamic range"): `t` (borrowed; f32, f16, bf16, or f8e4m3 / f8e5m2 codes read
	 * as their values, as the statistics read them; host memory, contiguous or the dispatched
	 * view) seen as rows x cols, cols its last dimension, cut into blocks of `block_size`
	 * consecutive elements of the flattened tensor (dims 1), of its flattened transpose (dims 1
	 * with `columnwise`), or into block_size x block_size tiles (dims 2, where `columnwise`
	 * changes nothing); the last block and the edge tiles may be partial. Stores in *out the
	 * largest log2(max |x| / min nonzero |x|) over the blocks: 0 for a block of zeros, NaN when
	 * a block holds a NaN or only infinities. Computed when called (one pass, threaded as the
	 * statistics pass is). 0; -ENODATA for an empty tensor (no blocks; *out untouched); -EINVAL
	 * for a dtype, layout, shape, block_size < 1 or dims it does not take; -ENOTSUP for device
	 * memory. */
	int (*block_dynamic_range)(const struct dli_tensor *t, int64_t block_size, int dims,
				   bool columnwise, double *out);
	/* Why the feature method running on this thread (inspect_tensor, modify_tensor, ...) is
	 * about to return an error: printf-style, copied (about 380 bytes kept). The core adds it to
	 * that call's dli_last_error and to its line in the message log, so a host that checks the
	 * error code reads the reason there. Outside a failing method it is not shown. */
	void (*fail_reason)(struct dli_context *ctx, const char *fmt, ...)
#if defined(__GNUC__)
		__attribute__((format(printf, 2, 3)))
#endif
		;

	/* ---- ABI 1.7 ---- */
	/* The context's log level (enum dli_log_level): messages of a higher level are written
	 * nowhere. For a module whose error line points to lines it logs at a lower level: when
	 * those would be left out, it logs them at the error's level (DetectNonFinite's frame). */
	int (*log_level)(const struct dli_context *ctx);
};

/* ---- Features ---- */

enum dli_feature_flags {
	DLI_FEATURE_GENERIC = 1u << 0,   /* may sit directly in a section, outside its namespace block */
	DLI_FEATURE_GEMMS = 1u << 1,     /* takes gemms / gemms_struct (required) */
	DLI_FEATURE_TENSORS = 1u << 2,   /* takes tensors / tensors_struct (required) */
	DLI_FEATURE_SCHEDULED = 1u << 3, /* takes freq, start_step, end_step, start_end_list */
	DLI_FEATURE_MODIFIES = 1u << 4,  /* implements modify_tensor: one per (layer, gemm, tensor) */
	/* ABI 1.3: inspect_tensor and log_tensor_stats calls may hand this feature a strided view
	 * (dli_inspect_tensor_strided): a tensor with contiguous = false whose data the feature
	 * never reads itself, passing it only to the host's stats_add, stats_add_quantized,
	 * stats_add_block and tensor_amax, which read the view (in place for the statistics pass,
	 * else through one contiguous copy per call). Without the flag a feature gets that copy. */
	DLI_FEATURE_STRIDED = 1u << 5,
};

/* What create() gets: one instance per feature block, or per gemms_struct/tensors_struct entry.
 * Everything here is borrowed and lives only during create: copy what you keep. */
struct dli_feature_create_args {
	uint32_t size;
	struct dli_context *ctx;
	const struct dli_host *host;
	const char *where;   /* "path:line:column" of the block */
	const char *section; /* the config section's name */
	const struct dli_value *params; /* in the order of the descriptor's params */
	size_t n_params;
	const struct dli_schedule *schedule; /* NULL unless DLI_FEATURE_SCHEDULED */
	uint32_t gemms;   /* bit (1u << enum dli_gemm) per selected gemm; 0 without DLI_FEATURE_GEMMS */
	uint64_t tensors; /* bit (1ull << tensor id) per selected tensor; 0 without DLI_FEATURE_TENSORS */
};

/* What a per-layer call gets: the binding of one instance to one layer. Built once when the layer is
 * resolved; the same pointer comes back on every call for that layer. */
struct dli_feature_call {
	void *instance;    /* what create() returned */
	void *layer_state; /* what layer_attach() returned, or NULL */
	struct dli_context *ctx;
	const char *layer_name;
};

/* Methods of a feature. All are optional but create; the host checks size and non-NULL before each
 * call. Threads: create, destroy and step_end never run concurrently with any other method of the
 * instance; layer_attach is serialized with other attaches and step_end only (see below); the
 * per-call methods (*_enabled, modify_tensor, inspect_tensor*, call) may run on several threads at
 * once, for the same or different layers. */
struct dli_feature_ops {
	/* ---- ABI 1.0 ---- */
	uint32_t size;
	/* Required. On failure return a negative errno and fill err->message (no location needed: the
	 * core prefixes the block's, and the module's name and file). Runs during dli_init, on the
	 * host's thread. */
	int (*create)(const struct dli_feature_create_args *args, void **instance, struct dli_error *err);
	/* Optional: frees what create made. Called once per successful create, at dli_destroy, with
	 * what create stored in *instance (NULL only if create stored NULL); never after a failed
	 * create. */
	void (*destroy)(void *instance);
	/* Optional: per-layer state, made when a layer is first resolved (not on a hot path). Called
	 * under the host's layer lock: never concurrently with another attach or step_end, but while
	 * other threads run per-call methods on other layers. layer_detach runs at dli_destroy. */
	int (*layer_attach)(void *instance, const char *layer_name, void **layer_state);
	void (*layer_detach)(void *instance, void *layer_state);

	/* Optional, one per host call; may be called from several threads at once. *_enabled store
	 * in *next the first iteration at which their answer may change (DLI_NEVER if never; the
	 * current iteration to be asked on every call). */
	bool (*fp8_gemm_enabled)(const struct dli_feature_call *c, enum dli_gemm gemm, int64_t iteration,
				 int64_t *next);
	bool (*modify_tensor_enabled)(const struct dli_feature_call *c, enum dli_gemm gemm, int tensor,
				      int64_t iteration, int64_t *next);
	int (*modify_tensor)(const struct dli_feature_call *c, enum dli_gemm gemm, int tensor,
			     const struct dli_tensor *in, const struct dli_quantizer *quantizer,
			     struct dli_tensor *out);
	bool (*inspect_tensor_enabled)(const struct dli_feature_call *c, int tensor, int64_t iteration,
				       int64_t *next);
	int (*inspect_tensor)(const struct dli_feature_call *c, int tensor, const struct dli_tensor *hp,
			      const struct dli_quantized_tensor *rowwise,
			      const struct dli_quantized_tensor *colwise);
	bool (*inspect_tensor_postquantize_enabled)(const struct dli_feature_call *c, enum dli_gemm gemm,
						    int tensor, int64_t iteration, int64_t *next);
	int (*inspect_tensor_postquantize)(const struct dli_feature_call *c, enum dli_gemm gemm,
					   int tensor, const struct dli_quantized_tensor *q);
	/* Optional: called at dli_step for every attached layer, with the iteration that just ended.
	 * dli_step runs alone (the host may not call anything else on the context meanwhile). */
	void (*step_end)(const struct dli_feature_call *c, int64_t iteration);
	/* Optional: a custom call declared in the descriptor's `calls`. */
	int (*call)(const struct dli_feature_call *c, const char *name, void *args);
	/* ---- ABI 1.4 ---- */
	/* Optional, for a feature that has inspect_tensor: dli_inspect_tensor_block's call, the
	 * host's block-scaled copies (each may be NULL). A feature without it gets inspect_tensor
	 * with no quantized tensor instead. Same threads and view rules as inspect_tensor. */
	int (*inspect_tensor_block)(const struct dli_feature_call *c, int tensor,
				    const struct dli_tensor *hp,
				    const struct dli_block_quantized_tensor *rowwise,
				    const struct dli_block_quantized_tensor *colwise);
#ifdef DLI_TEST_ABI_GROWTH
	void (*test_growth)(void); /* test builds only: proves that 1.0 ops tables load after growth */
#endif
};

struct dli_feature_desc {
	/* ---- ABI 1.0 ---- */
	uint32_t size;
	const char *name;            /* as written in configs: "DisableFP8GEMM" */
	const char *const *aliases;  /* NULL-terminated older names ("disable_fp8_gemm"), or NULL */
	const char *doc;             /* one line */
	uint32_t flags;              /* enum dli_feature_flags */
	const struct dli_param_desc *params;
	size_t n_params;
	const char *const *calls;    /* NULL-terminated custom call names, or NULL */
	const struct dli_feature_ops *ops;

	/* ---- ABI 1.1 ---- */
	/* sizeof(struct dli_param_desc) as the module saw it, the stride of `params`: set it to
	 * DLI_PARAM_SIZE so that a host older than the module's headers can read them. 0 or absent:
	 * the size of the module's abi_minor. */
	size_t param_size;
#ifdef DLI_TEST_ABI_GROWTH
	int test_growth; /* test builds only */
#endif
};

/* ---- Loggers ---- */

struct dli_logger_create_args {
	uint32_t size;
	struct dli_context *ctx;
	const struct dli_host *host;
	const char *where;
	const struct dli_value *params;
	size_t n_params;
	const char *log_dir; /* borrowed */
	int rank;
	int world_size;
};

/* Methods of a logger. create and log_scalar are required. Threads: the log_* methods may be called
 * from any thread, concurrently with each other (a feature emits from whatever thread the host
 * calls it on; messages come from every thread): a logger locks what it shares. create, flush and
 * destroy are never called concurrently with any other method of the instance. */
struct dli_logger_ops {
	/* ---- ABI 1.0 ---- */
	uint32_t size;
	/* Required; runs during dli_init. */
	int (*create)(const struct dli_logger_create_args *args, void **instance, struct dli_error *err);
	/* Optional: once per successful create, at dli_destroy after the last flush; never after a
	 * failed create, and with NULL only if create stored NULL. */
	void (*destroy)(void *instance);
	/* Required: one statistic. `name` is borrowed. Returns 0 or a negative errno (reported once
	 * by the core). */
	int (*log_scalar)(void *instance, const char *name, int64_t iteration, double value);
	/* Optional: one formatted message line (no trailing newline). */
	int (*log_text)(void *instance, enum dli_log_level level, const char *text);
	/* Optional: called at the end of each step (dli_step, which runs alone) and at dli_destroy. */
	int (*flush)(void *instance);
	/* Optional: one histogram (borrowed). */
	int (*log_histogram)(void *instance, const char *name, int64_t iteration,
			     const struct dli_histogram *h);

	/* ---- ABI 1.1 ---- */
	/* Optional: the logger's own checks of its params (those the schema's types and ranges cannot
	 * say), without creating anything. `dlinspect check` calls it instead of create, which would
	 * open files; share the code with create so that check refuses exactly what a run refuses.
	 * Same arguments as create; on failure a negative errno and err->message. */
	int (*validate)(const struct dli_logger_create_args *args, struct dli_error *err);
#ifdef DLI_TEST_ABI_GROWTH
	void (*test_growth)(void); /* test builds only */
#endif
};

struct dli_logger_desc {
	/* ---- ABI 1.0 ---- */
	uint32_t size;
	const char *name; /* as written under `loggers:` */
	const char *doc;
	const struct dli_param_desc *params;
	size_t n_params;
	const struct dli_logger_ops *ops;

	/* ---- ABI 1.1 ---- */
	size_t param_size; /* as in struct dli_feature_desc */
#ifdef DLI_TEST_ABI_GROWTH
	int test_growth; /* test builds only */
#endif
};

/* ---- Communicators (ABI 1.2; docs/distributed.md) ----
 * A communicator gives the core what it needs to reduce statistics across ranks and nothing more:
 * rank, size, groups of world ranks, an all-gather of fixed-size byte records within a group and a
 * barrier, each waiting at most a time limit. It is a module's descriptor (`comms` below), picked
 * by name (DLINSPECT_COMMUNICATOR), or a host's own table (dli_options.comm_ops). Threads: the core
 * calls it from dli_init, dli_step and dli_destroy only, one call at a time. */
struct dli_comm_ops {
	uint32_t size;
	/* Required for a module's communicator (a host's is open already): makes *comm. A
	 * communicator that must initialize its library does so only when the host has not, and
	 * finalizes at close only what it initialized. */
	int (*open)(void **comm, struct dli_error *err);
	void (*close)(void *comm); /* optional */
	int (*rank)(void *comm);       /* required: the world rank */
	int (*world_size)(void *comm); /* required */
	/* Required: a group of the world ranks `ranks` (sorted, unique, with the caller's), called
	 * by each member alone (no communication). */
	int (*group_create)(void *comm, const int *ranks, size_t n, void **group,
			    struct dli_error *err);
	void (*group_destroy)(void *comm, void *group); /* optional */
	/* Required: every member sends `bytes` bytes of `send`; `recv` gets n * bytes, member i's
	 * at i * bytes (members in group order). Waits at most timeout_s seconds: then -ETIMEDOUT,
	 * with missing[i] set for each member whose record did not come (missing has one bool per
	 * member), err->message saying so; the group is then broken (later calls fail at once with
	 * -EPIPE). */
	int (*allgather)(void *comm, void *group, const void *send, size_t bytes, void *recv,
			 double timeout_s, bool *missing, struct dli_error *err);
	/* Required: returns when every member entered it, or -ETIMEDOUT as allgather does. */
	int (*barrier)(void *comm, void *group, double timeout_s, bool *missing,
		       struct dli_error *err);
};

/* The namespace (DLI_MODULE_NAMESPACE) of communicator modules: a directory scan (no
 * `extensions`) skips them; DLINSPECT_COMMUNICATOR=<name> loads <name>.so by name. */
#define DLI_COMM_NAMESPACE "communicators"

struct dli_comm_desc {
	uint32_t size;
	const char *name; /* what DLINSPECT_COMMUNICATOR names: "mpi" */
	const char *doc;
	const struct dli_comm_ops *ops;
};

/* ---- Device backends (ABI 1.3) ----
 * A backend computes the statistics of tensors in device memory for the host table's stats_* calls:
 * dlinspect's CUDA backend (dli_cuda.so, built when nvcc is found) is one. Its module declares the
 * namespace DLI_BACKEND_NAMESPACE, so a directory scan (no `extensions`) skips it: loading it needs
 * the device's driver. The core loads it by name, through the same loader as every module, when
 * the first tensor in that device's memory reaches an accumulator. */
#define DLI_BACKEND_NAMESPACE "backends"

struct dli_backend_ops {
	uint32_t size;
	/* Required, and every member below: a device-side accumulator on device `device`, whose
	 * record stays in device memory until read. NULL on failure, with the reason in `err`
	 * (DLI_BACKEND_ERR_SIZE bytes). */
	void *(*acc_create)(int device, char *err);
	void (*acc_destroy)(void *dacc);
	/* Queues one pass over `t` on its stream, merged into dacc on the device; never waits.
	 * `fp8` means what it means for the host table's stats_add. */
	int (*add)(void *dacc, const struct dli_tensor *t, const struct dli_fp8_spec *fp8);
	int (*add_quantized)(void *dacc, const struct dli_tensor *hp,
			     const struct dli_quantized_tensor *q);
	/* Copies the merged record to the host, writing min(size, its own sizeof) bytes of `out`:
	 * the one wait, at step end. */
	int (*read)(void *dacc, struct dli_stats_record *out, size_t size);
	void (*reset)(void *dacc);
};
#define DLI_BACKEND_ERR_SIZE 256

struct dli_backend_desc {
	uint32_t size;
	const char *name; /* "cuda" */
	enum dli_device_type device; /* the tensors it takes: DLI_DEVICE_CUDA */
	const char *doc;
	const struct dli_backend_ops *ops;
};

/* The sizes of the backend tables as 1.3 defined them: the least the host accepts. */
#define DLI_BACKEND_OPS_SIZE_1_3 (offsetof(struct dli_backend_ops, reset) + sizeof(void *))
#define DLI_BACKEND_DESC_SIZE_1_3 (offsetof(struct dli_backend_desc, ops) + sizeof(void *))

/* ---- The module ---- */

struct dli_module {
	/* ---- ABI 1.0 ---- */
	uint32_t size;
	uint16_t abi_major, abi_minor; /* DLI_ABI_MAJOR, DLI_ABI_MINOR of the headers it was built with */
	const char *name;   /* matches the file name: <name>.so */
	const char *ns;     /* namespace ("transformer_engine"), or NULL */
	const char *doc;
	/* Arrays of pointers, not of descriptors: each descriptor carries its own size, so a
	 * descriptor can grow in a later minor version without moving its neighbours. */
	const struct dli_feature_desc *const *features;
	size_t n_features;
	const struct dli_logger_desc *const *loggers;
	size_t n_loggers;

	/* ---- ABI 1.2 ---- */
	const struct dli_comm_desc *const *comms; /* communicators (a module of ABI < 1.2: none) */
	size_t n_comms;

	/* ---- ABI 1.3 ---- */
	const struct dli_backend_desc *const *backends; /* device backends (ABI < 1.3: none) */
	size_t n_backends;
};

/* ---- The namespace note (ABI 1.1) ----
 * `extensions: [<namespace>]` loads every module of that namespace. To find them without loading
 * (and so running the code of) every library on the plugin path, dlinspect reads an ELF note that
 * a module declares with this macro, once, at file scope, with the same string as its `ns`:
 *     DLI_MODULE_NAMESPACE("my_plugins");
 * A module without the note still loads by its name, or with no `extensions` at all. */
#define DLI_NOTE_NAME "dlinspect"
#define DLI_NOTE_NAMESPACE 1
#define DLI_NAMESPACE_MAX 128 /* bytes, with the terminating NUL */
#if defined(__GNUC__)
#define DLI_MODULE_NAMESPACE(ns)                                                                  \
	__attribute__((used, section(".note.dlinspect"), aligned(4))) static const struct {       \
		uint32_t namesz, descsz, type;                                                     \
		char name[(sizeof(DLI_NOTE_NAME) + 3) / 4 * 4];                                    \
		char desc[(sizeof(ns) + 3) / 4 * 4];                                               \
	} dli_module_namespace_note = {sizeof(DLI_NOTE_NAME), sizeof(ns), DLI_NOTE_NAMESPACE,       \
				       DLI_NOTE_NAME, ns}
#else
#define DLI_MODULE_NAMESPACE(ns) extern int dli_module_namespace_note_unsupported
#endif

typedef const struct dli_module *(*dli_module_entry_fn)(const struct dli_host *host);

/* Every module defines exactly this, returning a pointer to static data (NULL = refuse to load):
 *     DLI_EXPORT const struct dli_module *DLI_MODULE_ENTRY(const struct dli_host *host); */
DLI_EXPORT const struct dli_module *DLI_MODULE_ENTRY(const struct dli_host *host);

#ifdef __cplusplus
}
#endif

#endif
