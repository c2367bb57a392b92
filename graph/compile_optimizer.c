/* compile_optimizer.c - the step compiler's optimizer: the gradient norm,
 * fp16's overflow check and loss-scale update, every sub-group's chain (GPU
 * Adam; for a CPU sub-group, per chunk: gradients to the host, cast, CPU
 * Adam, SuperOffload's validation, cast and parameters back) and stage 1/2's
 * all-gather of the updated parameters.
 */

#include "graph/compile_internal.h"

#include <stdio.h>

static int push_subgroup_pieces(compiler *c, access_list *l, int i, int grads, sg_access_mode mode)
{
    int rc;
    for (int p = c->sg_first_piece[i]; p < c->sg_first_piece[i + 1]; p++) {
        const piece *pc = &c->pieces[c->sg_piece_idx[p]];
        if ((rc = al_push(l, grads ? pc->gbuf : pc->pbuf, mode)))
            return rc;
    }
    return SG_OK;
}

/* Reads of the global gradient state an optimizer step depends on. */
static int push_step_checks(compiler *c, access_list *l, int always_norm)
{
    int rc = SG_OK;
    /* the norm buffer also carries 1/loss scale, which fp16 steps unscale by */
    if (always_norm || c->s->gradient_clipping > 0 || c->loss_scale >= 0)
        rc = al_push(l, c->grad_norm, SG_R);
    if (!rc && c->overflow >= 0)
        rc = al_push(l, c->overflow, SG_R);
    return rc;
}

/* The gradients a chunk's Adam reads: the fp32 copy the cast made, or the
 * host copy itself (fp32 training, fused casts). */
static int chunk_grad_buffer(const opt_chunk *ch)
{
    return ch->ghost32 >= 0 ? ch->ghost32 : ch->ghost;
}

/* "d2h.grad.sg3" for an untiled sub-group, "d2h.grad.sg3.t5" for chunk 5. */
static void chunk_name(char *name, size_t size, const char *what, const opt_chunk *ch)
{
    if (ch->tile < 0)
        snprintf(name, size, "%s.sg%d", what, ch->subgroup);
    else
        snprintf(name, size, "%s.sg%d.t%d", what, ch->subgroup, ch->tile);
}

/* The sub-group's gradient (grads) or parameter pieces that overlap chunk
 * ch. A parameter piece the chunk covers whole is written (mode); one the
 * chunk cuts is read-written, so the other chunks' parts of it survive. */
static int push_chunk_pieces(compiler *c, access_list *l, const opt_chunk *ch, int grads,
                             sg_access_mode mode)
{
    int rc;
    int64_t lo = ch->offset, hi = ch->offset + ch->elems;
    for (int p = c->sg_first_piece[ch->subgroup]; p < c->sg_first_piece[ch->subgroup + 1]; p++) {
        const piece *pc = &c->pieces[c->sg_piece_idx[p]];
        int64_t plo = pc->subgroup_offset, phi = plo + pc->elems;
        if (phi <= lo || plo >= hi)
            continue;
        sg_access_mode m = mode;
        int cut = plo < lo || phi > hi;
        if (mode == SG_W && cut)
            m = SG_RW;
        /* a cut piece: the node touches the overlap only */
        int64_t overlap = (phi < hi ? phi : hi) - (plo > lo ? plo : lo);
        int buf = grads ? pc->gbuf : pc->pbuf;
        int64_t esize = (int64_t)sg_dtype_size(c->g->buffers[buf].dtype);
        if ((rc = al_push_part(l, buf, m, cut ? overlap * esize : 0)))
            return rc;
    }
    return SG_OK;
}

/* Where the casts of CPU sub-group i run (cast_placement): the device, and
 * whether StarPU must keep them there (else the scheduler picks). */
static sg_device_class cast_device(const compiler *c, int i, int *pinned)
{
    sg_cast_placement pl = c->cast_place ? c->cast_place[i] : SG_CAST_SCHEDULER;
    *pinned = pl == SG_CAST_CPU || pl == SG_CAST_GPU;
    return pl == SG_CAST_GPU ? SG_DEV_GPU : SG_DEV_CPU;
}

static int cast_node_on(compiler *c, access_list *l, int i, const opt_chunk *ch, const char *what,
                        sg_device_class dev, int pinned)
{
    char name[SG_IR_NAME_MAX];
    chunk_name(name, sizeof name, what, ch);
    int rc = node(c, l, SG_OP_CAST, dev, -1, -1, i, (double)ch->elems, SG_LINK_NONE, 0, name);
    if (rc >= 0) {
        c->g->nodes[rc].tile = ch->tile;
        c->g->nodes[rc].pinned = pinned;
    }
    return rc;
}

static int cast_node(compiler *c, access_list *l, int i, const opt_chunk *ch, const char *what)
{
    int pinned;
    sg_device_class dev = cast_device(c, i, &pinned);
    return cast_node_on(c, l, i, ch, what, dev, pinned);
}

/* Appends a node of chunk ch (its tile set). */
static int chunk_node(compiler *c, access_list *l, const opt_chunk *ch, sg_op_kind kind,
                      sg_device_class dev, double flops, sg_link_dir link, int64_t link_bytes,
                      const char *what)
{
    char name[SG_IR_NAME_MAX];
    chunk_name(name, sizeof name, what, ch);
    int rc = node(c, l, kind, dev, -1, -1, ch->subgroup, flops, link, link_bytes, name);
    if (rc >= 0)
        c->g->nodes[rc].tile = ch->tile;
    return rc;
}

#define FOR_CHUNKS(c, i, ch)                                         \
    for (const opt_chunk *ch = &(c)->chunks[(c)->sg_first_chunk[i]]; \
         ch < &(c)->chunks[(c)->sg_first_chunk[(i) + 1]]; ch++)

/* D2H copy of a CPU sub-group's gradients, and their cast to fp32, per chunk. */
static int emit_cpu_grad_copy(compiler *c, access_list *l, int i)
{
    int rc;
    FOR_CHUNKS(c, i, ch)
    {
        if ((rc = push_chunk_pieces(c, l, ch, 1, SG_R)) || (rc = al_push(l, ch->ghost, SG_W)))
            return rc;
        if ((rc = chunk_node(c, l, ch, SG_OP_D2H, SG_DEV_LINK, 0.0, SG_LINK_D2H,
                             ch->elems * (int64_t)sg_dtype_size(c->cd), "d2h.grad")) < 0)
            return rc;
        if (!c->mixed || casts_fused(c, i))
            continue;
        if ((rc = al_push(l, ch->ghost, SG_R)) || (rc = al_push(l, ch->ghost32, SG_W)))
            return rc;
        if ((rc = cast_node(c, l, i, ch, "cast.grad")) < 0)
            return rc;
    }
    return SG_OK;
}

/* Adam FLOPs per element: moments, bias correction, sqrt, division, update. */
#define ADAM_FLOPS_PER_ELEM 12.0

static int emit_cpu_adam(compiler *c, access_list *l, int i)
{
    int rc;
    int spec = c->s->super_offload;
    FOR_CHUNKS(c, i, ch)
    {
        if ((rc = al_push(l, chunk_grad_buffer(ch), SG_R)))
            return rc;
        /* a speculative step does not wait for the norm: validation fixes it up;
         * with fp16 it unscales by the scale of this step, read before the
         * loss-scale update writes the next one */
        if (!spec && (rc = push_step_checks(c, l, 0)))
            return rc;
        if (spec && c->loss_scale >= 0 && (rc = al_push(l, c->loss_scale, SG_R)))
            return rc;
        if ((rc = al_push(l, ch->master, SG_RW)) || (rc = al_push(l, ch->moments, SG_RW)))
            return rc;
        /* fused casts: the 16-bit parameters come out of the same pass */
        if (casts_fused(c, i) && ch->phost >= 0 && (rc = al_push(l, ch->phost, SG_W)))
            return rc;
        if ((rc = chunk_node(c, l, ch, SG_OP_ADAM_CPU, SG_DEV_CPU,
                             ADAM_FLOPS_PER_ELEM * (double)ch->elems, SG_LINK_NONE, 0,
                             "adam_cpu")) < 0)
            return rc;
    }
    return SG_OK;
}

static int emit_cpu_finish(compiler *c, access_list *l, int i)
{
    int rc;
    FOR_CHUNKS(c, i, ch)
    {
        if (c->s->super_offload) {
            /* a rollback inverts the step algebraically from the same gradient,
             * as DeepSpeed's CPU Adam does: no copy of the state is kept; every
             * chunk decides from the same global norm, element by element */
            if ((rc = push_step_checks(c, l, 1)) ||
                (rc = al_push(l, chunk_grad_buffer(ch), SG_R)) ||
                (rc = al_push(l, ch->master, SG_RW)) || (rc = al_push(l, ch->moments, SG_RW)))
                return rc;
            /* fused casts: a rollback or redo rewrites the 16-bit parameters
             * (read-write: a kept step leaves Adam's) */
            if (casts_fused(c, i) && ch->phost >= 0 && (rc = al_push(l, ch->phost, SG_RW)))
                return rc;
            if ((rc = chunk_node(c, l, ch, SG_OP_VALIDATE, SG_DEV_CPU, 2.0 * (double)ch->elems,
                                 SG_LINK_NONE, 0, "validate")) < 0)
                return rc;
        }
        if (c->s->offload_param) {
            /* the parameters live on the host: the master goes straight into
             * the pieces, on a CPU worker (a copy in fp32) */
            if ((rc = al_push(l, ch->master, SG_R)) || (rc = push_chunk_pieces(c, l, ch, 0, SG_W)))
                return rc;
            if ((rc = cast_node_on(c, l, i, ch, c->mixed ? "cast.param" : "copy.param", SG_DEV_CPU,
                                   1)) < 0)
                return rc;
            continue;
        }
        int src = ch->master;
        if (c->mixed && !casts_fused(c, i)) {
            if ((rc = al_push(l, ch->master, SG_R)) || (rc = al_push(l, ch->phost, SG_W)))
                return rc;
            if ((rc = cast_node(c, l, i, ch, "cast.param")) < 0)
                return rc;
        }
        if (c->mixed)
            src = ch->phost;
        if ((rc = al_push(l, src, SG_R)) || (rc = push_chunk_pieces(c, l, ch, 0, SG_W)))
            return rc;
        if ((rc = chunk_node(c, l, ch, SG_OP_H2D, SG_DEV_LINK, 0.0, SG_LINK_H2D,
                             ch->elems * (int64_t)sg_dtype_size(c->cd), "h2d.param")) < 0)
            return rc;
    }
    return SG_OK;
}

/* Parameters offloaded: a GPU sub-group's update (its cast update, or in
 * fp32 its master) copied device-to-host into its pieces. */
static int emit_param_d2h(compiler *c, access_list *l, int i)
{
    char name[SG_IR_NAME_MAX];
    int64_t n = subgroup_elems(c, i);
    int src = c->sg_pdev[i] >= 0 ? c->sg_pdev[i] : c->sg_master[i];
    int rc;
    if ((rc = al_push(l, src, SG_R)) || (rc = push_subgroup_pieces(c, l, i, 0, SG_W)))
        return rc;
    snprintf(name, sizeof name, "d2h.param.sg%d", i);
    rc = node(c, l, SG_OP_D2H, SG_DEV_LINK, -1, -1, i, 0.0, SG_LINK_D2H,
              n * (int64_t)sg_dtype_size(c->cd), name);
    return rc < 0 ? rc : SG_OK;
}

static int emit_gpu_adam(compiler *c, access_list *l, int i)
{
    char name[SG_IR_NAME_MAX];
    int64_t n = subgroup_elems(c, i);
    int rc;
    if ((rc = push_subgroup_pieces(c, l, i, 1, SG_R)) || (rc = push_step_checks(c, l, 0)) ||
        (rc = al_push(l, c->sg_moments[i], SG_RW)))
        return rc;
    /* fp32 training updates the parameters in place; mixed precision updates
     * the fp32 master and casts it back; with the parameters on the host, the
     * master (fp32 included) is updated and copied back to them */
    int in_master = c->sg_master[i] >= 0;
    rc = in_master ? al_push(l, c->sg_master[i], SG_RW) : push_subgroup_pieces(c, l, i, 0, SG_RW);
    if (rc)
        return rc;
    snprintf(name, sizeof name, "adam_gpu.sg%d", i);
    if ((rc = node(c, l, SG_OP_ADAM_GPU, SG_DEV_GPU, -1, -1, i, ADAM_FLOPS_PER_ELEM * (double)n,
                   SG_LINK_NONE, 0, name)) < 0)
        return rc;
    if (c->mixed) {
        /* into the pieces, or with the parameters offloaded into the device
         * buffer the copy back reads */
        int dst = c->sg_pdev[i];
        if ((rc = al_push(l, c->sg_master[i], SG_R)) ||
            (rc = dst >= 0 ? al_push(l, dst, SG_W) : push_subgroup_pieces(c, l, i, 0, SG_W)))
            return rc;
        snprintf(name, sizeof name, "cast.param.sg%d", i);
        if ((rc = node(c, l, SG_OP_CAST, SG_DEV_GPU, -1, -1, i, (double)n, SG_LINK_NONE, 0, name)) <
            0)
            return rc;
    }
    return c->s->offload_param ? emit_param_d2h(c, l, i) : SG_OK;
}

/* CPU sub-groups whose gradients became final when unit u was reduced. */
int sg_compile_emit_ready_subgroups(compiler *c, access_list *l, int u)
{
    int rc;
    for (int i = c->lay.first_cpu; i < c->lay.nsubgroups; i++) {
        if (c->sg_lowest_unit[i] != u)
            continue;
        if ((rc = emit_cpu_grad_copy(c, l, i)))
            return rc;
        if (c->s->super_offload && (rc = emit_cpu_adam(c, l, i)))
            return rc;
    }
    return SG_OK;
}

int sg_compile_emit_optimizer(compiler *c, access_list *l)
{
    int rc;
    /* global gradient norm over this rank's shard (ranks combine partial
     * norms): the units' partials in unit order, which is piece order */
    for (int u = 0; u < c->units; u++)
        if (c->unit_norm_part[u] >= 0 && (rc = al_push(l, c->unit_norm_part[u], SG_R)))
            return rc;
    /* fp16: the norm is of the unscaled gradients, so it reads the scale
     * they were computed with (before this step's update of it) */
    if (c->loss_scale >= 0 && (rc = al_push(l, c->loss_scale, SG_R)))
        return rc;
    /* several ranks: the norm adds every rank's partials (a collective), and
     * turns every micro-step's loss into its mean over the ranks in the same
     * call, so that the trainer's main thread needs no collective of its own
     * (docs/ranks.md: a main thread waiting for a peer could deadlock with a
     * worker waiting in the next step's collective) */
    if ((rc = al_push(l, c->grad_norm, SG_W)) || (rc = push_comm_order(c, l)))
        return rc;
    for (int k = 0; c->comm_order >= 0 && k < c->nloss; k++)
        if ((rc = al_push(l, c->loss_bufs[k], SG_RW)))
            return rc;
    if ((rc = node(c, l, SG_OP_GRAD_NORM, SG_DEV_GPU, -1, -1, -1, (double)c->npieces, SG_LINK_NONE,
                   0, "grad_norm")) < 0)
        return rc;
    if (c->overflow >= 0) {
        if ((rc = al_push(l, c->grad_norm, SG_R)) || (rc = al_push(l, c->overflow, SG_W)))
            return rc;
        if ((rc = node(c, l, SG_OP_OVERFLOW_CHECK, SG_DEV_GPU, -1, -1, -1, 1.0, SG_LINK_NONE, 0,
                       "overflow_check")) < 0)
            return rc;
        if ((rc = al_push(l, c->overflow, SG_R)) || (rc = al_push(l, c->loss_scale, SG_RW)) ||
            (rc = al_push(l, c->loss_scaler_state, SG_RW)))
            return rc;
        if ((rc = node(c, l, SG_OP_LOSS_SCALE, SG_DEV_GPU, -1, -1, -1, 1.0, SG_LINK_NONE, 0,
                       "loss_scale_update")) < 0)
            return rc;
    }
    for (int i = 0; i < c->lay.nsubgroups; i++) {
        if (i < c->lay.first_cpu)
            rc = emit_gpu_adam(c, l, i);
        else if (c->s->super_offload) /* speculative Adam already emitted */
            rc = emit_cpu_finish(c, l, i);
        else if ((rc = emit_cpu_adam(c, l, i)) == SG_OK)
            rc = emit_cpu_finish(c, l, i);
        if (rc)
            return rc;
    }
    if (c->s->zero_stage == 1 || c->s->zero_stage == 2) {
        /* every rank updated its partition: gather the new parameters */
        for (int u = 0; u < c->units; u++)
            if ((rc = sg_compile_emit_allgather(c, l, u, -1, "step")) < 0)
                return rc;
    }
    return SG_OK;
}
