/* Fuzz target: a config as YAML text through dli_init, then what a host does with it: a few layer
 * lookups, every call kind on each, dli_step a few times, dli_destroy. Modules load from
 * DLINSPECT_PLUGIN_PATH (the build tree's, baked in as the default). Logs go to a private directory
 * emptied after each input, so a long run does not fill the disk. */
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <dlinspect/dlinspect.h>

#include "fuzz.h"

static char log_dir[] = "/tmp/dli-fuzz-config-XXXXXX";

static int remove_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
	(void)st;
	(void)flag;
	if (ftw->level > 0)
		remove(path);
	return 0;
}

static void remove_log_dir(void)
{
	nftw(log_dir, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
	rmdir(log_dir);
}

static void setup(void)
{
	static int done;
	if (done)
		return;
	done = 1;
	if (!mkdtemp(log_dir))
		abort();
	atexit(remove_log_dir);
#ifdef DLI_FUZZ_PLUGIN_PATH
	setenv("DLINSPECT_PLUGIN_PATH", DLI_FUZZ_PLUGIN_PATH, 0);
#endif
	unsetenv("DLINSPECT_CONFIG");
	unsetenv("DLINSPECT_LOG_DIR");
}

static void use_layer(struct dli_context *ctx, const char *name)
{
	struct dli_layer *l;
	struct dli_error err;
	if (dli_layer_get(ctx, name, &l, &err))
		return;
	float in_data[4] = {1.0f, -2.5f, 0.0f, 448.0f}, out_data[4];
	uint8_t q_data[4] = {0x38, 0xb8, 0x00, 0x7e};
	float scale_inv = 1.0f, scale = 1.0f, amax = 448.0f;
	struct dli_tensor in = {.data = in_data, .dtype = DLI_DTYPE_F32, .ndim = 2,
				.shape = {2, 2}, .contiguous = true};
	struct dli_tensor out = in;
	out.data = out_data;
	struct dli_quantized_tensor q = {
		.data = {.data = q_data, .dtype = DLI_DTYPE_F8E4M3, .ndim = 2, .shape = {2, 2},
			 .contiguous = true},
		.scale_inv = &scale_inv,
		.scale_inv_count = 1,
	};
	struct dli_quantizer quant = {.size = sizeof quant, .format = DLI_DTYPE_F8E4M3,
				      .scale = &scale, .amax = &amax};
	int64_t next;
	for (int g = 0; g < DLI_GEMM_COUNT; g++) {
		(void)dli_fp8_gemm_enabled(l, (enum dli_gemm)g, &next);
		for (int t = 0; t < DLI_TENSOR_STANDARD_COUNT + 1; t++) {
			if (dli_modify_tensor_enabled(l, (enum dli_gemm)g, t, &next))
				(void)dli_modify_tensor(l, (enum dli_gemm)g, t, &in, &quant, &out);
			if (dli_inspect_tensor_postquantize_enabled(l, (enum dli_gemm)g, t, &next))
				(void)dli_inspect_tensor_postquantize(l, (enum dli_gemm)g, t, &q);
		}
	}
	/* A block-scaled host's copies: an MXFP8 row-wise one and an NVFP4 column-wise one (every
	 * code and scale in bounds for a 2 x 2 tensor in TransformerEngine's layouts). */
	static uint8_t codes[4] = {0x38, 0xb8, 0x00, 0x7e}, scales[128 * 128];
	memset(scales, 127, sizeof scales);
	struct dli_block_quantized_tensor mx = dli_block_quantized_te(
		DLI_BLOCK_MXFP8, DLI_DTYPE_F8E4M3, 0, 2, 2, codes, scales, NULL);
	struct dli_block_quantized_tensor nv = dli_block_quantized_te(
		DLI_BLOCK_NVFP4, DLI_DTYPE_U8, 1, 2, 2, codes, scales, &amax);
	for (int t = 0; t < DLI_TENSOR_STANDARD_COUNT + 1; t++)
		if (dli_inspect_tensor_enabled(l, t, &next)) {
			(void)dli_inspect_tensor(l, t, &in, &q, NULL);
			(void)dli_inspect_tensor_block(l, t, &in, NULL, &mx, &nv);
		}
	int host = dli_tensor_id(ctx, "tensor1");
	if (host >= 0 && dli_inspect_tensor_enabled(l, host, &next))
		(void)dli_inspect_tensor(l, host, &in, NULL, NULL);
	struct dli_log_tensor_stats_args args = {sizeof args, "activation", &in, -1, NULL};
	(void)dli_call(l, DLI_CALL_LOG_TENSOR_STATS, &args);
	args.tensor_name = "tensor1";
	(void)dli_call(l, DLI_CALL_LOG_TENSOR_STATS, &args);
	(void)dli_call(l, "no_such_call", NULL);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	setup();
	/* A config is text: the input up to its first NUL. */
	char *yaml = malloc(size + 1);
	if (!yaml)
		return 0;
	memcpy(yaml, data, size);
	yaml[size] = '\0';
	struct dli_options o;
	dli_options_init(&o);
	o.config_yaml = yaml;
	o.log_dir = log_dir;
	o.log_level = DLI_LOG_ERROR;
	struct dli_context *ctx = NULL;
	struct dli_error err;
	if (dli_init(&o, &ctx, &err) == 0) {
		static const char *const layers[] = {
			"model.1.fc1", "model.decoder.layers.4.mlp.fc2", "Layer_7", "qkv", "",
			"x\xff.fc1",
		};
		for (int step = 0; step < 3; step++) {
			for (size_t i = 0; i < sizeof layers / sizeof *layers; i++)
				use_layer(ctx, layers[i]);
			(void)dli_fp8_gemm_enabled_by_name(ctx, "model.2.fc1", "dgrad", NULL);
			(void)dli_inspect_tensor_enabled_by_name(ctx, "model.2.fc1", "weight", NULL);
			(void)dli_step(ctx);
		}
		dli_iteration_set(ctx, 1000);
		use_layer(ctx, "model.1.fc1");
		(void)dli_step(ctx);
		dli_destroy(ctx);
	}
	free(yaml);
	nftw(log_dir, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
	return 0;
}
