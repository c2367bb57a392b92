/* run_options.h - stepgraph run options.
 *
 * Run options (model, data, sequence length, steps, scheduler, workers...)
 * come from a run config file (config.h) and/or CLI flags. Errors name the
 * option and the value; unknown keys are reported as warnings.
 */
#ifndef SG_RUN_OPTIONS_H
#define SG_RUN_OPTIONS_H

#include <stdint.h>

#include "common/error.h"

#define SG_PATH_MAX 1024
#define SG_NAME_MAX 64
/* Longest max_length: the data loader reads windows of at most this many
 * tokens, so config, graph and simulate refuse what run would. */
#define SG_MAX_LENGTH_MAX (1 << 24)
/* Most steps in flight (run option lookahead). */
#define SG_LOOKAHEAD_MAX 8

struct cJSON;
struct sg_json_ctx;

/* The Hugging Face TrainingArguments that fill "auto" values of a DeepSpeed
 * config (runtime/config/ds_auto.h), under the Trainer's own names, so that a
 * Trainer command line carries over. Not given: -1 for the integers and
 * booleans, NAN for the numbers; ds_auto.c then takes the DeepSpeed config's
 * own value for the key the Trainer matches the argument with, else the
 * Trainer's default. */
typedef struct sg_trainer_args {
    int64_t per_device_train_batch_size; /* Trainer default 8 */
    int64_t gradient_accumulation_steps; /* default 1 */
    double learning_rate;                /* default 5e-5 */
    double adam_beta1, adam_beta2;       /* default 0.9, 0.999 */
    double adam_epsilon;                 /* default 1e-8 */
    double weight_decay;                 /* default 0 */
    double max_grad_norm;                /* default 1 */
    double lr_warmup_steps;              /* TrainingArguments.warmup_steps: >= 1 updates,
                                              < 1 a ratio of the total; default 0 */
    int fp16, bf16;                      /* default false */
} sg_trainer_args;

typedef struct sg_run_options {
    char model[SG_PATH_MAX];      /* model name or path; default "tiny-llama" */
    char data[SG_PATH_MAX];       /* token shard (.bin) or text file; "" = default */
    char sched[SG_NAME_MAX];      /* StarPU policy; default "dmdas" */
    char machine[SG_NAME_MAX];    /* machine model for simulate/ideal timings */
    int64_t max_length;           /* sequence length, default 256 */
    int64_t steps;                /* training steps; 0 = use bench_steps */
    int64_t warmup_steps;         /* excluded from averages, default 0 */
    int64_t bench_steps;          /* stop after this many steps; 0 = none */
    int64_t log_interval;         /* default: DeepSpeed steps_per_print */
    int activation_checkpointing; /* -1 = from DeepSpeed config */
    int64_t seed;                 /* default 42 */
    int64_t dp_size;              /* data-parallel size, default 1 */
    int64_t ncpus;                /* CPU workers, -1 = StarPU default */
    int64_t ncuda;                /* CUDA workers, -1 = StarPU default */
    char load[SG_PATH_MAX];       /* weights file, or checkpoint dir to resume; "" = init */
    char save[SG_PATH_MAX];       /* checkpoint directory written by run; "" = none */
    int64_t save_interval;        /* also save every N steps; 0 = at the end only */
    int64_t save_keep;            /* checkpoints kept in save (newest); 0 = all */
    char save_dtype[8];           /* "f32" (default) or "bf16" weights */
    int64_t save_shard_size;      /* bytes per weights shard; 0 = one model.safetensors */
    char speculation[16];         /* SuperOffload: "adaptive" (default), "always", "never" */
    int64_t lookahead;            /* steps in flight at once, default 2; 1 = a barrier
                                           after every step */
    char metrics[SG_PATH_MAX];    /* JSONL metrics file; "" = none */
    char trace[SG_PATH_MAX];      /* Chrome trace of the last step; "" = none */
    int64_t numa_node;            /* bind CPU workers to this NUMA node; -1 = StarPU's binding */
    int bind_cores_to_rank;       /* DeepSpeed launcher style: rank r -> NUMA node r mod count */
    int numa;                     /* StarPU's NUMA memory nodes, each CPU sub-group's
                                           state and optimizer tasks on one (docs/training.md, "NUMA nodes") */
    int64_t numa_emulate;         /* split the cores into N emulated NUMA nodes; 0 = off */
    int64_t comm_timeout;         /* several ranks: seconds without a completed collective
                                           before every rank ends (runtime/dist/watchdog.h);
                                           the bound is the larger of this and 10 step times */
    int strict;                   /* 1: an unknown config key is an error, not a warning */
    int64_t optimizer_tile;       /* elements per chunk of a CPU sub-group's optimizer
                                           chain: SG_TILE_AUTO (the default), 0 = untiled,
                                           or N > 0 (step_spec.c resolves auto) */
    char cast_placement[16];      /* "scheduler" (default), "cpu", "gpu", "fused" or "auto" */
    int64_t batch_tile;           /* sequences per forward/backward tile of a micro-step:
                                           SG_TILE_AUTO (-1, the default), 0 = untiled, or
                                           1..micro batch (step_spec.c resolves auto) */
    int64_t head_chunk_tokens;    /* tokens per chunk of the head's logits: SG_TILE_AUTO
                                           (-1, the default: chunk x vocab x 4 bytes within
                                           256 MiB) or N >= 1 (models/unit_layout.h) */
    char eval_data[SG_PATH_MAX];  /* held-out token shards (a glob as data); "" = none
                                           (runtime/train/eval.h) */
    int64_t eval_interval;        /* evaluate every N steps and at the last; 0 = never */
    int64_t eval_batches;         /* micro-batches per evaluation; 0 = every whole
                                           micro-batch of eval_data */
    sg_trainer_args hf;           /* fill "auto" in the DeepSpeed config */
} sg_run_options;

/* "auto" in an option that takes a tile size (batch_tile, optimizer_tile). */
#define SG_TILE_AUTO (-1)

void sg_run_options_defaults(sg_run_options *run);

/* Sets one run option from its name as written in a run config or as a CLI
 * flag without dashes ("max_length", "seed", ...) and a string value. */
int sg_run_option_set(sg_run_options *run, const char *key, const char *value, sg_error *err);

/* Parses the run option keys of a run config object (all but
 * "deepspeed_config") into run. is_ds_key (may be NULL) says whether a key
 * is one of the DeepSpeed config's top-level keys (config.c passes
 * ds_config.h's sg_ds_config_is_top_key): such a key is not taken for a run
 * option when its value is an object, and an unknown one is warned about
 * as misplaced. Passed in, because ds_config.c includes this header (its
 * "auto" values and hints come from the run options). */
int sg_run_options_from_json(const struct cJSON *root, const struct sg_json_ctx *c,
                             int (*is_ds_key)(const char *key), sg_run_options *run);

/* 1 if key names a run option (for hints when one is written in a
 * DeepSpeed config). */
int sg_run_option_is_key(const char *key);

/* cast_placement as an index: 0 auto, 1 cpu, 2 gpu, 3 scheduler, 4 fused (the order
 * of graph/compile.h's sg_cast_placement); SG_EINVAL otherwise. */
int sg_run_cast_placement(const sg_run_options *run, int *placement, sg_error *err);

/* Range checks of every option (a caller may have edited the struct);
 * origin names the run config in messages. */
int sg_run_options_check(const sg_run_options *run, const char *origin, sg_error *err);

#endif /* SG_RUN_OPTIONS_H */
