/* dlinspect-demo: a host program that makes the calls a TransformerEngine-style model makes, so a
 * newcomer can see a config at work: which GEMMs stay in FP8, and how next-iteration caching lets a
 * host skip every debug call until an answer can change. Computes in f32; the FP8 answers only say
 * what a real host would quantize. */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include <dlinspect/dlinspect.h>

#define DIM 64 /* every tensor is DIM x DIM: small, real data */
#define N_LINEARS 4
/* What a host without caching asks per Linear and step: 6 inspect, 9 modify (one per GEMM a tensor
 * feeds, see `feeds`), 3 fp8 queries. */
#define QUERIES_PER_LINEAR 18

static const char *const linear_names[N_LINEARS] = {
	"self_attention.qkv", "self_attention.proj", "mlp.fc1", "mlp.fc2",
};
static const char *const gemm_names[DLI_GEMM_COUNT] = {"fprop", "dgrad", "wgrad"};
static const char *const tensor_names[DLI_TENSOR_STANDARD_COUNT] = {
	"activation", "gradient", "weight", "output", "wgrad", "dgrad",
};

/* Which GEMMs each standard tensor feeds (REFERENCE.md: TransformerEngine's Linear). */
static const uint32_t feeds[DLI_TENSOR_STANDARD_COUNT] = {
	[DLI_TENSOR_ACTIVATION] = 1u << DLI_GEMM_FPROP | 1u << DLI_GEMM_WGRAD,
	[DLI_TENSOR_GRADIENT] = 1u << DLI_GEMM_DGRAD | 1u << DLI_GEMM_WGRAD,
	[DLI_TENSOR_WEIGHT] = 1u << DLI_GEMM_FPROP | 1u << DLI_GEMM_DGRAD,
	[DLI_TENSOR_OUTPUT] = 1u << DLI_GEMM_FPROP,
	[DLI_TENSOR_WGRAD] = 1u << DLI_GEMM_WGRAD,
	[DLI_TENSOR_DGRAD] = 1u << DLI_GEMM_DGRAD,
};

/* One Linear: its handle, its weight, and the plan cached from the last *_enabled queries. */
struct linear {
	struct dli_layer *layer;
	char name[96];
	float weight[DIM * DIM];
	int64_t next_query; /* no debug call at all before this iteration */
	bool fp8[DLI_GEMM_COUNT], fp8_step0[DLI_GEMM_COUNT];
	bool inspect[DLI_TENSOR_STANDARD_COUNT];
	bool modify[DLI_GEMM_COUNT][DLI_TENSOR_STANDARD_COUNT];
};

static struct {
	uint64_t queries, inspects, modifies, skipped;
} calls;

static uint64_t rng_state;

/* splitmix64: the same numbers on every run and every machine. */
static float rng_uniform(void)
{
	uint64_t z = (rng_state += 0x9e3779b97f4a7c15ull);
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	z ^= z >> 31;
	return (float)((double)(z >> 11) / 9007199254740992.0 * 2.0 - 1.0); /* [-1, 1) */
}

static void fill(float *x, uint64_t seed, float scale)
{
	rng_state = seed;
	for (int i = 0; i < DIM * DIM; i++)
		x[i] = scale * rng_uniform();
}

/* c = op(a) * op(b) with op = transpose when asked: the three GEMMs of a Linear. */
static void gemm(float *c, const float *a, bool ta, const float *b, bool tb)
{
	for (int i = 0; i < DIM; i++)
		for (int j = 0; j < DIM; j++) {
			float s = 0;
			for (int k = 0; k < DIM; k++)
				s += (ta ? a[k * DIM + i] : a[i * DIM + k]) *
				     (tb ? b[j * DIM + k] : b[k * DIM + j]);
			c[i * DIM + j] = s;
		}
}

static struct dli_tensor view(float *data)
{
	return (struct dli_tensor){.data = data, .dtype = DLI_DTYPE_F32, .ndim = 2,
				   .shape = {DIM, DIM}, .contiguous = true};
}

/* Step 1 of the call pattern: ask everything once, remember the earliest next iteration. */
static void query(struct linear *l, int64_t it)
{
	int64_t next = DLI_NEVER, n;
	for (int t = 0; t < DLI_TENSOR_STANDARD_COUNT; t++) {
		l->inspect[t] = dli_inspect_tensor_enabled(l->layer, t, &n);
		next = n < next ? n : next;
		calls.queries++;
		for (int g = 0; g < DLI_GEMM_COUNT; g++) {
			if (!(feeds[t] >> g & 1u))
				continue;
			l->modify[g][t] = dli_modify_tensor_enabled(l->layer, g, t, &n);
			next = n < next ? n : next;
			calls.queries++;
		}
	}
	for (int g = 0; g < DLI_GEMM_COUNT; g++) {
		l->fp8[g] = dli_fp8_gemm_enabled(l->layer, g, &n);
		next = n < next ? n : next;
		calls.queries++;
	}
	l->next_query = next;
	if (it == 0)
		memcpy(l->fp8_step0, l->fp8, sizeof l->fp8);
}

/* The operand a GEMM reads: a feature's modified copy when the plan says so, else `x` itself. */
static float *operand(struct linear *l, int g, int t, float *x, float *scratch)
{
	if (!l->modify[g][t])
		return x;
	struct dli_tensor in = view(x), out = view(scratch);
	calls.modifies++;
	int r = dli_modify_tensor(l->layer, g, t, &in, NULL, &out);
	if (r) {
		fprintf(stderr, "dlinspect-demo: modify_tensor(%s, %s, %s): %s\n", l->name,
			gemm_names[g], tensor_names[t], strerror(-r));
		return x;
	}
	return scratch;
}

static void inspect(struct linear *l, int t, float *x)
{
	if (!l->inspect[t])
		return;
	struct dli_tensor hp = view(x);
	calls.inspects++;
	int r = dli_inspect_tensor(l->layer, t, &hp, NULL, NULL);
	if (r)
		fprintf(stderr, "dlinspect-demo: inspect_tensor(%s, %s): %s\n", l->name,
			tensor_names[t], strerror(-r));
}

/* One forward and backward of a Linear, with the debug calls TransformerEngine makes. */
static void linear_step(struct linear *l, int64_t it, uint64_t seed)
{
	static float act[DIM * DIM], grad[DIM * DIM], out[DIM * DIM], dgrad[DIM * DIM],
		wgrad[DIM * DIM], s1[DIM * DIM], s2[DIM * DIM];
	if (it >= l->next_query)
		query(l, it);
	else
		calls.skipped += QUERIES_PER_LINEAR;
	fill(act, seed, 1.0f);
	fill(grad, seed ^ 0x5eed, 1e-3f);

	/* Forward: fprop = activation x weight. */
	float *a = operand(l, DLI_GEMM_FPROP, DLI_TENSOR_ACTIVATION, act, s1);
	float *w = operand(l, DLI_GEMM_FPROP, DLI_TENSOR_WEIGHT, l->weight, s2);
	inspect(l, DLI_TENSOR_ACTIVATION, act);
	inspect(l, DLI_TENSOR_WEIGHT, l->weight);
	gemm(out, a, false, w, false);
	inspect(l, DLI_TENSOR_OUTPUT, operand(l, DLI_GEMM_FPROP, DLI_TENSOR_OUTPUT, out, s1));

	/* Backward: dgrad = gradient x weight^T, wgrad = activation^T x gradient. */
	float *g = operand(l, DLI_GEMM_DGRAD, DLI_TENSOR_GRADIENT, grad, s1);
	w = operand(l, DLI_GEMM_DGRAD, DLI_TENSOR_WEIGHT, l->weight, s2);
	inspect(l, DLI_TENSOR_GRADIENT, grad);
	gemm(dgrad, g, false, w, true);
	inspect(l, DLI_TENSOR_DGRAD, operand(l, DLI_GEMM_DGRAD, DLI_TENSOR_DGRAD, dgrad, s1));
	a = operand(l, DLI_GEMM_WGRAD, DLI_TENSOR_ACTIVATION, act, s1);
	g = operand(l, DLI_GEMM_WGRAD, DLI_TENSOR_GRADIENT, grad, s2);
	gemm(wgrad, a, true, g, false);
	inspect(l, DLI_TENSOR_WGRAD, operand(l, DLI_GEMM_WGRAD, DLI_TENSOR_WGRAD, wgrad, s1));
}

/* The kernel stamps files with its coarse clock: read the same clock, or a file written right
 * after the run starts could look older than the run. */
static struct timespec run_start(void)
{
	struct timespec t = {0};
#ifdef CLOCK_REALTIME_COARSE
	clock_gettime(CLOCK_REALTIME_COARSE, &t);
#else
	clock_gettime(CLOCK_REALTIME, &t);
#endif
	return t;
}

/* Says whether this run wrote the log in `dir`, judged by the file's modification time against the
 * run's start: a log an earlier run left must not pass for this run's, and one the loggers emptied at
 * start (they overwrite by default, as nvdlfw_inspect does) is said to be empty. */
static void report_log(const char *what, const char *dir, struct timespec start,
		       const char *why_not)
{
	char path[4200];
	struct stat st;
	snprintf(path, sizeof path, "%s/nvdlfw_inspect_globalrank-0.log", dir);
	bool there = stat(path, &st) == 0;
	bool now = there && (st.st_mtim.tv_sec > start.tv_sec ||
			     (st.st_mtim.tv_sec == start.tv_sec && st.st_mtim.tv_nsec >= start.tv_nsec));
	const char *state = "does not exist";
	if (now && st.st_size > 0)
		state = "exists, written by this run";
	else if (now)
		state = "exists, emptied at start: an earlier run's lines were removed";
	else if (there)
		state = "exists, but left by an earlier run";
	printf("  %s %s/  (%s)\n", what, dir, state);
	if (!now || st.st_size == 0)
		printf("      nothing written this run: %s\n", why_not);
}

/* The TensorBoard logger's directory (its default place), when this run has one. */
static void report_tensorboard(const char *log_dir)
{
	char dir[4200];
	struct stat st;
	snprintf(dir, sizeof dir, "%s/tensorboard", log_dir);
	if (stat(dir, &st) == 0 && S_ISDIR(st.st_mode))
		printf("  tensorboard: %s/  (open it with: tensorboard --logdir %s)\n", dir, dir);
}

/* The step-0 answers per Linear, and what caching saved. */
static void print_plan(const struct linear *lin, size_t n)
{
	printf("\nGEMM precision at step 0 (next query: when an answer may change):\n");
	for (size_t i = 0; i < n; i++) {
		const struct linear *l = &lin[i];
		printf("  %-36s", l->name);
		for (int g = 0; g < DLI_GEMM_COUNT; g++)
			printf("  %s: %-14s", gemm_names[g],
			       l->fp8_step0[g] ? "FP8" : "high precision");
		if (l->next_query == DLI_NEVER)
			printf("  next query: never\n");
		else
			printf("  next query: %" PRId64 "\n", l->next_query);
	}
	printf("\nDebug calls: %" PRIu64 " made (%" PRIu64 " *_enabled queries, %" PRIu64
	       " inspect_tensor, %" PRIu64 " modify_tensor),\n             %" PRIu64
	       " queries skipped thanks to next-iteration caching\n",
	       calls.queries + calls.inspects + calls.modifies, calls.queries, calls.inspects,
	       calls.modifies, calls.skipped);
}

static void usage(FILE *f, const char *argv0)
{
	fprintf(f, "usage: %s [--config PATH] [--log-dir DIR] [--layers N] [--steps N] [--quiet]\n"
		   "  --config PATH   YAML config (default: $DLINSPECT_CONFIG, else none)\n"
		   "  --log-dir DIR   where the loggers write (default: $DLINSPECT_LOG_DIR, else\n"
		   "                  ./dlinspect_demo_logs)\n"
		   "  --layers N      transformer layers, 4 Linear each (default: 4)\n"
		   "  --steps N       training steps (default: 10)\n"
		   "  --quiet         print errors only\n",
		argv0);
}

static bool parse_count(const char *s, long min, long max, long *out)
{
	char *end;
	errno = 0;
	*out = strtol(s, &end, 10);
	return !errno && end != s && !*end && *out >= min && *out <= max;
}

int main(int argc, char **argv)
{
	static const struct option longopts[] = {
		{"config", required_argument, NULL, 'c'}, {"log-dir", required_argument, NULL, 'l'},
		{"layers", required_argument, NULL, 'n'}, {"steps", required_argument, NULL, 's'},
		{"quiet", no_argument, NULL, 'q'},        {"help", no_argument, NULL, 'h'},
		{NULL, 0, NULL, 0},
	};
	const char *config = NULL, *log_dir = getenv("DLINSPECT_LOG_DIR");
	long n_layers = 4, steps = 10;
	bool quiet = false;
	int opt;
	while ((opt = getopt_long(argc, argv, "", longopts, NULL)) != -1) {
		long *count = opt == 'n' ? &n_layers : &steps;
		switch (opt) {
		case 'c': config = optarg; break;
		case 'l': log_dir = optarg; break;
		case 'q': quiet = true; break;
		case 'h': usage(stdout, argv[0]); return 0;
		case 'n':
		case 's':
			/* A Linear holds a 16 KiB weight: 1000 layers are 64 MiB. */
			if (parse_count(optarg, opt == 'n', opt == 'n' ? 1000 : 1000000, count))
				break;
			fprintf(stderr, "%s: --%s wants a whole number >= %d, got '%s'\n", argv[0],
				opt == 'n' ? "layers" : "steps", opt == 'n', optarg);
			/* fall through */
		default: usage(stderr, argv[0]); return 2;
		}
	}
	if (optind < argc) {
		fprintf(stderr, "%s: unexpected argument '%s'\n", argv[0], argv[optind]);
		usage(stderr, argv[0]);
		return 2;
	}

	if (!log_dir || !log_dir[0])
		log_dir = "./dlinspect_demo_logs";
	char msg_dir[4096], stat_dir[4096];
	snprintf(msg_dir, sizeof msg_dir, "%s/nvdlfw_inspect_logs", log_dir);
	snprintf(stat_dir, sizeof stat_dir, "%s/nvdlfw_inspect_statistics_logs", log_dir);
	struct timespec start = run_start();

	struct dli_options o;
	dli_options_init(&o);
	o.config_path = config;
	o.log_dir = log_dir;
	struct dli_context *ctx;
	struct dli_error err;
	if (dli_init(&o, &ctx, &err)) {
		fprintf(stderr, "dlinspect-demo: %s\n", err.message);
		return 1;
	}
	const char *env = getenv("DLINSPECT_CONFIG");
	if (!quiet) {
		printf("dlinspect demo: %ld transformer layers x 4 Linear, %ld steps\n", n_layers,
		       steps);
		if (config || (env && env[0]))
			printf("  config:  %s%s\n", config ? config : env,
			       config ? "" : " (from $DLINSPECT_CONFIG)");
		else
			printf("  config:  none (default run: FP8 everywhere, nothing logged)\n");
		printf("  log dir: %s\n\n", log_dir);
	}

	size_t n = (size_t)n_layers * N_LINEARS;
	struct linear *lin = calloc(n, sizeof *lin);
	if (!lin) {
		fprintf(stderr, "dlinspect-demo: out of memory\n");
		dli_destroy(ctx);
		return 1;
	}
	for (size_t i = 0; i < n; i++) {
		struct linear *l = &lin[i];
		snprintf(l->name, sizeof l->name, "model.layers.%zu.%s", i / N_LINEARS,
			 linear_names[i % N_LINEARS]);
		if (dli_layer_get(ctx, l->name, &l->layer, &err)) {
			fprintf(stderr, "dlinspect-demo: %s\n", err.message);
			free(lin);
			dli_destroy(ctx);
			return 1;
		}
		fill(l->weight, 1000 + i, 0.125f);
	}
	dli_log(ctx, DLI_LOG_INFO, "dlinspect-demo: %zu Linear layers, %ld steps", n, steps);

	for (long s = 0; s < steps; s++) {
		uint64_t before = calls.queries + calls.inspects + calls.modifies;
		int64_t it = dli_iteration_get(ctx);
		for (size_t i = 0; i < n; i++)
			linear_step(&lin[i], it, (uint64_t)s * 1000003u + i);
		int r = dli_step(ctx);
		if (r)
			fprintf(stderr, "dlinspect-demo: dli_step: %s\n", strerror(-r));
		if (!quiet && (s < 3 || s == steps - 1))
			printf("step %ld: %" PRIu64 " debug calls\n", s,
			       calls.queries + calls.inspects + calls.modifies - before);
		else if (!quiet && s == 3)
			printf("...\n");
	}

	if (!quiet && steps > 0)
		print_plan(lin, n);
	free(lin);
	dli_destroy(ctx); /* flushes and closes the loggers: look at the files only after this */

	if (!quiet) {
		printf("\nLogs:\n");
		report_log("messages:  ", msg_dir, start,
			   "the message log is created on the first message, and only when a "
			   "logger is configured");
		report_log("statistics:", stat_dir, start,
			   "only a feature that collects statistics, such as LogTensorStats, "
			   "writes this log");
		report_tensorboard(log_dir);
	}
	return 0;
}
