/* cmd_calibrate.c - `stepgraph calibrate`: train here long enough for
 * StarPU to calibrate the history models of the sg_<kind> codelets, then
 * save a machine model that `simulate` and `tune` use with those models.
 * Under mpirun every rank trains (docs/ranks.md); rank 0's measurements
 * (its StarPU models, node_times.csv, its mean step) are the ones saved,
 * by rank 0 alone; the other ranks calibrate into private temporary
 * directories, removed at the end. */
#define _XOPEN_SOURCE 700
#include <errno.h>
#include <ftw.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "common/atomic_file.h"
#include "common/cleanup.h"
#include "common/host_ram.h"
#include "runtime/cli/calib_record.h"
#include "runtime/cli/cli.h"
#include "common/json_util.h"
#include "runtime/config/machine.h"
#include "runtime/dist/dist.h"
#include "runtime/sim/host_probe.h"
#include "runtime/sim/sim_platform.h"
#include "runtime/train/train.h"

static void calibrate_help(void)
{
    printf("usage: stepgraph calibrate [CONFIG] [--name NAME] [--out DIR] [--steps N]\n"
           "                           [--base MACHINE] [--replace] [run options]\n"
           "\n"
           "Trains CONFIG (default: the default job) on this machine for N steps (default\n"
           "40) with StarPU recording how long every codelet takes (its history-based\n"
           "performance models, STARPU_CALIBRATE=1), then writes DIR/NAME.json, a machine\n"
           "model that `stepgraph simulate --machine DIR/NAME.json` runs on, and beside it\n"
           "DIR/NAME.sampling, StarPU's sampling directory with those models, the\n"
           "SimGrid platform and node_times.csv (every node's mean task time on the CPU\n"
           "and on the GPU workers, with its FLOPs and bytes). A calibrated machine\n"
           "simulates the step graphs whose task sizes were run here (the same model and\n"
           "batch shape; other policies, ZeRO and offload settings reuse the same tasks),\n"
           "and with `simulate --cost fitted` other sizes, from per-device and per-kind\n"
           "fits of node_times.csv. The mean measured step time\n"
           "is saved with it, to compare with what simulate predicts, and the job (run\n"
           "options, model, sequence length, micro-batch, ranks, dtype) with the simulate\n"
           "command that works for it, which calibrate prints. The models are\n"
           "written to a staging directory that replaces DIR/NAME.sampling only when the\n"
           "run succeeds: a failed calibration leaves an earlier one as it was.\n"
           "\n"
           "Several data-parallel ranks (docs/ranks.md), CPU workers:\n"
           "  mpirun -np N stepgraph calibrate CONFIG --dp_size N --ncuda 0 [...]\n"
           "Every rank trains; rank 0 alone writes the files, from its own measurements\n"
           "(StarPU's models, node_times.csv and the mean step: rank 0's), with \"nodes\": N\n"
           "(one rank per node of the model). The collectives' times are measured ones\n"
           "(MPI between the N ranks here), so `simulate --machine DIR/NAME.json\n"
           "--dp_size N` costs them as they ran, not from the link figures. An error on\n"
           "one rank prints `stepgraph: rank R: ...` and ends every rank.\n"
           "\n"
           "  --name NAME      machine name (default: this host's name); letters, digits,\n"
           "                   '-', '_' and '.'\n"
           "  -o, --out DIR    where to write (default: machines)\n"
           "  --steps N        training steps, 1 to 100000 (default 40; StarPU wants >= 10\n"
           "                   runs of each task size); a config's warmup_steps of N or\n"
           "                   more becomes N/4, so that measured steps remain\n"
           "  --base MACHINE   machine model whose GPU figures to keep (needed when CUDA\n"
           "                   workers ran; the CPU figures are measured or read here)\n"
           "  --replace        replace DIR/NAME.json even when it was calibrated on another\n"
           "                   job (model, sequence length, micro-batch, ranks or dtype):\n"
           "                   without it, that is refused, naming the earlier job\n"
           "\n");
    static const char *const own[] = {"steps"}; /* this command has its own --steps */
    sg_cli_print_run_flags_except(own, 1);
}

/* The machine file: CPU figures of this host, GPU figures of the base. */
static cJSON *machine_json(const char *name, const sg_machine *base, const sg_train_result *res,
                           const char *config, const char *sched, int steps, int ranks)
{
    /* one core's copy rate, and every core copying at once: a step's CPU tasks
     * share the socket's bandwidth (the roofline lower bound of simulate reads it) */
    int ncores = res->workers_cpu + res->workers_cuda;
    long online = sysconf(_SC_NPROCESSORS_ONLN);
    if (online > 0 && online < ncores)
        ncores = (int)online;
    double core_bw = sg_host_copy_gbs(1), ghz = sg_host_cpu_ghz();
    double bw = ncores > 1 ? sg_host_copy_gbs(ncores) : core_bw;
    core_bw = core_bw > 0 ? core_bw : 1;
    bw = bw > core_bw ? bw : core_bw;
    double mem_gb = sg_host_ram_bytes() / 1e9;
    char host[HOST_NAME_MAX + 1] = "?", when[64], line[512];
    gethostname(host, sizeof host);
    time_t now = time(NULL);
    strftime(when, sizeof when, "%Y-%m-%d %H:%M UTC", gmtime(&now));
    cJSON *root = cJSON_CreateObject();
    cJSON_AddStringToObject(root, "name", name);
    snprintf(line, sizeof line,
             "Calibrated by stepgraph calibrate on %s (%s): %d CPU and %d CUDA "
             "workers; task times are StarPU's history models in %s.sampling.",
             host, when, res->workers_cpu, res->workers_cuda, name);
    if (ranks > 1) /* the same line, for every one of the ranks */
        snprintf(line, sizeof line,
                 "Calibrated by stepgraph calibrate on %s (%s): %d ranks "
                 "under mpirun (a node each in this model), %d CPU and %d CUDA workers per "
                 "rank; task times are rank 0's StarPU history models in %s.sampling.",
                 host, when, ranks, res->workers_cpu, res->workers_cuda, name);
    cJSON_AddStringToObject(root, "description", line);
    cJSON *src = cJSON_AddArrayToObject(root, "sources");
    cJSON_AddItemToArray(
        src, cJSON_CreateString(
                 "Task times: measured (StarPU history-based models, one per codelet sg_<kind>)."));
    if (ranks > 1) {
        snprintf(line, sizeof line,
                 "Collectives (sg_allgather, sg_reduce_scatter, "
                 "sg_allreduce, sg_grad_norm): measured on rank 0 with %d ranks over MPI on "
                 "this host, waits for the other ranks included; links.gpu_gpu_gbs is one "
                 "core's memcpy, used only where a task has no measured time.",
                 ranks);
        cJSON_AddItemToArray(src, cJSON_CreateString(line));
    }
    snprintf(line, sizeof line,
             "cpu.core_bw_gbs: one core's memcpy, measured (%.1f GB/s); "
             "cpu.memory_bw_gbs: %d cores' memcpy at once, measured (%.1f GB/s; at least one "
             "core's); cpu.ghz from /proc/cpuinfo; fp32_flops_per_cycle assumed 32 (two 8-wide "
             "FMA units). These set task priorities and the roofline lower bound here, not "
             "the task times.",
             core_bw, ncores, bw);
    cJSON_AddItemToArray(src, cJSON_CreateString(line));
    if (base) {
        snprintf(line, sizeof line, "GPU, link and efficiency figures from the %s model.",
                 base->name);
        cJSON_AddItemToArray(src, cJSON_CreateString(line));
    }
    cJSON_AddNumberToObject(root, "nodes", ranks);
    cJSON *cpu = cJSON_AddObjectToObject(root, "cpu");
    cJSON_AddNumberToObject(cpu, "cores", res->workers_cpu + res->workers_cuda);
    cJSON_AddNumberToObject(cpu, "ghz", ghz);
    cJSON_AddNumberToObject(cpu, "fp32_flops_per_cycle", 32);
    cJSON_AddNumberToObject(cpu, "memory_gb", mem_gb);
    cJSON_AddNumberToObject(cpu, "memory_bw_gbs", bw);
    cJSON_AddNumberToObject(cpu, "core_bw_gbs", core_bw);
    cJSON_AddNumberToObject(cpu, "numa_nodes", 1);
    cJSON *gpu = cJSON_AddObjectToObject(root, "gpu");
    cJSON_AddNumberToObject(gpu, "count", res->workers_cuda);
    cJSON_AddStringToObject(gpu, "name", base ? base->gpu_name : "none");
    /* unified memory: the GPU's memory is this host's one pool */
    int unified = base && base->unified_memory;
    cJSON_AddNumberToObject(gpu, "memory_gb", unified ? mem_gb : base ? base->gpu_memory_gb : 0);
    cJSON_AddNumberToObject(gpu, "memory_bw_gbs", base ? base->gpu_memory_bw_gbs : 0);
    cJSON *tf = cJSON_AddObjectToObject(gpu, "tflops");
    cJSON_AddNumberToObject(tf, "bf16", base ? base->gpu_tflops_bf16 : 0);
    cJSON_AddNumberToObject(tf, "fp16", base ? base->gpu_tflops_fp16 : 0);
    cJSON_AddNumberToObject(tf, "fp32", base ? base->gpu_tflops_fp32 : 0);
    cJSON *links = cJSON_AddObjectToObject(root, "links");
    cJSON_AddNumberToObject(links, "h2d_gbs", base ? base->h2d_gbs : core_bw);
    cJSON_AddNumberToObject(links, "d2h_gbs", base ? base->d2h_gbs : core_bw);
    cJSON_AddNumberToObject(links, "latency_us", base ? base->latency_us : 1);
    cJSON_AddNumberToObject(links, "gpu_gpu_gbs", base ? base->gpu_gpu_gbs : core_bw);
    /* the loader wants the link of several devices or ranks named */
    if (ranks > 1 && res->workers_cuda == 0)
        cJSON_AddStringToObject(links, "interconnect",
                                "MPI between processes on one host (shared memory): the "
                                "collectives' times are measured");
    else if ((long long)ranks * res->workers_cuda > 1)
        cJSON_AddStringToObject(links, "interconnect",
                                base && base->interconnect[0]
                                    ? base->interconnect
                                    : "not measured: gpu_gpu_gbs is an assumed figure");
    cJSON_AddBoolToObject(root, "unified_memory", unified);
    if (unified)
        cJSON_AddNumberToObject(root, "shared_memory_bw_gbs", base->shared_memory_bw_gbs);
    cJSON *eff = cJSON_AddObjectToObject(root, "efficiency");
    for (int k = 0; k < SG_CLASS_COUNT; k++)
        cJSON_AddNumberToObject(eff, sg_op_class_name((sg_op_class)k),
                                base ? base->efficiency[k] : 0.7);
    cJSON *cal = cJSON_AddObjectToObject(root, "calibration");
    snprintf(line, sizeof line, "%s.sampling", name);
    cJSON_AddStringToObject(cal, "sampling_dir", line);
    cJSON_AddStringToObject(cal, "hostname", name);
    cJSON_AddNumberToObject(cal, "measured_step_ms", res->mean_step_s * 1e3);
    cJSON_AddStringToObject(cal, "sched", sched);
    cJSON_AddStringToObject(cal, "config", config);
    cJSON_AddNumberToObject(cal, "steps", steps);
    return root;
}

static int write_json(const char *path, const cJSON *root, sg_error *err)
{
    char *text = cJSON_Print(root);
    if (!text)
        return sg_error_set(err, SG_ENOMEM, "out of memory");
    sg_atomic_file af;
    int rc = sg_atomic_open(&af, path, err);
    if (!rc) {
        fputs(text, af.fp);
        fputc('\n', af.fp);
        rc = sg_atomic_commit(&af, err);
    }
    free(text);
    return rc;
}

static int remove_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st, (void)flag, (void)ftw;
    return remove(path) != 0 && errno != ENOENT;
}

/* dir and everything in it; nonzero when something stayed */
static int remove_tree(const char *dir)
{
    return nftw(dir, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
}

/* Rank 0 calibrates into a staging directory beside DIR/NAME.sampling
 * (".NAME.sampling.new-XXXXXX"), renamed over it only when the run
 * succeeded: a failed or refused calibration leaves an earlier one's models
 * as they were, and a new one never mixes its samples with older ones. */
static int make_staging(const char *out, const char *name, char *dir, size_t size, sg_error *err)
{
    if ((size_t)snprintf(dir, size, "%s/.%s.sampling.new-XXXXXX", out, name) >= size)
        return sg_error_set(err, SG_EINVAL, "--out %s: path too long", out);
    if (!mkdtemp(dir))
        return sg_error_set(err, SG_EIO, "%s: cannot create it (%s)", dir, strerror(errno));
    mode_t mask = umask(0); /* mkdtemp's 0700 -> what mkdir(0777) would give */
    umask(mask);
    chmod(dir, 0777 & ~mask);
    return SG_OK;
}

/* staging becomes final; an existing final is moved aside first (rename
 * replaces only an empty directory), then removed. */
static int install_staging(const char *staging, const char *final, sg_error *err)
{
    char old[4300];
    snprintf(old, sizeof old, "%s.old", staging);
    int had = rename(final, old) == 0;
    if (!had && errno != ENOENT)
        return sg_error_set(err, SG_EIO, "%s: cannot replace it (%s)", final, strerror(errno));
    if (rename(staging, final) != 0) {
        int e = errno;
        if (had)
            rename(old, final);
        return sg_error_set(err, SG_EIO, "%s: cannot rename %s to it (%s)", final, staging,
                            strerror(e));
    }
    if (had)
        remove_tree(old);
    return SG_OK;
}

/* A rank other than 0: StarPU's models go to a private temporary directory
 * (its own perf-model files, never rank 0's), removed after the run. */
static int rank_sampling_dir(int rank, char *dir, size_t size, sg_error *err)
{
    const char *tmp = getenv("TMPDIR");
    snprintf(dir, size, "%s/stepgraph-calibrate-rank%d-XXXXXX", tmp && *tmp ? tmp : "/tmp", rank);
    if (!mkdtemp(dir))
        return sg_error_set(err, SG_EIO, "%s: cannot create it (%s)", dir, strerror(errno));
    return SG_OK;
}

/* The run calibrate trains: --steps steps (its own option, though also a
 * run option), warm-up at most a quarter of them, and SuperOffload's
 * speculative step, the one simulate models for "adaptive" (which, under
 * clipping, starts by waiting for the norm and would record no speculative
 * step). */
static int calib_steps(sg_config *cfg, const char *steps, long *nsteps, sg_error *err)
{
    char *end;
    *nsteps = strtol(steps, &end, 10);
    if (*end || *nsteps < 1 || *nsteps > 100000)
        return sg_error_set(err, SG_EINVAL, "--steps %s: expected a positive step count", steps);
    if (strcmp(cfg->run.speculation, "adaptive") == 0)
        snprintf(cfg->run.speculation, sizeof cfg->run.speculation, "%s", "always");
    cfg->run.steps = *nsteps;
    cfg->run.bench_steps = 0;
    if (cfg->run.warmup_steps >= *nsteps)
        cfg->run.warmup_steps = *nsteps / 4;
    return SG_OK;
}

/* StarPU calibrates into `sampling` under the machine's name; rank 0 also
 * records every node's task time per device there (simulate --cost
 * fitted). */
static int calib_env(sg_config *cfg, const char *sampling, const char *name, int rank,
                     sg_error *err)
{
    setenv("STARPU_PERF_MODEL_DIR", sampling, 1);
    /* StarPU also reads (and then saves back to) the models under
     * $STARPU_HOME/.starpu/sampling: a name equal to this host's would
     * find older ones there and leave the sampling directory empty */
    setenv("STARPU_HOME", sampling, 1);
    setenv("STARPU_HOSTNAME", name, 1);
    setenv("STARPU_CALIBRATE", "1", 1);
    if (rank > 0)
        cfg->node_times[0] = '\0';
    else if (strlen(sampling) + sizeof "/node_times.csv" > sizeof cfg->node_times)
        return sg_error_set(err, SG_EINVAL, "%s: path too long", sampling);
    else
        snprintf(cfg->node_times, sizeof cfg->node_times, "%.*s/node_times.csv",
                 (int)(sizeof cfg->node_times - sizeof "/node_times.csv"), sampling);
    return SG_OK;
}

static int calibrate(int argc, char **argv, const sg_dist *dist, sg_error *err)
{
    const char *name = NULL, *out = "machines", *steps = "40", *base_name = NULL;
    int replace = 0;
    sg_cli_opt opts[] = {
        {"name", NULL, &name, NULL},       {"out", "o", &out, NULL},
        {"steps", NULL, &steps, NULL},     {"base", NULL, &base_name, NULL},
        {"replace", NULL, NULL, &replace},
    };
    char host[HOST_NAME_MAX + 1] = "localhost";
    gethostname(host, sizeof host);
    sg_config *cfg = calloc(1, sizeof *cfg);
    sg_machine *base = calloc(1, sizeof *base);
    char **args = calloc((size_t)argc + 2, sizeof *args);
    char **pass = calloc((size_t)argc + 2, sizeof *pass);
    sg_calib_job *job = calloc(1, sizeof *job);
    int rc = (!cfg || !base || !args || !pass || !job)
                 ? sg_error_set(err, SG_ENOMEM, "out of memory")
                 : SG_OK;
    char dflt[4096];
    int n = 0;
    if (!rc && (argc == 0 || argv[0][0] == '-')) {
        sg_default_config_path(dflt, sizeof dflt);
        args[n++] = dflt;
    }
    for (int i = 0; i < argc && args; i++)
        args[n++] = argv[i];
    const char *config = NULL;
    int npass = 0;
    if (!rc)
        rc = sg_cli_load_config(n, args, opts, 5, cfg, err);
    if (!rc) /* the run options and --set as given, for the simulate command */
        sg_cli_split_args(n, args, opts, 5, &config, pass, &npass);
    long nsteps = 0;
    if (!rc)
        rc = calib_steps(cfg, steps, &nsteps, err);
    if (!name)
        name = host;
    if (!rc && !sg_is_simple_name(name))
        rc =
            sg_error_set(err, SG_EINVAL, "--name %s: letters, digits, '-', '_' and '.' only", name);
    char path[8300], sampling[4200], staging[4300] = "", abs_sampling[PATH_MAX] = "";
    int rank = dist->rank, own_tmp = 0, staging_slot = -1;
    if (!rc && base_name) {
        rc = sg_machine_resolve(base_name, path, sizeof path, err);
        if (!rc)
            rc = sg_machine_load(path, base, err);
    }
    /* rank 0 writes the files; the others calibrate into their own
     * temporary directory */
    if (!rc)
        rc = sg_calib_job_of(cfg, args[0], job, err);
    /* another job's calibration under this name: refused before training */
    snprintf(path, sizeof path, "%s/%s.json", out, name);
    if (!rc && rank == 0)
        rc = sg_calib_check_name(path, name, job, replace, err);
    if (!rc && rank == 0 && mkdir(out, 0777) != 0 && errno != EEXIST)
        rc = sg_error_set(err, SG_EIO, "--out %s: cannot create it (%s)", out, strerror(errno));
    snprintf(sampling, sizeof sampling, "%s/%s.sampling", out, name);
    if (!rc && rank == 0 && !(rc = make_staging(out, name, staging, sizeof staging, err)))
        staging_slot = sg_cleanup_add(staging);
    if (!rc && rank == 0 && !realpath(staging, abs_sampling))
        rc = sg_error_set(err, SG_EIO, "%s: %s", staging, strerror(errno));
    if (!rc && rank > 0 && !(rc = rank_sampling_dir(rank, abs_sampling, sizeof abs_sampling, err)))
        own_tmp = 1;
    sg_train_result res;
    if (!rc)
        rc = calib_env(cfg, abs_sampling, name, rank, err);
    if (!rc) {
        printf("calibrating %s: %ld step%s, StarPU models in %s\n", name, nsteps,
               nsteps == 1 ? "" : "s", sampling);
        rc = sg_train_ranks(cfg, dist, &res, err);
    }
    if (own_tmp && remove_tree(abs_sampling) != 0 && !rc)
        fprintf(stderr, "stepgraph: rank %d: warning: could not remove %s\n", rank, abs_sampling);
    if (staging[0]) { /* rank 0: the new models replace the old, or go */
        if (!rc)
            rc = install_staging(staging, sampling, err);
        if (rc)
            remove_tree(staging);
        sg_cleanup_forget(staging_slot);
    }
    if (rank > 0) { /* rank 0 writes the machine model */
        free(cfg);
        free(base);
        free(args);
        free(pass);
        free(job);
        return rc;
    }
    if (!rc && res.workers_cuda > 0 && !base_name)
        rc = sg_error_set(err, SG_EINVAL,
                          "CUDA workers ran: name the GPU's figures with --base "
                          "MACHINE (e.g. --base h100-pcie)");
    cJSON *root = NULL;
    char command[8192];
    snprintf(path, sizeof path, "%s/%s.json", out, name);
    if (!rc &&
        sg_calib_simulate_command(command, sizeof command, args[0], pass, npass, path, dist->size))
        rc = sg_error_set(err, SG_EINVAL, "the simulate command of this calibration is too long");
    if (!rc) {
        root = machine_json(name, base_name ? base : NULL, &res, args[0], cfg->run.sched,
                            (int)nsteps, dist->size);
        if (!root || sg_calib_record(cJSON_GetObjectItemCaseSensitive(root, "calibration"), job,
                                     pass, npass, command))
            rc = sg_error_set(err, SG_ENOMEM, "out of memory");
    }
    /* the SimGrid platform: StarPU's own when it measured one (GPU
     * machines), else the one of the model just written */
    snprintf(path, sizeof path, "%s/bus/%s.platform.v4.xml", sampling, name);
    if (!rc && access(path, R_OK) != 0) {
        snprintf(path, sizeof path, "%s/%s.json", out, name);
        rc = write_json(path, root, err);
        sg_machine m;
        if (!rc)
            rc = sg_machine_load(path, &m, err);
        if (!rc)
            rc = sg_sim_write_platform(&m, sampling, name, err);
    } else if (!rc) {
        snprintf(path, sizeof path, "%s/%s.json", out, name);
        rc = write_json(path, root, err);
    }
    if (!rc)
        printf("machine model written to %s (measured step %.2f ms%s); simulate with\n"
               "  %s\n",
               path, res.mean_step_s * 1e3, dist->size > 1 ? ", rank 0's" : "", command);
    cJSON_Delete(root);
    free(cfg);
    free(base);
    free(args);
    free(pass);
    free(job);
    return rc;
}

int sg_cmd_calibrate(int argc, char **argv)
{
    for (int i = 0; i < argc; i++)
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            calibrate_help();
            return 0;
        }
    sg_error err = {0};
    /* under mpirun: MPI first, so that any error below ends every rank */
    sg_dist dist;
    int rc = sg_dist_init(&dist, &err);
    if (!rc && dist.rank > 0 && !freopen("/dev/null", "w", stdout))
        rc = sg_error_set(&err, SG_EIO, "rank %d: cannot silence stdout", dist.rank);
    if (!rc)
        rc = calibrate(argc, argv, &dist, &err);
    if (rc)
        sg_dist_fail(&dist, rc, &err);
    sg_dist_finalize(&dist);
    return rc ? 1 : 0;
}
