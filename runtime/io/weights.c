/* weights.c - fp32 parameters, initialisation, weights and training-state
 * files (see weights.h). */
#define _POSIX_C_SOURCE 200809L /* strdup with -std=c11 */

#include "runtime/io/weights.h"

#include "runtime/io/hf_dir.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/atomic_file.h"
#include "common/json_util.h" /* sg_config_warnings_add */

#define ALIGN_FLOATS 16 /* 64 bytes: a cache line, and any SIMD width */
#define LIST_MAX 3      /* names listed in a missing/extra message */

/* ------------------------------------------------------------------------ */
/* tensor lists and storage                                                  */

/* Every tensor of m in unit order; *unit_out gets each tensor's unit. */
static int model_tensors(const sg_model *m, sg_tensor_info **info_out, int **unit_out, int *n_out,
                         sg_error *err)
{
    int nu = sg_model_num_units(m), n = 0;
    for (int u = 0; u < nu; u++) {
        int k = sg_model_unit_tensors(m, u, NULL, 0);
        if (k < 0)
            return sg_error_set(err, SG_EINVAL, "model %s: cannot list the tensors of unit %d",
                                m->name, u);
        n += k;
    }
    sg_tensor_info *info = calloc((size_t)(n > 0 ? n : 1), sizeof *info);
    int *unit = calloc((size_t)(n > 0 ? n : 1), sizeof *unit);
    if (!info || !unit) {
        free(info);
        free(unit);
        return sg_error_set(err, SG_ENOMEM, "model %s: out of memory", m->name);
    }
    int at = 0;
    for (int u = 0; u < nu; u++) {
        int k = sg_model_unit_tensors(m, u, info + at, n - at);
        for (int i = 0; i < k; i++)
            unit[at + i] = u;
        at += k;
    }
    *info_out = info;
    *unit_out = unit;
    *n_out = n;
    return SG_OK;
}

static int64_t padded(int64_t numel)
{
    return (numel + ALIGN_FLOATS - 1) / ALIGN_FLOATS * ALIGN_FLOATS;
}

/* One zeroed block for `copies` arrays per tensor, each 64-byte aligned;
 * calloc keeps untouched pages lazy for big models. */
static float *alloc_block(const sg_tensor_info *info, int n, int copies, float ***ptrs,
                          int64_t *numel_out)
{
    int64_t total = 0, numel = 0;
    for (int i = 0; i < n; i++) {
        total += padded(info[i].numel) * copies;
        numel += info[i].numel;
    }
    float *block = calloc((size_t)total + ALIGN_FLOATS, sizeof(float));
    if (!block)
        return NULL;
    uintptr_t a = ((uintptr_t)block + 63) & ~(uintptr_t)63;
    float *p = (float *)a;
    for (int c = 0; c < copies; c++) {
        ptrs[c] = malloc((size_t)(n > 0 ? n : 1) * sizeof(float *));
        if (!ptrs[c]) {
            for (int k = 0; k < c; k++)
                free(ptrs[k]);
            free(block);
            return NULL;
        }
    }
    for (int c = 0; c < copies; c++)
        for (int i = 0; i < n; i++) {
            ptrs[c][i] = p;
            p += padded(info[i].numel);
        }
    if (numel_out)
        *numel_out = numel;
    return block;
}

int sg_weights_alloc(sg_weights *w, const sg_model *m, sg_error *err)
{
    memset(w, 0, sizeof *w);
    int rc = model_tensors(m, &w->info, &w->unit, &w->ntensors, err);
    if (rc < 0)
        return rc;
    float **ptrs[1];
    w->block = alloc_block(w->info, w->ntensors, 1, ptrs, &w->numel);
    if (!w->block) {
        int64_t total = sg_model_total_params(m);
        sg_weights_free(w);
        return sg_error_set(err, SG_ENOMEM, "model %s: out of memory for %lld fp32 weights",
                            m->name, (long long)total);
    }
    w->data = ptrs[0];
    return SG_OK;
}

int sg_weights_describe(sg_weights *w, const sg_model *m, sg_error *err)
{
    memset(w, 0, sizeof *w);
    int rc = model_tensors(m, &w->info, &w->unit, &w->ntensors, err);
    if (rc < 0)
        return rc;
    for (int i = 0; i < w->ntensors; i++)
        w->numel += w->info[i].numel;
    return SG_OK;
}

/* An entry's fill: the index is tensor * 3 + set (sg_tensor_source). */
static int source_fill(void *ctx, int index, float *out)
{
    const sg_tensor_source *src = ctx;
    return src->fill(src->ctx, index % 3, index / 3, out);
}

static sg_st_entry tensor_entry(const sg_tensor_info *t, sg_dtype dtype, const float *data,
                                const sg_tensor_source *source, int set, int i)
{
    return (sg_st_entry){.name = t->name, .dtype = dtype, .src_dtype = SG_F32,
                         .ndim = t->ndim, .shape = t->shape, .data = data,
                         .fill = data ? NULL : source_fill, .fill_ctx = (void *)source,
                         .fill_index = 3 * i + set};
}

void sg_weights_free(sg_weights *w)
{
    if (!w)
        return;
    free(w->info);
    free(w->unit);
    free(w->data);
    free(w->block);
    memset(w, 0, sizeof *w);
}

void sg_weights_unit_offsets(const sg_weights *w, int64_t *offset)
{
    for (int i = 0; i < w->ntensors; i++)
        offset[i] = i > 0 && w->unit[i] == w->unit[i - 1] ? offset[i - 1] + w->info[i - 1].numel
                                                          : 0;
}

int sg_weights_find(const sg_weights *w, const char *name)
{
    for (int i = 0; i < w->ntensors; i++)
        if (strcmp(w->info[i].name, name) == 0)
            return i;
    return -1;
}

/* ------------------------------------------------------------------------ */
/* initialisation                                                            */

/* splitmix64's output function: the k-th output of splitmix64 seeded with
 * s is mix64(s + (k + 1) * golden), so any element can be drawn directly. */
static uint64_t mix64(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static uint64_t fnv1a(const char *s)
{
    uint64_t h = 0xcbf29ce484222325ull;
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 0x100000001b3ull;
    return h;
}

static int ends_with(const char *s, const char *suffix)
{
    size_t a = strlen(s), b = strlen(suffix);
    return a >= b && strcmp(s + a - b, suffix) == 0;
}

/* Pairs [j0, j1) of a normal tensor of n elements: Box-Muller, elements 2j
 * and 2j+1 from draws 2j and 2j+1 of the tensor's key. */
static void normal_pairs(float *x, int64_t n, uint64_t key, double std, int64_t j0, int64_t j1)
{
    const uint64_t golden = 0x9e3779b97f4a7c15ull;
    const double two_pi = 6.283185307179586476925286766559;
    for (int64_t j = j0; j < j1; j++) {
        uint64_t a = mix64(key + (uint64_t)(2 * j + 1) * golden);
        uint64_t b = mix64(key + (uint64_t)(2 * j + 2) * golden);
        double u1 = (double)((a >> 11) + 1) * 0x1p-53;  /* (0, 1] */
        double u2 = (double)(b >> 11) * 0x1p-53;        /* [0, 1) */
        double r = sqrt(-2.0 * log(u1)) * std;
        x[2 * j] = (float)(r * cos(two_pi * u2));
        if (2 * j + 1 < n)
            x[2 * j + 1] = (float)(r * sin(two_pi * u2));
    }
}

/* The normal tensors' pairs in chunks, drawn by threads from a counter:
 * each element is a function of (seed, name, k), so which thread draws it
 * changes nothing. */
enum { INIT_CHUNK_PAIRS = 1 << 19 };

typedef struct init_work {
    const sg_weights *w;
    const uint64_t *key;          /* per tensor; 0 when not normal */
    const int64_t *first_chunk;   /* per tensor, and the total at [ntensors] */
    double std;
    int64_t next;                 /* the next chunk to draw (atomic) */
} init_work;

static void *init_worker(void *arg)
{
    init_work *iw = arg;
    const sg_weights *w = iw->w;
    int i = 0;
    for (;;) {
        int64_t c = __atomic_fetch_add(&iw->next, 1, __ATOMIC_RELAXED);
        if (c >= iw->first_chunk[w->ntensors])
            return NULL;
        while (c >= iw->first_chunk[i + 1])
            i++;
        int64_t n = w->info[i].numel, pairs = (n + 1) / 2;
        int64_t j0 = (c - iw->first_chunk[i]) * INIT_CHUNK_PAIRS;
        int64_t j1 = j0 + INIT_CHUNK_PAIRS < pairs ? j0 + INIT_CHUNK_PAIRS : pairs;
        normal_pairs(w->data[i], n, iw->key[i], iw->std, j0, j1);
    }
}

void sg_weights_init(sg_weights *w, uint64_t seed, double std)
{
    uint64_t *key = calloc((size_t)w->ntensors + 1, sizeof *key);
    int64_t *first = calloc((size_t)w->ntensors + 1, sizeof *first);
    for (int i = 0; i < w->ntensors; i++) {
        const sg_tensor_info *t = &w->info[i];
        float *x = w->data[i];
        int64_t n = t->numel;
        int normal = 0;
        if (ends_with(t->name, "norm.weight")) {          /* RMSNorm gains */
            for (int64_t k = 0; k < n; k++)
                x[k] = 1.0f;
        } else if (ends_with(t->name, "bias")) {           /* ".bias", "_bias" */
            memset(x, 0, (size_t)n * sizeof *x);
        } else if (key && first) {
            key[i] = mix64(seed ^ fnv1a(t->name));
            normal = 1;
        } else {                                           /* no memory for the plan */
            normal_pairs(x, n, mix64(seed ^ fnv1a(t->name)), std, 0, (n + 1) / 2);
        }
        if (key && first)
            first[i + 1] = first[i] +
                           (normal ? ((n + 1) / 2 + INIT_CHUNK_PAIRS - 1) / INIT_CHUNK_PAIRS : 0);
    }
    if (key && first) {
        init_work iw = {.w = w, .key = key, .first_chunk = first, .std = std, .next = 0};
        long cpus = sysconf(_SC_NPROCESSORS_ONLN);
        int64_t chunks = first[w->ntensors];
        int nthreads = (int)(cpus < 1 ? 1 : cpus > 64 ? 64 : cpus);
        if (nthreads > chunks)
            nthreads = (int)(chunks > 0 ? chunks : 1);
        pthread_t tid[64];
        int started = 0;
        for (; started < nthreads - 1; started++)
            if (pthread_create(&tid[started], NULL, init_worker, &iw))
                break;
        init_worker(&iw); /* this thread too, and alone if none started */
        for (int k = 0; k < started; k++)
            pthread_join(tid[k], NULL);
    }
    free(key);
    free(first);
}

/* ------------------------------------------------------------------------ */
/* weights files                                                             */

static void shape_str(int ndim, const int64_t *shape, char *buf, size_t size)
{
    size_t n = (size_t)snprintf(buf, size, "[");
    for (int d = 0; d < ndim && n < size; d++)
        n += (size_t)snprintf(buf + n, size - n, "%s%lld", d ? ", " : "", (long long)shape[d]);
    if (n < size)
        snprintf(buf + n, size - n, "]");
}

static int same_shape(const sg_st_tensor *t, const sg_tensor_info *want)
{
    if (t->ndim != want->ndim)
        return 0;
    for (int d = 0; d < want->ndim; d++)
        if (t->shape[d] != want->shape[d])
            return 0;
    return 1;
}

/* "path: tensor: shape [a, b] in the file, expected [c, d]" */
static int shape_error(const char *path, const char *name, const sg_st_tensor *t,
                       const sg_tensor_info *want, sg_error *err)
{
    char got[160], exp[160];
    shape_str(t->ndim, t->shape, got, sizeof got);
    shape_str(want->ndim, want->shape, exp, sizeof exp);
    return sg_error_set(err, SG_EINVAL, "%s: %s: shape %s in the file, expected %s", path, name,
                        got, exp);
}

/* Appends up to LIST_MAX names, then "and N more". */
typedef struct name_list {
    char text[600];
    int count;
} name_list;

static void list_add(name_list *l, const char *name)
{
    size_t n = strlen(l->text);
    if (l->count < LIST_MAX && n < sizeof l->text)
        snprintf(l->text + n, sizeof l->text - n, "%s%s", l->count ? ", " : "", name);
    l->count++;
}

static void list_finish(name_list *l)
{
    size_t n = strlen(l->text);
    if (l->count > LIST_MAX && n < sizeof l->text)
        snprintf(l->text + n, sizeof l->text - n, " and %d more", l->count - LIST_MAX);
}

static int check_finite(const char *path, const char *name, const float *x, int64_t n,
                        int nonneg, sg_error *err)
{
    for (int64_t k = 0; k < n; k++) {
        if (!isfinite(x[k]))
            return sg_error_set(err, SG_EINVAL, "%s: %s: non-finite value %g at index %lld",
                                path, name, (double)x[k], (long long)k);
        if (nonneg && x[k] < 0)
            return sg_error_set(err, SG_EINVAL,
                                "%s: %s: negative value %g at index %lld (a second moment is "
                                ">= 0)", path, name, (double)x[k], (long long)k);
    }
    return SG_OK;
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* Tensors first..first+count-1 of w into one safetensors file. */
static int save_range(const sg_weights *w, int first, int count, const char *path,
                      sg_dtype dtype, const sg_st_meta *meta, int nmeta, sg_error *err)
{
    sg_st_entry *e = calloc((size_t)(count > 0 ? count : 1), sizeof *e);
    sg_st_meta *md = calloc((size_t)nmeta + 1, sizeof *md);
    if (!e || !md) {
        free(e);
        free(md);
        return sg_error_set(err, SG_ENOMEM, "%s: out of memory", path);
    }
    for (int k = 0; k < count; k++) {
        int i = first + k;
        e[k] = tensor_entry(&w->info[i], dtype, w->data ? w->data[i] : NULL, w->source,
                            SG_SET_WEIGHTS, i);
    }
    int has_format = 0;
    for (int i = 0; i < nmeta; i++) {
        md[i] = meta[i];
        if (meta[i].key && strcmp(meta[i].key, "format") == 0)
            has_format = 1;
    }
    int nm = nmeta;
    if (!has_format) /* transformers refuses a file without it */
        md[nm++] = (sg_st_meta){"format", "pt"};
    int rc = sg_st_write(path, e, count, md, nm, err);
    free(e);
    free(md);
    return rc;
}

int sg_weights_save(const sg_weights *w, const char *path, sg_dtype dtype,
                    const sg_st_meta *meta, int nmeta, sg_error *err)
{
    return save_range(w, 0, w->ntensors, path, dtype, meta, nmeta, err);
}

int sg_weights_save_hf(const sg_weights *w, const char *dir, sg_dtype dtype,
                       const sg_st_meta *meta, int nmeta, int64_t max_shard_bytes,
                       sg_error *err)
{
    int64_t esize = (int64_t)sg_dtype_size(dtype), total = 0;
    for (int i = 0; i < w->ntensors; i++)
        total += w->info[i].numel * esize;
    char path[4096];
    if (max_shard_bytes <= 0 || total <= max_shard_bytes) {
        if (snprintf(path, sizeof path, "%s/model.safetensors", dir) >= (int)sizeof path)
            return sg_error_set(err, SG_EINVAL, "%s: path too long", dir);
        return save_range(w, 0, w->ntensors, path, dtype, meta, nmeta, err);
    }
    /* save_pretrained's split: tensors in order, a new shard when the next
     * one would pass the limit (a larger tensor gets a shard of its own) */
    int *shard_of = malloc((size_t)(w->ntensors > 0 ? w->ntensors : 1) * sizeof *shard_of);
    if (!shard_of)
        return sg_error_set(err, SG_ENOMEM, "%s: out of memory", dir);
    int nshards = 0;
    int64_t used = 0;
    for (int i = 0; i < w->ntensors; i++) {
        int64_t b = w->info[i].numel * esize;
        if (nshards == 0 || (used > 0 && used + b > max_shard_bytes)) {
            nshards++;
            used = 0;
        }
        used += b;
        shard_of[i] = nshards - 1;
    }
    int rc = SG_OK;
    char name[64];
    cJSON *index = cJSON_CreateObject(), *md = cJSON_AddObjectToObject(index, "metadata");
    cJSON *map = cJSON_AddObjectToObject(index, "weight_map");
    cJSON_AddNumberToObject(md, "total_size", (double)total);
    for (int s = 0, first = 0; s < nshards && rc == SG_OK; s++) {
        int count = 0;
        while (first + count < w->ntensors && shard_of[first + count] == s)
            count++;
        snprintf(name, sizeof name, "model-%05d-of-%05d.safetensors", s + 1, nshards);
        if (snprintf(path, sizeof path, "%s/%s", dir, name) >= (int)sizeof path)
            rc = sg_error_set(err, SG_EINVAL, "%s: path too long", dir);
        else
            rc = save_range(w, first, count, path, dtype, meta, nmeta, err);
        for (int k = 0; k < count; k++)
            cJSON_AddStringToObject(map, w->info[first + k].name, name);
        first += count;
    }
    free(shard_of);
    char *text = rc == SG_OK ? cJSON_Print(index) : NULL;
    cJSON_Delete(index);
    if (rc == SG_OK && !text)
        rc = sg_error_set(err, SG_ENOMEM, "%s: out of memory", dir);
    if (rc == SG_OK) {
        snprintf(path, sizeof path, "%s/%s", dir, SG_HF_INDEX);
        rc = sg_atomic_write_text(path, text, err);
    }
    cJSON_free(text);
    return rc;
}

/* Model names sorted, for the "not in the model" check. */
static const char **sorted_names(const sg_tensor_info *info, int n)
{
    const char **s = malloc((size_t)(n > 0 ? n : 1) * sizeof *s);
    if (!s)
        return NULL;
    for (int i = 0; i < n; i++)
        s[i] = info[i].name;
    qsort(s, (size_t)n, sizeof *s, cmp_str);
    return s;
}

static int in_sorted(const char **s, int n, const char *name)
{
    return bsearch(&name, s, (size_t)n, sizeof *s, cmp_str) != NULL;
}

int sg_weights_check_set(const sg_st_set *set, const char *path, const sg_model *m,
                         sg_weights *out, sg_config_warnings *warn, sg_error *err)
{
    int rc = sg_weights_describe(out, m, err);
    if (rc < 0)
        return rc;

    /* Shapes first (the most useful message), then missing, then extra. */
    name_list missing = {{0}, 0}, extra = {{0}, 0};
    for (int i = 0; i < out->ntensors && rc == SG_OK; i++) {
        const sg_st_tensor *t = sg_st_set_find(set, out->info[i].name);
        if (!t)
            list_add(&missing, out->info[i].name);
        else if (!same_shape(t, &out->info[i]))
            rc = shape_error(path, t->name, t, &out->info[i], err);
    }
    if (rc == SG_OK && missing.count) {
        list_finish(&missing);
        rc = sg_error_set(err, SG_EINVAL, "%s: %d tensor%s of model %s missing: %s", path,
                          missing.count, missing.count > 1 ? "s" : "", m->name, missing.text);
    }
    const char **names = rc == SG_OK ? sorted_names(out->info, out->ntensors) : NULL;
    if (rc == SG_OK && !names)
        rc = sg_error_set(err, SG_ENOMEM, "%s: out of memory", path);
    int ignored_head = 0;
    for (int f = 0; f < set->nfiles && rc == SG_OK; f++)
        for (int i = 0; i < set->files[f].ntensors; i++) {
            const char *nm = set->files[f].tensors[i].name;
            if (in_sorted(names, out->ntensors, nm))
                continue;
            if (m->tie_word_embeddings && strcmp(nm, "lm_head.weight") == 0)
                ignored_head = 1;
            else
                list_add(&extra, nm);
        }
    free(names);
    if (rc == SG_OK && extra.count) {
        list_finish(&extra);
        rc = sg_error_set(err, SG_EINVAL, "%s: %d tensor%s not in model %s: %s", path,
                          extra.count, extra.count > 1 ? "s" : "", m->name, extra.text);
    }
    if (rc < 0) {
        sg_weights_free(out);
        return rc;
    }
    if (ignored_head && warn) {
        char msg[600];
        snprintf(msg, sizeof msg,
                 "%s: lm_head.weight ignored: model %s ties it to model.embed_tokens.weight",
                 path, m->name);
        sg_config_warnings_add(warn, msg);
    }
    return SG_OK;
}

int sg_weights_read_tensor(const sg_st_set *set, const char *path, const sg_tensor_info *info,
                           float *out, sg_error *err)
{
    const sg_st_tensor *t = sg_st_set_find(set, info->name);
    if (!t || t->numel != info->numel)
        return sg_error_set(err, SG_EINVAL, "%s: %s: not in the files checked", path,
                            info->name);
    sg_st_read_f32_release(t, out);
    return check_finite(path, t->name, out, t->numel, 0, err);
}

int sg_weights_load_set(const sg_st_set *set, const char *path, const sg_model *m,
                        sg_weights *out, sg_config_warnings *warn, sg_error *err)
{
    memset(out, 0, sizeof *out);
    int rc = sg_weights_alloc(out, m, err);
    if (rc < 0)
        return rc;
    sg_weights shape;
    rc = sg_weights_check_set(set, path, m, &shape, warn, err);
    sg_weights_free(&shape);
    for (int i = 0; i < out->ntensors && rc == SG_OK; i++)
        rc = sg_weights_read_tensor(set, path, &out->info[i], out->data[i], err);
    if (rc < 0)
        sg_weights_free(out);
    return rc;
}

int sg_weights_load(const char *path, const sg_model *m, sg_weights *out,
                    sg_config_warnings *warn, sg_error *err)
{
    memset(out, 0, sizeof *out);
    sg_st_file f;
    int rc = sg_st_open(path, &f, err);
    if (rc < 0)
        return rc;
    sg_st_set set = {1, &f};
    rc = sg_weights_load_set(&set, path, m, out, warn, err);
    sg_st_close(&f);
    return rc;
}

/* ------------------------------------------------------------------------ */
/* training state                                                            */

int sg_train_state_alloc_moments(sg_train_state *s, const sg_model *m, sg_error *err)
{
    int *unit = NULL;
    int rc = model_tensors(m, &s->info, &unit, &s->ntensors, err);
    free(unit);
    if (rc < 0)
        return rc;
    float **ptrs[2];
    s->block = alloc_block(s->info, s->ntensors, 2, ptrs, NULL);
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
    int rc = model_tensors(m, &s->info, &unit, &s->ntensors, err);
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

enum { META_FORMAT, META_VERSION, META_MODEL, META_STEP, META_LOSS_SCALE, META_EPOCH,
       META_INDEX, META_WINDOWS, META_RNG, META_HASH, META_COUNT };

static const char *const meta_keys[META_COUNT] = {
    "stepgraph", "version", "model", "step", "loss_scale", "data_epoch",
    "data_index", "data_windows", "rng_state", "config_hash",
};

/* the loss scaler's counters (optional on load: older files lack them) */
enum { NSCALER = 3 };
static const char *const scaler_keys[NSCALER] = {
    "loss_scaler_cur_iter", "loss_scaler_last_overflow_iter", "loss_scaler_cur_hysteresis",
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
    char (*names)[STATE_NAME_MAX] = calloc((size_t)(n > 0 ? n : 1), sizeof *names);
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
            e[j] = tensor_entry(&s->info[i], SG_F32, set ? set[i] : NULL, s->source,
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
        int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10
                : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
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
        return sg_error_set(err, SG_EINVAL, "%s: __metadata__.%s is missing (not a stepgraph "
                            "training state?)", path, key);
    return sg_error_set(err, SG_EINVAL, "%s: __metadata__.%s: \"%s\" is not %s", path, key,
                        value, what);
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
                return sg_error_set(err, SG_EINVAL, "%s: __metadata__.%s is missing (the other "
                                    "loss scaler counters are present)", path, scaler_keys[i]);
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
                            "%" PRIu64, path, s->data.index, s->data.nwindows);
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
                          "four comma-separated hexadecimal 64-bit words (16 hex digits each)", err);
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

int sg_train_state_check(const char *path, const sg_model *m, sg_train_state *out,
                         sg_st_file *f, sg_error *err)
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
                list_add(&missing, nm);
            else if (!same_shape(t, &out->info[i]))
                rc = shape_error(path, nm, t, &out->info[i], err);
            else if (t->dtype != SG_F32)
                rc = sg_error_set(err, SG_EINVAL,
                                  "%s: %s: dtype %s, expected F32 (Adam moments are fp32)", path,
                                  nm, sg_st_dtype_name(t->dtype));
        }
    if (rc == SG_OK && missing.count) {
        list_finish(&missing);
        rc = sg_error_set(err, SG_EINVAL, "%s: %d optimizer tensor%s of model %s missing: %s",
                          path, missing.count, missing.count > 1 ? "s" : "", m->name,
                          missing.text);
    }
    /* Unknown tensors: each must be "<model tensor>.exp_avg[_sq]". */
    const char **names = rc == SG_OK ? sorted_names(out->info, out->ntensors) : NULL;
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
                known = in_sorted(names, out->ntensors, nm);
            }
        }
        if (!known)
            list_add(&extra, tn);
    }
    free(names);
    if (rc == SG_OK && extra.count) {
        list_finish(&extra);
        rc = sg_error_set(err, SG_EINVAL, "%s: %d tensor%s not in the optimizer state of model "
                          "%s: %s", path, extra.count, extra.count > 1 ? "s" : "", m->name,
                          extra.text);
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
    return check_finite(path, nm, out, t->numel, squares, err);
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
