/* `dlinspect check CONFIG [--layer NAME]...`: validate a config the way dli_init reads it, without
 * writing any log, and show what applies to given layers. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cmd.h"
#include "tools-api.h"

/* `text` and a newline on f, control characters escaped as the logs escape them (dli_escape): a
 * message quotes the config's names, and a newline or a terminal escape in one would otherwise
 * pass for a line of its own or reach the terminal. */
static void put_line(FILE *f, const char *text)
{
	char buf[4 * 1024 + 64];
	size_t n = dli_escape(buf, sizeof buf, text);
	fputs(buf, f);
	if (n >= sizeof buf)
		fputs("...", f);
	fputc('\n', f);
}

static void print_gemms(uint32_t mask)
{
	const char *sep = "";
	for (int g = 0; g < DLI_GEMM_COUNT; g++) {
		if (mask >> g & 1u) {
			printf("%s%s", sep, dli_gemm_name(g));
			sep = ", ";
		}
	}
}

static void print_tensors(const struct dli_context *ctx, uint64_t mask)
{
	const char *sep = "";
	for (size_t t = 0; t < dli_tools_tensor_count(ctx); t++) {
		if (mask >> t & 1u) {
			printf("%s%s", sep, dli_tools_tensor_name(ctx, t));
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
		put_line(stderr, err.message);
		return 1;
	}
	char escaped[1024];
	dli_escape(escaped, sizeof escaped, name);
	printf("layer %s:\n", escaped);
	size_t n = dli_tools_binding_count(l);
	if (!n) {
		printf("  selected by no section: every GEMM in FP8, nothing inspected or modified\n");
		return 0;
	}
	for (size_t i = 0; i < n; i++) {
		struct dli_tools_binding b;
		dli_tools_binding_get(l, i, &b);
		const struct dli_feature_desc *d = b.feature;
		/* The namespace too: the same name in two namespaces is two features. */
		char label[128];
		snprintf(label, sizeof label, "%s.%s", b.ns, d->name);
		printf("  %-40s section '%s' at %s\n", label, b.section, b.where);
		if (d->flags & DLI_FEATURE_GEMMS) {
			printf("  %-40s gemms: ", "");
			print_gemms(b.gemms);
			printf("\n");
		}
		if (d->flags & DLI_FEATURE_TENSORS) {
			printf("  %-40s tensors: ", "");
			print_tensors(ctx, b.tensors);
			printf("\n");
		}
		if (d->flags & DLI_FEATURE_SCHEDULED) {
			printf("  %-40s schedule: ", "");
			print_schedule(b.schedule);
			printf("\n");
		}
	}
	printf("  at iteration %lld:", (long long)dli_iteration_get(ctx));
	for (int g = 0; g < DLI_GEMM_COUNT; g++)
		printf(" %s %s%s", dli_gemm_name(g),
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
		/* Refused here, in the option's words: dli_init would name dli_options' member. */
		if (i + 1 < argc && !argv[i + 1][0] && !strcmp(argv[i], "--allow-tensor")) {
			fputs("dlinspect check: --allow-tensor: expected a tensor name, got an "
			      "empty one\n", stderr);
			goto out;
		}
		if (i + 1 < argc && !strcmp(argv[i], "--plugin-dir") &&
		    !dli_cmd_plugin_dir("check", argv[i + 1]))
			goto out;
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
	if (dli_tools_open(&o, &ctx, &err)) {
		put_line(stderr, err.message);
		status = 1;
		goto out;
	}
	for (size_t i = 0; i < dli_tools_warning_count(ctx); i++)
		put_line(stderr, dli_tools_warning(ctx, i));
	struct dli_tools_summary sum;
	dli_tools_summarize(ctx, &sum);
	printf("%s: valid: %zu section%s (%zu enabled), %zu feature instance%s, %zu module%s loaded\n",
	       path, sum.sections, sum.sections == 1 ? "" : "s", sum.enabled_sections, sum.instances,
	       sum.instances == 1 ? "" : "s", sum.modules, sum.modules == 1 ? "" : "s");
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
