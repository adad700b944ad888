/* The features, loggers and namespaces of the loaded modules, by name. Features are keyed by
 * (namespace, name): the same name in two namespaces is two features (docs/config.md). */
#ifndef DLI_REGISTRY_PRIVATE_H
#define DLI_REGISTRY_PRIVATE_H

#include <stdbool.h>
#include <stddef.h>

#include <dlinspect/plugin.h>

struct dli_loader;

struct dli_feature_entry {
	const struct dli_feature_desc *desc;
	const struct dli_module *module;
	const char *path; /* the module's file (borrowed from the loader) */
};

struct dli_logger_entry {
	const struct dli_logger_desc *desc;
	const struct dli_module *module;
	const char *path;
};

struct dli_registry {
	struct dli_feature_entry *features;
	size_t n_features;
	struct dli_logger_entry *loggers;
	size_t n_loggers;
	const char **namespaces; /* distinct, borrowed from the descriptors */
	size_t n_namespaces;
};

/* The base namespace: nvdlfw_inspect's generic features, which sit directly in a section. A module
 * declaring no namespace belongs to it too. */
#define DLI_NS_BASE "base"

/* Indexes every module of the loader. Two modules declaring the same feature name (or alias) in
 * one namespace, or the same logger name, is an error naming both files. */
int dli_registry_init(struct dli_registry *registry, const struct dli_loader *loader,
		      struct dli_error *err);
void dli_registry_finish(struct dli_registry *registry);

/* By name or alias, in any namespace (the first loaded); NULL when unknown. */
const struct dli_feature_entry *dli_registry_feature(const struct dli_registry *registry,
						     const char *name);
/* By name or alias in namespace `ns` (NULL or DLI_NS_BASE: the base namespace); NULL when unknown. */
const struct dli_feature_entry *dli_registry_feature_in(const struct dli_registry *registry,
							const char *ns, const char *name);
/* The namespace a feature entry belongs to: its module's, DLI_NS_BASE for a module without one. */
const char *dli_feature_entry_ns(const struct dli_feature_entry *entry);
const struct dli_logger_entry *dli_registry_logger(const struct dli_registry *registry,
						   const char *name);
bool dli_registry_has_namespace(const struct dli_registry *registry, const char *ns);
/* Whether any feature declares the custom call `name`. */
bool dli_registry_has_call(const struct dli_registry *registry, const char *name);

/* The range of an INT or FLOAT parameter as users read it ("in [-126, 126]", ">= 0"), in `buf`;
 * "" for an unbounded one. Returns buf. */
const char *dli_param_range_text(const struct dli_param_desc *d, char *buf, size_t size);

/* Whether `x`, the value of numeric parameter `d` spelled `text` in the config, is one it takes:
 * never NaN for a FLOAT, and within [min, max] when bounded. When not, `why` says so (for a config
 * error at the value's place) and false is returned. */
bool dli_param_number_ok(const struct dli_param_desc *d, double x, const char *text, char *why,
			 size_t size);

/* Every feature name and alias, logger name and namespace, for did-you-mean. The array is owned by
 * the caller (free()), the strings are borrowed. */
const char **dli_registry_names(const struct dli_registry *registry, size_t *n);

#endif
