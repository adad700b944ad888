/* Strided views of host tensors (dli_inspect_tensor_strided, and the strides of a
 * log_tensor_stats call): validating a host's strides, and making the view readable by the host
 * calls that features make while the core dispatches it. */
#ifndef DLI_STRIDED_PRIVATE_H
#define DLI_STRIDED_PRIVATE_H

#include <stdbool.h>
#include <stddef.h>

#include <dlinspect/dlinspect.h>
#include <dlinspect/tensor.h>

#include "cpu/runs-private.h"

/* Views whose runs are shorter than this many bytes are gathered for the statistics pass: below
 * it, copying each run's pieces costs more than one copy of the whole view. */
#define DLI_VIEW_MIN_RUN_BYTES 256

struct dli_view {
	/* What a view-capable feature (DLI_FEATURE_STRIDED) gets: the host's descriptor with
	 * contiguous = false. The host calls recognize it by its address (dli_view_of). */
	struct dli_tensor t;
	struct dli_cpu_runs runs; /* the view, dimensions that are contiguous together collapsed */
	bool direct;              /* the statistics pass reads the runs; else it reads `copy` */
	void *copy;               /* the contiguous copy, made on first need, freed by finish */
	struct dli_tensor copy_t; /* its descriptor (contiguous) */
	bool copy_failed;
};

enum { DLI_VIEW_STRIDED = 0, DLI_VIEW_CONTIGUOUS = 1 };

/* Checks `strides` (ndim entries in elements) against t and fills v. Returns DLI_VIEW_STRIDED,
 * DLI_VIEW_CONTIGUOUS when the strides describe a dense row-major layout or the view is empty
 * (v->t is then t with contiguous = true: use it as a plain tensor), or -EINVAL with `why`
 * saying what is wrong (no layer or tensor named: the caller adds them). Allocates nothing. */
int dli_view_init(struct dli_view *v, const struct dli_tensor *t, const int64_t *strides,
		  char *why, size_t why_size);
/* Frees the copy, if one was made. */
void dli_view_finish(struct dli_view *v);

/* The contiguous copy of the view, gathered on the first call (once per view, whoever asks);
 * NULL when out of memory. */
const struct dli_tensor *dli_view_contiguous(struct dli_view *v);

/* Makes v the view this thread is dispatching (features' host calls find it with dli_view_of);
 * returns the one it replaces, for dli_view_leave. */
struct dli_view *dli_view_enter(struct dli_view *v);
void dli_view_leave(struct dli_view *prev);

/* The view this thread is dispatching when t is its descriptor, else NULL: one thread-local
 * load and a compare, so the host calls ask it for every tensor. */
struct dli_view *dli_view_of(const struct dli_tensor *t);

/* What a host call that has no strided pass reads for t: t itself, or for a dispatched view its
 * contiguous copy; NULL when out of memory. */
const struct dli_tensor *dli_view_resolve(const struct dli_tensor *t);

/* The statistics pass (dli_cpu_stats) over a view: over its runs, or over its copy. */
int dli_view_stats(struct dli_view *v, struct dli_stats_record *out);

/* Says that `call` refused the view of `tensor_name` on layer l (core/dispatch.c): the last
 * error, the message log, and stderr the first time. */
void dli_view_refused(struct dli_layer *l, const char *call, const char *tensor_name,
		      const char *why);

/* A log_tensor_stats call (dli_call) whose args carry strides: the args a feature gets while the
 * call dispatches. */
struct dli_call_view {
	bool active, strided;
	struct dli_view view;
	struct dli_log_tensor_stats_args as_view, as_copy;
	struct dli_view *outer;
};
/* 0 (cv->active says whether the args hold a view), or -EINVAL when the strides are refused
 * (said through dli_view_refused). */
int dli_call_view_begin(struct dli_call_view *cv, struct dli_layer *l, const char *name,
			void *args);
/* The args for a feature with descriptor flags `flags`: the view for DLI_FEATURE_STRIDED, else
 * its contiguous copy (NULL when out of memory). */
void *dli_call_view_args(struct dli_call_view *cv, uint32_t flags);
void dli_call_view_end(struct dli_call_view *cv);

/* Test hook: views this thread gathered into a copy (for tests of which path a view took). */
extern _Thread_local unsigned long long dli_view_gathers;

#endif
