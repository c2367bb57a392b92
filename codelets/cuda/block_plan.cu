/* block_plan.cu - the scratch plans of the GPU units (block_impl.h): byte
 * offsets of the regions a layer's forward, its MLP, attention and MoE
 * backwards and the head's forward and backward carve from io->scratch.
 * sg_cu_unit_scratch_bytes (block.cu) sizes the scratch with the same
 * functions, so sizing and carving cannot disagree.
 */

#include "codelets/cuda/cuda_prologue.h"

#include "codelets/cuda/block_impl.h"

/* Offset of a region of `bytes` at *at (rounded up), and moves *at past it. */
static size_t put(size_t *at, size_t bytes)
{
    size_t off = (*at + SG_CU_SCRATCH_ALIGN - 1) / SG_CU_SCRATCH_ALIGN * SG_CU_SCRATCH_ALIGN;
    *at = off + bytes;
    return off;
}

layer_fwd_plan sg_cu_plan_layer_fwd(const dims *d, size_t saved_elems, int saved_here, int with_y)
{
    layer_fwd_plan p;
    size_t at = 0;
    p.saved = saved_here ? put(&at, saved_elems * d->es) : SG_NO_OFFSET;
    p.act = with_y ? put(&at, d->N * d->F * d->es) : SG_NO_OFFSET;
    p.end = at;
    return p;
}

mlp_bwd_plan sg_cu_plan_mlp_bwd(const dims *d)
{
    mlp_bwd_plan p;
    size_t at = 0, NF = d->N * d->F * d->es, NH = d->N * d->H * d->es;
    p.act = put(&at, NF);
    p.dact = put(&at, NF);
    p.dup = put(&at, NF);
    p.dn2 = put(&at, NH);
    p.tmp = put(&at, NH);
    p.work = put(&at, sg_cu_rmsnorm_backward_work_floats(d->N, d->H) * sizeof(float));
    p.end = at;
    return p;
}

/* fp32 work the attention half's kernels need; one area serves them all as
 * they run one after the other on the stream. */
static size_t attn_bwd_work_floats(const sg_model *m, const dims *d)
{
    size_t w = sg_cu_attention_backward_work_floats(d->B, d->T, d->Hq, d->Hkv, d->D);
    w = max2(w, sg_cu_rmsnorm_backward_work_floats(d->N, d->H)); /* input_layernorm */
    if (m->o_bias)
        w = max2(w, sg_cu_linear_backward_work_floats(d->N, d->H));
    if (m->qkv_bias) {
        w = max2(w, sg_cu_linear_backward_work_floats(d->N, d->Q));
        w = max2(w, sg_cu_linear_backward_work_floats(d->N, d->KV));
    }
    if (m->qk_norm) {
        w = max2(w, sg_cu_rmsnorm_backward_work_floats(d->N * d->Hq, d->D));
        w = max2(w, sg_cu_rmsnorm_backward_work_floats(d->N * d->Hkv, d->D));
    }
    return w;
}

attn_bwd_plan sg_cu_plan_attn_bwd(const sg_model *m, const dims *d)
{
    attn_bwd_plan p;
    size_t at = 0, es = d->es;
    p.datt = put(&at, d->N * d->Q * es);
    p.dq = put(&at, d->N * d->Q * es);
    p.dk = put(&at, d->N * d->KV * es);
    p.dv = put(&at, d->N * d->KV * es);
    p.dkpre = m->qk_norm ? put(&at, d->N * d->KV * es) : SG_NO_OFFSET;
    p.dn1 = put(&at, d->N * d->H * es);
    p.tmp = put(&at, d->N * d->H * es);
    p.work = put(&at, attn_bwd_work_floats(m, d) * sizeof(float));
    p.end = at;
    return p;
}

moe_plan sg_cu_plan_moe(const sg_model *m, const dims *d, size_t at, int bwd)
{
    moe_plan p;
    memset(&p, 0xff, sizeof p); // SG_NO_OFFSET everywhere
    const size_t E = (size_t)m->num_experts, K = (size_t)m->experts_per_token;
    const size_t F = (size_t)m->moe_intermediate_size, N = d->N, NK = N * K, es = d->es;
    p.probs = put(&at, N * E * sizeof(float));
    p.sel = put(&at, NK * sizeof(float));
    p.topw = put(&at, NK * sizeof(float));
    p.slots = put(&at, NK * sizeof(int32_t));
    p.counts = put(&at, E * sizeof(int32_t));
    p.gate = put(&at, NK * F * es);
    p.up = put(&at, NK * F * es);
    p.ptrs = put(&at, NK * sizeof(void *));
    p.ex = put(&at, sg_cu_moe_expert_work_bytes(N, d->H, F, d->dt));
    if (!bwd) {
        p.logits = put(&at, N * E * sizeof(float));
        p.outs = put(&at, NK * d->H * es);
    } else {
        p.dtopw = put(&at, NK * sizeof(float));
        p.dtopw_rows = put(&at, NK * sizeof(float));
        p.dlogits = put(&at, N * E * es);
        p.dxs = put(&at, NK * d->H * es);
        p.dn2 = put(&at, N * d->H * es);
        p.tmp = put(&at, N * d->H * es);
        p.rwork = put(&at, sg_cu_moe_router_backward_work_floats(N, E) * sizeof(float));
        p.nwork = put(&at, sg_cu_rmsnorm_backward_work_floats(N, d->H) * sizeof(float));
    }
    p.end = at;
    return p;
}

head_fwd_plan sg_cu_plan_head_fwd(const dims *d, size_t C, size_t saved_elems, int saved_here,
                                  int loss_here)
{
    head_fwd_plan p;
    size_t at = 0;
    p.saved = saved_here ? put(&at, saved_elems * d->es) : SG_NO_OFFSET;
    p.loss = loss_here ? put(&at, sizeof(float)) : SG_NO_OFFSET;
    p.logits = put(&at, C * d->V * d->es);
    p.work = put(&at, sg_cu_cross_entropy_work_floats(d->N) * sizeof(float));
    p.end = at;
    return p;
}

head_bwd_plan sg_cu_plan_head_bwd(const dims *d, size_t C)
{
    head_bwd_plan p;
    size_t at = 0;
    p.logits = put(&at, C * d->V * d->es);
    p.dn = put(&at, d->N * d->H * d->es);
    p.weight = put(&at, sizeof(float));
    p.work = put(&at, sg_cu_rmsnorm_backward_work_floats(d->N, d->H) * sizeof(float));
    p.end = at;
    return p;
}
