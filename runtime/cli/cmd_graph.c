/* cmd_graph.c - `stepgraph graph`: compile a step and export it. */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "graph/analysis.h"
#include "graph/export.h"
#include "common/atomic_file.h"
#include "runtime/cli/cli.h"
#include "runtime/config/machine.h"
#include "runtime/config/step_spec.h"

typedef struct graph_output {
    const sg_graph *g;
    const sg_summary *s;
} graph_output;

static int write_dot(void *ctx, FILE *out)
{
    return sg_export_dot(((graph_output *)ctx)->g, out);
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
    printf("usage: stepgraph graph CONFIG [--format dot|svg|json] [-o FILE] [--summary] "
           "[run options]\n"
           "\n"
           "Compiles one training step (DeepSpeed semantics: ZeRO stage, offload,\n"
           "SuperOffload, accumulation, checkpointing, precision) into its task graph.\n"
           "\n"
           "  --format dot|svg|json  export format (default dot; svg needs Graphviz)\n"
           "  -o, --output FILE      write there (atomically) instead of standard output;\n"
           "                         required for svg\n"
           "  --summary              print node counts per kind, FLOPs, bytes per link\n"
           "                         direction, peak memory and the critical path on an\n"
           "                         ideal machine: unlimited workers at the roofline of\n"
           "                         --machine NAME (configs/machines/NAME.json, with its\n"
           "                         efficiencies and memory capacities) or, without it,\n"
           "                         of one GH200 at 100%% of peak\n"
           "\n"
           "With --machine NAME the step is compiled for that machine, as simulate does:\n"
           "optimizer_tile auto counts its CPU workers, cast_placement auto weighs its\n"
           "link and memory bandwidths; without it, this host's CPUs and no figures.\n"
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

int sg_cmd_graph(int argc, char **argv)
{
    const char *format = "dot", *output = NULL;
    int summary = 0, help = 0;
    sg_cli_opt opts[] = {
        {"format", NULL, &format, NULL},
        {"output", "o", &output, NULL},
        {"summary", NULL, NULL, &summary},
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
    int rc = (!cfg || !model) ? sg_error_set(&err, SG_ENOMEM, "out of memory") : SG_OK;
    if (!rc)
        rc = sg_cli_load_config(argc, argv, opts, 4, cfg, &err);
    if (!rc && strcmp(format, "dot") && strcmp(format, "svg") && strcmp(format, "json"))
        rc = sg_error_set(&err, SG_EINVAL, "--format %s: expected dot, svg or json", format);
    if (!rc && !strcmp(format, "svg") && (!output || !strcmp(output, "-")))
        rc = sg_error_set(&err, SG_EINVAL, "--format svg needs -o FILE");
    sg_summary s;
    sg_cost_model cm;
    sg_machine machine;
    int have_machine = 0;
    sg_cost_model_gh200(&cm);
    if (!rc && cfg->run.machine[0]) {
        char path[4096];
        rc = sg_machine_resolve(cfg->run.machine, path, sizeof path, &err);
        if (!rc)
            rc = sg_machine_load(path, &machine, &err);
        have_machine = !rc;
    }
    /* with a machine, the graph `simulate` would run there (optimizer tiles
     * and cast placement resolved for it) */
    if (!rc)
        rc = sg_compile_for_machine(cfg, have_machine ? &machine : NULL, model, &g, &err);
    if (!rc && have_machine) {
        sg_step_spec spec;
        sg_step_spec_for_machine(cfg, &machine, &spec);
        sg_machine_cost_model(&machine, spec.compute_dtype, &cm);
    }
    if (!rc && sg_summary_compute(&g, &cm, &s))
        rc = sg_error_set(&err, SG_ENOMEM, "out of memory summarising the graph");
    graph_output o = {&g, &s};
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
            else
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
    free(cfg);
    free(model);
    return rc ? 1 : 0;
}
