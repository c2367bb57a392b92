/* render_html.c - the interactive page of a step graph (render_html.h). */
#define _POSIX_C_SOURCE 200809L

#include "runtime/cli/render_html.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/atomic_file.h"
#include "graph/export.h"
#include "graph/op_kinds.h"
#include "runtime/cli/cli.h"
#include "runtime/cli/graph_view.h"

extern const char sg_graph_page_js[]; /* graph_page_js.c, generated from graph_page.js */

static const char page_css[] =
    "body{font-family:sans-serif;margin:0;color:#222}"
    "header{padding:.5em 1em;border-bottom:1px solid #ccc}"
    "h1{font-size:1.2em;margin:.2em 0}.facts{margin:.2em 0;font-size:.9em}"
    ".tools{display:flex;gap:.6em;align-items:center;margin:.3em 0}"
    "#search{width:22em}main{display:flex;height:68vh}"
    "#graph{flex:1;min-width:0;border-right:1px solid #ccc;cursor:grab}"
    ".view{width:100%;height:100%}"
    "#details{width:26em;overflow:auto;padding:0 1em;font-size:.85em}"
    "#details th{text-align:left;padding-right:1em}"
    "#timeline{padding:0 1em;border-top:1px solid #ccc}"
    ".sg-crit polygon,.sg-crit path,.sg-crit ellipse{stroke:#d00000;stroke-width:3px}"
    ".sg-hit polygon,.sg-hit path,.sg-hit ellipse{stroke:#e000e0;stroke-width:5px}"
    ".sg-sel polygon,.sg-sel path,.sg-sel ellipse{stroke:#0060ff;stroke-width:6px}"
    "rect.bar{stroke:#333;stroke-width:.3px;cursor:pointer}rect.sg-crit{stroke:#d00000;stroke-"
    "width:2px}"
    "rect.sg-sel{stroke:#0060ff;stroke-width:3px}";

/* The SVG element of a Graphviz file (its XML prolog and doctype left out). */
int sg_html_inline_svg(FILE *out, const char *path, sg_error *err)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return sg_error_set(err, SG_EIO, "%s: cannot read the SVG Graphviz wrote", path);
    size_t cap = 1 << 16, n = 0, r;
    char *buf = malloc(cap + 1);
    while (buf && (r = fread(buf + n, 1, cap - n, f)) > 0) {
        n += r;
        if (n == cap) {
            char *nb = realloc(buf, 2 * cap + 1);
            if (!nb) {
                free(buf);
                buf = NULL;
                break;
            }
            buf = nb;
            cap *= 2;
        }
    }
    int bad = !buf || ferror(f);
    fclose(f);
    if (bad) {
        free(buf);
        return sg_error_set(err, SG_EIO, "%s: cannot read the SVG Graphviz wrote", path);
    }
    buf[n] = '\0';
    const char *svg = strstr(buf, "<svg");
    if (svg)
        fwrite(svg, 1, n - (size_t)(svg - buf), out);
    free(buf);
    return svg ? SG_OK : sg_error_set(err, SG_EIO, "%s: no <svg> element", path);
}

/* The page's data (read by graph_page.js): the graph JSON export, the
 * folding, the colours, the critical path and the trace's times. */
static int write_data(FILE *out, const sg_html_page *p)
{
    fputs("{\"graph\":", out);
    int rc = sg_export_json(p->g, p->s, out);
    if (rc)
        return rc;
    fputs(",\"group_of\":[", out);
    for (int i = 0; i < p->g->nnodes; i++)
        fprintf(out, "%s%d", i ? "," : "", p->fold ? p->fold->group_of[i] : -1);
    fputs("],\"groups\":[", out);
    for (int gi = 0; p->fold && gi < p->fold->ngroups; gi++) {
        fputs(gi ? "," : "", out);
        sg_json_write_string(out, p->fold->groups[gi].label);
    }
    /* where each task runs (ran, with a trace): the fill of the drawings */
    fputs("],\"where\":[", out);
    for (int i = 0; i < p->g->nnodes; i++)
        fprintf(
            out, "%s\"%s\"", i ? "," : "",
            sg_where_name(p->where ? (sg_where)p->where[i] : sg_where_planned(&p->g->nodes[i])));
    fputs("],\"places\":{", out);
    for (int w = 0; w < SG_WHERE_COUNT; w++) {
        fprintf(out, "%s\"%s\":{\"color\":\"%s\",\"label\":", w ? "," : "",
                sg_where_name((sg_where)w), sg_where_color((sg_where)w));
        sg_json_write_string(out, sg_where_label((sg_where)w));
        fputs("}", out);
    }
    fprintf(out, "},\"critical\":{\"kind\":\"%s\",\"ms\":%.6f,\"wait_ms\":%.6f,\"nodes\":[",
            p->critical_kind, p->critical_s * 1e3, p->wait_s * 1e3);
    for (int i = 0; i < p->ncritical; i++)
        fprintf(out, "%s%d", i ? "," : "", p->critical[i]);
    fputs("]}", out);
    if (p->times) {
        fputs(",\"times\":{\"start\":[", out);
        for (int i = 0; i < p->g->nnodes; i++)
            fprintf(out, "%s%.3f", i ? "," : "", p->times->start_us[i]);
        fputs("],\"end\":[", out);
        for (int i = 0; i < p->g->nnodes; i++)
            fprintf(out, "%s%.3f", i ? "," : "", p->times->end_us[i]);
        fputs("],\"lane\":[", out);
        for (int i = 0; i < p->g->nnodes; i++)
            fprintf(out, "%s%d", i ? "," : "", p->times->lane[i]);
        fputs("],\"lanes\":[", out);
        for (int i = 0; i < p->times->nlanes; i++) {
            fputs(i ? "," : "", out);
            sg_json_write_string(out, p->times->lane_names[i]);
        }
        fputs("]}", out);
    }
    fputs("}", out);
    return ferror(out) ? SG_EIO : SG_OK;
}

/* JSON inside <script>: "</" would end the element. */
static void write_script_safe(FILE *out, const char *text, size_t len)
{
    for (size_t i = 0; i < len; i++) {
        if (text[i] == '<' && i + 1 < len && text[i + 1] == '/')
            fputs("<\\", out);
        else
            fputc(text[i], out);
    }
}

void sg_html_text(FILE *out, const char *s)
{
    for (; *s; s++)
        switch (*s) {
        case '<': fputs("&lt;", out); break;
        case '>': fputs("&gt;", out); break;
        case '&': fputs("&amp;", out); break;
        case '"': fputs("&quot;", out); break;
        default: fputc(*s, out);
        }
}

static void write_facts(FILE *out, const sg_html_page *p)
{
    fprintf(out, "<p class=\"facts\" id=\"facts\">%d tasks, %d dependencies", p->g->nnodes,
            p->g->nedges);
    if (p->fold && p->fold->ngroups)
        fprintf(out, "; %d group%s of repeated units folded", p->fold->ngroups,
                p->fold->ngroups > 1 ? "s" : "");
    fprintf(out, ". Critical path (%s): <b>%.3f ms</b> over %d tasks", p->critical_kind,
            p->critical_s * 1e3, p->ncritical);
    if (p->times)
        fprintf(out, ", of which %.3f ms waiting", p->wait_s * 1e3);
    fputs(". Lower bound of the step on ", out);
    sg_html_text(out, p->s->cost_model_name ? p->s->cost_model_name : "the reference machine");
    fprintf(out, ": <b>%.3f ms</b>, set by ", p->bound_s * 1e3);
    sg_html_text(out, p->bound_by);
    if (p->step_s > 0)
        fprintf(out,
                "; the traced step took %.3f ms, %.2fx that bound (meaningful when the "
                "trace is of that machine: --machine NAME)",
                p->step_s * 1e3, p->bound_s > 0 ? p->step_s / p->bound_s : 0.0);
    fputs(".</p>\n", out);
}

int sg_render_html(const char *path, const sg_html_page *p, sg_error *err)
{
    char *data = NULL;
    size_t dlen = 0;
    FILE *mem = open_memstream(&data, &dlen);
    if (!mem)
        return sg_error_set(err, SG_ENOMEM, "%s: out of memory", path);
    int rc = write_data(mem, p);
    if (fclose(mem) || rc) {
        free(data);
        return sg_error_set(err, SG_ENOMEM, "%s: cannot build the page's data", path);
    }
    sg_atomic_file f;
    if ((rc = sg_atomic_open(&f, path, err))) {
        free(data);
        return rc;
    }
    FILE *out = f.fp;
    fputs("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>stepgraph: ",
          out);
    sg_html_text(out, p->title);
    fprintf(out, "</title>\n<style>%s</style></head>\n<body>\n<header><h1>", page_css);
    sg_html_text(out, p->title);
    fputs("</h1>\n", out);
    write_facts(out, p);
    fputs("<div class=\"tools\"><input id=\"search\" placeholder=\"search tasks: name or kind "
          "(Enter: go to the first)\"><span id=\"hits\"></span>"
          "<button id=\"fold\">Unfold all units</button><button id=\"reset\">Reset view</button>"
          "<label><input type=\"checkbox\" id=\"crit\" checked> critical path</label>"
          "<span>wheel: zoom, drag: pan, click: details</span></div></header>\n"
          "<main><div id=\"graph\"><div id=\"svg-folded\" class=\"view\">\n",
          out);
    rc = sg_html_inline_svg(out, p->svg_folded, err);
    if (!rc) {
        fputs("</div><div id=\"svg-full\" class=\"view\" hidden>\n", out);
        if (p->svg_full)
            rc = sg_html_inline_svg(out, p->svg_full, err);
        else
            fprintf(out,
                    "<p id=\"no-full\">%d tasks are too many to draw unfolded (more than "
                    "%d); search, the details and the timeline still cover every task.</p>",
                    p->g->nnodes, SG_HTML_FULL_MAX);
    }
    if (!rc) {
        fputs("</div></div><aside id=\"details\"><p>Click a task for its kind, device, FLOPs, "
              "bytes, accesses, predecessors and successors; click a folded box to unfold it."
              "</p></aside></main>\n<section id=\"timeline\"></section>\n"
              "<script type=\"application/json\" id=\"sg-data\">",
              out);
        write_script_safe(out, data, dlen);
        fprintf(out, "</script>\n<script>\n%s</script>\n</body></html>\n", sg_graph_page_js);
    }
    free(data);
    if (rc) {
        sg_atomic_abort(&f);
        return rc;
    }
    if (ferror(out))
        return sg_atomic_fail(&f, SG_EIO, err);
    return sg_atomic_commit(&f, err);
}

int sg_render_view_html(const sg_graph_view *v, const char *title, const char *path, sg_error *err)
{
    char folded[4096], full[4096];
    if (snprintf(folded, sizeof folded, "%s.folded.svg", path) >= (int)sizeof folded ||
        snprintf(full, sizeof full, "%s.full.svg", path) >= (int)sizeof full)
        return sg_error_set(err, SG_EINVAL, "%s: path too long", path);
    sg_dot_style fst = v->style, ust = v->style;
    fst.fold = &v->fold;
    ust.fold = NULL;
    int rc = sg_render_graph_svg(&v->g, &fst, folded, err);
    /* Graphviz takes minutes past a few thousand nodes */
    int draw_full = v->g.nnodes <= SG_HTML_FULL_MAX;
    if (!rc && draw_full)
        rc = sg_render_graph_svg(&v->g, &ust, full, err);
    if (!rc) {
        sg_html_page page = {.title = title,
                             .g = &v->g,
                             .s = &v->s,
                             .fold = &v->fold,
                             .svg_folded = folded,
                             .svg_full = draw_full ? full : NULL,
                             .times = v->have_times ? &v->times : NULL,
                             .where = v->where,
                             .critical = v->critical,
                             .ncritical = v->ncritical,
                             .critical_kind = v->critical_kind,
                             .critical_s = v->critical_s,
                             .wait_s = v->wait_s,
                             .step_s = v->step_s,
                             .bound_s = v->bound_s,
                             .bound_by = v->bound_by};
        rc = sg_render_html(path, &page, err);
    }
    unlink(folded);
    if (draw_full)
        unlink(full);
    return rc;
}

int sg_write_report(const sg_config *cfg, const char *trace, const char *path, sg_error *err)
{
    sg_graph_view v;
    int rc = sg_graph_view_build(cfg, 0, trace, &v, err);
    if (rc)
        return sg_error_prefix(err, "report %s: ", path), rc;
    char title[2200];
    snprintf(title, sizeof title, "%s: %s%s%s", v.model->name,
             cfg->run_path[0] ? cfg->run_path : cfg->ds_path, v.machine[0] ? " on " : "",
             v.machine);
    rc = sg_render_view_html(&v, title, path, err);
    sg_graph_view_free(&v);
    return rc;
}
