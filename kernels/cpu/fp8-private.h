/* The FP8 quantize-and-compare kernels per SIMD path, shared by kernels/cpu/fp8*.c and the fp8
 * tests. Never installed. */
#ifndef DLI_FP8_PRIVATE_H
#define DLI_FP8_PRIVATE_H

#include <stdbool.h>

#include "kernels-private.h"

/* Each path adds the FP8 terms of n elements (f32, f16 or bf16; the caller has checked the dtype,
 * the format and that scale is finite and > 0) into the FP8 fields of *acc: fp8_count, underflows,
 * overflows, err_sq, dot, dq_sq, x_sq. A NaN or infinite x is left out of all of them (it has no
 * quantization error, and would make mse, cos_sim and sqnr NaN); the main pass counts it. The
 * scalar path is the reference, in double per element, with dq = decode(q) / scale; the SIMD
 * paths sum float lanes inside a block, and a block whose float sums left a safe range is redone
 * (see fp8-avx2.c): NaN and inf masked out, then, if still out of range, by the scalar path. The
 * AVX-512 path has its own loop only for bf16 on CPUs with AVX512-BF16; the rest is the AVX2
 * pass's. */
void dli_fp8_compare_scalar(const void *data, enum dli_dtype dtype, int64_t n,
			    enum dli_dtype format, float scale, struct dli_stats_record *acc);
/* The SIMD paths take `xs_known`: the caller knows the sum of x^2 over the elements (from the
 * statistics pass) and will set x_sq to it, so a path may leave out of x_sq, dot and dq_sq one and
 * the same amount, the fast steps' sum of x^2, which the caller then adds to all three (their
 * fast terms are sums of x^2 less other terms: see fp8-avx2.c). A path that leaves nothing out
 * is right as well. */
void dli_fp8_compare_avx2(const void *data, enum dli_dtype dtype, int64_t n,
			  enum dli_dtype format, float scale, bool xs_known,
			  struct dli_stats_record *acc);
void dli_fp8_compare_avx512(const void *data, enum dli_dtype dtype, int64_t n,
			    enum dli_dtype format, float scale, bool xs_known,
			    struct dli_stats_record *acc);

/* Nonzero (the default): the AVX-512 pass takes bf16 input through its table path when the CPU
 * has AVX512_BF16. Tests set it to 0 to send bf16 input to the AVX2 pass instead. */
extern int dli_fp8_avx512_bf16_table;

/* The largest float magnitude (bits 0 .. 0x7f7fffff) whose product with scale is <= limit, or -1:
 * the SIMD paths' bounds of the values whose casts need no saturation or subnormal grid. */
int64_t dli_fp8_f32_last_le(float scale, float limit);

/* q[i] = encode(x[i] * scale), the same codes dli_fp8_encode gives, for n elements. */
void dli_fp8_quantize_scalar(const void *data, enum dli_dtype dtype, int64_t n,
			     enum dli_dtype format, float scale, uint8_t *q);
void dli_fp8_quantize_avx2(const void *data, enum dli_dtype dtype, int64_t n,
			   enum dli_dtype format, float scale, uint8_t *q);
void dli_fp8_quantize_avx512(const void *data, enum dli_dtype dtype, int64_t n,
			     enum dli_dtype format, float scale, uint8_t *q);

/* q[i] = encode(x[i] * scale) for n elements of f32, f16 or bf16, with the SIMD path of `o` (NULL:
 * the best one). For tests and for hosts that quantize on the CPU. -EINVAL for a bad dtype,
 * format or scale (not finite and > 0), -ENOTSUP for a path this CPU lacks. */
int dli_cpu_fp8_quantize(const void *data, enum dli_dtype dtype, int64_t n, enum dli_dtype format,
			 float scale, const struct dli_cpu_options *o, uint8_t *q);

#endif
