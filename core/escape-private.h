/* Escaping of text that goes into line-oriented logs (the file logger's logs, stderr, TensorBoard
 * tags). Header-only, so the bundled loggers share it without linking the core. */
#ifndef DLI_ESCAPE_PRIVATE_H
#define DLI_ESCAPE_PRIVATE_H

#include <stddef.h>

/* Copies `src` into `dst` (`size` bytes, NUL-terminated when size > 0, truncated as snprintf does)
 * with every C0 control character and DEL escaped (\n, \r, \t, else \xNN) and '\' doubled. A layer
 * name is the host's, and a newline in it would otherwise start a line of its own in a log that
 * parsers read line by line ("... iteration=000001 \t\t\t\t value=1"): escaped, each record stays one
 * line, and doubling '\' keeps the escaping reversible. Bytes >= 0x80 (UTF-8) pass unchanged.
 * Returns the length of the whole escaped text (not counting the NUL); dst may be NULL when size
 * is 0, to measure. */
static inline size_t dli_escape(char *dst, size_t size, const char *src)
{
	static const char hex[] = "0123456789abcdef";
	size_t n = 0;

	for (const unsigned char *p = (const unsigned char *)src; *p; p++) {
		char e[4];
		size_t k = 2;
		e[0] = '\\';
		switch (*p) {
		case '\n':
			e[1] = 'n';
			break;
		case '\r':
			e[1] = 'r';
			break;
		case '\t':
			e[1] = 't';
			break;
		case '\\':
			e[1] = '\\';
			break;
		default:
			if (*p >= 0x20 && *p != 0x7f) {
				e[0] = (char)*p;
				k = 1;
			} else {
				e[1] = 'x';
				e[2] = hex[*p >> 4];
				e[3] = hex[*p & 15];
				k = 4;
			}
		}
		for (size_t i = 0; i < k; i++, n++)
			if (n + 1 < size)
				dst[n] = e[i];
	}
	if (size)
		dst[n < size ? n : size - 1] = '\0';
	return n;
}

/* Whether dli_escape would change `s`: most texts need no copy. */
static inline int dli_escape_needed(const char *s)
{
	for (const unsigned char *p = (const unsigned char *)s; *p; p++)
		if (*p < 0x20 || *p == 0x7f || *p == '\\')
			return 1;
	return 0;
}

#endif
