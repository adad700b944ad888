/* torch_file.c alone: the inputs it refuses, and the zip64 end records of files with no entry and
 * with more entries than a classic zip counts (test_dump.py reads whole files the module wrote). */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "torch_file.h"

static uint64_t le(const unsigned char *p, int n)
{
	uint64_t v = 0;
	for (int i = n - 1; i >= 0; i--)
		v = v << 8 | p[i];
	return v;
}

/* Writes the entries to a temp file; returns its bytes (*size) or NULL, *rc the writer's code. */
static unsigned char *write_file(const struct dli_torch_entry *e, size_t n, int *rc, size_t *size)
{
	FILE *f = tmpfile();
	unsigned char *p = NULL;
	if (!f)
		return NULL;
	*rc = dli_torch_file_write(fileno(f), e, n);
	long end = ftell(f) >= 0 ? (fseek(f, 0, SEEK_END), ftell(f)) : -1;
	if (end > 0 && (p = malloc((size_t)end)) && !fseek(f, 0, SEEK_SET) &&
	    fread(p, 1, (size_t)end, f) == (size_t)end)
		*size = (size_t)end;
	else {
		free(p);
		p = NULL;
	}
	fclose(f);
	return p;
}

/* The zip64 end of central directory's entry count (via its locator), or -1. */
static int64_t zip64_entries(const unsigned char *p, size_t n)
{
	if (n < 22 + 20 || le(p + n - 22, 4) != 0x06054b50 || le(p + n - 42, 4) != 0x07064b50)
		return -1;
	uint64_t at = le(p + n - 42 + 8, 8);
	if (at + 56 > n || le(p + at, 4) != 0x06064b50)
		return -1;
	return (int64_t)le(p + at + 32, 8);
}

int main(void)
{
	static const int64_t s2[2] = {2, 3}, bad[1] = {-1};
	static const float six[6] = {1, 2, 3, 4, 5, 6}, one = 1;
	int rc = 0;
	size_t size = 0;

	struct dli_torch_entry e = {"x", "F32", 2, s2, six, sizeof six};
	e.dtype = "F33";
	CHECK_INT(dli_torch_file_write(-1, &e, 1), -EINVAL);
	e.dtype = "F32";
	e.bytes = 20;
	CHECK_INT(dli_torch_file_write(-1, &e, 1), -EINVAL);
	e.bytes = sizeof six;
	e.shape = bad;
	e.ndim = 1;
	CHECK_INT(dli_torch_file_write(-1, &e, 1), -EINVAL);

	/* No entry: five records (data.pkl, .format_version, .storage_alignment, byteorder, version). */
	unsigned char *p = write_file(NULL, 0, &rc, &size);
	CHECK_INT(rc, 0);
	CHECK(p && zip64_entries(p, size) == 5);
	free(p);

	/* 70000 0-d tensors: more records than the classic end record's 16-bit count holds. */
	size_t n = 70000;
	struct dli_torch_entry *many = calloc(n, sizeof *many);
	char(*keys)[16] = calloc(n, sizeof *keys);
	if (!many || !keys)
		return 2;
	for (size_t i = 0; i < n; i++) {
		snprintf(keys[i], sizeof keys[i], "k%zu", i);
		many[i] = (struct dli_torch_entry){keys[i], "F32", 0, NULL, &one, sizeof one};
	}
	p = write_file(many, n, &rc, &size);
	CHECK_INT(rc, 0);
	CHECK(p && zip64_entries(p, size) == (int64_t)n + 5);
	free(p);
	free(many);
	free(keys);
	return check_exit();
}
