/* sim_fit.h - does a step fit the machine's memory? The step's peak bytes
 * per memory (graph analysis, nodes in program order) against the machine
 * model's capacities: GPU memory and host memory, or one capacity for both
 * on a unified-memory machine (MI300A); on a machine without GPU, every
 * buffer is in host memory. */
#ifndef SG_SIM_FIT_H
#define SG_SIM_FIT_H

#include "graph/compile.h"
#include "graph/ir.h"
#include "runtime/config/machine.h"

typedef struct sg_sim_fit {
    int fits;
    double gpu_bytes, host_bytes;       /* the step's peaks */
    double gpu_capacity, host_capacity; /* bytes; unified: both the one capacity */
    /* ZeRO-Infinity's disk tier (graph/disk_tier.h): host_bytes already
     * holds its RAM working set instead of the state on disk */
    double disk_bytes, disk_capacity;         /* state on disk; the machine's disk */
    double disk_ram_bytes;                    /* the working set in RAM */
    double disk_read_bytes, disk_write_bytes; /* per step */
    char why[256];                            /* when it does not fit: the numbers */
} sg_sim_fit;

/* Returns 0 or SG_ENOMEM. */
int sg_sim_check_fit(const sg_graph *g, const sg_machine *m, sg_sim_fit *out);

/* The same for g compiled from spec (NULL: no disk tier): the state spec
 * puts on disk (device "nvme") counts against the machine's disk, and its
 * RAM working set instead of it against host memory. */
int sg_sim_check_fit_spec(const sg_graph *g, const sg_step_spec *spec, const sg_machine *m,
                          sg_sim_fit *out);

#endif /* SG_SIM_FIT_H */
