/* The read reference the benchmarks divide by (tools/read-reference.h): on every SIMD path this
 * CPU has, read_chunk's sums over dli_parallel_for cover each float of the buffer once, for a
 * length that is a multiple of neither the chunk nor the vector width, against a plain count.
 * Small integers keep every partial sum exact, whatever the order of the additions. */
#include <stdlib.h>

#include "check.h"
#include "read-reference.h"

int main(void)
{
	int64_t n = 2 * DLI_STATS_CHUNK + DLI_STATS_CHUNK / 2 + 7;
	int64_t chunks = (n + DLI_STATS_CHUNK - 1) / DLI_STATS_CHUNK;
	float *x = malloc((size_t)n * sizeof *x), *sums = malloc((size_t)chunks * sizeof *sums);
	int64_t *want = calloc((size_t)chunks, sizeof *want);
	if (!x || !sums || !want) {
		free(x);
		free(sums);
		free(want);
		return 1;
	}
	for (int64_t i = 0; i < n; i++) {
		x[i] = (float)(i % 3);
		want[i / DLI_STATS_CHUNK] += i % 3;
	}
	enum dli_simd paths[] = {DLI_SIMD_SCALAR, DLI_SIMD_AVX2, DLI_SIMD_AVX512};
	for (size_t k = 0; k < sizeof paths / sizeof paths[0]; k++) {
		/* A path the CPU lacks would fault (an AVX-512 sum here): only the detected one and
		 * those below it run. */
		if (paths[k] > dli_simd_detect())
			continue;
		printf("%s\n", dli_simd_name(paths[k]));
		struct read_job j = {.p = x, .n = n, .simd = paths[k], .sums = sums};
		for (int threads = 1; threads <= 2; threads++) {
			for (int64_t c = 0; c < chunks; c++)
				sums[c] = -1;
			dli_parallel_for(chunks, threads, read_chunk, &j);
			for (int64_t c = 0; c < chunks; c++)
				CHECK_INT(sums[c], want[c]);
		}
	}
	free(x);
	free(sums);
	free(want);
	return check_exit();
}
