/* The demo trainer's CUDA path (examples/trainer/cuda) against host references: FP8 GEMMs through
 * cuBLASLt (e4m3 x e4m3, e5m2 x e4m3, e4m3 x e5m2; f32 and bf16 out; alpha, beta, fast
 * accumulation) compared with a double-precision product of the same FP8 codes decoded on the
 * host; the quantize kernel's codes, transposed codes, amax and scale_inv bit for bit against
 * cuda_fp8.h's host cast; dequantize and the scale update bit for bit; the trainer's GEMM-seam
 * backend (gemm_cuda.h) with every transpose and unaligned sizes. The refusals are checked
 * host-side everywhere; without a CUDA device the rest is skipped (exit 77). */
#include <cuda_runtime.h>
#include <errno.h>
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <vector>

#include "check.h"
#include "convert.cuh"
#include "gemm_cuda.h"
#include "trainer_cuda.h"

using namespace dli_cuda;

#define CUDA_OK(call)                                                                            \
	do {                                                                                     \
		cudaError_t cuda_ok_e_ = (call);                                                 \
		if (cuda_ok_e_ != cudaSuccess) {                                                 \
			fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call,            \
				cudaGetErrorString(cuda_ok_e_));                                 \
			exit(1);                                                                 \
		}                                                                                \
	} while (0)

#define TC_OK(call)                                                                              \
	do {                                                                                     \
		struct dli_error tc_ok_err_;                                                     \
		memset(&tc_ok_err_, 0, sizeof tc_ok_err_);                                       \
		int tc_ok_r_ = (call);                                                           \
		if (tc_ok_r_ != 0) {                                                             \
			fprintf(stderr, "%s:%d: %s returned %d: %s\n", __FILE__, __LINE__,       \
				#call, tc_ok_r_, tc_ok_err_.message);                            \
			exit(1);                                                                 \
		}                                                                                \
	} while (0)
/* TC_OK's calls pass &tc_ok_err_ as their error argument. */
#define ERR (&tc_ok_err_)

/* ---- Random data and host references ---- */

#define SAMPLE_SEED 0x2545f4914f6cdd1dull
#include "sample.h"

static float sample(bool specials)
{
	return sample_in(specials, -3, 7);
}

static uint32_t bits_of(float f)
{
	uint32_t b;
	memcpy(&b, &f, 4);
	return b;
}

static float from_bits(uint32_t b)
{
	float f;
	memcpy(&f, &b, 4);
	return f;
}

static __nv_fp8_interpretation_t interp(enum dli_dtype f)
{
	return f == DLI_DTYPE_F8E4M3 ? __NV_E4M3 : __NV_E5M2;
}

static const char *fmt_name(enum dli_dtype f)
{
	return f == DLI_DTYPE_F8E4M3 ? "e4m3" : f == DLI_DTYPE_F8E5M2 ? "e5m2" : f == DLI_DTYPE_F32 ? "f32" : "bf16";
}

/* cuda_fp8.h's host conversions: the reference casts. */
static uint8_t host_encode(float x, enum dli_dtype f)
{
	return (uint8_t)__nv_cvt_float_to_fp8(x, __NV_SATFINITE, interp(f));
}

static float host_decode(uint8_t c, enum dli_dtype f)
{
	const __half h = __half(__nv_cvt_fp8_to_halfraw(c, interp(f)));
	return __half2float(h);
}

/* max |x| with NaN winning, as bits. */
static uint32_t host_amax_bits(const float *x, size_t n)
{
	uint32_t m = 0;
	for (size_t i = 0; i < n; i++) {
		const uint32_t a = bits_of(x[i]) & 0x7fffffffu;
		m = a > m ? a : m;
	}
	return m;
}

/* ---- Host-side checks: the references, and every refusal (no device needed) ---- */

static void test_host_reference(void)
{
	CHECK_INT(host_encode(500.0f, DLI_DTYPE_F8E4M3), 0x7e); /* saturates to 448 */
	CHECK_INT(host_encode(-1e9f, DLI_DTYPE_F8E5M2), 0xfb);  /* to -57344, not -inf */
	CHECK_INT(host_encode(NAN, DLI_DTYPE_F8E4M3) & 0x7f, 0x7f);
	CHECK(host_decode(0x7e, DLI_DTYPE_F8E4M3) == 448.0f);
	CHECK(host_decode(0x01, DLI_DTYPE_F8E4M3) == 0x1p-9f);
	CHECK(host_decode(0x01, DLI_DTYPE_F8E5M2) == 0x1p-16f);
	CHECK(isinf(host_decode(0x7c, DLI_DTYPE_F8E5M2)));
}

/* A GEMM every check of which passes; the refusal cases change one field. Pointers are never
 * dereferenced: the arguments are refused before anything touches the device. */
static struct dli_tc_gemm valid_gemm(void)
{
	static float fake_scale;
	struct dli_tc_gemm g;
	memset(&g, 0, sizeof g);
	g.m = 32;
	g.n = 48;
	g.k = 64;
	g.x = (const void *)(uintptr_t)0x10000;
	g.w = (const void *)(uintptr_t)0x20000;
	g.y = (void *)(uintptr_t)0x30000;
	g.x_type = DLI_DTYPE_F8E4M3;
	g.w_type = DLI_DTYPE_F8E4M3;
	g.y_type = DLI_DTYPE_F32;
	g.x_scale_inv = &fake_scale;
	g.w_scale_inv = &fake_scale;
	g.alpha = 1.0f;
	return g;
}

static void expect_refusal(struct dli_tc *tc, const struct dli_tc_gemm &g, const char *part1,
			   const char *part2)
{
	struct dli_error err;
	memset(&err, 0, sizeof err);
	const int r = dli_tc_fp8_gemm(tc, &g, &err);
	CHECK_INT(r, -EINVAL);
	CHECK_INT(err.code, -EINVAL);
	CHECK_CONTAINS(err.message, part1);
	if (part2)
		CHECK_CONTAINS(err.message, part2);
}

/* tc may be NULL (no device) or a real context: the argument checks come first either way. */
static void test_gemm_refusals(struct dli_tc *tc)
{
	struct dli_tc_gemm g = valid_gemm();
	g.m = 20;
	expect_refusal(tc, g, "m is 20", "multiples of 16");
	g = valid_gemm();
	g.n = -16;
	expect_refusal(tc, g, "n is -16", "positive multiples of 16");
	g = valid_gemm();
	g.k = 0;
	expect_refusal(tc, g, "k is 0", NULL);
	g = valid_gemm();
	g.k = 72;
	expect_refusal(tc, g, "k is 72", NULL);
	g = valid_gemm();
	g.x_type = DLI_DTYPE_F32;
	expect_refusal(tc, g, "x is f32", "both must be FP8");
	g = valid_gemm();
	g.w_type = DLI_DTYPE_BF16;
	expect_refusal(tc, g, "w bf16", "both must be FP8");
	g = valid_gemm();
	g.x_type = DLI_DTYPE_F8E5M2;
	g.w_type = DLI_DTYPE_F8E5M2;
	expect_refusal(tc, g, "e5m2 x e5m2", "one operand must be e4m3");
	g = valid_gemm();
	g.y_type = DLI_DTYPE_F16;
	expect_refusal(tc, g, "y is f16", "f32 or bf16");
	g = valid_gemm();
	g.x = NULL;
	expect_refusal(tc, g, "x is NULL", NULL);
	g = valid_gemm();
	g.y = NULL;
	expect_refusal(tc, g, "y is NULL", NULL);
	g = valid_gemm();
	g.w = (const char *)g.w + 8;
	expect_refusal(tc, g, "w is not 16-byte aligned", NULL);
	g = valid_gemm();
	g.y = (char *)g.y + 4;
	expect_refusal(tc, g, "y is not 16-byte aligned", NULL);
	g = valid_gemm();
	g.x_scale_inv = NULL;
	expect_refusal(tc, g, "x_scale_inv is NULL", NULL);
	g = valid_gemm();
	g.w_scale_inv = NULL;
	expect_refusal(tc, g, "w_scale_inv is NULL", NULL);

	struct dli_error err;
	CHECK_INT(dli_tc_fp8_gemm(tc, NULL, &err), -EINVAL);
	CHECK_CONTAINS(err.message, "arguments are NULL");
	g = valid_gemm();
	g.m = 8;
	CHECK_INT(dli_tc_fp8_gemm(tc, &g, NULL), -EINVAL); /* err is optional */
	if (!tc) {
		g = valid_gemm();
		expect_refusal(NULL, g, "context is NULL", NULL);
	}
}

static void test_cast_refusals(void)
{
	static float fake[4];
	struct dli_error err;
	struct dli_tc_quantize q;
	memset(&q, 0, sizeof q);
	q.x = fake;
	q.scale = fake;
	q.rows = 2;
	q.cols = 2;

	q.format = DLI_DTYPE_BF16;
	CHECK_INT(dli_tc_quantize(&q, &err), -EINVAL);
	CHECK_INT(err.code, -EINVAL);
	CHECK_CONTAINS(err.message, "format is bf16, not e4m3 or e5m2");
	q.format = DLI_DTYPE_F8E4M3;
	q.rows = -1;
	CHECK_INT(dli_tc_quantize(&q, &err), -EINVAL);
	CHECK_CONTAINS(err.message, "negative size -1 x 2");
	q.rows = INT64_MAX / 2;
	q.cols = 3;
	CHECK_INT(dli_tc_quantize(&q, &err), -EINVAL);
	CHECK_CONTAINS(err.message, "overflow");
	q.rows = 2;
	q.cols = 2;
	q.x = NULL;
	CHECK_INT(dli_tc_quantize(&q, &err), -EINVAL);
	CHECK_CONTAINS(err.message, "x is NULL");
	q.x = fake;
	q.scale = NULL;
	CHECK_INT(dli_tc_quantize(&q, &err), -EINVAL);
	CHECK_CONTAINS(err.message, "scale is NULL");
	CHECK_INT(dli_tc_quantize(NULL, &err), -EINVAL);
	CHECK_CONTAINS(err.message, "arguments are NULL");

	uint8_t codes[4];
	CHECK_INT(dli_tc_dequantize(codes, 4, DLI_DTYPE_F32, fake, fake, NULL, &err), -EINVAL);
	CHECK_CONTAINS(err.message, "format is f32");
	CHECK_INT(dli_tc_dequantize(codes, -4, DLI_DTYPE_F8E5M2, fake, fake, NULL, &err), -EINVAL);
	CHECK_CONTAINS(err.message, "negative count -4");
	CHECK_INT(dli_tc_dequantize(codes, 4, DLI_DTYPE_F8E5M2, NULL, fake, NULL, &err), -EINVAL);
	CHECK_CONTAINS(err.message, "scale_inv is NULL");
	CHECK_INT(dli_tc_dequantize(NULL, 0, DLI_DTYPE_F8E5M2, NULL, NULL, NULL, &err), 0);

	CHECK_INT(dli_tc_scale_update(fake, 0, DLI_DTYPE_F8E4M3, 0.0, fake, NULL, NULL, &err),
		  -EINVAL);
	CHECK_CONTAINS(err.message, "history_len 0 is below 1");
	CHECK_INT(dli_tc_scale_update(fake, 1, DLI_DTYPE_I8, 0.0, fake, NULL, NULL, &err), -EINVAL);
	CHECK_CONTAINS(err.message, "format is i8");
	CHECK_INT(dli_tc_scale_update(fake, 1, DLI_DTYPE_F8E4M3, 0.0, NULL, NULL, NULL, &err),
		  -EINVAL);
	CHECK_CONTAINS(err.message, "scale is NULL");
}

/* ---- Device checks ---- */

static cudaStream_t stream;

template <typename T> static T *dev_alloc(size_t n)
{
	void *p = NULL;
	CUDA_OK(cudaMalloc(&p, n ? n * sizeof(T) : 1));
	return (T *)p;
}

static void put_float(float *d, float v)
{
	CUDA_OK(cudaMemcpy(d, &v, sizeof v, cudaMemcpyHostToDevice));
}

static float get_float(const float *d)
{
	float v;
	CUDA_OK(cudaMemcpy(&v, d, sizeof v, cudaMemcpyDeviceToHost));
	return v;
}

/* Codes, transposed codes, amax and scale_inv against the host, for one shape and scale. */
static void check_quantize(int64_t rows, int64_t cols, enum dli_dtype f, float scale,
			   bool specials, bool transpose)
{
	const size_t n = (size_t)(rows * cols);
	std::vector<float> x(n);
	for (size_t i = 0; i < n; i++)
		x[i] = sample(specials);
	float *dx = dev_alloc<float>(n), *dscale = dev_alloc<float>(1), *damax = dev_alloc<float>(1),
	      *dsinv = dev_alloc<float>(1);
	uint8_t *dq = dev_alloc<uint8_t>(n), *dqt = transpose ? dev_alloc<uint8_t>(n) : NULL;
	CUDA_OK(cudaMemcpy(dx, x.data(), n * sizeof(float), cudaMemcpyHostToDevice));
	put_float(dscale, scale);
	put_float(damax, from_bits(0x7fffffffu)); /* must be overwritten, not max'ed with */

	struct dli_tc_quantize q = {dx, rows, cols, f, dscale, dq, dqt, damax, dsinv, stream};
	TC_OK(dli_tc_quantize(&q, ERR));
	CUDA_OK(cudaStreamSynchronize(stream));

	std::vector<uint8_t> got(n), got_t(n);
	CUDA_OK(cudaMemcpy(got.data(), dq, n, cudaMemcpyDeviceToHost));
	if (transpose)
		CUDA_OK(cudaMemcpy(got_t.data(), dqt, n, cudaMemcpyDeviceToHost));
	size_t bad = 0, bad_t = 0;
	for (int64_t r = 0; r < rows; r++)
		for (int64_t c = 0; c < cols; c++) {
			const uint8_t want = host_encode(x[r * cols + c] * scale, f);
			if (got[r * cols + c] != want && bad++ < 3)
				fprintf(stderr, "quantize %s %lldx%lld scale %g: [%lld,%lld] %a -> "
					"0x%02x, host 0x%02x\n", fmt_name(f), (long long)rows,
					(long long)cols, scale, (long long)r, (long long)c,
					x[r * cols + c], got[r * cols + c], want);
			if (transpose && got_t[c * rows + r] != want && bad_t++ < 3)
				fprintf(stderr, "quantize %s %lldx%lld: transposed [%lld,%lld] 0x%02x, "
					"host 0x%02x\n", fmt_name(f), (long long)rows, (long long)cols,
					(long long)c, (long long)r, got_t[c * rows + r], want);
		}
	CHECK_INT(bad, 0);
	CHECK_INT(bad_t, 0);
	CHECK_INT(bits_of(get_float(damax)), host_amax_bits(x.data(), n));
	CHECK_INT(bits_of(get_float(dsinv)), bits_of(1.0f / scale));
	cudaFree(dx);
	cudaFree(dscale);
	cudaFree(damax);
	cudaFree(dsinv);
	cudaFree(dq);
	cudaFree(dqt);
}

static void test_quantize(void)
{
	const int64_t shapes[][2] = {{1, 1}, {3, 5}, {37, 53}, {64, 96}, {1000, 3}, {3, 1000},
				     {257, 1031}};
	const float scales[] = {1.0f, 0.37f, 1000.0f, 3.0e-3f};
	for (enum dli_dtype f : {DLI_DTYPE_F8E4M3, DLI_DTYPE_F8E5M2})
		for (const auto &s : shapes)
			for (float scale : scales)
				for (int t = 0; t < 2; t++) {
					check_quantize(s[0], s[1], f, scale, true, t);
					check_quantize(s[0], s[1], f, scale, false, t);
				}
	/* An empty tensor: amax 0, scale_inv still written. */
	float *dscale = dev_alloc<float>(1), *damax = dev_alloc<float>(1), *dsinv = dev_alloc<float>(1);
	put_float(dscale, 4.0f);
	put_float(damax, 7.0f);
	struct dli_tc_quantize q = {NULL, 0, 16, DLI_DTYPE_F8E4M3, dscale, NULL, NULL, damax, dsinv,
				    stream};
	TC_OK(dli_tc_quantize(&q, ERR));
	CUDA_OK(cudaStreamSynchronize(stream));
	CHECK(get_float(damax) == 0.0f);
	CHECK(get_float(dsinv) == 0.25f);
	cudaFree(dscale);
	cudaFree(damax);
	cudaFree(dsinv);
}

static void test_dequantize(void)
{
	uint8_t codes[256];
	for (int i = 0; i < 256; i++)
		codes[i] = (uint8_t)i;
	uint8_t *dq = dev_alloc<uint8_t>(256);
	float *dout = dev_alloc<float>(256), *dsinv = dev_alloc<float>(1);
	CUDA_OK(cudaMemcpy(dq, codes, 256, cudaMemcpyHostToDevice));
	for (enum dli_dtype f : {DLI_DTYPE_F8E4M3, DLI_DTYPE_F8E5M2})
		for (float si : {1.0f, 0.5f, 3.7f, 1e-30f}) {
			put_float(dsinv, si);
			TC_OK(dli_tc_dequantize(dq, 256, f, dsinv, dout, stream, ERR));
			CUDA_OK(cudaStreamSynchronize(stream));
			float got[256];
			CUDA_OK(cudaMemcpy(got, dout, sizeof got, cudaMemcpyDeviceToHost));
			int bad = 0;
			for (int i = 0; i < 256; i++) {
				const float want = host_decode((uint8_t)i, f) * si;
				const bool ok = isnan(want) ? isnan(got[i])
							    : bits_of(got[i]) == bits_of(want);
				if (!ok && bad++ < 3)
					fprintf(stderr, "dequantize %s 0x%02x * %g: %a, host %a\n",
						fmt_name(f), i, si, got[i], want);
			}
			CHECK_INT(bad, 0);
		}
	cudaFree(dq);
	cudaFree(dout);
	cudaFree(dsinv);
}

static void test_scale_update(void)
{
	const float histories[][3] = {
		{1.5f, 300.0f, 2.0f}, {0.0f, 0.0f, 0.0f},  {NAN, 1.0f, 2.0f}, {1.0f, INFINITY, 2.0f},
		{1e-40f, 0.0f, 0.0f}, {-5.0f, 4.0f, 1.0f}, {3e38f, 1.0f, 1.0f},
	};
	float *dh = dev_alloc<float>(3), *ds = dev_alloc<float>(1), *dsi = dev_alloc<float>(1);
	for (const auto &h : histories)
		for (int len : {1, 3})
			for (enum dli_dtype f : {DLI_DTYPE_F8E4M3, DLI_DTYPE_F8E5M2})
				for (double margin : {0.0, 1.0, 3.0}) {
					CUDA_OK(cudaMemcpy(dh, h, sizeof h, cudaMemcpyHostToDevice));
					TC_OK(dli_tc_scale_update(dh, len, f, margin, ds, dsi, stream, ERR));
					CUDA_OK(cudaStreamSynchronize(stream));
					const float amax = from_bits(host_amax_bits(h, (size_t)len));
					const float want = fp8_current_scale(
						amax, f == DLI_DTYPE_F8E4M3 ? 448.0f : 57344.0f, margin);
					CHECK_INT(bits_of(get_float(ds)), bits_of(want));
					CHECK_INT(bits_of(get_float(dsi)), bits_of(1.0f / want));
				}
	cudaFree(dh);
	cudaFree(ds);
	cudaFree(dsi);
}

/* One FP8 operand made the way the trainer makes it: amax from a first quantize pass, the scale
 * from it on the device, then the codes. Returns the codes and scale_inv as the host sees them. */
struct operand {
	uint8_t *codes;   /* device */
	float *scale_inv; /* device */
	std::vector<uint8_t> host_codes;
	float host_scale_inv;
};

static operand make_operand(int64_t rows, int64_t cols, enum dli_dtype f, float magnitude)
{
	const size_t n = (size_t)(rows * cols);
	std::vector<float> x(n);
	for (size_t i = 0; i < n; i++)
		x[i] = gauss() * magnitude;
	operand o;
	float *dx = dev_alloc<float>(n), *damax = dev_alloc<float>(1), *dscale = dev_alloc<float>(1);
	o.codes = dev_alloc<uint8_t>(n);
	o.scale_inv = dev_alloc<float>(1);
	CUDA_OK(cudaMemcpy(dx, x.data(), n * sizeof(float), cudaMemcpyHostToDevice));
	put_float(dscale, 1.0f);
	struct dli_tc_quantize q = {dx, rows, cols, f, dscale, NULL, NULL, damax, NULL, stream};
	TC_OK(dli_tc_quantize(&q, ERR));
	TC_OK(dli_tc_scale_update(damax, 1, f, 0.0, dscale, NULL, stream, ERR));
	q.out = o.codes;
	q.amax = NULL;
	q.scale_inv = o.scale_inv;
	TC_OK(dli_tc_quantize(&q, ERR));
	CUDA_OK(cudaStreamSynchronize(stream));
	o.host_codes.resize(n);
	CUDA_OK(cudaMemcpy(o.host_codes.data(), o.codes, n, cudaMemcpyDeviceToHost));
	o.host_scale_inv = get_float(o.scale_inv);
	cudaFree(dx);
	cudaFree(damax);
	cudaFree(dscale);
	return o;
}

static void free_operand(operand &o)
{
	cudaFree(o.codes);
	cudaFree(o.scale_inv);
}

static float y_value(const std::vector<uint8_t> &buf, size_t i, enum dli_dtype t)
{
	if (t == DLI_DTYPE_F32) {
		float v;
		memcpy(&v, &buf[i * 4], 4);
		return v;
	}
	uint16_t b;
	memcpy(&b, &buf[i * 2], 2);
	return from_bits((uint32_t)b << 16);
}

static double worst_error; /* the largest |y - ref| / (scale * sum |terms|) seen */

/* One GEMM against the host product of the decoded codes. Products of two FP8 values are exact in
 * fp32, so the GEMM's only errors are its accumulation (on Hopper partly at reduced precision
 * inside the tensor cores between promotions to fp32, more with fast accumulation) and the output
 * rounding: the tolerance is a fraction of the sum of |terms|, plus bf16's rounding. A wrong
 * layout, type or scale is off by O(1) of it. Returns the result bytes for the repeat check. */
static std::vector<uint8_t> check_gemm(struct dli_tc *tc, int64_t m, int64_t n, int64_t k,
				       enum dli_dtype xt, enum dli_dtype wt, enum dli_dtype yt,
				       float alpha, float beta, bool fast)
{
	operand x = make_operand(m, k, xt, xt == DLI_DTYPE_F8E5M2 ? 1e-3f : 2.0f);
	operand w = make_operand(n, k, wt, 0.05f);
	const size_t ysize = yt == DLI_DTYPE_F32 ? 4 : 2;
	std::vector<uint8_t> y0((size_t)(m * n) * ysize);
	for (size_t i = 0; i < (size_t)(m * n); i++) {
		/* With beta 0, y holds NaNs that must not reach the result. */
		const float v = beta == 0.0f ? NAN : gauss();
		const uint32_t b = bits_of(v);
		if (yt == DLI_DTYPE_F32)
			memcpy(&y0[i * 4], &b, 4);
		else {
			const uint16_t h = (uint16_t)(b >> 16);
			memcpy(&y0[i * 2], &h, 2);
		}
	}
	uint8_t *dy = dev_alloc<uint8_t>(y0.size());
	CUDA_OK(cudaMemcpy(dy, y0.data(), y0.size(), cudaMemcpyHostToDevice));

	struct dli_tc_gemm g;
	memset(&g, 0, sizeof g);
	g.m = m;
	g.n = n;
	g.k = k;
	g.x = x.codes;
	g.x_type = xt;
	g.x_scale_inv = x.scale_inv;
	g.w = w.codes;
	g.w_type = wt;
	g.w_scale_inv = w.scale_inv;
	g.y = dy;
	g.y_type = yt;
	g.alpha = alpha;
	g.beta = beta;
	g.fast_accum = fast;
	g.stream = stream;
	struct dli_error err;
	memset(&err, 0, sizeof err);
	const int r = dli_tc_fp8_gemm(tc, &g, &err);
	CHECK_INT(r, 0);
	if (r != 0)
		fprintf(stderr, "gemm: %s\n", err.message);
	CUDA_OK(cudaStreamSynchronize(stream));
	std::vector<uint8_t> got(y0.size());
	CUDA_OK(cudaMemcpy(got.data(), dy, got.size(), cudaMemcpyDeviceToHost));

	std::vector<double> xd((size_t)(m * k)), wd((size_t)(n * k));
	for (size_t i = 0; i < xd.size(); i++)
		xd[i] = host_decode(x.host_codes[i], xt);
	for (size_t i = 0; i < wd.size(); i++)
		wd[i] = host_decode(w.host_codes[i], wt);
	const double s = (double)alpha * x.host_scale_inv * w.host_scale_inv;
	const double rel = fast ? 0x1p-5 : 0x1p-8;
	double worst = 0.0;
	int bad = 0;
	for (int64_t i = 0; i < m && r == 0; i++)
		for (int64_t j = 0; j < n; j++) {
			double sum = 0.0, sum_abs = 0.0;
			for (int64_t kk = 0; kk < k; kk++) {
				const double t = xd[i * k + kk] * wd[j * k + kk];
				sum += t;
				sum_abs += fabs(t);
			}
			const size_t at = (size_t)(i * n + j);
			const double c = beta == 0.0f ? 0.0 : (double)beta * y_value(y0, at, yt);
			const double ref = s * sum + c;
			const double v = y_value(got, at, yt);
			const double scale_sum = fabs(s) * sum_abs + fabs(c) * 0x1p-23 + 1e-30;
			double tol = rel * scale_sum;
			if (yt == DLI_DTYPE_BF16)
				tol += 0x1p-8 * fabs(ref);
			const double e = fabs(v - ref);
			if (!(e <= tol) && bad++ < 3)
				fprintf(stderr, "gemm %s x %s -> %s m %lld n %lld k %lld: y[%lld,%lld] "
					"%.9g, host %.9g (tolerance %.3g)\n", fmt_name(xt), fmt_name(wt),
					fmt_name(yt), (long long)m, (long long)n, (long long)k,
					(long long)i, (long long)j, v, ref, tol);
			if (yt == DLI_DTYPE_F32 && !fast && e / scale_sum > worst)
				worst = e / scale_sum;
		}
	CHECK_INT(bad, 0);
	if (worst > worst_error)
		worst_error = worst;
	cudaFree(dy);
	free_operand(x);
	free_operand(w);
	return got;
}

static void test_gemm(struct dli_tc *tc)
{
	const int64_t shapes[][3] = {{16, 16, 16}, {32, 48, 64}, {128, 96, 256}, {64, 256, 1024},
				     {256, 128, 4096}, {48, 16, 128}};
	const enum dli_dtype pairs[][2] = {{DLI_DTYPE_F8E4M3, DLI_DTYPE_F8E4M3},
					   {DLI_DTYPE_F8E5M2, DLI_DTYPE_F8E4M3},
					   {DLI_DTYPE_F8E4M3, DLI_DTYPE_F8E5M2}};
	for (const auto &s : shapes)
		for (const auto &p : pairs)
			for (enum dli_dtype yt : {DLI_DTYPE_F32, DLI_DTYPE_BF16})
				check_gemm(tc, s[0], s[1], s[2], p[0], p[1], yt, 1.0f, 0.0f, false);
	/* alpha and beta (y read and accumulated into), and fast accumulation. */
	check_gemm(tc, 64, 32, 128, DLI_DTYPE_F8E4M3, DLI_DTYPE_F8E4M3, DLI_DTYPE_F32, 0.5f, 0.75f,
		   false);
	check_gemm(tc, 64, 32, 128, DLI_DTYPE_F8E5M2, DLI_DTYPE_F8E4M3, DLI_DTYPE_BF16, -2.0f, 1.0f,
		   false);
	check_gemm(tc, 128, 64, 512, DLI_DTYPE_F8E4M3, DLI_DTYPE_F8E4M3, DLI_DTYPE_F32, 1.0f, 0.0f,
		   true);
	printf("largest GEMM error (f32 out): %.3g of scale * sum |terms|\n", worst_error);

	/* The cached plan gives the same bits again (same rng state, same data). */
	const uint64_t saved = rng;
	const std::vector<uint8_t> a = check_gemm(tc, 128, 96, 256, DLI_DTYPE_F8E4M3,
						  DLI_DTYPE_F8E4M3, DLI_DTYPE_F32, 1.0f, 0.0f, false);
	rng = saved;
	const std::vector<uint8_t> b = check_gemm(tc, 128, 96, 256, DLI_DTYPE_F8E4M3,
						  DLI_DTYPE_F8E4M3, DLI_DTYPE_F32, 1.0f, 0.0f, false);
	CHECK(a == b);
}

/* ---- The GEMM-seam backend (gemm_cuda.h) ---- */

static int fallback_calls;

static int fallback_run(void *state, const struct dlt_gemm *g)
{
	(void)state;
	(void)g;
	fallback_calls++;
	return 0;
}

static const struct dlt_gemm_backend fallback = {"counting fallback", NULL, fallback_run};

static void test_backend_refusals(void)
{
	struct dlt_gemm_backend be;
	struct dli_error err;
	memset(&be, 0, sizeof be);
	CHECK_INT(dlt_gemm_cuda_create(NULL, &be, &err), -EINVAL);
	CHECK_CONTAINS(err.message, "fallback backend is NULL");
	dlt_gemm_cuda_destroy(&be); /* never filled: nothing to free */
	dlt_gemm_cuda_destroy(NULL);
	CHECK_STR(dlt_gemm_cuda_last_error(&be), "");
}

/* op(a) . op(b) for every transpose, sizes that are not multiples of 16 (the backend pads), both
 * operand orders of the formats, against the host product of the decoded codes; high-precision
 * GEMMs go to the fallback. */
static void test_backend(void)
{
	struct dlt_gemm_backend be;
	struct dli_error err;
	memset(&err, 0, sizeof err);
	const int r = dlt_gemm_cuda_create(&fallback, &be, &err);
	CHECK_INT(r, 0);
	if (r < 0) {
		fprintf(stderr, "dlt_gemm_cuda_create: %s\n", err.message);
		return;
	}
	const int shapes[][3] = {{5, 7, 9}, {33, 17, 40}, {16, 32, 48}, {1, 1, 1}, {64, 3, 200}};
	const enum dli_dtype pairs[][2] = {{DLI_DTYPE_F8E4M3, DLI_DTYPE_F8E4M3},
					   {DLI_DTYPE_F8E5M2, DLI_DTYPE_F8E4M3},
					   {DLI_DTYPE_F8E4M3, DLI_DTYPE_F8E5M2}};
	for (const auto &s : shapes)
		for (const auto &p : pairs)
			for (int t = 0; t < 4; t++) {
				const int m = s[0], n = s[1], k = s[2];
				const bool ta = t & 1, tb = t & 2;
				std::vector<uint8_t> a((size_t)(m * k)), b((size_t)(k * n));
				for (auto &c : a)
					c = host_encode(gauss() * 4.0f, p[0]);
				for (auto &c : b)
					c = host_encode(gauss() * 4.0f, p[1]);
				const float sa = 0.125f, sb = 3.0f;
				std::vector<float> c((size_t)(m * n), NAN);
				struct dlt_gemm g;
				memset(&g, 0, sizeof g);
				g.m = m;
				g.n = n;
				g.k = k;
				g.trans_a = ta;
				g.trans_b = tb;
				g.a.codes = a.data();
				g.a.format = p[0];
				g.a.scale_inv = &sa;
				g.b.codes = b.data();
				g.b.format = p[1];
				g.b.scale_inv = &sb;
				g.c = c.data();
				g.fp8 = true;
				const int rr = be.run(be.state, &g);
				CHECK_INT(rr, 0);
				if (rr < 0) {
					fprintf(stderr, "backend run: %s\n", dlt_gemm_cuda_last_error(&be));
					continue;
				}
				int bad = 0;
				for (int i = 0; i < m; i++)
					for (int j = 0; j < n; j++) {
						double sum = 0.0, sum_abs = 0.0;
						for (int kk = 0; kk < k; kk++) {
							const uint8_t ca = ta ? a[kk * m + i] : a[i * k + kk];
							const uint8_t cb = tb ? b[j * k + kk] : b[kk * n + j];
							const double v = (double)host_decode(ca, p[0]) *
									 host_decode(cb, p[1]);
							sum += v;
							sum_abs += fabs(v);
						}
						const double ref = (double)sa * sb * sum;
						const double tol = 0x1p-8 * sa * sb * sum_abs + 1e-30;
						if (!(fabs(c[i * n + j] - ref) <= tol) && bad++ < 3)
							fprintf(stderr, "backend %s x %s m %d n %d k %d "
								"trans %d%d: c[%d,%d] %.9g, host %.9g\n",
								fmt_name(p[0]), fmt_name(p[1]), m, n, k, ta,
								tb, i, j, c[i * n + j], ref);
					}
				CHECK_INT(bad, 0);
			}

	/* Not FP8, or e5m2 x e5m2: the fallback's. */
	struct dlt_gemm g;
	memset(&g, 0, sizeof g);
	g.m = g.n = g.k = 16;
	CHECK_INT(be.run(be.state, &g), 0);
	uint8_t codes[1] = {0};
	const float one = 1.0f;
	g.fp8 = true;
	g.a = {NULL, codes, DLI_DTYPE_F8E5M2, &one};
	g.b = g.a;
	CHECK_INT(be.run(be.state, &g), 0);
	CHECK_INT(fallback_calls, 2);
	dlt_gemm_cuda_destroy(&be);
	CHECK(be.state == NULL);
}

int main(void)
{
	test_host_reference();
	test_gemm_refusals(NULL);
	test_cast_refusals();
	test_backend_refusals();
	dli_tc_destroy(NULL);

	int devices = 0;
	cudaError_t e = cudaGetDeviceCount(&devices);
	if (e != cudaSuccess || devices == 0) {
		/* Without a device the context is refused, with a reason. */
		struct dli_tc *tc = NULL;
		struct dli_error err;
		memset(&err, 0, sizeof err);
		CHECK_INT(dli_tc_create(DLI_TC_DEFAULT_WORKSPACE, &tc, &err), -ENODEV);
		CHECK(tc == NULL);
		/* No driver or no GPU reads as such, not as a driver to upgrade. */
		CHECK_CONTAINS(err.message, e == cudaErrorInsufficientDriver || e == cudaErrorNoDevice
						    ? "no CUDA GPU found (cudaGetDevice: cudaError"
						    : "no usable CUDA device");
		struct dlt_gemm_backend be;
		CHECK_INT(dlt_gemm_cuda_create(&fallback, &be, &err), -ENODEV);
		CHECK(be.state == NULL);
		printf("host-side checks: ");
		if (check_exit())
			return 1;
		printf("SKIP: no CUDA device (%s), the device checks need one\n",
		       e != cudaSuccess ? cudaGetErrorString(e) : "cudaGetDeviceCount found 0");
		return 77;
	}
	cudaDeviceProp prop;
	CUDA_OK(cudaGetDeviceProperties(&prop, 0));
	printf("device 0: %s (sm_%d%d)\n", prop.name, prop.major, prop.minor);
	CUDA_OK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));

	struct dli_tc *tc = NULL;
	TC_OK(dli_tc_create(DLI_TC_DEFAULT_WORKSPACE, &tc, ERR));
	test_gemm_refusals(tc);
	test_quantize();
	test_dequantize();
	test_scale_update();

	bool gemm_skipped = false;
	if (prop.major * 10 + prop.minor >= 89) {
		test_gemm(tc);
		test_backend();
	} else {
		struct dli_tc_gemm g = valid_gemm();
		struct dli_error err;
		CHECK_INT(dli_tc_fp8_gemm(tc, &g, &err), -ENOTSUP);
		CHECK_CONTAINS(err.message, "FP8 GEMMs need 8.9");
		printf("FP8 GEMM checks skipped: sm_%d%d has no FP8 tensor cores\n", prop.major,
		       prop.minor);
		gemm_skipped = true;
	}
	dli_tc_destroy(tc);
	CUDA_OK(cudaStreamDestroy(stream));
	CUDA_OK(cudaGetLastError());
	if (check_exit())
		return 1;
	return gemm_skipped ? 77 : 0;
}
