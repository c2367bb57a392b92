/* gen_seeds.c - writes the binary seed files of tests/fuzz/corpus/ (weights,
 * training state, an optimizer partition and safetensors for the micro Llama
 * of fuzz_util.h, and small llm.c token shards). Built and run by
 * `scripts/fuzz.sh --seeds`. */
#include "tests/fuzz/fuzz_util.h"

#include "runtime/io/checkpoint_parts.h"
#include "runtime/io/weights.h"

static void die(const sg_error *err)
{
    fprintf(stderr, "gen_seeds: %s\n", err->msg);
    exit(1);
}

/* A partition's values: element k of a unit's set is a function of (set,
 * unit, k); second moments >= 0. */
static int part_values(void *ctx, int set, int u, int64_t lo, int64_t n, float *out)
{
    (void)ctx;
    for (int64_t k = 0; k < n; k++)
        out[k] = set == SG_SET_EXP_AVG_SQ ? 1e-4f * (float)((lo + k + u) % 3)
                                          : 0.01f * (float)((lo + k + u + set) % 7) - 0.03f;
    return 0;
}

/* An llm.c shard: 256 int32 header, then count tokens of width bytes. */
static void shard(const char *path, int32_t magic, int32_t version, int width, int count)
{
    FILE *f = fopen(path, "wb");
    if (!f)
        abort();
    int32_t h[256] = {magic, version, count};
    fwrite(h, sizeof h, 1, f);
    for (int i = 0; i < count; i++) {
        uint32_t t = (uint32_t)(i * 7 % 200);
        fwrite(&t, (size_t)width, 1, f); /* little-endian host */
    }
    if (fclose(f) != 0)
        abort();
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: gen_seeds CORPUS_DIR\n");
        return 2;
    }
    const char *dir = argv[1];
    char p[1024];
    sg_error err = {0};
    sg_model m;
    if (sg_model_parse(fuzz_micro_model, "micro", &m, &err))
        die(&err);
    sg_weights w;
    if (sg_weights_alloc(&w, &m, &err))
        die(&err);
    sg_weights_init(&w, 1, SG_INIT_STD);
    sg_st_meta step = {"step", "3"};
    snprintf(p, sizeof p, "%s/weights/f32.safetensors", dir);
    if (sg_weights_save(&w, p, SG_F32, &step, 1, &err))
        die(&err);
    snprintf(p, sizeof p, "%s/weights/bf16.safetensors", dir);
    if (sg_weights_save(&w, p, SG_BF16, NULL, 0, &err))
        die(&err);
    snprintf(p, sizeof p, "%s/safetensors/f16.safetensors", dir);
    if (sg_weights_save(&w, p, SG_F16, &step, 1, &err))
        die(&err);
    /* a small file with one tensor of each dtype */
    float x[6] = {1, -2, 0.5f, 3, 1e-3f, -7};
    int64_t s23[2] = {2, 3}, s6[1] = {6}, s0[2] = {0, 4};
    sg_st_entry e[4] = {
        {"a", SG_F32, SG_F32, 2, s23, x},
        {"b", SG_BF16, SG_F32, 1, s6, x},
        {"c", SG_F16, SG_F32, 1, s6, x},
        {"empty", SG_F32, SG_F32, 2, s0, x},
    };
    sg_st_meta md[2] = {{"format", "pt"}, {"note", "seed"}};
    snprintf(p, sizeof p, "%s/safetensors/small.safetensors", dir);
    if (sg_st_write(p, e, 4, md, 2, &err))
        die(&err);
    sg_weights_free(&w);

    sg_train_state s;
    if (sg_train_state_alloc(&s, &m, &err))
        die(&err);
    s.step = 5;
    s.adam_step = 4;
    s.loss_scale = 65536;
    s.data = (sg_data_pos){1, 2, 10};
    s.rng[0] = 1, s.rng[1] = 0xdeadbeef, s.rng[2] = 3, s.rng[3] = UINT64_MAX;
    s.config_hash = 0x1234abcd;
    for (int i = 0; i < s.ntensors; i++)
        for (int64_t k = 0; k < s.info[i].numel; k++) {
            s.exp_avg[i][k] = 0.01f * (float)(k % 5) - 0.02f;
            s.exp_avg_sq[i][k] = 1e-4f * (float)(k % 3);
        }
    snprintf(p, sizeof p, "%s/train_state/state.safetensors", dir);
    if (sg_train_state_save(&s, p, m.name, &err))
        die(&err);
    /* one rank's partition, as the file of a checkpoint of 1 rank */
    int nunits = sg_model_num_units(&m);
    int64_t lo[64] = {0}, hi[64];
    if (nunits > 64)
        abort();
    for (int u = 0; u < nunits; u++)
        hi[u] = sg_model_unit_params(&m, u);
    sg_unit_source values = {part_values, NULL};
    snprintf(p, sizeof p, "%s/parts", dir);
    if (sg_checkpoint_write_part(p, 0, 1, &m, &s, &values, lo, hi, &err))
        die(&err);
    sg_train_state_free(&s);

    snprintf(p, sizeof p, "%s/data/u16.bin", dir);
    shard(p, SG_DATA_MAGIC_U16, SG_DATA_VERSION_U16, 2, 40);
    snprintf(p, sizeof p, "%s/data/u32.bin", dir);
    shard(p, SG_DATA_MAGIC_U32, SG_DATA_VERSION_U32, 4, 24);
    return 0;
}
