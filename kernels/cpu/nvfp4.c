/* NVFP4 on the CPU: TransformerEngine's two-level scaling (E2M1 elements, one E4M3 scale per 16
 * elements, one fp32 global scale per tensor from its amax) as a quantizer, a fake-quantizer and
 * a quantize-and-compare pass; 1 x 16 blocks (16 x 1 for the column-wise copy) or 16 x 16 tiles.
 * This is the scalar reference; the row-wise compare of f32 and bf16 has an AVX2 path
 * (nvfp4-avx2.c). The rules are in docs/block-scaling.md ("NVFP4"). */
#include <errno.h>
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#ifdef DLI_HAVE_X86_SIMD
#include <xmmintrin.h>
#endif

#include "cpu-private.h"
#include "nvfp4-private.h"
#include "load-private.h"

#define B DLI_NVFP4_BLOCK

static const float e2m1_values[8] = { 0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f };

float dli_nvfp4_global_scale(float amax)
{
	/* 448 * 6 is exact; one float division, an infinite quotient (amax subnormal or 0) clamped
	 * to FLT_MAX, and 1 for an amax of 0 or one so large the quotient is 0 (inf). */
	float s = 2688.0f / amax;

	if (!(s <= FLT_MAX))
		s = FLT_MAX;
	if (amax == 0.0f || s == 0.0f)
		return 1.0f;
	return s;
}

uint8_t dli_nvfp4_block_scale(float block_amax, float global_scale)
{
	/* block_amax * (S_enc * float(1/6)), then cast to E4M3 with saturation (inf -> 448). */
	float v = block_amax * (global_scale * (1.0f / 6.0f));

	return dli_fp8_encode(v, DLI_DTYPE_F8E4M3);
}

float dli_nvfp4_block_encode(uint8_t scale, float global_scale)
{
	float s_dec = (float)(1.0 / (double)global_scale);
	float r = 1.0f / (dli_fp8_decode(scale, DLI_DTYPE_F8E4M3) * s_dec);

	return r <= FLT_MAX ? r : FLT_MAX;
}

/* The E2M1 magnitude code of |s| (not NaN): one comparison per boundary between two codes, each
 * boundary a midpoint that belongs to the even code (0, 1.0, 2.0, 4.0), so that the count rounds
 * to nearest-even; everything above 5 is 6 (saturation). */
static inline __attribute__((always_inline)) uint8_t e2m1_mag(float a)
{
	return (uint8_t)((a > 0.25f) + (a >= 0.75f) + (a > 1.25f) + (a >= 1.75f) + (a > 2.5f) +
			 (a >= 3.5f) + (a > 5.0f));
}

uint8_t dli_nvfp4_encode(float s)
{
	/* Round to nearest, ties to the even code, saturating to 6; the sign kept (-0 and tiny
	 * negatives give 0x8). NaN gives 0x7 (+6). */
	if (isnan(s))
		return 0x7;
	return (uint8_t)(((float_bits(s) >> 28) & 0x8) | e2m1_mag(fabsf(s)));
}

float dli_nvfp4_decode(uint8_t code)
{
	float v = e2m1_values[code & 7];
	return code & 8 ? -v : v;
}

float dli_nvfp4_dequant_scale(uint8_t scale, float amax)
{
	/* TransformerEngine's dequantization: float(scale) * amax * float(1 / 2688), left to right. */
	return dli_fp8_decode(scale, DLI_DTYPE_F8E4M3) * amax * (1.0f / 2688.0f);
}

void dli_nvfp4_scale_shape(int64_t rows, int64_t cols, bool columnwise, int64_t *srows,
			   int64_t *scols)
{
	/* The column-wise copy is the transpose: cols x rows, scaled along its rows. */
	int64_t r = columnwise ? cols : rows, c = columnwise ? rows : cols;

	*srows = (r + 127) / 128 * 128;
	*scols = ((c + B - 1) / B + 3) / 4 * 4;
}

/* ---- The scalar pass ---- */


/* One block: rows [r0, r0 + h), columns [c0, c0 + w) (1 x 16, 16 x 1 or 16 x 16, clipped). Its
 * elements are first read into buf, in row-major order. */
static inline __attribute__((always_inline)) void
block(const struct nv_pass *ps, enum dli_dtype dtype, int64_t r0, int64_t h, int64_t c0,
      int64_t w, struct dli_block_terms *t)
{
	int64_t cols = ps->cols, m = 0;
	float buf[B * B];
	float bmax = 0.0f, enc, dqs;
	uint8_t sc;

	if (h == 1) {
		const int64_t i0 = r0 * cols + c0;
		for (int64_t k = 0; k < w; k++)
			buf[k] = load(ps->data, dtype, i0 + k);
		m = w;
	} else {
		for (int64_t r = r0; r < r0 + h; r++)
			for (int64_t c = c0; c < c0 + w; c++)
				buf[m++] = load(ps->data, dtype, r * cols + c);
	}
	for (int64_t k = 0; k < m; k++) {
		float a = fabsf(buf[k]);
		bmax = a > bmax ? a : bmax; /* NaN compares false: left out, as fmaxf leaves it */
	}
	sc = dli_nvfp4_block_scale(bmax, ps->s_enc);
	enc = dli_nvfp4_block_encode(sc, ps->s_enc);
	dqs = dli_nvfp4_dequant_scale(sc, ps->amax);
	if (ps->mode == NV_QUANTIZE) {
		/* One scale per row of the copy (16 x 16 tiles: the same in each of its rows). */
		if (ps->columnwise)
			for (int64_t c = c0; c < c0 + w; c++)
				ps->scales[c * ps->scale_cols + r0 / B] = sc;
		else
			for (int64_t r = r0; r < r0 + h; r++)
				ps->scales[r * ps->scale_cols + c0 / B] = sc;
		m = 0;
		for (int64_t r = r0; r < r0 + h; r++)
			for (int64_t c = c0; c < c0 + w; c++)
				ps->q[r * cols + c] = dli_nvfp4_encode(buf[m++] * enc);
		return;
	}
	if (ps->mode == NV_FAKE) {
		m = 0;
		for (int64_t r = r0; r < r0 + h; r++)
			for (int64_t c = c0; c < c0 + w; c++)
				ps->out[r * cols + c] =
					dli_nvfp4_decode(dli_nvfp4_encode(buf[m++] * enc)) * dqs;
		return;
	}
	if (sc & 0x7f) {
		if (dqs < t->lo)
			t->lo = dqs;
		if (dqs > t->hi)
			t->hi = dqs;
	}
	/* The dequantized magnitudes of the eight codes in this block. */
	float dqv[8];
	for (int k = 0; k < 8; k++)
		dqv[k] = e2m1_values[k] * dqs;
	double err = 0, dot = 0, dq2 = 0, xs = 0;
	uint64_t count = 0, under = 0, over = 0;
	for (int64_t k = 0; k < m; k++) {
		float x = buf[k];
		if (!(fabsf(x) <= FLT_MAX)) /* NaN, inf: counted by the main pass */
			continue;
		float s = x * enc, a = fabsf(s);
		uint8_t c = e2m1_mag(a);
		/* x's sign on the magnitude, without a branch (random signs mispredict) */
		float dqf = bits_float(float_bits(dqv[c]) ^ (float_bits(x) & 0x80000000u));
		double dq = dqf, d = x - dq;
		count++;
		under += x != 0.0f && c == 0;
		over += a > 6.0f;
		err += d * d;
		dot += x * dq;
		dq2 += dq * dq;
		xs += (double)x * x;
	}
	t->count += count;
	t->under += under;
	t->over += over;
	t->err += err;
	t->dot += dot;
	t->dqs += dq2;
	t->xs += xs;
}

void dli_nvfp4_block_scalar(const struct nv_pass *ps, int64_t r, int64_t c0, int64_t w,
			    struct dli_block_terms *t)
{
	switch (ps->dtype) {
	case DLI_DTYPE_F32:
		block(ps, DLI_DTYPE_F32, r, 1, c0, w, t);
		break;
	case DLI_DTYPE_F16:
		block(ps, DLI_DTYPE_F16, r, 1, c0, w, t);
		break;
	default:
		block(ps, DLI_DTYPE_BF16, r, 1, c0, w, t);
		break;
	}
}

static inline __attribute__((always_inline)) void
strip(const struct nv_pass *ps, enum dli_dtype dtype, int64_t r0, int64_t r1, struct dli_block_terms *t,
      float *amax)
{
	int64_t cols = ps->cols;

	if (ps->mode == NV_AMAX) {
		float m = 0.0f;
#ifdef DLI_HAVE_X86_SIMD
		if (dtype != DLI_DTYPE_F16 &&
		    (ps->simd == DLI_SIMD_AVX2 || ps->simd == DLI_SIMD_AVX512)) {
			*amax = dli_nvfp4_amax_avx2(ps->data, dtype, r0 * cols, r1 * cols);
			return;
		}
#endif
		for (int64_t i = r0 * cols; i < r1 * cols; i++) {
			float a = fabsf(load(ps->data, dtype, i));
			if (a > m)
				m = a;
		}
		*amax = m;
		return;
	}
	for (int64_t r = r0; r < r1; r += B) {
		int64_t h = r1 - r < B ? r1 - r : B;
		if (ps->dims == 2) {
			for (int64_t c = 0; c < cols; c += B)
				block(ps, dtype, r, h, c, cols - c < B ? cols - c : B, t);
		} else if (ps->columnwise) {
			for (int64_t c = 0; c < cols; c++)
				block(ps, dtype, r, h, c, 1, t);
		} else {
			for (int64_t rr = r; rr < r + h; rr++)
				for (int64_t c = 0; c < cols; c += B)
					block(ps, dtype, rr, 1, c, cols - c < B ? cols - c : B, t);
		}
	}
}

/* One chunk of rows under the floating-point environment the rules assume (nearest-even, no
 * FTZ/DAZ), the thread's own restored after. */
static void nv_chunk(void *arg, int64_t c, int worker)
{
	const struct nv_pass *ps = arg;
	int64_t r0 = c * ps->rows_per_chunk;
	int64_t r1 = r0 + ps->rows_per_chunk < ps->rows ? r0 + ps->rows_per_chunk : ps->rows;
	struct dli_block_terms t = { .lo = INFINITY };
	float amax = 0.0f;
	unsigned csr = dli_csr_exact();
	(void)worker;
#ifdef DLI_HAVE_X86_SIMD
	if (dli_nvfp4_rows_avx2_take(ps))
		dli_nvfp4_rows_avx2(ps, r0, r1, &t);
	else
#endif
	switch (ps->dtype) {
	case DLI_DTYPE_F32:
		strip(ps, DLI_DTYPE_F32, r0, r1, &t, &amax);
		break;
	case DLI_DTYPE_F16:
		strip(ps, DLI_DTYPE_F16, r0, r1, &t, &amax);
		break;
	default:
		strip(ps, DLI_DTYPE_BF16, r0, r1, &t, &amax);
		break;
	}
	if (ps->mode == NV_AMAX)
		ps->amaxes[c] = amax;
	if (ps->mode == NV_COMPARE) {
		dli_block_terms_record(&t, &ps->recs[c]);
		if (ps->zeros_other)
			ps->zeros_other[c] = t.zeros;
	}
	dli_csr_restore(csr);
}

#define NV_THREAD_MIN ((int64_t)1 << 20)

/* The passes over the blocks, after one for the tensor's amax unless ps->amax_known (the caller
 * has it, as the statistics pass gives it: then the tensor is read once). */
static int nv_run(struct nv_pass *ps, const struct dli_cpu_options *o)
{
	int64_t n = ps->rows * ps->cols;
	int64_t rpc = ps->cols ? DLI_STATS_CHUNK / ps->cols : ps->rows;
	int64_t n_chunks;
	int threads;
	enum nv_mode mode = ps->mode;
	int r = 0;

	rpc = rpc < B ? B : rpc / B * B;
	ps->rows_per_chunk = rpc;
	n_chunks = (ps->rows + rpc - 1) / rpc;
	threads = n > NV_THREAD_MIN ? dli_cpu_threads(o) : 1;
	if (!(ps->amaxes = calloc((size_t)n_chunks, sizeof(*ps->amaxes))))
		return -ENOMEM;
	if (mode == NV_COMPARE && !(ps->recs = calloc((size_t)n_chunks, sizeof(*ps->recs)))) {
		free(ps->amaxes);
		return -ENOMEM;
	}
	if (mode == NV_COMPARE && ps->xs_known &&
	    !(ps->zeros_other = calloc((size_t)n_chunks, sizeof(*ps->zeros_other)))) {
		free(ps->amaxes);
		return -ENOMEM;
	}
	if (ps->amax_known)
		ps->s_enc = dli_nvfp4_global_scale(ps->amax);
	/* The tensor's amax (NaN left out) where the caller did not give it, then the blocks. */
	for (int pass = ps->amax_known ? 1 : 0; pass < 2; pass++) {
		ps->mode = pass ? mode : NV_AMAX;
		if (threads > 1 && n_chunks > 1)
			r = dli_parallel_for(n_chunks, threads, nv_chunk, ps);
		else
			for (int64_t c = 0; c < n_chunks; c++)
				nv_chunk(ps, c, 0);
		if (r)
			break;
		if (!pass) {
			ps->amax = 0.0f;
			for (int64_t c = 0; c < n_chunks; c++)
				if (ps->amaxes[c] > ps->amax)
					ps->amax = ps->amaxes[c];
			ps->s_enc = dli_nvfp4_global_scale(ps->amax);
		}
	}
	free(ps->amaxes);
	ps->amaxes = NULL;
	return r;
}

static int nv_check(const void *data, enum dli_dtype dtype, int64_t rows, int64_t cols, int dims,
		    const struct dli_cpu_options *o, enum dli_simd *simd)
{
	if ((dtype != DLI_DTYPE_F32 && dtype != DLI_DTYPE_F16 && dtype != DLI_DTYPE_BF16) ||
	    (dims != 1 && dims != 2) || rows < 0 || cols < 0 || (cols && rows > INT64_MAX / cols) ||
	    (rows * cols > 0 && !data))
		return -EINVAL;
	if ((*simd = dli_cpu_simd(o)) == DLI_SIMD_AUTO)
		return -ENOTSUP;
	return 0;
}

/* The compare's passes into *out. With xs_known, the zeros its AVX2 groups counted as underflows
 * come off them; false in *known_ok where the caller's count cannot be right (fewer zeros than
 * the other blocks hold, or more than the underflows counted), to run again counting them. */
static int nv_compare_run(struct nv_pass *ps, const struct dli_cpu_options *o,
			  struct dli_stats_record *out, bool *known_ok)
{
	int r = nv_run(ps, o);
	*known_ok = true;
	if (r) {
		dli_stats_record_init(out);
	} else {
		int64_t n_chunks = (ps->rows + ps->rows_per_chunk - 1) / ps->rows_per_chunk;
		dli_block_recs_merge(out, ps->recs, n_chunks);
		uint64_t other = 0;
		for (int64_t c = 0; ps->zeros_other && c < n_chunks; c++)
			other += ps->zeros_other[c];
		if (ps->zeros_other && (other > ps->zeros || ps->zeros - other > out->underflows))
			*known_ok = false;
		else if (ps->zeros_other)
			out->underflows -= ps->zeros - other;
	}
	free(ps->recs);
	ps->recs = NULL;
	free(ps->zeros_other);
	ps->zeros_other = NULL;
	return r;
}

/* The compare, given the tensor's amax (amax_known) or not, and its sum of finite x^2 (sum_sq, NaN
 * when not known) and zeros: only the AVX2 pass on bf16 given its amax uses them. */
static int nv_compare(const void *data, enum dli_dtype dtype, int64_t rows, int64_t cols, int dims,
		      bool columnwise, bool amax_known, float amax, double sum_sq, uint64_t zeros,
		      const struct dli_cpu_options *o, struct dli_stats_record *out)
{
	struct nv_pass ps = { .data = data, .dtype = dtype, .rows = rows, .cols = cols,
			      .dims = dims, .columnwise = columnwise, .mode = NV_COMPARE,
			      .amax_known = amax_known, .amax = amax, .zeros = zeros };
	bool known_ok;
	int r;

	if (!out || (amax_known && !(amax >= 0.0f)))
		return -EINVAL;
	if ((r = nv_check(data, dtype, rows, cols, dims, o, &ps.simd)))
		return r;
	dli_stats_record_init(out);
	if (rows * cols == 0)
		return 0;
#ifdef DLI_HAVE_X86_SIMD
	/* Not with an infinite amax (an infinity in the data): its global scale quantizes every
	 * element to 0, dot is 0, and dli_block_add_left_out would ask for a second run. */
	ps.xs_known = amax_known && isfinite(amax) && isfinite(sum_sq) &&
		      dtype == DLI_DTYPE_BF16 && dli_nvfp4_rows_avx2_take(&ps);
#else
	(void)sum_sq;
#endif
	if ((r = nv_compare_run(&ps, o, out, &known_ok)))
		return r;
	/* the second run, where the zeros or dli_block_add_left_out ask for it, sums and counts
	 * everything */
	if (ps.xs_known && (!known_ok || !dli_block_add_left_out(out, sum_sq))) {
		ps.xs_known = false;
		return nv_compare_run(&ps, o, out, &known_ok);
	}
	return 0;
}

int dli_cpu_nvfp4_compare(const void *data, enum dli_dtype dtype, int64_t rows, int64_t cols,
			  int dims, bool columnwise, const struct dli_cpu_options *o,
			  struct dli_stats_record *out)
{
	return nv_compare(data, dtype, rows, cols, dims, columnwise, false, 0.0f, NAN, 0, o, out);
}

int dli_cpu_nvfp4_compare_known(const void *data, enum dli_dtype dtype, int64_t rows, int64_t cols,
				int dims, bool columnwise, float amax, double sum_sq, uint64_t zeros,
				const struct dli_cpu_options *o, struct dli_stats_record *out)
{
	return nv_compare(data, dtype, rows, cols, dims, columnwise, true, amax, sum_sq, zeros, o,
			  out);
}

int dli_cpu_nvfp4_quantize(const void *data, enum dli_dtype dtype, int64_t rows, int64_t cols,
			   int dims, bool columnwise, const struct dli_cpu_options *o, uint8_t *q,
			   uint8_t *scales, float *amax)
{
	struct nv_pass ps = { .data = data, .dtype = dtype, .rows = rows, .cols = cols,
			      .dims = dims, .columnwise = columnwise, .mode = NV_QUANTIZE,
			      .q = q, .scales = scales };
	int64_t srows, scols;
	int r;

	if ((r = nv_check(data, dtype, rows, cols, dims, o, &ps.simd)))
		return r;
	if (rows * cols > 0 && (!q || !scales))
		return -EINVAL;
	dli_nvfp4_scale_shape(rows, cols, columnwise, &srows, &scols);
	ps.scale_cols = scols;
	if (scales) /* the padding TransformerEngine leaves as zeros */
		memset(scales, 0, (size_t)(srows * scols));
	if (amax)
		*amax = 0.0f;
	if (rows * cols == 0)
		return 0;
	r = nv_run(&ps, o);
	if (!r && amax)
		*amax = ps.amax;
	return r;
}

int dli_cpu_nvfp4_fake_quantize(const void *data, enum dli_dtype dtype, int64_t rows,
				int64_t cols, int dims, bool columnwise,
				const struct dli_cpu_options *o, float *out)
{
	struct nv_pass ps = { .data = data, .dtype = dtype, .rows = rows, .cols = cols,
			      .dims = dims, .columnwise = columnwise, .mode = NV_FAKE, .out = out };
	int r;

	if ((r = nv_check(data, dtype, rows, cols, dims, o, &ps.simd)))
		return r;
	if (rows * cols > 0 && !out)
		return -EINVAL;
	if (rows * cols == 0)
		return 0;
	return nv_run(&ps, o);
}
