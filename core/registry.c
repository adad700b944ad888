/* The loaded modules' features, loggers and namespaces, indexed by name for the config and CLI. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "error-private.h"
#include "loader-private.h"
#include "registry-private.h"

static bool feature_named(const struct dli_feature_desc *d, const char *name)
{
	if (!strcmp(d->name, name))
		return true;
	for (size_t i = 0; d->aliases && d->aliases[i]; i++)
		if (!strcmp(d->aliases[i], name))
			return true;
	return false;
}

const struct dli_feature_entry *dli_registry_feature(const struct dli_registry *r, const char *name)
{
	for (size_t i = 0; i < r->n_features; i++)
		if (feature_named(r->features[i].desc, name))
			return &r->features[i];
	return NULL;
}

const char *dli_feature_entry_ns(const struct dli_feature_entry *e)
{
	return e->module->ns ? e->module->ns : DLI_NS_BASE;
}

const struct dli_feature_entry *dli_registry_feature_in(const struct dli_registry *r, const char *ns,
							const char *name)
{
	if (!ns)
		ns = DLI_NS_BASE;
	for (size_t i = 0; i < r->n_features; i++)
		if (!strcmp(dli_feature_entry_ns(&r->features[i]), ns) &&
		    feature_named(r->features[i].desc, name))
			return &r->features[i];
	return NULL;
}

const struct dli_logger_entry *dli_registry_logger(const struct dli_registry *r, const char *name)
{
	for (size_t i = 0; i < r->n_loggers; i++)
		if (!strcmp(r->loggers[i].desc->name, name))
			return &r->loggers[i];
	return NULL;
}

bool dli_registry_has_namespace(const struct dli_registry *r, const char *ns)
{
	for (size_t i = 0; i < r->n_namespaces; i++)
		if (!strcmp(r->namespaces[i], ns))
			return true;
	return false;
}

bool dli_registry_has_call(const struct dli_registry *r, const char *name)
{
	for (size_t i = 0; i < r->n_features; i++) {
		const char *const *calls = r->features[i].desc->calls;
		for (size_t k = 0; calls && calls[k]; k++)
			if (!strcmp(calls[k], name))
				return true;
	}
	return false;
}

const char **dli_registry_names(const struct dli_registry *r, size_t *n)
{
	size_t cap = r->n_loggers + r->n_namespaces + 1;
	for (size_t i = 0; i < r->n_features; i++) {
		cap++;
		for (size_t k = 0; r->features[i].desc->aliases && r->features[i].desc->aliases[k]; k++)
			cap++;
	}
	const char **names = calloc(cap, sizeof *names);
	if (!names)
		return NULL;
	size_t c = 0;
	for (size_t i = 0; i < r->n_features; i++) {
		const struct dli_feature_desc *d = r->features[i].desc;
		names[c++] = d->name;
		for (size_t k = 0; d->aliases && d->aliases[k]; k++)
			names[c++] = d->aliases[k];
	}
	for (size_t i = 0; i < r->n_loggers; i++)
		names[c++] = r->loggers[i].desc->name;
	for (size_t i = 0; i < r->n_namespaces; i++)
		names[c++] = r->namespaces[i];
	*n = c;
	return names;
}

static int clash(struct dli_error *err, const char *what, const char *name, const char *a,
		 const char *b)
{
	return dli_error_set(err, -EEXIST, NULL, "%s '%s' is provided by two modules: %s and %s; "
						 "remove one from the plugin path or from 'extensions'",
			     what, name, a, b);
}

int dli_registry_init(struct dli_registry *r, const struct dli_loader *loader,
		      struct dli_error *err)
{
	memset(r, 0, sizeof *r);
	size_t n_mod = dli_loader_count(loader), nf = 0, nl = 0;
	for (size_t i = 0; i < n_mod; i++) {
		nf += dli_loader_module(loader, i)->n_features;
		nl += dli_loader_module(loader, i)->n_loggers;
	}
	r->features = calloc(nf + 1, sizeof *r->features);
	r->loggers = calloc(nl + 1, sizeof *r->loggers);
	r->namespaces = calloc(n_mod + 1, sizeof *r->namespaces);
	if (!r->features || !r->loggers || !r->namespaces) {
		dli_registry_finish(r);
		return dli_error_set(err, -ENOMEM, NULL, "out of memory");
	}
	for (size_t i = 0; i < n_mod; i++) {
		const struct dli_module *m = dli_loader_module(loader, i);
		const char *path = dli_loader_path(loader, i);
		for (size_t k = 0; k < m->n_features; k++) {
			const struct dli_feature_desc *d = m->features[k];
			const char *ns = m->ns ? m->ns : DLI_NS_BASE;
			const struct dli_feature_entry *old = dli_registry_feature_in(r, ns, d->name);
			for (size_t a = 0; !old && d->aliases && d->aliases[a]; a++)
				old = dli_registry_feature_in(r, ns, d->aliases[a]);
			if (old) {
				int rc = clash(err, "feature", d->name, old->path, path);
				dli_registry_finish(r);
				return rc;
			}
			r->features[r->n_features++] = (struct dli_feature_entry){d, m, path};
		}
		for (size_t k = 0; k < m->n_loggers; k++) {
			const struct dli_logger_desc *d = m->loggers[k];
			const struct dli_logger_entry *old = dli_registry_logger(r, d->name);
			if (old) {
				int rc = clash(err, "logger", d->name, old->path, path);
				dli_registry_finish(r);
				return rc;
			}
			r->loggers[r->n_loggers++] = (struct dli_logger_entry){d, m, path};
		}
		if (m->ns && !dli_registry_has_namespace(r, m->ns))
			r->namespaces[r->n_namespaces++] = m->ns;
	}
	return 0;
}

void dli_registry_finish(struct dli_registry *r)
{
	free(r->features);
	free(r->loggers);
	free(r->namespaces);
	memset(r, 0, sizeof *r);
}

/* ---- Parameter ranges (docs/plugins.md: struct dli_param_desc's bounded, min, max) ---- */

const char *dli_param_range_text(const struct dli_param_desc *d, char *buf, size_t size)
{
	bool lo = d->bounded && d->min > -INFINITY, hi = d->bounded && d->max < INFINITY;

	if (lo && hi)
		snprintf(buf, size, "in [%g, %g]", d->min, d->max);
	else if (lo)
		snprintf(buf, size, ">= %g", d->min);
	else if (hi)
		snprintf(buf, size, "<= %g", d->max);
	else if (size)
		buf[0] = '\0';
	return buf;
}

bool dli_param_number_ok(const struct dli_param_desc *d, double x, const char *text, char *why,
			 size_t size)
{
	char range[96];
	const char *kind = d->type == DLI_PARAM_INT ? "an integer" : "a number";

	dli_param_range_text(d, range, sizeof range);
	/* The comparisons are false for NaN: it fails both ways, bounded or not. */
	if (x >= (d->bounded ? d->min : -INFINITY) && x <= (d->bounded ? d->max : INFINITY))
		return true;
	snprintf(why, size, "expected %s%s%s, got '%s'", kind, range[0] ? " " : "", range, text);
	return false;
}
