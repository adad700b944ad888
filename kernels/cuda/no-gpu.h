/* How a CUDA failure reads when there is simply no GPU. Without an NVIDIA driver the CUDA runtime
 * says "CUDA driver version is insufficient for CUDA runtime version" (cudaErrorInsufficientDriver),
 * which reads as if the driver needed an upgrade; a driver without a GPU says cudaErrorNoDevice.
 * Both become "no CUDA GPU found (CALL: NAME: TEXT)". C and CUDA C++. */
#ifndef DLI_CUDA_NO_GPU_H
#define DLI_CUDA_NO_GPU_H

#include <stdbool.h>
#include <stdio.h>

#include <cuda_runtime_api.h>

/* Whether `e` means "no usable GPU here" rather than a failure of a GPU that is there. */
static inline bool dli_cuda_is_no_gpu(cudaError_t e)
{
	return e == cudaErrorNoDevice || e == cudaErrorInsufficientDriver;
}

/* Writes "no CUDA GPU found (CALL: NAME: TEXT)" into buf for a no-GPU error (or for `count` == 0
 * with cudaSuccess), else "CALL: TEXT (NAME)". Returns buf. */
static inline const char *dli_cuda_describe(char *buf, size_t size, const char *call, cudaError_t e)
{
	if (e == cudaSuccess)
		snprintf(buf, size, "no CUDA GPU found (%s: 0 devices)", call);
	else if (e == cudaErrorInsufficientDriver)
		snprintf(buf, size,
			 "no CUDA GPU found (%s: %s: no NVIDIA driver is loaded, or it is older than "
			 "this CUDA runtime)",
			 call, cudaGetErrorName(e));
	else if (e == cudaErrorNoDevice)
		snprintf(buf, size, "no CUDA GPU found (%s: %s: %s)", call, cudaGetErrorName(e),
			 cudaGetErrorString(e));
	else
		snprintf(buf, size, "%s: %s (%s)", call, cudaGetErrorString(e), cudaGetErrorName(e));
	return buf;
}

#endif
