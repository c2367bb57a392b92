/* lr_schedule.c - DeepSpeed's learning rate schedulers (see lr_schedule.h). */
#include "runtime/train/lr_schedule.h"

#include <math.h>

#define PI 3.14159265358979323846

/* The warm-up length: DeepSpeed clamps it to 2 (ln(1) would divide by 0). */
static int64_t warmup_steps(const sg_ds_config *ds)
{
    return ds->scheduler.warmup_num_steps < 2 ? 2 : ds->scheduler.warmup_num_steps;
}

/* The warm-up curve in [0, 1) at last_batch_iteration it, 0 <= it < W. */
static double warmup_curve(const sg_ds_config *ds, int64_t it)
{
    int64_t w = warmup_steps(ds);
    if (ds->scheduler.warmup_type == SG_WARMUP_LINEAR)
        return (double)it / (double)w;
    return log((double)it + 1.0) / log((double)w);
}

/* WarmupLR / WarmupDecayLR: gamma in [0, 1] at it (>= 0). */
static double warmup_gamma(const sg_ds_config *ds, int64_t it)
{
    int64_t w = warmup_steps(ds);
    if (it < w)
        return warmup_curve(ds, it);
    if (ds->scheduler.type == SG_SCHED_WARMUP_LR)
        return 1.0;
    /* WarmupDecayLR: linear from 1 at the end of warm-up to 0 at total. */
    double span = (double)(ds->scheduler.total_num_steps - w);
    if (span < 1.0)
        span = 1.0;
    double g = (double)(ds->scheduler.total_num_steps - it) / span;
    return g > 0.0 ? g : 0.0;
}

/* WarmupCosineLR: the ratio of optimizer.lr at it (>= 0). */
static double cosine_ratio(const sg_ds_config *ds, int64_t it)
{
    int64_t w = warmup_steps(ds);
    if (it < w) {
        double lo = ds->scheduler.warmup_min_ratio;
        return lo + warmup_curve(ds, it) * (1.0 - lo);
    }
    double span = (double)(ds->scheduler.total_num_steps - w);
    if (span < 1.0)
        span = 1.0;
    double p = (double)(it - w + 1) / span;
    if (p > 1.0)
        p = 1.0;
    double floor_ratio = ds->scheduler.cos_min_ratio;
    double r = floor_ratio + (1.0 - floor_ratio) * (1.0 + cos(PI * p)) / 2.0;
    return r > 0.0 ? r : 0.0;
}

/* OneCycle's cycle length (S1 + S2) and its first part's share q. */
static double cycle_length(const sg_ds_config *ds, double *q)
{
    double s1 = (double)ds->scheduler.cycle_first_step_size;
    double s2 = ds->scheduler.cycle_second_step_size > 0
                    ? (double)ds->scheduler.cycle_second_step_size
                    : s1;
    *q = s1 / (s1 + s2);
    return s1 + s2;
}

/* OneCycle's scale at it (>= 0, inside the cycle): 0 -> 1 -> 0. */
static double cycle_scale(const sg_ds_config *ds, int64_t it)
{
    double q, total = cycle_length(ds, &q);
    double b = (double)(it + 1);
    double x = 1.0 + b / total - floor(1.0 + b / total);
    return x <= q ? x / q : (x - 1.0) / (q - 1.0);
}

/* OneCycle after its cycle: the decay intervals at it, or -1 without decay
 * (a decay_step_size or the rate of 0). */
static double cycle_decay(const sg_ds_config *ds, int64_t it, double rate)
{
    double q, total = cycle_length(ds, &q);
    if (ds->scheduler.decay_step_size == 0 || rate == 0.0)
        return -1.0;
    return ((double)it - total + 1.0) / (double)ds->scheduler.decay_step_size;
}

static double one_cycle_lr(const sg_ds_config *ds, int64_t it)
{
    double lo = ds->scheduler.cycle_min_lr, hi = ds->scheduler.cycle_max_lr, q;
    if ((double)it < cycle_length(ds, &q))
        return lo + (hi - lo) * cycle_scale(ds, it);
    double d = cycle_decay(ds, it, ds->scheduler.decay_lr_rate);
    return d < 0 ? lo : lo / (1.0 + ds->scheduler.decay_lr_rate * d);
}

static double one_cycle_beta1(const sg_ds_config *ds, int64_t it)
{
    double lo = ds->scheduler.cycle_min_mom, hi = ds->scheduler.cycle_max_mom, q;
    if ((double)it < cycle_length(ds, &q))
        return hi - (hi - lo) * cycle_scale(ds, it);
    double d = cycle_decay(ds, it, ds->scheduler.decay_mom_rate);
    return d < 0 ? hi : hi * (1.0 + ds->scheduler.decay_mom_rate * d);
}

static double range_test_lr(const sg_ds_config *ds, int64_t it)
{
    double n = (double)(it + 1) / (double)ds->scheduler.lr_range_test_step_size;
    if (ds->scheduler.lr_range_test_staircase)
        n = floor(n);
    return ds->scheduler.lr_range_test_min_lr * (1.0 + ds->scheduler.lr_range_test_step_rate * n);
}

double sg_lr_at(const sg_ds_config *ds, int64_t step)
{
    /* update k runs with last_batch_iteration k - 1; -1 means "not started":
     * the lr the scheduler wrote when it was built */
    int64_t it = step - 1;
    switch (ds->scheduler.type) {
    case SG_SCHED_NONE: return ds->optimizer.lr;
    case SG_SCHED_WARMUP_LR:
    case SG_SCHED_WARMUP_DECAY_LR: {
        double lo = ds->scheduler.warmup_min_lr;
        return it < 0 ? lo : lo + (ds->scheduler.warmup_max_lr - lo) * warmup_gamma(ds, it);
    }
    case SG_SCHED_WARMUP_COSINE_LR: return it < 0 ? 0.0 : ds->optimizer.lr * cosine_ratio(ds, it);
    case SG_SCHED_ONE_CYCLE: return it < 0 ? ds->scheduler.cycle_min_lr : one_cycle_lr(ds, it);
    case SG_SCHED_LR_RANGE_TEST:
        return it < 0 ? ds->scheduler.lr_range_test_min_lr : range_test_lr(ds, it);
    }
    return ds->optimizer.lr;
}

void sg_betas_at(const sg_ds_config *ds, int64_t step, double *beta1, double *beta2)
{
    *beta1 = ds->optimizer.beta1;
    *beta2 = ds->optimizer.beta2;
    if (ds->scheduler.type != SG_SCHED_ONE_CYCLE || !ds->scheduler.cycle_momentum)
        return;
    int64_t it = step - 1;
    *beta1 = it < 0 ? ds->scheduler.cycle_min_mom : one_cycle_beta1(ds, it);
    *beta2 = 0.99; /* DeepSpeed's OneCycle pairs every momentum with 0.99 */
}
