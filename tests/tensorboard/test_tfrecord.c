/* The TensorBoard logger on its own: CRC-32C on both paths, TFRecord framing read back by the
 * tests' own reader (reader.h), a file cut inside a record, the file name, the parameters, and
 * write errors (a directory that cannot be made, a full disk, a file removed underneath). The
 * module is dlopen()ed from the build tree and driven with a hand-made host table, as the core
 * would. */
#include <dlfcn.h>
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <regex.h>
#include <signal.h>
#include <stdarg.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <dlinspect/plugin.h>

#include "check.h"
#include "reader.h"
#include "fsutil-private.h" /* dli_make_dirs, for the stand-in host table */

/* ---- CRC-32C ---- */

static uint32_t unmask(uint32_t masked)
{
	uint32_t rot = masked - 0xa282ead8u;
	return (rot >> 17) | (rot << 15);
}

/* The standard vectors (RFC 3720 appendix B.4 and the "123456789" check value), on the table path
 * and, where the CPU has SSE4.2, on the hardware path. */
static void test_crc32c_vectors(void)
{
	unsigned char zeros[32] = {0}, ones[32], up[32], down[32];
	uint32_t (*paths[2])(uint32_t, const void *, size_t) = {dli_crc32c_extend_table,
								   dli_crc32c_extend};

	memset(ones, 0xff, sizeof(ones));
	for (int i = 0; i < 32; i++) {
		up[i] = (unsigned char)i;
		down[i] = (unsigned char)(31 - i);
	}
	if (!dli_crc32c_hardware())
		printf("no SSE4.2 on this CPU: only the table path is checked\n");
	for (int k = 0; k < 2; k++) {
		CHECK_INT(paths[k](0, zeros, 32), 0x8a9136aa);
		CHECK_INT(paths[k](0, ones, 32), 0x62a8ab43);
		CHECK_INT(paths[k](0, up, 32), 0x46dd794e);
		CHECK_INT(paths[k](0, down, 32), 0x113fdb5c);
		CHECK_INT(paths[k](0, "123456789", 9), 0xe3069283);
		CHECK_INT(paths[k](0, "", 0), 0);
		/* Extending continues a CRC: the halves give the whole. */
		CHECK_INT(paths[k](paths[k](0, "1234", 4), "56789", 5), 0xe3069283);
	}
	/* Both paths agree on every length and alignment (the hardware path works in 8-byte words). */
	unsigned char buf[300];
	for (size_t i = 0; i < sizeof(buf); i++)
		buf[i] = (unsigned char)(i * 131 + 7);
	for (size_t off = 0; off < 8; off++)
		for (size_t len = 0; len + off <= sizeof(buf); len += 13)
			CHECK_INT(dli_crc32c_extend(0, buf + off, len),
				  dli_crc32c_extend_table(0, buf + off, len));
}

static void test_crc32c_mask(void)
{
	CHECK_INT(dli_crc32c_mask(0), 0xa282ead8);
	/* rotate right by 15, then add: 0x00008000 rotates to 1 */
	CHECK_INT(dli_crc32c_mask(0x8000), 0xa282ead9);
	uint32_t crc = dli_crc32c("123456789", 9);
	CHECK(dli_crc32c_mask(crc) != crc);
	CHECK_INT(unmask(dli_crc32c_mask(crc)), crc);
	CHECK_INT(unmask(dli_crc32c_mask(0xffffffffu)), 0xffffffffu);
}

/* ---- The logger, driven directly ---- */

static void host_log(struct dli_context *ctx, enum dli_log_level level, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
}

static const struct dli_host test_host = {
	.size = sizeof(struct dli_host),
	.abi_major = DLI_ABI_MAJOR,
	.abi_minor = DLI_ABI_MINOR,
	.log = host_log,
	.make_dirs = dli_make_dirs, /* the core's, built into this test */
};

static const struct dli_logger_desc *tb;
static char tmp[] = "/tmp/dli-test-tensorboard-XXXXXX";

struct tb_params {
	const char *dir;
	double flush_secs;
	const char *ranks[4];
	bool no_histograms;
	int rank, world_size;
	const char *log_dir;
	int overwrite, timestamp; /* 0: not set in the config; 1: true; -1: false */
};

/* Creates a logger the way the core would after parsing `loggers: {tensorboard: {...}}`; the values
 * not given are the schema's defaults. Returns the negative errno of create, or 0. */
static int tb_create(const struct tb_params *p, void **instance, struct dli_error *err)
{
	const char *all[] = {"all"};
	size_t n_ranks = 0;
	while (n_ranks < 4 && p->ranks[n_ranks])
		n_ranks++;
	struct dli_value v[6] = {
		{.type = DLI_PARAM_STRING, .set = p->dir != NULL, .u.s = p->dir},
		{.type = DLI_PARAM_FLOAT, .u.f = p->flush_secs},
		{.type = DLI_PARAM_STRING_LIST,
		 .u.list = {n_ranks ? p->ranks : all, n_ranks ? n_ranks : 1},
		 .where = "test.yaml:3:12"},
		{.type = DLI_PARAM_BOOL, .u.b = !p->no_histograms},
		{.type = DLI_PARAM_BOOL, .set = p->overwrite != 0, .u.b = p->overwrite > 0},
		{.type = DLI_PARAM_BOOL, .set = p->timestamp != 0, .u.b = p->timestamp > 0},
	};
	struct dli_logger_create_args args = {
		.size = sizeof(args),
		.host = &test_host,
		.where = "test.yaml:2:3",
		.params = v,
		.n_params = 6,
		.log_dir = p->log_dir ? p->log_dir : tmp,
		.rank = p->rank,
		.world_size = p->world_size ? p->world_size : 1,
	};
	memset(err, 0, sizeof(*err));
	*instance = NULL;
	return tb->ops->create(&args, instance, err);
}

static void *tb_open(const struct tb_params *p)
{
	struct dli_error err;
	void *instance;

	CHECK_INT(tb_create(p, &instance, &err), 0);
	return instance;
}

static bool exists(const char *path)
{
	struct stat st;
	return stat(path, &st) == 0;
}

/* Reads the only event file in `dir`; false (and a failed check) when there is not exactly one. */
static bool read_only_file(const char *dir, struct tb_file *f, char **path_out)
{
	char *paths[8];
	size_t n = tb_event_files(dir, paths, 8);
	bool ok = n == 1 && tb_file_read(paths[0], f);

	CHECK_INT(n, 1);
	CHECK(ok);
	for (size_t i = 0; i < n; i++) {
		if (i == 0 && path_out)
			*path_out = paths[0];
		else
			free(paths[i]);
	}
	return ok;
}

static void check_version(const DliTb__Event *e)
{
	CHECK_INT(e->what_case, DLI_TB__EVENT__WHAT_FILE_VERSION);
	if (e->what_case == DLI_TB__EVENT__WHAT_FILE_VERSION)
		CHECK_STR(e->file_version, "brain.Event:2");
	CHECK(isfinite(e->wall_time) && fabs(e->wall_time - (double)time(NULL)) < 60);
}

static void check_scalar(const DliTb__Event *e, const char *tag, int64_t step, double value)
{
	float want = (float)value;

	CHECK(isfinite(e->wall_time) && fabs(e->wall_time - (double)time(NULL)) < 60);
	CHECK_INT(e->step, step);
	CHECK_INT(e->what_case, DLI_TB__EVENT__WHAT_SUMMARY);
	if (e->what_case != DLI_TB__EVENT__WHAT_SUMMARY || e->summary->n_value != 1) {
		CHECK(!"a summary with one value");
		return;
	}
	const DliTb__Summary__Value *v = e->summary->value[0];
	CHECK_STR(v->tag, tag);
	CHECK_INT(v->value_case, DLI_TB__SUMMARY__VALUE__VALUE_SIMPLE_VALUE);
	if (isnan(want))
		CHECK(isnan(v->simple_value));
	else
		CHECK(memcmp(&v->simple_value, &want, sizeof(float)) == 0);
	CHECK(v->metadata && v->metadata->plugin_data);
	if (v->metadata && v->metadata->plugin_data)
		CHECK_STR(v->metadata->plugin_data->plugin_name, "scalars");
}

/* Records reach the file at flush (step end), framed and checksummed, in order; the file name is
 * events.out.tfevents.{10-digit seconds}.{host}.{pid}.{n}. */
static void test_framing(void)
{
	char dir[4096], *path = NULL;
	struct tb_file f;
	struct tb_params p = {.dir = dir};
	static const double values[] = {1.5, 0.1, -1.0 / 3, 0.0, 1e-40, NAN, INFINITY, 1e300};
	const double limits[3] = {-1, 0.5, 1.7976931348623157e308}, counts[3] = {2, 0, 7};
	struct dli_histogram h = {.min = -3,
				  .max = 9,
				  .num = 9,
				  .sum = 1.25,
				  .sum_squares = 40.5,
				  .n_buckets = 3,
				  .bucket_limit = limits,
				  .bucket = counts};

	snprintf(dir, sizeof(dir), "%s/framing/deeper", tmp);
	void *log = tb_open(&p);
	for (int i = 0; i < 8; i++)
		CHECK_INT(tb->ops->log_scalar(log, "model.1.fc1_activation_max", i * 10, values[i]),
			  0);
	CHECK(!exists(dir)); /* nothing reaches the disk before the step ends */
	CHECK_INT(tb->ops->log_histogram(log, "model.1.fc1_activation_hist", 70, &h), 0);
	CHECK_INT(tb->ops->flush(log), 0);
	CHECK_INT(tb->ops->flush(log), 0); /* nothing new: nothing written */
	if (read_only_file(dir, &f, &path)) {
		CHECK_INT(f.n, 10);
		CHECK(!f.cut && !f.corrupt);
		check_version(f.events[0]);
		for (int i = 0; i < 8 && (size_t)i + 1 < f.n; i++)
			check_scalar(f.events[i + 1], "model.1.fc1_activation_max", i * 10, values[i]);
		if (f.n == 10) {
			const DliTb__Event *e = f.events[9];
			CHECK_INT(e->step, 70);
			CHECK_INT(e->what_case, DLI_TB__EVENT__WHAT_SUMMARY);
			const DliTb__Summary__Value *v = e->summary->value[0];
			CHECK_STR(v->tag, "model.1.fc1_activation_hist");
			CHECK_INT(v->value_case, DLI_TB__SUMMARY__VALUE__VALUE_HISTO);
			const DliTb__HistogramProto *hp = v->histo;
			CHECK(hp->min == -3 && hp->max == 9 && hp->num == 9 && hp->sum == 1.25 &&
			      hp->sum_squares == 40.5);
			CHECK_INT(hp->n_bucket_limit, 3);
			CHECK_INT(hp->n_bucket, 3);
			if (hp->n_bucket == 3 && hp->n_bucket_limit == 3)
				CHECK(!memcmp(hp->bucket_limit, limits, sizeof(limits)) &&
				      !memcmp(hp->bucket, counts, sizeof(counts)));
		}
		tb_file_free(&f);
	}
	/* The name: directory, 10-digit seconds within a minute of now, host, our pid, a counter. */
	regex_t re;
	regmatch_t m[4];
	char host[256] = "";
	gethostname(host, sizeof(host) - 1);
	CHECK_INT(regcomp(&re, "/events\\.out\\.tfevents\\.([0-9]{10})\\.([^/]+)\\.([0-9]+)\\.[0-9]+$",
			  REG_EXTENDED),
		  0);
	if (path && regexec(&re, path, 4, m, 0) == 0) {
		CHECK(llabs(atoll(path + m[1].rm_so) - (long long)time(NULL)) < 60);
		CHECK(!strncmp(path + m[2].rm_so, host, (size_t)(m[2].rm_eo - m[2].rm_so)));
		CHECK_INT(atol(path + m[3].rm_so), getpid());
	} else {
		fprintf(stderr, "bad event file name: %s\n", path ? path : "(none)");
		CHECK(!"event file name matches the pattern");
	}
	regfree(&re);

	/* A file cut anywhere reads up to its last whole record, without a checksum error. */
	FILE *fp = path ? fopen(path, "rb") : NULL;
	CHECK(fp != NULL);
	if (fp) {
		unsigned char whole[8192];
		size_t size = fread(whole, 1, sizeof(whole), fp);
		char cut_path[4200];
		size_t ends[16], n_ends = 0;
		fclose(fp);
		/* Where each record ends, from the lengths in the framing. */
		for (size_t off = 0; off + 12 <= size && n_ends < 16;) {
			off += 12 + tb_le32(whole + off) + 4;
			ends[n_ends++] = off;
		}
		CHECK_INT(n_ends, 10);
		CHECK_INT(ends[n_ends - 1], size);
		snprintf(cut_path, sizeof(cut_path), "%s/cut", tmp);
		for (size_t len = 0; len <= size; len++) {
			size_t want = 0;
			while (want < n_ends && ends[want] <= len)
				want++;
			fp = fopen(cut_path, "wb");
			fwrite(whole, 1, len, fp);
			fclose(fp);
			CHECK(tb_file_read(cut_path, &f));
			CHECK_INT(f.n, want);
			CHECK(!f.corrupt);
			CHECK(f.cut == (len != (want ? ends[want - 1] : 0)));
			tb_file_free(&f);
		}
		/* A flipped bit is caught by the data CRC. */
		whole[ends[3] - 6] ^= 0x10;
		fp = fopen(cut_path, "wb");
		fwrite(whole, 1, size, fp);
		fclose(fp);
		CHECK(tb_file_read(cut_path, &f));
		CHECK(f.corrupt);
		CHECK_INT(f.n, 3);
		tb_file_free(&f);
	}
	free(path);
	tb->ops->destroy(log);
	tb->ops->destroy(NULL);
}

/* dir defaults to {log_dir}/tensorboard (also when the core passes no value); with several ranks
 * each writes a run of its own; `ranks` picks the ranks that write at all; histograms can be left
 * out; flush_secs spaces out writes. */
static void test_params(void)
{
	char log_dir[4096], dir[4200];
	struct tb_file f;
	struct dli_error err;
	void *log;
	const double limits[1] = {1}, counts[1] = {1};
	struct dli_histogram h = {.n_buckets = 1, .bucket_limit = limits, .bucket = counts};

	snprintf(log_dir, sizeof(log_dir), "%s/params", tmp);
	struct tb_params p = {.log_dir = log_dir};
	log = tb_open(&p);
	CHECK_INT(tb->ops->log_scalar(log, "a", 1, 1.0), 0);
	tb->ops->destroy(log); /* destroy writes what is left */
	snprintf(dir, sizeof(dir), "%s/tensorboard", log_dir);
	if (read_only_file(dir, &f, NULL)) {
		CHECK_INT(f.n, 2);
		tb_file_free(&f);
	}
	/* {log_dir} at the start of dir stands for the log dir. */
	p = (struct tb_params){.log_dir = log_dir, .dir = "{log_dir}/custom"};
	log = tb_open(&p);
	CHECK_INT(tb->ops->log_scalar(log, "a", 1, 1.0), 0);
	tb->ops->destroy(log);
	snprintf(dir, sizeof(dir), "%s/custom", log_dir);
	if (read_only_file(dir, &f, NULL))
		tb_file_free(&f);

	/* Rank 3 of 8, listed: its own subdirectory. */
	snprintf(dir, sizeof(dir), "%s/ranks", tmp);
	p = (struct tb_params){.dir = dir, .rank = 3, .world_size = 8, .ranks = {"0", "3"}};
	log = tb_open(&p);
	CHECK_INT(tb->ops->log_scalar(log, "a", 1, 1.0), 0);
	CHECK_INT(tb->ops->flush(log), 0);
	tb->ops->destroy(log);
	snprintf(dir, sizeof(dir), "%s/ranks/globalrank-3", tmp);
	if (read_only_file(dir, &f, NULL))
		tb_file_free(&f);
	/* Rank 2, not listed: nothing at all. */
	snprintf(dir, sizeof(dir), "%s/ranks2", tmp);
	p = (struct tb_params){.dir = dir, .rank = 2, .world_size = 8, .ranks = {"0", "3"}};
	log = tb_open(&p);
	CHECK_INT(tb->ops->log_scalar(log, "a", 1, 1.0), 0);
	CHECK_INT(tb->ops->log_histogram(log, "h", 1, &h), 0);
	CHECK_INT(tb->ops->flush(log), 0);
	tb->ops->destroy(log);
	CHECK(!exists(dir));
	/* A rank that is not a number is refused at create, with where it was written. */
	p = (struct tb_params){.dir = dir, .ranks = {"0", "two"}};
	CHECK_INT(tb_create(&p, &log, &err), -EINVAL);
	CHECK_STR(err.message, "test.yaml:3:12: ranks: 'two' is neither a rank number nor 'all'");
	p = (struct tb_params){.dir = dir, .flush_secs = -1};
	CHECK_INT(tb_create(&p, &log, &err), -EINVAL);
	CHECK_CONTAINS(err.message, "flush_secs");

	/* histograms: false */
	snprintf(dir, sizeof(dir), "%s/nohist", tmp);
	p = (struct tb_params){.dir = dir, .no_histograms = true};
	log = tb_open(&p);
	CHECK_INT(tb->ops->log_histogram(log, "h", 1, &h), 0);
	CHECK_INT(tb->ops->log_scalar(log, "a", 1, 1.0), 0);
	CHECK_INT(tb->ops->flush(log), 0);
	if (read_only_file(dir, &f, NULL)) {
		CHECK_INT(f.n, 2);
		if (f.n == 2)
			check_scalar(f.events[1], "a", 1, 1.0);
		tb_file_free(&f);
	}
	tb->ops->destroy(log);
	/* A histogram without its arrays is refused. */
	struct dli_histogram bad = {.n_buckets = 2};
	p = (struct tb_params){.dir = dir};
	log = tb_open(&p);
	CHECK_INT(tb->ops->log_histogram(log, "h", 1, &bad), -EINVAL);
	CHECK_INT(tb->ops->log_histogram(log, "h", 1, NULL), -EINVAL);
	tb->ops->destroy(log);

	/* flush_secs: an hour; step ends write nothing, destroy writes everything. */
	snprintf(dir, sizeof(dir), "%s/flushsecs", tmp);
	p = (struct tb_params){.dir = dir, .flush_secs = 3600};
	log = tb_open(&p);
	for (int i = 0; i < 5; i++) {
		CHECK_INT(tb->ops->log_scalar(log, "a", i, i), 0);
		CHECK_INT(tb->ops->flush(log), 0);
	}
	CHECK(!exists(dir));
	tb->ops->destroy(log);
	if (read_only_file(dir, &f, NULL)) {
		CHECK_INT(f.n, 6);
		tb_file_free(&f);
	}
}

/* A directory that cannot be made: every flush fails with the errno, nothing is left behind, and
 * the logger writes again once the obstacle is gone. */
/* A log dir an earlier run wrote to: by default the event files other processes left in the
 * logger's directory are removed at start (TensorBoard would show their steps next to this run's),
 * even one with this host name and pid made before this process started; its own process's and
 * other files are kept; overwrite: false keeps them all; timestamp: true
 * writes into a run directory of its own, named by $NVDLFW_INSPECT_LOG_TIMESTAMP. */
static void test_reuse(void)
{
	char log_dir[4096], dir[4200], old[4400], mine[4800], stale[4800], other[4400], path[4400];
	struct dli_error err;
	void *log;
	FILE *fp;

	snprintf(log_dir, sizeof(log_dir), "%s/reuse", tmp);
	snprintf(dir, sizeof(dir), "%s/tensorboard", log_dir);
	CHECK_INT(dli_make_dirs(dir), 0);
	snprintf(old, sizeof(old), "%s/events.out.tfevents.1700000000.otherhost.1.0", dir);
	snprintf(other, sizeof(other), "%s/notes.txt", dir);
	{
		char host[256] = "localhost";
		if (gethostname(host, sizeof(host) - 1) != 0 || !host[0])
			strcpy(host, "localhost");
		/* This process's (another context's): its host and pid, made after it started. */
		snprintf(mine, sizeof(mine), "%s/events.out.tfevents.%010lld.%s.%ld.7", dir,
			 (long long)time(NULL), host, (long)getpid());
		/* An earlier run's with the same host name and pid, as a re-run in a container gets:
		 * made before this process started, so not this process's. */
		snprintf(stale, sizeof(stale), "%s/events.out.tfevents.1700000000.%s.%ld.0", dir, host,
			 (long)getpid());
	}
	const char *made[] = {old, mine, other, stale};
	for (int i = 0; i < 4; i++) {
		fp = fopen(made[i], "w");
		CHECK(fp != NULL);
		if (fp)
			fclose(fp);
	}

	/* overwrite: false (the config) keeps everything, whatever the environment says. */
	setenv("DLINSPECT_LOG_OVERWRITE", "1", 1);
	struct tb_params p = {.log_dir = log_dir, .overwrite = -1};
	log = tb_open(&p);
	tb->ops->destroy(log);
	unsetenv("DLINSPECT_LOG_OVERWRITE");
	CHECK(exists(old) && exists(mine) && exists(other) && exists(stale));

	/* NVDLFW_INSPECT_ENABLE_LOG_OVERWRITE=0 keeps them too. */
	setenv("NVDLFW_INSPECT_ENABLE_LOG_OVERWRITE", "0", 1);
	p = (struct tb_params){.log_dir = log_dir};
	log = tb_open(&p);
	tb->ops->destroy(log);
	unsetenv("NVDLFW_INSPECT_ENABLE_LOG_OVERWRITE");
	CHECK(exists(old));

	/* The default: the earlier runs' files go, this process's and the other file stay. */
	log = tb_open(&p);
	CHECK(!exists(old));
	CHECK(!exists(stale));
	CHECK(exists(mine) && exists(other));
	CHECK_INT(tb->ops->log_scalar(log, "a", 1, 1.0), 0);
	tb->ops->destroy(log);
	unlink(mine);
	unlink(other);
	struct tb_file f;
	if (read_only_file(dir, &f, NULL))
		tb_file_free(&f);

	/* A bad switch value is an error naming the variable. */
	setenv("DLINSPECT_LOG_OVERWRITE", "sometimes", 1);
	CHECK_INT(tb_create(&p, &log, &err), -EINVAL);
	CHECK_CONTAINS(err.message, "DLINSPECT_LOG_OVERWRITE='sometimes': expected 0 or 1");
	unsetenv("DLINSPECT_LOG_OVERWRITE");

	/* timestamp: a run directory of its own under the logger's directory. */
	setenv("NVDLFW_INSPECT_LOG_TIMESTAMP", "20261123_101010", 1);
	p = (struct tb_params){.log_dir = log_dir, .timestamp = 1};
	log = tb_open(&p);
	CHECK_INT(tb->ops->log_scalar(log, "a", 2, 2.0), 0);
	tb->ops->destroy(log);
	unsetenv("NVDLFW_INSPECT_LOG_TIMESTAMP");
	snprintf(path, sizeof(path), "%s/20261123_101010", dir);
	if (read_only_file(path, &f, NULL)) {
		CHECK_INT(f.n, 2);
		tb_file_free(&f);
	}
	/* ... and the run before it is still there, in the parent. */
	if (read_only_file(dir, &f, NULL))
		tb_file_free(&f);
}

/* A relative `dir` is under the working directory of create, not of the first write: a host that
 * changes directory in between must not find its event file somewhere else. */
static void test_relative_dir(void)
{
	char first[4200], second[4200], path[4300], *old = getcwd(NULL, 0);
	struct tb_file f;

	snprintf(first, sizeof(first), "%s/cwd-a", tmp);
	snprintf(second, sizeof(second), "%s/cwd-b", tmp);
	CHECK_INT(dli_make_dirs(first), 0);
	CHECK_INT(dli_make_dirs(second), 0);
	CHECK(old && chdir(first) == 0);
	struct tb_params p = {.dir = "rel"};
	void *log = tb_open(&p);
	CHECK(chdir(second) == 0);
	CHECK_INT(tb->ops->log_scalar(log, "x", 1, 1.0), 0);
	CHECK_INT(tb->ops->flush(log), 0);
	tb->ops->destroy(log);
	snprintf(path, sizeof(path), "%s/rel", first);
	if (read_only_file(path, &f, NULL)) {
		CHECK_INT(f.n, 2);
		tb_file_free(&f);
	}
	snprintf(path, sizeof(path), "%s/rel", second);
	CHECK(!exists(path));
	CHECK(old && chdir(old) == 0);
	free(old);
}

static void test_bad_dir(void)
{
	char plain[4096], dir[4096];
	struct tb_file f;

	snprintf(plain, sizeof(plain), "%s/plain", tmp);
	FILE *fp = fopen(plain, "w");
	CHECK(fp != NULL);
	if (fp)
		fclose(fp);
	snprintf(dir, sizeof(dir), "%s/plain/tensorboard", tmp);
	struct tb_params p = {.dir = dir};
	/* A dir that can never be made is refused at create, naming it and the file in its way. */
	struct dli_error err;
	void *log;
	char want[8400];
	CHECK_INT(tb_create(&p, &log, &err), -ENOTDIR);
	snprintf(want, sizeof(want), "dir '%s': '%s' is not a directory", dir, plain);
	CHECK_CONTAINS(err.message, want);
	/* One that becomes so after create: each flush fails, and writing resumes once it is gone. */
	CHECK_INT(unlink(plain), 0);
	log = tb_open(&p);
	fp = fopen(plain, "w");
	CHECK(fp != NULL);
	if (fp)
		fclose(fp);
	CHECK_INT(tb->ops->log_scalar(log, "x", 1, 1.0), 0);
	CHECK_INT(tb->ops->flush(log), -ENOTDIR);
	CHECK_INT(tb->ops->log_scalar(log, "x", 2, 2.0), 0);
	CHECK_INT(tb->ops->flush(log), -ENOTDIR);
	CHECK_INT(unlink(plain), 0);
	CHECK_INT(tb->ops->log_scalar(log, "x", 3, 3.0), 0);
	CHECK_INT(tb->ops->flush(log), 0);
	if (read_only_file(dir, &f, NULL)) {
		CHECK_INT(f.n, 2); /* the version, then step 3: the failed steps' records are dropped */
		if (f.n == 2)
			check_scalar(f.events[1], "x", 3, 3.0);
		tb_file_free(&f);
	}
	tb->ops->destroy(log);
}

/* A full disk (a file size limit; SIGXFSZ ignored so write fails with EFBIG instead of killing us):
 * the flush fails, the file is cut back to whole records, and writing resumes there when space
 * comes back. */
static void test_disk_full(void)
{
	struct rlimit old, small;
	char dir[4096];
	struct tb_file f;
	int rc = 0, steps = 0;

	snprintf(dir, sizeof(dir), "%s/full", tmp);
	struct tb_params p = {.dir = dir};
	void *log = tb_open(&p);
	signal(SIGXFSZ, SIG_IGN);
	CHECK_INT(getrlimit(RLIMIT_FSIZE, &old), 0);
	small = old;
	small.rlim_cur = 1000;
	CHECK_INT(setrlimit(RLIMIT_FSIZE, &small), 0);
	for (; steps < 100 && rc == 0; steps++) {
		for (int k = 0; k < 3 && rc == 0; k++)
			rc = tb->ops->log_scalar(log, "model.1.fc1_activation_max", steps, k);
		if (rc == 0)
			rc = tb->ops->flush(log);
	}
	CHECK_INT(rc, -EFBIG);
	CHECK_INT(tb->ops->log_scalar(log, "still_full", 1000, 1.0), 0);
	CHECK_INT(tb->ops->flush(log), -EFBIG);
	CHECK_INT(setrlimit(RLIMIT_FSIZE, &old), 0);
	signal(SIGXFSZ, SIG_DFL);
	if (read_only_file(dir, &f, NULL)) {
		CHECK(!f.cut && !f.corrupt && f.size <= 1000);
		CHECK_INT(f.n, 1 + 3 * (steps - 1)); /* every step before the failing one */
		tb_file_free(&f);
	}
	/* Space again: the next record follows the last whole one. */
	CHECK_INT(tb->ops->log_scalar(log, "after", 2000, 2.0), 0);
	CHECK_INT(tb->ops->flush(log), 0);
	if (read_only_file(dir, &f, NULL)) {
		CHECK(!f.cut && !f.corrupt);
		CHECK_INT(f.n, 1 + 3 * (steps - 1) + 1);
		if (f.n > 1)
			check_scalar(f.events[f.n - 1], "after", 2000, 2.0);
		tb_file_free(&f);
	}
	tb->ops->destroy(log);
}

/* A file removed underneath: the flush says so (-ENOENT) and the records go to a new file, which
 * starts with its own version record. */
static void test_removed_file(void)
{
	char dir[4096], *paths[4];
	struct tb_file f;

	snprintf(dir, sizeof(dir), "%s/removed", tmp);
	struct tb_params p = {.dir = dir};
	void *log = tb_open(&p);
	CHECK_INT(tb->ops->log_scalar(log, "a", 1, 1.0), 0);
	CHECK_INT(tb->ops->flush(log), 0);
	size_t n = tb_event_files(dir, paths, 4);
	CHECK_INT(n, 1);
	for (size_t i = 0; i < n; i++) {
		CHECK_INT(unlink(paths[i]), 0);
		free(paths[i]);
	}
	CHECK_INT(tb->ops->log_scalar(log, "a", 2, 2.0), 0);
	CHECK_INT(tb->ops->flush(log), -ENOENT);
	CHECK_INT(tb->ops->log_scalar(log, "a", 3, 3.0), 0);
	CHECK_INT(tb->ops->flush(log), 0);
	if (read_only_file(dir, &f, NULL)) {
		CHECK_INT(f.n, 3);
		if (f.n == 3) {
			check_version(f.events[0]);
			check_scalar(f.events[1], "a", 2, 2.0);
			check_scalar(f.events[2], "a", 3, 3.0);
		}
		tb_file_free(&f);
	}
	tb->ops->destroy(log);
}

/* Several threads logging at once: every record whole, none lost. The buffer limit (1 MiB) is
 * crossed on the way, so writes from inside log_scalar are covered too. */
struct thread_arg {
	void *log;
	int id;
	int failures;
};

static void *thread_main(void *p)
{
	struct thread_arg *a = p;
	char name[64];

	snprintf(name, sizeof(name), "thread%d_activation_max", a->id);
	for (int i = 0; i < 5000; i++)
		a->failures += tb->ops->log_scalar(a->log, name, i, a->id + i * 0.5) != 0;
	return NULL;
}

static void test_threads(void)
{
	char dir[4096];
	struct tb_file f;
	pthread_t threads[4];
	struct thread_arg args[4];

	snprintf(dir, sizeof(dir), "%s/threads", tmp);
	struct tb_params p = {.dir = dir};
	void *log = tb_open(&p);
	for (int i = 0; i < 4; i++) {
		args[i] = (struct thread_arg){log, i, 0};
		pthread_create(&threads[i], NULL, thread_main, &args[i]);
	}
	for (int i = 0; i < 4; i++) {
		pthread_join(threads[i], NULL);
		CHECK_INT(args[i].failures, 0);
	}
	CHECK_INT(tb->ops->flush(log), 0);
	if (read_only_file(dir, &f, NULL)) {
		CHECK(!f.cut && !f.corrupt);
		CHECK_INT(f.n, 1 + 4 * 5000);
		CHECK(f.size > (1u << 20));
		tb_file_free(&f);
	}
	tb->ops->destroy(log);
}

/* Tags are escaped as the file logger escapes names: a newline in a layer name stays "\\n", a byte
 * that is not UTF-8 becomes "\\xNN". */
static void test_tag_escaped(void)
{
	char dir[4200];
	struct tb_params p;
	struct tb_file f;
	void *log;

	snprintf(dir, sizeof(dir), "%s/escape", tmp);
	p = (struct tb_params){.dir = dir};
	log = tb_open(&p);
	CHECK_INT(tb->ops->log_scalar(log, "a\nb\t\\_activation_max", 1, 1.0), 0);
	/* Not UTF-8 (a C host's name): TensorBoard's protobuf would refuse the tag, and with it the
	 * whole file; escaped, it decodes. Well-formed UTF-8 passes unchanged. */
	CHECK_INT(tb->ops->log_scalar(log, "bad\xff\xe5\xb1_\xc3\xa9_activation_max", 2, 2.0), 0);
	CHECK_INT(tb->ops->flush(log), 0);
	if (read_only_file(dir, &f, NULL)) {
		CHECK_INT(f.n, 3);
		if (f.n == 3) {
			check_scalar(f.events[1], "a\\nb\\t\\\\_activation_max", 1, 1.0);
			check_scalar(f.events[2], "bad\\xff\\xe5\\xb1_\xc3\xa9_activation_max", 2, 2.0);
		}
		tb_file_free(&f);
	}
	tb->ops->destroy(log);
}

int main(void)
{
	test_crc32c_vectors();
	test_crc32c_mask();

	void *handle = dlopen(TENSORBOARD_LOGGER_PATH, RTLD_NOW | RTLD_LOCAL);
	dli_module_entry_fn entry;
	if (!handle) {
		fprintf(stderr, "dlopen %s: %s\n", TENSORBOARD_LOGGER_PATH, dlerror());
		return 1;
	}
	*(void **)&entry = dlsym(handle, DLI_MODULE_ENTRY_NAME);
	CHECK(entry != NULL);
	const struct dli_module *m = entry ? entry(&test_host) : NULL;
	CHECK(m && m->n_loggers == 1 && m->n_features == 0);
	if (!m || m->n_loggers != 1)
		return check_exit();
	tb = m->loggers[0];
	CHECK_STR(m->name, "tensorboard");
	CHECK_STR(tb->name, "tensorboard");
	CHECK_INT(tb->n_params, 6);
	CHECK(tb->ops->create && tb->ops->destroy && tb->ops->log_scalar && tb->ops->flush &&
	      tb->ops->log_histogram && !tb->ops->log_text);
	CHECK(mkdtemp(tmp) != NULL);

	test_framing();
	test_params();
	test_reuse();
	test_bad_dir();
	test_relative_dir();
	test_disk_full();
	test_removed_file();
	test_tag_escaped();
	test_threads();

	if (check_failures == 0) {
		char cmd[256];
		snprintf(cmd, sizeof(cmd), "rm -rf %s", tmp);
		if (system(cmd) != 0)
			fprintf(stderr, "could not remove %s\n", tmp);
	}
	dlclose(handle);
	return check_exit();
}
