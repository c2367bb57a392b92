/* adam_variants_dump.c - runs one CPU Adam variant over a fixed battery of
 * cases and writes every result's bytes to stdout, so that two variants (or
 * the same variant built for two architectures) can be compared bit for bit.
 * tests/test_adam_neon.sh builds it natively and for AArch64 (run under
 * qemu-aarch64) and compares the NEON variant with the AVX ones.
 *
 * Usage: adam_variants_dump ISA > out.bin   (ISA: scalar, avx2, avx512, neon, auto)
 * stderr: "variant NAME cases N values V finite F changed C"; exit 2 when the
 * variant is not available, 1 on any failed call.
 *
 * Cases: AdamW with decoupled decay, Adam with L2 decay, no bias correction,
 * a gradient scale, and skip_nonfinite with Inf and NaN gradients; Lion
 * (decay, skip_nonfinite) and Adagrad (L2, lr_decay, skip_nonfinite), whose
 * scalar variant gives the same bits too; lengths with every tail of 4, 8
 * and 16 lanes; three steps with the bf16 copy, then the rollback of the
 * third; then a fourth step with the casts fused (sg_adam_step_lowp: bf16
 * gradient in, bf16 parameters out) and its fused rollback and redo
 * (sg_adam_redo_lowp). Not a test by itself. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "codelets/cpu/adam.h"
#include "codelets/cpu/adam_lowp.h"

static uint64_t rng = 0x2545f4914f6cdd1dull;

static float urand_sym(void) /* [-1, 1) */
{
    rng = rng * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((double)(rng >> 40) / (double)(1ull << 24)) * 2.0f - 1.0f;
}

typedef struct dump_case {
    const char *name;
    int adamw, bias_correction, skip, specials;
    float wd, grad_scale;
    sg_optim_algo algo; /* Adam unless set */
    float lr_decay;
} dump_case;

static const dump_case CASES[] = {
    {"adamw", 1, 1, 0, 0, 0.01f, 1.0f, SG_OPTIM_ADAM, 0.0f},
    {"adam-l2", 0, 1, 0, 0, 0.05f, 1.0f, SG_OPTIM_ADAM, 0.0f},
    {"no-bias-correction", 1, 0, 0, 0, 0.1f, 0.5f, SG_OPTIM_ADAM, 0.0f},
    {"skip-nonfinite", 1, 1, 1, 1, 0.01f, 0.25f, SG_OPTIM_ADAM, 0.0f},
    {"skip-nonfinite-l2", 0, 1, 1, 1, 0.02f, 2.0f, SG_OPTIM_ADAM, 0.0f},
    {"lion", 1, 1, 0, 0, 0.1f, 0.5f, SG_OPTIM_LION, 0.0f},
    {"lion-skip-nonfinite", 1, 1, 1, 1, 0.01f, 2.0f, SG_OPTIM_LION, 0.0f},
    {"adagrad", 1, 1, 0, 0, 0.0f, 1.0f, SG_OPTIM_ADAGRAD, 0.0f},
    {"adagrad-l2-lr-decay", 1, 1, 0, 0, 0.05f, 0.5f, SG_OPTIM_ADAGRAD, 0.3f},
    {"adagrad-skip-nonfinite", 1, 1, 1, 1, 0.02f, 2.0f, SG_OPTIM_ADAGRAD, 0.1f},
};

static const size_t LENGTHS[] = {1, 3, 4, 5, 7, 8, 9, 15, 16, 17, 31, 33, 1000, 4099};

static void put(const void *p, size_t bytes)
{
    if (fwrite(p, 1, bytes, stdout) != bytes) {
        fprintf(stderr, "adam_variants_dump: write failed\n");
        exit(1);
    }
}

int main(int argc, char **argv)
{
    sg_adam_isa isa;
    if (argc != 2 || sg_adam_isa_parse(argv[1], &isa) != 0) {
        fprintf(stderr, "usage: adam_variants_dump scalar|avx2|avx512|neon|auto\n");
        return 1;
    }
    sg_error err = {0};
    sg_adam_isa got;
    if (sg_adam_isa_resolve(isa, &got, &err) != 0) {
        fprintf(stderr, "adam_variants_dump: %s\n", err.msg);
        return 2;
    }
    size_t values = 0, finite = 0, changed = 0;
    int ncases = 0;
    for (size_t ci = 0; ci < sizeof CASES / sizeof CASES[0]; ci++)
        for (size_t li = 0; li < sizeof LENGTHS / sizeof LENGTHS[0]; li++) {
            const dump_case *c = &CASES[ci];
            size_t n = LENGTHS[li];
            float *p = malloc(n * sizeof *p), *g = malloc(n * sizeof *g);
            float *m = calloc(n, sizeof *m), *v = calloc(n, sizeof *v);
            float *p0 = malloc(n * sizeof *p0);
            uint16_t *pb = malloc(n * sizeof *pb);
            if (!p || !g || !m || !v || !p0 || !pb) {
                fprintf(stderr, "adam_variants_dump: out of memory\n");
                return 1;
            }
            sg_adam_params prm = SG_ADAM_PARAMS_DEFAULT;
            prm.lr = 3e-3f;
            prm.beta2 = 0.98f;
            prm.weight_decay = c->wd;
            prm.adamw_mode = c->adamw;
            prm.bias_correction = c->bias_correction;
            prm.skip_nonfinite = c->skip;
            prm.algo = c->algo;
            prm.lr_decay = c->lr_decay;
            prm.isa = got;
            for (size_t i = 0; i < n; i++)
                p0[i] = p[i] = urand_sym();
            for (int t = 1; t <= 3; t++) {
                for (size_t i = 0; i < n; i++) {
                    g[i] = urand_sym() * (t == 2 ? 1e-3f : 1.0f);
                    if (c->specials && i % 7 == 3)
                        g[i] = i % 3 == 0 ? INFINITY : i % 3 == 1 ? -INFINITY : NAN;
                }
                if (sg_adam_step(&prm, t, p, g, m, v, pb, n, c->grad_scale)) {
                    fprintf(stderr, "adam_variants_dump: %s n=%zu: step %d failed\n", c->name, n,
                            t);
                    return 1;
                }
                put(p, n * sizeof *p);
                put(m, n * sizeof *m);
                put(v, n * sizeof *v);
                put(pb, n * sizeof *pb);
            }
            if (sg_adam_rollback(&prm, 3, p, g, m, v, n, c->grad_scale)) {
                fprintf(stderr, "adam_variants_dump: %s n=%zu: rollback failed\n", c->name, n);
                return 1;
            }
            put(p, n * sizeof *p);
            put(m, n * sizeof *m);
            put(v, n * sizeof *v);
            /* step 4 with the casts fused, then its rollback and redo with
             * half the multiplier; the bf16 gradient is g rounded */
            uint16_t *gb = malloc(n * sizeof *gb);
            if (!gb) {
                fprintf(stderr, "adam_variants_dump: out of memory\n");
                return 1;
            }
            for (size_t i = 0; i < n; i++)
                gb[i] = sg_f32_to_bf16(g[i]);
            if (sg_adam_step_lowp(&prm, 4, p, gb, SG_BF16, m, v, pb, SG_BF16, n, c->grad_scale) ||
                (put(p, n * sizeof *p), put(pb, n * sizeof *pb),
                 sg_adam_redo_lowp(&prm, 4, p, gb, SG_BF16, m, v, pb, SG_BF16, n, c->grad_scale,
                                   0.5f * c->grad_scale, 1))) {
                fprintf(stderr, "adam_variants_dump: %s n=%zu: fused step failed\n", c->name, n);
                return 1;
            }
            free(gb);
            put(p, n * sizeof *p);
            put(m, n * sizeof *m);
            put(v, n * sizeof *v);
            put(pb, n * sizeof *pb);
            for (size_t i = 0; i < n; i++) {
                values++;
                finite += isfinite(p[i]) && isfinite(m[i]) && isfinite(v[i]);
                changed += p[i] != p0[i];
            }
            ncases++;
            free(p), free(g), free(m), free(v), free(p0), free(pb);
        }
    fprintf(stderr, "variant %s cases %d values %zu finite %zu changed %zu\n",
            sg_adam_isa_name(got), ncases, values, finite, changed);
    return 0;
}
