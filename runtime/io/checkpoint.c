/* checkpoint.c - checkpoint directories (checkpoint.h). */
#define _POSIX_C_SOURCE 200809L
#include "runtime/io/checkpoint.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static void join(char *out, size_t n, const char *dir, const char *file)
{
    snprintf(out, n, "%s/%s", dir, file);
}

int sg_checkpoint_save(const char *dir, const sg_weights *w, const sg_train_state *st,
                       const char *model_name, sg_dtype weights_dtype, sg_error *err)
{
    if (mkdir(dir, 0777) && errno != EEXIST)
        return sg_error_set(err, SG_EIO, "cannot create checkpoint directory %s: %s", dir,
                            strerror(errno));
    char path[SG_PATH_MAX + 32], step[32];
    snprintf(step, sizeof step, "%" PRId64, st->step);
    sg_st_meta meta[] = {{"step", step}, {"model", model_name}};
    join(path, sizeof path, dir, "model.safetensors");
    int rc = sg_weights_save(w, path, weights_dtype, meta, 2, err);
    if (rc)
        return rc;
    join(path, sizeof path, dir, "state.safetensors");
    return sg_train_state_save(st, path, model_name, err);
}

static int is_dir(const char *path)
{
    struct stat sb;
    return stat(path, &sb) == 0 && S_ISDIR(sb.st_mode);
}

int sg_checkpoint_load(const char *path, const sg_model *m, sg_weights *w, sg_train_state *st,
                       int *resumed, sg_config_warnings *warn, sg_error *err)
{
    char wpath[SG_PATH_MAX + 32], spath[SG_PATH_MAX + 32];
    *resumed = is_dir(path);
    if (!*resumed) {
        int rc = sg_weights_load(path, m, w, warn, err);
        if (!rc && (rc = sg_train_state_alloc(st, m, err)))
            sg_weights_free(w);
        return rc;
    }
    join(wpath, sizeof wpath, path, "model.safetensors");
    join(spath, sizeof spath, path, "state.safetensors");
    int rc = sg_weights_load(wpath, m, w, warn, err);
    if (rc)
        return rc;
    if ((rc = sg_train_state_load(spath, m, st, err))) {
        sg_weights_free(w);
        return rc;
    }
    char step[32] = "";
    sg_error ignored;
    if (sg_st_read_meta(wpath, "step", step, sizeof step, &ignored) ||
        strtoll(step, NULL, 10) != st->step) {
        sg_weights_free(w);
        sg_train_state_free(st);
        return sg_error_set(err, SG_EINVAL,
                            "%s: the weights (step %s) and the training state (step %" PRId64
                            ") are from different steps (a save was interrupted?)",
                            path, step[0] ? step : "missing", st->step);
    }
    return SG_OK;
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
    int64_t ints[] = {r->max_length, ds->train_micro_batch_size_per_gpu,
                      ds->gradient_accumulation_steps, ds->bf16.enabled, ds->fp16.enabled,
                      r->seed, r->dp_size};
    uint64_t h = 1469598103934665603ULL;
    h = fnv(h, r->model, strlen(r->model) + 1);
    h = fnv(h, r->data, strlen(r->data) + 1);
    return fnv(h, ints, sizeof ints);
}
