/* model.c - model descriptions: count and list parameters, find model
 * files, describe a model (the JSON parser is model_parse.c).
 *
 * One function (visit_unit) enumerates the parameter tensors of a unit; the
 * tensor list, the per-unit counts and the totals are all derived from it, so
 * the names the weight loader sees and the sizes the step compiler packs can
 * never disagree.
 */
#define _POSIX_C_SOURCE 200809L /* stat(), opendir() with -std=c11 */

#include "models/model.h"

#include <cjson/cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "common/json_util.h"

/* The Makefile passes both with -D; the fallbacks let this file compile
 * alone (tests built by hand, other build systems). */
#ifndef SG_SRC_MODELS_DIR
#define SG_SRC_MODELS_DIR ""
#endif
#ifndef SG_PKGDATADIR
#define SG_PKGDATADIR "/usr/local/share/stepgraph"
#endif

const char *sg_arch_name(sg_arch arch)
{
    switch (arch) {
    case SG_ARCH_LLAMA: return "llama";
    case SG_ARCH_QWEN3: return "qwen3";
    case SG_ARCH_SEED_OSS: return "seed_oss";
    case SG_ARCH_QWEN3_MOE: return "qwen3_moe";
    case SG_ARCH_GPT_OSS: return "gpt_oss";
    case SG_ARCH_QWEN2: return "qwen2";
    case SG_ARCH_MISTRAL: return "mistral";
    case SG_ARCH_PHI3: return "phi3";
    case SG_ARCH_MIXTRAL: return "mixtral";
    }
    return "unknown";
}

/* ------------------------------------------------------------------------ */
/* Parameter tensors                                                         */

typedef struct visitor {
    void (*fn)(const sg_tensor_info *t, void *ctx);
    void *ctx;
} visitor;

/* Builds one tensor record and hands it to the visitor. Shapes are the
 * safetensors ones: a Linear weight is (out_features, in_features). */
static void emit(const visitor *v, int is_expert, int ndim, int64_t d0, int64_t d1, int64_t d2,
                 const char *fmt, ...) __attribute__((format(printf, 7, 8)));
static void emit(const visitor *v, int is_expert, int ndim, int64_t d0, int64_t d1, int64_t d2,
                 const char *fmt, ...)
{
    sg_tensor_info t;
    memset(&t, 0, sizeof t);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(t.name, sizeof t.name, fmt, ap);
    va_end(ap);
    t.ndim = ndim;
    t.shape[0] = d0;
    t.shape[1] = ndim > 1 ? d1 : 0;
    t.shape[2] = ndim > 2 ? d2 : 0;
    t.numel = d0 * (ndim > 1 ? d1 : 1) * (ndim > 2 ? d2 : 1);
    t.is_expert = is_expert;
    v->fn(&t, v->ctx);
}

#define W1(v, n, ...) emit((v), 0, 1, (n), 0, 0, __VA_ARGS__)
#define W2(v, a, b, ...) emit((v), 0, 2, (a), (b), 0, __VA_ARGS__)

/* Tensors of one decoder layer, in packing order: the order of the forward
 * pass (norm, attention, norm, MLP), each weight followed by its bias. */
static void visit_layer(const sg_model *m, int l, const visitor *v)
{
    const int64_t H = m->hidden_size, D = m->head_dim;
    const int64_t QW = m->num_heads * D;    /* query width (may differ from H) */
    const int64_t KW = m->num_kv_heads * D; /* key/value width (GQA) */
    const char *p = "model.layers";

    W1(v, H, "%s.%d.input_layernorm.weight", p, l); /* (H) */
    if (m->arch == SG_ARCH_PHI3) {
        /* Phi3Attention's one qkv_proj: its rows are q's, then k's, then v's,
         * the same floats as the three projections one after the other */
        W2(v, QW + 2 * KW, H, "%s.%d.self_attn.qkv_proj.weight", p, l); /* (QW+2KW, H) */
    } else {
        W2(v, QW, H, "%s.%d.self_attn.q_proj.weight", p, l); /* (heads*D, H) */
        if (m->qkv_bias)
            W1(v, QW, "%s.%d.self_attn.q_proj.bias", p, l);
        W2(v, KW, H, "%s.%d.self_attn.k_proj.weight", p, l); /* (kv*D, H) */
        if (m->qkv_bias)
            W1(v, KW, "%s.%d.self_attn.k_proj.bias", p, l);
        W2(v, KW, H, "%s.%d.self_attn.v_proj.weight", p, l); /* (kv*D, H) */
        if (m->qkv_bias)
            W1(v, KW, "%s.%d.self_attn.v_proj.bias", p, l);
    }
    W2(v, H, QW, "%s.%d.self_attn.o_proj.weight", p, l); /* (H, heads*D) */
    if (m->o_bias)
        W1(v, H, "%s.%d.self_attn.o_proj.bias", p, l);
    if (m->qk_norm) {
        W1(v, D, "%s.%d.self_attn.q_norm.weight", p, l); /* (D) */
        W1(v, D, "%s.%d.self_attn.k_norm.weight", p, l); /* (D) */
    }
    if (m->attention_sinks)
        W1(v, m->num_heads, "%s.%d.self_attn.sinks", p, l);  /* (heads) */
    W1(v, H, "%s.%d.post_attention_layernorm.weight", p, l); /* (H) */

    if (m->num_experts == 0 && m->arch == SG_ARCH_PHI3) {
        /* Phi3MLP's gate_up_proj: gate's rows, then up's */
        const int64_t I = m->intermediate_size;
        W2(v, 2 * I, H, "%s.%d.mlp.gate_up_proj.weight", p, l); /* (2I, H) */
        W2(v, H, I, "%s.%d.mlp.down_proj.weight", p, l);        /* (H, I) */
        return;
    }
    if (m->num_experts == 0) {
        const int64_t I = m->intermediate_size;
        W2(v, I, H, "%s.%d.mlp.gate_proj.weight", p, l); /* (I, H) */
        W2(v, I, H, "%s.%d.mlp.up_proj.weight", p, l);   /* (I, H) */
        W2(v, H, I, "%s.%d.mlp.down_proj.weight", p, l); /* (H, I) */
        return;
    }

    const int64_t E = m->num_experts, I = m->moe_intermediate_size;
    if (m->arch == SG_ARCH_GPT_OSS) {
        /* transformers' GptOssTopKRouter and GptOssExperts: experts are
         * fused into 3-d tensors, gate and up interleaved in one. */
        W2(v, E, H, "%s.%d.mlp.router.weight", p, l); /* (E, H) */
        if (m->router_bias)
            W1(v, E, "%s.%d.mlp.router.bias", p, l); /* (E) */
        emit(v, 1, 3, E, H, 2 * I, "%s.%d.mlp.experts.gate_up_proj", p, l);
        if (m->expert_bias)
            emit(v, 1, 2, E, 2 * I, 0, "%s.%d.mlp.experts.gate_up_proj_bias", p, l);
        emit(v, 1, 3, E, I, H, "%s.%d.mlp.experts.down_proj", p, l);
        if (m->expert_bias)
            emit(v, 1, 2, E, H, 0, "%s.%d.mlp.experts.down_proj_bias", p, l);
        return;
    }

    if (m->arch == SG_ARCH_MIXTRAL) {
        /* MixtralSparseMoeBlock: router "gate", expert e's w1 (gate), w3
         * (up), w2 (down), packed in the order gate, up, down as qwen3_moe's */
        W2(v, E, H, "%s.%d.block_sparse_moe.gate.weight", p, l); /* (E, H) */
        for (int64_t e = 0; e < E; e++) {
            static const char *const w[] = {"w1", "w3", "w2"};
            for (int j = 0; j < 3; j++)
                emit(v, 1, 2, j == 2 ? H : I, j == 2 ? I : H, 0,
                     "%s.%d.block_sparse_moe.experts.%lld.%s.weight", p, l, (long long)e, w[j]);
        }
        return;
    }

    /* qwen3_moe: router "gate", then one SwiGLU MLP per expert. */
    W2(v, E, H, "%s.%d.mlp.gate.weight", p, l); /* (E, H) */
    if (m->router_bias)
        W1(v, E, "%s.%d.mlp.gate.bias", p, l);
    for (int64_t e = 0; e < E; e++) {
        emit(v, 1, 2, I, H, 0, "%s.%d.mlp.experts.%lld.gate_proj.weight", p, l,
             (long long)e); /* (Imoe, H) */
        emit(v, 1, 2, I, H, 0, "%s.%d.mlp.experts.%lld.up_proj.weight", p, l,
             (long long)e); /* (Imoe, H) */
        emit(v, 1, 2, H, I, 0, "%s.%d.mlp.experts.%lld.down_proj.weight", p, l,
             (long long)e); /* (H, Imoe) */
        if (m->expert_bias) {
            emit(v, 1, 1, I, 0, 0, "%s.%d.mlp.experts.%lld.gate_proj.bias", p, l, (long long)e);
            emit(v, 1, 1, I, 0, 0, "%s.%d.mlp.experts.%lld.up_proj.bias", p, l, (long long)e);
            emit(v, 1, 1, H, 0, 0, "%s.%d.mlp.experts.%lld.down_proj.bias", p, l, (long long)e);
        }
    }
}

/* Returns 0, or SG_EINVAL when unit is out of range. */
static int visit_unit(const sg_model *m, int unit, const visitor *v)
{
    const int L = (int)m->num_layers;
    if (unit < 0 || unit > L + 1)
        return SG_EINVAL;
    if (unit == 0) {
        W2(v, m->vocab_size, m->hidden_size, "model.embed_tokens.weight"); /* (V, H) */
    } else if (unit <= L) {
        visit_layer(m, unit - 1, v);
    } else {
        W1(v, m->hidden_size, "model.norm.weight"); /* (H) */
        /* Tied: the head is embed_tokens (unit 0), counted once there. */
        if (!m->tie_word_embeddings)
            W2(v, m->vocab_size, m->hidden_size, "lm_head.weight"); /* (V, H) */
    }
    return 0;
}

typedef struct fill_ctx {
    sg_tensor_info *out;
    int cap, n;
} fill_ctx;

static void fill_fn(const sg_tensor_info *t, void *ctx)
{
    fill_ctx *c = ctx;
    if (c->out && c->n < c->cap)
        c->out[c->n] = *t;
    c->n++;
}

/* Errors: SG_EINVAL (unit out of range), SG_ENOMEM (cap too small; out then
 * holds the first cap tensors). */
int sg_model_unit_tensors(const sg_model *model, int unit, sg_tensor_info *out, int cap)
{
    fill_ctx c = {.out = out, .cap = cap, .n = 0};
    visitor v = {.fn = fill_fn, .ctx = &c};
    int rc = visit_unit(model, unit, &v);
    if (rc < 0)
        return rc;
    if (out && c.n > cap)
        return SG_ENOMEM;
    return c.n;
}

typedef struct count_ctx {
    int64_t dense, expert;
} count_ctx;

static void count_fn(const sg_tensor_info *t, void *ctx)
{
    count_ctx *c = ctx;
    if (t->is_expert)
        c->expert += t->numel;
    else
        c->dense += t->numel;
}

static int count_unit(const sg_model *m, int unit, count_ctx *c)
{
    c->dense = c->expert = 0;
    visitor v = {.fn = count_fn, .ctx = c};
    return visit_unit(m, unit, &v);
}

/* Both return SG_EINVAL (negative) for a unit out of range. */
int64_t sg_model_unit_params(const sg_model *model, int unit)
{
    count_ctx c;
    int rc = count_unit(model, unit, &c);
    return rc < 0 ? rc : c.dense + c.expert;
}

/* A token goes through top_k of the E routed experts of a layer, so the
 * experts count k/E of their size; routers, attention, norms, embedding and
 * head count fully. Expert tensors of one layer sum to a multiple of E
 * (identical experts), so the division is exact.
 *
 * Conventions differ between publishers and this follows Qwen's (the
 * embedding table counts): Qwen3-30B-A3B gives 3,353,032,704 ("3.3B
 * activated"). OpenAI's 3.6B for gpt-oss-20b leaves out the input embedding
 * (a row lookup, no matmul) but keeps the unembedding: 4,187,440,704 here
 * minus the 579,133,440 of embed_tokens is exactly their 3,608,307,264. With
 * this convention a dense model's active count equals its total. */
int64_t sg_model_unit_active_params(const sg_model *model, int unit)
{
    count_ctx c;
    int rc = count_unit(model, unit, &c);
    if (rc < 0)
        return rc;
    if (model->num_experts > 0)
        c.expert = c.expert / model->num_experts * model->experts_per_token;
    return c.dense + c.expert;
}

int sg_model_num_units(const sg_model *model)
{
    return (int)model->num_layers + 2;
}

int64_t sg_model_total_params(const sg_model *model)
{
    int64_t s = 0;
    for (int u = 0; u < sg_model_num_units(model); u++)
        s += sg_model_unit_params(model, u);
    return s;
}

int64_t sg_model_active_params(const sg_model *model)
{
    int64_t s = 0;
    for (int u = 0; u < sg_model_num_units(model); u++)
        s += sg_model_unit_active_params(model, u);
    return s;
}

/* ------------------------------------------------------------------------ */
/* Finding model files                                                       */

static int is_dir(const char *p)
{
    struct stat st;
    return p && *p && stat(p, &st) == 0 && S_ISDIR(st.st_mode);
}

const char *sg_models_dir(void)
{
    const char *env = getenv("STEPGRAPH_MODELS_DIR");
    if (env && *env)
        return env;
    /* A binary run from the build tree uses the source files, so edits to
     * the JSON files in models/ show up without `make install`. */
    if (is_dir(SG_SRC_MODELS_DIR))
        return SG_SRC_MODELS_DIR;
    return SG_PKGDATADIR "/models";
}

static int ends_with(const char *s, const char *suffix)
{
    size_t ls = strlen(s), lx = strlen(suffix);
    return ls >= lx && strcmp(s + ls - lx, suffix) == 0;
}

/* Appends ", name" for each *.json in dir (for "not found" messages). */
int sg_model_resolve(const char *name_or_path, const char *models_dir, char *out_path,
                     size_t out_size, sg_error *err)
{
    if (!name_or_path || !*name_or_path)
        return sg_error_set(err, SG_EINVAL, "model: empty name");
    if (!out_path || out_size == 0)
        return sg_error_set(err, SG_EINVAL, "model %s: no output buffer", name_or_path);
    int is_path = strchr(name_or_path, '/') != NULL || ends_with(name_or_path, ".json");
    if (!models_dir)
        models_dir = sg_models_dir();
    struct stat dst;
    if (stat(name_or_path, &dst) == 0 && S_ISDIR(dst.st_mode)) {
        /* a Hugging Face model directory: its config.json */
        size_t len = strlen(name_or_path);
        int slash = len > 0 && name_or_path[len - 1] == '/';
        int n = snprintf(out_path, out_size, "%s%sconfig.json", name_or_path, slash ? "" : "/");
        if (n < 0 || (size_t)n >= out_size) {
            out_path[0] = '\0';
            return sg_error_set(err, SG_EINVAL, "model %s: path longer than %zu bytes",
                                name_or_path, out_size - 1);
        }
        if (stat(out_path, &dst) == 0 && S_ISREG(dst.st_mode))
            return 0;
        if (is_path)
            return sg_error_set(err, SG_ENOENT,
                                "model directory %s: no config.json (a "
                                "Hugging Face model directory holds one)",
                                name_or_path);
        /* a directory named like a shipped model: the name wins */
    }
    int n = is_path ? snprintf(out_path, out_size, "%s", name_or_path)
                    : snprintf(out_path, out_size, "%s/%s.json", models_dir, name_or_path);
    if (n < 0 || (size_t)n >= out_size) {
        out_path[0] = '\0';
        return sg_error_set(err, SG_EINVAL,
                            "model %s: path longer than %zu "
                            "bytes",
                            name_or_path, out_size - 1);
    }
    struct stat st;
    int found = stat(out_path, &st) == 0;
    if (found && S_ISREG(st.st_mode))
        return 0;
    if (is_path && found) /* /dev/null, a FIFO: there, but no model file */
        return sg_error_set(err, SG_EINVAL, "model file %s: not a regular file", out_path);
    if (is_path)
        return sg_error_set(err, SG_ENOENT, "model file %s: not found", out_path);
    char avail[512];
    sg_json_list_dir(models_dir, avail, sizeof avail);
    char hint[160];
    sg_suggest_in_list(name_or_path, avail, hint, sizeof hint);
    return sg_error_set(err, SG_ENOENT, "model \"%s\": no %s%s (models in %s: %s)", name_or_path,
                        out_path, hint, models_dir, avail[0] ? avail : "none");
}

/* ------------------------------------------------------------------------ */
/* Description                                                               */

typedef struct outbuf {
    char *p;
    size_t size, used;
    int truncated;
} outbuf;

static void out(outbuf *o, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void out(outbuf *o, const char *fmt, ...)
{
    if (o->truncated)
        return;
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(o->p + o->used, o->size - o->used, fmt, ap);
    va_end(ap);
    if (n < 0 || (size_t)n >= o->size - o->used) {
        o->truncated = 1;
        o->used = o->size - 1;
    } else {
        o->used += (size_t)n;
    }
}

/* 8030261248 -> "8,030,261,248" */
static const char *grouped(int64_t v, char *buf, size_t size)
{
    char digits[32];
    int neg = v < 0;
    snprintf(digits, sizeof digits, "%lld", (long long)(neg ? -v : v));
    size_t nd = strlen(digits), k = 0;
    if (neg && k + 1 < size)
        buf[k++] = '-';
    for (size_t i = 0; i < nd && k + 2 < size; i++) {
        if (i > 0 && (nd - i) % 3 == 0)
            buf[k++] = ',';
        buf[k++] = digits[i];
    }
    buf[k] = '\0';
    return buf;
}

/* Human-readable multi-line description for `stepgraph model info`.
 * Returns 0, or SG_ENOMEM when size is too small (buf then holds the
 * truncated, NUL-terminated text). */
int sg_model_format_info(const sg_model *m, char *buf, size_t size)
{
    if (!m || !buf || size == 0)
        return SG_EINVAL;
    outbuf o = {.p = buf, .size = size, .used = 0, .truncated = 0};
    buf[0] = '\0';
    char a[32], b[32], c[32];
    const int64_t L = m->num_layers;

    out(&o, "model       %s (architecture %s)\n", m->name, sg_arch_name(m->arch));
    out(&o, "hidden      %lld, %lld layers, vocab %lld, max positions %lld\n",
        (long long)m->hidden_size, (long long)L, (long long)m->vocab_size,
        (long long)m->max_position_embeddings);
    out(&o,
        "attention   %lld query / %lld kv heads, head_dim %lld (query width "
        "%lld)",
        (long long)m->num_heads, (long long)m->num_kv_heads, (long long)m->head_dim,
        (long long)(m->num_heads * m->head_dim));
    if (m->qkv_bias)
        out(&o, ", qkv bias");
    if (m->o_bias)
        out(&o, ", o_proj bias");
    if (m->qk_norm)
        out(&o, ", QK-norm");
    if (m->attention_sinks)
        out(&o, ", sinks");
    out(&o, "\n");
    int64_t n_sliding = 0;
    for (int64_t l = 0; l < L; l++)
        n_sliding += m->layer_attn[l] == SG_ATTN_SLIDING;
    if (n_sliding)
        out(&o,
            "pattern     %lld sliding (window %lld) + %lld full layers, "
            "layer 0 %s\n",
            (long long)n_sliding, (long long)m->sliding_window, (long long)(L - n_sliding),
            m->layer_attn[0] == SG_ATTN_SLIDING ? "sliding" : "full");
    if (m->num_experts)
        out(&o,
            "mlp         MoE: %lld experts, top %lld%s, expert width %lld%s; "
            "load-balancing loss x %g\n",
            (long long)m->num_experts, (long long)m->experts_per_token,
            m->arch == SG_ARCH_GPT_OSS ? " (softmax over the top-k logits)"
            : m->norm_topk_prob        ? " (weights renormalised)"
                                       : "",
            (long long)m->moe_intermediate_size,
            m->arch == SG_ARCH_GPT_OSS ? ", router and expert biases, clamped SwiGLU (limit 7)"
            : m->expert_bias           ? ", router and expert biases"
                                       : "",
            m->router_aux_loss_coef);
    else
        out(&o, "mlp         SwiGLU, intermediate %lld\n", (long long)m->intermediate_size);
    out(&o, "embeddings  %s, rms_norm_eps %g, rope_theta %g\n",
        m->tie_word_embeddings ? "tied (lm_head = embed_tokens)" : "untied lm_head",
        m->rms_norm_eps, m->rope_theta);

    int64_t total = sg_model_total_params(m);
    out(&o, "params      %s total (%.2f B)\n", grouped(total, a, sizeof a), (double)total / 1e9);
    if (m->num_experts) {
        int64_t act = sg_model_active_params(m);
        out(&o, "active      %s per token (%.2f B)", grouped(act, a, sizeof a), (double)act / 1e9);
        /* OpenAI's published active counts leave out the embedding table. */
        if (!m->tie_word_embeddings) {
            int64_t emb = sg_model_unit_params(m, 0);
            out(&o, "; %s without the input embedding", grouped(act - emb, b, sizeof b));
        }
        out(&o, "\n");
    }

    int64_t lmin = INT64_MAX, lmax = 0;
    for (int u = 1; u <= L; u++) {
        int64_t p = sg_model_unit_params(m, u);
        lmin = p < lmin ? p : lmin;
        lmax = p > lmax ? p : lmax;
    }
    out(&o, "units       %d: embedding %s | layers 1..%lld ", sg_model_num_units(m),
        grouped(sg_model_unit_params(m, 0), a, sizeof a), (long long)L);
    if (lmin == lmax)
        out(&o, "%s each", grouped(lmin, b, sizeof b));
    else
        out(&o, "%s to %s", grouped(lmin, b, sizeof b), grouped(lmax, c, sizeof c));
    out(&o, " | norm%s %s\n", m->tie_word_embeddings ? " (head tied)" : " + lm_head",
        grouped(sg_model_unit_params(m, (int)L + 1), a, sizeof a));
    return o.truncated ? SG_ENOMEM : 0;
}
