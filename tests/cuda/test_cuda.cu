/* The CUDA backend against the CPU kernels: dli_cuda.so (argv[1]) is opened as the core opens it,
 * and its records for random data of every dtype and awkward sizes are compared with
 * dli_cpu_stats / dli_cpu_fp8_compare / dli_cpu_fp8_compare_quantized at float-rounding
 * tolerance; the device FP8 cast is compared bit for bit with dli_fp8_encode; add() is shown not
 * to wait for its stream. The host-side parts run everywhere; without a CUDA device the rest is
 * skipped (exit 77). */
#include <cuda_runtime.h>
#include <dlfcn.h>
#include <errno.h>
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <atomic>
#include <initializer_list>

extern "C" {
#include "kernels-private.h"
}
#include "backend.h"
#include "check.h"
#include "convert.cuh"
#include "record.cuh"

using namespace dli_cuda;

static const struct dli_backend_ops *be;

/* ---- Random data ---- */

#define SAMPLE_SEED 0x9e3779b97f4a7c15ull
#include "sample.h"

static float sample(bool specials)
{
	return sample_in(specials, -2, 5);
}

static uint16_t half_bits(float f)
{
	__half h = __float2half_rn(f);
	uint16_t b;
	memcpy(&b, &h, 2);
	return b;
}

/* What fill() multiplies the f32 and bf16 samples by: 1, or a power of two far from it. */
static float fill_gain = 1.0f;

/* n elements of dtype into buf. */
static void fill(void *buf, enum dli_dtype dt, size_t n, bool specials)
{
	for (size_t i = 0; i < n; i++) {
		float f = sample(specials);
		if (dt == DLI_DTYPE_F32 || dt == DLI_DTYPE_BF16)
			f *= fill_gain;
		uint32_t bits;
		memcpy(&bits, &f, 4);
		switch (dt) {
		case DLI_DTYPE_F32: ((float *)buf)[i] = f; break;
		case DLI_DTYPE_BF16: ((uint16_t *)buf)[i] = (uint16_t)(bits >> 16); break;
		case DLI_DTYPE_F16:
			/* f16 subnormals directly: f32 subnormals all round to zero in f16. */
			((uint16_t *)buf)[i] = (rnd() % 50 == 0) ? (uint16_t)(rnd() & 0x83ff)
								 : half_bits(f);
			break;
		default: { /* FP8: any code; without specials no NaN (nor E5M2 inf) codes */
			uint8_t c = (uint8_t)rnd();
			if (!specials)
				c &= dt == DLI_DTYPE_F8E4M3 ? 0xf7 : 0xbb;
			((uint8_t *)buf)[i] = c;
		}
		}
	}
}

/* ---- Record comparison ---- */

static const char *where_label;

/* Both NaN, or the same infinity, or both finite and within tol. */
static bool close(double g, double c, double tol)
{
	if (isnan(c) || isnan(g))
		return isnan(c) && isnan(g);
	if (isinf(c) || isinf(g))
		return g == c;
	return fabs(g - c) <= tol;
}

#define CHECK_CLOSE(field, g, c, tol)                                                            \
	do {                                                                                     \
		check_count++;                                                                   \
		if (!close((g), (c), (tol))) {                                                   \
			check_failures++;                                                        \
			fprintf(stderr, "%s: %s: cuda %.17g, cpu %.17g (tolerance %.3g)\n",      \
				where_label, field, (double)(g), (double)(c), (double)(tol));    \
		}                                                                                \
	} while (0)

#define CHECK_EQ_U(field, g, c)                                                                  \
	do {                                                                                     \
		check_count++;                                                                   \
		if ((g) != (c)) {                                                                \
			check_failures++;                                                        \
			fprintf(stderr, "%s: %s: cuda %llu, cpu %llu\n", where_label, field,     \
				(unsigned long long)(g), (unsigned long long)(c));               \
		}                                                                                \
	} while (0)

/* Float sums over ~256 elements, then double: a few float roundings of the magnitudes summed. */
static const double rel = 2e-5;

static void compare_stats(const dli_stats_record &g, const dli_stats_record &c)
{
	CHECK_EQ_U("count", g.count, c.count);
	CHECK_EQ_U("nan_count", g.nan_count, c.nan_count);
	CHECK_EQ_U("inf_count", g.inf_count, c.inf_count);
	CHECK_EQ_U("zero_count", g.zero_count, c.zero_count);
	CHECK_CLOSE("min", g.min, c.min, 0);
	CHECK_CLOSE("max", g.max, c.max, 0);
	CHECK_CLOSE("amax", g.amax, c.amax, 0);
	CHECK_CLOSE("min_nonzero_abs", g.min_nonzero_abs, c.min_nonzero_abs, 0);
	CHECK_CLOSE("sum", g.sum, c.sum, rel * c.sum_abs + 1e-300);
	CHECK_CLOSE("sum_abs", g.sum_abs, c.sum_abs, rel * c.sum_abs + 1e-300);
	CHECK_CLOSE("sum_sq", g.sum_sq, c.sum_sq, rel * c.sum_sq + 1e-300);
	/* (mean, m2) only mean something for finite data; there any non-finite answer will do. */
	if (isfinite(c.mean) && isfinite(c.m2)) {
		double n = c.count ? (double)c.count : 1.0;
		CHECK_CLOSE("mean", g.mean, c.mean, rel * c.sum_abs / n + 1e-300);
		CHECK_CLOSE("m2", g.m2, c.m2, rel * c.sum_sq + 1e-300);
	} else {
		check_count++;
		if (isfinite(g.mean) && isfinite(g.m2)) {
			check_failures++;
			fprintf(stderr, "%s: mean/m2 finite on cuda (%g, %g), not on cpu (%g, %g)\n",
				where_label, g.mean, g.m2, c.mean, c.m2);
		}
	}
}

static void compare_fp8(const dli_stats_record &g, const dli_stats_record &c)
{
	CHECK_EQ_U("fp8_count", g.fp8_count, c.fp8_count);
	CHECK_EQ_U("underflows", g.underflows, c.underflows);
	CHECK_EQ_U("overflows", g.overflows, c.overflows);
	/* dq is decode * (1/scale) in float on the device, decode / scale in double on the CPU:
	 * an error of a float rounding of x per element, relative to sum x^2. */
	CHECK_CLOSE("err_sq", g.err_sq, c.err_sq, rel * c.err_sq + 1e-6 * c.x_sq + 1e-300);
	CHECK_CLOSE("dot", g.dot, c.dot, rel * fabs(c.dot) + 1e-300);
	CHECK_CLOSE("dq_sq", g.dq_sq, c.dq_sq, rel * c.dq_sq + 1e-300);
	CHECK_CLOSE("x_sq", g.x_sq, c.x_sq, rel * c.x_sq + 1e-300);
	CHECK_CLOSE("scale_inv_min", g.scale_inv_min, c.scale_inv_min, 0);
	CHECK_CLOSE("scale_inv_max", g.scale_inv_max, c.scale_inv_max, 0);
}

/* ---- Host-side checks (no GPU needed) ---- */

/* The device code's record merge is a restatement of kernels/record.c. */
static void test_merge_matches_cpu(void)
{
	where_label = "record_merge";
	for (int k = 0; k < 200; k++) {
		dli_stats_record a, b, ca, g;
		float buf[80];
		int na = (int)(rnd() % 40), nb = (int)(rnd() % 40);
		fill(buf, DLI_DTYPE_F32, (size_t)(na + nb), k % 3 == 0);
		dli_cpu_stats(buf, DLI_DTYPE_F32, na, NULL, &a);
		dli_cpu_stats(buf + na, DLI_DTYPE_F32, nb, NULL, &b);
		if (k % 2) { /* FP8 terms too */
			dli_stats_record fa, fb;
			dli_cpu_fp8_compare(buf, DLI_DTYPE_F32, na, DLI_DTYPE_F8E4M3, 2.0f, NULL, &fa);
			dli_cpu_fp8_compare(buf + na, DLI_DTYPE_F32, nb, DLI_DTYPE_F8E5M2, 0.5f, NULL, &fb);
			dli_stats_merge(&a, &fa);
			dli_stats_merge(&b, &fb);
		}
		ca = a;
		g = a;
		dli_stats_merge(&ca, &b);
		record_merge(g, b);
		CHECK(memcmp(&ca, &g, sizeof g) == 0 ||
		      (isnan(ca.mean) && isnan(g.mean)) || (isnan(ca.m2) && isnan(g.m2)));
	}
	dli_stats_record e, i;
	dli_stats_record_init(&e);
	record_init(i);
	CHECK(memcmp(&e, &i, sizeof e) == 0);
}

static void test_scale_matches_cpu(void)
{
	const float amaxes[] = {0.0f, -1.0f, NAN, INFINITY, 1e-45f, 1e-30f, 0.1f, 1.0f, 3.0f,
				448.0f, 1e30f, FLT_MAX};
	const double margins[] = {0, 1, 2, -1, 0.5, 200, NAN};
	for (float amax : amaxes)
		for (double m : margins) {
			float c4 = dli_fp8_scale(amax, DLI_DTYPE_F8E4M3, m);
			float g4 = fp8_current_scale(amax, 448.0f, m);
			float c5 = dli_fp8_scale(amax, DLI_DTYPE_F8E5M2, m);
			float g5 = fp8_current_scale(amax, 57344.0f, m);
			CHECK(memcmp(&c4, &g4, 4) == 0);
			CHECK(memcmp(&c5, &g5, 4) == 0);
		}
	for (int k = 0; k < 100000; k++) {
		uint32_t bits = (uint32_t)rnd() & 0x7fffffffu;
		float amax;
		memcpy(&amax, &bits, 4);
		float c = dli_fp8_scale(amax, DLI_DTYPE_F8E4M3, (double)(k % 3));
		float g = fp8_current_scale(amax, 448.0f, (double)(k % 3));
		CHECK(memcmp(&c, &g, 4) == 0);
	}
}

/* cuda_fp8.h's cast on the host is the code sm_80 runs on the device (sm_89 and later have an
 * instruction, checked on a GPU below): it must give dli_fp8_encode's codes. */
static bool fp8_is_nan(uint8_t c, enum dli_dtype f)
{
	return f == DLI_DTYPE_F8E4M3 ? (c & 0x7f) == 0x7f : (c & 0x7f) > 0x7c;
}

template <int F> static void test_encode_host(void)
{
	const enum dli_dtype fmt = (enum dli_dtype)F;
	size_t bad = 0, n = 0;
	for (uint64_t k = 0; k < 65536 + (1 << 22); k++, n++) {
		uint32_t bits = k < 65536 ? (uint32_t)k << 16 : (uint32_t)rnd();
		float x;
		memcpy(&x, &bits, 4);
		uint8_t c = dli_fp8_encode(x, fmt), g = fp8_encode<F>(x);
		if (fp8_is_nan(c, fmt) ? !fp8_is_nan(g, fmt) : c != g) {
			if (bad++ < 10)
				fprintf(stderr, "host cast %s: x = %a: cpu 0x%02x, cuda_fp8.h 0x%02x\n",
					F == DLI_DTYPE_F8E4M3 ? "e4m3" : "e5m2", (double)x, c, g);
		}
	}
	check_count++;
	if (bad) {
		check_failures++;
		fprintf(stderr, "host cast: %zu of %zu differ\n", bad, n);
	}
}

/* ---- Device helpers ---- */

#define CUDA_OK(call)                                                                            \
	do {                                                                                     \
		cudaError_t e_ = (call);                                                         \
		if (e_ != cudaSuccess) {                                                         \
			fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call,            \
				cudaGetErrorString(e_));                                         \
			exit(1);                                                                 \
		}                                                                                \
	} while (0)

template <int F>
__global__ void encode_kernel(const float *x, size_t n, uint8_t *single, uint8_t *pair, float *round)
{
	for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n / 2;
	     i += gridDim.x * (size_t)blockDim.x) {
		single[2 * i] = fp8_encode<F>(x[2 * i]);
		single[2 * i + 1] = fp8_encode<F>(x[2 * i + 1]);
		__nv_fp8x2_storage_t q = __nv_cvt_float2_to_fp8x2(make_float2(x[2 * i], x[2 * i + 1]),
								  __NV_SATFINITE, fp8_format<F>::interp);
		pair[2 * i] = (uint8_t)(q & 0xff);
		pair[2 * i + 1] = (uint8_t)(q >> 8);
		float2 r = fp8_round_trip2<F>(x[2 * i], x[2 * i + 1]);
		round[2 * i] = r.x;
		round[2 * i + 1] = r.y;
	}
}

template <int F> __global__ void decode_kernel(float *out)
{
	out[threadIdx.x] = fp8_decode<F>((uint8_t)threadIdx.x);
	float v[4];
	fp8_decode4<F>((uint32_t)threadIdx.x * 0x01010101u, v);
	out[256 + threadIdx.x] = v[3];
}

/* Every bf16 pattern, random f32 bits and the rounding boundaries, both formats. */
template <int F> static void test_encode_bits(void)
{
	const enum dli_dtype fmt = (enum dli_dtype)F;
	where_label = F == DLI_DTYPE_F8E4M3 ? "encode e4m3" : "encode e5m2";
	const size_t cap = 65536 + 2 * (1 << 20) + 4 * 128 + 1;
	float *x = (float *)malloc(cap * sizeof *x);
	size_t n = 0;
	for (uint32_t b = 0; b < 65536; b++) {
		uint32_t bits = b << 16;
		memcpy(&x[n++], &bits, 4);
	}
	for (int i = 0; i < 1 << 20; i++) {
		uint32_t bits = (uint32_t)rnd();
		memcpy(&x[n++], &bits, 4);
		x[n++] = gauss() * 100.0f;
	}
	/* Midpoints between neighbouring codes and their float neighbours. */
	for (int c = 0; c < 127; c++) {
		float a = dli_fp8_decode((uint8_t)c, fmt), b = dli_fp8_decode((uint8_t)(c + 1), fmt);
		if (!isfinite(a) || !isfinite(b))
			continue;
		float m = (float)(((double)a + (double)b) / 2);
		for (float v : {m, nextafterf(m, 0.0f), nextafterf(m, INFINITY), -m})
			x[n++] = v;
	}
	if (n % 2)
		x[n++] = 0.0f;
	float *dx, *dr;
	uint8_t *ds, *dp;
	CUDA_OK(cudaMalloc(&dx, n * 4));
	CUDA_OK(cudaMalloc(&dr, n * 4));
	CUDA_OK(cudaMalloc(&ds, n));
	CUDA_OK(cudaMalloc(&dp, n));
	CUDA_OK(cudaMemcpy(dx, x, n * 4, cudaMemcpyHostToDevice));
	encode_kernel<F><<<256, 256>>>(dx, n, ds, dp, dr);
	CUDA_OK(cudaGetLastError());
	uint8_t *single = (uint8_t *)malloc(n), *pair = (uint8_t *)malloc(n);
	float *round = (float *)malloc(n * 4);
	CUDA_OK(cudaMemcpy(single, ds, n, cudaMemcpyDeviceToHost));
	CUDA_OK(cudaMemcpy(pair, dp, n, cudaMemcpyDeviceToHost));
	CUDA_OK(cudaMemcpy(round, dr, n * 4, cudaMemcpyDeviceToHost));
	size_t bad = 0;
	for (size_t i = 0; i < n; i++) {
		uint8_t c = dli_fp8_encode(x[i], fmt);
		float dc = dli_fp8_decode(c, fmt);
		/* NaN codes may differ in sign and payload (E5M2: 0x7e here, 0x7f from CUDA). */
		bool ok = fp8_is_nan(c, fmt) ? fp8_is_nan(single[i], fmt) && fp8_is_nan(pair[i], fmt) &&
						       isnan(round[i])
					     : single[i] == c && pair[i] == c &&
						       memcmp(&round[i], &dc, 4) == 0;
		if (!ok && bad++ < 10)
			fprintf(stderr, "%s: x = %a: cpu 0x%02x, cuda 0x%02x / pair 0x%02x / %a\n",
				where_label, (double)x[i], c, single[i], pair[i], (double)round[i]);
	}
	check_count++;
	if (bad) {
		check_failures++;
		fprintf(stderr, "%s: %zu of %zu casts differ\n", where_label, bad, n);
	}
	/* And every code decoded. */
	float *dd, dec[512];
	CUDA_OK(cudaMalloc(&dd, sizeof dec));
	decode_kernel<F><<<1, 256>>>(dd);
	CUDA_OK(cudaMemcpy(dec, dd, sizeof dec, cudaMemcpyDeviceToHost));
	for (int c = 0; c < 256; c++) {
		float r = dli_fp8_decode((uint8_t)c, fmt);
		CHECK(isnan(r) ? isnan(dec[c]) && isnan(dec[256 + c])
			       : memcmp(&r, &dec[c], 4) == 0 && memcmp(&r, &dec[256 + c], 4) == 0);
	}
	free(x);
	free(single);
	free(pair);
	free(round);
	cudaFree(dd);
	cudaFree(dx);
	cudaFree(dr);
	cudaFree(ds);
	cudaFree(dp);
}

/* ---- The backend against the CPU ---- */

static const char *dtype_str(enum dli_dtype d)
{
	static const char *const names[] = {"f32", "f16", "bf16", "f8e4m3", "f8e5m2"};
	return (unsigned)d < 5 ? names[d] : "?";
}

static dli_tensor device_tensor(void *data, enum dli_dtype dt, int64_t n, cudaStream_t s)
{
	dli_tensor t;
	memset(&t, 0, sizeof t);
	t.data = data;
	t.dtype = dt;
	t.device.type = DLI_DEVICE_CUDA;
	t.device.index = 0;
	t.device.stream = s;
	t.ndim = 1;
	t.shape[0] = n;
	t.contiguous = true;
	return t;
}

static dli_stats_record cuda_record(dli_tensor t, const dli_fp8_spec *fp8)
{
	char err[256] = "";
	void *acc = be->acc_create(0, err);
	dli_stats_record r;
	record_init(r);
	CHECK(acc != NULL);
	if (!acc) {
		fprintf(stderr, "acc_create: %s\n", err);
		return r;
	}
	CHECK_INT(be->add(acc, &t, fp8), 0);
	CHECK_INT(be->read(acc, &r, sizeof r), 0);
	be->acc_destroy(acc);
	return r;
}

/* What core/stats.c does for a host tensor. */
static dli_stats_record cpu_record(const void *data, enum dli_dtype dt, int64_t n,
				   const dli_fp8_spec *fp8)
{
	dli_stats_record r, c;
	dli_stats_record_init(&r);
	if (n == 0)
		return r;
	CHECK_INT(dli_cpu_stats(data, dt, n, NULL, &r), 0);
	if (fp8) {
		float scale = fp8->current_scaling ? dli_fp8_scale((float)r.amax, fp8->format, fp8->margin)
						   : fp8->scale;
		CHECK_INT(dli_cpu_fp8_compare(data, dt, n, fp8->format, scale, NULL, &c), 0);
		dli_stats_merge(&r, &c);
	}
	return r;
}

/* The labels' word on the data: specials, and fill_gain when it is not 1. */
static const char *data_note(bool specials)
{
	static char note[64];
	int n = snprintf(note, sizeof note, "%s", specials ? " with NaN/inf" : "");
	if (fill_gain != 1.0f)
		snprintf(note + n, sizeof note - (size_t)n, " x 2^%d", ilogbf(fill_gain));
	return note;
}

static void test_against_cpu(enum dli_dtype dt, int64_t n, bool specials, int offset)
{
	char label[160];
	size_t es = dli_dtype_size(dt);
	size_t bytes = (size_t)(n + offset) * es;
	char *host = (char *)malloc(bytes + 16);
	fill(host, dt, (size_t)(n + offset), specials);
	char *dev;
	CUDA_OK(cudaMalloc(&dev, bytes + 16));
	CUDA_OK(cudaMemcpy(dev, host, bytes, cudaMemcpyHostToDevice));
	const void *hx = host + offset * es;
	dli_tensor t = device_tensor(dev + offset * es, dt, n, 0);

	snprintf(label, sizeof label, "%s n=%lld%s offset=%d stats", dtype_str(dt), (long long)n,
		 data_note(specials), offset);
	where_label = label;
	dli_stats_record g = cuda_record(t, NULL), c = cpu_record(hx, dt, n, NULL);
	compare_stats(g, c);
	compare_fp8(g, c);

	if (dt == DLI_DTYPE_F32 || dt == DLI_DTYPE_F16 || dt == DLI_DTYPE_BF16) {
		for (enum dli_dtype f : {DLI_DTYPE_F8E4M3, DLI_DTYPE_F8E5M2}) {
			float cur = dli_fp8_scale((float)c.amax, f, 0);
			/* Current scaling; a given scale that is not a power of two; one that saturates
			 * a lot; one that underflows a lot. */
			dli_fp8_spec specs[4] = {{f, 1.0f, 1, 0.0}, {f, cur * 0.75f, 0, 0},
						 {f, cur * 64.0f, 0, 0}, {f, cur / 4096.0f, 0, 0}};
			for (int k = 0; k < 4; k++) {
				if (!(specs[k].scale > 0.0f) || isinf(specs[k].scale))
					continue;
				snprintf(label, sizeof label, "%s n=%lld%s offset=%d fp8 %s %s",
					 dtype_str(dt), (long long)n, data_note(specials),
					 offset, dtype_str(f), k ? "given scale" : "current scaling");
				g = cuda_record(t, &specs[k]);
				c = cpu_record(hx, dt, n, &specs[k]);
				compare_stats(g, c);
				compare_fp8(g, c);
			}

			/* A host-quantized copy: codes of x * scale, scale_inv = 1 / scale. */
			float scale = cur * 0.75f, si = 1.0f / scale;
			uint8_t *q = (uint8_t *)malloc((size_t)n + 16), *dq;
			float *dsi;
			for (int64_t i = 0; i < n; i++) {
				float x;
				switch (dt) {
				case DLI_DTYPE_F32: memcpy(&x, (const char *)hx + 4 * i, 4); break;
				default: {
					uint16_t h;
					memcpy(&h, (const char *)hx + 2 * i, 2);
					if (dt == DLI_DTYPE_BF16) {
						uint32_t b = (uint32_t)h << 16;
						memcpy(&x, &b, 4);
					} else {
						x = __half2float(__ushort_as_half(h));
					}
				}
				}
				q[i] = dli_fp8_encode(x * scale, f);
			}
			CUDA_OK(cudaMalloc(&dq, (size_t)n + 16));
			CUDA_OK(cudaMalloc(&dsi, 4));
			CUDA_OK(cudaMemcpy(dq, q, (size_t)n, cudaMemcpyHostToDevice));
			CUDA_OK(cudaMemcpy(dsi, &si, 4, cudaMemcpyHostToDevice));
			dli_quantized_tensor qt;
			qt.data = device_tensor(dq, f, n, 0);
			qt.scale_inv = dsi;
			qt.scale_inv_count = 1;
			snprintf(label, sizeof label, "%s n=%lld%s offset=%d quantized %s", dtype_str(dt),
				 (long long)n, data_note(specials), offset, dtype_str(f));
			char err[256] = "";
			void *acc = be->acc_create(0, err);
			CHECK(acc != NULL);
			if (acc) {
				CHECK_INT(be->add_quantized(acc, &t, &qt), 0);
				CHECK_INT(be->read(acc, &g, sizeof g), 0);
				be->acc_destroy(acc);
				CHECK_INT(dli_cpu_fp8_compare_quantized(hx, dt, q, f, &si, 1, n, NULL, &c), 0);
				compare_fp8(g, c);
			}
			cudaFree(dq);
			cudaFree(dsi);
			free(q);
		}
	}
	cudaFree(dev);
	free(host);
}

/* ---- add() does not wait ---- */

struct gate {
	std::atomic<int> open{0};
	std::atomic<int> timed_out{0};
};

/* Holds the stream until the test opens the gate (or 20 s pass, so a failure cannot hang). */
static void CUDART_CB hold(void *arg)
{
	gate *g = (gate *)arg;
	struct timespec t0, t;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	while (!g->open.load()) {
		clock_gettime(CLOCK_MONOTONIC, &t);
		if (t.tv_sec - t0.tv_sec > 20) {
			g->timed_out.store(1);
			return;
		}
	}
}

static void test_add_does_not_wait(void)
{
	where_label = "asynchronous add";
	const int64_t n = (1 << 20) + 3;
	float *host = (float *)malloc((size_t)n * 4), *dev;
	fill(host, DLI_DTYPE_F32, (size_t)n, false);
	CUDA_OK(cudaMalloc(&dev, (size_t)n * 4));
	CUDA_OK(cudaMemcpy(dev, host, (size_t)n * 4, cudaMemcpyHostToDevice));
	cudaStream_t a, b;
	CUDA_OK(cudaStreamCreateWithFlags(&a, cudaStreamNonBlocking));
	CUDA_OK(cudaStreamCreateWithFlags(&b, cudaStreamNonBlocking));

	char err[256] = "";
	void *acc = be->acc_create(0, err);
	CHECK(acc != NULL);
	if (!acc)
		return;
	dli_fp8_spec cur = {DLI_DTYPE_F8E4M3, 1.0f, 1, 0.0};
	dli_tensor ta = device_tensor(dev, DLI_DTYPE_F32, n, a);
	dli_tensor tb = device_tensor(dev, DLI_DTYPE_F32, n / 2, b);
	dli_stats_record r, c, c2;
	/* The first launch of a kernel loads it (CUDA's lazy loading, the default since 12.2), which
	 * may synchronize the context, and so wait for the held stream below: a deadlock until the
	 * hold times out. The kernels these adds use are loaded here, before the hold. */
	CHECK_INT(be->add(acc, &ta, &cur), 0);
	CHECK_INT(be->add(acc, &tb, NULL), 0);
	CHECK_INT(be->read(acc, &r, sizeof r), 0);
	be->reset(acc);

	gate g;
	CUDA_OK(cudaLaunchHostFunc(a, hold, &g));
	/* Two adds on the held stream and one on another, which must queue behind them. */
	CHECK_INT(be->add(acc, &ta, &cur), 0);
	CHECK_INT(be->add(acc, &ta, NULL), 0);
	CHECK_INT(be->add(acc, &tb, &cur), 0);
	CHECK(cudaStreamQuery(a) == cudaErrorNotReady);
	CHECK(cudaStreamQuery(b) == cudaErrorNotReady); /* ordered after stream a's adds */
	CHECK(!g.timed_out.load());
	g.open.store(1);

	CHECK_INT(be->read(acc, &r, sizeof r), 0);
	CHECK(!g.timed_out.load());
	c = cpu_record(host, DLI_DTYPE_F32, n, &cur);
	c2 = cpu_record(host, DLI_DTYPE_F32, n, NULL);
	dli_stats_merge(&c, &c2);
	c2 = cpu_record(host, DLI_DTYPE_F32, n / 2, &cur);
	dli_stats_merge(&c, &c2);
	compare_stats(r, c);
	compare_fp8(r, c);

	/* reset empties it without touching the device; adds start afresh. */
	be->reset(acc);
	CHECK_INT(be->read(acc, &r, sizeof r), 0);
	dli_stats_record_init(&c);
	CHECK(memcmp(&r, &c, sizeof r) == 0);
	CHECK_INT(be->add(acc, &tb, NULL), 0);
	CHECK_INT(be->read(acc, &r, sizeof r), 0);
	compare_stats(r, cpu_record(host, DLI_DTYPE_F32, n / 2, NULL));

	be->acc_destroy(acc);
	cudaStreamDestroy(a);
	cudaStreamDestroy(b);
	cudaFree(dev);
	free(host);
}

/* More than 2^31 elements (2 GiB of FP8 codes), some past 2^31 in the vector loop and some in the
 * scalar tail: the index arithmetic must be 64-bit. Every code is 1.0 but two, so the sums are
 * exact and a wrapped or short pass shows. Skipped where the device has less than 3 GiB free. */
static void test_big_tensor(void)
{
	where_label = "2^31 + 2^20 + 3 f8e4m3 elements";
	const size_t n = ((size_t)1 << 31) + ((size_t)1 << 20) + 3;
	size_t free_bytes = 0, total = 0;
	if (cudaMemGetInfo(&free_bytes, &total) != cudaSuccess || free_bytes < n + ((size_t)1 << 30)) {
		printf("the check of more than 2^31 elements is skipped: %zu MiB free\n",
		       free_bytes >> 20);
		return;
	}
	uint8_t *dev;
	CUDA_OK(cudaMalloc(&dev, n));
	CUDA_OK(cudaMemset(dev, 0x38, n)); /* 1.0 */
	const uint8_t neg = 0xb8, big = 0x7e; /* -1.0, 448 */
	CUDA_OK(cudaMemcpy(dev + ((size_t)1 << 31) + 5, &neg, 1, cudaMemcpyHostToDevice));
	CUDA_OK(cudaMemcpy(dev + n - 1, &big, 1, cudaMemcpyHostToDevice));
	dli_stats_record r = cuda_record(device_tensor(dev, DLI_DTYPE_F8E4M3, (int64_t)n, 0), NULL);
	CHECK_EQ_U("count", r.count, n);
	CHECK_EQ_U("zero_count", r.zero_count, 0);
	CHECK_EQ_U("nan_count", r.nan_count, 0);
	CHECK_CLOSE("min", r.min, -1.0, 0);
	CHECK_CLOSE("max", r.max, 448.0, 0);
	CHECK_CLOSE("sum", r.sum, (double)(n - 2) - 1.0 + 448.0, 0);
	CHECK_CLOSE("sum_abs", r.sum_abs, (double)(n - 2) + 1.0 + 448.0, 0);
	cudaFree(dev);
}

/* Bad input is refused with a negative errno, never a crash or a wrong record. */
static void test_refusals(void)
{
	char err[256] = "";
	void *acc = be->acc_create(0, err);
	CHECK(acc != NULL);
	if (!acc)
		return;
	float *dev;
	CUDA_OK(cudaMalloc(&dev, 64));
	dli_tensor t = device_tensor(dev, DLI_DTYPE_F32, 8, 0);
	dli_tensor bad = t;
	bad.dtype = DLI_DTYPE_I32;
	CHECK_INT(be->add(acc, &bad, NULL), -EINVAL);
	bad = t;
	bad.contiguous = false;
	CHECK_INT(be->add(acc, &bad, NULL), -EINVAL);
	bad = t;
	bad.device.index = 99;
	CHECK_INT(be->add(acc, &bad, NULL), -EINVAL);
	bad = t;
	bad.device.type = DLI_DEVICE_CPU;
	CHECK_INT(be->add(acc, &bad, NULL), -EINVAL);
	bad = t;
	bad.data = (char *)dev + 1;
	CHECK_INT(be->add(acc, &bad, NULL), -EINVAL);
	bad = t;
	bad.shape[0] = -1;
	CHECK_INT(be->add(acc, &bad, NULL), -EINVAL);
	dli_fp8_spec zero = {DLI_DTYPE_F8E4M3, 0.0f, 0, 0.0};
	CHECK_INT(be->add(acc, &t, &zero), -EINVAL);
	dli_fp8_spec badfmt = {DLI_DTYPE_BF16, 1.0f, 0, 0.0};
	CHECK_INT(be->add(acc, &t, &badfmt), -EINVAL);
	bad = t;
	bad.dtype = DLI_DTYPE_F8E4M3;
	dli_fp8_spec one = {DLI_DTYPE_F8E4M3, 1.0f, 0, 0.0};
	CHECK_INT(be->add(acc, &bad, &one), -EINVAL); /* FP8 input to the comparison */
	dli_quantized_tensor q;
	q.data = device_tensor(dev, DLI_DTYPE_F8E4M3, 8, 0);
	q.scale_inv = dev;
	q.scale_inv_count = 2;
	CHECK_INT(be->add_quantized(acc, &t, &q), -ENOTSUP);
	q.scale_inv_count = 0;
	CHECK_INT(be->add_quantized(acc, &t, &q), -EINVAL);
	/* Nothing got in. */
	dli_stats_record r, e;
	CHECK_INT(be->read(acc, &r, sizeof r), 0);
	dli_stats_record_init(&e);
	CHECK(memcmp(&r, &e, sizeof r) == 0);
	be->acc_destroy(acc);
	CHECK(be->acc_create(99, err) == NULL);
	CHECK_CONTAINS(err, "device 99");
	cudaFree(dev);
}

int main(int argc, char **argv)
{
	if (argc < 2) {
		fprintf(stderr, "usage: %s PATH/dli_cuda.so\n", argv[0]);
		return 2;
	}
	test_merge_matches_cpu();
	test_scale_matches_cpu();
	test_encode_host<DLI_DTYPE_F8E4M3>();
	test_encode_host<DLI_DTYPE_F8E5M2>();

	/* The module must load and export its entry wherever it is built. */
	void *h = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
	if (!h) {
		fprintf(stderr, "dlopen %s: %s\n", argv[1], dlerror());
		return 1;
	}
	void *sym = dlsym(h, DLI_MODULE_ENTRY_NAME);
	CHECK(sym != NULL);
	if (!sym)
		return check_exit();
	dli_module_entry_fn entry;
	memcpy(&entry, &sym, sizeof entry);
	be = dli_cuda_backend_ops(entry(NULL));
	CHECK(be != NULL && be->size >= sizeof(struct dli_backend_ops));
	CHECK(be->acc_create && be->acc_destroy && be->add && be->add_quantized && be->read &&
	      be->reset);

	int devices = 0;
	cudaError_t e = cudaGetDeviceCount(&devices);
	if (e != cudaSuccess || devices == 0) {
		printf("host-side checks: ");
		if (check_exit())
			return 1;
		printf("SKIP: no CUDA device (%s), the device checks need one\n",
		       e != cudaSuccess ? cudaGetErrorString(e) : "cudaGetDeviceCount found 0");
		/* The backend says so too, instead of failing later. */
		char err[256] = "";
		if (be->acc_create(0, err) != NULL) {
			fprintf(stderr, "acc_create succeeded without a device\n");
			return 1;
		}
		printf("acc_create: %s\n", err);
		/* No driver or no GPU reads as such, not as a driver to upgrade. */
		if ((e == cudaSuccess || e == cudaErrorInsufficientDriver || e == cudaErrorNoDevice) &&
		    !strstr(err, "no CUDA GPU found (cudaGetDeviceCount")) {
			fprintf(stderr, "acc_create without a GPU should say 'no CUDA GPU found', said: %s\n",
				err);
			return 1;
		}
		return 77;
	}
	cudaDeviceProp prop;
	CUDA_OK(cudaGetDeviceProperties(&prop, 0));
	printf("device 0: %s (sm_%d%d)\n", prop.name, prop.major, prop.minor);

	test_encode_bits<DLI_DTYPE_F8E4M3>();
	test_encode_bits<DLI_DTYPE_F8E5M2>();
	test_refusals();
	test_add_does_not_wait();
	test_big_tensor();

	const int64_t sizes[] = {0, 1, 7, 15, 17, 255, 257, 1023, 1025, 65535, 65537,
				 (1 << 20) - 1, (1 << 20) + 1, (1 << 24) + 5};
	const enum dli_dtype dts[] = {DLI_DTYPE_F32, DLI_DTYPE_F16, DLI_DTYPE_BF16,
				      DLI_DTYPE_F8E4M3, DLI_DTYPE_F8E5M2};
	for (enum dli_dtype dt : dts)
		for (int64_t n : sizes) {
			test_against_cpu(dt, n, false, 0);
			test_against_cpu(dt, n, true, 0);
			if (n > 16 && n < (1 << 24))
				test_against_cpu(dt, n, true, 1); /* a head before the 16-byte boundary */
		}
	/* Magnitudes whose float squares overflow (2^60) or flush to zero (2^-80): the passes must
	 * sum them in double, as the CPU kernels do, not report an infinite or zero l2_norm, std
	 * or x_sq. */
	for (float gain : {0x1p60f, 0x1p-80f})
		for (enum dli_dtype dt : {DLI_DTYPE_F32, DLI_DTYPE_BF16}) {
			fill_gain = gain;
			test_against_cpu(dt, 65537, false, 0);
			test_against_cpu(dt, 65537, true, 1);
			test_against_cpu(dt, 7, false, 0);
		}
	fill_gain = 1.0f;
	return check_exit();
}
