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
#include "runtime/exec/binding.h"
#include "runtime/exec/lower.h"
#include "runtime/exec/starpu_info.h"
#include "runtime/exec/starpu_setup.h"
#ifdef SG_STARPU_CUDA
#include "runtime/exec/exec_cuda.h"
#endif

#define H(x, b) ((starpu_data_handle_t)(x)->low.handles[b])

static double now_seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int start_starpu(sg_exec *x, const sg_exec_options *opt, sg_error *err)
{
    int rc = sg_starpu_check_policy(opt->sched, err);
    if (rc)
        return rc;
    const char *env = getenv("STARPU_SCHED");
    if (env && *env && strcmp(env, opt->sched) != 0)
        fprintf(stderr, "stepgraph: warning: STARPU_SCHED=%s overrides sched %s (StarPU's "
                        "environment takes precedence)\n", env, opt->sched);
    /* StarPU's calibration notices are noise in a training log; STARPU_SILENT=0
     * in the environment brings them back */
    setenv("STARPU_SILENT", "1", 0);
    struct starpu_conf conf;
    starpu_conf_init(&conf);
    conf.sched_policy_name = opt->sched;
    conf.ncpus = opt->ncpus;
    conf.ncuda = opt->ncuda;
    conf.nopencl = 0;
    if (opt->numa_node >= 0) {
        unsigned pus[STARPU_NMAXWORKERS];
        int nnodes, n = sg_numa_cores(opt->numa_node, pus, STARPU_NMAXWORKERS, &nnodes, err);
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
        return sg_error_set(err, SG_EINVAL, "ncuda %d: StarPU started %u CUDA workers (%s); "
                            "use --ncuda 0 to run on CPU workers only", opt->ncuda,
                            starpu_cuda_worker_get_count(), cuda);
    }
    if (starpu_cpu_worker_get_count() == 0)
        return sg_error_set(err, SG_ENOTSUP, "no CPU worker: the CPU codelets need at least one "
                                             "(ncpus %d)", opt->ncpus);
    return SG_OK;
}

int sg_exec_init(sg_exec *x, const sg_model *m, const sg_step_spec *spec, const sg_graph *g,
                 const sg_exec_options *opt, sg_error *err)
{
    memset(x, 0, sizeof *x);
    x->graph = g;
    x->shared.model = m;
    x->shared.spec = spec;
    x->shared.graph = g;
    int rc;
    if (spec->dp_size > 1)
        return sg_error_set(err, SG_ENOTSUP, "dp_size %lld: a run with several data-parallel "
                            "ranks needs one process per rank, which stepgraph run does not "
                            "launch yet (graph and simulate accept it)", (long long)spec->dp_size);
    if ((rc = sg_unit_check_model(m, err)))
        return rc;
    if ((rc = sg_rope_cache_init(&x->shared.rope, m, (size_t)spec->seq_len)))
        return sg_error_set(err, rc, "cannot build the rotary tables");
    if ((rc = start_starpu(x, opt, err)))
        return rc;
#ifdef SG_STARPU_CUDA
    if ((rc = sg_exec_cuda_init(&x->shared, err)))
        return rc;
    x->have_cuda = starpu_cuda_worker_get_count() > 0;
#else
    /* no CUDA codelets in this build: CUDA workers (if StarPU has them) idle */
    x->have_cuda = 0;
#endif
    for (int k = 0; k < SG_OP_KIND_COUNT; k++)
        x->codelets[k] = sg_codelet_for((sg_op_kind)k);
    sg_lower_target target = {
        .codelets = x->codelets,
        .memory = SG_LOWER_MEMORY_REAL,
        .have_cuda = x->have_cuda,
        .priorities = 1,
        .sched = opt->sched,
        .optimizer_share = spec->offload_optimizer ? opt->optimizer_cores_share : 0,
    };
    return sg_lower_init(&x->low, g, &x->shared, &target, err);
}

void sg_exec_shutdown(sg_exec *x)
{
    if (x->started) {
        if (starpu_task_wait_for_all())
            fprintf(stderr, "stepgraph: warning: starpu_task_wait_for_all failed at shutdown\n");
#ifdef SG_STARPU_CUDA
        sg_exec_cuda_shutdown(&x->shared);
#endif
        if (x->have_wait)
            sg_lower_free(&x->wait_low);
        sg_lower_free(&x->low);
        starpu_shutdown();
    }
    sg_rope_cache_free(&x->shared.rope);
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
    return x->last_waited ? x->wait_low.graph : x->graph;
}

const sg_task_record *sg_exec_last_records(const sg_exec *x)
{
    return x->last_waited ? x->wait_low.records : x->low.records;
}

int sg_exec_run_step(sg_exec *x, sg_error *err)
{
    sg_exec_shared *sh = &x->shared;
    sg_lowering *low = &x->low;
    if (x->waiting) {
        /* the trainer sets the main context's step parameters; the waiting
         * graph's context is a copy with its own graph, spec and records */
        const sg_step_spec *spec = x->wait_shared.spec;
        const sg_graph *g = x->wait_shared.graph;
        x->wait_shared = x->shared;
        x->wait_shared.spec = spec;
        x->wait_shared.graph = g;
        x->wait_shared.records = x->wait_low.records;
        sh = &x->wait_shared;
        low = &x->wait_low;
    }
    x->last_waited = x->waiting;
    sh->failed = 0;
    double t0 = now_seconds();
    x->step_start_us = starpu_timing_now();
    int rc = sg_lower_submit_step(low, err);
    int wait_rc = starpu_task_wait_for_all();
    x->step_seconds = now_seconds() - t0;
    if (rc)
        return rc;
    if (wait_rc)
        return sg_error_set(err, SG_EINVAL, "starpu_task_wait_for_all failed (%d)", wait_rc);
    if (sh->failed)
        return sg_error_set(err, sh->failed, "%s", sh->fail_msg);
    return SG_OK;
}

/* ---- host access to buffers ---------------------------------------------- */

void *sg_exec_acquire(sg_exec *x, int b, int write)
{
    if (starpu_data_acquire(H(x, b), write ? STARPU_W : STARPU_R))
        return NULL;
    return (void *)starpu_data_get_local_ptr(H(x, b));
}

void sg_exec_release(sg_exec *x, int b)
{
    starpu_data_release(H(x, b));
}

int sg_exec_set_tokens(sg_exec *x, int mb, const int32_t *inputs, const int32_t *targets)
{
    const sg_graph *g = x->graph;
    size_t n = (size_t)(x->shared.spec->micro_batch * x->shared.spec->seq_len);
    for (int b = 0; b < g->nbuffers; b++) {
        if (g->buffers[b].role != SG_BUF_TOKENS || g->buffers[b].micro_step != mb)
            continue;
        int32_t *p = sg_exec_acquire(x, b, 1);
        if (!p)
            return SG_EINVAL;
        memcpy(p, inputs, n * sizeof *p);
        memcpy(p + n, targets, n * sizeof *p);
        sg_exec_release(x, b);
        return SG_OK;
    }
    return SG_EINVAL;
}

int sg_exec_loss_scaler(sg_exec *x, sg_loss_scaler_state *s)
{
    const sg_graph *g = x->graph;
    for (int b = 0; b < g->nbuffers; b++) {
        if (g->buffers[b].role != SG_BUF_LOSS_SCALER_STATE)
            continue;
        if (g->buffers[b].bytes != (int64_t)sizeof *s)
            return SG_EINVAL;
        const void *p = sg_exec_acquire(x, b, 0);
        if (!p)
            return SG_EINVAL;
        memcpy(s, p, sizeof *s);
        sg_exec_release(x, b);
        return 1;
    }
    return 0;
}

int sg_exec_losses(sg_exec *x, float *losses)
{
    const sg_graph *g = x->graph;
    for (int b = 0; b < g->nbuffers; b++) {
        if (g->buffers[b].role != SG_BUF_LOSS)
            continue;
        float *p = sg_exec_acquire(x, b, 0);
        if (!p)
            return SG_EINVAL;
        /* batch tiles: each holds its share of the micro-step's mean loss;
         * they are declared in tile order, so the sum is in a fixed order */
        const sg_buffer *lb = &g->buffers[b];
        if (lb->tile <= 0)
            losses[lb->micro_step] = p[0];
        else
            losses[lb->micro_step] += p[0];
        sg_exec_release(x, b);
    }
    return SG_OK;
}

double sg_exec_grad_norm(sg_exec *x)
{
    const sg_graph *g = x->graph;
    for (int b = 0; b < g->nbuffers; b++) {
        if (g->buffers[b].role != SG_BUF_GRAD_NORM)
            continue;
        float *p = sg_exec_acquire(x, b, 0);
        if (!p)
            return NAN;
        double v = p[0];
        sg_exec_release(x, b);
        return v;
    }
    return NAN;
}

/* The first buffer of a role, or -1 if the graph has none. */
static int find_role(const sg_graph *g, sg_buf_role role)
{
    for (int b = 0; b < g->nbuffers; b++)
        if (g->buffers[b].role == role)
            return b;
    return -1;
}

int sg_exec_step_outcome(sg_exec *x, int *skipped, int *rollbacks, int *spec_would_fail)
{
    const sg_graph *g = x->graph, *ran = sg_exec_last_graph(x);
    *skipped = *rollbacks = *spec_would_fail = 0;
    int ov = find_role(g, SG_BUF_OVERFLOW), nb = find_role(g, SG_BUF_GRAD_NORM);
    if (ov >= 0) {
        const int32_t *p = sg_exec_acquire(x, ov, 0);
        if (!p)
            return SG_EINVAL;
        *skipped = p[0] != 0;
        sg_exec_release(x, ov);
    }
    if (nb < 0)
        return SG_OK;
    const float *norm = sg_exec_acquire(x, nb, 0);
    if (!norm)
        return SG_EINVAL;
    *spec_would_fail = sg_adam_speculation_fails(norm, *skipped, x->shared.step.clip);
    sg_exec_release(x, nb);
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

int sg_exec_overlap(const sg_exec *x, sg_overlap *out)
{
    return sg_starpu_overlap(sg_exec_last_graph(x), sg_exec_last_records(x), out);
}

void sg_exec_worker_counts(int *ncpu, int *ncuda)
{
    *ncpu = (int)starpu_cpu_worker_get_count();
    *ncuda = (int)starpu_cuda_worker_get_count();
}
