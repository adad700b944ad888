/* The public FP8 casts (dli_fp8_cast, dli_fp8_current_scale) and the amax behind the host table's
 * tensor_amax, against the kernels' scalar encode/decode and the formula of docs/statistics.md
 * written out here; and their refusals. */
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
					y[i], dli_fp8_decode(dli_fp8_encode(x[i] * s, fmt), fmt) / s);
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
	out.dtype = DLI_DTYPE_F16; /* neither f32 nor the format */
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

int main(void)
{
	test_cast_values();
	test_cast_refusals();
	test_current_scale();
	test_tensor_amax();
	return check_exit();
}
