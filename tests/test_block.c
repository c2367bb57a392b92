/* test_block.c - the unit functions of codelets/cpu/block.h against PyTorch.
 *
 * Three small models run a whole training step, unit by unit (embedding,
 * decoder layers, head forward; then the backward in reverse), on random
 * weights and tokens with some ignored targets:
 *   tiny-llama        models/tiny-llama.json: Llama, GQA, tied embeddings
 *   tiny-qwen3        models/tiny-qwen3.json: Qwen3 QK-norm, untied, q width 2H
 *   tiny-bias-window  inline: Llama with q/k/v/o biases, 4 query heads on 1
 *                     kv head, a sliding window on layers 0 and 2, T = 70
 *                     (more than one attention tile)
 *   tiny-moe          models/tiny-moe.json: Qwen3-MoE, top 2 of 8 experts,
 *                     renormalised top-k weights, load-balancing loss (its
 *                     coefficient raised to 0.05 so that its gradient shows)
 *   tiny-moe-plain    inline: Qwen3-MoE, top 3 of 5, not renormalised, tied
 *   tiny-gpt-oss      models/tiny-gpt-oss.json: GPT-OSS, top 2 of 8 experts,
 *                     router and expert biases, attention sinks, sliding
 *                     (window 4) and full layers at T = 20, YaRN; its
 *                     gate_up biases drawn wide (std 4) so that both clamps
 *                     of its SwiGLU cut some values, sinks of std 1
 * (the MoE layers' router statistics pass from unit to unit as the graph
 * passes them, io->moe_stats).
 * tests/torch_model_ref.py computes the same step in plain torch ops (float64
 * autograd on the same fp32 weights, so the reference error is negligible)
 * and the test compares the loss, every unit's output, the gradient of every
 * unit's output and every parameter gradient. Error measure, per tensor:
 * max|got - want| / max|want| (the largest absolute error relative to the
 * largest reference value), tolerance 1e-5. Norm weights and biases are
 * randomised too (Hugging Face would start them at 1 and 0), so their use in
 * the forward is checked as well.
 *
 * Checked without the reference: activation checkpointing (forward with
 * saved == NULL, then the recompute with y == NULL, are bit-identical to the
 * normal forward and so is the backward after them), gradient accumulation,
 * dx written not accumulated, every float of `saved` written, error returns,
 * sg_unit_check_model and the sizes.
 *
 * The exchange with python goes through raw little-endian files in a
 * temporary directory (kept on failure or with SG_KEEP_TMP=1). Without
 * python3 + torch at $SYSTEM_PYTHON the program skips (TAP "1..0 # SKIP").
 * OpenBLAS is pinned to one thread, as ops.h asks.
 */
#define _XOPEN_SOURCE 700
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cblas.h>

#include "codelets/cpu/blas_core.h"
#include "codelets/cpu/block.h"
#include "common/error.h"
#include "models/model.h"
#include "runtime/io/weights.h"
#include "tests/tap.h"
#include "tests/test_util.h"

#define TOL 1e-5
#define NCASES 6
#define SEED 20240611u

static char g_root[4096]; /* the temporary directory */

/* Qwen3-MoE without renormalised top-k weights, top 3 of 5 experts, odd sizes. */
static const char *MOE_PLAIN_JSON =
    "{\"name\": \"tiny-moe-plain\", \"architecture\": \"qwen3_moe\",\n"
    " \"hidden_size\": 48, \"moe_intermediate_size\": 40, \"num_hidden_layers\": 2,\n"
    " \"num_attention_heads\": 2, \"num_key_value_heads\": 1, \"head_dim\": 24,\n"
    " \"vocab_size\": 61, \"max_position_embeddings\": 64, \"rms_norm_eps\": 1e-6,\n"
    " \"rope_theta\": 10000.0, \"tie_word_embeddings\": true, \"num_experts\": 5,\n"
    " \"num_experts_per_tok\": 3, \"norm_topk_prob\": false,\n"
    " \"router_aux_loss_coef\": 0.05}\n";

static const char *BIAS_WINDOW_JSON =
    "{\"name\": \"tiny-bias-window\", \"architecture\": \"llama\",\n"
    " \"hidden_size\": 64, \"intermediate_size\": 160, \"num_hidden_layers\": 3,\n"
    " \"num_attention_heads\": 4, \"num_key_value_heads\": 1, \"head_dim\": 16,\n"
    " \"vocab_size\": 96, \"max_position_embeddings\": 256,\n"
    " \"tie_word_embeddings\": false, \"rms_norm_eps\": 1e-5, \"rope_theta\": 500000.0,\n"
    " \"attention_bias\": true, \"sliding_window\": 5,\n"
    " \"layer_types\": [\"sliding_attention\", \"full_attention\", \"sliding_attention\"]}";

/* ---- random numbers (splitmix64) ------------------------------------------------- */

/* ---- memory ------------------------------------------------------------------------ */

static float *zeros(size_t n)
{
    float *p = alloc_f32(n);
    memset(p, 0, n * sizeof *p);
    return p;
}

static void fill_nan(float *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        p[i] = NAN;
}

/* ---- one model and its buffers ------------------------------------------------------- */

typedef struct net {
    const char *label;
    sg_model m;
    sg_weights w;
    size_t B, T, N, H;
    int U, L;        /* units = L + 2 */
    float **params;  /* (U) flat parameters of each unit */
    size_t *nparams; /* (U) */
    float **grads;   /* (U) same layout */
    float **saved;   /* (U) sg_unit_saved_floats (NULL for the embedding) */
    size_t *nsaved;
    float *scratch;
    size_t nscratch;
    float **hid, **dhid; /* (L+1) outputs of units 0..L and their gradients (N, H) */
    float loss;
    int32_t *tokens, *targets;
    float *moe_stats; /* MoE: the router statistics (sg_moe_stats_floats), else NULL */
    sg_rope_cache rope;
    char dir[4200];
    int ready; /* everything above is set up */
} net;

static net g_nets[NCASES];

/* Units' flat parameter vectors: the tensors of each unit, concatenated. */
static void pack_params(net *n)
{
    n->params = xmalloc(n->U * sizeof *n->params);
    n->nparams = xmalloc(n->U * sizeof *n->nparams);
    for (int u = 0; u < n->U; u++)
        n->nparams[u] = (size_t)sg_model_unit_params(&n->m, u);
    for (int u = 0; u < n->U; u++) {
        n->params[u] = alloc_f32(n->nparams[u]);
        size_t at = 0;
        for (int i = 0; i < n->w.ntensors; i++)
            if (n->w.unit[i] == u) {
                memcpy(n->params[u] + at, n->w.data[i], n->w.info[i].numel * sizeof(float));
                at += (size_t)n->w.info[i].numel;
            }
    }
}

/* Norm weights around 1 and biases around 0 instead of exactly 1 and 0. */
static void randomise_norms_and_biases(sg_weights *w)
{
    for (int i = 0; i < w->ntensors; i++) {
        const char *name = w->info[i].name;
        size_t len = strlen(name);
        int is_norm = strstr(name, "norm.weight") != NULL;
        int is_bias = len > 5 && (strcmp(name + len - 5, ".bias") == 0 ||
                                  strcmp(name + len - 5, "_bias") == 0);
        /* gpt_oss: gate_up biases wide enough that gate > 7 and |up| > 7
         * happen (the clamps); sinks of the order of the scores */
        float bias_std = strstr(name, "gate_up_proj_bias") ? 4.0f : 0.1f;
        int is_sink = len > 6 && strcmp(name + len - 6, ".sinks") == 0;
        for (int64_t k = 0; is_norm && k < w->info[i].numel; k++)
            w->data[i][k] = 1.0f + 0.2f * rng_normal();
        for (int64_t k = 0; is_bias && k < w->info[i].numel; k++)
            w->data[i][k] = bias_std * rng_normal();
        for (int64_t k = 0; is_sink && k < w->info[i].numel; k++)
            w->data[i][k] = rng_normal();
    }
}

static void alloc_buffers(net *n)
{
    n->grads = xmalloc(n->U * sizeof *n->grads);
    n->saved = xmalloc(n->U * sizeof *n->saved);
    n->nsaved = xmalloc(n->U * sizeof *n->nsaved);
    n->nscratch = 0;
    for (int u = 0; u < n->U; u++) {
        n->grads[u] = zeros(n->nparams[u]);
        n->nsaved[u] = sg_unit_saved_floats(&n->m, u, n->B, n->T);
        n->saved[u] = n->nsaved[u] ? alloc_f32(n->nsaved[u]) : NULL;
        size_t s = sg_unit_scratch_floats(&n->m, u, n->B, n->T);
        n->nscratch = s > n->nscratch ? s : n->nscratch;
    }
    n->scratch = alloc_f32(n->nscratch);
    size_t ns = sg_moe_stats_floats(&n->m);
    n->moe_stats = ns ? alloc_f32(ns) : NULL;
    if (ns)
        fill_nan(n->moe_stats, ns); /* layer 1 writes it fresh */
    n->hid = xmalloc((n->L + 1) * sizeof *n->hid);
    n->dhid = xmalloc((n->L + 1) * sizeof *n->dhid);
    for (int l = 0; l <= n->L; l++) {
        n->hid[l] = alloc_f32(n->N * n->H);
        n->dhid[l] = alloc_f32(n->N * n->H);
    }
}

static void random_batch(net *n)
{
    n->tokens = xmalloc(n->N * sizeof *n->tokens);
    n->targets = xmalloc(n->N * sizeof *n->targets);
    for (size_t i = 0; i < n->N; i++) {
        n->tokens[i] = (int32_t)(rng_u64() % (uint64_t)n->m.vocab_size);
        n->targets[i] = (int32_t)(rng_u64() % (uint64_t)n->m.vocab_size);
        if (rng_u64() % 6 == 0)
            n->targets[i] = -1; /* ignored */
    }
    n->targets[0] = -1;
}

/* Loads the model (from models/ or inline JSON), makes its weights and batch. */
static int net_init(net *n, const char *label, const char *json, size_t B, size_t T,
                    int64_t head_chunk)
{
    memset(n, 0, sizeof *n);
    n->label = label;
    sg_error err = {0};
    int rc = json ? sg_model_parse(json, label, &n->m, &err) : load_model(label, &n->m);
    if (rc) {
        tap_diag("%s: %s", label, err.msg);
        return rc;
    }
    if ((rc = sg_weights_alloc(&n->w, &n->m, &err))) {
        tap_diag("%s: %s", label, err.msg);
        return rc;
    }
    sg_weights_init(&n->w, SEED, 0.1);
    randomise_norms_and_biases(&n->w);
    n->m.head_chunk_tokens = head_chunk; /* 0: auto (the whole batch for these vocabularies) */
    n->B = B, n->T = T, n->N = B * T, n->H = (size_t)n->m.hidden_size;
    n->L = (int)n->m.num_layers;
    n->U = n->L + 2;
    if ((rc = sg_rope_cache_init(&n->rope, &n->m, T))) {
        tap_diag("%s: sg_rope_cache_init: %d", label, rc);
        return rc;
    }
    pack_params(n);
    alloc_buffers(n);
    random_batch(n);
    n->ready = 1;
    return 0;
}

/* ---- files for the reference ------------------------------------------------------------ */

static void put_raw(const net *n, const char *file, const void *p, size_t bytes)
{
    char path[4400];
    snprintf(path, sizeof path, "%s/%s", n->dir, file);
    FILE *f = fopen(path, "wb");
    size_t w = f && bytes ? fwrite(p, 1, bytes, f) : 0;
    if (!f || w != bytes || fclose(f)) {
        printf("Bail out! cannot write %s\n", path);
        exit(1);
    }
}

static void write_model_txt(const net *n)
{
    const sg_model *m = &n->m;
    char buf[2048];
    int len = snprintf(buf, sizeof buf,
                       "H %lld\nL %lld\nHq %lld\nHkv %lld\nD %lld\nF %lld\nV %lld\nB %zu\n"
                       "T %zu\ntie %d\nqk_norm %d\nwindow %lld\neps %.17g\ntheta %.17g\n"
                       "dtype float64\n",
                       (long long)m->hidden_size, (long long)m->num_layers, (long long)m->num_heads,
                       (long long)m->num_kv_heads, (long long)m->head_dim,
                       (long long)m->intermediate_size, (long long)m->vocab_size, n->B, n->T,
                       m->tie_word_embeddings, m->qk_norm, (long long)m->sliding_window,
                       m->rms_norm_eps, m->rope_theta);
    if (m->num_experts > 0)
        len += snprintf(buf + len, sizeof buf - (size_t)len,
                        "E %lld\nK %lld\nFm %lld\nnorm_topk %d\naux_coef %.17g\n",
                        (long long)m->num_experts, (long long)m->experts_per_token,
                        (long long)m->moe_intermediate_size, m->norm_topk_prob,
                        m->router_aux_loss_coef);
    if (m->arch == SG_ARCH_GPT_OSS)
        len += snprintf(buf + len, sizeof buf - (size_t)len, "arch gpt_oss\n");
    if (m->rope_scaling == 2)
        len += snprintf(buf + len, sizeof buf - (size_t)len,
                        "yarn_factor %.17g\nyarn_beta_fast %.17g\nyarn_beta_slow %.17g\n"
                        "yarn_orig_max %.17g\nyarn_truncate %d\nyarn_att_factor %.17g\n",
                        m->rope_factor, m->rope_beta_fast, m->rope_beta_slow,
                        m->rope_original_max_pos, m->rope_truncate, m->rope_attention_factor);
    for (int l = 0; l < n->L; l++)
        if (m->layer_attn[l] == SG_ATTN_SLIDING)
            len += snprintf(buf + len, sizeof buf - (size_t)len, "sliding %d\n", l);
    put_raw(n, "model.txt", buf, (size_t)len);
}

/* tensors.txt + params.f32: the units' flat vectors in unit order are the
 * tensors in weights order. */
static void write_inputs(net *n)
{
    snprintf(n->dir, sizeof n->dir, "%s/%s", g_root, n->label);
    if (mkdir(n->dir, 0700)) {
        printf("Bail out! mkdir %s: %s\n", n->dir, strerror(errno));
        exit(1);
    }
    write_model_txt(n);
    size_t cap = 128 * (size_t)n->w.ntensors, len = 0;
    char *list = xmalloc(cap);
    for (int i = 0; i < n->w.ntensors; i++)
        len += (size_t)snprintf(list + len, cap - len, "%s %lld\n", n->w.info[i].name,
                                (long long)n->w.info[i].numel);
    put_raw(n, "tensors.txt", list, len);
    free(list);
    char path[4400];
    snprintf(path, sizeof path, "%s/params.f32", n->dir);
    FILE *f = fopen(path, "wb");
    for (int u = 0; f && u < n->U; u++)
        fwrite(n->params[u], sizeof(float), n->nparams[u], f);
    if (!f || fclose(f)) {
        printf("Bail out! cannot write %s\n", path);
        exit(1);
    }
    put_raw(n, "tokens.i32", n->tokens, n->N * sizeof(int32_t));
    put_raw(n, "targets.i32", n->targets, n->N * sizeof(int32_t));
}

static double *get_f64(const net *n, const char *file, size_t count)
{
    char path[4400];
    snprintf(path, sizeof path, "%s/%s", n->dir, file);
    FILE *f = fopen(path, "rb");
    if (!f) {
        tap_diag("cannot open %s: %s", path, strerror(errno));
        return NULL;
    }
    double *p = xmalloc((count + 1) * sizeof *p);
    size_t r = fread(p, sizeof *p, count + 1, f);
    fclose(f);
    if (r != count) {
        tap_diag("%s: %zu values, expected %zu", path, r, count);
        free(p);
        return NULL;
    }
    return p;
}

/* ---- running the units ------------------------------------------------------------------ */

static sg_unit_io io_for(net *n, int u, float *y, float *saved)
{
    sg_unit_io io = {
        .params = n->params[u],
        .embed = n->m.tie_word_embeddings ? n->params[0] : NULL,
        .tokens = n->tokens,
        .targets = n->targets,
        .x = u >= 1 ? n->hid[u - 1] : NULL,
        .y = y,
        .loss = u == n->U - 1 ? &n->loss : NULL,
        .saved = saved,
        .scratch = n->scratch,
        .rope = &n->rope,
        .moe_stats = n->moe_stats,
    };
    return io;
}

/* Output buffer of unit u (the head has none). */
static float *out_of(net *n, int u)
{
    return u <= n->L ? n->hid[u] : NULL;
}

static int forward_unit(net *n, int u, float *y, float *saved)
{
    fill_nan(n->scratch, n->nscratch); /* nothing may depend on scratch contents */
    sg_unit_io io = io_for(n, u, y, saved);
    return sg_unit_forward(&n->m, u, n->B, n->T, &io);
}

/* dx of unit u goes to dhid[u-1]; grads and dembed (tied) accumulate. */
static int backward_unit(net *n, int u, float **grads, const float *saved)
{
    fill_nan(n->scratch, n->nscratch);
    sg_unit_io io = io_for(n, u, NULL, (float *)saved);
    float *dx = u >= 1 ? n->dhid[u - 1] : NULL;
    if (dx)
        fill_nan(dx, n->N * n->H); /* must be written, not accumulated */
    const float *dy = u <= n->L ? n->dhid[u] : NULL;
    float *dembed = n->m.tie_word_embeddings ? grads[0] : NULL;
    return sg_unit_backward(&n->m, u, n->B, n->T, &io, dy, 1.0f, dx, grads[u], dembed);
}

static int forward_all(net *n)
{
    for (int u = 0; u < n->U; u++) {
        fill_nan(n->saved[u], n->nsaved[u]);
        int rc = forward_unit(n, u, out_of(n, u), n->saved[u]);
        if (rc) {
            tap_diag("%s: forward of unit %d: %d", n->label, u, rc);
            return rc;
        }
    }
    return 0;
}

static int backward_all(net *n, float **grads)
{
    for (int u = n->U - 1; u >= 0; u--) {
        int rc = backward_unit(n, u, grads, n->saved[u]);
        if (rc) {
            tap_diag("%s: backward of unit %d: %d", n->label, u, rc);
            return rc;
        }
    }
    return 0;
}

static float **copy_grads(const net *n, float *const *src)
{
    float **g = xmalloc(n->U * sizeof *g);
    for (int u = 0; u < n->U; u++)
        g[u] = dup_f32(src[u], n->nparams[u]);
    return g;
}

static float **zero_grads(const net *n)
{
    float **g = xmalloc(n->U * sizeof *g);
    for (int u = 0; u < n->U; u++)
        g[u] = zeros(n->nparams[u]);
    return g;
}

static void free_grads(const net *n, float **g)
{
    for (int u = 0; u < n->U; u++)
        free(g[u]);
    free(g);
}

/* ---- comparison with the reference ------------------------------------------------------ */

/* max|got - want| / max|want|; NaN in got gives +inf. */
static double rel_err(const float *got, const double *want, size_t n)
{
    double maxdiff = 0.0, maxref = 0.0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)got[i] - want[i]);
        if (!(d <= maxdiff))
            maxdiff = isnan(d) ? INFINITY : d;
        if (fabs(want[i]) > maxref)
            maxref = fabs(want[i]);
    }
    return maxdiff / (maxref > 1e-30 ? maxref : 1e-30);
}

static double g_worst[NCASES];

static void check_close(int c, double err, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void check_close(int c, double err, const char *fmt, ...)
{
    char what[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    if (!ok(err <= TOL, "%s (rel err %.2e)", what, err))
        tap_diag("  max|got - torch| / max|torch| = %.3e > %.0e", err, TOL);
    if (err > g_worst[c])
        g_worst[c] = err;
}

static void check_against_torch(int c)
{
    net *n = &g_nets[c];
    const size_t NH = n->N * n->H, L1 = (size_t)n->L + 1;
    double *loss = get_f64(n, "loss.f64", 1);
    double *grads = get_f64(n, "grads.f64", (size_t)n->w.numel);
    double *hid = get_f64(n, "hidden.f64", L1 * NH);
    double *dhid = get_f64(n, "dhidden.f64", L1 * NH);
    if (!ok(loss && grads && hid && dhid, "%s: reference results read", n->label))
        goto out;
    double le = fabs((double)n->loss - loss[0]) / fabs(loss[0]);
    check_close(c, le, "%s: loss %.7f = torch %.7f", n->label, n->loss, loss[0]);
    for (size_t l = 0; l < L1; l++)
        check_close(c, rel_err(n->hid[l], hid + l * NH, NH), "%s: output of unit %zu", n->label, l);
    for (size_t l = 0; l < L1; l++)
        check_close(c, rel_err(n->dhid[l], dhid + l * NH, NH),
                    "%s: gradient of unit %zu's output (dx of unit %zu)", n->label, l, l + 1);
    size_t at = 0, in_unit = 0;
    for (int i = 0; i < n->w.ntensors; i++) {
        int u = n->w.unit[i];
        if (i > 0 && n->w.unit[i - 1] != u)
            in_unit = 0;
        size_t numel = (size_t)n->w.info[i].numel;
        check_close(c, rel_err(n->grads[u] + in_unit, grads + at, numel), "%s: grad %s", n->label,
                    n->w.info[i].name);
        at += numel;
        in_unit += numel;
    }
out:
    free(loss), free(grads), free(hid), free(dhid);
}

/* ---- properties without the reference ------------------------------------------------ */

static int all_finite(const float *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (!isfinite(p[i]))
            return 0;
    return 1;
}

static void check_saved_written(net *n)
{
    int good = 1;
    for (int u = 1; u < n->U; u++)
        good &= all_finite(n->saved[u], n->nsaved[u]);
    ok(good, "%s: the forward writes every float of saved (NaN-filled before)", n->label);
}

static int same_bits(const float *a, const float *b, size_t n)
{
    return memcmp(a, b, n * sizeof *a) == 0;
}

/* Checkpointing: forward without saved, recompute into a fresh saved,
 * backward from it; all bit-identical to the normal run (n->saved,
 * n->grads, n->hid, n->dhid, n->loss). */
static void check_checkpointing(net *n)
{
    const size_t NH = n->N * n->H;
    float *y = alloc_f32(NH);
    int fwd_same = 1, rec_same = 1, rc_all = 0;
    float **saved2 = xmalloc(n->U * sizeof *saved2);
    const float loss0 = n->loss;
    for (int u = 0; u < n->U; u++) {
        n->loss = -1.0f;
        int rc = forward_unit(n, u, u <= n->L ? y : NULL, NULL);
        int same = u <= n->L ? same_bits(y, n->hid[u], NH) : n->loss == loss0;
        if (!same)
            tap_diag("  unit %d differs", u);
        fwd_same &= same;
        saved2[u] = n->nsaved[u] ? alloc_f32(n->nsaved[u]) : NULL;
        if (saved2[u]) /* another fill than the normal run's NaN */
            memset(saved2[u], 0xA5, n->nsaved[u] * sizeof(float));
        int rc2 = forward_unit(n, u, NULL, saved2[u]);
        rec_same &= n->nsaved[u] == 0 || same_bits(saved2[u], n->saved[u], n->nsaved[u]);
        rc_all |= rc | rc2;
    }
    n->loss = loss0;
    ok(rc_all == 0 && fwd_same, "%s: forward with saved = NULL gives the same outputs and loss",
       n->label);
    ok(rc_all == 0 && rec_same, "%s: recompute (y = NULL) fills saved bit-identically", n->label);

    float **g = zero_grads(n);
    float **dh_ref = xmalloc((n->L + 1) * sizeof *dh_ref);
    for (int l = 0; l <= n->L; l++)
        dh_ref[l] = dup_f32(n->dhid[l], NH);
    int rc = 0;
    for (int u = n->U - 1; u >= 0; u--)
        rc |= backward_unit(n, u, g, saved2[u]);
    int same = rc == 0;
    for (int u = 0; u < n->U; u++)
        same &= same_bits(g[u], n->grads[u], n->nparams[u]);
    for (int l = 0; l <= n->L; l++)
        same &= same_bits(dh_ref[l], n->dhid[l], NH);
    ok(same, "%s: backward after recompute gives bit-identical gradients and dx", n->label);
    for (int l = 0; l <= n->L; l++)
        free(dh_ref[l]);
    free(dh_ref);
    free_grads(n, g);
    for (int u = 0; u < n->U; u++)
        free(saved2[u]);
    free(saved2);
    free(y);
}

/* A second backward adds the same gradients again; dx is written (the
 * backward NaN-fills it first) and comes out the same. */
static void check_accumulation(net *n)
{
    const size_t NH = n->N * n->H;
    float **g = copy_grads(n, n->grads);
    float *dh0 = dup_f32(n->dhid[0], NH);
    int rc = backward_all(n, g);
    double worst = 0.0; /* per unit: max|g - 2 G| / max|2 G| */
    for (int u = 0; u < n->U; u++) {
        double maxdiff = 0.0, maxref = 0.0;
        for (size_t i = 0; i < n->nparams[u]; i++) {
            double want = 2.0 * n->grads[u][i], d = fabs(g[u][i] - want);
            if (!(d <= maxdiff))
                maxdiff = isnan(d) ? INFINITY : d;
            maxref = fabs(want) > maxref ? fabs(want) : maxref;
        }
        double e = maxdiff / (maxref > 1e-30 ? maxref : 1e-30);
        worst = e > worst ? e : worst;
    }
    ok(rc == 0 && worst <= 1e-6,
       "%s: two backward calls accumulate twice the gradients "
       "(rel err %.1e)",
       n->label, worst);
    ok(rc == 0 && same_bits(dh0, n->dhid[0], NH), "%s: dx is written, not accumulated", n->label);
    free(dh0);
    free_grads(n, g);
}

static void check_errors(net *n)
{
    const size_t NH = n->N * n->H;
    float *y = alloc_f32(NH);
    memset(y, 0, NH * sizeof *y);
    int32_t keep = n->tokens[3];
    n->tokens[3] = (int32_t)n->m.vocab_size;
    int rc = forward_unit(n, 0, y, NULL);
    float *z = zeros(NH);
    ok(rc == SG_EINVAL && same_bits(y, z, NH),
       "%s: token id = vocab_size: SG_EINVAL, "
       "nothing written (rc %d)",
       n->label, rc);
    n->tokens[3] = -2;
    rc = forward_unit(n, 0, y, NULL);
    ok(rc == SG_EINVAL, "%s: negative token id: SG_EINVAL", n->label);
    n->tokens[3] = keep;

    keep = n->targets[5];
    n->targets[5] = (int32_t)n->m.vocab_size;
    float loss0 = n->loss;
    n->loss = 123.0f;
    fill_nan(n->saved[n->U - 1], 4);
    rc = forward_unit(n, n->U - 1, NULL, n->saved[n->U - 1]);
    ok(rc == SG_EINVAL && n->loss == 123.0f && isnan(n->saved[n->U - 1][0]),
       "%s: target = vocab_size: SG_EINVAL, loss and saved untouched (rc %d)", n->label, rc);
    float **g = zero_grads(n);
    rc = backward_unit(n, n->U - 1, g, n->saved[n->U - 1]);
    ok(rc == SG_EINVAL && g[n->U - 1][0] == 0.0f,
       "%s: head backward with that target: "
       "SG_EINVAL, no gradient (rc %d)",
       n->label, rc);
    n->targets[5] = keep;
    n->loss = loss0;

    sg_unit_io io = io_for(n, 1, NULL, NULL);
    rc = sg_unit_forward(&n->m, 1, n->B, n->T, &io);
    ok(rc == SG_EINVAL, "%s: layer forward with neither y nor saved: SG_EINVAL", n->label);
    sg_rope_cache shortrope;
    sg_rope_cache_init(&shortrope, &n->m, n->T - 1);
    io = io_for(n, 1, y, n->saved[1]);
    io.rope = &shortrope;
    rc = sg_unit_forward(&n->m, 1, n->B, n->T, &io);
    ok(rc == SG_EINVAL, "%s: rope tables shorter than T: SG_EINVAL", n->label);
    sg_rope_cache_free(&shortrope);
    rc = sg_unit_forward(&n->m, n->U, n->B, n->T, &io);
    ok(rc == SG_EINVAL, "%s: unit L+2 does not exist: SG_EINVAL", n->label);
    free_grads(n, g);
    free(y);
    free(z);
}

/* The head over chunks of C tokens against one chunk of all N (the
 * unchunked math): loss, dx, the norm and lm_head gradients, the tied
 * embedding's, within 1e-6 (max|diff| / max|ref|) for chunk sizes that do
 * and do not divide N; and the head's memory shrinks with the chunk. */
typedef struct head_run {
    float loss;
    float *dx, *dhead, *dembed;
    int rc;
} head_run;

static head_run run_head(const net *n, int64_t chunk)
{
    const int u = n->U - 1;
    const size_t NH = n->N * n->H, V = (size_t)n->m.vocab_size;
    sg_model m = n->m;
    m.head_chunk_tokens = chunk;
    float *saved = alloc_f32(sg_unit_saved_floats(&m, u, n->B, n->T));
    size_t ns = sg_unit_scratch_floats(&m, u, n->B, n->T);
    float *scratch = alloc_f32(ns);
    fill_nan(scratch, ns);
    head_run r = {.dx = alloc_f32(NH),
                  .dhead = zeros(n->nparams[u]),
                  .dembed = n->m.tie_word_embeddings ? zeros(V * n->H) : NULL};
    fill_nan(r.dx, NH);
    sg_unit_io io = {
        .params = n->params[u],
        .embed = n->m.tie_word_embeddings ? n->params[0] : NULL,
        .targets = n->targets,
        .x = n->hid[n->L],
        .loss = &r.loss,
        .saved = saved,
        .scratch = scratch,
    };
    r.rc = sg_unit_forward(&m, u, n->B, n->T, &io);
    fill_nan(scratch, ns);
    if (!r.rc)
        r.rc = sg_unit_backward(&m, u, n->B, n->T, &io, NULL, 0.75f, r.dx, r.dhead, r.dembed);
    free(saved);
    free(scratch);
    return r;
}

static double rel_err_f(const float *got, const float *want, size_t len)
{
    double maxdiff = 0.0, maxref = 0.0;
    for (size_t i = 0; i < len; i++) {
        double d = fabs((double)got[i] - (double)want[i]);
        if (!(d <= maxdiff))
            maxdiff = isnan(d) ? INFINITY : d;
        maxref = fabs((double)want[i]) > maxref ? fabs((double)want[i]) : maxref;
    }
    return maxdiff / (maxref > 1e-30 ? maxref : 1e-30);
}

static void check_head_chunks(net *n)
{
    const int u = n->U - 1;
    const size_t NH = n->N * n->H, V = (size_t)n->m.vocab_size;
    head_run ref = run_head(n, (int64_t)n->N);
    const int64_t chunks[] = {1, 3, 7, (int64_t)n->N - 1, (int64_t)n->N + 5};
    for (size_t k = 0; k < sizeof chunks / sizeof chunks[0]; k++) {
        head_run r = run_head(n, chunks[k]);
        double el = fabs((double)r.loss - (double)ref.loss) / fabs((double)ref.loss);
        double ex = rel_err_f(r.dx, ref.dx, NH);
        double eh = rel_err_f(r.dhead, ref.dhead, n->nparams[u]);
        double ee = r.dembed ? rel_err_f(r.dembed, ref.dembed, V * n->H) : 0.0;
        double worst = fmax(fmax(el, ex), fmax(eh, ee));
        ok(r.rc == 0 && ref.rc == 0 && worst <= 1e-6,
           "%s: head in chunks of %lld of %zu tokens = unchunked (loss %.7f vs %.7f; rel err "
           "loss %.1e dx %.1e dW %.1e dembed %.1e)",
           n->label, (long long)chunks[k], n->N, r.loss, ref.loss, el, ex, eh, ee);
        free(r.dx), free(r.dhead), free(r.dembed);
    }
    free(ref.dx), free(ref.dhead), free(ref.dembed);

    sg_model whole = n->m, three = n->m;
    whole.head_chunk_tokens = (int64_t)n->N;
    three.head_chunk_tokens = 3;
    size_t sw = sg_unit_scratch_floats(&whole, u, n->B, n->T);
    size_t s3 = sg_unit_scratch_floats(&three, u, n->B, n->T);
    /* backward: C V + N H; forward (checkpointing): N H + 2 N + C V */
    size_t want3 = n->N * n->H + 2 * n->N + 3 * V;
    is_int((long long)s3, (long long)want3,
           "%s: head scratch with chunks of 3 = N H + 2 N + "
           "3 V = %zu (whole batch: %zu)",
           n->label, want3, sw);
    is_int((long long)sg_unit_saved_floats(&three, u, n->B, n->T),
           (long long)sg_unit_saved_floats(&whole, u, n->B, n->T),
           "%s: saved does not depend on the chunk", n->label);
}

/* sg_unit_check_model and the sizes, for models the kernels refuse too. */
static void check_sizes(void)
{
    sg_model moe, llama, oss;
    if (load_model("tiny-moe", &moe) || load_model("tiny-llama", &llama) ||
        load_model("gpt-oss-20b", &oss)) {
        ok(0, "tiny-moe, tiny-llama and gpt-oss-20b load");
        return;
    }
    sg_error err = {0};
    is_int(sg_unit_check_model(&moe, &err), 0, "sg_unit_check_model accepts tiny-moe");
    is_int(sg_unit_check_model(&oss, &err), 0, "sg_unit_check_model accepts gpt-oss-20b");
    sg_model dense_sinks = llama;
    dense_sinks.attention_sinks = 1;
    int rc = sg_unit_check_model(&dense_sinks, &err);
    ok(rc == SG_ENOTSUP, "attention sinks outside gpt_oss refused (rc %d)", rc);
    like(err.msg, "sinks", "the message names what is refused");
    sg_error_clear(&err);
    sg_model oss_bad = oss;
    oss_bad.experts_per_token = 33;
    rc = sg_unit_check_model(&oss_bad, &err);
    ok(rc == SG_EINVAL, "gpt-oss-20b with top 33 of 32 experts refused (rc %d)", rc);
    like(err.msg, "num_experts_per_tok 33", "the message names the key and the value");
    sg_error_clear(&err);
    sg_model bad = moe;
    bad.experts_per_token = 9;
    rc = sg_unit_check_model(&bad, &err);
    ok(rc == SG_EINVAL, "top 9 of 8 experts refused (rc %d)", rc);
    like(err.msg, "num_experts_per_tok 9", "the message names the key and the value");
    sg_error_clear(&err);
    bad = moe;
    bad.moe_intermediate_size = 0;
    rc = sg_unit_check_model(&bad, &err);
    ok(rc == SG_EINVAL, "an expert width of 0 refused (rc %d)", rc);
    like(err.msg, "moe_intermediate_size", "the message names the key");
    sg_error_clear(&err);
    is_int(sg_unit_check_model(&llama, &err), 0, "sg_unit_check_model accepts tiny-llama");

    const size_t B = 2, T = 16, N = B * T;
    const size_t H = 128, q = 4 * 32, kv = 2 * 32, E = 8, K = 2, FM = 128;
    /* n1 h n2 q k v att, qpre kpre, probs; rstd1 rstd2 lse (4 heads) rstdq (4)
     * rstdk (2), sel topw; no expert activations (the expert tasks keep them) */
    is_int(sg_unit_saved_floats(&moe, 1, B, T),
           N * (3 * H + 2 * q + 2 * kv + q + kv + E + 2 + 4 + 4 + 2 + 2 * K),
           "tiny-moe layer: saved N (3H + 2q + 2kv + qpre + kpre + E + stats + 2k)");
    ok(sg_unit_scratch_floats(&moe, 1, B, T) >= N * K * (H + 2 * FM),
       "tiny-moe layer: scratch holds every slot's expert output, gate and up");
    is_int(sg_moe_stats_floats(&moe), 2 * E, "tiny-moe: 2 E floats of router statistics");
    is_int(sg_moe_stats_floats(&llama), 0, "tiny-llama: no router statistics");
    is_int(sg_unit_saved_floats(&moe, 0, B, T), 0, "tiny-moe embedding: nothing saved");
    is_int(sg_unit_saved_floats(&moe, 5, B, T), N * (H + 2),
           "tiny-moe head: n, rstd, lse (no logits)");

    const size_t F = 384;
    is_int(sg_unit_saved_floats(&llama, 0, B, T), 0, "tiny-llama embedding: nothing saved");
    is_int(sg_unit_scratch_floats(&llama, 0, B, T), 0, "tiny-llama embedding: no scratch");
    is_int(sg_unit_saved_floats(&llama, 2, B, T), N * (3 * H + 2 * q + 2 * kv + 2 * F + 2 + 4),
           "tiny-llama layer: n1 h n2 q k v att gate up rstd1 rstd2 lse");
    is_int(sg_unit_saved_floats(&llama, 5, B, T), N * (H + 2), "tiny-llama head: n, rstd, lse");
    is_int(sg_unit_saved_floats(&llama, 6, B, T), 0, "unit out of range: 0");
    ok(sg_unit_scratch_floats(&llama, 1, B, T) >= sg_unit_saved_floats(&llama, 1, B, T) + N * F,
       "tiny-llama layer scratch holds saved + silu(gate) * up");

    sg_unit_io io = {0};
    rc = sg_unit_forward(&dense_sinks, 1, B, T, &io);
    ok(rc == SG_ENOTSUP,
       "sg_unit_forward on a layer with sinks outside gpt_oss: SG_ENOTSUP "
       "(rc %d)",
       rc);
}

/* ---- running the reference ---------------------------------------------------------- */

static int run_reference(void)
{
    const char *py = system_python();
    char script[4200];
    snprintf(script, sizeof script, "%s/tests/torch_model_ref.py", srcdir());
    char *argv[3 + NCASES];
    int a = 0;
    argv[a++] = (char *)py;
    argv[a++] = script;
    for (int c = 0; c < NCASES; c++)
        if (g_nets[c].ready)
            argv[a++] = g_nets[c].dir;
    argv[a] = NULL;
    int rc = run_program(argv, 0);
    if (!ok(rc == 0, "torch reference ran (%d models)", a - 2))
        tap_diag("%s %s ... exited with %d", py, script, rc);
    return rc;
}

static void net_free(net *n)
{
    if (!n->ready)
        return;
    for (int u = 0; u < n->U; u++)
        free(n->params[u]), free(n->grads[u]), free(n->saved[u]);
    for (int l = 0; l <= n->L; l++)
        free(n->hid[l]), free(n->dhid[l]);
    free(n->params), free(n->nparams), free(n->grads), free(n->saved), free(n->nsaved);
    free(n->hid), free(n->dhid), free(n->scratch), free(n->tokens), free(n->targets);
    free(n->moe_stats);
    sg_rope_cache_free(&n->rope);
    sg_weights_free(&n->w);
}

int main(int argc, char **argv)
{
    (void)argc;
    /* the OpenBLAS kernels `stepgraph` itself runs (codelets/cpu/blas_core.h) */
    sg_blas_core_select(argv);
    g_rng = 0x5eedb10c4a11ull;
#ifdef OPENBLAS_VERSION
    /* The environment variable is read when the library loads, before main:
     * the call is what pins it here. */
    openblas_set_num_threads(1);
#endif
    int begin = torch_test_begin(g_root, sizeof g_root, "sg_block");
    if (begin > 0)
        return tap_plan_skip_all("torch not available");
    if (begin < 0)
        return 1;

    static const struct {
        const char *label, *json;
        size_t B, T;
        int64_t head_chunk; /* tokens per chunk of the head's logits; 0 auto */
    } cases[NCASES] = {
        {"tiny-llama", NULL, 2, 24, 5},       /* 48 tokens: 9 chunks of 5 and one of 3 */
        {"tiny-qwen3", NULL, 2, 24, 0},       /* auto: one chunk of 48 */
        {"tiny-bias-window", NULL, 2, 70, 3}, /* 140 tokens: 46 chunks of 3 and one of 2 */
        {"tiny-moe", NULL, 2, 24, 0},         /* Qwen3-MoE: 8 experts, top 2, renormalised */
        {"tiny-moe-plain", NULL, 2, 20, 7},   /* top 3 of 5, not renormalised, tied */
        {"tiny-gpt-oss", NULL, 2, 20, 0},     /* GPT-OSS: sinks, window 4, clamps, YaRN */
    };
    for (int c = 0; c < NCASES; c++) {
        const char *json = c == 2 ? BIAS_WINDOW_JSON : c == 4 ? MOE_PLAIN_JSON : cases[c].json;
        int rc =
            net_init(&g_nets[c], cases[c].label, json, cases[c].B, cases[c].T, cases[c].head_chunk);
        /* a load-balancing loss large enough for its gradient to show (the
         * shipped 0.001 would hide an error in it below the tolerance) */
        if (rc == 0 && (c == 3 || c == 5))
            g_nets[c].m.router_aux_loss_coef = 0.05;
        ok(rc == 0, "%s: model, weights and batch ready", cases[c].label);
        if (rc == 0)
            write_inputs(&g_nets[c]);
    }
    run_reference();

    for (int c = 0; c < NCASES; c++) {
        net *n = &g_nets[c];
        if (!n->ready)
            continue;
        int rc = forward_all(n);
        if (rc == 0)
            rc = backward_all(n, n->grads);
        if (!ok(rc == 0, "%s: forward and backward of every unit ran", n->label))
            continue;
        check_against_torch(c);
        check_saved_written(n);
        check_checkpointing(n);
        check_accumulation(n);
        check_errors(n);
        check_head_chunks(n);
        tap_diag("%s: worst relative error against torch %.2e", n->label, g_worst[c]);
    }
    check_sizes();

    for (int c = 0; c < NCASES; c++)
        net_free(&g_nets[c]);
    int failed = tap_count_failed != 0;
    const char *keep = getenv("SG_KEEP_TMP");
    if (failed || (keep && *keep && strcmp(keep, "0")))
        tap_diag("inputs and reference outputs kept in %s", g_root);
    else
        rm_tree(g_root);
    return tap_done();
}
