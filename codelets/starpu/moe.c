/* moe.c - the experts of a Qwen3-MoE or GPT-OSS layer as tasks of their own (CPU,
 * and CUDA through codelets/cuda/moe_group.cu at the end of the file):
 *   moe_expert      a group of experts' forward on the tokens that picked them
 *   moe_combine     the layer's output: input + the weighted expert outputs
 *   moe_expert_bwd  a group of experts' backward (and its share of the combine)
 * The layer's forward task (unit.c) runs attention and the router; its
 * backward task gathers the groups' results (unit.c, sg_moe_gather_backward)
 * and runs the router's and attention's backward. The kernels are those of
 * codelets/cpu/moe.c (qwen3_moe) and codelets/cpu/gpt_oss.c (gpt_oss: an
 * expert's gradient in the group's buffer is its slices of the four fused
 * tensors one after the other, scattered back by sg_moe_add_expert_grads).
 *
 * Group g holds experts [g G, g G + G) (models/unit_layout.h); its slots are
 * its experts', expert by expert, each in token order, rows of its buffers in
 * that order (exact lists in buffers sized for every token: the counts vary
 * per batch). Every task writes only its own buffers and every sum runs in
 * slot order, so results are the same bits under every scheduler. The
 * activation buffers are of the compute dtype (fp32 views here), the
 * gradient buffers fp32. */
#include <stdlib.h>
#include <string.h>

#include "codelets/cpu/gemm.h"
#include "codelets/cpu/ops.h"
#include "codelets/starpu/args.h"
#include "codelets/starpu/codelets.h"
#include "codelets/starpu/moe.h"
#include "models/unit_layout.h"

typedef struct moe_call {
    const sg_task_ctx *c;
    void **buffers;
    const sg_model *m;
    int u;
    size_t N, H, F, K, E, cap;
    sg_layer_param_offsets o;
    sg_layer_saved_layout l;
    const float *params;
    sg_task_mem param_copy;
    sg_f32_view saved, dy, y;
    int have_saved, have_dy, have_y;
    int prev_bf16; /* the thread's GEMM precision before the task (gemm.h) */
} moe_call;

static int call_begin(moe_call *k, const sg_task_ctx *c, void **buffers)
{
    memset(k, 0, sizeof *k);
    const sg_exec_shared *sh = c->shared;
    k->prev_bf16 = sg_gemm_set_bf16(sh->spec->compute_dtype == SG_BF16);
    k->c = c;
    k->buffers = buffers;
    k->m = sh->model;
    k->u = sh->graph->nodes[c->node].layer;
    k->N = (size_t)sh->spec->micro_batch * (size_t)sh->spec->seq_len;
    k->H = (size_t)k->m->hidden_size;
    k->F = (size_t)k->m->moe_intermediate_size;
    k->K = (size_t)k->m->experts_per_token;
    k->E = (size_t)k->m->num_experts;
    k->cap = sg_moe_group_cap(k->m, k->N);
    if (k->m->num_experts <= 0 || k->u < 1 || k->u > k->m->num_layers)
        return SG_EINVAL;
    int rc = sg_layer_param_offsets_get(k->m, k->u - 1, &k->o);
    if (rc)
        return rc;
    sg_layer_saved_layout_get(k->m, k->N, &k->l);
    int s = sg_arg_find(c, SG_BUF_SAVED, k->u);
    if (s < 0)
        return SG_EINVAL;
    const sg_buffer *b = sg_arg_buffer(c, s);
    if (sg_f32_view_open(&k->saved, sg_arg_ptr(buffers, s), b->dtype, (size_t)b->elems, 1))
        return SG_ENOMEM;
    k->have_saved = 1;
    return SG_OK;
}

static void call_end(moe_call *k, int rc)
{
    if (k->have_saved)
        sg_f32_view_close(&k->saved, 0);
    if (k->have_dy)
        sg_f32_view_close(&k->dy, 0);
    if (k->have_y)
        sg_f32_view_close(&k->y, rc == SG_OK);
    sg_task_mem_free(&k->param_copy);
    sg_gemm_set_bf16(k->prev_bf16);
}

/* The unit's parameters (expert weights are slices of them). */
static int load_params(moe_call *k)
{
    k->params = sg_arg_unit_params(k->c, k->buffers, k->u, &k->param_copy);
    return k->params ? SG_OK : SG_ENOMEM;
}

/* An fp32 view of the slot holding `role` for the layer. */
static int open_view(moe_call *k, sg_f32_view *v, sg_buf_role role, int unit, int load)
{
    int s = sg_arg_find(k->c, role, unit);
    if (s < 0)
        return SG_EINVAL;
    const sg_buffer *b = sg_arg_buffer(k->c, s);
    return sg_f32_view_open(v, sg_arg_ptr(k->buffers, s), b->dtype, (size_t)b->elems, load)
               ? SG_ENOMEM
               : SG_OK;
}

/* A group's fp32 buffer of `role` at slot s: its pointer, its group. */
static float *group_buffer(const moe_call *k, int s, int *group)
{
    const sg_buffer *b = sg_arg_buffer(k->c, s);
    if (b->dtype != SG_F32 || b->subgroup < 0 || b->subgroup >= sg_moe_groups(k->m))
        return NULL;
    *group = b->subgroup;
    return sg_arg_ptr(k->buffers, s);
}

/* An fp32 view of elements [off, off + n) of a group's activation buffer
 * (of the compute dtype) at slot s, its group in *group; load: read them. */
static int group_act_view(const moe_call *k, int s, int *group, sg_f32_view *v, int load,
                          size_t off, size_t n)
{
    const sg_buffer *b = sg_arg_buffer(k->c, s);
    if (b->subgroup < 0 || b->subgroup >= sg_moe_groups(k->m) || off + n > (size_t)b->elems)
        return SG_EINVAL;
    *group = b->subgroup;
    char *raw = (char *)sg_arg_ptr(k->buffers, s) + off * sg_dtype_size(b->dtype);
    return sg_f32_view_open(v, raw, b->dtype, n, load) ? SG_ENOMEM : SG_OK;
}

/* Group g's experts [*e0, *e1). */
static void group_experts(const sg_model *m, int g, size_t *e0, size_t *e1)
{
    size_t ge = (size_t)sg_moe_group_experts(m);
    *e0 = (size_t)g * ge;
    *e1 = *e0 + ge < (size_t)m->num_experts ? *e0 + ge : (size_t)m->num_experts;
}

/* The slots of group g in row order (slots holds at most cap); their count. */
static size_t group_slots(const moe_call *k, int g, int32_t *slots)
{
    size_t e0, e1, n = 0;
    group_experts(k->m, g, &e0, &e1);
    const float *sel = k->saved.p + k->l.sel;
    for (size_t e = e0; e < e1; e++)
        n += sg_moe_expert_slots(slots + n, sel, k->N, k->K, e);
    return n;
}

static const float *weight(const moe_call *k, size_t off, size_t e)
{
    return k->params + off + e * k->o.ex_stride;
}

/* gpt_oss: expert e's forward (its slices of the fused tensors). */
static int oss_forward(const moe_call *k, size_t e, float *gate, float *up, float *out,
                       const float *n2, const int32_t *slots, size_t n, float *scratch)
{
    size_t off[4];
    sg_oss_expert_offsets(k->m, &k->o, e, off);
    const float *p = k->params;
    return sg_moe_oss_expert_forward(gate, up, out, n2, slots, NULL, n, p + off[0], p + off[1],
                                     p + off[2], p + off[3], k->H, k->F, k->K, scratch);
}

/* ---- forward ------------------------------------------------------------------ */

void sg_moe_expert_cpu(void *buffers[], void *arg)
{
    const sg_task_ctx *c = arg;
    moe_call k;
    int rc = call_begin(&k, c, buffers);
    int s = rc ? -1 : sg_arg_find(c, SG_BUF_MOE_ACT, k.u), g = -1, have_act = 0;
    sg_f32_view av;
    if (rc == SG_OK)
        rc = s < 0 ? SG_EINVAL : group_act_view(&k, s, &g, &av, 0, 0, k.cap * (2 * k.F + k.H));
    have_act = rc == SG_OK;
    float *act = have_act ? av.p : NULL;
    if (rc == SG_OK)
        rc = load_params(&k);
    int32_t *slots = rc ? NULL : malloc((k.N * k.K + 1) * sizeof *slots);
    float *scratch = rc ? NULL : sg_scratch(k.N * (2 * k.H + 3 * k.F));
    if (rc == SG_OK && (!slots || !scratch))
        rc = SG_ENOMEM;
    if (rc == SG_OK) {
        float *gate = act, *up = act + k.cap * k.F, *out = act + 2 * k.cap * k.F;
        const float *n2 = k.saved.p + k.l.n2, *sel = k.saved.p + k.l.sel;
        size_t e0, e1, row = 0;
        group_experts(k.m, g, &e0, &e1);
        for (size_t e = e0; e < e1 && rc == SG_OK; e++) {
            size_t n = sg_moe_expert_slots(slots, sel, k.N, k.K, e);
            if (row + n > k.cap) {
                rc = SG_EINVAL;
                break;
            }
            if (k.m->arch == SG_ARCH_GPT_OSS) {
                rc = oss_forward(&k, e, gate + row * k.F, up + row * k.F, out + row * k.H, n2,
                                 slots, n, scratch);
                row += n;
                continue;
            }
            rc = sg_moe_expert_forward(gate + row * k.F, up + row * k.F, out + row * k.H, n2, slots,
                                       NULL, n, weight(&k, k.o.ex_wg, e), weight(&k, k.o.ex_wu, e),
                                       weight(&k, k.o.ex_wd, e), k.H, k.F, k.K, scratch);
            row += n;
        }
    }
    free(slots);
    if (have_act)
        sg_f32_view_close(&av, rc == SG_OK);
    call_end(&k, rc);
    if (rc)
        sg_task_fail(c, rc, "moe_expert: a buffer is missing or memory ran out");
}

void sg_moe_combine_cpu(void *buffers[], void *arg)
{
    const sg_task_ctx *c = arg;
    moe_call k;
    int rc = call_begin(&k, c, buffers);
    const float **outs = rc ? NULL : calloc(k.N * k.K + 1, sizeof *outs);
    int32_t *slots = rc ? NULL : malloc((k.cap + 1) * sizeof *slots);
    sg_f32_view av[SG_MOE_MAX_GROUPS];
    int nav = 0;
    if (rc == SG_OK && (!outs || !slots))
        rc = SG_ENOMEM;
    for (int s = 0; rc == SG_OK && s < c->nslots; s++) {
        if (sg_arg_buffer(c, s)->role != SG_BUF_MOE_ACT)
            continue;
        int g;
        if (nav == SG_MOE_MAX_GROUPS) {
            rc = SG_EINVAL;
            break;
        }
        /* the groups' output rows only */
        if ((rc = group_act_view(&k, s, &g, &av[nav], 1, 2 * k.cap * k.F, k.cap * k.H)))
            break;
        const float *out = av[nav++].p;
        size_t n = group_slots(&k, g, slots);
        for (size_t r = 0; r < n; r++)
            outs[slots[r]] = out + r * k.H;
    }
    for (size_t i = 0; rc == SG_OK && i < k.N * k.K; i++)
        if (!outs[i]) /* a group's buffer is missing */
            rc = SG_EINVAL;
    if (rc == SG_OK && (rc = open_view(&k, &k.y, SG_BUF_ACT, k.u, 0)) == SG_OK)
        k.have_y = 1;
    if (rc == SG_OK)
        rc = sg_moe_combine_forward(k.y.p, k.saved.p + k.l.h, outs, k.saved.p + k.l.topw, k.N, k.H,
                                    k.K);
    free(outs);
    free(slots);
    while (nav > 0)
        sg_f32_view_close(&av[--nav], 0);
    call_end(&k, rc);
    if (rc)
        sg_task_fail(c, rc, "moe_combine: a buffer is missing or memory ran out");
}

/* ---- backward ----------------------------------------------------------------- */

void sg_moe_expert_bwd_cpu(void *buffers[], void *arg)
{
    const sg_task_ctx *c = arg;
    moe_call k;
    int rc = call_begin(&k, c, buffers);
    int sa = rc ? -1 : sg_arg_find(c, SG_BUF_MOE_ACT, k.u);
    int sgr = rc ? -1 : sg_arg_find(c, SG_BUF_MOE_GRAD, k.u), g = -1, g2 = -1;
    sg_f32_view av;
    int have_act = 0;
    if (rc == SG_OK)
        rc = sa < 0 ? SG_EINVAL /* gate and up */
                    : group_act_view(&k, sa, &g, &av, 1, 0, 2 * k.cap * k.F);
    have_act = rc == SG_OK;
    const float *act = have_act ? av.p : NULL;
    float *grad = sgr >= 0 ? group_buffer(&k, sgr, &g2) : NULL;
    if (rc == SG_OK && (!act || !grad || g != g2))
        rc = SG_EINVAL;
    if (rc == SG_OK)
        rc = load_params(&k);
    if (rc == SG_OK && (rc = open_view(&k, &k.dy, SG_BUF_DACT, k.u, 1)) == SG_OK)
        k.have_dy = 1;
    int32_t *slots = rc ? NULL : malloc((k.N * k.K + 1) * sizeof *slots);
    float *scratch = rc ? NULL : sg_scratch(k.N * (5 * k.H + 5 * k.F));
    if (rc == SG_OK && (!slots || !scratch))
        rc = SG_ENOMEM;
    if (rc == SG_OK) {
        const size_t HF3 = sg_moe_expert_floats(k.m); /* one expert's gradient */
        const float *gate = act, *up = act + k.cap * k.F;
        float *dx = grad, *dtopw = grad + k.cap * k.H, *dw = dtopw + k.cap;
        size_t e0, e1, row = 0;
        group_experts(k.m, g, &e0, &e1);
        memset(dw, 0, (e1 - e0) * HF3 * sizeof *dw); /* the experts' gradients, fresh */
        const float *n2 = k.saved.p + k.l.n2, *sel = k.saved.p + k.l.sel;
        const float *topw = k.saved.p + k.l.topw;
        for (size_t e = e0; e < e1 && rc == SG_OK; e++) {
            size_t n = sg_moe_expert_slots(slots, sel, k.N, k.K, e);
            if (row + n > k.cap) {
                rc = SG_EINVAL;
                break;
            }
            float *w = dw + (e - e0) * HF3;
            if (k.m->arch == SG_ARCH_GPT_OSS) { /* gate_up, its bias, down, its bias */
                size_t off[4];
                sg_oss_expert_offsets(k.m, &k.o, e, off);
                float *dgu = w, *dgub = dgu + 2 * k.F * k.H, *ddn = dgub + 2 * k.F;
                rc = sg_moe_oss_expert_backward(
                    dx + row * k.H, dtopw + row, dgu, dgub, ddn, ddn + k.F * k.H, k.dy.p, n2,
                    gate + row * k.F, up + row * k.F, topw, slots, NULL, n, k.params + off[0],
                    k.params + off[2], k.params + off[3], k.H, k.F, k.K, scratch);
                row += n;
                continue;
            }
            rc = sg_moe_expert_backward(
                dx + row * k.H, dtopw + row, w, w + k.F * k.H, w + 2 * k.F * k.H, k.dy.p, n2,
                gate + row * k.F, up + row * k.F, topw, slots, NULL, n, weight(&k, k.o.ex_wg, e),
                weight(&k, k.o.ex_wu, e), weight(&k, k.o.ex_wd, e), k.H, k.F, k.K, scratch);
            row += n;
        }
    }
    free(slots);
    if (have_act)
        sg_f32_view_close(&av, 0);
    call_end(&k, rc);
    if (rc)
        sg_task_fail(c, rc, "moe_expert_bwd: a buffer is missing or memory ran out");
}

int sg_moe_gather_backward(const sg_task_ctx *c, void *buffers[], const sg_model *m, int u,
                           size_t N, const float *saved, float *dn2, float *dtopw,
                           sg_moe_grads *grads)
{
    const size_t H = (size_t)m->hidden_size, K = (size_t)m->experts_per_token;
    const size_t cap = sg_moe_group_cap(m, N);
    moe_call k = {.c = c, .buffers = buffers, .m = m, .u = u, .N = N, .H = H, .K = K, .cap = cap};
    sg_layer_saved_layout_get(m, N, &k.l);
    k.saved.p = (float *)saved;
    const float **rows = calloc(N * K + 1, sizeof *rows);
    int32_t *slots = malloc((cap + 1) * sizeof *slots);
    int rc = rows && slots ? SG_OK : SG_ENOMEM, seen = 0;
    grads->n = 0;
    for (int s = 0; rc == SG_OK && s < c->nslots; s++) {
        if (sg_arg_buffer(c, s)->role != SG_BUF_MOE_GRAD)
            continue;
        int g;
        const float *grad = group_buffer(&k, s, &g);
        if (!grad || grads->n == SG_MOE_MAX_GROUPS) {
            rc = SG_EINVAL;
            break;
        }
        size_t n = group_slots(&k, g, slots);
        for (size_t r = 0; r < n; r++) {
            rows[slots[r]] = grad + r * H;
            dtopw[slots[r]] = grad[cap * H + r];
        }
        grads->group[grads->n] = g;
        grads->w[grads->n++] = grad + cap * (H + 1);
        seen |= 1 << g;
    }
    if (rc == SG_OK && seen != (1 << sg_moe_groups(m)) - 1)
        rc = SG_EINVAL;
    if (rc == SG_OK)
        rc = sg_moe_slots_sum(dn2, rows, N, H, K);
    free(rows);
    free(slots);
    return rc;
}

int sg_moe_add_expert_grads(const sg_model *m, int u, const sg_moe_grads *grads, float *dparams)
{
    sg_layer_param_offsets o;
    int rc = sg_layer_param_offsets_get(m, u - 1, &o);
    if (rc)
        return rc;
    for (int i = 0; i < grads->n; i++) {
        size_t e0, e1;
        group_experts(m, grads->group[i], &e0, &e1);
        if (m->arch == SG_ARCH_GPT_OSS) { /* each expert's four slices, scattered */
            const size_t I = (size_t)m->moe_intermediate_size, H = (size_t)m->hidden_size;
            const size_t len[4] = {2 * I * H, 2 * I, I * H, H};
            const float *w = grads->w[i];
            for (size_t e = e0; e < e1; e++) {
                size_t off[4];
                sg_oss_expert_offsets(m, &o, e, off);
                for (int t = 0; t < 4; t++) {
                    float *d = dparams + off[t];
                    for (size_t j = 0; j < len[t]; j++)
                        d[j] += w[j];
                    w += len[t];
                }
            }
            continue;
        }
        /* the group's experts are consecutive in the unit's layout */
        size_t n = (e1 - e0) * o.ex_stride;
        float *d = dparams + o.ex_wg + e0 * o.ex_stride;
        const float *w = grads->w[i];
        for (size_t j = 0; j < n; j++)
            d[j] += w[j];
    }
    return SG_OK;
}

/* ---- CUDA ---------------------------------------------------------------- */
/* The same three tasks on a CUDA worker, through codelets/cuda/moe_group.cu
 * on the same buffers (the activation buffers and saved in the compute
 * dtype, the gradient buffers fp32). Tested through the CPU emulator below
 * the StarPU level (tests/test_cuda_block.c), and end to end on a GPU by
 * tests/test_train_gpu.sh (which skips without one). */
#ifdef SG_STARPU_CUDA
#include "codelets/cuda/block_cuda.h"
#include "codelets/starpu/cuda_task.h"

typedef struct cuda_moe_call {
    const sg_task_ctx *c;
    void **buffers;
    const sg_model *m;
    sg_cu cu;
    int u;
    size_t B, T;
    sg_dtype dt;
    sg_cu_moe_group_io io;
    void *param_copy;
} cuda_moe_call;

/* The device pointer of the slot holding `role` for the layer, checked to be
 * of dtype dt; NULL otherwise. */
static void *cu_role_ptr(const cuda_moe_call *k, sg_buf_role role, int unit, sg_dtype dt)
{
    int s = sg_arg_find(k->c, role, unit);
    if (s < 0 || sg_arg_buffer(k->c, s)->dtype != dt)
        return NULL;
    return sg_arg_ptr(k->buffers, s);
}

static int cu_begin(cuda_moe_call *k, const sg_task_ctx *c, void **buffers, int params)
{
    memset(k, 0, sizeof *k);
    const sg_exec_shared *sh = c->shared;
    k->c = c;
    k->buffers = buffers;
    k->cu = sg_cuda_task_cu();
    k->m = sh->model;
    k->u = sh->graph->nodes[c->node].layer;
    k->B = (size_t)sh->spec->micro_batch;
    k->T = (size_t)sh->spec->seq_len;
    k->dt = sh->spec->compute_dtype;
    k->io.dt = k->dt;
    if (k->m->num_experts <= 0 || k->u < 1 || k->u > k->m->num_layers)
        return SG_EINVAL;
    if (!(k->io.saved = cu_role_ptr(k, SG_BUF_SAVED, k->u, k->dt)))
        return SG_EINVAL;
    if (params &&
        !(k->io.params = sg_cuda_unit_params(c, buffers, k->u, k->dt, &k->cu, &k->param_copy)))
        return SG_EINVAL;
    k->io.scratch =
        sg_cu_malloc_async(&k->cu, sg_cu_moe_group_scratch_bytes(k->m, k->B, k->T, k->dt));
    return k->io.scratch ? SG_OK : SG_ENOMEM;
}

static void cu_end(cuda_moe_call *k, int rc, const char *what)
{
    sg_cu_free_async(&k->cu, k->io.scratch);
    sg_cu_free_async(&k->cu, k->param_copy);
    if (rc)
        sg_cuda_task_fail(k->c, rc,
                          rc == SG_ENOMEM ? "device memory ran out"
                          : rc == SG_EIO  ? "CUDA failed"
                                          : what);
}

/* The group buffer of `role` (its group in *g), of dtype dt; NULL if absent. */
static void *cu_group_ptr(const cuda_moe_call *k, sg_buf_role role, sg_dtype dt, int *g)
{
    int s = sg_arg_find(k->c, role, k->u);
    if (s < 0)
        return NULL;
    const sg_buffer *b = sg_arg_buffer(k->c, s);
    if (b->dtype != dt || b->subgroup < 0 || b->subgroup >= sg_moe_groups(k->m))
        return NULL;
    *g = b->subgroup;
    return sg_arg_ptr(k->buffers, s);
}

void sg_moe_expert_cuda(void *buffers[], void *arg)
{
    cuda_moe_call k;
    int g = -1, rc = cu_begin(&k, arg, buffers, 1);
    if (rc == SG_OK && !(k.io.act = cu_group_ptr(&k, SG_BUF_MOE_ACT, k.dt, &g)))
        rc = SG_EINVAL;
    if (rc == SG_OK)
        rc = sg_cu_moe_group_forward(&k.cu, k.m, k.u, g, k.B, k.T, &k.io);
    cu_end(&k, rc, "moe_expert: a buffer is missing or has another dtype");
}

void sg_moe_combine_cuda(void *buffers[], void *arg)
{
    cuda_moe_call k;
    int rc = cu_begin(&k, arg, buffers, 0), n = 0;
    const void *acts[SG_MOE_MAX_GROUPS];
    int groups[SG_MOE_MAX_GROUPS];
    for (int s = 0; rc == SG_OK && s < k.c->nslots; s++) {
        const sg_buffer *b = sg_arg_buffer(k.c, s);
        if (b->role != SG_BUF_MOE_ACT)
            continue;
        if (b->dtype != k.dt || n == SG_MOE_MAX_GROUPS) {
            rc = SG_EINVAL;
            break;
        }
        acts[n] = sg_arg_ptr(buffers, s);
        groups[n++] = b->subgroup;
    }
    void *y = rc ? NULL : cu_role_ptr(&k, SG_BUF_ACT, k.u, k.dt);
    if (rc == SG_OK && !y)
        rc = SG_EINVAL;
    if (rc == SG_OK)
        rc = sg_cu_moe_combine(&k.cu, k.m, k.u, k.B, k.T, k.dt, y, k.io.saved, acts, groups, n,
                               k.io.scratch);
    cu_end(&k, rc, "moe_combine: a buffer is missing or has another dtype");
}

void sg_moe_expert_bwd_cuda(void *buffers[], void *arg)
{
    cuda_moe_call k;
    int g = -1, g2 = -1, rc = cu_begin(&k, arg, buffers, 1);
    if (rc == SG_OK && (!(k.io.act = cu_group_ptr(&k, SG_BUF_MOE_ACT, k.dt, &g)) ||
                        !(k.io.grad = cu_group_ptr(&k, SG_BUF_MOE_GRAD, SG_F32, &g2)) || g != g2))
        rc = SG_EINVAL;
    const void *dy = rc ? NULL : cu_role_ptr(&k, SG_BUF_DACT, k.u, k.dt);
    if (rc == SG_OK && !dy)
        rc = SG_EINVAL;
    if (rc == SG_OK)
        rc = sg_cu_moe_group_backward(&k.cu, k.m, k.u, g, k.B, k.T, &k.io, dy);
    cu_end(&k, rc, "moe_expert_bwd: a buffer is missing or has another dtype");
}

#endif /* SG_STARPU_CUDA */

SG_CODELET2(moe_expert, sg_moe_expert_cpu, sg_moe_expert_cuda);
SG_CODELET2(moe_combine, sg_moe_combine_cpu, sg_moe_combine_cuda);
SG_CODELET2(moe_expert_bwd, sg_moe_expert_bwd_cpu, sg_moe_expert_bwd_cuda);
