/* Value histograms: TensorFlow's default exponential bucket limits, the CPU pass that counts a
 * tensor's values into them, and the TensorFlow-style compaction that keeps a histogram small.
 *
 * Finding a bucket without a search: every input dtype decodes exactly to a float, and the bucket
 * of a float is a monotone function of its bits. Slicing the floats by their sign, exponent and top
 * 4 mantissa bits gives 8192 intervals, each narrower (in ratio, at most 1 + 1/16) than the 1.1
 * between neighbouring limits, so an interval holds at most one limit. A table gives the bucket of
 * each interval's lowest value, and one integer comparison with that bucket's limit (as the largest
 * float not above it, in an order-preserving integer form of the bits) says whether a value has
 * passed it. Exact, no floating-point instruction, and blind to FTZ/DAZ. */
#include <errno.h>
#include <float.h>
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "cpu-private.h"

/* Positive limits 1e-12 * 1.1^k for k = 0 .. DLI_HIST_POS - 1: all below 1e20 (the last ~9.92e19). */
#define DLI_HIST_POS 774
#define DLI_HIST_ZERO (DLI_HIST_POS + 1) /* index of the limit 0 */
#define DLI_HIST_LAST (DLI_HISTOGRAM_BUCKETS - 1)
#define DLI_HIST_NAN UINT16_MAX         /* "no bucket" in the 16- and 8-bit tables */

_Static_assert(DLI_HISTOGRAM_BUCKETS == 2 * (DLI_HIST_POS + 1) + 1, "bucket count");

/* Tensors up to this many elements stay on the calling thread (as the statistics pass does). */
#define DLI_HIST_THREAD_MIN ((int64_t)4 << 20)

static pthread_once_t tables_once = PTHREAD_ONCE_INIT;
static double limits[DLI_HISTOGRAM_BUCKETS];
static uint16_t key_bucket[1u << 13];             /* bucket of each interval's lowest value */
static int32_t key_limit[DLI_HISTOGRAM_BUCKETS]; /* ordered(largest float <= limits[k]) */
static uint16_t f16_bucket[1u << 16];            /* per IEEE half bit pattern */
static uint16_t fp8_bucket[2][256];              /* [0]: E4M3, [1]: E5M2 */

/* The float's bits as a signed integer whose order is the floats' order (-0 just below +0). */
static inline int32_t ordered(uint32_t b)
{
	return (int32_t)(b ^ ((uint32_t)((int32_t)b >> 31) & 0x7fffffffu));
}

static uint32_t bits_of(float f)
{
	uint32_t b;
	memcpy(&b, &f, sizeof b);
	return b;
}

/* The bucket of x by binary search: the first limit >= x; +inf goes to the last bucket. */
static int search_bucket(double x)
{
	int lo = 0, hi = DLI_HIST_LAST;
	if (!(x <= limits[DLI_HIST_LAST]))
		return DLI_HIST_LAST;
	while (lo < hi) {
		int mid = (lo + hi) / 2;
		if (limits[mid] >= x)
			hi = mid;
		else
			lo = mid + 1;
	}
	return lo;
}

/* The largest float <= x (x finite; -inf below -FLT_MAX). */
static float float_at_or_below(double x)
{
	if (x > FLT_MAX)
		return FLT_MAX;
	if (x < -FLT_MAX)
		return -INFINITY;
	float f = (float)x;
	return (double)f > x ? nextafterf(f, -INFINITY) : f;
}

static inline unsigned bucket_of_bits(uint32_t b);

static void tables_build(void)
{
	/* Repeated multiplication, not pow(): the same doubles as TensorFlow's InitDefaultBuckets. */
	double v = 1.0e-12;
	for (int k = 0; k < DLI_HIST_POS; k++, v *= 1.1) {
		limits[DLI_HIST_ZERO + 1 + k] = v;
		limits[DLI_HIST_ZERO - 1 - k] = -v;
	}
	limits[0] = -DBL_MAX;
	limits[DLI_HIST_ZERO] = 0.0;
	limits[DLI_HIST_LAST] = DBL_MAX;

	for (int k = 0; k < DLI_HISTOGRAM_BUCKETS; k++) {
		float f = k == DLI_HIST_ZERO ? 0.0f : float_at_or_below(limits[k]);
		key_limit[k] = ordered(bits_of(f));
	}
	for (uint32_t key = 0; key < (1u << 13); key++) {
		uint32_t b = key << 19;
		if (((b >> 23) & 0xffu) == 0xffu)
			continue; /* infinities and NaN never reach the table */
		if (b >> 31)
			b |= 0x7ffffu; /* a negative interval's lowest value has the largest magnitude */
		float lowest;
		memcpy(&lowest, &b, sizeof lowest);
		key_bucket[key] = (uint16_t)search_bucket(lowest);
	}

	for (uint32_t h = 0; h < (1u << 16); h++) {
		uint32_t e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
		float mag = e == 31 ? (m ? NAN : INFINITY)
			    : e == 0 ? ldexpf((float)m, -24)
				     : ldexpf((float)(m | 0x400u), (int)e - 25);
		f16_bucket[h] = isnan(mag) ? DLI_HIST_NAN
					   : (uint16_t)bucket_of_bits(bits_of(h >> 15 ? -mag : mag));
	}
	for (int b = 0; b < 256; b++) {
		float e4 = dli_fp8_decode((uint8_t)b, DLI_DTYPE_F8E4M3);
		float e5 = dli_fp8_decode((uint8_t)b, DLI_DTYPE_F8E5M2);
		fp8_bucket[0][b] = isnan(e4) ? DLI_HIST_NAN : (uint16_t)bucket_of_bits(bits_of(e4));
		fp8_bucket[1][b] = isnan(e5) ? DLI_HIST_NAN : (uint16_t)bucket_of_bits(bits_of(e5));
	}
}

const double *dli_histogram_limits(void)
{
	pthread_once(&tables_once, tables_build);
	return limits;
}

/* The bucket of a non-NaN float given by its bits. */
static inline unsigned bucket_of_bits(uint32_t b)
{
	if ((b & 0x7f800000u) == 0x7f800000u)
		return b >> 31 ? 0 : DLI_HIST_LAST;
	unsigned k = key_bucket[b >> 19];
	return k + (ordered(b) > key_limit[k]);
}

/* ---- The pass ---- */

static void count_f32(const unsigned char *p, int64_t n, uint64_t *c)
{
	for (int64_t i = 0; i < n; i++) {
		uint32_t b;
		memcpy(&b, p + 4 * i, 4);
		if ((b & 0x7fffffffu) > 0x7f800000u)
			continue; /* NaN: counted by the statistics pass, in no bucket */
		c[bucket_of_bits(b)]++;
	}
}

static void count_bf16(const unsigned char *p, int64_t n, uint64_t *c)
{
	for (int64_t i = 0; i < n; i++) {
		uint16_t h;
		memcpy(&h, p + 2 * i, 2);
		uint32_t b = (uint32_t)h << 16;
		if ((b & 0x7fffffffu) > 0x7f800000u)
			continue;
		c[bucket_of_bits(b)]++;
	}
}

static void count_table16(const unsigned char *p, int64_t n, const uint16_t *table, uint64_t *c)
{
	for (int64_t i = 0; i < n; i++) {
		uint16_t h;
		memcpy(&h, p + 2 * i, 2);
		unsigned k = table[h];
		if (k != DLI_HIST_NAN)
			c[k]++;
	}
}

static void count_table8(const unsigned char *p, int64_t n, const uint16_t *table, uint64_t *c)
{
	for (int64_t i = 0; i < n; i++) {
		unsigned k = table[p[i]];
		if (k != DLI_HIST_NAN)
			c[k]++;
	}
}

static void count(const unsigned char *p, enum dli_dtype dt, int64_t n, uint64_t *c)
{
	switch (dt) {
	case DLI_DTYPE_F32: count_f32(p, n, c); break;
	case DLI_DTYPE_BF16: count_bf16(p, n, c); break;
	case DLI_DTYPE_F16: count_table16(p, n, f16_bucket, c); break;
	case DLI_DTYPE_F8E4M3: count_table8(p, n, fp8_bucket[0], c); break;
	case DLI_DTYPE_F8E5M2: count_table8(p, n, fp8_bucket[1], c); break;
	default: break;
	}
}

struct hist_pass {
	const unsigned char *data;
	enum dli_dtype dt;
	int64_t n;
	uint64_t *counts; /* one array of DLI_HISTOGRAM_BUCKETS per worker */
};

/* Counts add exactly, so chunks go into their worker's array in any order. */
static void hist_chunk(void *arg, int64_t c, int worker)
{
	const struct hist_pass *ps = arg;
	int64_t first = c * DLI_STATS_CHUNK;
	int64_t m = ps->n - first < DLI_STATS_CHUNK ? ps->n - first : DLI_STATS_CHUNK;
	count(ps->data + (size_t)first * dli_dtype_size(ps->dt), ps->dt, m,
	      ps->counts + (size_t)worker * DLI_HISTOGRAM_BUCKETS);
}

int dli_cpu_histogram(const void *data, enum dli_dtype dtype, int64_t n, const struct dli_cpu_options *o,
		      uint64_t *counts)
{
	if (!counts)
		return -EINVAL;
	memset(counts, 0, DLI_HISTOGRAM_BUCKETS * sizeof *counts);
	int rc = dli_cpu_check_input(data, dtype, n);
	if (rc)
		return rc;
	if (n == 0)
		return 0;
	pthread_once(&tables_once, tables_build);

	int threads = n > DLI_HIST_THREAD_MIN ? dli_cpu_threads(o) : 1;
	int64_t n_chunks = (n + DLI_STATS_CHUNK - 1) / DLI_STATS_CHUNK;
	if (threads > n_chunks)
		threads = (int)n_chunks;
	/* Per-worker arrays (12 KiB each); without memory for them the pass runs on this thread. */
	uint64_t *per = threads > 1 ? calloc((size_t)threads * DLI_HISTOGRAM_BUCKETS, sizeof *per) : NULL;
	if (!per) {
		count(data, dtype, n, counts);
		return 0;
	}
	struct hist_pass ps = {.data = data, .dt = dtype, .n = n, .counts = per};
	dli_parallel_for(n_chunks, threads, hist_chunk, &ps);
	for (int w = 0; w < threads; w++)
		for (int k = 0; k < DLI_HISTOGRAM_BUCKETS; k++)
			counts[k] += per[(size_t)w * DLI_HISTOGRAM_BUCKETS + k];
	free(per);
	return 0;
}

size_t dli_histogram_compact(const uint64_t *counts, double *limits_out, double *counts_out)
{
	const double *lim = dli_histogram_limits();
	size_t n = 0;
	for (int k = 0; k < DLI_HISTOGRAM_BUCKETS; k++) {
		/* A run of empty buckets becomes one empty bucket ending where the run ends, so every
		 * bucket still starts at its predecessor's limit. */
		if (!counts[k] && n && !counts_out[n - 1]) {
			limits_out[n - 1] = lim[k];
			continue;
		}
		limits_out[n] = lim[k];
		counts_out[n] = (double)counts[k];
		n++;
	}
	return n;
}
