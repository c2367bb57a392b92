/* nvme_run.c - the run's disk node settings from its config (nvme_run.h). */
#include "runtime/train/nvme_run.h"

#include <string.h>

#include "runtime/config/ds_nvme.h"

int sg_nvme_plan(const sg_config *cfg, sg_disk_plan *p)
{
    const sg_ds_config *ds = &cfg->ds;
    const char *dir, *key;
    if (!sg_ds_nvme_used(ds, &dir, &key))
        return 0;
    memset(p, 0, sizeof *p);
    p->dir = dir;
    p->key = key;
    p->optimizer = ds->zero.offload_optimizer.device == SG_OFFLOAD_NVME;
    p->params = ds->zero.stage == 3 && ds->zero.offload_param.device == SG_OFFLOAD_NVME;
    /* DeepSpeed's pools: the optimizer's buffers, plus the parameters' */
    p->buffer_count = (p->optimizer ? ds->zero.offload_optimizer.buffer_count : 0) +
                      (p->params ? ds->zero.offload_param.buffer_count : 0);
    p->ncpus = (int)cfg->run.ncpus;
    return 1;
}

int64_t sg_nvme_disk_bytes(const sg_config *cfg, const sg_graph *g)
{
    sg_disk_plan p;
    if (!sg_nvme_plan(cfg, &p))
        return 0;
    return sg_disk_bytes(p.optimizer, p.params, g);
}
