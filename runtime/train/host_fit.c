/* host_fit.c - the run's main memory against this machine's (host_fit.h). */
#include "runtime/train/host_fit.h"

#include <stdio.h>

#include "common/host_ram.h"
#include "graph/analysis.h"
#include "graph/peak_workers.h"

void sg_plan_peaks(const sg_graph *g, int ncpu, int ncuda, int64_t *host, int64_t *gpu)
{
    int64_t peak[SG_MEM_COUNT], pers[SG_MEM_COUNT], one, one_pers;
    *host = *gpu = 0;
    if (ncuda == 0) {
        int rc = ncpu > 1 ? sg_graph_peak_memory_workers(g, ncpu, &one, &one_pers)
                          : sg_graph_peak_memory_one_space(g, &one, &one_pers);
        if (rc == SG_OK)
            *host = one;
        return;
    }
    if (sg_graph_peak_memory(g, peak, pers) == SG_OK) {
        *host = peak[SG_MEM_HOST] + pers[SG_MEM_GPU];
        *gpu = peak[SG_MEM_GPU];
    }
}

int sg_host_fit_check(const sg_graph *g, const sg_graph *wait, int ncpu, int ncuda, int ranks_here,
                      int64_t on_disk, sg_error *err)
{
    double ram = sg_host_ram_bytes();
    if (ram <= 0)
        return SG_OK;
    int64_t host, gpu, wait_host = 0;
    sg_plan_peaks(g, ncpu, ncuda, &host, &gpu);
    if (wait)
        sg_plan_peaks(wait, ncpu, ncuda, &wait_host, &gpu);
    host = wait_host > host ? wait_host : host;
    host -= on_disk;
    int ranks = ranks_here > 1 ? ranks_here : 1;
    double need = (double)host * ranks;
    if (need <= ram)
        return SG_OK;
    const double gib = 1024.0 * 1024.0 * 1024.0;
    char each[96] = "";
    if (ranks > 1)
        snprintf(each, sizeof each, " on each of the %d ranks on this host", ranks);
    return sg_error_set(err, SG_ENOMEM,
                        "this run needs at least %.1f GiB of main memory and the machine has "
                        "%.1f GiB: the step's plan holds %.1f GiB there%s with %d CPU and %d "
                        "CUDA worker%s (%s); use a smaller model, sequence (--max_length) or "
                        "micro batch, activation checkpointing, %sor a machine with more memory",
                        need / gib, ram / gib, (double)host / gib, each, ncpu, ncuda,
                        ncuda == 1 ? "" : "s",
                        ncuda > 0 ? "its host peak and the host copies of the GPU's state"
                                  : "without a GPU every buffer is in main memory",
                        ranks > 1 ? "a higher ZeRO stage, fewer ranks on this host, " : "");
}
