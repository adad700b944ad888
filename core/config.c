/* Config reading: YAML (libyaml, used nowhere else) into a tree with positions, then the sections,
 * feature blocks and logger parameters checked against the loaded modules' schemas. */
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <yaml.h>

#include "config-private.h"
#include "registry-private.h"
#include "strset-private.h"

/* Limits on what a config may be (docs/config.md, "Limits"): far above any real config (the
 * largest shipped one is a few KB and a few hundred nodes), low enough that a broken or hostile one
 * fails fast with a message naming the limit instead of using gigabytes. */
#define MAX_DEPTH 64
#define MAX_CONFIG_BYTES (16u << 20)
#define MAX_NODES 1000000

static const char *const gemm_names[DLI_GEMM_COUNT] = {"fprop", "dgrad", "wgrad"};
static const char *const standard_tensors[DLI_TENSOR_STANDARD_COUNT] = {
	"activation", "gradient", "weight", "output", "wgrad", "dgrad",
};
static const char *const schedule_keys[] = {"freq", "start_step", "end_step", "start_end_list"};
#define N_SCHEDULE_KEYS (sizeof schedule_keys / sizeof schedule_keys[0])

/* ---- Memory owned by the config ---- */

static void *cfg_track(struct dli_config *cfg, void *p)
{
	if (!p)
		return NULL;
	if (cfg->n_allocs == cfg->cap_allocs) {
		size_t cap = cfg->cap_allocs ? 2 * cfg->cap_allocs : 64;
		void **a = realloc(cfg->allocs, cap * sizeof *a);
		if (!a) {
			free(p);
			return NULL;
		}
		cfg->allocs = a;
		cfg->cap_allocs = cap;
	}
	cfg->allocs[cfg->n_allocs++] = p;
	return p;
}

static void *cfg_calloc(struct dli_config *cfg, size_t n, size_t size)
{
	return cfg_track(cfg, calloc(n ? n : 1, size));
}

static char *cfg_strdup(struct dli_config *cfg, const char *s)
{
	return cfg_track(cfg, strdup(s));
}

static char *cfg_printf(struct dli_config *cfg, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static char *cfg_printf(struct dli_config *cfg, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	char *s = NULL;
	int n = vasprintf(&s, fmt, ap);
	va_end(ap);
	return n < 0 ? NULL : cfg_track(cfg, s);
}

static char *where_text(struct dli_config *cfg, const struct dli_where *w)
{
	return cfg_printf(cfg, "%s:%d:%d", w->file, w->line, w->column);
}

/* ---- YAML to tree ---- */

struct builder {
	struct dli_config *cfg;
	yaml_parser_t parser;
	struct dli_error *err;
	struct {
		char *name;
		struct dli_node *node;
	} *anchors;
	size_t n_anchors, cap_anchors;
	struct dli_strset anchor_index; /* name -> index in anchors of its latest definition */
};

static struct dli_node *node_new(struct builder *b, enum dli_node_kind kind, yaml_mark_t mark)
{
	struct dli_config *cfg = b->cfg;
	if (cfg->n_nodes == cfg->cap_nodes) {
		size_t cap = cfg->cap_nodes ? 2 * cfg->cap_nodes : 64;
		struct dli_node **a = realloc(cfg->nodes, cap * sizeof *a);
		if (!a)
			return NULL;
		cfg->nodes = a;
		cfg->cap_nodes = cap;
	}
	struct dli_node *n = calloc(1, sizeof *n);
	if (!n)
		return NULL;
	cfg->nodes[cfg->n_nodes++] = n;
	n->kind = kind;
	n->where.file = cfg->path;
	n->where.line = (int)mark.line + 1;
	n->where.column = (int)mark.column + 1;
	return n;
}

static int node_append(struct dli_node *parent, struct dli_node *key, struct dli_node *item)
{
	if (parent->n == parent->cap) {
		/* Doubling: a list of 100k items is read in linear time. */
		size_t cap = parent->cap ? 2 * parent->cap : 4;
		struct dli_node **items = realloc(parent->items, cap * sizeof *items);
		if (!items)
			return -ENOMEM;
		parent->items = items;
		if (parent->kind == DLI_NODE_MAP) {
			struct dli_node **keys = realloc(parent->keys, cap * sizeof *keys);
			if (!keys)
				return -ENOMEM;
			parent->keys = keys;
		}
		parent->cap = cap;
	}
	if (parent->kind == DLI_NODE_MAP)
		parent->keys[parent->n] = key;
	parent->items[parent->n++] = item;
	return 0;
}

static int parser_error(struct builder *b)
{
	yaml_parser_t *p = &b->parser;
	struct dli_where w = {b->cfg->path, (int)p->problem_mark.line + 1,
			      (int)p->problem_mark.column + 1};
	if (p->error == YAML_MEMORY_ERROR)
		return dli_error_set(b->err, -ENOMEM, NULL, "out of memory reading %s", b->cfg->path);
	/* The context's mark says where the construct began: often far from where libyaml gave up. */
	if (p->context)
		return dli_error_set(b->err, -EINVAL, &w, "invalid YAML: %s %s started at line %d, "
							  "column %d",
				     p->problem, p->context, (int)p->context_mark.line + 1,
				     (int)p->context_mark.column + 1);
	return dli_error_set(b->err, -EINVAL, &w, "invalid YAML: %s",
			     p->problem ? p->problem : "unreadable input");
}

static int next_event(struct builder *b, yaml_event_t *ev)
{
	if (!yaml_parser_parse(&b->parser, ev))
		return parser_error(b);
	return 0;
}

static int remember_anchor(struct builder *b, const yaml_char_t *anchor, struct dli_node *node)
{
	if (!anchor)
		return 0;
	if (b->n_anchors == b->cap_anchors) {
		size_t cap = b->cap_anchors ? 2 * b->cap_anchors : 16;
		void *a = realloc(b->anchors, cap * sizeof *b->anchors);
		if (!a)
			return -ENOMEM;
		b->anchors = a;
		b->cap_anchors = cap;
	}
	char *name = strdup((const char *)anchor);
	if (!name)
		return -ENOMEM;
	b->anchors[b->n_anchors].name = name;
	b->anchors[b->n_anchors].node = node;
	/* A name defined again refers to its latest definition from here on, as in PyYAML. */
	bool added;
	size_t *slot = dli_strset_slot(&b->anchor_index, name, &added);
	if (!slot) {
		free(name);
		return -ENOMEM;
	}
	*slot = b->n_anchors++;
	return 0;
}

static bool is_null(const struct dli_node *n)
{
	return !n || (n->kind == DLI_NODE_SCALAR && n->plain &&
		      (!n->text[0] || !strcmp(n->text, "~") || !strcasecmp(n->text, "null")));
}

static int build(struct builder *b, yaml_event_t *ev, int depth, struct dli_node **out);
static int build_items(struct builder *b, struct dli_node *node, int depth, struct dli_strset *keys);

/* Applies YAML merge keys (`<<: *base` or `<<: [*a, *b]`): the merged maps' pairs whose keys the
 * mapping does not give itself, first source first, as PyYAML does. */
static int apply_merges(struct builder *b, struct dli_node *node, struct dli_strset *keys,
			struct dli_node **merges, size_t n)
{
	for (size_t m = 0; m < n; m++) {
		const struct dli_node *src = merges[m];
		size_t n_src = src->kind == DLI_NODE_SEQ ? src->n : 1;
		for (size_t s = 0; s < n_src; s++) {
			const struct dli_node *map = src->kind == DLI_NODE_SEQ ? src->items[s] : src;
			if (map->kind != DLI_NODE_MAP)
				return dli_error_set(b->err, -EINVAL, &map->where,
						     "'<<' merges mappings: expected a mapping or a "
						     "list of mappings");
			for (size_t i = 0; i < map->n; i++) {
				bool added;
				if (!dli_strset_slot(keys, map->keys[i]->text, &added))
					return -ENOMEM;
				if (added && node_append(node, map->keys[i], map->items[i]))
					return -ENOMEM;
			}
		}
	}
	return 0;
}

/* Reads a list's items or a mapping's pairs. A mapping's keys go into a set as they come (key ->
 * its index), so that a duplicate is found in linear time however many keys there are. */
static int build_children(struct builder *b, struct dli_node *node, int depth)
{
	struct dli_strset keys = {0};
	int r = build_items(b, node, depth, &keys);
	dli_strset_finish(&keys);
	return r;
}

static int build_items(struct builder *b, struct dli_node *node, int depth, struct dli_strset *keys)
{
	struct dli_node *merges[8];
	size_t n_merges = 0;
	for (;;) {
		yaml_event_t ev;
		int r = next_event(b, &ev);
		if (r)
			return r;
		if (ev.type == YAML_SEQUENCE_END_EVENT || ev.type == YAML_MAPPING_END_EVENT) {
			yaml_event_delete(&ev);
			return apply_merges(b, node, keys, merges, n_merges);
		}
		struct dli_node *key = NULL, *value = NULL;
		r = build(b, &ev, depth + 1, node->kind == DLI_NODE_MAP ? &key : &value);
		yaml_event_delete(&ev);
		if (r)
			return r;
		if (node->kind == DLI_NODE_MAP) {
			if (key->kind != DLI_NODE_SCALAR)
				return dli_error_set(b->err, -EINVAL, &key->where,
						     "mapping keys must be plain names");
			bool merge = key->plain && !strcmp(key->text, "<<"), added = true;
			size_t *first = merge ? NULL : dli_strset_slot(keys, key->text, &added);
			if (!merge && !first)
				return -ENOMEM;
			if (!added)
				return dli_error_set(b->err, -EINVAL, &key->where,
						     "duplicate key '%s' (first given at line %d, column %d)",
						     key->text, node->keys[*first]->where.line,
						     node->keys[*first]->where.column);
			if (first)
				*first = node->n;
			r = next_event(b, &ev);
			if (r)
				return r;
			r = build(b, &ev, depth + 1, &value);
			yaml_event_delete(&ev);
			if (r)
				return r;
			if (merge) {
				if (n_merges == sizeof merges / sizeof merges[0])
					return dli_error_set(b->err, -EINVAL, &key->where,
							     "more than 8 '<<' merge keys in one mapping");
				merges[n_merges++] = value;
				continue;
			}
		}
		if (node_append(node, key, value))
			return -ENOMEM;
	}
}

static int build(struct builder *b, yaml_event_t *ev, int depth, struct dli_node **out)
{
	if (depth > MAX_DEPTH) {
		struct dli_where w = {b->cfg->path, (int)ev->start_mark.line + 1,
				      (int)ev->start_mark.column + 1};
		return dli_error_set(b->err, -EINVAL, &w, "nesting deeper than %d levels", MAX_DEPTH);
	}
	if (ev->type != YAML_ALIAS_EVENT && b->cfg->n_nodes >= MAX_NODES) {
		struct dli_where w = {b->cfg->path, (int)ev->start_mark.line + 1,
				      (int)ev->start_mark.column + 1};
		return dli_error_set(b->err, -EINVAL, &w,
				     "more than %d values, lists and mappings: a config is limited to "
				     "%d YAML nodes",
				     MAX_NODES, MAX_NODES);
	}
	struct dli_node *n;
	switch (ev->type) {
	case YAML_SCALAR_EVENT:
		n = node_new(b, DLI_NODE_SCALAR, ev->start_mark);
		if (!n || !(n->text = strdup((const char *)ev->data.scalar.value)))
			return -ENOMEM;
		n->plain = ev->data.scalar.style == YAML_PLAIN_SCALAR_STYLE;
		*out = n;
		return remember_anchor(b, ev->data.scalar.anchor, n);
	case YAML_SEQUENCE_START_EVENT:
	case YAML_MAPPING_START_EVENT:
		n = node_new(b, ev->type == YAML_SEQUENCE_START_EVENT ? DLI_NODE_SEQ : DLI_NODE_MAP,
			     ev->start_mark);
		if (!n)
			return -ENOMEM;
		*out = n;
		if (remember_anchor(b, ev->type == YAML_SEQUENCE_START_EVENT
					       ? ev->data.sequence_start.anchor
					       : ev->data.mapping_start.anchor,
				    n))
			return -ENOMEM;
		return build_children(b, n, depth);
	case YAML_ALIAS_EVENT: {
		const size_t *i = dli_strset_find(&b->anchor_index, (const char *)ev->data.alias.anchor);
		if (i) {
			*out = b->anchors[*i].node;
			return 0;
		}
		struct dli_where w = {b->cfg->path, (int)ev->start_mark.line + 1,
				      (int)ev->start_mark.column + 1};
		return dli_error_set(b->err, -EINVAL, &w, "unknown alias '*%s'",
				     (const char *)ev->data.alias.anchor);
	}
	default: {
		struct dli_where w = {b->cfg->path, (int)ev->start_mark.line + 1,
				      (int)ev->start_mark.column + 1};
		return dli_error_set(b->err, -EINVAL, &w, "unexpected YAML event");
	}
	}
}

/* Reads one YAML document from `text` (len bytes) into *root (NULL for an empty document). */
static int build_tree(struct dli_config *cfg, const char *text, size_t len, struct dli_node **root,
		      struct dli_error *err)
{
	struct builder b = {.cfg = cfg, .err = err};
	if (!yaml_parser_initialize(&b.parser))
		return dli_error_set(err, -ENOMEM, NULL, "out of memory");
	yaml_parser_set_input_string(&b.parser, (const unsigned char *)text, len);
	*root = NULL;
	int r = 0, docs = 0;
	for (;;) {
		yaml_event_t ev;
		if ((r = next_event(&b, &ev)))
			break;
		yaml_event_type_t type = ev.type;
		if (type == YAML_STREAM_END_EVENT) {
			yaml_event_delete(&ev);
			break;
		}
		if (type == YAML_DOCUMENT_START_EVENT && ++docs > 1) {
			struct dli_where w = {cfg->path, (int)ev.start_mark.line + 1,
					      (int)ev.start_mark.column + 1};
			r = dli_error_set(err, -EINVAL, &w,
					  "a second YAML document; a config is one document");
			yaml_event_delete(&ev);
			break;
		}
		if (type == YAML_SCALAR_EVENT || type == YAML_SEQUENCE_START_EVENT ||
		    type == YAML_MAPPING_START_EVENT || type == YAML_ALIAS_EVENT)
			r = build(&b, &ev, 0, root);
		yaml_event_delete(&ev);
		if (r)
			break;
	}
	if (r == -ENOMEM && err && !err->message[0])
		dli_error_set(err, r, NULL, "out of memory reading %s", cfg->path);
	for (size_t i = 0; i < b.n_anchors; i++)
		free(b.anchors[i].name);
	free(b.anchors);
	dli_strset_finish(&b.anchor_index);
	yaml_parser_delete(&b.parser);
	if (!r && *root && is_null(*root))
		*root = NULL;
	return r;
}

/* ---- Messages with a key path ---- */

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

static size_t path_push(struct resolver *rs, const char *name)
{
	size_t mark = strlen(rs->path);
	snprintf(rs->path + mark, sizeof rs->path - mark, "%s%s", mark ? "." : "", name);
	return mark;
}

static void path_pop(struct resolver *rs, size_t mark)
{
	rs->path[mark] = '\0';
}

static int fail(struct resolver *rs, const struct dli_node *at, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
static int fail(struct resolver *rs, const struct dli_node *at, const char *fmt, ...)
{
	char text[768];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(text, sizeof text, fmt, ap);
	va_end(ap);
	if (rs->path[0])
		return dli_error_set(rs->err, -EINVAL, &at->where, "%s: %s", rs->path, text);
	return dli_error_set(rs->err, -EINVAL, &at->where, "%s", text);
}

static int warn(struct resolver *rs, const struct dli_node *at, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
static int warn(struct resolver *rs, const struct dli_node *at, const char *fmt, ...)
{
	struct dli_config *cfg = rs->cfg;
	char text[768];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(text, sizeof text, fmt, ap);
	va_end(ap);
	char **w = realloc(cfg->warnings, (cfg->n_warnings + 1) * sizeof *w);
	if (!w)
		return -ENOMEM;
	cfg->warnings = w;
	bool *loud = realloc(cfg->warnings_loud, (cfg->n_warnings + 1) * sizeof *loud);
	if (!loud)
		return -ENOMEM;
	cfg->warnings_loud = loud;
	loud[cfg->n_warnings] = false;
	w[cfg->n_warnings] = cfg_printf(cfg, "%s:%d:%d: warning: %s%s%s", at->where.file,
					at->where.line, at->where.column, rs->path,
					rs->path[0] ? ": " : "", text);
	if (!w[cfg->n_warnings])
		return -ENOMEM;
	cfg->n_warnings++;
	return 0;
}

static const char *kind_name(const struct dli_node *n)
{
	if (is_null(n))
		return "nothing";
	return n->kind == DLI_NODE_MAP ? "a mapping" : n->kind == DLI_NODE_SEQ ? "a list" : "a scalar";
}

/* ---- Scalars ---- */

static int want_scalar(struct resolver *rs, const struct dli_node *n, const char *what)
{
	if (n->kind != DLI_NODE_SCALAR || is_null(n))
		return fail(rs, n, "expected %s, got %s", what, kind_name(n));
	return 0;
}

static int want_bool(struct resolver *rs, const struct dli_node *n, bool *out)
{
	static const char *const yes[] = {"true", "yes", "on"}, *const no[] = {"false", "no", "off"};
	if (n->kind == DLI_NODE_SCALAR && n->plain) {
		for (size_t i = 0; i < 3; i++) {
			if (!strcasecmp(n->text, yes[i]) || !strcasecmp(n->text, no[i])) {
				*out = !strcasecmp(n->text, yes[i]);
				return 0;
			}
		}
	}
	if (n->kind == DLI_NODE_SCALAR && !is_null(n))
		return fail(rs, n, "expected true or false, got '%s'", n->text);
	return fail(rs, n, "expected true or false, got %s", kind_name(n));
}

/* A YAML 1.1 integer as PyYAML (the peers' loader) reads one: an optional sign, then decimal,
 * 0x hex, 0b binary or 0-prefixed octal digits, '_' allowed between digits ("1_000"). Returns
 * false for anything else, or when it does not fit in 64 bits. */
static bool yaml11_int(const char *t, int64_t *out)
{
	bool neg = *t == '-';
	if (*t == '-' || *t == '+')
		t++;
	int base = 10;
	if (t[0] == '0' && (t[1] == 'x' || t[1] == 'X'))
		base = 16, t += 2;
	else if (t[0] == '0' && (t[1] == 'b' || t[1] == 'B'))
		base = 2, t += 2;
	else if (t[0] == '0' && t[1])
		base = 8, t += 1;
	if (!*t || *t == '_')
		return false;
	uint64_t v = 0;
	for (; *t; t++) {
		int d;
		if (*t == '_')
			continue;
		if (*t >= '0' && *t <= '9')
			d = *t - '0';
		else if (*t >= 'a' && *t <= 'f')
			d = *t - 'a' + 10;
		else if (*t >= 'A' && *t <= 'F')
			d = *t - 'A' + 10;
		else
			return false;
		if (d >= base || v > (UINT64_MAX - (uint64_t)d) / (uint64_t)base)
			return false;
		v = v * (uint64_t)base + (uint64_t)d;
	}
	if (v > (uint64_t)INT64_MAX + neg)
		return false;
	*out = neg ? (int64_t)(0 - v) : (int64_t)v;
	return true;
}

/* An integer, in any YAML 1.1 form PyYAML reads (see yaml11_int), or a float with no fraction
 * ("1e3", "100.0"): configs write steps that way, and the peers turn them into ints. */
static int want_int(struct resolver *rs, const struct dli_node *n, int64_t *out)
{
	if (want_scalar(rs, n, "an integer"))
		return -EINVAL;
	if (n->plain && yaml11_int(n->text, out))
		return 0;
	char *end;
	errno = 0;
	double d = n->plain ? strtod(n->text, &end) : NAN;
	bool number = n->plain && end != n->text && !*end && !errno && isfinite(d) &&
		      !strpbrk(n->text, "xXnN"); /* no hex floats, inf or nan spellings */
	if (number && d == floor(d) && fabs(d) < 0x1p63) {
		*out = (int64_t)d;
		return 0;
	}
	if (number && d == floor(d))
		return fail(rs, n, "expected an integer, got '%s' (out of the 64-bit range)", n->text);
	if (number)
		return fail(rs, n, "expected an integer, got '%s' (a number with a fraction)",
			    n->text);
	return fail(rs, n, "expected an integer, got '%s'", n->text);
}

static int want_float(struct resolver *rs, const struct dli_node *n, double *out)
{
	if (want_scalar(rs, n, "a number"))
		return -EINVAL;
	const char *t = n->text;
	const char *u = t[0] == '-' || t[0] == '+' ? t + 1 : t;
	if (n->plain && (!strcasecmp(u, ".inf") || !strcasecmp(t, ".nan"))) {
		*out = !strcasecmp(t, ".nan") ? NAN : t[0] == '-' ? -INFINITY : INFINITY;
		return 0;
	}
	char *end;
	errno = 0;
	double v = strtod(t, &end);
	/* strtod also takes "inf", "nan" and hex floats: YAML spells those .inf/.nan, so refuse. */
	if (!n->plain || end == t || *end || errno == ERANGE || isnan(v) || isinf(v))
		return fail(rs, n, "expected a number, got '%s'", t);
	*out = v;
	return 0;
}

static int listed_twice(struct resolver *rs, const struct dli_node *at, const char *text,
			const struct dli_node *first)
{
	return fail(rs, at, "'%s' is listed twice (first at line %d, column %d)", text,
		    first->where.line, first->where.column);
}

/* A list of scalars; a bare scalar is a one-item list. Items are the nodes' texts. */
static int want_list(struct resolver *rs, const struct dli_node *n, const char *what,
		     const struct dli_node *const **items, size_t *count)
{
	if (n->kind == DLI_NODE_SCALAR && !is_null(n)) {
		struct dli_node **one = cfg_calloc(rs->cfg, 1, sizeof *one);
		if (!one)
			return -ENOMEM;
		one[0] = (struct dli_node *)n;
		*items = (const struct dli_node *const *)one;
		*count = 1;
		return 0;
	}
	if (n->kind != DLI_NODE_SEQ)
		return fail(rs, n, "expected a list of %s, got %s", what, kind_name(n));
	if (n->n == 0)
		return fail(rs, n, "expected a list of %s, got an empty list", what);
	for (size_t i = 0; i < n->n; i++)
		if (want_scalar(rs, n->items[i], what))
			return -EINVAL;
	*items = (const struct dli_node *const *)n->items;
	*count = n->n;
	return 0;
}

/* One rule for every list of names (docs/config.md, "Lists"): a name given twice is an error at the
 * second, naming the first. `texts` (NULL: the items' own) are the names as compared, e.g. a
 * statistic in the schema's spelling. Linear in the list's length. */
static int listed_once(struct resolver *rs, const struct dli_node *const *items,
		       const char *const *texts, size_t count)
{
	if (count < 2)
		return 0;
	struct dli_strset seen = {0};
	int r = 0;
	for (size_t i = 0; i < count && !r; i++) {
		const char *text = texts ? texts[i] : items[i]->text;
		bool added;
		size_t *first = dli_strset_slot(&seen, text, &added);
		if (!first)
			r = -ENOMEM;
		else if (added)
			*first = i;
		else
			r = listed_twice(rs, items[i], text, items[*first]);
	}
	dli_strset_finish(&seen);
	return r;
}

static int want_choice(struct resolver *rs, const struct dli_node *n, const char *const *choices,
		       size_t n_choices, const char *what)
{
	for (size_t i = 0; i < n_choices; i++)
		if (!strcmp(n->text, choices[i]))
			return (int)i;
	for (size_t i = 0; rs->base_ns && i < n_choices; i++)
		if (!strcasecmp(n->text, choices[i]))
			return (int)i;
	/* A long list (LogFp8TensorStats' recipe-prefixed names) is not cut silently: the names that
	 * fit, then how many there are and where to read them all. */
	char hint[128], list[512] = "";
	dli_suggest_text(hint, sizeof hint, n->text, choices, n_choices);
	size_t off = 0, shown = 0;
	for (; shown < n_choices; shown++) {
		size_t len = strlen(choices[shown]) + (shown ? 2 : 0);
		if (off + len > 360)
			break;
		off += (size_t)snprintf(list + off, sizeof list - off, "%s%s", shown ? ", " : "",
					choices[shown]);
	}
	if (shown < n_choices)
		snprintf(list + off, sizeof list - off,
			 ", ... (%zu in all; `dlinspect plugins --explain` lists every one)", n_choices);
	fail(rs, n, "unknown %s '%s'%s; expected one of: %s", what, n->text, hint, list);
	return -1;
}

static size_t count_choices(const char *const *choices)
{
	size_t n = 0;
	while (choices && choices[n])
		n++;
	return n;
}

/* ---- Parameter values ---- */

static int parse_value(struct resolver *rs, const struct dli_param_desc *d, const struct dli_node *n,
		       struct dli_value *v)
{
	struct dli_config *cfg = rs->cfg;
	v->type = d->type;
	v->where = where_text(cfg, &n->where);
	if (!v->where)
		return -ENOMEM;
	size_t nc = count_choices(d->choices);
	switch (d->type) {
	case DLI_PARAM_BOOL:
		return want_bool(rs, n, &v->u.b);
	case DLI_PARAM_INT:
	case DLI_PARAM_FLOAT: {
		/* The schema's range, and never NaN: the same check in check and run (registry.c). */
		char why[256];
		int r = d->type == DLI_PARAM_INT ? want_int(rs, n, &v->u.i) : want_float(rs, n, &v->u.f);
		if (r == 0 && !dli_param_number_ok(d, d->type == DLI_PARAM_INT ? (double)v->u.i : v->u.f,
						   n->text, why, sizeof why))
			return fail(rs, n, "%s", why);
		return r;
	}
	case DLI_PARAM_STRING:
		if (want_scalar(rs, n, "a string"))
			return -EINVAL;
		int cs = nc ? want_choice(rs, n, d->choices, nc, d->key) : 0;
		if (cs < 0)
			return -EINVAL;
		v->u.s = nc ? d->choices[cs] : n->text; /* a choice in the schema's spelling */
		return 0;
	case DLI_PARAM_STRING_LIST: {
		const struct dli_node *const *items;
		size_t count;
		int r = want_list(rs, n, "strings", &items, &count);
		if (r)
			return r;
		const char **s = cfg_calloc(cfg, count + 1, sizeof *s);
		if (!s)
			return -ENOMEM;
		for (size_t i = 0; i < count; i++) {
			int ci = nc ? want_choice(rs, items[i], d->choices, nc, d->key) : 0;
			if (ci < 0)
				return -EINVAL;
			s[i] = nc ? d->choices[ci] : items[i]->text;
		}
		if ((r = listed_once(rs, items, s, count)))
			return r;
		v->u.list.items = s;
		v->u.list.n = count;
		return 0;
	}
	case DLI_PARAM_INT_PAIRS: {
		if (n->kind != DLI_NODE_SEQ || n->n == 0)
			return fail(rs, n, "expected a list of [start, end] pairs, got %s", kind_name(n));
		struct dli_int_pair *p = cfg_calloc(cfg, n->n, sizeof *p);
		if (!p)
			return -ENOMEM;
		for (size_t i = 0; i < n->n; i++) {
			const struct dli_node *pair = n->items[i];
			if (pair->kind != DLI_NODE_SEQ || pair->n != 2)
				return fail(rs, pair, "expected a [start, end] pair, got %s",
					    pair->kind == DLI_NODE_SEQ ? "a list of another length"
								       : kind_name(pair));
			if (want_int(rs, pair->items[0], &p[i].first) ||
			    want_int(rs, pair->items[1], &p[i].second))
				return -EINVAL;
		}
		v->u.pairs.items = p;
		v->u.pairs.n = n->n;
		return 0;
	}
	}
	return fail(rs, n, "unsupported parameter type");
}

/* Fills the values nobody set from the schema's defaults (a module's own YAML text). */
static int fill_defaults(struct resolver *rs, const struct dli_param_desc *schema, size_t n,
			 struct dli_value *values, const char *owner, const struct dli_node *block)
{
	for (size_t i = 0; i < n; i++) {
		if (values[i].set)
			continue;
		if (schema[i].required)
			return fail(rs, block, "%s needs '%s' (%s)", owner, schema[i].key,
				    schema[i].doc ? schema[i].doc : "no default");
		values[i].type = schema[i].type;
		if (!schema[i].default_value)
			continue;
		struct dli_node *root;
		struct dli_error inner = {0};
		struct dli_config *cfg = rs->cfg;
		const char *saved_path = cfg->path;
		char name[160];
		snprintf(name, sizeof name, "<default of %s.%s>", owner, schema[i].key);
		cfg->path = cfg_strdup(cfg, name);
		int r = cfg->path ? build_tree(cfg, schema[i].default_value,
					       strlen(schema[i].default_value), &root, &inner)
				  : -ENOMEM;
		cfg->path = (char *)saved_path;
		if (r || !root)
			return dli_error_set(rs->err, r ? r : -EINVAL, NULL,
					     "%s: the module's default for '%s' (\"%s\") is not valid YAML",
					     owner, schema[i].key, schema[i].default_value);
		struct resolver inner_rs = {.cfg = cfg, .reg = rs->reg, .err = &inner};
		if (parse_value(&inner_rs, &schema[i], root, &values[i]))
			return dli_error_set(rs->err, -EINVAL, NULL,
					     "%s: the module's default for '%s' is invalid: %s", owner,
					     schema[i].key, inner.message);
		values[i].set = false;
	}
	return 0;
}

/* Index of `key` in the schema (by key or alias), or -1. */
static int schema_find(const struct dli_param_desc *schema, size_t n, const char *key)
{
	for (size_t i = 0; i < n; i++)
		if (!strcmp(schema[i].key, key) || (schema[i].alias && !strcmp(schema[i].alias, key)))
			return (int)i;
	return -1;
}

/* Sets values[idx] from `node` under `key`; an entry already set by the same block is a duplicate
 * (key and alias both given), one inherited from an outer block is overridden. */
static int set_param(struct resolver *rs, const struct dli_param_desc *schema, int idx,
		     const struct dli_node *key, const struct dli_node *node, struct dli_value *values,
		     const bool *set_here)
{
	if (set_here && set_here[idx])
		return fail(rs, key, "'%s' is given twice (as '%s' and as '%s')", schema[idx].key,
			    schema[idx].key, schema[idx].alias ? schema[idx].alias : schema[idx].key);
	size_t mark = path_push(rs, key->text);
	int r = parse_value(rs, &schema[idx], node, &values[idx]);
	path_pop(rs, mark);
	if (r)
		return r;
	values[idx].set = true;
	return 0;
}

int dli_config_params(struct dli_config *config, const struct dli_node *node,
		      const struct dli_param_desc *schema, size_t n_schema, const char *owner,
		      struct dli_value **out, struct dli_error *err)
{
	struct resolver rs = {.cfg = config, .err = err};
	path_push(&rs, owner);
	struct dli_value *values = cfg_calloc(config, n_schema, sizeof *values);
	bool *set_here = cfg_calloc(config, n_schema + 1, sizeof *set_here);
	if (!values || !set_here)
		return dli_error_set(err, -ENOMEM, NULL, "out of memory");
	if (node && !is_null(node)) {
		if (node->kind != DLI_NODE_MAP)
			return fail(&rs, node, "expected a mapping of parameters, got %s", kind_name(node));
		for (size_t i = 0; i < node->n; i++) {
			const struct dli_node *key = node->keys[i];
			int idx = schema_find(schema, n_schema, key->text);
			if (idx < 0) {
				const char **keys = cfg_calloc(config, n_schema + 1, sizeof *keys);
				if (!keys)
					return -ENOMEM;
				for (size_t k = 0; k < n_schema; k++)
					keys[k] = schema[k].key;
				char hint[128];
				dli_suggest_text(hint, sizeof hint, key->text, keys, n_schema);
				return fail(&rs, key, "unknown key '%s'%s%s", key->text, hint,
					    n_schema ? "" : " (it takes no parameters)");
			}
			int r = set_param(&rs, schema, idx, key, node->items[i], values, set_here);
			if (r)
				return r;
			set_here[idx] = true;
		}
	}
	int r = fill_defaults(&rs, schema, n_schema, values, owner, node ? node : config->root);
	if (r)
		return r;
	*out = values;
	return 0;
}

/* ---- Top level ---- */

static int read_extensions(struct resolver *rs, const struct dli_node *n)
{
	struct dli_config *cfg = rs->cfg;
	const struct dli_node *const *items;
	size_t count;
	size_t mark = path_push(rs, "extensions");
	int r = want_list(rs, n, "module names or namespaces", &items, &count);
	if (r)
		return r;
	cfg->extensions = cfg_calloc(cfg, count, sizeof *cfg->extensions);
	if (!cfg->extensions)
		return -ENOMEM;
	if ((r = listed_once(rs, items, NULL, count)))
		return r;
	for (size_t i = 0; i < count; i++) {
		cfg->extensions[i].name = items[i]->text;
		cfg->extensions[i].where = items[i]->where;
	}
	cfg->n_extensions = count;
	cfg->has_extensions = true;
	path_pop(rs, mark);
	return 0;
}

static int read_loggers(struct resolver *rs, const struct dli_node *n)
{
	struct dli_config *cfg = rs->cfg;
	size_t mark = path_push(rs, "loggers");
	if (n->kind != DLI_NODE_MAP || n->n == 0)
		return fail(rs, n, "expected a mapping of logger names to their parameters, e.g. "
				   "'loggers: {file: {}}', got %s",
			    n->kind == DLI_NODE_MAP ? "an empty mapping" : kind_name(n));
	cfg->loggers = cfg_calloc(cfg, n->n, sizeof *cfg->loggers);
	if (!cfg->loggers)
		return -ENOMEM;
	for (size_t i = 0; i < n->n; i++) {
		struct dli_logger_config *l = &cfg->loggers[i];
		l->name = n->keys[i]->text;
		l->where = n->keys[i]->where;
		l->where_text = where_text(cfg, &l->where);
		l->node = is_null(n->items[i]) ? NULL : n->items[i];
		if (l->node && l->node->kind != DLI_NODE_MAP) {
			path_push(rs, l->name);
			return fail(rs, l->node, "expected a mapping of parameters, got %s",
				    kind_name(l->node));
		}
	}
	cfg->n_loggers = n->n;
	cfg->has_loggers = true;
	path_pop(rs, mark);
	return 0;
}

int dli_config_seed_tensors(struct dli_config *cfg, char *const *names, size_t n)
{
	for (size_t i = DLI_TENSOR_STANDARD_COUNT; i < n && i < DLI_MAX_TENSORS; i++) {
		if (!(cfg->tensor_names[i] = cfg_strdup(cfg, names[i])))
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

int dli_config_parse(const char *path, const char *yaml_text, struct dli_config **out,
		     struct dli_error *err)
{
	*out = NULL;
	struct dli_config *cfg = calloc(1, sizeof *cfg);
	if (!cfg)
		return dli_error_set(err, -ENOMEM, NULL, "out of memory");
	cfg->path = cfg_strdup(cfg, path ? path : "<string>");
	for (size_t i = 0; i < DLI_TENSOR_STANDARD_COUNT; i++)
		cfg->tensor_names[i] = (char *)standard_tensors[i];
	cfg->n_tensor_names = DLI_TENSOR_STANDARD_COUNT;
	char *text = NULL;
	size_t len = 0;
	int r = 0;
	if (!cfg->path) {
		r = dli_error_set(err, -ENOMEM, NULL, "out of memory");
		goto fail;
	}
	if (!yaml_text) {
		FILE *f = fopen(path, "rb");
		if (!f) {
			r = dli_error_set(err, -errno, NULL, "cannot open config '%s': %s", path,
					  strerror(errno));
			goto fail;
		}
		char buf[65536];
		size_t got;
		while ((got = fread(buf, 1, sizeof buf, f)) > 0) {
			if (len + got > MAX_CONFIG_BYTES) {
				fclose(f);
				r = too_big(err, path);
				goto fail;
			}
			char *t = realloc(text, len + got + 1);
			if (!t) {
				fclose(f);
				r = dli_error_set(err, -ENOMEM, NULL, "out of memory reading %s", path);
				goto fail;
			}
			text = t;
			memcpy(text + len, buf, got);
			len += got;
		}
		int read_error = ferror(f) ? (errno ? errno : EIO) : 0;
		fclose(f);
		if (read_error) {
			/* e.g. a directory: fopen succeeds, fread fails with EISDIR */
			r = dli_error_set(err, -read_error, NULL, "cannot read config '%s': %s", path,
					  strerror(read_error));
			goto fail;
		}
		yaml_text = text ? text : "";
	} else if ((len = strnlen(yaml_text, MAX_CONFIG_BYTES + 1)) > MAX_CONFIG_BYTES) {
		r = too_big(err, cfg->path);
		goto fail;
	}
	if ((r = build_tree(cfg, yaml_text, len, &cfg->root, err)))
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
		r = fail(&rs, root, "the top level must be a mapping of sections (and optionally "
				    "'extensions' and 'loggers'), got %s",
			 kind_name(root));
		goto fail;
	}
	size_t n_sections = 0;
	for (size_t i = 0; i < root->n; i++)
		n_sections += strcmp(root->keys[i]->text, "extensions") &&
			      strcmp(root->keys[i]->text, "loggers") &&
			      strcmp(root->keys[i]->text, "nvtx");
	cfg->sections = cfg_calloc(cfg, n_sections, sizeof *cfg->sections);
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
			size_t mark = path_push(&rs, "nvtx");
			if (!(r = want_bool(&rs, root->items[i], &cfg->nvtx)))
				path_pop(&rs, mark);
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
	size_t mark = path_push(rs, "layers");
	if (n->kind != DLI_NODE_MAP || n->n == 0)
		return fail(rs, n, "expected a mapping with at least one of layer_name_regex_pattern, "
				   "layer_numbers, layer_types, exact_layer_names; got %s",
			    n->kind == DLI_NODE_MAP ? "an empty mapping" : kind_name(n));
	const struct dli_node *regex_key = NULL, *numeric_key = NULL;
	for (size_t i = 0; i < n->n; i++) {
		const struct dli_node *key = n->keys[i], *v = n->items[i];
		size_t m2 = path_push(rs, key->text);
		const struct dli_node *const *items;
		size_t count;
		int r;
		if (!strcmp(key->text, "layer_name_regex_pattern")) {
			if (want_scalar(rs, v, "a regular expression"))
				return -EINVAL;
			char msg[256];
			size_t off = 0;
			if (dli_selector_set_regex(sel, v->text, msg, sizeof msg, &off)) {
				/* Point at the offending character when the pattern is on one line. */
				struct dli_node at = *v;
				if (!strchr(v->text, '\n'))
					at.where.column += (int)off + !v->plain; /* skip a quote */
				return fail(rs, &at, "bad regular expression '%s': %s at offset %zu",
					    v->text, msg, off);
			}
			regex_key = key;
		} else if (!strcmp(key->text, "exact_layer_names")) {
			if ((r = want_list(rs, v, "layer names", &items, &count)) ||
			    (r = listed_once(rs, items, NULL, count)))
				return r;
			sel->exact = calloc(count, sizeof *sel->exact);
			if (!sel->exact)
				return -ENOMEM;
			for (size_t k = 0; k < count; k++)
				if (!(sel->exact[sel->n_exact++] = strdup(items[k]->text)))
					return -ENOMEM;
			sel->has_exact = true;
		} else if (!strcmp(key->text, "layer_types")) {
			if ((r = want_list(rs, v, "layer types", &items, &count)) ||
			    (r = listed_once(rs, items, NULL, count)))
				return r;
			sel->has_types = true;
			sel->types = calloc(count, sizeof *sel->types);
			if (!sel->types)
				return -ENOMEM;
			for (size_t k = 0; k < count; k++) {
				if (!items[k]->text[0])
					return fail(rs, items[k], "an empty layer type would select every "
								  "layer; write 'all' for that");
				if (!strcmp(items[k]->text, "all"))
					sel->types_all = true;
				else if (!(sel->types[sel->n_types++] = strdup(items[k]->text)))
					return -ENOMEM;
			}
			numeric_key = key;
		} else if (!strcmp(key->text, "layer_numbers")) {
			if ((r = want_list(rs, v, "layer numbers or ranges 'a-b'", &items, &count)) ||
			    (r = listed_once(rs, items, NULL, count)))
				return r;
			sel->has_numbers = true;
			sel->numbers = calloc(count, sizeof *sel->numbers);
			if (!sel->numbers)
				return -ENOMEM;
			for (size_t k = 0; k < count; k++) {
				if (!strcmp(items[k]->text, "all")) {
					sel->numbers_all = true;
					continue;
				}
				char msg[256];
				if (dli_range_parse(items[k]->text, &sel->numbers[sel->n_numbers], msg,
						    sizeof msg))
					return fail(rs, items[k], "%s", msg);
				sel->n_numbers++;
			}
			numeric_key = key;
		} else {
			path_pop(rs, m2);
			char hint[128];
			dli_suggest_text(hint, sizeof hint, key->text, keys, 4);
			return fail(rs, key, "unknown key '%s'%s", key->text, hint);
		}
		path_pop(rs, m2);
	}
	if (regex_key && numeric_key && !sel->has_exact) {
		size_t m2 = path_push(rs, numeric_key->text);
		int r = warn(rs, numeric_key, "has no effect: layer_name_regex_pattern alone decides "
					      "when it is present");
		path_pop(rs, m2);
		if (r)
			return r;
	}
	path_pop(rs, mark);
	return 0;
}

static int add_tensor_name(struct dli_config *cfg, const struct dli_node *n)
{
	cfg->tensor_names[cfg->n_tensor_names] = n->text;
	return (int)cfg->n_tensor_names++;
}

static int tensor_id_for(struct resolver *rs, const struct dli_node *n)
{
	struct dli_config *cfg = rs->cfg;
	for (size_t i = 0; i < cfg->n_tensor_names; i++)
		if (!strcmp(cfg->tensor_names[i], n->text))
			return (int)i;
	if (cfg->n_tensor_names == DLI_MAX_TENSORS)
		return fail(rs, n, "more than %d distinct tensor names", DLI_MAX_TENSORS), -1;
	for (size_t i = 0; i < cfg->n_declared_tensors; i++)
		if (!strcmp(cfg->declared_tensors[i], n->text))
			return add_tensor_name(cfg, n);
	/* Every name the config could have meant: the standard ones and the host's. */
	const char *known[DLI_TENSOR_STANDARD_COUNT + 64];
	size_t n_known = 0;
	for (size_t i = 0; i < DLI_TENSOR_STANDARD_COUNT; i++)
		known[n_known++] = standard_tensors[i];
	for (size_t i = 0; i < cfg->n_declared_tensors && n_known < sizeof known / sizeof *known; i++)
		known[n_known++] = cfg->declared_tensors[i];
	const char *close = dli_suggest(n->text, known, n_known);
	char hint[160] = "";
	if (close)
		snprintf(hint, sizeof hint, " (did you mean '%s'?)", close);
	if (rs->base_ns) {
		/* The base namespace's tensors are whatever the host passes to log_tensor_stats. */
		if (close && warn(rs, n, "'%s' is not a standard tensor%s; it is taken as the name of "
					 "a host's own tensor",
				  n->text, hint))
			return -1;
		return add_tensor_name(cfg, n);
	}
	if (cfg->tensors_declared)
		return fail(rs, n, "unknown tensor '%s'%s: not a standard tensor (activation, gradient, "
				   "weight, output, wgrad, dgrad) nor one the host declares%s",
			    n->text, hint,
			    cfg->n_declared_tensors ? "" : " (it declares none; `dlinspect check "
							  "--allow-tensor NAME` accepts one)"), -1;
	/* Undeclared: a host's own name, unless it looks like a misspelled standard one. */
	if (!close)
		return add_tensor_name(cfg, n);
	if (warn(rs, n, "'%s' is not a standard tensor%s; it is taken as the name of a host's own "
			"tensor, and nothing is logged for it unless the host passes a tensor of that "
			"name",
		 n->text, hint))
		return -1;
	cfg->warnings_loud[cfg->n_warnings - 1] = true;
	return add_tensor_name(cfg, n);
}

static int read_gemms(struct resolver *rs, const struct dli_node *n, uint32_t *mask)
{
	const struct dli_node *const *items;
	size_t count;
	int r = want_list(rs, n, "gemms (fprop, dgrad, wgrad)", &items, &count);
	if (r)
		return r;
	const struct dli_node *first[DLI_GEMM_COUNT] = {0};
	*mask = 0;
	for (size_t i = 0; i < count; i++) {
		int g = want_choice(rs, items[i], gemm_names, DLI_GEMM_COUNT, "gemm");
		if (g < 0)
			return -EINVAL;
		if (first[g])
			return listed_twice(rs, items[i], gemm_names[g], first[g]);
		first[g] = items[i];
		*mask |= 1u << g;
	}
	return 0;
}

static int read_tensors(struct resolver *rs, const struct dli_node *n, uint64_t *mask)
{
	const struct dli_node *const *items;
	size_t count;
	int r = want_list(rs, n, "tensor names", &items, &count);
	if (r)
		return r;
	const struct dli_node *first[DLI_MAX_TENSORS] = {0};
	*mask = 0;
	for (size_t i = 0; i < count; i++) {
		int t = tensor_id_for(rs, items[i]);
		if (t < 0)
			return -EINVAL;
		if (first[t])
			return listed_twice(rs, items[i], rs->cfg->tensor_names[t], first[t]);
		first[t] = items[i];
		*mask |= 1ull << t;
	}
	return 0;
}

/* What one block (a feature block or one struct entry) says, layered over its parent's. */
struct block {
	struct dli_value *params;
	bool *set_here;
	bool has_gemms, has_tensors, enabled, has_enabled;
	uint32_t gemms;
	uint64_t tensors;
	const struct dli_node *gemms_struct, *tensors_struct;
	int64_t sched[3]; /* freq, start_step, end_step */
	bool sched_set[3];
	struct dli_value ranges;
	bool has_ranges;
	const struct dli_node *first_sched_key;
	/* Given by this block itself, not inherited: an entry's start_end_list replaces the block's
	 * start_step/end_step and the other way round; both in one block is an error. */
	bool steps_here, ranges_here, sched_here;
	bool in_eval; /* a modifying feature's `in_eval`: act during evaluation passes too */
};

/* One key of a feature block or struct entry. `entry_key` is "gemm" or "tensor" inside struct
 * entries (NULL in the block itself). */
static int block_key(struct resolver *rs, const struct dli_feature_entry *fe, struct block *b,
		     const struct dli_node *key, const struct dli_node *v, const char *entry_key)
{
	const struct dli_feature_desc *d = fe->desc;
	const char *k = key->text;
	size_t mark = path_push(rs, k);
	int r = 0;
	if (!strcmp(k, "enabled") && !entry_key) {
		r = want_bool(rs, v, &b->enabled);
		b->has_enabled = true;
	} else if ((d->flags & DLI_FEATURE_GEMMS) && !strcmp(k, "gemms") &&
		   !(entry_key && !strcmp(entry_key, "gemm"))) {
		r = read_gemms(rs, v, &b->gemms);
		b->has_gemms = true;
	} else if ((d->flags & DLI_FEATURE_TENSORS) && !strcmp(k, "tensors") &&
		   !(entry_key && !strcmp(entry_key, "tensor"))) {
		r = read_tensors(rs, v, &b->tensors);
		b->has_tensors = true;
	} else if ((d->flags & DLI_FEATURE_GEMMS) && !strcmp(k, "gemms_struct") && !entry_key) {
		if (v->kind != DLI_NODE_SEQ || v->n == 0)
			r = fail(rs, v, "expected a list of entries like '{gemm: fprop, ...}', got %s",
				 kind_name(v));
		b->gemms_struct = v;
	} else if ((d->flags & DLI_FEATURE_TENSORS) && !strcmp(k, "tensors_struct") &&
		   (!entry_key || !strcmp(entry_key, "gemm"))) {
		if (v->kind != DLI_NODE_SEQ || v->n == 0)
			r = fail(rs, v, "expected a list of entries like '{tensor: activation, ...}', "
					"got %s",
				 kind_name(v));
		b->tensors_struct = v;
	} else if ((d->flags & DLI_FEATURE_SCHEDULED) &&
		   (!strcmp(k, "freq") || !strcmp(k, "start_step") || !strcmp(k, "end_step"))) {
		int i = !strcmp(k, "freq") ? 0 : !strcmp(k, "start_step") ? 1 : 2;
		r = want_int(rs, v, &b->sched[i]);
		if (!r && i == 0 && b->sched[0] < 1)
			r = fail(rs, v, "expected an integer >= 1, got %lld", (long long)b->sched[0]);
		if (!r && i == 1 && b->sched[i] < 0)
			r = fail(rs, v, "expected a step >= 0, got %lld", (long long)b->sched[i]);
		/* -1: no end, as both peers document it. */
		if (!r && i == 2 && b->sched[i] < -1)
			r = fail(rs, v, "expected a step >= 0, or -1 for no end, got %lld",
				 (long long)b->sched[i]);
		b->sched_set[i] = true;
		if (i > 0) {
			if (!b->ranges_here)
				b->has_ranges = false;
			b->steps_here = true;
		}
		if (!b->sched_here)
			b->first_sched_key = key;
		b->sched_here = true;
	} else if ((d->flags & DLI_FEATURE_SCHEDULED) && !strcmp(k, "start_end_list")) {
		static const struct dli_param_desc pairs = {.key = "start_end_list",
							    .type = DLI_PARAM_INT_PAIRS};
		r = parse_value(rs, &pairs, v, &b->ranges);
		/* Stored inclusive. The base namespace's end is exclusive (nvdlfw_inspect's
		 * enable_logging_at_current_step: step < end), TransformerEngine's inclusive
		 * (next_enabled_iter: s <= step <= e); -1 is no end in both. */
		bool exclusive = !strcmp(dli_feature_entry_ns(fe), DLI_NS_BASE);
		for (size_t i = 0; !r && i < b->ranges.u.pairs.n; i++) {
			struct dli_int_pair *p = (struct dli_int_pair *)&b->ranges.u.pairs.items[i];
			if (p->first < 0 || (p->second != -1 && p->second < p->first + exclusive))
				r = fail(rs, v->items[i], "expected [start, end] with 0 <= start %s end, "
							  "got [%lld, %lld]%s; an end of -1 means no end",
					 exclusive ? "<" : "<=", (long long)p->first,
					 (long long)p->second,
					 exclusive ? " (in the base namespace the end is exclusive, "
						     "as in nvdlfw_inspect)"
						   : "");
			else if (p->second == -1)
				p->second = DLI_NEVER;
			else
				p->second -= exclusive;
		}
		b->has_ranges = true;
		if (!b->steps_here)
			b->sched_set[1] = b->sched_set[2] = false;
		b->ranges_here = true;
		if (!b->sched_here)
			b->first_sched_key = key;
		b->sched_here = true;
	} else if ((d->flags & DLI_FEATURE_MODIFIES) && !strcmp(k, "in_eval")) {
		r = want_bool(rs, v, &b->in_eval);
	} else {
		int idx = schema_find(d->params, d->n_params, k);
		if (idx >= 0) {
			path_pop(rs, mark);
			r = set_param(rs, d->params, idx, key, v, b->params, b->set_here);
			b->set_here[idx] = true;
			return r;
		}
		/* Unknown: suggest among every key this feature takes here. */
		bool in_gemm = entry_key && !strcmp(entry_key, "gemm");
		bool in_tensor = entry_key && !strcmp(entry_key, "tensor");
		/* Every shared key (at most 5 + N_SCHEDULE_KEYS + 1) and each parameter's key and alias. */
		const char **cands = malloc((8 + N_SCHEDULE_KEYS + 2 * d->n_params) * sizeof *cands);
		size_t nc = 0;
		if (!cands)
			return -ENOMEM;
		if (!entry_key)
			cands[nc++] = "enabled";
		if (d->flags & DLI_FEATURE_GEMMS) {
			if (!in_gemm)
				cands[nc++] = "gemms";
			if (!entry_key)
				cands[nc++] = "gemms_struct";
		}
		if (d->flags & DLI_FEATURE_TENSORS) {
			if (!in_tensor)
				cands[nc++] = "tensors";
			if (!in_tensor)
				cands[nc++] = "tensors_struct";
		}
		if (d->flags & DLI_FEATURE_SCHEDULED)
			for (size_t i = 0; i < N_SCHEDULE_KEYS; i++)
				cands[nc++] = schedule_keys[i];
		if (d->flags & DLI_FEATURE_MODIFIES)
			cands[nc++] = "in_eval";
		for (size_t i = 0; i < d->n_params; i++) {
			cands[nc++] = d->params[i].key;
			if (d->params[i].alias)
				cands[nc++] = d->params[i].alias;
		}
		char hint[128];
		dli_suggest_text(hint, sizeof hint, k, cands, nc);
		free(cands);
		path_pop(rs, mark);
		const char *why = "";
		bool gemm_key = !strcmp(k, "gemms") || !strcmp(k, "gemms_struct");
		bool tensor_key = !strcmp(k, "tensors") || !strcmp(k, "tensors_struct");
		/* The feature may take the key, just not inside this struct entry. */
		if (entry_key && !strcmp(k, "enabled"))
			why = " ('enabled' belongs to the feature block, not to a struct entry)";
		else if ((gemm_key && (d->flags & DLI_FEATURE_GEMMS)) ||
			 (tensor_key && (d->flags & DLI_FEATURE_TENSORS)))
			why = in_gemm ? " (not inside a gemms_struct entry: its 'gemm:' says which GEMM)"
			      : in_tensor ? " (not inside a tensors_struct entry: its 'tensor:' says "
					    "which tensor)"
					  : "";
		else if (gemm_key)
			why = " (this feature does not act per GEMM)";
		else if (tensor_key)
			why = " (this feature does not act per tensor)";
		else if (!strcmp(k, "freq") || !strcmp(k, "start_step") || !strcmp(k, "end_step") ||
			 !strcmp(k, "start_end_list"))
			why = " (this feature is not scheduled)";
		return fail(rs, key, "unknown key '%s' for %s%s%s", k, d->name, hint, why);
	}
	path_pop(rs, mark);
	return r;
}

static int block_copy(struct dli_config *cfg, const struct dli_feature_desc *d, const struct block *from,
		      struct block *to)
{
	*to = *from;
	to->gemms_struct = to->tensors_struct = NULL;
	to->steps_here = to->ranges_here = to->sched_here = false;
	to->params = cfg_calloc(cfg, d->n_params, sizeof *to->params);
	to->set_here = cfg_calloc(cfg, d->n_params + 1, sizeof *to->set_here);
	if (!to->params || !to->set_here)
		return -ENOMEM;
	memcpy(to->params, from->params, d->n_params * sizeof *to->params);
	return 0;
}

/* config->targets grows by doubling from TARGETS_MIN, so its capacity follows from the count. It is
 * not sized from the tree up front: with YAML aliases the tree can stand for exponentially many
 * nodes (a few lines of "billion laughs" took minutes, then failed for lack of memory). */
#define TARGETS_MIN 16
static size_t targets_cap(size_t n)
{
	size_t cap = TARGETS_MIN;
	while (cap < n)
		cap *= 2;
	return cap;
}

static int add_target(struct resolver *rs, struct dli_section *s, const struct dli_feature_entry *fe,
		      const struct block *b, const struct dli_node *at)
{
	struct dli_config *cfg = rs->cfg;
	const struct dli_feature_desc *d = fe->desc;
	if (b->has_ranges && (b->sched_set[1] || b->sched_set[2]))
		return fail(rs, b->first_sched_key,
			    "start_end_list replaces start_step/end_step: give one or the other");
	if (b->sched_set[1] && b->sched_set[2] && b->sched[2] != -1 && b->sched[2] < b->sched[1])
		return fail(rs, b->first_sched_key, "end_step (%lld) is before start_step (%lld)",
			    (long long)b->sched[2], (long long)b->sched[1]);
	if (cfg->n_targets >= TARGETS_MIN && cfg->n_targets == targets_cap(cfg->n_targets)) {
		struct dli_target *grown = realloc(cfg->targets, 2 * cfg->n_targets * sizeof *grown);
		if (!grown)
			return -ENOMEM;
		cfg->targets = grown;
	}
	struct dli_target *t = &cfg->targets[cfg->n_targets];
	memset(t, 0, sizeof *t);
	t->feature = fe;
	t->section = s;
	t->where = at->where;
	t->where_text = where_text(cfg, &at->where);
	t->gemms = (d->flags & DLI_FEATURE_GEMMS) ? b->gemms : (1u << DLI_GEMM_COUNT) - 1;
	t->tensors = (d->flags & DLI_FEATURE_TENSORS) ? b->tensors : ~0ull;
	t->params = b->params;
	t->in_eval = b->in_eval;
	t->schedule.freq = b->sched_set[0] ? b->sched[0] : 1;
	t->schedule.start_step = b->sched_set[1] ? b->sched[1] : 0;
	t->schedule.end_step = b->sched_set[2] && b->sched[2] != -1 ? b->sched[2] : DLI_NEVER;
	if (b->has_ranges) {
		t->schedule.ranges = b->ranges.u.pairs.items;
		t->schedule.n_ranges = b->ranges.u.pairs.n;
	}
	if (!t->where_text)
		return -ENOMEM;
	for (size_t i = s->first_target; i < cfg->n_targets; i++) {
		const struct dli_target *o = &cfg->targets[i];
		if (!dli_target_overlaps(o, t))
			continue;
		if (o->feature == fe)
			return fail(rs, at, "%s is configured twice for the same gemm/tensor of these "
					    "layers: here and at %s",
				    d->name, o->where_text);
		if ((d->flags & DLI_FEATURE_MODIFIES) && (o->feature->desc->flags & DLI_FEATURE_MODIFIES))
			return fail(rs, at, "%s and %s (at %s) would both modify the same tensor of "
					    "these layers; only one feature may modify a (gemm, tensor)",
				    d->name, o->feature->desc->name, o->where_text);
	}
	cfg->n_targets++;
	return 0;
}

/* The entries of a gemms_struct or tensors_struct list, each a target. */
static int read_struct(struct resolver *rs, struct dli_section *s, const struct dli_feature_entry *fe,
		       const struct block *parent, const struct dli_node *list, const char *entry_key,
		       bool make_targets);

static int finish_block(struct resolver *rs, struct dli_section *s, const struct dli_feature_entry *fe,
			struct block *b, const struct dli_node *at, bool make_targets)
{
	const struct dli_feature_desc *d = fe->desc;
	if (b->gemms_struct && b->has_gemms)
		return fail(rs, b->gemms_struct, "give 'gemms' or 'gemms_struct', not both");
	if (b->tensors_struct && b->has_tensors)
		return fail(rs, b->tensors_struct, "give 'tensors' or 'tensors_struct', not both");
	if (b->gemms_struct && b->tensors_struct)
		return fail(rs, b->tensors_struct, "give 'tensors_struct' inside the gemms_struct "
						   "entries, not beside gemms_struct");
	if (b->gemms_struct)
		return read_struct(rs, s, fe, b, b->gemms_struct, "gemm", make_targets);
	if (b->tensors_struct)
		return read_struct(rs, s, fe, b, b->tensors_struct, "tensor", make_targets);
	/* A disabled block may leave out what it acts on: flipping `enabled` is how users park one. */
	if ((d->flags & DLI_FEATURE_GEMMS) && !b->has_gemms && b->enabled)
		return fail(rs, at, "%s needs 'gemms' (or 'gemms_struct'): which of fprop, dgrad, wgrad",
			    d->name);
	if ((d->flags & DLI_FEATURE_TENSORS) && !b->has_tensors && b->enabled)
		return fail(rs, at, "%s needs 'tensors' (or 'tensors_struct'), e.g. [activation, "
				    "gradient, weight]",
			    d->name);
	int r = fill_defaults(rs, d->params, d->n_params, b->params, d->name, at);
	if (r || !make_targets)
		return r;
	return add_target(rs, s, fe, b, at);
}

static int read_struct(struct resolver *rs, struct dli_section *s, const struct dli_feature_entry *fe,
		       const struct block *parent, const struct dli_node *list, const char *entry_key,
		       bool make_targets)
{
	size_t mark = path_push(rs, !strcmp(entry_key, "gemm") ? "gemms_struct" : "tensors_struct");
	for (size_t i = 0; i < list->n; i++) {
		const struct dli_node *e = list->items[i];
		if (e->kind != DLI_NODE_MAP)
			return fail(rs, e, "expected an entry like '{%s: ..., ...}', got %s", entry_key,
				    kind_name(e));
		struct block b;
		if (block_copy(rs->cfg, fe->desc, parent, &b))
			return -ENOMEM;
		const struct dli_node *id = NULL;
		for (size_t k = 0; k < e->n; k++) {
			if (!strcmp(e->keys[k]->text, entry_key)) {
				id = e->items[k];
				continue;
			}
			int r = block_key(rs, fe, &b, e->keys[k], e->items[k], entry_key);
			if (r)
				return r;
		}
		if (!id)
			return fail(rs, e, "entry without '%s:'", entry_key);
		size_t m2 = path_push(rs, entry_key);
		int r = want_scalar(rs, id, entry_key);
		if (!r && !strcmp(entry_key, "gemm")) {
			int g = want_choice(rs, id, gemm_names, DLI_GEMM_COUNT, "gemm");
			r = g < 0 ? -EINVAL : 0;
			b.gemms = g < 0 ? 0 : 1u << g;
			b.has_gemms = true;
		} else if (!r) {
			int t = tensor_id_for(rs, id);
			r = t < 0 ? -EINVAL : 0;
			b.tensors = t < 0 ? 0 : 1ull << t;
			b.has_tensors = true;
		}
		path_pop(rs, m2);
		if (!r)
			r = finish_block(rs, s, fe, &b, e, make_targets);
		if (r)
			return r;
	}
	path_pop(rs, mark);
	return 0;
}

static int read_feature(struct resolver *rs, struct dli_section *s, const struct dli_feature_entry *fe,
			const struct dli_node *key, const struct dli_node *v)
{
	const struct dli_feature_desc *d = fe->desc;
	size_t mark = path_push(rs, key->text);
	rs->base_ns = !strcmp(dli_feature_entry_ns(fe), DLI_NS_BASE);
	if (v->kind != DLI_NODE_MAP)
		return fail(rs, v, "expected a mapping with 'enabled' and %s's keys, got %s", d->name,
			    kind_name(v));
	struct block b = {0};
	b.params = cfg_calloc(rs->cfg, d->n_params, sizeof *b.params);
	b.set_here = cfg_calloc(rs->cfg, d->n_params + 1, sizeof *b.set_here);
	if (!b.params || !b.set_here)
		return -ENOMEM;
	for (size_t i = 0; i < v->n; i++) {
		int r = block_key(rs, fe, &b, v->keys[i], v->items[i], NULL);
		if (r)
			return r;
	}
	if (!b.has_enabled)
		return fail(rs, key, "missing 'enabled' (true or false)");
	/* A disabled block is still checked, so a typo in it is caught before someone enables it. */
	int r = finish_block(rs, s, fe, &b, key, s->enabled && b.enabled);
	path_pop(rs, mark);
	rs->base_ns = false;
	return r;
}

static const struct dli_feature_entry *feature_lookup(struct resolver *rs, const char *name)
{
	return dli_registry_feature(rs->reg, name);
}

/* A feature block directly in a section: the base namespace's feature of that name (nvdlfw_inspect's
 * generic ones, e.g. its LogTensorStats), else one that another namespace declares generic. */
static const struct dli_feature_entry *direct_feature(struct resolver *rs, const char *name)
{
	const struct dli_feature_entry *fe = dli_registry_feature_in(rs->reg, DLI_NS_BASE, name);
	for (size_t i = 0; !fe && i < rs->reg->n_features; i++) {
		const struct dli_feature_entry *e = &rs->reg->features[i];
		if ((e->desc->flags & DLI_FEATURE_GENERIC) && dli_registry_feature_in(
			rs->reg, dli_feature_entry_ns(e), name) == e)
			fe = e;
	}
	return fe;
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
		return fail(rs, key, "unknown feature '%s' in namespace '%s'%s", key->text, ns, hint);
	return fail(rs, key, "unknown feature or namespace '%s'%s; check the config's 'extensions' "
			     "and `dlinspect plugins`",
		    key->text, hint);
}

static int read_section(struct resolver *rs, struct dli_section *s)
{
	static const char *const top_keys[] = {"extensions", "loggers"};
	const struct dli_node *n = s->node;
	size_t mark = path_push(rs, s->name);
	s->first_target = rs->cfg->n_targets;
	if (n->kind != DLI_NODE_MAP) {
		char hint[128];
		dli_suggest_text(hint, sizeof hint, s->name, top_keys, 2);
		struct dli_node at = {.where = s->where};
		return fail(rs, &at, "a section must be a mapping with 'enabled', 'layers' and "
				     "features, got %s%s",
			    kind_name(n), hint);
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
		return fail(rs, &at, "missing 'enabled' (true or false)");
	size_t m2 = path_push(rs, "enabled");
	int r = want_bool(rs, enabled, &s->enabled);
	path_pop(rs, m2);
	if (r)
		return r;
	if (!layers && s->enabled)
		return fail(rs, &at, "missing 'layers' (which layers this section applies to, e.g. "
				     "'layers: {layer_name_regex_pattern: .*fc1}')");
	if (layers && (r = read_layers(rs, s, layers)))
		return r;
	for (size_t i = 0; i < n->n; i++) {
		const struct dli_node *key = n->keys[i], *v = n->items[i];
		if (v == enabled || v == layers)
			continue;
		if (dli_registry_has_namespace(rs->reg, key->text)) {
			size_t m3 = path_push(rs, key->text);
			if (v->kind != DLI_NODE_MAP)
				return fail(rs, v, "expected a mapping of features, got %s", kind_name(v));
			for (size_t k = 0; k < v->n; k++) {
				const char *name = v->keys[k]->text;
				const struct dli_feature_entry *fe =
					dli_registry_feature_in(rs->reg, key->text, name);
				if (!fe) {
					const struct dli_feature_entry *other = feature_lookup(rs, name);
					if (other)
						return fail(rs, v->keys[k], "'%s' is not in namespace "
									    "'%s' (it is in '%s')",
							    name, key->text,
							    dli_feature_entry_ns(other));
					return unknown_in_section(rs, v->keys[k], key->text);
				}
				if ((r = read_feature(rs, s, fe, v->keys[k], v->items[k])))
					return r;
			}
			path_pop(rs, m3);
			continue;
		}
		const struct dli_feature_entry *fe = direct_feature(rs, key->text);
		if (!fe && (fe = feature_lookup(rs, key->text)))
			return fail(rs, key, "%s belongs in the section's '%s:' block", fe->desc->name,
				    dli_feature_entry_ns(fe));
		if (!fe)
			return unknown_in_section(rs, key, NULL);
		if ((r = read_feature(rs, s, fe, key, v)))
			return r;
	}
	s->n_targets = rs->cfg->n_targets - s->first_target;
	path_pop(rs, mark);
	return 0;
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

bool dli_target_overlaps(const struct dli_target *a, const struct dli_target *b)
{
	return (a->gemms & b->gemms) && (a->tensors & b->tensors);
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
	free(config);
}
