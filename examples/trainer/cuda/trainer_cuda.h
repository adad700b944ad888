/* The demo trainer's CUDA path: FP8 GEMMs through cuBLASLt and FP8 casts on the device
 * (docs/statistics.md, docs/trainer.md). Plain C; streams are cudaStream_t passed as void *
 * (NULL = the default stream), so a C trainer includes this without the CUDA headers.
 *
 * Every function returns 0 or a negative errno and, on failure, fills `err` (may be NULL) with the
 * code and a complete message; none exits. Device work is only enqueued on the stream: no call but
 * dli_tc_create and dli_tc_destroy synchronizes, and errors of the kernels themselves show at the
 * caller's next synchronization. */
#ifndef DLI_TRAINER_CUDA_H
#define DLI_TRAINER_CUDA_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <dlinspect/dlinspect.h>

#ifdef __cplusplus
extern "C" {
#endif

/* A cuBLASLt handle, a workspace and a plan (layouts, descriptor, algorithm) for each GEMM shape
 * seen so far. Bound to the CUDA device current at dli_tc_create. Not thread-safe, and its one
 * workspace is shared by all its GEMMs: GEMMs of one context on two streams that may run
 * concurrently need two contexts. */
struct dli_tc;

/* The default workspace: what cuBLAS recommends for Hopper. */
#define DLI_TC_DEFAULT_WORKSPACE ((size_t)32 << 20)

/* Creates a context on the current device with a workspace of `workspace_bytes` (0 = none, which
 * leaves cuBLASLt fewer algorithms). -ENODEV without a CUDA device, -ENOMEM when the workspace or
 * handle cannot be had. The caller owns *out and frees it with dli_tc_destroy. */
int dli_tc_create(size_t workspace_bytes, struct dli_tc **out, struct dli_error *err);

/* Frees the plans, workspace and handle after waiting for the device. Accepts NULL. */
void dli_tc_destroy(struct dli_tc *tc);

/* y = alpha * (x_scale_inv * w_scale_inv) * x . w^T + beta * y, all matrices dense row-major:
 *   x  m x k  FP8 codes (x_type)      the left operand, k contiguous
 *   w  n x k  FP8 codes (w_type)      the right operand, stored transposed, k contiguous
 *   y  m x n  f32 or bf16 (y_type)    read when beta != 0 and written
 * with fp32 accumulation (CUBLAS_COMPUTE_32F). The scale_invs are device pointers to one float
 * each (per-tensor scaling: the factor that dequantizes the codes), read by the GEMM when it runs.
 *
 * For a Linear layer y = x W^T with W out x in:
 *   fprop  y[b x out]   = x[b x in] . W[out x in]^T            x: activation E4M3, w: W E4M3
 *   dgrad  dx[b x in]   = dy[b x out] . (W^T)[in x out]^T       x: dy E5M2, w: W^T E4M3
 *   wgrad  dW[out x in] = (dy^T)[out x b] . (x^T)[in x b]^T     x: dy^T E5M2, w: x^T E4M3
 * where the transposed codes come from dli_tc_quantize's out_t.
 *
 * In cuBLASLt's column-major terms this is the "TN" GEMM that FP8 on Ada and Hopper requires:
 * D (n x m) = op(A)^T B with A = w (k x n, transposed), B = x (k x m), so cuBLASLt's A type is
 * w_type and its B type x_type.
 *
 * Constraints (-EINVAL otherwise): m, n, k positive multiples of 16; x_type and w_type each
 * DLI_DTYPE_F8E4M3 or DLI_DTYPE_F8E5M2 but not both E5M2 (cuBLASLt has no E5M2 x E5M2);
 * y_type DLI_DTYPE_F32 or DLI_DTYPE_BF16; x, w, y non-NULL and 16-byte aligned; scale_invs
 * non-NULL; tc non-NULL. -ENOTSUP on a device below compute capability 8.9 or when cuBLASLt
 * offers no algorithm; -EIO when cuBLASLt fails. A plan is made (and cached) on the first call of
 * each shape, types, alignment and fast_accum; later calls only enqueue the GEMM. */
struct dli_tc_gemm {
	int64_t m, n, k;
	const void *x;
	enum dli_dtype x_type;
	const float *x_scale_inv;
	const void *w;
	enum dli_dtype w_type;
	const float *w_scale_inv;
	void *y;
	enum dli_dtype y_type;
	float alpha, beta;
	/* cuBLASLt's FP8 fast accumulation: faster, but partial sums are not promoted to full fp32
	 * (TransformerEngine uses it in fprop only). */
	bool fast_accum;
	void *stream;
};

int dli_tc_fp8_gemm(struct dli_tc *tc, const struct dli_tc_gemm *g, struct dli_error *err);

/* The FP8 cast (docs/statistics.md) of a rows x cols row-major f32 matrix on the device:
 * code = fp8(x * *scale), round to nearest even, saturated to the finite max, NaN kept (the
 * __NV_SATFINITE conversion TransformerEngine uses). All pointers are device memory:
 *   out        rows x cols codes, or NULL
 *   out_t      cols x rows codes of the transpose (for dgrad and wgrad), or NULL
 *   amax       set to max |x| of the unscaled input (NaN when any element is NaN, 0 when empty),
 *              for delayed scaling's history; or NULL
 *   scale_inv  set to 1 / *scale, the factor that dequantizes the codes; or NULL
 * -EINVAL for a format that is not FP8, negative sizes, or a NULL x or scale with elements. */
struct dli_tc_quantize {
	const float *x;
	int64_t rows, cols;
	enum dli_dtype format;
	const float *scale;
	uint8_t *out;
	uint8_t *out_t;
	float *amax;
	float *scale_inv;
	void *stream;
};

int dli_tc_quantize(const struct dli_tc_quantize *q, struct dli_error *err);

/* out[i] = decode(codes[i]) * *scale_inv for n codes of `format` (device pointers). For checks. */
int dli_tc_dequantize(const uint8_t *codes, int64_t n, enum dli_dtype format, const float *scale_inv,
		      float *out, void *stream, struct dli_error *err);

/* The scale for delayed or current scaling, on the device without a synchronization: amax = the
 * largest of the `history_len` floats at amax_history (NaN when any is NaN; history_len 1 gives
 * "most recent"), then *scale = fp8_max / amax / 2^margin with dli_fp8_current_scale's rules
 * (1 for an amax of 0, inf or NaN) and, when scale_inv is not NULL, *scale_inv = 1 / *scale.
 * Device pointers; -EINVAL for a format that is not FP8, history_len < 1 or NULL pointers. */
int dli_tc_scale_update(const float *amax_history, int history_len, enum dli_dtype format,
			double margin, float *scale, float *scale_inv, void *stream,
			struct dli_error *err);

#ifdef __cplusplus
}
#endif

#endif
