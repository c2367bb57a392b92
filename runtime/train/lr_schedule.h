/* lr_schedule.h - the learning rate (and Adam's betas) DeepSpeed's scheduler
 * gives each optimizer update.
 *
 * One job: map (DeepSpeed config, number of optimizer updates already applied)
 * to the lr and betas of the next update, for no scheduler (constant
 * optimizer.lr), WarmupLR, WarmupDecayLR, WarmupCosineLR, OneCycle and
 * LRRangeTest, as deepspeed/runtime/lr_schedules.py (DeepSpeed 0.19.8)
 * computes them.
 *
 * How DeepSpeed steps its scheduler, and so what `step` means here:
 * - The scheduler is built with last_batch_iteration = -1 and, at that point,
 *   writes its starting lr into the optimizer: warmup_min_lr (WarmupLR,
 *   WarmupDecayLR), 0 (WarmupCosineLR: its get_lr() returns 0 before it has
 *   started), cycle_min_lr with betas (cycle_min_mom, 0.99) (OneCycle),
 *   lr_range_test_min_lr (LRRangeTest). So the FIRST update uses that.
 * - After each applied optimizer update the engine calls scheduler.step(),
 *   which sets last_batch_iteration += 1 and writes the new lr. The update
 *   number k (0-based) therefore runs with last_batch_iteration i = k - 1.
 * - An update skipped for an fp16 overflow does not step the scheduler: pass
 *   the count of APPLIED updates, not of attempted steps.
 *
 * With W = max(2, warmup_num_steps) and gamma(i) = ln(i + 1) / ln(W) (log)
 * or i / W (linear) while i < W:
 * - WarmupLR / WarmupDecayLR: lr = min_lr + (max_lr - min_lr) * g, g = gamma
 *   during warm-up; after it WarmupLR g = 1, WarmupDecayLR
 *   g = max(0, (total_num_steps - i) / max(1, total_num_steps - W)).
 *   Updates 0 and 1 both use warmup_min_lr (gamma(0) = 0).
 * - WarmupCosineLR: lr = optimizer.lr * r; during warm-up
 *   r = warmup_min_ratio + (1 - warmup_min_ratio) * gamma(i); after it, with
 *   p = min(1, (i - W + 1) / max(1, total_num_steps - W)),
 *   r = max(0, cos_min_ratio + (1 - cos_min_ratio) * (1 + cos(pi p)) / 2).
 * - OneCycle: the cycle is S1 + S2 updates long (cycle_first_step_size,
 *   cycle_second_step_size); with b = i + 1, x = b / (S1 + S2) - floor(b /
 *   (S1 + S2)) and q = S1 / (S1 + S2), the scale is s = x / q while x <= q,
 *   else (x - 1) / (q - 1); while i < S1 + S2, lr = cycle_min_lr +
 *   (cycle_max_lr - cycle_min_lr) s and (cycle_momentum) beta1 =
 *   cycle_max_mom - (cycle_max_mom - cycle_min_mom) s. After the cycle, with
 *   d = (i - S1 - S2 + 1) / decay_step_size: lr = cycle_min_lr / (1 +
 *   decay_lr_rate d), beta1 = cycle_max_mom (1 + decay_mom_rate d); a
 *   decay_step_size or rate of 0 keeps cycle_min_lr and cycle_max_mom.
 *   beta2 is 0.99 throughout while momentum cycles (DeepSpeed's pair).
 * - LRRangeTest: lr = lr_range_test_min_lr (1 + step_rate * n), n = (i + 1)
 *   / step_size, floored with lr_range_test_staircase.
 */
#ifndef SG_LR_SCHEDULE_H
#define SG_LR_SCHEDULE_H

#include <stdint.h>

#include "runtime/config/config.h"

/* The lr used by optimizer update number `step` (0-based count of updates
 * already applied). A negative step is treated as 0. */
double sg_lr_at(const sg_ds_config *ds, int64_t step);

/* Adam's (beta1, beta2) for update number `step`: the optimizer's, except
 * under OneCycle with cycle_momentum. */
void sg_betas_at(const sg_ds_config *ds, int64_t step, double *beta1, double *beta2);

#endif /* SG_LR_SCHEDULE_H */
