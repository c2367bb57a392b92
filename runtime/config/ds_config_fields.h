/* ds_config_fields.h - the DeepSpeed config parser's tables (internal to
 * runtime/config/ds_config*.c): the parser's state, a field's kinds and
 * table entry, the macros that write the tables, the walker that reads a
 * JSON object against a table (ds_config_walk.c), and the section handlers
 * one file gives another's table.
 */
#ifndef SG_DS_CONFIG_FIELDS_H
#define SG_DS_CONFIG_FIELDS_H

#include "runtime/config/ds_config.h"

#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "common/json_util.h"

#define ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))

typedef struct pstate {
    sg_json_ctx c;
    sg_ds_config *ds;
    const char *bf16_key; /* "bf16" or "bfloat16", for messages */
    int bf16_present;     /* "bf16" given: "bfloat16" is ignored */
    int warmup_max_lr_given;
    /* the keys whose value is "auto" (the HF Trainer's placeholder) that
     * the Trainer does not fill (ds_auto.h), all reported in one error once
     * the walk is done */
    int nauto;
    char autos[512];
    char first_auto[128];
} pstate;

typedef enum fkind {
    F_INT,
    F_NUM,
    F_BOOL, /* stored at off */
    X_BOOL,
    X_NUM,
    X_INT,
    X_STR,
    X_OBJ,
    X_ANY, /* accepted, no effect */
    /* accepted, no effect, but a DeepSpeed user would expect one: a warning
     * (the field's `expect` says why) when the value is not DeepSpeed's
     * default: W_TRUE when true, W_FALSE when false, W_POS when an integer
     * > 0 (W_GT1: > 1), W_STR when a string, W_OBJ when a non-empty object */
    W_TRUE,
    W_FALSE,
    W_POS,
    W_GT1,
    W_STR,
    W_OBJ,
    W_ENABLED, /* an object, warned when "enabled" is true */
    F_FN,      /* handled by fn */
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
#define FI(n, m, fl, lo, hi)                     \
    {                                            \
        n, F_INT, OFF(m), fl, lo, hi, NULL, NULL \
    }
#define FIE(n, m, fl, lo, hi, e)              \
    {                                         \
        n, F_INT, OFF(m), fl, lo, hi, e, NULL \
    }
#define FD(n, m, fl, lo, hi)                     \
    {                                            \
        n, F_NUM, OFF(m), fl, lo, hi, NULL, NULL \
    }
#define FB(n, m)                               \
    {                                          \
        n, F_BOOL, OFF(m), 0, 0, 0, NULL, NULL \
    }
#define FX(n, k)                     \
    {                                \
        n, k, 0, 0, 0, 0, NULL, NULL \
    }
#define FF(n, f)                     \
    {                                \
        n, F_FN, 0, 0, 0, 0, NULL, f \
    }
#define FW(n, k, why)               \
    {                               \
        n, k, 0, 0, 0, 0, why, NULL \
    }

static inline void join(char *buf, size_t size, const char *path, const char *key)
{
    if (path && *path)
        snprintf(buf, size, "%s.%s", path, key);
    else
        snprintf(buf, size, "%s", key);
}

static inline const field *find_field(const field *tab, size_t n, const char *key)
{
    for (size_t i = 0; i < n; i++)
        if (strcmp(tab[i].name, key) == 0)
            return &tab[i];
    return NULL;
}

static inline const cJSON *get_given(const cJSON *obj, const char *key)
{
    const cJSON *it = cJSON_GetObjectItemCaseSensitive(obj, key);
    return (it && !cJSON_IsNull(it)) ? it : NULL;
}

static inline int need_object(pstate *ps, const cJSON *it, const char *path)
{
    if (!cJSON_IsObject(it))
        return sg_json_type_error(&ps->c, it, path, "an object");
    return SG_OK;
}

static inline int h_skip(pstate *ps, const cJSON *it, const char *path)
{
    (void)ps;
    (void)it;
    (void)path;
    return SG_OK;
}

/* ds_config_walk.c: reads obj's keys against the n fields of tab (path:
 * obj's dotted path, "" at the top level); every "auto" the Trainer does not
 * fill is collected for sg_ds_auto_error, which reports them at once. */
int sg_ds_walk(pstate *ps, const cJSON *obj, const char *path, const field *tab, size_t n);
/* An unknown key KP (KEY) among NAMES: warned, with a did-you-mean (and, at
 * the top level of a DeepSpeed config, a note when KEY is a run option). */
void sg_ds_warn_unknown(const sg_json_ctx *c, const char *kp, const char *key,
                        const char *const *names, size_t n, int top_level_ds);
int sg_ds_auto_error(const pstate *ps);

/* the section handlers of the top-level table: ds_config_optimizer.c,
 * ds_config_zero.c */
int sg_ds_h_optimizer(pstate *ps, const cJSON *it, const char *path);
int sg_ds_h_scheduler(pstate *ps, const cJSON *it, const char *path);
int sg_ds_h_zero(pstate *ps, const cJSON *it, const char *path);

#endif
