/* compile.c - compiles one ZeRO training step into the step-graph IR.
 *
 * The program is emitted in the order DeepSpeed runs it: per micro-step the
 * forward of every unit (with stage-3 all-gathers in front), then the
 * backward in reverse (recompute, backward, gradient reduction); the
 * optimizer chain of a CPU sub-group is emitted as soon as its gradients are
 * final, the rest after the gradient norm. Edges are not written here: they
 * follow from the buffer accesses (see ir.h).
 *
 * This file holds the driver (sg_compile_step), the sub-group layout and the
 * pieces; the buffers are compile_buffers.c's, the forward and backward
 * compile_emit.c's, the optimizer compile_optimizer.c's, a MoE layer's
 * experts compile_moe.c's (what they share: compile_internal.h).
 */
#include "graph/compile.h"

#include "graph/compile_internal.h"
#include "models/unit_layout.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

void sg_step_spec_defaults(sg_step_spec *s)
{
    memset(s, 0, sizeof *s);
    s->zero_stage = 0;
    s->dp_size = 1;
    s->micro_batch = 1;
    s->grad_accum = 1;
    s->seq_len = 256;
    s->compute_dtype = SG_F32;
    s->offload_ratio = 1.0;
    s->sub_group_size = 1000000000LL;        /* DeepSpeed default 1e9 */
    s->param_persistence_threshold = 100000; /* DeepSpeed default 1e5 */
    s->max_reuse_distance = 1000000000LL;    /* DeepSpeed default 1e9 */
    s->cast_placement = SG_CAST_SCHEDULER;
}

static int64_t odd_multiple_of_512(int64_t t)
{
    t = (t + 511) / 512 * 512;
    return t % 1024 == 0 ? t + 512 : t;
}

int64_t sg_optimizer_tile_auto(int64_t n, int64_t workers)
{
    if (workers < 1)
        workers = 1;
    int64_t t = (n + workers - 1) / workers;
    if (t < SG_OPTIMIZER_TILE_MIN)
        t = SG_OPTIMIZER_TILE_MIN;
    t = odd_multiple_of_512(t); /* m and v streams do not alias */
    /* one chunk would be the whole sub-group, whose moments alias when n is
     * a multiple of 1024 (Adam measured at half speed): two chunks */
    if (t >= n && n % 1024 == 0 && n >= 2 * SG_OPTIMIZER_TILE_MIN)
        t = odd_multiple_of_512((n + 1) / 2);
    return t;
}

int64_t sg_optimizer_tile_for(const sg_step_spec *s, int64_t n)
{
    int64_t t = s->optimizer_tile == SG_OPTIMIZER_TILE_AUTO
                    ? sg_optimizer_tile_auto(n, s->optimizer_workers)
                    : s->optimizer_tile;
    return t > 0 && t < n ? t : 0;
}

int64_t sg_unit_shard_elems(const sg_model *m, const sg_step_spec *s, int unit)
{
    int64_t p = sg_model_unit_params(m, unit);
    if (s->zero_stage == 0 || s->dp_size <= 1)
        return p;
    /* stage 3 keeps a unit under the persistence threshold whole on every
     * rank (DeepSpeed's persistent parameters): it is never gathered */
    if (s->zero_stage == 3 && p < s->param_persistence_threshold)
        return p;
    return (p + s->dp_size - 1) / s->dp_size; /* ceil: the last rank is padded */
}

int64_t sg_unit_shard_offset(const sg_model *m, const sg_step_spec *s, int unit, int rank)
{
    int64_t shard = sg_unit_shard_elems(m, s, unit);
    return shard < sg_model_unit_params(m, unit) ? (int64_t)rank * shard : 0;
}

/* sub_group_size 0 is DeepSpeed's "every parameter tensor its own
 * sub-group" (stage3.py closes a sub-group once it holds >= sub_group_size
 * elements, which with 0 happens after each parameter). The sizes of unit
 * u's per-tensor pieces in this rank's shard of the unit go to sizes (NULL:
 * counted only): the shard is cut where the tensors' boundaries fall, scaled
 * from the unit to the shard (exact with one rank, where the shard is the
 * unit). Returns the number of non-empty pieces, or a negative error code. */
static int tensor_pieces(const sg_model *m, const sg_step_spec *s, int u, int64_t *sizes)
{
    int nt = sg_model_unit_tensors(m, u, NULL, 0);
    if (nt <= 0)
        return nt;
    sg_tensor_info *ti = malloc((size_t)nt * sizeof *ti);
    if (!ti)
        return SG_ENOMEM;
    nt = sg_model_unit_tensors(m, u, ti, nt);
    int64_t P = sg_model_unit_params(m, u), S = sg_unit_shard_elems(m, s, u);
    int64_t cum = 0, prev = 0;
    int k = 0;
    for (int t = 0; t < nt; t++) {
        cum += ti[t].numel;
        int64_t end = S == P ? cum : (int64_t)((__int128)S * cum / P);
        if (end > prev) {
            if (sizes)
                sizes[k] = end - prev;
            k++;
        }
        prev = end;
    }
    free(ti);
    return k;
}

int sg_subgroup_layout_compute(const sg_model *m, const sg_step_spec *s, sg_subgroup_layout *layout,
                               sg_error *err)
{
    if (s->sub_group_size < 0)
        return sg_error_set(err, SG_EINVAL, "sub_group_size must be >= 0 (got %lld)",
                            (long long)s->sub_group_size);
    int64_t total = 0, n = 0;
    for (int u = 0; u < sg_model_num_units(m); u++) {
        total += sg_unit_shard_elems(m, s, u);
        if (s->sub_group_size == 0) {
            int k = tensor_pieces(m, s, u, NULL);
            if (k < 0)
                return sg_error_set(err, k, "unit %d: cannot list its tensors", u);
            n += k;
        }
    }
    if (s->sub_group_size > 0)
        n = (total + s->sub_group_size - 1) / s->sub_group_size;
    if (n > 1000000)
        return sg_error_set(err, SG_EINVAL,
                            "sub_group_size %lld splits %lld parameters into %lld sub-groups "
                            "(at most 1000000 supported)",
                            (long long)s->sub_group_size, (long long)total, (long long)n);
    layout->rank_params = total;
    layout->nsubgroups = (int)n;
    if (!s->offload_optimizer)
        layout->first_cpu = (int)n;
    else
        /* DeepSpeed: sub-group i goes to the CPU iff i >= floor((1 - ratio) * N) */
        layout->first_cpu = (int)floor((1.0 - s->offload_ratio) * (double)n + 1e-9);
    if (layout->first_cpu > n)
        layout->first_cpu = (int)n;
    return SG_OK;
}

static int build_tensor_pieces(compiler *c);
static int finish_pieces(compiler *c);

static int build_pieces(compiler *c)
{
    const sg_step_spec *s = c->s;
    int N = c->lay.nsubgroups;
    c->npieces = 0;
    c->pieces = calloc((size_t)(c->units + N + 1), sizeof *c->pieces);
    c->unit_first_piece = calloc((size_t)c->units + 1, sizeof(int));
    c->sg_lowest_unit = malloc((size_t)(N + 1) * sizeof(int));
    c->sg_first_piece = calloc((size_t)N + 2, sizeof(int));
    c->sg_piece_idx = malloc((size_t)(c->units + N + 1) * sizeof(int));
    if (!c->pieces || !c->unit_first_piece || !c->sg_lowest_unit || !c->sg_first_piece ||
        !c->sg_piece_idx)
        return sg_error_set(c->err, SG_ENOMEM, "out of memory building sub-groups");
    for (int i = 0; i < N; i++)
        c->sg_lowest_unit[i] = -1;
    int64_t offset = 0; /* position in the rank's flat partition */
    if (s->sub_group_size == 0)
        return build_tensor_pieces(c);
    for (int u = 0; u < c->units; u++) {
        c->unit_first_piece[u] = c->npieces;
        int64_t left = sg_unit_shard_elems(c->m, s, u);
        while (left > 0) {
            int sg = (int)(offset / s->sub_group_size);
            int64_t room = (int64_t)(sg + 1) * s->sub_group_size - offset;
            int64_t take = left < room ? left : room;
            piece *p = &c->pieces[c->npieces++];
            p->unit = u;
            p->subgroup = sg;
            p->elems = take;
            p->unit_offset = sg_unit_shard_elems(c->m, s, u) - left;
            p->subgroup_offset = offset - (int64_t)sg * s->sub_group_size;
            if (c->sg_lowest_unit[sg] < 0)
                c->sg_lowest_unit[sg] = u;
            offset += take;
            left -= take;
        }
    }
    return finish_pieces(c);
}

/* sub_group_size 0: one sub-group per tensor piece (tensor_pieces), in unit
 * and tensor order. */
static int build_tensor_pieces(compiler *c)
{
    for (int u = 0; u < c->units; u++) {
        c->unit_first_piece[u] = c->npieces;
        int k = tensor_pieces(c->m, c->s, u, NULL);
        int64_t *sizes = k > 0 ? malloc((size_t)k * sizeof *sizes) : NULL;
        if (k < 0 || (k > 0 && !sizes)) {
            free(sizes);
            return sg_error_set(c->err, SG_ENOMEM, "out of memory building sub-groups");
        }
        tensor_pieces(c->m, c->s, u, sizes);
        int64_t at = 0;
        for (int i = 0; i < k; i++) {
            int sg = c->npieces; /* one piece per sub-group */
            piece *p = &c->pieces[c->npieces++];
            p->unit = u;
            p->subgroup = sg;
            p->elems = sizes[i];
            p->unit_offset = at;
            p->subgroup_offset = 0;
            c->sg_lowest_unit[sg] = u;
            at += sizes[i];
        }
        free(sizes);
    }
    return finish_pieces(c);
}

/* The pieces' index by sub-group, once every piece is placed. */
static int finish_pieces(compiler *c)
{
    int N = c->lay.nsubgroups;
    c->unit_first_piece[c->units] = c->npieces;
    /* CSR of pieces per sub-group (pieces are sorted by sub-group already) */
    for (int p = 0; p < c->npieces; p++)
        c->sg_first_piece[c->pieces[p].subgroup + 1]++;
    for (int i = 0; i < N; i++)
        c->sg_first_piece[i + 1] += c->sg_first_piece[i];
    for (int p = 0; p < c->npieces; p++)
        c->sg_piece_idx[p] = p;
    return SG_OK;
}

static int check_spec(const sg_model *m, const sg_step_spec *s, sg_error *err)
{
    if (s->zero_stage < 0 || s->zero_stage > 3)
        return sg_error_set(err, SG_EINVAL, "zero stage %d is out of range (0-3)", s->zero_stage);
    if (s->dp_size < 1 || s->micro_batch < 1 || s->grad_accum < 1 || s->seq_len < 1)
        return sg_error_set(err, SG_EINVAL,
                            "step needs dp_size, micro batch, accumulation steps and sequence "
                            "length >= 1 (got %lld, %lld, %lld, %lld)",
                            (long long)s->dp_size, (long long)s->micro_batch,
                            (long long)s->grad_accum, (long long)s->seq_len);
    if (s->grad_accum > 4096)
        return sg_error_set(err, SG_EINVAL,
                            "gradient_accumulation_steps %lld: at most 4096 "
                            "micro-steps are compiled into one graph",
                            (long long)s->grad_accum);
    if (s->offload_ratio < 0 || s->offload_ratio > 1)
        return sg_error_set(err, SG_EINVAL, "offload ratio %g is out of range [0, 1]",
                            s->offload_ratio);
    if (s->super_offload && (!s->offload_optimizer || s->zero_stage != 3))
        return sg_error_set(err, SG_EINVAL,
                            "super_offload needs ZeRO stage 3 with the optimizer "
                            "offloaded to the CPU");
    if (s->offload_optimizer && s->zero_stage == 0)
        return sg_error_set(err, SG_EINVAL, "optimizer offload needs ZeRO stage 1, 2 or 3");
    if (s->offload_param && s->zero_stage != 3)
        return sg_error_set(err, SG_EINVAL, "parameter offload needs ZeRO stage 3");
    if (s->compute_dtype != SG_F32 && s->compute_dtype != SG_BF16 && s->compute_dtype != SG_F16)
        return sg_error_set(err, SG_EINVAL, "compute dtype must be f32, bf16 or f16");
    if (sg_model_num_units(m) < 3)
        return sg_error_set(err, SG_EINVAL, "model %s has no layers", m->name);
    if (s->batch_tile < 0 || s->batch_tile > s->micro_batch)
        return sg_error_set(err, SG_EINVAL,
                            "batch_tile %lld: expected 0 (untiled) to the micro batch %lld "
                            "(train_micro_batch_size_per_gpu) sequences per tile",
                            (long long)s->batch_tile, (long long)s->micro_batch);
    if (s->batch_tile > 0 && s->batch_tile < s->micro_batch && m->num_experts > 0 &&
        !s->batch_tile_auto)
        return sg_error_set(err, SG_ENOTSUP,
                            "batch_tile %lld: model %s is a mixture of "
                            "experts, whose load-balancing loss pools the whole micro batch; "
                            "batch tiles are not supported for it (use batch_tile 0)",
                            (long long)s->batch_tile, m->name);
    if (s->batch_tile > 0 && (s->micro_batch + s->batch_tile - 1) / s->batch_tile > 4096)
        return sg_error_set(err, SG_EINVAL,
                            "batch_tile %lld splits the micro batch of %lld "
                            "sequences into more than 4096 tiles",
                            (long long)s->batch_tile, (long long)s->micro_batch);
    return SG_OK;
}

static void compiler_free(compiler *c)
{
    free(c->pieces);
    free(c->window);
    free(c->unit_first_piece);
    free(c->unit_gathered);
    free(c->unit_kept);
    free(c->unit_full);
    free(c->unit_gbuf);
    free(c->unit_shard);
    free(c->unit_grad);
    free(c->sg_lowest_unit);
    free(c->sg_first_piece);
    free(c->sg_piece_idx);
    free(c->sg_master);
    free(c->sg_moments);
    free(c->sg_pdev);
    free(c->sg_first_chunk);
    free(c->chunks);
    free(c->cast_place);
    free(c->grad_part);
    free(c->unit_norm_part);
    free(c->loss_bufs);
}

int sg_compile_step(const sg_model *m, const sg_step_spec *s, sg_graph *g, sg_error *err)
{
    int rc = check_spec(m, s, err);
    if (rc)
        return rc;
    compiler c = {.m = m, .s = s, .g = g, .err = err, .comm_order = -1};
    c.units = sg_model_num_units(m);
    c.head = c.units - 1;
    c.tokens = s->micro_batch * s->seq_len;
    c.cd = s->compute_dtype;
    c.mixed = c.cd != SG_F32;
    c.ntiles = 1;
    /* MoE: untiled (the load-balancing loss pools the micro batch; an explicit
     * batch_tile is refused by check_spec) */
    if (s->batch_tile > 0 && s->batch_tile < s->micro_batch && m->num_experts == 0) {
        c.tile_rows = s->batch_tile;
        c.ntiles = (int)((s->micro_batch + s->batch_tile - 1) / s->batch_tile);
    }
    size_t nslots = (size_t)c.units * (size_t)c.ntiles;
    access_list l = {0};
    micro_bufs b = {0};
    b.act = malloc(nslots * sizeof(int));
    b.inner = malloc(nslots * sizeof(int));
    b.dact = malloc(nslots * sizeof(int));
    if (!b.act || !b.inner || !b.dact) {
        rc = sg_error_set(err, SG_ENOMEM, "out of memory");
        goto out;
    }
    if ((rc = sg_subgroup_layout_compute(m, s, &c.lay, err)) || (rc = build_pieces(&c)) ||
        (rc = sg_compile_resolve_cast_placement(&c)) || (rc = sg_compile_declare_buffers(&c)) ||
        (rc = sg_compile_declare_grad_parts(&c)) || (rc = sg_compile_declare_window(&c)))
        goto out;
    for (int mb = 0; mb < s->grad_accum; mb++) {
        if ((rc = sg_compile_declare_micro(&c, mb, &b)) ||
            (rc = sg_compile_emit_forward(&c, &l, &b, mb)) ||
            (rc = sg_compile_emit_backward(&c, &l, &b, mb)))
            goto out;
    }
    if ((rc = sg_compile_emit_optimizer(&c, &l)))
        goto out;
    rc = sg_graph_finalize(g, err);
out:
    if (rc == SG_ENOMEM && err && !err->msg[0])
        sg_error_set(err, rc, "out of memory compiling the step graph");
    free(l.a);
    free(b.act);
    free(b.inner);
    free(b.dact);
    free(b.moe_act);
    free(b.moe_grad);
    compiler_free(&c);
    return rc;
}
