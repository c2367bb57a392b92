/* ds_config_walk.c - the table walker of the DeepSpeed config parser: each
 * key of a JSON object is looked up in a table of fields (ds_config_fields.h)
 * and read as its kind says; an unknown key is a warning naming its path
 * (with the nearest known name), a duplicate key a warning, an ignored
 * setting that a DeepSpeed user would expect to act a warning saying why,
 * and the Hugging Face Trainer's "auto" is left pending, dropped as
 * DeepSpeed drops it, or collected for one error naming every such key.
 */
#define _POSIX_C_SOURCE 200809L

#include "runtime/config/ds_config_fields.h"

#include "runtime/config/ds_auto.h"
#include "runtime/config/run_options.h"

void sg_ds_warn_unknown(const sg_json_ctx *c, const char *kp, const char *key,
                        const char *const *names, size_t n, int top_level_ds)
{
    const char *s = sg_json_suggest(key, names, n);
    if (s)
        sg_json_warn(c, "unknown key %s%s ignored (did you mean %s?)", c->prefix, kp, s);
    else if (top_level_ds && sg_run_option_is_key(key))
        sg_json_warn(c,
                     "unknown key %s%s ignored (a stepgraph run option: it belongs in a run "
                     "config, next to \"deepspeed_config\")",
                     c->prefix, kp);
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
        sg_json_warn(&ps->c, "%s%s: %s has no effect in stepgraph (ignored): %s", ps->c.prefix, kp,
                     v, f->expect);
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
int sg_ds_auto_error(const pstate *ps)
{
    int inline_ds = ps->c.prefix && ps->c.prefix[0];
    return sg_error_set(ps->c.err, SG_EINVAL,
                        "%s: %d value%s \"auto\" where the Hugging Face Trainer writes no value "
                        "(it fills the keys listed in docs/config-keys.md; DeepSpeed itself, and "
                        "stepgraph, need the others): %s. Give each a value in the file, or with "
                        "--set KEY=VALUE on the command line%s (e.g. --set %s=...)",
                        ps->c.origin, ps->nauto, ps->nauto == 1 ? " is" : "s are", ps->autos,
                        inline_ds ? ", KEY being the path inside deepspeed_config" : "",
                        ps->first_auto);
}

int sg_ds_walk(pstate *ps, const cJSON *obj, const char *path, const field *tab, size_t n)
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
            sg_ds_warn_unknown(&ps->c, kp, key, names, nn, path[0] == '\0');
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
                sg_json_warn(&ps->c,
                             "%s%s: \"auto\" that the Hugging Face Trainer does not "
                             "fill: DeepSpeed drops it and takes the default, and so does "
                             "stepgraph",
                             ps->c.prefix, kp);
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
        case F_BOOL: rc = sg_json_bool(&ps->c, it, kp, (int *)(void *)(base + f->off)); break;
        case X_BOOL: rc = sg_json_bool(&ps->c, it, kp, &b); break;
        case X_NUM: rc = sg_json_num(&ps->c, it, kp, f->name, 0, 0, 0, NULL, &d); break;
        case X_INT: rc = sg_json_int(&ps->c, it, kp, f->name, 0, 0, 0, NULL, &i64); break;
        case X_STR:
            if (!cJSON_IsString(it))
                rc = sg_json_type_error(&ps->c, it, kp, "a string");
            break;
        case X_OBJ:
            if (!cJSON_IsObject(it))
                rc = sg_json_type_error(&ps->c, it, kp, "an object");
            break;
        case X_ANY: break;
        case W_TRUE:
        case W_FALSE:
        case W_POS:
        case W_GT1:
        case W_STR:
        case W_OBJ:
        case W_ENABLED: rc = warn_ignored(ps, f, it, kp); break;
        case F_FN: rc = f->fn(ps, it, kp); break;
        }
        if (rc)
            return rc;
    }
    return SG_OK;
}
