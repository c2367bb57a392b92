/* exec_cuda.h - set-up and shutdown of the per-device state of the CUDA
 * workers (codelets/starpu/cuda_state.h): the rotary tables on the device,
 * StarPU's cuBLAS handles and, with NCCL, a communicator per device.
 */
#ifndef SG_RUNTIME_EXEC_CUDA_H
#define SG_RUNTIME_EXEC_CUDA_H

#include "codelets/starpu/cuda_state.h"
#include "codelets/starpu/task_ctx.h"
#include "common/error.h"

struct sg_comm;

/* Sets sh->cuda up on every CUDA worker; a no-op (sh->cuda stays NULL)
 * without CUDA workers or in a build without CUDA. Call after starpu_init
 * and sg_rope_cache_init. launch: the MPI world when the process was
 * started by mpirun (of any size), else NULL: then rank 0 makes the NCCL
 * unique id and every rank receives it over MPI (an all-gather of rank 0's
 * bytes, before any task runs), and the device's communicator has the
 * world's ranks, one GPU per rank. Without a launch each device has a
 * communicator of its own. */
int sg_exec_cuda_init(sg_exec_shared *sh, const struct sg_comm *launch, sg_error *err);
/* Frees it (before starpu_shutdown). */
void sg_exec_cuda_shutdown(sg_exec_shared *sh);

#endif /* SG_RUNTIME_EXEC_CUDA_H */
