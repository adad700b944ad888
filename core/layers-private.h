/* Layer handles by name (core/layers.c). */
#ifndef DLI_LAYERS_PRIVATE_H
#define DLI_LAYERS_PRIVATE_H

#include <stddef.h>

#include <dlinspect/dlinspect.h>

struct dli_layer_table;

/* An empty table of `cap` slots (a power of two), or NULL when out of memory; destroying frees
 * it and every older table it kept (accepts NULL), not the layers. */
struct dli_layer_table *dli_layer_table_create(size_t cap);
void dli_layer_table_destroy(struct dli_layer_table *t);

/* The handle for `name` if it exists, else NULL. Lock-free: the string-taking calls use it on every
 * call. */
struct dli_layer *dli_layer_find(struct dli_context *ctx, const char *name);

#endif
