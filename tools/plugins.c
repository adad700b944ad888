/* `dlinspect plugins [--explain [NAME]]`: the modules on the plugin search path, loaded through the same
 * loader dli_init uses, with their features, loggers and parameters. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cmd.h"
#include "tools-api.h"

static const char *type_name(enum dli_param_type t)
{
	switch (t) {
	case DLI_PARAM_BOOL: return "bool";
	case DLI_PARAM_INT: return "int";
	case DLI_PARAM_FLOAT: return "float";
	case DLI_PARAM_STRING: return "string";
	case DLI_PARAM_STRING_LIST: return "list of strings";
	case DLI_PARAM_INT_PAIRS: return "list of [start, end]";
	}
	return "?";
}

static void print_params(const struct dli_param_desc *p, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		printf("        %-16s %-20s %s%s", p[i].key, type_name(p[i].type),
		       p[i].required ? "required" : "default ",
		       p[i].required ? "" : p[i].default_value ? p[i].default_value : "(none)");
		if (p[i].alias)
			printf("  (also '%s')", p[i].alias);
		printf("\n        %-16s %s\n", "", p[i].doc ? p[i].doc : "");
		if (p[i].choices) {
			printf("        %-16s one of:", "");
			for (size_t k = 0; p[i].choices[k]; k++)
				printf(" %s", p[i].choices[k]);
			printf("\n");
		}
		char range[96];
		if ((p[i].type == DLI_PARAM_INT || p[i].type == DLI_PARAM_FLOAT) &&
		    *dli_tools_param_range_text(&p[i], range, sizeof range))
			printf("        %-16s %s\n", "", range);
	}
}

/* The keys the core handles for every feature, by flag (core/feature-keys.c). */
static void print_common_keys(uint32_t flags)
{
	for (size_t i = 0; i < DLI_KEY_COUNT; i++) {
		const struct dli_shared_key *k = &dli_shared_keys[i];
		if (k->type && (!k->flag || (flags & k->flag)))
			printf("        %-16s %-20s %s  %s\n", k->key, k->type, k->default_text, k->doc);
	}
}

/* Whether a descriptor is called `only` (by its name or an alias); every one is when `only` is NULL. */
static bool called(const char *only, const char *name, const char *const *aliases)
{
	if (!only || !strcmp(only, name))
		return true;
	for (size_t a = 0; aliases && aliases[a]; a++)
		if (!strcmp(only, aliases[a]))
			return true;
	return false;
}

static void say_bad(void *arg, const struct dli_error *e)
{
	(void)arg;
	fprintf(stderr, "dlinspect: %s\n", e->message);
}

int dli_cmd_plugins(int argc, char **argv)
{
	bool explain = false;
	const char *only = NULL; /* --explain NAME: that feature or logger alone */
	size_t shown = 0;
	const char **extra = calloc((size_t)argc, sizeof *extra); /* no limit on --plugin-dir */
	size_t n_extra = 0;
	if (!extra) {
		fprintf(stderr, "dlinspect plugins: out of memory\n");
		return 2;
	}
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--explain")) {
			explain = true;
			if (i + 1 < argc && argv[i + 1][0] != '-')
				only = argv[++i];
		} else if (!strcmp(argv[i], "--plugin-dir") && i + 1 < argc) {
			if (!dli_cmd_plugin_dir("plugins", argv[i + 1])) {
				free(extra);
				return 2;
			}
			extra[n_extra++] = argv[++i];
		} else {
			fprintf(stderr,
				"usage: dlinspect plugins [--explain [NAME]] [--plugin-dir DIR]...\n");
			free(extra);
			return 2;
		}
	}
	struct dli_error err;
	char **dirs;
	size_t n_dirs;
	int found = dli_tools_search_dirs(extra, n_extra, &dirs, &n_dirs, &err); /* copies the names */
	free(extra);
	if (found) {
		fprintf(stderr, "dlinspect: %s\n", err.message);
		return 1;
	}
	printf("plugin search path:\n");
	for (size_t i = 0; i < n_dirs; i++)
		printf("  %s\n", dirs[i]);
	struct dli_tools_modules *mods;
	int status = 0;
	/* Every module that loads is listed; each one that does not is said on stderr. */
	if (dli_tools_modules_open((const char *const *)dirs, n_dirs, NULL, say_bad, NULL, &mods,
				   &err)) {
		if (!mods || err.code == -ENOMEM)
			fprintf(stderr, "dlinspect: %s\n", err.message);
		status = 1;
		if (!mods) {
			dli_tools_search_dirs_free(dirs, n_dirs);
			return 1;
		}
	}
	size_t n = dli_tools_module_count(mods);
	printf("\n%zu module%s:\n", n, n == 1 ? "" : "s");
	for (size_t i = 0; i < n; i++) {
		const struct dli_module *m = dli_tools_module(mods, i);
		bool has = !only;
		for (size_t k = 0; k < m->n_features && !has; k++)
			has = called(only, m->features[k]->name, m->features[k]->aliases);
		for (size_t k = 0; k < m->n_loggers && !has; k++)
			has = called(only, m->loggers[k]->name, NULL);
		if (!has)
			continue;
		printf("\n  %s%s%s%s (ABI %u.%u)  %s\n", m->name, m->ns ? " [namespace " : "",
		       m->ns ? m->ns : "", m->ns ? "]" : "", (unsigned)m->abi_major,
		       (unsigned)m->abi_minor, dli_tools_module_path(mods, i));
		if (m->doc)
			printf("    %s\n", m->doc);
		for (size_t k = 0; k < m->n_features; k++) {
			const struct dli_feature_desc *d = m->features[k];
			if (!called(only, d->name, d->aliases))
				continue;
			shown++;
			printf("    feature %s", d->name);
			for (size_t a = 0; d->aliases && d->aliases[a]; a++)
				printf("%s%s", a ? ", " : " (alias ", d->aliases[a]);
			printf("%s: %s\n", d->aliases && d->aliases[0] ? ")" : "", d->doc ? d->doc : "");
			if (explain) {
				printf("      placed %s\n", (d->flags & DLI_FEATURE_GENERIC) || !m->ns
							? "directly in a section or in its namespace block"
							: "in the section's namespace block");
				printf("      keys:\n");
				print_common_keys(d->flags);
				print_params(d->params, d->n_params);
			}
		}
		for (size_t k = 0; k < m->n_loggers; k++) {
			const struct dli_logger_desc *d = m->loggers[k];
			if (!called(only, d->name, NULL))
				continue;
			shown++;
			printf("    logger %s: %s\n", d->name, d->doc ? d->doc : "");
			if (explain) {
				printf("      keys:%s\n", d->n_params ? "" : " none");
				print_params(d->params, d->n_params);
			}
		}
	}
	if (only && !shown) {
		fprintf(stderr, "dlinspect: no feature or logger called '%s' on the plugin path\n", only);
		status = 1;
	}
	dli_tools_modules_close(mods);
	dli_tools_search_dirs_free(dirs, n_dirs);
	return status;
}
