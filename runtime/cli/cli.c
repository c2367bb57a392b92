/* cli.c - the stepgraph command: dispatch, help, shared option parsing. */
#define _POSIX_C_SOURCE 200809L
#include "runtime/cli/cli.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "sg_autoconf.h"
#include "codelets/cpu/blas_core.h"
#include "codelets/cpu/gemm.h"
#include "common/atomic_file.h"
#include "common/cleanup.h"
#include "runtime/exec/starpu_info.h"

static void usage(FILE *out)
{
    fprintf(out, "usage: stepgraph COMMAND [ARGS]\n"
                 "\n"
                 "Compiles one training step of a large language model, configured by a\n"
                 "DeepSpeed JSON config, into a task graph for StarPU.\n"
                 "\n"
                 "Commands:\n"
                 "  run [CONFIG]           train: run the step graph on StarPU every step\n"
                 "                         (default: configs/default.json, the tiny model)\n"
                 "  graph CONFIG [--format dot|svg|json|html] [-o FILE] [--summary]\n"
                 "                         compile the step graph and export it (html: an\n"
                 "                         interactive page)\n"
                 "  compare A [B] -o PAGE.html [--machines M1,M2]\n"
                 "                         two configs, or one on two machines, side by side\n"
                 "  config CONFIG          check a config and print the resolved settings\n"
                 "  simulate CONFIG [--machine M] [--sched P]\n"
                 "                         predict the step on a machine model (StarPU-SimGrid)\n"
                 "  tune CONFIG [--machines M,..] [--sched P,..] [--vary KEY=LO:HI:STEP]...\n"
                 "                         simulate every combination; CSV, Markdown, SVG plot\n"
                 "  calibrate [CONFIG] [--name NAME] [--out DIR]\n"
                 "                         run here until StarPU's models are calibrated and\n"
                 "                         save a machine model that simulate can use\n"
                 "  fit CONFIG --machine M [--family llama]\n"
                 "                         the largest model of a family whose step fits the\n"
                 "                         machine's GPU and host memory\n"
                 "  model info MODEL...    parameter counts and dimensions of a model\n"
                 "  model list             the shipped model descriptions\n"
                 "  version                versions of stepgraph and StarPU (also --version)\n"
                 "\n"
                 "CONFIG is a DeepSpeed config as DeepSpeed reads it, or a run config: a JSON\n"
                 "object with \"deepspeed_config\" (path or inline object) and run options.\n"
                 "Run 'stepgraph COMMAND --help' for a command's options.\n"
                 "\n"
                 "Environment: STEPGRAPH_MODELS_DIR, STEPGRAPH_MACHINES_DIR and\n"
                 "STEPGRAPH_CONFIGS_DIR (where models/NAME.json, machine models and the default\n"
                 "job's default.json are looked up; default: the source tree's from a build\n"
                 "tree, else the installed ones), STEPGRAPH_SIM (the stepgraph-sim program\n"
                 "simulate and tune start), STEPGRAPH_TASK_LOG=PATH (the first step's task list\n"
                 "as submitted to StarPU), STEPGRAPH_DEFAULT_TEXT=PATH (the training text when\n"
                 "no --data is given; default vim-runtime's version8.txt), SG_ADAM_ISA (the CPU "
                 "Adam kernel: scalar, avx2, avx512,\n"
                 "or neon on AArch64; default the widest this CPU has), SG_CPU_GEMM (the CPU's\n"
                 "products in bf16 runs: auto, sgemm or amx; default amx where the CPU has\n"
                 "AMX-BF16), OPENBLAS_CORETYPE (kept when set); run's own in 'stepgraph run\n"
                 "--help'; StarPU's STARPU_* as usual.\n");
}

int sg_cli_write_output(const char *path, sg_write_fn fn, void *ctx, sg_error *err)
{
    if (!path || strcmp(path, "-") == 0) {
        int rc = fn(ctx, stdout);
        if (fflush(stdout) != 0 || rc)
            return sg_error_set(err, SG_EIO, "writing to standard output failed");
        return SG_OK;
    }
    sg_atomic_file f;
    int rc = sg_atomic_open(&f, path, err);
    if (rc)
        return rc;
    if ((rc = fn(ctx, f.fp)))
        return sg_atomic_fail(&f, rc, err);
    return sg_atomic_commit(&f, err);
}

static const char *const short_usage = "run 'stepgraph --help' for usage";

static int cmd_version(void)
{
    char starpu[64];
    sg_starpu_version(starpu, sizeof starpu);
    printf("stepgraph %s (StarPU %s)\n", PACKAGE_VERSION, starpu);
    char cuda[160];
    sg_starpu_cuda_info(cuda, sizeof cuda);
    printf("%s\n", cuda);
    char blas[200];
    sg_blas_core_describe(blas, sizeof blas);
    printf("%s\n", blas);
    char gemm[200];
    sg_gemm_describe(gemm, sizeof gemm);
    printf("%s\n", gemm);
    return 0;
}

int main(int argc, char **argv)
{
    sg_blas_core_select(argv);
    sg_cleanup_on_signals();
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    const char *cmd = argv[1];
    if (!strcmp(cmd, "--help") || !strcmp(cmd, "-h") || !strcmp(cmd, "help")) {
        usage(stdout);
        return 0;
    }
    if (!strcmp(cmd, "--version") || !strcmp(cmd, "version")) {
        if (argc > 2 && (!strcmp(argv[2], "--help") || !strcmp(argv[2], "-h"))) {
            printf("usage: stepgraph version\n\nPrints the versions of stepgraph and StarPU, "
                   "whether the CUDA codelets were\nbuilt and the CUDA devices seen, and the "
                   "BLAS library with the kernels it runs, and the engine of the CPU's "
                   "bf16\nproducts (SG_CPU_GEMM).\n");
            return 0;
        }
        if (argc > 2) {
            fprintf(stderr, "stepgraph: version: unexpected argument '%s'\n", argv[2]);
            return 2;
        }
        return cmd_version();
    }
    if (!strcmp(cmd, "run"))
        return sg_cmd_run(argc - 2, argv + 2);
    if (!strcmp(cmd, "graph"))
        return sg_cmd_graph(argc - 2, argv + 2);
    if (!strcmp(cmd, "compare"))
        return sg_cmd_compare(argc - 2, argv + 2);
    if (!strcmp(cmd, "model"))
        return sg_cmd_model(argc - 2, argv + 2);
    if (!strcmp(cmd, "config"))
        return sg_cmd_config(argc - 2, argv + 2);
    if (!strcmp(cmd, "simulate"))
        return sg_cmd_simulate(argc - 2, argv + 2);
    if (!strcmp(cmd, "tune"))
        return sg_cmd_tune(argc - 2, argv + 2);
    if (!strcmp(cmd, "calibrate"))
        return sg_cmd_calibrate(argc - 2, argv + 2);
    if (!strcmp(cmd, "fit"))
        return sg_cmd_fit(argc - 2, argv + 2);
    fprintf(stderr, "stepgraph: unknown command '%s'; %s\n", cmd, short_usage);
    return 2;
}
