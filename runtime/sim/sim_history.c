/* sim_history.c - a calibrated machine's history models, fitted per node
 * kind (sim_history.h). */
#include "runtime/sim/sim_history.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/exec/starpu_include.h"

void sg_sim_history_fit_cpu(sg_cost_fit fits[SG_OP_KIND_COUNT])
{
    memset(fits, 0, sizeof(sg_cost_fit) * SG_OP_KIND_COUNT);
    for (int k = 0; k < SG_OP_KIND_COUNT; k++) {
        struct starpu_perfmodel model;
        memset(&model, 0, sizeof model);
        if (starpu_perfmodel_load_symbol(sg_op_kind_info_of((sg_op_kind)k)->symbol, &model))
            continue;
        struct starpu_perfmodel_per_arch *pa =
            starpu_perfmodel_get_model_per_devices(&model, 0, STARPU_CPU_WORKER, 0, 1, -1);
        int n = 0;
        for (struct starpu_perfmodel_history_list *l = pa ? pa->list : NULL; l; l = l->next)
            n++;
        sg_cost_sample *smp = n ? calloc((size_t)n, sizeof *smp) : NULL;
        n = 0;
        for (struct starpu_perfmodel_history_list *l = pa ? pa->list : NULL; l && smp; l = l->next)
            if (l->entry && l->entry->nsample > 0 && isfinite(l->entry->flops))
                smp[n++] = (sg_cost_sample){l->entry->flops, (double)l->entry->size,
                                            l->entry->mean, (double)l->entry->nsample};
        if (smp && n > 0)
            sg_cost_fit_samples(smp, n, &fits[k]);
        free(smp);
        starpu_perfmodel_unload_model(&model);
    }
}

