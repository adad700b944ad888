/* What a careless or hostile host or config must not get through the public API (issue 13): names
 * that forge log lines, a zeroed options struct, NULL arguments, iteration overflow. */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <dlinspect/dlinspect.h>

#include "check.h"
#include "dli-test.h"

/* Redirects stderr into `name` under the log dir until stderr_restore. */
static int saved_stderr = -1;
static FILE *stderr_capture;

static void stderr_to(const char *name)
{
	char path[512];
	snprintf(path, sizeof path, "%s/%s", log_dir, name);
	fflush(stderr);
	saved_stderr = dup(2);
	stderr_capture = fopen(path, "w");
	CHECK(stderr_capture && saved_stderr >= 0);
	if (stderr_capture)
		dup2(fileno(stderr_capture), 2);
}

static void stderr_restore(void)
{
	fflush(stderr);
	if (saved_stderr >= 0) {
		dup2(saved_stderr, 2);
		close(saved_stderr);
	}
	if (stderr_capture)
		fclose(stderr_capture);
	saved_stderr = -1;
	stderr_capture = NULL;
}

/* Lines of `file` under the log dir. */
static int line_count(const char *file)
{
	char buf[4096];
	FILE *f = open_log(file);
	int n = 0;
	while (f && fgets(buf, sizeof buf, f))
		n++;
	if (f)
		fclose(f);
	return n;
}

/* A layer name holding a newline and the log's own separators writes one escaped line per
 * statistic, never a second line a log parser would read as iteration 1's value; messages that
 * quote it (message log, stderr) stay one line too. */
static void test_names_cannot_forge_log_lines(void)
{
	static const char forged[] = "a\nb \t\t\t\t iteration=000001 \t\t\t\t value=1\r\x1b[2J\\";
	static const char escaped[] = "a\\nb \\t\\t\\t\\t iteration=000001 \\t\\t\\t\\t value=1\\r"
				      "\\x1b[2J\\\\";
	struct dli_context *ctx = open_yaml(
		"s:\n  enabled: true\n  layers: {layer_name_regex_pattern: '^a'}\n"
		"  transformer_engine:\n"
		"    LogTensorStats: {enabled: true, tensors: [activation], stats: [max, min]}\n",
		NULL);
	CHECK(ctx != NULL);
	if (!ctx)
		return;
	struct dli_layer *l = layer(ctx, forged);
	CHECK(l != NULL);
	if (!l) {
		dli_destroy(ctx);
		return;
	}
	float x[2] = {1, 2};
	struct dli_tensor t = tensor(x, DLI_DTYPE_F32, 2);
	CHECK_INT(dli_inspect_tensor(l, DLI_TENSOR_ACTIVATION, &t, NULL, NULL), 0);
	stderr_to("stderr.txt");
	CHECK_INT(dli_inspect_tensor(l, DLI_TENSOR_ACTIVATION, NULL, NULL, NULL), -EINVAL);
	stderr_restore();
	dli_step(ctx);
	dli_destroy(ctx);

	char want[512];
	CHECK_INT(line_count(STATS_LOG), 2);
	snprintf(want, sizeof want, "INFO - %s_activation_max \t\t\t\t iteration=000000 \t\t\t\t "
				    "value=2\n", escaped);
	CHECK_INT(count_lines(STATS_LOG, want), 1);
	snprintf(want, sizeof want, "INFO - %s_activation_min \t\t\t\t iteration=000000 \t\t\t\t "
				    "value=1\n", escaped);
	CHECK_INT(count_lines(STATS_LOG, want), 1);
	CHECK_INT(count_lines(STATS_LOG, "\t iteration=000001"), 0);

	snprintf(want, sizeof want, "inspect_tensor failed on layer '%s', tensor 'activation'",
		 escaped);
	CHECK_INT(count_lines(MESSAGE_LOG, want), 1);
	CHECK_INT(count_lines(MESSAGE_LOG, "b \t"), 0);
	CHECK_INT(count_lines("stderr.txt", want), 1);
	CHECK_INT(line_count("stderr.txt"), 1);
}

/* A zeroed options struct (size 0) would copy no field: refused, saying how to fill it. */
static void test_zeroed_options_refused(void)
{
	struct dli_options o;
	memset(&o, 0, sizeof o);
	o.config_yaml = "s: {enabled: false}\n";
	struct dli_context *ctx = (struct dli_context *)&o; /* must be set to NULL */
	struct dli_error err;
	CHECK_INT(dli_init(&o, &ctx, &err), -EINVAL);
	CHECK(ctx == NULL);
	CHECK_INT(err.code, -EINVAL);
	CHECK_CONTAINS(err.message, "dli_init: options.size is 0: initialize the options with "
				    "dli_options_init(&options) (or set size = sizeof(struct "
				    "dli_options))");
	CHECK_INT(dli_init(&o, &ctx, NULL), -EINVAL);
	/* NULL options are the defaults, as before. */
	CHECK_INT(dli_init(NULL, &ctx, &err), 0);
	CHECK(ctx != NULL);
	dli_destroy(ctx);
}

int main(void)
{
	test_names_cannot_forge_log_lines();
	test_zeroed_options_refused();
	remove_log_dir();
	return check_exit();
}
