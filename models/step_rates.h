/* step_rates.h - a step's rates from the model's FLOP counts (models/flops.h)
 * and its duration: what the step log prints (runtime/train/step_log.h) and
 * what simulate and fit report for a simulated or bounded step. Here, beside
 * the FLOP counts, so that the simulator and the fit search use the same
 * formulas as a run without including the training loop. Pure arithmetic.
 */
#ifndef SG_STEP_RATES_H
#define SG_STEP_RATES_H

#include <stdint.h>

/* A step's rates, per rank (the sequences this rank's GPU processes, as
 * DeepSpeedExamples' script logs them), from models/flops.h's counts:
 * - tflops: the seed's formula (DeepSpeedExamples' estimate_transformer_tflops,
 *   recompute counted), the step line's and metrics' "TFLOPS", so runs
 *   compare line for line with DeepSpeed's SuperOffload log;
 * - model_tflops: model FLOPs (6 P_ne tokens + causal attention, GQA-exact,
 *   no recompute) per second, what MFU divides;
 * - megatron_tflops: Megatron-LM's eq. 3 (recompute counted), named so;
 * - mfu: model_tflops / the GPU's dense peak, a fraction; NAN without one.
 * Each is NAN where its formula does not apply (MoE: tflops and megatron) or
 * seconds <= 0. docs/flops.md has the formulas and sources. */
typedef struct sg_step_rates {
    double tflops, model_tflops, megatron_tflops, mfu;
} sg_step_rates;

struct sg_model;
void sg_step_rates_of(const struct sg_model *m, int64_t seqs, int64_t seq_len, int checkpointing,
                      double seconds, double peak_tflops, sg_step_rates *out);

/* The active-parameter estimate, for MoE models (a separate, labelled figure
 * of the step line: "Active TFLOPS"):
 *   flops = c B s (2 P + 4 s q L)
 *   P = the parameters a token multiplies by (sg_model_active_params: top-k
 *       experts, router, attention, norms, head; less the input embedding,
 *       a lookup, unless tied to the head), q = query width (heads x
 *       head_dim), c, B, s, L as above (causal attention counted whole, as
 *       Megatron's formula does).
 * Returns flops / (seconds * 1e12), or NAN as above. */
double sg_step_active_tflops(int64_t active_params, int64_t embed_params, int tied, int64_t layers,
                             int64_t q_width, int64_t batch_seqs, int64_t seq_len,
                             int checkpointing, double seconds);

/* The same for a model: its active parameters, input embedding, tying,
 * layers and query width taken from m; NAN for a dense model (no experts). */
double sg_model_active_tflops(const struct sg_model *m, int64_t batch_seqs, int64_t seq_len,
                              int checkpointing, double seconds);

#endif /* SG_STEP_RATES_H */
