/* Reading config values (core/config-values.c). */
#ifndef DLI_CONFIG_VALUES_PRIVATE_H
#define DLI_CONFIG_VALUES_PRIVATE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "config-types-private.h"

/* While resolving, `path` holds where we are, e.g. "fc_stats.transformer_engine.LogTensorStats". */
struct resolver {
	struct dli_config *cfg;
	const struct dli_registry *reg;
	struct dli_error *err;
	char path[256];
	/* Reading a base-namespace feature: its choices (statistic names) match in any letter case,
	 * as nvdlfw_inspect lowercases them, and its tensor names are free (the host's own, given to
	 * the generic log_tensor_stats call). */
	bool base_ns;
};

int dli_cfg_fail(struct resolver *rs, const struct dli_node *at, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
int dli_cfg_fill_defaults(struct resolver *rs, const struct dli_param_desc *schema, size_t n,
			  struct dli_value *values, const char *owner,
			  const struct dli_node *block);
const char *dli_cfg_kind_name(const struct dli_node *n);
int dli_cfg_listed_once(struct resolver *rs, const struct dli_node *const *items,
			const char *const *texts, size_t count);
int dli_cfg_listed_twice(struct resolver *rs, const struct dli_node *at, const char *text,
			 const struct dli_node *first);
int dli_cfg_parse_value(struct resolver *rs, const struct dli_param_desc *d,
			const struct dli_node *n, struct dli_value *v);
void dli_cfg_path_pop(struct resolver *rs, size_t mark);
size_t dli_cfg_path_push(struct resolver *rs, const char *name);
int dli_cfg_schema_find(const struct dli_param_desc *schema, size_t n, const char *key);
int dli_cfg_set_param(struct resolver *rs, const struct dli_param_desc *schema, int idx,
		      const struct dli_node *key, const struct dli_node *node,
		      struct dli_value *values, const bool *set_here);
int dli_cfg_want_bool(struct resolver *rs, const struct dli_node *n, bool *out);
int dli_cfg_want_choice(struct resolver *rs, const struct dli_node *n, const char *const *choices,
			size_t n_choices, const char *what);
int dli_cfg_want_int(struct resolver *rs, const struct dli_node *n, int64_t *out);
int dli_cfg_want_list(struct resolver *rs, const struct dli_node *n, const char *what,
		      const struct dli_node *const **items, size_t *count);
int dli_cfg_want_scalar(struct resolver *rs, const struct dli_node *n, const char *what);
int dli_cfg_warn(struct resolver *rs, const struct dli_node *at, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* After a mistake (-EINVAL, said in rs->err) inside what is disabled: it becomes a warning that
 * says `why` it is not an error, and rs->err is cleared. 0 or -ENOMEM. */
int dli_cfg_demote(struct resolver *rs, const char *why);

/* Parses a standalone parameter map (e.g. a logger's) against a schema. `node` may be NULL (all
 * defaults). `owner` names the feature or logger in messages. Values are owned by the config. */
int dli_config_params(struct dli_config *config, const struct dli_node *node,
		      const struct dli_param_desc *schema, size_t n_schema, const char *owner,
		      struct dli_value **out, struct dli_error *err);

#endif
