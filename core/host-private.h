/* The host table (core/host.c). */
#ifndef DLI_HOST_PRIVATE_H
#define DLI_HOST_PRIVATE_H

#include <dlinspect/plugin.h>

/* The host table every module gets (each context copies it). Entries may look at it before any
 * context exists, e.g. for `dlinspect plugins`. */
extern const struct dli_host dli_host_template;

#endif
