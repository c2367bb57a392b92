/* bench_task_overhead.c - StarPU's cost per task on this machine, to put the
 * step time of `stepgraph run` in context (scripts/bench_train.sh runs it).
 * Not a test: nothing is asserted.
 *
 * Usage: bench_task_overhead [--sched NAME] [--ncpus N] [--ntasks N] [--reps R]
 *                            [--bare]
 *
 * Three patterns of N tasks whose CPU function does nothing, each submitted
 * with starpu_task_insert and then waited for (starpu_task_wait_for_all); the
 * figure is wall time (submission + execution + wait) / N, the median of R
 * rounds after one warm-up round (which also calibrates the performance
 * models when STARPU_HOME is fresh):
 *   empty   no buffers: submission, scheduling, a worker running it
 *   chain   every task RW on one 4-byte vector: each task depends on the
 *           previous one, so this is the latency of one dependency hop
 *   indep   task i W on its own 4-byte vector (registered beforehand): data
 *           bookkeeping without dependencies
 * By default the tasks are submitted like runtime/exec/exec.c submit_node does:
 * a history-based performance model on the codelet (what the dm* schedulers
 * consult), profiling enabled, a name, a priority, a cl_arg that StarPU does
 * not free and a completion callback. --bare drops all of those (no model,
 * no profiling, no callback, no name) to show StarPU's floor.
 *
 * Prints a line per pattern and one machine-readable line:
 *   overhead sched=S ncpus=N ntasks=N empty_us=X chain_us=Y indep_us=Z
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <starpu.h>
#include <starpu_profiling.h>

static double now_seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void empty_cpu(void *buffers[], void *arg)
{
    (void)buffers;
    (void)arg;
}

/* like runtime/exec/exec.c record_task: read the task's profiling record */
static volatile double sink_us;
static void on_done(void *arg)
{
    (void)arg;
    struct starpu_task *t = starpu_task_get_current();
    if (t && t->profiling_info)
        sink_us = starpu_timing_timespec_to_us(&t->profiling_info->end_time) -
                  starpu_timing_timespec_to_us(&t->profiling_info->start_time);
}

static struct starpu_perfmodel pm_empty = {.type = STARPU_HISTORY_BASED,
                                           .symbol = "sg_bench_overhead_empty"};
static struct starpu_perfmodel pm_chain = {.type = STARPU_HISTORY_BASED,
                                           .symbol = "sg_bench_overhead_chain"};
static struct starpu_perfmodel pm_indep = {.type = STARPU_HISTORY_BASED,
                                           .symbol = "sg_bench_overhead_indep"};

static struct starpu_codelet cl_empty = {
    .cpu_funcs = {empty_cpu}, .nbuffers = 0, .name = "bench_empty"};
static struct starpu_codelet cl_chain = {
    .cpu_funcs = {empty_cpu}, .nbuffers = 1, .modes = {STARPU_RW}, .name = "bench_chain"};
static struct starpu_codelet cl_indep = {
    .cpu_funcs = {empty_cpu}, .nbuffers = 1, .modes = {STARPU_W}, .name = "bench_indep"};

enum { PAT_EMPTY, PAT_CHAIN, PAT_INDEP, NPAT };
static const char *pat_name[NPAT] = {"empty", "chain", "indep"};

typedef struct bench {
    int bare;
    int ntasks;
    starpu_data_handle_t one;   /* chain */
    starpu_data_handle_t *many; /* indep, ntasks of them */
    float *one_mem, *many_mem;
    int ctx_arg; /* the cl_arg every task carries (STARPU_CL_ARGS_NFREE) */
} bench;

static int submit(bench *b, int pat, int i)
{
    struct starpu_codelet *cl = pat == PAT_EMPTY   ? &cl_empty
                                : pat == PAT_CHAIN ? &cl_chain
                                                   : &cl_indep;
    starpu_data_handle_t h = pat == PAT_CHAIN ? b->one : pat == PAT_INDEP ? b->many[i] : NULL;
    struct starpu_data_descr d[1];
    int nd = 0;
    if (h) {
        d[0].handle = h;
        d[0].mode = pat == PAT_CHAIN ? STARPU_RW : STARPU_W;
        nd = 1;
    }
    if (b->bare)
        return starpu_task_insert(cl, STARPU_DATA_MODE_ARRAY, d, nd, 0);
    return starpu_task_insert(cl, STARPU_DATA_MODE_ARRAY, d, nd, STARPU_CL_ARGS_NFREE, &b->ctx_arg,
                              sizeof b->ctx_arg, STARPU_NAME, pat_name[pat], STARPU_PRIORITY, i % 4,
                              STARPU_CALLBACK_WITH_ARG_NFREE, on_done, &b->ctx_arg, 0);
}

/* seconds for n tasks of pattern pat, submitted and waited for */
static int round_of(bench *b, int pat, int n, double *secs, double *submit_secs)
{
    double t0 = now_seconds();
    for (int i = 0; i < n; i++) {
        int rc = submit(b, pat, i);
        if (rc) {
            fprintf(stderr, "bench_task_overhead: starpu_task_insert failed (%d)\n", rc);
            return rc;
        }
    }
    double t1 = now_seconds();
    starpu_task_wait_for_all();
    *secs = now_seconds() - t0;
    *submit_secs = t1 - t0;
    return 0;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static void usage(FILE *fp)
{
    fprintf(fp, "usage: bench_task_overhead [--sched NAME] [--ncpus N] [--ntasks N] "
                "[--reps R] [--bare]\n");
}

int main(int argc, char **argv)
{
    const char *sched = "dmdas";
    int ncpus = -1, ntasks = 20000, reps = 3, bare = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--bare")) {
            bare = 1;
        } else if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage(stdout);
            return 0;
        } else if (v && !strcmp(a, "--sched")) {
            sched = v, i++;
        } else if (v && !strcmp(a, "--ncpus")) {
            ncpus = atoi(v), i++;
        } else if (v && !strcmp(a, "--ntasks")) {
            ntasks = atoi(v), i++;
        } else if (v && !strcmp(a, "--reps")) {
            reps = atoi(v), i++;
        } else {
            usage(stderr);
            return 2;
        }
    }
    if (ntasks < 1 || reps < 1) {
        usage(stderr);
        return 2;
    }
    if (getenv("STARPU_SCHED") && strcmp(getenv("STARPU_SCHED"), sched) != 0)
        fprintf(stderr, "bench_task_overhead: warning: STARPU_SCHED=%s overrides --sched %s\n",
                getenv("STARPU_SCHED"), sched);
    setenv("STARPU_SILENT", "1", 0);

    if (!bare) {
        cl_empty.model = &pm_empty;
        cl_chain.model = &pm_chain;
        cl_indep.model = &pm_indep;
    }
    struct starpu_conf conf;
    starpu_conf_init(&conf);
    conf.sched_policy_name = sched;
    conf.ncpus = ncpus;
    conf.ncuda = 0;
    conf.nopencl = 0;
    int rc = starpu_init(&conf);
    if (rc) {
        fprintf(stderr, "bench_task_overhead: starpu_init failed (%d)\n", rc);
        return 1;
    }
    if (!bare)
        starpu_profiling_status_set(STARPU_PROFILING_ENABLE);

    bench b = {.bare = bare, .ntasks = ntasks};
    b.one_mem = calloc(1, sizeof(float));
    b.many_mem = calloc((size_t)ntasks, sizeof(float));
    b.many = calloc((size_t)ntasks, sizeof *b.many);
    double *t = calloc((size_t)reps, sizeof *t), *ts = calloc((size_t)reps, sizeof *ts);
    if (!b.one_mem || !b.many_mem || !b.many || !t || !ts) {
        fprintf(stderr, "bench_task_overhead: out of memory\n");
        starpu_shutdown();
        return 1;
    }
    starpu_vector_data_register(&b.one, STARPU_MAIN_RAM, (uintptr_t)b.one_mem, 1, sizeof(float));
    for (int i = 0; i < ntasks; i++)
        starpu_vector_data_register(&b.many[i], STARPU_MAIN_RAM, (uintptr_t)&b.many_mem[i], 1,
                                    sizeof(float));

    printf("StarPU %d.%d.%d, sched %s, %u CPU workers, %d tasks per round, median of %d "
           "rounds after 1 warm-up round, %s submission\n",
           STARPU_MAJOR_VERSION, STARPU_MINOR_VERSION, STARPU_RELEASE_VERSION, sched,
           starpu_cpu_worker_get_count(), ntasks, reps,
           bare ? "bare" : "product-like (history model, profiling, callback, name, priority)");
    double us[NPAT];
    for (int p = 0; p < NPAT && !rc; p++) {
        double w, ws;
        rc = round_of(&b, p, ntasks, &w, &ws); /* warm-up (and calibration) */
        for (int r = 0; r < reps && !rc; r++)
            rc = round_of(&b, p, ntasks, &t[r], &ts[r]);
        if (rc)
            break;
        qsort(t, (size_t)reps, sizeof *t, cmp_double);
        qsort(ts, (size_t)reps, sizeof *ts, cmp_double);
        us[p] = t[reps / 2] * 1e6 / ntasks;
        printf("  %-5s %8.2f us per task (submission alone %.2f us; best round %.2f us)\n",
               pat_name[p], us[p], ts[reps / 2] * 1e6 / ntasks, t[0] * 1e6 / ntasks);
    }
    if (!rc)
        printf("overhead sched=%s ncpus=%u ntasks=%d bare=%d empty_us=%.3f chain_us=%.3f "
               "indep_us=%.3f\n",
               sched, starpu_cpu_worker_get_count(), ntasks, bare, us[PAT_EMPTY], us[PAT_CHAIN],
               us[PAT_INDEP]);
    fflush(stdout);

    starpu_data_unregister(b.one);
    for (int i = 0; i < ntasks; i++)
        starpu_data_unregister(b.many[i]);
    starpu_shutdown();
    free(b.one_mem);
    free(b.many_mem);
    free(b.many);
    free(t);
    free(ts);
    return rc ? 1 : 0;
}
