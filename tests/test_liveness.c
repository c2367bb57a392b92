/* test_liveness.c - graph/liveness.h and the planned peak on hand-built
 * graphs, whose peaks are worked out by hand below (the grid check that a
 * value dies only after its last reader is in test_graph.c). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "graph/analysis.h"
#include "graph/compile.h"
#include "graph/ir.h"
#include "graph/liveness.h"
#include "graph/peak_workers.h"
#include "models/model.h"
#include "tests/tap.h"
#include "tests/test_util.h"

static int add(sg_graph *g, const char *name, int64_t elems, sg_mem_space sp, int persistent)
{
    return sg_graph_add_buffer(g, name, elems, SG_F32, sp, persistent);
}

/* one node with up to three accesses (mode 0 ends the list) */
static void op(sg_graph *g, const char *name, int b0, sg_access_mode m0, int b1, sg_access_mode m1,
               int b2, sg_access_mode m2)
{
    sg_access a[3] = {{b0, m0, 0}, {b1, m1, 0}, {b2, m2, 0}};
    int n = m0 ? (m1 ? (m2 ? 3 : 2) : 1) : 0;
    sg_graph_add_node(g, SG_OP_FORWARD, SG_DEV_GPU, 0, 0, a, n, "%s", name);
}

static int64_t gpu_peak(sg_graph *g)
{
    sg_error err = {0};
    int64_t peak[SG_MEM_COUNT], pers[SG_MEM_COUNT];
    if (sg_graph_finalize(g, &err) || sg_graph_peak_memory(g, peak, pers))
        return -1;
    return peak[SG_MEM_GPU];
}

/* dies_after(lv, b): the nodes value(s) of b die after, as a bit mask */
static unsigned dies_mask(const sg_liveness *lv, int b)
{
    unsigned m = 0;
    for (int n = 0; n < lv->nnodes; n++)
        for (int k = lv->dies_offset[n]; k < lv->dies_offset[n + 1]; k++)
            if (lv->dies[k] == b)
                m |= 1u << n;
    return m;
}

/* m's step with SuperOffload's settings (bf16, ZeRO-3, ratio 0.9,
 * sub-groups of 4e8, seq 4096, batch 4), checkpointed or not, and its
 * liveness; nonzero (said as a diagnostic, nothing left to free) when it
 * does not compile. */
static int compile_superoffload(const sg_model *m, int ckpt, sg_step_spec *s, sg_graph *g,
                                sg_liveness *lv)
{
    sg_step_spec_defaults(s);
    s->zero_stage = 3;
    s->offload_optimizer = 1;
    s->super_offload = 1;
    s->offload_ratio = 0.9;
    s->compute_dtype = SG_BF16;
    s->sub_group_size = 400000000;
    s->activation_checkpointing = ckpt;
    s->seq_len = 4096;
    s->micro_batch = 4;
    sg_graph_init(g);
    sg_error err = {0};
    if (sg_compile_step(m, s, g, &err) || sg_graph_liveness(g, lv)) {
        tap_diag("compile: %s", err.msg);
        sg_graph_free(g);
        return 1;
    }
    return 0;
}

/* Checkpointing keeps only what recompute needs: compiled for llama-3.1-8b
 * with SuperOffload's settings (bf16, ZeRO-3, seq 4096, batch 4), at the
 * first backward node every layer's output is live and no layer's
 * internals are; the layers' outputs add up to hidden_size x 2 bytes per
 * layer per token (docs/memory.md). Without checkpointing every layer's
 * internals are live there too. */
static void test_checkpoint_keeps(void)
{
    sg_model *m = calloc(1, sizeof *m);
    if (!m || load_model("llama-3.1-8b", m)) {
        tap_skip(3, "llama-3.1-8b.json missing");
        free(m);
        return;
    }
    for (int ckpt = 1; ckpt >= 0; ckpt--) {
        sg_step_spec s;
        sg_graph g;
        sg_liveness lv;
        int L = sg_model_num_units(m) - 2;
        if (compile_superoffload(m, ckpt, &s, &g, &lv)) {
            tap_skip(ckpt ? 2 : 1, "compile failed");
            continue;
        }
        char *live = calloc((size_t)g.nbuffers, 1);
        int first_bwd = -1;
        for (int n = 0; n < g.nnodes && first_bwd < 0; n++) {
            for (int k = lv.born_offset[n]; k < lv.born_offset[n + 1]; k++)
                live[lv.born[k]] = 1;
            if (g.nodes[n].kind == SG_OP_BACKWARD)
                first_bwd = n;
            else
                for (int k = lv.dies_offset[n]; k < lv.dies_offset[n + 1]; k++)
                    live[lv.dies[k]] = 0;
        }
        int64_t act = 0;
        int nact = 0, nsaved = 0;
        for (int b = 0; b < g.nbuffers; b++) {
            const sg_buffer *buf = &g.buffers[b];
            if (!live[b] || buf->unit < 1 || buf->unit > L)
                continue;
            if (buf->role == SG_BUF_ACT) {
                act += buf->bytes;
                nact++;
            }
            nsaved += buf->role == SG_BUF_SAVED;
        }
        int64_t tokens = s.seq_len * s.micro_batch;
        if (ckpt) {
            is_int(nsaved, 0, "checkpointing: no layer's internals live at the first backward");
            ok(nact == L && act == (int64_t)L * tokens * m->hidden_size * 2,
               "checkpointing: each of the %d layers keeps its output, %lld bytes per layer per "
               "token (hidden %lld x 2)",
               L, (long long)(nact ? act / nact / tokens : 0), (long long)m->hidden_size);
        } else {
            is_int(nsaved, L, "without checkpointing every layer's internals are live there");
        }
        free(live);
        sg_liveness_free(&lv);
        sg_graph_free(&g);
    }
    free(m);
}

/* A MoE model's checkpointed layers (qwen3-30b-a3b, the settings above):
 * at the first backward node no layer's internals or expert activations
 * are live, only each layer's output (hidden_size x 2 bytes per layer per
 * token, as a dense layer); over the whole step the expert groups'
 * activations of at most one layer are live at a time, G groups x N x
 * min(experts per group, k) rows x (2 I + H) x 2 bytes (bf16), worked out
 * here from the model's sizes; without checkpointing every layer's are
 * live at the first backward. */
static void test_checkpoint_moe(void)
{
    sg_model *m = calloc(1, sizeof *m);
    if (!m || load_model("qwen3-30b-a3b", m)) {
        tap_skip(5, "qwen3-30b-a3b.json missing");
        free(m);
        return;
    }
    for (int ckpt = 1; ckpt >= 0; ckpt--) {
        sg_step_spec s;
        sg_graph g;
        sg_liveness lv;
        int L = sg_model_num_units(m) - 2;
        if (compile_superoffload(m, ckpt, &s, &g, &lv)) {
            tap_skip(ckpt ? 4 : 1, "compile failed");
            continue;
        }
        char *live = calloc((size_t)g.nbuffers, 1);
        int first_bwd = -1, nsaved = 0, nact = 0, ninner = 0, most_layers = 0;
        int64_t act = 0, moe_live = 0, most_moe = 0;
        int *layer_n = calloc((size_t)L + 2, sizeof *layer_n);
        for (int n = 0; n < g.nnodes; n++) {
            for (int k = lv.born_offset[n]; k < lv.born_offset[n + 1]; k++) {
                const sg_buffer *buf = &g.buffers[lv.born[k]];
                live[lv.born[k]] = 1;
                if (buf->role == SG_BUF_MOE_ACT) {
                    moe_live += buf->bytes;
                    layer_n[buf->unit]++;
                }
            }
            if (moe_live > most_moe)
                most_moe = moe_live;
            int layers = 0;
            for (int u = 1; u <= L; u++)
                layers += layer_n[u] > 0;
            if (layers > most_layers)
                most_layers = layers;
            if (g.nodes[n].kind == SG_OP_BACKWARD && first_bwd < 0) {
                first_bwd = n;
                for (int b = 0; b < g.nbuffers; b++) {
                    const sg_buffer *buf = &g.buffers[b];
                    if (!live[b] || buf->unit < 1 || buf->unit > L)
                        continue;
                    if (buf->role == SG_BUF_ACT) {
                        act += buf->bytes;
                        nact++;
                    }
                    nsaved += buf->role == SG_BUF_SAVED;
                    ninner += buf->role == SG_BUF_MOE_ACT;
                }
            }
            for (int k = lv.dies_offset[n]; k < lv.dies_offset[n + 1]; k++) {
                const sg_buffer *buf = &g.buffers[lv.dies[k]];
                live[lv.dies[k]] = 0;
                if (buf->role == SG_BUF_MOE_ACT) {
                    moe_live -= buf->bytes;
                    layer_n[buf->unit]--;
                }
            }
        }
        const int64_t N = s.seq_len * s.micro_batch, E = m->num_experts;
        const int64_t K = m->experts_per_token, G = E < 8 ? E : 8, ge = (E + G - 1) / G;
        const int64_t one_layer =
            G * N * (ge < K ? ge : K) * (2 * m->moe_intermediate_size + m->hidden_size) * 2;
        if (ckpt) {
            ok(nsaved == 0 && ninner == 0,
               "MoE, checkpointing: no layer's internals or expert activations live at the "
               "first backward (%d, %d)",
               nsaved, ninner);
            ok(nact == L && act == (int64_t)L * N * m->hidden_size * 2,
               "MoE, checkpointing: each of the %d layers keeps its output, %lld bytes per "
               "layer per token (hidden %lld x 2)",
               L, (long long)(nact ? act / nact / N : 0), (long long)m->hidden_size);
            is_int(most_layers, 1,
                   "MoE, checkpointing: one layer's expert activations live "
                   "at a time");
            ok(most_moe == one_layer,
               "MoE, checkpointing: at most %lld bytes of expert activations (%lld per token: "
               "%lld groups x min(%lld, k %lld) x (2 x %lld + %lld) x 2)",
               (long long)most_moe, (long long)(most_moe / N), (long long)G, (long long)ge,
               (long long)K, (long long)m->moe_intermediate_size, (long long)m->hidden_size);
        } else {
            is_int(ninner, (int)(L * G),
                   "MoE without checkpointing: every layer's expert "
                   "activations are live at the first backward");
        }
        free(layer_n);
        free(live);
        sg_liveness_free(&lv);
        sg_graph_free(&g);
    }
    free(m);
}

/* Several workers (graph/peak_workers.h), worked out by hand: two
 * independent chains of 400-byte values, a (higher priority) and b:
 *   A0 W a0; A1 R a0 W a1; A2 R a1;  B0 W b0; B1 R b0 W b1; B2 R b1
 * One worker runs A0 A1 A2 B0 B1 B2 (priorities): at most a0 + a1 = 800
 * bytes, the program-order plan. Two workers start A0 and B0 together
 * (round robin), then A1 and B1: a0 a1 b0 b1 = 1600 bytes live at once. */
static void test_workers(void)
{
    sg_graph g;
    sg_graph_init(&g);
    int a0 = add(&g, "a0", 100, SG_MEM_GPU, 0), a1 = add(&g, "a1", 100, SG_MEM_GPU, 0);
    int b0 = add(&g, "b0", 100, SG_MEM_HOST, 0), b1 = add(&g, "b1", 100, SG_MEM_HOST, 0);
    int p = add(&g, "p", 250, SG_MEM_GPU, 1);
    op(&g, "A0", a0, SG_W, p, SG_R, 0, 0);
    op(&g, "A1", a0, SG_R, a1, SG_W, 0, 0);
    op(&g, "A2", a1, SG_R, 0, 0, 0, 0);
    op(&g, "B0", b0, SG_W, p, SG_R, 0, 0);
    op(&g, "B1", b0, SG_R, b1, SG_W, 0, 0);
    op(&g, "B2", b1, SG_R, 0, 0, 0, 0);
    sg_error err = {0};
    int64_t peak = 0, pers = 0, one = 0, one_pers = 0;
    sg_graph_finalize(&g, &err);
    for (int n = 0; n < g.nnodes; n++)
        g.nodes[n].priority = 100 - n;
    sg_graph_peak_memory_one_space(&g, &one, &one_pers);
    is_int(sg_graph_peak_memory_workers(&g, 1, &peak, &pers), 0, "workers: computed");
    ok(peak == 1800 && pers == 1000 && one == peak,
       "one worker: the program-order plan, 800 bytes + 1000 of state (%lld, %lld)",
       (long long)peak, (long long)one);
    sg_graph_peak_memory_workers(&g, 2, &peak, &pers);
    is_int(peak, 2600, "two workers run the chains side by side: 1600 bytes + 1000 of state");
    is_int(sg_graph_peak_memory_workers(&g, 0, &peak, &pers), SG_EINVAL, "no workers: refused");
    sg_graph_free(&g);
}

int main(void)
{
    tap_plan(24);
    test_workers();
    test_checkpoint_keeps();
    test_checkpoint_moe();
    sg_graph g;

    /* A chain: a, b, c are 400 bytes each, p 1000 bytes of state.
     *   n0 W a; n1 R a W b; n2 R b W c; n3 R c W a (a new value); n4 R a
     * live after each node: a | a b | b c | c a | a  -> 800 + 1000 */
    sg_graph_init(&g);
    int a = add(&g, "a", 100, SG_MEM_GPU, 0), b = add(&g, "b", 100, SG_MEM_GPU, 0);
    int c = add(&g, "c", 100, SG_MEM_GPU, 0), p = add(&g, "p", 250, SG_MEM_GPU, 1);
    op(&g, "n0", a, SG_W, p, SG_R, 0, 0);
    op(&g, "n1", a, SG_R, b, SG_W, 0, 0);
    op(&g, "n2", b, SG_R, c, SG_W, 0, 0);
    op(&g, "n3", c, SG_R, a, SG_W, 0, 0);
    op(&g, "n4", a, SG_R, 0, 0, 0, 0);
    is_int(gpu_peak(&g), 1800, "chain: two values of 400 bytes at a time, plus 1000 of state");
    sg_liveness lv;
    is_int(sg_graph_liveness(&g, &lv), 0, "liveness computed");
    is_int(dies_mask(&lv, a), (1 << 1) | (1 << 4),
           "a's first value dies after n1, its second after n4");
    is_int(dies_mask(&lv, b), 1 << 2, "b dies after its reader n2");
    is_int(dies_mask(&lv, p), 0, "state never dies");
    sg_liveness_free(&lv);
    sg_graph_free(&g);

    /* A late reader holds a value: the same chain where n3 also reads a's
     * first value (as the gradient norm read every gradient piece at the
     * end): a lives n0..n3, so at n2 a, b, c are live -> 1200 + 1000. Move
     * that read to n1 and the peak falls back to 800 + 1000. */
    for (int late = 1; late >= 0; late--) {
        sg_graph_init(&g);
        a = add(&g, "a", 100, SG_MEM_GPU, 0);
        b = add(&g, "b", 100, SG_MEM_GPU, 0);
        c = add(&g, "c", 100, SG_MEM_GPU, 0);
        p = add(&g, "p", 250, SG_MEM_GPU, 1);
        op(&g, "n0", a, SG_W, p, SG_R, 0, 0);
        op(&g, "n1", a, SG_R, b, SG_W, 0, 0);
        op(&g, "n2", b, SG_R, c, SG_W, 0, 0);
        op(&g, "n3", c, SG_R, late ? a : c, SG_R, 0, 0);
        is_int(gpu_peak(&g), late ? 2200 : 1800,
               late ? "a late reader keeps a third buffer live" : "reading early frees it");
        sg_graph_free(&g);
    }

    /* Read-write continues a value; a node listing a buffer as R and W
     * (merged RW) too: n0 W a; n1 RW a; n2 R a + W a; n3 W b; n4 R b
     * -> a lives n0..n2, b n3..n4: one 400-byte buffer at a time. */
    sg_graph_init(&g);
    a = add(&g, "a", 100, SG_MEM_GPU, 0);
    b = add(&g, "b", 100, SG_MEM_GPU, 0);
    op(&g, "n0", a, SG_W, 0, 0, 0, 0);
    op(&g, "n1", a, SG_RW, 0, 0, 0, 0);
    op(&g, "n2", a, SG_R, a, SG_W, 0, 0);
    op(&g, "n3", b, SG_W, 0, 0, 0, 0);
    op(&g, "n4", b, SG_R, 0, 0, 0, 0);
    is_int(gpu_peak(&g), 400, "read-write keeps one value; buffers after it reuse the room");
    sg_graph_liveness(&g, &lv);
    is_int(dies_mask(&lv, a), 1 << 2, "a dies once, after n2 (R and W on one node continue it)");
    sg_liveness_free(&lv);
    sg_graph_free(&g);

    /* What the host reads after the step (a loss) never dies; spaces add up
     * in one memory: n0 W g (GPU 400); n1 R g W h (host 200) W l (loss 4,
     * host); n2 R h.  GPU peak 400; host peak 204 (h + loss); one space:
     * at n1 g, h and l are live -> 604. */
    sg_graph_init(&g);
    int gb = add(&g, "g", 100, SG_MEM_GPU, 0), hb = add(&g, "h", 50, SG_MEM_HOST, 0);
    int lb = add(&g, "loss", 1, SG_MEM_HOST, 0);
    g.buffers[lb].role = SG_BUF_LOSS;
    op(&g, "n0", gb, SG_W, 0, 0, 0, 0);
    op(&g, "n1", gb, SG_R, hb, SG_W, lb, SG_W);
    op(&g, "n2", hb, SG_R, 0, 0, 0, 0);
    sg_error err = {0};
    int64_t peak[SG_MEM_COUNT], pers[SG_MEM_COUNT], one = 0, one_pers = 0;
    sg_graph_finalize(&g, &err);
    sg_graph_peak_memory(&g, peak, pers);
    is_int(peak[SG_MEM_HOST], 204, "host peak: the host buffer and the loss");
    sg_graph_peak_memory_one_space(&g, &one, &one_pers);
    is_int(one, 604, "one memory: GPU and host values live together at n1");
    sg_graph_liveness(&g, &lv);
    is_int(dies_mask(&lv, lb), 0, "the loss outlives the step");
    sg_liveness_free(&lv);
    sg_graph_free(&g);
    return tap_done();
}
