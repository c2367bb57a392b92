/* cuda_task.h - helpers shared by the CUDA entry points of the codelets
 * (codelets/starpu/cuda_*.c): the worker's stream and cuBLAS handle, and
 * stream-ordered scratch. Only built with SG_STARPU_CUDA. */
#ifndef SG_CODELETS_CUDA_TASK_H
#define SG_CODELETS_CUDA_TASK_H

#include <starpu.h>
#include <starpu_cublas_v2.h>

#include "codelets/cuda/cuda_ops.h"
#include "codelets/starpu/args.h"

/* The calling CUDA worker's stream and cuBLAS handle (StarPU's, bound to
 * that stream by starpu_cublas_init). */
static inline sg_cu sg_cuda_task_cu(void)
{
    sg_cu cu = {.stream = (void *)starpu_cuda_get_local_stream(),
                .blas = (void *)starpu_cublas_get_local_handle()};
    return cu;
}

/* Marks the task failed with the CUDA error text appended. */
static inline void sg_cuda_task_fail(const sg_task_ctx *c, int code, const char *what)
{
    char msg[200];
    snprintf(msg, sizeof msg, "%s%s%s", what, code == SG_EIO ? ": " : "",
             code == SG_EIO ? sg_cu_last_error() : "");
    sg_task_fail(c, code, msg);
}

#endif /* SG_CODELETS_CUDA_TASK_H */
