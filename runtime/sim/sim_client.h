/* sim_client.h - running stepgraph-sim from `stepgraph simulate`, `tune`.
 *
 * A simulation is its own process (see sim_main.c): this module writes the
 * machine's SimGrid platform once (sim_platform.h), starts stepgraph-sim
 * children with the StarPU variables that point at it, and reads back their
 * JSON results. Children's output (SimGrid's and StarPU's notices) goes to a
 * log file, shown only when a simulation fails.
 */
#ifndef SG_SIM_CLIENT_H
#define SG_SIM_CLIENT_H

#include <stdint.h>
#include <sys/types.h>

#include "common/error.h"
#include "graph/ir.h"
#include "graph/compile.h"
#include "runtime/config/machine.h"
#include "runtime/sim/sim_fit.h"

/* Where a machine's platform lives for this run. */
typedef struct sg_sim_machine {
    sg_machine machine;
    char path[4096];     /* the machine model file */
    char sampling[4096]; /* STARPU_PERF_MODEL_DIR */
    char host[64];       /* STARPU_HOSTNAME */
} sg_sim_machine;

/* Resolves NAME|PATH, loads it and makes its sampling directory: for a
 * modelled machine, the platform written under workdir; for a calibrated
 * one, the directory `stepgraph calibrate` saved. */
int sg_sim_machine_open(sg_sim_machine *sm, const char *name, const char *workdir, sg_error *err);

typedef struct sg_sim_request {
    const char *config; /* CONFIG path */
    char *const *args;  /* the user's run options and --set, passed on as given */
    int nargs;
    const char *const *sets; /* extra KEY=VALUE (tune's knobs) */
    int nsets;
    const sg_sim_machine *sm;
    const char *sched; /* NULL: the config's */
    int priorities;
    int static_bandwidth; /* 1: sim_exec.h's fixed share of the socket */
    int fitted_costs;     /* 1: a calibrated machine's fitted history */
    int steps;            /* 0: stepgraph-sim's default */
    const char *trace;    /* or NULL */
    int rollback_passes;  /* sim_cost.h: a validation's passes over its state */
    int eager_attention;  /* 1: attention as Hugging Face's eager ops (eager_attention.h) */
} sg_sim_request;

typedef struct sg_sim_report {
    double step_s, tflops, gpu_busy, adam_cpu_s, adam_hidden; /* NAN when absent */
    /* models/step_rates.h's sg_step_rates beside tflops (the seed's
     * formula): model FLOPs' rate, Megatron-LM's, MFU; NAN when absent */
    double model_tflops, megatron_tflops, mfu;
    /* the busier worker class's busy time per worker in the reported step
     * (sim_main.c), a lower bound of it whatever the task times; NAN absent */
    double work_bound_s;
    char work_bound_by[8]; /* "CPU" or "GPU" */
    double busy_s[SG_DEV_COUNT];
    int ncpu, ncuda;
    int static_bandwidth; /* the run's bandwidth model (its request's) */
    char cost[16];        /* "roofline", "history" or "fitted" */
    int64_t link_bytes[SG_LINK_COUNT], link_transfers[SG_LINK_COUNT];
    double link_s[SG_LINK_COUNT];
    /* ZeRO-Infinity's disk in the reported step (sim_disk.h) */
    int64_t disk_read_bytes, disk_write_bytes;
    double disk_s;
} sg_sim_report;

typedef struct sg_sim_job {
    pid_t pid;
    char result[4200];
    char log[4200];
} sg_sim_job;

/* Starts one simulation; `tag` makes its result and log names unique in
 * workdir. */
int sg_sim_start(const sg_sim_request *rq, const char *workdir, int tag, sg_sim_job *job,
                 sg_error *err);

/* Waits for any started job: returns its index in jobs[0..n) (or -1 with
 * SG_EIO in *rc if none is running), fills rep, or an error carrying the
 * tail of the child's log. */
int sg_sim_wait_any(sg_sim_job *jobs, int n, sg_sim_report *rep, int *rc, sg_error *err);

/* Start then wait. */
int sg_sim_run_one(const sg_sim_request *rq, const char *workdir, sg_sim_report *rep,
                   sg_error *err);

/* What a point is before simulating it: CONFIG loaded with the request's
 * run options and --set, the step compiled, and its peak memory checked
 * against the machine. print_warnings: show the config's warnings. */
typedef struct sg_sim_point {
    sg_step_spec spec;
    sg_model model;
    sg_sim_fit fit;
    char sched[64];       /* the config's policy */
    char speculation[16]; /* the run option: "always", "adaptive" or "never" */
    int64_t lookahead;    /* steps in flight (run option) */
    int rollback_passes;  /* the request's (sim_cost.h), for the lower bound */
    int eager_attention;  /* the request's, for the lower bound */
} sg_sim_point;
int sg_sim_prepare(const sg_sim_request *rq, int print_warnings, sg_sim_point *pt, sg_error *err);

/* The point's step lower bound on machine m (graph/analysis.h,
 * sg_step_lower_bound), 0 if its graph does not compile. */
double sg_sim_point_lower_bound(const sg_sim_point *pt, const sg_machine *m, const char **by,
                                const char **short_name);

/* 1 when a simulation's error is StarPU's refusal of a task size that a
 * calibrated machine's history lacks ("... does not have a perfmodel, or is
 * not calibrated enough"): the fitted costs predict it (sim_costfit.h). */
int sg_sim_history_lacks_size(const char *msg);

/* A fresh private directory under $TMPDIR (or /tmp); sg_sim_workdir_remove
 * deletes it with everything in it. */
int sg_sim_workdir_make(char *out, size_t n, sg_error *err);
void sg_sim_workdir_remove(const char *dir);

#endif /* SG_SIM_CLIENT_H */
