/* `dlinspect compare --plot`: a grid of line plots, one per diverging tag, run A and run B in two
 * colours and the first divergence marked, written as a PNG with no library: an RGB canvas, a 5x8
 * bitmap font drawn here, and a PNG whose zlib stream holds stored (uncompressed) deflate blocks. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "compare.h"

/* ---- the canvas ---- */

struct rgb {
	unsigned char r, g, b;
};

static const struct rgb WHITE = {255, 255, 255}, BLACK = {0, 0, 0}, GRID = {225, 225, 225},
			RUN_A_COLOR = {31, 119, 180}, RUN_B_COLOR = {255, 127, 14},
			MARK = {214, 39, 40};

struct canvas {
	int w, h;
	unsigned char *px; /* w * h * 3 */
};

static void put(struct canvas *c, int x, int y, struct rgb k)
{
	if (x < 0 || y < 0 || x >= c->w || y >= c->h)
		return;
	unsigned char *p = c->px + 3 * ((size_t)y * (size_t)c->w + (size_t)x);
	p[0] = k.r;
	p[1] = k.g;
	p[2] = k.b;
}

static void rect(struct canvas *c, int x0, int y0, int x1, int y1, struct rgb k)
{
	for (int y = y0; y <= y1; y++)
		for (int x = x0; x <= x1; x++)
			put(c, x, y, k);
}

/* Bresenham's line, `thick` pixels wide (a square brush). */
static void line(struct canvas *c, int x0, int y0, int x1, int y1, int thick, struct rgb k)
{
	int dx = abs(x1 - x0), dy = -abs(y1 - y0);
	int sx = x0 < x1 ? 1 : -1, sy = y0 < y1 ? 1 : -1, e = dx + dy;
	int lo = -(thick - 1) / 2, hi = thick / 2;
	for (;;) {
		rect(c, x0 + lo, y0 + lo, x0 + hi, y0 + hi, k);
		if (x0 == x1 && y0 == y1)
			break;
		int e2 = 2 * e;
		if (e2 >= dy) {
			e += dy;
			x0 += sx;
		}
		if (e2 <= dx) {
			e += dx;
			y0 += sy;
		}
	}
}

/* ---- the font: 5 columns by 8 rows ('#' set), row 7 for descenders; missing rows are blank ---- */

struct glyph {
	char c;
	char rows[8][6];
};

static const struct glyph font[] = {
	{'0', {".###.", "#...#", "#..##", "#.#.#", "##..#", "#...#", ".###."}},
	{'1', {"..#..", ".##..", "..#..", "..#..", "..#..", "..#..", ".###."}},
	{'2', {".###.", "#...#", "....#", "...#.", "..#..", ".#...", "#####"}},
	{'3', {"#####", "...#.", "..#..", "...#.", "....#", "#...#", ".###."}},
	{'4', {"...#.", "..##.", ".#.#.", "#..#.", "#####", "...#.", "...#."}},
	{'5', {"#####", "#....", "####.", "....#", "....#", "#...#", ".###."}},
	{'6', {"..##.", ".#...", "#....", "####.", "#...#", "#...#", ".###."}},
	{'7', {"#####", "....#", "...#.", "..#..", ".#...", ".#...", ".#..."}},
	{'8', {".###.", "#...#", "#...#", ".###.", "#...#", "#...#", ".###."}},
	{'9', {".###.", "#...#", "#...#", ".####", "....#", "...#.", ".##.."}},
	{'a', {".....", ".....", ".###.", "....#", ".####", "#...#", ".####"}},
	{'b', {"#....", "#....", "#.##.", "##..#", "#...#", "#...#", "####."}},
	{'c', {".....", ".....", ".###.", "#....", "#....", "#...#", ".###."}},
	{'d', {"....#", "....#", ".##.#", "#..##", "#...#", "#...#", ".####"}},
	{'e', {".....", ".....", ".###.", "#...#", "#####", "#....", ".###."}},
	{'f', {"..##.", ".#..#", ".#...", "###..", ".#...", ".#...", ".#..."}},
	{'g', {".....", ".....", ".####", "#...#", "#...#", ".####", "....#", ".###."}},
	{'h', {"#....", "#....", "#.##.", "##..#", "#...#", "#...#", "#...#"}},
	{'i', {"..#..", ".....", ".##..", "..#..", "..#..", "..#..", ".###."}},
	{'j', {"...#.", ".....", "..##.", "...#.", "...#.", "...#.", "#..#.", ".##.."}},
	{'k', {"#....", "#....", "#..#.", "#.#..", "##...", "#.#..", "#..#."}},
	{'l', {".##..", "..#..", "..#..", "..#..", "..#..", "..#..", ".###."}},
	{'m', {".....", ".....", "##.#.", "#.#.#", "#.#.#", "#...#", "#...#"}},
	{'n', {".....", ".....", "#.##.", "##..#", "#...#", "#...#", "#...#"}},
	{'o', {".....", ".....", ".###.", "#...#", "#...#", "#...#", ".###."}},
	{'p', {".....", ".....", "####.", "#...#", "#...#", "####.", "#....", "#...."}},
	{'q', {".....", ".....", ".####", "#...#", "#...#", ".####", "....#", "....#"}},
	{'r', {".....", ".....", "#.##.", "##..#", "#....", "#....", "#...."}},
	{'s', {".....", ".....", ".####", "#....", ".###.", "....#", "####."}},
	{'t', {".#...", ".#...", "###..", ".#...", ".#...", ".#..#", "..##."}},
	{'u', {".....", ".....", "#...#", "#...#", "#...#", "#..##", ".##.#"}},
	{'v', {".....", ".....", "#...#", "#...#", "#...#", ".#.#.", "..#.."}},
	{'w', {".....", ".....", "#...#", "#...#", "#.#.#", "#.#.#", ".#.#."}},
	{'x', {".....", ".....", "#...#", ".#.#.", "..#..", ".#.#.", "#...#"}},
	{'y', {".....", ".....", "#...#", "#...#", "#...#", ".####", "....#", ".###."}},
	{'z', {".....", ".....", "#####", "...#.", "..#..", ".#...", "#####"}},
	{'A', {".###.", "#...#", "#...#", "#####", "#...#", "#...#", "#...#"}},
	{'B', {"####.", "#...#", "#...#", "####.", "#...#", "#...#", "####."}},
	{'C', {".###.", "#...#", "#....", "#....", "#....", "#...#", ".###."}},
	{'D', {"###..", "#..#.", "#...#", "#...#", "#...#", "#..#.", "###.."}},
	{'E', {"#####", "#....", "#....", "####.", "#....", "#....", "#####"}},
	{'F', {"#####", "#....", "#....", "####.", "#....", "#....", "#...."}},
	{'G', {".###.", "#...#", "#....", "#.###", "#...#", "#...#", ".####"}},
	{'H', {"#...#", "#...#", "#...#", "#####", "#...#", "#...#", "#...#"}},
	{'I', {".###.", "..#..", "..#..", "..#..", "..#..", "..#..", ".###."}},
	{'J', {"..###", "...#.", "...#.", "...#.", "...#.", "#..#.", ".##.."}},
	{'K', {"#...#", "#..#.", "#.#..", "##...", "#.#..", "#..#.", "#...#"}},
	{'L', {"#....", "#....", "#....", "#....", "#....", "#....", "#####"}},
	{'M', {"#...#", "##.##", "#.#.#", "#.#.#", "#...#", "#...#", "#...#"}},
	{'N', {"#...#", "#...#", "##..#", "#.#.#", "#..##", "#...#", "#...#"}},
	{'O', {".###.", "#...#", "#...#", "#...#", "#...#", "#...#", ".###."}},
	{'P', {"####.", "#...#", "#...#", "####.", "#....", "#....", "#...."}},
	{'Q', {".###.", "#...#", "#...#", "#...#", "#.#.#", "#..#.", ".##.#"}},
	{'R', {"####.", "#...#", "#...#", "####.", "#.#..", "#..#.", "#...#"}},
	{'S', {".####", "#....", "#....", ".###.", "....#", "....#", "####."}},
	{'T', {"#####", "..#..", "..#..", "..#..", "..#..", "..#..", "..#.."}},
	{'U', {"#...#", "#...#", "#...#", "#...#", "#...#", "#...#", ".###."}},
	{'V', {"#...#", "#...#", "#...#", "#...#", "#...#", ".#.#.", "..#.."}},
	{'W', {"#...#", "#...#", "#...#", "#.#.#", "#.#.#", "#.#.#", ".#.#."}},
	{'X', {"#...#", "#...#", ".#.#.", "..#..", ".#.#.", "#...#", "#...#"}},
	{'Y', {"#...#", "#...#", ".#.#.", "..#..", "..#..", "..#..", "..#.."}},
	{'Z', {"#####", "....#", "...#.", "..#..", ".#...", "#....", "#####"}},
	{' ', {"....."}},
	{'.', {".....", ".....", ".....", ".....", ".....", ".##..", ".##.."}},
	{',', {".....", ".....", ".....", ".....", ".##..", "..#..", ".#..."}},
	{':', {".....", ".##..", ".##..", ".....", ".##..", ".##..", "....."}},
	{'_', {".....", ".....", ".....", ".....", ".....", ".....", ".....", "#####"}},
	{'-', {".....", ".....", ".....", "#####", ".....", ".....", "....."}},
	{'+', {".....", "..#..", "..#..", "#####", "..#..", "..#..", "....."}},
	{'=', {".....", ".....", "#####", ".....", "#####", ".....", "....."}},
	{'%', {"##...", "##..#", "...#.", "..#..", ".#...", "#..##", "...##"}},
	{'(', {"...#.", "..#..", ".#...", ".#...", ".#...", "..#..", "...#."}},
	{')', {".#...", "..#..", "...#.", "...#.", "...#.", "..#..", ".#..."}},
	{'[', {".###.", ".#...", ".#...", ".#...", ".#...", ".#...", ".###."}},
	{']', {".###.", "...#.", "...#.", "...#.", "...#.", "...#.", ".###."}},
	{'/', {".....", "....#", "...#.", "..#..", ".#...", "#....", "....."}},
	{'\\', {".....", "#....", ".#...", "..#..", "...#.", "....#", "....."}},
	{'|', {"..#..", "..#..", "..#..", "..#..", "..#..", "..#..", "..#.."}},
	{'\'', {"..#..", "..#..", ".#...", ".....", ".....", ".....", "....."}},
	{'"', {".#.#.", ".#.#.", ".....", ".....", ".....", ".....", "....."}},
	{'!', {"..#..", "..#..", "..#..", "..#..", "..#..", ".....", "..#.."}},
	{'<', {"...#.", "..#..", ".#...", "#....", ".#...", "..#..", "...#."}},
	{'>', {".#...", "..#..", "...#.", "....#", "...#.", "..#..", ".#..."}},
	{'*', {".....", "#.#.#", ".###.", "#####", ".###.", "#.#.#", "....."}},
	{'#', {".#.#.", ".#.#.", "#####", ".#.#.", "#####", ".#.#.", ".#.#."}},
	{'?', {".###.", "#...#", "....#", "...#.", "..#..", ".....", "..#.."}},
};

enum { GLYPH_W = 6, GLYPH_H = 9 }; /* the cell, with a column and a row of space */

static const struct glyph *glyph_of(char c)
{
	const struct glyph *unknown = NULL;
	for (size_t i = 0; i < sizeof font / sizeof font[0]; i++) {
		if (font[i].c == c)
			return &font[i];
		if (font[i].c == '?')
			unknown = &font[i];
	}
	return unknown;
}

static void text(struct canvas *c, int x, int y, const char *s, struct rgb k)
{
	for (; *s; s++, x += GLYPH_W) {
		const struct glyph *g = glyph_of(*s);
		for (int row = 0; row < 8; row++)
			for (int col = 0; col < 5 && g->rows[row][col]; col++)
				if (g->rows[row][col] == '#')
					put(c, x + col, y + row, k);
	}
}

/* `s` cut to at most `max` characters, its middle replaced by "..": a tag's start names the layer,
 * its end the tensor and statistic. */
static void fit(char *out, size_t size, const char *s, size_t max)
{
	size_t n = strlen(s);
	if (max >= size)
		max = size - 1;
	if (n <= max || max < 6) {
		snprintf(out, size, "%.*s", (int)max, s);
		return;
	}
	size_t head = (max - 2) / 2, tail = max - 2 - head;
	snprintf(out, size, "%.*s..%s", (int)head, s, s + n - tail);
}

/* ---- the plots ---- */

enum { PANEL_W = 400, PANEL_H = 230, HEADER_H = 20, LEFT = 62, RIGHT = 12, TOP = 22, BOTTOM = 24 };

struct axes {
	int x0, y0, x1, y1; /* the plot area, pixels */
	double it_lo, it_hi, v_lo, v_hi;
};

static int px_x(const struct axes *a, double it)
{
	if (a->it_hi == a->it_lo)
		return (a->x0 + a->x1) / 2;
	return a->x0 + (int)lround((it - a->it_lo) / (a->it_hi - a->it_lo) * (a->x1 - a->x0));
}

/* Scaled in long double: v_hi - v_lo may overflow a double (-1e308 and 1e308). */
static int px_y(const struct axes *a, double v)
{
	long double f = ((long double)v - a->v_lo) / ((long double)a->v_hi - a->v_lo);
	return a->y1 - (int)lroundl(f * (a->y1 - a->y0));
}

static void draw_series(struct canvas *c, const struct axes *a, const struct dli_cmp_series *s,
			int thick, struct rgb k)
{
	bool prev = false;
	int px = 0, py = 0;
	bool dots = s->n <= 60;
	for (size_t i = 0; i < s->n; i++) {
		if (!isfinite(s->value[i])) {
			prev = false; /* a nan or infinity breaks the line */
			continue;
		}
		int x = px_x(a, (double)s->iteration[i]), y = px_y(a, s->value[i]);
		if (prev)
			line(c, px, py, x, y, thick, k);
		if (dots)
			rect(c, x - thick / 2 - 1, y - thick / 2 - 1, x + thick / 2 + 1, y + thick / 2 + 1,
			     k);
		prev = true;
		px = x;
		py = y;
	}
}

static void draw_panel(struct canvas *c, int ox, int oy, const struct dli_cmp_panel *p)
{
	struct axes a = {ox + LEFT, oy + TOP, ox + PANEL_W - RIGHT, oy + PANEL_H - BOTTOM, 0, 0, 0, 0};
	bool any_it = false, any_v = false;
	char buf[96];

	for (int r = 0; r < 2; r++)
		for (size_t i = 0; i < p->run[r].n; i++) {
			double it = (double)p->run[r].iteration[i], v = p->run[r].value[i];
			if (!any_it || it < a.it_lo)
				a.it_lo = it;
			if (!any_it || it > a.it_hi)
				a.it_hi = it;
			any_it = true;
			if (!isfinite(v))
				continue;
			if (!any_v || v < a.v_lo)
				a.v_lo = v;
			if (!any_v || v > a.v_hi)
				a.v_hi = v;
			any_v = true;
		}
	if (a.v_lo == a.v_hi) {
		double pad = a.v_lo == 0 ? 1 : fabs(a.v_lo) * 0.05;
		a.v_lo -= pad;
		a.v_hi += pad;
	}
	fit(buf, sizeof buf, p->tag, (PANEL_W - 12) / GLYPH_W);
	text(c, ox + 6, oy + 6, buf, BLACK);
	/* Frame and a mid grid line. */
	line(c, a.x0, (a.y0 + a.y1) / 2, a.x1, (a.y0 + a.y1) / 2, 1, GRID);
	line(c, (a.x0 + a.x1) / 2, a.y0, (a.x0 + a.x1) / 2, a.y1, 1, GRID);
	line(c, a.x0, a.y0, a.x1, a.y0, 1, BLACK);
	line(c, a.x0, a.y1, a.x1, a.y1, 1, BLACK);
	line(c, a.x0, a.y0, a.x0, a.y1, 1, BLACK);
	line(c, a.x1, a.y0, a.x1, a.y1, 1, BLACK);
	if (any_v) {
		snprintf(buf, sizeof buf, "%.4g", a.v_hi);
		text(c, a.x0 - 4 - GLYPH_W * (int)strlen(buf), a.y0, buf, BLACK);
		snprintf(buf, sizeof buf, "%.4g", a.v_lo);
		text(c, a.x0 - 4 - GLYPH_W * (int)strlen(buf), a.y1 - 7, buf, BLACK);
	} else {
		text(c, a.x0 + 8, a.y0 + 8, "no finite value", BLACK);
	}
	if (any_it) {
		snprintf(buf, sizeof buf, "%.0f", a.it_lo);
		text(c, a.x0, a.y1 + 5, buf, BLACK);
		snprintf(buf, sizeof buf, "%.0f", a.it_hi);
		text(c, a.x1 - GLYPH_W * (int)strlen(buf) + 1, a.y1 + 5, buf, BLACK);
	}
	draw_series(c, &a, &p->run[0], 3, RUN_A_COLOR);
	draw_series(c, &a, &p->run[1], 1, RUN_B_COLOR);
	if (p->has_divergence && any_it) {
		int x = px_x(&a, (double)p->divergence);
		for (int y = a.y0 + 1; y < a.y1; y += 6)
			line(c, x, y, x, y + 2 < a.y1 ? y + 2 : a.y1 - 1, 1, MARK);
		snprintf(buf, sizeof buf, "%lld", (long long)p->divergence);
		int w = GLYPH_W * (int)strlen(buf);
		int tx = x + 3 + w <= a.x1 ? x + 3 : x - 2 - w;
		text(c, tx, a.y0 + 3, buf, MARK);
	}
}

/* ---- PNG ---- */

static uint32_t crc_table[256];

static void crc_init(void)
{
	for (uint32_t n = 0; n < 256; n++) {
		uint32_t c = n;
		for (int k = 0; k < 8; k++)
			c = c & 1 ? 0xedb88320u ^ (c >> 1) : c >> 1;
		crc_table[n] = c;
	}
}

static uint32_t crc_update(uint32_t crc, const unsigned char *p, size_t n)
{
	for (size_t i = 0; i < n; i++)
		crc = crc_table[(crc ^ p[i]) & 0xff] ^ (crc >> 8);
	return crc;
}

static void be32(unsigned char *p, uint32_t v)
{
	p[0] = (unsigned char)(v >> 24);
	p[1] = (unsigned char)(v >> 16);
	p[2] = (unsigned char)(v >> 8);
	p[3] = (unsigned char)v;
}

/* One chunk: length, type, data, CRC of type and data. */
static int chunk(FILE *f, const char *type, const unsigned char *data, size_t n)
{
	unsigned char b[4];
	be32(b, (uint32_t)n);
	uint32_t crc = crc_update(0xffffffffu, (const unsigned char *)type, 4);
	crc = crc_update(crc, data, n) ^ 0xffffffffu;
	if (fwrite(b, 1, 4, f) != 4 || fwrite(type, 1, 4, f) != 4 || (n && fwrite(data, 1, n, f) != n))
		return -1;
	be32(b, crc);
	return fwrite(b, 1, 4, f) == 4 ? 0 : -1;
}

/* The zlib stream (RFC 1950) of the scanlines, each led by filter byte 0, in stored deflate blocks
 * (RFC 1951, 3.2.4) of at most 65535 bytes, then the Adler-32 of the raw bytes. */
static unsigned char *zlib_stored(const struct canvas *c, size_t *size)
{
	size_t row = 3 * (size_t)c->w + 1, raw = row * (size_t)c->h;
	size_t blocks = raw / 65535 + 1;
	unsigned char *z = malloc(2 + raw + 5 * blocks + 4), *o = z;
	if (!z)
		return NULL;
	*o++ = 0x78; /* deflate, 32K window */
	*o++ = 0x01; /* no dictionary, fastest; (0x78 << 8 | 0x01) % 31 == 0 */
	uint32_t s1 = 1, s2 = 0;
	size_t done = 0, in_block = 0, block_left = 0;
	for (int y = 0; y < c->h; y++) {
		for (size_t i = 0; i < row; i++) {
			if (block_left == 0) {
				size_t len = raw - done < 65535 ? raw - done : 65535;
				*o++ = raw - done == len; /* BFINAL on the last; BTYPE 00 */
				*o++ = (unsigned char)len;
				*o++ = (unsigned char)(len >> 8);
				*o++ = (unsigned char)~len;
				*o++ = (unsigned char)(~len >> 8);
				block_left = len;
				in_block++;
			}
			unsigned char byte = i == 0 ? 0 : c->px[(size_t)y * (row - 1) + i - 1];
			*o++ = byte;
			s1 = (s1 + byte) % 65521;
			s2 = (s2 + s1) % 65521;
			block_left--;
			done++;
		}
	}
	be32(o, s2 << 16 | s1);
	o += 4;
	*size = (size_t)(o - z);
	return z;
}

static int write_png(const char *path, const struct canvas *c, char *err, size_t err_size)
{
	static const unsigned char sig[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
	unsigned char ihdr[13];
	size_t n_idat;
	unsigned char *idat = zlib_stored(c, &n_idat);
	int rc = 0;

	if (!idat) {
		snprintf(err, err_size, "out of memory");
		return -ENOMEM;
	}
	be32(ihdr, (uint32_t)c->w);
	be32(ihdr + 4, (uint32_t)c->h);
	ihdr[8] = 8;  /* bits per sample */
	ihdr[9] = 2;  /* RGB */
	ihdr[10] = 0; /* deflate */
	ihdr[11] = 0; /* adaptive filtering (every row: none) */
	ihdr[12] = 0; /* not interlaced */
	crc_init();
	FILE *f = fopen(path, "wb");
	if (!f) {
		rc = -errno;
		snprintf(err, err_size, "--plot %s: %s", path, strerror(errno));
		free(idat);
		return rc;
	}
	if (fwrite(sig, 1, 8, f) != 8 || chunk(f, "IHDR", ihdr, 13) || chunk(f, "IDAT", idat, n_idat) ||
	    chunk(f, "IEND", NULL, 0))
		rc = -(errno ? errno : EIO);
	if (fclose(f) != 0 && !rc)
		rc = -(errno ? errno : EIO);
	if (rc)
		snprintf(err, err_size, "--plot %s: %s", path, strerror(-rc));
	free(idat);
	return rc;
}

int dli_cmp_plot_png(const char *path, const struct dli_cmp_panel *panels, size_t n, char *err,
		     size_t err_size)
{
	int cols = n == 0 ? 1 : n < 3 ? (int)n : 3;
	int rows = n == 0 ? 1 : (int)((n + 2) / 3);
	struct canvas c = {cols * PANEL_W, HEADER_H + rows * PANEL_H, NULL};

	if (n > DLI_CMP_PLOT_MAX) {
		snprintf(err, err_size, "at most %d panels", DLI_CMP_PLOT_MAX);
		return -EINVAL;
	}
	c.px = malloc((size_t)c.w * (size_t)c.h * 3);
	if (!c.px) {
		snprintf(err, err_size, "out of memory");
		return -ENOMEM;
	}
	rect(&c, 0, 0, c.w - 1, c.h - 1, WHITE);
	/* The legend. */
	rect(&c, 6, 8, 20, 10, RUN_A_COLOR);
	text(&c, 24, 6, "run A", BLACK);
	rect(&c, 66, 9, 80, 9, RUN_B_COLOR);
	text(&c, 84, 6, "run B", BLACK);
	for (int y = 5; y < 15; y += 4)
		line(&c, 132, y, 132, y + 1, 1, MARK);
	text(&c, 138, 6, "first divergence", MARK);
	if (n == 0)
		text(&c, 12, HEADER_H + 20, "no tag differs beyond tolerance", BLACK);
	for (size_t i = 0; i < n; i++)
		draw_panel(&c, (int)(i % 3) * PANEL_W, HEADER_H + (int)(i / 3) * PANEL_H, &panels[i]);
	int rc = write_png(path, &c, err, err_size);
	free(c.px);
	return rc;
}
