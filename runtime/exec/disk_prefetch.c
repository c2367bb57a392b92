/* disk_prefetch.c - the disk node's buffers fetched in the graph's order and
 * marked for eviction after their last use (disk_node.h).
 *
 * A group is the disk buffers a step first touches at the same node: a
 * sub-group tile's master and moments (its adam task), or the pieces a
 * unit's fetch reads. The order of the groups is the program order, known
 * before the step runs, so when a group's last task ends the group `depth`
 * places on is fetched to RAM while the tasks between run. */
#include "runtime/exec/disk_node.h"

#include "runtime/exec/starpu_include.h"
#include <stdlib.h>
#include <string.h>

int sg_disk_sched_init(sg_disk_sched *s, sg_disk_node *d, const sg_graph *g, void *const *handles)
{
    memset(s, 0, sizeof *s);
    s->d = d;
    s->handles = handles;
    int nb = g->nbuffers > 0 ? g->nbuffers : 1, nn = g->nnodes > 0 ? g->nnodes : 1;
    int *first = malloc((size_t)nb * sizeof *first);
    s->last_access = malloc((size_t)nb * sizeof(int));
    s->group_start = calloc((size_t)nn + 1, sizeof(int));
    s->group_buf = malloc((size_t)nb * sizeof(int));
    s->group_end = malloc((size_t)nn * sizeof(int));
    s->is_end = calloc((size_t)nn, 1);
    if (!first || !s->last_access || !s->group_start || !s->group_buf || !s->group_end ||
        !s->is_end) {
        free(first);
        sg_disk_sched_free(s);
        return SG_ENOMEM;
    }
    for (int b = 0; b < g->nbuffers; b++)
        first[b] = s->last_access[b] = -1;
    for (int i = 0; i < g->nnodes; i++)
        for (int a = 0; a < g->nodes[i].naccess; a++) {
            int b = g->nodes[i].access[a].buffer;
            if (!sg_disk_homes(d->optimizer, d->params, &g->buffers[b]))
                continue;
            if (first[b] < 0)
                first[b] = i;
            s->last_access[b] = i;
        }
    /* groups in program order of their first node */
    int nbuf = 0;
    for (int i = 0; i < g->nnodes; i++) {
        int end = -1, start = nbuf;
        for (int b = 0; b < g->nbuffers; b++)
            if (first[b] == i) {
                s->group_buf[nbuf++] = b;
                end = s->last_access[b] > end ? s->last_access[b] : end;
            }
        if (nbuf == start)
            continue;
        s->group_start[s->ngroups] = start;
        s->group_end[s->ngroups++] = end;
        s->is_end[end] = 1;
    }
    s->group_start[s->ngroups] = nbuf;
    free(first);
    /* one group ahead: on a 0.48 B model (6.3 GiB on disk, 4 groups fit the
     * working set) prefetching 4 groups ahead read as much and took 1.9x
     * the time of 1 ahead (docs/benchmarks.md, "NVMe offload"): copies
     * fetched early push out buffers still to be used. The working set
     * holds the group in use, the next, and what StarPU keeps cached. */
    s->depth = 1;
    /* STEPGRAPH_NVME_PREFETCH=N: N groups ahead instead (0: StarPU fetches
     * each buffer when its task runs), to compare the disk bytes */
    const char *pf = getenv("STEPGRAPH_NVME_PREFETCH");
    if (pf && *pf >= '0' && *pf <= '9')
        s->depth = atoi(pf);
    d->depth = s->depth;
    return SG_OK;
}

void sg_disk_sched_free(sg_disk_sched *s)
{
    free(s->last_access);
    free(s->group_start);
    free(s->group_buf);
    free(s->group_end);
    free(s->is_end);
    memset(s, 0, sizeof *s);
}

static void prefetch_group(const sg_disk_sched *s, int j)
{
    if (s->depth == 0 || j < 0 || j >= s->ngroups)
        return;
    for (int k = s->group_start[j]; k < s->group_start[j + 1]; k++)
        starpu_data_prefetch_on_node((starpu_data_handle_t)s->handles[s->group_buf[k]],
                                     STARPU_MAIN_RAM, 1);
}

void sg_disk_step_begins(const sg_disk_sched *s)
{
    for (int j = 0; j < s->depth; j++)
        prefetch_group(s, j);
}

void sg_disk_node_submitted(const sg_disk_sched *s, const sg_graph *g, int i)
{
    if (!s->is_end)
        return;
    const sg_node *nd = &g->nodes[i];
    for (int a = 0; a < nd->naccess; a++) {
        int b = nd->access[a].buffer, seen = 0;
        if (s->last_access[b] != i)
            continue;
        for (int p = 0; p < a && !seen; p++)
            seen = nd->access[p].buffer == b;
        /* written back to disk when the bus is idle, evicted first */
        if (!seen)
            starpu_data_wont_use((starpu_data_handle_t)s->handles[b]);
    }
}

void sg_disk_task_done(const sg_disk_sched *s, int i)
{
    if (!s || !s->is_end || !s->is_end[i])
        return;
    for (int j = 0; j < s->ngroups; j++)
        if (s->group_end[j] == i)
            prefetch_group(s, j + s->depth);
}
