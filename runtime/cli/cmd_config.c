/* cmd_config.c - `stepgraph config`: check a config, print what it resolves to. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "graph/compile.h"
#include "runtime/cli/cli.h"
#include "runtime/config/step_spec.h"

static void config_help(void)
{
    printf("usage: stepgraph config CONFIG [run options]\n"
           "\n"
           "Checks a DeepSpeed or run config (errors name the JSON path and value;\n"
           "unknown keys are warned about), fills \"auto\" values as the Hugging Face\n"
           "Trainer does (from the run options named after TrainingArguments, and the\n"
           "model), applies DeepSpeed's batch rule, and prints the resolved settings,\n"
           "the optimizer sub-group layout and each filled \"auto\" value with its\n"
           "source.\n\n");
    sg_cli_print_run_flags();
}

static const char *offload_name(sg_offload_device d)
{
    return d == SG_OFFLOAD_CPU ? "cpu" : d == SG_OFFLOAD_NVME ? "nvme" : "none";
}

/* The lr schedule in one line: its name and the parameters it uses. */
static void print_scheduler(const sg_ds_config *ds)
{
    const char *warm = ds->scheduler.warmup_type == SG_WARMUP_LINEAR ? "linear" : "log";
    long long w = (long long)ds->scheduler.warmup_num_steps;
    long long total = (long long)ds->scheduler.total_num_steps;
    printf("scheduler:        ");
    switch (ds->scheduler.type) {
    case SG_SCHED_NONE: printf("none (constant lr)\n"); break;
    case SG_SCHED_WARMUP_LR:
        printf("WarmupLR: %s warm-up over %lld updates from %g to %g, then constant\n", warm, w,
               ds->scheduler.warmup_min_lr, ds->scheduler.warmup_max_lr);
        break;
    case SG_SCHED_WARMUP_DECAY_LR:
        printf("WarmupDecayLR: %s warm-up over %lld updates from %g to %g, then linear decay "
               "to %g at update %lld\n",
               warm, w, ds->scheduler.warmup_min_lr, ds->scheduler.warmup_max_lr,
               ds->scheduler.warmup_min_lr, total);
        break;
    case SG_SCHED_WARMUP_COSINE_LR:
        printf("WarmupCosineLR: the first update at lr 0, %s warm-up over %lld updates from "
               "%g to 1 x lr, then cosine decay to %g x lr at update %lld\n",
               warm, w, ds->scheduler.warmup_min_ratio, ds->scheduler.cos_min_ratio, total);
        break;
    case SG_SCHED_ONE_CYCLE: {
        long long s1 = (long long)ds->scheduler.cycle_first_step_size;
        long long s2 = ds->scheduler.cycle_second_step_size > 0
                           ? (long long)ds->scheduler.cycle_second_step_size
                           : s1;
        printf("OneCycle: lr %g up to %g over %lld updates, back over %lld",
               ds->scheduler.cycle_min_lr, ds->scheduler.cycle_max_lr, s1, s2);
        if (ds->scheduler.cycle_momentum)
            printf(", beta1 %g down to %g and back (beta2 0.99)", ds->scheduler.cycle_max_mom,
                   ds->scheduler.cycle_min_mom);
        if (ds->scheduler.decay_step_size > 0 && ds->scheduler.decay_lr_rate > 0)
            printf(", then lr / (1 + %g n) after n x %lld updates", ds->scheduler.decay_lr_rate,
                   (long long)ds->scheduler.decay_step_size);
        printf("\n");
        break;
    }
    case SG_SCHED_LR_RANGE_TEST:
        printf("LRRangeTest: lr %g x (1 + %g n), n = updates / %lld%s\n",
               ds->scheduler.lr_range_test_min_lr, ds->scheduler.lr_range_test_step_rate,
               (long long)ds->scheduler.lr_range_test_step_size,
               ds->scheduler.lr_range_test_staircase ? " (whole stairs)" : "");
        break;
    }
}

/* The "auto" values finalize filled (runtime/config/ds_auto.h), one per
 * line as KEY = VALUE (SOURCE), values written as JSON would. */
static void print_autos(const sg_ds_autos *a)
{
    if (!a->n)
        return;
    printf("auto values:      %d filled as the Hugging Face Trainer fills them:\n", a->n);
    for (int i = 0; i < a->n; i++)
        printf("  %s = %s (%s)\n", a->fill[i].key, a->fill[i].value, a->fill[i].source);
}

static void print_config(const sg_config *c, const sg_model *m, const sg_subgroup_layout *lay)
{
    const sg_ds_config *ds = &c->ds;
    const sg_run_options *r = &c->run;
    printf("deepspeed config: %s\n", c->ds_path[0] ? c->ds_path : "(inline)");
    if (c->run_path[0])
        printf("run config:       %s\n", c->run_path);
    printf("batch:            train_batch_size %lld = micro %lld x accumulation %lld x dp %lld\n",
           (long long)ds->train_batch_size, (long long)ds->train_micro_batch_size_per_gpu,
           (long long)ds->gradient_accumulation_steps, (long long)r->dp_size);
    printf("precision:        %s\n", ds->bf16.enabled   ? "bf16 (fp32 master weights)"
                                     : ds->fp16.enabled ? "fp16 (dynamic loss scaling)"
                                                        : "fp32");
    if (ds->optimizer.type == SG_OPT_LION)
        printf("optimizer:        Lion lr %g betas (%g, %g) weight_decay %g (decoupled)\n",
               ds->optimizer.lr, ds->optimizer.beta1, ds->optimizer.beta2,
               ds->optimizer.weight_decay);
    else if (ds->optimizer.type == SG_OPT_ADAGRAD)
        printf("optimizer:        Adagrad lr %g lr_decay %g eps %g weight_decay %g (L2) "
               "initial_accumulator_value %g\n",
               ds->optimizer.lr, ds->optimizer.lr_decay, ds->optimizer.eps,
               ds->optimizer.weight_decay, ds->optimizer.initial_accumulator_value);
    else
        printf("optimizer:        %s lr %g betas (%g, %g) eps %g weight_decay %g\n",
               ds->optimizer.type == SG_OPT_ADAMW ? "AdamW" : "Adam", ds->optimizer.lr,
               ds->optimizer.beta1, ds->optimizer.beta2, ds->optimizer.eps,
               ds->optimizer.weight_decay);
    print_scheduler(ds);
    printf("gradient_clipping %g\n", ds->gradient_clipping);
    printf("zero:             stage %lld, sub_group_size %lld, offload_optimizer %s "
           "(ratio %g, super_offload %s, cpuadam_cores_perc %g)\n",
           (long long)ds->zero.stage, (long long)ds->zero.sub_group_size,
           offload_name(ds->zero.offload_optimizer.device), ds->zero.offload_optimizer.ratio,
           ds->zero.offload_optimizer.super_offload ? "on" : "off",
           ds->zero.offload_optimizer.cpuadam_cores_perc);
    if (ds->zero.offload_optimizer.device == SG_OFFLOAD_NVME)
        printf("nvme:             optimizer state in %s, buffer_count %lld (docs/memory.md)\n",
               ds->zero.offload_optimizer.nvme_path,
               (long long)ds->zero.offload_optimizer.buffer_count);
    if (ds->zero.offload_param.device == SG_OFFLOAD_NVME && ds->zero.stage == 3)
        printf("nvme:             parameters in %s, buffer_count %lld\n",
               ds->zero.offload_param.nvme_path, (long long)ds->zero.offload_param.buffer_count);
    if (ds->zero.offload_param.device != SG_OFFLOAD_NONE)
        printf("offload_param:    %s (%s)\n", offload_name(ds->zero.offload_param.device),
               ds->zero.stage == 3 ? "the parameter shards live in host memory; each use of a "
                                     "unit copies them to the device"
                                   : "no effect below ZeRO stage 3");
    if (ds->zero.offload_optimizer.super_offload)
        printf("speculation:      %s\n", r->speculation);
    printf("model:            %s (%lld parameters)\n", m->name,
           (long long)sg_model_total_params(m));
    printf("run:              max_length %lld, steps %lld, warmup_steps %lld, bench_steps %lld, "
           "log_interval %lld, seed %lld\n",
           (long long)r->max_length, (long long)r->steps, (long long)r->warmup_steps,
           (long long)r->bench_steps, (long long)r->log_interval, (long long)r->seed);
    printf("                  activation_checkpointing %s, sched %s, data %s\n",
           r->activation_checkpointing > 0 ? "on" : "off", r->sched,
           r->data[0] ? r->data : "(default)");
    sg_step_spec st;
    sg_step_spec_from_config(c, &st);
    const sg_step_spec *spec = &st;
    if (spec->batch_tile > 0 && spec->batch_tile < spec->micro_batch)
        printf("batch tiles:      %lld sequences per tile, %lld tiles per micro-step "
               "(batch_tile %s)\n",
               (long long)spec->batch_tile,
               (long long)((spec->micro_batch + spec->batch_tile - 1) / spec->batch_tile),
               r->batch_tile == SG_TILE_AUTO ? "auto" : "set");
    else
        printf("batch tiles:      none (batch_tile %s)\n",
               r->batch_tile == SG_TILE_AUTO ? "auto" : "0 or the micro batch");
    char per[64];
    if (ds->zero.sub_group_size > 0)
        snprintf(per, sizeof per, "of up to %lld elements", (long long)ds->zero.sub_group_size);
    else
        snprintf(per, sizeof per, "(one per parameter tensor: sub_group_size 0)");
    printf("sub-groups:       %d %s over %lld rank parameters; 0..%d on the GPU, %d..%d on the "
           "CPU\n",
           lay->nsubgroups, per, (long long)lay->rank_params, lay->first_cpu - 1, lay->first_cpu,
           lay->nsubgroups - 1);
    print_autos(&c->autos);
}

int sg_cmd_config(int argc, char **argv)
{
    for (int i = 0; i < argc; i++)
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            config_help();
            return 0;
        }
    sg_error err = {0};
    sg_config *cfg = calloc(1, sizeof *cfg);
    sg_model *m = calloc(1, sizeof *m);
    int rc = (!cfg || !m) ? sg_error_set(&err, SG_ENOMEM, "out of memory") : SG_OK;
    sg_step_spec spec;
    sg_subgroup_layout lay;
    if (!rc)
        rc = sg_cli_load_config(argc, argv, NULL, 0, cfg, &err);
    /* compiled and dropped: the step compiler's checks (e.g. at most 4096
     * micro-steps) are the ones graph, simulate and run apply */
    sg_graph g;
    sg_graph_init(&g);
    if (!rc)
        rc = sg_compile_from_config(cfg, m, &g, &err);
    sg_graph_free(&g);
    if (!rc) {
        sg_step_spec_from_config(cfg, &spec);
        rc = sg_subgroup_layout_compute(m, &spec, &lay, &err);
    }
    if (!rc)
        print_config(cfg, m, &lay);
    else
        fprintf(stderr, "stepgraph: %s\n", err.msg[0] ? err.msg : sg_strerror(rc));
    free(cfg);
    free(m);
    return rc ? 1 : 0;
}
