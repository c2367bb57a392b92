/* step_rates.c - a step's TFLOPS and MFU from the model's FLOP counts
 * (see step_rates.h). */
#include "models/step_rates.h"

#include <math.h>

#include "models/flops.h"
#include "models/model.h"

void sg_step_rates_of(const sg_model *m, int64_t seqs, int64_t seq_len, int checkpointing,
                      double seconds, double peak_tflops, sg_step_rates *out)
{
    sg_step_flops f;
    sg_step_flops_of(m, seqs, seq_len, checkpointing, &f);
    out->tflops = sg_flops_per_s_tera(f.seed, seconds);
    out->model_tflops = sg_flops_per_s_tera(f.model, seconds);
    out->megatron_tflops = sg_flops_per_s_tera(f.megatron, seconds);
    out->mfu = peak_tflops > 0 ? out->model_tflops / peak_tflops : NAN;
}

double sg_step_active_tflops(int64_t active_params, int64_t embed_params, int tied, int64_t layers,
                             int64_t q_width, int64_t batch_seqs, int64_t seq_len,
                             int checkpointing, double seconds)
{
    if (!(seconds > 0.0) || active_params <= 0 || layers <= 0 || q_width <= 0 || batch_seqs <= 0 ||
        seq_len <= 0)
        return NAN;
    double P = (double)active_params - (tied ? 0.0 : (double)embed_params);
    double s = (double)seq_len, c = checkpointing ? 4.0 : 3.0;
    double flops =
        c * (double)batch_seqs * s * (2.0 * P + 4.0 * s * (double)q_width * (double)layers);
    return flops / (seconds * 1e12);
}

double sg_model_active_tflops(const sg_model *m, int64_t batch_seqs, int64_t seq_len,
                              int checkpointing, double seconds)
{
    if (m->num_experts <= 0)
        return NAN;
    return sg_step_active_tflops(sg_model_active_params(m), sg_model_unit_params(m, 0),
                                 m->tie_word_embeddings, m->num_layers, m->num_heads * m->head_dim,
                                 batch_seqs, seq_len, checkpointing, seconds);
}
