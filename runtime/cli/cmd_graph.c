/* cmd_graph.c - `stepgraph graph`: compile a step and export it. */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "graph/export.h"
#include "runtime/cli/graph_view.h"
#include "runtime/cli/render_html.h"
#include "common/atomic_file.h"
#include "runtime/cli/cli.h"
#include "runtime/config/machine.h"
#include "runtime/config/step_spec.h"

typedef struct graph_output {
    const sg_graph *g;
    const sg_summary *s;
    const sg_dot_style *style;
} graph_output;

static int write_dot(void *ctx, FILE *out)
{
    graph_output *o = ctx;
    return sg_export_dot_styled(o->g, o->style, out);
}

static int write_json(void *ctx, FILE *out)
{
    graph_output *o = ctx;
    return sg_export_json(o->g, o->s, out);
}

static int write_summary(void *ctx, FILE *out)
{
    return sg_summary_print(((graph_output *)ctx)->s, out);
}

static void graph_help(void)
{
    printf("usage: stepgraph graph CONFIG [--format dot|svg|json|html] [-o FILE] [--unfold]\n"
           "                      [--times TRACE] [--summary] [run options]\n"
           "\n"
           "Compiles one training step (DeepSpeed semantics: ZeRO stage, offload,\n"
           "SuperOffload, accumulation, checkpointing, precision) into its task graph.\n"
           "\n"
           "  --format FMT           dot (default), svg (Graphviz), json (every node and\n"
           "                         edge), html (one self-contained page: pan and zoom,\n"
           "                         search, fold and unfold, node details, the critical\n"
           "                         path, the step's lower bound; with --times, a\n"
           "                         timeline of the step linked to the graph)\n"
           "  -o, --output FILE      write there (atomically) instead of standard output;\n"
           "                         required for svg and html\n"
           "  --unfold               dot/svg: draw every unit; by default repeated units\n"
           "                         (decoder layers, optimizer sub-groups of one shape) fold\n"
           "                         into one box each, the first of each shape drawn in full\n"
           "  --times TRACE          a Chrome trace of this config's step (`run --trace` or\n"
           "                         `simulate --trace`): svg/dot fill nodes from white to\n"
           "                         red by measured time and outline the executed critical\n"
           "                         path; html adds the timeline\n"
           "  --summary              print node counts per kind, FLOPs, bytes per link\n"
           "                         direction, peak memory and the critical path on an\n"
           "                         ideal machine: unlimited workers at the roofline of\n"
           "                         --machine NAME (configs/machines/NAME.json, with its\n"
           "                         efficiencies and memory capacities) or, without it,\n"
           "                         of one GH200 at 100%% of peak\n"
           "\n");
    sg_cli_print_run_flags();
}

/* The page: both drawings (folded, full) rendered to temporary SVGs, then
 * inlined with the data. */
static int export_html(const sg_graph_view *v, const char *title, const char *path,
                       sg_error *err)
{
    char folded[4096], full[4096];
    if (snprintf(folded, sizeof folded, "%s.folded.svg", path) >= (int)sizeof folded ||
        snprintf(full, sizeof full, "%s.full.svg", path) >= (int)sizeof full)
        return sg_error_set(err, SG_EINVAL, "%s: path too long", path);
    sg_dot_style fst = v->style, ust = v->style;
    fst.fold = &v->fold;
    ust.fold = NULL;
    int rc = sg_render_graph_svg(&v->g, &fst, folded, err);
    if (!rc)
        rc = sg_render_graph_svg(&v->g, &ust, full, err);
    if (!rc) {
        sg_html_page page = {.title = title, .g = &v->g, .s = &v->s, .fold = &v->fold,
                             .svg_folded = folded, .svg_full = full,
                             .times = v->have_times ? &v->times : NULL,
                             .critical = v->critical, .ncritical = v->ncritical,
                             .critical_kind = v->critical_kind, .critical_s = v->critical_s,
                             .wait_s = v->wait_s, .step_s = v->step_s, .bound_s = v->bound_s,
                             .bound_by = v->bound_by};
        rc = sg_render_html(path, &page, err);
    }
    unlink(folded);
    unlink(full);
    return rc;
}

int sg_cmd_graph(int argc, char **argv)
{
    const char *format = "dot", *output = NULL, *times_path = NULL;
    int summary = 0, help = 0, unfold = 0;
    sg_cli_opt opts[] = {
        {"format", NULL, &format, NULL},
        {"output", "o", &output, NULL},
        {"summary", NULL, NULL, &summary},
        {"unfold", NULL, NULL, &unfold},
        {"times", NULL, &times_path, NULL},
        {"help", "h", NULL, &help},
    };
    for (int i = 0; i < argc; i++)
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            graph_help();
            return 0;
        }
    sg_error err = {0};
    sg_config *cfg = calloc(1, sizeof *cfg);
    sg_graph_view v;
    memset(&v, 0, sizeof v);
    int built = 0;
    int rc = !cfg ? sg_error_set(&err, SG_ENOMEM, "out of memory") : SG_OK;
    if (!rc)
        rc = sg_cli_load_config(argc, argv, opts, 6, cfg, &err);
    if (!rc && strcmp(format, "dot") && strcmp(format, "svg") && strcmp(format, "json") &&
        strcmp(format, "html"))
        rc = sg_error_set(&err, SG_EINVAL, "--format %s: expected dot, svg, json or html", format);
    if (!rc && (!strcmp(format, "svg") || !strcmp(format, "html")) && (!output || !strcmp(output, "-")))
        rc = sg_error_set(&err, SG_EINVAL, "--format %s needs -o FILE", format);
    /* the page always has both drawings: the view is folded for it */
    if (!rc && !(rc = sg_graph_view_build(cfg, unfold && strcmp(format, "html"), times_path, &v,
                                          &err)))
        built = 1;
    graph_output o = {&v.g, &v.s, &v.style};
    if (!rc) {
        int want_export = !summary || output || strcmp(format, "dot");
        if (summary) {
            printf("step graph of %s: %d units, ZeRO stage %lld, micro-batch %lld x %lld "
                   "accumulation, seq %lld\n",
                   v.model->name, sg_model_num_units(v.model), (long long)cfg->ds.zero.stage,
                   (long long)cfg->ds.train_micro_batch_size_per_gpu,
                   (long long)cfg->ds.gradient_accumulation_steps, (long long)cfg->run.max_length);
            rc = sg_cli_write_output(NULL, write_summary, &o, &err);
        }
        if (!rc && want_export) {
            if (!strcmp(format, "svg"))
                rc = sg_render_graph_svg(&v.g, &v.style, output, &err);
            else if (!strcmp(format, "html")) {
                char title[2200];
                snprintf(title, sizeof title, "%s: %s", v.model->name,
                         cfg->run_path[0] ? cfg->run_path : cfg->ds_path);
                rc = export_html(&v, title, output, &err);
            } else
                rc = sg_cli_write_output(output, !strcmp(format, "json") ? write_json : write_dot,
                                         &o, &err);
            if (!rc && output && strcmp(output, "-"))
                fprintf(stderr, "stepgraph: wrote %s (%d nodes, %d edges)\n", output, v.g.nnodes,
                        v.g.nedges);
        }
    }
    if (rc)
        fprintf(stderr, "stepgraph: %s\n", err.msg[0] ? err.msg : sg_strerror(rc));
    if (built)
        sg_graph_view_free(&v);
    free(cfg);
    return rc ? 1 : 0;
}
