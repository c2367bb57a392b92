/* hf_config.c - a Hugging Face config.json read as a model description
 * (hf_config.h). */
#define _POSIX_C_SOURCE 200809L

#include "models/hf_config.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "models/model.h"

/* transformers' model_type -> stepgraph's architecture */
static const struct {
    const char *model_type, *arch;
} arch_of_type[] = {
    {"llama", "llama"},     {"qwen3", "qwen3"},       {"qwen3_moe", "qwen3_moe"},
    {"gpt_oss", "gpt_oss"}, {"seed_oss", "seed_oss"}, {"qwen2", "qwen2"},
    {"mistral", "mistral"}, {"phi3", "phi3"},         {"mixtral", "mixtral"},
};

/* Keys stepgraph's model files read under the same name. */
static const char *const model_keys[] = {
    "hidden_size",           "intermediate_size", "num_hidden_layers", "num_attention_heads",
    "num_key_value_heads",   "head_dim",          "vocab_size",        "max_position_embeddings",
    "tie_word_embeddings",   "rms_norm_eps",      "rope_theta",        "rope_scaling",
    "attention_bias",        "num_experts",       "num_local_experts", "num_experts_per_tok",
    "moe_intermediate_size", "sliding_window",    "layer_types",
};

/* transformers keys that do not change the training step's math (inference
 * caches, token ids, storage dtype, initialisation of new weights, the MoE
 * auxiliary loss's reporting) or that are checked below and then dropped. */
static const char *const dropped_keys[] = {
    "architectures",
    "model_type",
    "torch_dtype",
    "dtype",
    "transformers_version",
    "bos_token_id",
    "eos_token_id",
    "pad_token_id",
    "use_cache",
    "initializer_range",
    "pretraining_tp",
    "_name_or_path",
    "hidden_act",
    "attention_dropout",
    "mlp_bias",
    "use_sliding_window",
    "max_window_layers",
    "output_router_logits",
    "router_aux_loss_coef",
    "mlp_only_layers",
    "decoder_sparse_step",
    "norm_topk_prob",
    "experts_per_token",
    "swiglu_limit",
    "initial_context_length",
    "residual_dropout",
    "attention_out_bias",
    "use_mrope",
    "router_jitter_noise",
    "resid_pdrop",
    "embd_pdrop",
    "partial_rotary_factor",
    /* Phi3Config: read only by its longrope scaling, which is refused */
    "original_max_position_embeddings",
};

static int in_list(const char *k, const char *const *list, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (strcmp(k, list[i]) == 0)
            return 1;
    return 0;
}

int sg_hf_config_detect(const cJSON *root)
{
    return cJSON_IsObject(root) && cJSON_GetObjectItemCaseSensitive(root, "model_type") &&
           !cJSON_GetObjectItemCaseSensitive(root, "architecture");
}

static int bad(const char *origin, const char *key, const cJSON *v, const char *what, sg_error *err)
{
    char *s = v ? cJSON_PrintUnformatted(v) : NULL;
    int rc = sg_error_set(err, SG_EINVAL, "%s: %s: %.48s %s", origin, key, s ? s : "(value)", what);
    cJSON_free(s);
    return rc;
}

static const cJSON *get(const cJSON *root, const char *key)
{
    const cJSON *it = cJSON_GetObjectItemCaseSensitive(root, key);
    return it && !cJSON_IsNull(it) ? it : NULL;
}

static int is_zero_number(const cJSON *v)
{
    return cJSON_IsNumber(v) && v->valuedouble == 0.0;
}

/* The keys of qwen2, phi3 and mixtral that change the math: refused unless
 * they say what stepgraph computes. */
static int check_family_keys(const cJSON *root, const char *arch, const char *origin, sg_error *err)
{
    const cJSON *v;
    if ((v = get(root, "use_mrope")) && !cJSON_IsFalse(v))
        return bad(origin, "use_mrope", v,
                   "is not supported (one-dimensional rotary "
                   "positions only)",
                   err);
    /* MixtralSparseMoeBlock multiplies its input by uniform noise in training */
    if ((v = get(root, "router_jitter_noise")) && !is_zero_number(v))
        return bad(origin, "router_jitter_noise", v,
                   "is not supported (a router without "
                   "jitter noise, 0.0, only)",
                   err);
    if ((v = get(root, "partial_rotary_factor")) && !(cJSON_IsNumber(v) && v->valuedouble == 1.0))
        return bad(origin, "partial_rotary_factor", v,
                   "is not supported (rotary embedding "
                   "over the whole head, 1.0, only)",
                   err);
    if (strcmp(arch, "phi3") == 0 && (v = get(root, "rope_scaling"))) {
        /* Phi3's longrope (short and long factors per frequency) is not
         * implemented; Phi-4 has none */
        const cJSON *t = cJSON_IsObject(v) ? get(v, "rope_type") : NULL;
        if (!t && cJSON_IsObject(v))
            t = get(v, "type");
        if (!(cJSON_IsString(t) && strcmp(t->valuestring, "default") == 0))
            return bad(origin, "rope_scaling", t ? t : v,
                       "is not supported for phi3 (no "
                       "rope_scaling, or \"default\", only; longrope is not implemented)",
                       err);
    }
    return SG_OK;
}

/* Keys whose value changes what the step computes: refused unless they say
 * what stepgraph computes. */
static int check_math_keys(const cJSON *root, const char *arch, const char *origin, sg_error *err)
{
    const cJSON *v;
    int rc;
    if ((v = get(root, "hidden_act")) &&
        !(cJSON_IsString(v) && strcmp(v->valuestring, "silu") == 0))
        return bad(origin, "hidden_act", v,
                   "is not supported (stepgraph's MLP is SwiGLU, "
                   "\"silu\")",
                   err);
    /* Phi3Config spells two of them resid_pdrop and embd_pdrop */
    static const char *const dropouts[] = {"attention_dropout", "residual_dropout", "resid_pdrop",
                                           "embd_pdrop"};
    for (int i = 0; i < 4; i++)
        if ((v = get(root, dropouts[i])) && !is_zero_number(v))
            return bad(origin, dropouts[i], v,
                       "is not supported: stepgraph trains without "
                       "dropout (set it to 0.0 in a copy of the file to train without it)",
                       err);
    if ((v = get(root, "mlp_bias")) && !cJSON_IsFalse(v))
        return bad(origin, "mlp_bias", v,
                   "is not supported (MLP projections without "
                   "biases only)",
                   err);
    if ((v = get(root, "architectures")) && !cJSON_IsArray(v))
        return bad(origin, "architectures", v, "is not an array of class names", err);
    int sliding_arch = strcmp(arch, "gpt_oss") == 0;
    if (!sliding_arch && (v = get(root, "use_sliding_window")) && !cJSON_IsFalse(v))
        return bad(origin, "use_sliding_window", v,
                   "is not supported for this "
                   "architecture (full attention in every layer only)",
                   err);
    if ((rc = check_family_keys(root, arch, origin, err)) < 0)
        return rc;
    if (strcmp(arch, "qwen3_moe") == 0) {
        if ((v = get(root, "mlp_only_layers")) && !(cJSON_IsArray(v) && cJSON_GetArraySize(v) == 0))
            return bad(origin, "mlp_only_layers", v,
                       "is not supported (every layer is a "
                       "mixture of experts)",
                       err);
        if ((v = get(root, "decoder_sparse_step")) && !(cJSON_IsNumber(v) && v->valuedouble == 1.0))
            return bad(origin, "decoder_sparse_step", v,
                       "is not supported (1: every layer "
                       "sparse)",
                       err);
        if ((v = get(root, "norm_topk_prob")) && !cJSON_IsBool(v))
            return bad(origin, "norm_topk_prob", v, "is not true or false", err);
    }
    if (strcmp(arch, "qwen3_moe") == 0 || strcmp(arch, "mixtral") == 0) {
        if ((v = get(root, "output_router_logits")) && !cJSON_IsBool(v))
            return bad(origin, "output_router_logits", v, "is not true or false", err);
        if ((v = get(root, "router_aux_loss_coef")) && !(cJSON_IsNumber(v) && v->valuedouble >= 0))
            return bad(origin, "router_aux_loss_coef", v, "is not a number >= 0", err);
    }
    if (strcmp(arch, "gpt_oss") == 0) {
        if ((v = get(root, "swiglu_limit")) && !(cJSON_IsNumber(v) && v->valuedouble == 7.0))
            return bad(origin, "swiglu_limit", v, "is not supported (gpt-oss clamps at 7.0)", err);
        const cJSON *k = get(root, "experts_per_token"), *k2 = get(root, "num_experts_per_tok");
        if (k && k2 &&
            !(cJSON_IsNumber(k) && cJSON_IsNumber(k2) && k->valuedouble == k2->valuedouble))
            return bad(origin, "experts_per_token", k, "differs from num_experts_per_tok", err);
    }
    return SG_OK;
}

/* The model's name: _name_or_path's last component, else the directory that
 * holds the file, with characters outside [A-Za-z0-9._-] replaced by '-'. */
static void model_name(const cJSON *root, const char *origin, char *out, size_t size)
{
    char buf[1024] = "";
    const cJSON *np = get(root, "_name_or_path");
    if (cJSON_IsString(np) && np->valuestring[0])
        snprintf(buf, sizeof buf, "%s", np->valuestring);
    else
        snprintf(buf, sizeof buf, "%s", origin);
    size_t n = strlen(buf);
    while (n > 1 && buf[n - 1] == '/')
        buf[--n] = '\0';
    if (!cJSON_IsString(np) || !np->valuestring[0]) {
        /* origin is DIR/config.json: the directory's name */
        char *slash = strrchr(buf, '/');
        if (slash)
            *slash = '\0';
        else
            snprintf(buf, sizeof buf, "%s", "hf-model");
    }
    const char *base = strrchr(buf, '/');
    base = base ? base + 1 : buf;
    if (!*base || strcmp(base, ".") == 0 || strcmp(base, "..") == 0)
        base = "hf-model";
    size_t j = 0;
    for (const char *p = base; *p && j + 1 < size; p++) {
        char c = *p;
        int okc = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                  c == '.' || c == '_' || c == '-';
        out[j++] = okc ? c : '-';
    }
    out[j] = '\0';
}

static void list_append(char *list, size_t size, const char *key)
{
    size_t used = strlen(list);
    if (used >= size - 1 || (used >= 3 && strcmp(list + used - 3, "...") == 0))
        return;
    int n = snprintf(list + used, size - used, "%s%s", used ? ", " : "", key);
    if (n < 0 || (size_t)n >= size - used) {
        if (size >= 4)
            snprintf(list + (size - 4), 4, "...");
    }
}

int sg_hf_config_normalize(cJSON *root, const char *origin, char *ignored, size_t ignored_size,
                           sg_error *err)
{
    if (ignored_size)
        ignored[0] = '\0';
    const cJSON *mt = get(root, "model_type");
    const char *arch = NULL;
    if (cJSON_IsString(mt))
        for (size_t i = 0; i < sizeof arch_of_type / sizeof *arch_of_type; i++)
            if (strcmp(mt->valuestring, arch_of_type[i].model_type) == 0)
                arch = arch_of_type[i].arch;
    if (!arch)
        return bad(origin, "model_type", mt,
                   "is not supported (llama, qwen3, qwen3_moe, "
                   "gpt_oss, seed_oss, qwen2, mistral, phi3, mixtral)",
                   err);
    int rc = check_math_keys(root, arch, origin, err);
    if (rc)
        return rc;

    /* Seed-OSS names the o_proj bias attention_out_bias */
    const cJSON *ob = get(root, "attention_out_bias");
    int o_bias = ob ? cJSON_IsTrue(ob) : -1;
    if (ob && !cJSON_IsBool(ob))
        return bad(origin, "attention_out_bias", ob, "is not true or false", err);
    /* Qwen2 and Qwen3 write sliding_window even when use_sliding_window is
     * false: then no layer slides. Mistral, Mixtral and Phi3 slide in every
     * layer when it is not null. */
    int drop_window = strcmp(arch, "gpt_oss") != 0 && strcmp(arch, "mistral") != 0 &&
                      strcmp(arch, "mixtral") != 0 && strcmp(arch, "phi3") != 0;

    char name[SG_MODEL_NAME_MAX];
    model_name(root, origin, name, sizeof name);
    /* qwen3_moe's router as transformers trains it: Qwen3MoeConfig defaults
     * norm_topk_prob to false, and Qwen3MoeForCausalLM adds the load-balancing
     * loss only with output_router_logits (router_aux_loss_coef defaults to
     * 0.001); stepgraph's model file says both explicitly */
    int moe_router = strcmp(arch, "qwen3_moe") == 0, oss = strcmp(arch, "gpt_oss") == 0;
    int mix = strcmp(arch, "mixtral") == 0;
    int norm_topk = 0;
    double aux_coef = 0.0;
    /* GptOssConfig and MixtralConfig: the same rule, coefficient 0.9 and
     * 0.001 by default; Mixtral always renormalises (the model file's
     * default) */
    if (moe_router || oss || mix) {
        const cJSON *v = get(root, "norm_topk_prob");
        norm_topk = v && cJSON_IsTrue(v);
        if ((v = get(root, "output_router_logits")) && cJSON_IsTrue(v)) {
            const cJSON *c = get(root, "router_aux_loss_coef");
            aux_coef = c ? c->valuedouble : oss ? 0.9 : 0.001;
        }
    }

    cJSON *it = root->child;
    while (it) {
        cJSON *next = it->next;
        const char *k = it->string;
        int keep = in_list(k, model_keys, sizeof model_keys / sizeof *model_keys) &&
                   !(drop_window && strcmp(k, "sliding_window") == 0);
        if (!keep) {
            if (!in_list(k, dropped_keys, sizeof dropped_keys / sizeof *dropped_keys) &&
                strcmp(k, "sliding_window") != 0 && ignored_size)
                list_append(ignored, ignored_size, k);
            cJSON_Delete(cJSON_DetachItemViaPointer(root, it));
        } else if (cJSON_IsNull(it)) {
            cJSON_Delete(cJSON_DetachItemViaPointer(root, it)); /* null = absent */
        }
        it = next;
    }
    if (!cJSON_AddStringToObject(root, "name", name) ||
        !cJSON_AddStringToObject(root, "architecture", arch) ||
        (o_bias >= 0 && !cJSON_AddBoolToObject(root, "o_proj_bias", o_bias)) ||
        (moe_router && !cJSON_AddBoolToObject(root, "norm_topk_prob", norm_topk)) ||
        ((moe_router || oss || mix) &&
         !cJSON_AddNumberToObject(root, "router_aux_loss_coef", aux_coef)))
        return sg_error_set(err, SG_ENOMEM, "%s: out of memory", origin);
    return SG_OK;
}

/* ---- writing ------------------------------------------------------------- */

static const char *class_of(sg_arch a)
{
    switch (a) {
    case SG_ARCH_LLAMA: return "LlamaForCausalLM";
    case SG_ARCH_QWEN3: return "Qwen3ForCausalLM";
    case SG_ARCH_SEED_OSS: return "SeedOssForCausalLM";
    case SG_ARCH_QWEN3_MOE: return "Qwen3MoeForCausalLM";
    case SG_ARCH_GPT_OSS: return "GptOssForCausalLM";
    case SG_ARCH_QWEN2: return "Qwen2ForCausalLM";
    case SG_ARCH_MISTRAL: return "MistralForCausalLM";
    case SG_ARCH_PHI3: return "Phi3ForCausalLM";
    case SG_ARCH_MIXTRAL: return "MixtralForCausalLM";
    }
    return "";
}

static void add_int(cJSON *o, const char *k, int64_t v)
{
    cJSON_AddNumberToObject(o, k, (double)v);
}

static cJSON *rope_scaling_json(const sg_model *m)
{
    if (m->rope_scaling == 0)
        return cJSON_CreateNull();
    cJSON *rs = cJSON_CreateObject();
    if (m->rope_scaling == 2) {
        cJSON_AddNumberToObject(rs, "factor", m->rope_factor);
        cJSON_AddNumberToObject(rs, "beta_fast", m->rope_beta_fast);
        cJSON_AddNumberToObject(rs, "beta_slow", m->rope_beta_slow);
        cJSON_AddNumberToObject(rs, "original_max_position_embeddings", m->rope_original_max_pos);
        cJSON_AddNumberToObject(rs, "attention_factor", m->rope_attention_factor);
        cJSON_AddBoolToObject(rs, "truncate", m->rope_truncate);
        cJSON_AddStringToObject(rs, "rope_type", "yarn");
        return rs;
    }
    cJSON_AddNumberToObject(rs, "factor", m->rope_factor);
    cJSON_AddNumberToObject(rs, "low_freq_factor", m->rope_low_freq_factor);
    cJSON_AddNumberToObject(rs, "high_freq_factor", m->rope_high_freq_factor);
    cJSON_AddNumberToObject(rs, "original_max_position_embeddings", m->rope_original_max_pos);
    cJSON_AddStringToObject(rs, "rope_type", "llama3");
    return rs;
}

static void add_moe(cJSON *o, const sg_model *m)
{
    int gpt = m->arch == SG_ARCH_GPT_OSS, mix = m->arch == SG_ARCH_MIXTRAL;
    add_int(o, gpt || mix ? "num_local_experts" : "num_experts", m->num_experts);
    add_int(o, "num_experts_per_tok", m->experts_per_token);
    if (mix) {
        add_int(o, "intermediate_size", m->moe_intermediate_size);
        cJSON_AddNumberToObject(o, "router_jitter_noise", 0.0);
    } else if (gpt) {
        add_int(o, "experts_per_token", m->experts_per_token);
        add_int(o, "intermediate_size", m->moe_intermediate_size);
        cJSON_AddNumberToObject(o, "swiglu_limit", 7.0);
    } else {
        add_int(o, "moe_intermediate_size", m->moe_intermediate_size);
        cJSON_AddBoolToObject(o, "norm_topk_prob", m->norm_topk_prob);
        add_int(o, "decoder_sparse_step", 1);
        cJSON_AddItemToObject(o, "mlp_only_layers", cJSON_CreateArray());
        /* transformers adds the load-balancing loss only with output_router_logits */
        cJSON_AddNumberToObject(o, "router_aux_loss_coef", m->router_aux_loss_coef);
        cJSON_AddBoolToObject(o, "output_router_logits", m->router_aux_loss_coef > 0);
        return;
    }
    /* gpt_oss: the same rule as qwen3_moe */
    cJSON_AddNumberToObject(o, "router_aux_loss_coef", m->router_aux_loss_coef);
    cJSON_AddBoolToObject(o, "output_router_logits", m->router_aux_loss_coef > 0);
}

/* Mistral, Mixtral and Phi3 slide in every layer or in none */
static int slides_everywhere(sg_arch a)
{
    return a == SG_ARCH_MISTRAL || a == SG_ARCH_MIXTRAL || a == SG_ARCH_PHI3;
}

static void add_attention_pattern(cJSON *o, const sg_model *m)
{
    int sliding = 0;
    for (int64_t l = 0; l < m->num_layers; l++)
        sliding += m->layer_attn[l] == SG_ATTN_SLIDING;
    if (slides_everywhere(m->arch)) {
        if (sliding)
            add_int(o, "sliding_window", m->sliding_window);
        else
            cJSON_AddNullToObject(o, "sliding_window");
        return;
    }
    if (m->arch != SG_ARCH_GPT_OSS) {
        cJSON_AddBoolToObject(o, "use_sliding_window", 0);
        cJSON_AddNullToObject(o, "sliding_window");
        return;
    }
    add_int(o, "sliding_window", m->sliding_window);
    cJSON *lt = cJSON_CreateArray();
    for (int64_t l = 0; l < m->num_layers; l++)
        cJSON_AddItemToArray(lt, cJSON_CreateString(m->layer_attn[l] == SG_ATTN_SLIDING
                                                        ? "sliding_attention"
                                                        : "full_attention"));
    cJSON_AddItemToObject(o, "layer_types", lt);
    (void)sliding;
}

int sg_hf_config_text(const sg_model *m, const char *torch_dtype, char **out, sg_error *err)
{
    *out = NULL;
    if (m->rope_scaling < 0)
        return sg_error_set(err, SG_ENOTSUP,
                            "model %s: its rope_scaling type is not one "
                            "stepgraph can write to a config.json (llama3 only)",
                            m->name);
    int seed = m->arch == SG_ARCH_SEED_OSS, gpt = m->arch == SG_ARCH_GPT_OSS;
    /* Qwen2Attention: q/k/v biases and no o_proj one (model_parse.c insists) */
    if (!seed && m->arch != SG_ARCH_QWEN2 && m->o_bias != m->qkv_bias)
        return sg_error_set(err, SG_ENOTSUP,
                            "model %s: an o_proj bias %s q/k/v biases has no "
                            "transformers config for architecture %s",
                            m->name, m->o_bias ? "without" : "with", sg_arch_name(m->arch));
    int n_sliding = 0;
    for (int64_t l = 0; l < m->num_layers; l++)
        n_sliding += m->layer_attn[l] == SG_ATTN_SLIDING;
    if (!gpt && n_sliding && !(slides_everywhere(m->arch) && n_sliding == m->num_layers))
        return sg_error_set(err, SG_ENOTSUP,
                            "model %s: sliding-window layers%s have no "
                            "transformers config for architecture %s",
                            m->name, slides_everywhere(m->arch) ? " in some layers only" : "",
                            sg_arch_name(m->arch));
    if (m->arch == SG_ARCH_PHI3 && m->head_dim * m->num_heads != m->hidden_size)
        return sg_error_set(err, SG_ENOTSUP,
                            "model %s: head_dim %lld is not hidden_size / "
                            "num_attention_heads, which Phi3Config assumes",
                            m->name, (long long)m->head_dim);
    cJSON *o = cJSON_CreateObject();
    cJSON *arr = cJSON_CreateArray();
    cJSON_AddItemToArray(arr, cJSON_CreateString(class_of(m->arch)));
    cJSON_AddItemToObject(o, "architectures", arr);
    cJSON_AddStringToObject(o, "_name_or_path", m->name);
    cJSON_AddStringToObject(o, "model_type", sg_arch_name(m->arch));
    cJSON_AddBoolToObject(o, "attention_bias", m->qkv_bias);
    if (seed)
        cJSON_AddBoolToObject(o, "attention_out_bias", m->o_bias);
    cJSON_AddNumberToObject(o, "attention_dropout", 0.0);
    add_int(o, "head_dim", m->head_dim);
    cJSON_AddStringToObject(o, "hidden_act", "silu");
    add_int(o, "hidden_size", m->hidden_size);
    cJSON_AddNumberToObject(o, "initializer_range", 0.02);
    if (m->num_experts > 0)
        add_moe(o, m);
    else
        add_int(o, "intermediate_size", m->intermediate_size);
    if (m->arch == SG_ARCH_LLAMA || seed)
        cJSON_AddBoolToObject(o, "mlp_bias", 0);
    add_int(o, "max_position_embeddings", m->max_position_embeddings);
    add_int(o, "num_attention_heads", m->num_heads);
    add_int(o, "num_hidden_layers", m->num_layers);
    add_int(o, "num_key_value_heads", m->num_kv_heads);
    cJSON_AddNumberToObject(o, "rms_norm_eps", m->rms_norm_eps);
    cJSON_AddItemToObject(o, "rope_scaling", rope_scaling_json(m));
    cJSON_AddNumberToObject(o, "rope_theta", m->rope_theta);
    add_attention_pattern(o, m);
    /* Phi3Config's default pad_token_id is 32000: an embedding row that
     * transformers would never train (padding_idx), or past a smaller
     * vocabulary; stepgraph trains every row */
    cJSON_AddNullToObject(o, "pad_token_id");
    cJSON_AddBoolToObject(o, "tie_word_embeddings", m->tie_word_embeddings);
    cJSON_AddStringToObject(o, "torch_dtype", torch_dtype);
    cJSON_AddBoolToObject(o, "use_cache", 1);
    add_int(o, "vocab_size", m->vocab_size);
    *out = cJSON_Print(o);
    cJSON_Delete(o);
    return *out ? SG_OK : sg_error_set(err, SG_ENOMEM, "model %s: out of memory", m->name);
}
