/* checkpoint.h - crash-safe training checkpoints.
 *
 * A checkpoint directory DIR (run's --save) holds
 *   latest              one line: the name of the current checkpoint
 *   step-NNNNNNNN/      one checkpoint per kept step, also a Hugging Face
 *                       model directory (transformers' from_pretrained loads it):
 *     config.json         the model as transformers describes it
 *     model.safetensors   the weights (Hugging Face names, F32 or BF16), with
 *                         __metadata__ "step"; or, past shard_bytes, the shards
 *                         model-0000K-of-0000N.safetensors (each with "step")
 *                         and model.safetensors.index.json
 *     state.safetensors   Adam moments, step, loss scale, data position,
 *                         config hash (runtime/io/weights.h); a checkpoint
 *                         written by dp > 1 ranks has instead one
 *                         optim.rank<r>-of-<dp>.safetensors per rank
 *                         (runtime/io/checkpoint_parts.h), read by any dp
 * A save writes the new step directory completely (both files synced, the
 * directory synced) under a temporary name ".tmp-*" beside the current one,
 * renames it to its step's name, and then switches to it with one atomic
 * rename of `latest` (written to a temporary file, synced, renamed, the
 * directory synced). Only after the switch are older step directories
 * removed (all but keep_last) with the leftovers of interrupted saves. A
 * kill or a full disk at any moment leaves `latest` naming a complete
 * checkpoint: the new one or the previous one.
 */
#ifndef SG_CHECKPOINT_H
#define SG_CHECKPOINT_H

#include "runtime/io/checkpoint_parts.h"
#include "runtime/io/hf_dir.h"
#include "runtime/config/config.h" /* sg_config (the resume hash), SG_PATH_MAX */
#include "runtime/io/weights.h"

#define SG_CHECKPOINT_LATEST "latest"
#define SG_CHECKPOINT_STEP_PREFIX "step-"
#define SG_CHECKPOINT_TMP_PREFIX ".tmp-"

/* Creates dir if needed and saves a checkpoint of st->step, keeping the
 * keep_last newest (at least the new one; <= 0: keep all). On failure the
 * previous checkpoint stays current and complete. */
int sg_checkpoint_save(const char *dir, const sg_weights *w, const sg_train_state *st,
                       const sg_model *m, sg_dtype weights_dtype, int64_t keep_last,
                       int64_t shard_bytes, sg_error *err);

/* The same in steps, for several ranks (docs/ranks.md) sharing the
 * directory: sg_checkpoint_stage (one rank) creates dir and the empty
 * temporary directory of step's save, named with id (the same on every
 * rank), into tmp; every rank writes its files there (the weights with
 * sg_checkpoint_write_weights, the optimizer partitions with
 * runtime/io/checkpoint_parts.h); once all have, sg_checkpoint_commit (one
 * rank) syncs it, renames it to its step's name, switches `latest` to it and
 * prunes, as sg_checkpoint_save does. On a failure before the commit,
 * sg_checkpoint_abandon removes the temporary directory. */
int sg_checkpoint_stage(const char *dir, int64_t step, long id, int create, char *tmp, size_t size,
                        sg_error *err);
int sg_checkpoint_commit(const char *dir, int64_t step, long id, int64_t keep_last, sg_error *err);
void sg_checkpoint_abandon(const char *tmp);

/* Whether a run may save into dir: yes when dir holds no current
 * checkpoint (no `latest` naming an existing step directory), or when the run
 * resumes (resumed != 0) from that very checkpoint (load: dir itself, or its
 * current step directory). Otherwise an error naming dir and its checkpoint:
 * the run's saves would remove the other run's checkpoints (those of later
 * steps at its first save, the rest by keep_last). */
int sg_checkpoint_check_save(const char *dir, const char *load, int resumed, sg_error *err);

/* The bytes of the files in a saved step directory (dir/step-NNNNNNNN), -1
 * when it cannot be read: what a save wrote. */
int64_t sg_checkpoint_step_bytes(const char *dir, int64_t step);

/* config.json and the weights (model.safetensors or shards, with "step")
 * into dir. */
int sg_checkpoint_write_weights(const char *dir, const sg_weights *w, int64_t step,
                                const sg_model *m, sg_dtype weights_dtype, int64_t shard_bytes,
                                sg_error *err);

/* Reading a checkpoint a tensor at a time, so that a load holds one tensor
 * and not the model. path: a checkpoint directory (the checkpoint `latest`
 * names, or the files in path itself for a step directory or a directory
 * saved before `latest` existed: weights and training state, *resumed = 1),
 * a Hugging Face model directory or its config.json, or a weights file
 * (*resumed = 0: st has step 0, the scaler's defaults and no moments).
 * sg_checkpoint_open checks everything but the values (files, names,
 * shapes, dtypes, metadata; a pair of files from different steps is
 * refused, naming both steps) and fills shape (names, shapes, units: no
 * values) and st (metadata, the moments' names: no values); the files stay
 * open. sg_checkpoint_reader_fill is an sg_tensor_source's fill
 * (weights.h): tensor i of a set, converted to fp32 and checked finite
 * (second moments >= 0); SG_TENSOR_ABSENT for the moments of a run that
 * starts from weights; an error leaves its message in r->err. In a
 * checkpoint of several ranks, the weights and moments come from the
 * optimizer partitions (the fp32 masters), a tensor's range at a time; its
 * weights file is checked but not read. */
typedef struct sg_checkpoint_reader {
    sg_st_set weights; /* the weights' files, open */
    char wpath[SG_PATH_MAX + 128];
    sg_st_file state; /* state.safetensors, open when has_state */
    int has_state;
    char spath[SG_PATH_MAX + 128];
    const sg_weights *shape;
    sg_parts_reader parts; /* several ranks' partitions, open when dp > 0 */
    int64_t *unit_offset;  /* partitions: where each tensor starts in its unit */
    sg_error err;          /* a fill's failure */
} sg_checkpoint_reader;

int sg_checkpoint_open(const char *path, const sg_model *m, sg_weights *shape, sg_train_state *st,
                       int *resumed, sg_config_warnings *warn, sg_checkpoint_reader *r,
                       sg_error *err);
int sg_checkpoint_reader_fill(void *reader, int set, int i, float *out);
void sg_checkpoint_reader_close(sg_checkpoint_reader *r);

/* FNV-1a of the settings a resumed run must share with the one that saved
 * (model, sequence length, global micro batch = micro batch x dp_size,
 * accumulation, precision, data, seed). */
uint64_t sg_config_resume_hash(const sg_config *cfg);

#endif /* SG_CHECKPOINT_H */
