/* Statistics across ranks (docs/distributed.md). Features share their accumulators with
 * stats_acc_share; at each dli_step, before any step_end reads them, the accumulators of the step
 * are reduced group by group: one all-gather per group carries every shared record of the step
 * (plus its histogram counts), each rank merges the records in group-rank order with the same
 * Chan merge as microbatches (kernels/record.c), and puts the merge back into the accumulator.
 * The same bytes merged in the same order give bit-identical results on every rank.
 *
 * Wire format, per rank: a header, then entries sorted by key hash, in a payload whose capacity
 * the group agrees on. A rank whose entries outgrow the capacity says so in its header; then every
 * rank of the group, which sees every header, raises the capacity alike and the group gathers once
 * more. So a step costs one collective, and two when the records grew. Records travel as the
 * host's plain bytes: every rank must run the same dlinspect on the same architecture. */
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "context-private.h"
#include "error-private.h"
#include "kernels-private.h"
#include "loader-private.h"
#include "messages-private.h"
#include "reduce-private.h"
#include "schedule-private.h"
#include "stats-private.h"

#define DLI_REDUCE_MAGIC 0x646c69726564310aull /* "dlired1\n" */
#define DLI_REDUCE_DEFAULT_TIMEOUT 300.0
#define DLI_ENTRY_HIST 1u

struct dli_wire_header {
	uint64_t magic;
	uint64_t n_entries;
	uint64_t bytes;     /* what this rank's entries need */
	int64_t iteration;
};

struct dli_wire_entry {
	uint64_t hash;
	uint32_t flags; /* DLI_ENTRY_HIST: DLI_HISTOGRAM_BUCKETS counts follow */
	uint32_t reserved;
	struct dli_stats_record rec;
};

struct dli_share {
	struct dli_stats_acc *acc;
	size_t index; /* in dli_reduce.shares */
	uint64_t hash;
	char *key;
	const struct dli_schedule *schedule;
	size_t group;
	int scope;
	unsigned generation; /* dli_reduce.generation when it was shared */
	bool filled;         /* this step's merge was put into acc: emptied after step_end */
	bool default_group;  /* the feature asked for the world: the tensor reduction group */
};

struct dli_group {
	int *ranks;
	size_t n;
	size_t me;
	void *handle;
	bool made, broken;
	size_t cap; /* agreed payload bytes after the header */
};

struct dli_reduce {
	const struct dli_comm_ops *ops;
	void *comm;
	bool owned; /* opened by us: closed by us */
	char name[64];
	double timeout_s;
	int rank, size;
	pthread_mutex_t lock; /* shares come from layer_attach, on any thread */
	struct dli_share **shares; /* each also pointed to by its accumulator */
	size_t n_shares, cap_shares;
	struct dli_group *groups;
	size_t n_groups;
	uint64_t collectives, bytes; /* since the start: what the DEBUG lines add up */
	uint64_t steps;              /* dli_reduce_step calls that reduced a group */
	/* Raised while a config reload makes its instances (dli_reduce_generation): their
	 * accumulators share the old instances' keys until the old ones are destroyed. */
	unsigned generation;
	/* Ranks that missed a collective: every later group holding one fails at once rather than
	 * waiting out its own time limit. NULL until the first. */
	bool *gone;
	/* The tensor reduction group (dli_reduction_group_set), an index in groups; -1: the world. */
	long default_group;
};

static uint64_t fnv1a(const char *s)
{
	uint64_t h = 0xcbf29ce484222325ull;
	for (; *s; s++) {
		h ^= (unsigned char)*s;
		h *= 0x100000001b3ull;
	}
	return h;
}

/* "[0, 1, 2, 3]" or "[0-3]" for a run. */
static void ranks_text(char *buf, size_t size, const int *ranks, size_t n, const bool *only)
{
	size_t off = 0;
	bool first = true;
	off += (size_t)snprintf(buf, size, "[");
	for (size_t i = 0; i < n && off < size; i++) {
		if (only && !only[i])
			continue;
		size_t j = i;
		while (!only && j + 1 < n && ranks[j + 1] == ranks[j] + 1)
			j++;
		if (j > i + 1)
			off += (size_t)snprintf(buf + off, size - off, "%s%d-%d", first ? "" : ", ",
						ranks[i], ranks[j]);
		else {
			off += (size_t)snprintf(buf + off, size - off, "%s%d", first ? "" : ", ", ranks[i]);
			j = i;
		}
		first = false;
		i = j;
	}
	if (off < size)
		snprintf(buf + off, size - off, "]");
}

/* ---- Opening ---- */

static int reduce_new(struct dli_context *ctx, const struct dli_comm_ops *ops, void *comm, bool owned,
		      const char *name, struct dli_error *err)
{
	struct dli_reduce *red = calloc(1, sizeof *red);
	if (!red) {
		if (owned && ops->close)
			ops->close(comm);
		return dli_error_set(err, -ENOMEM, NULL, "out of memory");
	}
	red->ops = ops;
	red->comm = comm;
	red->owned = owned;
	snprintf(red->name, sizeof red->name, "%s", name);
	red->timeout_s = DLI_REDUCE_DEFAULT_TIMEOUT;
	red->default_group = -1;
	pthread_mutex_init(&red->lock, NULL);
	red->rank = ops->rank(comm);
	red->size = ops->world_size(comm);
	ctx->reduce = red;
	const char *t = getenv("DLINSPECT_COMM_TIMEOUT");
	if (t && *t) {
		char *end;
		/* Decimal only: strtod would also take hex ("0x10"), "inf" and leading blanks. */
		bool decimal = strspn(t, "0123456789.eE+-") == strlen(t);
		double v = strtod(t, &end);
		if (!decimal || *end || !(v > 0) || isinf(v))
			return dli_error_set(err, -EINVAL, NULL,
					     "DLINSPECT_COMM_TIMEOUT='%s': expected a positive number of "
					     "seconds", t);
		/* Longer than any run, and within what a time_t deadline and Python's timedelta (the
		 * torch communicator) hold: 1e300 would overflow both. */
		red->timeout_s = v < 1e9 ? v : 1e9;
	}
	if (red->size < 1 || red->rank < 0 || red->rank >= red->size)
		return dli_error_set(err, -EINVAL, NULL,
				     "communicator '%s' says rank %d of %d: expected 0 <= rank < size",
				     name, red->rank, red->size);
	if (ctx->world_size > 1 && (ctx->world_size != red->size || ctx->rank != red->rank))
		return dli_error_set(err, -EINVAL, NULL,
				     "dli_init: options say rank %d of %d, communicator '%s' says rank %d "
				     "of %d", ctx->rank, ctx->world_size, name, red->rank, red->size);
	ctx->rank = red->rank;
	ctx->world_size = red->size;
	return 0;
}

int dli_reduce_open(struct dli_context *ctx, const struct dli_options *o, struct dli_error *err)
{
	if (o->comm_ops) {
		const struct dli_comm_ops *ops = o->comm_ops;
		if (!DLI_HAS_MEMBER(ops, struct dli_comm_ops, barrier) || !ops->rank ||
		    !ops->world_size || !ops->group_create || !ops->allgather || !ops->barrier)
			return dli_error_set(err, -EINVAL, NULL,
					     "dli_init: options.comm_ops lacks one of rank, world_size, "
					     "group_create, allgather, barrier");
		return reduce_new(ctx, ops, o->comm, false,
				  o->comm_name && *o->comm_name ? o->comm_name : "host", err);
	}
	const char *name = getenv("DLINSPECT_COMMUNICATOR");
	if (!name || !*name)
		return 0;
	int r = dli_loader_load(ctx->loader, name, err);
	if (r)
		return dli_error_prefix(err, NULL, "DLINSPECT_COMMUNICATOR='%s': ", name);
	for (size_t i = 0; i < dli_loader_count(ctx->loader); i++) {
		const struct dli_module *m = dli_loader_module(ctx->loader, i);
		for (size_t k = 0; k < m->n_comms; k++) {
			const struct dli_comm_desc *d = m->comms[k];
			if (strcmp(d->name, name) != 0)
				continue;
			void *comm = NULL;
			if ((r = d->ops->open(&comm, err))) {
				/* The module fills the message; the code is its return value (a
				 * module need not set err->code, and a 0 there read as success). */
				err->code = r;
				return dli_error_prefix(err, NULL, "communicator '%s': ", name);
			}
			return reduce_new(ctx, d->ops, comm, true, name, err);
		}
	}
	return dli_error_set(err, -ENOENT, NULL,
			     "DLINSPECT_COMMUNICATOR='%s': module %s.so loaded but offers no "
			     "communicator of that name", name, name);
}

void dli_reduce_announce(struct dli_context *ctx)
{
	struct dli_reduce *red = ctx->reduce;
	if (red)
		dli_log(ctx, DLI_LOG_INFO,
			"statistics are reduced across ranks through communicator '%s' (rank %d of %d, "
			"time limit %g s per collective)", red->name, red->rank, red->size,
			red->timeout_s);
	else if (ctx->world_size > 1)
		dli_log(ctx, DLI_LOG_INFO,
			"rank %d of %d and no communicator (DLINSPECT_COMMUNICATOR, dli_options.comm_ops): "
			"each rank logs the statistics of its own shards, not reduced across ranks",
			ctx->rank, ctx->world_size);
}

/* After ranks went missing: the others wait for each other (with the time limit) before they close.
 * A communicator may not finalize after a failure, and a launcher that sees one process exit
 * unfinalized may kill the rest, which must have written their logs by then. */
static void survivors_barrier(struct dli_context *ctx, struct dli_reduce *red)
{
	int *ranks = malloc((size_t)red->size * sizeof *ranks);
	size_t n = 0;
	for (int i = 0; ranks && i < red->size; i++)
		if (!red->gone[i])
			ranks[n++] = i;
	void *group = NULL;
	struct dli_error err = {0};
	bool *missing = calloc(n ? n : 1, sizeof *missing);
	if (ranks && missing && n > 1 && !red->gone[red->rank] &&
	    red->ops->group_create(red->comm, ranks, n, &group, &err) == 0) {
		int r = red->ops->barrier(red->comm, group, red->timeout_s, missing, &err);
		if (r)
			dli_log(ctx, DLI_LOG_WARNING,
				"the ranks that remained did not all reach dli_destroy within %g s (%s)",
				red->timeout_s, err.message[0] ? err.message : strerror(-r));
		if (red->ops->group_destroy)
			red->ops->group_destroy(red->comm, group);
	}
	free(missing);
	free(ranks);
}

void dli_reduce_close(struct dli_context *ctx)
{
	struct dli_reduce *red = ctx->reduce;
	if (!red)
		return;
	if (red->gone)
		survivors_barrier(ctx, red);
	for (size_t i = 0; i < red->n_groups; i++) {
		if (red->groups[i].made && red->ops->group_destroy)
			red->ops->group_destroy(red->comm, red->groups[i].handle);
		free(red->groups[i].ranks);
	}
	free(red->groups);
	for (size_t i = 0; i < red->n_shares; i++) {
		dli_stats_acc_set_share(red->shares[i]->acc, NULL, NULL);
		free(red->shares[i]->key);
		free(red->shares[i]);
	}
	free(red->shares);
	free(red->gone);
	if (red->owned && red->ops->close)
		red->ops->close(red->comm);
	pthread_mutex_destroy(&red->lock);
	free(red);
	ctx->reduce = NULL;
}

/* ---- Sharing ---- */

static long group_find_or_add(struct dli_reduce *red, const int *ranks, size_t n)
{
	for (size_t i = 0; i < red->n_groups; i++)
		if (red->groups[i].n == n && !memcmp(red->groups[i].ranks, ranks, n * sizeof *ranks))
			return (long)i;
	struct dli_group *v = realloc(red->groups, (red->n_groups + 1) * sizeof *v);
	if (!v)
		return -ENOMEM;
	red->groups = v;
	struct dli_group *g = &v[red->n_groups];
	memset(g, 0, sizeof *g);
	if (!(g->ranks = malloc(n * sizeof *ranks)))
		return -ENOMEM;
	memcpy(g->ranks, ranks, n * sizeof *ranks);
	g->n = n;
	for (size_t i = 0; i < n; i++)
		if (ranks[i] == red->rank)
			g->me = i;
	return (long)red->n_groups++;
}

int dli_stats_acc_share(struct dli_stats_acc *acc, const struct dli_stats_share *share)
{
	if (!acc || !share || share->size < offsetof(struct dli_stats_share, n_ranks) + sizeof(size_t) ||
	    !share->key)
		return -EINVAL;
	struct dli_context *ctx = dli_stats_acc_context(acc);
	struct dli_reduce *red = ctx->reduce;
	if (!red)
		return -ENOTSUP;
	if (dli_stats_acc_get_share(acc))
		return -EEXIST;
	int *world = NULL;
	const int *ranks = share->ranks;
	size_t n = share->n_ranks;
	/* The world, or the tensor reduction group when one is set: that is read below, under the
	 * lock that registers the share, so that a dli_reduction_group_set between the two cannot
	 * leave this share in the group it replaced. */
	bool by_default = !ranks || !n;
	if (by_default) {
		if (!(world = calloc((size_t)red->size, sizeof *world)))
			return -ENOMEM;
		for (int i = 0; i < red->size; i++)
			world[i] = i;
		ranks = world;
		n = (size_t)red->size;
	}
	bool in = false, sorted = true;
	for (size_t i = 0; i < n; i++) {
		in = in || ranks[i] == red->rank;
		sorted = sorted && ranks[i] >= 0 && ranks[i] < red->size && (!i || ranks[i] > ranks[i - 1]);
	}
	if (!in || !sorted) {
		char text[256];
		ranks_text(text, sizeof text, ranks, n, NULL);
		dli_log(ctx, DLI_LOG_ERROR,
			"statistics of '%s': reduction group %s %s (world size %d, this rank %d); "
			"these statistics stay per rank", share->key, text,
			!sorted ? "is not a sorted list of distinct ranks of the world"
				: "does not hold this rank", red->size, red->rank);
		free(world);
		return -EINVAL;
	}
	pthread_mutex_lock(&red->lock);
	int r = 0;
	uint64_t hash = fnv1a(share->key);
	for (size_t i = 0; i < red->n_shares && !r; i++)
		if (red->shares[i]->hash == hash && red->shares[i]->generation == red->generation)
			r = -EEXIST;
	long g = r ? r
		   : by_default && red->default_group >= 0 ? red->default_group
							   : group_find_or_add(red, ranks, n);
	if (g < 0)
		r = (int)g;
	if (!r && red->n_shares == red->cap_shares) {
		size_t cap = red->cap_shares ? 2 * red->cap_shares : 64;
		struct dli_share **v = realloc(red->shares, cap * sizeof *v);
		if (!v)
			r = -ENOMEM;
		else {
			red->shares = v;
			red->cap_shares = cap;
		}
	}
	char *key = r ? NULL : strdup(share->key);
	struct dli_share *sh = r ? NULL : malloc(sizeof *sh);
	if (!r && (!key || !sh)) {
		free(key);
		free(sh);
		r = -ENOMEM;
	}
	if (!r) {
		*sh = (struct dli_share){.acc = acc, .index = red->n_shares, .hash = hash, .key = key,
					 .schedule = share->schedule, .group = (size_t)g,
					 .scope = DLI_SCOPE_RANK, .generation = red->generation,
					 .default_group = by_default};
		red->shares[red->n_shares++] = sh;
		dli_stats_acc_set_share(acc, sh, dli_reduce_forget);
	}
	pthread_mutex_unlock(&red->lock);
	if (r == -EEXIST)
		dli_log(ctx, DLI_LOG_ERROR,
			"statistics of '%s': another accumulator of this rank has the same reduction "
			"key; this one stays per rank", share->key);
	free(world);
	return r;
}

void dli_reduce_forget(struct dli_context *ctx, struct dli_stats_acc *acc)
{
	struct dli_reduce *red = ctx->reduce;
	if (!red)
		return;
	pthread_mutex_lock(&red->lock);
	struct dli_share *sh = dli_stats_acc_get_share(acc);
	if (sh) {
		red->shares[sh->index] = red->shares[--red->n_shares];
		red->shares[sh->index]->index = sh->index;
		free(sh->key);
		free(sh);
		dli_stats_acc_set_share(acc, NULL, NULL);
	}
	pthread_mutex_unlock(&red->lock);
}

void dli_reduce_generation(struct dli_context *ctx, int delta)
{
	struct dli_reduce *red = ctx->reduce;
	if (!red)
		return;
	pthread_mutex_lock(&red->lock);
	red->generation += (unsigned)delta;
	pthread_mutex_unlock(&red->lock);
}

int dli_stats_acc_scope(struct dli_stats_acc *acc)
{
	if (!acc)
		return DLI_SCOPE_RANK;
	struct dli_reduce *red = dli_stats_acc_context(acc)->reduce;
	int scope = DLI_SCOPE_RANK;
	if (!red)
		return scope;
	pthread_mutex_lock(&red->lock);
	const struct dli_share *sh = dli_stats_acc_get_share(acc);
	if (sh)
		scope = sh->scope;
	pthread_mutex_unlock(&red->lock);
	return scope;
}

/* ---- Reducing ---- */

static int share_cmp(const void *a, const void *b)
{
	uint64_t x = (*(struct dli_share *const *)a)->hash, y = (*(struct dli_share *const *)b)->hash;
	return x < y ? -1 : x > y;
}

static size_t entry_size(uint32_t flags)
{
	return sizeof(struct dli_wire_entry) +
	       (flags & DLI_ENTRY_HIST ? DLI_HISTOGRAM_BUCKETS * sizeof(uint64_t) : 0);
}

/* One all-gather of header + cap bytes; on failure says why, naming the group and the ranks. */
static int gather(struct dli_context *ctx, struct dli_reduce *red, struct dli_group *g,
		  const unsigned char *send, size_t cap, unsigned char **recv, int64_t iteration)
{
	size_t stride = sizeof(struct dli_wire_header) + cap;
	unsigned char *buf = malloc(stride * g->n);
	bool *missing = calloc(g->n, sizeof *missing);
	struct dli_error err = {0};
	int r = buf && missing ? 0 : -ENOMEM;
	if (!r)
		r = red->ops->allgather(red->comm, g->handle, send, stride, buf, red->timeout_s, missing,
					&err);
	red->collectives++;
	red->bytes += stride * g->n;
	if (r) {
		char group[256], who[256];
		ranks_text(group, sizeof group, g->ranks, g->n, NULL);
		ranks_text(who, sizeof who, g->ranks, g->n, missing);
		bool any = false;
		for (size_t i = 0; missing && i < g->n; i++)
			any = any || missing[i];
		g->broken = true;
		if (any && (red->gone || (red->gone = calloc((size_t)red->size, sizeof *red->gone))))
			for (size_t i = 0; i < g->n; i++)
				red->gone[g->ranks[i]] = red->gone[g->ranks[i]] || missing[i];
		dli_log(ctx, DLI_LOG_ERROR,
			"statistics of iteration %lld were not reduced across group %s (communicator "
			"'%s'): %s%s%s; the statistics this rank logs for this step and the later "
			"steps of this group are its own shards' only (per rank)",
			(long long)iteration, group, red->name,
			r == -ETIMEDOUT ? "time limit reached" : strerror(-r),
			any ? ", missing ranks " : "", any ? who : "");
		if (err.message[0])
			dli_log(ctx, DLI_LOG_ERROR, "communicator '%s': %s", red->name, err.message);
		free(buf);
		buf = NULL;
	}
	free(missing);
	*recv = buf;
	return r;
}

/* A rank's entries, walked in hash order alongside the local ones (both sorted). */
struct cursor {
	const unsigned char *payload;
	uint64_t n, i;
	size_t off, limit;
};

/* The entry of `hash` in c's payload, or NULL; moves past every smaller hash. Calls must come in
 * ascending hash order. */
static const unsigned char *cursor_find(struct cursor *c, uint64_t hash)
{
	while (c->i < c->n && c->off + sizeof(struct dli_wire_entry) <= c->limit) {
		struct dli_wire_entry e;
		memcpy(&e, c->payload + c->off, sizeof e);
		if (e.hash > hash)
			return NULL;
		const unsigned char *at = c->payload + c->off;
		c->off += entry_size(e.flags);
		c->i++;
		if (e.hash == hash)
			return at;
	}
	return NULL;
}

static void reduce_group(struct dli_context *ctx, struct dli_reduce *red, size_t gi,
			 struct dli_share **act, size_t n_act, int64_t iteration)
{
	struct dli_group *g = &red->groups[gi];
	char group[256];
	if (g->n == 1) {
		for (size_t i = 0; i < n_act; i++)
			act[i]->scope = DLI_SCOPE_RANK;
		return;
	}
	for (size_t i = 0; i < n_act; i++)
		act[i]->scope = DLI_SCOPE_FAILED;
	ranks_text(group, sizeof group, g->ranks, g->n, NULL);
	if (g->broken) {
		dli_log(ctx, DLI_LOG_WARNING,
			"statistics of iteration %lld: group %s failed earlier; %zu statistics records "
			"are this rank's own (per rank)", (long long)iteration, group, n_act);
		return;
	}
	for (size_t k = 0; red->gone && k < g->n && !g->broken; k++) {
		if (!red->gone[g->ranks[k]])
			continue;
		g->broken = true;
		dli_log(ctx, DLI_LOG_ERROR,
			"statistics of iteration %lld were not reduced across group %s: rank %d missed "
			"an earlier collective, so this group is not waited for; the statistics this "
			"rank logs for this step and the later steps of this group are its own shards' "
			"only (per rank)", (long long)iteration, group, g->ranks[k]);
		return;
	}
	if (!g->made) {
		struct dli_error err = {0};
		int r = red->ops->group_create(red->comm, g->ranks, g->n, &g->handle, &err);
		if (r) {
			g->broken = true;
			dli_log(ctx, DLI_LOG_ERROR,
				"communicator '%s' could not make group %s: %s; its statistics stay per "
				"rank", red->name, group, err.message[0] ? err.message : strerror(-r));
			return;
		}
		g->made = true;
	}
	qsort(act, n_act, sizeof *act, share_cmp);
	/* The local payload. */
	size_t need = 0;
	bool *hist = calloc(n_act ? n_act : 1, sizeof *hist);
	struct dli_stats_record *recs = calloc(n_act ? n_act : 1, sizeof *recs);
	uint64_t *counts = calloc((n_act ? n_act : 1) * DLI_HISTOGRAM_BUCKETS, sizeof *counts);
	unsigned char *send = NULL, *recv = NULL;
	if (!hist || !recs || !counts)
		goto nomem;
	for (size_t i = 0; i < n_act; i++) {
		int r = dli_stats_acc_local(act[i]->acc, &recs[i], counts + i * DLI_HISTOGRAM_BUCKETS,
					    &hist[i]);
		if (r)
			dli_log(ctx, DLI_LOG_ERROR,
				"statistics of '%s': reading this rank's record failed (%s); the "
				"reduction takes what was read", act[i]->key, strerror(-r));
		need += entry_size(hist[i] ? DLI_ENTRY_HIST : 0);
	}
	size_t cap = g->cap > need ? g->cap : need;
	/* Everyone sends the agreed capacity; a rank that needs more still sends only that. */
	size_t stride = sizeof(struct dli_wire_header) + g->cap;
	if (!(send = calloc(1, sizeof(struct dli_wire_header) + cap)))
		goto nomem;
	struct dli_wire_header h = {DLI_REDUCE_MAGIC, n_act, need, iteration};
	memcpy(send, &h, sizeof h);
	size_t off = sizeof h;
	for (size_t i = 0; i < n_act; i++) {
		struct dli_wire_entry e = {act[i]->hash, hist[i] ? DLI_ENTRY_HIST : 0, 0, recs[i]};
		memcpy(send + off, &e, sizeof e);
		off += sizeof e;
		if (hist[i]) {
			memcpy(send + off, counts + i * DLI_HISTOGRAM_BUCKETS,
			       DLI_HISTOGRAM_BUCKETS * sizeof *counts);
			off += DLI_HISTOGRAM_BUCKETS * sizeof *counts;
		}
	}
	uint64_t c0 = red->collectives, b0 = red->bytes;
	if (gather(ctx, red, g, send, g->cap, &recv, iteration))
		goto out;
	uint64_t most = 0;
	for (size_t k = 0; k < g->n; k++) {
		struct dli_wire_header hk;
		memcpy(&hk, recv + k * stride, sizeof hk);
		if (hk.magic != DLI_REDUCE_MAGIC || hk.iteration != iteration) {
			dli_log(ctx, DLI_LOG_ERROR,
				"statistics of iteration %lld were not reduced across group %s: rank %d "
				"sent %s (iteration %lld); this step's statistics are per rank",
				(long long)iteration, group, g->ranks[k],
				hk.magic != DLI_REDUCE_MAGIC ? "no dlinspect statistics records"
							     : "the records of another iteration",
				(long long)hk.iteration);
			goto out;
		}
		most = hk.bytes > most ? hk.bytes : most;
	}
	if (most > g->cap) {
		/* Someone's records did not fit: every rank raises the capacity alike and gathers
		 * again, with an eighth more room so that a slowly growing set does not pay this
		 * every step. */
		g->cap = ((size_t)most + (size_t)most / 8 + 63) / 64 * 64;
		stride = sizeof(struct dli_wire_header) + g->cap;
		unsigned char *bigger = realloc(send, stride);
		if (!bigger)
			goto nomem;
		send = bigger;
		memset(send + sizeof h + need, 0, stride - sizeof h - need);
		free(recv);
		recv = NULL;
		if (gather(ctx, red, g, send, g->cap, &recv, iteration))
			goto out;
	}
	/* Merge in group-rank order, the same order on every rank. */
	uint64_t *sum = malloc(DLI_HISTOGRAM_BUCKETS * sizeof *sum);
	struct cursor *cur = calloc(g->n, sizeof *cur);
	if (!sum || !cur) {
		free(sum);
		free(cur);
		goto nomem;
	}
	for (size_t k = 0; k < g->n; k++) {
		struct dli_wire_header hk;
		memcpy(&hk, recv + k * stride, sizeof hk);
		cur[k] = (struct cursor){recv + k * stride + sizeof hk, hk.n_entries, 0, 0, g->cap};
	}
	for (size_t i = 0; i < n_act; i++) {
		struct dli_stats_record merged;
		dli_stats_record_init(&merged);
		memset(sum, 0, DLI_HISTOGRAM_BUCKETS * sizeof *sum);
		for (size_t k = 0; k < g->n; k++) {
			const unsigned char *e = cursor_find(&cur[k], act[i]->hash);
			if (!e)
				continue; /* that rank has no such accumulator: an empty shard */
			struct dli_wire_entry ek;
			memcpy(&ek, e, sizeof ek);
			dli_stats_merge(&merged, &ek.rec);
			if (ek.flags & DLI_ENTRY_HIST) {
				const unsigned char *c = e + sizeof ek;
				for (size_t b = 0; b < DLI_HISTOGRAM_BUCKETS; b++) {
					uint64_t v;
					memcpy(&v, c + b * sizeof v, sizeof v);
					sum[b] += v;
				}
			}
		}
		dli_stats_acc_replace(act[i]->acc, &merged, hist[i] ? sum : NULL);
		act[i]->scope = DLI_SCOPE_GROUP;
		act[i]->filled = true;
	}
	free(sum);
	free(cur);
	dli_log(ctx, DLI_LOG_DEBUG,
		"statistics of iteration %lld reduced across group %s: %zu records, %llu "
		"collective(s), %llu bytes gathered (run total: %llu collectives, %llu bytes)",
		(long long)iteration, group, n_act, (unsigned long long)(red->collectives - c0),
		(unsigned long long)(red->bytes - b0), (unsigned long long)red->collectives,
		(unsigned long long)red->bytes);
	goto out;
nomem:
	dli_log(ctx, DLI_LOG_ERROR,
		"statistics of iteration %lld: out of memory reducing across group %s; this step's "
		"statistics are per rank", (long long)iteration, group);
out:
	free(hist);
	free(recs);
	free(counts);
	free(send);
	free(recv);
}

void dli_reduce_step(struct dli_context *ctx, int64_t iteration)
{
	struct dli_reduce *red = ctx->reduce;
	pthread_mutex_lock(&red->lock);
	struct dli_share **act = malloc((red->n_shares ? red->n_shares : 1) * sizeof *act);
	if (!act) {
		pthread_mutex_unlock(&red->lock);
		dli_log(ctx, DLI_LOG_ERROR, "statistics of iteration %lld: out of memory; not reduced",
			(long long)iteration);
		return;
	}
	/* Groups in the order of their rank lists, the same on every rank, so that ranks in two
	 * groups enter their collectives in one order. */
	size_t *order = malloc((red->n_groups ? red->n_groups : 1) * sizeof *order);
	for (size_t i = 0; order && i < red->n_groups; i++) {
		size_t j = i;
		order[i] = i;
		while (j > 0) {
			const struct dli_group *a = &red->groups[order[j - 1]], *b = &red->groups[order[j]];
			size_t n = a->n < b->n ? a->n : b->n, k = 0;
			while (k < n && a->ranks[k] == b->ranks[k])
				k++;
			bool less = k < n ? b->ranks[k] < a->ranks[k] : b->n < a->n;
			if (!less)
				break;
			size_t t = order[j - 1];
			order[j - 1] = order[j];
			order[j] = t;
			j--;
		}
	}
	bool any = false;
	for (size_t oi = 0; order && oi < red->n_groups; oi++) {
		size_t gi = order[oi], n_act = 0;
		for (size_t i = 0; i < red->n_shares; i++) {
			struct dli_share *s = red->shares[i];
			if (s->group == gi && (!s->schedule || dli_schedule_active(s->schedule, iteration)))
				act[n_act++] = s;
		}
		if (n_act)
			reduce_group(ctx, red, gi, act, n_act, iteration);
		any = any || n_act;
	}
	red->steps += any;
	free(order);
	free(act);
	pthread_mutex_unlock(&red->lock);
}

void dli_reduce_step_end(struct dli_context *ctx)
{
	struct dli_reduce *red = ctx->reduce;
	if (!red)
		return;
	/* The merge is the group's whole tensor for this step's step_end to read. A feature resets
	 * what it logged, but a rank that fed nothing this step logs nothing and so resets nothing:
	 * the merge would stay and be sent again, and merged again, at the next reduced step. */
	pthread_mutex_lock(&red->lock);
	for (size_t i = 0; i < red->n_shares; i++) {
		if (!red->shares[i]->filled)
			continue;
		dli_stats_acc_reset(red->shares[i]->acc);
		red->shares[i]->filled = false;
	}
	pthread_mutex_unlock(&red->lock);
}

int dli_reduce_counters(struct dli_context *ctx, uint64_t *steps, uint64_t *collectives,
			uint64_t *bytes)
{
	uint64_t v[3] = {0, 0, 0};
	struct dli_reduce *red = ctx ? ctx->reduce : NULL;
	if (red) {
		pthread_mutex_lock(&red->lock);
		v[0] = red->steps;
		v[1] = red->collectives;
		v[2] = red->bytes;
		pthread_mutex_unlock(&red->lock);
	}
	if (steps)
		*steps = v[0];
	if (collectives)
		*collectives = v[1];
	if (bytes)
		*bytes = v[2];
	return !ctx ? -EINVAL : red ? 0 : -ENOTSUP;
}

int dli_reduction_group_set(struct dli_context *ctx, const int *ranks, size_t n,
			    struct dli_error *err)
{
	struct dli_error local;
	char text[256];

	if (!err)
		err = &local;
	if (!ctx)
		return dli_error_set(err, -EINVAL, NULL, "dli_reduction_group_set: NULL context");
	if (n && !ranks)
		return dli_error_set(err, -EINVAL, NULL,
				     "dli_reduction_group_set: NULL ranks with n = %zu", n);
	struct dli_reduce *red = ctx->reduce;
	int size = red ? red->size : ctx->world_size, rank = red ? red->rank : ctx->rank;
	bool in = false, sorted = true, inside = true;
	for (size_t i = 0; i < n; i++) {
		in = in || ranks[i] == rank;
		inside = inside && ranks[i] >= 0 && ranks[i] < size;
		sorted = sorted && (!i || ranks[i] > ranks[i - 1]);
	}
	if (n && (!in || !sorted || !inside)) {
		ranks_text(text, sizeof text, ranks, n, NULL);
		return dli_error_set(err, -EINVAL, NULL,
				     "dli_reduction_group_set: the group %s %s (world size %d, this "
				     "rank %d)", text,
				     !sorted	? "is not a sorted list of distinct ranks"
				     : !inside ? "holds ranks outside the world"
					       : "does not hold this rank",
				     size, rank);
	}
	if (!red) {
		/* Per rank already: the world (NULL, or every rank listed) or this rank alone
		 * changes nothing. */
		if (n <= 1 || n == (size_t)size)
			return 0;
		ranks_text(text, sizeof text, ranks, n, NULL);
		return dli_error_set(err, -ENOTSUP, NULL,
				     "dli_reduction_group_set: the group %s needs a communicator "
				     "(DLINSPECT_COMMUNICATOR, dli_options.comm_ops); without one each "
				     "rank logs its own statistics", text);
	}
	/* The whole world is the default, kept as -1 so that shares name no group of their own. */
	bool world = !n || n == (size_t)red->size;
	pthread_mutex_lock(&red->lock);
	long g = world ? -1 : group_find_or_add(red, ranks, n);
	if (g < -1 || (g < 0 && !world)) {
		pthread_mutex_unlock(&red->lock);
		return dli_error_set(err, -ENOMEM, NULL, "dli_reduction_group_set: out of memory");
	}
	long world_g = -1;
	red->default_group = g;
	/* Statistics shared already move to it from the next step on. A share of the world needs
	 * the world's group, made as dli_stats_acc_share makes it. */
	int r = 0;
	for (size_t i = 0; i < red->n_shares && !r; i++) {
		struct dli_share *s = red->shares[i];
		if (!s->default_group)
			continue;
		if (g >= 0) {
			s->group = (size_t)g;
			continue;
		}
		if (world_g < 0) {
			int *all = malloc((size_t)red->size * sizeof *all);
			for (int k = 0; all && k < red->size; k++)
				all[k] = k;
			world_g = all ? group_find_or_add(red, all, (size_t)red->size) : -ENOMEM;
			free(all);
			if (world_g < 0) {
				r = -ENOMEM;
				break;
			}
		}
		s->group = (size_t)world_g;
	}
	pthread_mutex_unlock(&red->lock);
	if (r)
		return dli_error_set(err, -ENOMEM, NULL, "dli_reduction_group_set: out of memory");
	if (world)
		snprintf(text, sizeof text, "the whole world");
	else
		ranks_text(text, sizeof text, ranks, n, NULL);
	dli_log(ctx, DLI_LOG_INFO,
		"the statistics of every tensor but the weight are reduced across %s from the next "
		"step on (set_tensor_reduction_group); weights keep their tensor-parallel groups",
		text);
	return 0;
}
