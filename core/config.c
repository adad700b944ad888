/* Config reading: the top level (extensions, loggers), the sections and their layer selectors, and
 * the config's life. The YAML tree is built in config-yaml.c, scalars and parameter values are read
 * in config-values.c, feature blocks in config-blocks.c. */
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "config-blocks-private.h"
#include "config-private.h"
#include "config-values-private.h"
#include "config-yaml-private.h"
#include "feature-keys-private.h"
#include "fsutil-private.h"
#include "names-private.h"
#include "registry-private.h"
#include "strset-private.h"

/* ---- Top level ---- */

static int read_extensions(struct resolver *rs, const struct dli_node *n)
{
	struct dli_config *cfg = rs->cfg;
	const struct dli_node *const *items;
	size_t count;
	size_t mark = dli_cfg_path_push(rs, "extensions");
	int r = dli_cfg_want_list(rs, n, "module names or namespaces", &items, &count);
	if (r)
		return r;
	cfg->extensions = dli_cfg_calloc(cfg, count, sizeof *cfg->extensions);
	if (!cfg->extensions)
		return -ENOMEM;
	if ((r = dli_cfg_listed_once(rs, items, NULL, count)))
		return r;
	for (size_t i = 0; i < count; i++) {
		cfg->extensions[i].name = items[i]->text;
		cfg->extensions[i].where = items[i]->where;
	}
	cfg->n_extensions = count;
	cfg->has_extensions = true;
	dli_cfg_path_pop(rs, mark);
	return 0;
}

static int read_loggers(struct resolver *rs, const struct dli_node *n)
{
	struct dli_config *cfg = rs->cfg;
	size_t mark = dli_cfg_path_push(rs, "loggers");
	if (n->kind != DLI_NODE_MAP || n->n == 0)
		return dli_cfg_fail(rs, n,
				    "expected a mapping of logger names to their parameters, e.g. "
				    "'loggers: {file: {}}', got %s",
				    n->kind == DLI_NODE_MAP ? "an empty mapping"
							    : dli_cfg_kind_name(n));
	cfg->loggers = dli_cfg_calloc(cfg, n->n, sizeof *cfg->loggers);
	if (!cfg->loggers)
		return -ENOMEM;
	for (size_t i = 0; i < n->n; i++) {
		struct dli_logger_config *l = &cfg->loggers[i];
		l->name = n->keys[i]->text;
		l->where = n->keys[i]->where;
		l->where_text = dli_cfg_where_text(cfg, &l->where);
		l->node = dli_cfg_is_null(n->items[i]) ? NULL : n->items[i];
		if (l->node && l->node->kind != DLI_NODE_MAP) {
			dli_cfg_path_push(rs, l->name);
			return dli_cfg_fail(rs, l->node, "expected a mapping of parameters, got %s",
					    dli_cfg_kind_name(l->node));
		}
	}
	cfg->n_loggers = n->n;
	cfg->has_loggers = true;
	dli_cfg_path_pop(rs, mark);
	return 0;
}

int dli_config_seed_tensors(struct dli_config *cfg, char *const *names, size_t n)
{
	for (size_t i = DLI_TENSOR_STANDARD_COUNT; i < n && i < DLI_MAX_TENSORS; i++) {
		if (!(cfg->tensor_names[i] = dli_cfg_strdup(cfg, names[i])))
			return -ENOMEM;
		cfg->n_tensor_names = i + 1;
	}
	return 0;
}

static int too_big(struct dli_error *err, const char *path)
{
	return dli_error_set(err, -EFBIG, NULL, "config '%s' is larger than %u MiB, the limit",
			     path, MAX_CONFIG_BYTES >> 20);
}

int dli_config_create(const char *path, const char *yaml_text, struct dli_config **out,
		      struct dli_error *err)
{
	*out = NULL;
	struct dli_config *cfg = calloc(1, sizeof *cfg);
	if (!cfg)
		return dli_error_set(err, -ENOMEM, NULL, "out of memory");
	cfg->path = dli_cfg_strdup(cfg, path ? path : "<string>");
	for (size_t i = 0; i < DLI_TENSOR_STANDARD_COUNT; i++)
		cfg->tensor_names[i] = (char *)dli_standard_tensor_name((int)i);
	cfg->n_tensor_names = DLI_TENSOR_STANDARD_COUNT;
	char *text = NULL;
	size_t len = 0;
	int r = 0;
	if (!cfg->path) {
		r = dli_error_set(err, -ENOMEM, NULL, "out of memory");
		goto fail;
	}
	if (!yaml_text) {
		FILE *f;
		if ((r = dli_fopen_file(path, &f))) {
			r = dli_error_set(err, r, NULL, "cannot open config '%s': %s", path,
					  dli_file_error(r));
			goto fail;
		}
		r = dli_read_all(f, MAX_CONFIG_BYTES, &text, &len);
		fclose(f);
		if (r == -EFBIG)
			r = too_big(err, path);
		else if (r == -ENOMEM)
			r = dli_error_set(err, -ENOMEM, NULL, "out of memory reading %s", path);
		else if (r)
			r = dli_error_set(err, r, NULL, "cannot read config '%s': %s", path,
					  strerror(-r));
		if (r)
			goto fail;
		yaml_text = text;
	} else if ((len = strnlen(yaml_text, MAX_CONFIG_BYTES + 1)) > MAX_CONFIG_BYTES) {
		r = too_big(err, cfg->path);
		goto fail;
	}
	if ((r = dli_cfg_build_tree(cfg, yaml_text, len, &cfg->root, err)))
		goto fail;
	free(text);
	text = NULL;

	struct resolver rs = {.cfg = cfg, .err = err};
	const struct dli_node *root = cfg->root;
	if (!root) {
		*out = cfg;
		return 0;
	}
	if (root->kind != DLI_NODE_MAP) {
		r = dli_cfg_fail(&rs, root,
				 "the top level must be a mapping of sections (and optionally "
				 "'extensions' and 'loggers'), got %s",
				 dli_cfg_kind_name(root));
		goto fail;
	}
	size_t n_sections = 0;
	for (size_t i = 0; i < root->n; i++)
		n_sections += strcmp(root->keys[i]->text, "extensions") &&
			      strcmp(root->keys[i]->text, "loggers") &&
			      strcmp(root->keys[i]->text, "nvtx");
	cfg->sections = dli_cfg_calloc(cfg, n_sections, sizeof *cfg->sections);
	if (!cfg->sections) {
		r = dli_error_set(err, -ENOMEM, NULL, "out of memory");
		goto fail;
	}
	for (size_t i = 0; i < root->n; i++) {
		const char *key = root->keys[i]->text;
		if (!strcmp(key, "extensions"))
			r = read_extensions(&rs, root->items[i]);
		else if (!strcmp(key, "loggers"))
			r = read_loggers(&rs, root->items[i]);
		else if (!strcmp(key, "nvtx")) {
			size_t mark = dli_cfg_path_push(&rs, "nvtx");
			if (!(r = dli_cfg_want_bool(&rs, root->items[i], &cfg->nvtx)))
				dli_cfg_path_pop(&rs, mark);
			cfg->nvtx_where = root->keys[i]->where;
		}
		else {
			struct dli_section *s = &cfg->sections[cfg->n_sections++];
			s->name = root->keys[i]->text;
			s->where = root->keys[i]->where;
			s->node = root->items[i];
		}
		if (r)
			goto fail;
	}
	*out = cfg;
	return 0;
fail:
	free(text);
	dli_config_destroy(cfg);
	return r;
}

/* ---- Sections ---- */

static int read_layers(struct resolver *rs, struct dli_section *s, const struct dli_node *n)
{
	static const char *const keys[] = {"layer_name_regex_pattern", "layer_numbers", "layer_types",
					   "exact_layer_names"};
	struct dli_selector *sel = &s->selector;
	size_t mark = dli_cfg_path_push(rs, "layers");
	if (n->kind != DLI_NODE_MAP || n->n == 0)
		return dli_cfg_fail(
		    rs, n,
		    "expected a mapping with at least one of layer_name_regex_pattern, "
		    "layer_numbers, layer_types, exact_layer_names; got %s",
		    n->kind == DLI_NODE_MAP ? "an empty mapping" : dli_cfg_kind_name(n));
	const struct dli_node *regex_key = NULL, *numeric_key = NULL;
	for (size_t i = 0; i < n->n; i++) {
		const struct dli_node *key = n->keys[i], *v = n->items[i];
		size_t m2 = dli_cfg_path_push(rs, key->text);
		const struct dli_node *const *items;
		size_t count;
		int r;
		if (!strcmp(key->text, "layer_name_regex_pattern")) {
			if (dli_cfg_want_scalar(rs, v, "a regular expression"))
				return -EINVAL;
			char msg[256];
			size_t off = 0;
			if (dli_selector_set_regex(sel, v->text, msg, sizeof msg, &off)) {
				/* Point at the offending character when the pattern is on one line. */
				struct dli_node at = *v;
				if (!strchr(v->text, '\n'))
					at.where.column += (int)off + !v->plain; /* skip a quote */
				char clip[DLI_CLIP_NAME + 4];
				return dli_cfg_fail(rs, &at,
						    "bad regular expression '%s': %s at offset %zu",
						    dli_clip_name(clip, sizeof clip, v->text), msg, off);
			}
			sel->pattern_where = v->where;
			/* as the peers' re.search: every name; probably a placeholder left empty */
			if (!v->text[0] &&
			    dli_cfg_warn(rs, v, "an empty regular expression selects every layer "
						"(as Python's re.search matches it); write '.*' to mean that"))
				return -ENOMEM;
			regex_key = key;
		} else if (!strcmp(key->text, "exact_layer_names")) {
			if ((r = dli_cfg_want_list(rs, v, "layer names", &items, &count)) ||
			    (r = dli_cfg_listed_once(rs, items, NULL, count)))
				return r;
			sel->exact = calloc(count, sizeof *sel->exact);
			if (!sel->exact)
				return -ENOMEM;
			for (size_t k = 0; k < count; k++)
				if (!(sel->exact[sel->n_exact++] = strdup(items[k]->text)))
					return -ENOMEM;
			sel->has_exact = true;
		} else if (!strcmp(key->text, "layer_types")) {
			if ((r = dli_cfg_want_list(rs, v, "layer types", &items, &count)) ||
			    (r = dli_cfg_listed_once(rs, items, NULL, count)))
				return r;
			sel->has_types = true;
			sel->types = calloc(count, sizeof *sel->types);
			if (!sel->types)
				return -ENOMEM;
			for (size_t k = 0; k < count; k++) {
				if (!items[k]->text[0])
					return dli_cfg_fail(
					    rs, items[k],
					    "an empty layer type would select every "
					    "layer; write 'all' for that");
				if (!strcmp(items[k]->text, "all"))
					sel->types_all = true;
				else if (!(sel->types[sel->n_types++] = strdup(items[k]->text)))
					return -ENOMEM;
			}
			numeric_key = key;
		} else if (!strcmp(key->text, "layer_numbers")) {
			if ((r = dli_cfg_want_list(rs, v, "layer numbers or ranges 'a-b'", &items,
						   &count)) ||
			    (r = dli_cfg_listed_once(rs, items, NULL, count)))
				return r;
			sel->has_numbers = true;
			sel->numbers = calloc(count, sizeof *sel->numbers);
			if (!sel->numbers)
				return -ENOMEM;
			for (size_t k = 0; k < count; k++) {
				/* nvdlfw_inspect lowercases a bare string (`All`), not a list's items. */
				if (!strcmp(items[k]->text, "all") ||
				    (v->kind == DLI_NODE_SCALAR && !strcasecmp(v->text, "all"))) {
					sel->numbers_all = true;
					continue;
				}
				char msg[256];
				if (dli_range_parse(items[k]->text, &sel->numbers[sel->n_numbers], msg,
						    sizeof msg))
					return dli_cfg_fail(rs, items[k], "%s", msg);
				sel->n_numbers++;
			}
			numeric_key = key;
		} else {
			dli_cfg_path_pop(rs, m2);
			char hint[128];
			dli_suggest_text(hint, sizeof hint, key->text, keys, 4);
			return dli_cfg_fail(rs, key, "unknown key '%s'%s", key->text, hint);
		}
		dli_cfg_path_pop(rs, m2);
	}
	if (regex_key && numeric_key && !sel->has_exact) {
		size_t m2 = dli_cfg_path_push(rs, numeric_key->text);
		int r = dli_cfg_warn(rs, numeric_key,
				     "has no effect: layer_name_regex_pattern alone decides "
				     "when it is present");
		dli_cfg_path_pop(rs, m2);
		if (r)
			return r;
	}
	dli_cfg_path_pop(rs, mark);
	return 0;
}

static int unknown_in_section(struct resolver *rs, const struct dli_node *key, const char *ns)
{
	size_t n;
	const char **names = dli_registry_names(rs->reg, &n);
	if (!names)
		return -ENOMEM;
	const char **cands = realloc(names, (n + 2) * sizeof *cands);
	if (!cands) {
		free(names);
		return -ENOMEM;
	}
	if (!ns) {
		cands[n++] = "enabled";
		cands[n++] = "layers";
	}
	char hint[128];
	dli_suggest_text(hint, sizeof hint, key->text, cands, n);
	free(cands);
	if (ns)
		return dli_cfg_fail(rs, key, "unknown feature '%s' in namespace '%s'%s", key->text,
				    ns, hint);
	return dli_cfg_fail(rs, key,
			    "unknown feature or namespace '%s'%s; check the config's 'extensions' "
			    "and `dlinspect plugins`",
			    key->text, hint);
}

static int read_section_body(struct resolver *rs, struct dli_section *s,
			     const struct dli_node *enabled, const struct dli_node *layers);

/* A section without `want`: said at a key that looks like a misspelling of it when there is one
 * (`layer:`), since that key is the mistake to fix, else at the section. */
static int missing_in_section(struct resolver *rs, const struct dli_node *sec,
			      const struct dli_node *at, const char *want, const char *what)
{
	const char *const cand[] = {want};
	for (size_t i = 0; i < sec->n; i++)
		if (dli_suggest(sec->keys[i]->text, cand, 1))
			return dli_cfg_fail(rs, sec->keys[i], "missing '%s' (%s); is '%s' meant to be '%s'?",
					    want, what, sec->keys[i]->text, want);
	return dli_cfg_fail(rs, at, "missing '%s' (%s)", want, what);
}

static int read_section(struct resolver *rs, struct dli_section *s)
{
	static const char *const top_keys[] = {"extensions", "loggers"};
	const struct dli_node *n = s->node;
	size_t mark = dli_cfg_path_push(rs, s->name);
	s->first_target = rs->cfg->n_targets;
	if (n->kind != DLI_NODE_MAP) {
		char hint[128];
		dli_suggest_text(hint, sizeof hint, s->name, top_keys, 2);
		struct dli_node at = {.where = s->where};
		return dli_cfg_fail(rs, &at,
				    "a section must be a mapping with 'enabled', 'layers' and "
				    "features, got %s%s",
				    dli_cfg_kind_name(n), hint);
	}
	const struct dli_node *enabled = NULL, *layers = NULL;
	for (size_t i = 0; i < n->n; i++) {
		if (!strcmp(n->keys[i]->text, "enabled"))
			enabled = n->items[i];
		else if (!strcmp(n->keys[i]->text, "layers"))
			layers = n->items[i];
	}
	struct dli_node at = {.where = s->where};
	if (!enabled)
		return missing_in_section(rs, n, &at, "enabled", "true or false");
	size_t m2 = dli_cfg_path_push(rs, "enabled");
	int r = dli_cfg_want_bool(rs, enabled, &s->enabled);
	dli_cfg_path_pop(rs, m2);
	if (r)
		return r;
	if (!layers && s->enabled)
		return missing_in_section(rs, n, &at, "layers",
					  "which layers this section applies to, e.g. 'layers: "
					  "{layer_name_regex_pattern: .*fc1}'");
	r = read_section_body(rs, s, enabled, layers);
	/* Still checked, so that a typo shows before someone enables the section, but as a warning:
	 * nvdlfw_inspect skips a disabled section unread, and TransformerEngine's docs park examples
	 * in one that would not load enabled. */
	if (r == -EINVAL && !s->enabled) {
		s->n_targets = 0;
		dli_cfg_path_pop(rs, mark);
		rs->base_ns = false;
		return dli_cfg_demote(rs, "the section is disabled");
	}
	if (!r)
		dli_cfg_path_pop(rs, mark);
	return r;
}

/* A section's layers and features, after its `enabled`. */
static int read_section_body(struct resolver *rs, struct dli_section *s,
			     const struct dli_node *enabled, const struct dli_node *layers)
{
	const struct dli_node *n = s->node;
	int r;
	if (layers && (r = read_layers(rs, s, layers)))
		return r;
	for (size_t i = 0; i < n->n; i++) {
		const struct dli_node *key = n->keys[i], *v = n->items[i];
		if (v == enabled || v == layers)
			continue;
		if (dli_registry_has_namespace(rs->reg, key->text)) {
			size_t m3 = dli_cfg_path_push(rs, key->text);
			if (v->kind != DLI_NODE_MAP)
				return dli_cfg_fail(rs, v, "expected a mapping of features, got %s",
						    dli_cfg_kind_name(v));
			for (size_t k = 0; k < v->n; k++) {
				const char *name = v->keys[k]->text;
				const struct dli_feature_entry *fe =
					dli_registry_feature_in(rs->reg, key->text, name);
				if (!fe) {
					const struct dli_feature_entry *other =
					    dli_cfg_feature_lookup(rs, name);
					if (other)
						return dli_cfg_fail(rs, v->keys[k],
								    "'%s' is not in namespace "
								    "'%s' (it is in '%s')",
								    name, key->text,
								    dli_feature_entry_ns(other));
					return unknown_in_section(rs, v->keys[k], key->text);
				}
				if ((r = dli_cfg_read_feature(rs, s, fe, v->keys[k], v->items[k])))
					return r;
			}
			dli_cfg_path_pop(rs, m3);
			continue;
		}
		const struct dli_feature_entry *other;
		const struct dli_feature_entry *fe = dli_cfg_direct_feature(rs, key->text, &other);
		if (other)
			return dli_cfg_fail(rs, key,
					    "%s is a generic feature of two namespaces, '%s' (%s) and "
					    "'%s' (%s): put the block in the section's '%s:' or '%s:' "
					    "block to say which",
					    key->text, dli_feature_entry_ns(fe), fe->path,
					    dli_feature_entry_ns(other), other->path,
					    dli_feature_entry_ns(fe), dli_feature_entry_ns(other));
		if (!fe && (fe = dli_cfg_feature_lookup(rs, key->text)))
			return dli_cfg_fail(rs, key, "%s belongs in the section's '%s:' block",
					    fe->desc->name, dli_feature_entry_ns(fe));
		if (!fe)
			return unknown_in_section(rs, key, NULL);
		if ((r = dli_cfg_read_feature(rs, s, fe, key, v)))
			return r;
	}
	s->n_targets = rs->cfg->n_targets - s->first_target;
	return 0;
}

/* nvdlfw_inspect refuses a config without an enabled section ("Could not load config from input").
 * dlinspect loads it, as a way to turn every feature off, but says that it does nothing. */
static int warn_if_enables_nothing(struct resolver *rs)
{
	struct dli_config *cfg = rs->cfg;
	if (cfg->n_targets)
		return 0;
	size_t on = 0;
	for (size_t i = 0; i < cfg->n_sections; i++)
		on += cfg->sections[i].enabled;
	struct dli_node at = {.where = {cfg->path, 1, 1}};
	if (cfg->n_sections)
		at.where = cfg->sections[0].where;
	else if (cfg->root)
		at.where = cfg->root->where;
	return dli_cfg_warn(rs, &at, "the config enables nothing: %s",
			    !cfg->n_sections ? "it has no section (nvdlfw_inspect refuses to load it)"
			    : !on ? "every section is disabled (nvdlfw_inspect refuses to load it)"
				  : "no enabled section has an enabled feature block");
}

int dli_config_resolve(struct dli_config *config, const struct dli_registry *registry,
		       struct dli_error *err)
{
	struct resolver rs = {.cfg = config, .reg = registry, .err = err};
	config->n_targets = 0;
	free(config->targets);
	config->targets = calloc(TARGETS_MIN, sizeof *config->targets);
	if (!config->targets)
		return dli_error_set(err, -ENOMEM, NULL, "out of memory");
	for (size_t i = 0; i < config->n_sections; i++) {
		int r = read_section(&rs, &config->sections[i]);
		if (r)
			return r == -ENOMEM && err && !err->message[0]
				       ? dli_error_set(err, r, NULL, "out of memory")
				       : r;
	}
	if (warn_if_enables_nothing(&rs))
		return dli_error_set(err, -ENOMEM, NULL, "out of memory");
	for (size_t i = 0; i < config->n_loggers; i++) {
		struct dli_logger_config *l = &config->loggers[i];
		l->logger = dli_registry_logger(registry, l->name);
		if (!l->logger) {
			size_t n;
			const char **names = dli_registry_names(registry, &n);
			char hint[128] = "";
			if (names)
				dli_suggest_text(hint, sizeof hint, l->name, names, n);
			free(names);
			return dli_error_set(err, -ENOENT, &l->where,
					     "loggers.%s: no loaded module provides the logger '%s'%s; "
					     "add its module to 'extensions' or check `dlinspect plugins`",
					     l->name, l->name, hint);
		}
		char owner[160]; /* messages name the key path, like a section's */
		snprintf(owner, sizeof owner, "loggers.%s", l->name);
		int r = dli_config_params(config, l->node, l->logger->desc->params,
					  l->logger->desc->n_params, owner, &l->params, err);
		if (r)
			return r;
	}
	return 0;
}

void dli_config_destroy(struct dli_config *config)
{
	if (!config)
		return;
	for (size_t i = 0; i < config->n_sections; i++)
		dli_selector_finish(&config->sections[i].selector);
	for (size_t i = 0; i < config->n_nodes; i++) {
		free(config->nodes[i]->text);
		free(config->nodes[i]->items);
		free(config->nodes[i]->keys);
		free(config->nodes[i]);
	}
	free(config->nodes);
	free(config->warnings);
	free(config->warnings_loud);
	free(config->targets);
	for (size_t i = 0; i < config->n_allocs; i++)
		free(config->allocs[i]);
	free(config->allocs);
	dli_strset_finish(&config->defaults);
	free(config);
}
