/* Whether two block-scaled compare records agree, the AVX2 one and the scalar one (or one given the
 * statistics pass's sum of x^2 and one given none): counts and the scale range exactly, the sums,
 * added in different orders, within a tolerance. tests/mx/simd-test.h and
 * tests/kernels/test_finite_sq.c. */
#ifndef DLI_TEST_RECORDS_AGREE_H
#define DLI_TEST_RECORDS_AGREE_H

#include <math.h>
#include <stdbool.h>
#include <stdio.h>

#include "check.h"
#include "kernels-private.h"

/* The sums: float lanes against the scalar pass's order, within 1e-5 (docs/block-scaling.md). */
static bool close_to(double a, double b)
{
	return a == b || fabs(a - b) <= 1e-5 * fmax(fabs(a), fabs(b));
}

/* Whether the AVX2 record a agrees with the scalar one s (both calls returned ra and rs): counts
 * and the scale range exactly, the sums within close_to; a CHECK, and both records printed after
 * `what` when not. */
static bool records_agree(int ra, int rs, const struct dli_stats_record *a,
			  const struct dli_stats_record *s, const char *what)
{
	bool ok = ra == 0 && rs == 0 && a->fp8_count == s->fp8_count &&
		  a->underflows == s->underflows && a->overflows == s->overflows &&
		  close_to(a->err_sq, s->err_sq) && close_to(a->dot, s->dot) &&
		  close_to(a->dq_sq, s->dq_sq) && close_to(a->x_sq, s->x_sq) &&
		  a->scale_inv_min == s->scale_inv_min && a->scale_inv_max == s->scale_inv_max;

	CHECK(ok);
	if (!ok)
		fprintf(stderr,
			"%s: returned %d/%d, count %llu/%llu under %llu/%llu over %llu/%llu err "
			"%.9g/%.9g dot %.9g/%.9g dq %.9g/%.9g x %.9g/%.9g scale_inv %g/%g .. %g/%g\n",
			what, ra, rs, (unsigned long long)a->fp8_count,
			(unsigned long long)s->fp8_count, (unsigned long long)a->underflows,
			(unsigned long long)s->underflows, (unsigned long long)a->overflows,
			(unsigned long long)s->overflows, a->err_sq, s->err_sq, a->dot, s->dot,
			a->dq_sq, s->dq_sq, a->x_sq, s->x_sq, a->scale_inv_min, s->scale_inv_min,
			a->scale_inv_max, s->scale_inv_max);
	return ok;
}

#endif
