/* ds_config_optimizer.c - the "optimizer" and "scheduler" sections of a
 * DeepSpeed config: the types DeepSpeed has (Adam, AdamW, Lion, Adagrad;
 * the schedulers of lr_schedules.py), each with the parameters its class
 * takes, so that another type's parameter is an error as DeepSpeed's
 * constructor would raise one.
 */
#define _POSIX_C_SOURCE 200809L

#include "runtime/config/ds_config_fields.h"

#include <strings.h>

#include "runtime/config/ds_auto.h"

static int h_betas(pstate *ps, const cJSON *it, const char *path)
{
    const char *what = "an array of two numbers in [0, 1)";
    if (!cJSON_IsArray(it) || cJSON_GetArraySize(it) != 2)
        return sg_json_type_error(&ps->c, it, path, what);
    double b[2];
    for (int i = 0; i < 2; i++) {
        const cJSON *e = cJSON_GetArrayItem(it, i);
        if (!cJSON_IsNumber(e) || !(e->valuedouble >= 0.0 && e->valuedouble < 1.0))
            return sg_json_type_error(&ps->c, it, path, what);
        b[i] = e->valuedouble;
    }
    ps->ds->optimizer.beta1 = b[0];
    ps->ds->optimizer.beta2 = b[1];
    return SG_OK;
}

/* An optimizer flag whose true stepgraph does not run: refused, saying
 * what true means (what) and who else refuses it (also). */
static int refuse_true(pstate *ps, const cJSON *it, const char *path, const char *what,
                       const char *also)
{
    int b, rc = sg_json_bool(&ps->c, it, path, &b);
    if (rc)
        return rc;
    if (b)
        return sg_json_error(&ps->c, SG_ENOTSUP, "%s: true%s is not supported by stepgraph%s", path,
                             what, also);
    return SG_OK;
}

static int h_amsgrad(pstate *ps, const cJSON *it, const char *path)
{
    return refuse_true(ps, it, path, "",
                       " (nor by DeepSpeed's FusedAdam, CPU Adam and CPU Adagrad)");
}

/* torch.optim.Adagrad's maximize */
static int h_maximize(pstate *ps, const cJSON *it, const char *path)
{
    return refuse_true(ps, it, path, " (gradient ascent)", "");
}

static int h_max_grad_norm(pstate *ps, const cJSON *it, const char *path)
{
    (void)it;
    return sg_json_error(&ps->c, SG_EINVAL,
                         "%s: not supported as an optimizer parameter (as in DeepSpeed); use the "
                         "top-level key \"gradient_clipping\"",
                         path);
}

static const field opt_param_fields[] = {
    FD("lr", optimizer.lr, NONNEG, 0, 0),
    FF("betas", h_betas),
    FD("eps", optimizer.eps, NONNEG, 0, 0),
    FD("weight_decay", optimizer.weight_decay, NONNEG, 0, 0),
    FB("adam_w_mode", optimizer.adam_w_mode),
    FX("torch_adam", X_BOOL), /* read in h_optimizer */
    FB("bias_correction", optimizer.bias_correction),
    FF("amsgrad", h_amsgrad),
    FF("max_grad_norm", h_max_grad_norm),
    FW("fp32_optimizer_states", W_FALSE,
       "stepgraph keeps the Adam moments and master weights in fp32"),
    FX("foreach", X_BOOL),
    FX("fused", X_BOOL),
    FX("capturable", X_BOOL),
    FD("lr_decay", optimizer.lr_decay, NONNEG, 0, 0),
    FD("initial_accumulator_value", optimizer.initial_accumulator_value, NONNEG, 0, 0),
    FF("maximize", h_maximize),
    FX("differentiable", X_BOOL),
    FX("set_grad_none", X_BOOL),
};

/* A type of optimizer or scheduler with the keyword arguments its class
 * takes (space-separated, padded with spaces). */
typedef struct param_list {
    const char *name; /* as DeepSpeed and the error messages spell it */
    int type;         /* sg_optimizer_type or sg_lr_schedule */
    const char *params;
} param_list;

static int list_takes(const param_list *pl, const char *key)
{
    char word[64];
    if ((size_t)snprintf(word, sizeof word, " %s ", key) >= sizeof word)
        return 0;
    return strstr(pl->params, word) != NULL;
}

/* A known parameter (one of fields) of another type than self, given a
 * value: DeepSpeed passes the params to the class as keyword arguments, and
 * its constructor would raise a TypeError, so it is an error here too. The
 * error names the types that take it (a list repeating an earlier one's
 * parameters, AdamW's, is not named twice). exempt: a key left to the
 * caller, or NULL. */
static int check_foreign(pstate *ps, const cJSON *it, const char *path, const param_list *lists,
                         size_t nlists, const param_list *self, const field *fields, size_t nfields,
                         const char *exempt)
{
    for (const cJSON *k = it->child; k; k = k->next) {
        const char *key = k->string ? k->string : "";
        if (cJSON_IsNull(k) || list_takes(self, key) || !find_field(fields, nfields, key) ||
            (exempt && strcmp(key, exempt) == 0))
            continue;
        char owners[128] = "";
        for (size_t i = 0; i < nlists; i++) {
            int repeat = 0;
            for (size_t j = 0; j < i; j++)
                repeat |= strcmp(lists[j].params, lists[i].params) == 0;
            if (!repeat && list_takes(&lists[i], key))
                snprintf(owners + strlen(owners), sizeof owners - strlen(owners), "%s%s",
                         owners[0] ? " and " : "", lists[i].name);
        }
        char kp[256];
        join(kp, sizeof kp, path, key);
        int n = (int)strlen(self->params) - 2; /* without the padding spaces */
        return sg_json_error(&ps->c, SG_EINVAL,
                             "%s is a parameter of %s, not of %s (DeepSpeed's %s does not take "
                             "it; its parameters: %.*s)",
                             kp, owners, self->name, self->name, n, self->params + 1);
    }
    return SG_OK;
}

/* The optimizer types, by the names DeepSpeed lower-cases, each with the
 * parameters its classes take (space-separated, padded with spaces): with
 * offload_optimizer DeepSpeedCPUAdam / DeepSpeedCPULion /
 * DeepSpeedCPUAdagrad, else FusedAdam or torch's Adam(W) (torch_adam),
 * FusedLion, torch.optim.Adagrad. max_grad_norm is everyone's, for its own
 * error. */
#define ADAM_PARAMS                                                              \
    " lr betas eps weight_decay adam_w_mode torch_adam bias_correction amsgrad " \
    "max_grad_norm fp32_optimizer_states foreach fused capturable "
static const param_list opt_types[] = {
    {"Adam", SG_OPT_ADAM, ADAM_PARAMS},
    {"AdamW", SG_OPT_ADAMW, ADAM_PARAMS},
    {"Lion", SG_OPT_LION,
     " lr betas weight_decay fp32_optimizer_states set_grad_none max_grad_norm "},
    {"Adagrad", SG_OPT_ADAGRAD,
     " lr eps weight_decay amsgrad fp32_optimizer_states lr_decay initial_accumulator_value "
     "foreach fused maximize differentiable max_grad_norm "},
};

#define OPT_NAMES "\"Adam\", \"AdamW\", \"Lion\" or \"Adagrad\""

static int h_opt_params(pstate *ps, const cJSON *it, const char *path)
{
    int rc = need_object(ps, it, path);
    if (rc)
        return rc;
    for (size_t i = 0; i < ARRAY_LEN(opt_types); i++)
        if (opt_types[i].type == (int)ps->ds->optimizer.type &&
            (rc = check_foreign(ps, it, path, opt_types, ARRAY_LEN(opt_types), &opt_types[i],
                                opt_param_fields, ARRAY_LEN(opt_param_fields), NULL)))
            return rc;
    return sg_ds_walk(ps, it, path, opt_param_fields, ARRAY_LEN(opt_param_fields));
}

static const field opt_fields[] = {
    FF("type", h_skip), /* read first, in h_optimizer */
    FF("params", h_opt_params),
    FX("legacy_fusion", X_BOOL),
};

int sg_ds_h_optimizer(pstate *ps, const cJSON *it, const char *path)
{
    int rc = need_object(ps, it, path);
    if (rc)
        return rc;
    sg_ds_config *ds = ps->ds;
    char kp[256];
    join(kp, sizeof kp, path, "type");
    const cJSON *type = get_given(it, "type");
    if (!type)
        return sg_json_error(&ps->c, SG_EINVAL, "%s is required (" OPT_NAMES ")", kp);
    if (!cJSON_IsString(type))
        return sg_json_type_error(&ps->c, type, kp, "a string (" OPT_NAMES ")");
    const char *t = type->valuestring;
    /* DeepSpeed lower-cases the names of its own optimizers */
    const param_list *found = NULL;
    for (size_t i = 0; i < ARRAY_LEN(opt_types); i++)
        if (strcasecmp(t, opt_types[i].name) == 0)
            found = &opt_types[i];
    if (!found)
        return sg_json_error(&ps->c, SG_ENOTSUP,
                             "%s: \"%s\" is not supported by stepgraph (expected " OPT_NAMES ")",
                             kp, t);
    ds->optimizer.type = (sg_optimizer_type)found->type;
    if (found->type == SG_OPT_ADAGRAD) {
        /* DeepSpeedCPUAdagrad's and torch.optim.Adagrad's defaults */
        ds->optimizer.lr = 1e-2;
        ds->optimizer.eps = 1e-10;
    }
    ds->optimizer.given = 1;
    if ((rc = sg_ds_walk(ps, it, path, opt_fields, ARRAY_LEN(opt_fields))))
        return rc;

    /* engine.py: the name "AdamW" forces decoupled weight decay; "Adam"
     * follows adam_w_mode, whose default is True. */
    if (ds->optimizer.type == SG_OPT_ADAMW)
        ds->optimizer.adam_w_mode = 1;
    /* weight_decay defaults to 0 (FusedAdam, DeepSpeedCPUAdam) except with
     * torch_adam in AdamW mode, where torch.optim.AdamW's 0.01 applies. */
    const cJSON *params = get_given(it, "params");
    if (params && !get_given(params, "weight_decay")) {
        const cJSON *ta = get_given(params, "torch_adam");
        if (ta && cJSON_IsTrue(ta) && ds->optimizer.adam_w_mode)
            ds->optimizer.weight_decay = 0.01;
    }
    return SG_OK;
}

/* ---- scheduler -------------------------------------------------------- */

static int h_warmup_type(pstate *ps, const cJSON *it, const char *path)
{
    if (!cJSON_IsString(it))
        return sg_json_type_error(&ps->c, it, path, "\"log\" or \"linear\"");
    if (strcmp(it->valuestring, "log") == 0)
        ps->ds->scheduler.warmup_type = SG_WARMUP_LOG;
    else if (strcmp(it->valuestring, "linear") == 0)
        ps->ds->scheduler.warmup_type = SG_WARMUP_LINEAR;
    else {
        char v[96];
        sg_json_repr(it, v, sizeof v);
        return sg_json_error(&ps->c, SG_EINVAL,
                             "%s: %s is not valid (expected \"log\" or \"linear\")", path, v);
    }
    return SG_OK;
}

static int h_warmup_max_lr(pstate *ps, const cJSON *it, const char *path)
{
    int rc = sg_json_num(&ps->c, it, path, "warmup_max_lr", NONNEG, 0, 0, NULL,
                         &ps->ds->scheduler.warmup_max_lr);
    if (rc == SG_OK)
        ps->warmup_max_lr_given = 1;
    return rc;
}

#define LO_HI_OPEN (SG_JSON_LO | SG_JSON_HI | SG_JSON_HI_OPEN) /* [lo, hi) */

/* Every scheduler's parameters; which of them a scheduler takes is in
 * sched_types below. */
static const field sched_param_fields[] = {
    FD("warmup_min_lr", scheduler.warmup_min_lr, NONNEG, 0, 0),
    FF("warmup_max_lr", h_warmup_max_lr),
    FI("warmup_num_steps", scheduler.warmup_num_steps, POS, 0, 0),
    FF("warmup_type", h_warmup_type),
    FI("total_num_steps", scheduler.total_num_steps, POS, 0, 0),
    FX("last_batch_iteration", X_INT),
    FD("warmup_min_ratio", scheduler.warmup_min_ratio, NONNEG, 0, 0),
    FD("cos_min_ratio", scheduler.cos_min_ratio, NONNEG, 0, 0),
    FD("cycle_min_lr", scheduler.cycle_min_lr, NONNEG, 0, 0),
    FD("cycle_max_lr", scheduler.cycle_max_lr, NONNEG, 0, 0),
    FD("decay_lr_rate", scheduler.decay_lr_rate, NONNEG, 0, 0),
    FI("cycle_first_step_size", scheduler.cycle_first_step_size, POS, 0, 0),
    FI("cycle_second_step_size", scheduler.cycle_second_step_size, POS, 0, 0),
    FX("cycle_first_stair_count", X_INT),
    FX("cycle_second_stair_count", X_INT),
    FI("decay_step_size", scheduler.decay_step_size, NONNEG, 0, 0),
    FB("cycle_momentum", scheduler.cycle_momentum),
    FD("cycle_min_mom", scheduler.cycle_min_mom, LO_HI_OPEN, 0, 1),
    FD("cycle_max_mom", scheduler.cycle_max_mom, LO_HI_OPEN, 0, 1),
    FD("decay_mom_rate", scheduler.decay_mom_rate, NONNEG, 0, 0),
    FD("lr_range_test_min_lr", scheduler.lr_range_test_min_lr, NONNEG, 0, 0),
    FI("lr_range_test_step_size", scheduler.lr_range_test_step_size, POS, 0, 0),
    FD("lr_range_test_step_rate", scheduler.lr_range_test_step_rate, NONNEG, 0, 0),
    FB("lr_range_test_staircase", scheduler.lr_range_test_staircase),
};

/* The schedulers of deepspeed/runtime/lr_schedules.py, by their class
 * names, each with the parameters its constructor takes (space-separated,
 * padded with spaces). */
static const param_list sched_types[] = {
    {"WarmupLR", SG_SCHED_WARMUP_LR,
     " warmup_min_lr warmup_max_lr warmup_num_steps warmup_type last_batch_iteration "},
    {"WarmupDecayLR", SG_SCHED_WARMUP_DECAY_LR,
     " warmup_min_lr warmup_max_lr warmup_num_steps warmup_type total_num_steps "
     "last_batch_iteration "},
    {"WarmupCosineLR", SG_SCHED_WARMUP_COSINE_LR,
     " total_num_steps warmup_min_ratio warmup_num_steps cos_min_ratio warmup_type "
     "last_batch_iteration "},
    {"OneCycle", SG_SCHED_ONE_CYCLE,
     " cycle_min_lr cycle_max_lr decay_lr_rate cycle_first_step_size cycle_second_step_size "
     "cycle_first_stair_count cycle_second_stair_count decay_step_size cycle_momentum "
     "cycle_min_mom cycle_max_mom decay_mom_rate last_batch_iteration "},
    {"LRRangeTest", SG_SCHED_LR_RANGE_TEST,
     " lr_range_test_min_lr lr_range_test_step_size lr_range_test_step_rate "
     "lr_range_test_staircase last_batch_iteration "},
};

static const param_list *sched_type_of(sg_lr_schedule type)
{
    for (size_t i = 0; i < ARRAY_LEN(sched_types); i++)
        if (sched_types[i].type == (int)type)
            return &sched_types[i];
    return NULL;
}

static int h_sched_params(pstate *ps, const cJSON *it, const char *path)
{
    int rc = need_object(ps, it, path);
    if (rc)
        return rc;
    sg_ds_config *ds = ps->ds;
    /* WarmupLR's total_num_steps: a warning, below */
    const param_list *st = sched_type_of(ds->scheduler.type);
    if (st && (rc = check_foreign(ps, it, path, sched_types, ARRAY_LEN(sched_types), st,
                                  sched_param_fields, ARRAY_LEN(sched_param_fields),
                                  st->type == SG_SCHED_WARMUP_LR ? "total_num_steps" : NULL)))
        return rc;
    if ((rc = sg_ds_walk(ps, it, path, sched_param_fields, ARRAY_LEN(sched_param_fields))))
        return rc;
    if (ds->scheduler.type == SG_SCHED_WARMUP_LR && get_given(it, "total_num_steps")) {
        char kp[256];
        join(kp, sizeof kp, path, "total_num_steps");
        sg_json_warn(&ps->c,
                     "%s%s ignored: WarmupLR does not decay (DeepSpeed's WarmupLR "
                     "rejects it; use WarmupDecayLR)",
                     ps->c.prefix, kp);
        ds->scheduler.total_num_steps = 0;
    }
    if ((ds->scheduler.type == SG_SCHED_WARMUP_DECAY_LR ||
         ds->scheduler.type == SG_SCHED_WARMUP_COSINE_LR) &&
        !(ds->auto_pending & SG_AUTO_BIT(SG_AUTO_WARMUP_STEPS)) &&
        ds->scheduler.total_num_steps > 0 &&
        ds->scheduler.total_num_steps < ds->scheduler.warmup_num_steps)
        sg_json_warn(&ps->c, "%s%s.total_num_steps %lld is less than warmup_num_steps %lld",
                     ps->c.prefix, path, (long long)ds->scheduler.total_num_steps,
                     (long long)ds->scheduler.warmup_num_steps);
    return SG_OK;
}

static const field sched_fields[] = {
    FF("type", h_skip), /* read first, in h_scheduler */
    FF("params", h_sched_params),
};

#define SCHED_NAMES                                                         \
    "\"WarmupLR\", \"WarmupDecayLR\", \"WarmupCosineLR\", \"OneCycle\" or " \
    "\"LRRangeTest\""

int sg_ds_h_scheduler(pstate *ps, const cJSON *it, const char *path)
{
    int rc = need_object(ps, it, path);
    if (rc)
        return rc;
    char kp[256];
    join(kp, sizeof kp, path, "type");
    const cJSON *type = get_given(it, "type");
    if (!type)
        return sg_json_error(&ps->c, SG_EINVAL, "%s is required (" SCHED_NAMES ")", kp);
    if (!cJSON_IsString(type))
        return sg_json_type_error(&ps->c, type, kp, "a string (" SCHED_NAMES ")");
    const char *t = type->valuestring;
    const param_list *found = NULL, *nearly = NULL;
    for (size_t i = 0; i < ARRAY_LEN(sched_types); i++) {
        if (strcmp(t, sched_types[i].name) == 0)
            found = &sched_types[i];
        else if (strcasecmp(t, sched_types[i].name) == 0)
            nearly = &sched_types[i];
    }
    if (nearly && !found)
        /* DeepSpeed looks the class up by its exact name */
        return sg_json_error(&ps->c, SG_EINVAL,
                             "%s: \"%s\" is not valid: scheduler names are case-sensitive (did you "
                             "mean \"%s\"?)",
                             kp, t, nearly->name);
    if (!found)
        return sg_json_error(&ps->c, SG_ENOTSUP,
                             "%s: \"%s\" is not supported by stepgraph (expected " SCHED_NAMES ")",
                             kp, t);
    ps->ds->scheduler.type = (sg_lr_schedule)found->type;
    return sg_ds_walk(ps, it, path, sched_fields, ARRAY_LEN(sched_fields));
}
