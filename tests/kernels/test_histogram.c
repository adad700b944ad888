/* The value-histogram kernel: its bucket limits are TensorFlow's default ones, every value lands in
 * the bucket a naive binary search over the limits (in double) gives it (every value of the 16- and
 * 8-bit dtypes; for f32 the neighbours of every limit, the ends of every table interval, a sweep of
 * the bit patterns, and random data with subnormals, +-0, +-inf and NaN), threads change nothing, and
 * the TensorFlow-style compaction keeps every count at its place. */
#include <errno.h>
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#ifdef DLI_HAVE_X86_SIMD
#include <xmmintrin.h>
#endif

#include "check.h"
#include "kernels-private.h"

#define NB DLI_HISTOGRAM_BUCKETS

/* ---- The reference ---- */

static double ref_limits[NB];

/* TensorFlow's InitDefaultBucketsInner, transcribed: 1e-12 growing by 10% while below 1e20, then
 * DBL_MAX; mirrored for the negatives; 0 in the middle. */
static int ref_build(void)
{
	double pos[NB];
	int n = 0;
	for (double v = 1.0e-12; v < 1.0e20 && n < NB; v *= 1.1)
		pos[n++] = v;
	pos[n++] = DBL_MAX;
	int k = 0;
	for (int i = n - 1; i >= 0; i--)
		ref_limits[k++] = -pos[i];
	ref_limits[k++] = 0.0;
	for (int i = 0; i < n; i++)
		ref_limits[k++] = pos[i];
	return k;
}

/* The first limit >= x (bucket k holds (limit[k-1], limit[k]]); +inf in the last bucket; -1 for
 * NaN. A plain binary search in double. */
static int ref_bucket(double x)
{
	if (isnan(x))
		return -1;
	int lo = 0, hi = NB; /* answer in [lo, hi]; hi = NB means "above every limit" */
	while (lo < hi) {
		int mid = lo + (hi - lo) / 2;
		if (ref_limits[mid] >= x)
			hi = mid;
		else
			lo = mid + 1;
	}
	return lo == NB ? NB - 1 : lo;
}

static float from_bits(uint32_t b)
{
	float f;
	memcpy(&f, &b, sizeof f);
	return f;
}

/* ---- Helpers ---- */

#include "test-rng.h"

static double uniform(void)
{
	return (double)(next_u64() >> 11) * 0x1p-53;
}

/* The bucket the kernel puts one element in, or -1 when it counts it nowhere; -2 when it counts
 * something odd (several buckets, or an error). */
static int kernel_bucket(const void *elem, enum dli_dtype dt)
{
	static uint64_t counts[NB];
	if (dli_cpu_histogram(elem, dt, 1, NULL, counts))
		return -2;
	int found = -1;
	for (int k = 0; k < NB; k++) {
		if (!counts[k])
			continue;
		if (counts[k] != 1 || found >= 0)
			return -2;
		found = k;
	}
	return found;
}

static int failures_shown;

static void check_f32_value(float x)
{
	int want = ref_bucket(x), got = kernel_bucket(&x, DLI_DTYPE_F32);
	check_count++;
	if (got != want) {
		check_failures++;
		uint32_t b;
		memcpy(&b, &x, sizeof b);
		if (failures_shown++ < 20)
			fprintf(stderr, "f32 %a (bits %08x): bucket %d, reference %d\n", (double)x,
				(unsigned)b, got, want);
	}
}

/* counts of x[0..n) by the reference. */
static void ref_counts_f32(const float *x, size_t n, uint64_t *counts)
{
	memset(counts, 0, NB * sizeof *counts);
	for (size_t i = 0; i < n; i++) {
		int k = ref_bucket(x[i]);
		if (k >= 0)
			counts[k]++;
	}
}

static bool same_counts(const uint64_t *a, const uint64_t *b, const char *what)
{
	check_count++;
	for (int k = 0; k < NB; k++) {
		if (a[k] != b[k]) {
			check_failures++;
			fprintf(stderr, "%s: bucket %d (limit %.17g) holds %llu, reference %llu\n", what, k,
				ref_limits[k], (unsigned long long)a[k], (unsigned long long)b[k]);
			return false;
		}
	}
	return true;
}

/* ---- Tests ---- */

static void test_limits(void)
{
	CHECK_INT(ref_build(), NB);
	const double *lim = dli_histogram_limits();
	CHECK(lim != NULL);
	if (!lim)
		return;
	CHECK(lim == dli_histogram_limits()); /* computed once */
	CHECK(!memcmp(lim, ref_limits, sizeof ref_limits));
	CHECK(lim[0] == -DBL_MAX && lim[NB - 1] == DBL_MAX);
	CHECK(lim[NB / 2] == 0.0 && !signbit(lim[NB / 2]));
	CHECK(lim[NB / 2 + 1] == 1e-12 && lim[NB / 2 - 1] == -1e-12);
	CHECK(lim[NB - 2] < 1e20 && lim[NB - 2] * 1.1 >= 1e20);
	for (int k = 1; k < NB; k++)
		CHECK(lim[k - 1] < lim[k]);
	for (int k = 0; k < NB; k++)
		CHECK(lim[k] == -lim[NB - 1 - k]);
	/* The same points as 1e-12 * 1.1^k, up to the rounding of 774 multiplications. */
	bool close = true;
	for (int k = 0; k < NB / 2 - 1; k++)
		close = close && fabs(lim[NB / 2 + 1 + k] / (1e-12 * pow(1.1, k)) - 1) < 1e-12;
	CHECK(close);
}

static void test_errors(void)
{
	uint64_t counts[NB];
	float x = 1;
	counts[5] = 7;
	CHECK_INT(dli_cpu_histogram(&x, DLI_DTYPE_F64, 1, NULL, counts), -EINVAL);
	CHECK(counts[5] == 0); /* zeroed even on a refusal */
	CHECK_INT(dli_cpu_histogram(&x, DLI_DTYPE_I32, 1, NULL, counts), -EINVAL);
	CHECK_INT(dli_cpu_histogram(&x, DLI_DTYPE_F32, -1, NULL, counts), -EINVAL);
	CHECK_INT(dli_cpu_histogram(NULL, DLI_DTYPE_F32, 3, NULL, counts), -EINVAL);
	CHECK_INT(dli_cpu_histogram(&x, DLI_DTYPE_F32, 1, NULL, NULL), -EINVAL);
	counts[9] = 1;
	CHECK_INT(dli_cpu_histogram(NULL, DLI_DTYPE_F32, 0, NULL, counts), 0);
	uint64_t total = 0;
	for (int k = 0; k < NB; k++)
		total += counts[k];
	CHECK(total == 0);
}

/* Special values, both neighbours of every limit, and the ends and middle of every interval of
 * the kernel's table (sign, exponent, top 4 mantissa bits), where its one-comparison fix-up could
 * go wrong. */
static void test_f32_edges(void)
{
	static const uint32_t specials[] = {
		0x00000000u, 0x80000000u, /* +-0 */
		0x00000001u, 0x80000001u, 0x007fffffu, 0x807fffffu, /* subnormals */
		0x00800000u, 0x80800000u, 0x7f7fffffu, 0xff7fffffu, /* FLT_MIN, FLT_MAX */
		0x7f800000u, 0xff800000u, /* +-inf */
		0x7fc00000u, 0xffc00000u, 0x7f800001u, 0xff800001u, 0x7fffffffu, /* NaNs */
		0x2b8cbccbu, /* ~1e-12 */
	};
	for (size_t i = 0; i < sizeof specials / sizeof specials[0]; i++)
		check_f32_value(from_bits(specials[i]));

	for (int k = 1; k < NB - 1; k++) {
		float f = (float)ref_limits[k];
		float lo = f, hi = f;
		for (int step = 0; step < 3; step++) {
			check_f32_value(lo);
			check_f32_value(hi);
			lo = nextafterf(lo, -INFINITY);
			hi = nextafterf(hi, INFINITY);
		}
	}

	for (uint32_t key = 0; key < (1u << 13); key++) {
		uint32_t b = key << 19;
		check_f32_value(from_bits(b));
		check_f32_value(from_bits(b | 0x7ffffu));
		check_f32_value(from_bits(b | 0x40000u));
		check_f32_value(from_bits(b | 1u));
	}
}

/* Every bit pattern of the 16-bit and 8-bit dtypes, one at a time, against the reference on its
 * value (decoded here independently of the kernels). */
static double decode_f16(uint16_t h)
{
	int e = (h >> 10) & 0x1f, m = h & 0x3ff;
	double mag = e == 31 ? (m ? NAN : INFINITY) : e == 0 ? ldexp(m, -24) : ldexp(1024 + m, e - 25);
	return h >> 15 ? -mag : mag;
}

static double decode_e4m3(uint8_t b)
{
	int e = (b >> 3) & 0xf, m = b & 7;
	double mag = (b & 0x7f) == 0x7f ? NAN : e == 0 ? ldexp(m, -9) : ldexp(8 + m, e - 10);
	return b >> 7 ? -mag : mag;
}

static double decode_e5m2(uint8_t b)
{
	return decode_f16((uint16_t)(b << 8));
}

static void check_elem(const void *elem, enum dli_dtype dt, double value, const char *dtname,
		       unsigned bits)
{
	int want = ref_bucket(value), got = kernel_bucket(elem, dt);
	check_count++;
	if (got != want) {
		check_failures++;
		if (failures_shown++ < 20)
			fprintf(stderr, "%s 0x%x (%g): bucket %d, reference %d\n", dtname, bits, value,
				got, want);
	}
}

static void test_small_dtypes_exhaustive(void)
{
	for (uint32_t b = 0; b < 65536; b++) {
		uint16_t h = (uint16_t)b;
		uint32_t f32bits = b << 16;
		check_elem(&h, DLI_DTYPE_BF16, from_bits(f32bits), "bf16", b);
		check_elem(&h, DLI_DTYPE_F16, decode_f16(h), "f16", b);
	}
	for (uint32_t b = 0; b < 256; b++) {
		uint8_t q = (uint8_t)b;
		check_elem(&q, DLI_DTYPE_F8E4M3, decode_e4m3(q), "f8e4m3", b);
		check_elem(&q, DLI_DTYPE_F8E5M2, decode_e5m2(q), "f8e5m2", b);
	}
}

/* A sweep of the f32 bit patterns with a stride prime to every power of two, in arrays. */
static void test_f32_sweep(void)
{
	enum { N = 1 << 20 };
	const uint64_t stride = 251;
	float *x = malloc(N * sizeof *x);
	uint64_t *got = malloc(NB * sizeof *got), *want = malloc(NB * sizeof *want);
	if (!x || !got || !want)
		goto out;
	uint64_t b = 0;
	bool ok = true;
	while (b < (1ull << 32) && ok) {
		size_t n = 0;
		for (; n < N && b < (1ull << 32); n++, b += stride)
			x[n] = from_bits((uint32_t)b);
		ref_counts_f32(x, n, want);
		CHECK_INT(dli_cpu_histogram(x, DLI_DTYPE_F32, (int64_t)n, NULL, got), 0);
		ok = same_counts(got, want, "f32 sweep");
	}
out:
	free(x);
	free(got);
	free(want);
}

/* Random data of several kinds, some at an odd address. */
static void fill_random(float *x, size_t n, int kind)
{
	for (size_t i = 0; i < n; i++) {
		double u = uniform();
		switch (kind) {
		case 0: /* any bit pattern: every exponent, NaNs, infinities, subnormals */
			x[i] = from_bits((uint32_t)next_u64());
			break;
		case 1: /* a training-like spread around 0 */
			x[i] = (float)((u - 0.5) * 6 * (uniform() < 0.1 ? 100 : 1));
			break;
		case 2: /* log-uniform magnitudes from the subnormals to 2^127, random signs */
			x[i] = (float)((next_u64() & 1 ? -1 : 1) * exp2(-149 + 276 * u));
			break;
		default: /* the specials, densely */
			x[i] = i % 7 == 0 ? 0.0f : i % 7 == 1 ? -0.0f : i % 7 == 2 ? INFINITY
			       : i % 7 == 3 ? -INFINITY : i % 7 == 4 ? NAN
			       : i % 7 == 5 ? from_bits((uint32_t)(next_u64() & 0x807fffffu))
					    : (float)ref_limits[1 + next_u64() % (NB - 2)];
			break;
		}
	}
}

static void test_random(void)
{
	enum { N = 300001 };
	char *buf = malloc(N * sizeof(float) + 1);
	float *x = malloc(N * sizeof *x);
	uint64_t *got = malloc(NB * sizeof *got), *want = malloc(NB * sizeof *want);
	if (!buf || !x || !got || !want)
		goto out;
	for (int kind = 0; kind < 4; kind++) {
		char what[64];
		fill_random(x, N, kind);
		ref_counts_f32(x, N, want);
		snprintf(what, sizeof what, "random kind %d", kind);
		CHECK_INT(dli_cpu_histogram(x, DLI_DTYPE_F32, N, NULL, got), 0);
		same_counts(got, want, what);
		/* Unaligned: the kernel reads through memcpy. */
		memcpy(buf + 1, x, N * sizeof *x);
		CHECK_INT(dli_cpu_histogram(buf + 1, DLI_DTYPE_F32, N, NULL, got), 0);
		snprintf(what, sizeof what, "random kind %d, odd address", kind);
		same_counts(got, want, what);
		/* Counts add to n - NaNs. */
		uint64_t total = 0, nans = 0;
		for (int k = 0; k < NB; k++)
			total += got[k];
		for (size_t i = 0; i < N; i++)
			nans += isnan(x[i]) != 0;
		CHECK(total == N - nans);
	}
out:
	free(buf);
	free(x);
	free(got);
	free(want);
}

/* Above the threading threshold: 1, 2, 7 threads and the default give the reference's counts. */
static void test_threads(void)
{
	enum { N = 9 * 1000 * 1000 + 17 };
	float *x = malloc((size_t)N * sizeof *x);
	uint16_t *h = malloc((size_t)N * sizeof *h);
	uint64_t *got = malloc(NB * sizeof *got), *want = malloc(NB * sizeof *want),
		 *one = malloc(NB * sizeof *one);
	if (!x || !h || !got || !want || !one)
		goto out;
	for (size_t i = 0; i < N; i++)
		x[i] = i % 4 ? (float)((uniform() - 0.5) * exp2(60 * uniform() - 30)) : from_bits((uint32_t)next_u64());
	ref_counts_f32(x, N, want);
	static const int threads[] = {1, 2, 7, 0};
	for (size_t t = 0; t < sizeof threads / sizeof threads[0]; t++) {
		struct dli_cpu_options o = {.threads = threads[t]};
		char what[64];
		snprintf(what, sizeof what, "f32, %d threads", threads[t]);
		CHECK_INT(dli_cpu_histogram(x, DLI_DTYPE_F32, N, &o, got), 0);
		same_counts(got, want, what);
	}
	/* A 16-bit dtype too: bf16 is the top half of the f32 bits. */
	for (size_t i = 0; i < N; i++) {
		uint32_t b;
		memcpy(&b, &x[i], 4);
		h[i] = (uint16_t)(b >> 16);
	}
	struct dli_cpu_options o1 = {.threads = 1}, o5 = {.threads = 5};
	CHECK_INT(dli_cpu_histogram(h, DLI_DTYPE_BF16, N, &o1, one), 0);
	CHECK_INT(dli_cpu_histogram(h, DLI_DTYPE_BF16, N, &o5, got), 0);
	same_counts(got, one, "bf16, 5 threads against 1");
	CHECK_INT(dli_cpu_histogram(h, DLI_DTYPE_F16, N, &o1, one), 0);
	CHECK_INT(dli_cpu_histogram(h, DLI_DTYPE_F16, N, &o5, got), 0);
	same_counts(got, one, "f16, 5 threads against 1");
out:
	free(x);
	free(h);
	free(got);
	free(want);
	free(one);
}

/* A host may leave DAZ/FTZ on: subnormals still land above 0. */
static void test_daz(void)
{
#ifdef DLI_HAVE_X86_SIMD
	unsigned csr = _mm_getcsr();
	_mm_setcsr(csr | 0x8040u);
	float x = from_bits(1);
	CHECK_INT(kernel_bucket(&x, DLI_DTYPE_F32), NB / 2 + 1);
	x = -x;
	CHECK_INT(kernel_bucket(&x, DLI_DTYPE_F32), NB / 2);
	_mm_setcsr(csr);
#endif
}

/* Runs of empty buckets become one, so every emitted bucket keeps its place and its start. */
static void test_compact(void)
{
	static uint64_t counts[NB];
	static double lim[NB], cnt[NB];

	/* Only zeros: (-inf, -1e-12] empty, (-1e-12, 0] holds them, (0, DBL_MAX] empty. */
	memset(counts, 0, sizeof counts);
	counts[NB / 2] = 5;
	size_t n = dli_histogram_compact(counts, lim, cnt);
	CHECK_INT(n, 3);
	CHECK(lim[0] == -1e-12 && cnt[0] == 0);
	CHECK(lim[1] == 0 && cnt[1] == 5);
	CHECK(lim[2] == DBL_MAX && cnt[2] == 0);

	/* Everything empty: one bucket. */
	counts[NB / 2] = 0;
	CHECK_INT(dli_histogram_compact(counts, lim, cnt), 1);
	CHECK(lim[0] == DBL_MAX && cnt[0] == 0);

	/* Every bucket full: nothing to collapse. */
	for (int k = 0; k < NB; k++)
		counts[k] = (uint64_t)k + 1;
	CHECK_INT(dli_histogram_compact(counts, lim, cnt), NB);
	CHECK(!memcmp(lim, ref_limits, sizeof lim));

	/* Random sparse counts: expanding the compact form gives them back, and no two empty
	 * buckets are neighbours. */
	for (int trial = 0; trial < 50; trial++) {
		for (int k = 0; k < NB; k++)
			counts[k] = uniform() < 0.05 ? 1 + next_u64() % 1000 : 0;
		n = dli_histogram_compact(counts, lim, cnt);
		bool ok = n >= 1 && lim[n - 1] == DBL_MAX;
		size_t j = 0;
		for (int k = 0; k < NB && ok; k++) {
			while (j < n && lim[j] < ref_limits[k])
				j++;
			if (j == n) {
				ok = false;
				break;
			}
			if (lim[j] == ref_limits[k])
				ok = cnt[j] == (double)counts[k];
			else
				ok = counts[k] == 0 && cnt[j] == 0; /* inside a collapsed run */
		}
		for (size_t i = 1; i < n && ok; i++)
			ok = cnt[i] || cnt[i - 1];
		CHECK(ok);
	}
}

int main(void)
{
	test_limits();
	test_errors();
	test_f32_edges();
	test_small_dtypes_exhaustive();
	test_f32_sweep();
	test_random();
	test_threads();
	test_daz();
	test_compact();
	return check_exit();
}
