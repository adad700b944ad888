/* The NVFP4 passes' internals, shared by kernels/cpu/nvfp4.c and its SIMD variant nvfp4-avx2.c.
 * Never installed. */
#ifndef DLI_NVFP4_PRIVATE_H
#define DLI_NVFP4_PRIVATE_H

#include "cpu-private.h"

enum nv_mode { NV_AMAX, NV_COMPARE, NV_QUANTIZE, NV_FAKE };

struct nv_pass {
	const char *data;
	enum dli_dtype dtype;
	int64_t rows, cols;
	int dims;
	bool columnwise;
	enum nv_mode mode;
	enum dli_simd simd;
	bool amax_known; /* amax is the caller's: no pass for it */
	float amax, s_enc;
	uint8_t *q, *scales;
	int64_t scale_cols;
	float *out;
	struct dli_stats_record *recs; /* COMPARE: one per chunk */
	float *amaxes;                 /* AMAX: one per chunk */
	int64_t rows_per_chunk;        /* a multiple of DLI_NVFP4_BLOCK */
	/* COMPARE: the caller knows the sum of x^2 over the tensor's finite elements and its count of
	 * zeros (the statistics pass's), so the AVX2 groups on bf16 leave their x^2 out of xs (their
	 * dot, (xs + dqs - err) / 2, then lacks half of it: dli_block_add_left_out puts both back),
	 * and count every x that quantizes to 0 as an underflow, zeros too: the other blocks (holding
	 * NaN or an infinity, a row's last) count their zeros into the terms' `zeros`, one number a
	 * chunk in zeros_other, and the zeros the groups saw (zeros less those) come off the
	 * underflows. */
	bool xs_known;
	uint64_t zeros;
	uint64_t *zeros_other;
};

/* The scalar COMPARE of one row-wise block: row r, columns [c0, c0 + w), added into *t. */
void dli_nvfp4_block_scalar(const struct nv_pass *ps, int64_t r, int64_t c0, int64_t w,
			    struct dli_block_terms *t);

#ifdef DLI_HAVE_X86_SIMD
/* Whether dli_nvfp4_rows_avx2 takes the pass's chunks. */
bool dli_nvfp4_rows_avx2_take(const struct nv_pass *ps);
/* COMPARE of rows [r0, r1), row-wise 1 x 16 blocks, into *t: whole blocks with AVX2 (the
 * block's scale computed by the scalar rules, its elements eight a vector, the sums in float
 * lanes per group of blocks, widened to double), a row's last partial block by the scalar block.
 * Compiled with AVX2 and FMA; call it only when the CPU has them, and the pass's amax is not
 * below 2^-100. */
void dli_nvfp4_rows_avx2(const struct nv_pass *ps, int64_t r0, int64_t r1, struct dli_block_terms *t);
/* max |x| over elements [i0, i1) of f32 or bf16 data, NaN left out (0 when nothing is left). */
float dli_nvfp4_amax_avx2(const void *data, enum dli_dtype dtype, int64_t i0, int64_t i1);
#endif

#endif
