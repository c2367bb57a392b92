/* compile_emit.c - the step compiler's forward and backward: per micro-step
 * the fetches and all-gathers of stage 3, each unit's forward (per batch
 * tile), then in reverse its recompute, backward, tile gradient sum,
 * reduction and gradient-norm partial. The optimizer chains a backward
 * makes ready are compile_optimizer.c's; MoE expert tasks compile_moe.c's.
 */

#include "graph/compile_internal.h"

#include <stdio.h>

int sg_compile_emit_allgather(compiler *c, access_list *l, int u, int micro, const char *why)
{
    char name[SG_IR_NAME_MAX];
    int rc;
    if (c->unit_shard[u] >= 0) {
        if ((rc = al_push(l, c->unit_shard[u], SG_R)))
            return rc;
    } else {
        for (int p = c->unit_first_piece[u]; p < c->unit_first_piece[u + 1]; p++)
            if ((rc = al_push(l, c->pieces[p].pbuf, SG_R)))
                return rc;
    }
    int target = c->unit_gbuf[u] >= 0 ? c->unit_gbuf[u] : c->unit_full[u];
    if ((rc = al_push(l, target, SG_W)) || (rc = push_comm_order(c, l)))
        return rc;
    int64_t pu = sg_model_unit_params(c->m, u);
    unit_step_name(c, name, sizeof name, "allgather", why, u, micro);
    return node(c, l, SG_OP_ALLGATHER, SG_DEV_LINK, u, micro, -1, 0.0, SG_LINK_NET,
                collective_bytes(c, pu, 1.0), name);
}

/* Unit u's parameters made ready on the device before its forward or
 * backward (stage 3). With parameter offload its pieces first cross the
 * link: into its shard buffer when it is gathered, else straight into its
 * device buffer (a unit every rank holds whole). */
static int emit_fetch(compiler *c, access_list *l, int u, int micro, const char *why)
{
    char name[SG_IR_NAME_MAX];
    int rc;
    if (c->s->offload_param) {
        int64_t bytes = 0;
        for (int p = c->unit_first_piece[u]; p < c->unit_first_piece[u + 1]; p++) {
            if ((rc = al_push(l, c->pieces[p].pbuf, SG_R)))
                return rc;
            bytes += c->g->buffers[c->pieces[p].pbuf].bytes;
        }
        int dst = c->unit_shard[u] >= 0 ? c->unit_shard[u] : c->unit_gbuf[u];
        if ((rc = al_push(l, dst, SG_W)))
            return rc;
        unit_step_name(c, name, sizeof name, "h2d.param", why, u, micro);
        if ((rc = node(c, l, SG_OP_H2D, SG_DEV_LINK, u, micro, -1, 0.0, SG_LINK_H2D, bytes, name)) <
            0)
            return rc;
    }
    return c->unit_gathered[u] ? sg_compile_emit_allgather(c, l, u, micro, why) : SG_OK;
}

/* Appends a node of batch tile t (untiled: as node() does; tiled: on the
 * CPU, since tiles exist to spread a micro-step over CPU workers). */
int sg_compile_tile_node(compiler *c, access_list *l, sg_op_kind kind, int u, int mb, int t,
                         double flops, const char *name)
{
    sg_device_class dev = c->ntiles > 1 ? SG_DEV_CPU : SG_DEV_GPU;
    int id = node(c, l, kind, dev, u, mb, -1, flops, SG_LINK_NONE, 0, name);
    if (id >= 0 && c->ntiles > 1)
        c->g->nodes[id].tile = t;
    if (id >= 0) /* the backward computes the attention's products twice over */
        c->g->nodes[id].attention_flops =
            (kind == SG_OP_BACKWARD ? 2.0 : 1.0) * unit_attention_flops_rows(c, u, tile_rows(c, t));
    return id;
}

int sg_compile_emit_forward(compiler *c, access_list *l, micro_bufs *b, int mb)
{
    char lab[24], sfx[16], name[SG_IR_NAME_MAX];
    int rc;
    int ckpt = c->s->activation_checkpointing;
    for (int u = 0; u < c->units; u++) {
        if (unit_fetched(c, u) && (rc = emit_fetch(c, l, u, mb, "fwd")) < 0)
            return rc;
        for (int t = 0; t < c->ntiles; t++) {
            int i = TI(c, u, t);
            if ((rc = push_unit_params(c, l, u)))
                return rc;
            if ((rc = al_push(l, u == 0 ? b->tokens : b->act[TI(c, u - 1, t)], SG_R)))
                return rc;
            if (u == c->head && (rc = al_push(l, b->tokens, SG_R))) /* targets */
                return rc;
            if (u == 0 && mb >= c->s->micro_window && c->s->micro_window > 0 &&
                (rc = al_push(l, c->window[(mb - c->s->micro_window) * c->ntiles + t], SG_R)))
                return rc;
            /* a MoE layer's output is its combine task's */
            if (!moe_layer(c, u) && (rc = al_push(l, b->act[i], SG_W)))
                return rc;
            /* a checkpointed layer keeps only its input; the head is never checkpointed;
             * a MoE layer's forward saves what its expert tasks and combine read, a value
             * that dies at the combine when checkpointed (sg_compile_emit_moe_recompute
             * writes the next one) */
            if (b->inner[i] >= 0 && (!ckpt || u == c->head || moe_layer(c, u)) &&
                (rc = al_push(l, b->inner[i], SG_W)))
                return rc;
            if ((rc = sg_compile_push_moe_stats(c, l, b, u, 1)))
                return rc;
            snprintf(name, sizeof name, "fwd.%s.mb%d%s", unit_label(c, u, lab, sizeof lab), mb,
                     tile_suffix(c, t, sfx, sizeof sfx));
            if ((rc = sg_compile_tile_node(c, l, SG_OP_FORWARD, u, mb, t,
                                           unit_forward_flops_rows(c, u, tile_rows(c, t)), name)) <
                0)
                return rc;
            if (moe_layer(c, u) && (rc = sg_compile_emit_moe_forward(c, l, b, u, mb)))
                return rc;
        }
    }
    return SG_OK;
}

/* Gradient reduction of unit u after its backward in micro-step mb. */
static int emit_reduction(compiler *c, access_list *l, int u, int mb, int last)
{
    char lab[24], name[SG_IR_NAME_MAX];
    int rc;
    int stage = c->s->zero_stage;
    if (stage < 2 && !last)
        return SG_OK; /* stage 0/1 accumulate locally, all-reduce at the boundary */
    if ((rc = al_push(l, c->unit_grad[u], SG_R)))
        return rc;
    /* stage >= 2 accumulates into the shard: the first micro-step writes it */
    sg_access_mode mode = (stage >= 2 && mb > 0) ? SG_RW : SG_W;
    for (int p = c->unit_first_piece[u]; p < c->unit_first_piece[u + 1]; p++)
        if ((rc = al_push(l, c->pieces[p].gbuf, mode)))
            return rc;
    if ((rc = push_comm_order(c, l)))
        return rc;
    int64_t pu = sg_model_unit_params(c->m, u);
    unit_label(c, u, lab, sizeof lab);
    if (stage >= 2) {
        snprintf(name, sizeof name, "reduce_scatter.%s.mb%d", lab, mb);
        return node(c, l, SG_OP_REDUCE_SCATTER, SG_DEV_LINK, u, mb, -1, (double)pu, SG_LINK_NET,
                    collective_bytes(c, pu, 1.0), name);
    }
    snprintf(name, sizeof name, "allreduce.%s", lab);
    return node(c, l, SG_OP_ALLREDUCE, SG_DEV_LINK, u, mb, -1, (double)pu, SG_LINK_NET,
                collective_bytes(c, pu, 2.0), name);
}

/* The partial of the gradient norm over unit u's pieces, once their
 * gradients are final (after the last micro-step's reduction): the norm then
 * reads 16 bytes per piece instead of every piece at the end of the step, so
 * a piece can die after its copy to the host. The pieces are read in piece
 * order and the norm adds the partials in that order: the same sums as one
 * pass over the pieces. */
static int emit_norm_part(compiler *c, access_list *l, int u)
{
    char lab[24], name[SG_IR_NAME_MAX];
    int rc;
    if (c->unit_norm_part[u] < 0)
        return SG_OK;
    int64_t n = 0;
    for (int p = c->unit_first_piece[u]; p < c->unit_first_piece[u + 1]; p++) {
        if ((rc = al_push(l, c->pieces[p].gbuf, SG_R)))
            return rc;
        n += c->pieces[p].elems;
    }
    if ((rc = al_push(l, c->unit_norm_part[u], SG_W)))
        return rc;
    snprintf(name, sizeof name, "norm_part.%s", unit_label(c, u, lab, sizeof lab));
    rc = node(c, l, SG_OP_GRAD_NORM, SG_DEV_GPU, u, -1, -1, 2.0 * (double)n, SG_LINK_NONE, 0, name);
    return rc < 0 ? rc : SG_OK;
}

/* The weight-gradient accesses of unit u's backward (tile t). Untiled: its
 * gradient buffer. Stage >= 2 reduces every micro-step, so the full
 * gradient starts fresh; stage 0/1 accumulate into it. A tied head also
 * writes the embedding's gradient, which the embedding's backward then adds
 * to. Tiled: the (unit, tile) fp32 partials, written fresh (the embedding's
 * tied partial is added to) and summed by grad_sum. */
static int push_grad_writes(compiler *c, access_list *l, int u, int mb, int t)
{
    int rc;
    int tied = c->m->tie_word_embeddings;
    if (c->ntiles > 1) {
        rc = al_push(l, c->grad_part[TI(c, u, t)], (u == 0 && tied) ? SG_RW : SG_W);
        if (!rc && u == c->head && tied)
            rc = al_push(l, c->grad_part[TI(c, 0, t)], SG_W);
        return rc;
    }
    int accumulate = c->s->zero_stage < 2 && mb > 0;
    if ((rc = al_push(l, c->unit_grad[u], (accumulate || (u == 0 && tied)) ? SG_RW : SG_W)))
        return rc;
    if (u == c->head && tied && (rc = al_push(l, c->unit_grad[0], accumulate ? SG_RW : SG_W)))
        return rc;
    return SG_OK;
}

/* Tiled graphs: unit u's gradient of micro-step mb is the sum of its tile
 * partials, added in tile order (a fixed order: the same bits whatever the
 * scheduler and the worker count), accumulated into the gradient as the
 * untiled backward does. */
static int emit_grad_sum(compiler *c, access_list *l, int u, int mb)
{
    char lab[24], name[SG_IR_NAME_MAX];
    int rc;
    for (int t = 0; t < c->ntiles; t++)
        if ((rc = al_push(l, c->grad_part[TI(c, u, t)], SG_R)))
            return rc;
    int accumulate = c->s->zero_stage < 2 && mb > 0;
    if ((rc = al_push(l, c->unit_grad[u], accumulate ? SG_RW : SG_W)))
        return rc;
    snprintf(name, sizeof name, "grad_sum.%s.mb%d", unit_label(c, u, lab, sizeof lab), mb);
    rc = node(c, l, SG_OP_GRAD_SUM, SG_DEV_CPU, u, mb, -1,
              (double)c->ntiles * (double)sg_model_unit_params(c->m, u), SG_LINK_NONE, 0, name);
    return rc < 0 ? rc : SG_OK;
}

int sg_compile_emit_backward(compiler *c, access_list *l, micro_bufs *b, int mb)
{
    char lab[24], sfx[16], name[SG_IR_NAME_MAX];
    int rc;
    int last = mb == c->s->grad_accum - 1;
    int ckpt = c->s->activation_checkpointing;
    for (int u = c->units - 1; u >= 0; u--) {
        unit_label(c, u, lab, sizeof lab);
        if (unit_fetched(c, u) && !c->unit_kept[u] && (rc = emit_fetch(c, l, u, mb, "bwd")) < 0)
            return rc;
        for (int t = 0; t < c->ntiles; t++) {
            int i = TI(c, u, t);
            int64_t rows = tile_rows(c, t);
            tile_suffix(c, t, sfx, sizeof sfx);
            if (ckpt && moe_layer(c, u) && (rc = sg_compile_emit_moe_recompute(c, l, b, u, mb)))
                return rc;
            if (moe_layer(c, u) && (rc = sg_compile_emit_moe_backward(c, l, b, u, mb)))
                return rc;
            if (ckpt && u > 0 && u < c->head && !moe_layer(c, u)) {
                /* the recompute also reads the gradient of the layer's output
                 * (the codelet does not use it): it waits for the backward
                 * above, as PyTorch's checkpointing recomputes a layer when
                 * its backward is reached, so the scheduler cannot recompute
                 * every layer ahead and hold all their internals at once */
                if ((rc = push_unit_params(c, l, u)) ||
                    (rc = al_push(l, b->act[TI(c, u - 1, t)], SG_R)) ||
                    (rc = al_push(l, b->dact[i], SG_R)) || (rc = al_push(l, b->inner[i], SG_W)))
                    return rc;
                snprintf(name, sizeof name, "recompute.%s.mb%d%s", lab, mb, sfx);
                if ((rc = sg_compile_tile_node(c, l, SG_OP_RECOMPUTE, u, mb, t,
                                               unit_forward_flops_rows(c, u, rows), name)) < 0)
                    return rc;
            }
            if ((rc = push_unit_params(c, l, u)))
                return rc;
            if ((rc = al_push(l, u == 0 ? b->tokens : b->act[TI(c, u - 1, t)], SG_R)))
                return rc;
            if (b->inner[i] >= 0 && (rc = al_push(l, b->inner[i], SG_R)))
                return rc;
            if (u == c->head) {
                if ((rc = al_push(l, b->tokens, SG_R)) || (rc = al_push(l, b->act[i], SG_R)))
                    return rc;
                if (c->loss_scale >= 0 && (rc = al_push(l, c->loss_scale, SG_R)))
                    return rc;
            } else if ((rc = al_push(l, b->dact[i], SG_R))) {
                return rc;
            }
            if (u > 0 && (rc = al_push(l, b->dact[TI(c, u - 1, t)], SG_W)))
                return rc;
            if ((rc = sg_compile_push_moe_stats(c, l, b, u, 0)) ||
                (rc = sg_compile_push_moe_grads(c, l, b, u)))
                return rc;
            if ((rc = push_grad_writes(c, l, u, mb, t)))
                return rc;
            if (u == 0 && c->window[mb * c->ntiles + t] >= 0 &&
                (rc = al_push(l, c->window[mb * c->ntiles + t], SG_W)))
                return rc;
            /* the head's backward also recomputes its logits, a chunk at a time
             * (models/unit_layout.h): one more forward's worth */
            double flops = u == 0 ? (double)(rows * c->s->seq_len) * (double)c->m->hidden_size
                           : u == c->head ? 3.0 * unit_forward_flops_rows(c, u, rows)
                                          : 2.0 * unit_forward_flops_rows(c, u, rows);
            snprintf(name, sizeof name, "bwd.%s.mb%d%s", lab, mb, sfx);
            if ((rc = sg_compile_tile_node(c, l, SG_OP_BACKWARD, u, mb, t, flops, name)) < 0)
                return rc;
        }
        if (c->ntiles > 1 && (rc = emit_grad_sum(c, l, u, mb)))
            return rc;
        if ((rc = emit_reduction(c, l, u, mb, last)) < 0)
            return rc;
        if (last &&
            ((rc = emit_norm_part(c, l, u)) || (rc = sg_compile_emit_ready_subgroups(c, l, u))))
            return rc;
    }
    return SG_OK;
}
