/* The config's YAML (libyaml, used nowhere else) read into a tree of nodes with positions, and the
 * memory the config owns. */
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <yaml.h>

#include "config-types-private.h"
#include "config-yaml-private.h"
#include "strset-private.h"

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

void *dli_cfg_calloc(struct dli_config *cfg, size_t n, size_t size)
{
	return cfg_track(cfg, calloc(n ? n : 1, size));
}

char *dli_cfg_strdup(struct dli_config *cfg, const char *s)
{
	return cfg_track(cfg, strdup(s));
}

char *dli_cfg_printf(struct dli_config *cfg, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	char *s = NULL;
	int n = vasprintf(&s, fmt, ap);
	va_end(ap);
	return n < 0 ? NULL : cfg_track(cfg, s);
}

char *dli_cfg_where_text(struct dli_config *cfg, const struct dli_where *w)
{
	return dli_cfg_printf(cfg, "%s:%d:%d", w->file, w->line, w->column);
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
	size_t n_merged; /* pairs '<<' merge keys copied, counted with the nodes against MAX_NODES */
	const char *text; /* the input, for the position of a reader error (a byte offset) */
	size_t len;
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
	if (p->error == YAML_READER_ERROR) {
		/* The reader (encoding, control characters) gives a byte offset, not a mark: its
		 * line, and its column in characters as the marks count them. */
		size_t off = p->problem_offset < b->len ? p->problem_offset : b->len;
		int line = 1, column = 1;
		for (size_t i = 0; i < off; i++) {
			unsigned char c = (unsigned char)b->text[i];
			if (c == '\n') {
				line++;
				column = 1;
			} else if ((c & 0xc0) != 0x80) {
				column++;
			}
		}
		w.line = line;
		w.column = column;
		return dli_error_set(b->err, -EINVAL, &w, "invalid YAML: %s (#x%X)",
				     p->problem ? p->problem : "unreadable input",
				     (unsigned)p->problem_value);
	}
	/* YAML ends an implicit key at 1024 characters; libyaml (as PyYAML) then says only that the
	 * ':' after it is unexpected, which reads as a syntax error in a line that has none. */
	const char *hint = "";
	if (p->problem && p->problem_mark.column > 1024 &&
	    (!strcmp(p->problem, "mapping values are not allowed in this context") ||
	     !strcmp(p->problem, "could not find expected ':'")))
		hint = " (a key longer than 1024 characters? YAML allows no longer implicit key)";
	/* The context's mark says where the construct began: often far from where libyaml gave up. */
	if (p->context)
		return dli_error_set(b->err, -EINVAL, &w, "invalid YAML: %s %s started at line %d, "
							  "column %d%s",
				     p->problem, p->context, (int)p->context_mark.line + 1,
				     (int)p->context_mark.column + 1, hint);
	return dli_error_set(b->err, -EINVAL, &w, "invalid YAML: %s%s",
			     p->problem ? p->problem : "unreadable input", hint);
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

bool dli_cfg_is_null(const struct dli_node *n)
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
				if (!added)
					continue;
				/* each copied pair costs what a node does: a chain of mappings
				 * each merging the one before would copy quadratically many */
				if (b->cfg->n_nodes + ++b->n_merged > MAX_NODES)
					return dli_error_set(b->err, -EINVAL, &node->where,
							     "'<<' merge keys copy more than %d pairs "
							     "with the nodes read: a config is limited to "
							     "%d YAML nodes",
							     MAX_NODES, MAX_NODES);
				if (node_append(node, map->keys[i], map->items[i]))
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

static int unsupported_tag(struct builder *b, const yaml_event_t *ev, const char *tag)
{
	struct dli_where w = {b->cfg->path, (int)ev->start_mark.line + 1,
			      (int)ev->start_mark.column + 1};
	const char *core = "tag:yaml.org,2002:";
	bool ours = !strncmp(tag, core, strlen(core));
	return dli_error_set(b->err, -EINVAL, &w,
			     "unsupported YAML tag '%s%.200s': a config holds strings, numbers, "
			     "booleans, null, lists and mappings (tags !!str, !!int, !!float, "
			     "!!bool, !!null, !!seq, !!map)",
			     ours ? "!!" : "", ours ? tag + strlen(core) : tag);
}

/* A scalar's explicit tag, as YAML 1.1 readers (PyYAML's safe_load) take it: !!str makes it a
 * string whatever it looks like; !!int, !!float, !!bool and !!null have it read as that type even
 * when quoted, and so does the non-specific "!", which PyYAML resolves as if the scalar were plain
 * (`! 5` and `! "5"` are the int 5). Any other tag is refused, where ignoring it would read
 * `!!python/object:...` or `!custom` as the plain text after it. */
static int tagged_plain(struct builder *b, const yaml_event_t *ev, const char *tag, bool *plain)
{
	if (!tag)
		return 0;
	if (!strcmp(tag, YAML_STR_TAG)) {
		*plain = false;
		return 0;
	}
	if (!strcmp(tag, "!") || !strcmp(tag, YAML_INT_TAG) || !strcmp(tag, YAML_FLOAT_TAG) ||
	    !strcmp(tag, YAML_BOOL_TAG) || !strcmp(tag, YAML_NULL_TAG)) {
		*plain = true;
		return 0;
	}
	return unsupported_tag(b, ev, tag);
}

/* What PyYAML's constructors make of a tagged scalar: !!null is null whatever its text (`!!null 4`
 * too); !!bool takes its words in any letter case and refuses anything else (`!!bool 1`), so
 * its text becomes the word in lower case. Other tags leave the text as it is. */
static int tagged_value(struct builder *b, const yaml_event_t *ev, struct dli_node *n)
{
	static const char *const words[] = {"true", "yes", "on", "false", "no", "off"};
	const char *tag = (const char *)ev->data.scalar.tag;
	if (!tag || (strcmp(tag, YAML_NULL_TAG) && strcmp(tag, YAML_BOOL_TAG)))
		return 0;
	const char *text = !strcmp(tag, YAML_NULL_TAG) ? "null" : NULL;
	for (size_t i = 0; !text && i < sizeof words / sizeof *words; i++)
		if (!strcasecmp(n->text, words[i]))
			text = i < 3 ? "true" : "false";
	if (!text) {
		struct dli_where w = {b->cfg->path, (int)ev->start_mark.line + 1,
				      (int)ev->start_mark.column + 1};
		return dli_error_set(b->err, -EINVAL, &w,
				     "!!bool '%.200s' is not a boolean (true/false, yes/no, on/off)",
				     n->text);
	}
	char *copy = strdup(text);
	if (!copy)
		return -ENOMEM;
	free(n->text);
	n->text = copy;
	n->plain = true;
	return 0;
}

/* A finished list's or mapping's weight (struct dli_node). Each node is weighed once, from its
 * children's weights, so this is linear in the nodes read; the limit keeps what reads the tree
 * after (every alias of a section is a section) within MAX_NODES visits, where a few hundred
 * bytes of aliases could stand for millions of sections or tensors. An alias of a node still
 * being read (a cycle) adds its weight so far; cycles are refused where the tree is read. */
static int weigh(struct builder *b, struct dli_node *n)
{
	uint64_t w = 1;
	size_t heaviest = 0;
	for (size_t i = 0; i < n->n; i++) {
		w += n->items[i]->weight + (n->kind == DLI_NODE_MAP ? n->keys[i]->weight : 0);
		if (n->items[i]->weight > n->items[heaviest]->weight)
			heaviest = i;
	}
	n->weight = w;
	if (w <= MAX_NODES)
		return 0;
	const struct dli_node *h = n->items[heaviest]; /* n->n > 0: w > 1 */
	char which[64];
	if (n->kind == DLI_NODE_MAP)
		snprintf(which, sizeof which, "'%.40s'", n->keys[heaviest]->text);
	else
		snprintf(which, sizeof which, "item %zu", heaviest + 1);
	return dli_error_set(b->err, -EINVAL, &n->where,
			     "this %s stands for more than %d nodes with the aliases and '<<' "
			     "merges in it expanded (%zu entries; the largest, %s, stands for "
			     "%llu: the one read at line %d): a config is limited to %d YAML nodes, "
			     "an alias counting as the nodes it stands for",
			     n->kind == DLI_NODE_MAP ? "mapping" : "list", MAX_NODES, n->n, which,
			     (unsigned long long)h->weight, h->where.line, MAX_NODES);
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
	case YAML_SCALAR_EVENT: {
		bool plain = ev->data.scalar.style == YAML_PLAIN_SCALAR_STYLE;
		int r = tagged_plain(b, ev, (const char *)ev->data.scalar.tag, &plain);
		if (r)
			return r;
		/* A double-quoted "\0" (or "\x00") puts a NUL inside a scalar. Every name and value
		 * is a C string from here on, so "fc1\0x" would silently read as "fc1": an
		 * exact_layer_names entry would select fc1, "freq\0x" would set freq. */
		const char *nul = memchr(ev->data.scalar.value, '\0', ev->data.scalar.length);
		if (nul) {
			struct dli_where w = {b->cfg->path, (int)ev->start_mark.line + 1,
					      (int)ev->start_mark.column + 1};
			char head[DLI_CLIP_NAME + 4];
			dli_clip_name(head, sizeof head, (const char *)ev->data.scalar.value);
			return dli_error_set(b->err, -EINVAL, &w,
					     "a NUL character (U+0000) after '%s' in a double-quoted "
					     "string: names and values cannot hold one",
					     head);
		}
		n = node_new(b, DLI_NODE_SCALAR, ev->start_mark);
		if (!n || !(n->text = strdup((const char *)ev->data.scalar.value)))
			return -ENOMEM;
		n->plain = plain;
		if ((r = tagged_value(b, ev, n)))
			return r;
		n->weight = 1;
		*out = n;
		return remember_anchor(b, ev->data.scalar.anchor, n);
	}
	case YAML_SEQUENCE_START_EVENT:
	case YAML_MAPPING_START_EVENT: {
		const char *tag = (const char *)(ev->type == YAML_SEQUENCE_START_EVENT
							 ? ev->data.sequence_start.tag
							 : ev->data.mapping_start.tag);
		const char *want = ev->type == YAML_SEQUENCE_START_EVENT ? YAML_SEQ_TAG : YAML_MAP_TAG;
		if (tag && strcmp(tag, want) && strcmp(tag, "!")) /* "!": PyYAML's plain list or map */
			return unsupported_tag(b, ev, tag);
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
		int r = build_children(b, n, depth);
		return r ? r : weigh(b, n);
	}
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
int dli_cfg_build_tree(struct dli_config *cfg, const char *text, size_t len, struct dli_node **root,
		       struct dli_error *err)
{
	struct builder b = {.cfg = cfg, .err = err, .text = text, .len = len};
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
	if (!r && *root && dli_cfg_is_null(*root))
		*root = NULL;
	return r;
}
