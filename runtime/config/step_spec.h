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

/* SG_EINVAL naming the key and machine m when spec puts state on disk
 * (device "nvme") and m's file gives no disk (sg_machine_check_disk). */
int sg_spec_check_disk(const sg_step_spec *spec, const sg_machine *m, sg_error *err);

/* ---- worker counts and automatic tiles ----
 * Tile options set to "auto" (SG_TILE_AUTO) are resolved from the workers
 * the step will run on; sg_step_spec_from_config resolves them for this
 * host, sg_config_resolve_tiles for a machine model (simulate, tune). */

/* The CPU workers a step runs on: the ncpus run option when >= 1, else
 * `cores` when > 0 (a machine model's CPU workers), else this host's online
 * processors. The one rule every automatic tile size uses. */
int64_t sg_step_cpu_workers(const sg_config *cfg, int64_t cores);

/* Whether CUDA workers run the step: ncuda when set (>= 0), else gpus when
 * >= 0 (a machine model's), else whether this host has a CUDA device (a
 * build with CUDA and /dev/nvidia0 present). */
int sg_step_uses_cuda(const sg_config *cfg, int gpus);

/* batch_tile "auto": 0 (untiled) with CUDA workers (GPU tasks stay coarse)
 * or one CPU worker; else tiles per micro-step = min(micro batch,
 * ceil(cpu_workers / accumulation steps)), so that tiles x micro-steps >=
 * CPU workers where the micro batch allows, and the tile size is
 * ceil(micro batch / tiles) sequences (0 when that is one tile). */
int64_t sg_step_auto_batch_tile(const sg_config *cfg, int64_t cpu_workers, int cuda);

/* Replaces "auto" tile options in cfg by their value for a machine of
 * `cores` CPU workers and `gpus` GPUs (see above for cores <= 0, gpus < 0). */
void sg_config_resolve_tiles(sg_config *cfg, int64_t cores, int gpus);

/* Loads the model the run options name; refuses a max_length longer than
 * the model's max_position_embeddings (both numbers in the message). */
int sg_config_load_model(const sg_config *cfg, sg_model *model, sg_error *err);

/* Loads the model (sg_config_load_model) and compiles one step. */
int sg_compile_from_config(const sg_config *cfg, sg_model *model, sg_graph *g, sg_error *err);

/* sg_compile_from_config for a simulated machine (sg_step_spec_for_machine). */
int sg_compile_for_machine(const sg_config *cfg, const sg_machine *m, sg_model *model, sg_graph *g,
                           sg_error *err);

/* Loads the model and compiles one step of a spec the caller made (from
 * sg_step_spec_for_machine, then adjusted); errors name the model. */
int sg_compile_spec(const sg_config *cfg, const sg_step_spec *spec, sg_model *model, sg_graph *g,
                    sg_error *err);

#endif /* SG_STEP_SPEC_H */
