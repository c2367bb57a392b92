/* weights.c - fp32 parameters, initialisation and weights files (see
 * weights.h); the training-state files are train_state.c's, what both
 * use weights_common.c's. */

#define _POSIX_C_SOURCE 200809L /* strdup with -std=c11 */

#include "runtime/io/weights.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "runtime/io/weights_common.h"
#include "runtime/io/hf_dir.h"
#include "common/atomic_file.h"
#include "common/json_util.h" /* sg_config_warnings_add */

/* ------------------------------------------------------------------------ */
/* tensor lists and storage                                                  */

int sg_weights_alloc(sg_weights *w, const sg_model *m, sg_error *err)
{
    memset(w, 0, sizeof *w);
    int rc = sg_weights_model_tensors(m, &w->info, &w->unit, &w->ntensors, err);
    if (rc < 0)
        return rc;
    float **ptrs[1];
    w->block = sg_weights_alloc_block(w->info, w->ntensors, 1, ptrs, &w->numel);
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
    int rc = sg_weights_model_tensors(m, &w->info, &w->unit, &w->ntensors, err);
    if (rc < 0)
        return rc;
    for (int i = 0; i < w->ntensors; i++)
        w->numel += w->info[i].numel;
    return SG_OK;
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
        offset[i] =
            i > 0 && w->unit[i] == w->unit[i - 1] ? offset[i - 1] + w->info[i - 1].numel : 0;
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
        double u1 = (double)((a >> 11) + 1) * 0x1p-53; /* (0, 1] */
        double u2 = (double)(b >> 11) * 0x1p-53;       /* [0, 1) */
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
    const uint64_t *key;        /* per tensor; 0 when not normal */
    const int64_t *first_chunk; /* per tensor, and the total at [ntensors] */
    double std;
    int64_t next; /* the next chunk to draw (atomic) */
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
        if (ends_with(t->name, "norm.weight")) { /* RMSNorm gains */
            for (int64_t k = 0; k < n; k++)
                x[k] = 1.0f;
        } else if (ends_with(t->name, "bias")) { /* ".bias", "_bias" */
            memset(x, 0, (size_t)n * sizeof *x);
        } else if (key && first) {
            key[i] = mix64(seed ^ fnv1a(t->name));
            normal = 1;
        } else { /* no memory for the plan */
            normal_pairs(x, n, mix64(seed ^ fnv1a(t->name)), std, 0, (n + 1) / 2);
        }
        if (key && first)
            first[i + 1] =
                first[i] + (normal ? ((n + 1) / 2 + INIT_CHUNK_PAIRS - 1) / INIT_CHUNK_PAIRS : 0);
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

/* Tensors first..first+count-1 of w into one safetensors file. */
static int save_range(const sg_weights *w, int first, int count, const char *path, sg_dtype dtype,
                      const sg_st_meta *meta, int nmeta, sg_error *err)
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
        e[k] = sg_weights_tensor_entry(&w->info[i], dtype, w->data ? w->data[i] : NULL, w->source,
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

int sg_weights_save(const sg_weights *w, const char *path, sg_dtype dtype, const sg_st_meta *meta,
                    int nmeta, sg_error *err)
{
    return save_range(w, 0, w->ntensors, path, dtype, meta, nmeta, err);
}

int sg_weights_save_hf(const sg_weights *w, const char *dir, sg_dtype dtype, const sg_st_meta *meta,
                       int nmeta, int64_t max_shard_bytes, sg_error *err)
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

int sg_weights_check_set(const sg_st_set *set, const char *path, const sg_model *m, sg_weights *out,
                         sg_config_warnings *warn, sg_error *err)
{
    int rc = sg_weights_describe(out, m, err);
    if (rc < 0)
        return rc;

    /* Shapes first (the most useful message), then missing, then extra. */
    name_list missing = {{0}, 0}, extra = {{0}, 0};
    for (int i = 0; i < out->ntensors && rc == SG_OK; i++) {
        const sg_st_tensor *t = sg_st_set_find(set, out->info[i].name);
        if (!t)
            sg_weights_list_add(&missing, out->info[i].name);
        else if (!sg_weights_same_shape(t, &out->info[i]))
            rc = sg_weights_shape_error(path, t->name, t, &out->info[i], err);
    }
    if (rc == SG_OK && missing.count) {
        sg_weights_list_finish(&missing);
        rc = sg_error_set(err, SG_EINVAL, "%s: %d tensor%s of model %s missing: %s", path,
                          missing.count, missing.count > 1 ? "s" : "", m->name, missing.text);
    }
    const char **names = rc == SG_OK ? sg_weights_sorted_names(out->info, out->ntensors) : NULL;
    if (rc == SG_OK && !names)
        rc = sg_error_set(err, SG_ENOMEM, "%s: out of memory", path);
    int ignored_head = 0;
    for (int f = 0; f < set->nfiles && rc == SG_OK; f++)
        for (int i = 0; i < set->files[f].ntensors; i++) {
            const char *nm = set->files[f].tensors[i].name;
            if (sg_weights_in_sorted(names, out->ntensors, nm))
                continue;
            if (m->tie_word_embeddings && strcmp(nm, "lm_head.weight") == 0)
                ignored_head = 1;
            else
                sg_weights_list_add(&extra, nm);
        }
    free(names);
    if (rc == SG_OK && extra.count) {
        sg_weights_list_finish(&extra);
        rc = sg_error_set(err, SG_EINVAL, "%s: %d tensor%s not in model %s: %s", path, extra.count,
                          extra.count > 1 ? "s" : "", m->name, extra.text);
    }
    if (rc < 0) {
        sg_weights_free(out);
        return rc;
    }
    if (ignored_head && warn) {
        char msg[600];
        snprintf(msg, sizeof msg,
                 "%s: lm_head.weight ignored: model %s ties it to model.embed_tokens.weight", path,
                 m->name);
        sg_config_warnings_add(warn, msg);
    }
    return SG_OK;
}

int sg_weights_read_tensor(const sg_st_set *set, const char *path, const sg_tensor_info *info,
                           float *out, sg_error *err)
{
    const sg_st_tensor *t = sg_st_set_find(set, info->name);
    if (!t || t->numel != info->numel)
        return sg_error_set(err, SG_EINVAL, "%s: %s: not in the files checked", path, info->name);
    sg_st_read_f32_release(t, out);
    return sg_weights_check_finite(path, t->name, out, t->numel, 0, err);
}

int sg_weights_load_set(const sg_st_set *set, const char *path, const sg_model *m, sg_weights *out,
                        sg_config_warnings *warn, sg_error *err)
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

int sg_weights_load(const char *path, const sg_model *m, sg_weights *out, sg_config_warnings *warn,
                    sg_error *err)
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
