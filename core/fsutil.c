/* File-system helpers: mkdir -p for the loggers (through the host table's make_dirs), a path made
 * absolute (the log dir, at dli_init), and a file opened for reading that cannot hang (configs,
 * logs, tensor files). */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fsutil-private.h"

char *dli_abs_path(const char *path)
{
	char *cwd, *out;

	if (path[0] == '/' || !(cwd = getcwd(NULL, 0)))
		return strdup(path);
	if (!strcmp(path, ".")) /* the common default: no "/." in every path written */
		return cwd;
	if (asprintf(&out, "%s/%s", cwd, path) < 0)
		out = NULL;
	free(cwd);
	return out;
}

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

int dli_fopen_file(const char *path, FILE **out)
{
	*out = NULL;
	/* O_NONBLOCK: the open of a FIFO with no writer returns at once instead of waiting */
	int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	struct stat st;
	int r = fstat(fd, &st) ? -errno
		: S_ISDIR(st.st_mode)			     ? -EISDIR
		: S_ISFIFO(st.st_mode) || S_ISSOCK(st.st_mode) ? -ENXIO
							     : 0;
	int flags = r ? 0 : fcntl(fd, F_GETFL);
	if (!r && (flags < 0 || fcntl(fd, F_SETFL, flags & ~O_NONBLOCK) < 0))
		r = -errno;
	FILE *f = r ? NULL : fdopen(fd, "rb");
	if (!r && !f)
		r = -errno;
	if (r) {
		close(fd);
		return r;
	}
	*out = f;
	return 0;
}

int dli_read_all(FILE *f, size_t max, char **text, size_t *len)
{
	char *t = NULL, buf[65536];
	size_t n = 0, cap = 0, got;
	*text = NULL;
	while ((got = fread(buf, 1, sizeof buf, f)) > 0) {
		if (n + got > max) {
			free(t);
			return -EFBIG;
		}
		if (n + got + 1 > cap) {
			size_t c = cap ? 2 * cap : sizeof buf + 1;
			while (c < n + got + 1)
				c *= 2;
			if (c > max + 1)
				c = max + 1;
			char *grown = realloc(t, c);
			if (!grown) {
				free(t);
				return -ENOMEM;
			}
			t = grown;
			cap = c;
		}
		memcpy(t + n, buf, got);
		n += got;
	}
	int e = ferror(f) ? (errno ? errno : EIO) : 0;
	if (e || (!t && !(t = malloc(1)))) {
		free(t);
		return e ? -e : -ENOMEM;
	}
	t[n] = '\0';
	*text = t;
	*len = n;
	return 0;
}

const char *dli_file_error(int r)
{
	return r == -ENXIO ? "a FIFO or a socket, not a file" : strerror(-r);
}
