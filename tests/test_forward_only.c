/* test_forward_only.c - graph/forward_only.h: the forward of a compiled step,
 * checked against what the step's semantics say it must hold (graph/compile.h),
 * counted from the model and the spec, not from the cut's own output:
 * - one forward node per micro-step, unit and batch tile, in unit order
 *   within a micro-step; with ZeRO 3 one all-gather per gathered unit before
 *   its forward (none of the backward's re-gathers), and with parameter
 *   offload one fetch per unit and micro-step;
 * - no backward, recompute, reduction, optimizer node; no gradient or
 *   optimizer-state buffer;
 * - every buffer it holds is one of the step's, with the same name, size,
 *   dtype, space and persistence (what the lowering shares by name);
 * - MoE models: the experts and combines of each MoE layer;
 * - a step compiled with activation checkpointing, or without a forward, is
 *   refused; a fetch whose output a backward reads next is left out. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "graph/compile.h"
#include "graph/forward_only.h"
#include "graph/ir.h"
#include "models/model.h"
#include "tests/tap.h"
#include "tests/test_util.h"

static int count_kind(const sg_graph *g, sg_op_kind k)
{
    int n = 0;
    for (int i = 0; i < g->nnodes; i++)
        n += g->nodes[i].kind == k;
    return n;
}

/* 1 if every buffer of f is a buffer of s alike (name, size, dtype, space,
 * persistence) */
static int buffers_shared(const sg_graph *f, const sg_graph *s)
{
    for (int b = 0; b < f->nbuffers; b++) {
        int found = 0;
        for (int c = 0; c < s->nbuffers && !found; c++) {
            const sg_buffer *x = &f->buffers[b], *y = &s->buffers[c];
            found = !strcmp(x->name, y->name) && x->elems == y->elems && x->dtype == y->dtype &&
                    x->space == y->space && x->persistent == y->persistent && x->role == y->role;
        }
        if (!found) {
            tap_diag("buffer %s is not the step's", f->buffers[b].name);
            return 0;
        }
    }
    return 1;
}

static int no_training_buffer(const sg_graph *f)
{
    for (int b = 0; b < f->nbuffers; b++) {
        sg_buf_role r = f->buffers[b].role;
        if (r == SG_BUF_GRAD_PIECE || r == SG_BUF_GRAD || r == SG_BUF_GRAD_NORM ||
            r == SG_BUF_MASTER || r == SG_BUF_MOMENTS || r == SG_BUF_GRAD_HOST ||
            r == SG_BUF_GRAD_HOST_F32 || r == SG_BUF_PARAM_HOST || r == SG_BUF_DACT ||
            r == SG_BUF_GRAD_PART || r == SG_BUF_NORM_PART || r == SG_BUF_MOE_GRAD ||
            r == SG_BUF_OVERFLOW || r == SG_BUF_LOSS_SCALER_STATE || r == SG_BUF_WINDOW) {
            tap_diag("buffer %s has no place in a forward", f->buffers[b].name);
            return 0;
        }
    }
    return 1;
}

/* Compiles m's step under s, cuts its forward; 0 on success. */
static int cut(const sg_model *m, const sg_step_spec *s, sg_graph *step, sg_graph *fwd)
{
    sg_error err = {0};
    sg_graph_init(step);
    sg_graph_init(fwd);
    if (sg_compile_step(m, s, step, &err) || sg_graph_forward_only(step, fwd, &err)) {
        tap_diag("%s", err.msg);
        return 1;
    }
    return 0;
}

/* ZeRO 3 with SuperOffload, two micro-steps, every unit gathered: the
 * forward of micro-step 0 alone. */
static void test_zero3(const sg_model *m)
{
    sg_step_spec s;
    sg_step_spec_defaults(&s);
    s.zero_stage = 3;
    s.offload_optimizer = 1;
    s.super_offload = 1;
    s.offload_ratio = 0.8;
    s.compute_dtype = SG_BF16;
    s.grad_accum = 2;
    s.micro_batch = 2;
    s.seq_len = 16;
    s.param_persistence_threshold = 0;
    s.max_reuse_distance = 0;
    sg_graph step, fwd;
    if (cut(m, &s, &step, &fwd)) {
        tap_skip(5, "no graph");
        return;
    }
    int units = sg_model_num_units(m);
    is_int(count_kind(&fwd, SG_OP_FORWARD), 2 * units,
           "ZeRO 3: one forward node per unit and micro-step");
    is_int(count_kind(&fwd, SG_OP_ALLGATHER), 2 * units,
           "ZeRO 3, every unit gathered: one all-gather per unit and micro-step, none of the "
           "backward's");
    int order = 1, unit = -1, mb = 0;
    for (int i = 0; i < fwd.nnodes; i++) {
        const sg_node *nd = &fwd.nodes[i];
        if (nd->kind == SG_OP_ALLGATHER) /* its unit's forward follows it */
            order &= i + 1 < fwd.nnodes && fwd.nodes[i + 1].kind == SG_OP_FORWARD &&
                     fwd.nodes[i + 1].layer == nd->layer && nd->layer == unit + 1 &&
                     nd->micro_step == mb;
        if (nd->kind == SG_OP_FORWARD) {
            order &= nd->layer == ++unit && nd->micro_step == mb;
            if (unit == units - 1)
                unit = -1, mb++;
        }
    }
    ok(order && mb == 2 && fwd.nnodes == 4 * units,
       "ZeRO 3: all-gather then forward, unit after unit, micro-step after micro-step (%d nodes)",
       fwd.nnodes);
    ok(no_training_buffer(&fwd), "ZeRO 3: no gradient or optimizer state");
    ok(buffers_shared(&fwd, &step), "ZeRO 3: every buffer is the step's, alike");
    sg_graph_free(&step);
    sg_graph_free(&fwd);
}

/* Parameter offload, batch tiles: a fetch per unit, a forward per unit and tile. */
static void test_offload_tiles(const sg_model *m)
{
    sg_step_spec s;
    sg_step_spec_defaults(&s);
    s.zero_stage = 3;
    s.offload_optimizer = 1;
    s.offload_param = 1;
    s.micro_batch = 4;
    s.batch_tile = 2;
    s.seq_len = 16;
    sg_graph step, fwd;
    if (cut(m, &s, &step, &fwd)) {
        tap_skip(3, "no graph");
        return;
    }
    int units = sg_model_num_units(m);
    is_int(count_kind(&fwd, SG_OP_FORWARD), 2 * units, "batch tiles: a forward per unit and tile");
    is_int(count_kind(&fwd, SG_OP_H2D), units, "parameters offloaded: one fetch per unit");
    int losses = 0;
    for (int b = 0; b < fwd.nbuffers; b++)
        losses += fwd.buffers[b].role == SG_BUF_LOSS;
    ok(losses == 2 && no_training_buffer(&fwd) && buffers_shared(&fwd, &step),
       "batch tiles: a loss buffer per tile, every buffer the step's, no training buffer");
    sg_graph_free(&step);
    sg_graph_free(&fwd);
}

/* MoE: each MoE layer's experts and combine are part of the forward. */
static void test_moe(void)
{
    sg_model *m = calloc(1, sizeof *m);
    if (!m || load_model("tiny-moe", m)) {
        tap_skip(2, "tiny-moe.json missing");
        free(m);
        return;
    }
    sg_step_spec s;
    sg_step_spec_defaults(&s);
    s.micro_batch = 2;
    s.seq_len = 16;
    s.grad_accum = 2;
    sg_graph step, fwd;
    if (cut(m, &s, &step, &fwd)) {
        tap_skip(2, "no graph");
        free(m);
        return;
    }
    int moe_layers = 0;
    for (int u = 1; u < sg_model_num_units(m) - 1; u++)
        moe_layers += m->num_experts > 0;
    int combines = count_kind(&fwd, SG_OP_MOE_COMBINE),
        experts = count_kind(&fwd, SG_OP_MOE_EXPERT);
    ok(combines == 2 * moe_layers && experts >= 2 * moe_layers,
       "MoE, 2 micro-steps: a combine per MoE layer and micro-step (%d) and its experts (%d "
       "groups)",
       combines, experts);
    ok(count_kind(&fwd, SG_OP_MOE_EXPERT_BWD) == 0 && count_kind(&fwd, SG_OP_BACKWARD) == 0 &&
           no_training_buffer(&fwd),
       "MoE: no backward of experts or units");
    sg_graph_free(&step);
    sg_graph_free(&fwd);
    free(m);
}

/* Refusals, and a fetch that feeds a backward. */
static void test_refused(const sg_model *m)
{
    sg_step_spec s;
    sg_step_spec_defaults(&s);
    s.micro_batch = 2;
    s.seq_len = 16;
    s.activation_checkpointing = 1;
    sg_graph step, out;
    sg_graph_init(&step);
    sg_graph_init(&out);
    sg_error err = {0};
    int rc = sg_compile_step(m, &s, &step, &err);
    rc = rc ? rc : sg_graph_forward_only(&step, &out, &err);
    ok(rc == SG_EINVAL && strstr(err.msg, "activation checkpointing") &&
           strstr(err.msg, "recompute."),
       "a step compiled with activation checkpointing is refused, naming its recompute (%s)",
       err.msg);
    sg_graph_free(&step);
    sg_graph_free(&out);
    /* tokens -> forward -> act; a gather of G read next by a backward only */
    sg_graph g;
    sg_graph_init(&g);
    sg_graph_init(&out);
    int t = sg_graph_add_buffer(&g, "tokens.mb0", 4, SG_I32, SG_MEM_HOST, 1);
    int p = sg_graph_add_buffer(&g, "param.0.sg0", 4, SG_F32, SG_MEM_GPU, 1);
    int a = sg_graph_add_buffer(&g, "act.0.mb0", 4, SG_F32, SG_MEM_GPU, 0);
    int gb = sg_graph_add_buffer(&g, "gathered.0", 4, SG_F32, SG_MEM_GPU, 0);
    sg_access fw[3] = {{t, SG_R, 0}, {p, SG_R, 0}, {a, SG_W, 0}};
    sg_access ag[2] = {{p, SG_R, 0}, {gb, SG_W, 0}};
    sg_access bw[2] = {{gb, SG_R, 0}, {a, SG_R, 0}};
    int n0 = sg_graph_add_node(&g, SG_OP_FORWARD, SG_DEV_GPU, 0, 0, fw, 3, "fwd.embed.mb0");
    int n1 = sg_graph_add_node(&g, SG_OP_ALLGATHER, SG_DEV_LINK, 0, 0, ag, 2, "allgather.bwd");
    int n2 = sg_graph_add_node(&g, SG_OP_BACKWARD, SG_DEV_GPU, 0, 0, bw, 2, "bwd.embed.mb0");
    g.nodes[n0].micro_step = g.nodes[n1].micro_step = g.nodes[n2].micro_step = 0;
    memset(&err, 0, sizeof err);
    rc = sg_graph_finalize(&g, &err) ? -1 : sg_graph_forward_only(&g, &out, &err);
    ok(rc == 0 && out.nnodes == 1 && out.nbuffers == 3 &&
           !strcmp(out.nodes[0].name, "fwd.embed.mb0"),
       "an all-gather whose output a backward reads next is not part of the forward");
    sg_graph_free(&g);
    sg_graph_free(&out);
    sg_graph_init(&g);
    sg_graph_init(&out);
    memset(&err, 0, sizeof err);
    sg_graph_finalize(&g, &err);
    ok(sg_graph_forward_only(&g, &out, &err) == SG_EINVAL, "a graph without a forward is refused");
    sg_graph_free(&g);
    sg_graph_free(&out);
}

int main(void)
{
    tap_plan(13);
    sg_model *m = calloc(1, sizeof *m);
    if (!m || load_model("tiny-llama", m)) {
        tap_skip(11, "tiny-llama.json missing");
    } else {
        test_zero3(m);
        test_offload_tiles(m);
        test_refused(m);
    }
    free(m);
    test_moe();
    return tap_done();
}
