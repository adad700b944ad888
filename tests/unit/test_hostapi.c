/* The host API as a trainer meets it (issue 11): evaluation passes, config the host's calls never
 * reach warned once, failing dli_modify_tensor calls said and kept for dli_last_error, a layer's plan
 * in one call, tensor constructors. */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <dlinspect/dlinspect.h>
#include <dlinspect/plugin.h>

#include "check.h"
#include "dli-test.h"

/* The statistics log without its timestamps: what two runs must agree on. */
static char *stats_text(void)
{
	static char text[1 << 16];
	char line[1024];
	size_t off = 0;
	text[0] = 0;
	FILE *f = open_log(STATS_LOG);
	while (f && fgets(line, sizeof line, f)) {
		const char *body = strstr(line, " - INFO - ");
		off += (size_t)snprintf(text + off, sizeof text - off, "%s", body ? body : line);
	}
	if (f)
		fclose(f);
	return strdup(text);
}

/* ---- Evaluation passes ---- */

static const char *const stats_yaml =
	"s:\n  enabled: true\n  layers: {layer_types: [fc1]}\n"
	"  transformer_engine:\n"
	"    LogTensorStats: {enabled: true, tensors: [activation], "
	"stats: [min, max, mean, std, l1_norm]}\n";

/* Three training iterations, each (when `with_eval`) followed by an evaluation pass over other
 * data in the same iteration, as a trainer's validation batches run. */
static char *run_with_eval(bool with_eval)
{
	struct dli_context *ctx = open_yaml(stats_yaml, NULL);
	CHECK(ctx != NULL);
	if (!ctx)
		return strdup("");
	struct dli_layer *l = layer(ctx, "model.layers.0.fc1");
	float train[4], eval[4];
	struct dli_tensor t = tensor(train, DLI_DTYPE_F32, 4), e = tensor(eval, DLI_DTYPE_F32, 4);
	for (int it = 0; it < 3; it++) {
		for (int i = 0; i < 4; i++) {
			train[i] = (float)(it + i);
			eval[i] = 100.0f * (float)(i + 1);
		}
		CHECK(dli_inspect_tensor_enabled(l, DLI_TENSOR_ACTIVATION, NULL));
		CHECK_INT(dli_inspect_tensor(l, DLI_TENSOR_ACTIVATION, &t, NULL, NULL), 0);
		if (with_eval) {
			CHECK_INT(dli_mode_set(ctx, DLI_MODE_EVAL), 0);
			CHECK_INT(dli_mode_get(ctx), DLI_MODE_EVAL);
			int64_t next = 0;
			CHECK(!dli_inspect_tensor_enabled(l, DLI_TENSOR_ACTIVATION, &next));
			CHECK(next == DLI_NEVER);
			struct dli_layer_plan plan = {.size = sizeof plan};
			CHECK_INT(dli_layer_plan(l, &plan), 0);
			CHECK(plan.inspect == 0 && !plan.any);
			/* A host that inspects anyway: nothing merges. */
			CHECK_INT(dli_inspect_tensor(l, DLI_TENSOR_ACTIVATION, &e, NULL, NULL), 0);
			CHECK_INT(dli_inspect_tensor_by_name(ctx, "model.layers.0.fc1", "activation", &e),
				  0);
			CHECK_INT(dli_mode_set(ctx, DLI_MODE_TRAIN), 0);
			CHECK(dli_inspect_tensor_enabled(l, DLI_TENSOR_ACTIVATION, NULL));
		}
		dli_step(ctx);
	}
	CHECK_INT(dli_mode_set(ctx, (enum dli_mode)7), -EINVAL);
	dli_destroy(ctx);
	return stats_text();
}

static void test_eval_pass_leaves_training_statistics_unchanged(void)
{
	char *plain = run_with_eval(false), *with_eval = run_with_eval(true);
	CHECK(strstr(plain, "model.layers.0.fc1_activation_l1_norm") != NULL);
	CHECK_STR(with_eval, plain);
	free(plain);
	free(with_eval);
}

/* The base namespace's LogTensorStats logs at the call: in an evaluation pass it logs nothing. */
static void test_generic_call_silent_in_eval(void)
{
	struct dli_context *ctx = open_yaml(
		"s:\n  enabled: true\n  layers: {layer_types: [fc1]}\n"
		"  LogTensorStats: {enabled: true, tensors: [probs], stats: [max]}\n",
		NULL);
	CHECK(ctx != NULL);
	if (!ctx)
		return;
	struct dli_layer *l = layer(ctx, "model.layers.0.fc1");
	float x[2] = {1, 2}, e[2] = {50, 60};
	struct dli_tensor t = dli_tensor_make(x, DLI_DTYPE_F32, 1, (int64_t[]){2});
	struct dli_tensor te = dli_tensor_make(e, DLI_DTYPE_F32, 1, (int64_t[]){2});
	struct dli_log_tensor_stats_args a = {.size = sizeof a, .tensor_name = "probs", .tensor = &t,
					      .iteration = -1};
	CHECK_INT(dli_call(l, DLI_CALL_LOG_TENSOR_STATS, &a), 0);
	CHECK_INT(dli_mode_set(ctx, DLI_MODE_EVAL), 0);
	a.tensor = &te;
	CHECK_INT(dli_call(l, DLI_CALL_LOG_TENSOR_STATS, &a), 0);
	CHECK_INT(dli_call(l, "no_such_call", NULL), -ENOSYS);
	CHECK_INT(dli_mode_set(ctx, DLI_MODE_TRAIN), 0);
	dli_step(ctx);
	dli_destroy(ctx);
	CHECK_INT(count_lines(STATS_LOG, "model.layers.0.fc1_probs_max"), 1);
	CHECK_INT(count_lines(STATS_LOG, "value=60"), 0);
}

/* FakeQuant acts in training, not in evaluation unless its block says `in_eval: true`. */
static void check_fake_quant_in_eval(bool in_eval)
{
	char yaml[512];
	snprintf(yaml, sizeof yaml,
		 "s:\n  enabled: true\n  layers: {layer_types: [fc1]}\n"
		 "  transformer_engine:\n"
		 "    FakeQuant: {enabled: true, gemms: [fprop], tensors: [activation], "
		 "quant_format: FP8E4M3%s}\n",
		 in_eval ? ", in_eval: true" : "");
	struct dli_context *ctx = open_yaml(yaml, NULL);
	CHECK(ctx != NULL);
	if (!ctx)
		return;
	struct dli_layer *l = layer(ctx, "model.layers.0.fc1");
	float x[2] = {0.3f, 1000.0f}, y[2] = {-1, -1};
	struct dli_tensor in = tensor(x, DLI_DTYPE_F32, 2), out = tensor(y, DLI_DTYPE_F32, 2);
	CHECK(dli_modify_tensor_enabled(l, DLI_GEMM_FPROP, DLI_TENSOR_ACTIVATION, NULL));
	bool fp8_train = dli_fp8_gemm_enabled(l, DLI_GEMM_FPROP, NULL);
	CHECK_INT(dli_mode_set(ctx, DLI_MODE_EVAL), 0);
	CHECK_INT(dli_modify_tensor_enabled(l, DLI_GEMM_FPROP, DLI_TENSOR_ACTIVATION, NULL), in_eval);
	struct dli_layer_plan plan = {.size = sizeof plan};
	CHECK_INT(dli_layer_plan(l, &plan), 0);
	CHECK_INT(plan.modify[DLI_GEMM_FPROP] == 1ull << DLI_TENSOR_ACTIVATION, in_eval);
	/* FP8 answers do not depend on the pass (FakeQuant runs its GEMM in high precision). */
	CHECK_INT(plan.fp8[DLI_GEMM_FPROP], fp8_train);
	CHECK(!fp8_train && plan.fp8[DLI_GEMM_DGRAD] && plan.fp8[DLI_GEMM_WGRAD]);
	if (!in_eval)
		CHECK(stderr_capture_begin("stderr.txt"));
	CHECK_INT(dli_modify_tensor(l, DLI_GEMM_FPROP, DLI_TENSOR_ACTIVATION, &in, NULL, &out),
		  in_eval ? 0 : -ENOENT);
	if (!in_eval) {
		stderr_capture_end();
		CHECK(y[0] == -1 && y[1] == -1); /* untouched */
		CHECK_CONTAINS(dli_last_error(ctx), "in an evaluation pass");
	} else {
		CHECK(y[0] != -1 && y[0] != x[0]); /* 0.3 is no E4M3 value at that scale */
	}
	CHECK_INT(dli_mode_set(ctx, DLI_MODE_TRAIN), 0);
	CHECK_INT(dli_modify_tensor(l, DLI_GEMM_FPROP, DLI_TENSOR_ACTIVATION, &in, NULL, &out), 0);
	CHECK(y[0] != -1);
	dli_destroy(ctx);
}

static void test_fake_quant_off_in_eval_by_default(void)
{
	check_fake_quant_in_eval(false);
	check_fake_quant_in_eval(true);
	/* in_eval is for modifying features only. */
	struct dli_error err;
	struct dli_context *ctx = open_yaml(
		"s:\n  enabled: true\n  layers: {layer_types: [fc1]}\n"
		"  transformer_engine:\n"
		"    LogTensorStats: {enabled: true, tensors: [activation], in_eval: true}\n",
		&err);
	CHECK(ctx == NULL);
	CHECK_CONTAINS(err.message, "unknown key 'in_eval' for LogTensorStats");
	dli_destroy(ctx);
}

/* ---- Config the host's calls never reach: warned once, with names ---- */

static const char *const noop_yaml =
	"wrong:\n  enabled: true\n  layers: {layer_name_regex_pattern: 'decoder\\.layers'}\n"
	"  transformer_engine:\n"
	"    LogTensorStats: {enabled: true, tensors: [activation], stats: [max]}\n"
	"fq:\n  enabled: true\n  layers: {layer_name_regex_pattern: 'model\\.layers'}\n"
	"  transformer_engine:\n"
	"    FakeQuant: {enabled: true, gemms: [wgrad], tensors: [activation], "
	"quant_format: FP8E4M3}\n"
	"    LogTensorStats: {enabled: true, tensors: [activation], stats: [max]}\n";

/* The host asks only fprop questions about the activation of model.layers.{0,1}.fc1, for `steps`
 * steps; with 0, it asks once and does not step. */
static void host_fprop_only(struct dli_context *ctx, int steps)
{
	float x[2] = {1, 2};
	struct dli_tensor t = tensor(x, DLI_DTYPE_F32, 2);
	for (int s = 0; s < (steps ? steps : 1); s++) {
		for (int i = 0; i < 2; i++) {
			char name[64];
			snprintf(name, sizeof name, "model.layers.%d.fc1", i);
			struct dli_layer *l = layer(ctx, name);
			dli_fp8_gemm_enabled(l, DLI_GEMM_FPROP, NULL);
			dli_modify_tensor_enabled(l, DLI_GEMM_FPROP, DLI_TENSOR_ACTIVATION, NULL);
			if (dli_inspect_tensor_enabled(l, DLI_TENSOR_ACTIVATION, NULL))
				dli_inspect_tensor(l, DLI_TENSOR_ACTIVATION, &t, NULL, NULL);
		}
		if (steps)
			dli_step(ctx);
	}
}

/* The same host following plans: it acts on fprop only, though the plan says more. */
static void host_plans_fprop_only(struct dli_context *ctx, int steps)
{
	float x[2] = {1, 2}, y[2];
	struct dli_tensor t = tensor(x, DLI_DTYPE_F32, 2), out = tensor(y, DLI_DTYPE_F32, 2);
	for (int s = 0; s < steps; s++) {
		for (int i = 0; i < 2; i++) {
			char name[64];
			snprintf(name, sizeof name, "model.layers.%d.fc1", i);
			struct dli_layer *l = layer(ctx, name);
			struct dli_layer_plan plan = {.size = sizeof plan};
			CHECK_INT(dli_layer_plan(l, &plan), 0);
			CHECK(plan.modify[DLI_GEMM_WGRAD] >> DLI_TENSOR_ACTIVATION & 1u);
			if (plan.modify[DLI_GEMM_FPROP] >> DLI_TENSOR_ACTIVATION & 1u)
				dli_modify_tensor(l, DLI_GEMM_FPROP, DLI_TENSOR_ACTIVATION, &t, NULL,
						  &out);
			if (plan.inspect >> DLI_TENSOR_ACTIVATION & 1u)
				dli_inspect_tensor(l, DLI_TENSOR_ACTIVATION, &t, NULL, NULL);
		}
		dli_step(ctx);
	}
}

static void check_noop_warnings(const char *when, const char *gemms_asked)
{
	char asked[512];
	const char *section = "section 'wrong' (<string>:1:1) selected none of the 2 layers the host "
			      "asked for (e.g. 'model.layers.0.fc1')";
	const char *feature = "FakeQuant in section 'fq' (<string>:";
	snprintf(asked, sizeof asked,
		 "configured for gemms [wgrad] tensors [activation], never acted: on the layers it "
		 "selects the host asked only about gemms %s and tensors [activation]",
		 gemms_asked);
	CHECK_INT(count_lines(MESSAGE_LOG, section), 1);
	CHECK_INT(count_lines(MESSAGE_LOG, feature), 1);
	CHECK_INT(count_lines(MESSAGE_LOG, asked), 1);
	CHECK_INT(count_lines("stderr.txt", section), 1);
	CHECK_INT(count_lines("stderr.txt", asked), 1);
	/* What the host did reach is not warned about. */
	CHECK_INT(count_lines(MESSAGE_LOG, "LogTensorStats in section 'fq'"), 0);
	CHECK_INT(count_lines(MESSAGE_LOG, "selected none"), 1);
	if (count_lines(MESSAGE_LOG, section) != 1)
		fprintf(stderr, "(when: %s)\n", when);
}

static void test_silent_noops_warn_once(void)
{
	/* At the end of the first step, once, though the run goes on for three. */
	struct dli_context *ctx = open_yaml(noop_yaml, NULL);
	CHECK(ctx != NULL);
	if (!ctx)
		return;
	CHECK(stderr_capture_begin("stderr.txt"));
	host_fprop_only(ctx, 3);
	dli_destroy(ctx);
	stderr_capture_end();
	check_noop_warnings("after the first step", "[fprop]");

	/* At dli_destroy when no step ran. */
	ctx = open_yaml(noop_yaml, NULL);
	CHECK(ctx != NULL);
	if (!ctx)
		return;
	CHECK(stderr_capture_begin("stderr.txt"));
	host_fprop_only(ctx, 0);
	CHECK_INT(count_lines(MESSAGE_LOG, "selected none"), 0);
	dli_destroy(ctx);
	stderr_capture_end();
	check_noop_warnings("at dli_destroy", "[fprop]");

	/* A host that plans: the same warnings, from what it acted on. */
	ctx = open_yaml(noop_yaml, NULL);
	CHECK(ctx != NULL);
	if (!ctx)
		return;
	CHECK(stderr_capture_begin("stderr.txt"));
	host_plans_fprop_only(ctx, 2);
	dli_destroy(ctx);
	stderr_capture_end();
	/* It acted on no GEMM (nothing of fprop was on), only inspected the activation. */
	check_noop_warnings("with plans", "(none)");

	/* Errors only (DLINSPECT_LOG_LEVEL=error): not on the terminal either. */
	setenv("DLINSPECT_LOG_LEVEL", "error", 1);
	ctx = open_yaml(noop_yaml, NULL);
	unsetenv("DLINSPECT_LOG_LEVEL");
	CHECK(ctx != NULL);
	if (!ctx)
		return;
	CHECK(stderr_capture_begin("stderr.txt"));
	host_fprop_only(ctx, 3);
	dli_destroy(ctx);
	stderr_capture_end();
	CHECK_INT(count_lines("stderr.txt", "selected none"), 0);
	CHECK_INT(count_lines("stderr.txt", "never acted"), 0);

	/* A host that asks what the config names hears nothing. */
	ctx = open_yaml(
		"fq:\n  enabled: true\n  layers: {layer_name_regex_pattern: 'model\\.layers'}\n"
		"  transformer_engine:\n"
		"    FakeQuant: {enabled: true, gemms: [fprop], tensors: [activation], "
		"quant_format: FP8E4M3}\n",
		NULL);
	CHECK(ctx != NULL);
	if (!ctx)
		return;
	CHECK(stderr_capture_begin("stderr.txt"));
	host_fprop_only(ctx, 2);
	dli_destroy(ctx);
	stderr_capture_end();
	CHECK_INT(count_lines(MESSAGE_LOG, "never acted"), 0);
	CHECK_INT(count_lines(MESSAGE_LOG, "selected none"), 0);
	CHECK_INT(count_lines("stderr.txt", "warning"), 0);
}

/* ---- Host mistakes said, not only returned: no dli_step, a step in eval, a bad plan ---- */

static const char *const fc_stats_yaml =
	"s:\n  enabled: true\n  layers: {layer_name_regex_pattern: fc}\n"
	"  transformer_engine:\n"
	"    LogTensorStats: {enabled: true, tensors: [activation], stats: [max]}\n";

/* A context of fc_stats_yaml with stderr captured into stderr.txt until close_captured. */
static struct dli_context *open_captured(void)
{
	struct dli_context *ctx = open_yaml(fc_stats_yaml, NULL);
	CHECK(ctx != NULL);
	if (ctx)
		CHECK(stderr_capture_begin("stderr.txt"));
	return ctx;
}

static void close_captured(struct dli_context *ctx)
{
	dli_destroy(ctx);
	stderr_capture_end();
}

/* `text` once in the message log and once on the captured stderr. */
static void check_said_once(const char *text)
{
	CHECK_INT(count_lines(MESSAGE_LOG, text), 1);
	CHECK_INT(count_lines("stderr.txt", text), 1);
}

/* A host that never calls dli_step: told at dli_destroy that nothing was logged. */

static void test_no_step_is_said(void)
{
	const char *said = "no dli_step ran in this context: features took tensors (the last at "
			   "iteration 3) but statistics are logged only when dli_step ends an "
			   "iteration; call dli_step(ctx) after each iteration's last backward";
	float x[4] = {1, 2, 3, 4};
	struct dli_tensor t = tensor(x, DLI_DTYPE_F32, 4);
	struct dli_layer *l;
	struct dli_context *ctx = open_captured();
	if (!ctx)
		return;
	dli_iteration_set(ctx, 3);
	l = layer(ctx, "fc");
	CHECK_INT(dli_inspect_tensor(l, DLI_TENSOR_ACTIVATION, &t, NULL, NULL), 0);
	CHECK_INT(dli_inspect_tensor(l, DLI_TENSOR_ACTIVATION, &t, NULL, NULL), 0);
	close_captured(ctx);
	check_said_once(said);

	/* A host that stepped, and destroys in the middle of its next iteration: nothing said. */
	ctx = open_captured();
	if (!ctx)
		return;
	l = layer(ctx, "fc");
	CHECK_INT(dli_inspect_tensor(l, DLI_TENSOR_ACTIVATION, &t, NULL, NULL), 0);
	CHECK_INT(dli_step(ctx), 0);
	CHECK_INT(dli_inspect_tensor(l, DLI_TENSOR_ACTIVATION, &t, NULL, NULL), 0);
	close_captured(ctx);
	CHECK_INT(count_lines(MESSAGE_LOG, "no dli_step ran"), 0);
	CHECK_INT(count_lines("stderr.txt", "no dli_step ran"), 0);

	/* Nothing taken (no feature selects the layer, or an evaluation pass): nothing said. */
	ctx = open_captured();
	if (!ctx)
		return;
	CHECK_INT(dli_inspect_tensor(layer(ctx, "other"), DLI_TENSOR_ACTIVATION, &t, NULL, NULL), 0);
	CHECK_INT(dli_mode_set(ctx, DLI_MODE_EVAL), 0);
	CHECK_INT(dli_inspect_tensor(layer(ctx, "fc"), DLI_TENSOR_ACTIVATION, &t, NULL, NULL), 0);
	close_captured(ctx);
	CHECK_INT(count_lines(MESSAGE_LOG, "no dli_step ran"), 0);
}

/* An evaluation pass left on at dli_step: said once. */
static void test_step_in_eval_is_said(void)
{
	const char *said = "dli_step ended iteration 1 in DLI_MODE_EVAL: until dli_mode_set(ctx, "
			   "DLI_MODE_TRAIN) nothing is inspected and only features with in_eval "
			   "modify; switch back after each evaluation pass (said once)";
	struct dli_context *ctx = open_captured();
	if (!ctx)
		return;
	CHECK_INT(dli_step(ctx), 0);
	CHECK_INT(dli_mode_set(ctx, DLI_MODE_EVAL), 0);
	CHECK_INT(dli_step(ctx), 0);
	CHECK_INT(dli_step(ctx), 0);
	close_captured(ctx);
	check_said_once(said);

	/* Switched back before the step, as an evaluation pass inside an iteration does. */
	ctx = open_captured();
	if (!ctx)
		return;
	CHECK_INT(dli_mode_set(ctx, DLI_MODE_EVAL), 0);
	CHECK_INT(dli_mode_set(ctx, DLI_MODE_TRAIN), 0);
	CHECK_INT(dli_step(ctx), 0);
	close_captured(ctx);
	CHECK_INT(count_lines(MESSAGE_LOG, "DLI_MODE_EVAL"), 0);
	CHECK_INT(count_lines("stderr.txt", "DLI_MODE_EVAL"), 0);
}

/* A plan without its size, a mode that is none: said, not only -EINVAL. */
static void test_refused_plan_and_mode_are_said(void)
{
	const char *plan_said = "dli_layer_plan refused the plan of layer 'fc': its size is 0, "
				"expected sizeof(struct dli_layer_plan) (";
	const char *mode_said = "dli_mode_set: mode 7 is neither DLI_MODE_TRAIN (0) nor "
				"DLI_MODE_EVAL (1); the mode stays DLI_MODE_TRAIN";
	struct dli_context *ctx = open_captured();
	if (!ctx)
		return;
	struct dli_layer *l = layer(ctx, "fc");
	struct dli_layer_plan plan = {0};
	CHECK_INT(dli_layer_plan(l, &plan), -EINVAL);
	CHECK(strstr(dli_last_error(ctx), plan_said) == dli_last_error(ctx));
	CHECK_INT(dli_layer_plan(l, &plan), -EINVAL);
	CHECK_INT(dli_mode_set(ctx, (enum dli_mode)7), -EINVAL);
	CHECK(strcmp(dli_last_error(ctx), mode_said) == 0);
	CHECK_INT(dli_mode_get(ctx), DLI_MODE_TRAIN);
	plan.size = sizeof plan;
	CHECK_INT(dli_layer_plan(l, &plan), 0);
	CHECK(plan.inspect >> DLI_TENSOR_ACTIVATION & 1u);
	close_captured(ctx);
	CHECK_INT(count_lines(MESSAGE_LOG, plan_said), 2);
	CHECK_INT(count_lines(MESSAGE_LOG, mode_said), 1);
	/* The terminal gets the first refusal of the run only. */
	CHECK_INT(count_lines("stderr.txt", plan_said), 1);
	CHECK_INT(count_lines("stderr.txt", mode_said), 0);
}

/* ---- Failing dli_modify_tensor: every call in the message log, the first on stderr ---- */

static void *other_thread_error(void *ctx)
{
	return (void *)dli_last_error(ctx);
}

static void test_modify_failures_are_said(void)
{
	struct dli_context *ctx = open_yaml(
		"fq:\n  enabled: true\n  layers: {layer_types: [fc2]}\n"
		"  transformer_engine:\n"
		"    FakeQuant: {enabled: true, gemms: [fprop], tensors: [weight], "
		"quant_format: FP8E4M3}\n",
		NULL);
	CHECK(ctx != NULL);
	if (!ctx)
		return;
	struct dli_layer *l = layer(ctx, "model.layers.3.fc2");
	CHECK_STR(dli_last_error(ctx), "");
	uint16_t bad[2] = {0, 0};
	float x[2] = {1, 2};
	struct dli_tensor in = tensor(x, DLI_DTYPE_F32, 2), out = tensor(bad, DLI_DTYPE_F8E4M3, 2);
	CHECK(stderr_capture_begin("stderr.txt"));
	dli_step(ctx);
	dli_step(ctx); /* iteration 2 */
	for (int i = 0; i < 3; i++)
		CHECK_INT(dli_modify_tensor(l, DLI_GEMM_FPROP, DLI_TENSOR_WEIGHT, &in, NULL, &out),
			  -EINVAL);
	const char *want = "dli_modify_tensor failed on layer 'model.layers.3.fc2', gemm fprop, "
			   "tensor 'weight', iteration 2: feature FakeQuant (section 'fq', <string>:";
	CHECK_CONTAINS(dli_last_error(ctx), want);
	CHECK_CONTAINS(dli_last_error(ctx), "in: f32[2] cpu:0, out: f8e4m3[2] cpu:0");
	/* The feature's own reason (host fail_reason). */
	CHECK_CONTAINS(dli_last_error(ctx), "refused: Invalid argument (-22): FakeQuant writes the "
					    "dequantized values: out must be f32, f16 or bf16; in: ");
	/* Thread-local: another thread's last error is its own. */
	pthread_t th;
	void *other = NULL;
	pthread_create(&th, NULL, other_thread_error, ctx);
	pthread_join(th, &other);
	CHECK_STR((const char *)other, "");
	/* Nothing modifies dgrad: said too, with why. */
	CHECK_INT(dli_modify_tensor(l, DLI_GEMM_DGRAD, DLI_TENSOR_WEIGHT, &in, NULL, &out), -ENOENT);
	CHECK_CONTAINS(dli_last_error(ctx), "gemm dgrad, tensor 'weight', iteration 2: no feature "
					    "modifies it at this iteration");
	/* Ids and descriptors out of range are said as such, not printed as valid ones. */
	CHECK_INT(dli_modify_tensor(l, (enum dli_gemm)9, 1000, &in, NULL, &out), -ENOENT);
	CHECK_CONTAINS(dli_last_error(ctx), "gemm id 9 (not a GEMM), tensor id 1000 (not a tensor of "
					    "this context)");
	struct dli_tensor odd = out;
	odd.dtype = (enum dli_dtype)999;
	odd.device.type = (enum dli_device_type)3;
	struct dli_tensor deep = in;
	deep.ndim = 12;
	CHECK_INT(dli_modify_tensor(l, DLI_GEMM_FPROP, DLI_TENSOR_WEIGHT, &deep, NULL, &odd),
		  -EINVAL);
	CHECK_CONTAINS(dli_last_error(ctx), "in: f32 with ndim 12 cpu:0, out: dtype(999)[2] device "
					    "type 3");
	CHECK_INT(count_lines(MESSAGE_LOG, "dli_modify_tensor failed"), 6);
	dli_destroy(ctx);
	stderr_capture_end();
	CHECK_INT(count_lines("stderr.txt", "dli_modify_tensor failed"), 1);
	CHECK_INT(count_lines("stderr.txt", want), 1);
	CHECK_INT(count_lines(MESSAGE_LOG, "6 dli_modify_tensor calls failed in this run"), 1);
}

/* ---- A layer's plan ---- */

static const char *const plan_yaml =
	"a:\n  enabled: true\n  layers: {layer_types: [fc1]}\n"
	"  Probe: {enabled: true, tensors: [activation], freq: 7, start_step: 20, end_step: 800}\n"
	"  ProbeB: {enabled: true, tensors: [activation, weight], freq: 4, "
	"start_end_list: [[100, 150], [400, 420]]}\n"
	"  probe_ns:\n    ProbeGemm: {enabled: true, gemms: [dgrad], freq: 9, start_step: 3}\n"
	"  ProbeModify: {enabled: true, gemms: [wgrad], tensors: [gradient]}\n"
	"  transformer_engine:\n"
	"    LogTensorStats: {enabled: true, tensors: [gradient], stats: [max], freq: 5, "
	"end_step: 600}\n"
	"    FakeQuant: {enabled: true, gemms: [fprop], tensors: [weight], quant_format: FP8E4M3}\n";

/* One context answers through plans, taken only when the last plan's `next` says so (as a host
 * does); a second one answers every individual call at every iteration: they must agree. */
static void test_plan_agrees_with_individual_calls(void)
{
	struct dli_context *planned = open_yaml(plan_yaml, NULL);
	char planned_dir[sizeof log_dir];
	memcpy(planned_dir, log_dir, sizeof log_dir);
	log_dir[0] = 0; /* keep it: open_yaml removes the previous dir */
	struct dli_context *single = open_yaml(plan_yaml, NULL);
	CHECK(planned && single);
	if (!planned || !single)
		return;
	struct dli_layer *lp = layer(planned, "model.layers.1.fc1");
	struct dli_layer *ls = layer(single, "model.layers.1.fc1");
	struct dli_layer_plan plan = {.size = sizeof plan};
	int plans = 0, changes = 0;
	uint64_t last_inspect = 0;
	for (int it = 0; it < 1000; it++) {
		if (it == 0 || it >= plan.next) {
			CHECK_INT(dli_layer_plan(lp, &plan), 0);
			CHECK_INT(plan.iteration, it);
			CHECK(plan.next > it);
			plans++;
		}
		bool any = false;
		for (int g = 0; g < DLI_GEMM_COUNT; g++) {
			CHECK_INT(dli_fp8_gemm_enabled(ls, (enum dli_gemm)g, NULL), plan.fp8[g]);
			for (int t = 0; t < DLI_TENSOR_STANDARD_COUNT; t++) {
				bool m = dli_modify_tensor_enabled(ls, (enum dli_gemm)g, t, NULL);
				bool p = dli_inspect_tensor_postquantize_enabled(ls, (enum dli_gemm)g, t,
										 NULL);
				CHECK_INT(m, (int)(plan.modify[g] >> t & 1u));
				CHECK_INT(p, (int)(plan.postquantize[g] >> t & 1u));
				any = any || m || p;
			}
		}
		uint64_t inspect = 0;
		for (int t = 0; t < DLI_TENSOR_STANDARD_COUNT; t++)
			if (dli_inspect_tensor_enabled(ls, t, NULL))
				inspect |= 1ull << t;
		CHECK(inspect == plan.inspect);
		CHECK_INT(plan.any, any || inspect);
		changes += inspect != last_inspect;
		last_inspect = inspect;
		dli_step(planned);
		dli_step(single);
	}
	/* The schedules do change the answers, and the plan is not taken at every iteration. */
	CHECK(changes > 50);
	CHECK(plans < 1000);
	dli_destroy(planned);
	dli_destroy(single);
	remove_log_dir();
	memcpy(log_dir, planned_dir, sizeof log_dir);
	remove_log_dir();

	/* A layer no section selects: the defaults, never changing. */
	struct dli_options o;
	dli_options_init(&o);
	struct dli_context *ctx;
	struct dli_error err;
	CHECK_INT(dli_init(&o, &ctx, &err), 0);
	struct dli_layer *l = layer(ctx, "x.fc1");
	struct dli_layer_plan p = {.size = sizeof p};
	CHECK_INT(dli_layer_plan(l, &p), 0);
	CHECK(p.fp8[0] && p.fp8[1] && p.fp8[2] && !p.any && p.inspect == 0);
	CHECK(p.next == DLI_NEVER);
	struct dli_layer_plan small = {.size = 4};
	CHECK_INT(dli_layer_plan(l, &small), -EINVAL);
	CHECK_INT(dli_layer_plan(l, NULL), -EINVAL);
	dli_destroy(ctx);
}

/* ---- Tensor descriptors ---- */

/* The constructors give readable tensors; a refused one is named by layer and tensor. */
static void test_tensor_constructors(void)
{
	float x[6] = {1, 2, 3, 4, 5, 6};
	int64_t shape[3] = {1, 2, 3};
	struct dli_tensor a = dli_tensor_make(x, DLI_DTYPE_F32, 3, shape);
	CHECK(a.contiguous && a.data == x && a.dtype == DLI_DTYPE_F32 && a.ndim == 3);
	CHECK(a.device.type == DLI_DEVICE_CPU && a.device.stream == NULL);
	CHECK_INT(dli_tensor_numel(&a), 6);
	struct dli_tensor b = dli_tensor_2d(x, DLI_DTYPE_F32, 3, 2);
	CHECK(b.contiguous && b.ndim == 2 && b.shape[0] == 3 && b.shape[1] == 2);
	struct dli_tensor s = dli_tensor_make(x, DLI_DTYPE_F32, 0, NULL);
	CHECK_INT(dli_tensor_numel(&s), 1);
	CHECK_INT(dli_tensor_make(x, DLI_DTYPE_F32, 9, shape).ndim, -1);

	struct dli_context *ctx = open_yaml(stats_yaml, NULL);
	CHECK(ctx != NULL);
	if (!ctx)
		return;
	struct dli_layer *l = layer(ctx, "model.layers.0.fc1");
	CHECK_INT(dli_inspect_tensor(l, DLI_TENSOR_ACTIVATION, &b, NULL, NULL), 0);
	b.contiguous = false;
	CHECK(stderr_capture_begin("stderr.txt"));
	CHECK_INT(dli_inspect_tensor(l, DLI_TENSOR_ACTIVATION, &b, NULL, NULL), -EINVAL);
	stderr_capture_end();
	CHECK_INT(count_lines(MESSAGE_LOG, "statistics (layer 'model.layers.0.fc1', tensor "
					   "'activation'): cannot read a non-contiguous f32 tensor"),
		  1);
	CHECK_CONTAINS(dli_last_error(ctx), "inspect_tensor failed on layer 'model.layers.0.fc1', "
					    "tensor 'activation', iteration 0");
	/* A layer name of 3000 bytes (with multi-byte characters at the cuts) is quoted by its head
	 * and tail, so the reason after it still fits. */
	char *long_name = malloc(3100);
	CHECK(long_name != NULL);
	if (long_name) {
		strcpy(long_name, "model.");
		for (int i = 0; i < 1500; i++)
			strcat(long_name, "\xc3\xa9"); /* e-acute, two bytes */
		strcat(long_name, ".fc1");
		struct dli_layer *ll = layer(ctx, long_name);
		CHECK(stderr_capture_begin("stderr.txt"));
		CHECK_INT(dli_inspect_tensor(ll, DLI_TENSOR_ACTIVATION, &b, NULL, NULL), -EINVAL);
		stderr_capture_end();
		const char *e = dli_last_error(ctx);
		CHECK_CONTAINS(e, "inspect_tensor failed on layer 'model.\xc3\xa9");
		CHECK_CONTAINS(e, "\xc3\xa9...\xc3\xa9");
		CHECK_CONTAINS(e, "\xc3\xa9.fc1', tensor 'activation'");
		CHECK_CONTAINS(e, "cannot read a non-contiguous f32 tensor");
		CHECK(strlen(e) < 700);
		free(long_name);
	}
	dli_step(ctx);
	dli_destroy(ctx);
	CHECK_INT(count_lines(STATS_LOG, "model.layers.0.fc1_activation_max"), 1);
	CHECK_INT(count_lines(STATS_LOG, "value=6\n"), 1);
}

/* ---- The tensor reduction group without a communicator ---- */

/* Each rank logs its own statistics: the world (NULL, or every rank listed) and this rank alone
 * change nothing and are taken, as dlinspect.h says; a group of some ranks is refused. */
static void test_reduction_group_without_communicator(void)
{
	remove_log_dir();
	snprintf(log_dir, sizeof log_dir, "/tmp/dli-test-XXXXXX");
	if (!mkdtemp(log_dir)) {
		perror("mkdtemp");
		log_dir[0] = 0;
		CHECK(0);
		return;
	}
	struct dli_options o;
	dli_options_init(&o);
	o.log_dir = log_dir;
	o.rank = 1;
	o.world_size = 3;
	struct dli_context *ctx;
	struct dli_error err;
	CHECK_INT(dli_init(&o, &ctx, &err), 0);
	const int world[] = {0, 1, 2}, alone[] = {1}, some[] = {0, 1};
	CHECK_INT(dli_reduction_group_set(ctx, NULL, 0, &err), 0);
	CHECK_INT(dli_reduction_group_set(ctx, alone, 1, &err), 0);
	CHECK_INT(dli_reduction_group_set(ctx, world, 3, &err), 0);
	CHECK_INT(dli_reduction_group_set(ctx, some, 2, &err), -ENOTSUP);
	CHECK(strstr(err.message, "needs a communicator") != NULL);
	dli_destroy(ctx);
}

/* ---- A logger of the host's own (dli_options.logger_ops) and dli_log_scalar ---- */

struct host_log {
	pthread_mutex_t lock;
	char names[64][128];
	int64_t iterations[64];
	double values[64];
	int n, texts, flushes, destroyed;
};

static int host_scalar(void *instance, const char *name, int64_t iteration, double value)
{
	struct host_log *h = instance;
	pthread_mutex_lock(&h->lock);
	if (h->n < 64) {
		snprintf(h->names[h->n], sizeof h->names[0], "%s", name);
		h->iterations[h->n] = iteration;
		h->values[h->n] = value;
		h->n++;
	}
	pthread_mutex_unlock(&h->lock);
	return 0;
}

static int host_text(void *instance, enum dli_log_level level, const char *text)
{
	(void)level;
	(void)text;
	((struct host_log *)instance)->texts++;
	return 0;
}

static int host_flush(void *instance)
{
	((struct host_log *)instance)->flushes++;
	return 0;
}

static void host_destroy(void *instance)
{
	((struct host_log *)instance)->destroyed++;
}

static const struct dli_logger_ops host_ops = {
	.size = sizeof host_ops,
	.log_scalar = host_scalar,
	.log_text = host_text,
	.flush = host_flush,
	.destroy = host_destroy,
};

static struct dli_context *open_host_logger(const char *yaml, struct host_log *h,
					    bool messages_only, struct dli_error *err)
{
	struct dli_context *ctx = open_yaml("{}", NULL); /* a fresh log dir */
	dli_destroy(ctx);
	memset(h, 0, sizeof *h);
	pthread_mutex_init(&h->lock, NULL);
	struct dli_options o;
	dli_options_init(&o);
	o.config_yaml = yaml;
	o.log_dir = log_dir;
	o.logger_ops = &host_ops;
	o.logger = h;
	o.logger_name = "mine";
	o.default_logger_messages_only = messages_only;
	ctx = NULL;
	if (dli_init(&o, &ctx, err))
		fprintf(stderr, "dli_init: %s\n", err->message);
	return ctx;
}

/* Two iterations of stats_yaml's statistics, and the host's own scalar. */
static void log_two_iterations(struct dli_context *ctx)
{
	struct dli_layer *l = layer(ctx, "model.layers.0.fc1");
	float x[4] = {1, 2, 3, 4};
	struct dli_tensor t = tensor(x, DLI_DTYPE_F32, 4);
	for (int it = 0; it < 2; it++) {
		x[3] = (float)(4 + it);
		CHECK_INT(dli_inspect_tensor(l, DLI_TENSOR_ACTIVATION, &t, NULL, NULL), 0);
		CHECK_INT(dli_step(ctx), 0);
	}
	CHECK_INT(dli_log_scalar(ctx, "loss", 2, 0.125), 0);
}

/* log_two_iterations on `ctx` (NULL: a failed check), then dli_destroy: whether the host's logger
 * got all 11 scalars, the host's own last. */
static bool host_got_two_iterations(struct dli_context *ctx, const struct host_log *h)
{
	CHECK(ctx != NULL);
	if (!ctx)
		return false;
	log_two_iterations(ctx);
	dli_destroy(ctx);
	CHECK_INT(h->n, 11);
	CHECK_STR(h->names[10], "loss");
	return h->n == 11;
}

static void test_host_logger(void)
{
	struct host_log h;
	struct dli_error err;
	/* Beside the default file logger: the same scalars, in the file's order. */
	struct dli_context *ctx = open_host_logger(stats_yaml, &h, false, &err);
	if (!host_got_two_iterations(ctx, &h))
		return;
	CHECK_STR(h.names[0], "model.layers.0.fc1_activation_min");
	CHECK(h.iterations[0] == 0 && h.values[0] == 1.0);
	CHECK_STR(h.names[6], "model.layers.0.fc1_activation_max");
	CHECK(h.iterations[6] == 1 && h.values[6] == 5.0);
	CHECK_STR(h.names[10], "loss");
	CHECK(h.iterations[10] == 2 && h.values[10] == 0.125);
	CHECK_INT(count_lines(STATS_LOG, " - INFO - "), 11);
	CHECK_INT(count_lines(STATS_LOG, "loss \t\t\t\t iteration=000002 \t\t\t\t value=0.125"), 1);
	/* Messages stay in the message log; a host's table is neither created nor destroyed. */
	CHECK_INT(h.texts, 0);
	CHECK_INT(h.destroyed, 0);
	CHECK(h.flushes >= 2);
	CHECK_INT(count_lines(MESSAGE_LOG, "Default logging to file enabled at /"), 1);

	/* default_logger_messages_only: the file logger writes its message log only. */
	ctx = open_host_logger(stats_yaml, &h, true, &err);
	CHECK(ctx != NULL);
	if (!ctx)
		return;
	log_two_iterations(ctx);
	CHECK_INT(dli_log_scalar(ctx, "", 0, 1.0), -EINVAL);
	CHECK_INT(dli_log_scalar(ctx, NULL, 0, 1.0), -EINVAL);
	CHECK_INT(dli_log_scalar(ctx, "x\ny", -1, 1.0), -EINVAL);
	CHECK_INT(dli_log_scalar(NULL, "x", 0, 1.0), -EINVAL);
	dli_destroy(ctx);
	CHECK_INT(h.n, 11);
	CHECK(open_log(STATS_LOG) == NULL);
	CHECK_INT(count_lines(MESSAGE_LOG, "Default logging to file"), 0);
	CHECK_INT(count_lines(MESSAGE_LOG, "dli_log_scalar('', 0): the name is empty; nothing logged"),
		  1);
	CHECK_INT(count_lines(MESSAGE_LOG, "dli_log_scalar(NULL, 0): the name is NULL"), 1);
	CHECK_INT(count_lines(MESSAGE_LOG, "dli_log_scalar('x\\ny', -1): an iteration is >= 0"), 1);
	/* A config's `loggers` key is followed as written. */
	ctx = open_host_logger("loggers: {file: {}}\n", &h, true, &err);
	CHECK(ctx != NULL);
	CHECK_INT(dli_log_scalar(ctx, "loss", 0, 2.0), 0);
	dli_destroy(ctx);
	CHECK_INT(h.n, 1);
	CHECK_INT(count_lines(STATS_LOG, "loss"), 1);

	/* Without a config (the default run) the host's logger still gets the host's scalars. */
	struct dli_options o;
	dli_options_init(&o);
	o.log_dir = log_dir;
	o.logger_ops = &host_ops;
	o.logger = &h;
	h.n = 0;
	CHECK_INT(dli_init(&o, &ctx, &err), 0);
	CHECK_INT(dli_log_scalar(ctx, "lr", 4, 1e-3), 0);
	CHECK_INT(dli_step(ctx), 0);
	dli_destroy(ctx);
	CHECK_INT(h.n, 1);
	CHECK(strcmp(h.names[0], "lr") == 0 && h.iterations[0] == 4 && h.values[0] == 1e-3);
	CHECK_INT(h.destroyed, 0);

	/* A table without log_scalar is refused. */
	struct dli_logger_ops bad = {.size = sizeof bad};
	o.logger_ops = &bad;
	ctx = NULL;
	CHECK_INT(dli_init(&o, &ctx, &err), -EINVAL);
	CHECK(ctx == NULL && strstr(err.message, "options.logger_ops (size") &&
	      strstr(err.message, "has no log_scalar"));
}

/* A plugin path without the default 'file' logger module: the host's logger still gets the
 * statistics and the host's scalars (the default logger's absence is only warned about). */
static void test_host_logger_without_file_module(void)
{
	const char *env = getenv("DLINSPECT_PLUGIN_PATH");
	char *saved = env ? strdup(env) : NULL, *copy = env ? strdup(env) : NULL, *save = NULL;
	char path[4096] = "";
	/* The plugin path less its logger dirs (build/loggers, build/loggers/tensorboard). */
	for (char *tok = copy ? strtok_r(copy, ":", &save) : NULL; tok;
	     tok = strtok_r(NULL, ":", &save))
		if (!strstr(tok, "/loggers"))
			snprintf(path + strlen(path), sizeof path - strlen(path), "%s%s",
				 path[0] ? ":" : "", tok);
	free(copy);
	setenv("DLINSPECT_PLUGIN_PATH", path, 1);
	struct host_log h;
	struct dli_error err;
	struct dli_context *ctx = open_host_logger(stats_yaml, &h, false, &err);
	if (saved)
		setenv("DLINSPECT_PLUGIN_PATH", saved, 1);
	else
		unsetenv("DLINSPECT_PLUGIN_PATH");
	free(saved);
	if (host_got_two_iterations(ctx, &h))
		CHECK(open_log(STATS_LOG) == NULL);
}

int main(void)
{
	test_eval_pass_leaves_training_statistics_unchanged();
	test_generic_call_silent_in_eval();
	test_fake_quant_off_in_eval_by_default();
	test_silent_noops_warn_once();
	test_no_step_is_said();
	test_refused_plan_and_mode_are_said();
	test_step_in_eval_is_said();
	test_modify_failures_are_said();
	test_plan_agrees_with_individual_calls();
	test_tensor_constructors();
	test_reduction_group_without_communicator();
	test_host_logger();
	test_host_logger_without_file_module();
	remove_log_dir();
	return check_exit();
}
