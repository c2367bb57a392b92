/* rank_save.h - a checkpoint saved by several data-parallel ranks together.
 *
 * Every rank writes its optimizer partition (fp32 masters and moments of its
 * shard, read back from its buffers a unit at a time) into the save's
 * temporary directory; rank 0 writes the model file as one rank would, a
 * tensor at a time, the weights of each sharded unit gathered from every
 * rank's buffers when its first tensor is written; once every rank has
 * written, rank 0 switches `latest` to the new step. A rank holds one unit's
 * shard at a time (rank 0 a whole unit), not the model. A
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
#include "runtime/exec/exec.h"
#include "runtime/io/weights.h"

typedef struct sg_rank_save_args {
    const sg_dist *dist;
    int rank, world;
    const sg_model *model;
    const sg_step_spec *spec;  /* which units are sharded, and how */
    sg_weights *w;             /* names, shapes and units, no values */
    const sg_train_state *st;  /* the metadata (step, scaler, data position, ...) */
    sg_state_reader *state;    /* this rank's buffers, read back */
    const sg_run_options *run; /* save, save_keep, save_shard_size */
} sg_rank_save_args;

int sg_rank_save(const sg_rank_save_args *a, sg_dtype dtype, sg_error *err);

#endif /* SG_RUNTIME_TRAIN_RANK_SAVE_H */
