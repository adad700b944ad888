/* The CUDA passes as the backend launches them: parameter blocks and the kernel for each dtype,
 * mode and FP8 format (kernels/cuda/passes.cu). Internal to dli_cuda.so and tests/cuda. */
#ifndef DLI_CUDA_PASSES_H
#define DLI_CUDA_PASSES_H

#include <stdint.h>

#include <dlinspect/stats.h>

#include "record.cuh"

namespace dli_cuda {

/* Threads per block of every pass; the finalize kernel uses the same. */
constexpr int pass_threads = 256;
/* A warp reads 64 consecutive 16-byte vectors per step: two coalesced 512-byte loads. */
constexpr int warp_tile_vecs = 64;

enum pass_mode {
	MODE_STATS = 0,     /* the statistics record */
	MODE_STATS_FP8 = 1, /* the record and the FP8 comparison with a given scale, one read */
	MODE_FP8 = 2,       /* the FP8 comparison only (second pass of current scaling) */
};

/* Per-accumulator device scratch between the two passes of current scaling. */
struct pass_scratch {
	float scale;  /* this tensor's current-scaling scale, written by the first finalize */
};

struct pass_params {
	const void *data;          /* the tensor (hp for the quantized pass) */
	const uint8_t *q;          /* quantized pass: the FP8 codes */
	const float *scale_inv;    /* quantized pass: device scale_inv array */
	long long n_scale_inv;
	unsigned long long n;      /* elements */
	unsigned long long head;   /* elements before the first 16-byte boundary (scalar) */
	unsigned long long n_warp_tiles; /* full warp tiles after the head */
	float scale;               /* MODE_STATS_FP8: the given scale */
	const pass_scratch *scratch; /* MODE_FP8: where the first pass left the scale */
	part *parts;               /* one per block */
};

enum finalize_flags {
	FIN_FRESH = 1u << 0,       /* the accumulator record is stale: start it empty */
	FIN_STATS = 1u << 1,       /* the parts carry the statistics record */
	FIN_FP8 = 1u << 2,         /* the parts carry the FP8 comparison terms */
	FIN_WRITE_SCALE = 1u << 3, /* current scaling: leave this tensor's scale in the scratch */
	FIN_SCALE_SCRATCH = 1u << 4, /* the comparison's scale is in the scratch (else `scale`) */
	FIN_SI_PART = 1u << 5,     /* scale_inv range from the parts (quantized), else 1/scale */
};

struct finalize_params {
	const part *parts;
	unsigned n_parts;
	unsigned flags;
	unsigned long long n;       /* elements of the tensor (or of hp, for the comparison) */
	dli_stats_record *rec;      /* the accumulator's record */
	pass_scratch *scratch;
	float scale;                /* the given scale (not FIN_SCALE_SCRATCH) */
	float fp8_max;              /* FIN_WRITE_SCALE */
	double margin;
};

/* The kernel for a pass, or NULL when the combination does not exist (the FP8 modes take f32,
 * f16 and bf16; `format` is ignored by MODE_STATS). Launch with pass_threads threads and at
 * most as many blocks as p.parts holds. */
const void *stats_pass_kernel(enum dli_dtype dtype, enum pass_mode mode, enum dli_dtype format);
/* hp f32, f16 or bf16 against FP8 codes of `format`, dequantized with scale_inv[0]. */
const void *quantized_pass_kernel(enum dli_dtype hp_dtype, enum dli_dtype format);
/* One block of pass_threads threads: merges the parts into the record. */
const void *finalize_kernel(void);

} // namespace dli_cuda

#endif
