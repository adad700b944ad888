/* File names made from layer names for DumpTensors (docs/logging.md, "Tensor dumps"). Shared by the
 * module and its unit test; links nothing. */
#ifndef DLI_DUMP_SAFE_NAME_H
#define DLI_DUMP_SAFE_NAME_H

#include <stddef.h>

/* The longest name dli_dump_safe_name writes, without its NUL: the dump's file name adds at most
 * "_iter_" + 20 digits + ".safetensors", which keeps it under NAME_MAX (255). */
#define DLI_DUMP_SAFE_NAME_MAX 200

/* Writes into `out` (at least DLI_DUMP_SAFE_NAME_MAX + 1 bytes) a name made of [A-Za-z0-9._-] only,
 * that never starts with '.', never holds "..", and is at most DLI_DUMP_SAFE_NAME_MAX bytes: `name`
 * (borrowed, any bytes) unchanged when it already is such a name and does not end like an altered
 * one, else its safe characters (each other byte becomes '_'), cut to fit, followed by '-' and the
 * 16 hex digits of a 64-bit FNV-1a hash of the whole original name. So two different names give
 * different file names unless their hashes collide. Returns the length written. */
size_t dli_dump_safe_name(const char *name, char *out);

/* The longest names dli_dump_te_name writes for `format: torch`: "{layer}_{tensor}.pt" then stays
 * under NAME_MAX. */
#define DLI_DUMP_TE_LAYER_MAX 160
#define DLI_DUMP_TE_TENSOR_MAX 80

/* Writes into `out` (at least max + 1 bytes, max > 17) the name TransformerEngine's DumpTensors
 * gives `name` in its file names: each of / \ : * ? " < > | space and . becomes '_'. That name
 * is altered as dli_dump_safe_name alters (its bytes kept, cut to fit, then '-' and the 16 hex
 * digits of the FNV-1a hash of `name`) when it is empty, longer than max, holds a control byte or
 * bytes that are not UTF-8 (each becomes '_'), or ends like an altered name; or when `force`
 * (a clash with another name's file). Returns the length written. */
size_t dli_dump_te_name(const char *name, char *out, size_t max, int force);

#endif
