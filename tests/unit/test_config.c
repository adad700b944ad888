/* Config reading through the real dli_init path: every key, alias and error of the YAML config, with
 * the bundled modules and the "probe" fixture module loaded from the build tree. */
#include <errno.h>
#include <ftw.h>
#include <glob.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <dlinspect/dlinspect.h>

#include "check.h"
#include "context-private.h"

/* The fixture's parameters, in schema order (tests/unit/fixtures/probe.c). */
enum { P_LABEL, P_SCALE, P_STATS, P_FAIL };

#define FPROP (1u << DLI_GEMM_FPROP)
#define DGRAD (1u << DLI_GEMM_DGRAD)
#define WGRAD (1u << DLI_GEMM_WGRAD)
#define ALL_GEMMS (FPROP | DGRAD | WGRAD)
#define T(id) (1ull << (id))
#define ACT T(DLI_TENSOR_ACTIVATION)
#define GRAD T(DLI_TENSOR_GRADIENT)
#define WEIGHT T(DLI_TENSOR_WEIGHT)
#define OUTPUT T(DLI_TENSOR_OUTPUT)

/* Lines 1-3 of most configs below: features start on line 4, at column 3. */
#define HDR "sec:\n  enabled: true\n  layers: {layer_numbers: all}\n"

static char log_dir[] = "/tmp/dli-test-config-XXXXXX";

static int load_opts(struct dli_options *o, const char *yaml, struct dli_context **ctx,
		     struct dli_error *err)
{
	o->config_yaml = yaml;
	o->log_dir = log_dir;
	return dli_init(o, ctx, err);
}

static int load(const char *yaml, struct dli_context **ctx, struct dli_error *err)
{
	struct dli_options o;
	dli_options_init(&o);
	return load_opts(&o, yaml, ctx, err);
}

/* Loads a config that must be valid; prints the error when it is not. */
static struct dli_context *load_ok(const char *what, const char *yaml)
{
	struct dli_context *ctx = NULL;
	struct dli_error err;
	int r = load(yaml, &ctx, &err);
	if (r) {
		fprintf(stderr, "%s: dli_init failed (%d): %s\n", what, r, err.message);
		CHECK_INT(r, 0);
		return NULL;
	}
	CHECK(ctx != NULL);
	CHECK(ctx->config != NULL);
	return ctx;
}

static const struct dli_target *target(const struct dli_context *ctx, size_t i)
{
	return i < ctx->config->n_targets ? &ctx->config->targets[i] : NULL;
}

static const char *feature_name(const struct dli_target *t)
{
	return t ? t->feature->desc->name : "(none)";
}

/* The number of feature instances a layer gets (0: no section selects it). */
static long layer_bindings(struct dli_context *ctx, const char *name)
{
	struct dli_layer *l = NULL;
	struct dli_error err;
	int r = dli_layer_get(ctx, name, &l, &err);
	if (r) {
		fprintf(stderr, "dli_layer_get(%s): %s\n", name, err.message);
		return -1;
	}
	return (long)l->n_bindings;
}

static char *write_temp(const char *text)
{
	static char path[64];
	snprintf(path, sizeof path, "/tmp/dli-config-XXXXXX.yaml");
	int fd = mkstemps(path, 5);
	if (fd < 0)
		return NULL;
	size_t len = strlen(text);
	ssize_t w = write(fd, text, len);
	close(fd);
	return w == (ssize_t)len ? strdup(path) : NULL;
}

/* ---- Sections and layers ---- */

static void test_layers_keys(void)
{
	struct dli_context *ctx = load_ok("layers keys",
		"numbers_and_types:\n"
		"  enabled: true\n"
		"  layers:\n"
		"    layer_numbers: [1, \"3-5\", 7, all]\n"
		"    layer_types: [fc1, attn]\n"
		"  Probe: {enabled: true, tensors: [activation]}\n"
		"bare:\n"
		"  enabled: true\n"
		"  layers:\n"
		"    layer_numbers: 3\n"
		"    layer_types: fc2\n"
		"  ProbeB: {enabled: true, tensors: activation}\n"
		"everything:\n"
		"  enabled: true\n"
		"  layers: {layer_types: all}\n"
		"exact:\n"
		"  enabled: true\n"
		"  layers:\n"
		"    exact_layer_names: [model.0.qkv, model.9.proj]\n"
		"regex:\n"
		"  enabled: true\n"
		"  layers:\n"
		"    layer_name_regex_pattern: .*(fc1|fc2)$\n");
	if (!ctx)
		return;
	const struct dli_config *c = ctx->config;
	CHECK_INT(c->n_sections, 5);
	CHECK_INT(c->n_warnings, 0);

	const struct dli_selector *s = &c->sections[0].selector;
	CHECK_STR(c->sections[0].name, "numbers_and_types");
	CHECK(c->sections[0].enabled);
	CHECK(s->has_numbers && s->numbers_all);
	CHECK_INT(s->n_numbers, 3);
	if (s->n_numbers == 3) {
		CHECK_INT(s->numbers[0].first, 1);
		CHECK_INT(s->numbers[0].second, 1);
		CHECK_INT(s->numbers[1].first, 3);
		CHECK_INT(s->numbers[1].second, 5);
		CHECK_INT(s->numbers[2].first, 7);
	}
	CHECK(s->has_types && !s->types_all);
	CHECK_INT(s->n_types, 2);
	if (s->n_types == 2) {
		CHECK_STR(s->types[0], "fc1");
		CHECK_STR(s->types[1], "attn");
	}
	CHECK(!s->regex && !s->has_exact);
	CHECK_INT(c->sections[0].n_targets, 1);
	CHECK_INT(c->sections[0].first_target, 0);

	/* A bare int and a bare string are one-item lists. */
	s = &c->sections[1].selector;
	CHECK(s->has_numbers && !s->numbers_all);
	CHECK_INT(s->n_numbers, 1);
	if (s->n_numbers == 1) {
		CHECK_INT(s->numbers[0].first, 3);
		CHECK_INT(s->numbers[0].second, 3);
	}
	CHECK_INT(s->n_types, 1);
	if (s->n_types == 1)
		CHECK_STR(s->types[0], "fc2");
	CHECK_INT(c->sections[1].first_target, 1);
	CHECK_INT(c->sections[1].n_targets, 1);
	CHECK_INT(target(ctx, 1) ? target(ctx, 1)->tensors : 0, ACT);

	s = &c->sections[2].selector;
	CHECK(s->has_types && s->types_all && s->n_types == 0 && !s->has_numbers);
	CHECK_INT(c->sections[2].n_targets, 0);

	s = &c->sections[3].selector;
	CHECK(s->has_exact);
	CHECK_INT(s->n_exact, 2);
	if (s->n_exact == 2)
		CHECK_STR(s->exact[1], "model.9.proj");

	s = &c->sections[4].selector;
	CHECK(s->regex != NULL);
	CHECK_STR(s->pattern, ".*(fc1|fc2)$");

	/* Selection through the handles: numbers AND types; the bare-int section. */
	CHECK_INT(layer_bindings(ctx, "model.4.attn.qkv"), 1);  /* 4 in 3-5, type attn */
	CHECK_INT(layer_bindings(ctx, "model.3.mlp.fc2"), 1);   /* section "bare" only */
	CHECK_INT(layer_bindings(ctx, "model.0.qkv"), 0);       /* exact: selected, no features */
	CHECK_INT(layer_bindings(ctx, "model.2.mlp.proj"), 0);
	dli_destroy(ctx);
}

static void test_disabled_section(void)
{
	/* enabled: false needs no layers, makes no targets, but its features are still checked. */
	struct dli_context *ctx = load_ok("disabled section",
		"off:\n"
		"  enabled: false\n"
		"  Probe: {enabled: true, tensors: [activation]}\n"
		"on:\n"
		"  enabled: yes\n"
		"  layers: {layer_numbers: all}\n"
		"  Probe: {enabled: false, tensors: [activation]}\n"
		"  ProbeB: {enabled: true, tensors: [gradient]}\n");
	if (!ctx)
		return;
	const struct dli_config *c = ctx->config;
	CHECK_INT(c->n_sections, 2);
	CHECK(!c->sections[0].enabled);
	CHECK(c->sections[1].enabled);
	CHECK_INT(c->n_targets, 1);
	CHECK_STR(feature_name(target(ctx, 0)), "ProbeB");
	CHECK_INT(c->sections[0].n_targets, 0);
	CHECK_INT(c->sections[1].n_targets, 1);
	CHECK_INT(layer_bindings(ctx, "model.1.fc1"), 1);
	dli_destroy(ctx);
}

/* ---- Feature blocks ---- */

static void test_defaults(void)
{
	struct dli_context *ctx = load_ok("defaults", HDR "  Probe: {enabled: true, tensors: [weight]}\n");
	if (!ctx)
		return;
	const struct dli_target *t = target(ctx, 0);
	CHECK_INT(ctx->config->n_targets, 1);
	if (t) {
		CHECK_STR(t->feature->desc->name, "Probe");
		CHECK_STR(t->section->name, "sec");
		CHECK_STR(t->where_text, "<string>:4:3");
		CHECK_INT(t->gemms, ALL_GEMMS); /* Probe takes no gemms: all of them */
		CHECK_INT(t->tensors, WEIGHT);
		CHECK_INT(t->schedule.freq, 1);
		CHECK_INT(t->schedule.start_step, 0);
		CHECK_INT(t->schedule.end_step, DLI_NEVER);
		CHECK(t->schedule.ranges == NULL && t->schedule.n_ranges == 0);
		const struct dli_value *p = t->params;
		CHECK(!p[P_LABEL].set && !p[P_SCALE].set && !p[P_STATS].set && !p[P_FAIL].set);
		CHECK_STR(p[P_LABEL].u.s, "probe");
		CHECK(p[P_SCALE].u.f == 1.0);
		CHECK_INT(p[P_STATS].u.list.n, 2);
		if (p[P_STATS].u.list.n == 2) {
			CHECK_STR(p[P_STATS].u.list.items[0], "min");
			CHECK_STR(p[P_STATS].u.list.items[1], "max");
		}
		CHECK(!p[P_FAIL].u.b);
	}
	/* No `loggers`: the file logger with its defaults. */
	CHECK(!ctx->config->has_loggers);
	CHECK_INT(ctx->n_loggers, 1);
	if (ctx->n_loggers == 1)
		CHECK_STR(ctx->loggers[0].desc->name, "file");
	dli_destroy(ctx);
}

static void test_params_and_schedule(void)
{
	struct dli_context *ctx = load_ok("params",
		HDR
		"  Probe:\n"
		"    enabled: true\n"
		"    tensors: [activation, gradient, output]\n"
		"    label: \"stats: fc\"\n"
		"    scale: -2.5e-3\n"
		"    stats: [mean, std, min]\n"
		"    freq: 10\n"
		"    start_step: 5\n"
		"    end_step: 100\n"
		"  ProbeB:\n"
		"    enabled: true\n"
		"    tensors: weight\n"
		"    factor: 4\n"
		"    type: max\n"
		"    fail: false\n"
		"    start_end_list: [[0, 3], [10, 20]]\n");
	if (!ctx)
		return;
	CHECK_INT(ctx->config->n_targets, 2);
	const struct dli_target *t = target(ctx, 0);
	if (t) {
		CHECK_INT(t->tensors, ACT | GRAD | OUTPUT);
		CHECK(t->params[P_LABEL].set);
		CHECK_STR(t->params[P_LABEL].u.s, "stats: fc");
		CHECK_STR(t->params[P_LABEL].where, "<string>:7:12");
		CHECK(t->params[P_SCALE].u.f == -2.5e-3);
		CHECK_INT(t->params[P_STATS].u.list.n, 3);
		if (t->params[P_STATS].u.list.n == 3)
			CHECK_STR(t->params[P_STATS].u.list.items[2], "min");
		CHECK_INT(t->schedule.freq, 10);
		CHECK_INT(t->schedule.start_step, 5);
		CHECK_INT(t->schedule.end_step, 100);
		CHECK(!t->params[P_FAIL].set);
	}
	t = target(ctx, 1);
	if (t) {
		/* `factor` and `type` are the older spellings of `scale` and `stats`. */
		CHECK_STR(t->feature->desc->name, "ProbeB");
		CHECK_INT(t->tensors, WEIGHT);
		CHECK(t->params[P_SCALE].set);
		CHECK(t->params[P_SCALE].u.f == 4.0);
		CHECK(t->params[P_STATS].set);
		CHECK_INT(t->params[P_STATS].u.list.n, 1);
		if (t->params[P_STATS].u.list.n == 1)
			CHECK_STR(t->params[P_STATS].u.list.items[0], "max");
		CHECK(t->params[P_FAIL].set && !t->params[P_FAIL].u.b);
		CHECK_INT(t->schedule.freq, 1);
		CHECK_INT(t->schedule.n_ranges, 2);
		if (t->schedule.n_ranges == 2) {
			CHECK_INT(t->schedule.ranges[0].first, 0);
			CHECK_INT(t->schedule.ranges[0].second, 3);
			CHECK_INT(t->schedule.ranges[1].first, 10);
			CHECK_INT(t->schedule.ranges[1].second, 20);
		}
	}
	dli_destroy(ctx);
}

/* Outside the base namespace, a null start_step, end_step or start_end_list and an empty
 * start_end_list mean "not given", as in TransformerEngine's next_enabled_iter; in a struct entry a
 * null drops the block's value. In the base namespace a null freq is 1 (nvdlfw_inspect's
 * LogTensorStats), and a null or empty start_end_list is not given. */
static void test_schedule_null_is_not_given(void)
{
	struct dli_context *ctx = load_ok("null schedule keys",
		HDR
		"  Probe:\n"
		"    enabled: true\n"
		"    tensors: [activation]\n"
		"    start_step: null\n"
		"    end_step: ~\n"
		"    start_end_list: []\n"
		"  ProbeB:\n"
		"    enabled: true\n"
		"    start_step: 7\n"
		"    start_end_list: null\n"
		"    tensors_struct:\n"
		"      - {tensor: activation, start_step: null}\n"
		"      - {tensor: weight, start_end_list: []}\n"
		"  LogTensorStats:\n"
		"    enabled: true\n"
		"    tensors: [tensor1]\n"
		"    stats: [min]\n"
		"    freq: null\n"
		"    start_end_list: []\n"
		"    start_step: 3\n");
	if (!ctx)
		return;
	CHECK_INT(ctx->config->n_targets, 4);
	CHECK_INT(ctx->config->n_warnings, 0);
	const struct dli_target *t;
	if ((t = target(ctx, 0))) {
		CHECK_INT(t->schedule.start_step, 0);
		CHECK(t->schedule.end_step == DLI_NEVER);
		CHECK_INT(t->schedule.n_ranges, 0);
	}
	if ((t = target(ctx, 1))) {
		CHECK_INT(t->tensors, ACT);
		CHECK_INT(t->schedule.start_step, 0);
	}
	if ((t = target(ctx, 2))) {
		CHECK_INT(t->tensors, WEIGHT);
		CHECK_INT(t->schedule.start_step, 7);
		CHECK_INT(t->schedule.n_ranges, 0);
	}
	if ((t = target(ctx, 3))) {
		CHECK_STR(t->feature->desc->name, "LogTensorStats");
		CHECK_INT(t->schedule.freq, 1);
		CHECK_INT(t->schedule.start_step, 3);
		CHECK_INT(t->schedule.n_ranges, 0);
	}
	dli_destroy(ctx);
}

/* YAML 1.1 numbers as PyYAML reads them (0x10, 1_000, 017 octal), integral floats (1e3) where a
 * step is meant, `end_step: -1` and a start_end_list end of -1 as "no end", and booleans the
 * Python way. Probe is not in the base namespace: its start_end_list ends are inclusive. */
static void test_yaml11_and_no_end(void)
{
	struct dli_context *ctx = load_ok("yaml 1.1",
		"sec:\n  enabled: On\n  layers: {layer_numbers: all}\n"
		"  Probe:\n"
		"    enabled: TRUE\n"
		"    tensors: [activation]\n"
		"    freq: 0x10\n"
		"    start_step: 1_000\n"
		"    end_step: -1\n"
		"  ProbeB:\n"
		"    enabled: yes\n"
		"    tensors: weight\n"
		"    freq: 1e1\n"
		"    start_end_list: [[017, 2.0e+1], [100, -1]]\n");
	if (!ctx)
		return;
	const struct dli_target *t = target(ctx, 0);
	if (t) {
		CHECK_INT(t->schedule.freq, 16);
		CHECK_INT(t->schedule.start_step, 1000);
		CHECK_INT(t->schedule.end_step, DLI_NEVER);
	}
	t = target(ctx, 1);
	if (t) {
		CHECK_INT(t->schedule.freq, 10);
		CHECK_INT(t->schedule.n_ranges, 2);
		if (t->schedule.n_ranges == 2) {
			CHECK_INT(t->schedule.ranges[0].first, 15);
			CHECK_INT(t->schedule.ranges[0].second, 20);
			CHECK_INT(t->schedule.ranges[1].first, 100);
			CHECK_INT(t->schedule.ranges[1].second, DLI_NEVER);
		}
	}
	dli_destroy(ctx);
}

/* '_' right after a 0x, 0b or octal 0 prefix, as PyYAML takes it ("0_10" is octal 8). */
static void test_yaml11_underscore_after_prefix(void)
{
	struct dli_context *ctx = load_ok("yaml 1.1 underscores",
		"sec:\n  enabled: true\n  layers: {layer_numbers: all}\n"
		"  Probe:\n"
		"    enabled: true\n"
		"    tensors: [activation]\n"
		"    freq: 0b_1_1\n"
		"    start_step: 0_10\n"
		"    end_step: 0x_1_0\n");
	if (!ctx)
		return;
	const struct dli_target *t = target(ctx, 0);
	if (t) {
		CHECK_INT(t->schedule.freq, 3);
		CHECK_INT(t->schedule.start_step, 8);
		CHECK_INT(t->schedule.end_step, 16);
	}
	dli_destroy(ctx);
}

static void test_gemms(void)
{
	struct dli_context *ctx = load_ok("gemms",
		"a:\n"
		"  enabled: true\n"
		"  layers: {layer_types: fc1}\n"
		"  probe_ns:\n"
		"    ProbeGemm: {enabled: true, gemms: [fprop, wgrad], freq: 3}\n"
		"b:\n"
		"  enabled: true\n"
		"  layers: {layer_types: fc2}\n"
		"  probe_ns:\n"
		"    ProbeGemm: {enabled: true, gemms: dgrad}\n"
		"c:\n"
		"  enabled: true\n"
		"  layers: {layer_types: proj}\n"
		"  probe_ns:\n"
		"    ProbeGemm:\n"
		"      enabled: true\n"
		"      freq: 4\n"
		"      label: shared\n"
		"      gemms_struct:\n"
		"        - gemm: fprop\n"
		"          freq: 5\n"
		"        - gemm: wgrad\n"
		"          label: w\n"
		"          end_step: 50\n");
	if (!ctx)
		return;
	CHECK_INT(ctx->config->n_targets, 4);
	const struct dli_target *t = target(ctx, 0);
	if (t) {
		CHECK_INT(t->gemms, FPROP | WGRAD);
		CHECK_INT(t->tensors, ~0ull); /* ProbeGemm takes no tensors: all of them */
		CHECK_INT(t->schedule.freq, 3);
	}
	if ((t = target(ctx, 1)))
		CHECK_INT(t->gemms, DGRAD);
	if ((t = target(ctx, 2))) {
		CHECK_INT(t->gemms, FPROP);
		CHECK_INT(t->schedule.freq, 5);
		CHECK_STR(t->params[P_LABEL].u.s, "shared");
		CHECK_STR(t->where_text, "<string>:20:11");
	}
	if ((t = target(ctx, 3))) {
		CHECK_INT(t->gemms, WGRAD);
		CHECK_INT(t->schedule.freq, 4);
		CHECK_INT(t->schedule.end_step, 50);
		CHECK_STR(t->params[P_LABEL].u.s, "w");
	}
	dli_destroy(ctx);
}

static void test_gemms_struct_with_tensors(void)
{
	struct dli_context *ctx = load_ok("gemms_struct with tensors",
		HDR
		"  ProbeModify:\n"
		"    enabled: true\n"
		"    factor: 2.0\n"
		"    gemms_struct:\n"
		"      - gemm: fprop\n"
		"        tensors: [activation, weight]\n"
		"      - gemm: dgrad\n"
		"        tensors_struct:\n"
		"          - tensor: gradient\n"
		"            scale: 3.5\n"
		"          - {tensor: weight, label: w}\n"
		"  ProbeModify2: {enabled: true, gemms: [wgrad], tensors: [activation]}\n");
	if (!ctx)
		return;
	CHECK_INT(ctx->config->n_targets, 4);
	const struct dli_target *t;
	if ((t = target(ctx, 0))) {
		CHECK_INT(t->gemms, FPROP);
		CHECK_INT(t->tensors, ACT | WEIGHT);
		CHECK(t->params[P_SCALE].u.f == 2.0);
	}
	if ((t = target(ctx, 1))) {
		CHECK_INT(t->gemms, DGRAD);
		CHECK_INT(t->tensors, GRAD);
		CHECK(t->params[P_SCALE].u.f == 3.5);
		CHECK_STR(t->where_text, "<string>:12:13");
	}
	if ((t = target(ctx, 2))) {
		CHECK_INT(t->gemms, DGRAD);
		CHECK_INT(t->tensors, WEIGHT);
		CHECK(t->params[P_SCALE].u.f == 2.0);
		CHECK_STR(t->params[P_LABEL].u.s, "w");
	}
	/* Two modifying features on different gemms of one tensor are fine. */
	if ((t = target(ctx, 3)))
		CHECK_STR(feature_name(t), "ProbeModify2");
	dli_destroy(ctx);
}

static void test_tensors_struct(void)
{
	struct dli_context *ctx = load_ok("tensors_struct",
		HDR
		"  Probe:\n"
		"    enabled: true\n"
		"    stats: [mean]\n"
		"    freq: 10\n"
		"    start_step: 5\n"
		"    end_step: 100\n"
		"    tensors_struct:\n"
		"      - tensor: activation\n"
		"        stats: [min, max]\n"
		"        freq: 2\n"
		"      - tensor: gradient\n"
		"      - tensor: weight\n"
		"        type: std\n"
		"        start_step: 0\n"
		"        end_step: 7\n");
	if (!ctx)
		return;
	CHECK_INT(ctx->config->n_targets, 3);
	const struct dli_target *t;
	if ((t = target(ctx, 0))) {
		CHECK_INT(t->tensors, ACT);
		CHECK_INT(t->params[P_STATS].u.list.n, 2);
		CHECK_INT(t->schedule.freq, 2);
		CHECK_INT(t->schedule.start_step, 5);
		CHECK_INT(t->schedule.end_step, 100);
		CHECK_STR(t->where_text, "<string>:11:9");
	}
	if ((t = target(ctx, 1))) {
		CHECK_INT(t->tensors, GRAD);
		CHECK_INT(t->params[P_STATS].u.list.n, 1);
		if (t->params[P_STATS].u.list.n == 1)
			CHECK_STR(t->params[P_STATS].u.list.items[0], "mean");
		CHECK_INT(t->schedule.freq, 10);
		CHECK_INT(t->schedule.start_step, 5);
	}
	if ((t = target(ctx, 2))) {
		CHECK_INT(t->tensors, WEIGHT);
		CHECK_STR(t->params[P_STATS].u.list.items[0], "std");
		CHECK_INT(t->schedule.freq, 10);
		CHECK_INT(t->schedule.start_step, 0);
		CHECK_INT(t->schedule.end_step, 7);
	}
	dli_destroy(ctx);

	/* An entry's start_end_list replaces the block's start_step/end_step, and the other way. */
	ctx = load_ok("tensors_struct schedule override",
		HDR
		"  Probe:\n"
		"    enabled: true\n"
		"    start_step: 5\n"
		"    end_step: 100\n"
		"    tensors_struct:\n"
		"      - tensor: activation\n"
		"        start_end_list: [[0, 3]]\n"
		"      - tensor: gradient\n"
		"  ProbeB:\n"
		"    enabled: true\n"
		"    start_end_list: [[1, 2]]\n"
		"    tensors_struct:\n"
		"      - {tensor: activation, start_step: 4}\n");
	if (!ctx)
		return;
	CHECK_INT(ctx->config->n_targets, 3);
	if ((t = target(ctx, 0))) {
		CHECK_INT(t->schedule.n_ranges, 1);
		CHECK_INT(t->schedule.start_step, 0);
		CHECK_INT(t->schedule.end_step, DLI_NEVER);
	}
	if ((t = target(ctx, 1))) {
		CHECK_INT(t->schedule.n_ranges, 0);
		CHECK_INT(t->schedule.start_step, 5);
		CHECK_INT(t->schedule.end_step, 100);
	}
	if ((t = target(ctx, 2))) {
		CHECK_INT(t->schedule.n_ranges, 0);
		CHECK_INT(t->schedule.start_step, 4);
	}
	dli_destroy(ctx);
}

/* YAML merge keys, as PyYAML reads them: explicit keys win over merged ones. A disabled feature
 * block may leave out gemms/tensors. */
static void test_merge_keys_and_parked_blocks(void)
{
	struct dli_context *ctx = load_ok("merge keys",
		"s:\n"
		"  enabled: true\n"
		"  layers: {layer_types: [fc1]}\n"
		"  Probe: &base {enabled: true, tensors: [activation], freq: 4, label: a}\n"
		"  ProbeB: {<<: *base, freq: 7, tensors: [weight]}\n"
		"  probe_ns:\n"
		"    ProbeGemm: {enabled: false}\n"
		"  ProbeModify: {enabled: false}\n");
	if (!ctx)
		return;
	CHECK_INT(ctx->config->n_targets, 2);
	const struct dli_target *t;
	if ((t = target(ctx, 1))) {
		CHECK_STR(feature_name(t), "ProbeB");
		CHECK_INT(t->tensors, WEIGHT);
		CHECK_INT(t->schedule.freq, 7);
		CHECK_STR(t->params[0].u.s, "a"); /* label, merged from the anchor */
	}
	dli_destroy(ctx);
}

static void test_anchors(void)
{
	struct dli_context *ctx = load_ok("anchors",
		"s1:\n"
		"  enabled: true\n"
		"  layers: &fc {layer_name_regex_pattern: fc1}\n"
		"  Probe: &common\n"
		"    enabled: true\n"
		"    tensors: &ts [activation, weight]\n"
		"    freq: 3\n"
		"s2:\n"
		"  enabled: true\n"
		"  layers: *fc\n"
		"  ProbeB: *common\n"
		"  ProbeModify: {enabled: true, gemms: [fprop], tensors: *ts}\n");
	if (!ctx)
		return;
	CHECK_INT(ctx->config->n_targets, 3);
	const struct dli_target *t;
	if ((t = target(ctx, 1))) {
		CHECK_STR(feature_name(t), "ProbeB");
		CHECK_INT(t->tensors, ACT | WEIGHT);
		CHECK_INT(t->schedule.freq, 3);
		/* The shared node's position: where the anchor was defined. */
		CHECK_STR(t->where_text, "<string>:11:3");
	}
	if ((t = target(ctx, 2)))
		CHECK_INT(t->tensors, ACT | WEIGHT);
	CHECK(ctx->config->sections[1].selector.regex != NULL);
	CHECK_INT(layer_bindings(ctx, "model.1.fc1"), 3);
	CHECK_INT(layer_bindings(ctx, "model.1.fc2"), 0);
	dli_destroy(ctx);
}

static void test_host_tensor_names(void)
{
	struct dli_context *ctx = load_ok("host tensors",
		HDR
		"  Probe: {enabled: true, tensors: [activatoin, attn_scores, activation]}\n"
		"  ProbeB: {enabled: true, tensors: attn_scores}\n");
	if (!ctx)
		return;
	const struct dli_config *c = ctx->config;
	CHECK_INT(c->n_tensor_names, DLI_TENSOR_STANDARD_COUNT + 2);
	CHECK_STR(c->tensor_names[DLI_TENSOR_STANDARD_COUNT], "activatoin");
	CHECK_STR(c->tensor_names[DLI_TENSOR_STANDARD_COUNT + 1], "attn_scores");
	CHECK_INT(dli_tensor_id(ctx, "activatoin"), DLI_TENSOR_STANDARD_COUNT);
	CHECK_INT(dli_tensor_id(ctx, "attn_scores"), DLI_TENSOR_STANDARD_COUNT + 1);
	CHECK_INT(dli_tensor_id(ctx, "nothing"), -1);
	CHECK_INT(ctx->n_tensors, DLI_TENSOR_STANDARD_COUNT + 2);
	if (target(ctx, 0))
		CHECK_INT(target(ctx, 0)->tensors, ACT | T(6) | T(7));
	if (target(ctx, 1))
		CHECK_INT(target(ctx, 1)->tensors, T(7));
	/* A name close to a standard one is accepted with a warning; a distinct one silently. */
	CHECK_INT(c->n_warnings, 1);
	if (c->n_warnings == 1) {
		CHECK(!strncmp(c->warnings[0], "<string>:4:36: ", 15));
		CHECK_CONTAINS(c->warnings[0], "sec.Probe.tensors: 'activatoin' is not a standard "
					       "tensor (did you mean 'activation'?)");
		CHECK_CONTAINS(c->warnings[0], "host's own tensor");
	}
	dli_destroy(ctx);
}

/* A mistake inside a disabled section or feature block is a warning that says why it is not an
 * error (the peers never read what is disabled), and what is disabled makes no target. */
static void test_disabled_mistakes(void)
{
	struct dli_context *ctx = load_ok("mistakes in what is disabled",
		"off:\n"
		"  enabled: false\n"
		"  Probe: {enabled: true, tensors: [activation], freqq: 1}\n"
		"sec:\n"
		"  enabled: true\n"
		"  layers: {layer_name_regex_pattern: fc1}\n"
		"  Probe: {enabled: false, tensors: [activaton], freq: 0}\n"
		"  ProbeB: {enabled: true, tensors: [weight]}\n");
	if (!ctx)
		return;
	const struct dli_config *c = ctx->config;
	CHECK_INT(c->n_targets, 1);
	CHECK_INT(c->n_warnings, 3);
	if (c->n_warnings == 3) {
		CHECK(!strncmp(c->warnings[0], "<string>:3:49: warning: off.Probe: unknown key 'freqq' "
					       "for Probe (did you mean 'freq'?) (not an error while the "
					       "section is disabled)", 200));
		/* The block's first mistake becomes the warning; the warning about the tensor name
		 * that came before it stays. */
		CHECK_CONTAINS(c->warnings[1], "'activaton' is not a standard tensor");
		CHECK(!strncmp(c->warnings[2], "<string>:7:55: warning: sec.Probe.freq: ", 40));
		CHECK_CONTAINS(c->warnings[2], "(not an error while the feature block is disabled)");
	}
	dli_destroy(ctx);
}

/* A bare `layer_numbers: All` is `all` in any letter case, as nvdlfw_inspect lowercases it; in a
 * list only `all` is (nvdlfw_inspect compares a list's items as they are). */
static void test_layer_numbers_all_any_case(void)
{
	struct dli_context *ctx = load_ok("layer_numbers: All",
		"sec:\n  enabled: true\n  layers: {layer_numbers: All}\n"
		"  Probe: {enabled: true, tensors: [activation]}\n"
		"sec2:\n  enabled: true\n  layers: {layer_numbers: ALL, layer_types: [qkv]}\n"
		"  ProbeB: {enabled: true, tensors: [activation]}\n");
	if (!ctx)
		return;
	CHECK(ctx->config->sections[0].selector.numbers_all);
	CHECK_INT(layer_bindings(ctx, "output_proj"), 1);
	CHECK_INT(layer_bindings(ctx, "model.7.qkv"), 2);
	dli_destroy(ctx);

	struct dli_error err;
	CHECK_INT(load("sec:\n  enabled: true\n  layers: {layer_numbers: [All]}\n", &ctx, &err),
		  -EINVAL);
	CHECK_CONTAINS(err.message, "<string>:3:28: sec.layers.layer_numbers: expected a layer number");
}

/* A config that enables nothing (nvdlfw_inspect refuses one without an enabled section) loads with a
 * warning that says so. */
static void test_enables_nothing_warning(void)
{
	static const struct {
		const char *yaml, *warning;
	} cases[] = {
		{"", "<string>:1:1: warning: the config enables nothing: it has no section "
		     "(nvdlfw_inspect refuses to load it)"},
		{"{}", "<string>:1:1: warning: the config enables nothing: it has no section"},
		{"loggers: {file: {}}\n", "<string>:1:1: warning: the config enables nothing: it has "
					  "no section"},
		{"a: {enabled: false}\nb:\n  enabled: false\n",
		 "<string>:1:1: warning: the config enables nothing: every section is disabled "
		 "(nvdlfw_inspect refuses to load it)"},
	};
	for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
		struct dli_context *ctx = load_ok(cases[i].yaml, cases[i].yaml);
		if (!ctx)
			continue;
		CHECK_INT(ctx->config->n_warnings, 1);
		if (ctx->config->n_warnings == 1)
			CHECK_CONTAINS(ctx->config->warnings[0], cases[i].warning);
		dli_destroy(ctx);
	}
	struct dli_context *ctx = load_ok("disabled blocks",
		"off: {enabled: false}\n"
		"sec:\n  enabled: true\n  layers: {layer_numbers: all}\n"
		"  Probe: {enabled: false}\n");
	if (!ctx)
		return;
	CHECK_INT(ctx->config->n_warnings, 1);
	if (ctx->config->n_warnings == 1)
		CHECK_STR(ctx->config->warnings[0],
			  "<string>:1:1: warning: the config enables nothing: no enabled section has "
			  "an enabled feature block");
	dli_destroy(ctx);
}

/* TransformerEngine reads only the first gemms_struct entry of a GEMM: a second one for the same
 * GEMM makes no instance and is warned about; a duplicate tensors_struct entry is an error. */
static void test_gemms_struct_first_entry_wins(void)
{
	struct dli_context *ctx = load_ok("gemms_struct, two entries for fprop",
		HDR
		"  ProbeModify:\n"
		"    enabled: true\n"
		"    factor: 2.0\n"
		"    gemms_struct:\n"
		"      - {gemm: fprop, tensors: [activation]}\n"
		"      - {gemm: fprop, tensors: [weight], scale: 3.0}\n"
		"      - {gemm: dgrad, tensors: [gradient]}\n");
	if (!ctx)
		return;
	const struct dli_config *c = ctx->config;
	CHECK_INT(c->n_targets, 2);
	const struct dli_target *t;
	if ((t = target(ctx, 0))) {
		CHECK_INT(t->gemms, FPROP);
		CHECK_INT(t->tensors, ACT);
	}
	if ((t = target(ctx, 1)))
		CHECK_INT(t->gemms, DGRAD);
	CHECK_INT(c->n_warnings, 1);
	if (c->n_warnings == 1) {
		CHECK(!strncmp(c->warnings[0], "<string>:9:9: warning: ", 23));
		CHECK_CONTAINS(c->warnings[0], "sec.ProbeModify.gemms_struct: this entry is ignored: "
					       "gemm 'fprop' has an entry before it (at line 8, "
					       "column 9), and TransformerEngine reads only the first "
					       "entry of a GEMM");
	}
	dli_destroy(ctx);

	struct dli_error err;
	CHECK_INT(load(HDR "  Probe:\n"
		       "    enabled: true\n"
		       "    tensors_struct:\n"
		       "      - {tensor: activation}\n"
		       "      - {tensor: activation, label: x}\n",
		       &ctx, &err),
		  -EINVAL);
	CHECK_CONTAINS(err.message, "<string>:8:9: sec.Probe.tensors_struct: Probe is configured "
				    "twice for the same gemm/tensor of these layers: here and at "
				    "<string>:7:9");
}

static void test_regex_warning(void)
{
	struct dli_context *ctx = load_ok("regex with numbers",
		"sec:\n"
		"  enabled: true\n"
		"  layers:\n"
		"    layer_name_regex_pattern: fc1\n"
		"    layer_numbers: [1]\n"
		"  Probe: {enabled: true, tensors: [activation]}\n");
	if (!ctx)
		return;
	const struct dli_config *c = ctx->config;
	CHECK_INT(c->n_warnings, 1);
	if (c->n_warnings == 1) {
		CHECK(!strncmp(c->warnings[0], "<string>:5:5: ", 14));
		CHECK_CONTAINS(c->warnings[0], "sec.layers.layer_numbers: has no effect: "
					       "layer_name_regex_pattern alone decides");
	}
	/* Regex alone decides: layer 7 is selected although layer_numbers says 1. */
	CHECK_INT(layer_bindings(ctx, "model.7.fc1"), 1);
	dli_destroy(ctx);
}

/* Many targets (the array grows), and an alias "bomb" fails fast instead of being expanded. */
static void test_many_targets_and_alias_bomb(void)
{
	char yaml[8192];
	size_t off = 0;
	for (int i = 0; i < 40; i++)
		off += (size_t)snprintf(yaml + off, sizeof yaml - off,
					"s%d:\n  enabled: true\n  layers: {layer_types: fc}\n"
					"  Probe: {enabled: true, tensors: [host%d], label: l%d}\n",
					i, i, i);
	struct dli_context *ctx = load_ok("40 sections", yaml);
	if (ctx) {
		CHECK_INT(ctx->config->n_targets, 40);
		CHECK_INT(ctx->config->n_tensor_names, DLI_TENSOR_STANDARD_COUNT + 40);
		const struct dli_target *t = target(ctx, 39);
		if (t) {
			CHECK_STR(t->section->name, "s39");
			CHECK_STR(t->params[P_LABEL].u.s, "l39");
			CHECK_INT(t->tensors, T(DLI_TENSOR_STANDARD_COUNT + 39));
		}
		CHECK_INT(layer_bindings(ctx, "model.1.fc1"), 40);
		dli_destroy(ctx);
	}

	/* Ten lines that stand for 10^10 nodes: once expanded while sizing the targets (minutes,
	 * then out of memory); now refused as read, at the first list that stands for more than
	 * 10^6 (a5: 1 + 10 * 111111 nodes). */
	off = (size_t)snprintf(yaml, sizeof yaml, "a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n");
	for (int i = 1; i < 10; i++) {
		off += (size_t)snprintf(yaml + off, sizeof yaml - off, "a%d: &a%d [", i, i);
		for (int k = 0; k < 10; k++)
			off += (size_t)snprintf(yaml + off, sizeof yaml - off, "%s*a%d", k ? ", " : "",
						i - 1);
		off += (size_t)snprintf(yaml + off, sizeof yaml - off, "]\n");
	}
	struct dli_error err;
	CHECK_INT(load(yaml, &ctx, &err), -EINVAL);
	CHECK_CONTAINS(err.message, "<string>:6:5: this list stands for more than 1000000 nodes");
	CHECK_CONTAINS(err.message, "(10 entries; the largest, item 1, stands for 111111: the one read at line 5)");
	CHECK_INT(err.line, 6);
}

/* ---- Aliases of TransformerEngine's features ---- */

static void test_feature_aliases(void)
{
	struct dli_context *ctx = load_ok("seed aliases",
		"seed:\n"
		"  enabled: true\n"
		"  layers: {layer_types: [fc1]}\n"
		"  transformer_engine:\n"
		"    disable_fp8_gemm: {enabled: true, gemms: [fprop]}\n"
		"new:\n"
		"  enabled: true\n"
		"  layers: {layer_types: [fc2]}\n"
		"  transformer_engine:\n"
		"    DisableFP8GEMM: {enabled: true, gemms: [dgrad, wgrad]}\n"
		"whole:\n"
		"  enabled: true\n"
		"  layers: {layer_types: [proj]}\n"
		"  transformer_engine:\n"
		"    disable_fp8_layer: {enabled: true}\n"
		"probe_alias:\n"
		"  enabled: true\n"
		"  layers: {layer_types: [qkv]}\n"
		"  probe: {enabled: true, tensors: [activation]}\n");
	if (!ctx)
		return;
	CHECK_INT(ctx->config->n_targets, 4);
	CHECK_STR(feature_name(target(ctx, 0)), "DisableFP8GEMM");
	CHECK_INT(target(ctx, 0) ? target(ctx, 0)->gemms : 0, FPROP);
	CHECK_STR(feature_name(target(ctx, 1)), "DisableFP8GEMM");
	CHECK_STR(feature_name(target(ctx, 2)), "DisableFP8Layer");
	CHECK_INT(target(ctx, 2) ? target(ctx, 2)->gemms : 0, ALL_GEMMS);
	CHECK_STR(feature_name(target(ctx, 3)), "Probe");

	/* And they act: the seed form keeps fprop of fc1 out of FP8, nothing else. */
	CHECK(!dli_fp8_gemm_enabled_by_name(ctx, "model.1.fc1", "fprop", NULL));
	CHECK(dli_fp8_gemm_enabled_by_name(ctx, "model.1.fc1", "wgrad", NULL));
	CHECK(dli_fp8_gemm_enabled_by_name(ctx, "model.1.fc2", "fprop", NULL));
	CHECK(!dli_fp8_gemm_enabled_by_name(ctx, "model.1.fc2", "wgrad", NULL));
	CHECK(!dli_fp8_gemm_enabled_by_name(ctx, "model.1.proj", "dgrad", NULL));
	CHECK(dli_fp8_gemm_enabled_by_name(ctx, "model.1.other", "dgrad", NULL));
	dli_destroy(ctx);
}

/* ---- extensions and loggers ---- */

static bool has_feature(const struct dli_context *ctx, const char *name)
{
	for (size_t i = 0; i < ctx->registry.n_features; i++)
		if (!strcmp(ctx->registry.features[i].desc->name, name))
			return true;
	return false;
}

static void test_extensions(void)
{
	struct dli_context *ctx = load_ok("extensions: module", "extensions: [probe]\n" HDR
					  "  Probe: {enabled: true, tensors: [activation]}\n");
	if (ctx) {
		CHECK(ctx->config->has_extensions);
		CHECK_INT(ctx->config->n_extensions, 1);
		CHECK_STR(ctx->config->extensions[0].name, "probe");
		CHECK_INT(ctx->config->extensions[0].where.line, 1);
		CHECK(has_feature(ctx, "Probe"));
		CHECK(!has_feature(ctx, "DisableFP8GEMM"));
		/* No `loggers`: the file logger comes even though extensions leaves it out. */
		CHECK_INT(ctx->n_loggers, 1);
		dli_destroy(ctx);
	}

	ctx = load_ok("extensions: namespace", "extensions: transformer_engine\n" HDR
		      "  transformer_engine:\n    DisableFP8Layer: {enabled: true}\n");
	if (ctx) {
		CHECK(has_feature(ctx, "DisableFP8GEMM"));
		CHECK(has_feature(ctx, "DisableFP8Layer"));
		CHECK(!has_feature(ctx, "Probe"));
		dli_destroy(ctx);
	}

	ctx = load_ok("no extensions", HDR);
	if (ctx) {
		CHECK(!ctx->config->has_extensions);
		CHECK(has_feature(ctx, "DisableFP8GEMM"));
		CHECK(has_feature(ctx, "Probe"));
		dli_destroy(ctx);
	}

	/* A feature from a module the extensions list leaves out is unknown. */
	struct dli_error err;
	ctx = NULL;
	int r = load("extensions: [probe]\n" HDR "  transformer_engine:\n"
		     "    DisableFP8GEMM: {enabled: true, gemms: [fprop]}\n", &ctx, &err);
	CHECK_INT(r, -EINVAL);
	CHECK(ctx == NULL);
	CHECK_CONTAINS(err.message, "<string>:5:3: sec: unknown feature or namespace "
				    "'transformer_engine'");

	/* options.extensions replaces the config's list. */
	struct dli_options o;
	dli_options_init(&o);
	const char *const only_te[] = {"transformer_engine"};
	o.extensions = only_te;
	o.n_extensions = 1;
	r = load_opts(&o, "extensions: [probe]\n" HDR "  transformer_engine:\n"
			  "    DisableFP8GEMM: {enabled: true, gemms: [fprop]}\n", &ctx, &err);
	CHECK_INT(r, 0);
	if (!r) {
		CHECK(!has_feature(ctx, "Probe"));
		dli_destroy(ctx);
	}
}

static void test_loggers(void)
{
	struct dli_context *ctx = load_ok("loggers file", "loggers:\n  file: {}\n" HDR);
	if (ctx) {
		CHECK(ctx->config->has_loggers);
		CHECK_INT(ctx->config->n_loggers, 1);
		CHECK_STR(ctx->config->loggers[0].name, "file");
		CHECK_INT(ctx->config->loggers[0].where.line, 2);
		CHECK_INT(ctx->n_loggers, 1);
		if (ctx->n_loggers == 1)
			CHECK_STR(ctx->loggers[0].desc->name, "file");
		dli_destroy(ctx);
	}
	/* `file:` with nothing after it is the same as `file: {}`. */
	ctx = load_ok("loggers file null", "loggers:\n  file:\n");
	if (ctx) {
		CHECK_INT(ctx->n_loggers, 1);
		CHECK_INT(ctx->config->n_sections, 0);
		dli_destroy(ctx);
	}
}

static void test_empty_and_default_run(void)
{
	struct dli_context *ctx = load_ok("empty YAML", "");
	if (ctx) {
		CHECK(ctx->config->root == NULL);
		CHECK_INT(ctx->config->n_sections, 0);
		CHECK_INT(layer_bindings(ctx, "model.1.fc1"), 0);
		dli_destroy(ctx);
	}
	ctx = load_ok("comment only", "# nothing here\n");
	dli_destroy(ctx);

	/* No config at all: the default run. */
	unsetenv("DLINSPECT_CONFIG");
	struct dli_options o;
	dli_options_init(&o);
	o.log_dir = log_dir;
	struct dli_error err;
	ctx = NULL;
	CHECK_INT(dli_init(&o, &ctx, &err), 0);
	if (ctx) {
		CHECK(ctx->config == NULL);
		CHECK(dli_fp8_gemm_enabled_by_name(ctx, "model.1.fc1", "fprop", NULL));
		dli_destroy(ctx);
	}
}

/* ---- Errors ---- */

struct bad_case {
	const char *name;
	const char *yaml;
	int code;
	int line, column;
	const char *parts[3]; /* each must appear in the message */
};

static const struct bad_case bad_cases[] = {
	/* Required keys. */
	{"section without enabled", "sec:\n  layers: {layer_numbers: all}\n", -EINVAL, 1, 1,
	 {"sec: missing 'enabled' (true or false)"}},
	{"enabled section without layers",
	 "sec:\n  enabled: true\n  Probe: {enabled: true, tensors: [activation]}\n", -EINVAL, 1, 1,
	 {"sec: missing 'layers'"}},
	{"feature without enabled", HDR "  Probe:\n    tensors: [activation]\n", -EINVAL, 4, 3,
	 {"sec.Probe: missing 'enabled' (true or false)"}},
	{"feature without tensors", HDR "  Probe: {enabled: true}\n", -EINVAL, 4, 3,
	 {"sec.Probe: Probe needs 'tensors' (or 'tensors_struct')"}},
	{"feature without gemms", HDR "  probe_ns:\n    ProbeGemm: {enabled: true}\n", -EINVAL, 5, 5,
	 {"sec.probe_ns.ProbeGemm: ProbeGemm needs 'gemms' (or 'gemms_struct')"}},
	{"struct entry without its id",
	 HDR "  Probe:\n    enabled: true\n    tensors_struct:\n      - freq: 2\n", -EINVAL, 7, 9,
	 {"sec.Probe.tensors_struct: entry without 'tensor:'"}},

	/* Wrong types and values. */
	{"section enabled: maybe", "sec:\n  enabled: maybe\n  layers: {layer_numbers: all}\n", -EINVAL,
	 2, 12, {"sec.enabled: expected true or false, got 'maybe'"}},
	{"feature enabled: maybe", HDR "  Probe: {enabled: maybe, tensors: [activation]}\n", -EINVAL, 4,
	 20, {"sec.Probe.enabled: expected true or false, got 'maybe'"}},
	{"quoted enabled", HDR "  Probe: {enabled: \"true\", tensors: [activation]}\n", -EINVAL, 4, 20,
	 {"sec.Probe.enabled: expected true or false, got 'true'"}},
	{"freq: often",
	 HDR "  probe_ns:\n    ProbeGemm:\n      enabled: true\n      gemms: [fprop]\n      freq: often\n",
	 -EINVAL, 8, 13, {"sec.probe_ns.ProbeGemm.freq: expected an integer, got 'often'"}},
	{"freq: 0",
	 HDR "  probe_ns:\n    ProbeGemm:\n      enabled: true\n      gemms: [fprop]\n      freq: 0\n",
	 -EINVAL, 8, 13, {"sec.probe_ns.ProbeGemm.freq: expected an integer >= 1, got 0"}},
	{"start_step: -1", HDR "  Probe: {enabled: true, tensors: [activation], start_step: -1}\n",
	 -EINVAL, 4, 61, {"sec.Probe.start_step: expected a step >= 0, got -1"}},
	{"end before start",
	 HDR "  Probe:\n    enabled: true\n    tensors: [activation]\n    start_step: 10\n"
	     "    end_step: 5\n",
	 -EINVAL, 7, 5, {"sec.Probe: end_step (5) is before start_step (10)"}},
	{"start_end_list with start_step",
	 HDR "  Probe:\n    enabled: true\n    tensors: [activation]\n    start_step: 1\n"
	     "    start_end_list: [[1, 2]]\n",
	 -EINVAL, 7, 5, {"sec.Probe: start_end_list replaces start_step/end_step"}},
	{"start_end_list bad pair",
	 HDR "  Probe:\n    enabled: true\n    tensors: [activation]\n"
	     "    start_end_list: [[1, 2], [5, 3]]\n",
	 -EINVAL, 7, 30,
	 {"sec.Probe.start_end_list: expected [start, end] with 0 <= start <= end, got [5, 3]"}},
	{"freq with a fraction",
	 HDR "  Probe: {enabled: true, tensors: [activation], freq: 1.5}\n", -EINVAL, 4, 55,
	 {"sec.Probe.freq: expected an integer, got '1.5' (a number with a fraction)"}},
	{"leading 0 with an 8",
	 HDR "  Probe: {enabled: true, tensors: [activation], start_step: 08}\n", -EINVAL, 4, 61,
	 {"sec.Probe.start_step: expected an integer, got '08' (a leading 0 makes a YAML 1.1 octal "
	  "number, whose digits are 0-7: PyYAML reads '08' as a string; write 8 without the 0)"}},
	{"end_step below -1",
	 HDR "  Probe: {enabled: true, tensors: [activation], end_step: -2}\n", -EINVAL, 4, 59,
	 {"sec.Probe.end_step: expected a step >= 0, or -1 for no end, got -2"}},
	{"start_end_list not pairs",
	 HDR "  Probe:\n    enabled: true\n    tensors: [activation]\n    start_end_list: [1, 2]\n",
	 -EINVAL, 7, 22, {"sec.Probe.start_end_list: expected a [start, end] pair, got a scalar"}},
	{"gemms: [fpropp]",
	 HDR "  probe_ns:\n    ProbeGemm:\n      enabled: true\n      gemms: [fpropp]\n", -EINVAL, 7,
	 15,
	 {"sec.probe_ns.ProbeGemm.gemms: unknown gemm 'fpropp' (did you mean 'fprop'?); expected "
	  "one of: fprop, dgrad, wgrad"}},
	{"gemms_struct gemm: fpropp",
	 HDR "  probe_ns:\n    ProbeGemm:\n      enabled: true\n      gemms_struct:\n"
	     "        - gemm: fpropp\n",
	 -EINVAL, 8, 17, {"sec.probe_ns.ProbeGemm.gemms_struct.gemm: unknown gemm 'fpropp' (did you "
			  "mean 'fprop'?)"}},
	{"gemms: []", HDR "  probe_ns:\n    ProbeGemm: {enabled: true, gemms: []}\n", -EINVAL, 5, 39,
	 {"sec.probe_ns.ProbeGemm.gemms: expected a list of gemms (fprop, dgrad, wgrad), got an empty "
	  "list"}},
	{"tensors as a mapping",
	 HDR "  Probe:\n    enabled: true\n    tensors: {activation: 1}\n", -EINVAL, 6, 14,
	 {"sec.Probe.tensors: expected a list of tensor names, got a mapping"}},
	{"stats: maxx",
	 HDR "  Probe:\n    enabled: true\n    tensors: [activation]\n    stats: [min, maxx]\n", -EINVAL,
	 7, 18,
	 {"sec.Probe.stats: unknown stats 'maxx' (did you mean 'max'?); expected one of: min, max, "
	  "mean, std"}},
	{"type: maxx (alias)",
	 HDR "  Probe:\n    enabled: true\n    tensors: [activation]\n    type: maxx\n", -EINVAL, 7, 11,
	 {"sec.Probe.type: unknown stats 'maxx' (did you mean 'max'?)"}},
	{"stats listed twice",
	 HDR "  Probe:\n    enabled: true\n    tensors: [activation]\n    stats: [min, min]\n", -EINVAL,
	 7, 18, {"sec.Probe.stats: 'min' is listed twice"}},
	{"scale: abc",
	 HDR "  Probe:\n    enabled: true\n    tensors: [activation]\n    scale: abc\n", -EINVAL, 7, 12,
	 {"sec.Probe.scale: expected a number, got 'abc'"}},
	/* NaN is no value of any float parameter, with or without a range in its schema. */
	{"scale: .nan",
	 HDR "  Probe:\n    enabled: true\n    tensors: [activation]\n    scale: .nan\n", -EINVAL, 7, 12,
	 {"sec.Probe.scale: expected a number, got '.nan'"}},
	{"label as a list",
	 HDR "  Probe:\n    enabled: true\n    tensors: [activation]\n    label: [a]\n", -EINVAL, 7, 12,
	 {"sec.Probe.label: expected a string, got a list"}},
	{"feature block not a mapping", HDR "  Probe: true\n", -EINVAL, 4, 10,
	 {"sec.Probe: expected a mapping with 'enabled' and Probe's keys, got a scalar"}},
	{"section not a mapping", "extension: [probe]\n", -EINVAL, 1, 1,
	 {"extension: a section must be a mapping", "(did you mean 'extensions'?)"}},

	/* Key and alias both given. */
	{"stats and type",
	 HDR "  Probe:\n    enabled: true\n    tensors: [activation]\n    stats: [min]\n"
	     "    type: [max]\n",
	 -EINVAL, 8, 5, {"sec.Probe: 'stats' is given twice (as 'stats' and as 'type')"}},
	{"scale and factor", HDR "  Probe: {enabled: true, tensors: [activation], factor: 2, scale: 3}\n",
	 -EINVAL, 4, 60, {"sec.Probe: 'scale' is given twice (as 'scale' and as 'factor')"}},

	/* Unknown keys with did-you-mean. */
	{"unknown feature in section", HDR "  Prob: {enabled: true, tensors: [activation]}\n", -EINVAL,
	 4, 3, {"sec: unknown feature or namespace 'Prob' (did you mean 'Probe'?)"}},
	{"unknown namespace", HDR "  transformer_engin:\n    DisableFP8Layer: {enabled: true}\n",
	 -EINVAL, 4, 3, {"(did you mean 'transformer_engine'?)"}},
	{"unknown feature in namespace", HDR "  probe_ns:\n    ProbeGem: {enabled: true}\n", -EINVAL, 5,
	 5,
	 {"sec.probe_ns: unknown feature 'ProbeGem' in namespace 'probe_ns' (did you mean "
	  "'ProbeGemm'?)"}},
	{"feature in another namespace",
	 HDR "  transformer_engine:\n    Probe: {enabled: true, tensors: [activation]}\n", -EINVAL, 5,
	 5, {"sec.transformer_engine: 'Probe' is not in namespace 'transformer_engine' (it is in "
	     "'probe_ns')"}},
	{"unknown key in layers", "sec:\n  enabled: true\n  layers:\n    layer_number: 3\n", -EINVAL, 4,
	 5, {"sec.layers: unknown key 'layer_number' (did you mean 'layer_numbers'?)"}},
	{"unknown key in feature",
	 HDR "  Probe:\n    enabled: true\n    tensors: [activation]\n    freqq: 3\n", -EINVAL, 7, 5,
	 {"sec.Probe: unknown key 'freqq' for Probe (did you mean 'freq'?)"}},
	{"unknown key in struct entry",
	 HDR "  Probe:\n    enabled: true\n    tensors_struct:\n      - tensor: activation\n"
	     "        stat: [min]\n",
	 -EINVAL, 8, 9, {"sec.Probe.tensors_struct: unknown key 'stat' for Probe (did you mean "
			 "'stats'?)"}},
	{"gemms for a feature without gemms",
	 HDR "  Probe:\n    enabled: true\n    tensors: [activation]\n    gemms: [fprop]\n", -EINVAL, 7,
	 5, {"sec.Probe: unknown key 'gemms' for Probe", "(this feature does not act per GEMM)"}},
	{"gemms for DisableFP8Layer",
	 HDR "  transformer_engine:\n    disable_fp8_layer: {enabled: true, gemms: [fprop]}\n", -EINVAL,
	 5, 40,
	 {"sec.transformer_engine.disable_fp8_layer: unknown key 'gemms' for DisableFP8Layer",
	  "(this feature does not act per GEMM)"}},
	{"freq for an unscheduled feature",
	 HDR "  ProbeModify: {enabled: true, gemms: [fprop], tensors: [activation], freq: 2}\n",
	 -EINVAL, 4, 71, {"unknown key 'freq' for ProbeModify", "(this feature is not scheduled)"}},
	{"gemms inside a gemms_struct entry",
	 HDR "  probe_ns:\n    ProbeGemm:\n      enabled: true\n      gemms_struct:\n"
	     "        - {gemm: fprop, gemms: [dgrad]}\n",
	 -EINVAL, 8, 25, {"unknown key 'gemms' for ProbeGemm", "inside a gemms_struct entry"}},
	{"ProbeGemm directly in a section", HDR "  ProbeGemm: {enabled: true, gemms: [fprop]}\n",
	 -EINVAL, 4, 3, {"sec: ProbeGemm belongs in the section's 'probe_ns:' block"}},
	{"DisableFP8GEMM directly in a section", HDR "  DisableFP8GEMM: {enabled: true, gemms: [fprop]}\n",
	 -EINVAL, 4, 3, {"sec: DisableFP8GEMM belongs in the section's 'transformer_engine:' block"}},
	{"typo in an enabled section's enabled block",
	 HDR "  Probe: {enabled: true, tensors: [activation], freqq: 1}\n",
	 -EINVAL, 4, 49, {"sec.Probe: unknown key 'freqq' for Probe (did you mean 'freq'?)"}},
	{"a block whose 'enabled' is not a bool",
	 HDR "  Probe: {enabled: sure, tensors: [activatoin], freq: 0}\n",
	 -EINVAL, 4, 20, {"sec.Probe.enabled: expected true or false, got 'sure'"}},

	/* Layers. */
	{"bad regex, quoted: the column points into the pattern",
	 "sec:\n  enabled: true\n  layers:\n    layer_name_regex_pattern: 'fc(1'\n", -EINVAL, 4, 36,
	 {"bad regular expression 'fc(1': ", "at offset 4"}},
	{"merge key with a scalar",
	 "sec:\n  enabled: true\n  layers: {<<: 3, layer_numbers: all}\n", -EINVAL, 3, 16,
	 {"'<<' merges mappings: expected a mapping or a list of mappings"}},
	{"bad regex",
	 "sec:\n  enabled: true\n  layers:\n    layer_name_regex_pattern: fc(1\n", -EINVAL, 4, 35,
	 {"sec.layers.layer_name_regex_pattern: bad regular expression 'fc(1': ",
	  "missing closing parenthesis", "at offset 4"}},
	{"range 5-2", "sec:\n  enabled: true\n  layers:\n    layer_numbers: [1, \"5-2\"]\n", -EINVAL, 4,
	 24,
	 {"sec.layers.layer_numbers: expected a layer number or an inclusive range 'a-b' (a <= b), "
	  "got '5-2' (start after end)"}},
	{"range a-b", "sec:\n  enabled: true\n  layers:\n    layer_numbers: [a-b]\n", -EINVAL, 4, 21,
	 {"sec.layers.layer_numbers: expected a layer number or an inclusive range 'a-b'",
	  "got 'a-b'"}},
	{"range -3", "sec:\n  enabled: true\n  layers:\n    layer_numbers: -3\n", -EINVAL, 4, 20,
	 {"sec.layers.layer_numbers: expected a layer number or an inclusive range 'a-b'",
	  "got '-3'"}},
	{"empty layers", "sec:\n  enabled: true\n  layers: {}\n", -EINVAL, 3, 11,
	 {"sec.layers: expected a mapping with at least one of layer_name_regex_pattern"}},
	{"layer_types as a mapping", "sec:\n  enabled: true\n  layers:\n    layer_types: {a: b}\n",
	 -EINVAL, 4, 18, {"sec.layers.layer_types: expected a list of layer types, got a mapping"}},

	/* Features configured twice, or two modifiers, within one section. */
	{"Probe generic and in its namespace",
	 HDR "  Probe: {enabled: true, tensors: [activation]}\n  probe_ns:\n"
	     "    Probe: {enabled: true, tensors: [weight, activation]}\n",
	 -EINVAL, 6, 5,
	 {"sec.probe_ns.Probe: Probe is configured twice for the same gemm/tensor of these layers: "
	  "here and at <string>:4:3"}},
	{"Probe by name and by alias",
	 HDR "  Probe: {enabled: true, tensors: [activation]}\n  probe: {enabled: true, tensors: "
	     "[activation]}\n",
	 -EINVAL, 5, 3, {"sec.probe: Probe is configured twice", "here and at <string>:4:3"}},
	{"tensors_struct lists activation twice",
	 HDR "  Probe:\n    enabled: true\n    tensors_struct:\n      - tensor: activation\n"
	     "      - tensor: weight\n      - tensor: activation\n        freq: 2\n",
	 -EINVAL, 9, 9,
	 {"sec.Probe.tensors_struct: Probe is configured twice for the same gemm/tensor of these "
	  "layers: here and at <string>:7:9"}},
	{"two modifiers of one (gemm, tensor)",
	 HDR "  ProbeModify: {enabled: true, gemms: [fprop], tensors: [activation]}\n"
	     "  ProbeModify2: {enabled: true, gemms: [fprop, dgrad], tensors: [activation]}\n",
	 -EINVAL, 5, 3,
	 {"sec.ProbeModify2: ProbeModify2 and ProbeModify (at <string>:4:3) would both modify the "
	  "same tensor", "only one feature may modify a (gemm, tensor)"}},

	/* YAML itself. */
	{"duplicate key", "sec:\n  enabled: true\n  enabled: false\n", -EINVAL, 3, 3,
	 {"duplicate key 'enabled' (first given at line 2, column 3)"}},
	{"duplicate section", "a:\n  enabled: false\nb:\n  enabled: false\na: {enabled: true}\n",
	 -EINVAL, 5, 1, {"duplicate key 'a' (first given at line 1, column 1)"}},
	{"tab indentation", "sec:\n  enabled: true\n\tlayers: x\n", -EINVAL, 3, 1,
	 {"invalid YAML: found a tab character that violates indentation"}},
	/* libyaml reports where it gave up; the message also says where the list began. */
	{"unclosed flow sequence", "sec:\n  enabled: true\n  layers: [a, b\n  x: 1\n", -EINVAL, 4, 4,
	 {"invalid YAML: did not find expected ',' or ']' while parsing a flow sequence",
	  "started at line 3, column 11"}},
	{"start_end_list and end_step in one entry",
	 HDR "  Probe:\n    enabled: true\n    tensors_struct:\n      - tensor: activation\n"
	     "        start_end_list: [[0, 1]]\n        end_step: 4\n",
	 -EINVAL, 8, 9,
	 {"sec.Probe.tensors_struct: start_end_list replaces start_step/end_step: give one or the "
	  "other"}},
	{"gemms and gemms_struct",
	 HDR "  probe_ns:\n    ProbeGemm:\n      enabled: true\n      gemms: [fprop]\n"
	     "      gemms_struct:\n        - gemm: dgrad\n",
	 -EINVAL, 9, 9, {"sec.probe_ns.ProbeGemm: give 'gemms' or 'gemms_struct', not both"}},
	{"layers: nothing", "sec:\n  enabled: true\n  layers:\n", -EINVAL, 3, 10,
	 {"sec.layers: expected a mapping with at least one of", "got nothing"}},
	{"struct entry with enabled",
	 HDR "  Probe:\n    enabled: true\n    tensors_struct:\n      - tensor: activation\n"
	     "        enabled: true\n",
	 -EINVAL, 8, 9,
	 {"sec.Probe.tensors_struct: unknown key 'enabled' for Probe ('enabled' belongs to the "
	  "feature block, not to a struct entry)"}},
	{"unknown alias", HDR "  Probe: *nothing\n", -EINVAL, 4, 10, {"unknown alias '*nothing'"}},
	{"top level is a list", "- a\n- b\n", -EINVAL, 1, 1,
	 {"the top level must be a mapping of sections", "got a list"}},
	{"top level is a scalar", "hello\n", -EINVAL, 1, 1,
	 {"the top level must be a mapping of sections", "got a scalar"}},
	{"a second document", "sec:\n  enabled: false\n---\nother:\n  enabled: false\n", -EINVAL, 3,
	 1, {"a second YAML document; a config is one document"}},
	{"mapping as a key", "{a: 1}: x\n", -EINVAL, 1, 1, {"mapping keys must be plain names"}},

	/* extensions and loggers. */
	{"unknown extension", "extensions: [probee]\n" HDR, -ENOENT, 1, 14,
	 {"extensions: 'probee': extension 'probee' not found", "(did you mean 'probe'?)"}},
	{"extensions as a mapping", "extensions: {probe: 1}\n", -EINVAL, 1, 13,
	 {"extensions: expected a list of module names or namespaces, got a mapping"}},
	{"extension listed twice", "extensions: [probe, probe]\n", -EINVAL, 1, 21,
	 {"extensions: 'probe' is listed twice"}},
	{"unknown logger", "loggers:\n  file: {}\n  tensorbord: {flush_secs: 10}\n" HDR, -ENOENT, 3,
	 3, {"loggers.tensorbord: no loaded module provides the logger 'tensorbord'"}},
	{"loggers as a list", "loggers: [file]\n", -EINVAL, 1, 10,
	 {"loggers: expected a mapping of logger names to their parameters"}},
	{"logger params not a mapping", "loggers:\n  file: 3\n", -EINVAL, 2, 9,
	 {"loggers.file: expected a mapping of parameters, got a scalar"}},
	{"unknown logger parameter", "loggers:\n  file: {overwrites: 1}\n", -EINVAL, 2, 10,
	 {"loggers.file: unknown key 'overwrites'", "did you mean 'overwrite'?"}},

	/* A plugin's create() failing: the block's position, the module the feature came from (name
	 * and file, as the loader names one) and the plugin's text. */
	{"create fails",
	 HDR "  Probe:\n    enabled: true\n    tensors: [activation]\n    fail: true\n", -EINVAL, 4, 3,
	 {"sec.Probe: module 'probe' (/",
	  "/tests/unit/probe.so) could not create the feature: probe asked to fail"}},
	{"create fails in a struct entry",
	 HDR "  Probe:\n    enabled: true\n    tensors_struct:\n      - tensor: gradient\n"
	     "      - {tensor: activation, fail: true}\n",
	 -EINVAL, 8, 9,
	 {"sec.Probe: module 'probe' (/",
	  "/tests/unit/probe.so) could not create the feature: probe asked to fail"}},
	/* ... with no message: its errno stands for one */
	{"create fails silently",
	 HDR "  Probe:\n    enabled: true\n    tensors: [activation]\n    fail_silently: true\n",
	 -EPERM, 4, 3,
	 {"sec.Probe: module 'probe' (/",
	  "/tests/unit/probe.so) could not create the feature: Operation not permitted (-1)"}},
};

static void check_bad(const struct bad_case *c)
{
	struct dli_context *ctx = (struct dli_context *)&ctx; /* must be reset to NULL */
	struct dli_error err;
	memset(&err, 0x5a, sizeof err);
	int r = load(c->yaml, &ctx, &err);
	int before = check_failures;
	CHECK_INT(r, c->code);
	CHECK_INT(err.code, c->code);
	CHECK(ctx == NULL);
	if (c->line) {
		char prefix[64];
		snprintf(prefix, sizeof prefix, "<string>:%d:%d: ", c->line, c->column);
		CHECK_STR(err.file, "<string>");
		CHECK_INT(err.line, c->line);
		CHECK_INT(err.column, c->column);
		CHECK(!strncmp(err.message, prefix, strlen(prefix)));
	} else {
		CHECK(!strncmp(err.message, "<string>:", 9));
		CHECK(err.line > 0 && err.column > 0);
	}
	for (size_t i = 0; i < 3 && c->parts[i]; i++)
		CHECK_CONTAINS(err.message, c->parts[i]);
	if (check_failures != before)
		fprintf(stderr, "  in case \"%s\": %s\n", c->name, err.message);
	if (r == 0)
		dli_destroy(ctx);
}

static void test_bad_configs(void)
{
	for (size_t i = 0; i < sizeof bad_cases / sizeof bad_cases[0]; i++)
		check_bad(&bad_cases[i]);
}

/* Two sections may select one layer; the same feature for one (gemm, tensor) of it is an error
 * found when the layer is resolved, naming both places and the layer. */
static void test_cross_section_duplicates(void)
{
	struct dli_context *ctx = load_ok("two sections",
		"s1:\n"
		"  enabled: true\n"
		"  layers: {layer_name_regex_pattern: fc1}\n"
		"  Probe: {enabled: true, tensors: [activation]}\n"
		"  ProbeModify: {enabled: true, gemms: [fprop], tensors: [weight]}\n"
		"s2:\n"
		"  enabled: true\n"
		"  layers: {layer_numbers: [1, 2]}\n"
		"  probe_ns:\n"
		"    Probe: {enabled: true, tensors: [activation, weight]}\n"
		"s3:\n"
		"  enabled: true\n"
		"  layers: {layer_numbers: 3}\n"
		"  ProbeB: {enabled: true, tensors: [activation]}\n"
		"  ProbeModify2: {enabled: true, gemms: [fprop], tensors: [weight]}\n");
	if (!ctx)
		return;
	struct dli_layer *l = (struct dli_layer *)&l;
	struct dli_error err;
	memset(&err, 0, sizeof err);
	int r = dli_layer_get(ctx, "model.1.fc1", &l, &err);
	CHECK_INT(r, -EINVAL);
	CHECK(l == NULL);
	CHECK_INT(err.line, 10);
	CHECK_INT(err.column, 5);
	CHECK_CONTAINS(err.message, "<string>:10:5: layer 'model.1.fc1': Probe is configured twice "
				    "for the same gemm/tensor, by section 's2' here and by section "
				    "'s1' at <string>:4:3");

	/* Layers only one of the sections selects work. */
	CHECK_INT(layer_bindings(ctx, "model.5.fc1"), 2); /* s1 */
	CHECK_INT(layer_bindings(ctx, "model.2.fc2"), 1); /* s2 */
	/* ProbeB differs from Probe: fine; two modifiers of fprop/weight through s1 and s3 are not. */
	r = dli_layer_get(ctx, "model.3.fc1", &l, &err);
	CHECK_INT(r, -EINVAL);
	CHECK_INT(err.line, 15);
	CHECK_CONTAINS(err.message, "layer 'model.3.fc1': ProbeModify2 (section 's3', here) and "
				    "ProbeModify (section 's1', at <string>:5:3) would both modify");
	CHECK_INT(layer_bindings(ctx, "model.3.fc2"), 2); /* s3 alone */
	/* The failed layer is not cached: asking again fails again. */
	CHECK_INT(dli_layer_get(ctx, "model.1.fc1", &l, &err), -EINVAL);
	dli_destroy(ctx);
}

/* ---- Config files and the environment ---- */

static void test_paths(void)
{
	struct dli_options o;
	struct dli_context *ctx = NULL;
	struct dli_error err;

	dli_options_init(&o);
	o.log_dir = log_dir;
	o.config_path = "/nonexistent/dlinspect/config.yaml";
	CHECK_INT(dli_init(&o, &ctx, &err), -ENOENT);
	CHECK(ctx == NULL);
	CHECK_INT(err.code, -ENOENT);
	CHECK_CONTAINS(err.message, "cannot open config '/nonexistent/dlinspect/config.yaml'");
	CHECK_CONTAINS(err.message, "No such file or directory");

	/* A directory, and a FIFO (whose open would wait for a writer), are refused unread. */
	o.config_path = log_dir;
	CHECK_INT(dli_init(&o, &ctx, &err), -EISDIR);
	CHECK(ctx == NULL);
	char expected[128];
	snprintf(expected, sizeof expected, "cannot open config '%s': Is a directory", log_dir);
	CHECK_CONTAINS(err.message, expected);
	char fifo[sizeof log_dir + 16];
	snprintf(fifo, sizeof fifo, "%s/config.fifo", log_dir);
	CHECK_INT(mkfifo(fifo, 0600), 0);
	o.config_path = fifo;
	CHECK_INT(dli_init(&o, &ctx, &err), -ENXIO);
	CHECK(ctx == NULL);
	snprintf(expected, sizeof expected, "cannot open config '%s': a FIFO or a socket, not a file",
		 fifo);
	CHECK_CONTAINS(err.message, expected);
	unlink(fifo);

	if (geteuid() != 0) {
		char *p = write_temp("sec: {enabled: false}\n");
		if (p) {
			chmod(p, 0);
			o.config_path = p;
			CHECK_INT(dli_init(&o, &ctx, &err), -EACCES);
			CHECK_CONTAINS(err.message, p);
			unlink(p);
			free(p);
		}
	}

	/* A file: positions use its path. */
	char *good = write_temp(HDR "  Probe: {enabled: true, tensors: [activation]}\n");
	char *bad = write_temp(HDR "  Probe: {enabled: true, tensors: [activation], freq: often}\n");
	CHECK(good && bad);
	if (!good || !bad)
		return;
	o.config_path = good;
	CHECK_INT(dli_init(&o, &ctx, &err), 0);
	if (ctx) {
		CHECK_STR(ctx->config->path, good);
		char where[128];
		snprintf(where, sizeof where, "%s:4:3", good);
		CHECK_STR(target(ctx, 0) ? target(ctx, 0)->where_text : NULL, where);
		dli_destroy(ctx);
	}
	o.config_path = bad;
	CHECK_INT(dli_init(&o, &ctx, &err), -EINVAL);
	CHECK_STR(err.file, bad);
	CHECK_INT(err.line, 4);
	CHECK_INT(err.column, 55);
	char prefix[160];
	snprintf(prefix, sizeof prefix, "%s:4:55: sec.Probe.freq: expected an integer", bad);
	CHECK_CONTAINS(err.message, prefix);

	/* config_yaml wins over config_path. */
	o.config_yaml = "other:\n  enabled: false\n";
	o.config_path = bad;
	CHECK_INT(dli_init(&o, &ctx, &err), 0);
	if (ctx) {
		CHECK_STR(ctx->config->path, "<string>");
		dli_destroy(ctx);
	}

	/* DLINSPECT_CONFIG when the options name no config; the options' path wins over it. */
	dli_options_init(&o);
	o.log_dir = log_dir;
	setenv("DLINSPECT_CONFIG", good, 1);
	CHECK_INT(dli_init(&o, &ctx, &err), 0);
	if (ctx) {
		CHECK(ctx->config != NULL);
		if (ctx->config) {
			CHECK_STR(ctx->config->path, good);
			CHECK_INT(ctx->config->n_targets, 1);
		}
		dli_destroy(ctx);
	}
	setenv("DLINSPECT_CONFIG", bad, 1);
	CHECK_INT(dli_init(&o, &ctx, &err), -EINVAL);
	CHECK_STR(err.file, bad);
	o.config_path = good;
	CHECK_INT(dli_init(&o, &ctx, &err), 0);
	dli_destroy(ctx);
	o.config_path = NULL;
	setenv("DLINSPECT_CONFIG", "/nonexistent/env.yaml", 1);
	CHECK_INT(dli_init(&o, &ctx, &err), -ENOENT);
	CHECK_CONTAINS(err.message, "cannot open config '/nonexistent/env.yaml'");
	/* Empty = unset: the default run. */
	setenv("DLINSPECT_CONFIG", "", 1);
	CHECK_INT(dli_init(&o, &ctx, &err), 0);
	if (ctx)
		CHECK(ctx->config == NULL);
	dli_destroy(ctx);
	unsetenv("DLINSPECT_CONFIG");

	unlink(good);
	unlink(bad);
	free(good);
	free(bad);
}

static void test_log_level_env(void)
{
	struct dli_context *ctx = NULL;
	struct dli_error err;
	setenv("DLINSPECT_LOG_LEVEL", "bogus", 1);
	CHECK_INT(load(HDR, &ctx, &err), -EINVAL);
	CHECK(ctx == NULL);
	CHECK_INT(err.code, -EINVAL);
	CHECK_CONTAINS(err.message, "DLINSPECT_LOG_LEVEL='bogus': expected error, warning, info or "
				    "debug");
	CHECK_INT(err.line, 0);

	/* The options' level wins over the environment. */
	struct dli_options o;
	dli_options_init(&o);
	o.log_level = DLI_LOG_ERROR;
	CHECK_INT(load_opts(&o, HDR, &ctx, &err), 0);
	if (ctx)
		CHECK_INT(ctx->log_level, DLI_LOG_ERROR);
	dli_destroy(ctx);

	setenv("DLINSPECT_LOG_LEVEL", "Debug", 1);
	CHECK_INT(load(HDR, &ctx, &err), 0);
	if (ctx)
		CHECK_INT(ctx->log_level, DLI_LOG_DEBUG);
	dli_destroy(ctx);
	setenv("DLINSPECT_LOG_LEVEL", "1", 1);
	CHECK_INT(load(HDR, &ctx, &err), 0);
	if (ctx)
		CHECK_INT(ctx->log_level, DLI_LOG_WARNING);
	dli_destroy(ctx);
	unsetenv("DLINSPECT_LOG_LEVEL");
}

/* Every example config of the project loads. */
static void test_shipped_configs(void)
{
	const char *src = getenv("DLINSPECT_TEST_SRCDIR");
	if (!src) {
		printf("DLINSPECT_TEST_SRCDIR unset: shipped configs not checked\n");
		return;
	}
	char pattern[1024];
	snprintf(pattern, sizeof pattern, "%s/configs/*.yaml", src);
	glob_t g;
	int gr = glob(pattern, 0, NULL, &g);
	if (gr == GLOB_NOMATCH) {
		printf("no configs/*.yaml yet\n");
		return;
	}
	CHECK_INT(gr, 0);
	for (size_t i = 0; gr == 0 && i < g.gl_pathc; i++) {
		struct dli_options o;
		dli_options_init(&o);
		o.log_dir = log_dir;
		o.config_path = g.gl_pathv[i];
		struct dli_context *ctx = NULL;
		struct dli_error err;
		int r = dli_init(&o, &ctx, &err);
		if (r)
			fprintf(stderr, "%s: %s\n", g.gl_pathv[i], err.message);
		CHECK_INT(r, 0);
		dli_destroy(ctx);
	}
	printf("%zu shipped configs checked\n", gr == 0 ? g.gl_pathc : 0);
	globfree(&g);
}

static int remove_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
	return remove(path);
}

int main(void)
{
	if (!mkdtemp(log_dir)) {
		perror("mkdtemp");
		return 1;
	}
	unsetenv("DLINSPECT_CONFIG");
	unsetenv("DLINSPECT_LOG_LEVEL");

	test_layers_keys();
	test_disabled_section();
	test_defaults();
	test_params_and_schedule();
	test_schedule_null_is_not_given();
	test_yaml11_and_no_end();
	test_yaml11_underscore_after_prefix();
	test_gemms();
	test_gemms_struct_with_tensors();
	test_gemms_struct_first_entry_wins();
	test_layer_numbers_all_any_case();
	test_enables_nothing_warning();
	test_tensors_struct();
	test_anchors();
	test_host_tensor_names();
	test_regex_warning();
	test_disabled_mistakes();
	test_many_targets_and_alias_bomb();
	test_merge_keys_and_parked_blocks();
	test_feature_aliases();
	test_extensions();
	test_loggers();
	test_empty_and_default_run();
	test_bad_configs();
	test_cross_section_duplicates();
	test_paths();
	test_log_level_env();
	test_shipped_configs();

	nftw(log_dir, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
	return check_exit();
}
