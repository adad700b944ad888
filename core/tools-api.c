/* The command-line tool's door into the core: core/tools-api.h. */
#include <errno.h>
#include <stdlib.h>

#include "config-private.h"
#include "context-private.h"
#include "host-private.h"
#include "lifecycle-private.h"
#include "loader-private.h"
#include "registry-private.h"
#include "tools-api.h"

int dli_tools_open(const struct dli_options *options, struct dli_context **out,
		   struct dli_error *err)
{
	return dli_context_create(options, false, out, err);
}

void dli_tools_summarize(const struct dli_context *ctx, struct dli_tools_summary *out)
{
	const struct dli_config *cfg = ctx->config;
	*out = (struct dli_tools_summary){.sections = cfg->n_sections, .instances = cfg->n_targets};
	for (size_t i = 0; i < cfg->n_sections; i++)
		out->enabled_sections += cfg->sections[i].enabled;
	out->modules = ctx->loader ? dli_loader_count(ctx->loader) : 0;
}

size_t dli_tools_warning_count(const struct dli_context *ctx)
{
	return ctx->config->n_warnings;
}

const char *dli_tools_warning(const struct dli_context *ctx, size_t i)
{
	return i < ctx->config->n_warnings ? ctx->config->warnings[i] : NULL;
}

size_t dli_tools_tensor_count(const struct dli_context *ctx)
{
	return ctx->n_tensors;
}

const char *dli_tools_tensor_name(const struct dli_context *ctx, size_t tensor)
{
	return tensor < ctx->n_tensors ? ctx->config->tensor_names[tensor] : NULL;
}

size_t dli_tools_binding_count(const struct dli_layer *layer)
{
	return layer->n_bindings;
}

void dli_tools_binding_get(const struct dli_layer *layer, size_t i, struct dli_tools_binding *out)
{
	const struct dli_target *t = layer->bindings[i].instance->target;
	*out = (struct dli_tools_binding){
		.ns = dli_feature_entry_ns(t->feature),
		.feature = t->feature->desc,
		.section = t->section->name,
		.where = t->where_text,
		.gemms = t->gemms,
		.tensors = t->tensors,
		.schedule = &t->schedule,
	};
}

int dli_tools_search_dirs(const char *const *extra, size_t n_extra, char ***out, size_t *n,
			  struct dli_error *err)
{
	return dli_search_dirs(extra, n_extra, out, n, err);
}

void dli_tools_search_dirs_free(char **dirs, size_t n)
{
	dli_search_dirs_free(dirs, n);
}

struct dli_tools_modules {
	struct dli_loader *loader;
};

int dli_tools_modules_open(const char *const *dirs, size_t n_dirs, const char *only,
			   void (*bad)(void *arg, const struct dli_error *e), void *arg,
			   struct dli_tools_modules **out, struct dli_error *err)
{
	*out = NULL;
	struct dli_tools_modules *m = calloc(1, sizeof *m);
	if (!m)
		return dli_error_set(err, -ENOMEM, NULL, "out of memory");
	int r = dli_loader_create(&dli_host_template, dirs, n_dirs, &m->loader, err);
	if (!r)
		r = only ? dli_loader_load(m->loader, only, err)
			 : dli_loader_load_all_each(m->loader, bad, arg, err);
	if (m->loader)
		*out = m;
	else
		free(m);
	return r;
}

size_t dli_tools_module_count(const struct dli_tools_modules *m)
{
	return dli_loader_count(m->loader);
}

const struct dli_module *dli_tools_module(const struct dli_tools_modules *m, size_t i)
{
	return dli_loader_module(m->loader, i);
}

const char *dli_tools_module_path(const struct dli_tools_modules *m, size_t i)
{
	return dli_loader_path(m->loader, i);
}

void dli_tools_modules_close(struct dli_tools_modules *m)
{
	if (!m)
		return;
	dli_loader_destroy(m->loader);
	free(m);
}

const char *dli_tools_param_range_text(const struct dli_param_desc *d, char *buf, size_t size)
{
	return dli_param_range_text(d, buf, size);
}
