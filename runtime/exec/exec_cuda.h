/* exec_cuda.h - what the CUDA codelets need per device, set up once per run
 * on every CUDA worker: the rotary tables on the device, StarPU's cuBLAS
 * handles and, with NCCL, a communicator.
 *
 * Communicators: one per device of this process. With one data-parallel
 * rank (what `stepgraph run` supports today) each is a single-rank
 * communicator, so all-gather, reduce-scatter and all-reduce are NCCL's
 * copies and sums on the device; the multi-process launcher will create
 * them from a shared ncclUniqueId with nranks = dp_size instead.
 */
#ifndef SG_RUNTIME_EXEC_CUDA_H
#define SG_RUNTIME_EXEC_CUDA_H

#include "codelets/starpu/task_ctx.h"
#include "common/error.h"

#define SG_CUDA_MAX_DEVICES 16

typedef struct sg_cuda_device {
    float *cos_tab, *sin_tab;      /* (T, head_dim/2) on the device */
    void *nccl;                    /* ncclComm_t, or NULL without NCCL */
    int ready;
} sg_cuda_device;

typedef struct sg_cuda_state {
    sg_cuda_device dev[SG_CUDA_MAX_DEVICES];
    int failed;                    /* first setup error code on a worker */
    char msg[256];
} sg_cuda_state;

/* Sets sh->cuda up on every CUDA worker; a no-op (sh->cuda stays NULL)
 * without CUDA workers or in a build without CUDA. Call after starpu_init
 * and sg_rope_cache_init. */
int sg_exec_cuda_init(sg_exec_shared *sh, sg_error *err);
/* Frees it (before starpu_shutdown). */
void sg_exec_cuda_shutdown(sg_exec_shared *sh);

/* The calling CUDA worker's device state, or NULL. */
const sg_cuda_device *sg_cuda_local_device(const sg_exec_shared *sh);

#endif /* SG_RUNTIME_EXEC_CUDA_H */
