/* calib_record.c - the job a machine was calibrated on (see calib_record.h). */
#include "runtime/cli/calib_record.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/dtype.h"
#include "common/json_util.h"
#include "graph/compile.h"
#include "models/model.h"
#include "runtime/config/step_spec.h"

int sg_calib_job_of(const sg_config *cfg, const char *config, sg_calib_job *job, sg_error *err)
{
    memset(job, 0, sizeof *job);
    snprintf(job->config, sizeof job->config, "%s", config);
    sg_model *m = calloc(1, sizeof *m);
    if (!m)
        return sg_error_set(err, SG_ENOMEM, "out of memory");
    int rc = sg_config_load_model(cfg, m, err);
    if (!rc) {
        sg_step_spec s;
        sg_step_spec_from_config(cfg, &s);
        snprintf(job->model, sizeof job->model, "%s", m->name);
        job->seq_len = s.seq_len;
        job->micro_batch = s.micro_batch;
        job->grad_accum = s.grad_accum;
        job->dp_size = s.dp_size;
        snprintf(job->dtype, sizeof job->dtype, "%s", sg_dtype_name(s.compute_dtype));
    }
    free(m);
    return rc;
}

/* a word a POSIX shell reads back as itself: as is when it holds only
 * characters no shell treats specially, else in single quotes ('\'' for a
 * quote inside) */
static size_t append_word(char *out, size_t n, size_t len, const char *w)
{
    int plain = *w != '\0';
    for (const char *p = w; *p && plain; p++)
        plain = strchr("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_./=:,+-@%",
                       *p) != NULL;
    len +=
        (size_t)snprintf(out + (len < n ? len : n), len < n ? n - len : 0, plain ? " %s" : " '", w);
    if (plain)
        return len;
    for (const char *p = w; *p; p++) {
        const char *piece = *p == '\'' ? "'\\''" : NULL;
        if (piece)
            len += (size_t)snprintf(out + (len < n ? len : n), len < n ? n - len : 0, "%s", piece);
        else
            len += (size_t)snprintf(out + (len < n ? len : n), len < n ? n - len : 0, "%c", *p);
    }
    return len + (size_t)snprintf(out + (len < n ? len : n), len < n ? n - len : 0, "'");
}

int sg_calib_simulate_command(char *out, size_t n, const char *config, char *const *args, int nargs,
                              const char *machine_path, int ranks)
{
    size_t len = (size_t)snprintf(out, n, "stepgraph simulate");
    len = append_word(out, n, len, config);
    int has_dp = 0;
    for (int i = 0; i < nargs; i++) {
        has_dp |= !strcmp(args[i], "--dp_size") || !strncmp(args[i], "--dp_size=", 10);
        len = append_word(out, n, len, args[i]);
    }
    len = append_word(out, n, len, "--machine");
    len = append_word(out, n, len, machine_path);
    if (ranks > 1 && !has_dp) {
        char dp[24];
        snprintf(dp, sizeof dp, "%d", ranks);
        len = append_word(out, n, len, "--dp_size");
        len = append_word(out, n, len, dp);
    }
    return len < n ? SG_OK : SG_EINVAL;
}

int sg_calib_record(cJSON *cal, const sg_calib_job *job, char *const *args, int nargs,
                    const char *simulate_command)
{
    cJSON *a = cJSON_AddArrayToObject(cal, "args");
    for (int i = 0; a && i < nargs; i++)
        cJSON_AddItemToArray(a, cJSON_CreateString(args[i]));
    if (!a || !cJSON_AddStringToObject(cal, "model", job->model) ||
        !cJSON_AddNumberToObject(cal, "seq_len", (double)job->seq_len) ||
        !cJSON_AddNumberToObject(cal, "micro_batch", (double)job->micro_batch) ||
        !cJSON_AddNumberToObject(cal, "grad_accum", (double)job->grad_accum) ||
        !cJSON_AddNumberToObject(cal, "dp_size", (double)job->dp_size) ||
        !cJSON_AddStringToObject(cal, "dtype", job->dtype) ||
        !cJSON_AddStringToObject(cal, "simulate", simulate_command))
        return SG_ENOMEM;
    return SG_OK;
}

static const char *str_of(const cJSON *o, const char *key)
{
    const cJSON *it = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsString(it) ? it->valuestring : NULL;
}

static long long num_of(const cJSON *o, const char *key)
{
    const cJSON *it = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsNumber(it) ? (long long)it->valuedouble : -1;
}

/* the earlier job's words for the refusal: its command, or its config */
static void earlier_text(const cJSON *cal, char *out, size_t n)
{
    const char *cmd = str_of(cal, "simulate"), *config = str_of(cal, "config");
    if (str_of(cal, "model"))
        snprintf(out, n, "%s, seq %lld, micro-batch %lld, dp_size %lld, %s (simulate: %s)",
                 str_of(cal, "model"), num_of(cal, "seq_len"), num_of(cal, "micro_batch"),
                 num_of(cal, "dp_size"), str_of(cal, "dtype") ? str_of(cal, "dtype") : "?",
                 cmd ? cmd : "?");
    else
        snprintf(out, n, "%s (run options not recorded: calibrated before they were)",
                 config ? config : "an unrecorded config");
}

int sg_calib_check_name(const char *path, const char *name, const sg_calib_job *job, int replace,
                        sg_error *err)
{
    if (replace || access(path, F_OK) != 0)
        return SG_OK;
    cJSON *root = NULL;
    sg_error e = {0};
    if (sg_json_load_object(path, &root, &e)) /* not ours to judge: the write replaces it */
        return SG_OK;
    const cJSON *cal = cJSON_GetObjectItemCaseSensitive(root, "calibration");
    int same = !cJSON_IsObject(cal);
    if (!same && !str_of(cal, "model")) /* recorded before the job was: its config */
        same = str_of(cal, "config") && !strcmp(str_of(cal, "config"), job->config);
    else if (!same) {
        const char *dt = str_of(cal, "dtype");
        same = !strcmp(str_of(cal, "model"), job->model) &&
               num_of(cal, "seq_len") == job->seq_len &&
               num_of(cal, "micro_batch") == job->micro_batch &&
               num_of(cal, "dp_size") == job->dp_size && dt && !strcmp(dt, job->dtype);
    }
    int rc = SG_OK;
    if (!same) {
        char earlier[1200];
        earlier_text(cal, earlier, sizeof earlier);
        rc = sg_error_set(err, SG_EINVAL,
                          "--name %s: %s was calibrated on %s; calibrating %s, "
                          "seq %lld, micro-batch %lld, dp_size %lld, %s under the same name "
                          "would replace the history its simulations use: pick another --name, "
                          "or --replace to replace it",
                          name, path, earlier, job->model, job->seq_len, job->micro_batch,
                          job->dp_size, job->dtype);
    }
    cJSON_Delete(root);
    return rc;
}
