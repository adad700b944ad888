/* Layer selection: matching a layer name against a section's `layers:` block (regex, exact names,
 * layer numbers, layer types), and parsing the pieces of that block that are text. */
#define PCRE2_CODE_UNIT_WIDTH 8

#include <ctype.h>
#include <errno.h>
#include <pcre2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "select-private.h"

/* A layer name that is not valid UTF-8 (a C host may pass any bytes) is still matched: its invalid
 * bytes match no item of the pattern, not even '.', and the rest matches as usual, so `fc1` selects
 * "x\xff.fc1" as exact_layer_names and layer_types (bytes) would. Without PCRE2_MATCH_INVALID_UTF
 * (PCRE2 < 10.34) such a name makes pcre2_match fail, which dli_selector_match reports. */
#ifdef PCRE2_MATCH_INVALID_UTF
#define UTF_OPTIONS (PCRE2_UTF | PCRE2_MATCH_INVALID_UTF)
#else
#define UTF_OPTIONS PCRE2_UTF
#endif

/* Patterns are Python `re` syntax (the peers compile them with re.compile). Python reads `{,n}` as
 * `{0,n}`, PCRE2 10.42 as the text "{,n}": this copy of `pattern` has a 0 put into each `{,` that
 * Python takes as a quantifier (outside a class, not escaped, digits and `}` after it). *added[i]
 * counts the 0s put in before position i of the copy, to give an error's offset in the pattern as
 * written. NULL when out of memory. */
static char *python_quantifiers(const char *pattern, size_t **added)
{
	size_t len = strlen(pattern), n = 0, at = 0;
	char *out = malloc(2 * len + 1);
	*added = malloc((2 * len + 1) * sizeof **added);
	if (!out || !*added) {
		free(out);
		free(*added);
		return NULL;
	}
	bool in_class = false;
	for (size_t i = 0; i < len; i++) {
		char c = pattern[i];
		(*added)[at] = n;
		out[at++] = c;
		if (c == '\\' && i + 1 < len) {
			(*added)[at] = n;
			out[at++] = pattern[++i];
		} else if (c == '[' && !in_class) {
			in_class = true;
			/* A ']' first in the class (after an optional '^') is a member. */
			if (pattern[i + 1] == '^') {
				(*added)[at] = n;
				out[at++] = pattern[++i];
			}
			if (pattern[i + 1] == ']') {
				(*added)[at] = n;
				out[at++] = pattern[++i];
			}
		} else if (c == ']') {
			in_class = false;
		} else if (c == '{' && !in_class && pattern[i + 1] == ',' &&
			   pattern[i + 1 + strspn(pattern + i + 2, "0123456789") + 1] == '}') {
			(*added)[at] = n++;
			out[at++] = '0';
		}
	}
	(*added)[at] = n;
	out[at] = '\0';
	return out;
}

int dli_selector_set_regex(struct dli_selector *s, const char *pattern, char *msg, size_t msg_size,
			   size_t *offset)
{
	int errcode;
	PCRE2_SIZE erroffset = 0;
	pcre2_code *code;
	char *copy;

	if (!pattern) {
		if (msg && msg_size)
			snprintf(msg, msg_size, "expected a regular expression");
		if (offset)
			*offset = 0;
		return -EINVAL;
	}
	size_t *added;
	char *python = python_quantifiers(pattern, &added);
	if (!python) {
		if (msg && msg_size)
			snprintf(msg, msg_size, "out of memory");
		if (offset)
			*offset = 0;
		return -ENOMEM;
	}
	/* PCRE2_UCP: \w, \d, \s and \b take Unicode's classes, as in Python's str patterns. */
	code = pcre2_compile((PCRE2_SPTR)python, PCRE2_ZERO_TERMINATED, UTF_OPTIONS | PCRE2_UCP,
			     &errcode, &erroffset, NULL);
	erroffset -= added[erroffset <= strlen(python) ? erroffset : strlen(python)];
	free(python);
	free(added);
	if (!code) {
		/* A too-small buffer still gets a truncated, terminated message; that is good enough. */
		if (msg && msg_size)
			pcre2_get_error_message(errcode, (PCRE2_UCHAR *)msg, msg_size);
		if (offset)
			*offset = erroffset;
		return -EINVAL;
	}
	copy = strdup(pattern);
	if (!copy) {
		pcre2_code_free(code);
		if (msg && msg_size)
			snprintf(msg, msg_size, "out of memory");
		if (offset)
			*offset = 0;
		return -ENOMEM;
	}
	/* Only replace what the selector held once the new pattern is known to be good. */
	pcre2_code_free(s->regex);
	free(s->pattern);
	s->regex = code;
	s->pattern = copy;
	return 0;
}

static const char *skip_space(const char *p)
{
	while (isspace((unsigned char)*p))
		p++;
	return p;
}

/* Reads a non-negative decimal number at *p (digits only: no sign). Returns 0 and advances *p, -EINVAL
 * when there is no digit, -ERANGE when it does not fit in int64_t. */
static int parse_number(const char **p, int64_t *out)
{
	const char *q = *p;
	int64_t v = 0;

	if (!isdigit((unsigned char)*q))
		return -EINVAL;
	for (; isdigit((unsigned char)*q); q++) {
		int d = *q - '0';

		if (v > (INT64_MAX - d) / 10)
			return -ERANGE;
		v = v * 10 + d;
	}
	*p = q;
	*out = v;
	return 0;
}

#define RANGE_EXPECTED "expected a layer number or an inclusive range 'a-b' (a <= b)"

int dli_range_parse(const char *text, struct dli_int_pair *out, char *msg, size_t msg_size)
{
	const char *p;
	const char *why = "";
	int64_t a, b;
	int r;

	if (!text)
		text = "";
	p = skip_space(text);
	r = parse_number(&p, &a);
	if (r < 0)
		goto fail;
	p = skip_space(p);
	if (*p == '\0') {
		out->first = out->second = a;
		return 0;
	}
	if (*p != '-') {
		r = -EINVAL;
		goto fail;
	}
	p = skip_space(p + 1);
	r = parse_number(&p, &b);
	if (r < 0)
		goto fail;
	p = skip_space(p);
	if (*p != '\0') {
		r = -EINVAL;
		goto fail;
	}
	if (a > b) {
		why = " (start after end)";
		goto fail;
	}
	out->first = a;
	out->second = b;
	return 0;

fail:
	if (r == -ERANGE)
		why = " (number too large)";
	if (msg && msg_size)
		snprintf(msg, msg_size, RANGE_EXPECTED ", got '%s'%s", text, why);
	return -EINVAL;
}

/* The number of the first dot-separated component made only of digits: 1 found, 0 none,
 * -ERANGE when that component does not fit in int64_t. */
static int dotted_number(const char *name, int64_t *number)
{
	const char *p = name;

	for (;;) {
		const char *end = strchr(p, '.');
		size_t len = end ? (size_t)(end - p) : strlen(p);
		size_t digits = 0;

		while (digits < len && isdigit((unsigned char)p[digits]))
			digits++;
		if (len > 0 && digits == len) {
			const char *q = p;

			return parse_number(&q, number) < 0 ? -ERANGE : 1;
		}
		if (!end)
			return 0;
		p = end + 1;
	}
}

int dli_layer_number(const char *name, int64_t *number)
{
	const char *p;
	const char *candidate = NULL;
	int64_t v;
	int r;

	if (!name)
		return -ENOENT;
	r = dotted_number(name, &v);
	if (r < 0)
		return -ENOENT;
	if (r > 0) {
		*number = v;
		return 0;
	}
	/* No dotted number: accept a name like "Layer_7" or "block7_fc2", but only when exactly one run
	 * of digits can be the layer's number, as nvdlfw_inspect's re.findall(r"(?<!fc)\d+", name)
	 * finds them: a run right after "fc" (the Linear's own index) starts at its second digit, so
	 * "fc1" has none and "fc12" has 2. */
	for (p = name; *p;) {
		if (!isdigit((unsigned char)*p)) {
			p++;
			continue;
		}
		if (p - name >= 2 && p[-2] == 'f' && p[-1] == 'c')
			p++;
		if (isdigit((unsigned char)*p)) {
			if (candidate)
				return -ENOENT;
			candidate = p;
		}
		while (isdigit((unsigned char)*p))
			p++;
	}
	if (!candidate || parse_number(&candidate, &v) < 0)
		return -ENOENT;
	*number = v;
	return 0;
}

/* 1 when the pattern matches somewhere in `name`, 0 when it does not, -EINVAL when PCRE2 could not
 * tell (its match, depth or heap limit: a pattern that backtracks exponentially), with PCRE2's
 * reason in msg. Never "no" for "could not tell": that would silently leave a layer unselected. */
static int regex_search(const pcre2_code *code, const char *name, char *msg, size_t msg_size)
{
	pcre2_match_data *md;
	int rc;

	/* Match data per call keeps matching thread-safe; this runs once per layer handle, not per GEMM. */
	md = pcre2_match_data_create_from_pattern(code, NULL);
	if (!md) {
		snprintf(msg, msg_size, "out of memory");
		return -ENOMEM;
	}
	rc = pcre2_match(code, (PCRE2_SPTR)name, PCRE2_ZERO_TERMINATED, 0, 0, md, NULL);
	pcre2_match_data_free(md);
	if (rc >= 0)
		return 1;
	if (rc == PCRE2_ERROR_NOMATCH)
		return 0;
	if (pcre2_get_error_message(rc, (PCRE2_UCHAR *)msg, msg_size) < 0 && msg_size)
		snprintf(msg, msg_size, "PCRE2 error %d", rc);
	return rc == PCRE2_ERROR_NOMEMORY ? -ENOMEM : -EINVAL;
}

static bool numbers_match(const struct dli_selector *s, const char *name)
{
	int64_t n;

	if (!s->has_numbers || s->numbers_all)
		return true;
	if (dli_layer_number(name, &n) < 0)
		return false;
	for (size_t i = 0; i < s->n_numbers; i++)
		if (s->numbers[i].first <= n && n <= s->numbers[i].second)
			return true;
	return false;
}

static bool types_match(const struct dli_selector *s, const char *name)
{
	if (!s->has_types || s->types_all)
		return true;
	for (size_t i = 0; i < s->n_types; i++)
		if (s->types[i] && strstr(name, s->types[i]))
			return true;
	return false;
}

int dli_selector_match(const struct dli_selector *s, const char *name, char *msg, size_t msg_size)
{
	if (!s || !name)
		return 0;
	if (s->has_exact || s->regex) {
		for (size_t i = 0; s->has_exact && i < s->n_exact; i++)
			if (s->exact[i] && strcmp(s->exact[i], name) == 0)
				return 1;
		return s->regex ? regex_search(s->regex, name, msg, msg_size) : 0;
	}
	/* An empty `layers:` block selects nothing rather than everything. */
	if (!s->has_numbers && !s->has_types)
		return 0;
	return numbers_match(s, name) && types_match(s, name);
}

void dli_selector_finish(struct dli_selector *s)
{
	if (!s)
		return;
	pcre2_code_free(s->regex);
	free(s->pattern);
	for (size_t i = 0; s->exact && i < s->n_exact; i++)
		free(s->exact[i]);
	free(s->exact);
	free(s->numbers);
	for (size_t i = 0; s->types && i < s->n_types; i++)
		free(s->types[i]);
	free(s->types);
	memset(s, 0, sizeof(*s));
}
