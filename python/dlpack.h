/* The DLPack structs the extension reads (the data-interchange ABI of dmlc/dlpack, versions 0.x
 * and 1.x), declared here from the specification so that nothing else needs installing. Only the
 * members dlinspect reads are relied on; the layout is the spec's and must not change. */
#ifndef DLI_PY_DLPACK_H
#define DLI_PY_DLPACK_H

#include <stdint.h>

/* Device types (DLDeviceType). */
enum {
	DLI_DL_CPU = 1,
	DLI_DL_CUDA = 2,
	DLI_DL_CUDA_HOST = 3, /* pinned host memory: readable from the CPU */
	DLI_DL_ROCM = 10,
	DLI_DL_CUDA_MANAGED = 13,
};

/* Type codes (DLDataTypeCode); the float8 codes came with DLPack 1.1. */
enum {
	DLI_DL_INT = 0,
	DLI_DL_UINT = 1,
	DLI_DL_FLOAT = 2,
	DLI_DL_OPAQUE = 3,
	DLI_DL_BFLOAT = 4,
	DLI_DL_COMPLEX = 5,
	DLI_DL_BOOL = 6,
	DLI_DL_FLOAT8_E3M4 = 7,
	DLI_DL_FLOAT8_E4M3 = 8,
	DLI_DL_FLOAT8_E4M3B11FNUZ = 9,
	DLI_DL_FLOAT8_E4M3FN = 10,
	DLI_DL_FLOAT8_E4M3FNUZ = 11,
	DLI_DL_FLOAT8_E5M2 = 12,
	DLI_DL_FLOAT8_E5M2FNUZ = 13,
};

/* DLManagedTensorVersioned.flags */
#define DLI_DL_FLAG_READ_ONLY (UINT64_C(1) << 0)

struct dli_dl_device {
	int32_t device_type;
	int32_t device_id;
};

struct dli_dl_dtype {
	uint8_t code;
	uint8_t bits;
	uint16_t lanes;
};

struct dli_dl_tensor {
	void *data;
	struct dli_dl_device device;
	int32_t ndim;
	struct dli_dl_dtype dtype;
	int64_t *shape;
	int64_t *strides; /* in elements; NULL = row-major contiguous */
	uint64_t byte_offset;
};

/* Capsule "dltensor" (DLPack < 1.0). */
struct dli_dl_managed {
	struct dli_dl_tensor dl_tensor;
	void *manager_ctx;
	void (*deleter)(struct dli_dl_managed *self);
};

struct dli_dl_version {
	uint32_t major;
	uint32_t minor;
};

/* Capsule "dltensor_versioned" (DLPack >= 1.0). */
struct dli_dl_managed_versioned {
	struct dli_dl_version version;
	void *manager_ctx;
	void (*deleter)(struct dli_dl_managed_versioned *self);
	uint64_t flags;
	struct dli_dl_tensor dl_tensor;
};

#endif
