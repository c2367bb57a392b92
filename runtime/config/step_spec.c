/* step_spec.c - DeepSpeed config + run options -> step compiler input. */
#define _POSIX_C_SOURCE 200809L
#include "runtime/config/step_spec.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "sg_autoconf.h"

/* CPU workers StarPU will start for this config: the machine model's
 * (simulate, tune), else ncpus, else STARPU_NCPU, else this host's online
 * CPUs (StarPU's default). */
static int64_t config_cpu_workers(const sg_config *cfg, const sg_machine *m)
{
    /* the simulation's CPU workers (sim_exec.c): a core per GPU drives it */
    int64_t cores = m ? (m->cpu_cores - m->gpu_count > 0 ? m->cpu_cores - m->gpu_count : 1) : 0;
    return sg_step_cpu_workers(cfg, cores);
}

/* Optimizer tiles and cast placement (run options optimizer_tile,
 * cast_placement). The optimizer's workers: with SuperOffload the
 * cpuadam_cores_perc share reserved for it (starpu_setup.c's split), else
 * every CPU worker. They depend on the config only, so the graph that
 * waits for the norm (train.c) has the same chunks as the speculative one. */
static void tiles_from_config(const sg_config *cfg, const sg_machine *m, sg_step_spec *s)
{
    sg_error ignored = {0};
    int64_t tile = cfg->run.optimizer_tile;
    int pl = SG_CAST_SCHEDULER;
    /* validated by sg_config_finalize */
    if (sg_run_cast_placement(&cfg->run, &pl, &ignored))
        pl = SG_CAST_SCHEDULER;
    s->optimizer_tile = tile == SG_TILE_AUTO ? SG_OPTIMIZER_TILE_AUTO : tile;
    s->cast_placement = (sg_cast_placement)pl;
    int64_t w = config_cpu_workers(cfg, m);
    const sg_ds_config *ds = &cfg->ds;
    if (ds->zero.offload_optimizer.super_offload) {
        int64_t k =
            (int64_t)floor(ds->zero.offload_optimizer.cpuadam_cores_perc * (double)w + 1e-9);
        if (k >= 1 && k < w)
            w = k;
    }
    s->optimizer_workers = w > 0 ? w : 1;
    /* as many micro-steps in flight as CPU workers (graph/compile.h), or
     * STEPGRAPH_MICRO_WINDOW (0: unbounded) */
    int64_t all = config_cpu_workers(cfg, m);
    s->micro_window = all > 0 ? all : 1;
    const char *env = getenv("STEPGRAPH_MICRO_WINDOW");
    if (env && *env) {
        char *end;
        long v = strtol(env, &end, 10);
        if (*end == '\0' && v >= 0)
            s->micro_window = v;
    }
    /* what cast_placement auto weighs: the machine model's figures, at its
     * elementwise efficiency; unknown (0) without a model */
    memset(&s->cast_costs, 0, sizeof s->cast_costs);
    if (m) {
        double eff =
            m->efficiency[SG_CLASS_ELEMENTWISE] > 0 ? m->efficiency[SG_CLASS_ELEMENTWISE] : 1.0;
        double core = m->cpu_core_bw_gbs > 0
                          ? m->cpu_core_bw_gbs
                          : m->cpu_memory_bw_gbs / (m->cpu_cores > 0 ? m->cpu_cores : 1);
        double link = m->h2d_gbs < m->d2h_gbs ? m->h2d_gbs : m->d2h_gbs;
        s->cast_costs.link_bw = link * 1e9;
        s->cast_costs.cpu_worker_bw = core * eff * 1e9;
        s->cast_costs.gpu_bw = m->gpu_count > 0 ? m->gpu_memory_bw_gbs * eff * 1e9 : 0;
    }
}

void sg_step_spec_from_config(const sg_config *cfg, sg_step_spec *s)
{
    sg_step_spec_for_machine(cfg, NULL, s);
}

void sg_step_spec_for_machine(const sg_config *cfg, const sg_machine *m, sg_step_spec *s)
{
    const sg_ds_config *ds = &cfg->ds;
    sg_step_spec_defaults(s);
    s->zero_stage = (int)ds->zero.stage;
    s->dp_size = cfg->run.dp_size;
    s->micro_batch = ds->train_micro_batch_size_per_gpu;
    s->grad_accum = ds->gradient_accumulation_steps;
    s->seq_len = cfg->run.max_length;
    s->compute_dtype = ds->bf16.enabled ? SG_BF16 : ds->fp16.enabled ? SG_F16 : SG_F32;
    s->activation_checkpointing = cfg->run.activation_checkpointing > 0;
    s->offload_optimizer = ds->zero.offload_optimizer.device != SG_OFFLOAD_NONE;
    s->offload_ratio = ds->zero.offload_optimizer.ratio;
    s->super_offload = ds->zero.offload_optimizer.super_offload;
    s->offload_param = ds->zero.stage == 3 && ds->zero.offload_param.device != SG_OFFLOAD_NONE;
    s->nvme_optimizer = ds->zero.offload_optimizer.device == SG_OFFLOAD_NVME;
    s->nvme_param = s->offload_param && ds->zero.offload_param.device == SG_OFFLOAD_NVME;
    s->nvme_buffer_count = ds->zero.offload_optimizer.buffer_count;
    s->nvme_param_buffer_count = ds->zero.offload_param.buffer_count;
    s->optimizer_state = ds->optimizer.type == SG_OPT_LION      ? SG_STATE_MOMENTUM
                         : ds->optimizer.type == SG_OPT_ADAGRAD ? SG_STATE_SQUARES
                                                                : SG_STATE_ADAM;
    s->sub_group_size = ds->zero.sub_group_size;
    s->gradient_clipping = ds->gradient_clipping;
    s->param_persistence_threshold = ds->zero.stage3_param_persistence_threshold;
    s->max_reuse_distance = ds->zero.stage3_max_reuse_distance;
    tiles_from_config(cfg, m, s);
    s->batch_tile_auto = cfg->run.batch_tile == SG_TILE_AUTO;
    s->batch_tile = cfg->run.batch_tile == SG_TILE_AUTO
                        ? sg_step_auto_batch_tile(cfg, config_cpu_workers(cfg, m),
                                                  sg_step_uses_cuda(cfg, m ? m->gpu_count : -1))
                        : cfg->run.batch_tile;
}

/* ---- worker counts and automatic tiles ---------------------------------------- */

int64_t sg_step_cpu_workers(const sg_config *cfg, int64_t cores)
{
    if (cfg->run.ncpus >= 1)
        return cfg->run.ncpus;
    if (cores > 0)
        return cores;
    /* this host: STARPU_NCPU when set (StarPU honours it), else every CPU */
    const char *env = getenv("STARPU_NCPU");
    if (env && *env) {
        char *end;
        long v = strtol(env, &end, 10);
        if (*end == '\0' && v >= 1)
            return v;
    }
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int64_t)n : 1;
}

int sg_step_uses_cuda(const sg_config *cfg, int gpus)
{
    if (cfg->run.ncuda >= 0)
        return cfg->run.ncuda > 0;
    if (gpus >= 0)
        return gpus > 0;
#ifdef SG_HAVE_CUDA
    /* StarPU's default is every CUDA device: is there one? (the driver's
     * device node, without starting CUDA) */
    return access("/dev/nvidia0", F_OK) == 0;
#else
    return 0;
#endif
}

int64_t sg_step_auto_batch_tile(const sg_config *cfg, int64_t cpu_workers, int cuda)
{
    int64_t B = cfg->ds.train_micro_batch_size_per_gpu;
    int64_t A = cfg->ds.gradient_accumulation_steps;
    if (cuda || B <= 1 || A < 1 || cpu_workers <= 1)
        return 0;
    /* tiles per micro-step: enough that tiles x micro-steps cover the CPU
     * workers, at most one sequence per tile */
    int64_t tiles = (cpu_workers + A - 1) / A;
    if (tiles > B)
        tiles = B;
    if (tiles <= 1)
        return 0;
    return (B + tiles - 1) / tiles;
}

void sg_config_resolve_tiles(sg_config *cfg, int64_t cores, int gpus)
{
    if (cfg->run.batch_tile == SG_TILE_AUTO)
        cfg->run.batch_tile = sg_step_auto_batch_tile(cfg, sg_step_cpu_workers(cfg, cores),
                                                      sg_step_uses_cuda(cfg, gpus));
}

int sg_config_load_model(const sg_config *cfg, sg_model *model, sg_error *err)
{
    char path[SG_PATH_MAX];
    int rc = sg_model_resolve(cfg->run.model, NULL, path, sizeof path, err);
    if (rc || (rc = sg_model_load(path, model, err)))
        return rc;
    /* a run option the head kernels and the buffer sizes read from the model */
    model->head_chunk_tokens = cfg->run.head_chunk_tokens > 0 ? cfg->run.head_chunk_tokens : 0;
    char origin[SG_PATH_MAX + 32];
    if (cfg->run.max_length > model->max_position_embeddings)
        return sg_error_set(err, SG_EINVAL,
                            "%s: max_length %lld is longer than the %lld positions of model %s "
                            "(max_position_embeddings in %s)",
                            sg_config_run_origin(cfg, "max_length", origin, sizeof origin),
                            (long long)cfg->run.max_length,
                            (long long)model->max_position_embeddings, model->name, path);
    return SG_OK;
}

int sg_compile_from_config(const sg_config *cfg, sg_model *model, sg_graph *g, sg_error *err)
{
    return sg_compile_for_machine(cfg, NULL, model, g, err);
}

int sg_compile_spec(const sg_config *cfg, const sg_step_spec *spec, sg_model *model, sg_graph *g,
                    sg_error *err)
{
    int rc = sg_config_load_model(cfg, model, err);
    if (rc)
        return rc;
    rc = sg_compile_step(model, spec, g, err);
    if (rc)
        sg_error_prefix(err, "compiling the step of %s: ", model->name);
    return rc;
}

int sg_compile_for_machine(const sg_config *cfg, const sg_machine *m, sg_model *model, sg_graph *g,
                           sg_error *err)
{
    sg_step_spec spec;
    sg_step_spec_for_machine(cfg, m, &spec);
    return sg_compile_spec(cfg, &spec, model, g, err);
}

int sg_spec_check_disk(const sg_step_spec *spec, const sg_machine *m, sg_error *err)
{
    if (spec->nvme_optimizer)
        return sg_machine_check_disk(m, "zero_optimization.offload_optimizer.device", err);
    if (spec->nvme_param)
        return sg_machine_check_disk(m, "zero_optimization.offload_param.device", err);
    return SG_OK;
}
