/* File-system helpers: mkdir -p for the loggers (through the host table's make_dirs). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "fsutil-private.h"

/* A component that already exists as a directory is fine, whatever mkdir says about it (EEXIST,
 * or EROFS/EACCES on a read-only parent). */
int dli_make_dirs(const char *path)
{
	char *copy = strdup(path);
	struct stat st;
	int rc = 0;

	if (!copy)
		return -ENOMEM;
	for (char *p = copy + 1;; p++) {
		if (*p != '/' && *p != '\0')
			continue;
		char c = *p;
		*p = '\0';
		if (mkdir(copy, 0755) != 0) {
			int e = errno;
			if (stat(copy, &st) != 0) {
				rc = -e;
				break;
			}
			if (!S_ISDIR(st.st_mode)) {
				rc = -ENOTDIR; /* what mkdir -p says of a file in the way */
				break;
			}
		}
		*p = c;
		if (c == '\0')
			break;
	}
	free(copy);
	return rc;
}
