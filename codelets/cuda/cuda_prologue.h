/* cuda_prologue.h - what the GPU files that compose cuda_ops.h calls into a
 * unit or a MoE layer (block.cu, moe.cu, moe_group.cu) include first:
 * libsgcore's C headers under C linkage (they have no extern "C" of their
 * own, so that their functions link from these C++ files), and the one
 * macro that checks a step and returns its error.
 */
#ifndef SG_CODELETS_CUDA_PROLOGUE_H
#define SG_CODELETS_CUDA_PROLOGUE_H

extern "C" {
#include "common/error.h"
#include "graph/ir.h"
#include "models/model.h"
#include "codelets/cpu/adam.h"
#include "codelets/cpu/block.h"
}

/* SG_CU_TRY_OR_RETURN(call): evaluates call (a function returning 0 or a
 * negative SG_E* code) and, when it failed, returns its code from the
 * calling function: the name says that the statement may leave it. */
#define SG_CU_TRY_OR_RETURN(call) \
    do {                          \
        int rc_ = (call);         \
        if (rc_ < 0)              \
            return rc_;           \
    } while (0)

#endif /* SG_CODELETS_CUDA_PROLOGUE_H */
