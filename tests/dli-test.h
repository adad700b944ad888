/* What the tests that run configs through the real core share: a context from YAML text that logs
 * into a fresh temporary dir, layers by name, 1-D tensors, and the log files read back. */
#ifndef DLI_TEST_H
#define DLI_TEST_H

#include <ftw.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <dlinspect/dlinspect.h>

/* The file logger's files under the log dir (docs/logging.md). */
#define STATS_LOG "nvdlfw_inspect_statistics_logs/nvdlfw_inspect_globalrank-0.log"
#define MESSAGE_LOG "nvdlfw_inspect_logs/nvdlfw_inspect_globalrank-0.log"

/* The last open_yaml's log dir; empty before it and after remove_log_dir. */
static char log_dir[256];

/* Extra plugin dirs for the next open_yaml (e.g. the fake CUDA backend's). */
static const char *extra_dirs[1];
static size_t n_extra_dirs;

/* Puts the stand-in CUDA backend ($FAKE_CUDA_DIR, set by the meson test) on the plugin path of
 * the next open_yaml; false (and a failed check in the caller) when it is not set. */
static inline bool use_fake_cuda(void)
{
	const char *dir = getenv("FAKE_CUDA_DIR");
	if (!dir)
		return false;
	extra_dirs[0] = dir;
	n_extra_dirs = 1;
	return true;
}

static inline int dli_test_rm_entry(const char *path, const struct stat *st, int flag,
				    struct FTW *ftw)
{
	return remove(path);
}

static inline void remove_log_dir(void)
{
	if (log_dir[0])
		nftw(log_dir, dli_test_rm_entry, 8, FTW_DEPTH | FTW_PHYS);
	log_dir[0] = 0;
}

/* A context for `yaml` logging into a fresh temporary dir (the previous one is removed); NULL on
 * failure, with *err filled, or the message printed when err is NULL. */
static inline struct dli_context *open_yaml(const char *yaml, struct dli_error *err)
{
	const char *tmp = getenv("TMPDIR");
	remove_log_dir();
	snprintf(log_dir, sizeof log_dir, "%s/dli-test-XXXXXX", tmp && *tmp ? tmp : "/tmp");
	if (!mkdtemp(log_dir)) {
		perror("mkdtemp");
		log_dir[0] = 0;
		return NULL;
	}
	struct dli_options o;
	dli_options_init(&o);
	o.config_yaml = yaml;
	o.log_dir = log_dir;
	o.plugin_dirs = extra_dirs;
	o.n_plugin_dirs = n_extra_dirs;
	struct dli_context *ctx = NULL;
	struct dli_error local;
	if (dli_init(&o, &ctx, err ? err : &local) && !err)
		fprintf(stderr, "dli_init: %s\n", local.message);
	return ctx;
}

/* The layer handle, or NULL with the reason printed. */
static inline struct dli_layer *layer(struct dli_context *ctx, const char *name)
{
	struct dli_layer *l = NULL;
	struct dli_error err;
	if (dli_layer_get(ctx, name, &l, &err))
		fprintf(stderr, "dli_layer_get(%s): %s\n", name, err.message);
	return l;
}

/* A contiguous host tensor of n elements at `data` (borrowed). */
static inline struct dli_tensor tensor(void *data, enum dli_dtype dtype, int64_t n)
{
	return (struct dli_tensor){.data = data, .dtype = dtype, .ndim = 1, .shape = {n},
				   .contiguous = true};
}

/* `file` (relative to the log dir, e.g. STATS_LOG) opened for reading; NULL when absent. */
static inline FILE *open_log(const char *file)
{
	char path[512];
	snprintf(path, sizeof path, "%s/%s", log_dir, file);
	return fopen(path, "r");
}

/* Lines of `file` (relative to the log dir) containing `text`; 0 when there is no such file. */
static inline int count_lines(const char *file, const char *text)
{
	char buf[4096];
	FILE *f = open_log(file);
	int n = 0;
	while (f && fgets(buf, sizeof buf, f))
		n += strstr(buf, text) != NULL;
	if (f)
		fclose(f);
	return n;
}

/* stderr into `name` under the log dir until stderr_capture_end, so a test can read what the
 * library said on the terminal; false when it could not redirect (stderr is left as it was). */
struct dli_test_capture {
	int saved;
	FILE *file;
};

static inline struct dli_test_capture *dli_test_capture(void)
{
	static struct dli_test_capture c = {-1, NULL};
	return &c;
}

static inline bool stderr_capture_begin(const char *name)
{
	struct dli_test_capture *c = dli_test_capture();
	char path[512];
	snprintf(path, sizeof path, "%s/%s", log_dir, name);
	fflush(stderr);
	c->saved = dup(2);
	c->file = fopen(path, "w");
	if (c->saved < 0 || !c->file)
		return false;
	dup2(fileno(c->file), 2);
	return true;
}

static inline void stderr_capture_end(void)
{
	struct dli_test_capture *c = dli_test_capture();
	fflush(stderr);
	if (c->saved >= 0) {
		dup2(c->saved, 2);
		close(c->saved);
	}
	if (c->file)
		fclose(c->file);
	c->saved = -1;
	c->file = NULL;
}

#endif
