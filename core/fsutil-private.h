/* File-system helpers of the core, also given to plugins through the host table. */
#ifndef DLI_FSUTIL_PRIVATE_H
#define DLI_FSUTIL_PRIVATE_H

/* mkdir -p: creates `path` and its missing parents (mode 0755). 0 or a negative errno; -ENOTDIR
 * when a component is a file. The host table's make_dirs. */
int dli_make_dirs(const char *path);

#endif
