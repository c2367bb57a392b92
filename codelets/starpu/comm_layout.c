/* comm_layout.c - the rank-major block layout of the collectives (comm.h),
 * shared by the MPI (CPU) and NCCL (CUDA) paths of allgather.c, reduce.c. */
#include <stdint.h>

#include "codelets/starpu/comm.h"
#include "common/error.h"

int sg_comm_layout_of(sg_comm_layout *l, size_t p, int size, int rank)
{
    if (size < 1 || rank < 0 || rank >= size)
        return SG_EINVAL;
    size_t n = (size_t)size, block = p / n + (p % n != 0);
    if (block > SIZE_MAX / n)
        return SG_EINVAL;
    l->elems = p;
    l->block = block;
    l->padded = block * n;
    l->lo = block * (size_t)rank;
    l->valid = l->lo >= p ? 0 : p - l->lo < block ? p - l->lo : block;
    l->pad = block - l->valid;
    return SG_OK;
}

int sg_comm_layout_holds(const sg_comm_layout *l, size_t shard, int whole)
{
    return shard == (whole ? l->elems : l->block);
}
