/* moe.h - what the layer's backward codelet (unit.c) takes from the expert
 * tasks of a Qwen3-MoE layer (codelets/starpu/moe.c). */
#ifndef SG_CODELETS_STARPU_MOE_H
#define SG_CODELETS_STARPU_MOE_H

#include <stddef.h>

#include "codelets/starpu/task_ctx.h"
#include "models/model.h"
#include "models/unit_layout.h"

/* The groups' weight gradients found among a task's buffers. */
typedef struct sg_moe_grads {
    int n;
    int group[SG_MOE_MAX_GROUPS];
    const float *w[SG_MOE_MAX_GROUPS]; /* the group's experts, the unit's layout */
} sg_moe_grads;

/* From every group's backward buffer (SG_BUF_MOE_GRAD) of layer unit u:
 * dn2 (N, H) = the experts' share of d post_attention_layernorm's output,
 * summed over each token's slots in slot order, and dtopw (N, k) (both
 * WRITE); grads lists the groups' weight gradients. saved: the layer's
 * saved activations (fp32). SG_EINVAL when a group is missing. */
int sg_moe_gather_backward(const sg_task_ctx *c, void *buffers[], const sg_model *m, int u,
                           size_t N, const float *saved, float *dn2, float *dtopw,
                           sg_moe_grads *grads);

/* dparams (the unit's layout) += the groups' expert weight gradients. */
int sg_moe_add_expert_grads(const sg_model *m, int u, const sg_moe_grads *grads, float *dparams);

#endif /* SG_CODELETS_STARPU_MOE_H */
