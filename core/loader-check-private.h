/* Descriptor checks and copies (core/loader-check.c). */
#ifndef DLI_LOADER_CHECK_PRIVATE_H
#define DLI_LOADER_CHECK_PRIVATE_H

#include <stddef.h>
#include <stdint.h>

#include <dlinspect/plugin.h>

/* What any module fills, whatever its version: enough to read the ABI it was built for. The sizes
 * of ABI 1.0's tables are in dlinspect/plugin.h. */
#define DLI_MODULE_HEADER_SIZE (offsetof(struct dli_module, abi_minor) + sizeof(uint16_t))

struct dli_loaded {
	void *handle; /* lt_dlhandle (core/loader.c) */
	char *path; /* as opened */
	char *real; /* resolved, so that one file reached twice is loaded once */
	char *name; /* file name without ".so" (equal to module->name) */
	/* The host's copy of the module's descriptors (see dli_module_copy): valid until closed. */
	const struct dli_module *module;
	void **copies; /* every block of that copy, owned */
	size_t n_copies;
};

/* Whether `mod`, found as `name` at `path`, is a module this host can use: ABI, sizes, names and
 * required methods; -ENOEXEC/-EINVAL with *err naming the module otherwise. */
int dli_module_check(const struct dli_module *mod, const char *name, const char *path,
		     struct dli_error *err);
/* Replaces m->module by the host's copy of it (blocks owned by m->copies); -ENOMEM. */
int dli_module_copy(struct dli_loaded *m);
/* A param range the core could never satisfy is the module's bug: refused at load. */
int dli_params_check(const struct dli_param_desc *p, size_t n, const char *owner,
		     const char *name, const char *path, struct dli_error *err);

#endif
