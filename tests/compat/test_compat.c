/* Configs in the shapes nvdlfw_inspect's and TransformerEngine's users write (tests/compat/configs,
 * written for this project) load, and mean what they mean in the peers: both namespaces' statistics
 * on one layer, the seed's performance config, schedules per namespace, recipe-prefixed FP8
 * statistics, non-finite values in FP8 statistics, and the errors for what dlinspect refuses. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <dlinspect/dlinspect.h>

#include "check.h"
#include "dli-test.h"
#include "kernels-private.h" /* dli_fp8_encode, for a host-quantized tensor */

#define FC1 "model.layers.1.mlp.fc1"

static struct dli_tensor f32(float *x, int64_t n)
{
	return tensor(x, DLI_DTYPE_F32, n);
}

/* The value logged as `name` at `iteration`, the k-th such line (0-based); NAN with a failed
 * check when there is none. */
static double logged(const char *name, long iteration, int k)
{
	char buf[1024], want_it[64];
	FILE *f = open_log(STATS_LOG);
	snprintf(want_it, sizeof want_it, "iteration=%06ld", iteration);
	while (f && fgets(buf, sizeof buf, f)) {
		const char *n = strstr(buf, " - INFO - ");
		const char *v = strstr(buf, "value=");
		if (!n || !v || !strstr(buf, want_it))
			continue;
		n += strlen(" - INFO - ");
		if (strncmp(n, name, strlen(name)) || n[strlen(name)] != ' ' || k-- > 0)
			continue;
		fclose(f);
		return strtod(v + strlen("value="), NULL);
	}
	if (f)
		fclose(f);
	fprintf(stderr, "no line %d for %s at iteration %ld\n", k, name, iteration);
	CHECK(false);
	return NAN;
}

/* Lines logged as exactly `name` at `iteration`. */
static int n_logged(const char *name, long iteration)
{
	char text[512];
	snprintf(text, sizeof text, "INFO - %s \t\t\t\t iteration=%06ld", name, iteration);
	return count_lines(STATS_LOG, text);
}

static int call_base(struct dli_layer *l, const char *tensor_name, struct dli_tensor *t)
{
	struct dli_log_tensor_stats_args a = {.size = sizeof a, .tensor_name = tensor_name,
					      .tensor = t, .iteration = -1};
	return dli_call(l, DLI_CALL_LOG_TENSOR_STATS, &a);
}

/* ---- Every config of tests/compat/configs loads ---- */

static void test_configs_load(void)
{
	static const char *const files[] = {
		"both_namespaces.yaml", "seed_perf.yaml", "yaml11_forms.yaml",
		"disable_quantization.yaml", "recipe_stats.yaml", "struct_entries.yaml",
		"dummy_feature.yaml", "mxfp8_stats.yaml", "fake_quant_mxfp8.yaml",
		"all_recipe_stats.yaml", "nvfp4_stats.yaml", "blockwise_range.yaml",
	};
	const char *dir = getenv("COMPAT_CONFIGS");
	CHECK(dir != NULL);
	for (size_t i = 0; dir && i < sizeof files / sizeof files[0]; i++) {
		char path[1024];
		snprintf(path, sizeof path, "%s/%s", dir, files[i]);
		struct dli_options o;
		dli_options_init(&o);
		o.config_path = path;
		o.log_dir = log_dir[0] ? log_dir : "/tmp";
		struct dli_context *ctx = NULL;
		struct dli_error err;
		int r = dli_init(&o, &ctx, &err);
		if (r)
			fprintf(stderr, "%s: %s\n", files[i], err.message);
		CHECK_INT(r, 0);
		dli_destroy(ctx);
	}
}

/* A context for tests/compat/configs/`name` (NULL, checked, when it does not load). */
static struct dli_context *open_config(const char *name)
{
	char path[1024], yaml[4096] = "";
	const char *dir = getenv("COMPAT_CONFIGS");
	if (!dir)
		return NULL;
	snprintf(path, sizeof path, "%s/%s", dir, name);
	FILE *f = fopen(path, "r");
	size_t len = f ? fread(yaml, 1, sizeof yaml - 1, f) : 0;
	if (f)
		fclose(f);
	yaml[len] = 0;
	struct dli_context *ctx = open_yaml(yaml, NULL);
	CHECK(ctx != NULL);
	return ctx;
}

/* ---- The seed's performance config logs each namespace's statistics ---- */

static void test_seed_perf(void)
{
	struct dli_context *ctx = open_config("seed_perf.yaml");
	if (!ctx)
		return;
	struct dli_layer *l = layer(ctx, FC1);
	float x[4] = {0.5f, -3, 2, 1};
	uint8_t q[4];
	float scale_inv = 1.0f / 64;
	for (int i = 0; i < 4; i++)
		q[i] = dli_fp8_encode(x[i] * 64, DLI_DTYPE_F8E4M3);
	struct dli_tensor t = f32(x, 4);
	struct dli_quantized_tensor qt = {
		.data = tensor(q, DLI_DTYPE_F8E4M3, 4), .scale_inv = &scale_inv, .scale_inv_count = 1};
	int64_t next;
	CHECK(dli_inspect_tensor_enabled(l, DLI_TENSOR_ACTIVATION, &next));
	/* Step 0: the host calls both APIs; step 1: inspect_tensor only. */
	CHECK_INT(dli_inspect_tensor(l, DLI_TENSOR_ACTIVATION, &t, &qt, NULL), 0);
	CHECK_INT(call_base(l, "activation", &t), 0);
	/* Bad args: NULL is the host's mistake (-EINVAL), not an allocation failure (-ENOMEM); a
	 * step below -1 ("now") is refused, not logged now. Neither logs a line. */
	CHECK_INT(dli_call(l, DLI_CALL_LOG_TENSOR_STATS, NULL), -EINVAL);
	struct dli_log_tensor_stats_args bad = {.size = sizeof bad, .tensor_name = "activation",
						.tensor = &t, .iteration = -5};
	CHECK_INT(dli_call(l, DLI_CALL_LOG_TENSOR_STATS, &bad), -EINVAL);
	CHECK_INT(dli_step(ctx), 0);
	CHECK_INT(dli_inspect_tensor(l, DLI_TENSOR_ACTIVATION, &t, &qt, NULL), 0);
	CHECK_INT(dli_step(ctx), 0);
	dli_destroy(ctx);

	/* min and max: one line from each namespace, under the same name, as both peers name them. */
	CHECK_INT(n_logged(FC1 "_activation_min", 0), 2);
	CHECK_INT(n_logged(FC1 "_activation_max", 0), 2);
	CHECK(logged(FC1 "_activation_min", 0, 0) == -3 && logged(FC1 "_activation_min", 0, 1) == -3);
	CHECK(logged(FC1 "_activation_max", 0, 0) == 2 && logged(FC1 "_activation_max", 0, 1) == 2);
	/* TransformerEngine's alone: std and the FP8 ones. */
	CHECK_INT(n_logged(FC1 "_activation_std", 0), 1);
	CHECK_INT(n_logged(FC1 "_activation_underflows%", 0), 1);
	CHECK_INT(n_logged(FC1 "_activation_mse", 0), 1);
	CHECK_INT(n_logged(FC1 "_activation_fp8_current_scaling_mse", 0), 1);
	/* Step 1: no log_tensor_stats call, so only TransformerEngine's lines. */
	CHECK_INT(n_logged(FC1 "_activation_min", 1), 1);
	CHECK_INT(n_logged(FC1 "_activation_std", 1), 1);
}

/* ---- max_blockwise_dynamic_range in TransformerEngine's forms ---- */

static void test_blockwise_range(void)
{
	struct dli_context *ctx = open_config("blockwise_range.yaml");
	if (!ctx)
		return;
	struct dli_layer *l = layer(ctx, FC1);
	/* 2 x 4: rows 1, 2, 0, 8 and 4, 4, 0.25, 1. */
	float x[8] = {1, 2, 0, 8, 4, 4, 0.25f, 1};
	struct dli_tensor t = f32(x, 8);
	t.ndim = 2;
	t.shape[0] = 2;
	t.shape[1] = 4;
	CHECK_INT(dli_inspect_tensor(l, DLI_TENSOR_ACTIVATION, &t, NULL, NULL), 0);
	CHECK_INT(dli_inspect_tensor(l, DLI_TENSOR_GRADIENT, &t, NULL, NULL), 0);
	CHECK_INT(dli_step(ctx), 0);
	dli_destroy(ctx);

	/* Blocks of 2 along the rows: {1, 2} {0, 8} {4, 4} {0.25, 1}, at most log2(1 / 0.25) = 2;
	 * down the columns: {1, 4} {2, 4} {0, 0.25} {8, 1}, at most 3: the activation logs the
	 * larger. Tiles of 2 x 2: {1, 2, 4, 4} and {0, 8, 0.25, 1}: 5. The defaults (32, 1): one
	 * block of all eight, 5, as dynamic_range. */
	CHECK(logged(FC1 "_activation_max_blockwise_dynamic_range_block_size_2_dims_1"
		     "_max_over_orientations", 0, 0) == 3);
	CHECK(logged(FC1 "_activation_max_blockwise_dynamic_range_block_size_2_dims_2"
		     "_max_over_orientations", 0, 0) == 5);
	CHECK(logged(FC1 "_activation_max_blockwise_dynamic_range_block_size_32_dims_1"
		     "_max_over_orientations", 0, 0) == 5);
	CHECK(logged(FC1 "_activation_dynamic_range", 0, 0) == 5);
	/* The gradient's entry lists its own: blocks of 4 along the rows, {1, 2, 0, 8} and
	 * {4, 4, 0.25, 1}: 4; no orientation suffix, no dynamic_range. */
	CHECK(logged(FC1 "_gradient_max_blockwise_dynamic_range_block_size_4_dims_1", 0, 0) == 4);
	CHECK_INT(n_logged(FC1 "_gradient_dynamic_range", 0), 0);
	CHECK_INT(n_logged(FC1 "_gradient_max_blockwise_dynamic_range_block_size_2_dims_1", 0), 0);
}

/* ---- Schedules per namespace ---- */

/* start_end_list [[1, 3]]: steps 1, 2 in the base namespace (end exclusive, as nvdlfw_inspect),
 * 1, 2, 3 in TransformerEngine's (inclusive); end_step -1 never ends. Base statistic names match in
 * any case and are logged lowercase. */
static void test_schedules(void)
{
	struct dli_context *ctx = open_yaml(
		"s:\n  enabled: True\n  layers: {layer_name_regex_pattern: fc1}\n"
		"  LogTensorStats: {enabled: True, tensors: [act], stats: [MEAN], "
		"start_end_list: [[1, 3]]}\n"
		"  transformer_engine:\n"
		"    LogTensorStats: {enabled: True, tensors: [activation], stats: [max], "
		"start_end_list: [[1, 3]]}\n"
		"    LogFp8TensorStats: {enabled: True, tensors: [activation], "
		"stats: [fp8_current_scaling_mse], start_step: 2, end_step: -1}\n",
		NULL);
	CHECK(ctx != NULL);
	if (!ctx)
		return;
	struct dli_layer *l = layer(ctx, FC1);
	float x[3] = {1, 2, 6};
	struct dli_tensor t = f32(x, 3);
	for (int it = 0; it < 6; it++) {
		CHECK_INT(call_base(l, "act", &t), 0);
		CHECK_INT(call_base(l, "other", &t), 0); /* not selected: nothing */
		CHECK_INT(dli_inspect_tensor(l, DLI_TENSOR_ACTIVATION, &t, NULL, NULL), 0);
		CHECK_INT(dli_step(ctx), 0);
	}
	dli_destroy(ctx);
	for (int it = 0; it < 6; it++) {
		CHECK_INT(n_logged(FC1 "_act_mean", it), it == 1 || it == 2);
		CHECK_INT(n_logged(FC1 "_activation_max", it), it >= 1 && it <= 3);
		CHECK_INT(n_logged(FC1 "_activation_fp8_current_scaling_mse", it), it >= 2);
		CHECK_INT(n_logged(FC1 "_other_mean", it), 0);
	}
	CHECK(logged(FC1 "_act_mean", 1, 0) == 3);
}

/* ---- FP8 statistics of non-finite values; dynamic_range of zeros ---- */

/* An infinity saturates (an overflow) and makes mse infinite; a NaN is in neither but counts in
 * n. The same for current scaling's what-if and for the host's own (delayed-scaling) tensor. */
static void check_fp8_nonfinite(const float *x, int n, double under, double over, double mse)
{
	struct dli_context *ctx = open_yaml(
		"s:\n  enabled: true\n  layers: {layer_name_regex_pattern: fc1}\n"
		"  transformer_engine:\n"
		"    LogFp8TensorStats:\n"
		"      enabled: true\n"
		"      tensors: [activation]\n"
		"      stats: [fp8_current_scaling_underflows%, fp8_current_scaling_overflows%,\n"
		"              fp8_current_scaling_mse, fp8_delayed_scaling_underflows%,\n"
		"              fp8_delayed_scaling_overflows%, fp8_delayed_scaling_mse,\n"
		"              fp8_current_scaling_sqnr_db]\n"
		"    LogTensorStats: {enabled: true, tensors: [weight], stats: [dynamic_range]}\n",
		NULL);
	CHECK(ctx != NULL);
	if (!ctx)
		return;
	struct dli_layer *l = layer(ctx, FC1);
	float xs[8];
	uint8_t q[8];
	memcpy(xs, x, (size_t)n * sizeof *x);
	/* The host's tensor, quantized with scale 1 (what a delayed-scaling host with amax history
	 * 448 would use), saturating as TransformerEngine's casts do. */
	float scale_inv = 1;
	for (int i = 0; i < n; i++)
		q[i] = dli_fp8_encode(xs[i], DLI_DTYPE_F8E4M3);
	struct dli_tensor t = f32(xs, n);
	struct dli_quantized_tensor qt = {
		.data = tensor(q, DLI_DTYPE_F8E4M3, n), .scale_inv = &scale_inv, .scale_inv_count = 1};
	float zeros[3] = {0, -0.0f, 0};
	struct dli_tensor z = f32(zeros, 3);
	CHECK_INT(dli_inspect_tensor(l, DLI_TENSOR_ACTIVATION, &t, &qt, NULL), 0);
	CHECK_INT(dli_inspect_tensor(l, DLI_TENSOR_WEIGHT, &z, NULL, NULL), 0);
	CHECK_INT(dli_step(ctx), 0);
	dli_destroy(ctx);
	static const char *const prefix[2] = {"fp8_current_scaling_", "fp8_delayed_scaling_"};
	for (int p = 0; p < 2; p++) {
		char name[256];
		snprintf(name, sizeof name, FC1 "_activation_%sunderflows%%", prefix[p]);
		double got = logged(name, 0, 0);
		if (!(fabs(got - under) <= 1e-8 * fmax(1, under)))
			fprintf(stderr, "%s = %g, expected %g\n", name, got, under);
		CHECK(fabs(got - under) <= 1e-8 * fmax(1, under));
		snprintf(name, sizeof name, FC1 "_activation_%soverflows%%", prefix[p]);
		got = logged(name, 0, 0);
		if (!(fabs(got - over) <= 1e-8 * fmax(1, over)))
			fprintf(stderr, "%s = %g, expected %g\n", name, got, over);
		CHECK(fabs(got - over) <= 1e-8 * fmax(1, over));
		snprintf(name, sizeof name, FC1 "_activation_%smse", prefix[p]);
		got = logged(name, 0, 0);
		if (!(isinf(mse) ? got == mse : fabs(got - mse) <= 1e-12))
			fprintf(stderr, "%s = %g, expected %g\n", name, got, mse);
		CHECK(isinf(mse) ? got == mse : fabs(got - mse) <= 1e-12);
	}
	/* With an infinity, x has no finite signal-to-noise ratio (numpy's inf / inf). */
	if (isinf(mse))
		CHECK(isnan(logged(FC1 "_activation_fp8_current_scaling_sqnr_db", 0, 0)));
	/* All zeros: TransformerEngine logs an infinite dynamic range. */
	CHECK(logged(FC1 "_weight_dynamic_range", 0, 0) == INFINITY);
}

static void test_fp8_nonfinite(void)
{
	/* [1, -2, inf, 0]: current scaling's amax is inf, so its scale is 1, as the host's. */
	check_fp8_nonfinite((const float[]){1, -2, INFINITY, 0}, 4, 0, 25, INFINITY);
	check_fp8_nonfinite((const float[]){1, -INFINITY, 1e-9f}, 3, 100.0 / 3, 100.0 / 3, INFINITY);
	/* A NaN: neither an under- nor an overflow, in n all the same; mse over the others (exact
	 * here: 1 and 2 are FP8 values at either scale). */
	check_fp8_nonfinite((const float[]){1, NAN, 0, 2}, 4, 0, 0, 0);
}

/* ---- TransformerEngine's test feature ---- */

static void test_dummy_feature(void)
{
	struct dli_context *ctx = open_yaml(
		"everywhere:\n  enabled: True\n  layers: {layer_name_regex_pattern: .*}\n"
		"  transformer_engine:\n"
		"    TestDummyFeature: {enabled: True, tensors: [weight, activation, gradient, output, "
		"wgrad, dgrad], gemms: [wgrad, dgrad, fprop]}\n"
		"once:\n  enabled: True\n  layers: {layer_name_regex_pattern: fc2}\n"
		"  transformer_engine:\n"
		"    TestDummyFeature: {enabled: True, inspect_only_once: True, tensors: [weight], "
		"gemms: [fprop]}\n",
		NULL);
	CHECK(ctx != NULL);
	if (!ctx)
		return;
	int64_t next;
	float x[2] = {1, 2};
	struct dli_tensor t = f32(x, 2);
	struct dli_layer *l = layer(ctx, FC1);
	CHECK(dli_inspect_tensor_enabled(l, DLI_TENSOR_OUTPUT, &next));
	CHECK_INT(dli_inspect_tensor(l, DLI_TENSOR_OUTPUT, &t, NULL, NULL), 0);
	CHECK(dli_fp8_gemm_enabled(l, DLI_GEMM_FPROP, &next)); /* it changes nothing */
	dli_destroy(ctx);
	ctx = open_yaml(
		"once:\n  enabled: True\n  layers: {layer_name_regex_pattern: fc2}\n"
		"  transformer_engine:\n"
		"    TestDummyFeature: {enabled: True, inspect_only_once: True, tensors: [weight], "
		"gemms: [fprop]}\n",
		NULL);
	CHECK(ctx != NULL);
	if (!ctx)
		return;
	l = layer(ctx, "model.layers.0.mlp.fc2");
	CHECK(!dli_inspect_tensor_enabled(l, DLI_TENSOR_WEIGHT, &next));
	CHECK(next == DLI_NEVER);
	dli_destroy(ctx);
}

/* ---- What dlinspect refuses, and how it says so ---- */

static void check_error(const char *yaml, const char *const *parts)
{
	struct dli_error err;
	struct dli_context *ctx = open_yaml(yaml, &err);
	CHECK(ctx == NULL);
	dli_destroy(ctx);
	if (ctx)
		return;
	for (size_t i = 0; parts[i]; i++) {
		if (!strstr(err.message, parts[i]))
			fprintf(stderr, "error \"%s\" lacks \"%s\"\n", err.message, parts[i]);
		CHECK(strstr(err.message, parts[i]) != NULL);
	}
}

#define SEC "s:\n  enabled: True\n  layers: {layer_name_regex_pattern: fc1}\n"

static void test_errors(void)
{
	/* The base namespace has the peer's statistics only; TransformerEngine's has more. */
	check_error(SEC "  LogTensorStats: {enabled: True, tensors: [activation], stats: [cur_amax]}\n",
		    (const char *const[]){"<string>:4:", "s.LogTensorStats.stats: unknown stats "
							 "'cur_amax'",
					   "min, max, mean, std, l1_norm, l2_norm", NULL});
	/* The same feature twice in one namespace is still an error. */
	check_error(SEC "  LogTensorStats:\n    enabled: True\n    stats: [min]\n"
			"    tensors_struct: [{tensor: activation}, {tensor: activation}]\n",
		    (const char *const[]){"LogTensorStats is configured twice", "<string>:7:", NULL});
	check_error(SEC "  transformer_engine:\n    LogFp8TensorStats: {enabled: True, "
			"tensors: [activation], stats: [nvfp4_underflows%]}\n",
		    (const char *const[]){"<string>:5:5:", "'nvfp4_underflows%': NVFP4 statistics "
							   "belong to TransformerEngine's "
							   "LogNvfp4TensorStats",
					   NULL});
	check_error(SEC "  transformer_engine:\n    LogFp8TensorStats: {enabled: True, "
			"tensors: [activation], stats: [fp8_current_scaling_mse_columnwise]}\n",
		    (const char *const[]){"column-wise statistics exist only for block-scaled", NULL});
	/* Names the peer itself refuses. */
	check_error(SEC "  transformer_engine:\n    DisableFp8Gemm: {enabled: True, gemms: [fprop]}\n",
		    (const char *const[]){"<string>:5:5:", "unknown feature 'DisableFp8Gemm' in "
							   "namespace 'transformer_engine'",
					   "did you mean 'DisableFP8GEMM'?", NULL});
	check_error("s:\n  enabled: True\n  layers: {layer_type: [fc1]}\n",
		    (const char *const[]){"<string>:3:12:", "unknown key 'layer_type'",
					   "did you mean 'layer_types'?", NULL});
	/* Python plugins of the peers' tests and docs are not modules here. */
	check_error(SEC "  transformer_engine:\n    PercentageGreaterThanThreshold: {enabled: True}\n",
		    (const char *const[]){"<string>:5:5:", "unknown feature "
							   "'PercentageGreaterThanThreshold'",
					   NULL});
	check_error(SEC "  LogTensorStats: {enabled: True, tensors: [a], stats: [min], freq: 2.5}\n",
		    (const char *const[]){"<string>:4:", "freq: expected an integer, got '2.5'", NULL});
	check_error(SEC "  LogTensorStats: {enabled: True, tensors: [a], stats: [min], "
			"start_end_list: [[4, 4]]}\n",
		    (const char *const[]){"<string>:4:", "got [4, 4]", "the end is exclusive", NULL});
	/* A TransformerEngine-only feature directly in a section. */
	check_error(SEC "  DisableFP8GEMM: {enabled: True, gemms: [fprop]}\n",
		    (const char *const[]){"<string>:4:3:", "DisableFP8GEMM belongs in the section's "
							   "'transformer_engine:' block",
					   NULL});
}

/* ---- Tensor names nobody declared ---- */

static const char *const misspelled =
	SEC "  transformer_engine:\n"
	"    LogTensorStats: {enabled: True, tensors: [activaton, attn_scores], stats: [max]}\n";

/* A host that declares its tensors gets an error for any other name, with a did-you-mean. */
static void test_declared_tensors(void)
{
	static const char *const mine[] = {"attn_scores"};
	struct dli_options o;
	dli_options_init(&o);
	o.config_yaml = misspelled;
	o.log_dir = "/tmp";
	o.tensor_names = mine;
	o.n_tensor_names = 1;
	struct dli_context *ctx = NULL;
	struct dli_error err;
	CHECK_INT(dli_init(&o, &ctx, &err), -EINVAL);
	CHECK(ctx == NULL);
	CHECK_CONTAINS(err.message, "<string>:5:47: s.transformer_engine.LogTensorStats.tensors: "
				    "unknown tensor 'activaton' (did you mean 'activation'?)");
	dli_destroy(ctx);
	/* Declared, it is the host's own. */
	static const char *const both[] = {"attn_scores", "activaton"};
	o.tensor_names = both;
	o.n_tensor_names = 2;
	CHECK_INT(dli_init(&o, &ctx, &err), 0);
	dli_destroy(ctx);
}

/* Undeclared, a name close to a standard one is a warning in the message log and, once, on
 * stderr; a distinct name (attn_scores) is the host's own, silently. */
static void test_undeclared_tensor_warning(void)
{
	char path[] = "/tmp/dli-compat-stderr-XXXXXX";
	int fd = mkstemp(path), saved = dup(2);
	CHECK(fd >= 0 && saved >= 0);
	if (fd < 0 || saved < 0)
		return;
	fflush(stderr);
	dup2(fd, 2);
	struct dli_context *ctx = open_yaml(misspelled, NULL);
	fflush(stderr);
	dup2(saved, 2);
	close(saved);
	CHECK(ctx != NULL);
	dli_destroy(ctx);
	char buf[4096] = "";
	ssize_t got = pread(fd, buf, sizeof buf - 1, 0);
	close(fd);
	unlink(path);
	buf[got > 0 ? got : 0] = 0;
	const char *w = "'activaton' is not a standard tensor (did you mean 'activation'?)";
	CHECK_CONTAINS(buf, w);
	CHECK(strstr(buf, w) && !strstr(strstr(buf, w) + 1, w)); /* once */
	CHECK(strstr(buf, "attn_scores") == NULL);
	CHECK_INT(count_lines(MESSAGE_LOG, w), 1);
}

/* The message log's lines, as "LEVEL - text" each ('\n' dropped), joined by '|' into buf. */
static void message_lines(char *buf, size_t size)
{
	char line[4096];
	FILE *f = open_log(MESSAGE_LOG);
	size_t off = 0;
	buf[0] = 0;
	while (f && fgets(line, sizeof line, f) && off < size) {
		const char *t = strstr(line, " - ");
		line[strcspn(line, "\n")] = 0;
		off += (size_t)snprintf(buf + off, size - off, "%s%s", off ? "|" : "", t ? t + 3 : line);
	}
	if (f)
		fclose(f);
}

static const char nvdlfw_lines_yaml[] =
	"fc1_stats:\n"
	"  enabled: true\n"
	"  layers: {layer_name_regex_pattern: fc1}\n"
	"  LogTensorStats: {enabled: true, stats: [max], tensors: [activation, weight], freq: 1}\n"
	"fc2_stats:\n"
	"  enabled: true\n"
	"  layers: {layer_name_regex_pattern: fc2}\n"
	"  LogTensorStats:\n"
	"    enabled: true\n"
	"    tensors_struct: [{tensor: activation, stats: [min], freq: 1},\n"
	"                     {tensor: weight, stats: [max], freq: 2}]\n"
	"\"it's off\": {enabled: false, layers: {layer_types: [fc]}}\n"
	"'say \"x\"': {enabled: false, layers: {layer_types: [fc]}}\n";

/* nvdlfw_inspect's message lines (docs/logging.md, "Message lines of nvdlfw_inspect"): where the
 * config came from, every section by name as Python prints a list, and the first log_tensor_stats
 * call that reaches LogTensorStats on each layer. */
static void test_nvdlfw_message_lines(void)
{
	char buf[8192];
	struct dli_context *ctx = open_yaml(nvdlfw_lines_yaml, NULL);
	CHECK(ctx != NULL);
	if (!ctx)
		return;
	float x[3] = {1, 2, 3};
	struct dli_tensor t = f32(x, 3);
	static const char *const calls[][2] = {
		{"model.0.fc1", "activation"}, {"model.0.fc1", "weight"}, {"model.0.fc1", "activation"},
		{"model.0.fc2", "weight"}, {"model.0.fc2", "activation"}, {"model.1.fc1", "gradient"},
		{"model.1.fc1", "weight"},
	};
	for (size_t i = 0; i < sizeof calls / sizeof calls[0]; i++) {
		struct dli_log_tensor_stats_args a = {.size = sizeof a, .tensor_name = calls[i][1],
						      .tensor = &t, .iteration = -1};
		CHECK_INT(dli_call(layer(ctx, calls[i][0]), DLI_CALL_LOG_TENSOR_STATS, &a), 0);
	}
	dli_destroy(ctx);
	message_lines(buf, sizeof buf);
	/* After dlinspect's own first line; a tensor the layer's block leaves out (gradient) calls
	 * no feature, and a layer says it once, whatever its tensors, even when each tensor of a
	 * tensors_struct is an instance of its own. */
	CHECK_CONTAINS(buf, "|INFO - Reading config from YAML text."
			    "|INFO - Loaded configs for ['fc1_stats', 'fc2_stats', \"it's off\", "
			    "'say \"x\"']."
			    "|INFO - LAYER=model.0.fc1: Feature=LogTensorStats, API=log_tensor_stats, "
			    "TENSOR=activation: Called"
			    "|INFO - LAYER=model.0.fc2: Feature=LogTensorStats, API=log_tensor_stats, "
			    "TENSOR=weight: Called"
			    "|INFO - LAYER=model.1.fc1: Feature=LogTensorStats, API=log_tensor_stats, "
			    "TENSOR=weight: Called");
	CHECK_INT(count_lines(MESSAGE_LOG, ": Called"), 3);

	/* A file is named by its path as given; a host's YAML text by what it says it is (the
	 * Python package: a dict is "Python dictionary", as in nvdlfw_inspect). */
	char path[300];
	snprintf(path, sizeof path, "%s/c.yaml", log_dir);
	FILE *f = fopen(path, "w");
	CHECK(f != NULL);
	if (!f)
		return;
	fputs(nvdlfw_lines_yaml, f);
	fclose(f);
	for (int origin = 0; origin < 2; origin++) {
		struct dli_options o;
		struct dli_error err;
		dli_options_init(&o);
		o.log_dir = log_dir;
		if (origin) {
			o.config_yaml = nvdlfw_lines_yaml;
			o.config_origin = "Python dictionary";
		} else {
			o.config_path = path;
		}
		ctx = NULL;
		CHECK_INT(dli_init(&o, &ctx, &err), 0);
		dli_destroy(ctx);
		message_lines(buf, sizeof buf);
		char want[400];
		snprintf(want, sizeof want, "|INFO - Reading config from %s.|INFO - Loaded configs for",
			 origin ? "Python dictionary" : path);
		CHECK_CONTAINS(buf, want);
	}
}

int main(void)
{
	test_configs_load();
	test_seed_perf();
	test_blockwise_range();
	test_schedules();
	test_fp8_nonfinite();
	test_dummy_feature();
	test_errors();
	test_declared_tensors();
	test_undeclared_tensor_warning();
	test_nvdlfw_message_lines();
	remove_log_dir();
	return check_exit();
}
