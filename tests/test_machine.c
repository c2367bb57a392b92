/* test_machine.c - machine models: the shipped files load with their cited
 * figures, bad files are refused with the JSON path, and the cost model
 * behaves (a faster link or more cores never lengthens the critical path). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "graph/analysis.h"
#include "graph/compile.h"
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
    static const char *const shipped[] = {"gh200", "gh200x4", "mi300a", "h100-pcie"};
    sg_machine m;
    sg_error err = {0};
    for (int i = 0; i < 4; i++) {
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
    load("configs/machines/mi300a.json", &m, &err);
    sg_machine_cost_model(&m, SG_BF16, &cm);
    ok(cm.unified_memory && m.cpu_cores == 24, "mi300a: unified memory, 24 cores");
    ok(cm.link_bw[SG_LINK_H2D] >= 5e12 && cm.link_latency < 1e-6,
       "mi300a: host link at memory speed, tiny latency");
    load("configs/machines/h100-pcie.json", &m, &err);
    sg_machine_cost_model(&m, SG_BF16, &cm);
    ok(cm.link_bw[SG_LINK_H2D] < 64e9 && m.numa_nodes == 2, "h100-pcie: PCIe Gen5 x16, two sockets");

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
        ok(faster_link <= base, "a faster host link never lengthens the critical path (%.4f <= %.4f ms)",
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
