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

/* A walk over a view's runs in order (the statistics kernels' blocks, the gather's runs): it keeps
 * the current run and the start of the next one, and moves on by an odometer over the outer dims,
 * so that each block or run costs a few additions rather than a division per outer dim. */
struct dli_runs_cursor {
	const struct dli_cpu_runs *v;
	int64_t n_runs;
	int64_t run, off;                  /* the run holding the next element, its index there */
	const unsigned char *start, *next; /* where runs `run` and `run` + 1 start */
	int64_t idx[DLI_TENSOR_MAX_DIMS];  /* the outer indices of run `run` + 1 */
};

/* Moves the cursor to the start of the next run (row-major over outer[]). Past the last run,
 * c->next wraps to run 0, which nothing reads. */
static inline void dli_runs_cursor_next_run(struct dli_runs_cursor *c)
{
	const struct dli_cpu_runs *v = c->v;
	c->run++;
	c->off = 0;
	c->start = c->next;
	for (int d = v->n_outer - 1; d >= 0; d--) {
		if (++c->idx[d] < v->outer[d]) {
			c->next += v->step[d];
			return;
		}
		c->next -= (v->outer[d] - 1) * v->step[d];
		c->idx[d] = 0;
	}
}

/* A cursor at element `first` (0 .. n - 1) of the view. */
static inline void dli_runs_cursor_init(struct dli_runs_cursor *c, const struct dli_cpu_runs *v,
					int64_t first)
{
	int64_t run = first / v->run_len, rest = run;
	c->v = v;
	c->n_runs = v->n / v->run_len;
	c->next = v->base;
	for (int d = v->n_outer - 1; d >= 0; d--) {
		c->idx[d] = rest % v->outer[d];
		c->next += c->idx[d] * v->step[d];
		rest /= v->outer[d];
	}
	/* Now as if in run - 1, whose next run is `run`: one run on sets every field. */
	c->run = run - 1;
	dli_runs_cursor_next_run(c);
	c->off = first % v->run_len;
}

/* Prefetches a line in each 4 KiB page of the run after the cursor's next one (its first 8 pages,
 * and its last line), a run before the pass's prefetches of that run's lines start: a view's runs
 * begin on pages that no sequential read has walked, whose translations and first lines are
 * then on the way early. Measured on the AVX2 machine (Zen 3, 4 KiB pages, every 2nd row of a
 * [T, 4096] matrix): a plain read with a little arithmetic a line went from 0.81-0.87 to
 * 0.94-0.99 of a contiguous read; the statistics pass over the views, against a plain read of
 * the view, from 0.84-0.89 to 0.89-0.93 (f32) and 0.77-0.81 to 0.77-0.82 (bf16). Only along the
 * innermost outer dimension: where that wraps, nothing (a guess there could land in a gap). */
static inline void dli_runs_cursor_walk_ahead(const struct dli_runs_cursor *c)
{
	const struct dli_cpu_runs *v = c->v;
	const int d = v->n_outer - 1;
	if (d < 0 || c->idx[d] + 1 >= v->outer[d])
		return;
	const unsigned char *s = c->next + v->step[d];
	const int64_t bytes = v->run_len * (int64_t)dli_dtype_size(v->dtype);
	for (int64_t o = 0; o < bytes && o < 8 * 4096; o += 4096)
		__builtin_prefetch(s + o, 0, 3);
	__builtin_prefetch(s + bytes - 1, 0, 3);
}

/* The cursor's next m elements as one contiguous piece of memory: inside one run, a pointer into
 * it; across runs, `scratch` (m elements) after copying the pieces there. *pf: how far ahead
 * (bytes, added to each line's address) the pass over the block prefetches, so that each line
 * brings in the line at the same offset of the next block (as long as this one, or what is left
 * of the view), where that block lies in one run: the next block of the run, or the start of the
 * next run, which no hardware prefetcher can guess. (The AVX2 f32 and bf16 float passes prefetch
 * nearer, DLI_PREFETCH_BYTES on in the view's order, and take pf to find where their last lines'
 * bytes lie: stats-avx2.c's runs_tail_pf.) Where the next block spans runs, or there is
 * none, 0 (each line itself: no prefetch): one offset would reach past its first piece into the
 * gap, fetching bytes nobody reads, while that piece continues the run being read, which the
 * hardware prefetchers follow. */
static inline const unsigned char *dli_runs_cursor_block(struct dli_runs_cursor *c, int64_t m,
							 unsigned char *scratch, int64_t *pf)
{
	const struct dli_cpu_runs *v = c->v;
	const int64_t es = (int64_t)dli_dtype_size(v->dtype);
	const unsigned char *q = scratch;
	if (c->off == 0)
		dli_runs_cursor_walk_ahead(c);
	if (c->off + m <= v->run_len) {
		q = c->start + c->off * es;
		c->off += m;
		if (c->off == v->run_len)
			dli_runs_cursor_next_run(c);
	} else {
		unsigned char *d = scratch;
		for (int64_t left = m; left > 0;) {
			int64_t k = v->run_len - c->off < left ? v->run_len - c->off : left;
			memcpy(d, c->start + c->off * es, (size_t)(k * es));
			d += k * es;
			left -= k;
			c->off += k;
			if (c->off == v->run_len)
				dli_runs_cursor_next_run(c);
		}
	}
	int64_t left = v->n - (c->run * v->run_len + c->off), next_m = m < left ? m : left;
	*pf = 0;
	if (next_m > 0 && c->off + next_m <= v->run_len)
		*pf = (int64_t)((intptr_t)(c->start + c->off * es) - (intptr_t)q);
	return q;
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
