/* tune_report.h - what `stepgraph tune` prints and writes: the simulated
 * points as CSV and as a Markdown table, the best setting per machine, and
 * an SVG plot of step time against each varied knob (one line per policy,
 * one panel per machine).
 *
 * Pure C: the points come from simulations run elsewhere (sim_client.h).
 */
#ifndef SG_TUNE_REPORT_H
#define SG_TUNE_REPORT_H

#include <stdio.h>

#include "common/error.h"

#define SG_TUNE_MAX_VARY 4
#define SG_TUNE_MAX_WORDS 16 /* values of a knob that takes words */

typedef enum sg_tune_status {
    SG_TUNE_OK,         /* simulated: the figures are set */
    SG_TUNE_INFEASIBLE, /* does not fit the machine's memory: note says by how much */
    SG_TUNE_FAILED,     /* the simulation failed: note has the message */
} sg_tune_status;

/* One simulated combination. */
typedef struct sg_tune_point {
    char machine[64];
    char sched[32];
    int priorities;                /* 1: bottom-level priorities, 0: all tasks priority 0 */
    double vary[SG_TUNE_MAX_VARY]; /* value of each varied knob (sg_tune_set.keys) */
    sg_tune_status status;
    char note[256];
    double step_s;      /* predicted step time, seconds */
    double tflops;      /* the seed's FLOPs of the step / step_s / 1e12, per
                                           * rank (models/step_rates.h's sg_step_rates) */
    double mfu;         /* model FLOPs' rate / GPU peak, 0..1; NAN unknown */
    double tokens;      /* tokens per step over every rank (dp x micro x
                                           * accumulation x sequence); 0: unknown */
    double gpu_busy;    /* share of the step the GPU workers computed, 0..1 */
    double adam_hidden; /* share of CPU Adam time under GPU work, 0..1 */
    double bound_s;     /* the step's lower bound on the machine, 0: unknown */
    char bound_by[24];  /* what sets it: "GPU compute", "h2d link"... */
} sg_tune_point;

typedef struct sg_tune_set {
    int nvary;
    char keys[SG_TUNE_MAX_VARY][64]; /* "offload_optimizer.ratio" */
    sg_tune_point *points;
    int npoints;
    /* a knob whose values are words (cast_placement=cpu,gpu,auto): nwords[k] > 0,
     * and a point's vary[k] is the index of its word */
    int nwords[SG_TUNE_MAX_VARY];
    char words[SG_TUNE_MAX_VARY][SG_TUNE_MAX_WORDS][24];
} sg_tune_set;

/* Index of the fastest feasible point of `machine`, or -1 if none is: the
 * most tokens per second where points know their tokens per step (so that
 * knobs that change the work of a step, dp_size or max_length, compare
 * fairly), else the shortest step. Ties go to the earlier point. */
int sg_tune_best(const sg_tune_set *s, const char *machine);

/* CSV with a header line:
 * machine,sched,priorities,<keys...>,status,step_ms,tflops,mfu,tokens_per_s,gpu_busy,adam_hidden,
 * bound_ms,bound_by,note
 * (empty figures for points that are not OK; notes quoted). */
int sg_tune_write_csv(const sg_tune_set *s, FILE *out);

/* Markdown: one table of every point, then per machine the best setting
 * ("Best on gh200: dmdas, priorities on, offload_optimizer.ratio=0.8:
 * 123.4 ms"), then, where both priority settings were simulated, a table of
 * what priorities change per machine and policy (best time off, on, change). */
int sg_tune_write_markdown(const sg_tune_set *s, FILE *out);

/* SVG plot: one row of panels per varied knob, one panel per machine; x is the
 * knob's value, y the step time in ms; one polyline (with point markers) per
 * policy, at each x the best time over the other knobs and priority settings
 * of that policy; infeasible x values are marked on the axis. With no varied
 * knob: one bar per policy per machine panel. A legend names the policies. */
int sg_tune_write_svg(const sg_tune_set *s, FILE *out);

/* Progress on stderr after each point, with the time spent since the sweep
 * started (elapsed_s) and the time left at the mean pace so far: a redrawn
 * bar on a terminal ("tune: [#####.....] 12/24 gh200 dmdas; 41 s so far,
 * about 41 s left"), else one line per point ("tune: 12/24 (50%) gh200
 * dmdas; ..."). Call with done = total at the end ("...; 1 min 22 s in all"). */
void sg_tune_progress(int done, int total, const char *what, int is_tty, double elapsed_s);

#endif /* SG_TUNE_REPORT_H */
