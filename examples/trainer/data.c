/* The teacher task (see data.h). The teacher is tanh(x A^T / sqrt(d_in)) B^T / sqrt(hidden),
 * standardized per output over a large sample, so the targets have mean 0 and variance 1 before
 * the noise. */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "data.h"

#define TEACHER_HIDDEN 64
#define CALIBRATION_ROWS 16384

uint64_t dlt_rng_next(uint64_t *state)
{
	uint64_t z = (*state += 0x9e3779b97f4a7c15ull);
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

float dlt_rng_normal(uint64_t *state)
{
	/* u1 in (0, 1] so the log is finite. */
	double u1 = ((double)(dlt_rng_next(state) >> 11) + 1.0) / 9007199254740992.0;
	double u2 = (double)(dlt_rng_next(state) >> 11) / 9007199254740992.0;
	return (float)(sqrt(-2.0 * log(u1)) * cos(2.0 * M_PI * u2));
}

/* One row of the teacher, before standardization. */
static void teacher(const struct dlt_task *t, const float *x, float *y)
{
	float h[TEACHER_HIDDEN];
	for (int j = 0; j < t->hidden; j++) {
		double s = 0;
		for (int i = 0; i < t->d_in; i++)
			s += (double)t->a[j * t->d_in + i] * x[i];
		h[j] = tanhf((float)(s / sqrt(t->d_in)));
	}
	for (int o = 0; o < t->d_out; o++) {
		double s = 0;
		for (int j = 0; j < t->hidden; j++)
			s += (double)t->b[o * t->hidden + j] * h[j];
		y[o] = (float)(s / sqrt(t->hidden));
	}
}

int dlt_task_init(struct dlt_task *t, int d_in, int d_out, float noise, uint64_t seed)
{
	memset(t, 0, sizeof *t);
	t->d_in = d_in;
	t->d_out = d_out;
	t->hidden = TEACHER_HIDDEN;
	t->noise = noise;
	t->seed = seed;
	t->bad_step = -1;
	t->a = malloc((size_t)t->hidden * d_in * sizeof(float));
	t->b = malloc((size_t)d_out * t->hidden * sizeof(float));
	t->mean = calloc((size_t)d_out, sizeof(float));
	t->inv_std = calloc((size_t)d_out, sizeof(float));
	float *x = malloc((size_t)d_in * sizeof(float)), *y = malloc((size_t)d_out * sizeof(float));
	double *sum = calloc((size_t)d_out, sizeof(double)), *sq = calloc((size_t)d_out, sizeof(double));
	int r = -ENOMEM;
	if (!t->a || !t->b || !t->mean || !t->inv_std || !x || !y || !sum || !sq)
		goto out;
	/* The teacher's weights come from a stream of their own, apart from the batches'. */
	uint64_t s = seed ^ 0x7eac4e7ull;
	for (int i = 0; i < t->hidden * d_in; i++)
		t->a[i] = dlt_rng_normal(&s);
	for (int i = 0; i < d_out * t->hidden; i++)
		t->b[i] = dlt_rng_normal(&s);
	for (int n = 0; n < CALIBRATION_ROWS; n++) {
		for (int i = 0; i < d_in; i++)
			x[i] = dlt_rng_normal(&s);
		teacher(t, x, y);
		for (int o = 0; o < d_out; o++) {
			sum[o] += y[o];
			sq[o] += (double)y[o] * y[o];
		}
	}
	for (int o = 0; o < d_out; o++) {
		double m = sum[o] / CALIBRATION_ROWS, v = sq[o] / CALIBRATION_ROWS - m * m;
		t->mean[o] = (float)m;
		t->inv_std[o] = (float)(1.0 / sqrt(v > 1e-12 ? v : 1e-12));
	}
	r = 0;
out:
	free(x);
	free(y);
	free(sum);
	free(sq);
	if (r)
		dlt_task_finish(t);
	return r;
}

void dlt_task_finish(struct dlt_task *t)
{
	free(t->a);
	free(t->b);
	free(t->mean);
	free(t->inv_std);
	memset(t, 0, sizeof *t);
}

void dlt_task_batch(const struct dlt_task *t, int64_t step, int rows, float *x, float *target,
		    float *mask)
{
	uint64_t s = t->seed * 0x9e3779b97f4a7c15ull ^ (uint64_t)step * 0xd1b54a32d192ed03ull;
	for (int r = 0; r < rows; r++) {
		float *xr = x + (size_t)r * t->d_in, *yr = target + (size_t)r * t->d_out;
		for (int i = 0; i < t->d_in; i++)
			xr[i] = dlt_rng_normal(&s);
		teacher(t, xr, yr);
		for (int o = 0; o < t->d_out; o++)
			yr[o] = (yr[o] - t->mean[o]) * t->inv_std[o] + t->noise * dlt_rng_normal(&s);
		mask[r] = 1.0f;
	}
	if (step == t->bad_step && rows > 0) {
		float *xr = x + (size_t)(rows - 1) * t->d_in;
		for (int i = 0; i < t->d_in; i++)
			xr[i] = t->bad_value;
		mask[rows - 1] = 0.0f;
	}
}
