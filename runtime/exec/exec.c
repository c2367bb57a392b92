/* exec.c - lowering the step graph to StarPU handles and tasks (exec.h). */
#include "runtime/exec/exec.h"

#include <math.h>
#include <starpu.h>
#include <starpu_profiling.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cblas.h>

#include "codelets/starpu/codelets.h"
#include "common/clock.h"
#include "codelets/starpu/comm.h"
#include "runtime/exec/binding.h"
#include "runtime/exec/lower.h"
#include "runtime/exec/buffer_cache.h"
#include "runtime/exec/malloc_tune.h"
#include "runtime/exec/numa_topo.h"
#include "runtime/exec/starpu_info.h"
#include "runtime/exec/starpu_setup.h"
#ifdef SG_STARPU_CUDA
#include "runtime/exec/exec_cuda.h"
#endif

#define H(x, b) ((starpu_data_handle_t)(x)->low.handles[b])

static int start_starpu(sg_exec *x, const sg_exec_options *opt, sg_error *err)
{
    int rc = sg_starpu_check_policy(opt->sched, err);
    if (rc)
        return rc;
    const char *env = getenv("STARPU_SCHED");
    if (env && *env && strcmp(env, opt->sched) != 0)
        fprintf(stderr,
                "stepgraph: warning: STARPU_SCHED=%s overrides sched %s (StarPU's "
                "environment takes precedence)\n",
                env, opt->sched);
    /* StarPU's calibration notices are noise in a training log; STARPU_SILENT=0
     * in the environment brings them back */
    setenv("STARPU_SILENT", "1", 0);
    struct starpu_conf conf;
    starpu_conf_init(&conf);
    conf.sched_policy_name = opt->sched;
    conf.ncpus = opt->ncpus;
    conf.ncuda = opt->ncuda;
    conf.nopencl = 0;
    if (opt->numa_emulate > 0) {
        /* before the core lists below: they read the emulated topology */
        rc = sg_numa_emulate(opt->numa_emulate, x->numa_xml, sizeof x->numa_xml, &x->numa_xml_slot,
                             err);
        if (rc)
            return rc;
    } else if (opt->numa) {
        setenv("STARPU_USE_NUMA", "1", 0); /* one memory node per NUMA node */
    }
    int node = opt->numa_node;
    if (opt->numa_by_rank) {
        /* DeepSpeed's launcher: rank r takes NUMA node r mod the node count */
        unsigned pus[STARPU_NMAXWORKERS];
        int nnodes, n = sg_numa_cores(0, pus, STARPU_NMAXWORKERS, &nnodes, err);
        if (n < 0)
            return n;
        node = (opt->comm ? opt->comm->rank : 0) % nnodes;
    }
    x->bound_node = node;
    if (node >= 0) {
        unsigned pus[STARPU_NMAXWORKERS];
        int nnodes, n = sg_numa_cores(node, pus, STARPU_NMAXWORKERS, &nnodes, err);
        if (n < 0)
            return n;
        if (conf.ncpus < 0 || conf.ncpus > n)
            conf.ncpus = n;
        conf.use_explicit_workers_bindid = 1;
        for (int i = 0; i < n; i++)
            conf.workers_bindid[i] = pus[i];
        x->bound_cores = n;
    }
#ifdef OPENBLAS_VERSION
    /* one BLAS thread per task: StarPU runs one task per core, and results
     * must not depend on how many threads a product was split over */
    openblas_set_num_threads(1);
#endif
    rc = starpu_init(&conf);
    if (rc == -ENODEV)
        return sg_error_set(err, SG_EINVAL, "StarPU found no worker (ncpus %d, ncuda %d)",
                            opt->ncpus, opt->ncuda);
    if (rc)
        return sg_error_set(err, SG_EINVAL, "starpu_init failed (%d)", rc);
    x->started = 1;
    starpu_profiling_status_set(STARPU_PROFILING_ENABLE);
    if (opt->ncuda > 0 && (int)starpu_cuda_worker_get_count() < opt->ncuda) {
        char cuda[160];
        sg_starpu_cuda_info(cuda, sizeof cuda);
        return sg_error_set(err, SG_EINVAL,
                            "ncuda %d: StarPU started %u CUDA workers (%s); "
                            "use --ncuda 0 to run on CPU workers only",
                            opt->ncuda, starpu_cuda_worker_get_count(), cuda);
    }
    /* before any buffer: the large ones stay mapped from step to step */
    sg_buffer_cache_install();
    /* the state's allocation and load run on this thread alone */
    sg_exec_idle(x);
    if (starpu_cpu_worker_get_count() == 0)
        return sg_error_set(err, SG_ENOTSUP,
                            "no CPU worker: the CPU codelets need at least one "
                            "(ncpus %d)",
                            opt->ncpus);
    return SG_OK;
}

/* What each step reads back (read_back_role) and writes in (tokens), and
 * one record per step in flight with room for both. */
typedef struct sg_exec_io {
    sg_exec *x;
    int step;  /* record in x->steps */
    int index; /* in x->readback or x->token_buf */
} sg_exec_io;

static int read_back_role(sg_buf_role r)
{
    return r == SG_BUF_LOSS || r == SG_BUF_GRAD_NORM || r == SG_BUF_OVERFLOW ||
           r == SG_BUF_LOSS_SCALER_STATE;
}

static int init_steps(sg_exec *x, sg_error *err)
{
    const sg_graph *g = x->graph;
    int nb = g->nbuffers > 0 ? g->nbuffers : 1;
    x->readback = calloc((size_t)nb, sizeof(int));
    x->readback_off = calloc((size_t)nb, sizeof(size_t));
    x->token_buf = calloc((size_t)nb, sizeof(int));
    x->steps = calloc((size_t)x->lookahead, sizeof *x->steps);
    if (!x->readback || !x->readback_off || !x->token_buf || !x->steps)
        return sg_error_set(err, SG_ENOMEM, "out of memory");
    x->token_elems = (size_t)(2 * x->shared.spec->micro_batch * x->shared.spec->seq_len);
    for (int b = 0; b < g->nbuffers; b++) {
        const sg_buffer *buf = &g->buffers[b];
        if (read_back_role(buf->role)) {
            x->readback_off[x->nreadback] = x->readback_bytes;
            x->readback[x->nreadback++] = b;
            x->readback_bytes += ((size_t)buf->bytes + 15) & ~(size_t)15;
        } else if (buf->role == SG_BUF_TOKENS) {
            if ((size_t)buf->elems != x->token_elems || buf->dtype != SG_I32)
                return sg_error_set(err, SG_EINVAL,
                                    "token buffer %s: %lld elements, expected "
                                    "%zu int32",
                                    buf->name, (long long)buf->elems, x->token_elems);
            x->token_buf[x->ntokens++] = b;
        }
    }
    int nio = x->nreadback + x->ntokens;
    for (int k = 0; k < x->lookahead; k++) {
        sg_exec_step *st = &x->steps[k];
        st->copy = calloc(x->readback_bytes + 1, 1);
        st->tokens = calloc((size_t)x->ntokens * x->token_elems + 1, sizeof(int32_t));
        st->io = calloc((size_t)nio + 1, sizeof *st->io);
        if (!st->copy || !st->tokens || !st->io)
            return sg_error_set(err, SG_ENOMEM, "out of memory");
        for (int i = 0; i < nio; i++)
            st->io[i] = (sg_exec_io){x, k, i < x->nreadback ? i : i - x->nreadback};
    }
    return SG_OK;
}

static void free_steps(sg_exec *x)
{
    for (int k = 0; x->steps && k < x->lookahead; k++) {
        free(x->steps[k].copy);
        free(x->steps[k].tokens);
        free(x->steps[k].io);
    }
    free(x->steps);
    free(x->readback);
    free(x->readback_off);
    free(x->token_buf);
}

/* Waits for every step in flight, results or not (shut-down, errors). */
static void drain(sg_exec *x)
{
    if (x->steps && x->begun > x->submitted) {
        /* begun, never submitted (its tokens failed): drop its own hold */
        sg_exec_step *st = &x->steps[(x->begun - 1) % x->lookahead];
        sg_lower_flight_release(&st->low->flight[(x->begun - 1) % x->lookahead]);
        x->submitted = x->begun;
    }
    for (int64_t k = x->finished; x->steps && k < x->begun && !x->stalled; k++) {
        sg_exec_step *st = &x->steps[k % x->lookahead];
        sg_error err = {0};
        sg_stall_watch_start(&x->stall, &err);
        if (st->low && sg_lower_flight_wait_polling(&st->low->flight[k % x->lookahead],
                                                    SG_STALL_POLL_S, sg_stall_check, &x->stall)) {
            fprintf(stderr, "stepgraph: error at shutdown: %s\n", err.msg);
            x->stalled = 1;
        }
    }
}

int sg_exec_init(sg_exec *x, const sg_model *m, const sg_step_spec *spec, const sg_graph *g,
                 const sg_exec_options *opt, sg_error *err)
{
    memset(x, 0, sizeof *x);
    int rc;
    if ((rc = sg_stall_watch_init(&x->stall, g, err)))
        return rc;
    x->graph = g;
    x->shared.model = m;
    x->shared.spec = spec;
    x->shared.graph = g;
    int world = opt->comm ? opt->comm->size : 1;
    if (spec->dp_size != world)
        return sg_error_set(err, SG_EINVAL,
                            "dp_size %lld but %d rank%s: one process per rank "
                            "(docs/ranks.md)",
                            (long long)spec->dp_size, world, world == 1 ? "" : "s");
    x->shared.comm = world > 1 ? opt->comm : NULL;
    if ((rc = sg_unit_check_model(m, err)))
        return rc;
    if ((rc = sg_rope_cache_init(&x->shared.rope, m, (size_t)spec->seq_len)))
        return sg_error_set(err, rc, "cannot build the rotary tables");
    double t0 = sg_monotonic_s();
    /* NVMe offload: StarPU's RAM limit is read by starpu_init */
    x->have_disk = opt->disk != NULL; /* set first: a failed start still removes its directory */
    if (opt->disk && (rc = sg_disk_prepare(&x->disk, opt->disk, g, err)))
        return rc;
    if ((rc = start_starpu(x, opt, err)))
        return rc;
    if (x->have_disk && (rc = sg_disk_register(&x->disk, err)))
        return rc;
    /* the NCCL collectives of several ranks are written but have never run
     * on several GPUs: refused unless a verification run asks for them
     * (docs/gpu.md, "Not verified yet": scripts/check_nccl_ranks.sh) */
    const char *nccl_try = getenv("STEPGRAPH_UNVERIFIED_NCCL_RANKS");
    if (world > 1 && starpu_cuda_worker_get_count() > 0 && !(nccl_try && !strcmp(nccl_try, "1")))
        return sg_error_set(err, SG_ENOTSUP,
                            "dp_size %lld: several ranks run on CPU workers "
                            "only for now: the NCCL collectives of CUDA workers are written "
                            "but have not run on a machine with several GPUs (to check them "
                            "there: scripts/check_nccl_ranks.sh, docs/gpu.md); StarPU started "
                            "%u CUDA workers: use --ncuda 0",
                            (long long)spec->dp_size, starpu_cuda_worker_get_count());
#ifdef SG_STARPU_CUDA
    if ((rc = sg_exec_cuda_init(&x->shared, opt->launch, err)))
        return rc;
    x->have_cuda = starpu_cuda_worker_get_count() > 0;
#else
    /* no CUDA codelets in this build: CUDA workers (if StarPU has them) idle */
    x->have_cuda = 0;
#endif
    double t1 = sg_monotonic_s();
    x->startup_starpu_s = t1 - t0;
    for (int k = 0; k < SG_OP_KIND_COUNT; k++)
        x->codelets[k] = sg_codelet_for((sg_op_kind)k);
    sg_lower_target target = {
        .codelets = x->codelets,
        .memory = SG_LOWER_MEMORY_REAL,
        .have_cuda = x->have_cuda,
        .priorities = 1,
        .sched = opt->sched,
        .optimizer_share = spec->offload_optimizer ? opt->optimizer_cores_share : 0,
        .flights = opt->lookahead > 0 ? opt->lookahead : 1,
        .numa = opt->numa || opt->numa_emulate > 0,
        .disk = x->have_disk ? &x->disk : NULL,
    };
    x->lookahead = target.flights;
    x->cur = -1;
    if ((rc = sg_lower_init(&x->low, g, &x->shared, &target, err)))
        return rc;
    x->startup_alloc_s = sg_monotonic_s() - t1;
    return init_steps(x, err);
}

void sg_exec_idle(sg_exec *x)
{
    /* a disk node's transfers need the workers (they drive its requests) */
    if (x->paused || x->have_disk || starpu_memory_nodes_get_count() != 1)
        return;
    starpu_pause();
    x->paused = 1;
}

static void resume_paused(sg_exec *x)
{
    if (x->paused)
        starpu_resume();
    x->paused = 0;
}

void sg_exec_shutdown(sg_exec *x)
{
    /* paused: no step is in flight, and what follows up to starpu_shutdown
     * (freeing the state) needs no worker */
    if (x->started)
        drain(x);
    if (x->stalled) {
        /* StarPU's workers still retry the allocation and would never let
         * a wait or a shutdown return; what they hold ends with the process */
        sg_numa_topo_remove(x->numa_xml, x->numa_xml_slot);
        if (x->have_disk)
            sg_disk_remove(&x->disk);
        memset(x, 0, sizeof *x);
        return;
    }
    if (x->started) {
        if (starpu_task_wait_for_all())
            fprintf(stderr, "stepgraph: warning: starpu_task_wait_for_all failed at shutdown\n");
#ifdef SG_STARPU_CUDA
        sg_exec_cuda_shutdown(&x->shared);
#endif
        if (x->have_wait)
            sg_lower_free(&x->wait_low);
        sg_lower_free(&x->low);
        resume_paused(x); /* starpu_shutdown waits for its workers to stop */
        starpu_shutdown();
        sg_buffer_cache_uninstall();
    }
    if (x->have_disk)
        sg_disk_remove(&x->disk);
    free_steps(x);
    sg_rope_cache_free(&x->shared.rope);
    sg_numa_topo_remove(x->numa_xml, x->numa_xml_slot);
    memset(x, 0, sizeof *x);
}

/* ---- one step ------------------------------------------------------------- */

int sg_exec_add_waiting_graph(sg_exec *x, const sg_step_spec *spec, const sg_graph *g,
                              sg_error *err)
{
    x->wait_shared = x->shared;
    x->wait_shared.spec = spec;
    x->wait_shared.graph = g;
    sg_lower_target target = x->low.target;
    int rc = sg_lower_init_sharing(&x->wait_low, g, &x->wait_shared, &target, &x->low, err);
    x->have_wait = 1; /* freed at shutdown, also after a failure here */
    return rc;
}

void sg_exec_wait_for_norm(sg_exec *x, int wait)
{
    x->waiting = wait && x->have_wait;
}

const sg_graph *sg_exec_last_graph(const sg_exec *x)
{
    return x->cur >= 0 && x->steps[x->cur].waited ? x->wait_low.graph : x->graph;
}

const sg_lowering *sg_exec_last_lowering(const sg_exec *x)
{
    return x->cur >= 0 && x->steps[x->cur].low ? x->steps[x->cur].low : &x->low;
}

const sg_task_record *sg_exec_last_records(const sg_exec *x)
{
    if (x->cur < 0)
        return x->low.records;
    return x->steps[x->cur].low->flight[x->cur].records;
}

const sg_step_params *sg_exec_last_params(const sg_exec *x)
{
    int k = x->cur >= 0 ? x->cur : 0;
    return &(x->steps[k].low ? x->steps[k].low : &x->low)->flight[k].params;
}

int sg_exec_in_flight(const sg_exec *x)
{
    return (int)(x->begun - x->finished);
}

sg_step_params *sg_exec_begin_step(sg_exec *x)
{
    if (x->begun != x->submitted || x->begun - x->finished >= x->lookahead)
        return NULL;
    int k = (int)(x->begun % x->lookahead);
    sg_exec_step *st = &x->steps[k];
    st->waited = x->waiting;
    st->low = x->waiting ? &x->wait_low : &x->low;
    x->begun++;
    /* the step's own hold, dropped once all of it is submitted */
    sg_lower_flight_hold(&st->low->flight[k]);
    return &st->low->flight[k].params;
}

/* The step begun, not yet submitted. */
static sg_exec_step *begun_step(sg_exec *x, int *k)
{
    if (x->begun == x->submitted)
        return NULL;
    *k = (int)((x->begun - 1) % x->lookahead);
    return &x->steps[*k];
}

static void tokens_write(void *arg)
{
    sg_exec_io *io = arg;
    sg_exec *x = io->x;
    sg_exec_step *st = &x->steps[io->step];
    starpu_data_handle_t h = H(x, x->token_buf[io->index]);
    void *dst = starpu_data_handle_to_pointer(h, STARPU_MAIN_RAM);
    memcpy(dst, st->tokens + (size_t)io->index * x->token_elems, x->token_elems * sizeof(int32_t));
    starpu_data_release_on_node(h, STARPU_MAIN_RAM);
    sg_lower_flight_release(&st->low->flight[io->step]);
}

int sg_exec_set_tokens(sg_exec *x, int mb, const int32_t *inputs, const int32_t *targets)
{
    int k;
    sg_exec_step *st = begun_step(x, &k);
    if (!st)
        return SG_EINVAL;
    const sg_graph *g = x->graph;
    size_t n = x->token_elems / 2;
    for (int i = 0; i < x->ntokens; i++) {
        if (g->buffers[x->token_buf[i]].micro_step != mb)
            continue;
        int32_t *p = st->tokens + (size_t)i * x->token_elems;
        memcpy(p, inputs, n * sizeof *p);
        memcpy(p + n, targets, n * sizeof *p);
        /* written once the previous step's readers are done with the buffer */
        sg_exec_io *io = &st->io[x->nreadback + i];
        sg_lower_flight_hold(&st->low->flight[k]);
        if (starpu_data_acquire_on_node_cb(H(x, x->token_buf[i]), STARPU_MAIN_RAM, STARPU_W,
                                           tokens_write, io)) {
            sg_lower_flight_release(&st->low->flight[k]);
            return SG_EINVAL;
        }
        return SG_OK;
    }
    return SG_EINVAL;
}

static void result_read(void *arg)
{
    sg_exec_io *io = arg;
    sg_exec *x = io->x;
    sg_exec_step *st = &x->steps[io->step];
    int b = x->readback[io->index];
    starpu_data_handle_t h = H(x, b);
    const void *src = starpu_data_handle_to_pointer(h, STARPU_MAIN_RAM);
    memcpy(st->copy + x->readback_off[io->index], src, (size_t)x->graph->buffers[b].bytes);
    starpu_data_release_on_node(h, STARPU_MAIN_RAM);
    sg_lower_flight_release(&st->low->flight[io->step]);
}

int sg_exec_submit_step(sg_exec *x, sg_error *err)
{
    int k;
    sg_exec_step *st = begun_step(x, &k);
    if (!st)
        return sg_error_set(err, SG_EINVAL, "no step begun");
    resume_paused(x);
    sg_lower_flight *fl = &st->low->flight[k];
    fl->end_us = 0;
    st->submit_us = starpu_timing_now();
    x->submitted++;
    int rc = sg_lower_submit_step(st->low, k, err);
    /* the step's results, copied as soon as they are written and before the
     * next step writes them again (StarPU's sequential consistency) */
    memset(st->copy, 0, x->readback_bytes);
    for (int i = 0; i < x->nreadback && !rc; i++) {
        sg_lower_flight_hold(fl);
        if (starpu_data_acquire_on_node_cb(H(x, x->readback[i]), STARPU_MAIN_RAM, STARPU_R,
                                           result_read, &st->io[i])) {
            sg_lower_flight_release(fl);
            rc = sg_error_set(err, SG_EINVAL, "cannot read %s back from StarPU",
                              x->graph->buffers[x->readback[i]].name);
        }
    }
    sg_lower_flight_release(fl); /* sg_exec_begin_step's hold */
    return rc;
}

int sg_exec_oldest_done(sg_exec *x)
{
    if (x->finished == x->submitted)
        return 0;
    int k = (int)(x->finished % x->lookahead);
    return sg_lower_flight_done(&x->steps[k].low->flight[k]);
}

int sg_exec_finish_step(sg_exec *x, sg_error *err)
{
    if (x->finished == x->submitted)
        return sg_error_set(err, SG_EINVAL, "no step in flight");
    int k = (int)(x->finished % x->lookahead);
    sg_exec_step *st = &x->steps[k];
    sg_lower_flight *fl = &st->low->flight[k];
    sg_stall_watch_start(&x->stall, err);
    int rc = sg_lower_flight_wait_polling(fl, SG_STALL_POLL_S, sg_stall_check, &x->stall);
    if (rc) {
        x->stalled = 1;
        return rc;
    }
    x->finished++;
    /* from now on the step-local buffers stay mapped from one step to the
     * next (malloc_tune.h: after the first step, which costs no memory) */
    if (x->finished == 1)
        sg_malloc_tune();
    x->cur = k;
    double from = st->submit_us > x->prev_end_us ? st->submit_us : x->prev_end_us;
    x->step_seconds = (fl->end_us - from) * 1e-6;
    x->prev2_end_us = x->prev_end_us;
    x->prev_end_us = fl->end_us;
    x->step_start_us = st->submit_us;
    if (x->shared.failed)
        return sg_error_set(err, x->shared.failed, "%s", x->shared.fail_msg);
    if (x->have_wait && x->wait_shared.failed)
        return sg_error_set(err, x->wait_shared.failed, "%s", x->wait_shared.fail_msg);
    return SG_OK;
}

/* The copy of buffer b in the last finished step's record, NULL if b is not
 * read back or no step has finished. */
static const void *result_of(const sg_exec *x, int b)
{
    if (x->cur < 0)
        return NULL;
    for (int i = 0; i < x->nreadback; i++)
        if (x->readback[i] == b)
            return x->steps[x->cur].copy + x->readback_off[i];
    return NULL;
}

/* ---- host access to buffers ---------------------------------------------- */

/* Where the trainer reads and writes buffer b: its home node when it has
 * one in CPU memory (a sub-group's NUMA node: no copy of the state to main
 * memory), else main memory (a disk node's buffers, NVMe offload, are
 * fetched there). */
static unsigned access_node(sg_exec *x, int b)
{
    int home = starpu_data_get_home_node(H(x, b));
    return home >= 0 && starpu_node_get_kind((unsigned)home) == STARPU_CPU_RAM ? (unsigned)home
                                                                               : STARPU_MAIN_RAM;
}

void *sg_exec_acquire(sg_exec *x, int b, int write)
{
    unsigned node = access_node(x, b);
    if (starpu_data_acquire_on_node(H(x, b), (int)node,
                                    write == 2 ? STARPU_RW
                                    : write    ? STARPU_W
                                               : STARPU_R))
        return NULL;
    return starpu_data_handle_to_pointer(H(x, b), node);
}

void sg_exec_release(sg_exec *x, int b)
{
    /* a buffer on disk stays in RAM while StarPU's limit leaves room (a
     * load fills a buffer a tensor at a time), and is written back when
     * evicted */
    starpu_data_release_on_node(H(x, b), (int)access_node(x, b));
}

/* The first buffer of a role, or -1 if the graph has none. */
static int find_role(const sg_graph *g, sg_buf_role role)
{
    for (int b = 0; b < g->nbuffers; b++)
        if (g->buffers[b].role == role)
            return b;
    return -1;
}

int sg_exec_wait_overflow(sg_exec *x, int *skipped)
{
    *skipped = 0;
    int ov = find_role(x->graph, SG_BUF_OVERFLOW);
    if (ov < 0)
        return SG_OK;
    /* ordered after the last submitted step's writer, before the next's */
    const int32_t *p = sg_exec_acquire(x, ov, 0);
    if (!p)
        return SG_EINVAL;
    *skipped = p[0] != 0;
    sg_exec_release(x, ov);
    return SG_OK;
}

int sg_exec_loss_scaler(sg_exec *x, sg_loss_scaler_state *s)
{
    int b = find_role(x->graph, SG_BUF_LOSS_SCALER_STATE);
    if (b < 0)
        return 0;
    const void *p = result_of(x, b);
    if (!p || x->graph->buffers[b].bytes != (int64_t)sizeof *s)
        return SG_EINVAL;
    memcpy(s, p, sizeof *s);
    return 1;
}

int sg_exec_losses(sg_exec *x, float *losses)
{
    const sg_graph *g = x->graph;
    for (int b = 0; b < g->nbuffers; b++) {
        if (g->buffers[b].role != SG_BUF_LOSS)
            continue;
        const float *p = result_of(x, b);
        if (!p)
            return SG_EINVAL;
        /* batch tiles: each holds its share of the micro-step's mean loss;
         * they are declared in tile order, so the sum is in a fixed order */
        const sg_buffer *lb = &g->buffers[b];
        if (lb->tile <= 0)
            losses[lb->micro_step] = p[0];
        else
            losses[lb->micro_step] += p[0];
    }
    return SG_OK;
}

double sg_exec_grad_norm(sg_exec *x)
{
    int b = find_role(x->graph, SG_BUF_GRAD_NORM);
    const float *p = b >= 0 ? result_of(x, b) : NULL;
    return p ? p[0] : NAN;
}

int sg_exec_step_outcome(sg_exec *x, int *skipped, int *rollbacks, int *spec_would_fail)
{
    const sg_graph *g = x->graph, *ran = sg_exec_last_graph(x);
    *skipped = *rollbacks = *spec_would_fail = 0;
    int ov = find_role(g, SG_BUF_OVERFLOW), nb = find_role(g, SG_BUF_GRAD_NORM);
    if (ov >= 0) {
        const int32_t *p = result_of(x, ov);
        if (!p)
            return SG_EINVAL;
        *skipped = p[0] != 0;
    }
    if (nb < 0)
        return SG_OK;
    const float *norm = result_of(x, nb);
    if (!norm)
        return SG_EINVAL;
    *spec_would_fail = sg_adam_speculation_fails(norm, *skipped, sg_exec_last_params(x)->clip);
    if (*spec_would_fail)
        for (int i = 0; i < ran->nnodes; i++)
            /* one per sub-group: a tiled one has a validation per chunk */
            *rollbacks += ran->nodes[i].kind == SG_OP_VALIDATE && ran->nodes[i].tile <= 0;
    return SG_OK;
}

int sg_exec_worker_count(void)
{
    return (int)starpu_worker_get_count();
}

const char *sg_exec_worker_name(int w, char *buf, size_t n)
{
    starpu_worker_get_name(w, buf, n);
    return buf;
}

static void flight_peaks(const sg_lowering *l, int64_t *host, int64_t *gpu)
{
    for (int f = 0; l->flight && f < l->nflights; f++) {
        if (l->flight[f].peak_host > *host)
            *host = l->flight[f].peak_host;
        if (l->flight[f].peak_gpu > *gpu)
            *gpu = l->flight[f].peak_gpu;
    }
}

void sg_exec_memory_peak(const sg_exec *x, int64_t *host, int64_t *gpu)
{
    *host = *gpu = 0;
    flight_peaks(&x->low, host, gpu);
    if (x->have_wait)
        flight_peaks(&x->wait_low, host, gpu);
}

int64_t sg_exec_main_memory_limit(void)
{
    int64_t total = 0;
    unsigned nodes = starpu_memory_nodes_get_count();
    for (unsigned m = 0; m < nodes; m++) {
        if (starpu_node_get_kind(m) != STARPU_CPU_RAM)
            continue;
        starpu_ssize_t t = starpu_memory_get_total(m);
        if (t <= 0)
            return -1;
        total += t;
    }
    return total > 0 ? total : -1;
}

int sg_exec_overlap(const sg_exec *x, sg_overlap *out)
{
    if (x->lookahead > 1 && x->finished >= 2 && x->finished == x->submitted) {
        const sg_graph *gs[64];
        const sg_task_record *rs[64];
        int n = 0;
        for (int64_t j = x->finished - 1; j >= 0 && n < x->lookahead && n < 64; j--, n++) {
            const sg_exec_step *st = &x->steps[j % x->lookahead];
            gs[n] = st->low->graph;
            rs[n] = st->low->flight[j % x->lookahead].records;
        }
        return sg_starpu_overlap_window(gs, rs, n, x->prev2_end_us, x->prev_end_us, out);
    }
    return sg_starpu_overlap(sg_exec_last_graph(x), sg_exec_last_records(x), out);
}

int sg_exec_worker_is_cpu(int w)
{
    return w >= 0 && starpu_worker_get_type(w) == STARPU_CPU_WORKER;
}

void sg_exec_worker_counts(int *ncpu, int *ncuda)
{
    *ncpu = (int)starpu_cpu_worker_get_count();
    *ncuda = (int)starpu_cuda_worker_get_count();
}
