/* DetectNonFinite's cost on a 256 MiB f32 tensor, through the real call (dli_inspect_tensor),
 * against the machine's read bandwidth measured in the same run, round by round (the AVX2 sum of
 * `dlinspect bench stats`, tools/read-reference.h, over the same buffer on the same thread count;
 * scalar on a CPU without AVX2), and the cost of adding it beside LogTensorStats on the same
 * tensor (the shared pass). A benchmark, not a test:
 *   DLINSPECT_THREADS=1 meson devenv -C build -w . build/tests/nonfinite/bench_detect 1
 * (the argument is the read reference's thread count; DLINSPECT_THREADS sets the pass's). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <dlinspect/dlinspect.h>

#include "read-reference.h"

#define ROUNDS 10

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* AVX2 where the CPU has it, whatever the pass's own path (an AVX-512 machine included): the
 * reference this benchmark's recorded ratios were measured against. */
static enum dli_simd read_simd(void)
{
#ifdef DLI_HAVE_X86_SIMD
	if (__builtin_cpu_supports("avx2"))
		return DLI_SIMD_AVX2;
#endif
	return DLI_SIMD_SCALAR;
}

static int cmp(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

static double median(double *v)
{
	qsort(v, ROUNDS, sizeof *v, cmp);
	return 0.5 * (v[ROUNDS / 2 - 1] + v[ROUNDS / 2]);
}

static char log_dir[] = "/tmp/dli-bench-detect-XXXXXX"; /* made by main; logs stay for a look */

static struct dli_context *open_ctx(const char *yaml)
{
	struct dli_options o;
	dli_options_init(&o);
	o.config_yaml = yaml;
	o.log_dir = log_dir;
	struct dli_context *ctx = NULL;
	struct dli_error err;
	if (dli_init(&o, &ctx, &err))
		fprintf(stderr, "dli_init: %s\n", err.message);
	return ctx;
}

#define HEAD "s:\n  enabled: true\n  layers: {layer_name_regex_pattern: '.*'}\n"
#define DNF "  DetectNonFinite: {enabled: true, tensors: [activation], on_detect: continue}\n"
#define LTS "  transformer_engine:\n    LogTensorStats: {enabled: true, tensors: [activation], " \
	    "stats: [min, max, mean, std, l2_norm, cur_amax, nan_count]}\n"

int main(int argc, char **argv)
{
	int threads = argc > 1 ? atoi(argv[1]) : 1;
	int64_t n = (int64_t)64 << 20; /* 256 MiB of f32 */
	float *x = aligned_alloc(64, (size_t)n * sizeof *x);
	int64_t chunks = (n + DLI_STATS_CHUNK - 1) / DLI_STATS_CHUNK;
	float *sums = calloc((size_t)chunks, sizeof *sums);
	if (!x || !sums || !mkdtemp(log_dir))
		return 1;
	uint64_t r = 42;
	for (int64_t i = 0; i < n; i++) {
		r = r * 6364136223846793005ull + 1442695040888963407ull;
		x[i] = (float)((double)(r >> 11) / 9007199254740992.0 - 0.5);
	}
	struct dli_context *c_dnf = open_ctx(HEAD DNF), *c_lts = open_ctx(HEAD LTS),
			   *c_both = open_ctx(HEAD DNF LTS);
	if (!c_dnf || !c_lts || !c_both)
		return 1;
	struct dli_layer *l_dnf, *l_lts, *l_both;
	dli_layer_get(c_dnf, "l", &l_dnf, NULL);
	dli_layer_get(c_lts, "l", &l_lts, NULL);
	dli_layer_get(c_both, "l", &l_both, NULL);
	struct dli_tensor t = {.data = x, .dtype = DLI_DTYPE_F32, .ndim = 1, .shape = {n},
			       .contiguous = true};
	struct read_job j = {.p = x, .n = n, .simd = read_simd(), .sums = sums};
	double read_gbs[ROUNDS], dnf_gbs[ROUNDS], ratio[ROUNDS], lts_s[ROUNDS], both_s[ROUNDS],
		extra[ROUNDS];
	double gb = (double)n * sizeof *x / 1e9;
	for (int k = -1; k < ROUNDS; k++) { /* round -1 warms up */
		double t0 = now_s();
		dli_parallel_for(chunks, threads, read_chunk, &j);
		double t1 = now_s();
		dli_inspect_tensor(l_dnf, DLI_TENSOR_ACTIVATION, &t, NULL, NULL);
		double t2 = now_s();
		dli_inspect_tensor(l_lts, DLI_TENSOR_ACTIVATION, &t, NULL, NULL);
		double t3 = now_s();
		dli_inspect_tensor(l_both, DLI_TENSOR_ACTIVATION, &t, NULL, NULL);
		double t4 = now_s();
		if (k < 0)
			continue;
		read_gbs[k] = gb / (t1 - t0);
		dnf_gbs[k] = gb / (t2 - t1);
		ratio[k] = (t1 - t0) / (t2 - t1);
		lts_s[k] = t3 - t2;
		both_s[k] = t4 - t3;
		extra[k] = (t4 - t3) / (t3 - t2);
	}
	printf("DetectNonFinite on 256 MiB f32 through dli_inspect_tensor, medians of %d rounds, read "
	       "reference on %d thread(s), the pass on $DLINSPECT_THREADS=%s\n",
	       ROUNDS, threads, getenv("DLINSPECT_THREADS") ? getenv("DLINSPECT_THREADS") : "(all)");
	printf("  read reference %.2f GB/s, DetectNonFinite alone %.2f GB/s, ratio %.3f (target >= "
	       "0.90: %s)\n",
	       median(read_gbs), median(dnf_gbs), median(ratio), median(ratio) >= 0.90 ? "met" : "NOT met");
	printf("  LogTensorStats alone %.1f ms, with DetectNonFinite on the same tensor %.1f ms: "
	       "time ratio %.3f (1.0 = no second pass; two passes would be about 2)\n",
	       1e3 * median(lts_s), 1e3 * median(both_s), median(extra));
	float s = 0;
	for (int64_t c = 0; c < chunks; c++)
		s += sums[c];
	fprintf(stderr, "(checksum %g)\n", (double)s);
	dli_destroy(c_dnf);
	dli_destroy(c_lts);
	dli_destroy(c_both);
	free(sums);
	free(x);
	return 0;
}
