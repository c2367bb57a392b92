/* binding.c - cores of a NUMA node, from hwloc (binding.h). */
#include "runtime/exec/binding.h"

#include <hwloc.h>

int sg_numa_cores(int node, unsigned *pus, int cap, int *nnodes, sg_error *err)
{
    hwloc_topology_t topo;
    if (hwloc_topology_init(&topo) || hwloc_topology_load(topo))
        return sg_error_set(err, SG_EIO, "hwloc cannot read this machine's topology");
    int n = hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_NUMANODE);
    *nnodes = n > 0 ? n : 1;
    int count = 0;
    hwloc_obj_t numa = hwloc_get_obj_by_type(topo, HWLOC_OBJ_NUMANODE, (unsigned)node);
    if (node < 0 || node >= *nnodes || !numa) {
        hwloc_topology_destroy(topo);
        return sg_error_set(err, SG_EINVAL,
                            "numa_node %d: this machine has %d NUMA node%s "
                            "(0..%d)",
                            node, *nnodes, *nnodes == 1 ? "" : "s", *nnodes - 1);
    }
    int ncores = hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_CORE);
    for (int c = 0; c < ncores && count < cap; c++) {
        hwloc_obj_t core = hwloc_get_obj_by_type(topo, HWLOC_OBJ_CORE, (unsigned)c);
        if (!core || !hwloc_bitmap_intersects(core->cpuset, numa->cpuset))
            continue;
        hwloc_obj_t pu = hwloc_get_obj_inside_cpuset_by_type(topo, core->cpuset, HWLOC_OBJ_PU, 0);
        if (pu)
            pus[count++] = pu->logical_index;
    }
    hwloc_topology_destroy(topo);
    if (count == 0)
        return sg_error_set(err, SG_EINVAL, "numa_node %d has no cores", node);
    return count;
}
