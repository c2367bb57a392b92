/* train_state.c - the training-state file (see weights.h): the optimizer's
 * moments per tensor and the run's counters (step, loss scaler, data
 * position, RNG, config hash) as safetensors metadata; written, checked
 * against a model and read back. */

#define _POSIX_C_SOURCE 200809L /* strdup with -std=c11 */

#include "runtime/io/weights.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/io/weights_common.h"

int sg_train_state_alloc_moments(sg_train_state *s, const sg_model *m, sg_error *err)
{
    int *unit = NULL;
    int rc = sg_weights_model_tensors(m, &s->info, &unit, &s->ntensors, err);
    free(unit);
    if (rc < 0)
        return rc;
    float **ptrs[2];
    s->block = sg_weights_alloc_block(s->info, s->ntensors, 2, ptrs, NULL);
    if (!s->block) {
        sg_train_state_free_moments(s);
        return sg_error_set(err, SG_ENOMEM, "model %s: out of memory for the Adam moments",
                            m->name);
    }
    s->exp_avg = ptrs[0];
    s->exp_avg_sq = ptrs[1];
    return SG_OK;
}

int sg_train_state_describe_moments(sg_train_state *s, const sg_model *m, sg_error *err)
{
    int *unit = NULL;
    int rc = sg_weights_model_tensors(m, &s->info, &unit, &s->ntensors, err);
    free(unit);
    return rc < 0 ? rc : SG_OK;
}

void sg_train_state_free_moments(sg_train_state *s)
{
    free(s->info);
    free(s->exp_avg);
    free(s->exp_avg_sq);
    free(s->block);
    s->info = NULL;
    s->exp_avg = s->exp_avg_sq = NULL;
    s->block = NULL;
    s->ntensors = 0;
}

/* What a state is before a file says otherwise: step 0, loss scale 1,
 * scaler counters 0, -1, 1, one rank. */
static void state_defaults(sg_train_state *s)
{
    s->loss_scale = 1.0;
    s->scaler_last_overflow_iter = -1;
    s->scaler_cur_hysteresis = 1;
    s->ranks = 1;
}

int sg_train_state_describe(sg_train_state *s, const sg_model *m, sg_error *err)
{
    memset(s, 0, sizeof *s);
    state_defaults(s);
    return sg_train_state_describe_moments(s, m, err);
}

int sg_train_state_alloc(sg_train_state *s, const sg_model *m, sg_error *err)
{
    memset(s, 0, sizeof *s);
    int rc = sg_train_state_alloc_moments(s, m, err);
    if (rc)
        return rc;
    state_defaults(s);
    return SG_OK;
}

void sg_train_state_free(sg_train_state *s)
{
    if (!s)
        return;
    sg_train_state_free_moments(s);
    memset(s, 0, sizeof *s);
}

#define STATE_NAME_MAX (SG_TENSOR_NAME_MAX + 16)

enum {
    META_FORMAT,
    META_VERSION,
    META_MODEL,
    META_STEP,
    META_LOSS_SCALE,
    META_EPOCH,
    META_INDEX,
    META_WINDOWS,
    META_RNG,
    META_HASH,
    META_COUNT
};

static const char *const meta_keys[META_COUNT] = {
    "stepgraph",  "version",    "model",        "step",      "loss_scale",
    "data_epoch", "data_index", "data_windows", "rng_state", "config_hash",
};

/* the loss scaler's counters (optional on load: older files lack them) */
enum { NSCALER = 3 };
static const char *const scaler_keys[NSCALER] = {
    "loss_scaler_cur_iter",
    "loss_scaler_last_overflow_iter",
    "loss_scaler_cur_hysteresis",
};

int sg_train_state_write(const sg_train_state *s, const char *path, const char *model_name,
                         const sg_st_entry *t, int n, const sg_st_meta *extra, int nextra,
                         sg_error *err)
{
    char v[META_COUNT][128];
    snprintf(v[META_FORMAT], sizeof v[0], "train_state");
    snprintf(v[META_VERSION], sizeof v[0], "%d", SG_TRAIN_STATE_VERSION);
    snprintf(v[META_MODEL], sizeof v[0], "%s", model_name ? model_name : "");
    snprintf(v[META_STEP], sizeof v[0], "%lld", (long long)s->step);
    snprintf(v[META_LOSS_SCALE], sizeof v[0], "%.17g", s->loss_scale);
    snprintf(v[META_EPOCH], sizeof v[0], "%" PRIu64, s->data.epoch);
    snprintf(v[META_INDEX], sizeof v[0], "%" PRIu64, s->data.index);
    snprintf(v[META_WINDOWS], sizeof v[0], "%" PRIu64, s->data.nwindows);
    snprintf(v[META_RNG], sizeof v[0], "%016" PRIx64 ",%016" PRIx64 ",%016" PRIx64 ",%016" PRIx64,
             s->rng[0], s->rng[1], s->rng[2], s->rng[3]);
    snprintf(v[META_HASH], sizeof v[0], "%016" PRIx64, s->config_hash);
    int nmd = META_COUNT + 1 + NSCALER + (nextra > 0 ? nextra : 0) + (s->optimizer[0] != 0);
    sg_st_meta *md = calloc((size_t)nmd, sizeof *md);
    if (!md)
        return sg_error_set(err, SG_ENOMEM, "%s: out of memory", path);
    for (int i = 0; i < META_COUNT; i++)
        md[i] = (sg_st_meta){meta_keys[i], v[i]};
    char adam[32], sc[NSCALER][32];
    snprintf(adam, sizeof adam, "%lld", (long long)s->adam_step);
    md[META_COUNT] = (sg_st_meta){"adam_step", adam};
    const int64_t scv[NSCALER] = {s->scaler_cur_iter, s->scaler_last_overflow_iter,
                                  s->scaler_cur_hysteresis};
    for (int i = 0; i < NSCALER; i++) {
        snprintf(sc[i], sizeof sc[i], "%lld", (long long)scv[i]);
        md[META_COUNT + 1 + i] = (sg_st_meta){scaler_keys[i], sc[i]};
    }
    for (int i = 0; i < nextra; i++)
        md[META_COUNT + 1 + NSCALER + i] = extra[i];
    if (s->optimizer[0])
        md[nmd - 1] = (sg_st_meta){"optimizer", s->optimizer};
    int rc = sg_st_write(path, t, n, md, nmd, err);
    free(md);
    return rc;
}

int sg_train_state_save(const sg_train_state *s, const char *path, const char *model_name,
                        sg_error *err)
{
    int n = 2 * s->ntensors;
    sg_st_entry *e = calloc((size_t)(n > 0 ? n : 1), sizeof *e);
    char(*names)[STATE_NAME_MAX] = calloc((size_t)(n > 0 ? n : 1), sizeof *names);
    if (!e || !names) {
        free(e);
        free(names);
        return sg_error_set(err, SG_ENOMEM, "%s: out of memory", path);
    }
    for (int i = 0; i < s->ntensors; i++)
        for (int k = 0; k < 2; k++) {
            int j = 2 * i + k;
            snprintf(names[j], STATE_NAME_MAX, "%s.%s", s->info[i].name,
                     k ? "exp_avg_sq" : "exp_avg");
            float *const *set = k ? s->exp_avg_sq : s->exp_avg;
            e[j] = sg_weights_tensor_entry(&s->info[i], SG_F32, set ? set[i] : NULL, s->source,
                                           k ? SG_SET_EXP_AVG_SQ : SG_SET_EXP_AVG, i);
            e[j].name = names[j];
        }
    int rc = sg_train_state_write(s, path, model_name, e, n, NULL, 0, err);
    free(e);
    free(names);
    return rc;
}

/* Counters and epochs stay far from int64_t's limit so that adding steps
 * to them cannot overflow. */
#define META_INT_MAX ((uint64_t)1 << 62)

/* Strict decimal integer: digits only (no sign, space or "0x"), no leading
 * zero except "0" itself, at most META_INT_MAX. */
static int parse_dec(const char *s, uint64_t *out)
{
    if (!s || !*s || (s[0] == '0' && s[1]))
        return -1;
    uint64_t v = 0;
    for (const char *p = s; *p; p++) {
        if (*p < '0' || *p > '9')
            return -1;
        v = v * 10 + (uint64_t)(*p - '0');
        if (v > META_INT_MAX)
            return -1;
    }
    *out = v;
    return 0;
}

/* Exactly 16 hexadecimal digits (what the writer prints), no "0x". */
static int parse_hex64(const char *s, size_t len, uint64_t *out)
{
    if (!s || len != 16)
        return -1;
    uint64_t v = 0;
    for (size_t i = 0; i < len; i++) {
        char c = s[i];
        int d = c >= '0' && c <= '9'   ? c - '0'
                : c >= 'a' && c <= 'f' ? c - 'a' + 10
                : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                       : -1;
        if (d < 0)
            return -1;
        v = v << 4 | (uint64_t)d;
    }
    *out = v;
    return 0;
}

/* A finite decimal number > 0: digits [. digits] [e [sign] digits], no sign,
 * hexadecimal float, inf or nan. */
static int parse_pos_decimal(const char *s, double *out)
{
    if (!s)
        return -1;
    const char *p = s;
    if (*p < '0' || *p > '9')
        return -1;
    while (*p >= '0' && *p <= '9')
        p++;
    if (*p == '.') {
        p++;
        while (*p >= '0' && *p <= '9')
            p++;
    }
    if (*p == 'e' || *p == 'E') {
        p++;
        if (*p == '+' || *p == '-')
            p++;
        if (*p < '0' || *p > '9')
            return -1;
        while (*p >= '0' && *p <= '9')
            p++;
    }
    if (*p)
        return -1;
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (*end || !isfinite(v) || v <= 0)
        return -1;
    *out = v;
    return 0;
}

static int meta_error(const char *path, const char *key, const char *value, const char *what,
                      sg_error *err)
{
    if (!value)
        return sg_error_set(err, SG_EINVAL,
                            "%s: __metadata__.%s is missing (not a stepgraph "
                            "training state?)",
                            path, key);
    return sg_error_set(err, SG_EINVAL, "%s: __metadata__.%s: \"%s\" is not %s", path, key, value,
                        what);
}

int sg_train_state_read_meta(const char *path, const sg_st_file *f, const sg_model *m,
                             sg_train_state *s, sg_error *err)
{
    const char *v[META_COUNT];
    for (int i = 0; i < META_COUNT; i++)
        v[i] = sg_st_meta_get(f, meta_keys[i]);
    uint64_t u;
    if (!v[META_FORMAT] || strcmp(v[META_FORMAT], "train_state") != 0)
        return meta_error(path, meta_keys[META_FORMAT], v[META_FORMAT], "\"train_state\"", err);
    if (parse_dec(v[META_VERSION], &u) || u != SG_TRAIN_STATE_VERSION)
        return meta_error(path, meta_keys[META_VERSION], v[META_VERSION],
                          "a version this program reads (1)", err);
    if (!v[META_MODEL])
        return meta_error(path, meta_keys[META_MODEL], NULL, "", err);
    if (strcmp(v[META_MODEL], m->name) != 0)
        return sg_error_set(err, SG_EINVAL,
                            "%s: __metadata__.model: the state is for model \"%s\", not \"%s\"",
                            path, v[META_MODEL], m->name);
    if (parse_dec(v[META_STEP], &u))
        return meta_error(path, meta_keys[META_STEP], v[META_STEP],
                          "an integer between 0 and 2^62 (decimal digits, no leading zero)", err);
    s->step = (int64_t)u;
    /* optional (files without it: no step was skipped) */
    const char *adam = sg_st_meta_get(f, "adam_step");
    if (adam && (parse_dec(adam, &u) || u > (uint64_t)s->step))
        return meta_error(path, "adam_step", adam, "an integer between 0 and step", err);
    s->adam_step = adam ? (int64_t)u : s->step;
    double ls;
    if (parse_pos_decimal(v[META_LOSS_SCALE], &ls))
        return meta_error(path, meta_keys[META_LOSS_SCALE], v[META_LOSS_SCALE],
                          "a finite decimal number > 0", err);
    s->loss_scale = ls;
    /* the scaler's counters: all three or none (older files) */
    const char *sv[NSCALER];
    int nsc = 0;
    for (int i = 0; i < NSCALER; i++)
        nsc += (sv[i] = sg_st_meta_get(f, scaler_keys[i])) != NULL;
    if (nsc && nsc < NSCALER)
        for (int i = 0; i < NSCALER; i++)
            if (!sv[i])
                return sg_error_set(err, SG_EINVAL,
                                    "%s: __metadata__.%s is missing (the other "
                                    "loss scaler counters are present)",
                                    path, scaler_keys[i]);
    s->has_scaler_counters = nsc == NSCALER;
    if (s->has_scaler_counters) {
        if (parse_dec(sv[0], &u) || u > (uint64_t)s->step)
            return meta_error(path, scaler_keys[0], sv[0], "an integer between 0 and step", err);
        s->scaler_cur_iter = (int64_t)u;
        if (strcmp(sv[1], "-1") == 0)
            s->scaler_last_overflow_iter = -1;
        else if (parse_dec(sv[1], &u) || u >= (uint64_t)s->scaler_cur_iter)
            return meta_error(path, scaler_keys[1], sv[1],
                              "-1 or an integer below loss_scaler_cur_iter", err);
        else
            s->scaler_last_overflow_iter = (int64_t)u;
        if (parse_dec(sv[2], &u) || u < 1)
            return meta_error(path, scaler_keys[2], sv[2], "an integer between 1 and 2^62", err);
        s->scaler_cur_hysteresis = (int64_t)u;
    }
    uint64_t *dst[3] = {&s->data.epoch, &s->data.index, &s->data.nwindows};
    for (int i = 0; i < 3; i++)
        if (parse_dec(v[META_EPOCH + i], dst[i]))
            return meta_error(path, meta_keys[META_EPOCH + i], v[META_EPOCH + i],
                              "an integer between 0 and 2^62 (decimal digits, no leading zero)",
                              err);
    if (s->data.nwindows && s->data.index >= s->data.nwindows)
        return sg_error_set(err, SG_EINVAL,
                            "%s: __metadata__.data_index: %" PRIu64 " is not below data_windows "
                            "%" PRIu64,
                            path, s->data.index, s->data.nwindows);
    const char *r = v[META_RNG];
    int ok = r != NULL;
    for (int i = 0; i < 4 && ok; i++) {
        char part[32];
        const char *comma = strchr(r, ',');
        size_t len = comma ? (size_t)(comma - r) : strlen(r);
        if ((i < 3) != (comma != NULL) || len > 16) {
            ok = 0;
            break;
        }
        memcpy(part, r, len);
        part[len] = '\0';
        ok = parse_hex64(part, len, &s->rng[i]) == 0;
        r = comma ? comma + 1 : r + len;
    }
    if (!ok)
        return meta_error(path, meta_keys[META_RNG], v[META_RNG],
                          "four comma-separated hexadecimal 64-bit words (16 hex digits each)",
                          err);
    if (!v[META_HASH] || parse_hex64(v[META_HASH], strlen(v[META_HASH]), &s->config_hash))
        return meta_error(path, meta_keys[META_HASH], v[META_HASH],
                          "a hexadecimal 64-bit word (16 hex digits)", err);
    /* the update rule (optional: older files are Adam's) */
    const char *opt = sg_st_meta_get(f, "optimizer");
    s->optimizer[0] = '\0';
    if (opt) {
        if (strcmp(opt, "adam") != 0 && strcmp(opt, "lion") != 0 && strcmp(opt, "adagrad") != 0)
            return meta_error(path, "optimizer", opt, "\"adam\", \"lion\" or \"adagrad\"", err);
        snprintf(s->optimizer, sizeof s->optimizer, "%s", opt);
    }
    return SG_OK;
}

int sg_train_state_check(const char *path, const sg_model *m, sg_train_state *out, sg_st_file *f,
                         sg_error *err)
{
    memset(out, 0, sizeof *out);
    int rc = sg_st_open(path, f, err);
    if (rc < 0)
        return rc;
    rc = sg_train_state_describe_moments(out, m, err);
    state_defaults(out);
    if (rc == SG_OK)
        rc = sg_train_state_read_meta(path, f, m, out, err);

    /* Every moment: present, F32, the parameter's shape. */
    name_list missing = {{0}, 0}, extra = {{0}, 0};
    char nm[STATE_NAME_MAX];
    for (int i = 0; i < out->ntensors && rc == SG_OK; i++)
        for (int k = 0; k < 2 && rc == SG_OK; k++) {
            snprintf(nm, sizeof nm, "%s.%s", out->info[i].name, k ? "exp_avg_sq" : "exp_avg");
            const sg_st_tensor *t = sg_st_find(f, nm);
            if (!t)
                sg_weights_list_add(&missing, nm);
            else if (!sg_weights_same_shape(t, &out->info[i]))
                rc = sg_weights_shape_error(path, nm, t, &out->info[i], err);
            else if (t->dtype != SG_F32)
                rc = sg_error_set(err, SG_EINVAL,
                                  "%s: %s: dtype %s, expected F32 (Adam moments are fp32)", path,
                                  nm, sg_st_dtype_name(t->dtype));
        }
    if (rc == SG_OK && missing.count) {
        sg_weights_list_finish(&missing);
        rc = sg_error_set(err, SG_EINVAL, "%s: %d optimizer tensor%s of model %s missing: %s", path,
                          missing.count, missing.count > 1 ? "s" : "", m->name, missing.text);
    }
    /* Unknown tensors: each must be "<model tensor>.exp_avg[_sq]". */
    const char **names = rc == SG_OK ? sg_weights_sorted_names(out->info, out->ntensors) : NULL;
    if (rc == SG_OK && !names)
        rc = sg_error_set(err, SG_ENOMEM, "%s: out of memory", path);
    for (int i = 0; i < f->ntensors && rc == SG_OK; i++) {
        const char *tn = f->tensors[i].name;
        size_t len = strlen(tn);
        int known = 0;
        const char *suffixes[2] = {".exp_avg", ".exp_avg_sq"};
        for (int k = 0; k < 2 && !known; k++) {
            size_t sl = strlen(suffixes[k]);
            if (len > sl && len - sl < sizeof nm && strcmp(tn + len - sl, suffixes[k]) == 0) {
                memcpy(nm, tn, len - sl);
                nm[len - sl] = '\0';
                known = sg_weights_in_sorted(names, out->ntensors, nm);
            }
        }
        if (!known)
            sg_weights_list_add(&extra, tn);
    }
    free(names);
    if (rc == SG_OK && extra.count) {
        sg_weights_list_finish(&extra);
        rc = sg_error_set(err, SG_EINVAL,
                          "%s: %d tensor%s not in the optimizer state of model "
                          "%s: %s",
                          path, extra.count, extra.count > 1 ? "s" : "", m->name, extra.text);
    }
    if (rc < 0) {
        sg_st_close(f);
        sg_train_state_free(out);
    }
    return rc;
}

int sg_train_state_read_moment(const sg_st_file *f, const char *path, const sg_tensor_info *info,
                               int squares, float *out, sg_error *err)
{
    char nm[STATE_NAME_MAX];
    snprintf(nm, sizeof nm, "%s.%s", info->name, squares ? "exp_avg_sq" : "exp_avg");
    const sg_st_tensor *t = sg_st_find(f, nm);
    if (!t || t->numel != info->numel)
        return sg_error_set(err, SG_EINVAL, "%s: %s: not in the file checked", path, nm);
    sg_st_read_f32_release(t, out);
    return sg_weights_check_finite(path, nm, out, t->numel, squares, err);
}

int sg_train_state_load(const char *path, const sg_model *m, sg_train_state *out, sg_error *err)
{
    sg_st_file f;
    int rc = sg_train_state_check(path, m, out, &f, err);
    if (rc < 0)
        return rc;
    sg_train_state_free_moments(out);
    rc = sg_train_state_alloc_moments(out, m, err);
    for (int i = 0; i < out->ntensors && rc == SG_OK; i++)
        for (int k = 0; k < 2 && rc == SG_OK; k++)
            rc = sg_train_state_read_moment(&f, path, &out->info[i], k,
                                            k ? out->exp_avg_sq[i] : out->exp_avg[i], err);
    sg_st_close(&f);
    if (rc < 0)
        sg_train_state_free(out);
    return rc;
}
