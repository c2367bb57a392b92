/* adam.c - CPU Adam / AdamW step and rollback: the coefficients, the
 * variant's resolution (auto, $SG_ADAM_ISA), the checks and the entry
 * points, with a pthreads split; the scalar, AVX2+FMA, AVX-512F and NEON
 * loops are adam_variants.c's. See adam.h for the formulas. Lion and
 * Adagrad go through the same entry points (the checks, the coefficients,
 * the pthreads split) to their loops in lion_adagrad.c.
 *
 * The variant picked is resolved once per process (CPU features and
 * $SG_ADAM_ISA never change while it runs), which is the only static state
 * here.
 */

#define _POSIX_C_SOURCE 200809L
#include "codelets/cpu/adam.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "codelets/cpu/adam_loops.h"
#include "codelets/cpu/lion_adagrad.h"

typedef sg_adam_coef adam_coef;

typedef sg_optim_step_fn step_fn; /* (c, p, g, m, v, p_bf16, n) */

void sg_adam_coef_init(sg_adam_coef *c, const sg_adam_params *prm, int64_t t, float grad_scale)
{
    double lr = prm->lr, wd = prm->weight_decay;
    double b1 = prm->beta1, b2 = prm->beta2;
    double bc1 = 1.0, bc2 = 1.0;
    if (prm->bias_correction) {
        bc1 = 1.0 - pow(b1, (double)t);
        bc2 = 1.0 - pow(b2, (double)t);
    }
    c->gs = grad_scale;
    c->wd = prm->weight_decay;
    c->l2 = !prm->adamw_mode && prm->weight_decay != 0.0f;
    c->decay = prm->adamw_mode ? (float)(1.0 - lr * wd) : 1.0f;
    c->b1 = prm->beta1;
    c->omb1 = (float)(1.0 - b1);
    c->b2 = prm->beta2;
    c->omb2 = (float)(1.0 - b2);
    c->bc2s = (float)sqrt(bc2);
    c->nss = (float)(-(lr / bc1));
    c->eps = prm->eps;
    c->skip = prm->skip_nonfinite != 0;
    c->algo = prm->algo;
    c->lr = 0.0f;
    c->clr = 0.0f;
    switch (prm->algo) {
    case SG_OPTIM_ADAM: break;
    case SG_OPTIM_LION: /* decay always decoupled; no moment corrections */
        c->l2 = 0;
        c->decay = (float)(1.0 - lr * wd);
        c->bc2s = 1.0f;
        c->nss = 0.0f;
        c->lr = prm->lr;
        break;
    case SG_OPTIM_ADAGRAD: /* L2 whenever wd != 0, as torch and DeepSpeed */
        c->l2 = prm->weight_decay != 0.0f;
        c->decay = 1.0f;
        c->bc2s = 1.0f;
        c->nss = 0.0f;
        c->clr = (float)(lr / (1.0 + (double)(t - 1) * (double)prm->lr_decay));
        break;
    }
}

/* ---- dispatch -------------------------------------------------------------- */

int sg_adam_isa_parse(const char *name, sg_adam_isa *out)
{
    static const struct {
        const char *name;
        sg_adam_isa isa;
    } tab[] = {
        {"auto", SG_ADAM_ISA_AUTO},     {"scalar", SG_ADAM_ISA_SCALAR}, {"avx2", SG_ADAM_ISA_AVX2},
        {"avx512", SG_ADAM_ISA_AVX512}, {"neon", SG_ADAM_ISA_NEON},
    };
    for (size_t i = 0; name && i < sizeof tab / sizeof tab[0]; i++)
        if (strcmp(name, tab[i].name) == 0) {
            *out = tab[i].isa;
            return 0;
        }
    return SG_EINVAL;
}

static const char *isa_str(sg_adam_isa isa)
{
    switch (isa) {
    case SG_ADAM_ISA_SCALAR: return "scalar";
    case SG_ADAM_ISA_AVX2: return "avx2";
    case SG_ADAM_ISA_AVX512: return "avx512";
    case SG_ADAM_ISA_NEON: return "neon";
    default: return "auto";
    }
}

/* The resolution of SG_ADAM_ISA_AUTO, done once. */
static pthread_once_t auto_once = PTHREAD_ONCE_INIT;
static sg_adam_isa auto_isa;
static int auto_rc;
static char auto_env[64];

static void auto_resolve(void)
{
    const char *env = getenv("SG_ADAM_ISA");
    if (env && *env && strcmp(env, "auto") != 0) {
        snprintf(auto_env, sizeof auto_env, "%s", env);
        sg_adam_isa isa;
        if (sg_adam_isa_parse(env, &isa) != 0)
            auto_rc = SG_EINVAL;
        else if (!sg_adam_isa_supported(isa))
            auto_rc = SG_ENOTSUP;
        else
            auto_isa = isa;
        return;
    }
    auto_isa = sg_adam_isa_supported(SG_ADAM_ISA_AVX512) ? SG_ADAM_ISA_AVX512
               : sg_adam_isa_supported(SG_ADAM_ISA_AVX2) ? SG_ADAM_ISA_AVX2
               : sg_adam_isa_supported(SG_ADAM_ISA_NEON) ? SG_ADAM_ISA_NEON
                                                         : SG_ADAM_ISA_SCALAR;
}

int sg_adam_isa_resolve(sg_adam_isa isa, sg_adam_isa *out, sg_error *err)
{
    if (isa == SG_ADAM_ISA_AUTO) {
        pthread_once(&auto_once, auto_resolve);
        if (auto_rc == SG_EINVAL)
            return sg_error_set(err, SG_EINVAL,
                                "SG_ADAM_ISA=%s: unknown variant (expected "
                                "scalar, avx2, avx512, neon or auto)",
                                auto_env);
        if (auto_rc)
            return sg_error_set(err, auto_rc, "SG_ADAM_ISA=%s: this CPU or build lacks it",
                                auto_env);
        isa = auto_isa;
    } else if (isa < SG_ADAM_ISA_SCALAR || isa > SG_ADAM_ISA_NEON) {
        return sg_error_set(err, SG_EINVAL, "adam: isa %d is not a variant", (int)isa);
    } else if (!sg_adam_isa_supported(isa)) {
        return sg_error_set(err, SG_ENOTSUP,
                            "adam: the %s variant needs a CPU feature this "
                            "machine (or build) lacks",
                            isa_str(isa));
    }
    if (out)
        *out = isa;
    return 0;
}

const char *sg_adam_isa_name(sg_adam_isa isa)
{
    sg_adam_isa got;
    if (isa == SG_ADAM_ISA_AUTO)
        return sg_adam_isa_resolve(isa, &got, NULL) ? "invalid" : isa_str(got);
    return isa_str(isa);
}

const char *sg_optim_algo_name(sg_optim_algo algo)
{
    switch (algo) {
    case SG_OPTIM_ADAM: return "adam";
    case SG_OPTIM_LION: return "lion";
    case SG_OPTIM_ADAGRAD: return "adagrad";
    }
    return "invalid";
}

/* lr, eps, weight_decay, lr_decay: finite and >= 0; name: the optimizer. */
static int check_nonneg(const char *name, const char *field, float x, sg_error *err)
{
    if (!isfinite(x) || x < 0.0f)
        return sg_error_set(err, SG_EINVAL, "%s: %s %g is invalid (expected a finite value >= 0)",
                            name, field, (double)x);
    return 0;
}

static int check_beta(const char *name, const char *field, float x, sg_error *err)
{
    if (!(x >= 0.0f && x < 1.0f))
        return sg_error_set(err, SG_EINVAL, "%s: %s %g is out of range (expected [0, 1))", name,
                            field, (double)x);
    return 0;
}

int sg_adam_check_params(const sg_adam_params *prm, sg_error *err)
{
    if (!prm)
        return sg_error_set(err, SG_EINVAL, "adam: no parameters");
    const char *name = sg_optim_algo_name(prm->algo);
    int rc;
    switch (prm->algo) {
    case SG_OPTIM_ADAM:
        if ((rc = check_nonneg(name, "lr", prm->lr, err)) ||
            (rc = check_beta(name, "beta1", prm->beta1, err)) ||
            (rc = check_beta(name, "beta2", prm->beta2, err)) ||
            (rc = check_nonneg(name, "eps", prm->eps, err)) ||
            (rc = check_nonneg(name, "weight_decay", prm->weight_decay, err)))
            return rc;
        break;
    case SG_OPTIM_LION: /* eps, bias_correction, adamw_mode, lr_decay unused */
        if ((rc = check_nonneg(name, "lr", prm->lr, err)) ||
            (rc = check_beta(name, "beta1", prm->beta1, err)) ||
            (rc = check_beta(name, "beta2", prm->beta2, err)) ||
            (rc = check_nonneg(name, "weight_decay", prm->weight_decay, err)))
            return rc;
        break;
    case SG_OPTIM_ADAGRAD: /* the betas, bias_correction, adamw_mode unused */
        if ((rc = check_nonneg(name, "lr", prm->lr, err)) ||
            (rc = check_nonneg(name, "eps", prm->eps, err)) ||
            (rc = check_nonneg(name, "weight_decay", prm->weight_decay, err)) ||
            (rc = check_nonneg(name, "lr_decay", prm->lr_decay, err)))
            return rc;
        break;
    default:
        return sg_error_set(err, SG_EINVAL,
                            "optimizer %d is not an update rule (expected adam, lion "
                            "or adagrad)",
                            (int)prm->algo);
    }
    if (prm->isa < SG_ADAM_ISA_AUTO || prm->isa > SG_ADAM_ISA_NEON)
        return sg_error_set(err, SG_EINVAL, "%s: isa %d is not a variant", name, (int)prm->isa);
    return 0;
}

int sg_adam_check_call(const sg_adam_params *prm, int64_t t, const float *p, const void *g,
                       const float *m, const float *v, size_t n, float grad_scale, sg_adam_isa *isa)
{
    if (sg_adam_check_params(prm, NULL))
        return SG_EINVAL;
    if (t < 1 || !isfinite(grad_scale))
        return SG_EINVAL;
    /* Lion never touches v, Adagrad never m: those may be NULL */
    if (n > 0 &&
        (!p || !g || (!m && prm->algo != SG_OPTIM_ADAGRAD) || (!v && prm->algo != SG_OPTIM_LION)))
        return SG_EINVAL;
    return sg_adam_isa_resolve(prm->isa, isa, NULL);
}

int sg_adam_step(const sg_adam_params *prm, int64_t t, float *p, const float *g, float *m, float *v,
                 uint16_t *p_bf16, size_t n, float grad_scale)
{
    sg_adam_isa isa;
    int rc = sg_adam_check_call(prm, t, p, g, m, v, n, grad_scale, &isa);
    if (rc)
        return rc;
    if (n == 0)
        return 0;
    adam_coef c;
    sg_adam_coef_init(&c, prm, t, grad_scale);
    sg_adam_step_loop(prm->algo, isa)(&c, p, g, m, v, p_bf16, n);
    return 0;
}

float sg_adam_grad_multiplier(const float norm[2], double clip)
{
    double combined = 1.0 / (double)norm[1];
    if (clip > 0) {
        double f = ((double)norm[0] + 1e-6) / clip;
        if (f > 1.0)
            combined *= f;
    }
    return (float)(1.0 / combined);
}

int sg_adam_speculation_fails(const float norm[2], int overflow, double clip)
{
    return overflow || sg_adam_grad_multiplier(norm, clip) != norm[1];
}

int sg_adam_rollback_prepare(const sg_adam_params *prm, int64_t t, const float *p, const void *g,
                             const float *m, const float *v, size_t n, float grad_scale,
                             adam_coef *c, sg_adam_isa *isa)
{
    int rc = sg_adam_check_call(prm, t, p, g, m, v, n, grad_scale, isa);
    if (rc)
        return rc;
    sg_adam_coef_init(c, prm, t, grad_scale);
    /* beta = 0 forgets the old moment; a zero decay factor forgets p.
     * Lion's beta1 only weighs the direction (m is recovered through
     * beta2); Adagrad forgets nothing. */
    if (prm->algo == SG_OPTIM_ADAM &&
        (prm->beta1 == 0.0f || prm->beta2 == 0.0f || c->decay == 0.0f))
        return SG_EINVAL;
    if (prm->algo == SG_OPTIM_LION && (prm->beta2 == 0.0f || c->decay == 0.0f))
        return SG_EINVAL;
    return n == 0;
}

int sg_adam_rollback(const sg_adam_params *prm, int64_t t, float *p, const float *g, float *m,
                     float *v, size_t n, float grad_scale)
{
    sg_adam_isa isa;
    adam_coef c;
    int rc = sg_adam_rollback_prepare(prm, t, p, g, m, v, n, grad_scale, &c, &isa);
    if (rc)
        return rc < 0 ? rc : 0;
    sg_adam_rollback_loop(prm->algo, isa)(&c, p, g, m, v, n);
    return 0;
}

/* ---- pthreads split -------------------------------------------------------- */

typedef struct adam_chunk {
    step_fn fn;
    const adam_coef *c;
    float *p, *m, *v;
    const float *g;
    uint16_t *pb;
    size_t n;
} adam_chunk;

static void *chunk_run(void *arg)
{
    adam_chunk *a = arg;
    a->fn(a->c, a->p, a->g, a->m, a->v, a->pb, a->n);
    return NULL;
}

#define SG_ADAM_MAX_THREADS 256

int sg_adam_step_parallel(const sg_adam_params *prm, int64_t t, float *p, const float *g, float *m,
                          float *v, uint16_t *p_bf16, size_t n, float grad_scale, int nthreads)
{
    sg_adam_isa isa;
    int rc = sg_adam_check_call(prm, t, p, g, m, v, n, grad_scale, &isa);
    if (rc)
        return rc;
    if (nthreads < 1 || nthreads > SG_ADAM_MAX_THREADS)
        return SG_EINVAL;
    if (n == 0)
        return 0;
    adam_coef c;
    sg_adam_coef_init(&c, prm, t, grad_scale);
    step_fn fn = sg_adam_step_loop(prm->algo, isa);

    /* Chunks of whole 64-byte lines (16 floats) so threads never share one. */
    size_t per = (n + (size_t)nthreads - 1) / (size_t)nthreads;
    per = (per + 15) / 16 * 16;
    adam_chunk ch[SG_ADAM_MAX_THREADS];
    pthread_t tid[SG_ADAM_MAX_THREADS];
    int started[SG_ADAM_MAX_THREADS] = {0};
    int nch = 0;
    for (size_t off = 0; off < n; off += per, nch++) {
        size_t len = n - off < per ? n - off : per;
        ch[nch] = (adam_chunk){
            fn, &c, p + off, m + off, v + off, g + off, p_bf16 ? p_bf16 + off : NULL, len};
    }
    /* Chunk 0 runs on the calling thread; a chunk whose thread cannot be
     * created runs there too. */
    for (int i = 1; i < nch; i++)
        started[i] = pthread_create(&tid[i], NULL, chunk_run, &ch[i]) == 0;
    chunk_run(&ch[0]);
    for (int i = 1; i < nch; i++) {
        if (started[i])
            pthread_join(tid[i], NULL);
        else
            chunk_run(&ch[i]);
    }
    return 0;
}
