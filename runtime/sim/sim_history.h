/* sim_history.h - a calibrated machine's task times, as per-kind fits.
 *
 * `stepgraph calibrate` leaves one StarPU history model per codelet
 * sg_<kind> in the machine's sampling directory: a mean time per task size,
 * with the size's data bytes and the FLOPs the lowering gives each task.
 * This reads the CPU workers' entries of every kind and fits them
 * (sim_costfit.h), so `simulate --cost fitted` predicts task sizes that never
 * ran there. It runs in stepgraph-sim once StarPU is started (StarPU 1.4
 * cannot load models again after a shutdown in the same process). Kinds
 * that never ran on a CPU worker stay unfitted (valid 0).
 */
#ifndef SG_SIM_HISTORY_H
#define SG_SIM_HISTORY_H

#include "runtime/sim/sim_costfit.h"

void sg_sim_history_fit_cpu(sg_cost_fit fits[SG_OP_KIND_COUNT]);

#endif /* SG_SIM_HISTORY_H */
