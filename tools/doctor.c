/* `dlinspect doctor`: can the ranks talk? Run under the launcher (mpirun -np N dlinspect doctor):
 * every rank opens the communicator the statistics reduction would use, says who it is (rank,
 * host, pid), then times an all-reduce and a barrier over the world, each with a time limit that
 * names the ranks that did not come. Rank 0 prints the report; a failing rank says why on stderr.
 * Exit 0 when everything answered, 1 otherwise, 2 for bad arguments (docs/distributed.md). */
#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <dlinspect/plugin.h>

#include "cmd.h"
#include "tools-api.h"

struct who {
	int32_t rank, pid;
	char host[56];
};

static double now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return 1e3 * (double)ts.tv_sec + 1e-6 * (double)ts.tv_nsec;
}

static void missing_text(char *buf, size_t size, const bool *missing, int n)
{
	size_t off = 0;
	buf[0] = 0;
	for (int i = 0; i < n && off < size; i++)
		if (missing[i])
			off += (size_t)snprintf(buf + off, size - off, "%s%d", off ? ", " : "", i);
}

/* One timed step; on failure says which ranks did not come. */
static int report(int rank, const char *what, int r, const bool *missing, int n,
		  const struct dli_error *err, double timeout)
{
	if (!r)
		return 0;
	char who[512];
	missing_text(who, sizeof who, missing, n);
	if (r == -ETIMEDOUT)
		fprintf(stderr, "dlinspect doctor: rank %d: the %s timed out after %g s: rank(s) %s "
				"did not join%s%s\n",
			rank, what, timeout, who[0] ? who : "?", err->message[0] ? ": " : "",
			err->message);
	else
		fprintf(stderr, "dlinspect doctor: rank %d: the %s failed: %s\n", rank, what,
			err->message[0] ? err->message : strerror(-r));
	return 1;
}

int dli_cmd_doctor(int argc, char **argv)
{
	const char *name = getenv("DLINSPECT_COMMUNICATOR");
	double timeout = 30;
	int absent = -1;
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--communicator") && i + 1 < argc) {
			name = argv[++i];
			if (!*name) { /* the variable may be set empty; the option is asked for */
				fprintf(stderr, "dlinspect doctor: --communicator '': expected a "
						"communicator's name (mpi, nccl, ...)\n");
				return 2;
			}
		} else if (!strcmp(argv[i], "--timeout") && i + 1 < argc) {
			if (!dli_cmd_decimal(argv[++i], &timeout) || !(timeout > 0)) {
				fprintf(stderr, "dlinspect doctor: --timeout '%s': expected a positive "
						"number of seconds\n", argv[i]);
				return 2;
			}
		} else if (!strcmp(argv[i], "--test-absent") && i + 1 < argc)
			absent = atoi(argv[++i]); /* tests: this rank skips the collectives */
		else {
			fprintf(stderr, "usage: dlinspect doctor [--communicator NAME] [--timeout S]\n");
			return 2;
		}
	}
	if (!name || !*name)
		name = "mpi";

	struct dli_error err = {0};
	char **dirs = NULL;
	size_t n_dirs = 0;
	struct dli_tools_modules *loader = NULL;
	const struct dli_comm_ops *ops = NULL;
	void *comm = NULL, *world = NULL;
	int rc = 1, r;
	if ((r = dli_tools_search_dirs(NULL, 0, &dirs, &n_dirs, &err)) ||
	    (r = dli_tools_modules_open((const char *const *)dirs, n_dirs, name, NULL, NULL, &loader,
						  &err))) {
		fprintf(stderr, "dlinspect doctor: communicator '%s': %s\n", name, err.message);
		goto out;
	}
	for (size_t i = 0; i < dli_tools_module_count(loader) && !ops; i++) {
		const struct dli_module *m = dli_tools_module(loader, i);
		for (size_t k = 0; k < m->n_comms && !ops; k++)
			if (!strcmp(m->comms[k]->name, name))
				ops = m->comms[k]->ops;
	}
	if (!ops) {
		fprintf(stderr, "dlinspect doctor: module %s.so offers no communicator '%s'\n", name,
			name);
		goto out;
	}
	if ((r = ops->open(&comm, &err))) {
		fprintf(stderr, "dlinspect doctor: communicator '%s' did not open: %s\n", name,
			err.message);
		goto out;
	}
	int rank = ops->rank(comm), n = ops->world_size(comm);
	int *ranks = malloc((size_t)n * sizeof *ranks);
	bool *missing = calloc((size_t)n, sizeof *missing);
	struct who *all = calloc((size_t)n, sizeof *all);
	double *values = calloc((size_t)n, sizeof *values);
	if (!ranks || !missing || !all || !values) {
		fprintf(stderr, "dlinspect doctor: out of memory\n");
		goto done;
	}
	for (int i = 0; i < n; i++)
		ranks[i] = i;
	if ((r = ops->group_create(comm, ranks, (size_t)n, &world, &err))) {
		fprintf(stderr, "dlinspect doctor: rank %d: no world group: %s\n", rank, err.message);
		goto done;
	}
	if (rank == absent) {
		rc = 0; /* a test's stand-in for a rank that hangs: it never joins */
		goto done;
	}
	/* Who is there. */
	struct who me = {.rank = rank, .pid = (int32_t)getpid()};
	if (gethostname(me.host, sizeof me.host - 1))
		snprintf(me.host, sizeof me.host, "?");
	double t0 = now_ms();
	r = ops->allgather(comm, world, &me, sizeof me, all, timeout, missing, &err);
	double t_who = now_ms() - t0;
	if (report(rank, "roll call (all-gather)", r, missing, n, &err, timeout))
		goto done;
	/* An all-reduce: the sum of (rank + 1), merged in rank order. */
	double v = rank + 1, sum = 0;
	t0 = now_ms();
	r = ops->allgather(comm, world, &v, sizeof v, values, timeout, missing, &err);
	double t_sum = now_ms() - t0;
	if (report(rank, "all-reduce", r, missing, n, &err, timeout))
		goto done;
	for (int i = 0; i < n; i++)
		sum += values[i];
	double want = (double)n * (n + 1) / 2;
	if (sum != want) {
		fprintf(stderr, "dlinspect doctor: rank %d: the all-reduce gave %g, expected %g\n",
			rank, sum, want);
		goto done;
	}
	t0 = now_ms();
	r = ops->barrier(comm, world, timeout, missing, &err);
	double t_bar = now_ms() - t0;
	if (report(rank, "barrier", r, missing, n, &err, timeout))
		goto done;
	if (rank == 0) {
		printf("dlinspect doctor: communicator '%s', %d rank(s), time limit %g s per "
		       "collective\n", name, n, timeout);
		for (int i = 0; i < n; i++)
			printf("  rank %d  host %s  pid %d\n", (int)all[i].rank, all[i].host,
			       (int)all[i].pid);
		printf("  roll call (all-gather, %zu bytes a rank)   %8.3f ms\n", sizeof me, t_who);
		printf("  all-reduce (sum of rank + 1 = %g)          %8.3f ms\n", sum, t_sum);
		printf("  barrier                                    %8.3f ms\n", t_bar);
		printf("ok: every rank answered\n");
	}
	rc = 0;
done:
	if (world && ops->group_destroy)
		ops->group_destroy(comm, world);
	if (ops->close)
		ops->close(comm);
	free(ranks);
	free(missing);
	free(all);
	free(values);
out:
	dli_tools_modules_close(loader);
	dli_tools_search_dirs_free(dirs, n_dirs);
	return rc;
}
