/* nvme_run.h - what a run's config asks of the disk node (ZeRO-Infinity's
 * device "nvme", runtime/exec/disk_node.h): the trainer's small hooks. */
#ifndef SG_NVME_RUN_H
#define SG_NVME_RUN_H

#include <stdint.h>

#include "graph/ir.h"
#include "runtime/config/config.h"
#include "runtime/exec/disk_node.h"

/* Fills p from cfg; 0 when nothing goes to disk (p untouched). */
int sg_nvme_plan(const sg_config *cfg, sg_disk_plan *p);

/* Bytes of g that live on disk under cfg (0 without NVMe offload): the
 * host memory check leaves them out. */
int64_t sg_nvme_disk_bytes(const sg_config *cfg, const sg_graph *g);

#endif
