/* DumpTensors' writer thread, its bytes-bounded queue and the .safetensors encoding (see
 * dump_writer.h and docs/logging.md, "Tensor dumps"). */
#include "dump_writer.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../../core/escape-private.h"

#define DUMP_DIR "nvdlfw_inspect_tensor_dumps"

/* One file to write: everything copied, so that it outlives the layer that queued it. */
struct dump_job {
	struct dump_job *next;
	char *layer;
	char safe[DLI_DUMP_SAFE_NAME_MAX + 1];
	int64_t iteration;
	struct dli_dump_blob *blobs;
	size_t bytes;
};

struct dli_dump_writer {
	struct dli_dump_writer *next; /* in the list of writers, one per context */
	struct dli_context *ctx;
	const struct dli_host *host;
	int refs;
	char *dir; /* {log_dir}/nvdlfw_inspect_tensor_dumps/rank_{r} */
	int rank, world_size;

	pthread_mutex_t mu;
	pthread_cond_t work, space;
	struct dump_job *head, **tail;
	size_t budget, held, queued; /* held: every copy alive; queued: those handed to the thread */
	bool stop, started;
	pthread_t thread;
	struct dli_dump_layer *layers;

	/* Written by the thread only, read after it is joined. */
	unsigned long long written, failed;
	unsigned long long refused; /* under mu */
};

static pthread_mutex_t writers_mu = PTHREAD_MUTEX_INITIALIZER;
static struct dli_dump_writer *writers;

/* ---- The safetensors header ---- */

struct sbuf {
	char *p;
	size_t n, cap;
	bool oom;
};

static void sb_put(struct sbuf *b, const char *s, size_t n)
{
	if (b->oom)
		return;
	if (b->n + n + 1 > b->cap) {
		size_t cap = b->cap ? b->cap : 1024;
		while (cap < b->n + n + 1)
			cap *= 2;
		char *p = realloc(b->p, cap);
		if (!p) {
			b->oom = true;
			return;
		}
		b->p = p;
		b->cap = cap;
	}
	memcpy(b->p + b->n, s, n);
	b->n += n;
	b->p[b->n] = '\0';
}

static void sb_printf(struct sbuf *b, const char *fmt, ...)
{
	char tmp[128];
	va_list ap;
	va_start(ap, fmt);
	int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
	va_end(ap);
	sb_put(b, tmp, n < 0 ? 0 : (size_t)n < sizeof tmp ? (size_t)n : sizeof tmp - 1);
}

/* A JSON string: the JSON parser of the safetensors package takes UTF-8 only, so a byte that is not
 * part of valid UTF-8 (a C host's layer names are bytes) becomes U+FFFD. */
static void sb_json(struct sbuf *b, const char *s)
{
	const unsigned char *u = (const unsigned char *)s;
	sb_put(b, "\"", 1);
	while (*u) {
		size_t n = *u < 0x80 ? 1 : dli_utf8_len(u);
		if (n == 0) {
			sb_put(b, "\xef\xbf\xbd", 3);
			u++;
		} else if (*u == '"' || *u == '\\') {
			sb_put(b, "\\", 1);
			sb_put(b, (const char *)u++, 1);
		} else if (*u < 0x20 || *u == 0x7f) {
			sb_printf(b, "\\u%04x", *u++);
		} else {
			sb_put(b, (const char *)u, n);
			u += n;
		}
	}
	sb_put(b, "\"", 1);
}

static void sb_json_pair(struct sbuf *b, bool *first, const char *key, const char *value)
{
	sb_put(b, *first ? "" : ",", *first ? 0 : 1);
	*first = false;
	sb_json(b, key);
	sb_put(b, ":", 1);
	sb_json(b, value);
}

/* The header of a job: __metadata__ first, then the tensors in file order; padded with spaces to a
 * multiple of 8 bytes (with its 8-byte length), as the safetensors package writes it. */
static int job_header(const struct dli_dump_writer *w, const struct dump_job *j, struct sbuf *b)
{
	char num[64];
	bool first = true;

	sb_put(b, "{\"__metadata__\":{", 17);
	sb_json_pair(b, &first, "format", "dlinspect tensor dump 1");
	sb_json_pair(b, &first, "layer", j->layer);
	snprintf(num, sizeof num, "%" PRId64, j->iteration);
	sb_json_pair(b, &first, "iteration", num);
	snprintf(num, sizeof num, "%d", w->rank);
	sb_json_pair(b, &first, "rank", num);
	snprintf(num, sizeof num, "%d", w->world_size);
	sb_json_pair(b, &first, "world_size", num);
	/* The tensors the file holds, each once, in the order they came. */
	struct sbuf names = {0};
	for (const struct dli_dump_blob *t = j->blobs; t; t = t->next) {
		bool seen = false;
		for (const struct dli_dump_blob *u = j->blobs; u != t && !seen; u = u->next)
			seen = !strcmp(u->tensor, t->tensor);
		if (!seen) {
			sb_put(&names, ",", names.n ? 1 : 0);
			sb_put(&names, t->tensor, strlen(t->tensor));
		}
	}
	sb_json_pair(b, &first, "tensors", names.p ? names.p : "");
	b->oom |= names.oom;
	free(names.p);
	for (const struct dli_dump_blob *t = j->blobs; t; t = t->next) {
		if (isnan(t->scale))
			continue;
		char key[600];
		snprintf(key, sizeof key, "%s.scale", t->key);
		snprintf(num, sizeof num, "%.9g", t->scale);
		sb_json_pair(b, &first, key, num);
	}
	sb_put(b, "}", 1);
	uint64_t offset = 0;
	for (const struct dli_dump_blob *t = j->blobs; t; t = t->next) {
		sb_put(b, ",", 1);
		sb_json(b, t->key);
		sb_printf(b, ":{\"dtype\":\"%s\",\"shape\":[", t->dtype);
		for (int d = 0; d < t->ndim; d++)
			sb_printf(b, "%s%" PRId64, d ? "," : "", t->shape[d]);
		sb_printf(b, "],\"data_offsets\":[%" PRIu64 ",%" PRIu64 "]}", offset,
			  offset + t->bytes);
		offset += t->bytes;
	}
	sb_put(b, "}", 1);
	while (!b->oom && b->n % 8)
		sb_put(b, " ", 1);
	return b->oom ? -ENOMEM : 0;
}

/* ---- Writing a file ---- */

static int write_all(int fd, const void *p, size_t n)
{
	const char *c = p;
	while (n) {
		ssize_t r = write(fd, c, n);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0)
			return -errno;
		if (r == 0)
			return -EIO;
		c += r;
		n -= (size_t)r;
	}
	return 0;
}

/* Writes the job to a temp file in the rank's directory and renames it over its name, so that a
 * reader sees the whole file or none. On failure the temp file is removed; *what says which step
 * failed. */
static int job_write(struct dli_dump_writer *w, const struct dump_job *j, const char *path,
		     const char **what)
{
	struct sbuf h = {0};
	char tmp[4096];
	int fd = -1, r;
	bool made = false;

	*what = "create the directory for";
	if ((r = w->host->make_dirs(w->dir)) < 0)
		return r;
	*what = "encode the header of";
	if ((r = job_header(w, j, &h)) < 0)
		goto out;
	*what = "create a temp file for";
	/* Not mkstemp: its mode 0600 would outlive the rename; these get 0666 less the umask, as
	 * any file the process writes. O_EXCL settles a clash with another process's name. */
	for (unsigned tries = 0;; tries++) {
		static atomic_ulong serial;
		if ((size_t)snprintf(tmp, sizeof tmp, "%s/.dump-%ld-%lu.tmp", w->dir, (long)getpid(),
				     atomic_fetch_add(&serial, 1)) >= sizeof tmp) {
			r = -ENAMETOOLONG;
			goto out;
		}
		fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
		if (fd >= 0)
			break;
		if (errno != EEXIST || tries > 100) {
			r = -errno;
			goto out;
		}
	}
	made = true;
	unsigned char len[8];
	for (int i = 0; i < 8; i++)
		len[i] = (unsigned char)((uint64_t)h.n >> (8 * i));
	*what = "write";
	if ((r = write_all(fd, len, sizeof len)) || (r = write_all(fd, h.p, h.n)))
		goto out;
	for (const struct dli_dump_blob *t = j->blobs; t; t = t->next)
		if (t->bytes && (r = write_all(fd, t->data, t->bytes)))
			goto out;
	*what = "close";
	r = close(fd) ? -errno : 0;
	fd = -1;
	if (r)
		goto out;
	*what = "rename the temp file to";
	if (rename(tmp, path))
		r = -errno;
out:
	if (fd >= 0)
		close(fd);
	if (r && made)
		unlink(tmp);
	free(h.p);
	return r;
}

static void blobs_free(struct dli_dump_blob *t)
{
	for (struct dli_dump_blob *next; t; t = next) {
		next = t->next;
		free(t->key);
		free(t->data);
		free(t);
	}
}

static void job_free(struct dump_job *j)
{
	if (j) {
		blobs_free(j->blobs);
		free(j->layer);
	}
	free(j);
}

static void job_run(struct dli_dump_writer *w, struct dump_job *j)
{
	char path[4096];
	const char *what = "name";
	int r = -ENAMETOOLONG;
	struct stat st;

	if ((size_t)snprintf(path, sizeof path, "%s/%s_iter_%06" PRId64 ".safetensors", w->dir,
			     j->safe, j->iteration) < sizeof path) {
		bool existed = stat(path, &st) == 0;
		r = job_write(w, j, path, &what);
		if (!r && existed)
			w->host->log(w->ctx, DLI_LOG_WARNING,
				     "DumpTensors: overwrote the earlier dump %s (layer '%s', iteration "
				     "%" PRId64 ")", path, j->layer, j->iteration);
	}
	if (!r) {
		w->written++;
		w->host->log(w->ctx, DLI_LOG_INFO,
			     "DumpTensors: wrote %s (layer '%s', iteration %" PRId64 ", %zu bytes of "
			     "tensors)", path, j->layer, j->iteration, j->bytes);
		return;
	}
	/* Said once, at error level (the message log and stderr); training goes on, and the total is
	 * said when the writer stops. */
	if (w->failed++ == 0)
		w->host->log(w->ctx, DLI_LOG_ERROR,
			     "DumpTensors: could not %s %s (layer '%s', iteration %" PRId64 "): %s; "
			     "the dump is lost, earlier dumps are intact, training goes on; later "
			     "failures are counted and reported at the end", what, path, j->layer,
			     j->iteration, strerror(-r));
}

static void *writer_main(void *arg)
{
	struct dli_dump_writer *w = arg;

	pthread_mutex_lock(&w->mu);
	for (;;) {
		while (!w->head && !w->stop)
			pthread_cond_wait(&w->work, &w->mu);
		struct dump_job *j = w->head;
		if (!j)
			break;
		w->head = j->next;
		if (!w->head)
			w->tail = &w->head;
		pthread_mutex_unlock(&w->mu);
		job_run(w, j);
		size_t bytes = j->bytes;
		job_free(j);
		pthread_mutex_lock(&w->mu);
		w->held -= bytes;
		w->queued -= bytes;
		pthread_cond_broadcast(&w->space);
	}
	pthread_mutex_unlock(&w->mu);
	return NULL;
}

/* ---- The writer of a context ---- */

struct dli_dump_writer *dli_dump_writer_get(struct dli_context *ctx, const struct dli_host *host,
					    size_t budget)
{
	struct dli_dump_writer *w;

	pthread_mutex_lock(&writers_mu);
	for (w = writers; w && w->ctx != ctx; w = w->next)
		;
	if (w) {
		w->refs++;
		if (budget > w->budget)
			w->budget = budget;
		pthread_mutex_unlock(&writers_mu);
		return w;
	}
	const char *log_dir = host->log_dir(ctx);
	int rank = host->rank(ctx);
	size_t n = strlen(log_dir) + sizeof(DUMP_DIR) + 32;
	if (!(w = calloc(1, sizeof(*w))) || !(w->dir = malloc(n))) {
		free(w);
		pthread_mutex_unlock(&writers_mu);
		return NULL;
	}
	snprintf(w->dir, n, "%s/" DUMP_DIR "/rank_%d", log_dir, rank);
	w->ctx = ctx;
	w->host = host;
	w->refs = 1;
	w->rank = rank;
	w->world_size = host->world_size(ctx);
	w->budget = budget;
	w->tail = &w->head;
	pthread_mutex_init(&w->mu, NULL);
	pthread_cond_init(&w->work, NULL);
	pthread_cond_init(&w->space, NULL);
	w->next = writers;
	writers = w;
	pthread_mutex_unlock(&writers_mu);
	return w;
}

/* Queues a job (the caller holds mu); starts the thread on the first one, so that a context that
 * never dumps (or `dlinspect check`) runs no thread. Without a thread the job is written here. */
static void writer_queue(struct dli_dump_writer *w, struct dump_job *j)
{
	if (!w->started && !w->stop) {
		int r = pthread_create(&w->thread, NULL, writer_main, w);
		if (r)
			w->host->log(w->ctx, DLI_LOG_ERROR,
				     "DumpTensors: could not start the writer thread (%s): dumps are "
				     "written on the training thread", strerror(r));
		w->started = r == 0;
	}
	w->queued += j->bytes;
	if (w->started) {
		*w->tail = j;
		w->tail = &j->next;
		pthread_cond_signal(&w->work);
		return;
	}
	pthread_mutex_unlock(&w->mu);
	job_run(w, j);
	size_t bytes = j->bytes;
	job_free(j);
	pthread_mutex_lock(&w->mu);
	w->held -= bytes;
	w->queued -= bytes;
	pthread_cond_broadcast(&w->space);
}

void dli_dump_writer_put(struct dli_dump_writer *w)
{
	if (!w)
		return;
	pthread_mutex_lock(&writers_mu);
	if (--w->refs > 0) {
		pthread_mutex_unlock(&writers_mu);
		return;
	}
	for (struct dli_dump_writer **p = &writers; *p; p = &(*p)->next)
		if (*p == w) {
			*p = w->next;
			break;
		}
	pthread_mutex_unlock(&writers_mu);

	pthread_mutex_lock(&w->mu);
	w->stop = true;
	pthread_cond_signal(&w->work);
	pthread_mutex_unlock(&w->mu);
	if (w->started)
		pthread_join(w->thread, NULL);
	if (w->failed > 1)
		w->host->log(w->ctx, DLI_LOG_ERROR,
			     "DumpTensors: %llu of %llu dump files could not be written in this run "
			     "(the first failure is reported above)", w->failed, w->failed + w->written);
	if (w->refused)
		w->host->log(w->ctx, DLI_LOG_ERROR,
			     "DumpTensors: %llu tensors were not dumped because queue_mib was full with "
			     "the step's own copies (the first is reported above)", w->refused);
	pthread_cond_destroy(&w->space);
	pthread_cond_destroy(&w->work);
	pthread_mutex_destroy(&w->mu);
	free(w->dir);
	free(w);
}

/* ---- Layers ---- */

int dli_dump_layer_get(struct dli_dump_writer *w, const char *name, struct dli_dump_layer **out)
{
	struct dli_dump_layer *l;

	pthread_mutex_lock(&w->mu);
	for (l = w->layers; l && strcmp(l->name, name); l = l->next)
		;
	if (l) {
		l->refs++;
		pthread_mutex_unlock(&w->mu);
		*out = l;
		return 0;
	}
	if (!(l = calloc(1, sizeof(*l))) || !(l->name = strdup(name))) {
		free(l);
		pthread_mutex_unlock(&w->mu);
		return -ENOMEM;
	}
	dli_dump_safe_name(name, l->safe);
	l->writer = w;
	l->refs = 1;
	l->tail = &l->head;
	l->weight_step = -1;
	l->next = w->layers;
	w->layers = l;
	pthread_mutex_unlock(&w->mu);
	*out = l;
	return 0;
}

/* The caller holds mu. */
static void layer_flush_locked(struct dli_dump_layer *l, int64_t iteration)
{
	struct dli_dump_writer *w = l->writer;

	memset(l->calls, 0, sizeof l->calls);
	memset(l->pq_calls, 0, sizeof l->pq_calls);
	if (!l->head)
		return;
	struct dump_job *j = calloc(1, sizeof(*j));
	char *layer = strdup(l->name);
	size_t bytes = 0;
	for (const struct dli_dump_blob *t = l->head; t; t = t->next)
		bytes += t->bytes;
	if (!j || !layer) {
		free(j);
		free(layer);
		w->host->log(w->ctx, DLI_LOG_ERROR,
			     "DumpTensors: out of memory queueing the dump of layer '%s', iteration "
			     "%" PRId64 ": it is lost", l->name, iteration);
		blobs_free(l->head);
		l->head = NULL;
		l->tail = &l->head;
		w->held -= bytes;
		pthread_cond_broadcast(&w->space);
		return;
	}
	j->layer = layer;
	memcpy(j->safe, l->safe, sizeof j->safe);
	j->iteration = iteration;
	j->blobs = l->head;
	j->bytes = bytes;
	l->head = NULL;
	l->tail = &l->head;
	writer_queue(w, j);
}

void dli_dump_layer_flush(struct dli_dump_layer *l, int64_t iteration)
{
	pthread_mutex_lock(&l->writer->mu);
	layer_flush_locked(l, iteration);
	pthread_mutex_unlock(&l->writer->mu);
}

void dli_dump_layer_put(struct dli_dump_layer *l, int64_t iteration)
{
	if (!l)
		return;
	struct dli_dump_writer *w = l->writer;
	pthread_mutex_lock(&w->mu);
	if (--l->refs > 0) {
		pthread_mutex_unlock(&w->mu);
		return;
	}
	layer_flush_locked(l, iteration);
	for (struct dli_dump_layer **p = &w->layers; *p; p = &(*p)->next)
		if (*p == l) {
			*p = l->next;
			break;
		}
	pthread_mutex_unlock(&w->mu);
	free(l->name);
	free(l);
}

bool dli_dump_layer_warn_once(struct dli_dump_layer *l, enum dli_dump_warn reason, int tensor)
{
	uint64_t m = 1ull << (tensor & 63);
	pthread_mutex_lock(&l->writer->mu);
	bool first = !(l->warned[reason] & m);
	l->warned[reason] |= m;
	pthread_mutex_unlock(&l->writer->mu);
	return first;
}

int dli_dump_layer_next_call(struct dli_dump_layer *l, int tensor, int gemm, int64_t iteration)
{
	int k;
	pthread_mutex_lock(&l->writer->mu);
	if (tensor == DLI_TENSOR_WEIGHT && gemm < 0) {
		k = l->weight_step == iteration ? -1 : 0;
		l->weight_step = iteration;
	} else {
		uint16_t *c = gemm < 0 ? &l->calls[tensor & 63] : &l->pq_calls[tensor & 63][gemm % 3];
		k = *c < UINT16_MAX ? (*c)++ : UINT16_MAX;
	}
	pthread_mutex_unlock(&l->writer->mu);
	return k;
}

/* Whether the layer's file already has `key` (w->mu held). Keys are made from host tensor names,
 * which may themselves look like a made key ("x.1" is also the second call of "x"): one key twice
 * would make a header that safetensors refuses, and the whole file unreadable. */
static bool dump_has_key(const struct dli_dump_layer *l, const char *key)
{
	for (const struct dli_dump_blob *b = l->head; b; b = b->next)
		if (!strcmp(b->key, key))
			return true;
	return false;
}

int dli_dump_layer_add(struct dli_dump_layer *l, const char *tensor, const char *key,
		       const char *dtype, int ndim, const int64_t *shape, const void *data, size_t bytes,
		       double scale)
{
	struct dli_dump_writer *w = l->writer;
	int r;

	/* A key the file holds is refused before anything waits or copies. The bound: wait while
	 * the writer has something to write (it frees space as it goes); a copy alone larger than
	 * the budget passes when nothing else is held. */
	pthread_mutex_lock(&w->mu);
	if (dump_has_key(l, key)) {
		pthread_mutex_unlock(&w->mu);
		return -EEXIST;
	}
	while (w->held + bytes > w->budget && w->queued > 0)
		pthread_cond_wait(&w->space, &w->mu);
	if (w->held + bytes > w->budget && w->held > 0) {
		w->refused++;
		pthread_mutex_unlock(&w->mu);
		return -ENOBUFS;
	}
	w->held += bytes;
	pthread_mutex_unlock(&w->mu);

	struct dli_dump_blob *t = calloc(1, sizeof(*t));
	if (!t || !(t->key = strdup(key)) || (bytes && !(t->data = malloc(bytes)))) {
		r = -ENOMEM;
		goto give_back;
	}
	if (bytes)
		memcpy(t->data, data, bytes);
	t->tensor = tensor;
	t->dtype = dtype;
	t->ndim = ndim;
	for (int d = 0; d < ndim; d++)
		t->shape[d] = shape[d];
	t->bytes = bytes;
	t->scale = scale;
	pthread_mutex_lock(&w->mu);
	/* Again where the list is final: a call on another thread may have added the key since. */
	if (dump_has_key(l, key)) {
		pthread_mutex_unlock(&w->mu);
		r = -EEXIST;
		goto give_back;
	}
	*l->tail = t;
	l->tail = &t->next;
	pthread_mutex_unlock(&w->mu);
	return 0;

give_back:
	if (t) {
		free(t->data);
		free(t->key);
	}
	free(t);
	pthread_mutex_lock(&w->mu);
	w->held -= bytes;
	pthread_cond_broadcast(&w->space);
	pthread_mutex_unlock(&w->mu);
	return r;
}
