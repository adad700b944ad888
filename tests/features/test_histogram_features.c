/* LogTensorStats' `histogram` through the real core: dli_init with YAML text, the modules from the
 * build tree, and the hist_capture fixture logger, which writes every histogram it gets to a text
 * file read back here. Checks that microbatches merge exactly (two microbatches give the histogram
 * of their concatenation), that the counts are the reference's (a binary search over TensorFlow's
 * limits, computed here) and add up to n - nan_count, the schedule, the no-scalar rule, and CUDA
 * tensors (no histogram yet: said once). */
#include <errno.h>
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <dlinspect/dlinspect.h>

#include "check.h"
#include "dli-test.h"

#define NB 1551 /* TensorFlow's default bucket count */

/* The value of `name` at `iteration` in the statistics log, NaN when absent (*found says). */
static double logged(const char *name, long iteration, bool *found)
{
	char buf[1024], key[300];
	snprintf(key, sizeof key, " - INFO - %s \t\t\t\t iteration=%06ld \t\t\t\t value=", name,
		 iteration);
	FILE *f = open_log(STATS_LOG);
	double v = NAN;
	*found = false;
	while (f && fgets(buf, sizeof buf, f)) {
		const char *p = strstr(buf, key);
		if (p) {
			v = strtod(p + strlen(key), NULL);
			*found = true;
		}
	}
	if (f)
		fclose(f);
	return v;
}

/* ---- Reading the histograms back ---- */

struct histo {
	char name[256];
	long iteration;
	double min, max, num, sum, sum_squares;
	size_t n;
	double limit[NB], bucket[NB];
};

static struct histo histos[32];
static size_t n_histos;

static size_t read_histos(void)
{
	n_histos = 0;
	FILE *f = open_log("histograms.txt");
	if (!f)
		return 0;
	static char buf[1 << 17];
	while (n_histos < sizeof histos / sizeof histos[0] && fgets(buf, sizeof buf, f)) {
		struct histo *h = &histos[n_histos++];
		char *save = NULL, *tok = strtok_r(buf, "\t\n", &save);
		snprintf(h->name, sizeof h->name, "%s", tok ? tok : "");
		double nums[7];
		for (int i = 0; i < 7; i++) {
			tok = strtok_r(NULL, "\t\n", &save);
			nums[i] = tok ? strtod(tok, NULL) : NAN;
		}
		h->iteration = (long)nums[0];
		h->min = nums[1];
		h->max = nums[2];
		h->num = nums[3];
		h->sum = nums[4];
		h->sum_squares = nums[5];
		h->n = nums[6] >= 0 && nums[6] <= NB ? (size_t)nums[6] : 0;
		for (size_t i = 0; i < 2 * h->n; i++) {
			tok = strtok_r(NULL, "\t\n", &save);
			(i < h->n ? h->limit : h->bucket)[i % h->n] = tok ? strtod(tok, NULL) : NAN;
		}
	}
	fclose(f);
	return n_histos;
}

static const struct histo *find_histo(const char *name, long iteration)
{
	for (size_t i = 0; i < n_histos; i++)
		if (!strcmp(histos[i].name, name) && histos[i].iteration == iteration)
			return &histos[i];
	return NULL;
}

/* ---- The reference ---- */

static double limits[NB];

static void build_limits(void)
{
	double pos[NB];
	int n = 0, k = 0;
	for (double v = 1.0e-12; v < 1.0e20; v *= 1.1)
		pos[n++] = v;
	pos[n++] = DBL_MAX;
	for (int i = n - 1; i >= 0; i--)
		limits[k++] = -pos[i];
	limits[k++] = 0;
	for (int i = 0; i < n; i++)
		limits[k++] = pos[i];
}

/* Counts of x[0..n) per bucket (limit[k-1], limit[k]], +inf in the last; NaNs in none. */
static void ref_counts(const double *x, size_t n, double counts[NB])
{
	memset(counts, 0, NB * sizeof counts[0]);
	for (size_t i = 0; i < n; i++) {
		if (isnan(x[i]))
			continue;
		int lo = 0, hi = NB - 1;
		while (lo < hi) {
			int mid = (lo + hi) / 2;
			if (limits[mid] >= x[i])
				hi = mid;
			else
				lo = mid + 1;
		}
		counts[lo]++;
	}
}

/* The emitted (compacted) histogram spread back over all NB buckets; false when it is not a valid
 * compaction (a limit that is not one of TensorFlow's, an empty bucket inside a collapsed run
 * that holds counts, two empty buckets side by side). */
static bool expand(const struct histo *h, double counts[NB])
{
	memset(counts, 0, NB * sizeof counts[0]);
	size_t j = 0;
	for (int k = 0; k < NB; k++) {
		while (j < h->n && h->limit[j] < limits[k])
			j++;
		if (j == h->n)
			return false;
		if (h->limit[j] == limits[k])
			counts[k] = h->bucket[j];
		else if (h->bucket[j] != 0)
			return false;
	}
	for (size_t i = 1; i < h->n; i++)
		if (!h->bucket[i] && !h->bucket[i - 1])
			return false;
	return h->n > 0 && h->limit[h->n - 1] == DBL_MAX;
}

/* The histogram `name` at `iteration` was sent and has x[0..n)'s counts, num and extrema. */
static void check_histo(const char *name, long iteration, const double *x, size_t n)
{
	const struct histo *h = find_histo(name, iteration);
	CHECK(h != NULL);
	if (!h) {
		fprintf(stderr, "no histogram %s at iteration %ld\n", name, iteration);
		return;
	}
	static double got[NB], want[NB];
	CHECK(expand(h, got));
	ref_counts(x, n, want);
	double total = 0, nans = 0, mn = INFINITY, mx = -INFINITY, sum = 0, sa = 0, sq = 0;
	for (int k = 0; k < NB; k++)
		total += got[k];
	for (size_t i = 0; i < n; i++) {
		if (isnan(x[i])) {
			nans++;
			continue;
		}
		mn = fmin(mn, x[i]);
		mx = fmax(mx, x[i]);
	}
	for (size_t i = 0; i < n; i++) {
		sum += x[i];
		sa += fabs(x[i]);
		sq += x[i] * x[i];
	}
	bool same = !memcmp(got, want, sizeof got);
	CHECK(same);
	for (int k = 0; same == false && k < NB; k++)
		if (got[k] != want[k])
			fprintf(stderr, "%s@%ld: bucket %d (limit %g): %g, reference %g\n", name,
				iteration, k, limits[k], got[k], want[k]);
	CHECK(total == (double)n - nans);
	CHECK(h->num == (double)n - nans);
	CHECK(h->min == mn && h->max == mx);
	/* The statistics pass sums in float lanes inside a block (docs/statistics.md). */
	CHECK(isnan(sum) ? isnan(h->sum) : fabs(h->sum - sum) <= 1e-5 * sa);
	CHECK(isnan(sq) ? isnan(h->sum_squares) : fabs(h->sum_squares - sq) <= 1e-5 * sq);
}

/* Both histograms were sent and are identical in everything but rounding of the sums. */
static void check_same(const char *name_a, long it_a, const char *name_b, long it_b)
{
	const struct histo *a = find_histo(name_a, it_a), *b = find_histo(name_b, it_b);
	CHECK(a && b);
	if (!a || !b)
		return;
	CHECK_INT(a->n, b->n);
	CHECK(!memcmp(a->limit, b->limit, a->n * sizeof a->limit[0]));
	CHECK(!memcmp(a->bucket, b->bucket, a->n * sizeof a->bucket[0]));
	CHECK(a->num == b->num && a->min == b->min && a->max == b->max);
	CHECK((isnan(a->sum) && isnan(b->sum)) || fabs(a->sum - b->sum) <= 1e-5 * fabs(a->sum) + 1e-6);
}

/* ---- Data ---- */

static uint64_t rng = 7;

static double uniform(void)
{
	rng = rng * 6364136223846793005ull + 1442695040888963407ull;
	return (double)(rng >> 11) / 9007199254740992.0;
}

/* Magnitudes from the f32 subnormals to 1e30 with random signs, and every special value. */
static void fill(float *x, size_t n)
{
	for (size_t i = 0; i < n; i++)
		x[i] = (float)((uniform() < 0.5 ? -1 : 1) * exp2(-149 + 248 * uniform()));
	static const float specials[] = {0.0f, -0.0f, INFINITY, -INFINITY, NAN, 0x1p-149f, -0x1p-149f,
					 1e-12f, -1e-12f, FLT_MAX, -FLT_MAX};
	for (size_t i = 0; i < sizeof specials / sizeof specials[0] && i * 37 < n; i++)
		x[i * 37] = specials[i];
}

static uint16_t to_bf16(float f)
{
	uint32_t b;
	memcpy(&b, &f, 4);
	return (uint16_t)(b >> 16); /* truncation: any bf16 will do */
}

static float from_bf16(uint16_t h)
{
	uint32_t b = (uint32_t)h << 16;
	float f;
	memcpy(&f, &b, 4);
	return f;
}

/* A context with one LogTensorStats block (`keys` inside its braces) on the layers matching
 * `layers`, logging to the file logger and hist_capture. */
static struct dli_context *open_lts(const char *layers, const char *keys)
{
	char yaml[1024];
	snprintf(yaml, sizeof yaml,
		 "s:\n  enabled: true\n  layers: {layer_name_regex_pattern: '%s'}\n"
		 "  transformer_engine:\n"
		 "    LogTensorStats: {enabled: true, %s}\n"
		 "loggers: {file: {}, hist_capture: {}}\n",
		 layers, keys);
	struct dli_context *ctx = open_yaml(yaml, NULL);
	CHECK(ctx != NULL);
	return ctx;
}

/* ---- Tests ---- */

/* Step 0: the activation in two microbatches (f32, then bf16) and the weight twice; step 1: the
 * activation as one tensor, their concatenation, and the weight once. Same histograms. */
static void test_microbatches(void)
{
	enum { N1 = 1000, N2 = 777, NW = 300 };
	static float x1[N1], cat[N1 + N2], w[NW];
	static uint16_t x2[N2];
	static double ref[N1 + N2], refw[NW];
	fill(x1, N1);
	fill(cat + N1, N2);
	for (size_t i = 0; i < N2; i++) {
		x2[i] = to_bf16(cat[N1 + i]);
		cat[N1 + i] = from_bf16(x2[i]);
	}
	memcpy(cat, x1, sizeof x1);
	for (size_t i = 0; i < N1 + N2; i++)
		ref[i] = cat[i];
	for (size_t i = 0; i < NW; i++)
		refw[i] = w[i] = (float)(uniform() - 0.5);

	struct dli_context *ctx =
		open_lts("fc1", "tensors: [activation, weight], stats: [max, nan_count, histogram]");
	if (!ctx)
		return;
	struct dli_layer *l = layer(ctx, "fc1");
	struct dli_tensor t1 = tensor(x1, DLI_DTYPE_F32, N1), t2 = tensor(x2, DLI_DTYPE_BF16, N2);
	struct dli_tensor tc = tensor(cat, DLI_DTYPE_F32, N1 + N2), tw = tensor(w, DLI_DTYPE_F32, NW);
	CHECK_INT(dli_inspect_tensor(l, DLI_TENSOR_ACTIVATION, &t1, NULL, NULL), 0);
	CHECK_INT(dli_inspect_tensor(l, DLI_TENSOR_WEIGHT, &tw, NULL, NULL), 0);
	CHECK_INT(dli_inspect_tensor(l, DLI_TENSOR_ACTIVATION, &t2, NULL, NULL), 0);
	CHECK_INT(dli_inspect_tensor(l, DLI_TENSOR_WEIGHT, &tw, NULL, NULL), 0);
	dli_step(ctx);
	CHECK_INT(dli_inspect_tensor(l, DLI_TENSOR_ACTIVATION, &tc, NULL, NULL), 0);
	CHECK_INT(dli_inspect_tensor(l, DLI_TENSOR_WEIGHT, &tw, NULL, NULL), 0);
	dli_step(ctx);
	dli_destroy(ctx);

	CHECK_INT(read_histos(), 4);
	check_same("fc1_activation_histogram", 0, "fc1_activation_histogram", 1);
	check_same("fc1_weight_histogram", 0, "fc1_weight_histogram", 1);
	for (long it = 0; it < 2; it++) {
		check_histo("fc1_activation_histogram", it, ref, N1 + N2);
		check_histo("fc1_weight_histogram", it, refw, NW);
		/* Counts add up to n - nan_count, the nan_count LogTensorStats logs. */
		bool found;
		double nans = logged("fc1_activation_nan_count", it, &found);
		const struct histo *h = find_histo("fc1_activation_histogram", it);
		CHECK(found && nans > 0);
		CHECK(h && h->num == (double)(N1 + N2) - nans);
	}
	/* Scalars still go to the file logger; the histogram is no scalar. */
	CHECK_INT(count_lines(STATS_LOG, "_activation_max"), 2);
	CHECK_INT(count_lines(STATS_LOG, "histogram"), 0);
}

/* The schedule applies; `histogram` alone logs no scalars; a step of NaNs only sends none. */
static void test_schedule_and_nan_only(void)
{
	struct dli_context *ctx = open_lts("fc1", "tensors: [activation], stats: [histogram], freq: 2");
	if (!ctx)
		return;
	struct dli_layer *l = layer(ctx, "fc1");
	float x[6] = {1, -2, 3, 0, 5e-3f, 1e25f}, nans[3] = {NAN, NAN, NAN};
	struct dli_tensor t = tensor(x, DLI_DTYPE_F32, 6), tn = tensor(nans, DLI_DTYPE_F32, 3);
	for (int step = 0; step < 6; step++) {
		dli_inspect_tensor(l, DLI_TENSOR_ACTIVATION, step == 4 ? &tn : &t, NULL, NULL);
		dli_step(ctx);
	}
	dli_destroy(ctx);
	CHECK_INT(read_histos(), 2);
	double ref[6];
	for (int i = 0; i < 6; i++)
		ref[i] = x[i];
	check_histo("fc1_activation_histogram", 0, ref, 6);
	check_histo("fc1_activation_histogram", 2, ref, 6);
	CHECK(find_histo("fc1_activation_histogram", 4) == NULL);
	CHECK_INT(count_lines(STATS_LOG, "fc1"), 0);
	/* 6 values in 6 buckets, each with one empty run between: nowhere near 1551 entries. */
	const struct histo *h = find_histo("fc1_activation_histogram", 0);
	CHECK(h && h->n <= 13);
}

/* A misspelt `histogram` is refused with the right suggestion. */
static void test_config(void)
{
	struct dli_error err = {0};
	struct dli_context *ctx = open_yaml(
		"s:\n  enabled: true\n  layers: {layer_name_regex_pattern: fc1}\n"
		"  transformer_engine:\n"
		"    LogTensorStats: {enabled: true, tensors: [activation], stats: [histogramm]}\n",
		&err);
	CHECK(ctx == NULL);
	CHECK_CONTAINS(err.message, "unknown stats 'histogramm' (did you mean 'histogram'?)");
	dli_destroy(ctx);
}

/* CUDA tensors (the stand-in backend): their scalars are logged, their histograms are not, and
 * the message log says why once; a step of host tensors afterwards has its histogram. */
static void test_cuda(void)
{
	bool fake = use_fake_cuda();
	CHECK(fake);
	if (!fake)
		return;
	struct dli_context *ctx = open_lts("fc[12]", "tensors: [activation], stats: [max, histogram]");
	if (!ctx)
		goto out;
	float x[4] = {1, 2, 3, 4};
	double ref[4] = {1, 2, 3, 4};
	struct dli_tensor host = tensor(x, DLI_DTYPE_F32, 4), dev = host;
	dev.device = (struct dli_device){.type = DLI_DEVICE_CUDA, .index = 0};
	struct dli_layer *l1 = layer(ctx, "fc1"), *l2 = layer(ctx, "fc2");
	for (int step = 0; step < 2; step++) {
		CHECK_INT(dli_inspect_tensor(l1, DLI_TENSOR_ACTIVATION, &dev, NULL, NULL), 0);
		CHECK_INT(dli_inspect_tensor(l2, DLI_TENSOR_ACTIVATION, &host, NULL, NULL), 0);
		CHECK_INT(dli_inspect_tensor(l2, DLI_TENSOR_ACTIVATION, &dev, NULL, NULL), 0);
		dli_step(ctx);
	}
	CHECK_INT(dli_inspect_tensor(l1, DLI_TENSOR_ACTIVATION, &host, NULL, NULL), 0);
	dli_step(ctx);
	dli_destroy(ctx);
	bool found;
	CHECK(logged("fc1_activation_max", 0, &found) == 4 && found);
	CHECK(logged("fc2_activation_max", 1, &found) == 4 && found);
	CHECK_INT(read_histos(), 1);
	check_histo("fc1_activation_histogram", 2, ref, 4);
	CHECK_INT(count_lines(MESSAGE_LOG, "histograms of CUDA tensors are not supported yet"), 1);
out:
	n_extra_dirs = 0;
}

/* Histograms selected for many layers cost memory only for the tensors the host passes: 2000
 * layers with three selected tensors each, one tensor passed. (mallinfo2 counts glibc's heap; a
 * sanitizer's allocator is not it, so there the count is skipped.) */
#if defined(__has_feature)
#if __has_feature(address_sanitizer)
#define HEAP_NOT_GLIBC 1
#endif
#endif
#if defined(__SANITIZE_ADDRESS__) || !defined(__GLIBC__)
#define HEAP_NOT_GLIBC 1
#endif
#ifndef HEAP_NOT_GLIBC
#include <malloc.h>
#endif
static void test_memory_on_first_use(void)
{
	struct dli_context *ctx = open_lts(".*", "tensors: [activation, weight, gradient], stats: "
						 "[histogram]");
	if (!ctx)
		return;
	char name[32];
#ifndef HEAP_NOT_GLIBC
	size_t before = mallinfo2().uordblks;
#endif
	for (int i = 0; i < 2000; i++) {
		snprintf(name, sizeof name, "l%d.fc1", i);
		CHECK(layer(ctx, name) != NULL);
	}
#ifndef HEAP_NOT_GLIBC
	size_t grown = mallinfo2().uordblks - before;
	/* 6000 histograms of 36 KiB would be 216 MB; the layers' own state is well under 8 MB. */
	CHECK(grown < ((size_t)8 << 20));
	if (grown >= ((size_t)8 << 20))
		fprintf(stderr, "  2000 layers took %zu bytes\n", grown);
#endif
	float x[4] = {1, 2, 3, 4};
	struct dli_tensor t = tensor(x, DLI_DTYPE_F32, 4);
	CHECK_INT(dli_inspect_tensor(layer(ctx, "l7.fc1"), DLI_TENSOR_ACTIVATION, &t, NULL, NULL), 0);
	dli_step(ctx);
	dli_destroy(ctx);
	CHECK_INT(read_histos(), 1);
	const struct histo *h = find_histo("l7.fc1_activation_histogram", 0);
	CHECK(h && h->num == 4);
}

int main(void)
{
	build_limits();
	test_microbatches();
	test_schedule_and_nan_only();
	test_config();
	test_cuda();
	test_memory_on_first_use();
	remove_log_dir();
	return check_exit();
}
