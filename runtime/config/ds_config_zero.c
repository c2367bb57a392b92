/* ds_config_zero.c - the "zero_optimization" section of a DeepSpeed config:
 * the stage, the bucket and stage-3 sizes, optimizer and parameter offload
 * (with SuperOffload's keys), DeepSpeed's deprecated spellings, and ZeRO++,
 * MiCS and ZenFlow settings, warned about or refused.
 */
#define _POSIX_C_SOURCE 200809L

#include "runtime/config/ds_config_fields.h"

static int parse_device(pstate *ps, const cJSON *it, const char *path, sg_offload_device *out)
{
    if (!cJSON_IsString(it))
        return sg_json_type_error(&ps->c, it, path, "\"cpu\", \"nvme\" or \"none\"");
    const char *s = it->valuestring;
    if (strcmp(s, "none") == 0)
        *out = SG_OFFLOAD_NONE;
    else if (strcmp(s, "cpu") == 0)
        *out = SG_OFFLOAD_CPU;
    else if (strcmp(s, "nvme") == 0)
        *out = SG_OFFLOAD_NVME;
    else {
        char v[96];
        sg_json_repr(it, v, sizeof v);
        return sg_json_error(&ps->c, SG_EINVAL,
                             "%s: %s is not valid (expected \"cpu\", \"nvme\" or \"none\")", path,
                             v);
    }
    return SG_OK;
}

static int h_opt_device(pstate *ps, const cJSON *it, const char *path)
{
    sg_offload_device d;
    int rc = parse_device(ps, it, path, &d);
    if (rc)
        return rc;
    ps->ds->zero.offload_optimizer.device = d;
    return SG_OK;
}

static int h_param_device(pstate *ps, const cJSON *it, const char *path)
{
    sg_offload_device d;
    int rc = parse_device(ps, it, path, &d);
    if (rc)
        return rc;
    ps->ds->zero.offload_param.device = d;
    return SG_OK;
}

static int str_into(pstate *ps, const cJSON *it, const char *path, char *out, size_t size)
{
    if (!cJSON_IsString(it) || !it->valuestring[0])
        return sg_json_type_error(&ps->c, it, path, "a directory path");
    if (strlen(it->valuestring) >= size)
        return sg_json_error(&ps->c, SG_EINVAL, "%s: the path is longer than %zu bytes", path,
                             size - 1);
    snprintf(out, size, "%s", it->valuestring);
    return SG_OK;
}

static int h_opt_nvme_path(pstate *ps, const cJSON *it, const char *path)
{
    return str_into(ps, it, path, ps->ds->zero.offload_optimizer.nvme_path,
                    sizeof ps->ds->zero.offload_optimizer.nvme_path);
}

static int h_param_nvme_path(pstate *ps, const cJSON *it, const char *path)
{
    return str_into(ps, it, path, ps->ds->zero.offload_param.nvme_path,
                    sizeof ps->ds->zero.offload_param.nvme_path);
}

/* An integer >= 0 with no effect here: warned when not DeepSpeed's default. */
static int warn_int_not(pstate *ps, const cJSON *it, const char *path, int64_t dflt,
                        const char *why)
{
    int64_t v;
    int rc = sg_json_int(&ps->c, it, path, it->string, SG_JSON_LO, 0, 0, NULL, &v);
    if (!rc && v != dflt)
        sg_json_warn(&ps->c, "%s%s: %lld has no effect in stepgraph (ignored): %s", ps->c.prefix,
                     path, (long long)v, why);
    return rc;
}

static int h_param_buffer_size(pstate *ps, const cJSON *it, const char *path)
{
    return warn_int_not(ps, it, path, 100000000,
                        "StarPU moves each parameter piece whole "
                        "between the disk node and RAM (the working set is buffer_count pieces)");
}

static int h_param_max_in_cpu(pstate *ps, const cJSON *it, const char *path)
{
    return warn_int_not(ps, it, path, 1000000000,
                        "the parameter pieces in RAM are bounded by buffer_count");
}

/* ZeRO-Infinity's keys (offload_config.py): nvme_path and buffer_count have a
 * StarPU meaning (the disk node's directory, the RAM working set); the
 * staging details of DeepSpeed's swapper have none (docs/memory.md, "NVMe offload"). */

static const field offload_opt_fields[] = {
    FF("device", h_opt_device),
    FF("nvme_path", h_opt_nvme_path),
    FI("buffer_count", zero.offload_optimizer.buffer_count, NONNEG, 0, 0),
    FB("pin_memory", zero.offload_optimizer.pin_memory),
    /* StarPU always prefetches the next tiles and writes a tile back once
     * its update is done: both pipelines are on whatever the value */
    FX("pipeline_read", X_BOOL),
    FX("pipeline_write", X_BOOL),
    FW("fast_init", W_TRUE,
       "the disk node's files start empty (sparse) and the initial "
       "state is written through StarPU a tensor at a time"),
    FD("ratio", zero.offload_optimizer.ratio, LO | HI, 0, 1),
    FB("super_offload", zero.offload_optimizer.super_offload),
    FX("convert_grad_on_cpu", X_BOOL),
    FD("cpuadam_cores_perc", zero.offload_optimizer.cpuadam_cores_perc, LO | LO_OPEN | HI, 0, 1),
};

static int h_offload_opt(pstate *ps, const cJSON *it, const char *path)
{
    int rc = need_object(ps, it, path);
    if (rc)
        return rc;
    return sg_ds_walk(ps, it, path, offload_opt_fields, ARRAY_LEN(offload_opt_fields));
}

static const field offload_param_fields[] = {
    FF("device", h_param_device),
    FF("nvme_path", h_param_nvme_path),
    FI("buffer_count", zero.offload_param.buffer_count, NONNEG, 0, 0),
    FF("buffer_size", h_param_buffer_size),
    FF("max_in_cpu", h_param_max_in_cpu),
    FB("pin_memory", zero.offload_param.pin_memory),
};

static int h_offload_param(pstate *ps, const cJSON *it, const char *path)
{
    int rc = need_object(ps, it, path);
    if (rc)
        return rc;
    return sg_ds_walk(ps, it, path, offload_param_fields, ARRAY_LEN(offload_param_fields));
}

/* Deprecated "cpu_offload": true means offload_optimizer {"device": "cpu"}
 * (pin_memory stays false, as DeepSpeed's new_param_fn builds it). */
static int h_cpu_offload(pstate *ps, const cJSON *it, const char *path)
{
    int b, rc = sg_json_bool(&ps->c, it, path, &b);
    if (rc == SG_OK && b)
        ps->ds->zero.offload_optimizer.device = SG_OFFLOAD_CPU;
    return rc;
}

/* Deprecated "cpu_offload_param": true means offload_param {"device": "cpu"}. */
static int h_cpu_offload_param(pstate *ps, const cJSON *it, const char *path)
{
    int b, rc = sg_json_bool(&ps->c, it, path, &b);
    if (rc == SG_OK && b)
        ps->ds->zero.offload_param.device = SG_OFFLOAD_CPU;
    return rc;
}

/* ZenFlow (selective, delayed optimizer updates): any object turns it on in
 * DeepSpeed, and it changes what each update computes: refused. */
static int h_zenflow(pstate *ps, const cJSON *it, const char *path)
{
    int rc = need_object(ps, it, path);
    if (rc)
        return rc;
    return sg_json_error(&ps->c, SG_ENOTSUP,
                         "%s: ZenFlow is not supported by stepgraph (its "
                         "offloaded optimizer steps every parameter at every update)",
                         path);
}

static const field zero_fields[] = {
    FIE("stage", zero.stage, LO | HI, 0, 3, "expected 0, 1, 2 or 3"),
    FB("overlap_comm", zero.overlap_comm),
    FB("contiguous_gradients", zero.contiguous_gradients),
    FB("reduce_scatter", zero.reduce_scatter),
    FB("allgather_partitions", zero.allgather_partitions),
    /* DeepSpeed (zero/config.py) takes 0: each gradient reduced, each
     * parameter gathered, on its own */
    FI("allgather_bucket_size", zero.allgather_bucket_size, NONNEG, 0, 0),
    FI("reduce_bucket_size", zero.reduce_bucket_size, NONNEG, 0, 0),
    /* 0: each parameter tensor its own sub-group, as DeepSpeed's stage 3
     * (axolotl's ZeRO-3 files write it) */
    FI("sub_group_size", zero.sub_group_size, NONNEG, 0, 0),
    /* pydantic aliases: both spellings are accepted by DeepSpeed */
    FI("stage3_max_live_parameters", zero.stage3_max_live_parameters, NONNEG, 0, 0),
    FI("max_live_parameters", zero.stage3_max_live_parameters, NONNEG, 0, 0),
    FI("stage3_max_reuse_distance", zero.stage3_max_reuse_distance, NONNEG, 0, 0),
    FI("max_reuse_distance", zero.stage3_max_reuse_distance, NONNEG, 0, 0),
    FI("stage3_prefetch_bucket_size", zero.stage3_prefetch_bucket_size, NONNEG, 0, 0),
    FI("prefetch_bucket_size", zero.stage3_prefetch_bucket_size, NONNEG, 0, 0),
    FI("stage3_param_persistence_threshold", zero.stage3_param_persistence_threshold, NONNEG, 0, 0),
    FI("param_persistence_threshold", zero.stage3_param_persistence_threshold, NONNEG, 0, 0),
    FB("stage3_gather_16bit_weights_on_model_save", zero.stage3_gather_16bit_weights_on_model_save),
    FB("gather_16bit_weights_on_model_save", zero.stage3_gather_16bit_weights_on_model_save),
    FB("stage3_gather_fp16_weights_on_model_save", zero.stage3_gather_16bit_weights_on_model_save),
    FF("offload_optimizer", h_offload_opt),
    FF("offload_param", h_offload_param),
    FF("cpu_offload", h_cpu_offload),
    FF("cpu_offload_param", h_cpu_offload_param),
    FX("cpu_offload_use_pin_memory", X_BOOL), /* no effect in DeepSpeed either */
    FX("round_robin_gradients", X_BOOL),
    FX("load_from_fp32_weights", X_BOOL),
    FX("elastic_checkpoint", X_BOOL),
    FX("ignore_unused_parameters", X_BOOL),
    FX("legacy_stage1", X_BOOL),
    FX("use_multi_rank_bucket_allreduce", X_BOOL),
    FX("stage3_model_persistence_threshold", X_INT),
    FX("model_persistence_threshold", X_INT),
    FX("stage3_module_granularity_threshold", X_INT),
    FX("module_granularity_threshold", X_INT),
    FX("stage3_use_all_reduce_for_fetch_params", X_BOOL),
    FX("use_all_reduce_for_fetch_params", X_BOOL),
    FX("stage3_allgather_sequential", X_BOOL),
    FX("allgather_sequential", X_BOOL),
    FX("stage3_partition_stream_chunk_size", X_INT),
    FX("partition_stream_chunk_size", X_INT),
    FX("memory_efficient_linear", X_BOOL),
    FX("override_module_apply", X_BOOL),
    FX("pipeline_loading_checkpoint", X_BOOL),
    FX("log_trace_cache_warnings", X_BOOL),
    FX("enable_sanity_checks", X_BOOL),
    FW("zero_hpz_partition_size", W_GT1,
       "ZeRO++'s secondary partition is not modelled (parameters are gathered from every rank)"),
    FW("zero_quantized_weights", W_TRUE,
       "ZeRO++'s quantized collectives are not modelled (weights move in their training dtype)"),
    FW("zero_quantized_nontrainable_weights", W_TRUE,
       "ZeRO++'s quantized collectives are not modelled (weights move in their training dtype)"),
    FW("zero_quantized_gradients", W_TRUE,
       "ZeRO++'s quantized collectives are not modelled (gradients are reduced in fp32)"),
    FW("zeropp_loco_param", W_OBJ, "ZeRO++'s LoCo compression is not modelled"),
    FW("mics_shard_size", W_POS,
       "MiCS shard groups are not modelled (ZeRO shards over every rank)"),
    FX("mics_hierarchical_params_gather", X_BOOL),
    FX("save_muon_momentum_buffer_in_memory", X_BOOL),
    FX("leaf_module", X_OBJ),
    FX("compute_grad_norm", X_BOOL),   /* stepgraph always has the norm */
    FX("parameter_alignment", X_BOOL), /* padding of DeepSpeed's flat buffers */
    FF("zenflow", h_zenflow),
};

int sg_ds_h_zero(pstate *ps, const cJSON *it, const char *path)
{
    sg_ds_config *ds = ps->ds;
    if (cJSON_IsBool(it)) {
        /* zero/config.py read_zero_config_deprecated: true means stage 1 */
        ds->zero.stage = cJSON_IsTrue(it) ? 1 : 0;
        sg_json_warn(&ps->c, "%s%s: %s is DeepSpeed's deprecated form, read as {\"stage\": %d}",
                     ps->c.prefix, path, cJSON_IsTrue(it) ? "true" : "false", (int)ds->zero.stage);
        return SG_OK;
    }
    int rc = need_object(ps, it, path);
    if (rc)
        return rc;
    if ((rc = sg_ds_walk(ps, it, path, zero_fields, ARRAY_LEN(zero_fields))))
        return rc;
    /* overlap_comm: None means true for stage 3, false otherwise */
    if (!get_given(it, "overlap_comm"))
        ds->zero.overlap_comm = ds->zero.stage == 3;
    /* only DeepSpeed's ZeRO-3 partitions parameters; its stage 1 and 2
     * optimizers never read offload_param */
    if (ds->zero.offload_param.device != SG_OFFLOAD_NONE && ds->zero.stage != 3)
        sg_json_warn(&ps->c,
                     "%s%s.offload_param: device \"%s\" has no effect at stage %lld "
                     "(ignored, as in DeepSpeed: only ZeRO stage 3 offloads parameters)",
                     ps->c.prefix, path,
                     ds->zero.offload_param.device == SG_OFFLOAD_CPU ? "cpu" : "nvme",
                     (long long)ds->zero.stage);
    return SG_OK;
}
