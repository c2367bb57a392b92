/* model.h - transformer architecture descriptions (the JSON files in models/).
 *
 * A model file describes a decoder-only transformer with Hugging Face
 * config.json names (hidden_size, num_hidden_layers, ...). This module loads
 * and validates it, counts parameters, and lists the parameter tensors of
 * each graph unit with their Hugging Face names, which the step compiler
 * (sizes per unit) and the weight loader (names, shapes) both use.
 *
 * Units: unit 0 is the token embedding, units 1..L are the decoder layers
 * (HF layer index = unit - 1), unit L+1 is the final norm plus output head.
 */
#ifndef SG_MODEL_H
#define SG_MODEL_H

#include <stddef.h>
#include <stdint.h>

#include "common/error.h"

#define SG_MODEL_NAME_MAX 64
#define SG_TENSOR_NAME_MAX 96
#define SG_MODEL_MAX_LAYERS 1024

typedef enum sg_arch {
    SG_ARCH_LLAMA,     /* Llama 3.x */
    SG_ARCH_QWEN3,     /* Llama block + RMSNorm on q and k (QK-norm) */
    SG_ARCH_SEED_OSS,  /* Llama block + q/k/v biases */
    SG_ARCH_QWEN3_MOE, /* Qwen3 attention + routed experts, no shared expert */
    SG_ARCH_GPT_OSS,   /* biases, attention sinks, MoE, sliding window */
    SG_ARCH_QWEN2,     /* Llama block + q/k/v biases (Qwen2, Qwen2.5) */
    SG_ARCH_MISTRAL,   /* Llama block, every layer sliding when sliding_window is set */
    SG_ARCH_PHI3,      /* Llama block, HF tensors fused: qkv_proj, gate_up_proj */
    SG_ARCH_MIXTRAL,   /* Mistral attention + routed experts (block_sparse_moe) */
} sg_arch;

typedef enum sg_attn_kind {
    SG_ATTN_FULL,
    SG_ATTN_SLIDING,
} sg_attn_kind;

typedef struct sg_model {
    char name[SG_MODEL_NAME_MAX]; /* "llama-3.1-8b" */
    sg_arch arch;
    int64_t hidden_size;       /* H */
    int64_t intermediate_size; /* dense MLP width (0 for pure MoE) */
    int64_t num_layers;        /* L */
    int64_t num_heads;         /* query heads */
    int64_t num_kv_heads;      /* key/value heads (GQA) */
    int64_t head_dim;          /* D; q width = num_heads * D */
    int64_t vocab_size;        /* V */
    int64_t max_position_embeddings;
    int tie_word_embeddings; /* lm_head shares embed_tokens */
    double rms_norm_eps;
    double rope_theta;
    /* rope_scaling: "llama3" (Llama 3.1/3.3) and "yarn" (GPT-OSS) are
     * applied; other types are refused by the executor (codelets/cpu/block.h) */
    int rope_scaling; /* 0 none, 1 llama3, 2 yarn, -1 another type */
    double rope_factor, rope_low_freq_factor, rope_high_freq_factor;
    double rope_original_max_pos;
    double rope_beta_fast, rope_beta_slow; /* yarn: 32, 1 by default */
    double rope_attention_factor;          /* yarn: cos, sin scale (0.1 ln factor + 1) */
    int rope_truncate;                     /* yarn: correction range floored/ceiled (1) */
    int qkv_bias;                          /* q/k/v projections have biases */
    int o_bias;                            /* o_proj has a bias */
    int qk_norm;                           /* RMSNorm over head_dim on q and k */
    int attention_sinks;                   /* one learned sink logit per q head */
    /* Mixture of experts (num_experts == 0: dense) */
    int64_t num_experts;
    int64_t experts_per_token;     /* top-k */
    int64_t moe_intermediate_size; /* per expert */
    int expert_bias;               /* experts' projections have biases (gpt-oss) */
    int router_bias;
    int norm_topk_prob;          /* qwen3_moe: top-k weights renormalised to sum 1 */
    double router_aux_loss_coef; /* load-balancing loss weight; 0 = none */
    /* Attention pattern */
    int64_t sliding_window;                       /* tokens; 0 = none */
    sg_attn_kind layer_attn[SG_MODEL_MAX_LAYERS]; /* per HF layer index */
    /* Read from a Hugging Face config.json (models/hf_config.h): its keys
     * that stepgraph does not know, dropped (the commands warn) */
    int from_hf_config;
    char hf_ignored_keys[200]; /* comma-separated, "" when none */
    /* Not from the model file: the run option head_chunk_tokens
     * (runtime/config/step_spec.c sets it), tokens per chunk of the head's
     * logits; <= 0 = auto (models/unit_layout.h sg_head_chunk_tokens) */
    int64_t head_chunk_tokens;
} sg_model;

/* One parameter tensor with its Hugging Face name and shape (row-major, as
 * stored in safetensors: a Linear weight is (out_features, in_features)). */
typedef struct sg_tensor_info {
    char name[SG_TENSOR_NAME_MAX]; /* "model.layers.3.self_attn.q_proj.weight" */
    int ndim;
    int64_t shape[3];
    int64_t numel;
    int is_expert; /* belongs to a routed expert (MoE active count) */
} sg_tensor_info;

/* Loads and validates a model description. Errors name the file, the JSON key
 * and the value (e.g. "llama.json: num_key_value_heads: 7 does not divide
 * num_attention_heads 32"). */
int sg_model_load(const char *path, sg_model *model, sg_error *err);

/* Same from a JSON text already in memory; `origin` names it in messages. */
int sg_model_parse(const char *json_text, const char *origin, sg_model *model, sg_error *err);

/* Resolves a model name ("llama-3.1-8b") or a path to a model file: a string
 * containing '/' or ending in ".json" is a path; otherwise
 * <models_dir>/<name>.json. A directory (a path, or an existing directory
 * given by name) stands for its config.json: a Hugging Face model directory.
 * models_dir NULL means sg_models_dir(). */
int sg_model_resolve(const char *name_or_path, const char *models_dir, char *out_path,
                     size_t out_size, sg_error *err);

/* Directory of the shipped model files: $STEPGRAPH_MODELS_DIR if set, else
 * the source tree's models/ when run from a build tree, else the installed
 * $(pkgdatadir)/models. */
const char *sg_models_dir(void);

/* Number of graph units: L + 2. */
int sg_model_num_units(const sg_model *model);

/* Tensors of one unit in a fixed order (the order parameters are packed into
 * optimizer sub-groups). Returns the count, or a negative error code when
 * `cap` is too small. With `out` NULL, returns the count only. */
int sg_model_unit_tensors(const sg_model *model, int unit, sg_tensor_info *out, int cap);

/* Parameter elements of one unit, total and active per token (MoE: only
 * top-k experts count as active; dense: active == total). */
int64_t sg_model_unit_params(const sg_model *model, int unit);
int64_t sg_model_unit_active_params(const sg_model *model, int unit);

/* Whole-model totals. */
int64_t sg_model_total_params(const sg_model *model);
int64_t sg_model_active_params(const sg_model *model);

const char *sg_arch_name(sg_arch arch);

/* Human-readable multi-line description (name, architecture, dimensions,
 * total and, for MoE, active parameters, per-unit counts) for `stepgraph
 * model info`. Returns 0, or SG_ENOMEM when size is too small (buf then holds
 * the truncated, NUL-terminated text). */
int sg_model_format_info(const sg_model *model, char *buf, size_t size);

#endif /* SG_MODEL_H */
