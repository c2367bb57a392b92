/* export.c - DOT, JSON and text views of a step graph. */
#include "graph/export.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "graph/disk_tier.h"

const char *sg_op_kind_color(sg_op_kind k)
{
    const sg_op_kind_info *info = sg_op_kind_info_of(k);
    return info ? info->color : "#ffffff";
}

/* The head is the unit with the largest index seen in the graph. */
static void human_bytes(double b, char *buf, size_t n)
{
    const char *units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    int u = 0;
    while (b >= 1024.0 && u < 4) {
        b /= 1024.0;
        u++;
    }
    snprintf(buf, n, u ? "%.1f %s" : "%.0f %s", b, units[u]);
}

static void human_flops(double f, char *buf, size_t n)
{
    if (f >= 1e12)
        snprintf(buf, n, "%.2f TFLOP", f / 1e12);
    else if (f >= 1e9)
        snprintf(buf, n, "%.2f GFLOP", f / 1e9);
    else if (f >= 1e6)
        snprintf(buf, n, "%.2f MFLOP", f / 1e6);
    else
        snprintf(buf, n, "%.0f FLOP", f);
}

/* Shape by the phase of a node's kind: forward points right, backward left,
 * transfers are tags, the optimizer and the step's checks rounded boxes. */
static const char *phase_shape(sg_op_kind k)
{
    const sg_op_kind_info *info = sg_op_kind_info_of(k);
    switch (info ? info->phase : SG_PHASE_OPTIMIZER) {
    case SG_PHASE_FORWARD: return "rarrow";
    case SG_PHASE_BACKWARD: return "larrow";
    case SG_PHASE_TRANSFER: return "cds";
    default: return "box";
    }
}

static sg_where where_of(const sg_graph *g, const sg_dot_style *st, int n)
{
    return st && st->where ? (sg_where)st->where[n] : sg_where_planned(&g->nodes[n]);
}

#define SG_HEAT_COLOR "#e34a33"

static void dot_node(const sg_graph *g, const sg_node *nd, const sg_dot_style *st, FILE *out,
                     const char *indent)
{
    char fl[32], by[32], fill[48];
    human_flops(nd->flops, fl, sizeof fl);
    human_bytes(
        (double)(nd->device == SG_DEV_LINK ? nd->link_bytes : nd->bytes_read + nd->bytes_written),
        by, sizeof by);
    const char *place = sg_where_color(where_of(g, st, nd->id));
    double h = st && st->heat ? st->heat[nd->id] : -2;
    /* measured: the red share of the width from the left is the time */
    if (h >= 0.995)
        snprintf(fill, sizeof fill, "%s", SG_HEAT_COLOR);
    else if (h >= 0.005)
        snprintf(fill, sizeof fill, SG_HEAT_COLOR ";%.3f:%s", h, place);
    else
        snprintf(fill, sizeof fill, "%s", place);
    const char *shape = phase_shape(nd->kind);
    int crit = st && st->critical && st->critical[nd->id];
    fprintf(out, "%sn%d [id=\"n%d\", tooltip=\"%s (%s, %s)\", label=\"%s\\n[%s] ", indent, nd->id,
            nd->id, nd->name, sg_op_kind_name(nd->kind), sg_where_label(where_of(g, st, nd->id)),
            nd->name, sg_op_kind_name(nd->kind));
    if (nd->device == SG_DEV_LINK)
        fprintf(out, "%s", by);
    else
        fprintf(out, "%s | %s", fl, by);
    fprintf(out, "\", shape=%s, style=\"filled%s%s\", fillcolor=\"%s\"%s%s];\n", shape,
            !strcmp(shape, "box") ? ",rounded" : "", h > -2 && h < 0 ? ",dashed" : "", fill,
            h >= 0.005 && h < 0.995 ? ", gradientangle=0" : "",
            crit ? ", color=\"#d00000\", penwidth=3" : "");
}

static int cmp_edge(const void *a, const void *b)
{
    const sg_edge *x = a, *y = b;
    return x->from != y->from ? (x->from > y->from) - (x->from < y->from)
                              : (x->to > y->to) - (x->to < y->to);
}

/* Whether the sorted, oriented edges es hold a -> b, either way round. */
static int has_edge(const sg_edge *es, int ne, int a, int b)
{
    sg_edge keys[2] = {{a, b}, {a, -b - 1}};
    for (int k = 0; k < 2; k++)
        if (bsearch(&keys[k], es, (size_t)ne, sizeof *es, cmp_edge))
            return 1;
    return 0;
}

/* An endpoint in the drawing (graph/phase_layout.h): node n, or fold group
 * e - nnodes. */
static int drawn_as(const sg_graph *g, const sg_fold *fold, int n)
{
    return fold && fold->group_of[n] >= 0 ? g->nnodes + fold->group_of[n] : n;
}

static void dot_endpoint(const sg_graph *g, FILE *out, int e)
{
    if (e < g->nnodes)
        fprintf(out, "n%d", e);
    else
        fprintf(out, "f%d", e - g->nnodes);
}

int sg_export_dot(const sg_graph *g, FILE *out)
{
    return sg_export_dot_folded(g, NULL, out);
}

int sg_export_dot_folded(const sg_graph *g, const sg_fold *fold, FILE *out)
{
    sg_dot_style st = {.fold = fold};
    return sg_export_dot_styled(g, &st, out);
}

/* A folded group: a folder, filled with its members' place when they share
 * one, grey when they do not. */
static void dot_group(const sg_graph *g, const sg_dot_style *st, int gi, FILE *out,
                      const char *indent)
{
    const sg_fold *fold = st->fold;
    int crit = 0, place = -1;
    for (int n = 0; n < g->nnodes; n++) {
        if (fold->group_of[n] != gi)
            continue;
        crit |= st->critical && st->critical[n];
        int w = (int)where_of(g, st, n);
        place = place == -1 || place == w ? w : -2;
    }
    fprintf(out,
            "%sf%d [id=\"f%d\", shape=folder, style=filled, fillcolor=\"%s\", label=\"%s\", "
            "tooltip=\"%s\"%s];\n",
            indent, gi, gi, place >= 0 ? sg_where_color((sg_where)place) : "#e8e8e8",
            fold->groups[gi].label, fold->groups[gi].label,
            crit ? ", color=\"#d00000\", penwidth=3" : "");
}

static void dot_endpoint_decl(const sg_graph *g, const sg_dot_style *st, int e, FILE *out,
                              const char *indent)
{
    if (e < g->nnodes)
        dot_node(g, &g->nodes[e], st, out, indent);
    else
        dot_group(g, st, e - g->nnodes, out, indent);
}

/* The legend: the places present (fill), then the shapes, in a cluster;
 * returns how many items, their node names in *names (malloc'ed), or -1. */
static int dot_legend(const sg_graph *g, const sg_dot_style *st, FILE *out, char (**names)[16])
{
    int place[SG_WHERE_COUNT] = {0}, phase[SG_PHASE_COUNT] = {0};
    for (int n = 0; n < g->nnodes; n++) {
        place[where_of(g, st, n)] = 1;
        const sg_op_kind_info *info = sg_op_kind_info_of(g->nodes[n].kind);
        phase[info ? info->phase : SG_PHASE_OPTIMIZER] = 1;
    }
    int heat = st && st->heat, crit = 0;
    for (int n = 0; st && st->critical && n < g->nnodes && !crit; n++)
        crit = st->critical[n];
    char(*nm)[16] = calloc(SG_WHERE_COUNT + 12, sizeof *nm);
    if (!(*names = nm))
        return -1;
    int n = 0;
    /* a title, then the items */
    snprintf(nm[n++], sizeof nm[0], "legend");
    fprintf(out,
            "  legend [shape=plaintext, fontsize=13, label=\"legend: fill = where a task "
            "runs%s,\\nshape = its phase, [kind] in its label\"];\n",
            st && st->heat ? " (from the trace)" : "");
    for (int w = 0; w < SG_WHERE_COUNT; w++)
        if (place[w]) {
            snprintf(nm[n++], sizeof nm[0], "legend_%s", sg_where_name((sg_where)w));
            fprintf(out,
                    "  legend_%s [label=\"%s\", shape=box, style=\"filled,rounded\", "
                    "fillcolor=\"%s\"];\n",
                    sg_where_name((sg_where)w), sg_where_label((sg_where)w),
                    sg_where_color((sg_where)w));
        }
    static const struct {
        sg_phase phase;
        const char *name, *shape, *label;
    } shapes[] = {
        {SG_PHASE_FORWARD, "legend_fwd", "rarrow", "forward"},
        {SG_PHASE_BACKWARD, "legend_bwd", "larrow", "backward (recompute, gradient sums)"},
        {SG_PHASE_OPTIMIZER, "legend_opt", "box", "optimizer and step checks"},
        {SG_PHASE_TRANSFER, "legend_xfer", "cds", "copy or collective"},
    };
    for (size_t k = 0; k < sizeof shapes / sizeof shapes[0]; k++)
        if (phase[shapes[k].phase]) {
            snprintf(nm[n++], sizeof nm[0], "%s", shapes[k].name);
            fprintf(out, "  %s [label=\"%s\", shape=%s, style=\"filled%s\", fillcolor=white];\n",
                    shapes[k].name, shapes[k].label, shapes[k].shape,
                    !strcmp(shapes[k].shape, "box") ? ",rounded" : "");
        }
    if (st && st->fold && st->fold->ngroups) {
        snprintf(nm[n++], sizeof nm[0], "legend_fold");
        fprintf(out, "  legend_fold [label=\"repeated units folded (grey: mixed places)\", "
                     "shape=folder, style=filled, fillcolor=\"#e8e8e8\"];\n");
    }
    if (heat) {
        snprintf(nm[n++], sizeof nm[0], "legend_heat");
        snprintf(nm[n++], sizeof nm[0], "legend_unrun");
        fprintf(out, "  legend_heat [label=\"red share: measured time (longest = all red)\", "
                     "shape=box, style=filled, fillcolor=\"" SG_HEAT_COLOR ";0.4:white\", "
                     "gradientangle=0];\n"
                     "  legend_unrun [label=\"dashed: not in the trace\", shape=box, "
                     "style=\"filled,dashed\", fillcolor=white];\n");
    }
    if (crit) {
        snprintf(nm[n++], sizeof nm[0], "legend_crit");
        fprintf(out,
                "  legend_crit [label=\"red outline: critical path\", shape=box, "
                "style=\"filled,rounded\", fillcolor=white, color=\"#d00000\", penwidth=3];\n");
    }
    return n;
}

/* Past this many cells (columns x rows) the grid's empty cells are not
 * filled with invisible points. */
#define SG_DOT_GRID_FILL_MAX 4000

/* A cell of the picture's grid: a drawn endpoint (id >= 0), a header or a
 * legend item (id -1). */
typedef struct cell {
    char name[24];
    int id, col, row;
} cell;

static int cmp_cell_col(const void *a, const void *b)
{
    const cell *x = a, *y = b;
    return x->col != y->col ? (x->col > y->col) - (x->col < y->col)
                            : (x->row > y->row) - (x->row < y->row);
}

static int cmp_cell_row(const void *a, const void *b)
{
    const cell *x = a, *y = b;
    return x->row != y->row ? (x->row > y->row) - (x->row < y->row)
                            : (x->col > y->col) - (x->col < y->col);
}

/* An invisible edge a -> b keeping the grid, unless a real edge joins them
 * (Graphviz 2.43 aborts on an invisible edge doubling a real one). */
static void grid_edge(FILE *out, const sg_edge *es, int ne, const cell *a, const cell *b,
                      const char *extra)
{
    if (a->id >= 0 && b->id >= 0 && has_edge(es, ne, a->id, b->id))
        return;
    fprintf(out, "  %s -> %s [style=invis%s];\n", a->name, b->name, extra);
}

static const char *band_label[SG_BAND_COUNT] = {
    [SG_BAND_GATHER_FWD] = "gathers for the forward",
    [SG_BAND_FORWARD] = "forward, left to right",
    [SG_BAND_GATHER_BWD] = "gathers for the backward",
    [SG_BAND_BACKWARD] = "backward, right to left",
    [SG_BAND_REDUCE] = "gradient reductions",
    [SG_BAND_OPT_GPU] = "GPU side: optimizer, step checks",
    [SG_BAND_LINK] = "link lanes: GPU <-> host copies",
    [SG_BAND_OPT_CPU] = "host side: CPU optimizer",
};

/* Every endpoint declared, in grid order, with its cell. Graphviz breaks the
 * order inside a rank that clusters span, so the grid has no clusters: a
 * header names each unit's column, a label each band's first row. */
static void dot_endpoint_cells(const sg_graph *g, const sg_dot_style *st, const sg_phase_layout *l,
                               cell *cells, int *nc, FILE *out)
{
    for (int k = 0; k < l->nsorted; k++) {
        int e = l->sorted[k];
        dot_endpoint_decl(g, st, e, out, "  ");
        cell *c = &cells[(*nc)++];
        snprintf(c->name, sizeof c->name, "%s%d", e < g->nnodes ? "n" : "f",
                 e < g->nnodes ? e : e - g->nnodes);
        c->id = e;
        c->col = l->col[e];
        c->row = l->row[e];
        fprintf(out, "  %s [group=\"r%d\"];\n", c->name, c->row);
    }
}

/* A header cell over each column that holds a unit (or folded units). */
static void dot_column_headers(const sg_graph *g, const sg_fold *fold, const sg_phase_layout *l,
                               cell *cells, int *nc, FILE *out)
{
    for (int col = 0; col < l->ncols; col++) {
        int unit = -1, unit_group = -1;
        for (int k = 0; k < l->nsorted && unit < 0 && unit_group < 0; k++) {
            int e = l->sorted[k];
            if (l->col[e] != col)
                continue;
            if (e < g->nnodes && g->nodes[e].layer >= 0)
                unit = g->nodes[e].layer;
            else if (e >= g->nnodes && !fold->groups[e - g->nnodes].is_subgroup)
                unit_group = e - g->nnodes;
        }
        if (unit < 0 && unit_group < 0)
            continue;
        char lab[32];
        if (unit >= 0)
            sg_unit_label(g, unit, lab, sizeof lab);
        else
            snprintf(lab, sizeof lab, "(folded units)");
        cell *c = &cells[(*nc)++];
        snprintf(c->name, sizeof c->name, "col%d", col);
        c->id = -1;
        c->col = col;
        c->row = -1;
        fprintf(out, "  col%d [label=\"%s\", shape=plaintext, fontsize=14];\n", col, lab);
    }
}

/* A label cell left of each band's first row (bands of folded units alone
 * get none). */
static void dot_band_labels(const sg_graph *g, const sg_phase_layout *l, cell *cells, int *nc,
                            FILE *out)
{
    int bands[SG_BAND_COUNT], first_row[SG_BAND_COUNT];
    for (int b = 0; b < SG_BAND_COUNT; b++)
        bands[b] = 0, first_row[b] = l->nrows;
    for (int k = 0; k < l->nsorted; k++) {
        int e = l->sorted[k];
        bands[l->band[e]] |= e < g->nnodes; /* not for folded units alone */
        first_row[l->band[e]] =
            l->row[e] < first_row[l->band[e]] ? l->row[e] : first_row[l->band[e]];
    }
    for (int b = 0; b < SG_BAND_COUNT; b++)
        if (bands[b]) {
            cell *c = &cells[(*nc)++];
            snprintf(c->name, sizeof c->name, "band%d", b);
            c->id = -1;
            c->col = -1;
            c->row = first_row[b];
            fprintf(out,
                    "  band%d [label=\"%s\", shape=plaintext, fontsize=13, "
                    "fontcolor=\"#555555\"];\n",
                    b, band_label[b]);
        }
}

/* An invisible point in every empty cell (col, row) of the grid (col -1:
 * the band labels, row -1: the headers). */
static int dot_fill_grid(const sg_phase_layout *l, size_t grid, cell *cells, int *nc, FILE *out)
{
    unsigned char *used = calloc(grid, 1);
    if (!used)
        return SG_ENOMEM;
    for (int k = 0; k < *nc; k++)
        used[(size_t)(cells[k].col + 1) * (size_t)(l->nrows + 1) + (size_t)(cells[k].row + 1)] = 1;
    for (int col = -1; col < l->ncols; col++)
        for (int row = -1; row < l->nrows; row++) {
            if (used[(size_t)(col + 1) * (size_t)(l->nrows + 1) + (size_t)(row + 1)] ||
                (col < 0 && row < 0))
                continue;
            cell *c = &cells[(*nc)++];
            snprintf(c->name, sizeof c->name, "p%d_%d", col + 1, row + 1);
            c->id = -1;
            c->col = col;
            c->row = row;
            fprintf(out, "  %s [shape=point, style=invis, width=0.01, label=\"\"];\n", c->name);
        }
    free(used);
    return SG_OK;
}

/* Edges between what is drawn, once each, none inside a folded group, into
 * es (sorted); returns their count. With rankdir=LR a column is a rank, and
 * Graphviz puts the tail of an edge inside a rank above its head: an edge is
 * written so as to agree with the grid (left to right, top to bottom),
 * reversed and drawn with its arrow back where the step goes against it
 * (the backward coming back, a task above its predecessor in a column). */
static int dot_edges(const sg_graph *g, const sg_fold *fold, const sg_phase_layout *l, sg_edge *es,
                     FILE *out)
{
    int ne = 0;
    for (int e = 0; e < g->nedges; e++) {
        int a = drawn_as(g, fold, g->edges[e].from), b = drawn_as(g, fold, g->edges[e].to);
        if (a == b)
            continue;
        int keep = l->col[a] != l->col[b] ? l->col[a] < l->col[b] : sg_phase_layout_before(l, a, b);
        /* as written; `to` negative: drawn back */
        es[ne++] = keep ? (sg_edge){a, b} : (sg_edge){b, -a - 1};
    }
    qsort(es, (size_t)ne, sizeof *es, cmp_edge);
    int nu = 0;
    for (int e = 0; e < ne; e++)
        if (!nu || es[e].from != es[nu - 1].from || es[e].to != es[nu - 1].to)
            es[nu++] = es[e];
    ne = nu;
    for (int e = 0; e < ne; e++) {
        int back = es[e].to < 0;
        fprintf(out, "  ");
        dot_endpoint(g, out, es[e].from);
        fprintf(out, " -> ");
        dot_endpoint(g, out, back ? -es[e].to - 1 : es[e].to);
        fprintf(out, back ? " [dir=back];\n" : ";\n");
    }
    return ne;
}

/* The grid: a rank per column, kept top to bottom by invisible edges; each
 * row chained left to right (heavy, so that it runs straight). */
static void dot_grid(cell *cells, int nc, const sg_edge *es, int ne, FILE *out)
{
    qsort(cells, (size_t)nc, sizeof *cells, cmp_cell_col);
    for (int k = 0; k < nc;) {
        int k0 = k;
        fprintf(out, "  { rank=same;");
        for (; k < nc && cells[k].col == cells[k0].col; k++)
            fprintf(out, " %s;", cells[k].name);
        fprintf(out, " }\n");
        for (int j = k0 + 1; j < k; j++)
            grid_edge(out, es, ne, &cells[j - 1], &cells[j], "");
        /* the top cells of neighbouring columns, when no row joins them */
        if (k < nc && cells[k].row != cells[k0].row)
            grid_edge(out, es, ne, &cells[k0], &cells[k], "");
    }
    qsort(cells, (size_t)nc, sizeof *cells, cmp_cell_row);
    for (int k = 1; k < nc; k++)
        if (cells[k].row == cells[k - 1].row) /* the headers' row heaviest: long edges pass over */
            grid_edge(out, es, ne, &cells[k - 1], &cells[k],
                      cells[k].row < 0 ? ", weight=50" : ", weight=30");
}

int sg_export_dot_styled(const sg_graph *g, const sg_dot_style *st, FILE *out)
{
    const sg_fold *fold = st ? st->fold : NULL;
    sg_phase_layout l;
    if (sg_phase_layout_compute(g, fold, st ? st->where : NULL, &l))
        return SG_ENOMEM;
    /* an invisible point in every empty cell keeps the rows straight, up to
     * a size past which Graphviz would take minutes anyway */
    size_t grid = (size_t)(l.ncols + 1) * (size_t)(l.nrows + 1);
    int fill_grid = grid <= SG_DOT_GRID_FILL_MAX;
    size_t ncell_max =
        (size_t)l.nsorted + (size_t)l.ncols + SG_BAND_COUNT + 32 + (fill_grid ? grid : 0);
    sg_edge *es = malloc((size_t)(g->nedges > 0 ? g->nedges : 1) * sizeof *es);
    cell *cells = calloc(ncell_max, sizeof *cells);
    char(*legend)[16] = NULL;
    if (!es || !cells) {
        free(es);
        free(cells);
        sg_phase_layout_free(&l);
        return SG_ENOMEM;
    }
    fprintf(out, "digraph step {\n"
                 "  graph [rankdir=LR, fontname=\"Helvetica\", newrank=true, nodesep=0.12, "
                 "ranksep=0.45];\n"
                 "  node [fontname=\"Helvetica\", fontsize=10];\n"
                 "  edge [color=\"#555555\", arrowsize=0.6];\n");
    int nc = 0;
    dot_endpoint_cells(g, st, &l, cells, &nc, out);
    dot_column_headers(g, fold, &l, cells, &nc, out);
    dot_band_labels(g, &l, cells, &nc, out);
    if (fill_grid && dot_fill_grid(&l, grid, cells, &nc, out)) {
        free(es);
        free(cells);
        sg_phase_layout_free(&l);
        return SG_ENOMEM;
    }
    /* the legend: rows under the drawing, item i in column i % ncols */
    int nlegend = dot_legend(g, st, out, &legend);
    for (int i = 0; i < nlegend; i++) {
        cell *c = &cells[nc++];
        snprintf(c->name, sizeof c->name, "%s", legend[i]);
        c->id = -1;
        c->col = l.ncols > 0 ? i % l.ncols : 0;
        c->row = l.nrows + (l.ncols > 0 ? i / l.ncols : i);
    }
    int ne = dot_edges(g, fold, &l, es, out);
    dot_grid(cells, nc, es, ne, out);
    fprintf(out, "}\n");
    free(legend);
    free(cells);
    free(es);
    sg_phase_layout_free(&l);
    return ferror(out) ? SG_EIO : SG_OK;
}

void sg_json_write_string(FILE *out, const char *s)
{
    fputc('"', out);
    for (; *s; s++) {
        unsigned char ch = (unsigned char)*s;
        if (ch == '"' || ch == '\\')
            fprintf(out, "\\%c", ch);
        else if (ch < 0x20)
            fprintf(out, "\\u%04x", ch);
        else
            fputc(ch, out);
    }
    fputc('"', out);
}

static const char *mode_name(sg_access_mode m)
{
    return m == SG_R ? "R" : m == SG_W ? "W" : "RW";
}

int sg_summary_json(const sg_summary *s, FILE *out)
{
    fprintf(out, "{\"nodes\":%d,\"edges\":%d,\"buffers\":%d,\"count\":{", s->nnodes, s->nedges,
            s->nbuffers);
    int first = 1;
    for (int k = 0; k < SG_OP_KIND_COUNT; k++) {
        if (!s->count[k])
            continue;
        fprintf(out, "%s\"%s\":%d", first ? "" : ",", sg_op_kind_name((sg_op_kind)k), s->count[k]);
        first = 0;
    }
    fprintf(out, "},\"flops\":%.6e,\"flops_by_device\":{\"gpu\":%.6e,\"cpu\":%.6e},",
            s->flops_total, s->flops_by_device[SG_DEV_GPU], s->flops_by_device[SG_DEV_CPU]);
    fprintf(out, "\"link_bytes\":{\"h2d\":%" PRId64 ",\"d2h\":%" PRId64 ",\"net\":%" PRId64 "},",
            s->link_bytes[SG_LINK_H2D], s->link_bytes[SG_LINK_D2H], s->link_bytes[SG_LINK_NET]);
    fprintf(out, "\"peak_bytes\":{\"gpu\":%" PRId64 ",\"host\":%" PRId64 "},",
            s->peak_bytes[SG_MEM_GPU], s->peak_bytes[SG_MEM_HOST]);
    fprintf(out, "\"persistent_bytes\":{\"gpu\":%" PRId64 ",\"host\":%" PRId64 "},",
            s->persistent_bytes[SG_MEM_GPU], s->persistent_bytes[SG_MEM_HOST]);
    sg_disk_tier_json(s, out);
    fprintf(out, "\"ideal_machine\":");
    sg_json_write_string(out, s->cost_model_name ? s->cost_model_name : "");
    fprintf(out,
            ",\"critical_path_ms\":%.6f,\"critical_path_nodes\":%d,"
            "\"work_ms\":{\"gpu\":%.6f,\"cpu\":%.6f,\"link\":%.6f}}",
            s->critical_path_s * 1e3, s->critical_path_nodes, s->work_s[SG_DEV_GPU] * 1e3,
            s->work_s[SG_DEV_CPU] * 1e3, s->work_s[SG_DEV_LINK] * 1e3);
    return ferror(out) ? SG_EIO : SG_OK;
}

int sg_export_json(const sg_graph *g, const sg_summary *s, FILE *out)
{
    fprintf(out, "{\"nodes\":[");
    for (int n = 0; n < g->nnodes; n++) {
        const sg_node *nd = &g->nodes[n];
        fprintf(out, "%s\n{\"id\":%d,\"name\":", n ? "," : "", nd->id);
        sg_json_write_string(out, nd->name);
        fprintf(out, ",\"kind\":\"%s\",\"layer\":", sg_op_kind_name(nd->kind));
        if (nd->layer >= 0)
            fprintf(out, "%d", nd->layer);
        else
            fprintf(out, "null");
        fprintf(out, ",\"micro_step\":");
        if (nd->micro_step >= 0)
            fprintf(out, "%d", nd->micro_step);
        else
            fprintf(out, "null");
        fprintf(out, ",\"subgroup\":");
        if (nd->subgroup >= 0)
            fprintf(out, "%d", nd->subgroup);
        else
            fprintf(out, "null");
        fprintf(out, ",\"device\":\"%s\",\"pinned\":%s,\"tile\":", sg_device_class_name(nd->device),
                nd->pinned ? "true" : "false");
        if (nd->tile >= 0)
            fprintf(out, "%d", nd->tile);
        else
            fprintf(out, "null");
        fprintf(out, ",\"link\":");
        if (nd->link != SG_LINK_NONE)
            fprintf(out, "\"%s\"", sg_link_dir_name(nd->link));
        else
            fprintf(out, "null");
        fprintf(out,
                ",\"flops\":%.6e,\"bytes\":%" PRId64 ",\"bytes_read\":%" PRId64
                ",\"bytes_written\":%" PRId64 ",\"link_bytes\":%" PRId64 ",\"buffers\":[",
                nd->flops, nd->bytes_read + nd->bytes_written, nd->bytes_read, nd->bytes_written,
                nd->link_bytes);
        for (int i = 0; i < nd->naccess; i++) {
            const sg_buffer *b = &g->buffers[nd->access[i].buffer];
            fprintf(out, "%s{\"name\":", i ? "," : "");
            sg_json_write_string(out, b->name);
            fprintf(out,
                    ",\"mode\":\"%s\",\"bytes\":%" PRId64 ",\"space\":\"%s\",\"dtype\":\"%s\"}",
                    mode_name(nd->access[i].mode), b->bytes, sg_mem_space_name(b->space),
                    sg_dtype_name(b->dtype));
        }
        fprintf(out, "]}");
    }
    fprintf(out, "\n],\"edges\":[");
    for (int e = 0; e < g->nedges; e++)
        fprintf(out, "%s[%d,%d]", e ? "," : "", g->edges[e].from, g->edges[e].to);
    fprintf(out, "],\"summary\":");
    sg_summary_json(s, out);
    fprintf(out, "}\n");
    return ferror(out) ? SG_EIO : SG_OK;
}

int sg_summary_print(const sg_summary *s, FILE *out)
{
    char a[32], b[32], c[32];
    fprintf(out, "nodes %d, edges %d, buffers %d\n", s->nnodes, s->nedges, s->nbuffers);
    fprintf(out, "nodes per kind:\n");
    for (int k = 0; k < SG_OP_KIND_COUNT; k++)
        if (s->count[k])
            fprintf(out, "  %-16s %6d\n", sg_op_kind_name((sg_op_kind)k), s->count[k]);
    human_flops(s->flops_total, a, sizeof a);
    human_flops(s->flops_by_device[SG_DEV_GPU], b, sizeof b);
    human_flops(s->flops_by_device[SG_DEV_CPU], c, sizeof c);
    fprintf(out, "FLOPs: %s (gpu-class %s, cpu-class %s)\n", a, b, c);
    human_bytes((double)s->link_bytes[SG_LINK_H2D], a, sizeof a);
    human_bytes((double)s->link_bytes[SG_LINK_D2H], b, sizeof b);
    human_bytes((double)s->link_bytes[SG_LINK_NET], c, sizeof c);
    fprintf(out,
            "bytes per link direction: host-to-device %s, device-to-host %s, "
            "collectives (per rank) %s\n",
            a, b, c);
    human_bytes((double)s->peak_bytes[SG_MEM_GPU], a, sizeof a);
    human_bytes((double)s->persistent_bytes[SG_MEM_GPU], b, sizeof b);
    fprintf(out, "peak memory, gpu:  %s (persistent %s)\n", a, b);
    human_bytes((double)s->peak_bytes[SG_MEM_HOST], a, sizeof a);
    human_bytes((double)s->persistent_bytes[SG_MEM_HOST], b, sizeof b);
    fprintf(out, "peak memory, host: %s (persistent %s)\n", a, b);
    if (s->capacity_bytes[SG_MEM_GPU] > 0) {
        double need = (double)s->peak_bytes[SG_MEM_GPU], cap = s->capacity_bytes[SG_MEM_GPU];
        if (s->unified_memory)
            need += (double)s->peak_bytes[SG_MEM_HOST]; /* one memory for CPU and GPU */
        human_bytes(need, a, sizeof a);
        human_bytes(cap, b, sizeof b);
        fprintf(out, "%s memory: %s needed of %s: %s\n", s->unified_memory ? "unified" : "gpu", a,
                b, need <= cap ? "fits" : "DOES NOT FIT");
        if (!s->unified_memory && s->capacity_bytes[SG_MEM_HOST] > 0) {
            need = (double)s->peak_bytes[SG_MEM_HOST];
            human_bytes(need, a, sizeof a);
            human_bytes(s->capacity_bytes[SG_MEM_HOST], b, sizeof b);
            fprintf(out, "host memory: %s needed of %s: %s\n", a, b,
                    need <= s->capacity_bytes[SG_MEM_HOST] ? "fits" : "DOES NOT FIT");
        }
    }
    if (sg_disk_tier_print(s, out))
        return SG_EIO;
    fprintf(out, "critical path on %s (unlimited workers): %.3f ms over %d nodes\n",
            s->cost_model_name ? s->cost_model_name : "an ideal machine", s->critical_path_s * 1e3,
            s->critical_path_nodes);
    fprintf(out, "work on that machine: gpu %.3f ms, cpu %.3f ms, links %.3f ms\n",
            s->work_s[SG_DEV_GPU] * 1e3, s->work_s[SG_DEV_CPU] * 1e3, s->work_s[SG_DEV_LINK] * 1e3);
    return ferror(out) ? SG_EIO : SG_OK;
}
