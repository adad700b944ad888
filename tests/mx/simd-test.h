/* What the block-scaled SIMD tests (test_mx_simd.c, test_fb_simd.c) share: their inputs (every
 * shape, kind of values and input type, the 16-bit types narrowed from f32), and the comparison of
 * the AVX2 record with the scalar one (records-agree.h). */
#ifndef DLI_TEST_MX_SIMD_H
#define DLI_TEST_MX_SIMD_H

#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <dlinspect/tensor.h>

#include "check.h"
#include "kernels-private.h"
#include "mx/records-agree.h"

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

/* The statistics pass's sum of x^2 over the finite ones of n elements, as core/stats.c gives it to
 * the block-scaled compares (dli_cpu_stats_finite_sq: NaN where it does not know it). */
static double stats_sum_sq(const void *in, enum dli_dtype dt, int64_t n)
{
	struct dli_stats_record st;
	double finite_sq;
	if (dli_cpu_stats_finite_sq(in, dt, n, NULL, &st, &finite_sq) != 0)
		return NAN;
	return finite_sq;
}

/* Every input of a test: for each of the n_shapes [rows, cols], each kind of values (x[i] =
 * value(kind, i, cols), kinds of them) and each input type (f32 as it is, bf16 and f16 narrowed),
 * each(in, dtype, rows, cols, kind). */
static void for_each_input(const int64_t (*shapes)[2], size_t n_shapes, int kinds,
			   float (*value)(int kind, int64_t i, int64_t cols),
			   void (*each)(const void *in, enum dli_dtype dt, int64_t rows, int64_t cols,
					int kind))
{
	static const enum dli_dtype dtypes[] = {DLI_DTYPE_F32, DLI_DTYPE_BF16, DLI_DTYPE_F16};

	for (size_t si = 0; si < n_shapes; si++) {
		int64_t rows = shapes[si][0], cols = shapes[si][1], n = rows * cols;
		float *x = malloc((size_t)n * sizeof(*x));
		void *in = malloc((size_t)n * sizeof(float));
		if (!x || !in) {
			CHECK(false);
			free(x);
			free(in);
			return;
		}
		for (int kind = 0; kind < kinds; kind++) {
			for (int64_t i = 0; i < n; i++)
				x[i] = value(kind, i, cols);
			for (size_t di = 0; di < sizeof(dtypes) / sizeof(dtypes[0]); di++) {
				if (dtypes[di] == DLI_DTYPE_F32)
					memcpy(in, x, (size_t)n * sizeof(float));
				else
					narrow(x, n, dtypes[di], in);
				each(in, dtypes[di], rows, cols, kind);
			}
		}
		free(x);
		free(in);
	}
}

#endif
