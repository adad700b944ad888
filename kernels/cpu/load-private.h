/* The scalar passes' element access, shared by the FP8 and block-scaled codecs: float bits, f16 and
 * bf16 widened exactly to float. Header-only so each pass inlines it into its loop. */
#ifndef DLI_CPU_LOAD_PRIVATE_H
#define DLI_CPU_LOAD_PRIVATE_H

#include <stdint.h>
#include <string.h>

#include <dlinspect/tensor.h>

static inline uint32_t float_bits(float f)
{
	uint32_t u;
	memcpy(&u, &f, sizeof(u));
	return u;
}

static inline float bits_float(uint32_t u)
{
	float f;
	memcpy(&f, &u, sizeof(f));
	return f;
}

static inline float half_float(uint16_t h)
{
	uint32_t sign = (uint32_t)(h & 0x8000) << 16;
	uint32_t e = (h >> 10) & 0x1f;
	uint32_t m = h & 0x3ff;

	if (e == 0x1f)
		return bits_float(sign | 0x7f800000 | (m << 13));
	if (e == 0) /* zero or subnormal: m * 2^-24 is exact */
		return bits_float(sign | float_bits((float)m * 0x1p-24f));
	return bits_float(sign | ((e + 112) << 23) | (m << 13));
}

/* Element i of a contiguous f32, f16 or bf16 array (any other dtype reads as bf16). */
static inline __attribute__((always_inline)) float load(const void *data, enum dli_dtype dtype,
							 int64_t i)
{
	uint16_t h;

	switch (dtype) {
	case DLI_DTYPE_F32:
		return ((const float *)data)[i];
	case DLI_DTYPE_F16:
		memcpy(&h, (const uint16_t *)data + i, sizeof(h));
		return half_float(h);
	default: /* DLI_DTYPE_BF16 */
		memcpy(&h, (const uint16_t *)data + i, sizeof(h));
		return bits_float((uint32_t)h << 16);
	}
}

#endif
