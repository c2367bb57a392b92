/* test_config.c - DeepSpeed config and run option loading (runtime/config/config.c).
 *
 * Shipped configs load with no warning; defaults are DeepSpeed's; the batch
 * rule; unknown keys warn; every file in tests/data/bad-configs/ fails with
 * the message listed in its EXPECTED.tsv; run configs; CLI option strings;
 * file errors. SG_SRCDIR names the source tree (default ".").
 */
#define _POSIX_C_SOURCE 200809L

#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "runtime/config/config.h"
#include "runtime/config/config_override.h"
#include "runtime/config/step_spec.h"
#include "tests/tap.h"

static const char *srcdir = ".";

/* srcdir/rel in one of a few rotating buffers */
static const char *src(const char *rel)
{
    static char bufs[4][SG_PATH_MAX];
    static int k;
    char *b = bufs[k++ % 4];
    snprintf(b, SG_PATH_MAX, "%s/%s", srcdir, rel);
    return b;
}

static int ends_with(const char *s, const char *suffix)
{
    size_t a = strlen(s), b = strlen(suffix);
    return a >= b && strcmp(s + a - b, suffix) == 0;
}

static int starts_with(const char *s, const char *prefix)
{
    return strncmp(s, prefix, strlen(prefix)) == 0;
}

static int has_warning(const sg_config_warnings *w, const char *substr)
{
    for (int i = 0; i < w->count; i++)
        if (strstr(w->msg[i], substr))
            return 1;
    return 0;
}

static void diag_warnings(const sg_config_warnings *w)
{
    for (int i = 0; i < w->count; i++)
        tap_diag("  warning: %s", w->msg[i]);
}

static const char *code_name(int code)
{
    switch (code) {
    case SG_OK: return "OK";
    case SG_EINVAL: return "EINVAL";
    case SG_ENOMEM: return "ENOMEM";
    case SG_EIO: return "EIO";
    case SG_ENOENT: return "ENOENT";
    case SG_ENOTSUP: return "ENOTSUP";
    default: return "?";
    }
}

/* ---- shipped configs -------------------------------------------------- */

/* REL (a shipped config) loads with no warning and finalizes */
static void shipped_loads(sg_config *cfg, const char *rel)
{
    sg_error err;
    sg_error_clear(&err);
    int rc = sg_config_load(src(rel), cfg, &err);
    if (!ok(rc == 0, "%s loads", rel)) {
        tap_diag("  %s", err.msg);
        return;
    }
    if (!ok(cfg->warnings.count == 0, "%s: no warnings", rel))
        diag_warnings(&cfg->warnings);
    rc = sg_config_finalize(cfg, &err);
    if (!ok(rc == 0, "%s finalizes", rel))
        tap_diag("  %s", err.msg);
}

static int json_name(const struct dirent *e)
{
    return ends_with(e->d_name, ".json");
}

/* shipped_loads on every *.json of the folder REL, in name order; the count */
static int shipped_dir(sg_config *cfg, const char *rel)
{
    struct dirent **names;
    int n = scandir(src(rel), &names, json_name, alphasort);
    if (!ok(n >= 0, "%s: listed", rel))
        return -1;
    for (int i = 0; i < n; i++) {
        char path[SG_PATH_MAX];
        snprintf(path, sizeof path, "%s/%s", rel, names[i]->d_name);
        shipped_loads(cfg, path);
        free(names[i]);
    }
    free(names);
    return n;
}

static void test_shipped(void)
{
    static const char *files[] = {
        "configs/deepspeed/superoffload.json",
        "configs/deepspeed/zero-offload.json",
        "configs/deepspeed/zero0.json",
        "configs/deepspeed/zero1.json",
        "configs/deepspeed/zero2.json",
        "configs/deepspeed/zero3.json",
        "configs/deepspeed/zero3-offload-fp16.json",
        "configs/deepspeed/zero3-offload-all.json",
        "configs/deepspeed/zero0-cpu-tiny.json",
        "configs/default.json",
        "configs/llama-3.1-8b-superoffload.json",
    };
    sg_config *cfg = malloc(sizeof *cfg);
    sg_error err;
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++)
        shipped_loads(cfg, files[i]);
    /* every file of the folders the published-run table uses
     * (scripts/sim_vs_published.py), new ones included */
    ok(shipped_dir(cfg, "configs/published") == 8, "configs/published: 8 run configs");
    ok(shipped_dir(cfg, "configs/published/deepspeed") == 8,
       "configs/published/deepspeed: 8 DeepSpeed configs");

    /* SuperOffload: the DeepSpeedExamples launch settings */
    int rc = sg_config_load(src("configs/deepspeed/superoffload.json"), cfg, &err);
    rc = rc ? rc : sg_config_finalize(cfg, &err);
    ok(rc == 0, "superoffload.json: load + finalize");
    const sg_ds_config *ds = &cfg->ds;
    is_int(ds->bf16.enabled, 1, "superoffload: bf16");
    is_int(ds->fp16.enabled, 0, "superoffload: no fp16");
    is_int(ds->zero.stage, 3, "superoffload: stage 3");
    is_int(ds->zero.overlap_comm, 0, "superoffload: overlap_comm false");
    is_int(ds->zero.reduce_bucket_size, 400000000, "superoffload: reduce_bucket_size 4e8");
    is_int(ds->zero.sub_group_size, 400000000, "superoffload: sub_group_size 4e8");
    is_int(ds->zero.offload_optimizer.device, SG_OFFLOAD_CPU, "superoffload: offload to cpu");
    is_int(ds->zero.offload_optimizer.pin_memory, 1, "superoffload: pin_memory");
    is_int(ds->zero.offload_optimizer.super_offload, 1, "superoffload: super_offload");
    is_close(ds->zero.offload_optimizer.ratio, 0.90, 1e-12, "superoffload: ratio 0.90");
    is_close(ds->zero.offload_optimizer.cpuadam_cores_perc, 0.90, 1e-12,
             "superoffload: cores 0.90");
    is_int(ds->train_micro_batch_size_per_gpu, 4, "superoffload: micro batch 4");
    is_int(ds->gradient_accumulation_steps, 1, "superoffload: accumulation 1");
    is_int(ds->train_batch_size, 4, "superoffload: train batch derived as 4");
    is_int(ds->optimizer.type, SG_OPT_ADAMW, "superoffload: AdamW");
    is_close(ds->optimizer.lr, 1e-5, 1e-12, "superoffload: lr 1e-5");
    is_close(ds->optimizer.weight_decay, 0.01, 1e-12, "superoffload: weight_decay 0.01");
    is_close(ds->gradient_clipping, 1.0, 1e-12, "superoffload: gradient_clipping 1.0");
    is_int(ds->wall_clock_breakdown, 1, "superoffload: wall_clock_breakdown");
    is_str(cfg->run_path, "", "superoffload: a DeepSpeed config has no run_path");
    ok(ends_with(cfg->ds_path, "configs/deepspeed/superoffload.json"), "superoffload: ds_path");

    /* default job */
    rc = sg_config_load(src("configs/default.json"), cfg, &err);
    rc = rc ? rc : sg_config_finalize(cfg, &err);
    ok(rc == 0, "default.json: load + finalize");
    ok(ends_with(cfg->ds_path, "configs/deepspeed/zero0-cpu-tiny.json"),
       "default.json: deepspeed_config resolved next to the run config (%s)", cfg->ds_path);
    ok(ends_with(cfg->run_path, "configs/default.json"), "default.json: run_path");
    is_str(cfg->run.model, "tiny-llama", "default.json: model");
    is_str(cfg->run.sched, "lws", "default.json: sched");
    is_int(cfg->run.max_length, 256, "default.json: max_length");
    is_int(cfg->run.bench_steps, 200, "default.json: bench_steps");
    is_int(cfg->run.log_interval, 10, "default.json: log_interval");
    is_int(cfg->run.seed, 42, "default.json: seed");
    is_int(cfg->run.activation_checkpointing, 0, "default.json: activation checkpointing off");
    is_int(cfg->ds.zero.stage, 0, "zero0-cpu-tiny: stage 0");
    ok(!cfg->ds.fp16.enabled && !cfg->ds.bf16.enabled, "zero0-cpu-tiny: fp32");
    is_int(cfg->ds.zero.offload_optimizer.device, SG_OFFLOAD_NONE, "zero0-cpu-tiny: no offload");
    is_int(cfg->ds.train_batch_size, 4, "zero0-cpu-tiny: train batch 4");
    is_int(cfg->ds.scheduler.type, SG_SCHED_WARMUP_LR, "zero0-cpu-tiny: WarmupLR");
    is_int(cfg->ds.scheduler.warmup_type, SG_WARMUP_LINEAR, "zero0-cpu-tiny: linear warmup");
    is_close(cfg->ds.optimizer.lr, 1e-3, 1e-12, "zero0-cpu-tiny: lr 1e-3");

    rc = sg_config_load(src("configs/llama-3.1-8b-superoffload.json"), cfg, &err);
    rc = rc ? rc : sg_config_finalize(cfg, &err);
    ok(rc == 0, "llama-3.1-8b-superoffload.json: load + finalize");
    is_str(cfg->run.model, "llama-3.1-8b", "llama run: model");
    is_str(cfg->run.machine, "gh200", "llama run: machine");
    is_int(cfg->run.max_length, 4096, "llama run: max_length 4096");
    is_int(cfg->run.activation_checkpointing, 1, "llama run: activation checkpointing on");
    is_int(cfg->ds.zero.offload_optimizer.super_offload, 1, "llama run: super_offload");

    rc = sg_config_load(src("configs/deepspeed/zero3-offload-fp16.json"), cfg, &err);
    rc = rc ? rc : sg_config_finalize(cfg, &err);
    ok(rc == 0, "zero3-offload-fp16.json: load + finalize");
    is_int(cfg->ds.gradient_accumulation_steps, 8, "zero3-offload-fp16: accumulation 32 / (4 * 1)");
    is_int(cfg->ds.fp16.initial_scale_power, 16, "zero3-offload-fp16: initial_scale_power");
    is_int(cfg->ds.optimizer.type, SG_OPT_ADAM, "zero3-offload-fp16: Adam");
    is_int(cfg->ds.optimizer.adam_w_mode, 1, "zero3-offload-fp16: adam_w_mode");
    is_int(cfg->ds.scheduler.total_num_steps, 2000, "zero3-offload-fp16: total_num_steps");
    free(cfg);
}

/* ---- defaults --------------------------------------------------------- */

static void test_defaults(void)
{
    sg_ds_config ds;
    sg_ds_config_defaults(&ds);
    /* DeepSpeed 0.19.8 values, file by file */
    is_int(ds.train_batch_size, 0, "default train_batch_size: not given");
    is_int(ds.train_micro_batch_size_per_gpu, 0, "default micro batch: not given");
    is_int(ds.gradient_accumulation_steps, 0, "default accumulation: not given");
    is_int(ds.steps_per_print, 0, "default steps_per_print: None (0)");
    is_close(ds.gradient_clipping, 1.0, 0, "default gradient_clipping 1.0 (DeepSpeed >= 0.19.3)");
    is_close(ds.optimizer.lr, 1e-3, 0, "default lr 1e-3");
    is_close(ds.optimizer.beta1, 0.9, 0, "default beta1");
    is_close(ds.optimizer.beta2, 0.999, 0, "default beta2");
    is_close(ds.optimizer.eps, 1e-8, 0, "default eps");
    is_close(ds.optimizer.weight_decay, 0.0, 0, "default weight_decay 0");
    is_int(ds.optimizer.adam_w_mode, 1, "default adam_w_mode true");
    is_int(ds.scheduler.type, SG_SCHED_NONE, "default: no scheduler");
    is_int(ds.scheduler.warmup_num_steps, 1000, "default warmup_num_steps 1000");
    is_int(ds.scheduler.warmup_type, SG_WARMUP_LOG, "default warmup_type log");
    is_close(ds.scheduler.warmup_min_lr, 0.0, 0, "default warmup_min_lr 0");
    is_int(ds.fp16.enabled, 0, "default fp16 off");
    is_close(ds.fp16.loss_scale, 0.0, 0, "default loss_scale 0 (dynamic)");
    is_int(ds.fp16.initial_scale_power, 16, "default initial_scale_power 16");
    is_int(ds.fp16.loss_scale_window, 1000, "default loss_scale_window 1000");
    is_int(ds.fp16.hysteresis, 2, "default hysteresis 2");
    is_close(ds.fp16.min_loss_scale, 1.0, 0, "default min_loss_scale 1");
    is_int(ds.bf16.enabled, 0, "default bf16 off");
    is_int(ds.zero.stage, 0, "default stage 0");
    is_int(ds.zero.overlap_comm, 0, "default overlap_comm false (stage 0)");
    is_int(ds.zero.contiguous_gradients, 1, "default contiguous_gradients true");
    is_int(ds.zero.reduce_scatter, 1, "default reduce_scatter true");
    is_int(ds.zero.allgather_partitions, 1, "default allgather_partitions true");
    is_int(ds.zero.allgather_bucket_size, 500000000, "default allgather_bucket_size 5e8");
    is_int(ds.zero.reduce_bucket_size, 500000000, "default reduce_bucket_size 5e8");
    is_int(ds.zero.sub_group_size, 1000000000, "default sub_group_size 1e9");
    is_int(ds.zero.stage3_max_live_parameters, 1000000000, "default max_live_parameters 1e9");
    is_int(ds.zero.stage3_max_reuse_distance, 1000000000, "default max_reuse_distance 1e9");
    is_int(ds.zero.stage3_prefetch_bucket_size, 50000000, "default prefetch_bucket_size 5e7");
    is_int(ds.zero.stage3_param_persistence_threshold, 100000, "default persistence threshold 1e5");
    is_int(ds.zero.stage3_gather_16bit_weights_on_model_save, 0, "default gather_16bit false");
    is_int(ds.zero.offload_optimizer.device, SG_OFFLOAD_NONE, "default offload_optimizer none");
    is_int(ds.zero.offload_optimizer.pin_memory, 0, "default pin_memory false");
    is_close(ds.zero.offload_optimizer.ratio, 1.0, 0, "default ratio 1.0");
    is_int(ds.zero.offload_optimizer.super_offload, 0, "default super_offload false");
    is_close(ds.zero.offload_optimizer.cpuadam_cores_perc, 0.8, 0,
             "default cpuadam_cores_perc 0.8");
    is_int(ds.zero.offload_param.device, SG_OFFLOAD_NONE, "default offload_param none");
    is_int(ds.activation_checkpointing.given, 0, "default: no activation_checkpointing section");
    is_int(ds.activation_checkpointing.partition_activations, 0, "default partition_activations");
    is_int(ds.activation_checkpointing.number_checkpoints, 0, "default number_checkpoints None");
    is_int(ds.wall_clock_breakdown, 0, "default wall_clock_breakdown false");

    sg_run_options run;
    sg_run_options_defaults(&run);
    is_str(run.model, "tiny-llama", "run default model");
    is_str(run.data, "", "run default data");
    is_str(run.sched, "dmdas", "run default sched");
    is_str(run.machine, "", "run default machine");
    is_int(run.max_length, 256, "run default max_length");
    is_int(run.steps, 0, "run default steps");
    is_int(run.warmup_steps, 0, "run default warmup_steps");
    is_int(run.bench_steps, 0, "run default bench_steps");
    is_int(run.activation_checkpointing, -1, "run default activation_checkpointing -1");
    is_int(run.seed, 42, "run default seed");
    is_int(run.dp_size, 1, "run default dp_size");
    is_int(run.ncpus, -1, "run default ncpus");
    is_int(run.ncuda, -1, "run default ncuda");

    /* a config that sets almost nothing gets the same values */
    sg_config *cfg = malloc(sizeof *cfg);
    sg_error err;
    int rc = sg_config_load(src("tests/data/good-configs/minimal.json"), cfg, &err);
    ok(rc == 0 && cfg->warnings.count == 0, "minimal.json loads with no warning");
    sg_ds_config want;
    sg_ds_config_defaults(&want);
    want.train_micro_batch_size_per_gpu = 2;
    want.auto_given = SG_AUTO_BIT(SG_AUTO_MICRO_BATCH); /* a key the Trainer matches, given */
    ok(memcmp(&cfg->ds, &want, sizeof want) == 0, "minimal.json: every other field is the default");
    rc = sg_config_finalize(cfg, &err);
    ok(rc == 0, "minimal.json finalizes");
    is_int(cfg->run.log_interval, 10, "log_interval falls back to 10 without steps_per_print");
    is_int(cfg->run.activation_checkpointing, 0, "activation checkpointing -1 resolves to off");

    rc = sg_config_load(src("tests/data/good-configs/stage3-minimal.json"), cfg, &err);
    ok(rc == 0, "stage3-minimal.json loads");
    is_int(cfg->ds.zero.overlap_comm, 1, "overlap_comm defaults to true at stage 3");
    free(cfg);
}

/* ---- numbers, aliases, DeepSpeed-specific forms ------------------------ */

static void test_forms(void)
{
    sg_config *cfg = malloc(sizeof *cfg);
    sg_error err;
    int rc = sg_config_load(src("tests/data/good-configs/numbers-4e8.json"), cfg, &err);
    if (!ok(rc == 0, "numbers-4e8.json loads"))
        tap_diag("  %s", err.msg);
    ok(cfg->warnings.count == 0, "numbers-4e8.json: no warnings");
    is_int(cfg->ds.train_batch_size, 40, "4e1 is the integer 40");
    is_int(cfg->ds.zero.reduce_bucket_size, 400000000, "4e8 is the integer 400000000");
    is_int(cfg->ds.zero.sub_group_size, 400000000, "sub_group_size 4e8");
    is_int(cfg->ds.zero.allgather_bucket_size, 500000000, "5E8 (capital E)");
    is_int(cfg->ds.zero.stage3_prefetch_bucket_size, 50000000, "prefetch_bucket_size alias");
    is_int(cfg->ds.zero.stage3_max_live_parameters, 3000000000LL,
           "max_live_parameters alias, 3e9 > 2^31");
    is_int(cfg->ds.zero.stage3_param_persistence_threshold, 10000,
           "stage3_param_persistence_threshold 1e4");

    rc = sg_config_load(src("tests/data/good-configs/bfloat16-alias.json"), cfg, &err);
    ok(rc == 0 && cfg->ds.bf16.enabled == 1 && cfg->warnings.count == 0,
       "\"bfloat16\" is read as bf16");
    rc = sg_config_load(src("tests/data/good-configs/bf16-and-bfloat16.json"), cfg, &err);
    ok(rc == 0 && cfg->ds.bf16.enabled == 0, "\"bf16\" takes precedence over \"bfloat16\"");
    ok(has_warning(&cfg->warnings, "bfloat16 ignored"), "... with a warning");

    rc = sg_config_load(src("tests/data/good-configs/zero-bool.json"), cfg, &err);
    ok(rc == 0 && cfg->ds.zero.stage == 1, "\"zero_optimization\": true is stage 1");
    ok(has_warning(&cfg->warnings, "deprecated"), "... with a deprecation warning");

    rc = sg_config_load(src("tests/data/good-configs/cpu-offload-legacy.json"), cfg, &err);
    ok(rc == 0 && cfg->ds.zero.offload_optimizer.device == SG_OFFLOAD_CPU &&
           cfg->ds.zero.offload_optimizer.pin_memory == 0,
       "legacy cpu_offload: true is offload_optimizer {device cpu}");

    /* ZeRO-3 parameter offload, as the Hugging Face / axolotl "offload all"
     * configs write it; DeepSpeed's read_zero_config_deprecated maps
     * cpu_offload_param: true to offload_param {device cpu}; its stage 1
     * and 2 optimizers never read offload_param */
    rc = sg_config_load(src("tests/data/good-configs/zero3-offload-all.json"), cfg, &err);
    ok(rc == 0 && cfg->ds.zero.offload_param.device == SG_OFFLOAD_CPU &&
           cfg->ds.zero.offload_param.pin_memory == 1 && cfg->warnings.count == 0,
       "zero3-offload-all.json: offload_param {device cpu, pin_memory}, no warning");
    diag_warnings(&cfg->warnings);
    /* ZeRO-Infinity (docs/memory.md, "NVMe offload"): the directory is only
     * checked by a run, so a config written for another machine loads */
    rc = sg_config_load(src("tests/data/good-configs/nvme-optimizer.json"), cfg, &err);
    ok(rc == 0 && cfg->ds.zero.offload_optimizer.device == SG_OFFLOAD_NVME &&
           !strcmp(cfg->ds.zero.offload_optimizer.nvme_path, "/local_nvme") &&
           cfg->ds.zero.offload_optimizer.buffer_count == 4,
       "nvme-optimizer.json: offload_optimizer {device nvme, nvme_path}, buffer_count 4");
    rc = sg_config_load(src("tests/data/good-configs/offload-param-nvme.json"), cfg, &err);
    ok(rc == 0 && cfg->ds.zero.offload_param.device == SG_OFFLOAD_NVME &&
           !strcmp(cfg->ds.zero.offload_param.nvme_path, "/local_nvme") &&
           cfg->ds.zero.offload_param.buffer_count == 5,
       "offload-param-nvme.json: offload_param {device nvme, nvme_path}, buffer_count 5");
    rc = sg_config_load(src("tests/data/good-configs/cpu-offload-param-legacy.json"), cfg, &err);
    ok(rc == 0 && cfg->ds.zero.offload_param.device == SG_OFFLOAD_CPU &&
           cfg->ds.zero.offload_optimizer.device == SG_OFFLOAD_CPU,
       "legacy cpu_offload_param: true is offload_param {device cpu}");
    rc = sg_config_load(src("tests/data/good-configs/offload-param-gpu-optimizer.json"), cfg, &err);
    ok(rc == 0 && cfg->ds.zero.offload_param.device == SG_OFFLOAD_CPU &&
           cfg->ds.zero.offload_optimizer.device == SG_OFFLOAD_NONE,
       "offload_param with the optimizer on the GPU (no offload_optimizer) loads");
    rc = sg_config_load(src("tests/data/good-configs/offload-param-ratio.json"), cfg, &err);
    ok(rc == 0 && cfg->ds.zero.offload_param.device == SG_OFFLOAD_CPU &&
           cfg->ds.zero.offload_optimizer.ratio == 0.5,
       "offload_param with half the sub-groups on the GPU (ratio 0.5) loads");
    rc = sg_config_load(src("tests/data/good-configs/offload-param-stage2.json"), cfg, &err);
    ok(rc == 0 && has_warning(&cfg->warnings, "offload_param: device \"cpu\" has no effect at "
                                              "stage 2"),
       "offload_param at stage 2 loads with a warning that it has no effect");

    rc = sg_config_load(src("tests/data/good-configs/torch-adamw.json"), cfg, &err);
    ok(rc == 0, "torch-adamw.json loads (type is case-insensitive)");
    is_int(cfg->ds.optimizer.type, SG_OPT_ADAMW, "\"adamw\" is AdamW");
    is_close(cfg->ds.optimizer.weight_decay, 0.01, 1e-12,
             "torch_adam AdamW: torch.optim.AdamW's weight_decay 0.01");

    rc = sg_config_load(src("tests/data/good-configs/adam-l2.json"), cfg, &err);
    ok(rc == 0 && cfg->ds.optimizer.type == SG_OPT_ADAM && cfg->ds.optimizer.adam_w_mode == 0,
       "Adam with adam_w_mode false: L2 regularisation");
    is_close(cfg->ds.optimizer.weight_decay, 0.1, 1e-12, "adam-l2: weight_decay");

    /* DeepSpeedCPULion(lr=1e-3, betas=(0.9, 0.999), weight_decay=0) and
     * DeepSpeedCPUAdagrad(lr=1e-2, eps=1e-10, weight_decay=0), the defaults of
     * deepspeed/ops/{lion,adagrad}; torch.optim.Adagrad: lr_decay 0,
     * initial_accumulator_value 0 */
    rc = sg_config_load(src("tests/data/good-configs/lion.json"), cfg, &err);
    ok(rc == 0 && cfg->ds.optimizer.type == SG_OPT_LION && cfg->warnings.count == 0,
       "lion.json loads (\"lion\": the name is case-insensitive), no warning");
    ok(cfg->ds.optimizer.lr == 1e-4 && cfg->ds.optimizer.beta1 == 0.9 &&
           cfg->ds.optimizer.beta2 == 0.999 && cfg->ds.optimizer.weight_decay == 0.1,
       "Lion: the given lr and decay, DeepSpeed's default betas (0.9, 0.999)");
    ok(sg_config_finalize(cfg, &err) == 0 && strcmp(cfg->run.speculation, "never") == 0,
       "Lion under SuperOffload: speculation unset resolves to never");
    rc = sg_config_load(src("tests/data/good-configs/adagrad-defaults.json"), cfg, &err);
    ok(rc == 0 && cfg->ds.optimizer.type == SG_OPT_ADAGRAD, "adagrad-defaults.json loads");
    ok(cfg->ds.optimizer.lr == 1e-2 && cfg->ds.optimizer.eps == 1e-10 &&
           cfg->ds.optimizer.weight_decay == 0 && cfg->ds.optimizer.lr_decay == 0 &&
           cfg->ds.optimizer.initial_accumulator_value == 0,
       "Adagrad: DeepSpeed's defaults (lr 1e-2, eps 1e-10, no decay, accumulator from 0)");
    ok(sg_config_finalize(cfg, &err) == 0 && strcmp(cfg->run.speculation, "adaptive") == 0,
       "Adagrad: speculation unset resolves to adaptive (the default)");

    rc = sg_config_load(src("tests/data/good-configs/warmuplr-default-max.json"), cfg, &err);
    ok(rc == 0, "warmuplr-default-max.json loads");
    is_close(cfg->ds.scheduler.warmup_max_lr, 5e-4, 1e-12,
             "WarmupLR: warmup_max_lr defaults to lr");
    is_int(cfg->ds.scheduler.warmup_num_steps, 50, "WarmupLR: warmup_num_steps");
    rc = sg_config_load(src("tests/data/good-configs/warmupdecay-default-max.json"), cfg, &err);
    ok(rc == 0, "warmupdecay-default-max.json loads");
    is_close(cfg->ds.scheduler.warmup_max_lr, 1e-3, 1e-12,
             "WarmupDecayLR: warmup_max_lr defaults to 0.001");
    is_int(cfg->ds.scheduler.total_num_steps, 100, "WarmupDecayLR: total_num_steps");
    rc = sg_config_load(src("tests/data/good-configs/warmupcosine-defaults.json"), cfg, &err);
    ok(rc == 0 && cfg->ds.scheduler.type == SG_SCHED_WARMUP_COSINE_LR && cfg->warnings.count == 0,
       "warmupcosine-defaults.json loads (another scheduler's key set to null is not given)");
    ok(cfg->ds.scheduler.warmup_num_steps == 1000 && cfg->ds.scheduler.warmup_min_ratio == 0 &&
           cfg->ds.scheduler.cos_min_ratio == 1e-4 && cfg->ds.scheduler.total_num_steps == 2000,
       "WarmupCosineLR: DeepSpeed's defaults (warm-up 1000, ratios 0 and 1e-4)");
    rc = sg_config_load(src("tests/data/good-configs/onecycle-defaults.json"), cfg, &err);
    ok(rc == 0 && cfg->ds.scheduler.type == SG_SCHED_ONE_CYCLE, "onecycle-defaults.json loads");
    ok(cfg->ds.scheduler.cycle_min_lr == 1e-4 && cfg->ds.scheduler.cycle_max_lr == 1e-3 &&
           cfg->ds.scheduler.cycle_first_step_size == 2000 &&
           cfg->ds.scheduler.cycle_second_step_size == 0 && cfg->ds.scheduler.cycle_momentum &&
           cfg->ds.scheduler.cycle_min_mom == 0.8 && cfg->ds.scheduler.cycle_max_mom == 0.9 &&
           cfg->ds.scheduler.decay_step_size == 0 && cfg->ds.scheduler.decay_lr_rate == 0,
       "OneCycle: DeepSpeed's defaults (steps 2000 and the same, momentum 0.8..0.9, no decay)");
    rc = sg_config_load(src("tests/data/good-configs/rangetest-defaults.json"), cfg, &err);
    ok(rc == 0 && cfg->ds.scheduler.type == SG_SCHED_LR_RANGE_TEST &&
           cfg->ds.scheduler.lr_range_test_min_lr == 1e-3 &&
           cfg->ds.scheduler.lr_range_test_step_size == 2000 &&
           cfg->ds.scheduler.lr_range_test_step_rate == 1.0 &&
           !cfg->ds.scheduler.lr_range_test_staircase,
       "LRRangeTest without params: DeepSpeed's defaults (1e-3, 2000, rate 1, continuous)");

    rc = sg_config_load(src("tests/data/good-configs/null-values.json"), cfg, &err);
    ok(rc == 0 && cfg->warnings.count == 0, "null values mean \"use the default\"");
    is_int(cfg->ds.train_batch_size, 0, "null train_batch_size is not given");
    is_close(cfg->ds.gradient_clipping, 1.0, 0, "null gradient_clipping is the default");
    is_int(cfg->ds.zero.overlap_comm, 0, "null overlap_comm at stage 2 is false");

    rc = sg_config_load(src("tests/data/good-configs/fp16-static-scale.json"), cfg, &err);
    ok(rc == 0 && cfg->ds.fp16.loss_scale == 128.0,
       "a static loss scale ignores loss_scale_window and min_loss_scale (as DeepSpeed does)");

    rc = sg_config_load(src("tests/data/good-configs/ds-with-bom.json"), cfg, &err);
    ok(rc == 0 && cfg->ds.train_micro_batch_size_per_gpu == 5, "a UTF-8 BOM is skipped");
    free(cfg);
}

/* ---- unknown keys ----------------------------------------------------- */

static void test_unknown_keys(void)
{
    sg_config *cfg = malloc(sizeof *cfg);
    sg_error err;
    int rc = sg_config_load(src("tests/data/good-configs/unknown-keys.json"), cfg, &err);
    if (!ok(rc == 0, "unknown keys are not errors"))
        tap_diag("  %s", err.msg);
    diag_warnings(&cfg->warnings);
    is_int(cfg->warnings.count, 5, "unknown-keys.json: five warnings");
    ok(has_warning(&cfg->warnings, "unknown key foo_bar ignored"), "warning names foo_bar");
    ok(has_warning(&cfg->warnings, "unknown key zero_optimization.stage3_foo ignored"),
       "warning names zero_optimization.stage3_foo");
    ok(has_warning(&cfg->warnings, "unknown key optimizer.params.momentum_decay ignored"),
       "warning names optimizer.params.momentum_decay");
    ok(has_warning(&cfg->warnings,
                   "zero_optimization.stage3_max_live_paramters ignored (did you mean "
                   "stage3_max_live_parameters?)"),
       "a misspelt key gets a suggestion");
    ok(has_warning(&cfg->warnings, "unknown key model ignored (a stepgraph run option"),
       "a run option in a DeepSpeed config says where it belongs");
    is_int(cfg->ds.steps_per_print, 7, "steps_per_print read");
    ok(starts_with(cfg->warnings.msg[0], src("tests/data/good-configs/unknown-keys.json")),
       "warnings start with the file name");

    /* the list keeps SG_MAX_WARNINGS entries, the last one says more were dropped */
    char *text = malloc(64 * 200 + 64);
    size_t n = (size_t)sprintf(text, "{\"train_micro_batch_size_per_gpu\": 1");
    for (int i = 0; i < 200; i++)
        n += (size_t)sprintf(text + n, ", \"junk_%03d\": %d", i, i);
    sprintf(text + n, "}");
    sg_ds_config ds;
    sg_config_warnings w = {0};
    rc = sg_ds_config_parse(text, "many.json", &ds, &w, &err);
    ok(rc == 0, "200 unknown keys parse");
    is_int(w.count, SG_MAX_WARNINGS, "warnings are capped at SG_MAX_WARNINGS");
    like(w.msg[SG_MAX_WARNINGS - 1], "further warnings dropped", "the last line says so");
    like(w.msg[0], "many.json: unknown key junk_000 ignored", "first warning kept");
    free(text);
    free(cfg);
}

/* ---- batch rule ------------------------------------------------------- */

static int batch(int64_t t, int64_t m, int64_t a, int64_t dp, sg_config *cfg, sg_error *err)
{
    memset(cfg, 0, sizeof *cfg);
    sg_ds_config_defaults(&cfg->ds);
    sg_run_options_defaults(&cfg->run);
    snprintf(cfg->ds_path, sizeof cfg->ds_path, "ds.json");
    cfg->ds.train_batch_size = t;
    cfg->ds.train_micro_batch_size_per_gpu = m;
    cfg->ds.gradient_accumulation_steps = a;
    cfg->run.dp_size = dp;
    sg_error_clear(err);
    return sg_config_finalize(cfg, err);
}

#define BATCH_IS(cfg, t, m, a)                                                               \
    ((cfg)->ds.train_batch_size == (t) && (cfg)->ds.train_micro_batch_size_per_gpu == (m) && \
     (cfg)->ds.gradient_accumulation_steps == (a))

static void test_batch_rule(void)
{
    sg_config *cfg = malloc(sizeof *cfg);
    sg_error err;
    int rc;
    rc = batch(0, 4, 2, 2, cfg, &err);
    ok(rc == 0 && BATCH_IS(cfg, 16, 4, 2), "micro 4 + accum 2, dp 2: train 16");
    rc = batch(32, 4, 0, 2, cfg, &err);
    ok(rc == 0 && BATCH_IS(cfg, 32, 4, 4), "train 32 + micro 4, dp 2: accum 4");
    rc = batch(32, 0, 2, 2, cfg, &err);
    ok(rc == 0 && BATCH_IS(cfg, 32, 8, 2), "train 32 + accum 2, dp 2: micro 8");
    rc = batch(32, 0, 0, 4, cfg, &err);
    ok(rc == 0 && BATCH_IS(cfg, 32, 8, 1), "train 32 only, dp 4: micro 8, accum 1");
    rc = batch(0, 4, 0, 3, cfg, &err);
    ok(rc == 0 && BATCH_IS(cfg, 12, 4, 1), "micro 4 only, dp 3: train 12, accum 1");
    rc = batch(32, 4, 4, 2, cfg, &err);
    ok(rc == 0 && BATCH_IS(cfg, 32, 4, 4), "all three consistent (32 = 4 * 4 * 2)");
    rc = batch(32, 4, 4, 1, cfg, &err);
    ok(rc == SG_EINVAL, "all three inconsistent: error");
    is_str(err.msg,
           "ds.json: train_batch_size 32 != train_micro_batch_size_per_gpu 4 * "
           "gradient_accumulation_steps 4 * data-parallel size 1 (DeepSpeed requires "
           "train_batch_size = micro batch * accumulation steps * data-parallel size)",
           "... the message shows the three numbers and dp");
    rc = batch(0, 0, 0, 1, cfg, &err);
    ok(rc == SG_EINVAL, "none given: error");
    like(err.msg, "at least one of train_batch_size / train_micro_batch_size_per_gpu is required",
         "... says which keys");
    rc = batch(0, 0, 4, 1, cfg, &err);
    ok(rc == SG_EINVAL, "accumulation alone: error");
    like(err.msg, "gradient_accumulation_steps alone is not enough", "... says why");
    rc = batch(30, 4, 0, 1, cfg, &err);
    ok(rc == SG_EINVAL, "train 30 / micro 4: not divisible");
    like(err.msg,
         "train_batch_size 30 is not a multiple of train_micro_batch_size_per_gpu 4 * "
         "data-parallel size 1",
         "... message");
    rc = batch(8, 4, 0, 4, cfg, &err);
    ok(rc == SG_EINVAL, "train 8 < micro 4 * dp 4: error");
    rc = batch(30, 0, 4, 1, cfg, &err);
    ok(rc == SG_EINVAL, "train 30 / accum 4: not divisible");
    like(err.msg, "train_micro_batch_size_per_gpu would not be a whole number", "... message");
    rc = batch(30, 0, 0, 4, cfg, &err);
    ok(rc == SG_EINVAL, "train 30 only, dp 4: not divisible");
    like(err.msg, "train_batch_size 30 is not a multiple of data-parallel size 4", "... message");
    rc = batch(0, INT64_MAX / 2, 4, 1, cfg, &err);
    ok(rc == SG_EINVAL, "overflowing product: error, not wrap-around");

    /* finalize leaves the config untouched when it fails */
    batch(32, 4, 4, 1, cfg, &err);
    ok(cfg->ds.train_batch_size == 32 && cfg->run.log_interval == 0 &&
           cfg->run.activation_checkpointing == -1,
       "a failed finalize changes nothing");

    /* dp_size from the CLI changes the derivation */
    rc = sg_config_load(src("configs/deepspeed/zero3-offload-fp16.json"), cfg, &err);
    ok(rc == 0, "zero3-offload-fp16.json loads");
    rc = sg_run_option_set(&cfg->run, "dp_size", "2", &err);
    rc = rc ? rc : sg_config_finalize(cfg, &err);
    ok(rc == 0 && BATCH_IS(cfg, 32, 4, 4), "train 32 + micro 4 with --dp_size 2: accum 4");
    free(cfg);
}

/* ---- bad configs ------------------------------------------------------ */

static int code_of(const char *name)
{
    if (!strcmp(name, "EINVAL"))
        return SG_EINVAL;
    if (!strcmp(name, "ENOTSUP"))
        return SG_ENOTSUP;
    if (!strcmp(name, "ENOENT"))
        return SG_ENOENT;
    if (!strcmp(name, "EIO"))
        return SG_EIO;
    if (!strcmp(name, "ENOMEM"))
        return SG_ENOMEM;
    return 1;
}

#define MAX_BAD 128

static void test_bad_configs(void)
{
    const char *tsv = src("tests/data/bad-configs/EXPECTED.tsv");
    FILE *f = fopen(tsv, "r");
    if (!f) {
        ok(0, "open %s", tsv);
        return;
    }
    static char listed[MAX_BAD][128];
    int nlisted = 0;
    char line[1024];
    sg_config *cfg = malloc(sizeof *cfg), *sentinel = malloc(sizeof *sentinel);
    memset(sentinel, 0x5a, sizeof *sentinel);
    while (fgets(line, sizeof line, f)) {
        line[strcspn(line, "\r\n")] = '\0';
        if (line[0] == '#' || line[0] == '\0')
            continue;
        char *file = strtok(line, "\t"), *phase = strtok(NULL, "\t");
        char *code = strtok(NULL, "\t"), *want = strtok(NULL, "");
        if (!ok(file && phase && code && want, "EXPECTED.tsv line is well formed"))
            continue;
        if (nlisted < MAX_BAD)
            snprintf(listed[nlisted++], sizeof listed[0], "%s", file);
        char rel[512];
        snprintf(rel, sizeof rel, "tests/data/bad-configs/%s", file);
        const char *path = src(rel);
        sg_error err;
        sg_error_clear(&err);
        memcpy(cfg, sentinel, sizeof *cfg);
        int rc = sg_config_load(path, cfg, &err);
        if (!strcmp(phase, "finalize")) {
            if (!ok(rc == 0, "%s: loads (fails only in finalize)", file)) {
                tap_diag("  %s", err.msg);
                continue;
            }
            rc = sg_config_finalize(cfg, &err);
        } else if (rc != 0) {
            ok(memcmp(cfg, sentinel, sizeof *cfg) == 0, "%s: failed load leaves cfg untouched",
               file);
        }
        if (!ok(rc == code_of(code), "%s: %s (got %s)", file, code, code_name(rc)))
            tap_diag("  message: %s", err.msg);
        like(err.msg, want, "%s: message names path and value", file);
        ok(starts_with(err.msg, path), "%s: message starts with the file name", file);
    }
    fclose(f);
    ok(nlisted >= 25, "at least 25 bad configs (%d)", nlisted);

    /* every file in the directory is in the table, so none goes untested */
    DIR *d = opendir(src("tests/data/bad-configs"));
    int unlisted = 0, njson = 0;
    if (d) {
        struct dirent *e;
        while ((e = readdir(d))) {
            if (!ends_with(e->d_name, ".json"))
                continue;
            njson++;
            int found = 0;
            for (int i = 0; i < nlisted; i++)
                found |= !strcmp(listed[i], e->d_name);
            if (!found) {
                unlisted++;
                tap_diag("  %s is not in EXPECTED.tsv", e->d_name);
            }
        }
        closedir(d);
    }
    ok(d && unlisted == 0 && njson == nlisted, "EXPECTED.tsv lists every bad config (%d files)",
       njson);
    free(cfg);
    free(sentinel);
}

/* ---- run configs ------------------------------------------------------ */

static void test_run_configs(void)
{
    sg_config *cfg = malloc(sizeof *cfg);
    sg_error err;
    int rc = sg_config_load(src("tests/data/good-configs/run-relative.json"), cfg, &err);
    if (!ok(rc == 0, "run-relative.json loads"))
        tap_diag("  %s", err.msg);
    ok(ends_with(cfg->ds_path, "tests/data/good-configs/minimal.json") &&
           strcmp(cfg->ds_path, "minimal.json") != 0,
       "deepspeed_config is resolved relative to the run config's directory (%s)", cfg->ds_path);
    is_int(cfg->ds.train_micro_batch_size_per_gpu, 2, "the referenced config is read");
    is_int(cfg->run.max_length, 128, "run option max_length");
    rc = sg_config_finalize(cfg, &err);
    ok(rc == 0 && cfg->ds.train_batch_size == 4, "dp_size 2 from the run config: train 2 * 2");

    rc = sg_config_load(src("tests/data/good-configs/run-inline.json"), cfg, &err);
    if (!ok(rc == 0, "run-inline.json loads"))
        tap_diag("  %s", err.msg);
    ok(cfg->warnings.count == 0, "run-inline.json: no warnings");
    is_str(cfg->ds_path, "", "inline: ds_path is empty");
    ok(ends_with(cfg->run_path, "run-inline.json"), "inline: run_path");
    is_int(cfg->ds.zero.stage, 2, "inline: stage");
    is_int(cfg->ds.zero.offload_optimizer.device, SG_OFFLOAD_CPU, "inline: offload");
    is_str(cfg->run.model, "llama-3.1-8b", "inline: model");
    is_str(cfg->run.data, "data/tokens.bin", "inline: data");
    is_str(cfg->run.sched, "dmda", "inline: sched");
    is_str(cfg->run.machine, "mi300a", "inline: machine");
    is_int(cfg->run.max_length, 4096, "inline: max_length");
    is_int(cfg->run.steps, 20, "inline: steps");
    is_int(cfg->run.warmup_steps, 5, "inline: warmup_steps");
    is_int(cfg->run.log_interval, 1, "inline: log_interval");
    is_int(cfg->run.activation_checkpointing, 1, "inline: activation_checkpointing");
    is_int(cfg->run.seed, 7, "inline: seed");
    is_int(cfg->run.ncpus, 8, "inline: ncpus");
    is_int(cfg->run.ncuda, 1, "inline: ncuda");
    rc = sg_config_finalize(cfg, &err);
    ok(rc == 0 && BATCH_IS(cfg, 16, 4, 2), "inline: train 16, accum 2, dp 2: micro 4");

    rc = sg_config_load(src("tests/data/good-configs/run-unknown-key.json"), cfg, &err);
    ok(rc == 0, "run-unknown-key.json loads");
    diag_warnings(&cfg->warnings);
    is_int(cfg->warnings.count, 3, "three warnings");
    ok(has_warning(&cfg->warnings, "unknown key foo ignored"), "unknown run key foo");
    ok(has_warning(&cfg->warnings, "unknown key max_lenght ignored (did you mean max_length?)"),
       "misspelt run key gets a suggestion");
    ok(has_warning(&cfg->warnings, "unknown key train_batch_size ignored (a DeepSpeed key"),
       "a DeepSpeed key in a run config says where it belongs");
    ok(starts_with(cfg->warnings.msg[0], src("tests/data/good-configs/run-unknown-key.json")),
       "run config warnings start with its file name");

    /* errors in an inline config name the file and the deepspeed_config. path */
    rc = sg_config_load(src("tests/data/bad-configs/run-inline-bad.json"), cfg, &err);
    like(err.msg, "run-inline-bad.json: deepspeed_config.zero_optimization.stage: 5",
         "inline errors are prefixed with deepspeed_config.");
    free(cfg);
}

/* ---- strict inputs: --set values, checks every command shares ---------- */

static void test_strict_inputs(void)
{
    sg_error err = {0};
    cJSON *o = cJSON_CreateObject();
    /* JSON values pass the strict check; bare words stay strings */
    ok(sg_json_set_dotted(o, "a=1.5e3", &err) == 0 &&
           cJSON_GetObjectItem(o, "a")->valuedouble == 1500,
       "--set a=1.5e3: a number");
    ok(sg_json_set_dotted(o, "b=true", &err) == 0 && cJSON_IsTrue(cJSON_GetObjectItem(o, "b")),
       "--set b=true: a boolean");
    ok(sg_json_set_dotted(o, "c=cpu", &err) == 0 &&
           !strcmp(cJSON_GetObjectItem(o, "c")->valuestring, "cpu"),
       "--set c=cpu: a bare string");
    ok(sg_json_set_dotted(o, "d=\"caf\\u00e9\"", &err) == 0 &&
           !strcmp(cJSON_GetObjectItem(o, "d")->valuestring, "caf\xc3\xa9"),
       "--set d=\"caf\\u00e9\": a JSON string, escape decoded");
    ok(sg_json_set_dotted(o, "e=[1, {}]", &err) == 0 && cJSON_IsArray(cJSON_GetObjectItem(o, "e")),
       "--set e=[1, {}]: an array");
    int rc = sg_json_set_dotted(o, "train_batch_size=01", &err);
    ok(rc == SG_EINVAL, "--set train_batch_size=01: refused, not read as 1");
    like(err.msg,
         "--set train_batch_size=01: invalid JSON at line 1, column 1: number '01' has a "
         "leading zero",
         "... naming the assignment, line and column");
    like(err.msg, "needs JSON quotes", "... and how to write a string");
    rc = sg_json_set_dotted(o, "gradient_clipping=2.", &err);
    ok(rc == SG_EINVAL && strstr(err.msg, "number '2.' has no digits after '.'"),
       "--set gradient_clipping=2.: refused");
    rc = sg_json_set_dotted(o, "optimizer.type=\"AdamW\\u0000junk\"", &err);
    ok(rc == SG_EINVAL && strstr(err.msg, "column 7: \\u0000 (NUL) inside a string"),
       "--set with \\u0000 in a string: refused");
    rc = sg_json_set_dotted(o, "x=1 2", &err);
    ok(rc == SG_EINVAL && strstr(err.msg, "text after the end of the JSON value"),
       "--set x=1 2: trailing text refused (cJSON alone reads 1)");
    rc = sg_json_set_dotted(o, "x=ab\xc0\xaf", &err);
    ok(rc == SG_EINVAL && strstr(err.msg, "invalid UTF-8 at byte 3"),
       "--set with invalid UTF-8 in a bare string: refused");
    ok(cJSON_GetObjectItem(o, "x") == NULL && cJSON_GetObjectItem(o, "train_batch_size") == NULL,
       "refused assignments change nothing");
    cJSON_Delete(o);

    /* sg_config_load_with names the assignment */
    sg_config *cfg = malloc(sizeof *cfg);
    const char *sets[] = {"steps_per_print=007"};
    rc = sg_config_load_with(src("configs/deepspeed/zero1.json"), sets, 1, cfg, &err);
    ok(rc == SG_EINVAL && strstr(err.msg, "--set steps_per_print=007: invalid JSON at line 1, "
                                          "column 1: number '007' has a leading zero"),
       "a bad --set value fails the config load");

    /* checks `run` and `graph` apply, made in finalize so `config` applies them too */
    rc = sg_config_load(src("configs/default.json"), cfg, &err);
    ok(rc == 0, "default.json loads");
    rc = sg_run_option_set(&cfg->run, "max_length", "2147483648", &err);
    ok(rc == SG_EINVAL && strstr(err.msg, "--max_length: 2147483648 is out of range (expected 0 < "
                                          "max_length <= 16777216)"),
       "--max_length 2^31: refused (the data loader reads at most 2^24 tokens)");
    cfg->run.max_length = (int64_t)1 << 31; /* as if a caller set it */
    rc = sg_config_finalize(cfg, &err);
    ok(rc == SG_EINVAL && strstr(err.msg, "max_length: 2147483648 is out of range"),
       "finalize refuses max_length 2^31");
    rc = sg_config_load(src("configs/default.json"), cfg, &err);
    snprintf(cfg->run.machine, sizeof cfg->run.machine, "auto");
    rc = sg_config_finalize(cfg, &err);
    ok(rc == SG_EINVAL && strstr(err.msg, "default.json: machine: \"auto\" is not supported"),
       "finalize refuses machine \"auto\"");
    rc = sg_config_load(src("configs/default.json"), cfg, &err);
    cfg->run.max_length = 1 << 20;
    cfg->ds.train_micro_batch_size_per_gpu = 4096;
    cfg->ds.train_batch_size = 4096 * cfg->ds.gradient_accumulation_steps;
    rc = sg_config_finalize(cfg, &err);
    ok(rc == SG_EINVAL && strstr(err.msg, "train_micro_batch_size_per_gpu 4096 x max_length "
                                          "1048576 tokens per micro-batch is more than the data "
                                          "loader reads"),
       "finalize refuses a micro-batch the data loader would refuse");
    if (rc != SG_EINVAL)
        tap_diag("  %s", err.msg);
    rc = sg_config_load(src("configs/default.json"), cfg, &err);
    snprintf(cfg->run.machine, sizeof cfg->run.machine, "nosuch");
    rc = sg_config_finalize(cfg, &err);
    ok(rc == SG_ENOENT && strstr(err.msg, "machine nosuch: no file"),
       "finalize refuses a machine with no file");
    rc = sg_config_load(src("configs/default.json"), cfg, &err);
    snprintf(cfg->run.machine, sizeof cfg->run.machine, "mi300a");
    rc = sg_config_finalize(cfg, &err);
    if (!ok(rc == 0, "finalize accepts a shipped machine"))
        tap_diag("  %s", err.msg);

    /* the model must have as many positions as the sequence is long */
    sg_model *m = malloc(sizeof *m);
    rc = sg_config_load(src("configs/default.json"), cfg, &err);
    if (rc == 0)
        rc = sg_config_finalize(cfg, &err);
    cfg->run.max_length = 1024;
    rc = sg_config_load_model(cfg, m, &err);
    if (!ok(rc == 0 && m->max_position_embeddings == 1024,
            "max_length 1024 = max_position_embeddings of tiny-llama: fine"))
        tap_diag("  %s", err.msg);
    cfg->run.max_length = 1025;
    rc = sg_config_load_model(cfg, m, &err);
    ok(rc == SG_EINVAL && strstr(err.msg, "default.json: max_length 1025 is longer than the 1024 "
                                          "positions of model tiny-llama"),
       "max_length 1025 > max_position_embeddings 1024: refused naming both");
    sg_graph g;
    sg_graph_init(&g);
    rc = sg_compile_from_config(cfg, m, &g, &err);
    ok(rc == SG_EINVAL && strstr(err.msg, "max_length 1025 is longer than the 1024"),
       "sg_compile_from_config (run, graph, simulate) refuses it too");
    sg_graph_free(&g);
    free(m);
    free(cfg);
}

/* ---- CLI option strings ----------------------------------------------- */

static void test_option_set(void)
{
    sg_run_options run;
    sg_run_options_defaults(&run);
    sg_error err;
    int rc = sg_run_option_set(&run, "max_length", "4096", &err);
    ok(rc == 0 && run.max_length == 4096, "max_length 4096");
    rc = sg_run_option_set(&run, "max-length", "2048", &err);
    ok(rc == 0 && run.max_length == 2048, "max-length spelling");
    rc = sg_run_option_set(&run, "--bench-steps", "1e2", &err);
    ok(rc == 0 && run.bench_steps == 100, "--bench-steps 1e2 (dashes stripped, 1e2 = 100)");
    rc = sg_run_option_set(&run, "seed", "7", &err);
    ok(rc == 0 && run.seed == 7, "seed 7");
    rc = sg_run_option_set(&run, "ncpus", "-1", &err);
    ok(rc == 0 && run.ncpus == -1, "ncpus -1 (StarPU default)");
    rc = sg_run_option_set(&run, "activation_checkpointing", NULL, &err);
    ok(rc == 0 && run.activation_checkpointing == 1, "bare --activation_checkpointing turns it on");
    rc = sg_run_option_set(&run, "activation-checkpointing", "false", &err);
    ok(rc == 0 && run.activation_checkpointing == 0, "activation-checkpointing false");
    rc = sg_run_option_set(&run, "activation_checkpointing", "on", &err);
    ok(rc == 0 && run.activation_checkpointing == 1, "activation_checkpointing on");
    rc = sg_run_option_set(&run, "sched", "dmda", &err);
    ok(rc == 0 && !strcmp(run.sched, "dmda"), "sched dmda");
    rc = sg_run_option_set(&run, "model", "models/llama-3.1-8b.json", &err);
    ok(rc == 0 && !strcmp(run.model, "models/llama-3.1-8b.json"), "model path");
    rc = sg_run_option_set(&run, "machine", "gh200", &err);
    ok(rc == 0 && !strcmp(run.machine, "gh200"), "machine gh200");
    rc = sg_run_option_set(&run, "data", "", &err);
    ok(rc == 0 && run.data[0] == '\0', "data may be empty (default data)");

    sg_run_options before = run;
    rc = sg_run_option_set(&run, "max_length", "abc", &err);
    ok(rc == SG_EINVAL, "max_length abc: error");
    is_str(err.msg, "--max_length: expected an integer, got \"abc\"",
           "... names the flag and value");
    rc = sg_run_option_set(&run, "max-length", "0", &err);
    ok(rc == SG_EINVAL, "max-length 0: error");
    is_str(err.msg, "--max-length: 0 is out of range (expected 0 < max_length <= 16777216)",
           "... names the flag as written");
    rc = sg_run_option_set(&run, "max_length", "12x", &err);
    ok(rc == SG_EINVAL, "max_length 12x: error");
    rc = sg_run_option_set(&run, "max_length", "1.5", &err);
    ok(rc == SG_EINVAL, "max_length 1.5: error");
    rc = sg_run_option_set(&run, "max_length", "0x10", &err);
    ok(rc == SG_EINVAL, "max_length 0x10: error (decimal only)");
    rc = sg_run_option_set(&run, "max_length", " 12", &err);
    ok(rc == SG_EINVAL, "max_length with a leading space: error");
    rc = sg_run_option_set(&run, "max_length", NULL, &err);
    ok(rc == SG_EINVAL, "max_length with no value: error");
    rc = sg_run_option_set(&run, "dp_size", "0", &err);
    ok(rc == SG_EINVAL, "dp_size 0: error");
    like(err.msg, "expected dp_size >= 1", "... range");
    rc = sg_run_option_set(&run, "ncuda", "-2", &err);
    ok(rc == SG_EINVAL, "ncuda -2: error");
    rc = sg_run_option_set(&run, "steps", "-1", &err);
    ok(rc == SG_EINVAL, "steps -1: error");
    rc = sg_run_option_set(&run, "activation_checkpointing", "maybe", &err);
    ok(rc == SG_EINVAL, "activation_checkpointing maybe: error");
    like(err.msg, "--activation_checkpointing: expected true or false", "... message");
    rc = sg_run_option_set(&run, "sched", "", &err);
    ok(rc == SG_EINVAL, "empty sched: error");
    char longname[200];
    memset(longname, 'x', sizeof longname - 1);
    longname[sizeof longname - 1] = '\0';
    rc = sg_run_option_set(&run, "machine", longname, &err);
    ok(rc == SG_EINVAL, "machine name longer than SG_NAME_MAX: error");
    like(err.msg, "--machine: value of 199 bytes is too long", "... message");
    rc = sg_run_option_set(&run, "foo", "1", &err);
    ok(rc == SG_EINVAL, "unknown option: error");
    is_str(err.msg, "unknown option --foo", "... names it");
    rc = sg_run_option_set(&run, "max_lenght", "1", &err);
    like(err.msg, "unknown option --max_lenght (did you mean --max_length?)",
         "... with a suggestion");
    ok(memcmp(&run, &before, sizeof run) == 0, "failed sets change nothing");
}

/* ---- optimizer tiles: the same int64 "auto or N" option as batch_tile -- */

static void test_optimizer_tile(void)
{
    sg_run_options run;
    sg_run_options_defaults(&run);
    sg_error err;
    ok(run.optimizer_tile == SG_TILE_AUTO, "optimizer_tile defaults to auto");
    int rc = sg_run_option_set(&run, "optimizer-tile", "4e3", &err);
    ok(rc == 0 && run.optimizer_tile == 4000, "optimizer-tile 4e3 is 4000 elements");
    rc = sg_run_option_set(&run, "optimizer_tile", "0", &err);
    ok(rc == 0 && run.optimizer_tile == 0, "optimizer_tile 0 (untiled)");
    rc = sg_run_option_set(&run, "optimizer_tile", "auto", &err);
    ok(rc == 0 && run.optimizer_tile == SG_TILE_AUTO, "optimizer_tile auto");
    sg_run_options before = run;
    rc = sg_run_option_set(&run, "optimizer_tile", "1099511627777", &err);
    ok(rc == SG_EINVAL, "optimizer_tile 2^40 + 1: error");
    like(err.msg, "optimizer_tile <= 1099511627776", "... names the upper bound");
    rc = sg_run_option_set(&run, "optimizer_tile", "0x10", &err);
    ok(rc == SG_EINVAL, "optimizer_tile 0x10: error (no hex)");
    ok(memcmp(&run, &before, sizeof run) == 0, "failed optimizer_tile sets change nothing");
    run.optimizer_tile = -7;
    ok(sg_run_options_check(&run, "x", &err) == SG_EINVAL, "check: optimizer_tile -7 is refused");
}

/* ---- batch tiles: the option and the rule of "auto" ------------------- */

static void test_batch_tile(void)
{
    sg_run_options run;
    sg_run_options_defaults(&run);
    sg_error err;
    ok(run.batch_tile == SG_TILE_AUTO, "batch_tile defaults to auto");
    int rc = sg_run_option_set(&run, "batch_tile", "3", &err);
    ok(rc == 0 && run.batch_tile == 3, "batch_tile 3");
    rc = sg_run_option_set(&run, "batch-tile", "auto", &err);
    ok(rc == 0 && run.batch_tile == SG_TILE_AUTO, "batch-tile auto");
    rc = sg_run_option_set(&run, "batch_tile", "0", &err);
    ok(rc == 0 && run.batch_tile == 0, "batch_tile 0 (untiled)");
    sg_run_options before = run;
    rc = sg_run_option_set(&run, "batch_tile", "-1", &err);
    ok(rc == SG_EINVAL, "batch_tile -1: error (auto is written auto)");
    like(err.msg, "expected batch_tile >= 0", "... range");
    rc = sg_run_option_set(&run, "batch_tile", "Auto", &err);
    ok(rc == SG_EINVAL, "batch_tile Auto: error");
    is_str(err.msg, "--batch_tile: expected auto or an integer, got \"Auto\"", "... message");
    rc = sg_run_option_set(&run, "batch_tile", NULL, &err);
    ok(rc == SG_EINVAL, "batch_tile with no value: error");
    ok(memcmp(&run, &before, sizeof run) == 0, "failed batch_tile sets change nothing");
    run.batch_tile = -5;
    ok(sg_run_options_check(&run, "x", &err) == SG_EINVAL, "check: batch_tile -5 is refused");
    run.batch_tile = SG_TILE_AUTO;
    ok(sg_run_options_check(&run, "x", &err) == SG_OK, "check: auto passes");

    sg_config *cfg = calloc(1, sizeof *cfg);
    if (!cfg)
        return;
    sg_run_options_defaults(&cfg->run);
    /* tiles x micro-steps >= CPU workers; tile = ceil(B / tiles) */
    static const struct {
        int64_t B, A, W;
        int cuda;
        int64_t want;
    } rows[] = {
        {8, 1, 2, 0, 4}, {8, 1, 3, 0, 3}, {8, 1, 16, 0, 1}, {8, 2, 4, 0, 4}, {2, 4, 2, 0, 0},
        {8, 1, 1, 0, 0}, {1, 1, 8, 0, 0}, {8, 1, 2, 1, 0},  {5, 1, 2, 0, 3},
    };
    int good = 1;
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        cfg->ds.train_micro_batch_size_per_gpu = rows[i].B;
        cfg->ds.gradient_accumulation_steps = rows[i].A;
        int64_t got = sg_step_auto_batch_tile(cfg, rows[i].W, rows[i].cuda);
        if (got != rows[i].want) {
            tap_diag("B %lld A %lld workers %lld cuda %d: tile %lld, expected %lld",
                     (long long)rows[i].B, (long long)rows[i].A, (long long)rows[i].W, rows[i].cuda,
                     (long long)got, (long long)rows[i].want);
            good = 0;
        }
    }
    ok(good, "auto: untiled with CUDA or one worker, else min(B, ceil(workers / A)) tiles "
             "of ceil(B / tiles)");
    cfg->run.ncpus = 6;
    ok(sg_step_cpu_workers(cfg, 72) == 6, "CPU workers: ncpus when set");
    cfg->run.ncpus = -1;
    ok(sg_step_cpu_workers(cfg, 72) == 72 && sg_step_cpu_workers(cfg, 0) >= 1,
       "CPU workers: else the machine model's, else this host's (>= 1)");
    cfg->run.ncuda = 0;
    ok(sg_step_uses_cuda(cfg, 4) == 0, "CUDA: ncuda 0 says no, whatever the machine");
    cfg->run.ncuda = -1;
    ok(sg_step_uses_cuda(cfg, 4) == 1 && sg_step_uses_cuda(cfg, 0) == 0,
       "CUDA: else the machine model's GPU count");
    cfg->ds.train_micro_batch_size_per_gpu = 8;
    cfg->ds.gradient_accumulation_steps = 1;
    cfg->run.ncpus = 2;
    cfg->run.ncuda = 0;
    sg_config_resolve_tiles(cfg, 0, 0);
    ok(cfg->run.batch_tile == 4, "resolve: auto becomes 4 for 2 workers and 8 x 1");
    cfg->run.batch_tile = 0;
    sg_config_resolve_tiles(cfg, 0, 0);
    ok(cfg->run.batch_tile == 0, "resolve: a set value stays");
    free(cfg);
}

/* ---- files and text --------------------------------------------------- */

static void test_files(void)
{
    sg_config *cfg = malloc(sizeof *cfg);
    sg_error err;
    int rc = sg_config_load(src("tests/data/no-such-file.json"), cfg, &err);
    ok(rc == SG_ENOENT, "missing file: SG_ENOENT");
    like(err.msg, "tests/data/no-such-file.json: cannot open", "... names the path");
    rc = sg_config_load(src("tests/data"), cfg, &err);
    ok(rc == SG_EIO, "a directory: SG_EIO");
    like(err.msg, "is a directory", "... says so");
    rc = sg_config_load("", cfg, &err);
    ok(rc == SG_EINVAL, "empty path: SG_EINVAL");

    char tmpl[] = "/tmp/sg_test_config_XXXXXX";
    int fd = mkstemp(tmpl);
    if (ok(fd >= 0, "temporary file")) {
        FILE *f = fdopen(fd, "w");
        fputs("{\"train_micro_batch_size_per_gpu\": 1", f);
        for (int i = 0; i < (17 << 20) / 64; i++)
            fputs("                                                                ", f);
        fputs("}", f);
        fclose(f);
        rc = sg_config_load(tmpl, cfg, &err);
        ok(rc == SG_EINVAL, "a 17 MiB file is refused");
        like(err.msg, "over 16 MiB are refused", "... with the limit");

        f = fopen(tmpl, "w");
        fputs("{\"train_micro_batch_size_per_gpu\": 1}", f);
        fclose(f);
        chmod(tmpl, 0);
        if (geteuid() == 0) {
            tap_skip(2, "running as root: an unreadable file cannot be made");
        } else {
            rc = sg_config_load(tmpl, cfg, &err);
            ok(rc == SG_EIO, "unreadable file: SG_EIO");
            like(err.msg, "Permission denied", "... says why");
        }
        unlink(tmpl);
    }

    /* sg_ds_config_parse on text */
    sg_ds_config ds;
    sg_config_warnings w = {0};
    rc = sg_ds_config_parse(
        "{\n  \"zero_optimization\": {\"stage\": 2},\n  \"fp16\": {\"enabled\": tru}\n}",
        "inline.json", &ds, &w, &err);
    ok(rc == SG_EINVAL, "bad JSON text: error");
    like(err.msg, "inline.json: invalid JSON at line 3", "... with origin and line number");
    rc = sg_ds_config_parse("{\"zero_optimization\": {\"stage\": 2, \"stage3_bar\": 1}}", "t.json",
                            &ds, &w, &err);
    ok(rc == 0 && ds.zero.stage == 2, "sg_ds_config_parse reads text");
    ok(w.count == 1 && strstr(w.msg[0], "t.json: unknown key zero_optimization.stage3_bar ignored"),
       "... and appends warnings");
    rc = sg_ds_config_parse("{\"zero_optimization\": {\"stage\": 2}}", "t.json", &ds, NULL, &err);
    ok(rc == 0, "warnings may be NULL");
    sg_ds_config keep = ds;
    rc = sg_ds_config_parse("{\"zero_optimization\": {\"stage\": 9}}", "t.json", &ds, &w, &err);
    ok(rc == SG_EINVAL && memcmp(&ds, &keep, sizeof ds) == 0, "a failed parse leaves ds untouched");
    rc = sg_ds_config_parse("\"just a string\"", "t.json", &ds, &w, &err);
    like(err.msg, "t.json: expected a JSON object at the top level, got a string",
         "top level string");
    rc = sg_ds_config_parse("{\"train_batch_size\": 4}\0{}", "t.json", &ds, &w, &err);
    ok(rc == 0, "text stops at its NUL");
    free(cfg);
}

/* ---- "auto": the Hugging Face Trainer's values (ds_auto.c) ---------------- */

static const sg_ds_auto_entry *find_auto(const sg_config *cfg, const char *key)
{
    for (int i = 0; i < cfg->autos.n; i++)
        if (!strcmp(cfg->autos.fill[i].key, key))
            return &cfg->autos.fill[i];
    return NULL;
}

static void test_auto(void)
{
    sg_config *cfg = malloc(sizeof *cfg);
    sg_error err;
    /* loading leaves "auto" pending with the default in the field */
    int rc = sg_config_load(src("tests/data/good-configs/batch-auto.json"), cfg, &err);
    ok(rc == 0 &&
           cfg->ds.auto_pending ==
               (SG_AUTO_BIT(SG_AUTO_TRAIN_BATCH) | SG_AUTO_BIT(SG_AUTO_MICRO_BATCH)) &&
           cfg->ds.train_batch_size == 0 && cfg->ds.train_micro_batch_size_per_gpu == 0,
       "batch-auto.json loads with its two \"auto\" keys pending");
    /* finalize fills them: micro = the Trainer's default 8, train = dp x 8 x 1 */
    cfg->run.dp_size = 3;
    rc = sg_config_finalize(cfg, &err);
    ok(rc == 0 && cfg->ds.auto_pending == 0 && cfg->ds.train_micro_batch_size_per_gpu == 8 &&
           cfg->ds.train_batch_size == 24 && cfg->ds.gradient_accumulation_steps == 1,
       "batch-auto.json: micro 8 (the Trainer's default), train 3 x 8 x 1 = 24 (%s)", err.msg);
    const sg_ds_auto_entry *e = find_auto(cfg, "train_batch_size");
    ok(cfg->autos.n == 2 && e && !strcmp(e->value, "24") &&
           strstr(e->source, "dp_size 3 x per_device_train_batch_size 8"),
       "batch-auto.json: two filled values, train_batch_size with its formula");

    /* a run option given takes the place of the default */
    rc = sg_config_load(src("tests/data/good-configs/batch-auto.json"), cfg, &err);
    if (!rc)
        rc = sg_run_option_set(&cfg->run, "per-device-train-batch-size", "3", &err);
    if (!rc)
        rc = sg_config_finalize(cfg, &err);
    e = find_auto(cfg, "train_micro_batch_size_per_gpu");
    ok(rc == 0 && cfg->ds.train_micro_batch_size_per_gpu == 3 && e &&
           !strcmp(e->source, "run option per_device_train_batch_size"),
       "--per-device-train-batch-size 3 fills the micro batch (%s)", err.msg);

    /* fp16.enabled "auto" is the Trainer's fp16, false unless given */
    rc = sg_config_load(src("tests/data/good-configs/fp16-enabled-auto.json"), cfg, &err);
    if (!rc)
        rc = sg_config_finalize(cfg, &err);
    ok(rc == 0 && !cfg->ds.fp16.enabled && find_auto(cfg, "fp16.enabled"),
       "fp16-enabled-auto.json: fp16 off, as the Trainer's default (%s)", err.msg);
    rc = sg_config_load(src("tests/data/good-configs/fp16-enabled-auto.json"), cfg, &err);
    if (!rc)
        rc = sg_run_option_set(&cfg->run, "fp16", NULL, &err);
    if (!rc)
        rc = sg_config_finalize(cfg, &err);
    ok(rc == 0 && cfg->ds.fp16.enabled == 1, "fp16-enabled-auto.json with --fp16: fp16 on");

    /* an "auto" DeepSpeed drops: the default, a warning, nothing pending */
    rc = sg_config_load(src("tests/data/good-configs/auto-dropped-by-deepspeed.json"), cfg, &err);
    ok(rc == 0 && cfg->ds.auto_pending == 0 && cfg->warnings.count == 4 &&
           cfg->ds.zero.stage3_prefetch_bucket_size == 50000000 && !cfg->ds.bf16.enabled &&
           cfg->ds.zero.offload_optimizer.device == SG_OFFLOAD_NONE,
       "auto-dropped-by-deepspeed.json: 4 warnings, DeepSpeed's defaults (%d)",
       cfg->warnings.count);

    /* a failed fill leaves cfg as it was */
    rc = sg_config_load(src("tests/data/bad-configs/hf-trainer-zero3.json"), cfg, &err);
    sg_config *before = malloc(sizeof *before);
    memcpy(before, cfg, sizeof *cfg);
    if (!rc)
        rc = sg_config_finalize(cfg, &err);
    ok(rc == SG_EINVAL && memcmp(before, cfg, sizeof *cfg) == 0,
       "hf-trainer-zero3.json without steps: finalize fails and leaves cfg untouched");
    free(before);

    /* the run options' ranges */
    sg_run_options run;
    sg_run_options_defaults(&run);
    ok(sg_run_option_set(&run, "adam_beta2", "1", &err) == SG_EINVAL &&
           strstr(err.msg, "--adam_beta2: 1 is out of range"),
       "--adam_beta2 1 is out of range (%s)", err.msg);
    ok(sg_run_option_set(&run, "learning_rate", "fast", &err) == SG_EINVAL &&
           strstr(err.msg, "expected a number, got \"fast\""),
       "--learning_rate fast is refused");
    ok(sg_run_option_set(&run, "per_device_train_batch_size", "0", &err) == SG_EINVAL,
       "--per_device_train_batch_size 0 is refused");
    ok(sg_run_options_check(&run, "x", &err) == SG_OK, "check: options not given pass");
    free(cfg);
}

int main(void)
{
    const char *s = getenv("SG_SRCDIR");
    if (s && *s)
        srcdir = s;
    struct stat st;
    if (!ok(stat(src("tests/data/bad-configs/EXPECTED.tsv"), &st) == 0,
            "test data found under SG_SRCDIR=%s", srcdir))
        return tap_done();
    test_shipped();
    test_defaults();
    test_forms();
    test_unknown_keys();
    test_batch_rule();
    test_bad_configs();
    test_run_configs();
    test_option_set();
    test_optimizer_tile();
    test_batch_tile();
    test_strict_inputs();
    test_files();
    test_auto();
    return tap_done();
}
