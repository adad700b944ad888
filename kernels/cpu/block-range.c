/* TransformerEngine's max_blockwise_dynamic_range (docs/statistics.md, "Blockwise dynamic range"):
 * the largest log2(max |x| / min nonzero |x|) over a tensor's blocks. Scalar: |x| as float bits,
 * whose unsigned order is the order of the values (NaN above inf), so each block keeps two
 * integers, its largest bits and its smallest nonzero bits. Chunks of whole blocks go to threads. */
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>

#include "cpu-private.h"
#include "kernels-private.h"
#include "load-private.h"

#define CHUNK 2048 /* elements converted at a time */
#define PANEL 4096 /* columns whose blocks are open at once in a pass down the rows */
#define SPAN ((int64_t)1 << 18) /* about this many elements per thread's chunk */

/* A block so far: the largest |x| bits, and the smallest nonzero |x| bits less one (a zero wraps
 * to UINT32_MAX, above everything). */
struct range {
	uint32_t max, min1;
};

/* The blocks folded so far: the largest ratio, and whether a block gave NaN. */
struct fold {
	double ratio;
	bool nan;
};

static void range_init(struct range *r)
{
	r->max = 0;
	r->min1 = UINT32_MAX;
}

static inline void range_add(struct range *r, uint32_t u)
{
	uint32_t m = u - 1u;
	r->max = u > r->max ? u : r->max;
	r->min1 = m < r->min1 ? m : r->min1;
}

/* A block of zeros gives 0 (the fold's start, ratio 1); one holding NaN gives NaN, as does one of
 * infinities only (inf / inf, TransformerEngine's inf - inf). */
static void fold(struct fold *f, const struct range *r)
{
	if (r->max == 0)
		return;
	if (r->max > 0x7f800000u) {
		f->nan = true;
		return;
	}
	double q = (double)bits_float(r->max) / (double)bits_float(r->min1 + 1u);
	if (isnan(q))
		f->nan = true;
	else if (q > f->ratio)
		f->ratio = q;
}

/* |x| as float bits of each FP8 code, per format (E4M3, E5M2), made once. */
static uint32_t fp8_bits[2][256];
static pthread_once_t fp8_once = PTHREAD_ONCE_INIT;

static void fp8_tables(void)
{
	for (int c = 0; c < 256; c++) {
		fp8_bits[0][c] = float_bits(dli_fp8_decode((uint8_t)c, DLI_DTYPE_F8E4M3)) & 0x7fffffffu;
		fp8_bits[1][c] = float_bits(dli_fp8_decode((uint8_t)c, DLI_DTYPE_F8E5M2)) & 0x7fffffffu;
	}
}

/* |x| bits of elements [i, i + n) of a contiguous f32, f16, bf16 or FP8 array. */
static void abs_bits(const void *data, enum dli_dtype dtype, int64_t i, int64_t n, uint32_t *out)
{
	if (dtype == DLI_DTYPE_F8E4M3 || dtype == DLI_DTYPE_F8E5M2) {
		const uint8_t *p = (const uint8_t *)data + i;
		const uint32_t *t = fp8_bits[dtype == DLI_DTYPE_F8E5M2];
		for (int64_t k = 0; k < n; k++)
			out[k] = t[p[k]];
	} else if (dtype == DLI_DTYPE_F32) {
		const uint32_t *p = (const uint32_t *)data + i;
		for (int64_t k = 0; k < n; k++)
			out[k] = p[k] & 0x7fffffffu;
	} else if (dtype == DLI_DTYPE_BF16) {
		const uint16_t *p = (const uint16_t *)data + i;
		for (int64_t k = 0; k < n; k++)
			out[k] = ((uint32_t)p[k] << 16) & 0x7fffffffu;
	} else {
		for (int64_t k = 0; k < n; k++)
			out[k] = float_bits(load(data, dtype, i + k)) & 0x7fffffffu;
	}
}

/* Adds n elements' bits to r: two chains in registers, so that the compares overlap. */
static inline void range_run(const uint32_t *u, int64_t n, struct range *r)
{
	uint32_t h0 = r->max, h1 = 0, l0 = r->min1, l1 = UINT32_MAX;
	int64_t k = 0;

	for (; k + 2 <= n; k += 2) {
		uint32_t a = u[k], b = u[k + 1];
		h0 = a > h0 ? a : h0;
		h1 = b > h1 ? b : h1;
		l0 = a - 1u < l0 ? a - 1u : l0;
		l1 = b - 1u < l1 ? b - 1u : l1;
	}
	if (k < n) {
		h0 = u[k] > h0 ? u[k] : h0;
		l0 = u[k] - 1u < l0 ? u[k] - 1u : l0;
	}
	r->max = h1 > h0 ? h1 : h0;
	r->min1 = l1 < l0 ? l1 : l0;
}

/* Blocks of `bs` consecutive elements of the flattened tensor, the last one partial. */
static void flat_blocks(const void *data, enum dli_dtype dtype, int64_t n, int64_t bs,
			struct fold *f)
{
	uint32_t buf[CHUNK];
	struct range r;
	int64_t left = bs; /* elements the open block still takes */

	range_init(&r);
	for (int64_t i = 0; i < n; i += CHUNK) {
		int64_t m = n - i < CHUNK ? n - i : CHUNK;
		abs_bits(data, dtype, i, m, buf);
		for (int64_t k = 0; k < m;) {
			int64_t take = m - k < left ? m - k : left;
			range_run(buf + k, take, &r);
			k += take;
			if (!(left -= take)) {
				fold(f, &r);
				range_init(&r);
				left = bs;
			}
		}
	}
	if (left != bs)
		fold(f, &r);
}

static void range_merge(struct range *into, const struct range *from)
{
	into->max = from->max > into->max ? from->max : into->max;
	into->min1 = from->min1 < into->min1 ? from->min1 : into->min1;
}

/* Blocks of the flattened transpose (column after column) when the rows do not split into whole
 * blocks, so that a block runs from the end of one column into the next. Read row after row with
 * a panel of columns open, each counting down to its next block boundary: blocks inside a column
 * are folded as they close; a column's head (before its first boundary) and tail (after its
 * last) are joined to the neighbouring columns' in column order once the panel is read, the
 * block still open carried from one panel to the next. */
static int column_blocks(const void *data, enum dli_dtype dtype, int64_t rows, int64_t cols,
			 int64_t bs, struct fold *f)
{
	enum { P = 1024 };
	struct col {
		struct range open, head;
		int64_t left; /* elements until the open piece ends at a boundary */
		int64_t first; /* elements before the column's first boundary (0: none) */
	} *col = malloc(P * sizeof *col);
	uint32_t buf[CHUNK];
	struct range cur;
	int64_t step = rows % bs, phase = 0; /* (c * rows) % bs, column c's start in its block */

	if (!col)
		return -ENOMEM;
	range_init(&cur);
	for (int64_t c0 = 0; c0 < cols; c0 += P) {
		int64_t pc = cols - c0 < P ? cols - c0 : P;
		for (int64_t j = 0; j < pc; j++) {
			range_init(&col[j].open);
			range_init(&col[j].head);
			col[j].first = phase ? bs - phase : 0;
			col[j].left = phase ? bs - phase : bs;
			phase = bs - phase <= step ? step - (bs - phase) : phase + step;
		}
		for (int64_t i = 0; i < rows; i++)
			for (int64_t k0 = 0; k0 < pc; k0 += CHUNK) {
				int64_t m = pc - k0 < CHUNK ? pc - k0 : CHUNK;
				abs_bits(data, dtype, i * cols + c0 + k0, m, buf);
				for (int64_t k = 0; k < m; k++) {
					struct col *q = &col[k0 + k];
					range_add(&q->open, buf[k]);
					if (--q->left)
						continue;
					if (q->first && q->first == i + 1)
						q->head = q->open; /* the piece a block began before */
					else
						fold(f, &q->open);
					range_init(&q->open);
					q->left = bs;
				}
			}
		/* In column order: a head ends the block open before it; a column with no boundary
		 * at all (a block longer than a column) carries it on; the tail opens the next. */
		for (int64_t j = 0; j < pc; j++) {
			if (col[j].first > rows) {
				range_merge(&cur, &col[j].open);
				continue;
			}
			if (col[j].first) {
				range_merge(&cur, &col[j].head);
				fold(f, &cur);
			}
			cur = col[j].open;
		}
	}
	fold(f, &cur); /* the last block, partial; an empty one holds nothing and adds nothing */
	free(col);
	return 0;
}

/* Tiles of h rows by w columns from the top left corner, partial at the bottom and right edges,
 * read row after row with a panel of columns' tiles open at once. */
static void tiles(const void *data, enum dli_dtype dtype, int64_t rows, int64_t cols, int64_t h,
		  int64_t w, struct fold *f)
{
	struct range open[PANEL];
	uint32_t buf[CHUNK], hi[PANEL], lo[PANEL]; /* w = 1: the columns' open blocks, apart */
	int64_t panel = w >= PANEL ? w : (PANEL / w) * w; /* columns, whole tiles */

	for (int64_t c0 = 0; c0 < cols; c0 += panel) {
		int64_t pc = cols - c0 < panel ? cols - c0 : panel;
		int64_t nt = (pc + w - 1) / w;
		for (int64_t t = 0; t < nt; t++) {
			range_init(&open[t]);
			hi[t] = open[t].max;
			lo[t] = open[t].min1;
		}
		for (int64_t i = 0; i < rows; i++) {
			for (int64_t k0 = 0; k0 < pc; k0 += CHUNK) {
				int64_t m = pc - k0 < CHUNK ? pc - k0 : CHUNK;
				abs_bits(data, dtype, i * cols + c0 + k0, m, buf);
				if (w == 1) {
					for (int64_t k = 0; k < m; k++) {
						uint32_t v = buf[k], v1 = v - 1u;
						hi[k0 + k] = v > hi[k0 + k] ? v : hi[k0 + k];
						lo[k0 + k] = v1 < lo[k0 + k] ? v1 : lo[k0 + k];
					}
					continue;
				}
				int64_t t = k0 / w, pos = k0 % w;
				for (int64_t k = 0; k < m; t++, pos = 0) {
					int64_t take = m - k < w - pos ? m - k : w - pos;
					range_run(buf + k, take, &open[t]);
					k += take;
				}
			}
			if ((i + 1) % h == 0 || i + 1 == rows)
				for (int64_t t = 0; t < nt; t++) {
					if (w == 1) {
						open[t].max = hi[t];
						open[t].min1 = lo[t];
					}
					fold(f, &open[t]);
					range_init(&open[t]);
					hi[t] = open[t].max;
					lo[t] = open[t].min1;
				}
		}
	}
}

/* One pass, split into chunks of whole blocks (flat) or whole rows of tiles across threads; each
 * worker folds its own blocks, and the folds combine at the end. */
struct job {
	const void *data;
	enum dli_dtype dtype;
	int64_t rows, cols, bs, h, w, span;
	bool flat;
	struct fold f[DLI_MAX_THREADS];
};

static void chunk(void *arg, int64_t k, int worker)
{
	struct job *j = arg;
	size_t elem = dli_dtype_size(j->dtype);
	if (j->flat) {
		int64_t n = j->rows * j->cols, i = k * j->span;
		int64_t m = n - i < j->span ? n - i : j->span;
		flat_blocks((const char *)j->data + (size_t)i * elem, j->dtype, m, j->bs,
			    &j->f[worker]);
	} else {
		int64_t r0 = k * j->span, m = j->rows - r0 < j->span ? j->rows - r0 : j->span;
		tiles((const char *)j->data + (size_t)(r0 * j->cols) * elem, j->dtype, m, j->cols,
		      j->h, j->w, &j->f[worker]);
	}
}

int dli_cpu_block_range(const void *data, enum dli_dtype dtype, int64_t rows, int64_t cols,
			int64_t block_size, int dims, bool columnwise, double *out)
{
	if ((dtype != DLI_DTYPE_F32 && dtype != DLI_DTYPE_F16 && dtype != DLI_DTYPE_BF16 &&
	     dtype != DLI_DTYPE_F8E4M3 && dtype != DLI_DTYPE_F8E5M2) ||
	    rows < 0 || cols < 0 || block_size < 1 || (dims != 1 && dims != 2) || !out)
		return -EINVAL;
	pthread_once(&fp8_once, fp8_tables);
	if (!rows || !cols)
		return -ENODATA;
	if (!data)
		return -EINVAL;
	/* A block longer than the tensor, or a tile wider or taller than it, is the whole extent:
	 * clamped, so that no index arithmetic meets a block_size near 2^63. */
	int64_t n = rows * cols;
	if (dims == 2)
		block_size = block_size > (rows > cols ? rows : cols) ? (rows > cols ? rows : cols)
								       : block_size;
	else if (block_size > n)
		block_size = n;
	struct job *j = malloc(sizeof *j); /* 4 KiB of folds: not on the caller's stack */
	if (!j)
		return -ENOMEM;
	*j = (struct job){.data = data, .dtype = dtype, .rows = rows, .cols = cols,
			  .bs = block_size};
	int threads = dli_cpu_threads(NULL);
	for (int t = 0; t < threads; t++)
		j->f[t] = (struct fold){.ratio = 1.0, .nan = false};
	if (dims == 1 && columnwise && rows % block_size) {
		/* Blocks that run from one column into the next: one thread. */
		int r = column_blocks(data, dtype, rows, cols, block_size, &j->f[0]);
		if (r) {
			free(j);
			return r;
		}
	} else {
		j->flat = dims == 1 && !columnwise;
		j->h = block_size;
		j->w = dims == 2 ? block_size : 1;
		/* Chunks of whole blocks: `span` elements (flat) or rows, a whole number of
		 * block_size either way, about SPAN elements. */
		int64_t row_len = j->flat ? 1 : cols;
		int64_t per = block_size > SPAN / row_len ? 1 : SPAN / (block_size * row_len);
		j->span = per * block_size;
		int64_t total = j->flat ? rows * cols : rows;
		int64_t n_chunks = total / j->span + (total % j->span != 0);
		if (n_chunks > 1 && threads > 1)
			dli_parallel_for(n_chunks, threads, chunk, j);
		else
			for (int64_t k = 0; k < n_chunks; k++)
				chunk(j, k, 0);
	}
	struct fold all = {.ratio = 1.0, .nan = false};
	for (int t = 0; t < threads; t++) {
		all.nan = all.nan || j->f[t].nan;
		all.ratio = j->f[t].ratio > all.ratio ? j->f[t].ratio : all.ratio;
	}
	free(j);
	*out = all.nan ? NAN : log2(all.ratio);
	return 0;
}
