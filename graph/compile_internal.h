/* compile_internal.h - what the step compiler's files share (graph/compile.c,
 * compile_buffers.c, compile_emit.c, compile_moe.c, compile_optimizer.c):
 * its state (`compiler`), the buffers of a micro-step, the access list a
 * node is built from, and the steps each file provides. Not a public
 * header: graph/compile.h is the compiler's interface.
 */
#ifndef SG_COMPILE_INTERNAL_H
#define SG_COMPILE_INTERNAL_H

#include "graph/compile.h"

#include <stdint.h>

#define MAX_ACCESS_FIXED 16

/* A piece: the part of unit u's shard that falls in sub-group sg. */
typedef struct piece {
    int unit, subgroup;
    int64_t elems;
    int64_t unit_offset;     /* first element within the unit's shard */
    int64_t subgroup_offset; /* first element within the sub-group */
    int pbuf, gbuf;          /* parameter and gradient piece buffers */
} piece;

/* One chunk of a sub-group's optimizer chain and its host buffers (-1: none). */
typedef struct opt_chunk {
    int subgroup, tile;    /* tile: -1 for an untiled sub-group */
    int64_t offset, elems; /* elements [offset, offset + elems) of the sub-group */
    int master, moments, ghost, ghost32, phost;
} opt_chunk;

typedef struct compiler {
    const sg_model *m;
    const sg_step_spec *s;
    sg_graph *g;
    sg_error *err;
    int units;      /* L + 2 */
    int head;       /* L + 1 */
    int64_t tokens; /* micro_batch * seq_len per rank */
    sg_dtype cd;    /* compute dtype */
    int mixed;      /* compute dtype != f32: fp32 master + casts */
    sg_subgroup_layout lay;
    piece *pieces;
    int npieces;
    int *unit_first_piece; /* units + 1: pieces of unit u are [first[u], first[u+1]) */
    int *unit_gathered;    /* stage 3: 1 if gathered (not persistent) */
    int *unit_kept;        /* stage 3: gathered params kept until backward */
    int *unit_full;        /* stage 1/2: full parameter buffer */
    int *unit_gbuf;        /* gathered buffer (stage 3) */
    int *unit_shard;       /* parameter offload: the device copy of a gathered unit's
                                  pieces, or -1 */
    int *unit_grad;        /* full gradient buffer per unit */
    int *sg_lowest_unit;   /* lowest unit a sub-group touches */
    int *sg_first_piece;   /* nsubgroups + 1 CSR over `sg_piece_idx` */
    int *sg_piece_idx;
    int grad_norm, overflow, loss_scale, loss_scaler_state;
    int comm_order;              /* dp_size > 1: every collective node's RW token, else -1 */
    int *loss_bufs, nloss;       /* every micro-step's (and tile's) loss buffer */
    int *sg_master, *sg_moments; /* per sub-group (an untiled one's; -1 when tiled) */
    int *sg_pdev;                /* parameters offloaded: a mixed-precision GPU sub-group's cast
                                  update on the device, else -1 */
    /* the optimizer chain of every sub-group in chunks (optimizer tiles):
     * chunks of sub-group i are [sg_first_chunk[i], sg_first_chunk[i + 1]);
     * an untiled sub-group has one chunk (tile -1) over all its elements,
     * whose buffers are the sub-group's (sg_master[i]...) */
    int *sg_first_chunk;
    opt_chunk *chunks;
    int nchunks;
    sg_cast_placement *cast_place; /* per sub-group: CPU, GPU or SCHEDULER (auto resolved) */
    /* batch tiles (spec->batch_tile): ntiles per micro-step of tile_rows
     * sequences each (the last may be shorter); ntiles = 1 when untiled */
    int ntiles;
    int64_t tile_rows;
    int *grad_part;      /* units * ntiles: fp32 weight-gradient partial of (unit, tile) */
    int *unit_norm_part; /* per unit: its pieces' partials of the gradient norm, or -1 */
    int *window;         /* grad_accum * ntiles: micro-step k's window token (tile t),
                                  written by its embedding backward, read by k + W's forward;
                                  -1 where none (sg_compile_declare_window) */
} compiler;

typedef struct access_list {
    sg_access *a;
    int n, cap;
} access_list;

/* Buffers of one micro-step. Per unit and batch tile: index u * ntiles + t
 * (t = 0 when untiled). */
typedef struct micro_bufs {
    int *act;   /* act[u]: output of unit u (u = 0..L), act[head] = loss */
    int *inner; /* saved activations per unit, or -1 */
    int *dact;  /* gradient w.r.t. act[u] */
    int tokens;
    int moe_stats;           /* MoE: the router statistics of the micro-step, else -1 */
    int *moe_act, *moe_grad; /* MoE: [u * groups + g] each group's buffers, or NULL */
} micro_bufs;

#define TI(c, u, t) ((u) * (c)->ntiles + (t))

/* ---- the steps, by file ---------------------------------------------------- */

/* compile_buffers.c: the buffers, declared before any node */
int sg_compile_resolve_cast_placement(compiler *c);
int sg_compile_declare_buffers(compiler *c);
int sg_compile_declare_grad_parts(compiler *c);
int sg_compile_declare_window(compiler *c);
int sg_compile_declare_micro(compiler *c, int mb, micro_bufs *b);

/* compile_moe.c: a MoE model's buffers and expert tasks */
int sg_compile_declare_moe_stats(compiler *c, int mb, micro_bufs *b);
int sg_compile_emit_moe_forward(compiler *c, access_list *l, micro_bufs *b, int u, int mb);
int sg_compile_emit_moe_backward(compiler *c, access_list *l, micro_bufs *b, int u, int mb);
int sg_compile_emit_moe_recompute(compiler *c, access_list *l, micro_bufs *b, int u, int mb);
int sg_compile_push_moe_grads(compiler *c, access_list *l, const micro_bufs *b, int u);
int sg_compile_push_moe_stats(compiler *c, access_list *l, const micro_bufs *b, int u, int fwd);

/* compile_emit.c: forward, backward, all-gathers */
int sg_compile_emit_forward(compiler *c, access_list *l, micro_bufs *b, int mb);
int sg_compile_emit_backward(compiler *c, access_list *l, micro_bufs *b, int mb);
int sg_compile_emit_allgather(compiler *c, access_list *l, int u, int micro, const char *why);
int sg_compile_tile_node(compiler *c, access_list *l, sg_op_kind kind, int u, int mb, int t,
                         double flops, const char *name);

/* compile_optimizer.c: the optimizer chains and the step's checks */
int sg_compile_emit_optimizer(compiler *c, access_list *l);
int sg_compile_emit_ready_subgroups(compiler *c, access_list *l, int u);

#include "graph/compile_helpers.h"

#endif
