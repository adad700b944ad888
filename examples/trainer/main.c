/* dlinspect-train: a small FP8 training run that dlinspect debugs. A residual MLP (model.h) learns a
 * teacher task with a known loss floor (data.h) in fp32, bf16 or FP8 with delayed scaling
 * (fp8_recipe.h); every Linear consults dlinspect as TransformerEngine's does (linear.h). With
 * --bench it instead measures what dlinspect costs per training step (docs/trainer.md). */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include <dlinspect/dlinspect.h>

#include "data.h"
#include "model.h"
#ifdef DLT_HAVE_CUDA
#include "gemm_cuda.h"
#include "mirror_cuda.h"
#endif

struct options {
	struct dlt_model_options model;
	enum dlt_precision precision;
	struct dlt_recipe recipe;
	const char *config, *log_dir, *trace;
	float noise;
	int64_t bad_step;
	float bad_value;
	int64_t inject_step; /* --inject-nonfinite STEP:LAYER[:nan|inf]; -1 none */
	const char *inject_layer;
	float inject_value;
	int print_every;
	bool quiet, no_dlinspect, bench;
	int bench_rounds, bench_steps;
	/* --microbatches, --parallel, --tp (docs/distributed.md, "The trainer under mpirun") */
	int micro;
	enum { PAR_NONE, PAR_DATA, PAR_TENSOR } parallel;
	int tp;                      /* 0: the world size */
	const struct dlt_comm *comm; /* set under --parallel */
};

/* Everything one training run owns. */
struct trainer {
	struct dli_context *dli;
#ifdef DLT_HAVE_CUDA
	struct dlt_gemm_backend cuda_gemm; /* state NULL unless FP8 GEMMs run through cuBLASLt */
	struct dlt_mirror *mirror;         /* inspected tensors go to the GPU for the statistics */
#endif
	struct dlt_run run;
	struct dlt_model model;
	struct dlt_task task;
	float *x, *target, *mask;
	int batch; /* rows of the whole batch (x holds them all; a DP rank trains on its shard) */
	int micro; /* pieces of this rank's shard; the step goes through dlt_model_train_step_split
		    * when it is > 1 or under --parallel */
	double step_seconds; /* of run.dli_seconds, in dli_step (where the ranks' records meet) */
};

static const char *const precision_names[] = {"fp32", "bf16", "fp8"};

/* mkdir -p: a log dir such as /tmp/runs/fp8 works without preparing its parents. */
static int make_dirs(const char *path)
{
	char p[4096];
	if (snprintf(p, sizeof p, "%s", path) >= (int)sizeof p)
		return -ENAMETOOLONG;
	for (char *c = p + 1; *c; c++) {
		if (*c != '/')
			continue;
		*c = '\0';
		if (mkdir(p, 0777) && errno != EEXIST)
			return -errno;
		*c = '/';
	}
	return mkdir(p, 0777) && errno != EEXIST ? -errno : 0;
}

static void trainer_finish(struct trainer *t)
{
	dlt_model_finish(&t->model);
	dlt_task_finish(&t->task);
	free(t->x);
	free(t->target);
	free(t->mask);
	if (t->run.trace)
		fclose(t->run.trace);
	dli_destroy(t->dli); /* flushes the loggers */
#ifdef DLT_HAVE_CUDA
	dlt_gemm_cuda_destroy(&t->cuda_gemm);
	dlt_mirror_destroy(t->mirror); /* after dli_destroy: the statistics read their buffers */
#endif
	memset(t, 0, sizeof *t);
}

/* Whether a Linear is called `name`, and the names seen, for the error message. */
struct inject_check {
	const char *name;
	bool found;
	char names[1024];
};

static void inject_find(struct dlt_linear *l, void *arg)
{
	struct inject_check *c = arg;
	size_t len = strlen(c->names);
	c->found = c->found || !strcmp(l->name, c->name);
	snprintf(c->names + len, sizeof c->names - len, " %s", l->name);
}

/* dlinspect (unless `use_dli` is false; config_yaml wins over o->config), the model and the task.
 * 0, or a negative errno with the reason printed. */
static int trainer_init(struct trainer *t, const struct options *o, bool use_dli,
			const char *config_yaml, const char *log_dir)
{
	struct dli_error err = {0};
	int r;
	memset(t, 0, sizeof *t);
	if (use_dli) {
		struct dli_options d;
		dli_options_init(&d);
		d.config_path = o->config;
		d.config_yaml = config_yaml;
		d.log_dir = log_dir;
		if (o->comm) {
			d.rank = o->comm->rank;
			d.world_size = o->comm->size;
		}
		if ((r = dli_init(&d, &t->dli, &err))) {
			fprintf(stderr, "dlinspect-train: %s\n", err.message);
			return r;
		}
	}
	t->run.dli = t->dli;
	t->run.precision = o->precision;
	t->run.recipe = o->recipe;
	t->run.gemm = &dlt_gemm_cpu;
#ifdef DLT_HAVE_CUDA
	static int cuda_reported;
	/* Built with CUDA and a GPU present: FP8 GEMMs run through cuBLASLt (the rest on the CPU). */
	if (o->precision == DLT_FP8) {
		struct dli_error cerr = {0};
		char msg[256];
		if (!dlt_gemm_cuda_create(&dlt_gemm_cpu, &t->cuda_gemm, &cerr)) {
			t->run.gemm = &t->cuda_gemm;
			/* And the statistics through dlinspect's CUDA kernels. */
			if (t->dli && !dlt_mirror_create(&t->mirror, msg, sizeof msg)) {
				t->run.mirror = dlt_mirror_tensor;
				t->run.mirror_state = t->mirror;
			} else if (t->dli && !o->quiet) {
				fprintf(stderr, "dlinspect-train: statistics on the CPU: %s\n", msg);
			}
		}
		else if (!o->quiet && !cuda_reported++) /* once, not per model of the benchmark */
			fprintf(stderr, "dlinspect-train: FP8 GEMMs on the CPU (%s)\n", cerr.message);
	}
#endif
	t->run.step = t->dli ? dli_iteration_get(t->dli) : 0;
	t->run.inject_step = o->inject_step;
	t->run.inject_layer = o->inject_layer;
	t->run.inject_value = o->inject_value;
	t->run.comm = o->comm;
	t->batch = o->model.batch;
	t->micro = o->micro;
	if (o->trace && !(t->run.trace = fopen(o->trace, "w"))) {
		r = -errno;
		fprintf(stderr, "dlinspect-train: %s: %s\n", o->trace, strerror(errno));
		goto fail;
	}
	/* The model's buffers hold one piece: this rank's shard of the batch, or a microbatch. */
	struct dlt_model_options mo = o->model;
	int dp = o->comm ? o->comm->dp_size : 1;
	mo.batch = ((o->model.batch + dp - 1) / dp + o->micro - 1) / o->micro;
	if ((r = dlt_model_init(&t->model, &mo, &t->run, &err))) {
		fprintf(stderr, "dlinspect-train: %s\n", r == -ENOMEM ? "out of memory" : err.message);
		goto fail;
	}
	struct inject_check ic = {.name = o->inject_layer};
	if (o->inject_layer && (dlt_model_each_linear(&t->model, inject_find, &ic), !ic.found)) {
		fprintf(stderr, "dlinspect-train: --inject-nonfinite: the model has no Linear named "
				"'%s' (its Linears:%s)\n", o->inject_layer, ic.names);
		r = -EINVAL;
		goto fail;
	}
	if ((r = dlt_task_init(&t->task, o->model.d_in, o->model.d_out, o->noise, o->model.seed)))
		goto nomem;
	t->task.bad_step = o->bad_step;
	t->task.bad_value = o->bad_value;
	size_t rows = (size_t)o->model.batch;
	t->x = malloc(rows * (size_t)o->model.d_in * sizeof(float));
	t->target = malloc(rows * (size_t)o->model.d_out * sizeof(float));
	t->mask = malloc(rows * sizeof(float));
	if (!t->x || !t->target || !t->mask)
		goto nomem;
	return 0;
nomem:
	r = -ENOMEM;
	fprintf(stderr, "dlinspect-train: out of memory\n");
fail:
	trainer_finish(t);
	return r;
}

/* One step: the data (outside *seconds), the model's step and dli_step (inside). */
static int trainer_step(struct trainer *t, double *loss, double *seconds)
{
	int rows = t->batch;
	dlt_task_batch(&t->task, t->run.step, rows, t->x, t->target, t->mask);
	double t0 = dlt_now();
	int r = t->micro > 1 || t->run.comm ?
			dlt_model_train_step_split(&t->model, &t->run, t->x, t->target, t->mask, rows,
						   t->micro, loss) :
			dlt_model_train_step(&t->model, &t->run, t->x, t->target, t->mask, rows, loss);
	if (!r && t->dli) {
		double t1 = t->run.timed ? dlt_now() : 0.0;
		if ((r = dli_step(t->dli)) == -ECANCELED)
			fprintf(stderr, "dlinspect-train: stopping after step %" PRId64 ": %s\n",
				t->run.step, dli_last_error(t->dli));
		else if (r)
			fprintf(stderr, "dlinspect-train: dli_step: %s\n", strerror(-r));
		if (t->run.timed) {
			double dt = dlt_now() - t1;
			t->run.dli_seconds += dt;
			t->step_seconds += dt;
		}
	}
	if (seconds)
		*seconds += dlt_now() - t0;
	t->run.step++;
	return r;
}

/* The layout of the ranks, under --parallel. */
static void print_parallel(const struct options *o)
{
	const struct dlt_comm *c = o->comm;
	const char *comm = getenv("DLINSPECT_COMMUNICATOR");
	if (o->micro > 1)
		printf("  microbatches: %d per %s (gradients accumulated, one update per step)\n",
		       o->micro, c && c->dp_size > 1 ? "rank's shard" : "batch");
	if (!c)
		return;
	printf("  parallel: %d rank(s): data parallel %d x tensor parallel %d%s; rank 0's shard of "
	       "the batch: %d of %d rows\n", c->size, c->dp_size, c->tp_size,
	       c->tp_size > 1 ? " (the MLPs' fc1 column-, fc2 row-parallel)" : "",
	       o->model.batch / c->dp_size, o->model.batch);
	printf("  statistics reduced across ranks through communicator: %s\n",
	       o->no_dlinspect ? "none (--no-dlinspect)" : comm && comm[0] ? comm :
	       "none (DLINSPECT_COMMUNICATOR is empty): per rank");
}

/* The model's fingerprint, and under --parallel whether the ranks that should hold the same
 * parameters do: the data-parallel ranks all of them (a wrong all-reduce shows here). */
static int report_model(const struct options *o, struct trainer *t, bool lead)
{
	uint64_t h = dlt_model_hash(&t->model);
	int same = 1;
	const struct dlt_comm *c = o->comm;
	if (c && c->dp_size > 1 && c->same_u64(c->state, DLT_GROUP_DP, h, &same))
		same = 0;
	int all = same;
	/* Every DP group answers; rank 0 reports for the world. */
	if (c && c->size > 1) {
		float v = same ? 0.0f : 1.0f;
		if (!c->max(c->state, DLT_GROUP_WORLD, &v, 1))
			all = v == 0.0f;
	}
	if (lead) {
		if (!c || c->tp_size == 1)
			printf("model parameters: hash %016" PRIx64 "%s\n", h,
			       c && c->dp_size > 1 ? all ? ", identical on every data-parallel rank" :
				       ", NOT identical on the data-parallel ranks" : "");
		else
			printf("model parameters: rank 0's blocks hash %016" PRIx64 "; %s\n", h,
			       c->dp_size == 1 ? "no data parallelism" :
			       all ? "identical on every data-parallel rank" :
				     "NOT identical on the data-parallel ranks");
	}
	return all ? 0 : 1;
}

static double mean_of(const double *v, int64_t from, int64_t to)
{
	double s = 0;
	for (int64_t i = from; i < to; i++)
		s += v[i];
	return to > from ? s / (double)(to - from) : NAN;
}

static int train(const struct options *o)
{
	const char *log_dir = o->log_dir;
	struct trainer t;
	int e = make_dirs(log_dir);
	if (e) {
		fprintf(stderr, "dlinspect-train: %s: %s\n", log_dir, strerror(-e));
		return 1;
	}
	if (trainer_init(&t, o, !o->no_dlinspect, NULL, log_dir))
		return 1;
	/* Under mpirun rank 0 speaks and writes loss.csv: the loss is the whole batch's on every
	 * rank. */
	bool lead = !o->comm || o->comm->rank == 0, quiet = o->quiet || !lead;
	char csv_path[4200];
	snprintf(csv_path, sizeof csv_path, "%s/loss.csv", log_dir);
	FILE *csv = fopen(lead ? csv_path : "/dev/null", "w");
	double *losses = calloc((size_t)o->model.steps + 1, sizeof *losses);
	if (!csv || !losses) {
		fprintf(stderr, "dlinspect-train: %s: %s\n", csv_path, strerror(errno));
		if (csv)
			fclose(csv);
		free(losses);
		trainer_finish(&t);
		return 1;
	}
	fprintf(csv, "step,loss\n");
	const char *env = getenv("DLINSPECT_CONFIG");
	if (!quiet) {
		printf("dlinspect-train: %s, %d layers, width %d, batch %d, %" PRId64 " steps, seed %" PRIu64
		       "\n", precision_names[o->precision], o->model.layers, o->model.width,
		       o->model.batch, o->model.steps, o->model.seed);
		if (o->precision == DLT_FP8 && o->recipe.scaling == DLT_SCALING_DELAYED)
			printf("  FP8 recipe: delayed scaling, amax history %d (%s), margin %g; E4M3 "
			       "forward, E5M2 gradients\n", o->recipe.history_len,
			       o->recipe.algo == DLT_AMAX_MAX ? "max" : "most_recent", o->recipe.margin);
		else if (o->precision == DLT_FP8)
			printf("  FP8 recipe: %s%s\n",
			       o->recipe.scaling == DLT_SCALING_CURRENT ?
				       "current scaling (per tensor, from its own amax)" :
			       o->recipe.scaling == DLT_SCALING_MXFP8 ?
				       "MXFP8 (32-element blocks, E8M0 scales)" :
			       o->recipe.scaling == DLT_SCALING_NVFP4 ?
				       "NVFP4 (E2M1 elements instead of FP8: 1 x 16 blocks, 16 x 16 "
				       "weights, E4M3 block scales, stochastically rounded gradients, "
				       "Hadamard-transformed wgrad operands)" :
				       "FP8 block scaling (1 x 128 activations and gradients, "
				       "128 x 128 weights, power-of-two fp32 scales)",
			       o->recipe.scaling == DLT_SCALING_NVFP4 ? "" :
				       "; E4M3 forward, E5M2 gradients");
		if (o->bad_step >= 0)
			printf("  data: step %" PRId64 " holds one corrupted record (every feature = %g), "
			       "masked out of the loss\n", o->bad_step, o->bad_value);
		if (o->inject_layer)
			printf("  injected: %s in one element of %s's forward output at step %" PRId64
			       "\n", isnan(o->inject_value) ? "NaN" : "+inf", o->inject_layer,
			       o->inject_step);
		printf("  config: %s\n", o->no_dlinspect ? "dlinspect off (--no-dlinspect)" :
			o->config ? o->config : env && env[0] ? env : "none");
		print_parallel(o);
	}
	double seconds = 0;
	int rc = 0;
	int every = o->print_every > 0 ? o->print_every : 1;
	int64_t done = 0;
	for (int64_t s = 0; s < o->model.steps; s++) {
		double loss;
		/* -ECANCELED: dlinspect asked to stop (DetectNonFinite); the step itself was done. */
		int sr = trainer_step(&t, &loss, &seconds);
		/* Under mpirun a rank that stops (DetectNonFinite on its shard, an error) stops every
		 * rank, or the others would wait for it in the next gradient sum. */
		if (o->comm && o->comm->size > 1) {
			float stop[2] = {sr == -ECANCELED, sr && sr != -ECANCELED};
			if (o->comm->max(o->comm->state, DLT_GROUP_WORLD, stop, 2))
				stop[1] = 1.0f;
			sr = stop[1] != 0.0f ? (sr && sr != -ECANCELED ? sr : -EIO) :
			     stop[0] != 0.0f ? -ECANCELED : 0;
		}
		if (sr && sr != -ECANCELED) {
			rc = 1;
			break;
		}
		losses[s] = loss;
		done = s + 1;
		fprintf(csv, "%" PRId64 ",%.9g\n", s, loss);
		if (!quiet && (s % every == 0 || s == o->model.steps - 1 || sr))
			printf("  step %5" PRId64 "  loss %.5f\n", s, loss);
		if (sr) {
			rc = 1;
			break;
		}
		if (!isfinite(loss)) {
			fprintf(stderr, "dlinspect-train: loss is %g at step %" PRId64 "\n", loss, s);
			rc = 1;
			break;
		}
	}
	fclose(csv);
	int64_t n = done, tail = n >= 50 ? 50 : n; /* the steps run */
	double floor = (double)o->noise * o->noise;
	if (report_model(o, &t, lead))
		rc = 1;
	if (lead)
		printf("loss summary (%s): first step %.4f, mean of the last %" PRId64 " steps %.5f "
	       "(floor %.4f = noise variance, ratio %.2f)\n", precision_names[o->precision],
	       n ? losses[0] : NAN, tail, mean_of(losses, n - tail, n), floor,
	       mean_of(losses, n - tail, n) / floor);
	int error = t.run.error;
	if (error)
		fprintf(stderr, "dlinspect-train: a dlinspect call failed: %s\n", t.run.error_msg);
	if (!quiet) {
		printf("  %.2f s in training steps (%.1f steps/s); dlinspect calls: %" PRIu64
		       " queries, %" PRIu64 " inspect_tensor, %" PRIu64 " modify_tensor\n", seconds,
		       seconds > 0 ? (double)n / seconds : 0.0, t.run.queries, t.run.inspects,
		       t.run.modifies);
		printf("  logs: %s/loss.csv (loss per step)\n", log_dir);
		char p[4200];
		struct stat st;
		snprintf(p, sizeof p, "%s/nvdlfw_inspect_statistics_logs/nvdlfw_inspect_globalrank-0.log",
			 log_dir);
		trainer_finish(&t); /* dli_destroy closes the logs: look at them only after this */
		if (stat(p, &st) == 0)
			printf("        %s (statistics)\n", p);
		snprintf(p, sizeof p, "%s/nvdlfw_inspect_logs/nvdlfw_inspect_globalrank-0.log", log_dir);
		if (stat(p, &st) == 0)
			printf("        %s (messages)\n", p);
		snprintf(p, sizeof p, "%s/tensorboard", log_dir);
		if (stat(p, &st) == 0 && S_ISDIR(st.st_mode))
			printf("        %s/ (TensorBoard: tensorboard --logdir %s)\n", p, p);
	} else
		trainer_finish(&t);
	if (error)
		rc = 1;
	free(losses);
	return rc;
}

/* The benchmark's statistics config: what a user leaves on in a long run. */
static const char bench_yaml[] =
	"stats_every_100:\n"
	"  enabled: true\n"
	"  layers:\n"
	"    layer_name_regex_pattern: '.'\n"
	"  transformer_engine:\n"
	"    LogTensorStats:\n"
	"      enabled: true\n"
	"      tensors: [activation, gradient, weight, output]\n"
	"      stats: [min, max, mean, std, l2_norm, cur_amax, dynamic_range]\n"
	"      freq: 100\n"
	"    LogFp8TensorStats:\n"
	"      enabled: true\n"
	"      tensors: [activation, gradient, weight]\n"
	"      stats: [underflows%, overflows%, scale_inv_max, mse]\n"
	"      freq: 100\n";

static int compare_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

static double median(double *v, int n)
{
	qsort(v, (size_t)n, sizeof *v, compare_double);
	return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

#define BENCH_MODES 3
#define BENCH_MAX_ROUNDS 100

/* Three runs of the same model in one process, stepped in alternation so that drift of the machine
 * (clock, other load) falls on all three alike: without dlinspect, with dlinspect and no config,
 * with a statistics config at freq 100. Each round times `bench_steps` steps of each, starting with
 * a different one; the overhead is the median over rounds of (time with) / (time without) - 1. */
static int bench(const struct options *o)
{
	static const char *const names[BENCH_MODES] = {
		"without dlinspect", "dlinspect, no config", "dlinspect, statistics every 100 steps",
	};
	static const double targets[BENCH_MODES] = {0, 0.5, 1.0};
	struct trainer t[BENCH_MODES];
	char dir[4200];
	int rounds = o->bench_rounds, steps = o->bench_steps, rc = 1, made = 0;
	if (rounds > BENCH_MAX_ROUNDS)
		rounds = BENCH_MAX_ROUNDS;
	snprintf(dir, sizeof dir, "%s", o->log_dir);
	int e = make_dirs(dir);
	if (e) {
		fprintf(stderr, "dlinspect-train: %s: %s\n", dir, strerror(-e));
		return 1;
	}
	/* "No config" must mean none, whatever the environment says. */
	unsetenv("DLINSPECT_CONFIG");
	unsetenv("NV_DEBUG_TOOL_CONFIG");
	struct options plain = *o, stats = *o;
	plain.config = NULL;
	plain.trace = stats.trace = NULL;
	/* A --config replaces the built-in statistics config. */
	for (; made < BENCH_MODES; made++)
		if (trainer_init(&t[made], made == 2 ? &stats : &plain, made > 0,
				 made == 2 && !o->config ? bench_yaml : NULL, dir))
			goto out;
	const struct dlt_comm *c = o->comm;
	bool lead = !c || c->rank == 0;
	if (lead) {
		printf("overhead benchmark: %s, %d layers, width %d, batch %d; %d rounds of %d steps "
		       "per mode, modes alternated in one process\n", precision_names[o->precision],
		       o->model.layers, o->model.width, o->model.batch, rounds, steps);
		if (c || o->micro > 1)
			print_parallel(o);
	}
	double secs[BENCH_MODES][BENCH_MAX_ROUNDS], ratio[BENCH_MODES][BENCH_MAX_ROUNDS];
	double loss[BENCH_MODES] = {0};
	/* Warm-up, untimed: the first queries, the allocations and the caches. */
	for (int m = 0; m < BENCH_MODES; m++)
		for (int s = 0; s < 10; s++)
			if (trainer_step(&t[m], &loss[m], NULL))
				goto out;
	/* From here on, the dlinspect runs also add up the time spent inside dlinspect's calls: a
	 * direct measure of the overhead, free of the noise that run-to-run timing has. */
	for (int m = 1; m < BENCH_MODES; m++) {
		t[m].run.timed = true;
		t[m].run.dli_seconds = 0;
		t[m].step_seconds = 0;
	}
	for (int r = 0; r < rounds; r++)
		for (int k = 0; k < BENCH_MODES; k++) {
			int m = (r + k) % BENCH_MODES;
			secs[m][r] = 0;
			for (int s = 0; s < steps; s++)
				if (trainer_step(&t[m], &loss[m], &secs[m][r]))
					goto out;
		}
	if (lead)
		printf("  %-40s %9s %10s %22s\n", "mode", "steps/s", "timed", "inside dlinspect");
	double base = 0;
	for (int m = 0; m < BENCH_MODES; m++) {
		double per[BENCH_MAX_ROUNDS];
		for (int r = 0; r < rounds; r++) {
			ratio[m][r] = secs[m][r] / secs[0][r];
			per[r] = steps / secs[m][r];
		}
		double rate = median(per, rounds), over = 100.0 * (median(ratio[m], rounds) - 1.0);
		if (m == 0) {
			base = 1.0 / rate;
			if (lead)
				printf("  %-40s %9.2f\n", names[m], rate);
			continue;
		}
		/* The direct measure, per step, against a step without dlinspect. */
		double inside = t[m].run.dli_seconds / ((double)rounds * steps);
		double direct = 100.0 * inside / base;
		/* Several ranks: the largest share of any rank (a collective's wait counts where it
		 * waits). */
		double in_step = t[m].step_seconds / ((double)rounds * steps);
		float worst[3] = {(float)inside, (float)direct, (float)in_step};
		if (c && c->size > 1 && !c->max(c->state, DLT_GROUP_WORLD, worst, 3)) {
			inside = worst[0];
			direct = worst[1];
			in_step = worst[2];
		}
		if (lead)
			printf("  %-40s %9.2f %+9.2f%% %8.1f us = %6.3f%%   target <= %.1f%%  %s\n",
			       names[m], rate, over, 1e6 * inside, direct, targets[m],
			       direct <= targets[m] && over <= targets[m] ? "met" :
			       direct <= targets[m] ? "met by the direct measure" : "NOT met");
		if (lead && c && c->size > 1)
			printf("  %-40s %21s %8.1f us of it in dli_step (the reduction: it waits there "
			       "for the last rank)\n", "", "", 1e6 * in_step);
	}
	uint64_t red_steps = 0, red_coll = 0, red_bytes = 0;
	bool reduced = !dli_reduce_counters(t[2].dli, &red_steps, &red_coll, &red_bytes);
	if (lead) {
		printf("  timed: median over rounds of (round time / the same round's time without dlinspect) - 1;\n"
		       "  inside dlinspect: the time spent in dlinspect's calls, per step and as a share of a\n"
		       "  step without dlinspect%s\n", c && c->size > 1 ? " (the largest of the ranks)" : "");
		printf("  same losses without dlinspect and with no config: %s\n",
		       loss[0] == loss[1] ? "yes" : "NO");
		if (reduced && red_steps)
			printf("  statistics reduced across ranks: %" PRIu64 " scheduled steps, %.2f "
			       "collectives and %.0f bytes gathered per scheduled step (rank 0; the "
			       "first step agrees on the record size: one collective more)\n", red_steps,
			       (double)red_coll / (double)red_steps, (double)red_bytes / (double)red_steps);
		else if (c && c->size > 1)
			printf("  statistics not reduced across ranks (no communicator)\n");
		printf("  statistics of the third run: %s/nvdlfw_inspect_statistics_logs/\n", dir);
	}
	rc = 0;
out:
	for (int m = 0; m < made; m++)
		trainer_finish(&t[m]);
	return rc;
}

/* --parallel: MPI's ranks and groups, then the run. */
static int run_parallel(struct options *o, int *argc, char ***argv)
{
#ifdef DLT_HAVE_MPI
	struct dlt_comm comm;
	char msg[256];
	int tp_wanted = o->parallel == PAR_DATA ? 1 : o->tp;
	if (dlt_parallel_init(&comm, argc, argv, tp_wanted ? tp_wanted : 0, msg, sizeof msg)) {
		fprintf(stderr, "dlinspect-train: --parallel: %s\n", msg);
		return 2;
	}
	int rc = 2;
	o->comm = &comm;
	if (comm.tp_size > 4 * o->model.width)
		fprintf(stderr, "dlinspect-train: --tp %d: the MLPs have only %d hidden features\n",
			comm.tp_size, 4 * o->model.width);
	else if (o->model.batch < comm.dp_size * o->micro)
		fprintf(stderr, "dlinspect-train: batch %d: too few rows for %d data-parallel rank(s) "
			"x %d microbatch(es)\n", o->model.batch, comm.dp_size, o->micro);
	else {
		/* dlinspect reduces the statistics through its mpi communicator unless told
		 * otherwise (an empty DLINSPECT_COMMUNICATOR: per rank). */
		setenv("DLINSPECT_COMMUNICATOR", "mpi", 0);
		rc = o->bench ? bench(o) : train(o);
	}
	dlt_parallel_finish(&comm);
	return rc;
#else
	(void)argc;
	(void)argv;
	fprintf(stderr, "dlinspect-train: --parallel %s needs a build with MPI: this one was "
		"configured without it (Debian: apt-get install libopenmpi-dev openmpi-bin, then "
		"meson setup --reconfigure)\n", o->parallel == PAR_DATA ? "data" : "tensor");
	return 2;
#endif
}

static void usage(FILE *f, const char *argv0)
{
	fprintf(f,
		"usage: %s [options]\n"
		"  --steps N            training steps (default 400)\n"
		"  --batch N            rows per batch (default 256)\n"
		"  --width N            model width; the MLP hidden size is 4x (default 128)\n"
		"  --layers N           residual MLP blocks (default 4)\n"
		"  --seed N             weights, teacher and data (default 1)\n"
		"  --precision P        fp32, bf16 or fp8 (default fp8)\n"
		"  --config PATH        dlinspect YAML config (default $DLINSPECT_CONFIG, else none)\n"
		"  --log-dir DIR        dlinspect's logs and loss.csv (default $DLINSPECT_LOG_DIR, else\n"
		"                       ./dlinspect_train_logs)\n"
		"  --no-dlinspect       make no dlinspect call at all\n"
		"  --amax-history N     delayed scaling's amax history length (default 1024)\n"
		"  --amax-algo A        max or most_recent (default max)\n"
		"  --margin M           scale = fp8_max / amax / 2^M (default 0)\n"
		"  --recipe R           FP8 scaling: delayed, current, mxfp8, block or nvfp4\n"
		"                       (default delayed; docs/trainer.md)\n"
		"  --lr X               Adam's peak learning rate (default 0.002)\n"
		"  --noise X            std of the target noise; the loss floor is X^2 (default 0.1)\n"
		"  --bad-step N         one record of step N's batch is corrupted (every feature set\n"
		"                       to --bad-value) and masked out of the loss (default: none)\n"
		"  --bad-value X        the corrupted record's value (default 1e5)\n"
		"  --inject-nonfinite STEP:LAYER[:nan|inf]\n"
		"                       at step STEP, one element of LAYER's forward output (e.g.\n"
		"                       model.layers.2.mlp.fc1) becomes NaN (default) or +inf\n"
		"  --print-every N      loss lines (default steps/10)\n"
		"  --trace-queries FILE one line 'ITERATION LAYER' per round of *_enabled queries\n"
		"  --bench              measure dlinspect's overhead instead of training\n"
		"  --bench-rounds N     rounds of the benchmark (default 7)\n"
		"  --bench-steps N      steps per mode and round (default 100)\n"
		"  --inputs N           input features (default 8)\n"
		"  --outputs N          regression targets (default 16)\n"
		"  --quiet              the model hash and the loss summary only\n"
		"  --microbatches N     split each batch (each rank's shard) into N microbatches and\n"
		"                       accumulate their gradients (default 1)\n"
		"  --parallel data|tensor\n"
		"                       under mpirun: data: each rank trains on its shard of the batch,\n"
		"                       gradients summed across ranks; tensor: the MLPs' fc1 column-\n"
		"                       and fc2 row-parallel over --tp ranks (docs/distributed.md)\n"
		"  --tp N               tensor-parallel size for --parallel tensor, dividing the world;\n"
		"                       the other factor is data parallel (default: the world size)\n",
		argv0);
}

static bool parse_long(const char *s, long min, long max, long *out)
{
	char *end;
	errno = 0;
	long v = strtol(s, &end, 10);
	if (errno || end == s || *end || v < min || v > max)
		return false;
	*out = v;
	return true;
}

static bool parse_float(const char *s, double min, double max, double *out)
{
	char *end;
	errno = 0;
	double v = strtod(s, &end);
	if (errno || end == s || *end || !(v >= min && v <= max))
		return false;
	*out = v;
	return true;
}

/* STEP:LAYER[:nan|inf] into o's inject_*; the layer name points into `s` (argv). */
static bool parse_inject(char *s, struct options *o)
{
	char *layer = strchr(s, ':'), *kind;
	long v;
	if (!layer)
		return false;
	*layer++ = 0;
	bool ok = parse_long(s, 0, LONG_MAX, &v);
	layer[-1] = ':'; /* the error message shows the whole argument */
	if (!ok || !*layer)
		return false;
	o->inject_step = v;
	o->inject_value = NAN;
	if ((kind = strrchr(layer, ':')) && (!strcmp(kind, ":nan") || !strcmp(kind, ":inf"))) {
		o->inject_value = kind[1] == 'n' ? NAN : INFINITY;
		*kind = 0;
	}
	o->inject_layer = layer;
	return *layer != 0;
}

int main(int argc, char **argv)
{
	enum {
		O_STEPS = 256, O_BATCH, O_WIDTH, O_LAYERS, O_SEED, O_PRECISION, O_CONFIG, O_LOG_DIR,
		O_NO_DLI, O_HISTORY, O_ALGO, O_MARGIN, O_LR, O_NOISE, O_BAD_STEP, O_BAD_VALUE,
		O_PRINT, O_TRACE, O_BENCH, O_ROUNDS, O_BSTEPS, O_QUIET, O_HELP, O_D_IN, O_D_OUT,
		O_INJECT, O_RECIPE, O_MICRO, O_PARALLEL, O_TP,
	};
	static const struct option longopts[] = {
		{"steps", required_argument, NULL, O_STEPS},
		{"batch", required_argument, NULL, O_BATCH},
		{"width", required_argument, NULL, O_WIDTH},
		{"layers", required_argument, NULL, O_LAYERS},
		{"seed", required_argument, NULL, O_SEED},
		{"precision", required_argument, NULL, O_PRECISION},
		{"config", required_argument, NULL, O_CONFIG},
		{"log-dir", required_argument, NULL, O_LOG_DIR},
		{"no-dlinspect", no_argument, NULL, O_NO_DLI},
		{"amax-history", required_argument, NULL, O_HISTORY},
		{"amax-algo", required_argument, NULL, O_ALGO},
		{"margin", required_argument, NULL, O_MARGIN},
		{"lr", required_argument, NULL, O_LR},
		{"noise", required_argument, NULL, O_NOISE},
		{"bad-step", required_argument, NULL, O_BAD_STEP},
		{"bad-value", required_argument, NULL, O_BAD_VALUE},
		{"print-every", required_argument, NULL, O_PRINT},
		{"trace-queries", required_argument, NULL, O_TRACE},
		{"bench", no_argument, NULL, O_BENCH},
		{"bench-rounds", required_argument, NULL, O_ROUNDS},
		{"bench-steps", required_argument, NULL, O_BSTEPS},
		{"quiet", no_argument, NULL, O_QUIET},
		{"help", no_argument, NULL, O_HELP},
		{"inputs", required_argument, NULL, O_D_IN},
		{"outputs", required_argument, NULL, O_D_OUT},
		{"inject-nonfinite", required_argument, NULL, O_INJECT},
		{"recipe", required_argument, NULL, O_RECIPE},
		{"microbatches", required_argument, NULL, O_MICRO},
		{"parallel", required_argument, NULL, O_PARALLEL},
		{"tp", required_argument, NULL, O_TP},
		{NULL, 0, NULL, 0},
	};
	struct options o = {
		.model = {.d_in = 8, .d_out = 16, .width = 128, .layers = 4, .batch = 256, .seed = 1,
			  .lr = 0.002f, .clip = 1.0f, .steps = 400},
		.precision = DLT_FP8,
		.log_dir = "./dlinspect_train_logs",
		.noise = 0.1f,
		.bad_step = -1,
		.bad_value = 1e5f,
		.inject_step = -1,
		.print_every = -1,
		.bench_rounds = 7,
		.bench_steps = 100,
		.micro = 1,
	};
	dlt_recipe_default(&o.recipe);
	const char *env_dir = getenv("DLINSPECT_LOG_DIR");
	if (env_dir && env_dir[0])
		o.log_dir = env_dir;
	int opt;
	long v;
	double d;
	while ((opt = getopt_long(argc, argv, "", longopts, NULL)) != -1) {
		bool ok = true;
		switch (opt) {
		case O_STEPS: ok = parse_long(optarg, 1, 100000000, &v); o.model.steps = v; break;
		case O_BATCH: ok = parse_long(optarg, 2, 1 << 20, &v); o.model.batch = (int)v; break;
		case O_WIDTH: ok = parse_long(optarg, 1, 1 << 14, &v); o.model.width = (int)v; break;
		case O_LAYERS: ok = parse_long(optarg, 1, 1000, &v); o.model.layers = (int)v; break;
		case O_SEED: ok = parse_long(optarg, 0, LONG_MAX, &v); o.model.seed = (uint64_t)v; break;
		case O_PRECISION:
			ok = false;
			for (int i = 0; i < 3; i++)
				if (!strcmp(optarg, precision_names[i])) {
					o.precision = (enum dlt_precision)i;
					ok = true;
				}
			break;
		case O_CONFIG: o.config = optarg; break;
		case O_LOG_DIR: o.log_dir = optarg; break;
		case O_NO_DLI: o.no_dlinspect = true; break;
		case O_HISTORY: ok = parse_long(optarg, 1, 1 << 20, &v); o.recipe.history_len = (int)v; break;
		case O_ALGO:
			ok = !strcmp(optarg, "max") || !strcmp(optarg, "most_recent");
			o.recipe.algo = !strcmp(optarg, "max") ? DLT_AMAX_MAX : DLT_AMAX_MOST_RECENT;
			break;
		case O_MARGIN: ok = parse_float(optarg, 0, 64, &d); o.recipe.margin = d; break;
		case O_LR: ok = parse_float(optarg, 0, 10, &d); o.model.lr = (float)d; break;
		case O_NOISE: ok = parse_float(optarg, 1e-6, 100, &d); o.noise = (float)d; break;
		case O_BAD_STEP: ok = parse_long(optarg, 0, LONG_MAX, &v); o.bad_step = v; break;
		case O_BAD_VALUE: ok = parse_float(optarg, -3e38, 3e38, &d); o.bad_value = (float)d; break;
		case O_PRINT: ok = parse_long(optarg, 1, LONG_MAX, &v); o.print_every = (int)v; break;
		case O_TRACE: o.trace = optarg; break;
		case O_BENCH: o.bench = true; break;
		case O_ROUNDS: ok = parse_long(optarg, 1, BENCH_MAX_ROUNDS, &v); o.bench_rounds = (int)v; break;
		case O_BSTEPS: ok = parse_long(optarg, 1, 1000000, &v); o.bench_steps = (int)v; break;
		case O_QUIET: o.quiet = true; break;
		case O_D_IN: ok = parse_long(optarg, 1, 1 << 14, &v); o.model.d_in = (int)v; break;
		case O_D_OUT: ok = parse_long(optarg, 1, 1 << 14, &v); o.model.d_out = (int)v; break;
		case O_INJECT: ok = parse_inject(optarg, &o); break;
		case O_RECIPE:
			ok = false;
			for (int i = 0; i < DLT_SCALING_COUNT; i++)
				if (!strcmp(optarg, dlt_scaling_names[i])) {
					o.recipe.scaling = (enum dlt_scaling)i;
					ok = true;
				}
			break;
		case O_MICRO: ok = parse_long(optarg, 1, 1 << 20, &v); o.micro = (int)v; break;
		case O_PARALLEL:
			ok = !strcmp(optarg, "data") || !strcmp(optarg, "tensor");
			o.parallel = !strcmp(optarg, "data") ? PAR_DATA : PAR_TENSOR;
			break;
		case O_TP: ok = parse_long(optarg, 1, 1 << 16, &v); o.tp = (int)v; break;
		case O_HELP: usage(stdout, argv[0]); return 0;
		default: usage(stderr, argv[0]); return 2;
		}
		if (!ok) {
			fprintf(stderr, "%s: bad value '%s' for --%s\n", argv[0], optarg,
				longopts[opt - O_STEPS].name);
			return 2;
		}
	}
	if (optind < argc) {
		fprintf(stderr, "%s: unexpected argument '%s'\n", argv[0], argv[optind]);
		usage(stderr, argv[0]);
		return 2;
	}
	if (o.recipe.scaling != DLT_SCALING_DELAYED && o.precision != DLT_FP8) {
		fprintf(stderr, "%s: --recipe %s needs --precision fp8 (the %s run casts nothing to "
			"FP8)\n", argv[0], dlt_scaling_names[o.recipe.scaling],
			precision_names[o.precision]);
		return 2;
	}
	if (o.print_every < 0)
		o.print_every = o.model.steps >= 10 ? (int)(o.model.steps / 10) : 1;
	if (o.tp && o.parallel != PAR_TENSOR) {
		fprintf(stderr, "%s: --tp needs --parallel tensor\n", argv[0]);
		return 2;
	}
	if (o.parallel == PAR_NONE) {
		if (o.model.batch < o.micro) {
			fprintf(stderr, "%s: --microbatches %d: the batch has %d rows\n", argv[0],
				o.micro, o.model.batch);
			return 2;
		}
		return o.bench ? bench(&o) : train(&o);
	}
	return run_parallel(&o, &argc, &argv);
}
