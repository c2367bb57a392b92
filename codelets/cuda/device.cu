/* device.cu - devices, memory, streams and copies for the GPU kernels (the
 * runtime part of cuda_ops.h). Thin wrappers over the CUDA runtime and
 * cuBLAS, so that C code (the codelets, tests, benchmarks) never includes a
 * CUDA header, and so that the emulated build swaps them all at once. */
#include "codelets/cuda/cuda_compat.h"

int sg_cu_device_count(void)
{
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        cudaGetLastError(); /* no driver or no device is not an error to keep */
        return 0;
    }
    return n;
}

int sg_cu_is_emulated(void)
{
#ifdef SG_CUDA_EMU
    return 1;
#else
    return 0;
#endif
}

int sg_cu_open(sg_cu *cu)
{
    cudaStream_t s;
    cublasHandle_t h;
    cu->stream = cu->blas = NULL;
    if (cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) != cudaSuccess)
        return SG_EIO;
    if (cublasCreate(&h) != CUBLAS_STATUS_SUCCESS) {
        cudaStreamDestroy(s);
        return SG_EIO;
    }
    if (cublasSetStream(h, s) != CUBLAS_STATUS_SUCCESS) {
        cublasDestroy(h);
        cudaStreamDestroy(s);
        return SG_EIO;
    }
    cu->stream = (void *)s;
    cu->blas = (void *)h;
    return SG_OK;
}

void sg_cu_close(sg_cu *cu)
{
    if (cu->blas)
        cublasDestroy((cublasHandle_t)cu->blas);
    if (cu->stream)
        cudaStreamDestroy((cudaStream_t)cu->stream);
    cu->stream = cu->blas = NULL;
}

int sg_cu_sync(const sg_cu *cu)
{
    return cudaStreamSynchronize((cudaStream_t)cu->stream) == cudaSuccess ? SG_OK : SG_EIO;
}

void *sg_cu_malloc(size_t bytes)
{
    void *p = NULL;
    if (cudaMalloc(&p, bytes ? bytes : 1) != cudaSuccess) {
        cudaGetLastError();
        return NULL;
    }
    return p;
}

void sg_cu_free(void *p)
{
    if (p)
        cudaFree(p);
}

/* The synchronous copies wait for the whole device: cudaMemcpy runs on the
 * legacy default stream, which does not order itself with the non-blocking
 * streams the kernels use, and a copy from pageable memory may return
 * before its DMA has landed. */
int sg_cu_to_device(void *dst, const void *src, size_t bytes)
{
    return cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice) == cudaSuccess &&
                   cudaDeviceSynchronize() == cudaSuccess
               ? SG_OK
               : SG_EIO;
}

int sg_cu_to_host(void *dst, const void *src, size_t bytes)
{
    return cudaDeviceSynchronize() == cudaSuccess &&
                   cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToHost) == cudaSuccess
               ? SG_OK
               : SG_EIO;
}

void *sg_cu_malloc_async(const sg_cu *cu, size_t bytes)
{
    void *p = NULL;
    /* stream-ordered: the pool reuses memory freed by earlier tasks of the
     * stream without a device-wide synchronisation */
    if (cudaMallocAsync(&p, bytes ? bytes : 1, (cudaStream_t)cu->stream) != cudaSuccess) {
        cudaGetLastError();
        return NULL;
    }
    return p;
}

void sg_cu_free_async(const sg_cu *cu, void *p)
{
    if (p)
        cudaFreeAsync(p, (cudaStream_t)cu->stream);
}

int sg_cu_copy_async(const sg_cu *cu, void *dst, const void *src, size_t bytes)
{
    if (bytes == 0)
        return SG_OK;
    return cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, (cudaStream_t)cu->stream) ==
                   cudaSuccess
               ? SG_OK
               : SG_EIO;
}

int sg_cu_zero_async(const sg_cu *cu, void *p, size_t bytes)
{
    if (bytes == 0)
        return SG_OK;
    return cudaMemsetAsync(p, 0, bytes, (cudaStream_t)cu->stream) == cudaSuccess ? SG_OK : SG_EIO;
}

const char *sg_cu_last_error(void)
{
    return cudaGetErrorString(cudaPeekAtLastError());
}
