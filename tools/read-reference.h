/* The read-bandwidth reference the benchmarks measure a pass against: a plain SIMD sum of every
 * float, nothing else, with the statistics pass's prefetch and chunks. One copy for
 * `dlinspect bench stats` (tools/bench-stats.c) and tests/nonfinite/bench_detect.c, so that both
 * divide by the same read. */
#ifndef DLI_READ_REFERENCE_H
#define DLI_READ_REFERENCE_H

#include <stdint.h>

#include "tools-api.h"

#ifdef DLI_HAVE_X86_SIMD
/* pf: how far ahead of each line it prefetches, in bytes (DLI_PREFETCH_BYTES, as the passes). */
__attribute__((target("avx512f"))) static inline float sum_avx512(const float *p, int64_t n,
								  int64_t pf)
{
	__m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
	int64_t i = 0;
	for (; i + 64 <= n; i += 64) {
		const char *q = (const char *)(p + i) + pf;
		_mm_prefetch(q, _MM_HINT_T0);
		_mm_prefetch(q + 64, _MM_HINT_T0);
		_mm_prefetch(q + 128, _MM_HINT_T0);
		_mm_prefetch(q + 192, _MM_HINT_T0);
		a0 = _mm512_add_ps(a0, _mm512_loadu_ps(p + i));
		a1 = _mm512_add_ps(a1, _mm512_loadu_ps(p + i + 16));
		a2 = _mm512_add_ps(a2, _mm512_loadu_ps(p + i + 32));
		a3 = _mm512_add_ps(a3, _mm512_loadu_ps(p + i + 48));
	}
	float s = _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3)));
	for (; i < n; i++)
		s += p[i];
	return s;
}

__attribute__((target("avx2"))) static inline float sum_avx2(const float *p, int64_t n, int64_t pf)
{
	__m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
	int64_t i = 0;
	for (; i + 32 <= n; i += 32) {
		const char *q = (const char *)(p + i) + pf;
		_mm_prefetch(q, _MM_HINT_T0);
		_mm_prefetch(q + 64, _MM_HINT_T0);
		a0 = _mm256_add_ps(a0, _mm256_loadu_ps(p + i));
		a1 = _mm256_add_ps(a1, _mm256_loadu_ps(p + i + 8));
		a2 = _mm256_add_ps(a2, _mm256_loadu_ps(p + i + 16));
		a3 = _mm256_add_ps(a3, _mm256_loadu_ps(p + i + 24));
	}
	float t[8];
	_mm256_storeu_ps(t, _mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)));
	float s = t[0] + t[1] + t[2] + t[3] + t[4] + t[5] + t[6] + t[7];
	for (; i < n; i++)
		s += p[i];
	return s;
}
#endif

static inline float sum_scalar(const float *p, int64_t n)
{
	float s = 0;
	for (int64_t i = 0; i < n; i++)
		s += p[i];
	return s;
}

/* The sum of n floats on the `simd` path (scalar where the build has no x86 SIMD), each line
 * prefetching the one pf bytes ahead. */
static inline float read_sum_pf(enum dli_simd simd, const float *p, int64_t n, int64_t pf)
{
	switch (simd) {
#ifdef DLI_HAVE_X86_SIMD
#ifdef DLI_AVX512_EMULATED /* no AVX-512 here (kernels/cpu/avx512-emulation.h) */
	case DLI_SIMD_AVX512:
#else
	case DLI_SIMD_AVX512: return sum_avx512(p, n, pf);
#endif
	case DLI_SIMD_AVX2: return sum_avx2(p, n, pf);
#endif
	default: (void)pf; return sum_scalar(p, n);
	}
}

static inline float read_sum(enum dli_simd simd, const float *p, int64_t n)
{
	return read_sum_pf(simd, p, n, DLI_PREFETCH_BYTES);
}

struct read_job {
	const float *p;
	int64_t n;
	enum dli_simd simd;
	float *sums; /* one per chunk: the result must be used, or the reads could be dropped */
};

/* A dli_parallel_for function: chunk c (DLI_STATS_CHUNK floats, the pass's own) of a read_job. */
static inline void read_chunk(void *arg, int64_t c, int worker)
{
	struct read_job *j = arg;
	int64_t first = c * DLI_STATS_CHUNK;
	int64_t m = j->n - first < DLI_STATS_CHUNK ? j->n - first : DLI_STATS_CHUNK;
	j->sums[c] = read_sum(j->simd, j->p + first, m);
}

#endif
