/* numa_topo.h - an emulated NUMA topology: this machine's cores split into
 * N NUMA nodes, written as a hwloc XML file that StarPU and hwloc load in
 * place of the real topology (run option numa_emulate, docs/training.md, "NUMA nodes").
 *
 * Only the topology is emulated: the PUs keep their operating-system
 * indexes, so binding a thread to a PU binds it to that real core
 * (HWLOC_THISSYSTEM=1); memory bound to an emulated node other than the
 * machine's own is allocated unbound (hwloc's non-strict binding), and the
 * memory of the machine is divided evenly between the nodes. */
#ifndef SG_NUMA_TOPO_H
#define SG_NUMA_TOPO_H

#include <stdio.h>

#include "common/error.h"

/* Writes the hwloc XML topology of this machine with its cores split into
 * nnodes contiguous groups, one NUMA node (a package) each. SG_EINVAL when
 * nnodes is below 1 or above the core count (the message gives both). */
int sg_numa_topo_write(FILE *f, int nnodes, sg_error *err);

/* Writes that topology to a temporary file (path in `path`, at most cap
 * bytes; removed by sg_numa_topo_remove or at a signal, *cleanup_slot) and points StarPU
 * and hwloc at it: STARPU_HWLOC_INPUT, HWLOC_XMLFILE, HWLOC_THISSYSTEM=1 and
 * STARPU_USE_NUMA=1. SG_EINVAL if one of the topology variables is already
 * set (the caller's own topology stands). Call before starpu_init. */
int sg_numa_emulate(int nnodes, char *path, size_t cap, int *cleanup_slot, sg_error *err);

/* Removes the file of sg_numa_emulate and forgets its cleanup slot (path "":
 * nothing). */
void sg_numa_topo_remove(char *path, int cleanup_slot);

#endif /* SG_NUMA_TOPO_H */
