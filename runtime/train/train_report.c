/* train_report.c - what a training run reports about memory and its
 * summary (train.h): the host memory a run needs checked against the
 * machine's, the plan's peaks, the GPUs' peak FLOP/s, and after the run the
 * measured peaks beside the plan and the summary over the non-warm-up
 * steps. */

#define _POSIX_C_SOURCE 200809L
#include "runtime/train/trainer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "graph/memory_held.h"
#include "runtime/train/host_fit.h"
#include "runtime/train/nvme_run.h"
#include "runtime/exec/starpu_info.h"
#include "runtime/exec/buffer_cache.h"
#include "runtime/config/step_spec.h"

/* Before anything is allocated: the step's plan for the workers StarPU will
 * start (all cores but the CUDA workers' unless ncpus says; the CUDA devices
 * seen unless ncuda says), once for each rank on this host, against the RAM;
 * a load and a save hold one tensor (with several ranks, a unit) at a time
 * beside it. */
int sg_trainer_check_host_memory(const trainer *t, sg_error *err)
{
    const sg_run_options *r = &t->cfg->run;
    int devices = sg_starpu_cuda_devices();
    int ncuda = r->ncuda < 0 ? devices : (int)r->ncuda < devices ? (int)r->ncuda : devices;
    long online = sysconf(_SC_NPROCESSORS_ONLN);
    int ncpu = r->ncpus > 0 ? (int)r->ncpus : (int)(online > ncuda ? online - ncuda : 1);
    return sg_host_fit_check(&t->graph, t->have_wait ? &t->wait_graph : NULL, ncpu, ncuda,
                             t->dist ? t->dist->local_size : 1,
                             sg_nvme_disk_bytes(t->cfg, &t->graph), err);
}

static double percent_over(int64_t measured, int64_t planned)
{
    return planned > 0 ? 100.0 * ((double)measured - (double)planned) / (double)planned : 0.0;
}

/* held < 0: no model of StarPU's allocator (CPU workers only: it frees at once) */
static void print_mem_line(const char *what, int64_t measured, int64_t planned, int64_t held)
{
    printf("  peak memory, %s: measured %.1f MiB, planned %.1f MiB (%+.1f%%)", what,
           measured / 1048576.0, planned / 1048576.0, percent_over(measured, planned));
    if (held >= 0)
        printf("; as StarPU's allocator holds it %.1f MiB (%+.1f%%)", held / 1048576.0,
               percent_over(measured, held));
    putchar('\n');
}

/* What StarPU's allocator holds with CUDA workers (graph/memory_held.h), the
 * larger of the two graphs' figures; -1 each when it cannot be computed. */
static void held_peaks(const trainer *t, int64_t *host, int64_t *gpu)
{
    int64_t a[SG_MEM_COUNT], b[SG_MEM_COUNT] = {0, 0};
    if (sg_graph_memory_held(&t->graph, a) ||
        (t->have_wait && sg_graph_memory_held(&t->wait_graph, b))) {
        *host = *gpu = -1;
        return;
    }
    *host = a[SG_MEM_HOST] > b[SG_MEM_HOST] ? a[SG_MEM_HOST] : b[SG_MEM_HOST];
    *gpu = a[SG_MEM_GPU] > b[SG_MEM_GPU] ? a[SG_MEM_GPU] : b[SG_MEM_GPU];
}

/* MFU's denominator: with CUDA workers and a config that names its
 * "machine", that machine's dense GPU peak for the compute dtype times the
 * rank's CUDA workers (docs/flops.md); else 0, and no MFU is printed. The
 * machine was checked when the config loaded. */
void sg_trainer_set_peak(trainer *t)
{
    int ncpu, ncuda;
    sg_exec_worker_counts(&ncpu, &ncuda);
    t->peak_tflops = 0;
    char path[4096];
    sg_machine *m = ncuda > 0 && t->cfg->run.machine[0] ? calloc(1, sizeof *m) : NULL;
    sg_error e = {0};
    if (m && !sg_machine_resolve(t->cfg->run.machine, path, sizeof path, &e) &&
        !sg_machine_load(path, m, &e))
        t->peak_tflops = ncuda * sg_machine_gpu_peak_tflops(m, t->spec.compute_dtype);
    free(m);
}

/* The plan's peaks (sg_plan_peaks) for the workers StarPU started, once:
 * the run's graph's, or its waiting graph's where larger. Said before the
 * first step when the host's is above what StarPU may use in main memory:
 * StarPU would wait for memory no task frees (runtime/exec/stall.h). */
void sg_trainer_plan_memory(trainer *t)
{
    int ncpu, ncuda;
    int64_t limit = sg_exec_main_memory_limit(), wh = 0, wg = 0;
    sg_exec_worker_counts(&ncpu, &ncuda);
    sg_plan_peaks(&t->graph, ncpu, ncuda, &t->plan_host, &t->plan_gpu);
    if (t->have_wait)
        sg_plan_peaks(&t->wait_graph, ncpu, ncuda, &wh, &wg);
    t->plan_host = wh > t->plan_host ? wh : t->plan_host;
    t->plan_gpu = wg > t->plan_gpu ? wg : t->plan_gpu;
    /* NVMe offload: the state on disk is in RAM only in the working set
     * that StarPU's limit already counts */
    int64_t in_ram = t->plan_host - sg_nvme_disk_bytes(t->cfg, &t->graph);
    if (limit > 0 && in_ram > limit)
        fprintf(stderr,
                "stepgraph: warning: a step's plan needs %.1f MiB of main memory, more "
                "than the %.1f MiB StarPU may use (STARPU_LIMIT_CPU_MEM, else 90%% of RAM): it "
                "will likely wait for memory no task frees, and the run end with an error once "
                "no task has run for STEPGRAPH_STALL_SECONDS\n",
                in_ram / 1048576.0, limit / 1048576.0);
}

/* StarPU's count of the memory it manages (sg_exec_memory_peak) next to the
 * plan's (sg_graph_peak_memory, the same liveness). */
static void print_memory(const trainer *t, int ncpu, int ncuda)
{
    int64_t host, gpu, ph = t->plan_host, pg = t->plan_gpu;
    sg_exec_memory_peak(&t->x, &host, &gpu);
    int64_t held_host = -1, held_gpu = -1;
    if (ncuda)
        held_peaks(t, &held_host, &held_gpu);
    print_mem_line(ncuda ? "host" : "host (one memory: the GPU-space buffers live in RAM)", host,
                   ph, held_host);
    if (!ncuda && ncpu > 1) {
        int64_t po = 0, pp = 0;
        if (sg_graph_peak_memory_one_space(&t->graph, &po, &pp) == SG_OK)
            printf("  (planned for %d CPU worker%s running ready work out of program order; "
                   "in program order %.1f MiB)\n",
                   ncpu, ncpu == 1 ? "" : "s", po / 1048576.0);
    }
    if (ncuda)
        print_mem_line("gpu", gpu, pg, held_gpu);
    sg_buffer_cache_stats kept = sg_buffer_cache_get_stats();
    if (kept.installed && kept.hits + kept.maps > 0)
        printf("  buffers of 32 MiB or more: %lld mapped, %lld reused from an earlier free, "
               "%lld unmapped to stay within %.1f MiB (the most held at once)\n",
               kept.maps, kept.hits, kept.evictions, kept.high_water / 1048576.0);
    if (t->cfg->run.lookahead > 1)
        printf("  (lookahead %lld: steps overlap, the plan is of one step)\n",
               (long long)t->cfg->run.lookahead);
}

void sg_trainer_print_summary(const trainer *t)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    sg_mem_peak peak = {"host (max RSS)", (int64_t)ru.ru_maxrss * 1024};
    char buf[1024];
    sg_step_stats_format_summary(&t->stats, &peak, 1, buf, sizeof buf);
    fputs(buf, stdout);
    if (t->spec.super_offload) {
        sg_subgroup_layout lay;
        sg_subgroup_layout_compute(&t->model, &t->spec, &lay, NULL);
        int64_t speculative = t->stats.all.steps - t->waited_steps;
        printf("  SuperOffload: %lld of %lld speculative sub-group steps rolled back (clipping "
               "or overflow)",
               (long long)t->rollbacks,
               (long long)(lay.nsubgroups - lay.first_cpu) * (long long)speculative);
        if (t->have_wait)
            printf("; %lld of %lld steps waited for the gradient norm (speculation %s)",
                   (long long)t->waited_steps, (long long)t->stats.all.steps,
                   t->cfg->run.speculation);
        putchar('\n');
    }
    sg_overlap ov;
    int ncpu, ncuda;
    sg_exec_worker_counts(&ncpu, &ncuda);
    print_memory(t, ncpu, ncuda);
    if (ncuda > 0 && sg_exec_overlap(&t->x, &ov) == SG_OK) {
        printf("  GPU: busy %.1f%% of the last step (%.1f ms)", 100.0 * ov.gpu_busy,
               ov.span_s * 1e3);
        if (ov.adam_cpu_s > 0)
            printf("; CPU Adam %.1f ms, %.1f%% of it under GPU work", ov.adam_cpu_s * 1e3,
                   100.0 * ov.adam_hidden);
        putchar('\n');
    }
    fflush(stdout);
}
