/* The statistics features' names, through the real core: every name a feature's `stats` key offers
 * (its descriptor's choices, read from the module itself) either logs exactly one line named
 * `{layer}_{tensor}_{name}` (LogNvfp4TensorStats: `..._nvfp4_{name}`, TransformerEngine's names), or
 * is one LogFp8TensorStats refuses with TransformerEngine's reason. The names are parsed in one
 * place (features/stats-skeleton.c) and the choices written in another (the modules' tables): this
 * keeps the two in step. Usage: test_stats_names MODULE.so... (LogTensorStats, LogFp8TensorStats,
 * LogNvfp4TensorStats). */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <dlinspect/plugin.h>

#include "check.h"
#include "dli-test.h"

#define LAYER "model.fc1"

/* LogFp8TensorStats' refusals, by TransformerEngine's rules: NVFP4 names belong to
 * LogNvfp4TensorStats; `_columnwise` exists only for the block-scaled recipes. NULL: accepted. */
static const char *fp8_refusal(const char *name)
{
	if (!strncmp(name, "nvfp4_", 6))
		return "NVFP4 statistics belong to TransformerEngine's LogNvfp4TensorStats";
	if (strstr(name, "_columnwise") && strncmp(name, "mxfp8_", 6) &&
	    strncmp(name, "fp8_block_scaling_", 18))
		return "column-wise statistics exist only for block-scaled recipes";
	return NULL;
}

/* The single line of the statistics log: its name into `name`; the number of lines returned. */
static int logged(char *name, size_t size)
{
	char buf[4096];
	int n = 0;
	FILE *f = open_log(STATS_LOG);
	name[0] = 0;
	while (f && fgets(buf, sizeof buf, f)) {
		const char *info = strstr(buf, " - INFO - "), *it = strstr(buf, " \t\t\t\t iteration=");
		if (info && it && info < it && n++ == 0)
			snprintf(name, size, "%.*s", (int)(it - info - 10), info + 10);
	}
	if (f)
		fclose(f);
	return n;
}

/* One config per name, one step with an activation (high precision and a host-quantized copy). */
static void check_name(const char *feature, const char *name, const char *log_prefix,
		       size_t *accepted, size_t *refused)
{
	static float hp[64];
	static unsigned char q[64];
	static float scale_inv = 1.0f / 448.0f;
	char yaml[1024], want[512], got[512];
	struct dli_error err = {0};

	for (int i = 0; i < 64; i++) {
		hp[i] = (float)(i - 20) * (i % 7 ? 0.25f : 1e-6f);
		q[i] = (unsigned char)(i & 0x3f);
	}
	snprintf(yaml, sizeof yaml,
		 "s:\n  enabled: true\n  layers: {layer_name_regex_pattern: 'fc1'}\n"
		 "  transformer_engine:\n    %s: {enabled: true, tensors: [activation], "
		 "stats: ['%s']}\n",
		 feature, name);
	/* A choice with parameters (`name{key,...}`) is listed by its name alone: its defaults. */
	const char *brace = strchr(name, '{');
	if (brace)
		snprintf(yaml, sizeof yaml,
			 "s:\n  enabled: true\n  layers: {layer_name_regex_pattern: 'fc1'}\n"
			 "  transformer_engine:\n    %s: {enabled: true, tensors: [activation], "
			 "stats: ['%.*s']}\n",
			 feature, (int)(brace - name), name);
	struct dli_context *ctx = open_yaml(yaml, &err);
	const char *why = !strcmp(feature, "LogFp8TensorStats") ? fp8_refusal(name) : NULL;
	if (why) {
		CHECK(ctx == NULL);
		CHECK_CONTAINS(err.message, why);
		CHECK_CONTAINS(err.message, name);
		*refused += 1;
		if (ctx)
			dli_destroy(ctx);
		return;
	}
	CHECK(ctx != NULL);
	if (!ctx) {
		fprintf(stderr, "%s %s: %s\n", feature, name, err.message);
		return;
	}
	struct dli_layer *l = layer(ctx, LAYER);
	struct dli_tensor t = tensor(hp, DLI_DTYPE_F32, 64);
	struct dli_quantized_tensor qt = {.data = tensor(q, DLI_DTYPE_F8E4M3, 64),
					  .scale_inv = &scale_inv, .scale_inv_count = 1};
	CHECK(l != NULL);
	if (l)
		CHECK_INT(dli_inspect_tensor(l, DLI_TENSOR_ACTIVATION, &t, &qt, NULL), 0);
	CHECK_INT(dli_step(ctx), 0);
	dli_destroy(ctx);
	if (brace) /* TransformerEngine's name, with the defaults; both orientations */
		snprintf(want, sizeof want, LAYER "_activation_%.*s_block_size_32_dims_1"
			 "_max_over_orientations", (int)(brace - name), name);
	else
		snprintf(want, sizeof want, LAYER "_activation_%s%s", log_prefix, name);
	CHECK_INT(logged(got, sizeof got), 1);
	CHECK_STR(got, want);
	*accepted += 1;
}

int main(int argc, char **argv)
{
	/* The entry only reads the ABI major; the descriptors are static data. */
	struct dli_host host = {.size = sizeof host, .abi_major = DLI_ABI_MAJOR,
				.abi_minor = DLI_ABI_MINOR};
	void *so[8] = {0};

	CHECK(argc > 1 && argc <= 9);
	for (int a = 1; a < argc && a <= 8; a++) {
		CHECK((so[a - 1] = dlopen(argv[a], RTLD_NOW | RTLD_LOCAL)) != NULL);
		dli_module_entry_fn entry = so[a - 1] ? (dli_module_entry_fn)(uintptr_t)dlsym(
							    so[a - 1], DLI_MODULE_ENTRY_NAME)
						      : NULL;
		const struct dli_module *m = entry ? entry(&host) : NULL;
		CHECK(m != NULL && m->n_features == 1);
		if (!m || m->n_features != 1)
			continue;
		const struct dli_feature_desc *d = m->features[0];
		const struct dli_param_desc *stats = NULL;
		for (size_t i = 0; i < d->n_params; i++)
			if (!strcmp(d->params[i].key, "stats"))
				stats = &d->params[i];
		CHECK(stats && stats->choices);
		size_t accepted = 0, refused = 0;
		const char *prefix = !strcmp(d->name, "LogNvfp4TensorStats") ? "nvfp4_" : "";
		for (size_t i = 0; stats && stats->choices && stats->choices[i]; i++)
			if (strcmp(stats->choices[i], "histogram")) /* no scalar: another test's */
				check_name(d->name, stats->choices[i], prefix, &accepted, &refused);
		printf("%s: %zu names log under their own name, %zu refused with the reason\n",
		       d->name, accepted, refused);
		/* TransformerEngine's sets: 12 plain statistics and max_blockwise_dynamic_range; 7 FP8 ones for the host's tensor
		 * (bare and fp8_delayed_scaling_), current scaling, MXFP8 and FP8 block scaling (both
		 * with _columnwise); NVFP4's 2. */
		if (!strcmp(d->name, "LogTensorStats"))
			CHECK_INT(accepted, 13);
		if (!strcmp(d->name, "LogFp8TensorStats"))
			CHECK_INT(accepted, 7 * 7);
		if (!strcmp(d->name, "LogNvfp4TensorStats"))
			CHECK_INT(accepted, 2);
	}
	for (int a = 0; a < 8; a++)
		if (so[a])
			dlclose(so[a]);
	remove_log_dir();
	return check_exit();
}
