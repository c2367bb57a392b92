/* step_log.h - what a training run prints and records about its steps.
 *
 * One job: turn step measurements into text, in DeepSpeed's words, so runs
 * compare line by line with DeepSpeed's example scripts:
 * - TFLOPS by the formula of DeepSpeedExamples' SuperOffload fine-tuning
 *   script, model TFLOPS and MFU (models/step_rates.h computes them from
 *   models/flops.h's counts);
 * - the step line `Step 12 | Loss: 4.5123 | Time: 153.21 ms | TFLOPS: 0.01 |
 *   Tokens/s: 6684.2` and the wall_clock_breakdown line;
 * - an accumulator for the closing summary (warm-up steps excluded);
 * - a JSONL metrics file, one object per step.
 * Nothing here measures time or memory: callers pass the figures in.
 */
#ifndef SG_STEP_LOG_H
#define SG_STEP_LOG_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "common/error.h"
#include "models/step_rates.h" /* sg_step_rates */

/* --- lines -------------------------------------------------------------- */

/* Per-phase wall times of one step, seconds (NAN = not measured). */
typedef struct sg_phase_times {
    double forward_s;
    double backward_s;
    double optimizer_s;
    double transfer_s; /* host <-> device copies not hidden by compute */
} sg_phase_times;

/* "Step 12 | Loss: 4.5123 | Time: 153.21 ms | TFLOPS: 0.01 | Tokens/s: 6684.2"
 * (TFLOPS "n/a" when tflops is NAN). snprintf semantics: returns the length
 * the full line needs; buf always ends with '\0' when n > 0. */
int sg_format_step_line(char *buf, size_t n, int64_t step, double loss, double ms, double tflops,
                        double tokens_per_s);

/* DeepSpeed's wall_clock_breakdown style:
 * "time (ms) | forward: 12.34 | backward: 23.45 | optimizer: 3.21 | transfer: 1.00"
 * (a NAN phase prints "n/a"). snprintf semantics. */
int sg_format_breakdown_line(char *buf, size_t n, const sg_phase_times *p);

/* --- closing summary ---------------------------------------------------- */

/* Running sums over the steps of a run; zero it (or sg_step_stats_init). */
typedef struct sg_step_stats {
    struct sg_step_set {
        int64_t steps;
        int64_t first_step, last_step;
        double seconds, tokens;
        double tflop;       /* sum of tflops * seconds (= 1e12 FLOP) */
        int tflops_missing; /* a step had no TFLOPS (NAN) */
        double model_tflop; /* the same for model TFLOPS */
        int model_missing;
        double min_s, max_s;
    } all, timed; /* every step; non-warm-up steps */
} sg_step_stats;

/* The figures the summary prints. */
typedef struct sg_step_summary {
    int64_t steps;           /* steps the figures cover (0: nothing ran) */
    int64_t warmup_excluded; /* warm-up steps left out */
    int all_warmup;          /* every step was warm-up: figures cover them */
    int64_t first_step, last_step;
    double mean_s, min_s, max_s;
    double tokens_per_s; /* total tokens / total time */
    double tflops;       /* total FLOP / total time; NAN if unknown */
    double model_tflops; /* total model FLOP / total time; NAN if unknown */
} sg_step_summary;

/* Peak memory of one device class ("CUDA", "CPU", "NUMA 0"...); bytes < 0
 * prints "n/a". */
typedef struct sg_mem_peak {
    const char *name;
    int64_t bytes;
} sg_mem_peak;

void sg_step_stats_init(sg_step_stats *st);
/* Adds one step: its number, duration (s), tokens processed, its rates
 * (TFLOPS and model TFLOPS used; NULL or NAN: none) and whether it is a
 * warm-up step (excluded from the summary). */
void sg_step_stats_add(sg_step_stats *st, int64_t step, double seconds, double tokens,
                       const sg_step_rates *rates, int is_warmup);
/* Fills out from the non-warm-up steps, or from all steps if every step was
 * a warm-up step (out->all_warmup = 1). Returns out->steps. */
int64_t sg_step_stats_summary(const sg_step_stats *st, sg_step_summary *out);
/* Multi-line summary ending in '\n', e.g.
 *   Summary: 8 steps (3..10), 2 warm-up steps excluded
 *     Step time: mean 153.21 ms | min 150.02 ms | max 160.33 ms
 *     Throughput: 6684.2 tokens/s | TFLOPS: 0.01 | Model TFLOPS: 0.01
 *     Peak memory: CUDA 1.23 GiB | CPU 512.0 MiB
 * (the memory line only when npeaks > 0). snprintf semantics. */
int sg_step_stats_format_summary(const sg_step_stats *st, const sg_mem_peak *peaks, int npeaks,
                                 char *buf, size_t n);

/* --- metrics JSONL ------------------------------------------------------ */

/* One JSON object per line, written to PATH directly (truncated at open) and
 * flushed after each line, so `tail -f` follows the run and a crash keeps
 * every step logged before it. (An atomic temp-and-rename would show nothing
 * until the end and lose everything on a crash.) Non-finite numbers are
 * written as null. A line:
 *   {"step":12,"loss":4.5123,"lr":0.0001,"grad_norm":1.02,"loss_scale":65536,
 *    "time_ms":153.21,"tokens_per_s":6684.2,"tflops":0.01,"model_tflops":0.01,
 *    "megatron_tflops":0.01,"mfu":null,"skipped":false,
 *    "phases_ms":{"forward":..,"backward":..,"optimizer":..,"transfer":..}}
 * ("phases_ms" only when phases are given; the rates are sg_step_rates). */
typedef struct sg_metrics {
    FILE *fp;
    char path[4096];
    int err_no; /* first write error (errno), 0 if none */
} sg_metrics;

int sg_metrics_open(sg_metrics *m, const char *path, sg_error *err);
/* What the step's optimizer update used: the scheduler's lr and Adam's
 * betas (they move only under OneCycle with cycle_momentum). */
typedef struct sg_update_hyper {
    double lr, beta1, beta2;
} sg_update_hyper;
/* Returns 0, or SG_EIO after a write error (reported again by close). */
int sg_metrics_write_step(sg_metrics *m, int64_t step, double loss, const sg_update_hyper *h,
                          double grad_norm, double loss_scale, double seconds, double tokens_per_s,
                          const sg_step_rates *rates, int skipped, const sg_phase_times *phases);
/* An evaluation's line (runtime/train/eval.h), after its step's, with the
 * names the Hugging Face Trainer logs it under:
 *   {"step":12,"eval_loss":4.1234,"eval_ppl":61.78,"eval_tokens":2048,
 *    "eval_time_ms":45.67}
 * (no "loss": a reader of training losses takes the lines that have one). */
int sg_metrics_write_eval(sg_metrics *m, int64_t step, double eval_loss, double eval_ppl,
                          int64_t eval_tokens, double seconds);
/* Closes; returns SG_EIO with a message if any write failed. Safe twice. */
int sg_metrics_close(sg_metrics *m, sg_error *err);

#endif /* SG_STEP_LOG_H */
