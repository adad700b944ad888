/* The trainer's collectives over MPI (parallel.h). Sums are not MPI_Allreduce: MPI does not say in
 * which order an all-reduce adds, nor that every rank gets the same bits. Here each member sums one
 * slice of the buffer over the group in rank order (an all-to-all of the slices), and the slices
 * are then all-gathered: the same bits on every member, in the order a single process adding
 * microbatch gradients one after the other uses, at the traffic of a ring all-reduce. */
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <mpi.h>

#include "parallel.h"

struct dlt_mpi {
	MPI_Comm world, tp, dp;
	bool finalize; /* we called MPI_Init */
	void *scratch;
	size_t scratch_bytes;
	int *counts; /* 4 x world size: send counts, send offsets, receive counts, offsets */
};

static MPI_Comm group_comm(const struct dlt_mpi *m, enum dlt_group g)
{
	return g == DLT_GROUP_TP ? m->tp : g == DLT_GROUP_DP ? m->dp : m->world;
}

static int mpi_errno(int rc)
{
	return rc == MPI_SUCCESS ? 0 : -EIO;
}

/* The slices of n (<= 2^30) elements among p members: member k holds [n k / p, n (k + 1) / p). */
static size_t slice_at(size_t n, int k, int p)
{
	return (size_t)((uint64_t)n * (uint64_t)k / (uint64_t)p);
}

static int ordered_sum(struct dlt_mpi *m, enum dlt_group g, void *buf, size_t n, bool f64)
{
	MPI_Comm comm = group_comm(m, g);
	int p, me;
	MPI_Comm_size(comm, &p);
	MPI_Comm_rank(comm, &me);
	if (p == 1 || n == 0)
		return 0;
	if (n > (size_t)1 << 30)
		return -EOVERFLOW; /* int counts */
	size_t es = f64 ? sizeof(double) : sizeof(float);
	size_t lo = slice_at(n, me, p), len = slice_at(n, me + 1, p) - lo;
	if (m->scratch_bytes < (size_t)p * len * es) {
		void *s = realloc(m->scratch, (size_t)p * len * es);
		if (!s)
			return -ENOMEM;
		m->scratch = s;
		m->scratch_bytes = (size_t)p * len * es;
	}
	int *sc = m->counts, *sd = sc + p, *rc = sd + p, *rd = rc + p;
	for (int k = 0; k < p; k++) {
		sd[k] = (int)slice_at(n, k, p);
		sc[k] = (int)(slice_at(n, k + 1, p) - (size_t)sd[k]);
		rc[k] = (int)len;
		rd[k] = k * (int)len;
	}
	MPI_Datatype t = f64 ? MPI_DOUBLE : MPI_FLOAT;
	int r = mpi_errno(MPI_Alltoallv(buf, sc, sd, t, m->scratch, rc, rd, t, comm));
	if (r)
		return r;
	/* Member 0's slice, plus member 1's, ...: the order of the ranks. */
	if (f64) {
		double *in = m->scratch, *out = (double *)buf + lo;
		memcpy(out, in, len * es);
		for (int k = 1; k < p; k++)
			for (size_t i = 0; i < len; i++)
				out[i] += in[(size_t)k * len + i];
	} else {
		float *in = m->scratch, *out = (float *)buf + lo;
		memcpy(out, in, len * es);
		for (int k = 1; k < p; k++)
			for (size_t i = 0; i < len; i++)
				out[i] += in[(size_t)k * len + i];
	}
	return mpi_errno(MPI_Allgatherv(MPI_IN_PLACE, 0, t, buf, sc, sd, t, comm));
}

static int mpi_sum(void *state, enum dlt_group g, float *buf, size_t n)
{
	return ordered_sum(state, g, buf, n, false);
}

static int mpi_sum_f64(void *state, enum dlt_group g, double *buf, size_t n)
{
	return ordered_sum(state, g, buf, n, true);
}

static int mpi_max(void *state, enum dlt_group g, float *buf, size_t n)
{
	if (n > (size_t)1 << 30)
		return -EOVERFLOW;
	return mpi_errno(MPI_Allreduce(MPI_IN_PLACE, buf, (int)n, MPI_FLOAT, MPI_MAX,
				       group_comm(state, g)));
}

static int mpi_same_u64(void *state, enum dlt_group g, uint64_t value, int *same)
{
	uint64_t v[2] = {value, ~value}, r[2];
	int rc = MPI_Allreduce(v, r, 2, MPI_UINT64_T, MPI_MAX, group_comm(state, g));
	*same = r[0] == value && r[1] == ~value; /* the max of v and of ~v: all equal iff both hold */
	return mpi_errno(rc);
}

int dlt_parallel_init(struct dlt_comm *c, int *argc, char ***argv, int tp, char *msg, size_t size)
{
	int inited = 0, rank, world;
	memset(c, 0, sizeof *c);
	struct dlt_mpi *m = calloc(1, sizeof *m);
	if (!m) {
		snprintf(msg, size, "out of memory");
		return -ENOMEM;
	}
	MPI_Initialized(&inited);
	if (!inited) {
		if (MPI_Init(argc, argv) != MPI_SUCCESS) {
			snprintf(msg, size, "MPI_Init failed");
			free(m);
			return -EIO;
		}
		m->finalize = true;
	}
	/* A duplicate of the world: our messages never match dlinspect's (its communicator has
	 * its own) or anyone else's. */
	MPI_Comm_dup(MPI_COMM_WORLD, &m->world);
	MPI_Comm_rank(m->world, &rank);
	MPI_Comm_size(m->world, &world);
	if (tp == 0)
		tp = world;
	if (tp < 1 || world % tp) {
		snprintf(msg, size, "--tp %d does not divide the %d ranks of the job", tp, world);
		goto fail;
	}
	if (!(m->counts = calloc(4 * (size_t)world, sizeof *m->counts))) {
		snprintf(msg, size, "out of memory");
		goto fail;
	}
	/* Keys are world ranks: a group's member order is its world order. */
	MPI_Comm_split(m->world, rank / tp, rank, &m->tp);
	MPI_Comm_split(m->world, rank % tp, rank, &m->dp);
	*c = (struct dlt_comm){.rank = rank, .size = world, .tp_size = tp, .tp_rank = rank % tp,
			       .dp_size = world / tp, .dp_rank = rank / tp, .state = m,
			       .sum = mpi_sum, .sum_f64 = mpi_sum_f64, .max = mpi_max,
			       .same_u64 = mpi_same_u64};
	return 0;
fail:
	MPI_Comm_free(&m->world);
	free(m->counts);
	if (m->finalize)
		MPI_Finalize();
	free(m);
	return -EINVAL;
}

void dlt_parallel_finish(struct dlt_comm *c)
{
	struct dlt_mpi *m = c->state;
	if (!m)
		return;
	MPI_Comm_free(&m->tp);
	MPI_Comm_free(&m->dp);
	MPI_Comm_free(&m->world);
	free(m->scratch);
	free(m->counts);
	if (m->finalize)
		MPI_Finalize();
	free(m);
	memset(c, 0, sizeof *c);
}
