/* ds_config.h - the DeepSpeed JSON config stepgraph reads.
 *
 * Users bring the DeepSpeed config they already have, unchanged. Parsing never
 * exits: errors name the JSON path, the value and what was expected; unknown
 * keys are reported as warnings. config.h loads it from a file, possibly named
 * by a run config.
 */
#ifndef SG_DS_CONFIG_H
#define SG_DS_CONFIG_H

#include <stdint.h>

#include "common/error.h"
#include "common/warnings.h"

struct cJSON;
struct sg_json_ctx;

/* The optimizers DeepSpeed can run on an offloaded sub-group
 * (DeepSpeedCPUAdam, DeepSpeedCPULion, DeepSpeedCPUAdagrad) and their GPU
 * or torch counterparts; the update rules are in codelets/cpu/adam.h. */
typedef enum sg_optimizer_type {
    SG_OPT_ADAM,
    SG_OPT_ADAMW,
    SG_OPT_LION,
    SG_OPT_ADAGRAD
} sg_optimizer_type;

typedef enum sg_lr_schedule {
    SG_SCHED_NONE,             /* constant lr */
    SG_SCHED_WARMUP_LR,        /* warm up, then stay at warmup_max_lr */
    SG_SCHED_WARMUP_DECAY_LR,  /* warm up, then linear decay to 0 at total_num_steps */
    SG_SCHED_WARMUP_COSINE_LR, /* warm up to optimizer.lr, then cosine decay to cos_min_ratio */
    SG_SCHED_ONE_CYCLE,        /* one triangular cycle of lr (and beta1), then decay */
    SG_SCHED_LR_RANGE_TEST,    /* lr grows linearly (or in stairs) from a minimum */
} sg_lr_schedule;

typedef enum sg_warmup_type { SG_WARMUP_LOG, SG_WARMUP_LINEAR } sg_warmup_type;

typedef enum sg_offload_device {
    SG_OFFLOAD_NONE,
    SG_OFFLOAD_CPU,
    SG_OFFLOAD_NVME, /* ZeRO-Infinity: the state's home is a StarPU disk node under
                                 nvme_path (runtime/exec/disk_node.h, docs/memory.md, "NVMe offload") */
} sg_offload_device;

typedef struct sg_ds_config {
    /* batch: DeepSpeed's rule train = micro * accum * dp; 0 = not given */
    int64_t train_batch_size;
    int64_t train_micro_batch_size_per_gpu;
    int64_t gradient_accumulation_steps;
    int64_t steps_per_print; /* 0 = not set (DeepSpeed: None) */

    struct {
        int given; /* "optimizer" present */
        sg_optimizer_type type;
        double lr;           /* default 1e-3 (Adagrad: 1e-2) */
        double beta1, beta2; /* default 0.9, 0.999 (Adam, Lion) */
        double eps;          /* default 1e-8 (Adagrad: 1e-10) */
        double weight_decay; /* default 0 */
        int adam_w_mode;     /* decoupled decay: AdamW, or Adam with adam_w_mode true */
        int bias_correction; /* default true: divide the moments by 1 - beta^t */
        double lr_decay;     /* Adagrad: lr / (1 + (t-1) lr_decay); default 0 */
        double initial_accumulator_value; /* Adagrad: the sum of squares' start; default 0 */
    } optimizer;

    struct {
        sg_lr_schedule type;
        double warmup_min_lr;       /* default 0 */
        double warmup_max_lr;       /* WarmupLR: optimizer lr; WarmupDecayLR: 0.001 */
        int64_t warmup_num_steps;   /* default 1000 */
        int64_t total_num_steps;    /* WarmupDecayLR, WarmupCosineLR; required */
        sg_warmup_type warmup_type; /* default log */
        /* WarmupCosineLR: ratios of optimizer.lr */
        double warmup_min_ratio; /* default 0 */
        double cos_min_ratio;    /* default 1e-4 */
        /* OneCycle */
        double cycle_min_lr, cycle_max_lr;   /* required */
        double decay_lr_rate;                /* default 0 */
        int64_t cycle_first_step_size;       /* default 2000 */
        int64_t cycle_second_step_size;      /* 0 = not given: the first's */
        int64_t decay_step_size;             /* default 0: no decay */
        int cycle_momentum;                  /* default true: beta1 cycles, beta2 is 0.99 */
        double cycle_min_mom, cycle_max_mom; /* default 0.8, 0.9 */
        double decay_mom_rate;               /* default 0 */
        /* LRRangeTest */
        double lr_range_test_min_lr;     /* default 1e-3 */
        int64_t lr_range_test_step_size; /* default 2000 */
        double lr_range_test_step_rate;  /* default 1 */
        int lr_range_test_staircase;     /* default false */
    } scheduler;

    double gradient_clipping; /* default 1.0 (DeepSpeed >= 0.19.3); 0 = off */

    struct {
        int enabled;
        double loss_scale;           /* 0 = dynamic */
        int64_t loss_scale_window;   /* default 1000 */
        int64_t hysteresis;          /* default 2 */
        double min_loss_scale;       /* default 1 */
        int64_t initial_scale_power; /* default 16 */
    } fp16;

    struct {
        int enabled;
    } bf16;

    struct {
        int64_t stage; /* 0..3, default 0 */
        int overlap_comm;
        int contiguous_gradients;
        int reduce_scatter;                         /* default true */
        int allgather_partitions;                   /* default true */
        int64_t allgather_bucket_size;              /* default 5e8 */
        int64_t reduce_bucket_size;                 /* default 5e8 */
        int64_t sub_group_size;                     /* default 1e9 */
        int64_t stage3_max_live_parameters;         /* default 1e9 */
        int64_t stage3_max_reuse_distance;          /* default 1e9 */
        int64_t stage3_prefetch_bucket_size;        /* default 5e7 */
        int64_t stage3_param_persistence_threshold; /* default 1e5 */
        int stage3_gather_16bit_weights_on_model_save;
        struct {
            sg_offload_device device;
            int pin_memory;
            double ratio; /* share of sub-groups stepped on the CPU, default 1 */
            int super_offload;
            double cpuadam_cores_perc; /* share of cores for CPU Adam, default 0.8 */
            char nvme_path[512];       /* device "nvme": the directory of the disk node */
            int64_t buffer_count;      /* device "nvme": state buffers (sub-group tiles' master
                                           or moments) kept in RAM at most, default 4 */
        } offload_optimizer;
        struct {
            sg_offload_device device;
            int pin_memory;
            char nvme_path[512];  /* device "nvme": the directory of the disk node */
            int64_t buffer_count; /* device "nvme": parameter pieces in RAM at most,
                                           default 5 */
        } offload_param;
    } zero;

    struct {
        int given;
        int partition_activations;
        int cpu_checkpointing;
        int contiguous_memory_optimization;
        int64_t number_checkpoints; /* 0 = not set */
        int synchronize_checkpoint_boundary;
        int profile;
    } activation_checkpointing;

    int wall_clock_breakdown;

    /* The keys the Hugging Face Trainer fills (ds_auto.h), one bit each by
     * sg_ds_auto_key: auto_pending = written "auto" and not filled yet (the
     * field holds its default meanwhile); auto_given = written with a value. */
    uint32_t auto_pending;
    uint32_t auto_given;
} sg_ds_config;

void sg_ds_config_defaults(sg_ds_config *ds);

/* Parses a DeepSpeed config from JSON text (origin names it in messages). */
int sg_ds_config_parse(const char *json_text, const char *origin, sg_ds_config *ds,
                       sg_config_warnings *warn, sg_error *err);

/* Fills ds (defaults first) from a parsed DeepSpeed config object, then runs
 * sg_ds_config_check(). Messages name c->origin and paths after c->prefix. */
int sg_ds_config_from_json(const struct cJSON *root, const struct sg_json_ctx *c, sg_ds_config *ds);

/* 1 if key is a DeepSpeed top-level key (for hints when one is written in a
 * run config). */
int sg_ds_config_is_top_key(const char *key);

/* ds_config_check.c: checks that involve several keys (fp16 with bf16,
 * offload needs ZeRO, super_offload needs stage 3...). bf16_key names the
 * bf16 section in messages. */
int sg_ds_config_check(const struct sg_json_ctx *c, const sg_ds_config *ds, const char *bf16_key);

/* DeepSpeed's batch rule (train = micro * accum * dp; the missing one
 * derived; a contradiction is an error that shows the three numbers). */
int sg_ds_config_batch_rule(sg_ds_config *ds, int64_t dp, const char *origin, sg_error *err);

#endif /* SG_DS_CONFIG_H */
