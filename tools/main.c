/* `dlinspect`: validate configs, list plugins, run benchmarks. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <dlinspect/version.h>

#include "cmd.h"

static const char usage[] =
	"usage: dlinspect COMMAND [ARGS]\n"
	"\n"
	"commands:\n"
	"  check CONFIG [--layer NAME]...   validate a config; with --layer, show which features\n"
	"                                   apply to which gemm/tensor of that layer;\n"
	"                                   --allow-tensor NAME accepts a host's own tensor;\n"
	"                                   --allow-module-path lets `extensions` name module\n"
	"                                   files by path (refused otherwise); --plugin-dir DIR\n"
	"                                   searches DIR first (repeatable)\n"
	"  plugins [--explain [NAME]] [--plugin-dir DIR]...\n"
	"                                   list the modules found, their features and loggers;\n"
	"                                   --explain adds every parameter with type, default, doc\n"
	"  stats FILE [--tensor NAME]... [--stats a,b,...] [--fp8 e4m3|e5m2] [--margin N]\n"
	"        [--dtype bf16|f16|e4m3|e5m2|int] [--json]\n"
	"                                   statistics of a tensor saved as .npy or .safetensors;\n"
	"                                   --dtype reads raw 2- or 1-byte .npy data as that type\n"
	"  compare RUN_A RUN_B [--rtol X] [--atol X] [--rank N] [--strict] [--tags REGEX]\n"
	"          [--json] [--plot FILE.png]\n"
	"                                   where two runs' statistics logs differ: per tag, the\n"
	"                                   first iteration beyond tolerance; exit 1 if any\n"
	"  bench dispatch [--json]          time the per-call cost of the host API\n"
	"  bench stats [--json] [--size-mib N] [--threads N] [--only NAME,...]\n"
	"                                   statistics throughput against the read bandwidth\n"
	"  doctor [--communicator NAME] [--timeout S]\n"
	"                                   under mpirun: every rank's host, a timed all-reduce\n"
	"                                   and barrier, naming the ranks that do not answer\n"
	"  --version                        print the version\n"
	"\n"
	"Environment: DLINSPECT_PLUGIN_PATH (':'-separated plugin dirs searched before the\n"
	"installed ones), DLINSPECT_LOG_LEVEL (error, warning, info, debug).\n";

bool dli_cmd_plugin_dir(const char *cmd, const char *dir)
{
	struct stat st;
	if (!dir[0])
		fprintf(stderr, "dlinspect %s: --plugin-dir '': expected a directory, got an empty "
			"name ('.' for the working directory)\n", cmd);
	else if (stat(dir, &st))
		fprintf(stderr, "dlinspect %s: --plugin-dir '%s': %s\n", cmd, dir, strerror(errno));
	else if (!S_ISDIR(st.st_mode))
		fprintf(stderr, "dlinspect %s: --plugin-dir '%s': not a directory\n", cmd, dir);
	else
		return true;
	return false;
}

bool dli_cmd_decimal(const char *v, double *out)
{
	const char *p = v + (*v == '+' || *v == '-');
	size_t digits = strspn(p, "0123456789");
	p += digits;
	if (*p == '.') {
		size_t frac = strspn(p + 1, "0123456789");
		digits += frac;
		p += 1 + frac;
	}
	if (!digits)
		return false;
	if (*p == 'e' || *p == 'E') {
		p += 1 + (p[1] == '+' || p[1] == '-');
		size_t exp = strspn(p, "0123456789");
		if (!exp)
			return false;
		p += exp;
	}
	if (*p)
		return false;
	errno = 0;
	*out = strtod(v, NULL);
	/* ERANGE on underflow too; a tiny value read as 0 or subnormal is still that value */
	return isfinite(*out) && !(errno == ERANGE && fabs(*out) > 1);
}

int main(int argc, char **argv)
{
	if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") ||
	    !strcmp(argv[1], "help")) {
		fputs(usage, argc < 2 ? stderr : stdout);
		return argc < 2 ? 2 : 0;
	}
	if (!strcmp(argv[1], "--version")) {
		printf("dlinspect %s (module ABI %d.%d)\n", DLI_VERSION_STRING, DLI_ABI_MAJOR,
		       DLI_ABI_MINOR);
		return 0;
	}
	/* COMMAND --help, for the commands with no usage text of their own (stats and compare print
	 * theirs): the full one, which lists their options; a success, as asking for help is. */
	if (argc >= 3 && (!strcmp(argv[2], "--help") || !strcmp(argv[2], "-h")) &&
	    (!strcmp(argv[1], "check") || !strcmp(argv[1], "plugins") ||
	     !strcmp(argv[1], "bench") || !strcmp(argv[1], "doctor"))) {
		fputs(usage, stdout);
		return 0;
	}
	if (!strcmp(argv[1], "check"))
		return dli_cmd_check(argc - 1, argv + 1);
	if (!strcmp(argv[1], "plugins"))
		return dli_cmd_plugins(argc - 1, argv + 1);
	if (!strcmp(argv[1], "stats"))
		return dli_cmd_stats(argc - 1, argv + 1);
	if (!strcmp(argv[1], "compare"))
		return dli_cmd_compare(argc - 1, argv + 1);
	if (!strcmp(argv[1], "bench"))
		return dli_cmd_bench(argc - 1, argv + 1);
	if (!strcmp(argv[1], "doctor"))
		return dli_cmd_doctor(argc - 1, argv + 1);
	fprintf(stderr, "dlinspect: unknown command '%s'\n\n%s", argv[1], usage);
	return 2;
}
