/* run_options.c - stepgraph run options: defaults, the run config keys,
 * command-line flags and their range checks (see run_options.h).
 */
#define _POSIX_C_SOURCE 200809L

#include "runtime/config/run_options.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <cjson/cJSON.h>

#include "common/json_util.h"

#define ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))
#define LO SG_JSON_LO
#define POS (SG_JSON_LO | SG_JSON_LO_OPEN) /* > 0 */
#define NONNEG SG_JSON_LO                  /* >= 0 */

void sg_run_options_defaults(sg_run_options *run)
{
    memset(run, 0, sizeof *run);
    snprintf(run->model, sizeof run->model, "%s", "tiny-llama");
    run->data[0] = '\0';
    snprintf(run->sched, sizeof run->sched, "%s", "dmdas");
    run->machine[0] = '\0';
    run->max_length = 256;
    run->steps = 0;
    run->warmup_steps = 0;
    run->bench_steps = 0;
    run->log_interval = 0; /* resolved by finalize: steps_per_print, else 10 */
    run->activation_checkpointing = -1;
    run->seed = 42;
    run->dp_size = 1;
    run->ncpus = -1;
    run->ncuda = -1;
    snprintf(run->save_dtype, sizeof run->save_dtype, "%s", "f32");
    run->save_keep = 2;
    run->speculation[0] = '\0'; /* resolved in config.c: "adaptive", or "never" with Lion */
    run->lookahead = 2;
    run->numa_node = -1;
    run->comm_timeout = 60;
    run->optimizer_tile = SG_TILE_AUTO;
    snprintf(run->cast_placement, sizeof run->cast_placement, "%s", "scheduler");
    run->batch_tile = SG_TILE_AUTO;
    run->head_chunk_tokens = SG_TILE_AUTO;
    /* TrainingArguments: not given (ds_auto.c picks the value) */
    run->hf.per_device_train_batch_size = -1;
    run->hf.gradient_accumulation_steps = -1;
    run->hf.learning_rate = run->hf.adam_beta1 = run->hf.adam_beta2 = NAN;
    run->hf.adam_epsilon = run->hf.weight_decay = run->hf.max_grad_norm = NAN;
    run->hf.lr_warmup_steps = NAN;
    run->hf.fp16 = run->hf.bf16 = -1;
}

/* R_TILE: an int64 option, "auto" (stored as SG_TILE_AUTO) or an integer in
 * range, given as a JSON number or string or on the command line. R_NUM: a
 * double, NAN until given. */
typedef enum rkind { R_STR, R_INT, R_BOOL, R_TILE, R_NUM } rkind;

typedef struct ropt {
    const char *name;
    rkind kind;
    size_t off;
    size_t size;    /* R_STR: buffer size */
    int nonempty;   /* R_STR: 1 non-empty; 2 non-empty when given ("" = unset) */
    unsigned flags; /* R_INT, R_NUM range */
    double lo, hi;
    int unset; /* R_INT: -1 means not given (the range applies once given) */
} ropt;

#define ROFF(m) offsetof(sg_run_options, m)
static const ropt run_opts[] = {
    {"model", R_STR, ROFF(model), SG_PATH_MAX, 1, 0, 0, 0, 0},
    {"data", R_STR, ROFF(data), SG_PATH_MAX, 0, 0, 0, 0, 0},
    {"sched", R_STR, ROFF(sched), SG_NAME_MAX, 1, 0, 0, 0, 0},
    {"machine", R_STR, ROFF(machine), SG_NAME_MAX, 0, 0, 0, 0, 0},
    {"max_length", R_INT, ROFF(max_length), 0, 0, POS | SG_JSON_HI, 0, SG_MAX_LENGTH_MAX, 0},
    {"steps", R_INT, ROFF(steps), 0, 0, NONNEG, 0, 0, 0},
    {"warmup_steps", R_INT, ROFF(warmup_steps), 0, 0, NONNEG, 0, 0, 0},
    {"bench_steps", R_INT, ROFF(bench_steps), 0, 0, NONNEG, 0, 0, 0},
    {"log_interval", R_INT, ROFF(log_interval), 0, 0, NONNEG, 0, 0, 0},
    {"activation_checkpointing", R_BOOL, ROFF(activation_checkpointing), 0, 0, 0, 0, 0, 0},
    {"seed", R_INT, ROFF(seed), 0, 0, NONNEG, 0, 0, 0},
    {"dp_size", R_INT, ROFF(dp_size), 0, 0, LO, 1, 0, 0},
    {"ncpus", R_INT, ROFF(ncpus), 0, 0, LO, -1, 0, 0},
    {"ncuda", R_INT, ROFF(ncuda), 0, 0, LO, -1, 0, 0},
    {"load", R_STR, ROFF(load), SG_PATH_MAX, 0, 0, 0, 0, 0},
    {"save", R_STR, ROFF(save), SG_PATH_MAX, 0, 0, 0, 0, 0},
    {"save_interval", R_INT, ROFF(save_interval), 0, 0, NONNEG, 0, 0, 0},
    {"save_keep", R_INT, ROFF(save_keep), 0, 0, NONNEG, 0, 0, 0},
    {"save_dtype", R_STR, ROFF(save_dtype), 8, 1, 0, 0, 0, 0},
    {"save_shard_size", R_INT, ROFF(save_shard_size), 0, 0, NONNEG, 0, 0, 0},
    {"speculation", R_STR, ROFF(speculation), 16, 2, 0, 0, 0, 0}, /* "" = unset */
    {"lookahead", R_INT, ROFF(lookahead), 0, 0, LO | SG_JSON_HI, 1, SG_LOOKAHEAD_MAX, 0},
    {"metrics", R_STR, ROFF(metrics), SG_PATH_MAX, 0, 0, 0, 0, 0},
    {"trace", R_STR, ROFF(trace), SG_PATH_MAX, 0, 0, 0, 0, 0},
    {"numa_node", R_INT, ROFF(numa_node), 0, 0, LO, -1, 0, 0},
    {"bind_cores_to_rank", R_BOOL, ROFF(bind_cores_to_rank), 0, 0, 0, 0, 0, 0},
    {"numa", R_BOOL, ROFF(numa), 0, 0, 0, 0, 0, 0},
    {"numa_emulate", R_INT, ROFF(numa_emulate), 0, 0, NONNEG | SG_JSON_HI, 0, 1024, 0},
    {"strict", R_BOOL, ROFF(strict), 0, 0, 0, 0, 0, 0},
    {"comm_timeout", R_INT, ROFF(comm_timeout), 0, 0, LO | SG_JSON_HI, 1, 86400, 0},
    {"optimizer_tile", R_TILE, ROFF(optimizer_tile), 0, 0, NONNEG | SG_JSON_HI, 0,
     (double)((int64_t)1 << 40), 0},
    {"cast_placement", R_STR, ROFF(cast_placement), 16, 1, 0, 0, 0, 0},
    {"batch_tile", R_TILE, ROFF(batch_tile), 0, 0, NONNEG, 0, 0, 0},
    {"head_chunk_tokens", R_TILE, ROFF(head_chunk_tokens), 0, 0, LO, 1, 0, 0},
    /* validation during a run (runtime/train/eval.h) */
    {"eval_data", R_STR, ROFF(eval_data), SG_PATH_MAX, 0, 0, 0, 0, 0},
    {"eval_interval", R_INT, ROFF(eval_interval), 0, 0, NONNEG, 0, 0, 0},
    {"eval_batches", R_INT, ROFF(eval_batches), 0, 0, NONNEG, 0, 0, 0},
    /* TrainingArguments, for "auto" in the DeepSpeed config (ds_auto.h) */
    {"per_device_train_batch_size", R_INT, ROFF(hf.per_device_train_batch_size), 0, 0, POS, 0, 0,
     1},
    {"gradient_accumulation_steps", R_INT, ROFF(hf.gradient_accumulation_steps), 0, 0, POS, 0, 0,
     1},
    {"learning_rate", R_NUM, ROFF(hf.learning_rate), 0, 0, NONNEG, 0, 0, 0},
    {"adam_beta1", R_NUM, ROFF(hf.adam_beta1), 0, 0, LO | SG_JSON_HI | SG_JSON_HI_OPEN, 0, 1, 0},
    {"adam_beta2", R_NUM, ROFF(hf.adam_beta2), 0, 0, LO | SG_JSON_HI | SG_JSON_HI_OPEN, 0, 1, 0},
    {"adam_epsilon", R_NUM, ROFF(hf.adam_epsilon), 0, 0, NONNEG, 0, 0, 0},
    {"weight_decay", R_NUM, ROFF(hf.weight_decay), 0, 0, NONNEG, 0, 0, 0},
    {"max_grad_norm", R_NUM, ROFF(hf.max_grad_norm), 0, 0, NONNEG, 0, 0, 0},
    {"lr_warmup_steps", R_NUM, ROFF(hf.lr_warmup_steps), 0, 0, NONNEG, 0, 0, 0},
    {"fp16", R_BOOL, ROFF(hf.fp16), 0, 0, 0, 0, 0, 0},
    {"bf16", R_BOOL, ROFF(hf.bf16), 0, 0, 0, 0, 0, 0},
};

static int parse_int_text(const char *s, int64_t *out);
static void ropt_expect(const ropt *o, char *buf, size_t size);

/* A tile option written as a JSON string: "auto" or an integer in range
 * ("4096", "4e3"). */
static int tile_from_json_text(const sg_json_ctx *c, const cJSON *it, const ropt *o, int64_t *out)
{
    const char *v = it->valuestring ? it->valuestring : "";
    int64_t n;
    if (!strcmp(v, "auto")) {
        *out = SG_TILE_AUTO;
        return SG_OK;
    }
    if (parse_int_text(v, &n))
        return sg_json_error(c, SG_EINVAL, "%s: expected \"auto\" or an integer, got \"%s\"",
                             o->name, v);
    if (!sg_json_in_range((double)n, o->flags, o->lo, o->hi)) {
        char d[128];
        ropt_expect(o, d, sizeof d);
        return sg_json_error(c, SG_EINVAL, "%s: %lld is out of range (%s)", o->name, (long long)n,
                             d);
    }
    *out = n;
    return SG_OK;
}

int sg_run_cast_placement(const sg_run_options *run, int *placement, sg_error *err)
{
    static const char *const names[] = {"auto", "cpu", "gpu", "scheduler", "fused"};
    for (int i = 0; i < 5; i++)
        if (strcmp(run->cast_placement, names[i]) == 0) {
            *placement = i;
            return SG_OK;
        }
    return sg_error_set(err, SG_EINVAL,
                        "cast_placement: expected scheduler, cpu, gpu, fused or auto, "
                        "got \"%s\"",
                        run->cast_placement);
}

/* The checks of the options whose values are words (run_opts rows above). */
static int check_word_options(const sg_run_options *run, sg_error *err)
{
    int pl;
    return sg_run_cast_placement(run, &pl, err);
}

static const ropt *find_ropt(const char *key)
{
    for (size_t i = 0; i < ARRAY_LEN(run_opts); i++)
        if (strcmp(run_opts[i].name, key) == 0)
            return &run_opts[i];
    return NULL;
}

int sg_run_option_is_key(const char *key)
{
    return find_ropt(key) != NULL;
}

/* Range text for a run option: "(expected max_length > 0)". */
static void ropt_expect(const ropt *o, char *buf, size_t size)
{
    sg_json_range_desc(buf, size, o->name, o->flags, o->lo, o->hi);
}

int sg_run_options_from_json(const cJSON *root, const sg_json_ctx *c,
                             int (*is_ds_key)(const char *key), sg_run_options *run)
{
    const char *names[ARRAY_LEN(run_opts) + 1];
    for (size_t i = 0; i < ARRAY_LEN(run_opts); i++)
        names[i] = run_opts[i].name;
    names[ARRAY_LEN(run_opts)] = "deepspeed_config";

    for (const cJSON *it = root->child; it; it = it->next) {
        const char *key = it->string ? it->string : "";
        if (strcmp(key, "deepspeed_config") == 0)
            continue;
        for (const cJSON *prev = root->child; prev != it; prev = prev->next)
            if (prev->string && strcmp(prev->string, key) == 0) {
                sg_json_warn(c, "key %s appears more than once; the last value is used", key);
                break;
            }
        const ropt *o = find_ropt(key);
        /* "fp16": {...} is the DeepSpeed section, not the Trainer's flag */
        if (o && cJSON_IsObject(it) && is_ds_key && is_ds_key(key))
            o = NULL;
        if (!o) {
            const char *s = sg_json_suggest(key, names, ARRAY_LEN(names));
            if (s && strcmp(s, key) != 0)
                sg_json_warn(c, "unknown key %s ignored (did you mean %s?)", key, s);
            else if (is_ds_key && is_ds_key(key))
                sg_json_warn(c,
                             "unknown key %s ignored (a DeepSpeed key: it belongs in the "
                             "DeepSpeed config named by \"deepspeed_config\")",
                             key);
            else
                sg_json_warn(c, "unknown key %s ignored", key);
            continue;
        }
        if (cJSON_IsNull(it))
            continue;
        char *base = (char *)run;
        int rc = SG_OK;
        switch (o->kind) {
        case R_STR:
            rc = sg_json_str(c, it, key, base + o->off, o->size);
            if (rc == SG_OK && o->nonempty && base[o->off] == '\0')
                rc = sg_json_error(c, SG_EINVAL, "%s: expected a non-empty string, got \"\"", key);
            break;
        case R_INT:
            rc = sg_json_int(c, it, key, key, o->flags, o->lo, o->hi, NULL,
                             (int64_t *)(void *)(base + o->off));
            break;
        case R_BOOL: rc = sg_json_bool(c, it, key, (int *)(void *)(base + o->off)); break;
        case R_NUM:
            rc = sg_json_num(c, it, key, key, o->flags, o->lo, o->hi, NULL,
                             (double *)(void *)(base + o->off));
            break;
        case R_TILE:
            if (cJSON_IsString(it))
                rc = tile_from_json_text(c, it, o, (int64_t *)(void *)(base + o->off));
            else
                rc = sg_json_int(c, it, key, key, o->flags, o->lo, o->hi, NULL,
                                 (int64_t *)(void *)(base + o->off));
            break;
        }
        if (rc)
            return rc;
    }
    return SG_OK;
}

static int parse_int_text(const char *s, int64_t *out)
{
    if (!s || !*s || isspace((unsigned char)s[0]) || strpbrk(s, "xX"))
        return -1; /* no hex: strtod would read 0x10 */
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (*end == '\0' && errno == 0) {
        *out = v;
        return 0;
    }
    /* "4e8", as in DeepSpeed configs */
    errno = 0;
    double d = strtod(s, &end);
    if (end != s && *end == '\0' && isfinite(d) && d == floor(d) && d >= -9223372036854775808.0 &&
        d < 9223372036854775808.0) {
        *out = (int64_t)d;
        return 0;
    }
    return -1;
}

int sg_run_option_set(sg_run_options *run, const char *key, const char *value, sg_error *err)
{
    if (!run || !key)
        return sg_error_set(err, SG_EINVAL, "run option: no option name given");
    while (*key == '-')
        key++;
    char name[64];
    size_t n = strlen(key);
    if (n == 0 || n >= sizeof name)
        return sg_error_set(err, SG_EINVAL, "unknown option --%s", key);
    for (size_t i = 0; i <= n; i++)
        name[i] = key[i] == '-' ? '_' : key[i]; /* --max-length == --max_length */
    const ropt *o = find_ropt(name);
    if (!o) {
        const char *names[ARRAY_LEN(run_opts)];
        for (size_t i = 0; i < ARRAY_LEN(run_opts); i++)
            names[i] = run_opts[i].name;
        const char *s = sg_json_suggest(name, names, ARRAY_LEN(names));
        if (s)
            return sg_error_set(err, SG_EINVAL, "unknown option --%s (did you mean --%s?)", key, s);
        return sg_error_set(err, SG_EINVAL, "unknown option --%s", key);
    }
    char *base = (char *)run;
    switch (o->kind) {
    case R_STR: {
        if (!value)
            return sg_error_set(err, SG_EINVAL, "--%s: a value is required", key);
        size_t len = strlen(value);
        if (o->nonempty && len == 0)
            return sg_error_set(err, SG_EINVAL, "--%s: expected a non-empty value", key);
        if (len >= o->size)
            return sg_error_set(err, SG_EINVAL,
                                "--%s: value of %zu bytes is too long (at most %zu)", key, len,
                                o->size - 1);
        memcpy(base + o->off, value, len + 1);
        return check_word_options(run, err);
    }
    case R_TILE:
    case R_INT: {
        int64_t v;
        if (!value)
            return sg_error_set(err, SG_EINVAL, "--%s: a value is required (%s)", key,
                                o->kind == R_TILE ? "auto or an integer" : "an integer");
        if (o->kind == R_TILE && !strcmp(value, "auto")) {
            *(int64_t *)(void *)(base + o->off) = SG_TILE_AUTO;
            return SG_OK;
        }
        if (parse_int_text(value, &v) && o->kind == R_TILE)
            return sg_error_set(err, SG_EINVAL, "--%s: expected auto or an integer, got \"%s\"",
                                key, value);
        if (parse_int_text(value, &v))
            return sg_error_set(err, SG_EINVAL, "--%s: expected an integer, got \"%s\"", key,
                                value);
        if (!sg_json_in_range((double)v, o->flags, o->lo, o->hi)) {
            char d[128];
            ropt_expect(o, d, sizeof d);
            return sg_error_set(err, SG_EINVAL, "--%s: %lld is out of range (%s)", key,
                                (long long)v, d);
        }
        *(int64_t *)(void *)(base + o->off) = v;
        return SG_OK;
    }
    case R_NUM: {
        char *end;
        double d = value ? strtod(value, &end) : NAN;
        if (!value || end == value || *end || !isfinite(d))
            return sg_error_set(err, SG_EINVAL, "--%s: expected a number, got \"%s\"", key,
                                value ? value : "");
        if (!sg_json_in_range(d, o->flags, o->lo, o->hi)) {
            char r[128];
            ropt_expect(o, r, sizeof r);
            return sg_error_set(err, SG_EINVAL, "--%s: %g is out of range (%s)", key, d, r);
        }
        *(double *)(void *)(base + o->off) = d;
        return SG_OK;
    }
    case R_BOOL: {
        int b;
        /* a bare flag (--activation_checkpointing) turns it on */
        if (!value || !*value || !strcasecmp(value, "true") || !strcmp(value, "1") ||
            !strcasecmp(value, "yes") || !strcasecmp(value, "on"))
            b = 1;
        else if (!strcasecmp(value, "false") || !strcmp(value, "0") || !strcasecmp(value, "no") ||
                 !strcasecmp(value, "off"))
            b = 0;
        else
            return sg_error_set(err, SG_EINVAL,
                                "--%s: expected true or false (or 1/0, yes/no, on/off), got \"%s\"",
                                key, value);
        *(int *)(void *)(base + o->off) = b;
        return SG_OK;
    }
    }
    return sg_error_set(err, SG_EINVAL, "--%s: internal error", key);
}

int sg_run_options_check(const sg_run_options *run, const char *origin, sg_error *err)
{
    const char *base = (const char *)run;
    for (size_t i = 0; i < ARRAY_LEN(run_opts); i++) {
        const ropt *o = &run_opts[i];
        if (o->kind == R_INT || o->kind == R_TILE) {
            int64_t v = *(const int64_t *)(const void *)(base + o->off);
            if ((o->kind == R_TILE && v == SG_TILE_AUTO) || (o->unset && v == -1))
                continue;
            if (!sg_json_in_range((double)v, o->flags, o->lo, o->hi)) {
                char d[128];
                ropt_expect(o, d, sizeof d);
                return sg_error_set(err, SG_EINVAL, "%s: %s: %lld is out of range (%s)", origin,
                                    o->name, (long long)v, d);
            }
        } else if (o->kind == R_NUM) {
            double d = *(const double *)(const void *)(base + o->off);
            if (!isnan(d) && !sg_json_in_range(d, o->flags, o->lo, o->hi)) {
                char r[128];
                ropt_expect(o, r, sizeof r);
                return sg_error_set(err, SG_EINVAL, "%s: %s: %g is out of range (%s)", origin,
                                    o->name, d, r);
            }
        } else if (o->kind == R_STR) {
            const char *s = base + o->off;
            if (memchr(s, '\0', o->size) == NULL)
                return sg_error_set(err, SG_EINVAL, "%s: %s: string is not terminated", origin,
                                    o->name);
            if (o->nonempty == 1 && !*s)
                return sg_error_set(err, SG_EINVAL, "%s: %s: expected a non-empty string", origin,
                                    o->name);
        }
    }
    const int *bools[] = {&run->activation_checkpointing, &run->hf.fp16, &run->hf.bf16};
    const char *bool_names[] = {"activation_checkpointing", "fp16", "bf16"};
    for (int i = 0; i < 3; i++)
        if (*bools[i] < -1 || *bools[i] > 1)
            return sg_error_set(err, SG_EINVAL, "%s: %s: %d is out of range (expected -1, 0 or 1)",
                                origin, bool_names[i], *bools[i]);
    if (check_word_options(run, err))
        return sg_error_prefix(err, "%s: ", origin);
    return SG_OK;
}
