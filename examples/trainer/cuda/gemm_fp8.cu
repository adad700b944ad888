/* FP8 GEMMs through cuBLASLt for the trainer's CUDA path (docs/statistics.md): per-tensor
 * scale_inv device pointers, fp32 accumulation, f32 or bf16 output, and a plan per shape made
 * once, so a training step only enqueues GEMMs. Host code only: the kernels are cuBLASLt's. */
#include <cublasLt.h>
#include <cuda_runtime.h>
#include <stdlib.h>

#include "../../../kernels/cuda/no-gpu.h"
#include "tc-private.h"

using namespace dli_tc_impl;

namespace {

/* What the chosen algorithm depends on. Alignments (capped at 256 bytes) are part of it because
 * the heuristic is told the pointers' real alignment rather than assuming cudaMalloc's. */
struct plan_key {
	int64_t m, n, k;
	enum dli_dtype x_type, w_type, y_type;
	unsigned align_x, align_w, align_y;
	bool fast_accum;
};

bool same_key(const plan_key &a, const plan_key &b)
{
	return a.m == b.m && a.n == b.n && a.k == b.k && a.x_type == b.x_type &&
	       a.w_type == b.w_type && a.y_type == b.y_type && a.align_x == b.align_x &&
	       a.align_w == b.align_w && a.align_y == b.align_y && a.fast_accum == b.fast_accum;
}

struct plan {
	plan_key key;
	cublasLtMatmulDesc_t desc;
	cublasLtMatrixLayout_t a, b, d; /* cuBLASLt's A = w, B = x, C = D = y */
	cublasLtMatmulAlgo_t algo;
};

cudaDataType_t cuda_type(enum dli_dtype t)
{
	switch (t) {
	case DLI_DTYPE_F8E4M3: return CUDA_R_8F_E4M3;
	case DLI_DTYPE_F8E5M2: return CUDA_R_8F_E5M2;
	case DLI_DTYPE_BF16: return CUDA_R_16BF;
	default: return CUDA_R_32F;
	}
}

unsigned alignment(const void *p)
{
	const uintptr_t u = (uintptr_t)p;
	const uintptr_t low = u & (~u + 1);
	return low == 0 || low > 256 ? 256u : (unsigned)low;
}

int from_status(cublasStatus_t s)
{
	switch (s) {
	case CUBLAS_STATUS_NOT_SUPPORTED: return -ENOTSUP;
	case CUBLAS_STATUS_ALLOC_FAILED: return -ENOMEM;
	case CUBLAS_STATUS_INVALID_VALUE: return -EINVAL;
	default: return -EIO;
	}
}

void plan_free(plan *p)
{
	if (p->d)
		cublasLtMatrixLayoutDestroy(p->d);
	if (p->b)
		cublasLtMatrixLayoutDestroy(p->b);
	if (p->a)
		cublasLtMatrixLayoutDestroy(p->a);
	if (p->desc)
		cublasLtMatmulDescDestroy(p->desc);
}

} // namespace

struct dli_tc {
	cublasLtHandle_t handle;
	void *workspace;
	size_t workspace_bytes;
	int device;
	int cc; /* compute capability, 10 * major + minor */
	plan *plans;
	size_t plan_count, plan_cap;
};

extern "C" int dli_tc_create(size_t workspace_bytes, struct dli_tc **out, struct dli_error *err)
{
	if (!out)
		return fail(err, -EINVAL, "dli_tc_create: out is NULL");
	*out = NULL;
	int dev = 0, major = 0, minor = 0;
	cudaError_t e = cudaGetDevice(&dev);
	if (e == cudaSuccess)
		e = cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev);
	if (e == cudaSuccess)
		e = cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev);
	if (e != cudaSuccess) {
		cudaGetLastError(); /* not sticky: clear it for the caller */
		char why[256];
		if (dli_cuda_is_no_gpu(e))
			return fail(err, -ENODEV, "dli_tc_create: %s",
				    dli_cuda_describe(why, sizeof why, "cudaGetDevice", e));
		return fail(err, -ENODEV, "dli_tc_create: no usable CUDA device: %s",
			    cudaGetErrorString(e));
	}

	struct dli_tc *tc = (struct dli_tc *)calloc(1, sizeof *tc);
	if (!tc)
		return fail(err, -ENOMEM, "dli_tc_create: out of memory");
	tc->device = dev;
	tc->cc = 10 * major + minor;
	const cublasStatus_t s = cublasLtCreate(&tc->handle);
	if (s != CUBLAS_STATUS_SUCCESS) {
		free(tc);
		return fail(err, from_status(s), "dli_tc_create: cublasLtCreate: %s",
			    cublasLtGetStatusString(s));
	}
	if (workspace_bytes > 0) {
		e = cudaMalloc(&tc->workspace, workspace_bytes);
		if (e != cudaSuccess) {
			cudaGetLastError();
			cublasLtDestroy(tc->handle);
			free(tc);
			return fail(err, -ENOMEM, "dli_tc_create: %zu-byte workspace: %s",
				    workspace_bytes, cudaGetErrorString(e));
		}
		tc->workspace_bytes = workspace_bytes;
	}
	*out = tc;
	return 0;
}

extern "C" void dli_tc_destroy(struct dli_tc *tc)
{
	if (!tc)
		return;
	/* cudaFree waits for the GEMMs that may still use the workspace. */
	cudaFree(tc->workspace);
	for (size_t i = 0; i < tc->plan_count; i++)
		plan_free(&tc->plans[i]);
	free(tc->plans);
	cublasLtDestroy(tc->handle);
	free(tc);
}

/* Descriptor, layouts and the heuristic's first algorithm for one key. */
static int plan_make(struct dli_tc *tc, const plan_key &key, const struct dli_tc_gemm *g,
		     plan *p, struct dli_error *err)
{
	memset(p, 0, sizeof *p);
	p->key = key;
	const cublasOperation_t trans_a = CUBLAS_OP_T, trans_b = CUBLAS_OP_N;
	const cudaDataType_t scale_type = CUDA_R_32F;
	const int8_t fast = key.fast_accum ? 1 : 0;
	cublasLtMatmulPreference_t pref = NULL;
	cublasLtMatmulHeuristicResult_t result;
	int found = 0;
	const char *step = "cublasLtMatmulDescCreate";
	cublasStatus_t s = cublasLtMatmulDescCreate(&p->desc, CUBLAS_COMPUTE_32F, CUDA_R_32F);
#define TRY(call)                      \
	do {                           \
		if (s == CUBLAS_STATUS_SUCCESS) { \
			step = #call;  \
			s = (call);    \
		}                      \
	} while (0)
	TRY(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_SCALE_TYPE, &scale_type,
					   sizeof scale_type));
	TRY(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSA, &trans_a,
					   sizeof trans_a));
	TRY(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSB, &trans_b,
					   sizeof trans_b));
	TRY(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_FAST_ACCUM, &fast,
					   sizeof fast));
	/* The heuristic sees the same descriptor the GEMMs will: scale pointers set. */
	TRY(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER,
					   &g->w_scale_inv, sizeof g->w_scale_inv));
	TRY(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER,
					   &g->x_scale_inv, sizeof g->x_scale_inv));
	/* Column-major: A is w stored k x n and transposed, B is x stored k x m, D is y as n x m. */
	TRY(cublasLtMatrixLayoutCreate(&p->a, cuda_type(key.w_type), (uint64_t)key.k,
				       (uint64_t)key.n, key.k));
	TRY(cublasLtMatrixLayoutCreate(&p->b, cuda_type(key.x_type), (uint64_t)key.k,
				       (uint64_t)key.m, key.k));
	TRY(cublasLtMatrixLayoutCreate(&p->d, cuda_type(key.y_type), (uint64_t)key.n,
				       (uint64_t)key.m, key.n));
	TRY(cublasLtMatmulPreferenceCreate(&pref));
	const uint64_t ws = tc->workspace_bytes;
	const uint32_t align_a = key.align_w, align_b = key.align_x, align_cd = key.align_y;
	TRY(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws,
						 sizeof ws));
	TRY(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES,
						 &align_a, sizeof align_a));
	TRY(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
						 &align_b, sizeof align_b));
	TRY(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES,
						 &align_cd, sizeof align_cd));
	TRY(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES,
						 &align_cd, sizeof align_cd));
	TRY(cublasLtMatmulAlgoGetHeuristic(tc->handle, p->desc, p->a, p->b, p->d, p->d, pref, 1,
					   &result, &found));
#undef TRY
	if (pref)
		cublasLtMatmulPreferenceDestroy(pref);
	if (s == CUBLAS_STATUS_SUCCESS && found == 0)
		s = CUBLAS_STATUS_NOT_SUPPORTED;
	if (s != CUBLAS_STATUS_SUCCESS) {
		plan_free(p);
		return fail(err, from_status(s),
			    "dli_tc_fp8_gemm: no cuBLASLt plan for %s x %s -> %s, m %lld n %lld "
			    "k %lld: %s: %s",
			    dtype_name(key.x_type), dtype_name(key.w_type), dtype_name(key.y_type),
			    (long long)key.m, (long long)key.n, (long long)key.k, step,
			    cublasLtGetStatusString(s));
	}
	p->algo = result.algo;
	return 0;
}

static int check_args(const struct dli_tc_gemm *g, struct dli_error *err)
{
	if (!g)
		return fail(err, -EINVAL, "dli_tc_fp8_gemm: arguments are NULL");
	if (!is_fp8(g->x_type) || !is_fp8(g->w_type))
		return fail(err, -EINVAL, "dli_tc_fp8_gemm: x is %s and w %s: both must be FP8 "
			    "(e4m3 or e5m2)", dtype_name(g->x_type), dtype_name(g->w_type));
	if (g->x_type == DLI_DTYPE_F8E5M2 && g->w_type == DLI_DTYPE_F8E5M2)
		return fail(err, -EINVAL, "dli_tc_fp8_gemm: e5m2 x e5m2 is not a cuBLASLt FP8 GEMM; "
			    "one operand must be e4m3");
	if (g->y_type != DLI_DTYPE_F32 && g->y_type != DLI_DTYPE_BF16)
		return fail(err, -EINVAL, "dli_tc_fp8_gemm: y is %s: it must be f32 or bf16",
			    dtype_name(g->y_type));
	const int64_t dims[3] = {g->m, g->n, g->k};
	for (int i = 0; i < 3; i++)
		if (dims[i] <= 0 || dims[i] % 16 != 0)
			return fail(err, -EINVAL, "dli_tc_fp8_gemm: %c is %lld: m, n and k must be "
				    "positive multiples of 16 (cuBLASLt FP8)", "mnk"[i],
				    (long long)dims[i]);
	const void *ptrs[3] = {g->x, g->w, g->y};
	for (int i = 0; i < 3; i++) {
		if (!ptrs[i])
			return fail(err, -EINVAL, "dli_tc_fp8_gemm: %c is NULL", "xwy"[i]);
		if (alignment(ptrs[i]) < 16)
			return fail(err, -EINVAL, "dli_tc_fp8_gemm: %c is not 16-byte aligned",
				    "xwy"[i]);
	}
	if (!g->x_scale_inv || !g->w_scale_inv)
		return fail(err, -EINVAL, "dli_tc_fp8_gemm: %s is NULL",
			    g->x_scale_inv ? "w_scale_inv" : "x_scale_inv");
	return 0;
}

/* The arguments are checked before the context, so every refusal can be tested without a GPU. */
extern "C" int dli_tc_fp8_gemm(struct dli_tc *tc, const struct dli_tc_gemm *g,
			       struct dli_error *err)
{
	int r = check_args(g, err);
	if (r < 0)
		return r;
	if (!tc)
		return fail(err, -EINVAL, "dli_tc_fp8_gemm: context is NULL");
	if (tc->cc < 89)
		return fail(err, -ENOTSUP, "dli_tc_fp8_gemm: device %d has compute capability %d.%d; "
			    "FP8 GEMMs need 8.9 (Ada) or later", tc->device, tc->cc / 10, tc->cc % 10);
	int dev = -1;
	if (cudaGetDevice(&dev) != cudaSuccess || dev != tc->device) {
		cudaGetLastError();
		return fail(err, -EINVAL, "dli_tc_fp8_gemm: the context belongs to device %d, the "
			    "current device is %d", tc->device, dev);
	}

	const plan_key key = {g->m, g->n, g->k, g->x_type, g->w_type, g->y_type, alignment(g->x),
			      alignment(g->w), alignment(g->y), g->fast_accum};
	plan *p = NULL;
	for (size_t i = 0; i < tc->plan_count && !p; i++)
		if (same_key(tc->plans[i].key, key))
			p = &tc->plans[i];
	if (!p) {
		if (tc->plan_count == tc->plan_cap) {
			const size_t cap = tc->plan_cap ? 2 * tc->plan_cap : 8;
			plan *grown = (plan *)realloc(tc->plans, cap * sizeof *grown);
			if (!grown)
				return fail(err, -ENOMEM, "dli_tc_fp8_gemm: out of memory");
			tc->plans = grown;
			tc->plan_cap = cap;
		}
		r = plan_make(tc, key, g, &tc->plans[tc->plan_count], err);
		if (r < 0)
			return r;
		p = &tc->plans[tc->plan_count++];
	}

	cublasStatus_t s = cublasLtMatmulDescSetAttribute(
		p->desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &g->w_scale_inv, sizeof g->w_scale_inv);
	if (s == CUBLAS_STATUS_SUCCESS)
		s = cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER,
						   &g->x_scale_inv, sizeof g->x_scale_inv);
	if (s == CUBLAS_STATUS_SUCCESS)
		s = cublasLtMatmul(tc->handle, p->desc, &g->alpha, g->w, p->a, g->x, p->b, &g->beta,
				   g->y, p->d, g->y, p->d, &p->algo, tc->workspace,
				   tc->workspace_bytes, (cudaStream_t)g->stream);
	if (s != CUBLAS_STATUS_SUCCESS)
		return fail(err, from_status(s), "dli_tc_fp8_gemm: cublasLtMatmul (m %lld n %lld k %lld): %s",
			    (long long)g->m, (long long)g->n, (long long)g->k,
			    cublasLtGetStatusString(s));
	return 0;
}
