/* The CUDA backend's table: what core/stats.c calls for tensors in device memory. The backend is a
 * shared object (dli_cuda.so, built when nvcc is found) that the core loads through its loader on
 * the first CUDA tensor, so a machine without CUDA runs everything else. */
#ifndef DLI_CUDA_BACKEND_H
#define DLI_CUDA_BACKEND_H

#include <stdint.h>

#include <dlinspect/stats.h>
#include <dlinspect/tensor.h>

#define DLI_CUDA_BACKEND_ENTRY_NAME "dli_cuda_backend_entry"
#define DLI_CUDA_BACKEND_FILE "dli_cuda"

struct dli_cuda_backend {
	uint32_t size;
	/* A device-side accumulator for one struct dli_stats_acc on CUDA device `device`: its record
	 * stays in device memory until read. NULL on failure (message in err, 256 bytes). */
	void *(*acc_create)(int device, char *err);
	void (*acc_destroy)(void *dacc);
	/* Queues one pass over `t` on t->device.stream, merged into dacc on the device; never
	 * synchronizes. Same meaning of fp8 as the host table's stats_add. */
	int (*add)(void *dacc, const struct dli_tensor *t, const struct dli_fp8_spec *fp8);
	int (*add_quantized)(void *dacc, const struct dli_tensor *hp,
			     const struct dli_quantized_tensor *q);
	/* Copies the merged record to the host: the one synchronization, at step end. */
	int (*read)(void *dacc, struct dli_stats_record *out);
	void (*reset)(void *dacc);
};

typedef const struct dli_cuda_backend *(*dli_cuda_backend_entry_fn)(void);

#endif
