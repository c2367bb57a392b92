/* cmd_run.c - `stepgraph run`: train from a config. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/cli/cli.h"
#include "runtime/train/train.h"

static void run_help(void)
{
    printf("usage: stepgraph run [CONFIG] [--trace FILE] [--metrics FILE] [run options]\n"
           "\n"
           "Trains the model with the DeepSpeed config CONFIG (default configs/default.json\n"
           "from the installed data: tiny-llama on a text from the vim-runtime package):\n"
           "every step is the compiled step graph run on StarPU with real numerics.\n"
           "Prints a DeepSpeed-style line per logged step\n"
           "  Step N | Loss: x | Time: y ms | TFLOPS: z | Tokens/s: w\n"
           "(TFLOPS by Megatron-LM's formula, coefficient 3, or 4 with activation\n"
           "checkpointing; n/a for MoE models), then a summary over the non-warm-up steps.\n"
           "\n"
           "  --trace FILE     Chrome trace (Perfetto, chrome://tracing) of the last step:\n"
           "                   a lane per worker and per link direction, a slice per task\n"
           "  --metrics FILE   one JSON object per step (JSONL)\n"
           "\n"
           "StarPU's own variables work as usual (STARPU_SCHED overrides --sched,\n"
           "STARPU_FXT_TRACE=1 with STARPU_FXT_PREFIX records an FxT trace).\n"
           "\n");
    sg_cli_print_run_flags();
}

int sg_cmd_run(int argc, char **argv)
{
    int help = 0;
    sg_cli_opt opts[] = {
        {"help", "h", NULL, &help},
    };
    for (int i = 0; i < argc; i++)
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            run_help();
            return 0;
        }
    sg_error err = {0};
    sg_config *cfg = calloc(1, sizeof *cfg);
    int rc = cfg ? SG_OK : sg_error_set(&err, SG_ENOMEM, "out of memory");
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
        rc = sg_cli_load_config(argc, argv, opts, 1, cfg, &err);
    sg_train_result res;
    if (!rc)
        rc = sg_train(cfg, &res, &err);
    if (rc)
        fprintf(stderr, "stepgraph: %s\n", err.msg[0] ? err.msg : sg_strerror(rc));
    free(cfg);
    return rc ? 1 : 0;
}
