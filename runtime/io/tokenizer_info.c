/* tokenizer_info.c - which tokenizer made a directory of token shards
 * (tokenizer_info.h). */
#define _POSIX_C_SOURCE 200809L

#include "runtime/io/tokenizer_info.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/json_strict.h"

#define INFO_MAX (1 << 20)

static int is_hex64(const char *s)
{
    if (strlen(s) != 64)
        return 0;
    for (; *s; s++)
        if (!((*s >= '0' && *s <= '9') || (*s >= 'a' && *s <= 'f')))
            return 0;
    return 1;
}

static int parse(const char *text, size_t n, sg_tokenizer_info *ti, sg_error *err)
{
    int rc = sg_json_check_strict(text, n, 0, ti->path, err);
    if (rc)
        return rc;
    cJSON *root = cJSON_Parse(text);
    if (!root)
        return sg_error_set(err, SG_ENOMEM, "%s: out of memory", ti->path);
    const cJSON *tok = cJSON_GetObjectItemCaseSensitive(root, "tokenizer");
    const cJSON *sha = cJSON_GetObjectItemCaseSensitive(root, "sha256");
    const cJSON *voc = cJSON_GetObjectItemCaseSensitive(root, "vocab_size");
    if (!cJSON_IsObject(root))
        rc = sg_error_set(err, SG_EINVAL, "%s: expected a JSON object", ti->path);
    else if (!cJSON_IsString(tok) || !tok->valuestring[0] ||
             strlen(tok->valuestring) >= sizeof ti->tokenizer)
        rc = sg_error_set(err, SG_EINVAL, "%s: tokenizer: expected the tokenizer file's name",
                          ti->path);
    else if (!cJSON_IsString(sha) || !is_hex64(sha->valuestring))
        rc = sg_error_set(err, SG_EINVAL, "%s: sha256: expected 64 lowercase hex digits", ti->path);
    else if (!cJSON_IsNumber(voc) || !(voc->valuedouble >= 1 && voc->valuedouble <= 4294967296.0) ||
             voc->valuedouble != (double)(int64_t)voc->valuedouble)
        rc = sg_error_set(err, SG_EINVAL, "%s: vocab_size: expected an integer in [1, 2^32]",
                          ti->path);
    if (rc == SG_OK) {
        snprintf(ti->tokenizer, sizeof ti->tokenizer, "%s", tok->valuestring);
        snprintf(ti->sha256, sizeof ti->sha256, "%s", sha->valuestring);
        ti->vocab_size = (int64_t)voc->valuedouble;
    }
    cJSON_Delete(root);
    return rc;
}

int sg_tokenizer_info_read(const char *shard_path, sg_tokenizer_info *ti, sg_error *err)
{
    memset(ti, 0, sizeof *ti);
    const char *slash = strrchr(shard_path, '/');
    int dirlen = slash ? (int)(slash - shard_path) : 1;
    if (snprintf(ti->path, sizeof ti->path, "%.*s/%s", dirlen, slash ? shard_path : ".",
                 SG_TOKENIZER_INFO_FILE) >= (int)sizeof ti->path)
        return 0;
    FILE *f = fopen(ti->path, "rb");
    if (!f)
        return errno == ENOENT ? 0 : sg_error_set(err, SG_EIO, "%s: %s", ti->path, strerror(errno));
    char *buf = malloc(INFO_MAX + 1);
    size_t n = buf ? fread(buf, 1, INFO_MAX + 1, f) : 0;
    int bad = !buf || ferror(f);
    fclose(f);
    int rc;
    if (bad)
        rc = sg_error_set(err, buf ? SG_EIO : SG_ENOMEM, "%s: cannot read", ti->path);
    else if (n > INFO_MAX)
        rc = sg_error_set(err, SG_EINVAL, "%s: larger than %d bytes", ti->path, INFO_MAX);
    else {
        buf[n] = '\0';
        rc = strlen(buf) != n ? sg_error_set(err, SG_EINVAL, "%s: contains a NUL byte", ti->path)
                              : parse(buf, n, ti, err);
    }
    free(buf);
    return rc ? rc : 1;
}

int sg_tokenizer_check_text_data(const char *model_path, const char *text_path, sg_error *err)
{
    struct stat st;
    if (!model_path || !model_path[0] || stat(model_path, &st) || !S_ISDIR(st.st_mode))
        return 0;
    static const char *const names[] = {"tokenizer.json", "tokenizer.model"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        char tok[4096];
        if (snprintf(tok, sizeof tok, "%s/%s", model_path, names[i]) >= (int)sizeof tok ||
            access(tok, F_OK))
            continue;
        return sg_error_set(err, SG_EINVAL,
                            "data %s is raw text, which stepgraph reads as bytes (token ids "
                            "0-255), but model %s has its own tokenizer (%s): tokenize the text "
                            "first, e.g. scripts/tokenize.sh --tokenizer %s --out SHARDS %s, then "
                            "--data 'SHARDS/train_*.bin'%s",
                            text_path, model_path, tok, i == 0 ? tok : "TOKENIZER.json", text_path,
                            i == 0 ? "" : " (tokenize.sh reads the tokenizer.json form of it)");
    }
    return 0;
}
