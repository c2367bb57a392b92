/* model_family.c - Llama 3's shape at other sizes (model_family.h). */
#include "models/model_family.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

/* Published (hidden, layers) of Llama 3.x, by width. */
static const int64_t depth_points[][2] = {
    {2048, 16}, {3072, 28}, {4096, 32}, {8192, 80}, {16384, 126},
};
#define NPOINTS ((int)(sizeof depth_points / sizeof depth_points[0]))

int64_t sg_llama_layers_for(int64_t hidden)
{
    int i = 0;
    while (i < NPOINTS - 2 && hidden > depth_points[i + 1][0])
        i++;
    /* between points i and i + 1; past the last one, its slope */
    double h0 = (double)depth_points[i][0], l0 = (double)depth_points[i][1];
    double h1 = (double)depth_points[i + 1][0], l1 = (double)depth_points[i + 1][1];
    double l = l0 + ((double)hidden - h0) * (l1 - l0) / (h1 - h0);
    return l < 1.0 ? 1 : (int64_t)floor(l + 0.5);
}

int64_t sg_llama_intermediate_for(int64_t hidden)
{
    /* llama3 model.py: hidden_dim = 4 * dim; int(2 * hidden_dim / 3); times
     * ffn_dim_multiplier; rounded up to multiple_of (1024) */
    int64_t f = 2 * (4 * hidden) / 3;
    f = (int64_t)((hidden >= 16384 ? 1.2 : 1.3) * (double)f);
    return (f + 1023) / 1024 * 1024;
}

int sg_llama_scaled(const sg_model *tmpl, int64_t hidden, int64_t layers, sg_model *out,
                    sg_error *err)
{
    if (!tmpl || !out)
        return sg_error_set(err, SG_EINVAL, "model family: no template model");
    if (tmpl->arch != SG_ARCH_LLAMA || tmpl->num_experts > 0)
        return sg_error_set(err, SG_EINVAL,
                            "model family llama: the template %s is not a dense "
                            "Llama model (architecture %s)",
                            tmpl->name, sg_arch_name(tmpl->arch));
    if (hidden < SG_LLAMA_MIN_HIDDEN || hidden > SG_LLAMA_MAX_HIDDEN ||
        hidden % SG_LLAMA_WIDTH_STEP)
        return sg_error_set(err, SG_EINVAL,
                            "model family llama: hidden size %lld is not a "
                            "multiple of %d in [%d, %d]",
                            (long long)hidden, SG_LLAMA_WIDTH_STEP, SG_LLAMA_MIN_HIDDEN,
                            SG_LLAMA_MAX_HIDDEN);
    if (layers == 0)
        layers = sg_llama_layers_for(hidden);
    if (layers < 1 || layers > SG_MODEL_MAX_LAYERS)
        return sg_error_set(err, SG_EINVAL,
                            "model family llama: %lld layers is out of range "
                            "(1 to %d)",
                            (long long)layers, SG_MODEL_MAX_LAYERS);
    sg_model m = *tmpl;
    snprintf(m.name, sizeof m.name, "llama-scaled-h%lld-l%lld", (long long)hidden,
             (long long)layers);
    m.hidden_size = hidden;
    m.num_layers = layers;
    m.head_dim = 128;
    m.num_heads = hidden / 128;
    m.num_kv_heads = 8;
    m.intermediate_size = sg_llama_intermediate_for(hidden);
    m.sliding_window = 0;
    for (int l = 0; l < SG_MODEL_MAX_LAYERS; l++)
        m.layer_attn[l] = SG_ATTN_FULL;
    m.from_hf_config = 0;
    m.hf_ignored_keys[0] = '\0';
    *out = m;
    return SG_OK;
}
