/* cli.c - the stepgraph command: dispatch, help, shared option parsing. */
#define _POSIX_C_SOURCE 200809L
#include "runtime/cli.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "sg_autoconf.h"
#include "runtime/atomic_file.h"
#include "runtime/starpu_info.h"

static const char *const run_flags_help =
    "Run options (override the run config; also accepted with '-' for '_'):\n"
    "  --model NAME|PATH           model description (models/NAME.json)\n"
    "  --data PATH                 token shard (.bin) or text file\n"
    "  --max_length N              sequence length in tokens\n"
    "  --steps N                   optimizer steps to run\n"
    "  --warmup_steps N            steps excluded from averages\n"
    "  --bench_steps N             stop after N steps\n"
    "  --log_interval N            print every N steps\n"
    "  --activation_checkpointing  recompute layer activations in backward\n"
    "  --seed N                    random seed\n"
    "  --sched POLICY              StarPU scheduling policy (eager, lws, dmda, dmdas, ...)\n"
    "  --machine NAME              machine model\n"
    "  --dp_size N                 data-parallel size (ranks)\n"
    "  --ncpus N, --ncuda N        StarPU worker counts\n"
    "  --load PATH                 run: weights file, or checkpoint directory to resume\n"
    "  --save DIR                  run: write a checkpoint there at the end\n"
    "  --save_interval N           run: also every N steps\n"
    "  --save_dtype f32|bf16       run: dtype of the saved weights\n"
    "  --metrics FILE              run: JSONL metrics, one line per step\n"
    "  --trace FILE                run: Chrome trace of the last step\n"
    "  --numa_node N               run: bind CPU workers to NUMA node N's cores\n"
    "  --bind_cores_to_rank        run: rank r binds to NUMA node r mod count\n";

/* Boolean run options written as bare flags: they never take the next
 * argument as their value. */
static int is_switch(const char *name)
{
    static const char *const switches[] = {"activation_checkpointing", "bind_cores_to_rank"};
    for (size_t k = 0; k < sizeof switches / sizeof switches[0]; k++) {
        size_t i;
        for (i = 0; switches[k][i] && (name[i] == switches[k][i] ||
                                       (name[i] == '-' && switches[k][i] == '_')); i++)
            ;
        if (!switches[k][i] && !name[i])
            return 1;
    }
    return 0;
}

void sg_cli_print_run_flags(void)
{
    fputs(run_flags_help, stdout);
}

static void usage(FILE *out)
{
    fprintf(out,
            "usage: stepgraph COMMAND [ARGS]\n"
            "\n"
            "Compiles one training step of a large language model, configured by a\n"
            "DeepSpeed JSON config, into a task graph for StarPU.\n"
            "\n"
            "Commands:\n"
            "  run [CONFIG]           train: run the step graph on StarPU every step\n"
            "                         (default: configs/default.json, the tiny model)\n"
            "  graph CONFIG [--format dot|svg|json] [-o FILE] [--summary]\n"
            "                         compile the step graph and export it\n"
            "  config CONFIG          check a config and print the resolved settings\n"
            "  model info MODEL...    parameter counts and dimensions of a model\n"
            "  model list             the shipped model descriptions\n"
            "  version                versions of stepgraph and StarPU\n"
            "\n"
            "CONFIG is a DeepSpeed config as DeepSpeed reads it, or a run config: a JSON\n"
            "object with \"deepspeed_config\" (path or inline object) and run options.\n"
            "Run 'stepgraph COMMAND --help' for a command's options.\n");
}

void sg_default_config_path(char *buf, size_t n)
{
    const char *env = getenv("STEPGRAPH_CONFIGS_DIR");
    struct stat st;
    if (env && *env)
        snprintf(buf, n, "%s/default.json", env);
    else if (stat(SG_SRC_CONFIGS_DIR "/default.json", &st) == 0)
        snprintf(buf, n, "%s", SG_SRC_CONFIGS_DIR "/default.json");
    else
        snprintf(buf, n, "%s", SG_PKGDATADIR "/configs/default.json");
}

static const char *const short_usage = "run 'stepgraph --help' for usage";

/* "-5" is a value (a negative number), not an option */
static int is_flag(const char *a)
{
    return a[0] == '-' && a[1] != '\0' && !(a[1] >= '0' && a[1] <= '9') && a[1] != '.';
}

static const sg_cli_opt *find_opt(const sg_cli_opt *opts, int nopts, const char *arg)
{
    for (int i = 0; i < nopts; i++) {
        if (arg[1] == '-' && strcmp(arg + 2, opts[i].name) == 0)
            return &opts[i];
        if (arg[1] != '-' && opts[i].short_name && strcmp(arg + 1, opts[i].short_name) == 0)
            return &opts[i];
    }
    return NULL;
}

int sg_cli_load_config(int argc, char **argv, const sg_cli_opt *opts, int nopts,
                       sg_config *cfg, sg_error *err)
{
    const char *config_path = NULL;
    /* run-option overrides are applied after the file is loaded */
    const char **keys = calloc((size_t)argc + 1, sizeof *keys);
    const char **vals = calloc((size_t)argc + 1, sizeof *vals);
    int nover = 0, rc = SG_OK;
    if (!keys || !vals) {
        rc = sg_error_set(err, SG_ENOMEM, "out of memory");
        goto out;
    }
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        if (!is_flag(a)) {
            if (config_path) {
                rc = sg_error_set(err, SG_EINVAL, "unexpected argument '%s' (CONFIG is '%s')", a,
                                  config_path);
                goto out;
            }
            config_path = a;
            continue;
        }
        const sg_cli_opt *o = find_opt(opts, nopts, a);
        if (o) {
            if (o->value) {
                if (i + 1 >= argc) {
                    rc = sg_error_set(err, SG_EINVAL, "option %s needs a value", a);
                    goto out;
                }
                *o->value = argv[++i];
            }
            if (o->flag)
                *o->flag = 1;
            continue;
        }
        if (a[1] != '-') {
            rc = sg_error_set(err, SG_EINVAL, "unknown option %s", a);
            goto out;
        }
        keys[nover] = a + 2;
        /* a run option without a value is a boolean switch */
        if (i + 1 < argc && !is_flag(argv[i + 1]) && !is_switch(a + 2))
            vals[nover++] = argv[++i];
        else
            vals[nover++] = "true";
    }
    if (!config_path) {
        rc = sg_error_set(err, SG_EINVAL, "missing CONFIG (a DeepSpeed or run config file)");
        goto out;
    }
    if ((rc = sg_config_load(config_path, cfg, err)))
        goto out;
    for (int k = 0; k < nover; k++)
        if ((rc = sg_run_option_set(&cfg->run, keys[k], vals[k], err)))
            goto out;
    if ((rc = sg_config_finalize(cfg, err)))
        goto out;
    for (int w = 0; w < cfg->warnings.count; w++)
        fprintf(stderr, "stepgraph: warning: %s\n", cfg->warnings.msg[w]);
out:
    free(keys);
    free(vals);
    return rc;
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
    if ((rc = fn(ctx, f.fp))) {
        sg_atomic_abort(&f);
        return sg_error_set(err, rc, "%s: write failed", path);
    }
    return sg_atomic_commit(&f, err);
}

static int cmd_version(void)
{
    char starpu[64];
    sg_starpu_version(starpu, sizeof starpu);
    printf("stepgraph %s (StarPU %s)\n", PACKAGE_VERSION, starpu);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    const char *cmd = argv[1];
    if (!strcmp(cmd, "--help") || !strcmp(cmd, "-h") || !strcmp(cmd, "help")) {
        usage(stdout);
        return 0;
    }
    if (!strcmp(cmd, "--version") || !strcmp(cmd, "version"))
        return cmd_version();
    if (!strcmp(cmd, "run"))
        return sg_cmd_run(argc - 2, argv + 2);
    if (!strcmp(cmd, "graph"))
        return sg_cmd_graph(argc - 2, argv + 2);
    if (!strcmp(cmd, "model"))
        return sg_cmd_model(argc - 2, argv + 2);
    if (!strcmp(cmd, "config"))
        return sg_cmd_config(argc - 2, argv + 2);
    fprintf(stderr, "stepgraph: unknown command '%s'; %s\n", cmd, short_usage);
    return 2;
}
