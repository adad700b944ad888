/* A string set with open addressing (linear probing, FNV-1a), kept at most half full. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "strset-private.h"

static uint64_t str_hash(const char *s)
{
	uint64_t h = 1469598103934665603ull;
	for (; *s; s++)
		h = (h ^ (unsigned char)*s) * 1099511628211ull;
	return h;
}

static struct dli_strset_slot *probe(const struct dli_strset *set, const char *key)
{
	for (size_t i = str_hash(key) & set->mask;; i = (i + 1) & set->mask)
		if (!set->slots[i].key || !strcmp(set->slots[i].key, key))
			return &set->slots[i];
}

size_t *dli_strset_find(const struct dli_strset *set, const char *key)
{
	if (!set->slots)
		return NULL;
	struct dli_strset_slot *s = probe(set, key);
	return s->key ? &s->value : NULL;
}

static int grow(struct dli_strset *set)
{
	size_t cap = set->slots ? 2 * (set->mask + 1) : 16;
	struct dli_strset old = *set;
	set->slots = calloc(cap, sizeof *set->slots);
	if (!set->slots) {
		*set = old;
		return -1;
	}
	set->mask = cap - 1;
	for (size_t i = 0; old.slots && i <= old.mask; i++)
		if (old.slots[i].key)
			*probe(set, old.slots[i].key) = old.slots[i];
	free(old.slots);
	return 0;
}

size_t *dli_strset_slot(struct dli_strset *set, const char *key, bool *added)
{
	if ((!set->slots || 2 * (set->n + 1) > set->mask + 1) && grow(set))
		return NULL;
	struct dli_strset_slot *s = probe(set, key);
	*added = !s->key;
	if (!s->key) {
		s->key = key;
		s->value = 0;
		set->n++;
	}
	return &s->value;
}

void dli_strset_finish(struct dli_strset *set)
{
	free(set->slots);
	memset(set, 0, sizeof *set);
}
