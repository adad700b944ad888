/* placeholder until written */
#include <dlinspect/plugin.h>
static const struct dli_module module = {sizeof module, DLI_ABI_MAJOR, DLI_ABI_MINOR, "log_fp8_tensor_stats", "transformer_engine", "placeholder", 0, 0, 0, 0};
DLI_EXPORT const struct dli_module *DLI_MODULE_ENTRY(const struct dli_host *host) { (void)host; return &module; }
