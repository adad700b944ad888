/* The keys the core reads for every feature (`enabled`, `gemms`, `tensors`, the schedule, ...),
 * in one table: the config parser (core/config.c) recognizes them from it, its did-you-mean
 * candidates come from it, and `dlinspect plugins --explain` prints it. */
#ifndef DLI_FEATURE_KEYS_PRIVATE_H
#define DLI_FEATURE_KEYS_PRIVATE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum dli_shared_key_id {
	DLI_KEY_ENABLED,
	DLI_KEY_GEMMS,
	DLI_KEY_GEMMS_STRUCT,
	DLI_KEY_TENSORS,
	DLI_KEY_TENSORS_STRUCT,
	DLI_KEY_FREQ,
	DLI_KEY_START_STEP,
	DLI_KEY_END_STEP,
	DLI_KEY_START_END_LIST,
	DLI_KEY_IN_EVAL,
	DLI_KEY_COUNT
};

struct dli_shared_key {
	const char *key;
	/* The DLI_FEATURE_* flag a feature needs to take the key (0: every feature takes it). */
	uint32_t flag;
	/* Where besides the feature block it may stand: inside a gemms_struct / tensors_struct
	 * entry. */
	bool in_gemm_entry, in_tensor_entry;
	/* For --explain: the value's type and its default ("required", "default 1"), and what it
	 * does; type NULL: no line of its own (the struct forms, named in their list key's doc). */
	const char *type, *default_text, *doc;
	/* The reason added to "unknown key" when a feature lacks `flag` (NULL: none). */
	const char *not_taken;
};

/* DLI_KEY_COUNT entries, indexed by enum dli_shared_key_id, in the order the did-you-mean list
 * and --explain use. */
extern const struct dli_shared_key dli_shared_keys[DLI_KEY_COUNT];

/* The shared key called `key`, or NULL. */
const struct dli_shared_key *dli_shared_key_find(const char *key);

/* Whether a feature with `flags` takes `k` in the block (entry_key NULL) or in a struct entry
 * (entry_key "gemm" or "tensor"). */
bool dli_shared_key_applies(const struct dli_shared_key *k, uint32_t flags, const char *entry_key);

#endif
