/* NVFP4 as a filter for the interop test: reads a rows x cols matrix of raw float32 or bfloat16
 * values and writes, through the kernels' NVFP4 passes, the E2M1 codes (one a byte), the padded
 * E4M3 scales and the tensor's amax (quantize), the dequantized float32 values (fake), or the
 * compare pass's terms as text (compare). */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels-private.h"
#include "raw-io.h"

int main(int argc, char **argv)
{
	struct dli_cpu_options o = { DLI_SIMD_AUTO, 0 };
	enum dli_dtype dt;
	int64_t rows, cols, srows, scols;
	bool colwise;
	int dims;
	size_t size = 0;
	void *in = NULL, *q = NULL, *s = NULL;
	float amax = 0.0f;
	int r = 0;

	if (argc < 7) {
		fprintf(stderr, "usage: %s f32|bf16 row|col|2d ROWS COLS quantize|fake|compare IN "
				"[OUT [OUT_SCALES OUT_AMAX]] [threads]\n",
			argv[0]);
		return 2;
	}
	dt = strcmp(argv[1], "bf16") == 0 ? DLI_DTYPE_BF16 : DLI_DTYPE_F32;
	colwise = strcmp(argv[2], "col") == 0;
	dims = strcmp(argv[2], "2d") == 0 ? 2 : 1;
	rows = strtoll(argv[3], NULL, 10);
	cols = strtoll(argv[4], NULL, 10);
	if (!(in = read_all(argv[6], &size)) || size != (size_t)(rows * cols) * dli_dtype_size(dt)) {
		fprintf(stderr, "%s: cannot read %s, or its size is not ROWS x COLS\n", argv[0], argv[6]);
		free(in);
		return 2;
	}
	dli_nvfp4_scale_shape(rows, cols, colwise, &srows, &scols);
	if (!strcmp(argv[5], "quantize") && argc >= 10) {
		q = malloc((size_t)(rows * cols) + 1);
		s = malloc((size_t)(srows * scols) + 1);
		if (!q || !s)
			r = -ENOMEM;
		if (!r)
			r = dli_cpu_nvfp4_quantize(in, dt, rows, cols, dims, colwise, &o, q, s, &amax);
		if (!r)
			r = write_all(argv[7], q, (size_t)(rows * cols));
		if (!r)
			r = write_all(argv[8], s, (size_t)(srows * scols));
		if (!r)
			r = write_all(argv[9], &amax, sizeof(amax));
	} else if (!strcmp(argv[5], "fake") && argc >= 8) {
		q = malloc((size_t)(rows * cols) * sizeof(float) + 1);
		r = q ? dli_cpu_nvfp4_fake_quantize(in, dt, rows, cols, dims, colwise, &o, q)
		      : -ENOMEM;
		if (!r)
			r = write_all(argv[7], q, (size_t)(rows * cols) * sizeof(float));
	} else if (!strcmp(argv[5], "compare")) {
		struct dli_stats_record rec;
		if (argc >= 8)
			o.threads = atoi(argv[7]);
		r = dli_cpu_nvfp4_compare(in, dt, rows, cols, dims, colwise, &o, &rec);
		if (!r)
			printf("%" PRIu64 " %" PRIu64 " %" PRIu64 " %.17g %.17g %.17g %.17g\n",
			       rec.fp8_count, rec.underflows, rec.overflows, rec.err_sq, rec.dot,
			       rec.dq_sq, rec.x_sq);
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
