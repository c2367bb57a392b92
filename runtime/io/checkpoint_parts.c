/* checkpoint_parts.c - optimizer partitions of several ranks (checkpoint_parts.h). */
#define _POSIX_C_SOURCE 200809L
#include "runtime/io/checkpoint_parts.h"

#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define PART_NAME_MAX 64
#define PART_FILE_MAX (SG_PATH_MAX + PART_NAME_MAX + 2)

void sg_checkpoint_part_name(char *out, size_t size, int rank, int dp)
{
    snprintf(out, size, "optim.rank%d-of-%d.safetensors", rank, dp);
}

void sg_unit_slice(int ntensors, const sg_tensor_info *info, const int *unit, float *const *data,
                   int u, int64_t lo, int64_t n, float *buf, int to_tensors)
{
    int64_t off = 0, hi = lo + n;
    for (int i = 0; i < ntensors; i++) {
        if (unit[i] != u)
            continue;
        int64_t a = off > lo ? off : lo, b = off + info[i].numel < hi ? off + info[i].numel : hi;
        if (b > a) {
            if (to_tensors)
                memcpy(data[i] + (a - off), buf + (a - lo), (size_t)(b - a) * sizeof(float));
            else
                memcpy(buf + (a - lo), data[i] + (a - off), (size_t)(b - a) * sizeof(float));
        }
        off += info[i].numel;
    }
}

static const char *const kinds[3] = {"master", "exp_avg", "exp_avg_sq"};

int sg_checkpoint_write_part(const char *dir, int rank, int dp, const sg_model *m,
                             const sg_weights *w, const sg_train_state *st, const int64_t *lo,
                             const int64_t *hi, sg_error *err)
{
    char name[PART_NAME_MAX], path[PART_FILE_MAX], part[48];
    sg_checkpoint_part_name(name, sizeof name, rank, dp);
    if (snprintf(path, sizeof path, "%s/%s", dir, name) >= (int)sizeof path)
        return sg_error_set(err, SG_EINVAL, "%s: path too long", dir);
    snprintf(part, sizeof part, "%d of %d", rank, dp);
    int nunits = sg_model_num_units(m), n = 0, nmeta = 0;
    int64_t total = 0;
    for (int u = 0; u < nunits; u++)
        if (hi[u] > lo[u])
            total += hi[u] - lo[u];
    sg_st_entry *e = calloc((size_t)3 * (size_t)nunits + 1, sizeof *e);
    sg_st_meta *md = calloc((size_t)nunits + 1, sizeof *md);
    char (*names)[48] = calloc((size_t)4 * (size_t)nunits + 1, sizeof *names);
    char (*offs)[24] = calloc((size_t)nunits + 1, sizeof *offs);
    int64_t *shape = calloc((size_t)nunits + 1, sizeof *shape);
    float *buf = malloc((size_t)(3 * total + 1) * sizeof(float));
    int rc = SG_OK;
    if (!e || !md || !names || !offs || !shape || !buf) {
        rc = sg_error_set(err, SG_ENOMEM, "%s: out of memory", path);
        goto out;
    }
    md[nmeta++] = (sg_st_meta){"partition", part};
    float *p = buf;
    for (int u = 0; u < nunits; u++) {
        if (hi[u] <= lo[u])
            continue;
        shape[u] = hi[u] - lo[u];
        float *const *src[3] = {w->data, st->exp_avg, st->exp_avg_sq};
        for (int k = 0; k < 3; k++) {
            sg_unit_slice(w->ntensors, w->info, w->unit, src[k], u, lo[u], shape[u], p, 0);
            snprintf(names[4 * u + k], sizeof names[0], "unit.%d.%s", u, kinds[k]);
            e[n++] = (sg_st_entry){.name = names[4 * u + k], .dtype = SG_F32,
                                   .src_dtype = SG_F32, .ndim = 1, .shape = &shape[u],
                                   .data = p};
            p += shape[u];
        }
        snprintf(names[4 * u + 3], sizeof names[0], "unit.%d.offset", u);
        snprintf(offs[u], sizeof offs[0], "%" PRId64, lo[u]);
        md[nmeta++] = (sg_st_meta){names[4 * u + 3], offs[u]};
    }
    rc = sg_train_state_write(st, path, m->name, e, n, md, nmeta, err);
out:
    free(e);
    free(md);
    free(names);
    free(offs);
    free(shape);
    free(buf);
    return rc;
}

int sg_checkpoint_parts_dp(const char *dir)
{
    /* rank 0's file names the count */
    DIR *d = opendir(dir);
    if (!d)
        return 0;
    struct dirent *e;
    int dp = 0;
    while ((e = readdir(d)) && !dp) {
        int n = 0, len = 0;
        char name[PART_NAME_MAX];
        if (sscanf(e->d_name, "optim.rank0-of-%d.safetensors%n", &n, &len) == 1 &&
            e->d_name[len] == '\0' && n >= 1) {
            sg_checkpoint_part_name(name, sizeof name, 0, n);
            if (strcmp(name, e->d_name) == 0)
                dp = n;
        }
    }
    closedir(d);
    return dp;
}

static int all_finite(const float *v, int64_t n, int nonneg)
{
    for (int64_t i = 0; i < n; i++)
        if (!isfinite(v[i]) || (nonneg && v[i] < 0))
            return 0;
    return 1;
}

/* Reads one partition file into w and st, advancing covered[u]. */
static int read_one(const char *path, int rank, int dp, const sg_model *m, sg_weights *w,
                    sg_train_state *st, int64_t *covered, sg_error *err)
{
    sg_st_file f;
    int rc = sg_st_open(path, &f, err);
    if (rc == SG_ENOENT)
        return sg_error_set(err, SG_ENOENT, "%s is missing: a checkpoint of %d ranks has one "
                            "optimizer partition per rank", path, dp);
    if (rc)
        return sg_error_prefix(err, "optimizer partition: "), rc;
    sg_train_state meta = *st;
    if ((rc = sg_train_state_read_meta(path, &f, m, &meta, err)))
        goto out;
    if (rank == 0) {
        st->step = meta.step;
        st->adam_step = meta.adam_step;
        st->loss_scale = meta.loss_scale;
        st->scaler_cur_iter = meta.scaler_cur_iter;
        st->scaler_last_overflow_iter = meta.scaler_last_overflow_iter;
        st->scaler_cur_hysteresis = meta.scaler_cur_hysteresis;
        st->has_scaler_counters = meta.has_scaler_counters;
        st->data = meta.data;
        memcpy(st->rng, meta.rng, sizeof st->rng);
        st->config_hash = meta.config_hash;
        memcpy(st->optimizer, meta.optimizer, sizeof st->optimizer);
    } else if (meta.step != st->step) {
        rc = sg_error_set(err, SG_EINVAL, "%s: step %" PRId64 ", but rank 0's partition is of "
                          "step %" PRId64, path, meta.step, st->step);
        goto out;
    }
    char want[48];
    snprintf(want, sizeof want, "%d of %d", rank, dp);
    const char *part = sg_st_meta_get(&f, "partition");
    if (!part || strcmp(part, want) != 0) {
        rc = sg_error_set(err, SG_EINVAL, "%s: __metadata__.partition is \"%s\", expected \"%s\"",
                          path, part ? part : "(missing)", want);
        goto out;
    }
    int nunits = sg_model_num_units(m);
    for (int u = 0; u < nunits && !rc; u++) {
        char key[48];
        snprintf(key, sizeof key, "unit.%d.offset", u);
        const char *off = sg_st_meta_get(&f, key);
        if (!off)
            continue;
        char *end;
        errno = 0;
        long long lo = strtoll(off, &end, 10);
        int64_t p = sg_model_unit_params(m, u);
        const sg_st_tensor *t[3];
        for (int k = 0; k < 3 && !rc; k++) {
            snprintf(key, sizeof key, "unit.%d.%s", u, kinds[k]);
            t[k] = sg_st_find(&f, key);
            if (!t[k] || t[k]->dtype != SG_F32 || t[k]->ndim != 1)
                rc = sg_error_set(err, SG_EINVAL, "%s: tensor %s %s", path, key,
                                  t[k] ? "is not a 1-D F32 tensor" : "is missing");
            else if (k && t[k]->numel != t[0]->numel)
                rc = sg_error_set(err, SG_EINVAL, "%s: %s has %" PRId64 " elements, unit.%d."
                                  "master %" PRId64, path, key, t[k]->numel, u, t[0]->numel);
        }
        if (rc)
            break;
        if (*end || errno || lo < 0 || lo > p || t[0]->numel > p - lo) {
            rc = sg_error_set(err, SG_EINVAL, "%s: unit.%d.offset \"%s\" with %" PRId64
                              " elements is outside unit %d's %" PRId64 " parameters", path, u,
                              off, t[0]->numel, u, p);
            break;
        }
        if (lo != covered[u]) {
            rc = sg_error_set(err, SG_EINVAL, "%s: unit %d: this partition starts at element "
                              "%lld, but the partitions of the ranks before it end at %" PRId64,
                              path, u, lo, covered[u]);
            break;
        }
        int64_t n = t[0]->numel;
        float *buf = malloc((size_t)(n + 1) * sizeof(float));
        if (!buf) {
            rc = sg_error_set(err, SG_ENOMEM, "%s: out of memory", path);
            break;
        }
        float *const *dst[3] = {w->data, st->exp_avg, st->exp_avg_sq};
        for (int k = 0; k < 3 && !rc; k++) {
            sg_st_read_f32(t[k], buf);
            if (!all_finite(buf, n, k == 2))
                rc = sg_error_set(err, SG_EINVAL, "%s: unit.%d.%s: a value is not finite%s", path,
                                  u, kinds[k], k == 2 ? " or is negative" : "");
            else
                sg_unit_slice(w->ntensors, w->info, w->unit, dst[k], u, lo, n, buf, 1);
        }
        free(buf);
        covered[u] = lo + n;
    }
out:
    sg_st_close(&f);
    return rc;
}

int sg_checkpoint_read_parts(const char *dir, int dp, const sg_model *m, sg_weights *w,
                             sg_train_state *st, sg_error *err)
{
    int rc = sg_train_state_alloc(st, m, err);
    if (rc)
        return rc;
    int nunits = sg_model_num_units(m);
    int64_t *covered = calloc((size_t)nunits + 1, sizeof *covered);
    if (!covered) {
        sg_train_state_free(st);
        return sg_error_set(err, SG_ENOMEM, "out of memory");
    }
    char name[PART_NAME_MAX], path[PART_FILE_MAX];
    for (int r = 0; r < dp && !rc; r++) {
        sg_checkpoint_part_name(name, sizeof name, r, dp);
        if (snprintf(path, sizeof path, "%s/%s", dir, name) >= (int)sizeof path)
            rc = sg_error_set(err, SG_EINVAL, "%s: path too long", dir);
        else
            rc = read_one(path, r, dp, m, w, st, covered, err);
    }
    for (int u = 0; u < nunits && !rc; u++)
        if (covered[u] != sg_model_unit_params(m, u))
            rc = sg_error_set(err, SG_EINVAL, "%s: the optimizer partitions of its %d ranks hold "
                              "%" PRId64 " of unit %d's %" PRId64 " parameters", dir, dp,
                              covered[u], u, sg_model_unit_params(m, u));
    free(covered);
    if (rc)
        sg_train_state_free(st);
    else
        st->ranks = dp;
    return rc;
}
