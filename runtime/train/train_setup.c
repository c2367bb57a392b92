/* train_setup.c - the training run's set-up (train.h): outputs checked
 * before anything runs, the step graph (and SuperOffload's waiting graph)
 * compiled, the weights and optimizer state found, the data opened, the
 * run's schedule checked, StarPU's executor started with the starting
 * state, and the run's header printed. */

#define _POSIX_C_SOURCE 200809L
#include "runtime/train/trainer.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <errno.h>
#include <sys/stat.h>
#include <unistd.h>

#include "codelets/cpu/gemm.h"
#include "common/clock.h"
#include "runtime/train/lr_schedule.h"
#include "runtime/train/nvme_run.h"
#include "runtime/config/step_spec.h"

/* Outputs written at the end are checked before training: a run must not
 * lose its result to a directory that does not exist. *created: the save
 * directory is new (a run refused later removes it again while empty). */
int sg_trainer_check_outputs(const sg_run_options *r, int *created, sg_error *err)
{
    *created = 0;
    struct stat st;
    if (r->save[0] && mkdir(r->save, 0777) == 0)
        *created = 1;
    else if (r->save[0] && errno != EEXIST)
        return sg_error_set(err, SG_EIO, "save: cannot create %s: %s", r->save, strerror(errno));
    else if (r->save[0] && (stat(r->save, &st) || !S_ISDIR(st.st_mode)))
        return sg_error_set(err, SG_EINVAL,
                            "save: %s exists and is not a directory (--save "
                            "names the directory that holds the checkpoints' step-N folders)",
                            r->save);
    /* an existing directory: writable (a read-only one failed at the first save) */
    if (r->save[0] && access(r->save, W_OK | X_OK))
        return sg_error_set(err, SG_EIO, "save: cannot write in %s: %s", r->save, strerror(errno));
    if (r->trace[0]) {
        char dir[SG_PATH_MAX];
        snprintf(dir, sizeof dir, "%s", r->trace);
        char *slash = strrchr(dir, '/');
        if (slash)
            *slash = '\0';
        const char *d = slash ? (dir[0] ? dir : "/") : ".";
        if (access(d, W_OK))
            return sg_error_set(err, SG_EIO, "trace: cannot write in %s: %s", d, strerror(errno));
    }
    return SG_OK;
}

/* Graph-aware priorities: each task's bottom level (the longest path from it
 * to the end of the step on an ideal machine, in microseconds), so that
 * priority-aware policies (dmdas, prio, heteroprio...) run the critical path
 * first. Relative sizes matter, not the machine: one GH200's roofline. */
static int set_priorities(trainer *t, sg_error *err)
{
    sg_cost_model cm;
    sg_cost_model_gh200(&cm);
    if (sg_graph_set_priorities(&t->graph, &cm))
        return sg_error_set(err, SG_ENOMEM, "out of memory computing priorities");
    return SG_OK;
}

/* The SuperOffload step without speculation: each CPU sub-group's Adam
 * waits for the gradient norm and applies clipping at once. */
static int setup_wait_graph(trainer *t, sg_error *err)
{
    const char *mode = t->cfg->run.speculation;
    sg_graph_init(&t->wait_graph);
    if (!t->spec.super_offload || strcmp(mode, "always") == 0)
        return SG_OK;
    t->wait_spec = t->spec;
    t->wait_spec.super_offload = 0;
    int rc = sg_compile_step(&t->model, &t->wait_spec, &t->wait_graph, err);
    if (rc)
        return sg_error_prefix(err, "speculation %s: ", mode), rc;
    sg_cost_model cm;
    sg_cost_model_gh200(&cm);
    if (sg_graph_set_priorities(&t->wait_graph, &cm))
        return sg_error_set(err, SG_ENOMEM, "out of memory computing priorities");
    t->have_wait = 1;
    t->adaptive = strcmp(mode, "adaptive") == 0;
    /* clipping, or a dynamic fp16 loss scale, can roll back the first steps:
     * adaptive waits until the norm has been under the threshold */
    const sg_ds_config *ds = &t->cfg->ds;
    sg_speculation_init(&t->speculation, ds->gradient_clipping > 0 ||
                                             (ds->fp16.enabled && ds->fp16.loss_scale == 0));
    t->waiting = !t->adaptive || t->speculation.waiting;
    t->waiting_after[0] = (uint8_t)t->waiting;
    return SG_OK;
}

int sg_trainer_setup_graph(trainer *t, sg_error *err)
{
    sg_graph_init(&t->graph);
    sg_graph_init(&t->wait_graph);
    int rc = sg_compile_from_config(t->cfg, &t->model, &t->graph, err);
    if (rc)
        return rc;
    if (t->model.hf_ignored_keys[0])
        fprintf(stderr,
                "stepgraph: warning: model %s: config.json keys not used by stepgraph: "
                "%s\n",
                t->cfg->run.model, t->model.hf_ignored_keys);
    sg_step_spec_from_config(t->cfg, &t->spec);
    if ((rc = sg_unit_check_model(&t->model, err)) || (rc = set_priorities(t, err)))
        return rc;
    return setup_wait_graph(t, err);
}

/* The optimizer state of a run that starts fresh: zero moments (the
 * buffers' own), except Adagrad's sum of squares, which starts at
 * initial_accumulator_value as in torch.optim.Adagrad. */
static void init_optimizer_state(trainer *t)
{
    const sg_ds_config *ds = &t->cfg->ds;
    snprintf(t->st.optimizer, sizeof t->st.optimizer, "%s",
             sg_optim_algo_name(optim_algo_of(ds->optimizer.type)));
    if (ds->optimizer.type == SG_OPT_ADAGRAD)
        sg_state_source_set_initial_squares(&t->source,
                                            (float)ds->optimizer.initial_accumulator_value);
}

/* A resumed run's moments must belong to the config's update rule (a file
 * without the key was written before Lion and Adagrad: Adam's). */
static int check_optimizer(trainer *t, sg_error *err)
{
    const char *want = sg_optim_algo_name(optim_algo_of(t->cfg->ds.optimizer.type));
    const char *have = t->st.optimizer[0] ? t->st.optimizer : "adam";
    if (strcmp(want, have) != 0)
        return sg_error_set(err, SG_EINVAL,
                            "%s: this checkpoint holds the state of the %s optimizer, and the "
                            "config asks for %s: its moments do not carry over (load its "
                            "model.safetensors to start a new run from its weights)",
                            t->cfg->run.load, have, want);
    snprintf(t->st.optimizer, sizeof t->st.optimizer, "%s", want);
    return SG_OK;
}

/* The starting state is checked here, before StarPU starts (a checkpoint's
 * files, names, shapes and metadata); its values go straight into StarPU's
 * buffers in sg_trainer_setup_exec, a tensor at a time. */
int sg_trainer_setup_weights(trainer *t, sg_error *err)
{
    const sg_run_options *r = &t->cfg->run;
    sg_config_warnings warn = {0};
    int rc = sg_state_source_open(&t->source, r->load, &t->model, (uint64_t)r->seed, &t->w, &t->st,
                                  &t->resumed, &warn, err);
    t->have_source = rc == SG_OK;
    for (int i = 0; i < warn.count; i++)
        fprintf(stderr, "stepgraph: warning: %s\n", warn.msg[i]);
    if (rc)
        return rc;
    if (t->resumed && (rc = check_optimizer(t, err)))
        return rc;
    if (t->resumed && t->st.config_hash != sg_config_resume_hash(t->cfg))
        return sg_error_set(err, SG_EINVAL,
                            "%s: this checkpoint was written by a run with another model, "
                            "data, seed, sequence length, batch or precision; resuming "
                            "exactly needs the same ones, and the same global micro batch "
                            "(micro batch x dp_size: here %lld x %d; the checkpoint was "
                            "written by dp_size %d) (load its model.safetensors to "
                            "start a new run from its weights)",
                            r->load, (long long)t->cfg->ds.train_micro_batch_size_per_gpu, t->world,
                            t->st.ranks);
    if (!t->resumed)
        init_optimizer_state(t);
    return SG_OK;
}

int sg_trainer_setup_data(trainer *t, sg_error *err)
{
    const sg_run_options *r = &t->cfg->run;
    int rc;
    if (r->data[0])
        snprintf(t->data_path, sizeof t->data_path, "%s", r->data);
    else if ((rc = sg_data_default_text(t->data_path, sizeof t->data_path, err)))
        return rc;
    sg_data_opts o;
    sg_data_opts_default(&o);
    o.batch = t->spec.micro_batch;
    o.seq_len = t->spec.seq_len;
    o.vocab_size = t->model.vocab_size;
    o.seed = (uint64_t)r->seed;
    /* several ranks: each micro-step's global batch is world x B consecutive
     * windows of the loader's order, rank r reading the r-th B of them */
    o.rank = t->rank;
    o.world = t->world;
    if ((rc = sg_data_open(&t->data, t->data_path, &o, err)))
        return rc;
    t->data_open = 1;
    for (int i = 0; i < t->data.nfiles; i++)
        if (t->data.files[i].kind == SG_DATA_TEXT &&
            (rc = sg_tokenizer_check_text_data(r->model, t->data.files[i].path, err)))
            return rc;
    if (t->data.files[0].kind != SG_DATA_TEXT) {
        if ((rc = sg_tokenizer_info_read(t->data.files[0].path, &t->tokenizer, err)) < 0)
            return rc;
        t->have_tokenizer = rc == 1;
        if (t->have_tokenizer && t->tokenizer.vocab_size != t->model.vocab_size)
            fprintf(stderr,
                    "stepgraph: warning: %s: the shards were made by tokenizer %s with "
                    "a vocabulary of %lld, model %s has %lld\n",
                    t->tokenizer.path, t->tokenizer.tokenizer, (long long)t->tokenizer.vocab_size,
                    t->model.name, (long long)t->model.vocab_size);
    }
    if (t->resumed && (rc = sg_data_seek(&t->data, t->st.data, err)))
        return sg_error_prefix(err, "resuming from %s: ", r->load), rc;
    size_t n = (size_t)(t->spec.micro_batch * t->spec.seq_len);
    t->inputs = malloc(n * sizeof(int32_t));
    t->targets = malloc(n * sizeof(int32_t));
    t->losses = calloc((size_t)t->spec.grad_accum, sizeof(float));
    if (!t->inputs || !t->targets || !t->losses)
        return sg_error_set(err, SG_ENOMEM, "out of memory");
    /* steps: as asked, else one pass over the data */
    t->total_steps = r->steps > 0 ? r->steps : r->bench_steps;
    if (t->total_steps == 0) {
        int64_t per_step = t->spec.micro_batch * t->spec.grad_accum * t->world;
        t->total_steps = (int64_t)(t->data.nwindows / (uint64_t)per_step);
        if (t->total_steps < 1)
            t->total_steps = 1;
    }
    return SG_OK;
}

/* OneCycle's momentum decay only grows beta1: a run whose last update would
 * need beta1 >= 1 is refused before its first step, naming the first such
 * update (set_step_params relies on it). */
int sg_trainer_check_schedule(const trainer *t, sg_error *err)
{
    double beta1, beta2;
    int64_t first = t->st.adam_step, last = first + t->total_steps - 1;
    sg_betas_at(&t->cfg->ds, last, &beta1, &beta2);
    if (beta1 < 1.0)
        return SG_OK;
    while (first < last) { /* the first update at or above 1: beta1 grows with it */
        int64_t mid = first + (last - first) / 2;
        sg_betas_at(&t->cfg->ds, mid, &beta1, &beta2);
        if (beta1 < 1.0)
            first = mid + 1;
        else
            last = mid;
    }
    sg_betas_at(&t->cfg->ds, first, &beta1, &beta2);
    return sg_error_set(err, SG_EINVAL,
                        "OneCycle's beta1 reaches %.6g at update %lld "
                        "(scheduler.params.cycle_max_mom x (1 + decay_mom_rate x n)); Adam needs "
                        "beta1 < 1: lower decay_mom_rate, or run at most %lld steps",
                        beta1, (long long)first + 1, (long long)(first - t->st.adam_step));
}

/* The names and shapes of the weights and moments (the trainer holds no
 * values: StarPU's buffers do) go once a load or a save is done, and the
 * source of the starting state is closed. The step counters and the
 * scaler's state in t->st stay. */
void sg_trainer_drop_state_shapes(trainer *t)
{
    sg_weights_free(&t->w);
    sg_train_state_free_moments(&t->st);
    if (t->have_source)
        sg_state_source_close(&t->source);
    t->have_source = 0;
}

int sg_trainer_setup_exec(trainer *t, sg_error *err)
{
    const sg_config *cfg = t->cfg;
    sg_loss_scaler_init(&t->scaler_params, &t->scaler, &cfg->ds);
    if (t->resumed) {
        t->scaler.scale = t->st.loss_scale;
        /* older checkpoints have only the scale: the counters keep the
         * config's first values */
        if (t->st.has_scaler_counters) {
            if (t->scaler_params.dynamic &&
                t->st.scaler_cur_hysteresis > t->scaler_params.delayed_shift)
                return sg_error_set(err, SG_EINVAL,
                                    "resuming from %s: loss_scaler_cur_hysteresis "
                                    "%lld is above fp16.hysteresis %lld",
                                    cfg->run.load, (long long)t->st.scaler_cur_hysteresis,
                                    (long long)t->scaler_params.delayed_shift);
            t->scaler.cur_iter = t->st.scaler_cur_iter;
            t->scaler.last_overflow_iter = t->st.scaler_last_overflow_iter;
            t->scaler.cur_hysteresis = t->st.scaler_cur_hysteresis;
        }
    }
    sg_exec_options opt = {
        .sched = cfg->run.sched,
        .ncpus = (int)cfg->run.ncpus,
        .ncuda = (int)cfg->run.ncuda,
        .numa_node = (int)cfg->run.numa_node,
        /* rank r takes NUMA node r mod the node count (one process: node 0) */
        .numa_by_rank = cfg->run.numa_node < 0 && cfg->run.bind_cores_to_rank,
        .numa = cfg->run.numa,
        .numa_emulate = (int)cfg->run.numa_emulate,
        .comm = sg_dist_comm(t->dist),
        .launch = t->dist && t->dist->mpi ? &t->dist->comm : NULL,
        /* SuperOffload's key: the share of cores kept for CPU Adam */
        .optimizer_cores_share = cfg->ds.zero.offload_optimizer.super_offload
                                     ? cfg->ds.zero.offload_optimizer.cpuadam_cores_perc
                                     : 0.0,
        .lookahead = (int)cfg->run.lookahead,
    };
    sg_disk_plan disk;
    opt.disk = sg_nvme_plan(cfg, &disk) ? &disk : NULL;
    int rc = sg_exec_init(&t->x, &t->model, &t->spec, &t->graph, &opt, err);
    t->exec_started = 1;
    if (!rc && t->have_wait)
        rc = sg_exec_add_waiting_graph(&t->x, &t->wait_spec, &t->wait_graph, err);
    if (rc)
        return rc;
    t->x.shared.loss_scaler = t->scaler_params;
    t->x.wait_shared.loss_scaler = t->scaler_params;
    t->submit_adam_step = t->st.adam_step;
    double t0 = sg_monotonic_s();
    rc = sg_exec_load_state_from(&t->x, &t->w, &t->source.src, &t->scaler, err);
    t->startup.load_s = sg_monotonic_s() - t0;
    if (rc && sg_state_source_error(&t->source)->code)
        *err = *sg_state_source_error(&t->source);
    sg_trainer_drop_state_shapes(t);
    return rc;
}

void sg_trainer_print_header(const trainer *t)
{
    const sg_config *cfg = t->cfg;
    const sg_step_spec *s = &t->spec;
    int64_t tokens = s->micro_batch * s->grad_accum * s->seq_len;
    const char *dt = s->compute_dtype == SG_F16    ? "fp16"
                     : s->compute_dtype != SG_BF16 ? "fp32"
                     : sg_gemm_amx_usable()        ? "bf16 (CPU products on AMX)"
                                                   : "bf16";
    printf("stepgraph run: %s, %lld parameters; sequence %lld, micro batch %lld x %lld "
           "accumulation = %lld tokens per step\n",
           t->model.name, (long long)sg_model_total_params(&t->model), (long long)s->seq_len,
           (long long)s->micro_batch, (long long)s->grad_accum, (long long)tokens);
    if (t->world > 1)
        printf("  data parallel: %d ranks (one process each), %lld tokens per step over all "
               "ranks\n",
               t->world, (long long)tokens * t->world);
    printf("  ZeRO stage %d, %s, optimizer %s%s%s%s, gradient clipping %g\n", s->zero_stage, dt,
           !s->offload_optimizer ? "with the parameters"
           : s->nvme_optimizer   ? "offloaded to the CPU, its state on disk"
                                 : "offloaded to the CPU",
           s->super_offload ? " (SuperOffload speculation)" : "",
           !s->offload_param ? ""
           : s->nvme_param   ? ", parameters offloaded to disk (fetched through the CPU)"
                             : ", parameters offloaded to the CPU",
           s->activation_checkpointing ? ", activation checkpointing" : "", s->gradient_clipping);
    int nworkers = sg_exec_worker_count();
    printf("  StarPU %s: %d worker%s", cfg->run.sched, nworkers, nworkers == 1 ? "" : "s");
    if (t->x.low.split.reserved)
        printf(" (%d CPU reserved for the optimizer)", t->x.low.split.reserved);
    if (t->x.bound_cores)
        printf(", CPU workers bound to the %d cores of NUMA node %d", t->x.bound_cores,
               t->x.bound_node);
    printf("; graph %d tasks, %d dependencies per step\n", t->graph.nnodes, t->graph.nedges);
    char numa[256];
    if (sg_numa_place_describe(&t->x.low.numa, cfg->run.numa_emulate > 0, numa, sizeof numa))
        printf("%s\n", numa);
    if (t->x.have_disk) {
        char line[1024];
        sg_disk_describe(&t->x.disk, line, sizeof line);
        printf("  %s\n", line);
    }
    printf("  data: %s (%llu tokens, %llu window%s)\n", t->data_path,
           (unsigned long long)t->data.ntokens, (unsigned long long)t->data.nwindows,
           t->data.nwindows == 1 ? "" : "s");
    if (t->have_tokenizer)
        printf("  tokens: from tokenizer %s (sha256 %.12s..., vocabulary %lld)\n",
               t->tokenizer.tokenizer, t->tokenizer.sha256, (long long)t->tokenizer.vocab_size);
    uint64_t trained, masked_tokens;
    if (sg_data_mask_stats(&t->data, &trained, &masked_tokens) > 0)
        printf("  loss mask: %llu of the %llu tokens of masked shards are targets (%.1f%%; "
               "prompt and padding are not)\n",
               (unsigned long long)trained, (unsigned long long)masked_tokens,
               masked_tokens ? 100.0 * (double)trained / (double)masked_tokens : 0.0);
    sg_eval_print_header(&t->eval, cfg->run.eval_data);
    if (cfg->run.load[0])
        printf("  %s %s at step %lld\n", t->resumed ? "resuming from" : "weights from",
               cfg->run.load, (long long)t->st.step);
    else
        printf("  weights: random, seed %lld\n", (long long)cfg->run.seed);
    /* what a benchmark's budget pays before the first step (scripts/bench_gpu_suite.py) */
    sg_startup su = t->startup;
    su.starpu_s = t->x.startup_starpu_s;
    su.alloc_s = t->x.startup_alloc_s;
    su.state_bytes = t->x.low.state_bytes;
    su.pinned_bytes = t->x.low.pinned_bytes;
    sg_startup_print(stdout, &su, sg_monotonic_s() - t->start_s);
    printf("  %lld step%s, log every %lld\n", (long long)t->total_steps,
           t->total_steps == 1 ? "" : "s", (long long)cfg->run.log_interval);
    if (cfg->run.lookahead > 1)
        printf("  lookahead %lld: up to %lld steps in flight; Time = from the later of a step's "
               "submission and the previous step's end to its end\n",
               (long long)cfg->run.lookahead, (long long)cfg->run.lookahead);
    fflush(stdout);
}
