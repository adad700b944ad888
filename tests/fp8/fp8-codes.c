/* The FP8 cast as a filter for the interop test: reads raw float32 or bfloat16 values from a file
 * and writes one code per value, through dli_fp8_encode or one path of the quantize pass. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels-private.h"
#include "cpu/fp8-private.h"
#include "raw-io.h"

int main(int argc, char **argv)
{
	enum dli_dtype dt, format;
	struct dli_cpu_options o = { DLI_SIMD_SCALAR, 1 };
	bool per_element = false;
	size_t size = 0;
	int64_t n;
	void *in;
	uint8_t *out = NULL;
	FILE *f;
	int rc = 0;
	int status = 0;

	if (argc != 6) {
		fprintf(stderr, "usage: %s f32|bf16 e4m3|e5m2 encode|scalar|avx2|avx512 IN OUT\n",
			argv[0]);
		return 2;
	}
	dt = strcmp(argv[1], "bf16") == 0 ? DLI_DTYPE_BF16 : DLI_DTYPE_F32;
	format = strcmp(argv[2], "e5m2") == 0 ? DLI_DTYPE_F8E5M2 : DLI_DTYPE_F8E4M3;
	if (strcmp(argv[3], "encode") == 0)
		per_element = true;
	else if (strcmp(argv[3], "avx2") == 0)
		o.simd = DLI_SIMD_AVX2;
	else if (strcmp(argv[3], "avx512") == 0)
		o.simd = DLI_SIMD_AVX512;
	in = read_all(argv[4], &size);
	if (!in) {
		fprintf(stderr, "%s: cannot read %s\n", argv[0], argv[4]);
		return 2;
	}
	n = (int64_t)(size / dli_dtype_size(dt));
	out = malloc((size_t)n + 1);
	if (!out) {
		status = 2;
		goto out;
	}
	if (per_element) {
		for (int64_t i = 0; i < n; i++) {
			float x;
			if (dt == DLI_DTYPE_F32) {
				memcpy(&x, (const char *)in + 4 * i, 4);
			} else {
				uint16_t h;
				uint32_t u;
				memcpy(&h, (const char *)in + 2 * i, 2);
				u = (uint32_t)h << 16;
				memcpy(&x, &u, 4);
			}
			out[i] = dli_fp8_encode(x, format);
		}
	} else {
		rc = dli_cpu_fp8_quantize(in, dt, n, format, 1.0f, &o, out);
		if (rc == -ENOTSUP) {
			/* A skip, not a failure: and one that frees what it took, or LeakSanitizer fails it. */
			fprintf(stderr, "%s: %s not on this CPU\n", argv[0], argv[3]);
			status = 77;
			goto out;
		}
	}
	f = fopen(argv[5], "wb");
	if (rc < 0 || !f || fwrite(out, 1, (size_t)n, f) != (size_t)n || fclose(f) != 0) {
		fprintf(stderr, "%s: failed (%d)\n", argv[0], rc);
		status = 2;
	}
out:
	free(in);
	free(out);
	return status;
}
