/* FP8 block scaling's compare pass (128 x 128 tiles, power-of-two scales) on its AVX2 path against
 * the scalar reference of the same library (kernels/cpu/fp8-block.c), which test_mx holds to a
 * naive reference: f32, bf16 and f16 input, E4M3 and E5M2, shapes with partial tiles and strips,
 * and the tiles the AVX2 path treats apart: NaN and infinities (an infinity makes the tile's scale
 * 1, so values above fp8_max saturate), magnitudes spread wide enough to underflow, with and
 * without zeros, zeros, magnitudes beyond the float lanes' range (the scalar tile), tiles whose
 * small values round on the format's subnormal grid without underflowing, tiles whose rows
 * hold a value at the underflow limit or not (the rows that count underflows), and tiles of
 * every mantissa that bf16's steps round on the raw bits, or with rows that hold a value on the
 * subnormal grid among rows that do not (the rows that can take those steps), NaN and infinities
 * in chosen rows, the largest finite magnitude among them, and tiles of them alone. Counts and the
 * scale range must be equal, the sums within 1e-5 (the AVX2 path sums in float lanes, widened to
 * double every few rows). Exits 77 when the CPU has no AVX2. */
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "kernels-private.h"

#define TEST_RNG_SEED 0x2545f4914f6cdd1dull
#include "test-rng.h"
#include "simd-test.h"

/* A value in [-2, 2) */
static float uniform(void)
{
	return (float)(((double)(next_u64() >> 11) * 0x1p-53 - 0.5) * 4);
}

enum kind {
	PLAIN,
	WIDE,
	ZEROS,
	ZEROS_WIDE,
	BANDS,
	NONFINITE,
	NONFINITE_WIDE,
	NAN_ONLY,
	HUGE_TILE,
	SUBNORMAL_GRID,
	ROW_UNDER,
	MANTISSAS,
	ROW_SUBNORMAL,
	NONFINITE_ROWS,
	NONFINITE_DENSE,
	KINDS
};

static float value(int kind, int64_t i, int64_t cols)
{
	float v = uniform();
	switch (kind) {
	case WIDE: /* 2^-20 .. 2^20 around it: underflows in E4M3 */
		return ldexpf(v, (int)(next_u64() % 41) - 20);
	case ZEROS:
		return next_u64() % 3 ? v : 0.0f;
	case ZEROS_WIDE: /* zeros among values that underflow: both counted apart */
		return next_u64() % 3 ? ldexpf(v, (int)(next_u64() % 41) - 20) : 0.0f;
	case BANDS: /* each column band of tiles its own magnitude, 2^-60 .. 2^60 and past */
		return ldexpf(v, (int)(i % cols / 128) * 30 - 70);
	case NONFINITE:
	case NONFINITE_WIDE:
		if (kind == NONFINITE_WIDE)
			v = ldexpf(v, (int)(next_u64() % 41) - 20);
		if (next_u64() % 500 == 0) {
			uint64_t u = next_u64() % 3;
			return u == 0 ? NAN : u == 1 ? INFINITY : -INFINITY;
		}
		return v;
	case NAN_ONLY:
		return next_u64() % 700 == 0 ? NAN : v;
	case HUGE_TILE: /* one tile's amax beyond 2^60: the scalar tile */
		return i == 5 ? 0x1p70f : v;
	case SUBNORMAL_GRID: /* 1.75 (exact, so that the rest's errors show in the sums) and the
			      * rest in [2^-15, 2^-14): times the scale 2^8, on E4M3's subnormal
			      * grid, above half its smallest subnormal */
		return copysignf(i % 97 == 0 ? 1.75f : ldexpf(1.0f + fabsf(v) / 2, -15), v);
	case ROW_UNDER: { /* 1.75 (scale 2^8 in E4M3, 2^15 in E5M2: half the smallest subnormal
			   * times si is 2^-18 or 2^-32), the rest in [-1.5, 1.5), and in some rows
			   * one value at either format's limit (a tie, which underflows), just
			   * above it (which does not), or below it: the rows that count
			   * underflows and the rows that need not in one tile */
		int64_t r = i / cols, c = i % cols;
		static const float near_limit[] = {0x1p-18f, 0x1.02p-18f, 0x1p-19f,
						   0x1p-32f, 0x1.02p-32f, 0x1p-33f};
		if (i % 97 == 0)
			return 1.75f;
		if (r % 9 < 6 && c == (r * 37 + 5) % cols)
			return copysignf(near_limit[r % 9], v);
		return v * 0.75f;
	}
	case MANTISSAS: { /* 1.75 (scale 2^8 in E4M3, 2^15 in E5M2: fp8_max, the top of the
			   * range), the rest (1 + m / 128) 2^-j, j = 0 .. 4, every 7-bit m (j = 0:
			   * m up to 96, at most 1.75), so every rounding of a bf16 mantissa to the
			   * format's: ties to even either way, carries into the exponent */
		int64_t r = i / cols, c = i % cols;
		int j = (int)((r + c / 7) % 5), m = (int)(i % 128);
		if (i % 97 == 0)
			return 1.75f;
		if (j == 0)
			m = 64 + m % 33;
		return copysignf(ldexpf(1.0f + (float)m / 128.0f, -j), v);
	}
	case ROW_SUBNORMAL: { /* 1.75 (as above) and values both formats hold exactly,
			       * (1 + m / 4) 2^-j, but in some rows one (1 + m / 128) 2^-15, on
			       * E4M3's subnormal grid (times the scale 2^8: 2^-7), whose
			       * rounding errors are then the sums': the rows whose bf16 steps
			       * cannot round on the raw bits among rows that can, in one tile */
		int64_t r = i / cols, c = i % cols;
		int j = (int)((r + c / 7) % 5), m = (int)(i % 128);
		if (i % 97 == 0)
			return 1.75f;
		if (r % 7 == 3 && c == (r * 5) % cols)
			return copysignf(ldexpf(1.0f + (float)m / 128.0f, -15), v);
		return copysignf(ldexpf(1.0f + (float)(m % 3) / 4.0f, -j), v);
	}
	case NONFINITE_ROWS: { /* NaN in rows 0, 15, 16, 31, 33, 64, 100 and 127 of each strip
				* (the first and last rows of the 16 whose bits bf16's first pass
				* finds a vector at a time, and of both words of the row sets), an
				* infinity too in every other column band of tiles, and in row 16
				* the largest finite magnitude, 5.5, which only the second look
				* at those rows finds (in tiles without an infinity, it sets the
				* scale) */
		static const int64_t marked[] = {0, 15, 16, 31, 33, 64, 100, 127};
		int64_t r = i / cols % 128, c = i % cols % 128, band = i % cols / 128;
		for (size_t k = 0; k < sizeof(marked) / sizeof(marked[0]); k++) {
			if (r != marked[k])
				continue;
			if (c == (r * 3) % 128)
				return NAN;
			if (band % 2 && c == (r * 3 + 1) % 128)
				return r % 2 ? INFINITY : -INFINITY;
			if (r == 16 && c == 100)
				return -5.5f;
		}
		return v;
	}
	case NONFINITE_DENSE: { /* the first column band of tiles NaN and infinities only,
				 * the second too but for one element a row: every row of those
				 * tiles counted apart, 1024 or 1016 in each 16-bit lane of the
				 * count */
		int64_t r = i / cols, c = i % cols;
		if (c >= 256 || (c >= 128 && c - 128 == (r * 5) % 128))
			return v;
		return i % 3 == 0 ? NAN : i % 3 == 1 ? INFINITY : -INFINITY;
	}
	default:
		return v;
	}
}


/* The AVX2 and the scalar compare of one input in 128 x 128 tiles with power-of-two scales, both
 * formats. */
static void check(const void *in, enum dli_dtype dt, int64_t rows, int64_t cols, int kind)
{
	const struct dli_cpu_options avx2 = {.simd = DLI_SIMD_AVX2, .threads = 1};
	const struct dli_cpu_options scalar = {.simd = DLI_SIMD_SCALAR, .threads = 1};

	for (int f = 0; f < 2; f++) {
		enum dli_dtype fmt = f ? DLI_DTYPE_F8E5M2 : DLI_DTYPE_F8E4M3;
		struct dli_stats_record a, s;
		int ra = dli_cpu_fp8b_compare(in, dt, rows, cols, fmt, 2, false, true, &avx2, &a);
		int rs = dli_cpu_fp8b_compare(in, dt, rows, cols, fmt, 2, false, true, &scalar, &s);
		char what[128];

		snprintf(what, sizeof(what), "%lld x %lld, kind %d, dtype %d, format %d",
			 (long long)rows, (long long)cols, kind, (int)dt, (int)fmt);
		records_agree(ra, rs, &a, &s, what);
		/* given the statistics pass's sum of x^2, then one the terms contradict, as
		 * test_mx_simd.c */
		double sum_sq = stats_sum_sq(in, dt, rows * cols);
		ra = dli_cpu_fp8b_compare_sum_sq(in, dt, rows, cols, fmt, 2, false, true, sum_sq,
						 &avx2, &a);
		snprintf(what, sizeof(what),
			 "%lld x %lld, kind %d, dtype %d, format %d, given sum_sq", (long long)rows,
			 (long long)cols, kind, (int)dt, (int)fmt);
		records_agree(ra, rs, &a, &s, what);
		if (isfinite(sum_sq)) {
			ra = dli_cpu_fp8b_compare_sum_sq(in, dt, rows, cols, fmt, 2, false, true,
							 -64 * (sum_sq + 1), &avx2, &a);
			snprintf(what, sizeof(what), "%lld x %lld, kind %d, dtype %d, format %d, "
				 "given a wrong sum_sq", (long long)rows, (long long)cols, kind,
				 (int)dt, (int)fmt);
			records_agree(ra, rs, &a, &s, what);
		}
	}
}

int main(void)
{
	static const int64_t shapes[][2] = {{128, 128}, {256, 512}, {200, 300}, {129, 257},
					    {384, 128}, {1, 128}, {130, 4096}};
	const struct dli_cpu_options avx2 = {.simd = DLI_SIMD_AVX2, .threads = 1};
	struct dli_stats_record probe;
	float one = 1.0f;

	if (dli_cpu_fp8b_compare(&one, DLI_DTYPE_F32, 1, 1, DLI_DTYPE_F8E4M3, 2, false, true, &avx2,
				 &probe) == -ENOTSUP) {
		printf("no AVX2 on this CPU: skipped\n");
		return 77;
	}
	for_each_input(shapes, sizeof(shapes) / sizeof(shapes[0]), KINDS, value, check);
	return check_exit();
}
