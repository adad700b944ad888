/* Dispatch: defaults, next-iteration answers, combination of features, modify routing, custom calls,
 * conflicts found when a layer is resolved, handles from several threads, and the file logger's
 * statistics reaching docs/logging.md's path. Uses the "probe" fixture module. */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <dlinspect/dlinspect.h>

#include "check.h"
#include "dli-test.h"
#include "schedule-private.h"

struct probe_stats {
	long enabled_queries, inspects, step_ends, modifies;
	double last_value;
	char label[64];
};

static void test_defaults_without_config(void)
{
	struct dli_options o;
	dli_options_init(&o);
	unsetenv("DLINSPECT_CONFIG");
	struct dli_context *ctx;
	struct dli_error err;
	CHECK_INT(dli_init(&o, &ctx, &err), 0);
	struct dli_layer *l = layer(ctx, "model.layers.0.mlp.fc1");
	CHECK(l != NULL);
	int64_t next = 0;
	for (int g = 0; g < DLI_GEMM_COUNT; g++) {
		next = 0;
		CHECK(dli_fp8_gemm_enabled(l, (enum dli_gemm)g, &next));
		CHECK(next == DLI_NEVER);
		for (int t = 0; t < DLI_TENSOR_STANDARD_COUNT; t++) {
			next = 0;
			CHECK(!dli_modify_tensor_enabled(l, (enum dli_gemm)g, t, &next));
			CHECK(next == DLI_NEVER);
			CHECK(!dli_inspect_tensor_postquantize_enabled(l, (enum dli_gemm)g, t, &next));
			CHECK_INT(dli_modify_tensor(l, (enum dli_gemm)g, t, NULL, NULL, NULL), -ENOENT);
		}
	}
	CHECK(!dli_inspect_tensor_enabled(l, DLI_TENSOR_ACTIVATION, &next));
	CHECK(next == DLI_NEVER);
	CHECK_INT(dli_inspect_tensor(l, DLI_TENSOR_ACTIVATION, NULL, NULL, NULL), 0);
	CHECK_INT(dli_call(l, "anything", NULL), -ENOSYS);
	/* The core's own log_tensor_stats finds nothing selecting the tensor, as nvdlfw_inspect
	 * returns {} without a config: not a call no module declares (a host that feeds it in every
	 * run must not fail when debugging is off). */
	float x[2] = {1, 2};
	struct dli_tensor t = dli_tensor_make(x, DLI_DTYPE_F32, 1, (int64_t[]){2});
	struct dli_log_tensor_stats_args a = {.size = sizeof a, .tensor_name = "activation",
					      .tensor = &t, .iteration = -1};
	CHECK_INT(dli_call(l, DLI_CALL_LOG_TENSOR_STATS, &a), 0);
	/* Out-of-range ids answer the defaults too. */
	CHECK(dli_fp8_gemm_enabled(l, (enum dli_gemm)7, NULL));
	CHECK(!dli_inspect_tensor_enabled(l, -1, NULL));
	CHECK(!dli_inspect_tensor_enabled(l, 99, NULL));
	CHECK(dli_fp8_gemm_enabled_by_name(ctx, "other", "fprop", &next));
	CHECK_INT(dli_iteration_get(ctx), 0);
	CHECK_INT(dli_step(ctx), 0);
	CHECK_INT(dli_iteration_get(ctx), 1);
	CHECK_STR(dli_layer_name(l), "model.layers.0.mlp.fc1");
	struct dli_layer *again = layer(ctx, "model.layers.0.mlp.fc1");
	CHECK(again == l);
	dli_destroy(ctx);

	dli_options_init(&o);
	o.initial_iteration = 40;
	CHECK_INT(dli_init(&o, &ctx, &err), 0);
	CHECK_INT(dli_iteration_get(ctx), 40);
	dli_iteration_set(ctx, 7);
	CHECK_INT(dli_iteration_get(ctx), 7);
	dli_destroy(ctx);
	dli_destroy(NULL);
}

/* Walks iterations 0..limit-1 asking inspect_tensor_enabled only when the previous answer's next
 * iteration says so (as a host does), and checks every answer against the schedule directly. */
static void check_schedule(const char *sched_yaml, const struct dli_schedule *expect, int limit)
{
	char yaml[1024];
	snprintf(yaml, sizeof yaml,
		 "s:\n  enabled: true\n  layers: {layer_name_regex_pattern: fc1}\n"
		 "  Probe: {enabled: true, tensors: [activation], %s}\n",
		 sched_yaml);
	struct dli_context *ctx = open_yaml(yaml, NULL);
	CHECK(ctx != NULL);
	if (!ctx)
		return;
	struct dli_layer *l = layer(ctx, "model.layers.1.fc1");
	int64_t ask_at = 0;
	int asked = 0, expected_asks = 0;
	long active_steps = 0;
	for (int it = 0; it < limit; it++) {
		bool active = dli_schedule_active(expect, it);
		bool was_active = it > 0 && dli_schedule_active(expect, it - 1);
		/* The answer may change right after a selected step, and at the next selected one. */
		int64_t want_next = active ? it + 1 : dli_schedule_next(expect, it);
		expected_asks += it == 0 || active || was_active;
		active_steps += active;
		/* Every answer, asked for by the host or not, must match the schedule. */
		int64_t next;
		bool on = dli_inspect_tensor_enabled(l, DLI_TENSOR_ACTIVATION, &next);
		CHECK_INT(on, active);
		CHECK_INT(next, want_next);
		if (it >= ask_at) {
			asked++;
			ask_at = next;
		}
		if (on) {
			float x = (float)it;
			struct dli_tensor t = {.data = &x, .dtype = DLI_DTYPE_F32, .ndim = 1, .shape = {1},
					       .contiguous = true};
			CHECK_INT(dli_inspect_tensor(l, DLI_TENSOR_ACTIVATION, &t, NULL, NULL), 0);
		}
		dli_step(ctx);
	}
	/* A host following the next-iteration values asks at 0, at each selected step and right
	 * after it, and nowhere else. */
	CHECK_INT(asked, expected_asks);
	struct probe_stats st;
	CHECK_INT(dli_call(l, "probe_stats", &st), 1);
	CHECK_INT(st.inspects, active_steps);
	CHECK_INT(st.step_ends, limit);
	/* The feature is asked only when the cached answer expires (once per host ask), plus once
	 * per inspect_tensor call to confirm it is on. */
	CHECK_INT(st.enabled_queries, expected_asks + active_steps);
	dli_destroy(ctx);
}

static void test_next_iteration(void)
{
	static const struct dli_int_pair ranges[] = {{3, 5}, {12, 13}};
	struct dli_schedule s;
	dli_schedule_default(&s);
	s.freq = 5;
	check_schedule("freq: 5", &s, 21);
	dli_schedule_default(&s);
	s.freq = 3;
	s.start_step = 4;
	s.end_step = 13;
	check_schedule("freq: 3, start_step: 4, end_step: 13", &s, 21);
	dli_schedule_default(&s);
	s.ranges = ranges;
	s.n_ranges = 2;
	check_schedule("start_end_list: [[3, 5], [12, 13]]", &s, 21);
	dli_schedule_default(&s);
	check_schedule("label: every", &s, 5);
}

static void test_several_features(void)
{
	struct dli_context *ctx = open_yaml(
		"a:\n  enabled: true\n  layers: {layer_types: [fc1]}\n"
		"  Probe: {enabled: true, tensors: activation, freq: 5, label: five}\n"
		"b:\n  enabled: true\n  layers: {layer_name_regex_pattern: 'layers\\.1\\.'}\n"
		"  ProbeB: {enabled: true, tensors: [activation], freq: 3, label: three}\n"
		"  probe_ns:\n    ProbeGemm: {enabled: true, gemms: [dgrad], start_end_list: [[2, 2]]}\n"
		"c:\n  enabled: true\n  layers: {layer_numbers: [1]}\n"
		"  transformer_engine:\n    DisableFP8GEMM: {enabled: true, gemms: [fprop]}\n",
		NULL);
	CHECK(ctx != NULL);
	if (!ctx)
		return;
	struct dli_layer *both = layer(ctx, "model.layers.1.fc1");
	struct dli_layer *only_a = layer(ctx, "model.layers.2.fc1");
	/* any / earliest next over Probe (freq 5) and ProbeB (freq 3) */
	static const struct {
		int it;
		bool on;
		int64_t next;
	} rows[] = {{0, true, 1}, {1, false, 3}, {3, true, 4}, {4, false, 5}, {5, true, 6},
		    {6, true, 7}, {7, false, 9}, {10, true, 11}, {11, false, 12}, {15, true, 16}};
	for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
		dli_iteration_set(ctx, rows[i].it);
		int64_t next;
		CHECK_INT(dli_inspect_tensor_enabled(both, DLI_TENSOR_ACTIVATION, &next), rows[i].on);
		CHECK_INT(next, rows[i].next);
		CHECK_INT(dli_inspect_tensor_enabled(only_a, DLI_TENSOR_ACTIVATION, &next),
			  rows[i].it % 5 == 0);
		CHECK_INT(next, rows[i].it % 5 == 0 ? rows[i].it + 1 : (rows[i].it / 5 + 1) * 5);
	}
	/* fp8: off when any feature turns it off; ProbeGemm only at step 2 on dgrad */
	dli_iteration_set(ctx, 0);
	int64_t next;
	CHECK(!dli_fp8_gemm_enabled(both, DLI_GEMM_FPROP, &next));
	CHECK(next == DLI_NEVER);
	CHECK(dli_fp8_gemm_enabled(both, DLI_GEMM_DGRAD, &next));
	CHECK_INT(next, 2);
	CHECK(dli_fp8_gemm_enabled(both, DLI_GEMM_WGRAD, &next));
	dli_iteration_set(ctx, 2);
	CHECK(!dli_fp8_gemm_enabled(both, DLI_GEMM_DGRAD, &next));
	CHECK_INT(next, 3);
	dli_step(ctx);
	CHECK(dli_fp8_gemm_enabled(both, DLI_GEMM_DGRAD, &next));
	CHECK(next == DLI_NEVER);
	CHECK(dli_fp8_gemm_enabled(only_a, DLI_GEMM_FPROP, &next));
	/* Both inspecting features get the tensor at a step where both are on. */
	dli_iteration_set(ctx, 15);
	float x = 2.5f;
	struct dli_tensor t = {.data = &x, .dtype = DLI_DTYPE_F32, .ndim = 1, .shape = {1}};
	CHECK_INT(dli_inspect_tensor(both, DLI_TENSOR_ACTIVATION, &t, NULL, NULL), 0);
	struct probe_stats st;
	CHECK_INT(dli_call(both, "probe_stats", &st), 1);
	/* dli_call stops at the first feature answering non-zero: Probe "five" comes first. */
	CHECK_STR(st.label, "five");
	CHECK_INT(st.inspects, 1);
	CHECK(st.last_value == 2.5);
	/* String-taking calls agree with handle calls. */
	CHECK(!dli_fp8_gemm_enabled_by_name(ctx, "model.layers.1.fc1", "fprop", &next));
	CHECK(dli_inspect_tensor_enabled_by_name(ctx, "model.layers.1.fc1", "activation", &next));
	CHECK(!dli_inspect_tensor_enabled_by_name(ctx, "model.layers.1.fc1", "weight", &next));
	CHECK(dli_fp8_gemm_enabled_by_name(ctx, "model.layers.1.fc1", "no-such-gemm", &next));
	CHECK(dli_fp8_gemm_enabled_by_name(ctx, "model.layers.3.proj", "fprop", &next));
	CHECK_INT(dli_call(both, "not_declared", NULL), -ENOSYS);
	CHECK_INT(dli_call(layer(ctx, "model.layers.9.qkv"), "probe_stats", &st), 0);
	dli_destroy(ctx);
}

static void test_modify(void)
{
	struct dli_context *ctx = open_yaml(
		"m:\n  enabled: true\n  layers: {layer_name_regex_pattern: fc2$}\n"
		"  ProbeModify:\n    enabled: true\n    gemms_struct:\n"
		"      - {gemm: fprop, tensors: [activation], scale: 2.0}\n"
		"      - {gemm: wgrad, tensors: [gradient], factor: -1}\n",
		NULL);
	CHECK(ctx != NULL);
	if (!ctx)
		return;
	struct dli_layer *l = layer(ctx, "model.layers.0.mlp.fc2");
	int64_t next;
	CHECK(dli_modify_tensor_enabled(l, DLI_GEMM_FPROP, DLI_TENSOR_ACTIVATION, &next));
	CHECK(next == DLI_NEVER);
	CHECK(!dli_modify_tensor_enabled(l, DLI_GEMM_DGRAD, DLI_TENSOR_ACTIVATION, &next));
	CHECK(!dli_modify_tensor_enabled(l, DLI_GEMM_FPROP, DLI_TENSOR_GRADIENT, &next));
	CHECK(dli_modify_tensor_enabled(l, DLI_GEMM_WGRAD, DLI_TENSOR_GRADIENT, &next));
	float in[3] = {1, -2, 3}, out[3] = {0};
	struct dli_tensor ti = {.data = in, .dtype = DLI_DTYPE_F32, .ndim = 1, .shape = {3}};
	struct dli_tensor to = {.data = out, .dtype = DLI_DTYPE_F32, .ndim = 1, .shape = {3}};
	CHECK_INT(dli_modify_tensor(l, DLI_GEMM_FPROP, DLI_TENSOR_ACTIVATION, &ti, NULL, &to), 0);
	CHECK(out[0] == 2 && out[1] == -4 && out[2] == 6);
	CHECK_INT(dli_modify_tensor(l, DLI_GEMM_WGRAD, DLI_TENSOR_GRADIENT, &ti, NULL, &to), 0);
	CHECK(out[0] == -1 && out[1] == 2 && out[2] == -3);
	CHECK_INT(dli_modify_tensor(l, DLI_GEMM_DGRAD, DLI_TENSOR_ACTIVATION, &ti, NULL, &to), -ENOENT);
	struct dli_layer *other = layer(ctx, "model.layers.0.mlp.fc20");
	CHECK(!dli_modify_tensor_enabled(other, DLI_GEMM_FPROP, DLI_TENSOR_ACTIVATION, &next));
	dli_destroy(ctx);
}

static void test_conflicts_across_sections(void)
{
	struct dli_error err;
	struct dli_context *ctx = open_yaml(
		"one:\n  enabled: true\n  layers: {layer_name_regex_pattern: fc1}\n"
		"  ProbeModify: {enabled: true, gemms: [fprop], tensors: [activation]}\n"
		"two:\n  enabled: true\n  layers: {layer_numbers: [3]}\n"
		"  ProbeModify2: {enabled: true, gemms: [fprop, dgrad], tensors: [activation]}\n"
		"three:\n  enabled: true\n  layers: {layer_numbers: [4]}\n"
		"  ProbeModify: {enabled: true, gemms: [fprop], tensors: [activation, weight]}\n",
		NULL);
	CHECK(ctx != NULL);
	if (!ctx)
		return;
	struct dli_layer *l = NULL;
	/* Selected by one section only: fine. */
	CHECK_INT(dli_layer_get(ctx, "model.layers.3.fc2", &l, &err), 0);
	CHECK_INT(dli_layer_get(ctx, "model.layers.0.fc1", &l, &err), 0);
	/* Two different modifying features on (fprop, activation) of layer 3's fc1. */
	CHECK_INT(dli_layer_get(ctx, "model.layers.3.fc1", &l, &err), -EINVAL);
	CHECK(l == NULL);
	CHECK_CONTAINS(err.message, "<string>:8:3:");
	CHECK_CONTAINS(err.message, "layer 'model.layers.3.fc1'");
	CHECK_CONTAINS(err.message, "ProbeModify2 (section 'two'");
	CHECK_CONTAINS(err.message, "ProbeModify (section 'one', at <string>:4:3)");
	CHECK_INT(err.line, 8);
	CHECK_INT(err.column, 3);
	/* The same feature twice for the same (gemm, tensor). */
	CHECK_INT(dli_layer_get(ctx, "model.layers.4.fc1", &l, &err), -EINVAL);
	CHECK_CONTAINS(err.message, "ProbeModify is configured twice for the same gemm/tensor");
	CHECK_CONTAINS(err.message, "section 'three' here and by section 'one' at <string>:4:3");
	/* A failed layer is not cached as half-built: asking again fails the same way. */
	CHECK_INT(dli_layer_get(ctx, "model.layers.4.fc1", &l, &err), -EINVAL);
	/* The string calls answer defaults for it and say why in the message log. */
	CHECK(!dli_modify_tensor_enabled_by_name(ctx, "model.layers.4.fc1", "fprop", "activation", NULL));
	dli_destroy(ctx);
}

struct thread_arg {
	struct dli_context *ctx;
	struct dli_layer *handles[200];
	int id;
	int wrong;
};

static void *thread_main(void *p)
{
	struct thread_arg *a = p;
	char name[64];
	for (int round = 0; round < 3; round++) {
		for (int i = 0; i < 200; i++) {
			/* Each thread walks the names in another order to race on creation. */
			int k = (i * 7 + a->id * 53) % 200;
			snprintf(name, sizeof name, "model.layers.%d.mlp.fc%d", k / 2, 1 + k % 2);
			struct dli_layer *l = NULL;
			struct dli_error err;
			if (dli_layer_get(a->ctx, name, &l, &err) || !l) {
				a->wrong++;
				continue;
			}
			if (a->handles[k] && a->handles[k] != l)
				a->wrong++;
			a->handles[k] = l;
			bool fc1 = k % 2 == 0;
			if (dli_fp8_gemm_enabled(l, DLI_GEMM_FPROP, NULL) == fc1)
				a->wrong++;
			if (dli_fp8_gemm_enabled_by_name(a->ctx, name, "fprop", NULL) == fc1)
				a->wrong++;
			if (!dli_fp8_gemm_enabled(l, DLI_GEMM_WGRAD, NULL))
				a->wrong++;
		}
	}
	return NULL;
}

static void test_threads(void)
{
	struct dli_context *ctx = open_yaml(
		"s:\n  enabled: true\n  layers: {layer_name_regex_pattern: 'fc1$'}\n"
		"  transformer_engine:\n    disable_fp8_gemm: {enabled: true, gemms: fprop}\n",
		NULL);
	CHECK(ctx != NULL);
	if (!ctx)
		return;
	struct thread_arg args[4];
	pthread_t th[4];
	for (int i = 0; i < 4; i++) {
		memset(&args[i], 0, sizeof args[i]);
		args[i].ctx = ctx;
		args[i].id = i;
		pthread_create(&th[i], NULL, thread_main, &args[i]);
	}
	for (int i = 0; i < 4; i++)
		pthread_join(th[i], NULL);
	for (int i = 0; i < 4; i++) {
		CHECK_INT(args[i].wrong, 0);
		for (int k = 0; k < 200; k++)
			CHECK(args[i].handles[k] == args[0].handles[k]);
	}
	dli_destroy(ctx);
}

/* Scalars a feature emits at dli_step land in the statistics log of docs/logging.md. */
static void test_statistics_reach_file_logger(void)
{
	struct dli_context *ctx = open_yaml(
		"s:\n  enabled: true\n  layers: {exact_layer_names: [decoder.1.fc1]}\n"
		"  Probe: {enabled: true, tensors: [weight], freq: 2, label: w}\n",
		NULL);
	CHECK(ctx != NULL);
	if (!ctx)
		return;
	struct dli_layer *l = layer(ctx, "decoder.1.fc1");
	float x = 1;
	struct dli_tensor t = {.data = &x, .dtype = DLI_DTYPE_F32, .ndim = 1, .shape = {1}};
	for (int it = 0; it < 5; it++) {
		if (dli_inspect_tensor_enabled(l, DLI_TENSOR_WEIGHT, NULL))
			dli_inspect_tensor(l, DLI_TENSOR_WEIGHT, &t, NULL, NULL);
		dli_step(ctx);
	}
	dli_destroy(ctx);
	FILE *f = open_log(STATS_LOG);
	CHECK(f != NULL);
	if (!f)
		return;
	char line[512];
	int n = 0;
	static const char *const want[] = {
		"decoder.1.fc1_w_inspects \t\t\t\t iteration=000000 \t\t\t\t value=1\n",
		"decoder.1.fc1_w_inspects \t\t\t\t iteration=000002 \t\t\t\t value=2\n",
		"decoder.1.fc1_w_inspects \t\t\t\t iteration=000004 \t\t\t\t value=3\n",
	};
	while (fgets(line, sizeof line, f)) {
		const char *body = strstr(line, " - INFO - ");
		CHECK(body != NULL);
		if (body && n < 3)
			CHECK_STR(body + strlen(" - INFO - "), want[n]);
		n++;
	}
	fclose(f);
	CHECK_INT(n, 3);
}

/* A feature's failing inspect_tensor is said when it happens (message log and stderr), with layer,
 * tensor, iteration and feature, not only through the return code the host may read at the end;
 * later failures are counted and summed up at dli_destroy. LogTensorStats refuses a NULL tensor. */
static void test_inspect_error_reported_at_once(void)
{
	struct dli_context *ctx = open_yaml(
		"s:\n  enabled: true\n  layers: {exact_layer_names: [decoder.2.fc2]}\n"
		"  transformer_engine:\n"
		"    LogTensorStats: {enabled: true, tensors: [gradient], stats: [max]}\n",
		NULL);
	CHECK(ctx != NULL);
	if (!ctx)
		return;
	struct dli_layer *l = layer(ctx, "decoder.2.fc2");
	char err_path[300];
	snprintf(err_path, sizeof err_path, "%s/stderr.txt", log_dir);
	fflush(stderr);
	int saved = dup(2);
	FILE *capture = fopen(err_path, "w");
	CHECK(capture && saved >= 0);
	if (!capture || saved < 0)
		return;
	dup2(fileno(capture), 2);
	dli_step(ctx);
	dli_step(ctx); /* iteration 2 */
	CHECK_INT(dli_inspect_tensor(l, DLI_TENSOR_GRADIENT, NULL, NULL, NULL), -EINVAL);
	const char *want = "inspect_tensor failed on layer 'decoder.2.fc2', tensor 'gradient', "
			   "iteration 2: feature LogTensorStats (section 's', <string>:";
	/* At once: before any step end or dli_destroy. */
	CHECK_INT(count_lines(MESSAGE_LOG, want), 1);
	CHECK_INT(dli_inspect_tensor(l, DLI_TENSOR_GRADIENT, NULL, NULL, NULL), -EINVAL);
	dli_step(ctx);
	CHECK_INT(dli_inspect_tensor(l, DLI_TENSOR_GRADIENT, NULL, NULL, NULL), -EINVAL);
	CHECK_INT(count_lines(MESSAGE_LOG, "inspect_tensor failed"), 1);
	dli_destroy(ctx);
	fflush(stderr);
	dup2(saved, 2);
	close(saved);
	fclose(capture);
	CHECK_INT(count_lines(MESSAGE_LOG, "3 inspect calls of features failed in this run"), 1);
	CHECK_INT(count_lines("stderr.txt", want), 1);
	CHECK_INT(count_lines("stderr.txt", "3 inspect calls of features failed"), 1);
}

int main(void)
{
	test_defaults_without_config();
	test_next_iteration();
	test_several_features();
	test_modify();
	test_conflicts_across_sections();
	test_threads();
	test_statistics_reach_file_logger();
	test_inspect_error_reported_at_once();
	remove_log_dir();
	return check_exit();
}
