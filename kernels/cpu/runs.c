/* Copying a strided view into contiguous memory: what every pass that has no strided entry of its
 * own (FP8 and block-scaled what-ifs, histograms, features that read data) reads instead. */
#include <string.h>

#include "runs-private.h"

void dli_cpu_runs_gather(const struct dli_cpu_runs *v, void *dst)
{
	const size_t es = dli_dtype_size(v->dtype);
	unsigned char *d = dst;
	int64_t n_runs = v->run_len > 0 ? v->n / v->run_len : 0;
	for (int64_t r = 0; r < n_runs; r++) {
		const unsigned char *s = dli_runs_start(v, r);
		if (v->inner == (int64_t)es) {
			memcpy(d, s, (size_t)v->run_len * es);
			d += (size_t)v->run_len * es;
			continue;
		}
		for (int64_t i = 0; i < v->run_len; i++, d += es, s += v->inner)
			memcpy(d, s, es);
	}
}
