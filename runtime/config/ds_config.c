/* ds_config.c - the DeepSpeed JSON config: defaults, the top-level table,
 * the precision and activation_checkpointing sections, and parsing (the
 * cross-field checks: ds_config_check.c; see ds_config.h).
 *
 * Semantics and defaults follow DeepSpeed 0.19.8 (deepspeed/runtime/config.py,
 * zero/config.py, zero/offload_config.py, precision_config.py,
 * lr_schedules.py, engine.py). docs/config-keys.md lists every key.
 *
 * Parsing is table-driven: each JSON object is walked key by key against a
 * table of fields; a key not in the table is a warning naming its path, a
 * wrong type or value is an error naming the path, the value and what was
 * expected. Results go to a scratch copy that is committed only on success,
 * so a failed load leaves the caller's config untouched.
 *
 * The walker and the tables' types are in ds_config_walk.c and
 * ds_config_fields.h; the optimizer and scheduler sections in
 * ds_config_optimizer.c, zero_optimization in ds_config_zero.c.
 */

#define _POSIX_C_SOURCE 200809L

#include "runtime/config/ds_config_fields.h"

#include <math.h>
#include <stdlib.h>

/* ---- defaults --------------------------------------------------------- */

void sg_ds_config_defaults(sg_ds_config *ds)
{
    memset(ds, 0, sizeof *ds);
    /* Batch sizes: 0 = not given; sg_config_finalize() derives them. */
    ds->steps_per_print = 0; /* DeepSpeed >= 0.18: None, no progress lines */

    /* With no "optimizer" section DeepSpeed uses the client's optimizer; the
     * SuperOffload script passes DeepSpeedCPUAdam() with its defaults, which
     * is AdamW-mode Adam with these values. */
    ds->optimizer.given = 0;
    ds->optimizer.type = SG_OPT_ADAMW;
    ds->optimizer.lr = 1e-3;
    ds->optimizer.beta1 = 0.9;
    ds->optimizer.beta2 = 0.999;
    ds->optimizer.eps = 1e-8;
    ds->optimizer.weight_decay = 0.0; /* FusedAdam / DeepSpeedCPUAdam */
    ds->optimizer.adam_w_mode = 1;    /* ADAM_W_MODE_DEFAULT = True */
    ds->optimizer.bias_correction = 1;

    ds->scheduler.type = SG_SCHED_NONE;
    ds->scheduler.warmup_min_lr = 0.0;
    ds->scheduler.warmup_max_lr = 1e-3;
    ds->scheduler.warmup_num_steps = 1000;
    ds->scheduler.total_num_steps = 0;
    ds->scheduler.warmup_type = SG_WARMUP_LOG;
    ds->scheduler.warmup_min_ratio = 0.0;
    ds->scheduler.cos_min_ratio = 1e-4;
    ds->scheduler.cycle_min_lr = NAN; /* required: NAN = not given */
    ds->scheduler.cycle_max_lr = NAN;
    ds->scheduler.cycle_first_step_size = 2000;
    ds->scheduler.cycle_momentum = 1;
    ds->scheduler.cycle_min_mom = 0.8;
    ds->scheduler.cycle_max_mom = 0.9;
    ds->scheduler.lr_range_test_min_lr = 1e-3;
    ds->scheduler.lr_range_test_step_size = 2000;
    ds->scheduler.lr_range_test_step_rate = 1.0;

    ds->gradient_clipping = 1.0; /* GRADIENT_CLIPPING_DEFAULT, 0 before 0.19.3 */

    ds->fp16.enabled = 0;
    ds->fp16.loss_scale = 0.0;
    ds->fp16.loss_scale_window = 1000;
    ds->fp16.hysteresis = 2;
    ds->fp16.min_loss_scale = 1.0;
    ds->fp16.initial_scale_power = 16;

    ds->bf16.enabled = 0;

    ds->zero.stage = 0;
    ds->zero.overlap_comm = 0; /* None in DeepSpeed: true iff stage 3 */
    ds->zero.contiguous_gradients = 1;
    ds->zero.reduce_scatter = 1;
    ds->zero.allgather_partitions = 1;
    ds->zero.allgather_bucket_size = 500000000;
    ds->zero.reduce_bucket_size = 500000000;
    ds->zero.sub_group_size = 1000000000;
    ds->zero.stage3_max_live_parameters = 1000000000;
    ds->zero.stage3_max_reuse_distance = 1000000000;
    ds->zero.stage3_prefetch_bucket_size = 50000000;
    ds->zero.stage3_param_persistence_threshold = 100000;
    ds->zero.stage3_gather_16bit_weights_on_model_save = 0;
    ds->zero.offload_optimizer.device = SG_OFFLOAD_NONE;
    ds->zero.offload_optimizer.pin_memory = 0;
    ds->zero.offload_optimizer.ratio = 1.0;
    ds->zero.offload_optimizer.super_offload = 0;
    ds->zero.offload_optimizer.cpuadam_cores_perc = 0.8;
    ds->zero.offload_param.device = SG_OFFLOAD_NONE;
    ds->zero.offload_param.pin_memory = 0;
    /* DeepSpeed's defaults (offload_config.py): 4 optimizer buffers, 5 parameter buffers */
    ds->zero.offload_optimizer.buffer_count = 4;
    ds->zero.offload_param.buffer_count = 5;

    /* activation_checkpointing: all false, number_checkpoints None (0) */
    ds->wall_clock_breakdown = 0;
}

/* ---- sections handled here ------------------------------------------- */

/* Sections that change the step entirely when enabled (amp, elasticity,
 * torch_autocast): accepted when off, refused when on. */
static int h_enabled_unsupported(pstate *ps, const cJSON *it, const char *path)
{
    int rc = need_object(ps, it, path);
    if (rc)
        return rc;
    const cJSON *en = get_given(it, "enabled");
    if (!en)
        return SG_OK;
    char kp[256];
    join(kp, sizeof kp, path, "enabled");
    int b;
    if ((rc = sg_json_bool(&ps->c, en, kp, &b)))
        return rc;
    if (b)
        return sg_json_error(&ps->c, SG_ENOTSUP, "%s: true is not supported by stepgraph", kp);
    return SG_OK;
}

/* An integer of a parallelism stepgraph does not have (tensor, sequence):
 * 0 or 1 is "off", larger is refused. */
static int refuse_parallel_size(pstate *ps, const cJSON *it, const char *kp, const char *name,
                                const char *what)
{
    int64_t v;
    int rc = sg_json_int(&ps->c, it, kp, name, SG_JSON_LO, 0, 0, NULL, &v);
    if (rc == SG_OK && v > 1)
        return sg_json_error(&ps->c, SG_ENOTSUP,
                             "%s: %lld is not supported by stepgraph (%s; "
                             "its ranks are data-parallel only)",
                             kp, (long long)v, what);
    return rc;
}

static int h_sequence_parallel(pstate *ps, const cJSON *it, const char *path)
{
    return refuse_parallel_size(ps, it, path, "sequence_parallel_size",
                                "sequence parallelism splits each sequence over ranks");
}

/* tensor_parallel: AutoTP's autotp_size above 1 is refused; the rest of the
 * object (dtype, overlap) then has nothing to act on. */
static int h_tensor_parallel(pstate *ps, const cJSON *it, const char *path)
{
    int rc = need_object(ps, it, path);
    const cJSON *tp = rc ? NULL : get_given(it, "autotp_size");
    if (!tp)
        return rc;
    char kp[256];
    join(kp, sizeof kp, path, "autotp_size");
    return refuse_parallel_size(ps, tp, kp, "autotp_size",
                                "tensor parallelism splits each layer's weights over ranks");
}

/* gradient_allreduce_op: "mean" (DeepSpeed's default, what stepgraph's
 * ranks do) or "sum", refused. */
static int h_allreduce_op(pstate *ps, const cJSON *it, const char *path)
{
    if (!cJSON_IsString(it))
        return sg_json_type_error(&ps->c, it, path, "\"mean\" or \"sum\"");
    if (strcmp(it->valuestring, "mean") == 0)
        return SG_OK;
    if (strcmp(it->valuestring, "sum") == 0)
        return sg_json_error(&ps->c, SG_ENOTSUP,
                             "%s: \"sum\" is not supported by stepgraph (its "
                             "ranks average their gradients)",
                             path);
    char v[96];
    sg_json_repr(it, v, sizeof v);
    return sg_json_error(&ps->c, SG_EINVAL, "%s: %s is not valid (expected \"mean\" or \"sum\")",
                         path, v);
}

/* ---- precision -------------------------------------------------------- */

static const field fp16_fields[] = {
    FB("enabled", fp16.enabled),
    FW("auto_cast", W_TRUE, "stepgraph casts inputs only as its precision mode says"),
    FD("loss_scale", fp16.loss_scale, NONNEG, 0, 0),
    FI("initial_scale_power", fp16.initial_scale_power, LO | HI, 0, 63),
    /* loss_scale_window and min_loss_scale matter only with dynamic loss
     * scaling: sg_ds_config_check() checks them then, as precision_config.py does */
    FI("loss_scale_window", fp16.loss_scale_window, 0, 0, 0),
    FI("hysteresis", fp16.hysteresis, POS, 0, 0),
    FX("consecutive_hysteresis", X_BOOL),
    FD("min_loss_scale", fp16.min_loss_scale, 0, 0, 0),
    FW("fp16_master_weights_and_grads", W_TRUE,
       "stepgraph keeps fp32 master weights and gradients"),
};

static int h_fp16(pstate *ps, const cJSON *it, const char *path)
{
    int rc = need_object(ps, it, path);
    if (rc)
        return rc;
    return sg_ds_walk(ps, it, path, fp16_fields, ARRAY_LEN(fp16_fields));
}

static const field bf16_fields[] = {
    FB("enabled", bf16.enabled),
    FX("immediate_grad_update", X_BOOL),
    FX("check_grad_overflow", X_BOOL),
    FW("bf16_master_weights_and_grads", W_TRUE,
       "stepgraph keeps fp32 master weights and gradients"),
    FW("bf16_optimizer_states", W_TRUE, "stepgraph keeps the Adam moments in fp32"),
};

static int h_bf16(pstate *ps, const cJSON *it, const char *path)
{
    int rc = need_object(ps, it, path);
    if (rc)
        return rc;
    return sg_ds_walk(ps, it, path, bf16_fields, ARRAY_LEN(bf16_fields));
}

/* "bfloat16" is DeepSpeed's older name, read only when "bf16" is absent. */
static int h_bfloat16(pstate *ps, const cJSON *it, const char *path)
{
    if (ps->bf16_present) {
        sg_json_warn(&ps->c,
                     "%s%s ignored: \"bf16\" is given and takes precedence (as in DeepSpeed)",
                     ps->c.prefix, path);
        return SG_OK;
    }
    ps->bf16_key = "bfloat16";
    return h_bf16(ps, it, path);
}

/* ---- activation_checkpointing ----------------------------------------- */

/* number_checkpoints: an integer > 0; false or null (seen in real configs)
 * mean "not set", as DeepSpeed's None. */
static int h_num_ckpt(pstate *ps, const cJSON *it, const char *path)
{
    if (cJSON_IsFalse(it)) {
        ps->ds->activation_checkpointing.number_checkpoints = 0;
        return SG_OK;
    }
    return sg_json_int(&ps->c, it, path, "number_checkpoints", POS, 0, 0, NULL,
                       &ps->ds->activation_checkpointing.number_checkpoints);
}

static const field act_fields[] = {
    FB("partition_activations", activation_checkpointing.partition_activations),
    FB("cpu_checkpointing", activation_checkpointing.cpu_checkpointing),
    FB("contiguous_memory_optimization", activation_checkpointing.contiguous_memory_optimization),
    FF("number_checkpoints", h_num_ckpt),
    FB("synchronize_checkpoint_boundary", activation_checkpointing.synchronize_checkpoint_boundary),
    FB("profile", activation_checkpointing.profile),
};

static int h_act(pstate *ps, const cJSON *it, const char *path)
{
    int rc = need_object(ps, it, path);
    if (rc)
        return rc;
    ps->ds->activation_checkpointing.given = 1;
    if ((rc = sg_ds_walk(ps, it, path, act_fields, ARRAY_LEN(act_fields))))
        return rc;
    if (ps->ds->activation_checkpointing.cpu_checkpointing)
        sg_json_warn(&ps->c,
                     "%s%s.cpu_checkpointing: true has no effect in stepgraph (ignored): "
                     "checkpointed activations stay in the memory of the device that made them",
                     ps->c.prefix, path);
    return SG_OK;
}

/* ---- aio (DeepSpeed's swap_tensor/aio_config.py) ------------------------ */

/* StarPU's disk node does its own reads and writes (one request per buffer,
 * its unistd back-end's threads): none of DeepSpeed's libaio settings has a
 * meaning there. Type-checked; warned when not DeepSpeed's default. */
static const struct {
    const char *name;
    int is_bool;
    int64_t dflt;
} aio_keys[] = {
    {"block_size", 0, 1048576},     {"queue_depth", 0, 8},    {"thread_count", 0, 1},
    {"single_submit", 1, 0},        {"overlap_events", 1, 1}, {"use_gds", 1, 0},
    {"intra_op_parallelism", 0, 1},
};

static int h_aio(pstate *ps, const cJSON *it, const char *path)
{
    int rc = need_object(ps, it, path);
    const char *names[ARRAY_LEN(aio_keys)];
    for (size_t i = 0; i < ARRAY_LEN(aio_keys); i++)
        names[i] = aio_keys[i].name;
    for (const cJSON *k = it->child; k && !rc; k = k->next) {
        char kp[256];
        join(kp, sizeof kp, path, k->string);
        size_t i = 0;
        while (i < ARRAY_LEN(aio_keys) && strcmp(aio_keys[i].name, k->string) != 0)
            i++;
        if (i == ARRAY_LEN(aio_keys)) {
            sg_ds_warn_unknown(&ps->c, kp, k->string, names, ARRAY_LEN(aio_keys), 0);
            continue;
        }
        int b = 0;
        int64_t v = 0;
        if (cJSON_IsNull(k))
            continue;
        rc = aio_keys[i].is_bool
                 ? sg_json_bool(&ps->c, k, kp, &b)
                 : sg_json_int(&ps->c, k, kp, k->string, SG_JSON_LO, 0, 0, NULL, &v);
        if (!rc && (aio_keys[i].is_bool ? b : v) != aio_keys[i].dflt) {
            char r[96];
            sg_json_repr(k, r, sizeof r);
            sg_json_warn(&ps->c,
                         "%s%s: %s has no effect in stepgraph (ignored): StarPU's disk "
                         "node does its own I/O (docs/memory.md, NVMe offload)",
                         ps->c.prefix, kp, r);
        }
    }
    return rc;
}

/* ---- top level -------------------------------------------------------- */

static const field top_fields[] = {
    FI("train_batch_size", train_batch_size, POS, 0, 0),
    FI("train_micro_batch_size_per_gpu", train_micro_batch_size_per_gpu, POS, 0, 0),
    FI("gradient_accumulation_steps", gradient_accumulation_steps, POS, 0, 0),
    FI("steps_per_print", steps_per_print, POS, 0, 0),
    FF("optimizer", sg_ds_h_optimizer),
    FF("scheduler", sg_ds_h_scheduler),
    FD("gradient_clipping", gradient_clipping, NONNEG, 0, 0),
    FF("fp16", h_fp16),
    FF("bf16", h_bf16),
    FF("bfloat16", h_bfloat16),
    FF("zero_optimization", sg_ds_h_zero),
    FF("activation_checkpointing", h_act),
    FB("wall_clock_breakdown", wall_clock_breakdown),
    FF("amp", h_enabled_unsupported),
    FF("elasticity", h_enabled_unsupported),
    FF("torch_autocast", h_enabled_unsupported),
    /* accepted, no effect on the compiled step (single process, or logging) */
    FX("zero_allow_untested_optimizer", X_BOOL),
    FX("zero_force_ds_cpu_optimizer", X_BOOL),
    FX("prescale_gradients", X_BOOL),
    FX("gradient_predivide_factor", X_NUM),
    FW("communication_data_type", W_STR, "stepgraph reduces gradients in fp32"),
    FX("seq_parallel_communication_data_type", X_STR),
    FX("sparse_gradients", X_BOOL),
    FX("disable_allgather", X_BOOL),
    FX("dump_state", X_BOOL),
    FX("memory_breakdown", X_BOOL),
    FX("dataloader_drop_last", X_BOOL),
    FX("vocabulary_size", X_INT),
    FX("flops_profiler", X_OBJ),
    FX("tensorboard", X_OBJ),
    FX("wandb", X_OBJ),
    FX("csv_monitor", X_OBJ),
    FX("comet", X_OBJ),
    FX("comms_logger", X_OBJ),
    FX("checkpoint", X_OBJ),
    FX("timers", X_OBJ),
    FF("aio", h_aio),
    FW("data_types", W_OBJ, "stepgraph's gradient dtypes follow its precision mode alone"),
    FX("disable_python_gc", X_BOOL),
    FX("log_level", X_STR),
    FX("use_data_before_expert_parallelism", X_BOOL),
    /* training features that change the step: refused when enabled */
    FF("quantize_training", h_enabled_unsupported),
    FF("progressive_layer_drop", h_enabled_unsupported),
    FF("curriculum_learning", h_enabled_unsupported),
    FF("data_efficiency", h_enabled_unsupported),
    FF("sequence_parallel_size", h_sequence_parallel),
    FF("tensor_parallel", h_tensor_parallel),
    FF("gradient_allreduce_op", h_allreduce_op),
    /* features a training script or another engine must call, or that only
     * change speed: warned when set */
    FW("hybrid_engine", W_ENABLED, "stepgraph trains; it has no generation engine"),
    FW("eigenvalue", W_ENABLED, "stepgraph computes no Hessian eigenvalues"),
    FW("autotuning", W_ENABLED,
       "DeepSpeed's autotuner is its launcher's; stepgraph's counterpart is `stepgraph tune`"),
    FW("nebula", W_ENABLED,
       "stepgraph writes its own checkpoints (docs/training.md, "
       "\"Weights and checkpoints\")"),
    FW("datastates_ckpt", W_OBJ, "stepgraph writes its own checkpoints"),
    FW("compile", W_OBJ,
       "stepgraph compiles the step into a StarPU task graph, not with "
       "torch.compile"),
    FW("graph_harvesting", W_TRUE, "stepgraph does not capture CUDA graphs"),
    FW("managed_gradient_accumulation", W_FALSE,
       "stepgraph accumulates the gradients of the micro-steps itself"),
    FW("pipeline", W_OBJ, "stepgraph has no pipeline parallelism (a DeepSpeed PipelineModule's)"),
    FW("sparse_attention", W_OBJ,
       "stepgraph's attention is dense (DeepSpeed's SparseSelfAttention modules)"),
    FW("compression_training", W_OBJ,
       "stepgraph does not compress (DeepSpeed's init_compression, called by a script)"),
    FW("weight_quantization", W_OBJ, "stepgraph does not quantize weights"),
    FW("expert_parallel", W_OBJ, "stepgraph's ranks keep every expert (data-parallel only)"),
};

int sg_ds_config_is_top_key(const char *key)
{
    return find_field(top_fields, ARRAY_LEN(top_fields), key) != NULL;
}

int sg_ds_config_from_json(const cJSON *root, const sg_json_ctx *c, sg_ds_config *ds)
{
    pstate ps;
    memset(&ps, 0, sizeof ps);
    ps.c = *c;
    ps.ds = ds;
    ps.bf16_key = "bf16";
    ps.bf16_present = get_given(root, "bf16") != NULL;
    sg_ds_config_defaults(ds);

    int rc = sg_ds_walk(&ps, root, "", top_fields, ARRAY_LEN(top_fields));
    if (rc)
        return rc;
    if (ps.nauto)
        return sg_ds_auto_error(&ps);
    if (ds->scheduler.type == SG_SCHED_ONE_CYCLE && ds->scheduler.cycle_momentum &&
        ds->optimizer.type == SG_OPT_ADAGRAD) {
        /* lr_schedules.py: an optimizer without betas turns cycle_momentum off */
        sg_json_warn(&ps.c,
                     "%sscheduler.params.cycle_momentum ignored: Adagrad has no momentum "
                     "(DeepSpeed's OneCycle turns it off for an optimizer without betas)",
                     ps.c.prefix);
        ds->scheduler.cycle_momentum = 0;
    }
    if (ds->scheduler.type == SG_SCHED_ONE_CYCLE && ds->scheduler.cycle_momentum &&
        (ds->optimizer.beta1 != 0.9 || ds->optimizer.beta2 != 0.999))
        /* DeepSpeed's OneCycle writes (momentum, 0.99) into the optimizer */
        sg_json_warn(&ps.c,
                     "%soptimizer.params.betas (%g, %g) are not used: OneCycle with "
                     "cycle_momentum sets %s's betas to (its cycling momentum, 0.99) at every "
                     "update, as DeepSpeed does (set scheduler.params.cycle_momentum false to keep "
                     "them)",
                     ps.c.prefix, ds->optimizer.beta1, ds->optimizer.beta2,
                     ds->optimizer.type == SG_OPT_LION ? "Lion" : "Adam");
    if (ds->scheduler.type != SG_SCHED_NONE && !ps.warmup_max_lr_given)
        /* lr_schedules.py: WarmupLR's default is the optimizer's lr;
         * WarmupDecayLR's own default is 0.001. */
        ds->scheduler.warmup_max_lr =
            ds->scheduler.type == SG_SCHED_WARMUP_LR ? ds->optimizer.lr : 1e-3;
    return sg_ds_config_check(c, ds, ps.bf16_key);
}

int sg_ds_config_parse(const char *json_text, const char *origin, sg_ds_config *ds,
                       sg_config_warnings *warn, sg_error *err)
{
    if (!origin)
        origin = "deepspeed config";
    if (!json_text || !ds)
        return sg_error_set(err, SG_EINVAL, "%s: no JSON text given", origin);
    cJSON *root;
    int rc = sg_json_parse(json_text, strlen(json_text), origin, &root, err);
    if (rc)
        return rc;
    if (!cJSON_IsObject(root)) {
        rc = sg_error_set(err, SG_EINVAL, "%s: expected a JSON object at the top level, got %s",
                          origin, sg_json_kind(root));
        cJSON_Delete(root);
        return rc;
    }
    sg_ds_config tmp;
    sg_config_warnings *wtmp = NULL;
    if (warn) {
        wtmp = malloc(sizeof *wtmp);
        if (!wtmp) {
            cJSON_Delete(root);
            return sg_error_set(err, SG_ENOMEM, "%s: out of memory", origin);
        }
        *wtmp = *warn;
    }
    sg_json_ctx c = {origin, "", wtmp, err};
    rc = sg_ds_config_from_json(root, &c, &tmp);
    cJSON_Delete(root);
    if (rc == SG_OK) {
        *ds = tmp;
        if (warn)
            *warn = *wtmp;
    }
    free(wtmp);
    return rc;
}
