/* A host-supplied communicator (dli_options.comm_ops, docs/distributed.md) without MPI: three
 * "ranks" are threads of this process, each with its own context, and the communicator is a
 * shared board in memory. Checks, through the exact logger (tests/mpi/exact_logger.c):
 * - every rank logs the same bits for LogTensorStats of activations and gradients sharded
 *   unevenly (rank 1's activation shard empty: it logs the reduced values all the same, its
 *   max_blockwise_dynamic_range too), two microbatches a step, and for LogNvfp4TensorStats of
 *   the activations;
 * - those equal a single context fed the same pieces in rank order (exact for min, max, amax and
 *   the counts, 1e-12 relative for the rest: only the order of the merges differs);
 * - weights with tensor_parallel_size 1 stay per rank;
 * - a rank that never ends the second step: the others wait DLINSPECT_COMM_TIMEOUT, say which
 *   group and rank, and log that step's statistics per rank under names marked _rank<r>;
 * - a config reload at the end of the first step (core/reload.c): the new instances' accumulators
 *   take the old ones' reduction keys while those still exist, and the second step is reduced
 *   as before (destroying an accumulator removes it from the reduction);
 * - a tensor only rank 0 feeds (the others attach the layer and feed its activation): rank 0 logs
 *   each step's values alone, equal to the single context's, and the others log none of it (as
 *   TransformerEngine's buffers that were not fed): the merged record a rank reads back at a
 *   step does not stay in its accumulator and come back, merged again, at the next step;
 * - one config read by each rank through another path (absolute, with "./", a copy elsewhere):
 *   the reduction keys are the same, and the values the single context's;
 * - tensor_parallel_size 2 in a world of 3: an error on every rank, weights per rank.
 * argv: <dir of exact_logger.so> */
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <dlinspect/dlinspect.h>
#include <dlinspect/plugin.h>

#define N_RANKS 3
#define MAX_BYTES (1 << 20)
#define LOG_CAP 4096
#define MSGS_SIZE (1 << 16)

static int failures;
#define CHECK(c, ...)                                                                              \
	do {                                                                                       \
		if (!(c)) {                                                                        \
			fprintf(stderr, "%s:%d: ", __FILE__, __LINE__);                            \
			fprintf(stderr, __VA_ARGS__);                                              \
			fprintf(stderr, "\n");                                                     \
			failures++;                                                                \
		}                                                                                  \
	} while (0)

/* ---- The board: one all-gather round at a time per parity, for the world group only ---- */

static pthread_mutex_t board_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t board_cond = PTHREAD_COND_INITIALIZER;
static struct {
	int64_t gen;      /* the round this parity's slots serve */
	int arrived, departed;
	bool in[N_RANKS];
	unsigned char *buf[N_RANKS];
	size_t bytes;
} rounds[2] = {{.gen = 0}, {.gen = 1}};

struct loop_comm {
	int rank;
	int64_t round; /* this member's next round */
	bool broken;
};

static int loop_rank(void *c)
{
	return ((struct loop_comm *)c)->rank;
}

static int loop_size(void *c)
{
	return N_RANKS;
}

static int loop_group_create(void *c, const int *ranks, size_t n, void **group, struct dli_error *err)
{
	if (n != N_RANKS) {
		snprintf(err->message, sizeof err->message, "this test board serves the world only");
		return -ENOTSUP;
	}
	*group = c;
	return 0;
}

static int loop_allgather(void *c, void *group, const void *send, size_t bytes, void *recv,
			  double timeout_s, bool *missing, struct dli_error *err)
{
	struct loop_comm *me = c;
	if (me->broken)
		return -EPIPE;
	if (bytes > MAX_BYTES)
		return -E2BIG;
	int64_t r = me->round++;
	int p = (int)(r % 2);
	struct timespec until;
	clock_gettime(CLOCK_REALTIME, &until);
	double whole = floor(timeout_s);
	until.tv_sec += (time_t)whole;
	until.tv_nsec += (long)((timeout_s - whole) * 1e9);
	if (until.tv_nsec >= 1000000000L) {
		until.tv_sec++;
		until.tv_nsec -= 1000000000L;
	}
	int rc = 0;
	pthread_mutex_lock(&board_lock);
	while (rounds[p].gen != r && rc == 0)
		rc = pthread_cond_timedwait(&board_cond, &board_lock, &until);
	if (rc == 0) {
		memcpy(rounds[p].buf[me->rank], send, bytes);
		rounds[p].in[me->rank] = true;
		rounds[p].bytes = bytes;
		rounds[p].arrived++;
		pthread_cond_broadcast(&board_cond);
		while (rounds[p].arrived < N_RANKS && rc == 0)
			rc = pthread_cond_timedwait(&board_cond, &board_lock, &until);
	}
	if (rc) {
		for (int i = 0; i < N_RANKS; i++)
			missing[i] = rounds[p].gen != r || !rounds[p].in[i];
		me->broken = true;
		snprintf(err->message, sizeof err->message, "the board waited %g s", timeout_s);
		pthread_mutex_unlock(&board_lock);
		return -ETIMEDOUT;
	}
	for (int i = 0; i < N_RANKS; i++)
		memcpy((unsigned char *)recv + (size_t)i * bytes, rounds[p].buf[i], bytes);
	if (++rounds[p].departed == N_RANKS) {
		rounds[p].gen = r + 2;
		rounds[p].arrived = rounds[p].departed = 0;
		memset(rounds[p].in, 0, sizeof rounds[p].in);
		pthread_cond_broadcast(&board_cond);
	}
	pthread_mutex_unlock(&board_lock);
	return 0;
}

static int loop_barrier(void *c, void *group, double timeout_s, bool *missing, struct dli_error *err)
{
	unsigned char one = 1, all[N_RANKS];
	return loop_allgather(c, group, &one, 1, all, timeout_s, missing, err);
}

static const struct dli_comm_ops loop_ops = {
	.size = sizeof(struct dli_comm_ops),
	.rank = loop_rank,
	.world_size = loop_size,
	.group_create = loop_group_create,
	.allgather = loop_allgather,
	.barrier = loop_barrier,
};

/* ---- The ranks ---- */

#define CONFIG_HEAD                                                                                \
	"loggers: {exact: {}}\n"                                                                   \
	"stats:\n"                                                                                 \
	"  enabled: true\n"                                                                        \
	"  layers: {layer_name_regex_pattern: '^fc1$'}\n"                                          \
	"  transformer_engine:\n"                                                                  \
	"    LogTensorStats:\n"                                                                    \
	"      enabled: true\n"                                                                    \
	"      tensors: [activation, gradient, weight]\n"                                          \
	"      stats: [min, max, mean, std, var, l1_norm, l2_norm, cur_amax, dynamic_range, "      \
	"nan_count, inf_count, 'zero%', histogram, max_blockwise_dynamic_range]\n"                  \
	"      freq: 1\n"
#define CONFIG_TAIL                                                                                \
	"    LogNvfp4TensorStats:\n"                                                               \
	"      enabled: true\n"                                                                    \
	"      tensors: [activation]\n"                                                            \
	"      stats: [underflows%, mse]\n"
static const char *config = CONFIG_HEAD CONFIG_TAIL;
/* Tensor-parallel groups of 2 do not divide a world of 3 ranks. */
static const char *config_tp2 = CONFIG_HEAD "      tensor_parallel_size: 2\n" CONFIG_TAIL;

static char log_root[4096];

static int64_t piece_size(int tensor, int rank, int mb)
{
	if (tensor == DLI_TENSOR_WEIGHT)
		return 50 + 7 * rank;
	if (tensor == DLI_TENSOR_ACTIVATION)
		return rank == 1 ? 0 : 700 + 300 * rank + 13 * mb;
	return 200 + 31 * rank + mb;
}

static void piece(int tensor, int64_t it, int rank, int mb, float *v, int64_t n)
{
	uint64_t s = 0x2545f4914f6cdd1dull * (uint64_t)(1 + tensor + 10 * rank + 100 * mb + 1000 * it);
	for (int64_t i = 0; i < n; i++) {
		s = s * 6364136223846793005ull + 1442695040888963407ull;
		double u = (double)(s >> 11) / 9007199254740992.0;
		v[i] = (float)(u < 0.04 ? 0 : tensor == DLI_TENSOR_GRADIENT ? 3e3 + u : 4 * u - 1);
	}
	/* One NaN in the second step's gradient: nan_count adds exactly, min and max say NaN. */
	if (tensor == DLI_TENSOR_GRADIENT && it == 1 && rank == 2 && mb == 1 && n > 5)
		v[5] = NAN;
	{
	}
}

static int feed(struct dli_context *ctx, int tensor, int64_t it, int rank, int mb)
{
	int64_t n = piece_size(tensor, rank, mb);
	float *v = malloc((size_t)(n ? n : 1) * sizeof *v);
	if (!v)
		return -ENOMEM;
	piece(tensor, it, rank, mb, v, n);
	struct dli_tensor t = {.data = v, .dtype = DLI_DTYPE_F32, .device = {DLI_DEVICE_CPU, 0},
			       .ndim = 1, .shape = {n}, .contiguous = true};
	struct dli_layer *layer;
	int r = dli_layer_get(ctx, "fc1", &layer, NULL);
	if (!r)
		r = dli_inspect_tensor(layer, tensor, &t, NULL, NULL);
	free(v);
	return r;
}

static pthread_barrier_t reload_barrier;

struct rank_args {
	int rank;
	bool pooled, leaves, reload;
	bool grad_rank0_only; /* the gradient comes from rank 0 alone */
	bool copies;          /* each rank reads the config through a path of its own */
	const char *yaml;     /* the config text (NULL: config) */
	const char *dir;
	int rc;
};

static void *run_rank(void *p)
{
	struct rank_args *a = p;
	struct loop_comm comm = {.rank = a->rank};
	struct dli_options o;
	dli_options_init(&o);
	char cfg_path[4300];
	if (a->reload || a->copies) {
		/* run_all wrote the file, and a copy in copy/ */
		static const char *const paths[N_RANKS] = {"%s/config.yaml", "%s/./config.yaml",
							   "%s/copy/config.yaml"};
		snprintf(cfg_path, sizeof cfg_path, a->copies ? paths[a->rank] : paths[0], a->dir);
		o.config_path = cfg_path;
	} else {
		o.config_yaml = a->yaml ? a->yaml : config;
	}
	o.log_dir = a->dir;
	if (!a->pooled) {
		o.comm_ops = &loop_ops;
		o.comm = &comm;
	}
	struct dli_context *ctx;
	struct dli_error err;
	if ((a->rc = dli_init(&o, &ctx, &err))) {
		fprintf(stderr, "rank %d: dli_init: %s\n", a->rank, err.message);
		return NULL;
	}
	for (int64_t it = 0; it < 2 && !a->rc; it++) {
		if (a->leaves && it == 1)
			break;
		for (int rk = a->pooled ? 0 : a->rank; rk < (a->pooled ? N_RANKS : a->rank + 1); rk++)
			for (int mb = 0; mb < 2 && !a->rc; mb++) {
				a->rc = feed(ctx, DLI_TENSOR_ACTIVATION, it, rk, mb);
				if (!a->rc && (!a->grad_rank0_only || rk == 0))
					a->rc = feed(ctx, DLI_TENSOR_GRADIENT, it, rk, mb);
			}
		if (!a->rc && !a->pooled)
			a->rc = feed(ctx, DLI_TENSOR_WEIGHT, it, a->rank, 0);
		if (!a->rc && a->reload && it == 0) {
			/* The same features, new text, once every rank has read the old one: applied
			 * at the end of this dli_step. */
			pthread_barrier_wait(&reload_barrier);
			if (a->rank == 0) {
				FILE *f = fopen(cfg_path, "a");
				if (!f || fputs("# edited\n", f) < 0 || fclose(f))
					a->rc = -EIO;
			}
			pthread_barrier_wait(&reload_barrier);
			if (!a->rc)
				a->rc = dli_config_reload(ctx);
		}
		if (!a->rc)
			a->rc = dli_step(ctx);
	}
	dli_destroy(ctx);
	return NULL;
}

/* ---- The logs ---- */

static unsigned long hash_text(const char *s)
{
	unsigned long h = 5381;
	for (; *s; s++)
		h = h * 33 + (unsigned char)*s;
	return h;
}

struct line {
	char name[256];
	long it;
	char hex[64];
};

static size_t read_log(const char *dir, int rank, struct line *out, size_t cap, char *msgs,
		       size_t msgs_size)
{
	char path[8192], buf[4096];
	snprintf(path, sizeof path, "%s/exact-rank%d.txt", dir, rank);
	FILE *f = fopen(path, "r");
	size_t n = 0, off = 0;
	if (!f) {
		CHECK(0, "no log %s", path);
		return 0;
	}
	while (fgets(buf, sizeof buf, f)) {
		if (buf[0] == 'H' && n < cap && sscanf(buf, "H %255s %ld", out[n].name, &out[n].it) == 2) {
			/* The whole line is the value: compared as text. */
			char *nl = strchr(buf, '\n');
			if (nl)
				*nl = 0;
			snprintf(out[n].hex, sizeof out[n].hex, "h%lu", hash_text(buf));
			n++;
		} else if (buf[0] == 'S' && n < cap &&
		    sscanf(buf, "S %255s %ld %63s", out[n].name, &out[n].it, out[n].hex) == 3)
			n++;
		else if (buf[0] == 'M' && msgs && off + strlen(buf) < msgs_size) {
			memcpy(msgs + off, buf, strlen(buf) + 1);
			off += strlen(buf);
		}
	}
	fclose(f);
	return n;
}

static const struct line *find(const struct line *v, size_t n, const char *name, long it)
{
	for (size_t i = 0; i < n; i++)
		if (v[i].it == it && !strcmp(v[i].name, name))
			return &v[i];
	return NULL;
}

static bool exact_stat(const char *name)
{
	static const char *const ends[] = {"_min", "_max", "_cur_amax", "_nan_count", "_inf_count",
					   "_zero%"};
	size_t len = strlen(name);
	for (size_t i = 0; i < sizeof ends / sizeof ends[0]; i++) {
		size_t e = strlen(ends[i]);
		if (len > e && !strcmp(name + len - e, ends[i]))
			return true;
	}
	return false;
}

/* Runs N_RANKS ranks in `dir`, each with `how`'s settings (its rank and dir set here; leaves: the
 * last rank leaves). */
static void run_all(const char *dir, struct rank_args how)
{
	bool copies = how.copies, reload = how.reload;
	for (int k = 0; k < (copies ? 2 : reload ? 1 : 0); k++) {
		char path[4300];
		snprintf(path, sizeof path, k ? "%s/copy" : "%s", dir);
		mkdir(path, 0755);
		strcat(path, "/config.yaml");
		FILE *f = fopen(path, "w");
		CHECK(f && fputs(config, f) >= 0 && !fclose(f), "cannot write %s", path);
	}
	pthread_t th[N_RANKS];
	struct rank_args a[N_RANKS];
	/* A fresh board: every communicator starts at round 0. */
	for (int p = 0; p < 2; p++) {
		rounds[p].gen = p;
		rounds[p].arrived = rounds[p].departed = 0;
		memset(rounds[p].in, 0, sizeof rounds[p].in);
	}
	for (int r = 0; r < N_RANKS; r++) {
		a[r] = how;
		a[r].rank = r;
		a[r].dir = dir;
		a[r].leaves = how.leaves && r == N_RANKS - 1;
		pthread_create(&th[r], NULL, run_rank, &a[r]);
	}
	for (int r = 0; r < N_RANKS; r++) {
		pthread_join(th[r], NULL);
		CHECK(a[r].rc == 0, "rank %d failed: %s", r, strerror(-a[r].rc));
	}
}

/* Reads each rank's log in `dir` and compares every value of the single context's log `ref` with
 * it: bit-identical across ranks, equal to the single context's. With `only0`, a name holding
 * `only0` is rank 0's alone: the other ranks must not log it. The count compared. */
static size_t compare(const char *dir, const struct line *ref, size_t n_ref,
		      struct line (*got)[LOG_CAP], size_t *n_got, char (*msgs)[MSGS_SIZE],
		      const char *only0)
{
	for (int r = 0; r < N_RANKS; r++)
		n_got[r] = read_log(dir, r, got[r], LOG_CAP, msgs[r], MSGS_SIZE);
	size_t compared = 0;
	for (size_t i = 0; i < n_ref; i++) {
		for (int r = 0; r < N_RANKS; r++) {
			const struct line *l = find(got[r], n_got[r], ref[i].name, ref[i].it);
			if (r > 0 && only0 && strstr(ref[i].name, only0)) {
				CHECK(!l, "rank %d logs %s at iteration %ld, which it never fed", r,
				      ref[i].name, ref[i].it);
				continue;
			}
			CHECK(l, "rank %d lacks %s at iteration %ld", r, ref[i].name, ref[i].it);
			if (!l)
				continue;
			/* Bit-identical across ranks. */
			const struct line *l0 = find(got[0], n_got[0], l->name, l->it);
			CHECK(l0 && !strcmp(l->hex, l0->hex), "rank %d and rank 0 differ on %s: %s",
			      r, l->name, l->hex);
			double g = strtod(l->hex, NULL), w = strtod(ref[i].hex, NULL);
			bool ok = l->hex[0] == 'h' ? !strcmp(l->hex, ref[i].hex) /* a histogram */
				  : exact_stat(l->name) || isnan(w)
					  ? (g == w || (isnan(g) && isnan(w)))
					  : fabs(g - w) <= 1e-12 * fabs(w);
			CHECK(ok, "rank %d: %s at iteration %ld is %s, the single context's %s", r,
			      l->name, l->it, l->hex, ref[i].hex);
			compared++;
		}
	}
	return compared;
}

/* DLINSPECT_COMM_TIMEOUT takes a positive decimal number of seconds, nothing else strtod reads. */
static void test_timeout_refused(void)
{
	static const char *const bad[] = {"0x10", "inf", " 5", "5s", "-1", "0", "nan"};
	const char *was = getenv("DLINSPECT_COMM_TIMEOUT");
	char *saved = was ? strdup(was) : NULL;
	for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
		struct loop_comm comm = {.rank = 0};
		struct dli_options o;
		struct dli_context *ctx = NULL;
		struct dli_error err;
		char want[128];
		dli_options_init(&o);
		o.config_yaml = config;
		o.log_dir = log_root;
		o.comm_ops = &loop_ops;
		o.comm = &comm;
		setenv("DLINSPECT_COMM_TIMEOUT", bad[i], 1);
		int r = dli_init(&o, &ctx, &err);
		snprintf(want, sizeof want,
			 "DLINSPECT_COMM_TIMEOUT='%s': expected a positive number of seconds", bad[i]);
		CHECK(r == -EINVAL && strstr(err.message, want), "DLINSPECT_COMM_TIMEOUT='%s': %d %s",
		      bad[i], r, r ? err.message : "accepted");
		if (!r)
			dli_destroy(ctx);
	}
	if (saved)
		setenv("DLINSPECT_COMM_TIMEOUT", saved, 1);
	else
		unsetenv("DLINSPECT_COMM_TIMEOUT");
	free(saved);
}

int main(int argc, char **argv)
{
	if (argc < 2) {
		fprintf(stderr, "usage: %s EXACT_LOGGER_DIR\n", argv[0]);
		return 2;
	}
	const char *path = getenv("DLINSPECT_PLUGIN_PATH");
	char plugin_path[8192];
	snprintf(plugin_path, sizeof plugin_path, "%s:%s", path ? path : "", argv[1]);
	setenv("DLINSPECT_PLUGIN_PATH", plugin_path, 1);
	unsetenv("DLINSPECT_COMMUNICATOR");
	setenv("DLINSPECT_COMM_TIMEOUT", "0.5", 1);
	setenv("DLINSPECT_LOG_LEVEL", "debug", 1);
	snprintf(log_root, sizeof log_root, "/tmp/dli-host-comm-XXXXXX");
	if (!mkdtemp(log_root)) {
		perror("mkdtemp");
		return 1;
	}
	for (int p = 0; p < 2; p++)
		for (int i = 0; i < N_RANKS; i++)
			rounds[p].buf[i] = malloc(MAX_BYTES);
	test_timeout_refused();
	char dir_ranks[4200], dir_pooled[4200], dir_fault[4200], dir_reload[4200];
	char dir_pooled0[4200], dir_only0[4200], dir_copies[4200], dir_tp2[4200];
	snprintf(dir_ranks, sizeof dir_ranks, "%s/ranks", log_root);
	snprintf(dir_pooled, sizeof dir_pooled, "%s/pooled", log_root);
	snprintf(dir_fault, sizeof dir_fault, "%s/fault", log_root);
	snprintf(dir_reload, sizeof dir_reload, "%s/reload", log_root);
	snprintf(dir_pooled0, sizeof dir_pooled0, "%s/pooled0", log_root);
	snprintf(dir_only0, sizeof dir_only0, "%s/only0", log_root);
	snprintf(dir_copies, sizeof dir_copies, "%s/copies", log_root);
	snprintf(dir_tp2, sizeof dir_tp2, "%s/tp2", log_root);
	mkdir(dir_tp2, 0755);
	mkdir(dir_copies, 0755);
	mkdir(dir_pooled0, 0755);
	mkdir(dir_only0, 0755);
	mkdir(dir_reload, 0755);
	mkdir(dir_ranks, 0755);
	mkdir(dir_pooled, 0755);
	mkdir(dir_fault, 0755);

	/* The single context over every rank's pieces. */
	struct rank_args pooled = {.rank = 0, .pooled = true, .dir = dir_pooled};
	run_rank(&pooled);
	CHECK(pooled.rc == 0, "pooled run failed");

	static struct line ref[LOG_CAP], got[N_RANKS][LOG_CAP];
	static char msgs[N_RANKS][MSGS_SIZE];
	size_t n_ref = read_log(dir_pooled, 0, ref, LOG_CAP, NULL, 0), n_got[N_RANKS];

	run_all(dir_ranks, (struct rank_args){0});
	size_t compared = compare(dir_ranks, ref, n_ref, got, n_got, msgs, NULL);
	CHECK(n_ref >= 2 * 2 * 12, "the single context logged %zu values", n_ref);
	CHECK(find(ref, n_ref, "fc1_activation_nvfp4_underflows%", 0) &&
		      find(ref, n_ref, "fc1_activation_nvfp4_mse", 1),
	      "the single context logged no NVFP4 statistics");
	CHECK(find(ref, n_ref, "fc1_activation_histogram", 0) &&
		      find(ref, n_ref, "fc1_gradient_histogram", 1),
	      "the single context logged no histograms");
	/* Weights (tensor_parallel_size 1): each rank's own, different from one rank to the next. */
	const struct line *w0 = find(got[0], n_got[0], "fc1_weight_mean", 0),
			  *w2 = find(got[2], n_got[2], "fc1_weight_mean", 0);
	CHECK(w0 && w2 && strcmp(w0->hex, w2->hex) != 0, "weights were reduced across ranks");
	CHECK(strstr(msgs[0], "reduced across group [0-2]: 5 records, 2 collective(s)") &&
		      strstr(msgs[0], "reduced across group [0-2]: 5 records, 1 collective(s)"),
	      "no DEBUG lines counting the collectives: %s", msgs[0]);

	/* A reload at the end of the first step: the second is still reduced, no key refused. */
	pthread_barrier_init(&reload_barrier, NULL, N_RANKS);
	run_all(dir_reload, (struct rank_args){.reload = true});
	pthread_barrier_destroy(&reload_barrier);
	CHECK(compare(dir_reload, ref, n_ref, got, n_got, msgs, NULL) == compared,
	      "after the reload, not every value was compared");
	for (int r = 0; r < N_RANKS; r++) {
		CHECK(strstr(msgs[r], "reloaded at the end of iteration 0"),
		      "rank %d: the config was not reloaded: %s", r, msgs[r]);
		CHECK(!strstr(msgs[r], "same reduction key"),
		      "rank %d: the reload's accumulators were refused their keys: %s", r, msgs[r]);
		CHECK(strstr(msgs[r], "reduced across group [0-2]: 5 records, 1 collective(s)"),
		      "rank %d: no reduction after the reload: %s", r, msgs[r]);
	}

	/* One config through three paths: the same keys, so reduced as with one text. */
	run_all(dir_copies, (struct rank_args){.copies = true});
	CHECK(compare(dir_copies, ref, n_ref, got, n_got, msgs, NULL) == compared,
	      "with the config at other paths, not every value was compared");

	/* The gradient on rank 0 only, two steps: each step's values are that step's pieces. */
	struct rank_args pooled0 = {.rank = 0, .pooled = true, .dir = dir_pooled0,
				    .grad_rank0_only = true};
	run_rank(&pooled0);
	CHECK(pooled0.rc == 0, "pooled run (gradient of rank 0 only) failed");
	n_ref = read_log(dir_pooled0, 0, ref, LOG_CAP, NULL, 0);
	CHECK(find(ref, n_ref, "fc1_gradient_l1_norm", 1), "the single context logged no gradient");
	run_all(dir_only0, (struct rank_args){.grad_rank0_only = true});
	CHECK(compare(dir_only0, ref, n_ref, got, n_got, msgs, "_gradient_") >= n_ref,
	      "not every value of the gradient-on-rank-0 run was compared");

	/* tensor_parallel_size 2 in a world of 3: every rank says so and keeps its weight statistics
	 * per rank (not ranks 0 and 1 reduced together and rank 2 alone). */
	run_all(dir_tp2, (struct rank_args){.yaml = config_tp2});
	for (int r = 0; r < N_RANKS; r++) {
		n_got[r] = read_log(dir_tp2, r, got[r], LOG_CAP, msgs[r], sizeof msgs[r]);
		CHECK(strstr(msgs[r], "tensor_parallel_size 2 does not divide the world of 3 ranks"),
		      "rank %d: no error about tensor_parallel_size: %s", r, msgs[r]);
		const struct line *w = find(got[r], n_got[r], "fc1_weight_l1_norm", 0);
		double want = 0;
		float v[64];
		piece(DLI_TENSOR_WEIGHT, 0, r, 0, v, piece_size(DLI_TENSOR_WEIGHT, r, 0));
		for (int64_t i = 0; i < piece_size(DLI_TENSOR_WEIGHT, r, 0); i++)
			want += fabs(v[i]);
		CHECK(w && fabs(strtod(w->hex, NULL) - want) <= 1e-12 * want,
		      "rank %d: fc1_weight_l1_norm is %s, its own weight's %.17g", r,
		      w ? w->hex : "missing", want);
	}

	/* Rank 2 never ends the second step. */
	run_all(dir_fault, (struct rank_args){.leaves = true});
	for (int r = 0; r < N_RANKS - 1; r++) {
		n_got[r] = read_log(dir_fault, r, got[r], LOG_CAP, msgs[r], sizeof msgs[r]);
		CHECK(strstr(msgs[r], "statistics of iteration 1 were not reduced across group [0-2]") &&
			      strstr(msgs[r], "missing ranks [2]"),
		      "rank %d: no message naming the group and rank 2: %s", r, msgs[r]);
		char name[64];
		snprintf(name, sizeof name, "fc1_gradient_max_rank%d", r);
		CHECK(find(got[r], n_got[r], name, 1), "rank %d: no %s at iteration 1", r, name);
		CHECK(find(got[r], n_got[r], "fc1_gradient_max", 0) &&
			      !find(got[r], n_got[r], "fc1_gradient_max", 1),
		      "rank %d: iteration 1 logged unmarked", r);
	}
	for (int p = 0; p < 2; p++)
		for (int i = 0; i < N_RANKS; i++)
			free(rounds[p].buf[i]);
	char cmd[4200];
	snprintf(cmd, sizeof cmd, "rm -rf '%s'", log_root);
	if (system(cmd) != 0)
		fprintf(stderr, "could not remove %s\n", log_root);
	if (failures)
		fprintf(stderr, "%d failure(s)\n", failures);
	else
		printf("%zu values equal to the single context's, identical on %d ranks; the fault "
		       "step per rank\n", compared, N_RANKS);
	return failures ? 1 : 0;
}
