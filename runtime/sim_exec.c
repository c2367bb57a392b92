/* sim_exec.c - one step graph simulated by StarPU-SimGrid (sim_exec.h). */
#include "runtime/sim_exec.h"

#include <math.h>
#include "runtime/starpu_include.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/sim_cost.h"
#include "runtime/starpu_setup.h"
#include "runtime/step_trace.h"

typedef struct sim_state sim_state;

/* A task's cl_arg: its node, for the cost function and the callback. */
typedef struct sim_task {
    const sim_state *st;
    int node;
} sim_task;

struct sim_state {
    const sg_graph *graph;
    const sg_machine *machine;
    sg_sim_costs costs;
    struct starpu_perfmodel models[SG_OP_KIND_COUNT];
    struct starpu_codelet codelets[SG_OP_KIND_COUNT];
    char symbols[SG_OP_KIND_COUNT][48];
    starpu_data_handle_t *handles;
    sim_task *tasks;
    sg_task_record *records;
    sg_sched_split split;
    unsigned cuda_node;           /* memory node of the first GPU */
    int ncuda;
};

/* SimGrid accounts for a task's time from its performance model and never
 * calls its functions. */
static void never_runs(void *buffers[], void *arg)
{
    (void)buffers;
    (void)arg;
}

static double roofline_us(struct starpu_task *task, struct starpu_perfmodel_arch *arch,
                          unsigned nimpl)
{
    (void)nimpl;
    const sim_task *t = task->cl_arg;
    sg_sim_arch a = arch->devices[0].type == STARPU_CUDA_WORKER ? SG_SIM_GPU : SG_SIM_CPU;
    return 1e6 * sg_sim_node_seconds(&t->st->costs, &t->st->graph->nodes[t->node], a);
}

static void init_codelets(sim_state *st, int calibrated)
{
    for (int k = 0; k < SG_OP_KIND_COUNT; k++) {
        struct starpu_perfmodel *pm = &st->models[k];
        struct starpu_codelet *cl = &st->codelets[k];
        /* the symbols of the real codelets (codelets/starpu/codelets.c), so
         * a calibrated machine's history models are found */
        snprintf(st->symbols[k], sizeof st->symbols[k], "sg_%s", sg_op_kind_name((sg_op_kind)k));
        memset(pm, 0, sizeof *pm);
        pm->symbol = st->symbols[k];
        if (calibrated) {
            pm->type = STARPU_HISTORY_BASED;
        } else {
            pm->type = STARPU_PER_ARCH;
            pm->arch_cost_function = roofline_us;
        }
        starpu_codelet_init(cl);
        cl->cpu_funcs[0] = never_runs;
        cl->cuda_funcs[0] = never_runs;
        cl->cuda_flags[0] = STARPU_CUDA_ASYNC;
        cl->nbuffers = STARPU_VARIABLE_NBUFFERS;
        cl->model = pm;
        cl->name = st->symbols[k];
    }
}

static int start(sim_state *st, const sg_machine *m, const sg_sim_options *opt, sg_error *err)
{
    struct starpu_conf conf;
    starpu_conf_init(&conf);
    conf.sched_policy_name = opt->sched;
    /* one core drives each GPU, as on the real machine */
    conf.ncuda = m->gpu_count;
    conf.ncpus = m->cpu_cores - m->gpu_count > 0 ? m->cpu_cores - m->gpu_count : 1;
    conf.nopencl = 0;
    int rc = starpu_init(&conf);
    if (rc)
        return sg_error_set(err, SG_EINVAL, "starpu_init (SimGrid) failed (%d)", rc);
    starpu_profiling_status_set(STARPU_PROFILING_ENABLE);
    st->ncuda = (int)starpu_cuda_worker_get_count();
    if (st->ncuda) {
        int w = starpu_worker_get_by_type(STARPU_CUDA_WORKER, 0);
        st->cuda_node = starpu_worker_get_memory_node((unsigned)w);
    }
    return SG_OK;
}

static int register_buffers(sim_state *st, sg_error *err)
{
    const sg_graph *g = st->graph;
    st->handles = calloc((size_t)(g->nbuffers > 0 ? g->nbuffers : 1), sizeof *st->handles);
    if (!st->handles)
        return sg_error_set(err, SG_ENOMEM, "out of memory");
    /* Persistent and host buffers exist before the step: registered at home
     * with addresses SimGrid never dereferences, distinct per buffer. */
    uintptr_t next[2] = {(uintptr_t)1 << 24, (uintptr_t)1 << 24};
    for (int b = 0; b < g->nbuffers; b++) {
        const sg_buffer *buf = &g->buffers[b];
        size_t esize = sg_dtype_size(buf->dtype);
        uint32_t n = (uint32_t)(buf->elems > 0 ? buf->elems : 1);
        if ((int64_t)n != (buf->elems > 0 ? buf->elems : 1))
            return sg_error_set(err, SG_ENOTSUP, "buffer %s has %lld elements (at most 2^32)",
                                buf->name, (long long)buf->elems);
        int on_gpu = st->ncuda && buf->space == SG_MEM_GPU;
        if (buf->persistent || buf->space == SG_MEM_HOST) {
            int home = on_gpu ? (int)st->cuda_node : STARPU_MAIN_RAM;
            starpu_vector_data_register(&st->handles[b], home, next[on_gpu], n, esize);
            next[on_gpu] += ((uintptr_t)n * esize + 4095) & ~(uintptr_t)4095;
        } else {
            starpu_vector_data_register(&st->handles[b], -1, 0, n, esize);
        }
        starpu_data_set_name(st->handles[b], buf->name);
    }
    return SG_OK;
}

static void record_task(void *arg)
{
    const sim_task *t = arg;
    struct starpu_task *task = starpu_task_get_current();
    if (!task || !task->profiling_info)
        return;
    sg_task_record *r = &t->st->records[t->node];
    r->worker = task->profiling_info->workerid;
    r->start_us = starpu_timing_timespec_to_us(&task->profiling_info->start_time);
    r->end_us = starpu_timing_timespec_to_us(&task->profiling_info->end_time);
}

static int submit(sim_state *st, int i, int priorities, sg_error *err)
{
    const sg_node *nd = &st->graph->nodes[i];
    struct starpu_data_descr *d = malloc((size_t)(nd->naccess > 0 ? nd->naccess : 1) * sizeof *d);
    if (!d)
        return sg_error_set(err, SG_ENOMEM, "out of memory");
    int n = 0;
    for (int a = 0; a < nd->naccess; a++) {
        int b = nd->access[a].buffer, s;
        for (s = 0; s < n && d[s].handle != st->handles[b]; s++)
            ;
        if (s == n) {
            d[n].handle = st->handles[b];
            d[n++].mode = 0;
        }
        sg_access_mode m = nd->access[a].mode;
        d[s].mode |= (m & SG_R ? STARPU_R : 0) | (m & SG_W ? STARPU_W : 0);
    }
    st->records[i].worker = -1;
    st->tasks[i] = (sim_task){st, i};
    int rc = starpu_task_insert(&st->codelets[nd->kind], STARPU_DATA_MODE_ARRAY, d, n,
                                STARPU_CL_ARGS_NFREE, &st->tasks[i], sizeof st->tasks[i],
                                STARPU_NAME, nd->name, STARPU_EXECUTE_WHERE,
                                (unsigned long long)sg_starpu_where(nd, st->ncuda > 0), STARPU_PRIORITY,
                                priorities ? (int)nd->priority : 0,
                                STARPU_CALLBACK_WITH_ARG_NFREE, record_task, &st->tasks[i],
                                STARPU_SCHED_CTX, sg_starpu_ctx_for(&st->split, nd), 0);
    free(d);
    if (rc)
        return sg_error_set(err, SG_EINVAL, "cannot submit task %s (%d)", nd->name, rc);
    return SG_OK;
}

static int run_step(sim_state *st, int priorities, double *seconds, sg_error *err)
{
    const sg_graph *g = st->graph;
    double t0 = starpu_timing_now();
    int rc = SG_OK;
    for (int i = 0; i < g->nnodes && !rc; i++)
        rc = submit(st, i, priorities, err);
    for (int b = 0; b < g->nbuffers; b++)
        if (!g->buffers[b].persistent)
            starpu_data_invalidate_submit(st->handles[b]);
    starpu_task_wait_for_all();
    *seconds = (starpu_timing_now() - t0) * 1e-6;
    return rc;
}

static void reset_bus_counters(void)
{
    for (int b = 0; b < starpu_bus_get_count(); b++)
        starpu_bus_get_profiling_info(b, NULL);
}

static void read_links(const sim_state *st, sg_sim_result *res)
{
    const sg_machine *m = st->machine;
    for (int b = 0; b < starpu_bus_get_count(); b++) {
        struct starpu_profiling_bus_info info;
        starpu_bus_get_profiling_info(b, &info);
        int src = starpu_bus_get_src(b), dst = starpu_bus_get_dst(b);
        int src_gpu = starpu_node_get_kind((unsigned)src) == STARPU_CUDA_RAM;
        int dst_gpu = starpu_node_get_kind((unsigned)dst) == STARPU_CUDA_RAM;
        sg_link_dir l = src_gpu && dst_gpu ? SG_LINK_NET
                        : dst_gpu          ? SG_LINK_H2D
                        : src_gpu          ? SG_LINK_D2H : SG_LINK_NONE;
        if (l == SG_LINK_NONE)
            continue;
        double gbs = l == SG_LINK_H2D ? m->h2d_gbs : l == SG_LINK_D2H ? m->d2h_gbs : m->gpu_gpu_gbs;
        res->link_bytes[l] += (int64_t)info.transferred_bytes;
        res->link_transfers[l] += info.transfer_count;
        res->link_s[l] += (double)info.transferred_bytes / (gbs * 1e9) +
                          info.transfer_count * m->latency_us * 1e-6;
    }
}

/* Copy nodes: when their source crossed the link, estimated as the bytes
 * they read from the other side's memory at the link's bandwidth, ending as
 * the task starts (StarPU fetches a task's data just before it runs unless
 * it prefetched earlier). */
static void link_spans(const sim_state *st, sg_task_record *spans)
{
    const sg_graph *g = st->graph;
    const sg_machine *m = st->machine;
    for (int i = 0; i < g->nnodes; i++) {
        const sg_node *nd = &g->nodes[i];
        const sg_task_record *r = &st->records[i];
        spans[i].worker = -1;
        if (!st->ncuda || r->worker < 0 || (nd->kind != SG_OP_D2H && nd->kind != SG_OP_H2D))
            continue;
        sg_mem_space from = nd->kind == SG_OP_D2H ? SG_MEM_GPU : SG_MEM_HOST;
        double bytes = 0;
        for (int a = 0; a < nd->naccess; a++)
            if ((nd->access[a].mode & SG_R) && g->buffers[nd->access[a].buffer].space == from)
                bytes += (double)g->buffers[nd->access[a].buffer].bytes;
        double gbs = nd->kind == SG_OP_D2H ? m->d2h_gbs : m->h2d_gbs;
        double us = m->latency_us + bytes / (gbs * 1e3);
        spans[i] = (sg_task_record){r->worker, r->start_us - us, r->start_us};
    }
}

static int write_trace(const sim_state *st, const char *path, double t0_us, sg_error *err)
{
    int nw = (int)starpu_worker_get_count();
    char (*names)[64] = calloc((size_t)nw, sizeof *names);
    const char **ptrs = calloc((size_t)nw, sizeof *ptrs);
    sg_task_record *spans = calloc((size_t)(st->graph->nnodes + 1), sizeof *spans);
    int rc = (!names || !ptrs || !spans) ? sg_error_set(err, SG_ENOMEM, "out of memory") : SG_OK;
    for (int w = 0; w < nw && !rc; w++) {
        starpu_worker_get_name(w, names[w], sizeof names[w]);
        ptrs[w] = names[w];
    }
    if (!rc) {
        link_spans(st, spans);
        sg_step_view v = {.graph = st->graph, .records = st->records, .nworkers = nw,
                          .worker_names = ptrs, .t0_us = t0_us, .link_spans = spans};
        rc = sg_step_trace_write(&v, path, err);
    }
    free(names);
    free(ptrs);
    free(spans);
    return rc;
}

/* CPU tasks expected to stream memory at once: the CPU optimizer tasks of a
 * step, at most one per CPU worker that may run them. */
static int cpu_streams(const sg_graph *g, const sg_machine *m, double share)
{
    int n = 0;
    for (int i = 0; i < g->nnodes; i++)
        n += g->nodes[i].kind == SG_OP_ADAM_CPU;
    int workers = m->cpu_cores - m->gpu_count;
    if (share > 0 && (int)floor(share * workers + 1e-9) >= 1)
        workers = (int)floor(share * workers + 1e-9);
    return n < workers ? n : workers;
}

int sg_sim_run(const sg_machine *m, const sg_step_spec *spec, const sg_graph *g,
               const sg_sim_options *opt, sg_sim_result *res, sg_error *err)
{
    memset(res, 0, sizeof *res);
    sim_state *st = calloc(1, sizeof *st);
    if (!st)
        return sg_error_set(err, SG_ENOMEM, "out of memory");
    st->graph = g;
    st->machine = m;
    sg_sim_costs_init(&st->costs, m, spec->compute_dtype, (int)spec->dp_size,
                      cpu_streams(g, m, opt->optimizer_cores_share));
    init_codelets(st, m->calibration_dir[0] != '\0');
    size_t nn = (size_t)(g->nnodes > 0 ? g->nnodes : 1);
    st->tasks = calloc(nn, sizeof *st->tasks);
    st->records = calloc(nn, sizeof *st->records);
    int rc = (!st->tasks || !st->records) ? sg_error_set(err, SG_ENOMEM, "out of memory")
                                          : sg_starpu_check_policy(opt->sched, err);
    int started = 0;
    if (!rc && !(rc = start(st, m, opt, err)))
        started = 1;
    if (!rc)
        rc = register_buffers(st, err);
    if (!rc && sg_starpu_split_workers(&st->split, opt->optimizer_cores_share, opt->sched))
        rc = sg_error_set(err, SG_ENOMEM, "out of memory");
    double t0 = 0;
    for (int s = 0; s < opt->steps && !rc; s++) {
        if (s == opt->steps - 1) {
            reset_bus_counters();
            t0 = starpu_timing_now();
        }
        rc = run_step(st, opt->priorities, &res->step_s, err);
    }
    if (!rc) {
        res->ncpu = (int)starpu_cpu_worker_get_count();
        res->ncuda = st->ncuda;
        read_links(st, res);
        if (sg_starpu_overlap(st->graph, st->records, &res->stats))
            rc = sg_error_set(err, SG_ENOMEM, "out of memory");
    }
    if (!rc && opt->trace_path)
        rc = write_trace(st, opt->trace_path, t0, err);
    if (started) {
        starpu_task_wait_for_all();
        for (int b = 0; st->handles && b < g->nbuffers; b++)
            if (st->handles[b])
                starpu_data_unregister_no_coherency(st->handles[b]);
        sg_starpu_split_free(&st->split);
        starpu_shutdown();
    }
    free(st->handles);
    free(st->tasks);
    free(st->records);
    free(st);
    return rc;
}
