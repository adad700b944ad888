/* `dlinspect compare RUN_A RUN_B`: where two runs' statistics logs (the file logger's layout,
 * docs/logging.md) part ways. Per tag (layer_tensor_stat), the first iteration at which the values
 * differ beyond the tolerance, the largest difference, and the iterations and tags one run lacks.
 * docs/compare.md describes the command for users.
 *
 * The two files are read once, line by line, in step: the next line comes from the file whose last
 * iteration is the smaller, so both advance through the same iterations together. A tag's iterations
 * increase in each file (the logger writes each step after the previous one), so matching a tag's
 * values is a merge of two sorted lists: the values one file has read ahead of the other wait in a
 * small per-tag queue, and memory stays proportional to the tags (and to one step of lines), not to
 * the log. Only --plot keeps every value, since it draws whole series. */
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <dirent.h>
#include <regex.h>
#include <sys/stat.h>

#include "cmd.h"
#include "compare.h"
#include "tools-api.h"

static const char usage[] =
	"usage: dlinspect compare RUN_A RUN_B [--rtol X] [--atol X] [--rank N] [--strict]\n"
	"                         [--tags REGEX] [--json] [--plot FILE.png]\n"
	"  RUN: a log dir, its nvdlfw_inspect_statistics_logs dir, or one statistics log file\n"
	"  --rtol X, --atol X   a and b agree when |a-b| <= max(atol, rtol * max(|a|, |b|))\n"
	"                       (defaults 1e-05 and 1e-08); nan agrees with nan only\n"
	"  --rank N             the rank whose log is read in a dir (default: the lowest there)\n"
	"  --strict             iterations and tags of one run only count as differences\n"
	"  --tags REGEX         only the tags REGEX matches (POSIX extended, anywhere in the tag)\n"
	"  --json               the report as one JSON object\n"
	"  --plot FILE.png      draw the diverging tags of both runs (the first 12)\n"
	"exit status: 0 no tag differs, 1 some do, 2 usage or input error (nothing compared too)\n";

#define DEFAULT_RTOL 1e-5
#define DEFAULT_ATOL 1e-8

enum { RUN_A, RUN_B };

struct options {
	const char *run[2];
	double rtol, atol;
	long rank; /* -1: the lowest */
	bool strict, json;
	const char *plot;
	const char *tags;  /* --tags, or NULL */
	regex_t tags_re;   /* compiled when `tags` is set */
};

/* A value waiting for its counterpart in the other file. */
struct point {
	int64_t iteration;
	double value;
};

/* A value compared, or found in one run only, with where it was. */
struct where {
	bool set;
	int64_t iteration;
	double a, b;
	bool has_a, has_b;
};

struct tag {
	char *name;
	size_t n[2];           /* values read from each file */
	int64_t last[2];       /* the last iteration read from each file */
	size_t last_line[2];
	size_t compared;
	struct where first_diff; /* the first iteration beyond tolerance */
	struct where first_only; /* the first iteration one run lacks */
	size_t only[2];          /* iterations in this run only */
	int64_t first_only_it[2];
	struct where max_abs, max_rel;
	double max_abs_v, max_rel_v;
	/* Values read ahead by `pending_side`, oldest first, from pending[head] to pending[len). */
	struct point *pending;
	size_t head, len, cap;
	int pending_side;
	/* --plot only: every value of each run. */
	struct point *series[2];
	size_t series_n[2], series_cap[2];
};

struct tags {
	struct tag **slot; /* open addressing, a power of two */
	size_t n_slots, n;
	struct tag **list; /* in order of first appearance */
	size_t list_cap;
};

/* The longest line a statistics log may hold, its newline included: a tag (layer, tensor and
 * statistic names) and a number are a few hundred bytes; a file with no newline in its first
 * 64 KiB (/dev/zero, a binary file) is not a log, and is not read whole to find out. */
#define MAX_LINE 65536

/* One open statistics log. */
struct reader {
	const char *path;
	FILE *f;
	char *line; /* MAX_LINE + 1 bytes */
	size_t line_no;
	size_t parsed; /* the values read, whether --tags takes them or not */
	size_t values;
	bool eof;
	int64_t last; /* the last iteration read; INT64_MIN before the first */
};

/* One line on stderr, "dlinspect compare: " first, control characters escaped (paths and tags
 * come from the user's files). */
static void report(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void report(const char *fmt, ...)
{
	char text[2048];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(text, sizeof text, fmt, ap);
	va_end(ap);
	fflush(stdout);
	fputs("dlinspect compare: ", stderr);
	for (const unsigned char *p = (const unsigned char *)text; *p; p++) {
		if (*p < 0x20 || *p == 0x7f)
			fprintf(stderr, "\\x%02x", *p);
		else
			fputc(*p, stderr);
	}
	fputc('\n', stderr);
}

/* ---- the tag table ---- */

static uint64_t hash_name(const char *s)
{
	uint64_t h = 1469598103934665603ull;
	for (; *s; s++)
		h = (h ^ (unsigned char)*s) * 1099511628211ull;
	return h;
}

static int tags_grow(struct tags *t)
{
	size_t n_slots = t->n_slots ? t->n_slots * 2 : 256;
	struct tag **slot = calloc(n_slots, sizeof *slot);
	if (!slot)
		return -ENOMEM;
	for (size_t i = 0; i < t->n; i++) {
		size_t k = hash_name(t->list[i]->name) & (n_slots - 1);
		while (slot[k])
			k = (k + 1) & (n_slots - 1);
		slot[k] = t->list[i];
	}
	free(t->slot);
	t->slot = slot;
	t->n_slots = n_slots;
	return 0;
}

/* The tag named `name` (len bytes, not NUL-terminated), created on first sight. NULL when out of
 * memory. */
static struct tag *tags_get(struct tags *t, const char *name, size_t len)
{
	if (2 * (t->n + 1) > t->n_slots && tags_grow(t) < 0)
		return NULL;
	uint64_t h = 1469598103934665603ull;
	for (size_t i = 0; i < len; i++)
		h = (h ^ (unsigned char)name[i]) * 1099511628211ull;
	size_t k = h & (t->n_slots - 1);
	for (; t->slot[k]; k = (k + 1) & (t->n_slots - 1))
		if (!strncmp(t->slot[k]->name, name, len) && !t->slot[k]->name[len])
			return t->slot[k];
	if (t->n == t->list_cap) {
		size_t cap = t->list_cap ? 2 * t->list_cap : 256;
		struct tag **list = realloc(t->list, cap * sizeof *list);
		if (!list)
			return NULL;
		t->list = list;
		t->list_cap = cap;
	}
	struct tag *tag = calloc(1, sizeof *tag);
	if (!tag || !(tag->name = strndup(name, len))) {
		free(tag);
		return NULL;
	}
	t->slot[k] = tag;
	t->list[t->n++] = tag;
	return tag;
}

static void tags_free(struct tags *t)
{
	for (size_t i = 0; i < t->n; i++) {
		free(t->list[i]->name);
		free(t->list[i]->pending);
		free(t->list[i]->series[0]);
		free(t->list[i]->series[1]);
		free(t->list[i]);
	}
	free(t->list);
	free(t->slot);
}

/* ---- comparing values ---- */

/* Whether a and b agree: nan with nan, an infinity with the same infinity, finite values within
 * max(atol, rtol * max(|a|, |b|)) of each other (math.isclose's rule: symmetric in a and b). */
static bool agree(double a, double b, const struct options *o)
{
	if (isnan(a) || isnan(b))
		return isnan(a) && isnan(b);
	if (a == b)
		return true;
	if (!isfinite(a) || !isfinite(b))
		return false;
	double d = fabs(a - b), m = fmax(fabs(a), fabs(b));
	return d <= fmax(o->atol, o->rtol * m);
}

/* |a-b| and |a-b| / max(|a|, |b|); 0 where they are the same value (nan and nan, -0 and 0), inf
 * where only one is nan or an infinity. Where |a-b| itself passes the double range (1.7e308
 * and -1.7e308) the quotient is taken of the scaled values, and stays finite (at most 2). */
static void difference(double a, double b, double *abs_d, double *rel_d)
{
	if ((isnan(a) && isnan(b)) || a == b) {
		*abs_d = *rel_d = 0;
	} else if (!isfinite(a) || !isfinite(b)) {
		*abs_d = *rel_d = INFINITY;
	} else {
		double m = fmax(fabs(a), fabs(b));
		*abs_d = fabs(a - b);
		*rel_d = isinf(*abs_d) ? fabs(a / m - b / m) : *abs_d / m;
	}
}

static void where_set(struct where *w, int64_t it, double a, double b, bool has_a, bool has_b)
{
	*w = (struct where){true, it, a, b, has_a, has_b};
}

static void compare_pair(struct tag *t, int64_t it, double a, double b, const struct options *o)
{
	double abs_d, rel_d;

	t->compared++;
	if (!agree(a, b, o) && (!t->first_diff.set || it < t->first_diff.iteration))
		where_set(&t->first_diff, it, a, b, true, true);
	difference(a, b, &abs_d, &rel_d);
	/* Strictly larger: of equal differences, the earliest is shown. */
	if (!t->max_abs.set || abs_d > t->max_abs_v) {
		where_set(&t->max_abs, it, a, b, true, true);
		t->max_abs_v = abs_d;
	}
	if (!t->max_rel.set || rel_d > t->max_rel_v) {
		where_set(&t->max_rel, it, a, b, true, true);
		t->max_rel_v = rel_d;
	}
}

static void one_sided(struct tag *t, int side, int64_t it, double v)
{
	if (!t->only[side] || it < t->first_only_it[side])
		t->first_only_it[side] = it;
	t->only[side]++;
	if (!t->first_only.set || it < t->first_only.iteration)
		where_set(&t->first_only, it, side == RUN_A ? v : NAN, side == RUN_B ? v : NAN,
			  side == RUN_A, side == RUN_B);
}

static int series_add(struct tag *t, int side, int64_t it, double v)
{
	if (t->series_n[side] == t->series_cap[side]) {
		size_t cap = t->series_cap[side] ? 2 * t->series_cap[side] : 16;
		struct point *p = realloc(t->series[side], cap * sizeof *p);
		if (!p)
			return -ENOMEM;
		t->series[side] = p;
		t->series_cap[side] = cap;
	}
	t->series[side][t->series_n[side]++] = (struct point){it, v};
	return 0;
}

/* A value of tag t from file `side`: matched against the other file's waiting values, or queued.
 * The other file's waiting values before `it` will never be matched (its iterations increase): they
 * are in that run only; so is this one when the other file is already past it, or at its end. */
static int take_value(struct tag *t, int side, int64_t it, double v, bool other_done,
		      const struct options *o)
{
	int other = 1 - side;

	while (t->head < t->len && t->pending_side == other && t->pending[t->head].iteration < it) {
		one_sided(t, other, t->pending[t->head].iteration, t->pending[t->head].value);
		t->head++;
	}
	if (t->head < t->len && t->pending_side == other) {
		struct point p = t->pending[t->head];
		if (p.iteration == it) {
			t->head++;
			compare_pair(t, it, side == RUN_A ? v : p.value, side == RUN_A ? p.value : v, o);
		} else {
			one_sided(t, side, it, v);
		}
		return 0;
	}
	if (t->head == t->len)
		t->head = t->len = 0;
	if (other_done) {
		one_sided(t, side, it, v);
		return 0;
	}
	if (t->len == t->cap) {
		if (t->head > 0) {
			memmove(t->pending, t->pending + t->head, (t->len - t->head) * sizeof *t->pending);
			t->len -= t->head;
			t->head = 0;
		} else {
			size_t cap = t->cap ? 2 * t->cap : 4;
			struct point *p = realloc(t->pending, cap * sizeof *p);
			if (!p)
				return -ENOMEM;
			t->pending = p;
			t->cap = cap;
		}
	}
	t->pending_side = side;
	t->pending[t->len++] = (struct point){it, v};
	return 0;
}

/* ---- reading the logs ---- */

/* Up to 40 bytes of `s` for an error message, with "..." when cut. */
static const char *excerpt(const char *s, char *buf, size_t size)
{
	size_t n = strlen(s);
	if (n < 41 || size < 45) {
		snprintf(buf, size, "%s", s);
	} else {
		memcpy(buf, s, 40);
		strcpy(buf + 40, "...");
	}
	return buf;
}

/* Whether the digits of p..end before any exponent hold one that is not 0. */
static bool nonzero_mantissa(const char *p, const char *end)
{
	for (; p < end && *p != 'e' && *p != 'E'; p++)
		if (*p >= '1' && *p <= '9')
			return true;
	return false;
}

/* Whether [p, end) is a number as the file logger writes one: %.9g (digits, a point, an
 * exponent), nan, inf or -inf. */
static bool logger_number(const char *p, const char *end)
{
	if (*p == '-' || *p == '+')
		p++;
	size_t n = (size_t)(end - p);
	if ((n == 3 && (!strncmp(p, "nan", 3) || !strncmp(p, "inf", 3))))
		return true;
	bool digits = false;
	for (; p < end && *p >= '0' && *p <= '9'; p++)
		digits = true;
	if (p < end && *p == '.')
		for (p++; p < end && *p >= '0' && *p <= '9'; p++)
			digits = true;
	if (!digits)
		return false;
	if (p < end && (*p == 'e' || *p == 'E')) {
		p++;
		if (p < end && (*p == '-' || *p == '+'))
			p++;
		if (p == end || *p < '0' || *p > '9')
			return false;
		while (p < end && *p >= '0' && *p <= '9')
			p++;
	}
	return p == end;
}

/* Parses one statistics line, "{time} - {LEVEL} - {tag} \t\t\t\t iteration={N} \t\t\t\t value={V}"
 * (docs/logging.md): the tag runs from the second " - " to the first tab (the logger escapes tabs in
 * names), less the one space the logger puts before it. Returns 0, or 2 after reporting
 * file:line:column and what was expected there. */
static int parse_line(struct reader *r, char *line, char **tag, size_t *tag_len, int64_t *it,
		      double *v)
{
	char found[48];
	const char *what;
	char *p = line, *end;

	char *sep = strstr(p, " - ");
	if (!sep) {
		what = "'{time} - {LEVEL} - ' (a statistics line of the file logger)";
		goto bad;
	}
	p = sep + 3;
	sep = strstr(p, " - ");
	if (!sep || sep == p) {
		what = "'{LEVEL} - ' after the time";
		goto bad;
	}
	p = sep + 3;
	char *tab = strchr(p, '\t');
	if (!tab) {
		what = "a tag, then a tab and 'iteration=N' (is this the messages log?)";
		goto bad;
	}
	*tag = p;
	*tag_len = (size_t)(tab - p);
	if (*tag_len > 0 && p[*tag_len - 1] == ' ')
		(*tag_len)--;
	if (*tag_len == 0) {
		what = "a tag (layer_tensor_stat) before the tab";
		goto bad;
	}
	p = tab;
	while (*p == '\t' || *p == ' ')
		p++;
	if (strncmp(p, "iteration=", 10)) {
		what = "'iteration=' after the tag";
		goto bad;
	}
	p += 10;
	errno = 0;
	long long n = strtoll(p, &end, 10);
	if (end == p || errno || (*p != '-' && (*p < '0' || *p > '9'))) {
		what = "an integer iteration after 'iteration='";
		goto bad;
	}
	*it = n;
	p = end;
	if (*p != '\t' && *p != ' ') {
		what = "a tab after the iteration";
		goto bad;
	}
	while (*p == '\t' || *p == ' ')
		p++;
	if (strncmp(p, "value=", 6)) {
		what = "'value=' after the iteration";
		goto bad;
	}
	p += 6;
	/* The logger's forms only (%.9g, nan, inf, -inf): strtod's hex floats, "infinity" and
	 * "nan(...)" are not, and a number beyond double's range is not a value it wrote. */
	errno = 0;
	*v = strtod(p, &end);
	/* Past the range at either end: 1e999 would read as inf, 1e-400 as 0 (a subnormal, which
	 * %.9g writes, reads back as itself). */
	bool out_of_range = errno == ERANGE && end != p &&
			    (isinf(*v) || (*v == 0 && nonzero_mantissa(p, end)));
	if (end == p || *p == ' ' || *p == '\t' || !logger_number(p, end) || out_of_range) {
		what = out_of_range ? "a number within double's range after 'value='"
				    : "a number after 'value=' (or nan, inf, -inf)";
		goto bad;
	}
	p = end;
	while (*p == ' ' || *p == '\t')
		p++;
	if (*p) {
		what = "the end of the line after the value";
		goto bad;
	}
	return 0;
bad:
	if (*p)
		report("%s:%zu:%zu: expected %s, found '%s'", r->path, r->line_no,
		       (size_t)(p - line) + 1, what, excerpt(p, found, sizeof found));
	else
		report("%s:%zu:%zu: expected %s, found the end of the line", r->path, r->line_no,
		       (size_t)(p - line) + 1, what);
	return 2;
}

/* Reads the next value of r into the tags. Returns 0, 1 at the end of the file, or 2 after
 * reporting an error. */
/* The next line into r->line, NUL-terminated, with its newline: its length (NUL bytes in it
 * included), -1 at the end of the file, -2 for a line longer than MAX_LINE, -3 for an error
 * (errno). */
static ssize_t read_line(struct reader *r)
{
	if (!r->line && !(r->line = malloc(MAX_LINE + 1)))
		return -3;
	size_t n = 0;
	int c;
	while ((c = getc_unlocked(r->f)) != EOF) {
		if (n == MAX_LINE)
			return -2;
		r->line[n++] = (char)c;
		if (c == '\n')
			break;
	}
	if (c == EOF && ferror(r->f))
		return -3;
	if (c == EOF && n == 0)
		return -1;
	r->line[n] = '\0';
	return (ssize_t)n;
}

static int read_value(struct reader *r, int side, bool other_done, struct tags *tags,
		      const struct options *o)
{
	for (;;) {
		errno = 0;
		ssize_t n = read_line(r);
		if (n == -2) {
			report("%s:%zu: a line longer than %d bytes: not a statistics log", r->path,
			       r->line_no + 1, MAX_LINE);
			return 2;
		}
		if (n < 0) {
			if (n == -3) {
				report("%s: %s", r->path, strerror(errno ? errno : EIO));
				return 2;
			}
			r->eof = true;
			return 1;
		}
		r->line_no++;
		while (n > 0 && (r->line[n - 1] == '\n' || r->line[n - 1] == '\r'))
			r->line[--n] = '\0';
		if ((size_t)n != strlen(r->line)) {
			report("%s:%zu:%zu: expected text, found a NUL byte (is this a statistics log?)",
			       r->path, r->line_no, strlen(r->line) + 1);
			return 2;
		}
		if (n == 0)
			continue;
		char *name;
		size_t name_len;
		int64_t it;
		double v;
		int rc = parse_line(r, r->line, &name, &name_len, &it, &v);
		if (rc)
			return rc;
		r->parsed++;
		if (o->tags) {
			char save = name[name_len];
			name[name_len] = '\0';
			bool match = regexec(&o->tags_re, name, 0, NULL, 0) == 0;
			name[name_len] = save;
			if (!match)
				continue;
		}
		struct tag *t = tags_get(tags, name, name_len);
		if (!t) {
			report("out of memory");
			return 2;
		}
		if (t->n[side] > 0 && it <= t->last[side]) {
			report("%s:%zu: iteration %lld of '%s' comes after iteration %lld (line %zu): a tag's "
			       "iterations must increase; does the log hold two runs (log overwrite off)?",
			       r->path, r->line_no, (long long)it, t->name, (long long)t->last[side],
			       t->last_line[side]);
			return 2;
		}
		t->n[side]++;
		t->last[side] = it;
		t->last_line[side] = r->line_no;
		r->values++;
		r->last = it;
		if (take_value(t, side, it, v, other_done, o) < 0 || (o->plot && series_add(t, side, it, v) < 0)) {
			report("out of memory");
			return 2;
		}
		return 0;
	}
}

/* The rank in "nvdlfw_inspect[_{stamp}]_globalrank-{rank}.log", or -1 for another name. */
static long log_rank(const char *name)
{
	size_t n = strlen(name);
	const char *g = strstr(name, "_globalrank-");
	if (strncmp(name, "nvdlfw_inspect", 14) || !g || n < 4 || strcmp(name + n - 4, ".log"))
		return -1;
	const char *d = g + 12, *end = name + n - 4;
	if (d == end || end - d > 9)
		return -1;
	long r = 0;
	for (; d < end; d++) {
		if (*d < '0' || *d > '9')
			return -1;
		r = r * 10 + (*d - '0');
	}
	return r;
}

/* The statistics log of a run: the file itself, or in a log dir (or its statistics dir) the file
 * of the rank asked for (the lowest there by default). Returns a malloc'd path, or NULL after
 * reporting why. */
static char *find_log(const char *run, long rank)
{
	struct stat st;
	if (stat(run, &st) != 0) {
		report("%s: %s", run, strerror(errno));
		return NULL;
	}
	if (!S_ISDIR(st.st_mode))
		return strdup(run);
	char *dir = NULL;
	if (asprintf(&dir, "%s/nvdlfw_inspect_statistics_logs", run) < 0)
		return NULL;
	if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode)) {
		free(dir);
		dir = strdup(run);
		if (!dir)
			return NULL;
	}
	DIR *d = opendir(dir);
	if (!d) {
		report("%s: %s", dir, strerror(errno));
		free(dir);
		return NULL;
	}
	char *best = NULL, *second = NULL;
	long best_rank = -1;
	struct dirent *e;
	while ((e = readdir(d))) {
		long r = log_rank(e->d_name);
		if (r < 0 || (rank >= 0 && r != rank) || (best && r > best_rank))
			continue;
		if (best && r == best_rank) {
			if (!second)
				second = strdup(e->d_name);
			continue;
		}
		free(best);
		free(second);
		second = NULL;
		best = strdup(e->d_name);
		best_rank = r;
	}
	closedir(d);
	char *path = NULL;
	if (!best) {
		if (rank >= 0)
			report("%s: no statistics log of rank %ld (nvdlfw_inspect_globalrank-%ld.log)",
			       dir, rank, rank);
		else
			report("%s: no statistics log (nvdlfw_inspect_statistics_logs/"
			       "nvdlfw_inspect_globalrank-N.log); did the run log statistics?",
			       dir);
	} else if (second) {
		report("%s: two statistics logs of rank %ld ('%s' and '%s', timestamped runs?): name "
		       "the file",
		       dir, best_rank, best, second);
	} else if (asprintf(&path, "%s/%s", dir, best) < 0) {
		path = NULL;
	}
	free(best);
	free(second);
	free(dir);
	return path;
}

/* ---- the report ---- */

static bool tag_differs(const struct tag *t, const struct options *o)
{
	if (t->first_diff.set)
		return true;
	return o->strict && (t->only[RUN_A] || t->only[RUN_B]);
}

/* The first divergence counted for t (a value beyond tolerance, or with --strict one missing). */
static const struct where *tag_first(const struct tag *t, const struct options *o)
{
	const struct where *w = t->first_diff.set ? &t->first_diff : NULL;
	if (o->strict && t->first_only.set && (!w || t->first_only.iteration < w->iteration))
		w = &t->first_only;
	return w;
}

/* Order of the report: diverging tags by first divergence, then by tag; then the agreeing tags,
 * then those of one run only, each by tag. */
static const struct options *sort_options;

static int tag_rank(const struct tag *t)
{
	if (tag_differs(t, sort_options))
		return 0;
	return t->n[RUN_A] && t->n[RUN_B] ? 1 : 2;
}

static int tag_order(const void *pa, const void *pb)
{
	const struct tag *a = *(const struct tag *const *)pa, *b = *(const struct tag *const *)pb;
	int ra = tag_rank(a), rb = tag_rank(b);
	if (ra != rb)
		return ra - rb;
	if (ra == 0) {
		int64_t ia = tag_first(a, sort_options)->iteration;
		int64_t ib = tag_first(b, sort_options)->iteration;
		if (ia != ib)
			return ia < ib ? -1 : 1;
	}
	return strcmp(a->name, b->name);
}

/* Non-finite values as Python prints them (the logger's spelling). */
static const char *fmt_value(char *buf, size_t size, double v, bool present)
{
	if (!present)
		snprintf(buf, size, "-");
	else if (isnan(v))
		snprintf(buf, size, "nan");
	else if (isinf(v))
		snprintf(buf, size, v < 0 ? "-inf" : "inf");
	else
		snprintf(buf, size, "%.9g", v);
	return buf;
}

/* A tag or path on stdout: control characters escaped as the logger escapes them. */
static void print_text(const char *s)
{
	for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
		if (*p < 0x20 || *p == 0x7f)
			printf("\\x%02x", *p);
		else
			putchar(*p);
	}
}

static void print_text_report(struct tag **sorted, size_t n, const struct reader r[2],
			      size_t n_tags[2], const struct options *o)
{
	size_t n_diff = 0, n_same = 0, n_only[2] = {0, 0}, n_iter_only = 0;
	for (size_t i = 0; i < n; i++) {
		const struct tag *t = sorted[i];
		if (tag_differs(t, o))
			n_diff++;
		else if (t->n[RUN_A] && t->n[RUN_B])
			n_same++;
		if (!t->n[RUN_A] || !t->n[RUN_B])
			n_only[t->n[RUN_A] ? RUN_A : RUN_B]++;
		else if (t->only[RUN_A] || t->only[RUN_B])
			n_iter_only++;
	}
	for (int s = 0; s < 2; s++) {
		printf("%c: ", s == RUN_A ? 'A' : 'B');
		print_text(r[s].path);
		printf(" (%zu value%s, %zu tag%s)\n", r[s].values, r[s].values == 1 ? "" : "s",
		       n_tags[s], n_tags[s] == 1 ? "" : "s");
	}
	printf("tolerance: |a-b| <= max(atol %g, rtol %g * max(|a|, |b|))%s\n", o->atol, o->rtol,
	       o->strict ? "; --strict: iterations and tags of one run only count" : "");
	if (o->tags) {
		printf("tags matching '");
		print_text(o->tags);
		printf("'\n");
	}
	printf("\n");
	if (n_diff) {
		printf("%zu of %zu tags differ%s beyond tolerance, by first divergence (A, B: the "
		       "values there, '-' for none):\n",
		       n_diff, n, n_diff == 1 ? "s" : "");
		printf("%9s %15s %15s %15s %9s %11s %9s  %s\n", "first", "A", "B",
		       "max |a-b|", "at", "max rel", "at", "tag");
		for (size_t i = 0; i < n_diff; i++) {
			const struct tag *t = sorted[i];
			const struct where *w = tag_first(t, o);
			char a[32], b[32], m[32];
			printf("%9lld %15s %15s", (long long)w->iteration,
			       fmt_value(a, sizeof a, w->a, w->has_a),
			       fmt_value(b, sizeof b, w->b, w->has_b));
			if (t->compared)
				printf(" %15s %9lld %11.3g %9lld  ", fmt_value(m, sizeof m, t->max_abs_v, true),
				       (long long)t->max_abs.iteration, t->max_rel_v,
				       (long long)t->max_rel.iteration);
			else
				printf(" %15s %9s %11s %9s  ", "-", "-", "-", "-");
			print_text(t->name);
			putchar('\n');
		}
	} else {
		printf("no tag differs beyond tolerance (%zu tags)\n", n);
	}
	if (n_diff && n_same)
		printf("%zu tag%s within tolerance\n", n_same, n_same == 1 ? " agrees" : "s agree");
	for (int s = 0; s < 2; s++) {
		if (!n_only[s])
			continue;
		printf("\n%zu tag%s in %c only%s:\n", n_only[s], n_only[s] == 1 ? "" : "s",
		       s == RUN_A ? 'A' : 'B',
		       o->strict ? "" : " (not counted as differences without --strict)");
		for (size_t i = 0; i < n; i++) {
			const struct tag *t = sorted[i];
			if (t->n[1 - s] || !t->n[s])
				continue;
			printf("  ");
			print_text(t->name);
			printf(" (%zu value%s)\n", t->n[s], t->n[s] == 1 ? "" : "s");
		}
	}
	if (n_iter_only) {
		printf("\n%zu tag%s iterations in one run only%s:\n", n_iter_only,
		       n_iter_only == 1 ? " has" : "s have",
		       o->strict ? "" : " (not counted as differences without --strict)");
		for (size_t i = 0; i < n; i++) {
			const struct tag *t = sorted[i];
			if (!t->n[RUN_A] || !t->n[RUN_B] || !(t->only[RUN_A] || t->only[RUN_B]))
				continue;
			printf("  ");
			print_text(t->name);
			for (int s = 0; s < 2; s++)
				if (t->only[s])
					printf("%s %zu in %c only (first %lld)", s && t->only[0] ? "," : ":",
					       t->only[s], s == RUN_A ? 'A' : 'B',
					       (long long)t->first_only_it[s]);
			putchar('\n');
		}
	}
}

/* ---- JSON (RFC 8259) ---- */

/* The length of the valid UTF-8 sequence at p (1 to 4), or 0 (RFC 3629: no overlong forms, no
 * surrogates, nothing above U+10FFFF). */
static int utf8_len(const unsigned char *p)
{
	int n = p[0] < 0x80 ? 1 : p[0] >= 0xc2 && p[0] <= 0xdf ? 2 : (p[0] & 0xf0) == 0xe0 ? 3
		: p[0] >= 0xf0 && p[0] <= 0xf4 ? 4 : 0;
	for (int i = 1; i < n; i++)
		if ((p[i] & 0xc0) != 0x80)
			return 0;
	if ((n == 3 && ((p[0] == 0xe0 && p[1] < 0xa0) || (p[0] == 0xed && p[1] >= 0xa0))) ||
	    (n == 4 && ((p[0] == 0xf0 && p[1] < 0x90) || (p[0] == 0xf4 && p[1] >= 0x90))))
		return 0;
	return n;
}

/* A JSON string. Tags hold what the host named its layers: a byte that is not part of valid
 * UTF-8 is written as the code point of the same number (\u00NN), so the output stays JSON. */
static void json_string(const char *s)
{
	putchar('"');
	for (const unsigned char *p = (const unsigned char *)s; *p;) {
		int n = utf8_len(p);
		if (*p == '"' || *p == '\\')
			printf("\\%c", *p);
		else if (*p < 0x20 || *p == 0x7f || n == 0)
			printf("\\u%04x", *p);
		else
			fwrite(p, 1, (size_t)n, stdout);
		p += n ? n : 1;
	}
	putchar('"');
}

/* A number with the fewest significant digits (up to 17) that read back as the same double, so
 * a value of the log reads as the log wrote it; JSON has no nan or infinity, which are the strings
 * "nan", "inf" and "-inf" (Python's float() reads both forms). */
static void json_number(double v)
{
	char buf[40];

	if (isnan(v)) {
		printf("\"nan\"");
	} else if (isinf(v)) {
		printf(v < 0 ? "\"-inf\"" : "\"inf\"");
	} else {
		for (int digits = 9; digits <= 17; digits++) {
			snprintf(buf, sizeof buf, "%.*g", digits, v);
			if (strtod(buf, NULL) == v)
				break;
		}
		fputs(buf, stdout);
	}
}

/* {"iteration": N, "a": x, "b": y}, a or b null for a run that lacks the iteration. */
static void json_where(const char *key, const struct where *w, const double *diff)
{
	printf(", \"%s\": ", key);
	if (!w || !w->set) {
		printf("null");
		return;
	}
	printf("{");
	if (diff) {
		printf("\"value\": ");
		json_number(*diff);
		printf(", ");
	}
	printf("\"iteration\": %lld, \"a\": ", (long long)w->iteration);
	if (w->has_a)
		json_number(w->a);
	else
		printf("null");
	printf(", \"b\": ");
	if (w->has_b)
		json_number(w->b);
	else
		printf("null");
	printf("}");
}

static void print_json_report(struct tag **sorted, size_t n, const struct reader r[2],
			      size_t n_tags[2], const struct options *o, bool any)
{
	printf("{");
	for (int s = 0; s < 2; s++) {
		printf("%s\"%c\": {\"path\": ", s ? ", " : "", s == RUN_A ? 'a' : 'b');
		json_string(r[s].path);
		printf(", \"values\": %zu, \"tags\": %zu}", r[s].values, n_tags[s]);
	}
	printf(", \"rtol\": ");
	json_number(o->rtol);
	printf(", \"atol\": ");
	json_number(o->atol);
	printf(", \"strict\": %s, \"tags_regex\": ", o->strict ? "true" : "false");
	if (o->tags)
		json_string(o->tags);
	else
		printf("null");
	printf(", \"differ\": %s, \"tags\": [", any ? "true" : "false");
	for (size_t i = 0; i < n; i++) {
		const struct tag *t = sorted[i];
		const char *status = tag_differs(t, o)  ? "differ"
				     : !t->n[RUN_B]     ? "only_a"
				     : !t->n[RUN_A]     ? "only_b"
							: "agree";
		printf("%s\n  {\"tag\": ", i ? "," : "");
		json_string(t->name);
		printf(", \"status\": \"%s\", \"values_a\": %zu, \"values_b\": %zu, \"compared\": %zu",
		       status, t->n[RUN_A], t->n[RUN_B], t->compared);
		json_where("first_divergence", tag_differs(t, o) ? tag_first(t, o) : NULL, NULL);
		json_where("max_abs", t->compared ? &t->max_abs : NULL, &t->max_abs_v);
		json_where("max_rel", t->compared ? &t->max_rel : NULL, &t->max_rel_v);
		for (int s = 0; s < 2; s++) {
			printf(", \"only_%c\": {\"count\": %zu, \"first\": ", s == RUN_A ? 'a' : 'b',
			       t->only[s]);
			if (t->only[s])
				printf("%lld}", (long long)t->first_only_it[s]);
			else
				printf("null}");
		}
		printf("}");
	}
	printf("%s]}\n", n ? "\n" : "");
}

/* ---- the command ---- */

static int parse_number(const char *opt, const char *v, double *out)
{
	if (!dli_cmd_decimal(v, out) || *out < 0) {
		report("%s '%s': expected a finite number >= 0", opt, v);
		return 2;
	}
	return 0;
}

/* The ']' that ends the bracket expression opening at `p`, or NULL when none does. */
static const char *bracket_end(const char *p)
{
	p += p[1] == '^' ? 2 : 1;
	if (*p == ']') /* ']' first is a member, not the end */
		p++;
	while (*p && *p != ']')
		p++;
	return *p ? p : NULL;
}

/* Where `re` has a backreference (\1 .. \9 outside a bracket expression), else NULL. */
static const char *backreference(const char *re)
{
	for (const char *p = re; *p; p++) {
		if (*p == '[') {
			if (!(p = bracket_end(p)))
				return NULL;
		} else if (*p == '\\' && p[1]) {
			if (p[1] >= '1' && p[1] <= '9')
				return p;
			p++;
		}
	}
	return NULL;
}

/* glibc's regcomp copies a repeated expression once per repetition, nested bounds multiplied:
 * a{1,32767} took 8 GB and 17 s, x{1,255}{1,255} 160 MB. The product of nested bounds is capped. */
#define MAX_REPEAT 1000
#define MAX_GROUPS 64

/* Where `re` has a bound ({m}, {m,}, {m,n}) at which the product of the counts of the repetitions
 * nested there (n, or m without one) exceeds MAX_REPEAT, with that product in *product and the
 * bound's length in *len; else NULL. Groups deeper than MAX_GROUPS count as that deep. */
static const char *heavy_bound(const char *re, unsigned long *product, size_t *len)
{
	/* group[d]: the heaviest product inside the open group d; last: that of the last atom */
	unsigned long group[MAX_GROUPS] = {1}, last = 1;
	int depth = 0, deeper = 0;
	for (const char *p = re; *p; p++) {
		if (*p == '[') {
			if (!(p = bracket_end(p)))
				return NULL;
			last = 1;
		} else if (*p == '\\' && p[1]) {
			p++;
			last = 1;
		} else if (*p == '(') {
			if (depth == MAX_GROUPS - 1)
				deeper++;
			else
				group[++depth] = 1;
			last = 1;
		} else if (*p == ')' && (deeper || depth > 0)) {
			last = group[depth];
			if (deeper)
				deeper--;
			else
				depth--;
		} else if (*p == '{' && ((p[1] >= '0' && p[1] <= '9') ||
					 (p[1] == ',' && p[2] >= '0' && p[2] <= '9'))) {
			char *end;
			unsigned long n = strtoul(p + 1, &end, 10); /* glibc reads {,n} as {0,n} */
			if (*end == ',' && end[1] >= '0' && end[1] <= '9')
				n = strtoul(end + 1, &end, 10);
			else if (*end == ',')
				end++;
			if (*end != '}') {
				last = 1;
				continue;
			}
			if (__builtin_mul_overflow(last, n ? n : 1, &last))
				last = ULONG_MAX;
			if (last > MAX_REPEAT) {
				*product = last;
				*len = (size_t)(end - p) + 1;
				return p;
			}
			p = end;
		} else if (*p != '*' && *p != '+' && *p != '?') {
			last = 1;
		}
		if (last > group[depth])
			group[depth] = last;
	}
	return NULL;
}

/* The copies of its expressions that `re` compiles to, bounds expanded (saturating): heavy_bound
 * caps a product of nested bounds, this the sum of bounds side by side (300 of x{1,1000} took
 * 2.4 GB). Groups deeper than MAX_GROUPS count as that deep. */
#define MAX_EXPANDED (10 * MAX_REPEAT)
static unsigned long expanded_size(const char *re)
{
	/* sum[d]: the copies inside the open group d so far; last: those of the last atom */
	unsigned long sum[MAX_GROUPS] = {0}, last = 0, total = 0;
	int depth = 0, deeper = 0;
	for (const char *p = re; *p; p++) {
		if (*p == '(') {
			if (depth == MAX_GROUPS - 1)
				deeper++;
			else
				sum[++depth] = 0;
			last = 0;
			continue;
		}
		if (*p == ')' && (deeper || depth > 0)) {
			last = sum[depth];
			if (deeper) {
				deeper--;
				continue;
			}
			depth--;
		} else if (*p == '{' && ((p[1] >= '0' && p[1] <= '9') ||
					 (p[1] == ',' && p[2] >= '0' && p[2] <= '9'))) {
			char *end;
			unsigned long n = strtoul(p + 1, &end, 10), more;
			if (*end == ',' && end[1] >= '0' && end[1] <= '9')
				n = strtoul(end + 1, &end, 10);
			else if (*end == ',')
				end++;
			if (*end == '}') {
				if (__builtin_mul_overflow(last, n > 1 ? n - 1 : 0, &more))
					more = ULONG_MAX;
				if (__builtin_mul_overflow(last, n ? n : 1, &last))
					last = ULONG_MAX;
				if (__builtin_add_overflow(sum[depth], more, &sum[depth]))
					sum[depth] = ULONG_MAX;
				p = end;
				continue;
			}
			last = 1;
		} else if (*p == '|' || *p == '*' || *p == '+' || *p == '?') {
			continue;
		} else {
			if (*p == '[' && !(p = bracket_end(p)))
				return 0; /* regcomp refuses it */
			p += *p == '\\' && p[1];
			last = 1;
		}
		if (__builtin_add_overflow(sum[depth], last, &sum[depth]))
			sum[depth] = ULONG_MAX;
	}
	for (int d = 0; d <= depth; d++) /* unclosed groups: regcomp refuses them, but count */
		if (__builtin_add_overflow(total, sum[d], &total))
			total = ULONG_MAX;
	return total;
}

/* Returns 0, -1 after --help, or the exit status of a usage error (already reported). */
static int parse_args(int argc, char **argv, struct options *o)
{
	size_t n_runs = 0;
	*o = (struct options){.rtol = DEFAULT_RTOL, .atol = DEFAULT_ATOL, .rank = -1};
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i];
		bool has_value = i + 1 < argc;
		if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
			fputs(usage, stdout);
			return -1;
		} else if (!strcmp(a, "--json")) {
			o->json = true;
		} else if (!strcmp(a, "--strict")) {
			o->strict = true;
		} else if (!strcmp(a, "--rtol") && has_value) {
			if (parse_number(a, argv[++i], &o->rtol))
				return 2;
		} else if (!strcmp(a, "--atol") && has_value) {
			if (parse_number(a, argv[++i], &o->atol))
				return 2;
		} else if (!strcmp(a, "--rank") && has_value) {
			const char *v = argv[++i];
			char *end;
			errno = 0;
			o->rank = strtol(v, &end, 10);
			if (!*v || *end || errno || o->rank < 0 || o->rank > 999999999) {
				report("--rank '%s': expected an integer from 0 to 999999999", v);
				return 2;
			}
		} else if (!strcmp(a, "--plot") && has_value) {
			o->plot = argv[++i];
		} else if (!strcmp(a, "--tags") && has_value) {
			if (o->tags)
				regfree(&o->tags_re);
			o->tags = argv[++i];
			const char *back = backreference(o->tags);
			if (back) {
				report("--tags '%s': '%.2s' is a backreference, which POSIX extended "
				       "regular expressions do not have (glibc's can take exponential "
				       "time)", o->tags, back);
				o->tags = NULL;
				return 2;
			}
			unsigned long product;
			size_t len;
			const char *heavy = heavy_bound(o->tags, &product, &len);
			if (heavy) {
				char count[32] = "2^64 or more";
				if (product < ULONG_MAX)
					snprintf(count, sizeof count, "%lu", product);
				report("--tags '%s': repetition counts multiply to %s at "
				       "'%.*s' (column %zu), at most %d: glibc's matcher "
				       "compiles a copy of an expression per repetition "
				       "(a{1,32767} takes gigabytes)",
				       o->tags, count, (int)len, heavy,
				       (size_t)(heavy - o->tags) + 1, MAX_REPEAT);
				o->tags = NULL;
				return 2;
			}
			unsigned long copies = expanded_size(o->tags);
			if (copies > MAX_EXPANDED) {
				char count[32] = "2^64 or more";
				if (copies < ULONG_MAX)
					snprintf(count, sizeof count, "%lu", copies);
				/* clipped: a long pattern would push the reason out of report's
				 * line */
				report("--tags '%.80s%s': repetitions expand to %s copies of an "
				       "expression in all, at most %d: glibc's matcher compiles a "
				       "copy per repetition",
				       o->tags, strlen(o->tags) > 80 ? "..." : "", count,
				       MAX_EXPANDED);
				o->tags = NULL;
				return 2;
			}
			int rc = regcomp(&o->tags_re, o->tags, REG_EXTENDED | REG_NOSUB);
			if (rc) {
				char why[256];
				regerror(rc, &o->tags_re, why, sizeof why);
				report("--tags '%s': %s", o->tags, why);
				o->tags = NULL;
				return 2;
			}
		} else if (a[0] == '-' && a[1]) {
			bool valued = !strcmp(a, "--rtol") || !strcmp(a, "--atol") ||
				      !strcmp(a, "--rank") || !strcmp(a, "--plot") ||
				      !strcmp(a, "--tags");
			report("%s '%s'", valued ? "missing value for" : "unknown option", a);
			fputs(usage, stderr);
			return 2;
		} else if (n_runs == 2) {
			report("two runs at a time ('%s', '%s' and '%s')", o->run[0], o->run[1], a);
			fputs(usage, stderr);
			return 2;
		} else {
			o->run[n_runs++] = a;
		}
	}
	if (n_runs != 2) {
		report("expected two runs, RUN_A and RUN_B");
		fputs(usage, stderr);
		return 2;
	}
	return 0;
}

static int write_plot(struct tag **sorted, size_t n_diff, const struct options *o)
{
	struct dli_cmp_panel panels[DLI_CMP_PLOT_MAX] = {{0}};
	int64_t *its[DLI_CMP_PLOT_MAX][2] = {{NULL}};
	double *vals[DLI_CMP_PLOT_MAX][2] = {{NULL}};
	size_t n = n_diff < DLI_CMP_PLOT_MAX ? n_diff : DLI_CMP_PLOT_MAX;
	int status = 0;

	for (size_t i = 0; i < n; i++) {
		const struct tag *t = sorted[i];
		panels[i] = (struct dli_cmp_panel){.tag = t->name, .has_divergence = true,
						   .divergence = tag_first(t, o)->iteration};
		for (int s = 0; s < 2; s++) {
			size_t m = t->series_n[s];
			its[i][s] = malloc((m ? m : 1) * sizeof(int64_t));
			vals[i][s] = malloc((m ? m : 1) * sizeof(double));
			if (!its[i][s] || !vals[i][s]) {
				report("out of memory");
				status = 2;
				goto out;
			}
			for (size_t k = 0; k < m; k++) {
				its[i][s][k] = t->series[s][k].iteration;
				vals[i][s][k] = t->series[s][k].value;
			}
			panels[i].run[s] = (struct dli_cmp_series){its[i][s], vals[i][s], m};
		}
	}
	char err[512];
	if (dli_cmp_plot_png(o->plot, panels, n, err, sizeof err) < 0) {
		report("%s", err);
		status = 2;
	} else if (!o->json && n_diff > n) {
		printf("\n%s: the first %zu of %zu diverging tags\n", o->plot, n, n_diff);
	}
out:
	for (size_t i = 0; i < n; i++)
		for (int s = 0; s < 2; s++) {
			free(its[i][s]);
			free(vals[i][s]);
		}
	return status;
}

static int compare(const struct options *o);

int dli_cmd_compare(int argc, char **argv)
{
	struct options o;
	int status = parse_args(argc, argv, &o);

	if (status == 0)
		status = compare(&o);
	if (o.tags)
		regfree(&o.tags_re);
	return status < 0 ? 0 : status;
}

static int compare(const struct options *o)
{
	struct reader r[2] = {{0}, {0}};
	struct tags tags = {0};
	struct tag **sorted = NULL;
	char *paths[2] = {NULL, NULL};
	int status = 2;
	for (int s = 0; s < 2; s++) {
		if (!(paths[s] = find_log(o->run[s], o->rank)))
			goto out;
		r[s].path = paths[s];
		r[s].last = INT64_MIN;
		int e = dli_fopen_file(paths[s], &r[s].f);
		if (e) {
			report("%s: %s", paths[s], dli_file_error(e));
			goto out;
		}
		/* The plot must not take the place of a log it reads. */
		struct stat ps, ls;
		if (o->plot && stat(o->plot, &ps) == 0 && fstat(fileno(r[s].f), &ls) == 0 &&
		    ps.st_dev == ls.st_dev && ps.st_ino == ls.st_ino) {
			report("--plot %s is the log of run %s: it would be overwritten", o->plot,
			       s == RUN_A ? "A" : "B");
			goto out;
		}
	}
	/* In step: the file whose last iteration is the smaller reads next (A on a tie). */
	while (!r[RUN_A].eof || !r[RUN_B].eof) {
		int s = r[RUN_A].eof ? RUN_B
			: r[RUN_B].eof ? RUN_A
			: r[RUN_B].last < r[RUN_A].last ? RUN_B
							: RUN_A;
		int rc = read_value(&r[s], s, r[1 - s].eof, &tags, o);
		if (rc == 2)
			goto out;
	}
	/* An empty log agrees with anything: as a check in a script it would pass whatever the
	 * run did, so it is an input error. */
	for (int s = 0; s < 2; s++)
		if (!r[s].parsed) {
			report("%s: %s holds no statistics (%zu lines, no value)",
			       s == RUN_A ? "A" : "B", r[s].path, r[s].line_no);
			goto out;
		}
	size_t n_tags[2] = {0, 0};
	for (size_t i = 0; i < tags.n; i++) {
		struct tag *t = tags.list[i];
		for (; t->head < t->len; t->head++)
			one_sided(t, t->pending_side, t->pending[t->head].iteration,
				  t->pending[t->head].value);
		n_tags[RUN_A] += t->n[RUN_A] > 0;
		n_tags[RUN_B] += t->n[RUN_B] > 0;
	}
	if (tags.n && !(sorted = malloc(tags.n * sizeof *sorted))) {
		report("out of memory");
		goto out;
	}
	if (tags.n)
		memcpy(sorted, tags.list, tags.n * sizeof *sorted);
	sort_options = o;
	if (tags.n)
		qsort(sorted, tags.n, sizeof *sorted, tag_order);
	size_t n_diff = 0;
	while (n_diff < tags.n && tag_differs(sorted[n_diff], o))
		n_diff++;
	if (o->json)
		print_json_report(sorted, tags.n, r, n_tags, o, n_diff > 0);
	else
		print_text_report(sorted, tags.n, r, n_tags, o);
	status = n_diff > 0;
	/* Nothing in both runs (--tags matching none of their tags, or runs with no tag in
	 * common): agreement would be vacuous, so as a check in a script it is an input error. */
	size_t compared = 0;
	for (size_t i = 0; i < tags.n; i++)
		compared += sorted[i]->compared;
	if (!compared && !n_diff) {
		report("nothing was compared: no tag%s has an iteration in both runs",
		       o->tags ? " that --tags matches" : "");
		status = 2;
	}
	if (o->plot && write_plot(sorted, n_diff, o))
		status = 2;
	if (fflush(stdout) != 0 || ferror(stdout)) {
		report("writing the report: %s", strerror(errno));
		status = 2;
	}
out:
	for (int s = 0; s < 2; s++) {
		if (r[s].f)
			fclose(r[s].f);
		free(r[s].line);
		free(paths[s]);
	}
	free(sorted);
	tags_free(&tags);
	return status;
}
