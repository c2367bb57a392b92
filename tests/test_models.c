/* test_models.c - model descriptions: shipped files load, parameter totals
 * match the published figures (shared/reference/models.md), unit tensors add
 * up, Hugging Face names, bad files give errors naming file, key and value.
 *
 * SG_SRCDIR names the source tree (automake sets it to $(srcdir)).
 */
#define _POSIX_C_SOURCE 200809L /* setenv() with -std=c11 */

#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "models/hf_config.h"
#include "models/model.h"
#include "tests/tap.h"

static char srcdir[512];
static char models_dir[600];

/* Published totals; active is given for MoE models only (0: same as total).
 * gpt-oss's 3,608,307,264 leaves out the input embedding (OpenAI's
 * convention) and is checked separately below. */
static const struct {
    const char *name;
    int64_t total, active;
} published[] = {
    {"llama-3.2-1b", 1235814400LL, 0}, /* computed from the HF config (tied) */
    {"llama-3.2-3b", 3212749824LL, 0},
    {"llama-3.1-8b", 8030261248LL, 0},
    {"qwen3-14b", 14768307200LL, 0},
    {"phi-4", 14659507200LL, 0},
    {"gpt-oss-20b", 20914757184LL, 0},
    {"qwen3-30b-a3b", 30532122624LL, 3350000000LL}, /* "~3.35e9" */
    {"seed-oss-36b", 36151104512LL, 0},
    {"llama-3.3-70b", 70553706496LL, 0},
    /* Hugging Face's safetensors counts; Mixtral's "12.9B active" */
    {"qwen2.5-7b", 7615616512LL, 0},
    {"mistral-7b-v0.3", 7248023552LL, 0},
    {"mixtral-8x7b", 46702792704LL, 12900000000LL},
};
#define N_PUBLISHED (int)(sizeof published / sizeof published[0])

static const char *tiny[] = {"tiny-llama", "tiny-qwen3", "tiny-moe"};

static int load_named(const char *name, sg_model *m, sg_error *err)
{
    char path[1024];
    int rc = sg_model_resolve(name, models_dir, path, sizeof path, err);
    return rc < 0 ? rc : sg_model_load(path, m, err);
}

/* Unit tensors sum to unit params, units sum to the total, active too. */
static void check_units(const sg_model *m)
{
    int nu = sg_model_num_units(m);
    int64_t sum = 0, sum_active = 0;
    int all_units_ok = 1, first_bad = -1;
    for (int u = 0; u < nu; u++) {
        int n = sg_model_unit_tensors(m, u, NULL, 0);
        sg_tensor_info *t = calloc((size_t)(n > 0 ? n : 1), sizeof *t);
        int got = t ? sg_model_unit_tensors(m, u, t, n) : -1;
        int64_t s = 0, s_dense = 0, s_expert = 0;
        for (int i = 0; i < got; i++) {
            int64_t prod = 1;
            for (int d = 0; d < t[i].ndim; d++)
                prod *= t[i].shape[d];
            if (prod != t[i].numel || t[i].ndim < 1 || t[i].ndim > 3)
                got = -1;
            else if (t[i].is_expert)
                s_expert += t[i].numel;
            else
                s_dense += t[i].numel;
            s += t[i].numel;
        }
        int64_t act = s_dense + (m->num_experts ? s_expert / m->num_experts * m->experts_per_token
                                                : s_expert);
        if (got != n || n <= 0 || s != sg_model_unit_params(m, u) ||
            act != sg_model_unit_active_params(m, u)) {
            if (all_units_ok)
                first_bad = u;
            all_units_ok = 0;
        }
        sum += sg_model_unit_params(m, u);
        sum_active += sg_model_unit_active_params(m, u);
        free(t);
    }
    ok(all_units_ok,
       "%s: tensors of each of %d units add up to the unit's "
       "params and active params",
       m->name, nu);
    if (!all_units_ok)
        tap_diag("  first bad unit %d", first_bad);
    is_int(sum, sg_model_total_params(m), "%s: units sum to the total", m->name);
    is_int(sum_active, sg_model_active_params(m),
           "%s: units' active params sum "
           "to the active total",
           m->name);
}

static void test_shipped(void)
{
    for (int i = 0; i < N_PUBLISHED; i++) {
        sg_model m;
        sg_error err = {0};
        int rc = load_named(published[i].name, &m, &err);
        if (!ok(rc == 0, "%s loads", published[i].name)) {
            tap_diag("  %s", err.msg);
            tap_skip(5, "model did not load");
            continue;
        }
        ok(strcmp(m.name, published[i].name) == 0, "%s: name field matches the file name", m.name);
        int64_t total = sg_model_total_params(&m), act = sg_model_active_params(&m);
        tap_diag("%s: total %lld, active %lld", m.name, (long long)total, (long long)act);
        is_close((double)total, (double)published[i].total, 0.01,
                 "%s: total within 1%% of models.md", m.name);
        is_int(total, published[i].total, "%s: total exactly models.md's", m.name);
        if (published[i].active)
            is_close((double)act, (double)published[i].active, 0.01,
                     "%s: active within 1%% of models.md", m.name);
        else if (m.num_experts)
            ok(act < total, "%s: MoE active below total", m.name);
        else
            is_int(act, total, "%s: dense: active == total", m.name);
        check_units(&m);
    }
}

static void test_moe_details(void)
{
    sg_model m;
    sg_error err = {0};
    int rc = load_named("gpt-oss-20b", &m, &err);
    if (!ok(rc == 0, "gpt-oss-20b loads for details")) {
        tap_diag("  %s", err.msg);
        return;
    }
    /* OpenAI's active count: everything but the input embedding table. */
    int64_t act_no_emb = sg_model_active_params(&m) - sg_model_unit_params(&m, 0);
    is_int(act_no_emb, 3608307264LL,
           "gpt-oss-20b: active without the input "
           "embedding is models.md's 3,608,307,264");
    is_int(sg_model_active_params(&m), 4187440704LL, "gpt-oss-20b: active with the embedding");
    ok(m.qkv_bias && m.o_bias && m.attention_sinks && m.router_bias && m.expert_bias && !m.qk_norm,
       "gpt-oss-20b: biases and sinks set, no QK-norm");
    ok(m.layer_attn[0] == SG_ATTN_SLIDING && m.layer_attn[1] == SG_ATTN_FULL &&
           m.layer_attn[22] == SG_ATTN_SLIDING && m.layer_attn[23] == SG_ATTN_FULL,
       "gpt-oss-20b: derived alternation, sliding first");
    is_int(m.sliding_window, 128, "gpt-oss-20b: window 128");
    is_int(m.moe_intermediate_size, 2880, "gpt-oss-20b: expert width");
    is_int(m.intermediate_size, 0, "gpt-oss-20b: no dense MLP");

    /* Layer tensors: fused 3-d experts with HF names and shapes. */
    sg_tensor_info t[32];
    int n = sg_model_unit_tensors(&m, 1, t, 32);
    is_int(n, 17, "gpt-oss-20b: 17 tensors in a layer");
    int found = 0;
    for (int i = 0; i < n; i++) {
        if (strcmp(t[i].name, "model.layers.0.mlp.experts.gate_up_proj") == 0 && t[i].ndim == 3 &&
            t[i].shape[0] == 32 && t[i].shape[1] == 2880 && t[i].shape[2] == 5760 && t[i].is_expert)
            found |= 1;
        if (strcmp(t[i].name, "model.layers.0.mlp.experts.down_proj_bias") == 0 && t[i].ndim == 2 &&
            t[i].shape[0] == 32 && t[i].shape[1] == 2880 && t[i].is_expert)
            found |= 2;
        if (strcmp(t[i].name, "model.layers.0.self_attn.sinks") == 0 && t[i].ndim == 1 &&
            t[i].shape[0] == 64 && !t[i].is_expert)
            found |= 4;
        if (strcmp(t[i].name, "model.layers.0.mlp.router.bias") == 0 && t[i].shape[0] == 32 &&
            !t[i].is_expert)
            found |= 8;
        if (strcmp(t[i].name, "model.layers.0.self_attn.o_proj.bias") == 0 && t[i].shape[0] == 2880)
            found |= 16;
    }
    is_int(found, 31,
           "gpt-oss-20b: gate_up_proj (32,2880,5760), down_proj_bias, "
           "sinks (64), router.bias, o_proj.bias present");
    ok(sg_model_unit_tensors(&m, 1, t, 5) == SG_ENOMEM, "unit_tensors: cap too small is SG_ENOMEM");
    ok(sg_model_unit_tensors(&m, 26, t, 32) == SG_EINVAL &&
           sg_model_unit_tensors(&m, -1, t, 32) == SG_EINVAL,
       "unit_tensors: unit out of range is SG_EINVAL");
    ok(sg_model_unit_params(&m, 26) < 0, "unit_params: out of range is negative");

    rc = load_named("qwen3-30b-a3b", &m, &err);
    if (!ok(rc == 0, "qwen3-30b-a3b loads for details")) {
        tap_diag("  %s", err.msg);
        return;
    }
    n = sg_model_unit_tensors(&m, 48, NULL, 0);
    /* norm, q, k, v, o, q_norm, k_norm, norm, router + 128 x 3 experts */
    is_int(n, 9 + 128 * 3, "qwen3-30b-a3b: tensors in a layer (counted first)");
    sg_tensor_info *big = calloc((size_t)n, sizeof *big);
    if (big && sg_model_unit_tensors(&m, 48, big, n) == n) {
        is_str(big[n - 1].name, "model.layers.47.mlp.experts.127.down_proj.weight",
               "qwen3-30b-a3b: last tensor of the last layer");
        ok(big[n - 1].ndim == 2 && big[n - 1].shape[0] == 2048 && big[n - 1].shape[1] == 768 &&
               big[n - 1].is_expert,
           "qwen3-30b-a3b: expert down_proj is (H, Imoe) = (2048, 768)");
        is_str(big[8].name, "model.layers.47.mlp.gate.weight", "qwen3-30b-a3b: router");
        ok(big[8].shape[0] == 128 && big[8].shape[1] == 2048 && !big[8].is_expert,
           "qwen3-30b-a3b: router (E, H), always active");
    } else {
        tap_skip(4, "could not list the layer");
    }
    free(big);
    is_int(sg_model_active_params(&m), 3353032704LL, "qwen3-30b-a3b: active exactly 3,353,032,704");
}

static void test_names(void)
{
    sg_model m;
    sg_error err = {0};
    if (!ok(load_named("llama-3.1-8b", &m, &err) == 0, "llama-3.1-8b loads")) {
        tap_diag("  %s", err.msg);
        return;
    }
    is_int(sg_model_num_units(&m), 34, "llama-3.1-8b: 34 units");
    sg_tensor_info t[16];
    int n = sg_model_unit_tensors(&m, 0, t, 16);
    is_int(n, 1, "unit 0: one tensor");
    is_str(t[0].name, "model.embed_tokens.weight", "unit 0: embed_tokens");
    ok(t[0].shape[0] == 128256 && t[0].shape[1] == 4096, "embed_tokens is (V, H)");

    static const char *const layer0[] = {
        "model.layers.0.input_layernorm.weight",  "model.layers.0.self_attn.q_proj.weight",
        "model.layers.0.self_attn.k_proj.weight", "model.layers.0.self_attn.v_proj.weight",
        "model.layers.0.self_attn.o_proj.weight", "model.layers.0.post_attention_layernorm.weight",
        "model.layers.0.mlp.gate_proj.weight",    "model.layers.0.mlp.up_proj.weight",
        "model.layers.0.mlp.down_proj.weight",
    };
    n = sg_model_unit_tensors(&m, 1, t, 16);
    is_int(n, 9, "llama layer: 9 tensors");
    int same = n == 9;
    for (int i = 0; same && i < 9; i++)
        same = strcmp(t[i].name, layer0[i]) == 0;
    ok(same, "llama layer: names in packing order (norm, q, k, v, o, norm, "
             "gate, up, down)");
    ok(t[2].shape[0] == 1024 && t[2].shape[1] == 4096, "k_proj is (kv*D, H)");
    ok(t[4].shape[0] == 4096 && t[4].shape[1] == 4096, "o_proj is (H, heads*D)");
    ok(t[8].shape[0] == 4096 && t[8].shape[1] == 14336, "down_proj is (H, I)");
    n = sg_model_unit_tensors(&m, 32, t, 16);
    is_str(t[0].name, "model.layers.31.input_layernorm.weight", "unit 32 is HF layer 31");
    n = sg_model_unit_tensors(&m, 33, t, 16);
    ok(n == 2 && strcmp(t[0].name, "model.norm.weight") == 0 &&
           strcmp(t[1].name, "lm_head.weight") == 0,
       "last unit: model.norm.weight, lm_head.weight");

    if (!ok(load_named("seed-oss-36b", &m, &err) == 0, "seed-oss-36b loads")) {
        tap_diag("  %s", err.msg);
        return;
    }
    n = sg_model_unit_tensors(&m, 1, t, 16);
    is_int(n, 12, "seed-oss layer: 9 tensors + q/k/v biases");
    ok(strcmp(t[2].name, "model.layers.0.self_attn.q_proj.bias") == 0 && t[2].shape[0] == 10240 &&
           t[1].shape[0] == 10240 && t[1].shape[1] == 5120,
       "seed-oss: q_proj (10240, 5120) followed by its bias (10240)");
    ok(!m.o_bias, "seed-oss: no o_proj bias");

    if (!ok(load_named("tiny-qwen3", &m, &err) == 0, "tiny-qwen3 loads")) {
        tap_diag("  %s", err.msg);
        return;
    }
    n = sg_model_unit_tensors(&m, 1, t, 16);
    ok(n == 11 && strcmp(t[5].name, "model.layers.0.self_attn.q_norm.weight") == 0 &&
           strcmp(t[6].name, "model.layers.0.self_attn.k_norm.weight") == 0 && t[5].shape[0] == 64,
       "tiny-qwen3: q_norm, k_norm (head_dim) after o_proj");
}

static void test_tiny(void)
{
    for (int i = 0; i < 3; i++) {
        sg_model m;
        sg_error err = {0};
        if (!ok(load_named(tiny[i], &m, &err) == 0, "%s loads", tiny[i])) {
            tap_diag("  %s", err.msg);
            continue;
        }
        int64_t total = sg_model_total_params(&m);
        tap_diag("%s: %lld params", tiny[i], (long long)total);
        ok(total < 2000000, "%s: under 2M params", tiny[i]);
        is_int(m.vocab_size, 256, "%s: byte-level vocabulary", tiny[i]);
        check_units(&m);
    }
    sg_model m;
    sg_error err = {0};
    if (load_named("tiny-llama", &m, &err) == 0) {
        is_int(sg_model_total_params(&m), 820352, "tiny-llama: 820,352 params");
        ok(m.tie_word_embeddings && sg_model_unit_tensors(&m, 5, NULL, 0) == 1,
           "tiny-llama: tied, last unit holds only model.norm");
    }
}

/* Every *.json under models/ loads and is named after its file. */
static void test_all_files(void)
{
    DIR *d = opendir(models_dir);
    if (!ok(d != NULL, "models dir %s opens", models_dir))
        return;
    int n = 0, bad = 0;
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        size_t len = strlen(de->d_name);
        if (len < 6 || strcmp(de->d_name + len - 5, ".json") != 0)
            continue;
        char path[1200];
        snprintf(path, sizeof path, "%s/%s", models_dir, de->d_name);
        sg_model m;
        sg_error err = {0};
        n++;
        if (sg_model_load(path, &m, &err) != 0) {
            tap_diag("%s", err.msg);
            bad++;
        } else if (strncmp(m.name, de->d_name, len - 5) != 0 || strlen(m.name) != len - 5) {
            tap_diag("%s: name \"%s\" differs from the file name", path, m.name);
            bad++;
        }
    }
    closedir(d);
    ok(n >= 10 && bad == 0, "all %d model files load and match their file names", n);
}

static const struct {
    const char *file, *expect;
} bad_files[] = {
    {"missing-hidden", "hidden_size: missing required key"},
    {"string-hidden", "hidden_size: \"128\" is not an integer"},
    {"zero-layers", "num_hidden_layers: 0 is not positive"},
    {"negative-vocab", "vocab_size: -256 is not positive"},
    {"kv-not-divide", "num_key_value_heads: 3 does not divide num_attention_heads 4"},
    {"topk-over-experts", "num_experts_per_tok: 5 is more than num_experts 4"},
    {"layer-types-length", "has 3 entries but num_hidden_layers is 4"},
    {"layer-types-value", "layer_types[1]: \"sliding\" is not"},
    {"sliding-no-window", "sliding_window: missing required key"},
    {"too-many-layers", "num_hidden_layers: 2000 is more than SG_MODEL_MAX_LAYERS"},
    {"unknown-key", "num_key_value_head: 2 is an unknown key (did you mean "
                    "\"num_key_value_heads\"?)"},
    {"bad-arch", "architecture: \"gemma2\" is not one of"},
    {"moe-key-on-dense", "num_experts: 4 applies only to"},
    {"fractional-head-dim", "head_dim: 32.5 is not an integer"},
    {"tie-not-bool", "tie_word_embeddings: 1 is not true or false"},
    {"negative-eps", "rms_norm_eps: -1e-05 is not positive"},
    {"no-head-dim-default", "head_dim: missing required key (hidden_size is not"},
    {"moe-missing-width", "moe_intermediate_size: missing required key"},
    {"experts-disagree", "num_local_experts: 8 differs from num_experts 4"},
    {"rope-scaling-factor", "rope_scaling.factor: \"8\" is not a positive number"},
    {"too-large", "more than stepgraph counts"},
    {"not-object", "(top level): [1,2] is not a JSON object"},
    {"invalid-json", "invalid-json.json: invalid JSON at line 5, column 3: unexpected '\"' "
                     "(expected ',' or '}')"},
    {"duplicate-key", "invalid JSON at line 15, column 3: duplicate key \"hidden_size\" "
                      "(first at line 4, column 3"},
};

static void test_bad_files(void)
{
    int n = (int)(sizeof bad_files / sizeof bad_files[0]);
    for (int i = 0; i < n; i++) {
        char path[1200];
        snprintf(path, sizeof path, "%s/tests/data/bad-models/%s.json", srcdir, bad_files[i].file);
        sg_model m;
        memset(&m, 0, sizeof m);
        strcpy(m.name, "untouched");
        sg_error err = {0};
        int rc = sg_model_load(path, &m, &err);
        ok(rc == SG_EINVAL && err.code == SG_EINVAL && strstr(err.msg, path) &&
               strstr(err.msg, bad_files[i].expect) && strcmp(m.name, "untouched") == 0,
           "%s: SG_EINVAL, message names the file and says \"%s\", model "
           "untouched",
           bad_files[i].file, bad_files[i].expect);
        if (rc != SG_EINVAL || !strstr(err.msg, bad_files[i].expect))
            tap_diag("  rc %d, message: %s", rc, err.msg);
    }

    sg_model m;
    sg_error err = {0};
    char path[1200];
    snprintf(path, sizeof path, "%s/tests/data/bad-models/no-such-file.json", srcdir);
    int rc = sg_model_load(path, &m, &err);
    ok(rc == SG_ENOENT && strstr(err.msg, "no-such-file.json"),
       "missing file: SG_ENOENT naming it");
    if (rc != SG_ENOENT)
        tap_diag("  rc %d: %s", rc, err.msg);
}

/* In-memory texts: explicit layer types, defaults, null values. */
static void test_parse(void)
{
    sg_model m;
    sg_error err = {0};
    const char *txt = "{\"name\": \"t\", \"architecture\": \"gpt_oss\", \"hidden_size\": 64,"
                      " \"num_hidden_layers\": 3, \"num_attention_heads\": 4,"
                      " \"vocab_size\": 256, \"max_position_embeddings\": 64,"
                      " \"rms_norm_eps\": 1e-5, \"rope_theta\": 1e4, \"_note\": 1,"
                      " \"intermediate_size\": 32, \"num_local_experts\": 4,"
                      " \"num_experts_per_tok\": 1, \"sliding_window\": 8,"
                      " \"layer_types\": [\"full_attention\", \"full_attention\","
                      " \"sliding_attention\"]}";
    int rc = sg_model_parse(txt, "inline", &m, &err);
    if (!ok(rc == 0, "inline gpt_oss text parses"))
        tap_diag("  %s", err.msg);
    ok(m.layer_attn[0] == SG_ATTN_FULL && m.layer_attn[2] == SG_ATTN_SLIDING,
       "explicit layer_types are kept");
    is_int(m.moe_intermediate_size, 32,
           "gpt_oss: intermediate_size is the "
           "expert width when moe_intermediate_size is absent");
    is_int(m.head_dim, 16, "head_dim defaults to hidden / heads");
    is_int(m.num_kv_heads, 4, "kv heads default to heads");
    ok(!m.qkv_bias && !m.o_bias && !m.tie_word_embeddings, "biases and tying default to false");

    rc = sg_model_parse("{\"name\": \"x\",\n  \"architecture\": }", "inline2", &m, &err);
    ok(rc == SG_EINVAL && strstr(err.msg, "inline2: invalid JSON at line 2, column 19"),
       "invalid inline JSON names origin and line");
    if (rc != SG_EINVAL)
        tap_diag("  %s", err.msg);

    char info[2048];
    if (load_named("gpt-oss-20b", &m, &err) == 0) {
        rc = sg_model_format_info(&m, info, sizeof info);
        ok(rc == 0 && strstr(info, "gpt-oss-20b") && strstr(info, "20,914,757,184") &&
               strstr(info, "3,608,307,264") && strstr(info, "gpt_oss"),
           "format_info: name, architecture, total and OpenAI's active count");
        tap_diag("format_info output:");
        for (char *line = strtok(info, "\n"); line; line = strtok(NULL, "\n"))
            tap_diag("  %s", line);
        char small[40];
        ok(sg_model_format_info(&m, small, sizeof small) == SG_ENOMEM &&
               strlen(small) == sizeof small - 1,
           "format_info: small buffer gives SG_ENOMEM and a terminated text");
    }
    if (load_named("tiny-llama", &m, &err) == 0) {
        rc = sg_model_format_info(&m, info, sizeof info);
        ok(rc == 0 && strstr(info, "820,352") && strstr(info, "tied"),
           "format_info: tiny-llama total and tying");
    }
}

static void test_resolve(void)
{
    char path[1200], want[1200];
    sg_error err = {0};
    int rc = sg_model_resolve("tiny-llama", models_dir, path, sizeof path, &err);
    snprintf(want, sizeof want, "%s/tiny-llama.json", models_dir);
    ok(rc == 0, "resolve a name");
    is_str(path, want, "name -> <dir>/<name>.json");

    snprintf(want, sizeof want, "%s/qwen3-14b.json", models_dir);
    rc = sg_model_resolve(want, NULL, path, sizeof path, &err);
    ok(rc == 0 && strcmp(path, want) == 0, "resolve a path: kept as is");

    rc = sg_model_resolve("no-such-model", models_dir, path, sizeof path, &err);
    ok(rc == SG_ENOENT && strstr(err.msg, "no-such-model") && strstr(err.msg, "tiny-llama"),
       "unknown name: SG_ENOENT listing the models available");
    if (rc != SG_ENOENT)
        tap_diag("  rc %d: %s", rc, err.msg);
    rc = sg_model_resolve("nowhere/x.json", NULL, path, sizeof path, &err);
    ok(rc == SG_ENOENT, "missing path: SG_ENOENT");
    char tiny_buf[8];
    ok(sg_model_resolve("tiny-llama", models_dir, tiny_buf, sizeof tiny_buf, &err) == SG_EINVAL,
       "resolve: output buffer too small is SG_EINVAL");

    /* NULL models_dir means sg_models_dir(), which honours the variable. */
    setenv("STEPGRAPH_MODELS_DIR", models_dir, 1);
    is_str(sg_models_dir(), models_dir, "sg_models_dir: $STEPGRAPH_MODELS_DIR wins");
    rc = sg_model_resolve("phi-4", NULL, path, sizeof path, &err);
    snprintf(want, sizeof want, "%s/phi-4.json", models_dir);
    ok(rc == 0 && strcmp(path, want) == 0, "resolve with the default dir");
    unsetenv("STEPGRAPH_MODELS_DIR");
    ok(sg_models_dir() != NULL && sg_models_dir()[0] != '\0',
       "sg_models_dir without the variable: %s", sg_models_dir());
}

/* The model parser runs the strict JSON check of common/json_strict.h. */
static void test_strict_json(void)
{
    static const char *const head =
        "{\"architecture\": \"llama\", \"hidden_size\": 64, \"intermediate_size\": 128,\n"
        " \"num_hidden_layers\": 2, \"num_attention_heads\": 4, \"vocab_size\": 256,\n"
        " \"max_position_embeddings\": 64, \"rms_norm_eps\": 1e-5, \"rope_theta\": 1e4,\n";
    static const struct {
        const char *tail, *want;
    } cases[] = {
        {" \"name\": \"ok\"}", NULL},
        {" \"name\": \"caf\\u00e9\"}", NULL},
        {" \"name\": \"tiny\\u0000junk\"}",
         "m.json: invalid JSON at line 4, column 15: \\u0000 (NUL) inside a string"},
        {" \"name\": \"x\", \"head_dim\": 016}",
         "m.json: invalid JSON at line 4, column 27: number '016' has a leading zero"},
        {" \"name\": \"x\", \"rope_theta\": 2.}",
         "m.json: invalid JSON at line 4, column 29: number '2.' has no digits after '.'"},
        {" \"name\": \"x\", \"rope_scaling\": {\"factor\": 8, \"factor\": 9}}",
         "m.json: invalid JSON at line 4, column 45: duplicate key \"factor\""},
        {" \"name\": \"t\\uZZZZ\"}", "m.json: invalid JSON at line 4, column 12: invalid escape"},
        {" \"name\": \"\xc0\xae\"}", "m.json: invalid JSON at line 4, column 11: invalid UTF-8"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char text[1024];
        snprintf(text, sizeof text, "%s%s", head, cases[i].tail);
        sg_model m;
        memset(&m, 0, sizeof m);
        strcpy(m.name, "untouched");
        sg_error err = {0};
        int rc = sg_model_parse(text, "m.json", &m, &err);
        if (!cases[i].want) {
            if (!ok(rc == 0, "model text %s parses", cases[i].tail))
                tap_diag("  %s", err.msg);
            continue;
        }
        ok(rc == SG_EINVAL && strstr(err.msg, cases[i].want) && !strcmp(m.name, "untouched"),
           "model text %s: refused with line and column, model untouched", cases[i].tail);
        if (!strstr(err.msg, cases[i].want))
            tap_diag("  got: %s", err.msg);
    }
    char text[1024];
    snprintf(text, sizeof text, "\xef\xbb\xbf%s \"name\": \"bom\"}", head);
    sg_model m;
    sg_error err = {0};
    int rc = sg_model_parse(text, "bom.json", &m, &err);
    if (!ok(rc == 0 && !strcmp(m.name, "bom"),
            "a model file with a UTF-8 BOM parses, as configs do"))
        tap_diag("  %s", err.msg);
}

/* Every shipped model transformers can express: config.json written, read
 * back, the same model (description, totals, attention pattern, rope). */
static void test_hf_round_trip(void)
{
    static const char *const names[] = {
        "tiny-llama",  "tiny-qwen3",    "tiny-moe",     "llama-3.1-8b",    "llama-3.2-1b",
        "qwen3-14b",   "qwen3-30b-a3b", "seed-oss-36b", "phi-4",           "bench-3m",
        "gpt-oss-20b", "tiny-gpt-oss",  "qwen2.5-7b",   "mistral-7b-v0.3", "mixtral-8x7b"};
    for (size_t i = 0; i < sizeof names / sizeof *names; i++) {
        char path[1200];
        snprintf(path, sizeof path, "%s/%s.json", models_dir, names[i]);
        sg_model *a = calloc(1, sizeof *a), *b = calloc(1, sizeof *b);
        sg_error err = {0};
        char *text = NULL, da[2048] = "", db[2048] = "";
        int rc = sg_model_load(path, a, &err);
        if (!rc)
            rc = sg_hf_config_text(a, "float32", &text, &err);
        if (!rc)
            rc = sg_model_parse(text, "written config.json", b, &err);
        if (rc)
            tap_diag("%s", err.msg);
        if (!rc) {
            sg_model_format_info(a, da, sizeof da);
            sg_model_format_info(b, db, sizeof db);
        }
        ok(!rc && b->from_hf_config && !b->hf_ignored_keys[0] && strcmp(da, db) == 0 &&
               !strcmp(a->name, b->name) && sg_model_total_params(a) == sg_model_total_params(b) &&
               !memcmp(a->layer_attn, b->layer_attn, sizeof a->layer_attn) &&
               a->rope_scaling == b->rope_scaling && a->rope_factor == b->rope_factor &&
               a->rope_theta == b->rope_theta && a->rms_norm_eps == b->rms_norm_eps &&
               a->o_bias == b->o_bias && a->qkv_bias == b->qkv_bias,
           "%s: the config.json stepgraph writes reads back as the same model", names[i]);
        free(text);
        free(a);
        free(b);
    }
    /* gpt-oss's yarn rope scaling: every parameter of it reads back */
    char path[1200];
    snprintf(path, sizeof path, "%s/gpt-oss-20b.json", models_dir);
    sg_model *g = calloc(1, sizeof *g), *h = calloc(1, sizeof *h);
    sg_error err = {0};
    char *text = NULL;
    int rc = sg_model_load(path, g, &err);
    if (!rc)
        rc = sg_hf_config_text(g, "bfloat16", &text, &err);
    if (!rc)
        rc = sg_model_parse(text, "written config.json", h, &err);
    ok(!rc && g->rope_scaling == 2 && h->rope_scaling == 2 && h->rope_factor == 32.0 &&
           h->rope_beta_fast == 32.0 && h->rope_beta_slow == 1.0 &&
           h->rope_original_max_pos == 4096.0 && h->rope_truncate == 0 &&
           h->rope_attention_factor == g->rope_attention_factor &&
           fabs(g->rope_attention_factor - (0.1 * log(32.0) + 1.0)) < 1e-12,
       "gpt-oss-20b (yarn): its config.json reads back with factor, betas, original context, "
       "truncate and attention factor");
    free(text);
    free(g);
    free(h);
}

/* Each family's own Hugging Face tensor names, shapes and packing order */
static void test_family_names(void)
{
    sg_model m;
    sg_error err = {0};
    sg_tensor_info t[32];
    if (!ok(load_named("phi-4", &m, &err) == 0 && m.arch == SG_ARCH_PHI3, "phi-4 loads as phi3"))
        tap_diag("  %s", err.msg);
    int n = sg_model_unit_tensors(&m, 1, t, 32);
    ok(n == 6 && !strcmp(t[1].name, "model.layers.0.self_attn.qkv_proj.weight") &&
           t[1].shape[0] == 5120 + 2 * 1280 && t[1].shape[1] == 5120 &&
           !strcmp(t[4].name, "model.layers.0.mlp.gate_up_proj.weight") &&
           t[4].shape[0] == 2 * 17920 && t[4].shape[1] == 5120 &&
           !strcmp(t[5].name, "model.layers.0.mlp.down_proj.weight"),
       "phi-4 layer: qkv_proj (q + 2 kv rows, H), o_proj, gate_up_proj (2 I, H), down_proj");
    if (!ok(load_named("qwen2.5-7b", &m, &err) == 0 && m.qkv_bias && !m.o_bias,
            "qwen2.5-7b loads with q/k/v biases, no o_proj bias"))
        tap_diag("  %s", err.msg);
    n = sg_model_unit_tensors(&m, 1, t, 32);
    ok(n == 12 && !strcmp(t[6].name, "model.layers.0.self_attn.v_proj.bias") &&
           t[6].shape[0] == 512,
       "qwen2 layer: 9 tensors + q/k/v biases (v_proj.bias 512)");
    if (!ok(load_named("mixtral-8x7b", &m, &err) == 0, "mixtral-8x7b loads"))
        tap_diag("  %s", err.msg);
    n = sg_model_unit_tensors(&m, 1, t, 32);
    ok(n == 6 + 1 + 24 && !strcmp(t[6].name, "model.layers.0.block_sparse_moe.gate.weight") &&
           !strcmp(t[7].name, "model.layers.0.block_sparse_moe.experts.0.w1.weight") &&
           !strcmp(t[8].name, "model.layers.0.block_sparse_moe.experts.0.w3.weight") &&
           !strcmp(t[9].name, "model.layers.0.block_sparse_moe.experts.0.w2.weight") &&
           t[9].shape[0] == 4096 && t[9].shape[1] == 14336 && t[9].is_expert && m.norm_topk_prob &&
           !m.qk_norm,
       "mixtral layer: router block_sparse_moe.gate, experts' w1 (gate), w3 (up), w2 (down: H, I)");
}

int main(void)
{
    const char *s = getenv("SG_SRCDIR");
    snprintf(srcdir, sizeof srcdir, "%s", s && *s ? s : ".");
    snprintf(models_dir, sizeof models_dir, "%s/models", srcdir);

    test_shipped();
    test_moe_details();
    test_names();
    test_tiny();
    test_all_files();
    test_bad_files();
    test_parse();
    test_strict_json();
    test_resolve();
    test_family_names();
    test_hf_round_trip();
    return tap_done();
}
