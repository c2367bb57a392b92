/* sim_costfit.h - task times fitted on a calibration run, to predict task
 * sizes that never ran there.
 *
 * StarPU's history models keep one mean time per task size (footprint), so
 * a calibrated machine can only simulate the sizes it ran. Fitted per node
 * kind on the CPU workers' history:
 *
 *     time = overhead + FLOPs x us_per_gflop + bytes x us_per_gb
 *
 * where FLOPs is the node's count (given to StarPU with each task) and bytes
 * the size StarPU records for the task (the sum of its handles' sizes).
 * The FLOPs of a unit mix matrix products and attention, whose cost per
 * FLOP differs and whose share grows with the sequence length: a fit made
 * at one length predicts another less well (README, simulation fidelity). The coefficients are non-negative: the fit
 * tries every subset of the three terms by weighted least squares on the
 * relative error (each size weighted by its sample count) and keeps the
 * best one whose coefficients are all >= 0. stepgraph-sim fits a calibrated
 * machine's history (sim_history.h) for `simulate --cost fitted`.
 */
#ifndef SG_SIM_COSTFIT_H
#define SG_SIM_COSTFIT_H

#include "common/error.h"
#include "graph/op_kinds.h"

typedef struct sg_cost_sample {
    double flops, bytes, us; /* one task size: its FLOPs, data bytes, mean time */
    double weight;           /* samples behind the mean */
} sg_cost_sample;

typedef struct sg_cost_fit {
    int valid;
    double overhead_us, us_per_gflop, us_per_gb;
    int points;              /* task sizes it was fitted on */
    double max_rel_err;      /* worst |fit - mean| / mean over them */
} sg_cost_fit;

/* Fits n >= 1 samples. Returns 0 (out->valid) or SG_EINVAL when no sample
 * has a positive time. */
int sg_cost_fit_samples(const sg_cost_sample *s, int n, sg_cost_fit *out);

/* The fitted time in microseconds. */
double sg_cost_fit_us(const sg_cost_fit *f, double flops, double bytes);

#endif /* SG_SIM_COSTFIT_H */
