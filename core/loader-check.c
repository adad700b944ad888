/* A module's descriptor checked against the ABI it says it was built for, and copied into tables of
 * this dlinspect's sizes, before any other part of the core reads it. */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "error-private.h"
#include "loader-check-private.h"

/* The stride of a descriptor's params array. struct dli_param_desc carries no size: the
 * descriptor's param_size gives it (1.1); without it, the size of the minor the module was built
 * for, which this host knows unless the module is newer. */
static int param_stride(const struct dli_module *mod, size_t param_size, size_t n_params,
			size_t *stride)
{
	*stride = mod->abi_minor == 0 ? DLI_PARAM_DESC_SIZE_1_0 : DLI_PARAM_DESC_SIZE_1_1;
	if (param_size) {
		if (param_size < DLI_PARAM_DESC_SIZE_1_0)
			return -ENOEXEC;
		*stride = param_size;
	} else if (mod->abi_minor > DLI_ABI_MINOR && n_params) {
		return -EINVAL;
	}
	return 0;
}

static const char *param_stride_why(int r)
{
	return r == -ENOEXEC ? "param_size is smaller than ABI 1.0's struct dli_param_desc"
			     : "built for a newer minor ABI than this dlinspect's without param_size "
			       "(= DLI_PARAM_SIZE): its params cannot be read";
}

/* A zero-filled block of `want` bytes holding the first min(have, want) bytes of `src`, owned by
 * `m`; NULL when out of memory. */
static void *copy_block(struct dli_loaded *m, const void *src, size_t have, size_t want)
{
	void **v = realloc(m->copies, (m->n_copies + 1) * sizeof(*v));
	if (!v)
		return NULL;
	m->copies = v;
	void *p = calloc(1, want ? want : 1);
	if (!p)
		return NULL;
	memcpy(p, src, have < want ? have : want);
	m->copies[m->n_copies++] = p;
	return p;
}

/* A table whose first member is its uint32_t size: copied at the host's size, its size member
 * clamped to what the copy holds, so DLI_HAS_MEMBER on the copy stays true to the module. */
static void *copy_table(struct dli_loaded *m, const void *src, size_t want)
{
	uint32_t have;
	memcpy(&have, src, sizeof have);
	uint32_t *p = copy_block(m, src, have, want);
	if (p && have > want)
		*p = (uint32_t)want;
	return p;
}

static const struct dli_param_desc *copy_params(struct dli_loaded *m, const struct dli_param_desc *src,
						size_t n, size_t stride)
{
	struct dli_param_desc *v = copy_block(m, "", 0, n * sizeof(*v));
	for (size_t i = 0; v && i < n; i++)
		memcpy(&v[i], (const char *)src + i * stride, stride < sizeof(*v) ? stride : sizeof(*v));
	return v;
}

/* The host's view of a checked module: every descriptor, ops table and param array copied into
 * zero-filled blocks of this dlinspect's sizes, so the rest of the core reads every member it
 * knows, and members a module's older headers lacked read as NULL / 0 (absent, optional). The
 * module's own data is read only as far as its sizes say. */
int dli_module_copy(struct dli_loaded *m)
{
	const struct dli_module *src = m->module;
	struct dli_module *mod = copy_table(m, src, sizeof(*mod));
	if (!mod)
		return -ENOMEM;
	const struct dli_feature_desc **fv = NULL;
	const struct dli_logger_desc **lv = NULL;
	if (src->n_features && !(fv = copy_block(m, "", 0, src->n_features * sizeof(*fv))))
		return -ENOMEM;
	if (src->n_loggers && !(lv = copy_block(m, "", 0, src->n_loggers * sizeof(*lv))))
		return -ENOMEM;
	for (size_t i = 0; i < src->n_features; i++) {
		struct dli_feature_desc *f = copy_table(m, src->features[i], sizeof(*f));
		if (!f || !(f->ops = copy_table(m, src->features[i]->ops, sizeof(*f->ops))))
			return -ENOMEM;
		size_t stride;
		param_stride(src, f->param_size, f->n_params, &stride);
		if (f->n_params && !(f->params = copy_params(m, f->params, f->n_params, stride)))
			return -ENOMEM;
		f->param_size = sizeof(struct dli_param_desc);
		fv[i] = f;
	}
	for (size_t i = 0; i < src->n_loggers; i++) {
		struct dli_logger_desc *l = copy_table(m, src->loggers[i], sizeof(*l));
		if (!l || !(l->ops = copy_table(m, src->loggers[i]->ops, sizeof(*l->ops))))
			return -ENOMEM;
		size_t stride;
		param_stride(src, l->param_size, l->n_params, &stride);
		if (l->n_params && !(l->params = copy_params(m, l->params, l->n_params, stride)))
			return -ENOMEM;
		l->param_size = sizeof(struct dli_param_desc);
		lv[i] = l;
	}
	mod->features = fv;
	mod->loggers = lv;
	/* Communicators (1.2): a module whose table ends before them has none. */
	if (!DLI_HAS_MEMBER(mod, struct dli_module, n_comms)) {
		mod->comms = NULL;
		mod->n_comms = 0;
	}
	if (mod->n_comms) {
		const struct dli_comm_desc **cv = copy_block(m, "", 0, mod->n_comms * sizeof(*cv));
		if (!cv)
			return -ENOMEM;
		for (size_t i = 0; i < mod->n_comms; i++) {
			struct dli_comm_desc *d = copy_table(m, mod->comms[i], sizeof(*d));
			if (!d || !(d->ops = copy_table(m, mod->comms[i]->ops, sizeof(*d->ops))))
				return -ENOMEM;
			cv[i] = d;
		}
		mod->comms = cv;
	}
	/* Backends (1.3): the same, for a module whose table ends before them. */
	if (!DLI_HAS_MEMBER(mod, struct dli_module, n_backends)) {
		mod->backends = NULL;
		mod->n_backends = 0;
	}
	if (mod->n_backends) {
		const struct dli_backend_desc **bv = copy_block(m, "", 0,
								mod->n_backends * sizeof(*bv));
		if (!bv)
			return -ENOMEM;
		for (size_t i = 0; i < mod->n_backends; i++) {
			struct dli_backend_desc *d = copy_table(m, mod->backends[i], sizeof(*d));
			if (!d || !(d->ops = copy_table(m, mod->backends[i]->ops, sizeof(*d->ops))))
				return -ENOMEM;
			bv[i] = d;
		}
		mod->backends = bv;
	}
	m->module = mod;
	return 0;
}

/* A range the core could never satisfy is the module's bug: say so at load, not at every config. */
int dli_params_check(const struct dli_param_desc *p, size_t n, const char *owner,
			    const char *name, const char *path, struct dli_error *err)
{
	for (size_t i = 0; i < n; i++) {
		if (!p[i].bounded)
			continue;
		if ((p[i].type != DLI_PARAM_INT && p[i].type != DLI_PARAM_FLOAT) ||
		    !(p[i].min <= p[i].max))
			return dli_error_set(err, -EINVAL, NULL,
					     "module '%s' (%s): %s: param '%s' has the range [%g, %g]%s",
					     name, path, owner, p[i].key ? p[i].key : "(null)", p[i].min,
					     p[i].max, p[i].min <= p[i].max ? " but is not a number" : "");
	}
	return 0;
}

int dli_module_check(const struct dli_module *mod, const char *name, const char *path,
			    struct dli_error *err)
{
	if (mod->size < DLI_MODULE_HEADER_SIZE)
		return dli_error_set(err, -ENOEXEC, NULL,
				     "module '%s' (%s): descriptor size %u is too small to be a dlinspect "
				     "module", name, path, (unsigned)mod->size);
	if (mod->abi_major != DLI_ABI_MAJOR)
		return dli_error_set(err, -ENOEXEC, NULL,
				     "module '%s' (%s) was built for dlinspect module ABI %u.%u, this "
				     "dlinspect has ABI %d.%d", name, path, (unsigned)mod->abi_major,
				     (unsigned)mod->abi_minor, DLI_ABI_MAJOR, DLI_ABI_MINOR);
	if (mod->size < DLI_MODULE_SIZE_1_0)
		return dli_error_set(err, -ENOEXEC, NULL,
				     "module '%s' (%s): descriptor size %u, ABI %d needs at least %zu", name,
				     path, (unsigned)mod->size, DLI_ABI_MAJOR, DLI_MODULE_SIZE_1_0);
	if (!mod->name)
		return dli_error_set(err, -EINVAL, NULL, "module %s has no name", path);
	if (strcmp(mod->name, name) != 0)
		return dli_error_set(err, -EINVAL, NULL,
				     "module %s calls itself '%s': a module's name must match its file "
				     "name (%s.so)", path, mod->name, name);
	if ((mod->n_features && !mod->features) || (mod->n_loggers && !mod->loggers))
		return dli_error_set(err, -EINVAL, NULL,
				     "module '%s' (%s): %zu features and %zu loggers declared but no array",
				     name, path, mod->n_features, mod->n_loggers);

	for (size_t i = 0; i < mod->n_features; i++) {
		const struct dli_feature_desc *f = mod->features[i];
		if (!f)
			return dli_error_set(err, -EINVAL, NULL,
					     "module '%s' (%s): feature #%zu is NULL", name, path, i);
		/* Every member of ABI 1.0 must be there; later ones read as 0 when absent. */
		if (f->size < DLI_FEATURE_DESC_SIZE_1_0)
			return dli_error_set(err, -ENOEXEC, NULL,
					     "module '%s' (%s): feature #%zu has descriptor size %u, ABI %d "
					     "needs at least %zu", name, path, i, (unsigned)f->size,
					     DLI_ABI_MAJOR, (size_t)DLI_FEATURE_DESC_SIZE_1_0);
		if (!f->name || !*f->name)
			return dli_error_set(err, -EINVAL, NULL,
					     "module '%s' (%s): feature #%zu has no name", name, path, i);
		if (!f->ops)
			return dli_error_set(err, -EINVAL, NULL,
					     "module '%s' (%s): feature '%s' has no ops table", name, path,
					     f->name);
		if (!DLI_HAS_MEMBER(f->ops, struct dli_feature_ops, create))
			return dli_error_set(err, -EINVAL, NULL,
					     "module '%s' (%s): feature '%s' has an ops table of size %u, "
					     "too small to hold create", name, path, f->name,
					     (unsigned)f->ops->size);
		if (!f->ops->create)
			return dli_error_set(err, -EINVAL, NULL,
					     "module '%s' (%s): feature '%s' has no create method", name,
					     path, f->name);
		if (f->n_params && !f->params)
			return dli_error_set(err, -EINVAL, NULL,
					     "module '%s' (%s): feature '%s' declares %zu params but no "
					     "array", name, path, f->name, f->n_params);
		size_t stride;
		int r = param_stride(mod, DLI_HAS_MEMBER(f, struct dli_feature_desc, param_size)
						       ? f->param_size : 0, f->n_params, &stride);
		if (r < 0)
			return dli_error_set(err, r, NULL,
					     "module '%s' (%s): feature '%s': %s", name, path, f->name,
					     param_stride_why(r));
	}

	size_t n_comms = DLI_HAS_MEMBER(mod, struct dli_module, n_comms) ? mod->n_comms : 0;
	if (n_comms && !mod->comms)
		return dli_error_set(err, -EINVAL, NULL,
				     "module '%s' (%s): %zu communicators declared but no array", name,
				     path, n_comms);
	for (size_t i = 0; i < n_comms; i++) {
		const struct dli_comm_desc *c = mod->comms[i];
		if (!c || c->size < offsetof(struct dli_comm_desc, ops) + sizeof(void *) || !c->name ||
		    !*c->name || !c->ops)
			return dli_error_set(err, -EINVAL, NULL,
					     "module '%s' (%s): communicator #%zu is NULL, too small, "
					     "or has no name or ops table", name, path, i);
		const struct dli_comm_ops *o = c->ops;
		if (!DLI_HAS_MEMBER(o, struct dli_comm_ops, barrier) || !o->open || !o->rank ||
		    !o->world_size || !o->group_create || !o->allgather || !o->barrier)
			return dli_error_set(err, -EINVAL, NULL,
					     "module '%s' (%s): communicator '%s' lacks one of open, "
					     "rank, size, group_create, allgather, barrier", name, path,
					     c->name);
	}

	size_t n_backends = DLI_HAS_MEMBER(mod, struct dli_module, n_backends) ? mod->n_backends : 0;
	if (n_backends && !mod->backends)
		return dli_error_set(err, -EINVAL, NULL,
				     "module '%s' (%s): %zu backends declared but no array", name, path,
				     n_backends);
	for (size_t i = 0; i < n_backends; i++) {
		const struct dli_backend_desc *b = mod->backends[i];
		if (!b || b->size < DLI_BACKEND_DESC_SIZE_1_3 || !b->name || !*b->name || !b->ops)
			return dli_error_set(err, -EINVAL, NULL,
					     "module '%s' (%s): backend #%zu is NULL, too small, or has "
					     "no name or ops table", name, path, i);
		const struct dli_backend_ops *o = b->ops;
		if (o->size < DLI_BACKEND_OPS_SIZE_1_3 || !o->acc_create || !o->acc_destroy ||
		    !o->add || !o->add_quantized || !o->read || !o->reset)
			return dli_error_set(err, -EINVAL, NULL,
					     "module '%s' (%s): backend '%s' lacks one of acc_create, "
					     "acc_destroy, add, add_quantized, read, reset", name, path,
					     b->name);
	}

	for (size_t i = 0; i < mod->n_loggers; i++) {
		const struct dli_logger_desc *l = mod->loggers[i];
		if (!l)
			return dli_error_set(err, -EINVAL, NULL,
					     "module '%s' (%s): logger #%zu is NULL", name, path, i);
		if (l->size < DLI_LOGGER_DESC_SIZE_1_0)
			return dli_error_set(err, -ENOEXEC, NULL,
					     "module '%s' (%s): logger #%zu has descriptor size %u, ABI %d "
					     "needs at least %zu", name, path, i, (unsigned)l->size,
					     DLI_ABI_MAJOR, (size_t)DLI_LOGGER_DESC_SIZE_1_0);
		if (!l->name || !*l->name)
			return dli_error_set(err, -EINVAL, NULL,
					     "module '%s' (%s): logger #%zu has no name", name, path, i);
		if (!l->ops)
			return dli_error_set(err, -EINVAL, NULL,
					     "module '%s' (%s): logger '%s' has no ops table", name, path,
					     l->name);
		if (!DLI_HAS_MEMBER(l->ops, struct dli_logger_ops, log_scalar))
			return dli_error_set(err, -EINVAL, NULL,
					     "module '%s' (%s): logger '%s' has an ops table of size %u, "
					     "too small to hold create and log_scalar", name, path,
					     l->name, (unsigned)l->ops->size);
		if (!l->ops->create || !l->ops->log_scalar)
			return dli_error_set(err, -EINVAL, NULL,
					     "module '%s' (%s): logger '%s' lacks create or log_scalar", name,
					     path, l->name);
		if (l->n_params && !l->params)
			return dli_error_set(err, -EINVAL, NULL,
					     "module '%s' (%s): logger '%s' declares %zu params but no array",
					     name, path, l->name, l->n_params);
		size_t stride;
		int r = param_stride(mod, DLI_HAS_MEMBER(l, struct dli_logger_desc, param_size)
						       ? l->param_size : 0, l->n_params, &stride);
		if (r < 0)
			return dli_error_set(err, r, NULL,
					     "module '%s' (%s): logger '%s': %s", name, path, l->name,
					     param_stride_why(r));
	}
	return 0;
}
