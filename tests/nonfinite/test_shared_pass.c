/* One dli_inspect_tensor, one read of the tensor: LogTensorStats, LogFp8TensorStats and
 * DetectNonFinite on the same tensor share the statistics pass (core/stats.c), and what each logs
 * is what it logs alone. The passes are counted by the core (dli_stats_host_passes), not timed. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "dli-test.h"
#include "stats-private.h"

#define HEAD "s:\n  enabled: true\n  layers: {layer_name_regex_pattern: '.*'}\n"
#define LTS "  transformer_engine:\n    LogTensorStats:\n      enabled: true\n" \
	    "      tensors: [activation]\n      stats: [min, max, mean, std, cur_amax, nan_count]\n"
#define FP8 "    LogFp8TensorStats:\n      enabled: true\n      tensors: [activation]\n" \
	    "      stats: [fp8_current_scaling_underflows%, fp8_current_scaling_mse]\n"
#define DNF "  DetectNonFinite: {enabled: true, tensors: [activation], on_detect: continue}\n"

enum { N = 40000 };
static float x[N];

/* Runs two steps of one inspect call each; returns the passes the calls made and leaves the
 * statistics log's lines in `stats` (NUL-separated after the timestamps are cut). */
static unsigned long long run(const char *yaml, char *stats, size_t size)
{
	struct dli_context *ctx = open_yaml(yaml, NULL);
	CHECK(ctx != NULL);
	if (!ctx)
		return 0;
	struct dli_layer *l = layer(ctx, "enc.0.fc1");
	struct dli_tensor t = tensor(x, DLI_DTYPE_F32, N);
	unsigned long long before = dli_stats_host_passes;
	for (int it = 0; it < 2; it++) {
		CHECK_INT(dli_inspect_tensor(l, DLI_TENSOR_ACTIVATION, &t, NULL, NULL), 0);
		CHECK_INT(dli_step(ctx), 0);
	}
	unsigned long long passes = dli_stats_host_passes - before;
	dli_destroy(ctx);
	FILE *f = open_log(STATS_LOG);
	size_t off = 0;
	char line[1024];
	stats[0] = 0;
	while (f && fgets(line, sizeof line, f)) {
		const char *p = strstr(line, " - INFO - ");
		off += (size_t)snprintf(stats + off, size - off, "%s", p ? p : line);
	}
	if (f)
		fclose(f);
	return passes;
}

int main(void)
{
	for (int i = 0; i < N; i++)
		x[i] = (float)sin(i * 0.37) * (float)(1 + i % 97);
	x[N / 2] = NAN; /* the detector has something to report, and nan_count shows it */
	static char alone[1 << 16], with_dnf[1 << 16], all3[1 << 16], dnf[1 << 16], fp8[1 << 16],
		fp8_dnf[1 << 16];
	/* Each feature alone reads the tensor once a call. */
	CHECK_INT(run(HEAD LTS, alone, sizeof alone), 2);
	CHECK_INT(run(HEAD DNF, dnf, sizeof dnf), 2);
	CHECK_INT(count_lines(MESSAGE_LOG, "DetectNonFinite: first NaN/Inf"), 1);
	/* Together: still once a call, and LogTensorStats logs the same bits. */
	CHECK_INT(run(HEAD DNF LTS, with_dnf, sizeof with_dnf), 2);
	CHECK_INT(count_lines(MESSAGE_LOG, "DetectNonFinite: first NaN/Inf"), 1);
	CHECK(alone[0] != 0);
	CHECK_STR(with_dnf, alone);
	/* The FP8 statistics' own pass (the quantize-and-compare) is another read; their statistics
	 * pass is the shared one. */
	CHECK_INT(run(HEAD LTS FP8, all3, sizeof all3), 2);
	CHECK_INT(run(HEAD "  transformer_engine:\n" FP8, fp8, sizeof fp8), 2);
	CHECK_INT(run(HEAD LTS FP8 DNF, fp8_dnf, sizeof fp8_dnf), 2);
	CHECK_STR(fp8_dnf, all3);
	/* Two tensors in one step: each is read (nothing is shared across calls). */
	struct dli_context *ctx = open_yaml(HEAD DNF LTS, NULL);
	CHECK(ctx != NULL);
	if (ctx) {
		struct dli_layer *l = layer(ctx, "enc.0.fc1");
		struct dli_tensor a = tensor(x, DLI_DTYPE_F32, N), b = tensor(x + 1, DLI_DTYPE_F32, N - 1);
		unsigned long long before = dli_stats_host_passes;
		CHECK_INT(dli_inspect_tensor(l, DLI_TENSOR_ACTIVATION, &a, NULL, NULL), 0);
		CHECK_INT(dli_inspect_tensor(l, DLI_TENSOR_ACTIVATION, &b, NULL, NULL), 0);
		CHECK_INT(dli_inspect_tensor(l, DLI_TENSOR_ACTIVATION, &a, NULL, NULL), 0);
		CHECK_INT(dli_stats_host_passes - before, 3);
		dli_destroy(ctx);
	}
	remove_log_dir();
	return check_exit();
}
