/* A set of borrowed strings, each with a size_t value: the config reader's duplicate checks and
 * alias lookups, in linear time however long a list or mapping is. */
#ifndef DLI_STRSET_PRIVATE_H
#define DLI_STRSET_PRIVATE_H

#include <stdbool.h>
#include <stddef.h>

struct dli_strset {
	struct dli_strset_slot {
		const char *key; /* borrowed: must outlive the set */
		size_t value;
	} *slots;
	size_t mask; /* capacity - 1; 0 with no slots yet */
	size_t n;
};

/* The value slot for `key`, added (value 0, *added = true) when the set lacks it. NULL when out of
 * memory. The pointer is valid until the next call that adds a key. A zeroed set is empty. */
size_t *dli_strset_slot(struct dli_strset *set, const char *key, bool *added);

/* The value slot for `key`, or NULL when the set lacks it. */
size_t *dli_strset_find(const struct dli_strset *set, const char *key);

/* Frees the slots (not the keys) and zeroes the set. */
void dli_strset_finish(struct dli_strset *set);

#endif
