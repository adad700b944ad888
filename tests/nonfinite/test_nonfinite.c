/* DetectNonFinite and dli_detect_overflow through the real core: YAML into dli_init, the module and
 * the file logger from the build tree, the message log read back. The frame report is compared with
 * a trace this test records itself (every call, abs-min and abs-max computed here, naively). */
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "dli-test.h"

#define LAYERS_ALL "  layers: {layer_name_regex_pattern: '.*'}\n"

/* ---- The naive reference ---- */

struct ref_call {
	char layer[32];
	const char *tensor;
	long long iteration, order;
	double abs_min, abs_max; /* over the non-NaN elements */
	unsigned long long nan, inf, count;
};

static void ref_of(struct ref_call *r, const float *x, int64_t n)
{
	r->abs_min = INFINITY;
	r->abs_max = 0;
	r->nan = r->inf = 0;
	r->count = (unsigned long long)n;
	for (int64_t i = 0; i < n; i++) {
		if (x[i] != x[i]) {
			r->nan++;
			continue;
		}
		if (x[i] == INFINITY || x[i] == -INFINITY)
			r->inf++;
		double a = fabs((double)x[i]);
		r->abs_min = a < r->abs_min ? a : r->abs_min;
		r->abs_max = a > r->abs_max ? a : r->abs_max;
	}
}

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static float frand(void)
{
	rng = rng * 6364136223846793005ull + 1442695040888963407ull;
	return (float)((double)(rng >> 11) / 9007199254740992.0 * 2.0 - 1.0);
}

/* The message log's lines holding `text`, in order, into lines[] (at most max); their count. */
static int grep_log(const char *text, char lines[][1024], int max)
{
	FILE *f = open_log(MESSAGE_LOG);
	char buf[4096];
	int n = 0;
	while (f && fgets(buf, sizeof buf, f))
		if (strstr(buf, text) && n < max)
			snprintf(lines[n++], 1024, "%s", strstr(buf, text));
	if (f)
		fclose(f);
	return n;
}

/* Parses "[iteration I, call C] LAYER TENSOR: abs-min A, abs-max B, NaN N, inf F of K" that
 * follows `prefix` in `line`; 1 on success. */
static int parse_call(const char *line, const char *prefix, struct ref_call *c, char *tensor,
		      size_t tsize)
{
	const char *p = strstr(line, prefix);
	if (!p)
		return 0;
	p += strlen(prefix);
	char tname[64];
	int got = sscanf(p, "[iteration %lld, call %lld] %31s %63[^:]: abs-min %lf, abs-max %lf, NaN "
			    "%llu, inf %llu of %llu",
			 &c->iteration, &c->order, c->layer, tname, &c->abs_min, &c->abs_max, &c->nan,
			 &c->inf, &c->count);
	snprintf(tensor, tsize, "%s", tname);
	return got == 9;
}

static int same_value(double logged, double ref)
{
	/* %.9g round-trips a float: the logged value, back to float, is the float itself. */
	return (isnan(logged) && isnan(ref)) || (float)logged == (float)ref;
}

/* ---- Frame against the reference: 4 layers x 3 tensors a step, values growing, a NaN at step 2 ---- */

static void test_frame_matches_reference(void)
{
	static const char yaml[] = "watch:\n  enabled: true\n" LAYERS_ALL
				   "  DetectNonFinite:\n    enabled: true\n"
				   "    tensors: [activation, weight, output]\n    frame_size: 7\n";
	static const char *const names[] = {"activation", "weight", "output"};
	const int kinds[] = {DLI_TENSOR_ACTIVATION, DLI_TENSOR_WEIGHT, DLI_TENSOR_OUTPUT};
	struct dli_context *ctx = open_yaml(yaml, NULL);
	CHECK(ctx != NULL);
	if (!ctx)
		return;
	enum { N = 257, MAXCALLS = 64 };
	static struct ref_call trace[MAXCALLS];
	int n_trace = 0, first_bad = -1;
	float x[N];
	struct dli_layer *ls[4];
	char lname[4][32];
	for (int i = 0; i < 4; i++) {
		snprintf(lname[i], sizeof lname[i], "model.layers.%d.fc1", i);
		ls[i] = layer(ctx, lname[i]);
	}
	CHECK(stderr_capture_begin("stderr-frame.txt"));
	int step_rc[4];
	for (int it = 0; it < 4; it++) {
		long long order = 0;
		for (int li = 0; li < 4; li++)
			for (int k = 0; k < 3; k++) {
				double scale = pow(10.0, it + li * 0.5 + k);
				for (int e = 0; e < N; e++)
					x[e] = (float)(frand() * scale);
				if (it == 2 && li == 2 && k == 2)
					x[100] = NAN, x[7] = INFINITY; /* the first bad call */
				if (it == 3 && li == 0 && k == 0)
					x[3] = NAN; /* later ones are not reported again */
				struct dli_tensor t = tensor(x, DLI_DTYPE_F32, N);
				CHECK(dli_inspect_tensor_enabled(ls[li], kinds[k], NULL));
				CHECK_INT(dli_inspect_tensor(ls[li], kinds[k], &t, NULL, NULL), 0);
				struct ref_call *r = &trace[n_trace];
				snprintf(r->layer, sizeof r->layer, "%s", lname[li]);
				r->tensor = names[k];
				r->iteration = it;
				r->order = ++order;
				ref_of(r, x, N);
				if (first_bad < 0 && (r->nan || r->inf))
					first_bad = n_trace;
				n_trace++;
			}
		step_rc[it] = dli_step(ctx);
	}
	stderr_capture_end();
	CHECK_INT(step_rc[0], 0);
	CHECK_INT(step_rc[1], 0);
	CHECK_INT(step_rc[2], -ECANCELED); /* on_detect defaults to stop */
	CHECK_INT(step_rc[3], -ECANCELED); /* and stays stopped */
	CHECK_CONTAINS(dli_last_error(ctx), "DetectNonFinite found NaN/Inf in layer "
					    "'model.layers.2.fc1', tensor 'output' at iteration 2, call 9");
	dli_destroy(ctx);

	/* The expected frame: the 7 calls up to and including the first bad one. */
	static char lines[64][1024];
	int n = grep_log("DetectNonFinite: frame ", lines, 64);
	CHECK_INT(n, 7);
	for (int i = 0; i < n && i < 7; i++) {
		const struct ref_call *want = &trace[first_bad - 6 + i];
		struct ref_call got;
		char prefix[64], tname[64];
		snprintf(prefix, sizeof prefix, "frame %d/7 ", i + 1);
		CHECK(parse_call(lines[i], prefix, &got, tname, sizeof tname));
		CHECK_STR(got.layer, want->layer);
		CHECK_STR(tname, want->tensor);
		CHECK_INT(got.iteration, want->iteration);
		CHECK_INT(got.order, want->order);
		CHECK(same_value(got.abs_min, want->abs_min));
		CHECK(same_value(got.abs_max, want->abs_max));
		CHECK_INT(got.nan, want->nan);
		CHECK_INT(got.inf, want->inf);
		CHECK_INT(got.count, want->count);
	}
	/* The last frame entry is the bad call: 1 NaN, 1 inf, abs-max inf. */
	CHECK_INT(trace[first_bad].nan, 1);
	CHECK(isinf(trace[first_bad].abs_max));
	/* One report, after the frame, naming layer, tensor, iteration and call order. */
	CHECK_INT(grep_log("DetectNonFinite: first NaN/Inf", lines, 64), 1);
	CHECK_CONTAINS(lines[0], "at iteration 2, call 9: layer 'model.layers.2.fc1', tensor "
				 "'output' holds 1 NaN and 1 inf of 257 elements (section 'watch'");
	CHECK_CONTAINS(lines[0], "on_detect: stop");
	CHECK_INT(count_lines(MESSAGE_LOG, "ERROR - DetectNonFinite: first NaN/Inf"), 1);
	CHECK_INT(count_lines(MESSAGE_LOG, "inspected calls held NaN or Inf in this run"), 1);
	CHECK_INT(count_lines(MESSAGE_LOG, "a feature asked the host to stop"), 1);
	/* The terminal got the report line once, and not the frame, which is a warning at the
	 * default log level. */
	CHECK_INT(count_lines("stderr-frame.txt", "DetectNonFinite: first NaN/Inf"), 1);
	CHECK_INT(count_lines("stderr-frame.txt", "DetectNonFinite: frame"), 0);
	CHECK_INT(count_lines(MESSAGE_LOG, "WARNING - DetectNonFinite: frame "), 7);
}

/* ---- At log level error, the report keeps the frame its error line points to ---- */

static void test_frame_kept_at_log_level_error(void)
{
	static const char yaml[] = "watch:\n  enabled: true\n" LAYERS_ALL
				   "  DetectNonFinite:\n    enabled: true\n    tensors: [activation]\n"
				   "    frame_size: 3\n    on_detect: continue\n";
	float x[4] = {1, -2, 3, 4};
	struct dli_tensor t = tensor(x, DLI_DTYPE_F32, 4);

	setenv("DLINSPECT_LOG_LEVEL", "error", 1);
	struct dli_context *ctx = open_yaml(yaml, NULL);
	setenv("DLINSPECT_LOG_LEVEL", "", 1); /* empty is unset, as the tests' environment has it */
	CHECK(ctx != NULL);
	if (!ctx)
		return;
	struct dli_layer *l = layer(ctx, "model.fc1");
	CHECK(stderr_capture_begin("stderr-error-level.txt"));
	for (int it = 0; it < 3; it++) {
		if (it == 2)
			x[1] = NAN;
		CHECK_INT(dli_inspect_tensor(l, DLI_TENSOR_ACTIVATION, &t, NULL, NULL), 0);
		CHECK_INT(dli_step(ctx), 0);
	}
	stderr_capture_end();
	dli_destroy(ctx);

	static char lines[8][1024];
	CHECK_INT(grep_log("DetectNonFinite: first NaN/Inf", lines, 8), 1);
	CHECK_CONTAINS(lines[0], "at iteration 2, call 1: layer 'model.fc1', tensor 'activation' "
				 "holds 1 NaN and 0 inf of 4 elements");
	CHECK_CONTAINS(lines[0], "the frame of the 3 calls up to it is in the message log");
	/* ... and it is: the heading and the 3 calls, at the error's level. */
	CHECK_INT(count_lines(MESSAGE_LOG, "ERROR - DetectNonFinite: the last 3 inspected calls up "
					   "to the first one holding NaN or Inf, oldest first"), 1);
	CHECK_INT(count_lines(MESSAGE_LOG, "ERROR - DetectNonFinite: frame "), 3);
	CHECK_INT(count_lines(MESSAGE_LOG, "ERROR - DetectNonFinite: frame 1/3 [iteration 0, call 1] "
					   "model.fc1 activation: abs-min 1, abs-max 4, NaN 0, inf 0 "
					   "of 4"), 1);
	CHECK_INT(count_lines(MESSAGE_LOG, "ERROR - DetectNonFinite: frame 3/3 [iteration 2, call 1] "
					   "model.fc1 activation: abs-min 1, abs-max 4, NaN 1, inf 0 "
					   "of 4"), 1);
	/* Nothing below the error level is written. */
	CHECK_INT(count_lines(MESSAGE_LOG, "WARNING - "), 0);
	/* Errors reach the terminal too: there the report is whole as well. */
	CHECK_INT(count_lines("stderr-error-level.txt", "DetectNonFinite: first NaN/Inf"), 1);
	CHECK_INT(count_lines("stderr-error-level.txt", "DetectNonFinite: frame "), 3);
}

/* ---- Each tensor kind, each dtype, NaN / +inf / -inf; nothing on clean data ---- */

static uint16_t bf16_of(float f)
{
	uint32_t u;
	memcpy(&u, &f, 4);
	return (uint16_t)(u >> 16);
}

/* A new empty log dir in log_dir (the previous one removed). */
static bool fresh_log_dir(void)
{
	const char *tmp = getenv("TMPDIR");
	remove_log_dir();
	snprintf(log_dir, sizeof log_dir, "%s/dli-test-XXXXXX", tmp && *tmp ? tmp : "/tmp");
	if (mkdtemp(log_dir))
		return true;
	log_dir[0] = 0;
	return false;
}

static struct dli_context *open_declared(const char *yaml)
{
	static const char *const own[] = {"attn_probs"};
	if (!fresh_log_dir())
		return NULL;
	struct dli_options o;
	dli_options_init(&o);
	o.config_yaml = yaml;
	o.log_dir = log_dir;
	o.tensor_names = own;
	o.n_tensor_names = 1;
	struct dli_context *ctx = NULL;
	struct dli_error err;
	if (dli_init(&o, &ctx, &err))
		fprintf(stderr, "dli_init: %s\n", err.message);
	return ctx;
}

static void test_each_tensor_kind(void)
{
	static const char *const kinds[] = {"activation", "gradient", "weight", "output",
					    "wgrad", "dgrad", "attn_probs"};
	for (size_t k = 0; k < sizeof kinds / sizeof kinds[0]; k++) {
		char yaml[512];
		snprintf(yaml, sizeof yaml,
			 "s:\n  enabled: true\n" LAYERS_ALL "  DetectNonFinite:\n    enabled: true\n"
			 "    tensors: [%s]\n    on_detect: continue\n",
			 kinds[k]);
		struct dli_context *ctx = open_declared(yaml);
		CHECK(ctx != NULL);
		if (!ctx)
			continue;
		struct dli_layer *l = layer(ctx, "blk.fc2");
		int id = dli_tensor_id(ctx, kinds[k]);
		CHECK(id >= 0);
		/* Clean data first, in three dtypes: no report. */
		enum { N = 1000 };
		static float f[N];
		static uint16_t h[N];
		for (int i = 0; i < N; i++)
			f[i] = frand() * 1e3f, h[i] = bf16_of(f[i]);
		struct dli_tensor tf = tensor(f, DLI_DTYPE_F32, N), tb = tensor(h, DLI_DTYPE_BF16, N);
		CHECK_INT(dli_inspect_tensor(l, id, &tf, NULL, NULL), 0);
		CHECK_INT(dli_inspect_tensor(l, id, &tb, NULL, NULL), 0);
		CHECK_INT(dli_step(ctx), 0);
		CHECK_INT(count_lines(MESSAGE_LOG, "DetectNonFinite"), 0);
		/* Then one bad element: NaN in f32, +inf in bf16 or -inf in f16 by kind. */
		int what = (int)(k % 3);
		struct dli_tensor bad;
		if (what == 0) {
			f[N - 1] = NAN;
			bad = tf;
		} else if (what == 1) {
			h[N / 2] = 0x7F80; /* bf16 +inf */
			bad = tb;
		} else {
			for (int i = 0; i < N; i++)
				h[i] = 0x3C00; /* f16 1.0 */
			h[17] = 0xFC00;        /* f16 -inf */
			bad = tensor(h, DLI_DTYPE_F16, N);
		}
		CHECK_INT(dli_inspect_tensor(l, id, &bad, NULL, NULL), 0);
		CHECK_INT(dli_step(ctx), 0); /* continue: the host is not told to stop */
		dli_destroy(ctx);
		char want[256];
		snprintf(want, sizeof want,
			 "first NaN/Inf at iteration 1, call 1: layer 'blk.fc2', tensor '%s' holds %s",
			 kinds[k], what == 0 ? "1 NaN and 0 inf" : "0 NaN and 1 inf");
		CHECK_INT(count_lines(MESSAGE_LOG, want), 1);
		CHECK_INT(count_lines(MESSAGE_LOG, "on_detect: continue"), 1);
		/* The frame: the two clean calls of iteration 0, then this one. */
		CHECK_INT(count_lines(MESSAGE_LOG, "DetectNonFinite: frame "), 3);
		if (what == 2)
			CHECK_INT(count_lines(MESSAGE_LOG, "abs-min 1, abs-max inf, NaN 0, inf 1 of 1000"),
				  1);
	}
}

static void test_clean_run_reports_nothing(void)
{
	static const char yaml[] = "s:\n  enabled: true\n" LAYERS_ALL
				   "  DetectNonFinite:\n    enabled: true\n"
				   "    tensors: [activation, gradient]\n";
	struct dli_context *ctx = open_yaml(yaml, NULL);
	CHECK(ctx != NULL);
	if (!ctx)
		return;
	struct dli_layer *l = layer(ctx, "a");
	float x[300];
	for (int it = 0; it < 5; it++) {
		for (int i = 0; i < 300; i++)
			x[i] = frand() * 3e38f; /* large but finite */
		x[0] = 0.0f;
		x[1] = -3.4028235e38f;
		struct dli_tensor t = tensor(x, DLI_DTYPE_F32, 300);
		CHECK_INT(dli_inspect_tensor(l, DLI_TENSOR_ACTIVATION, &t, NULL, NULL), 0);
		CHECK_INT(dli_inspect_tensor(l, DLI_TENSOR_GRADIENT, &t, NULL, NULL), 0);
		CHECK_INT(dli_step(ctx), 0);
	}
	dli_destroy(ctx);
	CHECK_INT(count_lines(MESSAGE_LOG, "DetectNonFinite"), 0);
	CHECK_INT(count_lines(MESSAGE_LOG, "ERROR"), 0);
}

/* ---- Tracing: exactly the listed iterations; abort_after_batch_num ---- */

static void test_trace_and_abort(void)
{
	/* freq 1000: detection alone would sleep until iteration 1000; the traced ones wake it. */
	static const char yaml[] = "s:\n  enabled: true\n" LAYERS_ALL
				   "  DetectNonFinite:\n    enabled: true\n    tensors: [activation, output]\n"
				   "    freq: 1000\n    start_step: 1000\n"
				   "    trace_batch_nums: [3, 1]\n    abort_after_batch_num: 3\n";
	struct dli_context *ctx = open_yaml(yaml, NULL);
	CHECK(ctx != NULL);
	if (!ctx)
		return;
	struct dli_layer *la = layer(ctx, "enc.0"), *lb = layer(ctx, "enc.1");
	float x[64];
	int rc[5];
	for (int it = 0; it < 5; it++) {
		int64_t next = -1;
		bool on = dli_inspect_tensor_enabled(la, DLI_TENSOR_ACTIVATION, &next);
		CHECK_INT(on, it == 1 || it == 3);
		CHECK_INT(next, it == 0 ? 1 : it == 1 ? 2 : it == 2 ? 3 : it == 3 ? 4 : 1000);
		for (int i = 0; i < 64; i++)
			x[i] = (float)(it + 1) * (float)(i + 1);
		struct dli_tensor t = tensor(x, DLI_DTYPE_F32, 64);
		if (on) {
			CHECK_INT(dli_inspect_tensor(la, DLI_TENSOR_ACTIVATION, &t, NULL, NULL), 0);
			CHECK_INT(dli_inspect_tensor(lb, DLI_TENSOR_ACTIVATION, &t, NULL, NULL), 0);
			CHECK_INT(dli_inspect_tensor(lb, DLI_TENSOR_OUTPUT, &t, NULL, NULL), 0);
		}
		rc[it] = dli_step(ctx);
	}
	CHECK_INT(rc[0], 0);
	CHECK_INT(rc[1], 0);
	CHECK_INT(rc[2], 0);
	CHECK_INT(rc[3], -ECANCELED);
	CHECK_INT(rc[4], -ECANCELED);
	CHECK_CONTAINS(dli_last_error(ctx), "abort_after_batch_num is 3 and iteration 3 has ended");
	dli_destroy(ctx);
	static char lines[16][1024];
	int n = grep_log("DetectNonFinite: trace ", lines, 16);
	CHECK_INT(n, 6);
	static const char *const want_layer[] = {"enc.0", "enc.1", "enc.1"};
	static const char *const want_tensor[] = {"activation", "activation", "output"};
	for (int i = 0; i < n && i < 6; i++) {
		struct ref_call got;
		char tname[64];
		CHECK(parse_call(lines[i], "trace ", &got, tname, sizeof tname));
		CHECK_INT(got.iteration, i < 3 ? 1 : 3);
		CHECK_INT(got.order, i % 3 + 1);
		CHECK_STR(got.layer, want_layer[i % 3]);
		CHECK_STR(tname, want_tensor[i % 3]);
		CHECK(same_value(got.abs_min, (double)(got.iteration + 1)));
		CHECK(same_value(got.abs_max, (double)(got.iteration + 1) * 64));
	}
}

/* ---- dli_detect_overflow ---- */

static void test_detect_overflow(void)
{
	/* The default run: no config at all. Its lines go to stderr (no logger takes them). */
	CHECK(fresh_log_dir());
	struct dli_options o;
	dli_options_init(&o);
	o.log_dir = log_dir;
	struct dli_context *ctx = NULL;
	CHECK_INT(dli_init(&o, &ctx, NULL), 0);
	enum { N = 100003 }; /* past every SIMD block, with a tail */
	static float f[N];
	static uint16_t h[N];
	for (int i = 0; i < N; i++)
		f[i] = frand() * 100.0f;
	f[5] = 0.5f; /* not the least: frand gives smaller ones */
	struct dli_tensor tf = tensor(f, DLI_DTYPE_F32, N);
	CHECK(stderr_capture_begin("stderr-overflow.txt"));
	CHECK(!dli_detect_overflow(ctx, &tf, "clean f32"));
	f[N - 1] = NAN;
	CHECK(dli_detect_overflow(ctx, &tf, "f32 nan"));
	f[N - 1] = 1.0f;
	f[0] = INFINITY;
	CHECK(dli_detect_overflow(ctx, &tf, "f32 +inf"));
	f[0] = -INFINITY;
	CHECK(dli_detect_overflow(ctx, &tf, "f32 -inf"));
	f[0] = 1.0f;
	CHECK(!dli_detect_overflow(ctx, &tf, "f32 clean again"));
	for (int i = 0; i < N; i++)
		h[i] = bf16_of(f[i]);
	struct dli_tensor tb = tensor(h, DLI_DTYPE_BF16, N);
	CHECK(!dli_detect_overflow(ctx, &tb, "clean bf16"));
	h[N / 3] = 0x7FC1; /* bf16 NaN */
	CHECK(dli_detect_overflow(ctx, &tb, "bf16 nan"));
	h[N / 3] = 0xFF80; /* bf16 -inf */
	CHECK(dli_detect_overflow(ctx, &tb, "bf16 -inf"));
	for (int i = 0; i < N; i++)
		h[i] = 0x3800; /* f16 0.5 */
	struct dli_tensor th = tensor(h, DLI_DTYPE_F16, N);
	CHECK(!dli_detect_overflow(ctx, &th, "clean f16"));
	h[N - 2] = 0x7C00; /* f16 +inf */
	CHECK(dli_detect_overflow(ctx, &th, "f16 +inf"));
	h[N - 2] = 0x7E00; /* f16 NaN */
	CHECK(dli_detect_overflow(ctx, &th, "f16 nan"));
	/* Nothing to read: false. */
	struct dli_tensor empty = tensor(f, DLI_DTYPE_F32, 0);
	CHECK(!dli_detect_overflow(ctx, &empty, "empty"));
	CHECK(!dli_detect_overflow(ctx, NULL, "null"));
	CHECK(!dli_detect_overflow(NULL, &tf, "no context"));
	struct dli_tensor strided = tf;
	strided.contiguous = false;
	CHECK(!dli_detect_overflow(ctx, &strided, "strided"));
	stderr_capture_end();
	dli_destroy(ctx);
	const char *cap = "stderr-overflow.txt";
	CHECK_INT(count_lines(cap, "detect_overflow: "), 7);
	CHECK_INT(count_lines(cap, "clean"), 0);
	CHECK_INT(count_lines(cap, "'f32 nan' at iteration 0: f32[100003] cpu:0 holds 1 NaN and 0 "
				   "inf of 100003 elements"),
		  1);
	CHECK_INT(count_lines(cap, "'f32 +inf' at iteration 0: f32[100003] cpu:0 holds 0 NaN and 1 "
				   "inf"),
		  1);
	CHECK_INT(count_lines(cap, "'f32 -inf'"), 1);
	CHECK_INT(count_lines(cap, "'bf16 nan'"), 1);
	CHECK_INT(count_lines(cap, "'bf16 -inf'"), 1);
	CHECK_INT(count_lines(cap, "'f16 +inf' at iteration 0: f16[100003] cpu:0 holds 0 NaN and 1 "
				   "inf of 100003 elements; abs-min 0.5, abs-max inf"),
		  1);
	CHECK_INT(count_lines(cap, "'f16 nan'"), 1);
	CHECK_INT(count_lines(cap, "non-contiguous"), 1); /* the strided one says why */

	/* With a config: the line goes to the message log at the current iteration. */
	ctx = open_yaml("s:\n  enabled: true\n" LAYERS_ALL
			"  DetectNonFinite: {enabled: true, tensors: [activation]}\n",
			NULL);
	CHECK(ctx != NULL);
	if (!ctx)
		return;
	CHECK_INT(dli_step(ctx), 0);
	f[0] = NAN;
	CHECK(dli_detect_overflow(ctx, &tf, "after attention"));
	dli_destroy(ctx);
	CHECK_INT(count_lines(MESSAGE_LOG, "WARNING - detect_overflow: 'after attention' at "
					   "iteration 1"),
		  1);
}

/* ---- Threads: calls from several threads go into one frame, in the order they took ---- */

enum { THREADS = 4, CALLS = 300 };

struct worker {
	struct dli_layer *l;
	bool poison; /* this thread's last call holds a NaN */
	float x[64];
};

static void *work(void *arg)
{
	struct worker *w = arg;
	for (int i = 0; i < 64; i++)
		w->x[i] = (float)(i + 1);
	struct dli_tensor t = tensor(w->x, DLI_DTYPE_F32, 64);
	for (int c = 0; c < CALLS; c++) {
		if (w->poison && c == CALLS - 1)
			w->x[10] = NAN;
		dli_inspect_tensor(w->l, DLI_TENSOR_ACTIVATION, &t, NULL, NULL);
	}
	return NULL;
}

static void test_threads(void)
{
	struct dli_context *ctx = open_yaml("s:\n  enabled: true\n" LAYERS_ALL
					    "  DetectNonFinite: {enabled: true, tensors: [activation], "
					    "frame_size: 50, on_detect: stop}\n",
					    NULL);
	CHECK(ctx != NULL);
	if (!ctx)
		return;
	static struct worker w[THREADS];
	pthread_t th[THREADS];
	for (int i = 0; i < THREADS; i++) {
		char name[32];
		snprintf(name, sizeof name, "t%d.fc", i);
		w[i].l = layer(ctx, name);
		w[i].poison = i == 2;
	}
	CHECK(stderr_capture_begin("stderr-threads.txt"));
	for (int i = 0; i < THREADS; i++)
		pthread_create(&th[i], NULL, work, &w[i]);
	for (int i = 0; i < THREADS; i++)
		pthread_join(th[i], NULL);
	stderr_capture_end();
	CHECK_INT(dli_step(ctx), -ECANCELED);
	dli_destroy(ctx);
	/* 50 frame lines with consecutive call orders, the NaN call of t2.fc last. */
	static char lines[64][1024];
	int n = grep_log("DetectNonFinite: frame ", lines, 64);
	CHECK_INT(n, 50);
	long long prev = -1;
	for (int i = 0; i < n; i++) {
		struct ref_call got;
		char tname[64], prefix[32];
		snprintf(prefix, sizeof prefix, "frame %d/50 ", i + 1);
		CHECK(parse_call(lines[i], prefix, &got, tname, sizeof tname));
		CHECK(prev < 0 || got.order == prev + 1);
		prev = got.order;
		CHECK_INT(got.nan, i == n - 1);
		if (i == n - 1)
			CHECK_STR(got.layer, "t2.fc");
	}
	CHECK(prev >= 50 && prev <= THREADS * CALLS);
	CHECK_INT(count_lines(MESSAGE_LOG, "DetectNonFinite: first NaN/Inf"), 1);
}

/* ---- Device tensors, through the stand-in CUDA backend (host memory; tests/features/fake_cuda) ---- */

static void test_device_tensors(void)
{
	if (!use_fake_cuda()) {
		CHECK(!"FAKE_CUDA_DIR is not set");
		return;
	}
	struct dli_context *ctx = open_yaml("s:\n  enabled: true\n" LAYERS_ALL
					    "  DetectNonFinite: {enabled: true, tensors: [output], "
					    "on_detect: continue}\n",
					    NULL);
	n_extra_dirs = 0;
	CHECK(ctx != NULL);
	if (!ctx)
		return;
	static float x[5000];
	for (int i = 0; i < 5000; i++)
		x[i] = (float)(i % 50) - 20.0f;
	struct dli_tensor t = tensor(x, DLI_DTYPE_F32, 5000);
	t.device = (struct dli_device){.type = DLI_DEVICE_CUDA, .index = 0};
	struct dli_layer *l = layer(ctx, "gpu.fc1");
	CHECK(!dli_detect_overflow(ctx, &t, "device clean"));
	CHECK_INT(dli_inspect_tensor(l, DLI_TENSOR_OUTPUT, &t, NULL, NULL), 0);
	x[4321] = -INFINITY;
	CHECK(dli_detect_overflow(ctx, &t, "device -inf"));
	CHECK_INT(dli_inspect_tensor(l, DLI_TENSOR_OUTPUT, &t, NULL, NULL), 0);
	dli_destroy(ctx);
	CHECK_INT(count_lines(MESSAGE_LOG, "detect_overflow: 'device -inf' at iteration 0: "
					   "f32[5000] cuda:0 holds 0 NaN and 1 inf of 5000 elements; "
					   "abs-min 0, abs-max inf"),
		  1);
	CHECK_INT(count_lines(MESSAGE_LOG, "frame 1/2 [iteration 0, call 1] gpu.fc1 output: abs-min 0, "
					   "abs-max 29, NaN 0, inf 0 of 5000"),
		  1);
	CHECK_INT(count_lines(MESSAGE_LOG, "first NaN/Inf at iteration 0, call 2: layer 'gpu.fc1', "
					   "tensor 'output' holds 0 NaN and 1 inf"),
		  1);
}

/* ---- Config errors: where and what ---- */

static void expect_error(const char *block, const char *parts[], size_t n)
{
	char yaml[1024];
	snprintf(yaml, sizeof yaml,
		 "s:\n  enabled: true\n" LAYERS_ALL "  DetectNonFinite:\n    enabled: true\n"
		 "    tensors: [activation]\n%s",
		 block);
	struct dli_error err;
	struct dli_context *ctx = open_yaml(yaml, &err);
	CHECK(ctx == NULL);
	dli_destroy(ctx);
	for (size_t i = 0; i < n; i++)
		CHECK_CONTAINS(err.message, parts[i]);
}

static void test_config_errors(void)
{
	expect_error("    frame_size: 0\n", (const char *[]){"<string>:7:17", "frame_size", "0"}, 3);
	expect_error("    on_detect: stopp\n", (const char *[]){"<string>:7:16", "did you mean 'stop'"},
		     2);
	expect_error("    frame_sise: 4\n",
		     (const char *[]){"<string>:7:5", "did you mean 'frame_size'"}, 2);
	expect_error("    trace_batch_nums: [1, x3]\n",
		     (const char *[]){"<string>:7:23", "trace_batch_nums: 'x3' is not an iteration "
						      "number"},
		     2);
	expect_error("    trace_batch_nums: [1, -2]\n",
		     (const char *[]){"trace_batch_nums: '-2' is not an iteration number"}, 1);
	expect_error("    abort_after_batch_num: -5\n",
		     (const char *[]){"<string>:7:28", "abort_after_batch_num"}, 2);
	/* A file: its path, line and column. */
	char path[512];
	FILE *f;
	struct dli_error err;
	CHECK(fresh_log_dir());
	snprintf(path, sizeof path, "%s/bad.yaml", log_dir);
	CHECK((f = fopen(path, "w")) != NULL);
	if (!f)
		return;
	fputs("s:\n  enabled: true\n" LAYERS_ALL "  DetectNonFinite:\n    enabled: true\n"
	      "    tensors: [activation]\n    on_detect: halt\n",
	      f);
	fclose(f);
	struct dli_options o;
	dli_options_init(&o);
	o.config_path = path;
	o.log_dir = log_dir;
	struct dli_context *ctx = NULL;
	CHECK(dli_init(&o, &ctx, &err) == -EINVAL);
	char want[600];
	snprintf(want, sizeof want, "%s:7:16", path);
	CHECK_CONTAINS(err.message, want);
	CHECK_CONTAINS(err.message, "halt");
	CHECK_INT(err.line, 7);
	CHECK_INT(err.column, 16);
}

/* Tensors DetectNonFinite cannot read (int32), in three layers, two steps: each layer's refusal is
 * said, with its layer and the reason (an accumulator that refused one is not reused for the
 * next, which it would no longer report). */
static void test_refusals_each_said(void)
{
	static const char yaml[] = "watch:\n  enabled: true\n" LAYERS_ALL
				   "  DetectNonFinite: {enabled: true, tensors: [activation]}\n";
	struct dli_context *ctx = open_yaml(yaml, NULL);
	CHECK(ctx != NULL);
	if (!ctx)
		return;
	int32_t v[4] = {1, 2, 3, 4};
	struct dli_tensor t = tensor(v, DLI_DTYPE_I32, 4);
	char name[32], want[160];
	for (int it = 0; it < 2; it++) {
		for (int li = 0; li < 3; li++) {
			snprintf(name, sizeof name, "model.layers.%d.fc1", li);
			CHECK(dli_inspect_tensor(layer(ctx, name), DLI_TENSOR_ACTIVATION, &t, NULL,
						 NULL) < 0);
		}
		dli_step(ctx);
	}
	dli_destroy(ctx);
	for (int li = 0; li < 3; li++) {
		snprintf(want, sizeof want,
			 "statistics (layer 'model.layers.%d.fc1', tensor 'activation'): cannot read "
			 "a tensor of dtype i32", li);
		CHECK(count_lines(MESSAGE_LOG, want) >= 1);
	}
}

int main(void)
{
	test_frame_matches_reference();
	test_frame_kept_at_log_level_error();
	test_refusals_each_said();
	test_each_tensor_kind();
	test_clean_run_reports_nothing();
	test_trace_and_abort();
	test_detect_overflow();
	test_device_tensors();
	test_threads();
	test_config_errors();
	remove_log_dir();
	return check_exit();
}
