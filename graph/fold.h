/* fold.h - repeated units of a step graph folded into one box each.
 *
 * An 8B model's step has 32 decoder layers with the same tasks and the same
 * edges, and a SuperOffload step a dozen optimizer sub-groups with the same
 * chain: drawn in full they make a picture no one can read. sg_fold_compute
 * gives each unit (a node's `layer`) and each optimizer sub-group (nodes
 * outside units, by `subgroup`) a shape: the list of its nodes in program
 * order with kind, device, micro-step, name (unit, sub-group and tile numbers
 * blanked) and edge counts; each chunk of a tiled CPU sub-group's optimizer
 * chain is a member of its own. The first unit (or sub-group) of each shape is
 * drawn in full; the others of that shape fold into one group ("layers 2-31,
 * same shape as layer1"). Every node is either drawn or in exactly one group.
 */
#ifndef SG_FOLD_H
#define SG_FOLD_H

#include <stdint.h>

#include "graph/ir.h"

#define SG_FOLD_CHUNK 2
#define SG_FOLD_CHUNK_KEY 1048576 /* a chunk's key: sub-group x this + tile */

typedef struct sg_fold_group {
    int is_subgroup;     /* 0 units, 1 optimizer sub-groups, SG_FOLD_CHUNK chunks of
                                    CPU sub-groups (optimizer tiles) */
    int64_t like;        /* the member drawn in full (a unit, a sub-group, or a
                                    chunk: sub-group x SG_FOLD_CHUNK_KEY + tile) */
    int64_t first, last; /* members, lowest and highest */
    int count;
    int nodes;       /* nodes folded into the group */
    char label[224]; /* "units layer1-layer31 (31), same shape as layer0: 62 tasks" */
} sg_fold_group;

typedef struct sg_fold {
    int nnodes;
    int *group_of; /* per node: -1 drawn, else its group */
    int ngroups;
    sg_fold_group *groups;
} sg_fold;

/* Computes the folding of g (finalized). SG_ENOMEM on allocation failure. */
int sg_fold_compute(const sg_graph *g, sg_fold *f);
void sg_fold_free(sg_fold *f);

#endif /* SG_FOLD_H */
