/* The MXFP8 passes' internals, shared by kernels/cpu/mx.c and its SIMD variants mx-avx2-rows.c
 * and mx-avx2-columns.c (and FP8 block scaling's, fp8-block.c and fp8-block-avx2.c). Never
 * installed. */
#ifndef DLI_MX_PRIVATE_H
#define DLI_MX_PRIVATE_H

#include "cpu-private.h"

enum mx_mode { MX_COMPARE, MX_QUANTIZE, MX_FAKE };

/* One pass: what it reads, and where each mode writes. */
struct mx_pass {
	const char *data;
	enum dli_dtype dtype, format;
	int64_t rows, cols;
	bool columnwise;
	enum mx_mode mode;
	enum dli_simd simd;
	uint8_t *q, *scales; /* QUANTIZE: codes (rows x cols), scales (padded, row-major) */
	int64_t scale_cols;  /* the scales' row stride */
	float *out;          /* FAKE: dequantized values (rows x cols) */
	struct dli_stats_record *recs; /* COMPARE: one per chunk */
	int64_t rows_per_chunk;        /* a multiple of DLI_MX_BLOCK */
	/* COMPARE: the caller knows the sum of x^2 over the tensor (the statistics pass's), so the
	 * AVX2 fast steps on bf16 may leave theirs out of xs (their dot, (xs + dqs - err) / 2, then
	 * lacks half of it): dli_block_add_left_out puts both back. */
	bool xs_known;
};

/* The scalar reference's COMPARE of one block of m elements, x[k] at data index idx0 + k * stride,
 * added into *t. */
void dli_mx_block_scalar(const struct mx_pass *ps, int64_t idx0, int64_t stride, int64_t m,
			 struct dli_block_terms *t);

/* FP8 block scaling's scalar pass over the tile at (r0, c0), for the AVX2 strip's fallback. */
typedef void (*dli_fb_tile_fn)(void *ctx, int64_t r0, int64_t c0);

#ifdef DLI_HAVE_X86_SIMD
/* FP8 block scaling's compare over one strip of 128 x 128 tiles (rows [r0, r1), at most 128),
 * power-of-two scales, into *t: full tiles of finite values in a safe range by vector steps, the
 * rest through scalar_tile(ctx, r0, c0); xs_known as struct mx_pass's. Compiled with AVX2 and
 * FMA. */
void dli_fb_strip_avx2(const void *data, enum dli_dtype dtype, int64_t cols, int64_t r0,
		       int64_t r1, enum dli_dtype format, bool xs_known, dli_fb_tile_fn scalar_tile,
		       void *ctx, struct dli_block_terms *t);
/* COMPARE of rows [r0, r1), row-wise blocks, into *t: full blocks of finite values in a safe range
 * with AVX2 (sums in float lanes, widened to double every few blocks), the rest by the scalar
 * block. Compiled with AVX2 and FMA; call it only when the CPU has them. */
void dli_mx_rows_avx2(const struct mx_pass *ps, int64_t r0, int64_t r1, struct dli_block_terms *t);
/* The same for column-wise blocks (rows [r0, r1) in whole strips of 32 but the last): eight
 * columns a vector, one block a lane; partial strips and the columns left over to the scalar
 * block. */
void dli_mx_cols_avx2(const struct mx_pass *ps, int64_t r0, int64_t r1, struct dli_block_terms *t);
#endif

#endif
