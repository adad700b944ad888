/* The libFuzzer entry point every target here defines; replay.c calls it without libFuzzer. */
#ifndef DLI_FUZZ_H
#define DLI_FUZZ_H

#include <stddef.h>
#include <stdint.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#endif
