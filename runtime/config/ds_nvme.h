/* ds_nvme.h - ZeRO-Infinity's keys (offload_optimizer / offload_param
 * device "nvme", nvme_path, buffer_count): the checks that involve several
 * keys, and the check of the directory itself, which only a run needs (a
 * graph or a simulation of a config written for another machine does not).
 * docs/memory.md, "NVMe offload" says how a run uses them. */
#ifndef SG_DS_NVME_H
#define SG_DS_NVME_H

#include "common/error.h"
#include "runtime/config/ds_config.h"

struct sg_json_ctx;

/* SG_EINVAL or SG_ENOTSUP naming the key when device "nvme" lacks its
 * nvme_path, is combined with what does not work with it (SuperOffload), or
 * the optimizer and the parameters name two different directories. */
int sg_ds_nvme_check(const struct sg_json_ctx *c, const sg_ds_config *ds);

/* Whether the run puts optimizer state or parameters on a disk node; the
 * directory and the JSON key that named it. The parameters count only at
 * stage 3 (DeepSpeed's other stages never read offload_param). */
int sg_ds_nvme_used(const sg_ds_config *ds, const char **dir, const char **key);

/* SG_EINVAL naming key and dir unless dir is an existing directory this
 * process may create files in. */
int sg_nvme_check_dir(const char *dir, const char *key, sg_error *err);

#endif
