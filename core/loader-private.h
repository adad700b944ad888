/* Module loading through libltdl (core/loader.c is the only file that includes ltdl.h). */
#ifndef DLI_LOADER_PRIVATE_H
#define DLI_LOADER_PRIVATE_H

#include <stdbool.h>
#include <stddef.h>

#include <dlinspect/plugin.h>

struct dli_loader;

/* Makes a loader searching `dirs` in order (borrowed; copied). `host` is passed to each module's
 * entry and must outlive the loader. */
int dli_loader_create(const struct dli_host *host, const char *const *dirs, size_t n_dirs,
		      struct dli_loader **out, struct dli_error *err);

/* Loads every module (`*.so`, regular files only) found in the search dirs. A module name found
 * again in a later dir is skipped (the first in search order wins, like PATH). */
int dli_loader_load_all(struct dli_loader *loader, struct dli_error *err);
/* The same, going on past a module that fails to load (for listing tools): each failure is handed
 * to `bad` (err holding its message), and the first one's code is returned. Out of memory stops. */
int dli_loader_load_all_each(struct dli_loader *loader,
			     void (*bad)(void *arg, const struct dli_error *e), void *arg,
			     struct dli_error *err);

/* Loads what one `extensions` entry names: a module name (<dir>/<name>.so, first in search order),
 * a namespace (every module on the search path whose DLI_MODULE_NAMESPACE note names it: nothing
 * is loaded to find them), or a path (contains '/'; -EPERM unless dli_loader_allow_paths). Every
 * file must be a regular file owned by this user or root and not group- or world-writable (-EPERM
 * otherwise, naming which). Loading a module that is already
 * loaded is a no-op. -ENOENT when nothing matches, with the message naming the dirs searched and a
 * did-you-mean over the module names and namespaces seen. Error messages carry no config position:
 * the caller prefixes it. */
int dli_loader_load(struct dli_loader *loader, const char *entry, struct dli_error *err);

/* Whether dli_loader_load takes a path (default: no; docs/security.md). */
void dli_loader_allow_paths(struct dli_loader *loader, bool allow);

size_t dli_loader_count(const struct dli_loader *loader);
const struct dli_module *dli_loader_module(const struct dli_loader *loader, size_t i);
const char *dli_loader_path(const struct dli_loader *loader, size_t i);

/* The search dirs, in order (borrowed from the loader). */
const char *const *dli_loader_dirs(const struct dli_loader *loader, size_t *n);

/* The plugin search path: `extra` dirs, then $DLINSPECT_PLUGIN_PATH (':'-separated), then the
 * install dir. *out is an array of owned strings; free with dli_search_dirs_free. A NULL or empty
 * entry of `extra` is -EINVAL; empty ones of the variable are skipped. */
int dli_search_dirs(const char *const *extra, size_t n_extra, char ***out, size_t *n,
		    struct dli_error *err);
void dli_search_dirs_free(char **dirs, size_t n);

/* Unloads every module. Accepts NULL. */
void dli_loader_destroy(struct dli_loader *loader);

#endif
