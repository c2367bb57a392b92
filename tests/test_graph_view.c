#define _POSIX_C_SOURCE 200809L
/* test_graph_view.c - what the graph views rest on: folding repeated units
 * (graph/fold.h) never loses a node and folds only units of one shape, the
 * folded DOT draws every node or its group, the critical paths
 * (graph/critical_path.h) of constructed graphs are the known ones, and the
 * pictures colour tasks by where they run and lay them out by phase
 * (graph/phase_layout.h): checked on the DOT text and on the positions
 * Graphviz itself gives the nodes. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

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
    ok(wait == 2.0 + 2.0, "executed: the waits are summed (join 10 - 8, fast side 3 - 1): %g",
       wait);
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
        tap_skip(7, "no llama-3.1-8b model");
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
        tap_skip(6, "the 8B step did not compile");
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
            snprintf(key, sizeof key, "\n  n%d [", i);
        else
            snprintf(key, sizeof key, "\n  f%d [", f.group_of[i]);
        missing += strstr(dot, key) == NULL;
    }
    ok(missing == 0, "the folded DOT draws every node or the group holding it (%d missing)",
       missing);
    /* ... and places each in exactly one column (rank) of the grid */
    int bad_rank = 0;
    for (int i = 0; i < g.nnodes; i++) {
        char key[48];
        if (f.group_of[i] < 0)
            snprintf(key, sizeof key, " n%d;", i);
        else
            snprintf(key, sizeof key, " f%d;", f.group_of[i]);
        int found = 0;
        for (const char *p = strstr(dot, "{ rank=same;"); p; p = strstr(p + 1, "{ rank=same;")) {
            const char *end = strchr(p, '}');
            const char *k = strstr(p, key);
            found += k && k < end;
        }
        bad_rank += found != 1;
    }
    ok(bad_rank == 0, "the folded DOT puts every drawn node or group in one column (%d not)",
       bad_rank);
    free(dot);
    /* the phases of the 8B step: a unit's forward and backward share its
     * column, forward rows above backward ones, the copies on the link lane,
     * the CPU Adam below it, every optimizer row under every unit row */
    sg_phase_layout pl;
    sg_phase_layout_compute(&g, &f, NULL, &pl);
    int bad_phase = 0, max_unit_row = -1, min_opt_row = 1 << 30;
    for (int i = 0; i < g.nnodes; i++) {
        const sg_node *a = &g.nodes[i];
        if (f.group_of[i] >= 0)
            continue;
        if (a->layer >= 0 && pl.row[i] > max_unit_row)
            max_unit_row = pl.row[i];
        if (a->layer < 0 && pl.row[i] < min_opt_row)
            min_opt_row = pl.row[i];
        if ((a->kind == SG_OP_D2H || a->kind == SG_OP_H2D) && pl.band[i] != SG_BAND_LINK)
            bad_phase++;
        if (a->kind == SG_OP_ADAM_CPU && pl.band[i] != SG_BAND_OPT_CPU)
            bad_phase++;
        for (int j = 0; a->kind == SG_OP_FORWARD && j < g.nnodes; j++)
            if (f.group_of[j] < 0 && g.nodes[j].kind == SG_OP_BACKWARD &&
                g.nodes[j].layer == a->layer)
                bad_phase += pl.col[j] != pl.col[i] || pl.row[j] <= pl.row[i];
    }
    ok(bad_phase == 0 && max_unit_row < min_opt_row && pl.ncols < 12,
       "8B layout: forward over backward in each unit's column, copies on the link lane, CPU "
       "Adam on the host side, the optimizer under the units, %d columns (%d misplaced)",
       pl.ncols, bad_phase);
    sg_phase_layout_free(&pl);
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

/* Two units: forward 0 -> 1, backward 1 -> 0 on the GPU, then the
 * optimizer of one sub-group: d2h, Adam on the CPU, h2d. */
static void small_step(sg_graph *g)
{
    sg_graph_init(g);
    int a0 = sg_graph_add_buffer(g, "a0", 1000, SG_F32, SG_MEM_GPU, 0);
    int a1 = sg_graph_add_buffer(g, "a1", 1000, SG_F32, SG_MEM_GPU, 0);
    int g1 = sg_graph_add_buffer(g, "g1", 1000, SG_F32, SG_MEM_GPU, 0);
    int g0 = sg_graph_add_buffer(g, "g0", 1000, SG_F32, SG_MEM_GPU, 0);
    int gh = sg_graph_add_buffer(g, "gh", 1000, SG_F32, SG_MEM_HOST, 0);
    int ms = sg_graph_add_buffer(g, "master", 1000, SG_F32, SG_MEM_HOST, 1);
    int p = sg_graph_add_buffer(g, "p", 1000, SG_F32, SG_MEM_GPU, 1);
    sg_access f0[2] = {{p, SG_R}, {a0, SG_W}}, f1[2] = {{a0, SG_R}, {a1, SG_W}};
    sg_access b1[2] = {{a1, SG_R}, {g1, SG_W}}, b0[3] = {{g1, SG_R}, {a0, SG_R}, {g0, SG_W}};
    sg_access d[2] = {{g0, SG_R}, {gh, SG_W}}, ad[2] = {{gh, SG_R}, {ms, SG_RW}};
    sg_access h[2] = {{ms, SG_R}, {p, SG_W}};
    sg_graph_add_node(g, SG_OP_FORWARD, SG_DEV_GPU, 0, 1e9, f0, 2, "fwd.layer0");
    sg_graph_add_node(g, SG_OP_FORWARD, SG_DEV_GPU, 1, 1e9, f1, 2, "fwd.layer1");
    sg_graph_add_node(g, SG_OP_BACKWARD, SG_DEV_GPU, 1, 2e9, b1, 2, "bwd.layer1");
    sg_graph_add_node(g, SG_OP_BACKWARD, SG_DEV_GPU, 0, 2e9, b0, 3, "bwd.layer0");
    int n4 = sg_graph_add_node(g, SG_OP_D2H, SG_DEV_LINK, -1, 0, d, 2, "d2h.sg0");
    int n5 = sg_graph_add_node(g, SG_OP_ADAM_CPU, SG_DEV_CPU, -1, 1e4, ad, 2, "adam_cpu.sg0");
    int n6 = sg_graph_add_node(g, SG_OP_H2D, SG_DEV_LINK, -1, 0, h, 2, "h2d.sg0");
    g->nodes[n4].link = SG_LINK_D2H;
    g->nodes[n6].link = SG_LINK_H2D;
    g->nodes[n4].subgroup = g->nodes[n5].subgroup = g->nodes[n6].subgroup = 0;
    sg_error err = {0};
    sg_graph_finalize(g, &err);
}

/* The DOT of g drawn with st, in memory. */
static char *dot_of(const sg_graph *g, const sg_dot_style *st)
{
    char *dot = NULL;
    size_t len = 0;
    FILE *mem = open_memstream(&dot, &len);
    sg_export_dot_styled(g, st, mem);
    fclose(mem);
    return dot;
}

/* The value of attribute attr on the declaration of node `node` ("n5"). */
static int attr_of(const char *dot, const char *node, const char *attr, char *out, size_t size)
{
    char key[64];
    snprintf(key, sizeof key, "\n  %s [", node);
    const char *p = strstr(dot, key);
    if (!p)
        return -1;
    const char *eol = strchr(p + 1, '\n');
    snprintf(key, sizeof key, " %s=\"", attr);
    const char *a = strstr(p, key);
    if (!a || (eol && a > eol))
        return -1;
    a += strlen(key);
    const char *q = strchr(a, '"');
    snprintf(out, size, "%.*s", (int)(q - a), a);
    return 0;
}

/* The legend's node whose label is `label`: its fill colour. */
static int legend_fill(const char *dot, const char *label, char *out, size_t size)
{
    char key[128];
    snprintf(key, sizeof key, "[label=\"%s\"", label);
    const char *p = strstr(dot, key);
    if (!p)
        return -1;
    const char *line = p;
    while (line > dot && line[-1] != '\n')
        line--;
    char name[32];
    if (sscanf(line, " %31s", name) != 1 || strncmp(name, "legend_", 7))
        return -1;
    return attr_of(dot, name, "fillcolor", out, size);
}

/* Positions Graphviz gives the nodes (dot -Tplain), by node id n0..n(nn-1). */
static int positions(const char *dot, int nn, double *x, double *y)
{
    const char *bin = getenv("DOT");
    if (!bin || !*bin)
        return -1;
    char path[] = "/tmp/sg_test_view_XXXXXX";
    int fd = mkstemp(path);
    FILE *f = fd >= 0 ? fdopen(fd, "w") : NULL;
    if (!f)
        return -1;
    fputs(dot, f);
    fclose(f);
    char cmd[8192];
    snprintf(cmd, sizeof cmd, "'%s' -Tplain '%s' 2>/dev/null", bin, path);
    FILE *pl = popen(cmd, "r");
    char line[4096];
    int found = 0;
    for (int i = 0; i < nn; i++)
        x[i] = y[i] = -1e9;
    while (pl && fgets(line, sizeof line, pl)) {
        int id;
        double px, py;
        if (sscanf(line, "node n%d %lf %lf", &id, &px, &py) == 3 && id >= 0 && id < nn) {
            x[id] = px;
            y[id] = py;
            found++;
        }
    }
    int rc = pl ? pclose(pl) : -1;
    unlink(path);
    return rc == 0 && found == nn ? 0 : -1;
}

static void test_places_and_phases(void)
{
    sg_graph g;
    small_step(&g);
    ok(sg_where_planned(&g.nodes[5]) == SG_WHERE_CPU &&
           sg_where_planned(&g.nodes[3]) == SG_WHERE_GPU &&
           sg_where_planned(&g.nodes[4]) == SG_WHERE_D2H &&
           sg_where_planned(&g.nodes[6]) == SG_WHERE_H2D,
       "planned places: CPU Adam on a CPU worker, backward on a GPU, copies on their links");
    ok(sg_where_of_lane("CPU 3") == SG_WHERE_CPU && sg_where_of_lane("CUDA 0") == SG_WHERE_GPU &&
           sg_where_of_lane("link d2h") == SG_WHERE_D2H && sg_where_of_lane("critical path") < 0,
       "trace lanes name the place a task ran");
    ok(strcmp(sg_where_color(SG_WHERE_CPU), sg_where_color(SG_WHERE_GPU)) &&
           strcmp(sg_where_color(SG_WHERE_H2D), sg_where_color(SG_WHERE_D2H)),
       "places have distinct colours");

    sg_dot_style st = {0};
    char *dot = dot_of(&g, &st);
    char cpu_fill[32] = "", gpu_fill[32] = "", leg_cpu[32] = "", leg_gpu[32] = "", d2h_leg[32] = "";
    char d2h_fill[32] = "", shape_b[32] = "", shape_f[32] = "";
    attr_of(dot, "n5", "fillcolor", cpu_fill, sizeof cpu_fill);
    attr_of(dot, "n3", "fillcolor", gpu_fill, sizeof gpu_fill);
    attr_of(dot, "n4", "fillcolor", d2h_fill, sizeof d2h_fill);
    legend_fill(dot, sg_where_label(SG_WHERE_CPU), leg_cpu, sizeof leg_cpu);
    legend_fill(dot, sg_where_label(SG_WHERE_GPU), leg_gpu, sizeof leg_gpu);
    legend_fill(dot, sg_where_label(SG_WHERE_D2H), d2h_leg, sizeof d2h_leg);
    ok(cpu_fill[0] && !strcmp(cpu_fill, leg_cpu) && gpu_fill[0] && !strcmp(gpu_fill, leg_gpu) &&
           strcmp(cpu_fill, gpu_fill) && d2h_fill[0] && !strcmp(d2h_fill, d2h_leg),
       "DOT: the CPU Adam node (%s) and the GPU backward node (%s) have the fills the legend "
       "names for their places; the d2h copy too (%s)",
       cpu_fill, gpu_fill, d2h_fill);
    /* kind stays readable: in the label, and the phase in the shape */
    attr_of(dot, "n3", "shape", shape_b, sizeof shape_b);
    char *l3 = strstr(dot, "\n  n3 [");
    ok(l3 && strstr(l3, "[backward]") && strstr(l3, "[backward]") < strchr(l3 + 1, '\n') &&
           strstr(dot, "shape=larrow") && strstr(dot, "shape=rarrow") &&
           strstr(dot, "label=\"backward (recompute, gradient sums)\", shape=larrow"),
       "DOT: the kind is written in the label, the shape is the phase, and the legend names "
       "the shapes");
    (void)shape_f;
    /* the grid: forward and backward of a unit in one column (rank), the
     * d2h on the link lane, under the GPU bands and above the host side */
    sg_phase_layout l;
    sg_phase_layout_compute(&g, NULL, NULL, &l);
    ok(l.col[0] == l.col[3] && l.col[1] == l.col[2] && l.col[0] < l.col[1] &&
           l.band[4] == SG_BAND_LINK && l.band[5] == SG_BAND_OPT_CPU && l.row[1] < l.row[2] &&
           l.row[2] < l.row[4] && l.row[4] < l.row[5],
       "layout: a unit's forward and backward share its column, forward rows above backward "
       "ones, the d2h on the link lane between them and the CPU optimizer");
    sg_phase_layout_free(&l);
    ok(strstr(dot, "label=\"link lanes: GPU <-> host copies\"") &&
           strstr(dot, "label=\"host side: CPU optimizer\"") &&
           strstr(dot, "label=\"forward, left to right\""),
       "DOT: the bands are named (forward, link lanes, the optimizer's host side)");
    double x[7], y[7];
    if (positions(dot, 7, x, y)) {
        tap_skip(2, "Graphviz dot not found at configure time");
    } else {
        /* rankdir=LR: x grows to the right, y upwards */
        ok(x[0] < x[1] && x[3] < x[2] && x[0] == x[3] && x[1] == x[2],
           "Graphviz: forward left to right, backward back under it (x %g %g | %g %g)", x[0], x[1],
           x[3], x[2]);
        ok(y[0] > y[3] && y[1] > y[2] && y[3] > y[4] && y[4] > y[5],
           "Graphviz: forward above backward, the d2h link lane under them, the CPU Adam band "
           "lowest (y %g > %g > %g > %g)",
           y[0], y[3], y[4], y[5]);
    }
    free(dot);

    /* a trace said Adam ran on a GPU worker, and gave times */
    unsigned char where[7];
    for (int i = 0; i < 7; i++)
        where[i] = (unsigned char)sg_where_planned(&g.nodes[i]);
    where[5] = SG_WHERE_GPU;
    double heat[7] = {-1, 0.5, 1, 0, -1, 0.25, -1};
    st.where = where;
    st.heat = heat;
    dot = dot_of(&g, &st);
    attr_of(dot, "n5", "fillcolor", cpu_fill, sizeof cpu_fill);
    char want[64];
    snprintf(want, sizeof want, "%s", sg_where_color(SG_WHERE_GPU));
    ok(strstr(cpu_fill, want) && strstr(cpu_fill, ";0.250:"),
       "with a trace: the Adam that ran on a GPU is filled with the GPU colour, a quarter red "
       "for its time (%s)",
       cpu_fill);
    char sty[48] = "";
    attr_of(dot, "n0", "style", sty, sizeof sty);
    ok(strstr(sty, "dashed") && strstr(dot, "legend_heat") && strstr(dot, "(from the trace)"),
       "with a trace: a task not in it is dashed; the legend explains the red share");
    free(dot);
    sg_graph_free(&g);

    /* an empty graph still exports (a legend, nothing else) */
    sg_graph_init(&g);
    sg_error err = {0};
    sg_graph_finalize(&g, &err);
    sg_dot_style none = {0};
    dot = dot_of(&g, &none);
    ok(dot && strstr(dot, "digraph step {") && strstr(dot, "}\n"), "an empty graph exports");
    free(dot);
    sg_graph_free(&g);
}

int main(void)
{
    test_critical_paths();
    test_places_and_phases();
    test_fold_8b();
    return tap_done();
}
