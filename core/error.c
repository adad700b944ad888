/* Error messages with config positions, and the did-you-mean used for unknown names. */
#include <ctype.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "error-private.h"

static void where_record(struct dli_error *err, const struct dli_where *where)
{
	if (!where || !where->file) {
		err->file[0] = '\0';
		err->line = 0;
		err->column = 0;
		return;
	}
	snprintf(err->file, sizeof err->file, "%s", where->file);
	err->line = where->line;
	err->column = where->column;
}

int dli_error_set(struct dli_error *err, int code, const struct dli_where *where, const char *fmt, ...)
{
	if (!err)
		return code;
	err->code = code;
	where_record(err, where);
	size_t off = 0;
	if (where && where->file) {
		int n = snprintf(err->message, sizeof err->message, "%s:%d:%d: ", where->file,
				 where->line, where->column);
		off = n < 0 ? 0 : (size_t)n < sizeof err->message ? (size_t)n : sizeof err->message - 1;
	}
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(err->message + off, sizeof err->message - off, fmt, ap);
	va_end(ap);
	return code;
}

/* Appends to buf at *off, truncating at the end of buf. */
static void append(char *buf, size_t size, size_t *off, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));
static void append(char *buf, size_t size, size_t *off, const char *fmt, ...)
{
	if (*off >= size - 1)
		return;
	va_list ap;
	va_start(ap, fmt);
	int n = vsnprintf(buf + *off, size - *off, fmt, ap);
	va_end(ap);
	if (n > 0)
		*off = *off + (size_t)n < size - 1 ? *off + (size_t)n : size - 1;
}

int dli_error_prefix(struct dli_error *err, const struct dli_where *where, const char *fmt, ...)
{
	if (!err)
		return -1;
	char old[sizeof err->message];
	memcpy(old, err->message, sizeof old);
	char text[sizeof err->message];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(text, sizeof text, fmt, ap);
	va_end(ap);
	/* A message that starts with a position in the same file already (a module's parameter,
	 * "config.yaml:4:77: ranks: ...") is more precise than ours: that position leads, once. */
	const char *rest = old;
	struct dli_where inner;
	if (where && where->file) {
		size_t fl = strlen(where->file);
		int line, column, n = 0;
		if (!strncmp(old, where->file, fl) &&
		    sscanf(old + fl, ":%d:%d: %n", &line, &column, &n) == 2 && n > 0) {
			inner = (struct dli_where){where->file, line, column};
			where = &inner;
			rest = old + fl + n;
		}
	}
	where_record(err, where);
	size_t off = 0;
	if (where && where->file)
		append(err->message, sizeof err->message, &off, "%s:%d:%d: ", where->file, where->line,
		       where->column);
	append(err->message, sizeof err->message, &off, "%s", text);
	append(err->message, sizeof err->message, &off, "%s", rest);
	return err->code;
}

static size_t edit_distance(const char *a, const char *b)
{
	size_t la = strlen(a), lb = strlen(b);
	if (la > 64 || lb > 64)
		return (size_t)-1;
	size_t row[65];
	for (size_t j = 0; j <= lb; j++)
		row[j] = j;
	for (size_t i = 1; i <= la; i++) {
		size_t diag = row[0];
		row[0] = i;
		for (size_t j = 1; j <= lb; j++) {
			size_t up = row[j];
			size_t cost = tolower((unsigned char)a[i - 1]) != tolower((unsigned char)b[j - 1]);
			size_t best = diag + cost;
			if (row[j] + 1 < best)
				best = row[j] + 1;
			if (row[j - 1] + 1 < best)
				best = row[j - 1] + 1;
			row[j] = best;
			diag = up;
		}
	}
	return row[lb];
}

const char *dli_suggest(const char *word, const char *const *candidates, size_t n)
{
	size_t limit = strlen(word) / 3;
	if (limit < 2)
		limit = 2;
	const char *best = NULL;
	size_t best_d = limit + 1;
	for (size_t i = 0; i < n; i++) {
		if (!candidates[i])
			continue;
		size_t d = edit_distance(word, candidates[i]);
		if (d < best_d) {
			best_d = d;
			best = candidates[i];
		}
	}
	return best;
}

const char *dli_suggest_text(char *buf, size_t size, const char *word, const char *const *candidates,
			     size_t n)
{
	const char *s = dli_suggest(word, candidates, n);
	if (s)
		snprintf(buf, size, " (did you mean '%s'?)", s);
	else if (size)
		buf[0] = '\0';
	return buf;
}

/* The length of s's first `n` bytes, shortened so as not to end inside a UTF-8 character. */
static size_t utf8_head(const char *s, size_t n)
{
	while (n > 0 && ((unsigned char)s[n] & 0xc0) == 0x80)
		n--;
	return n;
}

const char *dli_clip_name(char *buf, size_t size, const char *name)
{
	size_t len = name ? strlen(name) : 0;
	if (!name)
		snprintf(buf, size, "?");
	else if (len <= DLI_CLIP_NAME || size < 16)
		snprintf(buf, size, "%s", name);
	else {
		size_t keep = (size - 4 < DLI_CLIP_NAME ? size - 4 : DLI_CLIP_NAME) / 2;
		size_t head = utf8_head(name, keep), tail = len - keep;
		while (tail < len && ((unsigned char)name[tail] & 0xc0) == 0x80)
			tail++;
		snprintf(buf, size, "%.*s...%s", (int)head, name, name + tail);
	}
	return buf;
}
