/* DumpTensors' writer thread, its bytes-bounded queue and the .safetensors encoding; torch.save
 * files by torch_file.c (see dump_writer.h and docs/logging.md, "Tensor dumps"). */
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
#include "torch_file.h"

#define DUMP_DIR "nvdlfw_inspect_tensor_dumps"
#define TORCH_DIR "tensor_dumps" /* TransformerEngine's */

/* One file to write: everything copied, so that it outlives the layer that queued it. */
struct dump_job {
	struct dump_job *next;
	char *layer;
	char safe[DLI_DUMP_SAFE_NAME_MAX + 1];
	char te[DLI_DUMP_TE_LAYER_MAX + 1];
	int64_t iteration;
	struct dli_dump_blob *blobs; /* all of one format */
	size_t bytes;
	bool torch;
};

struct dli_dump_writer {
	struct dli_dump_writer *next; /* in the list of writers, one per context */
	struct dli_context *ctx;
	const struct dli_host *host;
	int refs;
	char *dir;       /* {log_dir}/nvdlfw_inspect_tensor_dumps/rank_{r} */
	char *torch_dir; /* {log_dir}/tensor_dumps/rank_{r} */
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

/* A .safetensors file's content: its header, then the tensors. */
static int safetensors_content(int fd, struct dli_dump_writer *w, const struct dump_job *j,
			       const void *unused, const char **what)
{
	struct sbuf h = {0};
	unsigned char len[8];
	int r;

	(void)unused;
	*what = "encode the header of";
	if ((r = job_header(w, j, &h)) < 0)
		goto out;
	for (int i = 0; i < 8; i++)
		len[i] = (unsigned char)((uint64_t)h.n >> (8 * i));
	*what = "write";
	if ((r = dli_dump_write_all(fd, len, sizeof len)) || (r = dli_dump_write_all(fd, h.p, h.n)))
		goto out;
	for (const struct dli_dump_blob *t = j->blobs; t; t = t->next)
		if (t->bytes && (r = dli_dump_write_all(fd, t->data, t->bytes)))
			goto out;
out:
	free(h.p);
	return r;
}

/* The entries of one tensor's torch file (struct torch_file below). */
struct torch_file {
	const struct dli_torch_entry *entries;
	size_t n;
};

static int torch_content(int fd, struct dli_dump_writer *w, const struct dump_job *j,
			 const void *arg, const char **what)
{
	const struct torch_file *f = arg;

	(void)w;
	(void)j;
	*what = "write";
	return dli_torch_file_write(fd, f->entries, f->n);
}

typedef int (*content_fn)(int fd, struct dli_dump_writer *w, const struct dump_job *j,
			  const void *arg, const char **what);

/* Writes a file of the job (its content by `content`) to a temp file in `dir` and renames it over
 * `path`, so that a reader sees the whole file or none. On failure the temp file is removed; *what
 * says which step failed. */
static int job_write(struct dli_dump_writer *w, const struct dump_job *j, const char *dir,
		     const char *path, content_fn content, const void *arg, const char **what)
{
	char tmp[4096];
	int fd = -1, r;
	bool made = false;

	*what = "create the directory for";
	if ((r = w->host->make_dirs(dir)) < 0)
		return r;
	*what = "create a temp file for";
	/* Not mkstemp: its mode 0600 would outlive the rename; these get 0666 less the umask, as
	 * any file the process writes. O_EXCL settles a clash with another process's name. */
	for (unsigned tries = 0;; tries++) {
		static atomic_ulong serial;
		if ((size_t)snprintf(tmp, sizeof tmp, "%s/.dump-%ld-%lu.tmp", dir, (long)getpid(),
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
	if ((r = content(fd, w, j, arg, what)))
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
	return r;
}

static void blobs_free(struct dli_dump_blob *t)
{
	for (struct dli_dump_blob *next; t; t = next) {
		next = t->next;
		free(t->key);
		free(t->tensor);
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

/* Writes one file of the job (see job_write) and says so: its path at info level, an earlier
 * file it replaced as a warning, the first failure of the writer at error level. */
static void file_run(struct dli_dump_writer *w, const struct dump_job *j, const char *dir,
		     const char *path, content_fn content, const void *arg, size_t bytes)
{
	const char *what = "name";
	int r = -ENAMETOOLONG;
	struct stat st;

	if (path) {
		bool existed = stat(path, &st) == 0;
		r = job_write(w, j, dir, path, content, arg, &what);
		if (!r && existed)
			w->host->log(w->ctx, DLI_LOG_WARNING,
				     "DumpTensors: overwrote the earlier dump %s (layer '%s', iteration "
				     "%" PRId64 ")", path, j->layer, j->iteration);
	}
	if (!r) {
		w->written++;
		w->host->log(w->ctx, DLI_LOG_INFO,
			     "DumpTensors: wrote %s (layer '%s', iteration %" PRId64 ", %zu bytes of "
			     "tensors)", path, j->layer, j->iteration, bytes);
		return;
	}
	/* Said once, at error level (the message log and stderr); training goes on, and the total is
	 * said when the writer stops. */
	if (w->failed++ == 0)
		w->host->log(w->ctx, DLI_LOG_ERROR,
			     "DumpTensors: could not %s %s (layer '%s', iteration %" PRId64 "): %s; "
			     "the dump is lost, earlier dumps are intact, training goes on; later "
			     "failures are counted and reported at the end", what,
			     path ? path : "a dump file (its path is too long)", j->layer,
			     j->iteration, strerror(-r));
}

/* TransformerEngine's files: one per tensor of the layer, {te layer}_{te tensor}.pt in the
 * iteration's directory, each a dict of that tensor's blobs in the order they came. The tensor's
 * name in it is the one the layer gave it (te_tensor_name). */
static void job_run_torch(struct dli_dump_writer *w, const struct dump_job *j)
{
	char dir[4096], path[4096];
	size_t n_tensors = 0, most = 0;

	for (const struct dli_dump_blob *t = j->blobs; t; t = t->next, most++)
		;
	struct dli_torch_entry *e = calloc(most ? most : 1, sizeof *e);
	const char **tensors = calloc(most ? most : 1, sizeof *tensors);
	char(*names)[DLI_DUMP_TE_TENSOR_MAX + 1] = calloc(most ? most : 1, sizeof *names);
	bool dir_ok = (size_t)snprintf(dir, sizeof dir, "%s/iter_%06" PRId64, w->torch_dir,
				       j->iteration) < sizeof dir;
	if (!e || !tensors || !names) {
		if (w->failed++ == 0)
			w->host->log(w->ctx, DLI_LOG_ERROR,
				     "DumpTensors: out of memory writing the dumps of layer '%s', "
				     "iteration %" PRId64 ": they are lost", j->layer, j->iteration);
		goto out;
	}
	for (const struct dli_dump_blob *t = j->blobs; t; t = t->next) {
		bool seen = false;
		for (size_t i = 0; i < n_tensors && !seen; i++)
			seen = !strcmp(tensors[i], t->tensor);
		if (seen)
			continue;
		size_t k = n_tensors++, n = 0, bytes = 0;
		tensors[k] = t->tensor;
		memcpy(names[k], t->te, sizeof t->te);
		for (const struct dli_dump_blob *u = t; u; u = u->next)
			if (!strcmp(u->tensor, t->tensor)) {
				e[n++] = (struct dli_torch_entry){u->key, u->dtype, u->ndim, u->shape,
								  u->data, u->bytes};
				bytes += u->bytes;
			}
		struct torch_file f = {e, n};
		bool path_ok = dir_ok && (size_t)snprintf(path, sizeof path, "%s/%s_%s.pt", dir, j->te,
							  names[k]) < sizeof path;
		file_run(w, j, dir, path_ok ? path : NULL, torch_content, &f, bytes);
	}
out:
	free(e);
	free(tensors);
	free(names);
}

static void job_run(struct dli_dump_writer *w, struct dump_job *j)
{
	char path[4096];

	if (j->torch) {
		job_run_torch(w, j);
		return;
	}
	bool ok = (size_t)snprintf(path, sizeof path, "%s/%s_iter_%06" PRId64 ".safetensors", w->dir,
				   j->safe, j->iteration) < sizeof path;
	file_run(w, j, w->dir, ok ? path : NULL, safetensors_content, NULL, j->bytes);
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
	if (!(w = calloc(1, sizeof(*w))) || !(w->dir = malloc(n)) || !(w->torch_dir = malloc(n))) {
		if (w)
			free(w->dir);
		free(w);
		pthread_mutex_unlock(&writers_mu);
		return NULL;
	}
	snprintf(w->dir, n, "%s/" DUMP_DIR "/rank_%d", log_dir, rank);
	snprintf(w->torch_dir, n, "%s/" TORCH_DIR "/rank_%d", log_dir, rank);
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
	free(w->torch_dir);
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
	/* TransformerEngine's rule makes `a.b` and `a_b` one file name: the later layer's is altered,
	 * so that neither overwrites the other's files. */
	dli_dump_te_name(name, l->te, DLI_DUMP_TE_LAYER_MAX, 0);
	for (const struct dli_dump_layer *o = w->layers; o; o = o->next)
		if (!strcmp(o->te, l->te)) {
			dli_dump_te_name(name, l->te, DLI_DUMP_TE_LAYER_MAX, 1);
			break;
		}
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

/* Queues `blobs` (`bytes` of copies, all of one format) as a job of layer l; the caller holds mu. */
static void queue_job(struct dli_dump_layer *l, int64_t iteration, struct dli_dump_blob *blobs,
		      size_t bytes, bool torch)
{
	struct dli_dump_writer *w = l->writer;
	struct dump_job *j = calloc(1, sizeof(*j));
	char *layer = strdup(l->name);

	if (!j || !layer) {
		free(j);
		free(layer);
		w->host->log(w->ctx, DLI_LOG_ERROR,
			     "DumpTensors: out of memory queueing the dump of layer '%s', iteration "
			     "%" PRId64 ": it is lost", l->name, iteration);
		blobs_free(blobs);
		w->held -= bytes;
		pthread_cond_broadcast(&w->space);
		return;
	}
	j->layer = layer;
	memcpy(j->safe, l->safe, sizeof j->safe);
	memcpy(j->te, l->te, sizeof j->te);
	j->iteration = iteration;
	j->blobs = blobs;
	j->bytes = bytes;
	j->torch = torch;
	writer_queue(w, j);
}

/* The caller holds mu. */
static void layer_flush_locked(struct dli_dump_layer *l, int64_t iteration)
{
	struct dli_dump_blob *lists[2] = {NULL, NULL}, **tails[2] = {&lists[0], &lists[1]};
	size_t bytes[2] = {0, 0};

	memset(l->calls, 0, sizeof l->calls);
	memset(l->pq_calls, 0, sizeof l->pq_calls);
	/* One job a format: the layer's .safetensors file, its torch files. */
	for (struct dli_dump_blob *t = l->head, *next; t; t = next) {
		next = t->next;
		t->next = NULL;
		*tails[t->torch] = t;
		tails[t->torch] = &t->next;
		bytes[t->torch] += t->bytes;
	}
	l->head = NULL;
	l->tail = &l->head;
	for (int f = 0; f < 2; f++)
		if (lists[f])
			queue_job(l, iteration, lists[f], bytes[f], f == 1);
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
	for (struct dli_dump_te_tensor *e = l->te_tensors, *next; e; e = next) {
		next = e->next;
		free(e->tensor);
		free(e);
	}
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

/* Whether the file already has `key` (w->mu held): the layer's .safetensors file, or with `torch`
 * the torch file of `tensor`. Safetensors keys are made from host tensor names, which may
 * themselves look like a made key ("x.1" is also the second call of "x"): one key twice would make
 * a header that safetensors refuses, and the whole file unreadable. */
static bool dump_has_key(const struct dli_dump_layer *l, const char *tensor, const char *key,
			 bool torch)
{
	for (const struct dli_dump_blob *b = l->head; b; b = b->next)
		if (b->torch == torch && !strcmp(b->key, key) &&
		    (!torch || !strcmp(b->tensor, tensor)))
			return true;
	return false;
}

/* The name of `tensor` in the layer's torch file names (w->mu held): the one given at its first
 * dump, else TransformerEngine's rule, altered (dli_dump_te_name's hash) when an earlier tensor of
 * the layer has that name, as `a.b` and `a_b` would overwrite each other's file. -ENOMEM. */
static int te_tensor_name(struct dli_dump_layer *l, const char *tensor, char *out)
{
	struct dli_dump_te_tensor *e;

	for (e = l->te_tensors; e && strcmp(e->tensor, tensor); e = e->next)
		;
	if (!e) {
		if (!(e = calloc(1, sizeof *e)) || !(e->tensor = strdup(tensor))) {
			free(e);
			return -ENOMEM;
		}
		dli_dump_te_name(tensor, e->te, DLI_DUMP_TE_TENSOR_MAX, 0);
		for (const struct dli_dump_te_tensor *o = l->te_tensors; o; o = o->next)
			if (!strcmp(o->te, e->te)) {
				dli_dump_te_name(tensor, e->te, DLI_DUMP_TE_TENSOR_MAX, 1);
				break;
			}
		e->next = l->te_tensors;
		l->te_tensors = e;
	}
	memcpy(out, e->te, sizeof e->te);
	return 0;
}

int dli_dump_layer_add(struct dli_dump_layer *l, const char *tensor, const char *key,
		       const char *dtype, int ndim, const int64_t *shape, const void *data, size_t bytes,
		       double scale, bool torch)
{
	struct dli_dump_writer *w = l->writer;
	int r;

	/* A key the file holds is refused before anything waits or copies. The bound: wait while
	 * the writer has something to write (it frees space as it goes); a copy alone larger than
	 * the budget passes when nothing else is held. */
	pthread_mutex_lock(&w->mu);
	if (dump_has_key(l, tensor, key, torch)) {
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
	if (!t || !(t->key = strdup(key)) || !(t->tensor = strdup(tensor)) ||
	    (bytes && !(t->data = malloc(bytes)))) {
		r = -ENOMEM;
		goto give_back;
	}
	if (bytes)
		memcpy(t->data, data, bytes);
	t->dtype = dtype;
	t->ndim = ndim;
	for (int d = 0; d < ndim; d++)
		t->shape[d] = shape[d];
	t->bytes = bytes;
	t->scale = scale;
	t->torch = torch;
	pthread_mutex_lock(&w->mu);
	/* Again where the list is final: a call on another thread may have added the key since. */
	if (dump_has_key(l, tensor, key, torch)) {
		pthread_mutex_unlock(&w->mu);
		r = -EEXIST;
		goto give_back;
	}
	if (torch && (r = te_tensor_name(l, tensor, t->te))) {
		pthread_mutex_unlock(&w->mu);
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
		free(t->tensor);
	}
	free(t);
	pthread_mutex_lock(&w->mu);
	w->held -= bytes;
	pthread_cond_broadcast(&w->space);
	pthread_mutex_unlock(&w->mu);
	return r;
}
