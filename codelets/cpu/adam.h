/* adam.h - CPU Adam / AdamW kernel for the optimizer sub-groups (compute only,
 * no StarPU).
 *
 * One call steps a contiguous range of n parameters: fp32 master weights p,
 * fp32 gradients g, fp32 moments m (exp_avg) and v (exp_avg_sq), all (n,).
 * The formulas and their operation order follow torch.optim.AdamW / Adam
 * (1.13, single-tensor path), with DeepSpeed's CPU Adam options on top:
 *
 *   ge   = g * grad_scale                          (clipping x 1/loss_scale)
 *   Adam (L2):      ge = ge + wd * p
 *   AdamW:          p  = p * (1 - lr * wd)           (decoupled decay)
 *   m    = m * b1 + (1 - b1) * ge
 *   v    = v * b2 + (1 - b2) * ge * ge
 *   den  = sqrt(v) / sqrt(1 - b2^t) + eps           (bias_correction on)
 *   p    = p - lr / (1 - b1^t) * (m / den)
 *
 * With bias_correction off both corrections are 1. Scalar coefficients are
 * computed in double and rounded to float once per call, as torch does with
 * its Python scalars. The vector variants use FMA for the multiply-adds (as
 * torch's own vectorised kernels do), the scalar variant does not: they
 * differ by a few ulps after several steps. tests/test_adam.c states the
 * measured differences against each other and against torch.
 *
 * Runtime dispatch: AVX-512F (16 floats), AVX2+FMA (8 floats) or portable
 * scalar C, picked once per process from the CPU (cpuid) or from the
 * environment variable SG_ADAM_ISA=scalar|avx2|avx512|neon. Pointers need no
 * particular alignment and n any value. On AArch64 (Grace) the NEON variant
 * (4 floats) is the default: the same operations and fused multiply-adds as
 * the AVX ones, so it gives their bits (tests/test_adam_neon.sh, under
 * qemu-aarch64). Elsewhere only the scalar variant exists.
 *
 * The same entry points run Lion and Adagrad (sg_adam_params.algo, below;
 * codelets/cpu/lion_adagrad.c). Their variants are one C loop per rule,
 * compiled for each ISA and vectorised by the compiler, whose fused
 * multiply-adds are all explicit fmaf calls: every variant (scalar, AVX2,
 * AVX-512, NEON) and the GPU kernel give the same bits (tests/test_adam.c,
 * test_cuda_ops.c, test_adam_neon.sh). p, g, m, v and p_bf16 must not
 * overlap (they never do: five distinct buffers).
 *
 * The same steps with a bf16/fp16 gradient in and bf16/fp16 parameters out
 * in one pass (cast_placement "fused"): codelets/cpu/adam_lowp.h.
 *
 * Functions return 0 or a negative SG_E* code (common/error.h); they never
 * print or exit.
 */
#ifndef SG_CODELETS_CPU_ADAM_H
#define SG_CODELETS_CPU_ADAM_H

#include <stddef.h>
#include <stdint.h>

#include "common/dtype.h" /* sg_f32_to_bf16: the bf16 copy's rounding */
#include "common/error.h"

typedef enum sg_adam_isa {
    SG_ADAM_ISA_AUTO = 0, /* $SG_ADAM_ISA if set, else the best this CPU has */
    SG_ADAM_ISA_SCALAR,
    SG_ADAM_ISA_AVX2,   /* AVX2 + FMA, 8 floats */
    SG_ADAM_ISA_AVX512, /* AVX-512F, 16 floats */
    SG_ADAM_ISA_NEON,   /* AArch64 Advanced SIMD (Grace, any AArch64), 4 floats */
} sg_adam_isa;

/* The update rule. Lion and Adagrad are DeepSpeed's other two offloadable
 * optimizers (DeepSpeedCPULion, DeepSpeedCPUAdagrad); they take the same
 * buffers as Adam and use one of the two moments:
 *
 *   Lion (Chen et al. 2023, "Symbolic Discovery of Optimization Algorithms"),
 *   with m the first moment (exp_avg); v is neither read nor written:
 *     ge = g * grad_scale
 *     c  = b1 * m + (1 - b1) * ge
 *     p  = p * (1 - lr * wd) - lr * sign(c)       (sign(0) = 0)
 *     m  = b2 * m + (1 - b2) * ge
 *
 *   Adagrad (torch.optim.Adagrad, lr_decay as torch), with v the sum of
 *   squares (exp_avg_sq); m is neither read nor written:
 *     ge  = g * grad_scale (+ wd * p: L2, always, as torch and DeepSpeed)
 *     v   = v + ge * ge
 *     clr = lr / (1 + (t - 1) * lr_decay)
 *     p   = p - clr * ge / (sqrt(v) + eps)
 *
 * Fields a rule does not use are ignored (Lion: eps, adamw_mode,
 * bias_correction, lr_decay; Adagrad: beta1, beta2, adamw_mode,
 * bias_correction).
 *
 * Roundings (the kernels' exact operations; fmaf = one rounding):
 *   Lion:    ge = g*gs; c = fmaf(1-b1, ge, b1*m);
 *            p = fmaf(p, 1-lr*wd, -lr*sign(c)); m = fmaf(1-b2, ge, b2*m)
 *            (sign(NaN) = NaN, so a NaN gradient without skip_nonfinite
 *            reaches p as it would in torch)
 *   Adagrad: ge = fmaf(wd, p, g*gs) (ge = g*gs when wd = 0);
 *            v = fmaf(ge, ge, v); p = fmaf(-clr, ge / (sqrt(v) + eps), p)
 * 1-b1, 1-b2, 1-lr*wd and clr are computed in double and rounded to float
 * once per call (sg_adam_coef_init). Measured (tests/test_adam.c, 5 steps
 * on random data): against a double-precision evaluation of the formulas,
 * p within 2.9e-7 of |p| + lr element-wise and m, v within 1.8e-7 of their
 * largest value; Adagrad against torch.optim.Adagrad, p within 2.6e-7 and
 * the sum within 1.6e-7. */
typedef enum sg_optim_algo {
    SG_OPTIM_ADAM = 0, /* Adam / AdamW (the zero of the field: the default) */
    SG_OPTIM_LION,
    SG_OPTIM_ADAGRAD,
} sg_optim_algo;

/* "adam", "lion", "adagrad" (the names checkpoints record) */
const char *sg_optim_algo_name(sg_optim_algo algo);

typedef struct sg_adam_params {
    sg_optim_algo algo; /* SG_OPTIM_ADAM unless set */
    float lr;
    float beta1;         /* [0, 1) */
    float beta2;         /* [0, 1) */
    float eps;           /* >= 0 */
    float weight_decay;  /* >= 0 */
    int adamw_mode;      /* 1: decoupled decay (AdamW); 0: L2 added to the gradient */
    int bias_correction; /* 1 (default): divide by 1 - beta^t */
    float lr_decay;      /* Adagrad only: >= 0 (0: constant lr, torch's default) */
    /* 1: an element whose g*grad_scale is Inf/NaN is left unchanged (p, m,
     * v; its bf16 copy is still written) by both step and rollback, so
     * a speculative step on an overflowed fp16 gradient can be rolled back
     * exactly. 0 (default, torch semantics): Inf/NaN propagate into p, m, v
     * and such a step cannot be rolled back. */
    int skip_nonfinite;
    sg_adam_isa isa; /* SG_ADAM_ISA_AUTO (default) or a forced variant */
} sg_adam_params;

/* DeepSpeed's DeepSpeedCPUAdam defaults (AdamW, lr 1e-3, betas 0.9/0.999,
 * eps 1e-8, weight decay 0, bias correction on). */
#define SG_ADAM_PARAMS_DEFAULT              \
    ((sg_adam_params){.lr = 1e-3f,          \
                      .beta1 = 0.9f,        \
                      .beta2 = 0.999f,      \
                      .eps = 1e-8f,         \
                      .weight_decay = 0.0f, \
                      .adamw_mode = 1,      \
                      .bias_correction = 1, \
                      .skip_nonfinite = 0,  \
                      .isa = SG_ADAM_ISA_AUTO})

/* The per-call scalars of a step, computed in double and rounded to float
 * once (as torch does with its Python-float hyper-parameters); shared with
 * the GPU kernel (codelets/cuda/adam.cu) so both use the same values. Adam's
 * are the same whatever the fields Lion and Adagrad added. */
typedef struct sg_adam_coef {
    float gs;                 /* grad_scale */
    float wd;                 /* L2 coefficient (Adam mode, Adagrad), used when l2 != 0 */
    float decay;              /* 1 - lr*wd (AdamW mode and Lion: decoupled decay), else 1 */
    float b1, omb1, b2, omb2; /* Adam and Lion */
    float bc2s;               /* Adam: sqrt(1 - b2^t), or 1 */
    float nss;                /* Adam: -lr / (1 - b1^t): negative step size */
    float eps;                /* Adam and Adagrad */
    int l2;                   /* Adam mode with wd != 0; Adagrad with wd != 0 */
    int skip;                 /* skip_nonfinite */
    int algo;                 /* sg_optim_algo: the rule (the GPU kernel branches on it) */
    float lr;                 /* Lion: lr, the size of the signed step */
    float clr;                /* Adagrad: lr / (1 + (t - 1) * lr_decay), step t's lr */
} sg_adam_coef;

void sg_adam_coef_init(sg_adam_coef *c, const sg_adam_params *prm, int64_t t, float grad_scale);

/* Checks the hyper-parameters; on error fills err with the field and value. */
int sg_adam_check_params(const sg_adam_params *prm, sg_error *err);

/* One step t (t >= 1: the first step is 1) of prm->algo over n elements, in
 * place on p, m, v (Lion: p, m; Adagrad: p, v; the buffer a rule never
 * touches may be NULL); g is only read. p_bf16 (may be NULL) receives the
 * updated p rounded to bf16 (round to nearest even, NaN kept quiet) in the
 * same pass.
 * Single-threaded: StarPU runs one task per core and the caller tiles the
 * sub-group. Returns SG_EINVAL on bad arguments, SG_ENOTSUP when the
 * requested ISA is not available on this CPU. */
int sg_adam_step(const sg_adam_params *prm, int64_t t, float *p, const float *g, float *m, float *v,
                 uint16_t *p_bf16, size_t n, float grad_scale);

/* Undoes step t done by sg_adam_step with the same prm, g and grad_scale
 * (SuperOffload's rollback after speculation): recovers p, m and v as they
 * were before the step, up to fp32 rounding. The update is recomputed from
 * the post-step m and v (exactly the values the step used), subtracted, and
 * the decay and the moment updates are divided out:
 *
 *   p  = (p + lr/(1-b1^t) * m/den) / (1 - lr*wd)      (AdamW; L2: no division)
 *   ge = g*grad_scale (+ wd*p for L2, with the recovered p)
 *   m  = (m - (1-b1)*ge) / b1,   v = max((v - (1-b2)*ge*ge) / b2, 0)
 *
 * Accuracy (measured in tests/test_adam.c, all variants and modes): p within
 * 1.8e-7 of |p| + lr element-wise (1-2 ulps); m and v within 1.5e-7 of
 * max|m|, max|v| over the array. The error is absolute, a few ulps of the
 * post-step values: where |b*m_old| << |(1-b)*ge| subtracting the gradient
 * term cancels and that element's relative error is large (at t = 1 the
 * moments come back as ~1e-7 of their post-step size, not as exact zeros).
 * v is clamped at 0 because that cancellation can leave -tiny values. The
 * decay, the moment updates and the parameter update each round once, so
 * none is exactly invertible: a rolled-back state is close to, not
 * bit-equal to, the saved one. Needs b1 > 0, b2 > 0 and lr*wd != 1 (else
 * the old state is not recoverable: SG_EINVAL).
 * Non-finite state after a step without skip_nonfinite cannot be undone.
 *
 * Lion: m = (m - (1-b2)*ge) / b2, then c = b1*m + (1-b1)*ge from that m and
 * p = (p + lr*sign(c)) / (1 - lr*wd). Needs b2 > 0 and lr*wd != 1
 * (SG_EINVAL). Measured (tests/test_adam.c): m within 5e-8 of max|m|, p
 * within 1.2e-7 of |p| + lr element-wise (1-2 ulps), except where the
 * step's c was within rounding of 0: the recovered m moves c by an ulp and
 * the recomputed sign may differ from the step's, leaving p wrong by lr
 * (a sign against a zero) or 2*lr (opposite signs), over the decay. On
 * random data no element of 600,000 flipped; with b1*m built to cancel
 * (1-b1)*g, 0.5% did. Lion's rollback is therefore not exact enough for
 * speculation (the trainer is not to speculate with Lion).
 *
 * Adagrad: den = sqrt(v) + eps is the step's, bit for bit, from the
 * post-step v. Without weight decay ge = g*gs too, so p = p + clr*ge/den
 * repeats the step's own update (99% of p come back bit-exact, all within
 * 8.5e-8 of |p| + lr) and v = max(v - ge*ge, 0) (within 2e-7 of max v:
 * the same cancellation as Adam's where ge*ge dominates). With weight decay
 * (L2) the step's ge = g*gs + wd*p_old depends on the p being recovered,
 * but with den known the step is linear in p_old:
 *   p = p_old*(1 - wd*k) - k*g*gs,  k = clr/den
 * so p_old = (p + k*g*gs) / (1 - wd*k) (solved through ge; then ge is
 * recomputed from the recovered p as the step did, and the update repeated
 * as without L2, which shrinks the solve's error where wd*k < 1; above 1
 * the solve's p is kept). This is
 * exact arithmetic, but its condition number is 1/|1 - wd*k|: the step
 * rounded p, and where den is close to clr*wd (the sum of squares about
 * (clr*wd)^2: weight decay dominating the gradient and |p| near clr/2)
 * distinct p_old gave the same p, so no inversion can recover them. The
 * error is within 1.2e-7 of |p| + lr times max(1, 1/|1 - wd*k|)
 * element-wise (measured); on random data with grad_scale 2^-12 and wd 0.1,
 * 5% of the elements had a condition number above 2 and the worst was
 * 4.4e-4 of |p| + lr (condition 26,000). */
int sg_adam_rollback(const sg_adam_params *prm, int64_t t, float *p, const float *g, float *m,
                     float *v, size_t n, float grad_scale);

/* SuperOffload's validation when the speculative step fails: sg_adam_rollback
 * of step t taken with spec_scale, then, when redo is set, sg_adam_step of
 * step t with grad_scale (no bf16 copy), fused: block by block, so the state
 * crosses memory once instead of twice (codelets/cpu/adam_lowp.c: the fp32
 * case of sg_adam_redo_lowp). Bit-identical to the two calls one
 * after the other (tests/test_adam.c); the same errors as sg_adam_rollback,
 * and SG_EINVAL for a non-finite grad_scale with redo. */
int sg_adam_redo(const sg_adam_params *prm, int64_t t, float *p, const float *g, float *m, float *v,
                 size_t n, float spec_scale, float grad_scale, int redo);

/* The factor gradients are multiplied by before Adam, from the global norm
 * buffer norm = [norm of the unscaled gradients, 1 / loss scale]: 1 / loss
 * scale, times DeepSpeed's clipping coefficient clip / (norm + 1e-6) when
 * (norm + 1e-6) / clip exceeds 1 (clip <= 0: no clipping). The CUDA kernel
 * (codelets/cuda/adam.cu) computes the same on the device. */
float sg_adam_grad_multiplier(const float norm[2], double clip);

/* SuperOffload: whether a speculative step (taken with multiplier norm[1],
 * unscaled and unclipped) must be undone, because of an fp16 overflow or
 * because clipping changes the multiplier. The same for every sub-group of a
 * step: the validation tasks apply it, the trainer counts rollbacks with it. */
int sg_adam_speculation_fails(const float norm[2], int overflow, double clip);

/* sg_adam_step split over nthreads POSIX threads (chunks of whole cache
 * lines). For benchmarks and callers outside StarPU; the result is
 * bit-identical to sg_adam_step. */
int sg_adam_step_parallel(const sg_adam_params *prm, int64_t t, float *p, const float *g, float *m,
                          float *v, uint16_t *p_bf16, size_t n, float grad_scale, int nthreads);

/* The variant SG_ADAM_ISA_AUTO resolves to (or isa itself), after checking
 * that this CPU has it. Errors name $SG_ADAM_ISA when it is wrong. */
int sg_adam_isa_resolve(sg_adam_isa isa, sg_adam_isa *out, sg_error *err);

/* 1 if this CPU (and this build) can run the variant. */
int sg_adam_isa_supported(sg_adam_isa isa);

/* "scalar", "avx2", "avx512"; AUTO gives the name of the resolved variant
 * ("invalid" when $SG_ADAM_ISA is wrong). */
const char *sg_adam_isa_name(sg_adam_isa isa);

/* Parses "scalar", "avx2", "avx512" or "auto". */
int sg_adam_isa_parse(const char *name, sg_adam_isa *out);

#endif /* SG_CODELETS_CPU_ADAM_H */
