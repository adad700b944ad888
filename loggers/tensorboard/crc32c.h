/* CRC-32C (Castagnoli), the checksum of TFRecord framing: an SSE4.2 path where the CPU has it and a
 * table path everywhere else. Internal to the TensorBoard logger and its tests. */
#ifndef DLI_TB_CRC32C_H
#define DLI_TB_CRC32C_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The CRC-32C of `len` bytes continuing from `crc`, the result of an earlier call (0 to start):
 * dli_crc32c_extend(dli_crc32c_extend(0, a, n), b, m) is the CRC of a followed by b. */
uint32_t dli_crc32c_extend(uint32_t crc, const void *data, size_t len);

/* The same, always through the table: what the hardware path is checked against. */
uint32_t dli_crc32c_extend_table(uint32_t crc, const void *data, size_t len);

/* Whether dli_crc32c_extend uses the CPU's crc32 instruction. */
bool dli_crc32c_hardware(void);

static inline uint32_t dli_crc32c(const void *data, size_t len)
{
	return dli_crc32c_extend(0, data, len);
}

/* TFRecord stores CRCs masked: a CRC of data that itself holds CRCs is weak, so the stored value is
 * rotated and offset (the constant is TensorFlow's). */
static inline uint32_t dli_crc32c_mask(uint32_t crc)
{
	return ((crc >> 15) | (crc << 17)) + 0xa282ead8u;
}

#endif
