/* LogTensorStats and LogFp8TensorStats through the real core (dli_init with YAML text, the modules
 * and the file logger from the build tree): which steps log, and that every logged value equals an
 * independent naive reference computed here in double from the same data. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <dlinspect/dlinspect.h>

#include "check.h"
#include "dli-test.h"
#include "kernels-private.h" /* dli_fp8_encode/decode/scale, for the FP8 reference */

#define N_BASIC 12 /* min .. zero%: the LogTensorStats stats, in enum dli_stat order */

static const char *const basic_names[N_BASIC] = {
	"min", "max", "mean", "std", "var", "l1_norm", "l2_norm", "cur_amax", "dynamic_range",
	"nan_count", "inf_count", "zero%",
};
static const char *const fp8_names[7] = {
	"underflows%", "overflows%", "scale_inv_min", "scale_inv_max", "mse", "cos_sim", "sqnr_db",
};

static struct dli_tensor f32(float *x, int64_t n)
{
	return tensor(x, DLI_DTYPE_F32, n);
}

/* ---- Reading the statistics log ---- */

struct line {
	char name[2048];
	long iteration;
	double value;
};

static struct line *lines;
static size_t n_lines;

/* Parses {ts} - INFO - {name} \t\t\t\t iteration={06d} \t\t\t\t value={%.9g} (docs/logging.md).
 * Returns how many lines were read; a line of another layout fails a check. */
static size_t read_stats(void)
{
	char buf[4096];
	free(lines);
	lines = NULL;
	n_lines = 0;
	FILE *f = open_log(STATS_LOG);
	if (!f)
		return 0;
	size_t cap = 0;
	while (fgets(buf, sizeof buf, f)) {
		const char *info = strstr(buf, " - INFO - ");
		const char *it = strstr(buf, " \t\t\t\t iteration=");
		const char *val = strstr(buf, " \t\t\t\t value=");
		CHECK(info && it && val && info < it && it < val);
		if (!info || !it || !val || info > it || it > val)
			continue;
		if (n_lines == cap) {
			cap = cap ? 2 * cap : 64;
			lines = realloc(lines, cap * sizeof *lines);
		}
		struct line *l = &lines[n_lines++];
		info += strlen(" - INFO - ");
		snprintf(l->name, sizeof l->name, "%.*s", (int)(it - info), info);
		l->iteration = strtol(it + strlen(" \t\t\t\t iteration="), NULL, 10);
		l->value = strtod(val + strlen(" \t\t\t\t value="), NULL);
	}
	fclose(f);
	return n_lines;
}

static const struct line *find(const char *name, long iteration)
{
	for (size_t i = 0; i < n_lines; i++)
		if (!strcmp(lines[i].name, name) && lines[i].iteration == iteration)
			return &lines[i];
	return NULL;
}

/* ---- Comparing values ---- */

static bool near(double got, double want, double tol)
{
	if (isnan(want) || isinf(want))
		return isnan(want) ? isnan(got) : got == want;
	return fabs(got - want) <= tol * fabs(want) + 1e-30;
}

/* The logged value of `name` at `iteration` equals `want` (relative `tol`). */
static void check_logged(const char *name, long iteration, double want, double tol)
{
	const struct line *l = find(name, iteration);
	check_count++;
	if (!l) {
		check_failures++;
		fprintf(stderr, "no line for %s at iteration %ld\n", name, iteration);
	} else if (!near(l->value, want, tol)) {
		check_failures++;
		fprintf(stderr, "%s at iteration %ld: logged %.9g, reference %.9g\n", name, iteration,
			l->value, want);
	}
}

/* ---- The naive references ---- */

/* The LogTensorStats stats of x[0..n), plainly, in double, as numpy would with NaN propagating
 * through everything but the counts. */
static void ref_basic(const double *x, size_t n, double out[N_BASIC])
{
	double mn = INFINITY, mx = -INFINITY, sum = 0, l1 = 0, l2 = 0, amax = 0, minnz = INFINITY;
	double nans = 0, infs = 0, zeros = 0;
	for (size_t i = 0; i < n; i++) {
		double v = x[i];
		if (isnan(v)) {
			nans++;
			continue;
		}
		infs += isinf(v) != 0; /* glibc: -1 for -inf */
		zeros += v == 0;
		mn = v < mn ? v : mn;
		mx = v > mx ? v : mx;
		sum += v;
		l1 += fabs(v);
		l2 += v * v;
		amax = fabs(v) > amax ? fabs(v) : amax;
		if (v != 0 && fabs(v) < minnz)
			minnz = fabs(v);
	}
	double mean = nans ? NAN : sum / (double)n, ss = 0;
	for (size_t i = 0; i < n; i++)
		ss += (x[i] - mean) * (x[i] - mean);
	double var = n > 1 ? ss / (double)(n - 1) : NAN;
	double nan_or_0 = nans ? NAN : 0;
	out[0] = mn + nan_or_0;
	out[1] = mx + nan_or_0;
	out[2] = mean;
	out[3] = sqrt(var);
	out[4] = var;
	out[5] = l1 + nan_or_0;
	out[6] = sqrt(l2) + nan_or_0;
	out[7] = amax + nan_or_0;
	out[8] = (amax == 0 ? 0 : log2(amax) - log2(minnz)) + nan_or_0;
	out[9] = nans;
	out[10] = infs;
	out[11] = 100.0 * zeros / (double)n;
}

/* The FP8 stats of x against dq[i] (finite x only), in fp8_names order; scale_inv given. */
static void ref_fp8(const float *x, const double *dq, const bool *over, size_t n,
		    double scale_inv, double out[7])
{
	double count = 0, under = 0, overs = 0, err = 0, dot = 0, xx = 0, dd = 0;
	for (size_t i = 0; i < n; i++) {
		if (!isfinite(x[i]))
			continue;
		count++;
		under += x[i] != 0 && dq[i] == 0;
		overs += over[i];
		err += (x[i] - dq[i]) * (x[i] - dq[i]);
		dot += x[i] * dq[i];
		xx += (double)x[i] * x[i];
		dd += dq[i] * dq[i];
	}
	out[0] = 100 * under / count;
	out[1] = 100 * overs / count;
	out[2] = out[3] = scale_inv;
	out[4] = err / count;
	out[5] = dot / sqrt(xx * dd);
	out[6] = 10 * log10(xx / err);
}

/* What current scaling does to x: the scale from amax (checked against the formula of
 * docs/statistics.md), then x * scale cast with dli_fp8_encode and decoded back. */
static float whatif(const float *x, size_t n, enum dli_dtype fmt, double margin, double *dq,
		    bool *over)
{
	float amax = 0, fmax = fmt == DLI_DTYPE_F8E4M3 ? 448.0f : 57344.0f;
	for (size_t i = 0; i < n; i++)
		if (isfinite(x[i]) && fabsf(x[i]) > amax)
			amax = fabsf(x[i]);
	float scale = dli_fp8_scale(amax, fmt, margin);
	double want = fmax / amax / pow(2, margin);
	CHECK(fabs(scale - want) <= want * 1.2e-7);
	for (size_t i = 0; i < n; i++) {
		float s = x[i] * scale;
		dq[i] = (double)dli_fp8_decode(dli_fp8_encode(s, fmt), fmt) / scale;
		over[i] = fabsf(s) > fmax;
	}
	return scale;
}

/* ---- Data ---- */

static uint64_t rng = 1;

static double uniform(void) /* [0, 1) */
{
	rng = rng * 6364136223846793005ull + 1442695040888963407ull;
	return (double)(rng >> 11) / 9007199254740992.0;
}

static void fill_uniform(float *x, size_t n, double lo, double hi)
{
	for (size_t i = 0; i < n; i++)
		x[i] = (float)(lo + (hi - lo) * uniform());
}

/* Magnitudes spread over 2^lo .. 2^hi, random signs, a few exact zeros: underflows for E4M3. */
static void fill_wide(float *x, size_t n, double lo, double hi)
{
	for (size_t i = 0; i < n; i++)
		x[i] = (float)((uniform() < 0.5 ? -1 : 1) * exp2(lo + (hi - lo) * uniform()));
	for (size_t i = 0; i < n; i += 97)
		x[i] = 0;
}

static void to_double(const float *x, size_t n, double *out)
{
	for (size_t i = 0; i < n; i++)
		out[i] = x[i];
}

/* ---- Scheduling ---- */

/* The schedule of REFERENCE.md, written out independently of core/schedule.c. */
struct sched {
	int freq, start, end; /* end < 0: none */
	int ranges[2][2];
	int n_ranges;
};

static bool selected(const struct sched *s, int it)
{
	if (it % s->freq)
		return false;
	if (s->n_ranges) {
		for (int i = 0; i < s->n_ranges; i++)
			if (it >= s->ranges[i][0] && it <= s->ranges[i][1])
				return true;
		return false;
	}
	return it >= s->start && (s->end < 0 || it <= s->end);
}

/* 25 steps of a host that asks inspect_tensor_enabled each step and calls inspect_tensor every
 * step anyway (the core must filter). The activation holds it + 0.25 at step it, so a logged
 * value also says which step's data it is. */
static void check_schedule(const char *keys, const struct sched *s)
{
	char yaml[1024];
	snprintf(yaml, sizeof yaml,
		 "s:\n  enabled: true\n  layers: {layer_name_regex_pattern: fc1}\n"
		 "  transformer_engine:\n"
		 "    LogTensorStats: {enabled: true, tensors: [activation], stats: [max], %s}\n",
		 keys);
	struct dli_context *ctx = open_yaml(yaml, NULL);
	CHECK(ctx != NULL);
	if (!ctx)
		return;
	struct dli_layer *l = layer(ctx, "model.layers.0.mlp.fc1");
	float x[16];
	int want = 0;
	for (int it = 0; it < 25; it++) {
		int64_t next;
		bool on = dli_inspect_tensor_enabled(l, DLI_TENSOR_ACTIVATION, &next);
		if (on != selected(s, it))
			fprintf(stderr, "schedule {%s}: step %d enabled=%d\n", keys, it, on);
		CHECK(on == selected(s, it));
		for (int i = 0; i < 16; i++)
			x[i] = (float)it + 0.25f - (float)i;
		struct dli_tensor t = f32(x, 16);
		CHECK_INT(dli_inspect_tensor(l, DLI_TENSOR_ACTIVATION, &t, NULL, NULL), 0);
		CHECK_INT(dli_step(ctx), 0);
		want += selected(s, it);
	}
	dli_destroy(ctx);
	read_stats();
	CHECK_INT(n_lines, want);
	for (int it = 0; it < 25; it++)
		if (selected(s, it))
			check_logged("model.layers.0.mlp.fc1_activation_max", it, it + 0.25, 1e-9);
}

static void test_schedules(void)
{
	check_schedule("freq: 1", &(struct sched){1, 0, -1, {{0}}, 0});
	check_schedule("freq: 3", &(struct sched){3, 0, -1, {{0}}, 0});
	check_schedule("freq: 2, start_step: 5, end_step: 16", &(struct sched){2, 5, 16, {{0}}, 0});
	check_schedule("start_step: 20", &(struct sched){1, 20, -1, {{0}}, 0});
	check_schedule("end_step: 3", &(struct sched){1, 0, 3, {{0}}, 0});
	check_schedule("start_end_list: [[2, 5], [11, 13]]",
		       &(struct sched){1, 0, -1, {{2, 5}, {11, 13}}, 2});
	check_schedule("freq: 3, start_end_list: [[0, 7], [12, 24]]",
		       &(struct sched){3, 0, -1, {{0, 7}, {12, 24}}, 2});
}

/* tensors_struct: each tensor its own schedule and stats. */
static void test_tensors_struct(void)
{
	struct dli_context *ctx = open_yaml(
		"s:\n  enabled: true\n  layers: {layer_name_regex_pattern: fc1}\n"
		"  transformer_engine:\n"
		"    LogTensorStats:\n"
		"      enabled: true\n"
		"      stats: [max]\n"
		"      freq: 2\n"
		"      tensors_struct:\n"
		"        - {tensor: activation}\n"
		"        - {tensor: gradient, stats: [min, mean], freq: 5, start_step: 3}\n",
		NULL);
	CHECK(ctx != NULL);
	if (!ctx)
		return;
	struct dli_layer *l = layer(ctx, "model.layers.0.mlp.fc1");
	float x[4];
	for (int it = 0; it < 25; it++) {
		for (int t = 0; t < 2; t++) {
			for (int i = 0; i < 4; i++)
				x[i] = (float)(it * 10 + t + i);
			struct dli_tensor tt = f32(x, 4);
			dli_inspect_tensor(l, t, &tt, NULL, NULL);
		}
		dli_step(ctx);
	}
	dli_destroy(ctx);
	read_stats();
	struct sched act = {2, 0, -1, {{0}}, 0}, grad = {5, 3, -1, {{0}}, 0};
	int want = 0;
	for (int it = 0; it < 25; it++) {
		if (selected(&act, it)) {
			want++;
			check_logged("model.layers.0.mlp.fc1_activation_max", it, it * 10 + 3, 1e-9);
		}
		if (selected(&grad, it)) {
			want += 2;
			check_logged("model.layers.0.mlp.fc1_gradient_min", it, it * 10 + 1, 1e-9);
			check_logged("model.layers.0.mlp.fc1_gradient_mean", it, it * 10 + 2.5, 1e-9);
		}
	}
	CHECK_INT(n_lines, want);
}

/* Layer names have no length limit, and neither have their tags: two 700-character names that
 * differ in their last character log two full tags, not one cut at a buffer's end. */
static void test_long_layer_names(void)
{
	struct dli_context *ctx = open_yaml(
		"s:\n  enabled: true\n  layers: {layer_name_regex_pattern: fc1}\n"
		"  transformer_engine:\n"
		"    LogTensorStats: {enabled: true, tensors: [activation], stats: [max]}\n",
		NULL);
	CHECK(ctx != NULL);
	if (!ctx)
		return;
	char names[2][701];
	for (int k = 0; k < 2; k++) {
		memset(names[k], 'x', 700);
		memcpy(names[k], "fc1.", 4);
		names[k][699] = (char)('a' + k);
		names[k][700] = '\0';
	}
	for (int k = 0; k < 2; k++) {
		float x[2] = {1, (float)(10 + k)};
		struct dli_tensor t = f32(x, 2);
		CHECK_INT(dli_inspect_tensor(layer(ctx, names[k]), DLI_TENSOR_ACTIVATION, &t, NULL, NULL),
			  0);
	}
	dli_step(ctx);
	dli_destroy(ctx);
	read_stats();
	CHECK_INT(n_lines, 2);
	for (int k = 0; k < 2; k++) {
		char tag[800];
		snprintf(tag, sizeof tag, "%s_activation_max", names[k]);
		check_logged(tag, 0, 10 + k, 0);
	}
}

/* ---- Values ---- */

static const char *all_basic =
	"[min, max, mean, std, var, l1_norm, l2_norm, cur_amax, dynamic_range, nan_count, "
	"inf_count, zero%]";

/* One step, one inspect of `t` (whose values are x[0..n)), all 12 stats against ref_basic. */
static void check_values(const char *what, const struct dli_tensor *t, const double *x, size_t n)
{
	char yaml[1024];
	snprintf(yaml, sizeof yaml,
		 "s:\n  enabled: true\n  layers: {layer_name_regex_pattern: fc1}\n"
		 "  transformer_engine:\n"
		 "    LogTensorStats: {enabled: true, tensors: [activation], stats: %s}\n",
		 all_basic);
	struct dli_context *ctx = open_yaml(yaml, NULL);
	CHECK(ctx != NULL);
	if (!ctx)
		return;
	struct dli_layer *l = layer(ctx, "fc1");
	CHECK_INT(dli_inspect_tensor(l, DLI_TENSOR_ACTIVATION, t, NULL, NULL), 0);
	dli_step(ctx);
	dli_destroy(ctx);
	read_stats();
	double want[N_BASIC];
	ref_basic(x, n, want);
	fprintf(stderr, "values: %s\n", what);
	CHECK_INT(n_lines, N_BASIC);
	for (int s = 0; s < N_BASIC; s++) {
		char name[64];
		snprintf(name, sizeof name, "fc1_activation_%s", basic_names[s]);
		/* Extrema and counts are exact; sums may round differently (float lanes). */
		check_logged(name, 0, want[s], s == 0 || s == 1 || s >= 7 ? 1e-8 : 2e-6);
	}
}

static uint16_t bf16_bits(float f) /* round to nearest even */
{
	uint32_t u;
	memcpy(&u, &f, 4);
	return (uint16_t)((u + 0x7fff + ((u >> 16) & 1)) >> 16);
}

static double bf16_value(uint16_t b)
{
	uint32_t u = (uint32_t)b << 16;
	float f;
	memcpy(&f, &u, 4);
	return f;
}

static void test_values(void)
{
	enum { N = 5000 };
	static float x[N];
	static double d[N];
	static uint16_t b[N];

	fill_uniform(x, N, -1, 3);
	for (size_t i = 0; i < N; i += 50)
		x[i] = 0;
	to_double(x, N, d);
	struct dli_tensor t = f32(x, N);
	check_values("f32, finite", &t, d, N);

	x[17] = INFINITY;
	x[400] = -INFINITY;
	to_double(x, N, d);
	check_values("f32 with +inf and -inf", &t, d, N);

	x[400] = 2.5f;
	to_double(x, N, d);
	check_values("f32 with +inf", &t, d, N);

	x[1234] = NAN;
	x[4321] = NAN;
	to_double(x, N, d);
	check_values("f32 with NaN and inf", &t, d, N);

	fill_uniform(x, N, -0.5, 7);
	for (size_t i = 0; i < N; i++) {
		b[i] = bf16_bits(x[i]);
		d[i] = bf16_value(b[i]);
	}
	t = (struct dli_tensor){.data = b, .dtype = DLI_DTYPE_BF16, .ndim = 2, .shape = {50, 100},
				.contiguous = true};
	check_values("bf16", &t, d, N);

	float one = -3.5f;
	double done = -3.5;
	t = f32(&one, 1);
	check_values("one element (std and var NaN)", &t, &done, 1);
}

/* Two microbatches in a step give the concatenation's stats; the weight counts once per step. */
static void test_microbatches_and_weight(void)
{
	enum { NA = 300, NB = 700 };
	static float a[NA], b[NB], w1[64], w2[64];
	static double cat[NA + NB];
	char yaml[1024];
	snprintf(yaml, sizeof yaml,
		 "s:\n  enabled: true\n  layers: {layer_name_regex_pattern: fc2}\n"
		 "  transformer_engine:\n"
		 "    LogTensorStats: {enabled: true, tensors: [activation, weight], stats: %s}\n",
		 all_basic);
	struct dli_context *ctx = open_yaml(yaml, NULL);
	CHECK(ctx != NULL);
	if (!ctx)
		return;
	struct dli_layer *l = layer(ctx, "fc2");
	fill_uniform(a, NA, -1, 1);
	fill_uniform(b, NB, 2, 5); /* another mean: a wrong variance merge shows */
	fill_uniform(w1, 64, -0.1, 0.3);
	fill_uniform(w2, 64, 4, 9);
	struct dli_tensor ta = f32(a, NA), tb = f32(b, NB), tw1 = f32(w1, 64), tw2 = f32(w2, 64);
	/* Step 0: two microbatches, each with the layer's weight (w2 must be ignored). */
	dli_inspect_tensor(l, DLI_TENSOR_ACTIVATION, &ta, NULL, NULL);
	dli_inspect_tensor(l, DLI_TENSOR_WEIGHT, &tw1, NULL, NULL);
	dli_inspect_tensor(l, DLI_TENSOR_ACTIVATION, &tb, NULL, NULL);
	dli_inspect_tensor(l, DLI_TENSOR_WEIGHT, &tw2, NULL, NULL);
	dli_step(ctx);
	/* Step 1: the accumulators start empty again; the weight counts again. */
	dli_inspect_tensor(l, DLI_TENSOR_WEIGHT, &tw2, NULL, NULL);
	dli_inspect_tensor(l, DLI_TENSOR_ACTIVATION, &tb, NULL, NULL);
	dli_step(ctx);
	dli_destroy(ctx);
	read_stats();
	CHECK_INT(n_lines, 4 * N_BASIC);

	double want[N_BASIC], dw[64];
	to_double(a, NA, cat);
	to_double(b, NB, cat + NA);
	char name[64];
	for (int step = 0; step < 2; step++) {
		if (step == 0)
			ref_basic(cat, NA + NB, want);
		else
			ref_basic(cat + NA, NB, want);
		for (int s = 0; s < N_BASIC; s++) {
			snprintf(name, sizeof name, "fc2_activation_%s", basic_names[s]);
			check_logged(name, step, want[s], 2e-6);
		}
		to_double(step ? w2 : w1, 64, dw);
		ref_basic(dw, 64, want);
		for (int s = 0; s < N_BASIC; s++) {
			snprintf(name, sizeof name, "fc2_weight_%s", basic_names[s]);
			check_logged(name, step, want[s], 2e-6);
		}
	}
}

/* ---- FP8 ---- */

/* What-if current scaling, hybrid format: E4M3 for the activation, E5M2 for the gradient. */
static void test_fp8_whatif(void)
{
	enum { N = 4096 };
	static float act[N], grad[N];
	static double dq[N];
	static bool over[N];
	struct dli_context *ctx = open_yaml(
		"s:\n  enabled: true\n  layers: {layer_name_regex_pattern: qkv}\n"
		"  transformer_engine:\n"
		"    LogFp8TensorStats:\n"
		"      enabled: true\n"
		"      tensors: [activation, gradient]\n"
		"      stats: [fp8_current_scaling_underflows%, fp8_current_scaling_overflows%,\n"
		"              fp8_current_scaling_scale_inv_min, fp8_current_scaling_scale_inv_max,\n"
		"              fp8_current_scaling_mse, fp8_current_scaling_cos_sim,\n"
		"              fp8_current_scaling_sqnr_db]\n",
		NULL);
	CHECK(ctx != NULL);
	if (!ctx)
		return;
	struct dli_layer *l = layer(ctx, "qkv");
	fill_wide(act, N, -24, 3);
	fill_wide(grad, N, -60, -8);
	struct dli_tensor ta = f32(act, N), tg = f32(grad, N);
	CHECK_INT(dli_inspect_tensor(l, DLI_TENSOR_ACTIVATION, &ta, NULL, NULL), 0);
	CHECK_INT(dli_inspect_tensor(l, DLI_TENSOR_GRADIENT, &tg, NULL, NULL), 0);
	dli_step(ctx);
	dli_destroy(ctx);
	read_stats();
	CHECK_INT(n_lines, 14);
	for (int t = 0; t < 2; t++) {
		const float *x = t ? grad : act;
		float scale = whatif(x, N, t ? DLI_DTYPE_F8E5M2 : DLI_DTYPE_F8E4M3, 0, dq, over);
		double want[7];
		ref_fp8(x, dq, over, N, 1.0 / scale, want);
		CHECK(want[0] > 0); /* the data was made to underflow */
		for (int s = 0; s < 7; s++) {
			char name[96];
			snprintf(name, sizeof name, "qkv_%s_fp8_current_scaling_%s",
				 t ? "gradient" : "activation", fp8_names[s]);
			check_logged(name, 0, want[s], 2e-6);
		}
	}
}

/* fp8_format and margin: E5M2 for every tensor, and a negative margin to force overflows. */
static void test_fp8_format_margin(void)
{
	enum { N = 1000 };
	static float act[N];
	static double dq[N];
	static bool over[N];
	struct dli_context *ctx = open_yaml(
		"s:\n  enabled: true\n  layers: {layer_name_regex_pattern: qkv}\n"
		"  LogFp8TensorStats:\n"
		"    enabled: true\n"
		"    tensors: [activation]\n"
		"    fp8_format: e5m2\n"
		"    margin: -2\n"
		"    stats: [fp8_current_scaling_overflows%, fp8_current_scaling_mse]\n",
		NULL);
	CHECK(ctx != NULL);
	if (!ctx)
		return;
	struct dli_layer *l = layer(ctx, "qkv");
	fill_uniform(act, N, -2, 2);
	struct dli_tensor ta = f32(act, N);
	dli_inspect_tensor(l, DLI_TENSOR_ACTIVATION, &ta, NULL, NULL);
	dli_step(ctx);
	dli_destroy(ctx);
	read_stats();
	CHECK_INT(n_lines, 2);
	float scale = whatif(act, N, DLI_DTYPE_F8E5M2, -2, dq, over);
	double want[7];
	ref_fp8(act, dq, over, N, 1.0 / scale, want);
	CHECK(want[1] > 50); /* |x| > amax / 4 saturates: most of a uniform tensor */
	check_logged("qkv_activation_fp8_current_scaling_overflows%", 0, want[1], 2e-6);
	check_logged("qkv_activation_fp8_current_scaling_mse", 0, want[4], 2e-6);
}

/* A host-quantized tensor (delayed scaling: a scale too large, so some values saturate) for the
 * unprefixed stats; without one, one warning per (layer, tensor) and nothing logged. */
static void test_fp8_quantized(void)
{
	enum { N = 2048 };
	static float hp[N];
	static uint8_t q[N];
	static double dq[N];
	static bool over[N];
	struct dli_context *ctx = open_yaml(
		"s:\n  enabled: true\n  layers: {layer_name_regex_pattern: proj}\n"
		"  transformer_engine:\n"
		"    LogFp8TensorStats:\n"
		"      enabled: true\n"
		"      tensors: [activation, weight]\n"
		"      stats: [underflows%, overflows%, scale_inv_min, scale_inv_max, mse, cos_sim,\n"
		"              sqnr_db]\n",
		NULL);
	CHECK(ctx != NULL);
	if (!ctx)
		return;
	struct dli_layer *l = layer(ctx, "model.layers.1.self_attention.proj");
	fill_wide(hp, N, -20, 1);
	const float scale = 448.0f; /* amax is about 2: values above 1 saturate */
	float scale_inv = 1.0f / scale;
	for (size_t i = 0; i < N; i++) {
		q[i] = dli_fp8_encode(hp[i] * scale, DLI_DTYPE_F8E4M3);
		dq[i] = (double)dli_fp8_decode(q[i], DLI_DTYPE_F8E4M3) * scale_inv;
		over[i] = fabs((double)hp[i]) > 448.0 * scale_inv;
	}
	struct dli_tensor th = f32(hp, N);
	struct dli_quantized_tensor qt = {
		.data = {.data = q, .dtype = DLI_DTYPE_F8E4M3, .ndim = 1, .shape = {N},
			 .contiguous = true},
		.scale_inv = &scale_inv,
		.scale_inv_count = 1,
	};
	CHECK_INT(dli_inspect_tensor(l, DLI_TENSOR_ACTIVATION, &th, NULL, &qt), 0); /* colwise */
	/* An empty microbatch (its quantizer's scale_inv another): it adds nothing, the scale_inv
	 * range included, as an empty tensor gives no statistics (TransformerEngine skips it). */
	float other_inv = 1.0f;
	struct dli_tensor th0 = f32(hp, 0);
	struct dli_quantized_tensor q0 = qt;
	q0.data.shape[0] = 0;
	q0.scale_inv = &other_inv;
	CHECK_INT(dli_inspect_tensor(l, DLI_TENSOR_ACTIVATION, &th0, &q0, NULL), 0);
	for (int i = 0; i < 3; i++) /* no quantized weight: warned once, nothing logged */
		CHECK_INT(dli_inspect_tensor(l, DLI_TENSOR_WEIGHT, &th, NULL, NULL), 0);
	dli_step(ctx);
	CHECK_INT(dli_inspect_tensor(l, DLI_TENSOR_WEIGHT, &th, NULL, NULL), 0);
	/* A step of empty tensors only logs nothing. */
	CHECK_INT(dli_inspect_tensor(l, DLI_TENSOR_ACTIVATION, &th0, &q0, NULL), 0);
	CHECK_INT(dli_inspect_tensor(l, DLI_TENSOR_ACTIVATION, NULL, &q0, NULL), 0);
	dli_step(ctx);
	dli_destroy(ctx);
	read_stats();
	CHECK_INT(n_lines, 7);
	double want[7];
	ref_fp8(hp, dq, over, N, scale_inv, want);
	CHECK(want[0] > 0 && want[1] > 0);
	for (int s = 0; s < 7; s++) {
		char name[96];
		snprintf(name, sizeof name, "model.layers.1.self_attention.proj_activation_%s",
			 fp8_names[s]);
		check_logged(name, 0, want[s], 2e-6);
	}
	CHECK_INT(count_lines(MESSAGE_LOG, "WARNING - LogFp8TensorStats: layer "
					   "'model.layers.1.self_attention.proj', tensor 'weight': "
					   "the host passed no quantized tensor"),
		  1);
}

/* A host's quantized copy it described wrongly: refused with what is wrong, as the CUDA backend
 * says it, never a bare "Operation not supported" or a count left unsaid. */
static void test_fp8_quantized_refused(void)
{
	struct dli_context *ctx = open_yaml(
		"s:\n  enabled: true\n  layers: {layer_name_regex_pattern: proj}\n"
		"  transformer_engine:\n"
		"    LogFp8TensorStats: {enabled: true, tensors: [activation], stats: [mse]}\n",
		NULL);
	CHECK(ctx != NULL);
	if (!ctx)
		return;
	struct dli_layer *l = layer(ctx, "proj");
	float hp[4] = {1, 2, 3, 4}, scale_inv[2] = {1, 1};
	uint8_t q[4] = {0};
	struct dli_tensor th = f32(hp, 4);
	struct dli_quantized_tensor qt = {
		.data = {.data = q, .dtype = DLI_DTYPE_F8E4M3, .ndim = 1, .shape = {4},
			 .contiguous = true},
		.scale_inv = scale_inv,
		.scale_inv_count = 2,
	};
	CHECK_INT(dli_inspect_tensor(l, DLI_TENSOR_ACTIVATION, &th, &qt, NULL), -ENOTSUP);
	CHECK_CONTAINS(dli_last_error(ctx), "Operation not supported (-95): comparing with a "
					    "quantized tensor needs per-tensor scaling (1 scale_inv, "
					    "not 2)");
	qt.scale_inv_count = -1;
	CHECK_INT(dli_inspect_tensor(l, DLI_TENSOR_ACTIVATION, &th, &qt, NULL), -EINVAL);
	CHECK_CONTAINS(dli_last_error(ctx), "a quantized tensor has no scale_inv (scale_inv set, "
					    "scale_inv_count -1)");
	dli_destroy(ctx);
}

/* ---- The seed form ---- */

static void test_seed_form(void)
{
	enum { N = 256 };
	static float x[N];
	static uint8_t q[N];
	static double d[N];
	struct dli_context *ctx = open_yaml(
		"fc1_stats:\n"
		"  enabled: True\n"
		"  layers: {layer_types: [fc1]}\n"
		"  transformer_engine: {collect_tensor_stats: {enabled: True, tensors: [activation],"
		" type: [min, max, std]}}\n"
		"  collect_fp8_tensor_stats: {enabled: True, tensors: [gradient], underflows: True,"
		" overflows: True}\n",
		NULL);
	CHECK(ctx != NULL);
	if (!ctx)
		return;
	struct dli_layer *l = layer(ctx, "model.layers.3.mlp.fc1");
	fill_wide(x, N, -30, 2);
	float scale = 256.0f, scale_inv = 1.0f / 256.0f;
	for (size_t i = 0; i < N; i++)
		q[i] = dli_fp8_encode(x[i] * scale, DLI_DTYPE_F8E4M3);
	struct dli_tensor t = f32(x, N);
	struct dli_quantized_tensor qt = {
		.data = {.data = q, .dtype = DLI_DTYPE_F8E4M3, .ndim = 1, .shape = {N},
			 .contiguous = true},
		.scale_inv = &scale_inv,
		.scale_inv_count = 1,
	};
	dli_inspect_tensor(l, DLI_TENSOR_ACTIVATION, &t, NULL, NULL);
	dli_inspect_tensor(l, DLI_TENSOR_GRADIENT, &t, &qt, NULL);
	dli_step(ctx);
	dli_destroy(ctx);
	read_stats();
	CHECK_INT(n_lines, 5);
	double want[N_BASIC];
	to_double(x, N, d);
	ref_basic(d, N, want);
	check_logged("model.layers.3.mlp.fc1_activation_min", 0, want[0], 1e-8);
	check_logged("model.layers.3.mlp.fc1_activation_max", 0, want[1], 1e-8);
	check_logged("model.layers.3.mlp.fc1_activation_std", 0, want[3], 2e-6);
	double under = 0, over = 0;
	for (size_t i = 0; i < N; i++) {
		under += x[i] != 0 && (q[i] & 0x7f) == 0;
		over += fabsf(x[i]) > 448.0f / 256.0f;
	}
	CHECK(under > 0 && over > 0);
	check_logged("model.layers.3.mlp.fc1_gradient_underflows%", 0, 100 * under / N, 1e-8);
	check_logged("model.layers.3.mlp.fc1_gradient_overflows%", 0, 100 * over / N, 1e-8);
}

/* ---- Config errors ---- */

static void check_config_error(const char *yaml, const char *const *parts)
{
	struct dli_error err;
	struct dli_context *ctx = open_yaml(yaml, &err);
	CHECK(ctx == NULL);
	dli_destroy(ctx);
	for (size_t i = 0; parts[i]; i++)
		CHECK_CONTAINS(err.message, parts[i]);
}

static void test_config_errors(void)
{
	check_config_error(
		"s:\n  enabled: true\n  layers: {layer_name_regex_pattern: fc1}\n"
		"  transformer_engine:\n"
		"    LogTensorStats: {enabled: true, tensors: [activation], stats: [min, maxx]}\n",
		(const char *const[]){"<string>:5:", "unknown stats 'maxx'", "did you mean 'max'?",
				       NULL});
	check_config_error(
		"s:\n  enabled: true\n  layers: {layer_name_regex_pattern: fc1}\n"
		"  LogTensorStats: {enabled: true, tensors: [activation]}\n",
		(const char *const[]){"<string>:4:", "needs 'stats'", NULL});
	check_config_error(
		"s:\n  enabled: true\n  layers: {layer_name_regex_pattern: fc1}\n"
		"  LogFp8TensorStats: {enabled: true, tensors: [activation], stats: [fp8_mse]}\n",
		(const char *const[]){"unknown stats 'fp8_mse'", NULL});
	check_config_error(
		"s:\n  enabled: true\n  layers: {layer_name_regex_pattern: fc1}\n"
		"  LogFp8TensorStats: {enabled: true, tensors: [activation]}\n",
		(const char *const[]){"<string>:4:", "LogFp8TensorStats", "no statistic to log",
				       NULL});
	check_config_error(
		"s:\n  enabled: true\n  layers: {layer_name_regex_pattern: fc1}\n"
		"  LogFp8TensorStats: {enabled: true, tensors: [activation], stats: [mse],"
		" fp8_format: e4m4}\n",
		(const char *const[]){"unknown fp8_format 'e4m4'", "did you mean 'e4m3'?", NULL});
}

/* A tensor the CPU kernels cannot read: -EINVAL and one message, not one per call. */
static void test_refused_tensor(void)
{
	struct dli_context *ctx = open_yaml(
		"s:\n  enabled: true\n  layers: {layer_name_regex_pattern: fc1}\n"
		"  transformer_engine:\n"
		"    LogTensorStats: {enabled: true, tensors: [activation], stats: [max]}\n",
		NULL);
	CHECK(ctx != NULL);
	if (!ctx)
		return;
	struct dli_layer *l = layer(ctx, "fc1");
	int32_t ints[4] = {1, 2, 3, 4};
	struct dli_tensor t = {.data = ints, .dtype = DLI_DTYPE_I32, .ndim = 1, .shape = {4},
			       .contiguous = true};
	for (int i = 0; i < 3; i++)
		CHECK_INT(dli_inspect_tensor(l, DLI_TENSOR_ACTIVATION, &t, NULL, NULL), -EINVAL);
	float x[4] = {1, 2, 3, 4};
	t = f32(x, 4);
	t.contiguous = false;
	CHECK_INT(dli_inspect_tensor(l, DLI_TENSOR_ACTIVATION, &t, NULL, NULL), -EINVAL);
	/* An empty tensor is valid and adds nothing. */
	t = f32(x, 0);
	CHECK_INT(dli_inspect_tensor(l, DLI_TENSOR_ACTIVATION, &t, NULL, NULL), 0);
	dli_step(ctx);
	dli_destroy(ctx);
	CHECK_INT(read_stats(), 0);
	CHECK_INT(count_lines(MESSAGE_LOG, "statistics (layer 'fc1', tensor 'activation'): cannot "
					   "read a tensor of dtype i32"),
		  1);
	CHECK_INT(count_lines(MESSAGE_LOG, "non-contiguous"), 0);
}

/* ---- CUDA tensors ---- */

static const char *cuda_yaml =
	"s:\n  enabled: true\n  layers: {layer_name_regex_pattern: fc1}\n"
	"  transformer_engine:\n"
	"    LogTensorStats: {enabled: true, tensors: [activation], stats: [min, max, mean, std]}\n";

/* Without a backend: -ENOTSUP for every CUDA tensor, and one message saying why. The search path
 * is stripped of any dir holding a dli_cuda.so, so this holds on CUDA builds too. */
static void test_cuda_without_backend(void)
{
	const char *env = getenv("DLINSPECT_PLUGIN_PATH");
	char *saved = env ? strdup(env) : NULL, kept[4096] = "", file[4096];
	for (char *dir = saved ? strtok(saved, ":") : NULL; dir; dir = strtok(NULL, ":")) {
		snprintf(file, sizeof file, "%s/dli_cuda.so", dir);
		if (access(file, F_OK) != 0)
			snprintf(kept + strlen(kept), sizeof kept - strlen(kept), "%s%s",
				 kept[0] ? ":" : "", dir);
	}
	setenv("DLINSPECT_PLUGIN_PATH", kept, 1);
	struct dli_context *ctx = open_yaml(cuda_yaml, NULL);
	CHECK(ctx != NULL);
	if (ctx) {
		struct dli_layer *l = layer(ctx, "fc1");
		float x[4] = {1, 2, 3, 4};
		struct dli_tensor t = f32(x, 4);
		t.device = (struct dli_device){.type = DLI_DEVICE_CUDA, .index = 0};
		for (int i = 0; i < 3; i++) {
			CHECK_INT(dli_inspect_tensor(l, DLI_TENSOR_ACTIVATION, &t, NULL, NULL),
				  -ENOTSUP);
			/* Each refused call says why, not only the message log's first line. */
			CHECK_CONTAINS(dli_last_error(ctx), "Operation not supported (-95): statistics "
							    "of CUDA tensors need dlinspect built with "
							    "CUDA");
			CHECK_CONTAINS(dli_last_error(ctx), "no dli_cuda.so in the plugin dirs");
		}
		dli_step(ctx);
		dli_destroy(ctx);
		CHECK_INT(read_stats(), 0);
		/* The backend's line, said once, and the first failing call's line, which ends with
		 * the reason; the later failures are counted, not repeated. */
		CHECK_INT(count_lines(MESSAGE_LOG,
				      "statistics of CUDA tensors need dlinspect built with CUDA"),
			  2);
		CHECK_INT(count_lines(MESSAGE_LOG, "no dli_cuda.so in the plugin dirs"), 2);
		CHECK_INT(count_lines(MESSAGE_LOG, "inspect_tensor failed on layer 'fc1'"), 1);
	}
	if (saved)
		setenv("DLINSPECT_PLUGIN_PATH", env, 1);
	free(saved);
}

/* With the stand-in backend: CUDA tensors on two devices and a CPU tensor in one step give the
 * stats of all three; the next step starts empty; a device the backend refuses is reported once. */
static void test_cuda_fake_backend(void)
{
	bool fake = use_fake_cuda();
	CHECK(fake);
	if (!fake)
		return;
	setenv("FAKE_CUDA_REFUSE_DEVICE", "3", 1);
	struct dli_context *ctx = open_yaml(cuda_yaml, NULL);
	CHECK(ctx != NULL);
	if (!ctx)
		goto out;
	enum { N = 100 };
	static float a[N], b[N], c[N];
	static double cat[3 * N];
	fill_uniform(a, N, -1, 1);
	fill_uniform(b, N, 2, 3);
	fill_uniform(c, N, -5, 0);
	struct dli_layer *l = layer(ctx, "fc1");
	struct dli_tensor ta = f32(a, N), tb = f32(b, N), tc = f32(c, N);
	ta.device = (struct dli_device){.type = DLI_DEVICE_CUDA, .index = 0};
	tc.device = (struct dli_device){.type = DLI_DEVICE_CUDA, .index = 1};
	CHECK_INT(dli_inspect_tensor(l, DLI_TENSOR_ACTIVATION, &ta, NULL, NULL), 0);
	CHECK_INT(dli_inspect_tensor(l, DLI_TENSOR_ACTIVATION, &tb, NULL, NULL), 0);
	CHECK_INT(dli_inspect_tensor(l, DLI_TENSOR_ACTIVATION, &tc, NULL, NULL), 0);
	dli_step(ctx);
	CHECK_INT(dli_inspect_tensor(l, DLI_TENSOR_ACTIVATION, &tc, NULL, NULL), 0);
	struct dli_tensor td = tc;
	td.device.index = 3;
	for (int i = 0; i < 2; i++)
		CHECK(dli_inspect_tensor(l, DLI_TENSOR_ACTIVATION, &td, NULL, NULL) < 0);
	dli_step(ctx);
	dli_destroy(ctx);
	read_stats();
	CHECK_INT(n_lines, 8);
	to_double(a, N, cat);
	to_double(b, N, cat + N);
	to_double(c, N, cat + 2 * N);
	double want[N_BASIC];
	char name[64];
	for (int step = 0; step < 2; step++) {
		ref_basic(step ? cat + 2 * N : cat, step ? N : 3 * N, want);
		for (int s = 0; s < 4; s++) {
			snprintf(name, sizeof name, "fc1_activation_%s", basic_names[s]);
			check_logged(name, step, want[s], 2e-6);
		}
	}
	CHECK_INT(count_lines(MESSAGE_LOG, "could not make an accumulator on device 3: fake: "
					   "device 3 refused"),
		  1);
	/* An empty quantized CUDA tensor adds nothing, as on the CPU: the backend (this one refuses
	 * every quantized tensor) is not asked. */
	ctx = open_yaml("s:\n  enabled: true\n  layers: {layer_name_regex_pattern: fc1}\n"
			"  transformer_engine:\n"
			"    LogFp8TensorStats: {enabled: true, tensors: [activation],\n"
			"                        stats: [scale_inv_max]}\n",
			NULL);
	CHECK(ctx != NULL);
	if (!ctx)
		goto out;
	uint8_t code = 0;
	float inv = 1.0f;
	struct dli_quantized_tensor q0 = {
		.data = {.data = &code, .dtype = DLI_DTYPE_F8E4M3, .ndim = 1, .shape = {0},
			 .contiguous = true, .device = {.type = DLI_DEVICE_CUDA, .index = 0}},
		.scale_inv = &inv,
		.scale_inv_count = 1,
	};
	l = layer(ctx, "fc1");
	CHECK_INT(dli_inspect_tensor(l, DLI_TENSOR_ACTIVATION, NULL, &q0, NULL), 0);
	dli_step(ctx);
	dli_destroy(ctx);
	CHECK_INT(read_stats(), 0);
out:
	unsetenv("FAKE_CUDA_REFUSE_DEVICE");
	n_extra_dirs = 0;
}

int main(void)
{
	test_schedules();
	test_tensors_struct();
	test_long_layer_names();
	test_values();
	test_microbatches_and_weight();
	test_fp8_whatif();
	test_fp8_format_margin();
	test_fp8_quantized();
	test_fp8_quantized_refused();
	test_seed_form();
	test_config_errors();
	test_refused_tensor();
	test_cuda_without_backend();
	test_cuda_fake_backend();
	remove_log_dir();
	free(lines);
	return check_exit();
}
