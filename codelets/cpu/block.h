/* block.h - forward and backward of one graph unit (the token embedding, a
 * decoder layer, or the final norm + output head + loss), composed from the
 * kernels of ops.h. fp32, one thread, no StarPU: the StarPU codelets of the
 * forward, recompute and backward nodes call these.
 *
 * Units are those of models/model.h: 0 = embedding, 1..L = decoder layers
 * (Hugging Face layer unit-1), L+1 = head. A unit's parameters are one flat
 * fp32 vector: its tensors in sg_model_unit_tensors() order, concatenated
 * (the order they are packed into optimizer sub-groups); its gradient has the
 * same layout.
 *
 * A decoder layer follows Hugging Face's LlamaDecoderLayer / Qwen3DecoderLayer:
 *   h = x + o_proj(attn(rope(qk_norm(q_proj(n1))), rope(qk_norm(k_proj(n1))), v_proj(n1)))
 *   y = h + down_proj(silu(gate_proj(n2)) * up_proj(n2))
 * with n1 = input_layernorm(x), n2 = post_attention_layernorm(h), optional
 * q/k/v and o biases, QK-norm (Qwen3: RMSNorm over head_dim with q_norm /
 * k_norm) and a sliding window where model->layer_attn says so (a query at
 * t sees keys t - sliding_window + 1 .. t, as transformers'
 * sliding_window_overlay). A qwen3_moe layer replaces the MLP by
 * Qwen3MoeSparseMoeBlock (codelets/cpu/moe.c): router, top-k experts, their
 * weighted sum, and the load-balancing loss (io->moe_stats) that the head
 * adds to the loss, scaled by router_aux_loss_coef. A gpt_oss layer has
 * q/k/v/o biases, learned attention sinks (one logit per query head, an
 * extra softmax column dropped after it: codelets/cpu/attention.c), sliding
 * and full layers as layer_types says, and GptOssMLP: a router with a bias,
 * top-k on the logits, softmax over the k, clamped SwiGLU experts with
 * biases (codelets/cpu/gpt_oss.c).
 *
 * The head: n = norm(x); logits = n @ W^T (W = lm_head, or the embedding
 * table when tied); loss = mean cross-entropy over the targets >= 0. The
 * logits never exist whole: forward and backward work on chunks of
 * sg_head_chunk_tokens(m, N) tokens (models/unit_layout.h), the backward
 * recomputing each chunk's logits from the saved n; model->head_chunk_tokens
 * picks the chunk (the same math whatever it is, to rounding).
 *
 * Saved activations: the forward writes into `saved` what the backward
 * needs (sg_unit_saved_floats; every float of it, layout below); with
 * activation checkpointing the forward is called with saved == NULL and
 * keeps them in its scratch, and the recompute node calls it again with
 * y == NULL to fill `saved` only, bit-identical to a normal forward. The
 * head has no y: it fills `saved` when given one and writes the loss when
 * io->loss is set (at least one of the two). The embedding saves nothing;
 * its forward with y == NULL does nothing. The backward reads `saved` only.
 *
 * Functions return 0 or a negative SG_E* code (SG_EINVAL for a token id or
 * target out of range, checked before anything is written, or a missing
 * buffer; SG_ENOTSUP for a layer of a model sg_unit_check_model refuses;
 * SG_ENOMEM from a kernel's small buffer); they never print or exit.
 */
#ifndef SG_CODELETS_CPU_BLOCK_H
#define SG_CODELETS_CPU_BLOCK_H

#include <stddef.h>
#include <stdint.h>

#include "common/error.h"
#include "models/model.h"
#include "models/unit_layout.h"

/* Rotary tables for positions 0..T-1 (built once per run) from
 * model->rope_theta and its rope_scaling: none, "llama3" (Llama 3.1) or
 * "yarn" (GPT-OSS; cos and sin carry its attention factor). */
typedef struct sg_rope_cache {
    size_t T, half;           /* positions, head_dim / 2 */
    float *cos_tab, *sin_tab; /* (T, half) */
} sg_rope_cache;

int sg_rope_cache_init(sg_rope_cache *rc, const sg_model *m, size_t T);
void sg_rope_cache_free(sg_rope_cache *rc);

/* Inputs and outputs of one unit for one micro-batch of B x T tokens. */
typedef struct sg_unit_io {
    const float *params;       /* the unit's flat parameters */
    const float *embed;        /* tied head: the embedding table (V, H); else NULL */
    const int32_t *tokens;     /* (B*T) input ids (embedding) */
    const int32_t *targets;    /* (B*T) next-token ids, < 0 ignored (head) */
    const float *x;            /* (B*T, H) input of a layer or of the head */
    float *y;                  /* (B*T, H) output of the embedding or a layer; NULL:
                                     recompute (fill `saved` only) */
    float *loss;               /* head: the mean loss (1 float) */
    float *saved;              /* sg_unit_saved_floats, or NULL (checkpointing) */
    float *scratch;            /* sg_unit_scratch_floats */
    const sg_rope_cache *rope; /* layers */
    float *moe_stats;          /* MoE (sg_moe_stats_floats): the micro-step's router
                                     statistics for the load-balancing loss; the forward
                                     of layer 1 writes it, later layers add to it, the
                                     head's forward and the layers' backward read it.
                                     NULL: no load-balancing loss */
    /* MoE experts as tasks (codelets/starpu/moe.c): the layer's forward
     * stops after the router (saved and moe_stats written, y untouched); its
     * backward takes the experts' share of d n2 (N, H) and d topw (N, k) from
     * the expert tasks, which also compute the experts' weight gradients */
    int moe_split;
    const float *moe_dn2, *moe_dtopw;
} sg_unit_io;

int sg_unit_forward(const sg_model *m, int unit, size_t B, size_t T, const sg_unit_io *io);

/* Backward of one unit from the activations saved by its forward (io->saved,
 * and io->x, io->tokens, io->targets, io->params, io->embed as in the
 * forward):
 * - dy (B*T, H): gradient of the unit's output (embedding, layers); for the
 *   head, dloss is the gradient of io->loss (1 / accumulation steps, times
 *   the fp16 loss scale) and dy is unused; an MoE layer also uses dloss, for
 *   the load-balancing term of the loss (with io->moe_stats);
 * - dx (B*T, H): gradient of the input x, WRITTEN (layers, head; NULL for the
 *   embedding);
 * - dparams (the unit's flat layout): ACCUMULATED (+=);
 * - dembed (V, H): tied head only, the embedding gradient, ACCUMULATED.
 * dx must not overlap dy, saved or scratch. For the head, the loss divisor is
 * the number of targets >= 0 in io->targets (as the forward's mean). */
int sg_unit_backward(const sg_model *m, int unit, size_t B, size_t T, const sg_unit_io *io,
                     const float *dy, float dloss, float *dx, float *dparams, float *dembed);

#endif /* SG_CODELETS_CPU_BLOCK_H */
