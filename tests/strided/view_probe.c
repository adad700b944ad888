/* Test fixture module "view_probe": a feature that is not view-capable (no DLI_FEATURE_STRIDED)
 * and reads tensor data itself, as DumpTensors or a third-party feature does. For every tensor it
 * gets (inspect_tensor, and the log_tensor_stats call) it appends to {log_dir}/view_probe.bin one
 * record: int32 contiguous flag, int32 ndim, int64 shape[ndim], int64 byte count, the bytes; so
 * the test checks what such a feature saw of a strided view. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

#include <dlinspect/plugin.h>

DLI_MODULE_NAMESPACE("view_probe");

struct probe {
	const struct dli_host *host;
	char path[4096];
};

static int probe_create(const struct dli_feature_create_args *a, void **out, struct dli_error *err)
{
	struct probe *self = calloc(1, sizeof *self);
	(void)err;
	if (!self)
		return -ENOMEM;
	self->host = a->host;
	snprintf(self->path, sizeof self->path, "%s/view_probe.bin", a->host->log_dir(a->ctx));
	*out = self;
	return 0;
}

static void probe_destroy(void *instance)
{
	free(instance);
}

static int record(const struct probe *self, const struct dli_tensor *t)
{
	FILE *f = fopen(self->path, "ab");
	if (!f)
		return -errno;
	int32_t contiguous = t->contiguous, ndim = t->ndim;
	int64_t bytes = dli_tensor_numel(t) * (int64_t)dli_dtype_size(t->dtype);
	fwrite(&contiguous, sizeof contiguous, 1, f);
	fwrite(&ndim, sizeof ndim, 1, f);
	fwrite(t->shape, sizeof t->shape[0], (size_t)ndim, f);
	fwrite(&bytes, sizeof bytes, 1, f);
	/* Only what a contiguous tensor promises is read: a view's data read as dense would be wrong. */
	if (t->contiguous && bytes)
		fwrite(t->data, 1, (size_t)bytes, f);
	return fclose(f) ? -EIO : 0;
}

static int probe_inspect(const struct dli_feature_call *c, int tensor, const struct dli_tensor *hp,
			 const struct dli_quantized_tensor *rowwise,
			 const struct dli_quantized_tensor *colwise)
{
	(void)tensor, (void)rowwise, (void)colwise;
	return hp ? record(c->instance, hp) : -EINVAL;
}

static int probe_call(const struct dli_feature_call *c, const char *name, void *args)
{
	const struct dli_log_tensor_stats_args *a = args;
	(void)name;
	return a && a->tensor ? record(c->instance, a->tensor) : -EINVAL;
}

static const struct dli_feature_ops probe_ops = {
	.size = sizeof(struct dli_feature_ops),
	.create = probe_create,
	.destroy = probe_destroy,
	.inspect_tensor = probe_inspect,
	.call = probe_call,
};

static const char *const probe_calls[] = {DLI_CALL_LOG_TENSOR_STATS, NULL};

static const struct dli_feature_desc probe_feature = {
	.size = sizeof(struct dli_feature_desc),
	.name = "ViewProbe",
	.doc = "test fixture: records the tensors it is given",
	.flags = DLI_FEATURE_GENERIC | DLI_FEATURE_TENSORS,
	.calls = probe_calls,
	.ops = &probe_ops,
	.param_size = DLI_PARAM_SIZE,
};

static const struct dli_feature_desc *const probe_features[] = {&probe_feature};

static const struct dli_module probe_module = {
	.size = sizeof(struct dli_module),
	.abi_major = DLI_ABI_MAJOR,
	.abi_minor = DLI_ABI_MINOR,
	.name = "view_probe",
	.ns = "view_probe",
	.doc = "test fixture for strided views",
	.features = probe_features,
	.n_features = 1,
};

DLI_EXPORT const struct dli_module *DLI_MODULE_ENTRY(const struct dli_host *host)
{
	(void)host;
	return &probe_module;
}
