/* The trainer's GEMM seam: a Linear layer hands every GEMM to a backend through this interface, so
 * a device backend (the CUDA path under cuda/) can replace the CPU one without touching the model. */
#ifndef DLT_GEMM_H
#define DLT_GEMM_H

#include <stdbool.h>
#include <stdint.h>

#include <dlinspect/tensor.h>

/* One GEMM operand, row-major. `values` are what the GEMM multiplies: the high-precision tensor,
 * or, for an FP8 GEMM, the quantized-then-dequantized values. For an FP8 operand `codes` and
 * `scale_inv` also hold the FP8 bytes and the factor that dequantizes them, so a backend with
 * native FP8 GEMMs can use them instead; they are NULL for a high-precision operand. */
struct dlt_operand {
	const float *values;
	const uint8_t *codes;
	enum dli_dtype format; /* DLI_DTYPE_F8E4M3 / F8E5M2 when codes is set, else DLI_DTYPE_F32 */
	const float *scale_inv;
};

/* c[m x n] = op(a) . op(b), op = transpose when asked; op(a) is m x k, op(b) is k x n. `fp8` says
 * both operands are FP8 (a backend may then use the codes). */
struct dlt_gemm {
	int m, n, k;
	bool trans_a, trans_b;
	struct dlt_operand a, b;
	float *c;
	bool fp8;
};

/* A GEMM backend. `run` returns 0 or a negative errno; it may not keep pointers after it returns
 * (a backend that runs asynchronously must finish or copy before returning). */
struct dlt_gemm_backend {
	const char *name;
	void *state;
	int (*run)(void *state, const struct dlt_gemm *g);
};

/* The CPU backend: OpenBLAS sgemm on `values` with fp32 accumulation. For an FP8 GEMM this is
 * numerically an FP8 GEMM (exact products of FP8 values, fp32 sums). Stateless, always present. */
extern const struct dlt_gemm_backend dlt_gemm_cpu;

#endif
