/* compile_moe.c - the step compiler's mixture-of-experts parts: each
 * micro-step's router statistics and expert-group buffers, and the expert
 * tasks around a MoE layer's forward, recompute and backward.
 */

#include "graph/compile_internal.h"

#include <stdio.h>
#include <stdlib.h>

/* MoE models: one small fp32 buffer per micro-step where the layers' forwards
 * add their router statistics (layer 1 writes it, the others add to it, in
 * layer order as the forward already is), which the head's forward reads to
 * add the load-balancing loss (transformers' load_balancing_loss_func pools
 * the routers of every layer) and every layer's backward reads for that
 * loss's gradient. */
int sg_compile_declare_moe_stats(compiler *c, int mb, micro_bufs *b)
{
    b->moe_stats = -1;
    size_t n = sg_moe_stats_floats(c->m);
    if (n == 0)
        return SG_OK;
    b->moe_stats = tag(c, buffer(c, (int64_t)n, SG_F32, SG_MEM_GPU, 0, "moe_stats.mb%d", mb),
                       SG_BUF_MOE_STATS, -1, mb, -1);
    if (b->moe_stats < 0)
        return SG_ENOMEM;
    /* experts as tasks: each group of experts of a layer has an activation
     * buffer (forward to combine and backward; with checkpointing, forward to
     * combine and recompute to backward: sg_compile_emit_moe_recompute) of the
     * compute dtype and an fp32 gradient buffer (its backward to the layer's),
     * sized for every token (models/unit_layout.h) */
    const int G = sg_moe_groups(c->m);
    const size_t N = (size_t)c->tokens;
    if (!b->moe_act)
        b->moe_act = calloc((size_t)c->units * (size_t)G, sizeof(int));
    if (!b->moe_grad)
        b->moe_grad = calloc((size_t)c->units * (size_t)G, sizeof(int));
    if (!b->moe_act || !b->moe_grad)
        return SG_ENOMEM;
    for (int u = 1; u < c->head; u++)
        for (int g = 0; g < G; g++) {
            int a = tag(c,
                        buffer(c, (int64_t)sg_moe_group_act_floats(c->m, N), c->cd, SG_MEM_GPU, 0,
                               "moe_act.%d.g%d.mb%d", u, g, mb),
                        SG_BUF_MOE_ACT, u, mb, g);
            int d = tag(c,
                        buffer(c, (int64_t)sg_moe_group_grad_floats(c->m, N), SG_F32, SG_MEM_GPU, 0,
                               "moe_grad.%d.g%d.mb%d", u, g, mb),
                        SG_BUF_MOE_GRAD, u, mb, g);
            if (a < 0 || d < 0)
                return SG_ENOMEM;
            b->moe_act[u * G + g] = a;
            b->moe_grad[u * G + g] = d;
        }
    return SG_OK;
}

/* FLOPs of one group of experts' forward: its share of the expert MLPs. */
static double moe_group_flops(const compiler *c)
{
    const sg_model *m = c->m;
    return 2.0 * (double)c->tokens * (double)m->experts_per_token * 3.0 *
           (double)m->moe_intermediate_size * (double)m->hidden_size / sg_moe_groups(m);
}

/* One task per group of experts of layer u, each writing its activation
 * buffer: after the layer's forward, or (recompute) after its recompute in
 * the backward of a checkpointed step. */
static int emit_moe_experts(compiler *c, access_list *l, micro_bufs *b, int u, int mb,
                            int recompute)
{
    char lab[24], name[SG_IR_NAME_MAX];
    const int G = sg_moe_groups(c->m);
    int rc;
    unit_label(c, u, lab, sizeof lab);
    for (int g = 0; g < G; g++) {
        if ((rc = push_unit_params(c, l, u)) || (rc = al_push(l, b->inner[TI(c, u, 0)], SG_R)) ||
            (rc = al_push(l, b->moe_act[u * G + g], SG_W)))
            return rc;
        snprintf(name, sizeof name, "%s.%s.g%d.mb%d", recompute ? "moe_expert_re" : "moe_expert",
                 lab, g, mb);
        if ((rc = node(c, l, SG_OP_MOE_EXPERT, SG_DEV_GPU, u, mb, -1, moe_group_flops(c),
                       SG_LINK_NONE, 0, name)) < 0)
            return rc;
    }
    return SG_OK;
}

/* After a MoE layer's forward (attention, router): one task per group of
 * experts, then the combine that writes the layer's output. */
int sg_compile_emit_moe_forward(compiler *c, access_list *l, micro_bufs *b, int u, int mb)
{
    char lab[24], name[SG_IR_NAME_MAX];
    const int G = sg_moe_groups(c->m);
    int rc;
    unit_label(c, u, lab, sizeof lab);
    if ((rc = emit_moe_experts(c, l, b, u, mb, 0)))
        return rc;
    if ((rc = al_push(l, b->inner[TI(c, u, 0)], SG_R)))
        return rc;
    for (int g = 0; g < G; g++)
        if ((rc = al_push(l, b->moe_act[u * G + g], SG_R)))
            return rc;
    if ((rc = al_push(l, b->act[TI(c, u, 0)], SG_W)))
        return rc;
    snprintf(name, sizeof name, "moe_combine.%s.mb%d", lab, mb);
    rc = node(c, l, SG_OP_MOE_COMBINE, SG_DEV_GPU, u, mb, -1,
              2.0 * (double)c->tokens * (double)c->m->experts_per_token * (double)c->m->hidden_size,
              SG_LINK_NONE, 0, name);
    return rc < 0 ? rc : SG_OK;
}

/* Before a MoE layer's backward: each group of experts' backward (from the
 * layer's output gradient) into its gradient buffer. */
int sg_compile_emit_moe_backward(compiler *c, access_list *l, micro_bufs *b, int u, int mb)
{
    char lab[24], name[SG_IR_NAME_MAX];
    const int G = sg_moe_groups(c->m);
    int rc;
    unit_label(c, u, lab, sizeof lab);
    for (int g = 0; g < G; g++) {
        if ((rc = push_unit_params(c, l, u)) || (rc = al_push(l, b->inner[TI(c, u, 0)], SG_R)) ||
            (rc = al_push(l, b->moe_act[u * G + g], SG_R)) ||
            (rc = al_push(l, b->dact[TI(c, u, 0)], SG_R)) ||
            (rc = al_push(l, b->moe_grad[u * G + g], SG_W)))
            return rc;
        snprintf(name, sizeof name, "moe_expert_bwd.%s.g%d.mb%d", lab, g, mb);
        if ((rc = node(c, l, SG_OP_MOE_EXPERT_BWD, SG_DEV_GPU, u, mb, -1, 2.0 * moe_group_flops(c),
                       SG_LINK_NONE, 0, name)) < 0)
            return rc;
    }
    return SG_OK;
}

/* A checkpointed MoE layer, when its backward is reached: the layer's
 * recompute (attention and router: its saved activations, statistics
 * untouched) and its expert groups' forwards again. The forward's values of
 * the saved activations and of the groups' buffers die at the combine (the
 * recompute writes new ones), so a layer's expert activations live for one
 * layer's forward or backward, not from the forward to the backward; the
 * layer keeps only its input, as a dense checkpointed layer. Like the dense
 * recompute it reads the gradient of the layer's output (unused) so that it
 * waits for the backward above it. */
int sg_compile_emit_moe_recompute(compiler *c, access_list *l, micro_bufs *b, int u, int mb)
{
    char lab[24], name[SG_IR_NAME_MAX];
    int rc;
    if ((rc = push_unit_params(c, l, u)) || (rc = al_push(l, b->act[TI(c, u - 1, 0)], SG_R)) ||
        (rc = al_push(l, b->dact[TI(c, u, 0)], SG_R)) ||
        (rc = al_push(l, b->inner[TI(c, u, 0)], SG_W)))
        return rc;
    snprintf(name, sizeof name, "recompute.%s.mb%d", unit_label(c, u, lab, sizeof lab), mb);
    double flops = unit_forward_flops_rows(c, u, tile_rows(c, 0));
    if ((rc = sg_compile_tile_node(c, l, SG_OP_RECOMPUTE, u, mb, 0, flops, name)) < 0)
        return rc;
    return emit_moe_experts(c, l, b, u, mb, 1);
}

/* The layer's backward reads every group's gradients. */
int sg_compile_push_moe_grads(compiler *c, access_list *l, const micro_bufs *b, int u)
{
    if (!moe_layer(c, u))
        return SG_OK;
    const int G = sg_moe_groups(c->m);
    int rc = SG_OK;
    for (int g = 0; g < G && !rc; g++)
        rc = al_push(l, b->moe_grad[u * G + g], SG_R);
    return rc;
}

/* The statistics access of unit u's forward (not a recompute's) or backward. */
int sg_compile_push_moe_stats(compiler *c, access_list *l, const micro_bufs *b, int u, int fwd)
{
    if (b->moe_stats < 0 || u == 0)
        return SG_OK;
    if (u == c->head)
        return fwd ? al_push(l, b->moe_stats, SG_R) : SG_OK;
    return al_push(l, b->moe_stats, !fwd ? SG_R : u == 1 ? SG_W : SG_RW);
}
