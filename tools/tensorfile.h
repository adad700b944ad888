/* Readers for tensors saved to disk as .npy or .safetensors: the file is mapped read-only, every
 * header field, size and offset is checked against it, and the tensors come back as borrowed views
 * into the mapping. Used by `dlinspect stats`. */
#ifndef DLI_TOOLS_TENSORFILE_H
#define DLI_TOOLS_TENSORFILE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <dlinspect/dlinspect.h>
#include <dlinspect/tensor.h>

/* NumPy's own limit (NPY_MAXDIMS in NumPy 2); a safetensors file is held to the same. */
#define DLI_TF_MAX_DIMS 64

enum dli_tf_format {
	DLI_TF_NPY,
	DLI_TF_SAFETENSORS,
};

/* Elements the statistics kernels do not read (they take the training dtypes): float64 and
 * integers. `dlinspect stats` widens them to double itself. DLI_TF_WIDE_NONE: `dtype` says. */
enum dli_tf_wide {
	DLI_TF_WIDE_NONE = 0,
	DLI_TF_WIDE_F64,
	DLI_TF_WIDE_I8,
	DLI_TF_WIDE_I16,
	DLI_TF_WIDE_I32,
	DLI_TF_WIDE_I64,
	DLI_TF_WIDE_U8,
	DLI_TF_WIDE_U16,
	DLI_TF_WIDE_U32,
	DLI_TF_WIDE_U64,
	DLI_TF_WIDE_BOOL,
	DLI_TF_WIDE_COUNT
};

/* --dtype int: a .npy file's 1- and 2-byte integers (which may hold raw bf16 or FP8 bytes, so they
 * are not read without --dtype) read as the integers they are. */
#define DLI_TF_AS_INT 1000

struct dli_tf_tensor {
	char *name;             /* owned; UTF-8 without NUL (.npy: the file name less .npy) */
	char *file_dtype;       /* owned; as the file spells it ("F32", "<f4") */
	bool supported;         /* false: a dtype the statistics cannot read (`dtype` unset) */
	enum dli_dtype dtype;   /* how the bytes are read (unless `wide` is set) */
	enum dli_tf_wide wide;  /* float64 or integer elements, else DLI_TF_WIDE_NONE */
	bool reinterpreted;     /* .npy raw '<u2' / '|u1' elements read as --dtype says */
	bool fortran_order;     /* .npy only; statistics do not depend on the element order */
	int ndim;
	int64_t *shape;         /* owned; ndim entries (NULL for ndim 0) */
	int64_t numel;          /* product of the shape (1 for ndim 0), checked for overflow */
	const void *data;       /* borrowed from the mapping: nbytes bytes, all inside the file */
	uint64_t nbytes;
};

struct dli_tensorfile {
	enum dli_tf_format format;
	void *map;              /* the whole file, PROT_READ (or the caller's buffer) */
	size_t size;
	bool mapped;            /* map is ours to unmap (dli_tensorfile_open) */
	struct dli_tf_tensor *tensors; /* owned; in the order of the file's header */
	size_t n_tensors;
};

/* Maps `path` and reads its header. The format comes from the content (.npy magic) or, failing
 * that, from a safetensors-shaped start or the .safetensors suffix. `as_dtype` is -1, or the dtype
 * to read a .npy file's raw integer/void elements as (bf16 from 2-byte, e4m3/e5m2 from 1-byte ones;
 * f32/f16 are accepted when they match), or DLI_TF_AS_INT (integers as integers); safetensors
 * files name their dtypes and refuse it.
 * Returns 0, or a negative errno with err->message saying what is wrong (without the path: the
 * caller prefixes it). On success release *tf with dli_tensorfile_close; on failure nothing is
 * left to release. */
int dli_tensorfile_open(struct dli_tensorfile *tf, const char *path, int as_dtype,
			struct dli_error *err);

/* The same for a file's bytes already in memory (`data`, `size` bytes, borrowed: they must outlive
 * *tf; the views point into them). `path` only stands for the file's name: its suffix and, for a
 * .npy file, the tensor's name. Used by the fuzzer (tests/fuzz), where an exact-size buffer lets
 * AddressSanitizer see a read past the end that a page-rounded mapping would hide. */
int dli_tensorfile_read(struct dli_tensorfile *tf, const void *data, size_t size, const char *path,
			int as_dtype, struct dli_error *err);

/* Unmaps and frees; accepts a zeroed or closed *tf. Views into the mapping die with it. */
void dli_tensorfile_close(struct dli_tensorfile *tf);

/* The element size and name ("f64", "i32", "u8", "bool", ...) of a wide kind; 0 / NULL for NONE. */
size_t dli_tf_wide_size(enum dli_tf_wide wide);
const char *dli_tf_wide_name(enum dli_tf_wide wide);
/* How a tensor's elements were read: the wide kind's name, else the dtype's. */
const char *dli_tf_tensor_dtype_name(const struct dli_tf_tensor *t);

/* "f32", "f16", "bf16", "e4m3", "e5m2" (the names --dtype and --fp8 take), or NULL. */
const char *dli_tf_dtype_name(enum dli_dtype dtype);
/* The dtype of one of those names, or -1. */
int dli_tf_dtype_from_name(const char *name);

#endif
