/* File-system helpers of the core, also given to plugins through the host table. */
#ifndef DLI_FSUTIL_PRIVATE_H
#define DLI_FSUTIL_PRIVATE_H

#include <stdio.h>

/* mkdir -p: creates `path` and its missing parents (mode 0755). 0 or a negative errno; -ENOTDIR
 * when a component is a file. The host table's make_dirs. */
int dli_make_dirs(const char *path);

/* fopen(path, "rb") that cannot hang: a FIFO or a socket, whose open or read waits for a writer,
 * is refused with -ENXIO and a directory with -EISDIR, before anything is read. 0 and *out, or a
 * negative errno (dli_file_error says what it means). */
int dli_fopen_file(const char *path, FILE **out);

/* The text for dli_fopen_file's error r. */
const char *dli_file_error(int r);

#endif
