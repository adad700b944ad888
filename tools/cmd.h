/* The dlinspect command-line tool's subcommands. Each returns the process exit status. */
#ifndef DLI_TOOLS_CMD_H
#define DLI_TOOLS_CMD_H

#include <stdbool.h>

int dli_cmd_check(int argc, char **argv);
int dli_cmd_plugins(int argc, char **argv);
int dli_cmd_bench(int argc, char **argv);
/* `dlinspect doctor` (tools/doctor.c): can the ranks talk (docs/distributed.md). */
int dli_cmd_doctor(int argc, char **argv);
int dli_cmd_stats(int argc, char **argv);
int dli_cmd_compare(int argc, char **argv);

/* A command-line number, written in decimal as `--rtol 1e-3` is: optional sign, digits with an
 * optional point, an optional exponent; nothing before or after it (strtod alone also takes
 * leading blanks, hex, "inf" and "nan"). false when v is not one, or is out of double's range. */
bool dli_cmd_decimal(const char *v, double *out);

/* Whether `dir`, a --plugin-dir of `dlinspect cmd`, is a directory; when not, says why on stderr.
 * A dir the user names is meant to be searched, so a missing one is a mistake, whereas the plugin
 * path's own dirs, like PATH's, may be missing. */
bool dli_cmd_plugin_dir(const char *cmd, const char *dir);

/* `dlinspect bench stats` (tools/bench-stats.c); argv[0] is "stats". */
int dli_bench_stats(int argc, char **argv);

#endif
