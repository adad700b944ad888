/* A test logger: every scalar as a C99 hex float (exact), and every message, into
 * <log_dir>/exact-rank<R>.txt, so the MPI tests compare values bit for bit across ranks and to
 * 1e-12 with a reference (the file logger prints 9 digits). Lines:
 *     S <name> <iteration> <value as %a>
 *     M <level> <text>
 *     H <name> <iteration> <num> <min> <max> <n_buckets> <limit>:<count>... (sum and sum of
 *       squares left out: they come from the merged record, whose merge order may differ) */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#include <dlinspect/plugin.h>

struct dli_exact {
	FILE *f;
	pthread_mutex_t lock;
};

static int dli_exact_create(const struct dli_logger_create_args *args, void **instance,
			    struct dli_error *err)
{
	struct dli_exact *self = calloc(1, sizeof *self);
	char *path = NULL;
	if (!self || asprintf(&path, "%s/exact-rank%d.txt", args->log_dir, args->rank) < 0) {
		free(self);
		return -ENOMEM;
	}
	if (!(self->f = fopen(path, "w"))) {
		int e = errno;
		snprintf(err->message, sizeof err->message, "cannot open %.900s", path);
		free(path);
		free(self);
		return -e;
	}
	free(path);
	pthread_mutex_init(&self->lock, NULL);
	*instance = self;
	return 0;
}

static void dli_exact_destroy(void *instance)
{
	struct dli_exact *self = instance;
	fclose(self->f);
	pthread_mutex_destroy(&self->lock);
	free(self);
}

static int dli_exact_scalar(void *instance, const char *name, int64_t iteration, double value)
{
	struct dli_exact *self = instance;
	pthread_mutex_lock(&self->lock);
	fprintf(self->f, "S %s %" PRId64 " %a\n", name, iteration, value);
	pthread_mutex_unlock(&self->lock);
	return 0;
}

static int dli_exact_text(void *instance, enum dli_log_level level, const char *text)
{
	struct dli_exact *self = instance;
	pthread_mutex_lock(&self->lock);
	fprintf(self->f, "M %d %s\n", (int)level, text);
	fflush(self->f);
	pthread_mutex_unlock(&self->lock);
	return 0;
}

static int dli_exact_histogram(void *instance, const char *name, int64_t iteration,
			       const struct dli_histogram *h)
{
	struct dli_exact *self = instance;
	pthread_mutex_lock(&self->lock);
	fprintf(self->f, "H %s %" PRId64 " %a %a %a %zu", name, iteration, h->num, h->min, h->max,
		h->n_buckets);
	for (size_t i = 0; i < h->n_buckets; i++)
		fprintf(self->f, " %a:%a", h->bucket_limit[i], h->bucket[i]);
	fprintf(self->f, "\n");
	pthread_mutex_unlock(&self->lock);
	return 0;
}

static int dli_exact_flush(void *instance)
{
	struct dli_exact *self = instance;
	pthread_mutex_lock(&self->lock);
	fflush(self->f);
	pthread_mutex_unlock(&self->lock);
	return 0;
}

static const struct dli_logger_ops dli_exact_ops = {
	.size = sizeof(struct dli_logger_ops),
	.create = dli_exact_create,
	.destroy = dli_exact_destroy,
	.log_scalar = dli_exact_scalar,
	.log_text = dli_exact_text,
	.flush = dli_exact_flush,
	.log_histogram = dli_exact_histogram,
};

static const struct dli_logger_desc dli_exact_desc = {
	.size = sizeof(struct dli_logger_desc),
	.name = "exact",
	.doc = "Test logger: scalars as hex floats, one file per rank.",
	.ops = &dli_exact_ops,
	.param_size = DLI_PARAM_SIZE,
};
static const struct dli_logger_desc *const dli_exact_loggers[] = {&dli_exact_desc};

static const struct dli_module dli_exact_module = {
	.size = sizeof(struct dli_module),
	.abi_major = DLI_ABI_MAJOR,
	.abi_minor = DLI_ABI_MINOR,
	.name = "exact_logger",
	.doc = "Test logger for the MPI tests.",
	.loggers = dli_exact_loggers,
	.n_loggers = 1,
};

DLI_EXPORT const struct dli_module *DLI_MODULE_ENTRY(const struct dli_host *host)
{
	if (!host || host->abi_major != DLI_ABI_MAJOR)
		return NULL;
	return &dli_exact_module;
}
