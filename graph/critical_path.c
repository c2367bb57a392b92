/* critical_path.c - the chain of tasks that sets a step's length
 * (critical_path.h). */
#include "graph/critical_path.h"

#include <stdlib.h>

int sg_critical_path_ideal(const sg_graph *g, const sg_cost_model *cm, int *ids, int *n)
{
    *n = 0;
    if (g->nnodes == 0)
        return SG_OK;
    double *bl = malloc((size_t)g->nnodes * sizeof *bl);
    int *has_pred = calloc((size_t)g->nnodes, sizeof *has_pred);
    sg_adjacency adj = {0};
    int rc = (!bl || !has_pred) ? SG_ENOMEM : sg_graph_bottom_levels(g, cm, bl);
    if (!rc)
        rc = sg_graph_successors(g, &adj);
    if (!rc) {
        for (int e = 0; e < g->nedges; e++)
            has_pred[g->edges[e].to] = 1;
        int cur = -1;
        for (int i = 0; i < g->nnodes; i++)
            if (!has_pred[i] && (cur < 0 || bl[i] > bl[cur]))
                cur = i;
        while (cur >= 0) {
            ids[(*n)++] = cur;
            int next = -1;
            for (int k = adj.offset[cur]; k < adj.offset[cur + 1]; k++)
                if (next < 0 || bl[adj.target[k]] > bl[next])
                    next = adj.target[k];
            cur = next;
        }
    }
    sg_adjacency_free(&adj);
    free(bl);
    free(has_pred);
    return rc;
}

int sg_critical_path_timed(const sg_graph *g, const double *start, const double *end, int *ids,
                           int *n, double *wait_s)
{
    *n = 0;
    *wait_s = 0;
    int cur = -1;
    for (int i = 0; i < g->nnodes; i++)
        if (end[i] >= 0 && (cur < 0 || end[i] > end[cur]))
            cur = i;
    /* edges are sorted by (from, to): the predecessors of a node are found by
     * a scan; paths are short next to the graph */
    while (cur >= 0 && *n < g->nnodes) {
        ids[(*n)++] = cur;
        int best = -1;
        for (int e = 0; e < g->nedges; e++)
            if (g->edges[e].to == cur && end[g->edges[e].from] >= 0 &&
                (best < 0 || end[g->edges[e].from] > end[best]))
                best = g->edges[e].from;
        if (best >= 0 && start[cur] > end[best])
            *wait_s += start[cur] - end[best];
        cur = best;
    }
    /* first to last */
    for (int a = 0, b = *n - 1; a < b; a++, b--) {
        int t = ids[a];
        ids[a] = ids[b];
        ids[b] = t;
    }
    return SG_OK;
}
