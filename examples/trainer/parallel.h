/* Data and tensor parallelism for the trainer under mpirun (docs/distributed.md, "The trainer
 * under mpirun"): which groups a rank belongs to, and the three collectives the model needs. The
 * model sees only struct dlt_comm (function pointers), so the trainer's library links no MPI; the
 * MPI implementation (parallel.c) is built into dlinspect-train when meson found MPI. */
#ifndef DLT_PARALLEL_H
#define DLT_PARALLEL_H

#include <stddef.h>
#include <stdint.h>

enum dlt_group {
	DLT_GROUP_TP,    /* the rank's tensor-parallel group: tp_size consecutive ranks */
	DLT_GROUP_DP,    /* the rank's data-parallel group: the ranks with its tp_rank */
	DLT_GROUP_WORLD, /* every rank */
};

struct dlt_comm {
	int rank, size;       /* in the world */
	int tp_size, tp_rank; /* TP group k holds ranks k * tp_size .. k * tp_size + tp_size - 1 */
	int dp_size, dp_rank; /* world = dp_size * tp_size */
	void *state;
	/* buf[n] := the sum over the group's members, added in group-rank order (member 0's value,
	 * plus member 1's, ...): every member gets the same bits, and the same as one process adding
	 * the pieces in that order (gradient accumulation over microbatches). 0 or a negative errno. */
	int (*sum)(void *state, enum dlt_group g, float *buf, size_t n);
	int (*sum_f64)(void *state, enum dlt_group g, double *buf, size_t n);
	/* buf[n] := the elementwise maximum over the group (exact in any order). */
	int (*max)(void *state, enum dlt_group g, float *buf, size_t n);
	/* *same := whether every member of the group passed the same value. */
	int (*same_u64)(void *state, enum dlt_group g, uint64_t value, int *same);
};

#ifdef DLT_HAVE_MPI
/* MPI_Init (unless the process already did), the world's rank and size, and the groups of a
 * tensor-parallel size `tp` that divides the world. 0, or a negative errno with `msg` saying why
 * (then nothing needs finishing). */
int dlt_parallel_init(struct dlt_comm *c, int *argc, char ***argv, int tp, char *msg, size_t size);
/* Frees the groups and calls MPI_Finalize if dlt_parallel_init called MPI_Init. */
void dlt_parallel_finish(struct dlt_comm *c);
#endif

#endif
