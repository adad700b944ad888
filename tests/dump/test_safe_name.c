/* DumpTensors' file names from layer names (features/dump_tensors/safe_name.c): every output is a
 * plain file name inside the dump directory (no separator, no "..", no leading dot, bounded), names
 * that are already safe stay as they are, and different names never share a file: names that map to
 * the same characters (a/b, a:b, a?b, a_b), names cut at the bound, unicode and invalid UTF-8. The
 * hash suffix is checked against a naive FNV-1a written here. The torch files' names
 * (dli_dump_te_name) against TransformerEngine's rule written here. */
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

/* TransformerEngine's DumpTensors rule: these characters become '_'. */
static void te_ref(const char *name, char *out)
{
	size_t n = 0;
	for (const char *p = name; *p; p++)
		out[n++] = strchr("/\\:*?\"<>| .", *p) ? '_' : *p;
	out[n] = '\0';
}

static bool utf8_ok(const char *s)
{
	const unsigned char *p = (const unsigned char *)s;
	while (*p) {
		int k = *p < 0x80 ? 1 : (*p & 0xe0) == 0xc0 ? 2 : (*p & 0xf0) == 0xe0 ? 3 : 4;
		for (int i = 1; i < k; i++)
			if ((p[i] & 0xc0) != 0x80)
				return false;
		p += k;
	}
	return true;
}

static void te_names(void)
{
	char out[DLI_DUMP_TE_LAYER_MAX + 1], ref[400], name[400];

	/* TransformerEngine's names, unaltered: its characters replaced, UTF-8 kept. */
	const char *keep[] = {"model.layers.0.mlp.fc1", "enc/attn:qkv", "a\\b*c?d\"e<f>g|h i",
			      "\xc3\xbcnic.\xe5\xb1\x82", "..", "activation"};
	for (size_t i = 0; i < sizeof keep / sizeof *keep; i++) {
		te_ref(keep[i], ref);
		CHECK_INT(dli_dump_te_name(keep[i], out, DLI_DUMP_TE_LAYER_MAX, 0), strlen(ref));
		CHECK_STR(out, ref);
	}
	/* Altered: empty, control bytes, invalid UTF-8, a name ending like an altered one, too long
	 * (cut between characters), or forced by a clash. */
	const char *alter[] = {"", "tab\there", "bad\xff" "byte", "x-0123456789abcdef"};
	for (size_t i = 0; i < sizeof alter / sizeof *alter; i++) {
		dli_dump_te_name(alter[i], out, DLI_DUMP_TE_LAYER_MAX, 0);
		CHECK(has_hash_of(out, alter[i]));
		CHECK(!strchr(out, '/') && !strchr(out, '\t') && utf8_ok(out));
	}
	dli_dump_te_name("a.b", out, DLI_DUMP_TE_LAYER_MAX, 1);
	CHECK(!strncmp(out, "a_b-", 4) && has_hash_of(out, "a.b"));
	for (int lead = 0; lead < 3; lead++) {
		/* 2-byte characters after `lead` ASCII bytes, past the bound */
		size_t n = 0;
		for (int i = 0; i < lead; i++)
			name[n++] = 'a';
		while (n < 300) {
			name[n++] = (char)0xc3;
			name[n++] = (char)0xa9;
		}
		name[n] = '\0';
		size_t len = dli_dump_te_name(name, out, DLI_DUMP_TE_LAYER_MAX, 0);
		CHECK(len <= DLI_DUMP_TE_LAYER_MAX && len == strlen(out));
		CHECK(has_hash_of(out, name) && utf8_ok(out));
		CHECK(!strncmp(out, name, len - 17));
	}
	memset(name, 'L', DLI_DUMP_TE_TENSOR_MAX);
	name[DLI_DUMP_TE_TENSOR_MAX] = '\0';
	CHECK_INT(dli_dump_te_name(name, out, DLI_DUMP_TE_TENSOR_MAX, 0), DLI_DUMP_TE_TENSOR_MAX);
	CHECK_STR(out, name);
	name[DLI_DUMP_TE_TENSOR_MAX] = 'L';
	name[DLI_DUMP_TE_TENSOR_MAX + 1] = '\0';
	CHECK_INT(dli_dump_te_name(name, out, DLI_DUMP_TE_TENSOR_MAX, 0), DLI_DUMP_TE_TENSOR_MAX);
	CHECK(has_hash_of(out, name));
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
	te_names();
	return check_exit();
}
