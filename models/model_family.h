/* model_family.h - models of a family at other sizes: Llama 3's published
 * shapes extended to any width, for `stepgraph fit` (the largest model that
 * fits a machine).
 *
 * The Llama rule (from Meta's published shapes; models/llama-3.2-1b.json,
 * llama-3.2-3b.json, llama-3.1-8b.json, llama-3.3-70b.json and the Llama 3
 * paper's Table 3 for 405B):
 * - hidden H in steps of 1024 from 2048; head_dim 128, so H / 128 query
 *   heads, a multiple of the 8 key/value heads (GQA 8, as every Llama 3);
 * - intermediate = Meta's reference FFN rule (llama3 model.py): 4H * 2/3,
 *   times ffn_dim_multiplier (1.3 in the 8B and 70B params.json, 1.2 in
 *   405B's: used from H = 16384), rounded up to a multiple of 1024. It gives
 *   14336 at 4096, 28672 at 8192, 53248 at 16384, as published;
 * - layers: piecewise linear in H through the published (H, layers) points
 *   (2048, 16) 3.2-1B, (3072, 28) 3.2-3B, (4096, 32) 8B, (8192, 80) 70B,
 *   (16384, 126) 405B, extended past 16384 with the last slope; rounded to
 *   the nearest integer;
 * - everything else (vocabulary 128,256, untied head, RMSNorm eps, rope
 *   theta and llama3 scaling, positions) from the template model.
 * The 1B and 3B points give only the depth: those two models have other
 * widths of head and MLP than the rule's.
 */
#ifndef SG_MODELS_MODEL_FAMILY_H
#define SG_MODELS_MODEL_FAMILY_H

#include <stdint.h>

#include "common/error.h"
#include "models/model.h"

#define SG_LLAMA_WIDTH_STEP 1024
#define SG_LLAMA_MIN_HIDDEN 2048
#define SG_LLAMA_MAX_HIDDEN 65536

/* The rule's layers and intermediate size for width `hidden`. */
int64_t sg_llama_layers_for(int64_t hidden);
int64_t sg_llama_intermediate_for(int64_t hidden);

/* *out = the template (a Llama-architecture model: its vocabulary, rope,
 * eps, positions) at width `hidden` (a multiple of SG_LLAMA_WIDTH_STEP in
 * [SG_LLAMA_MIN_HIDDEN, SG_LLAMA_MAX_HIDDEN]) with `layers` decoder layers
 * (0: the rule's; else 1..SG_MODEL_MAX_LAYERS), named
 * "llama-scaled-h<H>-l<L>". SG_EINVAL, naming the value, otherwise. */
int sg_llama_scaled(const sg_model *tmpl, int64_t hidden, int64_t layers, sg_model *out,
                    sg_error *err);

#endif /* SG_MODELS_MODEL_FAMILY_H */
