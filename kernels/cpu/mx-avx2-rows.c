/* MXFP8's quantize-and-compare pass with AVX2 over row-wise blocks: batches of eight 32-element
 * blocks through the fast steps (mx-avx2-private.h), the others one block at a time. */
#include <math.h>
#include <string.h>

#include "avx2-private.h"
#include "mx-avx2-private.h"

/* Every block the fast steps cannot take (NaN, infinities, huge or tiny magnitudes, a row's
 * partial last block) goes to the one-block path (vector steps that leave NaN and infinities out,
 * or the scalar reference); a batch of eight blocks sends only those there, after a call-free loop
 * over the row's batches (a call would keep the sums in memory: every vector register is the
 * caller's to save). */

/* Blocks summed in float lanes before the sums go to double: 4 terms a lane a block, so at most
 * 64 terms a lane, and non-negative terms keep the float sums within 64 * 2^-24 of exact. */
#define FLUSH_BLOCKS 16

/* Eight blocks at a time: their amaxes gathered into one vector, their E8M0 codes, scale
 * reciprocals and scales computed in its lanes, and each block's broadcast from there, so that
 * no scalar work sits between two blocks. */
#define BATCH 8

/* One block through the fast steps, its grid_floor broadcast from memory: a broadcast load costs no
 * vector pipe, a lane permute does. sum_xs: see step_bf16_normal. */
INLINE void fast_block(const char *p, enum dli_dtype dtype, const int32_t *grid_floor,
		       const struct consts *k, enum fast_mode mode, const bool sum_xs,
		       struct fast_lanes l[2])
{
	if (dtype == DLI_DTYPE_BF16 && mode == FAST_NORMAL) {
		step_bf16_normal(_mm256_loadu_si256((const __m256i *)p), k, sum_xs, l);
		step_bf16_normal(_mm256_loadu_si256((const __m256i *)p + 1), k, sum_xs, l);
		return;
	}
	__m256 x[4];
	__m256i fb = _mm256_castps_si256(_mm256_broadcast_ss((const float *)grid_floor));
	load_values(p, dtype, x);
	#pragma GCC unroll 8
	for (int h = 0; h < 4; h++)
		step_fast(x[h], fb, k, mode, &l[h & 1], &l[h & 1].under);
}

/* The blocks of a batch not in bad_mask through the fast steps. A loop, not unrolled: unrolled,
 * GCC merged the variants and ran out of registers for the sums (but see batches). */
INLINE void fast_blocks(const char *p, enum dli_dtype dtype, size_t bstride, int bad_mask,
			const int32_t *grid_floors, const struct consts *k,
			const enum fast_mode mode, const bool sum_xs, struct fast_lanes l[2])
{
	#pragma GCC unroll 1
	for (int b = 0; b < BATCH; b++)
		if (!(bad_mask >> b & 1))
			fast_block(p + b * bstride, dtype, grid_floors + b, k, mode, sum_xs, l);
}

/* What a batch's fast steps need, worked out from its amaxes. */
struct plan {
	int bad;    /* the blocks left to the one-block path, bit b for block b */
	enum fast_mode mode;
	int32_t grid_floors[BATCH]; /* each block's (see step_fast) */
};

/* The smallest of the lanes of `lowm` (magnitudes less 1 as float bits, zeros wrapped to the
 * top) plus 1, in every lane: the smallest nonzero magnitude, 0 if none. */
INLINE __m256i min_nonzero(__m256i lowm)
{
	__m256i lmin = _mm256_min_epu32(lowm, _mm256_permute2x128_si256(lowm, lowm, 0x01));
	lmin = _mm256_min_epu32(lmin, _mm256_shuffle_epi32(lmin, 0x4e));
	lmin = _mm256_min_epu32(lmin, _mm256_shuffle_epi32(lmin, 0xb1));
	return _mm256_add_epi32(lmin, _mm256_set1_epi32(1));
}

/* A batch's plan from its blocks' amaxes (float bits, block b in lane b) and `lowm` (the
 * smallest nonzero magnitude less 1, as float bits, over the lanes), the codes of the blocks it
 * takes into f's range, given `lmin`, its smallest nonzero magnitude (min_nonzero). A block is left to the one-block path for an amax that is 0, NaN, inf or
 * outside [2^-60, 2^60], or that scales above fp8_max; the others go through the fast steps, so
 * that a lone NaN costs its own block the one-block path, not the batch. */
INLINE void plan_tail(__m256i amax, __m256i lmin, const struct consts *k, struct fast_sums *f,
		      struct plan *pl)
{
	/* in [2^-60, 2^60] as unsigned bits: amax - 2^-60 <= 2^60 - 2^-60 */
	__m256i off = _mm256_sub_epi32(amax, _mm256_set1_epi32(0x21800000));
	__m256i bad = _mm256_cmpgt_epi32(off, _mm256_set1_epi32(0x5d800000 - 0x21800000));
	bad = _mm256_or_si256(bad, _mm256_cmpgt_epi32(_mm256_setzero_si256(), off));
	/* the code: v = amax * float(1 / fp8_max) (a normal float here), its exponent field,
	 * plus 1 when its mantissa is nonzero: a nonzero mantissa plus 0x7fffff carries into
	 * the exponent */
	__m256i v = _mm256_castps_si256(_mm256_mul_ps(_mm256_castsi256_ps(amax), k->maxrcp));
	__m256i e = _mm256_srli_epi32(_mm256_add_epi32(v, _mm256_set1_epi32(0x7fffff)), 23);
	__m256 rcp = _mm256_castsi256_ps(
		_mm256_slli_epi32(_mm256_sub_epi32(_mm256_set1_epi32(254), e), 23));
	/* the largest element scaled: above fp8_max only by the rounding of v */
	__m256i top = _mm256_castps_si256(_mm256_mul_ps(_mm256_castsi256_ps(amax), rcp));
	bad = _mm256_or_si256(bad, _mm256_cmpgt_epi32(top, k->maxbits));
	int bad_mask = _mm256_movemask_ps(_mm256_castsi256_ps(bad));
	pl->bad = bad_mask;
	if (bad_mask == 0xff)
		return;
	/* the codes of the blocks taken here (the others: 0, which no code of theirs is) */
	e = _mm256_andnot_si256(bad, e);
	f->emin_seen = _mm256_min_epu32(f->emin_seen, _mm256_or_si256(e, _mm256_and_si256(
								      bad, _mm256_set1_epi32(255))));
	f->emax_seen = _mm256_max_epu32(f->emax_seen, e);
	/* No underflow to count when the batch's smallest nonzero |x| (lmin) times each taken
	 * block's reciprocal is above half the format's smallest subnormal: every scaled nonzero
	 * value is then above it too, and rounds to a nonzero code (half of it, a tie, would round
	 * to the even 0). The blocks left out count in that smallest |x|, which can only make the
	 * mode FAST_UNDER where it need not be; their own lanes are left out. Lane by lane, where
	 * the smallest reciprocal (the largest code's) took a reduction across the lanes more in
	 * the plan's chain. */
	__m256 lowest = _mm256_mul_ps(_mm256_castsi256_ps(lmin), rcp);
	__m256 left_out = _mm256_castsi256_ps(bad);
	/* likewise, no value on the subnormals' grid when it is at least the smallest normal */
	pl->mode = _mm256_movemask_ps(_mm256_andnot_ps(
			   left_out, _mm256_cmp_ps(lowest, k->half_sub, _CMP_LE_OQ)))
			   ? FAST_UNDER
		   : _mm256_movemask_ps(_mm256_andnot_ps(
			     left_out, _mm256_cmp_ps(lowest, k->min_normal, _CMP_LT_OQ)))
			   ? FAST_SUBNORMAL
			   : FAST_NORMAL;
	/* each block's grid_floor (see step_fast): the format's smallest normal exponent, 1 - bias,
	 * plus log2(si) = e - 127, in the exponent field; from memory (see fast_block) */
	_mm256_storeu_si256((__m256i *)pl->grid_floors,
			    _mm256_slli_epi32(_mm256_add_epi32(e, k->fbias), 23));
}

/* The plan of a batch of eight full blocks of f32 or f16 at p (stride `bstride` bytes between
 * blocks), the codes of the blocks it takes into f's range (bf16: struct plan_bf16). */
INLINE void batch_plan(const char *p, enum dli_dtype dtype, size_t bstride,
		       const struct consts *k, struct fast_sums *f, struct plan *pl)
{
	__m256i m[BATCH], lowm = _mm256_set1_epi32(-1), one = _mm256_set1_epi32(1);
	#pragma GCC unroll 8
	for (int b = 0; b < BATCH; b++) {
		__m256i a[4];
		load_abs(p + b * bstride, dtype, k, a);
		m[b] = _mm256_max_epu32(_mm256_max_epu32(a[0], a[1]), _mm256_max_epu32(a[2], a[3]));
		/* the batch's smallest nonzero magnitude, less 1 (zeros wrap to the top) */
		#pragma GCC unroll 8
		for (int h = 0; h < 4; h++)
			lowm = _mm256_min_epu32(lowm, _mm256_sub_epi32(a[h], one));
	}
	plan_tail(dli_avx2_hmax8(m), min_nonzero(lowm), k, f, pl);
}

/* A bf16 batch's plan in the making, in stages that batches spreads over the steps of the
 * batches before it: plan_bf16_block for each block, then plan_bf16_stage 0 to 2. The plan is a
 * long chain (amaxes, codes, mode), and the steps depend on it only by branches; made all at once,
 * its waiting operations held the core's queues while the steps' piled up behind them, and the
 * two took the sum of their times. bf16 in its own 16-bit lanes (a bf16's magnitude bits are the
 * top half of its float's, so maxima and minima carry over), widened once a batch. Each magnitude
 * less 1 serves both: as signed (a zero's -1 the least) its maximum is amax less 1, as unsigned
 * (a zero's 0xffff the most) its minimum the smallest nonzero less 1. */
struct plan_bf16 {
	__m256i m[BATCH]; /* block b's magnitudes less 1, the larger of each pair of lanes */
	__m256i low16;    /* the smallest nonzero magnitude less 1 in each lane, 0xffff if none */
	__m256i t[4];     /* stage 0: pairs of blocks interleaved, the larger of each pair */
	__m256i amax, lmin; /* stage 1 */
};

INLINE void plan_bf16_block(struct plan_bf16 *s, const char *block, int b)
{
	const __m256i abs16 = _mm256_set1_epi16(0x7fff), one16 = _mm256_set1_epi16(1);
	const __m256i *q = (const __m256i *)block;
	__m256i a0 = _mm256_sub_epi16(_mm256_and_si256(_mm256_loadu_si256(q), abs16), one16);
	__m256i a1 = _mm256_sub_epi16(_mm256_and_si256(_mm256_loadu_si256(q + 1), abs16), one16);
	s->m[b] = _mm256_max_epi16(a0, a1);
	__m256i low = _mm256_min_epu16(a0, a1);
	s->low16 = b == 0 ? low : _mm256_min_epu16(s->low16, low);
}

/* Stage 0 and 1: dli_avx2_hmax8 (avx2-private.h) in sixteen signed 16-bit lanes, the maxima plus
 * 1 widened to float bits at the end (a level more of unpacks, but no widening of each block's
 * maximum first); stage 2: plan_tail. */
INLINE void plan_bf16_stage(struct plan_bf16 *s, int stage, const struct consts *k,
			    struct fast_sums *f, struct plan *pl)
{
	if (stage == 0) {
		#pragma GCC unroll 8
		for (int i = 0; i < 4; i++)
			s->t[i] = _mm256_max_epi16(_mm256_unpacklo_epi16(s->m[2 * i], s->m[2 * i + 1]),
						   _mm256_unpackhi_epi16(s->m[2 * i], s->m[2 * i + 1]));
	} else if (stage == 1) {
		__m256i u[2];
		#pragma GCC unroll 8
		for (int i = 0; i < 2; i++)
			u[i] = _mm256_max_epi16(_mm256_unpacklo_epi32(s->t[2 * i], s->t[2 * i + 1]),
						_mm256_unpackhi_epi32(s->t[2 * i], s->t[2 * i + 1]));
		__m256i v = _mm256_max_epi16(_mm256_unpacklo_epi64(u[0], u[1]),
					     _mm256_unpackhi_epi64(u[0], u[1]));
		__m128i w = _mm_max_epi16(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
		w = _mm_add_epi16(w, _mm_set1_epi16(1));
		s->amax = _mm256_slli_epi32(_mm256_cvtepu16_epi32(w), 16);
		/* the smallest as float bits less 1: ((lo + 1) << 16) - 1, 0xffff (no nonzero)
		 * wrapping to the top */
		const __m256i one = _mm256_set1_epi32(1);
		__m256i lo = _mm256_and_si256(
			_mm256_min_epu16(s->low16, _mm256_srli_epi32(s->low16, 16)),
			_mm256_set1_epi32(0xffff));
		s->lmin = min_nonzero(
			_mm256_sub_epi32(_mm256_slli_epi32(_mm256_add_epi32(lo, one), 16), one));
	} else {
		plan_tail(s->amax, s->lmin, k, f, pl);
	}
}

INLINE void plan_bf16_blocks(struct plan_bf16 *s, const char *p)
{
	#pragma GCC unroll 8
	for (int b = 0; b < BATCH; b++)
		plan_bf16_block(s, p + b * DLI_MX_BLOCK * 2, b);
}

INLINE void plan_bf16_stages(struct plan_bf16 *s, const struct consts *k, struct fast_sums *f,
			     struct plan *pl)
{
	#pragma GCC unroll 4
	for (int stage = 0; stage < 3; stage++)
		plan_bf16_stage(s, stage, k, f, pl);
}

/* One full block by the one-block path: the scalar code, the vector steps with saturation and
 * overflow counts, or nothing but its count for zeros. */
INLINE void one_block(const struct mx_pass *ps, enum dli_dtype dtype, const char *p, int64_t idx,
		      const struct consts *k, struct lanes *l, __m256d acc[4], int *pending,
		      uint64_t *count, struct dli_block_terms *t)
{
	__m256i a[4];
	load_abs(p, dtype, k, a);
	uint32_t amax_bits = hmax_epu32(_mm256_max_epu32(_mm256_max_epu32(a[0], a[1]),
							 _mm256_max_epu32(a[2], a[3])));
	uint32_t block_n = DLI_MX_BLOCK; /* the elements compared: the finite ones */
	if (amax_bits >= 0x7f800000u) {
		/* NaN or an infinity. They are left out of every term (the main pass counts them):
		 * their lanes are zeroed, and the amax is that of the finite values, plus inf. */
		__m256i finm = _mm256_set1_epi32(0x7f7fffff), fmax8 = _mm256_setzero_si256();
		unsigned nonfinite = 0;
		bool inf = false;
		#pragma GCC unroll 8
		for (int h = 0; h < 4; h++) {
			__m256i nf = _mm256_cmpgt_epi32(a[h], finm);
			inf = inf || !_mm256_testz_si256(
					     _mm256_cmpeq_epi32(a[h], _mm256_set1_epi32(0x7f800000)),
					     _mm256_set1_epi32(-1));
			nonfinite += (unsigned)__builtin_popcount(
				(unsigned)_mm256_movemask_ps(_mm256_castsi256_ps(nf)));
			a[h] = _mm256_andnot_si256(nf, a[h]);
			fmax8 = _mm256_max_epu32(fmax8, a[h]);
		}
		uint32_t fmax_bits = hmax_epu32(fmax8);
		if (fmax_bits != 0 && (fmax_bits > 0x5d800000u || fmax_bits < 0x21800000u)) {
			dli_mx_block_scalar(ps, idx, 1, DLI_MX_BLOCK, t);
			return;
		}
		block_n = DLI_MX_BLOCK - nonfinite;
		if (inf) {
			/* Code 0xfe: every finite x is scaled by 2^-127, far below the format's
			 * subnormals from |x| <= 2^60, so each nonzero one underflows to a zero dq:
			 * err and x^2 are both x^2. */
			const double sid = 0x1p127; /* dli_mx_scale_inv(0xfe) */
			if (sid < t->lo)
				t->lo = sid;
			if (sid > t->hi)
				t->hi = sid;
			#pragma GCC unroll 8
			for (int h = 0; h < 4; h++) {
				__m256 xa = _mm256_castsi256_ps(a[h]);
				__m256i xz = _mm256_cmpeq_epi32(a[h], _mm256_setzero_si256());
				l->err = _mm256_fmadd_ps(xa, xa, l->err);
				l->xs = _mm256_fmadd_ps(xa, xa, l->xs);
				/* nonzero finite lanes; the zeroed non-finite ones count as zeros */
				l->under = _mm256_add_epi32(l->under, _mm256_set1_epi32(1));
				l->under = _mm256_add_epi32(l->under, xz);
			}
			*count += block_n;
			if (++*pending == FLUSH_BLOCKS) {
				flush(l, acc, t);
				*pending = 0;
			}
			return;
		}
		amax_bits = fmax_bits;
	}
	if (amax_bits == 0) { /* all zeros: nothing to add but the count */
		*count += block_n;
		return;
	}
	/* Magnitudes whose squares a float would lose: the scalar reference, in double. */
	if (amax_bits > 0x5d800000u || amax_bits < 0x21800000u) { /* 2^60, 2^-60 */
		dli_mx_block_scalar(ps, idx, 1, DLI_MX_BLOCK, t);
		return;
	}
	/* dli_mx_e8m0, dli_mx_rcp and dli_mx_scale_inv by batch_plan's formula (see plan_tail):
	 * v = amax / fp8_max is a normal float here, and the code neither 0 nor above 0xfe.
	 * Without calls, where each made the caller save the vector registers of its sums. */
	float amax, v, rcp_f, si_f;
	memcpy(&amax, &amax_bits, sizeof(amax));
	v = amax * _mm256_cvtss_f32(k->maxrcp);
	uint32_t v_bits, e, rcp_bits, si_bits;
	memcpy(&v_bits, &v, sizeof(v));
	e = (v_bits + 0x7fffff) >> 23;
	rcp_bits = (254 - e) << 23;
	si_bits = e << 23;
	memcpy(&rcp_f, &rcp_bits, sizeof(rcp_f));
	memcpy(&si_f, &si_bits, sizeof(si_f));
	double sid = si_f;
	__m256 rcp = _mm256_set1_ps(rcp_f), si = _mm256_set1_ps(si_f);
	if (sid < t->lo)
		t->lo = sid;
	if (sid > t->hi)
		t->hi = sid;
	#pragma GCC unroll 8
	for (int h = 0; h < 4; h++)
		step(a[h], rcp, si, k, l);
	*count += block_n;
	if (++*pending == FLUSH_BLOCKS) {
		flush(l, acc, t);
		*pending = 0;
	}
}

/* Batches in a row segment (rows_avx2) */
#define SEGMENT 32

/* A batch of bf16 on the format's normals through the fast steps but for the blocks in bad (a
 * constant 0 for a whole batch), unrolled, with the next batch's plan finished and the one after's
 * begun between its blocks (struct plan_bf16); the compiler's barrier after each block keeps them
 * there: without it, GCC loaded every block's vectors first and kept them on the stack. */
INLINE void interleaved(const char *p, const int bad, const bool sum_xs, const struct consts *k,
			struct fast_sums *fp, struct plan *next, struct plan_bf16 *finish,
			struct plan_bf16 *begin, struct fast_lanes l[2])
{
	const size_t bstride = DLI_MX_BLOCK * 2;
	#pragma GCC unroll 8
	for (int b = 0; b < BATCH; b++) {
		if (!(bad >> b & 1))
			fast_block(p + b * bstride, DLI_DTYPE_BF16, NULL, k, FAST_NORMAL, sum_xs, l);
		plan_bf16_block(begin, p + (2 * BATCH + b) * bstride, b);
		if (b % 2 == 1 && b < 7)
			plan_bf16_stage(finish, b / 2, k, fp, next);
		__asm__ volatile("" ::: "memory");
	}
}

/* n batches from p on through the fast steps into *f, their counts into *count; masks[i] is batch
 * i's blocks left to the one-block path; sum_xs: see step_bf16_normal. No call inside: every
 * vector register is the caller's to save, so a call in this loop would keep the sums in memory. */
INLINE void batches(const char *p, enum dli_dtype dtype, const bool sum_xs, int n,
		    const struct consts *k, struct fast_sums *fp, int *fast_pending, uint64_t *count,
		    struct dli_block_terms *t, uint8_t *masks)
{
	const size_t bstride = DLI_MX_BLOCK * dli_dtype_size(dtype), span = BATCH * bstride;
	const bool bf16 = dtype == DLI_DTYPE_BF16;
	struct fast_lanes l[2] = {fast_lanes_zero(), fast_lanes_zero()};
	struct plan plans[2];
	struct plan_bf16 making[2]; /* batch i + 1's plan finished, i + 2's begun (bf16) */
	int pend = *fast_pending;
	uint64_t cnt = 0;

	/* Each batch is planned ahead, the plan being a long chain (amaxes, codes, floors) that
	 * the steps wait on: f32 and f16 one batch ahead, before the steps of the one before it;
	 * bf16, whose steps are the fewest a byte, in stages among the steps (struct plan_bf16). */
	if (n > 0 && bf16) {
		plan_bf16_blocks(&making[0], p);
		plan_bf16_stages(&making[0], k, fp, &plans[0]);
	} else if (n > 0) {
		batch_plan(p, dtype, bstride, k, fp, &plans[0]);
	}
	if (n > 1 && bf16)
		plan_bf16_blocks(&making[1], p + span);
	for (int i = 0; i < n; i++, p += span) {
		#pragma GCC unroll 8
		for (size_t j = 0; j < span; j += 64)
			_mm_prefetch(p + j + DLI_PREFETCH_BYTES, _MM_HINT_T0);
		if (i + 1 < n && !bf16)
			batch_plan(p + span, dtype, bstride, k, fp, &plans[(i + 1) & 1]);
		const struct plan *pl = &plans[i & 1];
		struct plan *next = &plans[(i + 1) & 1];
		struct plan_bf16 *finish = &making[(i + 1) & 1], *begin = &making[i & 1];
		const bool has_next = i + 1 < n, has_after = i + 2 < n;
		/* The blocks read again (from L1): without this, GCC keeps the plan's vectors for
		 * the steps and, with too few registers for them all, spills them to the stack. */
		__asm__ volatile("" ::: "memory");
		masks[i] = (uint8_t)pl->bad;
		if (bf16 && pl->mode == FAST_NORMAL && has_after && pl->bad == 0) {
			interleaved(p, 0, sum_xs, k, fp, next, finish, begin, l);
		} else if (bf16 && pl->mode == FAST_NORMAL && has_after) {
			interleaved(p, pl->bad, sum_xs, k, fp, next, finish, begin, l);
		} else {
			if (pl->mode == FAST_UNDER)
				fast_blocks(p, dtype, bstride, pl->bad, pl->grid_floors, k,
					    FAST_UNDER, sum_xs, l);
			else if (pl->mode == FAST_SUBNORMAL)
				fast_blocks(p, dtype, bstride, pl->bad, pl->grid_floors, k,
					    FAST_SUBNORMAL, sum_xs, l);
			else
				fast_blocks(p, dtype, bstride, pl->bad, pl->grid_floors, k,
					    FAST_NORMAL, sum_xs, l);
			if (has_after && bf16)
				plan_bf16_blocks(begin, p + 2 * span);
			if (has_next && bf16)
				plan_bf16_stages(finish, k, fp, next);
		}
		cnt += (uint64_t)(BATCH - __builtin_popcount((unsigned)pl->bad)) * DLI_MX_BLOCK;
		/* 16 terms a lane a batch (two sets of lanes): four batches, then double */
		if (++pend == 4) {
			flush_fast(l, fp, t);
			pend = 0;
		}
	}
	flush_fast(l, fp, t); /* the lanes stay here */
	*fast_pending = pend;
	*count += cnt;
}

#define BATCHES(name, dt, sum_xs)                                                                 \
	__attribute__((noinline)) static void name(const char *p, int n, const struct consts *k,  \
						   struct fast_sums *f, int *pend, uint64_t *count,  \
						   struct dli_block_terms *t, uint8_t *masks)       \
	{                                                                                         \
		batches(p, dt, sum_xs, n, k, f, pend, count, t, masks);                           \
	}
BATCHES(batches_f32, DLI_DTYPE_F32, true)
BATCHES(batches_bf16, DLI_DTYPE_BF16, true)
BATCHES(batches_bf16_xs_known, DLI_DTYPE_BF16, false)
BATCHES(batches_f16, DLI_DTYPE_F16, true)

INLINE void rows_avx2(const struct mx_pass *ps, enum dli_dtype dtype, int64_t r0, int64_t r1,
		      struct dli_block_terms *t)
{
	const int mbits = ps->format == DLI_DTYPE_F8E4M3 ? 3 : 2;
	const int bias = ps->format == DLI_DTYPE_F8E4M3 ? 7 : 15;
	const struct consts k = {
		.emin = _mm256_set1_epi32((1 - bias + 127) << 23),
		.cadd = _mm256_set1_epi32((23 - mbits) << 23),
		.maxrcp = _mm256_set1_ps(dli_mx_max_rcp(ps->format)),
		CONSTS_OF(ps->format, mbits, bias),
	};
	const size_t sz = dli_dtype_size(dtype), bstride = DLI_MX_BLOCK * sz;
	const int64_t cols = ps->cols, full = cols / DLI_MX_BLOCK * DLI_MX_BLOCK;
	struct lanes l = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(),
			  _mm256_setzero_ps(), _mm256_setzero_si256(), _mm256_setzero_si256()};
	__m256d acc[4] = {_mm256_setzero_pd(), _mm256_setzero_pd(), _mm256_setzero_pd(),
			  _mm256_setzero_pd()};
	struct fast_sums f = {.err = acc[0], .dqs = acc[0], .xs = acc[0],
			      .emin_seen = _mm256_set1_epi32(255),
			      .emax_seen = _mm256_setzero_si256()};
	int pending = 0, fast_pending = 0;
	uint64_t count = 0;
	uint8_t masks[SEGMENT];

	for (int64_t r = r0; r < r1; r++) {
		const char *row = ps->data + (size_t)(r * cols) * sz;
		int64_t c = 0;
		/* The row's batches in segments: the fast steps first (a call-free loop), then the
		 * blocks they left out. */
		while (c + BATCH * DLI_MX_BLOCK <= full) {
			int64_t nb = (full - c) / (BATCH * DLI_MX_BLOCK);
			int n = nb < SEGMENT ? (int)nb : SEGMENT;
			const char *p = row + (size_t)c * sz;
			if (dtype == DLI_DTYPE_F32)
				batches_f32(p, n, &k, &f, &fast_pending, &count, t, masks);
			else if (dtype == DLI_DTYPE_BF16 && ps->xs_known)
				batches_bf16_xs_known(p, n, &k, &f, &fast_pending, &count, t,
						      masks);
			else if (dtype == DLI_DTYPE_BF16)
				batches_bf16(p, n, &k, &f, &fast_pending, &count, t, masks);
			else
				batches_f16(p, n, &k, &f, &fast_pending, &count, t, masks);
			for (int i = 0; i < n; i++)
				for (int b = 0; masks[i] && b < BATCH; b++)
					if (masks[i] >> b & 1)
						one_block(ps, dtype, p + ((size_t)i * BATCH + b) * bstride,
							  r * cols + c + ((int64_t)i * BATCH + b) * DLI_MX_BLOCK,
							  &k, &l, acc, &pending, &count, t);
			c += (int64_t)n * BATCH * DLI_MX_BLOCK;
		}
		for (; c < full; c += DLI_MX_BLOCK)
			one_block(ps, dtype, row + (size_t)c * sz, r * cols + c, &k, &l, acc,
				  &pending, &count, t);
		if (full < cols)
			dli_mx_block_scalar(ps, r * cols + full, 1, cols - full, t);
	}
	flush(&l, acc, t);
	t->count += count;
	add_sums(acc, &f, t);
	add_scale_range(&f.emin_seen, &f.emax_seen, t);
}

void dli_mx_rows_avx2(const struct mx_pass *ps, int64_t r0, int64_t r1, struct dli_block_terms *t)
{
	switch (ps->dtype) {
	case DLI_DTYPE_F32:
		rows_avx2(ps, DLI_DTYPE_F32, r0, r1, t);
		break;
	case DLI_DTYPE_F16:
		rows_avx2(ps, DLI_DTYPE_F16, r0, r1, t);
		break;
	default:
		rows_avx2(ps, DLI_DTYPE_BF16, r0, r1, t);
		break;
	}
}
