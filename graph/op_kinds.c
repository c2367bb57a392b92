/* op_kinds.c - the rows of SG_OP_KINDS as data (op_kinds.h). */
#include "graph/op_kinds.h"

#include <string.h>

#include "common/error.h"

static const sg_op_kind_info table[SG_OP_KIND_COUNT] = {
#define SG_OP_KIND_ROW_(id, nm, dev, ph, place, optctx, cls, rule, col) \
    [SG_OP_##id] = {.kind = SG_OP_##id,                                 \
                    .name = #nm,                                        \
                    .symbol = "sg_" #nm,                                \
                    .devices = (dev),                                   \
                    .phase = SG_PHASE_##ph,                             \
                    .placement = SG_PLACE_##place,                      \
                    .optimizer_ctx = (optctx),                          \
                    .cost_class = SG_CLASS_##cls,                       \
                    .cost_rule = SG_COST_##rule,                        \
                    .color = col},
    SG_OP_KINDS(SG_OP_KIND_ROW_)
#undef SG_OP_KIND_ROW_
};

const sg_op_kind_info *sg_op_kind_info_of(sg_op_kind k)
{
    return (unsigned)k < SG_OP_KIND_COUNT ? &table[k] : NULL;
}

const char *sg_op_kind_name(sg_op_kind k)
{
    const sg_op_kind_info *info = sg_op_kind_info_of(k);
    return info ? info->name : "?";
}

int sg_op_kind_parse(const char *name, sg_op_kind *out)
{
    for (int k = 0; name && k < SG_OP_KIND_COUNT; k++)
        if (!strcmp(table[k].name, name)) {
            *out = (sg_op_kind)k;
            return SG_OK;
        }
    return SG_EINVAL;
}

sg_op_class sg_op_kind_class(sg_op_kind k)
{
    const sg_op_kind_info *info = sg_op_kind_info_of(k);
    return info ? info->cost_class : SG_CLASS_ELEMENTWISE;
}

const char *sg_op_class_name(sg_op_class c)
{
    static const char *const names[SG_CLASS_COUNT] = {
        "gemm", "elementwise", "optimizer_cpu", "optimizer_gpu", "copy", "collective",
    };
    return (unsigned)c < SG_CLASS_COUNT ? names[c] : "?";
}

const char *sg_phase_name(sg_phase p)
{
    static const char *const names[SG_PHASE_COUNT] = {"forward", "backward", "optimizer",
                                                      "transfer"};
    return (unsigned)p < SG_PHASE_COUNT ? names[p] : "?";
}
