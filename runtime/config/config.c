/* config.c - loading a run config or DeepSpeed config, and finalizing it
 * (see config.h). The DeepSpeed keys are parsed in ds_config.c, the run
 * options in run_options.c.
 */
#define _POSIX_C_SOURCE 200809L

#include "runtime/config/config.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "runtime/config/config_override.h"
#include "runtime/config/machine.h"
#include "common/json_util.h"

/* ---- loading ---------------------------------------------------------- */

/* The --set assignments, applied to the DeepSpeed object before parsing. */
static int apply_sets(cJSON *ds, const char *const *sets, int nsets, sg_error *err)
{
    for (int i = 0; i < nsets; i++) {
        int rc = sg_json_set_dotted(ds, sets[i], err);
        if (rc)
            return rc;
    }
    return SG_OK;
}

static int load_into(const char *path, const char *const *sets, int nsets, sg_config *cfg,
                     sg_error *err)
{
    cJSON *root = NULL, *dsroot = NULL;
    int rc = sg_json_load_object(path, &root, err);
    if (rc)
        return rc;
    sg_json_ctx c = {path, "", &cfg->warnings, err};
    const cJSON *dsc = cJSON_GetObjectItemCaseSensitive(root, "deepspeed_config");
    if (!dsc) {
        /* a plain DeepSpeed config */
        snprintf(cfg->ds_path, sizeof cfg->ds_path, "%s", path);
        cfg->run_path[0] = '\0';
        if (!(rc = apply_sets(root, sets, nsets, err)))
            rc = sg_ds_config_from_json(root, &c, &cfg->ds);
        goto out;
    }

    snprintf(cfg->run_path, sizeof cfg->run_path, "%s", path);
    if ((rc = sg_run_options_from_json(root, &c, sg_ds_config_is_top_key, &cfg->run)))
        goto out;
    if (cJSON_IsObject(dsc)) {
        cfg->ds_path[0] = '\0';
        sg_json_ctx ic = {path, "deepspeed_config.", &cfg->warnings, err};
        if (!(rc = apply_sets((cJSON *)dsc, sets, nsets, err)))
            rc = sg_ds_config_from_json(dsc, &ic, &cfg->ds);
        goto out;
    }
    if (!cJSON_IsString(dsc) || !dsc->valuestring[0]) {
        rc = sg_json_type_error(&c, dsc, "deepspeed_config",
                                "a file path (string) or an inline object");
        goto out;
    }
    if (sg_path_beside(path, dsc->valuestring, cfg->ds_path, sizeof cfg->ds_path)) {
        rc = sg_json_error(&c, SG_EINVAL, "deepspeed_config: path too long (at most %d bytes)",
                           SG_PATH_MAX - 1);
        goto out;
    }
    if ((rc = sg_json_load_object(cfg->ds_path, &dsroot, err))) {
        sg_error_prefix(err, "%s: deepspeed_config: ", path);
        goto out;
    }
    if (cJSON_GetObjectItemCaseSensitive(dsroot, "deepspeed_config")) {
        rc = sg_error_set(err, SG_EINVAL,
                          "%s: deepspeed_config: %s is itself a run config (it has a "
                          "\"deepspeed_config\" key); point to a DeepSpeed config",
                          path, cfg->ds_path);
        goto out;
    }
    sg_json_ctx dc = {cfg->ds_path, "", &cfg->warnings, err};
    if (!(rc = apply_sets(dsroot, sets, nsets, err)))
        rc = sg_ds_config_from_json(dsroot, &dc, &cfg->ds);
out:
    cJSON_Delete(dsroot);
    cJSON_Delete(root);
    return rc;
}

/* Why a SuperOffload step of this optimizer cannot be rolled back exactly
 * (codelets/cpu/adam.h), or NULL when it can: Lion's sign update (an
 * element whose direction is within rounding of 0 may come back with the
 * other sign), Adagrad's L2 decay (the step's gradient depends on the
 * parameter it changes, and undoing it solves an equation that is
 * ill-conditioned where the decay outweighs the gradient). */
static const char *inexact_rollback(const sg_ds_config *ds)
{
    if (!ds->zero.offload_optimizer.super_offload)
        return NULL;
    if (ds->optimizer.type == SG_OPT_LION)
        return "the Lion optimizer: its sign update cannot be undone exactly (an element whose "
               "update direction is within rounding of 0 may come back with the other sign)";
    if (ds->optimizer.type == SG_OPT_ADAGRAD && ds->optimizer.weight_decay != 0)
        return "Adagrad with weight_decay: its L2 term makes the step's gradient depend on the "
               "parameter it changes, and undoing it is ill-conditioned where the decay "
               "outweighs the gradient";
    return NULL;
}

/* SuperOffload's speculation: "" (not given) is "adaptive" (speculate only
 * while recent steps did not clip or overflow: runtime/train/speculation.h),
 * except for an optimizer whose speculative step a rollback cannot undo
 * exactly, which waits for the gradient norm ("never"); a speculative mode
 * asked for with one is refused. "always" is DeepSpeed's own behaviour, which
 * from scratch with clipping rolls back nearly every step. */
static int resolve_speculation(sg_run_options *run, const sg_ds_config *ds, const char *origin,
                               sg_error *err)
{
    const char *why = inexact_rollback(ds);
    if (!run->speculation[0]) {
        snprintf(run->speculation, sizeof run->speculation, "%s", why ? "never" : "adaptive");
        return SG_OK;
    }
    if (strcmp(run->speculation, "always") != 0 && strcmp(run->speculation, "adaptive") != 0 &&
        strcmp(run->speculation, "never") != 0)
        return sg_error_set(err, SG_EINVAL,
                            "%s: speculation \"%s\": expected \"always\", "
                            "\"adaptive\" or \"never\"",
                            origin, run->speculation);
    if (why && strcmp(run->speculation, "never") != 0)
        return sg_error_set(err, SG_EINVAL,
                            "%s: speculation \"%s\" cannot run with %s; SuperOffload rolls a "
                            "speculative step back when clipping or an overflow changes it. Leave "
                            "speculation unset or use \"never\" (each sub-group waits for the "
                            "gradient norm)",
                            origin, run->speculation, why);
    return SG_OK;
}

int sg_config_load(const char *path, sg_config *cfg, sg_error *err)
{
    return sg_config_load_with(path, NULL, 0, cfg, err);
}

/* An unknown-key warning that only --set brought (--set
 * zero_optimisation.stage=1 would otherwise train at stage 0 with a warning
 * blamed on the file) is an error naming the --set: the file loaded without
 * the assignments did not warn so. When the file alone does not load, the
 * warnings cannot be told apart and stay warnings. */
static int refuse_set_warnings(const char *path, const char *const *sets, int nsets,
                               const sg_config_warnings *with, sg_error *err)
{
    sg_config *plain = calloc(1, sizeof *plain);
    if (!plain)
        return sg_error_set(err, SG_ENOMEM, "%s: out of memory", path);
    sg_ds_config_defaults(&plain->ds);
    sg_run_options_defaults(&plain->run);
    sg_error plain_err = {0};
    int rc = SG_OK;
    if (load_into(path, NULL, 0, plain, &plain_err) == SG_OK) {
        for (int w = 0; w < with->count && rc == SG_OK; w++) {
            /* only a key no reader knows: another warning (a scheduler's
             * betas override) stays a warning */
            int seen = !strstr(with->msg[w], "unknown key");
            for (int v = 0; v < plain->warnings.count && !seen; v++)
                seen = strcmp(with->msg[w], plain->warnings.msg[v]) == 0;
            if (seen)
                continue;
            /* "FILE: unknown key K ...": name the --set whose key holds K */
            const char *what = strstr(with->msg[w], ": ");
            what = what ? what + 2 : with->msg[w];
            const char *by = NULL;
            for (int k = 0; k < nsets && !by; k++) {
                size_t kl = strcspn(sets[k], "=");
                for (const char *seg = sets[k]; seg < sets[k] + kl && !by;) {
                    size_t sl = strcspn(seg, ".=");
                    char name[128];
                    snprintf(name, sizeof name, "%.*s", (int)sl, seg);
                    if (sl && strstr(what, name))
                        by = sets[k];
                    seg += sl + 1;
                }
            }
            char text[sizeof with->msg[0]];
            sg_warning_as_error(what, text, sizeof text);
            rc = by ? sg_error_set(err, SG_EINVAL, "--set %s: %s", by, text)
                    : sg_error_set(err, SG_EINVAL, "--set: %s", text);
        }
    }
    free(plain);
    return rc;
}

int sg_config_load_with(const char *path, const char *const *sets, int nsets, sg_config *cfg,
                        sg_error *err)
{
    if (!path || !*path)
        return sg_error_set(err, SG_EINVAL, "no config file given");
    if (!cfg)
        return sg_error_set(err, SG_EINVAL, "%s: no config to fill", path);
    if (strlen(path) >= SG_PATH_MAX)
        return sg_error_set(err, SG_EINVAL, "config path too long (at most %d bytes)",
                            SG_PATH_MAX - 1);
    sg_config *tmp = calloc(1, sizeof *tmp);
    if (!tmp)
        return sg_error_set(err, SG_ENOMEM, "%s: out of memory", path);
    sg_ds_config_defaults(&tmp->ds);
    sg_run_options_defaults(&tmp->run);
    int rc = load_into(path, sets, nsets, tmp, err);
    if (rc == SG_OK && nsets > 0)
        rc = refuse_set_warnings(path, sets, nsets, &tmp->warnings, err);
    if (rc == SG_OK)
        *cfg = *tmp; /* a failed load leaves cfg as it was */
    free(tmp);
    return rc;
}

/* ---- finalize --------------------------------------------------------- */

/* The machine a config names must exist and load, whatever the command:
 * `config` refuses what `graph` and `simulate` would. */
static int check_machine(const char *machine, const char *origin, sg_error *err)
{
    if (!machine[0])
        return SG_OK;
    if (strcmp(machine, "auto") == 0)
        return sg_error_set(
            err, SG_EINVAL,
            "%s: machine: \"auto\" is not supported: stepgraph does not detect the "
            "machine; name a machine model (gh200, gh200x4, mi300a, h100-pcie) or a "
            "machine file",
            origin);
    char path[SG_PATH_MAX + 64];
    int rc = sg_machine_resolve(machine, path, sizeof path, err);
    if (rc)
        return rc;
    sg_machine *m = malloc(sizeof *m);
    if (!m)
        return sg_error_set(err, SG_ENOMEM, "out of memory");
    rc = sg_machine_load(path, m, err);
    free(m);
    return rc;
}

int sg_config_finalize(sg_config *cfg, sg_error *err)
{
    if (!cfg)
        return sg_error_set(err, SG_EINVAL, "no config to finalize");
    const char *run_origin = cfg->run_path[0] ? cfg->run_path : "run options";
    const char *ds_origin = cfg->ds_path[0]    ? cfg->ds_path
                            : cfg->run_path[0] ? cfg->run_path
                                               : "deepspeed config";
    const char *ds_prefix = (!cfg->ds_path[0] && cfg->run_path[0]) ? "deepspeed_config." : "";

    sg_ds_config ds = cfg->ds;
    sg_run_options run = cfg->run;
    int rc = sg_run_options_check(&run, run_origin, err);
    if (rc)
        return rc;
    /* "auto" first: the checks and the batch rule need the values */
    sg_ds_autos autos;
    sg_json_ctx ac = {ds_origin, ds_prefix, &cfg->warnings, err};
    if ((rc = sg_ds_auto_fill(&ds, &run, &ac, &autos)))
        return rc;
    sg_json_ctx c = {ds_origin, ds_prefix, NULL, err};
    if ((rc = sg_ds_config_check(&c, &ds, "bf16")))
        return rc;
    if ((rc = sg_ds_config_batch_rule(&ds, run.dp_size, ds_origin, err)))
        return rc;

    /* DeepSpeed's "activation_checkpointing" section only configures
     * deepspeed.checkpointing; whether layers are recomputed is the training
     * script's choice (the SuperOffload script's --activation_checkpointing
     * flag). So -1 ("from the DeepSpeed config") means off, whatever the
     * section says; the run option or the flag turns it on. */
    if (run.activation_checkpointing < 0)
        run.activation_checkpointing = 0;

    /* log_interval 0: DeepSpeed's steps_per_print, or 10 when it is unset */
    if (run.log_interval == 0)
        run.log_interval = ds.steps_per_print > 0 ? ds.steps_per_print : 10;

    int64_t total = run.steps > 0 ? run.steps : run.bench_steps;
    if (total > 0 && run.warmup_steps >= total) {
        /* a short run of a config made for a long one: measure every step */
        sg_json_ctx wc = {run_origin, "", &cfg->warnings, err};
        sg_json_warn(&wc,
                     "warmup_steps %lld >= the %lld steps that run (%s): the summary "
                     "covers every step",
                     (long long)run.warmup_steps, (long long)total,
                     run.steps > 0 ? "steps" : "bench_steps");
    }
    if (strcmp(run.save_dtype, "f32") != 0 && strcmp(run.save_dtype, "bf16") != 0)
        return sg_error_set(err, SG_EINVAL, "%s: save_dtype \"%s\": expected \"f32\" or \"bf16\"",
                            run_origin, run.save_dtype);
    if ((rc = resolve_speculation(&run, &ds, run_origin, err)))
        return rc;
    if ((rc = check_machine(run.machine, run_origin, err)))
        return rc;
    /* the data loader's limits, so that config and graph refuse what run would */
    if (ds.train_micro_batch_size_per_gpu > SG_MAX_LENGTH_MAX ||
        ds.train_micro_batch_size_per_gpu * run.max_length > INT32_MAX)
        return sg_error_set(err, SG_EINVAL,
                            "%s: train_micro_batch_size_per_gpu %lld x max_length %lld tokens per "
                            "micro-batch is more than the data loader reads (at most %d sequences "
                            "and %d tokens)",
                            ds_origin, (long long)ds.train_micro_batch_size_per_gpu,
                            (long long)run.max_length, SG_MAX_LENGTH_MAX, INT32_MAX);
    cfg->ds = ds;
    cfg->run = run;
    cfg->autos = autos;
    return SG_OK;
}

/* ---- where a run option came from ------------------------------------- */

static void option_name(const char *key, char *name, size_t size)
{
    size_t n = 0;
    while (*key == '-')
        key++;
    for (; *key && n + 1 < size; key++)
        name[n++] = *key == '-' ? '_' : *key;
    name[n] = '\0';
}

void sg_config_note_cli_option(sg_config *cfg, const char *key)
{
    char name[64], item[80];
    option_name(key, name, sizeof name);
    snprintf(item, sizeof item, ",%s,", name);
    if (strstr(cfg->cli_options, item))
        return;
    size_t used = strlen(cfg->cli_options);
    snprintf(cfg->cli_options + used, sizeof cfg->cli_options - used, "%s%s,", used ? "" : ",",
             name);
}

const char *sg_config_run_origin(const sg_config *cfg, const char *key, char *buf, size_t size)
{
    char name[64], item[80];
    option_name(key, name, sizeof name);
    snprintf(item, sizeof item, ",%s,", name);
    if (strstr(cfg->cli_options, item))
        snprintf(buf, size, "command line (--%s)", name);
    else
        snprintf(buf, size, "%s", cfg->run_path[0] ? cfg->run_path : "run options");
    return buf;
}
