/* The tests' pseudo-random numbers: xorshift64 from a fixed seed, so that a test's data are the
 * same in every run and a failure can be replayed. A file that wants other data than its
 * neighbours defines TEST_RNG_SEED before including this. */
#ifndef DLI_TEST_RNG_H
#define DLI_TEST_RNG_H

#include <stdint.h>

#ifndef TEST_RNG_SEED
#define TEST_RNG_SEED 0x9e3779b97f4a7c15ull
#endif

static uint64_t rng = TEST_RNG_SEED;

static uint64_t next_u64(void)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return rng;
}

#endif
