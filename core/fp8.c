/* FP8 casts for hosts and features: the kernels' encode, applied to whole tensors. */
#include <errno.h>

#include <dlinspect/dlinspect.h>

#include "cpu/fp8-private.h"
#include "kernels-private.h"

#define CHUNK 4096

float dli_fp8_current_scale(float amax, enum dli_dtype format, double margin)
{
	return dli_fp8_scale(amax, format, margin);
}

int dli_fp8_cast(const struct dli_tensor *in, struct dli_tensor *out, enum dli_dtype format,
		 float scale)
{
	if (!in || !out || (format != DLI_DTYPE_F8E4M3 && format != DLI_DTYPE_F8E5M2))
		return -EINVAL;
	if (in->device.type != DLI_DEVICE_CPU || out->device.type != DLI_DEVICE_CPU)
		return -ENOTSUP;
	int64_t n = dli_tensor_numel(in);
	if (n != dli_tensor_numel(out) || (n && (!in->data || !out->data)))
		return -EINVAL;
	if (out->dtype == format)
		return dli_cpu_fp8_quantize(in->data, in->dtype, n, format, scale, NULL, out->data);
	if (out->dtype != DLI_DTYPE_F32)
		return -EINVAL;
	/* Fake quantization: codes for a chunk at a time, then decoded through a table. */
	float table[256];
	for (int c = 0; c < 256; c++)
		table[c] = dli_fp8_decode((uint8_t)c, format) / scale;
	size_t elem = dli_dtype_size(in->dtype);
	uint8_t codes[CHUNK];
	float *dst = out->data;
	for (int64_t i = 0; i < n; i += CHUNK) {
		int64_t m = n - i < CHUNK ? n - i : CHUNK;
		int r = dli_cpu_fp8_quantize((const char *)in->data + (size_t)i * elem, in->dtype, m,
					     format, scale, NULL, codes);
		if (r)
			return r;
		for (int64_t k = 0; k < m; k++)
			dst[i + k] = table[codes[k]];
	}
	return 0;
}
