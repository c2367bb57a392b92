/* test_adam.c - the CPU Adam kernel (codelets/cpu/adam.c): 5 steps of AdamW,
 * Adam with L2, no bias correction and grad_scale != 1 against
 * torch.optim.AdamW / Adam (tests/torch_adam_ref.py, run with
 * $SYSTEM_PYTHON), for every ISA variant this CPU has; the variants against
 * each other; the fused bf16 output; rollback; skip_nonfinite; the pthreads
 * split; argument errors. Checks that need torch skip when it is missing. */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "codelets/cpu/adam.h"
#include "tests/tap.h"
#include "tests/test_util.h"

enum { NSTEPS = 5 };

/* The variants of this architecture (the NEON one is compared with the AVX
 * ones under qemu-aarch64 by tests/test_adam_neon.sh) */
#if defined(__aarch64__)
static const sg_adam_isa ISAS[] = {SG_ADAM_ISA_SCALAR, SG_ADAM_ISA_NEON};
enum { NISAS = 2 };
#else
static const sg_adam_isa ISAS[] = {SG_ADAM_ISA_SCALAR, SG_ADAM_ISA_AVX2,
                                   SG_ADAM_ISA_AVX512};
enum { NISAS = 3 };
#endif
/* every variant, for the check that a missing one is refused */
static const sg_adam_isa ALL_ISAS[] = {SG_ADAM_ISA_SCALAR, SG_ADAM_ISA_AVX2,
                                       SG_ADAM_ISA_AVX512, SG_ADAM_ISA_NEON};

/* ---- data ------------------------------------------------------------------ */

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;

static double urand(void) /* [0, 1) */
{
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    return (double)((rng_state * 0x2545f4914f6cdd1dull) >> 11) / 9007199254740992.0;
}

static double nrand(void)
{
    double u = urand(), w = urand();
    return sqrt(-2.0 * log(u + 1e-300)) * cos(6.283185307179586 * w);
}

/* Arrays one float past a 64-byte boundary, so no variant sees aligned data. */
static float *falloc(size_t n)
{
    float *b = NULL;
    if (posix_memalign((void **)&b, 64, (n + 16) * sizeof(float)))
        abort();
    return b + 1;
}

static void ffree(float *x)
{
    free(x - 1);
}

static void fill_params(float *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        p[i] = (float)(2.0 * urand() - 1.0);
}

/* Gradients over six orders of magnitude, with exact zeros. */
static void fill_grad(float *g, size_t n)
{
    for (size_t i = 0; i < n; i++)
        g[i] = i % 97 == 5 ? 0.0f : (float)(nrand() * exp(-9.0 + 12.0 * urand()));
}

/* ||a - b||_2 / ||b||_2 */
static double rel_norm(const float *a, const float *b, size_t n)
{
    double d = 0, r = 0;
    for (size_t i = 0; i < n; i++) {
        double e = (double)a[i] - (double)b[i];
        d += e * e;
        r += (double)b[i] * b[i];
    }
    return r > 0 ? sqrt(d / r) : sqrt(d);
}

/* max_i |a_i - b_i| / max_i |b_i| */
static double rel_max(const float *a, const float *b, size_t n)
{
    double d = 0, r = 0;
    for (size_t i = 0; i < n; i++) {
        d = fmax(d, fabs((double)a[i] - b[i]));
        r = fmax(r, fabs((double)b[i]));
    }
    return r > 0 ? d / r : d;
}

/* max_i |a_i - b_i| / (|b_i| + scale): element-wise relative error for p,
 * with the size of an update (lr) as the floor so that p near 0 does not
 * turn a rounding of the update into a huge relative error. */
static double rel_elem_floor(const float *a, const float *b, size_t n, double scale)
{
    double w = 0;
    for (size_t i = 0; i < n; i++)
        w = fmax(w, fabs((double)a[i] - b[i]) / (fabs((double)b[i]) + scale));
    return w;
}

/* ---- files for the torch reference ----------------------------------------- */

static int write_f32(const char *dir, const char *name, const float *x, size_t n)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    if (!f)
        return -1;
    size_t w = fwrite(x, sizeof(float), n, f);
    return (fclose(f) == 0 && w == n) ? 0 : -1;
}

static int read_f32(const char *dir, const char *name, float *x, size_t n)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "rb");
    if (!f)
        return -1;
    size_t r = fread(x, sizeof(float), n, f);
    fclose(f);
    return r == n ? 0 : -1;
}

static void remove_dir(const char *dir)
{
    static const char *names[] = {"p0.f32", "g1.f32", "g2.f32", "g3.f32",
                                  "g4.f32", "g5.f32", "p_ref.f32", "m_ref.f32",
                                  "v_ref.f32"};
    char path[4096];
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        snprintf(path, sizeof path, "%s/%s", dir, names[i]);
        unlink(path);
    }
    rmdir(dir);
}

static int have_torch(void)
{
    char cmd[4200];
    snprintf(cmd, sizeof cmd, "'%s' -c 'import torch' >/dev/null 2>&1",
             system_python());
    int st = system(cmd);
    return st != -1 && WIFEXITED(st) && WEXITSTATUS(st) == 0;
}

/* ---- cases against torch --------------------------------------------------- */

typedef struct tcase {
    const char *name;
    int adamw, bias_correction;
    float lr, wd, grad_scale;
} tcase;

static const tcase CASES[] = {
    {"AdamW", 1, 1, 1e-3f, 0.01f, 1.0f},
    {"Adam with L2", 0, 1, 1e-3f, 0.01f, 1.0f},
    {"AdamW without bias correction", 1, 0, 1e-3f, 0.01f, 1.0f},
    {"AdamW with grad_scale 0.37", 1, 1, 3e-3f, 0.1f, 0.37f},
    {"Adam with L2 and grad_scale 2^-12", 0, 1, 1e-2f, 0.05f, 0x1p-12f},
};
enum { NCASES = sizeof CASES / sizeof CASES[0] };

static sg_adam_params case_params(const tcase *tc, sg_adam_isa isa)
{
    sg_adam_params prm = SG_ADAM_PARAMS_DEFAULT;
    prm.lr = tc->lr;
    prm.weight_decay = tc->wd;
    prm.adamw_mode = tc->adamw;
    prm.bias_correction = tc->bias_correction;
    prm.isa = isa;
    return prm;
}

/* Runs NSTEPS steps from p0 with gradients g[s] (n each). */
static int run_steps(const sg_adam_params *prm, float grad_scale, const float *p0,
                     float *const *g, size_t n, float *p, float *m, float *v)
{
    memcpy(p, p0, n * sizeof(float));
    memset(m, 0, n * sizeof(float));
    memset(v, 0, n * sizeof(float));
    for (int s = 0; s < NSTEPS; s++) {
        int rc = sg_adam_step(prm, s + 1, p, g[s], m, v, NULL, n, grad_scale);
        if (rc)
            return rc;
    }
    return 0;
}

static void test_against_torch(void)
{
    const size_t n = 4099; /* 256 x 16 + 3: vector body and a tail */
    const int nchecks = 4;
    int torch = have_torch();
    if (!torch)
        tap_diag("no torch in %s: torch comparisons skipped", system_python());

    float *p0 = falloc(n), *g[NSTEPS], *p = falloc(n), *m = falloc(n), *v = falloc(n);
    float *pr = falloc(n), *mr = falloc(n), *vr = falloc(n);
    float *dp = falloc(n), *dpr = falloc(n);
    fill_params(p0, n);
    for (int s = 0; s < NSTEPS; s++) {
        g[s] = falloc(n);
        fill_grad(g[s], n);
    }

    for (int c = 0; c < NCASES; c++) {
        const tcase *tc = &CASES[c];
        int have_ref = 0;
        if (torch) {
            char dir[] = "/tmp/sg_test_adam.XXXXXX";
            if (!mkdtemp(dir)) {
                tap_diag("mkdtemp failed");
            } else {
                int wr = write_f32(dir, "p0.f32", p0, n);
                for (int s = 0; s < NSTEPS; s++) {
                    char name[32];
                    snprintf(name, sizeof name, "g%d.f32", s + 1);
                    wr |= write_f32(dir, name, g[s], n);
                }
                sg_adam_params d = SG_ADAM_PARAMS_DEFAULT;
                char cmd[8192];
                snprintf(cmd, sizeof cmd,
                         "'%s' '%s/tests/torch_adam_ref.py' '%s' --n %zu --steps %d "
                         "--optim %s --lr %a --beta1 %a --beta2 %a --eps %a --wd %a "
                         "--bias-correction %d --grad-scale %a",
                         system_python(), srcdir(), dir, n, NSTEPS,
                         tc->adamw ? "adamw" : "adam", (double)tc->lr,
                         (double)d.beta1, (double)d.beta2, (double)d.eps,
                         (double)tc->wd, tc->bias_correction,
                         (double)tc->grad_scale);
                int st = wr ? -1 : system(cmd);
                if (st != -1 && WIFEXITED(st) && WEXITSTATUS(st) == 0 &&
                    read_f32(dir, "p_ref.f32", pr, n) == 0 &&
                    read_f32(dir, "m_ref.f32", mr, n) == 0 &&
                    read_f32(dir, "v_ref.f32", vr, n) == 0)
                    have_ref = 1;
                else
                    tap_diag("%s: the torch reference failed: %s", tc->name, cmd);
                remove_dir(dir);
            }
        }
        for (int k = 0; k < NISAS; k++) {
            const char *isa = sg_adam_isa_name(ISAS[k]);
            if (!sg_adam_isa_supported(ISAS[k])) {
                char why[128];
                snprintf(why, sizeof why, "%s: no %s on this CPU", tc->name, isa);
                tap_skip(nchecks, why);
                continue;
            }
            if (!torch) {
                tap_skip(nchecks, "torch is not installed");
                continue;
            }
            sg_adam_params prm = case_params(tc, ISAS[k]);
            int rc = run_steps(&prm, tc->grad_scale, p0, g, n, p, m, v);
            if (!have_ref || rc) {
                for (int i = 0; i < nchecks; i++)
                    ok(0, "%s [%s]: torch reference and kernel ran (rc %d)",
                       tc->name, isa, rc);
                continue;
            }
            double ep = rel_norm(p, pr, n), em = rel_norm(m, mr, n),
                   ev = rel_norm(v, vr, n);
            for (size_t i = 0; i < n; i++) {
                dp[i] = p[i] - p0[i];
                dpr[i] = pr[i] - p0[i];
            }
            double ed = rel_norm(dp, dpr, n);
            tap_diag("%s [%s]: rel. errors vs torch p %.2e, m %.2e, v %.2e, "
                     "update p-p0 %.2e", tc->name, isa, ep, em, ev, ed);
            ok(ep <= 1e-5, "%s [%s]: p matches torch after %d steps", tc->name,
               isa, NSTEPS);
            ok(em <= 1e-5, "%s [%s]: exp_avg matches torch", tc->name, isa);
            ok(ev <= 1e-5, "%s [%s]: exp_avg_sq matches torch", tc->name, isa);
            /* The update is 1e-3 of p: a check on it alone catches errors
             * that p's rounding would hide. */
            ok(ed <= 1e-4, "%s [%s]: the update p - p0 matches torch's", tc->name,
               isa);
        }
    }
    for (int s = 0; s < NSTEPS; s++)
        ffree(g[s]);
    ffree(p0), ffree(p), ffree(m), ffree(v), ffree(pr), ffree(mr), ffree(vr);
    ffree(dp), ffree(dpr);
}

/* ---- variants against each other ------------------------------------------- */

static void test_isas_agree(void)
{
    const size_t n = 1000003;
    float *p0 = falloc(n), *g[NSTEPS];
    float *ps = falloc(n), *ms = falloc(n), *vs = falloc(n);
    float *p = falloc(n), *m = falloc(n), *v = falloc(n);
    float *dp = falloc(n), *dps = falloc(n);
    fill_params(p0, n);
    for (int s = 0; s < NSTEPS; s++) {
        g[s] = falloc(n);
        fill_grad(g[s], n);
    }
    for (int c = 0; c < NCASES; c++) {
        const tcase *tc = &CASES[c];
        sg_adam_params prm = case_params(tc, SG_ADAM_ISA_SCALAR);
        run_steps(&prm, tc->grad_scale, p0, g, n, ps, ms, vs);
        for (int k = 1; k < NISAS; k++) {
            const char *isa = sg_adam_isa_name(ISAS[k]);
            if (!sg_adam_isa_supported(ISAS[k])) {
                char why[128];
                snprintf(why, sizeof why, "no %s on this CPU", isa);
                tap_skip(1, why);
                continue;
            }
            prm.isa = ISAS[k];
            int rc = run_steps(&prm, tc->grad_scale, p0, g, n, p, m, v);
            for (size_t i = 0; i < n; i++) {
                dp[i] = p[i] - p0[i];
                dps[i] = ps[i] - p0[i];
            }
            double ep = rel_max(p, ps, n), ed = rel_norm(dp, dps, n),
                   em = rel_max(m, ms, n), ev = rel_max(v, vs, n);
            tap_diag("%s: %s vs scalar after %d steps, max error / max value: "
                     "p %.2e, m %.2e, v %.2e; update p-p0 %.2e (norm)", tc->name,
                     isa, NSTEPS, ep, em, ev, ed);
            /* FMA rounds once where scalar rounds twice: a few ulps, more on
             * the update where m cancels (b1*m ~ -(1-b1)*g). */
            ok(rc == 0 && ep <= 1e-6 && em <= 1e-6 && ev <= 1e-6 && ed <= 1e-5,
               "%s: %s agrees with scalar within FMA rounding", tc->name, isa);
        }
    }
    for (int s = 0; s < NSTEPS; s++)
        ffree(g[s]);
    ffree(p0), ffree(ps), ffree(ms), ffree(vs), ffree(p), ffree(m), ffree(v);
    ffree(dp), ffree(dps);
}

/* ---- bf16 ------------------------------------------------------------------- */

static float from_bits(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static const struct { uint32_t in; uint16_t out; } BF16_CASES[] = {
    {0x3f800000u, 0x3f80}, /* 1.0 */
    {0x3f808000u, 0x3f80}, /* tie, even below: down */
    {0x3f818000u, 0x3f82}, /* tie, odd below: up */
    {0x3f808001u, 0x3f81}, /* above the tie */
    {0x3f807fffu, 0x3f80}, /* below the tie */
    {0xbf818000u, 0xbf82}, /* negative tie up */
    {0x7f7fffffu, 0x7f80}, /* FLT_MAX rounds to +Inf */
    {0x7f800000u, 0x7f80}, /* +Inf */
    {0xff800000u, 0xff80}, /* -Inf */
    {0x7fc00000u, 0x7fc0}, /* quiet NaN */
    {0x7f800001u, 0x7fc0}, /* signalling NaN: quieted, not turned into Inf */
    {0x80000000u, 0x8000}, /* -0 */
    {0x00008000u, 0x0000}, /* subnormal tie to even */
    {0x00018000u, 0x0002}, /* subnormal tie up */
};
enum { NBF16 = sizeof BF16_CASES / sizeof BF16_CASES[0] };

static void test_bf16(void)
{
    int bad = 0;
    for (int i = 0; i < NBF16; i++) {
        uint16_t got = sg_f32_to_bf16(from_bits(BF16_CASES[i].in));
        if (got != BF16_CASES[i].out) {
            tap_diag("  bf16(0x%08x) = 0x%04x, expected 0x%04x", BF16_CASES[i].in,
                     got, BF16_CASES[i].out);
            bad++;
        }
    }
    ok(bad == 0, "bf16 rounding: nearest even, Inf, NaN, subnormals");

    /* Fused output: after a real step, and on the special values above (lr 0
     * and zero gradients leave p unchanged, so they reach the converter). */
    const size_t n = 1037;
    float *p = falloc(n), *g = falloc(n), *m = falloc(n), *v = falloc(n);
    uint16_t *pbb = malloc((n + 1) * sizeof(uint16_t)), *pb = pbb + 1;
    for (int k = 0; k < NISAS; k++) {
        const char *isa = sg_adam_isa_name(ISAS[k]);
        if (!sg_adam_isa_supported(ISAS[k])) {
            char why[128];
            snprintf(why, sizeof why, "no %s on this CPU", isa);
            tap_skip(2, why);
            continue;
        }
        sg_adam_params prm = SG_ADAM_PARAMS_DEFAULT;
        prm.isa = ISAS[k];
        rng_state = 42;
        fill_params(p, n);
        fill_grad(g, n);
        memset(m, 0, n * sizeof(float));
        memset(v, 0, n * sizeof(float));
        memset(pb, 0xab, n * sizeof(uint16_t));
        int rc = sg_adam_step(&prm, 1, p, g, m, v, pb, n, 1.0f);
        size_t diff = 0;
        for (size_t i = 0; i < n; i++)
            diff += pb[i] != sg_f32_to_bf16(p[i]);
        ok(rc == 0 && diff == 0,
           "bf16 [%s]: fused output equals the cast of the updated p (%zu differ)",
           isa, diff);

        prm.lr = 0.0f;
        for (size_t i = 0; i < n; i++) {
            p[i] = from_bits(BF16_CASES[i % NBF16].in);
            g[i] = m[i] = v[i] = 0.0f;
        }
        rc = sg_adam_step(&prm, 1, p, g, m, v, pb, n, 1.0f);
        diff = 0;
        for (size_t i = 0; i < n; i++)
            diff += pb[i] != BF16_CASES[i % NBF16].out;
        ok(rc == 0 && diff == 0,
           "bf16 [%s]: fused conversion of special values (%zu differ)", isa, diff);
    }
    ffree(p), ffree(g), ffree(m), ffree(v);
    free(pbb);
}

/* ---- rollback --------------------------------------------------------------- */

static void test_rollback(void)
{
    const size_t n = 100003;
    float *p = falloc(n), *m = falloc(n), *v = falloc(n), *g[5];
    float *ps = falloc(n), *ms = falloc(n), *vs = falloc(n);
    float *pd = falloc(n), *md = falloc(n), *vd = falloc(n);
    double worst[3] = {0, 0, 0};
    for (int s = 0; s < 5; s++) {
        g[s] = falloc(n);
        fill_grad(g[s], n);
    }
    const int cases[] = {0, 3, 4, 2}; /* AdamW, + grad_scale, L2 + scale, no bc */
    for (int ci = 0; ci < 4; ci++) {
        const tcase *tc = &CASES[cases[ci]];
        for (int k = 0; k < NISAS; k++) {
            const char *isa = sg_adam_isa_name(ISAS[k]);
            if (!sg_adam_isa_supported(ISAS[k])) {
                char why[128];
                snprintf(why, sizeof why, "no %s on this CPU", isa);
                tap_skip(ci == 0 ? 3 : 1, why);
                continue;
            }
            sg_adam_params prm = case_params(tc, ISAS[k]);
            float gs = tc->grad_scale;
            rng_state = 7;
            fill_params(p, n);
            memset(m, 0, n * sizeof(float));
            memset(v, 0, n * sizeof(float));
            for (int s = 1; s <= 3; s++)
                sg_adam_step(&prm, s, p, g[s - 1], m, v, NULL, n, gs);
            memcpy(ps, p, n * sizeof(float));
            memcpy(ms, m, n * sizeof(float));
            memcpy(vs, v, n * sizeof(float));
            int rc = sg_adam_step(&prm, 4, p, g[3], m, v, NULL, n, gs);
            rc |= sg_adam_rollback(&prm, 4, p, g[3], m, v, n, gs);
            double ep = rel_elem_floor(p, ps, n, tc->lr), em = rel_max(m, ms, n),
                   ev = rel_max(v, vs, n);
            double emn = rel_norm(m, ms, n), evn = rel_norm(v, vs, n);
            worst[0] = fmax(worst[0], ep);
            worst[1] = fmax(worst[1], em);
            worst[2] = fmax(worst[2], ev);
            tap_diag("rollback %s [%s]: p %.2e (max |dp|/(|p|+lr)); m %.2e of max "
                     "(norm %.2e); v %.2e of max (norm %.2e)",
                     tc->name, isa, ep, em, emn, ev, evn);
            int vneg = 0;
            for (size_t i = 0; i < n; i++)
                vneg |= !(v[i] >= 0.0f);
            ok(rc == 0 && ep <= 1e-6 && em <= 1e-6 && ev <= 1e-6 && !vneg,
               "rollback %s [%s]: step 4 then rollback gives the state after "
               "step 3", tc->name, isa);
            if (ci != 0)
                continue;

            /* SuperOffload: roll back the speculative step and redo it with
             * the clipping factor; same as stepping with it directly. */
            memcpy(pd, ps, n * sizeof(float));
            memcpy(md, ms, n * sizeof(float));
            memcpy(vd, vs, n * sizeof(float));
            rc = sg_adam_step(&prm, 4, pd, g[3], md, vd, NULL, n, 0.25f);
            rc |= sg_adam_step(&prm, 4, p, g[3], m, v, NULL, n, gs);
            rc |= sg_adam_rollback(&prm, 4, p, g[3], m, v, n, gs);
            rc |= sg_adam_step(&prm, 4, p, g[3], m, v, NULL, n, 0.25f);
            ok(rc == 0 && rel_norm(p, pd, n) <= 1e-6 && rel_max(m, md, n) <= 1e-6 &&
                   rel_max(v, vd, n) <= 1e-6,
               "rollback [%s]: rollback + redo with another grad_scale equals a "
               "direct step", isa);

            /* Step 1 from zero moments: the rollback brings them back to ~0. */
            memset(m, 0, n * sizeof(float));
            memset(v, 0, n * sizeof(float));
            memcpy(p, ps, n * sizeof(float));
            rc = sg_adam_step(&prm, 1, p, g[0], m, v, NULL, n, gs);
            memcpy(md, m, n * sizeof(float));
            memcpy(vd, v, n * sizeof(float));
            rc |= sg_adam_rollback(&prm, 1, p, g[0], m, v, n, gs);
            double mmax = 0, vmax = 0, m1 = 0, v1 = 0;
            for (size_t i = 0; i < n; i++) {
                mmax = fmax(mmax, fabs(m[i]));
                vmax = fmax(vmax, fabs(v[i]));
                m1 = fmax(m1, fabs(md[i]));
                v1 = fmax(v1, fabs(vd[i]));
            }
            ok(rc == 0 && mmax <= 1e-6 * m1 && vmax <= 1e-6 * v1 &&
                   rel_elem_floor(p, ps, n, tc->lr) <= 1e-6,
               "rollback [%s]: step 1 from zero moments rolls back to ~0 "
               "(max |m| %.1e of %.1e, max |v| %.1e of %.1e)", isa, mmax, m1,
               vmax, v1);
        }
    }
    tap_diag("rollback accuracy, worst over variants and modes: p %.2e (max "
             "|dp|/(|p|+lr)), m %.2e, v %.2e (max error / max value)",
             worst[0], worst[1], worst[2]);
    for (int s = 0; s < 5; s++)
        ffree(g[s]);
    ffree(p), ffree(m), ffree(v), ffree(ps), ffree(ms), ffree(vs);
    ffree(pd), ffree(md), ffree(vd);
}

/* ---- skip_nonfinite ------------------------------------------------------------ */

static void test_skip_nonfinite(void)
{
    const size_t n = 1031;
    float *p = falloc(n), *g = falloc(n), *m = falloc(n), *v = falloc(n);
    float *ps = falloc(n), *ms = falloc(n), *vs = falloc(n);
    float *pr = falloc(n), *mr = falloc(n), *vr = falloc(n);
    for (int k = 0; k < NISAS; k++) {
        const char *isa = sg_adam_isa_name(ISAS[k]);
        if (!sg_adam_isa_supported(ISAS[k])) {
            char why[128];
            snprintf(why, sizeof why, "no %s on this CPU", isa);
            tap_skip(2, why);
            continue;
        }
        for (int l2 = 0; l2 < 2; l2++) {
            sg_adam_params prm = case_params(&CASES[l2 ? 4 : 3], ISAS[k]);
            prm.skip_nonfinite = 1;
            rng_state = 99;
            fill_params(ps, n);
            /* the state two real steps leave */
            memset(ms, 0, n * sizeof(float));
            memset(vs, 0, n * sizeof(float));
            for (int s = 1; s <= 2; s++) {
                fill_grad(g, n);
                sg_adam_step(&prm, s, ps, g, ms, vs, NULL, n, 0.5f);
            }
            fill_grad(g, n);
            for (size_t i = 3; i < n; i += 101)
                g[i] = i % 2 ? INFINITY : NAN;
            g[n - 1] = -INFINITY; /* in the tail */
            /* Reference for the finite elements: the same step without skip. */
            memcpy(pr, ps, n * sizeof(float));
            memcpy(mr, ms, n * sizeof(float));
            memcpy(vr, vs, n * sizeof(float));
            prm.skip_nonfinite = 0;
            sg_adam_step(&prm, 3, pr, g, mr, vr, NULL, n, 0.5f);
            prm.skip_nonfinite = 1;
            memcpy(p, ps, n * sizeof(float));
            memcpy(m, ms, n * sizeof(float));
            memcpy(v, vs, n * sizeof(float));
            int rc = sg_adam_step(&prm, 3, p, g, m, v, NULL, n, 0.5f);
            size_t wrong = 0;
            for (size_t i = 0; i < n; i++) {
                int fin = isfinite(g[i]);
                const float *ep = fin ? pr : ps, *em = fin ? mr : ms,
                            *ev = fin ? vr : vs;
                wrong += memcmp(&p[i], &ep[i], 4) || memcmp(&m[i], &em[i], 4) ||
                         memcmp(&v[i], &ev[i], 4);
            }
            rc |= sg_adam_rollback(&prm, 3, p, g, m, v, n, 0.5f);
            size_t kept = 0, nonfinite = 0;
            for (size_t i = 0; i < n; i++)
                if (!isfinite(g[i])) {
                    nonfinite++;
                    kept += p[i] == ps[i] && m[i] == ms[i] && v[i] == vs[i];
                }
            double err = fmax(rel_elem_floor(p, ps, n, prm.lr), fmax(rel_max(m, ms, n),
                                                       rel_max(v, vs, n)));
            ok(rc == 0 && wrong == 0 && kept == nonfinite && err <= 1e-6,
               "skip_nonfinite %s [%s]: Inf/NaN gradients leave their elements "
               "unchanged, the rest is stepped, rollback restores all "
               "(%zu wrong, rollback err %.1e)", l2 ? "L2" : "AdamW", isa, wrong,
               err);
        }
    }
    ffree(p), ffree(g), ffree(m), ffree(v), ffree(ps), ffree(ms), ffree(vs);
    ffree(pr), ffree(mr), ffree(vr);
}

/* ---- pthreads split ------------------------------------------------------------ */

static void test_parallel(void)
{
    const size_t n = 100019;
    float *p = falloc(n), *g = falloc(n), *m = falloc(n), *v = falloc(n);
    float *p2 = falloc(n), *m2 = falloc(n), *v2 = falloc(n);
    uint16_t *b1 = malloc(n * 2), *b2 = malloc(n * 2);
    for (int k = 0; k < NISAS; k++) {
        const char *isa = sg_adam_isa_name(ISAS[k]);
        if (!sg_adam_isa_supported(ISAS[k])) {
            char why[128];
            snprintf(why, sizeof why, "no %s on this CPU", isa);
            tap_skip(1, why);
            continue;
        }
        sg_adam_params prm = case_params(&CASES[4], ISAS[k]);
        rng_state = 5;
        fill_params(p, n);
        fill_grad(g, n);
        for (size_t i = 0; i < n; i++) {
            m[i] = (float)(0.01 * nrand());
            v[i] = (float)(1e-4 * urand());
        }
        memcpy(p2, p, n * 4), memcpy(m2, m, n * 4), memcpy(v2, v, n * 4);
        int rc = sg_adam_step(&prm, 2, p, g, m, v, b1, n, 0.7f);
        rc |= sg_adam_step_parallel(&prm, 2, p2, g, m2, v2, b2, n, 0.7f, 3);
        ok(rc == 0 && !memcmp(p, p2, n * 4) && !memcmp(m, m2, n * 4) &&
               !memcmp(v, v2, n * 4) && !memcmp(b1, b2, n * 2),
           "parallel [%s]: 3 threads give bit-identical results", isa);
    }
    ffree(p), ffree(g), ffree(m), ffree(v), ffree(p2), ffree(m2), ffree(v2);
    free(b1), free(b2);
}

/* ---- arguments ------------------------------------------------------------------ */

static void test_errors(void)
{
    float p[4] = {1, 2, 3, 4}, g[4] = {1, 1, 1, 1}, m[4] = {0}, v[4] = {0};
    sg_adam_params prm = SG_ADAM_PARAMS_DEFAULT;
    sg_error err = {0};

    is_int(sg_adam_step(&prm, 0, p, g, m, v, NULL, 4, 1.0f), SG_EINVAL,
           "errors: step t = 0 is rejected (steps count from 1)");
    is_int(sg_adam_step(&prm, 1, NULL, g, m, v, NULL, 4, 1.0f), SG_EINVAL,
           "errors: NULL p is rejected");
    is_int(sg_adam_step(&prm, 1, NULL, NULL, NULL, NULL, NULL, 0, 1.0f), 0,
           "errors: n = 0 is a no-op");
    is_int(sg_adam_step(&prm, 1, p, g, m, v, NULL, 4, NAN), SG_EINVAL,
           "errors: NaN grad_scale is rejected");
    ok(p[0] == 1 && m[0] == 0, "errors: a rejected call changes nothing");
    is_int(sg_adam_step_parallel(&prm, 1, p, g, m, v, NULL, 4, 1.0f, 0), SG_EINVAL,
           "errors: 0 threads is rejected");

    prm.beta1 = 1.0f;
    is_int(sg_adam_check_params(&prm, &err), SG_EINVAL, "errors: beta1 = 1 is rejected");
    like(err.msg, "beta1 1 is out of range", "errors: the message names beta1 and its value");
    is_int(sg_adam_step(&prm, 1, p, g, m, v, NULL, 4, 1.0f), SG_EINVAL,
           "errors: step with beta1 = 1 is rejected");
    prm = SG_ADAM_PARAMS_DEFAULT;
    prm.weight_decay = -0.1f;
    is_int(sg_adam_check_params(&prm, &err), SG_EINVAL, "errors: negative weight_decay");
    like(err.msg, "weight_decay", "errors: the message names weight_decay");

    prm = SG_ADAM_PARAMS_DEFAULT;
    prm.beta1 = 0.0f;
    is_int(sg_adam_rollback(&prm, 1, p, g, m, v, 4, 1.0f), SG_EINVAL,
           "errors: rollback with beta1 = 0 (old moment forgotten) is rejected");
    prm = SG_ADAM_PARAMS_DEFAULT;
    prm.lr = 1.0f;
    prm.weight_decay = 1.0f;
    is_int(sg_adam_rollback(&prm, 1, p, g, m, v, 4, 1.0f), SG_EINVAL,
           "errors: rollback with lr * wd = 1 (p decayed to 0) is rejected");

    sg_adam_isa isa;
    is_int(sg_adam_isa_parse("avx1024", &isa), SG_EINVAL, "isa: unknown name rejected");
    ok(sg_adam_isa_parse("avx2", &isa) == 0 && isa == SG_ADAM_ISA_AVX2,
       "isa: parse avx2");
    is_str(sg_adam_isa_name(SG_ADAM_ISA_AVX512), "avx512", "isa: name of avx512");
    ok(sg_adam_isa_resolve(SG_ADAM_ISA_AUTO, &isa, &err) == 0 &&
           strcmp(sg_adam_isa_name(SG_ADAM_ISA_AUTO), sg_adam_isa_name(isa)) == 0,
       "isa: auto resolves to %s (SG_ADAM_ISA=%s)",
       sg_adam_isa_name(SG_ADAM_ISA_AUTO),
       getenv("SG_ADAM_ISA") ? getenv("SG_ADAM_ISA") : "unset");
    prm = SG_ADAM_PARAMS_DEFAULT;
    prm.isa = (sg_adam_isa)17;
    is_int(sg_adam_step(&prm, 1, p, g, m, v, NULL, 4, 1.0f), SG_EINVAL,
           "isa: a value outside the enum is rejected");
    sg_adam_isa missing = SG_ADAM_ISA_AUTO;
    for (size_t k = 0; k < sizeof ALL_ISAS / sizeof ALL_ISAS[0]; k++)
        if (!sg_adam_isa_supported(ALL_ISAS[k]))
            missing = ALL_ISAS[k];
    if (missing == SG_ADAM_ISA_AUTO) {
        tap_skip(2, "every variant is available on this CPU");
    } else {
        prm.isa = missing;
        is_int(sg_adam_step(&prm, 1, p, g, m, v, NULL, 4, 1.0f), SG_ENOTSUP,
               "isa: a variant this CPU lacks gives SG_ENOTSUP");
        like((sg_adam_isa_resolve(missing, &isa, &err), err.msg),
             sg_adam_isa_name(missing), "isa: the message names the variant");
    }
}

int main(void)
{
    tap_diag("CPU variants: scalar yes, avx2 %s, avx512 %s, neon %s; auto = %s",
             sg_adam_isa_supported(SG_ADAM_ISA_AVX2) ? "yes" : "no",
             sg_adam_isa_supported(SG_ADAM_ISA_AVX512) ? "yes" : "no",
             sg_adam_isa_supported(SG_ADAM_ISA_NEON) ? "yes" : "no",
             sg_adam_isa_name(SG_ADAM_ISA_AUTO));
    test_against_torch();
    test_isas_agree();
    test_bf16();
    test_rollback();
    test_skip_nonfinite();
    test_parallel();
    test_errors();
    return tap_done();
}
