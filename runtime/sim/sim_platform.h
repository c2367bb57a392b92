/* sim_platform.h - the StarPU sampling directory that SimGrid mode reads.
 *
 * StarPU-SimGrid takes the machine from $STARPU_PERF_MODEL_DIR for the host
 * named by $STARPU_HOSTNAME:
 *   bus/<host>.platform.v4.xml  SimGrid hosts (MAIN, CPU0.., CUDA0.., RAM) and
 *                               the links between memories, with routes
 *   bus/<host>.bandwidth        MB/s between memory nodes (RAM, then GPUs),
 *   bus/<host>.latency          microseconds, both read by the dm* schedulers
 *   bus/<host>.config           whose presence marks the directory
 * This module writes them for one rank of a machine model: its CPU cores
 * (one simulated worker each, one of them driving each GPU in StarPU's
 * usual way), its GPUs with their memory size, and host<->device and
 * GPU<->GPU links at the model's bandwidths and latency. An MI300A's GPU
 * becomes a CUDA-kind device whose link to host memory runs at memory speed.
 */
#ifndef SG_SIM_PLATFORM_H
#define SG_SIM_PLATFORM_H

#include "common/error.h"
#include "runtime/config/machine.h"

/* Writes the four files under dir (creating dir/bus). host: letters,
 * digits, '-', '_', '.'. Each file is written atomically. */
int sg_sim_write_platform(const sg_machine *m, const char *dir, const char *host, sg_error *err);

#endif /* SG_SIM_PLATFORM_H */
