/* The command-line tool's one door into the core (tools/; not installed, not exported by
 * libdlinspect.so). tools/ includes this header and the public ones, nothing else of the core:
 * what the CLI reads of a context, a layer or the loaded modules goes through the calls below,
 * so struct dli_context, the config, the loader and the registry can change without touching
 * tools/.
 *
 * Besides the calls, the door passes on the core's function-level helpers the CLI shares with it:
 * the name tables (GEMMs, tensors, dtypes) and the keys every feature shares, error setting and
 * did-you-mean, opening a file that cannot hang (fsutil-private.h), escaping text for a line
 * (escape-private.h), and the kernels' statistics of host buffers (tools/stats.c and its
 * benchmark). */
#ifndef DLI_TOOLS_API_H
#define DLI_TOOLS_API_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <dlinspect/dlinspect.h>
#include <dlinspect/plugin.h>
#include <dlinspect/stats.h>
#include <dlinspect/tensor.h>

#include "cpu/cpu-private.h"
#include "cpu/runs-private.h"
#include "error-private.h"
#include "escape-private.h"
#include "feature-keys-private.h"
#include "fsutil-private.h"
#include "kernels-private.h"
#include "names-private.h"

/* ---- A config, opened quietly ---- */

/* dli_init without its loggers: reads the config, loads its modules and creates the feature
 * instances, writing no log (`dlinspect check`). Close with dli_destroy. */
int dli_tools_open(const struct dli_options *options, struct dli_context **out,
		   struct dli_error *err);

/* What `check` reports of an opened config. */
struct dli_tools_summary {
	size_t sections, enabled_sections, instances, modules;
};
void dli_tools_summarize(const struct dli_context *ctx, struct dli_tools_summary *out);

/* The config's warnings, in the order they were found ("path:line:col: ..."). */
size_t dli_tools_warning_count(const struct dli_context *ctx);
const char *dli_tools_warning(const struct dli_context *ctx, size_t i);

/* The context's tensor names by id: the standard ones, then the host's and the config's. */
size_t dli_tools_tensor_count(const struct dli_context *ctx);
const char *dli_tools_tensor_name(const struct dli_context *ctx, size_t tensor);

/* ---- What applies to a layer ---- */

/* One feature instance bound to a layer (`check --layer`). Borrowed from the context. */
struct dli_tools_binding {
	const char *ns;                       /* the feature's namespace */
	const struct dli_feature_desc *feature;
	const char *section;                  /* the config section's name */
	const char *where;                    /* "path:line:column" of the feature's block */
	uint32_t gemms;                       /* bit per enum dli_gemm */
	uint64_t tensors;                     /* bit per tensor id */
	const struct dli_schedule *schedule;  /* meaningful with DLI_FEATURE_SCHEDULED */
};

size_t dli_tools_binding_count(const struct dli_layer *layer);
/* Fills *out for binding i (< dli_tools_binding_count). */
void dli_tools_binding_get(const struct dli_layer *layer, size_t i, struct dli_tools_binding *out);

/* ---- Modules on the plugin search path ---- */

/* The plugin search path dli_init would use, with `extra` first: *out is an array of *n copied
 * names, freed with dli_tools_search_dirs_free. */
int dli_tools_search_dirs(const char *const *extra, size_t n_extra, char ***out, size_t *n,
			  struct dli_error *err);
void dli_tools_search_dirs_free(char **dirs, size_t n);

struct dli_tools_modules;

/* Loads every module in `dirs` (or, when `only` is not NULL, the module or namespace of that name,
 * as an `extensions` entry) through the loader dli_init uses. On a failure to load, *out still holds
 * what loaded (NULL only when nothing could be set up) and the error is returned. With `bad` (and
 * no `only`), a module that fails does not stop the others: each failure goes to bad, and the
 * first one's code is returned. */
int dli_tools_modules_open(const char *const *dirs, size_t n_dirs, const char *only,
			   void (*bad)(void *arg, const struct dli_error *e), void *arg,
			   struct dli_tools_modules **out, struct dli_error *err);
size_t dli_tools_module_count(const struct dli_tools_modules *m);
const struct dli_module *dli_tools_module(const struct dli_tools_modules *m, size_t i);
/* The file module i was loaded from. */
const char *dli_tools_module_path(const struct dli_tools_modules *m, size_t i);
void dli_tools_modules_close(struct dli_tools_modules *m); /* accepts NULL */

/* A numeric parameter's accepted range ("in [-126, 126]"), or "" when it has none. */
const char *dli_tools_param_range_text(const struct dli_param_desc *d, char *buf, size_t size);

#endif
