/* liveness.c - value births and deaths of a step graph's buffers (liveness.h). */
#include "graph/liveness.h"

#include <stdlib.h>
#include <string.h>

int sg_buffer_outlives_step(const sg_buffer *b)
{
    return b->persistent || b->role == SG_BUF_LOSS || b->role == SG_BUF_GRAD_NORM ||
           b->role == SG_BUF_OVERFLOW;
}

void sg_liveness_free(sg_liveness *lv)
{
    free(lv->born_offset);
    free(lv->born);
    free(lv->dies_offset);
    free(lv->dies);
    memset(lv, 0, sizeof *lv);
}

/* Merged mode of buffer b at node n (0: not accessed); a node may list a
 * buffer more than once. */
static int merged_mode(const sg_node *nd, int b)
{
    int m = 0;
    for (int i = 0; i < nd->naccess; i++)
        if (nd->access[i].buffer == b)
            m |= nd->access[i].mode;
    return m;
}

int sg_graph_liveness(const sg_graph *g, sg_liveness *lv)
{
    int nn = g->nnodes, nb = g->nbuffers;
    memset(lv, 0, sizeof *lv);
    lv->nnodes = nn;
    size_t total = 0;
    for (int n = 0; n < nn; n++)
        total += (size_t)g->nodes[n].naccess;
    /* last[b]: the last node that accessed b's current value (-1: no value) */
    int *last = malloc((size_t)(nb ? nb : 1) * sizeof *last);
    int *born_n = calloc((size_t)nn + 1, sizeof *born_n),
        *dies_n = calloc((size_t)nn + 1, sizeof *dies_n);
    lv->born_offset = calloc((size_t)nn + 1, sizeof(int));
    lv->dies_offset = calloc((size_t)nn + 1, sizeof(int));
    lv->born = malloc((total + 1) * sizeof(int));
    lv->dies = malloc((total + 1) * sizeof(int));
    /* pairs (node, buffer) found in program order, sorted per node below */
    int *bn = malloc((total + 1) * 2 * sizeof(int)), *dn = malloc((total + 1) * 2 * sizeof(int));
    if (!last || !born_n || !dies_n || !lv->born_offset || !lv->dies_offset || !lv->born ||
        !lv->dies || !bn || !dn) {
        free(last);
        free(born_n);
        free(dies_n);
        free(bn);
        free(dn);
        sg_liveness_free(lv);
        return SG_ENOMEM;
    }
    size_t nbirth = 0, ndeath = 0;
    for (int b = 0; b < nb; b++)
        last[b] = -1;
    for (int n = 0; n < nn; n++) {
        const sg_node *nd = &g->nodes[n];
        for (int i = 0; i < nd->naccess; i++) {
            int b = nd->access[i].buffer;
            const sg_buffer *buf = &g->buffers[b];
            if (buf->persistent || last[b] == n)
                continue; /* persistent, or seen at this node already */
            int m = merged_mode(nd, b);
            if (last[b] >= 0 && m == SG_W && !sg_buffer_outlives_step(buf)) {
                /* a new value: the old one died after its last access */
                dn[2 * ndeath] = last[b];
                dn[2 * ndeath + 1] = b;
                ndeath++;
                last[b] = -1;
            }
            if (last[b] < 0) {
                bn[2 * nbirth] = n;
                bn[2 * nbirth + 1] = b;
                nbirth++;
            }
            last[b] = n;
        }
    }
    for (int b = 0; b < nb; b++)
        if (last[b] >= 0 && !sg_buffer_outlives_step(&g->buffers[b])) {
            dn[2 * ndeath] = last[b];
            dn[2 * ndeath + 1] = b;
            ndeath++;
        }
    /* counting sort by node (stable: buffers keep their order of discovery) */
    for (size_t k = 0; k < nbirth; k++)
        born_n[bn[2 * k]]++;
    for (size_t k = 0; k < ndeath; k++)
        dies_n[dn[2 * k]]++;
    for (int n = 0; n < nn; n++) {
        lv->born_offset[n + 1] = lv->born_offset[n] + born_n[n];
        lv->dies_offset[n + 1] = lv->dies_offset[n] + dies_n[n];
        born_n[n] = lv->born_offset[n];
        dies_n[n] = lv->dies_offset[n];
    }
    for (size_t k = 0; k < nbirth; k++)
        lv->born[born_n[bn[2 * k]]++] = bn[2 * k + 1];
    for (size_t k = 0; k < ndeath; k++)
        lv->dies[dies_n[dn[2 * k]]++] = dn[2 * k + 1];
    free(last);
    free(born_n);
    free(dies_n);
    free(bn);
    free(dn);
    return SG_OK;
}
