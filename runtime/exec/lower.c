/* lower.c - the step graph as StarPU handles and tasks (lower.h). */
#include "runtime/exec/lower.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "codelets/starpu/activity.h"
#include "common/first_touch.h"
#include "common/host_ram.h"
#include "runtime/exec/disk_node.h"
#include "runtime/exec/starpu_include.h"

#define HANDLE(l, b) ((starpu_data_handle_t)(l)->handles[b])
/* counted in StarPU's used memory; pinned where the buffer crosses the link
 * every step (sg_graph_host_pinned) */
#define OUR_MALLOC_FLAGS STARPU_MALLOC_COUNT

/* elements of a buffer as a StarPU vector: at least one, below 2^32 */
static int vector_elems(const sg_buffer *buf, uint32_t *n, sg_error *err)
{
    int64_t want = buf->elems > 0 ? buf->elems : 1;
    *n = (uint32_t)want;
    if ((int64_t)*n != want)
        return sg_error_set(err, SG_ENOTSUP, "buffer %s has %lld elements (at most 2^32)",
                            buf->name, (long long)buf->elems);
    return SG_OK;
}

/* Bytes buffer b's data starts after its allocation: 0, 1, 2 or 3 KiB. */
/* A state buffer StarPU would not give: say what StarPU counted in main memory,
 * since its limit (90% of RAM, or STARPU_LIMIT_CPU_MEM) is what refused it. */
static int state_alloc_error(const sg_buffer *buf, sg_error *err)
{
    starpu_ssize_t total = starpu_memory_get_total(STARPU_MAIN_RAM);
    starpu_ssize_t avail = starpu_memory_get_available(STARPU_MAIN_RAM);
    if (total <= 0)
        return sg_error_set(err, SG_ENOMEM, "cannot allocate %s (%lld bytes): out of memory",
                            buf->name, (long long)buf->bytes);
    /* the RAM the kernel reports now: StarPU read its own figure at start-up */
    double ram_now = sg_host_ram_bytes() / (1 << 20);
    return sg_error_set(err, SG_ENOMEM,
                        "cannot allocate %s (%lld bytes): StarPU counts %.0f of its %.0f MiB of "
                        "main memory in use (its limit: 90%% of RAM at its start, or "
                        "STARPU_LIMIT_CPU_MEM; RAM now: %.0f MiB)",
                        buf->name, (long long)buf->bytes, (double)(total - avail) / (1 << 20),
                        (double)total / (1 << 20), ram_now);
}

static size_t buffer_skew(int b)
{
    return (size_t)(b % 4) * 1024;
}

static unsigned first_cuda_node(void)
{
    int w = starpu_worker_get_by_type(STARPU_CUDA_WORKER, 0);
    return w < 0 ? STARPU_MAIN_RAM : starpu_worker_get_memory_node((unsigned)w);
}

/* The memory node buffer b lives on: its sub-group's NUMA node where the
 * state is placed per node (numa_place.h), else main memory. */
static unsigned home_node(const sg_lowering *l, int b)
{
    int node = l->numa.buffer_node ? l->numa.buffer_node[b] : -1;
    return node >= 0 ? (unsigned)node : STARPU_MAIN_RAM;
}

/* Our memory for buffer b, on its home node (hwloc binds it there when
 * StarPU has several NUMA nodes). */
static int alloc_state(sg_lowering *l, int b, size_t bytes, int flags)
{
    if (!l->numa.buffer_node || l->numa.buffer_node[b] < 0)
        return starpu_malloc_flags(&l->memory[b], bytes, flags);
    l->memory[b] = (void *)starpu_malloc_on_node_flags(home_node(l, b), bytes, flags);
    return l->memory[b] ? 0 : -ENOMEM;
}

static void free_state(sg_lowering *l, int b, size_t bytes, int flags)
{
    if (!l->numa.buffer_node || l->numa.buffer_node[b] < 0)
        starpu_free_flags(l->memory[b], bytes, flags);
    else
        starpu_free_on_node_flags(home_node(l, b), (uintptr_t)l->memory[b], bytes, flags);
}

/* The handle of base's buffer that b can share, NULL if none is named alike;
 * SG_EINVAL if one is named alike but differs. */
static int shared_handle(const sg_lowering *base, const sg_buffer *b, void **h, sg_error *err)
{
    *h = NULL;
    const sg_graph *bg = base->graph;
    for (int i = 0; i < bg->nbuffers; i++) {
        const sg_buffer *o = &bg->buffers[i];
        if (strcmp(o->name, b->name) != 0)
            continue;
        if (o->elems != b->elems || o->dtype != b->dtype || o->space != b->space ||
            o->persistent != b->persistent)
            return sg_error_set(err, SG_EINVAL, "buffer %s differs between the two step graphs",
                                b->name);
        *h = base->handles[i];
        return SG_OK;
    }
    return SG_OK;
}

/* Registers g's buffers; the state buffers it allocates are listed in
 * (touch, touch_bytes, *ntouch) for the caller to zero. */
static int register_each(sg_lowering *l, const sg_lowering *base, const unsigned char *pin,
                         void **touch, size_t *touch_bytes, int *ntouch, sg_error *err)
{
    const sg_graph *g = l->graph;
    int simulated = l->target.memory == SG_LOWER_MEMORY_SIMULATED;
    unsigned gpu_node = simulated && l->target.have_cuda ? first_cuda_node() : STARPU_MAIN_RAM;
    /* simulated addresses, one range per home node, never dereferenced */
    uintptr_t fake_next[2] = {(uintptr_t)1 << 24, (uintptr_t)1 << 24};
    for (int b = 0; b < g->nbuffers; b++) {
        const sg_buffer *buf = &g->buffers[b];
        size_t esize = sg_dtype_size(buf->dtype);
        uint32_t n;
        int rc = vector_elems(buf, &n, err);
        if (!rc && base)
            rc = shared_handle(base, buf, &l->handles[b], err);
        if (rc)
            return rc;
        if (l->handles[b])
            continue;
        starpu_data_handle_t h;
        if (l->target.disk &&
            sg_disk_homes(l->target.disk->optimizer, l->target.disk->params, buf)) {
            /* NVMe offload: the home copy is a file of the disk node */
            if ((rc = sg_disk_register_vector(l->target.disk, &l->handles[b], n, esize, buf->name,
                                              err)))
                return rc;
            starpu_data_set_name(HANDLE(l, b), buf->name);
            l->owned[b] = 1 | SG_OWNED_DISK;
            continue;
        }
        if (!buf->persistent && (buf->space != SG_MEM_HOST || !simulated)) {
            /* step-local: StarPU allocates it where it is first written and
             * frees it when the value dies (sg_graph_liveness) */
            starpu_vector_data_register(&h, -1, 0, n, esize);
        } else if (simulated) {
            int on_gpu = gpu_node != STARPU_MAIN_RAM && buf->space == SG_MEM_GPU;
            starpu_vector_data_register(&h, on_gpu ? (int)gpu_node : STARPU_MAIN_RAM,
                                        fake_next[on_gpu], n, esize);
            fake_next[on_gpu] += ((uintptr_t)n * esize + 4095) & ~(uintptr_t)4095;
        } else {
            /* state and host buffers: our memory (pinned when a GPU is there),
             * each at its own offset modulo 4 KiB so that the streams of a
             * task over several buffers (Adam: p, g, m, v) do not alias in
             * the caches */
            size_t skew = buffer_skew(b);
            /* counted in StarPU's used memory (STARPU_MALLOC_COUNT), so the
             * measured peak (sg_lower_memory_used) covers the state too */
            int flags = OUR_MALLOC_FLAGS | (pin[b] ? STARPU_MALLOC_PINNED : 0);
            if (alloc_state(l, b, (size_t)n * esize + skew, flags))
                return state_alloc_error(buf, err);
            /* zeroed by the caller, every buffer at once on several threads */
            touch[*ntouch] = l->memory[b];
            touch_bytes[(*ntouch)++] = (size_t)n * esize + skew;
            l->state_bytes += (int64_t)n * (int64_t)esize;
            l->pinned_bytes += pin[b] ? (int64_t)n * (int64_t)esize : 0;
            starpu_vector_data_register(&h, (int)home_node(l, b), (uintptr_t)l->memory[b] + skew, n,
                                        esize);
        }
        starpu_data_set_name(h, buf->name);
        l->handles[b] = h;
        l->owned[b] = (char)(1 | (l->memory[b] && pin[b] ? SG_OWNED_PINNED : 0));
    }
    return SG_OK;
}

static int register_buffers(sg_lowering *l, const sg_lowering *base, sg_error *err)
{
    const sg_graph *g = l->graph;
    size_t nb = (size_t)(g->nbuffers > 0 ? g->nbuffers : 1);
    l->handles = calloc(nb, sizeof(void *));
    l->memory = calloc(nb, sizeof(void *));
    l->owned = calloc(nb, 1);
    void **touch = calloc(nb, sizeof *touch);
    size_t *touch_bytes = calloc(nb, sizeof *touch_bytes);
    /* pinned: what may cross the link; without CUDA workers, nothing */
    unsigned char *pin = calloc(nb, 1);
    int threads = 1, ntouch = 0, rc = SG_OK;
    if (!l->handles || !l->memory || !l->owned || !touch || !touch_bytes || !pin)
        rc = sg_error_set(err, SG_ENOMEM, "out of memory");
    if (!rc && l->target.have_cuda)
        sg_graph_host_pinned(g, pin);
    if (!rc && l->target.memory != SG_LOWER_MEMORY_SIMULATED)
        rc = sg_first_touch_threads(&threads, err);
    if (!rc)
        rc = register_each(l, base, pin, touch, touch_bytes, &ntouch, err);
    /* the state starts at zero (the initial state's load then writes the
     * weights and masters); no task runs yet, and StarPU's idle workers,
     * one per core, would poll for work on the cores the zeroing uses */
    if (!rc && ntouch > 0) {
        starpu_pause();
        sg_first_touch_zero(touch, touch_bytes, ntouch, threads);
        starpu_resume();
    }
    if (!rc && l->target.disk && !base)
        rc = sg_disk_reserve(l->target.disk, err);
    free(touch);
    free(touch_bytes);
    free(pin);
    return rc;
}

/* Steps in flight: their locks, condition variables and records. */
static int init_flights(sg_lowering *l, size_t nnodes, sg_error *err)
{
    l->nflights = l->target.flights > 0 ? l->target.flights : 1;
    l->flight = calloc((size_t)l->nflights, sizeof *l->flight);
    l->records = calloc(nnodes * (size_t)l->nflights, sizeof *l->records);
    if (!l->flight || !l->records)
        return sg_error_set(err, SG_ENOMEM, "out of memory");
    for (int f = 0; f < l->nflights; f++) {
        sg_lower_flight *fl = &l->flight[f];
        fl->records = l->records + (size_t)f * nnodes;
        starpu_pthread_mutex_t *m = malloc(sizeof *m);
        starpu_pthread_cond_t *cv = malloc(sizeof *cv);
        if (!m || !cv) {
            free(m);
            free(cv);
            return sg_error_set(err, SG_ENOMEM, "out of memory");
        }
        starpu_pthread_mutex_init(m, NULL);
        starpu_pthread_cond_init(cv, NULL);
        fl->lock = m;
        fl->cond = cv;
        for (size_t i = 0; i < nnodes; i++)
            fl->records[i].worker = -1;
    }
    return SG_OK;
}

static void free_flights(sg_lowering *l)
{
    for (int f = 0; l->flight && f < l->nflights; f++) {
        if (l->flight[f].lock) {
            starpu_pthread_mutex_destroy(l->flight[f].lock);
            starpu_pthread_cond_destroy(l->flight[f].cond);
        }
        free(l->flight[f].lock);
        free(l->flight[f].cond);
    }
    free(l->flight);
}

/* Per node: its accesses merged per buffer (a task lists a handle once);
 * one context per node and flight, alike but for the step they point at. */
static int build_contexts(sg_lowering *l, sg_exec_shared *shared, sg_error *err)
{
    const sg_graph *g = l->graph;
    size_t total = 0;
    for (int i = 0; i < g->nnodes; i++)
        total += (size_t)g->nodes[i].naccess;
    size_t nnodes = g->nnodes > 0 ? (size_t)g->nnodes : 1;
    int rc = init_flights(l, nnodes, err);
    if (rc)
        return rc;
    l->ctx = calloc(nnodes * (size_t)l->nflights, sizeof *l->ctx);
    l->slot_buffer = malloc((total + 1) * sizeof(int));
    l->slot_mode = malloc((total + 1) * sizeof(sg_access_mode));
    if (!l->ctx || !l->slot_buffer || !l->slot_mode)
        return sg_error_set(err, SG_ENOMEM, "out of memory");
    size_t at = 0;
    for (int i = 0; i < g->nnodes; i++) {
        const sg_node *nd = &g->nodes[i];
        sg_task_ctx *c = &l->ctx[i];
        c->shared = shared;
        c->node = i;
        c->slot_buffer = l->slot_buffer + at;
        c->slot_mode = l->slot_mode + at;
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
    for (int f = 0; f < l->nflights; f++)
        for (size_t i = 0; i < (size_t)g->nnodes; i++) {
            sg_task_ctx *c = &l->ctx[(size_t)f * nnodes + i];
            *c = l->ctx[i];
            c->step = &l->flight[f].params;
            c->records = l->flight[f].records;
            c->flight = &l->flight[f];
        }
    return SG_OK;
}

/* NVMe offload: the order the disk buffers are fetched in, for every flight. */
static int init_disk_sched(sg_lowering *l, sg_error *err)
{
    l->disk = calloc(1, sizeof *l->disk);
    if (!l->disk || sg_disk_sched_init(l->disk, l->target.disk, l->graph, l->handles))
        return sg_error_set(err, SG_ENOMEM, "out of memory");
    for (int f = 0; f < l->nflights; f++)
        l->flight[f].disk = l->disk;
    return SG_OK;
}

static int init(sg_lowering *l, const sg_graph *g, sg_exec_shared *shared, const sg_lower_target *t,
                const sg_lowering *base, sg_error *err)
{
    memset(l, 0, sizeof *l);
    l->graph = g;
    l->target = *t;
    l->shares = base != NULL;
    int rc = SG_OK;
    /* the contexts first: the NUMA placement of the state follows the
     * workers of the optimizer's context */
    if (base)
        l->split = base->split; /* the same scheduling contexts */
    else if (sg_starpu_split_workers(&l->split, t->optimizer_share, t->sched))
        rc = sg_error_set(err, SG_ENOMEM, "out of memory");
    if (!rc)
        rc = sg_numa_place_init(&l->numa, g, t->numa && t->memory == SG_LOWER_MEMORY_REAL,
                                &l->split, err);
    if (!rc)
        rc = register_buffers(l, base, err);
    if (!rc)
        rc = build_contexts(l, shared, err);
    if (!rc && sg_graph_liveness(g, &l->live))
        rc = sg_error_set(err, SG_ENOMEM, "out of memory");
    if (!rc && t->disk)
        rc = init_disk_sched(l, err);
    return rc;
}

int sg_lower_init(sg_lowering *l, const sg_graph *g, sg_exec_shared *shared,
                  const sg_lower_target *t, sg_error *err)
{
    return init(l, g, shared, t, NULL, err);
}

int sg_lower_init_sharing(sg_lowering *l, const sg_graph *g, sg_exec_shared *shared,
                          const sg_lower_target *t, const sg_lowering *base, sg_error *err)
{
    return init(l, g, shared, t, base, err);
}

void sg_lower_free(sg_lowering *l)
{
    /* tear-down: a failed wait has nothing left to report to; the handles
     * are released either way */
    if ((l->handles || l->memory) && starpu_task_wait_for_all())
        fprintf(stderr, "stepgraph: warning: starpu_task_wait_for_all failed at shutdown\n");
    const sg_graph *g = l->graph;
    for (int b = 0; l->handles && b < g->nbuffers; b++) {
        if (!l->handles[b] || !l->owned[b])
            continue;
        /* the disk node's copies are dropped with their files (its RAM
         * copy is not written back at the end) */
        if (l->target.memory == SG_LOWER_MEMORY_SIMULATED || (l->owned[b] & SG_OWNED_DISK))
            starpu_data_unregister_no_coherency(HANDLE(l, b));
        else
            starpu_data_unregister(HANDLE(l, b));
    }
    for (int b = 0; l->memory && b < g->nbuffers; b++)
        if (l->memory[b])
            free_state(l, b,
                       (size_t)(g->buffers[b].elems > 0 ? g->buffers[b].elems : 1) *
                               sg_dtype_size(g->buffers[b].dtype) +
                           buffer_skew(b),
                       OUR_MALLOC_FLAGS |
                           (l->owned[b] & SG_OWNED_PINNED ? STARPU_MALLOC_PINNED : 0));
    sg_numa_place_free(&l->numa);
    if (!l->shares)
        sg_starpu_split_free(&l->split);
    free(l->handles);
    free(l->memory);
    free(l->owned);
    free_flights(l);
    free(l->ctx);
    free(l->slot_buffer);
    free(l->slot_mode);
    free(l->records);
    sg_liveness_free(&l->live);
    if (l->disk)
        sg_disk_sched_free(l->disk);
    free(l->disk);
    memset(l, 0, sizeof *l);
}

/* ---- one step ------------------------------------------------------------- */

void sg_lower_flight_hold(sg_lower_flight *f)
{
    starpu_pthread_mutex_lock(f->lock);
    f->pending++;
    starpu_pthread_mutex_unlock(f->lock);
}

void sg_lower_flight_release(sg_lower_flight *f)
{
    starpu_pthread_mutex_lock(f->lock);
    if (--f->pending == 0) {
        f->end_us = starpu_timing_now();
        starpu_pthread_cond_broadcast(f->cond);
    }
    starpu_pthread_mutex_unlock(f->lock);
}

void sg_lower_flight_wait(sg_lower_flight *f)
{
    starpu_pthread_mutex_lock(f->lock);
    while (f->pending > 0)
        starpu_pthread_cond_wait(f->cond, f->lock);
    starpu_pthread_mutex_unlock(f->lock);
}

int sg_lower_flight_wait_polling(sg_lower_flight *f, double every_s, int (*check)(void *),
                                 void *arg)
{
    int rc = 0;
    starpu_pthread_mutex_lock(f->lock);
    while (f->pending > 0 && !rc) {
        struct timespec at;
        clock_gettime(CLOCK_REALTIME, &at);
        long long ns = at.tv_nsec + (long long)(every_s * 1e9);
        at.tv_sec += (time_t)(ns / 1000000000);
        at.tv_nsec = (long)(ns % 1000000000);
        if (starpu_pthread_cond_timedwait(f->cond, f->lock, &at) == 0 || f->pending == 0)
            continue;
        starpu_pthread_mutex_unlock(f->lock);
        rc = check(arg);
        starpu_pthread_mutex_lock(f->lock);
    }
    starpu_pthread_mutex_unlock(f->lock);
    return rc;
}

int sg_lower_flight_done(sg_lower_flight *f)
{
    starpu_pthread_mutex_lock(f->lock);
    int done = f->pending == 0;
    starpu_pthread_mutex_unlock(f->lock);
    return done;
}

void sg_lower_memory_used(int64_t *host, int64_t *gpu)
{
    *host = *gpu = 0;
    unsigned nodes = starpu_memory_nodes_get_count();
    for (unsigned m = 0; m < nodes; m++) {
        int64_t used = (int64_t)starpu_memory_get_used(m);
        enum starpu_node_kind k = starpu_node_get_kind(m);
        if (k == STARPU_CPU_RAM)
            *host += used;
        else if (k == STARPU_CUDA_RAM && used > *gpu)
            *gpu = used; /* the busiest GPU */
    }
}

/* Task callback: the task's record, then one task fewer in its step. The
 * memory StarPU holds is sampled here: a task's outputs are allocated
 * before it runs and its dead inputs invalidated after it ends. */
static void record_task(void *arg)
{
    const sg_task_ctx *c = arg;
    int64_t host, gpu;
    sg_lower_memory_used(&host, &gpu);
    starpu_pthread_mutex_lock(c->flight->lock);
    if (host > c->flight->peak_host)
        c->flight->peak_host = host;
    if (gpu > c->flight->peak_gpu)
        c->flight->peak_gpu = gpu;
    starpu_pthread_mutex_unlock(c->flight->lock);
    struct starpu_task *t = starpu_task_get_current();
    sg_task_record *r = &c->records[c->node];
    if (t && t->profiling_info) {
        r->worker = t->profiling_info->workerid;
        r->start_us = starpu_timing_timespec_to_us(&t->profiling_info->start_time);
        r->end_us = starpu_timing_timespec_to_us(&t->profiling_info->end_time);
    }
    sg_activity_note();
    sg_disk_task_done(c->flight->disk, c->node);
    sg_lower_flight_release(c->flight);
}

static enum starpu_data_access_mode starpu_mode(sg_access_mode m)
{
    return m == SG_R ? STARPU_R : m == SG_W ? STARPU_W : STARPU_RW;
}

static const char *mode_name(sg_access_mode m)
{
    return m == SG_R ? "R" : m == SG_W ? "W" : "RW";
}

static const char *where_name(uint32_t where)
{
    return where == (STARPU_CPU | STARPU_CUDA) ? "cpu|cuda" : where == STARPU_CUDA ? "cuda" : "cpu";
}

static const char *ctx_name(const sg_sched_split *s, unsigned ctx)
{
    if (!s->reserved)
        return "all";
    return ctx == s->optimizer_ctx ? "optimizer" : "compute";
}

/* One line per task of STEPGRAPH_TASK_LOG (lower.h). */
static void log_task(FILE *f, const sg_lowering *l, int i, const struct starpu_codelet *cl,
                     int priority, uint32_t where, unsigned ctx)
{
    const sg_node *nd = &l->graph->nodes[i];
    const sg_task_ctx *c = &l->ctx[i];
    fprintf(f, "%s\t%s\t%d\t%s\t%s\t", nd->name, cl->name ? cl->name : "?", priority,
            where_name(where), ctx_name(&l->split, ctx));
    for (int s = 0; s < c->nslots; s++)
        fprintf(f, "%s%s:%s", s ? "," : "", l->graph->buffers[c->slot_buffer[s]].name,
                mode_name(c->slot_mode[s]));
    fputc('\n', f);
}

static int submit_node(sg_lowering *l, int f, int i, struct starpu_data_descr *d, FILE *log,
                       sg_error *err)
{
    const sg_node *nd = &l->graph->nodes[i];
    sg_task_ctx *c = &l->ctx[(size_t)f * (size_t)l->graph->nnodes + (size_t)i];
    struct starpu_codelet *cl = l->target.codelets[nd->kind];
    if (!cl)
        return sg_error_set(err, SG_ENOTSUP, "no codelet for node kind %s (task %s)",
                            sg_op_kind_name(nd->kind), nd->name);
    for (int s = 0; s < c->nslots; s++) {
        d[s].handle = HANDLE(l, c->slot_buffer[s]);
        d[s].mode = starpu_mode(c->slot_mode[s]);
    }
    unsigned ctx = sg_starpu_ctx_for(&l->split, nd);
    uint32_t where = sg_starpu_where(nd, l->target.have_cuda);
    int priority = l->target.priorities ? (int)nd->priority : 0;
    if (log)
        log_task(log, l, i, cl, priority, where, ctx);
    unsigned nmask;
    const uint32_t *mask = sg_numa_place_task(&l->numa, nd, where, &nmask);
    c->records[i].worker = -1;
    sg_lower_flight_hold(c->flight); /* released by the task's callback */
    int rc = starpu_task_insert(cl, STARPU_DATA_MODE_ARRAY, d, c->nslots, STARPU_CL_ARGS_NFREE, c,
                                sizeof *c, STARPU_NAME, nd->name, STARPU_EXECUTE_WHERE,
                                (unsigned long long)where, STARPU_PRIORITY, priority,
                                STARPU_CALLBACK_WITH_ARG_NFREE, record_task, c, STARPU_SCHED_CTX,
                                ctx, STARPU_TASK_WORKERIDS, nmask, mask, 0);
    if (rc)
        sg_lower_flight_release(c->flight);
    if (rc)
        return sg_error_set(err, SG_EINVAL, "cannot submit task %s (starpu_task_insert: %d)",
                            nd->name, rc);
    return SG_OK;
}

int sg_lower_kept_after_step(const sg_buffer *b)
{
    return sg_buffer_outlives_step(b);
}

/* The values that die after node i: invalidated now, so that StarPU frees
 * them once node i has run (an invalidation is ordered like a write: after
 * the readers before it, before the writer of the next value). */
static void invalidate_dead(sg_lowering *l, int i)
{
    if (!l->live.dies_offset)
        return;
    for (int k = l->live.dies_offset[i]; k < l->live.dies_offset[i + 1]; k++)
        starpu_data_invalidate_submit(HANDLE(l, l->live.dies[k]));
}

/* Parameters offloaded (ZeRO-3 offload_param): a fetch node on a CUDA
 * worker makes StarPU copy the unit's host pieces to the GPU as its input.
 * That copy is only a cache: marked here as the first to evict when the GPU
 * runs short (StarPU keeps it while there is room, so a later fetch of the
 * same pieces in the step may need no transfer). */
static void release_fetched(sg_lowering *l, int i)
{
    const sg_node *nd = &l->graph->nodes[i];
    if (!l->target.have_cuda || !sg_node_is_param_fetch(nd))
        return;
    for (int a = 0; a < nd->naccess; a++) {
        const sg_buffer *b = &l->graph->buffers[nd->access[a].buffer];
        if (nd->access[a].mode == SG_R && b->role == SG_BUF_PARAM_PIECE && b->space == SG_MEM_HOST)
            starpu_data_wont_use(HANDLE(l, nd->access[a].buffer));
    }
}

static int liveness_enabled(void)
{
    const char *v = getenv("STEPGRAPH_LIVENESS");
    return !(v && strcmp(v, "0") == 0);
}

static FILE *open_task_log(const sg_lowering *l, sg_error *err, int *rc)
{
    const char *path = getenv("STEPGRAPH_TASK_LOG");
    *rc = SG_OK;
    if (l->steps_submitted > 0 || l->shares || !path || !*path)
        return NULL;
    FILE *f = fopen(path, "w");
    if (!f)
        *rc = sg_error_set(err, SG_EIO, "STEPGRAPH_TASK_LOG %s: cannot write", path);
    return f;
}

int sg_lower_submit_step(sg_lowering *l, int f, sg_error *err)
{
    const sg_graph *g = l->graph;
    if (f < 0 || f >= l->nflights)
        return sg_error_set(err, SG_EINVAL, "flight %d of %d", f, l->nflights);
    sg_lower_flight *fl = &l->flight[f];
    sg_lower_flight_hold(fl); /* the step cannot end before all is submitted */
    int maxslots = 1;
    for (int i = 0; i < g->nnodes; i++)
        if (l->ctx[i].nslots > maxslots)
            maxslots = l->ctx[i].nslots;
    struct starpu_data_descr *d = malloc((size_t)maxslots * sizeof *d);
    if (!d)
        return sg_error_set(err, SG_ENOMEM, "out of memory");
    int rc;
    FILE *log = open_task_log(l, err, &rc);
    /* STEPGRAPH_LIVENESS=0: every step-local buffer lives to the end of
     * the step, as before liveness (a check that results do not change) */
    int early = liveness_enabled();
    if (l->disk)
        sg_disk_step_begins(l->disk);
    for (int i = 0; i < g->nnodes && !rc; i++) {
        rc = submit_node(l, f, i, d, log, err);
        if (!rc)
            release_fetched(l, i);
        if (!rc && l->disk)
            sg_disk_node_submitted(l->disk, g, i);
        if (!rc && early)
            invalidate_dead(l, i);
    }
    free(d);
    if (log && fclose(log) && !rc)
        rc = sg_error_set(err, SG_EIO, "STEPGRAPH_TASK_LOG: write failed");
    /* what was submitted must still be invalidated after it, failure or
     * not: all of it when a submission failed half-way or liveness is off */
    if (rc || !early)
        for (int b = 0; b < g->nbuffers; b++)
            if (!sg_lower_kept_after_step(&g->buffers[b]))
                starpu_data_invalidate_submit(HANDLE(l, b));
    l->steps_submitted++;
    sg_lower_flight_release(fl);
    return rc;
}
