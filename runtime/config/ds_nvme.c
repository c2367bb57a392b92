/* ds_nvme.c - ZeRO-Infinity's keys (ds_nvme.h). */
#define _POSIX_C_SOURCE 200809L

#include "runtime/config/ds_nvme.h"

#include <errno.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/json_util.h"

#define OPT "zero_optimization.offload_optimizer"
#define PAR "zero_optimization.offload_param"

int sg_ds_nvme_check(const sg_json_ctx *c, const sg_ds_config *ds)
{
    int opt = ds->zero.offload_optimizer.device == SG_OFFLOAD_NVME;
    int par = ds->zero.offload_param.device == SG_OFFLOAD_NVME;
    if (opt && !ds->zero.offload_optimizer.nvme_path[0])
        return sg_json_error(c, SG_EINVAL,
                             "%s.device: \"nvme\" needs %s.nvme_path (the "
                             "directory the optimizer state lives in)",
                             OPT, OPT);
    if (par && ds->zero.stage == 3 && !ds->zero.offload_param.nvme_path[0])
        return sg_json_error(c, SG_EINVAL,
                             "%s.device: \"nvme\" needs %s.nvme_path (the "
                             "directory the parameters live in)",
                             PAR, PAR);
    if (opt && ds->zero.offload_optimizer.super_offload)
        return sg_json_error(c, SG_ENOTSUP,
                             "%s.super_offload: true with %s.device \"nvme\" is "
                             "not supported (SuperOffload keeps the optimizer state in RAM; use "
                             "device \"cpu\")",
                             OPT, OPT);
    if (opt && par && ds->zero.stage == 3 &&
        strcmp(ds->zero.offload_optimizer.nvme_path, ds->zero.offload_param.nvme_path) != 0)
        return sg_json_error(c, SG_ENOTSUP,
                             "%s.nvme_path \"%s\" and %s.nvme_path \"%s\" differ: "
                             "stepgraph registers one StarPU disk node (give both the same "
                             "directory)",
                             OPT, ds->zero.offload_optimizer.nvme_path, PAR,
                             ds->zero.offload_param.nvme_path);
    return SG_OK;
}

int sg_ds_nvme_used(const sg_ds_config *ds, const char **dir, const char **key)
{
    if (ds->zero.offload_optimizer.device == SG_OFFLOAD_NVME) {
        *dir = ds->zero.offload_optimizer.nvme_path;
        *key = OPT ".nvme_path";
        return 1;
    }
    if (ds->zero.stage == 3 && ds->zero.offload_param.device == SG_OFFLOAD_NVME) {
        *dir = ds->zero.offload_param.nvme_path;
        *key = PAR ".nvme_path";
        return 1;
    }
    return 0;
}

int sg_nvme_check_dir(const char *dir, const char *key, sg_error *err)
{
    struct stat st;
    if (stat(dir, &st) != 0)
        return sg_error_set(err, SG_EINVAL, "%s: \"%s\": %s (it must be an existing directory)",
                            key, dir, strerror(errno));
    if (!S_ISDIR(st.st_mode))
        return sg_error_set(err, SG_EINVAL, "%s: \"%s\" is not a directory", key, dir);
    if (access(dir, W_OK | X_OK) != 0)
        return sg_error_set(err, SG_EINVAL, "%s: \"%s\" is not writable (%s)", key, dir,
                            strerror(errno));
    return SG_OK;
}
