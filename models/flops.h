/* flops.h - the FLOPs of one training step, counted three ways the field
 * counts them (docs/flops.md gives the formulas with their sources).
 *
 * - seed: DeepSpeedExamples' estimate_transformer_tflops
 *   (training/DeepSpeed-SuperOffload/finetune_zero3.py), per sequence
 *     2 c P s + 4 c L h s^2,   c = 4 with activation checkpointing, else 3,
 *   P = every parameter (model.parameters(): a tied head counted once),
 *   L layers, h hidden size, s sequence length. What DeepSpeed's SuperOffload
 *   log prints as "TFLOPS": the step log's TFLOPS, so the two compare line for
 *   line. It counts the recompute and full (not causal) attention at width h.
 *   The script prints nothing for MoE models: NAN here too.
 * - model: model FLOPs for MFU (PaLM, Chowdhery et al. 2022, appendix B, with
 *   causal attention), per sequence
 *     6 P_ne s + 6 L q s^2
 *   P_ne = the parameters a token multiplies by: every parameter less the
 *   input embedding table (a row lookup), the output head kept (tied: the
 *   shared matrix counted once, as the head); MoE: the top-k experts only
 *   (sg_model_active_params). q = query width (heads x head_dim). The real
 *   k/v projection sizes are in P, so grouped-query attention is exact; no
 *   recompute; attention counted causally (half of the s x s scores).
 * - megatron: Megatron-LM's estimate (Narayanan et al. 2021, eq. 3), per
 *   sequence 24 c s L h^2 (1 + s / (6 h) + V / (16 L h)), which assumes full
 *   multi-head projections (4 h^2 per layer for q, k, v, o) and an MLP of
 *   8 h^2; NAN for MoE models.
 * Pure arithmetic: no StarPU, no runtime/.
 */
#ifndef SG_MODELS_FLOPS_H
#define SG_MODELS_FLOPS_H

#include <stdint.h>

#include "models/model.h"

/* FLOP of one step (not per second): NAN where the formula does not apply. */
typedef struct sg_step_flops {
    double seed;     /* DeepSpeedExamples' formula, recompute counted */
    double model;    /* model FLOPs: 6 P_ne tokens + causal attention */
    double megatron; /* Megatron-LM eq. 3, recompute counted */
} sg_step_flops;

/* The formulas on plain sizes, FLOP for `seqs` sequences of `seq_len`
 * tokens; NAN when a size is not positive. */
double sg_flops_seed(int64_t params, int64_t layers, int64_t hidden, int64_t seqs, int64_t seq_len,
                     int checkpointing);
double sg_flops_model(int64_t params_ne, int64_t layers, int64_t q_width, int64_t seqs,
                      int64_t seq_len);
double sg_flops_megatron(int64_t layers, int64_t hidden, int64_t vocab, int64_t seqs,
                         int64_t seq_len, int checkpointing);

/* P_ne of m (see above): the parameters the model FLOPs count. */
int64_t sg_model_flop_params(const sg_model *m);

/* All three for model m, `seqs` sequences of `seq_len` tokens. */
void sg_step_flops_of(const sg_model *m, int64_t seqs, int64_t seq_len, int checkpointing,
                      sg_step_flops *out);

/* FLOP over seconds in TFLOP/s; NAN when flop is NAN or seconds <= 0. */
double sg_flops_per_s_tera(double flop, double seconds);

#endif /* SG_MODELS_FLOPS_H */
