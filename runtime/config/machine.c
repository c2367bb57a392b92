/* machine.c - machine model files -> sg_machine -> sg_cost_model. */
#define _POSIX_C_SOURCE 200809L
#include "runtime/config/machine.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "common/json_util.h"

#ifndef SG_SRC_MACHINES_DIR
#define SG_SRC_MACHINES_DIR "configs/machines"
#endif
#ifndef SG_PKGDATADIR
#define SG_PKGDATADIR "/usr/local/share/stepgraph"
#endif

/* One numeric field of an object: required, > 0 unless allow_zero, and at
 * most hi: a plausibility bound per device or node, generous enough for
 * hardware years ahead, that catches a figure in the wrong unit (MB/s for
 * GB/s, FLOP/s for TFLOP/s) or a typo. */
typedef struct num_field {
    const char *key;
    double *out;
    int allow_zero;
    double hi;
} num_field;

/* Plausibility bounds (see num_field). */
#define SG_MAX_GHZ 10.0               /* a CPU core's clock */
#define SG_MAX_FLOPS_PER_CYCLE 1024.0 /* FP32 FLOP per core per cycle */
#define SG_MAX_MEMORY_GB 1e7          /* 10 PB: a size in bytes is far above it */
#define SG_MAX_BW_GBS 100000.0        /* 100 TB/s: any memory or link */
#define SG_MAX_CPU_BW_GBS 20000.0     /* one node's CPU memory */
#define SG_MAX_CORE_BW_GBS 1000.0     /* one core streaming alone */
#define SG_MAX_TFLOPS 100000.0        /* 100 PFLOP/s per device */
#define SG_MAX_LATENCY_US 1e6         /* one second */
#define SG_MAX_DISK_GBS 1000.0        /* a node's disks together: a figure in MB/s is far above */

static int read_fields(const sg_json_ctx *c, const cJSON *obj, const char *section,
                       const num_field *f, int nf, const char *const *extra, int nextra)
{
    char path[128];
    if (!cJSON_IsObject(obj))
        return sg_json_type_error(c, obj, section, "an object");
    for (int i = 0; i < nf; i++) {
        snprintf(path, sizeof path, "%s.%s", section, f[i].key);
        const cJSON *it = cJSON_GetObjectItemCaseSensitive(obj, f[i].key);
        if (!it)
            return sg_json_error(c, SG_EINVAL, "%s is missing", path);
        int rc = sg_json_num(c, it, path, f[i].key,
                             SG_JSON_LO | (f[i].allow_zero ? 0 : SG_JSON_LO_OPEN) |
                                 (f[i].hi > 0 ? SG_JSON_HI : 0),
                             0, f[i].hi, NULL, f[i].out);
        if (rc)
            return rc;
    }
    const cJSON *it;
    cJSON_ArrayForEach (it, obj) {
        int known = 0;
        for (int i = 0; i < nf && !known; i++)
            known = !strcmp(it->string, f[i].key);
        for (int i = 0; i < nextra && !known; i++)
            known = !strcmp(it->string, extra[i]);
        if (!known)
            return sg_json_error(c, SG_EINVAL, "%s.%s is an unknown key", section, it->string);
    }
    return SG_OK;
}

/* "calibration": written by `stepgraph calibrate`; the sampling directory is
 * relative to the machine file. */
static int parse_calibration(const sg_json_ctx *c, const cJSON *cal, sg_machine *m)
{
    if (!cal)
        return SG_OK;
    if (!cJSON_IsObject(cal))
        return sg_json_type_error(c, cal, "calibration", "an object");
    /* the job it was calibrated on (runtime/cli/calib_record.h): recorded for
     * people and for calibrate's check by name, not read here */
    static const char *const keys[] = {
        "sampling_dir", "hostname", "measured_step_ms", "sched",       "config",     "steps",
        "args",         "model",    "seq_len",          "micro_batch", "grad_accum", "dp_size",
        "dtype",        "simulate"};
    const cJSON *it;
    cJSON_ArrayForEach (it, cal) {
        int known = 0;
        for (size_t i = 0; i < sizeof keys / sizeof *keys && !known; i++)
            known = !strcmp(it->string, keys[i]);
        if (!known)
            return sg_json_error(c, SG_EINVAL, "calibration.%s is an unknown key", it->string);
    }
    int rc;
    const cJSON *dir = cJSON_GetObjectItemCaseSensitive(cal, "sampling_dir");
    const cJSON *host = cJSON_GetObjectItemCaseSensitive(cal, "hostname");
    if (!dir || !host)
        return sg_json_error(c, SG_EINVAL, "calibration: needs \"sampling_dir\" and \"hostname\"");
    char rel[sizeof m->calibration_dir];
    if ((rc = sg_json_str(c, dir, "calibration.sampling_dir", rel, sizeof rel)) ||
        (rc = sg_json_str(c, host, "calibration.hostname", m->calibration_host,
                          sizeof m->calibration_host)))
        return rc;
    if (sg_path_beside(c->origin, rel, m->calibration_dir, sizeof m->calibration_dir))
        return sg_json_error(c, SG_EINVAL, "calibration.sampling_dir: path too long");
    if (!sg_is_simple_name(m->calibration_host))
        return sg_json_error(c, SG_EINVAL,
                             "calibration.hostname \"%s\": letters, digits, "
                             "'-', '_' and '.' only",
                             m->calibration_host);
    const cJSON *ms = cJSON_GetObjectItemCaseSensitive(cal, "measured_step_ms");
    m->calibration_step_ms = 0;
    if (ms && (rc = sg_json_num(c, ms, "calibration.measured_step_ms", "measured_step_ms",
                                SG_JSON_LO | SG_JSON_LO_OPEN, 0, 0, NULL, &m->calibration_step_ms)))
        return rc;
    return SG_OK;
}

/* gpu.kernels.attention: [{"head_dim", "seq", "fwd_tflops", "bwd_tflops"}...],
 * published causal attention throughputs (sg_gpu_kernels). */
static int parse_attention(const sg_json_ctx *c, const cJSON *arr, sg_gpu_kernels *k)
{
    if (!cJSON_IsArray(arr) || cJSON_GetArraySize(arr) < 1 ||
        cJSON_GetArraySize(arr) > SG_ATTN_POINTS_MAX)
        return sg_json_error(c, SG_EINVAL,
                             "gpu.kernels.attention: expected an array of 1 to %d "
                             "points {head_dim, seq, fwd_tflops, bwd_tflops}",
                             SG_ATTN_POINTS_MAX);
    const cJSON *it;
    k->nattn = 0;
    cJSON_ArrayForEach (it, arr) {
        char sec[64];
        sg_attn_point *p = &k->attn[k->nattn];
        snprintf(sec, sizeof sec, "gpu.kernels.attention[%d]", k->nattn);
        num_field f[] = {{"head_dim", &p->head_dim, 0, 4096},
                         {"seq", &p->seq, 0, 1e8},
                         {"fwd_tflops", &p->fwd_tflops, 0, SG_MAX_TFLOPS},
                         {"bwd_tflops", &p->bwd_tflops, 0, SG_MAX_TFLOPS}};
        int rc = read_fields(c, it, sec, f, 4, NULL, 0);
        if (rc)
            return rc;
        k->nattn++;
    }
    return SG_OK;
}

/* gpu.kernels (optional): the shape-dependent GPU cost model's figures. No
 * figure may exceed the GPU's own peak: a kernel measured faster than the
 * data sheet is a unit error. Ignored (but checked for form) with gpu.count 0. */
static int parse_kernels(const sg_json_ctx *c, const cJSON *obj, sg_machine *m)
{
    sg_gpu_kernels *k = &m->kernels;
    memset(k, 0, sizeof *k);
    if (!obj)
        return SG_OK;
    double sms;
    num_field f[] = {{"gemm_tflops", &k->gemm_tflops, 0, SG_MAX_TFLOPS},
                     {"sms", &sms, 0, 100000},
                     {"hbm_gbs", &k->hbm_gbs, 0, SG_MAX_BW_GBS},
                     {"launch_us", &k->launch_us, 1, SG_MAX_LATENCY_US}};
    static const char *const extra[] = {"attention"};
    int rc = read_fields(c, obj, "gpu.kernels", f, 4, extra, 1);
    if (rc)
        return rc;
    k->sms = (int)sms;
    if (sms != k->sms)
        return sg_json_error(c, SG_EINVAL, "gpu.kernels.sms: %g is not an integer", sms);
    const cJSON *att = cJSON_GetObjectItemCaseSensitive(obj, "attention");
    if (!att)
        return sg_json_error(c, SG_EINVAL, "gpu.kernels.attention is missing");
    if ((rc = parse_attention(c, att, k)))
        return rc;
    if (m->gpu_count < 1) /* a CPU-only copy of a GPU machine: nothing runs on a GPU */
        return SG_OK;
    double peak = m->gpu_tflops_bf16 > m->gpu_tflops_fp16 ? m->gpu_tflops_bf16 : m->gpu_tflops_fp16;
    if (k->gemm_tflops > peak)
        return sg_json_error(c, SG_EINVAL,
                             "gpu.kernels.gemm_tflops %g is above the GPU's peak "
                             "(gpu.tflops %g)",
                             k->gemm_tflops, peak);
    for (int i = 0; i < k->nattn; i++)
        if (k->attn[i].fwd_tflops > peak || k->attn[i].bwd_tflops > peak)
            return sg_json_error(c, SG_EINVAL,
                                 "gpu.kernels.attention[%d]: a throughput above "
                                 "the GPU's peak (gpu.tflops %g)",
                                 i, peak);
    if (k->hbm_gbs > m->gpu_memory_bw_gbs)
        return sg_json_error(c, SG_EINVAL, "gpu.kernels.hbm_gbs %g is above gpu.memory_bw_gbs %g",
                             k->hbm_gbs, m->gpu_memory_bw_gbs);
    return SG_OK;
}

/* A unified-memory machine (MI300A): CPU and GPU allocate from one pool
 * whose bandwidth they share. The file states that bandwidth, and both
 * memory_gb figures are the one pool, so that the fit check (graph
 * --summary, simulate) counts GPU and host bytes against it once. */
static int check_unified(const sg_json_ctx *c, const cJSON *sbw, sg_machine *m)
{
    m->shared_memory_bw_gbs = 0;
    if (!m->unified_memory) {
        if (sbw)
            return sg_json_error(c, SG_EINVAL,
                                 "shared_memory_bw_gbs is given but "
                                 "unified_memory is not true: it is the bandwidth "
                                 "of the one memory CPU and GPU share");
        return SG_OK;
    }
    if (!sbw)
        return sg_json_error(c, SG_EINVAL,
                             "shared_memory_bw_gbs is missing: unified_memory is "
                             "true, so CPU and GPU share one memory and the file "
                             "must give its bandwidth (GB/s)");
    int rc = sg_json_num(c, sbw, "shared_memory_bw_gbs", "shared_memory_bw_gbs",
                         SG_JSON_LO | SG_JSON_LO_OPEN | SG_JSON_HI, 0, SG_MAX_BW_GBS, NULL,
                         &m->shared_memory_bw_gbs);
    if (rc)
        return rc;
    if (m->gpu_count < 1)
        return sg_json_error(c, SG_EINVAL, "unified_memory: true needs a GPU (gpu.count is 0)");
    if (m->gpu_memory_gb != m->cpu_memory_gb)
        return sg_json_error(c, SG_EINVAL,
                             "gpu.memory_gb %g differs from cpu.memory_gb %g: on a "
                             "unified-memory machine both are the one shared pool",
                             m->gpu_memory_gb, m->cpu_memory_gb);
    if (m->cpu_memory_bw_gbs > m->shared_memory_bw_gbs ||
        m->gpu_memory_bw_gbs > m->shared_memory_bw_gbs)
        return sg_json_error(c, SG_EINVAL,
                             "shared_memory_bw_gbs %g GB/s is below what the %s "
                             "alone draws (%s %g GB/s): the shared memory bounds both",
                             m->shared_memory_bw_gbs,
                             m->cpu_memory_bw_gbs > m->shared_memory_bw_gbs ? "CPU" : "GPU",
                             m->cpu_memory_bw_gbs > m->shared_memory_bw_gbs ? "cpu.memory_bw_gbs"
                                                                            : "gpu.memory_bw_gbs",
                             m->cpu_memory_bw_gbs > m->shared_memory_bw_gbs ? m->cpu_memory_bw_gbs
                                                                            : m->gpu_memory_bw_gbs);
    return SG_OK;
}

/* "disk" (optional): {"name", "capacity_gb", "read_gbs", "write_gbs"}, the
 * drive's sequential bandwidths in GB/s; absent, the machine has no disk
 * for ZeRO-Infinity's state (sg_machine_check_disk). */
static int parse_disk(const sg_json_ctx *c, const cJSON *obj, sg_machine *m)
{
    m->disk_capacity_gb = m->disk_read_gbs = m->disk_write_gbs = 0;
    m->disk_name[0] = '\0';
    if (!obj)
        return SG_OK;
    num_field f[] = {{"capacity_gb", &m->disk_capacity_gb, 0, SG_MAX_MEMORY_GB},
                     {"read_gbs", &m->disk_read_gbs, 0, SG_MAX_DISK_GBS},
                     {"write_gbs", &m->disk_write_gbs, 0, SG_MAX_DISK_GBS}};
    static const char *const extra[] = {"name"};
    int rc = read_fields(c, obj, "disk", f, 3, extra, 1);
    const cJSON *name = cJSON_GetObjectItemCaseSensitive(obj, "name");
    if (!rc && name)
        rc = sg_json_str(c, name, "disk.name", m->disk_name, sizeof m->disk_name);
    return rc;
}

int sg_machine_check_disk(const sg_machine *m, const char *what, sg_error *err)
{
    if (m->disk_capacity_gb > 0)
        return SG_OK;
    return sg_error_set(err, SG_EINVAL,
                        "%s: \"nvme\" needs a disk, and machine %s gives none "
                        "(its file has no \"disk\" block with capacity_gb, read_gbs and "
                        "write_gbs; docs/config-keys.md, machine files)",
                        what, m->name);
}

/* Every key of the file is one the loader reads: a misspelt figure is an
 * error, not a default. */
static int check_top_keys(const sg_json_ctx *c, const cJSON *root)
{
    static const char *const top_keys[] = {"name",
                                           "description",
                                           "sources",
                                           "nodes",
                                           "cpu",
                                           "gpu",
                                           "links",
                                           "unified_memory",
                                           "shared_memory_bw_gbs",
                                           "efficiency",
                                           "calibration",
                                           "disk"};
    const cJSON *it;
    cJSON_ArrayForEach (it, root) {
        int known = 0;
        for (size_t i = 0; i < sizeof top_keys / sizeof *top_keys && !known; i++)
            known = !strcmp(it->string, top_keys[i]);
        if (!known)
            return sg_json_error(c, SG_EINVAL, "%s is an unknown key", it->string);
    }
    return SG_OK;
}

static int parse_machine(const sg_json_ctx *c, const cJSON *root, sg_machine *m)
{
    int rc;
    if ((rc = check_top_keys(c, root)))
        return rc;
    const cJSON *name = cJSON_GetObjectItemCaseSensitive(root, "name");
    if (!name)
        return sg_json_error(c, SG_EINVAL, "name is missing");
    if ((rc = sg_json_str(c, name, "name", m->name, sizeof m->name)))
        return rc;
    if (!sg_is_simple_name(m->name)) // it names reports, files and the simulated platform
        return sg_json_error(c, SG_EINVAL, "name \"%s\": letters, digits, '-', '_' and '.' only",
                             m->name);
    const cJSON *src = cJSON_GetObjectItemCaseSensitive(root, "sources");
    if (!cJSON_IsArray(src) || cJSON_GetArraySize(src) == 0)
        return sg_json_error(c, SG_EINVAL,
                             "sources: expected a non-empty array citing where "
                             "the figures come from");
    int64_t v;
    const cJSON *nodes = cJSON_GetObjectItemCaseSensitive(root, "nodes");
    if (!nodes)
        return sg_json_error(c, SG_EINVAL, "nodes is missing");
    if ((rc = sg_json_int(c, nodes, "nodes", "nodes", SG_JSON_LO | SG_JSON_HI, 1, 4096, NULL, &v)))
        return rc;
    m->nodes = (int)v;

    double cores, numa, gpus;
    num_field cpu[] = {
        {"cores", &cores, 0, 0},
        {"ghz", &m->cpu_ghz, 0, SG_MAX_GHZ},
        {"fp32_flops_per_cycle", &m->cpu_fp32_flops_per_cycle, 0, SG_MAX_FLOPS_PER_CYCLE},
        {"memory_gb", &m->cpu_memory_gb, 0, SG_MAX_MEMORY_GB},
        {"memory_bw_gbs", &m->cpu_memory_bw_gbs, 0, SG_MAX_CPU_BW_GBS},
        {"numa_nodes", &numa, 0, 0}};
    static const char *const cpu_extra[] = {"core_bw_gbs"};
    const cJSON *cpu_obj = cJSON_GetObjectItemCaseSensitive(root, "cpu");
    if ((rc = read_fields(c, cpu_obj, "cpu", cpu, 6, cpu_extra, 1)))
        return rc;
    const cJSON *cbw = cJSON_GetObjectItemCaseSensitive(cpu_obj, "core_bw_gbs");
    m->cpu_core_bw_gbs = 0;
    if (cbw && (rc = sg_json_num(c, cbw, "cpu.core_bw_gbs", "core_bw_gbs",
                                 SG_JSON_LO | SG_JSON_LO_OPEN | SG_JSON_HI, 0, SG_MAX_CORE_BW_GBS,
                                 NULL, &m->cpu_core_bw_gbs)))
        return rc;
    if (m->cpu_core_bw_gbs > m->cpu_memory_bw_gbs)
        return sg_json_error(c, SG_EINVAL,
                             "cpu.core_bw_gbs: %g GB/s for one core is above "
                             "cpu.memory_bw_gbs %g GB/s for the whole CPU",
                             m->cpu_core_bw_gbs, m->cpu_memory_bw_gbs);
    /* range first: casting a double past INT_MAX to int is undefined */
    if (!(cores >= 1 && cores <= 1048576) || !(numa >= 1 && numa <= 4096))
        return sg_json_error(c, SG_EINVAL,
                             "cpu.cores must be in [1, 1048576] and cpu.numa_nodes "
                             "in [1, 4096]");
    m->cpu_cores = (int)cores;
    m->numa_nodes = (int)numa;
    if (cores != m->cpu_cores || numa != m->numa_nodes)
        return sg_json_error(c, SG_EINVAL, "cpu.cores and cpu.numa_nodes must be integers");

    const cJSON *gpu = cJSON_GetObjectItemCaseSensitive(root, "gpu");
    static const char *const gpu_extra[] = {"name", "tflops", "kernels"};
    /* a CPU-only machine (gpu.count 0) may give zero GPU figures */
    num_field gf[] = {{"count", &gpus, 1, 0},
                      {"memory_gb", &m->gpu_memory_gb, 1, SG_MAX_MEMORY_GB},
                      {"memory_bw_gbs", &m->gpu_memory_bw_gbs, 1, SG_MAX_BW_GBS}};
    if ((rc = read_fields(c, gpu, "gpu", gf, 3, gpu_extra, 3)))
        return rc;
    if (!(gpus >= 0 && gpus <= 4096))
        return sg_json_error(c, SG_EINVAL, "gpu.count must be in [0, 4096]");
    m->gpu_count = (int)gpus;
    if (gpus != m->gpu_count)
        return sg_json_error(c, SG_EINVAL, "gpu.count must be an integer");
    const cJSON *gname = cJSON_GetObjectItemCaseSensitive(gpu, "name");
    if (gname && (rc = sg_json_str(c, gname, "gpu.name", m->gpu_name, sizeof m->gpu_name)))
        return rc;
    num_field tf[] = {{"bf16", &m->gpu_tflops_bf16, 1, SG_MAX_TFLOPS},
                      {"fp16", &m->gpu_tflops_fp16, 1, SG_MAX_TFLOPS},
                      {"fp32", &m->gpu_tflops_fp32, 1, SG_MAX_TFLOPS}};
    if ((rc = read_fields(c, cJSON_GetObjectItemCaseSensitive(gpu, "tflops"), "gpu.tflops", tf, 3,
                          NULL, 0)))
        return rc;
    if (m->gpu_count > 0 &&
        (m->gpu_memory_gb <= 0 || m->gpu_memory_bw_gbs <= 0 || m->gpu_tflops_bf16 <= 0 ||
         m->gpu_tflops_fp16 <= 0 || m->gpu_tflops_fp32 <= 0))
        return sg_json_error(c, SG_EINVAL,
                             "gpu: memory_gb, memory_bw_gbs and every tflops "
                             "figure must be above 0 when gpu.count is %d",
                             m->gpu_count);
    if ((rc = parse_kernels(c, cJSON_GetObjectItemCaseSensitive(gpu, "kernels"), m)))
        return rc;

    num_field lf[] = {{"h2d_gbs", &m->h2d_gbs, 0, SG_MAX_BW_GBS},
                      {"d2h_gbs", &m->d2h_gbs, 0, SG_MAX_BW_GBS},
                      {"latency_us", &m->latency_us, 1, SG_MAX_LATENCY_US},
                      {"gpu_gpu_gbs", &m->gpu_gpu_gbs, 0, SG_MAX_BW_GBS}};
    static const char *const links_extra[] = {"interconnect"};
    const cJSON *links = cJSON_GetObjectItemCaseSensitive(root, "links");
    if ((rc = read_fields(c, links, "links", lf, 4, links_extra, 1)))
        return rc;
    const cJSON *ic = cJSON_GetObjectItemCaseSensitive(links, "interconnect");
    if (ic &&
        (rc = sg_json_str(c, ic, "links.interconnect", m->interconnect, sizeof m->interconnect)))
        return rc;
    /* several devices talk over a fabric the file must name, so that
     * links.gpu_gpu_gbs is a figure for a known link, not a placeholder */
    if ((long long)m->nodes * (m->gpu_count > 0 ? m->gpu_count : 1) > 1 && !m->interconnect[0])
        return sg_json_error(c, SG_EINVAL,
                             "links.interconnect is missing: a machine of %d "
                             "node%s x %d GPU%s must name the link between its "
                             "devices (links.gpu_gpu_gbs is its bandwidth)",
                             m->nodes, m->nodes == 1 ? "" : "s", m->gpu_count,
                             m->gpu_count == 1 ? "" : "s");

    const cJSON *um = cJSON_GetObjectItemCaseSensitive(root, "unified_memory");
    m->unified_memory = 0;
    if (um && (rc = sg_json_bool(c, um, "unified_memory", &m->unified_memory)))
        return rc;
    if ((rc = check_unified(c, cJSON_GetObjectItemCaseSensitive(root, "shared_memory_bw_gbs"), m)))
        return rc;

    num_field ef[SG_CLASS_COUNT];
    for (int k = 0; k < SG_CLASS_COUNT; k++)
        ef[k] = (num_field){sg_op_class_name((sg_op_class)k), &m->efficiency[k], 0, 0};
    if ((rc = read_fields(c, cJSON_GetObjectItemCaseSensitive(root, "efficiency"), "efficiency", ef,
                          SG_CLASS_COUNT, NULL, 0)))
        return rc;
    for (int k = 0; k < SG_CLASS_COUNT; k++)
        if (m->efficiency[k] > 1.0)
            return sg_json_error(c, SG_EINVAL, "efficiency.%s: %g is above 1 (a share of peak)",
                                 sg_op_class_name((sg_op_class)k), m->efficiency[k]);
    if ((rc = parse_disk(c, cJSON_GetObjectItemCaseSensitive(root, "disk"), m)))
        return rc;
    return parse_calibration(c, cJSON_GetObjectItemCaseSensitive(root, "calibration"), m);
}

int sg_machine_load(const char *path, sg_machine *out, sg_error *err)
{
    cJSON *root = NULL;
    int rc = sg_json_load_object(path, &root, err);
    sg_machine m;
    memset(&m, 0, sizeof m);
    if (!rc) {
        sg_json_ctx c = {.origin = path, .prefix = "", .warn = NULL, .err = err};
        rc = parse_machine(&c, root, &m);
    }
    if (!rc)
        *out = m;
    cJSON_Delete(root);
    return rc;
}

static const char *machines_dir(void)
{
    const char *env = getenv("STEPGRAPH_MACHINES_DIR");
    struct stat st;
    if (env && *env)
        return env;
    if (stat(SG_SRC_MACHINES_DIR, &st) == 0 && S_ISDIR(st.st_mode))
        return SG_SRC_MACHINES_DIR;
    return SG_PKGDATADIR "/machines";
}

int sg_machine_resolve(const char *name, char *out, size_t size, sg_error *err)
{
    size_t len = strlen(name);
    int is_path = strchr(name, '/') || (len > 5 && !strcmp(name + len - 5, ".json"));
    int n = is_path ? snprintf(out, size, "%s", name)
                    : snprintf(out, size, "%s/%s.json", machines_dir(), name);
    if (n < 0 || (size_t)n >= size)
        return sg_error_set(err, SG_EINVAL, "machine %s: path too long", name);
    struct stat st;
    if (stat(out, &st) != 0 || !S_ISREG(st.st_mode)) {
        char shipped[1024], hint[160] = "";
        sg_json_list_dir(machines_dir(), shipped, sizeof shipped);
        if (!is_path)
            sg_suggest_in_list(name, shipped, hint, sizeof hint);
        return sg_error_set(err, SG_ENOENT,
                            "machine %s: no file %s%s (shipped, in %s: %s; gh200 "
                            "is gh200-480gb)",
                            name, out, hint, machines_dir(), shipped);
    }
    return SG_OK;
}

double sg_machine_gpu_peak_tflops(const sg_machine *m, sg_dtype compute)
{
    if (m->gpu_count <= 0)
        return 0;
    return compute == SG_BF16  ? m->gpu_tflops_bf16
           : compute == SG_F16 ? m->gpu_tflops_fp16
                               : m->gpu_tflops_fp32;
}

void sg_machine_cost_model(const sg_machine *m, sg_dtype compute, sg_cost_model *cm)
{
    memset(cm, 0, sizeof *cm);
    cm->name = m->name;
    double tflops = compute == SG_BF16  ? m->gpu_tflops_bf16
                    : compute == SG_F16 ? m->gpu_tflops_fp16
                                        : m->gpu_tflops_fp32;
    cm->gpu_flops = tflops * 1e12;
    cm->gpu_mem_bw = m->gpu_memory_bw_gbs * 1e9;
    cm->cpu_flops = m->cpu_cores * m->cpu_ghz * 1e9 * m->cpu_fp32_flops_per_cycle;
    cm->cpu_mem_bw = m->cpu_memory_bw_gbs * 1e9;
    cm->link_bw[SG_LINK_H2D] = m->h2d_gbs * 1e9;
    cm->link_bw[SG_LINK_D2H] = m->d2h_gbs * 1e9;
    cm->link_bw[SG_LINK_NET] = m->gpu_gpu_gbs * 1e9;
    cm->link_latency = m->latency_us * 1e-6;
    for (int k = 0; k < SG_OP_KIND_COUNT; k++)
        cm->efficiency[k] = m->efficiency[sg_op_kind_class((sg_op_kind)k)];
    if (m->gpu_count == 0) {
        /* no GPU: "GPU" nodes run on one core of the CPU */
        cm->no_gpu = 1;
        cm->gpu_flops = m->cpu_ghz * 1e9 * m->cpu_fp32_flops_per_cycle;
        cm->gpu_mem_bw =
            (m->cpu_core_bw_gbs > 0 ? m->cpu_core_bw_gbs : m->cpu_memory_bw_gbs / m->cpu_cores) *
            1e9;
    }
    cm->gpu_mem_bytes = m->gpu_memory_gb * 1e9;
    cm->host_mem_bytes = m->cpu_memory_gb * 1e9;
    cm->unified_memory = m->unified_memory;
    cm->disk_read_bw = m->disk_read_gbs * 1e9;
    cm->disk_write_bw = m->disk_write_gbs * 1e9;
    cm->disk_bytes = m->disk_capacity_gb * 1e9;
}
