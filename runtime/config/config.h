/* config.h - DeepSpeed JSON configs and stepgraph run options.
 *
 * Users bring the DeepSpeed config they already have, unchanged. Run options
 * (model, data, sequence length, steps, scheduler, workers...) come from a run
 * config file and/or CLI flags. A run config is a JSON object with a
 * "deepspeed_config" key (a path relative to the run config, or an inline
 * object) plus run option keys; any other JSON file is read as a DeepSpeed
 * config. Parsing never exits: errors name the JSON path, the value and what
 * was expected; unknown keys are reported as warnings.
 */
#ifndef SG_CONFIG_H
#define SG_CONFIG_H

#include <stdint.h>

#include "common/error.h"

#define SG_PATH_MAX 1024
#define SG_NAME_MAX 64
#define SG_MAX_WARNINGS 64

typedef enum sg_optimizer_type { SG_OPT_ADAM, SG_OPT_ADAMW } sg_optimizer_type;

typedef enum sg_lr_schedule {
    SG_SCHED_NONE,            /* constant lr */
    SG_SCHED_WARMUP_LR,       /* warm up, then stay at warmup_max_lr */
    SG_SCHED_WARMUP_DECAY_LR, /* warm up, then linear decay to 0 at total_num_steps */
} sg_lr_schedule;

typedef enum sg_warmup_type { SG_WARMUP_LOG, SG_WARMUP_LINEAR } sg_warmup_type;

typedef enum sg_offload_device {
    SG_OFFLOAD_NONE,
    SG_OFFLOAD_CPU,
    SG_OFFLOAD_NVME,          /* parsed so the error can say it is unsupported */
} sg_offload_device;

typedef struct sg_ds_config {
    /* batch: DeepSpeed's rule train = micro * accum * dp; 0 = not given */
    int64_t train_batch_size;
    int64_t train_micro_batch_size_per_gpu;
    int64_t gradient_accumulation_steps;
    int64_t steps_per_print;            /* 0 = not set (DeepSpeed: None) */

    struct {
        int given;                      /* "optimizer" present */
        sg_optimizer_type type;
        double lr;                      /* default 1e-3 */
        double beta1, beta2;            /* default 0.9, 0.999 */
        double eps;                     /* default 1e-8 */
        double weight_decay;            /* default 0 */
        int adam_w_mode;                /* decoupled decay: AdamW, or Adam with adam_w_mode true */
    } optimizer;

    struct {
        sg_lr_schedule type;
        double warmup_min_lr;           /* default 0 */
        double warmup_max_lr;           /* WarmupLR: optimizer lr; WarmupDecayLR: 0.001 */
        int64_t warmup_num_steps;       /* default 1000 */
        int64_t total_num_steps;        /* WarmupDecayLR only; required */
        sg_warmup_type warmup_type;     /* default log */
    } scheduler;

    double gradient_clipping;           /* default 1.0 (DeepSpeed >= 0.19.3); 0 = off */

    struct {
        int enabled;
        double loss_scale;              /* 0 = dynamic */
        int64_t loss_scale_window;      /* default 1000 */
        int64_t hysteresis;             /* default 2 */
        double min_loss_scale;          /* default 1 */
        int64_t initial_scale_power;    /* default 16 */
    } fp16;

    struct {
        int enabled;
    } bf16;

    struct {
        int64_t stage;                  /* 0..3, default 0 */
        int overlap_comm;
        int contiguous_gradients;
        int reduce_scatter;             /* default true */
        int allgather_partitions;       /* default true */
        int64_t allgather_bucket_size;  /* default 5e8 */
        int64_t reduce_bucket_size;     /* default 5e8 */
        int64_t sub_group_size;         /* default 1e9 */
        int64_t stage3_max_live_parameters;        /* default 1e9 */
        int64_t stage3_max_reuse_distance;         /* default 1e9 */
        int64_t stage3_prefetch_bucket_size;       /* default 5e7 */
        int64_t stage3_param_persistence_threshold;/* default 1e5 */
        int stage3_gather_16bit_weights_on_model_save;
        struct {
            sg_offload_device device;
            int pin_memory;
            double ratio;               /* share of sub-groups stepped on the CPU, default 1 */
            int super_offload;
            double cpuadam_cores_perc;  /* share of cores for CPU Adam, default 0.8 */
        } offload_optimizer;
        struct {
            sg_offload_device device;
            int pin_memory;
        } offload_param;
    } zero;

    struct {
        int given;
        int partition_activations;
        int cpu_checkpointing;
        int contiguous_memory_optimization;
        int64_t number_checkpoints;     /* 0 = not set */
        int synchronize_checkpoint_boundary;
        int profile;
    } activation_checkpointing;

    int wall_clock_breakdown;
} sg_ds_config;

typedef struct sg_run_options {
    char model[SG_PATH_MAX];            /* model name or path; default "tiny-llama" */
    char data[SG_PATH_MAX];             /* token shard (.bin) or text file; "" = default */
    char sched[SG_NAME_MAX];            /* StarPU policy; default "dmdas" */
    char machine[SG_NAME_MAX];          /* machine model for simulate/ideal timings */
    int64_t max_length;                 /* sequence length, default 256 */
    int64_t steps;                      /* training steps; 0 = use bench_steps */
    int64_t warmup_steps;               /* excluded from averages, default 0 */
    int64_t bench_steps;                /* stop after this many steps; 0 = none */
    int64_t log_interval;               /* default: DeepSpeed steps_per_print */
    int activation_checkpointing;       /* -1 = from DeepSpeed config */
    int64_t seed;                       /* default 42 */
    int64_t dp_size;                    /* data-parallel size, default 1 */
    int64_t ncpus;                      /* CPU workers, -1 = StarPU default */
    int64_t ncuda;                      /* CUDA workers, -1 = StarPU default */
    char load[SG_PATH_MAX];             /* weights file, or checkpoint dir to resume; "" = init */
    char save[SG_PATH_MAX];             /* checkpoint directory written by run; "" = none */
    int64_t save_interval;              /* also save every N steps; 0 = at the end only */
    char save_dtype[8];                 /* "f32" (default) or "bf16" weights */
    char metrics[SG_PATH_MAX];          /* JSONL metrics file; "" = none */
    char trace[SG_PATH_MAX];            /* Chrome trace of the last step; "" = none */
    int64_t numa_node;                  /* bind CPU workers to this NUMA node; -1 = StarPU's binding */
    int bind_cores_to_rank;             /* DeepSpeed launcher style: rank r -> NUMA node r mod count */
} sg_run_options;

typedef struct sg_config_warnings {
    int count;
    char msg[SG_MAX_WARNINGS][256];
} sg_config_warnings;

/* Everything one command needs: the DeepSpeed config, run options, and
 * where they came from. */
typedef struct sg_config {
    sg_ds_config ds;
    sg_run_options run;
    char ds_path[SG_PATH_MAX];          /* "" for inline */
    char run_path[SG_PATH_MAX];         /* "" when CONFIG was a DeepSpeed file */
    sg_config_warnings warnings;
} sg_config;

void sg_ds_config_defaults(sg_ds_config *ds);
void sg_run_options_defaults(sg_run_options *run);

/* Parses a DeepSpeed config from JSON text (origin names it in messages). */
int sg_ds_config_parse(const char *json_text, const char *origin,
                       sg_ds_config *ds, sg_config_warnings *warn,
                       sg_error *err);

/* Loads CONFIG (run config or DeepSpeed config, see above) into cfg, after
 * filling defaults. Does not apply the batch rule (CLI flags may still
 * change dp_size): call sg_config_finalize() after the flags. */
int sg_config_load(const char *path, sg_config *cfg, sg_error *err);
/* The same, with --set KEY=VALUE assignments (config_override.h) applied to
 * the DeepSpeed config before it is read. */
int sg_config_load_with(const char *path, const char *const *sets, int nsets, sg_config *cfg,
                        sg_error *err);

/* Sets one run option from its name as written in a run config or as a CLI
 * flag without dashes ("max_length", "seed", ...) and a string value. */
int sg_run_option_set(sg_run_options *run, const char *key,
                      const char *value, sg_error *err);

/* Applies DeepSpeed's batch rule (train = micro * accum * dp; the missing one
 * derived; a contradiction is an error that shows the three numbers) and the
 * cross-field checks (super_offload needs stage 3 and a CPU optimizer...). */
int sg_config_finalize(sg_config *cfg, sg_error *err);

#endif /* SG_CONFIG_H */
