/* CRC-32C: the reflected polynomial 0x82f63b78, all-ones initial value and final xor. The SSE4.2
 * instruction computes exactly this eight bytes at a time; the table, one byte at a time. */
#include <pthread.h>
#include <string.h>

#include "crc32c.h"

#define DLI_CRC32C_POLY 0x82f63b78u

static uint32_t dli_crc32c_table[256];
static pthread_once_t dli_crc32c_table_once = PTHREAD_ONCE_INIT;

static void dli_crc32c_table_init(void)
{
	for (uint32_t i = 0; i < 256; i++) {
		uint32_t c = i;
		for (int k = 0; k < 8; k++)
			c = c & 1 ? (c >> 1) ^ DLI_CRC32C_POLY : c >> 1;
		dli_crc32c_table[i] = c;
	}
}

uint32_t dli_crc32c_extend_table(uint32_t crc, const void *data, size_t len)
{
	const unsigned char *p = data;
	uint32_t c = ~crc;

	pthread_once(&dli_crc32c_table_once, dli_crc32c_table_init);
	while (len--)
		c = dli_crc32c_table[(c ^ *p++) & 0xff] ^ (c >> 8);
	return ~c;
}

#if defined(__x86_64__) && defined(__GNUC__)
#include <nmmintrin.h>

__attribute__((target("sse4.2"))) static uint32_t dli_crc32c_extend_sse42(uint32_t crc,
									  const void *data,
									  size_t len)
{
	const unsigned char *p = data;
	uint64_t c = ~crc;

	for (; len >= 8; p += 8, len -= 8) {
		uint64_t word;
		memcpy(&word, p, 8); /* records are not aligned */
		c = _mm_crc32_u64(c, word);
	}
	uint32_t c32 = (uint32_t)c;
	while (len--)
		c32 = _mm_crc32_u8(c32, *p++);
	return ~c32;
}

bool dli_crc32c_hardware(void)
{
	return __builtin_cpu_supports("sse4.2");
}

uint32_t dli_crc32c_extend(uint32_t crc, const void *data, size_t len)
{
	if (dli_crc32c_hardware())
		return dli_crc32c_extend_sse42(crc, data, len);
	return dli_crc32c_extend_table(crc, data, len);
}
#else
bool dli_crc32c_hardware(void)
{
	return false;
}

uint32_t dli_crc32c_extend(uint32_t crc, const void *data, size_t len)
{
	return dli_crc32c_extend_table(crc, data, len);
}
#endif
