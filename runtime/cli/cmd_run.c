/* cmd_run.c - `stepgraph run`: train from a config. */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/cleanup.h"
#include "runtime/cli/cli.h"
#include "runtime/cli/render_html.h"
#include "runtime/config/step_spec.h"
#include "runtime/dist/dist.h"
#include "runtime/train/train.h"

static void run_help(void)
{
    printf("usage: stepgraph run [CONFIG] [--trace FILE] [--metrics FILE] [--report PAGE]\n"
           "                     [run options]\n"
           "\n"
           "Trains the model with the DeepSpeed config CONFIG (default configs/default.json\n"
           "from the installed data: tiny-llama on a text from the vim-runtime package):\n"
           "every step is the compiled step graph run on StarPU with real numerics.\n"
           "Prints a DeepSpeed-style line per logged step\n"
           "  Step N | Loss: x | Time: y ms | TFLOPS: z | Tokens/s: w\n"
           "(TFLOPS by Megatron-LM's formula, coefficient 3, or 4 with activation\n"
           "checkpointing; n/a for MoE models), then a summary over the non-warm-up steps\n"
           "and the peak of StarPU-managed memory next to the plan's peak:\n"
           "  peak memory, host (...): measured X MiB, planned Y MiB (+z%%)\n"
           "(and a gpu line with CUDA workers, each line then adding the plan of what\n"
           "StarPU's allocator holds: its 32 MiB chunks for buffers up to 4 MiB, its cache\n"
           "of dead buffers per size, a copy on each side that accesses a value; without\n"
           "them, the GPU-space buffers live in host memory and the host line says so)\n"
           "(with several CPU workers and no GPU, planned for the workers running ready\n"
           "work out of program order; the program-order figure on the next line).\n"
           "Each step-local buffer is freed right after its last use; STEPGRAPH_LIVENESS=0\n"
           "in the environment keeps them all to the end of the step instead. At most as\n"
           "many micro-steps as CPU workers are in flight (micro-step k + W starts after\n"
           "micro-step k's backward); STEPGRAPH_MICRO_WINDOW=N sets W (0: unbounded).\n"
           "After the first step, glibc's malloc is told to keep freed step-local memory\n"
           "mapped for the next step (mallopt; STEPGRAPH_MALLOPT=0 leaves malloc alone).\n"
           "Without CUDA workers, freed buffers of 32 MiB or more are kept for the next\n"
           "step's, within the most memory StarPU has held so far; the summary says how\n"
           "many were reused (STEPGRAPH_BUFFER_CACHE=0 unmaps them as they are freed).\n"
           "On CUDA workers, STEPGRAPH_ATTENTION_IMPL=fp32|cublas|auto picks attention's\n"
           "kernels (docs/gpu.md; auto runs fp32 until a GPU has timed them) and\n"
           "STEPGRAPH_ATTENTION_SCRATCH_MB=N (512) bounds the cuBLAS route's score tiles.\n"
           "A step whose data need more memory than StarPU may use (90%% of RAM, or\n"
           "STARPU_LIMIT_CPU_MEM) ends the run with an error once no task has run for\n"
           "30 s while that memory is full (StarPU itself would wait for ever);\n"
           "STEPGRAPH_STALL_SECONDS=S sets the 30 (0: wait for ever).\n"
           "The header's start-up line times, from the process's start: the config, the\n"
           "compile, the state's shapes and the data, StarPU's start, the state's\n"
           "allocation (its buffers zeroed on several threads, huge pages advised) and the\n"
           "initial state's load (converted on several threads), and gives the state's\n"
           "size and how much of it is pinned (what crosses the link every step);\n"
           "STEPGRAPH_INIT_THREADS=N, 1 to 256, sets those threads (default the CPUs up\n"
           "to 32).\n"
           "OpenBLAS runs the kernels this CPU has: when OpenBLAS chose older ones,\n"
           "stepgraph re-executes itself with OPENBLAS_CORETYPE set (`stepgraph version`\n"
           "says which; a caller's OPENBLAS_CORETYPE is kept).\n"
           "\n"
           "  --trace FILE     Chrome trace (Perfetto, chrome://tracing) of the last step:\n"
           "                   a lane per worker and per link direction, a slice per task\n"
           "  --metrics FILE   one JSON object per step (JSONL)\n"
           "  --report PAGE    after the run, the step graph's page (as `graph --format\n"
           "                   html --times`) with the last step's timeline and critical\n"
           "                   path\n"
           "\n"
           "StarPU's own variables work as usual (STARPU_SCHED overrides --sched,\n"
           "STARPU_FXT_TRACE=1 with STARPU_FXT_PREFIX records an FxT trace).\n"
           "\n"
           "SIGINT (Ctrl-C) or SIGTERM (a batch system's warning) stops the run after the\n"
           "steps in flight (at most --lookahead), saves when --save is given, prints\n"
           "`interrupted at step N (SIGTERM); checkpoint DIR/step-0000000N` and exits with\n"
           "128 + the signal's number; a second signal ends it at once, the previous\n"
           "checkpoint still current (docs/interrupts.md).\n"
           "\n"
           "Several data-parallel ranks (docs/ranks.md): one process per rank,\n"
           "  mpirun -np N stepgraph run CONFIG --dp_size N --ncuda 0\n"
           "dp_size must equal N. Each rank trains its ZeRO shard on CPU workers; the\n"
           "logged loss and gradient norm are over all ranks; rank 0 alone prints the log\n"
           "and writes --metrics, --trace and --report. An error on one rank prints\n"
           "`stepgraph: rank R: ...` and ends every rank. --save: each rank writes its\n"
           "optimizer partition, rank 0 the gathered weights; --load resumes with the\n"
           "same or another dp_size of the same global micro batch. `stepgraph calibrate`\n"
           "runs under mpirun the same way. Not yet with several ranks: CUDA workers (the\n"
           "NCCL collectives are written, not yet run on several GPUs: docs/gpu.md).%s\n"
           "\n",
           sg_dist_available() ? "" : "\nThis build has no MPI support: dp_size > 1 is refused.");
    sg_cli_print_run_flags();
}

/* --report is written after the run: its directory is checked before
 * training (as train.c checks --save and --trace), so that a long run does
 * not end without its page. */
static int check_report_path(const char *report, sg_error *err)
{
    char dir[4096];
    struct stat st;
    if (snprintf(dir, sizeof dir, "%s", report) >= (int)sizeof dir)
        return sg_error_set(err, SG_EINVAL, "--report %s: path too long", report);
    if (stat(report, &st) == 0 && S_ISDIR(st.st_mode))
        return sg_error_set(err, SG_EIO, "--report %s: is a directory", report);
    char *slash = strrchr(dir, '/');
    if (slash)
        *slash = '\0';
    const char *d = slash ? (dir[0] ? dir : "/") : ".";
    if (access(d, W_OK))
        return sg_error_set(err, SG_EIO, "--report %s: cannot write in %s: %s", report, d,
                            strerror(errno));
    return SG_OK;
}

/* The model the config names loads (and fits max_length): checked with the
 * config, so that under mpirun a refusal is agreed on before training. */
static int check_model(const sg_config *cfg, sg_error *err)
{
    sg_model *m = malloc(sizeof *m);
    if (!m)
        return sg_error_set(err, SG_ENOMEM, "out of memory");
    int rc = sg_config_load_model(cfg, m, err);
    free(m);
    return rc;
}

/* Under mpirun, whether every rank refused its config (a config error is
 * the same on every rank: the same files): then each rank can end without
 * MPI_Abort, whose notice would bury the one line that matters. Ranks that
 * disagree (a file one host cannot read) end as any other failure does. */
static int config_refused_everywhere(const sg_dist *dist, int rc)
{
    double refused = rc != 0;
    sg_error aerr = {0};
    return sg_dist_host_allreduce(dist, &refused, 1, SG_COMM_SUM, &aerr) == SG_OK &&
           refused == (double)dist->size;
}

int sg_cmd_run(int argc, char **argv)
{
    int help = 0;
    const char *report = NULL;
    sg_cli_opt opts[] = {
        {"help", "h", NULL, &help},
        {"report", NULL, &report, NULL},
    };
    for (int i = 0; i < argc; i++)
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            run_help();
            return 0;
        }
    sg_error err = {0};
    /* SIGINT, SIGTERM: the first one stops the training loop at a step
     * boundary (runtime/train/interrupt.h); armed before MPI starts its
     * threads, so that no signal finds the old handler */
    sg_cleanup_defer_signals(1);
    /* under mpirun: MPI first, so that any error below ends every rank */
    sg_dist dist;
    int rc = sg_dist_init(&dist, &err);
    if (!rc && dist.rank > 0 && !freopen("/dev/null", "w", stdout))
        rc = sg_error_set(&err, SG_EIO, "rank %d: cannot silence stdout", dist.rank);
    sg_config *cfg = calloc(1, sizeof *cfg);
    if (!rc && !cfg)
        rc = sg_error_set(&err, SG_ENOMEM, "out of memory");
    /* without CONFIG: the default job */
    char *dflt[argc + 2];
    if (!rc && (argc == 0 || argv[0][0] == '-')) {
        static char path[4096];
        sg_default_config_path(path, sizeof path);
        dflt[0] = path;
        for (int i = 0; i < argc; i++)
            dflt[i + 1] = argv[i];
        argv = dflt;
        argc++;
    }
    if (!rc)
        rc = sg_cli_load_config_ex(argc, argv, opts, 2, cfg, dist.rank == 0, &err);
    if (!rc)
        rc = check_model(cfg, &err);
    if (dist.size > 1 && config_refused_everywhere(&dist, rc)) {
        /* every rank read the same files and refused them: say it once */
        if (dist.rank == 0)
            fprintf(stderr, "stepgraph: %s\n", err.msg[0] ? err.msg : sg_strerror(rc));
        free(cfg);
        sg_dist_finalize(&dist);
        return 1;
    }
    /* a report needs the trace: a temporary one unless --trace names it */
    char tmp_trace[64] = "";
    int tmp_slot = -1;
    if (dist.rank > 0)
        report = NULL; /* rank 0 writes the report */
    if (!rc && report)
        rc = check_report_path(report, &err);
    if (!rc && report && !cfg->run.trace[0]) {
        int fd;
        snprintf(tmp_trace, sizeof tmp_trace, "/tmp/stepgraph-trace-XXXXXX");
        if ((fd = mkstemp(tmp_trace)) < 0)
            rc = sg_error_set(&err, SG_EIO, "--report: cannot create a temporary trace file");
        else {
            close(fd);
            tmp_slot = sg_cleanup_add(tmp_trace);
            snprintf(cfg->run.trace, sizeof cfg->run.trace, "%s", tmp_trace);
        }
    }
    sg_train_result res = {0};
    if (!rc)
        rc = sg_train_ranks(cfg, &dist, &res, &err);
    /* interrupted: the report waits for a run that ends on its own */
    if (!rc && res.signo)
        report = NULL;
    if (!rc && report && !(rc = sg_write_report(cfg, cfg->run.trace, report, &err)))
        fprintf(stderr, "stepgraph: report written to %s\n", report);
    if (tmp_trace[0])
        unlink(tmp_trace);
    sg_cleanup_forget(tmp_slot);
    free(cfg);
    if (rc && dist.size > 1) {
        /* the other ranks may wait in a collective for this one: end them */
        const char *m = err.msg[0] ? err.msg : sg_strerror(rc);
        if (strncmp(m, "rank ", 5) == 0)
            fprintf(stderr, "stepgraph: %s\n", m);
        else
            fprintf(stderr, "stepgraph: rank %d: %s\n", dist.rank, m);
        fflush(stderr);
        sg_dist_abort(&dist, 1);
    }
    if (rc && dist.size == 1)
        fprintf(stderr, "stepgraph: %s\n", err.msg[0] ? err.msg : sg_strerror(rc));
    sg_dist_finalize(&dist);
    /* a signal came (during the run or after its last step): 128 + its
     * number, as a shell reports a process the signal ended */
    int sig = res.signo ? res.signo : sg_cleanup_deferred_signal();
    sg_cleanup_defer_signals(0);
    return rc ? 1 : sig ? 128 + sig : 0;
}
