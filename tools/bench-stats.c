/* placeholder */
#include "cmd.h"
int dli_bench_stats(int argc, char **argv) { (void)argc; (void)argv; return 2; }
