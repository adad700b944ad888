/* The statistics features' shared part (stats-skeleton.h): names, accumulators, step-end logging. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "feature-util.h"
#include "stats-skeleton.h"

void *dli_sf_create(const struct dli_feature_create_args *args, size_t size, struct dli_error *err,
		    int *r)
{
	struct dli_sf *sf;

	*r = -ENOTSUP;
	if (!dli_feature_has_stats(args->host, err))
		return NULL;
	*r = -ENOMEM;
	if (!(sf = calloc(1, size)))
		return NULL;
	sf->host = args->host;
	sf->ctx = args->ctx;
	sf->tensors = args->tensors;
	if (dli_feature_schedule_copy(&sf->schedule, args->schedule)) {
		free(sf);
		return NULL;
	}
	*r = 0;
	return sf;
}

void dli_sf_destroy(void *instance)
{
	struct dli_sf *sf = instance;

	if (!sf)
		return;
	for (size_t i = 0; i < sf->n_stats; i++)
		free(sf->stats[i].log_name);
	free(sf->stats);
	free((void *)sf->schedule.ranges);
	if (sf->reduce_on)
		dli_reduce_conf_free(&sf->reduce);
	free(sf);
}

/* The statistics' names, indexed by enum dli_stat: the spellings of the choices macros. A
 * statistic added to the enum needs its name here (and in a macro) first. */
static const char *const stat_names[] = {DLI_SF_PLAIN_NAMES, DLI_SF_FP8_NAMES("", "")};
_Static_assert(sizeof(stat_names) / sizeof(stat_names[0]) == DLI_STAT_COUNT,
	       "stats-skeleton.h: one name per enum dli_stat");

/* Whether `name` is `{prefix}{stat}{suffix}` for a statistic of `r`; the statistic in *stat. */
static bool recipe_take(const struct dli_sf_recipe *r, const char *name, enum dli_stat *stat)
{
	const char *prefix = r->prefix ? r->prefix : "", *suffix = r->suffix ? r->suffix : "";
	size_t lp = strlen(prefix), ls = strlen(suffix), ln = strlen(name);

	if (ln < lp + ls || strncmp(name, prefix, lp) || strcmp(name + ln - ls, suffix))
		return false;
	for (int s = 0; s < DLI_STAT_COUNT; s++)
		if ((r->stats & DLI_SF_STAT_BIT(s)) && strlen(stat_names[s]) == ln - lp - ls &&
		    !strncmp(name + lp, stat_names[s], ln - lp - ls)) {
			*stat = (enum dli_stat)s;
			return true;
		}
	return false;
}

int dli_sf_want(struct dli_sf *sf, const char *name, const struct dli_sf_recipe *recipes,
		size_t n_recipes, struct dli_error *err)
{
	size_t i = 0;
	enum dli_stat stat = DLI_STAT_COUNT;

	while (i < n_recipes && !recipe_take(&recipes[i], name, &stat))
		i++;
	if (i == n_recipes) {
		snprintf(err->message, sizeof(err->message), "stats: '%s' is not a statistic of this "
			 "feature", name);
		return -ENOENT;
	}
	/* The host computes and names the statistics: one older than these headers may lack it. */
	const char *hs = sf->host->stat_name(stat);
	if (!hs || strcmp(hs, stat_names[stat])) {
		snprintf(err->message, sizeof(err->message), "this dlinspect lacks a listed statistic");
		return -EINVAL;
	}
	const char *lp = recipes[i].log_prefix ? recipes[i].log_prefix : "";
	size_t len = strlen(lp) + strlen(name) + 1;
	char *log_name = malloc(len);
	if (!log_name)
		return -ENOMEM;
	snprintf(log_name, len, "%s%s", lp, name);
	/* `underflows: true` and `stats: [underflows%]` are one statistic: the second is skipped. */
	int r = dli_sf_want_as(sf, stat, recipes[i].slot, log_name, false, err);
	free(log_name);
	return r;
}

int dli_sf_want_as(struct dli_sf *sf, enum dli_stat stat, unsigned slot, const char *log_name,
		   bool orientations, struct dli_error *err)
{
	if (slot >= DLI_SF_MAX_SLOTS) {
		snprintf(err->message, sizeof(err->message), "stats: '%s': slot %u of %d", log_name,
			 slot, DLI_SF_MAX_SLOTS);
		return -EINVAL;
	}
	for (size_t k = 0; k < sf->n_stats; k++)
		if (!strcmp(sf->stats[k].log_name, log_name))
			return 0;
	if (sf->n_stats == sf->cap_stats) {
		size_t cap = sf->cap_stats ? 2 * sf->cap_stats : 16;
		struct dli_sf_stat *more = realloc(sf->stats, cap * sizeof(*more));
		if (!more)
			return -ENOMEM;
		sf->stats = more;
		sf->cap_stats = cap;
	}
	char *copy = dli_feature_strdup(log_name);
	if (!copy)
		return -ENOMEM;
	sf->stats[sf->n_stats++] = (struct dli_sf_stat){
		.stat = stat, .slot = slot, .log_name = copy, .orientations = orientations};
	sf->slots |= 1u << slot;
	return 0;
}

int dli_sf_reduce_read(struct dli_sf *sf, const struct dli_value *params, size_t first,
		       const char *where, const char *const *roles)
{
	if (dli_reduce_conf_read(&sf->reduce, params, first, where))
		return -ENOMEM;
	sf->reduce_on = true;
	sf->roles = roles;
	return 0;
}

void dli_sf_layer_detach(void *instance, void *layer_state)
{
	const struct dli_sf *sf = instance;
	struct dli_sf_layer *l = layer_state;

	for (size_t i = 0; l && i < l->n; i++)
		for (unsigned s = 0; s < DLI_SF_MAX_SLOTS; s++)
			sf->host->stats_acc_destroy(l->t[i].acc[s]);
	free(l);
}

int dli_sf_layer_attach(void *instance, const char *layer_name, void **layer_state)
{
	const struct dli_sf *sf = instance;
	const struct dli_host *host = sf->host;
	size_t n = (size_t)__builtin_popcountll(sf->tensors), k = 0;
	struct dli_sf_layer *l = calloc(1, sizeof(*l) + n * sizeof(l->t[0]));
	uint32_t slots = sf->slots | (sf->histogram ? 1u : 0u);

	if (!l)
		return -ENOMEM;
	for (int id = 0; id < 64; id++) {
		if (!(sf->tensors >> id & 1u))
			continue;
		struct dli_sf_tensor *t = &l->t[k];
		t->id = id;
		atomic_init(&t->weight_step, -1);
		l->n = ++k;
		for (unsigned s = 0; s < DLI_SF_MAX_SLOTS; s++) {
			if (!(slots >> s & 1u))
				continue;
			if (!(t->acc[s] = host->stats_acc_create(sf->ctx)) ||
			    (s == 0 && sf->histogram && host->stats_acc_histogram(t->acc[s], true))) {
				dli_sf_layer_detach(instance, l);
				return -ENOMEM;
			}
			if (sf->reduce_on)
				dli_reduce_share(host, sf->ctx, &sf->reduce, t->acc[s], layer_name, id,
						 sf->roles[s], &sf->schedule);
		}
	}
	*layer_state = l;
	return 0;
}

bool dli_sf_inspect_tensor_enabled(const struct dli_feature_call *c, int tensor, int64_t iteration,
				   int64_t *next)
{
	const struct dli_sf *sf = c->instance;

	(void)tensor;
	return sf->host->schedule_query(&sf->schedule, iteration, next);
}

struct dli_sf_tensor *dli_sf_tensor(const struct dli_feature_call *c, int tensor)
{
	struct dli_sf_layer *l = c->layer_state;

	for (size_t i = 0; l && i < l->n; i++)
		if (l->t[i].id == tensor)
			return &l->t[i];
	return NULL;
}

bool dli_sf_weight_seen(const struct dli_feature_call *c, struct dli_sf_tensor *t)
{
	const struct dli_sf *sf = c->instance;

	if (t->id != DLI_TENSOR_WEIGHT)
		return false;
	int64_t step = sf->host->iteration(c->ctx);
	return atomic_exchange(&t->weight_step, step) == step;
}

int dli_sf_weight_done(struct dli_sf_tensor *t, int r)
{
	if (!r || t->id != DLI_TENSOR_WEIGHT)
		return r;
	for (unsigned s = 0; s < DLI_SF_MAX_SLOTS; s++)
		if (atomic_load(&t->added[s]))
			return r;
	atomic_store(&t->weight_step, -1);
	return r;
}

int dli_sf_added(struct dli_sf_tensor *t, unsigned slot, int r)
{
	if (r == 0)
		atomic_store(&t->added[slot], true);
	return r;
}

int dli_sf_emit(const struct dli_sf *sf, struct dli_context *ctx, const char *layer,
		const char *tensor, int64_t iteration, const struct dli_stats_record *rec,
		const bool *have, const char (*mark)[32], struct dli_stats_acc *hist_acc)
{
	const struct dli_host *host = sf->host;
	struct dli_feature_tag tag;
	int r = 0;

	for (size_t k = 0; k < sf->n_stats; k++) {
		const struct dli_sf_stat *s = &sf->stats[k];
		if (!have[s->slot])
			continue;
		bool both = s->orientations &&
			    (!strcmp(tensor, "activation") || !strcmp(tensor, "weight"));
		const char *name = dli_feature_tag(&tag, "%s_%s_%s%s%s", layer, tensor, s->log_name,
						   both ? "_max_over_orientations" : "",
						   mark[s->slot]);
		int e = name ? host->emit_scalar(ctx, name, iteration,
						 host->stats_value(&rec[s->slot], s->stat))
			     : -ENOMEM;
		dli_feature_tag_free(&tag);
		r = r ? r : e;
	}
	/* -ENOTSUP (CUDA tensors) was reported by the host; an all-NaN step has no values to
	 * show. */
	struct dli_histogram h;
	if (hist_acc && have[0] && host->stats_acc_read_histogram(hist_acc, &h) == 0 && h.num > 0) {
		const char *name = dli_feature_tag(&tag, "%s_%s_histogram%s", layer, tensor, mark[0]);
		int e = name ? host->emit_histogram(ctx, name, iteration, &h) : -ENOMEM;
		dli_feature_tag_free(&tag);
		r = r ? r : e;
	}
	return r;
}

void dli_sf_step_end(const struct dli_feature_call *c, int64_t iteration)
{
	const struct dli_sf *sf = c->instance;
	const struct dli_host *host = sf->host;
	struct dli_sf_layer *l = c->layer_state;
	bool active = host->schedule_active(&sf->schedule, iteration);
	uint32_t slots = sf->slots | (sf->histogram ? 1u : 0u);

	for (size_t i = 0; i < l->n; i++) {
		struct dli_sf_tensor *t = &l->t[i];
		struct dli_stats_record rec[DLI_SF_MAX_SLOTS];
		bool have[DLI_SF_MAX_SLOTS] = {0}, fed[DLI_SF_MAX_SLOTS] = {0}, any = false;
		char mark[DLI_SF_MAX_SLOTS][32];
		for (unsigned s = 0; s < DLI_SF_MAX_SLOTS; s++) {
			mark[s][0] = '\0';
			if (!(slots >> s & 1u))
				continue;
			bool added = atomic_exchange(&t->added[s], false);
			fed[s] = added;
			any = any || added;
			if (!active || !added || host->stats_acc_read(t->acc[s], &rec[s]))
				continue;
			have[s] = rec[s].fp8_count || rec[s].count > 0 ||
				  ((sf->quantized_slots >> s & 1u) && rec[s].scale_inv_max > 0);
			/* A failed reduction: this rank's shards only, under names that say so. */
			if (have[s] && dli_reduce_failed(host, t->acc[s]))
				snprintf(mark[s], sizeof(mark[s]), "_rank%d", host->rank(c->ctx));
		}
		if (!any)
			continue;
		/* Only a slot nothing fed: one fed with an empty record (a host's copy whose scales
		 * are all padding) says so by logging nothing, not its mirror's values. */
		for (unsigned s = 0; s < DLI_SF_MAX_SLOTS; s++) {
			unsigned m = sf->mirror[s] - 1u;
			if (sf->mirror[s] && (slots >> s & 1u) && !fed[s] && have[m]) {
				rec[s] = rec[m];
				have[s] = true;
				memcpy(mark[s], mark[m], sizeof mark[s]);
			}
		}
		if (active)
			dli_sf_emit(sf, c->ctx, c->layer_name, host->tensor_name(c->ctx, t->id),
				    iteration, rec, have, (const char(*)[32])mark,
				    sf->histogram ? t->acc[0] : NULL);
		for (unsigned s = 0; s < DLI_SF_MAX_SLOTS; s++)
			if (slots >> s & 1u)
				host->stats_acc_reset(t->acc[s]);
	}
}
