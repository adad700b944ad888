/* The mpi communicator (docs/distributed.md): dlinspect's collectives over MPI, for jobs launched
 * with mpirun. Picked with DLINSPECT_COMMUNICATOR=mpi.
 *
 * MPI has no time limit on a collective, and a collective cannot be abandoned. So the all-gather
 * is made of point-to-point messages: each member sends its record to every other member and
 * receives theirs, polling until all came or the time limit passed; then the members whose records
 * did not come are the missing ranks. Messages of one group carry one tag on a duplicate of
 * MPI_COMM_WORLD, so the host's own traffic never matches them, and MPI's non-overtaking order
 * keeps successive gathers of a group apart. After a time-out the group is broken: its buffers
 * stay allocated (a late message may still land in them) until MPI is finalized.
 *
 * When MPI_Init was this module's, MPI_Finalize runs at process exit, not at close: MPI_Finalize
 * waits for every rank to finalize, so at close it would hold a dli_init that failed on one rank
 * (a config error) until the others ended their job, and MPI cannot be initialized twice, so no
 * context could follow a dli_destroy in the same process (Python's end_debug, then initialize). */
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <mpi.h>

#include <dlinspect/plugin.h>

DLI_MODULE_NAMESPACE("communicators");

/* Process-wide: MPI outlives the contexts. All touched on the host's thread that runs dli_init,
 * dli_step and dli_destroy, and at exit. */
static bool owns_mpi;          /* MPI_Init was this module's: MPI_Finalize at exit is too */
static bool failed_collective; /* a gather timed out or failed: a rank may never finalize */
static double finalize_limit_s = 1; /* the last collective's time limit */
static int world_rank;              /* for the message of a finalize that does not return */
/* Buffers of timed-out gathers (a late message may still land in them), freed once MPI is
 * finalized. */
static void **graveyard;
static size_t n_graveyard;

struct dli_mpi {
	MPI_Comm world;
	int rank, size;
	/* Left over from timed-out gathers: requests still open and the buffers they use. */
	MPI_Request *stale;
	size_t n_stale;
	void **stale_bufs;
	size_t n_stale_bufs;
};

struct dli_mpi_group {
	int *ranks;
	size_t n, me;
	int tag;
	bool broken;
};

static int mpi_error(struct dli_error *err, int code, const char *what)
{
	char text[MPI_MAX_ERROR_STRING] = "";
	int len = 0;
	MPI_Error_string(code, text, &len);
	snprintf(err->message, sizeof err->message, "%s failed: %s", what, text);
	return -EIO;
}

static void *finalize_thread(void *arg)
{
	(void)arg;
	MPI_Finalize();
	return NULL;
}

/* At exit. After a time-out, MPI_Finalize may wait forever for a rank that died (its runtime
 * fences every process), while a rank that left cleanly is finalizing too and then it returns
 * (and not finalizing can hang the launcher). So after a failed collective it runs in a thread of
 * its own for at most the time limit; then this process goes on without it. */
static void finalize_now(void)
{
	int finalized = 0;
	MPI_Finalized(&finalized);
	if (finalized)
		return; /* the host did */
	if (!failed_collective) {
		MPI_Finalize();
	} else {
		pthread_t th;
		struct timespec until;
		double limit = finalize_limit_s < 1 ? 1 : finalize_limit_s;
		limit = limit > 1e9 ? 1e9 : limit; /* a time_t's worth */
		clock_gettime(CLOCK_REALTIME, &until);
		until.tv_sec += (time_t)limit;
		if (pthread_create(&th, NULL, finalize_thread, NULL) != 0) {
			MPI_Finalize();
		} else if (pthread_timedjoin_np(th, NULL, &until) != 0) {
			pthread_detach(th);
			fprintf(stderr, "dlinspect: rank %d: MPI_Finalize did not return within %g s "
					"(a rank that did not come may be gone): going on without it\n",
				world_rank, limit);
			return; /* the buffers may still be written */
		}
	}
	for (size_t i = 0; i < n_graveyard; i++)
		free(graveyard[i]);
	free(graveyard);
	graveyard = NULL;
	n_graveyard = 0;
}

/* Registers finalize_now for process exit, once, and keeps this module loaded until then (an
 * atexit handler of a shared object runs when it is unloaded, and dli_destroy unloads modules). */
static void finalize_at_exit(void)
{
	if (owns_mpi)
		return;
	owns_mpi = true;
	Dl_info self;
	if (dladdr(&owns_mpi, &self) && self.dli_fname)
		(void)dlopen(self.dli_fname, RTLD_NOW | RTLD_NOLOAD | RTLD_NODELETE);
	atexit(finalize_now);
}

static int dli_mpi_open(void **out, struct dli_error *err)
{
	int inited = 0, finalized = 0;
	MPI_Initialized(&inited);
	MPI_Finalized(&finalized);
	if (finalized) {
		snprintf(err->message, sizeof err->message,
			 "MPI was finalized already: dli_init must come before MPI_Finalize");
		return -EINVAL;
	}
	struct dli_mpi *c = calloc(1, sizeof *c);
	if (!c)
		return -ENOMEM;
	if (!inited) {
		/* Open MPI loads its components with dlopen and they need libmpi's symbols in the
		 * global scope, which a module's dependencies are not: promote it first. */
		static const char *const libs[] = {"libmpi.so.40", "libmpi.so.12", "libmpi.so", NULL};
		for (size_t i = 0; libs[i]; i++)
			if (dlopen(libs[i], RTLD_NOW | RTLD_GLOBAL | RTLD_NOLOAD))
				break;
		int r = MPI_Init(NULL, NULL);
		if (r != MPI_SUCCESS) {
			free(c);
			return mpi_error(err, r, "MPI_Init");
		}
		finalize_at_exit();
	}
	MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
	int r = MPI_Comm_dup(MPI_COMM_WORLD, &c->world);
	if (r != MPI_SUCCESS) {
		free(c); /* MPI stays up: finalized at exit when it was ours */
		return mpi_error(err, r, "MPI_Comm_dup");
	}
	MPI_Comm_set_errhandler(c->world, MPI_ERRORS_RETURN);
	MPI_Comm_rank(c->world, &c->rank);
	MPI_Comm_size(c->world, &c->size);
	world_rank = c->rank;
	*out = c;
	return 0;
}

static void free_state(struct dli_mpi *c)
{
	free(c->stale);
	free(c);
}

static void dli_mpi_close(void *comm)
{
	struct dli_mpi *c = comm;
	if (!c)
		return;
	/* A host that finalized MPI before dli_destroy took our communicator and requests with it;
	 * any MPI call now (but these queries) aborts the process. */
	int finalized = 0;
	MPI_Finalized(&finalized);
	if (!finalized) {
		/* Requests a missing rank never answered: cancelled receives, sends let go. */
		for (size_t i = 0; i < c->n_stale; i++)
			if (c->stale[i] != MPI_REQUEST_NULL)
				MPI_Request_free(&c->stale[i]);
		if (!c->n_stale_bufs)
			MPI_Comm_free(&c->world);
	}
	/* Their buffers stay until MPI is finalized (at exit, when MPI_Init was ours; else they
	 * stay reachable, and the host's MPI_Finalize ends their use). */
	void **v = c->n_stale_bufs ? realloc(graveyard, (n_graveyard + c->n_stale_bufs) * sizeof *v)
				   : NULL;
	if (v) {
		graveyard = v;
		for (size_t i = 0; i < c->n_stale_bufs; i++)
			graveyard[n_graveyard++] = c->stale_bufs[i];
	}
	free(c->stale_bufs);
	free_state(c);
}

static int dli_mpi_rank(void *comm)
{
	return ((struct dli_mpi *)comm)->rank;
}

static int dli_mpi_size(void *comm)
{
	return ((struct dli_mpi *)comm)->size;
}

static int dli_mpi_group_create(void *comm, const int *ranks, size_t n, void **out,
				struct dli_error *err)
{
	struct dli_mpi *c = comm;
	struct dli_mpi_group *g = calloc(1, sizeof *g);
	if (!g || !(g->ranks = malloc(n * sizeof *ranks))) {
		free(g);
		return -ENOMEM;
	}
	memcpy(g->ranks, ranks, n * sizeof *ranks);
	g->n = n;
	bool in = false;
	uint64_t h = 0xcbf29ce484222325ull;
	for (size_t i = 0; i < n; i++) {
		if (ranks[i] == c->rank) {
			g->me = i;
			in = true;
		}
		h = (h ^ (uint64_t)(unsigned)ranks[i]) * 0x100000001b3ull;
	}
	if (!in) {
		snprintf(err->message, sizeof err->message, "rank %d is not in the group", c->rank);
		free(g->ranks);
		free(g);
		return -EINVAL;
	}
	/* The tag is the rank list's: every member derives the same; MPI guarantees tags up to
	 * 32767. */
	g->tag = (int)(h % 32000u) + 1;
	*out = g;
	return 0;
}

static void dli_mpi_group_destroy(void *comm, void *group)
{
	struct dli_mpi_group *g = group;
	if (g)
		free(g->ranks);
	free(g);
}

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Keeps what a timed-out gather still uses until close. */
static void keep_stale(struct dli_mpi *c, MPI_Request *reqs, size_t n, void *sbuf, void *rbuf)
{
	MPI_Request *v = realloc(c->stale, (c->n_stale + n) * sizeof *v);
	void **b = realloc(c->stale_bufs, (c->n_stale_bufs + 2) * sizeof *b);
	if (v)
		c->stale = v;
	if (b)
		c->stale_bufs = b;
	if (!v || !b)
		return; /* out of memory: leak rather than free what MPI may still write */
	for (size_t i = 0; i < n; i++)
		if (reqs[i] != MPI_REQUEST_NULL)
			c->stale[c->n_stale++] = reqs[i];
	c->stale_bufs[c->n_stale_bufs++] = sbuf;
	c->stale_bufs[c->n_stale_bufs++] = rbuf;
}

static int dli_mpi_allgather(void *comm, void *group, const void *send, size_t bytes, void *recv,
			     double timeout_s, bool *missing, struct dli_error *err)
{
	struct dli_mpi *c = comm;
	struct dli_mpi_group *g = group;
	finalize_limit_s = timeout_s;
	if (g->broken) {
		snprintf(err->message, sizeof err->message,
			 "the group timed out or failed before: no further collectives on it");
		return -EPIPE;
	}
	int finalized = 0;
	MPI_Finalized(&finalized);
	if (finalized) {
		snprintf(err->message, sizeof err->message,
			 "MPI was finalized (by the host) before this collective: call dli_destroy "
			 "before MPI_Finalize");
		return -EPIPE;
	}
	if (bytes > (size_t)INT32_MAX) {
		snprintf(err->message, sizeof err->message, "%zu bytes per member: too many", bytes);
		return -E2BIG;
	}
	size_t n = g->n;
	/* Own buffers: after a time-out MPI may still read or write them. */
	unsigned char *sbuf = malloc(bytes ? bytes : 1), *rbuf = malloc(n * bytes + 1);
	MPI_Request *reqs = malloc(2 * n * sizeof *reqs);
	if (!sbuf || !rbuf || !reqs) {
		free(sbuf);
		free(rbuf);
		free(reqs);
		return -ENOMEM;
	}
	memcpy(sbuf, send, bytes);
	memcpy(rbuf + g->me * bytes, send, bytes);
	int rc = 0;
	for (size_t i = 0; i < 2 * n; i++)
		reqs[i] = MPI_REQUEST_NULL;
	for (size_t i = 0; i < n && !rc; i++) {
		if (i == g->me)
			continue;
		int r = MPI_Irecv(rbuf + i * bytes, (int)bytes, MPI_BYTE, g->ranks[i], g->tag,
				  c->world, &reqs[i]);
		if (r == MPI_SUCCESS)
			r = MPI_Isend(sbuf, (int)bytes, MPI_BYTE, g->ranks[i], g->tag, c->world,
				      &reqs[n + i]);
		if (r != MPI_SUCCESS)
			rc = mpi_error(err, r, "posting a message");
	}
	double deadline = now() + timeout_s;
	int done = 0;
	while (!rc) {
		/* One request at a time: MPI_Test sets a completed one to MPI_REQUEST_NULL, which is
		 * how the missing members are known after a time-out (MPI_Testall leaves them all). */
		done = 1;
		for (size_t i = 0; i < 2 * n && !rc; i++) {
			if (reqs[i] == MPI_REQUEST_NULL)
				continue;
			int flag = 0, r = MPI_Test(&reqs[i], &flag, MPI_STATUS_IGNORE);
			if (r != MPI_SUCCESS)
				rc = mpi_error(err, r, "MPI_Test");
			done = done && flag;
		}
		if (rc || done)
			break;
		if (now() > deadline) {
			rc = -ETIMEDOUT;
			break;
		}
		struct timespec ts = {0, 100000}; /* 0.1 ms: ranks may share cores */
		nanosleep(&ts, NULL);
	}
	if (rc) {
		size_t n_missing = 0;
		for (size_t i = 0; i < n; i++) {
			missing[i] = reqs[i] != MPI_REQUEST_NULL;
			n_missing += missing[i];
			if (missing[i])
				MPI_Cancel(&reqs[i]);
		}
		if (rc == -ETIMEDOUT)
			snprintf(err->message, sizeof err->message,
				 "%zu of %zu members sent nothing within %g s", n_missing, n,
				 timeout_s);
		g->broken = true;
		failed_collective = true;
		keep_stale(c, reqs, 2 * n, sbuf, rbuf);
		free(reqs);
		return rc;
	}
	memcpy(recv, rbuf, n * bytes);
	free(sbuf);
	free(rbuf);
	free(reqs);
	return 0;
}

static int dli_mpi_barrier(void *comm, void *group, double timeout_s, bool *missing,
			   struct dli_error *err)
{
	struct dli_mpi_group *g = group;
	unsigned char one = 1, *all = malloc(g->n);
	if (!all)
		return -ENOMEM;
	int r = dli_mpi_allgather(comm, group, &one, 1, all, timeout_s, missing, err);
	free(all);
	return r;
}

static const struct dli_comm_ops dli_mpi_ops = {
	.size = sizeof(struct dli_comm_ops),
	.open = dli_mpi_open,
	.close = dli_mpi_close,
	.rank = dli_mpi_rank,
	.world_size = dli_mpi_size,
	.group_create = dli_mpi_group_create,
	.group_destroy = dli_mpi_group_destroy,
	.allgather = dli_mpi_allgather,
	.barrier = dli_mpi_barrier,
};

static const struct dli_comm_desc dli_mpi_desc = {
	.size = sizeof(struct dli_comm_desc),
	.name = "mpi",
	.doc = "MPI (mpirun): collectives with a time limit, naming the ranks that do not join.",
	.ops = &dli_mpi_ops,
};
static const struct dli_comm_desc *const dli_mpi_comms[] = {&dli_mpi_desc};

static const struct dli_module dli_mpi_module = {
	.size = sizeof(struct dli_module),
	.abi_major = DLI_ABI_MAJOR,
	.abi_minor = DLI_ABI_MINOR,
	.name = "mpi",
	.ns = "communicators",
	.doc = "The mpi communicator: statistics reduced across the ranks of an MPI job.",
	.comms = dli_mpi_comms,
	.n_comms = 1,
};

DLI_EXPORT const struct dli_module *DLI_MODULE_ENTRY(const struct dli_host *host)
{
	if (!host || host->abi_major != DLI_ABI_MAJOR)
		return NULL;
	return &dli_mpi_module;
}
