/* DumpTensors' writer: one per context, shared by every DumpTensors instance of it (a
 * tensors_struct makes one instance per entry, and they all write one file per layer and
 * iteration). Tensors are copied on the calling thread into a bytes-bounded budget and written by a
 * thread of the writer's own, atomically (temp file, then rename): as .safetensors files, one per
 * layer and iteration, or (format: torch) as TransformerEngine's torch.save files, one per layer,
 * tensor and iteration. */
#ifndef DLI_DUMP_WRITER_H
#define DLI_DUMP_WRITER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <dlinspect/plugin.h>

#include "safe_name.h"

struct dli_dump_writer;

/* One tensor of a file: owned by its list until written. */
struct dli_dump_blob {
	struct dli_dump_blob *next;
	char *key;          /* safetensors: "activation.high_precision"; torch: "high_precision" */
	char *tensor;       /* "activation": a copy of the host's name (a config reload frees the
			     * config's names while the writer may still write the file) */
	const char *dtype;  /* safetensors dtype: "F32", "BF16", "F8_E4M3", ... */
	int ndim;
	int64_t shape[DLI_TENSOR_MAX_DIMS];
	size_t bytes;
	void *data;
	double scale;       /* the FP8 scale (1 / scale_inv) of per-tensor scaled data, else NaN */
	bool torch;         /* for the tensor's torch.save file, `key` a key of its dict */
	char te[DLI_DUMP_TE_TENSOR_MAX + 1]; /* torch: the tensor's name in its file's name */
};

/* A tensor's name in the torch files' names of a layer, given the first time the layer dumps the
 * tensor and kept for the layer's life, so that a clash (a.b, a_b) alters the same one at every
 * iteration. */
struct dli_dump_te_tensor {
	struct dli_dump_te_tensor *next;
	char *tensor;
	char te[DLI_DUMP_TE_TENSOR_MAX + 1];
};

/* Why a tensor was not dumped: each reason is said once per layer and tensor. */
enum dli_dump_warn {
	DLI_DUMP_WARN_DEVICE,  /* device memory */
	DLI_DUMP_WARN_INVALID, /* dtype, shape, layout, scale_inv */
	DLI_DUMP_WARN_FULL,    /* queue_mib full with the step's own copies, or out of memory */
	DLI_DUMP_WARN_MISSING, /* a tensor the config asks for was not passed */
	DLI_DUMP_WARN_COUNT
};

/* A layer's tensors of the current step; shared by the instances attached to the layer. */
struct dli_dump_layer {
	struct dli_dump_layer *next;
	struct dli_dump_writer *writer;
	char *name;
	char safe[DLI_DUMP_SAFE_NAME_MAX + 1];
	char te[DLI_DUMP_TE_LAYER_MAX + 1]; /* the name in torch files' names (dli_dump_te_name) */
	int refs;
	/* Under the writer's lock: */
	struct dli_dump_blob *head, **tail;
	uint16_t calls[64];       /* inspect_tensor calls per tensor id in this step */
	uint16_t pq_calls[64][3]; /* inspect_tensor_postquantize calls per tensor id and gemm */
	int64_t weight_step;      /* the step the weight was last dumped in */
	uint64_t warned[DLI_DUMP_WARN_COUNT]; /* per reason, one bit per tensor id (mod 64) */
	struct dli_dump_te_tensor *te_tensors; /* the torch files' tensor names given so far */
};

/* The writer of `ctx`, made on first use with a budget of `budget` bytes (raised to the largest
 * that any user asks for). Returns NULL when out of memory. Release with dli_dump_writer_put. */
struct dli_dump_writer *dli_dump_writer_get(struct dli_context *ctx, const struct dli_host *host,
					    size_t budget);
/* Drops one reference; the last one writes what is queued, stops the thread and frees it. */
void dli_dump_writer_put(struct dli_dump_writer *w);

/* The shared record of layer `name` (borrowed), made on first use; 0 or -ENOMEM. */
int dli_dump_layer_get(struct dli_dump_writer *w, const char *name, struct dli_dump_layer **out);
/* Drops one reference; the last one queues what the layer still holds (a step that did not end)
 * for `iteration`, and frees it. */
void dli_dump_layer_put(struct dli_dump_layer *l, int64_t iteration);

/* Copies `bytes` of `data` into a new blob appended to the layer, after reserving them in the
 * budget: waits while the writer frees space; -ENOBUFS when the step's own copies fill the budget
 * (nothing queued that could free it); -EEXIST when the file already holds `key` (the layer's
 * .safetensors file, or with `torch` the tensor's torch file); -ENOMEM. `key` and `tensor` are
 * copied. */
int dli_dump_layer_add(struct dli_dump_layer *l, const char *tensor, const char *key,
		       const char *dtype, int ndim, const int64_t *shape, const void *data, size_t bytes,
		       double scale, bool torch);
/* True the first time `reason` is given for this layer and tensor id (say it now). */
bool dli_dump_layer_warn_once(struct dli_dump_layer *l, enum dli_dump_warn reason, int tensor);
/* Takes the next microbatch index of a tensor (gemm < 0: inspect_tensor); for the weight,
 * returns -1 when it was already taken in `iteration` (a weight is dumped once per step). */
int dli_dump_layer_next_call(struct dli_dump_layer *l, int tensor, int gemm, int64_t iteration);
/* Queues the layer's tensors as the file of `iteration` and starts a new step. */
void dli_dump_layer_flush(struct dli_dump_layer *l, int64_t iteration);

#endif
