/* forward_only.c - the forward of micro-step 0 cut out of a step graph
 * (forward_only.h). */
#include "graph/forward_only.h"

#include <stdlib.h>
#include <string.h>

/* The kinds a forward may hold: its own phase's, and the transfers that
 * bring a unit's parameters to it (stage 3, parameter offload). */
static int forward_kind(sg_op_kind k)
{
    const sg_op_kind_info *info = sg_op_kind_info_of(k);
    return (info && info->phase == SG_PHASE_FORWARD) || k == SG_OP_ALLGATHER || k == SG_OP_H2D;
}

static int is_forward_node(const sg_node *nd)
{
    const sg_op_kind_info *info = sg_op_kind_info_of(nd->kind);
    return nd->micro_step == 0 && info && info->phase == SG_PHASE_FORWARD;
}

/* Buffer b of step in out (copied on first use, every field kept: the
 * lowering binds by role, unit, micro-step and tile). */
static int map_buffer(const sg_graph *step, sg_graph *out, int *map, int b)
{
    if (map[b] >= 0)
        return map[b];
    const sg_buffer *src = &step->buffers[b];
    int id = sg_graph_add_buffer(out, src->name, src->elems, src->dtype, src->space,
                                 src->persistent);
    if (id < 0)
        return id;
    out->buffers[id] = *src;
    map[b] = id;
    return id;
}

static int copy_node(const sg_graph *step, sg_graph *out, int *map, const sg_node *nd,
                     sg_access *acc, sg_error *err)
{
    for (int a = 0; a < nd->naccess; a++) {
        acc[a] = nd->access[a];
        if ((acc[a].buffer = map_buffer(step, out, map, nd->access[a].buffer)) < 0)
            return sg_error_set(err, SG_ENOMEM, "out of memory");
    }
    int id = sg_graph_add_node(out, nd->kind, nd->device, nd->layer, nd->flops, acc,
                               nd->naccess, "%s", nd->name);
    if (id < 0)
        return sg_error_set(err, id, "cannot add node %s", nd->name);
    sg_node *c = &out->nodes[id];
    c->micro_step = nd->micro_step;
    c->subgroup = nd->subgroup;
    c->tile = nd->tile;
    c->link = nd->link;
    c->link_bytes = nd->link_bytes;
    c->attention_flops = nd->attention_flops;
    c->priority = nd->priority;
    c->pinned = nd->pinned;
    return SG_OK;
}

int sg_graph_forward_only(const sg_graph *step, sg_graph *out, sg_error *err)
{
    int last = -1, maxacc = 1;
    for (int i = 0; i < step->nnodes; i++) {
        if (is_forward_node(&step->nodes[i]))
            last = i;
        if (step->nodes[i].naccess > maxacc)
            maxacc = step->nodes[i].naccess;
    }
    if (last < 0)
        return sg_error_set(err, SG_EINVAL, "the step graph has no forward node");
    int *map = malloc((size_t)(step->nbuffers > 0 ? step->nbuffers : 1) * sizeof *map);
    sg_access *acc = malloc((size_t)maxacc * sizeof *acc);
    int rc = !map || !acc ? sg_error_set(err, SG_ENOMEM, "out of memory") : SG_OK;
    for (int b = 0; !rc && b < step->nbuffers; b++)
        map[b] = -1;
    for (int i = 0; !rc && i <= last; i++) {
        const sg_node *nd = &step->nodes[i];
        if (nd->micro_step != 0)
            continue; /* another micro-step's (none when compiled with one) */
        if (!forward_kind(nd->kind))
            rc = sg_error_set(err, SG_EINVAL, "node %s (%s) lies within micro-step 0's "
                              "forward", nd->name, sg_op_kind_name(nd->kind));
        else
            rc = copy_node(step, out, map, nd, acc, err);
    }
    free(map);
    free(acc);
    return rc ? rc : sg_graph_finalize(out, err);
}
