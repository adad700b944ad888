/* The file logger (the default): statistics and messages as text files in nvdlfw_inspect's layout,
 * so the log parsers written for nvdlfw_inspect read dlinspect's logs unchanged. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <dlinspect/plugin.h>

#include "../../core/escape-private.h"
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
 * that comes back (space freed, directory recreated) is used again. Lines wait in `buf`, whole, until
 * a flush: the file only ever receives whole lines (dli_file_log_drain). */
struct dli_file_log {
	const struct dli_host *host; /* make_dirs */
	char *dir;
	char *path;
	int fd; /* -1 when not open */
	char *buf;
	size_t len, cap;
};

struct dli_file_logger {
	pthread_mutex_t lock; /* log_scalar and log_text may come from several threads */
	struct dli_file_log stats, messages;
};

static const char *const dli_file_levels[] = {"ERROR", "WARNING", "INFO", "DEBUG"};

/* Lines buffered before they are written even without a flush: a step may log thousands. */
enum { DLI_FILE_BUF_HIGH = 64 * 1024 };

/* A log file is never reached through a symbolic link: one planted at its path in a shared log
 * dir would make the trainer append to, or (overwrite) empty, whatever file it points to. Nor is it
 * anything but a regular file: a FIFO there would block the trainer at its first line. */
static int dli_file_refuse_path(const char *path, struct dli_error *err)
{
	struct stat st;

	if (lstat(path, &st) != 0 || S_ISREG(st.st_mode))
		return 0;
	if (S_ISLNK(st.st_mode)) {
		snprintf(err->message, sizeof(err->message),
			 "log file '%s' is a symbolic link: dlinspect does not follow links to its log "
			 "files (docs/security.md); remove it or choose another log dir",
			 path);
		return -ELOOP;
	}
	snprintf(err->message, sizeof(err->message),
		 "log file '%s' exists and is not a regular file; remove it or choose another log dir",
		 path);
	return -EINVAL;
}

/* nvdlfw_inspect's names: nvdlfw_inspect[_{timestamp}]_globalrank-{rank}.log. With `overwrite`, what
 * an earlier run left there is emptied now, as nvdlfw_inspect does at initialize: a re-run must not
 * show each statistic twice. A file that is not there stays absent until the first write; one that
 * cannot be emptied cannot be written either, and the first write reports it. */
static int dli_file_log_init(struct dli_file_log *log, const struct dli_host *host,
			     const char *log_dir, const char *subdir, int rank,
			     const struct dli_log_env *env, struct dli_error *err)
{
	int rc;

	log->host = host;
	log->fd = -1;
	if (asprintf(&log->dir, "%s/%s", log_dir, subdir) < 0) {
		log->dir = NULL;
		return -ENOMEM;
	}
	if (asprintf(&log->path, "%s/nvdlfw_inspect%s%s_globalrank-%d.log", log->dir,
		     env->stamp[0] ? "_" : "", env->stamp, rank) < 0) {
		log->path = NULL;
		return -ENOMEM;
	}
	rc = dli_file_refuse_path(log->path, err);
	if (rc < 0)
		return rc;
	if (env->overwrite) {
		int fd = open(log->path, O_WRONLY | O_TRUNC | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
		if (fd >= 0)
			close(fd);
	}
	return 0;
}

/* After a failure the file is closed (the next call reopens it) and the lines not written are
 * dropped: the caller reports the error, and keeping them would grow the buffer while the disk
 * stays full. */
static int dli_file_log_fail(struct dli_file_log *log, int rc)
{
	if (log->fd >= 0)
		close(log->fd);
	log->fd = -1;
	log->len = 0;
	return rc;
}

/* Opens for appending (read too, for the last byte), without following a link at the file's own
 * path (one planted after create: -ELOOP), without blocking on a FIFO planted there (refused:
 * -EINVAL) and without leaking the descriptor into programs the trainer spawns. A line cut short by
 * a killed run is ended first: glued to the next line's timestamp, "value=1.2" would read back as a
 * wrong number. */
static int dli_file_log_open(struct dli_file_log *log)
{
	int rc = log->host->make_dirs(log->dir);
	struct stat st;
	char last;

	if (rc < 0)
		return rc;
	log->fd = open(log->path, O_RDWR | O_APPEND | O_CREAT | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC,
		       0666);
	if (log->fd < 0)
		return -errno;
	if (fstat(log->fd, &st) != 0)
		return dli_file_log_fail(log, -errno);
	if (!S_ISREG(st.st_mode))
		return dli_file_log_fail(log, -EINVAL);
	errno = 0;
	if (st.st_size > 0 && pread(log->fd, &last, 1, st.st_size - 1) == 1 && last != '\n' &&
	    write(log->fd, "\n", 1) != 1)
		return dli_file_log_fail(log, errno ? -errno : -EIO);
	return 0;
}

/* Writes the buffered lines. A write that stops part way (disk full, file size limit) is cut back to
 * the last whole line it wrote, so the file never ends in half a line, as the TensorBoard logger
 * never ends in half a record. A file removed underneath (the log dir deleted by hand or a cleanup
 * job) would take every later line with it without an error: it is made again, with its
 * directories, and -ENOENT is returned once the lines are in, so the loss is said, as the
 * TensorBoard logger says it. */
static int dli_file_log_drain(struct dli_file_log *log)
{
	size_t done = 0;
	struct stat now;
	int removed = 0;

	if (log->fd >= 0 && fstat(log->fd, &now) == 0 && now.st_nlink == 0) {
		close(log->fd);
		log->fd = -1;
		removed = -ENOENT;
	}
	if (log->fd < 0) {
		int rc = dli_file_log_open(log);
		if (rc < 0)
			return dli_file_log_fail(log, rc);
	}

	while (done < log->len) {
		ssize_t w = write(log->fd, log->buf + done, log->len - done);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0) {
			int rc = w < 0 ? -errno : -EIO;
			size_t whole = done;
			struct stat st;
			while (whole > 0 && log->buf[whole - 1] != '\n')
				whole--;
			if (whole < done && fstat(log->fd, &st) == 0 &&
			    st.st_size >= (off_t)(done - whole))
				(void)!ftruncate(log->fd, st.st_size - (off_t)(done - whole));
			return dli_file_log_fail(log, rc);
		}
		done += (size_t)w;
	}
	log->len = 0;
	return removed;
}

/* Adds "{timestamp} - {level} - {text escaped}{suffix}\n" to the buffer, timestamped like Python
 * logging's asctime (local time, milliseconds after a comma); `text` is the host's (a layer name, a
 * message) and escaped (core/escape-private.h), `suffix` is the logger's own. Writes the buffer out
 * when `flush` or when it is large. Called with the lock held. */
static int dli_file_log_write(struct dli_file_log *log, const char *level, bool flush,
			      const char *text, const char *suffix)
{
	struct timespec now;
	struct tm tm;
	char stamp[32], head[64];
	size_t n_head, n_text, n_suffix = strlen(suffix), need;

	if (log->fd < 0) {
		int rc = dli_file_log_open(log);
		if (rc < 0)
			return rc;
	}
	clock_gettime(CLOCK_REALTIME, &now);
	localtime_r(&now.tv_sec, &tm);
	strftime(stamp, sizeof(stamp), "%Y-%m-%d %H:%M:%S", &tm);
	n_head = (size_t)snprintf(head, sizeof(head), "%s,%03ld - %s - ", stamp,
				  now.tv_nsec / 1000000, level);
	n_text = dli_escape(NULL, 0, text);
	need = log->len + n_head + n_text + n_suffix + 2;
	if (need > log->cap) {
		size_t cap = log->cap ? log->cap : 4096;
		while (cap < need)
			cap *= 2;
		char *buf = realloc(log->buf, cap);
		if (!buf)
			return -ENOMEM;
		log->buf = buf;
		log->cap = cap;
	}
	memcpy(log->buf + log->len, head, n_head);
	log->len += n_head;
	dli_escape(log->buf + log->len, n_text + 1, text);
	log->len += n_text;
	memcpy(log->buf + log->len, suffix, n_suffix);
	log->len += n_suffix;
	log->buf[log->len++] = '\n';
	return flush || log->len >= DLI_FILE_BUF_HIGH ? dli_file_log_drain(log) : 0;
}

static int dli_file_log_flush(struct dli_file_log *log)
{
	return log->fd >= 0 && log->len ? dli_file_log_drain(log) : 0;
}

/* What fclose did for the stdio stream before: lines not flushed yet are written (a failure cannot be
 * reported any more; the core flushes before destroy and reports it there). */
static void dli_file_log_finish(struct dli_file_log *log)
{
	dli_file_log_flush(log);
	if (log->fd >= 0)
		close(log->fd);
	free(log->buf);
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
	self->stats.fd = self->messages.fd = -1;
	rc = dli_log_check_dir("log dir", log_dir, err);
	if (rc == 0)
		rc = dli_file_log_init(&self->stats, args->host, log_dir, "nvdlfw_inspect_statistics_logs",
			       args->rank, &env, err);
	if (rc == 0)
		rc = dli_file_log_init(&self->messages, args->host, log_dir, "nvdlfw_inspect_logs",
				       args->rank, &env, err);
	if (rc < 0) {
		dli_file_destroy(self);
		return rc;
	}
	*instance = self;
	return 0;
}

/* Statistics stay in the buffer until flush() at step end: a step may log thousands. Values
 * are %.9g (a float reads back exactly); non-finite ones are spelled as Python prints them (`nan`,
 * never `-nan`; `inf`, `-inf`), which is what nvdlfw_inspect's log parsers expect. */
static int dli_file_log_scalar(void *instance, const char *name, int64_t iteration, double value)
{
	struct dli_file_logger *self = instance;
	char text[32], suffix[96];
	int rc;

	if (isnan(value))
		strcpy(text, "nan");
	else if (isinf(value))
		strcpy(text, value < 0 ? "-inf" : "inf");
	else
		snprintf(text, sizeof(text), "%.9g", value);
	snprintf(suffix, sizeof(suffix), " \t\t\t\t iteration=%06" PRId64 " \t\t\t\t value=%s",
		 iteration, text);
	pthread_mutex_lock(&self->lock);
	rc = dli_file_log_write(&self->stats, "INFO", false, name, suffix);
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
	rc = dli_file_log_write(&self->messages, dli_file_levels[level], true, text, "");
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
