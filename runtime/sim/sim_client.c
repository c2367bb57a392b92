/* sim_client.c - starting stepgraph-sim children and reading their results
 * (sim_client.h). */
#define _XOPEN_SOURCE 700
#include "runtime/sim/sim_client.h"
#include "graph/disk_tier.h"
#include "runtime/sim/sim_cost.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#ifdef __linux__
#include <sys/prctl.h>
#endif
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "runtime/config/config_args.h"
#include "common/cleanup.h"
#include "common/json_util.h"
#include "runtime/config/step_spec.h"
#include "runtime/sim/sim_platform.h"

#ifndef SG_PKGLIBEXECDIR
#define SG_PKGLIBEXECDIR "/usr/local/libexec/stepgraph"
#endif

/* $STEPGRAPH_SIM, else next to this program (a build tree), else installed. */
static int sim_binary(char *out, size_t n, sg_error *err)
{
    const char *env = getenv("STEPGRAPH_SIM");
    if (env && *env) {
        snprintf(out, n, "%s", env);
        if (access(out, X_OK) != 0)
            return sg_error_set(err, SG_ENOENT, "STEPGRAPH_SIM=%s: not an executable", env);
        return SG_OK;
    }
    char self[4096];
    ssize_t len = readlink("/proc/self/exe", self, sizeof self - 1);
    if (len > 0) {
        self[len] = '\0';
        char *slash = strrchr(self, '/');
        if (slash) {
            snprintf(out, n, "%.*s/stepgraph-sim", (int)(slash - self), self);
            if (access(out, X_OK) == 0)
                return SG_OK;
        }
    }
    snprintf(out, n, "%s/stepgraph-sim", SG_PKGLIBEXECDIR);
    if (access(out, X_OK) == 0)
        return SG_OK;
    return sg_error_set(err, SG_ENOTSUP,
                        "simulation needs stepgraph-sim, which is built when configure finds "
                        "StarPU's SimGrid flavour (--with-starpu-simgrid=PREFIX; scripts/setup.sh "
                        "builds it unless given --no-simgrid); not found next to this program "
                        "nor at %s",
                        out);
}

/* The scratch directory's slot in common/cleanup.h: removed if a signal ends
 * simulate or tune (one directory per process). */
static int workdir_slot = -1;

int sg_sim_workdir_make(char *out, size_t n, sg_error *err)
{
    const char *tmp = getenv("TMPDIR");
    snprintf(out, n, "%s/stepgraph-sim.XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(out))
        return sg_error_set(err, SG_EIO, "%s: cannot create a temporary directory (%s)", out,
                            strerror(errno));
    workdir_slot = sg_cleanup_add(out);
    return SG_OK;
}

void sg_sim_workdir_remove(const char *dir)
{
    if (dir && *dir)
        sg_remove_tree(dir);
    sg_cleanup_forget(workdir_slot);
    workdir_slot = -1;
}

int sg_sim_machine_open(sg_sim_machine *sm, const char *name, const char *workdir, sg_error *err)
{
    memset(sm, 0, sizeof *sm);
    int rc = sg_machine_resolve(name, sm->path, sizeof sm->path, err);
    if (!rc)
        rc = sg_machine_load(sm->path, &sm->machine, err);
    if (rc)
        return rc;
    const sg_machine *m = &sm->machine;
    if (m->calibration_dir[0]) {
        snprintf(sm->sampling, sizeof sm->sampling, "%s", m->calibration_dir);
        snprintf(sm->host, sizeof sm->host, "%s", m->calibration_host);
        char probe[4200];
        snprintf(probe, sizeof probe, "%s/bus/%s.platform.v4.xml", sm->sampling, sm->host);
        if (access(probe, R_OK) != 0)
            return sg_error_set(err, SG_ENOENT,
                                "machine %s: calibrated, but %s is missing "
                                "(run stepgraph calibrate again)",
                                m->name, probe);
        return SG_OK;
    }
    /* a host name SimGrid accepts, unique per machine in this run */
    snprintf(sm->host, sizeof sm->host, "sg-");
    size_t k = 3;
    for (const char *p = m->name; *p && k + 1 < sizeof sm->host; p++)
        sm->host[k++] = (char)((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') ||
                                       (*p >= '0' && *p <= '9') || *p == '-'
                                   ? *p
                                   : '_');
    sm->host[k] = '\0';
    snprintf(sm->sampling, sizeof sm->sampling, "%s/%s.sampling", workdir, sm->host);
    return sg_sim_write_platform(m, sm->sampling, sm->host, err);
}

static void child_env(const sg_sim_request *rq, const char *workdir)
{
    static const char *const cleared[] = {
        "STARPU_SCHED",     "STARPU_NCPU",      "STARPU_NCPUS",          "STARPU_NCUDA",
        "STARPU_CALIBRATE", "STARPU_FXT_TRACE", "STARPU_LIMIT_CUDA_MEM", "STARPU_LIMIT_CPU_MEM"};
    for (size_t i = 0; i < sizeof cleared / sizeof *cleared; i++)
        unsetenv(cleared[i]);
    setenv("STARPU_PERF_MODEL_DIR", rq->sm->sampling, 1);
    setenv("STARPU_HOSTNAME", rq->sm->host, 1);
    setenv("STARPU_HOME", workdir, 1);
    setenv("STARPU_SILENT", "1", 1);
}

/* CONFIG, the user's arguments, then --set for each of the request's
 * assignments: what both the parent (sg_sim_prepare) and the child load. */
static int config_args(const sg_sim_request *rq, const char **argv)
{
    int n = 0;
    argv[n++] = rq->config;
    for (int i = 0; i < rq->nargs; i++)
        argv[n++] = rq->args[i];
    for (int i = 0; i < rq->nsets; i++) {
        argv[n++] = "--set";
        argv[n++] = rq->sets[i];
    }
    return n;
}

int sg_sim_start(const sg_sim_request *rq, const char *workdir, int tag, sg_sim_job *job,
                 sg_error *err)
{
    char bin[4200];
    int rc = sim_binary(bin, sizeof bin, err);
    if (rc)
        return rc;
    snprintf(job->result, sizeof job->result, "%s/result-%d.json", workdir, tag);
    snprintf(job->log, sizeof job->log, "%s/log-%d.txt", workdir, tag);
    remove(job->result);
    char steps[16];
    snprintf(steps, sizeof steps, "%d", rq->steps);
    size_t cap = (size_t)(rq->nargs + 2 * rq->nsets + 20);
    const char **argv = calloc(cap, sizeof *argv);
    if (!argv)
        return sg_error_set(err, SG_ENOMEM, "out of memory");
    argv[0] = bin;
    int n = 1 + config_args(rq, argv + 1);
    argv[n++] = "--machine";
    argv[n++] = rq->sm->path;
    argv[n++] = "--result";
    argv[n++] = job->result;
    if (rq->sched) {
        argv[n++] = "--sched";
        argv[n++] = rq->sched;
    }
    if (!rq->priorities)
        argv[n++] = "--no-priorities";
    if (rq->static_bandwidth)
        argv[n++] = "--static-bandwidth";
    if (rq->fitted_costs)
        argv[n++] = "--fitted-costs";
    char passes[16];
    snprintf(passes, sizeof passes, "%d", rq->rollback_passes);
    if (rq->rollback_passes) {
        argv[n++] = "--rollback-passes";
        argv[n++] = passes;
    }
    if (rq->eager_attention) {
        argv[n++] = "--attention";
        argv[n++] = "eager";
    }
    if (rq->steps > 0) {
        argv[n++] = "--steps";
        argv[n++] = steps;
    }
    if (rq->trace) {
        argv[n++] = "--trace";
        argv[n++] = rq->trace;
    }
    fflush(NULL);
    pid_t parent = getpid();
    pid_t pid = fork();
    if (pid < 0) {
        free(argv);
        return sg_error_set(err, SG_EIO, "cannot start stepgraph-sim (%s)", strerror(errno));
    }
    if (pid == 0) {
#ifdef __linux__
        /* the simulator ends with its stepgraph: a simulate or tune that is
         * killed (SIGTERM from timeout or a batch system) leaves no simulator
         * running on, to write the --trace after the command has failed */
        if (prctl(PR_SET_PDEATHSIG, SIGTERM) != 0 || getppid() != parent)
            _exit(127);
#else
        (void)parent;
#endif
        int fd = open(job->log, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (fd >= 0) {
            dup2(fd, 1);
            dup2(fd, 2);
            close(fd);
        }
        child_env(rq, workdir);
        execv(bin, (char *const *)argv);
        fprintf(stderr, "stepgraph-sim: cannot run %s (%s)\n", bin, strerror(errno));
        _exit(127);
    }
    free(argv);
    job->pid = pid;
    return SG_OK;
}

/* The child's own message if it printed one, else the end of its log. */
static void log_tail(const char *path, char *out, size_t n)
{
    out[0] = '\0';
    FILE *f = fopen(path, "r");
    if (!f)
        return;
    char line[1024], last[1024] = ""; /* why[] of the caller holds a line */
    while (fgets(line, sizeof line, f)) {
        line[strcspn(line, "\n")] = '\0';
        if (!strncmp(line, "stepgraph-sim: ", 15)) {
            snprintf(out, n, "%s", line + 15);
            fclose(f);
            return;
        }
        if (line[0])
            snprintf(last, sizeof last, "%s", line);
    }
    fclose(f);
    snprintf(out, n, "%s", last);
}

static double num_or_nan(const cJSON *obj, const char *key)
{
    const cJSON *it = cJSON_GetObjectItemCaseSensitive(obj, key);
    return cJSON_IsNumber(it) ? it->valuedouble : NAN;
}

static int parse_result(const char *path, sg_sim_report *rep, sg_error *err)
{
    cJSON *root = NULL;
    int rc = sg_json_load_object(path, &root, err);
    if (rc)
        return rc;
    memset(rep, 0, sizeof *rep);
    rep->step_s = num_or_nan(root, "step_s");
    rep->tflops = num_or_nan(root, "tflops");
    rep->model_tflops = num_or_nan(root, "model_tflops");
    rep->megatron_tflops = num_or_nan(root, "megatron_tflops");
    rep->mfu = num_or_nan(root, "mfu");
    rep->work_bound_s = num_or_nan(root, "work_bound_s");
    const cJSON *wb = cJSON_GetObjectItemCaseSensitive(root, "work_bound_by");
    snprintf(rep->work_bound_by, sizeof rep->work_bound_by, "%s",
             cJSON_IsString(wb) ? wb->valuestring : "?");
    rep->gpu_busy = num_or_nan(root, "gpu_busy");
    rep->adam_cpu_s = num_or_nan(root, "adam_cpu_s");
    rep->adam_hidden = num_or_nan(root, "adam_hidden");
    rep->ncpu = (int)num_or_nan(root, "ncpu");
    rep->ncuda = (int)num_or_nan(root, "ncuda");
    const cJSON *bw = cJSON_GetObjectItemCaseSensitive(root, "bandwidth");
    rep->static_bandwidth = cJSON_IsString(bw) && !strcmp(bw->valuestring, "static");
    const cJSON *cost = cJSON_GetObjectItemCaseSensitive(root, "cost");
    snprintf(rep->cost, sizeof rep->cost, "%s", cJSON_IsString(cost) ? cost->valuestring : "?");
    const cJSON *busy = cJSON_GetObjectItemCaseSensitive(root, "busy_s");
    for (int d = 0; d < SG_DEV_COUNT; d++)
        rep->busy_s[d] = num_or_nan(busy, sg_device_class_name((sg_device_class)d));
    const cJSON *links = cJSON_GetObjectItemCaseSensitive(root, "links");
    for (int l = SG_LINK_H2D; l < SG_LINK_COUNT; l++) {
        const cJSON *o = cJSON_GetObjectItemCaseSensitive(links, sg_link_dir_name((sg_link_dir)l));
        rep->link_bytes[l] = (int64_t)num_or_nan(o, "bytes");
        rep->link_transfers[l] = (int64_t)num_or_nan(o, "transfers");
        rep->link_s[l] = num_or_nan(o, "seconds");
    }
    const cJSON *disk = cJSON_GetObjectItemCaseSensitive(root, "disk");
    if (disk) {
        rep->disk_read_bytes = (int64_t)num_or_nan(disk, "read_bytes");
        rep->disk_write_bytes = (int64_t)num_or_nan(disk, "write_bytes");
        rep->disk_s = num_or_nan(disk, "seconds");
    }
    cJSON_Delete(root);
    if (!isfinite(rep->step_s))
        return sg_error_set(err, SG_EIO, "%s: no step time in the simulation's result", path);
    return SG_OK;
}

int sg_sim_wait_any(sg_sim_job *jobs, int n, sg_sim_report *rep, int *rc, sg_error *err)
{
    int status;
    pid_t pid;
    do
        pid = waitpid(-1, &status, 0);
    while (pid < 0 && errno == EINTR);
    int j;
    for (j = 0; j < n && jobs[j].pid != pid; j++)
        ;
    if (pid < 0 || j == n) {
        *rc = sg_error_set(err, SG_EIO, "no simulation to wait for");
        return -1;
    }
    jobs[j].pid = 0;
    if (WIFEXITED(status) && WEXITSTATUS(status) == 0) {
        *rc = parse_result(jobs[j].result, rep, err);
    } else {
        char why[1100];
        log_tail(jobs[j].log, why, sizeof why);
        if (why[0])
            *rc = sg_error_set(err, SG_EINVAL, "%s", why);
        else if (WIFSIGNALED(status))
            *rc = sg_error_set(err, SG_EINVAL,
                               "the simulator was killed by signal %d (%s) and "
                               "wrote no message",
                               WTERMSIG(status), strsignal(WTERMSIG(status)));
        else
            *rc = sg_error_set(err, SG_EINVAL,
                               "the simulator exited with status %d and wrote no "
                               "message",
                               WIFEXITED(status) ? WEXITSTATUS(status) : -1);
    }
    return j;
}

int sg_sim_run_one(const sg_sim_request *rq, const char *workdir, sg_sim_report *rep, sg_error *err)
{
    sg_sim_job job = {0};
    int rc = sg_sim_start(rq, workdir, 0, &job, err);
    if (rc)
        return rc;
    sg_sim_wait_any(&job, 1, rep, &rc, err);
    return rc;
}

int sg_sim_prepare(const sg_sim_request *rq, int print_warnings, sg_sim_point *pt, sg_error *err)
{
    memset(pt, 0, sizeof *pt);
    pt->rollback_passes = rq->rollback_passes;
    pt->eager_attention = rq->eager_attention;
    const char **argv = calloc((size_t)(rq->nargs + 2 * rq->nsets + 2), sizeof *argv);
    sg_config *cfg = calloc(1, sizeof *cfg);
    sg_graph g;
    sg_graph_init(&g);
    int rc = (!argv || !cfg) ? sg_error_set(err, SG_ENOMEM, "out of memory") : SG_OK;
    if (!rc)
        rc = sg_cli_load_config_ex(config_args(rq, argv), (char **)argv, NULL, 0, cfg,
                                   print_warnings, err);
    if (!rc) { /* "auto" tiles for the simulated machine's workers (sim_exec.c) */
        const sg_machine *mm = &rq->sm->machine;
        sg_config_resolve_tiles(
            cfg, mm->cpu_cores - mm->gpu_count > 0 ? mm->cpu_cores - mm->gpu_count : 1,
            mm->gpu_count);
    }
    if (!rc)
        rc = sg_compile_for_machine(cfg, &rq->sm->machine, &pt->model, &g, err);
    if (!rc) {
        sg_step_spec_for_machine(cfg, &rq->sm->machine, &pt->spec);
        snprintf(pt->sched, sizeof pt->sched, "%s", cfg->run.sched);
        snprintf(pt->speculation, sizeof pt->speculation, "%s", cfg->run.speculation);
        pt->lookahead = cfg->run.lookahead;
        /* one rank per GPU (or per node without GPU): more ranks than the
         * machine has would cost collectives on links it does not have */
        const sg_machine *mm = &rq->sm->machine;
        long long ranks = (long long)mm->nodes * (mm->gpu_count > 0 ? mm->gpu_count : 1);
        if (pt->spec.dp_size > ranks)
            rc = sg_error_set(err, SG_EINVAL,
                              "dp_size %lld on %s: the machine has %lld rank%s "
                              "(nodes x gpu.count); pick a machine with more (e.g. gh200x4, "
                              "mi300ax4)",
                              (long long)pt->spec.dp_size, mm->name, ranks, ranks == 1 ? "" : "s");
    }
    if (!rc)
        rc = sg_spec_check_disk(&pt->spec, &rq->sm->machine, err);
    if (!rc) {
        if (sg_sim_check_fit_spec(&g, &pt->spec, &rq->sm->machine, &pt->fit))
            rc = sg_error_set(err, SG_ENOMEM, "out of memory");
    }
    sg_graph_free(&g);
    free(argv);
    free(cfg);
    return rc;
}

int sg_sim_history_lacks_size(const char *msg)
{
    return strstr(msg, "not calibrated enough") || strstr(msg, "does not have a perfmodel");
}

double sg_sim_point_lower_bound(const sg_sim_point *pt, const sg_machine *m, const char **by,
                                const char **short_name)
{
    sg_graph g;
    sg_graph_init(&g);
    sg_error err = {0};
    sg_cost_model cm;
    sg_summary s;
    double bound = 0;
    sg_machine_cost_model(m, pt->spec.compute_dtype, &cm);
    /* GPU tasks at the times the simulation gives them (the kernel model) */
    sg_sim_costs costs;
    sg_sim_costs_init(&costs, m, pt->spec.compute_dtype, (int)pt->spec.dp_size, 1);
    sg_sim_costs_set_model(&costs, &pt->model, pt->spec.micro_batch, pt->spec.seq_len);
    costs.attention = pt->eager_attention ? SG_ATTENTION_EAGER : SG_ATTENTION_FUSED;
    sg_sim_cost_model_use_kernels(&cm, &costs);
    cm.validate_passes = pt->rollback_passes;
    sg_disk_tier t;
    if (!sg_compile_step(&pt->model, &pt->spec, &g, &err) && !sg_summary_compute(&g, &cm, &s) &&
        !sg_disk_tier_compute(&g, &pt->spec, &t)) {
        sg_disk_tier_apply(&s, &t); /* the disk's bytes over its bandwidths */
        bound = sg_step_lower_bound(&s, &cm, by, short_name);
    }
    sg_graph_free(&g);
    return bound;
}
