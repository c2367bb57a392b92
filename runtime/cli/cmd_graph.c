/* cmd_graph.c - `stepgraph graph`: compile a step and export it. */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "graph/analysis.h"
#include "graph/critical_path.h"
#include "graph/export.h"
#include "graph/fold.h"
#include "runtime/cli/render_html.h"
#include "runtime/trace/trace_read.h"
#include "common/atomic_file.h"
#include "runtime/cli/cli.h"
#include "runtime/config/machine.h"
#include "runtime/config/step_spec.h"

typedef struct graph_output {
    const sg_graph *g;
    const sg_summary *s;
    sg_dot_style style;
} graph_output;

static int write_dot(void *ctx, FILE *out)
{
    graph_output *o = ctx;
    return sg_export_dot_styled(o->g, &o->style, out);
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

/* DOT to a temporary file next to the output, then Graphviz. */
static int export_svg(graph_output *o, const char *path, sg_error *err)
{
    char dot_path[4096];
    if (snprintf(dot_path, sizeof dot_path, "%s.dot.XXXXXX", path) >= (int)sizeof dot_path)
        return sg_error_set(err, SG_EINVAL, "%s: path too long", path);
    int fd = mkstemp(dot_path);
    if (fd < 0)
        return sg_error_set(err, SG_EIO, "%s: cannot create a temporary file", path);
    FILE *f = fdopen(fd, "w");
    int rc = f ? write_dot(o, f) : SG_EIO;
    if (f && fclose(f) != 0)
        rc = SG_EIO;
    if (rc)
        rc = sg_error_set(err, rc, "%s: cannot write the DOT file", dot_path);
    else
        rc = sg_render_svg(dot_path, path, err);
    unlink(dot_path);
    return rc;
}

/* The page: both drawings (folded, full) rendered to temporary SVGs, then
 * inlined with the data. */
static int export_html(graph_output *o, const char *path, sg_html_page *page, sg_error *err)
{
    char folded[4096], full[4096];
    if (snprintf(folded, sizeof folded, "%s.folded.svg", path) >= (int)sizeof folded ||
        snprintf(full, sizeof full, "%s.full.svg", path) >= (int)sizeof full)
        return sg_error_set(err, SG_EINVAL, "%s: path too long", path);
    graph_output unfolded = *o;
    unfolded.style.fold = NULL;
    int rc = export_svg(o, folded, err);
    if (!rc)
        rc = export_svg(&unfolded, full, err);
    if (!rc) {
        page->svg_folded = folded;
        page->svg_full = full;
        rc = sg_render_html(path, page, err);
    }
    unlink(folded);
    unlink(full);
    return rc;
}

/* Heat per node from the trace's durations (the longest is 1). */
static void heat_of(const sg_graph *g, const sg_trace_times *t, double *heat)
{
    double longest = 0;
    for (int i = 0; i < g->nnodes; i++)
        if (t->end_us[i] >= 0 && t->end_us[i] - t->start_us[i] > longest)
            longest = t->end_us[i] - t->start_us[i];
    for (int i = 0; i < g->nnodes; i++)
        heat[i] = t->end_us[i] < 0 ? -1
                  : longest > 0   ? (t->end_us[i] - t->start_us[i]) / longest
                                  : 0;
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
    sg_model *model = calloc(1, sizeof *model);
    sg_graph g;
    sg_graph_init(&g);
    sg_fold fold = {0};
    sg_trace_times times = {0};
    int have_times = 0;
    double *heat = NULL;
    unsigned char *crit_mask = NULL;
    int *crit = NULL, ncrit = 0;
    int rc = (!cfg || !model) ? sg_error_set(&err, SG_ENOMEM, "out of memory") : SG_OK;
    if (!rc)
        rc = sg_cli_load_config(argc, argv, opts, 6, cfg, &err);
    if (!rc && strcmp(format, "dot") && strcmp(format, "svg") && strcmp(format, "json") &&
        strcmp(format, "html"))
        rc = sg_error_set(&err, SG_EINVAL, "--format %s: expected dot, svg, json or html", format);
    if (!rc && (!strcmp(format, "svg") || !strcmp(format, "html")) && (!output || !strcmp(output, "-")))
        rc = sg_error_set(&err, SG_EINVAL, "--format %s needs -o FILE", format);
    if (!rc)
        rc = sg_compile_from_config(cfg, model, &g, &err);
    sg_summary s;
    sg_cost_model cm;
    sg_machine machine;
    sg_cost_model_gh200(&cm);
    if (!rc && cfg->run.machine[0]) {
        char path[4096];
        sg_step_spec spec;
        sg_step_spec_from_config(cfg, &spec);
        rc = sg_machine_resolve(cfg->run.machine, path, sizeof path, &err);
        if (!rc)
            rc = sg_machine_load(path, &machine, &err);
        if (!rc)
            sg_machine_cost_model(&machine, spec.compute_dtype, &cm);
    }
    if (!rc && sg_summary_compute(&g, &cm, &s))
        rc = sg_error_set(&err, SG_ENOMEM, "out of memory summarising the graph");
    if (!rc && !unfold && sg_fold_compute(&g, &fold))
        rc = sg_error_set(&err, SG_ENOMEM, "out of memory folding the graph");
    if (!rc && times_path) {
        rc = sg_trace_times_read(times_path, &g, &times, &err);
        have_times = !rc;
    }
    size_t nn = (size_t)(g.nnodes > 0 ? g.nnodes : 1);
    if (!rc && (!(crit = malloc(nn * sizeof *crit)) || !(crit_mask = calloc(nn, 1)) ||
                (have_times && !(heat = malloc(nn * sizeof *heat)))))
        rc = sg_error_set(&err, SG_ENOMEM, "out of memory");
    double wait_s = 0, crit_s = 0, step_s = 0;
    if (!rc) {
        if (have_times) {
            heat_of(&g, &times, heat);
            sg_critical_path_timed(&g, times.start_us, times.end_us, crit, &ncrit, &wait_s);
            wait_s *= 1e-6;
            double t0 = -1, t1 = -1;
            for (int i = 0; i < g.nnodes; i++)
                if (times.end_us[i] >= 0) {
                    t0 = t0 < 0 || times.start_us[i] < t0 ? times.start_us[i] : t0;
                    t1 = times.end_us[i] > t1 ? times.end_us[i] : t1;
                }
            step_s = (t1 - t0) * 1e-6;
            if (ncrit)
                crit_s = (times.end_us[crit[ncrit - 1]] - times.start_us[crit[0]]) * 1e-6;
        } else if (sg_critical_path_ideal(&g, &cm, crit, &ncrit)) {
            rc = sg_error_set(&err, SG_ENOMEM, "out of memory");
        } else {
            crit_s = s.critical_path_s;
        }
        for (int i = 0; i < ncrit; i++)
            crit_mask[crit[i]] = 1;
    }
    graph_output o = {&g, &s, {unfold ? NULL : &fold, heat, crit_mask}};
    if (!rc) {
        int want_export = !summary || output || strcmp(format, "dot");
        if (summary) {
            printf("step graph of %s: %d units, ZeRO stage %lld, micro-batch %lld x %lld "
                   "accumulation, seq %lld\n",
                   model->name, sg_model_num_units(model), (long long)cfg->ds.zero.stage,
                   (long long)cfg->ds.train_micro_batch_size_per_gpu,
                   (long long)cfg->ds.gradient_accumulation_steps, (long long)cfg->run.max_length);
            rc = sg_cli_write_output(NULL, write_summary, &o, &err);
        }
        if (!rc && want_export) {
            if (!strcmp(format, "svg"))
                rc = export_svg(&o, output, &err);
            else if (!strcmp(format, "html")) {
                char title[2200];
                snprintf(title, sizeof title, "%s: %s", model->name, cfg->run_path[0] ? cfg->run_path : cfg->ds_path);
                const char *by = "";
                double bound = sg_step_lower_bound(&s, &cm, &by);
                sg_html_page page = {.title = title, .g = &g, .s = &s, .fold = &fold,
                                     .times = have_times ? &times : NULL, .critical = crit,
                                     .ncritical = ncrit,
                                     .critical_kind = have_times ? "executed" : "ideal-machine",
                                     .critical_s = crit_s, .wait_s = wait_s, .step_s = step_s,
                                     .bound_s = bound, .bound_by = by};
                graph_output folded = o;
                folded.style.fold = &fold;
                rc = export_html(&folded, output, &page, &err);
            } else
                rc = sg_cli_write_output(output, !strcmp(format, "json") ? write_json : write_dot,
                                         &o, &err);
            if (!rc && output && strcmp(output, "-"))
                fprintf(stderr, "stepgraph: wrote %s (%d nodes, %d edges)\n", output, g.nnodes,
                        g.nedges);
        }
    }
    if (rc)
        fprintf(stderr, "stepgraph: %s\n", err.msg[0] ? err.msg : sg_strerror(rc));
    sg_graph_free(&g);
    sg_fold_free(&fold);
    sg_trace_times_free(&times);
    free(heat);
    free(crit);
    free(crit_mask);
    free(cfg);
    free(model);
    return rc ? 1 : 0;
}
