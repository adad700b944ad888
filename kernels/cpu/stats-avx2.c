/* placeholder until written */
typedef int dli_placeholder_cpu_stats_avx2;
