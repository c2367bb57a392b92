/* sim_main.c - stepgraph-sim: one simulation, run by `stepgraph simulate`
 * and `stepgraph tune` (sim_client.h) with the SimGrid platform already
 * written and STARPU_PERF_MODEL_DIR / STARPU_HOSTNAME set. It must be its
 * own program: SimGrid loads the platform before main() and StarPU renames
 * this file's main() to starpu_main() to run it as a simulated process.
 *
 *   stepgraph-sim CONFIG --machine PATH --sched NAME --result PATH
 *                 [--steps N] [--no-priorities] [--static-bandwidth] [--fitted-costs]
 *                 [--trace PATH] [--rollback-passes N] [--attention fused|eager]
 *                 [--set KEY=VALUE]... [run options]
 *
 * Writes one JSON object to --result (atomically); exits 1 with a one-line
 * message on stderr on failure.
 */
#include <math.h>
#include "runtime/exec/starpu_include.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "graph/analysis.h"
#include "common/atomic_file.h"
#include "common/cleanup.h"
#include "runtime/config/config_args.h"
#include "runtime/config/machine.h"
#include "runtime/sim/sim_exec.h"
#include "models/step_rates.h"
#include "runtime/config/step_spec.h"

typedef struct sim_args {
    const char *machine, *sched, *result, *trace, *steps, *rollback_passes, *attention;
    int no_priorities, static_bandwidth, fitted_costs;
} sim_args;

/* per rank: the batch this rank's GPU processes; MFU against the machine's
 * dense GPU peak for the compute dtype (no GPU: no MFU) */
static void step_rates(const sg_machine *mach, const sg_model *m, const sg_step_spec *s,
                       double seconds, sg_step_rates *out)
{
    sg_step_rates_of(m, s->micro_batch * s->grad_accum, s->seq_len, s->activation_checkpointing,
                     seconds, sg_machine_gpu_peak_tflops(mach, s->compute_dtype), out);
}

static void num(FILE *f, const char *key, double v, int comma)
{
    if (isfinite(v))
        fprintf(f, "\"%s\":%.9g%s", key, v, comma ? "," : "");
    else
        fprintf(f, "\"%s\":null%s", key, comma ? "," : "");
}

static int write_result(const char *path, const sim_args *a, const sg_machine *m,
                        const sg_model *model, const sg_step_spec *spec, const sg_sim_result *r,
                        sg_error *err)
{
    sg_atomic_file af;
    int rc = sg_atomic_open(&af, path, err);
    if (rc)
        return rc;
    FILE *f = af.fp;
    fprintf(f,
            "{\"status\":\"ok\",\"machine\":\"%s\",\"sched\":\"%s\",\"priorities\":%s,"
            "\"bandwidth\":\"%s\",\"cost\":\"%s\",",
            m->name, a->sched, a->no_priorities ? "false" : "true",
            a->static_bandwidth ? "static" : "shared",
            !m->calibration_dir[0] ? "roofline"
            : a->fitted_costs      ? "fitted"
                                   : "history");
    fprintf(f, "\"calibrated\":%s,\"ncpu\":%d,\"ncuda\":%d,",
            m->calibration_dir[0] ? "true" : "false", r->ncpu, r->ncuda);
    num(f, "step_s", r->step_s, 1);
    sg_step_rates rt;
    step_rates(m, model, spec, r->step_s, &rt);
    num(f, "tflops", rt.tflops, 1);
    num(f, "model_tflops", rt.model_tflops, 1);
    num(f, "megatron_tflops", rt.megatron_tflops, 1);
    num(f, "mfu", rt.mfu, 1);
    num(f, "gpu_busy", r->stats.gpu_busy, 1);
    num(f, "adam_cpu_s", r->stats.adam_cpu_s, 1);
    num(f, "adam_hidden", r->stats.adam_cpu_s > 0 ? r->stats.adam_hidden : NAN, 1);
    /* the work bound: over the reported interval, each class's workers ran
     * tasks for at most their count times it, so the busier class's busy time
     * per worker is a lower bound of the step, from the task times used */
    const sg_overlap *o = &r->stats;
    double cpu = o->workers[0] ? o->worker_busy_s[0] / o->workers[0] : 0;
    double gpu = o->workers[1] ? o->worker_busy_s[1] / o->workers[1] : 0;
    num(f, "work_bound_s", cpu > gpu ? cpu : gpu, 1);
    fprintf(f, "\"work_bound_by\":\"%s\",", cpu > gpu ? "CPU" : "GPU");
    fprintf(f, "\"busy_s\":{");
    for (int d = 0; d < SG_DEV_COUNT; d++) {
        num(f, sg_device_class_name((sg_device_class)d), r->stats.busy_s[d], d + 1 < SG_DEV_COUNT);
    }
    fprintf(f, "},\"links\":{");
    for (int l = SG_LINK_H2D; l < SG_LINK_COUNT; l++)
        fprintf(f, "\"%s\":{\"bytes\":%lld,\"transfers\":%lld,\"seconds\":%.9g}%s",
                sg_link_dir_name((sg_link_dir)l), (long long)r->link_bytes[l],
                (long long)r->link_transfers[l], r->link_s[l], l + 1 < SG_LINK_COUNT ? "," : "");
    fprintf(f, "},\"disk\":{\"read_bytes\":%lld,\"write_bytes\":%lld,\"seconds\":%.9g}}\n",
            (long long)r->disk_read_bytes, (long long)r->disk_write_bytes, r->disk_s);
    if (ferror(f))
        return sg_atomic_fail(&af, SG_EIO, err);
    return sg_atomic_commit(&af, err);
}

/* The step `run` executes: with SuperOffload and speculation "never" (the
 * default for Lion, and for Adagrad with weight decay, whose steps cannot be
 * rolled back) every step is the one compiled without speculation, each CPU
 * sub-group's optimizer waiting for the gradient norm (train.c's wait graph);
 * the optimizer keeps its cores either way. "adaptive" mixes the two from
 * step to step, and is simulated speculating, as "always". */
static int compile_as_run(const sg_config *cfg, const sg_machine *m, sg_model *model, sg_graph *g,
                          sg_error *err)
{
    sg_step_spec spec;
    sg_step_spec_for_machine(cfg, m, &spec);
    if (spec.super_offload && strcmp(cfg->run.speculation, "never") == 0)
        spec.super_offload = 0;
    return sg_compile_spec(cfg, &spec, model, g, err);
}

static int simulate(int argc, char **argv, sg_error *err)
{
    sim_args a = {.sched = NULL, .steps = "2", .rollback_passes = "0", .attention = "fused"};
    sg_cli_opt opts[] = {
        {"machine", NULL, &a.machine, NULL},
        {"sched", NULL, &a.sched, NULL},
        {"result", NULL, &a.result, NULL},
        {"trace", NULL, &a.trace, NULL},
        {"steps", NULL, &a.steps, NULL},
        {"no-priorities", NULL, NULL, &a.no_priorities},
        {"static-bandwidth", NULL, NULL, &a.static_bandwidth},
        {"fitted-costs", NULL, NULL, &a.fitted_costs},
        {"rollback-passes", NULL, &a.rollback_passes, NULL},
        {"attention", NULL, &a.attention, NULL},
    };
    sg_config *cfg = calloc(1, sizeof *cfg);
    sg_model *model = calloc(1, sizeof *model);
    sg_machine *m = calloc(1, sizeof *m);
    sg_graph g;
    sg_graph_init(&g);
    int rc = (!cfg || !model || !m) ? sg_error_set(err, SG_ENOMEM, "out of memory") : SG_OK;
    if (!rc)
        rc = sg_cli_load_config(argc, argv, opts, 10, cfg, err);
    if (!rc && (!a.machine || !a.result))
        rc = sg_error_set(err, SG_EINVAL, "stepgraph-sim needs --machine PATH and --result PATH");
    char *end;
    long steps = strtol(a.steps, &end, 10);
    if (!rc && (*end || steps < 1 || steps > 100))
        rc = sg_error_set(err, SG_EINVAL, "--steps %s: expected 1 to 100", a.steps);
    if (!rc && strcmp(a.attention, "fused") && strcmp(a.attention, "eager"))
        rc = sg_error_set(err, SG_EINVAL, "--attention %s: expected fused or eager", a.attention);
    if (!rc)
        rc = sg_machine_load(a.machine, m, err);
    if (!rc) /* "auto" tiles for the simulated machine's workers (sim_exec.c) */
        sg_config_resolve_tiles(
            cfg, m->cpu_cores - m->gpu_count > 0 ? m->cpu_cores - m->gpu_count : 1, m->gpu_count);
    if (!rc)
        rc = compile_as_run(cfg, m, model, &g, err);
    sg_step_spec spec;
    if (!rc) {
        sg_step_spec_for_machine(cfg, m, &spec);
        /* the bottom levels `stepgraph run` uses on a machine without GPU
         * (train.c), so that a calibrated CPU machine is simulated with the
         * priorities it was measured with */
        sg_cost_model cm;
        if (m->gpu_count > 0)
            sg_machine_cost_model(m, spec.compute_dtype, &cm);
        else
            sg_cost_model_gh200(&cm);
        if (!a.no_priorities && sg_graph_set_priorities(&g, &cm))
            rc = sg_error_set(err, SG_ENOMEM, "out of memory computing priorities");
    }
    if (!a.sched && cfg)
        a.sched = cfg->run.sched;
    sg_sim_result res;
    if (!rc) {
        sg_sim_options so = {.sched = a.sched,
                             .priorities = !a.no_priorities,
                             .steps = (int)steps,
                             .lookahead = (int)cfg->run.lookahead,
                             .optimizer_cores_share =
                                 spec.offload_optimizer &&
                                         cfg->ds.zero.offload_optimizer.super_offload
                                     ? cfg->ds.zero.offload_optimizer.cpuadam_cores_perc
                                     : 0,
                             .trace_path = a.trace,
                             .static_bandwidth = a.static_bandwidth,
                             .fitted_costs = a.fitted_costs,
                             .model = model,
                             .rollback_passes = atoi(a.rollback_passes),
                             .eager_attention = !strcmp(a.attention, "eager")};
        rc = sg_sim_run(m, &spec, &g, &so, &res, err);
    }
    if (!rc)
        rc = write_result(a.result, &a, m, model, &spec, &res, err);
    sg_graph_free(&g);
    free(model);
    free(cfg);
    free(m);
    return rc;
}

int main(int argc, char **argv)
{
    sg_error err = {0};
    sg_cleanup_on_signals();
    int rc = simulate(argc - 1, argv + 1, &err);
    if (rc) {
        fprintf(stderr, "stepgraph-sim: %s\n", err.msg[0] ? err.msg : sg_strerror(rc));
        return 1;
    }
    return 0;
}
