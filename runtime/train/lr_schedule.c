/* lr_schedule.c - DeepSpeed's WarmupLR / WarmupDecayLR (see lr_schedule.h). */
#include "runtime/train/lr_schedule.h"

#include <math.h>

/* gamma in [0, 1] for DeepSpeed's last_batch_iteration `it` (>= 0). */
static double warmup_gamma(const sg_ds_config *ds, int64_t it)
{
    /* DeepSpeed clamps the warm-up length to 2 (ln(1) would divide by 0). */
    int64_t w = ds->scheduler.warmup_num_steps < 2 ? 2 : ds->scheduler.warmup_num_steps;
    if (it < w) {
        if (ds->scheduler.warmup_type == SG_WARMUP_LINEAR)
            return (double)it / (double)w;
        return log((double)it + 1.0) / log((double)w);
    }
    if (ds->scheduler.type == SG_SCHED_WARMUP_LR)
        return 1.0;
    /* WarmupDecayLR: linear from 1 at the end of warm-up to 0 at total. */
    double span = (double)(ds->scheduler.total_num_steps - w);
    if (span < 1.0)
        span = 1.0;
    double g = (double)(ds->scheduler.total_num_steps - it) / span;
    return g > 0.0 ? g : 0.0;
}

double sg_lr_at(const sg_ds_config *ds, int64_t step)
{
    if (ds->scheduler.type == SG_SCHED_NONE)
        return ds->optimizer.lr;
    double min_lr = ds->scheduler.warmup_min_lr;
    double delta = ds->scheduler.warmup_max_lr - min_lr;
    /* update k runs with last_batch_iteration k - 1; -1 means "not started",
     * for which DeepSpeed returns the min lr (= gamma 0). */
    int64_t it = step - 1;
    if (it < 0)
        return min_lr;
    return min_lr + delta * warmup_gamma(ds, it);
}
