/* What the CPU kernels share among themselves: the thread pool, the SIMD and thread-count choice,
 * and the statistics pass's per-ISA chunk functions. Never installed, never seen by plugins. */
#ifndef DLI_CPU_PRIVATE_H
#define DLI_CPU_PRIVATE_H

#include <stdint.h>
#ifdef DLI_HAVE_X86_SIMD
#include <immintrin.h>
#endif

#include "kernels-private.h"

/* The run-time feature test and the function target of the AVX-512 kernels' optional paths;
 * avx512-emulation.h, in the test build that emulates AVX-512, defines both first. */
#ifndef DLI_CPU_HAS
#define DLI_CPU_HAS(feature) __builtin_cpu_supports(feature)
#define DLI_TARGET_BF16 __attribute__((target("avx512bf16")))
#endif

/* ---- Threads (kernels/cpu/threads.c) ---- */

/* Calls fn(arg, chunk, worker) once for every chunk in [0, n_chunks), spread over up to `threads`
 * threads of which the calling thread is one, and returns when every call has returned. Chunks
 * are handed out dynamically (an atomic counter), so fn must not care which thread runs a chunk;
 * `worker` is in [0, threads) and no two threads of one call share it, so per-worker scratch
 * indexed by it needs no lock. The calling thread is worker 0.
 *
 * The workers are a persistent pool created lazily on the first call that wants more than one
 * thread, grown when a call asks for more (up to DLI_MAX_THREADS), and torn down by a library
 * destructor at exit or unload; after fork() the child starts with no pool. One call uses the
 * pool at a time: a concurrent call from another thread, or a nested call from inside fn, runs
 * all its chunks on its own thread instead of waiting. If threads cannot be created, everything
 * runs on the calling thread. Returns 0 (an int so that a future failure mode fits). */
int dli_parallel_for(int64_t n_chunks, int threads, void (*fn)(void *arg, int64_t chunk, int worker),
		     void *arg);

#define DLI_MAX_THREADS 256

/* The thread count a pass may use: o->threads when positive, else $DLINSPECT_THREADS when it is a
 * positive number (read once per process), else the number of CPUs this process may run on
 * (sched_getaffinity, asked each time: a trainer may pin itself after start-up). 1 .. DLI_MAX_THREADS. */
int dli_cpu_threads(const struct dli_cpu_options *o);

/* The SIMD path a pass uses: o->simd when not AUTO, else $DLINSPECT_SIMD ("scalar", "avx2",
 * "avx512"; read once per process; another value is ignored), else dli_simd_detect(). Returns
 * DLI_SIMD_AUTO (0) when the forced path is one this CPU lacks: the caller returns -ENOTSUP. */
enum dli_simd dli_cpu_simd(const struct dli_cpu_options *o);

/* ---- Statistics pass internals (kernels/cpu/stats*.c) ---- */

/* 0 when n elements of dtype at data are input the statistics and histogram passes take (one of
 * the five float dtypes, n >= 0, data set unless n is 0), else -EINVAL. */
int dli_cpu_check_input(const void *data, enum dli_dtype dtype, int64_t n);

/* The pass works in blocks of this many elements: small enough that a block read from memory is
 * still in L1 for the second (deviation) pass over it, large enough that merging block records
 * in double costs nothing. Chunks, the unit handed to threads, are a whole number of blocks. */
#define DLI_STATS_BLOCK 2048
#define DLI_STATS_CHUNK ((int64_t)1 << 18)

/* A chunk function fills *r (initializing it) with every field up to m2 of n elements of `dt`
 * (one of the five float dtypes) starting at p, which may have any alignment. */
typedef void (*dli_stats_chunk_fn)(const void *p, enum dli_dtype dt, int64_t n,
				   struct dli_stats_record *r);

/* The same that also gives *finite_sq, the chunk's sum of x^2 over its finite elements
 * (dli_cpu_stats_finite_sq): r->sum_sq where that is finite, else NaN or infinite where it is not
 * known. The AVX2 path's only. */
typedef void (*dli_stats_chunk_finite_fn)(const void *p, enum dli_dtype dt, int64_t n,
					  struct dli_stats_record *r, double *finite_sq);

/* Scalar, in double: the reference the SIMD paths are held to, and their tail. */
void dli_stats_block_scalar(const void *p, enum dli_dtype dt, int64_t n, struct dli_stats_record *r);
void dli_stats_chunk_scalar(const void *p, enum dli_dtype dt, int64_t n, struct dli_stats_record *r);
/* The sum of x^2 over the finite elements of n at p, in double: a SIMD path's finite sum over a
 * block's tail that holds NaN or an infinity. */
double dli_stats_finite_sum_sq_scalar(const void *p, enum dli_dtype dt, int64_t n);
/* What a SIMD path's double lanes (its way with blocks holding NaN, infinities or magnitudes whose
 * squares a float would overflow or flush) found in a block of n elements: exact counts and
 * extrema (NaN left out of them), sums of |x| and x^2, and of d = x - shift and d^2. */
struct dli_stats_dblock {
	uint64_t n, nan, inf, zeros;
	float min, max, min_nonzero_abs;
	double shift, sd, sdd, sum_abs, sum_sq;
};

/* Fills *r (initializing it) from *b. NaN and infinities in the sums give the record a naive
 * double loop would give. Returns whether the block needed the double lanes: it holds NaN or an
 * infinity, or its largest magnitude is above `large` or nonzero and below `small`. */
bool dli_stats_dblock_record(const struct dli_stats_dblock *b, float small, float large,
			     struct dli_stats_record *r);
/* What a SIMD path's float lanes found in a block: extrema and the count of zeros exactly, and
 * the sums of d = x - shift, d^2 and |x| reduced into double. */
struct dli_stats_sums {
	float mn, mx, mnz;
	uint64_t zc;
	double sd, sdd, sa;
};

/* Fills *r (initializing it) from the float lanes' *a over n elements around shift: the finite
 * case (dli_stats_dblock_record takes the others). */
void dli_stats_sums_record(const struct dli_stats_sums *a, int64_t n, float shift,
			   struct dli_stats_record *r);
#ifdef DLI_HAVE_X86_SIMD
void dli_stats_chunk_avx2(const void *p, enum dli_dtype dt, int64_t n, struct dli_stats_record *r);
void dli_stats_chunk_finite_avx2(const void *p, enum dli_dtype dt, int64_t n,
				 struct dli_stats_record *r, double *finite_sq);
void dli_stats_chunk_avx512(const void *p, enum dli_dtype dt, int64_t n, struct dli_stats_record *r);
/* Whether the block of n bf16 or f16 elements at p (n a multiple of 16) holds NaN or an infinity;
 * then *r is its record, from one integer pass over its bits that prefetches pf bytes ahead (the
 * AVX2 kernel's; the AVX-512 one takes such blocks there too). False for other dtypes. */
bool dli_stats_nonfinite_block_avx2(const void *p, enum dli_dtype dt, int64_t n, int64_t pf,
				    struct dli_stats_record *r);
#endif

/* Bytes ahead of the current read that the SIMD passes prefetch (into L1): far enough to cover
 * memory latency at full bandwidth, near enough to stay within L1 next to the current block. */
#ifndef DLI_PREFETCH_BYTES
#define DLI_PREFETCH_BYTES 4096
#endif

/* The floating-point mode the FP8 and block-scaled codecs' rules assume: round to nearest-even,
 * no flush-to-zero (MXCSR bit 15), no denormals-are-zero (bit 6), whatever the host set. Returns
 * the caller's mode, for dli_csr_restore. A no-op without x86 SIMD (C's defaults hold there). */
static inline unsigned dli_csr_exact(void)
{
#ifdef DLI_HAVE_X86_SIMD
	unsigned csr = _mm_getcsr();
	_mm_setcsr(csr & ~0xe040u);
	return csr;
#else
	return 0;
#endif
}

static inline void dli_csr_restore(unsigned csr)
{
#ifdef DLI_HAVE_X86_SIMD
	_mm_setcsr(csr);
#else
	(void)csr;
#endif
}

/* The FP8-cast terms of a run of blocks in the block-scaled passes (MXFP8, FP8 block scaling,
 * NVFP4): counts, sums in double, the scale_inv range. */
struct dli_block_terms {
	uint64_t count, under, over;
	double err, dot, dqs, xs, lo, hi;
	uint64_t zeros; /* NVFP4's AVX2 pass given the zeros: see nvfp4-private.h's xs_known */
};

/* After a block-scaled compare (MXFP8, FP8 block scaling, NVFP4) whose bf16 fast steps left their
 * sum of x^2 out (xs_known): x_sq set to the statistics pass's sum_sq, and what was left out
 * (sum_sq less the x_sq summed) added to dot, half of it (the fast steps' dot is
 * (xs + dqs - err) / 2; err and dq_sq hold no x^2). False when dot ends below 1/16 of sum_sq (most
 * of the weight in values that underflow): sum_sq's own rounding (about 1e-7 of it) would then
 * weigh too much in dot, and the caller runs the pass again summing everything. */
static inline bool dli_block_add_left_out(struct dli_stats_record *out, double sum_sq)
{
	double left_out = sum_sq - out->x_sq;
	out->x_sq = sum_sq;
	out->dot += left_out / 2;
	return out->dot >= 0x1p-4 * sum_sq;
}

/* *out (initialised) from a block-scaled compare's n chunk records: their FP8 terms added in
 * chunk order, so that the sums do not depend on the threads, and their scale ranges. */
static inline void dli_block_recs_merge(struct dli_stats_record *out,
					const struct dli_stats_record *recs, int64_t n)
{
	dli_stats_record_init(out);
	for (int64_t c = 0; c < n; c++) {
		dli_stats_add_fp8_terms(out, &recs[c]);
		if (recs[c].scale_inv_min < out->scale_inv_min)
			out->scale_inv_min = recs[c].scale_inv_min;
		if (recs[c].scale_inv_max > out->scale_inv_max)
			out->scale_inv_max = recs[c].scale_inv_max;
	}
}

/* A chunk's statistics record from its terms. */
static inline void dli_block_terms_record(const struct dli_block_terms *t,
					  struct dli_stats_record *r)
{
	dli_stats_record_init(r);
	r->fp8_count = t->count;
	r->underflows = t->under;
	r->overflows = t->over;
	r->err_sq = t->err;
	r->dot = t->dot;
	r->dq_sq = t->dqs;
	r->x_sq = t->xs;
	r->scale_inv_min = t->lo;
	r->scale_inv_max = t->hi;
}

#endif
