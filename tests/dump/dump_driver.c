/* A host for DumpTensors' tests (test_dump.py): feeds known tensors through the real core and the
 * module, and writes what it fed, byte for byte, as the reference: OUT/expect/N.bin and one JSON line
 * per expected safetensors entry in OUT/manifest.jsonl. The dumps go to OUT/logs.
 *   dump_driver basic|torch|diskfull|queue|threads|nodir|reload|clash|longtensor|reloadname|tenames OUT
 * Prints one line "rc WHAT VALUE" per call whose result the test checks. */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>

#include <dlinspect/dlinspect.h>

static const char *out_dir;
static FILE *manifest;
static int n_expect;
#include "test-rng.h"

/* Random bytes; for floats, with the special values a dump must keep bit for bit mixed in. */
static void *make_data(size_t bytes, int dtype)
{
	unsigned char *p = malloc(bytes ? bytes : 1);
	if (!p)
		exit(2);
	for (size_t i = 0; i < bytes; i++)
		p[i] = (unsigned char)next_u64();
	if (dtype == DLI_DTYPE_F32 && bytes >= 20) {
		const uint32_t special[] = {0x7fc00001u /* NaN with payload */, 0x7f800000u,
					    0x80000000u /* -0 */, 0x00000001u /* denormal */, 0xff800000u};
		memcpy(p, special, sizeof special);
	}
	return p;
}

static void json_str(FILE *f, const char *s)
{
	fputc('"', f);
	for (const unsigned char *u = (const unsigned char *)s; *u; u++)
		fprintf(f, "%02x", *u);
	fputc('"', f);
}

/* Records that `layer`'s file of `iteration` must hold `key` = these bytes. */
static void expect(const char *layer, int64_t iteration, const char *key, const char *dtype,
		   int ndim, const int64_t *shape, const void *data, size_t bytes)
{
	char path[4096];
	snprintf(path, sizeof path, "%s/expect/%d.bin", out_dir, n_expect++);
	FILE *f = fopen(path, "wb");
	if (!f || (bytes && fwrite(data, 1, bytes, f) != bytes) || fclose(f)) {
		perror(path);
		exit(2);
	}
	fprintf(manifest, "{\"layer_hex\": ");
	json_str(manifest, layer);
	fprintf(manifest, ", \"iteration\": %lld, \"key\": \"%s\", \"dtype\": \"%s\", \"shape\": [",
		(long long)iteration, key, dtype);
	for (int d = 0; d < ndim; d++)
		fprintf(manifest, "%s%lld", d ? ", " : "", (long long)shape[d]);
	fprintf(manifest, "], \"bin\": \"%s\"}\n", path);
}

static struct dli_context *open_ctx(const char *yaml, int rank, int world_size)
{
	char logs[4096];
	snprintf(logs, sizeof logs, "%s/logs", out_dir);
	struct dli_options o;
	dli_options_init(&o);
	o.config_yaml = yaml;
	o.log_dir = logs;
	o.rank = rank;
	o.world_size = world_size;
	struct dli_context *ctx = NULL;
	struct dli_error err = {0};
	if (dli_init(&o, &ctx, &err)) {
		fprintf(stderr, "dli_init: %s\n", err.message);
		exit(2);
	}
	return ctx;
}

static struct dli_layer *layer(struct dli_context *ctx, const char *name)
{
	struct dli_layer *l = NULL;
	struct dli_error err = {0};
	if (dli_layer_get(ctx, name, &l, &err)) {
		fprintf(stderr, "dli_layer_get: %s\n", err.message);
		exit(2);
	}
	return l;
}

/* ---- basic: every kind of tensor, microbatches, odd layer names, a schedule ---- */

static const char basic_yaml[] =
	"dump:\n"
	"  enabled: true\n"
	"  layers: {layer_name_regex_pattern: '.*'}\n"
	"  transformer_engine:\n"
	"    DumpTensors:\n"
	"      enabled: true\n"
	"      format: %s\n"
	"      freq: 2\n"
	"      tensors_struct:\n"
	"        - {tensor: activation, high_precision_tensor: true, quantized_tensor: true,\n"
	"           dump_quantized_internals: true}\n"
	"        - {tensor: weight, high_precision_tensor: true}\n"
	"        - {tensor: gradient, high_precision_tensor: true, quantized_tensor: true}\n"
	"        - {tensor: output, high_precision_tensor: true}\n"
	"        - {tensor: dgrad, high_precision_tensor: true}\n";

static const char *const basic_layers[] = {
	"model.layers.0.mlp.fc1",
	"a/b",
	"../../escape",
	"a..b",
	".hidden",
	"a:b", /* a:b and a?b both become a_b plus a hash; a_b itself stays a_b */
	"a?b",
	"a_b",
	"x-0123456789abcdef", /* looks like an altered name: altered too */
	"\xc3\xbcnic\xc3\xb8" "de.\xe5\xb1\x82",
	"bad\xff" "byte",
	"tab\tand\nnewline",
	NULL, /* the 300-byte name, filled in main */
	NULL,
};

static void basic_step(struct dli_context *ctx, const char *name, int64_t it, bool scheduled)
{
	struct dli_layer *l = layer(ctx, name);
	char key[128];

	for (int mb = 0; mb < 2; mb++) {
		const char *p = mb ? "activation.1" : "activation";
		int64_t hs[2] = {8, 16}, ts[2] = {16, 8}, one = 1;
		float *hp = make_data(8 * 16 * 4, DLI_DTYPE_F32);
		unsigned char *row = make_data(8 * 16, DLI_DTYPE_F8E4M3);
		unsigned char *col = make_data(8 * 16, DLI_DTYPE_F8E4M3);
		unsigned char *pq = make_data(8 * 16, DLI_DTYPE_F8E4M3);
		float sinv_row = 0.125f + (float)mb, sinv_col = 0.375f, sinv_pq = 3.0f;
		struct dli_tensor h = dli_tensor_make(hp, DLI_DTYPE_F32, 2, hs);
		struct dli_quantized_tensor qr = {dli_tensor_make(row, DLI_DTYPE_F8E4M3, 2, hs),
						  &sinv_row, 1};
		struct dli_quantized_tensor qc = {dli_tensor_make(col, DLI_DTYPE_F8E4M3, 2, ts),
						  &sinv_col, 1};
		struct dli_quantized_tensor qp = {dli_tensor_make(pq, DLI_DTYPE_F8E4M3, 2, hs),
						  &sinv_pq, 1};
		printf("rc inspect-activation %d\n", dli_inspect_tensor(l, DLI_TENSOR_ACTIVATION, &h,
									 &qr, &qc));
		printf("rc postquantize %d\n", dli_inspect_tensor_postquantize(l, DLI_GEMM_FPROP,
									DLI_TENSOR_ACTIVATION, &qp));
		if (scheduled) {
			snprintf(key, sizeof key, "%s.high_precision", p);
			expect(name, it, key, "F32", 2, hs, hp, 8 * 16 * 4);
			snprintf(key, sizeof key, "%s.quantized", p);
			expect(name, it, key, "F8_E4M3", 2, hs, row, 8 * 16);
			snprintf(key, sizeof key, "%s.quantized.scale_inv", p);
			expect(name, it, key, "F32", 1, &one, &sinv_row, 4);
			snprintf(key, sizeof key, "%s.rowwise_data", p);
			expect(name, it, key, "F8_E4M3", 2, hs, row, 8 * 16);
			snprintf(key, sizeof key, "%s.rowwise_data.scale_inv", p);
			expect(name, it, key, "F32", 1, &one, &sinv_row, 4);
			snprintf(key, sizeof key, "%s.columnwise_data", p);
			expect(name, it, key, "F8_E4M3", 2, ts, col, 8 * 16);
			snprintf(key, sizeof key, "%s.columnwise_data.scale_inv", p);
			expect(name, it, key, "F32", 1, &one, &sinv_col, 4);
			snprintf(key, sizeof key, "%s.fprop.quantized", p);
			expect(name, it, key, "F8_E4M3", 2, hs, pq, 8 * 16);
			snprintf(key, sizeof key, "%s.fprop.quantized.scale_inv", p);
			expect(name, it, key, "F32", 1, &one, &sinv_pq, 4);
		}
		free(hp);
		free(row);
		free(col);
		free(pq);

		/* The weight: the same tensor in every microbatch, dumped once per step. */
		int64_t ws[2] = {16, 4};
		void *w = make_data(16 * 4 * 2, DLI_DTYPE_F16);
		struct dli_tensor wt = dli_tensor_make(w, DLI_DTYPE_F16, 2, ws);
		printf("rc inspect-weight %d\n", dli_inspect_tensor(l, DLI_TENSOR_WEIGHT, &wt, NULL,
								     NULL));
		if (scheduled && mb == 0)
			expect(name, it, "weight.high_precision", "F16", 2, ws, w, 16 * 4 * 2);
		free(w);
	}

	int64_t gs[2] = {8, 4}, one = 1, es[2] = {0, 4};
	void *g = make_data(8 * 4 * 2, DLI_DTYPE_BF16), *gq = make_data(8 * 4, DLI_DTYPE_F8E5M2);
	float sinv = 0.0625f;
	struct dli_tensor gt = dli_tensor_make(g, DLI_DTYPE_BF16, 2, gs);
	struct dli_quantized_tensor gqt = {dli_tensor_make(gq, DLI_DTYPE_F8E5M2, 2, gs), &sinv, 1};
	/* Only the column-wise form: `quantized` takes it. */
	printf("rc inspect-gradient %d\n", dli_inspect_tensor(l, DLI_TENSOR_GRADIENT, &gt, NULL, &gqt));
	if (scheduled) {
		expect(name, it, "gradient.high_precision", "BF16", 2, gs, g, 8 * 4 * 2);
		expect(name, it, "gradient.quantized", "F8_E5M2", 2, gs, gq, 8 * 4);
		expect(name, it, "gradient.quantized.scale_inv", "F32", 1, &one, &sinv, 4);
	}
	free(g);
	free(gq);

	float dummy;
	struct dli_tensor empty = dli_tensor_make(&dummy, DLI_DTYPE_F32, 2, es);
	printf("rc inspect-output %d\n", dli_inspect_tensor(l, DLI_TENSOR_OUTPUT, &empty, NULL, NULL));
	if (scheduled)
		expect(name, it, "output.high_precision", "F32", 2, es, NULL, 0);

	/* Device memory: refused (said once per layer and tensor), nothing read from the pointer. */
	struct dli_tensor dev = dli_tensor_2d((void *)(uintptr_t)0x1000, DLI_DTYPE_F32, 4, 4);
	dev.device.type = DLI_DEVICE_CUDA;
	int rc = dli_inspect_tensor(l, DLI_TENSOR_DGRAD, &dev, NULL, NULL);
	printf("rc inspect-dgrad-cuda %d\n", rc);
	/* Every refused call's dli_last_error says why, not only the first's message log line. */
	if (rc)
		printf("last-error-dgrad-cuda %s\n", dli_last_error(ctx));
}

/* basic and torch: the same tensors, the two formats */
static int run_basic(const char *format)
{
	char yaml[sizeof basic_yaml + 16];
	snprintf(yaml, sizeof yaml, basic_yaml, format);
	char long_name[301];
	memset(long_name, 'L', 300);
	long_name[300] = '\0';
	memcpy(long_name + 100, "/../", 4);
	const char *names[sizeof basic_layers / sizeof *basic_layers];
	memcpy(names, basic_layers, sizeof basic_layers);
	names[sizeof basic_layers / sizeof *basic_layers - 2] = long_name;

	struct dli_context *ctx = open_ctx(yaml, 3, 4);
	for (int64_t it = 0; it < 5; it++) {
		for (int i = 0; names[i]; i++)
			basic_step(ctx, names[i], it, it % 2 == 0);
		printf("rc step %d\n", dli_step(ctx));
	}
	dli_destroy(ctx);
	return 0;
}

/* ---- diskfull: files over RLIMIT_FSIZE fail with EFBIG; training goes on ---- */

static const char one_layer_yaml[] =
	"dump:\n"
	"  enabled: true\n"
	"  layers: {layer_name_regex_pattern: '.*'}\n"
	"  transformer_engine:\n"
	"    DumpTensors:\n"
	"      enabled: true\n"
	"      format: safetensors\n"
	"      tensors: [activation]\n"
	"      high_precision_tensor: true\n"
	"%s";

static void dump_one(struct dli_context *ctx, const char *name, int64_t it, int64_t n, bool kept)
{
	float *x = make_data((size_t)n * 4, DLI_DTYPE_F32);
	struct dli_tensor t = dli_tensor_make(x, DLI_DTYPE_F32, 1, &n);
	printf("rc inspect %d\n", dli_inspect_tensor(layer(ctx, name), DLI_TENSOR_ACTIVATION, &t,
						     NULL, NULL));
	if (kept)
		expect(name, it, "activation.high_precision", "F32", 1, &n, x, (size_t)n * 4);
	free(x);
}

static int run_diskfull(void)
{
	char yaml[1024];
	snprintf(yaml, sizeof yaml, one_layer_yaml, "");
	/* EFBIG from write(2) instead of the signal: what a full disk looks like to the writer. */
	signal(SIGXFSZ, SIG_IGN);
	struct rlimit lim = {1 << 20, 1 << 20};
	if (setrlimit(RLIMIT_FSIZE, &lim)) {
		perror("setrlimit");
		return 2;
	}
	struct dli_context *ctx = open_ctx(yaml, 0, 1);
	for (int64_t it = 0; it < 5; it++) {
		bool small = it % 2 == 0;
		dump_one(ctx, "model.fc1", it, small ? 4096 : 1 << 19, small);
		printf("rc step %d\n", dli_step(ctx));
	}
	dli_destroy(ctx);
	return 0;
}

/* ---- clash: a host tensor named "activation.1", whose keys are those of activation's second
 * call: the later one is refused, and the file stays readable (one key twice would not be) ---- */

static int run_clash(void)
{
	static const char yaml[] = "dump:\n"
				   "  enabled: true\n"
				   "  layers: {layer_name_regex_pattern: '.*'}\n"
				   "  transformer_engine:\n"
				   "    DumpTensors:\n"
				   "      enabled: true\n"
				   "      format: safetensors\n"
				   "      tensors: [activation, activation.1]\n"
				   "      high_precision_tensor: true\n";
	struct dli_context *ctx = open_ctx(yaml, 0, 1);
	struct dli_layer *l = layer(ctx, "model.fc1");
	int own = dli_tensor_id(ctx, "activation.1");
	int64_t n = 16;
	printf("rc tensor-id %d\n", own < 0 ? own : 0);
	for (int call = 0; call < 3; call++) {
		float *x = make_data((size_t)n * 4, DLI_DTYPE_F32);
		struct dli_tensor t = dli_tensor_make(x, DLI_DTYPE_F32, 1, &n);
		int tensor = call < 2 ? DLI_TENSOR_ACTIVATION : own;
		printf("rc inspect %d\n", dli_inspect_tensor(l, tensor, &t, NULL, NULL));
		if (call < 2)
			expect("model.fc1", 0,
			       call ? "activation.1.high_precision" : "activation.high_precision",
			       "F32", 1, &n, x, (size_t)n * 4);
		free(x);
	}
	printf("rc step %d\n", dli_step(ctx));
	dli_destroy(ctx);
	return 0;
}

/* ---- longtensor: a host tensor whose name is longer than the keys' buffers (format: torch): its
 * file's dict still has the key high_precision ---- */

static int run_longtensor(void)
{
	char name[501], yaml[2048];
	memset(name, 'T', 500);
	name[500] = '\0';
	snprintf(yaml, sizeof yaml,
		 "dump:\n"
		 "  enabled: true\n"
		 "  layers: {layer_name_regex_pattern: '.*'}\n"
		 "  transformer_engine:\n"
		 "    DumpTensors:\n"
		 "      enabled: true\n"
		 "      tensors: [%s]\n"
		 "      high_precision_tensor: true\n", name);
	struct dli_context *ctx = open_ctx(yaml, 0, 1);
	struct dli_layer *l = layer(ctx, "fc1");
	int own = dli_tensor_id(ctx, name);
	int64_t n = 16;
	printf("rc tensor-id %d\n", own < 0 ? own : 0);
	float *x = make_data((size_t)n * 4, DLI_DTYPE_F32);
	struct dli_tensor t = dli_tensor_make(x, DLI_DTYPE_F32, 1, &n);
	printf("rc inspect %d\n", dli_inspect_tensor(l, own, &t, NULL, NULL));
	char key[600];
	snprintf(key, sizeof key, "%s.high_precision", name);
	expect("fc1", 0, key, "F32", 1, &n, x, (size_t)n * 4);
	free(x);
	printf("rc step %d\n", dli_step(ctx));
	dli_destroy(ctx);
	return 0;
}

/* ---- reloadname: a host tensor's name lives in the config; a reload frees that config while
 * the writer thread may still be writing the dump that names it (valgrind sees the read) ---- */

static int run_reloadname(void)
{
	static const char yaml[] = "dump:\n"
				   "  enabled: true\n"
				   "  layers: {layer_name_regex_pattern: '.*'}\n"
				   "  transformer_engine:\n"
				   "    DumpTensors:\n"
				   "      enabled: true\n"
				   "      tensors: [activation, %s]\n"
				   "      high_precision_tensor: true\n";
	char path[4096], logs[4096], text[1024];
	snprintf(path, sizeof path, "%s/config.yaml", out_dir);
	snprintf(logs, sizeof logs, "%s/logs", out_dir);
	snprintf(text, sizeof text, yaml, "my_own.tensor");
	FILE *f = fopen(path, "w");
	if (!f || fputs(text, f) < 0 || fclose(f))
		return 2;
	struct dli_options o;
	dli_options_init(&o);
	o.config_path = path;
	o.log_dir = logs;
	struct dli_context *ctx = NULL;
	struct dli_error err = {0};
	if (dli_init(&o, &ctx, &err)) {
		fprintf(stderr, "dli_init: %s\n", err.message);
		return 2;
	}
	/* A large dump first, so that the writer is still busy when the reload comes. */
	dump_one(ctx, "big", 0, 1 << 24, true);
	int own = dli_tensor_id(ctx, "my_own.tensor");
	int64_t n = 16;
	float *x = make_data((size_t)n * 4, DLI_DTYPE_F32);
	struct dli_tensor t = dli_tensor_make(x, DLI_DTYPE_F32, 1, &n);
	printf("rc inspect %d\n", dli_inspect_tensor(layer(ctx, "small"), own, &t, NULL, NULL));
	expect("small", 0, "my_own.tensor.high_precision", "F32", 1, &n, x, (size_t)n * 4);
	free(x);
	printf("rc step %d\n", dli_step(ctx));
	snprintf(text, sizeof text, yaml, "other");
	if (!(f = fopen(path, "w")) || fputs(text, f) < 0 || fclose(f))
		return 2;
	printf("rc reload %d\n", dli_config_reload(ctx));
	printf("rc step %d\n", dli_step(ctx));
	dli_destroy(ctx);
	return 0;
}

/* ---- tenames: two host tensors whose torch file names TransformerEngine's rule makes one (a.b,
 * a_b): a_b alone at iteration 0, then a.b and a_b at iteration 1. Each keeps one file name. ---- */

static int run_tenames(void)
{
	static const char yaml[] = "dump:\n"
				   "  enabled: true\n"
				   "  layers: {layer_name_regex_pattern: '.*'}\n"
				   "  transformer_engine:\n"
				   "    DumpTensors:\n"
				   "      enabled: true\n"
				   "      tensors: [a.b, a_b]\n"
				   "      high_precision_tensor: true\n";
	struct dli_context *ctx = open_ctx(yaml, 0, 1);
	struct dli_layer *l = layer(ctx, "fc1");
	int dot = dli_tensor_id(ctx, "a.b"), under = dli_tensor_id(ctx, "a_b");
	int64_t n = 16;
	for (int64_t it = 0; it < 2; it++) {
		for (int i = it ? 0 : 1; i < 2; i++) {
			float *x = make_data((size_t)n * 4, DLI_DTYPE_F32);
			struct dli_tensor t = dli_tensor_make(x, DLI_DTYPE_F32, 1, &n);
			printf("rc inspect %d\n", dli_inspect_tensor(l, i ? under : dot, &t, NULL, NULL));
			expect("fc1", it, i ? "a_b.high_precision" : "a.b.high_precision", "F32", 1, &n,
			       x, (size_t)n * 4);
			free(x);
		}
		printf("rc step %d\n", dli_step(ctx));
	}
	dli_destroy(ctx);
	return 0;
}

/* ---- nodir: the dump directory cannot be made (a file is in the way) ---- */

static int run_nodir(void)
{
	char yaml[1024], path[4096];
	snprintf(yaml, sizeof yaml, one_layer_yaml, "");
	snprintf(path, sizeof path, "%s/logs", out_dir);
	mkdir(path, 0755);
	snprintf(path, sizeof path, "%s/logs/nvdlfw_inspect_tensor_dumps", out_dir);
	FILE *f = fopen(path, "w");
	if (!f || fclose(f))
		return 2;
	struct dli_context *ctx = open_ctx(yaml, 0, 1);
	for (int64_t it = 0; it < 2; it++) {
		dump_one(ctx, "model.fc1", it, 16, false);
		printf("rc step %d\n", dli_step(ctx));
	}
	dli_destroy(ctx);
	return 0;
}

/* ---- reload: a config reload between steps keeps the writer and the layers' records ---- */

static int run_reload(void)
{
	char path[4096], logs[4096];
	snprintf(path, sizeof path, "%s/config.yaml", out_dir);
	snprintf(logs, sizeof logs, "%s/logs", out_dir);
	FILE *f = fopen(path, "w");
	if (!f || fprintf(f, one_layer_yaml, "") < 0 || fclose(f))
		return 2;
	struct dli_options o;
	dli_options_init(&o);
	o.config_path = path;
	o.log_dir = logs;
	struct dli_context *ctx = NULL;
	struct dli_error err = {0};
	if (dli_init(&o, &ctx, &err)) {
		fprintf(stderr, "dli_init: %s\n", err.message);
		return 2;
	}
	dump_one(ctx, "model.fc1", 0, 64, true);
	printf("rc step %d\n", dli_step(ctx));
	/* The new config dumps the weight instead (and asks for a larger queue). */
	char yaml[1024];
	snprintf(yaml, sizeof yaml, one_layer_yaml, "      queue_mib: 2048\n");
	char *at = strstr(yaml, "[activation]");
	memcpy(at, "[weight]    ", 12);
	if (!(f = fopen(path, "w")) || fputs(yaml, f) < 0 || fclose(f))
		return 2;
	printf("rc reload %d\n", dli_config_reload(ctx));
	printf("rc step %d\n", dli_step(ctx));
	dump_one(ctx, "model.fc1", 2, 64, false);
	int64_t n = 32;
	float *w = make_data(32 * 4, DLI_DTYPE_F32);
	struct dli_tensor t = dli_tensor_make(w, DLI_DTYPE_F32, 1, &n);
	printf("rc inspect %d\n", dli_inspect_tensor(layer(ctx, "model.fc1"), DLI_TENSOR_WEIGHT, &t,
						     NULL, NULL));
	expect("model.fc1", 2, "weight.high_precision", "F32", 1, &n, w, 32 * 4);
	free(w);
	printf("rc step %d\n", dli_step(ctx));
	dli_destroy(ctx);
	return 0;
}

/* ---- queue: a 64 KiB queue; the step waits for the writer, and says what does not fit ---- */

static int run_queue(void)
{
	char yaml[1024];
	snprintf(yaml, sizeof yaml, one_layer_yaml, "      queue_mib: 0.0625\n");
	struct dli_context *ctx = open_ctx(yaml, 0, 1);
	int64_t it = 0;
	for (; it < 20; it++) {
		dump_one(ctx, "A", it, 4096, true);
		dump_one(ctx, "B", it, 4096, true);
		printf("rc step %d\n", dli_step(ctx));
	}
	/* 3 x 32 KiB in one step: the third does not fit beside the step's own copies. */
	dump_one(ctx, "A", it, 8192, true);
	dump_one(ctx, "B", it, 8192, true);
	dump_one(ctx, "C", it, 8192, false);
	printf("rc step %d\n", dli_step(ctx));
	it++;
	/* 128 KiB alone: larger than the queue, taken once the writer is idle. */
	dump_one(ctx, "A", it, 32768, true);
	printf("rc step %d\n", dli_step(ctx));
	dli_destroy(ctx);
	return 0;
}

/* ---- threads: inspect calls from 4 threads at once, into an 8 KiB queue that each step fills ---- */

struct thread_job {
	struct dli_layer *layers[2];
	float *data[2];
	int rc[2];
};

static void *thread_main(void *arg)
{
	struct thread_job *j = arg;
	int64_t n = 256;
	for (int i = 0; i < 2; i++) {
		struct dli_tensor t = dli_tensor_make(j->data[i], DLI_DTYPE_F32, 1, &n);
		j->rc[i] = dli_inspect_tensor(j->layers[i], DLI_TENSOR_ACTIVATION, &t, NULL, NULL);
	}
	return NULL;
}

static int run_threads(void)
{
	char yaml[1024];
	snprintf(yaml, sizeof yaml, one_layer_yaml, "      queue_mib: 0.0078125\n");
	struct dli_context *ctx = open_ctx(yaml, 0, 1);
	struct thread_job jobs[4];
	char names[4][2][32];
	int64_t n = 256;
	for (int k = 0; k < 4; k++)
		for (int i = 0; i < 2; i++) {
			snprintf(names[k][i], sizeof names[k][i], "t%d.layer%d", k, i);
			jobs[k].layers[i] = layer(ctx, names[k][i]);
		}
	for (int64_t it = 0; it < 10; it++) {
		pthread_t th[4];
		for (int k = 0; k < 4; k++)
			for (int i = 0; i < 2; i++) {
				jobs[k].data[i] = make_data(256 * 4, DLI_DTYPE_F32);
				expect(names[k][i], it, "activation.high_precision", "F32", 1, &n,
				       jobs[k].data[i], 256 * 4);
			}
		for (int k = 0; k < 4; k++)
			if (pthread_create(&th[k], NULL, thread_main, &jobs[k]))
				exit(2);
		for (int k = 0; k < 4; k++) {
			pthread_join(th[k], NULL);
			for (int i = 0; i < 2; i++) {
				printf("rc inspect %d\n", jobs[k].rc[i]);
				free(jobs[k].data[i]);
			}
		}
		printf("rc step %d\n", dli_step(ctx));
	}
	dli_destroy(ctx);
	return 0;
}

int main(int argc, char **argv)
{
	if (argc != 3) {
		fprintf(stderr, "usage: %s basic|diskfull|queue|threads|nodir|reload|clash OUT\n", argv[0]);
		return 2;
	}
	out_dir = argv[2];
	char path[4096];
	snprintf(path, sizeof path, "%s/expect", out_dir);
	mkdir(out_dir, 0755);
	mkdir(path, 0755);
	snprintf(path, sizeof path, "%s/manifest.jsonl", out_dir);
	if (!(manifest = fopen(path, "w"))) {
		perror(path);
		return 2;
	}
	setvbuf(stdout, NULL, _IOLBF, 0);
	int r = !strcmp(argv[1], "basic")      ? run_basic("safetensors")
		: !strcmp(argv[1], "torch")    ? run_basic("torch")
		: !strcmp(argv[1], "diskfull") ? run_diskfull()
		: !strcmp(argv[1], "queue")    ? run_queue()
		: !strcmp(argv[1], "threads")  ? run_threads()
		: !strcmp(argv[1], "nodir")    ? run_nodir()
		: !strcmp(argv[1], "reload")   ? run_reload()
		: !strcmp(argv[1], "clash")    ? run_clash()
		: !strcmp(argv[1], "longtensor") ? run_longtensor()
		: !strcmp(argv[1], "reloadname") ? run_reloadname()
		: !strcmp(argv[1], "tenames")    ? run_tenames()
					       : 2;
	if (fclose(manifest))
		r = 2;
	return r;
}
