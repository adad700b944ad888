/* The one table of the names GEMMs, standard tensors and dtypes go by: in configs, messages, the
 * CLI's output and the CUDA backend's errors. Header-only (static inline), so that the core, the
 * CLI (through core/tools-api.h) and kernels/cuda (compiled as C++ by nvcc, not linked with the
 * core) all read the same table. Each accessor answers NULL outside its enum's range: the caller
 * picks the text for that ("?", "unknown dtype"). */
#ifndef DLI_NAMES_PRIVATE_H
#define DLI_NAMES_PRIVATE_H

#include <dlinspect/dlinspect.h>
#include <dlinspect/tensor.h>

/* TransformerEngine's names, indexed by enum dli_gemm (DLI_GEMM_COUNT entries). */
static inline const char *const *dli_gemm_names(void)
{
	static const char *const names[DLI_GEMM_COUNT] = {"fprop", "dgrad", "wgrad"};
	return names;
}

static inline const char *dli_gemm_name(int gemm)
{
	return (unsigned)gemm < DLI_GEMM_COUNT ? dli_gemm_names()[gemm] : NULL;
}

/* The standard tensors, indexed by enum dli_tensor_kind (DLI_TENSOR_STANDARD_COUNT entries). */
static inline const char *const *dli_standard_tensor_names(void)
{
	static const char *const names[DLI_TENSOR_STANDARD_COUNT] = {
		"activation", "gradient", "weight", "output", "wgrad", "dgrad",
	};
	return names;
}

static inline const char *dli_standard_tensor_name(int tensor)
{
	return (unsigned)tensor < DLI_TENSOR_STANDARD_COUNT ? dli_standard_tensor_names()[tensor]
							     : NULL;
}

/* Per enum dli_dtype: the name messages use ("f8e4m3"), and the one the CLI's --dtype and --fp8
 * take and its output prints ("e4m3"; NULL for the dtypes the CLI reads as wide integers or
 * doubles, tools/tensorfile.c). */
struct dli_dtype_names {
	const char *name;
	const char *cli;
};

static inline const struct dli_dtype_names *dli_dtype_name_table(void)
{
	static const struct dli_dtype_names table[DLI_DTYPE_COUNT] = {
		/* in enum dli_dtype's order */
		{"f32", "f32"},       {"f16", "f16"},       {"bf16", "bf16"}, {"f8e4m3", "e4m3"},
		{"f8e5m2", "e5m2"},   {"f64", NULL},        {"i8", NULL},     {"u8", NULL},
		{"i32", NULL},        {"i64", NULL},
	};
	return table;
}

static inline const char *dli_dtype_name(int dtype)
{
	return (unsigned)dtype < DLI_DTYPE_COUNT ? dli_dtype_name_table()[dtype].name : NULL;
}

static inline const char *dli_dtype_cli_name(int dtype)
{
	return (unsigned)dtype < DLI_DTYPE_COUNT ? dli_dtype_name_table()[dtype].cli : NULL;
}

#endif
