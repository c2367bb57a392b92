/* step_spec.c - DeepSpeed config + run options -> step compiler input. */
#include "runtime/config/step_spec.h"

#include <string.h>

void sg_step_spec_from_config(const sg_config *cfg, sg_step_spec *s)
{
    const sg_ds_config *ds = &cfg->ds;
    sg_step_spec_defaults(s);
    s->zero_stage = (int)ds->zero.stage;
    s->dp_size = cfg->run.dp_size;
    s->micro_batch = ds->train_micro_batch_size_per_gpu;
    s->grad_accum = ds->gradient_accumulation_steps;
    s->seq_len = cfg->run.max_length;
    s->compute_dtype = ds->bf16.enabled ? SG_BF16 : ds->fp16.enabled ? SG_F16 : SG_F32;
    s->activation_checkpointing = cfg->run.activation_checkpointing > 0;
    s->offload_optimizer = ds->zero.offload_optimizer.device == SG_OFFLOAD_CPU;
    s->offload_ratio = ds->zero.offload_optimizer.ratio;
    s->super_offload = ds->zero.offload_optimizer.super_offload;
    s->sub_group_size = ds->zero.sub_group_size;
    s->gradient_clipping = ds->gradient_clipping;
    s->param_persistence_threshold = ds->zero.stage3_param_persistence_threshold;
    s->max_reuse_distance = ds->zero.stage3_max_reuse_distance;
}

int sg_config_load_model(const sg_config *cfg, sg_model *model, sg_error *err)
{
    char path[SG_PATH_MAX];
    int rc = sg_model_resolve(cfg->run.model, NULL, path, sizeof path, err);
    if (rc || (rc = sg_model_load(path, model, err)))
        return rc;
    if (cfg->run.max_length > model->max_position_embeddings)
        return sg_error_set(err, SG_EINVAL,
                            "%s: max_length %lld is longer than the %lld positions of model %s "
                            "(max_position_embeddings in %s)",
                            cfg->run_path[0] ? cfg->run_path : "run options",
                            (long long)cfg->run.max_length,
                            (long long)model->max_position_embeddings, model->name, path);
    return SG_OK;
}

int sg_compile_from_config(const sg_config *cfg, sg_model *model, sg_graph *g, sg_error *err)
{
    int rc = sg_config_load_model(cfg, model, err);
    if (rc)
        return rc;
    sg_step_spec spec;
    sg_step_spec_from_config(cfg, &spec);
    rc = sg_compile_step(model, &spec, g, err);
    if (rc)
        sg_error_prefix(err, "compiling the step of %s: ", model->name);
    return rc;
}
