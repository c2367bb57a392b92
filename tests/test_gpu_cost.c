/* test_gpu_cost.c - the GPU kernel model (runtime/sim/gpu_kernels.h): GEMM
 * times with tile and wave quantization (batched too), attention throughput
 * interpolated from the published points, element-wise bytes per unit, the
 * eager attention's bytes and time (runtime/sim/eager_attention.h), against
 * values worked out by hand in the comments; eager above fused on gh200; the gpu.kernels keys load from the
 * shipped files and bad ones are refused naming the key. */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "graph/analysis.h"
#include "models/model.h"
#include "runtime/config/machine.h"
#include "runtime/sim/eager_attention.h"
#include "runtime/sim/gpu_kernels.h"
#include "runtime/sim/sim_cost.h"
#include "tests/tap.h"
#include "tests/test_util.h"

/* 800 TFLOP/s best GEMM, 132 SMs, 3 TB/s HBM; attention points below */
static sg_gpu_kernels toy_kernels(void)
{
    sg_gpu_kernels k = {.gemm_tflops = 800, .sms = 132, .hbm_gbs = 3000, .launch_us = 20};
    k.attn[0] = (sg_attn_point){128, 2048, 300, 200};
    k.attn[1] = (sg_attn_point){128, 8192, 400, 300};
    k.attn[2] = (sg_attn_point){64, 4096, 100, 90};
    k.nattn = 3;
    return k;
}

static void test_gemm(void)
{
    sg_gpu_kernels k = toy_kernels();
    /* 8192^3: 64 x 32 = 2048 tiles of 128 x 256, 16 waves of 132 SMs;
     * padded work 2 x 16 x 132 x 128 x 256 x 8192 = 1.133871e12 FLOP at
     * 800e12 = 1.417339e-3 s (memory: 2 x 3 x 8192^2 B / 3e12 = 1.3e-4) */
    is_close(sg_gemm_seconds(&k, 8192, 8192, 8192), 1.417339e-3, 1e-5,
             "8192^3: the last of 16 waves is partial, 775.8 of 800 TFLOP/s");
    /* at 1 GB/s of HBM the 1024^3 product is memory bound:
     * 2 x 3 x 1024^2 B = 6291456 B -> 6.291456e-3 s */
    sg_gpu_kernels slow = k;
    slow.hbm_gbs = 1;
    is_close(sg_gemm_seconds(&slow, 1024, 1024, 1024), 6.291456e-3, 1e-9,
             "memory bound: 2 (MK + KN + MN) bytes over the HBM bandwidth");
    ok(sg_gemm_seconds(&k, 0, 8, 8) == 0, "an empty product takes no time");
}

static void test_attention(void)
{
    sg_gpu_kernels k = toy_kernels();
    /* 4096 lies halfway between 2048 and 8192 in log2: (300 + 400) / 2 */
    is_close(sg_attention_tflops(&k, 128, 4096, 0), 350, 1e-12, "forward at 4096: 350");
    is_close(sg_attention_tflops(&k, 128, 4096, 1), 250, 1e-12, "backward at 4096: 250");
    is_close(sg_attention_tflops(&k, 128, 1024, 0), 300, 1e-12, "below the points: the first");
    is_close(sg_attention_tflops(&k, 128, 65536, 1), 300, 1e-12, "above the points: the last");
    is_close(sg_attention_tflops(&k, 80, 4096, 0), 100, 1e-12,
             "head dim 80 takes the nearest points (64)");
}

static void test_units(const sg_model *m)
{
    sg_gpu_kernels k = toy_kernels();
    int head = sg_model_num_units(m) - 1;
    /* Llama-3.1-8B's head, 16384 tokens: logits (16384, 128256) over 4096;
     * 128 x 501 = 64128 tiles, 486 waves of 132: 800 x 64128 / 64152 */
    is_close(sg_unit_gemm_flops_per_s(&k, m, head, 16384, 0), 799.7007e12, 1e-6,
             "8B head forward: 799.70 TFLOP/s");
    /* backward: dx (16384, 4096) over 128256: 2048 tiles, 16 waves (0.969697);
     * dW (128256, 4096) over 16384: 1002 x 16 = 16032 tiles, 122 waves
     * (0.995529); equal FLOPs, so the harmonic mean: 785.956 */
    is_close(sg_unit_gemm_flops_per_s(&k, m, head, 16384, 1), 785.956e12, 1e-5,
             "8B head backward: 785.96 TFLOP/s");
    ok(sg_unit_gemm_flops_per_s(&k, m, 0, 16384, 0) == 0, "the embedding has no product");
    /* a layer: 72H + 12(q + kv) + 10F + 12H bytes a token, H 4096, q 4096,
     * kv 1024, F 14336: 344064 + 61440 + 143360 = 548864; 10 tokens */
    is_close(sg_unit_elementwise_bytes(m, 1, 10, 0), 5488640, 1e-12,
             "8B layer forward: 548864 element-wise bytes a token");
    is_close(sg_unit_elementwise_bytes(m, 1, 10, 1), 10977280, 1e-12,
             "backward: twice the forward's");
    /* the head: 36H + 14V = 147456 + 1795584 */
    is_close(sg_unit_elementwise_bytes(m, head, 1, 0), 1943040, 1e-12,
             "8B head: the final norm and the loss on fp32 logits");
    /* attention alone in a layer: 1e12 forward FLOPs at 4096 (350 TFLOP/s)
     * plus the element-wise bytes of 1 token at 3 TB/s */
    double ew = 548864.0 / 3e12;
    is_close(sg_unit_gpu_seconds(&k, m, 1, 1, 4096, SG_OP_FORWARD, 0, 1e12, SG_ATTENTION_FUSED),
             1e12 / 350e12 + ew, 1e-9,
             "layer forward: attention at the forward rate + element-wise bytes");
    /* backward: stepgraph counts 2e12, the kernels' authors 2.5e12, at 250 */
    is_close(sg_unit_gpu_seconds(&k, m, 1, 1, 4096, SG_OP_BACKWARD, 0, 2e12, SG_ATTENTION_FUSED),
             2.5e12 / 250e12 + 2 * ew, 1e-9,
             "layer backward: attention counted as 2.5 forwards at the backward rate");
}

/* The shipped gh200.json; a failure is reported as a diagnostic. */
static int load_gh200(sg_machine *m)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/configs/machines/gh200.json", srcdir());
    sg_error err = {0};
    int rc = sg_machine_load(path, m, &err);
    if (rc)
        tap_diag("%s", err.msg);
    return rc;
}

/* Hugging Face's eager attention (eager_attention.h), on the toy kernels
 * (800 TFLOP/s, 132 SMs, 3 TB/s) for one sequence of T 1024 tokens. */
static void test_eager(const sg_model *llama, const sg_model *oss)
{
    sg_gpu_kernels k = toy_kernels();
    /* a batch sharing its waves: 3 products (1024, 1024, 8192), 3 x 8 x 4 =
     * 96 tiles, one wave of 132 SMs: 2 x 132 x 128 x 256 x 8192 FLOP at
     * 800e12 = 8.858370048e-5 s (memory: 3 x 2 x (2 x 1024 x 8192 +
     * 1024^2) B at 3e12 = 3.57e-5) */
    is_close(sg_gemm_batched_seconds(&k, 3, 1024, 1024, 8192), 8.858370048e-5, 1e-9,
             "batched GEMM: three products in one partial wave, costed as a full one");
    ok(sg_gemm_batched_seconds(&k, 1, 8192, 8192, 8192) == sg_gemm_seconds(&k, 8192, 8192, 8192),
       "a batch of one is the single product");
    /* GPT-OSS-20B (H 64, Hkv 8, d 64), B 1, T 1024: S = 64 x 1024^2 =
     * 67108864 scores, M = 1024^2 mask, Q = 64 x 1024 x 64 = 4194304,
     * KV = 524288. Forward element-wise: 2 B x (11 S + M + 4 Q + 2 KV) =
     * 1514143744 B; backward 2 x (15 S + 6 Q + 2 KV) = 2065694720 B. */
    is_close(sg_eager_attention_bytes(oss, 1, 1024, 0), 1514143744.0, 1e-12,
             "gpt-oss eager forward: 11 bf16 passes over the scores + mask + q-sized copies");
    is_close(sg_eager_attention_bytes(oss, 1, 1024, 1), 2065694720.0, 1e-12,
             "gpt-oss eager backward: 15 bf16 passes over the scores + q-sized copies");
    /* its products, 64 per batch: q k^T (1024, 1024, 64) is 2048 tiles, 16
     * waves, 8.86e9 padded FLOP = 1.11e-5 s, under its 64 x 2 x (2 x 1024 x
     * 64 + 1024^2) = 150994944 B = 5.0331648e-5 s at 3 TB/s; P v (1024, 64,
     * 1024), dq (the same) and dk^T (64, 1024, 1024) move the same bytes and
     * are memory bound too (4.43e-5 and 2.21e-5 s of padded work). Forward:
     * 1514143744 / 3e12 + 2 x 5.0331648e-5 = 6.053778773e-4 s; backward:
     * 2065694720 / 3e12 + 4 x 5.0331648e-5 = 8.898914987e-4 s. */
    is_close(sg_eager_attention_seconds(&k, oss, 1, 1024, 0), 6.053778773e-4, 1e-9,
             "gpt-oss eager forward at T 1024: 2 products + bytes at the HBM bandwidth");
    is_close(sg_eager_attention_seconds(&k, oss, 1, 1024, 1), 8.898914987e-4, 1e-9,
             "gpt-oss eager backward at T 1024: 4 products + bytes");
    /* Llama-3.1-8B (H 32, Hkv 8, d 128), B 1, T 1024, its softmax in fp32:
     * S = 33554432, M = 1048576, Q = 4194304, KV = 1048576; forward 28 S +
     * 2 (M + 4 Q + 2 KV) = 979369984 B, backward 28 S + 2 (6 Q + 2 KV) =
     * 994050048 B */
    is_close(sg_eager_attention_bytes(llama, 1, 1024, 0), 979369984.0, 1e-12,
             "llama eager forward: 28 bytes a score (fp32 softmax) + mask + copies");
    is_close(sg_eager_attention_bytes(llama, 1, 1024, 1), 994050048.0, 1e-12,
             "llama eager backward: 28 bytes a score + copies");
    /* a layer node: eager replaces the fused attention term, whatever the
     * node's attention FLOPs; products and element-wise kernels unchanged */
    double base =
        sg_unit_gpu_seconds(&k, oss, 2, 1024, 1024, SG_OP_RECOMPUTE, 1e12, 0, SG_ATTENTION_EAGER);
    is_close(sg_unit_gpu_seconds(&k, oss, 2, 1024, 1024, SG_OP_RECOMPUTE, 1e12, 5e11,
                                 SG_ATTENTION_EAGER) -
                 base,
             6.053778773e-4, 1e-6, "a recompute node's eager attention is the forward's");
    ok(sg_unit_gpu_seconds(&k, oss, 2, 1024, 1024, SG_OP_FORWARD, 1e12, 0, SG_ATTENTION_EAGER) ==
           sg_unit_gpu_seconds(&k, oss, 2, 1024, 1024, SG_OP_FORWARD, 1e12, 0, SG_ATTENTION_FUSED),
       "a unit without attention FLOPs costs the same either way");
}

/* On gh200's figures, eager attention costs more than the fused kernel at
 * long sequences: every layer of both models, forward and backward, B 4 at
 * T 2048, 4096, 8192, with stepgraph's causal count of the fused FLOPs
 * (forward 2 B H T^2 d, backward twice). */
static void test_eager_vs_fused(const sg_model *llama, const sg_model *oss)
{
    sg_machine mach;
    if (load_gh200(&mach)) {
        ok(0, "gh200.json loads");
        return;
    }
    const sg_model *ms[2] = {llama, oss};
    int bad = 0, n = 0;
    for (int i = 0; i < 2; i++)
        for (int64_t T = 2048; T <= 8192; T *= 2)
            for (int unit = 1; unit <= ms[i]->num_layers; unit++)
                for (int bwd = 0; bwd < 2; bwd++) {
                    const sg_model *m = ms[i];
                    sg_op_kind kind = bwd ? SG_OP_BACKWARD : SG_OP_FORWARD;
                    double af = (bwd ? 2.0 : 1.0) * 2.0 * 4 * m->num_heads * (double)T * (double)T *
                                m->head_dim;
                    double f = sg_unit_gpu_seconds(&mach.kernels, m, unit, 4 * T, T, kind, 0, af,
                                                   SG_ATTENTION_FUSED);
                    double e = sg_unit_gpu_seconds(&mach.kernels, m, unit, 4 * T, T, kind, 0, af,
                                                   SG_ATTENTION_EAGER);
                    n++;
                    if (!(e > f)) {
                        bad++;
                        tap_diag("%s unit %d T %lld %s: eager %g <= fused %g", m->name, unit,
                                 (long long)T, bwd ? "backward" : "forward", e, f);
                    }
                }
    ok(bad == 0,
       "gh200: eager attention above fused on all %d layer nodes (llama-3.1-8b, "
       "gpt-oss-20b; T 2048 to 8192)",
       n);
}

/* The shipped GH200 file's kernel figures and the node costs they give. */
static void test_machine_and_node(const sg_model *md)
{
    sg_machine m;
    int rc = load_gh200(&m);
    ok(rc == 0 && m.kernels.gemm_tflops == 795 && m.kernels.sms == 132 &&
           m.kernels.hbm_gbs == 3580 && m.kernels.nattn == 6 && m.kernels.attn[3].seq == 4096 &&
           m.kernels.attn[3].fwd_tflops == 319 && m.kernels.attn[3].bwd_tflops == 285,
       "gh200.json: gpu.kernels as cited (795 TFLOP/s GEMM, 132 SMs, FA2 319/285 at 4k)");
    sg_sim_costs c;
    sg_sim_costs_init(&c, &m, SG_BF16, 1, 1);
    sg_node nd;
    memset(&nd, 0, sizeof nd);
    nd.kind = SG_OP_GRAD_NORM;
    nd.layer = -1;
    nd.bytes_read = 3580000000; /* 3.58 GB */
    double roof = sg_sim_node_seconds(&c, &nd, SG_SIM_GPU);
    double cpu = sg_sim_node_seconds(&c, &nd, SG_SIM_CPU);
    sg_sim_costs_set_model(&c, md, 4, 4096);
    /* 3.58 GB at the achieved 3580 GB/s = 1 ms, + 20 us of launches; the
     * roofline took 4000 GB/s x elementwise 0.8 */
    is_close(sg_sim_node_seconds(&c, &nd, SG_SIM_GPU), 1e-3 + 20e-6, 1e-9,
             "a memory-bound GPU kind streams at gpu.kernels.hbm_gbs");
    is_close(roof, 3.58e9 / 3200e9 + 20e-6, 1e-9, "without the model: the flat roofline");
    ok(sg_sim_node_seconds(&c, &nd, SG_SIM_CPU) == cpu, "CPU tasks keep their cost");
}

/* The graph's cost model with the kernel hook: GPU nodes take the
 * simulation's time, CPU nodes keep the roofline; a machine without
 * gpu.kernels leaves the hook unset. */
static void test_cost_model_hook(const sg_model *md)
{
    sg_machine m;
    if (load_gh200(&m)) {
        ok(0, "gh200.json loads");
        ok(0, "skipped");
        ok(0, "skipped");
        return;
    }
    sg_sim_costs c;
    sg_sim_costs_init(&c, &m, SG_BF16, 1, 1);
    sg_sim_costs_set_model(&c, md, 4, 4096);
    sg_cost_model cm;
    sg_machine_cost_model(&m, SG_BF16, &cm);
    sg_node gpu;
    memset(&gpu, 0, sizeof gpu);
    gpu.kind = SG_OP_CAST;
    gpu.device = SG_DEV_GPU;
    gpu.layer = -1;
    gpu.bytes_read = 3580000000; /* 1 ms at 3580 GB/s, + 20 us */
    sg_node cpu = gpu;
    cpu.device = SG_DEV_CPU;
    double cpu_roof = sg_node_ideal_seconds(&cm, &cpu);
    ok(sg_sim_cost_model_use_kernels(&cm, &c) == 1 && cm.gpu_seconds != NULL,
       "gh200 with the model: the hook is set");
    is_close(sg_node_ideal_seconds(&cm, &gpu), 1e-3 + 20e-6, 1e-9,
             "a GPU node's ideal time is the kernel model's");
    ok(sg_node_ideal_seconds(&cm, &cpu) == cpu_roof, "a CPU node keeps the roofline");
}

/* gh200.json with text replaced, loaded from a scratch file: the message */
static int load_edited(const char *from, const char *to, char *msg, size_t size)
{
    char src[4096], dir[4096], path[4200];
    snprintf(src, sizeof src, "%s/configs/machines/gh200.json", srcdir());
    FILE *f = fopen(src, "rb");
    if (!f)
        return -1;
    static char buf[1 << 16], out[1 << 16];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    char *at = strstr(buf, from);
    if (!at || make_test_dir(dir, sizeof dir, "gpu_cost"))
        return -1;
    snprintf(out, sizeof out, "%.*s%s%s", (int)(at - buf), buf, to, at + strlen(from));
    snprintf(path, sizeof path, "%s/m.json", dir);
    f = fopen(path, "wb");
    if (!f)
        return -1;
    fputs(out, f);
    fclose(f);
    sg_machine m;
    sg_error err = {0};
    int rc = sg_machine_load(path, &m, &err);
    snprintf(msg, size, "%s", err.msg);
    remove(path);
    rmdir(dir);
    return rc;
}

static void test_refusals(void)
{
    char msg[1024];
    int rc = load_edited("\"gemm_tflops\": 795", "\"gemm_tflops\": 1200", msg, sizeof msg);
    ok(rc != 0 && strstr(msg, "gpu.kernels.gemm_tflops 1200 is above"),
       "a GEMM rate above the GPU's peak is refused, naming the key (%s)", msg);
    rc = load_edited("\"hbm_gbs\": 3580", "\"hbm_gbs\": 5000", msg, sizeof msg);
    ok(rc != 0 && strstr(msg, "gpu.kernels.hbm_gbs 5000 is above gpu.memory_bw_gbs"),
       "an achieved bandwidth above the data sheet's is refused (%s)", msg);
    rc = load_edited("\"attention\"", "\"attn\"", msg, sizeof msg);
    ok(rc != 0 && strstr(msg, "gpu.kernels.attn is an unknown key"),
       "an unknown key under gpu.kernels is refused (%s)", msg);
    rc = load_edited("\"fwd_tflops\": 319", "\"fwd_tflops\": -3", msg, sizeof msg);
    ok(rc != 0 && strstr(msg, "gpu.kernels.attention[3].fwd_tflops"),
       "a bad attention point is refused with its index (%s)", msg);
}

int main(void)
{
    tap_plan(38);
    test_gemm();
    test_attention();
    sg_model *m = calloc(1, sizeof *m);
    if (!m || load_model("llama-3.1-8b", m)) {
        printf("Bail out! cannot load llama-3.1-8b\n");
        return 1;
    }
    test_units(m);
    sg_model *oss = calloc(1, sizeof *oss);
    if (!oss || load_model("gpt-oss-20b", oss)) {
        printf("Bail out! cannot load gpt-oss-20b\n");
        return 1;
    }
    test_eager(m, oss);
    test_eager_vs_fused(m, oss);
    free(oss);
    test_machine_and_node(m);
    test_cost_model_hook(m);
    test_refusals();
    free(m);
    return tap_done();
}
