/* placeholder until written */
typedef int dli_placeholder_cpu_fp8_avx512;
