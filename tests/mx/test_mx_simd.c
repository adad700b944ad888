/* MXFP8's compare pass (row-wise and column-wise blocks of 32) on its AVX2 path against the scalar
 * reference of the same library (kernels/cpu/mx.c), which test_mx and the interop test hold to
 * naive and ml_dtypes references: f32, bf16 and f16 input, E4M3 and E5M2, rows of whole batches
 * of eight blocks, a few blocks more and a partial block, and the data that takes each of the
 * AVX2 path's ways: narrow values whose batches need neither underflow counts nor the
 * subnormal grid (the bench's data: sums of two uniforms on a grid of 2^-15, with zeros and
 * halfway cases), batches with a value on the format's subnormal grid but none that underflows,
 * batches with underflows, zeros, NaN and infinities in some blocks, and magnitudes beyond the
 * float lanes' range, and batches of every mantissa that bf16's steps round on the raw bits.
 * Counts and the scale range must be equal, the sums within 1e-5 (the AVX2 path sums in float
 * lanes, widened to double every few batches). Exits 77 when the CPU has no AVX2. */
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "kernels-private.h"

#include "test-rng.h"
#include "simd-test.h"

enum kind {
	GRID,
	SUBNORMAL_GRID,
	UNDERFLOW,
	ZEROS,
	NONFINITE,
	WIDE,
	WIDE_NONFINITE,
	HUGE_BLOCK,
	MANTISSAS,
	KINDS
};

static float value(int kind, int64_t i, int64_t cols)
{
	uint64_t u = next_u64();
	/* the bench's values: (a + b - 65535) / 32768, a and b 16-bit uniforms */
	float v = ((float)(u & 0xffff) + (float)(u >> 16 & 0xffff) - 65535.0f) / 32768.0f;
	switch (kind) {
	case SUBNORMAL_GRID: /* a block's first value (row-wise and column-wise) 1.5 or 1.75
			      * (exact, so that the rest's errors show in the sums), the rest in
			      * [2^-15, 2^-14): times 2^7 or 2^8 (the first's code), on E4M3's
			      * subnormal grid, above half its smallest subnormal */
		return copysignf(i % 32 == 0 || i / cols % 32 == 0 ? (u >> 30 & 1 ? 1.5f : 1.75f)
					     : ldexpf(1.0f + (float)(u >> 20 & 0xff) / 256.0f, -15),
				 v);
	case UNDERFLOW: /* one in 2000 2^-24 of the rest: below E4M3's and E5M2's subnormals */
		return (u >> 40) % 2000 == 0 ? ldexpf(v, -24) : v;
	case ZEROS:
		return (u >> 40) % 5 ? v : 0.0f;
	case NONFINITE:
		if ((u >> 40) % 1000 == 0) {
			uint64_t w = (u >> 50) % 3;
			return w == 0 ? NAN : w == 1 ? INFINITY : -INFINITY;
		}
		return v;
	case WIDE: /* each block its own magnitude, 2^-30 .. 2^30 */
		return ldexpf(v, (int)(i / 32 % 61) - 30);
	case WIDE_NONFINITE: /* those, one in 200 NaN, +inf or -inf: the one-block path's code
			      * and scale from the finite values' amax, over the codes' range */
		if ((u >> 40) % 200 == 0) {
			uint64_t w = (u >> 50) % 3;
			return w == 0 ? NAN : w == 1 ? INFINITY : -INFINITY;
		}
		return ldexpf(v, (int)(i / 32 % 61) - 30);
	case HUGE_BLOCK: /* one block's amax beyond 2^60 */
		return i == 100 ? 0x1p70f : v;
	case MANTISSAS: { /* a block's first value (row-wise and column-wise) 1.75 (code 2^8 in
			   * E4M3, 2^15 in E5M2: fp8_max, the top of the range), the rest
			   * (1 + m / 128) 2^-j, j = 0 .. 4, every 7-bit m (j = 0: m up to 96, at most
			   * 1.75): every rounding of a bf16 mantissa to the format's (ties to even
			   * either way, carries into the exponent), all on the format's normals */
		int j = (int)((i / 32 + i / cols) % 5), m = (int)(i % 128);
		if (i % 32 == 0 || i / cols % 32 == 0)
			return copysignf(1.75f, v);
		if (j == 0)
			m = 64 + m % 33;
		return copysignf(ldexpf(1.0f + (float)m / 128.0f, -j), v);
	}
	default:
		return v;
	}
}


/* The AVX2 and the scalar compare of one input, both formats, both directions. */
static void check(const void *in, enum dli_dtype dt, int64_t rows, int64_t cols, int kind)
{
	const struct dli_cpu_options avx2 = {.simd = DLI_SIMD_AVX2, .threads = 1};
	const struct dli_cpu_options scalar = {.simd = DLI_SIMD_SCALAR, .threads = 1};

	for (int f = 0; f < 4; f++) {
		enum dli_dtype fmt = f & 1 ? DLI_DTYPE_F8E5M2 : DLI_DTYPE_F8E4M3;
		bool col = f >= 2;
		struct dli_stats_record a, s;
		int ra = dli_cpu_mx_compare(in, dt, rows, cols, fmt, col, &avx2, &a);
		int rs = dli_cpu_mx_compare(in, dt, rows, cols, fmt, col, &scalar, &s);
		char what[128];

		snprintf(what, sizeof(what), "%lld x %lld, kind %d, dtype %d, format %d%s",
			 (long long)rows, (long long)cols, kind, (int)dt, (int)fmt,
			 col ? " columnwise" : "");
		records_agree(ra, rs, &a, &s, what);
		/* as the statistics feature calls it: given that pass's sum of x^2 (over the finite
		 * elements), which the fast steps may then leave out */
		double sum_sq = stats_sum_sq(in, dt, rows * cols);
		ra = dli_cpu_mx_compare_sum_sq(in, dt, rows, cols, fmt, col, sum_sq, &avx2, &a);
		snprintf(what, sizeof(what),
			 "%lld x %lld, kind %d, dtype %d, format %d%s, given sum_sq", (long long)rows,
			 (long long)cols, kind, (int)dt, (int)fmt, col ? " columnwise" : "");
		records_agree(ra, rs, &a, &s, what);
		/* given a sum of x^2 that the pass's own terms contradict (dot would end far
		 * below it): the pass runs again summing everything, the same terms */
		if (isfinite(sum_sq)) {
			ra = dli_cpu_mx_compare_sum_sq(in, dt, rows, cols, fmt, col,
						       -64 * (sum_sq + 1), &avx2, &a);
			snprintf(what, sizeof(what), "%lld x %lld, kind %d, dtype %d, format %d%s, "
				 "given a wrong sum_sq", (long long)rows, (long long)cols, kind,
				 (int)dt, (int)fmt, col ? " columnwise" : "");
			records_agree(ra, rs, &a, &s, what);
		}
		/* the kinds meant to take a way take it (or the test would not cover it):
		 * underflows where wanted, none where not (an infinity's block, code 0xfe, and the
		 * huge block's underflow all their other values) */
		if (!col && dt == DLI_DTYPE_F32 && fmt == DLI_DTYPE_F8E4M3 && kind != WIDE &&
		    kind != NONFINITE && kind != WIDE_NONFINITE && kind != HUGE_BLOCK)
			CHECK((kind == UNDERFLOW) == (s.underflows > 0));
	}
}

int main(void)
{
	/* 4096 columns: 16 batches a row; 4096 + 3 * 32 + 5: batches, three blocks more and a
	 * partial one; 256 x 64: two blocks a row, no batch (the one-block path); 256, 512, 768
	 * and 8192 + 768 columns: rows of 1, 2 and 3 batches, and of a segment of 32 and 3 more
	 * (the ends of bf16's plans, made in stages one and two batches ahead) */
	static const int64_t shapes[][2] = {{8, 4096}, {5, 4096 + 3 * 32 + 5}, {256, 64},
					    {64, 1024}, {9, 256}, {9, 512}, {9, 768},
					    {3, 8192 + 768}};
	const struct dli_cpu_options avx2 = {.simd = DLI_SIMD_AVX2, .threads = 1};
	struct dli_stats_record probe;
	float one = 1.0f;

	if (dli_cpu_mx_compare(&one, DLI_DTYPE_F32, 1, 1, DLI_DTYPE_F8E4M3, false, &avx2,
			       &probe) == -ENOTSUP) {
		printf("no AVX2 on this CPU: skipped\n");
		return 77;
	}
	for_each_input(shapes, sizeof(shapes) / sizeof(shapes[0]), KINDS, value, check);
	return check_exit();
}
