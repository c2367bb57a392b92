/* exec.c - lowering the step graph to StarPU handles and tasks (exec.h). */
#include "runtime/exec.h"

#include <math.h>
#include <starpu.h>
#include <starpu_profiling.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cblas.h>

#include "codelets/starpu/codelets.h"
#include "runtime/binding.h"
#include "runtime/starpu_info.h"
#include "runtime/starpu_setup.h"
#ifdef SG_STARPU_CUDA
#include "runtime/exec_cuda.h"
#endif

#define H(x, b) ((starpu_data_handle_t)(x)->handles[b])

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

static int register_buffers(sg_exec *x, sg_error *err)
{
    const sg_graph *g = x->graph;
    x->handles = calloc((size_t)g->nbuffers, sizeof(void *));
    x->memory = calloc((size_t)g->nbuffers, sizeof(void *));
    if (!x->handles || !x->memory)
        return sg_error_set(err, SG_ENOMEM, "out of memory");
    for (int b = 0; b < g->nbuffers; b++) {
        const sg_buffer *buf = &g->buffers[b];
        size_t esize = sg_dtype_size(buf->dtype);
        uint32_t n = (uint32_t)(buf->elems > 0 ? buf->elems : 1);
        if ((int64_t)n != (buf->elems > 0 ? buf->elems : 1))
            return sg_error_set(err, SG_ENOTSUP, "buffer %s has %lld elements (at most 2^32)",
                                buf->name, (long long)buf->elems);
        starpu_data_handle_t h;
        if (buf->persistent || buf->space == SG_MEM_HOST) {
            /* state and host buffers: our memory (pinned when a GPU is there) */
            if (starpu_malloc(&x->memory[b], (size_t)n * esize))
                return sg_error_set(err, SG_ENOMEM, "cannot allocate %s (%lld bytes)", buf->name,
                                    (long long)buf->bytes);
            memset(x->memory[b], 0, (size_t)n * esize);
            starpu_vector_data_register(&h, STARPU_MAIN_RAM, (uintptr_t)x->memory[b], n, esize);
        } else {
            /* step-local: StarPU allocates it where it is first written */
            starpu_vector_data_register(&h, -1, 0, n, esize);
        }
        starpu_data_set_name(h, buf->name);
        x->handles[b] = h;
    }
    return SG_OK;
}

/* Per node: its accesses merged per buffer (a task lists a handle once). */
static int build_contexts(sg_exec *x, sg_error *err)
{
    const sg_graph *g = x->graph;
    size_t total = 0;
    for (int i = 0; i < g->nnodes; i++)
        total += (size_t)g->nodes[i].naccess;
    size_t nnodes = g->nnodes > 0 ? (size_t)g->nnodes : 1;
    x->ctx = calloc(nnodes, sizeof *x->ctx);
    x->slot_buffer = malloc((total + 1) * sizeof(int));
    x->slot_mode = malloc((total + 1) * sizeof(sg_access_mode));
    x->records = calloc(nnodes, sizeof *x->records);
    if (!x->ctx || !x->slot_buffer || !x->slot_mode || !x->records)
        return sg_error_set(err, SG_ENOMEM, "out of memory");
    size_t at = 0;
    for (int i = 0; i < g->nnodes; i++) {
        const sg_node *nd = &g->nodes[i];
        sg_task_ctx *c = &x->ctx[i];
        c->shared = &x->shared;
        c->node = i;
        c->slot_buffer = x->slot_buffer + at;
        c->slot_mode = x->slot_mode + at;
        for (int a = 0; a < nd->naccess; a++) {
            int b = nd->access[a].buffer, s;
            for (s = 0; s < c->nslots && c->slot_buffer[s] != b; s++)
                ;
            if (s == c->nslots) {
                c->slot_buffer[s] = b;
                c->slot_mode[s] = 0;
                c->nslots++;
            }
            c->slot_mode[s] |= nd->access[a].mode;
        }
        at += (size_t)c->nslots;
    }
    x->shared.records = x->records;
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
    if ((rc = start_starpu(x, opt, err)) || (rc = register_buffers(x, err)) ||
        (rc = build_contexts(x, err)))
        return rc;
#ifdef SG_STARPU_CUDA
    if ((rc = sg_exec_cuda_init(&x->shared, err)))
        return rc;
    x->have_cuda = starpu_cuda_worker_get_count() > 0;
#else
    /* no CUDA codelets in this build: CUDA workers (if StarPU has them) idle */
    x->have_cuda = 0;
#endif
    double share = spec->offload_optimizer ? opt->optimizer_cores_share : 0;
    if (sg_starpu_split_workers(&x->split, share, opt->sched))
        return sg_error_set(err, SG_ENOMEM, "out of memory");
    return SG_OK;
}

void sg_exec_shutdown(sg_exec *x)
{
    if (x->started) {
        starpu_task_wait_for_all();
#ifdef SG_STARPU_CUDA
        sg_exec_cuda_shutdown(&x->shared);
#endif
        for (int b = 0; x->handles && b < x->graph->nbuffers; b++)
            if (x->handles[b])
                starpu_data_unregister(H(x, b));
        for (int b = 0; x->memory && b < x->graph->nbuffers; b++)
            if (x->memory[b])
                starpu_free_noflag(x->memory[b], (size_t)(x->graph->buffers[b].elems > 0
                                                              ? x->graph->buffers[b].elems : 1) *
                                                     sg_dtype_size(x->graph->buffers[b].dtype));
        sg_starpu_split_free(&x->split);
        starpu_shutdown();
    }
    sg_rope_cache_free(&x->shared.rope);
    free(x->handles);
    free(x->memory);
    free(x->ctx);
    free(x->slot_buffer);
    free(x->slot_mode);
    free(x->records);
    memset(x, 0, sizeof *x);
}

/* ---- one step ------------------------------------------------------------- */

static void record_task(void *arg)
{
    const sg_task_ctx *c = arg;
    struct starpu_task *t = starpu_task_get_current();
    sg_task_record *r = &c->shared->records[c->node];
    if (!t || !t->profiling_info)
        return;
    r->worker = t->profiling_info->workerid;
    r->start_us = starpu_timing_timespec_to_us(&t->profiling_info->start_time);
    r->end_us = starpu_timing_timespec_to_us(&t->profiling_info->end_time);
}

static enum starpu_data_access_mode starpu_mode(sg_access_mode m)
{
    return m == SG_R ? STARPU_R : m == SG_W ? STARPU_W : STARPU_RW;
}

static int submit_node(sg_exec *x, int i, sg_error *err)
{
    const sg_node *nd = &x->graph->nodes[i];
    sg_task_ctx *c = &x->ctx[i];
    struct starpu_data_descr *d = malloc((size_t)(c->nslots ? c->nslots : 1) * sizeof *d);
    if (!d)
        return sg_error_set(err, SG_ENOMEM, "out of memory");
    for (int s = 0; s < c->nslots; s++) {
        d[s].handle = H(x, c->slot_buffer[s]);
        d[s].mode = starpu_mode(c->slot_mode[s]);
    }
    unsigned sched_ctx = sg_starpu_ctx_for(&x->split, nd);
    x->records[i].worker = -1;
    int rc = starpu_task_insert(sg_codelet_for(nd->kind), STARPU_DATA_MODE_ARRAY, d, c->nslots,
                                STARPU_CL_ARGS_NFREE, c, sizeof *c, STARPU_NAME, nd->name,
                                STARPU_EXECUTE_WHERE,
                                (unsigned long long)sg_starpu_where(nd, x->have_cuda),
                                STARPU_PRIORITY, (int)nd->priority,
                                STARPU_CALLBACK_WITH_ARG_NFREE, record_task, c,
                                STARPU_SCHED_CTX, sched_ctx, 0);
    free(d);
    if (rc)
        return sg_error_set(err, SG_EINVAL, "cannot submit task %s (%d)", nd->name, rc);
    return SG_OK;
}

/* Buffers whose value the trainer reads after the step stay; the others'
 * replicas are dropped so that step-local memory is freed between steps. */
static int kept_after_step(const sg_buffer *b)
{
    return b->persistent || b->role == SG_BUF_LOSS || b->role == SG_BUF_GRAD_NORM ||
           b->role == SG_BUF_OVERFLOW;
}

int sg_exec_run_step(sg_exec *x, sg_error *err)
{
    const sg_graph *g = x->graph;
    x->shared.failed = 0;
    x->shared.adam_skipped = 0;
    x->shared.rollbacks = 0;
    double t0 = now_seconds();
    x->step_start_us = starpu_timing_now();
    int rc = SG_OK;
    for (int i = 0; i < g->nnodes && !rc; i++)
        rc = submit_node(x, i, err);
    for (int b = 0; b < g->nbuffers; b++)
        if (!kept_after_step(&g->buffers[b]))
            starpu_data_invalidate_submit(H(x, b));
    starpu_task_wait_for_all();
    x->step_seconds = now_seconds() - t0;
    if (rc)
        return rc;
    if (x->shared.failed)
        return sg_error_set(err, x->shared.failed, "%s", x->shared.fail_msg);
    return SG_OK;
}

/* ---- host access to buffers ---------------------------------------------- */

static void *acquire(sg_exec *x, int b, enum starpu_data_access_mode mode)
{
    starpu_data_acquire(H(x, b), mode);
    return (void *)starpu_data_get_local_ptr(H(x, b));
}

static void release(sg_exec *x, int b)
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
        int32_t *p = acquire(x, b, STARPU_W);
        memcpy(p, inputs, n * sizeof *p);
        memcpy(p + n, targets, n * sizeof *p);
        release(x, b);
        return SG_OK;
    }
    return SG_EINVAL;
}

int sg_exec_losses(sg_exec *x, float *losses)
{
    const sg_graph *g = x->graph;
    for (int b = 0; b < g->nbuffers; b++) {
        if (g->buffers[b].role != SG_BUF_LOSS)
            continue;
        float *p = acquire(x, b, STARPU_R);
        losses[g->buffers[b].micro_step] = p[0];
        release(x, b);
    }
    return SG_OK;
}

double sg_exec_grad_norm(sg_exec *x)
{
    const sg_graph *g = x->graph;
    for (int b = 0; b < g->nbuffers; b++) {
        if (g->buffers[b].role != SG_BUF_GRAD_NORM)
            continue;
        float *p = acquire(x, b, STARPU_R);
        double v = p[0];
        release(x, b);
        return v;
    }
    return NAN;
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
    return sg_starpu_overlap(x->graph, x->records, out);
}

void sg_exec_worker_counts(int *ncpu, int *ncuda)
{
    *ncpu = (int)starpu_cpu_worker_get_count();
    *ncuda = (int)starpu_cuda_worker_get_count();
}
