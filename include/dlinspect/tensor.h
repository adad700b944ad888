/* Tensor descriptors handed to dlinspect by hosts: plain data, never owned by dlinspect. */
#ifndef DLINSPECT_TENSOR_H
#define DLINSPECT_TENSOR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#ifdef __cplusplus
extern "C" {
#endif

enum dli_dtype {
	DLI_DTYPE_F32 = 0,
	DLI_DTYPE_F16,
	DLI_DTYPE_BF16,
	DLI_DTYPE_F8E4M3, /* the "fn" variant: max 448, no infinity */
	DLI_DTYPE_F8E5M2,
	DLI_DTYPE_F64,
	DLI_DTYPE_I8,
	DLI_DTYPE_U8,
	DLI_DTYPE_I32,
	DLI_DTYPE_I64,
	DLI_DTYPE_COUNT
};

enum dli_device_type {
	DLI_DEVICE_CPU = 0,
	DLI_DEVICE_CUDA,
};

struct dli_device {
	enum dli_device_type type;
	int index;    /* CUDA device ordinal; 0 for the CPU */
	void *stream; /* cudaStream_t the data is ordered on; NULL = the default stream */
};

#define DLI_TENSOR_MAX_DIMS 8

/* A dense tensor. dlinspect borrows `data` for the duration of the call it is passed to and never
 * frees it. Element counts are 64-bit: tensors above 2^31 elements are valid, and so are empty ones. */
struct dli_tensor {
	void *data;
	enum dli_dtype dtype;
	struct dli_device device;
	int ndim; /* 0 .. DLI_TENSOR_MAX_DIMS; 0 is a scalar */
	int64_t shape[DLI_TENSOR_MAX_DIMS];
	bool contiguous; /* row-major and dense; features may refuse other layouts */
};

/* An FP8 tensor as the host's quantizer produced it: the FP8 bytes, the inverse scale(s) to
 * dequantize them, and the format. Borrowed like struct dli_tensor. */
struct dli_quantized_tensor {
	struct dli_tensor data; /* dtype DLI_DTYPE_F8E4M3 or DLI_DTYPE_F8E5M2 */
	const float *scale_inv; /* in the same memory space as data */
	int64_t scale_inv_count; /* 1 for per-tensor scaling */
};

/* How the host would quantize a tensor; handed to modify_tensor so a feature can honour the
 * host's format. All pointers are borrowed. */
struct dli_quantizer {
	uint32_t size; /* sizeof(struct dli_quantizer) of the host that filled it */
	enum dli_dtype format; /* DLI_DTYPE_F8E4M3 or DLI_DTYPE_F8E5M2 */
	const float *scale; /* the host's current scale, or NULL */
	const float *amax;  /* the host's current amax, or NULL */
	/* Where a feature that writes FP8 codes into modify_tensor's `out` stores the scale_inv it
	 * used (host memory), or NULL when the host does not take FP8 output. */
	float *scale_inv_out;
};

/* Size of one element in bytes; 0 for an out-of-range dtype. */
static inline size_t dli_dtype_size(enum dli_dtype dtype)
{
	switch (dtype) {
	case DLI_DTYPE_F32: case DLI_DTYPE_I32: return 4;
	case DLI_DTYPE_F16: case DLI_DTYPE_BF16: return 2;
	case DLI_DTYPE_F8E4M3: case DLI_DTYPE_F8E5M2: case DLI_DTYPE_I8: case DLI_DTYPE_U8: return 1;
	case DLI_DTYPE_F64: case DLI_DTYPE_I64: return 8;
	default: return 0;
	}
}

/* A contiguous tensor in host memory: `data` (borrowed by the calls the tensor is passed to), its
 * dtype, and `ndim` sizes copied from `shape` (which may be NULL for ndim 0). A descriptor built
 * field by field starts with contiguous = false, which every statistic refuses: start from this (or
 * dli_tensor_2d) and change device or layout afterwards. An ndim outside 0..DLI_TENSOR_MAX_DIMS
 * gives an ndim of -1, which every call refuses as an invalid shape. */
static inline struct dli_tensor dli_tensor_make(void *data, enum dli_dtype dtype, int ndim,
						const int64_t *shape)
{
	struct dli_tensor t;
	int i;
	memset(&t, 0, sizeof t);
	t.data = data;
	t.dtype = dtype;
	t.device.type = DLI_DEVICE_CPU;
	t.contiguous = true;
	t.ndim = ndim >= 0 && ndim <= DLI_TENSOR_MAX_DIMS ? ndim : -1;
	for (i = 0; i < t.ndim && shape; i++)
		t.shape[i] = shape[i];
	return t;
}

/* A contiguous rows x cols matrix in host memory, row-major (the common case of a Linear's
 * activation, weight and gradients). */
static inline struct dli_tensor dli_tensor_2d(void *data, enum dli_dtype dtype, int64_t rows,
					      int64_t cols)
{
	int64_t shape[2];
	shape[0] = rows;
	shape[1] = cols;
	return dli_tensor_make(data, dtype, 2, shape);
}

/* A column block of a rows x ld row-major matrix in host memory: columns [col, col + cols) of
 * every row, e.g. the K third of a fused [T, 3h] QKV output is (qkv, dtype, T, 3h, h, h). Stores
 * the view's strides (in elements: {ld, 1}) in `strides`, for dli_inspect_tensor_strided; the
 * returned descriptor points at element [0, col] and borrows `base` like dli_tensor_make. */
static inline struct dli_tensor dli_tensor_column_block(void *base, enum dli_dtype dtype,
							int64_t rows, int64_t ld, int64_t col,
							int64_t cols, int64_t strides[2])
{
	int64_t shape[2];
	/* No C-style cast: C++ trainers include this with -Wold-style-cast -Werror. */
#ifdef __cplusplus
	char *first = static_cast<char *>(base) + static_cast<size_t>(col) * dli_dtype_size(dtype);
#else
	char *first = (char *)base + (size_t)col * dli_dtype_size(dtype);
#endif
	shape[0] = rows;
	shape[1] = cols;
	strides[0] = ld;
	strides[1] = 1;
	return dli_tensor_make(first, dtype, 2, shape);
}

/* Number of elements (product of the shape; 1 for ndim 0). */
static inline int64_t dli_tensor_numel(const struct dli_tensor *t)
{
	int64_t n = 1;
	for (int i = 0; i < t->ndim; i++)
		n *= t->shape[i];
	return n;
}

#ifdef __cplusplus
}
#endif

#endif
