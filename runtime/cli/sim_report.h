/* sim_report.h - what `stepgraph simulate` prints and writes to --json:
 * the machine and cost model, the model and the resolved settings
 * (offload ratio, sub_group_size, cast_placement, optimizer_tile,
 * speculation), which step is reported and whether it is a cold one, the
 * step time, its lower bound, the rates (TFLOPS by DeepSpeedExamples'
 * formula, model TFLOPS and MFU, Megatron's TFLOPS; docs/flops.md), and,
 * for a step that does not fit, the ways out. docs/simulate.md describes
 * the output. */
#ifndef SG_CLI_SIM_REPORT_H
#define SG_CLI_SIM_REPORT_H

#include "common/error.h"
#include "runtime/sim/sim_client.h"

/* What the run was asked for, beside the point and its result. */
typedef struct sg_sim_view {
    const char *config; /* CONFIG as given (for the ways out's commands) */
    const sg_sim_machine *sm;
    const sg_sim_point *pt;
    const char *sched;
    int priorities;
    int steps;             /* steps simulated (--steps) */
    const char *cost_note; /* NULL, or why the cost model differs from --cost's */
} sg_sim_view;

/* A step is cold when the reported one still carries the first step's start
 * (every buffer at home): one step, or two with two or more in flight. */
int sg_sim_view_cold(const sg_sim_view *v);

/* The text report on stdout; r NULL: the step does not fit, and the report
 * says why and the ways out. */
void sg_sim_view_print(const sg_sim_view *v, const sg_sim_report *r);

/* The same as JSON, atomically to path. */
int sg_sim_view_write_json(const char *path, const sg_sim_view *v, const sg_sim_report *r,
                           sg_error *err);

#endif /* SG_CLI_SIM_REPORT_H */
