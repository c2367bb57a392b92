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
    {"llama", "llama"},       {"qwen3", "qwen3"},     {"qwen3_moe", "qwen3_moe"},
    {"gpt_oss", "gpt_oss"},   {"seed_oss", "seed_oss"},
};

/* Keys stepgraph's model files read under the same name. */
static const char *const model_keys[] = {
    "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
    "num_key_value_heads", "head_dim", "vocab_size", "max_position_embeddings",
    "tie_word_embeddings", "rms_norm_eps", "rope_theta", "rope_scaling", "attention_bias",
    "num_experts", "num_local_experts", "num_experts_per_tok", "moe_intermediate_size",
    "sliding_window", "layer_types",
};

/* transformers keys that do not change the training step's math (inference
 * caches, token ids, storage dtype, initialisation of new weights, the MoE
 * auxiliary loss's reporting) or that are checked below and then dropped. */
static const char *const dropped_keys[] = {
    "architectures", "model_type", "torch_dtype", "dtype", "transformers_version",
    "bos_token_id", "eos_token_id", "pad_token_id", "use_cache", "initializer_range",
    "pretraining_tp", "_name_or_path", "hidden_act", "attention_dropout", "mlp_bias",
    "use_sliding_window", "max_window_layers", "output_router_logits", "router_aux_loss_coef",
    "mlp_only_layers", "decoder_sparse_step", "norm_topk_prob", "experts_per_token",
    "swiglu_limit", "initial_context_length", "residual_dropout", "attention_out_bias",
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

static int bad(const char *origin, const char *key, const cJSON *v, const char *what,
               sg_error *err)
{
    char *s = v ? cJSON_PrintUnformatted(v) : NULL;
    int rc = sg_error_set(err, SG_EINVAL, "%s: %s: %.48s %s", origin, key, s ? s : "(value)",
                          what);
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

/* Keys whose value changes what the step computes: refused unless they say
 * what stepgraph computes. */
static int check_math_keys(const cJSON *root, const char *arch, const char *origin,
                           sg_error *err)
{
    const cJSON *v;
    if ((v = get(root, "hidden_act")) &&
        !(cJSON_IsString(v) && strcmp(v->valuestring, "silu") == 0))
        return bad(origin, "hidden_act", v, "is not supported (stepgraph's MLP is SwiGLU, "
                   "\"silu\")", err);
    static const char *const dropouts[] = {"attention_dropout", "residual_dropout"};
    for (int i = 0; i < 2; i++)
        if ((v = get(root, dropouts[i])) && !is_zero_number(v))
            return bad(origin, dropouts[i], v, "is not supported: stepgraph trains without "
                       "dropout (set it to 0.0 in a copy of the file to train without it)",
                       err);
    if ((v = get(root, "mlp_bias")) && !cJSON_IsFalse(v))
        return bad(origin, "mlp_bias", v, "is not supported (MLP projections without "
                   "biases only)", err);
    if ((v = get(root, "architectures")) && !cJSON_IsArray(v))
        return bad(origin, "architectures", v, "is not an array of class names", err);
    int sliding_arch = strcmp(arch, "gpt_oss") == 0;
    if (!sliding_arch && (v = get(root, "use_sliding_window")) && !cJSON_IsFalse(v))
        return bad(origin, "use_sliding_window", v, "is not supported for this "
                   "architecture (full attention in every layer only)", err);
    if (strcmp(arch, "qwen3_moe") == 0) {
        if ((v = get(root, "mlp_only_layers")) &&
            !(cJSON_IsArray(v) && cJSON_GetArraySize(v) == 0))
            return bad(origin, "mlp_only_layers", v, "is not supported (every layer is a "
                       "mixture of experts)", err);
        if ((v = get(root, "decoder_sparse_step")) &&
            !(cJSON_IsNumber(v) && v->valuedouble == 1.0))
            return bad(origin, "decoder_sparse_step", v, "is not supported (1: every layer "
                       "sparse)", err);
        if ((v = get(root, "norm_topk_prob")) && !cJSON_IsTrue(v))
            return bad(origin, "norm_topk_prob", v, "is not supported (the top-k router "
                       "probabilities are renormalised)", err);
    }
    if (strcmp(arch, "gpt_oss") == 0) {
        if ((v = get(root, "swiglu_limit")) &&
            !(cJSON_IsNumber(v) && v->valuedouble == 7.0))
            return bad(origin, "swiglu_limit", v, "is not supported (gpt-oss clamps at 7.0)",
                       err);
        const cJSON *k = get(root, "experts_per_token"), *k2 = get(root, "num_experts_per_tok");
        if (k && k2 && !(cJSON_IsNumber(k) && cJSON_IsNumber(k2) &&
                         k->valuedouble == k2->valuedouble))
            return bad(origin, "experts_per_token", k, "differs from num_experts_per_tok",
                       err);
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

int sg_hf_config_normalize(cJSON *root, const char *origin, char *ignored,
                           size_t ignored_size, sg_error *err)
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
        return bad(origin, "model_type", mt, "is not supported (llama, qwen3, qwen3_moe, "
                   "gpt_oss, seed_oss)", err);
    int rc = check_math_keys(root, arch, origin, err);
    if (rc)
        return rc;

    /* Seed-OSS names the o_proj bias attention_out_bias */
    const cJSON *ob = get(root, "attention_out_bias");
    int o_bias = ob ? cJSON_IsTrue(ob) : -1;
    if (ob && !cJSON_IsBool(ob))
        return bad(origin, "attention_out_bias", ob, "is not true or false", err);
    /* Qwen3 writes sliding_window even when use_sliding_window is false: then
     * no layer slides */
    int drop_window = strcmp(arch, "gpt_oss") != 0;

    char name[SG_MODEL_NAME_MAX];
    model_name(root, origin, name, sizeof name);

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
        (o_bias >= 0 && !cJSON_AddBoolToObject(root, "o_proj_bias", o_bias)))
        return sg_error_set(err, SG_ENOMEM, "%s: out of memory", origin);
    return SG_OK;
}
