#define _POSIX_C_SOURCE 200809L
/* test_graph_view.c - what the graph views rest on: folding repeated units
 * (graph/fold.h) never loses a node and folds only units of one shape, the
 * folded DOT draws every node or its group, and the critical paths
 * (graph/critical_path.h) of constructed graphs are the known ones. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "graph/analysis.h"
#include "graph/compile.h"
#include "graph/critical_path.h"
#include "graph/export.h"
#include "graph/fold.h"
#include "models/model.h"
#include "tests/tap.h"
#include "tests/test_util.h"

/* 0 -> 1 -> 3, 0 -> 2 -> 3, and 4 alone: a diamond with a slow side. */
static void diamond(sg_graph *g)
{
    sg_graph_init(g);
    int a = sg_graph_add_buffer(g, "a", 1000, SG_F32, SG_MEM_GPU, 0);
    int b = sg_graph_add_buffer(g, "b", 1000, SG_F32, SG_MEM_GPU, 0);
    int c = sg_graph_add_buffer(g, "c", 1000, SG_F32, SG_MEM_GPU, 0);
    int d = sg_graph_add_buffer(g, "d", 1000, SG_F32, SG_MEM_GPU, 0);
    sg_access w_a = {a, SG_W}, ab[2] = {{a, SG_R}, {b, SG_W}}, ac[2] = {{a, SG_R}, {c, SG_W}};
    sg_access bc[2] = {{b, SG_R}, {c, SG_R}}, w_d = {d, SG_W};
    sg_graph_add_node(g, SG_OP_FORWARD, SG_DEV_GPU, 0, 1e9, &w_a, 1, "first");
    sg_graph_add_node(g, SG_OP_FORWARD, SG_DEV_GPU, 0, 1e13, ab, 2, "slow side");
    sg_graph_add_node(g, SG_OP_FORWARD, SG_DEV_GPU, 0, 1e9, ac, 2, "fast side");
    sg_graph_add_node(g, SG_OP_FORWARD, SG_DEV_GPU, 0, 1e9, bc, 2, "join");
    sg_graph_add_node(g, SG_OP_FORWARD, SG_DEV_GPU, 0, 1e9, &w_d, 1, "alone");
    sg_error err = {0};
    sg_graph_finalize(g, &err);
}

static void test_critical_paths(void)
{
    sg_graph g;
    diamond(&g);
    int ids[8], n = 0;
    sg_cost_model cm;
    sg_cost_model_gh200(&cm);
    sg_critical_path_ideal(&g, &cm, ids, &n);
    ok(n == 3 && ids[0] == 0 && ids[1] == 1 && ids[2] == 3,
       "ideal: the path goes through the slow side (%d nodes)", n);
    /* executed: the fast side ran late, the slow side early; "join" waited
     * 2 us after the fast side ended; "alone" ended before the join */
    double start[5] = {0, 1, 3, 10, 0}, end[5] = {1, 5, 8, 12, 9}, wait = 0;
    sg_critical_path_timed(&g, start, end, NULL, ids, &n, &wait);
    ok(n == 3 && ids[0] == 0 && ids[1] == 2 && ids[2] == 3,
       "executed: join <- the predecessor that ended last (the fast side, ended 8) <- first");
    ok(wait == 2.0 + 2.0, "executed: the waits are summed (join 10 - 8, fast side 3 - 1): %g", wait);
    end[3] = -1; /* the join did not run: the path ends at the last task that did */
    sg_critical_path_timed(&g, start, end, NULL, ids, &n, &wait);
    ok(n == 1 && ids[0] == 4, "executed: a node that did not run is left out");
    /* one worker ran everything in the order first, alone, fast, slow, join:
     * the join waited for the worker (slow side), and "alone" is on the path */
    double s1[5] = {0, 12, 10, 20, 1}, e1[5] = {1, 20, 12, 21, 10};
    int lane[5] = {0, 0, 0, 0, 0};
    sg_critical_path_timed(&g, s1, e1, lane, ids, &n, &wait);
    ok(n == 5 && ids[0] == 0 && ids[1] == 4 && ids[2] == 2 && ids[3] == 1 && ids[4] == 3 &&
           wait == 0,
       "executed on one worker: the chain goes through the worker's previous tasks, no wait");
    sg_graph_free(&g);
}

/* name of node with unit label `from` replaced by `to` ("fwd.layer7.mb0"). */
static void rename_unit(const char *name, const char *from, const char *to, char *out, size_t size)
{
    const char *p = strstr(name, from);
    size_t fl = strlen(from);
    /* whole label only: layer1 must not match inside layer12 */
    while (p && p[fl] >= '0' && p[fl] <= '9')
        p = strstr(p + 1, from);
    if (!p)
        snprintf(out, size, "%s", name);
    else
        snprintf(out, size, "%.*s%s%s", (int)(p - name), name, to, p + fl);
}

static void test_fold_8b(void)
{
    sg_model *m = calloc(1, sizeof *m);
    if (load_model("llama-3.1-8b", m)) {
        tap_skip(5, "no llama-3.1-8b model");
        free(m);
        return;
    }
    sg_step_spec s;
    superoffload_spec(&s, 0.9);
    s.sub_group_size = 400000000;
    s.seq_len = 4096;
    s.activation_checkpointing = 1;
    sg_graph g;
    sg_graph_init(&g);
    sg_error err = {0};
    int rc = sg_compile_step(m, &s, &g, &err);
    sg_fold f;
    rc = rc ? rc : sg_fold_compute(&g, &f);
    if (!ok(rc == 0, "the 8B SuperOffload step compiles and folds")) {
        tap_diag("%s", err.msg);
        tap_skip(4, "the 8B step did not compile");
        free(m);
        return;
    }
    int drawn = 0, folded = 0, bad = 0;
    for (int i = 0; i < g.nnodes; i++)
        f.group_of[i] < 0 ? drawn++ : folded++;
    int in_groups = 0;
    for (int gi = 0; gi < f.ngroups; gi++)
        in_groups += f.groups[gi].nodes;
    ok(drawn + in_groups == g.nnodes && in_groups == folded,
       "no node lost: %d drawn + %d in %d groups = %d nodes", drawn, in_groups, f.ngroups,
       g.nnodes);
    ok(drawn < g.nnodes / 4, "folding leaves a readable picture: %d of %d nodes drawn", drawn,
       g.nnodes);
    /* every folded decoder-layer node has a twin in its group's model unit:
     * same kind, device and name with the unit's label replaced */
    for (int i = 0; i < g.nnodes; i++) {
        int gi = f.group_of[i];
        if (gi < 0 || f.groups[gi].is_subgroup)
            continue;
        char from[32], to[32], want[SG_IR_NAME_MAX + 32];
        sg_unit_label(&g, g.nodes[i].layer, from, sizeof from);
        sg_unit_label(&g, (int)f.groups[gi].like, to, sizeof to);
        rename_unit(g.nodes[i].name, from, to, want, sizeof want);
        int twin = 0;
        for (int j = 0; j < g.nnodes && !twin; j++)
            twin = g.nodes[j].layer == (int)f.groups[gi].like && !strcmp(g.nodes[j].name, want) &&
                   g.nodes[j].kind == g.nodes[i].kind && g.nodes[j].device == g.nodes[i].device;
        bad += !twin;
    }
    ok(bad == 0, "every folded unit node has its twin in the unit drawn for its group (%d without)",
       bad);
    /* the folded DOT: every drawn node once, every group once */
    char *dot = NULL;
    size_t len = 0;
    FILE *mem = open_memstream(&dot, &len);
    sg_export_dot_folded(&g, &f, mem);
    fclose(mem);
    int missing = 0;
    for (int i = 0; i < g.nnodes; i++) {
        char key[48];
        if (f.group_of[i] < 0)
            snprintf(key, sizeof key, "\n    n%d [", i);
        else
            snprintf(key, sizeof key, "\n  f%d [", f.group_of[i]);
        missing += strstr(dot, key) == NULL;
    }
    ok(missing == 0, "the folded DOT draws every node or the group holding it (%d missing)",
       missing);
    free(dot);
    sg_fold_free(&f);
    sg_graph_free(&g);

    /* with optimizer tiles (63 chunks per CPU sub-group, as `auto` gives on
     * gh200) the chunks fold too */
    s.optimizer_tile = 6349312;
    sg_graph_init(&g);
    rc = sg_compile_step(m, &s, &g, &err);
    rc = rc ? rc : sg_fold_compute(&g, &f);
    drawn = in_groups = 0;
    for (int i = 0; !rc && i < g.nnodes; i++)
        drawn += f.group_of[i] < 0;
    for (int gi = 0; !rc && gi < f.ngroups; gi++)
        in_groups += f.groups[gi].nodes;
    int chunk_group = 0;
    for (int gi = 0; !rc && gi < f.ngroups; gi++)
        chunk_group |= f.groups[gi].is_subgroup == SG_FOLD_CHUNK && f.groups[gi].count > 100;
    ok(!rc && g.nnodes > 3000 && drawn + in_groups == g.nnodes && drawn < 120 && chunk_group,
       "tiled: %d nodes, %d drawn, the optimizer chunks folded into groups", g.nnodes, drawn);
    if (!rc)
        sg_fold_free(&f);
    sg_graph_free(&g);
    free(m);
}

int main(void)
{
    test_critical_paths();
    test_fold_8b();
    return tap_done();
}
