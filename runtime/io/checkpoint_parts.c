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

#include "runtime/config/run_options.h" /* SG_PATH_MAX */

#define PART_NAME_MAX 64
#define PART_FILE_MAX (SG_PATH_MAX + PART_NAME_MAX + 2)

void sg_checkpoint_part_name(char *out, size_t size, int rank, int dp)
{
    snprintf(out, size, "optim.rank%d-of-%d.safetensors", rank, dp);
}

static const char *const kinds[3] = {"master", "exp_avg", "exp_avg_sq"};

typedef struct part_fill {
    const sg_unit_source *src;
    const int64_t *lo, *hi;
} part_fill;

/* Entry 3 u + k of a partition: set k of unit u's range (kinds[] are in
 * SG_SET_* order). */
static int fill_part_entry(void *ctx, int index, float *out)
{
    const part_fill *f = ctx;
    int u = index / 3;
    return f->src->fill(f->src->ctx, index % 3, u, f->lo[u], f->hi[u] - f->lo[u], out);
}

int sg_checkpoint_write_part(const char *dir, int rank, int dp, const sg_model *m,
                             const sg_train_state *st, const sg_unit_source *src, const int64_t *lo,
                             const int64_t *hi, sg_error *err)
{
    char name[PART_NAME_MAX], path[PART_FILE_MAX], part[48];
    sg_checkpoint_part_name(name, sizeof name, rank, dp);
    if (snprintf(path, sizeof path, "%s/%s", dir, name) >= (int)sizeof path)
        return sg_error_set(err, SG_EINVAL, "%s: path too long", dir);
    snprintf(part, sizeof part, "%d of %d", rank, dp);
    int nunits = sg_model_num_units(m), n = 0, nmeta = 0;
    sg_st_entry *e = calloc((size_t)3 * (size_t)nunits + 1, sizeof *e);
    sg_st_meta *md = calloc((size_t)nunits + 1, sizeof *md);
    char(*names)[48] = calloc((size_t)4 * (size_t)nunits + 1, sizeof *names);
    char(*offs)[24] = calloc((size_t)nunits + 1, sizeof *offs);
    int64_t *shape = calloc((size_t)nunits + 1, sizeof *shape);
    part_fill fill = {src, lo, hi};
    int rc = SG_OK;
    if (!e || !md || !names || !offs || !shape) {
        rc = sg_error_set(err, SG_ENOMEM, "%s: out of memory", path);
        goto out;
    }
    md[nmeta++] = (sg_st_meta){"partition", part};
    for (int u = 0; u < nunits; u++) {
        if (hi[u] <= lo[u])
            continue;
        shape[u] = hi[u] - lo[u];
        for (int k = 0; k < 3; k++) {
            snprintf(names[4 * u + k], sizeof names[0], "unit.%d.%s", u, kinds[k]);
            e[n++] = (sg_st_entry){.name = names[4 * u + k],
                                   .dtype = SG_F32,
                                   .src_dtype = SG_F32,
                                   .ndim = 1,
                                   .shape = &shape[u],
                                   .fill = fill_part_entry,
                                   .fill_ctx = &fill,
                                   .fill_index = 3 * u + k};
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

/* The index of value v's first element that is not finite (or negative
 * when nonneg), or -1. */
static int64_t first_bad(const float *v, int64_t n, int nonneg)
{
    for (int64_t i = 0; i < n; i++)
        if (!isfinite(v[i]) || (nonneg && v[i] < 0))
            return i;
    return -1;
}

/* Checks partition file f of rank (path) and records its parts in r,
 * advancing covered[u]; rank 0's metadata goes into st, the others' step
 * must equal it. */
static int check_one(sg_parts_reader *r, int rank, const char *path, const sg_model *m,
                     sg_train_state *st, int64_t *covered, sg_error *err)
{
    const sg_st_file *f = &r->files[rank];
    int dp = r->dp;
    sg_train_state meta = *st;
    int rc = sg_train_state_read_meta(path, f, m, &meta, err);
    if (rc)
        return rc;
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
        return sg_error_set(err, SG_EINVAL,
                            "%s: step %" PRId64 ", but rank 0's partition is of "
                            "step %" PRId64,
                            path, meta.step, st->step);
    }
    char want[48];
    snprintf(want, sizeof want, "%d of %d", rank, dp);
    const char *part = sg_st_meta_get(f, "partition");
    if (!part || strcmp(part, want) != 0)
        return sg_error_set(err, SG_EINVAL,
                            "%s: __metadata__.partition is \"%s\", expected "
                            "\"%s\"",
                            path, part ? part : "(missing)", want);
    for (int u = 0; u < r->nunits; u++) {
        char key[48];
        snprintf(key, sizeof key, "unit.%d.offset", u);
        const char *off = sg_st_meta_get(f, key);
        if (!off)
            continue;
        char *end;
        errno = 0;
        long long lo = strtoll(off, &end, 10);
        int64_t p = sg_model_unit_params(m, u);
        const sg_st_tensor **t = &r->t[3 * ((size_t)rank * (size_t)r->nunits + (size_t)u)];
        for (int k = 0; k < 3; k++) {
            snprintf(key, sizeof key, "unit.%d.%s", u, kinds[k]);
            t[k] = sg_st_find(f, key);
            if (!t[k] || t[k]->dtype != SG_F32 || t[k]->ndim != 1)
                return sg_error_set(err, SG_EINVAL, "%s: tensor %s %s", path, key,
                                    t[k] ? "is not a 1-D F32 tensor" : "is missing");
            if (k && t[k]->numel != t[0]->numel)
                return sg_error_set(err, SG_EINVAL,
                                    "%s: %s has %" PRId64 " elements, unit.%d."
                                    "master %" PRId64,
                                    path, key, t[k]->numel, u, t[0]->numel);
        }
        if (*end || errno || lo < 0 || lo > p || t[0]->numel > p - lo)
            return sg_error_set(err, SG_EINVAL,
                                "%s: unit.%d.offset \"%s\" with %" PRId64
                                " elements is outside unit %d's %" PRId64 " parameters",
                                path, u, off, t[0]->numel, u, p);
        if (lo != covered[u])
            return sg_error_set(err, SG_EINVAL,
                                "%s: unit %d: this partition starts at element "
                                "%lld, but the partitions of the ranks before it end at %" PRId64,
                                path, u, lo, covered[u]);
        r->lo[(size_t)rank * (size_t)r->nunits + (size_t)u] = lo;
        covered[u] = lo + t[0]->numel;
    }
    return SG_OK;
}

void sg_parts_close(sg_parts_reader *r)
{
    for (int k = 0; r->files && k < r->dp; k++)
        if (r->files[k].map)
            sg_st_close(&r->files[k]);
    free(r->files);
    free(r->lo);
    free(r->t);
    memset(r, 0, sizeof *r);
}

int sg_parts_open(const char *dir, int dp, const sg_model *m, sg_train_state *st,
                  sg_parts_reader *r, sg_error *err)
{
    memset(r, 0, sizeof *r);
    r->dp = dp;
    r->nunits = sg_model_num_units(m);
    size_t cells = (size_t)dp * (size_t)r->nunits + 1;
    r->files = calloc((size_t)dp, sizeof *r->files);
    r->lo = calloc(cells, sizeof *r->lo);
    r->t = calloc(3 * cells, sizeof *r->t);
    int64_t *covered = calloc((size_t)r->nunits + 1, sizeof *covered);
    int rc = r->files && r->lo && r->t && covered ? SG_OK
                                                  : sg_error_set(err, SG_ENOMEM, "out of memory");
    char name[PART_NAME_MAX], path[PART_FILE_MAX];
    for (int k = 0; k < dp && !rc; k++) {
        sg_checkpoint_part_name(name, sizeof name, k, dp);
        if (snprintf(path, sizeof path, "%s/%s", dir, name) >= (int)sizeof path) {
            rc = sg_error_set(err, SG_EINVAL, "%s: path too long", dir);
            break;
        }
        rc = sg_st_open(path, &r->files[k], err);
        if (rc == SG_ENOENT)
            rc = sg_error_set(err, SG_ENOENT,
                              "%s is missing: a checkpoint of %d ranks has one "
                              "optimizer partition per rank",
                              path, dp);
        else if (rc)
            sg_error_prefix(err, "optimizer partition: ");
        else
            rc = check_one(r, k, path, m, st, covered, err);
    }
    for (int u = 0; u < r->nunits && !rc; u++)
        if (covered[u] != sg_model_unit_params(m, u))
            rc = sg_error_set(err, SG_EINVAL,
                              "%s: the optimizer partitions of its %d ranks hold "
                              "%" PRId64 " of unit %d's %" PRId64 " parameters",
                              dir, dp, covered[u], u, sg_model_unit_params(m, u));
    free(covered);
    if (rc)
        sg_parts_close(r);
    else
        st->ranks = dp;
    return rc;
}

int sg_parts_read(const sg_parts_reader *r, int set, int u, int64_t lo, int64_t n, float *out,
                  sg_error *err)
{
    if (set < SG_SET_WEIGHTS || set > SG_SET_EXP_AVG_SQ || u < 0 || u >= r->nunits)
        return sg_error_set(err, SG_EINVAL, "optimizer partitions: no set %d of unit %d", set, u);
    int64_t done = 0;
    for (int k = 0; k < r->dp; k++) {
        size_t cell = (size_t)k * (size_t)r->nunits + (size_t)u;
        const sg_st_tensor *t = r->t[3 * cell + (size_t)set];
        if (!t)
            continue;
        int64_t plo = r->lo[cell], a = lo > plo ? lo : plo;
        int64_t b = lo + n < plo + t->numel ? lo + n : plo + t->numel;
        if (b <= a)
            continue;
        sg_st_read_f32_range_release(t, a - plo, b - a, out + (a - lo));
        int64_t bad = first_bad(out + (a - lo), b - a, set == SG_SET_EXP_AVG_SQ);
        if (bad >= 0)
            return sg_error_set(
                err, SG_EINVAL, "%s: unit.%d.%s: element %" PRId64 " is %g%s", r->files[k].path, u,
                kinds[set], a - plo + bad, (double)out[a - lo + bad],
                set == SG_SET_EXP_AVG_SQ ? " (not finite or negative)" : " (not finite)");
        done += b - a;
    }
    if (done != n) /* sg_parts_open checked the cover */
        return sg_error_set(err, SG_EINVAL,
                            "optimizer partitions: unit %d [%" PRId64 ", %" PRId64
                            ") is not covered",
                            u, lo, lo + n);
    return SG_OK;
}
