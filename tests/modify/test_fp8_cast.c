/* The public FP8 casts (dli_fp8_cast, dli_fp8_current_scale), the amax behind the host table's
 * tensor_amax and its block_dynamic_range, against the kernels' scalar encode/decode and the
 * formulas of docs/statistics.md written out here; and their refusals. */
#include <errno.h>
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <dlinspect/dlinspect.h>

#include "check.h"
#include "host-private.h" /* dli_host_template */
#include "kernels-private.h" /* dli_fp8_encode/decode */
#include "fp8-private.h"     /* dli_tensor_amax */

#define N 10007

static struct dli_tensor tensor(void *data, enum dli_dtype dtype, int64_t n)
{
	return (struct dli_tensor){.data = data, .dtype = dtype, .ndim = 1, .shape = {n},
				   .contiguous = true};
}

static bool same_float(float a, float b)
{
	return (isnan(a) && isnan(b)) || !memcmp(&a, &b, sizeof a);
}

/* Every f32 class: normals over the whole exponent range, subnormals, +-0, +-inf, NaNs. */
static void fill(float *x, size_t n)
{
	uint64_t s = 12345;
	for (size_t i = 0; i < n; i++) {
		s = s * 6364136223846793005ull + 1442695040888963407ull;
		uint32_t u = (uint32_t)(s >> 32);
		memcpy(&x[i], &u, 4);
	}
	x[0] = 0.0f, x[1] = -0.0f, x[2] = INFINITY, x[3] = -INFINITY, x[4] = NAN, x[5] = 448.0f;
	x[6] = 464.0f /* the E4M3 tie above the max */, x[7] = 0x1p-10f, x[8] = 0x1p-17f;
}

static void test_cast_values(void)
{
	float *x = malloc(N * sizeof *x), *y = malloc(N * sizeof *y);
	uint8_t *q = malloc(N);
	uint16_t *b = malloc(N * sizeof *b);
	fill(x, N);
	const float scales[] = {1.0f, 3.5f, 0x1p-6f, 448.0f / 70000.0f, 0x1p100f};
	const enum dli_dtype formats[] = {DLI_DTYPE_F8E4M3, DLI_DTYPE_F8E5M2};
	for (size_t f = 0; f < 2; f++) {
		for (size_t k = 0; k < sizeof scales / sizeof scales[0]; k++) {
			enum dli_dtype fmt = formats[f];
			float s = scales[k];
			struct dli_tensor in = tensor(x, DLI_DTYPE_F32, N), out = tensor(q, fmt, N);
			CHECK_INT(dli_fp8_cast(&in, &out, fmt, s), 0);
			size_t bad_q = 0, bad_y = 0;
			for (size_t i = 0; i < N; i++)
				bad_q += q[i] != dli_fp8_encode(x[i] * s, fmt);
			out = tensor(y, DLI_DTYPE_F32, N);
			CHECK_INT(dli_fp8_cast(&in, &out, fmt, s), 0);
			for (size_t i = 0; i < N; i++)
				bad_y += !same_float(
					y[i], dli_fp8_decode(dli_fp8_encode(x[i] * s, fmt), fmt) *
						      (1.0f / s));
			CHECK_INT(bad_q, 0);
			CHECK_INT(bad_y, 0);
		}
	}
	/* bf16 in: its values widened exactly. */
	for (size_t i = 0; i < N; i++) {
		uint32_t u;
		memcpy(&u, &x[i], 4);
		b[i] = (uint16_t)(u >> 16);
	}
	struct dli_tensor in = tensor(b, DLI_DTYPE_BF16, N), out = tensor(q, DLI_DTYPE_F8E5M2, N);
	CHECK_INT(dli_fp8_cast(&in, &out, DLI_DTYPE_F8E5M2, 3.5f), 0);
	size_t bad = 0;
	for (size_t i = 0; i < N; i++) {
		uint32_t u = (uint32_t)b[i] << 16;
		float v;
		memcpy(&v, &u, 4);
		bad += q[i] != dli_fp8_encode(v * 3.5f, DLI_DTYPE_F8E5M2);
	}
	CHECK_INT(bad, 0);
	/* A 2-d shape counts its elements; an empty tensor casts nothing. */
	struct dli_tensor in2 = {.data = x, .dtype = DLI_DTYPE_F32, .ndim = 2, .shape = {7, 3},
				 .contiguous = true};
	out = tensor(q, DLI_DTYPE_F8E4M3, 21);
	CHECK_INT(dli_fp8_cast(&in2, &out, DLI_DTYPE_F8E4M3, 1.0f), 0);
	in = tensor(NULL, DLI_DTYPE_F32, 0), out = tensor(NULL, DLI_DTYPE_F32, 0);
	CHECK_INT(dli_fp8_cast(&in, &out, DLI_DTYPE_F8E4M3, 1.0f), 0);
	free(b);
	free(q);
	free(y);
	free(x);
}

static void test_cast_refusals(void)
{
	float x[4] = {1, 2, 3, 4}, y[4];
	const enum dli_dtype E4 = DLI_DTYPE_F8E4M3;
	struct dli_tensor in = tensor(x, DLI_DTYPE_F32, 4), out = tensor(y, DLI_DTYPE_F32, 4);
	CHECK_INT(dli_fp8_cast(NULL, &out, E4, 1.0f), -EINVAL);
	CHECK_INT(dli_fp8_cast(&in, NULL, E4, 1.0f), -EINVAL);
	CHECK_INT(dli_fp8_cast(&in, &out, DLI_DTYPE_F32, 1.0f), -EINVAL);  /* not an FP8 format */
	CHECK_INT(dli_fp8_cast(&in, &out, DLI_DTYPE_COUNT, 1.0f), -EINVAL);
	const float bad_scales[] = {0.0f, -0.0f, -1.0f, INFINITY, NAN};
	for (size_t i = 0; i < 5; i++) {
		CHECK_INT(dli_fp8_cast(&in, &out, E4, bad_scales[i]), -EINVAL);
		/* Refused alike when there is nothing to cast. */
		struct dli_tensor e = tensor(NULL, DLI_DTYPE_F32, 0);
		CHECK_INT(dli_fp8_cast(&e, &e, E4, bad_scales[i]), -EINVAL);
	}
	out.shape[0] = 3;
	CHECK_INT(dli_fp8_cast(&in, &out, E4, 1.0f), -EINVAL); /* element counts differ */
	out.shape[0] = 4;
	out.dtype = DLI_DTYPE_F64; /* neither f32, f16, bf16 nor the format */
	CHECK_INT(dli_fp8_cast(&in, &out, E4, 1.0f), -EINVAL);
	out.dtype = DLI_DTYPE_F8E5M2; /* codes of the other format */
	CHECK_INT(dli_fp8_cast(&in, &out, E4, 1.0f), -EINVAL);
	out.dtype = DLI_DTYPE_F32;
	in.dtype = DLI_DTYPE_I32;
	CHECK_INT(dli_fp8_cast(&in, &out, E4, 1.0f), -EINVAL);
	in.dtype = DLI_DTYPE_F8E4M3; /* already FP8 */
	CHECK_INT(dli_fp8_cast(&in, &out, E4, 1.0f), -EINVAL);
	in.dtype = DLI_DTYPE_F32;
	in.contiguous = false;
	CHECK_INT(dli_fp8_cast(&in, &out, E4, 1.0f), -EINVAL);
	in.contiguous = true;
	in.ndim = DLI_TENSOR_MAX_DIMS + 1;
	CHECK_INT(dli_fp8_cast(&in, &out, E4, 1.0f), -EINVAL);
	in.ndim = 1;
	in.shape[0] = -4;
	CHECK_INT(dli_fp8_cast(&in, &out, E4, 1.0f), -EINVAL);
	in.shape[0] = 4;
	in.data = NULL;
	CHECK_INT(dli_fp8_cast(&in, &out, E4, 1.0f), -EINVAL);
	in.data = x;
	in.device.type = DLI_DEVICE_CUDA;
	CHECK_INT(dli_fp8_cast(&in, &out, E4, 1.0f), -ENOTSUP);
	in.device.type = DLI_DEVICE_CPU;
	out.device.type = DLI_DEVICE_CUDA;
	CHECK_INT(dli_fp8_cast(&in, &out, E4, 1.0f), -ENOTSUP);
	out.device.type = DLI_DEVICE_CPU;
	/* The cast writes out densely: a strided out would get its values in the wrong places. */
	out.contiguous = false;
	CHECK_INT(dli_fp8_cast(&in, &out, E4, 1.0f), -EINVAL);
	out.dtype = E4;
	CHECK_INT(dli_fp8_cast(&in, &out, E4, 1.0f), -EINVAL);
	out = tensor(y, DLI_DTYPE_F32, 4);
	CHECK_INT(dli_fp8_cast(&in, &out, E4, 1.0f), 0);
}

/* fp8_max / amax / 2^margin with TransformerEngine's float division; 1 without a usable amax. */
static void test_current_scale(void)
{
	const float amaxes[] = {1.0f, 70000.0f, 3.0f, 0x1p-20f, 1e-3f};
	for (size_t i = 0; i < 5; i++) {
		float a = amaxes[i];
		CHECK(dli_fp8_current_scale(a, DLI_DTYPE_F8E4M3, 0) == 448.0f / a);
		CHECK(dli_fp8_current_scale(a, DLI_DTYPE_F8E5M2, 0) == 57344.0f / a);
		CHECK(dli_fp8_current_scale(a, DLI_DTYPE_F8E4M3, 1) == 448.0f / a / 2);
		CHECK(dli_fp8_current_scale(a, DLI_DTYPE_F8E5M2, 1) == 57344.0f / a / 2);
	}
	CHECK(dli_fp8_current_scale(0.0f, DLI_DTYPE_F8E4M3, 0) == 1.0f);
	CHECK(dli_fp8_current_scale(INFINITY, DLI_DTYPE_F8E4M3, 0) == 1.0f);
	CHECK(dli_fp8_current_scale(NAN, DLI_DTYPE_F8E5M2, 1) == 1.0f);
	CHECK(dli_fp8_current_scale(0x1p-149f, DLI_DTYPE_F8E5M2, 0) == FLT_MAX);
}

/* max |x| over the non-NaN elements: what PerTensorScaling and FakeQuant scale by. */
static void test_tensor_amax(void)
{
	CHECK(dli_host_template.tensor_amax == dli_tensor_amax);
	CHECK(DLI_HAS_MEMBER(&dli_host_template, struct dli_host, tensor_amax));
	float x[5] = {1.0f, -3.0f, NAN, 2.0f, -NAN}, a = -1;
	struct dli_tensor t = tensor(x, DLI_DTYPE_F32, 5);
	CHECK_INT(dli_tensor_amax(&t, &a), 0);
	CHECK(a == 3.0f);
	x[0] = -INFINITY;
	CHECK_INT(dli_tensor_amax(&t, &a), 0);
	CHECK(a == INFINITY);
	float nans[3] = {NAN, NAN, -NAN};
	t = tensor(nans, DLI_DTYPE_F32, 3);
	CHECK_INT(dli_tensor_amax(&t, &a), 0);
	CHECK(a == 0.0f);
	t = tensor(NULL, DLI_DTYPE_F32, 0);
	CHECK_INT(dli_tensor_amax(&t, &a), 0);
	CHECK(a == 0.0f);
	uint16_t b[3] = {0x3f80 /* 1 */, 0xc2f7 /* -123.5 */, 0x7fc0 /* NaN */};
	t = tensor(b, DLI_DTYPE_BF16, 3);
	CHECK_INT(dli_tensor_amax(&t, &a), 0);
	CHECK(a == 123.5f);
	uint16_t h[2] = {0x3c00 /* 1 */, 0xfbff /* -65504 */};
	t = tensor(h, DLI_DTYPE_F16, 2);
	CHECK_INT(dli_tensor_amax(&t, &a), 0);
	CHECK(a == 65504.0f);

	t = tensor(x, DLI_DTYPE_F32, 5);
	CHECK_INT(dli_tensor_amax(NULL, &a), -EINVAL);
	CHECK_INT(dli_tensor_amax(&t, NULL), -EINVAL);
	t.dtype = DLI_DTYPE_F64;
	CHECK_INT(dli_tensor_amax(&t, &a), -EINVAL);
	t.dtype = DLI_DTYPE_F32;
	t.contiguous = false;
	CHECK_INT(dli_tensor_amax(&t, &a), -EINVAL);
	t.contiguous = true;
	t.ndim = -1;
	CHECK_INT(dli_tensor_amax(&t, &a), -EINVAL);
	t.ndim = 1;
	t.device.type = DLI_DEVICE_CUDA;
	CHECK_INT(dli_tensor_amax(&t, &a), -ENOTSUP);
}

/* max_blockwise_dynamic_range written out: each element's block by its index, the blocks' max and
 * nonzero min in doubles, log2(max) - log2(min) per block, the largest; NaN propagates. */
static double naive_block_range(const float *x, int64_t rows, int64_t cols, int64_t bs, int dims,
				bool columnwise)
{
	int64_t nb = dims == 2 ? ((rows + bs - 1) / bs) * ((cols + bs - 1) / bs)
			       : (rows * cols + bs - 1) / bs;
	double *hi = calloc((size_t)nb, sizeof *hi), *lo = malloc((size_t)nb * sizeof *lo);
	bool *nan = calloc((size_t)nb, 1);
	CHECK(hi && lo && nan);
	for (int64_t b = 0; b < nb; b++)
		lo[b] = INFINITY;
	for (int64_t i = 0; i < rows; i++)
		for (int64_t j = 0; j < cols; j++) {
			int64_t b = dims == 2 ? (i / bs) * ((cols + bs - 1) / bs) + j / bs
				    : columnwise ? (j * rows + i) / bs
						 : (i * cols + j) / bs;
			double a = fabs((double)x[i * cols + j]);
			if (isnan(a))
				nan[b] = true;
			else {
				hi[b] = a > hi[b] ? a : hi[b];
				if (a != 0 && a < lo[b])
					lo[b] = a;
			}
		}
	double out = 0;
	bool any_nan = false;
	for (int64_t b = 0; b < nb; b++) {
		if (nan[b] || (hi[b] != 0 && isnan(log2(hi[b]) - log2(lo[b])))) {
			any_nan = true;
			continue;
		}
		double dr = hi[b] != 0 ? log2(hi[b]) - log2(lo[b]) : 0;
		out = dr > out ? dr : out;
	}
	free(hi);
	free(lo);
	free(nan);
	return any_nan ? NAN : out;
}

/* Shapes past the pass's chunk (2048 elements) and panel (4096 columns), blocks longer than a
 * chunk, rows that do and do not split into blocks; then the contract's refusals. */
static void test_block_range(void)
{
	CHECK(dli_host_template.block_dynamic_range == dli_tensor_block_range);
	static const int64_t shapes[][2] = {{3, 4100}, {64, 4097}, {4096, 3}, {1, 9000}, {130, 130},
					    {7, 2049}, {256, 4096}};
	static const int64_t sizes[] = {1, 2, 3, 16, 32, 128, 5000};
	uint64_t s = 99;
	for (size_t k = 0; k < sizeof shapes / sizeof shapes[0]; k++) {
		int64_t rows = shapes[k][0], cols = shapes[k][1], n = rows * cols;
		float *x = malloc((size_t)n * sizeof *x);
		CHECK(x);
		for (int64_t i = 0; i < n; i++) {
			s = s * 6364136223846793005ull + 1442695040888963407ull;
			int e = (int)(s >> 58) - 32; /* 2^-32 .. 2^31 */
			x[i] = (s >> 20 & 7) == 0 ? 0.0f : ldexpf((float)(s >> 40 & 0xffff) + 1.0f, e);
			if (s >> 30 & 1)
				x[i] = -x[i];
		}
		if (k == 4)
			x[n / 2] = NAN;
		if (k == 5)
			x[3] = INFINITY;
		struct dli_tensor t = {.data = x, .dtype = DLI_DTYPE_F32, .ndim = 2,
				       .shape = {rows, cols}, .contiguous = true};
		for (size_t b = 0; b < sizeof sizes / sizeof sizes[0]; b++)
			for (int c = 0; c < 3; c++) {
				int dims = c == 2 ? 2 : 1;
				bool cw = c == 1;
				double got = -1, want = naive_block_range(x, rows, cols, sizes[b], dims, cw);
				CHECK_INT(dli_tensor_block_range(&t, sizes[b], dims, cw, &got), 0);
				bool ok = (isnan(got) && isnan(want)) || got == want ||
					  fabs(got - want) <= 1e-12 * (1 + fabs(want));
				CHECK(ok);
				if (!ok)
					fprintf(stderr, "  %lld x %lld, block %lld, dims %d%s: %.17g, want "
						"%.17g\n", (long long)rows, (long long)cols,
						(long long)sizes[b], dims, cw ? " columnwise" : "", got, want);
			}
		/* A block as long as the tensor, however it is written (up to 2^63 - 1). */
		if (k == 2 || k == 4)
			for (int c = 0; c < 3; c++) {
				double got = -1, want = naive_block_range(x, rows, cols, n, 1, false);
				CHECK_INT(dli_tensor_block_range(&t, INT64_MAX, c == 2 ? 2 : 1, c == 1,
								 &got),
					  0);
				CHECK((isnan(got) && isnan(want)) || fabs(got - want) <= 1e-12 * (1 + fabs(want)));
			}
		free(x);
	}

	float x[6] = {1, 2, 0, 0, 8, 0}, v = -1;
	double d = -1;
	struct dli_tensor t = tensor(x, DLI_DTYPE_F32, 6);
	CHECK_INT(dli_tensor_block_range(&t, 2, 1, false, &d), 0);
	CHECK(d == 1.0); /* {1, 2}: 1; {0, 0}: 0; {8, 0}: 0 */
	CHECK_INT(dli_tensor_block_range(&t, 6, 2, false, &d), 0);
	CHECK(d == 3.0); /* one partial tile of 1 x 6 */
	t = tensor(&v, DLI_DTYPE_F32, 1);
	t.ndim = 0;
	CHECK_INT(dli_tensor_block_range(&t, 4, 1, true, &d), 0);
	CHECK(d == 0.0);
	uint16_t b[4] = {0x3f80 /* 1 */, 0xc300 /* -128 */, 0x0000, 0x8000 /* -0 */};
	t = tensor(b, DLI_DTYPE_BF16, 4);
	CHECK_INT(dli_tensor_block_range(&t, 4, 1, false, &d), 0);
	CHECK(d == 7.0);
	/* FP8 codes read as their values: E4M3 0x01 is 2^-9, 0x7e is 448 (0x80, -0, is a zero). */
	uint8_t q8[3] = {0x01, 0x7e, 0x80};
	t = tensor(q8, DLI_DTYPE_F8E4M3, 3);
	CHECK_INT(dli_tensor_block_range(&t, 3, 1, false, &d), 0);
	CHECK(fabs(d - (log2(448.0) + 9)) < 1e-12);
	t.dtype = DLI_DTYPE_F8E5M2; /* 0x01 is 2^-16, 0x7e NaN */
	CHECK_INT(dli_tensor_block_range(&t, 3, 1, false, &d), 0);
	CHECK(isnan(d));
	uint16_t h[2] = {0x0001 /* 2^-24 */, 0x7bff /* 65504 */};
	t = tensor(h, DLI_DTYPE_F16, 2);
	CHECK_INT(dli_tensor_block_range(&t, 2, 1, false, &d), 0);
	CHECK(fabs(d - (log2(65504.0) + 24)) < 1e-12);

	d = 5;
	t = tensor(NULL, DLI_DTYPE_F32, 0);
	CHECK_INT(dli_tensor_block_range(&t, 4, 1, false, &d), -ENODATA);
	CHECK(d == 5);
	t = tensor(x, DLI_DTYPE_F32, 6);
	CHECK_INT(dli_tensor_block_range(NULL, 4, 1, false, &d), -EINVAL);
	CHECK_INT(dli_tensor_block_range(&t, 4, 1, false, NULL), -EINVAL);
	CHECK_INT(dli_tensor_block_range(&t, 0, 1, false, &d), -EINVAL);
	CHECK_INT(dli_tensor_block_range(&t, -3, 1, false, &d), -EINVAL);
	CHECK_INT(dli_tensor_block_range(&t, 4, 3, false, &d), -EINVAL);
	CHECK_INT(dli_tensor_block_range(&t, 4, 0, false, &d), -EINVAL);
	t.dtype = DLI_DTYPE_F64;
	CHECK_INT(dli_tensor_block_range(&t, 4, 1, false, &d), -EINVAL);
	t.dtype = DLI_DTYPE_F32;
	t.contiguous = false;
	CHECK_INT(dli_tensor_block_range(&t, 4, 1, false, &d), -EINVAL);
	t.contiguous = true;
	t.ndim = 99;
	CHECK_INT(dli_tensor_block_range(&t, 4, 1, false, &d), -EINVAL);
	t.ndim = 1;
	t.device.type = DLI_DEVICE_CUDA;
	CHECK_INT(dli_tensor_block_range(&t, 4, 1, false, &d), -ENOTSUP);
	CHECK(d == 5);
}

int main(void)
{
	test_cast_values();
	test_cast_refusals();
	test_current_scale();
	test_tensor_amax();
	test_block_range();
	return check_exit();
}
