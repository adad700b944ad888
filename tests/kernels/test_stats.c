/* The statistics engine: records (init, merge, finalization, names), the CPU pass on every dtype and
 * SIMD path against an independent naive double reference, merges of microbatches, threads, the
 * thread pool, and the floating-point environment a host may leave behind. */
#include <errno.h>
#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#ifdef DLI_HAVE_X86_SIMD
#include <xmmintrin.h>
#endif

#include "check.h"
#include "cpu/cpu-private.h"
#include "kernels-private.h"
#include "ref.h"

/* Float lanes inside a block add at most a few hundred terms each: the worst-case relative error
 * of such a sum is ~128 * 2^-24 ~ 8e-6 of the sum of magnitudes, the typical one ~1e-6. */
#define TOL 1e-5

static const enum dli_dtype dtypes[] = {DLI_DTYPE_F32, DLI_DTYPE_BF16, DLI_DTYPE_F16,
					DLI_DTYPE_F8E4M3, DLI_DTYPE_F8E5M2};
static const char *const dtype_names[] = {"f32", "f16", "bf16", "f8e4m3", "f8e5m2"};

/* got is close enough to want for statistic s; err_scale is mean |x| (the scale of a sum's error). */
static bool close_enough(enum dli_stat s, double got, double want, double err_scale, double tol)
{
	if (isnan(want) || isnan(got))
		return isnan(want) && isnan(got);
	if (isinf(want) || isinf(got))
		return got == want;
	switch (s) {
	case DLI_STAT_MIN: case DLI_STAT_MAX: case DLI_STAT_CUR_AMAX:
	case DLI_STAT_NAN_COUNT: case DLI_STAT_INF_COUNT: case DLI_STAT_ZERO_PCT:
		return got == want;
	case DLI_STAT_DYNAMIC_RANGE:
		return fabs(got - want) <= 1e-12 * fmax(1.0, fabs(want));
	case DLI_STAT_MEAN:
		/* A sum may cancel: its error is relative to the magnitudes summed, not to the sum. */
		return fabs(got - want) <= tol * err_scale;
	default:
		return fabs(got - want) <= tol * fabs(want);
	}
}

static void check_values(const struct dli_stats_record *r, const double want[DLI_STAT_COUNT],
			 double err_scale, double tol, const char *what)
{
	for (int s = 0; s < DLI_STAT_COUNT; s++) {
		double got = dli_stats_value(r, (enum dli_stat)s);
		check_count++;
		if (!close_enough((enum dli_stat)s, got, want[s], err_scale, tol)) {
			check_failures++;
			fprintf(stderr, "%s: %s = %.17g, expected %.17g (rel err %.3g)\n", what,
				dli_stat_name((enum dli_stat)s), got, want[s],
				fabs(got - want[s]) / fabs(want[s]));
		}
	}
}

static void record_values(const struct dli_stats_record *r, double v[DLI_STAT_COUNT])
{
	for (int s = 0; s < DLI_STAT_COUNT; s++)
		v[s] = dli_stats_value(r, (enum dli_stat)s);
}

/* ---- Data ---- */

enum mix { NORMAL, WIDE, WITH_INF, WITH_NAN, ZEROS, OFFSET, TINY, HUGE, CONSTANT, POSITIVE, N_MIX };
static const char *const mix_names[] = {"normal", "wide", "inf", "nan", "zeros",
					"offset", "tiny", "huge", "constant", "positive"};

/* The smallest subnormal of each dtype, to put subnormals into the data. */
static double subnormal_unit(enum dli_dtype dt)
{
	switch (dt) {
	case DLI_DTYPE_F32: return 0x1p-149;
	case DLI_DTYPE_BF16: return 0x1p-133;
	case DLI_DTYPE_F16: return 0x1p-24;
	case DLI_DTYPE_F8E4M3: return 0x1p-9;
	default: return 0x1p-16;
	}
}

static double gen_value(enum mix mix, enum dli_dtype dt)
{
	double u = rng_unit();
	switch (mix) {
	case NORMAL:
		return rng_normal();
	case WIDE:
	case WITH_INF:
	case WITH_NAN:
		if (mix == WITH_NAN && u < 0.01)
			return NAN;
		if (mix >= WITH_INF && u < 0.02)
			return u < 0.015 ? INFINITY : -INFINITY;
		if (u < 0.10)
			return 0.0;
		if (u < 0.15)
			return -0.0;
		if (u < 0.20)
			return (double)(1 + (int)(rng_u64() % 7)) * subnormal_unit(dt) * (u < 0.175 ? 1 : -1);
		if (u < 0.21)
			return 1e5; /* beyond E4M3 and E5M2: saturates there */
		if (u < 0.22)
			return -3e4;
		return rng_normal() * pow(10.0, 6.0 * rng_unit() - 3.0);
	case ZEROS:
		return u < 0.5 ? 0.0 : -0.0;
	case OFFSET:
		return 1e4 + 1e-2 * rng_normal();
	case TINY:
		return 1e-30 * rng_normal();
	case HUGE:
		return 1e30 * rng_normal();
	case CONSTANT:
		return 3.0;
	case POSITIVE:
		return u;
	default:
		return 0;
	}
}

/* A buffer of n elements of dt at byte offset `off` from a malloc'd base (freed by the caller
 * through *base), with the decoded values in *xs. */
static void *make_data(enum dli_dtype dt, enum mix mix, int64_t n, size_t off, void **base, double **xs)
{
	size_t es = dli_dtype_size(dt);
	unsigned char *b = malloc((size_t)n * es + off + 1);
	double *x = malloc(((size_t)n + 1) * sizeof(double));
	for (int64_t i = 0; i < n; i++)
		ref_store(b + off, dt, i, gen_value(mix, dt));
	for (int64_t i = 0; i < n; i++)
		x[i] = ref_decode(b + off, dt, i);
	*base = b;
	*xs = x;
	return b + off;
}

/* ---- Records ---- */

static void test_record_basics(void)
{
	struct dli_stats_record r, e;
	dli_stats_record_init(&r);
	CHECK(r.count == 0 && r.min == INFINITY && r.max == -INFINITY && r.amax == 0);
	CHECK(r.min_nonzero_abs == INFINITY && r.scale_inv_min == INFINITY && r.scale_inv_max == 0);

	/* Empty: counts are 0, everything else NaN (nothing divides by zero into a number). */
	for (int s = 0; s < DLI_STAT_COUNT; s++) {
		double v = dli_stats_value(&r, (enum dli_stat)s);
		if (s == DLI_STAT_NAN_COUNT || s == DLI_STAT_INF_COUNT)
			CHECK(v == 0);
		else
			CHECK(isnan(v));
	}
	CHECK(isnan(dli_stats_value(&r, DLI_STAT_COUNT)));
	CHECK(isnan(dli_stats_value(&r, (enum dli_stat)-1)));

	/* Merging the empty record changes nothing, bit for bit, on either side. */
	float one[3] = {1.5f, -2.0f, 0.25f};
	CHECK_INT(dli_cpu_stats(one, DLI_DTYPE_F32, 3, NULL, &r), 0);
	struct dli_stats_record a = r;
	dli_stats_record_init(&e);
	dli_stats_merge(&a, &e);
	CHECK(!memcmp(&a, &r, sizeof(r)));
	dli_stats_merge(&e, &r);
	CHECK(!memcmp(&e, &r, sizeof(r)));

	/* One element: no variance; min = max = mean. */
	CHECK_INT(dli_cpu_stats(one, DLI_DTYPE_F32, 1, NULL, &r), 0);
	CHECK(isnan(dli_stats_value(&r, DLI_STAT_VAR)) && isnan(dli_stats_value(&r, DLI_STAT_STD)));
	CHECK(dli_stats_value(&r, DLI_STAT_MIN) == 1.5 && dli_stats_value(&r, DLI_STAT_MEAN) == 1.5);
	CHECK(dli_stats_value(&r, DLI_STAT_DYNAMIC_RANGE) == 0);

	/* All zeros: dynamic range inf (as TransformerEngine logs it), zero% 100, min_nonzero_abs
	 * never set. */
	float z[5] = {0, -0.0f, 0, 0, -0.0f};
	CHECK_INT(dli_cpu_stats(z, DLI_DTYPE_F32, 5, NULL, &r), 0);
	CHECK(dli_stats_value(&r, DLI_STAT_DYNAMIC_RANGE) == INFINITY);
	CHECK(dli_stats_value(&r, DLI_STAT_ZERO_PCT) == 100);
	CHECK(dli_stats_value(&r, DLI_STAT_VAR) == 0);

	/* A NaN makes min, max, amax and the range NaN, and the sums with it. */
	float wn[3] = {1, NAN, -4};
	CHECK_INT(dli_cpu_stats(wn, DLI_DTYPE_F32, 3, NULL, &r), 0);
	CHECK(isnan(dli_stats_value(&r, DLI_STAT_MIN)) && isnan(dli_stats_value(&r, DLI_STAT_MAX)));
	CHECK(isnan(dli_stats_value(&r, DLI_STAT_CUR_AMAX)));
	CHECK(isnan(dli_stats_value(&r, DLI_STAT_DYNAMIC_RANGE)));
	CHECK(dli_stats_value(&r, DLI_STAT_NAN_COUNT) == 1 && r.min == -4 && r.max == 1);

	/* An infinity: mean inf, var NaN, as a naive double loop gives. */
	float wi[4] = {1, INFINITY, -4, 2};
	CHECK_INT(dli_cpu_stats(wi, DLI_DTYPE_F32, 4, NULL, &r), 0);
	CHECK(dli_stats_value(&r, DLI_STAT_MEAN) == INFINITY);
	CHECK(isnan(dli_stats_value(&r, DLI_STAT_VAR)));
	CHECK(dli_stats_value(&r, DLI_STAT_INF_COUNT) == 1);
	CHECK(dli_stats_value(&r, DLI_STAT_CUR_AMAX) == INFINITY);
	CHECK(dli_stats_value(&r, DLI_STAT_L2_NORM) == INFINITY);
}

static void test_record_fp8_terms(void)
{
	struct dli_stats_record r;
	dli_stats_record_init(&r);
	r.fp8_count = 200;
	r.underflows = 3;
	r.overflows = 5;
	r.err_sq = 2.0;
	r.x_sq = 200.0;
	r.dq_sq = 196.0;
	r.dot = 197.0;
	CHECK(dli_stats_value(&r, DLI_STAT_UNDERFLOWS_PCT) == 1.5);
	CHECK(dli_stats_value(&r, DLI_STAT_OVERFLOWS_PCT) == 2.5);
	CHECK(dli_stats_value(&r, DLI_STAT_MSE) == 0.01);
	CHECK(fabs(dli_stats_value(&r, DLI_STAT_COS_SIM) - 197.0 / sqrt(200.0 * 196.0)) < 1e-15);
	CHECK(fabs(dli_stats_value(&r, DLI_STAT_SQNR_DB) - 20.0) < 1e-12);
	/* No scale_inv seen yet: NaN, not the init values. */
	CHECK(isnan(dli_stats_value(&r, DLI_STAT_SCALE_INV_MIN)));
	CHECK(isnan(dli_stats_value(&r, DLI_STAT_SCALE_INV_MAX)));
	r.err_sq = 0;
	CHECK(dli_stats_value(&r, DLI_STAT_SQNR_DB) == INFINITY);

	struct dli_stats_record a, b;
	dli_stats_record_init(&a);
	dli_stats_record_init(&b);
	a.scale_inv_min = a.scale_inv_max = 0.5;
	b.scale_inv_min = b.scale_inv_max = 2.0;
	a.fp8_count = 1;
	b.fp8_count = 2;
	a.err_sq = 1;
	b.err_sq = 2;
	dli_stats_merge(&a, &b);
	CHECK(dli_stats_value(&a, DLI_STAT_SCALE_INV_MIN) == 0.5);
	CHECK(dli_stats_value(&a, DLI_STAT_SCALE_INV_MAX) == 2.0);
	CHECK(a.fp8_count == 3 && a.err_sq == 3);
	CHECK(dli_stats_value(&a, DLI_STAT_MSE) == 1.0);
	/* A statistics pass alone has no FP8 terms: those stats are NaN. */
	float x[2] = {1, 2};
	CHECK_INT(dli_cpu_stats(x, DLI_DTYPE_F32, 2, NULL, &r), 0);
	CHECK(isnan(dli_stats_value(&r, DLI_STAT_MSE)) && isnan(dli_stats_value(&r, DLI_STAT_COS_SIM)));
	CHECK(isnan(dli_stats_value(&r, DLI_STAT_UNDERFLOWS_PCT)));
}

static void test_stat_names(void)
{
	static const char *const names[] = {"min", "max", "mean", "std", "var", "l1_norm", "l2_norm",
		"cur_amax", "dynamic_range", "nan_count", "inf_count", "zero%", "underflows%",
		"overflows%", "scale_inv_min", "scale_inv_max", "mse", "cos_sim", "sqnr_db"};
	CHECK_INT(sizeof(names) / sizeof(names[0]), DLI_STAT_COUNT);
	for (int s = 0; s < DLI_STAT_COUNT; s++) {
		CHECK_STR(dli_stat_name((enum dli_stat)s), names[s]);
		CHECK_INT(dli_stat_from_name(names[s]), s);
	}
	CHECK(dli_stat_name(DLI_STAT_COUNT) == NULL);
	CHECK_INT(dli_stat_from_name("median"), -1);
	CHECK_INT(dli_stat_from_name("MIN"), -1);
	CHECK_INT(dli_stat_from_name(NULL), -1);
}

/* ---- The pass against the reference, on every dtype, size, alignment and path ---- */

static const enum dli_simd paths[] = {DLI_SIMD_SCALAR, DLI_SIMD_AVX2, DLI_SIMD_AVX512};

static void run_case(enum dli_dtype dt, enum mix mix, int64_t n, size_t off)
{
	void *base;
	double *x, want[DLI_STAT_COUNT], scale, scalar[DLI_STAT_COUNT];
	void *p = make_data(dt, mix, n, off, &base, &x);
	char what[160];
	ref_stats(x, n, want, &scale);
	for (size_t k = 0; k < sizeof(paths) / sizeof(paths[0]); k++) {
		struct dli_cpu_options o = {.simd = paths[k], .threads = 1};
		struct dli_stats_record r;
		int rc = dli_cpu_stats(p, dt, n, &o, &r);
		if (paths[k] > dli_simd_detect()) {
			CHECK_INT(rc, -ENOTSUP);
			continue;
		}
		snprintf(what, sizeof(what), "%s %s n=%lld off=%zu %s", dtype_names[dt], mix_names[mix],
			 (long long)n, off, dli_simd_name(paths[k]));
		CHECK_INT(rc, 0);
		CHECK(r.count == (uint64_t)n);
		check_values(&r, want, scale, TOL, what);
		/* Each SIMD path against the scalar one: the same up to float rounding. */
		if (paths[k] == DLI_SIMD_SCALAR) {
			record_values(&r, scalar);
		} else {
			strcat(what, " vs scalar");
			check_values(&r, scalar, scale, TOL, what);
		}
	}
	free(base);
	free(x);
}

static void test_pass_against_reference(void)
{
	int64_t sizes[64];
	int ns = 0;
	sizes[ns++] = 0;
	sizes[ns++] = 1;
	sizes[ns++] = 2;
	sizes[ns++] = 7;
	static const int ks[] = {4, 5, 6, 7, 8, 10, 11, 12, 13};
	for (size_t i = 0; i < sizeof(ks) / sizeof(ks[0]); i++)
		for (int d = -1; d <= 1; d++)
			sizes[ns++] = ((int64_t)1 << ks[i]) + d;
	const int n_small = ns;
	/* Larger: several blocks, and across a chunk boundary (2^18). */
	sizes[ns++] = 65535;
	sizes[ns++] = 65537;
	sizes[ns++] = ((int64_t)1 << 18) - 1;
	sizes[ns++] = ((int64_t)1 << 18) + 1;
	sizes[ns++] = 300001;

	for (size_t d = 0; d < sizeof(dtypes) / sizeof(dtypes[0]); d++) {
		enum dli_dtype dt = dtypes[d];
		size_t es = dli_dtype_size(dt);
		/* Element-aligned offsets that break vector alignment, and a byte offset that breaks
		 * element alignment too. */
		size_t offs[4] = {0, es, 3 * es, 1};
		int n_offs = es > 1 ? 4 : 3;
		for (int mix = 0; mix < N_MIX; mix++) {
			for (int s = 0; s < n_small; s++)
				for (int o = 0; o < n_offs; o++)
					run_case(dt, (enum mix)mix, sizes[s], offs[o]);
			if (mix == WIDE || mix == WITH_NAN || mix == OFFSET || mix == TINY)
				for (int s = n_small; s < ns; s++)
					run_case(dt, (enum mix)mix, sizes[s], s % 2 ? es : 0);
		}
	}
}

/* Every FP8 code once: the decoders of every path agree with the definition. */
static void test_fp8_all_codes(void)
{
	uint8_t codes[256 + 64];
	for (int e5 = 0; e5 < 2; e5++) {
		enum dli_dtype dt = e5 ? DLI_DTYPE_F8E5M2 : DLI_DTYPE_F8E4M3;
		for (int skip_nan = 0; skip_nan < 2; skip_nan++) {
			int n = 0;
			for (int c = 0; c < 256; c++) {
				double v = ref_decode_fp8((uint8_t)c, e5);
				if (skip_nan && (isnan(v) || isinf(v)))
					continue;
				codes[n++] = (uint8_t)c;
			}
			double x[256 + 64], want[DLI_STAT_COUNT], scale;
			for (int i = 0; i < n; i++)
				x[i] = ref_decode_fp8(codes[i], e5);
			ref_stats(x, n, want, &scale);
			for (size_t k = 0; k < 3 && paths[k] <= dli_simd_detect(); k++) {
				struct dli_cpu_options o = {.simd = paths[k], .threads = 1};
				struct dli_stats_record r;
				CHECK_INT(dli_cpu_stats(codes, dt, n, &o, &r), 0);
				check_values(&r, want, scale, TOL, dli_simd_name(paths[k]));
				if (skip_nan) {
					/* Every finite code: exact extrema and the smallest subnormal. */
					CHECK(r.max == (e5 ? 57344 : 448) && r.min == -r.max);
					CHECK(r.min_nonzero_abs == (e5 ? 0x1p-16 : 0x1p-9));
					CHECK_INT(r.zero_count, 2);
				}
			}
		}
	}
}

/* The AVX-512 pass takes bf16 through vdpbf16ps and 16-bit lanes where the CPU has AVX512_BF16
 * (kernels/cpu/stats-avx512.c); this switch sends it through the generic loop instead. */
extern int dli_stats_avx512_bf16dp;

/* Blocks of one sign, with and without +-0 (the integer-lane paths derive min or max from the zero
 * count and the least nonzero magnitude there), on f32, bf16 and f16: the AVX2 path's integer
 * lanes (f32, bf16) and generic loop (f16), and both AVX-512 bf16 loops, against the reference;
 * and the reference cases once more with the AVX-512 generic loop for bf16. */
static void test_one_sign_blocks(void)
{
	int64_t n = 3 * DLI_STATS_BLOCK + 37;
	unsigned char *p = malloc((size_t)n * 4);
	double *x = malloc((size_t)n * sizeof(double));
	static const enum dli_dtype sdt[] = {DLI_DTYPE_BF16, DLI_DTYPE_F32, DLI_DTYPE_F16};
	for (int di = 0; di < 3; di++) {
		enum dli_dtype dt = sdt[di];
		/* case: 0 all negative, 1 negative and -0, 2 negative and +0, 3 positive and -0,
		 * 4 positive and +0, 5 only -0, 6 one positive among negatives, 7 one negative among positives,
		 * 8 only +0, 9 negative subnormals and -0 */
		for (int c = 0; c < 10; c++) {
			for (int64_t i = 0; i < n; i++) {
				double v = 0.1 + rng_unit();
				if (c <= 2 || c == 6)
					v = -v;
				if ((c == 1 || c == 3) && i % 97 == 5)
					v = -0.0;
				if ((c == 2 || c == 4) && i % 89 == 7)
					v = 0.0;
				if (c == 5)
					v = -0.0;
				if (c == 6 && i == n / 2)
					v = 0.25;
				if (c == 7 && i == DLI_STATS_BLOCK + 3)
					v = -0.5;
				if (c == 8)
					v = 0.0;
				if (c == 9)
					v = i % 5 ? -(double)(1 + i % 127) * 0x1p-133 : -0.0;
				ref_store(p, dt, i, v);
			}
			for (int64_t i = 0; i < n; i++)
				x[i] = ref_decode(p, dt, i);
			double want[DLI_STAT_COUNT], scale;
			ref_stats(x, n, want, &scale);
			for (int k = 0; k < 3; k++) {
				enum dli_simd simd = k ? DLI_SIMD_AVX512 : DLI_SIMD_AVX2;
				int dp = k == 2;
				if (simd > dli_simd_detect() || (dp && dt != DLI_DTYPE_BF16))
					continue;
				struct dli_cpu_options o = {.simd = simd, .threads = 1};
				struct dli_stats_record r;
				char what[64];
				snprintf(what, sizeof(what), "%s signs case %d %s bf16dp=%d", dtype_names[dt], c,
					 dli_simd_name(simd), dp);
				dli_stats_avx512_bf16dp = dp;
				CHECK_INT(dli_cpu_stats(p, dt, n, &o, &r), 0);
				check_values(&r, want, scale, TOL, what);
				CHECK(r.min_nonzero_abs == (c == 5 || c == 8 ? INFINITY : r.min_nonzero_abs));
				/* Zero extrema with the reference's signs (check_values compares them with ==). */
				if (c == 5)
					CHECK(signbit(r.min) && signbit(r.max));
				if (c == 8)
					CHECK(!signbit(r.min) && !signbit(r.max));
			}
		}
	}
	dli_stats_avx512_bf16dp = 1;
	if (dli_simd_detect() >= DLI_SIMD_AVX512) {
		dli_stats_avx512_bf16dp = 0;
		for (int mix = 0; mix < N_MIX; mix++)
			for (int64_t m = 1; m < 20000; m = m * 3 + 1)
				run_case(DLI_DTYPE_BF16, (enum mix)mix, m, mix % 2 ? 2 : 0);
		dli_stats_avx512_bf16dp = 1;
	}
	free(p);
	free(x);
}

/* Blocks holding NaN or infinities, which the AVX2 path (and the AVX-512 one for bf16 and f16)
 * records from counts and extrema alone (an integer pass, kernels/cpu/stats-avx2.c nf_block): every sign combination of NaN, +inf and -inf
 * among negatives, positives, zeros and subnormals, whole tensors of one case and stretches of
 * them among clean data, on f32, bf16 and f16, every path against the reference. */
static double nf_value(int c, int64_t i)
{
	double v = 0.1 + rng_unit();
	switch (c) {
	case 0: return i % 2 ? NAN : -NAN;                  /* only NaN */
	case 1: return i % 97 == 3 ? NAN : -v;              /* negatives and NaN */
	case 2: return i % 97 == 3 ? -NAN : v;              /* positives and -NaN */
	case 3: return i == 1234 ? INFINITY : rng_normal(); /* one +inf */
	case 4: return i == 777 ? -INFINITY : rng_normal(); /* one -inf */
	case 5: return i == 5000 ? INFINITY : -v;           /* +inf among negatives */
	case 6: return i == 100 ? -INFINITY : i % 2 ? 0.0 : -0.0; /* -inf among zeros */
	case 7: return i % 3 ? INFINITY : -INFINITY;        /* only infinities */
	case 8: return i % 211 == 0 ? NAN : i % 7 ? v : -0.0; /* positives, -0 and NaN */
	case 9: return i % 50 == 1 ? (i % 100 == 1 ? INFINITY : NAN) : -(double)(1 + i % 5) * 0x1p-133;
	case 10: return i == 4095 ? NAN : i % 2 ? 1e-30 : -3e30; /* extreme magnitudes and NaN */
	default: return rng_normal();                       /* clean */
	}
}

static void test_nonfinite_blocks(void)
{
	enum { N_CASES = 12 };
	const int64_t n = 5 * DLI_STATS_BLOCK + 45;
	for (size_t d = 0; d < 3; d++) {
		enum dli_dtype dt = dtypes[d];
		size_t es = dli_dtype_size(dt);
		unsigned char *p = malloc((size_t)n * es);
		double *x = malloc((size_t)n * sizeof(double)), want[DLI_STAT_COUNT], scale;
		/* c < N_CASES: the whole tensor one case; then stretches of 1000 and 4096 elements of
		 * the cases in turn */
		for (int c = 0; c < N_CASES + 2; c++) {
			int64_t stretch = c == N_CASES ? 1000 : 4096;
			for (int64_t i = 0; i < n; i++) {
				int k = c < N_CASES ? c : (int)((i / stretch) % N_CASES);
				ref_store(p, dt, i, nf_value(k, i));
				x[i] = ref_decode(p, dt, i);
			}
			ref_stats(x, n, want, &scale);
			/* The record's extrema leave NaN out (include/dlinspect/stats.h); the statistics
			 * made from them are NaN when there is one, so check the fields themselves. */
			double mn = INFINITY, mx = -INFINITY, amax = 0, mnz = INFINITY;
			for (int64_t i = 0; i < n; i++) {
				if (isnan(x[i]))
					continue;
				mn = x[i] < mn ? x[i] : mn;
				mx = x[i] > mx ? x[i] : mx;
				amax = fabs(x[i]) > amax ? fabs(x[i]) : amax;
				if (x[i] != 0 && fabs(x[i]) < mnz)
					mnz = fabs(x[i]);
			}
			for (size_t k = 0; k < sizeof(paths) / sizeof(paths[0]); k++) {
				if (paths[k] > dli_simd_detect())
					continue;
				struct dli_cpu_options o = {.simd = paths[k], .threads = 1};
				struct dli_stats_record r;
				char what[96];
				CHECK_INT(dli_cpu_stats(p, dt, n, &o, &r), 0);
				snprintf(what, sizeof(what), "non-finite case %d %s %s", c, dtype_names[dt],
					 dli_simd_name(paths[k]));
				CHECK(r.count == (uint64_t)n);
				check_values(&r, want, scale, TOL, what);
				if (r.min != mn || r.max != mx || r.amax != amax || r.min_nonzero_abs != mnz) {
					check_failures++;
					fprintf(stderr, "%s: record min %g max %g amax %g mnz %g, expected %g %g "
						"%g %g\n", what, r.min, r.max, r.amax, r.min_nonzero_abs, mn, mx,
						amax, mnz);
				}
				check_count++;
				if (c == 0)
					CHECK(r.nan_count == (uint64_t)n);
			}
		}
		free(p);
		free(x);
	}
}

/* ---- Merges ---- */

/* A record of x[0..n) computed as k microbatches cut at random points (some may be empty). */
static void merged_record(const void *p, enum dli_dtype dt, int64_t n, int k, bool reverse,
			  struct dli_stats_record *out)
{
	int64_t cuts[9];
	cuts[0] = 0;
	cuts[k] = n;
	for (int i = 1; i < k; i++)
		cuts[i] = (int64_t)(rng_u64() % (uint64_t)(n + 1));
	for (int i = 1; i < k; i++) /* sort the inner cuts */
		for (int j = i + 1; j < k; j++)
			if (cuts[j] < cuts[i]) {
				int64_t t = cuts[i];
				cuts[i] = cuts[j];
				cuts[j] = t;
			}
	struct dli_stats_record part;
	dli_stats_record_init(out);
	size_t es = dli_dtype_size(dt);
	for (int ii = 0; ii < k; ii++) {
		int i = reverse ? k - 1 - ii : ii;
		CHECK_INT(dli_cpu_stats((const char *)p + (size_t)cuts[i] * es, dt, cuts[i + 1] - cuts[i],
					NULL, &part),
			  0);
		dli_stats_merge(out, &part);
	}
}

static void test_merge(void)
{
	static const enum mix mixes[] = {NORMAL, WIDE, WITH_INF, WITH_NAN, OFFSET, POSITIVE};
	for (size_t d = 0; d < 2; d++) {
		enum dli_dtype dt = d ? DLI_DTYPE_BF16 : DLI_DTYPE_F32;
		for (size_t m = 0; m < sizeof(mixes) / sizeof(mixes[0]); m++) {
			void *base;
			double *x, want[DLI_STAT_COUNT], scale, whole_v[DLI_STAT_COUNT];
			int64_t n = 100003;
			void *p = make_data(dt, mixes[m], n, 0, &base, &x);
			ref_stats(x, n, want, &scale);
			struct dli_stats_record whole, merged;
			CHECK_INT(dli_cpu_stats(p, dt, n, NULL, &whole), 0);
			record_values(&whole, whole_v);
			for (int k = 1; k <= 7; k++)
				for (int rev = 0; rev < 2; rev++) {
					char what[96];
					snprintf(what, sizeof(what), "merge %s %s k=%d%s", dtype_names[dt],
						 mix_names[mixes[m]], k, rev ? " reversed" : "");
					merged_record(p, dt, n, k, rev, &merged);
					CHECK(merged.count == (uint64_t)n);
					CHECK(merged.zero_count == whole.zero_count);
					check_values(&merged, whole_v, scale, TOL, what);
					check_values(&merged, want, scale, TOL, what);
				}
			free(base);
			free(x);
		}
	}
}

/* The moments of finite x in long double over ref_stats' double ones: a naive double sum of 1e5
 * elements is itself off by ~1e-12 where the mean is far from 0 (OFFSET). */
static void ref_moments_long(const double *x, int64_t n, double want[DLI_STAT_COUNT])
{
	long double sum = 0, sum_abs = 0, sum_sq = 0, m2 = 0;
	for (int64_t i = 0; i < n; i++) {
		if (!isfinite(x[i]))
			return;
		sum += x[i];
		sum_abs += fabsl(x[i]);
		sum_sq += (long double)x[i] * x[i];
	}
	long double mean = sum / n;
	for (int64_t i = 0; i < n; i++)
		m2 += (x[i] - mean) * (x[i] - mean);
	want[DLI_STAT_MEAN] = (double)mean;
	want[DLI_STAT_VAR] = (double)(m2 / (n - 1));
	want[DLI_STAT_STD] = (double)sqrtl(m2 / (n - 1));
	want[DLI_STAT_L1_NORM] = (double)sum_abs;
	want[DLI_STAT_L2_NORM] = (double)sqrtl(sum_sq);
}

/* f32 moments come from double sums on every path (stats-avx2.c), so a tensor cut into shards at
 * any places, their records merged, gives the moments of one call over the whole to double
 * rounding: 1e-12 (the distributed rule, docs/distributed.md), the extrema and counts exactly,
 * and both hold against a long-double reference. A mean is held relative to mean |x|, the
 * scale of its rounding error (close_enough). */
/* Element i of the stretches case: 3001-element stretches (falling across blocks at changing
 * places) of zero-free data around 0, ReLU-like data (half zeros), data around 1e4 (read around a
 * shift), and the same with 1% zeros: a block with zeros after one without, and the reverse, on
 * both sides of the shift. */
static float stretch_value(int64_t i)
{
	double u = rng_unit(), v = rng_normal();
	switch (i / 3001 % 4) {
	case 0: return (float)v;
	case 1: return (float)(v > 0 ? v : 0.0);
	case 2: return (float)(1e4 + 1e-2 * v);
	default: return u < 0.01 ? 0.0f : (float)(1e4 + 1e-2 * v);
	}
}

static void test_f32_shards_one_call(void)
{
	static const enum mix mixes[] = {NORMAL, OFFSET, POSITIVE, ZEROS, TINY, HUGE, WIDE};
	const size_t n_mixes = sizeof(mixes) / sizeof(mixes[0]);
	const int64_t n = 100003;
	for (size_t m = 0; m <= n_mixes; m++) {
		void *base;
		double *x, want[DLI_STAT_COUNT], scale, whole_v[DLI_STAT_COUNT];
		float *p;
		if (m < n_mixes) {
			p = make_data(DLI_DTYPE_F32, mixes[m], n, 0, &base, &x);
		} else {
			p = base = malloc((size_t)n * sizeof(float));
			x = malloc((size_t)n * sizeof(double));
			for (int64_t i = 0; i < n; i++)
				x[i] = p[i] = stretch_value(i);
		}
		const char *name = m < n_mixes ? mix_names[mixes[m]] : "stretches";
		ref_stats(x, n, want, &scale);
		ref_moments_long(x, n, want);
		for (size_t k = 0; k < sizeof(paths) / sizeof(paths[0]); k++) {
			if (paths[k] > dli_simd_detect())
				continue;
			struct dli_cpu_options o = {.simd = paths[k], .threads = 1};
			struct dli_stats_record whole, merged, part;
			char what[96];
			CHECK_INT(dli_cpu_stats(p, DLI_DTYPE_F32, n, &o, &whole), 0);
			record_values(&whole, whole_v);
			snprintf(what, sizeof(what), "f32 %s %s one call", name, dli_simd_name(paths[k]));
			check_values(&whole, want, scale, 1e-12, what);
			for (int shards = 2; shards <= 7; shards++) {
				int64_t cuts[8] = {0};
				cuts[shards] = n;
				for (int i = 1; i < shards; i++) /* increasing, uneven, anywhere */
					cuts[i] = cuts[i - 1] +
						  (int64_t)(rng_u64() % (uint64_t)((n - cuts[i - 1]) / 2 + 1));
				dli_stats_record_init(&merged);
				for (int i = 0; i < shards; i++) {
					CHECK_INT(dli_cpu_stats(p + cuts[i], DLI_DTYPE_F32, cuts[i + 1] - cuts[i],
								&o, &part),
						  0);
					dli_stats_merge(&merged, &part);
				}
				snprintf(what, sizeof(what), "f32 %s %s %d shards", name,
					 dli_simd_name(paths[k]), shards);
				CHECK(merged.count == (uint64_t)n && merged.zero_count == whole.zero_count);
				check_values(&merged, whole_v, scale, 1e-12, what);
			}
		}
		free(base);
		free(x);
	}
}

/* Stretches of data that the SIMD paths' float lanes take and stretches they leave to double lanes
 * (tiny or huge magnitudes, NaN, infinities) in one call: a block after a double one goes straight
 * to double lanes, and the next clean block back to float ones; nothing may be lost or counted
 * twice on the way. Stretches of 1500 elements fall across the blocks at changing places. */
static void test_block_kinds_mixed(void)
{
	static const enum mix finite[] = {OFFSET, TINY, OFFSET, OFFSET, HUGE, OFFSET, NORMAL, TINY};
	static const enum mix nonfinite[] = {NORMAL, WITH_NAN, NORMAL, NORMAL, WITH_INF, NORMAL};
	const int64_t n = 60001, stretch = 1500;
	for (int set = 0; set < 2; set++)
		for (size_t d = 0; d < 3; d++) {
			enum dli_dtype dt = dtypes[d];
			size_t es = dli_dtype_size(dt);
			unsigned char *p = malloc((size_t)n * es);
			double *x = malloc((size_t)n * sizeof(double)), want[DLI_STAT_COUNT], scale;
			for (int64_t i = 0; i < n; i++) {
				int64_t k = i / stretch;
				enum mix m = set ? nonfinite[k % 6] : finite[k % 8];
				ref_store(p, dt, i, gen_value(m, dt));
				x[i] = ref_decode(p, dt, i);
			}
			ref_stats(x, n, want, &scale);
			for (size_t k = 0; k < sizeof(paths) / sizeof(paths[0]); k++) {
				if (paths[k] > dli_simd_detect())
					continue;
				for (int dp = 0; dp < (dt == DLI_DTYPE_BF16 ? 2 : 1); dp++) {
					struct dli_cpu_options o = {.simd = paths[k], .threads = 1};
					struct dli_stats_record r;
					char what[96];
					dli_stats_avx512_bf16dp = dp;
					CHECK_INT(dli_cpu_stats(p, dt, n, &o, &r), 0);
					snprintf(what, sizeof(what), "mixed blocks %s %s %s bf16dp=%d",
						 set ? "non-finite" : "finite", dtype_names[dt],
						 dli_simd_name(paths[k]), dp);
					CHECK(r.count == (uint64_t)n);
					check_values(&r, want, scale, TOL, what);
				}
			}
			dli_stats_avx512_bf16dp = 1;
			if (set) /* the data does hold what the check is about */
				CHECK(want[DLI_STAT_NAN_COUNT] > 0 && want[DLI_STAT_INF_COUNT] > 0);
			free(p);
			free(x);
		}
}

/* Whole bf16 blocks (4096 elements) go through the AVX2 pass in groups of 16, reduced once a
 * group (kernels/cpu/stats-avx2.c, group_bf16): a block with NaN, an infinity or squares past
 * float range ends a group early, at its first, middle or last block; a group of tiny magnitudes
 * or one whose blocks' means drift far apart is read again block by block; data centred within
 * half a standard deviation of 0 are summed around 0 (BF16_NEAR), a first line that looks centred
 * where the rest is not is read again around its mean. Every path against the reference, 40
 * blocks and a partial one. */
static double group_value(int c, int64_t i)
{
	const int64_t blk = i / 4096;
	switch (c) {
	case 0: return rng_normal();
	case 1: /* specials in blocks 0, 7, 15, 16, 17 and 31 */
		if (i == 3 || i == 7 * 4096 + 2000 || i == 16 * 4096 - 1 || i == 31 * 4096 + 5)
			return NAN;
		if (i == 16 * 4096 + 7)
			return INFINITY;
		if (i == 17 * 4096 + 4095)
			return -INFINITY;
		return rng_normal();
	case 2: return blk >= 16 && blk < 32 ? 1e-20 * rng_normal() : rng_normal(); /* a tiny group */
	case 3: return i == 20 * 4096 + 9 ? -3e30 : rng_normal(); /* a square past float range */
	case 4: return 40.0 * (double)blk + rng_normal(); /* means drifting block by block */
	case 5: return 1000.0 + (double)(i % 7); /* far from 0, little spread */
	case 6: return 1e-22 * rng_normal(); /* squares subnormal in float */
	case 7: return i < 2048 ? 0 : 1e4 + 64 * rng_normal(); /* a group far from its shift, 0 */
	/* either side of where the AVX2 pass sums around 0 rather than the mean (BF16_NEAR) */
	case 8: return 0.49 + rng_normal();
	case 9: return 0.51 + rng_normal();
	/* a first line centred on 0, the rest of the group far from it */
	case 10: return i < 32 ? rng_normal() : 5.0 + rng_normal();
	/* the same where float sums around 0 would lose the variance: the squares (~1e6, integers)
	 * past 2^24 in every lane, the spread 2 */
	case 11: return i < 32 ? 0.0 : i % 2 ? 1000.0 : 1004.0;
	default: return 0;
	}
}

static void test_bf16_groups(void)
{
	const int64_t n = 40 * 4096 + 77;
	unsigned char *p = malloc((size_t)n * 2);
	double *x = malloc((size_t)n * sizeof(double)), want[DLI_STAT_COUNT], scale;
	for (int c = 0; c < 12; c++) {
		for (int64_t i = 0; i < n; i++) {
			ref_store(p, DLI_DTYPE_BF16, i, group_value(c, i));
			x[i] = ref_decode(p, DLI_DTYPE_BF16, i);
		}
		ref_stats(x, n, want, &scale);
		for (size_t k = 0; k < sizeof(paths) / sizeof(paths[0]); k++) {
			if (paths[k] > dli_simd_detect())
				continue;
			struct dli_cpu_options o = {.simd = paths[k], .threads = 1};
			struct dli_stats_record r;
			char what[64];
			snprintf(what, sizeof(what), "bf16 groups case %d %s", c, dli_simd_name(paths[k]));
			CHECK_INT(dli_cpu_stats(p, DLI_DTYPE_BF16, n, &o, &r), 0);
			CHECK(r.count == (uint64_t)n);
			check_values(&r, want, scale, TOL, what);
		}
	}
	free(p);
	free(x);
}

/* Mean 1e4, std 1e-2: sum x^2 - n mean^2 in float loses every digit of the variance (it is
 * 1e-12 of sum x^2); the Chan merge of two-pass blocks keeps it to 1e-6. */
static void test_variance_large_mean(void)
{
	int64_t n = 1000003;
	void *base;
	double *x, want[DLI_STAT_COUNT], scale;
	float *p = make_data(DLI_DTYPE_F32, OFFSET, n, 0, &base, &x);
	ref_stats(x, n, want, &scale);

	float s = 0, sq = 0;
	for (int64_t i = 0; i < n; i++) {
		s += p[i];
		sq += p[i] * p[i];
	}
	double naive = ((double)sq - (double)s * (double)s / (double)n) / (double)(n - 1);
	CHECK(!(fabs(naive - want[DLI_STAT_VAR]) <= 0.5 * want[DLI_STAT_VAR]));

	for (size_t k = 0; k < 3 && paths[k] <= dli_simd_detect(); k++)
		for (int parts = 1; parts <= 7; parts++) {
			struct dli_cpu_options o = {.simd = paths[k]};
			struct dli_stats_record r, part;
			dli_stats_record_init(&r);
			for (int i = 0; i < parts; i++) {
				int64_t a = n * i / parts, b = n * (i + 1) / parts;
				CHECK_INT(dli_cpu_stats(p + a, DLI_DTYPE_F32, b - a, &o, &part), 0);
				dli_stats_merge(&r, &part);
			}
			double v = dli_stats_value(&r, DLI_STAT_VAR);
			check_count++;
			if (!(fabs(v - want[DLI_STAT_VAR]) <= 1e-6 * want[DLI_STAT_VAR])) {
				check_failures++;
				fprintf(stderr, "large-mean var (%s, %d parts): %.17g, expected %.17g\n",
					dli_simd_name(paths[k]), parts, v, want[DLI_STAT_VAR]);
			}
			CHECK(fabs(dli_stats_value(&r, DLI_STAT_MEAN) - want[DLI_STAT_MEAN]) <=
			      1e-9 * want[DLI_STAT_MEAN]);
		}
	free(base);
	free(x);
}

/* ---- Threads ---- */

static void test_threads(void)
{
	int64_t n = ((int64_t)4 << 20) + 12345;
	for (size_t d = 0; d < 2; d++) {
		enum dli_dtype dt = d ? DLI_DTYPE_BF16 : DLI_DTYPE_F32;
		void *base;
		double *x, want[DLI_STAT_COUNT], scale;
		void *p = make_data(dt, WIDE, n, 0, &base, &x);
		ref_stats(x, n, want, &scale);
		for (size_t k = 0; k < 3 && paths[k] <= dli_simd_detect(); k++) {
			struct dli_cpu_options o = {.simd = paths[k], .threads = 1};
			struct dli_stats_record one, r;
			CHECK_INT(dli_cpu_stats(p, dt, n, &o, &one), 0);
			check_values(&one, want, scale, TOL, "threads=1");
			static const int counts[] = {2, 3, 8};
			for (int t = 0; t < 3; t++) {
				o.threads = counts[t];
				CHECK_INT(dli_cpu_stats(p, dt, n, &o, &r), 0);
				/* Chunk records merged in chunk order: identical, not just close. */
				CHECK(!memcmp(&r, &one, sizeof(r)));
			}
			o.threads = 0;
			CHECK_INT(dli_cpu_stats(p, dt, n, &o, &r), 0);
			CHECK(!memcmp(&r, &one, sizeof(r)));
		}
		free(base);
		free(x);
	}
}

struct pf_state {
	atomic_int hits[1000];
	atomic_int bad_worker;
	int threads;
	atomic_int nested_ok;
};

static void pf_nested(void *arg, int64_t chunk, int worker)
{
	atomic_fetch_add((atomic_int *)arg, 1);
}

static void pf_fn(void *arg, int64_t chunk, int worker)
{
	struct pf_state *s = arg;
	atomic_fetch_add(&s->hits[chunk], 1);
	if (worker < 0 || worker >= s->threads)
		atomic_fetch_add(&s->bad_worker, 1);
	if (chunk % 100 == 0) {
		/* A call from inside a call runs on the caller's thread instead of deadlocking. */
		atomic_int count = 0;
		dli_parallel_for(10, 4, pf_nested, &count);
		if (atomic_load(&count) == 10)
			atomic_fetch_add(&s->nested_ok, 1);
	}
}

static void test_parallel_for(void)
{
	static struct pf_state s;
	for (int t = 1; t <= 9; t++) {
		memset(&s, 0, sizeof(s));
		s.threads = t;
		CHECK_INT(dli_parallel_for(1000, t, pf_fn, &s), 0);
		int once = 1;
		for (int i = 0; i < 1000; i++)
			once &= atomic_load(&s.hits[i]) == 1;
		CHECK(once);
		CHECK_INT(atomic_load(&s.bad_worker), 0);
		CHECK_INT(atomic_load(&s.nested_ok), 10);
	}
	CHECK_INT(dli_parallel_for(0, 4, pf_fn, &s), 0);
	CHECK(dli_cpu_threads(&(struct dli_cpu_options){.threads = 5}) == 5);
	CHECK(dli_cpu_threads(&(struct dli_cpu_options){.threads = 100000}) == DLI_MAX_THREADS);
	CHECK(dli_cpu_threads(NULL) >= 1);
}

/* A forked child (a data-loader worker) has no pool threads: a large pass there must still finish. */
static void test_fork(void)
{
	int64_t n = ((int64_t)4 << 20) + 7;
	float *p = calloc((size_t)n, sizeof(float));
	p[n - 1] = 2.0f;
	struct dli_cpu_options o = {.threads = 3};
	struct dli_stats_record r;
	CHECK_INT(dli_cpu_stats(p, DLI_DTYPE_F32, n, &o, &r), 0); /* the pool exists now */
	fflush(NULL);
	pid_t pid = fork();
	if (pid == 0) {
		alarm(60);
		int rc = dli_cpu_stats(p, DLI_DTYPE_F32, n, &o, &r);
		_exit(rc == 0 && r.max == 2.0 && r.zero_count == (uint64_t)n - 1 ? 0 : 1);
	}
	int status = 0;
	CHECK(pid > 0 && waitpid(pid, &status, 0) == pid);
	CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	free(p);
}

/* ---- Floating-point environment and errors ---- */

static void test_subnormals_under_daz(void)
{
#ifdef DLI_HAVE_X86_SIMD
	int64_t n = 4096 + 3;
	float *p = malloc((size_t)n * sizeof(float));
	for (int64_t i = 0; i < n; i++)
		p[i] = (float)((double)(1 + i % 5) * 0x1p-149);
	unsigned csr = _mm_getcsr();
	_mm_setcsr(csr | 0x8040u); /* the host set FTZ and DAZ */
	for (size_t k = 0; k < 3 && paths[k] <= dli_simd_detect(); k++) {
		struct dli_cpu_options o = {.simd = paths[k]};
		struct dli_stats_record r;
		CHECK_INT(dli_cpu_stats(p, DLI_DTYPE_F32, n, &o, &r), 0);
		CHECK_INT(r.zero_count, 0);
		CHECK(r.min_nonzero_abs == 0x1p-149 && r.max == 5 * 0x1p-149);
	}
	CHECK((_mm_getcsr() & 0x8040u) == 0x8040u); /* and keeps it */
	_mm_setcsr(csr);
	free(p);
#endif
}

static void test_errors(void)
{
	struct dli_stats_record r;
	float x[4] = {1, 2, 3, 4};
	r.count = 99;
	CHECK_INT(dli_cpu_stats(x, DLI_DTYPE_I32, 4, NULL, &r), -EINVAL);
	CHECK(r.count == 0); /* initialized even on error */
	CHECK_INT(dli_cpu_stats(x, DLI_DTYPE_F64, 4, NULL, &r), -EINVAL);
	CHECK_INT(dli_cpu_stats(x, DLI_DTYPE_COUNT, 4, NULL, &r), -EINVAL);
	CHECK_INT(dli_cpu_stats(x, DLI_DTYPE_F32, -1, NULL, &r), -EINVAL);
	CHECK_INT(dli_cpu_stats(NULL, DLI_DTYPE_F32, 4, NULL, &r), -EINVAL);
	CHECK_INT(dli_cpu_stats(x, DLI_DTYPE_F32, 4, NULL, NULL), -EINVAL);
	CHECK_INT(dli_cpu_stats(NULL, DLI_DTYPE_F32, 0, NULL, &r), 0);
	CHECK(r.count == 0);
	struct dli_cpu_options o = {.simd = (enum dli_simd)42};
	CHECK_INT(dli_cpu_stats(x, DLI_DTYPE_F32, 4, &o, &r), -ENOTSUP);
	o.simd = DLI_SIMD_AVX512;
	CHECK_INT(dli_cpu_stats(x, DLI_DTYPE_F32, 4, &o, &r),
		  dli_simd_detect() == DLI_SIMD_AVX512 ? 0 : -ENOTSUP);
	CHECK_STR(dli_simd_name(DLI_SIMD_SCALAR), "scalar");
	CHECK_STR(dli_simd_name(DLI_SIMD_AVX2), "avx2");
	CHECK_STR(dli_simd_name(DLI_SIMD_AVX512), "avx512");
	CHECK(dli_simd_detect() >= DLI_SIMD_SCALAR);
	printf("SIMD on this CPU: %s\n", dli_simd_name(dli_simd_detect()));
}

int main(void)
{
	test_record_basics();
	test_record_fp8_terms();
	test_stat_names();
	test_errors();
	test_pass_against_reference();
	test_fp8_all_codes();
	test_one_sign_blocks();
	test_merge();
	test_f32_shards_one_call();
	test_block_kinds_mixed();
	test_bf16_groups();
	test_nonfinite_blocks();
	test_variance_large_mean();
	test_parallel_for();
	test_threads();
	test_fork();
	test_subnormals_under_daz();
	return check_exit();
}
