/* moe_group.cu - a MoE layer's experts as tasks on the GPU (block_cuda.h):
 * the device counterparts of the group functions of codelets/starpu/moe.c,
 * on the same buffers (models/unit_layout.h):
 *   sg_cu_moe_group_forward    a group's experts on their slots (moe_expert)
 *   sg_cu_moe_combine          the layer's output from every group (moe_combine)
 *   sg_cu_moe_group_backward   a group's experts' backward (moe_expert_bwd)
 *   sg_cu_moe_gather_backward  d n2 and d topw from every group, for the
 *                              layer's backward (io->moe_split)
 *   sg_cu_moe_add_expert_grads the groups' expert gradients into dparams
 * Group g's slots are its experts', expert by expert, each in token order,
 * rows of its buffers in that order. The activation buffer is in the
 * compute dtype dt (gate, up (cap, I), out (cap, H)); the gradient buffer is
 * fp32 (dx (cap, H), dtopw (cap), the experts' weight gradients): the
 * kernels compute in dt, and a group's dx rows and weight gradients are
 * converted to fp32 once, at the end (exact in an f32 run). The slot counts
 * are copied to the host (cuBLAS sizes), so each call waits for its stream
 * once.
 */
#include "codelets/cuda/cuda_prologue.h"

#include "codelets/cuda/block_cuda.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <vector>

#define ALIGN 256

typedef struct gdims {
    size_t N, H, F, E, K, cap, es, HF3;
    sg_dtype dt;
} gdims;

static int gdims_of(const sg_model *m, int unit, size_t B, size_t T, sg_dtype dt, gdims *d)
{
    if (!m || m->num_experts <= 0 || unit < 1 || unit > m->num_layers || B == 0 || T == 0 ||
        (dt != SG_F32 && dt != SG_BF16 && dt != SG_F16))
        return SG_EINVAL;
    d->N = B * T;
    d->H = (size_t)m->hidden_size;
    d->F = (size_t)m->moe_intermediate_size;
    d->E = (size_t)m->num_experts;
    d->K = (size_t)m->experts_per_token;
    d->cap = sg_moe_group_cap(m, d->N);
    d->es = sg_dtype_size(dt);
    d->HF3 = sg_moe_expert_floats(m);
    d->dt = dt;
    return SG_OK;
}

/* ---- scratch ------------------------------------------------------------------ */

static size_t put(size_t *at, size_t bytes)
{
    size_t off = (*at + ALIGN - 1) / ALIGN * ALIGN;
    *at = off + bytes;
    return off;
}

/* sel, topw (N k, fp32), slots (N k), counts (E), row pointers (N k), one
 * expert's work, dx rows in dt (cap, H), one expert's gradient in dt, d n2
 * in fp32 (N, H), a dt buffer of max(N H, one expert's gradient). */
typedef struct gplan {
    size_t sel, topw, slots, counts, ptrs, ex, dxs, dw, dn2, tmp, end;
} gplan;

static gplan plan(const gdims *d)
{
    gplan p;
    size_t at = 0, NK = d->N * d->K;
    p.sel = put(&at, NK * sizeof(float));
    p.topw = put(&at, NK * sizeof(float));
    p.slots = put(&at, NK * sizeof(int32_t));
    p.counts = put(&at, d->E * sizeof(int32_t));
    p.ptrs = put(&at, NK * sizeof(void *));
    p.ex = put(&at, sg_cu_moe_expert_work_bytes(d->N, d->H, d->F, d->dt));
    p.dxs = put(&at, d->cap * d->H * d->es);
    p.dw = put(&at, d->HF3 * d->es);
    p.dn2 = put(&at, d->N * d->H * sizeof(float));
    p.tmp = put(&at, (d->N * d->H > d->HF3 ? d->N * d->H : d->HF3) * d->es);
    p.end = at;
    return p;
}

size_t sg_cu_moe_group_scratch_bytes(const sg_model *m, size_t B, size_t T, sg_dtype dt)
{
    gdims d;
    if (gdims_of(m, 1, B, T, dt, &d))
        return 0;
    return plan(&d).end;
}

static void *at_(void *base, size_t off)
{
    return (char *)base + off;
}

static const void *cat_(const void *base, size_t elems, size_t es)
{
    return (const char *)base + elems * es;
}

static void *mat_(void *base, size_t elems, size_t es)
{
    return (char *)base + elems * es;
}

/* ---- slots -------------------------------------------------------------------------- */

/* Group g's experts [*e0, *e1) and slots (rows in order), their first rows
 * first[0 .. e1 - e0] (host), sel read from saved (dt) into fp32. */
static int group_slots(const sg_cu *cu, const sg_model *m, const gdims *d, int g, const void *saved,
                       const sg_layer_saved_layout *l, void *scratch, const gplan *p, size_t *e0,
                       size_t *e1, size_t *first)
{
    if (g < 0 || g >= sg_moe_groups(m))
        return SG_EINVAL;
    const size_t ge = (size_t)sg_moe_group_experts(m);
    *e0 = (size_t)g * ge < d->E ? (size_t)g * ge : d->E; /* the last groups may be empty */
    *e1 = *e0 + ge < d->E ? *e0 + ge : d->E;
    float *sel = (float *)at_(scratch, p->sel);
    int32_t *counts = (int32_t *)at_(scratch, p->counts);
    SG_CU_TRY_OR_RETURN(
        sg_cu_cast(cu, sel, SG_F32, cat_(saved, l->sel, d->es), d->dt, d->N * d->K));
    SG_CU_TRY_OR_RETURN(sg_cu_moe_expert_slots(cu, (int32_t *)at_(scratch, p->slots), counts, sel,
                                               d->N, d->K, *e0, *e1));
    const size_t ne = *e1 - *e0;
    int32_t *h = (int32_t *)malloc((ne + 1) * sizeof *h);
    if (!h)
        return SG_ENOMEM;
    int rc = sg_cu_sync(cu) ? SG_EIO : sg_cu_to_host(h, counts, ne * sizeof *h);
    first[0] = 0;
    for (size_t i = 0; rc == 0 && i < ne; i++)
        first[i + 1] = first[i] + (size_t)h[i];
    free(h);
    if (rc == 0 && first[ne] > d->cap)
        rc = SG_EINVAL;
    return rc;
}

/* ---- forward -------------------------------------------------------------------------- */

int sg_cu_moe_group_forward(const sg_cu *cu, const sg_model *m, int unit, int g, size_t B, size_t T,
                            const sg_cu_moe_group_io *io)
{
    gdims d;
    if (!cu || !io || !io->params || !io->saved || !io->act || !io->scratch)
        return SG_EINVAL;
    SG_CU_TRY_OR_RETURN(gdims_of(m, unit, B, T, io->dt, &d));
    sg_layer_param_offsets o;
    SG_CU_TRY_OR_RETURN(sg_layer_param_offsets_get(m, unit - 1, &o));
    sg_layer_saved_layout l;
    sg_layer_saved_layout_get(m, d.N, &l);
    gplan p = plan(&d);
    size_t e0, e1;
    std::vector<size_t> first((size_t)sg_moe_group_experts(m) + 1);
    SG_CU_TRY_OR_RETURN(
        group_slots(cu, m, &d, g, io->saved, &l, io->scratch, &p, &e0, &e1, first.data()));
    const int32_t *slots = (const int32_t *)at_(io->scratch, p.slots);
    const void *n2 = cat_(io->saved, l.n2, d.es);
    void *gate = io->act, *up = mat_(io->act, d.cap * d.F, d.es);
    void *out = mat_(io->act, 2 * d.cap * d.F, d.es), *ex = at_(io->scratch, p.ex);
    for (size_t e = e0; e < e1; e++) {
        const size_t r = first[e - e0], n = first[e - e0 + 1] - r;
        void *ge = mat_(gate, r * d.F, d.es), *ue = mat_(up, r * d.F, d.es);
        void *oe = mat_(out, r * d.H, d.es);
        if (m->arch == SG_ARCH_GPT_OSS) {
            size_t off[4];
            sg_oss_expert_offsets(m, &o, e, off);
            SG_CU_TRY_OR_RETURN(sg_cu_moe_oss_expert_forward(
                cu, ge, ue, oe, n2, slots + r, NULL, n, cat_(io->params, off[0], d.es),
                cat_(io->params, off[1], d.es), cat_(io->params, off[2], d.es),
                cat_(io->params, off[3], d.es), d.dt, d.H, d.F, d.K, ex));
            continue;
        }
        const size_t s = e * o.ex_stride;
        SG_CU_TRY_OR_RETURN(sg_cu_moe_expert_forward(
            cu, ge, ue, oe, n2, slots + r, NULL, n, cat_(io->params, o.ex_wg + s, d.es),
            cat_(io->params, o.ex_wu + s, d.es), cat_(io->params, o.ex_wd + s, d.es), d.dt, d.H,
            d.F, d.K, ex));
    }
    return SG_OK;
}

int sg_cu_moe_combine(const sg_cu *cu, const sg_model *m, int unit, size_t B, size_t T, sg_dtype dt,
                      void *y, const void *saved, const void *const *acts, const int *groups,
                      int ngroups, void *scratch)
{
    gdims d;
    if (!cu || !y || !saved || !acts || !groups || !scratch)
        return SG_EINVAL;
    SG_CU_TRY_OR_RETURN(gdims_of(m, unit, B, T, dt, &d));
    if (ngroups != sg_moe_groups(m))
        return SG_EINVAL;
    sg_layer_saved_layout l;
    sg_layer_saved_layout_get(m, d.N, &l);
    gplan p = plan(&d);
    const void **ptrs = (const void **)at_(scratch, p.ptrs);
    const size_t NK = d.N * d.K;
    SG_CU_TRY_OR_RETURN(
        sg_cu_zero_async(cu, ptrs, NK * sizeof *ptrs)); /* a slot no group holds: a fault */
    size_t total = 0;
    std::vector<size_t> first((size_t)sg_moe_group_experts(m) + 1);
    for (int i = 0; i < ngroups; i++) {
        size_t e0, e1;
        if (!acts[i])
            return SG_EINVAL;
        SG_CU_TRY_OR_RETURN(
            group_slots(cu, m, &d, groups[i], saved, &l, scratch, &p, &e0, &e1, first.data()));
        const size_t n = first[e1 - e0];
        SG_CU_TRY_OR_RETURN(sg_cu_moe_slot_rows(cu, ptrs, (const int32_t *)at_(scratch, p.slots), n,
                                                cat_(acts[i], 2 * d.cap * d.F, d.es), d.H * d.es));
        total += n;
    }
    if (total != NK)
        return SG_EINVAL; /* a group is missing or given twice */
    float *topw = (float *)at_(scratch, p.topw);
    SG_CU_TRY_OR_RETURN(sg_cu_cast(cu, topw, SG_F32, cat_(saved, l.topw, d.es), d.dt, NK));
    return sg_cu_moe_combine_forward(cu, y, cat_(saved, l.h, d.es), (const void *const *)ptrs, topw,
                                     d.dt, d.N, d.H, d.K);
}

/* ---- backward ------------------------------------------------------------------------- */

int sg_cu_moe_group_backward(const sg_cu *cu, const sg_model *m, int unit, int g, size_t B,
                             size_t T, const sg_cu_moe_group_io *io, const void *dy)
{
    gdims d;
    if (!cu || !io || !io->params || !io->saved || !io->act || !io->grad || !io->scratch || !dy)
        return SG_EINVAL;
    SG_CU_TRY_OR_RETURN(gdims_of(m, unit, B, T, io->dt, &d));
    sg_layer_param_offsets o;
    SG_CU_TRY_OR_RETURN(sg_layer_param_offsets_get(m, unit - 1, &o));
    sg_layer_saved_layout l;
    sg_layer_saved_layout_get(m, d.N, &l);
    gplan p = plan(&d);
    size_t e0, e1;
    std::vector<size_t> first((size_t)sg_moe_group_experts(m) + 1);
    SG_CU_TRY_OR_RETURN(
        group_slots(cu, m, &d, g, io->saved, &l, io->scratch, &p, &e0, &e1, first.data()));
    const int32_t *slots = (const int32_t *)at_(io->scratch, p.slots);
    const void *n2 = cat_(io->saved, l.n2, d.es);
    float *topw = (float *)at_(io->scratch, p.topw);
    SG_CU_TRY_OR_RETURN(
        sg_cu_cast(cu, topw, SG_F32, cat_(io->saved, l.topw, d.es), d.dt, d.N * d.K));
    const void *gate = io->act, *up = cat_(io->act, d.cap * d.F, d.es);
    void *dxs = at_(io->scratch, p.dxs), *dw = at_(io->scratch, p.dw);
    void *ex = at_(io->scratch, p.ex);
    float *gdx = io->grad, *gdtopw = io->grad + d.cap * d.H, *gdw = gdtopw + d.cap;
    const size_t n_all = first[e1 - e0];
    if (n_all < d.cap) /* rows past the group's slots: zero, as fresh memory on the CPU */
        SG_CU_TRY_OR_RETURN(
            sg_cu_zero_async(cu, gdx + n_all * d.H, (d.cap - n_all) * d.H * sizeof(float)));
    for (size_t e = e0; e < e1; e++) {
        const size_t r = first[e - e0], n = first[e - e0 + 1] - r;
        const void *ge = cat_(gate, r * d.F, d.es), *ue = cat_(up, r * d.F, d.es);
        void *dxr = mat_(dxs, r * d.H, d.es);
        SG_CU_TRY_OR_RETURN(
            sg_cu_zero_async(cu, dw, d.HF3 * d.es)); /* this expert's gradient, fresh */
        if (m->arch == SG_ARCH_GPT_OSS) {            /* gate_up, its bias, down, its bias */
            size_t off[4];
            sg_oss_expert_offsets(m, &o, e, off);
            void *dgu = dw, *dgub = mat_(dw, 2 * d.F * d.H, d.es);
            void *ddn = mat_(dgub, 2 * d.F, d.es), *ddnb = mat_(ddn, d.F * d.H, d.es);
            SG_CU_TRY_OR_RETURN(sg_cu_moe_oss_expert_backward(
                cu, dxr, gdtopw + r, dgu, dgub, ddn, ddnb, dy, n2, ge, ue, topw, slots + r, NULL, n,
                cat_(io->params, off[0], d.es), cat_(io->params, off[2], d.es),
                cat_(io->params, off[3], d.es), d.dt, d.H, d.F, d.K, ex));
        } else {
            const size_t s = e * o.ex_stride, FH = d.F * d.H;
            SG_CU_TRY_OR_RETURN(sg_cu_moe_expert_backward(
                cu, dxr, gdtopw + r, dw, mat_(dw, FH, d.es), mat_(dw, 2 * FH, d.es), dy, n2, ge, ue,
                topw, slots + r, NULL, n, cat_(io->params, o.ex_wg + s, d.es),
                cat_(io->params, o.ex_wu + s, d.es), cat_(io->params, o.ex_wd + s, d.es), d.dt, d.H,
                d.F, d.K, ex));
        }
        SG_CU_TRY_OR_RETURN(sg_cu_cast(cu, gdw + (e - e0) * d.HF3, SG_F32, dw, d.dt, d.HF3));
    }
    if (n_all > 0)
        SG_CU_TRY_OR_RETURN(sg_cu_cast(cu, gdx, SG_F32, dxs, d.dt, n_all * d.H));
    return SG_OK;
}

int sg_cu_moe_gather_backward(const sg_cu *cu, const sg_model *m, int unit, size_t B, size_t T,
                              sg_dtype dt, const void *saved, const float *const *grads,
                              const int *groups, int ngroups, void *dn2, float *dtopw,
                              void *scratch)
{
    gdims d;
    if (!cu || !saved || !grads || !groups || !dn2 || !dtopw || !scratch)
        return SG_EINVAL;
    SG_CU_TRY_OR_RETURN(gdims_of(m, unit, B, T, dt, &d));
    if (ngroups != sg_moe_groups(m))
        return SG_EINVAL;
    sg_layer_saved_layout l;
    sg_layer_saved_layout_get(m, d.N, &l);
    gplan p = plan(&d);
    const void **ptrs = (const void **)at_(scratch, p.ptrs);
    const size_t NK = d.N * d.K;
    SG_CU_TRY_OR_RETURN(sg_cu_zero_async(cu, ptrs, NK * sizeof *ptrs));
    size_t total = 0;
    std::vector<size_t> first((size_t)sg_moe_group_experts(m) + 1);
    for (int i = 0; i < ngroups; i++) {
        size_t e0, e1;
        if (!grads[i])
            return SG_EINVAL;
        SG_CU_TRY_OR_RETURN(
            group_slots(cu, m, &d, groups[i], saved, &l, scratch, &p, &e0, &e1, first.data()));
        const size_t n = first[e1 - e0];
        const int32_t *slots = (const int32_t *)at_(scratch, p.slots);
        SG_CU_TRY_OR_RETURN(sg_cu_moe_slot_rows(cu, ptrs, slots, n, grads[i], d.H * sizeof(float)));
        SG_CU_TRY_OR_RETURN(sg_cu_moe_scatter_slots(cu, dtopw, grads[i] + d.cap * d.H, slots, n));
        total += n;
    }
    if (total != NK)
        return SG_EINVAL;
    float *dn2f = (float *)at_(scratch, p.dn2);
    SG_CU_TRY_OR_RETURN(
        sg_cu_moe_slots_sum(cu, dn2f, (const void *const *)ptrs, SG_F32, d.N, d.H, d.K));
    return sg_cu_cast(cu, dn2, d.dt, dn2f, SG_F32, d.N * d.H);
}

int sg_cu_moe_add_expert_grads(const sg_cu *cu, const sg_model *m, int unit, sg_dtype dt,
                               const float *const *grads, const int *groups, int ngroups, size_t B,
                               size_t T, void *dparams, void *scratch)
{
    gdims d;
    if (!cu || !grads || !groups || !dparams || !scratch)
        return SG_EINVAL;
    SG_CU_TRY_OR_RETURN(gdims_of(m, unit, B, T, dt, &d));
    sg_layer_param_offsets o;
    SG_CU_TRY_OR_RETURN(sg_layer_param_offsets_get(m, unit - 1, &o));
    gplan p = plan(&d);
    void *tmp = at_(scratch, p.tmp);
    const size_t ge = (size_t)sg_moe_group_experts(m);
    for (int i = 0; i < ngroups; i++) {
        if (!grads[i] || groups[i] < 0 || groups[i] >= sg_moe_groups(m))
            return SG_EINVAL;
        const size_t e0 = (size_t)groups[i] * ge < d.E ? (size_t)groups[i] * ge : d.E;
        const size_t e1 = e0 + ge < d.E ? e0 + ge : d.E;
        const float *w = grads[i] + d.cap * (d.H + 1);
        for (size_t e = e0; e < e1; e++, w += d.HF3) {
            SG_CU_TRY_OR_RETURN(
                sg_cu_cast(cu, tmp, d.dt, w, SG_F32, d.HF3)); /* this expert's, in dt */
            if (m->arch == SG_ARCH_GPT_OSS) {                 /* its four slices, scattered */
                const size_t len[4] = {2 * d.F * d.H, 2 * d.F, d.F * d.H, d.H};
                size_t off[4], at = 0;
                sg_oss_expert_offsets(m, &o, e, off);
                for (int t = 0; t < 4; t++) {
                    SG_CU_TRY_OR_RETURN(sg_cu_add_into(cu, mat_(dparams, off[t], d.es),
                                                       cat_(tmp, at, d.es), d.dt, len[t]));
                    at += len[t];
                }
                continue;
            }
            SG_CU_TRY_OR_RETURN(sg_cu_add_into(cu, mat_(dparams, o.ex_wg + e * o.ex_stride, d.es),
                                               tmp, d.dt, d.HF3));
        }
    }
    return SG_OK;
}
