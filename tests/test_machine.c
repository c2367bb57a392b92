/* test_machine.c - machine models: the shipped files load with their cited
 * figures, bad files are refused with the JSON path, and the cost model
 * behaves (a faster link or more cores never lengthens the critical path). */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "graph/analysis.h"
#include "graph/compile.h"
#include "graph/export.h"
#include "models/model.h"
#include "runtime/config/machine.h"
#include "tests/tap.h"
#include "tests/test_util.h"

static int load(const char *rel, sg_machine *m, sg_error *err)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", srcdir(), rel);
    return sg_machine_load(path, m, err);
}

static double critical_path(const sg_graph *g, const sg_cost_model *cm)
{
    sg_summary s;
    sg_summary_compute(g, cm, &s);
    return s.critical_path_s;
}

int main(void)
{
    static const char *const shipped[] = {"gh200",     "gh200-480gb", "gh200-120gb", "gh200x2",
                                          "gh200x4",   "mi300a",      "mi300ax2",    "mi300ax4",
                                          "h100-pcie", "h100-sxm",    "h200"};
    const int nshipped = (int)(sizeof shipped / sizeof *shipped);
    sg_machine m;
    sg_error err = {0};
    for (int i = 0; i < nshipped; i++) {
        char rel[128];
        snprintf(rel, sizeof rel, "configs/machines/%s.json", shipped[i]);
        int rc = load(rel, &m, &err);
        ok(rc == 0, "%s loads", shipped[i]);
        if (rc)
            tap_diag("%s", err.msg);
        else
            is_str(m.name, shipped[i], "%s: name matches the file", shipped[i]);
    }
    load("configs/machines/gh200.json", &m, &err);
    sg_cost_model cm;
    sg_machine_cost_model(&m, SG_BF16, &cm);
    is_close(cm.gpu_flops, 989e12, 1e-12, "gh200: 989 TFLOP/s bf16");
    is_close(cm.link_bw[SG_LINK_H2D], 450e9, 1e-12, "gh200: NVLink-C2C 450 GB/s per direction");
    is_int(m.cpu_cores, 72, "gh200: 72 Grace cores");
    /* MFU's denominator (docs/flops.md): one GPU's dense peak for the dtype */
    ok(sg_machine_gpu_peak_tflops(&m, SG_BF16) == 989 &&
           sg_machine_gpu_peak_tflops(&m, SG_F32) == 494,
       "gh200: GPU peak for MFU, 989 TFLOP/s bf16, 494 fp32");
    m.gpu_count = 0;
    ok(sg_machine_gpu_peak_tflops(&m, SG_BF16) == 0, "no GPU: no peak (no MFU)");
    load("configs/machines/mi300a.json", &m, &err);
    sg_machine_cost_model(&m, SG_BF16, &cm);
    ok(cm.unified_memory && m.cpu_cores == 24, "mi300a: unified memory, 24 cores");
    ok(cm.link_bw[SG_LINK_H2D] >= 5e12 && cm.link_latency < 1e-6,
       "mi300a: host link at memory speed, tiny latency");
    load("configs/machines/h100-pcie.json", &m, &err);
    sg_machine_cost_model(&m, SG_BF16, &cm);
    ok(cm.link_bw[SG_LINK_H2D] < 64e9 && m.numa_nodes == 2,
       "h100-pcie: PCIe Gen5 x16, two sockets");

    /* figures against the cited sources (NVIDIA's Grace benchmarking guide,
     * STREAM Triad: 410-486 GB/s with 120 GB, 288-342 GB/s with 480 GB; AMD's
     * MI300A: 228 CUs x 2048 FLOP/clock x 2.1 GHz bf16, 5.3 TB/s shared HBM3) */
    sg_machine a, b;
    load("configs/machines/gh200-480gb.json", &a, &err);
    load("configs/machines/gh200-120gb.json", &b, &err);
    ok(a.cpu_memory_gb == 480 && a.cpu_memory_bw_gbs >= 288 && a.cpu_memory_bw_gbs <= 342,
       "gh200-480gb: 480 GB at a bandwidth inside STREAM's 288-342 GB/s (%g)", a.cpu_memory_bw_gbs);
    ok(b.cpu_memory_gb == 120 && b.cpu_memory_bw_gbs >= 410 && b.cpu_memory_bw_gbs <= 486,
       "gh200-120gb: 120 GB at a bandwidth inside STREAM's 410-486 GB/s (%g)", b.cpu_memory_bw_gbs);
    load("configs/machines/gh200.json", &m, &err);
    snprintf(m.name, sizeof m.name, "%s", a.name);
    ok(memcmp(&m, &a, sizeof m) == 0, "gh200 is the 480 GB variant: every figure as gh200-480gb");
    static const struct {
        const char *file;
        int nodes;
    } multi[] = {{"gh200x2", 2}, {"gh200x4", 4}, {"mi300ax2", 2}, {"mi300ax4", 4}};
    for (size_t i = 0; i < sizeof multi / sizeof *multi; i++) {
        char rel[128];
        snprintf(rel, sizeof rel, "configs/machines/%s.json", multi[i].file);
        load(rel, &m, &err);
        ok(m.nodes == multi[i].nodes && m.interconnect[0] && m.gpu_gpu_gbs > 0,
           "%s: %d nodes with a named interconnect (%s) at %g GB/s", multi[i].file, multi[i].nodes,
           m.interconnect, m.gpu_gpu_gbs);
    }
    load("configs/machines/mi300a.json", &m, &err);
    is_close(m.gpu_tflops_bf16, 228 * 2048 * 2.1e9 / 1e12, 1e-3,
             "mi300a: bf16 dense peak 980.6 TFLOP/s");
    ok(m.unified_memory && m.shared_memory_bw_gbs == 5300 && m.gpu_memory_gb == 128 &&
           m.cpu_memory_gb == 128 && m.cpu_cores == 24,
       "mi300a: 24 cores and one 128 GB pool at 5.3 TB/s shared by CPU and GPU");
    load("configs/machines/mi300ax4.json", &m, &err);
    ok(m.unified_memory && m.shared_memory_bw_gbs == 5300 && m.cpu_memory_gb == 128,
       "mi300ax4: each APU as mi300a");

    static const struct {
        const char *file, *expect;
    } bad[] = {
        {"no-sources", "sources"},
        {"negative-bw", "cpu.memory_bw_gbs"},
        {"efficiency-above-one", "efficiency.gemm"},
        {"unknown-key", "links.h2d_gbps"},
        {"missing-tflops", "gpu.tflops.bf16"},
        {"cores-fraction", "cpu.cores"},
        {"cores-huge", "cpu.cores"},
        {"gpu-count-huge", "gpu.count"},
        {"bool-string", "unified_memory"},
        {"missing-memory-bw", "cpu.memory_bw_gbs is missing"},
        {"negative-gpu-bw", "gpu.memory_bw_gbs"},
        {"tflops-in-flops", "gpu.tflops.bf16"},
        {"cpu-bw-in-mbs", "cpu.memory_bw_gbs"},
        {"ghz-in-mhz", "cpu.ghz"},
        {"link-absurd", "links.h2d_gbs"},
        {"link-zero", "links.d2h_gbs"},
        {"latency-absurd", "links.latency_us"},
        {"gpu-memory-absurd", "gpu.memory_gb"},
        {"core-above-socket", "cpu.core_bw_gbs"},
        {"unified-no-shared-bw", "shared_memory_bw_gbs is missing"},
        {"unified-two-pools", "gpu.memory_gb"},
        {"unified-shared-below-gpu", "gpu.memory_bw_gbs"},
        {"shared-bw-not-unified", "shared_memory_bw_gbs"},
        {"multi-no-interconnect", "links.interconnect"},
        {"multi-no-gpu-gpu", "links.gpu_gpu_gbs"},
        {"disk-missing-write", "disk.write_gbs is missing"},
        {"disk-read-in-mbs", "disk.read_gbs"},
        {"disk-zero-capacity", "disk.capacity_gb"},
        {"disk-unknown-key", "disk.read_mbs"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        char rel[128];
        snprintf(rel, sizeof rel, "tests/data/bad-machines/%s.json", bad[i].file);
        memset(&err, 0, sizeof err);
        int rc = load(rel, &m, &err);
        ok(rc == SG_EINVAL, "bad machine %s is refused", bad[i].file);
        like(err.msg, bad[i].expect, "... and the message names %s", bad[i].expect);
    }
    char path[256];
    ok(sg_machine_resolve("no-such-machine", path, sizeof path, &err) == SG_ENOENT,
       "an unknown machine name is not found");
    like(err.msg, "gh200", "... and the message lists the shipped machines");

    /* the fit check of `graph --summary` on unified memory (GiB as printed:
     * 140e9 B = 130.4 GiB, 128e9 B = 119.2 GiB): GPU and host
     * bytes count once against the one 128 GB pool (each alone would fit) */
    load("configs/machines/mi300a.json", &m, &err);
    sg_machine_cost_model(&m, SG_BF16, &cm);
    static const struct {
        double gpu_gb, host_gb;
        const char *expect;
    } fit[] = {{100, 40, "unified memory: 130.4 GiB needed of 119.2 GiB: DOES NOT FIT"},
               {60, 60, "unified memory: 111.8 GiB needed of 119.2 GiB: fits"}};
    for (size_t i = 0; i < sizeof fit / sizeof *fit; i++) {
        sg_graph g;
        sg_graph_init(&g);
        sg_graph_add_buffer(&g, "w", (int64_t)(fit[i].gpu_gb * 1e9 / 4), SG_F32, SG_MEM_GPU, 1);
        sg_graph_add_buffer(&g, "h", (int64_t)(fit[i].host_gb * 1e9 / 4), SG_F32, SG_MEM_HOST, 1);
        sg_graph_finalize(&g, &err);
        sg_summary sum;
        sg_summary_compute(&g, &cm, &sum);
        char *text = NULL;
        size_t len = 0;
        FILE *mem = open_memstream(&text, &len);
        sg_summary_print(&sum, mem);
        fclose(mem);
        like(text, fit[i].expect, "mi300a, %g GB GPU-side + %g GB host: %s", fit[i].gpu_gb,
             fit[i].host_gb, fit[i].expect);
        ok(!strstr(text, "host memory:"), "... and no separate host-memory line");
        free(text);
        sg_graph_free(&g);
    }

    /* monotonicity of the ideal-machine critical path */
    sg_model *model = calloc(1, sizeof *model);
    if (load_model("tiny-llama", model)) {
        tap_skip(3, "tiny-llama missing");
    } else {
        sg_step_spec s;
        superoffload_spec(&s, 1.0);
        s.seq_len = 128;
        sg_graph g;
        sg_graph_init(&g);
        sg_compile_step(model, &s, &g, &err);
        load("configs/machines/h100-pcie.json", &m, &err);
        sg_machine_cost_model(&m, SG_BF16, &cm);
        double base = critical_path(&g, &cm);
        sg_machine fast = m;
        fast.h2d_gbs *= 8;
        fast.d2h_gbs *= 8;
        sg_machine_cost_model(&fast, SG_BF16, &cm);
        double faster_link = critical_path(&g, &cm);
        ok(faster_link <= base,
           "a faster host link never lengthens the critical path (%.4f <= %.4f ms)",
           faster_link * 1e3, base * 1e3);
        ok(faster_link < base, "... and shortens it for an offloaded step");
        fast = m;
        fast.cpu_cores *= 2;
        sg_machine_cost_model(&fast, SG_BF16, &cm);
        ok(critical_path(&g, &cm) <= base, "more cores never lengthen the critical path");
        sg_graph_free(&g);
    }
    free(model);
    return tap_done();
}
