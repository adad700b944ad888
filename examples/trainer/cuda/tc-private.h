/* What the two halves of dli_trainer_cuda share: error reporting and the FP8 format check. */
#ifndef DLI_TC_PRIVATE_H
#define DLI_TC_PRIVATE_H

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "trainer_cuda.h"

namespace dli_tc_impl {

/* Fills err (when given) and returns code, so a failure path is one `return fail(...)`. */
__attribute__((format(printf, 3, 4))) static inline int fail(struct dli_error *err, int code,
							      const char *fmt, ...)
{
	if (err) {
		memset(err, 0, sizeof *err);
		err->code = code;
		va_list ap;
		va_start(ap, fmt);
		vsnprintf(err->message, sizeof err->message, fmt, ap);
		va_end(ap);
	}
	return code;
}

static inline bool is_fp8(enum dli_dtype t)
{
	return t == DLI_DTYPE_F8E4M3 || t == DLI_DTYPE_F8E5M2;
}

static inline const char *dtype_name(enum dli_dtype t)
{
	switch (t) {
	case DLI_DTYPE_F32: return "f32";
	case DLI_DTYPE_F16: return "f16";
	case DLI_DTYPE_BF16: return "bf16";
	case DLI_DTYPE_F8E4M3: return "e4m3";
	case DLI_DTYPE_F8E5M2: return "e5m2";
	case DLI_DTYPE_F64: return "f64";
	case DLI_DTYPE_I8: return "i8";
	case DLI_DTYPE_U8: return "u8";
	case DLI_DTYPE_I32: return "i32";
	case DLI_DTYPE_I64: return "i64";
	default: return "an unknown dtype";
	}
}

} // namespace dli_tc_impl

#endif
