/* cmd_compare.c - `stepgraph compare`: two step graphs side by side in one
 * page (two configs, or one config on two machines): tasks per kind, FLOPs,
 * bytes per link, memory peaks, critical paths and lower bounds, both folded
 * drawings, and with traces both timelines on one time axis. */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/atomic_file.h"
#include "graph/op_kinds.h"
#include "runtime/cli/cli.h"
#include "runtime/cli/graph_view.h"
#include "runtime/cli/render_html.h"

static void compare_help(void)
{
    printf("usage: stepgraph compare A [B] -o PAGE.html [--machines M1[,M2]]\n"
           "                        [--times TRACE_A[,TRACE_B]] [run options]\n"
           "\n"
           "Two step graphs side by side in one self-contained HTML page: config A against\n"
           "config B (both on M1, or A on M1 and B on M2), or config A on two machines\n"
           "(--machines M1,M2). The page has a table (tasks per kind, FLOPs, bytes per link\n"
           "direction, peak and persistent memory, critical path, the step's lower bound and\n"
           "what sets it, with a ratio column), both folded drawings, and with --times the\n"
           "two steps' timelines on one time axis (traces of A and B: `run --trace` or\n"
           "`simulate --trace`). Run options and --set apply to both sides.\n"
           "\n"
           "  -o, --output FILE      the page (required)\n"
           "  --machines M1[,M2]     machine models for the cost figures (default: each\n"
           "                         config's machine, else an ideal GH200)\n"
           "  --times TA[,TB]        traces of A and B\n"
           "\n");
    sg_cli_print_run_flags();
}

/* "x,y" -> x and y (y NULL without a comma); s is modified. */
static void split2(char *s, char **a, char **b)
{
    *a = s;
    char *c = s ? strchr(s, ',') : NULL;
    *b = c ? c + 1 : NULL;
    if (c)
        *c = '\0';
}

typedef struct side {
    const char *config, *machine, *times;
    char label[256];
    sg_config *cfg;
    sg_graph_view v;
    int built;
    char svg[4096];
} side;

static int build_side(side *sd, char **pass, int npass, sg_error *err)
{
    char **argv = calloc((size_t)npass + 3, sizeof *argv);
    sd->cfg = calloc(1, sizeof *sd->cfg);
    if (!argv || !sd->cfg) {
        free(argv);
        return sg_error_set(err, SG_ENOMEM, "out of memory");
    }
    int argc = 0;
    argv[argc++] = (char *)sd->config;
    for (int i = 0; i < npass; i++)
        argv[argc++] = pass[i];
    if (sd->machine) {
        argv[argc++] = "--machine";
        argv[argc++] = (char *)sd->machine;
    }
    int rc = sg_cli_load_config(argc, argv, NULL, 0, sd->cfg, err);
    free(argv);
    if (!rc)
        rc = sg_graph_view_build(sd->cfg, 0, sd->times, &sd->v, err);
    if (rc)
        return sg_error_prefix(err, "%s: ", sd->config), rc;
    sd->built = 1;
    snprintf(sd->label, sizeof sd->label, "%s%s%s", sd->config, " on ",
             sd->v.machine[0] ? sd->v.machine : "ideal GH200");
    return SG_OK;
}

static void row(FILE *out, const char *what, double a, double b, const char *fmt)
{
    fprintf(out, "<tr><th>%s</th><td>", what);
    fprintf(out, fmt, a);
    fputs("</td><td>", out);
    fprintf(out, fmt, b);
    if (a > 0)
        fprintf(out, "</td><td>%.3f</td></tr>\n", b / a);
    else
        fputs("</td><td>-</td></tr>\n", out);
}

static void table(FILE *out, const side *A, const side *B)
{
    const sg_summary *a = &A->v.s, *b = &B->v.s;
    fputs("<table id=\"compare\"><tr><th></th><th>A: ", out);
    sg_html_text(out, A->label);
    fputs("</th><th>B: ", out);
    sg_html_text(out, B->label);
    fputs("</th><th>B / A</th></tr>\n", out);
    row(out, "tasks", a->nnodes, b->nnodes, "%.0f");
    row(out, "dependencies", a->nedges, b->nedges, "%.0f");
    for (int k = 0; k < SG_OP_KIND_COUNT; k++)
        if (a->count[k] || b->count[k]) {
            char what[64];
            snprintf(what, sizeof what, "%s tasks", sg_op_kind_name((sg_op_kind)k));
            row(out, what, a->count[k], b->count[k], "%.0f");
        }
    row(out, "TFLOP per step", a->flops_total / 1e12, b->flops_total / 1e12, "%.3f");
    row(out, "GB host-to-device", a->link_bytes[SG_LINK_H2D] / 1e9,
        b->link_bytes[SG_LINK_H2D] / 1e9, "%.3f");
    row(out, "GB device-to-host", a->link_bytes[SG_LINK_D2H] / 1e9,
        b->link_bytes[SG_LINK_D2H] / 1e9, "%.3f");
    row(out, "GB collectives", a->link_bytes[SG_LINK_NET] / 1e9, b->link_bytes[SG_LINK_NET] / 1e9,
        "%.3f");
    row(out, "peak GPU memory (GiB)", a->peak_bytes[SG_MEM_GPU] / 1073741824.0,
        b->peak_bytes[SG_MEM_GPU] / 1073741824.0, "%.2f");
    row(out, "peak host memory (GiB)", a->peak_bytes[SG_MEM_HOST] / 1073741824.0,
        b->peak_bytes[SG_MEM_HOST] / 1073741824.0, "%.2f");
    row(out, "critical path (ms)", A->v.critical_s * 1e3, B->v.critical_s * 1e3, "%.3f");
    row(out, "lower bound (ms)", A->v.bound_s * 1e3, B->v.bound_s * 1e3, "%.3f");
    if (A->v.have_times && B->v.have_times)
        row(out, "traced step (ms)", A->v.step_s * 1e3, B->v.step_s * 1e3, "%.3f");
    fputs("<tr><th>bound set by</th><td>", out);
    sg_html_text(out, A->v.bound_by);
    fputs("</td><td>", out);
    sg_html_text(out, B->v.bound_by);
    fputs("</td><td></td></tr>\n</table>\n", out);
}

/* Both traced steps on one time axis: the lanes of A, then those of B. */
static void timelines(FILE *out, const side *A, const side *B)
{
    const side *sd[2] = {A, B};
    double span = 0, t0[2] = {0, 0};
    int lanes = 0;
    for (int k = 0; k < 2; k++) {
        const sg_trace_times *t = &sd[k]->v.times;
        double lo = -1, hi = 0;
        for (int i = 0; i < t->nnodes; i++)
            if (t->end_us[i] >= 0) {
                lo = lo < 0 || t->start_us[i] < lo ? t->start_us[i] : lo;
                hi = t->end_us[i] > hi ? t->end_us[i] : hi;
            }
        t0[k] = lo;
        span = hi - lo > span ? hi - lo : span;
        lanes += t->nlanes;
    }
    const double W = 1200, L = 20, left = 140;
    fprintf(out,
            "<h2>Both steps on one time axis (%.3f ms)</h2>\n<svg id=\"timelines\" "
            "xmlns=\"http://www.w3.org/2000/svg\" viewBox=\"0 0 %.0f %.0f\" "
            "style=\"width:100%%\">\n",
            span / 1e3, W, lanes * L + 30);
    int base = 0;
    for (int k = 0; k < 2; k++) {
        const sg_graph_view *v = &sd[k]->v;
        for (int l = 0; l < v->times.nlanes; l++)
            fprintf(out, "<text x=\"4\" y=\"%.0f\" font-size=\"11\">%c: %s</text>\n",
                    (base + l) * L + 14, 'A' + k, v->times.lane_names[l]);
        for (int i = 0; i < v->g.nnodes; i++) {
            if (v->times.end_us[i] < 0)
                continue;
            double x = left + (v->times.start_us[i] - t0[k]) / span * (W - left - 10);
            double w = (v->times.end_us[i] - v->times.start_us[i]) / span * (W - left - 10);
            fprintf(out,
                    "<rect class=\"bar\" x=\"%.1f\" y=\"%.0f\" width=\"%.1f\" "
                    "height=\"%.0f\" fill=\"%s\"><title>%c: %s</title></rect>\n",
                    x, (base + v->times.lane[i]) * L + 3, w < 1 ? 1 : w, L - 6,
                    sg_where_color((sg_where)v->where[i]), 'A' + k, v->g.nodes[i].name);
        }
        base += v->times.nlanes;
        fprintf(out, "<line x1=\"0\" x2=\"%.0f\" y1=\"%.0f\" y2=\"%.0f\" stroke=\"#888\"/>\n", W,
                base * L, base * L);
    }
    fputs("</svg>\n", out);
}

static int write_page(const char *path, side *A, side *B, sg_error *err)
{
    side *sd[2] = {A, B};
    int rc = SG_OK;
    for (int k = 0; k < 2 && !rc; k++) {
        snprintf(sd[k]->svg, sizeof sd[k]->svg, "%s.%c.svg", path, 'a' + k);
        rc = sg_render_graph_svg(&sd[k]->v.g, &sd[k]->v.style, sd[k]->svg, err);
    }
    sg_atomic_file f;
    if (!rc)
        rc = sg_atomic_open(&f, path, err);
    if (!rc) {
        FILE *out = f.fp;
        fputs("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>stepgraph "
              "compare</title><style>body{font-family:sans-serif;margin:1em}"
              "table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:2px 8px;"
              "text-align:right}th{text-align:left}.pair{display:flex;gap:1em}"
              ".pair>div{flex:1;min-width:0;height:60vh;overflow:auto;border:1px solid #ccc}"
              ".pair svg{width:100%;height:auto}</style></head><body>\n<h1>A: ",
              out);
        sg_html_text(out, A->label);
        fputs(" &mdash; B: ", out);
        sg_html_text(out, B->label);
        fputs("</h1>\n", out);
        table(out, A, B);
        fputs("<h2>The two steps, repeated units folded</h2>\n<div class=\"pair\">", out);
        for (int k = 0; k < 2 && !rc; k++) {
            fprintf(out, "<div id=\"graph-%c\">", 'a' + k);
            rc = sg_html_inline_svg(out, sd[k]->svg, err);
            fputs("</div>", out);
        }
        fputs("</div>\n", out);
        if (A->v.have_times && B->v.have_times)
            timelines(out, A, B);
        fputs("</body></html>\n", out);
        if (rc)
            sg_atomic_abort(&f);
        else if (ferror(out))
            rc = sg_atomic_fail(&f, SG_EIO, err);
        else
            rc = sg_atomic_commit(&f, err);
    }
    for (int k = 0; k < 2; k++)
        if (sd[k]->svg[0])
            unlink(sd[k]->svg);
    return rc;
}

int sg_cmd_compare(int argc, char **argv)
{
    const char *output = NULL, *machines = NULL, *times = NULL;
    int help = 0;
    sg_cli_opt opts[] = {
        {"output", "o", &output, NULL},
        {"machines", NULL, &machines, NULL},
        {"times", NULL, &times, NULL},
        {"help", "h", NULL, &help},
    };
    for (int i = 0; i < argc; i++)
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            compare_help();
            return 0;
        }
    /* the command's own options (split_args only steps over them) */
    for (int i = 0; i + 1 < argc; i++)
        for (int k = 0; k < 3; k++)
            if ((!strncmp(argv[i], "--", 2) && !strcmp(argv[i] + 2, opts[k].name)) ||
                (opts[k].short_name && argv[i][0] == '-' &&
                 !strcmp(argv[i] + 1, opts[k].short_name)))
                *opts[k].value = argv[++i];
    sg_error err = {0};
    side A = {0}, B = {0};
    char **pass = calloc((size_t)argc + 1, sizeof *pass);
    const char **configs = calloc((size_t)argc + 1, sizeof *configs);
    int npass = 0, nconfigs = 0, rc = (!pass || !configs) ? SG_ENOMEM : SG_OK;
    /* positional arguments are the configs (split_args reports the first one
     * left; run options and --set go to both sides) */
    char **rest = calloc((size_t)argc + 1, sizeof *rest),
         **scratch = calloc((size_t)argc + 1, sizeof *scratch);
    int nrest = argc;
    if (!rest || !scratch)
        rc = SG_ENOMEM;
    for (int i = 0; !rc && i < argc; i++)
        rest[i] = argv[i];
    while (!rc && nconfigs < 3) {
        const char *first = NULL;
        int np = 0;
        sg_cli_split_args(nrest, rest, opts, 4, &first, nconfigs ? scratch : pass,
                          nconfigs ? &np : &npass);
        if (!first)
            break;
        configs[nconfigs++] = first;
        int k = 0;
        while (k < nrest && rest[k] != first)
            k++;
        memmove(rest + k, rest + k + 1, (size_t)(nrest - k - 1) * sizeof *rest);
        nrest--;
    }
    free(rest);
    free(scratch);
    char mbuf[256] = "", tbuf[8192] = "";
    char *m1 = NULL, *m2 = NULL, *t1 = NULL, *t2 = NULL;
    if (machines) {
        snprintf(mbuf, sizeof mbuf, "%s", machines);
        split2(mbuf, &m1, &m2);
    }
    if (times) {
        snprintf(tbuf, sizeof tbuf, "%s", times);
        split2(tbuf, &t1, &t2);
    }
    if (rc)
        rc = sg_error_set(&err, SG_ENOMEM, "out of memory");
    else if (!output || !strcmp(output, "-"))
        rc = sg_error_set(&err, SG_EINVAL, "compare needs -o PAGE.html");
    else if (nconfigs < 1 || nconfigs > 2)
        rc = sg_error_set(&err, SG_EINVAL, "compare takes one or two configs (got %d)", nconfigs);
    else if (nconfigs == 1 && !m2)
        rc = sg_error_set(&err, SG_EINVAL,
                          "one config is compared on two machines: "
                          "--machines M1,M2");
    if (!rc) {
        A.config = configs[0];
        B.config = nconfigs == 2 ? configs[1] : configs[0];
        A.machine = m1;
        B.machine = m2 ? m2 : m1;
        A.times = t1;
        B.times = t2;
        if ((t1 && !t2) || (!t1 && t2))
            rc = sg_error_set(&err, SG_EINVAL,
                              "--times needs a trace for each side: "
                              "TRACE_A,TRACE_B");
    }
    if (!rc)
        rc = build_side(&A, pass, npass, &err);
    if (!rc)
        rc = build_side(&B, pass, npass, &err);
    if (!rc)
        rc = write_page(output, &A, &B, &err);
    if (!rc)
        fprintf(stderr, "stepgraph: wrote %s (A: %d tasks, B: %d tasks)\n", output, A.v.g.nnodes,
                B.v.g.nnodes);
    else
        fprintf(stderr, "stepgraph: %s\n", err.msg[0] ? err.msg : sg_strerror(rc));
    side *both[2] = {&A, &B};
    for (int k = 0; k < 2; k++) {
        if (both[k]->built)
            sg_graph_view_free(&both[k]->v);
        free(both[k]->cfg);
    }
    free(pass);
    free(configs);
    return rc ? 1 : 0;
}
