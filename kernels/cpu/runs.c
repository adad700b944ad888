/* Copying a strided view into contiguous memory: what every pass that has no strided entry of its
 * own (FP8 and block-scaled what-ifs, histograms, features that read data) reads instead. */
#include <string.h>

#include "runs-private.h"

void dli_cpu_runs_gather(const struct dli_cpu_runs *v, void *dst)
{
	const size_t es = dli_dtype_size(v->dtype);
	unsigned char *d = dst;
	struct dli_runs_cursor c;
	if (v->run_len < 1 || v->n < v->run_len)
		return;
	for (dli_runs_cursor_init(&c, v, 0); c.run < c.n_runs; dli_runs_cursor_next_run(&c)) {
		const unsigned char *s = c.start;
		if (v->inner == (int64_t)es) {
			memcpy(d, s, (size_t)v->run_len * es);
			d += (size_t)v->run_len * es;
			continue;
		}
		for (int64_t i = 0; i < v->run_len; i++, d += es, s += v->inner)
			memcpy(d, s, es);
	}
}
