/* The trainer's CUDA GEMM backend: the GEMM seam (../gemm.h) over dli_tc_fp8_gemm, so the model
 * runs its FP8 GEMMs through cuBLASLt without knowing it. */
#ifndef DLT_GEMM_CUDA_H
#define DLT_GEMM_CUDA_H

#include "trainer_cuda.h"

#ifdef __cplusplus
extern "C" {
#endif

#include "../gemm.h" /* plain C without its own extern "C" */

/* Fills *out with a backend whose run() does each FP8 GEMM (g->fp8 with codes and scale_inv on
 * both operands, not both E5M2) on the current CUDA device: the host codes are packed into the TN
 * layout cuBLASLt needs (transposed as trans_a / trans_b ask, zero-padded to multiples of 16,
 * which adds exact zeros), copied to the device, multiplied with fp32 accumulation and per-tensor
 * scale_invs, and the f32 result copied back before run() returns. Every other GEMM goes to
 * `fallback` (borrowed; e.g. &dlt_gemm_cpu), which must outlive the backend. Errors: those of
 * dli_tc_create (-ENODEV without a device). Free with dlt_gemm_cuda_destroy. */
int dlt_gemm_cuda_create(const struct dlt_gemm_backend *fallback, struct dlt_gemm_backend *out,
			 struct dli_error *err);

/* Frees what dlt_gemm_cuda_create made; accepts a backend it did not fill (state NULL). */
void dlt_gemm_cuda_destroy(struct dlt_gemm_backend *backend);

/* The message of the backend's last failed run() (run returns only the errno); "" when none. */
const char *dlt_gemm_cuda_last_error(const struct dlt_gemm_backend *backend);

#ifdef __cplusplus
}
#endif

#endif
