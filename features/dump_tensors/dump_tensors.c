/* DumpTensors (TransformerEngine's feature): at the scheduled steps, writes the selected tensors of
 * each selected layer (high precision, FP8 as the host quantized it, with scale_inv) as
 * TransformerEngine does, one torch.save file per layer, tensor and iteration under
 * {log_dir}/tensor_dumps/rank_{r}/iter_{i}/ (format: torch, the default), or as one .safetensors
 * file per layer and iteration under {log_dir}/nvdlfw_inspect_tensor_dumps/rank_{r}/ (format:
 * safetensors). The calling thread only copies; dump_writer.c writes. Keys and layout:
 * docs/logging.md. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <dlinspect/plugin.h>

#include "dump_writer.h"
#include "feature-util.h"

struct dli_dump {
	const struct dli_host *host;
	struct dli_context *ctx;
	struct dli_schedule schedule;
	uint64_t tensors;
	bool hp, quantized, internals;
	bool torch; /* format: torch */
	struct dli_dump_writer *writer;
};

static const char *safetensors_dtype(enum dli_dtype d)
{
	switch (d) {
	case DLI_DTYPE_F32: return "F32";
	case DLI_DTYPE_F16: return "F16";
	case DLI_DTYPE_BF16: return "BF16";
	case DLI_DTYPE_F8E4M3: return "F8_E4M3";
	case DLI_DTYPE_F8E5M2: return "F8_E5M2";
	case DLI_DTYPE_F64: return "F64";
	case DLI_DTYPE_I8: return "I8";
	case DLI_DTYPE_U8: return "U8";
	case DLI_DTYPE_I32: return "I32";
	case DLI_DTYPE_I64: return "I64";
	default: return NULL;
	}
}

static int dli_dump_create(const struct dli_feature_create_args *args, void **instance,
			   struct dli_error *err)
{
	const struct dli_host *host = args->host;
	struct dli_dump *self;

	if (!DLI_HAS_MEMBER(host, struct dli_host, make_dirs) || !host->make_dirs) {
		snprintf(err->message, sizeof(err->message),
			 "this dlinspect is too old for DumpTensors (no make_dirs in its host table)");
		return -ENOTSUP;
	}
	if (!(self = calloc(1, sizeof(*self))))
		return -ENOMEM;
	self->host = host;
	self->ctx = args->ctx;
	self->tensors = args->tensors;
	self->hp = args->params[0].u.b;
	self->quantized = args->params[1].u.b;
	self->internals = args->params[2].u.b;
	double mib = args->params[3].u.f;
	self->torch = !strcmp(args->params[4].u.s, "torch");
	if (dli_feature_schedule_copy(&self->schedule, args->schedule) ||
	    !(self->writer = dli_dump_writer_get(args->ctx, host, (size_t)(mib * 1048576.0)))) {
		free((void *)self->schedule.ranges);
		free(self);
		return -ENOMEM;
	}
	/* TransformerEngine says so at every call; once, here, is enough. */
	if (!self->hp && !self->quantized && !self->internals)
		host->log(args->ctx, DLI_LOG_WARNING,
			  "DumpTensors at %s (section '%s'): high_precision_tensor, quantized_tensor and "
			  "dump_quantized_internals are all false: nothing will be dumped",
			  args->where, args->section);
	*instance = self;
	return 0;
}

static void dli_dump_destroy(void *instance)
{
	struct dli_dump *self = instance;

	if (!self)
		return;
	dli_dump_writer_put(self->writer);
	free((void *)self->schedule.ranges);
	free(self);
}

static int dli_dump_layer_attach(void *instance, const char *layer_name, void **layer_state)
{
	struct dli_dump *self = instance;
	struct dli_dump_layer *l;
	int r = dli_dump_layer_get(self->writer, layer_name, &l);

	if (!r)
		*layer_state = l;
	return r;
}

static void dli_dump_layer_detach(void *instance, void *layer_state)
{
	struct dli_dump *self = instance;

	dli_dump_layer_put(layer_state, self->host->iteration(self->ctx));
}

static bool dli_dump_inspect_tensor_enabled(const struct dli_feature_call *c, int tensor,
					    int64_t iteration, int64_t *next)
{
	const struct dli_dump *self = c->instance;
	bool active = self->host->schedule_query(&self->schedule, iteration, next);

	return active && (self->hp || self->quantized || self->internals);
}

static bool dli_dump_postquantize_enabled(const struct dli_feature_call *c, enum dli_gemm gemm,
					  int tensor, int64_t iteration, int64_t *next)
{
	const struct dli_dump *self = c->instance;
	bool active = self->host->schedule_query(&self->schedule, iteration, next);

	return active && self->quantized;
}

/* Says, once per layer, tensor and reason, that `key` was not dumped and why. */
static void refuse(const struct dli_feature_call *c, int tensor, enum dli_dump_warn reason,
		   const char *key, size_t bytes, const char *why)
{
	const struct dli_dump *self = c->instance;
	const char *tname = self->host->tensor_name(c->ctx, tensor);

	/* Every refused call's dli_last_error says why; the message log once per reason. */
	dli_feature_fail(self->host, c->ctx, 0, "DumpTensors: '%s' (%zu bytes) was not dumped: %s",
			 key, bytes, why);
	if (dli_dump_layer_warn_once(c->layer_state, reason, tensor))
		self->host->log(c->ctx, DLI_LOG_ERROR,
				"DumpTensors: layer '%s', tensor '%s', iteration %lld: '%s' (%zu bytes) "
				"was not dumped: %s (said once per layer, tensor and reason)",
				c->layer_name, tname ? tname : "?",
				(long long)self->host->iteration(c->ctx), key, bytes, why);
}

/* The longest tensor name dumped: with ".{k}" it fits the callers' base[300], so that a key is never
 * cut. */
#define DUMP_TENSOR_NAME_MAX 255

/* Copies one tensor into the layer's file under `key`; `scale` is the FP8 scale or NaN. A tensor it
 * cannot take is said once per layer, tensor and reason, at error level; its error is returned. */
static int stage(const struct dli_feature_call *c, int tensor, const char *key,
		 const struct dli_tensor *t, double scale)
{
	const struct dli_dump *self = c->instance;
	struct dli_dump_layer *l = c->layer_state;
	const char *dtype = safetensors_dtype(t->dtype);
	const char *why = NULL;
	int r = 0;
	enum dli_dump_warn reason = DLI_DUMP_WARN_INVALID;
	size_t bytes = 0;

	/* The size first, so that every message says how much was not dumped. */
	bool shape_ok = t->ndim >= 0 && t->ndim <= DLI_TENSOR_MAX_DIMS && dtype;
	int64_t n = 1;
	for (int d = 0; shape_ok && d < t->ndim; d++) {
		if (t->shape[d] < 0 || (t->shape[d] && n > INT64_MAX / t->shape[d]))
			shape_ok = false;
		else
			n *= t->shape[d];
	}
	if (shape_ok && (uint64_t)n <= SIZE_MAX / dli_dtype_size(t->dtype))
		bytes = (size_t)n * dli_dtype_size(t->dtype);
	else
		shape_ok = false;

	if (t->device.type != DLI_DEVICE_CPU) {
		/* The host table has no device-to-host copy: a CUDA host dumps from host memory. */
		why = "it is in device memory, and this dlinspect copies only host memory: pass a host "
		      "copy";
		r = -ENOTSUP;
		reason = DLI_DUMP_WARN_DEVICE;
	} else if (!dtype) {
		why = "its dtype has no safetensors equivalent";
		r = -EINVAL;
	} else if (!shape_ok) {
		why = "its shape is invalid";
		r = -EINVAL;
	} else if (!t->contiguous || (!t->data && bytes)) {
		why = "it is not a contiguous tensor with data";
		r = -EINVAL;
	} else if (strlen(self->host->tensor_name(c->ctx, tensor)) > DUMP_TENSOR_NAME_MAX) {
		/* The callers' key buffers would cut its keys (and a torch key is what follows the
		 * name in them). */
		why = "its tensor name is longer than DumpTensors' keys take (255 bytes)";
		r = -ENAMETOOLONG;
	} else {
		/* A torch file is the tensor's own: its dict's keys leave out the tensor's name
		 * (every key starts with it and a '.'). */
		const char *tname = self->host->tensor_name(c->ctx, tensor);
		const char *k = self->torch ? key + strlen(tname) + 1 : key;
		r = dli_dump_layer_add(l, tname, k, dtype, t->ndim, t->shape, t->data, bytes, scale,
				       self->torch);
		reason = DLI_DUMP_WARN_FULL;
		if (r == -ENOBUFS)
			why = "the step's copies fill queue_mib (raise it)";
		else if (r == -EEXIST) {
			why = "another tensor's call took that key in this file (a tensor named like "
			      "'{t}.{k}' or '{t}.{gemm}' clashes with the keys of tensor '{t}'): "
			      "rename the tensor";
			reason = DLI_DUMP_WARN_INVALID;
		} else if (r)
			why = strerror(-r);
	}
	if (why)
		refuse(c, tensor, reason, key, bytes, why);
	return r;
}

/* A quantized tensor's codes as `key` and its scale_inv as `key`.scale_inv. */
static int stage_quantized(const struct dli_feature_call *c, int tensor, const char *key,
			   const struct dli_quantized_tensor *q)
{
	char k[600];
	double scale = NAN;

	if (q->scale_inv_count < 0 || (q->scale_inv_count && !q->scale_inv)) {
		refuse(c, tensor, DLI_DUMP_WARN_INVALID, key, 0,
		       "its scale_inv is missing (NULL, or a negative count)");
		return -EINVAL;
	}
	if (q->data.device.type == DLI_DEVICE_CPU && q->scale_inv_count == 1)
		scale = 1.0 / (double)q->scale_inv[0];
	int r = stage(c, tensor, key, &q->data, scale);
	if (r)
		return r;
	struct dli_tensor s = dli_tensor_make((void *)q->scale_inv, DLI_DTYPE_F32, 1,
					      &q->scale_inv_count);
	s.device = q->data.device;
	snprintf(k, sizeof k, "%s.scale_inv", key);
	return stage(c, tensor, k, &s, NAN);
}

static void warn_missing(const struct dli_feature_call *c, int tensor, const char *what)
{
	const struct dli_dump *self = c->instance;
	const char *tname = self->host->tensor_name(c->ctx, tensor);

	if (dli_dump_layer_warn_once(c->layer_state, DLI_DUMP_WARN_MISSING, tensor))
		self->host->log(c->ctx, DLI_LOG_WARNING,
				"DumpTensors: layer '%s', tensor '%s': %s is true but the host passed "
				"no such tensor; skipped (said once per layer and tensor)",
				c->layer_name, tname ? tname : "?", what);
}

/* The label of a call: the tensor's name, with ".{k}" for the k-th later call of the step (the
 * microbatches of gradient accumulation). */
static void label(char *buf, size_t size, const char *tname, int k)
{
	if (k > 0)
		snprintf(buf, size, "%s.%d", tname, k);
	else
		snprintf(buf, size, "%s", tname);
}

static int dli_dump_inspect_tensor(const struct dli_feature_call *c, int tensor,
				   const struct dli_tensor *hp,
				   const struct dli_quantized_tensor *rowwise,
				   const struct dli_quantized_tensor *colwise)
{
	const struct dli_dump *self = c->instance;
	int64_t it = self->host->iteration(c->ctx);
	const char *tname = self->host->tensor_name(c->ctx, tensor);
	char base[300], key[400];
	int first = 0, r;

	if (tensor < 0 || tensor > 63 || !(self->tensors >> tensor & 1) || !tname ||
	    !self->host->schedule_active(&self->schedule, it))
		return 0;
	int k = dli_dump_layer_next_call(c->layer_state, tensor, -1, it);
	if (k < 0)
		return 0; /* the weight, already dumped in this step */
	label(base, sizeof base, tname, k);
	if (self->hp) {
		snprintf(key, sizeof key, "%s.high_precision", base);
		if (!hp)
			warn_missing(c, tensor, "high_precision_tensor");
		else if ((r = stage(c, tensor, key, hp, NAN)) && !first)
			first = r;
	}
	const struct dli_quantized_tensor *q = rowwise ? rowwise : colwise;
	if (self->quantized) {
		snprintf(key, sizeof key, "%s.quantized", base);
		if (!q)
			warn_missing(c, tensor, "quantized_tensor");
		else if ((r = stage_quantized(c, tensor, key, q)) && !first)
			first = r;
	}
	/* Both directions, as the host made them (TransformerEngine's data / transpose). */
	if (self->internals) {
		if (!rowwise && !colwise)
			warn_missing(c, tensor, "dump_quantized_internals");
		snprintf(key, sizeof key, "%s.rowwise_data", base);
		if (rowwise && (r = stage_quantized(c, tensor, key, rowwise)) && !first)
			first = r;
		snprintf(key, sizeof key, "%s.columnwise_data", base);
		if (colwise && (r = stage_quantized(c, tensor, key, colwise)) && !first)
			first = r;
	}
	return first;
}

static int dli_dump_inspect_postquantize(const struct dli_feature_call *c, enum dli_gemm gemm,
					 int tensor, const struct dli_quantized_tensor *q)
{
	const struct dli_dump *self = c->instance;
	int64_t it = self->host->iteration(c->ctx);
	const char *tname = self->host->tensor_name(c->ctx, tensor);
	const char *gname = self->host->gemm_name(gemm);
	char base[300], key[400];

	if (tensor < 0 || tensor > 63 || !(self->tensors >> tensor & 1) || !tname || !gname ||
	    !self->quantized || !self->host->schedule_active(&self->schedule, it))
		return 0;
	if (!q) {
		warn_missing(c, tensor, "quantized_tensor");
		return 0;
	}
	label(base, sizeof base, tname, dli_dump_layer_next_call(c->layer_state, tensor, gemm, it));
	snprintf(key, sizeof key, "%s.%s.quantized", base, gname);
	return stage_quantized(c, tensor, key, q);
}

static void dli_dump_step_end(const struct dli_feature_call *c, int64_t iteration)
{
	/* The first instance of the layer to get here queues the file; the others find it empty. */
	dli_dump_layer_flush(c->layer_state, iteration);
}

static const struct dli_feature_ops dli_dump_ops = {
	.size = sizeof(struct dli_feature_ops),
	.create = dli_dump_create,
	.destroy = dli_dump_destroy,
	.layer_attach = dli_dump_layer_attach,
	.layer_detach = dli_dump_layer_detach,
	.inspect_tensor_enabled = dli_dump_inspect_tensor_enabled,
	.inspect_tensor = dli_dump_inspect_tensor,
	.inspect_tensor_postquantize_enabled = dli_dump_postquantize_enabled,
	.inspect_tensor_postquantize = dli_dump_inspect_postquantize,
	.step_end = dli_dump_step_end,
};

static const char *const dli_dump_formats[] = {"torch", "safetensors", NULL};

static const struct dli_param_desc dli_dump_params[] = {
	{.key = "high_precision_tensor", .type = DLI_PARAM_BOOL, .default_value = "false",
	 .doc = "dump the high-precision tensor (before quantization): key high_precision "
		"({tensor}.high_precision in a .safetensors file)"},
	{.key = "quantized_tensor", .type = DLI_PARAM_BOOL, .default_value = "false",
	 .doc = "dump the host's FP8 tensor (rowwise, else columnwise) as quantized "
		"(F8_E4M3/F8_E5M2) with quantized.scale_inv ({tensor}. before each in a .safetensors "
		"file)"},
	{.key = "dump_quantized_internals", .type = DLI_PARAM_BOOL, .default_value = "false",
	 .doc = "also dump both FP8 directions as rowwise_data / columnwise_data, each with its "
		".scale_inv ({tensor}. before each in a .safetensors file)"},
	{.key = "queue_mib", .type = DLI_PARAM_FLOAT, .default_value = "1024",
	 .doc = "MiB of copies held for the writer thread (a context's largest value counts); when "
		"full, the step waits for the writer",
	 .bounded = true, .min = 1.0 / 1024, .max = 1 << 20},
	{.key = "format", .type = DLI_PARAM_STRING, .default_value = "torch",
	 .doc = "torch: TransformerEngine's files, one torch.save dict per layer, tensor and "
		"iteration under {log_dir}/tensor_dumps/rank_{rank}/iter_{iteration:06d}/; "
		"safetensors: one .safetensors file per layer and iteration under "
		"{log_dir}/nvdlfw_inspect_tensor_dumps/rank_{rank}/ (keys: docs/logging.md)",
	 .choices = dli_dump_formats},
};

static const struct dli_feature_desc dli_dump_feature = {
	.size = sizeof(struct dli_feature_desc),
	.name = "DumpTensors",
	.doc = "Writes the selected tensors at the scheduled steps, as TransformerEngine does (one "
	       "torch.save file per layer, tensor and iteration under {log_dir}/tensor_dumps/) or "
	       "as .safetensors files (format: safetensors).",
	.flags = DLI_FEATURE_TENSORS | DLI_FEATURE_SCHEDULED,
	.params = dli_dump_params,
	.n_params = sizeof(dli_dump_params) / sizeof(dli_dump_params[0]),
	.param_size = DLI_PARAM_SIZE,
	.ops = &dli_dump_ops,
};
static const struct dli_feature_desc *const dli_dump_features[] = {&dli_dump_feature};

DLI_MODULE_NAMESPACE("transformer_engine");

static const struct dli_module dli_dump_module = {
	.size = sizeof(struct dli_module),
	.abi_major = DLI_ABI_MAJOR,
	.abi_minor = DLI_ABI_MINOR,
	.name = "dump_tensors",
	.ns = "transformer_engine",
	.doc = "TransformerEngine's DumpTensors: selected tensors to torch.save or .safetensors files.",
	.features = dli_dump_features,
	.n_features = 1,
};

DLI_EXPORT const struct dli_module *DLI_MODULE_ENTRY(const struct dli_host *host)
{
	if (!host || host->abi_major != DLI_ABI_MAJOR)
		return NULL;
	return &dli_dump_module;
}
