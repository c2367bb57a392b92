/* phase_layout.h - where a task runs, and where it sits in a picture of the
 * step.
 *
 * Pictures of a step (DOT, SVG, the HTML page) colour a task by the place it
 * runs: a GPU worker, a CPU worker (the optimizer's NUMA-bound cores), the
 * host-to-device or device-to-host link, or the network (collectives). The
 * planned place comes from the node (its device, its kind's placement); a
 * trace may say where it really ran (runtime/cli/graph_view.c).
 *
 * The layout follows the phases of a step, as a grid of columns (Graphviz
 * ranks, left to right) and bands (rows, top to bottom):
 *   columns: one per unit drawn (embedding, layers or a folded group of
 *            layers, head) in unit order, so the forward runs left to right
 *            and the backward, drawn under it in the same columns, comes back
 *            right to left; tasks outside units (the optimizer and the step's
 *            checks) take the column of their depth in their own chain
 *            (d2h, cast, adam, validate, cast, h2d), so each sub-group's chain
 *            reads left to right in its band;
 *   bands:   gathers for the forward, forward, gathers for the backward,
 *            backward (recompute, gradient sums), reductions (collectives),
 *            then the optimizer: its GPU side, the link lanes (d2h, h2d)
 *            between host and GPU, and the host side (CPU optimizer).
 * Pure C, no Graphviz: graph/export.c writes the grid as DOT.
 */
#ifndef SG_PHASE_LAYOUT_H
#define SG_PHASE_LAYOUT_H

#include "graph/fold.h"
#include "graph/ir.h"

/* Where a task runs. */
typedef enum sg_where {
    SG_WHERE_GPU, /* a GPU worker */
    SG_WHERE_CPU, /* a CPU worker (optimizer, NUMA-bound) */
    SG_WHERE_H2D, /* the host-to-device link */
    SG_WHERE_D2H, /* the device-to-host link */
    SG_WHERE_NET, /* collectives between GPUs (NVLink / network) */
    SG_WHERE_COUNT
} sg_where;

/* The planned place of a node: links by direction; a GPU-class node whose
 * kind StarPU places on CPU workers (host-side bookkeeping), unless pinned,
 * on the CPU; otherwise its device. */
sg_where sg_where_planned(const sg_node *n);
/* The place a trace lane names ("CPU 3", "CUDA 0", "link d2h"), or -1 when
 * the name says nothing known. */
int sg_where_of_lane(const char *lane);
const char *sg_where_name(sg_where w);  /* "gpu", "cpu", "h2d", "d2h", "net" */
const char *sg_where_label(sg_where w); /* "GPU worker", ... (legends) */
const char *sg_where_color(sg_where w); /* fill colour, "#a1d99b" */

/* The bands, top to bottom. */
typedef enum sg_band {
    SG_BAND_GATHER_FWD,
    SG_BAND_FORWARD,
    SG_BAND_GATHER_BWD,
    SG_BAND_BACKWARD,
    SG_BAND_REDUCE,
    SG_BAND_OPT_GPU,
    SG_BAND_LINK,
    SG_BAND_OPT_CPU,
    SG_BAND_COUNT
} sg_band;

/* The grid of what is drawn: endpoint e is node e (e < nnodes, drawn as
 * itself) or fold group e - nnodes. Endpoints not drawn (folded nodes) have
 * col -1. `order` sorts the endpoints of a column top to bottom (band, then
 * program order). Graphviz keeps a row straight when its endpoints are
 * chained left to right (graph/export.c). */
typedef struct sg_phase_layout {
    int nends; /* nnodes + ngroups */
    int *col, *band, *order;
    int *row; /* grid row: the k-th endpoint of band b in its column is in
                                    the same row in every column (rows by band, then k) */
    int ncols, nrows;
    int *sorted; /* drawn endpoints by (col, band, first node) */
    int nsorted;
} sg_phase_layout;

/* Lays out g (folded by fold, or NULL) with each node's place in where
 * (NULL: planned). SG_ENOMEM on allocation failure. */
int sg_phase_layout_compute(const sg_graph *g, const sg_fold *fold, const unsigned char *where,
                            sg_phase_layout *l);
void sg_phase_layout_free(sg_phase_layout *l);

/* 1 if endpoint a comes before b in the grid (column, then band and order):
 * an edge a -> b then runs left to right or top to bottom. */
int sg_phase_layout_before(const sg_phase_layout *l, int a, int b);

#endif /* SG_PHASE_LAYOUT_H */
