/* cuda_state.h - what the CUDA codelets need per device: the rotary tables
 * on the device and, with NCCL, a communicator. Set up once per run on every
 * CUDA worker by runtime/exec/exec_cuda.c; read by the CUDA entry points
 * through sg_cuda_local_device (only in SG_STARPU_CUDA builds).
 *
 * Communicators: one per device of this process. With one data-parallel
 * rank each is a single-rank communicator, so all-gather, reduce-scatter
 * and all-reduce are NCCL's copies and sums on the device; under mpirun
 * (one GPU per rank) it is made from rank 0's ncclUniqueId with the world's
 * size, and the collectives of several ranks use it (cuda_task.h).
 */
#ifndef SG_CODELETS_CUDA_STATE_H
#define SG_CODELETS_CUDA_STATE_H

#include "codelets/starpu/task_ctx.h"

#define SG_CUDA_MAX_DEVICES 16

typedef struct sg_cuda_device {
    float *cos_tab, *sin_tab; /* (T, head_dim/2) on the device */
    void *nccl;               /* ncclComm_t, or NULL without NCCL */
    int ready;
} sg_cuda_device;

typedef struct sg_cuda_state {
    sg_cuda_device dev[SG_CUDA_MAX_DEVICES];
    int failed; /* first setup error code on a worker */
    char msg[256];
} sg_cuda_state;

/* The calling CUDA worker's device state, or NULL (not set up, or not a
 * CUDA worker). */
const sg_cuda_device *sg_cuda_local_device(const sg_exec_shared *sh);

#endif /* SG_CODELETS_CUDA_STATE_H */
