/* Write errors in a real run (dli_init, the file and tensorboard loggers, the TbEmit fixture): a
 * TensorBoard directory that cannot be made, a full disk, an event file removed underneath. Each
 * gives one message in the message log and no crash; the file logger keeps every line; the event
 * records written before stay readable. */
#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <unistd.h>

#include <dlinspect/dlinspect.h>

#include "check.h"
#include "reader.h"

#define LAYER "model.layers.0.mlp.fc1"
#define SCALARS_PER_STEP 4 /* what TbEmit sends per layer and step, besides one histogram */
#define STATS_LOG "nvdlfw_inspect_statistics_logs/nvdlfw_inspect_globalrank-0.log"
#define MESSAGE_LOG "nvdlfw_inspect_logs/nvdlfw_inspect_globalrank-0.log"

static char tmp[] = "/tmp/dli-test-tb-errors-XXXXXX";

/* dli_init of a run logging to the file logger and TensorBoard: the context, or NULL and *err. */
static struct dli_context *try_run(const char *log_dir, const char *tb_params, int buckets,
				   struct dli_error *err)
{
	struct dli_options o;
	struct dli_context *ctx = NULL;
	char yaml[1024];

	snprintf(yaml, sizeof(yaml),
		 "extensions: [tb_emit, file, tensorboard]\n"
		 "emit:\n"
		 "  enabled: true\n"
		 "  layers: {layer_name_regex_pattern: '.*'}\n"
		 "  TbEmit: {enabled: true, buckets: %d}\n"
		 "loggers: {file: {}, tensorboard: %s}\n",
		 buckets, tb_params);
	dli_options_init(&o);
	o.config_yaml = yaml;
	o.log_dir = log_dir;
	return dli_init(&o, &ctx, err) == 0 ? ctx : NULL;
}

static struct dli_context *open_run(const char *log_dir, const char *tb_params, int buckets)
{
	struct dli_error err;
	struct dli_layer *l;
	struct dli_context *ctx = try_run(log_dir, tb_params, buckets, &err);

	if (!ctx) {
		fprintf(stderr, "dli_init: %s\n", err.message);
		CHECK(!"dli_init succeeds");
		return NULL;
	}
	CHECK_INT(dli_layer_get(ctx, LAYER, &l, &err), 0);
	return ctx;
}

/* Counts the lines of `log_dir/rel` that contain `needle` (all lines for ""). */
static int count_lines(const char *log_dir, const char *rel, const char *needle, char *first,
		       size_t first_size)
{
	char path[4096], line[4096];
	int n = 0;

	snprintf(path, sizeof(path), "%s/%s", log_dir, rel);
	FILE *fp = fopen(path, "r");
	if (!fp)
		return -1;
	while (fgets(line, sizeof(line), fp)) {
		if (!strstr(line, needle))
			continue;
		if (n++ == 0 && first)
			snprintf(first, first_size, "%s", line);
	}
	fclose(fp);
	return n;
}

/* The common checks: one error message naming the logger and the cause; every statistics line. */
static void check_logs(const char *log_dir, int steps, const char *cause)
{
	char msg[4096] = "";

	CHECK_INT(count_lines(log_dir, MESSAGE_LOG, "logger 'tensorboard'", msg, sizeof(msg)), 1);
	CHECK_CONTAINS(msg, " - ERROR - logger 'tensorboard' could not ");
	CHECK_CONTAINS(msg, cause);
	CHECK_CONTAINS(msg, "training continues");
	CHECK_INT(count_lines(log_dir, MESSAGE_LOG, "ERROR", NULL, 0), 1);
	CHECK_INT(count_lines(log_dir, STATS_LOG, "", NULL, 0), steps * SCALARS_PER_STEP);
}

/* Every event file in `dir` starts with its version record and holds whole records; each step
 * there is whole (its scalars and histogram), steps in order. Returns how many steps the files
 * hold, and the first in *first. */
static int check_event_files(const char *dir, int64_t *first)
{
	char *paths[8];
	size_t n = tb_event_files(dir, paths, 8), records = 0;
	int64_t last = -1;
	int steps = 0;

	for (size_t i = 0; i < n; i++) {
		struct tb_file f;
		CHECK(tb_file_read(paths[i], &f));
		CHECK(!f.cut && !f.corrupt);
		CHECK(f.n >= 1 && f.events[0]->what_case == DLI_TB__EVENT__WHAT_FILE_VERSION);
		for (size_t k = 1; k < f.n; k++, records++) {
			CHECK_INT(f.events[k]->what_case, DLI_TB__EVENT__WHAT_SUMMARY);
			CHECK(f.events[k]->step >= last);
			if (f.events[k]->step != last && steps++ == 0)
				*first = f.events[k]->step;
			last = f.events[k]->step;
		}
		tb_file_free(&f);
		free(paths[i]);
	}
	CHECK_INT(records, steps * (SCALARS_PER_STEP + 1));
	return steps;
}

/* `dir` under a regular file: refused at dli_init. Put under one after dli_init: mkdir fails with
 * ENOTDIR at every step end. */
static void test_unwritable_dir(void)
{
	char log_dir[4096], plain[4096], params[4200], want[8400];
	struct dli_error err;

	snprintf(log_dir, sizeof(log_dir), "%s/unwritable", tmp);
	snprintf(plain, sizeof(plain), "%s/plain", tmp);
	FILE *fp = fopen(plain, "w");
	if (fp)
		fclose(fp);
	snprintf(params, sizeof(params), "{dir: '%s/tb'}", plain);
	CHECK(try_run(log_dir, params, 4, &err) == NULL);
	CHECK_INT(err.code, -ENOTDIR);
	snprintf(want, sizeof(want),
		 "/loggers/tensorboard/tensorboard.so): could not create the logger: dir '%s/tb': "
		 "'%s' is not a "
		 "directory",
		 plain, plain);
	CHECK_CONTAINS(err.message, want);
	CHECK_INT(unlink(plain), 0);
	struct dli_context *ctx = open_run(log_dir, params, 4);
	if (!ctx)
		return;
	fp = fopen(plain, "w");
	CHECK(fp != NULL);
	if (fp)
		fclose(fp);
	for (int i = 0; i < 5; i++) {
		CHECK_INT(dli_step(ctx), -ENOTDIR);
		/* The code comes with its reason, every step (the message log has it once). */
		CHECK_STR(dli_last_error(ctx), "dli_step: logger 'tensorboard' could not flush: Not a "
					       "directory");
	}
	dli_destroy(ctx);
	check_logs(log_dir, 5, "could not flush: Not a directory");
}

/* A file size limit the event file reaches long before the statistics log: histograms of 2000
 * buckets (32 kB a step) go to TensorBoard only. */
static void test_disk_full(void)
{
	char log_dir[4096], dir[4200];
	struct rlimit old, small;
	int steps = 12;

	snprintf(log_dir, sizeof(log_dir), "%s/full", tmp);
	struct dli_context *ctx = open_run(log_dir, "{histograms: true}", 2000);
	if (!ctx)
		return;
	signal(SIGXFSZ, SIG_IGN);
	CHECK_INT(getrlimit(RLIMIT_FSIZE, &old), 0);
	small = old;
	small.rlim_cur = 100000;
	CHECK_INT(setrlimit(RLIMIT_FSIZE, &small), 0);
	int failed = 0;
	for (int i = 0; i < steps; i++)
		failed += dli_step(ctx) == -EFBIG;
	dli_destroy(ctx);
	CHECK_INT(setrlimit(RLIMIT_FSIZE, &old), 0);
	signal(SIGXFSZ, SIG_DFL);
	CHECK(failed >= 5);
	check_logs(log_dir, steps, "could not flush: File too large");
	snprintf(dir, sizeof(dir), "%s/tensorboard", log_dir);
	int64_t first = -1;
	int whole = check_event_files(dir, &first);
	CHECK(whole >= 1 && whole <= 3);
	CHECK_INT(first, 0);
}

/* The event file removed after a few steps: one message, and the later steps in a new file. */
static void test_removed_file(void)
{
	char log_dir[4096], dir[4200], *paths[4];

	snprintf(log_dir, sizeof(log_dir), "%s/removed", tmp);
	snprintf(dir, sizeof(dir), "%s/tensorboard", log_dir);
	struct dli_context *ctx = open_run(log_dir, "{}", 4);
	if (!ctx)
		return;
	for (int i = 0; i < 3; i++)
		CHECK_INT(dli_step(ctx), 0);
	size_t n = tb_event_files(dir, paths, 4);
	CHECK_INT(n, 1);
	for (size_t i = 0; i < n; i++) {
		CHECK_INT(unlink(paths[i]), 0);
		free(paths[i]);
	}
	CHECK_INT(dli_step(ctx), -ENOENT);
	CHECK_INT(dli_step(ctx), 0);
	dli_destroy(ctx);
	check_logs(log_dir, 5, "could not flush: No such file or directory");
	/* The new file holds steps 3 and 4: what was buffered when the file went, and the next. */
	int64_t first = -1;
	CHECK_INT(check_event_files(dir, &first), 2);
	CHECK_INT(first, 3);
}

int main(void)
{
	if (!mkdtemp(tmp))
		return 2;
	test_unwritable_dir();
	test_disk_full();
	test_removed_file();
	if (check_failures == 0) {
		char cmd[256];
		snprintf(cmd, sizeof(cmd), "rm -rf %s", tmp);
		if (system(cmd) != 0)
			fprintf(stderr, "could not remove %s\n", tmp);
	}
	return check_exit();
}
