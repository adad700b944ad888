/* Benchmark of the CUDA statistics passes against the GPU's own copy bandwidth, in the same run:
 * a device-to-device cudaMemcpyAsync of a 1 GiB buffer (read + write bytes counted), then the
 * backend's add() on the same buffer as f32, f16, bf16 and FP8 data, with and without the FP8
 * comparison. Prints GB/s and the ratio to the copy bandwidth (target >= 0.85); --json for
 * machines. The backend is dli_cuda.so from --backend PATH or DLINSPECT_PLUGIN_PATH (meson devenv).
 * Exits 77 without a CUDA device. */
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>
#include <dlfcn.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"

#define CUDA_OK(call)                                                                            \
	do {                                                                                     \
		cudaError_t e_ = (call);                                                         \
		if (e_ != cudaSuccess) {                                                         \
			fprintf(stderr, "bench_cuda: %s: %s\n", #call, cudaGetErrorString(e_));  \
			return 1;                                                                \
		}                                                                                \
	} while (0)

/* Roughly normal values (a sum of four uniforms) from a hash of the index: realistic data, so
 * that the passes take their common path, as they do on activations and gradients. */
__device__ float normalish(unsigned long long i)
{
	float s = 0.0f;
	for (int k = 0; k < 4; k++) {
		unsigned long long h = (i * 4 + k) * 0x9e3779b97f4a7c15ull;
		h ^= h >> 31;
		h *= 0xbf58476d1ce4e5b9ull;
		h ^= h >> 29;
		s += (float)(h >> 40) * 0x1p-24f;
	}
	return (s - 2.0f) * 1.7f;
}

__global__ void fill(void *buf, int dtype, unsigned long long n)
{
	for (unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; i < n;
	     i += gridDim.x * (unsigned long long)blockDim.x) {
		float v = normalish(i);
		switch (dtype) {
		case DLI_DTYPE_F32: ((float *)buf)[i] = v; break;
		case DLI_DTYPE_F16: ((__half *)buf)[i] = __float2half_rn(v); break;
		case DLI_DTYPE_BF16: ((__nv_bfloat16 *)buf)[i] = __float2bfloat16_rn(v); break;
		default:
			((uint8_t *)buf)[i] = (uint8_t)__nv_cvt_float_to_fp8(v * 64.0f, __NV_SATFINITE,
									     __NV_E4M3);
		}
	}
}

static const struct dli_backend_ops *load_backend(const char *path)
{
	char buf[4096];
	void *h = NULL;
	if (path) {
		h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	} else if (const char *dirs = getenv("DLINSPECT_PLUGIN_PATH")) {
		/* The first dir of the search path that has it, as the core's loader does. */
		for (const char *p = dirs; *p && !h;) {
			const char *end = strchr(p, ':');
			size_t len = end ? (size_t)(end - p) : strlen(p);
			snprintf(buf, sizeof buf, "%.*s/%s.so", (int)len, p, DLI_CUDA_BACKEND_FILE);
			h = dlopen(buf, RTLD_NOW | RTLD_LOCAL);
			p += len + (end ? 1 : 0);
		}
	}
	if (!h) {
		const char *why = dlerror();
		fprintf(stderr, "bench_cuda: cannot open %s.so (%s); pass --backend PATH or run under "
				"`meson devenv`\n", DLI_CUDA_BACKEND_FILE, why ? why : "not found");
		return NULL;
	}
	void *sym = dlsym(h, DLI_MODULE_ENTRY_NAME);
	if (!sym)
		return NULL;
	dli_module_entry_fn entry;
	memcpy(&entry, &sym, sizeof entry);
	return dli_cuda_backend_ops(entry(NULL));
}

struct result {
	const char *name;
	double gbps;  /* tensor bytes read per second, per pass over the data */
	int passes;
};

int main(int argc, char **argv)
{
	bool json = false;
	const char *backend = NULL;
	size_t mib = 1024;
	int iters = 20;
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--json"))
			json = true;
		else if (!strcmp(argv[i], "--backend") && i + 1 < argc)
			backend = argv[++i];
		else if (!strcmp(argv[i], "--size-mib") && i + 1 < argc)
			mib = strtoul(argv[++i], NULL, 10);
		else if (!strcmp(argv[i], "--iters") && i + 1 < argc)
			iters = atoi(argv[++i]);
		else {
			fprintf(stderr, "usage: %s [--json] [--backend PATH/dli_cuda.so] [--size-mib N] "
					"[--iters N]\n", argv[0]);
			return 2;
		}
	}
	int devices = 0;
	cudaError_t e = cudaGetDeviceCount(&devices);
	if (e != cudaSuccess || devices == 0) {
		printf("bench_cuda: no CUDA device (%s)\n",
		       e != cudaSuccess ? cudaGetErrorString(e) : "none found");
		return 77;
	}
	const struct dli_backend_ops *be = load_backend(backend);
	if (!be)
		return 1;
	cudaDeviceProp prop;
	CUDA_OK(cudaGetDeviceProperties(&prop, 0));

	const size_t bytes = mib << 20;
	void *src, *dst;
	CUDA_OK(cudaMalloc(&src, bytes));
	CUDA_OK(cudaMalloc(&dst, bytes));
	cudaStream_t s;
	CUDA_OK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
	cudaEvent_t t0, t1;
	CUDA_OK(cudaEventCreate(&t0));
	CUDA_OK(cudaEventCreate(&t1));
	float ms;

	/* The machine's bandwidth: D2D copy, bytes read plus bytes written. */
	CUDA_OK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, s));
	CUDA_OK(cudaEventRecord(t0, s));
	for (int i = 0; i < iters; i++)
		CUDA_OK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, s));
	CUDA_OK(cudaEventRecord(t1, s));
	CUDA_OK(cudaEventSynchronize(t1));
	CUDA_OK(cudaEventElapsedTime(&ms, t0, t1));
	const double copy_gbps = 2.0 * (double)bytes * iters / (ms * 1e-3) / 1e9;

	struct bench_case {
		const char *name;
		enum dli_dtype dtype;
		int fp8; /* 0 none, 1 given scale, 2 current scaling */
	} cases[] = {
		{"stats f32", DLI_DTYPE_F32, 0},
		{"stats f16", DLI_DTYPE_F16, 0},
		{"stats bf16", DLI_DTYPE_BF16, 0},
		{"stats f8e4m3", DLI_DTYPE_F8E4M3, 0},
		{"stats+fp8 compare f32 (given scale)", DLI_DTYPE_F32, 1},
		{"stats+fp8 compare bf16 (given scale)", DLI_DTYPE_BF16, 1},
		{"stats+fp8 compare bf16 (current scaling, 2 passes)", DLI_DTYPE_BF16, 2},
	};
	const int n_cases = (int)(sizeof cases / sizeof cases[0]);
	struct result res[sizeof cases / sizeof cases[0]];
	char err[256] = "";
	for (int c = 0; c < n_cases; c++) {
		const size_t n = bytes / dli_dtype_size(cases[c].dtype);
		fill<<<prop.multiProcessorCount * 8, 256, 0, s>>>(src, cases[c].dtype, n);
		CUDA_OK(cudaGetLastError());
		void *acc = be->acc_create(0, err);
		if (!acc) {
			fprintf(stderr, "bench_cuda: acc_create: %s\n", err);
			return 1;
		}
		struct dli_tensor t;
		memset(&t, 0, sizeof t);
		t.data = src;
		t.dtype = cases[c].dtype;
		t.device.type = DLI_DEVICE_CUDA;
		t.device.stream = s;
		t.ndim = 1;
		t.shape[0] = (int64_t)n;
		t.contiguous = true;
		struct dli_fp8_spec spec = {DLI_DTYPE_F8E4M3, 448.0f / 8.0f, cases[c].fp8 == 2, 0.0};
		const struct dli_fp8_spec *fp8 = cases[c].fp8 ? &spec : NULL;
		int rc = be->add(acc, &t, fp8); /* warm-up */
		CUDA_OK(cudaEventRecord(t0, s));
		for (int i = 0; i < iters && rc == 0; i++)
			rc = be->add(acc, &t, fp8);
		CUDA_OK(cudaEventRecord(t1, s));
		struct dli_stats_record r;
		if (rc == 0)
			rc = be->read(acc, &r, sizeof r);
		be->acc_destroy(acc);
		if (rc) {
			fprintf(stderr, "bench_cuda: %s: the backend returned %d\n", cases[c].name, rc);
			return 1;
		}
		CUDA_OK(cudaEventSynchronize(t1));
		CUDA_OK(cudaEventElapsedTime(&ms, t0, t1));
		res[c].name = cases[c].name;
		res[c].passes = cases[c].fp8 == 2 ? 2 : 1;
		res[c].gbps = (double)bytes * res[c].passes * iters / (ms * 1e-3) / 1e9;
		if ((double)r.count != (double)n * (iters + 1)) {
			fprintf(stderr, "bench_cuda: %s: counted %llu elements, expected %llu\n",
				cases[c].name, (unsigned long long)r.count,
				(unsigned long long)n * (iters + 1));
			return 1;
		}
	}

	if (json) {
		printf("{\"device\": \"%s\", \"bytes\": %zu, \"iters\": %d, \"copy_gbps\": %.1f, "
		       "\"target_ratio\": 0.85, \"cases\": [",
		       prop.name, bytes, iters, copy_gbps);
		for (int c = 0; c < n_cases; c++)
			printf("%s{\"name\": \"%s\", \"passes\": %d, \"gbps\": %.1f, \"ratio\": %.3f}",
			       c ? ", " : "", res[c].name, res[c].passes, res[c].gbps,
			       res[c].gbps / copy_gbps);
		printf("]}\n");
	} else {
		printf("%s, %zu MiB buffer, %d iterations\n", prop.name, mib, iters);
		printf("  %-52s %8.1f GB/s (read + write)\n", "device-to-device copy", copy_gbps);
		for (int c = 0; c < n_cases; c++)
			printf("  %-52s %8.1f GB/s  ratio %.3f%s\n", res[c].name, res[c].gbps,
			       res[c].gbps / copy_gbps, res[c].gbps / copy_gbps >= 0.85 ? "" : "  (< 0.85)");
	}
	cudaFree(src);
	cudaFree(dst);
	return 0;
}
