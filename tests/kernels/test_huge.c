/* A tensor above 2^31 elements: a bf16 tensor of 2^31 + 3 elements (4 GiB) holding a repeating
 * pattern of exactly representable values, with its extremes placed past index 2^31, so that every
 * statistic, the FP8 ones included, has a closed form that 32-bit indices or counts would miss. Skips (77) under
 * AddressSanitizer, whose shadow of 4 GiB costs more than the test is worth, and when the machine
 * cannot give the memory. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "kernels-private.h"

#if defined(__SANITIZE_ADDRESS__)
#define DLI_UNDER_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define DLI_UNDER_ASAN 1
#endif
#endif

#ifndef DLI_UNDER_ASAN
static uint16_t bf16_bits(float f)
{
	uint32_t u;
	memcpy(&u, &f, 4);
	return (uint16_t)(u >> 16); /* exact for the values used here */
}
#endif

int main(void)
{
#ifdef DLI_UNDER_ASAN
	printf("skipped under AddressSanitizer\n");
	return 77;
#else
	const int64_t n = ((int64_t)1 << 31) + 3;
	uint16_t *p = malloc((size_t)n * sizeof(*p));
	if (!p) {
		printf("skipped: cannot allocate %lld bytes\n", (long long)n * 2);
		return 77;
	}
	/* Period 8, sum 3.75, sum of squares 16.5625, two zeros (one of them -0). */
	static const float pattern[8] = {1.0f, -2.0f, 0.5f, 0.0f, 3.0f, -0.25f, -0.0f, 1.5f};
	for (int i = 0; i < 8; i++)
		p[i] = bf16_bits(pattern[i]);
	/* Fill by doubling copies: fast, and touches every page. */
	for (int64_t have = 8; have < n; have *= 2)
		memcpy(p + have, p, (size_t)(have < n - have ? have : n - have) * sizeof(*p));
	const int64_t big = (int64_t)1 << 31;
	/* Index 2^31 is pattern[0] (1.0), 2^31+1 is -2.0, 2^31+2 is 0.5: make them the extremes. */
	p[big] = bf16_bits(4096.0f);
	p[big + 2] = bf16_bits(-1024.0f);

	/* Closed form, exact in double (all terms are small dyadic numbers). */
	double periods = (double)(big / 8);
	double sum = periods * 3.75 + 4096.0 - 2.0 - 1024.0;
	double sum_sq = periods * 16.5625 + 4096.0 * 4096.0 + 4.0 + 1024.0 * 1024.0;
	double zeros = periods * 2;
	double dn = (double)n;
	double mean = sum / dn, var = (sum_sq - sum * sum / dn) / (dn - 1);
	double sum_abs = periods * 8.25 + 4096.0 + 2.0 + 1024.0;

	struct dli_stats_record r;
	struct dli_cpu_options one = {.threads = 1};
	CHECK_INT(dli_cpu_stats(p, DLI_DTYPE_BF16, n, NULL, &r), 0);
	CHECK(r.count == (uint64_t)n);
	CHECK(r.nan_count == 0 && r.inf_count == 0);
	CHECK(r.zero_count == (uint64_t)zeros);
	CHECK(dli_stats_value(&r, DLI_STAT_MIN) == -1024.0);
	CHECK(dli_stats_value(&r, DLI_STAT_MAX) == 4096.0);
	CHECK(dli_stats_value(&r, DLI_STAT_CUR_AMAX) == 4096.0);
	CHECK(dli_stats_value(&r, DLI_STAT_DYNAMIC_RANGE) == 14.0); /* 2^12 over 2^-2 */
	CHECK(dli_stats_value(&r, DLI_STAT_ZERO_PCT) == 100.0 * zeros / dn);
	/* Sums of these values are exact in float lanes too: only the double merges round. */
	CHECK(fabs(dli_stats_value(&r, DLI_STAT_MEAN) - mean) <= 1e-12 * mean);
	CHECK(fabs(dli_stats_value(&r, DLI_STAT_VAR) - var) <= 1e-9 * var);
	CHECK(fabs(dli_stats_value(&r, DLI_STAT_L1_NORM) - sum_abs) <= 1e-12 * sum_abs);
	CHECK(fabs(dli_stats_value(&r, DLI_STAT_L2_NORM) - sqrt(sum_sq)) <= 1e-9 * sqrt(sum_sq));
	printf("n=%lld mean=%.17g (want %.17g) var=%.17g (want %.17g)\n", (long long)n,
	       dli_stats_value(&r, DLI_STAT_MEAN), mean, dli_stats_value(&r, DLI_STAT_VAR), var);

	/* The FP8 compare over the same tensor, scale 1. Every pattern value is exact in both
	 * formats; in E4M3 the two extremes overflow and saturate to +-448, in E5M2 they are exact.
	 * All terms are small dyadic numbers, so the float lanes and the double sums are exact. */
	{
		double x2 = sum_sq - 4096.0 * 4096.0 - 1024.0 * 1024.0; /* all but the extremes */
		struct dli_stats_record q;

		CHECK_INT(dli_cpu_fp8_compare(p, DLI_DTYPE_BF16, n, DLI_DTYPE_F8E4M3, 1.0f, NULL, &q),
			  0);
		CHECK(q.fp8_count == (uint64_t)n && q.underflows == 0 && q.overflows == 2);
		CHECK(q.x_sq == sum_sq);
		CHECK(q.dq_sq == x2 + 2 * 448.0 * 448.0);
		CHECK(q.dot == x2 + (4096.0 + 1024.0) * 448.0);
		CHECK(q.err_sq == (4096.0 - 448.0) * (4096.0 - 448.0) + (1024.0 - 448.0) * (1024.0 - 448.0));
		CHECK_INT(dli_cpu_fp8_compare(p, DLI_DTYPE_BF16, n, DLI_DTYPE_F8E5M2, 1.0f, &one, &q),
			  0);
		CHECK(q.fp8_count == (uint64_t)n && q.underflows == 0 && q.overflows == 0);
		CHECK(q.x_sq == sum_sq && q.dq_sq == sum_sq && q.dot == sum_sq && q.err_sq == 0);
		printf("fp8: e5m2 count=%llu x_sq=%.17g dot=%.17g\n", (unsigned long long)q.fp8_count,
		       q.x_sq, q.dot);
	}

	/* NaNs (in place of two -2.0, one past 2^31) are counted, and make min and max NaN. */
	p[12345] = 0x7fc0;
	p[big + 1] = 0xffc1;
	CHECK_INT(dli_cpu_stats(p, DLI_DTYPE_BF16, n, &one, &r), 0);
	CHECK(r.nan_count == 2 && r.count == (uint64_t)n);
	CHECK(isnan(dli_stats_value(&r, DLI_STAT_MIN)) && isnan(dli_stats_value(&r, DLI_STAT_MAX)));
	CHECK(r.min == -1024.0 && r.max == 4096.0);
	free(p);
	return check_exit();
#endif
}
