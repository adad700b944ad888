/* Feature blocks: a feature's keys in a section (the shared ones of feature-keys.c and its own
 * parameters), their gemms_struct/tensors_struct entries, and the targets they make. */
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "config-blocks-private.h"
#include "config-types-private.h"
#include "config-values-private.h"
#include "config-yaml-private.h"
#include "feature-keys-private.h"
#include "names-private.h"
#include "registry-private.h"
#include "strset-private.h"

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
		return dli_cfg_fail(rs, n, "more than %d distinct tensor names", DLI_MAX_TENSORS),
		       -1;
	for (size_t i = 0; i < cfg->n_declared_tensors; i++)
		if (!strcmp(cfg->declared_tensors[i], n->text))
			return add_tensor_name(cfg, n);
	/* Every name the config could have meant: the standard ones and the host's. */
	const char *known[DLI_TENSOR_STANDARD_COUNT + 64];
	size_t n_known = 0;
	for (size_t i = 0; i < DLI_TENSOR_STANDARD_COUNT; i++)
		known[n_known++] = dli_standard_tensor_name((int)i);
	for (size_t i = 0; i < cfg->n_declared_tensors && n_known < sizeof known / sizeof *known; i++)
		known[n_known++] = cfg->declared_tensors[i];
	const char *close = dli_suggest(n->text, known, n_known);
	char hint[160] = "";
	if (close)
		snprintf(hint, sizeof hint, " (did you mean '%s'?)", close);
	if (rs->base_ns) {
		/* The base namespace's tensors are whatever the host passes to log_tensor_stats. */
		if (close &&
		    dli_cfg_warn(rs, n,
				 "'%s' is not a standard tensor%s; it is taken as the name of "
				 "a host's own tensor",
				 n->text, hint))
			return -1;
		return add_tensor_name(cfg, n);
	}
	if (cfg->tensors_declared)
		return dli_cfg_fail(
			   rs, n,
			   "unknown tensor '%s'%s: not a standard tensor (activation, gradient, "
			   "weight, output, wgrad, dgrad) nor one the host declares%s",
			   n->text, hint,
			   cfg->n_declared_tensors ? ""
						   : " (it declares none; `dlinspect check "
						     "--allow-tensor NAME` accepts one)"),
		       -1;
	/* Undeclared: a host's own name, unless it looks like a misspelled standard one. */
	if (!close)
		return add_tensor_name(cfg, n);
	if (dli_cfg_warn(
		rs, n,
		"'%s' is not a standard tensor%s; it is taken as the name of a host's own "
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
	int r = dli_cfg_want_list(rs, n, "gemms (fprop, dgrad, wgrad)", &items, &count);
	if (r)
		return r;
	const struct dli_node *first[DLI_GEMM_COUNT] = {0};
	*mask = 0;
	for (size_t i = 0; i < count; i++) {
		int g = dli_cfg_want_choice(rs, items[i], dli_gemm_names(), DLI_GEMM_COUNT, "gemm");
		if (g < 0)
			return -EINVAL;
		if (first[g])
			return dli_cfg_listed_twice(rs, items[i], dli_gemm_name(g), first[g]);
		first[g] = items[i];
		*mask |= 1u << g;
	}
	return 0;
}

static int read_tensors(struct resolver *rs, const struct dli_node *n, uint64_t *mask)
{
	const struct dli_node *const *items;
	size_t count;
	int r = dli_cfg_want_list(rs, n, "tensor names", &items, &count);
	if (r)
		return r;
	const struct dli_node *first[DLI_MAX_TENSORS] = {0};
	*mask = 0;
	for (size_t i = 0; i < count; i++) {
		int t = tensor_id_for(rs, items[i]);
		if (t < 0)
			return -EINVAL;
		if (first[t])
			return dli_cfg_listed_twice(rs, items[i], rs->cfg->tensor_names[t],
						    first[t]);
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

/* After a base-namespace feature refused `v` for its key `key`: when TransformerEngine's feature
 * of the same name takes it (its LogTensorStats' cur_amax or max_blockwise_dynamic_range), the
 * error says where the block belongs. */
static void hint_transformer_engine(struct resolver *rs, const struct dli_feature_desc *d,
				    const char *key, const struct dli_node *v)
{
	const struct dli_feature_entry *te =
	    dli_registry_feature_in(rs->reg, "transformer_engine", d->name);
	int j = te ? dli_cfg_schema_find(te->desc->params, te->desc->n_params, key) : -1;
	if (j < 0 || !rs->err)
		return;
	struct dli_error *keep = rs->err, scratch;
	struct dli_value val = {0};
	int own = dli_cfg_schema_find(d->params, d->n_params, key);
	rs->err = &scratch;
	/* Only a value this feature refuses and TransformerEngine's takes (not, say, a key given
	 * twice). */
	bool refused = own < 0 || dli_cfg_parse_value(rs, &d->params[own], v, &val) != 0;
	rs->base_ns = false;
	bool takes = refused && dli_cfg_parse_value(rs, &te->desc->params[j], v, &val) == 0;
	rs->base_ns = true;
	rs->err = keep;
	size_t len = strlen(keep->message);
	if (takes && len < sizeof keep->message)
		snprintf(keep->message + len, sizeof keep->message - len,
			 " (TransformerEngine's %s takes it: put the block under "
			 "'transformer_engine:')", d->name);
}

/* A schedule key whose value the peer takes as not given. TransformerEngine's next_enabled_iter reads
 * start_step, end_step and start_end_list with None for "not given" and skips an empty
 * start_end_list (a null freq would raise). nvdlfw_inspect's LogTensorStats takes a null freq as 1
 * and skips a null or empty start_end_list, but compares with a null start_step or end_step and
 * raises: those stay errors in the base namespace. */
static bool sched_not_given(enum dli_shared_key_id id, const struct dli_node *v, bool base_ns)
{
	if (id == DLI_KEY_START_END_LIST)
		return dli_cfg_is_null(v) || (v->kind == DLI_NODE_SEQ && v->n == 0);
	if (!dli_cfg_is_null(v))
		return false;
	if (id == DLI_KEY_FREQ)
		return base_ns;
	return !base_ns && (id == DLI_KEY_START_STEP || id == DLI_KEY_END_STEP);
}

/* One key of a feature block or struct entry. `entry_key` is "gemm" or "tensor" inside struct
 * entries (NULL in the block itself). */
static int block_key(struct resolver *rs, const struct dli_feature_entry *fe, struct block *b,
		     const struct dli_node *key, const struct dli_node *v, const char *entry_key)
{
	const struct dli_feature_desc *d = fe->desc;
	const char *k = key->text;
	size_t mark = dli_cfg_path_push(rs, k);
	int r = 0;
	const struct dli_shared_key *sk = dli_shared_key_find(k);
	enum dli_shared_key_id id = sk && dli_shared_key_applies(sk, d->flags, entry_key)
					    ? (enum dli_shared_key_id)(sk - dli_shared_keys)
					    : DLI_KEY_COUNT;
	if (id == DLI_KEY_ENABLED) {
		r = dli_cfg_want_bool(rs, v, &b->enabled);
		b->has_enabled = true;
	} else if (id == DLI_KEY_GEMMS) {
		r = read_gemms(rs, v, &b->gemms);
		b->has_gemms = true;
	} else if (id == DLI_KEY_TENSORS) {
		r = read_tensors(rs, v, &b->tensors);
		b->has_tensors = true;
	} else if (id == DLI_KEY_GEMMS_STRUCT) {
		if (v->kind != DLI_NODE_SEQ || v->n == 0)
			r = dli_cfg_fail(
			    rs, v, "expected a list of entries like '{gemm: fprop, ...}', got %s",
			    dli_cfg_kind_name(v));
		b->gemms_struct = v;
	} else if (id == DLI_KEY_TENSORS_STRUCT) {
		if (v->kind != DLI_NODE_SEQ || v->n == 0)
			r = dli_cfg_fail(
			    rs, v,
			    "expected a list of entries like '{tensor: activation, ...}', "
			    "got %s",
			    dli_cfg_kind_name(v));
		b->tensors_struct = v;
	} else if (id < DLI_KEY_COUNT && sched_not_given(id, v, rs->base_ns)) {
		/* In a struct entry it drops the block's value, as the peer's dict update does. */
		if (id == DLI_KEY_START_END_LIST)
			b->has_ranges = false;
		else
			b->sched_set[id == DLI_KEY_FREQ ? 0 : id == DLI_KEY_START_STEP ? 1 : 2] = false;
	} else if (id == DLI_KEY_FREQ || id == DLI_KEY_START_STEP || id == DLI_KEY_END_STEP) {
		int i = id == DLI_KEY_FREQ ? 0 : id == DLI_KEY_START_STEP ? 1 : 2;
		r = dli_cfg_want_int(rs, v, &b->sched[i]);
		if (!r && i == 0 && b->sched[0] < 1)
			r = dli_cfg_fail(rs, v, "expected an integer >= 1, got %lld",
					 (long long)b->sched[0]);
		if (!r && i == 1 && b->sched[i] < 0)
			r = dli_cfg_fail(rs, v, "expected a step >= 0, got %lld",
					 (long long)b->sched[i]);
		/* -1: no end, as both peers document it. */
		if (!r && i == 2 && b->sched[i] < -1)
			r = dli_cfg_fail(rs, v, "expected a step >= 0, or -1 for no end, got %lld",
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
	} else if (id == DLI_KEY_START_END_LIST) {
		static const struct dli_param_desc pairs = {.key = "start_end_list",
							    .type = DLI_PARAM_INT_PAIRS};
		r = dli_cfg_parse_value(rs, &pairs, v, &b->ranges);
		/* Stored inclusive. The base namespace's end is exclusive (nvdlfw_inspect's
		 * enable_logging_at_current_step: step < end), TransformerEngine's inclusive
		 * (next_enabled_iter: s <= step <= e); -1 is no end in both. */
		bool exclusive = !strcmp(dli_feature_entry_ns(fe), DLI_NS_BASE);
		for (size_t i = 0; !r && i < b->ranges.u.pairs.n; i++) {
			struct dli_int_pair *p = (struct dli_int_pair *)&b->ranges.u.pairs.items[i];
			if (p->first < 0 || (p->second != -1 && p->second < p->first + exclusive))
				r = dli_cfg_fail(
				    rs, v->items[i],
				    "expected [start, end] with 0 <= start %s end, "
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
	} else if (id == DLI_KEY_IN_EVAL) {
		r = dli_cfg_want_bool(rs, v, &b->in_eval);
	} else {
		int idx = dli_cfg_schema_find(d->params, d->n_params, k);
		if (idx >= 0) {
			dli_cfg_path_pop(rs, mark);
			r = dli_cfg_set_param(rs, d->params, idx, key, v, b->params, b->set_here);
			b->set_here[idx] = true;
			if (r == -EINVAL && rs->base_ns)
				hint_transformer_engine(rs, d, d->params[idx].key, v);
			return r;
		}
		/* Unknown: suggest among every key this feature takes here. */
		bool in_gemm = entry_key && !strcmp(entry_key, "gemm");
		bool in_tensor = entry_key && !strcmp(entry_key, "tensor");
		/* Every shared key it takes here, and each parameter's key and alias. */
		const char **cands = malloc((DLI_KEY_COUNT + 2 * d->n_params) * sizeof *cands);
		size_t nc = 0;
		if (!cands)
			return -ENOMEM;
		for (size_t i = 0; i < DLI_KEY_COUNT; i++)
			if (dli_shared_key_applies(&dli_shared_keys[i], d->flags, entry_key))
				cands[nc++] = dli_shared_keys[i].key;
		for (size_t i = 0; i < d->n_params; i++) {
			cands[nc++] = d->params[i].key;
			if (d->params[i].alias)
				cands[nc++] = d->params[i].alias;
		}
		char hint[128];
		dli_suggest_text(hint, sizeof hint, k, cands, nc);
		free(cands);
		dli_cfg_path_pop(rs, mark);
		const char *why = "", *open = "", *close = "";
		if (sk && entry_key && sk == &dli_shared_keys[DLI_KEY_ENABLED])
			why = " ('enabled' belongs to the feature block, not to a struct entry)";
		else if (sk && (d->flags & sk->flag)) /* taken, just not inside this struct entry */
			why = in_gemm ? " (not inside a gemms_struct entry: its 'gemm:' says which GEMM)"
			      : in_tensor ? " (not inside a tensors_struct entry: its 'tensor:' says "
					    "which tensor)"
					  : "";
		else if (sk && sk->not_taken) {
			why = sk->not_taken;
			open = " (";
			close = ")";
		}
		return dli_cfg_fail(rs, key, "unknown key '%s' for %s%s%s%s%s", k, d->name, hint,
				    open, why, close);
	}
	dli_cfg_path_pop(rs, mark);
	return r;
}

static int block_copy(struct dli_config *cfg, const struct dli_feature_desc *d, const struct block *from,
		      struct block *to)
{
	*to = *from;
	to->gemms_struct = to->tensors_struct = NULL;
	to->steps_here = to->ranges_here = to->sched_here = false;
	to->params = dli_cfg_calloc(cfg, d->n_params, sizeof *to->params);
	to->set_here = dli_cfg_calloc(cfg, d->n_params + 1, sizeof *to->set_here);
	if (!to->params || !to->set_here)
		return -ENOMEM;
	memcpy(to->params, from->params, d->n_params * sizeof *to->params);
	return 0;
}

/* config->targets grows by doubling from TARGETS_MIN, so its capacity follows from the count. It is
 * not sized from the tree up front: with YAML aliases the tree can stand for exponentially many
 * nodes (a few lines of "billion laughs" took minutes, then failed for lack of memory). */
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
		return dli_cfg_fail(
		    rs, b->first_sched_key,
		    "start_end_list replaces start_step/end_step: give one or the other");
	if (b->sched_set[1] && b->sched_set[2] && b->sched[2] != -1 && b->sched[2] < b->sched[1])
		return dli_cfg_fail(rs, b->first_sched_key,
				    "end_step (%lld) is before start_step (%lld)",
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
	t->where_text = dli_cfg_where_text(cfg, &at->where);
	t->gemms = (d->flags & DLI_FEATURE_GEMMS) ? b->gemms : (1u << DLI_GEMM_COUNT) - 1;
	t->tensors = (d->flags & DLI_FEATURE_TENSORS) ? b->tensors : ~0ull;
	t->params = b->params;
	t->in_eval = b->in_eval;
	t->schedule.freq = b->sched_set[0] ? b->sched[0] : 1;
	t->freq_given = b->sched_set[0];
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
			return dli_cfg_fail(
			    rs, at,
			    "%s is configured twice for the same gemm/tensor of these "
			    "layers: here and at %s",
			    d->name, o->where_text);
		if ((d->flags & DLI_FEATURE_MODIFIES) && (o->feature->desc->flags & DLI_FEATURE_MODIFIES))
			return dli_cfg_fail(
			    rs, at,
			    "%s and %s (at %s) would both modify the same tensor of "
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
		return dli_cfg_fail(rs, b->gemms_struct,
				    "give 'gemms' or 'gemms_struct', not both");
	if (b->tensors_struct && b->has_tensors)
		return dli_cfg_fail(rs, b->tensors_struct,
				    "give 'tensors' or 'tensors_struct', not both");
	if (b->gemms_struct && b->tensors_struct)
		return dli_cfg_fail(rs, b->tensors_struct,
				    "give 'tensors_struct' inside the gemms_struct "
				    "entries, not beside gemms_struct");
	if (b->gemms_struct)
		return read_struct(rs, s, fe, b, b->gemms_struct, "gemm", make_targets);
	if (b->tensors_struct)
		return read_struct(rs, s, fe, b, b->tensors_struct, "tensor", make_targets);
	/* A disabled block may leave out what it acts on: flipping `enabled` is how users park one. */
	if ((d->flags & DLI_FEATURE_GEMMS) && !b->has_gemms && b->enabled)
		return dli_cfg_fail(
		    rs, at, "%s needs 'gemms' (or 'gemms_struct'): which of fprop, dgrad, wgrad",
		    d->name);
	if ((d->flags & DLI_FEATURE_TENSORS) && !b->has_tensors && b->enabled)
		return dli_cfg_fail(rs, at,
				    "%s needs 'tensors' (or 'tensors_struct'), e.g. [activation, "
				    "gradient, weight]",
				    d->name);
	int r = dli_cfg_fill_defaults(rs, d->params, d->n_params, b->params, d->name, at);
	if (r || !make_targets)
		return r;
	return add_target(rs, s, fe, b, at);
}

static int read_struct(struct resolver *rs, struct dli_section *s, const struct dli_feature_entry *fe,
		       const struct block *parent, const struct dli_node *list, const char *entry_key,
		       bool make_targets)
{
	size_t mark =
	    dli_cfg_path_push(rs, !strcmp(entry_key, "gemm") ? "gemms_struct" : "tensors_struct");
	const struct dli_node *first_of_gemm[DLI_GEMM_COUNT] = {0};
	for (size_t i = 0; i < list->n; i++) {
		const struct dli_node *e = list->items[i];
		if (e->kind != DLI_NODE_MAP)
			return dli_cfg_fail(rs, e,
					    "expected an entry like '{%s: ..., ...}', got %s",
					    entry_key, dli_cfg_kind_name(e));
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
			return dli_cfg_fail(rs, e, "entry without '%s:'", entry_key);
		size_t m2 = dli_cfg_path_push(rs, entry_key);
		int r = dli_cfg_want_scalar(rs, id, entry_key);
		int g = -1;
		if (!r && !strcmp(entry_key, "gemm")) {
			g = dli_cfg_want_choice(rs, id, dli_gemm_names(), DLI_GEMM_COUNT, "gemm");
			r = g < 0 ? -EINVAL : 0;
			b.gemms = g < 0 ? 0 : 1u << g;
			b.has_gemms = true;
		} else if (!r) {
			int t = tensor_id_for(rs, id);
			r = t < 0 ? -EINVAL : 0;
			b.tensors = t < 0 ? 0 : 1ull << t;
			b.has_tensors = true;
		}
		dli_cfg_path_pop(rs, m2);
		/* TransformerEngine's _process_transformer_engine_config takes the first entry whose
		 * gemm matches and never reads on: a later one is checked, and does nothing. */
		bool ignored = !r && g >= 0 && first_of_gemm[g];
		if (ignored)
			r = dli_cfg_warn(rs, e,
					 "this entry is ignored: gemm '%s' has an entry before it (at "
					 "line %d, column %d), and TransformerEngine reads only the "
					 "first entry of a GEMM; give the GEMM one entry (a "
					 "tensors_struct in it can set each tensor's keys)",
					 id->text, first_of_gemm[g]->where.line,
					 first_of_gemm[g]->where.column);
		else if (g >= 0)
			first_of_gemm[g] = e;
		if (!r)
			r = finish_block(rs, s, fe, &b, e, make_targets && !ignored);
		if (r)
			return r;
	}
	dli_cfg_path_pop(rs, mark);
	return 0;
}

/* Whether block `v` says `enabled: false` (a value that is not a bool is the block's error). */
static bool block_disabled(struct resolver *rs, const struct dli_node *v)
{
	bool on = true;
	struct dli_error *keep = rs->err;
	struct dli_error scratch;
	rs->err = &scratch; /* the block's own reading says what is wrong with its `enabled` */
	for (size_t i = 0; v->kind == DLI_NODE_MAP && i < v->n; i++)
		if (!strcmp(v->keys[i]->text, "enabled") && dli_cfg_want_bool(rs, v->items[i], &on))
			on = true;
	rs->err = keep;
	return !on;
}

static int read_block(struct resolver *rs, struct dli_section *s,
		      const struct dli_feature_entry *fe, const struct dli_node *key,
		      const struct dli_node *v);

int dli_cfg_read_feature(struct resolver *rs, struct dli_section *s,
			 const struct dli_feature_entry *fe, const struct dli_node *key,
			 const struct dli_node *v)
{
	size_t mark = strlen(rs->path);
	bool off = s->enabled && block_disabled(rs, v);
	int r = read_block(rs, s, fe, key, v);
	/* A disabled block is still checked, so that a typo in it shows before someone enables it,
	 * but as a warning: the peers do not read a disabled block at all. */
	if (r == -EINVAL && off) {
		dli_cfg_path_pop(rs, mark);
		rs->base_ns = false;
		return dli_cfg_demote(rs, "the feature block is disabled");
	}
	return r;
}

static int read_block(struct resolver *rs, struct dli_section *s,
		      const struct dli_feature_entry *fe, const struct dli_node *key,
		      const struct dli_node *v)
{
	const struct dli_feature_desc *d = fe->desc;
	size_t mark = dli_cfg_path_push(rs, key->text);
	rs->base_ns = !strcmp(dli_feature_entry_ns(fe), DLI_NS_BASE);
	if (v->kind != DLI_NODE_MAP)
		return dli_cfg_fail(rs, v,
				    "expected a mapping with 'enabled' and %s's keys, got %s",
				    d->name, dli_cfg_kind_name(v));
	struct block b = {0};
	b.params = dli_cfg_calloc(rs->cfg, d->n_params, sizeof *b.params);
	b.set_here = dli_cfg_calloc(rs->cfg, d->n_params + 1, sizeof *b.set_here);
	if (!b.params || !b.set_here)
		return -ENOMEM;
	for (size_t i = 0; i < v->n; i++) {
		int r = block_key(rs, fe, &b, v->keys[i], v->items[i], NULL);
		if (r)
			return r;
	}
	if (!b.has_enabled)
		return dli_cfg_fail(rs, key, "missing 'enabled' (true or false)");
	int r = finish_block(rs, s, fe, &b, key, s->enabled && b.enabled);
	dli_cfg_path_pop(rs, mark);
	rs->base_ns = false;
	return r;
}

const struct dli_feature_entry *dli_cfg_feature_lookup(struct resolver *rs, const char *name)
{
	return dli_registry_feature(rs->reg, name);
}

/* A feature block directly in a section: the base namespace's feature of that name (nvdlfw_inspect's
 * generic ones, e.g. its LogTensorStats), else one that another namespace declares generic. Two
 * namespaces that both declare a generic feature of the name leave it open which is meant: taking
 * the first loaded would make the order of `extensions` choose the code that runs, unseen, so
 * *other gets the second (NULL when there is none) and the caller refuses the block. */
const struct dli_feature_entry *dli_cfg_direct_feature(struct resolver *rs, const char *name,
							const struct dli_feature_entry **other)
{
	const struct dli_feature_entry *fe = dli_registry_feature_in(rs->reg, DLI_NS_BASE, name);
	*other = NULL;
	if (fe)
		return fe;
	for (size_t i = 0; !*other && i < rs->reg->n_features; i++) {
		const struct dli_feature_entry *e = &rs->reg->features[i];
		if (!(e->desc->flags & DLI_FEATURE_GENERIC) ||
		    dli_registry_feature_in(rs->reg, dli_feature_entry_ns(e), name) != e)
			continue;
		if (!fe)
			fe = e;
		else
			*other = e;
	}
	return fe;
}
