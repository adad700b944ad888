/* Vector helpers the AVX2 passes share. Included only by files compiled with AVX2 flags. */
#ifndef DLI_KERNELS_CPU_AVX2_PRIVATE_H
#define DLI_KERNELS_CPU_AVX2_PRIVATE_H

#include <immintrin.h>

/* The eight maxima of eight vectors of unsigned 32-bit lanes (magnitude bits), m[k]'s in lane k:
 * a transpose by unpacks, max at each level. */
static inline __attribute__((always_inline)) __m256i dli_avx2_hmax8(const __m256i m[8])
{
	__m256i t[4], u[2];
	#pragma GCC unroll 8
	for (int i = 0; i < 4; i++)
		t[i] = _mm256_max_epu32(_mm256_unpacklo_epi32(m[2 * i], m[2 * i + 1]),
					_mm256_unpackhi_epi32(m[2 * i], m[2 * i + 1]));
	#pragma GCC unroll 8
	for (int i = 0; i < 2; i++)
		u[i] = _mm256_max_epu32(_mm256_unpacklo_epi64(t[2 * i], t[2 * i + 1]),
					_mm256_unpackhi_epi64(t[2 * i], t[2 * i + 1]));
	return _mm256_max_epu32(_mm256_permute2x128_si256(u[0], u[1], 0x20),
				_mm256_permute2x128_si256(u[0], u[1], 0x31));
}

#endif
