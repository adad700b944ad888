/* MXFP8 on the CPU: TransformerEngine's block scaling (32 elements per E8M0 scale, along the rows
 * for the row-wise copy or down the columns for the column-wise one) as a quantizer, a
 * fake-quantizer and a quantize-and-compare pass. The rules are in docs/block-scaling.md. */
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#ifdef DLI_HAVE_X86_SIMD
#include <xmmintrin.h>
#endif

#include "cpu-private.h"
#include "fp8-private.h"
#include "mx-private.h"
#include "load-private.h"

float dli_mx_max_rcp(enum dli_dtype format)
{
	/* One rounding, in double then to float, as a float constant 1.0 / max is. */
	if (format == DLI_DTYPE_F8E4M3)
		return (float)(1.0 / 448.0);
	if (format == DLI_DTYPE_F8E5M2)
		return (float)(1.0 / 57344.0);
	return 0.0f;
}

uint8_t dli_mx_e8m0(float amax, enum dli_dtype format)
{
	/* The product is rounded to float, then its exponent rounded up to a power of two (the
	 * ceiling): an exact power of two keeps its exponent. */
	float v = amax * dli_mx_max_rcp(format);
	uint32_t u, e, m;

	if (isnan(v))
		return 0xff;
	if (isinf(v))
		return 0xfe;
	if (v == 0.0f)
		return 0;
	u = float_bits(v) & 0x7fffffff;
	e = u >> 23;
	m = u & 0x7fffff;
	/* 0xfe stays (saturating: 0xff is NaN); a subnormal up to 2^-127 is 2^-127 (code 0). */
	if (m && e != 0xfe && !(e == 0 && m <= 0x400000))
		e++;
	return (uint8_t)e;
}

float dli_mx_rcp(uint8_t e)
{
	if (e == 0xff)
		return bits_float(0x7fffffff);
	if (e == 0xfe)
		return bits_float(0x00400000); /* 2^-127: a float subnormal */
	return bits_float((uint32_t)(254 - e) << 23);
}

double dli_mx_scale_inv(uint8_t e)
{
	return e == 0xff ? NAN : ldexp(1.0, (int)e - 127);
}

void dli_mx_scale_shape(int64_t rows, int64_t cols, bool columnwise, int64_t *srows,
			int64_t *scols)
{
	if (columnwise) {
		*srows = ((rows + DLI_MX_BLOCK - 1) / DLI_MX_BLOCK + 3) / 4 * 4;
		*scols = (cols + 127) / 128 * 128;
	} else {
		*srows = (rows + 127) / 128 * 128;
		*scols = ((cols + DLI_MX_BLOCK - 1) / DLI_MX_BLOCK + 3) / 4 * 4;
	}
}

/* ---- The scalar pass ---- */

static pthread_once_t table_once = PTHREAD_ONCE_INIT;
static float decoded[2][256];

static void table_build(void)
{
	for (int c = 0; c < 256; c++) {
		decoded[0][c] = dli_fp8_decode((uint8_t)c, DLI_DTYPE_F8E4M3);
		decoded[1][c] = dli_fp8_decode((uint8_t)c, DLI_DTYPE_F8E5M2);
	}
}

static inline __attribute__((always_inline)) void
block(const struct mx_pass *ps, enum dli_dtype dtype, int64_t idx0, int64_t stride, int64_t m,
      int64_t scale_idx, struct dli_block_terms *t)
{
	const float *table = decoded[ps->format == DLI_DTYPE_F8E5M2];
	float fmax = dli_fp8_max(ps->format);
	float amax = 0.0f;
	uint8_t e;
	float rcp;
	double si;

	for (int64_t k = 0; k < m; k++) {
		float a = fabsf(load(ps->data, dtype, idx0 + k * stride));
		if (a > amax) /* NaN compares false: left out, as fmaxf leaves it */
			amax = a;
	}
	e = dli_mx_e8m0(amax, ps->format);
	rcp = dli_mx_rcp(e);
	si = dli_mx_scale_inv(e);
	if (ps->mode == MX_QUANTIZE) {
		ps->scales[scale_idx] = e;
		for (int64_t k = 0; k < m; k++) {
			int64_t i = idx0 + k * stride;
			ps->q[i] = dli_fp8_encode(load(ps->data, dtype, i) * rcp, ps->format);
		}
		return;
	}
	if (ps->mode == MX_FAKE) {
		for (int64_t k = 0; k < m; k++) {
			int64_t i = idx0 + k * stride;
			uint8_t q = dli_fp8_encode(load(ps->data, dtype, i) * rcp, ps->format);
			ps->out[i] = (float)(table[q] * si);
		}
		return;
	}
	/* Code 0 (2^-127) comes only from all-zero or nearly all-zero blocks: left out of the
	 * scale_inv range, as TransformerEngine's nonzero minimum leaves it out. */
	if (e != 0) {
		if (si < t->lo)
			t->lo = si;
		if (si > t->hi)
			t->hi = si;
	}
	for (int64_t k = 0; k < m; k++) {
		float x = load(ps->data, dtype, idx0 + k * stride);
		float s;
		uint8_t q;
		double dq, d;

		if (!isfinite(x)) /* counted by the main pass (kernels/record.c puts infs back) */
			continue;
		s = x * rcp;
		q = dli_fp8_encode(s, ps->format);
		t->count++;
		if (x != 0.0f && (q & 0x7f) == 0)
			t->under++;
		if (fabsf(s) > fmax)
			t->over++;
		dq = (double)table[q] * si;
		d = x - dq;
		t->err += d * d;
		t->dot += x * dq;
		t->dqs += dq * dq;
		t->xs += (double)x * x;
	}
}

static inline __attribute__((always_inline)) void
rows_scalar(const struct mx_pass *ps, enum dli_dtype dtype, int64_t r0, int64_t r1,
	    struct dli_block_terms *t)
{
	int64_t cols = ps->cols;

	if (!ps->columnwise) {
		for (int64_t r = r0; r < r1; r++)
			for (int64_t c = 0; c < cols; c += DLI_MX_BLOCK) {
				int64_t m = cols - c < DLI_MX_BLOCK ? cols - c : DLI_MX_BLOCK;
				block(ps, dtype, r * cols + c, 1, m, r * ps->scale_cols + c / DLI_MX_BLOCK,
				      t);
			}
		return;
	}
	for (int64_t r = r0; r < r1; r += DLI_MX_BLOCK) {
		int64_t m = r1 - r < DLI_MX_BLOCK ? r1 - r : DLI_MX_BLOCK;
		for (int64_t c = 0; c < cols; c++)
			block(ps, dtype, r * cols + c, cols, m, r / DLI_MX_BLOCK * ps->scale_cols + c, t);
	}
}

void dli_mx_block_scalar(const struct mx_pass *ps, int64_t idx0, int64_t stride, int64_t m,
			 struct dli_block_terms *t)
{
	switch (ps->dtype) {
	case DLI_DTYPE_F32:
		block(ps, DLI_DTYPE_F32, idx0, stride, m, 0, t);
		break;
	case DLI_DTYPE_F16:
		block(ps, DLI_DTYPE_F16, idx0, stride, m, 0, t);
		break;
	default:
		block(ps, DLI_DTYPE_BF16, idx0, stride, m, 0, t);
		break;
	}
}

/* Rows [r0, r1) (r0 a multiple of DLI_MX_BLOCK), one copy of the loop per input type. */
static void mx_rows(const struct mx_pass *ps, int64_t r0, int64_t r1, struct dli_block_terms *t)
{
#ifdef DLI_HAVE_X86_SIMD
	/* The AVX2 passes do the comparisons (AVX-512 machines run them too); the quantizer and
	 * the fake-quantizer are scalar. */
	if (ps->mode == MX_COMPARE && (ps->simd == DLI_SIMD_AVX2 || ps->simd == DLI_SIMD_AVX512)) {
		if (ps->columnwise)
			dli_mx_cols_avx2(ps, r0, r1, t);
		else
			dli_mx_rows_avx2(ps, r0, r1, t);
		return;
	}
#endif
	switch (ps->dtype) {
	case DLI_DTYPE_F32:
		rows_scalar(ps, DLI_DTYPE_F32, r0, r1, t);
		break;
	case DLI_DTYPE_F16:
		rows_scalar(ps, DLI_DTYPE_F16, r0, r1, t);
		break;
	default:
		rows_scalar(ps, DLI_DTYPE_BF16, r0, r1, t);
		break;
	}
}

/* One chunk of rows under the floating-point environment the rules assume (nearest-even, no
 * FTZ/DAZ: a subnormal amax or x must not turn into 0), the thread's own restored after. */
static void mx_chunk(void *arg, int64_t c, int worker)
{
	const struct mx_pass *ps = arg;
	int64_t r0 = c * ps->rows_per_chunk;
	int64_t r1 = r0 + ps->rows_per_chunk < ps->rows ? r0 + ps->rows_per_chunk : ps->rows;
	struct dli_block_terms t = { .lo = INFINITY };
	unsigned csr = dli_csr_exact();
	(void)worker;
	mx_rows(ps, r0, r1, &t);
	if (ps->recs) {
		dli_block_terms_record(&t, &ps->recs[c]);
	}
	dli_csr_restore(csr);
}

#define MX_THREAD_MIN ((int64_t)1 << 20)

static int mx_run(struct mx_pass *ps, const struct dli_cpu_options *o)
{
	int64_t n = ps->rows * ps->cols;
	/* About DLI_STATS_CHUNK elements per chunk, in whole blocks of rows. */
	int64_t rpc = ps->cols ? DLI_STATS_CHUNK / ps->cols : ps->rows;
	int64_t n_chunks;
	int threads;

	rpc = rpc < DLI_MX_BLOCK ? DLI_MX_BLOCK : rpc / DLI_MX_BLOCK * DLI_MX_BLOCK;
	ps->rows_per_chunk = rpc;
	n_chunks = (ps->rows + rpc - 1) / rpc;
	if (ps->mode == MX_COMPARE && n_chunks &&
	    !(ps->recs = calloc((size_t)n_chunks, sizeof(*ps->recs))))
		return -ENOMEM;
	threads = n > MX_THREAD_MIN ? dli_cpu_threads(o) : 1;
	if (threads > 1 && n_chunks > 1)
		dli_parallel_for(n_chunks, threads, mx_chunk, ps);
	else
		for (int64_t c = 0; c < n_chunks; c++)
			mx_chunk(ps, c, 0);
	return 0;
}

static int mx_check(const void *data, enum dli_dtype dtype, int64_t rows, int64_t cols,
		    enum dli_dtype format, const struct dli_cpu_options *o, enum dli_simd *simd)
{
	if ((dtype != DLI_DTYPE_F32 && dtype != DLI_DTYPE_F16 && dtype != DLI_DTYPE_BF16) ||
	    (format != DLI_DTYPE_F8E4M3 && format != DLI_DTYPE_F8E5M2) || rows < 0 || cols < 0 ||
	    (cols && rows > INT64_MAX / cols) || (rows * cols > 0 && !data))
		return -EINVAL;
	/* A forced path this CPU lacks is refused, as the other passes refuse it. */
	if ((*simd = dli_cpu_simd(o)) == DLI_SIMD_AUTO)
		return -ENOTSUP;
	pthread_once(&table_once, table_build);
	return 0;
}

/* The compare of ps into *out (initialized here). */
static int mx_compare_run(struct mx_pass *ps, const struct dli_cpu_options *o,
			  struct dli_stats_record *out)
{
	int r;

	dli_stats_record_init(out);
	if ((r = mx_run(ps, o)))
		return r;
	dli_block_recs_merge(out, ps->recs,
			     (ps->rows + ps->rows_per_chunk - 1) / ps->rows_per_chunk);
	free(ps->recs);
	ps->recs = NULL;
	return 0;
}

int dli_cpu_mx_compare(const void *data, enum dli_dtype dtype, int64_t rows, int64_t cols,
		       enum dli_dtype format, bool columnwise, const struct dli_cpu_options *o,
		       struct dli_stats_record *out)
{
	return dli_cpu_mx_compare_sum_sq(data, dtype, rows, cols, format, columnwise, NAN, o, out);
}

int dli_cpu_mx_compare_sum_sq(const void *data, enum dli_dtype dtype, int64_t rows, int64_t cols,
			      enum dli_dtype format, bool columnwise, double sum_sq,
			      const struct dli_cpu_options *o, struct dli_stats_record *out)
{
	struct mx_pass ps = { .data = data, .dtype = dtype, .format = format, .rows = rows,
			      .cols = cols, .columnwise = columnwise, .mode = MX_COMPARE };
	int r;

	if (!out)
		return -EINVAL;
	if ((r = mx_check(data, dtype, rows, cols, format, o, &ps.simd)))
		return r;
	dli_stats_record_init(out);
	if (rows * cols == 0)
		return 0;
	/* Only the row-wise AVX2 fast steps on bf16 leave anything out (mx-avx2-private.h's
	 * step_bf16_normal): f32 and f16 are bound by memory, not by the FMAs. */
	ps.xs_known = isfinite(sum_sq) && dtype == DLI_DTYPE_BF16 && !columnwise &&
		      (ps.simd == DLI_SIMD_AVX2 || ps.simd == DLI_SIMD_AVX512);
	if ((r = mx_compare_run(&ps, o, out)))
		return r;
	if (ps.xs_known && !dli_block_add_left_out(out, sum_sq)) {
		ps.xs_known = false;
		return mx_compare_run(&ps, o, out);
	}
	return 0;
}

int dli_cpu_mx_quantize(const void *data, enum dli_dtype dtype, int64_t rows, int64_t cols,
			enum dli_dtype format, bool columnwise, const struct dli_cpu_options *o,
			uint8_t *q, uint8_t *scales)
{
	struct mx_pass ps = { .data = data, .dtype = dtype, .format = format, .rows = rows,
			      .cols = cols, .columnwise = columnwise, .mode = MX_QUANTIZE,
			      .q = q, .scales = scales };
	int64_t srows, scols;
	int r;

	if ((r = mx_check(data, dtype, rows, cols, format, o, &ps.simd)))
		return r;
	if (rows * cols > 0 && (!q || !scales))
		return -EINVAL;
	dli_mx_scale_shape(rows, cols, columnwise, &srows, &scols);
	ps.scale_cols = scols;
	if (scales) /* the padding TransformerEngine leaves unset reads 0 here */
		memset(scales, 0, (size_t)(srows * scols));
	if (rows * cols == 0)
		return 0;
	return mx_run(&ps, o);
}

int dli_cpu_mx_fake_quantize(const void *data, enum dli_dtype dtype, int64_t rows, int64_t cols,
			     enum dli_dtype format, bool columnwise,
			     const struct dli_cpu_options *o, float *out)
{
	struct mx_pass ps = { .data = data, .dtype = dtype, .format = format, .rows = rows,
			      .cols = cols, .columnwise = columnwise, .mode = MX_FAKE, .out = out };
	int r;

	if ((r = mx_check(data, dtype, rows, cols, format, o, &ps.simd)))
		return r;
	if (rows * cols > 0 && !out)
		return -EINVAL;
	if (rows * cols == 0)
		return 0;
	return mx_run(&ps, o);
}
