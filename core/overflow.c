/* dli_detect_overflow: Hugging Face's detect_overflow for any point of a host's forward, on the
 * statistics pass (one read of the tensor), with or without a config. */
#include <math.h>
#include <stdio.h>

#include "context-private.h"
#include "diagnose-private.h"
#include "messages-private.h"
#include "stats-private.h"

bool dli_detect_overflow(struct dli_context *ctx, const struct dli_tensor *t, const char *where)
{
	if (!ctx || !t)
		return false;
	/* A fresh accumulator, not a shared one: concurrent calls must not see each other's counts.
	 * One allocation next to a full read of the tensor. */
	struct dli_stats_acc *acc = dli_stats_acc_create(ctx);
	struct dli_stats_record rec;
	if (!acc) {
		dli_log(ctx, DLI_LOG_ERROR, "dli_detect_overflow at '%s': out of memory; the tensor "
					    "is not checked", where ? where : "");
		return false;
	}
	/* An unreadable tensor was reported by the statistics (one line naming why). */
	bool found = dli_stats_add(acc, t, NULL) == 0 &&
		     dli_stats_acc_read_sized(acc, &rec, sizeof rec) == 0 &&
		     (rec.nan_count || rec.inf_count);
	dli_stats_acc_destroy(acc);
	if (!found)
		return false;
	char desc[160];
	dli_tensor_describe(desc, sizeof desc, t);
	/* abs-min and abs-max over the non-NaN elements: HF's pair, which shows how far the rest of
	 * the tensor had grown (abs-max inf when an infinity is there). */
	double abs_min = rec.zero_count ? 0.0 : rec.min_nonzero_abs;
	dli_log(ctx, DLI_LOG_WARNING,
		"detect_overflow: '%s' at iteration %lld: %s holds %llu NaN and %llu inf of %llu "
		"elements; abs-min %.9g, abs-max %.9g over the non-NaN ones",
		where ? where : "", (long long)ctx->iteration, desc,
		(unsigned long long)rec.nan_count, (unsigned long long)rec.inf_count,
		(unsigned long long)rec.count, rec.nan_count == rec.count ? NAN : abs_min,
		rec.nan_count == rec.count ? NAN : rec.amax);
	return true;
}
