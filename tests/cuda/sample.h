/* Test data shared by the CUDA tests: a seeded xorshift generator and values that mix normal
 * numbers over several decades with zeros of both signs, f32 subnormals and, on request, NaNs
 * and infinities. A file defines SAMPLE_SEED before including this. */
#ifndef DLI_TEST_CUDA_SAMPLE_H
#define DLI_TEST_CUDA_SAMPLE_H

#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

static uint64_t rng = SAMPLE_SEED;

static uint64_t rnd(void)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return rng;
}

static double urand(void)
{
	return (double)(rnd() >> 11) * 0x1p-53;
}

static float gauss(void)
{
	double u = urand() + 1e-300, v = urand();
	return (float)(sqrt(-2.0 * log(u)) * cos(2.0 * M_PI * v));
}

/* Mostly gauss() times 10^k for k in [lowest_decade, lowest_decade + decades); zeros of both
 * signs, f32 subnormals, and with `specials` NaNs and infinities. */
static float sample_in(bool specials, int lowest_decade, int decades)
{
	unsigned r = (unsigned)(rnd() % 1000);
	if (specials && r < 5)
		return NAN;
	if (specials && r < 9)
		return r & 1 ? INFINITY : -INFINITY;
	if (r < 40)
		return r & 1 ? 0.0f : -0.0f;
	if (r < 60) {
		uint32_t bits = (uint32_t)(rnd() & 0x807fffffu) | 1u; /* an f32 subnormal */
		float f;
		memcpy(&f, &bits, 4);
		return f;
	}
	return gauss() * (float)pow(10.0, (double)(rnd() % (unsigned)decades) + lowest_decade);
}

#endif
