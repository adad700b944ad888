/* Live config reload (docs/config.md, "Reloading"): a changed config file comes in at the next step
 * boundary, an invalid one is refused with its file:line:col and the old one stays, an unchanged one
 * is not reloaded, handles stay valid (run under ASan), tensor ids keep, dli_config_reload from a
 * SIGHUP handler, and threads calling between steps never see a half-switched config (also under
 * TSan). Uses the "probe" fixture module (the threads: real features) and the file logger's
 * output. */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <dlinspect/dlinspect.h>

#include "check.h"
#include "dli-test.h"

struct probe_stats {
	long enabled_queries, inspects, step_ends, modifies;
	double last_value;
	char label[64];
};

static char cfg_path[512];

static void write_config(const char *text)
{
	/* As an editor that saves through a temporary file does: the new content appears at once. */
	char tmp[600];
	snprintf(tmp, sizeof tmp, "%s.tmp", cfg_path);
	FILE *f = fopen(tmp, "w");
	if (!f || fputs(text, f) < 0 || fclose(f) || rename(tmp, cfg_path))
		perror(cfg_path);
}

/* A context on the config file `text` (written into a fresh log dir), checking every `every`
 * steps. */
static struct dli_context *open_file(const char *text, int every)
{
	/* open_yaml's log dir handling, with a file config. */
	struct dli_context *ctx = open_yaml("{}", NULL);
	dli_destroy(ctx);
	snprintf(cfg_path, sizeof cfg_path, "%s/config.yaml", log_dir);
	char dir[256];
	snprintf(dir, sizeof dir, "%s", log_dir);
	write_config(text);
	struct dli_options o;
	dli_options_init(&o);
	o.config_path = cfg_path;
	o.log_dir = dir;
	o.config_reload_steps = every;
	struct dli_error err;
	ctx = NULL;
	if (dli_init(&o, &ctx, &err))
		fprintf(stderr, "dli_init: %s\n", err.message);
	return ctx;
}

static const char *label_of(struct dli_layer *l)
{
	static _Thread_local struct probe_stats st;
	memset(&st, 0, sizeof st);
	return dli_call(l, "probe_stats", &st) == 1 ? st.label : "(none)";
}

static const char cfg_a[] = "s:\n  enabled: true\n  layers: {layer_types: [fc1]}\n"
			    "  Probe: {enabled: true, tensors: [activation], label: a}\n";
/* The layers, tensor and schedule change; fc2 becomes selected. */
static const char cfg_b[] = "s:\n  enabled: true\n  layers: {layer_types: [fc1, fc2]}\n"
			    "  Probe: {enabled: true, tensors: [weight], freq: 3, label: b}\n";
/* Line 4, column 36: a key Probe does not take. */
static const char cfg_bad[] = "s:\n  enabled: true\n  layers: {layer_types: [fc1]}\n"
			      "  Probe: {enabled: true, tensors: [activation], labl: c}\n";
static const char cfg_bad2[] = "s:\n  enabled: true\n  layers: {layer_types: [fc1]\n";

static void test_valid_change_at_the_step_boundary(void)
{
	struct dli_context *ctx = open_file(cfg_a, 1);
	CHECK(ctx != NULL);
	if (!ctx)
		return;
	struct dli_layer *fc1 = layer(ctx, "m.0.fc1"), *fc2 = layer(ctx, "m.0.fc2");
	float x[2] = {1, 2};
	struct dli_tensor t = tensor(x, DLI_DTYPE_F32, 2);
	CHECK(dli_inspect_tensor_enabled(fc1, DLI_TENSOR_ACTIVATION, NULL));
	CHECK(!dli_inspect_tensor_enabled(fc1, DLI_TENSOR_WEIGHT, NULL));
	CHECK(!dli_inspect_tensor_enabled(fc2, DLI_TENSOR_WEIGHT, NULL));
	CHECK_STR(label_of(fc1), "a");
	CHECK_INT(dli_inspect_tensor(fc1, DLI_TENSOR_ACTIVATION, &t, NULL, NULL), 0);

	/* Edited during iteration 0: still the old config until the step ends. */
	write_config(cfg_b);
	CHECK(dli_inspect_tensor_enabled(fc1, DLI_TENSOR_ACTIVATION, NULL));
	CHECK_STR(label_of(fc1), "a");
	CHECK_INT(dli_step(ctx), 0);

	/* Iteration 1: the same handles, the new config. */
	CHECK(layer(ctx, "m.0.fc1") == fc1);
	CHECK_STR(dli_layer_name(fc1), "m.0.fc1");
	/* With a check every step, no `next` goes past the next iteration (test_next_stops_at_reload
	 * has the rule); the answers are the new config's. */
	int64_t next = 0;
	CHECK(!dli_inspect_tensor_enabled(fc1, DLI_TENSOR_ACTIVATION, &next));
	CHECK_INT(next, 2);
	/* freq 3: off at 1, on from 3. */
	CHECK(!dli_inspect_tensor_enabled(fc1, DLI_TENSOR_WEIGHT, &next));
	CHECK_INT(next, 2);
	CHECK(!dli_inspect_tensor_enabled(fc2, DLI_TENSOR_WEIGHT, &next));
	CHECK_INT(next, 2);
	CHECK_STR(label_of(fc1), "b");
	CHECK_STR(label_of(fc2), "b");
	/* A handle created after the swap sees the new config only. */
	struct dli_layer *fc1b = layer(ctx, "m.1.fc1");
	CHECK_STR(label_of(fc1b), "b");
	CHECK(!dli_inspect_tensor_enabled_by_name(ctx, "m.2.fc1", "activation", NULL));
	CHECK_INT(dli_step(ctx), 0);
	CHECK_INT(dli_step(ctx), 0);
	CHECK(dli_inspect_tensor_enabled(fc1, DLI_TENSOR_WEIGHT, NULL)); /* iteration 3 */
	CHECK_INT(dli_inspect_tensor(fc1, DLI_TENSOR_WEIGHT, &t, NULL, NULL), 0);
	CHECK_INT(dli_step(ctx), 0);
	dli_destroy(ctx);

	/* The old Probe logged its step 0 (1 inspect) before going; the new one logged steps 3. */
	CHECK_INT(count_lines(STATS_LOG, "m.0.fc1_a_inspects"), 1);
	CHECK_INT(count_lines(STATS_LOG, "m.0.fc1_b_inspects"), 1);
	CHECK_INT(count_lines(STATS_LOG, "m.0.fc2_b_inspects"), 1);
	CHECK_INT(count_lines(STATS_LOG, "m.1.fc1_b_inspects"), 1);
	char want[700];
	snprintf(want, sizeof want, "config '%s' reloaded at the end of iteration 0", cfg_path);
	CHECK_INT(count_lines(MESSAGE_LOG, want), 1);
	CHECK_INT(count_lines(MESSAGE_LOG, "in force from iteration 1"), 1);
	CHECK_INT(count_lines(MESSAGE_LOG, "reloaded at"), 1);
}

static void test_invalid_change_refused(void)
{
	struct dli_context *ctx = open_file(cfg_a, 1);
	CHECK(ctx != NULL);
	if (!ctx)
		return;
	struct dli_layer *fc1 = layer(ctx, "m.0.fc1");
	char want[700];
	CHECK(stderr_capture_begin("stderr.txt"));
	write_config(cfg_bad);
	CHECK_INT(dli_step(ctx), 0);
	CHECK(dli_inspect_tensor_enabled(fc1, DLI_TENSOR_ACTIVATION, NULL));
	CHECK_STR(label_of(fc1), "a");
	CHECK_INT(dli_step(ctx), 0); /* the same refused content: not parsed, not said again */
	write_config(cfg_bad2);
	CHECK_INT(dli_step(ctx), 0);
	CHECK_STR(label_of(fc1), "a");
	stderr_capture_end();
	snprintf(want, sizeof want, "refused at iteration 0, the config in force stays: %s:4:",
		 cfg_path);
	CHECK_INT(count_lines(MESSAGE_LOG, "config reload refused at iteration 0"), 1);
	CHECK_INT(count_lines(MESSAGE_LOG, want), 1);
	CHECK_INT(count_lines(MESSAGE_LOG, "labl"), 1);
	CHECK_INT(count_lines(MESSAGE_LOG, "config reload refused at iteration 2"), 1);
	CHECK_INT(count_lines(MESSAGE_LOG, "config reload refused"), 2);
	CHECK_INT(count_lines("stderr.txt", "config reload refused"), 1);
	CHECK_INT(count_lines("stderr.txt", want), 1);
	/* A valid config after refused ones is taken. */
	write_config(cfg_b);
	CHECK_INT(dli_step(ctx), 0);
	CHECK_STR(label_of(fc1), "b");
	dli_destroy(ctx);
	CHECK_INT(count_lines(MESSAGE_LOG, "reloaded at the end of iteration 3"), 1);
}

/* A FIFO put where the config was: the check refuses it at once, where its open waited for a
 * writer, and dli_step with it, forever. */
static void test_fifo_refused(void)
{
	struct dli_context *ctx = open_file(cfg_a, 1);
	CHECK(ctx != NULL);
	if (!ctx)
		return;
	struct dli_layer *fc1 = layer(ctx, "m.0.fc1");
	char fifo[600];
	snprintf(fifo, sizeof fifo, "%s.fifo", cfg_path);
	CHECK_INT(mkfifo(fifo, 0600), 0);
	CHECK_INT(rename(fifo, cfg_path), 0);
	CHECK(stderr_capture_begin("stderr.txt"));
	alarm(30); /* a hang fails the test (SIGALRM) rather than waiting for meson's timeout */
	CHECK_INT(dli_step(ctx), 0);
	alarm(0);
	stderr_capture_end();
	CHECK_STR(label_of(fc1), "a");
	dli_destroy(ctx);
	CHECK(count_lines(MESSAGE_LOG, "a FIFO or a socket, not a file") >= 1);
	unlink(cfg_path);
}

/* The exact position of the refusal: Probe's unknown key `labl` on line 4 at column 50. */
static void test_refusal_position(void)
{
	struct dli_context *ctx = open_file(cfg_a, 1);
	CHECK(ctx != NULL);
	if (!ctx)
		return;
	write_config(cfg_bad);
	dli_step(ctx);
	dli_destroy(ctx);
	char want[700];
	const char *col = strstr(cfg_bad, "labl");
	const char *line4 = cfg_bad;
	for (int i = 0; i < 3; i++)
		line4 = strchr(line4, '\n') + 1;
	snprintf(want, sizeof want, "%s:4:%d: ", cfg_path, (int)(col - line4) + 1);
	CHECK_INT(count_lines(MESSAGE_LOG, want), 1);
}

static void test_unchanged_not_reloaded(void)
{
	struct dli_context *ctx = open_file(cfg_a, 1);
	CHECK(ctx != NULL);
	if (!ctx)
		return;
	write_config(cfg_a); /* new inode and mtime, same content */
	CHECK_INT(dli_step(ctx), 0);
	write_config(""); /* an editor truncating before it writes: not a config turning all off */
	CHECK_INT(dli_step(ctx), 0);
	struct dli_layer *fc1 = layer(ctx, "m.0.fc1");
	CHECK_STR(label_of(fc1), "a");
	write_config(cfg_a);
	CHECK_INT(dli_config_reload(ctx), 0);
	CHECK_INT(dli_step(ctx), 0);
	dli_destroy(ctx);
	CHECK_INT(count_lines(MESSAGE_LOG, "reloaded at"), 0);
	CHECK_INT(count_lines(MESSAGE_LOG, "is unchanged: not reloaded"), 1);
	CHECK_INT(count_lines(MESSAGE_LOG, "is empty: not reloaded"), 1);
}

static void test_every_n_steps(void)
{
	struct dli_context *ctx = open_file(cfg_a, 3);
	CHECK(ctx != NULL);
	if (!ctx)
		return;
	struct dli_layer *fc1 = layer(ctx, "m.0.fc1");
	write_config(cfg_b);
	dli_step(ctx);
	CHECK_STR(label_of(fc1), "a");
	dli_step(ctx);
	CHECK_STR(label_of(fc1), "a");
	dli_step(ctx);
	CHECK_STR(label_of(fc1), "b");
	dli_destroy(ctx);
}

/* No answer's `next` reaches past the first iteration at which a reload may put an edited config
 * in force: a host that skips its calls until dli_layer_plan's `next` (the README's pattern, and
 * TransformerEngine's layers through the Python package) sees the edit there. Without reloads,
 * a layer no section selects answers DLI_NEVER as before. */
static void test_next_stops_at_reload(void)
{
	struct dli_context *ctx = open_file(cfg_a, 3);
	CHECK(ctx != NULL);
	if (!ctx)
		return;
	struct dli_layer *fc2 = layer(ctx, "m.0.fc2"); /* cfg_a selects fc1 only */
	int w = dli_tensor_id(ctx, "weight");
	struct dli_layer_plan plan = {.size = sizeof plan};
	int64_t nx = 0;
	CHECK(!dli_inspect_tensor_enabled(fc2, w, &nx));
	CHECK_INT(nx, 3); /* checked at the step ending iteration 2, in force from 3 */
	CHECK(dli_fp8_gemm_enabled(fc2, DLI_GEMM_FPROP, &nx));
	CHECK_INT(nx, 3);
	CHECK(!dli_modify_tensor_enabled(fc2, DLI_GEMM_FPROP, w, &nx));
	CHECK_INT(nx, 3);
	CHECK(!dli_inspect_tensor_postquantize_enabled(fc2, DLI_GEMM_FPROP, w, &nx));
	CHECK_INT(nx, 3);
	CHECK_INT(dli_layer_plan(fc2, &plan), 0);
	CHECK_INT(plan.next, 3);
	/* fc1's Probe inspects its activation every iteration: its own next, 1, stays. */
	CHECK(dli_inspect_tensor_enabled(layer(ctx, "m.0.fc1"), dli_tensor_id(ctx, "activation"),
					 &nx));
	CHECK_INT(nx, 1);
	write_config(cfg_b); /* selects fc2 too: its weight, every 3rd iteration */
	int64_t asked[8], n_asked = 0, seen = -1;
	for (int64_t it = 0; it < 7; it++) {
		if (it >= plan.next) {
			CHECK_INT(dli_layer_plan(fc2, &plan), 0);
			if (n_asked < 8)
				asked[n_asked++] = it;
			if ((plan.inspect >> w & 1u) && seen < 0)
				seen = it;
		}
		dli_step(ctx);
	}
	CHECK_INT(seen, 3);
	/* Asked again at the reload (3: on, next 4), at 4 (off until 6, the schedule's next, and
	 * the next check's too) and at 6. */
	CHECK_INT(n_asked, 3);
	CHECK(n_asked == 3 && asked[0] == 3 && asked[1] == 4 && asked[2] == 6);
	/* dli_iteration_set keeps the count of steps since the last check (1 here: the step ending
	 * iteration 6): two more steps to the next check, in force from 12. */
	dli_iteration_set(ctx, 10);
	CHECK(!dli_inspect_tensor_enabled(layer(ctx, "m.0.proj"), w, &nx));
	CHECK_INT(nx, 12);
	dli_destroy(ctx);

	/* Without periodic checks: NEVER. */
	ctx = open_file(cfg_a, 0);
	CHECK(ctx != NULL);
	if (!ctx)
		return;
	fc2 = layer(ctx, "m.0.fc2");
	CHECK_INT(dli_layer_plan(fc2, &plan), 0);
	CHECK(plan.next == DLI_NEVER);
	/* A requested check is not foreseen (docs/config.md): the host asks again after the step. */
	write_config(cfg_b);
	CHECK_INT(dli_config_reload(ctx), 0);
	CHECK_INT(dli_layer_plan(fc2, &plan), 0);
	CHECK(plan.next == DLI_NEVER && !(plan.inspect >> w & 1u));
	dli_step(ctx);
	CHECK_INT(dli_layer_plan(fc2, &plan), 0);
	CHECK(!(plan.inspect >> w & 1u)); /* cfg_b: fc2's weight at 3, 6, ... */
	CHECK_INT(plan.next, 3);
	dli_destroy(ctx);
}

/* At the last iteration there is (DLI_NEVER), nothing follows: no `next` may go past it, nor wrap
 * to a negative one, whether a periodic check or a dli_config_reload request caps it. */
static void test_next_at_the_last_iteration(void)
{
	struct dli_context *ctx = open_file(cfg_a, 3);
	CHECK(ctx != NULL);
	if (!ctx)
		return;
	struct dli_layer *fc1 = layer(ctx, "m.0.fc1"), *fc2 = layer(ctx, "m.0.fc2");
	int w = dli_tensor_id(ctx, "weight");
	int64_t nx = 0;
	dli_iteration_set(ctx, DLI_NEVER - 1);
	CHECK(!dli_inspect_tensor_enabled(fc2, w, &nx));
	CHECK_INT(nx, DLI_NEVER);
	dli_iteration_set(ctx, DLI_NEVER);
	CHECK(!dli_inspect_tensor_enabled(fc2, w, &nx));
	CHECK_INT(nx, DLI_NEVER);
	CHECK_INT(dli_mode_set(ctx, DLI_MODE_EVAL), 0);
	CHECK(!dli_modify_tensor_enabled(fc1, DLI_GEMM_FPROP, w, &nx));
	CHECK_INT(nx, DLI_NEVER);
	CHECK_INT(dli_config_reload(ctx), 0);
	CHECK(!dli_modify_tensor_enabled(fc1, DLI_GEMM_FPROP, w, &nx));
	CHECK_INT(nx, DLI_NEVER);
	CHECK_INT(dli_mode_set(ctx, DLI_MODE_TRAIN), 0);
	CHECK(!dli_inspect_tensor_enabled(fc2, w, &nx));
	CHECK_INT(nx, DLI_NEVER);
	dli_destroy(ctx);
}

static struct dli_context *volatile sighup_ctx;

static void on_sighup(int sig)
{
	(void)sig;
	dli_config_reload(sighup_ctx);
}

static void test_reload_on_request_and_sighup(void)
{
	struct dli_context *ctx = open_file(cfg_a, 0);
	CHECK(ctx != NULL);
	if (!ctx)
		return;
	struct dli_layer *fc1 = layer(ctx, "m.0.fc1");
	write_config(cfg_b);
	dli_step(ctx);
	CHECK_STR(label_of(fc1), "a"); /* reload every 0 steps: off */
	sighup_ctx = ctx;
	struct sigaction sa = {.sa_handler = on_sighup}, old;
	sigemptyset(&sa.sa_mask);
	sigaction(SIGHUP, &sa, &old);
	raise(SIGHUP);
	CHECK_STR(label_of(fc1), "a"); /* asked: at the next step */
	dli_step(ctx);
	CHECK_STR(label_of(fc1), "b");
	sigaction(SIGHUP, &old, NULL);
	write_config(cfg_a);
	CHECK_INT(dli_config_reload(ctx), 0);
	dli_step(ctx);
	CHECK_STR(label_of(fc1), "a");
	dli_destroy(ctx);
	CHECK_INT(dli_config_reload(NULL), -EINVAL);
	/* YAML text: nothing to re-read. */
	ctx = open_yaml(cfg_a, NULL);
	CHECK_INT(dli_config_reload(ctx), -ENOENT);
	dli_destroy(ctx);
}

static void test_tensor_ids_keep(void)
{
	struct dli_context *ctx = open_file(
		"s:\n  enabled: true\n  layers: {layer_types: [fc1]}\n"
		"  Probe: {enabled: true, tensors: [foo], label: a}\n", 1);
	CHECK(ctx != NULL);
	if (!ctx)
		return;
	int foo = dli_tensor_id(ctx, "foo");
	CHECK_INT(foo, DLI_TENSOR_STANDARD_COUNT);
	struct dli_layer *fc1 = layer(ctx, "m.fc1");
	CHECK(dli_inspect_tensor_enabled(fc1, foo, NULL));
	write_config("s:\n  enabled: true\n  layers: {layer_types: [fc1]}\n"
		     "  Probe: {enabled: true, tensors: [bar, foo], label: b}\n");
	dli_step(ctx);
	CHECK_STR(label_of(fc1), "b");
	CHECK_INT(dli_tensor_id(ctx, "foo"), foo);
	CHECK_INT(dli_tensor_id(ctx, "bar"), foo + 1);
	CHECK(dli_inspect_tensor_enabled(fc1, foo, NULL));
	CHECK(dli_inspect_tensor_enabled(fc1, foo + 1, NULL));
	dli_destroy(ctx);
}

/* ---- Threads calling between steps while the main thread edits and steps ---- */

enum { N_THREADS = 4, N_ROUNDS = 12, N_LAYERS = 24 };

static pthread_barrier_t barrier;
static struct dli_context *tctx;

/* Round k's config: even k inspects activations and runs fprop in high precision, odd k weights
 * and dgrad; the layers of the type "fc<k % 3>" only. Real features: the probe fixture counts
 * without atomics, so it is no thread test's feature. */
static void round_config(int k, char *buf, size_t size)
{
	snprintf(buf, size,
		 "s:\n  enabled: true\n  layers: {layer_types: [fc%d]}\n  transformer_engine:\n"
		 "    LogTensorStats: {enabled: true, tensors: [%s], stats: [max]}\n"
		 "    DisableFP8GEMM: {enabled: true, gemms: [%s]}\n",
		 k % 3, k % 2 ? "weight" : "activation", k % 2 ? "dgrad" : "fprop");
}

struct worker {
	int id;
	int wrong;
};

static void *work(void *p)
{
	struct worker *w = p;
	struct dli_layer *mine[N_LAYERS] = {0};
	float x[4] = {1, 2, 3, 4};
	struct dli_tensor t = tensor(x, DLI_DTYPE_F32, 4);
	char name[64];
	for (int k = 0; k < N_ROUNDS; k++) {
		pthread_barrier_wait(&barrier); /* round k's config is in force */
		for (int i = 0; i < N_LAYERS; i++) {
			snprintf(name, sizeof name, "l.%d.fc%d", i, i % 3);
			struct dli_layer *l = NULL;
			if (dli_layer_get(tctx, name, &l, NULL) || (mine[i] && mine[i] != l))
				w->wrong++;
			mine[i] = l;
			bool selected = i % 3 == k % 3;
			bool act = dli_inspect_tensor_enabled(l, DLI_TENSOR_ACTIVATION, NULL);
			bool wt = dli_inspect_tensor_enabled(l, DLI_TENSOR_WEIGHT, NULL);
			if (act != (selected && k % 2 == 0) || wt != (selected && k % 2 == 1))
				w->wrong++;
			if (dli_inspect_tensor(l, k % 2 ? DLI_TENSOR_WEIGHT : DLI_TENSOR_ACTIVATION,
					       &t, NULL, NULL))
				w->wrong++;
			if (dli_fp8_gemm_enabled(l, DLI_GEMM_FPROP, NULL) == (selected && k % 2 == 0) ||
			    dli_fp8_gemm_enabled(l, DLI_GEMM_DGRAD, NULL) == (selected && k % 2 == 1) ||
			    !dli_fp8_gemm_enabled(l, DLI_GEMM_WGRAD, NULL))
				w->wrong++;
			/* A layer of this thread's own, created by name in this round. */
			snprintf(name, sizeof name, "t%d.r%d.%d.fc%d", w->id, k, i, i % 3);
			if (dli_inspect_tensor_enabled_by_name(tctx, name, "activation", NULL) !=
			    (selected && k % 2 == 0))
				w->wrong++;
		}
		pthread_barrier_wait(&barrier); /* done: the main thread edits and steps */
	}
	return NULL;
}

static void test_threads_between_steps(void)
{
	char text[512];
	round_config(0, text, sizeof text);
	tctx = open_file(text, 1);
	CHECK(tctx != NULL);
	if (!tctx)
		return;
	pthread_barrier_init(&barrier, NULL, N_THREADS + 1);
	pthread_t th[N_THREADS];
	struct worker w[N_THREADS];
	for (int i = 0; i < N_THREADS; i++) {
		w[i] = (struct worker){.id = i};
		pthread_create(&th[i], NULL, work, &w[i]);
	}
	for (int k = 0; k < N_ROUNDS; k++) {
		pthread_barrier_wait(&barrier);
		pthread_barrier_wait(&barrier);
		round_config(k + 1, text, sizeof text);
		write_config(text);
		CHECK_INT(dli_step(tctx), 0);
	}
	int wrong = 0;
	for (int i = 0; i < N_THREADS; i++) {
		pthread_join(th[i], NULL);
		wrong += w[i].wrong;
	}
	CHECK_INT(wrong, 0);
	pthread_barrier_destroy(&barrier);
	dli_destroy(tctx);
	CHECK_INT(count_lines(MESSAGE_LOG, "reloaded at"), N_ROUNDS);
}

/* DLINSPECT_CONFIG_RELOAD_STEPS is digits only, as DLINSPECT_LOG_LEVEL's numbers are: a blank or a
 * sign is refused with the variable's value, not read by strtol's rules. */
static void test_steps_from_the_environment(void)
{
	static const char *const bad[] = {" 5", "+5", "5 ", "-1", "0x10", "5s", "1000000001"};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		setenv("DLINSPECT_CONFIG_RELOAD_STEPS", bad[i], 1);
		struct dli_options o;
		dli_options_init(&o);
		o.config_yaml = "{}";
		o.log_dir = log_dir;
		struct dli_context *ctx = NULL;
		struct dli_error err = {0};
		CHECK_INT(dli_init(&o, &ctx, &err), -EINVAL);
		char want[128];
		snprintf(want, sizeof want,
			 "DLINSPECT_CONFIG_RELOAD_STEPS='%s': expected 0 (off) or a number of "
			 "steps", bad[i]);
		CHECK_CONTAINS(err.message, want);
		dli_destroy(ctx);
	}
	setenv("DLINSPECT_CONFIG_RELOAD_STEPS", "007", 1);
	struct dli_context *ctx = open_file("{}\n", -1);
	CHECK(ctx != NULL);
	int64_t nx = 0; /* checks every 7 steps: no answer's next past iteration 7 */
	CHECK(ctx && !dli_inspect_tensor_enabled(layer(ctx, "m.0.fc1"), DLI_TENSOR_WEIGHT, &nx));
	CHECK_INT(nx, 7);
	dli_destroy(ctx);
	unsetenv("DLINSPECT_CONFIG_RELOAD_STEPS");
}

int main(void)
{
	unsetenv("DLINSPECT_CONFIG_RELOAD_STEPS");
	test_valid_change_at_the_step_boundary();
	test_invalid_change_refused();
	test_refusal_position();
	test_unchanged_not_reloaded();
	test_every_n_steps();
	test_next_stops_at_reload();
	test_next_at_the_last_iteration();
	test_reload_on_request_and_sighup();
	test_fifo_refused();
	test_tensor_ids_keep();
	test_threads_between_steps();
	test_steps_from_the_environment();
	remove_log_dir();
	return check_exit();
}
