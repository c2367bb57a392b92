/* phase_layout.c - where tasks run, and the phase grid of a picture
 * (phase_layout.h). */
#include "graph/phase_layout.h"

#include <stdlib.h>
#include <string.h>

#include "graph/op_kinds.h"

static const struct {
    const char *name, *label, *color;
} places[SG_WHERE_COUNT] = {
    [SG_WHERE_GPU] = {"gpu", "GPU worker", "#a1d99b"},
    [SG_WHERE_CPU] = {"cpu", "CPU worker (optimizer, NUMA-bound)", "#fdae6b"},
    [SG_WHERE_H2D] = {"h2d", "link: host to device", "#9ecae1"},
    [SG_WHERE_D2H] = {"d2h", "link: device to host", "#cbb4e6"},
    [SG_WHERE_NET] = {"net", "network: collectives", "#fee391"},
};

sg_where sg_where_planned(const sg_node *n)
{
    if (n->device == SG_DEV_LINK)
        return n->link == SG_LINK_H2D   ? SG_WHERE_H2D
               : n->link == SG_LINK_D2H ? SG_WHERE_D2H
                                        : SG_WHERE_NET;
    if (n->device == SG_DEV_CPU)
        return SG_WHERE_CPU;
    const sg_op_kind_info *info = sg_op_kind_info_of(n->kind);
    if (!n->pinned && info && info->placement == SG_PLACE_CPU)
        return SG_WHERE_CPU; /* host-side bookkeeping StarPU runs on CPU workers */
    return SG_WHERE_GPU;
}

int sg_where_of_lane(const char *lane)
{
    if (!strncmp(lane, "CPU", 3))
        return SG_WHERE_CPU;
    if (!strncmp(lane, "CUDA", 4) || !strncmp(lane, "GPU", 3) || !strncmp(lane, "HIP", 3))
        return SG_WHERE_GPU;
    if (!strcmp(lane, "link h2d"))
        return SG_WHERE_H2D;
    if (!strcmp(lane, "link d2h"))
        return SG_WHERE_D2H;
    if (!strcmp(lane, "link net"))
        return SG_WHERE_NET;
    return -1;
}

const char *sg_where_name(sg_where w)
{
    return (unsigned)w < SG_WHERE_COUNT ? places[w].name : "?";
}

const char *sg_where_label(sg_where w)
{
    return (unsigned)w < SG_WHERE_COUNT ? places[w].label : "?";
}

const char *sg_where_color(sg_where w)
{
    return (unsigned)w < SG_WHERE_COUNT ? places[w].color : "#ffffff";
}

/* The band of node n (gathers_fwd: n is a gather a forward reads). */
static int band_of(const sg_node *n, sg_where w, int gathers_fwd)
{
    if (n->kind == SG_OP_ALLGATHER || sg_node_is_param_fetch(n))
        return gathers_fwd ? SG_BAND_GATHER_FWD : SG_BAND_GATHER_BWD;
    if (n->device == SG_DEV_LINK)
        return n->link == SG_LINK_NET ? SG_BAND_REDUCE : SG_BAND_LINK;
    if (n->kind == SG_OP_GRAD_NORM && n->layer >= 0)
        return SG_BAND_REDUCE; /* a unit's norm partial, after its reductions */
    const sg_op_kind_info *info = sg_op_kind_info_of(n->kind);
    sg_phase ph = info ? info->phase : SG_PHASE_OPTIMIZER;
    if (ph == SG_PHASE_FORWARD)
        return SG_BAND_FORWARD;
    if (ph == SG_PHASE_BACKWARD)
        return SG_BAND_BACKWARD;
    return w == SG_WHERE_CPU ? SG_BAND_OPT_CPU : SG_BAND_OPT_GPU;
}

typedef struct {
    int from, to, key;
} pair;
/* grid cells sort by (col, band, first node): from = endpoint, to = col,
 * key = band * nnodes + first node */
static int cmp_cell(const void *a, const void *b)
{
    const pair *x = a, *y = b;
    return x->to != y->to ? (x->to > y->to) - (x->to < y->to)
                          : (x->key > y->key) - (x->key < y->key);
}
static int cmp_pair(const void *a, const void *b)
{
    const pair *x = a, *y = b;
    return (x->key > y->key) - (x->key < y->key);
}

int sg_phase_layout_compute(const sg_graph *g, const sg_fold *fold, const unsigned char *where,
                            sg_phase_layout *l)
{
    memset(l, 0, sizeof *l);
    int nn = g->nnodes, ng = fold ? fold->ngroups : 0, ne = nn + ng;
    size_t sz = (size_t)(ne > 0 ? ne : 1);
    l->nends = ne;
    l->col = malloc(sz * sizeof *l->col);
    l->band = malloc(sz * sizeof *l->band);
    l->order = malloc(sz * sizeof *l->order);
    l->row = malloc(sz * sizeof *l->row);
    l->sorted = malloc(sz * sizeof *l->sorted);
    int *end_of = malloc((size_t)(nn > 0 ? nn : 1) * sizeof *end_of);
    int *depth = calloc(sz, sizeof *depth);
    int *unit = malloc(sz * sizeof *unit);           /* unit key, -1 outside units */
    unsigned char *gfwd = calloc((size_t)(nn > 0 ? nn : 1), 1);
    pair *pairs = malloc((size_t)(g->nedges > 0 ? g->nedges : 1) * sizeof *pairs);
    int maxlayer = -1;
    for (int i = 0; i < nn; i++)
        maxlayer = g->nodes[i].layer > maxlayer ? g->nodes[i].layer : maxlayer;
    int *unit_col = malloc((size_t)(maxlayer + 2) * sizeof *unit_col);
    int rc = SG_OK;
    if (!l->col || !l->band || !l->order || !l->row || !l->sorted || !end_of || !depth || !unit || !gfwd ||
        !pairs || !unit_col) {
        rc = SG_ENOMEM;
        goto out;
    }
    for (int e = 0; e < ne; e++) {
        l->col[e] = -1;
        l->band[e] = -1;
        l->row[e] = -1;
        l->order[e] = -1; /* here: the first node (program order) of the endpoint */
        unit[e] = -1;
    }
    for (int e = 0; e < g->nedges; e++)
        if (g->nodes[g->edges[e].from].kind == SG_OP_ALLGATHER &&
            g->nodes[g->edges[e].to].kind == SG_OP_FORWARD)
            gfwd[g->edges[e].from] = 1;
    /* a fetch goes with the forward it feeds, directly or through its gather */
    for (int e = 0; e < g->nedges; e++) {
        const sg_node *to = &g->nodes[g->edges[e].to];
        if (sg_node_is_param_fetch(&g->nodes[g->edges[e].from]) &&
            (to->kind == SG_OP_FORWARD || (to->kind == SG_OP_ALLGATHER && gfwd[to->id])))
            gfwd[g->edges[e].from] = 1;
    }
    /* endpoints: bands, first nodes, units */
    for (int i = 0; i < nn; i++) {
        const sg_node *n = &g->nodes[i];
        int gi = fold ? fold->group_of[i] : -1;
        int e = gi >= 0 ? nn + gi : i;
        end_of[i] = e;
        sg_where w = where ? (sg_where)where[i] : sg_where_planned(n);
        int b = band_of(n, w, gfwd[i]);
        if (l->order[e] < 0)
            l->order[e] = i;
        if (gi < 0) {
            l->band[e] = b;
            unit[e] = n->layer;
        } else if (!fold->groups[gi].is_subgroup) {
            l->band[e] = SG_BAND_GATHER_BWD; /* folded units: mid-column */
            unit[e] = (int)fold->groups[gi].first;
        } else if (b > l->band[e]) {
            l->band[e] = b;                  /* folded sub-groups: their lowest band */
        }
    }
    /* columns of units, in unit order */
    for (int u = 0; u <= maxlayer + 1; u++)
        unit_col[u] = -1;
    for (int e = 0; e < ne; e++)
        if (l->order[e] >= 0 && unit[e] >= 0)
            unit_col[unit[e]] = 0;
    int nunit = 0;
    for (int u = 0; u <= maxlayer; u++)
        if (unit_col[u] == 0)
            unit_col[u] = nunit++;
    /* outside units, chains: a sub-group's (or an optimizer chunk's) tasks,
     * the step's own checks, each folded sub-group alone; a task's depth in
     * its chain (edges forward in program order: folding may close cycles)
     * is its column from the chain's start */
    int *chain = malloc(sz * sizeof *chain);
    int *chain_first = malloc(sz * sizeof *chain_first); /* per chain: its first node */
    int *chain_w = calloc(sz, sizeof *chain_w), *chain_band = calloc(sz, sizeof *chain_band);
    int *chain_base = malloc(sz * sizeof *chain_base);
    if (!chain || !chain_first || !chain_w || !chain_band || !chain_base) {
        rc = SG_ENOMEM;
        goto out_chain;
    }
    int nchain = 0;
    for (int e = 0; e < ne; e++) {
        chain[e] = -1;
        if (l->order[e] < 0 || unit[e] >= 0)
            continue;
        /* the chain of e: the same (sub-group, tile) as an endpoint before it */
        const sg_node *n = e < nn ? &g->nodes[e] : NULL;
        for (int j = 0; n && j < e && chain[e] < 0; j++)
            if (chain[j] >= 0 && j < nn && g->nodes[j].subgroup == n->subgroup &&
                g->nodes[j].tile == n->tile)
                chain[e] = chain[j];
        if (chain[e] < 0) {
            chain_first[nchain] = l->order[e];
            chain[e] = nchain++;
        } else if (l->order[e] < chain_first[chain[e]]) {
            chain_first[chain[e]] = l->order[e];
        }
    }
    int np = 0;
    for (int k = 0; k < g->nedges; k++) {
        int a = end_of[g->edges[k].from], b = end_of[g->edges[k].to];
        if (a != b && chain[a] >= 0 && chain[a] == chain[b] && l->order[a] < l->order[b])
            pairs[np++] = (pair){a, b, l->order[a]};
    }
    qsort(pairs, (size_t)np, sizeof *pairs, cmp_pair);
    for (int k = 0; k < np; k++)
        if (depth[pairs[k].from] + 1 > depth[pairs[k].to])
            depth[pairs[k].to] = depth[pairs[k].from] + 1;
    for (int e = 0; e < ne; e++)
        if (chain[e] >= 0) {
            if (depth[e] + 1 > chain_w[chain[e]])
                chain_w[chain[e]] = depth[e] + 1;
            if (l->band[e] > chain_band[chain[e]])
                chain_band[chain[e]] = l->band[e];
        }
    /* chains packed left to right in program order, one cursor per band (the
     * GPU side and the host side both start at the first column), wrapping
     * at the units' width: a wrapped chain goes on a row under the others */
    {
        pair *byfirst = malloc((size_t)(nchain > 0 ? nchain : 1) * sizeof *byfirst);
        if (!byfirst) {
            rc = SG_ENOMEM;
            goto out_chain;
        }
        for (int c = 0; c < nchain; c++)
            byfirst[c] = (pair){c, 0, chain_first[c]};
        qsort(byfirst, (size_t)nchain, sizeof *byfirst, cmp_pair);
        int cursor[SG_BAND_COUNT] = {0};
        for (int k = 0; k < nchain; k++) {
            int c = byfirst[k].from, b = chain_band[c];
            int width = nunit > chain_w[c] ? nunit : chain_w[c];
            if (cursor[b] > 0 && cursor[b] + chain_w[c] > width)
                cursor[b] = 0;
            chain_base[c] = cursor[b];
            cursor[b] += chain_w[c];
        }
        free(byfirst);
    }
    for (int e = 0; e < ne; e++)
        if (chain[e] >= 0)
            depth[e] += chain_base[chain[e]];
out_chain:
    free(chain);
    free(chain_first);
    free(chain_w);
    free(chain_band);
    free(chain_base);
    if (rc)
        goto out;
    l->ncols = nunit;
    for (int e = 0; e < ne; e++) {
        if (l->order[e] < 0)
            continue;
        l->col[e] = unit[e] >= 0 ? unit_col[unit[e]] : depth[e];
        if (l->col[e] + 1 > l->ncols)
            l->ncols = l->col[e] + 1;
        l->nsorted++;
    }
    pair *cells = malloc((size_t)(l->nsorted > 0 ? l->nsorted : 1) * sizeof *cells);
    if (!cells) {
        rc = SG_ENOMEM;
        goto out;
    }
    int nc = 0;
    for (int e = 0; e < ne; e++)
        if (l->col[e] >= 0)
            cells[nc++] = (pair){e, l->col[e], l->band[e] * nn + l->order[e]};
    qsort(cells, (size_t)nc, sizeof *cells, cmp_cell);
    /* rows: the k-th of band b in a column; per band, as many rows as its
     * fullest column */
    int kmax[SG_BAND_COUNT] = {0}, base[SG_BAND_COUNT + 1] = {0};
    for (int k = 0, run = 0; k < nc; k++) {
        int e = cells[k].from;
        run = k > 0 && l->col[cells[k - 1].from] == l->col[e] &&
                      l->band[cells[k - 1].from] == l->band[e]
                  ? run + 1
                  : 0;
        l->sorted[k] = e;
        l->order[e] = k;
        l->row[e] = run; /* within the band, for now */
        if (run + 1 > kmax[l->band[e]])
            kmax[l->band[e]] = run + 1;
    }
    for (int b = 0; b < SG_BAND_COUNT; b++)
        base[b + 1] = base[b] + kmax[b];
    for (int k = 0; k < nc; k++)
        l->row[cells[k].from] += base[l->band[cells[k].from]];
    l->nrows = base[SG_BAND_COUNT];
    free(cells);
out:
    free(end_of);
    free(depth);
    free(unit);
    free(gfwd);
    free(pairs);
    free(unit_col);
    if (rc)
        sg_phase_layout_free(l);
    return rc;
}

void sg_phase_layout_free(sg_phase_layout *l)
{
    free(l->col);
    free(l->band);
    free(l->order);
    free(l->row);
    free(l->sorted);
    memset(l, 0, sizeof *l);
}

int sg_phase_layout_before(const sg_phase_layout *l, int a, int b)
{
    return l->order[a] < l->order[b];
}
