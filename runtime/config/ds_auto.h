/* ds_auto.h - "auto" in a DeepSpeed config, filled as the Hugging Face
 * Trainer fills it.
 *
 * Configs written for the Trainer (transformers' and Accelerate's ZeRO
 * files, LLaMA-Factory, axolotl...) put "auto" where the Trainer writes a
 * value from its TrainingArguments or from the model before DeepSpeed reads
 * the config. The parser (ds_config.c) marks those keys pending, leaving the
 * default in the field; sg_config_finalize() fills them here from the run
 * options (named after TrainingArguments: run_options.h sg_trainer_args) and
 * the model, with the Trainer's rules (transformers/integrations/
 * deepspeed.py, HfTrainerDeepSpeedConfig.trainer_config_process and
 * trainer_config_finalize). docs/config-keys.md lists the keys and sources.
 */
#ifndef SG_DS_AUTO_H
#define SG_DS_AUTO_H

#include <stdint.h>

#include "runtime/config/ds_config.h"
#include "runtime/config/run_options.h"

struct sg_json_ctx;

/* The keys the Trainer fills, one bit each in sg_ds_config.auto_pending and
 * auto_given, in the order the Trainer fills them. */
typedef enum sg_ds_auto_key {
    SG_AUTO_MICRO_BATCH,      /* train_micro_batch_size_per_gpu */
    SG_AUTO_ACCUM,            /* gradient_accumulation_steps */
    SG_AUTO_TRAIN_BATCH,      /* train_batch_size */
    SG_AUTO_CLIPPING,         /* gradient_clipping */
    SG_AUTO_LR,               /* optimizer.params.lr */
    SG_AUTO_BETAS,            /* optimizer.params.betas */
    SG_AUTO_EPS,              /* optimizer.params.eps */
    SG_AUTO_WEIGHT_DECAY,     /* optimizer.params.weight_decay */
    SG_AUTO_WARMUP_MIN_LR,    /* scheduler.params.warmup_min_lr */
    SG_AUTO_WARMUP_MAX_LR,    /* scheduler.params.warmup_max_lr */
    SG_AUTO_FP16,             /* fp16.enabled */
    SG_AUTO_BF16,             /* bf16.enabled */
    SG_AUTO_REDUCE_BUCKET,    /* zero_optimization.reduce_bucket_size */
    SG_AUTO_PREFETCH_BUCKET,  /* zero_optimization.stage3_prefetch_bucket_size */
    SG_AUTO_PERSISTENCE,      /* zero_optimization.stage3_param_persistence_threshold */
    SG_AUTO_TOTAL_STEPS,      /* scheduler.params.total_num_steps */
    SG_AUTO_WARMUP_STEPS,     /* scheduler.params.warmup_num_steps */
    SG_AUTO_NKEYS
} sg_ds_auto_key;

#define SG_AUTO_BIT(k) (1u << (k))

/* The key of a DeepSpeed config path ("optimizer.params.lr", without a run
 * config's "deepspeed_config." prefix), or -1 when the Trainer does not fill
 * it. */
int sg_ds_auto_key_of(const char *path);
const char *sg_ds_auto_key_path(int key);

/* One filled value, as `stepgraph config` prints it. */
typedef struct sg_ds_auto_entry {
    char key[64];             /* DeepSpeed config path */
    char value[48];           /* as JSON would write it */
    char source[224];         /* where it came from: run option, config, default, model */
} sg_ds_auto_entry;

typedef struct sg_ds_autos {
    int n;
    sg_ds_auto_entry fill[SG_AUTO_NKEYS];
} sg_ds_autos;

/* Fills every pending key of ds from run (and, for the hidden-size keys, the
 * model run->model names), records each value and its source in out, and
 * checks the Trainer's rule that a run option given and a value the config
 * gives for the same key agree. A key that stays unresolvable is an error
 * naming it and the run option that sets it. Run options that fill nothing
 * and match nothing are warned about through c. */
int sg_ds_auto_fill(sg_ds_config *ds, const sg_run_options *run, const struct sg_json_ctx *c,
                    sg_ds_autos *out);

#endif /* SG_DS_AUTO_H */
