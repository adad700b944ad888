/* DetectNonFinite: Hugging Face's DebugUnderflowOverflow as a feature. Every inspected call of the
 * selected tensors goes into a frame of the last `frame_size` calls (layer, tensor, iteration, call
 * order, abs-min, abs-max, NaN and inf counts); the first call holding a NaN or an infinity is
 * reported with that frame, and with `on_detect: stop` the host's next dli_step returns
 * -ECANCELED. `trace_batch_nums` writes every call of the listed iterations to the message log;
 * `abort_after_batch_num` stops the host after that iteration. docs/features.md has the story. */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <dlinspect/plugin.h>

#include "feature-util.h"

/* One inspected call. `layer` is the host's layer name, which lives as long as the context. */
struct dnf_call {
	const char *layer;
	int tensor;
	int64_t iteration;
	uint64_t order; /* 1-based, among the calls this context's DetectNonFinite saw in `iteration` */
	uint64_t count, nan, inf;
	double abs_min, abs_max; /* over the non-NaN elements; NaN when every element is NaN */
};

enum { DNF_SPARE = 8 };

/* What every instance of one context shares: the frame must hold the last calls of the whole
 * model, whichever config block (section, tensors_struct entry) selected them. */
struct dnf_monitor {
	struct dli_context *ctx;
	struct dnf_monitor *next;
	int refs;
	pthread_mutex_t lock; /* everything below */
	struct dnf_call *ring;
	size_t cap, n, head; /* head: where the next call goes */
	int64_t iteration;
	uint64_t order;
	bool reported;           /* the first non-finite call was reported */
	uint64_t nonfinite;      /* calls holding NaN/Inf, in all */
	/* Accumulators between calls, reset: making one per call would cost a CUDA tensor's call a
	 * device allocation and a cudaFree, which waits for the whole device. One per call running
	 * at once (threads), at most DNF_SPARE kept. */
	struct dli_stats_acc *spare[DNF_SPARE];
	size_t n_spare;
};

static pthread_mutex_t dnf_monitors_lock = PTHREAD_MUTEX_INITIALIZER;
static struct dnf_monitor *dnf_monitors;

struct dnf {
	const struct dli_host *host;
	struct dli_context *ctx;
	struct dnf_monitor *mon;
	struct dli_schedule schedule;
	bool stop;
	int64_t *trace; /* trace_batch_nums, sorted */
	size_t n_trace;
	int64_t abort_after; /* -1: never */
	char where[160];     /* the block's path:line:column, for the report */
	char section[128];
};

enum { P_FRAME_SIZE, P_ON_DETECT, P_TRACE, P_ABORT_AFTER };

/* Takes a reference on the context's monitor, made on first use, with room for `frame` calls. */
static struct dnf_monitor *dnf_monitor_get(struct dli_context *ctx, size_t frame)
{
	pthread_mutex_lock(&dnf_monitors_lock);
	struct dnf_monitor *m = dnf_monitors;
	while (m && m->ctx != ctx)
		m = m->next;
	if (!m && (m = calloc(1, sizeof *m))) {
		m->ctx = ctx;
		m->iteration = -1;
		pthread_mutex_init(&m->lock, NULL);
		m->next = dnf_monitors;
		dnf_monitors = m;
	}
	/* Instances are created before any call, so the ring grows while nobody reads it; the
	 * largest frame_size of the context's blocks wins. */
	struct dnf_call *ring = m && frame > m->cap ? realloc(m->ring, frame * sizeof *ring) : NULL;
	if (ring) {
		m->ring = ring;
		m->cap = frame;
	}
	if (m && m->cap >= frame)
		m->refs++;
	else
		m = NULL; /* out of memory: a new monitor stays listed with no reference, reused later */
	pthread_mutex_unlock(&dnf_monitors_lock);
	return m;
}

static void dnf_monitor_put(struct dnf_monitor *m, const struct dli_host *host)
{
	pthread_mutex_lock(&dnf_monitors_lock);
	if (--m->refs == 0) {
		struct dnf_monitor **p = &dnf_monitors;
		while (*p != m)
			p = &(*p)->next;
		*p = m->next;
		if (m->nonfinite > 1)
			host->log(m->ctx, DLI_LOG_WARNING,
				  "DetectNonFinite: %" PRIu64 " inspected calls held NaN or Inf in this "
				  "run (the first is reported above)",
				  m->nonfinite);
		for (size_t i = 0; i < m->n_spare; i++)
			host->stats_acc_destroy(m->spare[i]);
		pthread_mutex_destroy(&m->lock);
		free(m->ring);
		free(m);
	}
	pthread_mutex_unlock(&dnf_monitors_lock);
}

static int dnf_cmp(const void *a, const void *b)
{
	int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
	return (x > y) - (x < y);
}

static void dnf_free(struct dnf *self)
{
	if (!self)
		return;
	if (self->mon)
		dnf_monitor_put(self->mon, self->host);
	free((void *)self->schedule.ranges);
	free(self->trace);
	free(self);
}

static int dnf_create(const struct dli_feature_create_args *args, void **instance,
		      struct dli_error *err)
{
	const struct dli_value *p = args->params;
	struct dnf *self;

	if (!dli_feature_has_stats(args->host, err))
		return -ENOTSUP;
	if (!(self = calloc(1, sizeof(*self))))
		return -ENOMEM;
	self->host = args->host;
	self->ctx = args->ctx;
	self->stop = !strcmp(p[P_ON_DETECT].u.s, "stop");
	self->abort_after = p[P_ABORT_AFTER].u.i;
	snprintf(self->where, sizeof(self->where), "%s", args->where ? args->where : "");
	snprintf(self->section, sizeof(self->section), "%s", args->section ? args->section : "");
	if (dli_feature_schedule_copy(&self->schedule, args->schedule)) {
		free(self);
		return -ENOMEM;
	}
	/* The config hands integers over as strings here (a list of ints has no param type). */
	const struct dli_value *tr = &p[P_TRACE];
	if (tr->set && tr->u.list.n) {
		if (!(self->trace = calloc(tr->u.list.n, sizeof(*self->trace)))) {
			dnf_free(self);
			return -ENOMEM;
		}
		for (size_t i = 0; i < tr->u.list.n; i++) {
			const char *s = tr->u.list.items[i];
			char *end;
			errno = 0;
			long long v = strtoll(s, &end, 10);
			if (!*s || *end || errno || v < 0) {
				snprintf(err->message, sizeof(err->message),
					 "%s: trace_batch_nums: '%s' is not an iteration number (expected "
					 "integers >= 0, e.g. [1, 3])",
					 tr->where ? tr->where : "?", s);
				dnf_free(self);
				return -EINVAL;
			}
			self->trace[self->n_trace++] = v;
		}
		qsort(self->trace, self->n_trace, sizeof(*self->trace), dnf_cmp);
	}
	if ((self->stop || self->abort_after >= 0) &&
	    (!DLI_HAS_MEMBER(args->host, struct dli_host, request_stop) ||
	     !args->host->request_stop)) {
		snprintf(err->message, sizeof(err->message),
			 "%s needs a dlinspect that can stop the host (ABI 1.2); use on_detect: "
			 "continue and no abort_after_batch_num with this one",
			 self->stop ? "on_detect: stop" : "abort_after_batch_num");
		dnf_free(self);
		return -ENOTSUP;
	}
	if (!(self->mon = dnf_monitor_get(args->ctx, (size_t)p[P_FRAME_SIZE].u.i))) {
		dnf_free(self);
		return -ENOMEM;
	}
	*instance = self;
	return 0;
}

static void dnf_destroy(void *instance)
{
	dnf_free(instance);
}

static bool dnf_traced(const struct dnf *self, int64_t iteration)
{
	for (size_t i = 0; i < self->n_trace; i++)
		if (self->trace[i] == iteration)
			return true;
	return false;
}

/* Scheduled for detection, or a traced iteration; `next` the earlier of the two changes. */
static bool dnf_inspect_tensor_enabled(const struct dli_feature_call *c, int tensor,
				       int64_t iteration, int64_t *next)
{
	const struct dnf *self = c->instance;
	int64_t s_next, t_next = DLI_NEVER;
	bool on = self->host->schedule_query(&self->schedule, iteration, &s_next);
	bool traced = dnf_traced(self, iteration);

	if (traced)
		t_next = iteration + 1;
	for (size_t i = 0; !traced && i < self->n_trace; i++)
		if (self->trace[i] > iteration) {
			t_next = self->trace[i];
			break;
		}
	*next = s_next < t_next ? s_next : t_next;
	return on || traced;
}

/* "[iteration 5, call 12] layer activation: abs-min 0, abs-max 3.25, NaN 0, inf 0 of 4096" */
static void dnf_call_text(const struct dnf *self, const struct dnf_call *k, char *buf, size_t size)
{
	const char *tname = self->host->tensor_name(self->ctx, k->tensor);
	snprintf(buf, size,
		 "[iteration %" PRId64 ", call %" PRIu64 "] %s %s: abs-min %.9g, abs-max %.9g, NaN "
		 "%" PRIu64 ", inf %" PRIu64 " of %" PRIu64,
		 k->iteration, k->order, k->layer, tname ? tname : "?", k->abs_min, k->abs_max,
		 k->nan, k->inf, k->count);
}

/* The first non-finite call: the frame (oldest first, the call itself last) to the message log,
 * then one error line, which also reaches the terminal. The frame is a warning, kept off the
 * terminal; at a log level that leaves warnings out (error) it goes at the error's level, or the
 * error line would point to lines that are not there. Under the monitor's lock, so that the
 * frame is exactly the calls before this one. */
static void dnf_report(const struct dnf *self, struct dnf_monitor *m, const struct dnf_call *k)
{
	const struct dli_host *host = self->host;
	const char *tname = host->tensor_name(self->ctx, k->tensor);
	enum dli_log_level level = DLI_LOG_WARNING;
	char line[1024];

	if (DLI_HAS_MEMBER(host, struct dli_host, log_level) && host->log_level &&
	    host->log_level(self->ctx) < DLI_LOG_WARNING)
		level = DLI_LOG_ERROR;
	host->log(self->ctx, level,
		  "DetectNonFinite: the last %zu inspected calls up to the first one holding NaN or "
		  "Inf, oldest first (abs-min, abs-max over the non-NaN elements):",
		  m->n);
	for (size_t i = 0; i < m->n; i++) {
		const struct dnf_call *f = &m->ring[(m->head + m->cap - m->n + i) % m->cap];
		dnf_call_text(self, f, line, sizeof(line));
		host->log(self->ctx, level, "DetectNonFinite: frame %zu/%zu %s", i + 1, m->n, line);
	}
	host->log(self->ctx, DLI_LOG_ERROR,
		  "DetectNonFinite: first NaN/Inf at iteration %" PRId64 ", call %" PRIu64
		  ": layer '%s', tensor '%s' holds %" PRIu64 " NaN and %" PRIu64 " inf of %" PRIu64
		  " elements (section '%s', %s); the frame of the %zu calls up to it is in the "
		  "message log; on_detect: %s",
		  k->iteration, k->order, k->layer, tname ? tname : "?", k->nan, k->inf, k->count,
		  self->section, self->where, m->n,
		  self->stop ? "stop (the next dli_step returns -ECANCELED)" : "continue");
	if (self->stop) {
		snprintf(line, sizeof(line),
			 "DetectNonFinite found NaN/Inf in layer '%s', tensor '%s' at iteration %" PRId64
			 ", call %" PRIu64 " (the report with its frame is in the message log)",
			 k->layer, tname ? tname : "?", k->iteration, k->order);
		host->request_stop(self->ctx, line);
	}
}

static int dnf_inspect_tensor(const struct dli_feature_call *c, int tensor,
			      const struct dli_tensor *hp, const struct dli_quantized_tensor *rowwise,
			      const struct dli_quantized_tensor *colwise)
{
	const struct dnf *self = c->instance;
	const struct dli_host *host = self->host;
	struct dnf_monitor *m = self->mon;
	struct dli_stats_record rec;

	if (!hp)
		return -EINVAL;
	/* An accumulator of its own while the call runs: calls on other threads must not mix into
	 * this one's values. The pass is the statistics pass (kernels/), abs-min from its least
	 * nonzero magnitude and zero count. */
	struct dli_stats_acc *acc = NULL;
	pthread_mutex_lock(&m->lock);
	if (m->n_spare)
		acc = m->spare[--m->n_spare];
	pthread_mutex_unlock(&m->lock);
	if (!acc && !(acc = host->stats_acc_create(c->ctx)))
		return -ENOMEM;
	int r = host->stats_add(acc, hp, NULL);
	if (!r)
		r = host->stats_acc_read_sized(acc, &rec, sizeof(rec));
	host->stats_acc_reset(acc);
	pthread_mutex_lock(&m->lock);
	/* One that refused a tensor is not kept: it says why only once, and the next tensor it
	 * refused would go unreported. */
	if (!r && m->n_spare < DNF_SPARE) {
		m->spare[m->n_spare++] = acc;
		acc = NULL;
	}
	pthread_mutex_unlock(&m->lock);
	host->stats_acc_destroy(acc);
	if (r)
		return r;
	if (!rec.count)
		return 0; /* an empty tensor: nothing to see, no frame entry */

	int64_t iteration = host->iteration(c->ctx);
	bool all_nan = rec.nan_count == rec.count;
	struct dnf_call k = {
		.layer = c->layer_name,
		.tensor = tensor,
		.iteration = iteration,
		.count = rec.count,
		.nan = rec.nan_count,
		.inf = rec.inf_count,
		.abs_min = all_nan ? NAN : rec.zero_count ? 0.0 : rec.min_nonzero_abs,
		.abs_max = all_nan ? NAN : rec.amax,
	};
	pthread_mutex_lock(&m->lock);
	if (m->iteration != iteration) {
		m->iteration = iteration;
		m->order = 0;
	}
	k.order = ++m->order;
	m->ring[m->head] = k;
	m->head = (m->head + 1) % m->cap;
	if (m->n < m->cap)
		m->n++;
	if (dnf_traced(self, iteration)) {
		char line[1024];
		dnf_call_text(self, &k, line, sizeof(line));
		host->log(c->ctx, DLI_LOG_INFO, "DetectNonFinite: trace %s", line);
	}
	if (k.nan || k.inf) {
		m->nonfinite++;
		if (!m->reported) {
			m->reported = true;
			dnf_report(self, m, &k);
		}
	}
	pthread_mutex_unlock(&m->lock);
	return 0;
}

static void dnf_step_end(const struct dli_feature_call *c, int64_t iteration)
{
	const struct dnf *self = c->instance;

	if (self->abort_after >= 0 && iteration == self->abort_after) {
		char reason[512];
		snprintf(reason, sizeof(reason),
			 "DetectNonFinite: abort_after_batch_num is %" PRId64 " and iteration %" PRId64
			 " has ended (section '%s', %s)",
			 self->abort_after, iteration, self->section, self->where);
		self->host->request_stop(c->ctx, reason);
	}
}

static const struct dli_feature_ops dnf_ops = {
	.size = sizeof(struct dli_feature_ops),
	.create = dnf_create,
	.destroy = dnf_destroy,
	.inspect_tensor_enabled = dnf_inspect_tensor_enabled,
	.inspect_tensor = dnf_inspect_tensor,
	.step_end = dnf_step_end,
};

static const char *const dnf_on_detect[] = {"stop", "continue", NULL};

/* In the order of the P_* indices. */
static const struct dli_param_desc dnf_params[] = {
	{.key = "frame_size", .type = DLI_PARAM_INT, .default_value = "21",
	 .doc = "how many inspected calls the report shows, the NaN/Inf one last (Hugging Face's "
		"max_frames_to_save); the largest of a run's blocks is used",
	 .bounded = true, .min = 1, .max = 100000},
	{.key = "on_detect", .type = DLI_PARAM_STRING, .default_value = "stop",
	 .doc = "after the report: stop (the host's next dli_step returns -ECANCELED; dlinspect "
		"never exits) or continue",
	 .choices = dnf_on_detect},
	{.key = "trace_batch_nums", .type = DLI_PARAM_STRING_LIST,
	 .doc = "iterations (integers >= 0) whose every inspected call is written to the message log "
		"with its abs-min and abs-max, in call order, e.g. [1, 3]"},
	{.key = "abort_after_batch_num", .type = DLI_PARAM_INT, .default_value = "-1",
	 .doc = "when this iteration ends, the host's next dli_step returns -ECANCELED (-1: never)",
	 .bounded = true, .min = -1, .max = INFINITY},
};

static const struct dli_feature_desc dnf_feature = {
	.size = sizeof(struct dli_feature_desc),
	.name = "DetectNonFinite",
	.doc = "Reports the first NaN/Inf in the selected tensors with the calls before it (abs-min, "
	       "abs-max), and can make the host stop; traces chosen iterations.",
	.flags = DLI_FEATURE_GENERIC | DLI_FEATURE_TENSORS | DLI_FEATURE_SCHEDULED |
		 DLI_FEATURE_STRIDED, /* reads tensors through the host calls only */
	.params = dnf_params,
	.n_params = sizeof(dnf_params) / sizeof(dnf_params[0]),
	.param_size = DLI_PARAM_SIZE,
	.ops = &dnf_ops,
};
static const struct dli_feature_desc *const dnf_features[] = {&dnf_feature};

/* How `extensions: [transformer_engine]` finds this module without loading it: it takes the
 * inspect_tensor calls of TransformerEngine's call set, beside LogTensorStats. */
DLI_MODULE_NAMESPACE("transformer_engine");

static const struct dli_module dnf_module = {
	.size = sizeof(struct dli_module),
	.abi_major = DLI_ABI_MAJOR,
	.abi_minor = DLI_ABI_MINOR,
	.name = "detect_non_finite",
	.ns = "transformer_engine",
	.doc = "Hugging Face's DebugUnderflowOverflow: NaN/Inf detection with a frame of the calls "
	       "before it, and batch tracing.",
	.features = dnf_features,
	.n_features = 1,
};

DLI_EXPORT const struct dli_module *DLI_MODULE_ENTRY(const struct dli_host *host)
{
	if (!host || host->abi_major != DLI_ABI_MAJOR)
		return NULL;
	return &dnf_module;
}
