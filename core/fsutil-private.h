/* File-system helpers of the core, also given to plugins through the host table. */
#ifndef DLI_FSUTIL_PRIVATE_H
#define DLI_FSUTIL_PRIVATE_H

#include <stdio.h>

/* mkdir -p: creates `path` and its missing parents (mode 0755). 0 or a negative errno; -ENOTDIR
 * when a component is a file. The host table's make_dirs. */
int dli_make_dirs(const char *path);

/* `path` made absolute against the working directory now (an absolute one is copied; "." is the
 * working directory itself), so that a later chdir of the host does not move what is written
 * there. Owned by the caller; NULL when out of memory. A working directory that cannot be read
 * (removed) leaves the path as it is. */
char *dli_abs_path(const char *path);

/* fopen(path, "rb") that cannot hang: a FIFO or a socket, whose open or read waits for a writer,
 * is refused with -ENXIO and a directory with -EISDIR, before anything is read. 0 and *out, or a
 * negative errno (dli_file_error says what it means). */
int dli_fopen_file(const char *path, FILE **out);

/* The rest of f, NUL-terminated, into *text (owned by the caller; never NULL on success) and its
 * length into *len: 0, -EFBIG past `max` bytes, -ENOMEM, or the read's negative errno. The buffer
 * doubles, so a read copies the text a bounded number of times. */
int dli_read_all(FILE *f, size_t max, char **text, size_t *len);

/* The text for dli_fopen_file's error r. */
const char *dli_file_error(int r);

#endif
