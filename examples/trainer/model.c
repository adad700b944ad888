/* The model of model.h: forward, backward and the optimizer, all in fp32 on the CPU except the
 * Linear GEMMs, whose precision the run decides (linear.c). */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "data.h"
#include "model.h"

#define LN_EPS 1e-5f
#define GELU_K 0.7978845608f /* sqrt(2 / pi) */
#define GELU_C 0.044715f

static int ln_init(struct dlt_layernorm *ln, int dim, int rows)
{
	ln->dim = dim;
	ln->gamma = malloc((size_t)dim * sizeof(float));
	ln->beta = calloc((size_t)dim, sizeof(float));
	ln->dgamma = calloc((size_t)dim, sizeof(float));
	ln->dbeta = calloc((size_t)dim, sizeof(float));
	ln->mean = calloc((size_t)rows, sizeof(float));
	ln->rstd = calloc((size_t)rows, sizeof(float));
	if (!ln->gamma || !ln->beta || !ln->dgamma || !ln->dbeta || !ln->mean || !ln->rstd)
		return -ENOMEM;
	for (int i = 0; i < dim; i++)
		ln->gamma[i] = 1.0f;
	return 0;
}

static void ln_finish(struct dlt_layernorm *ln)
{
	free(ln->gamma);
	free(ln->beta);
	free(ln->dgamma);
	free(ln->dbeta);
	free(ln->mean);
	free(ln->rstd);
}

static void ln_forward(struct dlt_layernorm *ln, const float *x, int rows, float *y)
{
	int d = ln->dim;
	ln->x = x;
	for (int r = 0; r < rows; r++) {
		const float *xr = x + (size_t)r * d;
		float *yr = y + (size_t)r * d;
		double s = 0, sq = 0;
		for (int i = 0; i < d; i++)
			s += xr[i];
		float mean = (float)(s / d);
		/* Two passes: a huge row (a corrupted record) keeps its variance exact. */
		for (int i = 0; i < d; i++)
			sq += (double)(xr[i] - mean) * (xr[i] - mean);
		float rstd = 1.0f / sqrtf((float)(sq / d) + LN_EPS);
		ln->mean[r] = mean;
		ln->rstd[r] = rstd;
		for (int i = 0; i < d; i++)
			yr[i] = (xr[i] - mean) * rstd * ln->gamma[i] + ln->beta[i];
	}
}

/* dx = rstd * (dxhat - mean(dxhat) - xhat * mean(dxhat * xhat)), dxhat = dy * gamma; the
 * parameter gradients accumulate. */
static void ln_backward(struct dlt_layernorm *ln, const float *dy, int rows, float *dx)
{
	int d = ln->dim;
	for (int r = 0; r < rows; r++) {
		const float *xr = ln->x + (size_t)r * d, *dyr = dy + (size_t)r * d;
		float *dxr = dx + (size_t)r * d, mean = ln->mean[r], rstd = ln->rstd[r];
		double s1 = 0, s2 = 0;
		for (int i = 0; i < d; i++) {
			float xhat = (xr[i] - mean) * rstd, g = dyr[i] * ln->gamma[i];
			ln->dgamma[i] += dyr[i] * xhat;
			ln->dbeta[i] += dyr[i];
			s1 += g;
			s2 += (double)g * xhat;
		}
		float m1 = (float)(s1 / d), m2 = (float)(s2 / d);
		for (int i = 0; i < d; i++) {
			float xhat = (xr[i] - mean) * rstd;
			dxr[i] = rstd * (dyr[i] * ln->gamma[i] - m1 - xhat * m2);
		}
	}
}

/* GELU, tanh form (as Megatron's MLP): the tanh is kept for the backward pass in `th`. */
static void gelu_forward(const float *x, size_t n, float *y, float *th)
{
	for (size_t i = 0; i < n; i++) {
		float v = x[i], t = tanhf(GELU_K * (v + GELU_C * v * v * v));
		th[i] = t;
		y[i] = 0.5f * v * (1.0f + t);
	}
}

static void gelu_backward(const float *x, const float *th, const float *dy, size_t n, float *dx)
{
	for (size_t i = 0; i < n; i++) {
		float v = x[i], t = th[i];
		float d = 0.5f * (1.0f + t) +
			  0.5f * v * (1.0f - t * t) * GELU_K * (1.0f + 3.0f * GELU_C * v * v);
		dx[i] = dy[i] * d;
	}
}

static void init_normal(float *w, size_t n, float std, uint64_t *s)
{
	for (size_t i = 0; i < n; i++)
		w[i] = std * dlt_rng_normal(s);
}

static int add_param(struct dlt_model *m, float *p, float *g, size_t n)
{
	struct dlt_param *q = &m->params[m->n_params++];
	q->p = p;
	q->g = g;
	q->n = n;
	m->n_grads += n;
	q->m = calloc(n, sizeof(float));
	q->v = calloc(n, sizeof(float));
	return q->m && q->v ? 0 : -ENOMEM;
}

static float *buf(size_t n)
{
	return calloc(n, sizeof(float));
}

int dlt_model_init(struct dlt_model *m, const struct dlt_model_options *o, struct dlt_run *run,
		   struct dli_error *err)
{
	memset(m, 0, sizeof *m);
	m->o = *o;
	/* Tensor parallelism: this rank's block [lo, lo + hid) of the 4 x width hidden features. */
	int tp = run->comm ? run->comm->tp_size : 1, tr = run->comm ? run->comm->tp_rank : 0;
	int full = 4 * o->width, lo = (int)((int64_t)full * tr / tp);
	int w = o->width, hid = m->hidden = (int)((int64_t)full * (tr + 1) / tp) - lo;
	int rows = o->batch, L = o->layers, r;
	char name[96];
	uint64_t s = o->seed ^ 0x3d3d3d3dull;
	/* The whole MLP weights are drawn on every rank, in one order, and each rank keeps its block:
	 * the model is the single process's whatever the TP size. */
	float *whole = NULL;
	if (hid < 1)
		return -EINVAL;
	m->blocks = calloc((size_t)L, sizeof *m->blocks);
	m->h = calloc((size_t)L + 1, sizeof *m->h);
	m->params = calloc(4 * (size_t)L + 4, sizeof *m->params);
	whole = malloc((size_t)full * w * sizeof *whole);
	if (!m->blocks || !m->h || !m->params || !whole)
		goto nomem;
	if ((r = dlt_linear_init(&m->input, run, "model.input_layer", o->d_in, w, rows, err)))
		goto fail;
	m->input.tp_whole = ~0u;
	init_normal(m->input.w, (size_t)w * o->d_in, 1.0f / sqrtf((float)o->d_in), &s);
	for (int i = 0; i <= L; i++)
		if (!(m->h[i] = buf((size_t)rows * w)))
			goto nomem;
	for (int i = 0; i < L; i++) {
		struct dlt_block *b = &m->blocks[i];
		if ((r = ln_init(&b->ln, w, rows)))
			goto fail;
		snprintf(name, sizeof name, "model.layers.%d.mlp.fc1", i);
		if ((r = dlt_linear_init(&b->fc1, run, name, w, hid, rows, err)))
			goto fail;
		snprintf(name, sizeof name, "model.layers.%d.mlp.fc2", i);
		if ((r = dlt_linear_init(&b->fc2, run, name, hid, w, rows, err)))
			goto fail;
		/* fc1 column-parallel: rows lo.. of W1 (full x w); fc2 row-parallel: columns lo.. of
		 * W2 (w x full). The input of fc1 and the output of fc2 are whole on every TP rank. */
		b->fc1.tp_mode = DLT_TP_COLUMN;
		b->fc1.tp_whole = 1u << DLI_TENSOR_ACTIVATION | 1u << DLI_TENSOR_DGRAD;
		b->fc2.tp_mode = DLT_TP_ROW;
		b->fc2.tp_whole = 1u << DLI_TENSOR_OUTPUT | 1u << DLI_TENSOR_GRADIENT;
		init_normal(whole, (size_t)full * w, 1.0f / sqrtf((float)w), &s);
		memcpy(b->fc1.w, whole + (size_t)lo * w, (size_t)hid * w * sizeof *whole);
		/* Residual branches scaled down so the stream's variance stays O(1) at init. */
		init_normal(whole, (size_t)w * full, 1.0f / sqrtf((float)full * 2 * L), &s);
		for (int k = 0; k < w; k++)
			memcpy(b->fc2.w + (size_t)k * hid, whole + (size_t)k * full + lo,
			       (size_t)hid * sizeof *whole);
		if (!(b->ln_out = buf((size_t)rows * w)) || !(b->pre = buf((size_t)rows * hid)) ||
		    !(b->act = buf((size_t)rows * hid)) || !(b->tmp = buf((size_t)rows * hid)))
			goto nomem;
	}
	if ((r = ln_init(&m->ln_f, w, rows)))
		goto fail;
	if ((r = dlt_linear_init(&m->output, run, "model.output_layer", w, o->d_out, rows, err)))
		goto fail;
	m->output.tp_whole = ~0u;
	init_normal(m->output.w, (size_t)o->d_out * w, 1.0f / sqrtf((float)w), &s);
	if (!(m->z = buf((size_t)rows * w)) || !(m->y = buf((size_t)rows * o->d_out)) ||
	    !(m->dy = buf((size_t)rows * o->d_out)) || !(m->dz = buf((size_t)rows * w)) ||
	    !(m->dh = buf((size_t)rows * w)) || !(m->dhid = buf((size_t)rows * hid)) ||
	    !(m->dhid2 = buf((size_t)rows * hid)))
		goto nomem;
	r = add_param(m, m->input.w, m->input.dw, (size_t)w * o->d_in);
	for (int i = 0; i < L && !r; i++) {
		struct dlt_block *b = &m->blocks[i];
		if ((r = add_param(m, b->ln.gamma, b->ln.dgamma, (size_t)w)) ||
		    (r = add_param(m, b->ln.beta, b->ln.dbeta, (size_t)w)) ||
		    (r = add_param(m, b->fc1.w, b->fc1.dw, (size_t)hid * w)))
			break;
		m->params[m->n_params - 1].sharded = tp > 1;
		r = add_param(m, b->fc2.w, b->fc2.dw, (size_t)w * hid);
		m->params[m->n_params - 1].sharded = tp > 1;
	}
	if (r || (r = add_param(m, m->ln_f.gamma, m->ln_f.dgamma, (size_t)w)) ||
	    (r = add_param(m, m->ln_f.beta, m->ln_f.dbeta, (size_t)w)) ||
	    (r = add_param(m, m->output.w, m->output.dw, (size_t)o->d_out * w)))
		goto fail;
	free(whole);
	return 0;
nomem:
	r = -ENOMEM;
fail:
	free(whole);
	dlt_model_finish(m);
	return r;
}

void dlt_model_finish(struct dlt_model *m)
{
	for (size_t i = 0; m->params && i < m->n_params; i++) {
		free(m->params[i].m);
		free(m->params[i].v);
	}
	free(m->params);
	dlt_linear_finish(&m->input);
	dlt_linear_finish(&m->output);
	for (int i = 0; m->blocks && i < m->o.layers; i++) {
		struct dlt_block *b = &m->blocks[i];
		ln_finish(&b->ln);
		dlt_linear_finish(&b->fc1);
		dlt_linear_finish(&b->fc2);
		free(b->ln_out);
		free(b->pre);
		free(b->act);
		free(b->tmp);
	}
	free(m->blocks);
	for (int i = 0; m->h && i <= m->o.layers; i++)
		free(m->h[i]);
	free(m->h);
	ln_finish(&m->ln_f);
	free(m->z);
	free(m->y);
	free(m->dy);
	free(m->dz);
	free(m->dh);
	free(m->dhid);
	free(m->dhid2);
	free(m->gacc);
	memset(m, 0, sizeof *m);
}

void dlt_model_each_linear(struct dlt_model *m, void (*fn)(struct dlt_linear *, void *), void *arg)
{
	fn(&m->input, arg);
	for (int i = 0; i < m->o.layers; i++) {
		fn(&m->blocks[i].fc1, arg);
		fn(&m->blocks[i].fc2, arg);
	}
	fn(&m->output, arg);
}

static float learning_rate(const struct dlt_model_options *o, int64_t step)
{
	int64_t warm = o->steps / 20 > 10 ? o->steps / 20 : 10;
	if (step < warm)
		return o->lr * (float)(step + 1) / (float)warm;
	double p = o->steps > warm ? (double)(step - warm) / (double)(o->steps - warm) : 1.0;
	if (p > 1.0)
		p = 1.0;
	return o->lr * (float)(0.1 + 0.45 * (1.0 + cos(M_PI * p)));
}

/* Adam (beta 0.9, 0.999, eps 1e-8) after scaling every gradient so their global norm is at most
 * o.clip. Under tensor parallelism the norm takes each sharded parameter's blocks from every TP
 * rank and each replicated one once. */
static int optimizer_step(struct dlt_model *m, const struct dlt_comm *comm, int64_t step)
{
	double sq = 0, sq_shard = 0;
	for (size_t i = 0; i < m->n_params; i++) {
		double *to = m->params[i].sharded ? &sq_shard : &sq;
		for (size_t k = 0; k < m->params[i].n; k++)
			*to += (double)m->params[i].g[k] * m->params[i].g[k];
	}
	if (comm && comm->tp_size > 1) {
		int r = comm->sum_f64(comm->state, DLT_GROUP_TP, &sq_shard, 1);
		if (r)
			return r;
		sq += sq_shard;
	}
	double norm = sqrt(sq);
	float c = m->o.clip > 0 && norm > m->o.clip ? (float)(m->o.clip / norm) : 1.0f;
	m->adam_t++;
	float lr = learning_rate(&m->o, step);
	float bc1 = 1.0f - powf(0.9f, (float)m->adam_t), bc2 = 1.0f - powf(0.999f, (float)m->adam_t);
	for (size_t i = 0; i < m->n_params; i++) {
		struct dlt_param *p = &m->params[i];
		for (size_t k = 0; k < p->n; k++) {
			float g = p->g[k] * c;
			p->m[k] = 0.9f * p->m[k] + 0.1f * g;
			p->v[k] = 0.999f * p->v[k] + 0.001f * g * g;
			p->p[k] -= lr * (p->m[k] / bc1) / (sqrtf(p->v[k] / bc2) + 1e-8f);
		}
	}
	return 0;
}

static void step_end(struct dlt_linear *l, void *run)
{
	dlt_linear_step_end(l, run);
}

int dlt_model_forward_backward(struct dlt_model *m, struct dlt_run *run, const float *x,
			       const float *target, const float *mask, int rows, double loss_rows,
			       double *loss_sum)
{
	int w = m->o.width, hid = m->hidden, L = m->o.layers, dout = m->o.d_out, r;
	size_t nw = (size_t)rows * w, nh = (size_t)rows * hid;
	run->pass++;

	/* Forward. */
	if ((r = dlt_linear_forward(&m->input, run, x, rows, m->h[0])))
		return r;
	for (int i = 0; i < L; i++) {
		struct dlt_block *b = &m->blocks[i];
		ln_forward(&b->ln, m->h[i], rows, b->ln_out);
		if ((r = dlt_linear_forward(&b->fc1, run, b->ln_out, rows, b->pre)))
			return r;
		gelu_forward(b->pre, nh, b->act, b->tmp);
		if ((r = dlt_linear_forward(&b->fc2, run, b->act, rows, m->h[i + 1])))
			return r;
		for (size_t k = 0; k < nw; k++)
			m->h[i + 1][k] += m->h[i][k];
	}
	ln_forward(&m->ln_f, m->h[L], rows, m->z);
	if ((r = dlt_linear_forward(&m->output, run, m->z, rows, m->y)))
		return r;

	/* Loss: mean squared error over the rows the mask keeps (of the whole batch). */
	double n = loss_rows, sum = 0;
	float inv = n > 0 ? (float)(2.0 / (n * dout)) : 0.0f;
	for (int i = 0; i < rows; i++)
		for (int o = 0; o < dout; o++) {
			size_t k = (size_t)i * dout + o;
			float e = mask[i] != 0.0f ? m->y[k] - target[k] : 0.0f;
			sum += (double)e * e;
			m->dy[k] = inv * e;
		}
	*loss_sum = sum;

	/* Backward. */
	/* LayerNorm's parameter gradients accumulate over rows; a Linear's wgrad overwrites. */
	for (int i = 0; i <= L; i++) {
		struct dlt_layernorm *ln = i < L ? &m->blocks[i].ln : &m->ln_f;
		memset(ln->dgamma, 0, (size_t)w * sizeof(float));
		memset(ln->dbeta, 0, (size_t)w * sizeof(float));
	}
	if ((r = dlt_linear_backward(&m->output, run, m->dy, m->dz)))
		return r;
	ln_backward(&m->ln_f, m->dz, rows, m->dh);
	for (int i = L - 1; i >= 0; i--) {
		struct dlt_block *b = &m->blocks[i];
		if ((r = dlt_linear_backward(&b->fc2, run, m->dh, m->dhid)))
			return r;
		gelu_backward(b->pre, b->tmp, m->dhid, nh, m->dhid2);
		if ((r = dlt_linear_backward(&b->fc1, run, m->dhid2, m->dz)))
			return r;
		ln_backward(&b->ln, m->dz, rows, m->dz);
		for (size_t k = 0; k < nw; k++)
			m->dh[k] += m->dz[k];
	}
	return dlt_linear_backward(&m->input, run, m->dh, NULL);
}

int dlt_model_update(struct dlt_model *m, struct dlt_run *run)
{
	int r = optimizer_step(m, run->comm, run->step);
	if (!r)
		dlt_model_each_linear(m, step_end, run);
	return r;
}

int dlt_model_train_step(struct dlt_model *m, struct dlt_run *run, const float *x,
			 const float *target, const float *mask, int rows, double *loss)
{
	double n = 0, sum;
	for (int i = 0; i < rows; i++)
		n += mask[i] != 0.0f;
	int r = dlt_model_forward_backward(m, run, x, target, mask, rows, n, &sum);
	if (r)
		return r;
	*loss = n > 0 ? sum / (n * m->o.d_out) : 0.0;
	return dlt_model_update(m, run);
}

/* The parameters' gradients into (add false) or onto (add true) the flat buffer m->gacc, in
 * parameter order; `back` copies them from it instead. */
static void grads_flat(struct dlt_model *m, bool add, bool back)
{
	float *f = m->gacc;
	for (size_t i = 0; i < m->n_params; i++) {
		float *g = m->params[i].g;
		size_t n = m->params[i].n;
		if (back)
			memcpy(g, f, n * sizeof *g);
		else if (!add)
			memcpy(f, g, n * sizeof *g);
		else
			for (size_t k = 0; k < n; k++)
				f[k] += g[k];
		f += n;
	}
}

/* Delayed scaling across ranks: every rank's amax of this step is the world's maximum, as
 * TransformerEngine reduces amaxes over its FP8 group, so that the scales stay the same on every
 * rank (data parallel) and are those of the whole tensor (a TP shard). */
struct amax_walk {
	float *v;
	size_t n;
	bool put;
};

static void amax_each(struct dlt_linear *l, void *arg)
{
	struct amax_walk *a = arg;
	for (int t = 0; t < DLT_N_OPERANDS; t++) {
		float *slot = &l->op[t].meta.history[l->op[t].meta.pos];
		if (a->put)
			*slot = a->v[a->n];
		else
			a->v[a->n] = *slot;
		a->n++;
	}
}

static int amax_reduce(struct dlt_model *m, struct dlt_run *run)
{
	const struct dlt_comm *c = run->comm;
	if (!c || c->size == 1 || run->precision != DLT_FP8 ||
	    run->recipe.scaling != DLT_SCALING_DELAYED)
		return 0;
	size_t n = (2 + 2 * (size_t)m->o.layers) * DLT_N_OPERANDS;
	struct amax_walk a = {.v = malloc(n * sizeof(float))};
	if (!a.v)
		return -ENOMEM;
	dlt_model_each_linear(m, amax_each, &a);
	int r = c->max(c->state, DLT_GROUP_WORLD, a.v, n);
	a.n = 0;
	a.put = true;
	if (!r)
		dlt_model_each_linear(m, amax_each, &a);
	free(a.v);
	return r;
}

int dlt_model_train_step_split(struct dlt_model *m, struct dlt_run *run, const float *x,
			       const float *target, const float *mask, int rows, int micro,
			       double *loss)
{
	const struct dlt_comm *c = run->comm;
	int dp = c ? c->dp_size : 1, dr = c ? c->dp_rank : 0, d_in = m->o.d_in, dout = m->o.d_out;
	int first = (int)((int64_t)rows * dr / dp), shard = (int)((int64_t)rows * (dr + 1) / dp) - first;
	double n = 0, sum = 0, piece_sum;
	int r = 0;
	if (micro < 1 || shard < micro)
		return -EINVAL;
	if (!m->gacc && !(m->gacc = malloc(m->n_grads * sizeof *m->gacc)))
		return -ENOMEM;
	for (int i = 0; i < rows; i++)
		n += mask[i] != 0.0f;
	for (int k = 0; k < micro && !r; k++) {
		int lo = first + (int)((int64_t)shard * k / micro);
		int hi = first + (int)((int64_t)shard * (k + 1) / micro);
		r = dlt_model_forward_backward(m, run, x + (size_t)lo * d_in, target + (size_t)lo * dout,
					       mask + lo, hi - lo, n, &piece_sum);
		sum = k ? sum + piece_sum : piece_sum;
		if (!r)
			grads_flat(m, k > 0, false);
	}
	/* The data-parallel ranks' gradients (and losses) added in rank order: the sums a single
	 * process makes when it takes the same pieces as microbatches. */
	if (!r && dp > 1)
		r = c->sum(c->state, DLT_GROUP_DP, m->gacc, m->n_grads);
	if (!r && dp > 1)
		r = c->sum_f64(c->state, DLT_GROUP_DP, &sum, 1);
	if (!r)
		grads_flat(m, false, true);
	if (!r)
		r = amax_reduce(m, run);
	if (r)
		return r;
	*loss = n > 0 ? sum / (n * dout) : 0.0;
	return dlt_model_update(m, run);
}

uint64_t dlt_model_hash(const struct dlt_model *m)
{
	uint64_t h = 0xcbf29ce484222325ull;
	for (size_t i = 0; i < m->n_params; i++) {
		const unsigned char *b = (const unsigned char *)m->params[i].p;
		for (size_t k = 0; k < m->params[i].n * sizeof(float); k++) {
			h ^= b[k];
			h *= 0x100000001b3ull;
		}
	}
	return h;
}
