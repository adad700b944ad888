/* What the block-scaled SIMD tests (test_mx_simd.c, test_fb_simd.c) share: their inputs narrowed
 * to the 16-bit types, and the tolerance of the sums their SIMD and scalar passes add in
 * different orders. */
#ifndef DLI_TEST_MX_SIMD_H
#define DLI_TEST_MX_SIMD_H

#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include <dlinspect/tensor.h>

/* x's float bits cut to bf16 or f16 (the mantissa truncated: any pattern is input as good as
 * another, both paths see the same); f16 flushes below its normals and overflows to inf. */
static void narrow(const float *x, int64_t n, enum dli_dtype dt, uint16_t *out)
{
	for (int64_t i = 0; i < n; i++) {
		uint32_t u;
		memcpy(&u, &x[i], sizeof(u));
		if (dt == DLI_DTYPE_BF16) {
			out[i] = isnan(x[i]) ? (uint16_t)0x7fc0 : (uint16_t)(u >> 16);
			continue;
		}
		uint16_t sign = (uint16_t)(u >> 16 & 0x8000);
		int e = (int)(u >> 23 & 0xff) - 127;
		if (isnan(x[i]))
			out[i] = 0x7e00;
		else if (e > 15)
			out[i] = sign | 0x7c00;
		else if (e < -14)
			out[i] = sign;
		else
			out[i] = (uint16_t)(sign | (uint32_t)(e + 15) << 10 | (u & 0x7fffff) >> 13);
	}
}

/* The sums: float lanes against the scalar pass's order, within 1e-5 (docs/block-scaling.md). */
static bool close_to(double a, double b)
{
	return a == b || fabs(a - b) <= 1e-5 * fmax(fabs(a), fabs(b));
}

#endif
