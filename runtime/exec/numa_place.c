/* numa_place.c - sub-groups' state and optimizer tasks per NUMA node
 * (numa_place.h). */
#include "runtime/exec/numa_place.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/exec/starpu_include.h"

int sg_numa_os_index(int mem)
{
    if (mem < 0 || (unsigned)mem >= starpu_memory_nodes_get_numa_count() ||
        starpu_node_get_kind((unsigned)mem) != STARPU_CPU_RAM)
        return -1;
    return starpu_memory_nodes_numa_devid_to_id((unsigned)mem);
}

int sg_numa_worker_os_index(int w)
{
    if (w < 0 || starpu_worker_get_type(w) != STARPU_CPU_WORKER)
        return -1;
    return sg_numa_os_index((int)starpu_worker_get_memory_node((unsigned)w));
}

/* Whether node nd's task is kept on its sub-group's node: a CPU task of a
 * sub-group (casts, Adam, the validation). */
static int placed_task(const sg_node *nd, uint32_t where)
{
    return nd->subgroup >= 0 && nd->device == SG_DEV_CPU && where == STARPU_CPU;
}

/* A sub-group's state: what outlives the step on the host side. */
static int placed_buffer(const sg_buffer *b)
{
    return b->persistent && b->space == SG_MEM_HOST && b->subgroup >= 0;
}

/* The scheduling context the placed tasks go to: the optimizer's where
 * cpuadam_cores_perc reserves workers for it, else the one context. */
static unsigned placed_ctx(const sg_graph *g, const sg_sched_split *split)
{
    for (int i = 0; i < g->nnodes; i++)
        if (placed_task(&g->nodes[i], STARPU_CPU))
            return sg_starpu_ctx_for(split, &g->nodes[i]);
    return 0;
}

/* Worker w is a CPU worker of memory node m that the placed tasks may use. */
static int usable(unsigned w, unsigned m, const sg_sched_split *split, unsigned ctx)
{
    return starpu_worker_get_type((int)w) == STARPU_CPU_WORKER &&
           starpu_worker_get_memory_node(w) == m &&
           (!split->reserved || starpu_sched_ctx_contains_worker((int)w, ctx));
}

/* The active nodes (those with usable workers, ascending) and their masks. */
static int find_active(sg_numa_place *p, const sg_sched_split *split, unsigned ctx, sg_error *err)
{
    unsigned nnuma = starpu_memory_nodes_get_numa_count(), nw = starpu_worker_get_count();
    p->mask_len = (nw + 31) / 32;
    p->active = calloc(nnuma ? nnuma : 1, sizeof *p->active);
    p->masks = calloc((size_t)(nnuma ? nnuma : 1) * p->mask_len, sizeof *p->masks);
    if (!p->active || !p->masks)
        return sg_error_set(err, SG_ENOMEM, "out of memory");
    for (unsigned m = 0; m < nnuma; m++) {
        uint32_t *mask = p->masks + (size_t)p->nactive * p->mask_len;
        int count = 0;
        for (unsigned w = 0; w < nw; w++)
            if (usable(w, m, split, ctx)) {
                mask[w / 32] |= 1u << (w % 32);
                count++;
            }
        if (count)
            p->active[p->nactive++] = m;
    }
    return SG_OK;
}

int sg_numa_place_init(sg_numa_place *p, const sg_graph *g, int enable, const sg_sched_split *split,
                       sg_error *err)
{
    memset(p, 0, sizeof *p);
    if (!enable)
        return SG_OK;
    int rc = find_active(p, split, placed_ctx(g, split), err);
    if (rc || p->nactive < 1)
        return rc;
    p->buffer_node = malloc((size_t)(g->nbuffers > 0 ? g->nbuffers : 1) * sizeof(int));
    if (!p->buffer_node)
        return sg_error_set(err, SG_ENOMEM, "out of memory");
    for (int b = 0; b < g->nbuffers; b++) {
        const sg_buffer *buf = &g->buffers[b];
        p->buffer_node[b] = placed_buffer(buf) ? (int)p->active[buf->subgroup % p->nactive] : -1;
        if (p->buffer_node[b] >= 0 && buf->subgroup >= p->nsubgroups)
            p->nsubgroups = buf->subgroup + 1;
    }
    return SG_OK;
}

const uint32_t *sg_numa_place_task(const sg_numa_place *p, const sg_node *nd, uint32_t where,
                                   unsigned *len)
{
    *len = 0;
    if (p->nactive < 1 || !placed_task(nd, where))
        return NULL;
    *len = p->mask_len;
    return p->masks + (size_t)(nd->subgroup % p->nactive) * p->mask_len;
}

int sg_numa_place_describe(const sg_numa_place *p, int emulated, char *buf, size_t cap)
{
    int nsubgroups = p->nsubgroups;
    if (p->nactive < 1 || cap == 0)
        return 0;
    size_t at = 0;
    unsigned nnuma = starpu_memory_nodes_get_numa_count();
    at +=
        (size_t)snprintf(buf, cap, "  NUMA: %u memory node%s%s; the optimizer's CPU workers", nnuma,
                         nnuma == 1 ? "" : "s", emulated ? " (emulated: numa_emulate)" : "");
    for (int k = 0; k < p->nactive && at < cap; k++) {
        int count = 0;
        for (unsigned w = 0; w < starpu_worker_get_count(); w++)
            count += (p->masks[(size_t)k * p->mask_len + w / 32] >> (w % 32)) & 1;
        at += (size_t)snprintf(buf + at, cap - at, "%s node %d: %d", k ? "," : "",
                               sg_numa_os_index((int)p->active[k]), count);
    }
    if (at < cap)
        snprintf(buf + at, cap - at,
                 "; the state and CPU optimizer tasks of sub-group s on "
                 "the (s mod %d)-th of these (%d sub-group%s)",
                 p->nactive, nsubgroups, nsubgroups == 1 ? "" : "s");
    return 1;
}

void sg_numa_place_free(sg_numa_place *p)
{
    free(p->active);
    free(p->buffer_node);
    free(p->masks);
    memset(p, 0, sizeof *p);
}
