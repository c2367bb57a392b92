/* train.c - the training loop of `stepgraph run` (train.h). */
#define _POSIX_C_SOURCE 200809L
#include "runtime/train/train.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <errno.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "codelets/cpu/adam.h"
#include "codelets/cpu/gemm.h"
#include "common/cleanup.h"
#include "common/clock.h"
#include "graph/analysis.h"
#include "graph/memory_held.h"
#include "graph/peak_workers.h"
#include "runtime/train/host_fit.h"
#include "runtime/train/nvme_run.h"
#include "runtime/train/interrupt.h"
#include "runtime/exec/starpu_info.h"
#include "runtime/io/checkpoint.h"
#include "runtime/io/data_loader.h"
#include "runtime/io/tokenizer_info.h"
#include "runtime/dist/dist.h"
#include "runtime/exec/buffer_cache.h"
#include "runtime/exec/exec.h"
#include "runtime/train/loss_scaler.h"
#include "runtime/train/node_times.h"
#include "runtime/train/rank_save.h"
#include "runtime/train/lr_schedule.h"
#include "runtime/train/step_log.h"
#include "runtime/config/step_spec.h"
#include "runtime/train/speculation.h"
#include "runtime/train/state_source.h"
#include "runtime/train/timeline.h"

typedef struct trainer {
    const sg_config *cfg;
    const sg_dist *dist;        /* several ranks (runtime/dist/), or NULL */
    int rank, world;            /* 0 and 1 for one process */
    sg_model model;
    sg_step_spec spec;
    sg_graph graph;
    /* SuperOffload with speculation "adaptive" or "never": the same step
     * compiled without speculation, run while clipping keeps firing */
    sg_step_spec wait_spec;
    sg_graph wait_graph;
    int adaptive;               /* choose per step; else wait_graph always runs */
    int have_wait;
    sg_speculation speculation; /* adaptive: the rule's state */
    int waiting;                /* the rule's mode after the steps finished so far */
    /* adaptive: the mode after n finished steps, at waiting_after[n % (SG_LOOKAHEAD_MAX + 1)];
     * step j runs the mode known after step j - lookahead, the last one that
     * has surely finished when it is submitted, so the choice does not
     * depend on timing */
    uint8_t waiting_after[SG_LOOKAHEAD_MAX + 1];
    int64_t waited_steps;
    sg_weights w;               /* names and shapes (values only while a save of
                                   several ranks reads them back) */
    sg_train_state st;          /* counters, scaler, data position; moments as w */
    sg_state_source source;     /* the starting state, until StarPU holds it */
    int have_source;
    int resumed;
    char data_path[SG_PATH_MAX];
    sg_data_loader data;
    int data_open;
    sg_tokenizer_info tokenizer;  /* who made the token shards, when they say */
    int have_tokenizer;
    sg_loss_scaler_params scaler_params;
    sg_loss_scaler_state scaler;   /* the step's; read back from the exec after each step */
    sg_exec x;
    int exec_started;
    int64_t plan_host, plan_gpu;   /* the plan's peaks for the workers (plan_memory) */
    double peak_tflops;            /* the rank's GPUs' dense peak, MFU's denominator; 0
                                      unknown (set_peak) */
    sg_node_times node_times;      /* cfg->node_times: CPU task times per node */
    sg_metrics metrics;
    int metrics_open;
    int32_t *inputs, *targets;
    float *losses;
    sg_step_stats stats;
    int64_t total_steps;
    int64_t rollbacks;          /* SuperOffload sub-group steps undone, whole run */
    /* submission side, ahead of st by the steps in flight */
    int64_t submitted;          /* steps submitted */
    int64_t submit_adam_step;   /* Adam steps done before the next submitted one */
    int advance_pending;        /* the last submitted step's skip is not known yet */
    int64_t finished;           /* steps finished (logged) */
    /* start-up in seconds, for the header: all of it (from sg_train_ranks's
     * start) and the initial state's load into StarPU's buffers */
    double start_s, startup_load_s;
    sg_interrupt intr;          /* SIGINT, SIGTERM: where to stop */
    int64_t saved_at;           /* the step of the last checkpoint written, or -1 */
} trainer;

/* ---- set-up ------------------------------------------------------------------ */

/* Outputs written at the end are checked before training: a run must not
 * lose its result to a directory that does not exist. *created: the save
 * directory is new (a run refused later removes it again while empty). */
static int check_outputs(const sg_run_options *r, int *created, sg_error *err)
{
    *created = 0;
    struct stat st;
    if (r->save[0] && mkdir(r->save, 0777) == 0)
        *created = 1;
    else if (r->save[0] && errno != EEXIST)
        return sg_error_set(err, SG_EIO, "save: cannot create %s: %s", r->save, strerror(errno));
    else if (r->save[0] && (stat(r->save, &st) || !S_ISDIR(st.st_mode)))
        return sg_error_set(err, SG_EINVAL, "save: %s exists and is not a directory (--save "
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

static int setup_graph(trainer *t, sg_error *err)
{
    sg_graph_init(&t->graph);
    sg_graph_init(&t->wait_graph);
    int rc = sg_compile_from_config(t->cfg, &t->model, &t->graph, err);
    if (rc)
        return rc;
    if (t->model.hf_ignored_keys[0])
        fprintf(stderr, "stepgraph: warning: model %s: config.json keys not used by stepgraph: "
                "%s\n", t->cfg->run.model, t->model.hf_ignored_keys);
    sg_step_spec_from_config(t->cfg, &t->spec);
    if ((rc = sg_unit_check_model(&t->model, err)) || (rc = set_priorities(t, err)))
        return rc;
    return setup_wait_graph(t, err);
}

/* Adaptive speculation (speculation.h): the next step's mode. */
static void update_speculation(trainer *t, int would_fail)
{
    int wait = sg_speculation_update(&t->speculation, would_fail);
    if (t->adaptive)
        t->waiting = wait;
    t->waiting_after[t->finished % (SG_LOOKAHEAD_MAX + 1)] = (uint8_t)t->waiting;
}

/* The mode of the step about to be submitted (waiting_after). */
static int submit_waiting(const trainer *t)
{
    int64_t n = t->submitted - t->cfg->run.lookahead + 1;
    return t->waiting_after[(n > 0 ? n : 0) % (SG_LOOKAHEAD_MAX + 1)];
}

static sg_optim_algo optim_algo_of(sg_optimizer_type type)
{
    return type == SG_OPT_LION ? SG_OPTIM_LION
         : type == SG_OPT_ADAGRAD ? SG_OPTIM_ADAGRAD : SG_OPTIM_ADAM;
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
 * buffers in setup_exec, a tensor at a time. */
static int setup_weights(trainer *t, sg_error *err)
{
    const sg_run_options *r = &t->cfg->run;
    sg_config_warnings warn = {0};
    int rc = sg_state_source_open(&t->source, r->load, &t->model, (uint64_t)r->seed, &t->w,
                                  &t->st, &t->resumed, &warn, err);
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
                            "start a new run from its weights)", r->load,
                            (long long)t->cfg->ds.train_micro_batch_size_per_gpu, t->world,
                            t->st.ranks);
    if (!t->resumed)
        init_optimizer_state(t);
    return SG_OK;
}

static int setup_data(trainer *t, sg_error *err)
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
            fprintf(stderr, "stepgraph: warning: %s: the shards were made by tokenizer %s with "
                    "a vocabulary of %lld, model %s has %lld\n", t->tokenizer.path,
                    t->tokenizer.tokenizer, (long long)t->tokenizer.vocab_size, t->model.name,
                    (long long)t->model.vocab_size);
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
static int check_schedule(const trainer *t, sg_error *err)
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
    return sg_error_set(err, SG_EINVAL, "OneCycle's beta1 reaches %.6g at update %lld "
                        "(scheduler.params.cycle_max_mom x (1 + decay_mom_rate x n)); Adam needs "
                        "beta1 < 1: lower decay_mom_rate, or run at most %lld steps", beta1,
                        (long long)first + 1, (long long)(first - t->st.adam_step));
}

/* The names and shapes of the weights and moments (the trainer holds no
 * values: StarPU's buffers do) go once a load or a save is done, and the
 * source of the starting state is closed. The step counters and the
 * scaler's state in t->st stay. */
static void drop_state_shapes(trainer *t)
{
    sg_weights_free(&t->w);
    sg_train_state_free_moments(&t->st);
    if (t->have_source)
        sg_state_source_close(&t->source);
    t->have_source = 0;
}

static int setup_exec(trainer *t, sg_error *err)
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
                return sg_error_set(err, SG_EINVAL, "resuming from %s: loss_scaler_cur_hysteresis "
                                    "%lld is above fp16.hysteresis %lld", cfg->run.load,
                                    (long long)t->st.scaler_cur_hysteresis,
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
        .comm = sg_dist_comm(t->dist),
        .launch = t->dist && t->dist->mpi ? &t->dist->comm : NULL,
        /* SuperOffload's key: the share of cores kept for CPU Adam */
        .optimizer_cores_share = cfg->ds.zero.offload_optimizer.super_offload
                                     ? cfg->ds.zero.offload_optimizer.cpuadam_cores_perc : 0.0,
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
    t->startup_load_s = sg_monotonic_s() - t0;
    if (rc && sg_state_source_error(&t->source)->code)
        *err = *sg_state_source_error(&t->source);
    drop_state_shapes(t);
    return rc;
}

static void print_header(const trainer *t)
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
               "ranks\n", t->world, (long long)tokens * t->world);
    printf("  ZeRO stage %d, %s, optimizer %s%s%s%s, gradient clipping %g\n", s->zero_stage, dt,
           s->offload_optimizer ? "offloaded to the CPU" : "with the parameters",
           s->super_offload ? " (SuperOffload speculation)" : "",
           s->offload_param ? ", parameters offloaded to the CPU" : "",
           s->activation_checkpointing ? ", activation checkpointing" : "", s->gradient_clipping);
    int nworkers = sg_exec_worker_count();
    printf("  StarPU %s: %d worker%s", cfg->run.sched, nworkers, nworkers == 1 ? "" : "s");
    if (t->x.low.split.reserved)
        printf(" (%d CPU reserved for the optimizer)", t->x.low.split.reserved);
    if (t->x.bound_cores)
        printf(", CPU workers bound to the %d cores of NUMA node %d", t->x.bound_cores,
               t->x.bound_node);
    printf("; graph %d tasks, %d dependencies per step\n", t->graph.nnodes, t->graph.nedges);
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
               "prompt and padding are not)\n", (unsigned long long)trained,
               (unsigned long long)masked_tokens,
               masked_tokens ? 100.0 * (double)trained / (double)masked_tokens : 0.0);
    if (cfg->run.load[0])
        printf("  %s %s at step %lld\n", t->resumed ? "resuming from" : "weights from",
               cfg->run.load, (long long)t->st.step);
    else
        printf("  weights: random, seed %lld\n", (long long)cfg->run.seed);
    /* what a benchmark's budget pays before the first step (scripts/bench_gpu_suite.py) */
    printf("  start-up: %.2f s (StarPU %.2f s, state allocation %.2f s, initial state %.2f s)\n",
           sg_monotonic_s() - t->start_s, t->x.startup_starpu_s, t->x.startup_alloc_s,
           t->startup_load_s);
    printf("  %lld step%s, log every %lld\n", (long long)t->total_steps,
           t->total_steps == 1 ? "" : "s", (long long)cfg->run.log_interval);
    if (cfg->run.lookahead > 1)
        printf("  lookahead %lld: up to %lld steps in flight; Time = from the later of a step's "
               "submission and the previous step's end to its end\n",
               (long long)cfg->run.lookahead, (long long)cfg->run.lookahead);
    fflush(stdout);
}

/* ---- one step ---------------------------------------------------------------- */

static int feed_batches(trainer *t, sg_error *err)
{
    for (int mb = 0; mb < t->spec.grad_accum; mb++) {
        int rc = sg_data_next(&t->data, t->inputs, t->targets, err);
        if (rc)
            return rc;
        if (sg_exec_set_tokens(&t->x, mb, t->inputs, t->targets))
            return sg_error_set(err, SG_EINVAL, "step %lld: cannot write micro-batch %d's "
                                "tokens", (long long)t->submitted + 1, mb);
    }
    return SG_OK;
}

/* The hyper-parameters of the step about to be submitted: they depend on
 * how many Adam steps the steps before it made, so in fp16 on whether the
 * last one was skipped for an overflow (known once its overflow check ran,
 * before its optimizer tail: the tail still overlaps this step). */
static int set_step_params(trainer *t, sg_step_params *p, sg_error *err)
{
    if (t->advance_pending) {
        int skipped;
        if (sg_exec_wait_overflow(&t->x, &skipped))
            return sg_error_set(err, SG_EINVAL, "step %lld: cannot read the overflow flag back "
                                "from StarPU", (long long)t->submitted);
        t->submit_adam_step += !skipped;
        t->advance_pending = 0;
    }
    const sg_ds_config *ds = &t->cfg->ds;
    p->adam = SG_ADAM_PARAMS_DEFAULT;
    p->adam.lr = (float)sg_lr_at(ds, t->submit_adam_step);
    double beta1, beta2; /* below 1 for every update: check_schedule */
    sg_betas_at(ds, t->submit_adam_step, &beta1, &beta2);
    p->adam.beta1 = (float)beta1;
    p->adam.beta2 = (float)beta2;
    p->adam.eps = (float)ds->optimizer.eps;
    p->adam.weight_decay = (float)ds->optimizer.weight_decay;
    p->adam.adamw_mode = ds->optimizer.adam_w_mode;
    p->adam.bias_correction = ds->optimizer.bias_correction;
    p->adam.algo = optim_algo_of(ds->optimizer.type);
    p->adam.lr_decay = (float)ds->optimizer.lr_decay;
    p->t = t->submit_adam_step + 1;
    p->clip = ds->gradient_clipping;
    return SG_OK;
}

/* Submits the next step without waiting for the ones in flight. */
static int submit_step(trainer *t, sg_error *err)
{
    int rc;
    sg_step_params params;
    if ((rc = set_step_params(t, &params, err)))
        return rc;
    sg_exec_wait_for_norm(&t->x, submit_waiting(t));
    sg_step_params *p = sg_exec_begin_step(&t->x);
    if (!p)
        return sg_error_set(err, SG_EINVAL, "step %lld: too many steps in flight",
                            (long long)t->submitted + 1);
    *p = params;
    if ((rc = feed_batches(t, err)) || (rc = sg_exec_submit_step(&t->x, err)))
        return rc;
    t->submitted++;
    t->advance_pending = 1;
    return SG_OK;
}

/* per rank: the sequences this rank's GPU processes, as DeepSpeedExamples'
 * script logs them; MFU where set_peak found the GPUs' peak */
static void step_rates(const trainer *t, double seconds, sg_step_rates *out)
{
    const sg_step_spec *s = &t->spec;
    sg_step_rates_of(&t->model, s->micro_batch * s->grad_accum, s->seq_len,
                     s->activation_checkpointing, seconds, t->peak_tflops, out);
}

/* MoE: the active-parameter estimate (NAN for dense models). */
static double step_active_tflops(const trainer *t, double seconds)
{
    const sg_step_spec *s = &t->spec;
    return sg_model_active_tflops(&t->model, s->micro_batch * s->grad_accum,
                                  s->seq_len, s->activation_checkpointing, seconds);
}

/* Waits for the oldest step in flight, then reads, logs and checks it. */
static int finish_step(trainer *t, sg_error *err)
{
    const sg_run_options *r = &t->cfg->run;
    int64_t i = t->finished;
    int rc;
    if ((rc = sg_exec_finish_step(&t->x, err)))
        return rc;
    t->finished++;
    const sg_adam_params *adam = &sg_exec_last_params(&t->x)->adam;
    sg_update_hyper hyper = {adam->lr, adam->beta1, adam->beta2};
    double scale = t->scaler.scale;
    int waited = sg_exec_last_graph(&t->x) != t->x.graph;
    int skipped, rollbacks, would_fail;
    if (sg_exec_losses(&t->x, t->losses) ||
        sg_exec_step_outcome(&t->x, &skipped, &rollbacks, &would_fail) ||
        sg_exec_loss_scaler(&t->x, &t->scaler) < 0)
        return sg_error_set(err, SG_EINVAL, "step %lld: cannot read the step's results back "
                            "from StarPU", (long long)t->st.step + 1);
    double loss = 0;
    for (int mb = 0; mb < t->spec.grad_accum; mb++)
        loss += t->losses[mb];
    loss /= (double)t->spec.grad_accum;
    /* several ranks: each micro-step's loss is already the mean over the
     * ranks (the gradient-norm collective averages them, graph/compile.c);
     * the main thread calls no collective while steps are in flight */
    t->rollbacks += rollbacks;
    t->waited_steps += waited;
    if (!waited && i >= r->warmup_steps)
        sg_node_times_add(&t->node_times, &t->graph, sg_exec_last_records(&t->x),
                          sg_exec_worker_is_cpu);
    update_speculation(t, would_fail);
    t->st.step++;
    if (!skipped)
        t->st.adam_step++;
    double secs = t->x.step_seconds;
    sg_dist_watch_step(t->dist, secs); /* the partition watchdog's bound scales with it */
    double tokens = (double)(t->spec.micro_batch * t->spec.grad_accum * t->spec.seq_len *
                             t->world); /* every rank's */
    sg_step_rates rates;
    step_rates(t, secs, &rates);
    double tflops = rates.tflops;
    sg_step_stats_add(&t->stats, t->st.step, secs, tokens, &rates, i < r->warmup_steps);
    sg_phase_times ph;
    sg_timeline_phases(&t->x, &ph);
    if (t->metrics_open &&
        sg_metrics_write_step(&t->metrics, t->st.step, loss, &hyper, sg_exec_grad_norm(&t->x),
                              scale, secs, tokens / secs, &rates, skipped, &ph))
        return sg_error_set(err, SG_EIO, "metrics %s: write failed at step %lld",
                            t->cfg->run.metrics, (long long)t->st.step);
    if (i == 0 || (i + 1) % r->log_interval == 0 || i + 1 == t->total_steps) {
        char line[256];
        sg_format_step_line(line, sizeof line, t->st.step, loss, secs * 1e3, tflops, tokens / secs);
        /* MoE: TFLOPS is n/a; the active-parameter figure, labelled; then
         * the model FLOPs' rate (MFU's numerator), labelled */
        char active[128] = "";
        double atf = step_active_tflops(t, secs);
        int na = isfinite(atf) ? snprintf(active, sizeof active, " | Active TFLOPS: %.2f", atf) : 0;
        if (isfinite(rates.model_tflops))
            na += snprintf(active + na, sizeof active - (size_t)na, " | Model TFLOPS: %.2f",
                           rates.model_tflops);
        if (isfinite(rates.mfu) && na < (int)sizeof active)
            snprintf(active + na, sizeof active - (size_t)na, " | MFU: %.1f%%", 100 * rates.mfu);
        /* SuperOffload: which graph ran, the speculative or the waiting one */
        const char *mode = !t->spec.super_offload ? ""
                           : waited ? " | waited for the norm" : " | speculative";
        /* a scheduled lr (and OneCycle's beta1): what this step's update used */
        char sched[64] = "";
        const sg_ds_config *ds = &t->cfg->ds;
        if (ds->scheduler.type == SG_SCHED_ONE_CYCLE && ds->scheduler.cycle_momentum)
            snprintf(sched, sizeof sched, " | LR: %.4g | Beta1: %.4g", hyper.lr, hyper.beta1);
        else if (ds->scheduler.type != SG_SCHED_NONE)
            snprintf(sched, sizeof sched, " | LR: %.4g", hyper.lr);
        printf("%s%s%s%s%s\n", line, active, sched, mode,
               skipped ? " | skipped (fp16 overflow)" : "");
        if (t->cfg->ds.wall_clock_breakdown) {
            sg_format_breakdown_line(line, sizeof line, &ph);
            printf("  %s\n", line);
        }
        fflush(stdout);
    }
    if (!isfinite(loss))
        return sg_error_set(err, SG_EINVAL, "step %lld: the loss is %g (diverged); lower the "
                            "learning rate or enable gradient clipping", (long long)t->st.step,
                            loss);
    return SG_OK;
}

/* ---- checkpoints and the end --------------------------------------------- */

static int write_checkpoint(trainer *t, sg_state_reader *reader, sg_error *err)
{
    const sg_run_options *r = &t->cfg->run;
    int rc;
    t->st.loss_scale = t->scaler.scale;
    t->st.scaler_cur_iter = t->scaler.cur_iter;
    t->st.scaler_last_overflow_iter = t->scaler.last_overflow_iter;
    t->st.scaler_cur_hysteresis = t->scaler.cur_hysteresis;
    t->st.data = sg_data_tell(&t->data);
    t->st.config_hash = sg_config_resume_hash(t->cfg);
    sg_dtype dtype = strcmp(r->save_dtype, "bf16") == 0 ? SG_BF16 : SG_F32;
    /* progress: a large model's save takes minutes */
    printf("saving checkpoint %s/" SG_CHECKPOINT_STEP_PREFIX "%08lld...\n", r->save,
           (long long)t->st.step);
    fflush(stdout);
    double t0 = sg_monotonic_s();
    if (t->world > 1)
        rc = sg_rank_save(&(sg_rank_save_args){t->dist, t->rank, t->world, &t->model, &t->spec,
                                                &t->w, &t->st, reader, r},
                          dtype, err);
    else
        rc = sg_checkpoint_save(r->save, &t->w, &t->st, &t->model, dtype, r->save_keep,
                                r->save_shard_size, err);
    if (!rc) {
        double s = sg_monotonic_s() - t0;
        int64_t bytes = sg_checkpoint_step_bytes(r->save, t->st.step);
        char saved[SG_PATH_MAX + 64];
        snprintf(saved, sizeof saved, "%s/" SG_CHECKPOINT_STEP_PREFIX "%08lld", r->save,
                 (long long)t->st.step);
        sg_dist_watch_checkpoint(t->dist, saved); /* named if a peer stops answering */
        printf("saved checkpoint %s", saved);
        if (bytes >= 1000000000)
            printf(" (%.2f GB", bytes / 1e9);
        else if (bytes >= 0)
            printf(" (%.1f MB", bytes / 1e6);
        if (bytes >= 0)
            printf(" in %.2f s, %.0f MB/s)", s, s > 0 ? bytes / 1e6 / s : 0.0);
        putchar('\n');
        fflush(stdout);
    }
    return rc;
}

/* The files are written tensor by tensor from StarPU's buffers
 * (sg_state_reader; with several ranks, a rank's partition a unit's range at
 * a time, rank_save.c), so a save holds one tensor or unit, not the model. */
static int save_checkpoint(trainer *t, sg_error *err)
{
    sg_state_reader *reader = NULL;
    /* no step in flight: the save runs on this thread alone */
    sg_exec_idle(&t->x);
    /* the save's own buffers are outside StarPU's count: the large buffers
     * kept for the next step go first (buffer_cache.h) */
    sg_buffer_cache_trim();
    int rc = sg_weights_describe(&t->w, &t->model, err);
    if (!rc)
        rc = sg_train_state_describe_moments(&t->st, &t->model, err);
    if (!rc)
        rc = sg_state_reader_open(&t->x, &t->w, &reader, err);
    if (!rc) {
        /* every task that writes the state has finished (an acquire waits
         * for them) before the first tensor is read */
        sg_tensor_source source = {sg_state_reader_fill, reader};
        t->w.source = t->st.source = &source;
        rc = write_checkpoint(t, reader, err);
        t->w.source = t->st.source = NULL;
        if (!rc)
            t->saved_at = t->st.step;
    }
    sg_state_reader_close(reader);
    drop_state_shapes(t);
    return rc;
}

/* Before anything is allocated: the step's plan for the workers StarPU will
 * start (all cores but the CUDA workers' unless ncpus says; the CUDA devices
 * seen unless ncuda says), once for each rank on this host, against the RAM;
 * a load and a save hold one tensor (with several ranks, a unit) at a time
 * beside it. */
static int check_host_memory(const trainer *t, sg_error *err)
{
    const sg_run_options *r = &t->cfg->run;
    int devices = sg_starpu_cuda_devices();
    int ncuda = r->ncuda < 0 ? devices : (int)r->ncuda < devices ? (int)r->ncuda : devices;
    long online = sysconf(_SC_NPROCESSORS_ONLN);
    int ncpu = r->ncpus > 0 ? (int)r->ncpus : (int)(online > ncuda ? online - ncuda : 1);
    return sg_host_fit_check(&t->graph, t->have_wait ? &t->wait_graph : NULL, ncpu, ncuda,
                             t->dist ? t->dist->local_size : 1,
                             sg_nvme_disk_bytes(t->cfg, &t->graph), err);
}

static double percent_over(int64_t measured, int64_t planned)
{
    return planned > 0 ? 100.0 * ((double)measured - (double)planned) / (double)planned : 0.0;
}

/* held < 0: no model of StarPU's allocator (CPU workers only: it frees at once) */
static void print_mem_line(const char *what, int64_t measured, int64_t planned, int64_t held)
{
    printf("  peak memory, %s: measured %.1f MiB, planned %.1f MiB (%+.1f%%)", what,
           measured / 1048576.0, planned / 1048576.0, percent_over(measured, planned));
    if (held >= 0)
        printf("; as StarPU's allocator holds it %.1f MiB (%+.1f%%)", held / 1048576.0,
               percent_over(measured, held));
    putchar('\n');
}

/* What StarPU's allocator holds with CUDA workers (graph/memory_held.h), the
 * larger of the two graphs' figures; -1 each when it cannot be computed. */
static void held_peaks(const trainer *t, int64_t *host, int64_t *gpu)
{
    int64_t a[SG_MEM_COUNT], b[SG_MEM_COUNT] = {0, 0};
    if (sg_graph_memory_held(&t->graph, a) ||
        (t->have_wait && sg_graph_memory_held(&t->wait_graph, b))) {
        *host = *gpu = -1;
        return;
    }
    *host = a[SG_MEM_HOST] > b[SG_MEM_HOST] ? a[SG_MEM_HOST] : b[SG_MEM_HOST];
    *gpu = a[SG_MEM_GPU] > b[SG_MEM_GPU] ? a[SG_MEM_GPU] : b[SG_MEM_GPU];
}

/* MFU's denominator: with CUDA workers and a config that names its
 * "machine", that machine's dense GPU peak for the compute dtype times the
 * rank's CUDA workers (docs/flops.md); else 0, and no MFU is printed. The
 * machine was checked when the config loaded. */
static void set_peak(trainer *t)
{
    int ncpu, ncuda;
    sg_exec_worker_counts(&ncpu, &ncuda);
    t->peak_tflops = 0;
    char path[4096];
    sg_machine *m = ncuda > 0 && t->cfg->run.machine[0] ? calloc(1, sizeof *m) : NULL;
    sg_error e = {0};
    if (m && !sg_machine_resolve(t->cfg->run.machine, path, sizeof path, &e) &&
        !sg_machine_load(path, m, &e))
        t->peak_tflops = ncuda * sg_machine_gpu_peak_tflops(m, t->spec.compute_dtype);
    free(m);
}

/* The plan's peaks (sg_plan_peaks) for the workers StarPU started, once:
 * the run's graph's, or its waiting graph's where larger. Said before the
 * first step when the host's is above what StarPU may use in main memory:
 * StarPU would wait for memory no task frees (runtime/exec/stall.h). */
static void plan_memory(trainer *t)
{
    int ncpu, ncuda;
    int64_t limit = sg_exec_main_memory_limit(), wh = 0, wg = 0;
    sg_exec_worker_counts(&ncpu, &ncuda);
    sg_plan_peaks(&t->graph, ncpu, ncuda, &t->plan_host, &t->plan_gpu);
    if (t->have_wait)
        sg_plan_peaks(&t->wait_graph, ncpu, ncuda, &wh, &wg);
    t->plan_host = wh > t->plan_host ? wh : t->plan_host;
    t->plan_gpu = wg > t->plan_gpu ? wg : t->plan_gpu;
    /* NVMe offload: the state on disk is in RAM only in the working set
     * that StarPU's limit already counts */
    int64_t in_ram = t->plan_host - sg_nvme_disk_bytes(t->cfg, &t->graph);
    if (limit > 0 && in_ram > limit)
        fprintf(stderr, "stepgraph: warning: a step's plan needs %.1f MiB of main memory, more "
                "than the %.1f MiB StarPU may use (STARPU_LIMIT_CPU_MEM, else 90%% of RAM): it "
                "will likely wait for memory no task frees, and the run end with an error once "
                "no task has run for STEPGRAPH_STALL_SECONDS\n",
                in_ram / 1048576.0, limit / 1048576.0);
}

/* StarPU's count of the memory it manages (sg_exec_memory_peak) next to the
 * plan's (sg_graph_peak_memory, the same liveness). */
static void print_memory(const trainer *t, int ncpu, int ncuda)
{
    int64_t host, gpu, ph = t->plan_host, pg = t->plan_gpu;
    sg_exec_memory_peak(&t->x, &host, &gpu);
    int64_t held_host = -1, held_gpu = -1;
    if (ncuda)
        held_peaks(t, &held_host, &held_gpu);
    print_mem_line(ncuda ? "host" : "host (one memory: the GPU-space buffers live in RAM)", host,
                   ph, held_host);
    if (!ncuda && ncpu > 1) {
        int64_t po = 0, pp = 0;
        if (sg_graph_peak_memory_one_space(&t->graph, &po, &pp) == SG_OK)
            printf("  (planned for %d CPU worker%s running ready work out of program order; "
                   "in program order %.1f MiB)\n", ncpu, ncpu == 1 ? "" : "s", po / 1048576.0);
    }
    if (ncuda)
        print_mem_line("gpu", gpu, pg, held_gpu);
    sg_buffer_cache_stats kept = sg_buffer_cache_get_stats();
    if (kept.installed && kept.hits + kept.maps > 0)
        printf("  buffers of 32 MiB or more: %lld mapped, %lld reused from an earlier free, "
               "%lld unmapped to stay within %.1f MiB (the most held at once)\n",
               kept.maps, kept.hits, kept.evictions, kept.high_water / 1048576.0);
    if (t->cfg->run.lookahead > 1)
        printf("  (lookahead %lld: steps overlap, the plan is of one step)\n",
               (long long)t->cfg->run.lookahead);
}

static void print_summary(const trainer *t)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    sg_mem_peak peak = {"host (max RSS)", (int64_t)ru.ru_maxrss * 1024};
    char buf[1024];
    sg_step_stats_format_summary(&t->stats, &peak, 1, buf, sizeof buf);
    fputs(buf, stdout);
    if (t->spec.super_offload) {
        sg_subgroup_layout lay;
        sg_subgroup_layout_compute(&t->model, &t->spec, &lay, NULL);
        int64_t speculative = t->stats.all.steps - t->waited_steps;
        printf("  SuperOffload: %lld of %lld speculative sub-group steps rolled back (clipping "
               "or overflow)", (long long)t->rollbacks,
               (long long)(lay.nsubgroups - lay.first_cpu) * (long long)speculative);
        if (t->have_wait)
            printf("; %lld of %lld steps waited for the gradient norm (speculation %s)",
                   (long long)t->waited_steps, (long long)t->stats.all.steps,
                   t->cfg->run.speculation);
        putchar('\n');
    }
    sg_overlap ov;
    int ncpu, ncuda;
    sg_exec_worker_counts(&ncpu, &ncuda);
    print_memory(t, ncpu, ncuda);
    if (ncuda > 0 && sg_exec_overlap(&t->x, &ov) == SG_OK) {
        printf("  GPU: busy %.1f%% of the last step (%.1f ms)", 100.0 * ov.gpu_busy,
               ov.span_s * 1e3);
        if (ov.adam_cpu_s > 0)
            printf("; CPU Adam %.1f ms, %.1f%% of it under GPU work", ov.adam_cpu_s * 1e3,
                   100.0 * ov.adam_hidden);
        putchar('\n');
    }
    fflush(stdout);
}

static void teardown(trainer *t)
{
    sg_node_times_free(&t->node_times);
    if (t->exec_started)
        sg_exec_shutdown(&t->x);
    if (t->metrics_open) {
        /* still open only when the run already failed, with its own message */
        sg_error e;
        (void)sg_metrics_close(&t->metrics, &e);
    }
    if (t->data_open)
        sg_data_close(&t->data);
    drop_state_shapes(t);
    sg_train_state_free(&t->st);
    sg_graph_free(&t->graph);
    sg_graph_free(&t->wait_graph);
    free(t->inputs);
    free(t->targets);
    free(t->losses);
}

static int finish_one(trainer *t, sg_train_result *res, sg_error *err)
{
    int rc = finish_step(t, err);
    if (!rc)
        rc = sg_interrupt_finished(&t->intr, t->finished, err);
    if (rc)
        return rc;
    if (res->steps == 0)
        res->first_loss = t->losses[0];
    res->steps++;
    return SG_OK;
}

/* Several ranks: the config must say as many as were launched; what is not
 * supported with several yet is refused before anything runs. */
static int check_ranks(const trainer *t, sg_error *err)
{
    const sg_run_options *r = &t->cfg->run;
    long long dp = (long long)r->dp_size;
    if (dp > 1 && t->world == 1) {
        if (!sg_dist_available())
            return sg_error_set(err, SG_ENOTSUP, "dp_size %lld: several ranks need MPI, and "
                                "this stepgraph was built without MPI support (apt-get install "
                                "libopenmpi-dev openmpi-bin, then reconfigure)", dp);
        return sg_error_set(err, SG_EINVAL, "dp_size %lld: one process per rank; launch with "
                            "`mpirun -np %lld stepgraph run CONFIG` (docs/ranks.md)", dp, dp);
    }
    if (t->world > 1 && dp != t->world)
        return sg_error_set(err, SG_EINVAL, "dp_size %lld in the config, but mpirun started %d "
                            "ranks: they must be equal (set dp_size %d, or mpirun -np %lld)", dp,
                            t->world, t->world, dp);
    return SG_OK;
}

/* Up to `lookahead` steps in flight; finished (logged) in order. A
 * checkpoint, the trace and the end wait for every step in flight. SIGINT
 * or SIGTERM: no step is submitted after the one interrupt.h names. */
static int train_loop(trainer *t, sg_train_result *res, sg_error *err)
{
    const sg_run_options *r = &t->cfg->run;
    int rc;
    for (int64_t i = 0; i < t->total_steps; i++) {
        while (sg_exec_in_flight(&t->x) >= (int)r->lookahead)
            if ((rc = finish_one(t, res, err)))
                return rc;
        if (!sg_interrupt_may_submit(&t->intr, t->submitted + 1))
            break;
        if ((rc = submit_step(t, err)) ||
            (rc = sg_interrupt_submitted(&t->intr, t->submitted, err)))
            return rc;
        while (sg_exec_in_flight(&t->x) > 0 && sg_exec_oldest_done(&t->x))
            if ((rc = finish_one(t, res, err)))
                return rc;
        if (r->save[0] && r->save_interval > 0 && (i + 1) % r->save_interval == 0 &&
            i + 1 < t->total_steps) {
            while (sg_exec_in_flight(&t->x) > 0)
                if ((rc = finish_one(t, res, err)))
                    return rc;
            if ((rc = save_checkpoint(t, err)))
                return rc;
        }
    }
    while (sg_exec_in_flight(&t->x) > 0)
        if ((rc = finish_one(t, res, err)))
            return rc;
    /* a signal after the last vote stops the run here, where it ends anyway */
    return sg_interrupt_settle(&t->intr, err);
}

/* After the last step: the summary, the trace, the checkpoint, the node
 * times, the metrics closed. Interrupted before any step: nothing but the
 * metrics (there is no step to sum up, trace or save). */
static int end_run(trainer *t, sg_train_result *res, sg_error *err)
{
    const sg_config *cfg = t->cfg;
    const sg_run_options *r = &cfg->run;
    int rc = SG_OK;
    sg_exec_idle(&t->x); /* the rest (summary, trace, save) runs on this thread */
    res->signo = t->intr.signo;
    res->last_step = t->st.step;
    res->last_loss = t->losses[0];
    if (res->steps > 0) {
        print_summary(t);
        sg_step_summary sum;
        sg_step_stats_summary(&t->stats, &sum);
        res->mean_step_s = sum.mean_s;
        res->tokens_per_s = sum.tokens_per_s;
        sg_exec_worker_counts(&res->workers_cpu, &res->workers_cuda);
        if (r->trace[0] && t->rank == 0) {
            if ((rc = sg_timeline_write_trace(&t->x, r->trace, err)))
                return rc;
            printf("trace of step %lld written to %s\n", (long long)t->st.step, r->trace);
        }
        /* an interrupt right after a periodic save: that one is this step's */
        if (r->save[0] && t->saved_at != t->st.step && (rc = save_checkpoint(t, err)))
            return rc;
        if (cfg->node_times[0] &&
            (rc = sg_node_times_write(&t->node_times, &t->graph, cfg->node_times, err)))
            return rc;
    }
    if (t->metrics_open) {
        /* the file is complete only once closed: a failure here fails the run */
        t->metrics_open = 0;
        rc = sg_metrics_close(&t->metrics, err);
    }
    if (!rc && res->signo)
        sg_interrupt_print(&t->intr, res->steps, t->st.step, r->save);
    return rc;
}

int sg_train(const sg_config *cfg, sg_train_result *res, sg_error *err)
{
    return sg_train_ranks(cfg, NULL, res, err);
}

int sg_train_ranks(const sg_config *cfg, const sg_dist *dist, sg_train_result *res,
                   sg_error *err)
{
    trainer t;
    memset(&t, 0, sizeof t);
    t.start_s = sg_monotonic_s();
    t.saved_at = -1;
    t.cfg = cfg;
    t.dist = dist;
    t.rank = dist ? dist->rank : 0;
    t.world = dist ? dist->size : 1;
    sg_step_stats_init(&t.stats);
    memset(res, 0, sizeof *res);
    const sg_run_options *r = &cfg->run;
    int rc;
    /* ranks first: a refused run creates no output directory */
    double stall_s;
    int save_created = 0, save_slot = -1;
    if ((rc = check_ranks(&t, err)) || (rc = sg_gemm_check_env(err)) ||
        (rc = sg_stall_seconds(&stall_s, err)) || (rc = sg_buffer_cache_check_env(err)) ||
        (rc = check_outputs(r, &save_created, err)))
        goto out;
    /* a second signal ends the process at once: not with an empty directory */
    if (save_created)
        save_slot = sg_cleanup_add_if_empty(r->save);
    if ((rc = setup_graph(&t, err)) || (rc = check_host_memory(&t, err)) ||
        (rc = setup_weights(&t, err)) ||
        (r->save[0] && (rc = sg_checkpoint_check_save(r->save, r->load, t.resumed, err))) ||
        (rc = setup_data(&t, err)) || (rc = check_schedule(&t, err)))
        goto out;
    /* several ranks: rank 0 writes the metrics and the trace, the others none */
    if (r->metrics[0] && t.rank == 0) {
        if ((rc = sg_metrics_open(&t.metrics, r->metrics, err)))
            goto out;
        t.metrics_open = 1;
    }
    if ((rc = setup_exec(&t, err)))
        goto out;
    if (cfg->node_times[0] && sg_node_times_init(&t.node_times, t.graph.nnodes)) {
        rc = sg_error_set(err, SG_ENOMEM, "out of memory");
        goto out;
    }
    print_header(&t);
    plan_memory(&t);
    set_peak(&t);
    /* several ranks: from here a silent peer ends the run (runtime/dist/watchdog.h) */
    sg_dist_watch_arm(dist, (double)r->comm_timeout, t.resumed ? r->load : NULL);
    sg_interrupt_init(&t.intr, dist, (int)r->lookahead);
    if (!(rc = train_loop(&t, res, err)))
        rc = end_run(&t, res, err);
out:
    /* several ranks: after an error, StarPU's workers may wait in a
     * collective for a rank that will never call it, so StarPU is not shut
     * down (it would wait for them): the caller ends every rank
     * (sg_dist_abort) */
    if (rc && t.world > 1)
        t.exec_started = 0;
    teardown(&t);
    /* a refused, failed or interrupted run leaves no empty save directory
     * of its own (rmdir removes only an empty one: saved steps stay) */
    sg_cleanup_forget(save_slot);
    if (save_created)
        rmdir(r->save);
    return rc;
}
