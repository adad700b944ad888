/* A dlinspect run for the TensorBoard histogram interop test: the real LogTensorStats with
 * `stats: [max, nan_count, histogram]` on two layers, the file and tensorboard loggers, STEPS steps
 * of known data (the activation in two f32 microbatches, the gradient as one bf16 tensor). Every
 * value it hands over is appended, as little-endian f32, to
 * {LOG_DIR}/data/{layer}_{tensor}_{step:06d}.f32, for check_lts_histogram.py's numpy reference.
 * Usage: tb_lts_driver LOG_DIR STEPS */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <dlinspect/dlinspect.h>

static const char *const layers[] = {
	"model.layers.0.self_attention.proj",
	"model.layers.1.mlp.fc1",
};

static const char yaml[] =
	"extensions: [transformer_engine, file, tensorboard]\n"
	"hist:\n"
	"  enabled: true\n"
	"  layers: {layer_name_regex_pattern: '.*'}\n"
	"  transformer_engine:\n"
	"    LogTensorStats:\n"
	"      enabled: true\n"
	"      tensors: [activation, gradient]\n"
	"      stats: [max, nan_count, histogram]\n"
	"loggers: {file: {}, tensorboard: {}}\n";

static uint64_t rng;

static double uniform(void)
{
	rng = rng * 6364136223846793005ull + 1442695040888963407ull;
	return (double)(rng >> 11) / 9007199254740992.0;
}

/* A training-like spread at a scale set by the step, a tail of wide magnitudes (subnormals to
 * 1e30), and the special values now and then. */
static void fill(float *x, size_t n, int step)
{
	double scale = exp2(4 * step - 6);
	for (size_t i = 0; i < n; i++) {
		double u = uniform();
		if (u < 0.8)
			x[i] = (float)(scale * (uniform() + uniform() + uniform() - 1.5));
		else
			x[i] = (float)((uniform() < 0.5 ? -1 : 1) * exp2(-149 + 248 * uniform()));
	}
	static const float specials[] = {0.0f, -0.0f, INFINITY, -INFINITY, NAN, 0x1p-149f, -1e-12f};
	for (size_t i = 0; i < sizeof specials / sizeof specials[0]; i++)
		if ((i + (size_t)step) % 3 == 0)
			x[(i * 131) % n] = specials[i];
}

static int save(const char *dir, const char *layer, const char *tensor, int step, const float *x,
		size_t n)
{
	char path[4096];
	snprintf(path, sizeof path, "%s/data/%s_%s_%06d.f32", dir, layer, tensor, step);
	FILE *f = fopen(path, "ab");
	if (!f || fwrite(x, sizeof *x, n, f) != n) {
		perror(path);
		if (f)
			fclose(f);
		return -1;
	}
	return fclose(f);
}

static struct dli_tensor tensor(void *x, enum dli_dtype dt, int64_t n)
{
	return (struct dli_tensor){.data = x, .dtype = dt, .ndim = 1, .shape = {n}, .contiguous = true};
}

int main(int argc, char **argv)
{
	enum { N1 = 5000, N2 = 3001, NG = 4096 };
	static float a1[N1], a2[N2], g[NG];
	static uint16_t g16[NG];
	struct dli_options o;
	struct dli_context *ctx;
	struct dli_error err;
	struct dli_layer *l[2];
	char data_dir[4096];
	int rc = 0;

	if (argc < 3) {
		fprintf(stderr, "usage: %s LOG_DIR STEPS\n", argv[0]);
		return 2;
	}
	snprintf(data_dir, sizeof data_dir, "%s/data", argv[1]);
	mkdir(data_dir, 0777);
	dli_options_init(&o);
	o.config_yaml = yaml;
	o.log_dir = argv[1];
	if (dli_init(&o, &ctx, &err) != 0) {
		fprintf(stderr, "dli_init: %s\n", err.message);
		return 1;
	}
	for (int i = 0; i < 2; i++) {
		if (dli_layer_get(ctx, layers[i], &l[i], &err) != 0) {
			fprintf(stderr, "dli_layer_get: %s\n", err.message);
			dli_destroy(ctx);
			return 1;
		}
	}
	int steps = atoi(argv[2]);
	for (int s = 0; s < steps && !rc; s++) {
		for (int i = 0; i < 2 && !rc; i++) {
			rng = (uint64_t)(s * 2 + i + 1);
			fill(a1, N1, s);
			fill(a2, N2, s + i);
			fill(g, NG, s - 2);
			for (size_t k = 0; k < NG; k++) {
				uint32_t b;
				memcpy(&b, &g[k], 4);
				g16[k] = (uint16_t)(b >> 16);
				b = (uint32_t)g16[k] << 16;
				memcpy(&g[k], &b, 4); /* what the bf16 tensor holds */
			}
			struct dli_tensor t1 = tensor(a1, DLI_DTYPE_F32, N1);
			struct dli_tensor t2 = tensor(a2, DLI_DTYPE_F32, N2);
			struct dli_tensor tg = tensor(g16, DLI_DTYPE_BF16, NG);
			if (dli_inspect_tensor(l[i], DLI_TENSOR_ACTIVATION, &t1, NULL, NULL) ||
			    dli_inspect_tensor(l[i], DLI_TENSOR_ACTIVATION, &t2, NULL, NULL) ||
			    dli_inspect_tensor(l[i], DLI_TENSOR_GRADIENT, &tg, NULL, NULL)) {
				fprintf(stderr, "dli_inspect_tensor failed\n");
				rc = 1;
			}
			rc = rc || save(argv[1], layers[i], "activation", s, a1, N1) ||
			     save(argv[1], layers[i], "activation", s, a2, N2) ||
			     save(argv[1], layers[i], "gradient", s, g, NG);
		}
		dli_step(ctx);
	}
	dli_destroy(ctx);
	return rc;
}
