/* Whole files in and out, for the test filters that read raw little-endian arrays from the Python
 * interop scripts and write their answers back. */
#ifndef DLI_TEST_RAW_IO_H
#define DLI_TEST_RAW_IO_H

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

/* The file's bytes (malloc'ed, one spare byte at the end) and *size, or NULL. */
static inline void *read_all(const char *path, size_t *size)
{
	FILE *f = fopen(path, "rb");
	char *buf = NULL;
	long len;

	if (!f)
		return NULL;
	if (fseek(f, 0, SEEK_END) == 0 && (len = ftell(f)) >= 0 && fseek(f, 0, SEEK_SET) == 0) {
		buf = malloc((size_t)len + 1);
		if (buf && fread(buf, 1, (size_t)len, f) != (size_t)len) {
			free(buf);
			buf = NULL;
		}
		*size = (size_t)len;
	}
	fclose(f);
	return buf;
}

/* 0, or -EIO when the file could not be written whole. */
static inline int write_all(const char *path, const void *p, size_t n)
{
	FILE *f = fopen(path, "wb");
	int ok = f && fwrite(p, 1, n, f) == n;

	if (f && fclose(f))
		ok = 0;
	return ok ? 0 : -EIO;
}

#endif
