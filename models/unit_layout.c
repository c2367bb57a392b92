/* unit_layout.c - sizes and layouts of a unit's parameters, saved
 * activations and scratch (unit_layout.h). */
#include "models/unit_layout.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- which models ------------------------------------------------------- */

int sg_unit_check_model(const sg_model *m, sg_error *err)
{
    if (!m)
        return sg_error_set(err, SG_EINVAL, "unit kernels: no model");
    const int oss = m->arch == SG_ARCH_GPT_OSS;
    if (oss && m->num_experts <= 0)
        return sg_error_set(err, SG_EINVAL,
                            "model %s: gpt_oss without experts "
                            "(num_local_experts)",
                            m->name);
    if (m->num_experts > 0) {
        if (m->arch != SG_ARCH_QWEN3_MOE && m->arch != SG_ARCH_MIXTRAL && !oss)
            return sg_error_set(err, SG_ENOTSUP,
                                "model %s: mixture of experts in "
                                "architecture %s is not supported by the CPU unit kernels "
                                "(qwen3_moe, mixtral and gpt_oss are)",
                                m->name, sg_arch_name(m->arch));
        if (m->experts_per_token < 1 || m->experts_per_token > m->num_experts)
            return sg_error_set(err, SG_EINVAL,
                                "model %s: num_experts_per_tok %lld is not "
                                "between 1 and num_experts %lld",
                                m->name, (long long)m->experts_per_token,
                                (long long)m->num_experts);
        if (m->moe_intermediate_size <= 0)
            return sg_error_set(err, SG_EINVAL,
                                "model %s: no expert width "
                                "(moe_intermediate_size %lld)",
                                m->name, (long long)m->moe_intermediate_size);
        /* gpt_oss has both biases (transformers' GptOssTopKRouter and
         * GptOssExperts); qwen3_moe has neither */
        if (!oss && (m->expert_bias || m->router_bias))
            return sg_error_set(err, SG_ENOTSUP,
                                "model %s: router or expert biases are only "
                                "supported for gpt_oss",
                                m->name);
        if (oss && !(m->expert_bias && m->router_bias))
            return sg_error_set(err, SG_ENOTSUP,
                                "model %s: gpt_oss without router and "
                                "expert biases is not supported",
                                m->name);
    }
    if (m->attention_sinks && !oss)
        return sg_error_set(err, SG_ENOTSUP,
                            "model %s: attention sinks are only supported "
                            "for gpt_oss",
                            m->name);
    if (m->head_dim <= 0 || m->head_dim % 2)
        return sg_error_set(err, SG_ENOTSUP,
                            "model %s: head_dim %lld is not even "
                            "(rotary embedding pairs its halves)",
                            m->name, (long long)m->head_dim);
    if (m->num_experts == 0 && m->intermediate_size <= 0)
        return sg_error_set(err, SG_ENOTSUP,
                            "model %s: no dense MLP (intermediate_size "
                            "%lld)",
                            m->name, (long long)m->intermediate_size);
    if (m->rope_scaling < 0)
        return sg_error_set(err, SG_ENOTSUP,
                            "model %s: rope_scaling types other than "
                            "\"llama3\" and \"yarn\" are not supported by the CPU unit "
                            "kernels",
                            m->name);
    return 0;
}

/* ---- parameter offsets ---------------------------------------------------- */

/* Offset of the tensor whose name ends in `suffix`, or SG_NO_OFFSET. */
static size_t find_offset(const sg_tensor_info *t, int n, const char *suffix)
{
    size_t off = 0, ls = strlen(suffix);
    for (int i = 0; i < n; i++) {
        size_t ln = strlen(t[i].name);
        if (ln >= ls && strcmp(t[i].name + ln - ls, suffix) == 0)
            return off;
        off += (size_t)t[i].numel;
    }
    return SG_NO_OFFSET;
}

static size_t total_floats(const sg_tensor_info *t, int n)
{
    size_t s = 0;
    for (int i = 0; i < n; i++)
        s += (size_t)t[i].numel;
    return s;
}

/* qwen3_moe and mixtral: the router and expert e's projections, each
 * expert's three tensors (gate, up, down) one after the other with the same
 * stride (checked name by name). */
static int moe_offsets(const sg_model *m, int layer, const sg_tensor_info *t, int n,
                       sg_layer_param_offsets *o)
{
    char name[SG_TENSOR_NAME_MAX];
    const int mix = m->arch == SG_ARCH_MIXTRAL; /* MixtralSparseMoeBlock's names */
    o->router = find_offset(t, n, mix ? ".block_sparse_moe.gate.weight" : ".mlp.gate.weight");
    const size_t IH = (size_t)m->moe_intermediate_size * (size_t)m->hidden_size;
    o->ex_stride = 3 * IH;
    for (int64_t e = 0; e < m->num_experts; e++) {
        static const char *const proj[] = {"gate_proj", "up_proj", "down_proj"};
        static const char *const w[] = {"w1", "w3", "w2"};
        for (int j = 0; j < 3; j++) {
            snprintf(name, sizeof name, "model.layers.%d.%s.experts.%lld.%s.weight", layer,
                     mix ? "block_sparse_moe" : "mlp", (long long)e, mix ? w[j] : proj[j]);
            size_t off = find_offset(t, n, name);
            if (e == 0 && j == 0)
                o->ex_wg = off;
            if (off == SG_NO_OFFSET || o->ex_wg == SG_NO_OFFSET ||
                off != o->ex_wg + (size_t)e * o->ex_stride + (size_t)j * IH)
                return SG_EINVAL;
        }
    }
    o->ex_wu = o->ex_wg + IH;
    o->ex_wd = o->ex_wg + 2 * IH;
    return o->router == SG_NO_OFFSET ? SG_EINVAL : 0;
}

/* gpt_oss: the router (weight and bias) and the four fused expert tensors,
 * each required (a weights file without one is refused before this). */
static int oss_offsets(const sg_model *m, const sg_tensor_info *t, int n, sg_layer_param_offsets *o)
{
    o->router = find_offset(t, n, ".mlp.router.weight");
    o->router_b = find_offset(t, n, ".mlp.router.bias");
    o->ex_gu = find_offset(t, n, ".mlp.experts.gate_up_proj");
    o->ex_gub = find_offset(t, n, ".mlp.experts.gate_up_proj_bias");
    o->ex_dn = find_offset(t, n, ".mlp.experts.down_proj");
    o->ex_dnb = find_offset(t, n, ".mlp.experts.down_proj_bias");
    const size_t need[] = {o->router, o->router_b, o->ex_gu, o->ex_gub, o->ex_dn, o->ex_dnb};
    for (size_t i = 0; i < sizeof need / sizeof need[0]; i++)
        if (need[i] == SG_NO_OFFSET)
            return SG_EINVAL;
    (void)m;
    return 0;
}

void sg_oss_expert_offsets(const sg_model *m, const sg_layer_param_offsets *o, size_t e,
                           size_t off[4])
{
    const size_t I = (size_t)m->moe_intermediate_size, H = (size_t)m->hidden_size;
    off[0] = o->ex_gu + e * H * 2 * I;
    off[1] = o->ex_gub + e * 2 * I;
    off[2] = o->ex_dn + e * I * H;
    off[3] = o->ex_dnb + e * H;
}

/* phi3: q, k and v are consecutive row blocks of the fused qkv_proj (QW +
 * 2 KW, H), gate and up the two halves of gate_up_proj (2 I, H) */
static void phi3_offsets(const sg_model *m, const sg_tensor_info *t, int n,
                         sg_layer_param_offsets *o)
{
    const size_t H = (size_t)m->hidden_size, D = (size_t)m->head_dim;
    const size_t QW = (size_t)m->num_heads * D, KW = (size_t)m->num_kv_heads * D;
    o->wq = find_offset(t, n, ".self_attn.qkv_proj.weight");
    o->wk = o->wq == SG_NO_OFFSET ? SG_NO_OFFSET : o->wq + QW * H;
    o->wv = o->wq == SG_NO_OFFSET ? SG_NO_OFFSET : o->wq + (QW + KW) * H;
    o->bq = o->bk = o->bv = SG_NO_OFFSET;
    o->wg = find_offset(t, n, ".mlp.gate_up_proj.weight");
    o->wu = o->wg == SG_NO_OFFSET ? SG_NO_OFFSET : o->wg + (size_t)m->intermediate_size * H;
    o->wd = find_offset(t, n, ".mlp.down_proj.weight");
}

int sg_layer_param_offsets_get(const sg_model *m, int layer, sg_layer_param_offsets *o)
{
    int rc = sg_unit_check_model(m, NULL);
    if (rc < 0)
        return rc;
    if (layer < 0 || layer >= m->num_layers)
        return SG_EINVAL;
    int n = sg_model_unit_tensors(m, layer + 1, NULL, 0);
    if (n < 0)
        return n;
    sg_tensor_info *t = malloc((size_t)(n > 0 ? n : 1) * sizeof *t);
    if (!t)
        return SG_ENOMEM;
    n = sg_model_unit_tensors(m, layer + 1, t, n);
    rc = n < 0 ? n : 0;
    o->ln1 = find_offset(t, n, ".input_layernorm.weight");
    if (m->arch == SG_ARCH_PHI3) {
        phi3_offsets(m, t, n, o);
    } else {
        o->wq = find_offset(t, n, ".self_attn.q_proj.weight");
        o->bq = find_offset(t, n, ".self_attn.q_proj.bias");
        o->wk = find_offset(t, n, ".self_attn.k_proj.weight");
        o->bk = find_offset(t, n, ".self_attn.k_proj.bias");
        o->wv = find_offset(t, n, ".self_attn.v_proj.weight");
        o->bv = find_offset(t, n, ".self_attn.v_proj.bias");
        o->wg = find_offset(t, n, ".mlp.gate_proj.weight");
        o->wu = find_offset(t, n, ".mlp.up_proj.weight");
        o->wd = find_offset(t, n, ".mlp.down_proj.weight");
    }
    o->wo = find_offset(t, n, ".self_attn.o_proj.weight");
    o->bo = find_offset(t, n, ".self_attn.o_proj.bias");
    o->q_norm = find_offset(t, n, ".self_attn.q_norm.weight");
    o->k_norm = find_offset(t, n, ".self_attn.k_norm.weight");
    o->ln2 = find_offset(t, n, ".post_attention_layernorm.weight");
    o->sinks = find_offset(t, n, ".self_attn.sinks");
    o->router = o->ex_wg = o->ex_wu = o->ex_wd = SG_NO_OFFSET;
    o->router_b = o->ex_gu = o->ex_gub = o->ex_dn = o->ex_dnb = SG_NO_OFFSET;
    o->ex_stride = 0;
    if (m->num_experts > 0) {
        o->wg = o->wu = o->wd = SG_NO_OFFSET;
        if (!rc)
            rc = m->arch == SG_ARCH_GPT_OSS ? oss_offsets(m, t, n, o)
                                            : moe_offsets(m, layer, t, n, o);
    } else {
        if (o->wg == SG_NO_OFFSET || o->wu == SG_NO_OFFSET || o->wd == SG_NO_OFFSET)
            rc = SG_EINVAL;
    }
    o->total = total_floats(t, n);
    free(t);
    if (rc)
        return rc;
    const size_t need[] = {o->ln1, o->wq, o->wk, o->wv, o->wo, o->ln2};
    for (size_t i = 0; i < sizeof need / sizeof need[0]; i++)
        if (need[i] == SG_NO_OFFSET)
            return SG_EINVAL;
    if (m->qk_norm && (o->q_norm == SG_NO_OFFSET || o->k_norm == SG_NO_OFFSET))
        return SG_EINVAL;
    if (m->attention_sinks && o->sinks == SG_NO_OFFSET)
        return SG_EINVAL;
    return 0;
}

int sg_head_param_offsets_get(const sg_model *m, sg_head_param_offsets *o)
{
    if (!m)
        return SG_EINVAL;
    sg_tensor_info t[2];
    int n = sg_model_unit_tensors(m, (int)m->num_layers + 1, t, 2);
    if (n < 0)
        return n;
    o->norm = find_offset(t, n, "model.norm.weight");
    o->lm_head = find_offset(t, n, "lm_head.weight");
    o->total = total_floats(t, n);
    if (o->norm == SG_NO_OFFSET || (!m->tie_word_embeddings && o->lm_head == SG_NO_OFFSET))
        return SG_EINVAL;
    return 0;
}

/* ---- saved activations ------------------------------------------------- */

/* Returns the offset of a region of n floats and moves *at past it. */
static size_t take(size_t *at, size_t n)
{
    size_t off = *at;
    *at += n;
    return off;
}

void sg_layer_saved_layout_get(const sg_model *m, size_t N, sg_layer_saved_layout *l)
{
    const size_t H = (size_t)m->hidden_size, D = (size_t)m->head_dim;
    const size_t Hq = (size_t)m->num_heads, Hkv = (size_t)m->num_kv_heads;
    const size_t Q = Hq * D, KV = Hkv * D;
    /* MoE: no gate and up here: the expert tasks keep their own (and the
     * one-task path of codelets/cpu/block.c recomputes them) */
    const size_t moe = m->num_experts > 0 ? 1 : 0, E = (size_t)m->num_experts;
    const size_t K = (size_t)m->experts_per_token;
    const size_t F = moe ? 0 : (size_t)m->intermediate_size;
    const size_t qk = m->qk_norm ? 1 : 0;
    size_t at = 0;
    l->n1 = take(&at, N * H);
    l->h = take(&at, N * H);
    l->n2 = take(&at, N * H);
    l->q = take(&at, N * Q);
    l->k = take(&at, N * KV);
    l->v = take(&at, N * KV);
    l->att = take(&at, N * Q);
    l->gate = take(&at, N * F);
    l->up = take(&at, N * F);
    l->qpre = take(&at, qk * N * Q);
    l->kpre = take(&at, qk * N * KV);
    l->probs = take(&at, moe * N * E);
    l->rstd1 = take(&at, N);
    l->rstd2 = take(&at, N);
    l->lse = take(&at, N * Hq);
    l->rstdq = take(&at, qk * N * Hq);
    l->rstdk = take(&at, qk * N * Hkv);
    l->sel = take(&at, moe * N * K);
    l->topw = take(&at, moe * N * K);
    l->total = at;
}

void sg_head_saved_layout_get(const sg_model *m, size_t N, sg_head_saved_layout *l)
{
    const size_t H = (size_t)m->hidden_size;
    size_t at = 0;
    l->n = take(&at, N * H);
    l->rstd = take(&at, N);
    l->lse = take(&at, N);
    l->total = at;
}

size_t sg_head_chunk_tokens(const sg_model *m, size_t N)
{
    if (N == 0)
        return 0;
    size_t c;
    if (m->head_chunk_tokens > 0) {
        c = (size_t)m->head_chunk_tokens;
    } else {
        const size_t row = (size_t)(m->vocab_size > 0 ? m->vocab_size : 1) * sizeof(float);
        c = SG_HEAD_CHUNK_BUDGET_BYTES / row;
    }
    if (c < 1)
        c = 1;
    return c < N ? c : N;
}

/* Width of the MLP a token goes through: top-k experts for MoE. */
static size_t active_mlp_width(const sg_model *m)
{
    return m->num_experts > 0 ? (size_t)m->experts_per_token * (size_t)m->moe_intermediate_size
                              : (size_t)m->intermediate_size;
}

/* Per token, for a layer sg_unit_check_model refuses (e.g. an MoE
 * architecture without kernels, a model with an odd head_dim): four H-wide
 * activations (n1, h, n2, the router input), q and the attention output, k
 * and v, three MLP-wide ones per active expert width (gate, up, their
 * product) and the router logits. Only an estimate for the step compiler's
 * buffer sizes: no kernel runs these layers. */
static size_t estimate_layer_per_token(const sg_model *m)
{
    const size_t H = (size_t)m->hidden_size, D = (size_t)m->head_dim;
    const size_t Q = (size_t)m->num_heads * D, KV = (size_t)m->num_kv_heads * D;
    return 4 * H + 2 * Q + 2 * KV + 3 * active_mlp_width(m) + (size_t)m->num_experts;
}

static int unit_kind(const sg_model *m, int unit) /* 0 embed, 1 layer, 2 head, -1 bad */
{
    if (!m || unit < 0 || unit > m->num_layers + 1)
        return -1;
    return unit == 0 ? 0 : unit <= m->num_layers ? 1 : 2;
}

size_t sg_unit_saved_floats(const sg_model *m, int unit, size_t B, size_t T)
{
    const size_t N = B * T;
    switch (unit_kind(m, unit)) {
    case 1:
        if (sg_unit_check_model(m, NULL))
            return N * estimate_layer_per_token(m);
        sg_layer_saved_layout l;
        sg_layer_saved_layout_get(m, N, &l);
        return l.total;
    case 2: {
        sg_head_saved_layout h;
        sg_head_saved_layout_get(m, N, &h);
        return h.total;
    }
    default: return 0;
    }
}

/* ---- scratch ------------------------------------------------------------- */
/* block.c carves its scratch in the order written here; it checks every
 * region against sg_unit_scratch_floats, so a mismatch is an error there,
 * never an overrun. */

/* Forward: the saved activations (when saved == NULL), then
 * act = silu(gate) * up (N, F). */
static size_t layer_forward_scratch(const sg_model *m, size_t N)
{
    sg_layer_saved_layout l;
    sg_layer_saved_layout_get(m, N, &l);
    return l.total + (m->num_experts > 0 ? sg_moe_forward_scratch_floats(m, N)
                                         : N * (size_t)m->intermediate_size);
}

/* MoE forward (codelets/cpu/block.c carves it in this order): router logits
 * (N, E); one expert's rows: x (N, H), gate, up, act (N, I), out (N, H); the
 * expert output, gate and up of every (token, slot) (N, k, H + 2 I). */
size_t sg_moe_forward_scratch_floats(const sg_model *m, size_t N)
{
    const size_t H = (size_t)m->hidden_size, I = (size_t)m->moe_intermediate_size;
    const size_t E = (size_t)m->num_experts, K = (size_t)m->experts_per_token;
    return N * E + 2 * N * H + 3 * N * I + N * K * (H + 2 * I);
}

/* MoE backward (same): dweights (N, k), dprobs / dlogits (N, E), dn2 of
 * every (token, slot) (N, k, H); one expert's rows: x, out, dout, dx, tmp
 * (N, H), gate, up, act, dact, dup (N, I); dn2 (N, H); gate and up of every
 * slot, recomputed (N, k, 2 I). */
size_t sg_moe_backward_scratch_floats(const sg_model *m, size_t N)
{
    const size_t H = (size_t)m->hidden_size, I = (size_t)m->moe_intermediate_size;
    const size_t E = (size_t)m->num_experts, K = (size_t)m->experts_per_token;
    return N * K + N * E + N * K * H + 5 * N * H + 5 * N * I + N * H + 2 * N * K * I;
}

/* Backward, two phases sharing the same space:
 *   MLP:       act/dgate, dact, dup (N, F); dn2, tmp (N, H)
 *   attention: datt/dqpre, dq (N, Q); dk, dv, dkpre (N, KV); dn1, tmp (N, H) */
static size_t layer_backward_scratch(const sg_model *m, size_t N)
{
    const size_t H = (size_t)m->hidden_size, D = (size_t)m->head_dim;
    const size_t Q = (size_t)m->num_heads * D, KV = (size_t)m->num_kv_heads * D;
    const size_t F = (size_t)m->intermediate_size;
    size_t mlp = m->num_experts > 0 ? sg_moe_backward_scratch_floats(m, N) : 3 * N * F + 2 * N * H;
    size_t attn = 2 * N * Q + (m->qk_norm ? 3 : 2) * N * KV + 2 * N * H;
    return mlp > attn ? mlp : attn;
}

/* Forward: the saved activations (when saved == NULL), then one chunk's
 * logits (C, V). Backward: one chunk's logits, recomputed and turned into
 * dlogits in place (C, V), and dn (N, H). C = sg_head_chunk_tokens. */
static size_t head_scratch(const sg_model *m, size_t N)
{
    sg_head_saved_layout h;
    sg_head_saved_layout_get(m, N, &h);
    const size_t CV = sg_head_chunk_tokens(m, N) * (size_t)m->vocab_size;
    size_t fwd = h.total + CV;
    size_t bwd = CV + N * (size_t)m->hidden_size;
    return fwd > bwd ? fwd : bwd;
}

size_t sg_unit_scratch_floats(const sg_model *m, int unit, size_t B, size_t T)
{
    const size_t N = B * T;
    switch (unit_kind(m, unit)) {
    case 1: {
        if (sg_unit_check_model(m, NULL)) /* estimate: saved + MLP backward */
            return N * (estimate_layer_per_token(m) + 3 * active_mlp_width(m) +
                        2 * (size_t)m->hidden_size);
        size_t f = layer_forward_scratch(m, N), b = layer_backward_scratch(m, N);
        return f > b ? f : b;
    }
    case 2: return head_scratch(m, N);
    default: return 0;
    }
}

size_t sg_moe_stats_floats(const sg_model *m)
{
    return m && m->num_experts > 0 ? 2 * (size_t)m->num_experts : 0;
}

/* ---- experts as tasks ------------------------------------------------------ */

int sg_moe_groups(const sg_model *m)
{
    if (!m || m->num_experts <= 0)
        return 0;
    return m->num_experts < SG_MOE_MAX_GROUPS ? (int)m->num_experts : SG_MOE_MAX_GROUPS;
}

int sg_moe_group_experts(const sg_model *m)
{
    int g = sg_moe_groups(m);
    return g ? (int)((m->num_experts + g - 1) / g) : 0;
}

size_t sg_moe_group_cap(const sg_model *m, size_t N)
{
    size_t ge = (size_t)sg_moe_group_experts(m), k = (size_t)m->experts_per_token;
    return N * (ge < k ? ge : k);
}

size_t sg_moe_group_act_floats(const sg_model *m, size_t N)
{
    const size_t I = (size_t)m->moe_intermediate_size, H = (size_t)m->hidden_size;
    return sg_moe_group_cap(m, N) * (2 * I + H);
}

size_t sg_moe_group_grad_floats(const sg_model *m, size_t N)
{
    const size_t H = (size_t)m->hidden_size;
    return sg_moe_group_cap(m, N) * (H + 1) +
           (size_t)sg_moe_group_experts(m) * sg_moe_expert_floats(m);
}

size_t sg_moe_expert_floats(const sg_model *m)
{
    const size_t I = (size_t)m->moe_intermediate_size, H = (size_t)m->hidden_size;
    return 3 * I * H + (m->arch == SG_ARCH_GPT_OSS ? 2 * I + H : 0);
}
