/* Runs a fuzz target over corpus files without libFuzzer, so the gcc build replays every corpus
 * in the test suite: `replay DIR_OR_FILE...` feeds each file (a directory's files in name order)
 * to LLVMFuzzerTestOneInput. A crash is the failure; ASan builds also catch what libFuzzer would. */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "fuzz.h"

static int run_file(const char *path)
{
	FILE *f = fopen(path, "rb");
	if (!f) {
		perror(path);
		return -1;
	}
	size_t cap = 4096, n = 0, got;
	uint8_t *buf = malloc(cap);
	while (buf && (got = fread(buf + n, 1, cap - n, f)) > 0) {
		n += got;
		if (n == cap) {
			uint8_t *b = realloc(buf, cap *= 2);
			if (!b)
				free(buf);
			buf = b;
		}
	}
	fclose(f);
	if (!buf) {
		fprintf(stderr, "%s: out of memory\n", path);
		return -1;
	}
	/* An exact-size copy, as libFuzzer passes it: a read past the end is then seen by ASan. */
	uint8_t *exact = malloc(n ? n : 1);
	if (exact) {
		memcpy(exact, buf, n);
		LLVMFuzzerTestOneInput(exact, n);
	}
	free(exact);
	free(buf);
	return exact ? 0 : -1;
}

int main(int argc, char **argv)
{
	size_t inputs = 0;
	int failed = 0;
	for (int i = 1; i < argc; i++) {
		struct stat st;
		if (stat(argv[i], &st)) {
			perror(argv[i]);
			return 1;
		}
		if (!S_ISDIR(st.st_mode)) {
			failed |= run_file(argv[i]);
			inputs++;
			continue;
		}
		struct dirent **names;
		int n = scandir(argv[i], &names, NULL, alphasort);
		if (n < 0) {
			perror(argv[i]);
			return 1;
		}
		for (int k = 0; k < n; k++) {
			char path[4096];
			snprintf(path, sizeof path, "%s/%s", argv[i], names[k]->d_name);
			if (names[k]->d_name[0] != '.' && !stat(path, &st) && S_ISREG(st.st_mode)) {
				failed |= run_file(path);
				inputs++;
			}
			free(names[k]);
		}
		free(names);
	}
	printf("%zu inputs replayed\n", inputs);
	return failed || !inputs;
}
