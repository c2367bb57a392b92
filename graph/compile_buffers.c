/* compile_buffers.c - the step compiler's buffers: parameter and gradient
 * pieces, stage-3 gathered and offloaded copies, the step's global state
 * (gradient norm, loss scale, comm_order), each sub-group's optimizer state
 * in chunks, and each micro-step's activations. Declared before any node
 * (sg_compile_step); the emitters only access them.
 */

#include "graph/compile_internal.h"

#include <stdio.h>
#include <stdlib.h>

/* The arrays of buffer ids per unit and per sub-group. */
static int alloc_buffer_ids(compiler *c)
{
    int N = c->lay.nsubgroups;
    size_t nu = (size_t)c->units;
    c->unit_gathered = calloc(nu, sizeof(int));
    c->unit_kept = calloc(nu, sizeof(int));
    c->unit_full = malloc(nu * sizeof(int));
    c->unit_gbuf = malloc(nu * sizeof(int));
    c->unit_shard = malloc(nu * sizeof(int));
    c->unit_grad = malloc(nu * sizeof(int));
    c->sg_master = malloc((size_t)(N + 1) * sizeof(int));
    c->sg_moments = malloc((size_t)(N + 1) * sizeof(int));
    c->sg_pdev = malloc((size_t)(N + 1) * sizeof(int));
    if (!c->sg_master || !c->sg_moments || !c->sg_pdev)
        return sg_error_set(c->err, SG_ENOMEM, "out of memory");
    if (!c->unit_gathered || !c->unit_kept || !c->unit_full || !c->unit_gbuf || !c->unit_shard ||
        !c->unit_grad)
        return sg_error_set(c->err, SG_ENOMEM, "out of memory");
    return SG_OK;
}

static int declare_piece_buffers(compiler *c)
{
    const sg_step_spec *s = c->s;
    /* parameter and gradient pieces of this rank's partition; with parameter
     * offload the parameters live on the host */
    sg_mem_space param_space = s->offload_param ? SG_MEM_HOST : SG_MEM_GPU;
    for (int p = 0; p < c->npieces; p++) {
        piece *pc = &c->pieces[p];
        pc->pbuf =
            buffer(c, pc->elems, c->cd, param_space, 1, "param.%d.sg%d", pc->unit, pc->subgroup);
        pc->gbuf = buffer(c, pc->elems, c->cd, SG_MEM_GPU, 0, "grad_shard.%d.sg%d", pc->unit,
                          pc->subgroup);
        if (pc->pbuf < 0 || pc->gbuf < 0)
            return SG_ENOMEM;
        tag(c, pc->pbuf, SG_BUF_PARAM_PIECE, pc->unit, -1, pc->subgroup);
        tag(c, pc->gbuf, SG_BUF_GRAD_PIECE, pc->unit, -1, pc->subgroup);
        int bufs[2] = {pc->pbuf, pc->gbuf};
        for (int k = 0; k < 2; k++) {
            c->g->buffers[bufs[k]].unit_offset = pc->unit_offset;
            c->g->buffers[bufs[k]].subgroup_offset = pc->subgroup_offset;
        }
    }
    return SG_OK;
}

/* Each unit's full gradient and, as its stage needs, its gathered, shard and
 * full parameter buffers. */
static int declare_unit_buffers(compiler *c)
{
    const sg_model *m = c->m;
    const sg_step_spec *s = c->s;
    /* stage 3 gathering decisions: reuse distance = parameters gathered
     * between the unit's forward and its backward */
    int64_t reuse = 0;
    for (int u = c->units - 1; u >= 0; u--) {
        int64_t pu = sg_model_unit_params(m, u);
        c->unit_full[u] = c->unit_gbuf[u] = c->unit_shard[u] = -1;
        c->unit_gathered[u] = s->zero_stage == 3 && pu >= s->param_persistence_threshold;
        if (c->unit_gathered[u]) {
            c->unit_kept[u] = reuse <= s->max_reuse_distance || (u == 0 && m->tie_word_embeddings);
            reuse += pu;
        } else if (s->offload_param) {
            /* a unit every rank holds whole, its pieces on the host: copied
             * to the device before use, kept until its backward (it is small) */
            c->unit_kept[u] = 1;
        }
        /* a unit fetched before use (unit_fetched) has its device buffer; a
         * gathered one with offloaded pieces also a device copy of its shard */
        if (c->unit_gathered[u] || s->offload_param)
            c->unit_gbuf[u] = tag(c, buffer(c, pu, c->cd, SG_MEM_GPU, 0, "gathered.%d", u),
                                  SG_BUF_GATHERED, u, -1, -1);
        if (c->unit_gathered[u] && s->offload_param &&
            (c->unit_shard[u] = tag(
                 c,
                 buffer(c, sg_unit_shard_elems(m, s, u), c->cd, SG_MEM_GPU, 0, "param_shard.%d", u),
                 SG_BUF_PARAM_SHARD, u, -1, -1)) >= 0)
            c->g->buffers[c->unit_shard[u]].unit_offset =
                c->pieces[c->unit_first_piece[u]].unit_offset;
        if (s->zero_stage == 1 || s->zero_stage == 2)
            c->unit_full[u] = tag(c, buffer(c, pu, c->cd, SG_MEM_GPU, 1, "param_full.%d", u),
                                  SG_BUF_PARAM_FULL, u, -1, -1);
        c->unit_grad[u] =
            tag(c, buffer(c, pu, c->cd, SG_MEM_GPU, 0, "grad.%d", u), SG_BUF_GRAD, u, -1, -1);
        if (c->unit_grad[u] < 0 || (unit_fetched(c, u) && c->unit_gbuf[u] < 0) ||
            (c->unit_gathered[u] && s->offload_param && c->unit_shard[u] < 0))
            return SG_ENOMEM;
    }
    return SG_OK;
}

/* The step's global state: the gradient norm and its per-unit partials, the
 * comm_order token of several ranks, fp16's overflow flag and loss scale. */
static int declare_step_buffers(compiler *c)
{
    const sg_step_spec *s = c->s;
    size_t nu = (size_t)c->units;
    c->grad_norm =
        tag(c, buffer(c, 2, SG_F32, SG_MEM_GPU, 0, "grad_norm"), SG_BUF_GRAD_NORM, -1, -1, -1);
    /* each unit's pieces' partials of the norm, taken right after the unit's
     * last reduction so that its gradient pieces need not wait for the norm */
    c->unit_norm_part = malloc(nu * sizeof(int));
    if (!c->unit_norm_part)
        return sg_error_set(c->err, SG_ENOMEM, "out of memory");
    for (int u = 0; u < c->units; u++) {
        int np = c->unit_first_piece[u + 1] - c->unit_first_piece[u];
        c->unit_norm_part[u] = -1;
        if (np > 0 && (c->unit_norm_part[u] = tag(c,
                                                  buffer(c, (int64_t)np * SG_NORM_PART_F32, SG_F32,
                                                         SG_MEM_GPU, 0, "norm_part.%d", u),
                                                  SG_BUF_NORM_PART, u, -1, -1)) < 0)
            return SG_ENOMEM;
    }
    /* several ranks: every collective node reads and writes this token, so
     * StarPU runs the collectives one at a time, in program order, on every
     * rank alike (docs/ranks.md: why that cannot deadlock) */
    c->comm_order = -1;
    if (s->dp_size > 1 &&
        (c->comm_order = tag(c, buffer(c, 1, SG_I32, SG_MEM_HOST, 1, "comm_order"),
                             SG_BUF_COMM_ORDER, -1, -1, -1)) < 0)
        return SG_ENOMEM;
    c->overflow = c->loss_scale = c->loss_scaler_state = -1;
    if (c->cd == SG_F16) {
        c->overflow =
            tag(c, buffer(c, 1, SG_I32, SG_MEM_GPU, 0, "overflow"), SG_BUF_OVERFLOW, -1, -1, -1);
        c->loss_scale = tag(c, buffer(c, 1, SG_F32, SG_MEM_GPU, 1, "loss_scale"), SG_BUF_LOSS_SCALE,
                            -1, -1, -1);
        /* the scaler's state (raw bytes of sg_loss_scaler_state), on the
         * host where the update runs */
        c->loss_scaler_state =
            tag(c, buffer(c, SG_LOSS_SCALER_STATE_I32, SG_I32, SG_MEM_HOST, 1, "loss_scaler_state"),
                SG_BUF_LOSS_SCALER_STATE, -1, -1, -1);
        if (c->overflow < 0 || c->loss_scale < 0 || c->loss_scaler_state < 0)
            return SG_ENOMEM;
    }
    return SG_OK;
}

/* Chunk k of the nch chunks of sub-group i (n elements, `tile` per chunk
 * when tiled): its optimizer state and, on the CPU, its host buffers. */
static int declare_chunk(compiler *c, int i, int k, int nch, int64_t n, int64_t tile)
{
    const sg_step_spec *s = c->s;
    int cpu = i >= c->lay.first_cpu;
    sg_mem_space sp = cpu ? SG_MEM_HOST : SG_MEM_GPU;
    opt_chunk *ch = &c->chunks[c->nchunks++];
    int tiled = nch > 1;
    char sfx[24] = "";
    if (tiled)
        snprintf(sfx, sizeof sfx, ".t%d", k);
    ch->subgroup = i;
    ch->tile = tiled ? k : -1;
    ch->offset = tiled ? (int64_t)k * tile : 0;
    ch->elems = tiled ? (k == nch - 1 ? n - ch->offset : tile) : n;
    int64_t e = ch->elems;
    ch->master = ch->ghost = ch->ghost32 = ch->phost = -1;
    /* with the parameters on the host, a GPU sub-group keeps its fp32
     * parameters beside its state, in fp32 training too */
    if (c->mixed || cpu || s->offload_param)
        ch->master =
            tag(c, buffer(c, e, SG_F32, sp, 1, "master.sg%d%s", i, sfx), SG_BUF_MASTER, -1, -1, i);
    ch->moments = tag(c,
                      buffer(c, sg_optimizer_state_arrays(c->s->optimizer_state) * e, SG_F32, sp, 1,
                             "adam_moments.sg%d%s", i, sfx),
                      SG_BUF_MOMENTS, -1, -1, i);
    if (cpu) {
        ch->ghost = tag(c, buffer(c, e, c->cd, SG_MEM_HOST, 0, "grad_host.sg%d%s", i, sfx),
                        SG_BUF_GRAD_HOST, -1, -1, i);
        if (c->mixed && !casts_fused(c, i))
            ch->ghost32 =
                tag(c, buffer(c, e, SG_F32, SG_MEM_HOST, 0, "grad_host_f32.sg%d%s", i, sfx),
                    SG_BUF_GRAD_HOST_F32, -1, -1, i);
        /* offloaded parameters take the cast directly */
        if (c->mixed && !s->offload_param)
            ch->phost = tag(c, buffer(c, e, c->cd, SG_MEM_HOST, 0, "param_host.sg%d%s", i, sfx),
                            SG_BUF_PARAM_HOST, -1, -1, i);
    }
    if (ch->moments < 0 || ((c->mixed || cpu || s->offload_param) && ch->master < 0) ||
        (cpu && ch->ghost < 0) || (cpu && c->mixed && !casts_fused(c, i) && ch->ghost32 < 0) ||
        (cpu && c->mixed && !s->offload_param && ch->phost < 0))
        return SG_ENOMEM;
    /* a GPU sub-group's update, cast to the compute dtype on the GPU
     * before it goes back to the host's pieces */
    if (!cpu && c->mixed && s->offload_param &&
        (ch->phost = tag(c, buffer(c, e, c->cd, SG_MEM_GPU, 0, "param_dev.sg%d", i),
                         SG_BUF_PARAM_HOST, -1, -1, i)) < 0)
        return SG_ENOMEM;
    int ids[] = {ch->master, ch->moments, ch->ghost, ch->ghost32, ch->phost};
    for (size_t b = 0; b < sizeof ids / sizeof ids[0]; b++) {
        if (ids[b] < 0)
            continue;
        c->g->buffers[ids[b]].subgroup_offset = ch->offset;
        c->g->buffers[ids[b]].tile = ch->tile;
    }
    return SG_OK;
}

static int declare_optimizer_state(compiler *c)
{
    const sg_step_spec *s = c->s;
    int N = c->lay.nsubgroups;
    int rc;
    /* optimizer state per sub-group; a tiled CPU sub-group's host state is
     * one buffer per chunk (sg_optimizer_tile_for) */
    c->sg_first_chunk = calloc((size_t)N + 1, sizeof(int));
    if (!c->sg_first_chunk)
        return sg_error_set(c->err, SG_ENOMEM, "out of memory");
    for (int i = 0; i < N; i++) {
        int64_t n = 0;
        for (int p = c->sg_first_piece[i]; p < c->sg_first_piece[i + 1]; p++)
            n += c->pieces[c->sg_piece_idx[p]].elems;
        int cpu = i >= c->lay.first_cpu;
        c->sg_master[i] = -1;
        int64_t tile = cpu ? sg_optimizer_tile_for(s, n) : 0;
        int64_t nch64 = tile > 0 ? (n + tile - 1) / tile : 1;
        if (nch64 > 1 && (int64_t)c->nchunks + nch64 > 1000000)
            return sg_error_set(c->err, SG_EINVAL,
                                "optimizer_tile %lld makes more than "
                                "1000000 optimizer chunks (at most 1000000 supported)",
                                (long long)tile);
        int nch = (int)nch64;
        opt_chunk *nc = realloc(c->chunks, (size_t)(c->nchunks + nch) * sizeof *nc);
        if (!nc)
            return sg_error_set(c->err, SG_ENOMEM, "out of memory");
        c->chunks = nc;
        c->sg_first_chunk[i] = c->nchunks;
        for (int k = 0; k < nch; k++)
            if ((rc = declare_chunk(c, i, k, nch, n, tile)))
                return rc;
        /* an untiled sub-group's buffers are its chunk's */
        if (nch == 1) {
            const opt_chunk *ch = &c->chunks[c->nchunks - 1];
            c->sg_master[i] = ch->master;
            c->sg_moments[i] = ch->moments;
            c->sg_pdev[i] = cpu ? -1 : ch->phost;
        } else {
            c->sg_moments[i] = c->sg_pdev[i] = -1;
        }
    }
    c->sg_first_chunk[N] = c->nchunks;
    return SG_OK;
}

int sg_compile_declare_buffers(compiler *c)
{
    int rc;
    if ((rc = alloc_buffer_ids(c)) || (rc = declare_piece_buffers(c)) ||
        (rc = declare_unit_buffers(c)) || (rc = declare_step_buffers(c)))
        return rc;
    return declare_optimizer_state(c);
}

/* Cast placement per CPU sub-group (sg_step_spec.cast_placement). "auto"
 * compares, for an n-element sub-group, the two placements' time as the
 * graph lays them out: on the CPU the casts cost 12 bytes of memory traffic
 * per element (bf16 read + fp32 write, fp32 read + bf16 write) on the
 * optimizer's workers and add nothing to the link; on the GPU they cost the
 * same traffic at GPU bandwidth, but the host buffers around them cross the
 * link: the host gradients to the GPU and their fp32 copy back (2 + 4 bytes),
 * the fp32 master to the GPU and the cast parameters back (4 + 2 bytes). The
 * GPU wins only where 12 n / gpu_bw + 12 n / link_bw < 12 n / (cpu_bw * W);
 * without cost figures (spec.cast_costs zero) the casts stay on the CPU.
 * With parameter offload the parameter cast writes host memory and always
 * runs on the CPU: the choice is the gradient cast's, by the same inequality
 * (6 bytes per element on each side instead of 12: the bytes cancel). */
int sg_compile_resolve_cast_placement(compiler *c)
{
    int N = c->lay.nsubgroups;
    c->cast_place = malloc((size_t)(N > 0 ? N : 1) * sizeof *c->cast_place);
    if (!c->cast_place)
        return sg_error_set(c->err, SG_ENOMEM, "out of memory");
    const sg_cast_costs *k = &c->s->cast_costs;
    for (int i = 0; i < N; i++) {
        sg_cast_placement pl = c->s->cast_placement;
        if (pl == SG_CAST_AUTO) {
            double workers = c->s->optimizer_workers > 0 ? (double)c->s->optimizer_workers : 1.0;
            /* its chunks, as sg_compile_declare_buffers will cut it (which runs
             * after: fused casts change the buffers it declares) */
            int64_t n = subgroup_elems(c, i);
            int64_t tile = i >= c->lay.first_cpu ? sg_optimizer_tile_for(c->s, n) : 0;
            int64_t nch = tile > 0 ? (n + tile - 1) / tile : 1;
            if ((double)nch < workers)
                workers = (double)nch; /* an untiled sub-group's cast is one task */
            double bytes = 12.0 * (double)n;
            pl = SG_CAST_CPU;
            if (k->cpu_worker_bw > 0 && k->gpu_bw > 0 && k->link_bw > 0 &&
                bytes / k->gpu_bw + bytes / k->link_bw < bytes / (k->cpu_worker_bw * workers))
                pl = SG_CAST_GPU;
        }
        c->cast_place[i] = pl;
    }
    return SG_OK;
}

int sg_compile_declare_micro(compiler *c, int mb, micro_bufs *b)
{
    const sg_model *m = c->m;
    char sfx[16];
    b->tokens = tag(c, buffer(c, 2 * c->tokens, SG_I32, SG_MEM_HOST, 1, "tokens.mb%d", mb),
                    SG_BUF_TOKENS, -1, mb, -1);
    for (int u = 0; u < c->units; u++)
        for (int t = 0; t < c->ntiles; t++) {
            int is_head = u == c->head;
            int64_t rows = tile_rows(c, t), T = rows * c->s->seq_len;
            int i = TI(c, u, t);
            tile_suffix(c, t, sfx, sizeof sfx);
            /* a tile's loss buffer holds its share of the micro-step's mean loss */
            b->act[i] = is_head
                            ? tag(c, buffer(c, 1, SG_F32, SG_MEM_GPU, 0, "loss.mb%d%s", mb, sfx),
                                  SG_BUF_LOSS, u, mb, -1)
                            : tag(c,
                                  buffer(c, T * m->hidden_size, c->cd, SG_MEM_GPU, 0,
                                         "act.%d.mb%d%s", u, mb, sfx),
                                  SG_BUF_ACT, u, mb, -1);
            b->dact[i] = is_head ? -1
                                 : tag(c,
                                       buffer(c, T * m->hidden_size, c->cd, SG_MEM_GPU, 0,
                                              "dact.%d.mb%d%s", u, mb, sfx),
                                       SG_BUF_DACT, u, mb, -1);
            /* what the backward reads: logits and the final norm's output for the
             * head, the block's internals for a layer (models/unit_layout.h) */
            size_t saved = sg_unit_saved_floats(m, u, (size_t)rows, (size_t)c->s->seq_len);
            b->inner[i] = saved == 0 ? -1
                                     : tag(c,
                                           buffer(c, (int64_t)saved, c->cd, SG_MEM_GPU, 0,
                                                  "saved.%d.mb%d%s", u, mb, sfx),
                                           SG_BUF_SAVED, u, mb, -1);
            if (b->act[i] < 0 || (!is_head && b->dact[i] < 0) || (saved > 0 && b->inner[i] < 0))
                return SG_ENOMEM;
            if (is_head) {
                int *nl = realloc(c->loss_bufs, (size_t)(c->nloss + 1) * sizeof *nl);
                if (!nl)
                    return SG_ENOMEM;
                c->loss_bufs = nl;
                c->loss_bufs[c->nloss++] = b->act[i];
            }
            tile_tag(c, b->act[i], t);
            tile_tag(c, b->dact[i], t);
            tile_tag(c, b->inner[i], t);
        }
    return sg_compile_declare_moe_stats(c, mb, b);
}

/* Tiled graphs: the fp32 weight-gradient partial of every (unit, tile),
 * shared by the micro-steps (each micro-step's sum reads them before the
 * next micro-step's backward overwrites them). */
int sg_compile_declare_grad_parts(compiler *c)
{
    if (c->ntiles == 1)
        return SG_OK;
    c->grad_part = malloc((size_t)c->units * (size_t)c->ntiles * sizeof(int));
    if (!c->grad_part)
        return sg_error_set(c->err, SG_ENOMEM, "out of memory");
    for (int u = 0; u < c->units; u++)
        for (int t = 0; t < c->ntiles; t++) {
            int id = tag(c,
                         buffer(c, sg_model_unit_params(c->m, u), SG_F32, SG_MEM_GPU, 0,
                                "grad_part.%d.t%d", u, t),
                         SG_BUF_GRAD_PART, u, -1, -1);
            if (id < 0)
                return SG_ENOMEM;
            c->grad_part[TI(c, u, t)] = tile_tag(c, id, t);
        }
    return SG_OK;
}

/* The micro-step window (sg_step_spec.micro_window = W): micro-step k + W's
 * embedding forward reads a token that micro-step k's embedding backward
 * writes, so micro-step k + W starts once micro-step k's backward is done
 * and at most W micro-steps hold activations, however many workers run
 * ready work ahead of program order (with W = the CPU workers, as many
 * micro-steps as workers run side by side). The tokens are one element,
 * never read by a codelet; program order is unchanged. */
int sg_compile_declare_window(compiler *c)
{
    const int64_t A = c->s->grad_accum, W = c->s->micro_window;
    c->window = malloc((size_t)A * (size_t)c->ntiles * sizeof(int));
    if (!c->window)
        return sg_error_set(c->err, SG_ENOMEM, "out of memory");
    char sfx[16];
    for (int64_t k = 0; k < A; k++)
        for (int t = 0; t < c->ntiles; t++) {
            int *id = &c->window[k * c->ntiles + t];
            *id = -1;
            if (W < 1 || k + W >= A)
                continue;
            *id = tag(c,
                      buffer(c, 1, SG_F32, SG_MEM_GPU, 0, "window.mb%lld%s", (long long)k,
                             tile_suffix(c, t, sfx, sizeof sfx)),
                      SG_BUF_WINDOW, 0, (int)k, -1);
            if (*id < 0)
                return SG_ENOMEM;
            tile_tag(c, *id, t);
        }
    return SG_OK;
}
