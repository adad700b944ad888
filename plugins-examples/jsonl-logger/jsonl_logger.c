/* jsonl, an example logger to copy: every scalar becomes one JSON object on its own line, e.g.
 *     {"name": "model.layers.0.mlp.fc1_activation_clamped", "iteration": 3, "value": 412}
 * JSON has no NaN or infinity. Those values are written as the strings "NaN", "Infinity" and
 * "-Infinity", which Python's float() and JavaScript's Number() read back. null would lose the
 * difference between NaN and inf, and that difference is the point of a numerics tool. */
#define _GNU_SOURCE /* asprintf */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <dlinspect/plugin.h>

struct jsonl {
	pthread_mutex_t lock; /* features may emit from several threads */
	FILE *fp;
};

enum { P_PATH, P_COUNT };
static const struct dli_param_desc jsonl_params[P_COUNT] = {
	[P_PATH] = {.key = "path", .type = DLI_PARAM_STRING, .default_value = "jsonl/rank-{rank}.jsonl",
		    .doc = "output file, appended to; relative to the log dir; {rank} is replaced"},
};

/* `pattern` with its first {rank} replaced (ranks must not share a file) and, when relative, under
 * the log dir. Returns a malloc'd string, or NULL when out of memory. */
static char *jsonl_path(const char *pattern, const char *log_dir, int rank)
{
	const char *at = strstr(pattern, "{rank}");
	bool relative = pattern[0] != '/';
	char rank_text[16] = "", *out;

	if (at)
		snprintf(rank_text, sizeof rank_text, "%d", rank);
	if (asprintf(&out, "%s%s%.*s%s%s", relative ? log_dir : "", relative ? "/" : "",
		     at ? (int)(at - pattern) : (int)strlen(pattern), pattern, rank_text,
		     at ? at + strlen("{rank}") : "") < 0)
		return NULL;
	return out;
}

/* mkdir -p of the directories above `path`. A directory that already exists is not an error.
 * fopen() reports anything else that is wrong. */
static void jsonl_make_parents(char *path)
{
	for (char *p = path + 1; *p; p++) {
		if (*p != '/')
			continue;
		*p = '\0';
		mkdir(path, 0755);
		*p = '/';
	}
}

static int jsonl_create(const struct dli_logger_create_args *args, void **instance,
			struct dli_error *err)
{
	const char *log_dir = args->log_dir && *args->log_dir ? args->log_dir : ".";
	struct jsonl *self = calloc(1, sizeof(*self));
	char *path = jsonl_path(args->params[P_PATH].u.s, log_dir, args->rank);
	int rc = -ENOMEM;

	if (!self || !path)
		goto fail;
	jsonl_make_parents(path);
	/* Append, so a run resumed from a checkpoint keeps the earlier lines. "e" stops the
	 * descriptor from leaking into programs that the trainer spawns. */
	self->fp = fopen(path, "ae");
	if (!self->fp) {
		rc = -errno;
		snprintf(err->message, sizeof err->message, "cannot open '%s': %s", path,
			 strerror(errno));
		goto fail;
	}
	pthread_mutex_init(&self->lock, NULL);
	free(path);
	*instance = self;
	return 0;
fail:
	free(path);
	free(self);
	return rc;
}

static void jsonl_destroy(void *instance)
{
	struct jsonl *self = instance;

	if (!self)
		return;
	fclose(self->fp);
	pthread_mutex_destroy(&self->lock);
	free(self);
}

/* A JSON string: quotes, backslashes and control characters escaped. Other bytes, UTF-8
 * included, pass through as they are. */
static void jsonl_put_string(FILE *f, const char *s)
{
	fputc('"', f);
	for (; *s; s++) {
		unsigned char ch = (unsigned char)*s;
		if (ch == '"' || ch == '\\')
			fprintf(f, "\\%c", ch);
		else if (ch < 0x20)
			fprintf(f, "\\u%04x", ch);
		else
			fputc(ch, f);
	}
	fputc('"', f);
}

/* Lines wait in the stdio buffer until flush() at the step's end, because a step may log
 * thousands of them. */
static int jsonl_log_scalar(void *instance, const char *name, int64_t iteration, double value)
{
	struct jsonl *self = instance;
	int rc = 0;

	pthread_mutex_lock(&self->lock);
	errno = 0; /* a failed stdio call need not set errno: never turn a failure into 0 */
	fputs("{\"name\": ", self->fp);
	jsonl_put_string(self->fp, name);
	fprintf(self->fp, ", \"iteration\": %" PRId64 ", \"value\": ", iteration);
	if (isnan(value))
		fputs("\"NaN\"", self->fp);
	else if (isinf(value))
		fputs(value > 0 ? "\"Infinity\"" : "\"-Infinity\"", self->fp);
	else
		fprintf(self->fp, "%.17g", value); /* 17 digits give back the exact double */
	fputs("}\n", self->fp);
	/* Report a write error, and clear it so that the next line can try again. The core reports
	 * a logger's first error once in the message log. Training goes on. */
	if (ferror(self->fp)) {
		rc = errno ? -errno : -EIO;
		clearerr(self->fp);
	}
	pthread_mutex_unlock(&self->lock);
	return rc;
}

static int jsonl_flush(void *instance)
{
	struct jsonl *self = instance;
	int rc;

	pthread_mutex_lock(&self->lock);
	errno = 0;
	rc = fflush(self->fp) == 0 ? 0 : errno ? -errno : -EIO;
	clearerr(self->fp);
	pthread_mutex_unlock(&self->lock);
	return rc;
}

/* log_text and log_histogram are optional and left out: messages stay in the file logger's
 * message log, and the core skips this logger for histograms. */
static const struct dli_logger_ops jsonl_ops = {
	.size = sizeof(struct dli_logger_ops),
	.create = jsonl_create,
	.destroy = jsonl_destroy,
	.log_scalar = jsonl_log_scalar,
	.flush = jsonl_flush,
};

static const struct dli_logger_desc jsonl_logger = {
	.size = sizeof(struct dli_logger_desc),
	.name = "jsonl", /* the key under `loggers:` */
	.doc = "Scalars as JSON Lines, one {\"name\", \"iteration\", \"value\"} object a line.",
	.params = jsonl_params,
	.n_params = P_COUNT,
	.param_size = DLI_PARAM_SIZE,
	.ops = &jsonl_ops,
};
static const struct dli_logger_desc *const jsonl_loggers[] = {&jsonl_logger};

static const struct dli_module jsonl_module = {
	.size = sizeof(struct dli_module),
	.abi_major = DLI_ABI_MAJOR,
	.abi_minor = DLI_ABI_MINOR,
	.name = "jsonl", /* must match the file name, jsonl.so; no namespace */
	.doc = "Example plugin: a JSON Lines logger.",
	.loggers = jsonl_loggers,
	.n_loggers = 1,
};

DLI_EXPORT const struct dli_module *DLI_MODULE_ENTRY(const struct dli_host *host)
{
	if (!host || host->abi_major != DLI_ABI_MAJOR)
		return NULL;
	return &jsonl_module;
}
