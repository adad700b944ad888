/* Feature blocks of a section (core/config-blocks.c). */
#ifndef DLI_CONFIG_BLOCKS_PRIVATE_H
#define DLI_CONFIG_BLOCKS_PRIVATE_H

#include "config-types-private.h"
#include "config-values-private.h"

/* The capacity config->targets starts with (it doubles). */
#define TARGETS_MIN 16

/* The feature registered under `name` (any namespace) / one that may sit directly in a section
 * (generic), or NULL; *other: a second namespace's generic feature of that name, or NULL. */
const struct dli_feature_entry *dli_cfg_direct_feature(struct resolver *rs, const char *name,
							const struct dli_feature_entry **other);
const struct dli_feature_entry *dli_cfg_feature_lookup(struct resolver *rs, const char *name);
/* Reads one feature block `v` (under key `key`) of section `s` into targets. */
int dli_cfg_read_feature(struct resolver *rs, struct dli_section *s,
			 const struct dli_feature_entry *fe, const struct dli_node *key,
			 const struct dli_node *v);

#endif
