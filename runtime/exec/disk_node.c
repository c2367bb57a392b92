/* disk_node.c - the optimizer state (and parameters) on a StarPU disk node
 * (disk_node.h, docs/memory.md, "NVMe offload"). */
#include "runtime/exec/disk_node.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "common/cleanup.h"
#include "runtime/exec/buffer_cache.h"
#include "graph/peak_workers.h"
#include "runtime/config/ds_nvme.h"
#include "runtime/exec/starpu_include.h"

#define RUN_PREFIX "stepgraph-nvme-"
#define MIB (1024.0 * 1024.0)
#define GIB (1024.0 * 1024.0 * 1024.0)

int sg_disk_homes(int optimizer, int params, const sg_buffer *b)
{
    if (!b->persistent || b->space != SG_MEM_HOST)
        return 0;
    if (optimizer && (b->role == SG_BUF_MASTER || b->role == SG_BUF_MOMENTS))
        return 1;
    return params && b->role == SG_BUF_PARAM_PIECE;
}

int64_t sg_disk_bytes(int optimizer, int params, const sg_graph *g)
{
    int64_t n = 0;
    for (int b = 0; b < g->nbuffers; b++)
        if (sg_disk_homes(optimizer, params, &g->buffers[b]))
            n += g->buffers[b].bytes;
    return n;
}

/* The per-run directories of processes that no longer exist (a run killed
 * by SIGKILL cannot remove its own): their files would fill nvme_path. */
static void remove_stale(const char *dir)
{
    DIR *dp = opendir(dir);
    if (!dp)
        return;
    struct dirent *e;
    while ((e = readdir(dp))) {
        if (strncmp(e->d_name, RUN_PREFIX, strlen(RUN_PREFIX)) != 0)
            continue;
        char *end;
        long pid = strtol(e->d_name + strlen(RUN_PREFIX), &end, 10);
        if (*end || pid <= 0 || pid == (long)getpid() || kill((pid_t)pid, 0) == 0 || errno != ESRCH)
            continue;
        char path[1024];
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        fprintf(stderr, "stepgraph: removing %s, left by a process that no longer exists\n", path);
        sg_remove_tree(path);
    }
    closedir(dp);
}

/* StarPU's O_DIRECT back-end reads and writes whole buffers straight to the
 * device, which needs a file system that takes O_DIRECT (tmpfs does not);
 * the buffers are padded to whole pages (sg_disk_register_vector). */
static const char *direct_refusal(const sg_disk_node *d)
{
    char probe[700];
    snprintf(probe, sizeof probe, "%s/probe", d->dir);
    int fd = open(probe, O_CREAT | O_RDWR | O_DIRECT, 0600);
    if (fd < 0)
        return "the file system refuses O_DIRECT";
    close(fd);
    unlink(probe);
    const char *env = getenv("STEPGRAPH_NVME_BACKEND");
    if (env && strcmp(env, "unistd") == 0)
        return "STEPGRAPH_NVME_BACKEND=unistd";
    return NULL;
}

/* The RAM StarPU may count: the step's plan without the buffers on disk,
 * plus the working set of disk buffers, with room for the allocator's
 * rounding. */
static int set_ram_limit(sg_disk_node *d, const sg_graph *g, int ncpus)
{
    int64_t largest = 0;
    for (int b = 0; b < g->nbuffers; b++)
        if (sg_disk_homes(d->optimizer, d->params, &g->buffers[b]) && g->buffers[b].bytes > largest)
            largest = g->buffers[b].bytes;
    int64_t count = d->working_set; /* buffer_count, on entry */
    d->working_set = largest * (count > 2 ? count : 2);
    int workers = ncpus > 0 ? ncpus : (int)sysconf(_SC_NPROCESSORS_ONLN);
    int64_t peak = 0, persistent = 0;
    if (sg_graph_peak_memory_workers(g, workers > 0 ? workers : 1, &peak, &persistent))
        return SG_EINVAL;
    int64_t ram = peak - d->disk_bytes + d->working_set;
    ram += ram / 10 + (int64_t)(256 * MIB);
    /* the graph's order prefetches (disk_prefetch.c): a dm* scheduler's own
     * prefetch of every ready task's data would fill the RAM under the limit
     * with copies no task frees, and the step would wait for memory */
    setenv("STARPU_PREFETCH", "0", 0);
    if (getenv("STARPU_LIMIT_CPU_MEM"))
        return SG_OK; /* the user's own bound wins */
    char mib[32];
    snprintf(mib, sizeof mib, "%lld", (long long)((double)ram / MIB) + 1);
    setenv("STARPU_LIMIT_CPU_MEM", mib, 1);
    d->ram_limit = ram;
    return SG_OK;
}

static int no_space(const sg_disk_node *d, int e, sg_error *err);

int sg_disk_prepare(sg_disk_node *d, const sg_disk_plan *p, const sg_graph *g, sg_error *err)
{
    memset(d, 0, sizeof *d);
    d->node = -1;
    d->cleanup_slot = -1;
    d->optimizer = p->optimizer;
    d->params = p->params;
    snprintf(d->key, sizeof d->key, "%s", p->key);
    int rc = sg_nvme_check_dir(p->dir, p->key, err);
    if (rc)
        return rc;
    remove_stale(p->dir);
    snprintf(d->dir, sizeof d->dir, "%s/" RUN_PREFIX "%ld", p->dir, (long)getpid());
    sg_remove_tree(d->dir);
    if (mkdir(d->dir, 0700) != 0)
        return sg_error_set(err, SG_EIO, "%s: cannot create %s: %s", p->key, d->dir,
                            strerror(errno));
    d->cleanup_slot = sg_cleanup_add(d->dir);
    d->disk_bytes = sg_disk_bytes(p->optimizer, p->params, g);
    /* before StarPU writes there (its registration measures the disk with
     * a 16 MiB file, and a full disk is an assertion inside StarPU) */
    struct statvfs vfs;
    if (statvfs(d->dir, &vfs) == 0 &&
        (double)vfs.f_bavail * (double)vfs.f_frsize < (double)d->disk_bytes + 2 * 16 * MIB) {
        int rc2 = no_space(d, ENOSPC, err);
        sg_disk_remove(d);
        return rc2;
    }
    d->why_not_direct = direct_refusal(d);
    d->o_direct = d->why_not_direct == NULL;
    d->working_set = p->buffer_count;
    if (set_ram_limit(d, g, p->ncpus))
        return sg_error_set(err, SG_EINVAL, "%s: the step's memory plan cannot be computed",
                            p->key);
    return SG_OK;
}

int sg_disk_register(sg_disk_node *d, sg_error *err)
{
    /* room for StarPU's bandwidth probe (STARPU_DISK_SIZE_MIN) beside the state */
    starpu_ssize_t size = (starpu_ssize_t)d->disk_bytes + 4 * STARPU_DISK_SIZE_MIN;
    /* from here on (the registration measures the disk with a buffer) */
    if (d->o_direct)
        sg_buffer_cache_align_small((size_t)sysconf(_SC_PAGESIZE));
    int node = starpu_disk_register(
        d->o_direct ? &starpu_disk_unistd_o_direct_ops : &starpu_disk_unistd_ops, d->dir, size);
    if (node < 0)
        return sg_error_set(err, SG_EIO, "%s: StarPU could not register a disk node in %s (%d)",
                            d->key, d->dir, node);
    d->node = node;
    return SG_OK;
}

static int no_space(const sg_disk_node *d, int e, sg_error *err)
{
    struct statvfs vfs;
    double avail = statvfs(d->dir, &vfs) == 0 ? (double)vfs.f_bavail * (double)vfs.f_frsize : -1;
    return sg_error_set(err, e == ENOSPC ? SG_ENOMEM : SG_EIO,
                        "%s: %s: cannot hold the state's %.1f MiB (%s; %.1f MiB free there)",
                        d->key, d->dir, (double)d->disk_bytes / MIB, strerror(e), avail / MIB);
}

int sg_disk_register_vector(sg_disk_node *d, void **handle, uint32_t n, size_t esize,
                            const char *name, sg_error *err)
{
    /* whole pages for O_DIRECT: the codelets and the state's loads use the
     * graph's element counts, never the vector's, so the tail is never read */
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    size_t bytes = ((size_t)n * esize + page - 1) / page * page;
    if (!bytes)
        bytes = page;
    n = (uint32_t)(bytes / esize);
    uintptr_t at = starpu_malloc_on_node(d->node, bytes);
    if (!at) {
        (void)name;
        return no_space(d, errno ? errno : ENOSPC, err);
    }
    starpu_data_handle_t h;
    starpu_vector_data_register(&h, (int)d->node, at, n, esize);
    *handle = h;
    return SG_OK;
}

/* nftw has no argument: the reservation's state, on this thread only. */
static __thread int reserve_errno;

static int reserve_one(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)ftw;
    if (flag != FTW_F || st->st_size == 0)
        return 0;
    int fd = open(path, O_RDWR);
    int e = fd < 0 ? errno : posix_fallocate(fd, 0, st->st_size);
    if (fd >= 0)
        close(fd);
    if (e) {
        reserve_errno = e;
        return 1;
    }
    return 0;
}

int sg_disk_reserve(sg_disk_node *d, sg_error *err)
{
    /* the node full to StarPU: it would otherwise evict step-local values
     * there when RAM runs short, in files made during a step, outside the
     * reservation (and not in whole pages for O_DIRECT) */
    starpu_ssize_t room = starpu_memory_get_available((unsigned)d->node);
    if (room > 0)
        starpu_memory_allocate((unsigned)d->node, (size_t)room, STARPU_MEMORY_OVERFLOW);
    reserve_errno = 0;
    if (nftw(d->dir, reserve_one, 16, FTW_PHYS) != 0)
        return no_space(d, reserve_errno ? reserve_errno : errno, err);
    return SG_OK;
}

void sg_disk_remove(sg_disk_node *d)
{
    if (!d->dir[0])
        return;
    sg_remove_tree(d->dir);
    sg_cleanup_forget(d->cleanup_slot);
    d->cleanup_slot = -1;
    d->dir[0] = '\0';
}

void sg_disk_describe(const sg_disk_node *d, char *buf, size_t size)
{
    char bound[96];
    if (d->ram_limit)
        snprintf(bound, sizeof bound, "STARPU_LIMIT_CPU_MEM %.0f MiB", (double)d->ram_limit / MIB);
    else
        snprintf(bound, sizeof bound, "STARPU_LIMIT_CPU_MEM %s MiB (yours)",
                 getenv("STARPU_LIMIT_CPU_MEM"));
    snprintf(buf, size,
             "%s%s%s on disk: %.2f GiB in %s, StarPU %s back-end%s%s%s; in RAM at "
             "most %.1f MiB of it (%s), %d group%s prefetched ahead",
             d->optimizer ? "optimizer state" : "", d->optimizer && d->params ? " and " : "",
             d->params ? "parameters" : "", (double)d->disk_bytes / GIB, d->dir,
             d->o_direct ? "unistd_o_direct" : "unistd", d->o_direct ? "" : " (",
             d->o_direct ? "" : d->why_not_direct, d->o_direct ? "" : ")",
             (double)d->working_set / MIB, bound, d->depth, d->depth == 1 ? "" : "s");
}
