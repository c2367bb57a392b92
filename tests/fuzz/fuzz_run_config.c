/* fuzz_run_config.c - the run-config loader (sg_config_load_with, then
 * sg_config_finalize) on a file, as `stepgraph run CONFIG` reads it.
 *
 * Input: optional leading lines "--set KEY=VALUE" (applied to the DeepSpeed
 * config, as the CLI's --set) and "--opt KEY=VALUE" (sg_run_option_set, as
 * the CLI's flags), then the config text. A run config's "deepspeed_config"
 * may name "ds.json", a valid DeepSpeed config written beside it. */
#include "tests/fuzz/fuzz_util.h"

#include "runtime/config/config.h"

#define MAX_LINES 8

static const char ds_json[] =
    "{\"train_micro_batch_size_per_gpu\": 2, \"gradient_accumulation_steps\": 1,"
    " \"optimizer\": {\"type\": \"AdamW\", \"params\": {\"lr\": 0.001}},"
    " \"zero_optimization\": {\"stage\": 0}}";

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static int ds_written;
    char path[300];
    if (!ds_written) {
        fuzz_write("ds.json", ds_json, sizeof ds_json - 1, path);
        ds_written = 1;
    }
    char *text = fuzz_strdup(data, size);
    const char *sets[MAX_LINES], *opts[MAX_LINES];
    int nsets = 0, nopts = 0;
    char *p = text;
    for (;;) {
        int is_set = strncmp(p, "--set ", 6) == 0, is_opt = strncmp(p, "--opt ", 6) == 0;
        if (!is_set && !is_opt)
            break;
        char *nl = strchr(p, '\n');
        if (!nl)
            break;
        *nl = '\0';
        if (is_set && nsets < MAX_LINES)
            sets[nsets++] = p + 6;
        else if (is_opt && nopts < MAX_LINES)
            opts[nopts++] = p + 6;
        p = nl + 1;
    }
    fuzz_write("run.json", p, strlen(p), path);

    sg_config *cfg = calloc(1, sizeof *cfg);
    sg_error err = {0};
    if (!cfg)
        abort();
    if (sg_config_load_with(path, sets, nsets, cfg, &err) == SG_OK) {
        int rc = SG_OK;
        for (int i = 0; i < nopts && rc == SG_OK; i++) {
            char key[64];
            const char *eq = strchr(opts[i], '=');
            if (!eq || (size_t)(eq - opts[i]) >= sizeof key)
                continue;
            memcpy(key, opts[i], (size_t)(eq - opts[i]));
            key[eq - opts[i]] = '\0';
            rc = sg_run_option_set(&cfg->run, key, eq + 1, &err);
        }
        if (rc == SG_OK)
            sg_config_finalize(cfg, &err);
    }
    free(cfg);
    free(text);
    return 0;
}
