/* One rank of the MPI reduction tests (tests/mpi/run.sh): feeds its shards of a few tensors to
 * LogTensorStats through the public API, two microbatches per step, two steps, and writes each
 * shard it fed to <dir>/shard-<layer>-<tensor>-<iteration>-<rank>-<microbatch>.f32 for the
 * reference (check.py), which concatenates the shards of a group in rank order.
 *
 * The rank comes from Open MPI's environment; the core's communicator (DLINSPECT_COMMUNICATOR=mpi)
 * must agree with it. Shard sizes are uneven, and rank 2 holds an empty shard of every activation.
 *
 * argv: <config> <dir> [fault | die | pooled P | hostinit | hostfinal | reinit | badinit]. With `fault`, the last rank leaves after
 * the first step without ending the second: the others must time out naming it, and log that step
 * per rank. With `die`, the last rank kills itself (SIGKILL) at the second step instead. With `hostinit`, this program initializes MPI itself before dli_init and finalizes it after
 * dli_destroy: the communicator must neither initialize it again nor finalize it. With
 * `hostfinal`, this program initializes MPI and finalizes it before dli_destroy (as a host whose
 * own MPI teardown runs first): dli_destroy must not call MPI after that, which aborts the
 * process. With `reinit`, each rank makes a second context after dli_destroy (in <dir>/again, one
 * step of the gradient): the communicator must open again (MPI cannot be initialized twice). With
 * `badinit`, the last rank's dli_init fails (its log dir cannot be made) and must return at once,
 * not wait in MPI_Finalize for the other ranks, which wait for its marker file before they end. */
#include <errno.h>
#include <signal.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <dlinspect/dlinspect.h>

#ifdef DLI_TEST_MPI
#include <mpi.h>
#endif

static uint64_t lcg_state;

static double uniform(void)
{
	lcg_state = lcg_state * 6364136223846793005ull + 1442695040888963407ull;
	return (double)(lcg_state >> 11) / 9007199254740992.0;
}

static int env_int(const char *name, int def)
{
	const char *v = getenv(name);
	return v && *v ? atoi(v) : def;
}

/* Elements of a shard: uneven by rank, none for rank 2's activations. */
static int64_t shard_size(const char *tensor, int rank, int mb)
{
	static const int64_t sizes[] = {1000, 37, 0, 513, 77, 1};
	if (!strcmp(tensor, "weight"))
		return 64 + 16 * rank; /* weights: no microbatches, every rank a piece */
	if (!strcmp(tensor, "activation"))
		return sizes[rank % 6] + mb * 5 * (rank != 2);
	return 300 + 11 * rank + mb; /* gradient */
}

static int feed(struct dli_context *ctx, const char *dir, const char *layer, const char *tensor,
		int64_t it, int rank, int mb)
{
	int64_t n = shard_size(tensor, rank, mb);
	float *v = malloc((size_t)(n ? n : 1) * sizeof *v);
	if (!v)
		return -ENOMEM;
	lcg_state = 0x9e3779b97f4a7c15ull ^ (uint64_t)(it * 1000 + rank * 10 + mb) ^
		    (uint64_t)strlen(layer) << 40 ^ (uint64_t)tensor[0] << 48;
	for (int64_t i = 0; i < n; i++) {
		double u = uniform();
		/* Activations and weights: multiples of 1/16 with some exact zeros and, for the
		 * activations, tiny values; weights have a mean of 8. Gradients: any float near 1e4
		 * (a large mean and a small spread: Chan's merge keeps its variance). */
		double x = floor(u * 128) / 16 - 3;
		if (tensor[0] == 'w')
			x = 8 + floor(u * 64) / 16 - 2;
		else if (tensor[0] == 'g')
			x = 1e4 + u;
		if (u < 0.05)
			x = 0;
		else if (u < 0.08 && tensor[0] == 'a')
			x = (u - 0.05) * 1e-4; /* below what FP8 current scaling keeps: underflows */
		v[i] = (float)x;
	}
	char path[4096];
	snprintf(path, sizeof path, "%s/shard-%s-%s-%lld-%d-%d.f32", dir, layer, tensor,
		 (long long)it, rank, mb);
	FILE *f = fopen(path, "wb");
	if (!f || fwrite(v, sizeof *v, (size_t)n, f) != (size_t)n || fclose(f)) {
		fprintf(stderr, "rank %d: cannot write %s\n", rank, path);
		free(v);
		return -EIO;
	}
	struct dli_tensor t = {.data = v, .dtype = DLI_DTYPE_F32, .device = {DLI_DEVICE_CPU, 0},
			       .ndim = 1, .shape = {n}, .contiguous = true};
	int r = dli_inspect_tensor_by_name(ctx, layer, tensor, &t);
	free(v);
	return r;
}

int main(int argc, char **argv)
{
	if (argc < 3) {
		fprintf(stderr, "usage: %s CONFIG DIR [fault]\n", argv[0]);
		return 2;
	}
	bool fault = argc > 3 && !strcmp(argv[3], "fault");
	bool die = argc > 3 && !strcmp(argv[3], "die");
	/* `pooled P`: one process, no communicator, feeding the activation and gradient pieces of
	 * all P ranks in rank order: the single-process computation over the concatenated tensors,
	 * from the same pieces (so the same kernel blocks) as the ranks'. */
	int pooled = argc > 4 && !strcmp(argv[3], "pooled") ? atoi(argv[4]) : 0;
	int rank = env_int("OMPI_COMM_WORLD_RANK", 0), size = env_int("OMPI_COMM_WORLD_SIZE", 1);
	bool hostfinal = argc > 3 && !strcmp(argv[3], "hostfinal");
	bool hostinit = hostfinal || (argc > 3 && !strcmp(argv[3], "hostinit"));
#ifdef DLI_TEST_MPI
	if (hostinit && MPI_Init(&argc, &argv) != MPI_SUCCESS) {
		fprintf(stderr, "rank %d: MPI_Init failed\n", rank);
		return 1;
	}
#else
	if (hostinit) {
		fprintf(stderr, "built without MPI: no hostinit\n");
		return 77;
	}
#endif
	struct dli_options o;
	dli_options_init(&o);
	o.config_path = argv[1];
	o.log_dir = argv[2];
	o.rank = rank;
	o.world_size = size;
	struct dli_context *ctx;
	struct dli_error err;
	bool reinit = argc > 3 && !strcmp(argv[3], "reinit");
	bool badinit = argc > 3 && !strcmp(argv[3], "badinit");
	char marker[4200], bad_dir[4200];
	snprintf(marker, sizeof marker, "%s/badinit-returned", argv[2]);
	if (badinit && rank == size - 1) {
		/* Under the config file, which is no directory: the loggers cannot open. */
		snprintf(bad_dir, sizeof bad_dir, "%s/logs", argv[1]);
		o.log_dir = bad_dir;
		int rb = dli_init(&o, &ctx, &err);
		FILE *f = fopen(marker, "w");
		if (!f || fclose(f))
			fprintf(stderr, "rank %d: cannot write %s\n", rank, marker);
		if (rb == 0) {
			fprintf(stderr, "rank %d: dli_init with log dir %s succeeded\n", rank, bad_dir);
			dli_destroy(ctx);
			return 1;
		}
		return 0;
	}
	int r = dli_init(&o, &ctx, &err);
	if (!r && badinit) {
		/* 30 s for the other rank's dli_init to come back: it fails at once when it does not
		 * wait for this rank to finalize MPI, which this rank does only after. */
		for (int i = 0; i < 300 && access(marker, F_OK) != 0; i++)
			usleep(100000);
		bool back = access(marker, F_OK) == 0;
		if (!back)
			fprintf(stderr, "rank %d: rank %d's failed dli_init did not return\n", rank,
				size - 1);
		dli_destroy(ctx);
		return back ? 0 : 1;
	}
	if (r) {
		fprintf(stderr, "rank %d: dli_init: %s\n", rank, err.message);
		return 1;
	}
	static const char *const layers[] = {"fc1", "fc2"};
	for (int64_t it = 0; it < 2 && !r; it++) {
		if (fault && it == 1 && rank == size - 1)
			break; /* leaves without ending this step: the others must not hang */
		if (die && it == 1 && rank == size - 1)
			raise(SIGKILL); /* dies: what the launcher does then is its own */
		for (int l = 0; l < 2 && !r && pooled; l++)
			for (int p = 0; p < pooled && !r; p++)
				for (int mb = 0; mb < 2 && !r; mb++) {
					r = feed(ctx, argv[2], layers[l], "activation", it, p, mb);
					if (!r)
						r = feed(ctx, argv[2], layers[l], "gradient", it, p, mb);
				}
		for (int l = 0; l < 2 && !r && !pooled; l++) {
			r = feed(ctx, argv[2], layers[l], "weight", it, rank, 0);
			for (int mb = 0; mb < 2 && !r; mb++) {
				r = feed(ctx, argv[2], layers[l], "activation", it, rank, mb);
				if (!r)
					r = feed(ctx, argv[2], layers[l], "gradient", it, rank, mb);
			}
		}
		if (!r)
			r = dli_step(ctx);
	}
	if (r)
		fprintf(stderr, "rank %d: failed: %s\n", rank, strerror(-r));
#ifdef DLI_TEST_MPI
	if (hostfinal)
		MPI_Finalize();
#endif
	dli_destroy(ctx);
	if (reinit && !r) {
		char again[4300];
		snprintf(again, sizeof again, "%s/again", argv[2]);
		mkdir(again, 0755);
		o.log_dir = again;
		o.initial_iteration = 2;
		if ((r = dli_init(&o, &ctx, &err))) {
			fprintf(stderr, "rank %d: dli_init after dli_destroy: %s\n", rank, err.message);
			return 1;
		}
		r = feed(ctx, again, "fc1", "gradient", 2, rank, 0);
		if (!r)
			r = dli_step(ctx);
		dli_destroy(ctx);
	}
#ifdef DLI_TEST_MPI
	if (hostinit && !hostfinal) {
		int finalized = 1;
		MPI_Finalized(&finalized);
		if (finalized) {
			fprintf(stderr, "rank %d: dli_destroy finalized the host's MPI\n", rank);
			return 1;
		}
		/* The host's own communication still works after dlinspect is gone. */
		int sum = 0, one = 1;
		if (MPI_Allreduce(&one, &sum, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD) != MPI_SUCCESS ||
		    sum != size) {
			fprintf(stderr, "rank %d: the host's MPI_Allreduce failed after dli_destroy\n",
				rank);
			return 1;
		}
		MPI_Finalize();
	}
#endif
	return r ? 1 : 0;
}
