/* FP8 E4M3 ("fn") and E5M2 numerics on the CPU: the scalar cast that is the reference for every
 * other path, the current-scaling formula, and the quantize-and-compare passes
 * (docs/statistics.md). */
#include <errno.h>
#include <float.h>
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#ifdef DLI_HAVE_X86_SIMD
#include <xmmintrin.h>
#endif

#include "cpu-private.h"
#include "fp8-private.h"
#include "load-private.h"

/* What the cast needs to know about a format. */
struct fp8_format {
	int mbits;        /* stored mantissa bits */
	int bias;
	uint32_t maxcode; /* the largest finite code (without sign) */
	uint32_t nancode; /* the NaN we produce (without sign) */
	float max;
};

static const struct fp8_format e4m3 = { 3, 7, 0x7e, 0x7f, 448.0f };
/* 0x7e is E5M2's quiet NaN: the top mantissa bit set, as an IEEE-style format wants. */
static const struct fp8_format e5m2 = { 2, 15, 0x7b, 0x7e, 57344.0f };

static const struct fp8_format *fp8_format_of(enum dli_dtype format)
{
	if (format == DLI_DTYPE_F8E4M3)
		return &e4m3;
	if (format == DLI_DTYPE_F8E5M2)
		return &e5m2;
	return NULL;
}

/* v >> shift rounded to nearest, ties to even; shift 1..31. */
static uint32_t shift_rne(uint32_t v, int shift)
{
	uint32_t half = 1u << (shift - 1);
	uint32_t rest = v & ((half << 1) - 1);
	uint32_t q = v >> shift;
	if (rest > half || (rest == half && (q & 1)))
		q++;
	return q;
}

/* The reference cast, done on the float's bits with integers only so that it shares nothing with
 * the SIMD paths (which round with float arithmetic) and the two check each other. */
static uint8_t encode(float x, const struct fp8_format *f)
{
	uint32_t u = float_bits(x);
	uint32_t sign = (u >> 24) & 0x80;
	uint32_t a = u & 0x7fffffff;
	int mshift = 23 - f->mbits;
	int emin = 1 - f->bias; /* exponent of the smallest normal */
	uint32_t code;

	if (a > 0x7f800000)
		return (uint8_t)(sign | f->nancode);
	/* Saturating cast: everything from the finite max up, infinity included, becomes the max. A
	 * value between the max and the next (absent) code rounds to the max or saturates to it:
	 * either way the max. */
	if (a >= float_bits(f->max))
		return (uint8_t)(sign | f->maxcode);
	if (a >= (uint32_t)(emin + 127) << 23) {
		/* Normal in FP8: round the float mantissa to mbits; a carry ripples into the
		 * exponent, which is what rounding up to the next binade means. Then rebias. */
		code = shift_rne(a, mshift) - ((uint32_t)(127 - f->bias) << f->mbits);
	} else {
		/* Subnormal in FP8 (or zero): the code is |x| in units of the smallest subnormal,
		 * 2^(emin - mbits). |x| = m * 2^(e - 150) with the implicit bit in m (float
		 * subnormals: e = 1, no implicit bit). */
		uint32_t e = a >> 23;
		uint32_t m = a & 0x7fffff;
		int shift;
		if (e)
			m |= 0x800000;
		else
			e = 1;
		shift = 150 + emin - f->mbits - (int)e;
		/* m < 2^24, so a shift past 24 leaves less than half a unit: zero. */
		code = shift > 24 ? 0 : shift_rne(m, shift);
	}
	return (uint8_t)(sign | code);
}

static float decode(uint8_t b, const struct fp8_format *f)
{
	uint32_t sign = (uint32_t)(b & 0x80) << 24;
	uint32_t mag = b & 0x7f;
	uint32_t e = mag >> f->mbits;
	uint32_t m = mag & ((1u << f->mbits) - 1);
	uint32_t emax = (1u << (7 - f->mbits)) - 1;

	if (f == &e4m3 && mag == 0x7f)
		return bits_float(sign | 0x7fc00000);
	if (f == &e5m2 && e == emax)
		return bits_float(sign | (m ? 0x7fc00000 : 0x7f800000));
	if (e == 0) /* subnormal: exact in float */
		return bits_float(sign |
				  float_bits((float)m * ldexpf(1.0f, 1 - f->bias - f->mbits)));
	return bits_float(sign | ((e - (uint32_t)f->bias + 127) << 23) | (m << (23 - f->mbits)));
}

float dli_fp8_max(enum dli_dtype format)
{
	const struct fp8_format *f = fp8_format_of(format);
	return f ? f->max : 0.0f;
}

uint8_t dli_fp8_encode(float x, enum dli_dtype format)
{
	const struct fp8_format *f = fp8_format_of(format);
	return f ? encode(x, f) : 0;
}

float dli_fp8_decode(uint8_t bits, enum dli_dtype format)
{
	const struct fp8_format *f = fp8_format_of(format);
	return f ? decode(bits, f) : NAN;
}

float dli_fp8_scale(float amax, enum dli_dtype format, double margin)
{
	const struct fp8_format *f = fp8_format_of(format);
	double s;

	/* No usable amax (nothing seen, or it overflowed): leave the data unscaled, as
	 * TransformerEngine does. A negative amax cannot come from max|x| either. */
	if (!f || !(amax > 0.0f) || isinf(amax))
		return 1.0f;
	/* In double: one rounding to float at the end gives the float quotient TransformerEngine
	 * computes for an integer margin, and a fractional margin loses nothing extra. */
	s = (double)f->max / amax / exp2(margin);
	if (isnan(s))
		return 1.0f; /* a NaN margin */
	if (s >= (double)FLT_MAX)
		return FLT_MAX; /* a tiny amax: the largest finite scale, never inf */
	if (s < (double)FLT_MIN)
		return FLT_MIN; /* a huge margin: keep the scale invertible */
	return (float)s;
}

/* The largest float magnitude (bits 0 .. 0x7f7fffff) whose product with scale is <= limit,
 * or -1. */
int64_t dli_fp8_f32_last_le(float scale, float limit)
{
	int64_t lo = -1, hi = 0x7f7fffff; /* lo: known <= (or -1), hi + 1 .. : known > */

	while (lo < hi) {
		int64_t mid = lo + (hi - lo + 1) / 2;
		uint32_t u = (uint32_t)mid;
		float v;
		memcpy(&v, &u, sizeof(v));
		if (v * scale <= limit)
			lo = mid;
		else
			hi = mid - 1;
	}
	return lo;
}

/* ---- Loading the inputs ---- */

static bool input_dtype_ok(enum dli_dtype dtype)
{
	return dtype == DLI_DTYPE_F32 || dtype == DLI_DTYPE_F16 || dtype == DLI_DTYPE_BF16;
}

/* ---- The scalar reference passes ---- */

/* Every code decoded, per format: the scalar pass looks dq up instead of branching on the code. */
static pthread_once_t table_once = PTHREAD_ONCE_INIT;
static float decoded[2][256];

static void table_build(void)
{
	for (int c = 0; c < 256; c++) {
		decoded[0][c] = decode((uint8_t)c, &e4m3);
		decoded[1][c] = decode((uint8_t)c, &e5m2);
	}
}

static inline __attribute__((always_inline)) void
compare_scalar(const void *data, enum dli_dtype dtype, int64_t n, const struct fp8_format *f,
	       float scale, struct dli_stats_record *acc)
{
	const float *table = decoded[f == &e5m2];
	uint64_t count = 0, under = 0, over = 0;
	double err = 0, dot = 0, dqs = 0, xs = 0;

	for (int64_t i = 0; i < n; i++) {
		float x = load(data, dtype, i);
		float s;
		uint8_t q;
		double dq, d;

		/* A NaN or infinite x has no quantization error to speak of, and one would make
		 * every sum (and so mse, cos_sim, sqnr) NaN or inf: it is left out entirely; the
		 * main pass counts it in nan_count / inf_count. */
		if (!isfinite(x))
			continue;
		s = x * scale;
		q = encode(s, f);
		count++;
		/* q & 0x7f: -0 (0x80) is zero too, which is the defect the anchors had. */
		if (x != 0.0f && (q & 0x7f) == 0)
			under++;
		if (fabsf(s) > f->max)
			over++;
		dq = (double)table[q] / scale;
		d = x - dq;
		err += d * d;
		dot += x * dq;
		dqs += dq * dq;
		xs += (double)x * x;
	}
	acc->fp8_count += count;
	acc->underflows += under;
	acc->overflows += over;
	acc->err_sq += err;
	acc->dot += dot;
	acc->dq_sq += dqs;
	acc->x_sq += xs;
}

void dli_fp8_compare_scalar(const void *data, enum dli_dtype dtype, int64_t n,
			    enum dli_dtype format, float scale, struct dli_stats_record *acc)
{
	const struct fp8_format *f = fp8_format_of(format);

	pthread_once(&table_once, table_build);
	/* One copy of the loop per input type, so the load is not a switch per element. */
	switch (dtype) {
	case DLI_DTYPE_F32:
		compare_scalar(data, DLI_DTYPE_F32, n, f, scale, acc);
		break;
	case DLI_DTYPE_F16:
		compare_scalar(data, DLI_DTYPE_F16, n, f, scale, acc);
		break;
	default:
		compare_scalar(data, DLI_DTYPE_BF16, n, f, scale, acc);
		break;
	}
}

void dli_fp8_quantize_scalar(const void *data, enum dli_dtype dtype, int64_t n,
			     enum dli_dtype format, float scale, uint8_t *q)
{
	const struct fp8_format *f = fp8_format_of(format);

	for (int64_t i = 0; i < n; i++)
		q[i] = encode(load(data, dtype, i) * scale, f);
}

/* ---- Dispatch ---- */

/* Below this many elements the pass stays on the calling thread: waking the pool would cost
 * about as much as the pass. The FP8 pass does more per element than the statistics pass, so it
 * splits earlier. */
#define FP8_THREAD_MIN ((int64_t)1 << 20)

typedef void (*compare_fn)(const void *, enum dli_dtype, int64_t, enum dli_dtype, float, bool,
			   struct dli_stats_record *);
typedef void (*quantize_fn)(const void *, enum dli_dtype, int64_t, enum dli_dtype, float,
			    uint8_t *);

/* The reference sums everything, in double: xs_known changes nothing there. */
static void compare_reference(const void *data, enum dli_dtype dtype, int64_t n,
			      enum dli_dtype format, float scale, bool xs_known,
			      struct dli_stats_record *acc)
{
	(void)xs_known;
	dli_fp8_compare_scalar(data, dtype, n, format, scale, acc);
}

static int pick(const struct dli_cpu_options *o, compare_fn *c, quantize_fn *qz)
{
	switch (dli_cpu_simd(o)) {
	case DLI_SIMD_SCALAR:
		*c = compare_reference;
		*qz = dli_fp8_quantize_scalar;
		return 0;
#ifdef DLI_HAVE_X86_SIMD
	case DLI_SIMD_AVX2:
		*c = dli_fp8_compare_avx2;
		*qz = dli_fp8_quantize_avx2;
		return 0;
	case DLI_SIMD_AVX512:
		*c = dli_fp8_compare_avx512;
		*qz = dli_fp8_quantize_avx512;
		return 0;
#endif
	default:
		return -ENOTSUP;
	}
}

static int check_args(const void *data, enum dli_dtype dtype, int64_t n, enum dli_dtype format,
		      float scale)
{
	if (!input_dtype_ok(dtype) || !fp8_format_of(format) || n < 0 || (n > 0 && !data))
		return -EINVAL;
	/* The pass divides by the scale; 0, negative, inf and NaN scales are caller bugs. */
	if (!(scale > 0.0f) || isinf(scale))
		return -EINVAL;
	return 0;
}

struct pass {
	const char *data;
	enum dli_dtype dtype, format;
	int64_t n;
	float scale;
	bool xs_known; /* compare: see fp8-private.h */
	compare_fn compare;
	quantize_fn quantize;
	uint8_t *q;                    /* quantize: the codes; compare: NULL */
	struct dli_stats_record *recs; /* compare: one per chunk, or NULL: then all into *one */
	struct dli_stats_record *one;
};

/* One chunk, under the floating-point environment the casts assume: round to nearest even (the
 * SIMD paths round by float addition) and subnormals honoured (a host's FTZ/DAZ would turn a
 * subnormal x into 0, hiding an underflow). The thread's own setting is restored afterwards. */
static void pass_chunk(void *arg, int64_t c, int worker)
{
	const struct pass *ps = arg;
	int64_t first = c * DLI_STATS_CHUNK;
	int64_t m = ps->n - first < DLI_STATS_CHUNK ? ps->n - first : DLI_STATS_CHUNK;
	const char *p = ps->data + (size_t)first * dli_dtype_size(ps->dtype);
	unsigned csr = dli_csr_exact();
	(void)worker;
	if (ps->q)
		ps->quantize(p, ps->dtype, m, ps->format, ps->scale, ps->q + first);
	else
		ps->compare(p, ps->dtype, m, ps->format, ps->scale, ps->xs_known,
			    ps->recs ? &ps->recs[c] : ps->one);
	dli_csr_restore(csr);
}

/* Runs every chunk, on threads when the input is large. The terms of chunk c land in recs[c]: the
 * caller adds them up in chunk order, so the result does not depend on the thread count or the
 * scheduling. */
static void run(struct pass *ps, const struct dli_cpu_options *o, int64_t n_chunks)
{
	int threads = ps->n > FP8_THREAD_MIN ? dli_cpu_threads(o) : 1;

	if (threads > 1 && n_chunks > 1) {
		dli_parallel_for(n_chunks, threads, pass_chunk, ps);
		return;
	}
	for (int64_t c = 0; c < n_chunks; c++)
		pass_chunk(ps, c, 0);
}

/* The FP8 terms of every chunk into *out (FP8 terms empty). */
static void compare_chunks(struct pass *ps, const struct dli_cpu_options *o, int64_t n_chunks,
			   struct dli_stats_record *out)
{
	/* Per-chunk records (a few hundred bytes per MiB of input) let threads finish in any
	 * order; without memory for them the chunks run here, one after the other. */
	if (n_chunks > 1 && ps->n > FP8_THREAD_MIN)
		ps->recs = calloc((size_t)n_chunks, sizeof(*ps->recs));
	if (ps->recs) {
		run(ps, o, n_chunks);
		for (int64_t c = 0; c < n_chunks; c++)
			dli_stats_add_fp8_terms(out, &ps->recs[c]);
		free(ps->recs);
		ps->recs = NULL;
		return;
	}
	ps->one = out;
	for (int64_t c = 0; c < n_chunks; c++)
		pass_chunk(ps, c, 0);
}

const struct dli_cpu_options *dli_fp8_compare_opts(double min_nonzero_abs, float scale,
						   const struct dli_cpu_options *o,
						   struct dli_cpu_options *scratch)
{
	if (!(min_nonzero_abs * (double)scale < 0x1p-63))
		return o;
	*scratch = o ? *o : (struct dli_cpu_options){0};
	scratch->simd = DLI_SIMD_SCALAR;
	return scratch;
}

int dli_cpu_fp8_compare(const void *data, enum dli_dtype dtype, int64_t n, enum dli_dtype format,
			float scale, const struct dli_cpu_options *o, struct dli_stats_record *out)
{
	return dli_cpu_fp8_compare_sum_sq(data, dtype, n, format, scale, NAN, o, out);
}

int dli_cpu_fp8_compare_sum_sq(const void *data, enum dli_dtype dtype, int64_t n,
			       enum dli_dtype format, float scale, double sum_sq,
			       const struct dli_cpu_options *o, struct dli_stats_record *out)
{
	struct pass ps = { .data = data, .dtype = dtype, .format = format, .n = n, .scale = scale };
	quantize_fn qz;
	int64_t n_chunks = (n + DLI_STATS_CHUNK - 1) / DLI_STATS_CHUNK;
	int r;

	if (!out)
		return -EINVAL;
	r = check_args(data, dtype, n, format, scale);
	if (r == 0)
		r = pick(o, &ps.compare, &qz);
	if (r < 0)
		return r;
	dli_stats_record_init(out);
	/* What a host would store to dequantize with. */
	out->scale_inv_min = out->scale_inv_max = 1.0f / scale;
	if (n == 0)
		return 0;
	/* Only the bf16 fast steps leave anything out: f32 and f16 are bound by memory. */
	ps.xs_known = isfinite(sum_sq) && ps.compare != compare_reference && dtype == DLI_DTYPE_BF16;
	compare_chunks(&ps, o, n_chunks, out);
	if (!ps.xs_known)
		return 0;
	/* What the paths left out of x_sq, dot and dq_sq (fp8-private.h). */
	double left_out = sum_sq - out->x_sq;
	out->x_sq = sum_sq;
	out->dot += left_out;
	out->dq_sq += left_out;
	/* sum_sq's own rounding (about 1e-7 of it, from the statistics pass's float lanes) is now
	 * in dot and dq_sq whole: where they are far below sum_sq (most of its weight in values that
	 * saturate or underflow: rare in scaled data) that is too much of them (the tests hold the
	 * terms to 1e-5), and the pass runs again, summing everything. */
	if (!(out->dq_sq >= 0x1p-4 * sum_sq && out->dot >= 0x1p-4 * sum_sq)) {
		dli_stats_record_init(out);
		out->scale_inv_min = out->scale_inv_max = 1.0f / scale;
		ps.xs_known = false;
		compare_chunks(&ps, o, n_chunks, out);
	}
	return 0;
}

int dli_cpu_fp8_quantize(const void *data, enum dli_dtype dtype, int64_t n, enum dli_dtype format,
			 float scale, const struct dli_cpu_options *o, uint8_t *q)
{
	struct pass ps = { .data = data, .dtype = dtype, .format = format, .n = n, .scale = scale,
			   .q = q };
	int r;

	r = check_args(data, dtype, n, format, scale);
	if (r == 0 && n > 0 && !q)
		r = -EINVAL;
	if (r == 0)
		r = pick(o, &ps.compare, &ps.quantize);
	if (r < 0 || n == 0)
		return r;
	run(&ps, o, (n + DLI_STATS_CHUNK - 1) / DLI_STATS_CHUNK);
	return 0;
}

/* ---- Host-quantized tensors ---- */

int dli_cpu_fp8_compare_quantized(const void *hp, enum dli_dtype hp_dtype, const uint8_t *q,
				  enum dli_dtype format, const float *scale_inv, int64_t n_scale_inv,
				  int64_t n, const struct dli_cpu_options *o,
				  struct dli_stats_record *out)
{
	const struct fp8_format *f = fp8_format_of(format);
	uint64_t count = 0, under = 0, over = 0;
	double err = 0, dot = 0, dqs = 0, xs = 0;
	double lo = INFINITY, hi = 0;
	float table[256], si, limit;

	if (!out || !f || !scale_inv || n_scale_inv < 1 || n < 0)
		return -EINVAL;
	if (hp && (!input_dtype_ok(hp_dtype) || (n > 0 && !q)))
		return -EINVAL;
	/* Only per-tensor scaling has one scale_inv per element that we know how to find;
	 * per-block layouts differ between recipes. */
	if (hp && n_scale_inv != 1)
		return -ENOTSUP;

	dli_stats_record_init(out);
	for (int64_t i = 0; i < n_scale_inv; i++) {
		double v = scale_inv[i];
		if (v != 0.0 && v < lo) /* NaN compares false: never a min or max */
			lo = v;
		if (v > hi)
			hi = v;
	}
	out->scale_inv_min = lo;
	out->scale_inv_max = hi;
	if (!hp)
		return 0;

	si = scale_inv[0];
	for (int i = 0; i < 256; i++)
		table[i] = decode((uint8_t)i, f) * si; /* dequantized as TransformerEngine does */
	/* The saturation the host's cast must have done: |hp| > max * si, the product rounded to
	 * float as TransformerEngine computes it (a float32 tensor product). An element at the
	 * amax the scale came from lies within a rounding of that limit, so the exact product
	 * would count it as an overflow where TransformerEngine does not, and the other way. */
	limit = f->max * si;
	for (int64_t i = 0; i < n; i++) {
		float x = load(hp, hp_dtype, i);
		double dq, d;

		if (!isfinite(x))
			continue;
		count++;
		if (x != 0.0f && (q[i] & 0x7f) == 0)
			under++;
		if (fabsf(x) > limit)
			over++;
		/* A NaN or inf code from a finite x stays in the sums: the NaN mse it gives is
		 * the host's bug made visible. */
		dq = table[q[i]];
		d = x - dq;
		err += d * d;
		dot += x * dq;
		dqs += dq * dq;
		xs += (double)x * x;
	}
	(void)o;
	out->fp8_count = count;
	out->underflows = under;
	out->overflows = over;
	out->err_sq = err;
	out->dot = dot;
	out->dq_sq = dqs;
	out->x_sq = xs;
	return 0;
}
