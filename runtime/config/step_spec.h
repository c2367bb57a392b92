/* step_spec.h - maps a loaded config (DeepSpeed + run options) to the step
 * compiler's sg_step_spec. */
#ifndef SG_STEP_SPEC_H
#define SG_STEP_SPEC_H

#include "graph/compile.h"
#include "runtime/config/config.h"
#include "runtime/config/machine.h"

/* cfg must have been finalized (sg_config_finalize). */
void sg_step_spec_from_config(const sg_config *cfg, sg_step_spec *spec);

/* The same for a simulated machine (m; NULL = this host): "auto" optimizer
 * tiles count the model's CPU workers, cast_placement "auto" weighs its
 * link and memory bandwidths (sg_cast_costs). */
void sg_step_spec_for_machine(const sg_config *cfg, const sg_machine *m, sg_step_spec *spec);

/* Loads the model the run options name; refuses a max_length longer than
 * the model's max_position_embeddings (both numbers in the message). */
int sg_config_load_model(const sg_config *cfg, sg_model *model, sg_error *err);

/* Loads the model (sg_config_load_model) and compiles one step. */
int sg_compile_from_config(const sg_config *cfg, sg_model *model, sg_graph *g,
                           sg_error *err);

/* sg_compile_from_config for a simulated machine (sg_step_spec_for_machine). */
int sg_compile_for_machine(const sg_config *cfg, const sg_machine *m, sg_model *model,
                           sg_graph *g, sg_error *err);

#endif /* SG_STEP_SPEC_H */
