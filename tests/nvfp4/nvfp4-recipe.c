/* The NVFP4 recipe options as a filter for interop-recipe.py: the random bits of a seed, the
 * stochastic E2M1 encode, the Hadamard transform of a matrix, and dli_block_fake_quant (the public
 * call) with stochastic rounding and the transform. Raw little-endian arrays in and out. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <dlinspect/dlinspect.h>
#include <dlinspect/stats.h>

#include "cpu/nvfp4-recipe-private.h"
#include "raw-io.h"

static int usage(const char *argv0)
{
	fprintf(stderr,
		"usage: %s rbits SEED N OUT\n"
		"       %s encode-sr S_F32 RBITS_U8 OUT_CODES\n"
		"       %s rht f32|bf16 row|col ROWS COLS SIGNS fwd|inv IN OUT\n"
		"       %s fake f32|bf16 row|col|2d ROWS COLS SR SEED RHT RHT_SEED IN OUT\n",
		argv0, argv0, argv0, argv0);
	return 2;
}

int main(int argc, char **argv)
{
	void *in = NULL, *aux = NULL, *out = NULL;
	size_t size = 0, asize = 0;
	int r = 0;

	if (argc < 2)
		return usage(argv[0]);
	if (!strcmp(argv[1], "rbits") && argc == 5) {
		uint64_t seed = strtoull(argv[2], NULL, 0);
		size_t n = strtoull(argv[3], NULL, 10);
		uint8_t *b = malloc(n + 1);
		if (!b)
			return 1;
		for (size_t i = 0; i < n; i++)
			b[i] = dli_nvfp4_rbits(seed, i);
		r = write_all(argv[4], b, n);
		free(b);
		printf("signs %" PRIu32 "\n", dli_nvfp4_rht_signs(seed));
		return r ? 1 : 0;
	}
	if (!strcmp(argv[1], "encode-sr") && argc == 5) {
		if (!(in = read_all(argv[2], &size)) || !(aux = read_all(argv[3], &asize)) ||
		    asize * 4 != size || !(out = malloc(asize + 1))) {
			fprintf(stderr, "%s: bad inputs\n", argv[0]);
			r = -EINVAL;
		}
		for (size_t i = 0; !r && i < asize; i++)
			((uint8_t *)out)[i] =
			    dli_nvfp4_encode_sr(((float *)in)[i], ((uint8_t *)aux)[i]);
		if (!r)
			r = write_all(argv[4], out, asize);
		goto done;
	}
	bool bf16 = argc > 2 && !strcmp(argv[2], "bf16");
	enum dli_dtype dt = bf16 ? DLI_DTYPE_BF16 : DLI_DTYPE_F32;
	if (!strcmp(argv[1], "rht") && argc == 10) {
		int64_t rows = strtoll(argv[4], NULL, 10), cols = strtoll(argv[5], NULL, 10);
		uint32_t signs = (uint32_t)strtoul(argv[6], NULL, 0);
		if (!(in = read_all(argv[8], &size)) ||
		    size != (size_t)(rows * cols) * (bf16 ? 2 : 4) ||
		    !(out = malloc((size_t)(rows * cols) * 4 + 1))) {
			fprintf(stderr, "%s: bad input\n", argv[0]);
			r = -EINVAL;
			goto done;
		}
		r = dli_cpu_nvfp4_rht(in, dt, rows, cols, !strcmp(argv[3], "col"), signs,
				      !strcmp(argv[7], "inv"), out);
		if (!r)
			r = write_all(argv[9], out, (size_t)(rows * cols) * 4);
		goto done;
	}
	if (!strcmp(argv[1], "fake") && argc == 12) {
		int64_t rows = strtoll(argv[4], NULL, 10), cols = strtoll(argv[5], NULL, 10);
		struct dli_block_spec spec = {
			.size = sizeof(spec),
			.recipe = !strcmp(argv[3], "2d") ? DLI_BLOCK_NVFP4_2D : DLI_BLOCK_NVFP4,
			.columnwise = !strcmp(argv[3], "col"),
			.stochastic_rounding = atoi(argv[6]),
			.seed = strtoull(argv[7], NULL, 0),
			.rht = atoi(argv[8]),
			.rht_seed = strtoull(argv[9], NULL, 0),
		};
		if (!(in = read_all(argv[10], &size)) ||
		    size != (size_t)(rows * cols) * (bf16 ? 2 : 4) ||
		    !(out = malloc((size_t)(rows * cols) * 4 + 1))) {
			fprintf(stderr, "%s: bad input\n", argv[0]);
			r = -EINVAL;
			goto done;
		}
		struct dli_tensor ti = { .data = in,
					 .dtype = dt,
					 .ndim = 2,
					 .shape = { rows, cols },
					 .contiguous = true };
		struct dli_tensor to = ti;
		to.data = out;
		to.dtype = DLI_DTYPE_F32;
		r = dli_block_fake_quant(&ti, &to, &spec);
		if (!r)
			r = write_all(argv[11], out, (size_t)(rows * cols) * 4);
		goto done;
	}
	return usage(argv[0]);
done:
	if (r)
		fprintf(stderr, "%s %s: error %d\n", argv[0], argv[1], r);
	free(in);
	free(aux);
	free(out);
	return r ? 1 : 0;
}
