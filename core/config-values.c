/* Config values: messages that name the key path, scalars (YAML 1.1 booleans and integers, lists,
 * choices) and the typed parameter values checked against a module's schema. */
#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <stdint.h>
#include <string.h>
#include <strings.h>

#include "config-types-private.h"
#include "config-values-private.h"
#include "config-yaml-private.h"
#include "names-private.h"
#include "registry-private.h"
#include "strset-private.h"

/* ---- Messages with a key path ---- */

size_t dli_cfg_path_push(struct resolver *rs, const char *name)
{
	size_t mark = strlen(rs->path);
	snprintf(rs->path + mark, sizeof rs->path - mark, "%s%s", mark ? "." : "", name);
	return mark;
}

void dli_cfg_path_pop(struct resolver *rs, size_t mark)
{
	rs->path[mark] = '\0';
}

int dli_cfg_fail(struct resolver *rs, const struct dli_node *at, const char *fmt, ...)
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

/* Appends `text` (config memory, or NULL when that ran out) to the config's warnings, quiet. */
static int add_warning(struct dli_config *cfg, char *text)
{
	char **w = realloc(cfg->warnings, (cfg->n_warnings + 1) * sizeof *w);
	if (!w)
		return -ENOMEM;
	cfg->warnings = w;
	bool *loud = realloc(cfg->warnings_loud, (cfg->n_warnings + 1) * sizeof *loud);
	if (!loud)
		return -ENOMEM;
	cfg->warnings_loud = loud;
	loud[cfg->n_warnings] = false;
	if (!(w[cfg->n_warnings] = text))
		return -ENOMEM;
	cfg->n_warnings++;
	return 0;
}

int dli_cfg_warn(struct resolver *rs, const struct dli_node *at, const char *fmt, ...)
{
	struct dli_config *cfg = rs->cfg;
	char text[768];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(text, sizeof text, fmt, ap);
	va_end(ap);
	return add_warning(cfg, dli_cfg_printf(cfg, "%s:%d:%d: warning: %s%s%s", at->where.file,
					       at->where.line, at->where.column, rs->path,
					       rs->path[0] ? ": " : "", text));
}

int dli_cfg_demote(struct resolver *rs, const char *why)
{
	struct dli_error *e = rs->err;
	char prefix[640];
	size_t lp = 0;
	if (e && e->file[0]) {
		snprintf(prefix, sizeof prefix, "%s:%d:%d: ", e->file, e->line, e->column);
		lp = strlen(prefix);
		if (strncmp(e->message, prefix, lp))
			lp = 0;
	}
	int r = add_warning(rs->cfg, dli_cfg_printf(rs->cfg, "%.*swarning: %s (not an error while %s)",
						    (int)lp, e ? e->message : "",
						    e ? e->message + lp : "a mistake", why));
	if (e)
		memset(e, 0, sizeof *e);
	return r;
}

const char *dli_cfg_kind_name(const struct dli_node *n)
{
	if (dli_cfg_is_null(n))
		return "nothing";
	if (n->kind == DLI_NODE_SEQ)
		return n->n ? "a list" : "an empty list";
	return n->kind == DLI_NODE_MAP ? "a mapping" : "a scalar";
}

/* ---- Scalars ---- */

int dli_cfg_want_scalar(struct resolver *rs, const struct dli_node *n, const char *what)
{
	if (n->kind != DLI_NODE_SCALAR || dli_cfg_is_null(n))
		return dli_cfg_fail(rs, n, "expected %s, got %s", what, dli_cfg_kind_name(n));
	return 0;
}

/* For a value of the wrong type that is a quoted (or !!str) scalar: why "10" is not 10. */
static const char *quoted_note(const struct dli_node *n)
{
	return n->plain ? "" : " (quoted or tagged !!str, so a string: write it plain)";
}

/* Whether t is `word` as YAML 1.1 spells a boolean: all lower case, capitalized, or all upper case
 * (PyYAML reads `falsE` as a string). */
static bool bool_spelling(const char *t, const char *word)
{
	size_t n = strlen(word);
	if (strlen(t) != n || strcasecmp(t, word))
		return false;
	bool lower = true, upper = true;
	for (size_t i = 1; i < n; i++) {
		lower = lower && t[i] == word[i];
		upper = upper && t[i] == word[i] - 'a' + 'A';
	}
	return lower || (upper && t[0] == word[0] - 'a' + 'A');
}

int dli_cfg_want_bool(struct resolver *rs, const struct dli_node *n, bool *out)
{
	static const char *const yes[] = {"true", "yes", "on"}, *const no[] = {"false", "no", "off"};
	bool mixed = false;
	if (n->kind == DLI_NODE_SCALAR && n->plain) {
		for (size_t i = 0; i < 3; i++) {
			if (bool_spelling(n->text, yes[i]) || bool_spelling(n->text, no[i])) {
				*out = bool_spelling(n->text, yes[i]);
				return 0;
			}
			mixed = mixed || !strcasecmp(n->text, yes[i]) || !strcasecmp(n->text, no[i]);
		}
	}
	if (mixed)
		return dli_cfg_fail(rs, n, "expected true or false, got '%s' (in mixed letter case "
				    "YAML reads it as a string: write it lower case, capitalized or "
				    "upper case)", n->text);
	if (n->kind == DLI_NODE_SCALAR && !dli_cfg_is_null(n))
		return dli_cfg_fail(rs, n, "expected true or false, got '%s'%s", n->text,
				    quoted_note(n));
	return dli_cfg_fail(rs, n, "expected true or false, got %s", dli_cfg_kind_name(n));
}

/* A YAML 1.1 integer as PyYAML (the peers' loader) reads one: an optional sign, then decimal,
 * 0x hex, 0b binary or 0-prefixed octal digits, '_' allowed between digits ("1_000") and, after a
 * prefix, before them ("0x_10"). Returns false for anything else, or when it does not fit in 64
 * bits. */
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
	if (!t[strspn(t, "_")] || (base == 10 && *t == '_'))
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

/* Digits after a leading 0 that are no octal number ("018"): YAML 1.1 reads a leading 0 as
 * octal, so PyYAML reads this as a string, and strtod would read it as decimal 18 beside "017"
 * read as 15. */
static bool not_octal(const char *t)
{
	t += *t == '-' || *t == '+';
	return t[0] == '0' && t[1] && !t[strspn(t, "0123456789_")] && strpbrk(t, "89");
}

/* YAML 1.1's base-60 integer (`1:30`, PyYAML's [-+]?[1-9][0-9_]*(:[0-5]?[0-9])+) as PyYAML reads it
 * (90): true when `t` is one that fits in 64 bits. dlinspect refuses the form, since nobody
 * writes a step that way, but names the number PyYAML would have read. */
static bool sexagesimal(const char *t, int64_t *out)
{
	const char *p = t + (*t == '-' || *t == '+');
	int64_t v = 0, part = 0;
	if (*p < '1' || *p > '9' || !strchr(p, ':') || strlen(p) > 18)
		return false;
	for (bool first = true; *p; p++) {
		if (*p == ':') {
			if (!first && part > 59)
				return false;
			v = v * 60 + part;
			part = 0;
			first = false;
			if (!isdigit((unsigned char)p[1]) || (isdigit((unsigned char)p[2]) && p[3] &&
							     p[3] != ':'))
				return false;
		} else if (isdigit((unsigned char)*p)) {
			part = part * 10 + (*p - '0');
		} else if (*p != '_' || !first) {
			return false;
		}
	}
	if (part > 59)
		return false;
	*out = (v * 60 + part) * (*t == '-' ? -1 : 1);
	return true;
}

/* An integer, in any YAML 1.1 form PyYAML reads (see yaml11_int), or a float with no fraction
 * ("1e3", "100.0"): configs write steps that way, and the peers turn them into ints. */
int dli_cfg_want_int(struct resolver *rs, const struct dli_node *n, int64_t *out)
{
	if (dli_cfg_want_scalar(rs, n, "an integer"))
		return -EINVAL;
	if (n->plain && yaml11_int(n->text, out))
		return 0;
	if (n->plain && not_octal(n->text)) {
		const char *t = n->text + (n->text[0] == '-' || n->text[0] == '+');
		t += strspn(t, "0_");
		return dli_cfg_fail(rs, n,
				    "expected an integer, got '%s' (a leading 0 makes a YAML 1.1 "
				    "octal number, whose digits are 0-7: PyYAML reads '%s' as a "
				    "string; write %s%s without the 0)",
				    n->text, n->text, n->text[0] == '-' ? "-" : "", t);
	}
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
		return dli_cfg_fail(
		    rs, n, "expected an integer, got '%s' (out of the 64-bit range)", n->text);
	if (number)
		return dli_cfg_fail(
		    rs, n, "expected an integer, got '%s' (a number with a fraction)", n->text);
	int64_t base60;
	if (n->plain && sexagesimal(n->text, &base60))
		return dli_cfg_fail(rs, n,
				    "expected an integer, got '%s' (YAML 1.1's base-60 form, which "
				    "PyYAML reads as %lld; dlinspect refuses it: write %lld)",
				    n->text, (long long)base60, (long long)base60);
	return dli_cfg_fail(rs, n, "expected an integer, got '%s'%s", n->text, quoted_note(n));
}

static int want_float(struct resolver *rs, const struct dli_node *n, double *out)
{
	if (dli_cfg_want_scalar(rs, n, "a number"))
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
		return dli_cfg_fail(rs, n, "expected a number, got '%s'%s", t, quoted_note(n));
	*out = v;
	return 0;
}

int dli_cfg_listed_twice(struct resolver *rs, const struct dli_node *at, const char *text,
			 const struct dli_node *first)
{
	const char *brace = strchr(text, '{'); /* a choice with its parameters (list_choice) */
	if (brace)
		return dli_cfg_fail(rs, at, "'%.*s' with the same parameters is listed twice (first "
				    "at line %d, column %d)", (int)(brace - text), text,
				    first->where.line, first->where.column);
	return dli_cfg_fail(rs, at, "'%s' is listed twice (first at line %d, column %d)", text,
			    first->where.line, first->where.column);
}

/* A list of scalars; a bare scalar is a one-item list. Items are the nodes' texts. */
int dli_cfg_want_list(struct resolver *rs, const struct dli_node *n, const char *what,
		      const struct dli_node *const **items, size_t *count)
{
	if (n->kind == DLI_NODE_SCALAR && !dli_cfg_is_null(n)) {
		struct dli_node **one = dli_cfg_calloc(rs->cfg, 1, sizeof *one);
		if (!one)
			return -ENOMEM;
		one[0] = (struct dli_node *)n;
		*items = (const struct dli_node *const *)one;
		*count = 1;
		return 0;
	}
	if (n->kind != DLI_NODE_SEQ)
		return dli_cfg_fail(rs, n, "expected a list of %s, got %s", what,
				    dli_cfg_kind_name(n));
	if (n->n == 0)
		return dli_cfg_fail(rs, n, "expected a list of %s, got an empty list", what);
	for (size_t i = 0; i < n->n; i++)
		if (dli_cfg_want_scalar(rs, n->items[i], what))
			return -EINVAL;
	*items = (const struct dli_node *const *)n->items;
	*count = n->n;
	return 0;
}

/* One rule for every list of names (docs/config.md, "Lists"): a name given twice is an error at the
 * second, naming the first. `texts` (NULL: the items' own) are the names as compared, e.g. a
 * statistic in the schema's spelling. Linear in the list's length. */
int dli_cfg_listed_once(struct resolver *rs, const struct dli_node *const *items,
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
			r = dli_cfg_listed_twice(rs, items[i], text, items[*first]);
	}
	dli_strset_finish(&seen);
	return r;
}

/* A choice that takes parameters is spelled `name{key,key}` (plugin.h, `choices`): its name's
 * length. */
static size_t choice_name_len(const char *choice)
{
	return strcspn(choice, "{");
}

int dli_cfg_want_choice(struct resolver *rs, const struct dli_node *n, const char *const *choices,
			size_t n_choices, const char *what)
{
	size_t given = strlen(n->text);
	for (size_t i = 0; i < n_choices; i++)
		if (choice_name_len(choices[i]) == given && !strncmp(n->text, choices[i], given))
			return (int)i;
	for (size_t i = 0; rs->base_ns && i < n_choices; i++)
		if (choice_name_len(choices[i]) == given && !strncasecmp(n->text, choices[i], given))
			return (int)i;
	/* A long list (LogFp8TensorStats' recipe-prefixed names) is not cut silently: the names that
	 * fit, then how many there are and where to read them all. */
	char hint[128], list[512] = "";
	/* Names as configs write them: a choice's parameters left out. */
	const char **copy = dli_cfg_calloc(rs->cfg, n_choices + 1, sizeof *copy);
	for (size_t i = 0; copy && i < n_choices; i++)
		if (!(copy[i] = dli_cfg_printf(rs->cfg, "%.*s", (int)choice_name_len(choices[i]),
					       choices[i])))
			copy = NULL;
	const char *const *names = copy ? copy : choices; /* out of memory: as spelled */
	dli_suggest_text(hint, sizeof hint, n->text, names, n_choices);
	size_t off = 0, shown = 0;
	for (; shown < n_choices; shown++) {
		size_t len = strlen(names[shown]) + (shown ? 2 : 0);
		if (off + len > 360)
			break;
		off += (size_t)snprintf(list + off, sizeof list - off, "%s%s", shown ? ", " : "",
					names[shown]);
	}
	if (shown < n_choices)
		snprintf(list + off, sizeof list - off,
			 ", ... (%zu in all; `dlinspect plugins --explain` lists every one)", n_choices);
	dli_cfg_fail(rs, n, "unknown %s '%s'%s; expected one of: %s", what, n->text, hint, list);
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

static bool takes_params(const char *const *choices, size_t n_choices)
{
	for (size_t i = 0; i < n_choices; i++)
		if (choices[i][choice_name_len(choices[i])])
			return true;
	return false;
}

/* A list parameter's items: dli_cfg_want_list's scalars, and one-key mappings too where a choice
 * takes parameters (`- max_blockwise_dynamic_range: {block_size: 4}`). */
static int want_items(struct resolver *rs, const struct dli_node *n, const char *const *choices,
		      size_t n_choices, const struct dli_node *const **items, size_t *count)
{
	if (!takes_params(choices, n_choices) || n->kind != DLI_NODE_SEQ)
		return dli_cfg_want_list(rs, n, "strings", items, count);
	if (n->n == 0)
		return dli_cfg_fail(rs, n, "expected a list of strings, got an empty list");
	for (size_t i = 0; i < n->n; i++)
		if (n->items[i]->kind != DLI_NODE_MAP &&
		    dli_cfg_want_scalar(rs, n->items[i], "strings or {name: {parameters}}"))
			return -EINVAL;
	*items = (const struct dli_node *const *)n->items;
	*count = n->n;
	return 0;
}

/* The value of a parameterized choice's key `key` (length len) in `params` (a mapping or NULL). */
static const struct dli_node *param_of(const struct dli_node *params, const char *key, size_t len)
{
	for (size_t j = 0; params && j < params->n; j++)
		if (strlen(params->keys[j]->text) == len && !strncmp(params->keys[j]->text, key, len))
			return params->items[j];
	return NULL;
}

/* One item of a list of choices, in the schema's spelling; for a choice that takes parameters,
 * `name{key=value,...}` with the keys given, in the choice's order (`name{}` for the name alone).
 * NULL after saying what is wrong. */
static const char *list_choice(struct resolver *rs, const struct dli_node *item,
			       const struct dli_param_desc *d)
{
	const struct dli_node *name = item, *params = NULL;
	size_t nc = count_choices(d->choices);

	if (item->kind == DLI_NODE_MAP) {
		if (item->n != 1) {
			dli_cfg_fail(rs, item, "expected one name with its parameters "
				     "({name: {key: value}}), got a mapping of %zu keys", item->n);
			return NULL;
		}
		name = item->keys[0];
		params = item->items[0];
	}
	int ci = dli_cfg_want_choice(rs, name, d->choices, nc, d->key);
	if (ci < 0)
		return NULL;
	const char *choice = d->choices[ci], *keys = choice + choice_name_len(choice);
	int nlen = (int)choice_name_len(choice);
	if (!*keys) {
		if (params) {
			dli_cfg_fail(rs, params, "'%s' takes no parameters", choice);
			return NULL;
		}
		return choice;
	}
	if (params && dli_cfg_is_null(params))
		params = NULL;
	if (params && params->kind != DLI_NODE_MAP) {
		dli_cfg_fail(rs, params, "'%.*s' takes a mapping of parameters, e.g. {%.*s: ...}, "
			     "got %s", nlen, choice, (int)strcspn(keys + 1, ",}"), keys + 1,
			     dli_cfg_kind_name(params));
		return NULL;
	}
	for (size_t j = 0; params && j < params->n; j++) {
		const char *k = params->keys[j]->text, *at = keys + 1;
		size_t klen = strlen(k);
		bool known = false;
		while (*at && !known) {
			size_t l = strcspn(at, ",}");
			known = l == klen && !strncmp(at, k, l);
			at += l + (at[l] ? 1 : 0);
		}
		if (!known) {
			char list[256];
			size_t o = 0;
			for (const char *p = keys + 1; *p && *p != '}' && o + 3 < sizeof list; p++)
				o += (size_t)snprintf(list + o, sizeof list - o, *p == ',' ? ", " : "%c",
						      *p);
			dli_cfg_fail(rs, params->keys[j],
				     "unknown parameter '%s' of '%.*s'; expected one of: %s", k, nlen,
				     choice, list);
			return NULL;
		}
	}
	char *text = dli_cfg_printf(rs->cfg, "%.*s{", nlen, choice);
	const char *sep = "";
	for (const char *at = keys + 1; text && *at;) {
		size_t l = strcspn(at, ",}");
		const struct dli_node *v = param_of(params, at, l);
		int64_t value;
		if (v) {
			char key[160];
			snprintf(key, sizeof key, "%.*s.%.*s", nlen, choice, (int)l, at);
			size_t mark = dli_cfg_path_push(rs, key);
			if (dli_cfg_want_int(rs, v, &value))
				return NULL;
			if (value < 1) {
				dli_cfg_fail(rs, v, "expected a positive integer, got %" PRId64, value);
				return NULL;
			}
			dli_cfg_path_pop(rs, mark);
			text = dli_cfg_printf(rs->cfg, "%s%s%.*s=%" PRId64, text, sep, (int)l, at, value);
			sep = ",";
		}
		at += l + (at[l] ? 1 : 0);
	}
	return text ? dli_cfg_printf(rs->cfg, "%s}", text) : NULL;
}


int dli_cfg_parse_value(struct resolver *rs, const struct dli_param_desc *d,
			const struct dli_node *n, struct dli_value *v)
{
	struct dli_config *cfg = rs->cfg;
	v->type = d->type;
	v->where = dli_cfg_where_text(cfg, &n->where);
	if (!v->where)
		return -ENOMEM;
	size_t nc = count_choices(d->choices);
	switch (d->type) {
	case DLI_PARAM_BOOL: return dli_cfg_want_bool(rs, n, &v->u.b);
	case DLI_PARAM_INT:
	case DLI_PARAM_FLOAT: {
		/* The schema's range, and never NaN: the same check in check and run (registry.c). */
		char why[256];
		int r = d->type == DLI_PARAM_INT ? dli_cfg_want_int(rs, n, &v->u.i)
						 : want_float(rs, n, &v->u.f);
		if (r == 0 && !dli_param_number_ok(d, d->type == DLI_PARAM_INT ? (double)v->u.i : v->u.f,
						   n->text, why, sizeof why))
			return dli_cfg_fail(rs, n, "%s", why);
		return r;
	}
	case DLI_PARAM_STRING:
		if (dli_cfg_want_scalar(rs, n, "a string"))
			return -EINVAL;
		int cs = nc ? dli_cfg_want_choice(rs, n, d->choices, nc, d->key) : 0;
		if (cs < 0)
			return -EINVAL;
		v->u.s = nc ? d->choices[cs] : n->text; /* a choice in the schema's spelling */
		return 0;
	case DLI_PARAM_STRING_LIST: {
		const struct dli_node *const *items;
		size_t count;
		int r = want_items(rs, n, d->choices, nc, &items, &count);
		if (r)
			return r;
		const char **s = dli_cfg_calloc(cfg, count + 1, sizeof *s);
		if (!s)
			return -ENOMEM;
		for (size_t i = 0; i < count; i++)
			if (!(s[i] = nc ? list_choice(rs, items[i], d) : items[i]->text))
				return -EINVAL;
		if ((r = dli_cfg_listed_once(rs, items, s, count)))
			return r;
		v->u.list.items = s;
		v->u.list.n = count;
		return 0;
	}
	case DLI_PARAM_INT_PAIRS: {
		if (n->kind != DLI_NODE_SEQ || n->n == 0)
			return dli_cfg_fail(rs, n, "expected a list of [start, end] pairs, got %s",
					    dli_cfg_kind_name(n));
		struct dli_int_pair *p = dli_cfg_calloc(cfg, n->n, sizeof *p);
		if (!p)
			return -ENOMEM;
		for (size_t i = 0; i < n->n; i++) {
			const struct dli_node *pair = n->items[i];
			if (pair->kind != DLI_NODE_SEQ || pair->n != 2)
				return dli_cfg_fail(
				    rs, pair, "expected a [start, end] pair, got %s",
				    pair->kind == DLI_NODE_SEQ ? "a list of another length"
							       : dli_cfg_kind_name(pair));
			if (dli_cfg_want_int(rs, pair->items[0], &p[i].first) ||
			    dli_cfg_want_int(rs, pair->items[1], &p[i].second))
				return -EINVAL;
		}
		v->u.pairs.items = p;
		v->u.pairs.n = n->n;
		return 0;
	}
	}
	return dli_cfg_fail(rs, n, "unsupported parameter type");
}

/* Fills the values nobody set from the schema's defaults (a module's own YAML text). */
int dli_cfg_fill_defaults(struct resolver *rs, const struct dli_param_desc *schema, size_t n,
			  struct dli_value *values, const char *owner, const struct dli_node *block)
{
	for (size_t i = 0; i < n; i++) {
		if (values[i].set)
			continue;
		if (schema[i].required)
			return dli_cfg_fail(rs, block, "%s needs '%s' (%s)", owner, schema[i].key,
					    schema[i].doc ? schema[i].doc : "no default");
		values[i].type = schema[i].type;
		if (!schema[i].default_value)
			continue;
		struct dli_node *root = NULL;
		struct dli_error inner = {0};
		struct dli_config *cfg = rs->cfg;
		char name[160];
		snprintf(name, sizeof name, "<default of %s.%s>", owner, schema[i].key);
		/* each default text read once: read for each target, the defaults of a config with
		 * 100k targets took more nodes than the config itself may hold. Keyed by the text,
		 * not the feature's name, which two modules may share (base and
		 * transformer_engine LogTensorStats) with other defaults: the same text is the
		 * same tree. */
		size_t *cached = dli_strset_find(&cfg->defaults, schema[i].default_value);
		int r = 0;
		if (cached) {
			root = (struct dli_node *)(uintptr_t)*cached;
		} else {
			const char *saved_path = cfg->path;
			char *path = dli_cfg_strdup(cfg, name);
			cfg->path = path;
			r = path ? dli_cfg_build_tree(cfg, schema[i].default_value,
						      strlen(schema[i].default_value), &root, &inner)
				 : -ENOMEM;
			cfg->path = (char *)saved_path;
			bool added;
			char *key = r || !root ? NULL : dli_cfg_strdup(cfg, schema[i].default_value);
			size_t *slot = key ? dli_strset_slot(&cfg->defaults, key, &added) : NULL;
			if (slot)
				*slot = (size_t)(uintptr_t)root;
			else if (!r && root)
				r = -ENOMEM;
		}
		if (r || !root)
			return dli_error_set(rs->err, r ? r : -EINVAL, NULL,
					     "%s: the module's default for '%s' (\"%s\") is not valid YAML%s%s",
					     owner, schema[i].key, schema[i].default_value,
					     r ? ": " : "", r ? inner.message : "");
		struct resolver inner_rs = {.cfg = cfg, .reg = rs->reg, .err = &inner};
		if (dli_cfg_parse_value(&inner_rs, &schema[i], root, &values[i]))
			return dli_error_set(rs->err, -EINVAL, NULL,
					     "%s: the module's default for '%s' is invalid: %s", owner,
					     schema[i].key, inner.message);
		values[i].set = false;
	}
	return 0;
}

/* Index of `key` in the schema (by key or alias), or -1. */
int dli_cfg_schema_find(const struct dli_param_desc *schema, size_t n, const char *key)
{
	for (size_t i = 0; i < n; i++)
		if (!strcmp(schema[i].key, key) || (schema[i].alias && !strcmp(schema[i].alias, key)))
			return (int)i;
	return -1;
}

/* Sets values[idx] from `node` under `key`; an entry already set by the same block is a duplicate
 * (key and alias both given), one inherited from an outer block is overridden. */
int dli_cfg_set_param(struct resolver *rs, const struct dli_param_desc *schema, int idx,
		      const struct dli_node *key, const struct dli_node *node,
		      struct dli_value *values, const bool *set_here)
{
	if (set_here && set_here[idx])
		return dli_cfg_fail(rs, key, "'%s' is given twice (as '%s' and as '%s')",
				    schema[idx].key, schema[idx].key,
				    schema[idx].alias ? schema[idx].alias : schema[idx].key);
	size_t mark = dli_cfg_path_push(rs, key->text);
	int r = dli_cfg_parse_value(rs, &schema[idx], node, &values[idx]);
	dli_cfg_path_pop(rs, mark);
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
	dli_cfg_path_push(&rs, owner);
	struct dli_value *values = dli_cfg_calloc(config, n_schema, sizeof *values);
	bool *set_here = dli_cfg_calloc(config, n_schema + 1, sizeof *set_here);
	if (!values || !set_here)
		return dli_error_set(err, -ENOMEM, NULL, "out of memory");
	if (node && !dli_cfg_is_null(node)) {
		if (node->kind != DLI_NODE_MAP)
			return dli_cfg_fail(&rs, node, "expected a mapping of parameters, got %s",
					    dli_cfg_kind_name(node));
		for (size_t i = 0; i < node->n; i++) {
			const struct dli_node *key = node->keys[i];
			int idx = dli_cfg_schema_find(schema, n_schema, key->text);
			if (idx < 0) {
				const char **keys =
				    dli_cfg_calloc(config, n_schema + 1, sizeof *keys);
				if (!keys)
					return -ENOMEM;
				for (size_t k = 0; k < n_schema; k++)
					keys[k] = schema[k].key;
				char hint[128];
				dli_suggest_text(hint, sizeof hint, key->text, keys, n_schema);
				return dli_cfg_fail(&rs, key, "unknown key '%s'%s%s", key->text,
						    hint,
						    n_schema ? "" : " (it takes no parameters)");
			}
			int r = dli_cfg_set_param(&rs, schema, idx, key, node->items[i], values,
						  set_here);
			if (r)
				return r;
			set_here[idx] = true;
		}
	}
	int r =
	    dli_cfg_fill_defaults(&rs, schema, n_schema, values, owner, node ? node : config->root);
	if (r)
		return r;
	*out = values;
	return 0;
}
