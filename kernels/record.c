/* The sufficient-statistics record: its empty value, its exact merge, and the statistics it
 * finalizes to (docs/statistics.md). Shared by the CPU passes, the CUDA backend's host side and
 * the core's step-end finalization. */
#include <math.h>
#include <string.h>

#include "kernels-private.h"

void dli_stats_record_init(struct dli_stats_record *r)
{
	memset(r, 0, sizeof(*r));
	r->min = INFINITY;
	r->max = -INFINITY;
	r->min_nonzero_abs = INFINITY;
	r->scale_inv_min = INFINITY;
}

/* Extrema combine with plain comparisons: the record keeps NaNs out of them (nan_count says a NaN
 * was seen), so fmin/fmax's NaN rules never come into play. */
static double lesser(double a, double b)
{
	return b < a ? b : a;
}

static double greater(double a, double b)
{
	return b > a ? b : a;
}

void dli_stats_add_fp8_terms(struct dli_stats_record *into, const struct dli_stats_record *from)
{
	into->fp8_count += from->fp8_count;
	into->underflows += from->underflows;
	into->overflows += from->overflows;
	into->err_sq += from->err_sq;
	into->dot += from->dot;
	into->dq_sq += from->dq_sq;
	into->x_sq += from->x_sq;
}

void dli_stats_merge(struct dli_stats_record *into, const struct dli_stats_record *from)
{
	uint64_t na = into->count, nb = from->count;

	/* Chan et al.'s pairwise update: exact in real arithmetic and free of the cancellation of
	 * sum_sq - n * mean^2, so a large mean with a small spread keeps its variance. An empty side
	 * leaves the other untouched (bit for bit), which makes the empty record a true identity. */
	if (nb == 0) {
		/* nothing: keep into's mean and m2 */
	} else if (na == 0) {
		into->mean = from->mean;
		into->m2 = from->m2;
	} else {
		double n = (double)na + (double)nb;
		double delta = from->mean - into->mean;
		into->mean += delta * ((double)nb / n);
		into->m2 += from->m2 + delta * delta * ((double)na * ((double)nb / n));
	}
	into->count = na + nb;
	into->nan_count += from->nan_count;
	into->inf_count += from->inf_count;
	into->zero_count += from->zero_count;
	into->min = lesser(into->min, from->min);
	into->max = greater(into->max, from->max);
	into->amax = greater(into->amax, from->amax);
	into->min_nonzero_abs = lesser(into->min_nonzero_abs, from->min_nonzero_abs);
	into->sum += from->sum;
	into->sum_abs += from->sum_abs;
	into->sum_sq += from->sum_sq;

	dli_stats_add_fp8_terms(into, from);
	into->scale_inv_min = lesser(into->scale_inv_min, from->scale_inv_min);
	into->scale_inv_max = greater(into->scale_inv_max, from->scale_inv_max);
}

/* 100 * part / whole, NaN for an empty whole (nothing divides by zero silently into a 0%). */
static double percent(uint64_t part, uint64_t whole)
{
	return whole ? 100.0 * (double)part / (double)whole : NAN;
}

/* The passes leave NaN and infinite x out of the FP8 terms (fp8_count counts the finite elements
 * compared), and a record that compared counts the NaN and infinite elements it left out
 * (nan_count, inf_count): the pass that did both, and the comparison with a host's copy, whose
 * record takes hp's element counts when hp holds non-finite values (core/stats.c). Those are put
 * back here, so that the CPU and CUDA passes agree: an infinity saturates to the format's max (an
 * overflow) and makes mse infinite, as TransformerEngine reports; a NaN is neither an under- nor
 * an overflow, but counts in n, the denominator of the percentages (docs/features.md). The sum
 * fp8_count + nan_count + inf_count, not count, is the extent: a clean host copy's record has no
 * element counts (sparing hp a pass), so count alone would drop the non-finite elements of the
 * other microbatches or ranks merged with it. *n is the elements compared, *infs the infinities
 * among them. */
static void fp8_extent(const struct dli_stats_record *r, uint64_t *n, uint64_t *infs)
{
	bool compared = r->fp8_count > 0 || r->scale_inv_max > 0; /* an FP8 pass ran */

	*n = compared ? r->fp8_count + r->nan_count + r->inf_count : r->fp8_count;
	*infs = compared ? r->inf_count : 0;
}

double dli_stats_value(const struct dli_stats_record *r, enum dli_stat stat)
{
	bool empty = r->count == 0, nan_seen = r->nan_count > 0;
	bool no_fp8 = r->fp8_count == 0;
	uint64_t fp8_n, fp8_infs;

	fp8_extent(r, &fp8_n, &fp8_infs);

	switch (stat) {
	case DLI_STAT_MIN:
		return empty || nan_seen ? NAN : r->min;
	case DLI_STAT_MAX:
		return empty || nan_seen ? NAN : r->max;
	case DLI_STAT_MEAN:
		return empty ? NAN : r->sum / (double)r->count;
	case DLI_STAT_VAR:
		return r->count < 2 ? NAN : r->m2 / (double)(r->count - 1);
	case DLI_STAT_STD:
		return r->count < 2 ? NAN : sqrt(r->m2 / (double)(r->count - 1));
	case DLI_STAT_L1_NORM:
		return empty ? NAN : r->sum_abs;
	case DLI_STAT_L2_NORM:
		return empty ? NAN : sqrt(r->sum_sq);
	case DLI_STAT_CUR_AMAX:
		return empty || nan_seen ? NAN : r->amax;
	case DLI_STAT_DYNAMIC_RANGE:
		if (empty || nan_seen)
			return NAN;
		/* All zeros: log2(0) - log2(no nonzero minimum), which TransformerEngine logs as inf. */
		if (r->amax == 0)
			return INFINITY;
		return log2(r->amax) - log2(r->min_nonzero_abs);
	case DLI_STAT_NAN_COUNT:
		return (double)r->nan_count;
	case DLI_STAT_INF_COUNT:
		return (double)r->inf_count;
	case DLI_STAT_ZERO_PCT:
		return percent(r->zero_count, r->count);
	case DLI_STAT_UNDERFLOWS_PCT:
		return percent(r->underflows, fp8_n);
	case DLI_STAT_OVERFLOWS_PCT:
		return percent(r->overflows + fp8_infs, fp8_n);
	case DLI_STAT_SCALE_INV_MIN:
		/* +inf means no nonzero scale_inv was seen. */
		return isinf(r->scale_inv_min) ? NAN : r->scale_inv_min;
	case DLI_STAT_SCALE_INV_MAX:
		/* The init value 0 with nothing nonzero seen is indistinguishable from "never seen";
		 * a zero scale_inv is meaningless anyway, so both read as NaN. */
		return isinf(r->scale_inv_min) && r->scale_inv_max == 0 ? NAN : r->scale_inv_max;
	case DLI_STAT_MSE:
		if (fp8_infs)
			return INFINITY;
		return no_fp8 ? NAN : r->err_sq / (double)r->fp8_count;
	case DLI_STAT_COS_SIM:
		/* An infinite x has no direction to compare (numpy gives inf / inf). Two square
		 * roots rather than the root of a product, which could overflow. */
		if (fp8_infs)
			return NAN;
		return no_fp8 ? NAN : r->dot / (sqrt(r->x_sq) * sqrt(r->dq_sq));
	case DLI_STAT_SQNR_DB:
		if (no_fp8 || fp8_infs)
			return NAN;
		/* A lossless quantization has an infinite signal-to-noise ratio. */
		if (r->err_sq == 0)
			return INFINITY;
		return 10.0 * log10(r->x_sq / r->err_sq);
	case DLI_STAT_COUNT:
		break;
	}
	return NAN;
}

static const char *const stat_names[DLI_STAT_COUNT] = {
	[DLI_STAT_MIN] = "min",
	[DLI_STAT_MAX] = "max",
	[DLI_STAT_MEAN] = "mean",
	[DLI_STAT_STD] = "std",
	[DLI_STAT_VAR] = "var",
	[DLI_STAT_L1_NORM] = "l1_norm",
	[DLI_STAT_L2_NORM] = "l2_norm",
	[DLI_STAT_CUR_AMAX] = "cur_amax",
	[DLI_STAT_DYNAMIC_RANGE] = "dynamic_range",
	[DLI_STAT_NAN_COUNT] = "nan_count",
	[DLI_STAT_INF_COUNT] = "inf_count",
	[DLI_STAT_ZERO_PCT] = "zero%",
	[DLI_STAT_UNDERFLOWS_PCT] = "underflows%",
	[DLI_STAT_OVERFLOWS_PCT] = "overflows%",
	[DLI_STAT_SCALE_INV_MIN] = "scale_inv_min",
	[DLI_STAT_SCALE_INV_MAX] = "scale_inv_max",
	[DLI_STAT_MSE] = "mse",
	[DLI_STAT_COS_SIM] = "cos_sim",
	[DLI_STAT_SQNR_DB] = "sqnr_db",
};

const char *dli_stat_name(enum dli_stat stat)
{
	if ((unsigned)stat >= DLI_STAT_COUNT)
		return NULL;
	return stat_names[stat];
}

int dli_stat_from_name(const char *name)
{
	if (!name)
		return -1;
	for (int i = 0; i < DLI_STAT_COUNT; i++)
		if (!strcmp(stat_names[i], name))
			return i;
	return -1;
}
