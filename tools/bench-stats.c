/* `dlinspect bench stats`: throughput of the statistics passes against the machine's read bandwidth
 * measured in the same run (a plain SIMD sum over the same buffer, same prefetch, same threads),
 * with the design's targets (all statistics of f32 >= 0.90 of it; bf16 and the FP8
 * quantize-and-compare pass >= 0.80; MXFP8's and FP8 block scaling's what-if passes >= 0.70;
 * NVFP4's >= 0.50, timed as the core runs it: given the amax of its statistics pass, one read;
 * the statistics of a strided view, the Q third of a fused QKV output read in
 * place, >= 0.80 of the read bandwidth counted over the view's bytes; each of them
 * on data with a NaN or an infinity every 1000 elements >= 0.60, or its own target where
 * that is lower), and numpy's speed on the same statistics when it is there. The SIMD path is
 * the dispatcher's (printed), or the one $DLINSPECT_SIMD forces (scalar, avx2, avx512), so that
 * an AVX-512 machine measures the AVX2 path too. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

#include "cmd.h"
#include "read-reference.h"
#include "tools-api.h"

#define REPS 10
#define MAX_ROWS (4 * NP) /* every pass, on 1 and all threads, clean and with NaN */
/* The MXFP8 rows view the buffer as rows of this many columns (a typical hidden size). */
#define MX_COLS 4096
/* The column-block rows view the buffer as a fused QKV output [T, 3 * QKV_H] and read the Q third
 * ([T, QKV_H], strides [3 * QKV_H, 1]) in place, as dli_inspect_tensor_strided does. */
#define QKV_H 4096

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* The CPU the figures come from, as "vendor family F model M: brand string": the same SIMD path
 * runs at very different speeds on different cores (on Zen 1 every 256-bit operation takes two
 * 128-bit halves), so a table means nothing without it. A hypervisor may report a generic name
 * ("AMD EPYC"); the family and model still tell the generation. */
static void cpu_describe(char *out, size_t size)
{
#if defined(__x86_64__) || defined(__i386__)
	unsigned a, b, c, d, v[12];
	char vendor[13] = "", brand[49] = "";
	if (__get_cpuid(0, &a, &b, &c, &d)) {
		memcpy(vendor, &b, 4);
		memcpy(vendor + 4, &d, 4);
		memcpy(vendor + 8, &c, 4);
	}
	unsigned family = 0, model = 0;
	if (__get_cpuid(1, &a, &b, &c, &d)) {
		family = (a >> 8) & 0xf;
		model = (a >> 4) & 0xf;
		if (family == 0xf)
			family += (a >> 20) & 0xff;
		if (family == 0x6 || family >= 0xf)
			model += ((a >> 16) & 0xf) << 4;
	}
	if (__get_cpuid(0x80000000u, &a, &b, &c, &d) && a >= 0x80000004u) {
		for (unsigned k = 0; k < 3; k++)
			__get_cpuid(0x80000002u + k, &v[4 * k], &v[4 * k + 1], &v[4 * k + 2],
				    &v[4 * k + 3]);
		memcpy(brand, v, 48);
	}
	const char *name = brand;
	while (*name == ' ')
		name++;
	size_t len = strlen(name);
	while (len && name[len - 1] == ' ')
		len--;
	snprintf(out, size, "%s family %u model %u: %.*s", vendor, family, model, (int)len, name);
#else
	snprintf(out, size, "not x86");
#endif
}

/* JSON string contents: the brand string is printable ASCII, but a quote or a backslash would
 * break the line. */
static void json_chars(const char *s)
{
	for (; *s; s++)
		if (*s == '"' || *s == '\\')
			printf("\\%c", *s);
		else if ((unsigned char)*s >= 0x20 && (unsigned char)*s < 0x7f)
			putchar(*s);
}

/* ---- The read-bandwidth reference (read-reference.h) over a view ---- */

/* A plain read of a view (struct dli_cpu_runs, one outer dim): every run summed as floats, the
 * same bytes a view's pass reads, in the same order and chunks (DLI_STATS_CHUNK elements, on the
 * same threads), each line prefetching the line at its offset in the next run as the pass's
 * cursor does (kernels/cpu/runs-private.h): what the access pattern itself allows. A read that
 * prefetched 4 KiB ahead instead, into the gap after each run, read views 10-25 % slower here. */
struct view_read_job {
	const struct dli_cpu_runs *v;
	enum dli_simd simd;
	float *sums;
};

static void view_read_chunk(void *arg, int64_t c, int worker)
{
	struct view_read_job *j = arg;
	const struct dli_cpu_runs *v = j->v;
	int64_t per = DLI_STATS_CHUNK / v->run_len > 0 ? DLI_STATS_CHUNK / v->run_len : 1;
	int64_t r0 = c * per, r1 = r0 + per < v->outer[0] ? r0 + per : v->outer[0];
	int64_t floats = v->run_len * (int64_t)dli_dtype_size(v->dtype) / 4;
	float s = 0;
	(void)worker;
	for (int64_t r = r0; r < r1; r++)
		s += read_sum_pf(j->simd, (const float *)(v->base + r * v->step[0]), floats,
				 r + 1 < r1 ? v->step[0] : DLI_PREFETCH_BYTES);
	j->sums[c] = s;
}

/* ---- The passes ---- */

enum pass_kind { READ, STATS_F32, STATS_BF16, FP8_F32, FP8_BF16, MX_F32, MX_BF16, NV_F32, NV_BF16,
		 FB_F32, FB_BF16, COL_F32, COL_BF16, ROW_F32, ROW_BF16 };

struct bench {
	float *f32;
	uint16_t *bf16;
	int64_t n32, n16;
	size_t bytes;
	float *sums;
	float scale32, scale16;
	float amax32, amax16; /* the buffers' as they are now (see set_pass_results) */
	/* likewise, their sums of finite x^2 (dli_cpu_stats_finite_sq, as the core takes them) and
	 * zeros */
	double sum_sq32, sum_sq16;
	uint64_t zeros32, zeros16;
	float *saved32;     /* what poke_nonfinite replaced */
	uint16_t *saved16;
	struct dli_cpu_runs q32, q16; /* the Q thirds of the buffers seen as fused QKV outputs */
	struct dli_cpu_runs r32, r16; /* every 2nd row of the buffers seen as [T, QKV_H] matrices */
};

static volatile double sink;

/* Seconds for one run of `kind` on `threads` threads; negative errno when the pass is unavailable. */
static double run_once(struct bench *b, enum pass_kind kind, int threads, enum dli_simd simd)
{
	struct dli_cpu_options o = {.simd = DLI_SIMD_AUTO, .threads = threads};
	struct dli_stats_record r;
	int rc = 0;
	double t0 = now_s();
	switch (kind) {
	case READ: {
		struct read_job j = {.p = b->f32, .n = b->n32, .simd = simd, .sums = b->sums};
		int64_t chunks = (b->n32 + DLI_STATS_CHUNK - 1) / DLI_STATS_CHUNK;
		dli_parallel_for(chunks, threads, read_chunk, &j);
		sink = b->sums[0];
		break;
	}
	case STATS_F32:
		rc = dli_cpu_stats(b->f32, DLI_DTYPE_F32, b->n32, &o, &r);
		break;
	case STATS_BF16:
		rc = dli_cpu_stats(b->bf16, DLI_DTYPE_BF16, b->n16, &o, &r);
		break;
	/* The FP8 what-if as LogFp8TensorStats runs it: after the statistics pass, whose sum of
	 * x^2 it is given (core/stats.c). */
	case FP8_F32:
		rc = dli_cpu_fp8_compare_sum_sq(b->f32, DLI_DTYPE_F32, b->n32, DLI_DTYPE_F8E4M3,
						b->scale32, b->sum_sq32, &o, &r);
		break;
	case FP8_BF16:
		rc = dli_cpu_fp8_compare_sum_sq(b->bf16, DLI_DTYPE_BF16, b->n16, DLI_DTYPE_F8E4M3,
						b->scale16, b->sum_sq16, &o, &r);
		break;
	case MX_F32: /* MXFP8's what-if (row-wise blocks, E4M3), as LogFp8TensorStats runs it,
		      * given the statistics pass's sum of x^2 */
		rc = dli_cpu_mx_compare_sum_sq(b->f32, DLI_DTYPE_F32, b->n32 / MX_COLS, MX_COLS,
					       DLI_DTYPE_F8E4M3, false, b->sum_sq32, &o, &r);
		break;
	case MX_BF16:
		rc = dli_cpu_mx_compare_sum_sq(b->bf16, DLI_DTYPE_BF16, b->n16 / MX_COLS, MX_COLS,
					       DLI_DTYPE_F8E4M3, false, b->sum_sq16, &o, &r);
		break;
	/* NVFP4's what-if (row-wise 1 x 16 blocks), as LogNvfp4TensorStats runs it: the core's
	 * dli_stats_add_block gives it the amax, the sum of finite x^2 and the zeros of the
	 * statistics pass it makes first, so the what-if reads the tensor once, and that one read is what these rows
	 * time. */
	case NV_F32:
		rc = dli_cpu_nvfp4_compare_known(b->f32, DLI_DTYPE_F32, b->n32 / MX_COLS, MX_COLS, 1,
						 false, b->amax32, b->sum_sq32, b->zeros32, &o, &r);
		break;
	case NV_BF16:
		rc = dli_cpu_nvfp4_compare_known(b->bf16, DLI_DTYPE_BF16, b->n16 / MX_COLS, MX_COLS,
						 1, false, b->amax16, b->sum_sq16, b->zeros16, &o,
						 &r);
		break;
	case FB_F32: /* FP8 block scaling's what-if (128 x 128 tiles, power-of-two scales, E4M3),
		      * likewise */
		rc = dli_cpu_fp8b_compare_sum_sq(b->f32, DLI_DTYPE_F32, b->n32 / MX_COLS, MX_COLS,
						 DLI_DTYPE_F8E4M3, 2, false, true, b->sum_sq32, &o,
						 &r);
		break;
	case FB_BF16:
		rc = dli_cpu_fp8b_compare_sum_sq(b->bf16, DLI_DTYPE_BF16, b->n16 / MX_COLS, MX_COLS,
						 DLI_DTYPE_F8E4M3, 2, false, true, b->sum_sq16, &o,
						 &r);
		break;
	case COL_F32: /* a strided view's statistics, read over its rows in place */
		rc = dli_cpu_stats_runs(&b->q32, &o, &r);
		break;
	case COL_BF16:
		rc = dli_cpu_stats_runs(&b->q16, &o, &r);
		break;
	case ROW_BF16:
		rc = dli_cpu_stats_runs(&b->r16, &o, &r);
		break;
	case ROW_F32:
		rc = dli_cpu_stats_runs(&b->r32, &o, &r);
		break;
	}
	double t = now_s() - t0;
	if (rc < 0)
		return rc;
	if (kind != READ)
		sink = r.sum + r.err_sq;
	return t;
}

/* ---- numpy, for comparison ---- */

/* The statistics LogTensorStats computes, as numpy users compute them: one numpy call each. */
static const char numpy_script[] =
	"import sys, time\n"
	"import numpy as np\n"
	"x = np.random.default_rng(1).standard_normal(int(sys.argv[1]), dtype=np.float32)\n"
	"def run():\n"
	"    np.min(x); np.max(x); x.mean(); x.std(); np.abs(x).sum(); np.sqrt((x*x).sum())\n"
	"    np.abs(x).max(); np.isnan(x).sum(); np.isinf(x).sum(); (x == 0).sum()\n"
	"best = 1e30\n"
	"for _ in range(3):\n"
	"    t = time.perf_counter(); run(); best = min(best, time.perf_counter() - t)\n"
	"print(best)\n";

/* numpy's GB/s for all those statistics over n float32, or 0 when python3 or numpy is missing. */
static double numpy_gbs(int64_t n)
{
	char cmd[1024];
	snprintf(cmd, sizeof(cmd), "python3 -c '%s' %lld 2>/dev/null", numpy_script, (long long)n);
	FILE *f = popen(cmd, "r");
	if (!f)
		return 0;
	double secs = 0;
	if (fscanf(f, "%lf", &secs) != 1)
		secs = 0;
	if (pclose(f) != 0 || secs <= 0)
		return 0;
	return (double)n * 4.0 / secs / 1e9;
}

/* ---- The command ---- */

static uint64_t rng = 0x243f6a8885a308d3ull;

static uint64_t next_u64(void)
{
	rng ^= rng >> 12;
	rng ^= rng << 25;
	rng ^= rng >> 27;
	return rng * 0x2545f4914f6cdd1dull;
}

struct row {
	const char *name;
	int threads;
	double gbs, read_gbs, ratio, target;
	bool available;
};

/* The median of n values (n <= REPS), which it sorts. */
static double median(double *v, int n)
{
	for (int i = 1; i < n; i++)
		for (int j = i; j > 0 && v[j - 1] > v[j]; j--) {
			double t = v[j];
			v[j] = v[j - 1];
			v[j - 1] = t;
		}
	return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

static const struct {
	enum pass_kind kind;
	const char *name, *nonfinite_name;
	double target;
} passes[] = {
	{STATS_F32, "stats_f32", "stats_f32_nan", 0.90},
	{STATS_BF16, "stats_bf16", "stats_bf16_nan", 0.80},
	{FP8_F32, "fp8_compare_f32", "fp8_compare_f32_nan", 0.80},
	{FP8_BF16, "fp8_compare_bf16", "fp8_compare_bf16_nan", 0.80},
	{MX_F32, "mxfp8_compare_f32", "mxfp8_compare_f32_nan", 0.70},
	{MX_BF16, "mxfp8_compare_bf16", "mxfp8_compare_bf16_nan", 0.70},
	{NV_F32, "nvfp4_compare_f32", "nvfp4_compare_f32_nan", 0.50},
	{NV_BF16, "nvfp4_compare_bf16", "nvfp4_compare_bf16_nan", 0.50},
	{FB_F32, "fp8b_compare_f32", "fp8b_compare_f32_nan", 0.70},
	{FB_BF16, "fp8b_compare_bf16", "fp8b_compare_bf16_nan", 0.70},
	{COL_F32, "stats_f32_colblock", "stats_f32_colblock_nan", 0.80},
	{COL_BF16, "stats_bf16_colblock", "stats_bf16_colblock_nan", 0.80},
	{ROW_F32, "stats_f32_rowslice", "stats_f32_rowslice_nan", 0.80},
	{ROW_BF16, "stats_bf16_rowslice", "stats_bf16_rowslice_nan", 0.80},
};
enum { NP = sizeof(passes) / sizeof(passes[0]) };

/* The index in passes[] of a pass kind. */
static int kind_index(enum pass_kind kind)
{
	int p = 0;
	while (p < NP - 1 && passes[p].kind != kind)
		p++;
	return p;
}

/* The share of the buffer's bytes a pass reads: the view's for the column-block rows, whose GB/s
 * and ratio count only the bytes they read (the read reference reads the whole buffer). */
static double view_share(const struct bench *b, enum pass_kind kind)
{
	const struct dli_cpu_runs *v = kind == COL_F32 ? &b->q32 : kind == COL_BF16 ? &b->q16
				     : kind == ROW_F32 ? &b->r32 : kind == ROW_BF16 ? &b->r16 : NULL;
	return v ? (double)v->n * (double)dli_dtype_size(v->dtype) / (double)b->bytes : 1.0;
}

/* The Q third of n elements of dt at p seen as a fused [T, 3 * QKV_H] output. */
static struct dli_cpu_runs qkv_view(const void *p, enum dli_dtype dt, int64_t n)
{
	int64_t es = (int64_t)dli_dtype_size(dt), rows = n / (3 * QKV_H);
	return (struct dli_cpu_runs){.base = p, .dtype = dt, .run_len = QKV_H, .n = rows * QKV_H,
				     .inner = es, .n_outer = 1, .outer = {rows},
				     .step = {3 * QKV_H * es}};
}

/* Every 2nd row of n elements of dt at p seen as a [T, QKV_H] matrix (t[::2] in numpy). */
static struct dli_cpu_runs row_view(const void *p, enum dli_dtype dt, int64_t n)
{
	int64_t es = (int64_t)dli_dtype_size(dt), rows = n / (2 * QKV_H);
	return (struct dli_cpu_runs){.base = p, .dtype = dt, .run_len = QKV_H, .n = rows * QKV_H,
				     .inner = es, .n_outer = 1, .outer = {rows},
				     .step = {2 * QKV_H * es}};
}

/* A view pass against a plain read of the same view, paired in each of REPS rounds as the table
 * pairs every pass with a read: the ratio to what the access pattern allows (runs of QKV_H
 * elements with gaps between them read slower than a whole buffer on most machines). Returns the
 * median ratio, or a negative value when unavailable; *gbs gets the median view-read GB/s. */
static double view_ratio(struct bench *b, enum pass_kind kind, int threads, enum dli_simd simd,
			 double *gbs)
{
	const struct dli_cpu_runs *v = kind == COL_F32 ? &b->q32 : kind == COL_BF16 ? &b->q16
				     : kind == ROW_F32 ? &b->r32 : &b->r16;
	int64_t per = DLI_STATS_CHUNK / v->run_len > 0 ? DLI_STATS_CHUNK / v->run_len : 1;
	int64_t chunks = (v->outer[0] + per - 1) / per;
	double bytes = (double)v->n * (double)dli_dtype_size(v->dtype), tread[REPS], ratio[REPS];
	float *sums = calloc((size_t)chunks + 1, sizeof *sums);
	if (!sums)
		return -1;
	struct view_read_job j = {.v = v, .simd = simd, .sums = sums};
	for (int rep = 0; rep < REPS; rep++) {
		double t0 = now_s();
		dli_parallel_for(chunks, threads, view_read_chunk, &j);
		tread[rep] = now_s() - t0;
		sink = sums[0];
		double tp = run_once(b, kind, threads, simd);
		if (tp < 0) {
			free(sums);
			return -1;
		}
		ratio[rep] = tread[rep] / tp;
	}
	free(sums);
	*gbs = bytes / median(tread, REPS) / 1e9;
	return median(ratio, REPS);
}

/* What every pass must reach on data with NaN or infinities: the tensors that have gone bad are
 * the ones this tool exists to catch. A pass whose clean target is lower (NVFP4's 0.50) keeps
 * that one: NaN blocks are to cost little, not to make a pass faster than on clean data. */
#define NONFINITE_TARGET 0.60

/* Every pass on 1 thread and on `all`, into rows (NP a thread count); returns the rows filled.
 * nonfinite: the rows of the poked data, whose target is NONFINITE_TARGET (or lower: above). */
static int run_rows(struct bench *b, int all, enum dli_simd simd, bool nonfinite, const bool *sel,
		    struct row *rows)
{
	int counts[2] = {1, all}, nr = 0;
	for (int k = 0; k < (all > 1 ? 2 : 1); k++) {
		int t = counts[k];
		/* REPS rounds; in each, every pass right after a read of its own, so that the two see
		 * the same machine: it is shared, and its memory bandwidth moves by a fifth from one
		 * second to the next. Each column is the median over the rounds: the pass's GB/s, the
		 * GB/s of the reads paired with it, and the ratio of each pair. A single best read
		 * set against a single best pass would compare two different moments. */
		double tread[NP][REPS], tpass[NP][REPS], ratio[NP][REPS];
		bool avail[NP];
		for (int p = 0; p < NP; p++)
			avail[p] = sel[p];
		for (int rep = 0; rep < REPS; rep++) {
			for (int p = 0; p < NP; p++) {
				if (!avail[p])
					continue;
				double tr = run_once(b, READ, t, simd);
				double tp = run_once(b, passes[p].kind, t, simd);
				if (tp < 0) {
					avail[p] = false;
					continue;
				}
				tread[p][rep] = tr;
				tpass[p][rep] = tp;
				ratio[p][rep] = tr / tp * view_share(b, passes[p].kind);
			}
		}
		for (int p = 0; p < NP; p++) {
			if (!sel[p])
				continue;
			struct row *w = &rows[nr++];
			w->name = nonfinite ? passes[p].nonfinite_name : passes[p].name;
			w->threads = t;
			w->target = nonfinite ? fmin(NONFINITE_TARGET, passes[p].target)
					      : passes[p].target;
			w->available = avail[p];
			w->gbs = avail[p] ? (double)b->bytes * view_share(b, passes[p].kind) /
						    median(tpass[p], REPS) / 1e9
					  : 0;
			w->read_gbs = avail[p] ? (double)b->bytes / median(tread[p], REPS) / 1e9 : 0;
			w->ratio = avail[p] ? median(ratio[p], REPS) : 0;
		}
	}
	return nr;
}

/* The buffers' amaxes and sums of finite x^2 as the statistics pass finds them, for the what-if
 * rows (untimed). */
static void set_pass_results(struct bench *b)
{
	struct dli_stats_record r;
	dli_cpu_stats_finite_sq(b->f32, DLI_DTYPE_F32, b->n32, NULL, &r, &b->sum_sq32);
	b->amax32 = (float)r.amax;
	b->zeros32 = r.zero_count;
	dli_cpu_stats_finite_sq(b->bf16, DLI_DTYPE_BF16, b->n16, NULL, &r, &b->sum_sq16);
	b->amax16 = (float)r.amax;
	b->zeros16 = r.zero_count;
}

/* Puts a NaN or an infinity at every 1000th element of both buffers (on), or puts back what was
 * there (off). */
static void poke_nonfinite(struct bench *b, bool on)
{
	static const float bad[3] = {NAN, INFINITY, -INFINITY};
	for (int64_t i = 0, k = 0; i < b->n32; i += 1000, k++) {
		if (on) {
			b->saved32[k] = b->f32[i];
			b->f32[i] = bad[k % 3];
		} else {
			b->f32[i] = b->saved32[k];
		}
	}
	for (int64_t i = 0, k = 0; i < b->n16; i += 1000, k++) {
		if (on) {
			uint32_t bits;
			memcpy(&bits, &bad[k % 3], 4);
			b->saved16[k] = b->bf16[i];
			b->bf16[i] = (uint16_t)(bits >> 16);
		} else {
			b->bf16[i] = b->saved16[k];
		}
	}
}

static const char usage[] = "usage: dlinspect bench stats [--json] [--size-mib N] [--threads N] "
			    "[--only NAME[,NAME...]]\n"
			    "  --only: the rows whose pass name contains one of the NAMEs (e.g. "
			    "--only fp8_compare_bf16,rowslice)\n";

/* Whether a pass name contains one of the comma-separated names in `only` (NULL: every pass). */
static bool selected(const char *name, const char *only)
{
	if (!only)
		return true;
	for (const char *p = only; *p;) {
		size_t len = strcspn(p, ",");
		for (const char *q = name; len && strlen(q) >= len; q++)
			if (!strncmp(q, p, len))
				return true;
		p += len + (p[len] == ',');
	}
	return false;
}

int dli_bench_stats(int argc, char **argv)
{
	bool json = false;
	long size_mib = 256, max_threads = 0;
	const char *only = NULL;
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--json")) {
			json = true;
		} else if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
			fputs(usage, stdout);
			return 0;
		} else if (i + 1 < argc && !strcmp(argv[i], "--only")) {
			only = argv[++i];
		} else if (i + 1 < argc && (!strcmp(argv[i], "--size-mib") || !strcmp(argv[i], "--threads"))) {
			char *end;
			long v = strtol(argv[i + 1], &end, 10);
			if (*end || v < 1 || v > 65536) {
				fprintf(stderr, "dlinspect bench stats: bad %s '%s'\n%s", argv[i], argv[i + 1],
					usage);
				return 2;
			}
			*(argv[i][2] == 's' ? &size_mib : &max_threads) = v;
			i++;
		} else {
			fprintf(stderr, "dlinspect bench stats: unknown argument '%s'\n%s", argv[i], usage);
			return 2;
		}
	}
	bool sel[NP];
	int nsel = 0;
	for (int p = 0; p < NP; p++)
		nsel += sel[p] = selected(passes[p].name, only);
	if (!nsel) {
		fprintf(stderr, "dlinspect bench stats: --only '%s' names no pass\n%s", only, usage);
		return 2;
	}
	int all = max_threads ? (int)max_threads : dli_cpu_threads(NULL);
	enum dli_simd simd = dli_cpu_simd(NULL);
	if (simd == DLI_SIMD_AUTO) {
		fprintf(stderr, "dlinspect bench stats: DLINSPECT_SIMD=%s forces a SIMD path this CPU "
			"lacks (it has %s)\n", getenv("DLINSPECT_SIMD") ? getenv("DLINSPECT_SIMD") : "",
			dli_simd_name(dli_simd_detect()));
		return 2;
	}
#ifdef DLI_AVX512_EMULATED
	if (simd == DLI_SIMD_AVX512)
		fprintf(stderr, "dlinspect bench stats: this build emulates AVX-512 "
			"(-Davx512_emulation=true, for tests): its avx512 timings say nothing of a "
			"CPU's\n");
#endif
	size_t bytes = (size_t)size_mib << 20;
	struct bench b = {.n32 = (int64_t)(bytes / 4), .n16 = (int64_t)(bytes / 2), .bytes = bytes};
	b.f32 = aligned_alloc(64, bytes);
	b.bf16 = aligned_alloc(64, bytes);
	b.sums = calloc((size_t)(b.n32 / DLI_STATS_CHUNK + 1), sizeof(float));
	b.saved32 = calloc((size_t)(b.n32 / 1000 + 1), sizeof(float));
	b.saved16 = calloc((size_t)(b.n16 / 1000 + 1), sizeof(uint16_t));
	int rc = 1;
	if (!b.f32 || !b.bf16 || !b.sums || !b.saved32 || !b.saved16) {
		fprintf(stderr, "dlinspect bench stats: cannot allocate 2 x %ld MiB\n", size_mib);
		goto out;
	}
	/* Touch every page before filling, so no run pays for page faults. Values: sums of uniforms
	 * (roughly normal, mean 0), a spread typical of activations. */
	memset(b.f32, 0, bytes);
	memset(b.bf16, 0, bytes);
	for (int64_t i = 0; i < b.n32; i++) {
		uint64_t u = next_u64();
		b.f32[i] = ((float)(u & 0xffff) + (float)((u >> 16) & 0xffff) - 65535.0f) / 32768.0f;
	}
	for (int64_t i = 0; i < b.n16; i++) {
		uint32_t bits;
		float f = b.f32[(i * 7) % b.n32] * 3.0f;
		memcpy(&bits, &f, 4);
		b.bf16[i] = (uint16_t)(bits >> 16);
	}
	b.q32 = qkv_view(b.f32, DLI_DTYPE_F32, b.n32);
	b.q16 = qkv_view(b.bf16, DLI_DTYPE_BF16, b.n16);
	b.r32 = row_view(b.f32, DLI_DTYPE_F32, b.n32);
	b.r16 = row_view(b.bf16, DLI_DTYPE_BF16, b.n16);
	struct dli_stats_record r;
	dli_cpu_stats(b.f32, DLI_DTYPE_F32, b.n32, NULL, &r);
	b.scale32 = dli_fp8_scale((float)r.amax, DLI_DTYPE_F8E4M3, 0);
	dli_cpu_stats(b.bf16, DLI_DTYPE_BF16, b.n16, NULL, &r);
	b.scale16 = dli_fp8_scale((float)r.amax, DLI_DTYPE_F8E4M3, 0);
	set_pass_results(&b);

	/* The passes on the benchmark's data, then on the same data with every 1000th element NaN
	 * or an infinity (in blocks that hold them the passes take other, slower paths), with no
	 * target: what a tensor that has gone bad costs. */
	struct row rows[MAX_ROWS];
	int nr = run_rows(&b, all, simd, false, sel, rows);
	int clean_rows = nr;
	poke_nonfinite(&b, true);
	set_pass_results(&b);
	nr += run_rows(&b, all, simd, true, sel, rows + nr);
	poke_nonfinite(&b, false);
	set_pass_results(&b);
	bool ok = true;
	/* the first rows of each thread count are stats_f32's when every pass runs */
	double read1 = rows[0].read_gbs, stats1 = rows[0].gbs;
	double stats_all = all > 1 ? rows[nsel].gbs : stats1;
	for (int i = 0; i < nr; i++)
		if (rows[i].available && rows[i].target > 0 && rows[i].ratio < rows[i].target)
			ok = false;
	double np = sel[0] ? numpy_gbs(b.n32) : 0;

	char cpu[160];
	cpu_describe(cpu, sizeof(cpu));
	if (json) {
		printf("{\"cpu\": \"");
		json_chars(cpu);
		printf("\", \"size_mib\": %ld, \"simd\": \"%s\", \"reps\": %d, \"prefetch_bytes\": %d, "
		       "\"read_gbs\": {\"1\": %.3f", size_mib, dli_simd_name(simd), REPS,
		       DLI_PREFETCH_BYTES, read1);
		if (all > 1)
			printf(", \"%d\": %.3f", all, rows[nsel].read_gbs);
		printf("}, \"passes\": [");
		for (int i = 0; i < nr; i++) {
			struct row *w = &rows[i];
			printf("%s{\"name\": \"%s\", \"threads\": %d, \"available\": %s", i ? ", " : "",
			       w->name, w->threads, w->available ? "true" : "false");
			if (w->available)
				printf(", \"gbs\": %.3f, \"read_gbs\": %.3f, \"ratio\": %.3f", w->gbs,
				       w->read_gbs, w->ratio);
			if (w->available && w->target > 0)
				printf(", \"target\": %.2f, \"met\": %s", w->target,
				       w->ratio >= w->target ? "true" : "false");
			else if (w->available)
				printf(", \"target\": null, \"met\": null");
			printf("}");
		}
		printf("], \"numpy\": ");
		if (np > 0)
			printf("{\"gbs\": %.3f, \"ratio_1_thread\": %.2f, \"ratio_%d_threads\": %.2f}", np,
			       stats1 / np, all, (all > 1 ? stats_all : stats1) / np);
		else
			printf("null");
		printf(", \"targets_met\": %s}\n", ok ? "true" : "false");
	} else {
		printf("statistics passes over %ld MiB, medians of %d rounds (each pass paired with a read "
		       "just before it), %s, prefetch %d bytes ahead\n",
		       size_mib, REPS, dli_simd_name(simd), DLI_PREFETCH_BYTES);
		printf("  cpu: %s\n", cpu);
		printf("  %-22s %7s %9s %9s %7s %7s\n", "pass", "threads", "GB/s", "read GB/s", "ratio",
		       "target");
		if (sel[kind_index(NV_F32)] || sel[kind_index(NV_BF16)])
			printf("  (nvfp4_compare_*: given the amax and the sum of x^2 of the statistics "
			       "pass the core makes first, as LogNvfp4TensorStats runs it: one read of "
			       "the tensor)\n");
		if (sel[kind_index(FP8_BF16)] || sel[kind_index(MX_BF16)] || sel[kind_index(FB_BF16)])
			printf("  (fp8_, mxfp8_, fp8b_compare_*: given the sum of x^2 of the statistics pass "
			       "the core makes first, as LogFp8TensorStats runs them)\n");
		for (int i = 0; i < nr; i++) {
			struct row *w = &rows[i];
			if (i == clean_rows)
				printf("  the same data with every 1000th element NaN, +inf or -inf:\n");
			if (!w->available) {
				printf("  %-22s %7d   unavailable (not implemented in this build)\n", w->name,
				       w->threads);
				continue;
			}
			double q = w->ratio;
			printf("  %-22s %7d %9.2f %9.2f %7.3f", w->name, w->threads, w->gbs, w->read_gbs, q);
			if (w->target > 0)
				printf("  >= %.2f %s", w->target, q >= w->target ? "met" : "NOT MET");
			printf("\n");
		}
		printf("  the strided views against a plain read of the same view (runs of %d elements "
		       "with gaps: what the access pattern allows here):\n", QKV_H);
		for (int k = 0; k < (all > 1 ? 2 : 1); k++)
			for (enum pass_kind kind = COL_F32; kind <= ROW_BF16; kind++) {
				int t = k ? all : 1;
				if (!sel[kind_index(kind)])
					continue;
				double vg = 0, vr = view_ratio(&b, kind, t, simd, &vg);
				const char *name = kind == COL_F32 ? "stats_f32_colblock"
					: kind == COL_BF16 ? "stats_bf16_colblock"
					: kind == ROW_F32 ? "stats_f32_rowslice" : "stats_bf16_rowslice";
				if (vr > 0)
					printf("  %-22s %7d   view read %6.2f GB/s, pass/view read %.3f\n", name,
					       t, vg, vr);
			}
		if (!sel[0])
			;
		else if (np > 0)
			printf("  numpy (min, max, mean, std, l1, l2, amax, nan/inf/zero counts; one call "
			       "each): %.2f GB/s; ours/numpy %.1fx on 1 thread, %.1fx on %d\n",
			       np, stats1 / np, (all > 1 ? stats_all : stats1) / np, all);
		else
			printf("  numpy: not available (python3 with numpy not importable)\n");
	}
	rc = ok ? 0 : 1;
out:
	free(b.f32);
	free(b.bf16);
	free(b.sums);
	free(b.saved32);
	free(b.saved16);
	return rc;
}
