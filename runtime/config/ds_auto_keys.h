/* ds_auto_keys.h - the DeepSpeed config keys the Hugging Face Trainer fills
 * when they say "auto" (ds_auto.h fills them). The parser (ds_config.c)
 * marks them by these numbers; kept apart from ds_auto.h, which works on a
 * parsed sg_ds_config, so that the parser and the filler do not include
 * each other.
 */
#ifndef SG_DS_AUTO_KEYS_H
#define SG_DS_AUTO_KEYS_H

/* The keys the Trainer fills, one bit each in sg_ds_config.auto_pending and
 * auto_given, in the order the Trainer fills them. */
typedef enum sg_ds_auto_key {
    SG_AUTO_MICRO_BATCH,     /* train_micro_batch_size_per_gpu */
    SG_AUTO_ACCUM,           /* gradient_accumulation_steps */
    SG_AUTO_TRAIN_BATCH,     /* train_batch_size */
    SG_AUTO_CLIPPING,        /* gradient_clipping */
    SG_AUTO_LR,              /* optimizer.params.lr */
    SG_AUTO_BETAS,           /* optimizer.params.betas */
    SG_AUTO_EPS,             /* optimizer.params.eps */
    SG_AUTO_WEIGHT_DECAY,    /* optimizer.params.weight_decay */
    SG_AUTO_WARMUP_MIN_LR,   /* scheduler.params.warmup_min_lr */
    SG_AUTO_WARMUP_MAX_LR,   /* scheduler.params.warmup_max_lr */
    SG_AUTO_FP16,            /* fp16.enabled */
    SG_AUTO_BF16,            /* bf16.enabled */
    SG_AUTO_REDUCE_BUCKET,   /* zero_optimization.reduce_bucket_size */
    SG_AUTO_PREFETCH_BUCKET, /* zero_optimization.stage3_prefetch_bucket_size */
    SG_AUTO_PERSISTENCE,     /* zero_optimization.stage3_param_persistence_threshold */
    SG_AUTO_TOTAL_STEPS,     /* scheduler.params.total_num_steps */
    SG_AUTO_WARMUP_STEPS,    /* scheduler.params.warmup_num_steps */
    SG_AUTO_NKEYS
} sg_ds_auto_key;

#define SG_AUTO_BIT(k) (1u << (k))

/* The key of a DeepSpeed config path ("optimizer.params.lr", without a run
 * config's "deepspeed_config." prefix), or -1 when the Trainer does not fill
 * it. */
int sg_ds_auto_key_of(const char *path);
const char *sg_ds_auto_key_path(int key);

#endif /* SG_DS_AUTO_KEYS_H */
