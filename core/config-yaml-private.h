/* The config's YAML tree and memory (core/config-yaml.c). */
#ifndef DLI_CONFIG_YAML_PRIVATE_H
#define DLI_CONFIG_YAML_PRIVATE_H

#include <stdbool.h>
#include <stddef.h>

#include "config-types-private.h"

/* Limits on what a config may be (docs/config.md, "Limits"): far above any real config (the
 * largest shipped one is a few KB and a few hundred nodes), low enough that a broken or hostile one
 * fails fast with a message naming the limit instead of using gigabytes. */
#define MAX_DEPTH 64
#define MAX_CONFIG_BYTES (16u << 20)
#define MAX_NODES 1000000

/* Blocks owned by the config, freed with it; NULL when out of memory. */
void *dli_cfg_calloc(struct dli_config *cfg, size_t n, size_t size);
char *dli_cfg_printf(struct dli_config *cfg, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
char *dli_cfg_strdup(struct dli_config *cfg, const char *s);
/* "file:line:column" of `w`, owned by the config. */
char *dli_cfg_where_text(struct dli_config *cfg, const struct dli_where *w);
/* A YAML null: "~", "null", an empty scalar. */
bool dli_cfg_is_null(const struct dli_node *n);
/* Parses `len` bytes of YAML into *root (NULL for an empty document), nodes owned by cfg; 0 or
 * -EINVAL with *err naming file:line:column. */
int dli_cfg_build_tree(struct dli_config *cfg, const char *text, size_t len, struct dli_node **root,
		       struct dli_error *err);

#endif
