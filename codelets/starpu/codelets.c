/* codelets.c - the codelet of each node kind (see codelets.h; the structs
 * are in their kinds' files). */
#include "codelets/starpu/codelets.h"

struct starpu_codelet *sg_codelet_for(sg_op_kind kind)
{
    static struct starpu_codelet *const table[SG_OP_KIND_COUNT] = {
#define SG_CODELET_ENTRY_(id, nm, ...) [SG_OP_##id] = &sg_##nm,
        SG_OP_KINDS(SG_CODELET_ENTRY_)
#undef SG_CODELET_ENTRY_
    };
    return (unsigned)kind < SG_OP_KIND_COUNT ? table[kind] : NULL;
}
