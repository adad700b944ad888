/* The FP8 cast with AVX-512 (16 lanes), without a branch per element, and the quantize-and-compare
 * pass on bf16 for CPUs with AVX512-BF16 (a table path, below). Every other compare, and every
 * block the table path cannot trust, runs the AVX2 pass (fp8-avx2.c), whose handling of NaN and
 * infinities keeps data holding them near the speed of clean data. Compiled with AVX-512 flags and
 * called only when the CPU has them. */
#include <immintrin.h>
#include <math.h>
#include <stdbool.h>
#include <string.h>

#include "cpu-private.h"
#include "fp8-private.h"

/* The constants of the cast. Rounding to nearest even to a quantum Q, a power of two, is
 * (a + C) - C with C = Q * 2^23 in float arithmetic: floats in [C, 2C) are Q apart, so the
 * hardware's round-to-nearest-even does the work. Q is 2^(e - mbits) for |x| in [2^e, 2^(e+1)),
 * never below the smallest subnormal 2^(emin - mbits); C's bits are then e's bits plus a
 * constant, and a max_epi32 clamps e. Clamping |x| to the finite max before rounding is the
 * saturation: everything above the max rounds to the max or beyond it, where it would saturate. */
struct k512 {
	__m512 scale, maxv;
	__m512i maxbits, absmask, expmask, emin, cadd;
	/* The code from t = a + C: bits(t) - bits(C) + (e >> (23 - mbits)) - rebias. */
	__m512i rebias;
	__m512i nancode, signmask;
	int mshift;
};

static void k512_init(struct k512 *k, enum dli_dtype format, float scale)
{
	int mbits = format == DLI_DTYPE_F8E4M3 ? 3 : 2;
	int bias = format == DLI_DTYPE_F8E4M3 ? 7 : 15;

	k->scale = _mm512_set1_ps(scale);
	k->maxv = _mm512_set1_ps(format == DLI_DTYPE_F8E4M3 ? 448.0f : 57344.0f);
	k->maxbits = _mm512_castps_si512(k->maxv);
	k->absmask = _mm512_set1_epi32(0x7fffffff);
	k->expmask = _mm512_set1_epi32(0x7f800000);
	k->emin = _mm512_set1_epi32((1 - bias + 127) << 23);
	k->cadd = _mm512_set1_epi32((23 - mbits) << 23);
	k->rebias = _mm512_set1_epi32((127 - bias + 1) << mbits);
	k->nancode = _mm512_set1_epi32(format == DLI_DTYPE_F8E4M3 ? 0x7f : 0x7e);
	k->signmask = _mm512_set1_epi32(0x80);
	k->mshift = 23 - mbits;
}

/* Up to 16 elements from element i on, widened to float; lanes outside `m` read nothing and are
 * zero (a zero contributes nothing to any term and is neither an underflow nor an overflow). */
static inline __attribute__((always_inline)) __m512 load16(const void *data, enum dli_dtype dtype,
							    int64_t i, __mmask16 m)
{
	switch (dtype) {
	case DLI_DTYPE_F32:
		return _mm512_maskz_loadu_ps(m, (const float *)data + i);
	case DLI_DTYPE_F16:
		return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, (const uint16_t *)data + i));
	default: /* DLI_DTYPE_BF16: the upper half of a float */
		return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(
			_mm256_maskz_loadu_epi16(m, (const uint16_t *)data + i)), 16));
	}
}

static inline __mmask16 tail_mask(int64_t left)
{
	return left >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << left) - 1);
}

static inline double sum_pd(__m512 v)
{
	__m512d lo = _mm512_cvtps_pd(_mm512_castps512_ps256(v));
	__m256 upper = _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1));
	__m512d hi = _mm512_cvtps_pd(upper);
	return _mm512_reduce_add_pd(_mm512_add_pd(lo, hi));
}

/* ---- bf16 input: the cast in 16-bit lanes ----
 *
 * A bf16 x = 1.m * 2^(E-127) has a 7-bit mantissa m. Where s = x * scale is at least the
 * format's smallest normal, the float product is fl(1.m * ms) * 2^(E-127+es) (scale = ms * 2^es,
 * ms in [1, 2)): its rounding to float, and then to the format's mantissa, depends on m alone.
 * So the cast's value r (dq * scale, an FP8 value and so exactly a bf16) is P(m) * 2^(E-127+es)
 * with P(m) = the format's rounding of fl(1.m * ms), in [1, 4]: in bf16 bits, |x| plus an entry
 * of a 128-entry table D, looked up 32 lanes at a time (one byte permute with VBMI, else two word
 * permutes). Saturation is a min on the bits (the values only grow with x); |x| > xov, a bf16
 * bound found once per call, is an overflow; below xn (the first |x| whose product is normal in
 * the format) lie the underflows and the subnormal grid, rare in data scaled to the format: in
 * a vector holding one, those lanes' r come from the grid's closed form (bf16_r_sub).
 *
 * The lanes hold r * 2^J rather than r, with J chosen (from the scale) so that the table's
 * value for x = 0 is below 2^-125: its square, and its product with 0, vanish in the sums, so
 * zeros need no mask. Products of two bf16 are exact in float, so x^2 and r^2 (and in the
 * careful step x r) are summed with vdpbf16ps (32 elements an instruction); the error s - r
 * needs the full product and goes through float FMA lanes.
 *
 * The loop is bound by vector operations (on Zen 4 about two 512-bit ones a cycle, one of them
 * on the FMA pipes, which compares into mask registers use too), so the common case has its own
 * step with 16 of them and no compare: the fast step, for groups of vectors whose values all
 * lie in [xn, xov], checked once per group. Any other group is redone by the careful step. */
struct kbf16 {
	__m512i t0, t1, t2, t3; /* D[0..127], 32 a register */
	/* With VBMI: D[m] + 1 at byte (m - 1) mod 128 of tb0:tb1, looked up by one vpermi2b with
	 * index |x| - 1. */
	__m512i tb0, tb1;
	bool bytes;
	__m512i maxr;           /* bf16 bits of the format's max * 2^J */
	__m512i xn1, xov, one, absmask, hi16, bit6;
	__m512i inf;            /* bf16 bits of +inf: magnitudes from it on are not finite */
	__m512 scale;           /* scale * 2^J */
	__m512 csub;            /* the rounding constant of bf16_r_sub */
	double inv;             /* 2^-J / scale: r * 2^J back to dq */
};

/* The largest bf16 magnitude (bits 0 .. 0x7f7f) whose product with scale is <= limit, or -1:
 * the bf16 bits b with b << 16 at most the largest such float. */
static int bf16_last_le(float scale, float limit)
{
	int64_t f = dli_fp8_f32_last_le(scale, limit);

	return f < 0 ? -1 : (int)(f >> 16);
}

/* The constants for one (format, scale); false for a scale outside [2^-40, 2^41) (where the
 * sums of r * 2^J could leave float range, and where bf16 subnormals could land in the
 * format's normal range; float-subnormal scales included): the AVX2 pass takes those. */
static bool kbf16_init(struct kbf16 *kb, const struct k512 *k, enum dli_dtype format, float scale)
{
	bool e4 = format == DLI_DTYPE_F8E4M3;
	int bias = e4 ? 7 : 15;
	float fmax = e4 ? 448.0f : 57344.0f;
	uint32_t sb;
	int es, j, xn;
	int16_t d[128];
	float ms;

	memcpy(&sb, &scale, sizeof(sb));
	es = (int)(sb >> 23) - 127;
	if (es < -40 || es > 40)
		return false;
	sb = (sb & 0x7fffff) | (127u << 23);
	memcpy(&ms, &sb, sizeof(ms));
	/* P(m) for every m with the cast's float rounding (the arithmetic of quantize() below):
	 * 1.m * ms is in [1, 4), in the format's normal range, far from its max. */
	for (int m = 0; m < 128; m += 16) {
		__m512i mi = _mm512_add_epi32(_mm512_set1_epi32(m), _mm512_set_epi32(
			15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0));
		__m512 x1 = _mm512_castsi512_ps(_mm512_or_si512(_mm512_slli_epi32(mi, 16),
								_mm512_set1_epi32(127 << 23)));
		__m512 s = _mm512_mul_ps(x1, _mm512_set1_ps(ms));
		__m512i e = _mm512_max_epi32(_mm512_and_si512(_mm512_castps_si512(s), k->expmask),
					     k->emin);
		__m512 c = _mm512_castsi512_ps(_mm512_add_epi32(e, k->cadd));
		__m512i p = _mm512_castps_si512(_mm512_sub_ps(_mm512_add_ps(s, c), c));
		/* bits16(P) - m for now; the exponent offset once P(0) is known */
		__m512i dv = _mm512_sub_epi32(_mm512_srli_epi32(p, 16), mi);
		_mm256_storeu_si256((__m256i *)(d + m), _mm512_cvtepi32_epi16(dv));
	}
	/* Now d[m] = F[m] = bits16(P(m)) - m. For x = 1.m * 2^(E-127), r * 2^J has the bits
	 * F[m] + m + (E - 127 + es + J) * 128, so |x| + D[m] with D[m] = F[m] + 128 c, c = es + J -
	 * 127. c is chosen so that D[m] is in [0, 254] for every m (F spans less than 64, so it
	 * always can be): then x = 0 gives bits below 0x100, a value below 2^-125, and the byte
	 * table below holds D[m] + 1. */
	{
		int fmin = 1 << 16, fmax16 = -1, c;
		for (int m = 0; m < 128; m++) {
			int v = (uint16_t)d[m];
			fmin = v < fmin ? v : fmin;
			fmax16 = v > fmax16 ? v : fmax16;
		}
		c = -(fmin / 128);
		if (fmax16 + 128 * c > 254)
			return false; /* cannot happen: F spans less than 64 */
		j = 127 + c - es;
		for (int m = 0; m < 128; m++)
			d[m] = (int16_t)(d[m] + 128 * c);
	}
	{
		uint8_t tb[128];
		/* byte (m - 1) mod 128 holds D[m] + 1: indexed by |x| - 1 (the low seven bits of its
		 * low byte are m - 1 mod 128), |x| - 1 + D[m] + 1 is r's bits */
		for (int m = 0; m < 128; m++)
			tb[(m + 127) & 127] = (uint8_t)(d[m] + 1);
		kb->bytes = DLI_CPU_HAS("avx512vbmi");
		kb->tb0 = _mm512_loadu_si512(tb);
		kb->tb1 = _mm512_loadu_si512(tb + 64);
	}
	kb->t0 = _mm512_loadu_si512(d);
	kb->t1 = _mm512_loadu_si512(d + 32);
	kb->t2 = _mm512_loadu_si512(d + 64);
	kb->t3 = _mm512_loadu_si512(d + 96);
	xn = bf16_last_le(scale, nextafterf(ldexpf(1.0f, 1 - bias), 0.0f)) + 1;
	if (xn < 0x80) /* cannot happen for these scales; the table needs x normal */
		return false;
	kb->xn1 = _mm512_set1_epi16((short)(xn - 1));
	kb->xov = _mm512_set1_epi16((short)bf16_last_le(scale, fmax));
	{
		float mr = ldexpf(fmax, j);
		uint32_t mb;
		memcpy(&mb, &mr, sizeof(mb));
		kb->maxr = _mm512_set1_epi16((short)(mb >> 16));
	}
	kb->one = _mm512_set1_epi16(1);
	kb->absmask = _mm512_set1_epi16(0x7fff);
	kb->hi16 = _mm512_set1_epi32((int)0xffff0000u);
	kb->bit6 = _mm512_set1_epi16(0x40);
	kb->inf = _mm512_set1_epi16(0x7f80);
	kb->scale = _mm512_set1_ps(ldexpf(scale, j));
	kb->csub = _mm512_set1_ps(ldexpf(1.0f, 1 - bias - (e4 ? 3 : 2) + j + 23));
	kb->inv = ldexp(1.0, -j) / (double)scale;
	return true;
}

/* r * 2^J for |x| below xn, valid in those lanes only. There s = |x| * scale 2^J is below the
 * format's smallest normal (times 2^J), where its grid has one step Q 2^J, Q = 2^(emin - mbits):
 * rounding to it is (s + C) - C with C = Q 2^J 2^23, and a multiple of Q 2^J below the normals
 * (mbits significant bits at most) is exactly a bf16. */
static inline __attribute__((always_inline)) __m512i bf16_r_sub(__m512i xa, const struct kbf16 *kb)
{
	__m512i h[2];

	h[0] = _mm512_slli_epi32(xa, 16);
	h[1] = _mm512_and_si512(xa, kb->hi16);
	for (int i = 0; i < 2; i++) {
		__m512 s = _mm512_mul_ps(_mm512_castsi512_ps(h[i]), kb->scale);
		h[i] = _mm512_castps_si512(_mm512_sub_ps(_mm512_add_ps(s, kb->csub), kb->csub));
	}
	return _mm512_or_si512(_mm512_srli_epi32(h[0], 16), _mm512_and_si512(h[1], kb->hi16));
}

/* The sums of a block in float lanes. The fast step's vectors go into f, the careful step's into
 * c and, for sum x r (which the fast step leaves out: see compare_bf16_body), cdot. */
struct bf16_lanes {
	__m512 xs, dqs, err0, err1;
};

struct bf16_sums {
	struct bf16_lanes f, c;
	__m512 cdot;
	__m512i xmax;            /* careful steps: the largest |x| */
	uint32_t under;
	uint32_t low_vectors;    /* careful steps: vectors holding a nonzero below xn */
	uint32_t careful_steps;
	uint32_t nonfinite;      /* careful steps with `nonfinite`: NaN and infinities left out */
};

/* The table's r * 2^J for |x| (xa; ib = xa - 1 with the byte table), unsaturated. */
static inline __attribute__((always_inline)) __m512i bf16_lookup(__m512i xa, __m512i ib,
								 const struct kbf16 *kb, bool bytes)
{
	if (bytes) {
		/* xa - 1 + the byte of (m - 1) mod 128, zero-extended (the high byte of each word
		 * zeroed by the mask): xa + D[m]. Inline assembly, so that this function needs no
		 * VBMI target of its own. */
#ifdef DLI_AVX512_EMULATED
		__m512i tv = dli_emu_permi2b_z55(ib, kb->tb0, kb->tb1);
#else
		__m512i tv = ib;
		__asm__("vpermi2b %[t1], %[t0], %[v]%{%[k]%}%{z%}"
			: [v] "+v"(tv)
			: [t0] "v"(kb->tb0), [t1] "v"(kb->tb1), [k] "Yk"((__mmask64)0x5555555555555555ull));
#endif
		return _mm512_add_epi16(ib, tv);
	}
	__m512i a = _mm512_permutex2var_epi16(kb->t0, xa, kb->t1);
	__m512i b = _mm512_permutex2var_epi16(kb->t2, xa, kb->t3);
	__mmask32 b6 = _mm512_test_epi16_mask(xa, kb->bit6);
	return _mm512_add_epi16(xa, _mm512_mask_blend_epi16(b6, a, b));
}

/* (s - r)^2 into err0 (even elements) and err1 (odd ones), in float lanes: the even elements
 * shifted up, the odd ones masked, of |x| and of r alike. */
static inline __attribute__((always_inline)) void
bf16_err(__m512i xa, __m512i r, const struct kbf16 *kb, struct bf16_lanes *l)
{
	__m512 x0 = _mm512_castsi512_ps(_mm512_slli_epi32(xa, 16));
	__m512 x1 = _mm512_castsi512_ps(_mm512_and_si512(xa, kb->hi16));
	__m512 d0 = _mm512_fmsub_ps(x0, kb->scale, _mm512_castsi512_ps(_mm512_slli_epi32(r, 16)));
	__m512 d1 = _mm512_fmsub_ps(x1, kb->scale, _mm512_castsi512_ps(_mm512_and_si512(r, kb->hi16)));

	l->err0 = _mm512_fmadd_ps(d0, d0, l->err0);
	l->err1 = _mm512_fmadd_ps(d1, d1, l->err1);
}

/* The careful step, for any vector: 32 elements at p (lanes past `m` zero), saturated, and in a
 * vector holding a nonzero below xn, those lanes' r from bf16_r_sub. Magnitudes throughout:
 * every term is the same on them. With `nonfinite`, NaN and infinities become zeros (which add
 * nothing anywhere) and are counted, to be left out of the compared elements, as every
 * other path does; without it they give NaN or huge sums, which send the block elsewhere. */
DLI_TARGET_BF16 static inline __attribute__((always_inline)) void
bf16_step(const uint16_t *p, __mmask32 m, const struct kbf16 *kb, bool bytes, bool nonfinite,
	  struct bf16_sums *t)
{
	__m512i xa = _mm512_and_si512(_mm512_maskz_loadu_epi16(m, p), kb->absmask);
	if (nonfinite) {
		__mmask32 nf = _mm512_cmpge_epu16_mask(xa, kb->inf);
		xa = _mm512_mask_mov_epi16(xa, nf, _mm512_setzero_si512());
		t->nonfinite += (uint32_t)__builtin_popcount(nf);
	}
	__m512i ib = _mm512_sub_epi16(xa, kb->one); /* 0 wraps around to the top */
	__mmask32 low = _mm512_cmplt_epu16_mask(ib, kb->xn1); /* a nonzero below xn */
	__m512i r = _mm512_min_epu16(bf16_lookup(xa, ib, kb, bytes), kb->maxr);

	t->xmax = _mm512_max_epu16(t->xmax, xa);
	if (__builtin_expect(low != 0, 0)) {
		r = _mm512_mask_mov_epi16(r, low, bf16_r_sub(xa, kb));
		t->under += (uint32_t)__builtin_popcount(_mm512_mask_testn_epi16_mask(
			_mm512_test_epi16_mask(xa, xa), r, r));
		t->low_vectors++;
	}
	t->careful_steps++;
	t->c.xs = _mm512_dpbf16_ps(t->c.xs, (__m512bh)xa, (__m512bh)xa);
	t->cdot = _mm512_dpbf16_ps(t->cdot, (__m512bh)xa, (__m512bh)r);
	t->c.dqs = _mm512_dpbf16_ps(t->c.dqs, (__m512bh)r, (__m512bh)r);
	bf16_err(xa, r, kb, &t->c);
}

/* The fast step, for a whole vector whose nonzero magnitudes all lie in [xn, xov]: there the
 * table's r needs no saturation (it grows with |x|, and xov's product rounds to at most the
 * max) and no subnormal grid. Whether the vector was such is known only afterwards, from the
 * running minimum of |x| - 1 (zeros wrap to the top) and maximum of |x| that it leaves in lowm
 * and xmax. */
DLI_TARGET_BF16 static inline __attribute__((always_inline)) void
bf16_fast_step(const uint16_t *p, const struct kbf16 *kb, bool bytes, struct bf16_lanes *f,
	       __m512i *lowm, __m512i *xmax)
{
	__m512i xa = _mm512_and_si512(_mm512_loadu_si512(p), kb->absmask);
	__m512i ib = _mm512_sub_epi16(xa, kb->one);
	__m512i r = bf16_lookup(xa, ib, kb, bytes);

	*lowm = _mm512_min_epu16(*lowm, ib);
	*xmax = _mm512_max_epu16(*xmax, xa);
	f->xs = _mm512_dpbf16_ps(f->xs, (__m512bh)xa, (__m512bh)xa);
	f->dqs = _mm512_dpbf16_ps(f->dqs, (__m512bh)r, (__m512bh)r);
	bf16_err(xa, r, kb, f);
}

/* Overflows in bn elements at p: finite |x| > xov. */
static uint32_t bf16_overflows(const uint16_t *p, int64_t bn, const struct kbf16 *kb)
{
	uint32_t over = 0;

	for (int64_t j = 0; j < bn; j += 32) {
		__mmask32 m = bn - j >= 32 ? 0xffffffffu : (__mmask32)((1ull << (bn - j)) - 1);
		__m512i xa = _mm512_and_si512(_mm512_maskz_loadu_epi16(m, p + j), kb->absmask);
		over += (uint32_t)__builtin_popcount(_mm512_mask_cmpgt_epu16_mask(
			_mm512_cmplt_epu16_mask(xa, kb->inf), xa, kb->xov));
	}
	return over;
}

/* Every finite element of the bn at p is +-0 (blocks of zeros are common: padding, masked or dead
 * units; their float sums of 0 look like underflow to the range test). */
static bool bf16_all_zero(const uint16_t *p, int64_t bn, const struct kbf16 *kb)
{
	__m512i bits = _mm512_setzero_si512();

	for (int64_t j = 0; j < bn; j += 32) {
		__mmask32 m = bn - j >= 32 ? 0xffffffffu : (__mmask32)((1ull << (bn - j)) - 1);
		__m512i xa = _mm512_and_si512(_mm512_maskz_loadu_epi16(m, p + j), kb->absmask);
		bits = _mm512_or_si512(bits, _mm512_maskz_mov_epi16(
			_mm512_cmplt_epu16_mask(xa, kb->inf), xa));
	}
	return _mm512_test_epi16_mask(bits, bits) == 0;
}

/* Vectors per group of the fast path. */
#define GROUP 8

/* Elements per bf16 block: 64 vectors, so that each float lane of (s - r)^2 sums 64 terms (a
 * float sum of 64 non-negative terms is within a few ulps of 2^-24 * 64 of exact before it goes
 * into double), and each vdpbf16ps lane 128 (two products an instruction, as in the statistics
 * pass's bf16 blocks). Blocks of 1024 ran 4% slower on cache-resident data (the block's end:
 * range test, widening into double, twice as often). */
#define BF16_BLOCK 2048

/* The ways a block can go: fast groups, then careful steps for the rest; careful steps only; or
 * careful steps that leave NaN and infinities out. */
enum bf16_mode { BF16_FAST, BF16_CAREFUL, BF16_NONFINITE };

/* One block's terms into t. Groups of GROUP whole vectors go through the fast step; a group
 * that held a value the fast step cannot take (the test comes at its end, so the loop has no
 * branch per vector) is undone, its sums put back as they were (register copies), and redone
 * by the careful step. The rest of the block, and every block of the other modes, take the
 * careful step. Returns the number of groups redone. */
DLI_TARGET_BF16 static inline __attribute__((always_inline)) uint32_t
bf16_block(const uint16_t *p, int64_t bn, const struct kbf16 *kb,
	   bool bytes, enum bf16_mode mode, struct bf16_sums *t)
{
	const bool nf = mode == BF16_NONFINITE;
	uint32_t redone = 0;
	int64_t j = 0;

	t->f.xs = t->f.dqs = t->f.err0 = t->f.err1 = t->cdot = _mm512_setzero_ps();
	t->c = t->f;
	t->xmax = _mm512_setzero_si512();
	t->under = t->low_vectors = t->careful_steps = t->nonfinite = 0;
	if (mode == BF16_FAST) {
		for (; j + 32 * GROUP <= bn; j += 32 * GROUP) {
			struct bf16_lanes saved = t->f;
			__m512i lowm = _mm512_set1_epi16(-1), xmax = _mm512_setzero_si512();

			for (int g = 0; g < GROUP; g++) {
				_mm_prefetch((const char *)(p + j + 32 * g) + DLI_PREFETCH_BYTES,
					     _MM_HINT_T0);
				bf16_fast_step(p + j + 32 * g, kb, bytes, &t->f, &lowm, &xmax);
			}
			if (__builtin_expect((_mm512_cmplt_epu16_mask(lowm, kb->xn1) |
					      _mm512_cmpgt_epu16_mask(xmax, kb->xov)) != 0, 0)) {
				t->f = saved;
				for (int g = 0; g < GROUP; g++)
					bf16_step(p + j + 32 * g, 0xffffffffu, kb, bytes, false, t);
				redone++;
			}
		}
	}
	for (; j + 32 <= bn; j += 32) {
		_mm_prefetch((const char *)(p + j) + DLI_PREFETCH_BYTES, _MM_HINT_T0);
		bf16_step(p + j, 0xffffffffu, kb, bytes, nf, t);
	}
	if (j < bn) /* zero lanes add nothing and are neither under- nor overflows */
		bf16_step(p + j, (__mmask32)((1ull << (bn - j)) - 1), kb, bytes, nf, t);
	return redone;
}

static inline __attribute__((always_inline)) __m512d widen_add(__m512d acc, __m512 v)
{
	__m512d lo = _mm512_cvtps_pd(_mm512_castps512_ps256(v));
	__m512d hi = _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)));
	return _mm512_add_pd(acc, _mm512_add_pd(lo, hi));
}

/* The bf16 blocks. The sums are of x^2 (unscaled), x r 2^J and r^2 2^2J, (s - r)^2 2^2J: a block
 * is trusted when sum x^2 is in the safe range both unscaled and times (scale 2^J)^2 (then no
 * product overflowed, and what vdpbf16ps flushes to zero, or a float square loses to underflow,
 * is below 2^-24 of the sums; |s - r| <= |s|), and the careful steps' sum x r 2^J is 0 or above
 * 2^-90 (a flushed product is then negligible too: it is 0 only when every r is); any other
 * block goes through the AVX2 pass. A block holding NaN or infinities is redone with them
 * left out, and so are the blocks after it until one holds none.
 *
 * The fast step leaves out sum x r: for each element x r = (s^2 + r^2 - (s - r)^2) / (2 S) (with
 * S = scale 2^J, s = x S), so over the fast steps it is (S^2 sum x^2 + sum r^2 - sum (s - r)^2) /
 * (2 S), made once per call from the double sums. It does not cancel there: every r of a fast
 * step is within a few percent of its s, so sum (s - r)^2 is below 2^-5 of sum s^2. (Where
 * values underflow or saturate it would cancel to noise: those are the careful step's.)
 *
 * The loop is bound by vector operations, so a block's end costs little too: its float lanes
 * go into double lanes that are reduced once per call, and the range test is first made on the
 * float lanes (every lane of sum x^2 below `hi` and one at least `lo`, so that the sum is inside
 * the range both unscaled and scaled; one lane of sum x r at least 2^-90, or all of them 0), the
 * exact test in double only for a block that fails it.
 *
 * Data where values outside the fast step's range are common (many underflows or overflows)
 * would have most groups undone: after a block with two such groups (or, in careful mode, two
 * vectors below xn or two overflows) the next block goes straight to the careful step. */
DLI_TARGET_BF16 static inline __attribute__((always_inline)) void
compare_bf16_body(const uint16_t *data, int64_t n, enum dli_dtype format, float scale,
		  const struct kbf16 *kb, bool bytes,
		  struct dli_stats_record *acc)
{
	double inv = kb->inv, inv2 = inv * inv, S = _mm512_cvtss_f32(kb->scale), ss = S * S;
	const __m512d zero = _mm512_setzero_pd();
	__m512d fxs = zero, fdqs = zero, ferr = zero;          /* fast steps */
	__m512d cxs = zero, cdot = zero, cdqs = zero, cerr = zero; /* careful steps */
	__m512 lo, hi;
	const __m512 dmin = _mm512_set1_ps(0x1p-90f);
	uint64_t count = 0, under = 0, over = 0;
	enum bf16_mode mode = BF16_FAST;
	double fdot;

	/* Sum x^2 < 16 hi <= 2^100 / max(1, ss) and >= lo >= 2^-90 / min(1, ss), with a factor 2 for
	 * the roundings of ss and of these quotients. */
	hi = _mm512_set1_ps((float)(ss > 1 ? 0x1p95 / ss : 0x1p95));
	lo = _mm512_set1_ps((float)(ss < 1 ? 0x1p-89 / ss : 0x1p-89));
	for (int64_t b = 0; b < n; b += BF16_BLOCK) {
		int64_t bn = n - b < BF16_BLOCK ? n - b : BF16_BLOCK;
		const uint16_t *p = data + b;
		struct bf16_sums t;
		uint32_t redone, block_over = 0;
		__m512 xs;

		redone = bf16_block(p, bn, kb, bytes, mode, &t);
		/* NaN or an infinity (a fast group holding one is redone by careful steps, whose
		 * largest magnitude tells): the block again from L1, leaving them out. */
		if (mode != BF16_NONFINITE && _mm512_cmpge_epu16_mask(t.xmax, kb->inf)) {
			mode = BF16_NONFINITE;
			bf16_block(p, bn, kb, bytes, mode, &t);
		}
		xs = _mm512_add_ps(t.f.xs, t.c.xs);
		if (!(_mm512_cmp_ps_mask(xs, hi, _CMP_LE_OQ) == 0xffff &&
		      _mm512_cmp_ps_mask(xs, lo, _CMP_GE_OQ) != 0 &&
		      (_mm512_cmp_ps_mask(t.cdot, dmin, _CMP_GE_OQ) != 0 ||
		       _mm512_test_epi32_mask(_mm512_castps_si512(t.cdot),
					      _mm512_castps_si512(t.cdot)) == 0))) {
			double sx = sum_pd(t.f.xs) + sum_pd(t.c.xs), dot = sum_pd(t.cdot);
			if (!(sx >= 0x1p-90 && sx <= 0x1p100 && sx * ss >= 0x1p-90 &&
			      sx * ss <= 0x1p100 && (dot == 0 || dot >= 0x1p-90))) {
				if (sx == 0 && bf16_all_zero(p, bn, kb)) { /* every term 0 */
					count += (uint64_t)bn - t.nonfinite;
					continue;
				}
				/* a rare block: the AVX2 pass, which takes every value */
				dli_fp8_compare_avx2(p, DLI_DTYPE_BF16, bn, format, scale, false,
						     acc);
				continue;
			}
		}
		if (t.careful_steps) {
			if (_mm512_cmpgt_epu16_mask(t.xmax, kb->xov))
				block_over = bf16_overflows(p, bn, kb);
			cxs = widen_add(cxs, t.c.xs);
			cdot = widen_add(cdot, t.cdot);
			cdqs = widen_add(cdqs, t.c.dqs);
			cerr = widen_add(cerr, _mm512_add_ps(t.c.err0, t.c.err1));
		}
		if (t.nonfinite)
			mode = BF16_NONFINITE;
		else if (mode == BF16_FAST)
			mode = redone >= 2 ? BF16_CAREFUL : BF16_FAST;
		else
			mode = t.low_vectors >= 2 || block_over >= 2 ? BF16_CAREFUL : BF16_FAST;
		count += (uint64_t)bn - t.nonfinite;
		under += t.under;
		over += block_over;
		fxs = widen_add(fxs, t.f.xs);
		fdqs = widen_add(fdqs, t.f.dqs);
		ferr = widen_add(ferr, _mm512_add_ps(t.f.err0, t.f.err1));
	}
	{
		double sx = _mm512_reduce_add_pd(fxs), sq = _mm512_reduce_add_pd(fdqs),
		       se = _mm512_reduce_add_pd(ferr);
		fdot = (ss * sx + sq - se) / (2 * S);
		acc->fp8_count += count;
		acc->underflows += under;
		acc->overflows += over;
		acc->x_sq += sx + _mm512_reduce_add_pd(cxs);
		acc->dot += (fdot + _mm512_reduce_add_pd(cdot)) * inv;
		acc->dq_sq += (sq + _mm512_reduce_add_pd(cdqs)) * inv2;
		acc->err_sq += (se + _mm512_reduce_add_pd(cerr)) * inv2;
	}
}

/* One copy of the loop per lookup. */
DLI_TARGET_BF16 static void
compare_bf16(const uint16_t *data, int64_t n, enum dli_dtype format, float scale,
	     const struct kbf16 *kb, struct dli_stats_record *acc)
{
	if (kb->bytes)
		compare_bf16_body(data, n, format, scale, kb, true, acc);
	else
		compare_bf16_body(data, n, format, scale, kb, false, acc);
}

/* The bf16 table path: on when the CPU has vdpbf16ps; tests turn it off (0) to reach the
 * AVX2 pass with bf16 input, or (2) make it look up words as on CPUs without VBMI. */
int dli_fp8_avx512_bf16_table = 1;

void dli_fp8_compare_avx512(const void *data, enum dli_dtype dtype, int64_t n,
			    enum dli_dtype format, float scale, bool xs_known,
			    struct dli_stats_record *acc)
{
	if (dtype == DLI_DTYPE_BF16 && dli_fp8_avx512_bf16_table &&
	    DLI_CPU_HAS("avx512bf16")) {
		struct k512 k;
		struct kbf16 kb;

		k512_init(&k, format, scale);
		if (kbf16_init(&kb, &k, format, scale)) {
			kb.bytes = kb.bytes && dli_fp8_avx512_bf16_table != 2;
			compare_bf16(data, n, format, scale, &kb, acc);
			return;
		}
	}
	/* f32 and f16 (an AVX-512 port of the AVX2 pass's fast groups and NaN handling was
	 * never written: no machine at hand runs AVX-512), and bf16 without AVX512-BF16 */
	dli_fp8_compare_avx2(data, dtype, n, format, scale, xs_known, acc);
}

static inline __attribute__((always_inline)) void
quantize(const void *data, enum dli_dtype dtype, int64_t n, enum dli_dtype format, float scale,
	 uint8_t *q)
{
	struct k512 k;

	k512_init(&k, format, scale);
	for (int64_t i = 0; i < n; i += 16) {
		__mmask16 m = tail_mask(n - i);
		__m512 s = _mm512_mul_ps(load16(data, dtype, i, m), k.scale);
		__m512 ac = _mm512_min_ps(_mm512_abs_ps(s), k.maxv); /* a NaN becomes the max... */
		__m512i e = _mm512_max_epi32(
			_mm512_and_si512(_mm512_castps_si512(ac), k.expmask), k.emin);
		__m512i c = _mm512_add_epi32(e, k.cadd);
		__m512i t = _mm512_castps_si512(_mm512_add_ps(ac, _mm512_castsi512_ps(c)));
		__m512i code = _mm512_add_epi32(_mm512_sub_epi32(t, c),
						_mm512_sub_epi32(_mm512_srli_epi32(e, k.mshift),
								 k.rebias));
		__mmask16 nan = _mm512_cmp_ps_mask(s, s, _CMP_UNORD_Q);

		code = _mm512_mask_mov_epi32(code, nan, k.nancode); /* ...and NaN again here */
		code = _mm512_or_si512(code, _mm512_and_si512(
			_mm512_srli_epi32(_mm512_castps_si512(s), 24), k.signmask));
		_mm_mask_storeu_epi8(q + i, m, _mm512_cvtepi32_epi8(code));
	}
}

void dli_fp8_quantize_avx512(const void *data, enum dli_dtype dtype, int64_t n,
			     enum dli_dtype format, float scale, uint8_t *q)
{
	switch (dtype) {
	case DLI_DTYPE_F32:
		quantize(data, DLI_DTYPE_F32, n, format, scale, q);
		break;
	case DLI_DTYPE_F16:
		quantize(data, DLI_DTYPE_F16, n, format, scale, q);
		break;
	default:
		quantize(data, DLI_DTYPE_BF16, n, format, scale, q);
		break;
	}
}
