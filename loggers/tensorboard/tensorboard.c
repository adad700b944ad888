/* The TensorBoard logger: statistics and histograms as TensorFlow event files
 * (docs/tensorboard.md), so `tensorboard --logdir {log_dir}/tensorboard` shows a run; no Python in
 * the trainer. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <dlinspect/plugin.h>

#include "../../core/escape-private.h"

#include "../log-env.h"
#include "crc32c.h"
#include "event.pb-c.h"

/* Records wait in memory until a step ends, unless this many bytes pile up first. */
#define DLI_TB_BUFFER_LIMIT (1u << 20)

enum {
	DLI_TB_DIR,
	DLI_TB_FLUSH_SECS,
	DLI_TB_RANKS,
	DLI_TB_HISTOGRAMS,
	DLI_TB_OVERWRITE,
	DLI_TB_TIMESTAMP,
	DLI_TB_N_PARAMS
};

static const struct dli_param_desc dli_tb_params[DLI_TB_N_PARAMS] = {
	[DLI_TB_DIR] = {"dir", NULL, DLI_PARAM_STRING, "'{log_dir}/tensorboard'",
			"directory of the event files ({log_dir} at its start: the log dir); with "
			"several ranks, one subdirectory per rank",
			NULL, false},
	[DLI_TB_FLUSH_SECS] = {"flush_secs", NULL, DLI_PARAM_FLOAT, "0",
			       "write buffered records at step end only when this many seconds have "
			       "passed since the last write (0: at every step end)",
			       NULL, false, true, 0, INFINITY},
	[DLI_TB_RANKS] = {"ranks", NULL, DLI_PARAM_STRING_LIST, "all",
			  "ranks that write event files: a list of numbers, or all", NULL, false},
	[DLI_TB_HISTOGRAMS] = {"histograms", NULL, DLI_PARAM_BOOL, "true",
			       "write the histograms features send (false: scalars only)", NULL, false},
	[DLI_TB_OVERWRITE] = {"overwrite", NULL, DLI_PARAM_BOOL, NULL, DLI_LOG_ENV_OVERWRITE_DOC, NULL,
			      false},
	[DLI_TB_TIMESTAMP] = {"timestamp", NULL, DLI_PARAM_BOOL, NULL, DLI_LOG_ENV_TIMESTAMP_DOC, NULL,
			      false},
};

/* Framed records, ready to be written. */
struct dli_tb_records {
	unsigned char *data;
	size_t len, cap;
};

/* The event file is created on the first write, so a rank that logs nothing leaves nothing
 * behind. Records are framed into `pending` as they come and written at step end; on a write error
 * the file is cut back to its last whole record, so what was written before stays readable, and
 * later writes go on from there. */
struct dli_tb_logger {
	const struct dli_host *host; /* make_dirs */
	pthread_mutex_t lock; /* log_scalar and log_histogram may come from several threads */
	bool writes;          /* this rank is listed in `ranks` */
	bool histograms;
	double flush_secs;
	char *dir;
	int fd;      /* -1 until the first write */
	off_t whole; /* length of the file's whole records */
	struct dli_tb_records pending;
	double last_write;
};

/* Several contexts in one process may write to the same directory in the same second. */
static atomic_uint dli_tb_file_counter;

/* Seconds since the epoch. A NaN wall time would make TensorBoard drop or misplace the record. */
static double dli_tb_now(void)
{
	struct timespec ts;

	if (clock_gettime(CLOCK_REALTIME, &ts) != 0)
		return 0;
	return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* ---- TFRecord framing ----
 * Each record: u64 length, masked CRC-32C of those 8 bytes, the serialized Event, masked CRC-32C of
 * the Event; all little-endian. */

static void dli_tb_put_le32(unsigned char *p, uint32_t v)
{
	for (int i = 0; i < 4; i++)
		p[i] = (unsigned char)(v >> (8 * i));
}

static int dli_tb_frame(struct dli_tb_records *r, const DliTb__Event *event)
{
	size_t n = dli_tb__event__get_packed_size(event);
	size_t need = r->len + n + 16;

	if (need > r->cap) {
		size_t cap = r->cap ? r->cap : 4096;
		while (cap < need)
			cap *= 2;
		unsigned char *data = realloc(r->data, cap);
		if (!data)
			return -ENOMEM;
		r->data = data;
		r->cap = cap;
	}
	unsigned char *p = r->data + r->len;
	dli_tb_put_le32(p, (uint32_t)n);
	dli_tb_put_le32(p + 4, (uint32_t)((uint64_t)n >> 32));
	dli_tb_put_le32(p + 8, dli_crc32c_mask(dli_crc32c(p, 8)));
	dli_tb__event__pack(event, p + 12);
	dli_tb_put_le32(p + 12 + n, dli_crc32c_mask(dli_crc32c(p + 12, n)));
	r->len = need;
	return 0;
}

/* ---- The event file ---- */

static int dli_tb_write_all(int fd, const unsigned char *p, size_t n)
{
	while (n > 0) {
		ssize_t w = write(fd, p, n);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			return w < 0 ? -errno : -EIO;
		p += w;
		n -= (size_t)w;
	}
	return 0;
}

/* Creates a new event file and writes its first record, the file version TensorBoard checks. */
static int dli_tb_open(struct dli_tb_logger *self)
{
	char host[256] = "localhost";
	int rc = self->host->make_dirs(self->dir);

	if (rc < 0)
		return rc;
	/* The host name is part of a file name: no path separators in it. */
	if (gethostname(host, sizeof(host) - 1) != 0 || !host[0])
		strcpy(host, "localhost");
	for (char *c = host; *c; c++)
		if (*c == '/')
			*c = '_';
	double now = dli_tb_now();
	for (int tries = 0; tries < 100; tries++) {
		char *path;
		if (asprintf(&path, "%s/events.out.tfevents.%010lld.%s.%ld.%u", self->dir,
			     (long long)now, host, (long)getpid(),
			     atomic_fetch_add(&dli_tb_file_counter, 1)) < 0)
			return -ENOMEM;
		/* O_EXCL: never append to someone else's file, whose records we cannot see. */
		int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
		if (fd < 0) {
			rc = -errno;
			free(path);
			if (rc == -EEXIST)
				continue;
			return rc;
		}
		DliTb__Event version = DLI_TB__EVENT__INIT;
		struct dli_tb_records first = {0};
		version.wall_time = now;
		version.what_case = DLI_TB__EVENT__WHAT_FILE_VERSION;
		version.file_version = "brain.Event:2";
		rc = dli_tb_frame(&first, &version);
		if (rc == 0)
			rc = dli_tb_write_all(fd, first.data, first.len);
		free(first.data);
		if (rc < 0) {
			/* A file without its version record is no event file: leave none behind. */
			close(fd);
			unlink(path);
		} else {
			self->fd = fd;
			self->whole = (off_t)first.len;
		}
		free(path);
		return rc;
	}
	return -EEXIST;
}

static void dli_tb_close(struct dli_tb_logger *self)
{
	if (self->fd >= 0)
		close(self->fd);
	self->fd = -1;
}

/* Writes the buffered records. On failure they are dropped (a full disk must not grow memory
 * without bound) and the file is cut back to its whole records. Called with the lock held. */
static int dli_tb_write_buffer(struct dli_tb_logger *self)
{
	struct stat st;
	int removed = 0, rc;

	if (self->pending.len == 0)
		return 0;
	/* A file removed underneath would swallow every later record: start a new one, and say so. */
	if (self->fd >= 0 && fstat(self->fd, &st) == 0 && st.st_nlink == 0) {
		dli_tb_close(self);
		removed = -ENOENT;
	}
	rc = self->fd < 0 ? dli_tb_open(self) : 0;
	if (rc == 0) {
		rc = dli_tb_write_all(self->fd, self->pending.data, self->pending.len);
		if (rc == 0)
			self->whole += (off_t)self->pending.len;
		else if (ftruncate(self->fd, self->whole) != 0 ||
			 lseek(self->fd, self->whole, SEEK_SET) != self->whole)
			dli_tb_close(self); /* cannot tell where the records end: start a new file */
	}
	self->pending.len = 0;
	self->last_write = dli_tb_now();
	return rc < 0 ? rc : removed;
}

/* Frames one event, and writes the buffer early when it grows large. Called with the lock held. */
static int dli_tb_add(struct dli_tb_logger *self, const DliTb__Event *event)
{
	int rc = dli_tb_frame(&self->pending, event);

	if (rc == 0 && self->pending.len >= DLI_TB_BUFFER_LIMIT)
		rc = dli_tb_write_buffer(self);
	return rc;
}

/* A Summary event with one value, its wall time taken now. */
static int dli_tb_add_value(struct dli_tb_logger *self, int64_t iteration,
			    DliTb__Summary__Value *value)
{
	DliTb__Summary summary = DLI_TB__SUMMARY__INIT;
	DliTb__Event event = DLI_TB__EVENT__INIT;

	summary.n_value = 1;
	summary.value = &value;
	event.wall_time = dli_tb_now();
	event.step = iteration;
	event.what_case = DLI_TB__EVENT__WHAT_SUMMARY;
	event.summary = &summary;
	return dli_tb_add(self, &event);
}

/* ---- Logger methods ---- */

static void dli_tb_destroy(void *instance)
{
	struct dli_tb_logger *self = instance;

	if (!self)
		return;
	dli_tb_write_buffer(self);
	dli_tb_close(self);
	free(self->pending.data);
	free(self->dir);
	pthread_mutex_destroy(&self->lock);
	free(self);
}

/* When this process started, in seconds since the epoch (Linux: /proc/self/stat's start time after
 * boot, plus /proc/stat's boot time); -1 when it cannot be told. */
static long long dli_tb_process_start(void)
{
	char buf[1024];
	long long btime = -1, start_ticks = -1;
	long hz = sysconf(_SC_CLK_TCK);
	FILE *f = fopen("/proc/stat", "r");

	while (f && fgets(buf, sizeof(buf), f))
		if (sscanf(buf, "btime %lld", &btime) == 1)
			break;
	if (f)
		fclose(f);
	f = fopen("/proc/self/stat", "r");
	if (f && fgets(buf, sizeof(buf), f)) {
		/* The command name (field 2) may hold spaces and parentheses: count after its last ')'. */
		char *p = strrchr(buf, ')');
		for (int field = 2; p && field < 22; field++)
			p = strchr(p + 1, ' ');
		if (p)
			start_ticks = strtoll(p + 1, NULL, 10);
	}
	if (f)
		fclose(f);
	if (btime < 0 || start_ticks < 0 || hz <= 0)
		return -1;
	return btime + start_ticks / hz;
}

/* Whether event file `name` is one this process wrote (another context of it, which may write here
 * too): it carries this host and pid, and was made after this process started. The pid alone is not
 * enough: in a container a re-run often gets the same host name and the same pid as the run before
 * it, whose files would then be kept and each step shown twice. */
static bool dli_tb_own_file(const char *name, const char *own, long long started)
{
	char *end;
	long long made;

	if (!strstr(name, own))
		return false;
	errno = 0;
	made = strtoll(name + 20, &end, 10);
	if (started < 0 || errno || end == name + 20 || *end != '.')
		return true; /* cannot tell: keep it, as before */
	/* A file's name has the time it was made, whole seconds; allow for the boot time's rounding. */
	return made >= started - 2;
}

/* TensorBoard merges every event file of a directory into one run: the files an earlier run left
 * there would show each of its steps next to this run's. Removed: regular files named like event
 * files, in this directory only, except this process's own (other contexts of this process may
 * write here too). What cannot be removed is said, not skipped silently. */
static void dli_tb_remove_earlier_runs(const struct dli_logger_create_args *args, const char *dir)
{
	char host[256] = "localhost", own[320];
	DIR *d = opendir(dir);
	struct dirent *e;

	if (!d)
		return; /* not there yet: nothing to remove; any other failure shows at the first write */
	if (gethostname(host, sizeof(host) - 1) != 0 || !host[0])
		strcpy(host, "localhost");
	for (char *c = host; *c; c++)
		if (*c == '/')
			*c = '_';
	snprintf(own, sizeof(own), ".%s.%ld.", host, (long)getpid());
	long long started = dli_tb_process_start();
	while ((e = readdir(d))) {
		struct stat st;
		if (strncmp(e->d_name, "events.out.tfevents.", 20) ||
		    dli_tb_own_file(e->d_name, own, started) ||
		    fstatat(dirfd(d), e->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0 ||
		    !S_ISREG(st.st_mode))
			continue;
		if (unlinkat(dirfd(d), e->d_name, 0) != 0 &&
		    DLI_HAS_MEMBER(args->host, struct dli_host, log) && args->host->log)
			args->host->log(args->ctx, DLI_LOG_WARNING,
					"tensorboard: could not remove the earlier run's %s/%s (%s): "
					"TensorBoard will show its steps next to this run's",
					dir, e->d_name, strerror(errno));
	}
	closedir(d);
}

/* Whether `rank` is in `ranks`, a list of numbers or "all"; -EINVAL (err filled) for a bad item. */
static int dli_tb_rank_listed(const struct dli_value *ranks, int rank, struct dli_error *err)
{
	bool listed = false;

	for (size_t i = 0; i < ranks->u.list.n; i++) {
		const char *item = ranks->u.list.items[i];
		char *end;
		if (!strcmp(item, "all")) {
			listed = true;
			continue;
		}
		errno = 0;
		long r = strtol(item, &end, 10);
		if (errno || end == item || *end || r < 0 || r > INT_MAX) {
			snprintf(err->message, sizeof(err->message),
				 "%s: ranks: '%s' is neither a rank number nor 'all'",
				 ranks->where ? ranks->where : "tensorboard", item);
			return -EINVAL;
		}
		listed |= r == rank;
	}
	return listed;
}

/* The checks of the params beyond their schema, for create and for `dlinspect check`. */
static int dli_tb_validate(const struct dli_logger_create_args *args, struct dli_error *err)
{
	const struct dli_value *p = args->params;

	if (args->n_params < DLI_TB_N_PARAMS)
		return -EINVAL;
	if (!isfinite(p[DLI_TB_FLUSH_SECS].u.f) || p[DLI_TB_FLUSH_SECS].u.f < 0) {
		snprintf(err->message, sizeof(err->message),
			 "flush_secs must be a number of seconds >= 0, got %g",
			 p[DLI_TB_FLUSH_SECS].u.f);
		return -EINVAL;
	}
	int listed = dli_tb_rank_listed(&p[DLI_TB_RANKS], args->rank, err);
	return listed < 0 ? listed : 0;
}

static int dli_tb_create(const struct dli_logger_create_args *args, void **instance,
			 struct dli_error *err)
{
	const struct dli_value *p = args->params;
	const char *log_dir = args->log_dir && *args->log_dir ? args->log_dir : ".";
	struct dli_tb_logger *self;
	struct dli_log_env env;
	int rc, listed;

	if ((rc = dli_tb_validate(args, err)) < 0)
		return rc;
	/* make_dirs is ABI 1.1: a 1.0 host lacks it. */
	if (!DLI_HAS_MEMBER(args->host, struct dli_host, make_dirs) || !args->host->make_dirs) {
		snprintf(err->message, sizeof(err->message), "the host has no make_dirs call");
		return -ENOTSUP;
	}
	listed = dli_tb_rank_listed(&p[DLI_TB_RANKS], args->rank, err);
	if (listed < 0)
		return listed;
	rc = dli_log_env_get(&p[DLI_TB_OVERWRITE], &p[DLI_TB_TIMESTAMP], &env, err);
	if (rc < 0)
		return rc;
	self = calloc(1, sizeof(*self));
	if (!self)
		return -ENOMEM;
	rc = -pthread_mutex_init(&self->lock, NULL);
	if (rc < 0) {
		free(self);
		return rc;
	}
	self->host = args->host;
	self->fd = -1;
	self->writes = listed;
	self->histograms = p[DLI_TB_HISTOGRAMS].u.b;
	self->flush_secs = p[DLI_TB_FLUSH_SECS].u.f;
	self->last_write = dli_tb_now();
	/* TensorBoard merges the files of one directory into one run: several ranks writing the same
	 * tags there would interleave into nonsense, so each rank is a run of its own. */
	const char *dir = p[DLI_TB_DIR].u.s && *p[DLI_TB_DIR].u.s ? p[DLI_TB_DIR].u.s
								   : "{log_dir}/tensorboard";
	const char *base = "";
	if (!strncmp(dir, "{log_dir}", 9)) {
		base = log_dir;
		dir += 9;
	}
	/* A relative `dir` is anchored at the working directory now: the file is made at the first
	 * write, and a host that changes directory meanwhile must not move it (the core gives the
	 * log dir absolute for the same reason). */
	char *cwd = NULL;
	if (!base[0] && dir[0] != '/' && (cwd = getcwd(NULL, 0)))
		base = cwd;
	/* With a timestamp, each run is a directory of its own: TensorBoard lists them side by side. */
	rc = asprintf(&self->dir, "%s%s%s%s%s", base, cwd ? "/" : "", dir, env.stamp[0] ? "/" : "",
		      env.stamp);
	free(cwd);
	if (rc >= 0 && args->world_size > 1) {
		char *rank_dir;
		rc = asprintf(&rank_dir, "%s/globalrank-%d", self->dir, args->rank);
		free(self->dir);
		self->dir = rc < 0 ? NULL : rank_dir;
	}
	if (rc < 0) {
		self->dir = NULL;
		dli_tb_destroy(self);
		return -ENOMEM;
	}
	/* As the file logger's log dir: a directory that can never be written is refused now. */
	if (listed && (rc = dli_log_check_dir("dir", self->dir, err)) < 0) {
		dli_tb_destroy(self);
		return rc;
	}
	if (env.overwrite && listed)
		dli_tb_remove_earlier_runs(args, self->dir);
	*instance = self;
	return 0;
}

/* Tags are the statistic names, `{layer}_{tensor}_{stat}`, escaped as the file logger escapes them
 * (core/escape-private.h), so the two logs agree line for line: the format takes any UTF-8, but a
 * newline in a tag would break every line-oriented listing of tags. Returns `name` itself, or its
 * escaped copy in *owned (free it); NULL when out of memory. */
static const char *dli_tb_tag(const char *name, char **owned)
{
	size_t n;

	*owned = NULL;
	if (!dli_escape_needed(name))
		return name;
	n = dli_escape(NULL, 0, name);
	if (!(*owned = malloc(n + 1)))
		return NULL;
	dli_escape(*owned, n + 1, name);
	return *owned;
}

static int dli_tb_log_scalar(void *instance, const char *name, int64_t iteration, double value)
{
	struct dli_tb_logger *self = instance;
	DliTb__SummaryMetadata__PluginData plugin = DLI_TB__SUMMARY_METADATA__PLUGIN_DATA__INIT;
	DliTb__SummaryMetadata metadata = DLI_TB__SUMMARY_METADATA__INIT;
	DliTb__Summary__Value v = DLI_TB__SUMMARY__VALUE__INIT;
	const char *tag;
	char *owned;
	int rc;

	if (!self->writes)
		return 0;
	if (!(tag = dli_tb_tag(name, &owned)))
		return -ENOMEM;
	plugin.plugin_name = "scalars";
	metadata.plugin_data = &plugin;
	v.tag = (char *)tag; /* protobuf-c's fields are not const; packing only reads them */
	v.metadata = &metadata;
	v.value_case = DLI_TB__SUMMARY__VALUE__VALUE_SIMPLE_VALUE;
	v.simple_value = (float)value; /* what TensorBoard stores */
	pthread_mutex_lock(&self->lock);
	rc = dli_tb_add_value(self, iteration, &v);
	pthread_mutex_unlock(&self->lock);
	free(owned);
	return rc;
}

static int dli_tb_log_histogram(void *instance, const char *name, int64_t iteration,
				const struct dli_histogram *h)
{
	struct dli_tb_logger *self = instance;
	DliTb__HistogramProto histo = DLI_TB__HISTOGRAM_PROTO__INIT;
	DliTb__Summary__Value v = DLI_TB__SUMMARY__VALUE__INIT;
	const char *tag;
	char *owned;
	int rc;

	if (!self->writes || !self->histograms)
		return 0;
	if (!h || (h->n_buckets && (!h->bucket_limit || !h->bucket)))
		return -EINVAL;
	if (!(tag = dli_tb_tag(name, &owned)))
		return -ENOMEM;
	histo.min = h->min;
	histo.max = h->max;
	histo.num = h->num;
	histo.sum = h->sum;
	histo.sum_squares = h->sum_squares;
	histo.n_bucket_limit = histo.n_bucket = h->n_buckets;
	histo.bucket_limit = (double *)h->bucket_limit;
	histo.bucket = (double *)h->bucket;
	v.tag = (char *)tag;
	v.value_case = DLI_TB__SUMMARY__VALUE__VALUE_HISTO;
	v.histo = &histo;
	pthread_mutex_lock(&self->lock);
	rc = dli_tb_add_value(self, iteration, &v);
	pthread_mutex_unlock(&self->lock);
	free(owned);
	return rc;
}

/* Step end: the step's records reach the file, so TensorBoard shows them while training runs. */
static int dli_tb_flush(void *instance)
{
	struct dli_tb_logger *self = instance;
	int rc = 0;

	pthread_mutex_lock(&self->lock);
	if (self->flush_secs <= 0 || dli_tb_now() - self->last_write >= self->flush_secs)
		rc = dli_tb_write_buffer(self);
	pthread_mutex_unlock(&self->lock);
	return rc;
}

static const struct dli_logger_ops dli_tb_ops = {
	.size = sizeof(struct dli_logger_ops),
	.create = dli_tb_create,
	.destroy = dli_tb_destroy,
	.log_scalar = dli_tb_log_scalar,
	.flush = dli_tb_flush,
	.log_histogram = dli_tb_log_histogram,
	.validate = dli_tb_validate,
};

static const struct dli_logger_desc dli_tb_logger = {
	.size = sizeof(struct dli_logger_desc),
	.name = "tensorboard",
	.doc = "TensorBoard event files: scalars and histograms, one run per rank.",
	.params = dli_tb_params,
	.n_params = DLI_TB_N_PARAMS,
	.ops = &dli_tb_ops,
};
static const struct dli_logger_desc *const dli_tb_loggers_list[] = {&dli_tb_logger};

static const struct dli_module dli_tb_module = {
	.size = sizeof(struct dli_module),
	.abi_major = DLI_ABI_MAJOR,
	.abi_minor = DLI_ABI_MINOR,
	.name = "tensorboard",
	.doc = "Statistics and histograms as TensorBoard event files.",
	.loggers = dli_tb_loggers_list,
	.n_loggers = 1,
};

DLI_EXPORT const struct dli_module *DLI_MODULE_ENTRY(const struct dli_host *host)
{
	if (!host || host->abi_major != DLI_ABI_MAJOR)
		return NULL;
	return &dli_tb_module;
}
