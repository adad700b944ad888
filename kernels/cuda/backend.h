/* The CUDA backend module (dli_cuda.so, built when nvcc is found): its name, and its ops found in
 * the module its entry returns, for the programs that open it without the core (tests/cuda). The
 * interface itself, struct dli_backend_desc and struct dli_backend_ops, is the module ABI's
 * (dlinspect/plugin.h): the core loads this module through its loader like any other, on the
 * first CUDA tensor. */
#ifndef DLI_CUDA_BACKEND_H
#define DLI_CUDA_BACKEND_H

#include <stddef.h>

#include <dlinspect/plugin.h>

#define DLI_CUDA_BACKEND_FILE "dli_cuda" /* the module's name: <name>.so */

/* The ops of `m`'s CUDA backend, or NULL. */
static inline const struct dli_backend_ops *dli_cuda_backend_ops(const struct dli_module *m)
{
	if (!m || !DLI_HAS_MEMBER(m, struct dli_module, n_backends))
		return NULL;
	for (size_t i = 0; i < m->n_backends; i++)
		if (m->backends[i] && m->backends[i]->device == DLI_DEVICE_CUDA)
			return m->backends[i]->ops;
	return NULL;
}

#endif
