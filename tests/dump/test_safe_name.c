/* DumpTensors' file names from layer names (features/dump_tensors/safe_name.c): every output is a
 * plain file name inside the dump directory (no separator, no "..", no leading dot, bounded), names
 * that are already safe stay as they are, and different names never share a file: names that map to
 * the same characters (a/b, a:b, a?b, a_b), names cut at the bound, unicode and invalid UTF-8. The
 * hash suffix is checked against a naive FNV-1a written here. */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "safe_name.h"

static uint64_t ref_fnv1a(const char *s, size_t n)
{
	uint64_t h = 14695981039346656037ull;
	for (size_t i = 0; i < n; i++)
		h = (h ^ (uint8_t)s[i]) * 1099511628211ull;
	return h;
}

static bool plain_file_name(const char *s)
{
	if (!*s || s[0] == '.' || strstr(s, "..") || strlen(s) > DLI_DUMP_SAFE_NAME_MAX)
		return false;
	for (const char *p = s; *p; p++)
		if (!strchr("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-", *p))
			return false;
	return true;
}

/* The altered form: ends with "-" and the 16 hex digits of the original's hash. */
static bool has_hash_of(const char *safe, const char *orig)
{
	char want[32];
	size_t n = strlen(safe);
	snprintf(want, sizeof want, "-%016llx", (unsigned long long)ref_fnv1a(orig, strlen(orig)));
	return n >= 17 && !strcmp(safe + n - 17, want);
}

int main(void)
{
	static char names[64][400];
	static char safe[64][DLI_DUMP_SAFE_NAME_MAX + 1];
	size_t n = 0;

	/* Already safe: unchanged. */
	const char *keep[] = {"model.layers.0.mlp.fc1", "a_b", "A-1.x", "fc1", "x-0123456789abcde", "a."};
	for (size_t i = 0; i < sizeof keep / sizeof *keep; i++) {
		char out[DLI_DUMP_SAFE_NAME_MAX + 1];
		CHECK_INT(dli_dump_safe_name(keep[i], out), strlen(keep[i]));
		CHECK_STR(out, keep[i]);
		snprintf(names[n++], sizeof names[0], "%s", keep[i]);
	}

	/* Altered: the unsafe ones, and those that would pass for an altered name. */
	const char *alter[] = {"a/b", "a:b", "a?b", "a\\b", "/", "..", "../../etc/passwd", "a..b",
			       ".hidden", ".", "", "a b", "tab\there", "new\nline",
			       "\xc3\xbcnic\xc3\xb8" "de.\xe5\xb1\x82", "bad\xff" "byte",
			       "x-0123456789abcdef", "a_b-0000000000000000", "a./"};
	for (size_t i = 0; i < sizeof alter / sizeof *alter; i++)
		snprintf(names[n++], sizeof names[0], "%s", alter[i]);
	size_t first_altered = sizeof keep / sizeof *keep;

	/* Long: 300 bytes; two that differ only after the cut; one of exactly the bound. */
	memset(names[n], 'L', 300);
	names[n++][300] = '\0';
	memset(names[n], 'L', 300);
	names[n][299] = 'M';
	names[n++][300] = '\0';
	memset(names[n], 'L', 300);
	memcpy(names[n] + 150, "/../", 4);
	names[n++][300] = '\0';
	memset(names[n], 'y', DLI_DUMP_SAFE_NAME_MAX + 1);
	names[n++][DLI_DUMP_SAFE_NAME_MAX + 1] = '\0';
	size_t exact = n;
	memset(names[n], 'y', DLI_DUMP_SAFE_NAME_MAX);
	names[n++][DLI_DUMP_SAFE_NAME_MAX] = '\0';
	/* A cut that ends on a dot. */
	memset(names[n], 'd', 300);
	names[n][DLI_DUMP_SAFE_NAME_MAX - 18] = '.';
	names[n][DLI_DUMP_SAFE_NAME_MAX - 19] = '/';
	names[n++][300] = '\0';

	for (size_t i = 0; i < n; i++) {
		size_t len = dli_dump_safe_name(names[i], safe[i]);
		CHECK_INT(len, strlen(safe[i]));
		if (!plain_file_name(safe[i]))
			fprintf(stderr, "name %zu ('%s') gave '%s'\n", i, names[i], safe[i]);
		CHECK(plain_file_name(safe[i]));
		bool altered = i >= first_altered && i != exact;
		if (altered ? !has_hash_of(safe[i], names[i]) : strcmp(safe[i], names[i]))
			fprintf(stderr, "name %zu gave %s\n", i, safe[i]);
		CHECK(altered ? has_hash_of(safe[i], names[i]) : !strcmp(safe[i], names[i]));
		char again[DLI_DUMP_SAFE_NAME_MAX + 1];
		dli_dump_safe_name(names[i], again);
		CHECK_STR(again, safe[i]);
	}
	CHECK_INT(strlen(safe[exact]), DLI_DUMP_SAFE_NAME_MAX);
	/* Cut names keep as much of the name as fits beside the hash. */
	CHECK_INT(strlen(safe[exact - 1]), DLI_DUMP_SAFE_NAME_MAX);
	CHECK(!strncmp(safe[exact - 1], names[exact - 1], DLI_DUMP_SAFE_NAME_MAX - 17));
	/* The safe characters survive: a/b -> a_b-<hash>. */
	CHECK(!strncmp(safe[first_altered], "a_b-", 4));

	/* No two different names share a file. */
	for (size_t i = 0; i < n; i++)
		for (size_t j = i + 1; j < n; j++) {
			if (!strcmp(safe[i], safe[j]))
				fprintf(stderr, "'%s' and '%s' both gave '%s'\n", names[i], names[j],
					safe[i]);
			CHECK(strcmp(safe[i], safe[j]) != 0);
		}
	return check_exit();
}
