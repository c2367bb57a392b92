/* rank_save.h - a checkpoint saved by several data-parallel ranks together.
 *
 * Every rank writes its optimizer partition (fp32 masters and moments of its
 * shard) into the save's temporary directory; the weights of every sharded
 * unit are gathered to rank 0, which writes the model file as one rank would
 * and, once every rank has written, switches `latest` to the new step. A
 * failure on any rank ends the save on all of them with the failed rank
 * named, and the temporary directory is removed: the previous checkpoint
 * stays the latest. Called with no step in flight on any rank (the host
 * communicator of runtime/dist is in use). One rank saves with
 * sg_checkpoint_save (runtime/io/checkpoint.h) instead. */
#ifndef SG_RUNTIME_TRAIN_RANK_SAVE_H
#define SG_RUNTIME_TRAIN_RANK_SAVE_H

#include "common/error.h"
#include "graph/compile.h"
#include "models/model.h"
#include "runtime/config/run_options.h"
#include "runtime/dist/dist.h"
#include "runtime/io/weights.h"

typedef struct sg_rank_save_args {
    const sg_dist *dist;
    int rank, world;
    const sg_model *model;
    const sg_step_spec *spec;   /* which units are sharded, and how */
    sg_weights *w;              /* rank 0's receives the gathered weights */
    const sg_train_state *st;
    const sg_run_options *run;  /* save, save_keep, save_shard_size */
} sg_rank_save_args;

int sg_rank_save(const sg_rank_save_args *a, sg_dtype dtype, sg_error *err);

#endif /* SG_RUNTIME_TRAIN_RANK_SAVE_H */
