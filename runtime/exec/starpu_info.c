/* starpu_info.c - StarPU version of the loaded library. */
#include "runtime/exec/starpu_info.h"

#include <starpu.h>
#include <stdio.h>

#include "codelets/starpu/codelets.h" /* SG_STARPU_CUDA */
#ifdef SG_STARPU_CUDA
#include "codelets/cuda/cuda_ops.h"
#endif

void sg_starpu_version(char *buf, size_t size)
{
    int major = 0, minor = 0, release = 0;
    starpu_get_version(&major, &minor, &release);
    snprintf(buf, size, "%d.%d.%d", major, minor, release);
}

void sg_starpu_cuda_info(char *buf, size_t size)
{
#ifdef SG_STARPU_CUDA
    snprintf(buf, size, "CUDA: yes (codelets built with nvcc), NCCL: %s, CUDA devices: %d",
#ifdef SG_HAVE_NCCL
             "yes",
#else
             "no",
#endif
             sg_cu_device_count());
#else
    snprintf(buf, size, "CUDA: no (this build runs on CPU workers only)");
#endif
}

int sg_starpu_cuda_devices(void)
{
#ifdef SG_STARPU_CUDA
    int n = sg_cu_device_count();
    return n > 0 ? n : 0;
#else
    return 0;
#endif
}
