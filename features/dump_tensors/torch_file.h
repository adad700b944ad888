/* A dict of tensors as PyTorch's torch.save writes it (its zip format: a pickle of the dict whose
 * tensors name their storages, each storage a record of its own), so that torch.load, with its
 * default weights_only=True, reads it back: DumpTensors' `format: torch`, the files
 * TransformerEngine's DumpTensors writes (docs/logging.md, "Tensor dumps"). Shared by the module
 * and its unit test (tests/dump/test_torch_file.c); links nothing. */
#ifndef DLI_DUMP_TORCH_FILE_H
#define DLI_DUMP_TORCH_FILE_H

#include <stddef.h>
#include <stdint.h>

#include <dlinspect/plugin.h>

/* One dict entry: `key` -> a contiguous CPU tensor of `dtype` (a safetensors name: "F32", "F16",
 * "BF16", "F64", "I8", "U8", "I32", "I64", "F8_E4M3", "F8_E5M2") and `shape`, its `bytes` bytes at
 * `data`. All borrowed. */
struct dli_torch_entry {
	const char *key;
	const char *dtype;
	int ndim;
	const int64_t *shape;
	const void *data;
	size_t bytes;
};

/* Writes the dict of the n entries (keys in this order; each key once) to `fd` as one torch.save
 * file, records in the zip64 form with their data aligned to 64 bytes, as torch.save aligns them.
 * Returns 0, -EINVAL for an unknown dtype or a shape that does not hold `bytes`, -ENOMEM, or the
 * negative errno of a failed write. */
int dli_torch_file_write(int fd, const struct dli_torch_entry *entries, size_t n);

/* Writes all n bytes of p to fd (again after EINTR and short writes): 0 or a negative errno. */
int dli_dump_write_all(int fd, const void *p, size_t n);

/* The CRC-32 (zip's, reflected polynomial 0xEDB88320) of n bytes, continued from `crc` (0 to
 * start). */
uint32_t dli_crc32(uint32_t crc, const void *data, size_t n);

#endif
