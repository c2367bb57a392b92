/* sim_exec.c - one step graph simulated by StarPU-SimGrid (sim_exec.h). */
#include "runtime/sim/sim_exec.h"

#include <math.h>
#include "runtime/exec/starpu_include.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/exec/lower.h"
#include "runtime/sim/sim_cost.h"
#include "runtime/sim/sim_costfit.h"
#include "runtime/sim/sim_disk.h"
#include "runtime/sim/sim_share.h"
#include "runtime/exec/starpu_setup.h"
#include "runtime/trace/step_trace.h"

/* Tasks' cl_args are the lowering's sg_task_ctx (lower.h), whose shared
 * state is the first member of sim_state: the cost function finds the
 * machine's costs through it. */
#define SG_SIM_MAX_LOOKAHEAD 64

typedef struct sim_state {
    sg_exec_shared shared; /* first: cl_arg->shared points here */
    const sg_graph *graph;
    const sg_machine *machine;
    sg_sim_costs costs;
    struct starpu_perfmodel models[SG_OP_KIND_COUNT];
    struct starpu_codelet codelets[SG_OP_KIND_COUNT];
    void *codelet_ptrs[SG_OP_KIND_COUNT];
    sg_lowering low;
    const sg_task_record *last; /* the last step's task records */
    int ncuda;
    /* the dynamic bandwidth share (sim_share.h): the streams running now */
    int shared_bw;
    sg_bw_pool pool;
    sg_bw_stream **active;
    sg_bw_stream *scratch;
    int nactive, maxactive;
    /* --cost fitted on a calibrated machine: the CPU history fitted per kind */
    int fitted;
    sg_cost_fit fits[SG_COST_DEVICES][SG_OP_KIND_COUNT];
    /* ZeRO-Infinity's disk (sim_disk.h): the kinds whose tasks read or write it */
    sg_sim_disk disk;
    unsigned char disk_kind[SG_OP_KIND_COUNT];
} sim_state;

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
    const sg_task_ctx *c = task->cl_arg;
    const sim_state *st = (const sim_state *)c->shared;
    sg_sim_arch a = arch->devices[0].type == STARPU_CUDA_WORKER ? SG_SIM_GPU : SG_SIM_CPU;
    return 1e6 * sg_sim_node_seconds(&st->costs, &st->graph->nodes[c->node], a);
}

/* ---- the dynamic bandwidth share ----------------------------------------
 * With it, a roofline task's codelet function runs in simulated time
 * (STARPU_CODELET_SIMGRID_EXECUTE) and advances the clock with starpu_sleep
 * in slices: each slice streams at the task's current share of its memory's
 * bandwidth (every stream's share is recomputed whenever one starts or
 * ends), so a task slows down while others stream beside it and speeds up
 * when they end. A sleeping task sees a new share at its next slice; a
 * slice is at most an eighth of the task's time alone. SimGrid runs one simulated thread at a time: the list of streams
 * needs no lock. */
#define SHARE_SLICES 8

static void share_rates(sim_state *st)
{
    for (int i = 0; i < st->nactive; i++)
        st->scratch[i] = *st->active[i];
    sg_bw_share(&st->pool, st->scratch, st->nactive);
    for (int i = 0; i < st->nactive; i++)
        st->active[i]->rate = st->scratch[i].rate;
}

static void stream_join(sim_state *st, sg_bw_stream *s)
{
    if (st->nactive < st->maxactive)
        st->active[st->nactive++] = s;
    share_rates(st);
}

static void stream_leave(sim_state *st, const sg_bw_stream *s)
{
    for (int i = 0; i < st->nactive; i++)
        if (st->active[i] == s) {
            st->active[i] = st->active[--st->nactive];
            break;
        }
    share_rates(st);
}

static void stream_body(sim_state *st, const sg_task_ctx *c)
{
    const sg_node *nd = &st->graph->nodes[c->node];
    sg_sim_arch a = starpu_worker_get_type(starpu_worker_get_id()) == STARPU_CUDA_WORKER
                        ? SG_SIM_GPU
                        : SG_SIM_CPU;
    sg_sim_demand d;
    sg_sim_node_demand(&st->costs, nd, a, &d);
    if (d.bytes <= 0) {
        starpu_sleep((float)(d.fixed_s + d.compute_s));
        return;
    }
    /* it draws at most what its compute rate consumes */
    sg_bw_stream s = {.cpu = a == SG_SIM_CPU, .cap = d.alone_bw, .rate = d.alone_bw};
    if (d.compute_s > 0 && d.bytes / d.compute_s < s.cap)
        s.cap = d.bytes / d.compute_s;
    double alone_s = d.bytes / s.cap, slice = alone_s / SHARE_SLICES, left = d.bytes;
    stream_join(st, &s);
    while (left > 0) {
        double rate = s.rate > 0 ? s.rate : s.cap * 1e-6;
        double dt = left / rate;
        if (dt > slice * 1.0001) {
            dt = slice;
            left -= rate * dt;
        } else {
            left = 0;
        }
        starpu_sleep((float)dt); /* joins and leaves meanwhile updated s.rate */
    }
    stream_leave(st, &s);
    starpu_sleep((float)d.fixed_s);
}

static void stream_task(void *buffers[], void *arg)
{
    (void)buffers;
    const sg_task_ctx *c = arg;
    stream_body((sim_state *)c->shared, c);
}

/* A task of a kind that reads or writes ZeRO-Infinity's disk (sim_disk.h),
 * run in simulated time: it waits for its reads, works (streaming at its
 * share of the bandwidth, or for its performance model's time), then for
 * its write-back. */
static void disk_task(void *buffers[], void *arg)
{
    (void)buffers;
    const sg_task_ctx *c = arg;
    sim_state *st = (sim_state *)c->shared;
    double now = starpu_timing_now() * 1e-6;
    double ready = sg_sim_disk_begin(&st->disk, c->node, now);
    if (ready > now)
        starpu_sleep((float)(ready - now));
    int worker = starpu_worker_get_id();
    int cuda = starpu_worker_get_type(worker) == STARPU_CUDA_WORKER;
    int calibrated = st->machine->calibration_dir[0] != '\0';
    if (st->shared_bw && !calibrated && (!cuda || st->machine->unified_memory)) {
        stream_body(st, c);
    } else {
        struct starpu_task *task = starpu_task_get_current();
        struct starpu_perfmodel_arch *arch =
            starpu_worker_get_perf_archtype(worker, task->sched_ctx);
        double us = starpu_task_expected_length(task, arch, 0);
        if (us > 0)
            starpu_sleep((float)(us * 1e-6));
    }
    now = starpu_timing_now() * 1e-6;
    double done = sg_sim_disk_end(&st->disk, c->node, now);
    if (done > now)
        starpu_sleep((float)(done - now));
}

/* A calibrated machine's tasks from the fit of its node times on the same
 * device (CPU or GPU), whatever their size; kinds without a fit on that
 * device from the roofline. */
static double fitted_us(struct starpu_task *task, struct starpu_perfmodel_arch *arch,
                        unsigned nimpl)
{
    const sg_task_ctx *c = task->cl_arg;
    const sim_state *st = (const sim_state *)c->shared;
    const sg_node *nd = &st->graph->nodes[c->node];
    int dev = arch->devices[0].type == STARPU_CPU_WORKER ? SG_COST_CPU : SG_COST_GPU;
    const sg_cost_fit *f = &st->fits[dev][nd->kind];
    if (!f->valid)
        return roofline_us(task, arch, nimpl);
    return sg_cost_fit_node_us(f, nd);
}

static void init_codelets(sim_state *st, int calibrated)
{
    for (int k = 0; k < SG_OP_KIND_COUNT; k++) {
        struct starpu_perfmodel *pm = &st->models[k];
        struct starpu_codelet *cl = &st->codelets[k];
        /* the symbols of the real codelets (graph/op_kinds.h), so a
         * calibrated machine's history models are found */
        const char *symbol = sg_op_kind_info_of((sg_op_kind)k)->symbol;
        memset(pm, 0, sizeof *pm);
        pm->symbol = symbol;
        if (calibrated && st->fitted) {
            pm->type = STARPU_PER_ARCH;
            pm->arch_cost_function = fitted_us;
        } else if (calibrated) {
            pm->type = STARPU_HISTORY_BASED;
        } else {
            pm->type = STARPU_PER_ARCH;
            pm->arch_cost_function = roofline_us;
        }
        starpu_codelet_init(cl);
        cl->cpu_funcs[0] = never_runs;
        cl->cuda_funcs[0] = never_runs;
        cl->cuda_flags[0] = STARPU_CUDA_ASYNC;
        if (st->shared_bw && !calibrated) {
            /* CPU tasks stream from the socket; on unified memory GPU tasks
             * from the same pool (run synchronously, so they stream too) */
            cl->flags |= STARPU_CODELET_SIMGRID_EXECUTE;
            cl->cpu_funcs[0] = stream_task;
            if (st->machine->unified_memory) {
                cl->cuda_funcs[0] = stream_task;
                cl->cuda_flags[0] = 0;
            }
        }
        if (st->disk_kind[k]) { /* its tasks wait for the disk in simulated time */
            cl->flags |= STARPU_CODELET_SIMGRID_EXECUTE;
            cl->cpu_funcs[0] = disk_task;
            cl->cuda_funcs[0] = disk_task;
            cl->cuda_flags[0] = 0;
        }
        cl->nbuffers = STARPU_VARIABLE_NBUFFERS;
        cl->model = pm;
        cl->name = symbol;
        st->codelet_ptrs[k] = cl;
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
    return SG_OK;
}

static int run_step(sim_state *st, double *seconds, sg_error *err)
{
    double t0 = starpu_timing_now();
    int rc = sg_lower_submit_step(&st->low, 0, err);
    int wait_rc = starpu_task_wait_for_all();
    *seconds = (starpu_timing_now() - t0) * 1e-6;
    if (!rc && wait_rc)
        rc = sg_error_set(err, SG_EINVAL, "starpu_task_wait_for_all failed (%d)", wait_rc);
    return rc;
}

static void reset_bus_counters(void)
{
    for (int b = 0; b < starpu_bus_get_count(); b++)
        starpu_bus_get_profiling_info(b, NULL);
}

/* Steps in flight, as `stepgraph run --lookahead L` submits them: step s is
 * submitted once step s - L has ended. The last step is measured in steady
 * state: one more step is submitted after it (as a longer run would), and
 * the window runs from the previous step's end to its own (from its
 * submission when it is the only one): its time, the links' bytes (counters
 * reset and read at the window's ends) and, in sg_sim_run, the overlap
 * statistics of every task of the last steps clipped to the window. */
static void read_links(const sim_state *st, sg_sim_result *res);

static int run_in_flight(sim_state *st, int steps, int L, double *seconds, double win[2],
                         sg_sim_result *res, sg_error *err)
{
    int rc = SG_OK, total = steps + 1, mark = steps - 2, marked = 0;
    win[0] = win[1] = 0;
    /* the window opens at the end of step mark (steps >= 2), caught where it
     * is waited for, before its flight is reused */
    for (int s = 0; s < total && !rc; s++) {
        if (s >= L) {
            sg_lower_flight *f = &st->low.flight[(s - L) % L];
            sg_lower_flight_wait(f);
            if (s - L == mark) {
                reset_bus_counters();
                win[0] = f->end_us;
                marked = 1;
            }
        }
        if (steps == 1 && s == 0) {
            reset_bus_counters();
            win[0] = starpu_timing_now();
        }
        rc = sg_lower_submit_step(&st->low, s % L, err);
    }
    if (!rc && steps >= 2 && !marked) {
        sg_lower_flight *f = &st->low.flight[mark % L];
        sg_lower_flight_wait(f);
        reset_bus_counters();
        win[0] = f->end_us;
    }
    sg_lower_flight *last = &st->low.flight[(steps - 1) % L];
    if (!rc) {
        sg_lower_flight_wait(last);
        read_links(st, res);
    }
    int wait_rc = starpu_task_wait_for_all();
    for (int s = total - L > 0 ? total - L : 0; s < total; s++)
        sg_lower_flight_wait(&st->low.flight[s % L]);
    st->last = last->records;
    win[1] = last->end_us;
    *seconds = (win[1] - win[0]) * 1e-6;
    if (!rc && wait_rc)
        rc = sg_error_set(err, SG_EINVAL, "starpu_task_wait_for_all failed (%d)", wait_rc);
    return rc;
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
                        : src_gpu          ? SG_LINK_D2H
                                           : SG_LINK_NONE;
        if (l == SG_LINK_NONE)
            continue;
        double gbs = l == SG_LINK_H2D ? m->h2d_gbs : l == SG_LINK_D2H ? m->d2h_gbs : m->gpu_gpu_gbs;
        res->link_bytes[l] += (int64_t)info.transferred_bytes;
        res->link_transfers[l] += info.transfer_count;
        res->link_s[l] += (double)info.transferred_bytes / (gbs * 1e9) +
                          info.transfer_count * m->latency_us * 1e-6;
    }
}

/* Copy nodes (the copy cost class of graph/op_kinds.h; their link says
 * which way): when their source crossed the link, estimated as the bytes
 * they read from the other side's memory at the link's bandwidth, ending as
 * the task starts (StarPU fetches a task's data just before it runs unless
 * it prefetched earlier). */
static void link_spans(const sim_state *st, sg_task_record *spans)
{
    const sg_graph *g = st->graph;
    const sg_machine *m = st->machine;
    for (int i = 0; i < g->nnodes; i++) {
        const sg_node *nd = &g->nodes[i];
        const sg_task_record *r = &st->last[i];
        spans[i].worker = -1;
        if (!st->ncuda || r->worker < 0 || sg_op_kind_class(nd->kind) != SG_CLASS_COPY)
            continue;
        int d2h = nd->link == SG_LINK_D2H;
        sg_mem_space from = d2h ? SG_MEM_GPU : SG_MEM_HOST;
        double bytes = 0;
        for (int a = 0; a < nd->naccess; a++)
            if ((nd->access[a].mode & SG_R) && g->buffers[nd->access[a].buffer].space == from)
                bytes += (double)g->buffers[nd->access[a].buffer].bytes;
        double gbs = d2h ? m->d2h_gbs : m->h2d_gbs;
        double us = m->latency_us + bytes / (gbs * 1e3);
        spans[i] = (sg_task_record){r->worker, r->start_us - us, r->start_us};
    }
}

static int write_trace(const sim_state *st, const char *path, double t0_us, sg_error *err)
{
    int nw = (int)starpu_worker_get_count();
    char(*names)[64] = calloc((size_t)nw, sizeof *names);
    const char **ptrs = calloc((size_t)nw, sizeof *ptrs);
    sg_task_record *spans = calloc((size_t)(st->graph->nnodes + 1), sizeof *spans);
    int rc = (!names || !ptrs || !spans) ? sg_error_set(err, SG_ENOMEM, "out of memory") : SG_OK;
    for (int w = 0; w < nw && !rc; w++) {
        starpu_worker_get_name(w, names[w], sizeof names[w]);
        ptrs[w] = names[w];
    }
    if (!rc) {
        link_spans(st, spans);
        sg_step_view v = {.graph = st->graph,
                          .records = st->last,
                          .nworkers = nw,
                          .worker_names = ptrs,
                          .t0_us = t0_us,
                          .link_spans = spans,
                          .disk_spans = st->disk.active ? st->disk.spans : NULL};
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
    if (opt->model)
        sg_sim_costs_set_model(&st->costs, opt->model, spec->micro_batch, spec->seq_len);
    st->costs.rollback_passes = opt->rollback_passes;
    st->costs.attention = opt->eager_attention ? SG_ATTENTION_EAGER : SG_ATTENTION_FUSED;
    st->shared.spec = spec;
    st->shared.graph = g;
    st->shared_bw = !opt->static_bandwidth;
    st->fitted = opt->fitted_costs && m->calibration_dir[0] != '\0';
    st->pool = m->unified_memory
                   ? (sg_bw_pool){(m->shared_memory_bw_gbs > 0 ? m->shared_memory_bw_gbs
                                                               : m->gpu_memory_bw_gbs) *
                                      1e9,
                                  m->cpu_memory_bw_gbs * 1e9}
                   : (sg_bw_pool){m->cpu_memory_bw_gbs * 1e9, 0};
    /* the reported step: the last one asked for (with steps in flight one
     * more is submitted after it) */
    int rc = sg_sim_disk_init(&st->disk, g, spec, m, opt->steps, err);
    for (int i = 0; !rc && i < g->nnodes; i++)
        st->disk_kind[g->nodes[i].kind] |= st->disk.read[i] > 0 || st->disk.write[i] > 0;
    init_codelets(st, m->calibration_dir[0] != '\0');
    if (!rc)
        rc = sg_starpu_check_policy(opt->sched, err);
    int started = 0;
    if (!rc && !(rc = start(st, m, opt, err)))
        started = 1;
    if (!rc) {
        st->maxactive = (int)starpu_worker_get_count();
        st->active = calloc((size_t)st->maxactive + 1, sizeof *st->active);
        st->scratch = calloc((size_t)st->maxactive + 1, sizeof *st->scratch);
        if (!st->active || !st->scratch)
            rc = sg_error_set(err, SG_ENOMEM, "out of memory");
    }
    if (!rc && st->fitted) {
        char path[sizeof m->calibration_dir + 32];
        snprintf(path, sizeof path, "%s/node_times.csv", m->calibration_dir);
        rc = sg_cost_fits_load(path, st->fits, err);
        int any = 0;
        for (int d = 0; !rc && d < SG_COST_DEVICES; d++)
            for (int k = 0; k < SG_OP_KIND_COUNT; k++)
                any |= st->fits[d][k].valid;
        if (!rc && !any)
            rc = sg_error_set(err, SG_EINVAL, "--cost fitted: %s holds no task time", path);
    }
    if (!rc) {
        sg_lower_target target = {
            .codelets = st->codelet_ptrs,
            .memory = SG_LOWER_MEMORY_SIMULATED,
            .have_cuda = st->ncuda > 0,
            .priorities = opt->priorities,
            .sched = opt->sched,
            .optimizer_share = opt->optimizer_cores_share,
            .flights = opt->lookahead > 1 ? opt->lookahead : 1,
        };
        rc = sg_lower_init(&st->low, g, &st->shared, &target, err);
    }
    double t0 = 0;
    st->last = st->low.records;
    double win[2] = {0, 0};
    int L = opt->lookahead > 1 ? opt->lookahead : 1;
    if (!rc && L > 1) {
        rc = run_in_flight(st, opt->steps, L, &res->step_s, win, res, err);
        t0 = win[0];
    }
    for (int s = 0; s < opt->steps && !rc && L == 1; s++) {
        if (s == opt->steps - 1) {
            reset_bus_counters();
            t0 = starpu_timing_now();
        }
        rc = run_step(st, &res->step_s, err);
    }
    if (!rc) {
        res->ncpu = (int)starpu_cpu_worker_get_count();
        res->ncuda = st->ncuda;
        if (L == 1)
            read_links(st, res); /* run_in_flight read them at the window's end */
        int ov;
        if (L > 1) {
            const sg_graph *gs[SG_SIM_MAX_LOOKAHEAD];
            const sg_task_record *rs[SG_SIM_MAX_LOOKAHEAD];
            /* the last L steps submitted: the reported one, the one after it */
            int total = opt->steps + 1, n = L < total ? L : total;
            for (int k = 0; k < n && k < SG_SIM_MAX_LOOKAHEAD; k++) {
                gs[k] = st->graph;
                rs[k] = st->low.flight[(total - 1 - k) % L].records;
            }
            ov = sg_starpu_overlap_window(gs, rs,
                                          n < SG_SIM_MAX_LOOKAHEAD ? n : SG_SIM_MAX_LOOKAHEAD,
                                          win[0], win[1], &res->stats);
        } else {
            ov = sg_starpu_overlap(st->graph, st->last, &res->stats);
        }
        if (ov)
            rc = sg_error_set(err, SG_ENOMEM, "out of memory");
    }
    /* steps in flight: the last step's trace starts at its first task */
    for (int i = 0; !rc && L > 1 && i < g->nnodes; i++)
        if (st->last[i].worker >= 0 && st->last[i].start_us < t0)
            t0 = st->last[i].start_us;
    if (!rc)
        sg_sim_disk_totals(&st->disk, &res->disk_read_bytes, &res->disk_write_bytes, &res->disk_s);
    if (!rc && opt->trace_path)
        rc = write_trace(st, opt->trace_path, t0, err);
    if (started) {
        sg_lower_free(&st->low);
        starpu_shutdown();
    }
    free(st->active);
    free(st->scratch);
    sg_sim_disk_free(&st->disk);
    free(st);
    return rc;
}
