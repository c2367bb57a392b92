/* test_numa_topo.c - the emulated NUMA topology (runtime/exec/numa_topo.h):
 * hwloc loads the XML written for N nodes and finds N NUMA nodes whose cores
 * partition the machine's real cores, each PU keeping its operating-system
 * index (so binding stays real), and the memory shared evenly; a node count
 * above the core count, or a topology variable already set, is refused. The
 * reference is hwloc's own view of this machine. */
#include <hwloc.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "runtime/exec/numa_topo.h"
#include "tests/tap.h"

static int load_real(hwloc_topology_t *t)
{
    return hwloc_topology_init(t) || hwloc_topology_load(*t);
}

/* Loads the topology written for n nodes from the file at path. */
static int write_and_load(int n, const char *path, hwloc_topology_t *t)
{
    FILE *f = fopen(path, "w");
    sg_error err = {0};
    int rc = f ? sg_numa_topo_write(f, n, &err) : -1;
    if (f)
        fclose(f);
    if (rc)
        return rc;
    if (hwloc_topology_init(t) || hwloc_topology_set_xml(*t, path) || hwloc_topology_load(*t))
        return -1;
    return 0;
}

/* Each emulated node's PUs: disjoint, real, together all of them; the
 * nodes' core counts differ by at most one. */
static void check_split(hwloc_topology_t real, hwloc_topology_t emu, int n)
{
    ok(hwloc_get_nbobjs_by_type(emu, HWLOC_OBJ_NUMANODE) == n,
       "%d nodes: hwloc finds %d NUMA nodes", n, hwloc_get_nbobjs_by_type(emu, HWLOC_OBJ_NUMANODE));
    hwloc_bitmap_t seen = hwloc_bitmap_alloc();
    int disjoint = 1, lo = 1 << 30, hi = 0;
    for (int k = 0; k < n; k++) {
        hwloc_obj_t node = hwloc_get_obj_by_type(emu, HWLOC_OBJ_NUMANODE, (unsigned)k);
        if (!node)
            break;
        disjoint &= !hwloc_bitmap_intersects(seen, node->cpuset);
        hwloc_bitmap_or(seen, seen, node->cpuset);
        int cores = hwloc_get_nbobjs_inside_cpuset_by_type(emu, node->cpuset, HWLOC_OBJ_CORE);
        lo = cores < lo ? cores : lo;
        hi = cores > hi ? cores : hi;
    }
    ok(disjoint && hwloc_bitmap_isequal(seen, hwloc_get_root_obj(real)->cpuset),
       "%d nodes: their PUs are disjoint and together the machine's (real OS indexes)", n);
    ok(lo >= 1 && hi - lo <= 1, "%d nodes: %d to %d cores each", n, lo, hi);
    hwloc_uint64_t total = hwloc_get_root_obj(emu)->total_memory;
    hwloc_uint64_t want = hwloc_get_root_obj(real)->total_memory;
    ok(total <= want && total + (hwloc_uint64_t)n >= want,
       "%d nodes: their memory adds up to the machine's (%llu of %llu bytes)", n,
       (unsigned long long)total, (unsigned long long)want);
    hwloc_bitmap_free(seen);
}

int main(void)
{
    hwloc_topology_t real, emu;
    unsetenv("HWLOC_XMLFILE");
    unsetenv("HWLOC_SYNTHETIC");
    unsetenv("STARPU_HWLOC_INPUT");
    if (load_real(&real))
        return tap_plan_skip_all("hwloc cannot read this machine's topology");
    int ncores = hwloc_get_nbobjs_by_type(real, HWLOC_OBJ_CORE);
    if (ncores < 2) {
        hwloc_topology_destroy(real);
        return tap_plan_skip_all("fewer than 2 cores: nothing to split");
    }
    tap_plan(12);
    char path[] = "/tmp/sg_numa_topo.XXXXXX";
    int fd = mkstemp(path);
    if (fd >= 0)
        close(fd);
    for (int n = 1; n <= 2; n++) {
        int rc = write_and_load(n, path, &emu);
        ok(rc == 0, "%d node%s: the XML written loads in hwloc", n, n == 1 ? "" : "s");
        if (rc == 0) {
            check_split(real, emu, n);
            hwloc_topology_destroy(emu);
        } else {
            tap_skip(4, "no topology");
        }
    }
    sg_error err = {0};
    FILE *f = fopen(path, "w");
    int rc = sg_numa_topo_write(f, ncores + 1, &err);
    fclose(f);
    ok(rc == SG_EINVAL && strstr(err.msg, "numa_emulate") && strstr(err.msg, "core"),
       "more nodes than cores: refused naming numa_emulate and the core count (%s)", err.msg);
    char out[4096];
    int slot;
    setenv("HWLOC_XMLFILE", path, 1);
    memset(&err, 0, sizeof err);
    rc = sg_numa_emulate(2, out, sizeof out, &slot, &err);
    ok(rc == SG_EINVAL && strstr(err.msg, "HWLOC_XMLFILE") && !getenv("STARPU_USE_NUMA"),
       "HWLOC_XMLFILE already set: refused, naming it, nothing set (%s)", err.msg);
    unlink(path);
    hwloc_topology_destroy(real);
    return tap_done();
}
