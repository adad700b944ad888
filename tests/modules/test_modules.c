/* Tests of the bundled modules on their own: each .so is dlopen()ed from the build tree and driven
 * through its descriptor with a hand-made host table, as the core would, without the core. */
#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <regex.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <dlinspect/plugin.h>

#include "check.h"
#include "fsutil-private.h" /* dli_make_dirs, for the stand-in host table */

#define STATS_FILE "nvdlfw_inspect_statistics_logs/nvdlfw_inspect_globalrank-3.log"
#define MESSAGES_FILE "nvdlfw_inspect_logs/nvdlfw_inspect_globalrank-3.log"
#define TIMESTAMP_RE "^([0-9]{4}-[0-9]{2}-[0-9]{2} [0-9]{2}:[0-9]{2}:[0-9]{2}),[0-9]{3} - "

/* ---- A host table with just enough behind it ---- */

static void host_log(struct dli_context *ctx, enum dli_log_level level, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
}

static int64_t host_iteration(const struct dli_context *ctx)
{
	return 0;
}

static const struct dli_host test_host = {
	.size = sizeof(struct dli_host),
	.abi_major = DLI_ABI_MAJOR,
	.abi_minor = DLI_ABI_MINOR,
	.log = host_log,
	.iteration = host_iteration,
	.make_dirs = dli_make_dirs, /* the core's, built into this test */
};

static const struct dli_module *load_module(const char *path, void **handle)
{
	dli_module_entry_fn entry;
	struct dli_host other_abi = test_host;

	*handle = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	if (!*handle) {
		fprintf(stderr, "dlopen %s: %s\n", path, dlerror());
		return NULL;
	}
	*(void **)&entry = dlsym(*handle, DLI_MODULE_ENTRY_NAME);
	CHECK(entry != NULL);
	if (!entry)
		return NULL;
	/* A host of another ABI major is refused by the module itself. */
	other_abi.abi_major = DLI_ABI_MAJOR + 1;
	CHECK(entry(&other_abi) == NULL);
	return entry(&test_host);
}

static void check_module_header(const struct dli_module *m, const char *name, const char *ns)
{
	CHECK_INT(m->size, sizeof(struct dli_module));
	CHECK_INT(m->abi_major, DLI_ABI_MAJOR);
	CHECK_INT(m->abi_minor, DLI_ABI_MINOR);
	CHECK_STR(m->name, name);
	if (ns)
		CHECK_STR(m->ns, ns);
	else
		CHECK(m->ns == NULL);
	CHECK(m->doc && *m->doc && !strchr(m->doc, '\n'));
}

static void check_feature_desc(const struct dli_feature_desc *f, const char *name, const char *alias,
			       const char *alias2, uint32_t flags)
{
	CHECK_INT(f->size, sizeof(struct dli_feature_desc));
	CHECK_STR(f->name, name);
	CHECK(f->aliases != NULL);
	if (f->aliases) {
		CHECK_STR(f->aliases[0], alias);
		CHECK_STR(f->aliases[1], alias2);
		CHECK(f->aliases[2] == NULL);
	}
	CHECK(f->doc && *f->doc && !strchr(f->doc, '\n'));
	CHECK_INT(f->flags, flags);
	CHECK_INT(f->n_params, 0);
	CHECK(f->calls == NULL);
	CHECK(f->ops != NULL);
	if (!f->ops)
		return;
	CHECK_INT(f->ops->size, sizeof(struct dli_feature_ops));
	CHECK(f->ops->create && f->ops->destroy && f->ops->fp8_gemm_enabled);
	/* Nothing else is implemented: the core must not think these features inspect or modify. */
	CHECK(!f->ops->modify_tensor_enabled && !f->ops->modify_tensor && !f->ops->inspect_tensor);
}

/* Creates an instance of `f` for gemm mask `gemms` and answers fp8_gemm_enabled for each gemm. */
static void feature_answers(const struct dli_feature_desc *f, uint32_t gemms,
			    bool enabled[DLI_GEMM_COUNT], int64_t next[DLI_GEMM_COUNT])
{
	struct dli_feature_create_args args = {
		.size = sizeof(args),
		.host = &test_host,
		.where = "test.yaml:1:1",
		.section = "section",
		.gemms = gemms,
	};
	struct dli_error err = {0};
	struct dli_feature_call call = {.layer_name = "model.1.fc1"};
	void *instance = NULL;

	CHECK_INT(f->ops->create(&args, &instance, &err), 0);
	call.instance = instance;
	for (int g = 0; g < DLI_GEMM_COUNT; g++) {
		next[g] = 0;
		enabled[g] = f->ops->fp8_gemm_enabled(&call, (enum dli_gemm)g, 7, &next[g]);
	}
	f->ops->destroy(instance);
}

static void test_disable_fp8_gemm(void)
{
	void *handle;
	const struct dli_module *m = load_module(DISABLE_FP8_GEMM_PATH, &handle);
	const uint32_t fprop_wgrad = (1u << DLI_GEMM_FPROP) | (1u << DLI_GEMM_WGRAD);
	bool enabled[DLI_GEMM_COUNT];
	int64_t next[DLI_GEMM_COUNT];

	CHECK(m != NULL);
	if (!m)
		return;
	check_module_header(m, "disable_fp8_gemm", "transformer_engine");
	CHECK_INT(m->n_features, 1);
	CHECK_INT(m->n_loggers, 0);
	check_feature_desc(m->features[0], "DisableFP8GEMM", "disable_fp8_gemm",
			   "DisableQuantizationGEMM", DLI_FEATURE_GEMMS);

	feature_answers(m->features[0], fprop_wgrad, enabled, next);
	CHECK(!enabled[DLI_GEMM_FPROP]);
	CHECK(enabled[DLI_GEMM_DGRAD]);
	CHECK(!enabled[DLI_GEMM_WGRAD]);
	for (int g = 0; g < DLI_GEMM_COUNT; g++)
		CHECK_INT(next[g], DLI_NEVER);

	/* Only dgrad selected: the others stay FP8 even if asked. */
	feature_answers(m->features[0], 1u << DLI_GEMM_DGRAD, enabled, next);
	CHECK(enabled[DLI_GEMM_FPROP] && !enabled[DLI_GEMM_DGRAD] && enabled[DLI_GEMM_WGRAD]);
	dlclose(handle);
}

static void test_disable_fp8_layer(void)
{
	void *handle;
	const struct dli_module *m = load_module(DISABLE_FP8_LAYER_PATH, &handle);
	bool enabled[DLI_GEMM_COUNT];
	int64_t next[DLI_GEMM_COUNT];

	CHECK(m != NULL);
	if (!m)
		return;
	check_module_header(m, "disable_fp8_layer", "transformer_engine");
	CHECK_INT(m->n_features, 1);
	CHECK_INT(m->n_loggers, 0);
	check_feature_desc(m->features[0], "DisableFP8Layer", "disable_fp8_layer",
			   "DisableQuantizationLayer", 0);

	/* No gemms key for this feature: the core passes an empty mask and every gemm is disabled. */
	feature_answers(m->features[0], 0, enabled, next);
	for (int g = 0; g < DLI_GEMM_COUNT; g++) {
		CHECK(!enabled[g]);
		CHECK_INT(next[g], DLI_NEVER);
	}
	dlclose(handle);
}

/* ---- File logger ---- */

static const struct dli_logger_desc *file_logger;

static void *logger_create(const char *log_dir)
{
	struct dli_logger_create_args args = {
		.size = sizeof(args),
		.host = &test_host,
		.where = "test.yaml:1:1",
		.rank = 3,
		.world_size = 8,
	};
	struct dli_error err = {0};
	void *instance = NULL;
	/* The logger must copy log_dir: this buffer is gone after create. */
	char *copy = strdup(log_dir);

	args.log_dir = copy;
	CHECK_INT(file_logger->ops->create(&args, &instance, &err), 0);
	memset(copy, 'x', strlen(copy));
	free(copy);
	CHECK(instance != NULL);
	return instance;
}

static bool exists(const char *dir, const char *rel)
{
	char path[4096];
	struct stat st;

	snprintf(path, sizeof(path), "%s/%s", dir, rel);
	return stat(path, &st) == 0;
}

/* Reads `dir/rel` and splits it into lines (in place; *n_lines set). Free the result. */
static char *read_lines(const char *dir, const char *rel, char **lines, size_t max, size_t *n_lines)
{
	char path[4096];
	FILE *fp;
	char *buf;
	long size;

	*n_lines = 0;
	snprintf(path, sizeof(path), "%s/%s", dir, rel);
	fp = fopen(path, "rb");
	if (!fp)
		return NULL;
	fseek(fp, 0, SEEK_END);
	size = ftell(fp);
	rewind(fp);
	buf = calloc(1, (size_t)size + 1);
	if (buf && fread(buf, 1, (size_t)size, fp) != (size_t)size) {
		free(buf);
		buf = NULL;
	}
	fclose(fp);
	/* Every line, the last one included, ends with '\n'. */
	CHECK(buf && size > 0 && buf[size - 1] == '\n');
	for (char *p = buf, *nl; p && *p && (nl = strchr(p, '\n')); p = nl + 1) {
		*nl = '\0';
		if (*n_lines < max)
			lines[*n_lines] = p;
		(*n_lines)++;
	}
	return buf;
}

/* The timestamp (captured as match 1) is local time within a minute of now. */
static void check_timestamp(const char *line, regmatch_t m)
{
	char stamp[32] = {0};
	struct tm tm = {0};
	time_t t;

	memcpy(stamp, line + m.rm_so, (size_t)(m.rm_eo - m.rm_so));
	CHECK(strptime(stamp, "%Y-%m-%d %H:%M:%S", &tm) != NULL);
	tm.tm_isdst = -1;
	t = mktime(&tm);
	CHECK(llabs((long long)(t - time(NULL))) < 60);
}

static regex_t scalar_re, text_re;

/* One statistics line: exact layout, name, iteration text, and the value reads back to the same float. */
static void check_scalar_line(const char *line, const char *name, const char *iteration, double value)
{
	regmatch_t m[5];
	char got[256];
	float want = (float)value, back;

	CHECK(line != NULL);
	if (!line)
		return;
	if (regexec(&scalar_re, line, 5, m, 0) != 0) {
		fprintf(stderr, "bad statistics line: \"%s\"\n", line);
		CHECK(!"statistics line matches the layout");
		return;
	}
	check_timestamp(line, m[1]);
	snprintf(got, sizeof(got), "%.*s", (int)(m[2].rm_eo - m[2].rm_so), line + m[2].rm_so);
	CHECK_STR(got, name);
	snprintf(got, sizeof(got), "%.*s", (int)(m[3].rm_eo - m[3].rm_so), line + m[3].rm_so);
	CHECK_STR(got, iteration);
	back = strtof(line + m[4].rm_so, NULL);
	if (isnan(want))
		CHECK(isnan(back));
	else
		CHECK(memcmp(&back, &want, sizeof(float)) == 0);
}

static void check_text_line(const char *line, const char *level, const char *text)
{
	regmatch_t m[4];
	char got[256];

	CHECK(line != NULL);
	if (!line)
		return;
	if (regexec(&text_re, line, 4, m, 0) != 0) {
		fprintf(stderr, "bad message line: \"%s\"\n", line);
		CHECK(!"message line matches the layout");
		return;
	}
	check_timestamp(line, m[1]);
	snprintf(got, sizeof(got), "%.*s", (int)(m[2].rm_eo - m[2].rm_so), line + m[2].rm_so);
	CHECK_STR(got, level);
	CHECK_STR(line + m[3].rm_so, text);
}

static void test_file_descriptor(const struct dli_module *m)
{
	check_module_header(m, "file", NULL);
	CHECK_INT(m->n_features, 0);
	CHECK_INT(m->n_loggers, 1);
	CHECK_INT(file_logger->size, sizeof(struct dli_logger_desc));
	CHECK_STR(file_logger->name, "file");
	CHECK(file_logger->doc && *file_logger->doc && !strchr(file_logger->doc, '\n'));
	/* overwrite and timestamp, both without a default: unset means "ask the environment". */
	CHECK_INT(file_logger->n_params, 2);
	if (file_logger->n_params == 2) {
		CHECK_STR(file_logger->params[0].key, "overwrite");
		CHECK_STR(file_logger->params[1].key, "timestamp");
		CHECK(file_logger->params[0].default_value == NULL &&
		      file_logger->params[1].default_value == NULL);
	}
	CHECK_INT(file_logger->ops->size, sizeof(struct dli_logger_ops));
	CHECK(file_logger->ops->create && file_logger->ops->destroy && file_logger->ops->log_scalar &&
	      file_logger->ops->log_text && file_logger->ops->flush);
}

static void test_file_layout(const char *tmp)
{
	const struct dli_logger_ops *ops = file_logger->ops;
	char dir[4096], *lines[16], *buf;
	size_t n;
	void *log;

	/* A log dir that does not exist yet, two levels deep: created on the first write. */
	snprintf(dir, sizeof(dir), "%s/layout/run", tmp);
	log = logger_create(dir);
	CHECK_INT(ops->flush(log), 0);
	CHECK(!exists(tmp, "layout"));

	CHECK_INT(ops->log_text(log, DLI_LOG_WARNING, "first message"), 0);
	/* Messages are written through at once, and only the message log exists. */
	CHECK(exists(dir, MESSAGES_FILE));
	CHECK(!exists(dir, "nvdlfw_inspect_statistics_logs"));

	CHECK_INT(ops->log_scalar(log, "model.1.fc1_activation_max", 20, 1.0 / 3.0), 0);
	CHECK_INT(ops->log_scalar(log, "tiny", 0, 1e-30), 0);
	CHECK_INT(ops->log_scalar(log, "not_a_number", 5, -NAN), 0);
	CHECK_INT(ops->log_scalar(log, "minus_inf", 999999, -INFINITY), 0);
	CHECK_INT(ops->log_scalar(log, "big_iteration", 1234567, 448.0), 0);
	CHECK_INT(ops->log_scalar(log, "float_third", 1, (double)(1.0f / 3.0f)), 0);
	CHECK_INT(ops->log_scalar(log, "denormal", 2, 1.4e-45), 0);
	CHECK_INT(ops->log_text(log, DLI_LOG_ERROR, "an error: 50% done"), 0);
	CHECK_INT(ops->log_text(log, DLI_LOG_INFO, "info"), 0);
	CHECK_INT(ops->log_text(log, DLI_LOG_DEBUG, "debug\twith tab"), 0);
	CHECK(ops->log_text(log, (enum dli_log_level)42, "bad level") < 0);
	CHECK_INT(ops->flush(log), 0);

	buf = read_lines(dir, STATS_FILE, lines, 16, &n);
	CHECK_INT(n, 7);
	if (n == 7) {
		check_scalar_line(lines[0], "model.1.fc1_activation_max", "000020", 1.0 / 3.0);
		check_scalar_line(lines[1], "tiny", "000000", 1e-30);
		check_scalar_line(lines[2], "not_a_number", "000005", NAN);
		check_scalar_line(lines[3], "minus_inf", "999999", -INFINITY);
		check_scalar_line(lines[4], "big_iteration", "1234567", 448.0);
		check_scalar_line(lines[5], "float_third", "000001", (double)(1.0f / 3.0f));
		check_scalar_line(lines[6], "denormal", "000002", 1.4e-45);
		/* The exact tail of a line, tabs and all, and %.9g rather than nvdlfw's 4 decimals. */
		CHECK_CONTAINS(lines[5], " - INFO - float_third \t\t\t\t iteration=000001 \t\t\t\t "
					 "value=0.333333343");
		CHECK_CONTAINS(lines[3], "value=-inf");
		/* Python's spelling: never "-nan", whatever the sign bit of the NaN. */
		CHECK(strstr(lines[2], "value=nan") && !strstr(lines[2], "-nan"));
		CHECK_CONTAINS(lines[4], "value=448");
	}
	free(buf);

	buf = read_lines(dir, MESSAGES_FILE, lines, 16, &n);
	CHECK_INT(n, 4);
	if (n == 4) {
		check_text_line(lines[0], "WARNING", "first message");
		check_text_line(lines[1], "ERROR", "an error: 50% done");
		check_text_line(lines[2], "INFO", "info");
		check_text_line(lines[3], "DEBUG", "debug\\twith tab"); /* escaped, as every control */
	}
	free(buf);
	file_logger->ops->destroy(log);

	/* With NVDLFW_INSPECT_ENABLE_LOG_OVERWRITE=0, a second run on the same log dir appends. */
	setenv("NVDLFW_INSPECT_ENABLE_LOG_OVERWRITE", "0", 1);
	log = logger_create(dir);
	unsetenv("NVDLFW_INSPECT_ENABLE_LOG_OVERWRITE");
	CHECK_INT(ops->log_scalar(log, "again", 21, 2.5), 0);
	file_logger->ops->destroy(log); /* destroy flushes too */
	buf = read_lines(dir, STATS_FILE, lines, 16, &n);
	CHECK_INT(n, 8);
	if (n == 8) {
		check_scalar_line(lines[0], "model.1.fc1_activation_max", "000020", 1.0 / 3.0);
		check_scalar_line(lines[7], "again", "000021", 2.5);
	}
	free(buf);
}

/* The logs an earlier run left: emptied at start by default (nvdlfw_inspect truncates at
 * initialize), kept with NVDLFW_INSPECT_ENABLE_LOG_OVERWRITE=0 or DLINSPECT_LOG_OVERWRITE=0 (which
 * wins); NVDLFW_INSPECT_ENABLE_LOG_TIMESTAMP=1 gives each run its own files. */
static void test_file_reuse(const char *tmp)
{
	const struct dli_logger_ops *ops = file_logger->ops;
	char dir[4096], *lines[16], *buf;
	size_t n;
	void *log;

	snprintf(dir, sizeof(dir), "%s/reuse", tmp);
	for (int run = 0; run < 2; run++) {
		log = logger_create(dir);
		CHECK_INT(ops->log_text(log, DLI_LOG_INFO, "run"), 0);
		CHECK_INT(ops->log_scalar(log, "x", 1, run), 0);
		ops->destroy(log);
	}
	buf = read_lines(dir, STATS_FILE, lines, 16, &n);
	CHECK_INT(n, 1);
	if (n == 1)
		check_scalar_line(lines[0], "x", "000001", 1.0);
	free(buf);
	buf = read_lines(dir, MESSAGES_FILE, lines, 16, &n);
	CHECK_INT(n, 1);
	free(buf);

	/* A run that logs nothing still empties what the last run left: stale lines would read as its. */
	log = logger_create(dir);
	ops->destroy(log);
	{
		struct stat st;
		char path[4200];
		snprintf(path, sizeof(path), "%s/%s", dir, STATS_FILE);
		CHECK(stat(path, &st) == 0 && st.st_size == 0);
	}

	/* DLINSPECT_LOG_OVERWRITE wins over nvdlfw_inspect's variable. */
	setenv("NVDLFW_INSPECT_ENABLE_LOG_OVERWRITE", "1", 1);
	setenv("DLINSPECT_LOG_OVERWRITE", "false", 1);
	for (int run = 0; run < 2; run++) {
		log = logger_create(dir);
		CHECK_INT(ops->log_scalar(log, "y", 2, run), 0);
		ops->destroy(log);
	}
	unsetenv("DLINSPECT_LOG_OVERWRITE");
	unsetenv("NVDLFW_INSPECT_ENABLE_LOG_OVERWRITE");
	buf = read_lines(dir, STATS_FILE, lines, 16, &n);
	CHECK_INT(n, 2);
	free(buf);

	/* A value that is no switch is an error that names the variable, as nvdlfw_inspect's int()
	 * would fail. */
	{
		struct dli_logger_create_args args = {
			.size = sizeof(args), .host = &test_host, .log_dir = dir, .rank = 3,
		};
		struct dli_error err = {0};
		void *instance = NULL;
		setenv("NVDLFW_INSPECT_ENABLE_LOG_OVERWRITE", "maybe", 1);
		CHECK_INT(ops->create(&args, &instance, &err), -EINVAL);
		CHECK_CONTAINS(err.message, "NVDLFW_INSPECT_ENABLE_LOG_OVERWRITE='maybe': expected 0 or 1");
		unsetenv("NVDLFW_INSPECT_ENABLE_LOG_OVERWRITE");
		setenv("NVDLFW_INSPECT_ENABLE_LOG_TIMESTAMP", "1", 1);
		setenv("NVDLFW_INSPECT_LOG_TIMESTAMP", "../up", 1);
		CHECK_INT(ops->create(&args, &instance, &err), -EINVAL);
		CHECK_CONTAINS(err.message, "NVDLFW_INSPECT_LOG_TIMESTAMP='../up'");
	}

	/* Timestamped names: nvdlfw_inspect_{stamp}_globalrank-{rank}.log, the stamp shared through
	 * NVDLFW_INSPECT_LOG_TIMESTAMP (set by the first logger when the host did not). */
	setenv("NVDLFW_INSPECT_LOG_TIMESTAMP", "20261123_101010", 1);
	log = logger_create(dir);
	CHECK_INT(ops->log_scalar(log, "z", 3, 1.0), 0);
	ops->destroy(log);
	CHECK(exists(dir, "nvdlfw_inspect_statistics_logs/"
			  "nvdlfw_inspect_20261123_101010_globalrank-3.log"));
	unsetenv("NVDLFW_INSPECT_LOG_TIMESTAMP");
	log = logger_create(dir);
	CHECK_INT(ops->log_text(log, DLI_LOG_INFO, "stamped"), 0);
	ops->destroy(log);
	{
		const char *stamp = getenv("NVDLFW_INSPECT_LOG_TIMESTAMP");
		char rel[256];
		CHECK(stamp && strlen(stamp) == 15 && stamp[8] == '_');
		snprintf(rel, sizeof(rel), "nvdlfw_inspect_logs/nvdlfw_inspect_%s_globalrank-3.log",
			 stamp ? stamp : "");
		CHECK(exists(dir, rel));
	}
	unsetenv("NVDLFW_INSPECT_LOG_TIMESTAMP");
	unsetenv("NVDLFW_INSPECT_ENABLE_LOG_TIMESTAMP");
	/* The untimestamped log of the earlier runs is untouched by a timestamped run. */
	buf = read_lines(dir, STATS_FILE, lines, 16, &n);
	CHECK_INT(n, 2);
	free(buf);
}

struct thread_arg {
	void *log;
	int id;
	int failures;
};

#define THREADS 4
#define PER_THREAD 500

static void *log_from_thread(void *p)
{
	struct thread_arg *a = p;
	char name[64];

	for (int i = 0; i < PER_THREAD; i++) {
		snprintf(name, sizeof(name), "thread%d_value", a->id);
		if (file_logger->ops->log_scalar(a->log, name, i, a->id + i * 0.5) != 0)
			a->failures++;
		if (i % 50 == 0 && file_logger->ops->log_text(a->log, DLI_LOG_INFO, name) != 0)
			a->failures++;
	}
	return NULL;
}

/* Lines from several threads never interleave: every line parses and none is lost. */
static void test_file_threads(const char *tmp)
{
	char dir[4096], **lines = calloc(THREADS * PER_THREAD, sizeof(char *)), *buf;
	pthread_t th[THREADS];
	struct thread_arg args[THREADS];
	int seen[THREADS] = {0};
	size_t n;
	void *log;

	snprintf(dir, sizeof(dir), "%s/threads", tmp);
	log = logger_create(dir);
	for (int t = 0; t < THREADS; t++) {
		args[t] = (struct thread_arg){.log = log, .id = t};
		pthread_create(&th[t], NULL, log_from_thread, &args[t]);
	}
	for (int t = 0; t < THREADS; t++) {
		pthread_join(th[t], NULL);
		CHECK_INT(args[t].failures, 0);
	}
	CHECK_INT(file_logger->ops->flush(log), 0);
	buf = read_lines(dir, STATS_FILE, lines, THREADS * PER_THREAD, &n);
	CHECK_INT(n, THREADS * PER_THREAD);
	for (size_t i = 0; i < n && i < THREADS * PER_THREAD; i++) {
		regmatch_t m[5];
		int t;
		if (regexec(&scalar_re, lines[i], 5, m, 0) != 0 ||
		    sscanf(lines[i] + m[2].rm_so, "thread%d_value", &t) != 1 || t < 0 || t >= THREADS) {
			CHECK(!"unparsable line from a thread");
			break;
		}
		/* Each thread's lines keep their order. */
		char want[16];
		snprintf(want, sizeof(want), "%06d", seen[t]++);
		if (strncmp(lines[i] + m[3].rm_so, want, strlen(want)) != 0) {
			CHECK(!"thread lines out of order");
			break;
		}
	}
	free(buf);
	buf = read_lines(dir, MESSAGES_FILE, lines, THREADS * PER_THREAD, &n);
	CHECK_INT(n, THREADS * (PER_THREAD / 50));
	free(buf);
	file_logger->ops->destroy(log);
	free(lines);
}

/* A line cut short by an earlier failure (or a killed run) is ended before the next one, so the
 * next line cannot be read as the end of the cut one. */
static void test_file_cut_line(const char *tmp)
{
	char dir[4096], path[4200], *lines[4], *buf;
	FILE *fp;
	size_t n;
	void *log;

	snprintf(dir, sizeof(dir), "%s/cut", tmp);
	log = logger_create(dir);
	CHECK_INT(file_logger->ops->log_scalar(log, "whole", 1, 1.0), 0);
	file_logger->ops->destroy(log);
	snprintf(path, sizeof(path), "%s/%s", dir, STATS_FILE);
	fp = fopen(path, "a");
	CHECK(fp != NULL);
	if (!fp)
		return;
	fputs("2026-11-22 05:11:01,420 - INFO - cut \t\t\t\t iteration=000002 \t\t\t\t value=1.2", fp);
	fclose(fp);

	setenv("DLINSPECT_LOG_OVERWRITE", "0", 1); /* appending, as a run with overwrite off does */
	log = logger_create(dir);
	unsetenv("DLINSPECT_LOG_OVERWRITE");
	CHECK_INT(file_logger->ops->log_scalar(log, "after_cut", 3, 0.5), 0);
	file_logger->ops->destroy(log);
	buf = read_lines(dir, STATS_FILE, lines, 4, &n);
	CHECK_INT(n, 3);
	if (n == 3) {
		check_scalar_line(lines[0], "whole", "000001", 1.0);
		CHECK(strstr(lines[1], "value=1.2") && strlen(strstr(lines[1], "value=1.2")) == 9);
		check_scalar_line(lines[2], "after_cut", "000003", 0.5);
	}
	free(buf);
}

/* The log dir removed while the run writes (by hand, by a cleanup job): the open files are gone
 * with it, and writing on into them would lose every later line without an error. The next flush
 * makes them again, with their directories, writes its lines there and says the loss once
 * (-ENOENT); later flushes succeed. Messages too. */
static void test_file_removed(const char *tmp)
{
	char dir[4096], path[4200], *lines[4], *buf;
	size_t n;
	void *log;

	snprintf(dir, sizeof(dir), "%s/removed", tmp);
	log = logger_create(dir);
	CHECK_INT(file_logger->ops->log_scalar(log, "before", 1, 1.0), 0);
	CHECK_INT(file_logger->ops->log_text(log, DLI_LOG_INFO, "before"), 0);
	CHECK_INT(file_logger->ops->flush(log), 0);
	const char *files[] = {STATS_FILE, MESSAGES_FILE};
	for (int i = 0; i < 2; i++) {
		snprintf(path, sizeof(path), "%s/%s", dir, files[i]);
		CHECK_INT(unlink(path), 0);
		*strrchr(path, '/') = '\0';
		CHECK_INT(rmdir(path), 0);
	}
	CHECK_INT(rmdir(dir), 0);

	CHECK_INT(file_logger->ops->log_scalar(log, "after", 2, 2.0), 0);
	CHECK_INT(file_logger->ops->flush(log), -ENOENT);
	CHECK_INT(file_logger->ops->log_text(log, DLI_LOG_ERROR, "after"), -ENOENT);
	CHECK_INT(file_logger->ops->log_scalar(log, "later", 3, 3.0), 0);
	CHECK_INT(file_logger->ops->flush(log), 0);
	file_logger->ops->destroy(log);
	buf = read_lines(dir, STATS_FILE, lines, 4, &n);
	CHECK_INT(n, 2);
	if (n == 2) {
		check_scalar_line(lines[0], "after", "000002", 2.0);
		check_scalar_line(lines[1], "later", "000003", 3.0);
	}
	free(buf);
	buf = read_lines(dir, MESSAGES_FILE, lines, 4, &n);
	CHECK_INT(n, 1);
	if (n == 1)
		CHECK(strstr(lines[0], " - ERROR - after") != NULL);
	free(buf);
}

/* A log dir under a regular file cannot be made. At create that is refused at once (the run would
 * log nothing); when the obstacle appears later, calls fail with an errno, keep failing, and the
 * instance stays usable. */
static void test_file_bad_dir(const char *tmp)
{
	char plain[4096], dir[4096];
	FILE *fp;
	void *log;
	int rc;

	snprintf(plain, sizeof(plain), "%s/plain", tmp);
	snprintf(dir, sizeof(dir), "%s/plain/sub", tmp);
	fp = fopen(plain, "w");
	CHECK(fp != NULL);
	if (fp)
		fclose(fp);
	{
		struct dli_logger_create_args args = {
			.size = sizeof(args), .host = &test_host, .where = "test.yaml:1:1",
			.log_dir = dir, .rank = 3, .world_size = 8,
		};
		struct dli_error err = {0};
		void *instance = NULL;
		char want[8300];
		CHECK_INT(file_logger->ops->create(&args, &instance, &err), -ENOTDIR);
		CHECK(instance == NULL);
		snprintf(want, sizeof(want), "log dir '%s': '%s' is not a directory", dir, plain);
		CHECK_STR(err.message, want);
	}
	CHECK_INT(unlink(plain), 0);

	log = logger_create(dir);
	fp = fopen(plain, "w"); /* the obstacle appears after create */
	CHECK(fp != NULL);
	if (fp)
		fclose(fp);
	rc = file_logger->ops->log_scalar(log, "x", 1, 1.0);
	CHECK_INT(rc, -ENOTDIR);
	CHECK_INT(file_logger->ops->log_scalar(log, "x", 2, 2.0), -ENOTDIR);
	CHECK_INT(file_logger->ops->log_text(log, DLI_LOG_ERROR, "lost"), -ENOTDIR);
	CHECK_INT(file_logger->ops->flush(log), 0); /* nothing open, nothing to flush */

	/* The obstacle goes away: the next call succeeds. */
	CHECK_INT(unlink(plain), 0);
	CHECK_INT(file_logger->ops->log_scalar(log, "x", 3, 3.0), 0);
	CHECK_INT(file_logger->ops->flush(log), 0);
	CHECK(exists(dir, STATS_FILE));
	file_logger->ops->destroy(log);
}

/* A full disk (a file size limit, with SIGXFSZ ignored so the write fails with EFBIG instead of
 * killing us) shows as -EFBIG from log_scalar or flush, and later calls keep reporting it. */
static void test_file_disk_full(const char *tmp)
{
	struct rlimit old, small;
	char dir[4096];
	void *log;
	int first = 0, later = 0;

	snprintf(dir, sizeof(dir), "%s/full", tmp);
	log = logger_create(dir);
	signal(SIGXFSZ, SIG_IGN);
	CHECK_INT(getrlimit(RLIMIT_FSIZE, &old), 0);
	small = old;
	small.rlim_cur = 300;
	CHECK_INT(setrlimit(RLIMIT_FSIZE, &small), 0);

	for (int i = 0; i < 100 && first == 0; i++) {
		first = file_logger->ops->log_scalar(log, "model.1.fc1_activation_max", i, i * 0.1);
		if (first == 0)
			first = file_logger->ops->flush(log);
	}
	CHECK_INT(first, -EFBIG);
	later = file_logger->ops->log_scalar(log, "after", 200, 1.0);
	if (later == 0)
		later = file_logger->ops->flush(log);
	CHECK_INT(later, -EFBIG);
	/* Messages are written through: the message log hits the limit within a few lines. */
	later = 0;
	for (int i = 0; i < 100 && later == 0; i++)
		later = file_logger->ops->log_text(log, DLI_LOG_ERROR, "the disk is full");
	CHECK_INT(later, -EFBIG);
	/* The cut line was taken back: the file is as before, and the same line fails the same way. */
	CHECK_INT(file_logger->ops->log_text(log, DLI_LOG_ERROR, "the disk is full"), -EFBIG);

	CHECK_INT(setrlimit(RLIMIT_FSIZE, &old), 0);
	file_logger->ops->destroy(log);
	signal(SIGXFSZ, SIG_DFL);

	/* Whole lines or nothing: both files end on a newline and hold only whole records. */
	char *lines[64], *buf;
	size_t n;
	buf = read_lines(dir, STATS_FILE, lines, 64, &n);
	CHECK(n > 0 && n <= 64);
	for (size_t i = 0; buf && i < n && i < 64; i++) {
		regmatch_t m[5];
		CHECK_INT(regexec(&scalar_re, lines[i], 5, m, 0), 0);
	}
	free(buf);
	buf = read_lines(dir, MESSAGES_FILE, lines, 64, &n);
	CHECK(n > 0 && n <= 64);
	for (size_t i = 0; buf && i < n && i < 64; i++)
		CHECK(strstr(lines[i], " - ERROR - the disk is full") &&
		      !strcmp(strstr(lines[i], " - ERROR - "), " - ERROR - the disk is full"));
	free(buf);
}

/* A symbolic link planted at a log file's path is refused, naming the path, and what it points to
 * is neither emptied (overwrite) nor appended to; one planted after create fails the write. */
static void test_file_symlink(const char *tmp)
{
	char dir[4096], sub[4200], victim[4200], link[4300], want[4600], content[64] = {0};
	struct dli_logger_create_args args = {
		.size = sizeof(args), .host = &test_host, .log_dir = dir, .rank = 3, .world_size = 8,
	};
	struct dli_error err = {0};
	void *log = NULL;
	FILE *fp;

	snprintf(dir, sizeof(dir), "%s/symlink", tmp);
	snprintf(sub, sizeof(sub), "%s/nvdlfw_inspect_statistics_logs", dir);
	snprintf(victim, sizeof(victim), "%s/victim", tmp);
	snprintf(link, sizeof(link), "%s/%s", dir, STATS_FILE);
	CHECK_INT(dli_make_dirs(sub), 0);
	fp = fopen(victim, "w");
	CHECK(fp != NULL);
	if (!fp)
		return;
	fputs("precious\n", fp);
	fclose(fp);
	CHECK_INT(symlink(victim, link), 0);

	CHECK_INT(file_logger->ops->create(&args, &log, &err), -ELOOP);
	CHECK(log == NULL);
	snprintf(want, sizeof(want),
		 "log file '%s' is a symbolic link: dlinspect does not follow links to its log files",
		 link);
	CHECK_CONTAINS(err.message, want);

	/* Planted between create and the first write. */
	CHECK_INT(unlink(link), 0);
	log = logger_create(dir);
	CHECK_INT(symlink(victim, link), 0);
	int rc = file_logger->ops->log_scalar(log, "x", 1, 1.0);
	if (rc == 0)
		rc = file_logger->ops->flush(log);
	CHECK_INT(rc, -ELOOP);
	file_logger->ops->destroy(log);

	fp = fopen(victim, "r");
	CHECK(fp && fread(content, 1, sizeof(content) - 1, fp) == 9);
	if (fp)
		fclose(fp);
	CHECK_STR(content, "precious\n");
	/* A FIFO would block the first write: refused at create, and at open if it comes later. */
	CHECK_INT(unlink(link), 0);
	CHECK_INT(mkfifo(link, 0600), 0);
	CHECK_INT(file_logger->ops->create(&args, &log, &err), -EINVAL);
	snprintf(want, sizeof(want), "log file '%s' exists and is not a regular file", link);
	CHECK_CONTAINS(err.message, want);
	CHECK_INT(unlink(link), 0);
	log = logger_create(dir);
	CHECK_INT(mkfifo(link, 0600), 0);
	CHECK_INT(file_logger->ops->log_scalar(log, "x", 1, 1.0), -EINVAL);
	file_logger->ops->destroy(log);
	CHECK_INT(unlink(link), 0);
}

/* A name or message holding newlines and tabs stays on one line, escaped (\n, \t, \xNN, \\). */
static void test_file_escapes(const char *tmp)
{
	char dir[4096], *lines[4], *buf;
	size_t n;
	void *log;

	snprintf(dir, sizeof(dir), "%s/escape", tmp);
	log = logger_create(dir);
	CHECK_INT(file_logger->ops->log_scalar(
			  log, "a\nb \t\t\t\t iteration=000001 \t\t\t\t value=1\\\x7f", 5, 2.0),
		  0);
	CHECK_INT(file_logger->ops->log_text(log, DLI_LOG_WARNING, "one\ntwo\r\x01"), 0);
	file_logger->ops->destroy(log);
	buf = read_lines(dir, STATS_FILE, lines, 4, &n);
	CHECK_INT(n, 1);
	if (n == 1)
		check_scalar_line(lines[0],
				  "a\\nb \\t\\t\\t\\t iteration=000001 \\t\\t\\t\\t value=1"
				  "\\\\\\x7f",
				  "000005", 2.0);
	free(buf);
	buf = read_lines(dir, MESSAGES_FILE, lines, 4, &n);
	CHECK_INT(n, 1);
	if (n == 1)
		check_text_line(lines[0], "WARNING", "one\\ntwo\\r\\x01");
	free(buf);
}

static void test_file_logger(void)
{
	void *handle;
	const struct dli_module *m = load_module(FILE_LOGGER_PATH, &handle);
	char tmp[] = "/tmp/dli-test-modules-XXXXXX";
	char cmd[256];

	CHECK(m != NULL);
	if (!m || m->n_loggers != 1)
		return;
	file_logger = m->loggers[0];
	test_file_descriptor(m);
	CHECK(mkdtemp(tmp) != NULL);
	CHECK_INT(regcomp(&scalar_re,
			  TIMESTAMP_RE "INFO - ([^\t]+) \t\t\t\t iteration=(-?[0-9]{6,}) \t\t\t\t "
				       "value=(-?[0-9][0-9.e+-]*|-?inf|-?nan)$",
			  REG_EXTENDED),
		  0);
	CHECK_INT(regcomp(&text_re, TIMESTAMP_RE "(ERROR|WARNING|INFO|DEBUG) - (.*)$", REG_EXTENDED),
		  0);

	test_file_layout(tmp);
	test_file_threads(tmp);
	test_file_cut_line(tmp);
	test_file_reuse(tmp);
	test_file_bad_dir(tmp);
	test_file_removed(tmp);
	test_file_disk_full(tmp);
	test_file_symlink(tmp);
	test_file_escapes(tmp);

	regfree(&scalar_re);
	regfree(&text_re);
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", tmp);
	if (check_failures == 0 && system(cmd) != 0)
		fprintf(stderr, "could not remove %s\n", tmp);
	dlclose(handle);
}

int main(void)
{
	test_disable_fp8_gemm();
	test_disable_fp8_layer();
	test_file_logger();
	return check_exit();
}
