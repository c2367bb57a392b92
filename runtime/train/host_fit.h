/* host_fit.h - the main memory a run needs, from its step's plan, checked
 * against this machine's RAM before StarPU allocates anything: a run that
 * cannot fit ends with an error naming the figures, not with the kernel's
 * out-of-memory kill. */
#ifndef SG_HOST_FIT_H
#define SG_HOST_FIT_H

#include <stdint.h>

#include "common/error.h"
#include "graph/ir.h"

/* The live-bytes plan's peaks of graph g for ncpu CPU and ncuda CUDA workers:
 * without CUDA workers every buffer is in main memory (tiles in flight on
 * ncpu workers); with them the host's peak plus the host copies StarPU keeps
 * of the GPU's persistent buffers, and the GPU's peak. 0 when the graph's
 * plan cannot be computed. */
void sg_plan_peaks(const sg_graph *g, int ncpu, int ncuda, int64_t *host, int64_t *gpu);

/* SG_ENOMEM, naming the figures, when this machine's physical memory is
 * below the host plan of g and wait (the waiting graph, or NULL) for those
 * workers, times ranks_here: the ranks on this host, which each hold such a
 * plan (data parallel: the same graph). The trainer holds no copy of the
 * model beside it: loads and saves go a tensor (with several ranks, a unit)
 * at a time. on_disk: bytes of the plan whose home is a disk node (NVMe
 * offload), left out. SG_OK otherwise (and when the RAM is unknown). */
int sg_host_fit_check(const sg_graph *g, const sg_graph *wait, int ncpu, int ncuda, int ranks_here,
                      int64_t on_disk, sg_error *err);

#endif
