/* placeholder */
#include <dlinspect/plugin.h>
DLI_EXPORT const struct dli_module *DLI_MODULE_ENTRY(const struct dli_host *host) { (void)host; return 0; }
