/* Layer name -> file name for DumpTensors: see safe_name.h for the rules. */
#include "safe_name.h"

#include "../../core/escape-private.h"

#include <inttypes.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#define HASH_DIGITS 16

static bool safe_char(unsigned char c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
	       c == '.' || c == '_' || c == '-';
}

static bool is_hex(unsigned char c)
{
	return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');
}

/* Whether `s` ends as an altered name does ("-" and 16 lower-case hex digits): such a name is
 * altered too, so an unaltered name can never equal the altered form of another one. */
static bool ends_like_hash(const char *s, size_t n)
{
	if (n < HASH_DIGITS + 1 || s[n - HASH_DIGITS - 1] != '-')
		return false;
	for (size_t i = n - HASH_DIGITS; i < n; i++)
		if (!is_hex((unsigned char)s[i]))
			return false;
	return true;
}

static uint64_t fnv1a64(const char *s)
{
	uint64_t h = 0xcbf29ce484222325ull;
	for (; *s; s++) {
		h ^= (unsigned char)*s;
		h *= 0x100000001b3ull;
	}
	return h;
}

size_t dli_dump_safe_name(const char *name, char *out)
{
	size_t len = strlen(name), n = 0;
	bool altered = len == 0 || len > DLI_DUMP_SAFE_NAME_MAX || ends_like_hash(name, len);

	/* Room for the hash suffix is kept whenever the name is cut, so copy at most this much. */
	size_t keep = DLI_DUMP_SAFE_NAME_MAX - HASH_DIGITS - 1;
	for (size_t i = 0; i < len; i++) {
		unsigned char c = (unsigned char)name[i];
		/* A leading '.' would hide the file; a '.' after a '.' would make "..". */
		if (!safe_char(c) || (c == '.' && (n == 0 || out[n - 1] == '.'))) {
			c = '_';
			altered = true;
		}
		if (n < DLI_DUMP_SAFE_NAME_MAX)
			out[n++] = (char)c;
	}
	if (altered) {
		if (n > keep)
			n = keep;
		/* A cut may leave a trailing '.', which the '-' then follows: no "..", still. */
		n += (size_t)snprintf(out + n, HASH_DIGITS + 2, "-%016" PRIx64, fnv1a64(name));
	}
	out[n] = '\0';
	return n;
}

/* The bytes TransformerEngine's DumpTensors replaces in names. */
static bool te_replaced(unsigned char c)
{
	return c && strchr("/\\:*?\"<>| .", c);
}

size_t dli_dump_te_name(const char *name, char *out, size_t max, int force)
{
	size_t len = strlen(name), n = 0;
	bool altered = force || len == 0 || ends_like_hash(name, len);

	for (size_t i = 0; i < len;) {
		const unsigned char *p = (const unsigned char *)name + i;
		size_t k = *p >= 0x80 ? dli_utf8_len(p) : 1;
		if (k == 0 || *p < 0x20 || *p == 0x7f) {
			/* not a character a file name should hold */
			altered = true;
			k = 1;
			if (n < max)
				out[n++] = '_';
		} else if (n + k <= max) {
			/* whole characters only, so that a cut leaves UTF-8 */
			for (size_t j = 0; j < k; j++)
				out[n++] = te_replaced(p[j]) ? '_' : (char)p[j];
		} else {
			altered = true; /* full: cut here */
			break;
		}
		i += k;
	}
	if (altered) {
		size_t keep = max - HASH_DIGITS - 1;
		if (n > keep) {
			n = keep;
			while (n > 0 && ((unsigned char)out[n] & 0xc0) == 0x80)
				n--; /* back to a character's first byte */
		}
		n += (size_t)snprintf(out + n, HASH_DIGITS + 2, "-%016" PRIx64, fnv1a64(name));
	}
	out[n] = '\0';
	return n;
}
