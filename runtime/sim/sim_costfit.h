/* sim_costfit.h - task times fitted on a calibration run, to predict task
 * sizes that never ran there.
 *
 * StarPU's history models keep one mean time per task size (footprint), so
 * a calibrated machine can only simulate the sizes it ran. `stepgraph
 * calibrate` also saves every node's mean task time on each device it ran on
 * (CPU workers, CUDA workers) with its FLOPs and bytes
 * (runtime/train/node_times.h); fitted per device and node kind,
 *
 *     time = overhead + matmul GFLOPs x us_per_gflop
 *                     + attention GFLOPs x us_per_attention_gflop + GB x us_per_gb
 *
 * it predicts other sizes. Attention FLOPs (quadratic in the sequence
 * length) have their own coefficient: their cost per FLOP differs from the
 * matrix products' and their share moves with the sequence length. The
 * coefficients are non-negative: the fit tries every subset of the terms by
 * least squares on the relative error (each node weighted by its samples)
 * and keeps the best whose coefficients are all >= 0, the smaller subset on
 * a tie.
 */
#ifndef SG_SIM_COSTFIT_H
#define SG_SIM_COSTFIT_H

#include "common/error.h"
#include "graph/ir.h"
#include "graph/op_kinds.h"

#define SG_COST_TERMS 4

typedef struct sg_cost_sample {
    double flops, attention_flops, bytes; /* attention_flops is part of flops */
    double us;                            /* mean time */
    double weight;                        /* samples behind the mean */
} sg_cost_sample;

typedef struct sg_cost_fit {
    int valid;
    double overhead_us, us_per_gflop, us_per_attention_gflop, us_per_gb;
    int points;         /* samples (nodes) it was fitted on */
    double max_rel_err; /* worst |fit - mean| / mean over them */
} sg_cost_fit;

/* Fits n >= 1 samples. Returns 0 (out->valid) or SG_EINVAL when no sample
 * has a positive time. */
int sg_cost_fit_samples(const sg_cost_sample *s, int n, sg_cost_fit *out);

/* The fitted time of a node, in microseconds. */
double sg_cost_fit_us(const sg_cost_fit *f, double flops, double attention_flops, double bytes);
double sg_cost_fit_node_us(const sg_cost_fit *f, const sg_node *nd);

/* The devices of a node-times file's lines. */
enum { SG_COST_CPU, SG_COST_GPU, SG_COST_DEVICES };

/* Reads a node-times file (node_times.h; one without the device column holds
 * CPU times) and fits every device and kind in it; the others stay invalid.
 * SG_EIO / SG_EINVAL naming the file and line when it cannot be read or a
 * line is malformed. */
int sg_cost_fits_load(const char *path, sg_cost_fit fits[SG_COST_DEVICES][SG_OP_KIND_COUNT],
                      sg_error *err);

#endif /* SG_SIM_COSTFIT_H */
