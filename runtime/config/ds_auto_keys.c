/* ds_auto_keys.c - the keys the Trainer fills, by number and by path
 * (ds_auto_keys.h). */
#include "runtime/config/ds_auto_keys.h"

#include <string.h>

static const char *const key_paths[SG_AUTO_NKEYS] = {
    [SG_AUTO_MICRO_BATCH] = "train_micro_batch_size_per_gpu",
    [SG_AUTO_ACCUM] = "gradient_accumulation_steps",
    [SG_AUTO_TRAIN_BATCH] = "train_batch_size",
    [SG_AUTO_CLIPPING] = "gradient_clipping",
    [SG_AUTO_LR] = "optimizer.params.lr",
    [SG_AUTO_BETAS] = "optimizer.params.betas",
    [SG_AUTO_EPS] = "optimizer.params.eps",
    [SG_AUTO_WEIGHT_DECAY] = "optimizer.params.weight_decay",
    [SG_AUTO_WARMUP_MIN_LR] = "scheduler.params.warmup_min_lr",
    [SG_AUTO_WARMUP_MAX_LR] = "scheduler.params.warmup_max_lr",
    [SG_AUTO_FP16] = "fp16.enabled",
    [SG_AUTO_BF16] = "bf16.enabled",
    [SG_AUTO_REDUCE_BUCKET] = "zero_optimization.reduce_bucket_size",
    [SG_AUTO_PREFETCH_BUCKET] = "zero_optimization.stage3_prefetch_bucket_size",
    [SG_AUTO_PERSISTENCE] = "zero_optimization.stage3_param_persistence_threshold",
    [SG_AUTO_TOTAL_STEPS] = "scheduler.params.total_num_steps",
    [SG_AUTO_WARMUP_STEPS] = "scheduler.params.warmup_num_steps",
};

int sg_ds_auto_key_of(const char *path)
{
    for (int k = 0; k < SG_AUTO_NKEYS; k++)
        if (strcmp(path, key_paths[k]) == 0)
            return k;
    return -1;
}

const char *sg_ds_auto_key_path(int key)
{
    return key >= 0 && key < SG_AUTO_NKEYS ? key_paths[key] : "";
}
