/* Escaping of text that goes into line-oriented logs (the file logger's logs, stderr, TensorBoard
 * tags). Header-only, so the bundled loggers share it without linking the core. */
#ifndef DLI_ESCAPE_PRIVATE_H
#define DLI_ESCAPE_PRIVATE_H

#include <stdbool.h>
#include <stddef.h>
#include <string.h>

/* The length (2 to 4) of the well-formed UTF-8 sequence at `p` (RFC 3629: no overlong forms, no
 * surrogates, nothing above U+10FFFF), or 0 when the byte there starts none. `p` is NUL-terminated,
 * and NUL is no continuation byte, so this never reads past the end. */
static inline size_t dli_utf8_len(const unsigned char *p)
{
	unsigned char lo = 0x80, hi = 0xbf;
	size_t n;

	if (p[0] >= 0xc2 && p[0] <= 0xdf)
		n = 2;
	else if (p[0] >= 0xe0 && p[0] <= 0xef)
		n = 3;
	else if (p[0] >= 0xf0 && p[0] <= 0xf4)
		n = 4;
	else
		return 0;
	if (p[0] == 0xe0)
		lo = 0xa0; /* overlong */
	else if (p[0] == 0xed)
		hi = 0x9f; /* surrogates */
	else if (p[0] == 0xf0)
		lo = 0x90; /* overlong */
	else if (p[0] == 0xf4)
		hi = 0x8f; /* above U+10FFFF */
	if (p[1] < lo || p[1] > hi)
		return 0;
	for (size_t i = 2; i < n; i++)
		if (p[i] < 0x80 || p[i] > 0xbf)
			return 0;
	return n;
}

/* Copies `src` into `dst` (`size` bytes, always NUL-terminated when size > 0) with every C0 control
 * character and DEL escaped (\n, \r, \t, else \xNN), '\' doubled, and every byte that is not part of
 * well-formed UTF-8 escaped as \xNN. A layer name is the host's, and a newline in it would otherwise
 * start a line of its own in a log that parsers read line by line ("... iteration=000001 \t\t\t\t
 * value=1"): escaped, each record stays one line, and doubling '\' keeps the escaping reversible.
 * Invalid UTF-8 is escaped because the readers are Python's: TensorBoard's protobuf refuses a tag
 * that is not UTF-8 and, with it, the whole event file, and a log opened as text fails to decode.
 * Well-formed UTF-8 passes unchanged. When `dst` is too small, the text is cut before the first
 * character or escape that does not fit whole, so a cut never leaves half a one. Returns the length
 * of the whole escaped text (not counting the NUL); dst may be NULL when size is 0, to measure. */
static inline size_t dli_escape(char *dst, size_t size, const char *src)
{
	static const char hex[] = "0123456789abcdef";
	bool cut = false;
	size_t n = 0, kept = 0;

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
			if (*p >= 0x80 && (k = dli_utf8_len(p)) > 0) {
				memcpy(e, p, k);
				p += k - 1;
			} else if (*p >= 0x20 && *p != 0x7f && *p < 0x80) {
				e[0] = (char)*p;
				k = 1;
			} else {
				e[1] = 'x';
				e[2] = hex[*p >> 4];
				e[3] = hex[*p & 15];
				k = 4;
			}
		}
		if (!cut && n + k < size) {
			memcpy(dst + n, e, k);
			kept = n + k;
		} else {
			cut = true;
		}
		n += k;
	}
	if (size)
		dst[kept] = '\0';
	return n;
}

/* Whether dli_escape would change `s`: most texts need no copy. */
static inline int dli_escape_needed(const char *s)
{
	for (const unsigned char *p = (const unsigned char *)s; *p; p++)
		if (*p < 0x20 || *p == 0x7f || *p == '\\' || (*p >= 0x80 && !dli_utf8_len(p)))
			return 1;
		else if (*p >= 0x80)
			p += dli_utf8_len(p) - 1;
	return 0;
}

#endif
