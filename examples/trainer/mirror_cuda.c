/* dlinspect-train's device mirror (mirror_cuda.h): per (layer, tensor) slot, device buffers for the
 * tensor, its FP8 codes and its scale_inv, refilled each time the tensor is inspected. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>

#include "../../kernels/cuda/no-gpu.h"
#include "mirror_cuda.h"

struct dlt_mirror_slot {
	const void *key;
	void *x, *codes;
	size_t x_bytes, codes_bytes;
	float *scale_inv;
};

struct dlt_mirror {
	int device;
	cudaStream_t stream;
	struct dlt_mirror_slot *slots;
	size_t n, cap;
};

int dlt_mirror_create(struct dlt_mirror **out, char *msg, size_t msg_size)
{
	int device = 0, count = 0;
	cudaError_t e = cudaGetDeviceCount(&count);
	if (e != cudaSuccess || count == 0) {
		dli_cuda_describe(msg, msg_size, "cudaGetDeviceCount", e);
		return -ENODEV;
	}
	struct dlt_mirror *m = calloc(1, sizeof *m);
	if (!m)
		return -ENOMEM;
	if ((e = cudaGetDevice(&device)) != cudaSuccess ||
	    (e = cudaStreamCreateWithFlags(&m->stream, cudaStreamNonBlocking)) != cudaSuccess) {
		snprintf(msg, msg_size, "CUDA stream: %s", cudaGetErrorString(e));
		free(m);
		return -ENODEV;
	}
	m->device = device;
	*out = m;
	return 0;
}

void dlt_mirror_destroy(struct dlt_mirror *m)
{
	if (!m)
		return;
	cudaStreamSynchronize(m->stream);
	for (size_t i = 0; i < m->n; i++) {
		cudaFree(m->slots[i].x);
		cudaFree(m->slots[i].codes);
		cudaFree(m->slots[i].scale_inv);
	}
	cudaStreamDestroy(m->stream);
	free(m->slots);
	free(m);
}

static struct dlt_mirror_slot *slot_for(struct dlt_mirror *m, const void *key)
{
	for (size_t i = 0; i < m->n; i++)
		if (m->slots[i].key == key)
			return &m->slots[i];
	if (m->n == m->cap) {
		size_t cap = m->cap ? 2 * m->cap : 64;
		struct dlt_mirror_slot *s = realloc(m->slots, cap * sizeof *s);
		if (!s)
			return NULL;
		m->slots = s;
		m->cap = cap;
	}
	struct dlt_mirror_slot *s = &m->slots[m->n++];
	memset(s, 0, sizeof *s);
	s->key = key;
	return s;
}

/* Makes *buf at least `bytes` long. Growing frees the old buffer, which cudaFree does only after
 * the work queued on it: rare (a slot's sizes do not change between steps). */
static int ensure(void **buf, size_t *have, size_t bytes)
{
	if (*have >= bytes)
		return 0;
	cudaFree(*buf);
	*buf = NULL;
	*have = 0;
	if (cudaMalloc(buf, bytes) != cudaSuccess)
		return -ENOMEM;
	*have = bytes;
	return 0;
}

int dlt_mirror_tensor(void *state, const void *key, struct dli_tensor *x,
		      struct dli_quantized_tensor *q)
{
	struct dlt_mirror *m = state;
	struct dlt_mirror_slot *s = slot_for(m, key);
	if (!s || x->dtype != DLI_DTYPE_F32 || !x->contiguous)
		return -EINVAL;
	size_t n = (size_t)dli_tensor_numel(x);
	int r = ensure(&s->x, &s->x_bytes, n * sizeof(float) + 1);
	if (!r && q)
		r = ensure(&s->codes, &s->codes_bytes, n + 1);
	if (!r && q && !s->scale_inv && cudaMalloc((void **)&s->scale_inv, sizeof(float)) != cudaSuccess)
		r = -ENOMEM;
	if (r)
		return r;
	if (cudaMemcpyAsync(s->x, x->data, n * sizeof(float), cudaMemcpyHostToDevice, m->stream) !=
	    cudaSuccess)
		return -EIO;
	struct dli_device dev = {.type = DLI_DEVICE_CUDA, .index = m->device, .stream = m->stream};
	if (q) {
		if (cudaMemcpyAsync(s->codes, q->data.data, n, cudaMemcpyHostToDevice, m->stream) !=
			    cudaSuccess ||
		    cudaMemcpyAsync(s->scale_inv, q->scale_inv, sizeof(float), cudaMemcpyHostToDevice,
				    m->stream) != cudaSuccess)
			return -EIO;
		q->data.data = s->codes;
		q->data.device = dev;
		q->scale_inv = s->scale_inv;
	}
	x->data = s->x;
	x->device = dev;
	return 0;
}
