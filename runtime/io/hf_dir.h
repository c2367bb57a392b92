/* hf_dir.h - the weights of a Hugging Face model directory.
 *
 * transformers' save_pretrained writes a directory with config.json and the
 * weights either as one model.safetensors or as shards
 * model-0000K-of-0000N.safetensors listed by model.safetensors.index.json:
 *   {"metadata": {"total_size": BYTES}, "weight_map": {"TENSOR": "SHARD", ...}}
 * sg_hf_dir_open maps every file the directory's weights are in and checks
 * the index against the shards: each shard named once is a plain file name in
 * the directory, each tensor it lists is in its shard and in no other.
 */
#ifndef SG_HF_DIR_H
#define SG_HF_DIR_H

#include "common/error.h"
#include "runtime/io/safetensors.h"

#define SG_HF_INDEX "model.safetensors.index.json"
#define SG_HF_SHARDS_MAX 4096

typedef struct sg_st_set {
    int nfiles;
    sg_st_file *files;
} sg_st_set;

/* 1 when dir holds a Hugging Face model's weights (the index or
 * model.safetensors next to config.json) and is not a stepgraph checkpoint
 * (no state.safetensors, no pointer file). */
int sg_hf_dir_is_model(const char *dir);

/* Opens the weights of the model directory dir (the index when present, else
 * model.safetensors). On error set is left empty. */
int sg_hf_dir_open(const char *dir, sg_st_set *set, sg_error *err);
void sg_st_set_close(sg_st_set *set);

/* The tensor named name in any file of the set, or NULL. */
const sg_st_tensor *sg_st_set_find(const sg_st_set *set, const char *name);

#endif /* SG_HF_DIR_H */
