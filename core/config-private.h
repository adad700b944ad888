/* Reading a config (core/config.c): the top level and the sections, checked against the loaded
 * modules; the types are in config-types-private.h. */
#ifndef DLI_CONFIG_PRIVATE_H
#define DLI_CONFIG_PRIVATE_H

#include <stddef.h>

#include "config-types-private.h"

/* Reads YAML from `path` (when yaml_text is NULL) or from `yaml_text` (then `path` is only the name
 * used in messages; NULL means "<string>") into a tree, and reads the top-level `extensions` and
 * `loggers` keys. The sections are read later by dli_config_resolve, once the modules they need are
 * loaded. On success *out is owned by the caller (dli_config_destroy). */
int dli_config_create(const char *path, const char *yaml_text, struct dli_config **out,
		      struct dli_error *err);

/* Checks the sections and loggers against the loaded features' schemas and fills sections,
 * targets, logger params and tensor names. Every error names file:line:column, the section and the
 * key, with a did-you-mean for unknown names. */
int dli_config_resolve(struct dli_config *config, const struct dli_registry *registry,
		       struct dli_error *err);

/* Gives the host's tensor names of an earlier config (`names[0..n)`, the standard ones first) the
 * same ids in `config`, before dli_config_resolve: a reloaded config keeps the ids a host holds.
 * Copies the names. 0 or -ENOMEM. */
int dli_config_seed_tensors(struct dli_config *config, char *const *names, size_t n);

void dli_config_destroy(struct dli_config *config);

#endif
