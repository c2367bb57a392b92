/* test_train_util.c - the small training-loop helpers: DeepSpeed's lr
 * schedules (runtime/train/lr_schedule.c), the fp16 loss scaler
 * (codelets/cpu/loss_scale.c, set up by runtime/train/loss_scaler.c), the
 * step log, summary and metrics JSONL (runtime/train/step_log.c) and the
 * Chrome trace writer (runtime/trace/trace.c).
 *
 * Expected values are worked out by hand from DeepSpeed's
 * deepspeed/runtime/lr_schedules.py and fp16/loss_scaler.py (the comments
 * show the arithmetic). Files go to a mkdtemp directory removed at the end.
 */
#define _POSIX_C_SOURCE 200809L /* mkdtemp */

#include <cjson/cJSON.h>
#include <dirent.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "runtime/config/config.h"
#include "runtime/train/speculation.h"
#include "runtime/train/loss_scaler.h"
#include "runtime/train/lr_schedule.h"
#include "runtime/train/step_log.h"
#include "runtime/trace/trace.h"
#include "models/flops.h"
#include "tests/tap.h"
#include "tests/test_util.h"

static char dir[256];

static const char *tmp(const char *name)
{
    static char bufs[4][512];
    static int k;
    char *b = bufs[k++ % 4];
    snprintf(b, 512, "%s/%s", dir, name);
    return b;
}

/* whole file as a string (caller frees), NULL if unreadable */
static char *slurp(const char *path)
{
    FILE *fp = fopen(path, "rb");
    if (!fp)
        return NULL;
    fseek(fp, 0, SEEK_END);
    long n = ftell(fp);
    fseek(fp, 0, SEEK_SET);
    char *s = malloc((size_t)n + 1);
    size_t got = fread(s, 1, (size_t)n, fp);
    s[got] = '\0';
    fclose(fp);
    return s;
}

/* entries of the scratch directory, "." and ".." aside */
static int dir_entries(void)
{
    DIR *d = opendir(dir);
    int n = 0;
    struct dirent *e;
    while (d && (e = readdir(d)))
        n += strcmp(e->d_name, ".") && strcmp(e->d_name, "..");
    if (d)
        closedir(d);
    return n;
}

/* a member's number (NAN when absent) or string ("" when absent), so a
 * malformed file fails a check instead of crashing the test */
static double jnum(const cJSON *o, const char *key)
{
    const cJSON *v = o ? cJSON_GetObjectItem(o, key) : NULL;
    return cJSON_IsNumber(v) ? v->valuedouble : NAN;
}

static const char *jstr(const cJSON *o, const char *key)
{
    const cJSON *v = o ? cJSON_GetObjectItem(o, key) : NULL;
    return cJSON_IsString(v) ? v->valuestring : "";
}

/* ---------------------------------------------------------------- lr --- */

static sg_ds_config sched(sg_lr_schedule type, sg_warmup_type wt, double min_lr, double max_lr,
                          int64_t warmup, int64_t total)
{
    sg_ds_config ds;
    sg_ds_config_defaults(&ds);
    ds.optimizer.lr = 0.5; /* must not leak into a scheduled lr */
    ds.scheduler.type = type;
    ds.scheduler.warmup_type = wt;
    ds.scheduler.warmup_min_lr = min_lr;
    ds.scheduler.warmup_max_lr = max_lr;
    ds.scheduler.warmup_num_steps = warmup;
    ds.scheduler.total_num_steps = total;
    return ds;
}

static void test_lr(void)
{
    const double tol = 1e-12;
    sg_ds_config ds;

    sg_ds_config_defaults(&ds);
    ds.optimizer.lr = 3e-4;
    ds.scheduler.type = SG_SCHED_NONE;
    is_close(sg_lr_at(&ds, 0), 3e-4, tol, "no scheduler: update 0 uses optimizer.lr");
    is_close(sg_lr_at(&ds, 12345), 3e-4, tol, "no scheduler: lr is constant");

    /* WarmupLR, log, 0 -> 1e-3 over W = 10: lr(k) = 1e-3 * ln(k) / ln(10) for
     * update k >= 1 (last_batch_iteration k - 1), min lr for update 0 */
    ds = sched(SG_SCHED_WARMUP_LR, SG_WARMUP_LOG, 0.0, 1e-3, 10, 0);
    is_close(sg_lr_at(&ds, 0), 0.0, tol, "WarmupLR log: first update uses warmup_min_lr");
    is_close(sg_lr_at(&ds, 1), 0.0, tol, "WarmupLR log: update 1 still min (ln 1 = 0)");
    is_close(sg_lr_at(&ds, 2), 3.0102999566398113e-4, 1e-9,
             "WarmupLR log: update 2 = 1e-3 * ln2/ln10");
    is_close(sg_lr_at(&ds, 5), 6.989700043360188e-4, 1e-9,
             "WarmupLR log: update 5 = 1e-3 * ln5/ln10");
    is_close(sg_lr_at(&ds, 10), 1e-3, 1e-9, "WarmupLR log: update 10 reaches max (ln10/ln10)");
    is_close(sg_lr_at(&ds, 11), 1e-3, tol, "WarmupLR log: after warm-up stays at max");
    is_close(sg_lr_at(&ds, 100000), 1e-3, tol, "WarmupLR log: no decay, ever");

    /* WarmupLR, linear, 1e-4 -> 1e-3 over W = 4: 1e-4 + 9e-4 * (k - 1) / 4 */
    ds = sched(SG_SCHED_WARMUP_LR, SG_WARMUP_LINEAR, 1e-4, 1e-3, 4, 0);
    is_close(sg_lr_at(&ds, 0), 1e-4, tol, "WarmupLR linear: update 0 = min");
    is_close(sg_lr_at(&ds, 1), 1e-4, tol, "WarmupLR linear: update 1 = min (0/4)");
    is_close(sg_lr_at(&ds, 2), 3.25e-4, 1e-9, "WarmupLR linear: update 2 = 1e-4 + 9e-4/4");
    is_close(sg_lr_at(&ds, 4), 7.75e-4, 1e-9, "WarmupLR linear: update 4 = 1e-4 + 9e-4*3/4");
    is_close(sg_lr_at(&ds, 5), 1e-3, tol, "WarmupLR linear: update 5 = max");
    is_close(sg_lr_at(&ds, 50), 1e-3, tol, "WarmupLR linear: stays at max");

    /* warmup_num_steps 1 is clamped to 2: linear update 2 = 1/2 of the way
     * (unclamped it would be at max); log would divide by ln 1 = 0 */
    ds = sched(SG_SCHED_WARMUP_LR, SG_WARMUP_LINEAR, 0.0, 1e-3, 1, 0);
    is_close(sg_lr_at(&ds, 2), 5e-4, 1e-9, "warmup_num_steps 1 acts as 2 (linear)");
    ds = sched(SG_SCHED_WARMUP_LR, SG_WARMUP_LOG, 0.0, 1e-3, 1, 0);
    is_close(sg_lr_at(&ds, 2), 1e-3, 1e-9, "warmup_num_steps 1 acts as 2 (log: ln2/ln2)");

    /* WarmupDecayLR, linear, 0 -> 1e-3, W = 4, total 12: after warm-up
     * gamma = (12 - i) / (12 - 4), i = k - 1 */
    ds = sched(SG_SCHED_WARMUP_DECAY_LR, SG_WARMUP_LINEAR, 0.0, 1e-3, 4, 12);
    is_close(sg_lr_at(&ds, 2), 2.5e-4, 1e-9, "WarmupDecayLR linear: warm-up 1/4");
    is_close(sg_lr_at(&ds, 5), 1e-3, 1e-9, "WarmupDecayLR: peak at the end of warm-up (8/8)");
    is_close(sg_lr_at(&ds, 7), 7.5e-4, 1e-9, "WarmupDecayLR: update 7 = 1e-3 * (12-6)/8");
    is_close(sg_lr_at(&ds, 13), 0.0, tol, "WarmupDecayLR: 0 at total_num_steps");
    is_close(sg_lr_at(&ds, 20), 0.0, tol, "WarmupDecayLR: clamped at 0 after total");

    /* WarmupDecayLR, log, 1e-5 -> 1e-3, W = 100, total 1100 */
    ds = sched(SG_SCHED_WARMUP_DECAY_LR, SG_WARMUP_LOG, 1e-5, 1e-3, 100, 1100);
    is_close(sg_lr_at(&ds, 0), 1e-5, tol, "WarmupDecayLR log: update 0 = min");
    is_close(sg_lr_at(&ds, 11), 5.254893791533214e-4, 1e-9,
             "WarmupDecayLR log: update 11 = 1e-5 + 9.9e-4 * ln11/ln100");
    is_close(sg_lr_at(&ds, 101), 1e-3, 1e-9, "WarmupDecayLR log: update 101 = max");
    is_close(sg_lr_at(&ds, 601), 5.05e-4, 1e-9,
             "WarmupDecayLR log: update 601 = 1e-5 + 9.9e-4 * 500/1000");
    is_close(sg_lr_at(&ds, 1101), 1e-5, 1e-9, "WarmupDecayLR: decays to warmup_min_lr");
    is_close(sg_lr_at(&ds, 5000), 1e-5, 1e-9, "WarmupDecayLR: stays at warmup_min_lr");

    /* total < warmup: no decay window, straight to min after warm-up */
    ds = sched(SG_SCHED_WARMUP_DECAY_LR, SG_WARMUP_LINEAR, 1e-4, 1e-3, 10, 5);
    is_close(sg_lr_at(&ds, 10), 1e-4 + 9e-4 * 0.9, 1e-9,
             "WarmupDecayLR total < warmup: warm-up unchanged");
    is_close(sg_lr_at(&ds, 11), 1e-4, 1e-9, "WarmupDecayLR total < warmup: then min");
}

/* -------------------------------------------------------- loss scaler --- */

static sg_ds_config fp16(double static_scale, int64_t power, int64_t window, int64_t hyst,
                         double min_scale)
{
    sg_ds_config ds;
    sg_ds_config_defaults(&ds);
    ds.fp16.enabled = 1;
    ds.fp16.loss_scale = static_scale;
    ds.fp16.initial_scale_power = power;
    ds.fp16.loss_scale_window = window;
    ds.fp16.hysteresis = hyst;
    ds.fp16.min_loss_scale = min_scale;
    return ds;
}

/* Runs the overflow sequence and compares the scale after each update. */
static void scale_seq(sg_loss_scaler_state *s, const sg_loss_scaler_params *p, const char *what,
                      const int *ovf, const double *want, int n)
{
    int bad = -1;
    double got = 0;
    for (int i = 0; i < n; i++) {
        sg_loss_scaler_update(s, p, ovf[i]);
        if (bad < 0 && s->scale != want[i]) {
            bad = i;
            got = s->scale;
        }
    }
    if (!ok(bad < 0, "%s", what))
        tap_diag("  after update %d: scale %g, expected %g", bad, got, want[bad]);
}

static void test_loss_scaler(void)
{
    sg_loss_scaler_params p;
    sg_loss_scaler_state s;
    sg_ds_config ds;

    /* no fp16 / bf16: scale 1, static */
    sg_ds_config_defaults(&ds);
    ds.bf16.enabled = 1;
    sg_loss_scaler_init(&p, &s, &ds);
    sg_loss_scaler_update(&s, &p, 1);
    ok(s.scale == 1.0 && !p.dynamic, "bf16: scale 1, not dynamic, overflow ignored");

    /* static */
    ds = fp16(128.0, 16, 1000, 2, 1.0);
    sg_loss_scaler_init(&p, &s, &ds);
    int rc = 0;
    for (int i = 0; i < 5; i++)
        rc |= sg_loss_scaler_update(&s, &p, i % 2);
    for (int i = 0; i < 2000; i++)
        rc |= sg_loss_scaler_update(&s, &p, 0);
    ok(s.scale == 128.0 && !p.dynamic && rc == 0, "static loss_scale 128 never changes");

    /* dynamic: 2^4 = 16, window 3, hysteresis 2, min 1 */
    ds = fp16(0.0, 4, 3, 2, 1.0);
    sg_loss_scaler_init(&p, &s, &ds);
    ok(p.dynamic && s.scale == 16.0 && s.cur_hysteresis == 2 && s.last_overflow_iter == -1,
       "dynamic: starts at 2^initial_scale_power with full hysteresis");
    {
        /* it: 0-3 clean -> stable interval 3 at it 3: x2 = 32
         * it 4 overflow: hysteresis 2 -> 1, scale kept
         * it 5, 6 overflow: hysteresis used up: 16, 8
         * it 7-10 clean: stable 3 at it 10 (3 clean before it): 16, refill
         * it 11 overflow: hysteresis -> 1; it 12 clean; it 13 overflow: 8 */
        const int ovf[] = {0, 0, 0, 0, 1, 1, 1, 0, 0, 0, 0, 1, 0, 1};
        const double want[] = {16, 16, 16, 32, 32, 16, 8, 8, 8, 8, 16, 16, 16, 8};
        scale_seq(&s, &p, "dynamic: hysteresis, window growth and halving (14 updates)", ovf, want,
                  14);
        ok(s.cur_iter == 14 && s.last_overflow_iter == 13 && s.cur_hysteresis == 1,
           "dynamic: cur_iter, last_overflow_iter and cur_hysteresis follow DeepSpeed "
           "(%lld, %lld, %lld)",
           (long long)s.cur_iter, (long long)s.last_overflow_iter, (long long)s.cur_hysteresis);
    }

    /* growth every scale_window clean steps: window 2 from scale 1 grows at
     * it 2, 4, 6 (stable interval = it while nothing overflowed) */
    ds = fp16(0.0, 0, 2, 2, 1.0);
    sg_loss_scaler_init(&p, &s, &ds);
    {
        const int ovf[] = {0, 0, 0, 0, 0, 0, 0};
        const double want[] = {1, 1, 2, 2, 4, 4, 8};
        scale_seq(&s, &p, "dynamic: first growth on the (window+1)-th clean step, then each window",
                  ovf, want, 7);
    }

    /* min scale: hysteresis 1 halves at once; at min DeepSpeed raises */
    ds = fp16(0.0, 2, 1000, 1, 1.0);
    sg_loss_scaler_init(&p, &s, &ds);
    {
        const int ovf[] = {1, 1};
        const double want[] = {2, 1};
        scale_seq(&s, &p, "hysteresis 1: each overflow halves, down to min_loss_scale", ovf, want,
                  2);
        rc = sg_loss_scaler_update(&s, &p, 1);
        ok(rc == SG_LOSS_SCALER_AT_MIN && s.scale == 1.0 && s.cur_iter == 2,
           "overflow at min_loss_scale: SG_LOSS_SCALER_AT_MIN, state unchanged");
        ok(sg_loss_scaler_update(&s, &p, 0) == 0, "a clean step at min scale is fine");
    }
    ds = fp16(0.0, 3, 1000, 1, 3.0);
    sg_loss_scaler_init(&p, &s, &ds);
    {
        const int ovf[] = {1, 1};
        const double want[] = {4, 3};
        scale_seq(&s, &p, "a min_loss_scale that is not a power of 2 clamps (8 -> 4 -> 3)", ovf,
                  want, 2);
        is_int(sg_loss_scaler_update(&s, &p, 1), SG_LOSS_SCALER_AT_MIN,
               "and the next overflow is at the minimum");
    }

    /* consecutive_hysteresis: a clean step refills the hysteresis, so
     * overflow / clean / overflow keeps the scale; without it the second
     * overflow halves */
    ds = fp16(0.0, 10, 100, 2, 1.0);
    sg_loss_scaler_init(&p, &s, &ds);
    p.consecutive_hysteresis = 1;
    {
        const int ovf[] = {1, 0, 1, 1};
        const double want[] = {1024, 1024, 1024, 512};
        scale_seq(&s, &p, "consecutive_hysteresis: clean steps refill hysteresis", ovf, want, 4);
    }
    sg_loss_scaler_init(&p, &s, &ds);
    {
        const int ovf[] = {1, 0, 1};
        const double want[] = {1024, 1024, 512};
        scale_seq(&s, &p, "default (no consecutive_hysteresis): clean steps do not refill", ovf,
                  want, 3);
    }
}

/* ----------------------------------------------------------- step log --- */

static void test_step_lines(void)
{
    /* L=2 h=64 V=128 B=4 s=32: 24*3*4*32*2*64^2 = 75497472;
     * (1 + 32/384 + 128/2048) = 1.1458333; flops 86507520 in 0.5 s */
    is_close(sg_flops_per_s_tera(sg_flops_megatron(2, 64, 128, 4, 32, 0), 0.5), 1.7301504e-4, 1e-12,
             "Megatron TFLOPS: no checkpointing (c = 3)");
    is_close(sg_flops_per_s_tera(sg_flops_megatron(2, 64, 128, 4, 32, 1), 0.5), 2.3068672e-4, 1e-12,
             "Megatron TFLOPS: activation checkpointing (c = 4)");
    ok(isnan(sg_flops_per_s_tera(sg_flops_megatron(2, 64, 128, 4, 32, 0), 0.0)) &&
           isnan(sg_flops_megatron(0, 64, 128, 4, 32, 0)),
       "Megatron TFLOPS: NAN for zero time or a zero size");
    /* active parameters: c B s (2 P + 4 s q L), P = 1e6 - 1e5 embedding rows */
    is_close(sg_step_active_tflops(1000000, 100000, 0, 2, 64, 4, 32, 0, 0.5), 1.394982912e-3, 1e-12,
             "Active TFLOPS: 3 B s (2 P + 4 s q L), the input embedding left out");
    is_close(sg_step_active_tflops(1000000, 100000, 1, 2, 64, 4, 32, 0, 0.5), 1.548582912e-3, 1e-12,
             "Active TFLOPS: a tied embedding counts (it is the head's matrix)");
    is_close(sg_step_active_tflops(1000000, 100000, 0, 2, 64, 4, 32, 1, 0.5), 1.859977216e-3, 1e-12,
             "Active TFLOPS: activation checkpointing (c = 4)");
    ok(isnan(sg_step_active_tflops(1000000, 100000, 0, 2, 64, 4, 32, 0, 0.0)),
       "Active TFLOPS: NAN for zero time");

    char buf[512];
    int n = sg_format_step_line(buf, sizeof buf, 12, 4.51234, 153.2149, 0.0123, 6684.23);
    is_str(buf, "Step 12 | Loss: 4.5123 | Time: 153.21 ms | TFLOPS: 0.01 | Tokens/s: 6684.2",
           "step line matches DeepSpeed's example format");
    is_int(n, (int)strlen(buf), "step line: returns its length");
    sg_format_step_line(buf, sizeof buf, 3, 10.0, 1.0, NAN, 100.0);
    is_str(buf, "Step 3 | Loss: 10.0000 | Time: 1.00 ms | TFLOPS: n/a | Tokens/s: 100.0",
           "step line: TFLOPS n/a when NAN");
    char small[10];
    n = sg_format_step_line(small, sizeof small, 12, 4.5, 1.0, 1.0, 1.0);
    ok(n > 9 && strcmp(small, "Step 12 |") == 0,
       "step line: truncates safely and reports the full length (%d)", n);

    sg_phase_times p = {0.01234, 0.02345, 0.00321, 0.001};
    sg_format_breakdown_line(buf, sizeof buf, &p);
    is_str(buf, "time (ms) | forward: 12.34 | backward: 23.45 | optimizer: 3.21 | transfer: 1.00",
           "wall_clock_breakdown line");
    p.transfer_s = NAN;
    sg_format_breakdown_line(buf, sizeof buf, &p);
    like(buf, "| transfer: n/a", "breakdown: unmeasured phase is n/a");
}

static void test_summary(void)
{
    sg_step_stats st;
    sg_step_summary s;
    char buf[1024];

    sg_step_stats_init(&st);
    sg_step_stats_add(&st, 0, 1.0, 100, &(sg_step_rates){9.0, 9.0 / 2, NAN, NAN},
                      1); /* warm-up: slow, excluded */
    sg_step_stats_add(&st, 1, 0.2, 1000, &(sg_step_rates){2.0, 2.0 / 2, NAN, NAN}, 0);
    sg_step_stats_add(&st, 2, 0.3, 1000, &(sg_step_rates){4.0, 4.0 / 2, NAN, NAN}, 0);
    sg_step_stats_add(&st, 3, 0.1, 1000, &(sg_step_rates){1.0, 1.0 / 2, NAN, NAN}, 0);
    sg_step_stats_summary(&st, &s);
    ok(s.steps == 3 && s.warmup_excluded == 1 && !s.all_warmup && s.first_step == 1 &&
           s.last_step == 3,
       "summary: 3 timed steps, 1 warm-up excluded");
    is_close(s.mean_s, 0.2, 1e-12, "summary: mean step time over non-warm-up steps");
    ok(s.min_s == 0.1 && s.max_s == 0.3, "summary: min and max step time");
    is_close(s.tokens_per_s, 5000.0, 1e-12, "summary: tokens/s = 3000 tokens / 0.6 s");
    /* FLOP-weighted: (2*0.2 + 4*0.3 + 1*0.1) / 0.6 */
    is_close(s.tflops, 1.7 / 0.6, 1e-12, "summary: TFLOPS = total FLOP / total time");
    is_close(s.model_tflops, 0.85 / 0.6, 1e-12, "summary: model TFLOPS weighted the same way");

    sg_mem_peak peaks[] = {{"CUDA", 3LL << 29}, {"CPU", 512LL << 20}, {"NUMA 1", -1}};
    sg_step_stats_format_summary(&st, peaks, 3, buf, sizeof buf);
    like(buf, "Summary: 3 steps (1..3), 1 warm-up step excluded\n", "summary text: header");
    like(buf, "Step time: mean 200.00 ms | min 100.00 ms | max 300.00 ms\n",
         "summary text: step times");
    like(buf, "Throughput: 5000.0 tokens/s | TFLOPS: 2.83 | Model TFLOPS: 1.42\n",
         "summary text: throughput");
    like(buf, "Peak memory: CUDA 1.50 GiB | CPU 512.0 MiB | NUMA 1 n/a\n",
         "summary text: peak memory per device class");

    sg_step_stats_init(&st);
    sg_step_stats_add(&st, 0, 0.5, 10, &(sg_step_rates){1.0, 1.0 / 2, NAN, NAN}, 1);
    sg_step_stats_add(&st, 1, 1.5, 30, &(sg_step_rates){NAN, 0.5, NAN, NAN}, 1);
    sg_step_stats_summary(&st, &s);
    ok(s.all_warmup && s.steps == 2 && s.warmup_excluded == 0 && s.mean_s == 1.0,
       "summary: all warm-up steps -> figures over all of them");
    ok(isnan(s.tflops) && s.tokens_per_s == 20.0, "summary: one step without TFLOPS -> n/a");
    sg_step_stats_format_summary(&st, NULL, 0, buf, sizeof buf);
    like(buf, "all warm-up steps", "summary text: says the figures include warm-up");
    like(buf, "TFLOPS: n/a", "summary text: TFLOPS n/a");
    ok(!strstr(buf, "Peak memory"), "summary text: no memory line without peaks");

    sg_step_stats_init(&st);
    sg_step_stats_format_summary(&st, NULL, 0, buf, sizeof buf);
    is_str(buf, "Summary: no steps ran\n", "summary text: no steps");
    sg_step_stats_add(&st, 5, 0.25, 10, &(sg_step_rates){1.0, 1.0 / 2, NAN, NAN}, 0);
    sg_step_stats_format_summary(&st, NULL, 0, buf, sizeof buf);
    like(buf, "Summary: 1 step (step 5)\n  Step time: mean 250.00 ms", "summary text: one step");
}

static int count_lines(const char *s)
{
    int n = 0;
    for (; s && *s; s++)
        n += *s == '\n';
    return n;
}

static void test_metrics(void)
{
    sg_metrics m;
    sg_error err = {0};
    const char *path = tmp("metrics.jsonl");
    int rc = sg_metrics_open(&m, path, &err);
    is_int(rc, 0, "metrics: open");
    sg_update_hyper h1 = {1e-4, 0.9, 0.999}, h2 = {2e-4, 0.85, 0.99};
    sg_step_rates r1 = {0.5, 0.375, 0.625, 0.25}, r2 = {NAN, 0.5, NAN, NAN};
    rc = sg_metrics_write_step(&m, 1, 4.25, &h1, 0.5, 65536, 0.125, 2048, &r1, 0, NULL);
    char *text = slurp(path);
    ok(rc == 0 && count_lines(text) == 1, "metrics: a line is on disk before close");
    free(text);
    sg_phase_times p = {0.01, 0.02, 0.003, NAN};
    rc |= sg_metrics_write_step(&m, 2, NAN, &h2, INFINITY, 32768, 0.25, 1024, &r2, 1, &p);
    rc |= sg_metrics_close(&m, &err);
    is_int(rc, 0, "metrics: write and close");
    is_int(sg_metrics_close(&m, &err), 0, "metrics: close twice is harmless");

    text = slurp(path);
    is_int(count_lines(text), 2, "metrics: one line per step");
    char *nl = text ? strchr(text, '\n') : NULL;
    if (nl)
        *nl = '\0';
    cJSON *a = text ? cJSON_Parse(text) : NULL;
    cJSON *b = nl ? cJSON_Parse(nl + 1) : NULL;
    ok(a && b, "metrics: each line is a JSON object");
    if (a && b) {
        ok(jnum(a, "step") == 1 && jnum(a, "loss") == 4.25 && jnum(a, "lr") == 1e-4 &&
               jnum(a, "beta1") == 0.9 && jnum(a, "beta2") == 0.999 &&
               jnum(a, "loss_scale") == 65536 && jnum(a, "time_ms") == 125.0 &&
               jnum(a, "tflops") == 0.5 && jnum(a, "model_tflops") == 0.375 &&
               jnum(a, "megatron_tflops") == 0.625 && jnum(a, "mfu") == 0.25 &&
               cJSON_IsFalse(cJSON_GetObjectItem(a, "skipped")) &&
               !cJSON_GetObjectItem(a, "phases_ms"),
           "metrics: line 1 fields");
        ok(cJSON_IsNull(cJSON_GetObjectItem(b, "loss")) &&
               cJSON_IsNull(cJSON_GetObjectItem(b, "grad_norm")) &&
               cJSON_IsNull(cJSON_GetObjectItem(b, "tflops")) &&
               cJSON_IsNull(cJSON_GetObjectItem(b, "mfu")) && jnum(b, "model_tflops") == 0.5,
           "metrics: NAN and inf are written as null");
        cJSON *ph = cJSON_GetObjectItem(b, "phases_ms");
        ok(cJSON_IsTrue(cJSON_GetObjectItem(b, "skipped")) && ph && jnum(ph, "forward") == 10.0 &&
               jnum(ph, "backward") == 20.0 && cJSON_IsNull(cJSON_GetObjectItem(ph, "transfer")),
           "metrics: skipped flag and phase times (ms)");
    } else {
        tap_skip(3, "metrics lines did not parse");
    }
    cJSON_Delete(a);
    cJSON_Delete(b);
    free(text);

    rc = sg_metrics_open(&m, tmp("no/such/dir/m.jsonl"), &err);
    ok(rc == SG_EIO && strstr(err.msg, "no/such/dir/m.jsonl"),
       "metrics: unwritable path is SG_EIO naming it (%s)", err.msg);
}

/* An evaluation's line (runtime/train/eval.h): the Trainer's key names, no
 * "loss" (readers of training losses take the lines that have one), a
 * non-finite loss as null. */
static void test_metrics_eval(void)
{
    sg_metrics m;
    sg_error err = {0};
    const char *path = tmp("eval.jsonl");
    int rc = sg_metrics_open(&m, path, &err);
    rc |= sg_metrics_write_eval(&m, 12, 2.5, exp(2.5), 2048, 0.0625);
    rc |= sg_metrics_write_eval(&m, 13, NAN, NAN, 0, 0.5);
    rc |= sg_metrics_close(&m, &err);
    char *text = slurp(path);
    char *nl = text ? strchr(text, '\n') : NULL;
    if (nl)
        *nl = '\0';
    cJSON *a = text ? cJSON_Parse(text) : NULL;
    cJSON *b = nl ? cJSON_Parse(nl + 1) : NULL;
    ok(rc == 0 && a && b && jnum(a, "step") == 12 && jnum(a, "eval_loss") == 2.5 &&
           jnum(a, "eval_ppl") == exp(2.5) && jnum(a, "eval_tokens") == 2048 &&
           jnum(a, "eval_time_ms") == 62.5 && !cJSON_GetObjectItem(a, "loss"),
       "metrics: an evaluation's line (eval_loss, eval_ppl, eval_tokens, eval_time_ms, no loss)");
    ok(b && cJSON_IsNull(cJSON_GetObjectItem(b, "eval_loss")) &&
           cJSON_IsNull(cJSON_GetObjectItem(b, "eval_ppl")),
       "metrics: a non-finite eval loss is written as null");
    cJSON_Delete(a);
    cJSON_Delete(b);
    free(text);
}

/* -------------------------------------------------------------- trace --- */

/* first event with this ph and tid (and name, if given) */
static cJSON *find_event(cJSON *events, const char *ph, int tid, const char *name)
{
    cJSON *e;
    cJSON_ArrayForEach (e, events) {
        cJSON *p = cJSON_GetObjectItem(e, "ph"), *t = cJSON_GetObjectItem(e, "tid");
        cJSON *n = cJSON_GetObjectItem(e, "name");
        if (cJSON_IsString(p) && !strcmp(p->valuestring, ph) && cJSON_IsNumber(t) &&
            t->valueint == tid && (!name || (cJSON_IsString(n) && !strcmp(n->valuestring, name))))
            return e;
    }
    return NULL;
}

/* structure of the trace written by test_trace() */
static void check_trace_json(cJSON *root, const char *odd)
{
    cJSON *du = cJSON_GetObjectItem(root, "displayTimeUnit");
    cJSON *ev = cJSON_GetObjectItem(root, "traceEvents");
    ok(cJSON_IsString(du) && !strcmp(du->valuestring, "ms") && cJSON_IsArray(ev),
       "trace: object format with traceEvents and displayTimeUnit ms");
    /* process_name + 2 x (thread_name, thread_sort_index) + 2 X + s + f */
    is_int(cJSON_GetArraySize(ev), 9, "trace: 9 events (refused ones not written)");

    cJSON *pn = find_event(ev, "M", 0, "process_name");
    cJSON *tn = find_event(ev, "M", 1, "thread_name");
    cJSON *ts = find_event(ev, "M", 1, "thread_sort_index");
    ok(pn && jnum(pn, "pid") == 1 &&
           !strcmp(jstr(cJSON_GetObjectItem(pn, "args"), "name"), "stepgraph"),
       "trace: process 1 is named stepgraph");
    ok(tn && ts && !strcmp(jstr(cJSON_GetObjectItem(tn, "args"), "name"), "CUDA \"0\"") &&
           jnum(cJSON_GetObjectItem(ts, "args"), "sort_index") == 0,
       "trace: lane name (escaped) and sort index");

    cJSON *x = find_event(ev, "X", 0, NULL);
    ok(x && !strcmp(jstr(x, "name"), odd) && !strcmp(jstr(x, "cat"), "task"),
       "trace: quotes, backslashes and control characters in names round-trip");
    ok(x && jnum(x, "ts") == 10.0 && jnum(x, "dur") == 5.5 &&
           jnum(cJSON_GetObjectItem(x, "args"), "flops") == 12,
       "trace: X event timing (us) and args object");
    cJSON *x1 = find_event(ev, "X", 1, "adam");
    ok(x1 && !cJSON_GetObjectItem(x1, "cat") && !cJSON_GetObjectItem(x1, "args"),
       "trace: event without category or args");

    cJSON *fs = find_event(ev, "s", 0, NULL), *ff = find_event(ev, "f", 1, NULL);
    ok(fs && ff && jnum(fs, "id") == 7 && jnum(ff, "id") == 7 && jnum(fs, "ts") == 15.0 &&
           jnum(ff, "ts") == 21.0 && !strcmp(jstr(ff, "bp"), "e") &&
           !strcmp(jstr(fs, "name"), jstr(ff, "name")),
       "trace: flow s/f pair with one id, bind point e");
}

static void test_trace(void)
{
    sg_trace t;
    sg_error err = {0};
    const char *path = tmp("trace.json");
    const char *odd = "say \"hi\" \\ C:\\dir\n\ttab \x01 \xc3\xa9";
    int before = dir_entries();

    int rc = sg_trace_open(&t, path, &err);
    is_int(rc, 0, "trace: open");
    rc |= sg_trace_lane(&t, 0, "CPU 0", 1);
    rc |= sg_trace_lane(&t, 1, "CUDA \"0\"", 0);
    rc |= sg_trace_event(&t, 0, odd, "task", 10.0, 5.5, "{\"flops\": 12}");
    rc |= sg_trace_event(&t, 1, "adam", NULL, 20.0, 2.0, NULL);
    rc |= sg_trace_flow(&t, 7, 0, 15.0, 1, 21.0);
    is_int(rc, 0, "trace: lanes, events and a flow");
    ok(sg_trace_event(&t, 0, "neg", "x", 0.0, -1.0, NULL) == SG_EINVAL &&
           sg_trace_event(&t, 0, "arr", "x", 0.0, 1.0, "[1]") == SG_EINVAL &&
           sg_trace_event(&t, 0, NULL, "x", 0.0, 1.0, NULL) == SG_EINVAL &&
           sg_trace_event(&t, 0, "inf", "x", INFINITY, 1.0, NULL) == SG_EINVAL,
       "trace: bad events are refused");
    ok(access(path, F_OK) != 0 && dir_entries() == before + 1,
       "trace: nothing at the final path before close (a temporary file instead)");
    rc = sg_trace_close(&t, &err);
    is_int(rc, 0, "trace: close");
    ok(access(path, F_OK) == 0 && dir_entries() == before + 1,
       "trace: file appears at close, temporary gone");

    char *text = slurp(path);
    cJSON *root = text ? cJSON_Parse(text) : NULL;
    free(text);
    if (ok(root != NULL, "trace: the file is valid JSON"))
        check_trace_json(root, odd);
    else
        tap_skip(8, "trace did not parse");
    cJSON_Delete(root);

    /* an aborted trace leaves an existing file alone */
    const char *old = tmp("old.json");
    FILE *fp = fopen(old, "w");
    fputs("old", fp);
    fclose(fp);
    before = dir_entries();
    rc = sg_trace_open(&t, old, &err);
    sg_trace_event(&t, 0, "e", NULL, 0, 1, NULL);
    sg_trace_abort(&t);
    text = slurp(old);
    ok(rc == 0 && text && !strcmp(text, "old") && dir_entries() == before,
       "trace: abort keeps the old file and removes the temporary");
    free(text);

    rc = sg_trace_open(&t, tmp("no/such/dir/t.json"), &err);
    ok(rc == SG_EIO && strstr(err.msg, "no/such/dir"), "trace: unwritable path is SG_EIO (%s)",
       err.msg);
}

/* The adaptive speculation rule, against its statement (speculation.h):
 * stop when >= 4 of the last 8 steps would have rolled back, resume when
 * <= 2 of the last 8 would have. */
static void test_speculation(void)
{
    sg_speculation s = {0};
    int modes[32], fails_seen[32];
    /* three steps that would fail, then one more: the fourth stops it */
    int pattern[] = {1, 1, 1, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 0, 0};
    int n = (int)(sizeof pattern / sizeof pattern[0]);
    for (int i = 0; i < n; i++) {
        modes[i] = sg_speculation_update(&s, pattern[i]);
        int f = 0;
        for (int j = i - 7 < 0 ? 0 : i - 7; j <= i; j++)
            f += pattern[j];
        fails_seen[i] = f;
    }
    /* the expected modes, by the rule stated above */
    int expect = 0, ok_all = 1;
    for (int i = 0; i < n; i++) {
        if (!expect && fails_seen[i] >= 4)
            expect = 1;
        else if (expect && fails_seen[i] <= 2)
            expect = 0;
        ok_all &= modes[i] == expect;
    }
    ok(ok_all, "speculation: the modes of a 20-step pattern follow the stop/resume rule");
    is_int(modes[3], 0, "speculation: 3 of 4 steps failing keeps speculating");
    is_int(modes[4], 1, "speculation: the 4th failing step in the window stops it");
    is_int(modes[8], 1, "speculation: 3 of the last 8 failing keeps waiting");
    is_int(modes[9], 0, "speculation: 2 of the last 8 failing resumes it");
    is_int(modes[17], 1, "speculation: four failing steps in a row stop it again");

    /* starting to wait (clipping on): the window counts as 8 would-be
     * rollbacks, so 6 steps under the threshold are needed, and one step
     * over it in between delays the resumption by one step */
    sg_speculation w;
    sg_speculation_init(&w, 1);
    int start[] = {0, 0, 0, 0, 0, 0};
    int mode = w.waiting, resumed_after = -1;
    for (int i = 0; i < 6 && resumed_after < 0; i++)
        if (!(mode = sg_speculation_update(&w, start[i])))
            resumed_after = i + 1;
    is_int(resumed_after, 6, "speculation: started waiting, 6 steps under the threshold resume it");
    sg_speculation_init(&w, 1);
    int mixed[] = {0, 0, 1, 0, 0, 0, 0};
    resumed_after = -1;
    for (int i = 0; i < 7 && resumed_after < 0; i++)
        if (!sg_speculation_update(&w, mixed[i]))
            resumed_after = i + 1;
    is_int(resumed_after, 7, "speculation: started waiting, a clipped step delays it by one");
    sg_speculation_init(&w, 0);
    is_int(w.waiting + (int)w.steps, 0, "speculation: init without waiting is the empty window");
}

int main(void)
{
    if (make_test_dir(dir, sizeof dir, "sg-test-train-util"))
        return tap_plan_skip_all("cannot create a temporary directory");
    test_lr();
    test_loss_scaler();
    test_step_lines();
    test_summary();
    test_metrics();
    test_metrics_eval();
    test_trace();
    test_speculation();
    rm_tree(dir);
    return tap_done();
}
