/* checkpoint.h - a training checkpoint: a directory holding
 *   model.safetensors   the weights (Hugging Face names, F32 or BF16), with
 *                       __metadata__ "step"
 *   state.safetensors   Adam moments, step, loss scale, data position,
 *                       config hash (runtime/io/weights.h)
 * Each file is written to a temporary name and renamed; the weights carry
 * the same step as the state, and a resume refuses a pair that disagrees (a
 * crash between the two renames).
 */
#ifndef SG_CHECKPOINT_H
#define SG_CHECKPOINT_H

#include "runtime/io/weights.h"

/* Creates dir if needed and writes both files. */
int sg_checkpoint_save(const char *dir, const sg_weights *w, const sg_train_state *st,
                       const char *model_name, sg_dtype weights_dtype, sg_error *err);

/* path: a checkpoint directory (weights and training state: *resumed = 1)
 * or a weights file (*resumed = 0, st zeroed). w and st are allocated here. */
int sg_checkpoint_load(const char *path, const sg_model *m, sg_weights *w, sg_train_state *st,
                       int *resumed, sg_config_warnings *warn, sg_error *err);

/* FNV-1a of the settings a resumed run must share with the one that saved
 * (model, sequence length, micro batch, accumulation, precision, data, seed). */
uint64_t sg_config_resume_hash(const sg_config *cfg);

#endif /* SG_CHECKPOINT_H */
