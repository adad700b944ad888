/* What TransformerEngine's NVFP4 recipe adds to the NVFP4 codec (kernels/cpu/nvfp4-recipe.c):
 * stochastic rounding from a seed, the 16 x 16 random Hadamard transform, and a fake-quantizer
 * that applies them. The rules are in docs/block-scaling.md ("NVFP4 recipe options"). Never
 * installed. */
#ifndef DLI_NVFP4_RECIPE_PRIVATE_H
#define DLI_NVFP4_RECIPE_PRIVATE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kernels-private.h"

/* TransformerEngine's fixed sign vector of the transform (get_wgrad_sign_vector in
 * transformer_engine/pytorch/custom_recipes/reference_nvfp4.py) as a mask: bit i set means row i
 * of the Hadamard matrix is negated. */
#define DLI_NVFP4_RHT_TE_SIGNS 0xD7E8u

/* The sign mask for a seed: TransformerEngine's for 0, else the low 16 bits of
 * dli_nvfp4_mix64(seed). */
uint32_t dli_nvfp4_rht_signs(uint64_t seed);

/* SplitMix64's output function of z (z + golden gamma, then two xor-shift-multiplies): the
 * counter-based generator of the random bits. */
uint64_t dli_nvfp4_mix64(uint64_t z);

/* The 8 random bits of element `index` (its position in its copy) under `seed`: the top byte of
 * mix64(mix64(seed) + index). */
uint8_t dli_nvfp4_rbits(uint64_t seed, uint64_t index);

/* The E2M1 code (0..15, bit 3 the sign) of a scaled value s, rounded stochastically with 8 random
 * bits: t = |s| + (rbits / 256) * step rounded to float, step the grid spacing at |s| (0.5 below
 * 2, 1 below 4, 2 above), then t floored to the grid of its own region, saturating to 6. So s
 * rounds up with probability floor(256 * f) / 256, f its fractional distance from the code below.
 * NaN gives 0x7 (+6) and an infinity +-6, as the nearest-even encode; the sign is kept. */
uint8_t dli_nvfp4_encode_sr(float s, uint8_t rbits);

/* The transform of 16 values x[0], x[stride], ... into y[0], y[ystride], ... (y may be x):
 * forward y_j = sum_i x_i * s_i * H_ij / 4, inverse x_i = s_i * sum_j H_ij * y_j / 4, with H the
 * Sylvester Hadamard matrix (H_ij = (-1)^popcount(i & j)) and s_i = -1 where bit i of `signs` is
 * set. Each sum is taken in double in index order, then divided by 4 and rounded to float once. */
void dli_nvfp4_rht16(const float *x, ptrdiff_t stride, uint32_t signs, bool inverse, float *y,
		     ptrdiff_t ystride);

/* The transform of a rows x cols row-major matrix (f32, f16 or bf16) into out (f32, same layout),
 * in groups of 16 along the rows (columnwise false: 16 consecutive elements of a row) or down the
 * columns (columnwise: 16 consecutive rows of a column, what the column-wise copy's 16 x 1 blocks
 * hold). -EINVAL when that length is not a multiple of 16, or for a bad dtype or pointer. */
int dli_cpu_nvfp4_rht(const void *data, enum dli_dtype dtype, int64_t rows, int64_t cols,
		      bool columnwise, uint32_t signs, bool inverse, float *out);

/* The recipe's options of one cast. */
struct dli_nvfp4_opts {
	bool
	    stochastic; /* stochastic rounding of the elements (the recipe's default for gradients) */
	uint64_t seed;  /* its random bits: dli_nvfp4_rbits(seed, index in the copy) */
	bool rht;       /* the transform along the 1-D blocks (the recipe's column-wise copies of
			  * activations and gradients, the wgrad GEMM's operands) */
	uint32_t signs; /* the transform's sign mask */
};

/* dli_cpu_nvfp4_fake_quantize with the recipe's options: with rht, the copy is transformed (in
 * float), its amax and blocks taken from the transformed values, and the dequantized values
 * transformed back, so that `out` is in the tensor's own basis (a GEMM on two such operands
 * equals the recipe's GEMM on the transformed ones up to float rounding: the transform is
 * orthogonal). With stochastic, the element codes round stochastically; the scales are those of
 * nearest-even. `opts` NULL or all off is dli_cpu_nvfp4_fake_quantize. The element of row r,
 * column c has index r * cols + c in the row-wise copy and in 16 x 16 tiles, c * rows + r in the
 * column-wise copy. -EINVAL (rht with dims 2, or a length not a multiple of 16; what
 * dli_cpu_nvfp4_fake_quantize refuses), -ENOTSUP, -ENOMEM. */
int dli_cpu_nvfp4_fake_quantize_opts(const void *data, enum dli_dtype dtype, int64_t rows,
				     int64_t cols, int dims, bool columnwise,
				     const struct dli_nvfp4_opts *opts,
				     const struct dli_cpu_options *o, float *out);

#endif
