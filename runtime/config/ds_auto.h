/* ds_auto.h - "auto" in a DeepSpeed config, filled as the Hugging Face
 * Trainer fills it.
 *
 * Configs written for the Trainer (transformers' and Accelerate's ZeRO
 * files, LLaMA-Factory, axolotl...) put "auto" where the Trainer writes a
 * value from its TrainingArguments or from the model before DeepSpeed reads
 * the config. The parser (ds_config.c) marks those keys pending, leaving the
 * default in the field; sg_config_finalize() fills them here from the run
 * options (named after TrainingArguments: run_options.h sg_trainer_args) and
 * the model, with the Trainer's rules (transformers/integrations/
 * deepspeed.py, HfTrainerDeepSpeedConfig.trainer_config_process and
 * trainer_config_finalize). docs/config-keys.md lists the keys and sources.
 */
#ifndef SG_DS_AUTO_H
#define SG_DS_AUTO_H

#include <stdint.h>

#include "runtime/config/ds_auto_keys.h"
#include "runtime/config/ds_config.h"
#include "runtime/config/run_options.h"

struct sg_json_ctx;

/* One filled value, as `stepgraph config` prints it. */
typedef struct sg_ds_auto_entry {
    char key[64];     /* DeepSpeed config path */
    char value[48];   /* as JSON would write it */
    char source[224]; /* where it came from: run option, config, default, model */
} sg_ds_auto_entry;

typedef struct sg_ds_autos {
    int n;
    sg_ds_auto_entry fill[SG_AUTO_NKEYS];
} sg_ds_autos;

/* Fills every pending key of ds from run (and, for the hidden-size keys, the
 * model run->model names), records each value and its source in out, and
 * checks the Trainer's rule that a run option given and a value the config
 * gives for the same key agree. A key that stays unresolvable is an error
 * naming it and the run option that sets it. Run options that fill nothing
 * and match nothing are warned about through c. */
int sg_ds_auto_fill(sg_ds_config *ds, const sg_run_options *run, const struct sg_json_ctx *c,
                    sg_ds_autos *out);

#endif /* SG_DS_AUTO_H */
