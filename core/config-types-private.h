/* The parsed config's types: a YAML tree with positions (built by core/config-yaml.c, the only
 * libyaml user) and what it resolves to against the loaded modules. Types only: the config's
 * functions are declared in the headers of the files that define them. */
#ifndef DLI_CONFIG_TYPES_PRIVATE_H
#define DLI_CONFIG_TYPES_PRIVATE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <dlinspect/plugin.h>

#include "error-private.h"
#include "select-private.h"
#include "strset-private.h"

struct dli_registry;
struct dli_feature_entry;
struct dli_logger_entry;

enum dli_node_kind {
	DLI_NODE_SCALAR,
	DLI_NODE_SEQ,
	DLI_NODE_MAP,
};

struct dli_node {
	enum dli_node_kind kind;
	struct dli_where where;
	char *text;   /* SCALAR: the value */
	bool plain;   /* SCALAR: unquoted (only plain scalars can be null, bool or numbers) */
	size_t n;     /* SEQ: items; MAP: pairs */
	size_t cap;   /* room in items (and keys) */
	struct dli_node **items; /* SEQ items; MAP values */
	struct dli_node **keys;  /* MAP keys (scalars) */
	/* The nodes it stands for with every alias and '<<' merge under it expanded: itself, its
	 * keys' and its items' (at most MAX_NODES: the reading fails past it). */
	uint64_t weight;
};

/* One feature instance to create: a feature block, or one entry of its gemms_struct/tensors_struct. */
struct dli_target {
	const struct dli_feature_entry *feature;
	const struct dli_section *section;
	struct dli_where where;
	char *where_text; /* "path:line:column" */
	uint32_t gemms;   /* always set: all gemms for features without DLI_FEATURE_GEMMS */
	uint64_t tensors; /* always set: all ids for features without DLI_FEATURE_TENSORS */
	struct dli_value *params; /* feature->desc->n_params values, in schema order */
	struct dli_schedule schedule;
	bool in_eval; /* DLI_FEATURE_MODIFIES only: acts in DLI_MODE_EVAL too (docs/config.md) */
	bool freq_given; /* the block (or its struct entry) gave freq, not null */
};

struct dli_section {
	char *name;
	struct dli_where where;
	const struct dli_node *node;
	bool enabled;
	struct dli_selector selector;
	size_t first_target; /* this section's targets are config->targets[first .. first + n) */
	size_t n_targets;
};

struct dli_logger_config {
	const struct dli_logger_entry *logger; /* set by dli_config_resolve */
	char *name;
	struct dli_where where;
	char *where_text;
	const struct dli_node *node; /* the logger's parameter map (NULL = none given) */
	struct dli_value *params;
};

struct dli_config_entry {
	char *name;
	struct dli_where where;
};

#define DLI_MAX_TENSORS 64

struct dli_config {
	char *path; /* "<string>" for YAML text */
	struct dli_node *root; /* NULL for an empty document */
	struct dli_node **nodes; /* every node, for freeing (aliases share nodes) */
	size_t n_nodes, cap_nodes;

	bool has_extensions;
	struct dli_config_entry *extensions;
	size_t n_extensions;

	bool has_loggers;
	struct dli_logger_config *loggers;
	size_t n_loggers;

	bool nvtx; /* top-level `nvtx: true`: NVTX ranges around dlinspect's work (core/nvtx.c) */
	struct dli_where nvtx_where;

	struct dli_section *sections;
	size_t n_sections;
	struct dli_target *targets;
	size_t n_targets;

	/* Tensor names: the standard ones first (enum dli_tensor_kind), then the host's own names in
	 * order of first use in the config. */
	char *tensor_names[DLI_MAX_TENSORS];
	size_t n_tensor_names;

	/* Set before dli_config_resolve: the host's declared tensor names. With `tensors_declared`,
	 * any other non-standard tensor name (outside the base namespace) is an error. */
	const char *const *declared_tensors;
	size_t n_declared_tensors;
	bool tensors_declared;

	/* Things that are valid but probably not what the user meant, e.g. "layer_numbers has no
	 * effect when layer_name_regex_pattern is present". Each "path:line:col: text".
	 * warnings_loud[i]: also for stderr at run time (a tensor name nobody declared). */
	char **warnings;
	bool *warnings_loud;
	size_t n_warnings;

	/* Every string handed out in values (lists, where texts), freed with the config. */
	void **allocs;
	size_t n_allocs, cap_allocs;

	/* Modules' default values, each text read into nodes once however many targets take it
	 * (dli_cfg_fill_defaults): the YAML text -> its root node (a uintptr_t). */
	struct dli_strset defaults;
};

/* Whether two targets of one feature could act on the same (gemm, tensor). */
static inline bool dli_target_overlaps(const struct dli_target *a, const struct dli_target *b)
{
	return (a->gemms & b->gemms) && (a->tensors & b->tensors);
}

#endif
