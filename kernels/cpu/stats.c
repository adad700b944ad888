/* The CPU statistics pass: one read of a tensor fills every field of a record up to m2. This file
 * holds the scalar path (double throughout: the reference for the SIMD paths and their fallback
 * for unusual blocks) and the driver that splits a tensor into chunks, hands them to threads and
 * merges their records in chunk order.
 *
 * Why chunk order: a chunk's record depends only on its data, and the final record is the left
 * fold of the chunk records in index order whatever thread computed them, so a result does not
 * change with the thread count or the scheduling (bit for bit, for a given SIMD path). */
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#ifdef DLI_HAVE_X86_SIMD
#include <xmmintrin.h>
#endif

#include "cpu-private.h"
#include "runs-private.h"

/* Tensors up to this many elements stay on the calling thread: waking the pool costs tens of
 * microseconds, which a pass over a few MiB only just pays back. */
#define DLI_STATS_THREAD_MIN ((int64_t)4 << 20)

/* ---- Decoding one element ---- */

static pthread_once_t fp8_once = PTHREAD_ONCE_INIT;
static float fp8_table[2][256]; /* [0]: E4M3 (fn), [1]: E5M2 */

static float f16_to_float(uint16_t h)
{
	uint32_t sign = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu, bits;
	if (e == 0) {
		/* Subnormal (or zero): m * 2^-24, exact in float. */
		float f = (float)m * 0x1p-24f;
		return sign ? -f : f;
	}
	if (e == 31)
		bits = sign | 0x7f800000u | (m << 13);
	else
		bits = sign | ((e + 112) << 23) | (m << 13);
	float f;
	memcpy(&f, &bits, sizeof(f));
	return f;
}

static void fp8_build(void)
{
	for (int b = 0; b < 256; b++) {
		float sign = b & 0x80 ? -1.0f : 1.0f;
		int e = (b >> 3) & 0xf, m = b & 7;
		/* E4M3 fn: bias 7, subnormals m * 2^-9, S.1111.111 the only NaN, no infinity. */
		if ((b & 0x7f) == 0x7f)
			fp8_table[0][b] = NAN;
		else if (e == 0)
			fp8_table[0][b] = sign * ldexpf((float)m, -9);
		else
			fp8_table[0][b] = sign * ldexpf(1.0f + (float)m / 8.0f, e - 7);
		/* E5M2 is the upper byte of an IEEE half: same infinities and NaNs. */
		fp8_table[1][b] = f16_to_float((uint16_t)(b << 8));
	}
}

/* Element i, decoded to float (exactly: every input format is a subset of float). Loads go through
 * memcpy because the data may have any alignment. */
static inline float load_elem(const void *p, enum dli_dtype dt, int64_t i)
{
	const unsigned char *b = p;
	switch (dt) {
	case DLI_DTYPE_F32: {
		float f;
		memcpy(&f, b + 4 * i, 4);
		return f;
	}
	case DLI_DTYPE_BF16: {
		uint16_t h;
		memcpy(&h, b + 2 * i, 2);
		uint32_t bits = (uint32_t)h << 16;
		float f;
		memcpy(&f, &bits, 4);
		return f;
	}
	case DLI_DTYPE_F16: {
		uint16_t h;
		memcpy(&h, b + 2 * i, 2);
		return f16_to_float(h);
	}
	case DLI_DTYPE_F8E4M3:
		return fp8_table[0][b[i]];
	case DLI_DTYPE_F8E5M2:
		return fp8_table[1][b[i]];
	default:
		return NAN;
	}
}

/* ---- The scalar path ---- */

/* Two passes over a block (it is in L1 for the second), in double: sums, counts and extrema first,
 * then deviations from the block mean, with the correction term sum(d) that absorbs the mean's
 * own rounding ("corrected two-pass", Chan, Golub and LeVeque 1983). NaN and infinities flow
 * through the sums exactly as in a naive double loop; the extrema skip NaN (nan_count says one
 * was seen, and the finalizer turns min/max into NaN). */
static inline void block_scalar(const void *p, enum dli_dtype dt, int64_t n, struct dli_stats_record *r)
{
	uint64_t nan = 0, inf = 0, zero = 0;
	double mn = INFINITY, mx = -INFINITY, mnz = INFINITY, s = 0, sa = 0, sq = 0;
	for (int64_t i = 0; i < n; i++) {
		double x = load_elem(p, dt, i), a = fabs(x);
		s += x;
		sa += a;
		sq += x * x;
		if (x != x) {
			nan++;
			continue;
		}
		inf += a == INFINITY;
		if (x == 0)
			zero++;
		else if (a < mnz)
			mnz = a;
		if (x < mn)
			mn = x;
		if (x > mx)
			mx = x;
	}
	double mean = s / (double)n, sd = 0, sdd = 0;
	for (int64_t i = 0; i < n; i++) {
		double d = (double)load_elem(p, dt, i) - mean;
		sd += d;
		sdd += d * d;
	}
	double m2 = sdd - sd * sd / (double)n;
	r->count = (uint64_t)n;
	r->nan_count = nan;
	r->inf_count = inf;
	r->zero_count = zero;
	r->min = mn;
	r->max = mx;
	r->amax = (uint64_t)n > nan ? fmax(mx, -mn) : 0;
	r->min_nonzero_abs = mnz;
	r->sum = s;
	r->sum_abs = sa;
	r->sum_sq = sq;
	r->mean = mean;
	/* sum(d)^2 / n <= sum(d^2) in exact arithmetic; rounding may cross it when all are equal. */
	r->m2 = m2 < 0 ? 0 : m2;
}

void dli_stats_block_scalar(const void *p, enum dli_dtype dt, int64_t n, struct dli_stats_record *r)
{
	dli_stats_record_init(r);
	if (n <= 0)
		return;
	/* One instance per dtype, so the decode switch folds away inside the loops. */
	switch (dt) {
	case DLI_DTYPE_F32: block_scalar(p, DLI_DTYPE_F32, n, r); break;
	case DLI_DTYPE_BF16: block_scalar(p, DLI_DTYPE_BF16, n, r); break;
	case DLI_DTYPE_F16: block_scalar(p, DLI_DTYPE_F16, n, r); break;
	case DLI_DTYPE_F8E4M3: block_scalar(p, DLI_DTYPE_F8E4M3, n, r); break;
	case DLI_DTYPE_F8E5M2: block_scalar(p, DLI_DTYPE_F8E5M2, n, r); break;
	default: break;
	}
}

void dli_stats_chunk_scalar(const void *p, enum dli_dtype dt, int64_t n, struct dli_stats_record *r)
{
	size_t es = dli_dtype_size(dt);
	struct dli_stats_record b;
	dli_stats_record_init(r);
	for (int64_t i = 0; i < n; i += DLI_STATS_BLOCK) {
		int64_t m = n - i < DLI_STATS_BLOCK ? n - i : DLI_STATS_BLOCK;
		dli_stats_block_scalar((const char *)p + (size_t)i * es, dt, m, &b);
		dli_stats_merge(r, &b);
	}
}

double dli_stats_finite_sum_sq_scalar(const void *p, enum dli_dtype dt, int64_t n)
{
	double sq = 0;
	for (int64_t i = 0; i < n; i++) {
		double x = load_elem(p, dt, i);
		if (isfinite(x))
			sq += x * x;
	}
	return sq;
}

bool dli_stats_dblock_record(const struct dli_stats_dblock *b, float small, float large,
			     struct dli_stats_record *r)
{
	double dn = (double)b->n, m2 = b->sdd - b->sd * b->sd / dn;
	dli_stats_record_init(r);
	r->count = b->n;
	r->nan_count = b->nan;
	r->inf_count = b->inf;
	r->zero_count = b->zeros;
	r->min = b->min;
	r->max = b->max;
	r->amax = b->n > b->nan ? fmax(b->max, -b->min) : 0;
	r->min_nonzero_abs = b->min_nonzero_abs;
	/* An infinity in sd makes the sum that infinity, both of them or a NaN make it NaN. */
	r->sum = dn * b->shift + b->sd;
	r->sum_abs = b->sum_abs;
	r->sum_sq = b->sum_sq;
	r->mean = r->sum / dn;
	r->m2 = m2 < 0 ? 0 : m2; /* NaN (from NaN or an infinity in sd) stays NaN */
	return b->nan || b->inf || r->amax > large || (r->amax > 0 && r->amax < small);
}

void dli_stats_sums_record(const struct dli_stats_sums *a, int64_t n, float shift,
			   struct dli_stats_record *r)
{
	double dn = (double)n, m2 = a->sdd - a->sd * a->sd / dn;
	dli_stats_record_init(r);
	r->count = (uint64_t)n;
	r->zero_count = a->zc;
	r->min = a->mn;
	r->max = a->mx;
	r->amax = a->mx > -a->mn ? a->mx : -a->mn;
	r->min_nonzero_abs = a->mnz;
	r->sum = dn * shift + a->sd;
	r->sum_abs = a->sa;
	r->mean = r->sum / dn;
	/* sum(d)^2 / n <= sum(d^2) in exact arithmetic; rounding may cross it when all are equal. */
	r->m2 = m2 < 0 ? 0 : m2;
	/* Every term is positive, so this sum of squares has no cancellation to fear. */
	r->sum_sq = r->m2 + dn * r->mean * r->mean;
}

/* ---- The driver ---- */

/* What one chunk gave: its record, and its sum of x^2 over the finite elements (NaN where the
 * path does not give one). */
struct chunk_result {
	struct dli_stats_record rec;
	double finite_sq;
};

/* A pass over n elements in chunks of DLI_STATS_CHUNK: of the contiguous data (chunk, or
 * chunk_finite where the path has one) or of the view v (runs, the same chunk boundaries in the
 * view's element order, so the records and their merge are those of a contiguous copy). */
struct pass {
	int64_t n;
	const char *data;
	enum dli_dtype dt;
	dli_stats_chunk_fn chunk;
	dli_stats_chunk_finite_fn chunk_finite; /* NULL, or used in place of chunk */
	const struct dli_cpu_runs *v;           /* set for a view */
	dli_stats_runs_fn runs;
	struct chunk_result *results; /* one per chunk, or NULL: then every chunk writes `one` */
	struct chunk_result one;
};

/* One chunk, with subnormals honoured: a host (or a framework's "flush denormal" switch) may have
 * set FTZ/DAZ on this thread, which would turn subnormal inputs into zeros and skew min, zero%
 * and the range. The thread's own setting is restored before returning. A view's block spanning
 * runs is copied to scratch on this thread's stack. */
static void pass_chunk(void *arg, int64_t c, int worker)
{
	struct pass *ps = arg;
	int64_t first = c * DLI_STATS_CHUNK;
	int64_t m = ps->n - first < DLI_STATS_CHUNK ? ps->n - first : DLI_STATS_CHUNK;
	struct chunk_result *res = ps->results ? &ps->results[c] : &ps->one;
	(void)worker;
#ifdef DLI_HAVE_X86_SIMD
	unsigned csr = _mm_getcsr();
	_mm_setcsr(csr & ~0x8040u); /* FTZ (bit 15) and DAZ (bit 6) off */
#endif
	res->finite_sq = NAN;
	if (ps->v) {
		_Alignas(64) unsigned char scratch[DLI_RUNS_SCRATCH];
		ps->runs(ps->v, first, m, scratch, &res->rec);
	} else {
		const char *p = ps->data + (size_t)first * dli_dtype_size(ps->dt);
		if (ps->chunk_finite)
			ps->chunk_finite(p, ps->dt, m, &res->rec, &res->finite_sq);
		else
			ps->chunk(p, ps->dt, m, &res->rec);
	}
#ifdef DLI_HAVE_X86_SIMD
	_mm_setcsr(csr);
#endif
}

/* The chunk kernels of o's SIMD path into ps; -ENOTSUP for a path this CPU or build lacks. Only
 * the AVX2 path gives a finite sum (chunk_finite); the AVX-512 pass, whose bf16 blocks with NaN
 * go through the same integer pass without the squares, gives none until it can be measured. */
static int pick(const struct dli_cpu_options *o, struct pass *ps)
{
	switch (dli_cpu_simd(o)) {
	case DLI_SIMD_SCALAR:
		ps->chunk = dli_stats_chunk_scalar;
		ps->runs = dli_stats_runs_scalar;
		return 0;
#ifdef DLI_HAVE_X86_SIMD
	case DLI_SIMD_AVX2:
		ps->chunk = dli_stats_chunk_avx2;
		ps->chunk_finite = dli_stats_chunk_finite_avx2;
		ps->runs = dli_stats_runs_avx2;
		return 0;
	case DLI_SIMD_AVX512:
		ps->chunk = dli_stats_chunk_avx512;
		ps->runs = dli_stats_runs_avx512;
		return 0;
#endif
	default:
		return -ENOTSUP;
	}
}

/* Runs the pass (ps->n > 0) into out, on o's threads for a large one; *finite_sq: the chunks'
 * sums of x^2 over their finite elements, added in chunk order as their records merge. */
static void run_pass(struct pass *ps, const struct dli_cpu_options *o, struct dli_stats_record *out,
		     double *finite_sq)
{
	pthread_once(&fp8_once, fp8_build);
	int64_t n_chunks = (ps->n + DLI_STATS_CHUNK - 1) / DLI_STATS_CHUNK;
	int threads = ps->n > DLI_STATS_THREAD_MIN ? dli_cpu_threads(o) : 1;
	/* Per-chunk records (a few hundred bytes per MiB of input) let threads finish in any order;
	 * without memory for them the pass runs on this thread and gives the same result. */
	struct chunk_result *results = NULL;
	*finite_sq = 0;
	if (threads > 1)
		results = malloc((size_t)n_chunks * sizeof(*results));
	if (results) {
		ps->results = results;
		dli_parallel_for(n_chunks, threads, pass_chunk, ps);
		for (int64_t c = 0; c < n_chunks; c++) {
			dli_stats_merge(out, &results[c].rec);
			*finite_sq += results[c].finite_sq;
		}
		free(results);
		ps->results = NULL;
		return;
	}
	for (int64_t c = 0; c < n_chunks; c++) {
		pass_chunk(ps, c, 0);
		dli_stats_merge(out, &ps->one.rec);
		*finite_sq += ps->one.finite_sq;
	}
}

int dli_cpu_check_input(const void *data, enum dli_dtype dtype, int64_t n)
{
	switch (dtype) {
	case DLI_DTYPE_F32: case DLI_DTYPE_F16: case DLI_DTYPE_BF16:
	case DLI_DTYPE_F8E4M3: case DLI_DTYPE_F8E5M2:
		break;
	default:
		return -EINVAL;
	}
	return n < 0 || (n > 0 && !data) ? -EINVAL : 0;
}

int dli_cpu_stats_finite_sq(const void *data, enum dli_dtype dtype, int64_t n,
			    const struct dli_cpu_options *o, struct dli_stats_record *out,
			    double *finite_sq)
{
	double chunks_sq = 0;
	if (finite_sq)
		*finite_sq = NAN;
	if (!out || !finite_sq)
		return -EINVAL;
	dli_stats_record_init(out);
	int rc = dli_cpu_check_input(data, dtype, n);
	if (rc)
		return rc;
	struct pass ps = {.n = n, .data = data, .dt = dtype};
	rc = pick(o, &ps);
	if (rc)
		return rc;
	if (n > 0)
		run_pass(&ps, o, out, &chunks_sq);
	/* Without NaN or an infinity, sum_sq is the sum (the same double, whatever the path). */
	*finite_sq = isfinite(out->sum_sq) ? out->sum_sq : isfinite(chunks_sq) ? chunks_sq : NAN;
	return 0;
}

int dli_cpu_stats(const void *data, enum dli_dtype dtype, int64_t n, const struct dli_cpu_options *o,
		  struct dli_stats_record *out)
{
	double unused;
	return dli_cpu_stats_finite_sq(data, dtype, n, o, out, &unused);
}

/* ---- Strided views (runs-private.h): the driver above, over runs ---- */

void dli_stats_runs_scalar(const struct dli_cpu_runs *v, int64_t first, int64_t n,
			   unsigned char *scratch, struct dli_stats_record *r)
{
	struct dli_stats_record b;
	struct dli_runs_cursor c;
	int64_t pf; /* the scalar loop does not prefetch */
	dli_runs_cursor_init(&c, v, first);
	dli_stats_record_init(r);
	for (int64_t i = 0; i < n; i += DLI_STATS_BLOCK) {
		int64_t m = n - i < DLI_STATS_BLOCK ? n - i : DLI_STATS_BLOCK;
		dli_stats_block_scalar(dli_runs_cursor_block(&c, m, scratch, &pf), v->dtype, m, &b);
		dli_stats_merge(r, &b);
	}
}

int dli_cpu_stats_runs(const struct dli_cpu_runs *v, const struct dli_cpu_options *o,
		       struct dli_stats_record *out)
{
	if (!out)
		return -EINVAL;
	dli_stats_record_init(out);
	if (!v || v->run_len < 1 || v->n < 0 || v->n % v->run_len ||
	    v->inner != (int64_t)dli_dtype_size(v->dtype))
		return -EINVAL;
	int rc = dli_cpu_check_input(v->base, v->dtype, v->n);
	if (rc)
		return rc;
	struct pass ps = {.n = v->n, .v = v};
	double unused;
	rc = pick(o, &ps);
	if (rc || v->n == 0)
		return rc;
	run_pass(&ps, o, out, &unused);
	return 0;
}
