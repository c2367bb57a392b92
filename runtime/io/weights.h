/* weights.h - a model's parameters in fp32, their initialisation, and the
 * weights and training-state files (safetensors).
 *
 * Tensors are those of models/model.h (sg_model_unit_tensors), unit by unit
 * in packing order, with their Hugging Face names and shapes, so a weights
 * file is what transformers' save_pretrained writes for the same
 * architecture (tied models have no lm_head.weight) and loads with
 * from_pretrained.
 *
 * Checkpoint = two files written next to each other, each atomically:
 *   model.safetensors   the weights (F32 or BF16), metadata "format": "pt"
 *                       plus what the caller adds (e.g. "step")
 *   state.safetensors   Adam moments "<name>.exp_avg", "<name>.exp_avg_sq"
 *                       (F32, the parameter's shape) and the metadata needed
 *                       to resume exactly: step, the fp16 loss scaler's
 *                       state (scale and counters), data position, RNG
 *                       state, config hash, model name.
 * A failed save leaves the previous file untouched. The trainer should put
 * the same "step" in both and compare them on resume (sg_st_read_meta): the
 * two renames are not one atomic operation.
 */
#ifndef SG_WEIGHTS_H
#define SG_WEIGHTS_H

#include <stdint.h>

#include "common/error.h"
#include "models/model.h"
#include "common/warnings.h"        /* sg_config_warnings */
#include "runtime/io/data_loader.h" /* sg_data_pos */
#include "runtime/io/safetensors.h"

/* Hugging Face Llama's initializer_range. */
#define SG_INIT_STD 0.02

/* Where the values of a set that is not in memory come from, tensor by
 * tensor: fill(ctx, set, i, out) writes tensor i's numel floats of set
 * SG_SET_WEIGHTS, SG_SET_EXP_AVG or SG_SET_EXP_AVG_SQ into out, non-zero on
 * failure. A save reads them back from StarPU's buffers (runtime/exec/exec.h
 * sg_state_reader); a load takes them from a checkpoint's files or the
 * initialisation (runtime/train/state_source.h). */
enum { SG_SET_WEIGHTS, SG_SET_EXP_AVG, SG_SET_EXP_AVG_SQ };
/* What a fill returns for a set it does not have (the moments of a run that
 * starts from weights): the state keeps its zeros. */
#define SG_TENSOR_ABSENT 1
typedef struct sg_tensor_source {
    int (*fill)(void *ctx, int set, int i, float *out);
    void *ctx;
} sg_tensor_source;

typedef struct sg_weights {
    int ntensors;
    sg_tensor_info *info; /* (ntensors) names and shapes, units in order */
    int *unit;            /* (ntensors) graph unit of each tensor */
    float **data;         /* data[i]: info[i].numel floats, 64-byte aligned;
                                 NULL (sg_weights_describe): the values come
                                 from source when saved */
    float *block;         /* one allocation holding every tensor */
    int64_t numel;        /* total floats */
    const sg_tensor_source *source;
} sg_weights;

/* Allocates zeroed fp32 tensors for every parameter of the model. */
int sg_weights_alloc(sg_weights *w, const sg_model *m, sg_error *err);
void sg_weights_free(sg_weights *w);
/* Names, shapes and units without values (data NULL), for a save whose
 * values come from source (set by the caller). */
int sg_weights_describe(sg_weights *w, const sg_model *m, sg_error *err);

/* Index of the tensor named name, or -1. */
int sg_weights_find(const sg_weights *w, const char *name);

/* Where each tensor starts in its unit (a unit's parameters are its tensors
 * concatenated, which come side by side): offset[i] for i < w->ntensors. */
void sg_weights_unit_offsets(const sg_weights *w, int64_t *offset);

/* Deterministic initialisation, as Hugging Face Llama's _init_weights:
 * normal(0, std) for linear, embedding, router, expert and sink tensors,
 * ones for norm weights ("...norm.weight"), zeros for biases. Element k of
 * tensor NAME is a function of (seed, NAME, k) only, so the result does not
 * depend on the order tensors are initialised in or on threads. */
void sg_weights_init(sg_weights *w, uint64_t seed, double std);

/* Writes every tensor as dtype (F32, BF16 or F16; fp32 values are rounded to
 * nearest even). meta: extra __metadata__ pairs; "format": "pt" is added
 * unless given. Atomic. */
int sg_weights_save(const sg_weights *w, const char *path, sg_dtype dtype, const sg_st_meta *meta,
                    int nmeta, sg_error *err);

/* Loads a weights file written for model m into out (allocated here; freed
 * with sg_weights_free, also left empty on error). Every tensor of the
 * model must be present with its shape, F32/BF16/F16 (converted to fp32),
 * finite; a tensor the model does not have is an error listing them, except
 * lm_head.weight in a model with tied embeddings, which is ignored with a
 * warning in warn (may be NULL). */
int sg_weights_load(const char *path, const sg_model *m, sg_weights *out, sg_config_warnings *warn,
                    sg_error *err);

/* Writes the weights into directory dir as transformers' save_pretrained
 * lays them out: one model.safetensors when they take at most
 * max_shard_bytes (or max_shard_bytes <= 0), else shards
 * model-0000K-of-0000N.safetensors of at most max_shard_bytes each (a larger
 * tensor alone in its shard) and model.safetensors.index.json. Every file is
 * written atomically; meta goes into each file. */
int sg_weights_save_hf(const sg_weights *w, const char *dir, sg_dtype dtype, const sg_st_meta *meta,
                       int nmeta, int64_t max_shard_bytes, sg_error *err);

/* The same from the files of set (one weights file, or the shards of a
 * Hugging Face directory: runtime/io/hf_dir.h); path names them in messages. */
struct sg_st_set;
int sg_weights_load_set(const struct sg_st_set *set, const char *path, const sg_model *m,
                        sg_weights *out, sg_config_warnings *warn, sg_error *err);

/* The two halves of sg_weights_load_set, for a load that reads a tensor at
 * a time: every check but the values' (names, shapes, missing and extra
 * tensors), out getting the model's names and shapes without values
 * (sg_weights_describe); then tensor info's values (fp32, finite) into out. */
int sg_weights_check_set(const struct sg_st_set *set, const char *path, const sg_model *m,
                         sg_weights *out, sg_config_warnings *warn, sg_error *err);
int sg_weights_read_tensor(const struct sg_st_set *set, const char *path,
                           const sg_tensor_info *info, float *out, sg_error *err);
/* ------------------------------------------------------------------------ */
/* Training state                                                            */

#define SG_TRAIN_STATE_VERSION 1

typedef struct sg_train_state {
    int ntensors;
    sg_tensor_info *info; /* same order as sg_weights */
    float **exp_avg;      /* Adam first moment, info[i].numel floats */
    float **exp_avg_sq;   /* Adam second moment */
    float *block;
    int64_t step;      /* training steps done (skipped fp16 steps included) */
    int64_t adam_step; /* Adam updates applied (bias correction, lr schedule) */
    double loss_scale; /* fp16 dynamic loss scale (1 without) */
    /* the rest of the fp16 loss scaler's state (sg_loss_scaler_state in
     * codelets/cpu/loss_scale.h), so a resumed run skips and rescales as the
     * uninterrupted one does */
    int64_t scaler_cur_iter;           /* scaler updates so far, <= step */
    int64_t scaler_last_overflow_iter; /* -1 before the first overflow, < cur_iter */
    int64_t scaler_cur_hysteresis;     /* overflows still tolerated, >= 1 */
    int has_scaler_counters;           /* load: the file has the three (older files: 0,
                                 and the trainer keeps the config's defaults) */
    sg_data_pos data;                  /* position of the next batch */
    uint64_t rng[4];                   /* the trainer's RNG state (dropout, ...) */
    uint64_t config_hash;              /* of the run's config, to refuse another */
    char optimizer[16];                /* the update rule the moments belong to: "adam",
                                 "lion", "adagrad" (sg_optim_algo_name); load:
                                 "" when the file does not say (older files:
                                 Adam's) */
    int ranks;                         /* load: how many ranks wrote it (1, or the
                                 partitions' count: checkpoint_parts.h) */
    const sg_tensor_source *source;    /* exp_avg NULL: the moments' values when saved */
} sg_train_state;

/* Zeroed moments for every parameter of m; step 0, loss_scale 1, scaler
 * counters 0, -1, 1, ranks 1. */
int sg_train_state_alloc(sg_train_state *s, const sg_model *m, sg_error *err);
void sg_train_state_free(sg_train_state *s);
/* The moments (and their names and shapes) alone, the rest of s kept (step,
 * scaler, data position...), as sg_train_state_alloc and the whole-file
 * load allocate them; the trainer itself holds no moments (StarPU's buffers
 * do). */
int sg_train_state_alloc_moments(sg_train_state *s, const sg_model *m, sg_error *err);
void sg_train_state_free_moments(sg_train_state *s);
/* The moments' names and shapes without values (exp_avg NULL), for a save
 * whose values come from source; freed with sg_train_state_free_moments. */
int sg_train_state_describe_moments(sg_train_state *s, const sg_model *m, sg_error *err);
/* A fresh state without values: as sg_train_state_alloc (step 0, the
 * scaler's defaults) with the moments' names and shapes only. */
int sg_train_state_describe(sg_train_state *s, const sg_model *m, sg_error *err);

/* Atomic. model_name goes into the metadata and is checked on load. */
int sg_train_state_save(const sg_train_state *s, const char *path, const char *model_name,
                        sg_error *err);

/* The same metadata with the caller's tensors t[0..n) (instead of the full
 * moments) and extra metadata pairs: a rank's optimizer partition
 * (runtime/io/checkpoint_parts.h). Atomic. */
int sg_train_state_write(const sg_train_state *s, const char *path, const char *model_name,
                         const sg_st_entry *t, int n, const sg_st_meta *extra, int nextra,
                         sg_error *err);

/* Parses and checks the metadata of an open state file f (as
 * sg_train_state_load does) into s's scalar fields (step, scaler, data
 * position, RNG, config hash); the moments are left alone. */
int sg_train_state_read_meta(const char *path, const sg_st_file *f, const sg_model *m,
                             sg_train_state *s, sg_error *err);

/* Loads and checks a state file against model m: every moment present as
 * F32 with its parameter's shape (an error names the tensor), no unknown
 * tensor, finite values, exp_avg_sq >= 0, every metadata field present and
 * well-formed (an error names the key and the value), model name equal to
 * m->name. Integers are plain decimal digits without leading zeros, at most
 * 2^62 (last_overflow_iter may be -1); the loss scale a finite decimal > 0;
 * hexadecimal words exactly 16 hex digits. adam_step and the three scaler
 * counters are optional (files written before them), the counters all or
 * none. The caller compares config_hash and step with its own. */
int sg_train_state_load(const char *path, const sg_model *m, sg_train_state *out, sg_error *err);
/* Its two halves, for a load that reads a tensor at a time: every check but
 * the values' (out gets the metadata and the moments' names and shapes,
 * no values; f stays open, closed with sg_st_close); then one moment's
 * values (exp_avg, or exp_avg_sq when squares) of tensor info. */
int sg_train_state_check(const char *path, const sg_model *m, sg_train_state *out, sg_st_file *f,
                         sg_error *err);
int sg_train_state_read_moment(const sg_st_file *f, const char *path, const sg_tensor_info *info,
                               int squares, float *out, sg_error *err);

#endif /* SG_WEIGHTS_H */
