/* FP8 block scaling's quantize-and-compare pass with AVX2 over 128 x 128 tiles with power-of-two
 * scales, by the vector steps of mx-avx2-private.h. */
#include <math.h>
#include <string.h>

#include "mx-avx2-private.h"

/* The same exact-scaling argument as MXFP8's (mx-avx2-private.h), one scale a tile (dli_fp8b_scale,
 * as the scalar pass computes it). A tile is read twice, its amax and smallest magnitude first
 * (from memory, with the rows a few ahead prefetched: each row of a tile is a short run of its own
 * page, which the hardware prefetchers barely follow), then its steps (from L2). For bf16, the
 * first pass of a tile but a strip's first runs within the steps of the tile before it (struct
 * next_bounds). */

/* Rows ahead of the current one that a first pass on its own prefetches. */
#define FB_AHEAD 8
/* The bytes of each row of the next tile that a tile's first pass prefetches, its steps the
 * rest: for f32 a quarter, so that memory works for the next tile during the first pass too,
 * not only during the steps (measured: 5 to 8% faster than none or half); for 16-bit types none
 * (measured: a quarter was 7% slower for bf16, whose first pass is short). */
INLINE size_t first_share(size_t sz)
{
	return sz == 4 ? DLI_FP8B_BLOCK * sz / 4 : 0;
}

/* bf16's first pass (tile_bounds_bf16) over one row of 128 bf16, 16 at a time in their own 16-bit
 * lanes (no widening): bounds_bf16 takes in the 16 at p, bounds_bf16_row puts the row's largest
 * magnitude into *row_max and its smallest nonzero one less 1 (0xffff: none) into *row_low, as
 * bf16 bits, a number each. */
struct bounds16 {
	__m256i max, low;
};

INLINE struct bounds16 bounds_bf16_zero(void)
{
	return (struct bounds16){_mm256_setzero_si256(), _mm256_set1_epi16(-1)};
}

INLINE void bounds_bf16(const char *p, struct bounds16 *b)
{
	__m256i a = _mm256_and_si256(_mm256_loadu_si256((const __m256i *)p),
				     _mm256_set1_epi16(0x7fff));
	b->max = _mm256_max_epu16(b->max, a);
	b->low = _mm256_min_epu16(b->low, _mm256_sub_epi16(a, _mm256_set1_epi16(1)));
}

INLINE void bounds_bf16_row(struct bounds16 b, uint16_t *row_max, uint16_t *row_low)
{
	__m128i m8 = _mm_max_epu16(_mm256_castsi256_si128(b.max), _mm256_extracti128_si256(b.max, 1));
	__m128i l8 = _mm_min_epu16(_mm256_castsi256_si128(b.low), _mm256_extracti128_si256(b.low, 1));
	/* minpos: the smallest of 8; the largest is the complement of the smallest complement */
	*row_max = (uint16_t)~_mm_cvtsi128_si32(
		_mm_minpos_epu16(_mm_xor_si128(m8, _mm_set1_epi16(-1))));
	*row_low = (uint16_t)_mm_cvtsi128_si32(_mm_minpos_epu16(l8));
}

INLINE void bounds_row_bf16(const char *p, uint16_t *row_max, uint16_t *row_low)
{
	struct bounds16 b = bounds_bf16_zero();

	#pragma GCC unroll 8
	for (int j = 0; j < DLI_FP8B_BLOCK; j += 16)
		bounds_bf16(p + (size_t)j * 2, &b);
	bounds_bf16_row(b, row_max, row_low);
}

/* step_fast's steps for 16 bf16 at once: C's exponent found in their own 16-bit lanes (one vector
 * of 16 where step_fast takes two of 8, as are the NaN and infinities that `clean` zeroes), then
 * C widened as x is. The same C, so the same dq and terms, lane for lane: the even ones into l[0]
 * and the odd ones into l[1], as load_values splits them, the underflows into l[0]'s count.
 * grid_floor16 and chalf16: grid_floor and k->chalf in the top half of each 16-bit lane. */
INLINE void step_bf16_grid(__m256i w, __m256i grid_floor16, __m256i chalf16, enum fast_mode mode,
			   const bool clean, struct fast_lanes l[2])
{
	const __m256i high = _mm256_set1_epi32((int)0xffff0000u);

	if (clean) {
		__m256i a = _mm256_and_si256(w, _mm256_set1_epi16(0x7fff));
		/* magnitudes are below 2^15: a signed compare */
		w = _mm256_andnot_si256(_mm256_cmpgt_epi16(a, _mm256_set1_epi16(0x7f7f)), w);
	}
	__m256i e = _mm256_and_si256(w, _mm256_set1_epi16(0x7f80));
	if (mode != FAST_NORMAL)
		e = _mm256_max_epi16(e, grid_floor16); /* both below 2^15: signed */
	__m256i c16 = _mm256_add_epi16(e, chalf16);
	__m256 x[2] = {_mm256_castsi256_ps(_mm256_slli_epi32(w, 16)),
		       _mm256_castsi256_ps(_mm256_and_si256(w, high))};
	__m256 c[2] = {_mm256_castsi256_ps(_mm256_slli_epi32(c16, 16)),
		       _mm256_castsi256_ps(_mm256_and_si256(c16, high))};

	#pragma GCC unroll 2
	for (int h = 0; h < 2; h++) {
		__m256 dq = _mm256_sub_ps(_mm256_add_ps(x[h], c[h]), c[h]);
		__m256 d = _mm256_sub_ps(x[h], dq);
		l[h].err = _mm256_fmadd_ps(d, d, l[h].err);
		l[h].dqs = _mm256_fmadd_ps(dq, dq, l[h].dqs);
		l[h].xs = _mm256_fmadd_ps(x[h], x[h], l[h].xs);
		if (mode == FAST_UNDER) {
			const __m256 zero = _mm256_setzero_ps();
			__m256i rz = _mm256_castps_si256(_mm256_cmp_ps(dq, zero, _CMP_EQ_OQ));
			__m256i xz = _mm256_castps_si256(_mm256_cmp_ps(x[h], zero, _CMP_EQ_OQ));
			l[0].under = _mm256_add_epi32(_mm256_sub_epi32(l[0].under, rz), xz);
		}
	}
}

/* The steps over one row of a tile: bf16 without saturation in its own 16-bit lanes
 * (step_bf16_normal, or step_bf16_grid), the rest widened to float lanes. `clean`: NaN and
 * infinities zeroed, which leaves them out of every term (a zero adds nothing, and is no
 * underflow); the caller counts them out. sum_xs: see step_bf16_normal. For bf16, the first pass
 * over the row at bp of the next tile into *bd (struct next_bounds). */
INLINE void tile_row(const char *p, enum dli_dtype dtype, __m256 rb, __m256 sb, __m256i fb,
		     __m256i fb16, __m256i chalf16, const struct consts *k,
		     const enum fast_mode mode, const bool sat,
		     const bool clean, const bool sum_xs, const char *bp, struct bounds16 *bd,
		     struct fast_lanes fl[2], struct lanes *l)
{
	const size_t sz = dli_dtype_size(dtype);
	const __m256i finm = _mm256_set1_epi32(0x7f7fffff);

	/* p made opaque to the compiler, so that it cannot hoist the row's loads and its sum x x,
	 * the same in each of tile_loop's variants of a row, above their branch: GCC did, and kept
	 * the row's sixteen vectors on the stack */
	__asm__ volatile("" : "+r"(p));
	if (dtype == DLI_DTYPE_BF16 && mode == FAST_NORMAL && !sat && !clean) {
		#pragma GCC unroll 8
		for (int j = 0; j < DLI_FP8B_BLOCK; j += 16) {
			step_bf16_normal(_mm256_loadu_si256((const __m256i *)(p + (size_t)j * 2)), k,
					 sum_xs, fl);
			bounds_bf16(bp + (size_t)j * 2, bd);
		}
		return;
	}
	if (dtype == DLI_DTYPE_BF16 && !sat) {
		#pragma GCC unroll 8
		for (int j = 0; j < DLI_FP8B_BLOCK; j += 16) {
			step_bf16_grid(_mm256_loadu_si256((const __m256i *)(p + (size_t)j * 2)),
				       fb16, chalf16, mode, clean, fl);
			bounds_bf16(bp + (size_t)j * 2, bd);
		}
		return;
	}
	if (dtype == DLI_DTYPE_BF16)
		for (int j = 0; j < DLI_FP8B_BLOCK; j += 16)
			bounds_bf16(bp + (size_t)j * 2, bd);
	#pragma GCC unroll 4
	for (int j = 0; j < DLI_FP8B_BLOCK; j += DLI_MX_BLOCK) {
		if (sat) {
			__m256i a[4];
			load_abs(p + (size_t)j * sz, dtype, k, a);
			#pragma GCC unroll 4
			for (int h = 0; h < 4; h++) {
				a[h] = _mm256_andnot_si256(_mm256_cmpgt_epi32(a[h], finm), a[h]);
				step(a[h], rb, sb, k, l);
			}
			continue;
		}
		__m256 x[4];
		load_values(p + (size_t)j * sz, dtype, x);
		#pragma GCC unroll 4
		for (int h = 0; h < 4; h++) {
			if (clean) {
				__m256i a = _mm256_and_si256(_mm256_castps_si256(x[h]), k->absmask);
				x[h] = _mm256_andnot_ps(
					_mm256_castsi256_ps(_mm256_cmpgt_epi32(a, finm)), x[h]);
			}
			step_fast(x[h], fb, k, mode, &fl[h & 1], &fl[0].under);
		}
	}
}

/* The next tile of a bf16 strip, whose first pass the steps of a tile run, a vector of it with each
 * of theirs (tile_row; the row's two numbers after the row's steps): its loads then wait while the
 * steps compute, where a first pass of its own only waited (the steps of the tile before
 * prefetched it whole, and the steps prefetch the tile after it, so the loads mostly find it in
 * cache; prefetching its rows a few ahead as well, as tile_bounds_bf16 does, was 4 % slower).
 * Measured: a row of it with each row of the steps was 7 % faster on a 128 MiB view, 10 % on 4 MiB
 * (in L3), than the first pass on its own after the steps; a vector with each vector, 3 to 4 %
 * faster again (in L2 and L3), where the row's loads and maxima held the core's queues in one
 * run. The last tile of a strip runs its own first pass again, so that the steps take no branch
 * for it. */
struct next_bounds {
	const char *tile;
	uint16_t *row_max, *row_low; /* as tile_bounds_bf16's */
};

/* The steps over one tile of `rows` rows (row stride `stride` bytes), with no call inside, so
 * that the sums stay in registers, and for bf16 the first pass of nb->tile.
 * `sat`: the tile's largest element scales above fp8_max (an infinity in the tile makes its scale
 * 1), so step's saturation and overflow counts, into l and acc, every row cleaned; else the fast
 * steps into f. `clean`: the tile holds NaN or infinities, in the rows whose bits are set in
 * nf_rows (bit r % 64 of word r / 64), which are cleaned. In
 * FAST_UNDER, only the rows whose bits are set in under_rows (as nf_rows's) hold a value that
 * can underflow and count underflows; the others take FAST_SUBNORMAL's steps, the same rounding
 * without the count. For bf16, the rows whose bits are clear in sub_rows (as nf_rows's) hold no
 * nonzero value below the format's smallest normal times si, and take FAST_NORMAL's steps
 * (step_bf16_normal) in any mode, unless they hold NaN or infinities. `next`, unless NULL: the
 * next tile (as many rows, same stride; for bf16, the one after nb->tile), whose rows past their
 * first_share are prefetched a row a row, so that memory works for it while the steps work here
 * (from L2, where the tile's first pass left it). */
INLINE void tile_loop(const char *p, const char *next, const struct next_bounds *nb,
		      enum dli_dtype dtype, size_t stride, int64_t rows,
		      const float *rcp, const float *si, const int32_t *grid_floor,
		      const uint64_t nf_rows[2], const uint64_t under_rows[2],
		      const uint64_t sub_rows[2], const struct consts *k, const enum fast_mode mode,
		      const bool sat,
		      const bool clean, const bool sum_xs, struct fast_sums *fp, struct lanes *lp,
		      __m256d acc[4], struct dli_block_terms *t)
{
	struct fast_lanes fl[2] = {fast_lanes_zero(), fast_lanes_zero()};
	struct lanes l = *lp;
	__m256 rb = _mm256_broadcast_ss(rcp), sb = _mm256_broadcast_ss(si);
	__m256i fb = _mm256_castps_si256(_mm256_broadcast_ss((const float *)grid_floor));
	/* for step_bf16_grid: both have their low 16 bits clear */
	__m256i fb16 = _mm256_or_si256(fb, _mm256_srli_epi32(fb, 16));
	__m256i chalf16 = _mm256_or_si256(k->chalf, _mm256_srli_epi32(k->chalf, 16));

	for (int64_t r = 0; r < rows; r++, p += stride) {
		if (next) {
			#pragma GCC unroll 8
			for (size_t j = first_share(dli_dtype_size(dtype));
			     j < DLI_FP8B_BLOCK * dli_dtype_size(dtype); j += 64)
				_mm_prefetch(next + (size_t)r * stride + j, _MM_HINT_T0);
		}
		const char *bp = dtype == DLI_DTYPE_BF16 ? nb->tile + (size_t)r * stride : NULL;
		struct bounds16 bd = bounds_bf16_zero();
		bool nf = clean && (nf_rows[r >> 6] >> (r & 63) & 1);
		bool normal = dtype == DLI_DTYPE_BF16 && mode != FAST_NORMAL &&
			      !(sub_rows[r >> 6] >> (r & 63) & 1);
		if (sat)
			tile_row(p, dtype, rb, sb, fb, fb16, chalf16, k, mode, true, true, sum_xs,
				 bp, &bd, fl, &l);
		else if (normal && !nf)
			tile_row(p, dtype, rb, sb, fb, fb16, chalf16, k, FAST_NORMAL, false,
				 false, sum_xs, bp, &bd, fl, &l);
		else if (mode == FAST_UNDER && !(under_rows[r >> 6] >> (r & 63) & 1)) {
			if (nf)
				tile_row(p, dtype, rb, sb, fb, fb16, chalf16, k, FAST_SUBNORMAL,
					 false, true, sum_xs, bp, &bd, fl, &l);
			else
				tile_row(p, dtype, rb, sb, fb, fb16, chalf16, k, FAST_SUBNORMAL,
					 false, false, sum_xs, bp, &bd, fl, &l);
		} else if (nf)
			tile_row(p, dtype, rb, sb, fb, fb16, chalf16, k, mode, false, true, sum_xs,
				 bp, &bd, fl, &l);
		else
			tile_row(p, dtype, rb, sb, fb, fb16, chalf16, k, mode, false, false,
				 sum_xs, bp, &bd, fl, &l);
		if (dtype == DLI_DTYPE_BF16)
			bounds_bf16_row(bd, &nb->row_max[r], &nb->row_low[r]);
		/* 16 terms a lane a row (the fast steps' two sets: 8): 64, then double */
		if (sat && r % 4 == 3)
			flush(&l, acc, t);
		else if (!sat && r % 8 == 7)
			flush_fast_lanes(fl, fp, t, mode == FAST_UNDER);
	}
	if (sat)
		flush(&l, acc, t);
	else
		flush_fast_lanes(fl, fp, t, mode == FAST_UNDER);
	*lp = l;
}

/* One tile_loop a mode, with or without NaN (tile_steps) */
#define TILE_MODES(dt, clean, sum_xs)                                                             \
	do {                                                                                      \
		if (mode == FAST_UNDER)                                                           \
			tile_loop(p, next, nb, dt, stride, rows, rcp, si, grid_floor, nf_rows,    \
				  under_rows, sub_rows, k, FAST_UNDER, false, clean, sum_xs, f,  \
				  l, acc, t);                                                     \
		else if (mode == FAST_SUBNORMAL)                                                  \
			tile_loop(p, next, nb, dt, stride, rows, rcp, si, grid_floor, nf_rows,    \
				  under_rows, sub_rows, k, FAST_SUBNORMAL, false, clean, sum_xs,  \
				  f, l, acc, t);                                                  \
		else                                                                              \
			tile_loop(p, next, nb, dt, stride, rows, rcp, si, grid_floor, nf_rows,    \
				  under_rows, sub_rows, k, FAST_NORMAL, false, clean, sum_xs, f,  \
				  l, acc, t);                                                     \
	} while (0)

/* sum_xs: see step_bf16_normal; a tile with NaN or infinities (clean) sums all: its rows take
 * step_bf16_grid or step, which sum x^2 (the driver's x_sq is the given sum all the same, see
 * dli_block_add_left_out). */
#define TILE_STEPS(name, dt, sum_xs)                                                              \
	__attribute__((noinline)) static void name(                                               \
		const char *p, const char *next, const struct next_bounds *nb, size_t stride,     \
		int64_t rows, const float *rcp,                                                   \
		const float *si,                                                                  \
		const int32_t *grid_floor, const uint64_t nf_rows[2],                             \
		const uint64_t under_rows[2], const uint64_t sub_rows[2],                         \
		const struct consts *k, enum fast_mode mode,                                      \
		bool sat, bool clean, struct fast_sums *f, struct lanes *l,                       \
		__m256d acc[4], struct dli_block_terms *t)                                        \
	{                                                                                         \
		if (sat)                                                                          \
			tile_loop(p, next, nb, dt, stride, rows, rcp, si, grid_floor, nf_rows,    \
				  under_rows, sub_rows, k, FAST_UNDER, true, true, true, f, l,    \
				  acc, t);                                                        \
		else if (clean)                                                                   \
			TILE_MODES(dt, true, true);                                               \
		else                                                                              \
			TILE_MODES(dt, false, sum_xs);                                            \
	}
TILE_STEPS(tile_steps_f32, DLI_DTYPE_F32, true)
TILE_STEPS(tile_steps_bf16, DLI_DTYPE_BF16, true)
TILE_STEPS(tile_steps_f16, DLI_DTYPE_F16, true)
TILE_STEPS(tile_steps_bf16_xs_known, DLI_DTYPE_BF16, false)

/* A tile's largest magnitude bits in the lanes of *m, its smallest nonzero one less 1 in those
 * of *lowm (zeros wrap to the top), and the rows that hold NaN or an infinity as bits of nf_rows
 * (row r0 + i: bit i % 64 of word i / 64), with in *fin the largest magnitude of the lanes of
 * rows that hold none in that lane (the rest of the finite amax is in the rows of nf_rows), each
 * row's smallest nonzero magnitudes less 1 in row_low[i] (for under_rows_of), the rows FB_AHEAD
 * ahead prefetched, and, unless `next` is NULL, the first_share of each row of the next tile. */
INLINE void tile_bounds(const char *data, enum dli_dtype dtype, int64_t cols, int64_t r0,
			int64_t r1, int64_t c0, const char *next, const struct consts *k,
			__m256i *m_out, __m256i *lowm_out, __m256i *fin_out, uint64_t nf_rows[2],
			__m256i *row_low)
{
	const size_t sz = dli_dtype_size(dtype), stride = (size_t)cols * sz;
	const __m256i one = _mm256_set1_epi32(1), finm = _mm256_set1_epi32(0x7f7fffff);
	__m256i m = _mm256_setzero_si256(), lowm = _mm256_set1_epi32(-1), fin = m;

	for (int64_t r = r0; r < r1; r++) {
		const char *p = data + (size_t)(r * cols + c0) * sz;
		if (next)
			for (size_t j = 0; j < first_share(sz); j += 64)
				_mm_prefetch(next + (size_t)(r - r0) * stride + j, _MM_HINT_T0);
		if (r + FB_AHEAD < r1)
			for (size_t j = 0; j < DLI_FP8B_BLOCK * sz; j += 64)
				_mm_prefetch(p + FB_AHEAD * stride + j, _MM_HINT_T0);
		__m256i mr = _mm256_setzero_si256(), lr = _mm256_set1_epi32(-1);
		#pragma GCC unroll 4
		for (int j = 0; j < DLI_FP8B_BLOCK; j += DLI_MX_BLOCK) {
			__m256i a[4];
			load_abs(p + (size_t)j * sz, dtype, k, a);
			mr = _mm256_max_epu32(mr, _mm256_max_epu32(_mm256_max_epu32(a[0], a[1]),
								   _mm256_max_epu32(a[2], a[3])));
			#pragma GCC unroll 4
			for (int h = 0; h < 4; h++)
				lr = _mm256_min_epu32(lr, _mm256_sub_epi32(a[h], one));
		}
		row_low[r - r0] = lr;
		lowm = _mm256_min_epu32(lowm, lr);
		m = _mm256_max_epu32(m, mr);
		/* magnitudes are below 2^31: a signed compare */
		__m256i nfv = _mm256_cmpgt_epi32(mr, finm);
		fin = _mm256_max_epu32(fin, _mm256_andnot_si256(nfv, mr));
		int nf = _mm256_movemask_ps(_mm256_castsi256_ps(nfv));
		nf_rows[(r - r0) >> 6] |= (uint64_t)(nf != 0) << ((r - r0) & 63);
	}
	*fin_out = fin;
	*m_out = m;
	*lowm_out = lowm;
}

/* The same for bf16, in its own 16-bit lanes (16 elements a vector, no widening), a row's
 * extremes kept as one number each: row_max[i] its largest magnitude, row_low[i] its smallest
 * nonzero one less 1 (0xffff: none), as bf16 bits (rows past r1 - r0: 0 and 0xffff), so that
 * what the tile needs of its rows is found 16 rows a vector afterwards (tile_extremes_bf16,
 * under_rows_of_bf16), where a row took a dozen operations and a branch for it. With `next`, the
 * rows of the next tile are prefetched too: its first pass runs with this tile's steps (struct
 * next_bounds), which prefetch only the tile after it, and found it in memory (measured: 1 to 2 %
 * faster on a 64 MiB view, a strip's second tile a 32nd of it). */
INLINE void tile_bounds_bf16(const char *data, int64_t cols, int64_t r0, int64_t r1, int64_t c0,
			     bool next, uint16_t row_max[DLI_FP8B_BLOCK],
			     uint16_t row_low[DLI_FP8B_BLOCK])
{
	const size_t stride = (size_t)cols * 2;

	for (int64_t r = r0; r < r1; r++) {
		const char *p = data + (size_t)(r * cols + c0) * 2;
		if (r + FB_AHEAD < r1)
			for (size_t j = 0; j < DLI_FP8B_BLOCK * 2; j += 64)
				_mm_prefetch(p + FB_AHEAD * stride + j, _MM_HINT_T0);
		if (next)
			for (size_t j = 0; j < DLI_FP8B_BLOCK * 2; j += 64)
				_mm_prefetch(p + DLI_FP8B_BLOCK * 2 + j, _MM_HINT_T0);
		bounds_row_bf16(p, &row_max[r - r0], &row_low[r - r0]);
	}
	for (int64_t i = r1 - r0; i < DLI_FP8B_BLOCK; i++) {
		row_max[i] = 0;
		row_low[i] = 0xffff;
	}
}

/* The bits (as nf_rows's) of 32 rows from compares of their 16-bit lanes (all ones or zero):
 * rows 0 to 15 in lo, 16 to 31 in hi. */
INLINE uint32_t row_bits16(__m256i lo, __m256i hi)
{
	/* packs takes 8 lanes of each operand into each 128-bit half: quads lo 0-7, hi 0-7,
	 * lo 8-15, hi 8-15, which the permute puts in row order */
	__m256i b = _mm256_permute4x64_epi64(_mm256_packs_epi16(lo, hi), 0xd8);
	return (uint32_t)_mm256_movemask_epi8(b);
}

/* From tile_bounds_bf16's rows, what tile_bounds gives: in every lane of *m_out the tile's
 * largest magnitude, of *lowm_out its smallest nonzero one less 1 (0xffffffff: none), of *fin_out
 * the largest of the rows with no NaN or infinity (the rest of the finite amax is in the rows of
 * nf_rows), as float bits; nf_rows's bits set for the rows with NaN or an infinity. */
INLINE void tile_extremes_bf16(const uint16_t row_max[DLI_FP8B_BLOCK],
			       const uint16_t row_low[DLI_FP8B_BLOCK], __m256i *m_out,
			       __m256i *lowm_out, __m256i *fin_out, uint64_t nf_rows[2])
{
	const __m256i fin16 = _mm256_set1_epi16(0x7f7f);
	__m256i m = _mm256_setzero_si256(), low = _mm256_set1_epi16(-1), fin = m, nf[8];
	uint16_t mv[16], lv[16], fv[16];
	uint32_t mx = 0, lo = 0xffff, fx = 0;

	#pragma GCC unroll 8
	for (int i = 0; i < 8; i++) {
		__m256i rm = _mm256_loadu_si256((const __m256i *)(row_max + 16 * i));
		nf[i] = _mm256_cmpgt_epi16(rm, fin16); /* below 2^15: signed */
		m = _mm256_max_epu16(m, rm);
		fin = _mm256_max_epu16(fin, _mm256_andnot_si256(nf[i], rm));
		low = _mm256_min_epu16(low,
				       _mm256_loadu_si256((const __m256i *)(row_low + 16 * i)));
	}
	for (int w = 0; w < 2; w++)
		nf_rows[w] = row_bits16(nf[4 * w], nf[4 * w + 1]) |
			     (uint64_t)row_bits16(nf[4 * w + 2], nf[4 * w + 3]) << 32;
	_mm256_storeu_si256((__m256i *)mv, m);
	_mm256_storeu_si256((__m256i *)lv, low);
	_mm256_storeu_si256((__m256i *)fv, fin);
	for (int i = 0; i < 16; i++) {
		mx = mv[i] > mx ? mv[i] : mx;
		lo = lv[i] < lo ? lv[i] : lo;
		fx = fv[i] > fx ? fv[i] : fx;
	}
	*fin_out = _mm256_set1_epi32((int)(fx << 16));
	/* a bf16's magnitude bits are the top half of its float's; the smallest less 1 widened
	 * (0xffff: none, which wraps to 0xffffffff as the 32-bit lanes would) */
	*m_out = _mm256_set1_epi32((int)(mx << 16));
	*lowm_out = _mm256_set1_epi32((int)(((lo + 1) << 16) - 1));
}

/* The rows (bits as nf_rows's) that hold a nonzero magnitude of at most `limit` (float bits), from
 * their row_low of tile_bounds: the magnitude less 1 at most limit less 1, unsigned. */
INLINE void under_rows_of(const __m256i *row_low, int64_t rows, uint32_t limit,
			  uint64_t under_rows[2])
{
	const __m256i lim = _mm256_set1_epi32((int)(limit - 1));

	for (int64_t r = 0; r < rows; r++) {
		__m256i v = row_low[r];
		__m256i hit = _mm256_cmpeq_epi32(_mm256_min_epu32(v, lim), v);
		under_rows[r >> 6] |= (uint64_t)!_mm256_testz_si256(hit, hit) << (r & 63);
	}
}

/* The same from tile_bounds_bf16's row_low, 16 rows a vector, `limit` a power of two, whose bf16
 * bits are its top half, or one less, the largest bf16 below it (the rows past the tile's, 0xffff,
 * are above any). */
INLINE void under_rows_of_bf16(const uint16_t row_low[DLI_FP8B_BLOCK], uint32_t limit,
			       uint64_t under_rows[2])
{
	const __m256i lim = _mm256_set1_epi16((short)((limit >> 16) - 1));
	__m256i hit[8];

	#pragma GCC unroll 8
	for (int i = 0; i < 8; i++) {
		__m256i v = _mm256_loadu_si256((const __m256i *)(row_low + 16 * i));
		hit[i] = _mm256_cmpeq_epi16(_mm256_min_epu16(v, lim), v);
	}
	for (int w = 0; w < 2; w++)
		under_rows[w] |= row_bits16(hit[4 * w], hit[4 * w + 1]) |
				 (uint64_t)row_bits16(hit[4 * w + 2], hit[4 * w + 3]) << 32;
}

/* The second look of fb_strip at the rows of a tile that hold NaN or an infinity (bits of nf_rows),
 * as float bits: returns how many of their elements are NaN or infinite, and puts the largest
 * finite magnitude among them into *fm's lanes where larger, and all ones into *inf's lanes unless
 * none is an infinity. */
INLINE uint64_t nonfinite_rows(const char *tile, enum dli_dtype dtype, size_t stride, int64_t rows,
			       const uint64_t nf_rows[2], const struct consts *k, __m256i *fm,
			       __m256i *inf)
{
	const __m256i finm = _mm256_set1_epi32(0x7f7fffff);
	const size_t sz = dli_dtype_size(dtype);
	uint64_t nonfinite = 0;

	*inf = _mm256_setzero_si256();
	for (int64_t r = 0; r < rows; r++) {
		if (!(nf_rows[r >> 6] >> (r & 63) & 1))
			continue;
		const char *p = tile + (size_t)r * stride;
		for (int j = 0; j < DLI_FP8B_BLOCK; j += DLI_MX_BLOCK) {
			__m256i a[4];
			load_abs(p + (size_t)j * sz, dtype, k, a);
			for (int h = 0; h < 4; h++) {
				__m256i nf = _mm256_cmpgt_epi32(a[h], finm);
				nonfinite += (uint64_t)__builtin_popcount(
					(unsigned)_mm256_movemask_ps(_mm256_castsi256_ps(nf)));
				*fm = _mm256_max_epu32(*fm, _mm256_andnot_si256(nf, a[h]));
				*inf = _mm256_or_si256(*inf, _mm256_cmpeq_epi32(
					a[h], _mm256_set1_epi32(0x7f800000)));
			}
		}
	}
	return nonfinite;
}

/* The same for bf16, in its own 16-bit lanes (the counts too: at most 8 a lane a row, 1024 a
 * tile). */
INLINE uint64_t nonfinite_rows_bf16(const char *tile, size_t stride, const uint64_t nf_rows[2],
				    __m256i *fm, __m256i *inf)
{
	const __m256i abs16 = _mm256_set1_epi16(0x7fff), fin16 = _mm256_set1_epi16(0x7f7f);
	const __m256i inf16 = _mm256_set1_epi16(0x7f80);
	__m256i count = _mm256_setzero_si256(), m = count, infs = count;
	uint16_t mv[16];
	uint32_t mx = 0;

	/* the marked rows by their bits, where a test of each row's mispredicted (a few rows in
	 * a hundred, at random, in the bench's _nan row): 2 to 3 % faster there */
	for (int w = 0; w < 2; w++) {
		for (uint64_t bits = nf_rows[w]; bits; bits &= bits - 1) {
			const char *p = tile + (size_t)(64 * w + __builtin_ctzll(bits)) * stride;
			#pragma GCC unroll 8
			for (int j = 0; j < DLI_FP8B_BLOCK; j += 16) {
				__m256i a = _mm256_and_si256(
					_mm256_loadu_si256((const __m256i *)(p + (size_t)j * 2)),
					abs16);
				__m256i nf = _mm256_cmpgt_epi16(a, fin16); /* below 2^15: signed */
				count = _mm256_sub_epi16(count, nf);
				m = _mm256_max_epu16(m, _mm256_andnot_si256(nf, a));
				infs = _mm256_or_si256(infs, _mm256_cmpeq_epi16(a, inf16));
			}
		}
	}
	_mm256_storeu_si256((__m256i *)mv, m);
	for (int i = 0; i < 16; i++)
		mx = mv[i] > mx ? mv[i] : mx;
	*fm = _mm256_max_epu32(*fm, _mm256_set1_epi32((int)(mx << 16)));
	*inf = infs;
	return sum_epi32(_mm256_madd_epi16(count, _mm256_set1_epi16(1)));
}

static void fb_strip(const char *data, enum dli_dtype dtype, int64_t cols, int64_t r0, int64_t r1,
		     enum dli_dtype format, bool xs_known, dli_fb_tile_fn scalar_tile, void *ctx,
		     struct dli_block_terms *t)
{
	const int mbits = format == DLI_DTYPE_F8E4M3 ? 3 : 2;
	const int bias = format == DLI_DTYPE_F8E4M3 ? 7 : 15;
	const struct consts k = {
		.emin = _mm256_set1_epi32((1 - bias + 127) << 23),
		.cadd = _mm256_set1_epi32((23 - mbits) << 23),
		CONSTS_OF(format, mbits, bias),
	};
	const uint32_t maxbits = format == DLI_DTYPE_F8E4M3 ? 0x43e00000u : 0x47600000u;
	const size_t sz = dli_dtype_size(dtype), stride = (size_t)cols * sz;
	struct lanes l = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(),
			  _mm256_setzero_ps(), _mm256_setzero_si256(), _mm256_setzero_si256()};
	__m256d acc[4] = {_mm256_setzero_pd(), _mm256_setzero_pd(), _mm256_setzero_pd(),
			  _mm256_setzero_pd()};
	struct fast_sums f = {.err = acc[0], .dqs = acc[0], .xs = acc[0]};
	uint64_t count = 0;
	__m256i row_low[DLI_FP8B_BLOCK]; /* tile_bounds's, a row of the tile each */
	uint16_t row_max16[DLI_FP8B_BLOCK], row_low16[DLI_FP8B_BLOCK]; /* tile_bounds_bf16's */
	/* whether a bf16 tile's row_max16 and row_low16 came with the steps of the tile before
	 * (struct next_bounds): its rows past r1 - r0 keep the first tile's padding */
	bool bounds_ready = false;

	for (int64_t c0 = 0; c0 < cols; c0 += DLI_FP8B_BLOCK) {
		bool have_bounds = bounds_ready;
		bounds_ready = false;
		if (c0 + DLI_FP8B_BLOCK > cols) { /* a partial tile: the scalar pass */
			scalar_tile(ctx, r0, c0);
			continue;
		}
		__m256i m, lowm, fin_lanes;
		uint64_t nf_rows[2] = {0, 0}, under_rows[2] = {0, 0};
		uint64_t sub_rows[2] = {~0ull, ~0ull}; /* unless found otherwise, every row */
		const char *tile = data + (size_t)(r0 * cols + c0) * sz;
		const char *next =
			c0 + 2 * DLI_FP8B_BLOCK <= cols ? tile + DLI_FP8B_BLOCK * sz : NULL;
		if (dtype == DLI_DTYPE_BF16) {
			if (!have_bounds)
				tile_bounds_bf16(data, cols, r0, r1, c0, next != NULL, row_max16,
						 row_low16);
			tile_extremes_bf16(row_max16, row_low16, &m, &lowm, &fin_lanes, nf_rows);
		} else
			tile_bounds(data, dtype, cols, r0, r1, c0, next, &k, &m, &lowm, &fin_lanes,
				    nf_rows, row_low);
		uint32_t amax_bits = hmax_epu32(m), fin_bits = amax_bits;
		uint64_t nonfinite = 0;
		if (amax_bits > 0x7f7fffffu) {
			/* NaN or an infinity: a second look (from cache) at the rows that hold
			 * them for the largest finite magnitude, an infinity (the scalar pass's
			 * amax, with NaN left out) and the count of both, which the terms leave
			 * out; the rest of the finite amax came with the first. For bf16 in its
			 * own 16-bit lanes: 7 operations a vector of 16 where widened to float
			 * lanes it took 18 (about a tenth of the bench's _nan row then). */
			__m256i fm = fin_lanes, inf;
			if (dtype == DLI_DTYPE_BF16)
				nonfinite = nonfinite_rows_bf16(tile, stride, nf_rows, &fm, &inf);
			else
				nonfinite = nonfinite_rows(tile, dtype, stride, r1 - r0, nf_rows,
							   &k, &fm, &inf);
			fin_bits = hmax_epu32(fm);
			amax_bits = _mm256_testz_si256(inf, inf) ? fin_bits : 0x7f800000u;
		}
		if (fin_bits != 0 && (fin_bits > 0x5d800000u || fin_bits < 0x21800000u)) {
			scalar_tile(ctx, r0, c0); /* beyond the float lanes' range */
			continue;
		}
		float amax, fin;
		memcpy(&amax, &amax_bits, sizeof(amax));
		memcpy(&fin, &fin_bits, sizeof(fin));
		float scale = dli_fp8b_scale(amax, format, dtype, true), si = 1.0f / scale;
		if (si < t->lo)
			t->lo = si;
		if (si > t->hi)
			t->hi = si;
		count += (uint64_t)((r1 - r0) * DLI_FP8B_BLOCK) - nonfinite;
		if (fin_bits == 0)
			continue;
		float top = fin * scale; /* exact: the scale is a power of two */
		uint32_t top_bits;
		memcpy(&top_bits, &top, sizeof(top_bits));
		/* Without saturation, the fast steps, as MXFP8's batches (see batch_plan in
		 * mx-avx2-rows.c), with the underflows counted only when the smallest nonzero |x|
		 * can underflow. */
		uint32_t lmin = ~hmax_epu32(_mm256_xor_si256(lowm, _mm256_set1_epi32(-1))) + 1;
		float lowest;
		memcpy(&lowest, &lmin, sizeof(lowest));
		float low_scaled = lowest * scale;
		enum fast_mode mode = low_scaled <= ldexpf(1.0f, -bias - mbits) ? FAST_UNDER
				      : low_scaled < ldexpf(1.0f, 1 - bias)   ? FAST_SUBNORMAL
									       : FAST_NORMAL;
		/* the row sets below are for the fast steps: the steps with saturation count
		 * underflows in every row. Rows with no value on the subnormal grid are taken
		 * apart only in tiles without NaN or infinities: an infinity sets the scale to
		 * 1, which puts most rows on that grid, and looking for the others made the
		 * bench's _nan tiles 8 % slower). */
		bool sat = top_bits > maxbits, clean = nonfinite > 0;
		if (!sat && mode == FAST_UNDER) {
			/* half the smallest subnormal times si: exact, a power of two within
			 * float's normals (the scale is at most fp8_max * 2^60) */
			float limit = ldexpf(1.0f, -bias - mbits) / scale;
			uint32_t limit_bits;
			memcpy(&limit_bits, &limit, sizeof(limit_bits));
			if (dtype == DLI_DTYPE_BF16)
				under_rows_of_bf16(row_low16, limit_bits, under_rows);
			else
				under_rows_of(row_low, r1 - r0, limit_bits, under_rows);
		}
		if (!sat && !clean && dtype == DLI_DTYPE_BF16 && mode != FAST_NORMAL) {
			/* the rows with a nonzero |x| below the smallest normal times si (exact,
			 * as limit's above), whose bits less 1 are the largest bf16 below it */
			float normal_limit = ldexpf(1.0f, 1 - bias) / scale;
			uint32_t normal_bits;
			memcpy(&normal_bits, &normal_limit, sizeof(normal_bits));
			sub_rows[0] = sub_rows[1] = 0;
			under_rows_of_bf16(row_low16, normal_bits - 1, sub_rows);
		}
		uint32_t sbits;
		memcpy(&sbits, &scale, sizeof(sbits));
		/* the fast steps' grid_floor: the format's smallest normal exponent plus log2(si),
		 * that is 127 - the scale's exponent field, in the exponent field */
		const int32_t grid_floor =
			(int32_t)((uint32_t)(1 - bias + 254 - (int)(sbits >> 23)) << 23);
		/* bf16: the steps run the next tile's first pass (struct next_bounds; the last
		 * tile's its own again, over row_max16 and row_low16, which it no longer needs)
		 * and prefetch the one after it */
		const struct next_bounds nb = {next ? next : tile, row_max16, row_low16};
		const char *after = c0 + 3 * DLI_FP8B_BLOCK <= cols ? tile + 2 * DLI_FP8B_BLOCK * sz
								      : NULL;
		if (dtype == DLI_DTYPE_BF16 && next)
			bounds_ready = true;
		if (dtype == DLI_DTYPE_F32)
			tile_steps_f32(tile, next, NULL, stride, r1 - r0, &scale, &si, &grid_floor,
				       nf_rows, under_rows, sub_rows, &k, mode, sat, clean, &f, &l, acc,
				       t);
		else if (dtype == DLI_DTYPE_BF16 && xs_known)
			tile_steps_bf16_xs_known(tile, after, &nb, stride, r1 - r0, &scale, &si,
						 &grid_floor, nf_rows, under_rows, sub_rows, &k,
						 mode, sat, clean, &f, &l, acc, t);
		else if (dtype == DLI_DTYPE_BF16)
			tile_steps_bf16(tile, after, &nb, stride, r1 - r0, &scale, &si, &grid_floor,
					nf_rows, under_rows, sub_rows, &k, mode, sat, clean, &f, &l,
					acc, t);
		else
			tile_steps_f16(tile, next, NULL, stride, r1 - r0, &scale, &si, &grid_floor,
				       nf_rows, under_rows, sub_rows, &k, mode, sat, clean, &f, &l, acc,
				       t);
	}
	t->count += count;
	add_sums(acc, &f, t);
}

void dli_fb_strip_avx2(const void *data, enum dli_dtype dtype, int64_t cols, int64_t r0,
		       int64_t r1, enum dli_dtype format, bool xs_known, dli_fb_tile_fn scalar_tile,
		       void *ctx, struct dli_block_terms *t)
{
	switch (dtype) {
	case DLI_DTYPE_F32:
		fb_strip(data, DLI_DTYPE_F32, cols, r0, r1, format, false, scalar_tile, ctx, t);
		break;
	case DLI_DTYPE_F16:
		fb_strip(data, DLI_DTYPE_F16, cols, r0, r1, format, false, scalar_tile, ctx, t);
		break;
	default:
		fb_strip(data, DLI_DTYPE_BF16, cols, r0, r1, format, xs_known, scalar_tile, ctx,
			 t);
		break;
	}
}
