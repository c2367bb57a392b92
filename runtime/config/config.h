/* config.h - loading a run config or a DeepSpeed config.
 *
 * A run config is a JSON object with a "deepspeed_config" key (a path
 * relative to the run config, or an inline object) plus run option keys
 * (run_options.h); any other JSON file is read as a DeepSpeed config
 * (ds_config.h). Parsing never exits: errors name the JSON path, the value
 * and what was expected; unknown keys are reported as warnings.
 */
#ifndef SG_CONFIG_H
#define SG_CONFIG_H

#include <stdint.h>

#include "common/error.h"
#include "runtime/config/ds_auto.h"
#include "runtime/config/ds_config.h"
#include "runtime/config/run_options.h"

/* Everything one command needs: the DeepSpeed config, run options, and
 * where they came from. */
typedef struct sg_config {
    sg_ds_config ds;
    sg_run_options run;
    char ds_path[SG_PATH_MAX];  /* "" for inline */
    char run_path[SG_PATH_MAX]; /* "" when CONFIG was a DeepSpeed file */
    sg_config_warnings warnings;
    sg_ds_autos autos; /* the "auto" values finalize filled, with sources */
    /* set by `stepgraph calibrate`, not an option: where sg_train writes
     * the CPU task time of every node (runtime/train/node_times.h); "" = no */
    char node_times[SG_PATH_MAX];
    /* run options given on the command line, ",max_length,steps," (their
     * errors name the flag, not the config file: sg_config_run_origin) */
    char cli_options[512];
} sg_config;

/* Where run option key's value came from, for an error message: "command
 * line (--KEY)" when the command line gave it, else the run config's path
 * (or "run options"). Written into buf; returns buf. */
const char *sg_config_run_origin(const sg_config *cfg, const char *key, char *buf, size_t size);

/* Records that the command line set run option key (any '-' read as '_'). */
void sg_config_note_cli_option(sg_config *cfg, const char *key);

/* Loads CONFIG (run config or DeepSpeed config, see above) into cfg, after
 * filling defaults. Does not apply the batch rule (CLI flags may still
 * change dp_size): call sg_config_finalize() after the flags. */
int sg_config_load(const char *path, sg_config *cfg, sg_error *err);
/* The same, with --set KEY=VALUE assignments (config_override.h) applied to
 * the DeepSpeed config before it is read. */
int sg_config_load_with(const char *path, const char *const *sets, int nsets, sg_config *cfg,
                        sg_error *err);

/* Fills the DeepSpeed config's "auto" values as the Hugging Face Trainer
 * does (ds_auto.h: from the run options and the model), then applies
 * DeepSpeed's batch rule (train = micro * accum * dp; the missing one
 * derived; a contradiction is an error that shows the three numbers) and the
 * cross-field checks (super_offload needs stage 3 and a CPU optimizer...). */
int sg_config_finalize(sg_config *cfg, sg_error *err);

#endif /* SG_CONFIG_H */
