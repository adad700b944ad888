/* Statistics: the sufficient-statistics record a pass over a tensor fills, the statistics it
 * finalizes to (docs/statistics.md), and the FP8 quantization a pass can compare against. */
#ifndef DLINSPECT_STATS_H
#define DLINSPECT_STATS_H

#include <stddef.h>
#include <stdint.h>

#include <dlinspect/tensor.h>

#ifdef __cplusplus
extern "C" {
#endif

enum dli_stat {
	DLI_STAT_MIN = 0,
	DLI_STAT_MAX,
	DLI_STAT_MEAN,
	DLI_STAT_STD,
	DLI_STAT_VAR,
	DLI_STAT_L1_NORM,
	DLI_STAT_L2_NORM,
	DLI_STAT_CUR_AMAX,
	DLI_STAT_DYNAMIC_RANGE,
	DLI_STAT_NAN_COUNT,
	DLI_STAT_INF_COUNT,
	DLI_STAT_ZERO_PCT,
	/* From the FP8 quantize-and-compare pass. */
	DLI_STAT_UNDERFLOWS_PCT,
	DLI_STAT_OVERFLOWS_PCT,
	DLI_STAT_SCALE_INV_MIN,
	DLI_STAT_SCALE_INV_MAX,
	DLI_STAT_MSE,
	DLI_STAT_COS_SIM,
	DLI_STAT_SQNR_DB,
	DLI_STAT_COUNT
};

/* Everything a pass keeps so that two records merge exactly (microbatches, shards, ranks) and every
 * statistic can be finalized from the merge. Plain data: copy, send over the wire as is.
 *
 * The record may grow at its end in a later minor version (a new statistic's terms). A module
 * therefore passes its own sizeof(struct dli_stats_record) to the host's sized calls
 * (stats_acc_read_sized, stats_value_sized in dlinspect/plugin.h), which never write or read past
 * it; DLI_STATS_RECORD_SIZE_1_0 is what the unsized 1.0 calls use forever. */
struct dli_stats_record {
	uint64_t count;      /* elements */
	uint64_t nan_count;
	uint64_t inf_count;
	uint64_t zero_count; /* +0 and -0 */
	double min, max;     /* over the non-NaN elements (+inf / -inf while there are none) */
	double amax;         /* max |x| over the non-NaN elements (0 while there are none) */
	double min_nonzero_abs; /* min |x| over nonzero non-NaN elements (+inf while there are none) */
	double sum;          /* sum x (the mean is sum / count: an inf element gives an inf mean) */
	double sum_abs;      /* sum |x| */
	double sum_sq;       /* sum x^2 */
	double mean, m2;     /* running mean and sum of squared deviations, merged with Chan's formula */

	/* The FP8 quantize-and-compare terms; zero unless an FP8 pass ran. */
	uint64_t fp8_count;  /* elements compared */
	uint64_t underflows; /* nonzero x that quantize to +-0 */
	uint64_t overflows;  /* |x * scale| > the format's finite max (saturated) */
	double err_sq;       /* sum (x - dq)^2, dq = dequant(quant(x)) */
	double dot;          /* sum x * dq */
	double dq_sq;        /* sum dq^2 */
	double x_sq;         /* sum x^2 over the compared elements */
	double scale_inv_min, scale_inv_max; /* over the scale_invs seen (nonzero ones for min) */
};

/* The record as ABI 1.0 defined it. */
#define DLI_STATS_RECORD_SIZE_1_0 (offsetof(struct dli_stats_record, scale_inv_max) + sizeof(double))

/* An FP8 quantization to compare a tensor against: x -> round-to-nearest-even(x * scale),
 * saturated to the format's finite max; NaN stays NaN (docs/statistics.md). */
struct dli_fp8_spec {
	enum dli_dtype format; /* DLI_DTYPE_F8E4M3 or DLI_DTYPE_F8E5M2 */
	float scale;           /* used when current_scaling is 0 */
	int current_scaling;   /* nonzero: scale = fp8_max / amax / 2^margin from the tensor itself */
	double margin;
};

/* A block-scaled quantization (docs/block-scaling.md), for the host table's stats_add_block and
 * block_fake_quant. Sized: a caller sets `size` to its sizeof, so that the struct may grow. */
enum dli_block_recipe {
	DLI_BLOCK_MXFP8 = 1, /* 32 elements per E8M0 scale, TransformerEngine's MXFP8 */
	/* TransformerEngine's Float8BlockScaling: fp32 scales, 1 x 128 blocks (128 x 1 for the
	 * column-wise copy) or 128 x 128 blocks (the same in both copies) */
	DLI_BLOCK_FP8_1D = 2,
	DLI_BLOCK_FP8_2D = 3,
	/* TransformerEngine's NVFP4: E2M1 elements, an E4M3 scale per 1 x 16 block (16 x 1 for the
	 * column-wise copy) or per 16 x 16 tile, an fp32 global scale; `format` is not read */
	DLI_BLOCK_NVFP4 = 4,
	DLI_BLOCK_NVFP4_2D = 5,
};

struct dli_block_spec {
	uint32_t size;         /* sizeof(struct dli_block_spec) of the caller */
	int recipe;            /* enum dli_block_recipe */
	enum dli_dtype format; /* the elements' format: DLI_DTYPE_F8E4M3 or DLI_DTYPE_F8E5M2 */
	int columnwise;        /* nonzero: blocks run down the columns (the column-wise copy) */
	int pow2_scales;       /* FP8 block scaling: scales rounded down to powers of two */
	/* ---- ABI 1.3: TransformerEngine's NVFP4 recipe options, read by dli_block_fake_quant for
	 * DLI_BLOCK_NVFP4 / DLI_BLOCK_NVFP4_2D only; a caller whose `size` stops before them gets
	 * them all off (docs/block-scaling.md, "NVFP4 recipe options"). ---- */
	/* Nonzero: the E2M1 codes round stochastically (the recipe's gradients), with 8 random bits
	 * per element drawn from `seed` and the element's index in its copy; the same seed gives
	 * the same result. */
	int stochastic_rounding;
	uint64_t seed;
	/* Nonzero: the random Hadamard transform (16 x 16, with a sign vector) along the 1-D
	 * blocks before the cast (the recipe's column-wise copies of activations and gradients),
	 * undone after it, so the values come back in the tensor's own basis. Needs DLI_BLOCK_NVFP4
	 * and a multiple of 16 elements along the blocks (the rows when `columnwise`). */
	int rht;
	uint64_t rht_seed; /* the sign vector: 0 TransformerEngine's fixed one, else from this seed */
};

/* ABI 1.4: one copy (row-wise or column-wise) of a block-scaled tensor as the host's quantizer made
 * it (TransformerEngine's MXFP8Tensor, Float8BlockwiseQTensor, NVFP4Tensor): the element codes and
 * one scale per block, wherever the host's layout puts them. The tensor is the logical matrix
 * rows x cols (cols the high-precision tensor's last dimension, rows the product of the others);
 * element (i, j) belongs to block (i / bh, j / bw), bh x bw the recipe's block in this copy:
 * MXFP8 1 x 32 (column-wise 32 x 1), DLI_BLOCK_FP8_1D 1 x 128 (128 x 1), DLI_BLOCK_FP8_2D
 * 128 x 128, DLI_BLOCK_NVFP4 1 x 16 (16 x 1), DLI_BLOCK_NVFP4_2D 16 x 16. Both layouts are given
 * as strides in elements, any non-negative value, so that transposed copies and padded scale
 * matrices need no copy; dli_block_quantized_te fills them for TransformerEngine's layouts.
 * Everything is borrowed for the call it is passed to. */
struct dli_block_quantized_tensor {
	uint32_t size;         /* sizeof(struct dli_block_quantized_tensor) of the host that filled it */
	int recipe;            /* enum dli_block_recipe */
	enum dli_dtype format; /* codes: DLI_DTYPE_F8E4M3 or F8E5M2; NVFP4: DLI_DTYPE_U8 (E2M1) */
	int columnwise;        /* nonzero: the column-wise copy (blocks run down the columns) */
	int64_t rows, cols;
	/* Code of element (i, j): byte data[i * data_strides[0] + j * data_strides[1]]; NVFP4
	 * packs two codes a byte, so there the index k = i * s0 + j * s1 counts codes: byte k / 2,
	 * low nibble for even k (TransformerEngine's packing). */
	const void *data;
	int64_t data_strides[2];
	/* Scale of block (bi, bj): scale_inv[bi * scale_strides[0] + bj * scale_strides[1]], an
	 * E8M0 byte (MXFP8: 2^(e - 127)), an fp32 scale_inv (FP8 block scaling) or an E4M3 byte
	 * (NVFP4). Entries outside the blocks (a padded layout's padding) are never read. */
	const void *scale_inv;
	int64_t scale_strides[2];
	/* NVFP4 only: the copy's fp32 global amax (TransformerEngine's _amax_rowwise or
	 * _amax_columnwise): an element is e2m1 * scale * amax / (6 * 448). NULL otherwise. */
	const float *amax;
	/* Where data, scale_inv and amax are (one memory space for the three). Only host memory is
	 * read for now: a copy in CUDA memory fails the statistics that would read it, with the
	 * reason, and leaves the call's other features alone. dli_block_quantized_te: the host. */
	struct dli_device device;
};

/* The descriptor of one copy in TransformerEngine's layout (the shapes of its quantizers'
 * get_scale_shape and get_columnwise_shape): MXFP8 codes rows x cols in both copies, scales
 * [roundup(rows, 128), roundup(ceil(cols / 32), 4)] row-wise and [roundup(ceil(rows / 32), 4),
 * roundup(cols, 128)] column-wise; FP8 block scaling's column-wise codes transposed (cols x rows),
 * scales [ceil(cols / 128), roundup(rows, 4)] (1-D row-wise: transposed), [ceil(rows / 128),
 * roundup(cols, 4)] (1-D column-wise), [ceil(rows / 128), roundup(ceil(cols / 128), 4)] (2-D
 * row-wise; column-wise its transpose's); NVFP4's column-wise codes transposed, two a byte, rows
 * padded to whole bytes, scales [roundup(R, 128), roundup(ceil(C / 16), 4)] for the copy's R x C
 * (2-D: each row of a tile holds the tile's scale). Compact scales only: a copy whose
 * _with_gemm_swizzled_scales is set (its quantizer's optimize_for_gemm, which TransformerEngine's
 * modules set for inputs and output gradients) has MXFP8 or NVFP4 scales in cuBLAS's 128 x 4
 * tiles, which no strides describe, and the struct has no place for a row-scaled NVFP4 copy's
 * per-row amax nor for an E4M3 scale bound other than 448 (nvfp4_e4m3_max 256): such copies give
 * wrong statistics and must not be passed (docs/block-scaling.md). */
static inline struct dli_block_quantized_tensor
dli_block_quantized_te(int recipe, enum dli_dtype format, int columnwise, int64_t rows, int64_t cols,
		       const void *data, const void *scale_inv, const float *amax)
{
	struct dli_block_quantized_tensor q;
#define DLI_RUP_(a, m) (((a) + (m) - 1) / (m) * (m))
	memset(&q, 0, sizeof q);
	q.size = sizeof q;
	q.recipe = recipe;
	q.format = format;
	q.columnwise = columnwise != 0;
	q.rows = rows;
	q.cols = cols;
	q.data = data;
	q.scale_inv = scale_inv;
	q.amax = amax;
	/* Row-major codes by default; transposed copies below. */
	q.data_strides[0] = cols;
	q.data_strides[1] = 1;
	switch (recipe) {
	case DLI_BLOCK_MXFP8:
		q.scale_strides[0] = columnwise ? DLI_RUP_(cols, 128) : DLI_RUP_((cols + 31) / 32, 4);
		q.scale_strides[1] = 1;
		break;
	case DLI_BLOCK_FP8_1D:
		q.scale_strides[0] = columnwise ? DLI_RUP_(cols, 4) : 1;
		q.scale_strides[1] = columnwise ? 1 : DLI_RUP_(rows, 4);
		break;
	case DLI_BLOCK_FP8_2D:
		q.scale_strides[0] = columnwise ? 1 : DLI_RUP_((cols + 127) / 128, 4);
		q.scale_strides[1] = columnwise ? DLI_RUP_((rows + 127) / 128, 4) : 1;
		break;
	case DLI_BLOCK_NVFP4:
	case DLI_BLOCK_NVFP4_2D: {
		int64_t tile = recipe == DLI_BLOCK_NVFP4_2D ? 16 : 1;
		int64_t inner = DLI_RUP_(((columnwise ? rows : cols) + 15) / 16, 4);
		q.data_strides[0] = columnwise ? 1 : DLI_RUP_(cols, 2);
		q.data_strides[1] = columnwise ? DLI_RUP_(rows, 2) : 1;
		q.scale_strides[0] = columnwise ? 1 : tile * inner;
		q.scale_strides[1] = columnwise ? tile * inner : 1;
		break;
	}
	default:
		break;
	}
	if (columnwise && (recipe == DLI_BLOCK_FP8_1D || recipe == DLI_BLOCK_FP8_2D)) {
		q.data_strides[0] = 1;
		q.data_strides[1] = rows;
	}
#undef DLI_RUP_
	return q;
}

#ifdef __cplusplus
}
#endif

#endif
