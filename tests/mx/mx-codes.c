/* MXFP8 as a filter for the interop test: reads a rows x cols matrix of raw float32 or bfloat16
 * values and writes, through the kernels' MXFP8 passes, the codes and padded E8M0 scales
 * (quantize), the dequantized float32 values (fake), or the compare pass's FP8 terms as text
 * (compare; compare-sq given the statistics pass's sum of x^2, as the statistics feature runs
 * it). */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels-private.h"
#include "raw-io.h"

/* The statistics pass's sum of x^2, NaN where the input holds NaN or an infinity (core/stats.c). */
static double sum_sq_of(const void *in, enum dli_dtype dt, int64_t n)
{
	struct dli_stats_record st;
	if (dli_cpu_stats(in, dt, n, NULL, &st) || st.nan_count || st.inf_count)
		return NAN;
	return st.sum_sq;
}

int main(int argc, char **argv)
{
	struct dli_cpu_options o = { DLI_SIMD_AUTO, 0 };
	enum dli_dtype dt, format;
	int64_t rows, cols, srows, scols;
	bool colwise;
	size_t size = 0;
	void *in = NULL, *q = NULL, *s = NULL;
	int r = 0;

	if (argc < 8) {
		fprintf(stderr, "usage: %s f32|bf16 e4m3|e5m2 row|col|2d ROWS COLS "
				"quantize|fake|compare[-sq]|fb-fake|fb-compare[-sq] IN "
				"[OUT [OUT_SCALES]] [threads]\n",
			argv[0]);
		return 2;
	}
	dt = strcmp(argv[1], "bf16") == 0 ? DLI_DTYPE_BF16 : DLI_DTYPE_F32;
	format = strcmp(argv[2], "e5m2") == 0 ? DLI_DTYPE_F8E5M2 : DLI_DTYPE_F8E4M3;
	colwise = strcmp(argv[3], "col") == 0;
	rows = strtoll(argv[4], NULL, 10);
	cols = strtoll(argv[5], NULL, 10);
	if (!(in = read_all(argv[7], &size)) || size != (size_t)(rows * cols) * dli_dtype_size(dt)) {
		fprintf(stderr, "%s: cannot read %s, or its size is not ROWS x COLS\n", argv[0], argv[7]);
		free(in);
		return 2;
	}
	dli_mx_scale_shape(rows, cols, colwise, &srows, &scols);
	if (!strcmp(argv[6], "quantize") && argc >= 10) {
		q = malloc((size_t)(rows * cols) + 1);
		s = malloc((size_t)(srows * scols) + 1);
		if (!q || !s)
			r = -ENOMEM;
		if (!r)
			r = dli_cpu_mx_quantize(in, dt, rows, cols, format, colwise, &o, q, s);
		if (!r)
			r = write_all(argv[8], q, (size_t)(rows * cols));
		if (!r)
			r = write_all(argv[9], s, (size_t)(srows * scols));
	} else if (!strcmp(argv[6], "fake") && argc >= 9) {
		q = malloc((size_t)(rows * cols) * sizeof(float) + 1);
		r = q ? dli_cpu_mx_fake_quantize(in, dt, rows, cols, format, colwise, &o, q) : -ENOMEM;
		if (!r)
			r = write_all(argv[8], q, (size_t)(rows * cols) * sizeof(float));
	} else if (!strcmp(argv[6], "fb-fake") && argc >= 9) {
		/* FP8 block scaling, power-of-two scales: row 1 x 128, col 128 x 1, 2d 128 x 128 */
		int dims = strcmp(argv[3], "2d") ? 1 : 2;
		q = malloc((size_t)(rows * cols) * sizeof(float) + 1);
		r = q ? dli_cpu_fp8b_fake_quantize(in, dt, rows, cols, format, dims, colwise, true,
						   &o, q)
		      : -ENOMEM;
		if (!r)
			r = write_all(argv[8], q, (size_t)(rows * cols) * sizeof(float));
	} else if (!strcmp(argv[6], "fb-compare") || !strcmp(argv[6], "fb-compare-sq")) {
		struct dli_stats_record rec;
		int dims = strcmp(argv[3], "2d") ? 1 : 2;
		double sum_sq = strcmp(argv[6], "fb-compare") ? sum_sq_of(in, dt, rows * cols) : NAN;
		r = dli_cpu_fp8b_compare_sum_sq(in, dt, rows, cols, format, dims, colwise, true,
						sum_sq, &o, &rec);
		if (!r)
			printf("%" PRIu64 " %" PRIu64 " %" PRIu64 " %.17g %.17g %.17g %.17g %.17g %.17g\n",
			       rec.fp8_count, rec.underflows, rec.overflows, rec.err_sq, rec.dot,
			       rec.dq_sq, rec.x_sq, rec.scale_inv_min, rec.scale_inv_max);
	} else if (!strcmp(argv[6], "compare") || !strcmp(argv[6], "compare-sq")) {
		struct dli_stats_record rec;
		double sum_sq = strcmp(argv[6], "compare") ? sum_sq_of(in, dt, rows * cols) : NAN;
		if (argc >= 9)
			o.threads = atoi(argv[8]);
		r = dli_cpu_mx_compare_sum_sq(in, dt, rows, cols, format, colwise, sum_sq, &o, &rec);
		if (!r)
			printf("%" PRIu64 " %" PRIu64 " %" PRIu64 " %.17g %.17g %.17g %.17g %.17g %.17g\n",
			       rec.fp8_count, rec.underflows, rec.overflows, rec.err_sq, rec.dot,
			       rec.dq_sq, rec.x_sq, rec.scale_inv_min, rec.scale_inv_max);
	} else {
		fprintf(stderr, "%s: bad mode or missing output path\n", argv[0]);
		r = -EINVAL;
	}
	if (r)
		fprintf(stderr, "%s: %s\n", argv[0], strerror(-r));
	free(in);
	free(q);
	free(s);
	return r ? 1 : 0;
}
