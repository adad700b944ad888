/* Error reporting and did-you-mean helpers shared by every part of the core. */
#ifndef DLI_ERROR_PRIVATE_H
#define DLI_ERROR_PRIVATE_H

#include <stddef.h>

#include <dlinspect/dlinspect.h>

/* A position in a config file (1-based line and column); file NULL when none. */
struct dli_where {
	const char *file;
	int line;
	int column;
};

/* Fills *err (if non-NULL) and returns `code` (a negative errno). With a `where` whose file is set,
 * the message is "file:line:column: " followed by the formatted text and err->file/line/column are
 * set; with where == NULL only the text. */
int dli_error_set(struct dli_error *err, int code, const struct dli_where *where, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));

/* Puts "file:line:column: " + `fmt` text in front of err->message (keeps what was there after it)
 * and records the position. Returns err->code. */
int dli_error_prefix(struct dli_error *err, const struct dli_where *where, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

/* The closest candidate to `word` (edit distance at most max(2, strlen(word) / 3), case-insensitive
 * for the comparison), or NULL. Candidates are borrowed; so is the result. */
const char *dli_suggest(const char *word, const char *const *candidates, size_t n);

/* Writes " (did you mean 'x'?)" into buf when dli_suggest finds one, else "" . Returns buf. */
const char *dli_suggest_text(char *buf, size_t size, const char *word, const char *const *candidates,
			     size_t n);

/* A name as an error message quotes it: itself up to DLI_CLIP_NAME bytes, else its head and tail
 * around "...", cut between UTF-8 characters, so that a long layer name, tensor name, config
 * value or path leaves room for the reason after it. Returns buf. */
#define DLI_CLIP_NAME 160
const char *dli_clip_name(char *buf, size_t size, const char *name);

#endif
