/* test_sim.c - the pure-C parts of the simulation: the SimGrid platform and
 * bus files written from a machine model, the roofline cost per worker, the
 * memory-fit check, --set overrides of a DeepSpeed config, the overlap
 * statistics of a step's records, the machine-model keys for
 * calibrated machines, and the dynamic bandwidth shares (max-min fair
 * shares worked out by hand). */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "graph/analysis.h"
#include "runtime/config/config.h"
#include "runtime/config/config_override.h"
#include "runtime/config/machine.h"
#include "runtime/trace/overlap.h"
#include "runtime/sim/sim_cost.h"
#include "runtime/sim/sim_fit.h"
#include "runtime/sim/sim_platform.h"
#include "runtime/sim/sim_costfit.h"
#include "runtime/train/node_times.h"
#include "runtime/sim/sim_share.h"
#include "tests/tap.h"
#include "tests/test_util.h"

static sg_machine gh200(void)
{
    char path[4096];
    sg_machine m;
    sg_error err = {0};
    snprintf(path, sizeof path, "%s/configs/machines/gh200.json", srcdir());
    if (sg_machine_load(path, &m, &err))
        tap_diag("%s", err.msg);
    return m;
}

static char *slurp(const char *path)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return NULL;
    static char buf[1 << 20];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    buf[n] = '\0';
    fclose(f);
    return buf;
}

static int count(const char *s, const char *needle)
{
    int n = 0;
    for (const char *p = s; p && (p = strstr(p, needle)); p++)
        n++;
    return n;
}

static void test_platform(void)
{
    sg_machine m = gh200();
    char dir[4096], path[4200];
    make_test_dir(dir, sizeof dir, "sg_sim");
    sg_error err = {0};
    ok(sg_sim_write_platform(&m, dir, "sg-gh200", &err) == 0, "platform written: %s", err.msg);
    snprintf(path, sizeof path, "%s/bus/sg-gh200.platform.v4.xml", dir);
    char *x = slurp(path);
    ok(x != NULL, "platform.v4.xml exists");
    is_int(count(x, "<host id=\"CPU"), 72, "one simulated host per Grace core");
    is_int(count(x, "<host id=\"CUDA"), 1, "one CUDA host");
    like(x, "<prop id=\"memsize\" value=\"96000000000\"/>", "GPU memory from the model");
    like(x, "<link id=\"RAM-CUDA0\" bandwidth=\"450000000000Bps\" latency=\"0.000002000s\"/>",
         "host-to-device link at 450 GB/s and 2 us");
    like(x, "<route src=\"CUDA0\" dst=\"RAM\"", "a device-to-host route");
    snprintf(path, sizeof path, "%s/bus/sg-gh200.bandwidth", dir);
    x = slurp(path);
    ok(x && strncmp(x, "# to 0", 6) == 0, "bandwidth matrix header");
    like(x, "\n0.000000\t450000.000000\tnan", "RAM to GPU in MB/s, nan beyond the nodes");
    is_int(count(x, "\n"), 33, "32 rows and a header (STARPU_MAXNODES)");
    snprintf(path, sizeof path, "%s/bus/sg-gh200.config", dir);
    ok(slurp(path) != NULL, "the .config StarPU looks for");
    /* unified memory: the GPU host may use the whole memory */
    sg_machine u = m;
    u.unified_memory = 1;
    u.cpu_memory_gb = 128;
    ok(sg_sim_write_platform(&u, dir, "u", &err) == 0, "unified platform written");
    snprintf(path, sizeof path, "%s/bus/u.platform.v4.xml", dir);
    like(slurp(path), "value=\"128000000000\"", "unified: GPU memsize is the one memory");
    rm_tree(dir);
}

static sg_node node(sg_op_kind k, double flops, int64_t bytes)
{
    sg_node n;
    memset(&n, 0, sizeof n);
    n.kind = k;
    n.flops = flops;
    n.bytes_read = bytes;
    return n;
}

static void test_cost(void)
{
    sg_machine m = gh200();
    sg_sim_costs c;
    /* 8 streams: 315 GB/s / 8 = 39 GB/s each, above one core's 30 GB/s cap */
    sg_sim_costs_init(&c, &m, SG_BF16, 1, 8);
    sg_node gemm = node(SG_OP_FORWARD, 1e12, 1 << 20);
    double gpu = sg_sim_node_seconds(&c, &gemm, SG_SIM_GPU);
    double cpu = sg_sim_node_seconds(&c, &gemm, SG_SIM_CPU);
    is_close(gpu, 1e12 / (989e12 * 0.75) + 20e-6, 1e-9,
             "GEMM on the GPU: FLOPs over derated bf16 peak");
    ok(cpu > 100 * gpu, "the same GEMM on one Grace core is over 100x slower");
    sg_node adam = node(SG_OP_ADAM_CPU, 1e6, 16000000000LL);
    double t8 = sg_sim_node_seconds(&c, &adam, SG_SIM_CPU);
    is_close(t8, 16e9 / (30e9 * 0.7) + 5e-6, 1e-9, "Adam streams at one core's 30 GB/s cap");
    sg_sim_costs_init(&c, &m, SG_BF16, 1, 72);
    ok(sg_sim_node_seconds(&c, &adam, SG_SIM_CPU) > t8,
       "72 streams share the memory: each core slower than with 8");
    sg_node copy = node(SG_OP_H2D, 0, 1 << 30);
    is_close(sg_sim_node_seconds(&c, &copy, SG_SIM_GPU), 2e-6, 1e-9,
             "a copy task costs the latency: StarPU moves its data over the link");
    sg_node ag = node(SG_OP_ALLGATHER, 0, 1 << 20);
    ag.link_bytes = 1 << 30;
    double dp1 = sg_sim_node_seconds(&c, &ag, SG_SIM_GPU);
    sg_sim_costs_init(&c, &m, SG_BF16, 4, 16);
    ok(sg_sim_node_seconds(&c, &ag, SG_SIM_GPU) > dp1 + 0.002,
       "a collective over 4 ranks adds the NVLink traffic");
}

/* SuperOffload's validation (--rollback-passes): the norm check alone costs
 * a CPU task's overhead (5 us); N passes stream N times the bytes it
 * declares at one core's capped bandwidth, derated by the optimizer's
 * efficiency: 8 GB at 30 GB/s x 0.7 is 0.381 s a pass, worked out here. */
static void test_rollback_passes(void)
{
    sg_machine m = gh200();
    sg_sim_costs c;
    sg_sim_costs_init(&c, &m, SG_BF16, 1, 8);
    sg_node v = node(SG_OP_VALIDATE, 2e9, 4000000000LL);
    v.bytes_written = 4000000000LL;
    is_close(sg_sim_node_seconds(&c, &v, SG_SIM_CPU), 5e-6, 1e-12,
             "validation, no rollback: a task's overhead");
    for (int p = 1; p <= 2; p++) {
        c.rollback_passes = p;
        is_close(sg_sim_node_seconds(&c, &v, SG_SIM_CPU), p * 8e9 / (30e9 * 0.7) + 5e-6, 1e-9,
                 "validation, %d rollback pass%s: %d x 8 GB at 30 GB/s x 0.7", p,
                 p == 1 ? "" : "es", p);
    }
    sg_node adam = node(SG_OP_ADAM_CPU, 1e6, 8000000000LL);
    is_close(sg_sim_node_seconds(&c, &adam, SG_SIM_CPU), 8e9 / (30e9 * 0.7) + 5e-6, 1e-9,
             "other kinds keep one pass whatever the rollbacks");
    /* the lower bound's cost model (graph/analysis.h): the same passes over
     * the socket's bandwidth at the CPU Adam's efficiency, nothing without */
    sg_cost_model cm;
    sg_cost_model_gh200(&cm);
    v.device = SG_DEV_CPU;
    v.flops = 0;
    ok(sg_node_ideal_seconds(&cm, &v) == 0.0, "lower bound: a validation without rollback is free");
    cm.validate_passes = 2;
    is_close(sg_node_ideal_seconds(&cm, &v),
             2 * 8e9 / cm.cpu_mem_bw / cm.efficiency[SG_OP_ADAM_CPU], 1e-9,
             "lower bound: 2 passes of 8 GB at the socket's %.0f GB/s x %.2f", cm.cpu_mem_bw / 1e9,
             cm.efficiency[SG_OP_ADAM_CPU]);
}

/* The demand a node states and the static cost agree: one stream at the
 * core's cap takes what sg_sim_node_seconds says with one stream. */
static void test_demand(void)
{
    sg_machine m = gh200();
    sg_sim_costs c;
    sg_sim_costs_init(&c, &m, SG_BF16, 1, 1);
    sg_node adam = node(SG_OP_ADAM_CPU, 1e6, 16000000000LL);
    sg_sim_demand d;
    sg_sim_node_demand(&c, &adam, SG_SIM_CPU, &d);
    is_close(d.alone_bw, 30e9, 1e-12, "a Grace core alone draws its 30 GB/s");
    is_close(d.bytes, 16e9 / 0.7, 1e-12, "bytes derated by the optimizer's efficiency");
    is_close(d.fixed_s + fmax(d.compute_s, d.bytes / d.alone_bw),
             sg_sim_node_seconds(&c, &adam, SG_SIM_CPU), 1e-12,
             "alone, the shared model's time is the static one's");
    sg_node copy = node(SG_OP_H2D, 0, 1 << 30);
    sg_sim_node_demand(&c, &copy, SG_SIM_GPU, &d);
    ok(d.bytes == 0 && d.compute_s == 0, "a copy task streams nothing itself");
}

static void test_share(void)
{
    double cap[3] = {2, 10, 10}, out[3];
    double given = sg_bw_water_fill(10, cap, out, 3);
    ok(out[0] == 2 && out[1] == 4 && out[2] == 4 && given == 10,
       "water filling: the capped stream keeps 2, the others split the 8 left");
    double small[2] = {1, 1};
    given = sg_bw_water_fill(10, small, out, 2);
    ok(out[0] == 1 && out[1] == 1 && given == 2, "demands below the capacity are all met");
    ok(sg_bw_water_fill(10, cap, out, 0) == 0, "no stream, nothing given");

    /* a socket of 20 GB/s, cores that draw 10 alone */
    sg_bw_pool socket = {20, 0};
    sg_bw_stream s4[4] = {{1, 10, 0}, {1, 10, 0}, {1, 10, 0}, {1, 10, 0}};
    sg_bw_share(&socket, s4, 4);
    ok(s4[0].rate == 5 && s4[3].rate == 5, "four cores on a 20 GB/s socket: 5 each");
    sg_bw_share(&socket, s4, 2);
    ok(s4[0].rate == 10 && s4[1].rate == 10, "two cores: each at its own 10");
    s4[0].cap = 2; /* compute-bound: needs only 2 */
    sg_bw_share(&socket, s4, 4);
    ok(s4[0].rate == 2 && s4[1].rate == 6 && s4[2].rate == 6 && s4[3].rate == 6,
       "a compute-bound task leaves what it does not need to the others");

    /* unified memory: HBM of 100, the CPU side limited to 30 */
    sg_bw_pool hbm = {100, 30};
    sg_bw_stream u[4] = {{0, 100, 0}, {1, 20, 0}, {1, 20, 0}, {1, 20, 0}};
    sg_bw_share(&hbm, u, 4);
    ok(u[0].rate == 70 && u[1].rate == 10 && u[2].rate == 10 && u[3].rate == 10,
       "unified: the CPU side gets its limit 30 (10 per core), the GPU the other 70");
    sg_bw_share(&hbm, u, 1);
    ok(u[0].rate == 100, "the GPU alone gets the whole HBM");
    sg_bw_stream two_gpu[2] = {{0, 100, 0}, {0, 100, 0}};
    sg_bw_share(&hbm, two_gpu, 2);
    ok(two_gpu[0].rate == 50 && two_gpu[1].rate == 50, "two GPU streams halve it");
}

/* Per-kind fits of measured task times: known coefficients come back, they
 * never go negative, and the node-times file is read and checked. */
/* path holds text (a test's input file) */
static void write_text(const char *path, const char *text)
{
    FILE *fp = fopen(path, "w");
    if (fp) {
        fputs(text, fp);
        fclose(fp);
    }
}

static void test_costfit(void)
{
    sg_cost_sample s[5];
    /* matmul GFLOP, attention GFLOP, GB */
    double gf[5] = {0.5, 2, 8, 1, 3}, ga[5] = {0, 0.5, 0.1, 2, 0}, gb[5] = {0.1, 0.1, 0.4, 3, 1};
    for (int i = 0; i < 5; i++) /* 5 us + 2 us/GFLOP + 7 us/attention GFLOP + 3 us/GB */
        s[i] = (sg_cost_sample){(gf[i] + ga[i]) * 1e9, ga[i] * 1e9, gb[i] * 1e9,
                                5 + 2 * gf[i] + 7 * ga[i] + 3 * gb[i], 10};
    sg_cost_fit f;
    ok(sg_cost_fit_samples(s, 5, &f) == 0 && f.valid, "five task sizes fit");
    is_close(f.overhead_us, 5, 1e-9, "the overhead comes back");
    is_close(f.us_per_gflop, 2, 1e-9, "the cost per matmul GFLOP comes back");
    is_close(f.us_per_attention_gflop, 7, 1e-9, "the cost per attention GFLOP comes back");
    is_close(f.us_per_gb, 3, 1e-9, "the cost per GB comes back");
    is_close(sg_cost_fit_us(&f, 120e9, 20e9, 1e9), 5 + 200 + 140 + 3, 1e-9,
             "and extrapolates to a size 12x larger than any measured");
    ok(f.max_rel_err < 1e-9, "exact data, no error");
    for (int i = 0; i < 5; i++) /* time falling with bytes */
        s[i].us = 50 + 10 * gf[i] - 5 * gb[i];
    ok(sg_cost_fit_samples(s, 5, &f) == 0 && f.overhead_us >= 0 && f.us_per_gflop >= 0 &&
           f.us_per_attention_gflop >= 0 && f.us_per_gb >= 0,
       "no negative coefficient");
    sg_cost_sample one = {1e9, 0, 1e6, 40, 3};
    ok(sg_cost_fit_samples(&one, 1, &f) == 0 && fabs(sg_cost_fit_us(&f, 1e9, 0, 1e6) - 40) < 1e-9,
       "one size: its time is reproduced");
    sg_cost_sample none = {1e9, 0, 1e6, 0, 3};
    ok(sg_cost_fit_samples(&none, 1, &f) == SG_EINVAL && !f.valid, "no positive time: no fit");

    /* the file calibrate writes */
    char dir[] = "/tmp/sg_costfit.XXXXXX", path[64];
    if (!mkdtemp(dir))
        return;
    snprintf(path, sizeof path, "%s/node_times.csv", dir);
    write_text(path, "name,kind,flops,attention_flops,bytes,mean_us,samples\n"
                     "fwd.layer0.mb0,forward,2e9,0,1e8,14.3,10\n"
                     "fwd.layer1.mb0,forward,4e9,0,1e8,24.3,10\n"
                     "fwd.layer2.mb0,forward,6e9,1e9,1e8,44.3,10\n"
                     "adam.sg0,adam_cpu,1e6,0,1e9,500,4\n");
    sg_cost_fit fits[SG_COST_DEVICES][SG_OP_KIND_COUNT];
    sg_error err = {0};
    ok(sg_cost_fits_load(path, fits, &err) == 0, "a node-times file loads");
    ok(fits[SG_COST_CPU][SG_OP_FORWARD].valid && fits[SG_COST_CPU][SG_OP_ADAM_CPU].valid &&
           !fits[SG_COST_CPU][SG_OP_BACKWARD].valid && !fits[SG_COST_GPU][SG_OP_FORWARD].valid,
       "a fit per kind in it, none for kinds it lacks; without a device column: the CPU's");
    /* 4.3 us + 5 us per matmul GFLOP, 15 per attention GFLOP */
    is_close(sg_cost_fit_us(&fits[SG_COST_CPU][SG_OP_FORWARD], 8e9, 0, 1e8), 4.3 + 5 * 8, 1e-6,
             "forward: 5 us per matmul GFLOP from three layers");
    is_close(sg_cost_fit_us(&fits[SG_COST_CPU][SG_OP_FORWARD], 8e9, 2e9, 1e8), 4.3 + 5 * 6 + 15 * 2,
             1e-6, "and 15 us per attention GFLOP");
    /* with the device column: the GPU's lines fit apart from the CPU's */
    write_text(path, "name,kind,flops,attention_flops,bytes,mean_us,samples,device\n"
                     "fwd.layer0.mb0,forward,2e9,0,1e8,14.3,10,cpu\n"
                     "fwd.layer1.mb0,forward,4e9,0,1e8,24.3,10,cpu\n"
                     "fwd.layer0.mb0,forward,2e9,0,1e8,3,10,gpu\n"
                     "fwd.layer1.mb0,forward,4e9,0,1e8,5,10,gpu\n");
    ok(sg_cost_fits_load(path, fits, &err) == 0 && fits[SG_COST_GPU][SG_OP_FORWARD].valid,
       "a node-times file with devices loads, a fit per device");
    is_close(sg_cost_fit_us(&fits[SG_COST_GPU][SG_OP_FORWARD], 8e9, 0, 1e8), 1 + 1 * 8, 1e-6,
             "GPU forward: 1 us + 1 us per GFLOP from its own two lines");
    is_close(sg_cost_fit_us(&fits[SG_COST_CPU][SG_OP_FORWARD], 8e9, 0, 1e8), 4.3 + 5 * 8, 1e-6,
             "CPU forward: its own two lines");
    write_text(path, "name,kind,flops,attention_flops,bytes,mean_us,samples,device\n"
                     "fwd.layer0.mb0,forward,2e9,0,1e8,3,10,tpu\n");
    ok(sg_cost_fits_load(path, fits, &err) == SG_EINVAL, "a device other than cpu or gpu: refused");
    write_text(path, "name,kind,flops,attention_flops,bytes,mean_us,samples\n"
                     "fwd.layer0.mb0,forward,2e9,0,1e8,3,10,gpu\n");
    ok(sg_cost_fits_load(path, fits, &err) == SG_EINVAL,
       "a device column the header does not name: refused");
    write_text(path, "name,kind,flops,attention_flops,bytes,mean_us,samples\n"
                     "fwd.layer0.mb0,forward,2e9,3e9,1e8,14.3,10\n");
    ok(sg_cost_fits_load(path, fits, &err) == SG_EINVAL,
       "attention FLOPs above the FLOPs: refused");
    like(err.msg, "line 2", "... naming the line");
    write_text(path, "name,kind,flops\nx,forward,1\n");
    ok(sg_cost_fits_load(path, fits, &err) == SG_EINVAL, "a wrong header: refused");
    write_text(path, "name,kind,flops,attention_flops,bytes,mean_us,samples\n"
                     "x,teleport,1,0,1,1,1\n");
    ok(sg_cost_fits_load(path, fits, &err) == SG_EINVAL, "an unknown kind: refused");
    remove(path);
    ok(sg_cost_fits_load(path, fits, &err) == SG_EIO, "a missing file: refused");
    rmdir(dir);
}

/* A chain on one buffer: forward "f" (GPU), the given middle node, adam_cpu "a". */
static void three_nodes(sg_graph *g, sg_op_kind middle, sg_device_class dev, const char *name)
{
    sg_graph_init(g);
    int b = sg_graph_add_buffer(g, "x", 4, SG_F32, SG_MEM_HOST, 1);
    sg_access acc = {b, SG_RW, 0};
    sg_graph_add_node(g, SG_OP_FORWARD, SG_DEV_GPU, 0, 1, &acc, 1, "f");
    sg_graph_add_node(g, middle, dev, 0, 1, &acc, 1, "%s", name);
    sg_graph_add_node(g, SG_OP_ADAM_CPU, SG_DEV_CPU, 0, 1, &acc, 1, "a");
}

/* runtime/train/node_times.c: each task's time summed on its device, the
 * means written one line per node and device, read back here by sscanf */
static int cpu_worker_0(int worker)
{
    return worker == 0;
}

static void test_node_times(void)
{
    sg_graph g;
    three_nodes(&g, SG_OP_CAST, SG_DEV_CPU, "c");
    sg_node_times nt;
    ok(sg_node_times_init(&nt, g.nnodes) == SG_OK, "node times: init");
    /* step 1: f on the GPU worker (1) 10 us, c on the CPU (0) 4 us, a never ran;
     * step 2: f 20 us on the GPU, c 8 us on the GPU (the scheduler's choice) */
    sg_task_record r1[3] = {{1, 0, 10}, {0, 5, 9}, {-1, 0, 0}};
    sg_task_record r2[3] = {{1, 0, 20}, {1, 30, 38}, {-1, 0, 0}};
    sg_node_times_add(&nt, &g, r1, cpu_worker_0);
    sg_node_times_add(&nt, &g, r2, cpu_worker_0);
    char dir[] = "/tmp/sg_nodetimes.XXXXXX", path[64], line[256];
    sg_error err = {0};
    if (!mkdtemp(dir)) {
        sg_node_times_free(&nt);
        sg_graph_free(&g);
        return;
    }
    snprintf(path, sizeof path, "%s/node_times.csv", dir);
    ok(sg_node_times_write(&nt, &g, path, &err) == SG_OK, "node times: written");
    FILE *fp = fopen(path, "r");
    int lines = 0, good = 0;
    while (fp && fgets(line, sizeof line, fp)) {
        char name[32], kind[32], dev[8];
        double us;
        long long samples;
        if (lines++ == 0) {
            good += !strcmp(line, "name,kind,flops,attention_flops,bytes,mean_us,samples,device\n");
            continue;
        }
        if (sscanf(line, "%31[^,],%31[^,],%*[^,],%*[^,],%*[^,],%lf,%lld,%7s", name, kind, &us,
                   &samples, dev) != 5)
            continue;
        good += !strcmp(name, "f") && !strcmp(dev, "gpu") && us == 15 && samples == 2;
        good += !strcmp(name, "c") && !strcmp(dev, "cpu") && us == 4 && samples == 1;
        good += !strcmp(name, "c") && !strcmp(dev, "gpu") && us == 8 && samples == 1;
    }
    if (fp)
        fclose(fp);
    ok(lines == 4 && good == 4,
       "node times: a line per node and device it ran on, its mean and samples (%d lines, %d "
       "right)",
       lines, good);
    remove(path);
    rmdir(dir);
    sg_node_times_free(&nt);
    sg_graph_free(&g);
}

static void test_fit(void)
{
    sg_machine m = gh200();
    sg_graph g;
    sg_graph_init(&g);
    sg_graph_add_buffer(&g, "w", 50LL * 1000 * 1000 * 1000 / 4, SG_F32, SG_MEM_GPU, 1);
    sg_graph_add_buffer(&g, "h", 100LL * 1000 * 1000 * 1000 / 4, SG_F32, SG_MEM_HOST, 1);
    sg_error err = {0};
    sg_graph_finalize(&g, &err);
    sg_sim_fit f;
    ok(sg_sim_check_fit(&g, &m, &f) == 0 && f.fits, "50 GB GPU + 100 GB host fit a GH200");
    m.gpu_memory_gb = 40;
    sg_sim_check_fit(&g, &m, &f);
    ok(!f.fits, "not in 40 GB of GPU memory");
    like(f.why, "GPU peak 46.6 GiB > 37.3 GiB (40 GB)",
         "the numbers are given, in GiB (the file's GB beside)");
    sg_machine u = gh200();
    u.unified_memory = 1;
    u.cpu_memory_gb = 128;
    sg_sim_check_fit(&g, &u, &f);
    ok(!f.fits, "unified: 150 GB counted once against 128 GB");
    like(f.why, "needs 139.7 GiB (GPU-side 46.6 + host 93.1) in gh200's 119.2 GiB (128 GB)",
         "unified message");
    sg_graph_free(&g);
}

static void test_set(void)
{
    cJSON *o = cJSON_Parse("{\"zero_optimization\":{\"stage\":3,\"offload_optimizer\":"
                           "{\"ratio\":1.0}}}");
    sg_error err = {0};
    ok(sg_json_set_dotted(o, "offload_optimizer.ratio=0.7", &err) == 0, "short offload key");
    const cJSON *r = cJSON_GetObjectItem(
        cJSON_GetObjectItem(cJSON_GetObjectItem(o, "zero_optimization"), "offload_optimizer"),
        "ratio");
    ok(cJSON_IsNumber(r) && r->valuedouble == 0.7, "lands under zero_optimization");
    ok(sg_json_set_dotted(o, "bf16.enabled=true", &err) == 0, "creates objects on the path");
    ok(cJSON_IsTrue(cJSON_GetObjectItem(cJSON_GetObjectItem(o, "bf16"), "enabled")),
       "JSON values are parsed");
    ok(sg_json_set_dotted(o, "zero_optimization.stage.x=1", &err) != 0, "through a number fails");
    like(err.msg, "\"stage\" is not an object", "and says which segment");
    ok(sg_json_set_dotted(o, "novalue", &err) != 0, "KEY=VALUE required");
    cJSON_Delete(o);
}

static void test_overlap(void)
{
    sg_graph g;
    three_nodes(&g, SG_OP_BACKWARD, SG_DEV_GPU, "b");
    sg_error err = {0};
    sg_graph_finalize(&g, &err);
    /* GPU busy 0-40 and 60-100 (us); Adam 20-80 on a CPU: 40 of its 60 hidden */
    sg_task_record r[3] = {{0, 0, 40}, {0, 60, 100}, {1, 20, 80}};
    int is_gpu[2] = {1, 0};
    sg_overlap o;
    ok(sg_overlap_compute(&g, r, is_gpu, 2, &o) == 0, "overlap computed");
    is_close(o.span_s, 100e-6, 1e-9, "span");
    is_close(o.gpu_busy, 0.8, 1e-9, "GPU busy 80%%");
    is_close(o.adam_hidden, 40.0 / 60.0, 1e-9, "two thirds of Adam hidden");
    ok(o.workers[0] == 1 && o.workers[1] == 1 && fabs(o.worker_busy_s[1] - 80e-6) < 1e-12 &&
           fabs(o.worker_busy_s[0] - 60e-6) < 1e-12,
       "busy time per worker class: GPU 80 us, CPU 60 us, one worker each");
    /* a window [30, 90): two tasks overlapping on the GPU worker (30-40 and
     * 35-90 after clipping) count their union, 60 us; the CPU one 50 us */
    sg_task_record w[3] = {{0, 0, 40}, {0, 35, 100}, {1, 20, 80}};
    const sg_graph *gs[1] = {&g};
    const sg_task_record *rs[1] = {w};
    ok(sg_overlap_window(gs, rs, 1, is_gpu, 2, 30, 90, &o) == 0 &&
           fabs(o.worker_busy_s[1] - 60e-6) < 1e-12 && fabs(o.worker_busy_s[0] - 50e-6) < 1e-12,
       "in a window: a worker's overlapping tasks counted once, clipped to the window");
    sg_graph_free(&g);
}

static void test_machine_keys(void)
{
    char dir[4096], path[4200];
    make_test_dir(dir, sizeof dir, "sg_simm");
    snprintf(path, sizeof path, "%s/m.json", dir);
    FILE *f = fopen(path, "w");
    fputs("{\"name\":\"box\",\"sources\":[\"measured\"],\"nodes\":1,"
          "\"cpu\":{\"cores\":2,\"ghz\":2,\"fp32_flops_per_cycle\":32,\"memory_gb\":24,"
          "\"memory_bw_gbs\":10,\"core_bw_gbs\":10,\"numa_nodes\":1},"
          "\"gpu\":{\"count\":0,\"memory_gb\":0,\"memory_bw_gbs\":0,"
          "\"tflops\":{\"bf16\":0,\"fp16\":0,\"fp32\":0}},"
          "\"links\":{\"h2d_gbs\":10,\"d2h_gbs\":10,\"latency_us\":1,\"gpu_gpu_gbs\":10},"
          "\"efficiency\":{\"gemm\":0.7,\"elementwise\":0.7,\"optimizer_cpu\":0.7,"
          "\"optimizer_gpu\":0.7,\"copy\":0.7,\"collective\":0.7},"
          "\"calibration\":{\"sampling_dir\":\"box.sampling\",\"hostname\":\"box\","
          "\"measured_step_ms\":89.5}}",
          f);
    fclose(f);
    sg_machine m;
    sg_error err = {0};
    ok(sg_machine_load(path, &m, &err) == 0, "a calibrated CPU-only machine loads: %s", err.msg);
    is_int(m.gpu_count, 0, "no GPU");
    char want[4300];
    snprintf(want, sizeof want, "%s/box.sampling", dir);
    is_str(m.calibration_dir, want, "sampling dir relative to the file");
    is_str(m.calibration_host, "box", "hostname");
    is_close(m.cpu_core_bw_gbs, 10, 1e-12, "core_bw_gbs");
    f = fopen(path, "w");
    fputs("{\"name\":\"g\",\"sources\":[\"x\"],\"nodes\":1,"
          "\"cpu\":{\"cores\":2,\"ghz\":2,\"fp32_flops_per_cycle\":32,\"memory_gb\":24,"
          "\"memory_bw_gbs\":10,\"numa_nodes\":1},"
          "\"gpu\":{\"count\":1,\"memory_gb\":0,\"memory_bw_gbs\":1,"
          "\"tflops\":{\"bf16\":1,\"fp16\":1,\"fp32\":1}},"
          "\"links\":{\"h2d_gbs\":10,\"d2h_gbs\":10,\"latency_us\":1,\"gpu_gpu_gbs\":10},"
          "\"efficiency\":{\"gemm\":0.7,\"elementwise\":0.7,\"optimizer_cpu\":0.7,"
          "\"optimizer_gpu\":0.7,\"copy\":0.7,\"collective\":0.7}}",
          f);
    fclose(f);
    ok(sg_machine_load(path, &m, &err) != 0, "a GPU with 0 GB is refused");
    like(err.msg, "must be above 0 when gpu.count is 1", "with the reason");
    rm_tree(dir);
}

int main(void)
{
    test_platform();
    test_cost();
    test_demand();
    test_rollback_passes();
    test_share();
    test_costfit();
    test_node_times();
    test_fit();
    test_set();
    test_overlap();
    test_machine_keys();
    return tap_done();
}
