/* test_adam.c - the CPU Adam kernel (codelets/cpu/adam.c): 5 steps of AdamW,
 * Adam with L2, no bias correction and grad_scale != 1 against
 * torch.optim.AdamW / Adam (tests/torch_adam_ref.py, run with
 * $SYSTEM_PYTHON), for every ISA variant this CPU has; the variants against
 * each other; the fused bf16 output; rollback; skip_nonfinite; the pthreads
 * split; argument errors; the 16-bit fused chain (adam_lowp.h) against
 * cast, step, cast. Then Lion and Adagrad (prm.algo,
 * codelets/cpu/lion_adagrad.c): against a double-precision evaluation of
 * adam.h's formulas written here, against torch.optim.Adagrad, every
 * variant bit-identical to scalar, and the same topics as Adam's. Checks
 * that need torch skip when it is missing. */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "codelets/cpu/adam.h"
#include "codelets/cpu/adam_lowp.h"
#include "codelets/cpu/ops.h" /* the cast codelet's conversions: the two-pass chain */
#include "tests/tap.h"
#include "tests/test_util.h"

enum { NSTEPS = 5 };

/* The variants of this architecture (the NEON one is compared with the AVX
 * ones under qemu-aarch64 by tests/test_adam_neon.sh) */
#if defined(__aarch64__)
static const sg_adam_isa ISAS[] = {SG_ADAM_ISA_SCALAR, SG_ADAM_ISA_NEON};
enum { NISAS = 2 };
#else
static const sg_adam_isa ISAS[] = {SG_ADAM_ISA_SCALAR, SG_ADAM_ISA_AVX2, SG_ADAM_ISA_AVX512};
enum { NISAS = 3 };
#endif
/* every variant, for the check that a missing one is refused */
static const sg_adam_isa ALL_ISAS[] = {SG_ADAM_ISA_SCALAR, SG_ADAM_ISA_AVX2, SG_ADAM_ISA_AVX512,
                                       SG_ADAM_ISA_NEON};

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
    static const char *names[] = {"p0.f32", "g1.f32",    "g2.f32",    "g3.f32",   "g4.f32",
                                  "g5.f32", "p_ref.f32", "m_ref.f32", "v_ref.f32"};
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
    snprintf(cmd, sizeof cmd, "'%s' -c 'import torch' >/dev/null 2>&1", system_python());
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
static int run_steps(const sg_adam_params *prm, float grad_scale, const float *p0, float *const *g,
                     size_t n, float *p, float *m, float *v)
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

/* A variant this CPU lacks: its `count` checks are reported as skipped. */
static int isa_missing(sg_adam_isa isa, int count)
{
    if (sg_adam_isa_supported(isa))
        return 0;
    char why[128];
    snprintf(why, sizeof why, "no %s on this CPU", sg_adam_isa_name(isa));
    tap_skip(count, why);
    return 1;
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
                         system_python(), srcdir(), dir, n, NSTEPS, tc->adamw ? "adamw" : "adam",
                         (double)tc->lr, (double)d.beta1, (double)d.beta2, (double)d.eps,
                         (double)tc->wd, tc->bias_correction, (double)tc->grad_scale);
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
                    ok(0, "%s [%s]: torch reference and kernel ran (rc %d)", tc->name, isa, rc);
                continue;
            }
            double ep = rel_norm(p, pr, n), em = rel_norm(m, mr, n), ev = rel_norm(v, vr, n);
            for (size_t i = 0; i < n; i++) {
                dp[i] = p[i] - p0[i];
                dpr[i] = pr[i] - p0[i];
            }
            double ed = rel_norm(dp, dpr, n);
            tap_diag("%s [%s]: rel. errors vs torch p %.2e, m %.2e, v %.2e, "
                     "update p-p0 %.2e",
                     tc->name, isa, ep, em, ev, ed);
            ok(ep <= 1e-5, "%s [%s]: p matches torch after %d steps", tc->name, isa, NSTEPS);
            ok(em <= 1e-5, "%s [%s]: exp_avg matches torch", tc->name, isa);
            ok(ev <= 1e-5, "%s [%s]: exp_avg_sq matches torch", tc->name, isa);
            /* The update is 1e-3 of p: a check on it alone catches errors
             * that p's rounding would hide. */
            ok(ed <= 1e-4, "%s [%s]: the update p - p0 matches torch's", tc->name, isa);
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
            if (isa_missing(ISAS[k], 1))
                continue;
            prm.isa = ISAS[k];
            int rc = run_steps(&prm, tc->grad_scale, p0, g, n, p, m, v);
            for (size_t i = 0; i < n; i++) {
                dp[i] = p[i] - p0[i];
                dps[i] = ps[i] - p0[i];
            }
            double ep = rel_max(p, ps, n), ed = rel_norm(dp, dps, n), em = rel_max(m, ms, n),
                   ev = rel_max(v, vs, n);
            tap_diag("%s: %s vs scalar after %d steps, max error / max value: "
                     "p %.2e, m %.2e, v %.2e; update p-p0 %.2e (norm)",
                     tc->name, isa, NSTEPS, ep, em, ev, ed);
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

static const struct {
    uint32_t in;
    uint16_t out;
} BF16_CASES[] = {
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
            tap_diag("  bf16(0x%08x) = 0x%04x, expected 0x%04x", BF16_CASES[i].in, got,
                     BF16_CASES[i].out);
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
        if (isa_missing(ISAS[k], 2))
            continue;
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
           "bf16 [%s]: fused output equals the cast of the updated p (%zu differ)", isa, diff);

        prm.lr = 0.0f;
        for (size_t i = 0; i < n; i++) {
            p[i] = from_bits(BF16_CASES[i % NBF16].in);
            g[i] = m[i] = v[i] = 0.0f;
        }
        rc = sg_adam_step(&prm, 1, p, g, m, v, pb, n, 1.0f);
        diff = 0;
        for (size_t i = 0; i < n; i++)
            diff += pb[i] != BF16_CASES[i % NBF16].out;
        ok(rc == 0 && diff == 0, "bf16 [%s]: fused conversion of special values (%zu differ)", isa,
           diff);
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
            if (isa_missing(ISAS[k], ci == 0 ? 3 : 1))
                continue;
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
               "step 3",
               tc->name, isa);
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
               "direct step",
               isa);

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
               "(max |m| %.1e of %.1e, max |v| %.1e of %.1e)",
               isa, mmax, m1, vmax, v1);
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
        if (isa_missing(ISAS[k], 2))
            continue;
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
                const float *ep = fin ? pr : ps, *em = fin ? mr : ms, *ev = fin ? vr : vs;
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
            double err =
                fmax(rel_elem_floor(p, ps, n, prm.lr), fmax(rel_max(m, ms, n), rel_max(v, vs, n)));
            ok(rc == 0 && wrong == 0 && kept == nonfinite && err <= 1e-6,
               "skip_nonfinite %s [%s]: Inf/NaN gradients leave their elements "
               "unchanged, the rest is stepped, rollback restores all "
               "(%zu wrong, rollback err %.1e)",
               l2 ? "L2" : "AdamW", isa, wrong, err);
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
        if (isa_missing(ISAS[k], 1))
            continue;
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
        ok(rc == 0 && !memcmp(p, p2, n * 4) && !memcmp(m, m2, n * 4) && !memcmp(v, v2, n * 4) &&
               !memcmp(b1, b2, n * 2),
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
    ok(sg_adam_isa_parse("avx2", &isa) == 0 && isa == SG_ADAM_ISA_AVX2, "isa: parse avx2");
    is_str(sg_adam_isa_name(SG_ADAM_ISA_AVX512), "avx512", "isa: name of avx512");
    ok(sg_adam_isa_resolve(SG_ADAM_ISA_AUTO, &isa, &err) == 0 &&
           strcmp(sg_adam_isa_name(SG_ADAM_ISA_AUTO), sg_adam_isa_name(isa)) == 0,
       "isa: auto resolves to %s (SG_ADAM_ISA=%s)", sg_adam_isa_name(SG_ADAM_ISA_AUTO),
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
        like((sg_adam_isa_resolve(missing, &isa, &err), err.msg), sg_adam_isa_name(missing),
             "isa: the message names the variant");
    }
}

/* ---- Lion and Adagrad -------------------------------------------------------------
 * Against a double-precision evaluation of adam.h's formulas written here
 * (not the kernel's roundings), against torch.optim.Adagrad, variants
 * against each other (bit for bit), bf16 copy, skip_nonfinite, rollback,
 * the pthreads split and the parameter checks. */

typedef struct ocase {
    const char *name;
    sg_optim_algo algo;
    float lr, beta1, beta2, eps, wd, lr_decay, grad_scale;
} ocase;

static const ocase OCASES[] = {
    {"Lion", SG_OPTIM_LION, 1e-4f, 0.9f, 0.99f, 0.0f, 0.0f, 0.0f, 1.0f},
    {"Lion wd 0.1, grad_scale 0.37", SG_OPTIM_LION, 3e-4f, 0.95f, 0.98f, 0.0f, 0.1f, 0.0f, 0.37f},
    {"Adagrad", SG_OPTIM_ADAGRAD, 1e-2f, 0.0f, 0.0f, 1e-10f, 0.0f, 0.0f, 1.0f},
    {"Adagrad L2 0.01, lr_decay 0.5", SG_OPTIM_ADAGRAD, 1e-2f, 0.0f, 0.0f, 1e-10f, 0.01f, 0.5f,
     1.0f},
    {"Adagrad L2 0.1, lr_decay 0.01, eps 1e-8, grad_scale 2^-12", SG_OPTIM_ADAGRAD, 3e-2f, 0.0f,
     0.0f, 1e-8f, 0.1f, 0.01f, 0x1p-12f},
};
enum { NOCASES = sizeof OCASES / sizeof OCASES[0] };

static const size_t OLENGTHS[] = {1, 15, 17, 1000, 4099};
enum { NOLENGTHS = sizeof OLENGTHS / sizeof OLENGTHS[0] };

static sg_adam_params ocase_params(const ocase *oc, sg_adam_isa isa)
{
    sg_adam_params prm = SG_ADAM_PARAMS_DEFAULT;
    prm.algo = oc->algo;
    prm.lr = oc->lr;
    prm.beta1 = oc->beta1;
    prm.beta2 = oc->beta2;
    prm.eps = oc->eps;
    prm.weight_decay = oc->wd;
    prm.lr_decay = oc->lr_decay;
    prm.isa = isa;
    return prm;
}

static int is_lion(const ocase *oc)
{
    return oc->algo == SG_OPTIM_LION;
}

/* One step t of Lion or Adagrad in double, straight from the formulas
 * (the float hyper-parameters, everything else unrounded). amb (may be
 * NULL) counts the Lion elements whose c is so close to 0 that the
 * kernel's roundings could give it the other sign (never seen: 0 expected). */
static void ref_step(const ocase *oc, int64_t t, double *p, const float *g, double *m, double *v,
                     size_t n, size_t *amb)
{
    const double lr = oc->lr, wd = oc->wd, b1 = oc->beta1, b2 = oc->beta2;
    for (size_t i = 0; i < n; i++) {
        double ge = (double)g[i] * (double)oc->grad_scale;
        if (is_lion(oc)) {
            double c = b1 * m[i] + (1.0 - b1) * ge;
            double s = c > 0 ? 1.0 : c < 0 ? -1.0 : 0.0;
            if (amb && c != 0 && fabs(c) <= 1e-5 * (fabs(b1 * m[i]) + fabs((1 - b1) * ge)))
                (*amb)++;
            p[i] = p[i] * (1.0 - lr * wd) - lr * s;
            m[i] = b2 * m[i] + (1.0 - b2) * ge;
        } else {
            if (wd != 0)
                ge += wd * p[i];
            v[i] += ge * ge;
            double clr = lr / (1.0 + (double)(t - 1) * (double)oc->lr_decay);
            p[i] -= clr * ge / (sqrt(v[i]) + (double)oc->eps);
        }
    }
}

/* max_i |a_i - b_i| / (|b_i| + floor) against a double reference */
static double derr_floor(const float *a, const double *b, size_t n, double floor_)
{
    double w = 0;
    for (size_t i = 0; i < n; i++)
        w = fmax(w, fabs((double)a[i] - b[i]) / (fabs(b[i]) + floor_));
    return w;
}

/* max_i |a_i - b_i| / max_i |b_i| */
static double derr_max(const float *a, const double *b, size_t n)
{
    double d = 0, r = 0;
    for (size_t i = 0; i < n; i++) {
        d = fmax(d, fabs((double)a[i] - b[i]));
        r = fmax(r, fabs(b[i]));
    }
    return r > 0 ? d / r : d;
}

/* A bit pattern no kernel writes: the unused moment must keep it. */
static void fill_sentinel(float *x, size_t n)
{
    for (size_t i = 0; i < n; i++)
        x[i] = from_bits(0x7fa00000u + (uint32_t)(i & 0xffff)); /* signalling NaNs */
}

static int kept_sentinel(const float *x, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        uint32_t u;
        memcpy(&u, &x[i], 4);
        if (u != 0x7fa00000u + (uint32_t)(i & 0xffff))
            return 0;
    }
    return 1;
}

/* Starting state: p random, the used moment zero (Adagrad's initial sum),
 * the unused one a sentinel. */
static void ostate_init(const ocase *oc, const float *p0, size_t n, float *p, float *m, float *v)
{
    memcpy(p, p0, n * sizeof(float));
    if (is_lion(oc)) {
        memset(m, 0, n * sizeof(float));
        fill_sentinel(v, n);
    } else {
        fill_sentinel(m, n);
        memset(v, 0, n * sizeof(float));
    }
}

/* Tolerances against the double reference after NSTEPS steps, in units of
 * float's relative precision 2^-24 (half an ulp at the top of a binade):
 * p element-wise relative to |p| + lr, the moment to its largest value. */
#define ULP24 (1.0 / 16777216.0)
#define OREF_TOL_P (6 * ULP24)
#define OREF_TOL_MOM (6 * ULP24)

static void test_optim_reference(void)
{
    const size_t nmax = 4099;
    float *p0 = falloc(nmax), *g[NSTEPS], *p = falloc(nmax), *m = falloc(nmax), *v = falloc(nmax);
    double *pr = malloc(nmax * sizeof(double)), *mr = malloc(nmax * sizeof(double)),
           *vr = malloc(nmax * sizeof(double));
    rng_state = 1234;
    fill_params(p0, nmax);
    for (int s = 0; s < NSTEPS; s++) {
        g[s] = falloc(nmax);
        fill_grad(g[s], nmax);
    }
    double worst[2][2] = {{0, 0}, {0, 0}}; /* [lion, adagrad][p, moment] */
    for (int c = 0; c < NOCASES; c++) {
        const ocase *oc = &OCASES[c];
        for (int k = 0; k < NISAS; k++) {
            const char *isa = sg_adam_isa_name(ISAS[k]);
            if (!sg_adam_isa_supported(ISAS[k])) {
                char why[128];
                snprintf(why, sizeof why, "%s: no %s on this CPU", oc->name, isa);
                tap_skip(1, why);
                continue;
            }
            sg_adam_params prm = ocase_params(oc, ISAS[k]);
            double ep = 0, emom = 0;
            size_t amb = 0;
            int rc = 0, untouched = 1;
            for (int li = 0; li < NOLENGTHS; li++) {
                size_t n = OLENGTHS[li];
                ostate_init(oc, p0, n, p, m, v);
                for (size_t i = 0; i < n; i++)
                    pr[i] = p0[i], mr[i] = 0, vr[i] = 0;
                for (int s = 0; s < NSTEPS; s++) {
                    rc |= sg_adam_step(&prm, s + 1, p, g[s], m, v, NULL, n, oc->grad_scale);
                    ref_step(oc, s + 1, pr, g[s], mr, vr, n, &amb);
                }
                ep = fmax(ep, derr_floor(p, pr, n, oc->lr));
                emom = fmax(emom, is_lion(oc) ? derr_max(m, mr, n) : derr_max(v, vr, n));
                untouched &= kept_sentinel(is_lion(oc) ? v : m, n);
            }
            worst[!is_lion(oc)][0] = fmax(worst[!is_lion(oc)][0], ep);
            worst[!is_lion(oc)][1] = fmax(worst[!is_lion(oc)][1], emom);
            tap_diag("%s [%s]: vs double reference after %d steps: p %.2f, %s %.2f "
                     "(units of 2^-24; n = 1, 15, 17, 1000, 4099; near-0 directions %zu)",
                     oc->name, isa, NSTEPS, ep / ULP24, is_lion(oc) ? "m" : "v", emom / ULP24, amb);
            ok(rc == 0 && amb == 0 && ep <= OREF_TOL_P && emom <= OREF_TOL_MOM && untouched,
               "%s [%s]: %d steps match the double-precision formulas within a few "
               "ulps, %s untouched",
               oc->name, isa, NSTEPS, is_lion(oc) ? "v" : "m");
        }
    }
    tap_diag("Lion vs double reference, worst: p %.2f, m %.2f; Adagrad: p %.2f, v %.2f "
             "(units of 2^-24)",
             worst[0][0] / ULP24, worst[0][1] / ULP24, worst[1][0] / ULP24, worst[1][1] / ULP24);
    for (int s = 0; s < NSTEPS; s++)
        ffree(g[s]);
    ffree(p0), ffree(p), ffree(m), ffree(v);
    free(pr), free(mr), free(vr);
}

/* Adagrad's lr_decay and L2, and Lion's decay and sign(0) = 0, each on its
 * own so that a rule dropped or changed is named. */
static void test_optim_rules(void)
{
    const size_t n = 1031;
    float *p0 = falloc(n), *g = falloc(n), *p = falloc(n), *m = falloc(n), *v = falloc(n);
    float *q = falloc(n), *v2 = falloc(n);
    double *pr = malloc(n * sizeof(double)), *mr = malloc(n * sizeof(double)),
           *vr = malloc(n * sizeof(double));
    rng_state = 77;
    fill_params(p0, n);
    fill_grad(g, n);
    for (int k = 0; k < NISAS; k++) {
        const char *isa = sg_adam_isa_name(ISAS[k]);
        if (isa_missing(ISAS[k], 4))
            continue;
        /* lr_decay: step t = 3 from a state with a sum of squares */
        ocase oc = OCASES[2];
        oc.lr_decay = 0.5f;
        sg_adam_params prm = ocase_params(&oc, ISAS[k]);
        for (size_t i = 0; i < n; i++)
            v[i] = (float)(1e-4 * urand());
        memcpy(v2, v, n * sizeof(float));
        memcpy(p, p0, n * sizeof(float));
        memcpy(q, p0, n * sizeof(float));
        for (size_t i = 0; i < n; i++)
            pr[i] = p0[i], vr[i] = v[i];
        int rc = sg_adam_step(&prm, 3, p, g, m, v, NULL, n, 1.0f);
        ref_step(&oc, 3, pr, g, mr, vr, n, NULL);
        double e = derr_floor(p, pr, n, oc.lr);
        prm.lr_decay = 0.0f;
        rc |= sg_adam_step(&prm, 3, q, g, m, v2, NULL, n, 1.0f);
        size_t same = 0; /* over the elements with a gradient */
        for (size_t i = 0; i < n; i++)
            same += g[i] != 0.0f && p[i] == q[i];
        /* lr / (1 + 2*0.5) = lr/2: the update is half as large */
        ok(rc == 0 && e <= 2 * ULP24 && same < n / 100,
           "Adagrad lr_decay [%s]: t = 3 with lr_decay 0.5 takes lr/2 (reference err %.2f "
           "of 2^-24) and differs from lr_decay 0 (%zu of %zu equal)",
           isa, e / ULP24, same, n);

        /* L2: wd enters the gradient (and the sum of squares) */
        oc = OCASES[2];
        oc.wd = 0.05f;
        prm = ocase_params(&oc, ISAS[k]);
        memset(v, 0, n * sizeof(float));
        memcpy(p, p0, n * sizeof(float));
        for (size_t i = 0; i < n; i++)
            pr[i] = p0[i], vr[i] = 0;
        rc = sg_adam_step(&prm, 1, p, g, m, v, NULL, n, 1.0f);
        ref_step(&oc, 1, pr, g, mr, vr, n, NULL);
        double ep = derr_floor(p, pr, n, oc.lr), ev = derr_max(v, vr, n);
        ok(rc == 0 && ep <= 2 * ULP24 && ev <= 2 * ULP24,
           "Adagrad L2 [%s]: wd 0.05 enters the gradient as torch's weight_decay "
           "(err p %.2f, v %.2f of 2^-24)",
           isa, ep / ULP24, ev / ULP24);

        /* Lion, g = 0 and m = 0: c = 0, sign 0: only the decay moves p */
        for (int wdi = 0; wdi < 2; wdi++) {
            oc = OCASES[wdi]; /* wd 0, then wd 0.1 */
            prm = ocase_params(&oc, ISAS[k]);
            memcpy(p, p0, n * sizeof(float));
            memset(m, 0, n * sizeof(float));
            float *gz = q;
            memset(gz, 0, n * sizeof(float));
            rc = sg_adam_step(&prm, 1, p, gz, m, v, NULL, n, 1.0f);
            double dec = 1.0 - (double)oc.lr * (double)oc.wd, worst = 0;
            size_t moved = 0;
            for (size_t i = 0; i < n; i++) {
                double want = (double)p0[i] * dec;
                worst = fmax(worst, fabs(p[i] - want) / fabs(want));
                moved += p[i] != p0[i];
            }
            if (oc.wd == 0.0f)
                ok(rc == 0 && moved == 0,
                   "Lion sign(0) = 0 [%s]: g = 0, m = 0 leave p unchanged (%zu moved)", isa, moved);
            else
                ok(rc == 0 && worst <= 2 * ULP24,
                   "Lion sign(0) = 0 [%s]: g = 0, m = 0 with wd 0.1: p only decays, "
                   "p*(1 - lr*wd) within %.2f of 2^-24",
                   isa, worst / ULP24);
        }
    }
    ffree(p0), ffree(g), ffree(p), ffree(m), ffree(v), ffree(q), ffree(v2);
    free(pr), free(mr), free(vr);
}

/* Every variant of this CPU gives the scalar variant's bits: steps with the
 * bf16 copy, skip_nonfinite with Inf and NaN, rollbacks; every tail. */
static void test_optim_isas_identical(void)
{
    static const size_t lens[] = {1, 3, 7, 15, 16, 17, 31, 33, 63, 64, 65, 1000, 4099, 100003};
    const size_t nmax = 100003;
    float *p0 = falloc(nmax), *g[4];
    float *ps = falloc(nmax), *ms = falloc(nmax), *vs = falloc(nmax);
    float *p = falloc(nmax), *m = falloc(nmax), *v = falloc(nmax);
    uint16_t *bs = malloc(nmax * 2), *b = malloc(nmax * 2);
    rng_state = 4242;
    fill_params(p0, nmax);
    for (int s = 0; s < 4; s++) {
        g[s] = falloc(nmax);
        fill_grad(g[s], nmax);
        for (size_t i = 11; i < nmax; i += 53)
            g[s][i] = i % 3 == 0 ? INFINITY : i % 3 == 1 ? -INFINITY : NAN;
    }
    for (int c = 0; c < NOCASES; c++)
        for (int k = 1; k < NISAS; k++) {
            const char *isa = sg_adam_isa_name(ISAS[k]);
            if (isa_missing(ISAS[k], 1))
                continue;
            size_t diff = 0, compared = 0;
            int rc = 0;
            for (int skip = 0; skip < 2; skip++)
                for (size_t li = 0; li < sizeof lens / sizeof lens[0]; li++) {
                    size_t n = lens[li];
                    for (int side = 0; side < 2; side++) {
                        sg_adam_params prm =
                            ocase_params(&OCASES[c], side ? ISAS[k] : SG_ADAM_ISA_SCALAR);
                        prm.skip_nonfinite = skip;
                        float *pp = side ? p : ps, *mm = side ? m : ms, *vv = side ? v : vs;
                        uint16_t *bb = side ? b : bs;
                        memcpy(pp, p0, n * 4);
                        for (size_t i = 0; i < n; i++)
                            mm[i] = (float)(0.01 * p0[(i * 7) % n]), vv[i] = mm[i] * mm[i];
                        /* without skip, Inf and NaN enter the state: the
                         * comparison covers their propagation too */
                        for (int s = 0; s < 3; s++)
                            rc |= sg_adam_step(&prm, s + 1, pp, g[s], mm, vv, bb, n,
                                               OCASES[c].grad_scale);
                        if (skip)
                            rc |= sg_adam_rollback(&prm, 3, pp, g[2], mm, vv, n,
                                                   OCASES[c].grad_scale);
                    }
                    diff += memcmp(p, ps, n * 4) != 0;
                    diff += memcmp(m, ms, n * 4) != 0;
                    diff += memcmp(v, vs, n * 4) != 0;
                    diff += memcmp(b, bs, n * 2) != 0;
                    compared += 4;
                }
            ok(rc == 0 && diff == 0,
               "%s: %s gives the scalar variant's bits (p, m, v, bf16; steps, skip_nonfinite, "
               "rollback; %zu arrays, %zu differ)",
               OCASES[c].name, isa, compared, diff);
        }
    for (int s = 0; s < 4; s++)
        ffree(g[s]);
    ffree(p0), ffree(ps), ffree(ms), ffree(vs), ffree(p), ffree(m), ffree(v);
    free(bs), free(b);
}

/* The bf16 copy: the cast of the updated p, and the special values. */
static void test_optim_bf16(void)
{
    const size_t n = 1037;
    float *p = falloc(n), *g = falloc(n), *m = falloc(n), *v = falloc(n);
    uint16_t *pbb = malloc((n + 1) * sizeof(uint16_t)), *pb = pbb + 1;
    for (int a = 0; a < 2; a++) {
        const ocase *oc = &OCASES[a ? 3 : 1];
        for (int k = 0; k < NISAS; k++) {
            const char *isa = sg_adam_isa_name(ISAS[k]);
            if (isa_missing(ISAS[k], 1))
                continue;
            sg_adam_params prm = ocase_params(oc, ISAS[k]);
            rng_state = 43;
            fill_params(p, n);
            fill_grad(g, n);
            memset(m, 0, n * 4);
            memset(v, 0, n * 4);
            memset(pb, 0xab, n * 2);
            int rc = sg_adam_step(&prm, 1, p, g, m, v, pb, n, 1.0f);
            size_t diff = 0;
            for (size_t i = 0; i < n; i++)
                diff += pb[i] != sg_f32_to_bf16(p[i]);
            /* lr 0, no decay, zero gradients: p reaches the conversion as it was */
            prm.lr = 0.0f;
            prm.weight_decay = 0.0f;
            for (size_t i = 0; i < n; i++) {
                p[i] = from_bits(BF16_CASES[i % NBF16].in);
                g[i] = m[i] = v[i] = 0.0f;
            }
            rc |= sg_adam_step(&prm, 1, p, g, m, v, pb, n, 1.0f);
            size_t sdiff = 0;
            for (size_t i = 0; i < n; i++)
                sdiff += pb[i] != BF16_CASES[i % NBF16].out;
            ok(rc == 0 && diff == 0 && sdiff == 0,
               "%s bf16 [%s]: the copy is the cast of the updated p (%zu differ) and "
               "rounds the special values as sg_f32_to_bf16 (%zu differ)",
               sg_optim_algo_name(oc->algo), isa, diff, sdiff);
        }
    }
    ffree(p), ffree(g), ffree(m), ffree(v);
    free(pbb);
}

/* skip_nonfinite: the elements of Inf/NaN gradients keep p, m, v (their
 * bf16 copy is written), the others are stepped as without skip; the
 * rollback leaves the skipped ones alone too. */
static void test_optim_skip(void)
{
    const size_t n = 1031;
    float *p = falloc(n), *g = falloc(n), *m = falloc(n), *v = falloc(n);
    float *ps = falloc(n), *ms = falloc(n), *vs = falloc(n);
    float *pr = falloc(n), *mr = falloc(n), *vr = falloc(n);
    uint16_t *pb = malloc(n * 2);
    for (int a = 0; a < 2; a++) {
        const ocase *oc = &OCASES[a ? 4 : 1];
        for (int k = 0; k < NISAS; k++) {
            const char *isa = sg_adam_isa_name(ISAS[k]);
            if (isa_missing(ISAS[k], 1))
                continue;
            sg_adam_params prm = ocase_params(oc, ISAS[k]);
            const float gs = 0.5f;
            rng_state = 99;
            fill_params(ps, n);
            memset(ms, 0, n * 4);
            memset(vs, 0, n * 4);
            for (int s = 1; s <= 2; s++) {
                fill_grad(g, n);
                sg_adam_step(&prm, s, ps, g, ms, vs, NULL, n, gs);
            }
            fill_grad(g, n);
            for (size_t i = 3; i < n; i += 101)
                g[i] = i % 2 ? INFINITY : NAN;
            g[n - 1] = -INFINITY; /* in the tail */
            memcpy(pr, ps, n * 4), memcpy(mr, ms, n * 4), memcpy(vr, vs, n * 4);
            int rc = sg_adam_step(&prm, 3, pr, g, mr, vr, NULL, n, gs); /* no skip */
            prm.skip_nonfinite = 1;
            memcpy(p, ps, n * 4), memcpy(m, ms, n * 4), memcpy(v, vs, n * 4);
            memset(pb, 0xab, n * 2);
            rc |= sg_adam_step(&prm, 3, p, g, m, v, pb, n, gs);
            size_t wrong = 0, nonfinite = 0, poisoned = 0;
            for (size_t i = 0; i < n; i++) {
                int fin = isfinite(g[i]);
                nonfinite += !fin;
                poisoned += !fin && !(isnan(pr[i]) || isinf(pr[i]) || isnan(mr[i]) ||
                                      isinf(mr[i]) || isnan(vr[i]) || isinf(vr[i]));
                const float *ep = fin ? pr : ps, *em = fin ? mr : ms, *ev = fin ? vr : vs;
                wrong += memcmp(&p[i], &ep[i], 4) || memcmp(&m[i], &em[i], 4) ||
                         memcmp(&v[i], &ev[i], 4) || pb[i] != sg_f32_to_bf16(p[i]);
            }
            rc |= sg_adam_rollback(&prm, 3, p, g, m, v, n, gs);
            size_t kept = 0;
            for (size_t i = 0; i < n; i++)
                if (!isfinite(g[i]))
                    kept += !memcmp(&p[i], &ps[i], 4) && !memcmp(&m[i], &ms[i], 4) &&
                            !memcmp(&v[i], &vs[i], 4);
            ok(rc == 0 && nonfinite > 5 && poisoned == 0 && wrong == 0 && kept == nonfinite,
               "%s skip_nonfinite [%s]: %zu Inf/NaN gradients leave their elements "
               "unchanged (without skip they poison them), bf16 written, the rest stepped "
               "(%zu wrong); rollback keeps them (%zu of %zu)",
               sg_optim_algo_name(oc->algo), isa, nonfinite, wrong, kept, nonfinite);
        }
    }
    ffree(p), ffree(g), ffree(m), ffree(v), ffree(ps), ffree(ms), ffree(vs);
    ffree(pr), ffree(mr), ffree(vr);
    free(pb);
}

/* Rollback after step 4 from the state of 3 steps. Adagrad: within a few
 * ulps, times the condition number of the L2 inversion where it exceeds 1
 * (adam.h: 1 / |1 - wd*clr/(sqrt(v) + eps)|, computed here from the
 * post-step v). Lion: the direction is recomputed from a recovered m, and
 * an element whose c is within rounding of 0 can take the other sign: p off
 * by lr or 2*lr there (counted); the others within a few ulps. */
#define ORB_TOL (4 * ULP24)

static void test_optim_rollback(void)
{
    const size_t n = 100003;
    float *p = falloc(n), *m = falloc(n), *v = falloc(n), *g[4];
    float *ps = falloc(n), *ms = falloc(n), *vs = falloc(n), *vpost = falloc(n);
    rng_state = 2024;
    for (int s = 0; s < 4; s++) {
        g[s] = falloc(n);
        fill_grad(g[s], n);
    }
    double worst[2][2] = {{0, 0}, {0, 0}}, worst_raw = 0, worst_cond = 0;
    size_t flips_total = 0, lion_elems = 0, illcond_total = 0;
    for (int c = 0; c < NOCASES; c++) {
        const ocase *oc = &OCASES[c];
        for (int k = 0; k < NISAS; k++) {
            const char *isa = sg_adam_isa_name(ISAS[k]);
            if (isa_missing(ISAS[k], 1))
                continue;
            sg_adam_params prm = ocase_params(oc, ISAS[k]);
            rng_state = 7;
            fill_params(p, n);
            memset(m, 0, n * 4);
            memset(v, 0, n * 4);
            int rc = 0;
            for (int s = 1; s <= 3; s++)
                rc |= sg_adam_step(&prm, s, p, g[s - 1], m, v, NULL, n, oc->grad_scale);
            memcpy(ps, p, n * 4), memcpy(ms, m, n * 4), memcpy(vs, v, n * 4);
            rc |= sg_adam_step(&prm, 4, p, g[3], m, v, NULL, n, oc->grad_scale);
            memcpy(vpost, v, n * 4);
            rc |= sg_adam_rollback(&prm, 4, p, g[3], m, v, n, oc->grad_scale);
            /* element-wise error of p over |p| + lr, and over the condition
             * number where it exceeds 1; the flips apart */
            size_t flips = 0, exact = 0, illcond = 0;
            double ep = 0, clr = oc->lr / (1.0 + 3.0 * oc->lr_decay), craw = 0;
            for (size_t i = 0; i < n; i++) {
                double d = fabs((double)p[i] - ps[i]), rel = d / (fabs(ps[i]) + oc->lr);
                double cond = 1.0;
                if (!is_lion(oc) && oc->wd != 0.0f)
                    cond = fmax(1.0, 1.0 / fabs(1.0 - oc->wd * clr / (sqrt(vpost[i]) + oc->eps)));
                illcond += cond > 2.0;
                exact += d == 0;
                if (is_lion(oc) && d > 0.5 * oc->lr)
                    flips++;
                else
                    ep = fmax(ep, rel / cond);
                if (rel > craw)
                    craw = rel, worst_cond = fmax(worst_cond, cond);
            }
            worst_raw = fmax(worst_raw, is_lion(oc) ? 0 : craw);
            illcond_total += illcond;
            double emom = is_lion(oc) ? rel_max(m, ms, n) : rel_max(v, vs, n);
            int vneg = 0;
            for (size_t i = 0; i < n; i++)
                vneg |= !is_lion(oc) && !(v[i] >= 0.0f);
            worst[!is_lion(oc)][0] = fmax(worst[!is_lion(oc)][0], ep);
            worst[!is_lion(oc)][1] = fmax(worst[!is_lion(oc)][1], emom);
            tap_diag("rollback %s [%s]: p %.2f (max |dp|/(|p|+lr)/max(1, cond), 2^-24 "
                     "units; without cond %.2f; %.1f%% bit-exact; cond > 2: %zu), %s %.2f "
                     "(of max); sign flips %zu of %zu",
                     oc->name, isa, ep / ULP24, craw / ULP24, 100.0 * exact / n, illcond,
                     is_lion(oc) ? "m" : "v", emom / ULP24, flips, n);
            if (is_lion(oc)) {
                flips_total += flips;
                lion_elems += n;
                ok(rc == 0 && ep <= ORB_TOL && emom <= ORB_TOL && flips <= n / 10000,
                   "rollback %s [%s]: the state after step 3 within a few ulps but %zu "
                   "sign flips (at most 1e-4 of the elements)",
                   oc->name, isa, flips);
            } else {
                ok(rc == 0 && ep <= ORB_TOL && emom <= ORB_TOL && !vneg,
                   "rollback %s [%s]: step 4 then rollback gives the state after step 3 "
                   "within a few ulps",
                   oc->name, isa);
            }
        }
    }
    tap_diag("rollback accuracy: Lion p %.2f, m %.2f; Adagrad p %.2f (over max(1, cond)), "
             "v %.2f (2^-24 units); Adagrad p without cond: %.2f (cond there %.1f; %zu "
             "element-cases with cond > 2); Lion sign flips on random data: %zu of %zu "
             "elements",
             worst[0][0] / ULP24, worst[0][1] / ULP24, worst[1][0] / ULP24, worst[1][1] / ULP24,
             worst_raw / ULP24, worst_cond, illcond_total, flips_total, lion_elems);

    /* Lion's documented failure: c within rounding of 0. m chosen so that
     * b1*m cancels (1-b1)*ge: the step takes whatever sign the rounding
     * leaves, the rollback's recovered m another rounding. The flipped
     * elements are off by lr (a sign against a zero) or 2*lr (opposite
     * signs), times 1/decay, never more. */
    {
        const ocase *oc = &OCASES[0];
        sg_adam_params prm = ocase_params(oc, SG_ADAM_ISA_AUTO);
        const size_t nn = 10000;
        rng_state = 5;
        for (size_t i = 0; i < nn; i++) {
            p[i] = (float)(2.0 * urand() - 1.0);
            g[0][i] = (float)nrand();
            m[i] = (float)(-(1.0 - (double)oc->beta1) * g[0][i] / oc->beta1);
        }
        memcpy(ps, p, nn * 4), memcpy(ms, m, nn * 4);
        int rc = sg_adam_step(&prm, 2, p, g[0], m, v, NULL, nn, 1.0f);
        rc |= sg_adam_rollback(&prm, 2, p, g[0], m, v, nn, 1.0f);
        size_t flips = 0, bad = 0;
        for (size_t i = 0; i < nn; i++) {
            double d = fabs((double)p[i] - ps[i]);
            if (d > 0.5 * oc->lr) {
                flips++;
                bad += fabs(d - oc->lr) > 1e-6 && fabs(d - 2 * oc->lr) > 1e-6;
            }
        }
        tap_diag("rollback Lion with c ~ 0 by construction: %zu of %zu elements flipped", flips,
                 nn);
        ok(rc == 0 && flips > 0 && bad == 0,
           "rollback Lion, c within rounding of 0: some elements flip (%zu of %zu, as "
           "adam.h says), each off by lr or 2*lr (%zu otherwise)",
           flips, nn, bad);
    }
    for (int s = 0; s < 4; s++)
        ffree(g[s]);
    ffree(p), ffree(m), ffree(v), ffree(ps), ffree(ms), ffree(vs), ffree(vpost);
}

/* SuperOffload's fused validation (sg_adam_redo) against its definition: the
 * rollback of the speculative step over the whole array, then the step with
 * the clipping multiplier, bit for bit, for every optimizer case and
 * variant, on a length that crosses blocks and ends in a partial vector; and
 * the rollback alone when the redo is skipped. */
static void test_redo(void)
{
    const size_t n = 3 * 2048 + 37;
    float *g = falloc(n), *a[3], *b[3];
    for (int j = 0; j < 3; j++)
        a[j] = falloc(n), b[j] = falloc(n);
    rng_state = 99;
    fill_grad(g, n);
    for (int c = -2; c < NOCASES; c++) { /* -2, -1: CASES 0 and 4 (Adam) */
        for (int k = 0; k < NISAS; k++) {
            const char *isa = sg_adam_isa_name(ISAS[k]);
            if (isa_missing(ISAS[k], 2))
                continue;
            sg_adam_params prm = c < 0 ? case_params(&CASES[c == -2 ? 0 : 4], ISAS[k])
                                       : ocase_params(&OCASES[c], ISAS[k]);
            const char *name = c < 0 ? CASES[c == -2 ? 0 : 4].name : OCASES[c].name;
            float spec = c == -1 ? 0x1p-12f : 1.0f, clip = 0.3f * spec;
            for (int redo = 1; redo >= 0; redo--) {
                rng_state = 5;
                fill_params(a[0], n);
                fill_grad(a[1], n);
                for (size_t i = 0; i < n; i++)
                    a[1][i] *= 0.1f, a[2][i] = a[1][i] * a[1][i];
                int rc = sg_adam_step(&prm, 3, a[0], g, a[1], a[2], NULL, n, spec);
                for (int j = 0; j < 3; j++)
                    memcpy(b[j], a[j], n * sizeof(float));
                rc |= sg_adam_redo(&prm, 3, a[0], g, a[1], a[2], n, spec, clip, redo);
                rc |= sg_adam_rollback(&prm, 3, b[0], g, b[1], b[2], n, spec);
                if (redo)
                    rc |= sg_adam_step(&prm, 3, b[0], g, b[1], b[2], NULL, n, clip);
                size_t differ = 0;
                for (int j = 0; j < 3; j++)
                    differ += memcmp(a[j], b[j], n * sizeof(float)) != 0;
                ok(rc == 0 && differ == 0,
                   "redo %s [%s]: fused %s equals %s bit for bit (%zu arrays differ)", name, isa,
                   redo ? "rollback and redo" : "rollback without redo",
                   redo ? "sg_adam_rollback then sg_adam_step" : "sg_adam_rollback", differ);
            }
        }
    }
    sg_adam_params prm = SG_ADAM_PARAMS_DEFAULT;
    is_int(sg_adam_redo(&prm, 1, a[0], g, a[1], a[2], 4, 1.0f, NAN, 1), SG_EINVAL,
           "redo: a non-finite multiplier for the redo is rejected");
    is_int(sg_adam_redo(&prm, 1, a[0], g, a[1], a[2], 4, 1.0f, NAN, 0), 0,
           "redo: without the redo its multiplier is not used");
    ffree(g);
    for (int j = 0; j < 3; j++)
        ffree(a[j]), ffree(b[j]);
}

/* ---- the fused 16-bit chain (adam_lowp.h) ------------------------------------
 * sg_adam_step_lowp and sg_adam_redo_lowp against the two-pass chain they
 * replace (the cast codelet's conversion of the gradient to fp32, the fp32
 * step or rollback/redo, the cast of the master back), bit for bit, for
 * Adam and the other rules, every variant, bf16 and fp16, on a length that
 * crosses blocks and ends in a partial vector; the 16-bit output also
 * against sg_f32_to_bf16 of the final master, element by element. */

enum { LOWP_N = 3 * SG_ADAM_LOWP_BLOCK + 37 };

/* Case c of the lowp tests: -3..-1 Adam (CASES 0 and 4, and AdamW with
 * skip_nonfinite), 0.. the OCASES. */
static sg_adam_params lowp_case(int c, sg_adam_isa isa, float *gs, const char **name)
{
    if (c >= 0) {
        *gs = OCASES[c].grad_scale;
        *name = OCASES[c].name;
        return ocase_params(&OCASES[c], isa);
    }
    const tcase *tc = &CASES[c == -2 ? 4 : 0];
    sg_adam_params prm = case_params(tc, isa);
    *gs = tc->grad_scale;
    *name = c == -3 ? "AdamW skip_nonfinite" : tc->name;
    prm.skip_nonfinite = c == -3;
    return prm;
}

/* A 16-bit gradient (g_dt) from fill_grad; with Inf and NaN for skip. */
static void lowp_grad(uint16_t *gh, sg_dtype dt, float *tmp, size_t n, int nonfinite)
{
    fill_grad(tmp, n);
    if (nonfinite)
        for (size_t i = 3; i < n; i += 211)
            tmp[i] = i % 2 ? INFINITY : NAN;
    if (dt == SG_BF16)
        sg_cast_f32_to_bf16(gh, tmp, n);
    else
        sg_cast_f32_to_f16(gh, tmp, n);
}

static void to_f32(float *out, const uint16_t *in, sg_dtype dt, size_t n)
{
    if (dt == SG_BF16)
        sg_cast_bf16_to_f32(out, in, n);
    else
        sg_cast_f16_to_f32(out, in, n);
}

static void to_lowp(uint16_t *out, const float *in, sg_dtype dt, size_t n)
{
    if (dt == SG_BF16)
        sg_cast_f32_to_bf16(out, in, n);
    else
        sg_cast_f32_to_f16(out, in, n);
}

/* The fused state (a: p, m, v; ao: 16-bit p) against the two-pass one (b,
 * bo): how many of the four arrays differ. */
static size_t lowp_differ(float *const *a, const uint16_t *ao, float *const *b, const uint16_t *bo,
                          size_t n)
{
    size_t differ = memcmp(ao, bo, n * sizeof(uint16_t)) != 0;
    for (int j = 0; j < 3; j++)
        differ += memcmp(a[j], b[j], n * sizeof(float)) != 0;
    return differ;
}

/* Elements of the bf16 output that are not sg_f32_to_bf16 of the master. */
static size_t bf16_mismatch(const uint16_t *o, const float *p, size_t n)
{
    size_t bad = 0;
    for (size_t i = 0; i < n; i++)
        bad += o[i] != sg_f32_to_bf16(p[i]);
    return bad;
}

typedef struct lowp_bufs {
    float *a[3], *b[3], *g32, *tmp;
    uint16_t *gh, *ao, *bo;
} lowp_bufs;

/* Steps 1..3 fused and two-pass from the same state, then (redo >= 0) a
 * validation of step 3 that fails: rollback, and the redo when redo = 1.
 * Returns the arrays that differ (SIZE_MAX on an error). */
static size_t lowp_run(lowp_bufs *w, const sg_adam_params *prm, float gs, sg_dtype dt, int redo)
{
    const size_t n = LOWP_N;
    rng_state = 17;
    fill_params(w->a[0], n);
    memset(w->a[1], 0, n * sizeof(float));
    memset(w->a[2], 0, n * sizeof(float));
    for (int j = 0; j < 3; j++)
        memcpy(w->b[j], w->a[j], n * sizeof(float));
    int rc = 0;
    for (int64_t t = 1; t <= 3; t++) {
        lowp_grad(w->gh, dt, w->tmp, n, prm->skip_nonfinite);
        rc |= sg_adam_step_lowp(prm, t, w->a[0], w->gh, dt, w->a[1], w->a[2], w->ao, dt, n, gs);
        to_f32(w->g32, w->gh, dt, n);
        rc |= sg_adam_step(prm, t, w->b[0], w->g32, w->b[1], w->b[2], NULL, n, gs);
        to_lowp(w->bo, w->b[0], dt, n);
    }
    if (redo >= 0) {
        float clip = 0.3f * gs;
        rc |= sg_adam_redo_lowp(prm, 3, w->a[0], w->gh, dt, w->a[1], w->a[2], w->ao, dt, n, gs,
                                clip, redo);
        rc |= sg_adam_rollback(prm, 3, w->b[0], w->g32, w->b[1], w->b[2], n, gs);
        if (redo)
            rc |= sg_adam_step(prm, 3, w->b[0], w->g32, w->b[1], w->b[2], NULL, n, clip);
        to_lowp(w->bo, w->b[0], dt, n);
    }
    return rc ? SIZE_MAX : lowp_differ(w->a, w->ao, w->b, w->bo, n);
}

static void test_lowp(void)
{
    const size_t n = LOWP_N;
    lowp_bufs w;
    for (int j = 0; j < 3; j++)
        w.a[j] = falloc(n), w.b[j] = falloc(n);
    w.g32 = falloc(n);
    w.tmp = falloc(n);
    w.gh = malloc(n * sizeof(uint16_t));
    w.ao = malloc(n * sizeof(uint16_t));
    w.bo = malloc(n * sizeof(uint16_t));
    if (!w.gh || !w.ao || !w.bo)
        abort();
    static const sg_dtype DT[] = {SG_BF16, SG_F16};
    for (int c = -3; c < NOCASES; c++) {
        for (int k = 0; k < NISAS; k++) {
            /* 2 dtypes x (steps, rollback, redo) + the bf16 rounding */
            if (isa_missing(ISAS[k], 7))
                continue;
            const char *isa = sg_adam_isa_name(ISAS[k]), *name;
            float gs;
            sg_adam_params prm = lowp_case(c, ISAS[k], &gs, &name);
            /* Lion's rollback is not exact enough to speculate with, and
             * the trainer never does (adam.h): its redo is still checked */
            for (int d = 0; d < 2; d++) {
                const char *dn = sg_dtype_name(DT[d]);
                size_t differ = lowp_run(&w, &prm, gs, DT[d], -1);
                ok(differ == 0,
                   "lowp %s [%s] %s: 3 fused steps equal cast, step, cast bit for "
                   "bit (%zu arrays differ)",
                   name, isa, dn, differ);
                for (int redo = 0; redo <= 1; redo++) {
                    differ = lowp_run(&w, &prm, gs, DT[d], redo);
                    ok(differ == 0,
                       "lowp %s [%s] %s: fused %s equals the two-pass one and "
                       "rewrites the 16-bit parameters (%zu arrays differ)",
                       name, isa, dn, redo ? "rollback and redo" : "rollback", differ);
                }
                if (DT[d] == SG_BF16) {
                    lowp_run(&w, &prm, gs, SG_BF16, 1);
                    size_t bad = bf16_mismatch(w.ao, w.a[0], n);
                    ok(bad == 0,
                       "lowp %s [%s]: the bf16 parameters are sg_f32_to_bf16 of the "
                       "master (%zu elements differ)",
                       name, isa, bad);
                }
            }
        }
    }
    sg_adam_params prm = SG_ADAM_PARAMS_DEFAULT;
    is_int(sg_adam_step_lowp(&prm, 1, w.a[0], w.gh, SG_I32, w.a[1], w.a[2], NULL, SG_BF16, 4, 1.0f),
           SG_EINVAL, "lowp: an int32 gradient is refused");
    is_int(sg_adam_step_lowp(&prm, 1, w.a[0], w.gh, SG_BF16, w.a[1], w.a[2], w.ao, SG_F32, 4, 1.0f),
           SG_EINVAL, "lowp: an fp32 parameter output is refused");
    is_int(sg_adam_redo_lowp(&prm, 1, w.a[0], NULL, SG_BF16, w.a[1], w.a[2], w.ao, SG_BF16, 4, 1.0f,
                             1.0f, 1),
           SG_EINVAL, "lowp: a missing gradient is refused");
    is_int(
        sg_adam_step_lowp(&prm, 1, w.a[0], w.gh, SG_BF16, w.a[1], w.a[2], w.ao, SG_BF16, 0, 1.0f),
        0, "lowp: zero elements is a no-op");
    for (int j = 0; j < 3; j++)
        ffree(w.a[j]), ffree(w.b[j]);
    ffree(w.g32);
    ffree(w.tmp);
    free(w.gh);
    free(w.ao);
    free(w.bo);
}

static void test_optim_parallel(void)
{
    const size_t n = 100019;
    float *p = falloc(n), *g = falloc(n), *m = falloc(n), *v = falloc(n);
    float *p2 = falloc(n), *m2 = falloc(n), *v2 = falloc(n);
    uint16_t *b1 = malloc(n * 2), *b2 = malloc(n * 2);
    for (int a = 0; a < 2; a++) {
        sg_adam_params prm = ocase_params(&OCASES[a ? 3 : 1], SG_ADAM_ISA_AUTO);
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
        ok(rc == 0 && !memcmp(p, p2, n * 4) && !memcmp(m, m2, n * 4) && !memcmp(v, v2, n * 4) &&
               !memcmp(b1, b2, n * 2),
           "%s parallel: 3 threads give bit-identical results", sg_optim_algo_name(prm.algo));
    }
    ffree(p), ffree(g), ffree(m), ffree(v), ffree(p2), ffree(m2), ffree(v2);
    free(b1), free(b2);
}

/* torch.optim.Adagrad (tests/torch_adam_ref.py --optim adagrad): lr_decay,
 * weight_decay, eps, 5 steps on the same data. torch has no Lion. */
static void test_adagrad_torch(void)
{
    const size_t n = 4099;
    const int cases[] = {2, 3, 4};
    int torch = have_torch();
    float *p0 = falloc(n), *g[NSTEPS], *p = falloc(n), *m = falloc(n), *v = falloc(n);
    float *pr = falloc(n), *mr = falloc(n), *vr = falloc(n);
    rng_state = 31337;
    fill_params(p0, n);
    for (int s = 0; s < NSTEPS; s++) {
        g[s] = falloc(n);
        fill_grad(g[s], n);
    }
    for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++) {
        const ocase *oc = &OCASES[cases[ci]];
        if (!torch) {
            tap_skip(NISAS, "torch is not installed");
            continue;
        }
        int have_ref = 0;
        char dir[] = "/tmp/sg_test_adagrad.XXXXXX";
        if (mkdtemp(dir)) {
            int wr = write_f32(dir, "p0.f32", p0, n);
            for (int s = 0; s < NSTEPS; s++) {
                char name[32];
                snprintf(name, sizeof name, "g%d.f32", s + 1);
                wr |= write_f32(dir, name, g[s], n);
            }
            char cmd[8192];
            snprintf(cmd, sizeof cmd,
                     "'%s' '%s/tests/torch_adam_ref.py' '%s' --n %zu --steps %d "
                     "--optim adagrad --lr %a --eps %a --wd %a --lr-decay %a --grad-scale %a",
                     system_python(), srcdir(), dir, n, NSTEPS, (double)oc->lr, (double)oc->eps,
                     (double)oc->wd, (double)oc->lr_decay, (double)oc->grad_scale);
            int st = wr ? -1 : system(cmd);
            if (st != -1 && WIFEXITED(st) && WEXITSTATUS(st) == 0 &&
                read_f32(dir, "p_ref.f32", pr, n) == 0 && read_f32(dir, "m_ref.f32", mr, n) == 0 &&
                read_f32(dir, "v_ref.f32", vr, n) == 0)
                have_ref = 1;
            else
                tap_diag("%s: the torch reference failed: %s", oc->name, cmd);
            remove_dir(dir);
        }
        for (int k = 0; k < NISAS; k++) {
            const char *isa = sg_adam_isa_name(ISAS[k]);
            if (isa_missing(ISAS[k], 1))
                continue;
            sg_adam_params prm = ocase_params(oc, ISAS[k]);
            memcpy(p, p0, n * 4);
            memset(m, 0, n * 4);
            memset(v, 0, n * 4);
            int rc = 0;
            for (int s = 0; s < NSTEPS; s++)
                rc |= sg_adam_step(&prm, s + 1, p, g[s], m, v, NULL, n, oc->grad_scale);
            double ep = rel_elem_floor(p, pr, n, oc->lr), ev = rel_max(v, vr, n);
            if (have_ref)
                tap_diag("%s [%s] vs torch.optim.Adagrad: p %.2f (max |dp|/(|p|+lr)), "
                         "sum %.2f (of max), 2^-24 units",
                         oc->name, isa, ep / ULP24, ev / ULP24);
            ok(have_ref && rc == 0 && ep <= 8 * ULP24 && ev <= 8 * ULP24 && !memcmp(m, mr, n * 4),
               "%s [%s]: %d steps match torch.optim.Adagrad (lr_decay, weight_decay)", oc->name,
               isa, NSTEPS);
        }
    }
    for (int s = 0; s < NSTEPS; s++)
        ffree(g[s]);
    ffree(p0), ffree(p), ffree(m), ffree(v), ffree(pr), ffree(mr), ffree(vr);
}

/* Hyper-parameters checked per rule, with the rule's name in the message;
 * the fields a rule ignores are not checked. */
static void test_optim_errors(void)
{
    float p[4] = {1, 2, 3, 4}, g[4] = {1, 1, 1, 1}, m[4] = {0}, v[4] = {0};
    sg_error err = {0};
    sg_adam_params lion = ocase_params(&OCASES[0], SG_ADAM_ISA_AUTO);
    sg_adam_params ada = ocase_params(&OCASES[2], SG_ADAM_ISA_AUTO);
    sg_adam_params b;
    static const struct {
        int lion;
        const char *field;
        float value;
        const char *msg;
    } bad[] = {
        {1, "beta1", 1.0f, "lion: beta1 1 is out of range"},
        {1, "beta1", -0.1f, "lion: beta1 -0.1 is out of range"},
        {1, "beta2", 1.0f, "lion: beta2 1 is out of range"},
        {1, "beta2", NAN, "lion: beta2 nan is out of range"},
        {1, "lr", -1e-3f, "lion: lr -0.001 is invalid"},
        {1, "lr", INFINITY, "lion: lr inf is invalid"},
        {1, "weight_decay", -0.1f, "lion: weight_decay -0.1 is invalid"},
        {0, "lr", NAN, "adagrad: lr nan is invalid"},
        {0, "eps", -1e-10f, "adagrad: eps -1e-10 is invalid"},
        {0, "weight_decay", INFINITY, "adagrad: weight_decay inf is invalid"},
        {0, "lr_decay", -0.5f, "adagrad: lr_decay -0.5 is invalid"},
        {0, "lr_decay", NAN, "adagrad: lr_decay nan is invalid"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        b = bad[i].lion ? lion : ada;
        float *f = !strcmp(bad[i].field, "beta1")      ? &b.beta1
                   : !strcmp(bad[i].field, "beta2")    ? &b.beta2
                   : !strcmp(bad[i].field, "lr")       ? &b.lr
                   : !strcmp(bad[i].field, "eps")      ? &b.eps
                   : !strcmp(bad[i].field, "lr_decay") ? &b.lr_decay
                                                       : &b.weight_decay;
        *f = bad[i].value;
        err.msg[0] = '\0';
        int rc = sg_adam_check_params(&b, &err);
        int rs = sg_adam_step(&b, 1, p, g, m, v, NULL, 4, 1.0f);
        ok(rc == SG_EINVAL && rs == SG_EINVAL && strstr(err.msg, bad[i].msg) != NULL,
           "optim errors: %s %s %g is refused, and named (\"%s\")",
           bad[i].lion ? "lion" : "adagrad", bad[i].field, (double)bad[i].value, err.msg);
    }
    ok(p[0] == 1 && m[0] == 0 && v[0] == 0, "optim errors: refused steps change nothing");

    /* unused fields are not checked: Lion's eps, Adagrad's betas */
    b = lion;
    b.eps = -1.0f;
    b.lr_decay = -1.0f;
    int r1 = sg_adam_check_params(&b, &err);
    b = ada;
    b.beta1 = 1.5f;
    b.beta2 = -1.0f;
    int r2 = sg_adam_check_params(&b, &err);
    ok(r1 == 0 && r2 == 0, "optim errors: Lion ignores eps and lr_decay, Adagrad the betas");
    /* Adam keeps its own checks, with lr_decay ignored */
    b = SG_ADAM_PARAMS_DEFAULT;
    b.lr_decay = -1.0f;
    r1 = sg_adam_check_params(&b, &err);
    b.eps = -1.0f;
    r2 = sg_adam_check_params(&b, &err);
    ok(r1 == 0 && r2 == SG_EINVAL && strstr(err.msg, "adam: eps -1 is invalid"),
       "optim errors: Adam ignores lr_decay and still checks eps (\"%s\")", err.msg);
    b = SG_ADAM_PARAMS_DEFAULT;
    b.algo = (sg_optim_algo)7;
    ok(sg_adam_check_params(&b, &err) == SG_EINVAL && strstr(err.msg, "not an update rule"),
       "optim errors: an algo outside the enum is refused (\"%s\")", err.msg);
    is_str(sg_optim_algo_name(SG_OPTIM_LION), "lion", "optim: name of Lion");

    /* buffers: Lion never needs v, Adagrad never m */
    is_int(sg_adam_step(&lion, 1, p, g, m, NULL, NULL, 4, 1.0f), 0,
           "optim errors: Lion runs without v");
    is_int(sg_adam_step(&lion, 1, p, g, NULL, v, NULL, 4, 1.0f), SG_EINVAL,
           "optim errors: Lion without m is refused");
    is_int(sg_adam_step(&ada, 1, p, g, NULL, v, NULL, 4, 1.0f), 0,
           "optim errors: Adagrad runs without m");
    is_int(sg_adam_step(&ada, 1, p, g, m, NULL, NULL, 4, 1.0f), SG_EINVAL,
           "optim errors: Adagrad without v is refused");

    /* rollback preconditions */
    b = lion;
    b.beta2 = 0.0f;
    is_int(sg_adam_rollback(&b, 1, p, g, m, v, 4, 1.0f), SG_EINVAL,
           "optim errors: Lion rollback with beta2 = 0 (m forgotten) is refused");
    b = lion;
    b.lr = 1.0f;
    b.weight_decay = 1.0f;
    is_int(sg_adam_rollback(&b, 1, p, g, m, v, 4, 1.0f), SG_EINVAL,
           "optim errors: Lion rollback with lr * wd = 1 (p decayed to 0) is refused");
    b = lion;
    b.beta1 = 0.0f;
    r1 = sg_adam_rollback(&b, 1, p, g, m, v, 4, 1.0f);
    b = ada;
    b.beta1 = 0.0f;
    b.beta2 = 0.0f;
    r2 = sg_adam_rollback(&b, 1, p, g, m, v, 4, 1.0f);
    ok(r1 == 0 && r2 == 0,
       "optim errors: Lion rollback with beta1 = 0 and Adagrad's with zero betas run");
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
    test_optim_reference();
    test_optim_rules();
    test_optim_isas_identical();
    test_optim_bf16();
    test_optim_skip();
    test_optim_rollback();
    test_redo();
    test_lowp();
    test_optim_parallel();
    test_adagrad_torch();
    test_optim_errors();
    return tap_done();
}
