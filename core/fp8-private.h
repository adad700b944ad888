/* Casts and scales behind the host table (core/fp8.c); dli_fp8_cast and dli_block_fake_quant are
 * public (dlinspect.h). */
#ifndef DLI_FP8_CORE_PRIVATE_H
#define DLI_FP8_CORE_PRIVATE_H

#include <dlinspect/tensor.h>

/* The host table's tensor_amax, beside the casts it serves. */
int dli_tensor_amax(const struct dli_tensor *t, float *amax);
/* The host table's block_dynamic_range. */
int dli_tensor_block_range(const struct dli_tensor *t, int64_t block_size, int dims,
			   bool columnwise, double *out);

#endif
