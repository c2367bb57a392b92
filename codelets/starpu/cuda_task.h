/* cuda_task.h - helpers shared by the CUDA entry points of the codelets
 * (under SG_STARPU_CUDA in each kind's file): the worker's stream and cuBLAS
 * handle, failure reports, collectives and the parameter scatter (the CUDA
 * side of sg_arg_scatter_params). Only for SG_STARPU_CUDA code. */
#ifndef SG_CODELETS_CUDA_TASK_H
#define SG_CODELETS_CUDA_TASK_H

#include <starpu.h>
#include <starpu_cublas_v2.h>
#include <stdio.h>

#include "codelets/cuda/cuda_ops.h"
#include "codelets/starpu/args.h"
#include "codelets/starpu/comm.h"

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

/* One rank: dst <- src (n elements of dt) through the local device's
 * single-rank communicator: all-gather (`gather`) or sum-reduction; a plain
 * device copy without NCCL. 0, or an SG_ error code after writing "rank R:
 * ncclXxx: <NCCL's message>" (or the CUDA copy's error) into msg. */
int sg_cuda_collective(const sg_task_ctx *c, const sg_cu *cu, void *dst, const void *src, size_t n,
                       sg_dtype dt, int gather, char *msg, size_t msg_size);

/* Several ranks (the run's comm.h collectives have size > 1): NCCL calls
 * on cu's stream over the local device's communicator, which exec_cuda.c
 * made with the world's size and this process's rank. Each returns 0, or
 * an SG_ error code after writing "rank R: ncclXxx: <NCCL's message>" into
 * msg (SG_ENOTSUP in a build without NCCL). */
/* every rank's `count` elements of send, rank-major, into recv (size x
 * count); in place when send is recv + rank x count */
int sg_cuda_nccl_allgather(const sg_task_ctx *c, const sg_cu *cu, const void *send, void *recv,
                           size_t count, sg_dtype dt, char *msg, size_t msg_size);
/* send: size x count elements; rank r gets the sum of block r into recv;
 * in place when recv is send + rank x count */
int sg_cuda_nccl_reduce_scatter(const sg_task_ctx *c, const sg_cu *cu, const void *send, void *recv,
                                size_t count, sg_dtype dt, char *msg, size_t msg_size);

/* One in-place all-reduce of sg_cuda_nccl_allreduce: count elements of type
 * at buf (device), summed over the ranks, or their mean with `mean`. */
typedef struct sg_cuda_allreduce {
    void *buf;
    size_t count;
    sg_comm_type type;
    int mean;
} sg_cuda_allreduce;

/* The n all-reduces as one NCCL group (one launch). */
int sg_cuda_nccl_allreduce(const sg_task_ctx *c, const sg_cu *cu, const sg_cuda_allreduce *v, int n,
                           char *msg, size_t msg_size);

/* A sub-group's parameters (slot src: fp32 master or compute-dtype copy, on
 * the device) into its parameter pieces, converted to the pieces' dtype. */
int sg_cuda_scatter_params(const sg_task_ctx *c, void *buffers[], int src, const sg_cu *cu);

/* A unit's parameters as one device array in dt: the gathered / full buffer
 * itself, or its pieces copied end to end into *copy (stream-ordered
 * memory: sg_cu_free_async it). NULL when a piece is missing, of another
 * dtype, or memory ran out. */
const void *sg_cuda_unit_params(const sg_task_ctx *c, void *buffers[], int unit, sg_dtype dt,
                                const sg_cu *cu, void **copy);

#endif /* SG_CODELETS_CUDA_TASK_H */
