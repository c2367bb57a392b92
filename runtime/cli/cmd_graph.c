/* cmd_graph.c - `stepgraph graph`: compile a step and export it. */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "graph/export.h"
#include "graph/memory_held.h"
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
    int cuda; /* compiled for CUDA workers (--ncuda N > 0) */
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
    const graph_output *o = ctx;
    int rc = sg_summary_print(o->s, out);
    int64_t held[SG_MEM_COUNT];
    if (!rc && o->cuda) {
        if (sg_graph_memory_held(o->g, held))
            return SG_ENOMEM;
        fprintf(out,
                "held by StarPU's allocator with CUDA workers: gpu %.1f MiB, host %.1f MiB "
                "(32 MiB chunks for buffers up to 4 MiB, a cache per buffer size, a copy "
                "on each side that accesses a value)\n",
                held[SG_MEM_GPU] / 1048576.0, held[SG_MEM_HOST] / 1048576.0);
        rc = ferror(out) ? SG_EIO : SG_OK;
    }
    return rc;
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
           "                         `simulate --trace`): svg/dot fill each node by the\n"
           "                         worker it ran on (CPU or GPU), red over the share of\n"
           "                         its width its measured time is of the longest task's,\n"
           "                         and outline the executed critical path; html adds the\n"
           "                         timeline\n"

           "  --summary              print node counts per kind, FLOPs, bytes per link\n"
           "                         direction, peak memory and the critical path on an\n"
           "                         ideal machine: unlimited workers at the roofline of\n"
           "                         --machine NAME (configs/machines/NAME.json, with its\n"
           "                         efficiencies and memory capacities) or, without it,\n"
           "                         of one GH200 at 100%% of peak; for a graph compiled\n"
           "                         for CUDA workers (--ncuda N), also what StarPU's\n"
           "                         allocator holds; with offload device \"nvme\", the\n"
           "                         disk tier: state on disk, its RAM working set, disk\n"
           "                         bytes per step (docs/memory.md)\n"
           "\n"
           "Pictures (dot, svg, html) are laid out by phase: a column per unit, forward\n"
           "left to right, backward back under it, then the optimizer's GPU side, the\n"
           "link lanes (d2h, h2d) and its host side. Fill = where a task runs (GPU worker,\n"
           "CPU worker, host-to-device link, device-to-host link, network), shape = its\n"
           "phase, [kind] in its label; the legend names them.\n"
           "\n"
           "With --machine NAME the step is compiled for that machine, as simulate does:\n"
           "optimizer_tile auto counts its CPU workers, cast_placement auto weighs its\n"
           "link and memory bandwidths; without it, this host's CPUs and no figures.\n"
           "\n");
    sg_cli_print_run_flags();
}

int sg_cmd_graph(int argc, char **argv)
{
    const char *format = "dot", *output = NULL, *times_path = NULL;
    int summary = 0, help = 0, unfold = 0;
    sg_cli_opt opts[] = {
        {"format", NULL, &format, NULL},    {"output", "o", &output, NULL},
        {"summary", NULL, NULL, &summary},  {"unfold", NULL, NULL, &unfold},
        {"times", NULL, &times_path, NULL}, {"help", "h", NULL, &help},
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
    if (!rc && (!strcmp(format, "svg") || !strcmp(format, "html")) &&
        (!output || !strcmp(output, "-")))
        rc = sg_error_set(&err, SG_EINVAL, "--format %s needs -o FILE", format);
    /* the page always has both drawings: the view is folded for it */
    if (!rc &&
        !(rc = sg_graph_view_build(cfg, unfold && strcmp(format, "html"), times_path, &v, &err)))
        built = 1;
    graph_output o = {&v.g, &v.s, &v.style, cfg && cfg->run.ncuda > 0};
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
                rc = sg_render_view_html(&v, title, output, &err);
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
