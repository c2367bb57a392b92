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

/* Where one unit's elements sit in a collective over `size` ranks, the same
 * arithmetic for the MPI (CPU) and NCCL (CUDA) codelets: p elements in
 * rank-major blocks of ceil(p / size), rank r's block being elements
 * [r x block, (r + 1) x block) of the unit, zero (padding) past its end. An
 * all-gather moves `block` elements per rank into `padded` and keeps the
 * first p; a reduce-scatter sums a buffer of `padded` elements whose
 * [p, padded) are zero and leaves block r on rank r. */
typedef struct sg_comm_layout {
    size_t elems;  /* p, the unit's elements */
    size_t block;  /* ceil(p / size): every rank's block (its shard) */
    size_t padded; /* size x block >= p */
    size_t lo;     /* this rank's block starts at rank x block (may be >= p) */
    size_t valid;  /* elements of its block inside the unit: min(block, p - lo), or 0 */
    size_t pad;    /* block - valid: padding elements at its block's end */
} sg_comm_layout;

/* Fills l for p elements, `size` ranks and this `rank`. 0, or SG_EINVAL
 * (size < 1, rank outside [0, size), or size x block overflows). */
int sg_comm_layout_of(sg_comm_layout *l, size_t p, int size, int rank);

/* Whether pieces of `shard` elements in all hold what a collective of l
 * moves for this rank: its block (a sharded unit), or with `whole` the
 * entire unit (held whole by every rank: stage 0, stage 3 persistent). */
int sg_comm_layout_holds(const sg_comm_layout *l, size_t shard, int whole);

#endif /* SG_CODELET_COMM_H */
