/* TransformerEngine's FP8 block scaling (Float8BlockScaling) on the CPU, scalar: one fp32 scale per
 * block of 1 x 128 (row-wise), 128 x 1 (the column-wise copy of 1-D scaling) or 128 x 128 elements,
 * scale = fp8_max / amax rounded down to a power of two when asked; as a quantize-and-compare
 * pass and a fake-quantizer. The rules are in docs/block-scaling.md. */
#include <errno.h>
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#ifdef DLI_HAVE_X86_SIMD
#include <xmmintrin.h>
#endif

#include "cpu-private.h"
#include "fp8-private.h"
#include "mx-private.h"
#include "load-private.h"

float dli_fp8b_scale(float amax, enum dli_dtype format, enum dli_dtype in_dtype, bool pow2)
{
	float fmax = dli_fp8_max(format), s;
	uint32_t u;

	/* An amax of 0, inf or NaN: scale 1 (an epsilon of 0 changes nothing). */
	if (!(amax > 0.0f) || isinf(amax))
		return 1.0f;
	s = fmax / amax; /* one float division, rounded to nearest */
	if (isinf(s)) /* the input type's largest finite value */
		s = in_dtype == DLI_DTYPE_BF16 ? bits_float(0x7f7f0000)
		    : in_dtype == DLI_DTYPE_F16 ? 65504.0f
						: FLT_MAX;
	if (pow2) { /* the mantissa cleared: rounded down to a power of two */
		memcpy(&u, &s, sizeof(u));
		u &= 0xff800000u;
		memcpy(&s, &u, sizeof(s));
	}
	return s;
}

struct fb_pass {
	const void *data;
	enum dli_dtype dtype, format;
	int64_t rows, cols;
	int64_t brows, bcols; /* the block: 1 x 128, 128 x 1 or 128 x 128 */
	bool pow2;
	bool xs_known; /* compare: see struct mx_pass (mx-private.h) */
	enum dli_simd simd;
	float *out;                    /* fake quantization, or NULL */
	struct dli_stats_record *recs; /* compare: one per chunk */
	int64_t rows_per_chunk;        /* a multiple of brows */
	float table[256];
};

static void fb_block(const struct fb_pass *ps, int64_t r0, int64_t c0, struct dli_stats_record *rec)
{
	int64_t r1 = r0 + ps->brows < ps->rows ? r0 + ps->brows : ps->rows;
	int64_t c1 = c0 + ps->bcols < ps->cols ? c0 + ps->bcols : ps->cols;
	float fmax = dli_fp8_max(ps->format), amax = 0.0f, scale, si;
	uint64_t count = 0, under = 0, over = 0;
	double err = 0, dot = 0, dqs = 0, xs = 0;

	for (int64_t r = r0; r < r1; r++)
		for (int64_t c = c0; c < c1; c++) {
			float a = fabsf(load(ps->data, ps->dtype, r * ps->cols + c));
			if (a > amax) /* NaN left out, as fmaxf leaves it */
				amax = a;
		}
	scale = dli_fp8b_scale(amax, ps->format, ps->dtype, ps->pow2);
	/* TransformerEngine's 2-D kernel divides in float, its 1-D kernel in double (1.0 / scale)
	 * then rounds to float: the same for power-of-two scales, not always otherwise. */
	si = ps->brows == ps->bcols ? 1.0f / scale : (float)(1.0 / (double)scale);
	for (int64_t r = r0; r < r1; r++)
		for (int64_t c = c0; c < c1; c++) {
			int64_t i = r * ps->cols + c;
			float x = load(ps->data, ps->dtype, i), s = x * scale;
			uint8_t q = dli_fp8_encode(s, ps->format);
			double dq = (double)ps->table[q] * si, d;
			if (ps->out) {
				ps->out[i] = (float)dq;
				continue;
			}
			if (!isfinite(x))
				continue;
			count++;
			under += x != 0.0f && (q & 0x7f) == 0;
			over += fabsf(s) > fmax;
			d = x - dq;
			err += d * d;
			dot += x * dq;
			dqs += dq * dq;
			xs += (double)x * x;
		}
	if (ps->out)
		return;
	rec->fp8_count += count;
	rec->underflows += under;
	rec->overflows += over;
	rec->err_sq += err;
	rec->dot += dot;
	rec->dq_sq += dqs;
	rec->x_sq += xs;
	if (si < rec->scale_inv_min)
		rec->scale_inv_min = si;
	if (si > rec->scale_inv_max)
		rec->scale_inv_max = si;
}

struct fb_tile_ctx {
	const struct fb_pass *ps;
	struct dli_stats_record *rec;
};

static void fb_tile(void *ctx, int64_t r0, int64_t c0)
{
	const struct fb_tile_ctx *tc = ctx;
	fb_block(tc->ps, r0, c0, tc->rec);
}

/* Whether the compare runs the AVX2 strips. */
static bool fb_strips(const struct fb_pass *ps)
{
	return !ps->out && ps->pow2 && ps->brows == DLI_FP8B_BLOCK && ps->bcols == DLI_FP8B_BLOCK &&
	       (ps->simd == DLI_SIMD_AVX2 || ps->simd == DLI_SIMD_AVX512);
}

static void fb_chunk(void *arg, int64_t c, int worker)
{
	const struct fb_pass *ps = arg;
	int64_t r0 = c * ps->rows_per_chunk;
	int64_t r1 = r0 + ps->rows_per_chunk < ps->rows ? r0 + ps->rows_per_chunk : ps->rows;
	struct dli_stats_record scratch, *rec = ps->recs ? &ps->recs[c] : &scratch;
	unsigned csr = dli_csr_exact();
	(void)worker;
	dli_stats_record_init(rec);
#ifdef DLI_HAVE_X86_SIMD
	/* 128 x 128 tiles with power-of-two scales: the AVX2 strips (AVX-512 machines too) */
	if (fb_strips(ps)) {
		struct fb_tile_ctx tc = {ps, rec};
		struct dli_block_terms t = {.lo = INFINITY};
		for (int64_t r = r0; r < r1; r += ps->brows)
			dli_fb_strip_avx2(ps->data, ps->dtype, ps->cols, r,
					  r + ps->brows < r1 ? r + ps->brows : r1, ps->format,
					  ps->xs_known, fb_tile, &tc, &t);
		rec->fp8_count += t.count;
		rec->underflows += t.under;
		rec->overflows += t.over;
		rec->err_sq += t.err;
		rec->dot += t.dot;
		rec->dq_sq += t.dqs;
		rec->x_sq += t.xs;
		if (t.lo < rec->scale_inv_min)
			rec->scale_inv_min = t.lo;
		if (t.hi > rec->scale_inv_max)
			rec->scale_inv_max = t.hi;
	} else
#endif
		for (int64_t r = r0; r < r1; r += ps->brows)
			for (int64_t col = 0; col < ps->cols; col += ps->bcols)
				fb_block(ps, r, col, rec);
	dli_csr_restore(csr);
}

/* Every chunk of ps, the compare's terms into *rec (initialized here) unless it is NULL. */
static void fb_chunks(struct fb_pass *ps, int threads, int64_t n_chunks,
		      struct dli_stats_record *rec)
{
	if (threads > 1 && n_chunks > 1)
		dli_parallel_for(n_chunks, threads, fb_chunk, ps);
	else
		for (int64_t c = 0; c < n_chunks; c++)
			fb_chunk(ps, c, 0);
	if (!rec)
		return;
	dli_block_recs_merge(rec, ps->recs, n_chunks);
}

/* The compare (into rec, with sum_sq: see dli_cpu_fp8b_compare_sum_sq) or the fake-quantizer
 * (into out). */
static int fb_run(const void *data, enum dli_dtype dtype, int64_t rows, int64_t cols,
		  enum dli_dtype format, int dims, bool columnwise, bool pow2, double sum_sq,
		  const struct dli_cpu_options *o, float *out, struct dli_stats_record *rec)
{
	struct fb_pass *ps;
	int64_t n_chunks, rpc;
	int threads;

	if ((dtype != DLI_DTYPE_F32 && dtype != DLI_DTYPE_F16 && dtype != DLI_DTYPE_BF16) ||
	    (format != DLI_DTYPE_F8E4M3 && format != DLI_DTYPE_F8E5M2) || (dims != 1 && dims != 2) ||
	    rows < 0 || cols < 0 || (cols && rows > INT64_MAX / cols) || (rows * cols > 0 && !data))
		return -EINVAL;
	enum dli_simd simd = dli_cpu_simd(o);
	if (simd == DLI_SIMD_AUTO)
		return -ENOTSUP;
	if (rec)
		dli_stats_record_init(rec);
	if (rows * cols == 0)
		return 0;
	if (!(ps = calloc(1, sizeof(*ps))))
		return -ENOMEM;
	*ps = (struct fb_pass){.data = data, .dtype = dtype, .format = format, .rows = rows,
			       .cols = cols, .pow2 = pow2, .simd = simd, .out = out};
	ps->brows = dims == 2 || columnwise ? DLI_FP8B_BLOCK : 1;
	ps->bcols = dims == 2 || !columnwise ? DLI_FP8B_BLOCK : 1;
	for (int c = 0; c < 256; c++)
		ps->table[c] = dli_fp8_decode((uint8_t)c, format);
	rpc = DLI_STATS_CHUNK / cols;
	rpc = rpc < ps->brows ? ps->brows : rpc / ps->brows * ps->brows;
	ps->rows_per_chunk = rpc;
	n_chunks = (rows + rpc - 1) / rpc;
	if (rec && !(ps->recs = calloc((size_t)n_chunks, sizeof(*ps->recs)))) {
		free(ps);
		return -ENOMEM;
	}
	/* Only the AVX2 strips' fast steps on bf16 leave anything out (mx-avx2-private.h's
	 * step_bf16_normal): f32 and f16 are bound by memory, not by the FMAs. */
	ps->xs_known = rec && isfinite(sum_sq) && dtype == DLI_DTYPE_BF16 && fb_strips(ps);
	threads = rows * cols > ((int64_t)1 << 20) ? dli_cpu_threads(o) : 1;
	fb_chunks(ps, threads, n_chunks, rec);
	/* the second run, where dli_block_add_left_out asks for it, sums everything */
	if (ps->xs_known && !dli_block_add_left_out(rec, sum_sq)) {
		ps->xs_known = false;
		fb_chunks(ps, threads, n_chunks, rec);
	}
	free(ps->recs);
	free(ps);
	return 0;
}

int dli_cpu_fp8b_compare(const void *data, enum dli_dtype dtype, int64_t rows, int64_t cols,
			 enum dli_dtype format, int dims, bool columnwise, bool pow2,
			 const struct dli_cpu_options *o, struct dli_stats_record *out)
{
	if (!out)
		return -EINVAL;
	return dli_cpu_fp8b_compare_sum_sq(data, dtype, rows, cols, format, dims, columnwise, pow2,
					   NAN, o, out);
}

int dli_cpu_fp8b_compare_sum_sq(const void *data, enum dli_dtype dtype, int64_t rows,
				int64_t cols, enum dli_dtype format, int dims, bool columnwise,
				bool pow2, double sum_sq, const struct dli_cpu_options *o,
				struct dli_stats_record *out)
{
	if (!out)
		return -EINVAL;
	return fb_run(data, dtype, rows, cols, format, dims, columnwise, pow2, sum_sq, o, NULL,
		      out);
}

int dli_cpu_fp8b_fake_quantize(const void *data, enum dli_dtype dtype, int64_t rows, int64_t cols,
			       enum dli_dtype format, int dims, bool columnwise, bool pow2,
			       const struct dli_cpu_options *o, float *out)
{
	if (rows * cols > 0 && !out)
		return -EINVAL;
	return fb_run(data, dtype, rows, cols, format, dims, columnwise, pow2, NAN, o, out, NULL);
}
