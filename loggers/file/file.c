/* The file logger (the default): statistics and messages as text files in nvdlfw_inspect's layout,
 * so the log parsers written for nvdlfw_inspect read dlinspect's logs unchanged. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <dlinspect/plugin.h>

#include "../log-env.h"

enum { DLI_FILE_OVERWRITE, DLI_FILE_TIMESTAMP, DLI_FILE_N_PARAMS };

static const struct dli_param_desc dli_file_params[DLI_FILE_N_PARAMS] = {
	[DLI_FILE_OVERWRITE] = {"overwrite", NULL, DLI_PARAM_BOOL, NULL, DLI_LOG_ENV_OVERWRITE_DOC,
				NULL, false},
	[DLI_FILE_TIMESTAMP] = {"timestamp", NULL, DLI_PARAM_BOOL, NULL, DLI_LOG_ENV_TIMESTAMP_DOC,
				NULL, false},
};

/* One output file. It is opened on the first line written to it, so a run that logs nothing leaves
 * nothing behind; after a write error it is closed and reopened by the next call, so a log dir
 * that comes back (space freed, directory recreated) is used again. */
struct dli_file_log {
	const struct dli_host *host; /* make_dirs */
	char *dir;
	char *path;
	FILE *fp;
};

struct dli_file_logger {
	pthread_mutex_t lock; /* log_scalar and log_text may come from several threads */
	struct dli_file_log stats, messages;
};

static const char *const dli_file_levels[] = {"ERROR", "WARNING", "INFO", "DEBUG"};

/* A failed stdio call need not set errno; never turn a failure into 0. */
static int dli_file_errno(void)
{
	return errno ? -errno : -EIO;
}

/* nvdlfw_inspect's names: nvdlfw_inspect[_{timestamp}]_globalrank-{rank}.log. With `overwrite`, what
 * an earlier run left there is emptied now, as nvdlfw_inspect does at initialize: a re-run must not
 * show each statistic twice. A file that is not there stays absent until the first write; one that
 * cannot be emptied cannot be written either, and the first write reports it. */
static int dli_file_log_init(struct dli_file_log *log, const struct dli_host *host,
			     const char *log_dir, const char *subdir, int rank,
			     const struct dli_log_env *env)
{
	log->host = host;
	if (asprintf(&log->dir, "%s/%s", log_dir, subdir) < 0) {
		log->dir = NULL;
		return -ENOMEM;
	}
	if (asprintf(&log->path, "%s/nvdlfw_inspect%s%s_globalrank-%d.log", log->dir,
		     env->stamp[0] ? "_" : "", env->stamp, rank) < 0) {
		log->path = NULL;
		return -ENOMEM;
	}
	if (env->overwrite) {
		int fd = open(log->path, O_WRONLY | O_TRUNC | O_CLOEXEC);
		if (fd >= 0)
			close(fd);
	}
	return 0;
}

/* After a failure the stream is dropped: its error flag would otherwise fail every later write. */
static int dli_file_log_fail(struct dli_file_log *log)
{
	int rc = dli_file_errno();

	fclose(log->fp);
	log->fp = NULL;
	return rc;
}

/* Opens for appending. A line cut short by an earlier failure is ended first: glued to the next
 * line's timestamp, "value=1.2" would read back as a wrong number. */
static int dli_file_log_open(struct dli_file_log *log)
{
	int rc = log->host->make_dirs(log->dir);

	if (rc < 0)
		return rc;
	/* "e": the descriptor must not leak into programs the trainer spawns. */
	log->fp = fopen(log->path, "a+e");
	if (!log->fp)
		return dli_file_errno();
	errno = 0;
	if (fseek(log->fp, -1, SEEK_END) == 0) {
		bool cut = fgetc(log->fp) != '\n';
		/* An update stream needs a positioning call between reading and writing. */
		if (fseek(log->fp, 0, SEEK_END) != 0 ||
		    (cut && (fputc('\n', log->fp) == EOF || fflush(log->fp) != 0)))
			return dli_file_log_fail(log);
	}
	return 0;
}

/* Writes "{timestamp} - {level} - " and the formatted rest, timestamped like Python logging's
 * asctime (local time, milliseconds after a comma). Called with the lock held. */
#if defined(__GNUC__)
__attribute__((format(printf, 4, 5)))
#endif
static int dli_file_log_write(struct dli_file_log *log, const char *level, bool flush,
			      const char *fmt, ...)
{
	struct timespec now;
	struct tm tm;
	char stamp[32];
	va_list ap;
	int rc;

	if (!log->fp) {
		rc = dli_file_log_open(log);
		if (rc < 0)
			return rc;
	}
	clock_gettime(CLOCK_REALTIME, &now);
	localtime_r(&now.tv_sec, &tm);
	strftime(stamp, sizeof(stamp), "%Y-%m-%d %H:%M:%S", &tm);

	errno = 0;
	if (fprintf(log->fp, "%s,%03ld - %s - ", stamp, now.tv_nsec / 1000000, level) < 0)
		return dli_file_log_fail(log);
	va_start(ap, fmt);
	rc = vfprintf(log->fp, fmt, ap);
	va_end(ap);
	if (rc < 0 || fputc('\n', log->fp) == EOF || (flush && fflush(log->fp) != 0))
		return dli_file_log_fail(log);
	return 0;
}

static int dli_file_log_flush(struct dli_file_log *log)
{
	errno = 0;
	if (log->fp && fflush(log->fp) != 0)
		return dli_file_log_fail(log);
	return 0;
}

static void dli_file_log_finish(struct dli_file_log *log)
{
	if (log->fp)
		fclose(log->fp);
	free(log->path);
	free(log->dir);
}

static void dli_file_destroy(void *instance)
{
	struct dli_file_logger *self = instance;

	if (!self)
		return;
	dli_file_log_finish(&self->stats);
	dli_file_log_finish(&self->messages);
	pthread_mutex_destroy(&self->lock);
	free(self);
}

static int dli_file_create(const struct dli_logger_create_args *args, void **instance,
			   struct dli_error *err)
{
	const char *log_dir = args->log_dir && *args->log_dir ? args->log_dir : ".";
	/* A core that passes no params (older, or a test's host) leaves both unset. */
	const struct dli_value *p = args->params && args->n_params >= DLI_FILE_N_PARAMS ? args->params
											 : NULL;
	struct dli_file_logger *self;
	struct dli_log_env env;
	int rc;

	/* A host table describing modules only (`dlinspect plugins`), or an older core. */
	if (!DLI_HAS_MEMBER(args->host, struct dli_host, make_dirs) || !args->host->make_dirs) {
		snprintf(err->message, sizeof(err->message), "the host has no make_dirs call");
		return -ENOTSUP;
	}
	rc = dli_log_env_get(p ? &p[DLI_FILE_OVERWRITE] : NULL, p ? &p[DLI_FILE_TIMESTAMP] : NULL,
			     &env, err);
	if (rc < 0)
		return rc;
	if (!(self = calloc(1, sizeof(*self))))
		return -ENOMEM;
	rc = -pthread_mutex_init(&self->lock, NULL);
	if (rc < 0) {
		free(self);
		return rc;
	}
	rc = dli_file_log_init(&self->stats, args->host, log_dir, "nvdlfw_inspect_statistics_logs",
			       args->rank, &env);
	if (rc == 0)
		rc = dli_file_log_init(&self->messages, args->host, log_dir, "nvdlfw_inspect_logs",
				       args->rank, &env);
	if (rc < 0) {
		dli_file_destroy(self);
		return rc;
	}
	*instance = self;
	return 0;
}

/* Statistics stay in the stdio buffer until flush() at step end: a step may log thousands. Values
 * are %.9g (a float reads back exactly); non-finite ones are spelled as Python prints them (`nan`,
 * never `-nan`; `inf`, `-inf`), which is what nvdlfw_inspect's log parsers expect. */
static int dli_file_log_scalar(void *instance, const char *name, int64_t iteration, double value)
{
	struct dli_file_logger *self = instance;
	char text[32];
	int rc;

	if (isnan(value))
		strcpy(text, "nan");
	else if (isinf(value))
		strcpy(text, value < 0 ? "-inf" : "inf");
	else
		snprintf(text, sizeof(text), "%.9g", value);
	pthread_mutex_lock(&self->lock);
	rc = dli_file_log_write(&self->stats, "INFO", false,
				"%s \t\t\t\t iteration=%06" PRId64 " \t\t\t\t value=%s", name,
				iteration, text);
	pthread_mutex_unlock(&self->lock);
	return rc;
}

/* Messages are flushed at once: an error message must be on disk if the trainer dies next. */
static int dli_file_log_text(void *instance, enum dli_log_level level, const char *text)
{
	struct dli_file_logger *self = instance;
	int rc;

	if ((unsigned)level >= sizeof(dli_file_levels) / sizeof(dli_file_levels[0]))
		return -EINVAL;
	pthread_mutex_lock(&self->lock);
	rc = dli_file_log_write(&self->messages, dli_file_levels[level], true, "%s", text);
	pthread_mutex_unlock(&self->lock);
	return rc;
}

static int dli_file_flush(void *instance)
{
	struct dli_file_logger *self = instance;
	int rc, rc2;

	pthread_mutex_lock(&self->lock);
	rc = dli_file_log_flush(&self->stats);
	rc2 = dli_file_log_flush(&self->messages);
	pthread_mutex_unlock(&self->lock);
	return rc < 0 ? rc : rc2;
}

static const struct dli_logger_ops dli_file_ops = {
	.size = sizeof(struct dli_logger_ops),
	.create = dli_file_create,
	.destroy = dli_file_destroy,
	.log_scalar = dli_file_log_scalar,
	.log_text = dli_file_log_text,
	.flush = dli_file_flush,
};

static const struct dli_logger_desc dli_file_logger = {
	.size = sizeof(struct dli_logger_desc),
	.name = "file",
	.doc = "Text logs in nvdlfw_inspect's layout under the log dir, one file per rank.",
	.params = dli_file_params,
	.n_params = DLI_FILE_N_PARAMS,
	.ops = &dli_file_ops,
};
static const struct dli_logger_desc *const dli_file_loggers_list[] = {&dli_file_logger};

static const struct dli_module dli_file_module = {
	.size = sizeof(struct dli_module),
	.abi_major = DLI_ABI_MAJOR,
	.abi_minor = DLI_ABI_MINOR,
	.name = "file",
	.doc = "The default logger: statistics and messages as nvdlfw_inspect-style text files.",
	.loggers = dli_file_loggers_list,
	.n_loggers = 1,
};

DLI_EXPORT const struct dli_module *DLI_MODULE_ENTRY(const struct dli_host *host)
{
	if (!host || host->abi_major != DLI_ABI_MAJOR)
		return NULL;
	return &dli_file_module;
}
