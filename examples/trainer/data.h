/* The synthetic task: regress the outputs of a fixed random teacher network, plus Gaussian noise of
 * known variance, from Gaussian inputs. Every batch is fresh and fixed by (seed, step), so the
 * best possible mean squared error is the noise variance: the task's loss floor. */
#ifndef DLT_DATA_H
#define DLT_DATA_H

#include <stdbool.h>
#include <stdint.h>

struct dlt_task {
	int d_in, d_out, hidden;
	float noise;              /* std of the target noise: the floor is noise^2 */
	uint64_t seed;
	float *a, *b;             /* teacher: hidden x d_in, d_out x hidden */
	float *mean, *inv_std;    /* d_out: the targets are standardized */
	/* A corrupted record (a missing-data sentinel in every feature), masked out of the loss: at
	 * step bad_step (-1: never) the batch's last row holds bad_value. */
	int64_t bad_step;
	float bad_value;
};

/* 0 or -ENOMEM; free with dlt_task_finish. */
int dlt_task_init(struct dlt_task *t, int d_in, int d_out, float noise, uint64_t seed);
void dlt_task_finish(struct dlt_task *t);

/* The batch of `step`: x[rows x d_in], target[rows x d_out], mask[rows] (1 = in the loss). */
void dlt_task_batch(const struct dlt_task *t, int64_t step, int rows, float *x, float *target,
		    float *mask);

/* splitmix64 and a Box-Muller normal on it: the same numbers on every machine. */
uint64_t dlt_rng_next(uint64_t *state);
float dlt_rng_normal(uint64_t *state);

#endif
