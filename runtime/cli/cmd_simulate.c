/* cmd_simulate.c - `stepgraph simulate`: one step graph on StarPU-SimGrid. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/atomic_file.h"
#include "runtime/cli/cli.h"
#include "runtime/sim/sim_client.h"
#include "graph/analysis.h"
#include "graph/compile.h"
#include "graph/export.h"
#include "runtime/cli/render_html.h"
#include "runtime/train/step_log.h"

static void simulate_help(void)
{
    printf("usage: stepgraph simulate CONFIG [--machine NAME|PATH] [--sched POLICY]\n"
           "                          [--trace FILE] [--report PAGE] [--steps N]\n"
           "                          [--no-priorities] [--bandwidth shared|static]\n"
           "                          [--cost history|fitted] [--json FILE]\n"
           "                          [--set KEY=VALUE]... [run options]\n"
           "\n"
           "Builds the step graph of CONFIG, as `stepgraph run` would, and runs it under\n"
           "StarPU's SimGrid simulation mode on a machine model (default: the config's\n"
           "\"machine\", else gh200). Nothing is computed: task times come from the\n"
           "machine's roofline (FLOPs over peak, bytes over bandwidth, derated by the\n"
           "efficiencies the model file states) or, for a machine `stepgraph calibrate`\n"
           "measured, from the history StarPU recorded there. StarPU moves data between\n"
           "host and GPU memory over the modelled links as it would for real.\n"
           "\n"
           "Prints the predicted step time, TFLOPS (Megatron-LM formula, per GPU; MoE: n/a\n"
           "and the active-parameter TFLOPS, labelled), GPU busy\n"
           "share, the share of CPU Adam time hidden under GPU work, and bytes and time per\n"
           "link direction. A step whose peak memory exceeds the machine's is reported as\n"
           "not fitting, with the numbers, instead of a time.\n"
           "\n"
           "  --machine M      gh200 (= gh200-480gb), gh200-120gb, gh200x2, gh200x4,\n"
           "                   mi300a, mi300ax2, mi300ax4, h100-pcie, h100-sxm, h200\n"
           "                   (one rank of the machine; --dp_size at most its\n"
           "                   nodes x GPUs), or a\n"
           "                   machine file (configs/machines/*.json; a calibrated one)\n"
           "  --sched POLICY   StarPU policy (default: the config's \"sched\")\n"
           "  --trace FILE     Chrome trace of the simulated step (same format as run)\n"
           "  --report PAGE    the step graph's page (as `graph --format html --times`) with\n"
           "                   the simulated step's timeline and critical path, and the\n"
           "                   lower bound on this machine\n"
           "  --steps N        steps simulated, 1 to 100, the last one reported (default 3:\n"
           "                   the first starts with every buffer at home, and with two\n"
           "                   steps in flight the second still carries that start)\n"
           "  --lookahead N    (run option) steps in flight at once, as run submits them\n"
           "                   (default 2): the reported time is then the interval between\n"
           "                   the last two step ends; 1 = the last step alone\n"
           "  --no-priorities  all tasks priority 0 instead of their bottom level\n"
           "  --bandwidth B    shared (default): memory-bound tasks running at once share\n"
           "                   their memory's bandwidth as they start and end (CPU tasks\n"
           "                   the socket's; on unified memory CPU and GPU tasks the\n"
           "                   HBM); static: each CPU task gets a fixed share (the socket\n"
           "                   over the CPU Adam tasks expected at once); a calibrated\n"
           "                   machine's measured times are used as they are\n"
           "  --cost C         on a calibrated machine: history (default), StarPU's\n"
           "                   measured mean per task size (only sizes that ran there), or\n"
           "                   fitted: per device and kind, overhead + matmul and\n"
           "                   attention FLOPs + bytes fitted on the node times calibrate\n"
           "                   saved, for other models, batches and sequence lengths\n"
           "  --json FILE      also write the result as JSON\n"
           "\n");
    sg_cli_print_run_flags();
}

static void print_links(const sg_sim_report *r)
{
    for (int l = SG_LINK_H2D; l < SG_LINK_COUNT; l++)
        printf("  Link %-4s         %9.3f GB in %lld transfers, %.2f ms at the modelled bandwidth\n",
               sg_link_dir_name((sg_link_dir)l), (double)r->link_bytes[l] * 1e-9,
               (long long)r->link_transfers[l], r->link_s[l] * 1e3);
}

static void print_report(const sg_sim_machine *sm, const char *sched, int priorities,
                         const char *speculation, const sg_sim_point *pt,
                         const sg_sim_report *r)
{
    const sg_machine *m = &sm->machine;
    const sg_step_spec *s = &pt->spec;
    printf("Simulated on %s (%d CPU + %d GPU workers per rank), %s, priorities %s, %s\n",
           m->name, r->ncpu, r->ncuda, sched, priorities ? "on" : "off",
           m->calibration_dir[0] ? (!strcmp(r->cost, "fitted")
                                        ? "calibrated, task times fitted on its node times"
                                        : "calibrated history models")
           : r->static_bandwidth ? "roofline cost model (static bandwidth share)"
                                 : "roofline cost model (shared bandwidth)");
    printf("  %s, ZeRO-%d, %s, micro-batch %lld x accumulation %lld, seq %lld%s%s%s\n",
           pt->model.name, s->zero_stage, sg_dtype_name(s->compute_dtype),
           (long long)s->micro_batch, (long long)s->grad_accum, (long long)s->seq_len,
           s->offload_optimizer ? ", optimizer offloaded" : "",
           !s->super_offload ? ""
           : strcmp(speculation, "never") == 0 ? " (SuperOffload, waiting for the gradient norm)"
                                               : " (SuperOffload)",
           s->offload_param ? ", parameters offloaded" : "");
    double tokens = (double)(s->micro_batch * s->grad_accum * s->seq_len);
    printf("  Step time         %9.2f ms\n", r->step_s * 1e3);
    const char *by = "";
    double bound = sg_sim_point_lower_bound(pt, &sm->machine, &by, NULL);
    if (bound > 0 && m->calibration_dir[0])
        /* the bound is the roofline of the machine's figures; a calibrated
         * machine's task times are measured and need not respect it */
        printf("  Roofline bound    %9.2f ms, set by %s, from the machine's figures (the task "
               "times here are measured): the step is %.2fx it\n", bound * 1e3, by,
               r->step_s / bound);
    else if (bound > 0)
        printf("  Lower bound       %9.2f ms, set by %s: the step is %.2fx it\n", bound * 1e3,
               by, r->step_s / bound);
    printf("  Tokens/s          %9.1f per rank\n", tokens / r->step_s);
    if (isfinite(r->tflops)) {
        double peak = s->compute_dtype == SG_BF16 ? m->gpu_tflops_bf16
                      : s->compute_dtype == SG_F16 ? m->gpu_tflops_fp16 : m->gpu_tflops_fp32;
        printf("  TFLOPS            %9.2f per %s", r->tflops, m->gpu_count > 0 ? "GPU" : "rank");
        if (m->gpu_count > 0)
            printf(" (MFU %.1f%% of %.0f TFLOP/s)", 100 * r->tflops / peak, peak);
        printf("\n");
    }
    const sg_model *mo = &pt->model;
    if (mo->num_experts > 0) {
        /* MoE: the dense formula does not apply (n/a, as the step log); the
         * active-parameter estimate is labelled as such */
        double act = sg_model_active_tflops(mo, s->micro_batch * s->grad_accum, s->seq_len,
                                            s->activation_checkpointing, r->step_s);
        printf("  TFLOPS                  n/a (MoE)\n");
        double np = (double)sg_model_active_params(mo);
        if (isfinite(act))
            printf("  Active TFLOPS     %9.2f per %s (%.2f %s active parameters)\n", act,
                   m->gpu_count > 0 ? "GPU" : "rank", np >= 1e9 ? np / 1e9 : np / 1e6,
                   np >= 1e9 ? "B" : "M");
    }
    if (r->ncuda > 0)
        printf("  GPU busy          %9.1f %%\n", 100 * r->gpu_busy);
    if (isfinite(r->adam_hidden) && r->ncuda > 0)
        printf("  CPU Adam hidden   %9.1f %% under GPU work (of %.1f ms of CPU Adam task time, "
               "summed over the workers)\n", 100 * r->adam_hidden, r->adam_cpu_s * 1e3);
    if (m->gpu_count > 0 && !m->unified_memory)
        printf("  Peak memory       GPU %.2f GB of %.1f, host %.2f GB of %.1f\n",
               pt->fit.gpu_bytes * 1e-9, pt->fit.gpu_capacity * 1e-9, pt->fit.host_bytes * 1e-9,
               pt->fit.host_capacity * 1e-9);
    else
        printf("  Peak memory       %.2f GB of %.1f GB of %s memory\n",
               (pt->fit.gpu_bytes + pt->fit.host_bytes) * 1e-9, pt->fit.host_capacity * 1e-9,
               m->unified_memory ? "unified" : "host");
    print_links(r);
}

static int write_json(const char *path, const sg_sim_machine *sm, const char *sched,
                      int priorities, const sg_sim_point *pt, const sg_sim_report *r,
                      sg_error *err)
{
    sg_atomic_file af;
    int rc = sg_atomic_open(&af, path, err);
    if (rc)
        return rc;
    FILE *f = af.fp;
    fputs("{\"machine\":", f); // names and the reason are escaped: a quote stays JSON
    sg_json_write_string(f, sm->machine.name);
    fputs(",\"sched\":", f);
    sg_json_write_string(f, sched);
    fprintf(f, ",\"priorities\":%s,\"fits\":%s", priorities ? "true" : "false",
            pt->fit.fits ? "true" : "false");
    fprintf(f, ",\"gpu_peak_bytes\":%.0f,\"host_peak_bytes\":%.0f", pt->fit.gpu_bytes,
            pt->fit.host_bytes);
    if (r) {
        fprintf(f, ",\"step_s\":%.9g,\"tflops\":%.9g,\"gpu_busy\":%.9g,\"adam_hidden\":%.9g",
                r->step_s, isfinite(r->tflops) ? r->tflops : -1, r->gpu_busy,
                isfinite(r->adam_hidden) ? r->adam_hidden : -1);
    } else {
        fputs(",\"why\":", f);
        sg_json_write_string(f, pt->fit.why);
    }
    fprintf(f, "}\n");
    if (ferror(f))
        return sg_atomic_fail(&af, SG_EIO, err);
    return sg_atomic_commit(&af, err);
}

int sg_cmd_simulate(int argc, char **argv)
{
    const char *machine = NULL, *sched = NULL, *trace = NULL, *steps = "3", *json = NULL;
    const char *report = NULL, *bandwidth = "shared", *cost = "history";
    int no_prio = 0;
    sg_cli_opt opts[] = {
        {"machine", NULL, &machine, NULL}, {"sched", NULL, &sched, NULL},
        {"trace", NULL, &trace, NULL},     {"steps", NULL, &steps, NULL},
        {"json", NULL, &json, NULL},       {"no-priorities", NULL, NULL, &no_prio},
        {"report", NULL, &report, NULL},   {"bandwidth", NULL, &bandwidth, NULL},
        {"cost", NULL, &cost, NULL},
    };
    for (int i = 0; i < argc; i++)
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            simulate_help();
            return 0;
        }
    sg_error err = {0};
    char **pass = calloc((size_t)argc + 1, sizeof *pass);
    sg_sim_machine *sm = calloc(1, sizeof *sm);
    sg_sim_point *pt = calloc(1, sizeof *pt);
    sg_config *cfg = calloc(1, sizeof *cfg);
    char workdir[4096] = "";
    int npass = 0, rc = (!pass || !sm || !pt || !cfg) ? sg_error_set(&err, SG_ENOMEM, "out of memory")
                                                      : SG_OK;
    const char *config = NULL;
    /* loads once here for the errors and the config's machine */
    if (!rc)
        rc = sg_cli_load_config(argc, argv, opts, 9, cfg, &err);
    if (!rc)
        sg_cli_split_args(argc, argv, opts, 9, &config, pass, &npass);
    if (!rc && strcmp(bandwidth, "shared") && strcmp(bandwidth, "static"))
        rc = sg_error_set(&err, SG_EINVAL, "--bandwidth %s: expected shared or static", bandwidth);
    if (!rc && strcmp(cost, "history") && strcmp(cost, "fitted"))
        rc = sg_error_set(&err, SG_EINVAL, "--cost %s: expected history or fitted", cost);
    char *end;
    long nsteps = strtol(steps, &end, 10);
    if (!rc && (*end || nsteps < 1 || nsteps > 100))
        rc = sg_error_set(&err, SG_EINVAL, "--steps %s: expected 1 to 100", steps);
    if (!rc && !machine)
        machine = cfg->run.machine[0] ? cfg->run.machine : "gh200";
    if (!rc)
        rc = sg_sim_workdir_make(workdir, sizeof workdir, &err);
    if (!rc)
        rc = sg_sim_machine_open(sm, machine, workdir, &err);
    if (!rc && !strcmp(cost, "fitted") && !sm->machine.calibration_dir[0])
        rc = sg_error_set(&err, SG_EINVAL, "--cost fitted: %s is a modelled machine (roofline "
                          "costs); it needs one that `stepgraph calibrate` measured",
                          sm->machine.name);
    /* a report needs the trace: one in the work directory unless --trace names it */
    char tmp_trace[4200] = "";
    if (!rc && report && !trace) {
        snprintf(tmp_trace, sizeof tmp_trace, "%s/report-trace.json", workdir);
        trace = tmp_trace;
    }
    sg_sim_request rq = {.config = config, .args = pass, .nargs = npass, .sm = sm,
                         .sched = sched, .priorities = !no_prio, .steps = (int)nsteps,
                         .trace = trace, .static_bandwidth = !strcmp(bandwidth, "static"),
                         .fitted_costs = !strcmp(cost, "fitted")};
    if (!rc)
        rc = sg_sim_prepare(&rq, 0, pt, &err);
    if (!rc && !sched)
        rq.sched = sched = pt->sched;
    sg_sim_report rep;
    if (!rc && !pt->fit.fits) {
        printf("Does not fit on %s: %s\n", sm->machine.name, pt->fit.why);
        if (json)
            rc = write_json(json, sm, sched, !no_prio, pt, NULL, &err);
    } else if (!rc) {
        fprintf(stderr, "stepgraph: simulating %s on %s with %s...\n", pt->model.name,
                sm->machine.name, sched);
        rc = sg_sim_run_one(&rq, workdir, &rep, &err);
        if (!rc)
            print_report(sm, sched, !no_prio, cfg->run.speculation, pt, &rep);
        if (!rc && trace)
            printf("  Trace             %s\n", trace);
        if (!rc && json)
            rc = write_json(json, sm, sched, !no_prio, pt, &rep, &err);
        if (!rc && report) {
            /* the page's cost figures are this machine's */
            snprintf(cfg->run.machine, sizeof cfg->run.machine, "%s", machine);
            if (!(rc = sg_write_report(cfg, trace, report, &err)))
                printf("  Report            %s\n", report);
        }
    }
    if (rc)
        fprintf(stderr, "stepgraph: %s\n", err.msg[0] ? err.msg : sg_strerror(rc));
    sg_sim_workdir_remove(workdir);
    free(pass);
    free(sm);
    free(pt);
    free(cfg);
    return rc ? 1 : 0;
}
