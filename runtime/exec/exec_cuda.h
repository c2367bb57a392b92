/* exec_cuda.h - set-up and shutdown of the per-device state of the CUDA
 * workers (codelets/starpu/cuda_state.h): the rotary tables on the device,
 * StarPU's cuBLAS handles and, with NCCL, a communicator per device.
 */
#ifndef SG_RUNTIME_EXEC_CUDA_H
#define SG_RUNTIME_EXEC_CUDA_H

#include "codelets/starpu/cuda_state.h"
#include "codelets/starpu/task_ctx.h"
#include "common/error.h"

/* Sets sh->cuda up on every CUDA worker; a no-op (sh->cuda stays NULL)
 * without CUDA workers or in a build without CUDA. Call after starpu_init
 * and sg_rope_cache_init. */
int sg_exec_cuda_init(sg_exec_shared *sh, sg_error *err);
/* Frees it (before starpu_shutdown). */
void sg_exec_cuda_shutdown(sg_exec_shared *sh);

#endif /* SG_RUNTIME_EXEC_CUDA_H */
