/* sim_report.c - `stepgraph simulate`'s report and --json (see sim_report.h). */
#include "runtime/cli/sim_report.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "common/atomic_file.h"
#include "graph/export.h"
#include "runtime/config/machine.h"
#include "runtime/train/step_log.h"

#define MAX_WAYS 6
#define WAY_LEN 4400 /* a way: a command with CONFIG's path */

int sg_sim_view_cold(const sg_sim_view *v)
{
    /* with two steps in flight the second still overlaps the first's start */
    int warm_from = v->pt->lookahead >= 2 ? 3 : 2;
    return v->steps < warm_from;
}

static long long machine_ranks(const sg_machine *m)
{
    return (long long)m->nodes * (m->gpu_count > 0 ? m->gpu_count : 1);
}

static const char *cast_name(sg_cast_placement c)
{
    return c == SG_CAST_AUTO  ? "auto"
           : c == SG_CAST_CPU ? "cpu"
           : c == SG_CAST_GPU ? "gpu"
                              : "scheduler";
}

/* What speculation the simulated step does: the run's option as simulate
 * uses it (adaptive is simulated speculating, as always). */
static const char *speculation_text(const sg_sim_view *v)
{
    if (!v->pt->spec.super_offload)
        return "n/a (no SuperOffload)";
    if (!strcmp(v->pt->speculation, "never"))
        return "never (every step waits for the gradient norm)";
    if (!strcmp(v->pt->speculation, "adaptive"))
        return "adaptive (simulated speculating, as always)";
    return v->pt->speculation;
}

/* "<name>x2" for a one-rank machine whose two-rank sibling is shipped
 * (mi300a -> mi300ax2; gh200-120gb -> gh200x2), else "" */
static void two_rank_sibling(const sg_machine *m, char *out, size_t n)
{
    char name[80], path[4096];
    sg_error e = {0};
    snprintf(name, sizeof name, "%sx2", m->name);
    if (sg_machine_resolve(name, path, sizeof path, &e) == 0) {
        snprintf(out, n, "%s", name);
        return;
    }
    const char *dash = strchr(m->name, '-');
    snprintf(name, sizeof name, "%.*sx2", dash ? (int)(dash - m->name) : 0, m->name);
    out[0] = '\0';
    if (dash && sg_machine_resolve(name, path, sizeof path, &e) == 0)
        snprintf(out, n, "%s", name);
}

/* The ways a step that does not fit can be made to: more ranks (ZeRO
 * shards the state over them), a smaller model (`fit` finds the largest),
 * parameter and optimizer offload, checkpointing. Returns the count. */
static int ways_out(const sg_sim_view *v, char ways[MAX_WAYS][WAY_LEN])
{
    const sg_machine *m = &v->sm->machine;
    const sg_step_spec *s = &v->pt->spec;
    int n = 0;
    long long ranks = machine_ranks(m);
    char sib[80];
    /* ZeRO-0 replicates the state: more ranks do not make it smaller */
    if (s->zero_stage >= 1 && ranks > s->dp_size)
        snprintf(ways[n++], WAY_LEN,
                 "--dp_size %lld: ZeRO shards the state over the %lld "
                 "ranks of %s",
                 ranks, ranks, m->name);
    else if (s->zero_stage >= 1 && (two_rank_sibling(m, sib, sizeof sib), sib[0]) &&
             s->dp_size == 1)
        snprintf(ways[n++], WAY_LEN,
                 "--machine %s --dp_size 2: two ranks, ZeRO shards the "
                 "state over both",
                 sib);
    snprintf(ways[n++], WAY_LEN,
             "stepgraph fit %s --machine %s: the largest model of the "
             "family that fits",
             v->config ? v->config : "CONFIG", m->name);
    if (s->zero_stage == 3 && !s->offload_param)
        snprintf(ways[n++], WAY_LEN,
                 "--set zero_optimization.offload_param.device=cpu: parameter "
                 "offload (ZeRO-3)");
    if (!s->offload_optimizer)
        snprintf(ways[n++], WAY_LEN,
                 "--set zero_optimization.offload_optimizer.device=cpu: "
                 "optimizer offload");
    /* ZeRO-Infinity: the host is what does not fit and the machine has a disk */
    const sg_sim_fit *f = &v->pt->fit;
    if (s->offload_optimizer && !s->nvme_optimizer && !s->super_offload &&
        m->disk_capacity_gb > 0 && f->host_bytes > f->host_capacity)
        snprintf(ways[n++], WAY_LEN,
                 "--set zero_optimization.offload_optimizer.device=nvme --set "
                 "zero_optimization.offload_optimizer.nvme_path=DIR: the optimizer state on %s's "
                 "disk (ZeRO-Infinity)",
                 m->name);
    if (!s->activation_checkpointing)
        snprintf(ways[n++], WAY_LEN, "--activation_checkpointing: keep one activation per layer");
    return n;
}

static void print_links(const sg_sim_report *r)
{
    for (int l = SG_LINK_H2D; l < SG_LINK_COUNT; l++)
        printf(
            "  Link %-4s         %9.3f GB in %lld transfers, %.2f ms at the modelled bandwidth\n",
            sg_link_dir_name((sg_link_dir)l), (double)r->link_bytes[l] * 1e-9,
            (long long)r->link_transfers[l], r->link_s[l] * 1e3);
}

/* The chunk of a full sub-group's CPU optimizer chain ("auto" resolved for
 * the simulated machine's workers); 0: untiled or no CPU sub-group. */
static long long tile_of(const sg_step_spec *s)
{
    return s->offload_optimizer ? (long long)sg_optimizer_tile_for(s, s->sub_group_size) : 0;
}

static void print_head(const sg_sim_view *v, const sg_sim_report *r)
{
    const sg_machine *m = &v->sm->machine;
    const sg_step_spec *s = &v->pt->spec;
    if (r)
        printf("Simulated on %s (%d CPU + %d GPU workers per rank), %s, priorities %s, %s\n",
               m->name, r->ncpu, r->ncuda, v->sched, v->priorities ? "on" : "off",
               m->calibration_dir[0]
                   ? (!strcmp(r->cost, "fitted") ? "calibrated, task times fitted on its node times"
                                                 : "calibrated history models")
               : r->static_bandwidth ? "roofline cost model (static bandwidth share)"
                                     : "roofline cost model (shared bandwidth)");
    printf("  %s, ZeRO-%d, %s, micro-batch %lld x accumulation %lld, seq %lld%s%s%s\n",
           v->pt->model.name, s->zero_stage, sg_dtype_name(s->compute_dtype),
           (long long)s->micro_batch, (long long)s->grad_accum, (long long)s->seq_len,
           s->offload_optimizer ? ", optimizer offloaded" : "",
           !s->super_offload ? ""
           : strcmp(v->pt->speculation, "never") == 0
               ? " (SuperOffload, waiting for the gradient norm)"
               : " (SuperOffload)",
           s->offload_param ? ", parameters offloaded" : "");
    printf("  Settings          offload ratio %g, sub_group_size %lld, cast_placement %s, "
           "optimizer_tile %lld%s, speculation %s\n",
           s->offload_optimizer ? s->offload_ratio : 0.0, (long long)s->sub_group_size,
           cast_name(s->cast_placement), tile_of(s),
           !tile_of(s)                                   ? " (untiled)"
           : s->optimizer_tile == SG_OPTIMIZER_TILE_AUTO ? " (auto, per full sub-group)"
                                                         : "",
           speculation_text(v));
    long long ranks = machine_ranks(m);
    if (ranks > 1)
        printf("  Ranks             one rank of dp_size %lld simulated, on one of the %lld of "
               "%s%s\n",
               (long long)s->dp_size, ranks, m->name,
               s->dp_size < ranks ? " (--dp_size N to shard ZeRO over more)" : "");
    if (v->cost_note)
        printf("  Cost              %s\n", v->cost_note);
    if (v->pt->eager_attention)
        printf("  Attention         eager: Hugging Face's eager ops, the scores materialised "
               "(--attention)\n");
}

static void print_rates(const sg_sim_view *v, const sg_sim_report *r)
{
    const sg_machine *m = &v->sm->machine;
    const sg_step_spec *s = &v->pt->spec;
    const char *per = m->gpu_count > 0 ? "GPU" : "rank";
    if (isfinite(r->tflops))
        printf("  TFLOPS            %9.2f per %s (DeepSpeedExamples' formula, recompute "
               "counted, as DeepSpeed's log)\n",
               r->tflops, per);
    const sg_model *mo = &v->pt->model;
    if (mo->num_experts > 0) {
        /* MoE: the dense formula does not apply (n/a, as the step log); the
         * active-parameter estimate is labelled as such */
        double act = sg_model_active_tflops(mo, s->micro_batch * s->grad_accum, s->seq_len,
                                            s->activation_checkpointing, r->step_s);
        printf("  TFLOPS                  n/a (MoE)\n");
        double np = (double)sg_model_active_params(mo);
        if (isfinite(act))
            printf("  Active TFLOPS     %9.2f per %s (%.2f %s active parameters)\n", act, per,
                   np >= 1e9 ? np / 1e9 : np / 1e6, np >= 1e9 ? "B" : "M");
    }
    if (isfinite(r->model_tflops)) {
        printf("  Model TFLOPS      %9.2f per %s (6 P tokens + causal attention, no recompute)",
               r->model_tflops, per);
        if (isfinite(r->mfu))
            printf(": MFU %.1f%% of %.0f TFLOP/s", 100 * r->mfu,
                   sg_machine_gpu_peak_tflops(m, s->compute_dtype));
        printf("\n");
    }
    if (isfinite(r->megatron_tflops))
        printf("  Megatron TFLOPS   %9.2f per %s (Megatron-LM's formula, full multi-head "
               "attention)\n",
               r->megatron_tflops, per);
}

#define GIB 1073741824.0 /* memory in GiB, as graph --summary and fit print it */

static void print_memory(const sg_sim_view *v)
{
    const sg_machine *m = &v->sm->machine;
    const sg_sim_fit *f = &v->pt->fit;
    if (m->gpu_count > 0 && !m->unified_memory)
        printf("  Peak memory       GPU %.2f GiB of %.1f, host %.2f GiB of %.1f\n",
               f->gpu_bytes / GIB, f->gpu_capacity / GIB, f->host_bytes / GIB,
               f->host_capacity / GIB);
    else
        printf("  Peak memory       %.2f GiB of %.1f GiB of %s memory\n",
               (f->gpu_bytes + f->host_bytes) / GIB, f->host_capacity / GIB,
               m->unified_memory ? "unified" : "host");
    if (f->disk_bytes > 0) /* ZeRO-Infinity (graph/disk_tier.h) */
        printf("  Disk (nvme)       %.2f GiB of state of %.1f GiB; RAM working set %.2f GiB "
               "(in the host peak); per step %.3f GB read, %.3f GB written\n",
               f->disk_bytes / GIB, f->disk_capacity / GIB, f->disk_ram_bytes / GIB,
               f->disk_read_bytes * 1e-9, f->disk_write_bytes * 1e-9);
}

/* The simulated disk of the reported step (runtime/sim/sim_disk.h). */
static void print_disk(const sg_sim_view *v, const sg_sim_report *r)
{
    const sg_machine *m = &v->sm->machine;
    if (r->disk_read_bytes + r->disk_write_bytes <= 0)
        return;
    printf("  Disk              %9.3f GB read, %.3f GB written, busy %.2f ms (%.1f%% of the "
           "step) at %g / %g GB/s\n",
           (double)r->disk_read_bytes * 1e-9, (double)r->disk_write_bytes * 1e-9, r->disk_s * 1e3,
           r->step_s > 0 ? 100.0 * r->disk_s / r->step_s : 0.0, m->disk_read_gbs,
           m->disk_write_gbs);
}

void sg_sim_view_print(const sg_sim_view *v, const sg_sim_report *r)
{
    const sg_machine *m = &v->sm->machine;
    if (!r) {
        char ways[MAX_WAYS][WAY_LEN];
        int n = ways_out(v, ways);
        printf("Does not fit on %s: %s\n", m->name, v->pt->fit.why);
        print_head(v, NULL);
        print_memory(v);
        printf("  Ways out:\n");
        for (int i = 0; i < n; i++)
            printf("    %s\n", ways[i]);
        return;
    }
    print_head(v, r);
    const sg_step_spec *s = &v->pt->spec;
    double tokens = (double)(s->micro_batch * s->grad_accum * s->seq_len);
    printf("  Step time         %9.2f ms, step %d of %d%s\n", r->step_s * 1e3, v->steps, v->steps,
           v->pt->lookahead >= 2 && v->steps >= 2
               ? " (the interval between the last two step ends: steps in flight)"
               : "");
    if (sg_sim_view_cold(v))
        printf("  Cold step         the reported step still carries the first one's start "
               "(every buffer at home): --steps 3 (the default) reports a warm one\n");
    const char *by = "";
    double roof = sg_sim_point_lower_bound(v->pt, m, &by, NULL);
    if (m->calibration_dir[0]) {
        /* measured task times need not respect the roofline of the
         * machine's figures: the bound here is the work of the times used */
        if (isfinite(r->work_bound_s) && r->work_bound_s > 0)
            printf("  Lower bound       %9.2f ms, set by the %s workers' busy time in the "
                   "step (the task times used, over the workers): the step is %.2fx it\n",
                   r->work_bound_s * 1e3, r->work_bound_by, r->step_s / r->work_bound_s);
        if (roof > 0)
            printf("  Roofline          %9.2f ms, set by %s, from the machine's figures: not "
                   "a bound of measured task times\n",
                   roof * 1e3, by);
    } else if (roof > 0) {
        printf("  Lower bound       %9.2f ms, set by %s: the step is %.2fx it\n", roof * 1e3, by,
               r->step_s / roof);
    }
    printf("  Tokens/s          %9.1f per rank\n", tokens / r->step_s);
    print_rates(v, r);
    if (r->ncuda > 0)
        printf("  GPU busy          %9.1f %%\n", 100 * r->gpu_busy);
    if (isfinite(r->adam_hidden) && r->ncuda > 0)
        printf("  CPU Adam hidden   %9.1f %% under GPU work (of %.1f ms of CPU Adam task time, "
               "summed over the workers)\n",
               100 * r->adam_hidden, r->adam_cpu_s * 1e3);
    print_memory(v);
    print_links(r);
    print_disk(v, r);
}

/* `"key":v` with a leading comma; null when not finite */
static void jnum(FILE *f, const char *key, double v)
{
    if (isfinite(v))
        fprintf(f, ",\"%s\":%.9g", key, v);
    else
        fprintf(f, ",\"%s\":null", key);
}

static void write_settings(FILE *f, const sg_sim_view *v)
{
    const sg_step_spec *s = &v->pt->spec;
    fputs(",\"model\":", f);
    sg_json_write_string(f, v->pt->model.name);
    fprintf(f,
            ",\"settings\":{\"zero_stage\":%d,\"dp_size\":%lld,\"micro_batch\":%lld,"
            "\"grad_accum\":%lld,\"seq_len\":%lld,\"compute_dtype\":\"%s\","
            "\"activation_checkpointing\":%s,\"offload_optimizer\":%s,\"ratio\":%.9g,"
            "\"super_offload\":%s,\"offload_param\":%s,\"sub_group_size\":%lld,"
            "\"cast_placement\":\"%s\",\"optimizer_tile\":%lld,\"optimizer_tile_auto\":%s,"
            "\"speculation\":",
            s->zero_stage, (long long)s->dp_size, (long long)s->micro_batch,
            (long long)s->grad_accum, (long long)s->seq_len, sg_dtype_name(s->compute_dtype),
            s->activation_checkpointing ? "true" : "false", s->offload_optimizer ? "true" : "false",
            s->offload_optimizer ? s->offload_ratio : 0.0, s->super_offload ? "true" : "false",
            s->offload_param ? "true" : "false", (long long)s->sub_group_size,
            cast_name(s->cast_placement), tile_of(s),
            s->optimizer_tile == SG_OPTIMIZER_TILE_AUTO ? "true" : "false");
    sg_json_write_string(f, v->pt->speculation);
    fprintf(f, ",\"lookahead\":%lld,\"attention\":\"%s\"}", (long long)v->pt->lookahead,
            v->pt->eager_attention ? "eager" : "fused");
    fprintf(f,
            ",\"ranks_simulated\":1,\"machine_ranks\":%lld,\"steps\":%d,\"reported_step\":%d,"
            "\"cold\":%s",
            machine_ranks(&v->sm->machine), v->steps, v->steps,
            sg_sim_view_cold(v) ? "true" : "false");
}

int sg_sim_view_write_json(const char *path, const sg_sim_view *v, const sg_sim_report *r,
                           sg_error *err)
{
    sg_atomic_file af;
    int rc = sg_atomic_open(&af, path, err);
    if (rc)
        return rc;
    FILE *f = af.fp;
    const sg_sim_fit *fit = &v->pt->fit;
    fputs("{\"machine\":", f); // names and the reason are escaped: a quote stays JSON
    sg_json_write_string(f, v->sm->machine.name);
    fputs(",\"sched\":", f);
    sg_json_write_string(f, v->sched);
    fprintf(f, ",\"priorities\":%s,\"fits\":%s", v->priorities ? "true" : "false",
            fit->fits ? "true" : "false");
    fprintf(f, ",\"gpu_peak_bytes\":%.0f,\"host_peak_bytes\":%.0f", fit->gpu_bytes,
            fit->host_bytes);
    if (fit->disk_bytes > 0)
        fprintf(f, ",\"disk_bytes\":%.0f,\"disk_ram_bytes\":%.0f", fit->disk_bytes,
                fit->disk_ram_bytes);
    write_settings(f, v);
    if (r) {
        const char *by = "";
        double roof = sg_sim_point_lower_bound(v->pt, &v->sm->machine, &by, NULL);
        /* calibrated: the work bound of the task times used (above) */
        int cal = v->sm->machine.calibration_dir[0] != '\0';
        char work_by[40];
        snprintf(work_by, sizeof work_by, "%s workers' busy time", r->work_bound_by);
        double bound = cal ? r->work_bound_s : roof > 0 ? roof : NAN;
        fputs(",\"cost\":", f);
        sg_json_write_string(f, r->cost);
        /* tflops and adam_hidden: -1 when unknown, as before this file */
        fprintf(f, ",\"step_s\":%.9g,\"tflops\":%.9g,\"gpu_busy\":%.9g,\"adam_hidden\":%.9g",
                r->step_s, isfinite(r->tflops) ? r->tflops : -1, r->gpu_busy,
                isfinite(r->adam_hidden) ? r->adam_hidden : -1);
        jnum(f, "model_tflops", r->model_tflops);
        jnum(f, "megatron_tflops", r->megatron_tflops);
        jnum(f, "mfu", r->mfu);
        jnum(f, "bound_s", bound);
        fputs(",\"bound_by\":", f);
        sg_json_write_string(f, !isfinite(bound) ? "" : cal ? work_by : by);
        jnum(f, "roofline_s", roof > 0 ? roof : NAN);
        if (r->disk_read_bytes + r->disk_write_bytes > 0)
            fprintf(f, ",\"disk_read_bytes\":%lld,\"disk_write_bytes\":%lld,\"disk_s\":%.9g",
                    (long long)r->disk_read_bytes, (long long)r->disk_write_bytes, r->disk_s);
        fputs(",\"roofline_by\":", f);
        sg_json_write_string(f, roof > 0 ? by : "");
    } else {
        char ways[MAX_WAYS][WAY_LEN];
        int n = ways_out(v, ways);
        fputs(",\"why\":", f);
        sg_json_write_string(f, fit->why);
        fputs(",\"ways_out\":[", f);
        for (int i = 0; i < n; i++) {
            if (i)
                fputc(',', f);
            sg_json_write_string(f, ways[i]);
        }
        fputc(']', f);
    }
    if (v->cost_note) {
        fputs(",\"cost_note\":", f);
        sg_json_write_string(f, v->cost_note);
    }
    fprintf(f, "}\n");
    if (ferror(f))
        return sg_atomic_fail(&af, SG_EIO, err);
    return sg_atomic_commit(&af, err);
}
