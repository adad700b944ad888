/* What a careless or hostile host or config must not get through the public API (issue 13): names
 * that forge log lines, a zeroed options struct, NULL arguments, iteration overflow. */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <signal.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <dlinspect/dlinspect.h>

#include "check.h"
#include "dli-test.h"
#include "escape-private.h"

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
	CHECK(stderr_capture_begin("stderr.txt"));
	CHECK_INT(dli_inspect_tensor(l, DLI_TENSOR_ACTIVATION, NULL, NULL, NULL), -EINVAL);
	stderr_capture_end();
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

/* Bytes that are not well-formed UTF-8 (a C host's name: Python's names always are) are escaped as
 * \xNN in the statistics log, so the file decodes as UTF-8 for a Python log parser, as they are in
 * TensorBoard tags, where protobuf refuses the whole event file over one such tag. Well-formed
 * characters (2 to 4 bytes) pass unchanged; overlong forms, surrogates and code points above
 * U+10FFFF are not well-formed (RFC 3629). */
static void test_invalid_utf8_escaped(void)
{
	static const char name[] = "bad\xff\xfe \xe5\xb1 \xc3\xa9\xe5\xb1\x82\xf0\x9f\x98\x80 "
				   "\xc0\xaf \xed\xa0\x80 \xf4\x90\x80\x80";
	static const char escaped[] = "bad\\xff\\xfe \\xe5\\xb1 \xc3\xa9\xe5\xb1\x82\xf0\x9f\x98\x80 "
				      "\\xc0\\xaf \\xed\\xa0\\x80 \\xf4\\x90\\x80\\x80";
	struct dli_context *ctx = open_yaml(
		"s:\n  enabled: true\n  layers: {layer_name_regex_pattern: '^bad'}\n"
		"  transformer_engine:\n"
		"    LogTensorStats: {enabled: true, tensors: [activation], stats: [max]}\n",
		NULL);
	CHECK(ctx != NULL);
	if (!ctx)
		return;
	struct dli_layer *l = layer(ctx, name);
	CHECK(l != NULL);
	float x[2] = {1, 2};
	struct dli_tensor t = tensor(x, DLI_DTYPE_F32, 2);
	if (l)
		CHECK_INT(dli_inspect_tensor(l, DLI_TENSOR_ACTIVATION, &t, NULL, NULL), 0);
	dli_step(ctx);
	dli_destroy(ctx);

	char want[512];
	snprintf(want, sizeof want, "INFO - %s_activation_max \t\t\t\t iteration=000000 \t\t\t\t "
				    "value=2\n", escaped);
	CHECK_INT(count_lines(STATS_LOG, want), 1);
	CHECK_INT(count_lines(STATS_LOG, "\xff"), 0);
}

/* A text cut to a buffer (the stderr line, `dlinspect check`) ends before a character or an escape
 * that does not fit whole: never half a UTF-8 character, never half an escape. The returned length
 * is the whole text's, as snprintf's. */
static void test_escape_cut_whole(void)
{
	char buf[8];
	memset(buf, 'z', sizeof buf);
	CHECK_INT((int)dli_escape(buf, 6, "ab\xe5\xb1\x82"), 5);
	CHECK_STR(buf, "ab\xe5\xb1\x82");
	CHECK_INT((int)dli_escape(buf, 5, "ab\xe5\xb1\x82" "c"), 6);
	CHECK_STR(buf, "ab");
	CHECK_INT((int)dli_escape(buf, 5, "abc\nd"), 6);
	CHECK_STR(buf, "abc");
	CHECK_INT((int)dli_escape(buf, 8, "ab\x01" "c"), 7);
	CHECK_STR(buf, "ab\\x01c");
	CHECK_INT((int)dli_escape(buf, 6, "ab\x01" "c"), 7);
	CHECK_STR(buf, "ab");
	CHECK_INT((int)dli_escape(NULL, 0, "\xff"), 4);
	CHECK_INT(dli_escape_needed("\xc3\xa9\xf0\x9f\x98\x80"), 0);
	CHECK_INT(dli_escape_needed("\xc3\xa9\xf0\x9f\x98"), 1);
}

/* The whole of `file` under the log dir, NUL-terminated (free it); NULL when unreadable. */
static char *read_log(const char *file)
{
	FILE *f = open_log(file);
	char *buf = NULL;
	size_t n = 0, cap = 0, got;
	if (!f)
		return NULL;
	do {
		if (n + 4096 + 1 > cap) {
			char *b = realloc(buf, cap = n + 4096 + 1);
			if (!b)
				break;
			buf = b;
		}
		got = fread(buf + n, 1, 4096, f);
		n += got;
	} while (got > 0);
	fclose(f);
	if (buf)
		buf[n] = '\0';
	return buf;
}

/* A message longer than the core's line buffer (a host's log_message of a long text) reaches the
 * message log whole, as nvdlfw_inspect's logger writes it; it used to be cut at 2047 bytes without
 * a word. The terminal gets its start, marked with "...". */
static void test_long_message_whole(void)
{
	static char text[6001];
	memset(text, 'x', 5997);
	memcpy(text + 5997, "END", 4);
	struct dli_context *ctx = open_yaml("s: {enabled: false}\n", NULL);
	CHECK(ctx != NULL);
	if (!ctx)
		return;
	CHECK(stderr_capture_begin("stderr-long.txt"));
	dli_log(ctx, DLI_LOG_ERROR, "%s", text);
	stderr_capture_end();
	dli_destroy(ctx);

	char *log = read_log(MESSAGE_LOG), *err = read_log("stderr-long.txt");
	char want[6100];
	snprintf(want, sizeof want, " - ERROR - %s\n", text);
	CHECK(log && strstr(log, want));
	CHECK(err && !strncmp(err, "dlinspect: error: xxx", 21));
	CHECK(err && strlen(err) > 4096 && strlen(err) < 4200);
	CHECK(err && strstr(err, "x...\n"));
	free(log);
	free(err);
}

/* A relative log dir is the one under the working directory at dli_init, as nvdlfw_inspect's files
 * are: files made later (the first statistic, the message log's first line after it) must not land
 * under another directory because the host changed its own meanwhile. */
static void test_relative_log_dir_anchored(void)
{
	char base[] = "/tmp/dli-test-cwd-XXXXXX", first[64], second[64], path[256], *old;
	if (!mkdtemp(base) || !(old = getcwd(NULL, 0))) {
		CHECK(false);
		return;
	}
	snprintf(first, sizeof first, "%s/a", base);
	snprintf(second, sizeof second, "%s/b", base);
	CHECK_INT(mkdir(first, 0755), 0);
	CHECK_INT(mkdir(second, 0755), 0);
	CHECK_INT(chdir(first), 0);
	struct dli_options o;
	dli_options_init(&o);
	o.config_yaml = "s:\n  enabled: true\n  layers: {layer_name_regex_pattern: '.*'}\n"
			"  transformer_engine:\n"
			"    LogTensorStats: {enabled: true, tensors: [activation], stats: [max]}\n";
	o.log_dir = "logs";
	struct dli_context *ctx = NULL;
	struct dli_error err;
	CHECK_INT(dli_init(&o, &ctx, &err), 0);
	CHECK_INT(chdir(second), 0);
	if (ctx) {
		float x[2] = {1, 2};
		struct dli_tensor t = tensor(x, DLI_DTYPE_F32, 2);
		struct dli_layer *l = layer(ctx, "l");
		if (l)
			CHECK_INT(dli_inspect_tensor(l, DLI_TENSOR_ACTIVATION, &t, NULL, NULL), 0);
		CHECK_INT(dli_step(ctx), 0);
		dli_destroy(ctx);
	}
	struct stat st;
	snprintf(path, sizeof path, "%s/logs/" STATS_LOG, first);
	CHECK(stat(path, &st) == 0);
	snprintf(path, sizeof path, "%s/logs", second);
	CHECK(stat(path, &st) != 0);
	CHECK_INT(chdir(old), 0);
	free(old);
	nftw(base, dli_test_rm_entry, 8, FTW_DEPTH | FTW_PHYS);
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
	/* A size no version had (garbage, or a byte count from the wrong struct) is refused as 0 is:
	 * copying 3 bytes would run without the config above. */
	o.size = 3;
	ctx = (struct dli_context *)&o;
	CHECK_INT(dli_init(&o, &ctx, &err), -EINVAL);
	CHECK(ctx == NULL);
	CHECK_CONTAINS(err.message, "dli_init: options.size is 3, smaller than any version's struct "
				    "dli_options (");
	/* NULL options are the defaults, as before. */
	CHECK_INT(dli_init(NULL, &ctx, &err), 0);
	CHECK(ctx != NULL);
	dli_destroy(ctx);
	/* A declared tensor list with a hole is refused, naming the entry, not read through. */
	static const char *const names[] = {"activation", NULL};
	dli_options_init(&o);
	o.config_yaml = "s: {enabled: false}\n";
	o.tensor_names = names;
	o.n_tensor_names = 2;
	CHECK_INT(dli_init(&o, &ctx, &err), -EINVAL);
	CHECK(ctx == NULL);
	CHECK_CONTAINS(err.message, "dli_init: options.tensor_names[1] is NULL");
	/* A plugin dir that names no dir is refused as well, not skipped. */
	static const char *const dirs[] = {".", NULL};
	static const char *const empty_dir[] = {""};
	dli_options_init(&o);
	o.config_yaml = "s: {enabled: false}\n";
	o.plugin_dirs = dirs;
	o.n_plugin_dirs = 2;
	CHECK_INT(dli_init(&o, &ctx, &err), -EINVAL);
	CHECK(ctx == NULL);
	CHECK_STR(err.message, "dli_init: options.plugin_dirs: plugin dir 2 of 2 is NULL: name a "
			       "directory ('.' for the working directory)");
	o.plugin_dirs = empty_dir;
	o.n_plugin_dirs = 1;
	CHECK_INT(dli_init(&o, &ctx, &err), -EINVAL);
	CHECK_CONTAINS(err.message, "plugin dir 1 of 1 is empty");
	/* A NULL list with a count is no list, as for extensions (the count was read through). */
	dli_options_init(&o);
	o.config_yaml = "s: {enabled: false}\n";
	o.plugin_dirs = NULL;
	o.n_plugin_dirs = 5;
	CHECK_INT(dli_init(&o, &ctx, &err), 0);
	dli_destroy(ctx);
}

/* Every public function with NULL for each pointer: no crash, the rule of dlinspect.h's top
 * comment (NULL handle: the default answer for *_enabled and queries, -EINVAL for the rest). */
static void test_null_everywhere(void)
{
	int64_t next = 0;
	struct dli_error err;
	struct dli_options o;
	float x = 1;
	struct dli_tensor t = tensor(&x, DLI_DTYPE_F32, 1);

	dli_options_init(NULL);
	dli_options_init(&o);
	memset(&err, 0, sizeof err);
	CHECK_INT(dli_init(&o, NULL, &err), -EINVAL);
	CHECK_STR(err.message, "dli_init: `out` is NULL");
	CHECK_INT(dli_init(NULL, NULL, NULL), -EINVAL);
	dli_destroy(NULL);

	struct dli_layer *l = (struct dli_layer *)&o;
	CHECK_INT(dli_layer_get(NULL, "x", &l, &err), -EINVAL);
	CHECK(l == NULL);
	CHECK_STR(err.message, "dli_layer_get: NULL argument");
	CHECK(dli_layer_name(NULL) == NULL);
	CHECK_INT(dli_tensor_id(NULL, "weight"), DLI_TENSOR_WEIGHT);
	CHECK_INT(dli_tensor_id(NULL, "mine"), -1);
	CHECK_INT(dli_tensor_id(NULL, NULL), -1);
	CHECK_INT(dli_gemm_from_name(NULL), -1);

	CHECK(dli_fp8_gemm_enabled(NULL, DLI_GEMM_FPROP, &next) && next == DLI_NEVER);
	next = 0;
	CHECK(!dli_modify_tensor_enabled(NULL, DLI_GEMM_FPROP, 0, &next) && next == DLI_NEVER);
	next = 0;
	CHECK(!dli_inspect_tensor_enabled(NULL, 0, &next) && next == DLI_NEVER);
	next = 0;
	CHECK(!dli_inspect_tensor_postquantize_enabled(NULL, DLI_GEMM_FPROP, 0, &next) &&
	      next == DLI_NEVER);
	CHECK_INT(dli_modify_tensor(NULL, DLI_GEMM_FPROP, 0, &t, NULL, &t), -EINVAL);
	CHECK_INT(dli_inspect_tensor(NULL, 0, &t, NULL, NULL), -EINVAL);
	CHECK_INT(dli_inspect_tensor_postquantize(NULL, DLI_GEMM_FPROP, 0, NULL), -EINVAL);
	CHECK_INT(dli_call(NULL, "log_tensor_stats", NULL), -EINVAL);

	CHECK(dli_fp8_gemm_enabled_by_name(NULL, "l", "fprop", NULL));
	CHECK(!dli_modify_tensor_enabled_by_name(NULL, "l", "fprop", "weight", NULL));
	CHECK(!dli_inspect_tensor_enabled_by_name(NULL, "l", "weight", NULL));
	CHECK_INT(dli_inspect_tensor_by_name(NULL, "l", "weight", &t), -EINVAL);
	CHECK_INT(dli_step(NULL), -EINVAL);
	CHECK_INT(dli_iteration_get(NULL), -EINVAL);
	dli_iteration_set(NULL, 5);
	CHECK_INT(dli_fp8_cast(NULL, &t, DLI_DTYPE_F8E4M3, 1), -EINVAL);
	CHECK_INT(dli_fp8_cast(&t, NULL, DLI_DTYPE_F8E4M3, 1), -EINVAL);
	dli_log(NULL, DLI_LOG_ERROR, "nowhere");

	/* A real context and layer with NULL names, tensors and out-pointers. */
	struct dli_context *ctx = open_yaml(
		"s:\n  enabled: true\n  layers: {layer_name_regex_pattern: '.*'}\n"
		"  transformer_engine:\n"
		"    LogTensorStats: {enabled: true, tensors: [activation], stats: [max]}\n",
		NULL);
	CHECK(ctx != NULL);
	if (!ctx)
		return;
	CHECK_INT(dli_layer_get(ctx, NULL, &l, &err), -EINVAL);
	CHECK_INT(dli_layer_get(ctx, "x", NULL, &err), -EINVAL);
	CHECK_INT(dli_layer_get(ctx, "x", NULL, NULL), -EINVAL);
	l = layer(ctx, "model.1.fc1");
	CHECK(l != NULL);
	CHECK(dli_inspect_tensor_enabled(l, DLI_TENSOR_ACTIVATION, NULL));
	/* Nothing modifies here: "nothing to do" comes first (NULL tensors reach no feature). */
	CHECK_INT(dli_modify_tensor(l, DLI_GEMM_FPROP, 0, NULL, NULL, &t), -ENOENT);
	CHECK_INT(dli_modify_tensor(l, DLI_GEMM_FPROP, 0, &t, NULL, NULL), -ENOENT);
	CHECK_INT(dli_call(l, NULL, NULL), -EINVAL);
	CHECK(dli_fp8_gemm_enabled_by_name(ctx, NULL, "fprop", NULL));
	CHECK(dli_fp8_gemm_enabled_by_name(ctx, "model.1.fc1", NULL, NULL));
	CHECK(!dli_modify_tensor_enabled_by_name(ctx, NULL, NULL, NULL, NULL));
	CHECK(!dli_inspect_tensor_enabled_by_name(ctx, NULL, "activation", NULL));
	CHECK(!dli_inspect_tensor_enabled_by_name(ctx, "model.1.fc1", NULL, NULL));
	CHECK_INT(dli_inspect_tensor_by_name(ctx, NULL, "activation", &t), -EINVAL);
	CHECK_INT(dli_inspect_tensor_by_name(ctx, "model.1.fc1", NULL, &t), -EINVAL);
	CHECK_INT(dli_tensor_id(ctx, NULL), -1);
	dli_log(ctx, DLI_LOG_INFO, NULL);
	CHECK_INT(dli_step(ctx), 0);
	dli_destroy(ctx);
}

/* A modifying feature gets no NULL tensor: the call is refused before it. */
static void test_null_tensors_not_modified(void)
{
	struct dli_context *ctx = open_yaml(
		"s:\n  enabled: true\n  layers: {layer_name_regex_pattern: '.*'}\n"
		"  transformer_engine:\n"
		"    FakeQuant: {enabled: true, gemms: [fprop], tensors: [activation], "
		"quant_format: FP8E4M3}\n",
		NULL);
	CHECK(ctx != NULL);
	if (!ctx)
		return;
	struct dli_layer *l = layer(ctx, "model.1.fc1");
	float x = 3, y = 0;
	struct dli_tensor in = tensor(&x, DLI_DTYPE_F32, 1), out = tensor(&y, DLI_DTYPE_F32, 1);
	CHECK(dli_modify_tensor_enabled(l, DLI_GEMM_FPROP, DLI_TENSOR_ACTIVATION, NULL));
	CHECK_INT(dli_modify_tensor(l, DLI_GEMM_FPROP, DLI_TENSOR_ACTIVATION, NULL, NULL, &out),
		  -EINVAL);
	CHECK_INT(dli_modify_tensor(l, DLI_GEMM_FPROP, DLI_TENSOR_ACTIVATION, &in, NULL, NULL),
		  -EINVAL);
	CHECK_INT(dli_modify_tensor(l, DLI_GEMM_FPROP, DLI_TENSOR_ACTIVATION, &in, NULL, &out), 0);
	CHECK(y == 3);
	dli_destroy(ctx);
}

/* At the last iteration, `next` says "never" instead of wrapping to INT64_MIN, and dli_step
 * refuses (-EOVERFLOW) and keeps the iteration; one step before, it still ends the step. */
static void test_last_iteration(void)
{
	struct dli_context *ctx = open_yaml(
		"s:\n  enabled: true\n  layers: {layer_name_regex_pattern: '.*'}\n"
		"  transformer_engine:\n"
		"    LogTensorStats: {enabled: true, tensors: [activation], stats: [max]}\n"
		"    DisableFP8GEMM: {enabled: true, gemms: [fprop]}\n",
		NULL);
	CHECK(ctx != NULL);
	if (!ctx)
		return;
	struct dli_layer *l = layer(ctx, "model.1.fc1");
	int64_t next = 0;
	float x = 3;
	struct dli_tensor t = tensor(&x, DLI_DTYPE_F32, 1);
	dli_iteration_set(ctx, INT64_MAX - 1);
	CHECK(dli_inspect_tensor_enabled(l, DLI_TENSOR_ACTIVATION, &next));
	CHECK_INT(next, INT64_MAX);
	CHECK_INT(dli_step(ctx), 0);
	CHECK_INT(dli_iteration_get(ctx), INT64_MAX);
	for (int i = 0; i < 2; i++) {
		next = 0;
		CHECK(dli_inspect_tensor_enabled(l, DLI_TENSOR_ACTIVATION, &next));
		CHECK_INT(next, DLI_NEVER);
		next = 0;
		CHECK(!dli_fp8_gemm_enabled(l, DLI_GEMM_FPROP, &next));
		CHECK_INT(next, DLI_NEVER);
		next = 0;
		CHECK(dli_fp8_gemm_enabled(l, DLI_GEMM_WGRAD, &next));
		CHECK_INT(next, DLI_NEVER);
	}
	/* An evaluation pass answers out of line: its next saturates too. */
	CHECK_INT(dli_mode_set(ctx, DLI_MODE_EVAL), 0);
	next = 0;
	CHECK(!dli_inspect_tensor_enabled(l, DLI_TENSOR_ACTIVATION, &next));
	CHECK_INT(next, DLI_NEVER);
	next = 0;
	CHECK(!dli_modify_tensor_enabled(l, DLI_GEMM_FPROP, DLI_TENSOR_ACTIVATION, &next));
	CHECK_INT(next, DLI_NEVER);
	CHECK_INT(dli_mode_set(ctx, DLI_MODE_TRAIN), 0);
	CHECK_INT(dli_inspect_tensor(l, DLI_TENSOR_ACTIVATION, &t, NULL, NULL), 0);
	CHECK_INT(dli_step(ctx), -EOVERFLOW);
	CHECK_INT(dli_iteration_get(ctx), INT64_MAX);
	CHECK_INT(count_lines(MESSAGE_LOG, "dli_step at iteration 9223372036854775807: the iteration "
					   "cannot grow further; the step is not ended"),
		  1);
	dli_destroy(ctx);
}

/* A negative iteration is refused, not clamped to 0 (which would restart every schedule): at
 * dli_init with an error, at dli_iteration_set with a message and the iteration unchanged. */
static void test_negative_iteration(void)
{
	struct dli_options o;
	struct dli_error err;
	struct dli_context *ctx = NULL;
	dli_options_init(&o);
	o.config_yaml = "s: {enabled: false}\n";
	o.initial_iteration = -1;
	CHECK_INT(dli_init(&o, &ctx, &err), -EINVAL);
	CHECK(ctx == NULL);
	CHECK_STR(err.message, "dli_init: options.initial_iteration is -1: expected an iteration >= 0");
	ctx = open_yaml("s: {enabled: false}\n", NULL);
	CHECK(ctx != NULL);
	if (!ctx)
		return;
	dli_iteration_set(ctx, 7);
	dli_iteration_set(ctx, -3);
	CHECK_INT(dli_iteration_get(ctx), 7);
	dli_iteration_set(ctx, INT64_MIN);
	CHECK_INT(dli_iteration_get(ctx), 7);
	CHECK_INT(count_lines(MESSAGE_LOG, "dli_iteration_set(-3): an iteration is >= 0; the "
					   "iteration stays 7"),
		  1);
	dli_destroy(ctx);
}

/* A full disk (a file size limit in a child, SIGXFSZ ignored so writes fail with EFBIG): the
 * statistics log keeps only whole lines and ends on a newline, dli_step returns the error, and the
 * message log says it once, however many steps fail after. */
static void test_full_disk_whole_lines(void)
{
	struct dli_context *ctx = open_yaml(
		"s:\n  enabled: true\n  layers: {layer_name_regex_pattern: '.*'}\n"
		"  transformer_engine:\n"
		"    LogTensorStats: {enabled: true, tensors: [activation], "
		"stats: [min, max, mean, std]}\n",
		NULL);
	CHECK(ctx != NULL);
	if (!ctx)
		return;
	fflush(NULL);
	pid_t pid = fork();
	if (pid == 0) {
		char path[512];
		snprintf(path, sizeof path, "%s/stderr.txt", log_dir);
		if (!freopen(path, "w", stderr))
			_exit(10);
		signal(SIGXFSZ, SIG_IGN);
		struct rlimit small = {2000, 2000};
		if (setrlimit(RLIMIT_FSIZE, &small) != 0)
			_exit(11);
		float x[3] = {1, 2, 4};
		struct dli_tensor t = tensor(x, DLI_DTYPE_F32, 3);
		int first = 0, failed = 0;
		for (int it = 0; it < 6; it++) {
			static const char *const names[] = {"model.1.fc1", "model.1.fc2", "model.2.fc1"};
			for (int k = 0; k < 3; k++)
				dli_inspect_tensor_by_name(ctx, names[k], "activation", &t);
			int r = dli_step(ctx);
			if (r && !first)
				first = r;
			failed += r != 0;
		}
		dli_destroy(ctx);
		fflush(stderr);
		_exit(first == -EFBIG && failed >= 2 ? 0 : 12);
	}
	int status = 0;
	CHECK(pid > 0 && waitpid(pid, &status, 0) == pid);
	CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	dli_destroy(ctx);

	char buf[8192];
	FILE *f = open_log(STATS_LOG);
	size_t n = f ? fread(buf, 1, sizeof buf - 1, f) : 0;
	if (f)
		fclose(f);
	buf[n] = 0;
	CHECK(n > 0 && n <= 2000 && buf[n - 1] == '\n');
	int lines = 0;
	for (char *p = buf, *nl; (nl = strchr(p, '\n')); p = nl + 1, lines++) {
		*nl = 0;
		CHECK(strstr(p, " - INFO - model.") && strstr(p, " \t\t\t\t value="));
	}
	CHECK(lines >= 12); /* the first step's 12 lines at least */
	CHECK_INT(count_lines(MESSAGE_LOG, "logger 'file' could not"), 1);
	CHECK_INT(count_lines(MESSAGE_LOG, "File too large"), 1);
	CHECK_INT(count_lines("stderr.txt", "logger 'file' could not"), 1);
}

int main(void)
{
	test_null_everywhere();
	test_null_tensors_not_modified();
	test_last_iteration();
	test_negative_iteration();
	test_names_cannot_forge_log_lines();
	test_invalid_utf8_escaped();
	test_escape_cut_whole();
	test_long_message_whole();
	test_relative_log_dir_anchored();
	test_zeroed_options_refused();
	test_full_disk_whole_lines();
	remove_log_dir();
	return check_exit();
}
