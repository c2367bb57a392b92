/* cmd_simulate.c - `stepgraph simulate`: one step graph on StarPU-SimGrid. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/atomic_file.h"
#include "runtime/cli/cli.h"
#include "runtime/sim/eager_attention.h"
#include "runtime/sim/sim_client.h"
#include "graph/analysis.h"
#include "graph/compile.h"
#include "graph/export.h"
#include "runtime/cli/render_html.h"
#include "runtime/cli/sim_report.h"

static void simulate_help(void)
{
    printf("usage: stepgraph simulate CONFIG [--machine NAME|PATH] [--sched POLICY]\n"
           "                          [--trace FILE] [--report PAGE] [--steps N]\n"
           "                          [--no-priorities] [--bandwidth shared|static]\n"
           "                          [--cost history|fitted] [--rollback-passes N]\n"
           "                          [--attention fused|eager] [--json FILE]\n"
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
           "Prints the model and the resolved settings (offload ratio, sub_group_size,\n"
           "cast_placement, optimizer_tile, speculation), which step it reports (a cold\n"
           "one flagged), the predicted step time and its lower bound, per GPU: TFLOPS\n"
           "(DeepSpeedExamples' formula, as DeepSpeed's log; MoE: n/a and the active-\n"
           "parameter TFLOPS, labelled), model TFLOPS with MFU, and Megatron-LM's TFLOPS\n"
           "(docs/flops.md), GPU busy share, the share of CPU Adam time hidden under GPU\n"
           "work, and bytes and time per link direction. One rank is simulated, on a\n"
           "machine of several too. A step whose peak memory exceeds the machine's is\n"
           "reported as not fitting, with the numbers and the ways out, instead of a\n"
           "time. On a calibrated machine whose history lacks this step's task sizes,\n"
           "the fitted costs run by themselves, saying so.\n"
           "Exit status: 0 simulated, 3 does not fit, 1 an error.\n"
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
           "                   measured mean per task size (only sizes that ran there;\n"
           "                   without --cost, other sizes fall back to fitted), or\n"
           "                   fitted: per device and kind, overhead + matmul and\n"
           "                   attention FLOPs + bytes fitted on the node times calibrate\n"
           "                   saved, for other models, batches and sequence lengths\n"
           "  --rollback-passes N  SuperOffload: each sub-group's validation costs N\n"
           "                   passes over its optimizer state, as when clipping (or an\n"
           "                   fp16 overflow) rolls back every speculative step: 0 (default)\n"
           "                   the norm check alone; 1 a rollback and redo as run does\n"
           "                   them now (one pass); 2 as run did before 2026-11-28 (a\n"
           "                   rollback pass, then a redo pass)\n"
           "  --attention A    how the GPU kernel model costs a layer's attention: fused\n"
           "                   (default) one FlashAttention-class kernel at the machine's\n"
           "                   published attention throughput; eager as Hugging Face's\n"
           "                   attn_implementation=\"eager\" runs it: the B x heads x T x T\n"
           "                   scores materialised, their two products (four backward) at\n"
           "                   the GEMM model's rate and each element-wise pass over them\n"
           "                   at gpu.kernels.hbm_gbs, the full square on every layer\n"
           "                   (docs/simulate.md). Needs a machine with gpu.kernels, not a\n"
           "                   calibrated one; `tune` and --report's page stay fused\n"
           "  --json FILE      also write the result as JSON\n"
           "\n");
    static const char *const own[] = {"steps"}; /* this command has its own --steps */
    sg_cli_print_run_flags_except(own, 1);
}

/* --attention eager changes the GPU kernel model's attention: a machine
 * without the model would silently ignore it. */
static int attention_check(const sg_machine *m, sg_error *err)
{
    if (m->calibration_dir[0])
        return sg_error_set(err, SG_EINVAL,
                            "--attention eager: %s is a calibrated machine, its GPU task times "
                            "are measured; eager attention is costed by the GPU kernel model of a "
                            "modelled machine (e.g. gh200)",
                            m->name);
    if (m->gpu_count < 1 || !(m->kernels.gemm_tflops > 0))
        return sg_error_set(err, SG_EINVAL,
                            "--attention eager: %s has no gpu.kernels (the GPU kernel model "
                            "that costs attention)",
                            m->name);
    return SG_OK;
}

/* The command line again, with --cost fitted in place of --cost history:
 * the command that works, for the refusal. */
/* --attention eager costs the score tensors' traffic, but the memory check
 * above counted a fused kernel's activations: said, with one tensor's size,
 * so that a "fits" is not read as eager's */
static void print_eager_memory_note(const sg_sim_point *pt)
{
    double gib = sg_eager_score_tensor_bytes(&pt->model, (double)pt->spec.micro_batch,
                                             (double)pt->spec.seq_len) /
                 (1024.0 * 1024.0 * 1024.0);
    printf("  Eager attention   its score tensors are not in the memory check (it counts a\n"
           "                    fused kernel's activations): each is micro batch x heads x\n"
           "                    T x T in bf16, %.2f GiB here, and the backward holds about\n"
           "                    three at once (docs/simulate.md)\n",
           gib);
}

static void fitted_command(int argc, char **argv, char *out, size_t n)
{
    size_t len = (size_t)snprintf(out, n, "stepgraph simulate");
    for (int i = 0; i < argc && len < n; i++) {
        if (!strcmp(argv[i], "--cost") && i + 1 < argc) {
            i++;
            continue;
        }
        if (!strncmp(argv[i], "--cost=", 7))
            continue;
        len += (size_t)snprintf(out + len, n - len, " %s", argv[i]);
    }
    if (len < n)
        snprintf(out + len, n - len, " --cost fitted");
}

/* Runs the simulation. On a calibrated machine whose history lacks a task
 * size of this step, StarPU refuses it; then, unless --cost history was
 * named, the costs fitted on the machine's node times run instead, saying
 * so (*note); with --cost history named, the refusal names the command that
 * works. */
static int run_sim(sg_sim_request *rq, const char *workdir, int cost_named, int argc, char **argv,
                   sg_sim_report *rep, const char **note, sg_error *err)
{
    int rc = sg_sim_run_one(rq, workdir, rep, err);
    if (!rc || rq->fitted_costs || !rq->sm->machine.calibration_dir[0] ||
        !sg_sim_history_lacks_size(err->msg))
        return rc;
    char starpu[sizeof err->msg], cmd[2048];
    snprintf(starpu, sizeof starpu, "%s", err->msg);
    fitted_command(argc, argv, cmd, sizeof cmd);
    const char *name = rq->sm->machine.name;
    if (cost_named)
        return sg_error_set(err, SG_EINVAL,
                            "--cost history: the calibrated history of %s lacks "
                            "task sizes of this step (StarPU: %s); the costs fitted on its node "
                            "times predict other sizes: %s",
                            name, starpu, cmd);
    fprintf(stderr,
            "stepgraph: the calibrated history of %s lacks task sizes of this step; "
            "simulating with the costs fitted on its node times (--cost fitted)\n",
            name);
    rq->fitted_costs = 1;
    *note = "fitted on the node times by itself: the calibrated history lacks task sizes of "
            "this step (--cost history names the history and refuses)";
    rc = sg_sim_run_one(rq, workdir, rep, err);
    if (rc)
        sg_error_prefix(err, "the history lacks task sizes of this step, and the fitted costs "
                             "failed too: ");
    return rc;
}

int sg_cmd_simulate(int argc, char **argv)
{
    const char *machine = NULL, *sched = NULL, *trace = NULL, *steps = "3", *json = NULL;
    const char *report = NULL, *bandwidth = "shared", *cost = NULL, *rollback = "0";
    const char *attention = "fused";
    int no_prio = 0;
    sg_cli_opt opts[] = {
        {"machine", NULL, &machine, NULL},
        {"sched", NULL, &sched, NULL},
        {"trace", NULL, &trace, NULL},
        {"steps", NULL, &steps, NULL},
        {"json", NULL, &json, NULL},
        {"no-priorities", NULL, NULL, &no_prio},
        {"report", NULL, &report, NULL},
        {"bandwidth", NULL, &bandwidth, NULL},
        {"rollback-passes", NULL, &rollback, NULL},
        {"cost", NULL, &cost, NULL},
        {"attention", NULL, &attention, NULL},
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
    int npass = 0,
        rc = (!pass || !sm || !pt || !cfg) ? sg_error_set(&err, SG_ENOMEM, "out of memory") : SG_OK;
    const char *config = NULL;
    /* loads once here for the errors and the config's machine */
    if (!rc)
        rc = sg_cli_load_config(argc, argv, opts, 11, cfg, &err);
    if (!rc)
        sg_cli_split_args(argc, argv, opts, 11, &config, pass, &npass);
    if (!rc && strcmp(bandwidth, "shared") && strcmp(bandwidth, "static"))
        rc = sg_error_set(&err, SG_EINVAL, "--bandwidth %s: expected shared or static", bandwidth);
    int cost_named = cost != NULL;
    if (!cost)
        cost = "history";
    if (!rc && strcmp(cost, "history") && strcmp(cost, "fitted"))
        rc = sg_error_set(&err, SG_EINVAL, "--cost %s: expected history or fitted", cost);
    char *end;
    long nsteps = strtol(steps, &end, 10);
    if (!rc && (*end || nsteps < 1 || nsteps > 100))
        rc = sg_error_set(&err, SG_EINVAL, "--steps %s: expected 1 to 100", steps);
    long rollback_passes = strtol(rollback, &end, 10);
    if (!rc && (!rollback[0] || *end || rollback_passes < 0 || rollback_passes > 2))
        rc = sg_error_set(&err, SG_EINVAL, "--rollback-passes %s: expected 0, 1 or 2", rollback);
    int eager = !strcmp(attention, "eager");
    if (!rc && !eager && strcmp(attention, "fused"))
        rc = sg_error_set(&err, SG_EINVAL, "--attention %s: expected fused or eager", attention);
    if (!rc && !machine)
        machine = cfg->run.machine[0] ? cfg->run.machine : "gh200";
    if (!rc)
        rc = sg_sim_workdir_make(workdir, sizeof workdir, &err);
    if (!rc)
        rc = sg_sim_machine_open(sm, machine, workdir, &err);
    if (!rc && !strcmp(cost, "fitted") && !sm->machine.calibration_dir[0])
        rc = sg_error_set(&err, SG_EINVAL,
                          "--cost fitted: %s is a modelled machine (roofline "
                          "costs); it needs one that `stepgraph calibrate` measured",
                          sm->machine.name);
    if (!rc && eager)
        rc = attention_check(&sm->machine, &err);
    /* a report needs the trace: one in the work directory unless --trace names it */
    char tmp_trace[4200] = "";
    if (!rc && report && !trace) {
        snprintf(tmp_trace, sizeof tmp_trace, "%s/report-trace.json", workdir);
        trace = tmp_trace;
    }
    sg_sim_request rq = {.config = config,
                         .args = pass,
                         .nargs = npass,
                         .sm = sm,
                         .sched = sched,
                         .priorities = !no_prio,
                         .steps = (int)nsteps,
                         .trace = trace,
                         .static_bandwidth = !strcmp(bandwidth, "static"),
                         .fitted_costs = !strcmp(cost, "fitted"),
                         .rollback_passes = (int)rollback_passes,
                         .eager_attention = eager};
    if (!rc)
        rc = sg_sim_prepare(&rq, 0, pt, &err);
    if (!rc && !sched)
        rq.sched = sched = pt->sched;
    sg_sim_report rep;
    sg_sim_view view = {.config = config,
                        .sm = sm,
                        .pt = pt,
                        .sched = sched,
                        .priorities = !no_prio,
                        .steps = (int)nsteps};
    int not_fit = !rc && !pt->fit.fits;
    if (not_fit) {
        sg_sim_view_print(&view, NULL);
        if (json)
            rc = sg_sim_view_write_json(json, &view, NULL, &err);
    } else if (!rc) {
        fprintf(stderr, "stepgraph: simulating %s on %s with %s...\n", pt->model.name,
                sm->machine.name, sched);
        rc = run_sim(&rq, workdir, cost_named, argc, argv, &rep, &view.cost_note, &err);
        if (!rc)
            sg_sim_view_print(&view, &rep);
        if (!rc && eager)
            print_eager_memory_note(pt);
        if (!rc && trace)
            printf("  Trace             %s\n", trace);
        if (!rc && json)
            rc = sg_sim_view_write_json(json, &view, &rep, &err);
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
    /* a step that does not fit is an answer, not an error, but no time:
     * scripts tell it apart by status 3 */
    return rc ? 1 : not_fit ? 3 : 0;
}
