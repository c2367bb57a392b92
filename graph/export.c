/* export.c - DOT, JSON and text views of a step graph. */
#include "graph/export.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

const char *sg_op_kind_color(sg_op_kind k)
{
    const sg_op_kind_info *info = sg_op_kind_info_of(k);
    return info ? info->color : "#ffffff";
}

/* The head is the unit with the largest index seen in the graph. */
static int max_layer(const sg_graph *g)
{
    int m = -1;
    for (int n = 0; n < g->nnodes; n++)
        if (g->nodes[n].layer > m)
            m = g->nodes[n].layer;
    return m;
}

void sg_unit_label(const sg_graph *g, int unit, char *buf, size_t size)
{
    if (unit < 0)
        snprintf(buf, size, "none");
    else if (unit == 0)
        snprintf(buf, size, "embed");
    else if (unit == max_layer(g))
        snprintf(buf, size, "head");
    else
        snprintf(buf, size, "layer%d", unit - 1);
}

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

static void dot_node(const sg_graph *g, const sg_node *nd, const sg_dot_style *st, FILE *out,
                     const char *indent)
{
    char fl[32], by[32];
    human_flops(nd->flops, fl, sizeof fl);
    human_bytes((double)(nd->device == SG_DEV_LINK ? nd->link_bytes
                                                   : nd->bytes_read + nd->bytes_written),
                by, sizeof by);
    (void)g;
    char fill[16];
    double h = st && st->heat ? st->heat[nd->id] : -2;
    if (h >= 0) /* measured: white (short) to red (long) */
        snprintf(fill, sizeof fill, "#ff%02x%02x", (int)(255 * (1 - h)), (int)(255 * (1 - h)));
    else
        snprintf(fill, sizeof fill, "%s", h > -2 ? "#dddddd" : sg_op_kind_color(nd->kind));
    int crit = st && st->critical && st->critical[nd->id];
    fprintf(out, "%sn%d [id=\"n%d\", tooltip=\"%s\", label=\"%s\\n%s | %s\", fillcolor=\"%s\"%s%s];\n",
            indent, nd->id, nd->id, nd->name, nd->name,
            nd->device == SG_DEV_LINK ? sg_link_dir_name(nd->link) : fl, by, fill,
            nd->device == SG_DEV_LINK ? ", shape=cds" : nd->device == SG_DEV_CPU ? ", shape=box3d" : "",
            crit ? ", color=\"#d00000\", penwidth=3" : "");
}

static int cmp_edge(const void *a, const void *b)
{
    const sg_edge *x = a, *y = b;
    return x->from != y->from ? (x->from > y->from) - (x->from < y->from)
                              : (x->to > y->to) - (x->to < y->to);
}

/* An endpoint in the drawing: node n, or group G as -(G + 1). */
static int drawn_as(const sg_fold *fold, int n)
{
    return fold && fold->group_of[n] >= 0 ? -(fold->group_of[n] + 1) : n;
}

static void dot_endpoint(FILE *out, int e)
{
    if (e >= 0)
        fprintf(out, "n%d", e);
    else
        fprintf(out, "f%d", -e - 1);
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

int sg_export_dot_styled(const sg_graph *g, const sg_dot_style *st, FILE *out)
{
    const sg_fold *fold = st ? st->fold : NULL;
    int top = max_layer(g);
    fprintf(out, "digraph step {\n"
                 "  graph [rankdir=%s, fontname=\"Helvetica\", compound=true, newrank=true];\n"
                 "  node [shape=box, style=\"filled,rounded\", fontname=\"Helvetica\", fontsize=10];\n"
                 "  edge [color=\"#555555\", arrowsize=0.6];\n",
            fold ? "LR" : "TB");
    /* one cluster per unit, one for the optimizer and step-level nodes */
    for (int u = -1; u <= top; u++) {
        char lab[32];
        int any = 0;
        for (int n = 0; n < g->nnodes && !any; n++)
            any = g->nodes[n].layer == u && drawn_as(fold, n) == n;
        if (!any)
            continue;
        if (u >= 0)
            sg_unit_label(g, u, lab, sizeof lab);
        else
            snprintf(lab, sizeof lab, "optimizer and step");
        fprintf(out, "  subgraph cluster_%d {\n    label=\"%s\"; style=\"rounded\"; color=\"#999999\";\n",
                u + 1, lab);
        for (int n = 0; n < g->nnodes; n++)
            if (g->nodes[n].layer == u && drawn_as(fold, n) == n)
                dot_node(g, &g->nodes[n], st, out, "    ");
        fprintf(out, "  }\n");
    }
    for (int gi = 0; fold && gi < fold->ngroups; gi++) {
        int crit = 0;
        for (int n = 0; st->critical && n < g->nnodes && !crit; n++)
            crit = fold->group_of[n] == gi && st->critical[n];
        fprintf(out, "  f%d [id=\"f%d\", shape=folder, fillcolor=\"#e8e8e8\", label=\"%s\", "
                     "tooltip=\"%s\"%s];\n",
                gi, gi, fold->groups[gi].label, fold->groups[gi].label,
                crit ? ", color=\"#d00000\", penwidth=3" : "");
    }
    /* edges between what is drawn, once each, none inside a folded group */
    sg_edge *es = malloc((size_t)(g->nedges > 0 ? g->nedges : 1) * sizeof *es);
    if (!es)
        return SG_ENOMEM;
    int ne = 0;
    for (int e = 0; e < g->nedges; e++) {
        sg_edge d = {drawn_as(fold, g->edges[e].from), drawn_as(fold, g->edges[e].to)};
        if (!(d.from < 0 && d.from == d.to))
            es[ne++] = d;
    }
    qsort(es, (size_t)ne, sizeof *es, cmp_edge);
    for (int e = 0; e < ne; e++) {
        if (e > 0 && es[e].from == es[e - 1].from && es[e].to == es[e - 1].to)
            continue;
        fprintf(out, "  ");
        dot_endpoint(out, es[e].from);
        fprintf(out, " -> ");
        dot_endpoint(out, es[e].to);
        fprintf(out, ";\n");
    }
    free(es);
    /* legend: the kinds present, the shapes */
    fprintf(out, "  subgraph cluster_legend {\n    label=\"legend\"; style=\"rounded\";\n");
    int present[SG_OP_KIND_COUNT] = {0};
    for (int n = 0; n < g->nnodes; n++)
        present[g->nodes[n].kind] = 1;
    for (int k = 0; k < SG_OP_KIND_COUNT; k++)
        if (present[k])
            fprintf(out, "    legend_%d [label=\"%s\", fillcolor=\"%s\"];\n", k,
                    sg_op_kind_name((sg_op_kind)k), sg_op_kind_color((sg_op_kind)k));
    fprintf(out, "    legend_gpu [label=\"rounded box: GPU-side task\", fillcolor=white];\n"
                 "    legend_cpu [label=\"3-D box: CPU task\", shape=box3d, fillcolor=white];\n"
                 "    legend_link [label=\"arrow: copy on a link\", shape=cds, fillcolor=white];\n");
    if (fold && fold->ngroups)
        fprintf(out, "    legend_fold [label=\"folder: repeated units folded\", shape=folder, "
                     "fillcolor=\"#e8e8e8\"];\n");
    if (fold) {
        /* left to right, the legend would stack in one tall rank: chain it */
        const char *prev = NULL;
        char names[SG_OP_KIND_COUNT + 4][24];
        int nn = 0;
        for (int k = 0; k < SG_OP_KIND_COUNT; k++)
            if (present[k])
                snprintf(names[nn++], sizeof names[0], "legend_%d", k);
        snprintf(names[nn++], sizeof names[0], "legend_gpu");
        snprintf(names[nn++], sizeof names[0], "legend_cpu");
        snprintf(names[nn++], sizeof names[0], "legend_link");
        if (fold->ngroups)
            snprintf(names[nn++], sizeof names[0], "legend_fold");
        for (int i = 0; i < nn; i++) {
            if (prev)
                fprintf(out, "    %s -> %s [style=invis];\n", prev, names[i]);
            prev = names[i];
        }
    }
    fprintf(out, "  }\n}\n");
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
    fprintf(out, "\"ideal_machine\":");
    sg_json_write_string(out, s->cost_model_name ? s->cost_model_name : "");
    fprintf(out, ",\"critical_path_ms\":%.6f,\"critical_path_nodes\":%d,"
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
        fprintf(out, ",\"tile\":");
        if (nd->tile >= 0)
            fprintf(out, "%d", nd->tile);
        else
            fprintf(out, "null");
        fprintf(out, ",\"device\":\"%s\",\"link\":", sg_device_class_name(nd->device));
        if (nd->link != SG_LINK_NONE)
            fprintf(out, "\"%s\"", sg_link_dir_name(nd->link));
        else
            fprintf(out, "null");
        fprintf(out, ",\"flops\":%.6e,\"bytes\":%" PRId64 ",\"bytes_read\":%" PRId64
                     ",\"bytes_written\":%" PRId64 ",\"link_bytes\":%" PRId64 ",\"buffers\":[",
                nd->flops, nd->bytes_read + nd->bytes_written, nd->bytes_read, nd->bytes_written,
                nd->link_bytes);
        for (int i = 0; i < nd->naccess; i++) {
            const sg_buffer *b = &g->buffers[nd->access[i].buffer];
            fprintf(out, "%s{\"name\":", i ? "," : "");
            sg_json_write_string(out, b->name);
            fprintf(out, ",\"mode\":\"%s\",\"bytes\":%" PRId64 ",\"space\":\"%s\",\"dtype\":\"%s\"}",
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
    fprintf(out, "bytes per link direction: host-to-device %s, device-to-host %s, "
                 "collectives (per rank) %s\n", a, b, c);
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
    fprintf(out, "critical path on %s (unlimited workers): %.3f ms over %d nodes\n",
            s->cost_model_name ? s->cost_model_name : "an ideal machine", s->critical_path_s * 1e3,
            s->critical_path_nodes);
    fprintf(out, "work on that machine: gpu %.3f ms, cpu %.3f ms, links %.3f ms\n",
            s->work_s[SG_DEV_GPU] * 1e3, s->work_s[SG_DEV_CPU] * 1e3,
            s->work_s[SG_DEV_LINK] * 1e3);
    return ferror(out) ? SG_EIO : SG_OK;
}
