/* `dlinspect check CONFIG [--layer NAME]...`: validate a config the way dli_init reads it, without
 * writing any log, and show what applies to given layers. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cmd.h"
#include "context-private.h"
#include "loader-private.h"
#include "registry-private.h"

static const char *const gemm_names[DLI_GEMM_COUNT] = {"fprop", "dgrad", "wgrad"};

static void print_gemms(uint32_t mask)
{
	const char *sep = "";
	for (int g = 0; g < DLI_GEMM_COUNT; g++) {
		if (mask >> g & 1u) {
			printf("%s%s", sep, gemm_names[g]);
			sep = ", ";
		}
	}
}

static void print_tensors(const struct dli_context *ctx, uint64_t mask)
{
	const char *sep = "";
	for (size_t t = 0; t < ctx->n_tensors; t++) {
		if (mask >> t & 1u) {
			printf("%s%s", sep, ctx->config->tensor_names[t]);
			sep = ", ";
		}
	}
}

static void print_schedule(const struct dli_schedule *s)
{
	printf("freq %lld", (long long)s->freq);
	if (s->ranges) {
		printf(", steps");
		/* Inclusive, whatever the namespace's config spelling (docs/config.md). */
		for (size_t i = 0; i < s->n_ranges; i++) {
			printf(" %lld-", (long long)s->ranges[i].first);
			if (s->ranges[i].second != DLI_NEVER)
				printf("%lld", (long long)s->ranges[i].second);
		}
	} else if (s->start_step || s->end_step != DLI_NEVER) {
		printf(", steps %lld-", (long long)s->start_step);
		if (s->end_step != DLI_NEVER)
			printf("%lld", (long long)s->end_step);
	}
}

static int describe_layer(struct dli_context *ctx, const char *name)
{
	struct dli_layer *l;
	struct dli_error err;
	if (dli_layer_get(ctx, name, &l, &err)) {
		fprintf(stderr, "%s\n", err.message);
		return 1;
	}
	printf("layer %s:\n", name);
	if (!l->n_bindings) {
		printf("  selected by no section: every GEMM in FP8, nothing inspected or modified\n");
		return 0;
	}
	for (size_t i = 0; i < l->n_bindings; i++) {
		const struct dli_target *t = l->bindings[i].instance->target;
		const struct dli_feature_desc *d = t->feature->desc;
		/* The namespace too: the same name in two namespaces is two features. */
		char label[128];
		snprintf(label, sizeof label, "%s.%s", dli_feature_entry_ns(t->feature), d->name);
		printf("  %-40s section '%s' at %s\n", label, t->section->name, t->where_text);
		if (d->flags & DLI_FEATURE_GEMMS) {
			printf("  %-40s gemms: ", "");
			print_gemms(t->gemms);
			printf("\n");
		}
		if (d->flags & DLI_FEATURE_TENSORS) {
			printf("  %-40s tensors: ", "");
			print_tensors(ctx, t->tensors);
			printf("\n");
		}
		if (d->flags & DLI_FEATURE_SCHEDULED) {
			printf("  %-40s schedule: ", "");
			print_schedule(&t->schedule);
			printf("\n");
		}
	}
	printf("  at iteration %lld:", (long long)dli_iteration_get(ctx));
	for (int g = 0; g < DLI_GEMM_COUNT; g++)
		printf(" %s %s%s", gemm_names[g],
		       dli_fp8_gemm_enabled(l, (enum dli_gemm)g, NULL) ? "FP8" : "high precision",
		       g + 1 < DLI_GEMM_COUNT ? "," : "\n");
	return 0;
}

int dli_cmd_check(int argc, char **argv)
{
	const char *path = NULL;
	static const char usage[] = "usage: dlinspect check CONFIG [--layer NAME]... "
				    "[--allow-tensor NAME]... [--plugin-dir DIR]... "
				    "[--allow-module-path]\n";
	/* Each option's values, as many as there are arguments: no limit to hit. */
	const char **layers = calloc((size_t)argc, sizeof *layers);
	const char **dirs = calloc((size_t)argc, sizeof *dirs);
	const char **tensors = calloc((size_t)argc, sizeof *tensors);
	size_t n_layers = 0, n_dirs = 0, n_tensors = 0;
	int status = 2;
	if (!layers || !dirs || !tensors) {
		fprintf(stderr, "dlinspect check: out of memory\n");
		goto out;
	}
	bool allow_paths = false;
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--allow-module-path")) {
			allow_paths = true;
		} else if (!strcmp(argv[i], "--allow-tensor") && i + 1 < argc) {
			tensors[n_tensors++] = argv[++i];
		} else if ((!strcmp(argv[i], "--layer") || !strcmp(argv[i], "--plugin-dir")) &&
			   i + 1 < argc) {
			bool layer = !strcmp(argv[i], "--layer");
			if (layer)
				layers[n_layers++] = argv[++i];
			else
				dirs[n_dirs++] = argv[++i];
		} else if (argv[i][0] == '-' || path) {
			fputs(usage, stderr);
			goto out;
		} else {
			path = argv[i];
		}
	}
	if (!path) {
		fputs(usage, stderr);
		goto out;
	}
	struct dli_options o;
	dli_options_init(&o);
	o.config_path = path;
	o.plugin_dirs = dirs;
	o.n_plugin_dirs = n_dirs;
	o.allow_module_paths = allow_paths; /* as a host would have to: the config cannot */
	o.log_level = DLI_LOG_ERROR; /* warnings are printed below, once */
	/* A check knows no host: only the standard tensors and the ones the user allows, so that a
	 * misspelled name fails here rather than log nothing in a run (docs/config.md). */
	o.tensor_names = tensors;
	o.n_tensor_names = n_tensors;
	struct dli_context *ctx;
	struct dli_error err;
	if (dli_context_open(&o, false, &ctx, &err)) {
		fprintf(stderr, "%s\n", err.message);
		status = 1;
		goto out;
	}
	const struct dli_config *cfg = ctx->config;
	for (size_t i = 0; i < cfg->n_warnings; i++)
		fprintf(stderr, "%s\n", cfg->warnings[i]);
	size_t enabled = 0;
	for (size_t i = 0; i < cfg->n_sections; i++)
		enabled += cfg->sections[i].enabled;
	size_t n_modules = ctx->loader ? dli_loader_count(ctx->loader) : 0;
	printf("%s: valid: %zu section%s (%zu enabled), %zu feature instance%s, %zu module%s loaded\n",
	       path, cfg->n_sections, cfg->n_sections == 1 ? "" : "s", enabled, cfg->n_targets,
	       cfg->n_targets == 1 ? "" : "s", n_modules, n_modules == 1 ? "" : "s");
	status = 0;
	for (size_t i = 0; i < n_layers; i++)
		status |= describe_layer(ctx, layers[i]);
	dli_destroy(ctx);
out:
	free(layers);
	free(dirs);
	free(tensors);
	return status;
}
