/* The loader's file checks and directory scans (core/loader-files.c). */
#ifndef DLI_LOADER_FILES_PRIVATE_H
#define DLI_LOADER_FILES_PRIVATE_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/stat.h>

#include <dlinspect/plugin.h>

/* A `.so` file on the search path, after first-in-search-order dedupe. */
struct dli_candidate {
	char *name;
	char *path;
};

struct dli_candidates {
	struct dli_candidate *v;
	size_t n, cap;
};

/* Owned strings, for the did-you-mean over namespaces seen while scanning. */
struct dli_strings {
	char **v;
	size_t n, cap;
};

/* What a module file says about itself before anything loads it. */
struct dli_elf_info {
	bool elf;       /* an ELF object of this machine's class */
	bool sections;  /* with section headers this reader could walk */
	bool has_entry; /* its dynamic symbols define DLI_MODULE_ENTRY_NAME */
	bool has_ns;    /* it has a DLI_MODULE_NAMESPACE note, whose text is in ns */
	char ns[DLI_NAMESPACE_MAX];
};

/* "*.so". */
bool dli_is_module_file(const char *file);
/* stat, not lstat: a symlink to a module is a module, a directory or fifo called x.so is not. */
bool dli_is_regular(const char *path);
/* For a path that is there but is no regular file, what it is ("a directory", "a dangling
 * symbolic link or a loop of links"); NULL when nothing is there or it is a regular file. */
const char *dli_irregular_kind(const char *path);
/* Reads `path` as data, never loading it: 0 (info filled; info->elf false for anything that is not
 * an ELF object of this machine's class), or a negative errno when it cannot be read. */
int dli_elf_inspect(const char *path, struct dli_elf_info *info);
/* What makes a file on the plugin path loadable at all (docs/security.md): a regular file that
 * only its owner, this user or root, can change. 0, or -EINVAL/-EPERM with *err set. */
int dli_file_policy(const char *path, const struct stat *st, struct dli_error *err);
/* "dir/file<suffix>", malloc'd (NULL when out of memory). */
char *dli_path_join(const char *dir, const char *file, const char *suffix);
/* Adds a copy of `s` unless empty or present already; -ENOMEM. */
int dli_strings_add(struct dli_strings *list, const char *s);
void dli_strings_finish(struct dli_strings *list);
/* Every module file in `dirs`, each dir's in name order, the first in search order winning. */
int dli_candidates_collect(char *const *dirs, size_t n_dirs, struct dli_candidates *c);
void dli_candidates_finish(struct dli_candidates *c);

#endif
