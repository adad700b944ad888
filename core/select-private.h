/* Layer selection: which layers a config section's `layers:` block selects. */
#ifndef DLI_SELECT_PRIVATE_H
#define DLI_SELECT_PRIVATE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <dlinspect/plugin.h>

#include "error-private.h"

/* One section's `layers:` block. config.c fills the arrays (owned by the selector, freed with
 * dli_selector_finish) and compiles the regex with dli_selector_set_regex.
 *
 * Semantics: a layer is selected when it is in exact_layer_names, or matches the regex (search,
 * not full match: `fc1` selects `x.fc10`). Only when neither key is present do layer_numbers and
 * layer_types decide, combined with AND; an absent one of those two counts as `all`. */
struct dli_selector {
	void *regex; /* pcre2_code *, or NULL when layer_name_regex_pattern is absent */
	char *pattern;
	struct dli_where pattern_where; /* the pattern's place, for errors found when matching */
	bool has_exact;
	char **exact; /* exact_layer_names */
	size_t n_exact;
	bool has_numbers;
	bool numbers_all;
	struct dli_int_pair *numbers; /* inclusive ranges; a bare int n is [n, n] */
	size_t n_numbers;
	bool has_types;
	bool types_all;
	char **types; /* substrings of the layer name */
	size_t n_types;
};

/* Compiles `pattern` (PCRE2, UTF; names need not be valid UTF-8) into s->regex and copies it to s->pattern. On a bad pattern
 * returns -EINVAL and writes PCRE2's message into msg and the 0-based offset of the error into
 * *offset. */
int dli_selector_set_regex(struct dli_selector *s, const char *pattern, char *msg, size_t msg_size,
			   size_t *offset);

/* Parses one layer_numbers item given as text: "7" or "2-5" (inclusive, a <= b, both >= 0).
 * Returns 0, or -EINVAL with a message in msg ("expected a layer number or a range 'a-b'...") */
int dli_range_parse(const char *text, struct dli_int_pair *out, char *msg, size_t msg_size);

/* The layer number of a name: the first dot-separated component that is all digits
 * ("model.decoder.layers.4.mlp.fc1" -> 4); failing that, the single run of digits not preceded by
 * "fc" ("Layer_7" -> 7). Returns 0 and sets *number, or -ENOENT (no number, or several candidate
 * runs: such a layer matches only `all`). */
int dli_layer_number(const char *name, int64_t *number);

/* Whether the section selects the layer `name`: 1 yes, 0 no, or a negative errno when it cannot
 * tell (PCRE2 reached its match, depth or heap limit on the regex), with PCRE2's reason in msg.
 * Thread-safe (no shared mutable state). */
int dli_selector_match(const struct dli_selector *s, const char *name, char *msg, size_t msg_size);

/* Frees what the selector owns and zeroes it. Accepts a zeroed selector. */
void dli_selector_finish(struct dli_selector *s);

#endif
