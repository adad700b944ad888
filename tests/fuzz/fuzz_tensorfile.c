/* Fuzz target: the tensor-file reader of `dlinspect stats` (tools/tensorfile.c), .npy and
 * .safetensors headers, on the exact bytes given. Every tensor it accepts must lie inside them. */
#include <stdlib.h>

#include "fuzz.h"
#include "tensorfile.h"

static void read_as(const uint8_t *data, size_t size, const char *name, int as_dtype)
{
	struct dli_tensorfile tf;
	struct dli_error err;
	if (dli_tensorfile_read(&tf, data, size, name, as_dtype, &err))
		return;
	volatile uint8_t sink = 0;
	for (size_t i = 0; i < tf.n_tensors; i++) {
		const struct dli_tf_tensor *t = &tf.tensors[i];
		const uint8_t *p = t->data;
		if (t->nbytes > size || p < data || (size_t)(p - data) > size - t->nbytes)
			abort(); /* a view outside the file */
		if (t->nbytes) /* ASan checks both ends */
			sink ^= p[0] ^ p[t->nbytes - 1];
		for (int d = 0; d < t->ndim; d++)
			sink ^= (uint8_t)t->shape[d];
		sink ^= (uint8_t)t->name[0] ^ (uint8_t)t->file_dtype[0];
	}
	(void)sink;
	dli_tensorfile_close(&tf);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	/* The format comes from the content; the names only pick the suffix-based branches. */
	static const char *const names[] = {"t", "t.npy", "t.safetensors"};
	read_as(data, size, names[size % 3], -1);
	/* .npy raw elements read as another dtype (bf16 from '<u2', FP8 from '|u1', ...). */
	static const int dtypes[] = {DLI_DTYPE_BF16, DLI_DTYPE_F8E4M3, DLI_DTYPE_F8E5M2, DLI_DTYPE_F32,
				     DLI_DTYPE_F16};
	read_as(data, size, "t", dtypes[size % 5]);
	return 0;
}
