/* ds_config_check.c - checks of a DeepSpeed config that involve several
 * keys, and DeepSpeed's batch rule (see ds_config.h). The parser runs the
 * checks after reading; sg_config_finalize() runs them again, since a caller
 * may have edited the struct in between, then applies the batch rule once
 * the data-parallel size is known.
 */
#include "runtime/config/ds_config.h"

#include <math.h>
#include <stdint.h>

#include "common/json_util.h"
#include "runtime/config/ds_auto.h"
#include "runtime/config/ds_nvme.h"

int sg_ds_config_check(const sg_json_ctx *c, const sg_ds_config *ds, const char *bf16_key)
{
    const char *Z = "zero_optimization";
    if (ds->fp16.enabled && ds->bf16.enabled)
        return sg_json_error(
            c, SG_EINVAL,
            "fp16.enabled and %s.enabled are both true: enable one of them (DeepSpeed: "
            "bfloat16 and fp16 modes cannot be simultaneously enabled)",
            bf16_key);
    if (ds->fp16.enabled && ds->fp16.loss_scale == 0.0) {
        if (ds->fp16.loss_scale_window <= 0)
            return sg_json_error(c, SG_EINVAL,
                                 "fp16.loss_scale_window: %lld is out of range (expected "
                                 "loss_scale_window > 0 with dynamic loss scaling)",
                                 (long long)ds->fp16.loss_scale_window);
        if (!(ds->fp16.min_loss_scale > 0.0))
            return sg_json_error(c, SG_EINVAL,
                                 "fp16.min_loss_scale: %g is out of range (expected "
                                 "min_loss_scale > 0 with dynamic loss scaling)",
                                 ds->fp16.min_loss_scale);
    }
    if (ds->zero.stage < 0 || ds->zero.stage > 3)
        return sg_json_error(c, SG_EINVAL, "%s.stage: %lld is out of range (expected 0, 1, 2 or 3)",
                             Z, (long long)ds->zero.stage);
    int rc = sg_ds_nvme_check(c, ds);
    if (rc)
        return rc;
    if (ds->zero.offload_optimizer.device != SG_OFFLOAD_NONE && ds->zero.stage == 0)
        return sg_json_error(
            c, SG_EINVAL,
            "%s.offload_optimizer.device: \"%s\" needs ZeRO stage 1, 2 or 3 (%s.stage "
            "is 0; DeepSpeed offloads the optimizer only through a ZeRO optimizer)",
            Z, ds->zero.offload_optimizer.device == SG_OFFLOAD_CPU ? "cpu" : "nvme", Z);
    if (ds->zero.offload_optimizer.super_offload && ds->zero.stage != 3)
        return sg_json_error(c, SG_EINVAL,
                             "%s.offload_optimizer.super_offload: true needs %s.stage 3 (got %lld; "
                             "SuperOffload is a ZeRO-3 optimizer)",
                             Z, Z, (long long)ds->zero.stage);
    if (ds->zero.offload_optimizer.super_offload &&
        ds->zero.offload_optimizer.device != SG_OFFLOAD_CPU)
        return sg_json_error(
            c, SG_EINVAL,
            "%s.offload_optimizer.super_offload: true needs "
            "%s.offload_optimizer.device \"cpu\" (got \"%s\": SuperOffload steps "
            "the optimizer on the CPU)",
            Z, Z, ds->zero.offload_optimizer.device == SG_OFFLOAD_NVME ? "nvme" : "none");
    double r = ds->zero.offload_optimizer.ratio;
    if (!(r >= 0.0 && r <= 1.0))
        return sg_json_error(
            c, SG_EINVAL,
            "%s.offload_optimizer.ratio: %g is out of range (expected 0 <= ratio <= 1)", Z, r);
    if (r < 1.0 && ds->zero.stage != 3)
        return sg_json_error(
            c, SG_EINVAL,
            "%s.offload_optimizer.ratio: %g needs %s.stage 3 (got %lld; DeepSpeed: "
            "partial offloading only supported for ZeRO stage 3)",
            Z, r, Z, (long long)ds->zero.stage);
    double p = ds->zero.offload_optimizer.cpuadam_cores_perc;
    if (!(p > 0.0 && p <= 1.0))
        return sg_json_error(
            c, SG_EINVAL,
            "%s.offload_optimizer.cpuadam_cores_perc: %g is out of range (expected 0 < "
            "cpuadam_cores_perc <= 1)",
            Z, p);
    if (ds->zero.sub_group_size < 0)
        return sg_json_error(
            c, SG_EINVAL, "%s.sub_group_size: %lld is out of range (expected sub_group_size >= 0)",
            Z, (long long)ds->zero.sub_group_size);
    /* Without number_checkpoints DeepSpeed takes the count from the training
     * script (deepspeed.checkpointing.configure(num_checkpoints=...);
     * Megatron passes its number of layers): accepted, as DeepSpeed's config
     * reader does. */
    if (ds->activation_checkpointing.contiguous_memory_optimization &&
        !ds->activation_checkpointing.partition_activations)
        return sg_json_error(
            c, SG_EINVAL,
            "activation_checkpointing.contiguous_memory_optimization: true needs "
            "activation_checkpointing.partition_activations true (as in DeepSpeed)");
    /* an "auto" total is filled by sg_config_finalize(), which checks again */
    int total_pending = (ds->auto_pending & SG_AUTO_BIT(SG_AUTO_TOTAL_STEPS)) != 0;
    if (ds->scheduler.type == SG_SCHED_WARMUP_DECAY_LR && ds->scheduler.total_num_steps <= 0 &&
        !total_pending)
        return sg_json_error(c, SG_EINVAL,
                             "scheduler.params.total_num_steps is required for WarmupDecayLR "
                             "(an integer > 0)");
    if (ds->scheduler.type == SG_SCHED_WARMUP_COSINE_LR && ds->scheduler.total_num_steps <= 0 &&
        !total_pending)
        return sg_json_error(c, SG_EINVAL,
                             "scheduler.params.total_num_steps is required for WarmupCosineLR "
                             "(an integer > 0)");
    if (ds->scheduler.type == SG_SCHED_ONE_CYCLE &&
        (isnan(ds->scheduler.cycle_min_lr) || isnan(ds->scheduler.cycle_max_lr)))
        return sg_json_error(c, SG_EINVAL,
                             "scheduler.params.%s is required for OneCycle (a "
                             "number >= 0)",
                             isnan(ds->scheduler.cycle_min_lr) ? "cycle_min_lr" : "cycle_max_lr");
    return SG_OK;
}

static int mul_ok(int64_t a, int64_t b, int64_t *out)
{
    if (a > 0 && b > INT64_MAX / a)
        return 0;
    *out = a * b;
    return 1;
}

/* DeepSpeed's _set_batch_related_parameters + _batch_assertion, except that
 * a division that does not come out even is an error here instead of being
 * floored and then failing the assertion. */
int sg_ds_config_batch_rule(sg_ds_config *ds, int64_t dp, const char *origin, sg_error *err)
{
    int64_t t = ds->train_batch_size, m = ds->train_micro_batch_size_per_gpu;
    int64_t a = ds->gradient_accumulation_steps, prod;
    const char *T = "train_batch_size", *M = "train_micro_batch_size_per_gpu";
    const char *A = "gradient_accumulation_steps";
    if (t < 0 || m < 0 || a < 0)
        return sg_error_set(err, SG_EINVAL,
                            "%s: batch sizes must be > 0 (%s %lld, %s %lld, %s %lld)", origin, T,
                            (long long)t, M, (long long)m, A, (long long)a);
    if (t && m && a) {
        if (!mul_ok(m, a, &prod) || !mul_ok(prod, dp, &prod) || prod != t)
            return sg_error_set(err, SG_EINVAL,
                                "%s: %s %lld != %s %lld * %s %lld * data-parallel size %lld "
                                "(DeepSpeed requires train_batch_size = micro batch * accumulation "
                                "steps * data-parallel size)",
                                origin, T, (long long)t, M, (long long)m, A, (long long)a,
                                (long long)dp);
    } else if (t && m) {
        if (!mul_ok(m, dp, &prod) || t % prod != 0)
            return sg_error_set(
                err, SG_EINVAL,
                "%s: %s %lld is not a multiple of %s %lld * data-parallel size %lld "
                "(gradient_accumulation_steps would not be a whole number)",
                origin, T, (long long)t, M, (long long)m, (long long)dp);
        ds->gradient_accumulation_steps = t / prod;
    } else if (t && a) {
        if (!mul_ok(a, dp, &prod) || t % prod != 0)
            return sg_error_set(
                err, SG_EINVAL,
                "%s: %s %lld is not a multiple of %s %lld * data-parallel size %lld "
                "(train_micro_batch_size_per_gpu would not be a whole number)",
                origin, T, (long long)t, A, (long long)a, (long long)dp);
        ds->train_micro_batch_size_per_gpu = t / prod;
    } else if (m && a) {
        if (!mul_ok(m, a, &prod) || !mul_ok(prod, dp, &prod))
            return sg_error_set(err, SG_EINVAL, "%s: %s * %s * data-parallel size overflows",
                                origin, M, A);
        ds->train_batch_size = prod;
    } else if (t) {
        if (t % dp != 0)
            return sg_error_set(err, SG_EINVAL,
                                "%s: %s %lld is not a multiple of data-parallel size %lld", origin,
                                T, (long long)t, (long long)dp);
        ds->gradient_accumulation_steps = 1;
        ds->train_micro_batch_size_per_gpu = t / dp;
    } else if (m) {
        if (!mul_ok(m, dp, &prod))
            return sg_error_set(err, SG_EINVAL, "%s: %s * data-parallel size overflows", origin, M);
        ds->gradient_accumulation_steps = 1;
        ds->train_batch_size = prod;
    } else {
        return sg_error_set(err, SG_EINVAL,
                            "%s: at least one of train_batch_size / train_micro_batch_size_per_gpu "
                            "is required%s",
                            origin, a ? " (gradient_accumulation_steps alone is not enough)" : "");
    }
    return SG_OK;
}
