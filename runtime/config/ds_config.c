/* ds_config.c - the DeepSpeed JSON config: defaults, parsing and the
 * cross-field checks (see ds_config.h).
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
 */
#define _POSIX_C_SOURCE 200809L

#include "runtime/config/ds_config.h"

#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <cjson/cJSON.h>

#include "common/json_util.h"
#include "runtime/config/ds_auto.h"
#include "runtime/config/run_options.h"

#define ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))

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
    ds->zero.offload_optimizer.buffer_count = 4; /* offload_config.py */
    ds->zero.offload_param.buffer_count = 5;

    /* activation_checkpointing: all false, number_checkpoints None (0) */
    ds->wall_clock_breakdown = 0;
}

/* ---- the table walker ------------------------------------------------- */

typedef struct pstate {
    sg_json_ctx c;
    sg_ds_config *ds;
    const char *bf16_key;       /* "bf16" or "bfloat16", for messages */
    int bf16_present;           /* "bf16" given: "bfloat16" is ignored */
    int warmup_max_lr_given;
    /* the keys whose value is "auto" (the HF Trainer's placeholder) that
     * the Trainer does not fill (ds_auto.h), all reported in one error once
     * the walk is done */
    int nauto;
    char autos[512];
    char first_auto[128];
} pstate;

typedef enum fkind {
    F_INT, F_NUM, F_BOOL,                       /* stored at off */
    X_BOOL, X_NUM, X_INT, X_STR, X_OBJ, X_ANY,  /* accepted, no effect */
    /* accepted, no effect, but a DeepSpeed user would expect one: a warning
     * (the field's `expect` says why) when the value is not DeepSpeed's
     * default: W_TRUE when true, W_FALSE when false, W_POS when an integer
     * > 0 (W_GT1: > 1), W_STR when a string, W_OBJ when a non-empty object */
    W_TRUE, W_FALSE, W_POS, W_GT1, W_STR, W_OBJ,
    W_ENABLED,                                  /* an object, warned when "enabled" is true */
    F_FN,                                       /* handled by fn */
} fkind;

typedef int (*field_fn)(pstate *ps, const cJSON *item, const char *path);

typedef struct field {
    const char *name;
    fkind kind;
    size_t off;
    unsigned flags;
    double lo, hi;
    const char *expect;
    field_fn fn;
} field;

#define LO SG_JSON_LO
#define HI SG_JSON_HI
#define LO_OPEN SG_JSON_LO_OPEN
#define POS (SG_JSON_LO | SG_JSON_LO_OPEN) /* > 0 */
#define NONNEG SG_JSON_LO                  /* >= 0 */
#define OFF(m) offsetof(sg_ds_config, m)
#define FI(n, m, fl, lo, hi) { n, F_INT, OFF(m), fl, lo, hi, NULL, NULL }
#define FIE(n, m, fl, lo, hi, e) { n, F_INT, OFF(m), fl, lo, hi, e, NULL }
#define FD(n, m, fl, lo, hi) { n, F_NUM, OFF(m), fl, lo, hi, NULL, NULL }
#define FB(n, m) { n, F_BOOL, OFF(m), 0, 0, 0, NULL, NULL }
#define FX(n, k) { n, k, 0, 0, 0, 0, NULL, NULL }
#define FF(n, f) { n, F_FN, 0, 0, 0, 0, NULL, f }
#define FW(n, k, why) { n, k, 0, 0, 0, 0, why, NULL }

static void join(char *buf, size_t size, const char *path, const char *key)
{
    if (path && *path)
        snprintf(buf, size, "%s.%s", path, key);
    else
        snprintf(buf, size, "%s", key);
}

static const field *find_field(const field *tab, size_t n, const char *key)
{
    for (size_t i = 0; i < n; i++)
        if (strcmp(tab[i].name, key) == 0)
            return &tab[i];
    return NULL;
}

static void warn_unknown(const sg_json_ctx *c, const char *kp, const char *key,
                         const char *const *names, size_t n, int top_level_ds)
{
    const char *s = sg_json_suggest(key, names, n);
    if (s)
        sg_json_warn(c, "unknown key %s%s ignored (did you mean %s?)", c->prefix, kp, s);
    else if (top_level_ds && sg_run_option_is_key(key))
        sg_json_warn(c, "unknown key %s%s ignored (a stepgraph run option: it belongs in a run "
                     "config, next to \"deepspeed_config\")", c->prefix, kp);
    else
        sg_json_warn(c, "unknown key %s%s ignored", c->prefix, kp);
}

/* A W_* field: type-checked as its kind says, then a warning that names the
 * value and why it has no effect here, when it is not DeepSpeed's default. */
static int warn_ignored(pstate *ps, const field *f, const cJSON *it, const char *kp)
{
    int b = 0, set = 0, rc = SG_OK;
    int64_t i64 = 0;
    switch (f->kind) {
    case W_TRUE:
    case W_FALSE:
        rc = sg_json_bool(&ps->c, it, kp, &b);
        set = f->kind == W_TRUE ? b : !b;
        break;
    case W_POS:
    case W_GT1:
        rc = sg_json_int(&ps->c, it, kp, f->name, 0, 0, 0, NULL, &i64);
        set = i64 > (f->kind == W_GT1 ? 1 : 0);
        break;
    case W_STR:
        if (!cJSON_IsString(it))
            rc = sg_json_type_error(&ps->c, it, kp, "a string");
        set = 1;
        break;
    case W_ENABLED: {
        if (!cJSON_IsObject(it)) {
            rc = sg_json_type_error(&ps->c, it, kp, "an object");
            break;
        }
        const cJSON *en = cJSON_GetObjectItemCaseSensitive(it, "enabled");
        if (en && !cJSON_IsNull(en)) {
            char ekp[256];
            snprintf(ekp, sizeof ekp, "%s.enabled", kp);
            rc = sg_json_bool(&ps->c, en, ekp, &set);
        }
        break;
    }
    default: /* W_OBJ */
        if (!cJSON_IsObject(it))
            rc = sg_json_type_error(&ps->c, it, kp, "an object");
        set = it->child != NULL;
        break;
    }
    if (rc == SG_OK && set) {
        char v[96];
        sg_json_repr(it, v, sizeof v);
        sg_json_warn(&ps->c, "%s%s: %s has no effect in stepgraph (ignored): %s", ps->c.prefix,
                     kp, v, f->expect);
    }
    return rc;
}

/* A field where the HF Trainer's "auto" may stand: not one that takes any
 * string (an accepted, unused one). */
static int takes_auto_placeholder(const field *f)
{
    return f->kind != X_STR && f->kind != X_ANY && f->kind != X_OBJ && f->kind != W_STR &&
           f->kind != W_OBJ && f->kind != W_ENABLED;
}

/* An "auto" the Trainer leaves in a section DeepSpeed reads with its
 * pydantic models (DeepSpeedConfigModel, non-strict): DeepSpeed drops the key
 * and takes its default. Elsewhere (top-level scalars, optimizer and
 * scheduler parameters) the string reaches code that needs a number. */
static int deepspeed_drops_auto(const char *kp)
{
    static const char *const sections[] = {"zero_optimization.", "fp16.", "bf16.", "bfloat16."};
    for (size_t i = 0; i < ARRAY_LEN(sections); i++)
        if (strncmp(kp, sections[i], strlen(sections[i])) == 0)
            return 1;
    return 0;
}

static void note_auto(pstate *ps, const char *kp)
{
    size_t used = strlen(ps->autos);
    const char *pre = ps->c.prefix ? ps->c.prefix : "";
    if (used + strlen(pre) + strlen(kp) + 8 < sizeof ps->autos)
        snprintf(ps->autos + used, sizeof ps->autos - used, "%s%s%s", ps->nauto ? ", " : "", pre,
                 kp);
    else if (!strstr(ps->autos, "..."))
        snprintf(ps->autos + used, sizeof ps->autos - used, ", ...");
    if (!ps->nauto)
        snprintf(ps->first_auto, sizeof ps->first_auto, "%s", kp);
    ps->nauto++;
}

/* Every "auto" the Trainer does not fill, at once: which keys, and how to
 * give them values (--set paths are inside the DeepSpeed config, without the
 * run config's prefix). */
static int auto_error(const pstate *ps)
{
    int inline_ds = ps->c.prefix && ps->c.prefix[0];
    return sg_error_set(ps->c.err, SG_EINVAL,
                        "%s: %d value%s \"auto\" where the Hugging Face Trainer writes no value "
                        "(it fills the keys listed in docs/config-keys.md; DeepSpeed itself, and "
                        "stepgraph, need the others): %s. Give each a value in the file, or with "
                        "--set KEY=VALUE on the command line%s (e.g. --set %s=...)", ps->c.origin,
                        ps->nauto, ps->nauto == 1 ? " is" : "s are", ps->autos,
                        inline_ds ? ", KEY being the path inside deepspeed_config" : "",
                        ps->first_auto);
}

static int walk(pstate *ps, const cJSON *obj, const char *path,
                const field *tab, size_t n)
{
    const char *names[128];
    size_t nn = n < ARRAY_LEN(names) ? n : ARRAY_LEN(names);
    for (size_t i = 0; i < nn; i++)
        names[i] = tab[i].name;

    for (const cJSON *it = obj->child; it; it = it->next) {
        const char *key = it->string ? it->string : "";
        char kp[256];
        join(kp, sizeof kp, path, key);
        for (const cJSON *prev = obj->child; prev != it; prev = prev->next)
            if (prev->string && strcmp(prev->string, key) == 0) {
                sg_json_warn(&ps->c, "key %s%s appears more than once; the last value is used",
                             ps->c.prefix, kp);
                break;
            }
        const field *f = find_field(tab, n, key);
        if (!f) {
            warn_unknown(&ps->c, kp, key, names, nn, path[0] == '\0');
            continue;
        }
        /* null is Python's None: DeepSpeed then uses the default */
        if (cJSON_IsNull(it))
            continue;
        /* the Trainer's keys: "auto" stays pending (the default meanwhile)
         * until sg_config_finalize() fills it from the run options */
        int akey = sg_ds_auto_key_of(kp);
        if (takes_auto_placeholder(f) && cJSON_IsString(it) && it->valuestring &&
            strcmp(it->valuestring, "auto") == 0) {
            if (akey >= 0)
                ps->ds->auto_pending |= SG_AUTO_BIT(akey);
            else if (deepspeed_drops_auto(kp))
                sg_json_warn(&ps->c, "%s%s: \"auto\" that the Hugging Face Trainer does not "
                             "fill: DeepSpeed drops it and takes the default, and so does "
                             "stepgraph", ps->c.prefix, kp);
            else
                note_auto(ps, kp);
            continue;
        }
        if (akey >= 0)
            ps->ds->auto_given |= SG_AUTO_BIT(akey);
        int rc = SG_OK, b;
        int64_t i64;
        double d;
        char *base = (char *)ps->ds;
        switch (f->kind) {
        case F_INT:
            rc = sg_json_int(&ps->c, it, kp, f->name, f->flags, f->lo, f->hi, f->expect,
                             (int64_t *)(void *)(base + f->off));
            break;
        case F_NUM:
            rc = sg_json_num(&ps->c, it, kp, f->name, f->flags, f->lo, f->hi, f->expect,
                             (double *)(void *)(base + f->off));
            break;
        case F_BOOL:
            rc = sg_json_bool(&ps->c, it, kp, (int *)(void *)(base + f->off));
            break;
        case X_BOOL:
            rc = sg_json_bool(&ps->c, it, kp, &b);
            break;
        case X_NUM:
            rc = sg_json_num(&ps->c, it, kp, f->name, 0, 0, 0, NULL, &d);
            break;
        case X_INT:
            rc = sg_json_int(&ps->c, it, kp, f->name, 0, 0, 0, NULL, &i64);
            break;
        case X_STR:
            if (!cJSON_IsString(it))
                rc = sg_json_type_error(&ps->c, it, kp, "a string");
            break;
        case X_OBJ:
            if (!cJSON_IsObject(it))
                rc = sg_json_type_error(&ps->c, it, kp, "an object");
            break;
        case X_ANY:
            break;
        case W_TRUE:
        case W_FALSE:
        case W_POS:
        case W_GT1:
        case W_STR:
        case W_OBJ:
        case W_ENABLED:
            rc = warn_ignored(ps, f, it, kp);
            break;
        case F_FN:
            rc = f->fn(ps, it, kp);
            break;
        }
        if (rc)
            return rc;
    }
    return SG_OK;
}

static const cJSON *get_given(const cJSON *obj, const char *key)
{
    const cJSON *it = cJSON_GetObjectItemCaseSensitive(obj, key);
    return (it && !cJSON_IsNull(it)) ? it : NULL;
}

static int need_object(pstate *ps, const cJSON *it, const char *path)
{
    if (!cJSON_IsObject(it))
        return sg_json_type_error(&ps->c, it, path, "an object");
    return SG_OK;
}

static int h_skip(pstate *ps, const cJSON *it, const char *path)
{
    (void)ps;
    (void)it;
    (void)path;
    return SG_OK;
}

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
        return sg_json_error(&ps->c, SG_ENOTSUP, "%s: %lld is not supported by stepgraph (%s; "
                             "its ranks are data-parallel only)", kp, (long long)v, what);
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
        return sg_json_error(&ps->c, SG_ENOTSUP, "%s: \"sum\" is not supported by stepgraph (its "
                             "ranks average their gradients)", path);
    char v[96];
    sg_json_repr(it, v, sizeof v);
    return sg_json_error(&ps->c, SG_EINVAL, "%s: %s is not valid (expected \"mean\" or \"sum\")",
                         path, v);
}

/* ---- optimizer -------------------------------------------------------- */

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
        return sg_json_error(&ps->c, SG_ENOTSUP, "%s: true%s is not supported by stepgraph%s",
                             path, what, also);
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
                         "top-level key \"gradient_clipping\"", path);
}

static const field opt_param_fields[] = {
    FD("lr", optimizer.lr, NONNEG, 0, 0),
    FF("betas", h_betas),
    FD("eps", optimizer.eps, NONNEG, 0, 0),
    FD("weight_decay", optimizer.weight_decay, NONNEG, 0, 0),
    FB("adam_w_mode", optimizer.adam_w_mode),
    FX("torch_adam", X_BOOL),           /* read in h_optimizer */
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
    const char *name;         /* as DeepSpeed and the error messages spell it */
    int type;                 /* sg_optimizer_type or sg_lr_schedule */
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
                         size_t nlists, const param_list *self, const field *fields,
                         size_t nfields, const char *exempt)
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
                             "it; its parameters: %.*s)", kp, owners, self->name, self->name, n,
                             self->params + 1);
    }
    return SG_OK;
}

/* The optimizer types, by the names DeepSpeed lower-cases, each with the
 * parameters its classes take (space-separated, padded with spaces): with
 * offload_optimizer DeepSpeedCPUAdam / DeepSpeedCPULion /
 * DeepSpeedCPUAdagrad, else FusedAdam or torch's Adam(W) (torch_adam),
 * FusedLion, torch.optim.Adagrad. max_grad_norm is everyone's, for its own
 * error. */
#define ADAM_PARAMS                                                                        \
    " lr betas eps weight_decay adam_w_mode torch_adam bias_correction amsgrad "           \
    "max_grad_norm fp32_optimizer_states foreach fused capturable "
static const param_list opt_types[] = {
    {"Adam", SG_OPT_ADAM, ADAM_PARAMS},
    {"AdamW", SG_OPT_ADAMW, ADAM_PARAMS},
    {"Lion", SG_OPT_LION, " lr betas weight_decay fp32_optimizer_states set_grad_none max_grad_norm "},
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
    return walk(ps, it, path, opt_param_fields, ARRAY_LEN(opt_param_fields));
}

static const field opt_fields[] = {
    FF("type", h_skip), /* read first, in h_optimizer */
    FF("params", h_opt_params),
    FX("legacy_fusion", X_BOOL),
};

static int h_optimizer(pstate *ps, const cJSON *it, const char *path)
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
    if ((rc = walk(ps, it, path, opt_fields, ARRAY_LEN(opt_fields))))
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
        return sg_json_error(&ps->c, SG_EINVAL, "%s: %s is not valid (expected \"log\" or \"linear\")",
                             path, v);
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

#define LO_HI_OPEN (SG_JSON_LO | SG_JSON_HI | SG_JSON_HI_OPEN)  /* [lo, hi) */

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
    if ((rc = walk(ps, it, path, sched_param_fields, ARRAY_LEN(sched_param_fields))))
        return rc;
    if (ds->scheduler.type == SG_SCHED_WARMUP_LR && get_given(it, "total_num_steps")) {
        char kp[256];
        join(kp, sizeof kp, path, "total_num_steps");
        sg_json_warn(&ps->c, "%s%s ignored: WarmupLR does not decay (DeepSpeed's WarmupLR "
                     "rejects it; use WarmupDecayLR)", ps->c.prefix, kp);
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

#define SCHED_NAMES "\"WarmupLR\", \"WarmupDecayLR\", \"WarmupCosineLR\", \"OneCycle\" or " \
                    "\"LRRangeTest\""

static int h_scheduler(pstate *ps, const cJSON *it, const char *path)
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
                             "mean \"%s\"?)", kp, t, nearly->name);
    if (!found)
        return sg_json_error(&ps->c, SG_ENOTSUP,
                             "%s: \"%s\" is not supported by stepgraph (expected " SCHED_NAMES
                             ")", kp, t);
    ps->ds->scheduler.type = (sg_lr_schedule)found->type;
    return walk(ps, it, path, sched_fields, ARRAY_LEN(sched_fields));
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
    return walk(ps, it, path, fp16_fields, ARRAY_LEN(fp16_fields));
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
    return walk(ps, it, path, bf16_fields, ARRAY_LEN(bf16_fields));
}

/* "bfloat16" is DeepSpeed's older name, read only when "bf16" is absent. */
static int h_bfloat16(pstate *ps, const cJSON *it, const char *path)
{
    if (ps->bf16_present) {
        sg_json_warn(&ps->c, "%s%s ignored: \"bf16\" is given and takes precedence (as in DeepSpeed)",
                     ps->c.prefix, path);
        return SG_OK;
    }
    ps->bf16_key = "bfloat16";
    return h_bf16(ps, it, path);
}

/* ---- zero_optimization ------------------------------------------------ */

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
        return sg_json_error(&ps->c, SG_EINVAL, "%s: %s is not valid (expected \"cpu\", \"nvme\" or \"none\")",
                             path, v);
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
    return warn_int_not(ps, it, path, 100000000, "StarPU moves each parameter piece whole "
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
    FW("fast_init", W_TRUE, "the disk node's files start empty (sparse) and the initial "
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
    return walk(ps, it, path, offload_opt_fields, ARRAY_LEN(offload_opt_fields));
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
    return walk(ps, it, path, offload_param_fields, ARRAY_LEN(offload_param_fields));
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
    return sg_json_error(&ps->c, SG_ENOTSUP, "%s: ZenFlow is not supported by stepgraph (its "
                         "offloaded optimizer steps every parameter at every update)", path);
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
    FW("mics_shard_size", W_POS, "MiCS shard groups are not modelled (ZeRO shards over every rank)"),
    FX("mics_hierarchical_params_gather", X_BOOL),
    FX("save_muon_momentum_buffer_in_memory", X_BOOL),
    FX("leaf_module", X_OBJ),
    FX("compute_grad_norm", X_BOOL),   /* stepgraph always has the norm */
    FX("parameter_alignment", X_BOOL), /* padding of DeepSpeed's flat buffers */
    FF("zenflow", h_zenflow),
};

static int h_zero(pstate *ps, const cJSON *it, const char *path)
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
    if ((rc = walk(ps, it, path, zero_fields, ARRAY_LEN(zero_fields))))
        return rc;
    /* overlap_comm: None means true for stage 3, false otherwise */
    if (!get_given(it, "overlap_comm"))
        ds->zero.overlap_comm = ds->zero.stage == 3;
    /* only DeepSpeed's ZeRO-3 partitions parameters; its stage 1 and 2
     * optimizers never read offload_param */
    if (ds->zero.offload_param.device != SG_OFFLOAD_NONE && ds->zero.stage != 3)
        sg_json_warn(&ps->c, "%s%s.offload_param: device \"%s\" has no effect at stage %lld "
                     "(ignored, as in DeepSpeed: only ZeRO stage 3 offloads parameters)",
                     ps->c.prefix, path,
                     ds->zero.offload_param.device == SG_OFFLOAD_CPU ? "cpu" : "nvme",
                     (long long)ds->zero.stage);
    return SG_OK;
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
    if ((rc = walk(ps, it, path, act_fields, ARRAY_LEN(act_fields))))
        return rc;
    if (ps->ds->activation_checkpointing.cpu_checkpointing)
        sg_json_warn(&ps->c, "%s%s.cpu_checkpointing: true has no effect in stepgraph (ignored): "
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
    {"block_size", 0, 1048576}, {"queue_depth", 0, 8},    {"thread_count", 0, 1},
    {"single_submit", 1, 0},    {"overlap_events", 1, 1}, {"use_gds", 1, 0},
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
            warn_unknown(&ps->c, kp, k->string, names, ARRAY_LEN(aio_keys), 0);
            continue;
        }
        int b = 0;
        int64_t v = 0;
        if (cJSON_IsNull(k))
            continue;
        rc = aio_keys[i].is_bool ? sg_json_bool(&ps->c, k, kp, &b)
                                 : sg_json_int(&ps->c, k, kp, k->string, SG_JSON_LO, 0, 0, NULL, &v);
        if (!rc && (aio_keys[i].is_bool ? b : v) != aio_keys[i].dflt) {
            char r[96];
            sg_json_repr(k, r, sizeof r);
            sg_json_warn(&ps->c, "%s%s: %s has no effect in stepgraph (ignored): StarPU's disk "
                         "node does its own I/O (docs/memory.md, NVMe offload)", ps->c.prefix, kp, r);
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
    FF("optimizer", h_optimizer),
    FF("scheduler", h_scheduler),
    FD("gradient_clipping", gradient_clipping, NONNEG, 0, 0),
    FF("fp16", h_fp16),
    FF("bf16", h_bf16),
    FF("bfloat16", h_bfloat16),
    FF("zero_optimization", h_zero),
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
    FW("data_types", W_OBJ,
       "stepgraph's gradient dtypes follow its precision mode alone"),
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
    FW("nebula", W_ENABLED, "stepgraph writes its own checkpoints (docs/training.md, "
       "\"Weights and checkpoints\")"),
    FW("datastates_ckpt", W_OBJ, "stepgraph writes its own checkpoints"),
    FW("compile", W_OBJ, "stepgraph compiles the step into a StarPU task graph, not with "
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

    int rc = walk(&ps, root, "", top_fields, ARRAY_LEN(top_fields));
    if (rc)
        return rc;
    if (ps.nauto)
        return auto_error(&ps);
    if (ds->scheduler.type == SG_SCHED_ONE_CYCLE && ds->scheduler.cycle_momentum &&
        ds->optimizer.type == SG_OPT_ADAGRAD) {
        /* lr_schedules.py: an optimizer without betas turns cycle_momentum off */
        sg_json_warn(&ps.c, "%sscheduler.params.cycle_momentum ignored: Adagrad has no momentum "
                     "(DeepSpeed's OneCycle turns it off for an optimizer without betas)",
                     ps.c.prefix);
        ds->scheduler.cycle_momentum = 0;
    }
    if (ds->scheduler.type == SG_SCHED_ONE_CYCLE && ds->scheduler.cycle_momentum &&
        (ds->optimizer.beta1 != 0.9 || ds->optimizer.beta2 != 0.999))
        /* DeepSpeed's OneCycle writes (momentum, 0.99) into the optimizer */
        sg_json_warn(&ps.c, "%soptimizer.params.betas (%g, %g) are not used: OneCycle with "
                     "cycle_momentum sets %s's betas to (its cycling momentum, 0.99) at every "
                     "update, as DeepSpeed does (set scheduler.params.cycle_momentum false to keep "
                     "them)", ps.c.prefix, ds->optimizer.beta1, ds->optimizer.beta2,
                     ds->optimizer.type == SG_OPT_LION ? "Lion" : "Adam");
    if (ds->scheduler.type != SG_SCHED_NONE && !ps.warmup_max_lr_given)
        /* lr_schedules.py: WarmupLR's default is the optimizer's lr;
         * WarmupDecayLR's own default is 0.001. */
        ds->scheduler.warmup_max_lr =
            ds->scheduler.type == SG_SCHED_WARMUP_LR ? ds->optimizer.lr : 1e-3;
    return sg_ds_config_check(c, ds, ps.bf16_key);
}

int sg_ds_config_parse(const char *json_text, const char *origin,
                       sg_ds_config *ds, sg_config_warnings *warn,
                       sg_error *err)
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
    sg_json_ctx c = { origin, "", wtmp, err };
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
