/* The nccl communicator (docs/distributed.md, "The nccl module"): dlinspect's collectives over
 * NCCL for CUDA hosts, picked with DLINSPECT_COMMUNICATOR=nccl.
 *
 * The ranks come from the launcher's environment; the NCCL unique id from NCCL_COMM_ID (every rank
 * derives it) or from a file rank 0 writes (DLINSPECT_NCCL_ID_FILE). The communicator is
 * non-blocking, so that every wait has the time limit: a group's all-gather is NCCL sends and
 * receives between its members on the world communicator (members alone take part: no group
 * needs its own communicator), staged through device buffers on a stream of the module's own that
 * never waits for the host's streams, and the module polls its completion event. NCCL cannot say
 * which member did not come; after a time-out the communicator is aborted (the only way to free a
 * collective that never ends), so every later collective fails at once. */
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <dlinspect/plugin.h>

DLI_MODULE_NAMESPACE("communicators");

#define DLI_NCCL_DEFAULT_TIMEOUT 300.0

struct dli_nccl {
	ncclComm_t comm;
	int rank, size, device;
	cudaStream_t stream;
	cudaEvent_t done;
	unsigned char *d_send, *d_recv; /* device staging */
	size_t d_send_cap, d_recv_cap;
	unsigned char *h_recv; /* pinned host staging */
	size_t h_recv_cap;
	bool aborted;
	char id_file[512]; /* rank 0 removes it at close */
};

struct dli_nccl_group {
	int *ranks;
	size_t n, me;
};

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void pause_briefly(void)
{
	struct timespec ts = {0, 100000}; /* 0.1 ms */
	nanosleep(&ts, NULL);
}

static int cuda_error(struct dli_error *err, cudaError_t e, const char *what)
{
	snprintf(err->message, sizeof err->message, "%s: %s (%s)", what, cudaGetErrorString(e),
		 cudaGetErrorName(e));
	return e == cudaErrorMemoryAllocation ? -ENOMEM : -EIO;
}

static int nccl_error(struct dli_error *err, ncclComm_t comm, ncclResult_t r, const char *what)
{
	const char *last = comm ? ncclGetLastError(comm) : NULL;
	snprintf(err->message, sizeof err->message, "%s: %s%s%s", what, ncclGetErrorString(r),
		 last && *last ? ": " : "", last ? last : "");
	return -EIO;
}

/* ---- Opening ---- */

static bool env_int(const char *name, int *out)
{
	const char *s = getenv(name);
	if (!s || !*s)
		return false;
	char *end;
	long v = strtol(s, &end, 10);
	if (*end || v < 0 || v > 1 << 24)
		return false;
	*out = (int)v;
	return true;
}

/* The rank and size as the launchers say them: torchrun, Open MPI, MPICH/PMI, Slurm. */
static int launcher_rank(int *rank, int *size, struct dli_error *err)
{
	static const char *const pairs[][2] = {{"RANK", "WORLD_SIZE"},
					       {"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"},
					       {"PMI_RANK", "PMI_SIZE"},
					       {"SLURM_PROCID", "SLURM_NTASKS"}};
	for (size_t i = 0; i < sizeof pairs / sizeof *pairs; i++)
		if (env_int(pairs[i][0], rank) && env_int(pairs[i][1], size) && *rank < *size)
			return 0;
	snprintf(err->message, sizeof err->message,
		 "no rank in the environment: expected RANK and WORLD_SIZE (torchrun), "
		 "OMPI_COMM_WORLD_RANK and _SIZE (mpirun), PMI_RANK and PMI_SIZE, or SLURM_PROCID "
		 "and SLURM_NTASKS");
	return -EINVAL;
}

/* Whether the unique id can be shared (unique_id below), before any CUDA call. */
static int id_source(struct dli_error *err)
{
	const char *path = getenv("DLINSPECT_NCCL_ID_FILE");
	const char *comm_id = getenv("NCCL_COMM_ID");
	if (comm_id && *comm_id)
		return 0;
	if (!path || !*path) {
		snprintf(err->message, sizeof err->message,
			 "no way to share NCCL's unique id: set NCCL_COMM_ID=<host:port of rank 0> "
			 "or DLINSPECT_NCCL_ID_FILE=<a path all ranks see, unique to the job>");
		return -EINVAL;
	}
	if (strlen(path) + 32 > sizeof ((struct dli_nccl *)0)->id_file) {
		snprintf(err->message, sizeof err->message, "DLINSPECT_NCCL_ID_FILE: path too long");
		return -ENAMETOOLONG;
	}
	return 0;
}

static double time_limit(void)
{
	const char *t = getenv("DLINSPECT_COMM_TIMEOUT");
	char *end;
	double v = t && *t ? strtod(t, &end) : 0;
	return t && *t && !*end && v > 0 ? v : DLI_NCCL_DEFAULT_TIMEOUT;
}

/* The unique id: every rank derives it from NCCL_COMM_ID, or rank 0 makes it and writes it to
 * DLINSPECT_NCCL_ID_FILE (whole, by a rename) and the others wait for the file. */
static int unique_id(struct dli_nccl *c, ncclUniqueId *id, struct dli_error *err)
{
	const char *path = getenv("DLINSPECT_NCCL_ID_FILE");
	const char *comm_id = getenv("NCCL_COMM_ID");
	if (comm_id && *comm_id) {
		ncclResult_t r = ncclGetUniqueId(id);
		return r == ncclSuccess ? 0 : nccl_error(err, NULL, r, "ncclGetUniqueId");
	}
	if (c->rank == 0) {
		ncclResult_t r = ncclGetUniqueId(id);
		if (r != ncclSuccess)
			return nccl_error(err, NULL, r, "ncclGetUniqueId");
		char tmp[600];
		snprintf(tmp, sizeof tmp, "%s.%ld.tmp", path, (long)getpid());
		FILE *f = fopen(tmp, "wb");
		bool ok = f && fwrite(id, sizeof *id, 1, f) == 1;
		ok = f && fclose(f) == 0 && ok;
		if (!ok || rename(tmp, path) != 0) {
			int e = errno;
			unlink(tmp);
			snprintf(err->message, sizeof err->message,
				 "DLINSPECT_NCCL_ID_FILE=%.400s: cannot write it: %s", path, strerror(e));
			return -e;
		}
		snprintf(c->id_file, sizeof c->id_file, "%s", path);
		return 0;
	}
	double limit = time_limit(), deadline = now() + limit;
	for (;;) {
		FILE *f = fopen(path, "rb");
		bool ok = f && fread(id, sizeof *id, 1, f) == 1;
		if (f)
			fclose(f);
		if (ok)
			return 0;
		if (now() > deadline) {
			snprintf(err->message, sizeof err->message,
				 "DLINSPECT_NCCL_ID_FILE=%.400s: rank 0 did not write it within %g s",
				 path, limit);
			return -ETIMEDOUT;
		}
		struct timespec ts = {0, 10000000}; /* 10 ms */
		nanosleep(&ts, NULL);
	}
}

/* Waits for a non-blocking communicator's pending work (init, group end, finalize). */
static ncclResult_t settle(ncclComm_t comm, double deadline)
{
	ncclResult_t state = ncclInProgress;
	while (ncclCommGetAsyncError(comm, &state) == ncclSuccess && state == ncclInProgress &&
	       now() < deadline)
		pause_briefly();
	return state;
}

static void dli_nccl_close(void *comm);

static int dli_nccl_open(void **out, struct dli_error *err)
{
	struct dli_nccl *c = calloc(1, sizeof *c);
	if (!c)
		return -ENOMEM;
	int r, n = 0;
	if ((r = launcher_rank(&c->rank, &c->size, err)) || (r = id_source(err))) {
		free(c);
		return r;
	}
	cudaError_t e = cudaGetDeviceCount(&n);
	if (e != cudaSuccess || n == 0) {
		snprintf(err->message, sizeof err->message, "no CUDA device (cudaGetDeviceCount: %s)",
			 e != cudaSuccess ? cudaGetErrorString(e) : "0 devices");
		free(c);
		return -ENODEV;
	}
	/* The host's device: it chose it (cudaSetDevice, torch.cuda.set_device) before dli_init. */
	if ((e = cudaGetDevice(&c->device)) != cudaSuccess) {
		r = cuda_error(err, e, "cudaGetDevice");
		free(c);
		return r;
	}
	ncclUniqueId id;
	if ((r = unique_id(c, &id, err))) {
		free(c);
		return r;
	}
	if ((e = cudaStreamCreateWithFlags(&c->stream, cudaStreamNonBlocking)) != cudaSuccess ||
	    (e = cudaEventCreateWithFlags(&c->done, cudaEventDisableTiming)) != cudaSuccess) {
		r = cuda_error(err, e, "creating the module's stream");
		dli_nccl_close(c);
		return r;
	}
	ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
	config.blocking = 0;
	ncclResult_t nr = ncclCommInitRankConfig(&c->comm, c->size, id, c->rank, &config);
	if (nr == ncclSuccess || nr == ncclInProgress)
		nr = settle(c->comm, now() + time_limit());
	if (nr != ncclSuccess) {
		r = nr == ncclInProgress ? -ETIMEDOUT : nccl_error(err, c->comm, nr, "ncclCommInitRank");
		if (nr == ncclInProgress)
			snprintf(err->message, sizeof err->message,
				 "ncclCommInitRank (rank %d of %d) did not finish within %g s: a rank "
				 "did not come, or the unique id is another job's", c->rank, c->size,
				 time_limit());
		if (c->comm) {
			ncclCommAbort(c->comm);
			c->comm = NULL;
		}
		dli_nccl_close(c);
		return r;
	}
	*out = c;
	return 0;
}

static void dli_nccl_close(void *comm)
{
	struct dli_nccl *c = comm;
	if (!c)
		return;
	if (c->comm && c->aborted) {
		/* aborted after a time-out: nothing left to free in NCCL */
	} else if (c->comm) {
		ncclResult_t r = ncclCommFinalize(c->comm);
		if (r == ncclSuccess || r == ncclInProgress)
			r = settle(c->comm, now() + time_limit());
		if (r == ncclSuccess)
			ncclCommDestroy(c->comm);
		else
			ncclCommAbort(c->comm);
	}
	if (c->stream && !c->aborted)
		cudaStreamSynchronize(c->stream);
	cudaFree(c->d_send);
	cudaFree(c->d_recv);
	cudaFreeHost(c->h_recv);
	if (c->done)
		cudaEventDestroy(c->done);
	if (c->stream)
		cudaStreamDestroy(c->stream);
	if (c->id_file[0])
		unlink(c->id_file);
	free(c);
}

static int dli_nccl_rank(void *comm)
{
	return ((struct dli_nccl *)comm)->rank;
}

static int dli_nccl_size(void *comm)
{
	return ((struct dli_nccl *)comm)->size;
}

static int dli_nccl_group_create(void *comm, const int *ranks, size_t n, void **out,
				 struct dli_error *err)
{
	struct dli_nccl *c = comm;
	struct dli_nccl_group *g = calloc(1, sizeof *g);
	if (!g || !(g->ranks = malloc((n ? n : 1) * sizeof *ranks))) {
		free(g);
		return -ENOMEM;
	}
	memcpy(g->ranks, ranks, n * sizeof *ranks);
	g->n = n;
	bool in = false;
	for (size_t i = 0; i < n; i++)
		if (ranks[i] == c->rank) {
			g->me = i;
			in = true;
		}
	if (!in) {
		snprintf(err->message, sizeof err->message, "rank %d is not in the group", c->rank);
		free(g->ranks);
		free(g);
		return -EINVAL;
	}
	*out = g;
	return 0;
}

static void dli_nccl_group_destroy(void *comm, void *group)
{
	(void)comm;
	struct dli_nccl_group *g = group;
	if (g)
		free(g->ranks);
	free(g);
}

/* Device and pinned buffers of at least the sizes asked, kept between steps. */
static int reserve(struct dli_nccl *c, size_t send, size_t recv, struct dli_error *err)
{
	cudaError_t e = cudaSuccess;
	if (send > c->d_send_cap) {
		cudaFree(c->d_send);
		c->d_send = NULL;
		c->d_send_cap = 0;
		if ((e = cudaMalloc((void **)&c->d_send, send)) != cudaSuccess)
			return cuda_error(err, e, "cudaMalloc");
		c->d_send_cap = send;
	}
	if (recv > c->d_recv_cap) {
		cudaFree(c->d_recv);
		c->d_recv = NULL;
		c->d_recv_cap = 0;
		if ((e = cudaMalloc((void **)&c->d_recv, recv)) != cudaSuccess)
			return cuda_error(err, e, "cudaMalloc");
		c->d_recv_cap = recv;
	}
	if (recv > c->h_recv_cap) {
		cudaFreeHost(c->h_recv);
		c->h_recv = NULL;
		c->h_recv_cap = 0;
		if ((e = cudaMallocHost((void **)&c->h_recv, recv)) != cudaSuccess)
			return cuda_error(err, e, "cudaMallocHost");
		c->h_recv_cap = recv;
	}
	return 0;
}

/* After a time-out or an asynchronous error: the collective may never end, and only aborting the
 * communicator frees the stream; every later collective fails at once. */
static int give_up(struct dli_nccl *c, int rc, double timeout_s, struct dli_error *err)
{
	if (rc == -ETIMEDOUT)
		snprintf(err->message, sizeof err->message,
			 "no answer within %g s; NCCL cannot say which member did not come (dlinspect "
			 "doctor under the same launcher names it); the communicator was aborted",
			 timeout_s);
	ncclCommAbort(c->comm);
	c->aborted = true;
	return rc;
}

static int allgather_on_device(struct dli_nccl *c, struct dli_nccl_group *g, const void *send,
			       size_t bytes, void *recv, double timeout_s, struct dli_error *err)
{
	double deadline = now() + timeout_s;
	size_t n = g->n;
	int r = reserve(c, bytes ? bytes : 1, n * bytes + 1, err);
	if (r)
		return r;
	cudaError_t e = cudaMemcpyAsync(c->d_send, send, bytes, cudaMemcpyHostToDevice, c->stream);
	if (e == cudaSuccess)
		e = cudaMemcpyAsync(c->d_recv + g->me * bytes, c->d_send, bytes,
				    cudaMemcpyDeviceToDevice, c->stream);
	if (e != cudaSuccess)
		return cuda_error(err, e, "staging the records on the device");
	if (n > 1) {
		/* A non-blocking communicator may answer ncclInProgress to any call of the group;
		 * the group's state is known after ncclGroupEnd. */
		ncclResult_t nr = ncclGroupStart();
		for (size_t i = 0; i < n && (nr == ncclSuccess || nr == ncclInProgress); i++) {
			if (i == g->me)
				continue;
			nr = ncclSend(c->d_send, bytes, ncclUint8, g->ranks[i], c->comm, c->stream);
			if (nr == ncclSuccess || nr == ncclInProgress)
				nr = ncclRecv(c->d_recv + i * bytes, bytes, ncclUint8, g->ranks[i],
					      c->comm, c->stream);
		}
		ncclResult_t end = ncclGroupEnd();
		if (nr == ncclSuccess || nr == ncclInProgress)
			nr = end;
		if (nr == ncclInProgress)
			nr = settle(c->comm, deadline);
		if (nr == ncclInProgress)
			return give_up(c, -ETIMEDOUT, timeout_s, err);
		if (nr != ncclSuccess)
			return give_up(c, nccl_error(err, c->comm, nr, "ncclSend/ncclRecv"), timeout_s,
				       err);
	}
	if ((e = cudaMemcpyAsync(c->h_recv, c->d_recv, n * bytes, cudaMemcpyDeviceToHost,
				 c->stream)) != cudaSuccess ||
	    (e = cudaEventRecord(c->done, c->stream)) != cudaSuccess)
		return cuda_error(err, e, "copying the records back");
	for (;;) {
		e = cudaEventQuery(c->done);
		if (e == cudaSuccess)
			break;
		if (e != cudaErrorNotReady)
			return give_up(c, cuda_error(err, e, "the all-gather's stream"), timeout_s, err);
		ncclResult_t state = ncclSuccess;
		if (ncclCommGetAsyncError(c->comm, &state) == ncclSuccess && state != ncclSuccess &&
		    state != ncclInProgress)
			return give_up(c, nccl_error(err, c->comm, state, "NCCL"), timeout_s, err);
		if (now() > deadline)
			return give_up(c, -ETIMEDOUT, timeout_s, err);
		pause_briefly();
	}
	memcpy(recv, c->h_recv, n * bytes);
	return 0;
}

static int dli_nccl_allgather(void *comm, void *group, const void *send, size_t bytes, void *recv,
			      double timeout_s, bool *missing, struct dli_error *err)
{
	struct dli_nccl *c = comm;
	(void)missing; /* NCCL cannot tell who: none is named */
	if (c->aborted) {
		snprintf(err->message, sizeof err->message,
			 "the communicator was aborted after an earlier failure: no further "
			 "collectives");
		return -EPIPE;
	}
	/* The host's current device is left as it was. */
	int old = -1;
	cudaGetDevice(&old);
	if (old != c->device)
		cudaSetDevice(c->device);
	int r = allgather_on_device(c, group, send, bytes, recv, timeout_s, err);
	if (old >= 0 && old != c->device)
		cudaSetDevice(old);
	return r;
}

static int dli_nccl_barrier(void *comm, void *group, double timeout_s, bool *missing,
			    struct dli_error *err)
{
	struct dli_nccl_group *g = group;
	unsigned char one = 1, *all = malloc(g->n);
	if (!all)
		return -ENOMEM;
	int r = dli_nccl_allgather(comm, group, &one, 1, all, timeout_s, missing, err);
	free(all);
	return r;
}

static const struct dli_comm_ops dli_nccl_ops = {
	.size = sizeof(struct dli_comm_ops),
	.open = dli_nccl_open,
	.close = dli_nccl_close,
	.rank = dli_nccl_rank,
	.world_size = dli_nccl_size,
	.group_create = dli_nccl_group_create,
	.group_destroy = dli_nccl_group_destroy,
	.allgather = dli_nccl_allgather,
	.barrier = dli_nccl_barrier,
};

static const struct dli_comm_desc dli_nccl_desc = {
	.size = sizeof(struct dli_comm_desc),
	.name = "nccl",
	.doc = "NCCL (CUDA hosts): records staged on the device, collectives with a time limit.",
	.ops = &dli_nccl_ops,
};
static const struct dli_comm_desc *const dli_nccl_comms[] = {&dli_nccl_desc};

static const struct dli_module dli_nccl_module = {
	.size = sizeof(struct dli_module),
	.abi_major = DLI_ABI_MAJOR,
	.abi_minor = DLI_ABI_MINOR,
	.name = "nccl",
	.ns = "communicators",
	.doc = "The nccl communicator: statistics reduced across the ranks of a CUDA job.",
	.comms = dli_nccl_comms,
	.n_comms = 1,
};

DLI_EXPORT const struct dli_module *DLI_MODULE_ENTRY(const struct dli_host *host)
{
	if (!host || host->abi_major != DLI_ABI_MAJOR)
		return NULL;
	return &dli_nccl_module;
}
