/* dlinspect-train's device mirror: on the CUDA path, the tensors handed to inspect_tensor are
 * copied to device buffers first, so dlinspect's statistics run in its CUDA kernels (and stay on
 * the device until dli_step). */
#ifndef DLT_MIRROR_CUDA_H
#define DLT_MIRROR_CUDA_H

#include <stddef.h>

#include <dlinspect/tensor.h>

struct dlt_mirror;

/* A mirror on the current CUDA device with a stream of its own. 0 or a negative errno (-ENODEV
 * without a device), with the reason in msg. Free with dlt_mirror_destroy (accepts NULL). */
int dlt_mirror_create(struct dlt_mirror **out, char *msg, size_t msg_size);
void dlt_mirror_destroy(struct dlt_mirror *m);

/* The struct dlt_run mirror callback (linear.h): copies x (f32, contiguous) and, when q is
 * non-NULL, its FP8 codes and scale_inv into the slot's device buffers (grown when needed), and
 * points the descriptors there. The copies are queued on the mirror's stream before the
 * statistics dlinspect queues on the same stream, so neither waits for the GPU. */
int dlt_mirror_tensor(void *state, const void *slot, struct dli_tensor *x,
		      struct dli_quantized_tensor *q);

#endif
