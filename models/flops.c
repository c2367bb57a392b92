/* flops.c - a step's FLOPs by DeepSpeedExamples', PaLM's and Megatron-LM's
 * counts (see flops.h). */
#include "models/flops.h"

#include <math.h>

double sg_flops_seed(int64_t params, int64_t layers, int64_t hidden, int64_t seqs, int64_t seq_len,
                     int checkpointing)
{
    if (params <= 0 || layers <= 0 || hidden <= 0 || seqs <= 0 || seq_len <= 0)
        return NAN;
    double c = checkpointing ? 4.0 : 3.0; /* fwd + 2x bwd, + recomputed fwd */
    double s = (double)seq_len;
    /* per sequence: matmuls 2 c P s; attention scores and values at width h,
     * full s x s: 4 c L h s^2 */
    double per_seq =
        2.0 * c * (double)params * s + 4.0 * c * (double)layers * (double)hidden * s * s;
    return (double)seqs * per_seq;
}

double sg_flops_model(int64_t params_ne, int64_t layers, int64_t q_width, int64_t seqs,
                      int64_t seq_len)
{
    if (params_ne <= 0 || layers <= 0 || q_width <= 0 || seqs <= 0 || seq_len <= 0)
        return NAN;
    double s = (double)seq_len;
    /* a token: 2 P forward + 4 P backward; attention: QK^T and AV are
     * 2 q s' each forward at s' keys, s/2 on average when causal, x3 for
     * the backward: 6 q s per token per layer */
    double per_seq = 6.0 * (double)params_ne * s + 6.0 * (double)layers * (double)q_width * s * s;
    return (double)seqs * per_seq;
}

double sg_flops_megatron(int64_t layers, int64_t hidden, int64_t vocab, int64_t seqs,
                         int64_t seq_len, int checkpointing)
{
    if (layers <= 0 || hidden <= 0 || vocab <= 0 || seqs <= 0 || seq_len <= 0)
        return NAN;
    double L = (double)layers, h = (double)hidden, V = (double)vocab;
    double B = (double)seqs, s = (double)seq_len;
    double c = checkpointing ? 4.0 : 3.0;
    return 24.0 * c * B * s * L * h * h * (1.0 + s / (6.0 * h) + V / (16.0 * L * h));
}

int64_t sg_model_flop_params(const sg_model *m)
{
    /* unit 0 is the input embedding table; tied, it is also the head and
     * stays counted */
    return sg_model_active_params(m) - (m->tie_word_embeddings ? 0 : sg_model_unit_params(m, 0));
}

void sg_step_flops_of(const sg_model *m, int64_t seqs, int64_t seq_len, int checkpointing,
                      sg_step_flops *out)
{
    int moe = m->num_experts > 0;
    out->seed = moe ? NAN
                    : sg_flops_seed(sg_model_total_params(m), m->num_layers, m->hidden_size, seqs,
                                    seq_len, checkpointing);
    out->model = sg_flops_model(sg_model_flop_params(m), m->num_layers,
                                (int64_t)m->num_heads * m->head_dim, seqs, seq_len);
    out->megatron = moe ? NAN
                        : sg_flops_megatron(m->num_layers, m->hidden_size, m->vocab_size, seqs,
                                            seq_len, checkpointing);
}

double sg_flops_per_s_tera(double flop, double seconds)
{
    if (!(seconds > 0.0) || !isfinite(flop))
        return NAN;
    return flop / (seconds * 1e12);
}
