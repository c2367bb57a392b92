/* comm.h - the collectives a codelet may call across data-parallel ranks.
 *
 * The codelets know nothing of MPI (the dependency rule: codelets/starpu
 * includes no runtime/ header): runtime/dist/ fills one sg_comm per run with
 * its implementation over a communicator reserved for collective TASKS, and
 * the run's sg_exec_shared points at it. With one rank the pointer is NULL
 * and the codelets do their local copies as before.
 *
 * Every call blocks until every rank made the same call: the step compiler
 * chains every collective node on one buffer (comm_order, graph/compile.c),
 * so StarPU runs them one at a time, in program order, on every rank
 * (docs/ranks.md says why that cannot deadlock). Each returns 0, or an SG_
 * error code after writing "rank R: MPI_Xxx: <MPI's message>" into msg.
 */
#ifndef SG_CODELET_COMM_H
#define SG_CODELET_COMM_H

#include <stddef.h>

typedef enum sg_comm_type {
    SG_COMM_F32,
    SG_COMM_F64,
    SG_COMM_I32,
} sg_comm_type;

typedef enum sg_comm_op {
    SG_COMM_SUM,
    SG_COMM_MAX,
} sg_comm_op;

typedef struct sg_comm {
    int rank, size;
    void *impl;
    /* every rank's `bytes` bytes of send, rank-major, into recv (size * bytes) */
    int (*allgather)(void *impl, const void *send, void *recv, size_t bytes, char *msg,
                     size_t msg_size);
    /* send: size * count f32; rank r gets the sum of block r in recv (count f32) */
    int (*reduce_scatter)(void *impl, const float *send, float *recv, size_t count, char *msg,
                          size_t msg_size);
    /* in place: buf (count elements of type) reduced by op over the ranks */
    int (*allreduce)(void *impl, void *buf, size_t count, sg_comm_type type, sg_comm_op op,
                     char *msg, size_t msg_size);
} sg_comm;

#endif /* SG_CODELET_COMM_H */
