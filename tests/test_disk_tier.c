/* test_disk_tier.c - ZeRO-Infinity's disk tier ("nvme"): what lives on disk,
 * the RAM working set, the disk bytes per step and the lower bound
 * (graph/disk_tier.h), the simulated disk's queue (runtime/sim/sim_disk.h),
 * the fit against a machine's disk (runtime/sim/sim_fit.h) and the machine
 * files' disk block. Every expected figure is worked out by hand below from
 * the buffers' sizes, not read from the code. */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "graph/analysis.h"
#include "graph/compile.h"
#include "graph/disk_tier.h"
#include "runtime/config/machine.h"
#include "runtime/sim/sim_disk.h"
#include "runtime/sim/sim_fit.h"
#include "tests/tap.h"
#include "tests/test_util.h"

static int buf(sg_graph *g, const char *name, int64_t elems, sg_dtype dt, sg_mem_space sp,
               int persistent, sg_buf_role role, int unit, int subgroup, int tile)
{
    int b = sg_graph_add_buffer(g, name, elems, dt, sp, persistent);
    g->buffers[b].role = role;
    g->buffers[b].unit = unit;
    g->buffers[b].subgroup = subgroup;
    g->buffers[b].tile = tile;
    return b;
}

static void node(sg_graph *g, sg_op_kind kind, const char *name, const sg_access *a, int n)
{
    sg_graph_add_node(g, kind, SG_DEV_CPU, -1, 0, a, n, "%s", name);
}

/* Two optimizer tiles of sub-group 0 on the host (4000 + 8000 and 2000 +
 * 4000 bytes), a GPU sub-group's master (never on disk), a step-local host
 * gradient (never on disk), and two units' parameter pieces on the host
 * (6000 and 2000 bytes). Program order: unit 0 fetched, unit 1 fetched,
 * unit 0 fetched again, the gradient copied, the two tiles' updates, then
 * the casts that write the pieces back (the first touching 2000 bytes of
 * unit 0's piece). */
static void build(sg_graph *g)
{
    sg_graph_init(g);
    int m0 = buf(g, "master.sg0.t0", 1000, SG_F32, SG_MEM_HOST, 1, SG_BUF_MASTER, -1, 0, 0);
    int v0 = buf(g, "adam_moments.sg0.t0", 2000, SG_F32, SG_MEM_HOST, 1, SG_BUF_MOMENTS, -1, 0, 0);
    int m1 = buf(g, "master.sg0.t1", 500, SG_F32, SG_MEM_HOST, 1, SG_BUF_MASTER, -1, 0, 1);
    int v1 = buf(g, "adam_moments.sg0.t1", 1000, SG_F32, SG_MEM_HOST, 1, SG_BUF_MOMENTS, -1, 0, 1);
    int gm = buf(g, "master.sg1", 100, SG_F32, SG_MEM_GPU, 1, SG_BUF_MASTER, -1, 1, -1);
    int gh = buf(g, "grad_host.sg0.t0", 1000, SG_F32, SG_MEM_HOST, 0, SG_BUF_GRAD_HOST, -1, 0, 0);
    int p0 = buf(g, "param.0.sg0", 3000, SG_BF16, SG_MEM_HOST, 1, SG_BUF_PARAM_PIECE, 0, 0, -1);
    int p1 = buf(g, "param.1.sg0", 1000, SG_BF16, SG_MEM_HOST, 1, SG_BUF_PARAM_PIECE, 1, 0, -1);
    node(g, SG_OP_H2D, "fetch.u0", (sg_access[]){{p0, SG_R, 0}}, 1);
    node(g, SG_OP_H2D, "fetch.u1", (sg_access[]){{p1, SG_R, 0}}, 1);
    node(g, SG_OP_H2D, "fetch.u0.again", (sg_access[]){{p0, SG_R, 0}}, 1);
    node(g, SG_OP_D2H, "d2h.grad", (sg_access[]){{gh, SG_W, 0}, {gm, SG_R, 0}}, 2);
    node(g, SG_OP_ADAM_CPU, "adam.t0", (sg_access[]){{gh, SG_R, 0}, {m0, SG_RW, 0}, {v0, SG_RW, 0}},
         3);
    node(g, SG_OP_ADAM_CPU, "adam.t1", (sg_access[]){{m1, SG_RW, 0}, {v1, SG_RW, 0}}, 2);
    node(g, SG_OP_CAST, "cast.t0", (sg_access[]){{m0, SG_R, 0}, {p0, SG_W, 2000}}, 2);
    node(g, SG_OP_CAST, "cast.t1", (sg_access[]){{m1, SG_R, 0}, {p1, SG_W, 0}}, 2);
    sg_error err = {0};
    if (sg_graph_finalize(g, &err))
        tap_diag("finalize: %s", err.msg);
}

static void spec_of(sg_step_spec *s, int opt, int param, int64_t count, int64_t pcount)
{
    sg_step_spec_defaults(s);
    s->nvme_optimizer = opt;
    s->nvme_param = param;
    s->nvme_buffer_count = count;
    s->nvme_param_buffer_count = pcount;
}

static void test_tier(const sg_graph *g)
{
    sg_step_spec s;
    sg_disk_tier t;
    spec_of(&s, 1, 1, 1, 1);
    ok(sg_disk_tier_compute(g, &s, &t) == SG_OK && t.active, "the tier is computed");
    /* optimizer: 4000 + 8000 + 2000 + 4000; parameters: 6000 + 2000 */
    is_int(t.optimizer_bytes, 18000,
           "optimizer state on disk: the host tiles' masters and moments");
    is_int(t.param_bytes, 8000, "parameter pieces on disk");
    is_int(t.ntiles, 2, "two optimizer tiles");
    is_int(t.tile_bytes, 12000, "the largest tile: 4000 + 8000 bytes");
    is_int(t.optimizer_ram, 12000, "buffer_count 1: one tile in RAM");
    is_int(t.param_ram, 6000, "parameter buffer_count 1: the largest unit's pieces");
    is_int(t.ram_bytes, 18000, "working set: 12000 + 6000");
    /* reads: each optimizer buffer once (18000) + every fetch (6000 + 2000 +
     * 6000); writes: the optimizer buffers the updates wrote (18000) + the
     * casts' 2000 bytes of unit 0 and all 2000 of unit 1 */
    is_int(t.read_bytes, 32000, "disk bytes read per step: 18000 + 14000");
    is_int(t.write_bytes, 22000, "disk bytes written per step: 18000 + 2000 + 2000");

    spec_of(&s, 1, 0, 0, 0);
    sg_disk_tier_compute(g, &s, &t);
    is_int(t.bytes, 18000, "optimizer only: no parameter on disk");
    is_int(t.buffer_count, 4, "buffer_count defaults to DeepSpeed's 4");
    is_int(t.optimizer_ram, 18000, "4 tiles of 12000 capped at the 18000 on disk");
    ok(t.read_bytes == 18000 && t.write_bytes == 18000,
       "optimizer only: 18000 read, 18000 written");

    spec_of(&s, 0, 0, 0, 0);
    sg_disk_tier_compute(g, &s, &t);
    ok(!t.active && t.bytes == 0 && t.read_bytes == 0, "device cpu: nothing on disk");
}

static void test_node_bytes(const sg_graph *g)
{
    sg_step_spec s;
    spec_of(&s, 1, 1, 2, 1);
    int64_t r[8], w[8];
    int pf[8];
    ok(sg_disk_tier_node_bytes(g, &s, r, w, pf) == SG_OK, "per-node disk bytes");
    ok(r[0] == 6000 && r[1] == 2000 && r[2] == 6000 && !pf[0], "each fetch reads its piece");
    ok(r[3] == 0 && w[3] == 0, "the gradient copy touches no disk");
    ok(r[4] == 12000 && w[4] == 12000 && pf[4], "tile 0's update reads and writes 12000, ahead");
    ok(r[5] == 6000 && w[5] == 6000 && pf[5], "tile 1's update reads and writes 6000, ahead");
    ok(r[6] == 0 && w[6] == 2000 && r[7] == 0 && w[7] == 2000,
       "the casts read the masters in RAM and write the pieces back");
}

static void test_bound(const sg_graph *g)
{
    sg_step_spec s;
    sg_disk_tier t;
    sg_summary sum;
    sg_cost_model cm;
    spec_of(&s, 1, 1, 1, 1);
    sg_cost_model_gh200(&cm);
    cm.disk_read_bw = 1000; /* B/s */
    cm.disk_write_bw = 500;
    sg_summary_compute(g, &cm, &sum);
    int64_t peak = sum.peak_bytes[SG_MEM_HOST], pers = sum.persistent_bytes[SG_MEM_HOST];
    sg_disk_tier_compute(g, &s, &t);
    sg_disk_tier_apply(&sum, &t);
    /* 26000 on disk, 18000 of working set */
    is_int(sum.peak_bytes[SG_MEM_HOST], peak - 8000,
           "host peak: less the 26000 on disk, plus "
           "the 18000 working set");
    is_int(sum.persistent_bytes[SG_MEM_HOST], pers - 26000, "host persistent: less the disk's");
    const char *by = NULL;
    double b = sg_step_lower_bound(&sum, &cm, NULL, &by);
    /* 32000 B / 1000 B/s + 22000 B / 500 B/s */
    is_close(b, 76.0, 1e-12, "the bound is the disk's 32 s of reads + 44 s of writes");
    is_str(by, "disk", "... and says so");
    is_close(sg_disk_tier_seconds(&sum, &cm), 76.0, 1e-12, "sg_disk_tier_seconds agrees");
}

/* The simulated disk's queue at 1000 B/s read, 500 B/s write, 2 tiles at once. */
static void test_sim_disk(const sg_graph *g)
{
    sg_step_spec s;
    spec_of(&s, 1, 1, 2, 1);
    sg_machine m;
    memset(&m, 0, sizeof m);
    snprintf(m.name, sizeof m.name, "slow-disk");
    m.disk_read_gbs = 1e-6;
    m.disk_write_gbs = 0.5e-6;
    sg_sim_disk d;
    sg_error err = {0};
    ok(sg_sim_disk_init(&d, g, &s, &m, 1, &err) == SG_OK && d.active, "simulated disk set up");
    is_close(sg_sim_disk_begin(&d, 0, 0.0), 6.0, 1e-12, "fetch u0 at 0: 6000 B read by 6 s");
    is_close(sg_sim_disk_end(&d, 0, 6.0), 6.0, 1e-12, "... and it writes nothing");
    /* tile 0 at 10: its 12000 B until 22, then tile 1 read ahead until 28 */
    is_close(sg_sim_disk_begin(&d, 4, 10.0), 22.0, 1e-12, "tile 0 at 10 s: read by 22 s");
    is_close(sg_sim_disk_begin(&d, 5, 23.0), 28.0, 1e-12,
             "tile 1 at 23 s: read ahead behind tile 0, ready at 28 s");
    is_close(sg_sim_disk_end(&d, 4, 25.0), 52.0, 1e-12,
             "tile 0's write-back queues behind the read ahead: 28 + 12000 / 500 = 52 s");
    int64_t rb, wb;
    double busy;
    sg_sim_disk_totals(&d, &rb, &wb, &busy);
    ok(rb == 24000 && wb == 12000, "the step's disk bytes drawn: 24000 read, 12000 written");
    is_close(busy, 48.0, 1e-12, "busy 6 + 12 + 6 + 24 s");
    is_close(sg_sim_disk_begin(&d, 4, 100.0), 112.0, 1e-12,
             "the next step's tile 0 reads again (12 s)");
    sg_sim_disk_free(&d);
    m.disk_read_gbs = 0;
    ok(sg_sim_disk_init(&d, g, &s, &m, 1, &err) == SG_EINVAL, "no disk bandwidth: refused");
    like(err.msg, "slow-disk", "... naming the machine");
}

static int load(const char *rel, sg_machine *m, sg_error *err)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", srcdir(), rel);
    return sg_machine_load(path, m, err);
}

static void test_machine_disk(const sg_graph *g)
{
    sg_machine m;
    sg_error err = {0};
    ok(load("configs/machines/gh200.json", &m, &err) == 0 && m.disk_capacity_gb == 7680 &&
           m.disk_read_gbs == 13.0 && m.disk_write_gbs == 6.6,
       "gh200: a 7.68 TB disk at 13 / 6.6 GB/s (PM1743's published figures)");
    sg_cost_model cm;
    sg_machine_cost_model(&m, SG_BF16, &cm);
    ok(cm.disk_read_bw == 13e9 && cm.disk_write_bw == 6.6e9 && cm.disk_bytes == 7680e9,
       "... in its cost model");
    ok(sg_machine_check_disk(&m, "x", &err) == SG_OK, "... so it may hold nvme state");
    ok(load("configs/machines/h100-sxm.json", &m, &err) == 0 && m.disk_capacity_gb == 0,
       "h100-sxm (no disk block) still loads");
    ok(sg_machine_check_disk(&m, "zero_optimization.offload_optimizer.device", &err) == SG_EINVAL,
       "... and cannot hold nvme state");
    like(err.msg, "zero_optimization.offload_optimizer.device", "... the error names the key");
    like(err.msg, "h100-sxm", "... and the machine");

    /* the fit: 26000 B on disk against a 20000 B disk; host figures move */
    sg_step_spec s;
    spec_of(&s, 1, 1, 1, 1);
    sg_sim_fit plain, fit;
    load("configs/machines/gh200.json", &m, &err);
    sg_sim_check_fit(g, &m, &plain);
    ok(sg_sim_check_fit_spec(g, &s, &m, &fit) == 0 && fit.fits, "fits gh200's disk");
    is_close(fit.host_bytes, plain.host_bytes - 8000, 1e-12,
             "host bytes: less the state on disk, plus the working set");
    ok(fit.disk_bytes == 26000 && fit.disk_read_bytes == 32000 && fit.disk_write_bytes == 22000,
       "the fit carries the disk's bytes");
    m.disk_capacity_gb = 20000e-9;
    sg_sim_check_fit_spec(g, &s, &m, &fit);
    ok(!fit.fits, "a 20000-byte disk does not hold 26000 bytes");
    like(fit.why, "of disk on gh200", "... and why says the disk");
}

int main(void)
{
    sg_graph g;
    build(&g);
    test_tier(&g);
    test_node_bytes(&g);
    test_bound(&g);
    test_sim_disk(&g);
    test_machine_disk(&g);
    sg_graph_free(&g);
    return tap_done();
}
