/* model_parse.c - model description files: parse and validate (model.h).
 * Every error names the file, the key and the value. */
#define _POSIX_C_SOURCE 200809L

#include "models/model.h"

#include "common/json_strict.h"
#include "models/hf_config.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* Model files are a few hundred bytes; a cap keeps a wrong path (a dataset,
 * a checkpoint) from being slurped into memory. */
#define MODEL_FILE_MAX (1 << 20)

/* Per-dimension cap: keeps every product of two or three sizes inside
 * int64_t before the whole-model total is checked. */
#define DIM_MAX ((int64_t)1 << 30)
#define EXPERTS_MAX 65536 /* 3 tensors per expert must fit an int count */

static int is_moe_arch(sg_arch a)
{
    return a == SG_ARCH_QWEN3_MOE || a == SG_ARCH_GPT_OSS || a == SG_ARCH_MIXTRAL;
}

/* ------------------------------------------------------------------------ */
/* Parsing                                                                   */

typedef struct parser {
    const char *origin; /* file name or caller's label, first in messages */
    const cJSON *root;
    sg_error *err;
} parser;

/* Keys a model file may hold. "source" and "comment" document the file;
 * keys starting with '_' are free for notes. Anything else is refused so a
 * typo ("num_key_value_head") cannot silently fall back to a default. */
static const char *const known_keys[] = {
    "name",
    "architecture",
    "source",
    "comment",
    "hidden_size",
    "intermediate_size",
    "num_hidden_layers",
    "num_attention_heads",
    "num_key_value_heads",
    "head_dim",
    "vocab_size",
    "max_position_embeddings",
    "tie_word_embeddings",
    "rms_norm_eps",
    "rope_theta",
    "rope_scaling",
    "attention_bias",
    "o_proj_bias",
    "num_experts",
    "num_local_experts",
    "num_experts_per_tok",
    "moe_intermediate_size",
    "sliding_window",
    "layer_types",
    "norm_topk_prob",
    "router_aux_loss_coef",
};
#define N_KNOWN_KEYS (sizeof known_keys / sizeof known_keys[0])

/* Short JSON text of a value for messages ("\"128\"", "true", "[1,2]"). */
static void value_text(const cJSON *item, char *buf, size_t size)
{
    char *s = item ? cJSON_PrintUnformatted(item) : NULL;
    if (!s) {
        snprintf(buf, size, "%s", item ? "(value)" : "(missing)");
        return;
    }
    if (strlen(s) > 48)
        snprintf(buf, size, "%.45s...", s);
    else
        snprintf(buf, size, "%s", s);
    cJSON_free(s);
}

/* "origin: key: <value> <what is wrong>" - the shape every message has. */
static int bad_value(parser *ps, const char *key, const cJSON *item, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static int bad_value(parser *ps, const char *key, const cJSON *item, const char *fmt, ...)
{
    char val[64], what[512];
    value_text(item, val, sizeof val);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    return sg_error_set(ps->err, SG_EINVAL, "%s: %s: %s %s", ps->origin, key, val, what);
}

static int missing(parser *ps, const char *key, const char *why)
{
    return sg_error_set(ps->err, SG_EINVAL, "%s: %s: missing required key%s%s", ps->origin, key,
                        why ? " " : "", why ? why : "");
}

static const cJSON *get(parser *ps, const char *key)
{
    const cJSON *it = cJSON_GetObjectItemCaseSensitive(ps->root, key);
    /* JSON null reads as absent: HF configs write "sliding_window": null. */
    return (it && !cJSON_IsNull(it)) ? it : NULL;
}

/* An integral JSON number with |v| <= 2^53 (exact in a double). */
static int as_integer(const cJSON *it, int64_t *out)
{
    if (!cJSON_IsNumber(it))
        return 0;
    double d = it->valuedouble;
    if (!(fabs(d) <= 9007199254740992.0) || d != floor(d))
        return 0;
    *out = (int64_t)d;
    return 1;
}

/* Reads a positive integer size. present: NULL means the key is required. */
static int get_size(parser *ps, const char *key, int64_t *out, int *present)
{
    const cJSON *it = get(ps, key);
    if (present)
        *present = it != NULL;
    if (!it)
        return present ? 0 : missing(ps, key, NULL);
    int64_t v;
    if (!as_integer(it, &v))
        return bad_value(ps, key, it, "is not an integer");
    if (v <= 0)
        return bad_value(ps, key, it, "is not positive");
    if (v > DIM_MAX)
        return bad_value(ps, key, it, "is larger than %lld", (long long)DIM_MAX);
    *out = v;
    return 0;
}

static int get_positive_number(parser *ps, const char *key, double *out)
{
    const cJSON *it = get(ps, key);
    if (!it)
        return missing(ps, key, NULL);
    if (!cJSON_IsNumber(it))
        return bad_value(ps, key, it, "is not a number");
    if (!(it->valuedouble > 0) || !isfinite(it->valuedouble))
        return bad_value(ps, key, it, "is not positive");
    *out = it->valuedouble;
    return 0;
}

static int get_bool(parser *ps, const char *key, int def, int *out)
{
    const cJSON *it = get(ps, key);
    if (!it) {
        *out = def;
        return 0;
    }
    if (!cJSON_IsBool(it))
        return bad_value(ps, key, it, "is not true or false");
    *out = cJSON_IsTrue(it) ? 1 : 0;
    return 0;
}

/* Levenshtein distance, capped, for "did you mean" on unknown keys. */
static int edit_distance(const char *a, const char *b)
{
    size_t la = strlen(a), lb = strlen(b);
    if (la > 63 || lb > 63)
        return 99;
    int row[64];
    for (size_t j = 0; j <= lb; j++)
        row[j] = (int)j;
    for (size_t i = 1; i <= la; i++) {
        int diag = row[0];
        row[0] = (int)i;
        for (size_t j = 1; j <= lb; j++) {
            int up = row[j];
            int best = diag + (a[i - 1] != b[j - 1]);
            if (up + 1 < best)
                best = up + 1;
            if (row[j - 1] + 1 < best)
                best = row[j - 1] + 1;
            row[j] = best;
            diag = up;
        }
    }
    return row[lb];
}

static int check_keys(parser *ps)
{
    for (const cJSON *it = ps->root->child; it; it = it->next) {
        const char *k = it->string;
        for (const cJSON *o = it->next; o; o = o->next)
            if (strcmp(o->string, k) == 0)
                return bad_value(ps, k, o,
                                 "repeats the key (a JSON object "
                                 "holds each key once)");
        if (k[0] == '_')
            continue;
        size_t i;
        const char *best = NULL;
        int best_d = 4; /* suggest only close misspellings */
        for (i = 0; i < N_KNOWN_KEYS; i++) {
            if (strcmp(k, known_keys[i]) == 0)
                break;
            int d = edit_distance(k, known_keys[i]);
            if (d < best_d) {
                best_d = d;
                best = known_keys[i];
            }
        }
        if (i < N_KNOWN_KEYS)
            continue;
        if (best)
            return bad_value(ps, k, it,
                             "is an unknown key (did you mean "
                             "\"%s\"?)",
                             best);
        return bad_value(ps, k, it,
                         "is an unknown key (notes go in \"comment\" "
                         "or keys starting with '_')");
    }
    return 0;
}

static double num_or(const cJSON *o, const char *key, double dflt)
{
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsNumber(t) ? t->valuedouble : dflt;
}

/* rope_scaling: an object whose usual fields have sane types; the "llama3"
 * type's fields are kept (the executor applies them), another type is
 * recorded as -1 (the graph does not depend on it; execution refuses it). */
static int check_rope_scaling(parser *ps, sg_model *m)
{
    const cJSON *rs = get(ps, "rope_scaling");
    if (!rs)
        return 0;
    if (!cJSON_IsObject(rs))
        return bad_value(ps, "rope_scaling", rs, "is not an object or null");
    static const char *const str_keys[] = {"rope_type", "type"};
    for (int i = 0; i < 2; i++) {
        const cJSON *t = cJSON_GetObjectItemCaseSensitive(rs, str_keys[i]);
        if (t && !cJSON_IsString(t)) {
            char key[64];
            snprintf(key, sizeof key, "rope_scaling.%s", str_keys[i]);
            return bad_value(ps, key, t, "is not a string");
        }
    }
    static const char *const num_keys[] = {"factor",          "original_max_position_embeddings",
                                           "low_freq_factor", "high_freq_factor",
                                           "beta_fast",       "beta_slow",
                                           "attention_factor"};
    for (size_t i = 0; i < sizeof num_keys / sizeof num_keys[0]; i++) {
        const cJSON *t = cJSON_GetObjectItemCaseSensitive(rs, num_keys[i]);
        if (t && (!cJSON_IsNumber(t) || !(t->valuedouble > 0))) {
            char key[64];
            snprintf(key, sizeof key, "rope_scaling.%s", num_keys[i]);
            return bad_value(ps, key, t, "is not a positive number");
        }
    }
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(rs, "rope_type");
    if (!type)
        type = cJSON_GetObjectItemCaseSensitive(rs, "type");
    if (type && strcmp(type->valuestring, "default") == 0)
        return 0;
    const int yarn = type && strcmp(type->valuestring, "yarn") == 0;
    m->rope_scaling = type && strcmp(type->valuestring, "llama3") == 0 ? 1 : yarn ? 2 : -1;
    m->rope_factor = num_or(rs, "factor", 8.0);
    m->rope_low_freq_factor = num_or(rs, "low_freq_factor", 1.0);
    m->rope_high_freq_factor = num_or(rs, "high_freq_factor", 4.0);
    m->rope_original_max_pos = num_or(rs, "original_max_position_embeddings", 8192.0);
    if (yarn) { /* transformers' _compute_yarn_parameters and its defaults */
        const cJSON *tr = cJSON_GetObjectItemCaseSensitive(rs, "truncate");
        if (tr && !cJSON_IsBool(tr))
            return bad_value(ps, "rope_scaling.truncate", tr, "is not true or false");
        static const char *const deepseek[] = {"mscale", "mscale_all_dim"};
        for (int i = 0; i < 2; i++) {
            const cJSON *t = cJSON_GetObjectItemCaseSensitive(rs, deepseek[i]);
            if (t) {
                char key[64];
                snprintf(key, sizeof key, "rope_scaling.%s", deepseek[i]);
                return bad_value(ps, key, t, "is not supported (yarn without mscale only)");
            }
        }
        m->rope_factor = num_or(rs, "factor", 1.0);
        m->rope_beta_fast = num_or(rs, "beta_fast", 32.0);
        m->rope_beta_slow = num_or(rs, "beta_slow", 1.0);
        m->rope_original_max_pos =
            num_or(rs, "original_max_position_embeddings", (double)m->max_position_embeddings);
        m->rope_truncate = tr ? cJSON_IsTrue(tr) : 1;
        m->rope_attention_factor = num_or(
            rs, "attention_factor", m->rope_factor > 1.0 ? 0.1 * log(m->rope_factor) + 1.0 : 1.0);
    }
    return 0;
}

static int parse_arch(parser *ps, sg_arch *out)
{
    const cJSON *it = get(ps, "architecture");
    if (!it)
        return missing(ps, "architecture", NULL);
    static const sg_arch all[] = {SG_ARCH_LLAMA,     SG_ARCH_QWEN3,   SG_ARCH_SEED_OSS,
                                  SG_ARCH_QWEN3_MOE, SG_ARCH_GPT_OSS, SG_ARCH_QWEN2,
                                  SG_ARCH_MISTRAL,   SG_ARCH_PHI3,    SG_ARCH_MIXTRAL};
    if (cJSON_IsString(it))
        for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
            if (strcmp(it->valuestring, sg_arch_name(all[i])) == 0) {
                *out = all[i];
                return 0;
            }
    return bad_value(ps, "architecture", it,
                     "is not one of llama, qwen3, "
                     "seed_oss, qwen3_moe, gpt_oss, qwen2, mistral, phi3, mixtral");
}

/* The router's options. norm_topk_prob defaults to true (what Qwen3-30B-A3B
 * publishes; transformers' Qwen3MoeConfig class default is false, so
 * models/hf_config.c writes the value a config.json implies).
 * router_aux_loss_coef defaults to 0.001, Qwen3MoeConfig's default; 0 trains
 * without the load-balancing loss. */
static int parse_router(parser *ps, sg_model *m)
{
    int rc = get_bool(ps, "norm_topk_prob", 1, &m->norm_topk_prob);
    if (rc < 0)
        return rc;
    /* MixtralSparseMoeBlock always renormalises the top-k weights */
    if (m->arch == SG_ARCH_MIXTRAL && !m->norm_topk_prob)
        return bad_value(ps, "norm_topk_prob", get(ps, "norm_topk_prob"),
                         "is not supported "
                         "for mixtral (its router always renormalises the top-k weights)");
    m->router_aux_loss_coef = 0.001;
    const cJSON *it = get(ps, "router_aux_loss_coef");
    if (it) {
        if (!cJSON_IsNumber(it) || !isfinite(it->valuedouble))
            return bad_value(ps, "router_aux_loss_coef", it, "is not a number");
        if (it->valuedouble < 0)
            return bad_value(ps, "router_aux_loss_coef", it, "is negative");
        m->router_aux_loss_coef = it->valuedouble;
    }
    return 0;
}

static int parse_moe(parser *ps, sg_model *m)
{
    const char *moe_keys[] = {"num_experts",           "num_local_experts", "num_experts_per_tok",
                              "moe_intermediate_size", "norm_topk_prob",    "router_aux_loss_coef"};
    if (!is_moe_arch(m->arch)) {
        for (int i = 0; i < 6; i++) {
            const cJSON *it = get(ps, moe_keys[i]);
            if (it)
                return bad_value(ps, moe_keys[i], it,
                                 "applies only to the "
                                 "qwen3_moe, mixtral and gpt_oss architectures, not %s",
                                 sg_arch_name(m->arch));
        }
        return 0;
    }

    /* HF spells the expert count num_experts (qwen3_moe) or
     * num_local_experts (gpt-oss); either is accepted, both must agree. */
    int64_t e1 = 0, e2 = 0;
    int has1, has2, rc;
    if ((rc = get_size(ps, "num_experts", &e1, &has1)) < 0 ||
        (rc = get_size(ps, "num_local_experts", &e2, &has2)) < 0)
        return rc;
    if (!has1 && !has2)
        return missing(ps, "num_experts",
                       "(or num_local_experts) for a "
                       "mixture-of-experts architecture");
    if (has1 && has2 && e1 != e2)
        return bad_value(ps, "num_local_experts", get(ps, "num_local_experts"),
                         "differs from num_experts %lld", (long long)e1);
    m->num_experts = has1 ? e1 : e2;
    const char *ekey = has1 ? "num_experts" : "num_local_experts";
    if (m->num_experts > EXPERTS_MAX)
        return bad_value(ps, ekey, get(ps, ekey), "is more than %d experts", EXPERTS_MAX);

    if ((rc = get_size(ps, "num_experts_per_tok", &m->experts_per_token, NULL)) < 0)
        return rc;
    if (m->experts_per_token > m->num_experts)
        return bad_value(ps, "num_experts_per_tok", get(ps, "num_experts_per_tok"),
                         "is more than %s %lld", ekey, (long long)m->num_experts);

    int has_moe_i, has_i;
    int64_t inter = 0;
    if ((rc = get_size(ps, "moe_intermediate_size", &m->moe_intermediate_size, &has_moe_i)) < 0 ||
        (rc = get_size(ps, "intermediate_size", &inter, &has_i)) < 0)
        return rc;
    if (!has_moe_i) {
        /* gpt-oss's and Mixtral's config.json name the expert width
         * intermediate_size. */
        if ((m->arch == SG_ARCH_GPT_OSS || m->arch == SG_ARCH_MIXTRAL) && has_i)
            m->moe_intermediate_size = inter;
        else
            return missing(ps, "moe_intermediate_size", "(width of each expert)");
    }
    /* Every layer is MoE (no mlp_only_layers): qwen3_moe's intermediate_size
     * sizes dense layers that these models do not have. */
    m->intermediate_size = 0;
    return parse_router(ps, m);
}

static int parse_layer_types(parser *ps, sg_model *m)
{
    int rc, has_sw;
    if ((rc = get_size(ps, "sliding_window", &m->sliding_window, &has_sw)) < 0)
        return rc;
    if (!has_sw)
        m->sliding_window = 0;

    const cJSON *lt = get(ps, "layer_types");
    int n_sliding = 0;
    /* Mistral, Mixtral and Phi3 slide in every layer when sliding_window is
     * set (their models' mask: a sliding-window causal mask unless it is
     * null) */
    const int every =
        (m->arch == SG_ARCH_MISTRAL || m->arch == SG_ARCH_MIXTRAL || m->arch == SG_ARCH_PHI3) &&
        m->sliding_window > 0;
    if (!lt) {
        /* gpt-oss alternates, sliding first (transformers' GptOssConfig);
         * the others are full attention throughout. */
        for (int64_t l = 0; l < m->num_layers; l++) {
            m->layer_attn[l] = (every || (m->arch == SG_ARCH_GPT_OSS && l % 2 == 0))
                                   ? SG_ATTN_SLIDING
                                   : SG_ATTN_FULL;
            n_sliding += m->layer_attn[l] == SG_ATTN_SLIDING;
        }
    } else {
        if (!cJSON_IsArray(lt))
            return bad_value(ps, "layer_types", lt, "is not an array");
        int n = cJSON_GetArraySize(lt);
        if (n != m->num_layers)
            return bad_value(ps, "layer_types", lt,
                             "has %d entries but "
                             "num_hidden_layers is %lld",
                             n, (long long)m->num_layers);
        int l = 0;
        for (const cJSON *e = lt->child; e; e = e->next, l++) {
            char key[48];
            snprintf(key, sizeof key, "layer_types[%d]", l);
            if (cJSON_IsString(e) && strcmp(e->valuestring, "full_attention") == 0)
                m->layer_attn[l] = SG_ATTN_FULL;
            else if (cJSON_IsString(e) && strcmp(e->valuestring, "sliding_attention") == 0)
                m->layer_attn[l] = SG_ATTN_SLIDING;
            else
                return bad_value(ps, key, e,
                                 "is not \"full_attention\" or "
                                 "\"sliding_attention\"");
            n_sliding += m->layer_attn[l] == SG_ATTN_SLIDING;
        }
    }
    if (n_sliding > 0 && m->sliding_window == 0)
        return missing(ps, "sliding_window", "(layers use sliding attention)");
    return 0;
}

/* Rejects models whose totals would not fit int64_t (sizes are capped one by
 * one, their products are checked here in floating point). */
static int check_total_fits(parser *ps, const sg_model *m)
{
    double H = (double)m->hidden_size, D = (double)m->head_dim;
    double layer = H * D * (2.0 * m->num_heads + 2.0 * m->num_kv_heads) +
                   3.0 * H * (double)m->intermediate_size +
                   3.0 * H * (double)m->moe_intermediate_size * m->num_experts + 4.0 * H +
                   4.0 * D * m->num_heads;
    double total = 2.0 * (double)m->vocab_size * H + (double)m->num_layers * layer;
    if (total > 1e18)
        return sg_error_set(ps->err, SG_EINVAL,
                            "%s: the sizes give %.3g "
                            "parameters, more than stepgraph counts (1e18)",
                            ps->origin, total);
    return 0;
}

/* transformers' Llama, Qwen3 and GptOss attention give o_proj a bias
 * exactly when attention_bias is set; Seed-OSS keeps it apart
 * (attention_out_bias, false in its config). Qwen2Attention always has q/k/v
 * biases and never an o_proj one; Phi3Attention, MistralAttention and
 * Mixtral's have none. */
static int parse_biases(parser *ps, sg_model *m)
{
    const int qwen2 = m->arch == SG_ARCH_QWEN2;
    const int none =
        m->arch == SG_ARCH_PHI3 || m->arch == SG_ARCH_MISTRAL || m->arch == SG_ARCH_MIXTRAL;
    int rc;
    if ((rc = get_bool(ps, "attention_bias", qwen2, &m->qkv_bias)) < 0 ||
        (rc = get_bool(ps, "o_proj_bias", m->arch == SG_ARCH_SEED_OSS || qwen2 ? 0 : m->qkv_bias,
                       &m->o_bias)) < 0)
        return rc;
    if (qwen2 && (!m->qkv_bias || m->o_bias))
        return bad_value(ps, m->qkv_bias ? "o_proj_bias" : "attention_bias",
                         get(ps, m->qkv_bias ? "o_proj_bias" : "attention_bias"),
                         "is not supported for qwen2 (q/k/v biases, no o_proj bias)");
    if (none && (m->qkv_bias || m->o_bias))
        return bad_value(ps, m->qkv_bias ? "attention_bias" : "o_proj_bias",
                         get(ps, m->qkv_bias ? "attention_bias" : "o_proj_bias"),
                         "is not supported for %s (its projections have no biases)",
                         sg_arch_name(m->arch));
    return 0;
}

static int parse_root(parser *ps, sg_model *m)
{
    int rc;
    if ((rc = check_keys(ps)) < 0)
        return rc;

    const cJSON *name = get(ps, "name");
    if (!name)
        return missing(ps, "name", NULL);
    if (!cJSON_IsString(name) || name->valuestring[0] == '\0')
        return bad_value(ps, "name", name, "is not a non-empty string");
    if (strlen(name->valuestring) >= SG_MODEL_NAME_MAX)
        return bad_value(ps, "name", name, "is longer than %d characters", SG_MODEL_NAME_MAX - 1);
    snprintf(m->name, sizeof m->name, "%s", name->valuestring);
    for (int i = 0; i < 2; i++) {
        const char *k = i ? "comment" : "source";
        const cJSON *it = get(ps, k);
        if (it && !cJSON_IsString(it))
            return bad_value(ps, k, it, "is not a string");
    }

    if ((rc = parse_arch(ps, &m->arch)) < 0)
        return rc;

    if ((rc = get_size(ps, "hidden_size", &m->hidden_size, NULL)) < 0 ||
        (rc = get_size(ps, "num_hidden_layers", &m->num_layers, NULL)) < 0 ||
        (rc = get_size(ps, "num_attention_heads", &m->num_heads, NULL)) < 0 ||
        (rc = get_size(ps, "vocab_size", &m->vocab_size, NULL)) < 0 ||
        (rc = get_size(ps, "max_position_embeddings", &m->max_position_embeddings, NULL)) < 0)
        return rc;
    if (m->num_layers > SG_MODEL_MAX_LAYERS)
        return bad_value(ps, "num_hidden_layers", get(ps, "num_hidden_layers"),
                         "is more than SG_MODEL_MAX_LAYERS (%d)", SG_MODEL_MAX_LAYERS);

    /* Absent kv heads mean multi-head attention, as in HF configs. */
    int has;
    if ((rc = get_size(ps, "num_key_value_heads", &m->num_kv_heads, &has)) < 0)
        return rc;
    if (!has)
        m->num_kv_heads = m->num_heads;
    if (m->num_heads % m->num_kv_heads != 0)
        return bad_value(ps, "num_key_value_heads", get(ps, "num_key_value_heads"),
                         "does not divide num_attention_heads %lld", (long long)m->num_heads);

    /* head_dim * heads may differ from hidden_size (Seed-OSS, Qwen3-30B-A3B:
     * the query width is twice the hidden size), so only its default needs
     * the division to be exact. */
    if ((rc = get_size(ps, "head_dim", &m->head_dim, &has)) < 0)
        return rc;
    if (!has) {
        if (m->hidden_size % m->num_heads != 0)
            return missing(ps, "head_dim",
                           "(hidden_size is not a multiple of "
                           "num_attention_heads, so it has no default)");
        m->head_dim = m->hidden_size / m->num_heads;
    }

    if (!is_moe_arch(m->arch) &&
        (rc = get_size(ps, "intermediate_size", &m->intermediate_size, NULL)) < 0)
        return rc;

    if ((rc = get_bool(ps, "tie_word_embeddings", 0, &m->tie_word_embeddings)) < 0 ||
        (rc = get_positive_number(ps, "rms_norm_eps", &m->rms_norm_eps)) < 0 ||
        (rc = get_positive_number(ps, "rope_theta", &m->rope_theta)) < 0 ||
        (rc = check_rope_scaling(ps, m)) < 0)
        return rc;
    if (m->rms_norm_eps >= 1.0)
        return bad_value(ps, "rms_norm_eps", get(ps, "rms_norm_eps"),
                         "is not below 1 (an epsilon is tiny, e.g. 1e-5)");

    if ((rc = parse_biases(ps, m)) < 0)
        return rc;

    m->qk_norm = m->arch == SG_ARCH_QWEN3 || m->arch == SG_ARCH_QWEN3_MOE;
    m->attention_sinks = m->arch == SG_ARCH_GPT_OSS;
    m->expert_bias = m->router_bias = m->arch == SG_ARCH_GPT_OSS;

    if ((rc = parse_moe(ps, m)) < 0 || (rc = parse_layer_types(ps, m)) < 0)
        return rc;
    return check_total_fits(ps, m);
}

/* 1-based line and column of byte offset `off` in text. */
static void line_col(const char *text, size_t off, int *line, int *col)
{
    *line = 1;
    *col = 1;
    for (size_t i = 0; i < off && text[i]; i++) {
        if (text[i] == '\n') {
            (*line)++;
            *col = 1;
        } else {
            (*col)++;
        }
    }
}

int sg_model_parse(const char *json_text, const char *origin, sg_model *model, sg_error *err)
{
    if (!origin)
        origin = "(model)";
    if (!json_text || !model)
        return sg_error_set(err, SG_EINVAL, "%s: no JSON text or no model", origin);

    /* cJSON alone would read 01, 2., "\u0000" and repeated keys without a
     * word: the strict check refuses them with line and column. */
    int rc = sg_json_check_strict(json_text, strlen(json_text), 0, origin, err);
    if (rc)
        return rc;
    if (strncmp(json_text, "\xEF\xBB\xBF", 3) == 0) /* a UTF-8 BOM, as for configs */
        json_text += 3;
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithOpts(json_text, &end, 1);
    if (!root) {
        size_t off = end ? (size_t)(end - json_text) : 0;
        int line, col;
        line_col(json_text, off, &line, &col);
        char near[24];
        size_t k = 0;
        for (const char *p = json_text + off; *p && *p != '\n' && k < 20; p++)
            near[k++] = *p;
        near[k] = '\0';
        return sg_error_set(err, SG_EINVAL, "%s:%d:%d: invalid JSON near \"%s\"", origin, line, col,
                            near);
    }

    /* Parse into a scratch copy: a failed load leaves *model untouched. */
    sg_model *m = calloc(1, sizeof *m);
    if (!m) {
        cJSON_Delete(root);
        return sg_error_set(err, SG_ENOMEM, "%s: out of memory", origin);
    }
    parser ps = {.origin = origin, .root = root, .err = err};
    if (!cJSON_IsObject(root))
        rc = bad_value(&ps, "(top level)", root, "is not a JSON object");
    else {
        /* a transformers config.json: rewritten into a model description */
        m->from_hf_config = sg_hf_config_detect(root);
        rc = m->from_hf_config ? sg_hf_config_normalize(root, origin, m->hf_ignored_keys,
                                                        sizeof m->hf_ignored_keys, err)
                               : 0;
        if (rc == 0)
            rc = parse_root(&ps, m);
    }
    if (rc == 0)
        *model = *m;
    free(m);
    cJSON_Delete(root);
    return rc;
}

int sg_model_load(const char *path, sg_model *model, sg_error *err)
{
    if (!path || !*path)
        return sg_error_set(err, SG_EINVAL, "model file: empty path");
    FILE *f = fopen(path, "rb");
    if (!f) {
        int e = errno;
        return sg_error_set(err, e == ENOENT ? SG_ENOENT : SG_EIO, "%s: cannot open model file: %s",
                            path, strerror(e));
    }
    char *buf = malloc(MODEL_FILE_MAX + 1);
    if (!buf) {
        fclose(f);
        return sg_error_set(err, SG_ENOMEM, "%s: out of memory", path);
    }
    size_t n = fread(buf, 1, MODEL_FILE_MAX + 1, f);
    int read_err = ferror(f);
    fclose(f);
    int rc;
    if (read_err)
        rc = sg_error_set(err, SG_EIO, "%s: read error", path);
    else if (n > MODEL_FILE_MAX)
        rc = sg_error_set(err, SG_EINVAL,
                          "%s: larger than %d bytes: not a "
                          "model description",
                          path, MODEL_FILE_MAX);
    else {
        buf[n] = '\0';
        if (strlen(buf) != n)
            rc = sg_error_set(err, SG_EINVAL,
                              "%s: contains a NUL byte: not a "
                              "JSON model description",
                              path);
        else
            rc = sg_model_parse(buf, path, model, err);
    }
    free(buf);
    return rc;
}
