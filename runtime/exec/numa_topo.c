/* numa_topo.c - this machine's cores split into emulated NUMA nodes
 * (numa_topo.h). */
#include "runtime/exec/numa_topo.h"

#include <hwloc.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/cleanup.h"

/* The attributes every object carries: its os index, cpusets, nodesets and
 * a unique gp_index. */
static void attrs(FILE *f, unsigned os, hwloc_const_bitmap_t cpus, hwloc_const_bitmap_t nodes,
                  unsigned *gp)
{
    char *c = NULL, *n = NULL;
    hwloc_bitmap_asprintf(&c, cpus);
    hwloc_bitmap_asprintf(&n, nodes);
    fprintf(f,
            " os_index=\"%u\" cpuset=\"%s\" complete_cpuset=\"%s\" nodeset=\"%s\" "
            "complete_nodeset=\"%s\" gp_index=\"%u\"",
            os, c ? c : "0x0", c ? c : "0x0", n ? n : "0x0", n ? n : "0x0", (*gp)++);
    free(c);
    free(n);
}

/* Node k: a package holding its NUMA node and the cores [first, end) of
 * `type` (cores, or PUs on a machine hwloc shows no cores for). */
static int write_node(FILE *f, hwloc_topology_t topo, hwloc_obj_type_t type, int k, int first,
                      int end, unsigned long long memory, unsigned *gp)
{
    hwloc_bitmap_t cpus = hwloc_bitmap_alloc(), nodes = hwloc_bitmap_alloc();
    if (!cpus || !nodes) {
        hwloc_bitmap_free(cpus);
        hwloc_bitmap_free(nodes);
        return SG_ENOMEM;
    }
    hwloc_bitmap_only(nodes, (unsigned)k);
    for (int c = first; c < end; c++)
        hwloc_bitmap_or(cpus, cpus, hwloc_get_obj_by_type(topo, type, (unsigned)c)->cpuset);
    fprintf(f, "    <object type=\"Package\"");
    attrs(f, (unsigned)k, cpus, nodes, gp);
    fprintf(f, ">\n      <object type=\"NUMANode\"");
    attrs(f, (unsigned)k, cpus, nodes, gp);
    fprintf(f, " local_memory=\"%llu\"/>\n", memory);
    for (int c = first; c < end; c++) {
        hwloc_obj_t core = hwloc_get_obj_by_type(topo, type, (unsigned)c);
        if (type == HWLOC_OBJ_CORE) {
            fprintf(f, "      <object type=\"Core\"");
            attrs(f, core->os_index, core->cpuset, nodes, gp);
            fprintf(f, ">\n");
        }
        int npu = hwloc_get_nbobjs_inside_cpuset_by_type(topo, core->cpuset, HWLOC_OBJ_PU);
        for (int p = 0; p < npu; p++) {
            hwloc_obj_t pu =
                hwloc_get_obj_inside_cpuset_by_type(topo, core->cpuset, HWLOC_OBJ_PU, (unsigned)p);
            fprintf(f, "        <object type=\"PU\"");
            attrs(f, pu->os_index, pu->cpuset, nodes, gp);
            fprintf(f, "/>\n");
        }
        if (type == HWLOC_OBJ_CORE)
            fprintf(f, "      </object>\n");
    }
    fprintf(f, "    </object>\n");
    hwloc_bitmap_free(cpus);
    hwloc_bitmap_free(nodes);
    return SG_OK;
}

static int write_topology(FILE *f, hwloc_topology_t topo, int nnodes, sg_error *err)
{
    hwloc_obj_type_t type = HWLOC_OBJ_CORE;
    int ncores = hwloc_get_nbobjs_by_type(topo, type);
    if (ncores <= 0) {
        type = HWLOC_OBJ_PU;
        ncores = hwloc_get_nbobjs_by_type(topo, type);
    }
    if (nnodes < 1 || nnodes > ncores)
        return sg_error_set(err, SG_EINVAL,
                            "numa_emulate %d: this machine has %d core%s (at "
                            "least one per emulated NUMA node)",
                            nnodes, ncores, ncores == 1 ? "" : "s");
    hwloc_obj_t root = hwloc_get_root_obj(topo);
    hwloc_bitmap_t nodes = hwloc_bitmap_alloc();
    if (!nodes)
        return sg_error_set(err, SG_ENOMEM, "out of memory");
    hwloc_bitmap_set_range(nodes, 0, nnodes - 1);
    unsigned gp = 1;
    char *all = NULL, *nall = NULL;
    hwloc_bitmap_asprintf(&all, root->cpuset);
    hwloc_bitmap_asprintf(&nall, nodes);
    fprintf(f,
            "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
            "<!DOCTYPE topology SYSTEM \"hwloc2.dtd\">\n<topology version=\"2.0\">\n"
            "  <object type=\"Machine\" allowed_cpuset=\"%s\" allowed_nodeset=\"%s\"",
            all ? all : "0x0", nall ? nall : "0x0");
    attrs(f, 0, root->cpuset, nodes, &gp);
    fprintf(f, ">\n");
    free(all);
    free(nall);
    hwloc_bitmap_free(nodes);
    /* the machine's memory shared evenly, so StarPU's per-node limits (90%
     * of a node's memory) add up to what they are on one node */
    unsigned long long memory = (unsigned long long)root->total_memory / (unsigned)nnodes;
    int rc = SG_OK;
    for (int k = 0; k < nnodes && !rc; k++)
        rc = write_node(f, topo, type, k, k * ncores / nnodes, (k + 1) * ncores / nnodes, memory,
                        &gp);
    if (rc)
        return sg_error_set(err, rc, "out of memory");
    fprintf(f, "  </object>\n</topology>\n");
    return SG_OK;
}

int sg_numa_topo_write(FILE *f, int nnodes, sg_error *err)
{
    hwloc_topology_t topo;
    if (hwloc_topology_init(&topo))
        return sg_error_set(err, SG_EIO, "hwloc cannot read this machine's topology");
    if (hwloc_topology_load(topo)) {
        hwloc_topology_destroy(topo);
        return sg_error_set(err, SG_EIO, "hwloc cannot read this machine's topology");
    }
    int rc = write_topology(f, topo, nnodes, err);
    hwloc_topology_destroy(topo);
    if (!rc && (fflush(f) || ferror(f)))
        rc = sg_error_set(err, SG_EIO, "numa_emulate: cannot write the topology file");
    return rc;
}

int sg_numa_emulate(int nnodes, char *path, size_t cap, int *cleanup_slot, sg_error *err)
{
    *cleanup_slot = -1;
    /* the topology written must be the real machine's, and a topology the
     * caller chose is not silently replaced */
    static const char *const vars[] = {"HWLOC_XMLFILE", "HWLOC_SYNTHETIC", "STARPU_HWLOC_INPUT"};
    for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++) {
        const char *v = getenv(vars[i]);
        if (v && *v)
            return sg_error_set(err, SG_EINVAL,
                                "numa_emulate %d: %s is set (%s): emulate with "
                                "one or the other",
                                nnodes, vars[i], v);
    }
    const char *dir = getenv("TMPDIR");
    int n = snprintf(path, cap, "%s/stepgraph-numa.XXXXXX", dir && *dir ? dir : "/tmp");
    if (n < 0 || (size_t)n >= cap)
        return sg_error_set(err, SG_EINVAL, "numa_emulate: TMPDIR is too long");
    int fd = mkstemp(path);
    if (fd < 0) {
        path[0] = '\0';
        return sg_error_set(err, SG_EIO, "numa_emulate: cannot create a file in %s",
                            dir && *dir ? dir : "/tmp");
    }
    *cleanup_slot = sg_cleanup_add(path);
    FILE *f = fdopen(fd, "w");
    int rc = f ? sg_numa_topo_write(f, nnodes, err)
               : sg_error_set(err, SG_EIO, "numa_emulate: cannot write %s", path);
    if (f && fclose(f) && !rc)
        rc = sg_error_set(err, SG_EIO, "numa_emulate: cannot write %s", path);
    else if (!f)
        close(fd);
    if (rc)
        return rc;
    /* StarPU's own topology (STARPU_HWLOC_INPUT), every other hwloc load
     * (StarPU's bus calibration, our core lists: HWLOC_XMLFILE), binding
     * applied to the real machine (THISSYSTEM), one memory node per NUMA
     * node (STARPU_USE_NUMA) */
    setenv("STARPU_HWLOC_INPUT", path, 1);
    setenv("HWLOC_XMLFILE", path, 1);
    setenv("HWLOC_THISSYSTEM", "1", 1);
    setenv("STARPU_USE_NUMA", "1", 1);
    return SG_OK;
}

void sg_numa_topo_remove(char *path, int cleanup_slot)
{
    if (path && *path) {
        unlink(path);
        sg_cleanup_forget(cleanup_slot);
        path[0] = '\0';
    }
}
