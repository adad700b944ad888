/* FP8 casts for hosts and features: the kernels' encode, applied to whole tensors; the amax that
 * current scaling starts from, and the blockwise dynamic range that block scaling meets. */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <dlinspect/dlinspect.h>

#include "cpu/fp8-private.h"
#include "cpu/nvfp4-recipe-private.h"
#include "fp8-private.h"
#include "kernels-private.h"
#include "names-private.h"
#include "stats-private.h"
#include "strided-private.h"

#define CHUNK 4096

float dli_fp8_current_scale(float amax, enum dli_dtype format, double margin)
{
	return dli_fp8_scale(amax, format, margin);
}

static bool high_precision(enum dli_dtype dtype)
{
	return dtype == DLI_DTYPE_F32 || dtype == DLI_DTYPE_F16 || dtype == DLI_DTYPE_BF16;
}

/* The element count of a host tensor whose shape can be trusted, or -EINVAL: dli_tensor_numel
 * alone would read past `shape` for a bad ndim and overflow for a huge one. */
static int64_t shape_numel(const struct dli_tensor *t)
{
	if (t->ndim < 0 || t->ndim > DLI_TENSOR_MAX_DIMS)
		return -EINVAL;
	int64_t n = 1;
	for (int i = 0; i < t->ndim; i++) {
		if (t->shape[i] < 0 || (t->shape[i] && n > INT64_MAX / t->shape[i]))
			return -EINVAL;
		n *= t->shape[i];
	}
	return n;
}

static int64_t checked_numel(const struct dli_tensor *t)
{
	int64_t n = shape_numel(t);
	return n > 0 && !t->data ? -EINVAL : n;
}

/* What is wrong with a tensor whose checked_numel is negative. */
static const char *numel_trouble(const struct dli_tensor *t)
{
	return t->ndim < 0 || t->ndim > DLI_TENSOR_MAX_DIMS ? "an invalid ndim"
	       : shape_numel(t) < 0			  ? "a negative or overflowing shape"
							  : "elements but no data";
}

/* Why a cast refuses its tensors, in the thread's refusal text: a feature that returns the cast's
 * code (FakeQuant, PerTensorScaling) then fails with the reason in dli_last_error, not a bare
 * "Invalid argument". Returns rc. */
static int refused(int rc, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int refused(int rc, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(dli_stats_refusal, sizeof dli_stats_refusal, fmt, ap);
	va_end(ap);
	return rc;
}

/* The checks both casts make of `in` and `out` before reading or writing anything; *n is the
 * element count. The out tensor is written densely, so it must be contiguous too. */
static int cast_pair(const struct dli_tensor *in, const struct dli_tensor *out, int64_t *n)
{
	if (in->device.type != DLI_DEVICE_CPU || out->device.type != DLI_DEVICE_CPU)
		return refused(-ENOTSUP, "the cast reads and writes host memory; %s is not on the CPU",
			       in->device.type != DLI_DEVICE_CPU ? "in" : "out");
	if (!high_precision(in->dtype))
		return refused(-EINVAL, "in is %s: the cast reads f32, f16 or bf16",
			       dli_dtype_name(in->dtype) ? dli_dtype_name(in->dtype) : "of no dtype");
	const struct dli_tensor *t[2] = {in, out};
	int64_t m[2];
	for (int k = 0; k < 2; k++) {
		const char *which = k ? "out" : "in";
		if (!t[k]->contiguous)
			return refused(-EINVAL, "%s is not contiguous: the cast %s it densely", which,
				       k ? "writes" : "reads");
		m[k] = checked_numel(t[k]);
		if (m[k] < 0)
			return refused(-EINVAL, "%s has %s", which, numel_trouble(t[k]));
	}
	if (m[0] != m[1])
		return refused(-EINVAL, "out has %lld elements, in %lld", (long long)m[1],
			       (long long)m[0]);
	*n = m[0];
	return 0;
}

/* f32 to f16 or bf16 bits, round to nearest even as the hosts' own casts (torch's .to()) round:
 * beyond the format's largest finite value, ties included, to infinity; NaN stays a quiet NaN. */
static uint16_t half_of(float f, enum dli_dtype dtype)
{
	uint32_t u;
	memcpy(&u, &f, sizeof(u));
	uint32_t a = u & 0x7fffffffu;
	uint16_t sign = (uint16_t)(u >> 16 & 0x8000u);
	if (dtype == DLI_DTYPE_BF16) {
		if (a > 0x7f800000u)
			return (uint16_t)(u >> 16 | 0x40u);
		return (uint16_t)((u + 0x7fffu + (u >> 16 & 1u)) >> 16);
	}
	if (a > 0x7f800000u)
		return sign | 0x7e00u | (uint16_t)(a >> 13 & 0x3ffu);
	if (a >= 0x477ff000u) /* 65520, halfway past 65504: even is infinity */
		return sign | 0x7c00u;
	if (a >= 0x38800000u) /* 2^-14, the smallest normal */
		return sign | (uint16_t)((a + 0xfffu + (a >> 13 & 1u) - 0x38000000u) >> 13);
	/* subnormal: a multiple of 2^-24, the scaling exact; 2^-14 rounds up to the normal's bits */
	return sign | (uint16_t)nearbyintf(fabsf(f) * 0x1p24f);
}

static bool half_dtype(enum dli_dtype dtype)
{
	return dtype == DLI_DTYPE_F16 || dtype == DLI_DTYPE_BF16;
}

int dli_fp8_cast(const struct dli_tensor *in, struct dli_tensor *out, enum dli_dtype format,
		 float scale)
{
	if (in && !(in = dli_view_resolve(in))) /* a strided dispatch's view: its copy */
		return -ENOMEM;
	if (!in || !out)
		return refused(-EINVAL, "%s is NULL", !in ? "in" : "out");
	if (format != DLI_DTYPE_F8E4M3 && format != DLI_DTYPE_F8E5M2)
		return refused(-EINVAL, "the cast's format is not f8e4m3 or f8e5m2");
	/* Checked here, not only in the kernel, so that an empty tensor is refused alike. */
	int64_t n;
	int r = cast_pair(in, out, &n);
	if (r)
		return r;
	if (!(scale > 0.0f) || isinf(scale))
		return refused(-EINVAL, "the scale %g is not finite and > 0", (double)scale);
	if (out->dtype == format)
		return dli_cpu_fp8_quantize(in->data, in->dtype, n, format, scale, NULL, out->data);
	if (out->dtype != DLI_DTYPE_F32 && !half_dtype(out->dtype))
		return refused(-EINVAL, "out is %s: expected %s (the codes), f32, f16 or bf16",
			       dli_dtype_name(out->dtype) ? dli_dtype_name(out->dtype) : "of no dtype",
			       dli_dtype_name(format));
	/* Fake quantization: codes for a chunk at a time, then decoded through a table as
	 * TransformerEngine dequantizes, decode(code) * scale_inv in f32 with scale_inv = 1 / scale
	 * in f32 (then rounded to f16 or bf16, the dtype its dequantize writes). */
	const float scale_inv = 1.0f / scale;
	float table[256];
	uint16_t half_table[256];
	for (int c = 0; c < 256; c++) {
		table[c] = dli_fp8_decode((uint8_t)c, format) * scale_inv;
		half_table[c] = half_of(table[c], out->dtype);
	}
	size_t elem = dli_dtype_size(in->dtype);
	uint8_t codes[CHUNK];
	for (int64_t i = 0; i < n; i += CHUNK) {
		int64_t m = n - i < CHUNK ? n - i : CHUNK;
		r = dli_cpu_fp8_quantize((const char *)in->data + (size_t)i * elem, in->dtype, m,
					 format, scale, NULL, codes);
		if (r)
			return r;
		if (out->dtype == DLI_DTYPE_F32)
			for (int64_t k = 0; k < m; k++)
				((float *)out->data)[i + k] = table[codes[k]];
		else
			for (int64_t k = 0; k < m; k++)
				((uint16_t *)out->data)[i + k] = half_table[codes[k]];
	}
	return 0;
}

int dli_tensor_amax(const struct dli_tensor *t, float *amax)
{
	if (!t || !amax)
		return refused(-EINVAL, "%s is NULL", !t ? "the tensor" : "amax");
	if (t->device.type != DLI_DEVICE_CPU)
		return refused(-ENOTSUP, "the amax reads host memory; the tensor is not on the CPU");
	int64_t n = checked_numel(t);
	struct dli_view *view = dli_view_of(t); /* a strided dispatch's view: read in place */
	if (!high_precision(t->dtype))
		return refused(-EINVAL, "the tensor is %s: the amax reads f32, f16 or bf16",
			       dli_dtype_name(t->dtype) ? dli_dtype_name(t->dtype) : "of no dtype");
	if (!t->contiguous && !view)
		return refused(-EINVAL, "the tensor is not contiguous");
	if (n < 0)
		return refused(-EINVAL, "the tensor has %s", numel_trouble(t));
	/* The statistics pass computes more than the amax, but it is SIMD and threaded already, and
	 * its amax skips NaNs: the contract (plugin.h). */
	struct dli_stats_record rec;
	int r = view ? dli_view_stats(view, &rec) : dli_cpu_stats(t->data, t->dtype, n, NULL, &rec);
	if (r)
		return r;
	*amax = (float)rec.amax;
	return 0;
}

int dli_tensor_block_range(const struct dli_tensor *t, int64_t block_size, int dims,
			   bool columnwise, double *out)
{
	if (t && !(t = dli_view_resolve(t))) /* a strided dispatch's view: its copy */
		return -ENOMEM;
	if (!t || !out)
		return -EINVAL;
	if (t->device.type != DLI_DEVICE_CPU)
		return -ENOTSUP;
	int64_t n = checked_numel(t);
	bool fp8 = t->dtype == DLI_DTYPE_F8E4M3 || t->dtype == DLI_DTYPE_F8E5M2;
	if ((!high_precision(t->dtype) && !fp8) || !t->contiguous || n < 0)
		return -EINVAL;
	/* TransformerEngine's view: reshape(-1, shape[-1]); a scalar is one element. */
	int64_t cols = t->ndim > 0 ? t->shape[t->ndim - 1] : 1;
	return dli_cpu_block_range(t->data, t->dtype, cols ? n / cols : 0, cols, block_size, dims,
				   columnwise, out);
}

/* NVFP4 with the recipe's options, the ones of ABI 1.3 read only when the caller's spec has them. */
static int dli_nvfp4_spec_fake_quant(const void *data, enum dli_dtype dtype, int64_t rows,
				     int64_t cols, const struct dli_block_spec *spec, float *out)
{
	struct dli_nvfp4_opts opts = {0};

	if (spec->size >= offsetof(struct dli_block_spec, rht_seed) + sizeof(spec->rht_seed)) {
		opts.stochastic = spec->stochastic_rounding != 0;
		opts.seed = spec->seed;
		opts.rht = spec->rht != 0;
		opts.signs = dli_nvfp4_rht_signs(spec->rht_seed);
	}
	return dli_cpu_nvfp4_fake_quantize_opts(data, dtype, rows, cols,
						spec->recipe == DLI_BLOCK_NVFP4_2D ? 2 : 1,
						spec->columnwise != 0, &opts, NULL, out);
}

int dli_block_fake_quant(const struct dli_tensor *in, struct dli_tensor *out,
			 const struct dli_block_spec *spec)
{
	if (in && !(in = dli_view_resolve(in))) /* a strided dispatch's view: its copy */
		return -ENOMEM;
	if (!in || !out || !spec)
		return refused(-EINVAL, "%s is NULL", !in ? "in" : !out ? "out" : "the spec");
	if (spec->size < offsetof(struct dli_block_spec, stochastic_rounding) ||
	    spec->recipe < DLI_BLOCK_MXFP8 || spec->recipe > DLI_BLOCK_NVFP4_2D)
		return refused(-EINVAL, "the block spec's size or recipe is out of range");
	int64_t n;
	int r = cast_pair(in, out, &n);
	if (r)
		return r;
	if (out->dtype != DLI_DTYPE_F32 && !half_dtype(out->dtype))
		return refused(-EINVAL, "out is %s: expected f32, f16 or bf16",
			       dli_dtype_name(out->dtype) ? dli_dtype_name(out->dtype) : "of no dtype");
	int64_t cols = in->ndim > 0 ? in->shape[in->ndim - 1] : 1;
	int64_t rows = cols ? n / cols : 0;
	/* f16 and bf16 out: the f32 values first, then rounded (the kernels write f32) */
	float *dst = out->dtype == DLI_DTYPE_F32 ? out->data : malloc((size_t)n * sizeof(float) + 1);
	if (!dst)
		return -ENOMEM;
	if (spec->recipe == DLI_BLOCK_NVFP4 || spec->recipe == DLI_BLOCK_NVFP4_2D)
		r = dli_nvfp4_spec_fake_quant(in->data, in->dtype, rows, cols, spec, dst);
	else if (spec->recipe != DLI_BLOCK_MXFP8)
		r = dli_cpu_fp8b_fake_quantize(in->data, in->dtype, rows, cols, spec->format,
					       spec->recipe == DLI_BLOCK_FP8_2D ? 2 : 1,
					       spec->columnwise != 0, spec->pow2_scales != 0, NULL,
					       dst);
	else
		r = dli_cpu_mx_fake_quantize(in->data, in->dtype, rows, cols, spec->format,
					     spec->columnwise != 0, NULL, dst);
	if (dst != out->data) {
		for (int64_t i = 0; i < n && !r; i++)
			((uint16_t *)out->data)[i] = half_of(dst[i], out->dtype);
		free(dst);
	}
	return r;
}
