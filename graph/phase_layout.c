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

/* The scratch of one layout: per node its endpoint; per endpoint its depth
 * in its chain and its unit (-1 outside units); the gathers (and fetches)
 * that feed a forward; edge pairs; each unit's column. */
typedef struct layout_work {
    const sg_graph *g;
    const sg_fold *fold;
    int nn, ne;
    size_t sz;
    int *end_of, *depth, *unit;
    unsigned char *gfwd;
    pair *pairs;
    int maxlayer, *unit_col, nunit;
} layout_work;

/* The chains outside units: per endpoint its chain (-1: none); per chain its
 * first node, width, band and first column. */
typedef struct layout_chains {
    int *chain, *first, *w, *band, *base;
    int n;
} layout_chains;

static int work_alloc(layout_work *w, sg_phase_layout *l, const sg_graph *g, const sg_fold *fold)
{
    memset(l, 0, sizeof *l);
    memset(w, 0, sizeof *w);
    int nn = g->nnodes, ng = fold ? fold->ngroups : 0, ne = nn + ng;
    size_t sz = (size_t)(ne > 0 ? ne : 1);
    w->g = g;
    w->fold = fold;
    w->nn = nn;
    w->ne = ne;
    w->sz = sz;
    l->nends = ne;
    l->col = malloc(sz * sizeof *l->col);
    l->band = malloc(sz * sizeof *l->band);
    l->order = malloc(sz * sizeof *l->order);
    l->row = malloc(sz * sizeof *l->row);
    l->sorted = malloc(sz * sizeof *l->sorted);
    w->end_of = malloc((size_t)(nn > 0 ? nn : 1) * sizeof *w->end_of);
    w->depth = calloc(sz, sizeof *w->depth);
    w->unit = malloc(sz * sizeof *w->unit);
    w->gfwd = calloc((size_t)(nn > 0 ? nn : 1), 1);
    w->pairs = malloc((size_t)(g->nedges > 0 ? g->nedges : 1) * sizeof *w->pairs);
    w->maxlayer = -1;
    for (int i = 0; i < nn; i++)
        w->maxlayer = g->nodes[i].layer > w->maxlayer ? g->nodes[i].layer : w->maxlayer;
    w->unit_col = malloc((size_t)(w->maxlayer + 2) * sizeof *w->unit_col);
    if (!l->col || !l->band || !l->order || !l->row || !l->sorted || !w->end_of || !w->depth ||
        !w->unit || !w->gfwd || !w->pairs || !w->unit_col)
        return SG_ENOMEM;
    for (int e = 0; e < ne; e++) {
        l->col[e] = -1;
        l->band[e] = -1;
        l->row[e] = -1;
        l->order[e] = -1; /* here: the first node (program order) of the endpoint */
        w->unit[e] = -1;
    }
    return SG_OK;
}

static void work_free(layout_work *w)
{
    free(w->end_of);
    free(w->depth);
    free(w->unit);
    free(w->gfwd);
    free(w->pairs);
    free(w->unit_col);
}

/* The gathers a forward reads; a fetch goes with the forward it feeds,
 * directly or through its gather. */
static void mark_forward_gathers(layout_work *w)
{
    const sg_graph *g = w->g;
    for (int e = 0; e < g->nedges; e++)
        if (g->nodes[g->edges[e].from].kind == SG_OP_ALLGATHER &&
            g->nodes[g->edges[e].to].kind == SG_OP_FORWARD)
            w->gfwd[g->edges[e].from] = 1;
    for (int e = 0; e < g->nedges; e++) {
        const sg_node *to = &g->nodes[g->edges[e].to];
        if (sg_node_is_param_fetch(&g->nodes[g->edges[e].from]) &&
            (to->kind == SG_OP_FORWARD || (to->kind == SG_OP_ALLGATHER && w->gfwd[to->id])))
            w->gfwd[g->edges[e].from] = 1;
    }
}

/* Endpoints: bands, first nodes, units. */
static void place_endpoints(layout_work *w, sg_phase_layout *l, const unsigned char *where)
{
    const sg_graph *g = w->g;
    const sg_fold *fold = w->fold;
    for (int i = 0; i < w->nn; i++) {
        const sg_node *n = &g->nodes[i];
        int gi = fold ? fold->group_of[i] : -1;
        int e = gi >= 0 ? w->nn + gi : i;
        w->end_of[i] = e;
        sg_where wh = where ? (sg_where)where[i] : sg_where_planned(n);
        int b = band_of(n, wh, w->gfwd[i]);
        if (l->order[e] < 0)
            l->order[e] = i;
        if (gi < 0) {
            l->band[e] = b;
            w->unit[e] = n->layer;
        } else if (!fold->groups[gi].is_subgroup) {
            l->band[e] = SG_BAND_GATHER_BWD; /* folded units: mid-column */
            w->unit[e] = (int)fold->groups[gi].first;
        } else if (b > l->band[e]) {
            l->band[e] = b; /* folded sub-groups: their lowest band */
        }
    }
}

/* Columns of units, in unit order. */
static void unit_columns(layout_work *w, const sg_phase_layout *l)
{
    for (int u = 0; u <= w->maxlayer + 1; u++)
        w->unit_col[u] = -1;
    for (int e = 0; e < w->ne; e++)
        if (l->order[e] >= 0 && w->unit[e] >= 0)
            w->unit_col[w->unit[e]] = 0;
    w->nunit = 0;
    for (int u = 0; u <= w->maxlayer; u++)
        if (w->unit_col[u] == 0)
            w->unit_col[u] = w->nunit++;
}

/* Outside units, chains: a sub-group's (or an optimizer chunk's) tasks, the
 * step's own checks, each folded sub-group alone. */
static void find_chains(const layout_work *w, const sg_phase_layout *l, layout_chains *ch)
{
    const sg_graph *g = w->g;
    int nn = w->nn;
    int *chain = ch->chain;
    ch->n = 0;
    for (int e = 0; e < w->ne; e++) {
        chain[e] = -1;
        if (l->order[e] < 0 || w->unit[e] >= 0)
            continue;
        /* the chain of e: the same (sub-group, tile) as an endpoint before it */
        const sg_node *n = e < nn ? &g->nodes[e] : NULL;
        for (int j = 0; n && j < e && chain[e] < 0; j++)
            if (chain[j] >= 0 && j < nn && g->nodes[j].subgroup == n->subgroup &&
                g->nodes[j].tile == n->tile)
                chain[e] = chain[j];
        if (chain[e] < 0) {
            ch->first[ch->n] = l->order[e];
            chain[e] = ch->n++;
        } else if (l->order[e] < ch->first[chain[e]]) {
            ch->first[chain[e]] = l->order[e];
        }
    }
}

/* A task's depth in its chain (edges forward in program order: folding may
 * close cycles) is its column from the chain's start; a chain's width is
 * its deepest task's, its band its lowest. */
static void chain_depths(layout_work *w, const sg_phase_layout *l, layout_chains *ch)
{
    const sg_graph *g = w->g;
    int *chain = ch->chain, *depth = w->depth;
    int np = 0;
    for (int k = 0; k < g->nedges; k++) {
        int a = w->end_of[g->edges[k].from], b = w->end_of[g->edges[k].to];
        if (a != b && chain[a] >= 0 && chain[a] == chain[b] && l->order[a] < l->order[b])
            w->pairs[np++] = (pair){a, b, l->order[a]};
    }
    qsort(w->pairs, (size_t)np, sizeof *w->pairs, cmp_pair);
    for (int k = 0; k < np; k++)
        if (depth[w->pairs[k].from] + 1 > depth[w->pairs[k].to])
            depth[w->pairs[k].to] = depth[w->pairs[k].from] + 1;
    for (int e = 0; e < w->ne; e++)
        if (chain[e] >= 0) {
            if (depth[e] + 1 > ch->w[chain[e]])
                ch->w[chain[e]] = depth[e] + 1;
            if (l->band[e] > ch->band[chain[e]])
                ch->band[chain[e]] = l->band[e];
        }
}

/* Chains packed left to right in program order, one cursor per band (the
 * GPU side and the host side both start at the first column), wrapping at
 * the units' width: a wrapped chain goes on a row under the others. */
static int pack_chains(const layout_work *w, layout_chains *ch)
{
    int nchain = ch->n, nunit = w->nunit;
    pair *byfirst = malloc((size_t)(nchain > 0 ? nchain : 1) * sizeof *byfirst);
    if (!byfirst)
        return SG_ENOMEM;
    for (int c = 0; c < nchain; c++)
        byfirst[c] = (pair){c, 0, ch->first[c]};
    qsort(byfirst, (size_t)nchain, sizeof *byfirst, cmp_pair);
    int cursor[SG_BAND_COUNT] = {0};
    for (int k = 0; k < nchain; k++) {
        int c = byfirst[k].from, b = ch->band[c];
        int width = nunit > ch->w[c] ? nunit : ch->w[c];
        if (cursor[b] > 0 && cursor[b] + ch->w[c] > width)
            cursor[b] = 0;
        ch->base[c] = cursor[b];
        cursor[b] += ch->w[c];
    }
    free(byfirst);
    return SG_OK;
}

/* The columns of the endpoints outside units: their chain's first column
 * plus their depth in it (w->depth). */
static int chain_columns(layout_work *w, const sg_phase_layout *l)
{
    size_t sz = w->sz;
    layout_chains ch = {0};
    ch.chain = malloc(sz * sizeof *ch.chain);
    ch.first = malloc(sz * sizeof *ch.first); /* per chain: its first node */
    ch.w = calloc(sz, sizeof *ch.w);
    ch.band = calloc(sz, sizeof *ch.band);
    ch.base = malloc(sz * sizeof *ch.base);
    int rc = SG_ENOMEM;
    if (ch.chain && ch.first && ch.w && ch.band && ch.base) {
        find_chains(w, l, &ch);
        chain_depths(w, l, &ch);
        rc = pack_chains(w, &ch);
    }
    if (rc == SG_OK)
        for (int e = 0; e < w->ne; e++)
            if (ch.chain[e] >= 0)
                w->depth[e] += ch.base[ch.chain[e]];
    free(ch.chain);
    free(ch.first);
    free(ch.w);
    free(ch.band);
    free(ch.base);
    return rc;
}

/* Every endpoint's column (its unit's, or its place in its chain), then its
 * row: the k-th of band b in a column; per band, as many rows as its
 * fullest column. */
static int place_cells(const layout_work *w, sg_phase_layout *l)
{
    int ne = w->ne, nn = w->nn;
    l->ncols = w->nunit;
    for (int e = 0; e < ne; e++) {
        if (l->order[e] < 0)
            continue;
        l->col[e] = w->unit[e] >= 0 ? w->unit_col[w->unit[e]] : w->depth[e];
        if (l->col[e] + 1 > l->ncols)
            l->ncols = l->col[e] + 1;
        l->nsorted++;
    }
    pair *cells = malloc((size_t)(l->nsorted > 0 ? l->nsorted : 1) * sizeof *cells);
    if (!cells)
        return SG_ENOMEM;
    int nc = 0;
    for (int e = 0; e < ne; e++)
        if (l->col[e] >= 0)
            cells[nc++] = (pair){e, l->col[e], l->band[e] * nn + l->order[e]};
    qsort(cells, (size_t)nc, sizeof *cells, cmp_cell);
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
    return SG_OK;
}

int sg_phase_layout_compute(const sg_graph *g, const sg_fold *fold, const unsigned char *where,
                            sg_phase_layout *l)
{
    layout_work w;
    int rc = work_alloc(&w, l, g, fold);
    if (rc == SG_OK) {
        mark_forward_gathers(&w);
        place_endpoints(&w, l, where);
        unit_columns(&w, l);
        rc = chain_columns(&w, l);
    }
    if (rc == SG_OK)
        rc = place_cells(&w, l);
    work_free(&w);
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
