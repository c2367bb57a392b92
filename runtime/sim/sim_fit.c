/* sim_fit.c - peak memory against the machine's capacities (sim_fit.h). */
#include "runtime/sim/sim_fit.h"

#include <stdio.h>
#include <string.h>

#include "graph/analysis.h"
#include "graph/disk_tier.h"

int sg_sim_check_fit(const sg_graph *g, const sg_machine *m, sg_sim_fit *out)
{
    return sg_sim_check_fit_spec(g, NULL, m, out);
}

/* The state on disk against the machine's disk (after the memories fit). */
static void check_disk(const sg_machine *m, sg_sim_fit *out)
{
    const double gib = 1073741824.0;
    if (out->disk_bytes <= 0 || !out->fits || out->disk_bytes <= out->disk_capacity)
        return;
    out->fits = 0;
    if (out->disk_capacity <= 0)
        snprintf(out->why, sizeof out->why,
                 "%.1f GiB of state on disk (\"nvme\"), and %s's "
                 "file gives no disk",
                 out->disk_bytes / gib, m->name);
    else
        snprintf(out->why, sizeof out->why, "disk %.1f GiB > %.1f GiB (%g GB) of disk on %s",
                 out->disk_bytes / gib, out->disk_capacity / gib, m->disk_capacity_gb, m->name);
}

int sg_sim_check_fit_spec(const sg_graph *g, const sg_step_spec *spec, const sg_machine *m,
                          sg_sim_fit *out)
{
    memset(out, 0, sizeof *out);
    int64_t peak[SG_MEM_COUNT], persistent[SG_MEM_COUNT];
    sg_disk_tier t;
    if (sg_graph_peak_memory(g, peak, persistent))
        return SG_ENOMEM;
    memset(&t, 0, sizeof t);
    if (spec && sg_disk_tier_compute(g, spec, &t))
        return SG_ENOMEM;
    out->gpu_bytes = (double)peak[SG_MEM_GPU];
    out->host_bytes = (double)(peak[SG_MEM_HOST] - sg_disk_tier_ram_saved(&t));
    out->disk_bytes = (double)t.bytes;
    out->disk_capacity = m->disk_capacity_gb * 1e9;
    out->disk_ram_bytes = (double)t.ram_bytes;
    out->disk_read_bytes = (double)t.read_bytes;
    out->disk_write_bytes = (double)t.write_bytes;
    out->host_capacity = m->cpu_memory_gb * 1e9;
    out->gpu_capacity = m->unified_memory ? out->host_capacity : m->gpu_memory_gb * 1e9;
    out->fits = 1;
    /* GiB, as graph --summary, fit and run print memory; the machine file's
     * capacities are decimal GB, as vendors quote them (said beside) */
    const double gib = 1073741824.0;
    if (m->gpu_count == 0 || m->unified_memory) {
        double all = out->gpu_bytes + out->host_bytes;
        if (all > out->host_capacity) {
            out->fits = 0;
            snprintf(out->why, sizeof out->why,
                     "needs %.1f GiB (GPU-side %.1f + host %.1f) in %s's %.1f GiB (%g GB) of %s "
                     "memory",
                     all / gib, out->gpu_bytes / gib, out->host_bytes / gib, m->name,
                     out->host_capacity / gib, m->cpu_memory_gb,
                     m->unified_memory ? "unified" : "host");
        }
        check_disk(m, out);
        return SG_OK;
    }
    if (out->gpu_bytes > out->gpu_capacity) {
        out->fits = 0;
        snprintf(out->why, sizeof out->why,
                 "GPU peak %.1f GiB > %.1f GiB (%g GB) of GPU memory "
                 "on %s",
                 out->gpu_bytes / gib, out->gpu_capacity / gib, m->gpu_memory_gb, m->name);
    } else if (out->host_bytes > out->host_capacity) {
        out->fits = 0;
        snprintf(out->why, sizeof out->why,
                 "host peak %.1f GiB > %.1f GiB (%g GB) of host memory "
                 "on %s",
                 out->host_bytes / gib, out->host_capacity / gib, m->cpu_memory_gb, m->name);
    }
    check_disk(m, out);
    return SG_OK;
}
