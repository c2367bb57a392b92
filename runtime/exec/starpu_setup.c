/* starpu_setup.c - policy check and optimizer worker split (starpu_setup.h). */
#include "runtime/exec/starpu_setup.h"

#include <math.h>
#include "runtime/exec/starpu_include.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/json_util.h"

int sg_starpu_check_policy(const char *name, sg_error *err)
{
    struct starpu_sched_policy **all = starpu_sched_get_predefined_policies();
    char list[1024] = "";
    for (int i = 0; all[i]; i++) {
        if (strcmp(all[i]->policy_name, name) == 0)
            return SG_OK;
        size_t n = strlen(list);
        snprintf(list + n, sizeof list - n, "%s%s", n ? ", " : "", all[i]->policy_name);
    }
    char hint[160];
    sg_suggest_in_list(name, list, hint, sizeof hint);
    return sg_error_set(err, SG_EINVAL, "sched: unknown StarPU policy \"%s\"%s (one of: %s)", name,
                        hint, list);
}

int sg_starpu_split_workers(sg_sched_split *s, double share, const char *sched)
{
    s->compute_ctx = s->optimizer_ctx = STARPU_NMAX_SCHED_CTXS;
    s->reserved = 0;
    int ncpu = (int)starpu_cpu_worker_get_count();
    int ncuda = (int)starpu_cuda_worker_get_count();
    if (share <= 0 || ncpu < 1)
        return SG_OK;
    int k = (int)floor(share * ncpu + 1e-9);
    if (ncuda == 0 && k > ncpu - 1)
        k = ncpu - 1;
    if (k < 1)
        return SG_OK;
    int nall = (int)starpu_worker_get_count();
    int *cpu = malloc((size_t)ncpu * sizeof(int)), *rest = malloc((size_t)nall * sizeof(int));
    if (!cpu || !rest) {
        free(cpu);
        free(rest);
        return SG_ENOMEM;
    }
    starpu_worker_get_ids_by_type(STARPU_CPU_WORKER, cpu, (unsigned)ncpu);
    int nrest = 0;
    for (int w = 0; w < nall; w++) {
        int reserved = 0;
        for (int i = ncpu - k; i < ncpu; i++)
            reserved |= cpu[i] == w;
        if (!reserved)
            rest[nrest++] = w;
    }
    s->compute_ctx =
        starpu_sched_ctx_create(rest, nrest, "compute", STARPU_SCHED_CTX_POLICY_NAME, sched, 0);
    s->optimizer_ctx = starpu_sched_ctx_create(cpu + (ncpu - k), k, "optimizer",
                                               STARPU_SCHED_CTX_POLICY_NAME, sched, 0);
    s->reserved = k;
    free(cpu);
    free(rest);
    return SG_OK;
}

void sg_starpu_split_free(sg_sched_split *s)
{
    if (s->reserved) {
        starpu_sched_ctx_delete(s->optimizer_ctx);
        starpu_sched_ctx_delete(s->compute_ctx);
    }
    s->reserved = 0;
}

/* CPU nodes of the kinds the table marks go to the optimizer's context. */
static int optimizer_node(const sg_node *nd)
{
    const sg_op_kind_info *info = sg_op_kind_info_of(nd->kind);
    return nd->device == SG_DEV_CPU && info && info->optimizer_ctx;
}

unsigned sg_starpu_ctx_for(const sg_sched_split *s, const sg_node *nd)
{
    unsigned ctx = s->reserved ? (optimizer_node(nd) ? s->optimizer_ctx : s->compute_ctx)
                               : starpu_sched_ctx_get_context();
    return ctx == STARPU_NMAX_SCHED_CTXS ? 0 : ctx;
}

uint32_t sg_starpu_where(const sg_node *nd, int have_cuda)
{
    if (!have_cuda)
        return STARPU_CPU;
    const sg_op_kind_info *info = sg_op_kind_info_of(nd->kind);
    if (!nd->pinned && info && info->placement == SG_PLACE_EITHER)
        return STARPU_CPU | STARPU_CUDA; /* the scheduler picks */
    return sg_node_runs_on_gpu(nd) ? STARPU_CUDA : STARPU_CPU;
}

/* is_gpu[w] for every StarPU worker (malloc'ed; NULL when out of memory). */
static int *gpu_worker_mask(int *nw)
{
    *nw = (int)starpu_worker_get_count();
    int *is_gpu = calloc((size_t)(*nw > 0 ? *nw : 1), sizeof *is_gpu);
    for (int w = 0; is_gpu && w < *nw; w++)
        is_gpu[w] = starpu_worker_get_type(w) == STARPU_CUDA_WORKER;
    return is_gpu;
}

int sg_starpu_overlap(const sg_graph *g, const sg_task_record *records, sg_overlap *out)
{
    int nw;
    int *is_gpu = gpu_worker_mask(&nw);
    if (!is_gpu)
        return SG_ENOMEM;
    int rc = sg_overlap_compute(g, records, is_gpu, nw, out);
    free(is_gpu);
    return rc;
}

int sg_starpu_overlap_window(const sg_graph *const *graphs, const sg_task_record *const *records,
                             int nsteps, double a_us, double b_us, sg_overlap *out)
{
    int nw;
    int *is_gpu = gpu_worker_mask(&nw);
    if (!is_gpu)
        return SG_ENOMEM;
    int rc = sg_overlap_window(graphs, records, nsteps, is_gpu, nw, a_us, b_us, out);
    free(is_gpu);
    return rc;
}
