/* block_cuda.h - forward and backward of one graph unit on the GPU: the
 * same units, parameter layout, saved-activation layout and semantics as
 * codelets/cpu/block.h (read it first), composed from the kernels of
 * codelets/cuda/cuda_ops.h and queued on one stream.
 *
 * Differences from the CPU version:
 * - every tensor (params, embed, x, y, saved, dy, dx, dparams, dembed) is
 *   device memory stored in io->dt (f32, bf16 or f16); the math is fp32
 *   inside kernels and cuBLAS accumulates in fp32;
 * - tokens and targets are device int32; ids out of range are the caller's
 *   to refuse before (the data loader checks them against the vocabulary);
 * - loss is a device float; the head's gradient scale is dloss times
 *   *dloss_scale (a device float, the fp16 loss scale) when that is given;
 * - scratch is device memory of sg_cu_unit_scratch_bytes();
 * - calls are asynchronous (stream-ordered); errors are SG_EINVAL (sizes,
 *   missing buffers), SG_ENOTSUP (a model sg_unit_check_model refuses) or
 *   SG_EIO (a launch failed);
 * - an MoE layer (qwen3_moe, gpt_oss; codelets/cuda/moe.cu) runs its experts
 *   one after the other on their exact slot lists, whose counts it copies to
 *   the host (cuBLAS takes its sizes from there): the one place where a call
 *   waits for the stream. The saved router state (probs, sel, topw) is in dt
 *   like every saved activation (the CPU path rounds it the same way).
 *   Tested through the CPU emulator only (tests/test_cuda_block.c); the
 *   StarPU codelets do not call the MoE path yet.
 */
#ifndef SG_CODELETS_CUDA_BLOCK_H
#define SG_CODELETS_CUDA_BLOCK_H

#include <stddef.h>
#include <stdint.h>

#include "codelets/cuda/cuda_ops.h"

#ifdef __cplusplus
extern "C" {
#endif

#include "models/model.h"

typedef struct sg_cu_unit_io {
    sg_dtype dt;                    /* storage of every tensor below but tokens, loss, tables */
    const void *params;             /* the unit's flat parameters (block.h layout) */
    const void *embed;              /* tied head: the embedding table (V, H); else NULL */
    const int32_t *tokens;          /* (B*T) input ids */
    const int32_t *targets;         /* (B*T) next-token ids, < 0 ignored */
    const void *x;                  /* (B*T, H) input of a layer or of the head */
    void *y;                        /* (B*T, H) output; NULL: recompute (fill saved only) */
    float *loss;                    /* head: the mean loss (1 device float) */
    void *saved;                    /* sg_unit_saved_floats elements of dt, or NULL */
    void *scratch;                  /* sg_cu_unit_scratch_bytes */
    const float *cos_tab, *sin_tab; /* (T, head_dim/2) rotary tables, device */
    /* MoE, as sg_unit_io (codelets/cpu/block.h): the router statistics (device
     * float, sg_moe_stats_floats; NULL: no load-balancing loss); experts as
     * tasks: the forward stops after the router, the backward takes the
     * experts' d n2 (N, H, in dt) and d topw (N, k, float) from them */
    float *moe_stats;
    int moe_split;
    const void *moe_dn2;
    const float *moe_dtopw;
} sg_cu_unit_io;

/* Bytes of device scratch sg_cu_unit_forward / _backward need for `unit`
 * stored in dt (the larger of the two, saved activations included for a
 * forward with saved == NULL, plus the kernels' fp32 work areas). */
size_t sg_cu_unit_scratch_bytes(const sg_model *m, int unit, size_t B, size_t T, sg_dtype dt);

int sg_cu_unit_forward(const sg_cu *cu, const sg_model *m, int unit, size_t B, size_t T,
                       const sg_cu_unit_io *io);

/* As sg_unit_backward: dx WRITTEN, dparams and dembed ACCUMULATED. For the
 * head the gradient of the loss is dloss * (*dloss_scale when non-NULL). */
/* (an MoE layer also uses dloss and *dloss_scale: the load-balancing term) */
int sg_cu_unit_backward(const sg_cu *cu, const sg_model *m, int unit, size_t B, size_t T,
                        const sg_cu_unit_io *io, const void *dy, float dloss,
                        const float *dloss_scale, void *dx, void *dparams, void *dembed);

/* ---- a MoE layer's experts as tasks (moe_group.cu) --------------------------------
 * The device side of codelets/starpu/moe.c, on the same buffers
 * (models/unit_layout.h): a group's activation buffer `act` in dt (gate, up
 * (cap, I), out (cap, H)), its gradient buffer `grad` in fp32 (dx (cap, H),
 * dtopw (cap), its experts' weight gradients), the layer's saved
 * activations and parameters in dt. Each call copies the group's slot
 * counts to the host (waits for the stream once per group). Tested through
 * the CPU emulator only (tests/test_cuda_block.c). */
typedef struct sg_cu_moe_group_io {
    sg_dtype dt;
    const void *params; /* the unit's flat parameters */
    const void *saved;  /* the layer's saved activations (router state) */
    void *act;          /* sg_moe_group_act_floats elements of dt */
    float *grad;        /* sg_moe_group_grad_floats floats (backward) */
    void *scratch;      /* sg_cu_moe_group_scratch_bytes */
} sg_cu_moe_group_io;

/* Scratch of every call below (the same for all). */
size_t sg_cu_moe_group_scratch_bytes(const sg_model *m, size_t B, size_t T, sg_dtype dt);
/* moe_expert: group g's experts on their slots: act WRITTEN. */
int sg_cu_moe_group_forward(const sg_cu *cu, const sg_model *m, int unit, int g, size_t B, size_t T,
                            const sg_cu_moe_group_io *io);
/* moe_combine: y (N, H) = h + the weighted expert outputs of every group
 * (acts[i] is group groups[i]'s buffer; all sg_moe_groups() of them). */
int sg_cu_moe_combine(const sg_cu *cu, const sg_model *m, int unit, size_t B, size_t T, sg_dtype dt,
                      void *y, const void *saved, const void *const *acts, const int *groups,
                      int ngroups, void *scratch);
/* moe_expert_bwd: group g's backward from dy (N, H, dt): grad WRITTEN. */
int sg_cu_moe_group_backward(const sg_cu *cu, const sg_model *m, int unit, int g, size_t B,
                             size_t T, const sg_cu_moe_group_io *io, const void *dy);
/* The layer's backward with experts as tasks: dn2 (N, H, dt) and dtopw (N k,
 * float) WRITTEN from every group's gradient buffer (io->moe_dn2,
 * io->moe_dtopw of sg_cu_unit_backward); then the experts' weight gradients
 * ACCUMULATED into the unit's dparams (dt). */
int sg_cu_moe_gather_backward(const sg_cu *cu, const sg_model *m, int unit, size_t B, size_t T,
                              sg_dtype dt, const void *saved, const float *const *grads,
                              const int *groups, int ngroups, void *dn2, float *dtopw,
                              void *scratch);
int sg_cu_moe_add_expert_grads(const sg_cu *cu, const sg_model *m, int unit, sg_dtype dt,
                               const float *const *grads, const int *groups, int ngroups, size_t B,
                               size_t T, void *dparams, void *scratch);

#ifdef __cplusplus
}
#endif

#endif /* SG_CODELETS_CUDA_BLOCK_H */
