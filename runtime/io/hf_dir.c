/* hf_dir.c - the weights of a Hugging Face model directory (hf_dir.h). */
#define _POSIX_C_SOURCE 200809L

#include "runtime/io/hf_dir.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "common/json_strict.h"

/* An index lists names, not data: 64 MiB is far above any real one. */
#define INDEX_MAX ((size_t)64 << 20)

static int join(char *out, size_t size, const char *dir, const char *name)
{
    size_t len = strlen(dir);
    int n = snprintf(out, size, "%s%s%s", dir, len && dir[len - 1] == '/' ? "" : "/", name);
    return n < 0 || (size_t)n >= size;
}

static int is_file(const char *dir, const char *name)
{
    char p[4096];
    struct stat st;
    return !join(p, sizeof p, dir, name) && stat(p, &st) == 0 && S_ISREG(st.st_mode);
}

int sg_hf_dir_is_model(const char *dir)
{
    return is_file(dir, "config.json") &&
           (is_file(dir, SG_HF_INDEX) || is_file(dir, "model.safetensors")) &&
           !is_file(dir, "state.safetensors") && !is_file(dir, "latest");
}

void sg_st_set_close(sg_st_set *set)
{
    for (int i = 0; i < set->nfiles; i++)
        sg_st_close(&set->files[i]);
    free(set->files);
    set->files = NULL;
    set->nfiles = 0;
}

const sg_st_tensor *sg_st_set_find(const sg_st_set *set, const char *name)
{
    for (int i = 0; i < set->nfiles; i++) {
        const sg_st_tensor *t = sg_st_find(&set->files[i], name);
        if (t)
            return t;
    }
    return NULL;
}

static int open_one(sg_st_set *set, const char *dir, const char *name, sg_error *err)
{
    char p[4096];
    if (join(p, sizeof p, dir, name))
        return sg_error_set(err, SG_EINVAL, "%s: path too long", dir);
    sg_st_file *f = realloc(set->files, (size_t)(set->nfiles + 1) * sizeof *f);
    if (!f)
        return sg_error_set(err, SG_ENOMEM, "%s: out of memory", dir);
    set->files = f;
    int rc = sg_st_open(p, &set->files[set->nfiles], err);
    if (rc == 0)
        set->nfiles++;
    return rc;
}

static int read_index(const char *path, char **out, sg_error *err)
{
    *out = NULL;
    FILE *f = fopen(path, "rb");
    if (!f)
        return sg_error_set(err, errno == ENOENT ? SG_ENOENT : SG_EIO, "%s: %s", path,
                            strerror(errno));
    char *buf = malloc(INDEX_MAX + 1);
    size_t n = buf ? fread(buf, 1, INDEX_MAX + 1, f) : 0;
    int read_err = buf && ferror(f);
    fclose(f);
    int rc = !buf            ? sg_error_set(err, SG_ENOMEM, "%s: out of memory", path)
             : read_err      ? sg_error_set(err, SG_EIO, "%s: read error", path)
             : n > INDEX_MAX ? sg_error_set(err, SG_EINVAL,
                                            "%s: larger than %zu bytes: not a safetensors "
                                            "index",
                                            path, INDEX_MAX)
                             : SG_OK;
    if (rc == SG_OK) {
        buf[n] = '\0';
        rc = strlen(buf) != n ? sg_error_set(err, SG_EINVAL,
                                             "%s: contains a NUL byte: not "
                                             "JSON",
                                             path)
                              : sg_json_check_strict(buf, n, 0, path, err);
    }
    if (rc)
        free(buf);
    else
        *out = buf;
    return rc;
}

/* A shard's name: a plain file name in the directory. */
static int plain_name(const char *s)
{
    return s[0] && s[0] != '.' && !strchr(s, '/') && strlen(s) < 256;
}

/* Index of name among the opened shards' names, or -1. */
static int shard_index(char **names, int n, const char *name)
{
    for (int i = 0; i < n; i++)
        if (strcmp(names[i], name) == 0)
            return i;
    return -1;
}

static int open_index(const char *dir, const char *ipath, sg_st_set *set, sg_error *err)
{
    char *text;
    int rc = read_index(ipath, &text, err);
    if (rc)
        return rc;
    cJSON *root = cJSON_Parse(text);
    free(text);
    if (!root)
        return sg_error_set(err, SG_ENOMEM, "%s: out of memory", ipath);
    const cJSON *map = cJSON_GetObjectItemCaseSensitive(root, "weight_map");
    char **names = NULL;
    int nnames = 0;
    if (!cJSON_IsObject(map) || !map->child)
        rc = sg_error_set(err, SG_EINVAL,
                          "%s: weight_map: expected an object mapping tensor "
                          "names to shard files",
                          ipath);
    for (const cJSON *e = map ? map->child : NULL; e && rc == SG_OK; e = e->next) {
        if (!cJSON_IsString(e) || !plain_name(e->valuestring)) {
            char *v = cJSON_PrintUnformatted(e);
            rc = sg_error_set(err, SG_EINVAL,
                              "%s: weight_map.%.96s: %.64s is not a file name "
                              "in the directory",
                              ipath, e->string, v ? v : "(value)");
            cJSON_free(v);
            break;
        }
        int k = shard_index(names, nnames, e->valuestring);
        if (k < 0) {
            if (nnames == SG_HF_SHARDS_MAX) {
                rc = sg_error_set(err, SG_EINVAL, "%s: more than %d shards", ipath,
                                  SG_HF_SHARDS_MAX);
                break;
            }
            char **nn = realloc(names, (size_t)(nnames + 1) * sizeof *nn);
            if (!nn || !(nn[nnames] = strdup(e->valuestring))) {
                names = nn ? nn : names;
                rc = sg_error_set(err, SG_ENOMEM, "%s: out of memory", ipath);
                break;
            }
            names = nn;
            k = nnames++;
            if ((rc = open_one(set, dir, names[k], err)))
                break;
        }
        if (!sg_st_find(&set->files[k], e->string)) {
            rc = sg_error_set(err, SG_EINVAL,
                              "%s: weight_map puts %.96s in %s, which does not "
                              "hold it",
                              ipath, e->string, names[k]);
            break;
        }
    }
    /* a tensor in two shards would make the weights ambiguous */
    for (int a = 0; a < set->nfiles && rc == SG_OK; a++)
        for (int i = 0; i < set->files[a].ntensors && rc == SG_OK; i++)
            for (int b = a + 1; b < set->nfiles && rc == SG_OK; b++)
                if (sg_st_find(&set->files[b], set->files[a].tensors[i].name))
                    rc = sg_error_set(err, SG_EINVAL,
                                      "%s: tensor %.96s is in two shards, %s "
                                      "and %s",
                                      dir, set->files[a].tensors[i].name, names[a], names[b]);
    for (int i = 0; i < nnames; i++)
        free(names[i]);
    free(names);
    cJSON_Delete(root);
    return rc;
}

int sg_hf_dir_open(const char *dir, sg_st_set *set, sg_error *err)
{
    memset(set, 0, sizeof *set);
    char ipath[4096];
    if (join(ipath, sizeof ipath, dir, SG_HF_INDEX))
        return sg_error_set(err, SG_EINVAL, "%s: path too long", dir);
    int rc = is_file(dir, SG_HF_INDEX) ? open_index(dir, ipath, set, err)
             : is_file(dir, "model.safetensors")
                 ? open_one(set, dir, "model.safetensors", err)
                 : sg_error_set(err, SG_ENOENT,
                                "%s: no model.safetensors and no %s: not a "
                                "Hugging Face model directory with weights",
                                dir, SG_HF_INDEX);
    if (rc)
        sg_st_set_close(set);
    return rc;
}
