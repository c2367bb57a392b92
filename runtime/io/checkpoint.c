/* checkpoint.c - checkpoint directories (checkpoint.h). */
#define _POSIX_C_SOURCE 200809L
#include "runtime/io/checkpoint.h"

#include "runtime/io/checkpoint_parts.h"
#include "runtime/io/hf_dir.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "common/atomic_file.h"
#include "common/cleanup.h"
#include "models/hf_config.h"

/* out = dir/file; -1 (out untouched) when it does not fit in n bytes. */
static int join(char *out, size_t n, const char *dir, const char *file)
{
    size_t a = strlen(dir), b = strlen(file);
    if (a + 1 + b + 1 > n)
        return -1;
    memmove(out, dir, a);
    out[a] = '/';
    memcpy(out + a + 1, file, b + 1);
    return 0;
}

static int is_dir(const char *path)
{
    struct stat sb;
    return stat(path, &sb) == 0 && S_ISDIR(sb.st_mode);
}

static int exists(const char *path)
{
    struct stat sb;
    return stat(path, &sb) == 0;
}

/* fsync of a directory: its entries (a rename into it) reach the disk. */
static int sync_dir(const char *dir)
{
    int fd = open(dir, O_RDONLY | O_DIRECTORY);
    if (fd < 0)
        return -1;
    int rc = fsync(fd);
    close(fd);
    return rc;
}

/* Removes a checkpoint directory: its plain files, then itself (a step
 * directory holds nothing else). Best effort: what stays is a leftover the
 * next save removes. */
static void remove_step_dir(const char *path)
{
    DIR *d = opendir(path);
    if (!d)
        return;
    struct dirent *e;
    char f[SG_PATH_MAX + 300];
    while ((e = readdir(d)))
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..") &&
            !join(f, sizeof f, path, e->d_name))
            unlink(f);
    closedir(d);
    rmdir(path);
}

/* The step of a directory name "step-N", or -1 for any other name. */
static int64_t step_of(const char *name)
{
    if (strncmp(name, SG_CHECKPOINT_STEP_PREFIX, strlen(SG_CHECKPOINT_STEP_PREFIX)) != 0)
        return -1;
    const char *p = name + strlen(SG_CHECKPOINT_STEP_PREFIX);
    if (*p < '0' || *p > '9' || strlen(p) > 18)
        return -1;
    for (const char *q = p; *q; q++)
        if (*q < '0' || *q > '9')
            return -1;
    return strtoll(p, NULL, 10);
}

/* After a switch to `current`: removes the leftovers of interrupted saves
 * (".tmp-*" directories), step directories newer than `current` (renamed in
 * but never switched to), and all but the keep_last newest others. */
static void prune(const char *dir, int64_t current, int64_t keep_last)
{
    DIR *d = opendir(dir);
    if (!d)
        return;
    int64_t *steps = NULL;
    size_t n = 0, cap = 0;
    struct dirent *e;
    char path[SG_PATH_MAX + 300];
    while ((e = readdir(d))) {
        if (join(path, sizeof path, dir, e->d_name) || !is_dir(path))
            continue;
        int64_t s = step_of(e->d_name);
        if (strncmp(e->d_name, SG_CHECKPOINT_TMP_PREFIX, strlen(SG_CHECKPOINT_TMP_PREFIX)) == 0 ||
            s > current) {
            remove_step_dir(path);
        } else if (s >= 0 && s < current) {
            if (n == cap) {
                cap = cap ? 2 * cap : 16;
                int64_t *grown = realloc(steps, cap * sizeof *steps);
                if (!grown)
                    break;
                steps = grown;
            }
            steps[n++] = s;
        }
    }
    closedir(d);
    /* keep the keep_last - 1 newest older ones beside the current one */
    for (size_t i = 0; i < n && keep_last > 0; i++) {
        int64_t newer = 0;
        for (size_t j = 0; j < n; j++)
            newer += steps[j] > steps[i];
        if (newer + 1 >= keep_last) {
            snprintf(path, sizeof path, "%s/" SG_CHECKPOINT_STEP_PREFIX "%08" PRId64, dir,
                     steps[i]);
            remove_step_dir(path);
        }
    }
    free(steps);
}

/* Writes the pointer file: the one rename that switches to a checkpoint. */
static int write_latest(const char *dir, const char *tag, sg_error *err)
{
    char path[SG_PATH_MAX + 32];
    if (join(path, sizeof path, dir, SG_CHECKPOINT_LATEST))
        return sg_error_set(err, SG_EINVAL, "%s: path too long", dir);
    sg_atomic_file f;
    int rc = sg_atomic_open(&f, path, err);
    if (rc)
        return rc;
    fprintf(f.fp, "%s\n", tag);
    return sg_atomic_commit(&f, err);
}

int sg_checkpoint_write_weights(const char *dir, const sg_weights *w, int64_t step_no,
                                const sg_model *m, sg_dtype weights_dtype, int64_t shard_bytes,
                                sg_error *err)
{
    char path[SG_PATH_MAX + 32], step[32];
    snprintf(step, sizeof step, "%" PRId64, step_no);
    sg_st_meta meta[] = {{"step", step}, {"model", m->name}};
    /* config.json beside the weights: the step directory is a Hugging Face
     * model directory too */
    char *config = NULL;
    int rc = sg_hf_config_text(m, weights_dtype == SG_BF16 ? "bfloat16" : "float32", &config, err);
    if (rc)
        return sg_error_prefix(err, "%s: config.json: ", dir), rc;
    if (join(path, sizeof path, dir, "config.json"))
        rc = sg_error_set(err, SG_EINVAL, "%s: path too long", dir);
    else
        rc = sg_atomic_write_text(path, config, err);
    cJSON_free(config);
    return rc ? rc : sg_weights_save_hf(w, dir, weights_dtype, meta, 2, shard_bytes, err);
}

static int save_files(const char *dir, const sg_weights *w, const sg_train_state *st,
                      const sg_model *m, sg_dtype weights_dtype, int64_t shard_bytes, sg_error *err)
{
    char path[SG_PATH_MAX + 32];
    int rc = sg_checkpoint_write_weights(dir, w, st->step, m, weights_dtype, shard_bytes, err);
    if (rc)
        return rc;
    join(path, sizeof path, dir, "state.safetensors");
    if ((rc = sg_train_state_save(st, path, m->name, err)))
        return rc;
    if (sync_dir(dir))
        return sg_error_set(err, SG_EIO, "%s: cannot sync: %s", dir, strerror(errno));
    return SG_OK;
}

/* tmp: the directory a save of step writes into; final: its step's name. */
static int stage_paths(const char *dir, int64_t step, long id, char *tmp, char *old, char *final,
                       size_t n, sg_error *err)
{
    char tag[64];
    snprintf(tag, sizeof tag, SG_CHECKPOINT_STEP_PREFIX "%08" PRId64, step);
    if (snprintf(tmp, n, "%s/" SG_CHECKPOINT_TMP_PREFIX "%s-%ld", dir, tag, id) >= (int)n ||
        snprintf(old, n, "%s/" SG_CHECKPOINT_TMP_PREFIX "old-%s-%ld", dir, tag, id) >= (int)n ||
        join(final, n, dir, tag))
        return sg_error_set(err, SG_EINVAL, "%s: path too long", dir);
    return SG_OK;
}

/* The staging directory of the save in progress, in common/cleanup.h: a
 * signal that ends the run mid-save removes it (the next save would). */
static int stage_slot = -1;

int sg_checkpoint_stage(const char *dir, int64_t step, long id, int create, char *tmp, size_t size,
                        sg_error *err)
{
    char t[SG_PATH_MAX + 96], old[SG_PATH_MAX + 96], final[SG_PATH_MAX + 96];
    if (create && mkdir(dir, 0777) && errno != EEXIST)
        return sg_error_set(err, SG_EIO, "cannot create checkpoint directory %s: %s", dir,
                            strerror(errno));
    int rc = stage_paths(dir, step, id, t, old, final, sizeof t, err);
    if (rc)
        return rc;
    if (strlen(t) >= size)
        return sg_error_set(err, SG_EINVAL, "%s: path too long", dir);
    snprintf(tmp, size, "%s", t);
    if (!create)
        return SG_OK;
    remove_step_dir(t);
    if (mkdir(t, 0777))
        return sg_error_set(err, SG_EIO, "cannot create %s: %s", t, strerror(errno));
    sg_cleanup_forget(stage_slot);
    stage_slot = sg_cleanup_add(t);
    return SG_OK;
}

int sg_checkpoint_commit(const char *dir, int64_t step, long id, int64_t keep_last, sg_error *err)
{
    char tmp[SG_PATH_MAX + 96], old[SG_PATH_MAX + 96], final[SG_PATH_MAX + 96], tag[64];
    int rc = stage_paths(dir, step, id, tmp, old, final, sizeof tmp, err);
    if (rc)
        return rc;
    snprintf(tag, sizeof tag, SG_CHECKPOINT_STEP_PREFIX "%08" PRId64, step);
    if (sync_dir(tmp))
        rc = sg_error_set(err, SG_EIO, "%s: cannot sync: %s", tmp, strerror(errno));
    /* 2. under its step's name (a same-step directory moves aside first) */
    if (!rc && exists(final) && rename(final, old))
        rc = sg_error_set(err, SG_EIO, "cannot move %s aside: %s", final, strerror(errno));
    if (!rc && rename(tmp, final))
        rc = sg_error_set(err, SG_EIO, "cannot rename %s to %s: %s", tmp, final, strerror(errno));
    if (!rc) {
        sg_cleanup_forget(stage_slot);
        stage_slot = -1;
    }
    if (!rc && sync_dir(dir))
        rc = sg_error_set(err, SG_EIO, "%s: cannot sync: %s", dir, strerror(errno));
    /* 3. the switch: one rename of the pointer file */
    if (!rc)
        rc = write_latest(dir, tag, err);
    if (!rc && sync_dir(dir))
        rc = sg_error_set(err, SG_EIO, "%s: cannot sync: %s", dir, strerror(errno));
    if (rc) {
        remove_step_dir(tmp);
        return rc;
    }
    /* 4. only now the old ones go */
    prune(dir, step, keep_last);
    return SG_OK;
}

void sg_checkpoint_abandon(const char *tmp)
{
    remove_step_dir(tmp);
    sg_cleanup_forget(stage_slot);
    stage_slot = -1;
}

int sg_checkpoint_save(const char *dir, const sg_weights *w, const sg_train_state *st,
                       const sg_model *m, sg_dtype weights_dtype, int64_t keep_last,
                       int64_t shard_bytes, sg_error *err)
{
    char tmp[SG_PATH_MAX + 96];
    long id = (long)getpid();
    /* 1. the new checkpoint, complete and synced, beside the current one */
    int rc = sg_checkpoint_stage(dir, st->step, id, 1, tmp, sizeof tmp, err);
    if (rc)
        return rc;
    if ((rc = save_files(tmp, w, st, m, weights_dtype, shard_bytes, err))) {
        sg_checkpoint_abandon(tmp);
        return rc;
    }
    return sg_checkpoint_commit(dir, st->step, id, keep_last, err);
}

/* The checkpoint directory `dir` stands for: the one its pointer file names,
 * or dir itself when it holds the files (a step directory, or a checkpoint
 * written before the pointer existed). */
static int resolve(const char *dir, char *out, size_t size, sg_error *err)
{
    char latest[SG_PATH_MAX + 32], tag[80] = "";
    if (join(latest, sizeof latest, dir, SG_CHECKPOINT_LATEST))
        return sg_error_set(err, SG_EINVAL, "%s: path too long", dir);
    FILE *f = fopen(latest, "r");
    if (!f) {
        char model[SG_PATH_MAX + 32], index[SG_PATH_MAX + 64];
        join(model, sizeof model, dir, "model.safetensors");
        join(index, sizeof index, dir, SG_HF_INDEX); /* a sharded save's step directory */
        if (!exists(model) && !exists(index))
            return sg_error_set(err, SG_ENOENT,
                                "%s: no checkpoint there (neither a `%s` file "
                                "nor model.safetensors or %s)",
                                dir, SG_CHECKPOINT_LATEST, SG_HF_INDEX);
        snprintf(out, size, "%s", dir);
        return SG_OK;
    }
    int ok = fgets(tag, sizeof tag, f) != NULL;
    fclose(f);
    tag[strcspn(tag, "\n")] = '\0';
    if (!ok || step_of(tag) < 0) {
        for (char *c = tag; *c; c++) // binary content is not echoed to a terminal
            if ((unsigned char)*c < 0x20 || (unsigned char)*c > 0x7e)
                *c = '?';
        return sg_error_set(err, SG_EINVAL,
                            "%s: does not name a checkpoint (expected \"%s"
                            "N\", found \"%.40s\")",
                            latest, SG_CHECKPOINT_STEP_PREFIX, tag);
    }
    if (join(out, size, dir, tag))
        return sg_error_set(err, SG_EINVAL, "%s: path too long", dir);
    if (!is_dir(out))
        return sg_error_set(err, SG_ENOENT, "%s names %s, which is missing", latest, out);
    return SG_OK;
}

static int same_file(const char *a, const char *b)
{
    struct stat sa, sb;
    return stat(a, &sa) == 0 && stat(b, &sb) == 0 && sa.st_dev == sb.st_dev &&
           sa.st_ino == sb.st_ino;
}

int64_t sg_checkpoint_step_bytes(const char *dir, int64_t step)
{
    char path[4096];
    int n = snprintf(path, sizeof path, "%s/" SG_CHECKPOINT_STEP_PREFIX "%08" PRId64, dir, step);
    DIR *d = n > 0 && (size_t)n < sizeof path ? opendir(path) : NULL;
    if (!d)
        return -1;
    int64_t bytes = 0;
    struct dirent *e;
    struct stat st;
    while ((e = readdir(d)))
        if (fstatat(dirfd(d), e->d_name, &st, 0) == 0 && S_ISREG(st.st_mode))
            bytes += (int64_t)st.st_size;
    closedir(d);
    return bytes;
}

int sg_checkpoint_check_save(const char *dir, const char *load, int resumed, sg_error *err)
{
    char latest[SG_PATH_MAX + 32], cur[SG_PATH_MAX + 96], from[SG_PATH_MAX + 96];
    sg_error ignored = {0};
    if (join(latest, sizeof latest, dir, SG_CHECKPOINT_LATEST) || !exists(latest) ||
        resolve(dir, cur, sizeof cur, &ignored))
        return SG_OK; /* no current checkpoint to keep */
    if (resumed && load && load[0] && !resolve(load, from, sizeof from, &ignored) &&
        same_file(from, cur))
        return SG_OK; /* the run that wrote it goes on */
    return sg_error_set(err, SG_EINVAL,
                        "save: %s already holds the checkpoint %s of another run, which this "
                        "run's saves would remove; resume it with --load %s, or save in "
                        "another directory",
                        dir, cur, dir);
}

void sg_checkpoint_reader_close(sg_checkpoint_reader *r)
{
    sg_st_set_close(&r->weights);
    if (r->has_state)
        sg_st_close(&r->state);
    sg_parts_close(&r->parts);
    free(r->unit_offset);
    memset(r, 0, sizeof *r);
}

/* Several ranks' partitions: masters and moments spread over files by
 * rank, read a tensor's range at a time (they are what the step's buffers
 * hold, cut another way); the weights file is checked, its values are the
 * masters rounded. */
static int open_parts(sg_checkpoint_reader *r, const char *dir, int parts, const sg_model *m,
                      sg_weights *shape, sg_train_state *st, sg_config_warnings *warn,
                      sg_error *err)
{
    int rc = sg_weights_check_set(&r->weights, r->wpath, m, shape, warn, err);
    if (!rc)
        rc = sg_train_state_describe(st, m, err);
    if (!rc)
        rc = sg_parts_open(dir, parts, m, st, &r->parts, err);
    if (!rc && !(r->unit_offset = calloc((size_t)shape->ntensors + 1, sizeof *r->unit_offset)))
        rc = sg_error_set(err, SG_ENOMEM, "out of memory");
    if (!rc)
        sg_weights_unit_offsets(shape, r->unit_offset);
    return rc;
}

int sg_checkpoint_open(const char *path, const sg_model *m, sg_weights *shape, sg_train_state *st,
                       int *resumed, sg_config_warnings *warn, sg_checkpoint_reader *r,
                       sg_error *err)
{
    char dir[SG_PATH_MAX + 96];
    memset(r, 0, sizeof *r);
    memset(shape, 0, sizeof *shape);
    memset(st, 0, sizeof *st);
    /* a Hugging Face model directory, or its config.json: weights to start from */
    snprintf(dir, sizeof dir, "%s", path);
    size_t len = strlen(dir);
    int config_named = len >= 12 && strcmp(dir + len - 12, "/config.json") == 0;
    if (config_named)
        dir[len - 12] = '\0';
    int rc;
    *resumed = 0;
    /* DIR/config.json: that directory's weights, even in a checkpoint's step
     * directory (to start a new run from them) */
    if (is_dir(dir) &&
        (config_named || (sg_hf_dir_is_model(dir) && !sg_checkpoint_parts_dp(dir)))) {
        snprintf(r->wpath, sizeof r->wpath, "%s", dir);
        rc = sg_hf_dir_open(dir, &r->weights, err);
    } else if (!is_dir(path)) {
        snprintf(r->wpath, sizeof r->wpath, "%s", path);
        r->weights.files = calloc(1, sizeof *r->weights.files);
        rc = r->weights.files ? sg_st_open(path, &r->weights.files[0], err)
                              : sg_error_set(err, SG_ENOMEM, "%s: out of memory", path);
        r->weights.nfiles = rc ? 0 : 1;
    } else {
        *resumed = 1;
        if ((rc = resolve(path, dir, sizeof dir, err)))
            return rc;
        join(r->spath, sizeof r->spath, dir, "state.safetensors");
        rc = sg_hf_dir_open(dir, &r->weights, err);
        snprintf(r->wpath, sizeof r->wpath, "%s",
                 !rc && r->weights.nfiles == 1 ? r->weights.files[0].path : dir);
    }
    if (!rc && !*resumed) {
        rc = sg_weights_check_set(&r->weights, r->wpath, m, shape, warn, err);
        if (!rc)
            rc = sg_train_state_describe(st, m, err);
    } else if (!rc) {
        /* written by several ranks: optimizer partitions instead of the state */
        int parts = exists(r->spath) ? 0 : sg_checkpoint_parts_dp(dir);
        if (parts)
            rc = open_parts(r, dir, parts, m, shape, st, warn, err);
        else if (!(rc = sg_weights_check_set(&r->weights, r->wpath, m, shape, warn, err)) &&
                 !(rc = sg_train_state_check(r->spath, m, st, &r->state, err)))
            r->has_state = 1;
    }
    /* every weights file of the step is from the state's step */
    const char *bad = NULL;
    for (int i = 0; !rc && *resumed && i < r->weights.nfiles && !bad; i++) {
        const char *step = sg_st_meta_get(&r->weights.files[i], "step");
        if (!step || strtoll(step, NULL, 10) != st->step)
            bad = step ? step : "missing";
    }
    if (bad)
        rc = sg_error_set(err, SG_EINVAL,
                          "%s: the weights (step %s) and the training state (step %" PRId64
                          ") are from different steps",
                          dir, bad, st->step);
    if (rc) {
        sg_checkpoint_reader_close(r);
        sg_weights_free(shape);
        sg_train_state_free(st);
        return rc;
    }
    r->shape = shape;
    return SG_OK;
}

int sg_checkpoint_reader_fill(void *reader, int set, int i, float *out)
{
    sg_checkpoint_reader *r = reader;
    const sg_tensor_info *info = &r->shape->info[i];
    if (r->parts.dp)
        return sg_parts_read(&r->parts, set, r->shape->unit[i], r->unit_offset[i], info->numel, out,
                             &r->err);
    if (set == SG_SET_WEIGHTS)
        return sg_weights_read_tensor(&r->weights, r->wpath, info, out, &r->err);
    if (!r->has_state)
        return SG_TENSOR_ABSENT;
    return sg_train_state_read_moment(&r->state, r->spath, info, set == SG_SET_EXP_AVG_SQ, out,
                                      &r->err);
}

static uint64_t fnv(uint64_t h, const void *p, size_t n)
{
    const unsigned char *c = p;
    for (size_t i = 0; i < n; i++) {
        h ^= c[i];
        h *= 1099511628211ULL;
    }
    return h;
}

uint64_t sg_config_resume_hash(const sg_config *cfg)
{
    const sg_ds_config *ds = &cfg->ds;
    const sg_run_options *r = &cfg->run;
    /* the global micro batch (micro batch x ranks), not each: dp ranks of
     * micro batch B read and compute what one rank of micro batch dp x B
     * does, so a checkpoint resumes under another dp of the same global
     * batch (the last slot was dp_size, 1 in every one-rank checkpoint) */
    int64_t ints[] = {r->max_length,
                      ds->train_micro_batch_size_per_gpu * (r->dp_size > 1 ? r->dp_size : 1),
                      ds->gradient_accumulation_steps,
                      ds->bf16.enabled,
                      ds->fp16.enabled,
                      r->seed,
                      1};
    uint64_t h = 1469598103934665603ULL;
    h = fnv(h, r->model, strlen(r->model) + 1);
    h = fnv(h, r->data, strlen(r->data) + 1);
    return fnv(h, ints, sizeof ints);
}
