/* The CPU GEMM backend: OpenBLAS sgemm. FP8 operands arrive dequantized, so an FP8 GEMM here is the
 * product of exact FP8 values with fp32 accumulation, as cuBLASLt's FP8 GEMM computes it. */
#include <cblas.h>
#include <errno.h>

#include "gemm.h"

static int cpu_run(void *state, const struct dlt_gemm *g)
{
	(void)state;
	if (!g->a.values || !g->b.values || !g->c || g->m < 0 || g->n < 0 || g->k < 0)
		return -EINVAL;
	/* Leading dimensions of row-major storage: a stored transposed is k x m, so its rows are m. */
	int lda = g->trans_a ? g->m : g->k;
	int ldb = g->trans_b ? g->k : g->n;
	cblas_sgemm(CblasRowMajor, g->trans_a ? CblasTrans : CblasNoTrans,
		    g->trans_b ? CblasTrans : CblasNoTrans, g->m, g->n, g->k, 1.0f, g->a.values,
		    lda > 0 ? lda : 1, g->b.values, ldb > 0 ? ldb : 1, 0.0f, g->c, g->n > 0 ? g->n : 1);
	return 0;
}

const struct dlt_gemm_backend dlt_gemm_cpu = {
	.name = "cpu (OpenBLAS sgemm, fp32 accumulation)",
	.state = NULL,
	.run = cpu_run,
};
