/* The statistics pass's sum of x^2 over the finite elements (dli_cpu_stats_finite_sq), which the
 * core gives the FP8 compares in place of sum_sq when a tensor holds NaN or infinities: on bf16
 * data with NaN, +inf and -inf in the first block, the last one and its scalar tail, a whole
 * block, every element, every 1000th, a block of only infinities and zeros, and blocks whose
 * finite magnitudes leave the float lanes' range, the sum against a naive double sum (within the
 * float lanes' 1e-5, as tests/kernels/test_stats.c holds the clean pass's sums) or NaN where the
 * pass says it does not know it; the record the same bits as dli_cpu_stats gives; and the
 * per-tensor FP8, MXFP8 and FP8 block compares given it against the same compares given none and
 * against their scalar reference (counts equal, sums within the 1e-5 of tests/mx/records-agree.h).
 * Then: the sum is the same bits on 1 and 3 threads, sum_sq itself where that is finite, and NaN
 * on the scalar path, for f16, f32 and FP8 data with NaN, and on bad input. Exits 77 when the CPU
 * has no AVX2. */
#include <errno.h>
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "kernels-private.h"
#include "mx/records-agree.h"
#include "test-rng.h"

/* 70 x 4133: two chunks of the pass, its second ending in a tail of 30 elements (scalar); the
 * compares' rows end in a partial block */
#define ROWS 70
#define COLS 4133
#define N ((int64_t)ROWS * COLS)
#define BLOCK 4096 /* the AVX2 pass's bf16 block */

static const struct dli_cpu_options avx2 = {.simd = DLI_SIMD_AVX2, .threads = 1};
static const struct dli_cpu_options scalar = {.simd = DLI_SIMD_SCALAR, .threads = 1};

enum { BF16_NAN = 0x7fc0, BF16_NEG_NAN = 0xffc1, BF16_INF = 0x7f80, BF16_NEG_INF = 0xff80 };

static uint16_t bf16_of(float f)
{
	uint32_t u;
	memcpy(&u, &f, sizeof(u));
	return (uint16_t)(u >> 16);
}

static float float_of(uint16_t h)
{
	uint32_t u = (uint32_t)h << 16;
	float f;
	memcpy(&f, &u, sizeof(f));
	return f;
}

/* The bench's values: (a + b - 65535) / 32768, a and b 16-bit uniforms, cut to bf16. */
static uint16_t value(void)
{
	uint64_t u = next_u64();
	return bf16_of(((float)(u & 0xffff) + (float)(u >> 16 & 0xffff) - 65535.0f) / 32768.0f);
}

enum kind {
	FIRST,          /* NaN, +inf, -inf in the first block */
	LAST,           /* -inf in the last whole line, NaN in the tail */
	TAIL,           /* only an infinity, in the tail */
	NAN_BLOCK,      /* a whole block NaN */
	ALL_NAN,        /* every element (negative NaN with a payload) */
	EVERY_1000,     /* the bench's _nan rows: NaN, +inf, -inf in turn */
	INF_ZEROS,      /* a block of zeros and infinities: its finite sum is 0 */
	SMALL_KNOWN,    /* a block of magnitudes below 2^-50 with a NaN: its squares still normal */
	HUGE_UNKNOWN,   /* a NaN and 2^60 in one block: past float-square range */
	TINY_UNKNOWN,   /* a NaN and magnitudes near 2^-70 in one block: squares lost to underflow */
	KINDS
};

static const char *const kind_names[KINDS] = {
	"first block", "last block and tail", "tail only", "a NaN block", "all NaN",
	"every 1000th", "zeros and infinities", "small magnitudes", "huge magnitude",
	"tiny magnitudes"};

static void fill(enum kind kind, uint16_t *x, int64_t n)
{
	static const uint16_t bad[3] = {BF16_NAN, BF16_INF, BF16_NEG_INF};
	for (int64_t i = 0; i < n; i++)
		x[i] = value();
	switch (kind) {
	case FIRST:
		x[0] = BF16_NAN;
		x[3] = BF16_INF;
		x[40] = BF16_NEG_INF;
		break;
	case LAST:
		x[n - 40] = BF16_NEG_INF;
		x[n - 1] = BF16_NAN;
		break;
	case TAIL:
		x[n - 3] = BF16_INF;
		break;
	case NAN_BLOCK:
		for (int64_t i = 3 * BLOCK; i < 4 * BLOCK; i++)
			x[i] = BF16_NAN;
		break;
	case ALL_NAN:
		for (int64_t i = 0; i < n; i++)
			x[i] = BF16_NEG_NAN;
		break;
	case EVERY_1000:
		for (int64_t i = 0, k = 0; i < n; i += 1000, k++)
			x[i] = bad[k % 3];
		break;
	case INF_ZEROS:
		for (int64_t i = 2 * BLOCK; i < 3 * BLOCK; i++)
			x[i] = i % 7 ? (uint16_t)(i % 2 ? 0x8000 : 0) : i % 3 ? BF16_INF : BF16_NEG_INF;
		break;
	case SMALL_KNOWN:
	case TINY_UNKNOWN:
		for (int64_t i = BLOCK; i < 2 * BLOCK; i++)
			x[i] = bf16_of(ldexpf(float_of(x[i]), kind == SMALL_KNOWN ? -52 : -70));
		x[BLOCK + 5] = BF16_NAN;
		break;
	case HUGE_UNKNOWN:
		x[5 * BLOCK + 10] = BF16_NAN;
		x[5 * BLOCK + 100] = bf16_of(0x1p60f);
		break;
	default:
		break;
	}
}

/* The sum of x^2 over the finite elements, naively in double (each square exact). */
static double naive_finite_sq(const uint16_t *x, int64_t n)
{
	double s = 0;
	for (int64_t i = 0; i < n; i++) {
		double v = float_of(x[i]);
		if (isfinite(v))
			s += v * v;
	}
	return s;
}

enum compare { PER_TENSOR, MX_E4M3, MX_E5M2, FP8B_2D, FP8B_1D, COMPARES };

static const char *const compare_names[COMPARES] = {"per-tensor FP8", "MXFP8 E4M3",
						    "MXFP8 E5M2", "FP8 block 2D", "FP8 block 1D"};

static int run_compare(enum compare c, const uint16_t *x, float scale, double sum_sq,
		       const struct dli_cpu_options *o, struct dli_stats_record *out)
{
	switch (c) {
	case PER_TENSOR:
		return dli_cpu_fp8_compare_sum_sq(x, DLI_DTYPE_BF16, N, DLI_DTYPE_F8E4M3, scale,
						  sum_sq, o, out);
	case MX_E4M3:
	case MX_E5M2:
		return dli_cpu_mx_compare_sum_sq(x, DLI_DTYPE_BF16, ROWS, COLS,
						 c == MX_E4M3 ? DLI_DTYPE_F8E4M3 : DLI_DTYPE_F8E5M2,
						 false, sum_sq, o, out);
	default:
		return dli_cpu_fp8b_compare_sum_sq(x, DLI_DTYPE_BF16, ROWS, COLS, DLI_DTYPE_F8E4M3,
						   c == FP8B_2D ? 2 : 1, false, true, sum_sq, o,
						   out);
	}
}

/* One kind of data: the finite sum, the record, and every compare given it. */
static void check_kind(enum kind kind, uint16_t *x)
{
	struct dli_stats_record with, plain;
	double finite = -1;
	char what[160];

	fill(kind, x, N);
	CHECK_INT(dli_cpu_stats_finite_sq(x, DLI_DTYPE_BF16, N, &avx2, &with, &finite), 0);
	CHECK_INT(dli_cpu_stats(x, DLI_DTYPE_BF16, N, &avx2, &plain), 0);
	CHECK(!memcmp(&with, &plain, offsetof(struct dli_stats_record, fp8_count)));
	bool known = kind != HUGE_UNKNOWN && kind != TINY_UNKNOWN;
	double want = naive_finite_sq(x, N);
	if (known ? !close_to(finite, want) : !isnan(finite)) {
		CHECK(false);
		fprintf(stderr, "%s: finite sum %.17g, expected %.17g\n", kind_names[kind], finite,
			known ? want : NAN);
	}
	/* current scaling from the pass's amax, as the core does */
	float scale = dli_fp8_scale((float)with.amax, DLI_DTYPE_F8E4M3, 0);
	for (int c = 0; c < COMPARES; c++) {
		struct dli_stats_record given, none, ref;
		int rg = run_compare(c, x, scale, finite, &avx2, &given);
		int rn = run_compare(c, x, scale, NAN, &avx2, &none);
		int rr = run_compare(c, x, scale, NAN, &scalar, &ref);
		snprintf(what, sizeof(what), "%s, %s, given the finite sum against given none",
			 kind_names[kind], compare_names[c]);
		records_agree(rg, rn, &given, &none, what);
		snprintf(what, sizeof(what), "%s, %s, given the finite sum against the scalar pass",
			 kind_names[kind], compare_names[c]);
		records_agree(rg, rr, &given, &ref, what);
		/* the bf16 fast steps took it: x_sq is the sum given (FP8 block scaling's 1D
		 * blocks sum their own) */
		if (known && c != FP8B_1D && given.x_sq != finite) {
			CHECK(false);
			fprintf(stderr, "%s, %s: x_sq %.17g, not the sum given %.17g\n",
				kind_names[kind], compare_names[c], given.x_sq, finite);
		}
	}
}

/* The chunks' sums added in chunk order: the same bits on any thread count; and sum_sq itself
 * (the same double) on clean data. n above the pass's 4 Mi elements that stay on one thread. */
static void check_threads(void)
{
	const int64_t n = ((int64_t)5 << 20) + 37;
	const struct dli_cpu_options three = {.simd = DLI_SIMD_AVX2, .threads = 3};
	uint16_t *x = malloc((size_t)n * sizeof(*x));
	struct dli_stats_record r1, r3;
	double f1 = -1, f3 = -2;
	if (!x) {
		CHECK(false);
		return;
	}
	fill(EVERY_1000, x, n);
	CHECK_INT(dli_cpu_stats_finite_sq(x, DLI_DTYPE_BF16, n, &avx2, &r1, &f1), 0);
	CHECK_INT(dli_cpu_stats_finite_sq(x, DLI_DTYPE_BF16, n, &three, &r3, &f3), 0);
	CHECK(f1 == f3);
	CHECK(close_to(f1, naive_finite_sq(x, n)));
	for (int64_t i = 0; i < n; i += 1000)
		x[i] = value();
	CHECK_INT(dli_cpu_stats_finite_sq(x, DLI_DTYPE_BF16, n, &three, &r3, &f3), 0);
	CHECK(isfinite(r3.sum_sq) && f3 == r3.sum_sq);
	free(x);
}

/* Where the pass does not give the sum: NaN. Where the data are clean, every path gives sum_sq. */
static void check_unknown(uint16_t *x)
{
	struct dli_stats_record r;
	double f;
	float f32[64];
	uint16_t f16[64];
	uint8_t e5m2[64];

	fill(EVERY_1000, x, N);
	f = 0;
	CHECK_INT(dli_cpu_stats_finite_sq(x, DLI_DTYPE_BF16, N, &scalar, &r, &f), 0);
	CHECK(isnan(f));
	fill(FIRST, x, N);
	for (int i = 0; i < 64; i++) {
		f32[i] = float_of(x[i]);
		f16[i] = (uint16_t)(0x3c00 + i); /* 1 + i 2^-10 */
		e5m2[i] = (uint8_t)(0x3c + i % 3);
	}
	f16[7] = 0x7e00;  /* NaN */
	e5m2[9] = 0x7f;   /* NaN */
	f = 0;
	CHECK_INT(dli_cpu_stats_finite_sq(f32, DLI_DTYPE_F32, 64, &avx2, &r, &f), 0);
	CHECK(isnan(f));
	f = 0;
	CHECK_INT(dli_cpu_stats_finite_sq(f16, DLI_DTYPE_F16, 64, &avx2, &r, &f), 0);
	CHECK(isnan(f));
	f = 0;
	CHECK_INT(dli_cpu_stats_finite_sq(e5m2, DLI_DTYPE_F8E5M2, 64, &avx2, &r, &f), 0);
	CHECK(isnan(f));
	/* clean: sum_sq, whatever the path */
	f16[7] = 0x3c00;
	f = 0;
	CHECK_INT(dli_cpu_stats_finite_sq(f16, DLI_DTYPE_F16, 64, &scalar, &r, &f), 0);
	CHECK(f == r.sum_sq && f > 0);
	f = 0;
	CHECK_INT(dli_cpu_stats_finite_sq(f16, DLI_DTYPE_F16, 64, &avx2, &r, &f), 0);
	CHECK(f == r.sum_sq && f > 0);
	/* empty: 0; bad input: an error and NaN */
	f = -1;
	CHECK_INT(dli_cpu_stats_finite_sq(NULL, DLI_DTYPE_BF16, 0, &avx2, &r, &f), 0);
	CHECK(f == 0);
	f = 0;
	CHECK_INT(dli_cpu_stats_finite_sq(NULL, DLI_DTYPE_BF16, 5, &avx2, &r, &f), -EINVAL);
	CHECK(isnan(f));
	CHECK_INT(dli_cpu_stats_finite_sq(x, DLI_DTYPE_BF16, 5, &avx2, &r, NULL), -EINVAL);
	f = 0;
	CHECK_INT(dli_cpu_stats_finite_sq(x, DLI_DTYPE_BF16, 5, &avx2, NULL, &f), -EINVAL);
	CHECK(isnan(f));
}

int main(void)
{
	struct dli_stats_record probe;
	uint16_t one = 0x3f80;
	if (dli_cpu_stats(&one, DLI_DTYPE_BF16, 1, &avx2, &probe) == -ENOTSUP) {
		printf("no AVX2 on this CPU: skipped\n");
		return 77;
	}
	uint16_t *x = malloc((size_t)N * sizeof(*x));
	if (!x) {
		CHECK(false);
		return check_exit();
	}
	for (int k = 0; k < KINDS; k++)
		check_kind(k, x);
	check_unknown(x);
	free(x);
	check_threads();
	return check_exit();
}
