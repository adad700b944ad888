/* Drives the installed jsonl.so directly with values the demo never produces: NaN, +-inf, a name
 * that needs JSON escaping, an iteration above 2^32. Writes to argv[2]; check_output.py reads it.
 *   jsonl_edge PATH_TO_jsonl.so OUT_FILE */
#define _POSIX_C_SOURCE 200809L
#include <dlfcn.h>
#include <math.h>
#include <stdio.h>

#include <dlinspect/plugin.h>

int main(int argc, char **argv)
{
	if (argc != 3)
		return 2;
	void *so = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
	if (!so) {
		fprintf(stderr, "%s\n", dlerror());
		return 1;
	}
	dli_module_entry_fn entry = (dli_module_entry_fn)dlsym(so, DLI_MODULE_ENTRY_NAME);
	/* The logger uses nothing from the host table: the ABI numbers are enough. */
	static const struct dli_host host = {.size = sizeof host, .abi_major = DLI_ABI_MAJOR,
					     .abi_minor = DLI_ABI_MINOR};
	const struct dli_module *m = entry ? entry(&host) : NULL;
	if (!m || m->n_loggers != 1 || m->loggers[0]->n_params != 1) {
		fprintf(stderr, "unexpected module descriptor\n");
		return 1;
	}
	const struct dli_logger_ops *ops = m->loggers[0]->ops;
	struct dli_value path = {.type = DLI_PARAM_STRING, .set = true, .u.s = argv[2]};
	struct dli_logger_create_args args = {.size = sizeof args, .host = &host, .params = &path,
					      .n_params = 1, .log_dir = ".", .rank = 0,
					      .world_size = 1};
	struct dli_error err = {0};
	void *logger;
	if (ops->create(&args, &logger, &err)) {
		fprintf(stderr, "create: %s\n", err.message);
		return 1;
	}
	int rc = ops->log_scalar(logger, "nan", 1, NAN);
	rc |= ops->log_scalar(logger, "inf", 2, INFINITY);
	rc |= ops->log_scalar(logger, "-inf", 3, -INFINITY);
	rc |= ops->log_scalar(logger, "q\"b\\s/\t\n\x01", 4, 0.1);
	rc |= ops->log_scalar(logger, "big", 5000000000LL, -1e300);
	rc |= ops->flush(logger);
	ops->destroy(logger);
	dlclose(so);
	return rc ? 1 : 0;
}
