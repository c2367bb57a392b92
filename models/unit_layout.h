/* unit_layout.h - the memory layout of a graph unit (models/model.h: the
 * embedding, a decoder layer, or the head): which models the unit kernels
 * run, where each tensor sits in a unit's flat parameter vector, where each
 * saved activation sits in its `saved` buffer, and how much scratch the
 * kernels need. The step compiler (graph/compile.c) sizes its buffers with
 * it; the kernels (codelets/cpu/block.h, codelets/cuda/) address them with
 * it. Pure C, no BLAS: it also sizes models the kernels cannot run.
 */
#ifndef SG_MODELS_UNIT_LAYOUT_H
#define SG_MODELS_UNIT_LAYOUT_H

#include <stddef.h>

#include "common/error.h"
#include "models/model.h"

/* Refuses, with a message naming the model and the feature, a model the unit
 * functions cannot run (MoE other than qwen3_moe, mixtral and gpt_oss, biases
 * or attention sinks outside gpt_oss, rope_scaling other than llama3 and
 * yarn). */
int sg_unit_check_model(const sg_model *m, sg_error *err);

/* Floats the forward of `unit` saves for its backward, for B sequences of T
 * tokens (0 for the embedding). For a model sg_unit_check_model refuses (the
 * step compiler still sizes its graph, e.g. for `graph` or `simulate`), an
 * estimate of the same order. */
size_t sg_unit_saved_floats(const sg_model *m, int unit, size_t B, size_t T);

/* Floats of scratch memory sg_unit_forward and sg_unit_backward need for
 * `unit` (the larger of the two; includes room for the saved activations
 * when the forward is called with saved == NULL). */
size_t sg_unit_scratch_floats(const sg_model *m, int unit, size_t B, size_t T);

/* Where a unit's tensors sit in its flat parameter vector, in floats, found
 * by walking sg_model_unit_tensors(); SG_NO_OFFSET for a tensor the model
 * does not have (biases, QK-norm weights, the tied lm_head). */
#define SG_NO_OFFSET ((size_t)-1)

typedef struct sg_layer_param_offsets {
    size_t ln1, wq, bq, wk, bk, wv, bv, wo, bo, q_norm, k_norm, ln2, wg, wu, wd;
    /* qwen3_moe and mixtral (else SG_NO_OFFSET, wg / wu / wd are then
     * SG_NO_OFFSET): the router (E, H) and expert 0's gate_proj, up_proj
     * (I, H), down_proj (H, I) (Mixtral's w1, w3, w2); expert e's are
     * ex_stride * e floats further. phi3: wq, wk, wv inside qkv_proj, wg, wu
     * inside gate_up_proj */
    size_t router, ex_wg, ex_wu, ex_wd, ex_stride;
    /* gpt_oss (else SG_NO_OFFSET): the router's bias (E), the attention sinks
     * (heads), and the fused expert tensors of transformers' GptOssExperts:
     * gate_up_proj (E, H, 2 I), gate_up_proj_bias (E, 2 I), down_proj
     * (E, I, H), down_proj_bias (E, H); expert e's slice of each is e times
     * its per-expert size further (ex_wg .. ex_wd and ex_stride are then
     * SG_NO_OFFSET and 0) */
    size_t router_b, sinks, ex_gu, ex_gub, ex_dn, ex_dnb;
    size_t total; /* floats of the unit */
} sg_layer_param_offsets;

typedef struct sg_head_param_offsets {
    size_t norm, lm_head; /* lm_head: SG_NO_OFFSET when tied */
    size_t total;
} sg_head_param_offsets;

/* gpt_oss: where expert e's slices of the fused tensors start (floats into
 * the unit's parameters or gradient): off[0] gate_up_proj (H, 2 I), off[1]
 * its bias (2 I), off[2] down_proj (I, H), off[3] its bias (H). */
void sg_oss_expert_offsets(const sg_model *m, const sg_layer_param_offsets *o, size_t e,
                           size_t off[4]);

/* SG_EINVAL when `layer` (HF index) is out of range or a required tensor is
 * missing from the list; SG_ENOTSUP for a model sg_unit_check_model refuses. */
int sg_layer_param_offsets_get(const sg_model *m, int layer, sg_layer_param_offsets *o);
int sg_head_param_offsets_get(const sg_model *m, sg_head_param_offsets *o);

/* A decoder layer's saved activations: offsets in floats from the start of
 * `saved`, for N = B*T tokens, Q = heads*D, KV = kv_heads*D, F =
 * intermediate_size. Big arrays first, then the per-row statistics, packed
 * without gaps (every float of `saved` is written by the forward):
 *   n1 (N, H)    input_layernorm(x)              h (N, H)   x + o_proj(att)
 *   n2 (N, H)    post_attention_layernorm(h)
 *   q (N, Q), k (N, KV)  after QK-norm and rope  v (N, KV)
 *   att (N, Q)   attention output (o_proj input)
 *   gate, up (N, F)  MLP projections (silu(gate) * up is recomputed)
 *   qpre (N, Q), kpre (N, KV)  q, k before QK-norm (qk_norm only, else 0 long)
 *   rstd1, rstd2 (N)  the two norms' 1/rms       lse (B, Hq, T) attention
 *   rstdq (N*Hq), rstdk (N*Hkv)  QK-norm 1/rms (qk_norm only)
 * Mixture of experts (qwen3_moe; 0 long otherwise), with k = top-k:
 *   gate, up      0 long (the expert tasks keep their own)
 *   probs (N, E)  the router's softmax (fp32)
 *   sel (N, k)    the chosen experts, as floats (exact below 2^24)
 *   topw (N, k)   their weights (renormalised when norm_topk_prob) */
typedef struct sg_layer_saved_layout {
    size_t n1, h, n2, q, k, v, att, gate, up, qpre, kpre, probs;
    size_t rstd1, rstd2, lse, rstdq, rstdk, sel, topw;
    size_t total;
} sg_layer_saved_layout;

/* The head's saved activations:
 *   n (N, H) = norm(x), rstd (N), lse (N) of the logits.
 * No logits: the head works on chunks of sg_head_chunk_tokens tokens. The
 * forward computes one chunk's logits (C, V) in scratch, takes their
 * log-sum-exp and loss, and moves on; the backward recomputes them chunk by
 * chunk from n, turns them into dlogits in place and accumulates dW and dn
 * (as Cut Cross-Entropy does). Memory is O(N H + C V) instead of O(N V);
 * the price is one more (N, H) x (H, V) product in the backward. */
typedef struct sg_head_saved_layout {
    size_t n, rstd, lse;
    size_t total;
} sg_head_saved_layout;

/* Budget of one chunk's fp32 logits when head_chunk_tokens is auto. */
#define SG_HEAD_CHUNK_BUDGET_BYTES ((size_t)256 << 20)

/* Tokens per chunk of the head for N tokens: m->head_chunk_tokens when > 0,
 * else auto: as many as keep C x V x 4 bytes within
 * SG_HEAD_CHUNK_BUDGET_BYTES (at least 1); never more than N (0 for N = 0).
 * GPT-OSS (V = 201,088): 333 tokens; Llama 3 (V = 128,256): 523. */
size_t sg_head_chunk_tokens(const sg_model *m, size_t N);

/* Scratch floats of the MoE MLP's forward and backward for N tokens
 * (codelets/cpu/moe.c); part of sg_unit_scratch_floats. */
size_t sg_moe_forward_scratch_floats(const sg_model *m, size_t N);
size_t sg_moe_backward_scratch_floats(const sg_model *m, size_t N);

/* Experts as tasks: a MoE layer's experts run in sg_moe_groups() tasks of
 * sg_moe_group_experts() consecutive experts each (the last may hold fewer):
 * at most SG_MOE_MAX_GROUPS, so a layer's tasks stay in the 1-10 ms range a
 * StarPU task should have and the workers of one socket all get work.
 * Group g's slots are those of its experts, expert by expert, each in token
 * order; a group has at most N min(experts, k) of them (capacity: every
 * token could pick it; exact token counts vary per batch).
 * Its forward buffer: gate, up (cap, I), out (cap, H), rows in slot order.
 * Its backward buffer: dx (cap, H), dweight (cap), then its experts' weight
 * gradients (experts x sg_moe_expert_floats). */
#define SG_MOE_MAX_GROUPS 8
int sg_moe_groups(const sg_model *m);
int sg_moe_group_experts(const sg_model *m);
size_t sg_moe_group_cap(const sg_model *m, size_t N);
size_t sg_moe_group_act_floats(const sg_model *m, size_t N);
size_t sg_moe_group_grad_floats(const sg_model *m, size_t N);

/* Floats of one expert's parameters (and of its gradient in a group's
 * backward buffer): qwen3_moe 3 I H (gate_proj, up_proj, down_proj, the
 * unit's layout); gpt_oss 3 I H + 2 I + H, laid out gate_up (H, 2 I),
 * gate_up bias (2 I), down (I, H), down bias (H) (its slices of the fused
 * tensors, gathered). */
size_t sg_moe_expert_floats(const sg_model *m);

/* Floats of the MoE statistics buffer a micro-step's layers share for the
 * load-balancing loss: per expert, its top-k picks then its router
 * probabilities, summed over tokens and layers (2 E; 0 for a dense model). */
size_t sg_moe_stats_floats(const sg_model *m);

void sg_layer_saved_layout_get(const sg_model *m, size_t N, sg_layer_saved_layout *l);
void sg_head_saved_layout_get(const sg_model *m, size_t N, sg_head_saved_layout *l);

#endif /* SG_MODELS_UNIT_LAYOUT_H */
