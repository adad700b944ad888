/* A strided view as the CPU statistics pass reads it: equal runs of contiguous elements whose
 * starts follow an outer grid of byte steps (core/strided.c builds it from a host's strides). */
#ifndef DLI_RUNS_PRIVATE_H
#define DLI_RUNS_PRIVATE_H

#include <stdint.h>
#include <string.h>

#include "kernels-private.h"

struct dli_cpu_runs {
	const unsigned char *base; /* element 0 of run 0 */
	enum dli_dtype dtype;
	int64_t run_len;  /* elements of one run, >= 1 */
	int64_t n;        /* elements of the view: run_len times the product of outer[] */
	int64_t inner;    /* bytes from one element of a run to the next: the dtype's size for the
			     statistics pass; any value (negative, 0) for dli_cpu_runs_gather */
	int n_outer;      /* 0 .. DLI_TENSOR_MAX_DIMS - 1 */
	int64_t outer[DLI_TENSOR_MAX_DIMS]; /* sizes of the outer dims, outermost first */
	int64_t step[DLI_TENSOR_MAX_DIMS];  /* their strides in bytes (any sign) */
};

/* Where run `run` (0 .. n / run_len - 1, row-major over outer[]) starts. */
static inline const unsigned char *dli_runs_start(const struct dli_cpu_runs *v, int64_t run)
{
	const unsigned char *p = v->base;
	for (int d = v->n_outer - 1; d >= 0 && run; d--) {
		p += (run % v->outer[d]) * v->step[d];
		run /= v->outer[d];
	}
	return p;
}

/* The m elements of the view from element `first` on (inner == element size), as one contiguous
 * piece of memory: inside one run, a pointer into it; across runs, `scratch` (m elements) after
 * copying the pieces there. The statistics kernels call it once per block, so a view whose runs
 * are as long as a block costs nothing but this arithmetic. */
static inline const unsigned char *dli_runs_block(const struct dli_cpu_runs *v, int64_t first,
						  int64_t m, unsigned char *scratch)
{
	const size_t es = dli_dtype_size(v->dtype);
	int64_t run = first / v->run_len, off = first % v->run_len;
	if (off + m <= v->run_len)
		return dli_runs_start(v, run) + (size_t)off * es;
	unsigned char *d = scratch;
	while (m > 0) {
		int64_t k = v->run_len - off < m ? v->run_len - off : m;
		memcpy(d, dli_runs_start(v, run) + (size_t)off * es, (size_t)k * es);
		d += (size_t)k * es;
		m -= k;
		run++;
		off = 0;
	}
	return scratch;
}

/* How far ahead (bytes, added to each line's address) the pass over the block dli_runs_block gave
 * at q prefetches: one block ahead in the view's order, so that each line brings in the line at
 * the same offset of the next block; that is the next block of the run, or, for a run's last
 * block, the start of the next run (which no hardware prefetcher can guess), and nothing beyond a
 * run is fetched for nothing. 0 (each line itself: no prefetch) for a block staged in scratch and
 * at the end of the view. */
static inline int64_t dli_runs_prefetch(const struct dli_cpu_runs *v, int64_t first, int64_t m,
					const unsigned char *q, const unsigned char *scratch)
{
	const int64_t es = (int64_t)dli_dtype_size(v->dtype);
	int64_t run = first / v->run_len, off = first % v->run_len;
	if (q == scratch)
		return 0;
	if (off + m < v->run_len)
		return m * es;
	if (run + 1 >= v->n / v->run_len)
		return 0;
	return (int64_t)((intptr_t)dli_runs_start(v, run + 1) - (intptr_t)q);
}

/* The largest block any statistics path reads at once, in bytes: the size of `scratch`. */
#define DLI_RUNS_SCRATCH (2 * 2048 * 4)

/* A chunk function over the view's elements [first, first + n): the same blocks, shifts and merge
 * order as the contiguous chunk function over a copy of the view, so the record is bit-identical. */
typedef void (*dli_stats_runs_fn)(const struct dli_cpu_runs *v, int64_t first, int64_t n,
				  unsigned char *scratch, struct dli_stats_record *r);
void dli_stats_runs_scalar(const struct dli_cpu_runs *v, int64_t first, int64_t n,
			   unsigned char *scratch, struct dli_stats_record *r);
#ifdef DLI_HAVE_X86_SIMD
void dli_stats_runs_avx2(const struct dli_cpu_runs *v, int64_t first, int64_t n,
			 unsigned char *scratch, struct dli_stats_record *r);
void dli_stats_runs_avx512(const struct dli_cpu_runs *v, int64_t first, int64_t n,
			   unsigned char *scratch, struct dli_stats_record *r);
#endif

/* dli_cpu_stats over a view whose inner step is its element size (v->inner == dtype size):
 * the record dli_cpu_stats gives for a contiguous copy of the view, bit for bit, with the same
 * chunks and threads. -EINVAL for a dtype or view it cannot read, -ENOTSUP as dli_cpu_stats. */
int dli_cpu_stats_runs(const struct dli_cpu_runs *v, const struct dli_cpu_options *o,
		       struct dli_stats_record *out);

/* Copies the view's n elements, in row-major order, to dst (n * element size bytes). Any inner
 * step and outer steps, overlapping or negative ones too. */
void dli_cpu_runs_gather(const struct dli_cpu_runs *v, void *dst);

#endif
