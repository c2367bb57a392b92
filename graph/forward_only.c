/* forward_only.c - the forward of every micro-step cut out of a step graph
 * (forward_only.h). */
#include "graph/forward_only.h"

#include <stdlib.h>
#include <string.h>

static int forward_phase(sg_op_kind k)
{
    const sg_op_kind_info *info = sg_op_kind_info_of(k);
    return info && info->phase == SG_PHASE_FORWARD;
}

static int is_transfer(const sg_node *nd)
{
    return (nd->kind == SG_OP_ALLGATHER || nd->kind == SG_OP_H2D) && nd->micro_step >= 0;
}

/* keep[i]: node i belongs to the forward. A forward-phase node of a
 * micro-step does; a transfer (all-gather, fetch) of a micro-step does when
 * the node that next accesses what it writes does: a unit's parameters
 * brought for its forward (through a fetch then an all-gather with the
 * parameters offloaded), not for its backward. Decided from the last node
 * back, so that the next accessor is decided first. */
static void mark_forward(const sg_graph *g, unsigned char *keep)
{
    for (int i = g->nnodes - 1; i >= 0; i--) {
        const sg_node *nd = &g->nodes[i];
        keep[i] = forward_phase(nd->kind) && nd->micro_step >= 0;
        if (!is_transfer(nd))
            continue;
        int next = -1;
        for (int j = i + 1; j < g->nnodes && next < 0; j++)
            for (int a = 0; a < nd->naccess && next < 0; a++)
                for (int k = 0; (nd->access[a].mode & SG_W) && k < g->nodes[j].naccess; k++)
                    if (g->nodes[j].access[k].buffer == nd->access[a].buffer)
                        next = j;
        keep[i] = next >= 0 && keep[next];
    }
}

/* Buffer b of step in out (copied on first use, every field kept: the
 * lowering binds by role, unit, micro-step and tile). */
static int map_buffer(const sg_graph *step, sg_graph *out, int *map, int b)
{
    if (map[b] >= 0)
        return map[b];
    const sg_buffer *src = &step->buffers[b];
    int id =
        sg_graph_add_buffer(out, src->name, src->elems, src->dtype, src->space, src->persistent);
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
    int id = sg_graph_add_node(out, nd->kind, nd->device, nd->layer, nd->flops, acc, nd->naccess,
                               "%s", nd->name);
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
    int nfwd = 0, maxacc = 1;
    for (int i = 0; i < step->nnodes; i++) {
        const sg_node *nd = &step->nodes[i];
        if (nd->kind == SG_OP_RECOMPUTE)
            return sg_error_set(err, SG_EINVAL,
                                "node %s: the step is compiled with activation "
                                "checkpointing; its forward is cut from a step without",
                                nd->name);
        nfwd += forward_phase(nd->kind) && nd->micro_step >= 0;
        if (nd->naccess > maxacc)
            maxacc = nd->naccess;
    }
    if (nfwd == 0)
        return sg_error_set(err, SG_EINVAL, "the step graph has no forward node");
    int *map = malloc((size_t)(step->nbuffers > 0 ? step->nbuffers : 1) * sizeof *map);
    sg_access *acc = malloc((size_t)maxacc * sizeof *acc);
    unsigned char *keep = malloc((size_t)step->nnodes);
    int rc = !map || !acc || !keep ? sg_error_set(err, SG_ENOMEM, "out of memory") : SG_OK;
    for (int b = 0; !rc && b < step->nbuffers; b++)
        map[b] = -1;
    if (!rc)
        mark_forward(step, keep);
    for (int i = 0; !rc && i < step->nnodes; i++)
        if (keep[i])
            rc = copy_node(step, out, map, &step->nodes[i], acc, err);
    free(map);
    free(acc);
    free(keep);
    /* a forward node that read what only a backward wrote would be refused
     * here: a non-persistent buffer read before any node of out wrote it */
    return rc ? rc : sg_graph_finalize(out, err);
}
