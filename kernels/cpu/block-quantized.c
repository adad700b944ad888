/* A block-scaled copy the host quantized (struct dli_block_quantized_tensor) against its
 * high-precision tensor: each block dequantized with its own scale, the FP8 terms summed as for a
 * per-tensor host copy (dli_cpu_fp8_compare_quantized). Scalar: the host's layouts vary (padded,
 * transposed, packed codes), and this pass runs only where the host trains in the recipe, once
 * per inspected tensor. The rules are docs/block-scaling.md's, "The host's own tensor". */
#include <errno.h>
#include <math.h>
#include <stdint.h>

#include "cpu-private.h"
#include "load-private.h"

/* The block of one copy: bh x bw elements. */
static void block_shape(int recipe, bool columnwise, int64_t *bh, int64_t *bw)
{
	int64_t len = recipe == DLI_BLOCK_MXFP8		 ? DLI_MX_BLOCK
		      : recipe == DLI_BLOCK_FP8_1D || recipe == DLI_BLOCK_FP8_2D ? DLI_FP8B_BLOCK
										 : DLI_NVFP4_BLOCK;
	bool square = recipe == DLI_BLOCK_FP8_2D || recipe == DLI_BLOCK_NVFP4_2D;
	*bh = square || columnwise ? len : 1;
	*bw = square || !columnwise ? len : 1;
}

static bool is_nvfp4(int recipe)
{
	return recipe == DLI_BLOCK_NVFP4 || recipe == DLI_BLOCK_NVFP4_2D;
}

/* Below 2^62, an index, a shape's element count and a block count plus its block stay far from
 * int64_t's overflow. */
static const int64_t index_limit = INT64_C(1) << 62;

/* The largest index i * s0 + j * s1 over the matrix, or -1 when it passes 2^62. */
static int64_t last_index(int64_t rows, int64_t cols, const int64_t s[2])
{
	const int64_t lim = index_limit;
	if (s[0] < 0 || s[1] < 0)
		return -1;
	if ((rows > 1 && s[0] > lim / (rows - 1)) || (cols > 1 && s[1] > lim / (cols - 1)))
		return -1;
	int64_t a = (rows - 1) * s[0], b = (cols - 1) * s[1];
	return a > lim - b ? -1 : a + b;
}

int dli_cpu_block_quantized_check(const struct dli_block_quantized_tensor *q, const char **why)
{
	static const char *const reasons[] = {
		"its size field is older than ABI 1.4's struct",
		"an unknown recipe",
		"an FP8 recipe needs codes of format f8e4m3 or f8e5m2",
		"NVFP4 codes have format u8 (two E2M1 codes a byte)",
		"a negative shape",
		"a shape of more than 2^62 elements",
		"no data or no scale_inv",
		"NVFP4 needs the copy's amax",
		"a negative stride, or strides reaching beyond 2^62 elements",
		"not in host memory",
	};
	int k = -1;
	int64_t bh, bw;

	if (q->size < sizeof(*q))
		k = 0;
	else if (q->device.type != DLI_DEVICE_CPU)
		k = 9;
	else if (q->recipe < DLI_BLOCK_MXFP8 || q->recipe > DLI_BLOCK_NVFP4_2D)
		k = 1;
	else if (!is_nvfp4(q->recipe) && q->format != DLI_DTYPE_F8E4M3 &&
		 q->format != DLI_DTYPE_F8E5M2)
		k = 2;
	else if (is_nvfp4(q->recipe) && q->format != DLI_DTYPE_U8)
		k = 3;
	else if (q->rows < 0 || q->cols < 0)
		k = 4;
	/* Zero strides keep every code index small, so the strides alone do not bound rows * cols,
	 * which indexes hp. */
	else if (q->rows > index_limit || q->cols > index_limit ||
		 (q->rows && q->cols > index_limit / q->rows))
		k = 5;
	else if (q->rows && q->cols && (!q->data || !q->scale_inv))
		k = 6;
	else if (is_nvfp4(q->recipe) && !q->amax)
		k = 7;
	else if (q->rows && q->cols) {
		block_shape(q->recipe, q->columnwise, &bh, &bw);
		if (last_index(q->rows, q->cols, q->data_strides) < 0 ||
		    last_index((q->rows + bh - 1) / bh, (q->cols + bw - 1) / bw, q->scale_strides) < 0)
			k = 8;
	}
	if (k >= 0 && why)
		*why = reasons[k];
	return k >= 0 ? -EINVAL : 0;
}

struct copy {
	const struct dli_block_quantized_tensor *q;
	bool nvfp4;
	float fmax; /* the largest code magnitude: 448, 57344 or 6 */
	float table[256]; /* code -> value (NVFP4: the 16 E2M1 values) */
};

/* What block (bi, bj)'s codes are multiplied by; *counts: whether it joins scale_inv_min/max,
 * which leave out what a padded layout holds in its padding (the E8M0 code 0, an fp32 zero, an
 * E4M3 zero) and NaN. */
static float block_scale(const struct copy *c, int64_t bi, int64_t bj, bool *counts)
{
	const struct dli_block_quantized_tensor *q = c->q;
	int64_t k = bi * q->scale_strides[0] + bj * q->scale_strides[1];
	const uint8_t *b = q->scale_inv;
	float s;
	bool padding;
	switch (q->recipe) {
	case DLI_BLOCK_MXFP8:
		s = (float)dli_mx_scale_inv(b[k]);
		padding = b[k] == 0;
		break;
	case DLI_BLOCK_FP8_1D:
	case DLI_BLOCK_FP8_2D:
		s = ((const float *)q->scale_inv)[k];
		padding = s == 0.0f;
		break;
	default:
		s = dli_nvfp4_dequant_scale(b[k], *q->amax);
		padding = (b[k] & 0x7f) == 0;
		break;
	}
	*counts = !padding && !isnan(s);
	return s;
}

static uint8_t code_at(const struct copy *c, int64_t i, int64_t j)
{
	const struct dli_block_quantized_tensor *q = c->q;
	int64_t k = i * q->data_strides[0] + j * q->data_strides[1];
	const uint8_t *d = q->data;
	if (!c->nvfp4)
		return d[k];
	return k & 1 ? d[k >> 1] >> 4 : d[k >> 1] & 0x0f;
}

int dli_cpu_block_compare_quantized(const void *hp, enum dli_dtype hp_dtype,
				    const struct dli_block_quantized_tensor *q,
				    struct dli_stats_record *out)
{
	struct copy c = {.q = q};
	int64_t bh, bw;
	uint64_t count = 0, under = 0, over = 0;
	double err = 0, dot = 0, dqs = 0, xs = 0, lo = INFINITY, hi = 0;

	if (!out || !q || dli_cpu_block_quantized_check(q, NULL))
		return -EINVAL;
	if (hp && hp_dtype != DLI_DTYPE_F32 && hp_dtype != DLI_DTYPE_F16 &&
	    hp_dtype != DLI_DTYPE_BF16)
		return -EINVAL;
	c.nvfp4 = is_nvfp4(q->recipe);
	c.fmax = c.nvfp4 ? 6.0f : dli_fp8_max(q->format);
	for (int v = 0; v < (c.nvfp4 ? 16 : 256); v++)
		c.table[v] = c.nvfp4 ? dli_nvfp4_decode((uint8_t)v)
				     : dli_fp8_decode((uint8_t)v, q->format);
	uint8_t zero_mask = c.nvfp4 ? 0x7 : 0x7f; /* a code of magnitude 0 */
	block_shape(q->recipe, q->columnwise, &bh, &bw);

	dli_stats_record_init(out);
	/* An empty matrix has no blocks: no walk down its rows (up to 2^62 of them). */
	if (!q->rows || !q->cols)
		return 0;
	for (int64_t r0 = 0; r0 < q->rows; r0 += bh) {
		int64_t r1 = r0 + bh < q->rows ? r0 + bh : q->rows, bi = r0 / bh;
		for (int64_t c0 = 0; c0 < q->cols; c0 += bw) {
			int64_t c1 = c0 + bw < q->cols ? c0 + bw : q->cols, bj = c0 / bw;
			bool counts;
			float s = block_scale(&c, bi, bj, &counts);
			if (counts) {
				lo = s < lo ? s : lo;
				hi = s > hi ? s : hi;
			}
			if (!hp)
				continue;
			/* The saturation the host's cast must have done, in double (exact for the
			 * powers of two of MXFP8). */
			double limit = (double)c.fmax * s;
			for (int64_t i = r0; i < r1; i++)
				for (int64_t j = c0; j < c1; j++) {
					float x = load(hp, hp_dtype, i * q->cols + j);
					if (!isfinite(x))
						continue;
					uint8_t code = code_at(&c, i, j);
					/* A NaN or inf code (or scale) from a finite x stays in the
					 * sums: the NaN mse it gives is the host's bug made visible. */
					double dq = (float)(c.table[code] * s), d = x - dq;
					count++;
					under += x != 0.0f && (code & zero_mask) == 0;
					over += fabs((double)x) > limit;
					err += d * d;
					dot += x * dq;
					dqs += dq * dq;
					xs += (double)x * x;
				}
		}
	}
	out->scale_inv_min = lo;
	out->scale_inv_max = hi;
	out->fp8_count = count;
	out->underflows = under;
	out->overflows = over;
	out->err_sq = err;
	out->dot = dot;
	out->dq_sq = dqs;
	out->x_sq = xs;
	return 0;
}
