/* Statistics and FP8 kernels for host memory, and the record arithmetic shared with the CUDA
 * backend. Linked into libdlinspect; reached by plugins through the host table only. */
#ifndef DLI_KERNELS_PRIVATE_H
#define DLI_KERNELS_PRIVATE_H

#include <stdbool.h>
#include <stdint.h>

#include <dlinspect/stats.h>
#include <dlinspect/tensor.h>

/* ---- Records (kernels/record.c) ---- */

/* The empty record: counts 0, min +inf, max -inf, amax 0, min_nonzero_abs +inf, scale_inv_min
 * +inf, scale_inv_max 0 (so that merging it changes nothing). */
void dli_stats_record_init(struct dli_stats_record *r);
/* into = into (+) from, exactly: counts add, extrema combine, (mean, m2) by Chan's formula. */
void dli_stats_merge(struct dli_stats_record *into, const struct dli_stats_record *from);
/* Adds only the FP8 quantize-and-compare counts and sums (fp8_count .. x_sq) of `from`. */
void dli_stats_add_fp8_terms(struct dli_stats_record *into, const struct dli_stats_record *from);
/* A finalized statistic per docs/statistics.md (NaN propagates into min/max/cur_amax/dynamic
 * range when a NaN was seen; std/var of fewer than 2 elements, and FP8 stats without an FP8 pass,
 * are NaN). */
double dli_stats_value(const struct dli_stats_record *r, enum dli_stat stat);
/* "min", "max", "mean", "std", "var", "l1_norm", "l2_norm", "cur_amax", "dynamic_range",
 * "nan_count", "inf_count", "zero%", "underflows%", "overflows%", "scale_inv_min", "scale_inv_max",
 * "mse", "cos_sim", "sqnr_db"; NULL when out of range. */
const char *dli_stat_name(enum dli_stat stat);
/* The stat of a name, or -1. */
int dli_stat_from_name(const char *name);

/* ---- CPU passes (kernels/cpu/) ---- */

enum dli_simd {
	DLI_SIMD_AUTO = 0, /* the best the CPU supports (or $DLINSPECT_SIMD: scalar, avx2, avx512) */
	DLI_SIMD_SCALAR,
	DLI_SIMD_AVX2,
	DLI_SIMD_AVX512,
};

struct dli_cpu_options {
	enum dli_simd simd;
	int threads; /* 0: $DLINSPECT_THREADS, else the cores this process may run on */
};

/* The best path this CPU supports, and its name ("scalar", "avx2", "avx512"). */
enum dli_simd dli_simd_detect(void);
const char *dli_simd_name(enum dli_simd simd);

/* One pass over n elements (f32, f16, bf16, f8e4m3, f8e5m2; 64-bit count, any n including 0)
 * filling every field up to m2 of *out (which it initializes). Large inputs are split across
 * threads. `o` may be NULL (defaults). -EINVAL for another dtype, -ENOTSUP for a SIMD path this CPU
 * lacks. */
int dli_cpu_stats(const void *data, enum dli_dtype dtype, int64_t n, const struct dli_cpu_options *o,
		  struct dli_stats_record *out);
/* The same pass, which also gives *finite_sq (NaN on failure): the sum of x^2 over the finite
 * elements, what the FP8 compares' x_sq sums (NaN and infinities left out), for their sum_sq
 * argument. out->sum_sq itself (the same double) when that is finite, as it is where the tensor
 * holds no NaN or infinity. Else, on the AVX2 path, the blocks' sums (the integer pass over bf16
 * blocks holding NaN or infinities sums the finite squares in float lanes, as the clean blocks
 * do), NaN, "not known", where such a block is not bf16 or its sum lies outside its float lanes'
 * range (kernels/cpu/stats-avx2.c); NaN on the other paths (scalar, AVX-512). Not a field of the
 * record, whose layout is public. */
int dli_cpu_stats_finite_sq(const void *data, enum dli_dtype dtype, int64_t n,
			    const struct dli_cpu_options *o, struct dli_stats_record *out,
			    double *finite_sq);

/* ---- FP8 (kernels/cpu/fp8.c) ---- */

/* 448 for E4M3, 57344 for E5M2, 0 for anything else. */
float dli_fp8_max(enum dli_dtype format);
/* Round-to-nearest-even cast of x (already scaled) to the format's bits, saturating to the finite
 * max; NaN stays NaN (E4M3: 0x7f/0xff; E5M2: a quiet NaN). */
uint8_t dli_fp8_encode(float x, enum dli_dtype format);
float dli_fp8_decode(uint8_t bits, enum dli_dtype format);
/* fp8_max / amax / 2^margin; 1 for an amax of 0, inf or NaN; FLT_MAX for an infinite result. */
float dli_fp8_scale(float amax, enum dli_dtype format, double margin);

/* The fused quantize-and-compare pass: for each of n elements x (f32, f16, bf16),
 * dq = decode(encode(x * scale)) / scale, and the FP8 terms of *out are filled (fp8_count,
 * underflows, overflows, err_sq, dot, dq_sq, x_sq; scale_inv_min/max = 1/scale). Nothing is
 * written but *out (which it initializes). */
int dli_cpu_fp8_compare(const void *data, enum dli_dtype dtype, int64_t n, enum dli_dtype format,
			float scale, const struct dli_cpu_options *o, struct dli_stats_record *out);
/* The same, for a caller that has the sum of x^2 over the n elements' finite ones (the statistics
 * pass's, dli_cpu_stats_finite_sq, which runs first anyway; NaN when it has not; a sum that is
 * not finite counts as not given): the SIMD paths then leave that sum out of the bf16 fast
 * steps, which are bound by FMAs, and x_sq is sum_sq.
 * The other terms as dli_cpu_fp8_compare gives them, within its tolerance (the float lanes' 1e-5
 * and sum_sq's own accuracy). */
int dli_cpu_fp8_compare_sum_sq(const void *data, enum dli_dtype dtype, int64_t n,
			       enum dli_dtype format, float scale, double sum_sq,
			       const struct dli_cpu_options *o, struct dli_stats_record *out);

/* The options a per-tensor comparison should run with, given the statistics pass's min nonzero |x|:
 * `o` itself, or (in *scratch) o with the scalar path. The SIMD paths sum (x * scale)^2 and the
 * errors in float lanes, where an element below 2^-63 once scaled loses its whole error (x^2, it
 * underflows FP8) to float underflow: a tensor whose range spans more than about 2^72 (an outlier
 * of 1e30 beside ones) would log mse 0. Such a tensor is compared in double. */
const struct dli_cpu_options *dli_fp8_compare_opts(double min_nonzero_abs, float scale,
						   const struct dli_cpu_options *o,
						   struct dli_cpu_options *scratch);

/* The same terms for a tensor the host quantized: hp (n elements of hp_dtype, may be NULL: then
 * only scale_inv_min/max are filled) against q[i] decoded and multiplied by scale_inv[0]. */
int dli_cpu_fp8_compare_quantized(const void *hp, enum dli_dtype hp_dtype, const uint8_t *q,
				  enum dli_dtype format, const float *scale_inv, int64_t n_scale_inv,
				  int64_t n, const struct dli_cpu_options *o,
				  struct dli_stats_record *out);

/* ---- A block-scaled copy the host quantized (kernels/cpu/block-quantized.c) ---- */

/* 0 when the CPU pass can read `q` (a struct of ABI 1.4 or later in host memory, a known recipe with its
 * format, a shape, pointers, strides whose indices stay below 2^62); -EINVAL with *why (static
 * text, when why is non-NULL) otherwise. Does not compare the size with a tensor. */
int dli_cpu_block_quantized_check(const struct dli_block_quantized_tensor *q, const char **why);
/* The FP8 terms of hp (q->rows x q->cols, row-major, f32/f16/bf16; NULL: scale_inv_min/max
 * only) against q's codes, each block dequantized with its own scale; scale_inv_min/max over the
 * blocks' scales, leaving out what padding holds (E8M0 code 0, fp32 zero, E4M3 zero) and NaN.
 * Non-finite hp elements are left out, as dli_cpu_fp8_compare_quantized leaves them. Scalar,
 * one thread. */
int dli_cpu_block_compare_quantized(const void *hp, enum dli_dtype hp_dtype,
				    const struct dli_block_quantized_tensor *q,
				    struct dli_stats_record *out);

/* ---- MXFP8 (kernels/cpu/mx.c; docs/block-scaling.md) ---- */

/* Elements per block, along a row (row-wise copy) or down a column (column-wise copy). */
#define DLI_MX_BLOCK 32

/* float(1 / fp8_max) of an element format (E4M3, E5M2); 0 for another. */
float dli_mx_max_rcp(enum dli_dtype format);
/* The E8M0 code of a block of that amax (max |x| over its non-NaN elements): float(amax *
 * float(1 / fp8_max)) rounded up to a power of two; 0 for 0 (and up to 2^-127), 0xfe for an
 * infinite amax, 0xff for NaN. */
uint8_t dli_mx_e8m0(float amax, enum dli_dtype format);
/* What the block's elements are multiplied by before the FP8 cast: 2^(127 - e) as a float
 * (2^-127 for 0xfe, NaN for 0xff). */
float dli_mx_rcp(uint8_t e);
/* The scale_inv a code stands for, 2^(e - 127) (NaN for 0xff): dequant = decode(q) * this. */
double dli_mx_scale_inv(uint8_t e);
/* The padded scale matrix of a rows x cols tensor: row-wise [roundup(rows, 128),
 * roundup(ceil(cols / 32), 4)], column-wise [roundup(ceil(rows / 32), 4), roundup(cols, 128)]. */
void dli_mx_scale_shape(int64_t rows, int64_t cols, bool columnwise, int64_t *srows,
			int64_t *scols);

/* The three passes over a rows x cols row-major matrix of f32, f16 or bf16 (a tensor's last
 * dimension is cols, the rest rows). A block at the matrix's edge holds the elements there are
 * (fewer than 32); nothing is padded but the scales. Threads as the FP8 passes use them; `o` may
 * be NULL. -EINVAL for a bad dtype, format, shape or pointer, -ENOTSUP for a forced SIMD path
 * this CPU lacks, -ENOMEM. */
/* The FP8 terms of *out (initialized): fp8_count .. x_sq as dli_cpu_fp8_compare fills them, and
 * scale_inv_min/max over the blocks whose code is not 0. */
int dli_cpu_mx_compare(const void *data, enum dli_dtype dtype, int64_t rows, int64_t cols,
		       enum dli_dtype format, bool columnwise, const struct dli_cpu_options *o,
		       struct dli_stats_record *out);
/* The same, given the sum of x^2 over the tensor's finite elements (dli_cpu_stats_finite_sq's; NaN
 * when there is none, or it is not finite), as dli_cpu_fp8_compare_sum_sq is: the AVX2 fast steps on bf16 then
 * leave that sum out and x_sq is sum_sq; the other terms within the same tolerance. */
int dli_cpu_mx_compare_sum_sq(const void *data, enum dli_dtype dtype, int64_t rows, int64_t cols,
			      enum dli_dtype format, bool columnwise, double sum_sq,
			      const struct dli_cpu_options *o, struct dli_stats_record *out);
/* Codes q[rows * cols] (the data's layout) and E8M0 scales[srows * scols] (dli_mx_scale_shape,
 * row-major; the padding set to 0). */
int dli_cpu_mx_quantize(const void *data, enum dli_dtype dtype, int64_t rows, int64_t cols,
			enum dli_dtype format, bool columnwise, const struct dli_cpu_options *o,
			uint8_t *q, uint8_t *scales);
/* out[i] = decode(q[i]) * scale_inv of its block, in float (rows * cols values). */
int dli_cpu_mx_fake_quantize(const void *data, enum dli_dtype dtype, int64_t rows, int64_t cols,
			     enum dli_dtype format, bool columnwise,
			     const struct dli_cpu_options *o, float *out);

/* ---- FP8 block scaling (kernels/cpu/fp8-block.c; docs/block-scaling.md) ---- */

#define DLI_FP8B_BLOCK 128

/* TransformerEngine's block scale from a block's amax (NaN left out): fp8_max / amax as one float
 * division; 1 for an amax of 0, inf or NaN; the input type's largest finite value (f32, bf16, f16)
 * when the quotient is inf; with pow2, rounded down to a power of two (mantissa cleared). */
float dli_fp8b_scale(float amax, enum dli_dtype format, enum dli_dtype in_dtype, bool pow2);
/* The compare pass and the fake-quantizer over a rows x cols matrix (as the MXFP8 passes view a
 * tensor), scalar, threaded: blocks of 1 x 128 (dims 1), 128 x 1 (dims 1, columnwise: the
 * column-wise copy) or 128 x 128 (dims 2: both copies the same), partial at the edges; x * scale
 * cast with saturation, dequantized as decode(q) * float(1 / scale). scale_inv_min/max over every
 * block. -EINVAL, -ENOTSUP, -ENOMEM as the MXFP8 passes. */
int dli_cpu_fp8b_compare(const void *data, enum dli_dtype dtype, int64_t rows, int64_t cols,
			 enum dli_dtype format, int dims, bool columnwise, bool pow2,
			 const struct dli_cpu_options *o, struct dli_stats_record *out);
/* The same given the statistics pass's sum of finite x^2, as dli_cpu_mx_compare_sum_sq. */
int dli_cpu_fp8b_compare_sum_sq(const void *data, enum dli_dtype dtype, int64_t rows,
				int64_t cols, enum dli_dtype format, int dims, bool columnwise,
				bool pow2, double sum_sq, const struct dli_cpu_options *o,
				struct dli_stats_record *out);
int dli_cpu_fp8b_fake_quantize(const void *data, enum dli_dtype dtype, int64_t rows, int64_t cols,
			       enum dli_dtype format, int dims, bool columnwise, bool pow2,
			       const struct dli_cpu_options *o, float *out);

/* ---- Blockwise dynamic range (kernels/cpu/block-range.c; docs/statistics.md) ---- */

/* TransformerEngine's max_blockwise_dynamic_range of one orientation of a rows x cols matrix (f32,
 * f16, bf16 or FP8 codes, contiguous): blocks of `block_size` consecutive elements of the flattened matrix
 * (dims 1), of its flattened transpose (dims 1, columnwise), or block_size x block_size tiles (dims
 * 2, the same either way); the last block or the edge tiles partial. *out: the largest
 * log2(max |x| / min nonzero |x|) over the blocks, 0 for blocks of zeros, NaN when a block holds
 * NaN or only infinities. Scalar; chunks of whole blocks go to threads (blocks that run from one
 * column into the next: one thread). 0; -ENODATA for an empty matrix; -EINVAL for a bad argument;
 * -ENOMEM. */
int dli_cpu_block_range(const void *data, enum dli_dtype dtype, int64_t rows, int64_t cols,
			int64_t block_size, int dims, bool columnwise, double *out);

/* ---- NVFP4 (kernels/cpu/nvfp4.c; docs/block-scaling.md) ---- */

#define DLI_NVFP4_BLOCK 16

/* TransformerEngine's rules, one step each: the global encode scale S_enc from the tensor's amax
 * (2688 / amax as one float division; FLT_MAX for an infinite quotient; 1 for amax 0 or inf);
 * a block's E4M3 scale code from its amax; the block's element multiplier
 * min(1 / (scale * float(1 / S_enc)), FLT_MAX); the E2M1 code (0..15, bit 3 the sign) of a scaled
 * value, nearest-even, saturating to 6, NaN to 0x7; its value; the dequantization factor
 * scale * amax * float(1 / 2688). */
float dli_nvfp4_global_scale(float amax);
uint8_t dli_nvfp4_block_scale(float block_amax, float global_scale);
float dli_nvfp4_block_encode(uint8_t scale, float global_scale);
uint8_t dli_nvfp4_encode(float s);
float dli_nvfp4_decode(uint8_t code);
float dli_nvfp4_dequant_scale(uint8_t scale, float amax);
/* The padded E4M3 scale matrix: [roundup(R, 128), roundup(ceil(C / 16), 4)] where R x C is the
 * copy (rows x cols row-wise, cols x rows column-wise: the transpose). */
void dli_nvfp4_scale_shape(int64_t rows, int64_t cols, bool columnwise, int64_t *srows,
			   int64_t *scols);
/* The passes over a rows x cols row-major matrix of f32, f16 or bf16 (scalar but the row-wise
 * compare of f32 and bf16, which has an AVX2 path), threaded as the MXFP8 passes: dims 1 gives
 * 1 x 16 blocks (16 x 1 with columnwise), dims 2 16 x 16 tiles (both copies the same values).
 * Blocks at the edges hold what there is. compare fills the FP8 terms (fp8_count .. x_sq;
 * scale_inv_min/max over the dequantization factors of blocks whose scale is not 0); quantize
 * writes one E2M1 code a byte (unpacked, in the data's layout), the padded scales (0 in the
 * padding) and the tensor's amax; fake writes decode(q) * factor in float. -EINVAL, -ENOTSUP,
 * -ENOMEM as the MXFP8 passes. */
int dli_cpu_nvfp4_compare(const void *data, enum dli_dtype dtype, int64_t rows, int64_t cols,
			  int dims, bool columnwise, const struct dli_cpu_options *o,
			  struct dli_stats_record *out);
/* The compare given the tensor's amax (max |x| with NaN left out, as dli_cpu_stats' record has
 * it; not NaN, not negative, else -EINVAL), so that it reads the tensor once: the record is the
 * one dli_cpu_nvfp4_compare gives when amax is the tensor's. sum_sq and zeros: the sum of x^2
 * over the finite elements (dli_cpu_stats_finite_sq's) and the count of zeros (+0 and -0, the
 * record's zero_count), or NaN and any count: given them, the AVX2 pass on bf16 leaves its sum of
 * x^2 out and counts zeros as underflows, then takes them off, so that x_sq is sum_sq, the counts
 * are exact and the other terms within the tolerance of its float sums, as
 * dli_cpu_mx_compare_sum_sq's are (a count the data contradict makes the pass run again counting
 * them itself). */
int dli_cpu_nvfp4_compare_known(const void *data, enum dli_dtype dtype, int64_t rows, int64_t cols,
				int dims, bool columnwise, float amax, double sum_sq, uint64_t zeros,
				const struct dli_cpu_options *o, struct dli_stats_record *out);
int dli_cpu_nvfp4_quantize(const void *data, enum dli_dtype dtype, int64_t rows, int64_t cols,
			   int dims, bool columnwise, const struct dli_cpu_options *o, uint8_t *q,
			   uint8_t *scales, float *amax);
int dli_cpu_nvfp4_fake_quantize(const void *data, enum dli_dtype dtype, int64_t rows,
				int64_t cols, int dims, bool columnwise,
				const struct dli_cpu_options *o, float *out);

/* ---- Value histograms (kernels/cpu/histogram.c) ---- */

/* TensorFlow's default histogram buckets: limits -DBL_MAX, -p[773] .. -p[0], 0, p[0] .. p[773],
 * DBL_MAX with p[k] = 1e-12 * 1.1^k computed by repeated multiplication in double while below 1e20
 * (p[773] ~ 9.92e19). Bucket k holds the values in (limit[k-1], limit[k]]: bucket 0 holds
 * -inf (and -DBL_MAX), the bucket of limit 0 holds +-0 and every value in (-1e-12, 0], the last
 * bucket also holds +inf. */
#define DLI_HISTOGRAM_BUCKETS 1551

/* The DLI_HISTOGRAM_BUCKETS ascending limits (static, computed once; never freed). */
const double *dli_histogram_limits(void);

/* Counts the n elements (f32, f16, bf16, f8e4m3, f8e5m2) into counts[0 .. DLI_HISTOGRAM_BUCKETS),
 * which it zeroes first. NaNs go in no bucket (the statistics pass counts them), so the counts add
 * up to n - nan_count. Exact for every input (subnormals and -0 included, whatever FTZ/DAZ the
 * thread has); large inputs are split across threads (o->threads; o->simd is not used: the bucket
 * search is integer code with no SIMD variant). `o` may be NULL. -EINVAL for another dtype. */
int dli_cpu_histogram(const void *data, enum dli_dtype dtype, int64_t n, const struct dli_cpu_options *o,
		      uint64_t *counts);

/* TensorFlow's encoding of a histogram: every run of empty buckets becomes one empty bucket with
 * the run's last limit, so each emitted bucket still spans (previous emitted limit, its limit].
 * Writes up to DLI_HISTOGRAM_BUCKETS entries to limits_out and counts_out; returns how many. */
size_t dli_histogram_compact(const uint64_t *counts, double *limits_out, double *counts_out);

#endif
