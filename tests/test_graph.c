/* test_graph.c - the IR (edge derivation, checks, liveness) and the step
 * compiler (node counts per kind over the configuration grid, dependency
 * structure of SuperOffload), plus the DOT/JSON exporters. */
#define _POSIX_C_SOURCE 200809L
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "codelets/cpu/loss_scale.h"
#include "graph/analysis.h"
#include "graph/compile.h"
#include "graph/export.h"
#include "graph/ir.h"
#include "graph/liveness.h"
#include "models/model.h"
#include "tests/tap.h"
#include "tests/test_util.h"

static int has_edge(const sg_graph *g, int from, int to)
{
    for (int e = 0; e < g->nedges; e++)
        if (g->edges[e].from == from && g->edges[e].to == to)
            return 1;
    return 0;
}

/* ---- IR ------------------------------------------------------------------- */

static void test_ir_edges(void)
{
    sg_graph g;
    sg_graph_init(&g);
    int a = sg_graph_add_buffer(&g, "a", 10, SG_F32, SG_MEM_GPU, 0);
    int b = sg_graph_add_buffer(&g, "b", 5, SG_F32, SG_MEM_HOST, 0);
    sg_access w_a = {a, SG_W, 0}, r_a = {a, SG_R, 0}, rw_b[2] = {{a, SG_R, 0}, {b, SG_W, 0}};
    sg_graph_add_node(&g, SG_OP_FORWARD, SG_DEV_GPU, 0, 1.0, &w_a, 1, "w_a");       /* 0 */
    sg_graph_add_node(&g, SG_OP_FORWARD, SG_DEV_GPU, 0, 1.0, &r_a, 1, "r_a1");      /* 1 */
    sg_graph_add_node(&g, SG_OP_FORWARD, SG_DEV_GPU, 0, 1.0, rw_b, 2, "r_a2 w_b");  /* 2 */
    sg_graph_add_node(&g, SG_OP_FORWARD, SG_DEV_GPU, 0, 1.0, &w_a, 1, "w_a again"); /* 3 */
    sg_error err = {0};
    is_int(sg_graph_finalize(&g, &err), 0, "IR: finalize a valid program");
    ok(has_edge(&g, 0, 1) && has_edge(&g, 0, 2), "IR: read-after-write edges");
    ok(has_edge(&g, 1, 3) && has_edge(&g, 2, 3), "IR: write-after-read edges");
    ok(has_edge(&g, 0, 3), "IR: write-after-write edge");
    ok(!has_edge(&g, 1, 2), "IR: two readers are not ordered");
    is_int(g.nedges, 5, "IR: no duplicate edges");
    is_int(g.nodes[2].bytes_read, 40, "IR: bytes read from accesses");
    is_int(g.nodes[2].bytes_written, 20, "IR: bytes written from accesses");
    is_int(sg_graph_check(&g, &err), 0, "IR: check passes");
    int64_t peak[SG_MEM_COUNT], pers[SG_MEM_COUNT];
    sg_graph_peak_memory(&g, peak, pers);
    is_int(peak[SG_MEM_GPU], 40, "IR: peak GPU memory of one live buffer");
    is_int(peak[SG_MEM_HOST], 20, "IR: peak host memory");
    sg_graph_free(&g);

    sg_graph_init(&g);
    a = sg_graph_add_buffer(&g, "never_written", 4, SG_F32, SG_MEM_GPU, 0);
    sg_access r = {a, SG_R, 0};
    sg_graph_add_node(&g, SG_OP_FORWARD, SG_DEV_GPU, 0, 0, &r, 1, "reader");
    int rc = sg_graph_finalize(&g, &err);
    ok(rc == SG_EINVAL, "IR: a read before any write is refused");
    like(err.msg, "never_written", "IR: the message names the buffer");
    sg_graph_free(&g);

    /* liveness: two values of one buffer do not overlap */
    sg_graph_init(&g);
    a = sg_graph_add_buffer(&g, "x", 100, SG_F32, SG_MEM_GPU, 0);
    b = sg_graph_add_buffer(&g, "y", 100, SG_F32, SG_MEM_GPU, 0);
    sg_access wx = {a, SG_W, 0}, rx = {a, SG_R, 0}, wy = {b, SG_W, 0}, ry = {b, SG_R, 0};
    sg_graph_add_node(&g, SG_OP_FORWARD, SG_DEV_GPU, 0, 0, &wx, 1, "wx");
    sg_graph_add_node(&g, SG_OP_FORWARD, SG_DEV_GPU, 0, 0, &rx, 1, "rx");
    sg_graph_add_node(&g, SG_OP_FORWARD, SG_DEV_GPU, 0, 0, &wy, 1, "wy");
    sg_graph_add_node(&g, SG_OP_FORWARD, SG_DEV_GPU, 0, 0, &ry, 1, "ry");
    sg_graph_finalize(&g, &err);
    sg_graph_peak_memory(&g, peak, pers);
    is_int(peak[SG_MEM_GPU], 400, "IR: a dead buffer no longer counts towards the peak");
    sg_graph_free(&g);
}

/* ---- expected counts, computed independently of the compiler --------------- */

typedef struct expect {
    int count[SG_OP_KIND_COUNT];
    int nsub, first_cpu;
} expect;

static void expected_counts(const sg_model *m, const sg_step_spec *s, expect *e)
{
    memset(e, 0, sizeof *e);
    int U = sg_model_num_units(m), L = U - 2, A = (int)s->grad_accum;
    int64_t rank = 0, reuse = 0;
    int gathered = 0, regathered = 0;
    for (int u = U - 1; u >= 0; u--) {
        int64_t p = sg_model_unit_params(m, u);
        /* stage 3 keeps a unit under the persistence threshold whole */
        int whole = s->zero_stage == 0 || s->dp_size == 1 ||
                    (s->zero_stage == 3 && p < s->param_persistence_threshold);
        rank += whole ? p : (p + s->dp_size - 1) / s->dp_size;
        if (s->zero_stage == 3 && p >= s->param_persistence_threshold) {
            gathered++;
            int kept = reuse <= s->max_reuse_distance || (u == 0 && m->tie_word_embeddings);
            regathered += !kept;
            reuse += p;
        }
    }
    int N = (int)((rank + s->sub_group_size - 1) / s->sub_group_size);
    int first = s->offload_optimizer ? (int)floor((1.0 - s->offload_ratio) * N + 1e-9) : N;
    int C = N - first, G = first, mixed = s->compute_dtype != SG_F32;
    /* batch tiles: ceil(micro batch / tile) forward / backward tasks per unit
     * and micro-step, and one grad_sum */
    int T = s->batch_tile > 0 && s->batch_tile < s->micro_batch
                ? (int)((s->micro_batch + s->batch_tile - 1) / s->batch_tile)
                : 1;
    e->nsub = N;
    e->first_cpu = first;
    e->count[SG_OP_FORWARD] = U * A * T;
    e->count[SG_OP_BACKWARD] = U * A * T;
    e->count[SG_OP_RECOMPUTE] = s->activation_checkpointing ? L * A * T : 0;
    e->count[SG_OP_GRAD_SUM] = T > 1 ? U * A : 0;
    e->count[SG_OP_ALLGATHER] =
        s->zero_stage == 3 ? A * (gathered + regathered) : (s->zero_stage >= 1 ? U : 0);
    e->count[SG_OP_REDUCE_SCATTER] = s->zero_stage >= 2 ? U * A : 0;
    e->count[SG_OP_ALLREDUCE] = s->zero_stage < 2 ? U : 0;
    e->count[SG_OP_D2H] = C;
    e->count[SG_OP_H2D] = C;
    e->count[SG_OP_CAST] = mixed ? 2 * C + G : 0;
    e->count[SG_OP_ADAM_CPU] = C;
    e->count[SG_OP_ADAM_GPU] = G;
    e->count[SG_OP_VALIDATE] = s->super_offload ? C : 0;
    e->count[SG_OP_GRAD_NORM] = 1 + U; /* the norm, and one partial per unit (norm_part) */
    e->count[SG_OP_OVERFLOW_CHECK] = s->compute_dtype == SG_F16;
    e->count[SG_OP_LOSS_SCALE] = s->compute_dtype == SG_F16;
}

/* reach[n] = 1 if n is reachable from src (src included) */
static void reachable_from(const sg_graph *g, int src, char *reach)
{
    memset(reach, 0, (size_t)g->nnodes);
    reach[src] = 1;
    /* edges are sorted by source and go forward: one sweep suffices */
    for (int e = 0; e < g->nedges; e++)
        if (reach[g->edges[e].from])
            reach[g->edges[e].to] = 1;
}

static int find_node(const sg_graph *g, const char *name)
{
    for (int n = 0; n < g->nnodes; n++)
        if (!strcmp(g->nodes[n].name, name))
            return n;
    return -1;
}

/* Mode of buffer b at node n, merged over the node's accesses (0: none). */
static int mode_at(const sg_node *nd, int b)
{
    int m = 0;
    for (int i = 0; i < nd->naccess; i++)
        if (nd->access[i].buffer == b)
            m |= nd->access[i].mode;
    return m;
}

/* Liveness (graph/liveness.h), checked against the accesses directly: a
 * value dies only after a node that accesses it, and the next node that
 * touches the buffer, if any, overwrites it without reading it (so no
 * reader comes after the death); every step-local value does die after
 * the buffer's last access; the state and what the host reads after the
 * step never die; births and deaths pair up. */
static int liveness_case(const sg_graph *g, const char *label)
{
    sg_liveness lv;
    if (sg_graph_liveness(g, &lv)) {
        tap_diag("%s: liveness: out of memory", label);
        return 0;
    }
    int good = 1;
    int *lastacc = malloc((size_t)g->nbuffers * sizeof(int));
    int *deaths = calloc((size_t)g->nbuffers, sizeof(int)),
        *births = calloc((size_t)g->nbuffers, sizeof(int));
    for (int b = 0; b < g->nbuffers; b++)
        lastacc[b] = -1;
    for (int n = 0; n < g->nnodes; n++)
        for (int i = 0; i < g->nodes[n].naccess; i++)
            lastacc[g->nodes[n].access[i].buffer] = n;
    for (int n = 0; n < g->nnodes && good; n++) {
        for (int k = lv.born_offset[n]; k < lv.born_offset[n + 1]; k++)
            births[lv.born[k]]++;
        for (int k = lv.dies_offset[n]; k < lv.dies_offset[n + 1] && good; k++) {
            int b = lv.dies[k];
            deaths[b]++;
            if (!mode_at(&g->nodes[n], b)) {
                tap_diag("%s: %s dies after %s, which does not access it", label,
                         g->buffers[b].name, g->nodes[n].name);
                good = 0;
            }
            if (sg_buffer_outlives_step(&g->buffers[b])) {
                tap_diag("%s: %s dies but outlives the step", label, g->buffers[b].name);
                good = 0;
            }
            for (int n2 = n + 1; n2 < g->nnodes && good; n2++) {
                int m = mode_at(&g->nodes[n2], b);
                if (!m)
                    continue;
                if (m != SG_W) {
                    tap_diag("%s: %s dies after %s but %s reads it later", label,
                             g->buffers[b].name, g->nodes[n].name, g->nodes[n2].name);
                    good = 0;
                }
                break;
            }
        }
    }
    for (int b = 0; b < g->nbuffers && good; b++) {
        const sg_buffer *buf = &g->buffers[b];
        if (buf->persistent || lastacc[b] < 0) {
            if (births[b] || deaths[b]) {
                tap_diag("%s: %s is persistent or unused but has a value", label, buf->name);
                good = 0;
            }
            continue;
        }
        int out = sg_buffer_outlives_step(buf);
        if (births[b] < 1 || (out ? deaths[b] != 0 : deaths[b] != births[b])) {
            tap_diag("%s: %s born %d times, dies %d times", label, buf->name, births[b], deaths[b]);
            good = 0;
        }
        /* the last access ends the last value */
        int found = 0;
        for (int k = lv.dies_offset[lastacc[b]]; k < lv.dies_offset[lastacc[b] + 1]; k++)
            found |= lv.dies[k] == b;
        if (!out && !found) {
            tap_diag("%s: %s does not die after its last access %s", label, buf->name,
                     g->nodes[lastacc[b]].name);
            good = 0;
        }
    }
    free(lastacc);
    free(deaths);
    free(births);
    sg_liveness_free(&lv);
    return good;
}

static int grid_case(const sg_model *m, const sg_step_spec *s, const char *label)
{
    sg_graph g;
    sg_graph_init(&g);
    sg_error err = {0};
    int rc = sg_compile_step(m, s, &g, &err);
    int good = rc == 0;
    if (!good)
        tap_diag("%s: compile failed: %s", label, err.msg);
    if (good && sg_graph_check(&g, &err)) {
        tap_diag("%s: check failed: %s", label, err.msg);
        good = 0;
    }
    expect e;
    expected_counts(m, s, &e);
    int got[SG_OP_KIND_COUNT] = {0};
    for (int n = 0; good && n < g.nnodes; n++)
        got[g.nodes[n].kind]++;
    for (int k = 0; good && k < SG_OP_KIND_COUNT; k++)
        if (got[k] != e.count[k]) {
            tap_diag("%s: %s count %d, expected %d", label, sg_op_kind_name((sg_op_kind)k), got[k],
                     e.count[k]);
            good = 0;
        }
    /* CPU sub-groups are exactly i >= floor((1 - ratio) * N) */
    for (int n = 0; good && n < g.nnodes; n++) {
        const sg_node *nd = &g.nodes[n];
        if ((nd->kind == SG_OP_ADAM_CPU && nd->subgroup < e.first_cpu) ||
            (nd->kind == SG_OP_ADAM_GPU && nd->subgroup >= e.first_cpu)) {
            tap_diag("%s: %s on the wrong device for first_cpu %d", label, nd->name, e.first_cpu);
            good = 0;
        }
    }
    if (good && !liveness_case(&g, label))
        good = 0;
    /* without offload nothing crosses the host link */
    for (int n = 0; good && !s->offload_optimizer && n < g.nnodes; n++)
        if (g.nodes[n].link == SG_LINK_H2D || g.nodes[n].link == SG_LINK_D2H) {
            tap_diag("%s: %s moves data over PCIe/C2C without offload", label, g.nodes[n].name);
            good = 0;
        }
    sg_graph_free(&g);
    return good;
}

static void test_grid(const sg_model *m)
{
    static const double ratios[] = {1.0, 0.5};
    int cases = 0, passed = 0;
    for (int stage = 0; stage <= 3; stage++)
        for (int offload = 0; offload <= 1; offload++)
            for (int super = 0; super <= 1; super++)
                for (int accum = 1; accum <= 4; accum += 3)
                    for (int r = 0; r < 2; r++)
                        for (int prec = 0; prec < 3; prec++)
                            for (int ckpt = 0; ckpt <= 3; ckpt++) {
                                int tiled = ckpt >= 2; /* two batch tiles of one sequence */
                                if (offload && stage == 0)
                                    continue; /* refused, tested below */
                                if (super && (!offload || stage != 3))
                                    continue;
                                if (!offload && r > 0)
                                    continue;
                                sg_step_spec s;
                                sg_step_spec_defaults(&s);
                                s.zero_stage = stage;
                                s.offload_optimizer = offload;
                                s.super_offload = super;
                                s.grad_accum = accum;
                                s.offload_ratio = ratios[r];
                                s.compute_dtype = prec == 0 ? SG_F32 : prec == 1 ? SG_BF16 : SG_F16;
                                s.activation_checkpointing = ckpt % 2;
                                s.batch_tile = tiled;
                                s.micro_batch = 2;
                                s.seq_len = 64;
                                s.sub_group_size = 150000;
                                s.param_persistence_threshold = 0;
                                s.max_reuse_distance = stage == 3 && accum == 4 ? 0 : 1000000000LL;
                                s.gradient_clipping = 1.0;
                                s.micro_window = prec == 1 ? 2 : prec == 2 ? 1 : 0;
                                char label[160];
                                snprintf(
                                    label, sizeof label,
                                    "stage %d offload %d super %d accum %d ratio %.1f %s ckpt %d"
                                    " tiles %d",
                                    stage, offload, super, accum, ratios[r],
                                    sg_dtype_name(s.compute_dtype), ckpt % 2, tiled ? 2 : 1);
                                cases++;
                                passed += grid_case(m, &s, label);
                            }
    tap_diag("%d grid cases", cases);
    is_int(passed, cases,
           "grid: every case acyclic, reads after writes, counts per kind as "
           "expected, every step-local value dies after its last reader");
    ok(cases >= 160, "grid: covers stages 0-3 x offload x super_offload x accumulation x ratio "
                     "x checkpointing x batch tiles");
}

/* The micro-step window: accumulation 4, W = 2. Micro-step 2's forward
 * depends on micro-step 0's whole backward (an edge from its embedding
 * backward), micro-step 1's forward on nothing of micro-step 0's backward;
 * without the window (W = 0) micro-step 2's forward does not wait for
 * micro-step 0's backward either. Tiled (two tiles): tile by tile. */
static void test_micro_window(const sg_model *m)
{
    for (int w = 2; w >= 0; w -= 2)
        for (int tiles = 1; tiles <= 2; tiles++) {
            sg_step_spec s;
            sg_step_spec_defaults(&s);
            s.grad_accum = 4;
            s.micro_batch = 2;
            s.batch_tile = tiles == 2 ? 1 : 0;
            s.seq_len = 32;
            s.micro_window = w;
            sg_graph g;
            sg_graph_init(&g);
            sg_error err = {0};
            if (sg_compile_step(m, &s, &g, &err)) {
                ok(0, "micro window: compile: %s", err.msg);
                continue;
            }
            const char *sfx = tiles == 2 ? ".t1" : "";
            char nb0[64], nf1[64], nf2[64];
            snprintf(nb0, sizeof nb0, "bwd.embed.mb0%s", sfx);
            snprintf(nf1, sizeof nf1, "fwd.embed.mb1%s", sfx);
            snprintf(nf2, sizeof nf2, "fwd.embed.mb2%s", sfx);
            int b0 = find_node(&g, nb0), f1 = find_node(&g, nf1), f2 = find_node(&g, nf2);
            char *reach = calloc((size_t)(g.nnodes > 0 ? g.nnodes : 1), 1);
            int good = b0 >= 0 && f1 >= 0 && f2 >= 0 && reach;
            if (good)
                reachable_from(&g, b0, reach);
            int nwin = 0;
            for (int b = 0; b < g.nbuffers; b++)
                nwin += g.buffers[b].role == SG_BUF_WINDOW;
            if (w)
                ok(good && has_edge(&g, b0, f2) && !reach[f1] && nwin == 2 * tiles,
                   "micro window 2, %d tile(s): %s waits for %s, %s does not (%d tokens)", tiles,
                   nf2, nb0, nf1, nwin);
            else
                ok(good && !reach[f2] && !reach[f1] && nwin == 0,
                   "no micro window, %d tile(s): %s does not wait for %s", tiles, nf2, nb0);
            free(reach);
            sg_graph_free(&g);
        }
}

/* Batch tiles: a micro-batch of 3 in tiles of 2 and 1 sequences. Each tile's
 * chain is independent of the other's until grad_sum; buffers have the
 * tile's rows; grad_sum reads every partial; bad tile sizes are refused. */
static void test_batch_tiles(const sg_model *m)
{
    sg_step_spec s;
    sg_step_spec_defaults(&s);
    s.micro_batch = 3;
    s.batch_tile = 2;
    s.grad_accum = 2;
    s.seq_len = 16;
    s.activation_checkpointing = 1;
    sg_graph g;
    sg_graph_init(&g);
    sg_error err = {0};
    if (sg_compile_step(m, &s, &g, &err)) {
        ok(0, "batch tiles: compile (%s)", err.msg);
        sg_graph_free(&g);
        return;
    }
    char *reach = malloc((size_t)g.nnodes);
    int f0 = find_node(&g, "fwd.embed.mb0.t0"), f1 = find_node(&g, "fwd.embed.mb0.t1");
    int h1 = find_node(&g, "fwd.head.mb0.t1"), b0 = find_node(&g, "bwd.embed.mb0.t0");
    int s0 = find_node(&g, "grad_sum.layer0.mb0");
    int good = reach && f0 >= 0 && f1 >= 0 && h1 >= 0 && b0 >= 0 && s0 >= 0;
    if (good) {
        reachable_from(&g, f0, reach);
        good = !reach[h1] && reach[s0];
        reachable_from(&g, f1, reach);
        good = good && !reach[b0] && reach[s0];
    }
    ok(good, "batch tiles: tile 1's chain does not wait for tile 0's (nor the reverse); "
             "both reach grad_sum");
    int64_t H = m->hidden_size, rows_ok = 1, parts = 0;
    for (int b = 0; b < g.nbuffers; b++) {
        const sg_buffer *bf = &g.buffers[b];
        if (bf->role == SG_BUF_ACT && bf->elems != (bf->tile == 0 ? 2 : 1) * 16 * H)
            rows_ok = 0;
        if (bf->role == SG_BUF_ACT && bf->tile < 0)
            rows_ok = 0;
        parts += bf->role == SG_BUF_GRAD_PART;
    }
    ok(rows_ok && parts == 2 * sg_model_num_units(m),
       "batch tiles: activations hold their tile's rows (2 then 1 sequences), one fp32 partial "
       "per unit and tile (%lld)",
       (long long)parts);
    int sn = find_node(&g, "grad_sum.layer0.mb1"), order = sn >= 0;
    if (order) {
        const sg_node *nd = &g.nodes[sn];
        int seen = 0;
        for (int a = 0; a < nd->naccess; a++) {
            const sg_buffer *bf = &g.buffers[nd->access[a].buffer];
            if (bf->role == SG_BUF_GRAD_PART)
                order = order && bf->tile == seen++ && nd->access[a].mode == SG_R;
            else
                order = order && bf->role == SG_BUF_GRAD && nd->access[a].mode == SG_RW;
        }
        order = order && seen == 2 && nd->device == SG_DEV_CPU;
    }
    ok(order, "batch tiles: grad_sum of micro-step 1 reads the partials in tile order and "
              "accumulates into the gradient, on the CPU");
    free(reach);
    sg_graph_free(&g);

    int refused = 0;
    int64_t bad[] = {4, -1};
    for (int i = 0; i < 2; i++) {
        s.batch_tile = bad[i];
        sg_graph_init(&g);
        err.msg[0] = '\0';
        refused += sg_compile_step(m, &s, &g, &err) == SG_EINVAL && strstr(err.msg, "batch_tile");
        sg_graph_free(&g);
    }
    ok(refused == 2, "batch tiles: a tile larger than the micro batch or negative is refused");
}

static void test_semantics(const sg_model *m)
{
    sg_step_spec s;
    superoffload_spec(&s, 1.0);
    sg_graph g;
    sg_graph_init(&g);
    sg_error err = {0};
    is_int(sg_compile_step(m, &s, &g, &err), 0, "super_offload: compiles");
    char *reach = malloc((size_t)g.nnodes);
    int norm = find_node(&g, "grad_norm"), last_bwd = find_node(&g, "bwd.embed.mb0");
    ok(norm >= 0 && last_bwd >= 0, "super_offload: grad_norm and bwd.embed exist");
    /* speculation: no CPU Adam waits for the gradient norm ... */
    reachable_from(&g, norm, reach);
    int waits = 0, early = 0, validate_after_norm = 1, nadam = 0;
    for (int n = 0; n < g.nnodes; n++) {
        if (g.nodes[n].kind == SG_OP_ADAM_CPU) {
            nadam++;
            waits += reach[n];
        }
        if (g.nodes[n].kind == SG_OP_VALIDATE && !reach[n])
            validate_after_norm = 0;
    }
    is_int(waits, 0, "super_offload: no CPU Adam depends on the gradient norm");
    ok(validate_after_norm, "super_offload: every validation depends on the gradient norm");
    /* ... and the Adam of the last layers' sub-group can run during backward */
    reachable_from(&g, last_bwd, reach);
    for (int n = 0; n < g.nnodes; n++)
        if (g.nodes[n].kind == SG_OP_ADAM_CPU && !reach[n])
            early++;
    ok(early >= 1 && early < nadam,
       "super_offload: %d of %d CPU Adam nodes do not wait for the last backward", early, nadam);
    sg_graph_free(&g);

    /* without speculation, clipping makes every CPU Adam wait for the norm */
    s.super_offload = 0;
    sg_graph_init(&g);
    sg_compile_step(m, &s, &g, &err);
    free(reach);
    reach = malloc((size_t)g.nnodes);
    norm = find_node(&g, "grad_norm");
    reachable_from(&g, norm, reach);
    waits = nadam = 0;
    for (int n = 0; n < g.nnodes; n++)
        if (g.nodes[n].kind == SG_OP_ADAM_CPU) {
            nadam++;
            waits += reach[n];
        }
    ok(nadam > 0 && waits == nadam, "ZeRO-Offload with clipping: all %d CPU Adam wait for the norm",
       nadam);
    sg_graph_free(&g);
    free(reach);

    /* refused combinations */
    sg_graph_init(&g);
    s.zero_stage = 2;
    s.super_offload = 1;
    ok(sg_compile_step(m, &s, &g, &err) == SG_EINVAL, "super_offload with stage 2 is refused");
    like(err.msg, "stage 3", "... and the message says stage 3 is needed");
    sg_graph_free(&g);
    sg_graph_init(&g);
    s.zero_stage = 0;
    s.super_offload = 0;
    ok(sg_compile_step(m, &s, &g, &err) == SG_EINVAL, "offload with stage 0 is refused");
    sg_graph_free(&g);

    /* ratio: sub-group i on the CPU iff i >= floor((1 - r) * N) */
    sg_step_spec_defaults(&s);
    s.zero_stage = 3;
    s.offload_optimizer = 1;
    s.offload_ratio = 0.5;
    s.sub_group_size = (sg_model_total_params(m) + 4) / 5; /* N = 5 */
    sg_subgroup_layout lay;
    sg_subgroup_layout_compute(m, &s, &lay, &err);
    is_int(lay.nsubgroups, 5, "layout: 5 sub-groups");
    is_int(lay.first_cpu, 2, "layout: ratio 0.5 over 5 sub-groups puts 2, 3, 4 on the CPU");
    s.offload_ratio = 0.0;
    sg_subgroup_layout_compute(m, &s, &lay, &err);
    is_int(lay.first_cpu, 5, "layout: ratio 0 keeps every sub-group on the GPU");
    s.dp_size = 2;
    is_int(sg_unit_shard_elems(m, &s, 1), (sg_model_unit_params(m, 1) + 1) / 2,
           "layout: stage 3 with dp 2 halves a unit's shard");
}

/* Several ranks: one comm_order token that every collective node (all-gather,
 * reduce-scatter, all-reduce, the final gradient norm) and nothing else
 * reads and writes, so the collectives form one chain of edges in program
 * order; one rank has no token at all. Stage 3 keeps units under the
 * persistence threshold whole on every rank. */
static void test_comm_order(const sg_model *m)
{
    for (int stage = 0; stage <= 3; stage++)
        for (int dp = 1; dp <= 2; dp++) {
            sg_step_spec s;
            sg_step_spec_defaults(&s);
            s.zero_stage = stage;
            s.dp_size = dp;
            s.grad_accum = 2;
            s.micro_batch = 1;
            s.seq_len = 32;
            if (stage == 3) {
                s.offload_optimizer = 1;
                s.super_offload = 1;
                s.sub_group_size = 100000;
            }
            sg_graph g;
            sg_graph_init(&g);
            sg_error err = {0};
            int rc = sg_compile_step(m, &s, &g, &err);
            int tok = -1, ntok = 0, good = rc == 0, ncoll = 0, prev = -1, chained = 1;
            for (int b = 0; good && b < g.nbuffers; b++)
                if (g.buffers[b].role == SG_BUF_COMM_ORDER) {
                    tok = b;
                    ntok++;
                    good &= g.buffers[b].persistent && g.buffers[b].elems == 1;
                }
            for (int i = 0; good && i < g.nnodes; i++) {
                const sg_node *nd = &g.nodes[i];
                int uses = 0, norm = 0;
                for (int a = 0; a < nd->naccess; a++) {
                    uses |= nd->access[a].buffer == tok && tok >= 0 && nd->access[a].mode == SG_RW;
                    norm |= g.buffers[nd->access[a].buffer].role == SG_BUF_GRAD_NORM &&
                            nd->access[a].mode == SG_W;
                }
                int coll = nd->kind == SG_OP_ALLGATHER || nd->kind == SG_OP_REDUCE_SCATTER ||
                           nd->kind == SG_OP_ALLREDUCE || (nd->kind == SG_OP_GRAD_NORM && norm);
                if (dp == 1)
                    continue;
                good &= uses == coll;
                if (!coll)
                    continue;
                ncoll++;
                if (prev >= 0) { /* an edge prev -> i */
                    int found = 0;
                    for (int e = 0; e < g.nedges && !found; e++)
                        found = g.edges[e].from == prev && g.edges[e].to == i;
                    chained &= found;
                }
                prev = i;
            }
            if (dp == 1)
                ok(good && ntok == 0, "stage %d, one rank: no comm_order token", stage);
            else
                ok(good && ntok == 1 && ncoll > 1 && chained,
                   "stage %d, 2 ranks: the %d collectives (and only they) read-write comm_order, "
                   "chained by edges in program order",
                   stage, ncoll);
            sg_graph_free(&g);
        }
    sg_step_spec s;
    sg_step_spec_defaults(&s);
    s.zero_stage = 3;
    s.dp_size = 2;
    s.param_persistence_threshold = 100000;
    is_int(sg_unit_shard_elems(m, &s, 0), sg_model_unit_params(m, 0),
           "stage 3, 2 ranks: a unit under param_persistence_threshold stays whole");
}

/* fp16: the loss scaler's state is one persistent host buffer, read and
 * written by the loss-scale update only; bf16 has none. */
static void test_loss_scaler_state(const sg_model *m)
{
    for (int prec = 0; prec < 2; prec++) {
        sg_step_spec s;
        sg_step_spec_defaults(&s);
        s.compute_dtype = prec ? SG_F16 : SG_BF16;
        s.micro_batch = 2;
        s.seq_len = 64;
        sg_graph g;
        sg_graph_init(&g);
        sg_error err = {0};
        int rc = sg_compile_step(m, &s, &g, &err);
        int nstate = 0, good = rc == 0, state = -1;
        for (int b = 0; b < g.nbuffers; b++)
            if (g.buffers[b].role == SG_BUF_LOSS_SCALER_STATE) {
                const sg_buffer *buf = &g.buffers[b];
                nstate++;
                state = b;
                good &= buf->persistent && buf->space == SG_MEM_HOST && buf->dtype == SG_I32 &&
                        buf->elems == SG_LOSS_SCALER_STATE_I32 &&
                        buf->bytes == (int64_t)sizeof(sg_loss_scaler_state);
            }
        int users = 0, rw_by_update = 0;
        for (int n = 0; n < g.nnodes; n++)
            for (int a = 0; a < g.nodes[n].naccess; a++)
                if (state >= 0 && g.nodes[n].access[a].buffer == state) {
                    users++;
                    rw_by_update |=
                        g.nodes[n].kind == SG_OP_LOSS_SCALE && g.nodes[n].access[a].mode == SG_RW;
                }
        if (prec)
            ok(good && nstate == 1 && users == 1 && rw_by_update,
               "fp16: one persistent host loss_scaler_state buffer (%d bytes), read and written "
               "by the loss-scale update only",
               (int)sizeof(sg_loss_scaler_state));
        else
            ok(good && nstate == 0, "bf16: no loss-scaler state buffer");
        sg_graph_free(&g);
    }
}

static void test_superoffload_8b(void)
{
    sg_model *m = calloc(1, sizeof *m);
    if (load_model("llama-3.1-8b", m)) {
        tap_skip(8, "llama-3.1-8b.json missing");
        free(m);
        return;
    }
    /* the SuperOffload launch settings for Llama-3.1-8B on one GH200 */
    sg_step_spec s;
    sg_step_spec_defaults(&s);
    s.zero_stage = 3;
    s.offload_optimizer = 1;
    s.super_offload = 1;
    s.offload_ratio = 0.8;
    s.compute_dtype = SG_BF16;
    s.sub_group_size = 400000000;
    s.activation_checkpointing = 1;
    s.seq_len = 4096;
    s.micro_batch = 4;
    s.gradient_clipping = 1.0;
    sg_graph g;
    sg_graph_init(&g);
    sg_error err = {0};
    is_int(sg_compile_step(m, &s, &g, &err), 0, "llama-3.1-8b SuperOffload step compiles");
    sg_summary sum;
    sg_cost_model cm;
    sg_cost_model_gh200(&cm);
    sg_summary_compute(&g, &cm, &sum);
    /* ceil(8,030,261,248 / 4e8) = 21 sub-groups, floor(0.2 * 21) = 4 stay on the GPU */
    is_int(sum.count[SG_OP_ADAM_GPU], 4, "llama-3.1-8b: 4 GPU sub-groups");
    is_int(sum.count[SG_OP_ADAM_CPU], 17, "llama-3.1-8b: 17 CPU sub-groups");
    /* node FLOPs against the SuperOffload script's estimate (c = 4 with
     * checkpointing): ours skip the embedding and halve causal attention */
    double P = (double)sg_model_total_params(m), S = 4096, B = 4;
    double est = B * (2 * 4 * P * S + 4 * 4 * 32 * 4096.0 * S * S);
    double ratio = sum.flops_by_device[SG_DEV_GPU] / est;
    ok(ratio > 0.8 && ratio < 1.0, "llama-3.1-8b: GPU FLOPs are %.3f of the script's estimate",
       ratio);
    ok(sum.critical_path_s > 0.1 && sum.peak_bytes[SG_MEM_HOST] > sum.peak_bytes[SG_MEM_GPU],
       "llama-3.1-8b: critical path %.1f ms; host holds the optimizer state (%.1f GiB)",
       sum.critical_path_s * 1e3, sum.peak_bytes[SG_MEM_HOST] / 1073741824.0);
    /* Priorities: every gradient copy toward the host (reduce-scatter, d2h)
     * ranks above every compute node, so a sub-group's CPU Adam is not held
     * back behind the rest of the backward; compute nodes keep bottom-level
     * order (an earlier forward before a later one, backward before the
     * host-to-device copies of the updated parameters). */
    is_int(sg_graph_set_priorities(&g, &cm), 0, "llama-3.1-8b: priorities");
    int64_t max_compute = INT64_MIN, min_feeder = INT64_MAX, fwd0 = -1, fwd_last = -1;
    int feeders = 0;
    for (int i = 0; i < g.nnodes; i++) {
        const sg_node *nd = &g.nodes[i];
        if (nd->kind == SG_OP_FORWARD || nd->kind == SG_OP_BACKWARD || nd->kind == SG_OP_RECOMPUTE)
            max_compute = nd->priority > max_compute ? nd->priority : max_compute;
        if (nd->kind == SG_OP_D2H) {
            min_feeder = nd->priority < min_feeder ? nd->priority : min_feeder;
            feeders++;
        }
        if (nd->kind == SG_OP_FORWARD) {
            if (fwd0 < 0)
                fwd0 = nd->priority;
            fwd_last = nd->priority;
        }
    }
    ok(feeders == 17 && min_feeder > max_compute,
       "llama-3.1-8b: the %d gradient copies to the host rank above all compute", feeders);
    ok(fwd0 > fwd_last, "llama-3.1-8b: the first forward ranks above the last (bottom levels)");
    sg_graph_free(&g);
    free(m);
}

static int write_json(const sg_graph *g, const sg_summary *s, char **text)
{
    size_t len = 0;
    FILE *f = open_memstream(text, &len);
    int rc = sg_export_json(g, s, f);
    fclose(f);
    return rc;
}

static void test_exports(const sg_model *m)
{
    sg_step_spec s;
    superoffload_spec(&s, 0.5);
    s.activation_checkpointing = 1;
    sg_graph g;
    sg_graph_init(&g);
    sg_error err = {0};
    sg_compile_step(m, &s, &g, &err);
    sg_summary sum;
    sg_cost_model cm;
    sg_cost_model_gh200(&cm);
    sg_summary_compute(&g, &cm, &sum);

    char *text = NULL;
    is_int(write_json(&g, &sum, &text), 0, "json: export");
    cJSON *root = cJSON_Parse(text);
    ok(root != NULL, "json: output parses");
    cJSON *nodes = cJSON_GetObjectItem(root, "nodes"), *edges = cJSON_GetObjectItem(root, "edges");
    is_int(cJSON_GetArraySize(nodes), g.nnodes, "json: one entry per node");
    is_int(cJSON_GetArraySize(edges), g.nedges, "json: one entry per edge");
    cJSON *n0 = cJSON_GetArrayItem(nodes, 0);
    ok(n0 && cJSON_GetObjectItem(n0, "id") && cJSON_GetObjectItem(n0, "kind") &&
           cJSON_GetObjectItem(n0, "layer") && cJSON_GetObjectItem(n0, "device") &&
           cJSON_GetObjectItem(n0, "flops") && cJSON_GetObjectItem(n0, "bytes"),
       "json: nodes carry id, kind, layer, device, flops, bytes");
    cJSON *summary = cJSON_GetObjectItem(root, "summary");
    cJSON *count = summary ? cJSON_GetObjectItem(summary, "count") : NULL;
    cJSON *fw = count ? cJSON_GetObjectItem(count, "forward") : NULL;
    is_int(fw ? fw->valueint : -1, sg_model_num_units(m), "json: summary counts forward nodes");
    int layer_null = 0;
    cJSON *it;
    cJSON_ArrayForEach (it, nodes) {
        cJSON *k = cJSON_GetObjectItem(it, "kind");
        if (k && !strcmp(k->valuestring, "adam_cpu"))
            layer_null += cJSON_IsNull(cJSON_GetObjectItem(it, "layer"));
    }
    ok(layer_null == sum.count[SG_OP_ADAM_CPU], "json: optimizer nodes have layer null");
    cJSON_Delete(root);
    free(text);

    /* DOT: rendered by Graphviz without error */
    char dot_path[] = "/tmp/sg_test_dot_XXXXXX";
    int fd = mkstemp(dot_path);
    FILE *f = fdopen(fd, "w");
    is_int(sg_export_dot(&g, f), 0, "dot: export");
    fclose(f);
    const char *dot = getenv("DOT");
    if (!dot || !*dot) {
        tap_skip(1, "Graphviz dot not found at configure time");
    } else {
        char cmd[8192];
        snprintf(cmd, sizeof cmd, "'%s' -Tsvg '%s' -o /dev/null 2>/dev/null", dot, dot_path);
        is_int(system(cmd), 0, "dot: Graphviz renders the DOT without error");
    }
    unlink(dot_path);
    sg_graph_free(&g);
}

/* sub_group_size 0, DeepSpeed's "each parameter tensor its own sub-group":
 * with one rank every sub-group holds exactly one tensor of the model, in
 * order; with two ranks at stage 3 the pieces still cover each unit's shard,
 * one sub-group per tensor that has elements there. */
static void test_tensor_subgroups(const sg_model *m)
{
    sg_step_spec s;
    sg_step_spec_defaults(&s);
    s.zero_stage = 3;
    s.sub_group_size = 0;
    s.offload_optimizer = 1;
    s.offload_ratio = 0.5;
    sg_error err = {0};
    sg_subgroup_layout lay;
    int rc = sg_subgroup_layout_compute(m, &s, &lay, &err);
    /* a Llama layer has 9 tensors (2 norms, q k v o, gate up down); plus the
     * embedding, the final norm and an untied head */
    int want = (int)m->num_layers * 9 + 2 + !m->tie_word_embeddings;
    ok(rc == 0 && lay.nsubgroups == want, "sub_group_size 0: %d sub-groups, one per tensor (%d)",
       lay.nsubgroups, want);
    ok(lay.first_cpu == want / 2, "sub_group_size 0: ratio 0.5 puts the last %d on the CPU",
       want - want / 2);
    sg_graph g;
    sg_graph_init(&g);
    rc = sg_compile_step(m, &s, &g, &err);
    ok(rc == 0, "sub_group_size 0 compiles (%s)", err.msg);
    /* each sub-group's parameter pieces add up to one tensor, in model order */
    int64_t *sum = calloc((size_t)want + 1, sizeof *sum);
    for (int b = 0; rc == 0 && b < g.nbuffers; b++)
        if (g.buffers[b].role == SG_BUF_PARAM_PIECE && g.buffers[b].subgroup >= 0 &&
            g.buffers[b].subgroup < want)
            sum[g.buffers[b].subgroup] += g.buffers[b].elems;
    int same = 1, i = 0;
    for (int u = 0; u < sg_model_num_units(m); u++) {
        sg_tensor_info ti[64];
        int nt = sg_model_unit_tensors(m, u, ti, 64);
        for (int t = 0; t < nt; t++, i++)
            same &= i < want && sum[i] == ti[t].numel;
    }
    ok(same && i == want, "sub_group_size 0: sub-group i holds the i-th tensor's elements");
    int cpu = 0, gpu = 0;
    for (int n = 0; n < g.nnodes; n++) {
        cpu += g.nodes[n].kind == SG_OP_ADAM_CPU;
        gpu += g.nodes[n].kind == SG_OP_ADAM_GPU;
    }
    ok(cpu == want - want / 2 && gpu == want / 2,
       "sub_group_size 0: one update per sub-group "
       "(%d CPU, %d GPU)",
       cpu, gpu);
    sg_graph_free(&g);
    free(sum);

    /* two ranks: each unit's shard is cut at the tensors' boundaries */
    s.dp_size = 2;
    sg_graph_init(&g);
    rc = sg_compile_step(m, &s, &g, &err);
    int64_t *unit_sum = calloc((size_t)sg_model_num_units(m), sizeof *unit_sum);
    for (int b = 0; rc == 0 && b < g.nbuffers; b++)
        if (g.buffers[b].role == SG_BUF_PARAM_PIECE && g.buffers[b].unit >= 0)
            unit_sum[g.buffers[b].unit] += g.buffers[b].elems;
    int covered = rc == 0;
    for (int u = 0; u < sg_model_num_units(m); u++)
        covered &= unit_sum[u] == sg_unit_shard_elems(m, &s, u);
    sg_subgroup_layout_compute(m, &s, &lay, &err);
    ok(covered && lay.nsubgroups <= want && lay.nsubgroups >= sg_model_num_units(m),
       "sub_group_size 0, 2 ranks: the pieces cover every unit's shard, %d sub-groups",
       lay.nsubgroups);
    free(unit_sum);
    sg_graph_free(&g);
}

/* The buffers a GPU task may touch (sg_graph_gpu_touched): what the lowering
 * pins. SuperOffload with half the sub-groups on the CPU: their moments and
 * fp32 masters' optimizer state never cross the link (CPU Adam alone reads
 * them), the GPU sub-groups' moments do (GPU Adam), and every buffer of a
 * forward, which runs on the GPU, does. */
static void test_gpu_touched(const sg_model *m)
{
    sg_step_spec s;
    superoffload_spec(&s, 0.5);
    sg_graph g;
    sg_graph_init(&g);
    sg_error err = {0};
    if (sg_compile_step(m, &s, &g, &err)) {
        ok(0, "gpu touched: compiles (%s)", err.msg);
        return;
    }
    unsigned char *t = malloc((size_t)g.nbuffers);
    sg_graph_gpu_touched(&g, t);
    int host_moments = 0, host_moments_touched = 0, gpu_moments = 0, gpu_moments_untouched = 0;
    for (int b = 0; b < g.nbuffers; b++) {
        if (g.buffers[b].role != SG_BUF_MOMENTS)
            continue;
        if (g.buffers[b].space == SG_MEM_HOST) {
            host_moments++;
            host_moments_touched += t[b];
        } else {
            gpu_moments++;
            gpu_moments_untouched += !t[b];
        }
    }
    ok(host_moments > 0 && host_moments_touched == 0,
       "gpu touched: none of the %d CPU sub-groups' moments (%d marked)", host_moments,
       host_moments_touched);
    ok(gpu_moments > 0 && gpu_moments_untouched == 0,
       "gpu touched: all %d GPU sub-groups' moments (%d left out)", gpu_moments,
       gpu_moments_untouched);
    int fwd_missed = 0, nfwd = 0;
    for (int n = 0; n < g.nnodes; n++)
        if (g.nodes[n].kind == SG_OP_FORWARD) {
            nfwd++;
            for (int a = 0; a < g.nodes[n].naccess; a++)
                fwd_missed += !t[g.nodes[n].access[a].buffer];
        }
    ok(nfwd > 0 && fwd_missed == 0, "gpu touched: every buffer of the %d forward nodes", nfwd);
    /* pinned (sg_graph_host_pinned): the host-space buffers a forward reads
     * (they cross the link every step), none of the GPU sub-groups' moments
     * (only GPU Adam touches them: they cross once, at the first step), and
     * of the GPU-space buffers only those a CPU-capable node also accesses */
    unsigned char *pin = malloc((size_t)g.nbuffers);
    sg_graph_host_pinned(&g, pin);
    int host_fwd = 0, host_fwd_unpinned = 0, gpu_moments_pinned = 0, gpu_pinned_bad = 0;
    for (int n = 0; n < g.nnodes; n++)
        for (int a = 0; a < g.nodes[n].naccess; a++) {
            int b = g.nodes[n].access[a].buffer;
            if (g.nodes[n].kind == SG_OP_FORWARD && g.buffers[b].space == SG_MEM_HOST) {
                host_fwd++;
                host_fwd_unpinned += !pin[b];
            }
        }
    for (int b = 0; b < g.nbuffers; b++) {
        if (!pin[b] || g.buffers[b].space != SG_MEM_GPU)
            continue;
        gpu_moments_pinned += g.buffers[b].role == SG_BUF_MOMENTS;
        int cpu_side = 0; /* a node placed on the CPU or left to the scheduler uses it */
        for (int n = 0; n < g.nnodes && !cpu_side; n++)
            for (int a = 0; a < g.nodes[n].naccess; a++)
                cpu_side |= g.nodes[n].access[a].buffer == b && !sg_node_runs_on_gpu(&g.nodes[n]);
        gpu_pinned_bad += !cpu_side;
    }
    ok(host_fwd > 0 && host_fwd_unpinned == 0,
       "pinned: every host-space buffer of a forward (%d accesses, %d not pinned)", host_fwd,
       host_fwd_unpinned);
    ok(gpu_moments_pinned == 0 && gpu_pinned_bad == 0,
       "pinned: no GPU sub-group's moments (%d pinned), no GPU-space buffer only GPU nodes use "
       "(%d pinned)",
       gpu_moments_pinned, gpu_pinned_bad);
    free(pin);
    free(t);
    sg_graph_free(&g);
}

int main(void)
{
    test_ir_edges();
    sg_model *m = calloc(1, sizeof *m);
    if (load_model("tiny-llama", m)) {
        ok(0, "tiny-llama model loads");
        return tap_done();
    }
    test_grid(m);
    test_micro_window(m);
    test_batch_tiles(m);
    test_semantics(m);
    test_loss_scaler_state(m);
    test_comm_order(m);
    test_tensor_subgroups(m);
    sg_model *q = calloc(1, sizeof *q);
    if (!load_model("tiny-qwen3", q)) /* untied head: a different tensor layout */
        test_grid(q);
    free(q);
    test_superoffload_8b();
    test_exports(m);
    test_gpu_touched(m);
    free(m);
    return tap_done();
}
