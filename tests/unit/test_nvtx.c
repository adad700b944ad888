/* NVTX ranges (docs/config.md, "NVTX ranges"): range names formatted as documented; with ranges
 * off no NVTX call at all (the stand-in injection library, argv[1], is never even initialized);
 * with `nvtx: true` the names and nesting a profiler records for inspect, dli_call and dli_step.
 * In a build without NVTX: `nvtx: true` warns and the rest is skipped. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <dlinspect/dlinspect.h>

#include "check.h"
#include "dli-test.h"
#include "nvtx-private.h"

static void test_names(void)
{
	char buf[64];
	CHECK_STR(dli_nvtx_name(buf, sizeof buf, "LogTensorStats", "model.fc1", "activation"),
		  "dlinspect/LogTensorStats/model.fc1/activation");
	CHECK_STR(dli_nvtx_name(buf, sizeof buf, "step", "12", NULL), "dlinspect/step/12");
	CHECK_STR(dli_nvtx_name(buf, sizeof buf, "file", NULL, NULL), "dlinspect/file");
	char tiny[16];
	CHECK_STR(dli_nvtx_name(tiny, sizeof tiny, "LogTensorStats", "x", "y"), "dlinspect/LogTe");
}

static const char yaml_body[] =
	"a:\n  enabled: true\n  layers: {layer_types: [fc1]}\n"
	"  transformer_engine:\n"
	"    LogTensorStats: {enabled: true, tensors: [activation], stats: [max]}\n"
	"b:\n  enabled: true\n  layers: {layer_types: [fc2]}\n"
	"  LogTensorStats: {enabled: true, tensors: [x], stats: [max]}\n";

/* One inspect on fc1, one log_tensor_stats call on fc2 (the base feature logs at once: it has
 * no step_end), one step. */
static void run_calls(struct dli_context *ctx)
{
	float v[4] = {1, -2, 3, 0.5f};
	struct dli_tensor t = tensor(v, DLI_DTYPE_F32, 4);
	struct dli_layer *fc1 = layer(ctx, "m.fc1"), *fc2 = layer(ctx, "m.fc2");
	CHECK(dli_inspect_tensor_enabled(fc1, DLI_TENSOR_ACTIVATION, NULL));
	CHECK_INT(dli_inspect_tensor(fc1, DLI_TENSOR_ACTIVATION, &t, NULL, NULL), 0);
	struct dli_log_tensor_stats_args args = {sizeof args, "x", &t, -1, NULL};
	CHECK_INT(dli_call(fc2, DLI_CALL_LOG_TENSOR_STATS, &args), 0);
	CHECK_INT(dli_step(ctx), 0);
}

static char *slurp(const char *path)
{
	FILE *f = fopen(path, "r");
	if (!f)
		return NULL;
	static char buf[8192];
	size_t n = fread(buf, 1, sizeof buf - 1, f);
	buf[n] = 0;
	fclose(f);
	return buf;
}

int main(int argc, char **argv)
{
	unsetenv("DLINSPECT_NVTX");
	test_names();
	char yaml[1024];
	snprintf(yaml, sizeof yaml, "nvtx: true\n%s", yaml_body);
#ifndef DLI_HAVE_NVTX
	struct dli_context *ctx = open_yaml(yaml, NULL);
	CHECK(ctx != NULL);
	dli_destroy(ctx);
	CHECK_INT(count_lines(MESSAGE_LOG, "<string>:1:1: nvtx: true: this libdlinspect was built "
					   "without NVTX"),
		  1);
	remove_log_dir();
	printf("built without NVTX: only the names and the warning checked\n");
	return check_failures ? check_exit() : 77;
#else
	if (argc < 2) {
		fprintf(stderr, "usage: test_nvtx INJECTION_LIBRARY\n");
		return 1;
	}
	char record[512];
	const char *tmp = getenv("TMPDIR");
	snprintf(record, sizeof record, "%s/dli-nvtx-%d.txt", tmp && *tmp ? tmp : "/tmp", (int)getpid());
	unlink(record);
	/* Before the first NVTX call of the process: NVTX3 reads them then, once. */
	setenv("NVTX_INJECTION64_PATH", argv[1], 1);
	setenv("DLI_NVTX_RECORD", record, 1);

	/* Ranges off (no key, and DLINSPECT_NVTX=0 over `nvtx: true`): not one NVTX call. */
	struct dli_context *ctx = open_yaml(yaml_body, NULL);
	CHECK(ctx != NULL);
	run_calls(ctx);
	dli_destroy(ctx);
	setenv("DLINSPECT_NVTX", "0", 1);
	ctx = open_yaml(yaml, NULL);
	CHECK(ctx != NULL);
	run_calls(ctx);
	dli_destroy(ctx);
	CHECK(access(record, F_OK) != 0);

	/* Ranges on. */
	unsetenv("DLINSPECT_NVTX");
	ctx = open_yaml(yaml, NULL);
	CHECK(ctx != NULL);
	run_calls(ctx);
	dli_destroy(ctx);
	const char *want = "init\n"
			   "push dlinspect/LogTensorStats/m.fc1/activation\n"
			   "pop\n"
			   "push dlinspect/LogTensorStats/m.fc2/x\n"
			   "pop\n"
			   "push dlinspect/step/0\n"
			   "  push dlinspect/LogTensorStats/m.fc1/step_end\n"
			   "  pop\n"
			   "  push dlinspect/file/flush\n"
			   "  pop\n"
			   "pop\n";
	CHECK_STR(slurp(record), want);

	/* DLINSPECT_NVTX=1 turns them on without the key (the injection, initialized once, goes on
	 * writing to the same file). */
	size_t before = strlen(want);
	setenv("DLINSPECT_NVTX", "1", 1);
	ctx = open_yaml(yaml_body, NULL);
	CHECK(ctx != NULL);
	struct dli_layer *fc1 = layer(ctx, "m.fc1");
	float v[2] = {1, 2};
	struct dli_tensor t = tensor(v, DLI_DTYPE_F32, 2);
	CHECK_INT(dli_inspect_tensor(fc1, DLI_TENSOR_ACTIVATION, &t, NULL, NULL), 0);
	dli_destroy(ctx);
	const char *all = slurp(record);
	CHECK(all && strlen(all) >= before);
	if (all && strlen(all) >= before)
		CHECK_STR(all + before, "push dlinspect/LogTensorStats/m.fc1/activation\npop\n");
	setenv("DLINSPECT_NVTX", "yes please", 1);
	struct dli_error err;
	ctx = open_yaml(yaml_body, &err);
	CHECK(ctx == NULL);
	CHECK_STR(err.message, "DLINSPECT_NVTX='yes please': expected 1 or 0 (or true/false)");
	unsetenv("DLINSPECT_NVTX");
	unlink(record);
	remove_log_dir();
	return check_exit();
#endif
}
