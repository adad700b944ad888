/* A stand-in for the CUDA backend (dli_cuda.so) that runs on any machine: "device" tensors are
 * host memory (f32 only), each device accumulator a record of its own. It lets the tests drive
 * core/stats.c's device path (lazy load, one accumulator per device, merge at read, reset)
 * without a GPU. Setting FAKE_CUDA_REFUSE_DEVICE=n makes acc_create fail for device n. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda/backend.h"

struct fake_acc {
	int device;
	struct dli_stats_record r;
};

static void fake_init(struct dli_stats_record *r)
{
	memset(r, 0, sizeof(*r));
	r->min = r->min_nonzero_abs = r->scale_inv_min = INFINITY;
	r->max = -INFINITY;
}

static void *fake_acc_create(int device, char *err)
{
	const char *refuse = getenv("FAKE_CUDA_REFUSE_DEVICE");
	if (refuse && atoi(refuse) == device) {
		snprintf(err, 256, "fake: device %d refused", device);
		return NULL;
	}
	struct fake_acc *a = calloc(1, sizeof(*a));
	if (a) {
		a->device = device;
		fake_init(&a->r);
	}
	return a;
}

static void fake_acc_destroy(void *dacc)
{
	free(dacc);
}

/* Finite f32 data only: enough for the core's bookkeeping to be checked. */
static int fake_add(void *dacc, const struct dli_tensor *t, const struct dli_fp8_spec *fp8)
{
	struct fake_acc *a = dacc;
	if (t->dtype != DLI_DTYPE_F32 || t->device.index != a->device || fp8)
		return -22; /* -EINVAL */
	int64_t n = dli_tensor_numel(t);
	const float *x = t->data;
	struct dli_stats_record *r = &a->r;
	for (int64_t i = 0; i < n; i++) {
		double v = x[i], d = v - r->mean;
		/* The non-finite counts, as the real backend keeps them (DetectNonFinite reads them);
		 * a NaN joins no other term. */
		r->inf_count += isinf(v) != 0;
		if (isnan(v)) {
			r->count++;
			r->nan_count++;
			continue;
		}
		r->count++;
		r->mean += d / (double)r->count;
		r->m2 += d * (v - r->mean);
		r->min = v < r->min ? v : r->min;
		r->max = v > r->max ? v : r->max;
		r->amax = fabs(v) > r->amax ? fabs(v) : r->amax;
		r->sum += v;
		r->sum_abs += fabs(v);
		r->sum_sq += v * v;
		r->zero_count += v == 0;
		if (v != 0 && fabs(v) < r->min_nonzero_abs)
			r->min_nonzero_abs = fabs(v);
	}
	return 0;
}

static int fake_add_quantized(void *dacc, const struct dli_tensor *hp,
			      const struct dli_quantized_tensor *q)
{
	return -95; /* -ENOTSUP */
}

static int fake_read(void *dacc, struct dli_stats_record *out, size_t size)
{
	const struct dli_stats_record *r = &((struct fake_acc *)dacc)->r;
	memcpy(out, r, size < sizeof *r ? size : sizeof *r);
	return 0;
}

static void fake_reset(void *dacc)
{
	fake_init(&((struct fake_acc *)dacc)->r);
}

static const struct dli_backend_ops fake_ops = {
	.size = sizeof(struct dli_backend_ops),
	.acc_create = fake_acc_create,
	.acc_destroy = fake_acc_destroy,
	.add = fake_add,
	.add_quantized = fake_add_quantized,
	.read = fake_read,
	.reset = fake_reset,
};

static const struct dli_backend_desc fake_backend = {
	.size = sizeof(struct dli_backend_desc),
	.name = "cuda",
	.device = DLI_DEVICE_CUDA,
	.doc = "a stand-in for the CUDA backend: \"device\" tensors in host memory",
	.ops = &fake_ops,
};

static const struct dli_backend_desc *const backends[] = {&fake_backend};

static const struct dli_module module = {
	.size = sizeof(struct dli_module),
	.abi_major = DLI_ABI_MAJOR,
	.abi_minor = DLI_ABI_MINOR,
	.name = DLI_CUDA_BACKEND_FILE,
	.ns = DLI_BACKEND_NAMESPACE,
	.backends = backends,
	.n_backends = 1,
};

DLI_MODULE_NAMESPACE(DLI_BACKEND_NAMESPACE);

DLI_EXPORT const struct dli_module *DLI_MODULE_ENTRY(const struct dli_host *host)
{
	(void)host;
	return &module;
}
