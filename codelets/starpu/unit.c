/* unit.c - the forward, recompute and backward codelets: one graph unit
 * (embedding, decoder layer, head + loss) for one micro-batch, or for one
 * batch tile of it (a node with tile >= 0: rows [t * batch_tile, ...) of
 * the micro-batch, its own activation buffers, its weight gradients in its
 * own fp32 partials that grad_sum adds up; CPU only).
 *
 * CPU: through codelets/cpu/block.h, in fp32 views of the buffers; in a bf16
 * run the products take bf16 operands where the CPU has AMX (gemm.h).
 * CUDA: through codelets/cuda/block_cuda.h on the worker's stream; every
 * tensor of the unit is in the compute dtype on the device (the step
 * compiler stores parameters, activations, saved activations and gradients
 * in it). */
#include <string.h>

#include "codelets/cpu/gemm.h"
#include "codelets/starpu/args.h"
#include "codelets/starpu/codelets.h"
#include "codelets/starpu/comm.h"
#include "codelets/starpu/moe.h"

typedef struct unit_call {
    const sg_task_ctx *c;
    void **buffers;
    const sg_model *m;
    int u, head;
    size_t B, T, N;
    int tile;         /* batch tile, or -1 */
    size_t r0, B_all; /* the tile's first sequence, sequences in the micro-batch */
    sg_unit_io io;
    sg_task_mem param_copy, embed_copy;
    sg_f32_view views[8];
    int store[8];
    int nviews;
    int prev_bf16; /* the thread's GEMM precision before the task (gemm.h) */
} unit_call;

/* An fp32 view of the slot holding `role` for `unit`; NULL when absent.
 * load: read the contents; zero: start from zeros (a gradient written
 * fresh); store: write back when the call ends. */
static float *view(unit_call *k, sg_buf_role role, int unit, int load, int store)
{
    int s = sg_arg_find(k->c, role, unit);
    if (s < 0 || k->nviews == 8)
        return NULL;
    const sg_buffer *b = sg_arg_buffer(k->c, s);
    sg_f32_view *v = &k->views[k->nviews];
    if (sg_f32_view_open(v, sg_arg_ptr(k->buffers, s), b->dtype, (size_t)b->elems, load))
        return NULL;
    k->store[k->nviews++] = store;
    return v->p;
}

/* A weight gradient: accumulated into (RW) or written fresh (W); a tile's
 * fp32 partial in a tiled graph. */
static float *grad_view(unit_call *k, int unit)
{
    sg_buf_role role = k->tile >= 0 ? SG_BUF_GRAD_PART : SG_BUF_GRAD;
    int s = sg_arg_find(k->c, role, unit);
    if (s < 0)
        return NULL;
    int fresh = sg_arg_write_only(k->c, s);
    float *p = view(k, role, unit, !fresh, 1);
    if (p && fresh)
        memset(p, 0, (size_t)sg_arg_buffer(k->c, s)->elems * sizeof(float));
    return p;
}

static int call_begin(unit_call *k, const sg_task_ctx *c, void **buffers)
{
    memset(k, 0, sizeof *k);
    const sg_exec_shared *sh = c->shared;
    /* a bf16 run's products take bf16 operands (AMX where the CPU has it) */
    k->prev_bf16 = sg_gemm_set_bf16(sh->spec->compute_dtype == SG_BF16);
    k->c = c;
    k->buffers = buffers;
    k->m = sh->model;
    k->u = sh->graph->nodes[c->node].layer;
    k->head = sg_model_num_units(k->m) - 1;
    k->B_all = k->B = (size_t)sh->spec->micro_batch;
    k->T = (size_t)sh->spec->seq_len;
    k->tile = sh->graph->nodes[c->node].tile;
    if (k->tile >= 0) {
        size_t bt = (size_t)sh->spec->batch_tile;
        k->r0 = (size_t)k->tile * bt;
        if (bt == 0 || k->r0 >= k->B_all)
            return SG_EINVAL;
        k->B = k->B_all - k->r0 < bt ? k->B_all - k->r0 : bt;
    }
    k->N = k->B * k->T;
    /* MoE layers: experts and combine are tasks of their own (moe.c) */
    k->io.moe_split = k->m->num_experts > 0 && k->u > 0 && k->u < k->head;
    k->io.rope = &sh->rope;
    k->io.params = sg_arg_unit_params(c, buffers, k->u, &k->param_copy);
    if (!k->io.params)
        return SG_ENOMEM;
    if (k->u == k->head && k->m->tie_word_embeddings &&
        !(k->io.embed = sg_arg_unit_params(c, buffers, 0, &k->embed_copy)))
        return SG_ENOMEM;
    int ts = sg_arg_find(c, SG_BUF_TOKENS, -2);
    if (ts >= 0) {
        const int32_t *tok = sg_arg_ptr(buffers, ts); /* the micro-batch's inputs, targets */
        k->io.tokens = tok + k->r0 * k->T;
        k->io.targets = tok + k->B_all * k->T + k->r0 * k->T;
    }
    k->io.scratch = sg_scratch(sg_unit_scratch_floats(k->m, k->u, k->B, k->T));
    return k->io.scratch ? SG_OK : SG_ENOMEM;
}

static void call_end(unit_call *k, int rc)
{
    for (int i = 0; i < k->nviews; i++)
        sg_f32_view_close(&k->views[i], rc == SG_OK && k->store[i]);
    sg_task_mem_free(&k->param_copy);
    sg_task_mem_free(&k->embed_copy);
    sg_gemm_set_bf16(k->prev_bf16);
}

/* A tile's share of the micro-step's loss: the loss is the mean over the
 * micro-batch's targets (>= 0), so a tile's mean weighs its targets / all
 * targets (0 when the micro-batch has none). 1 when untiled. */
static double tile_share(const unit_call *k)
{
    if (k->tile < 0)
        return 1.0;
    const int32_t *all = k->io.targets - k->r0 * k->T;
    int64_t mine = 0, total = 0;
    for (size_t i = 0; i < k->B_all * k->T; i++) {
        int valid = all[i] >= 0;
        total += valid;
        mine += valid && i >= k->r0 * k->T && i < (k->r0 + k->B) * k->T;
    }
    return total ? (double)mine / (double)total : 0.0;
}

/* MoE: the micro-step's router statistics (unit.c's caller, the compiler,
 * gives them to the layers' forward and backward and the head's forward).
 * A layer's forward writes (layer 1) or adds to them; the others read. */
static int moe_stats_view(unit_call *k, int fwd)
{
    int s = sg_arg_find(k->c, SG_BUF_MOE_STATS, -2);
    if (s < 0)
        return SG_OK;
    int writes = fwd && k->u != k->head;
    k->io.moe_stats = view(k, SG_BUF_MOE_STATS, -1, !sg_arg_write_only(k->c, s), writes);
    return k->io.moe_stats ? SG_OK : SG_ENOMEM;
}

static void forward(void *buffers[], void *arg, int recompute)
{
    const sg_task_ctx *c = arg;
    unit_call k;
    int rc = call_begin(&k, c, buffers);
    if (rc == SG_OK && k.u > 0 && !(k.io.x = view(&k, SG_BUF_ACT, k.u - 1, 1, 0)))
        rc = SG_ENOMEM;
    if (rc == SG_OK && !recompute) {
        if (k.u == k.head)
            k.io.loss = view(&k, SG_BUF_LOSS, k.u, 0, 1);
        else if (!k.io.moe_split) /* a MoE layer's output: the combine task */
            k.io.y = view(&k, SG_BUF_ACT, k.u, 0, 1);
        if (!k.io.loss && !k.io.y && !k.io.moe_split)
            rc = SG_ENOMEM;
    }
    if (rc == SG_OK && sg_arg_find(c, SG_BUF_SAVED, k.u) >= 0 &&
        !(k.io.saved = view(&k, SG_BUF_SAVED, k.u, 0, 1)))
        rc = SG_ENOMEM;
    if (rc == SG_OK && !recompute)
        rc = moe_stats_view(&k, 1);
    if (rc == SG_OK)
        rc = sg_unit_forward(k.m, k.u, k.B, k.T, &k.io);
    if (rc == SG_OK && k.io.loss && k.tile >= 0)
        *k.io.loss = (float)((double)*k.io.loss * tile_share(&k));
    call_end(&k, rc);
    if (rc)
        sg_task_fail(c, rc,
                     rc == SG_ENOMEM ? "a buffer is missing or memory ran out"
                                     : "invalid token id or size");
}

void sg_forward_cpu(void *buffers[], void *arg)
{
    forward(buffers, arg, 0);
}

void sg_recompute_cpu(void *buffers[], void *arg)
{
    forward(buffers, arg, 1);
}

/* The ranks whose gradients the reductions add (comm.h): 1 for one rank. */
static int grad_ranks(const sg_task_ctx *c)
{
    return c->shared->comm && c->shared->comm->size > 1 ? c->shared->comm->size : 1;
}

/* d(loss)/d(micro-step loss): DeepSpeed divides by the accumulation steps
 * and multiplies by the fp16 loss scale; a batch tile's by its share. With
 * dp ranks also by dp (the global batch's mean; the reductions then add):
 * each rank's gradients are its exact share of one rank's of micro batch
 * dp x B, so fp16 overflows where that run would. */
static float head_dloss(unit_call *k)
{
    double d = tile_share(k) / ((double)k->c->shared->spec->grad_accum * (double)grad_ranks(k->c));
    int s = sg_arg_find(k->c, SG_BUF_LOSS_SCALE, -2);
    if (s >= 0)
        d *= *(const float *)sg_arg_ptr(k->buffers, s);
    return (float)d;
}

void sg_backward_cpu(void *buffers[], void *arg)
{
    const sg_task_ctx *c = arg;
    unit_call k;
    float *dy = NULL, *dx = NULL, *dparams = NULL, *dembed = NULL;
    int rc = call_begin(&k, c, buffers);
    if (rc == SG_OK && k.u > 0 && !(k.io.x = view(&k, SG_BUF_ACT, k.u - 1, 1, 0)))
        rc = SG_ENOMEM;
    if (rc == SG_OK && sg_arg_find(c, SG_BUF_SAVED, k.u) >= 0 &&
        !(k.io.saved = view(&k, SG_BUF_SAVED, k.u, 1, 0)))
        rc = SG_ENOMEM;
    if (rc == SG_OK && k.u < k.head && !(dy = view(&k, SG_BUF_DACT, k.u, 1, 0)))
        rc = SG_ENOMEM;
    if (rc == SG_OK && k.u > 0 && !(dx = view(&k, SG_BUF_DACT, k.u - 1, 0, 1)))
        rc = SG_ENOMEM;
    if (rc == SG_OK && !(dparams = grad_view(&k, k.u)))
        rc = SG_ENOMEM;
    if (rc == SG_OK && k.u == k.head && k.m->tie_word_embeddings && !(dembed = grad_view(&k, 0)))
        rc = SG_ENOMEM;
    if (rc == SG_OK)
        rc = moe_stats_view(&k, 0);
    /* MoE: the expert tasks' results */
    float *moe_dn2 = NULL, *moe_dtopw = NULL;
    sg_moe_grads moe_grads = {0};
    if (rc == SG_OK && k.io.moe_split) {
        moe_dn2 = malloc(k.N * (size_t)k.m->hidden_size * sizeof *moe_dn2);
        moe_dtopw = malloc(k.N * (size_t)k.m->experts_per_token * sizeof *moe_dtopw);
        rc = !moe_dn2 || !moe_dtopw || !k.io.saved
                 ? SG_ENOMEM
                 : sg_moe_gather_backward(c, buffers, k.m, k.u, k.N, k.io.saved, moe_dn2, moe_dtopw,
                                          &moe_grads);
        k.io.moe_dn2 = moe_dn2;
        k.io.moe_dtopw = moe_dtopw;
    }
    /* an MoE layer needs d(loss) too, for the load-balancing loss's gradient */
    if (rc == SG_OK)
        rc = sg_unit_backward(k.m, k.u, k.B, k.T, &k.io, dy,
                              k.u == k.head || k.io.moe_stats ? head_dloss(&k) : 0.0f, dx, dparams,
                              dembed);
    if (rc == SG_OK && k.io.moe_split)
        rc = sg_moe_add_expert_grads(k.m, k.u, &moe_grads, dparams);
    free(moe_dn2);
    free(moe_dtopw);
    call_end(&k, rc);
    if (rc)
        sg_task_fail(c, rc,
                     rc == SG_ENOMEM ? "a buffer is missing or memory ran out"
                                     : "invalid token id or size");
}

/* ---- CUDA ---------------------------------------------------------------- */

#ifdef SG_STARPU_CUDA
#include <stdio.h>

#include "codelets/cuda/block_cuda.h"
#include "codelets/starpu/cuda_task.h"
#include "codelets/starpu/cuda_state.h"

typedef struct cuda_unit_call {
    const sg_task_ctx *c;
    void **buffers;
    const sg_model *m;
    sg_cu cu;
    int u, head;
    size_t B, T, N;
    sg_dtype dt;
    sg_cu_unit_io io;
    void *param_copy, *embed_copy; /* stream-ordered, freed at the end */
} cuda_unit_call;

/* The device pointer of the slot holding `role` for `unit` in the compute
 * dtype, or NULL (absent, or stored in another dtype: *bad is set). */
static void *cu_slot_ptr(cuda_unit_call *k, sg_buf_role role, int unit, int *bad)
{
    int s = sg_arg_find(k->c, role, unit);
    if (s < 0)
        return NULL;
    if (sg_arg_buffer(k->c, s)->dtype != k->dt) {
        *bad = 1;
        return NULL;
    }
    return sg_arg_ptr(k->buffers, s);
}

/* A unit's parameters as one device array (cuda_task.h). */
static const void *cu_unit_params(cuda_unit_call *k, int unit, void **copy)
{
    return sg_cuda_unit_params(k->c, k->buffers, unit, k->dt, &k->cu, copy);
}

/* MoE: the micro-step's router statistics (fp32, device), as the CPU
 * codelet's moe_stats_view; NULL without (no load-balancing loss). */
static float *cu_moe_stats(cuda_unit_call *k, int *bad)
{
    int s = sg_arg_find(k->c, SG_BUF_MOE_STATS, -2);
    if (s < 0)
        return NULL;
    if (sg_arg_buffer(k->c, s)->dtype != SG_F32) {
        *bad = 1;
        return NULL;
    }
    return sg_arg_ptr(k->buffers, s);
}

static int cu_call_begin(cuda_unit_call *k, const sg_task_ctx *c, void **buffers)
{
    memset(k, 0, sizeof *k);
    const sg_exec_shared *sh = c->shared;
    const sg_cuda_device *dev = sg_cuda_local_device(sh);
    if (!dev)
        return SG_EIO;
    k->c = c;
    k->buffers = buffers;
    k->cu = sg_cuda_task_cu();
    k->m = sh->model;
    k->u = sh->graph->nodes[c->node].layer;
    k->head = sg_model_num_units(k->m) - 1;
    k->B = (size_t)sh->spec->micro_batch;
    k->T = (size_t)sh->spec->seq_len;
    k->N = k->B * k->T;
    k->dt = sh->spec->compute_dtype;
    k->io.dt = k->dt;
    /* MoE layers: experts and combine are tasks of their own (moe.c) */
    k->io.moe_split = k->m->num_experts > 0 && k->u > 0 && k->u < k->head;
    /* the compiler puts batch tiles on CPU workers */
    if (sh->graph->nodes[c->node].tile >= 0)
        return SG_ENOTSUP;
    k->io.cos_tab = dev->cos_tab;
    k->io.sin_tab = dev->sin_tab;
    if (!(k->io.params = cu_unit_params(k, k->u, &k->param_copy)))
        return SG_EINVAL;
    if (k->u == k->head && k->m->tie_word_embeddings &&
        !(k->io.embed = cu_unit_params(k, 0, &k->embed_copy)))
        return SG_EINVAL;
    int ts = sg_arg_find(c, SG_BUF_TOKENS, -2);
    if (ts >= 0) {
        const int32_t *tok = sg_arg_ptr(buffers, ts); /* inputs then targets */
        k->io.tokens = tok;
        k->io.targets = tok + k->N;
    }
    k->io.scratch =
        sg_cu_malloc_async(&k->cu, sg_cu_unit_scratch_bytes(k->m, k->u, k->B, k->T, k->dt));
    return k->io.scratch ? SG_OK : SG_ENOMEM;
}

static void cu_call_end(cuda_unit_call *k)
{
    sg_cu_free_async(&k->cu, k->io.scratch);
    sg_cu_free_async(&k->cu, k->param_copy);
    sg_cu_free_async(&k->cu, k->embed_copy);
}

static void cu_report(const sg_task_ctx *c, int rc)
{
    if (rc)
        sg_cuda_task_fail(c, rc,
                          rc == SG_ENOMEM    ? "device memory ran out"
                          : rc == SG_ENOTSUP ? "a batch tile runs on CPU workers only"
                          : rc == SG_EIO     ? "CUDA failed"
                                             : "a buffer is missing or has another dtype");
}

static void cu_forward(void *buffers[], void *arg, int recompute)
{
    const sg_task_ctx *c = arg;
    cuda_unit_call k;
    int bad = 0;
    int rc = cu_call_begin(&k, c, buffers);
    if (rc == SG_OK && k.u > 0 && !(k.io.x = cu_slot_ptr(&k, SG_BUF_ACT, k.u - 1, &bad)))
        rc = SG_EINVAL;
    if (rc == SG_OK && !recompute) {
        if (k.u == k.head) {
            int s = sg_arg_find(c, SG_BUF_LOSS, k.u);
            k.io.loss = s >= 0 ? sg_arg_ptr(buffers, s) : NULL;
        } else if (!k.io.moe_split) { /* a MoE layer's output: the combine task */
            k.io.y = cu_slot_ptr(&k, SG_BUF_ACT, k.u, &bad);
        }
        if (!k.io.loss && !k.io.y && !k.io.moe_split)
            rc = SG_EINVAL;
        k.io.moe_stats = cu_moe_stats(&k, &bad);
    }
    if (rc == SG_OK)
        k.io.saved = cu_slot_ptr(&k, SG_BUF_SAVED, k.u, &bad);
    if (rc == SG_OK && bad)
        rc = SG_EINVAL;
    if (rc == SG_OK)
        rc = sg_cu_unit_forward(&k.cu, k.m, k.u, k.B, k.T, &k.io);
    cu_call_end(&k);
    cu_report(c, rc);
}

void sg_forward_cuda(void *buffers[], void *arg)
{
    cu_forward(buffers, arg, 0);
}

void sg_recompute_cuda(void *buffers[], void *arg)
{
    cu_forward(buffers, arg, 1);
}

/* A weight gradient accumulated into (RW), or written fresh (W: zeroed
 * first, as the CPU codelet does). */
static void *cu_grad_ptr(cuda_unit_call *k, int unit, int *bad)
{
    int s = sg_arg_find(k->c, SG_BUF_GRAD, unit);
    void *p = cu_slot_ptr(k, SG_BUF_GRAD, unit, bad);
    if (p && sg_arg_write_only(k->c, s))
        sg_cu_zero_async(&k->cu, p, (size_t)sg_arg_buffer(k->c, s)->bytes);
    return p;
}

/* A MoE layer's backward with experts as tasks: d n2 and d topw from every
 * group's gradient buffer (codelets/cuda/moe_group.cu). */
typedef struct cu_moe_bwd {
    void *dn2, *scratch;
    float *dtopw;
    const float *grads[SG_MOE_MAX_GROUPS];
    int groups[SG_MOE_MAX_GROUPS], n;
} cu_moe_bwd;

static int cu_moe_gather(cuda_unit_call *k, cu_moe_bwd *mb)
{
    const sg_task_ctx *c = k->c;
    for (int s = 0; s < c->nslots; s++) {
        const sg_buffer *b = sg_arg_buffer(c, s);
        if (b->role != SG_BUF_MOE_GRAD)
            continue;
        if (b->dtype != SG_F32 || mb->n == SG_MOE_MAX_GROUPS)
            return SG_EINVAL;
        mb->grads[mb->n] = sg_arg_ptr(k->buffers, s);
        mb->groups[mb->n++] = b->subgroup;
    }
    const size_t NH = k->N * (size_t)k->m->hidden_size;
    mb->dn2 = sg_cu_malloc_async(&k->cu, NH * sg_dtype_size(k->dt));
    mb->dtopw = sg_cu_malloc_async(&k->cu, k->N * (size_t)k->m->experts_per_token * sizeof(float));
    mb->scratch =
        sg_cu_malloc_async(&k->cu, sg_cu_moe_group_scratch_bytes(k->m, k->B, k->T, k->dt));
    if (!mb->dn2 || !mb->dtopw || !mb->scratch)
        return SG_ENOMEM;
    if (!k->io.saved)
        return SG_EINVAL;
    int rc =
        sg_cu_moe_gather_backward(&k->cu, k->m, k->u, k->B, k->T, k->dt, k->io.saved, mb->grads,
                                  mb->groups, mb->n, mb->dn2, mb->dtopw, mb->scratch);
    k->io.moe_dn2 = mb->dn2;
    k->io.moe_dtopw = mb->dtopw;
    return rc;
}

void sg_backward_cuda(void *buffers[], void *arg)
{
    const sg_task_ctx *c = arg;
    cuda_unit_call k;
    void *dy = NULL, *dx = NULL, *dparams = NULL, *dembed = NULL;
    int bad = 0;
    int rc = cu_call_begin(&k, c, buffers);
    if (rc == SG_OK && k.u > 0 && !(k.io.x = cu_slot_ptr(&k, SG_BUF_ACT, k.u - 1, &bad)))
        rc = SG_EINVAL;
    if (rc == SG_OK)
        k.io.saved = cu_slot_ptr(&k, SG_BUF_SAVED, k.u, &bad);
    if (rc == SG_OK && k.u < k.head && !(dy = cu_slot_ptr(&k, SG_BUF_DACT, k.u, &bad)))
        rc = SG_EINVAL;
    if (rc == SG_OK && k.u > 0 && !(dx = cu_slot_ptr(&k, SG_BUF_DACT, k.u - 1, &bad)))
        rc = SG_EINVAL;
    if (rc == SG_OK && !(dparams = cu_grad_ptr(&k, k.u, &bad)))
        rc = SG_EINVAL;
    if (rc == SG_OK && k.u == k.head && k.m->tie_word_embeddings &&
        !(dembed = cu_grad_ptr(&k, 0, &bad)))
        rc = SG_EINVAL;
    if (rc == SG_OK && bad)
        rc = SG_EINVAL;
    /* d(loss)/d(micro-step loss): 1 / accumulation steps, times the fp16
     * loss scale, which stays on the device */
    float dloss = (float)(1.0 / ((double)c->shared->spec->grad_accum * (double)grad_ranks(c)));
    int ls = sg_arg_find(c, SG_BUF_LOSS_SCALE, -2);
    const float *dloss_scale = ls >= 0 ? sg_arg_ptr(buffers, ls) : NULL;
    if (rc == SG_OK) {
        k.io.moe_stats = cu_moe_stats(&k, &bad);
        if (bad)
            rc = SG_EINVAL;
    }
    /* MoE: the expert tasks' results (moe.c), gathered on the device */
    cu_moe_bwd mb = {0};
    if (rc == SG_OK && k.io.moe_split)
        rc = cu_moe_gather(&k, &mb);
    if (rc == SG_OK)
        rc = sg_cu_unit_backward(&k.cu, k.m, k.u, k.B, k.T, &k.io, dy, dloss, dloss_scale, dx,
                                 dparams, dembed);
    if (rc == SG_OK && k.io.moe_split)
        rc = sg_cu_moe_add_expert_grads(&k.cu, k.m, k.u, k.dt, mb.grads, mb.groups, mb.n, k.B, k.T,
                                        dparams, mb.scratch);
    sg_cu_free_async(&k.cu, mb.dn2);
    sg_cu_free_async(&k.cu, mb.dtopw);
    sg_cu_free_async(&k.cu, mb.scratch);
    cu_call_end(&k);
    cu_report(c, rc);
}

#endif /* SG_STARPU_CUDA */

SG_CODELET2(forward, sg_forward_cpu, sg_forward_cuda);
SG_CODELET2(recompute, sg_recompute_cpu, sg_recompute_cuda);
SG_CODELET2(backward, sg_backward_cpu, sg_backward_cuda);
