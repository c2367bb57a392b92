/* attention_select.cu - which attention implementation runs
 * (sg_cu_attention_forward / _backward of cuda_ops.h): the environment's
 * STEPGRAPH_ATTENTION_IMPL, parsed at each call (getenv is cheap next to
 * an attention) so that the codelets need no state of their own; the run
 * checks the value once at start-up (runtime/exec/exec_cuda.c), so a bad
 * one stops the run before a task fails. docs/gpu.md, "Attention
 * implementations", says what each one is and how auto chooses.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "codelets/cuda/cuda_compat.h"
#include "codelets/cuda/attention_impl.h"

#define ATT_IMPL_ENV "STEPGRAPH_ATTENTION_IMPL"
#define ATT_SCRATCH_ENV "STEPGRAPH_ATTENTION_SCRATCH_MB"
#define ATT_SCRATCH_DEFAULT_MB 512

extern "C" const char *sg_cu_attention_impl_name(sg_cu_att_impl impl)
{
    switch (impl) {
    case SG_CU_ATT_AUTO: return "auto";
    case SG_CU_ATT_FP32: return "fp32";
    case SG_CU_ATT_CUBLAS: return "cublas";
    case SG_CU_ATT_CUDNN: return "cudnn";
    }
    return "?";
}

extern "C" int sg_cu_attention_impl_parse(const char *s, const char *what, sg_cu_att_impl *impl,
                                          sg_error *err)
{
    if (!s || !*s || !strcmp(s, "auto")) {
        *impl = SG_CU_ATT_AUTO;
        return SG_OK;
    }
    if (!strcmp(s, "fp32")) {
        *impl = SG_CU_ATT_FP32;
        return SG_OK;
    }
    if (!strcmp(s, "cublas")) {
        *impl = SG_CU_ATT_CUBLAS;
        return SG_OK;
    }
    if (!strcmp(s, "cudnn"))
        return sg_error_set(err, SG_EINVAL,
                            "%s=cudnn: cuDNN's fused attention is not built in this version "
                            "(docs/gpu.md, \"Attention implementations\"); use fp32, cublas "
                            "or auto",
                            what);
    return sg_error_set(err, SG_EINVAL, "%s=%s: expected fp32, cublas or auto", what, s);
}

extern "C" int sg_cu_attention_impl_env(sg_cu_att_impl *impl, size_t *scratch_bytes, sg_error *err)
{
    int rc = sg_cu_attention_impl_parse(getenv(ATT_IMPL_ENV), ATT_IMPL_ENV, impl, err);
    if (rc)
        return rc;
    const char *v = getenv(ATT_SCRATCH_ENV);
    unsigned long long mb = ATT_SCRATCH_DEFAULT_MB;
    if (v && *v) {
        char *end;
        errno = 0;
        mb = strtoull(v, &end, 10);
        // a bound in MiB that size_t can hold in bytes
        if (errno || *end || mb == 0 || v[0] == '-' || mb > (unsigned long long)(SIZE_MAX >> 20))
            return sg_error_set(err, SG_EINVAL, "%s=%s: expected a positive whole number of MiB",
                                ATT_SCRATCH_ENV, v);
    }
    *scratch_bytes = (size_t)mb << 20;
    return SG_OK;
}

/* The documented default (docs/gpu.md): fp32 until a GPU session has timed
 * the routes (scripts/gpu_verify.sh, stage attention_bench) and this table
 * is set from its numbers; the cuBLAS route is used on request only, since
 * no GPU has run it yet. */
extern "C" sg_cu_att_impl sg_cu_attention_impl_auto(sg_dtype dt, size_t T, size_t D)
{
    (void)dt;
    (void)T;
    (void)D;
    return SG_CU_ATT_FP32;
}

/* The implementation to run for these sizes, or SG_EINVAL (environment). */
static int att_pick(sg_dtype dt, size_t T, size_t D, sg_cu_att_impl *impl, size_t *scratch)
{
    if (sg_cu_attention_impl_env(impl, scratch, NULL))
        return SG_EINVAL;
    if (*impl == SG_CU_ATT_AUTO)
        *impl = sg_cu_attention_impl_auto(dt, T, D);
    return SG_OK;
}

extern "C" int sg_cu_attention_forward(const sg_cu *cu, void *out, void *lse, const void *q,
                                       const void *k, const void *v, sg_dtype dt, size_t B,
                                       size_t T, size_t Hq, size_t Hkv, size_t D, size_t window)
{
    sg_cu_att_impl impl;
    size_t scratch;
    if (att_pick(dt, T, D, &impl, &scratch))
        return SG_EINVAL;
    if (impl == SG_CU_ATT_CUBLAS)
        return sg_cu_attention_blas_forward(cu, 0, scratch, out, lse, q, k, v, dt, B, T, Hq, Hkv, D,
                                            window);
    return sg_cu_attention_fp32_forward(cu, out, lse, q, k, v, dt, B, T, Hq, Hkv, D, window);
}

extern "C" int sg_cu_attention_backward(const sg_cu *cu, void *dq, void *dk, void *dv,
                                        const void *dout, const void *q, const void *k,
                                        const void *v, const void *out, const void *lse,
                                        sg_dtype dt, size_t B, size_t T, size_t Hq, size_t Hkv,
                                        size_t D, size_t window, float *work)
{
    sg_cu_att_impl impl;
    size_t scratch;
    if (att_pick(dt, T, D, &impl, &scratch))
        return SG_EINVAL;
    // the same contract whichever runs: the work area is required
    if (!work && B > 0 && T > 0)
        return SG_EINVAL;
    if (impl == SG_CU_ATT_CUBLAS)
        return sg_cu_attention_blas_backward(cu, 0, scratch, dq, dk, dv, dout, q, k, v, out, lse,
                                             dt, B, T, Hq, Hkv, D, window);
    return sg_cu_attention_fp32_backward(cu, dq, dk, dv, dout, q, k, v, out, lse, dt, B, T, Hq, Hkv,
                                         D, window, work);
}
