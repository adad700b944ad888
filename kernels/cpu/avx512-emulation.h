/* Test builds only (meson -Davx512_emulation=true, scripts/test.sh): the AVX-512 kernels
 * (stats-avx512.c, fp8-avx512.c) compiled for an AVX2 machine, their AVX-512 intrinsics taken
 * from SIMDe's portable versions (Debian: libsimde-dev), so that the tests that compare them with
 * the scalar pass run them on a machine without AVX-512. Force-included before the kernel's own
 * headers (-include), with DLI_AVX512_EMULATED defined. What SIMDe 0.7 lacks, or gives another
 * form, is written here as the instruction set reference defines it, element by element through
 * arrays (speed means nothing here); the reductions in GCC's order (avx512fintrin.h), so that
 * their sums are those of a real build. Each name is #undef'd first: at -O0 GCC's headers make
 * some of them macros. */
#ifndef DLI_AVX512_EMULATION_H
#define DLI_AVX512_EMULATION_H

#include <immintrin.h> /* first: the aliases below rename what follows, not its declarations */
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>
#define SIMDE_ENABLE_NATIVE_ALIASES
#include <simde/x86/avx512.h>

/* SIMDe 0.7 aliases the masked form under this name */
#undef _mm512_madd_epi16
#define _mm512_madd_epi16(a, b) simde_mm512_madd_epi16(a, b)

/* Element-wise conversion of n lanes of type A (in a vector of type VA, stored by STA) into
 * type B (a vector of type VB, loaded by LDB). */
#define DLI_EMU_CONVERT(name, VA, STA, A, VB, LDB, B, n) \
	static inline VB name(VA a)                      \
	{                                                \
		A x[n];                                  \
		B y[n];                                  \
		STA(x, a);                               \
		for (int i = 0; i < (n); i++)            \
			y[i] = (B)x[i];                  \
		return LDB(y);                           \
	}
DLI_EMU_CONVERT(dli_emu_cvtepu8_epi16, simde__m256i, simde_mm256_storeu_si256, uint8_t,
		simde__m512i, simde_mm512_loadu_si512, uint16_t, 32)
DLI_EMU_CONVERT(dli_emu_cvtepu16_epi32, simde__m256i, simde_mm256_storeu_si256, uint16_t,
		simde__m512i, simde_mm512_loadu_si512, uint32_t, 16)
DLI_EMU_CONVERT(dli_emu_cvtepi32_epi16, simde__m512i, simde_mm512_storeu_si512, uint32_t,
		simde__m256i, simde_mm256_loadu_si256, uint16_t, 16)
DLI_EMU_CONVERT(dli_emu_cvtepi32_epi8, simde__m512i, simde_mm512_storeu_si512, uint32_t,
		simde__m128i, simde_mm_loadu_si128, uint8_t, 16)
DLI_EMU_CONVERT(dli_emu_cvtps_pd, simde__m256, simde_mm256_storeu_ps, float, simde__m512d,
		simde_mm512_loadu_pd, double, 8)
#undef _mm512_cvtepu8_epi16
#define _mm512_cvtepu8_epi16 dli_emu_cvtepu8_epi16
#undef _mm512_cvtepu16_epi32
#define _mm512_cvtepu16_epi32 dli_emu_cvtepu16_epi32
#undef _mm512_cvtepi32_epi16
#define _mm512_cvtepi32_epi16 dli_emu_cvtepi32_epi16
#undef _mm512_cvtepi32_epi8
#define _mm512_cvtepi32_epi8 dli_emu_cvtepi32_epi8
#undef _mm512_cvtps_pd
#define _mm512_cvtps_pd dli_emu_cvtps_pd

static inline simde__m512 dli_emu_cvtph_ps(simde__m256i a)
{
	uint16_t x[16];
	float y[16];
	simde_mm256_storeu_si256(x, a);
	for (int i = 0; i < 16; i++)
		y[i] = _cvtsh_ss(x[i]); /* F16C, which the build has */
	return simde_mm512_loadu_ps(y);
}
#undef _mm512_cvtph_ps
#define _mm512_cvtph_ps dli_emu_cvtph_ps

/* A masked load of n elements of type T, zeros where k is clear; like the instruction, nothing
 * is read there. */
#define DLI_EMU_MASKZ_LOAD(name, K, T, V, LD, n)                               \
	static inline V name(K k, const void *p)                               \
	{                                                                      \
		T y[n];                                                        \
		for (int i = 0; i < (n); i++)                                  \
			y[i] = k >> i & 1 ? ((const T *)p)[i] : (T)0;          \
		return LD(y);                                                  \
	}
DLI_EMU_MASKZ_LOAD(dli_emu_maskz_loadu_epi16_256, simde__mmask16, uint16_t, simde__m256i,
		   simde_mm256_loadu_si256, 16)
DLI_EMU_MASKZ_LOAD(dli_emu_maskz_loadu_epi16, simde__mmask32, uint16_t, simde__m512i,
		   simde_mm512_loadu_si512, 32)
DLI_EMU_MASKZ_LOAD(dli_emu_maskz_loadu_ps, simde__mmask16, float, simde__m512,
		   simde_mm512_loadu_ps, 16)
#undef _mm256_maskz_loadu_epi16
#define _mm256_maskz_loadu_epi16 dli_emu_maskz_loadu_epi16_256
#undef _mm512_maskz_loadu_epi16
#define _mm512_maskz_loadu_epi16 dli_emu_maskz_loadu_epi16
#undef _mm512_maskz_loadu_ps
#define _mm512_maskz_loadu_ps dli_emu_maskz_loadu_ps

static inline void dli_emu_mask_storeu_epi8(void *p, simde__mmask16 k, simde__m128i a)
{
	uint8_t x[16];
	simde_mm_storeu_si128(x, a);
	for (int i = 0; i < 16; i++)
		if (k >> i & 1)
			((uint8_t *)p)[i] = x[i];
}
#undef _mm_mask_storeu_epi8
#define _mm_mask_storeu_epi8 dli_emu_mask_storeu_epi8

/* A mask of 32 16-bit lanes: bit i set where `test` holds for x = a's lane i, y = b's, and k's
 * bit i is set. */
#define DLI_EMU_MASK16(name, test)                                              \
	static inline simde__mmask32 name(simde__mmask32 k, simde__m512i a,     \
					  simde__m512i b)                       \
	{                                                                       \
		uint16_t x[32], y[32];                                          \
		uint32_t m = 0;                                                 \
		simde_mm512_storeu_si512(x, a);                                 \
		simde_mm512_storeu_si512(y, b);                                 \
		for (int i = 0; i < 32; i++)                                    \
			m |= (uint32_t)(test) << i;                             \
		return m & k;                                                   \
	}
DLI_EMU_MASK16(dli_emu_mask_cmpeq_epi16_mask, x[i] == y[i])
DLI_EMU_MASK16(dli_emu_mask_cmplt_epu16_mask, x[i] < y[i])
DLI_EMU_MASK16(dli_emu_mask_cmpgt_epu16_mask, x[i] > y[i])
DLI_EMU_MASK16(dli_emu_mask_testn_epi16_mask, (x[i] & y[i]) == 0)
#undef _mm512_cmpeq_epi16_mask
#define _mm512_cmpeq_epi16_mask(a, b) dli_emu_mask_cmpeq_epi16_mask(~0u, a, b)
#undef _mm512_cmplt_epu16_mask
#define _mm512_cmplt_epu16_mask(a, b) dli_emu_mask_cmplt_epu16_mask(~0u, a, b)
#undef _mm512_cmpgt_epu16_mask
#define _mm512_cmpgt_epu16_mask(a, b) dli_emu_mask_cmpgt_epu16_mask(~0u, a, b)
#undef _mm512_mask_cmpgt_epu16_mask
#define _mm512_mask_cmpgt_epu16_mask dli_emu_mask_cmpgt_epu16_mask
#undef _mm512_mask_testn_epi16_mask
#define _mm512_mask_testn_epi16_mask dli_emu_mask_testn_epi16_mask

/* vfpclassps: imm's bits 0 QNaN, 1 +0, 2 -0, 3 +inf, 4 -inf, 5 denormal, 6 finite negative,
 * 7 SNaN */
static inline simde__mmask16 dli_emu_fpclass_ps_mask(simde__m512 a, int imm)
{
	uint32_t x[16];
	simde__mmask16 m = 0;
	simde_mm512_storeu_ps(x, a);
	for (int i = 0; i < 16; i++) {
		uint32_t u = x[i], mag = u & 0x7fffffffu;
		bool neg = u >> 31, hit;
		if (mag > 0x7f800000u)
			hit = imm & (u & 0x00400000u ? 0x01 : 0x80);
		else if (mag == 0x7f800000u)
			hit = imm & (neg ? 0x10 : 0x08);
		else if (mag == 0)
			hit = imm & (neg ? 0x04 : 0x02);
		else
			hit = (mag < 0x00800000u && (imm & 0x20)) || (neg && (imm & 0x40));
		m |= (simde__mmask16)((unsigned)hit << i);
	}
	return m;
}
#undef _mm512_fpclass_ps_mask
#define _mm512_fpclass_ps_mask dli_emu_fpclass_ps_mask

static inline simde__m256 dli_emu_extractf32x8_ps(simde__m512 a, int i)
{
	float x[16];
	simde_mm512_storeu_ps(x, a);
	return simde_mm256_loadu_ps(x + 8 * (i & 1));
}
#undef _mm512_extractf32x8_ps
#define _mm512_extractf32x8_ps dli_emu_extractf32x8_ps

static inline float dli_emu_cvtss_f32(simde__m512 a)
{
	float x[16];
	simde_mm512_storeu_ps(x, a);
	return x[0];
}
#undef _mm512_cvtss_f32
#define _mm512_cvtss_f32 dli_emu_cvtss_f32

static inline simde__m512i dli_emu_srai_epi32(simde__m512i a, int n)
{
	int32_t x[16];
	simde_mm512_storeu_si512(x, a);
	for (int i = 0; i < 16; i++)
		x[i] = n > 31 ? (x[i] < 0 ? -1 : 0) : x[i] >> n;
	return simde_mm512_loadu_si512(x);
}
#undef _mm512_srai_epi32
#define _mm512_srai_epi32 dli_emu_srai_epi32

/* ---- Reductions ---- */

/* Integer ones: any order gives the same. */
#define DLI_EMU_REDUCE_I32(name, T, better)             \
	static inline T name(simde__m512i a)            \
	{                                               \
		T x[16], r;                             \
		simde_mm512_storeu_si512(x, a);         \
		r = x[0];                               \
		for (int i = 1; i < 16; i++)            \
			r = x[i] better r ? x[i] : r;   \
		return r;                               \
	}
DLI_EMU_REDUCE_I32(dli_emu_reduce_max_epi32, int32_t, >)
DLI_EMU_REDUCE_I32(dli_emu_reduce_max_epu32, uint32_t, >)
DLI_EMU_REDUCE_I32(dli_emu_reduce_min_epu32, uint32_t, <)
#undef _mm512_reduce_max_epi32
#define _mm512_reduce_max_epi32 dli_emu_reduce_max_epi32
#undef _mm512_reduce_max_epu32
#define _mm512_reduce_max_epu32 dli_emu_reduce_max_epu32
#undef _mm512_reduce_min_epu32
#define _mm512_reduce_min_epu32 dli_emu_reduce_min_epu32

static inline int dli_emu_reduce_add_epi32(simde__m512i a)
{
	uint32_t x[16], s = 0;
	simde_mm512_storeu_si512(x, a);
	for (int i = 0; i < 16; i++)
		s += x[i];
	return (int)s;
}
#undef _mm512_reduce_add_epi32
#define _mm512_reduce_add_epi32 dli_emu_reduce_add_epi32

/* GCC's order: the upper half with the lower, then the quarters, then the two */
static inline double dli_emu_reduce_add_pd(simde__m512d a)
{
	double x[8], h[4], q[2];
	simde_mm512_storeu_pd(x, a);
	for (int i = 0; i < 4; i++)
		h[i] = x[i + 4] + x[i];
	for (int i = 0; i < 2; i++)
		q[i] = h[i + 2] + h[i];
	return q[0] + q[1];
}
#undef _mm512_reduce_add_pd
#define _mm512_reduce_add_pd dli_emu_reduce_add_pd

/* GCC's order for min and max, with vminps's and vmaxps's own NaN rule (the second operand) */
#define DLI_EMU_REDUCE_PS(name, op)                                                        \
	static inline float name(simde__m512 a)                                            \
	{                                                                                  \
		float x[16];                                                               \
		simde_mm512_storeu_ps(x, a);                                               \
		__m256 t = _mm256_##op(_mm256_loadu_ps(x + 8), _mm256_loadu_ps(x));        \
		__m128 q = _mm_##op(_mm256_extractf128_ps(t, 1), _mm256_castps256_ps128(t)); \
		q = _mm_##op(q, _mm_shuffle_ps(q, q, 0x4e));                               \
		q = _mm_##op(q, _mm_shuffle_ps(q, q, 0x11));                               \
		return _mm_cvtss_f32(q);                                                   \
	}
DLI_EMU_REDUCE_PS(dli_emu_reduce_min_ps, min_ps)
DLI_EMU_REDUCE_PS(dli_emu_reduce_max_ps, max_ps)
#undef _mm512_reduce_min_ps
#define _mm512_reduce_min_ps dli_emu_reduce_min_ps
#undef _mm512_reduce_max_ps
#define _mm512_reduce_max_ps dli_emu_reduce_max_ps

/* ---- The optional paths' instructions ---- */

/* vdpbf16ps: per float lane, the odd pair's product then the even pair's, each a fused
 * multiply-add rounded to nearest even, denormal inputs read as zero and denormal results
 * flushed to zero */
static inline float dli_emu_daz(float x)
{
	uint32_t u;
	memcpy(&u, &x, sizeof(u));
	if ((u & 0x7f800000u) == 0)
		u &= 0x80000000u;
	memcpy(&x, &u, sizeof(x));
	return x;
}

static inline float dli_emu_bf16(uint16_t h)
{
	uint32_t u = (uint32_t)h << 16;
	float f;
	memcpy(&f, &u, sizeof(f));
	return dli_emu_daz(f);
}

static inline simde__m512 dli_emu_dpbf16_ps(simde__m512 src, simde__m512i a, simde__m512i b)
{
	float acc[16];
	uint16_t x[32], y[32];
	simde_mm512_storeu_ps(acc, src);
	simde_mm512_storeu_si512(x, a);
	simde_mm512_storeu_si512(y, b);
	for (int i = 0; i < 16; i++) {
		float r = dli_emu_daz(acc[i]);
		r = dli_emu_daz(fmaf(dli_emu_bf16(x[2 * i + 1]), dli_emu_bf16(y[2 * i + 1]), r));
		acc[i] = dli_emu_daz(fmaf(dli_emu_bf16(x[2 * i]), dli_emu_bf16(y[2 * i]), r));
	}
	return simde_mm512_loadu_ps(acc);
}
#undef _mm512_dpbf16_ps
#define _mm512_dpbf16_ps(src, a, b) \
	dli_emu_dpbf16_ps((src), (simde__m512i)(a), (simde__m512i)(b))

/* vpermi2b with the mask 0x5555...: the kernels' inline assembly (fp8-avx512.c, bf16_lookup):
 * byte i of idx indexes the 128 bytes of t0 then t1 (bit 6: t1), odd bytes zeroed */
static inline simde__m512i dli_emu_permi2b_z55(simde__m512i idx, simde__m512i t0,
					       simde__m512i t1)
{
	uint8_t x[64], a[64], b[64], y[64];
	simde_mm512_storeu_si512(x, idx);
	simde_mm512_storeu_si512(a, t0);
	simde_mm512_storeu_si512(b, t1);
	for (int i = 0; i < 64; i++)
		y[i] = i & 1 ? 0 : x[i] & 64 ? b[x[i] & 63] : a[x[i] & 63];
	return simde_mm512_loadu_si512(y);
}

/* The CPU features the kernels ask for at run time: here, every one they can use; and the
 * functions with a target of their own: none (cpu-private.h) */
#define DLI_CPU_HAS(feature) true
#define DLI_TARGET_BF16

#endif
