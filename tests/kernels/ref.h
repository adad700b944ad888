/* The kernels tests' independent reference: element decoders written from the format definitions
 * (not shared with the library), encoders that round random values into each dtype, and naive
 * double-precision statistics (two-pass variance). */
#ifndef DLI_TEST_KERNELS_REF_H
#define DLI_TEST_KERNELS_REF_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#include "kernels-private.h"

/* ---- Random numbers (xorshift64*: fast and reproducible) ---- */

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;

static inline uint64_t rng_u64(void)
{
	rng_state ^= rng_state >> 12;
	rng_state ^= rng_state << 25;
	rng_state ^= rng_state >> 27;
	return rng_state * 0x2545f4914f6cdd1dull;
}

static inline double rng_unit(void) /* [0, 1) */
{
	return (double)(rng_u64() >> 11) * 0x1p-53;
}

static inline double rng_normal(void)
{
	double u = rng_unit(), v = rng_unit();
	return sqrt(-2.0 * log(1.0 - u)) * cos(6.283185307179586 * v);
}

/* ---- Decoding, from the definitions ---- */

static inline double ref_decode_fp8(uint8_t b, int e5m2)
{
	int ebits = e5m2 ? 5 : 4, mbits = e5m2 ? 2 : 3, bias = e5m2 ? 15 : 7;
	int sign = b >> 7, e = (b >> mbits) & ((1 << ebits) - 1), m = b & ((1 << mbits) - 1);
	double s = sign ? -1.0 : 1.0;
	if (e5m2 && e == 31)
		return m ? NAN : s * INFINITY;
	if (!e5m2 && e == 15 && m == 7)
		return NAN;
	if (e == 0)
		return s * ldexp((double)m, 1 - bias - mbits);
	return s * ldexp(1.0 + (double)m / (1 << mbits), e - bias);
}

static inline double ref_decode_f16(uint16_t h)
{
	int sign = h >> 15, e = (h >> 10) & 31, m = h & 1023;
	double s = sign ? -1.0 : 1.0;
	if (e == 31)
		return m ? NAN : s * INFINITY;
	if (e == 0)
		return s * ldexp((double)m, -24);
	return s * ldexp(1.0 + m / 1024.0, e - 15);
}

static inline double ref_decode(const void *p, enum dli_dtype dt, int64_t i)
{
	const unsigned char *b = p;
	uint16_t h;
	uint32_t u;
	float f;
	switch (dt) {
	case DLI_DTYPE_F32:
		memcpy(&f, b + 4 * i, 4);
		return f;
	case DLI_DTYPE_BF16:
		memcpy(&h, b + 2 * i, 2);
		u = (uint32_t)h << 16;
		memcpy(&f, &u, 4);
		return f;
	case DLI_DTYPE_F16:
		memcpy(&h, b + 2 * i, 2);
		return ref_decode_f16(h);
	case DLI_DTYPE_F8E4M3:
		return ref_decode_fp8(b[i], 0);
	case DLI_DTYPE_F8E5M2:
		return ref_decode_fp8(b[i], 1);
	default:
		return NAN;
	}
}

/* ---- Encoding (round to nearest even) ---- */

static inline uint16_t ref_encode_bf16(float f)
{
	uint32_t u;
	memcpy(&u, &f, 4);
	if ((u & 0x7fffffffu) > 0x7f800000u)
		return (uint16_t)((u >> 16) | 0x40);
	u += 0x7fffu + ((u >> 16) & 1);
	return (uint16_t)(u >> 16);
}

static inline uint16_t ref_encode_f16(float f)
{
	uint32_t u;
	memcpy(&u, &f, 4);
	uint16_t sign = (uint16_t)((u >> 16) & 0x8000);
	uint32_t a = u & 0x7fffffffu;
	if (a > 0x7f800000u)
		return sign | 0x7e00;
	if (a >= 0x477ff000u) /* 65520 and up round to infinity */
		return sign | 0x7c00;
	if (a < 0x38800000u) { /* below 2^-14: a multiple of 2^-24 */
		float af;
		memcpy(&af, &a, 4);
		return sign | (uint16_t)lrintf(af * 0x1p24f);
	}
	a -= (uint32_t)(127 - 15) << 23;
	a += 0xfffu + ((a >> 13) & 1);
	return sign | (uint16_t)(a >> 13);
}

/* Nearest FP8 code (ties to the even code), saturating to the finite max; NaN to NaN, and for
 * E5M2 infinities to infinities. */
static inline uint8_t ref_encode_fp8(double x, int e5m2)
{
	int top = e5m2 ? 0x7b : 0x7e;
	if (x != x)
		return e5m2 ? 0x7e : 0x7f;
	uint8_t sign = x < 0 ? 0x80 : 0;
	double a = fabs(x);
	if (e5m2 && a == INFINITY)
		return sign | 0x7c;
	int lo = 0, hi = top;
	if (a >= ref_decode_fp8((uint8_t)top, e5m2))
		return sign | (uint8_t)top;
	while (hi - lo > 1) { /* invariant: value(lo) <= a < value(hi) */
		int mid = (lo + hi) / 2;
		if (ref_decode_fp8((uint8_t)mid, e5m2) <= a)
			lo = mid;
		else
			hi = mid;
	}
	double dl = a - ref_decode_fp8((uint8_t)lo, e5m2), dh = ref_decode_fp8((uint8_t)hi, e5m2) - a;
	int code = dl < dh ? lo : dh < dl ? hi : (lo % 2 == 0 ? lo : hi);
	return sign | (uint8_t)code;
}

/* Stores value v as element i of a buffer of dtype dt. */
static inline void ref_store(void *p, enum dli_dtype dt, int64_t i, double v)
{
	unsigned char *b = p;
	float f = (float)v;
	uint16_t h;
	switch (dt) {
	case DLI_DTYPE_F32:
		memcpy(b + 4 * i, &f, 4);
		break;
	case DLI_DTYPE_BF16:
		h = ref_encode_bf16(f);
		memcpy(b + 2 * i, &h, 2);
		break;
	case DLI_DTYPE_F16:
		h = ref_encode_f16(f);
		memcpy(b + 2 * i, &h, 2);
		break;
	case DLI_DTYPE_F8E4M3:
		b[i] = ref_encode_fp8(v, 0);
		break;
	case DLI_DTYPE_F8E5M2:
		b[i] = ref_encode_fp8(v, 1);
		break;
	default:
		break;
	}
}

/* ---- Naive statistics in double ---- */

/* The expected value of every statistic of docs/statistics.md that a plain statistics pass gives,
 * for n elements x (decoded); FP8 ones are NaN (no FP8 pass ran). */
static inline void ref_stats(const double *x, int64_t n, double want[DLI_STAT_COUNT], double *err_scale)
{
	double nan = 0, inf = 0, zero = 0, mn = INFINITY, mx = -INFINITY, amax = 0, mnz = INFINITY;
	double sum = 0, sum_abs = 0, sum_sq = 0;
	for (int64_t i = 0; i < n; i++) {
		double v = x[i];
		sum += v;
		sum_abs += fabs(v);
		sum_sq += v * v;
		if (isnan(v)) {
			nan++;
			continue;
		}
		if (isinf(v))
			inf++;
		if (v == 0)
			zero++;
		else if (fabs(v) < mnz)
			mnz = fabs(v);
		if (v < mn)
			mn = v;
		if (v > mx)
			mx = v;
		if (fabs(v) > amax)
			amax = fabs(v);
	}
	double mean = sum / (double)n, m2 = 0;
	for (int64_t i = 0; i < n; i++)
		m2 += (x[i] - mean) * (x[i] - mean);
	for (int s = 0; s < DLI_STAT_COUNT; s++)
		want[s] = NAN;
	want[DLI_STAT_NAN_COUNT] = nan;
	want[DLI_STAT_INF_COUNT] = inf;
	*err_scale = n ? sum_abs / (double)n : 0;
	if (n == 0)
		return;
	if (!nan) {
		want[DLI_STAT_MIN] = mn;
		want[DLI_STAT_MAX] = mx;
		want[DLI_STAT_CUR_AMAX] = amax;
		want[DLI_STAT_DYNAMIC_RANGE] = amax == 0 ? INFINITY : log2(amax) - log2(mnz);
	}
	want[DLI_STAT_MEAN] = mean;
	if (n > 1) {
		want[DLI_STAT_VAR] = m2 / (double)(n - 1);
		want[DLI_STAT_STD] = sqrt(m2 / (double)(n - 1));
	}
	want[DLI_STAT_L1_NORM] = sum_abs;
	want[DLI_STAT_L2_NORM] = sqrt(sum_sq);
	want[DLI_STAT_ZERO_PCT] = 100.0 * zero / (double)n;
}

#endif
