/* lr_schedule.h - the learning rate DeepSpeed's scheduler gives each update.
 *
 * One job: map (DeepSpeed config, number of optimizer updates already applied)
 * to the lr of the next update, for no scheduler (constant optimizer.lr),
 * WarmupLR and WarmupDecayLR with warmup_type "log" or "linear", as
 * deepspeed/runtime/lr_schedules.py computes them.
 *
 * How DeepSpeed steps its scheduler, and so what `step` means here:
 * - The scheduler is built with last_batch_iteration = -1 and, at that point,
 *   writes warmup_min_lr into the optimizer (its get_lr() returns the min lr
 *   while last_batch_iteration < 0). So the FIRST update uses warmup_min_lr.
 * - After each applied optimizer update the engine calls scheduler.step(),
 *   which sets last_batch_iteration += 1 and writes the new lr. The update
 *   number k (0-based) therefore runs with last_batch_iteration = k - 1.
 * - An update skipped for an fp16 overflow does not step the scheduler: pass
 *   the count of APPLIED updates, not of attempted steps.
 *
 * With W = max(2, warmup_num_steps), i = k - 1 and delta = max_lr - min_lr:
 *   lr = min_lr + delta * gamma(i), gamma(i < 0) = 0 and, while i < W,
 *   gamma = ln(i + 1) / ln(W)   (log)     or   i / W   (linear);
 *   after warm-up: WarmupLR gamma = 1; WarmupDecayLR
 *   gamma = max(0, (total_num_steps - i) / max(1, total_num_steps - W)).
 * Updates 0 and 1 both use warmup_min_lr (gamma(-1) = gamma(0) = 0), and the
 * decay ends at warmup_min_lr (0 by default), not at 0 in general.
 */
#ifndef SG_LR_SCHEDULE_H
#define SG_LR_SCHEDULE_H

#include <stdint.h>

#include "runtime/config/config.h"

/* The lr used by optimizer update number `step` (0-based count of updates
 * already applied). A negative step is treated as 0. */
double sg_lr_at(const sg_ds_config *ds, int64_t step);

#endif /* SG_LR_SCHEDULE_H */
