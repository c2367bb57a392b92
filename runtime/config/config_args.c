/* config_args.c - a command line to a loaded config, shared by the stepgraph
 * commands and by stepgraph-sim (config_args.h). No StarPU here. */
#define _POSIX_C_SOURCE 200809L
#include "runtime/config/config_args.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "common/json_util.h"

#ifndef SG_SRC_CONFIGS_DIR
#define SG_SRC_CONFIGS_DIR "configs"
#endif
#ifndef SG_PKGDATADIR
#define SG_PKGDATADIR "/usr/local/share/stepgraph"
#endif

static const char *const run_flags_help =
    "Run options (override the run config; also accepted with '-' for '_'; a default\n"
    "is what applies when neither the flag nor the run config sets the option):\n"
    "  --model NAME|PATH|DIR       model description (models/NAME.json, a file, or a\n"
    "                              Hugging Face model directory with config.json;\n"
    "                              default tiny-llama)\n"
    "  --data PATH                 token shard (.bin) or text file (default: the\n"
    "                              built-in text)\n"
    "  --max_length N              sequence length in tokens, 1 to 2^24 and at most the\n"
    "                              model's positions (default 256)\n"
    "  --steps N                   optimizer steps to run (default 0: bench_steps, and\n"
    "                              when that is 0 too, one pass over the data)\n"
    "  --warmup_steps N            steps excluded from averages (default 0)\n"
    "  --bench_steps N             the number of steps when --steps is 0 (default 0)\n"
    "  --log_interval N            print every N steps (default: the DeepSpeed config's\n"
    "                              steps_per_print, else 10)\n"
    "  --activation_checkpointing  recompute layer activations in backward\n"
    "  --seed N                    random seed (default 42)\n"
    "  --sched POLICY              StarPU scheduling policy (eager, lws, dmda, dmdas, ...;\n"
    "                              default dmdas)\n"
    "  --machine NAME              machine model (configs/machines/NAME.json or a path)\n"
    "  --dp_size N                 data-parallel size (ranks; default 1)\n"
    "  --ncpus N, --ncuda N        StarPU worker counts (default -1: StarPU's choice)\n"
    "  --batch_tile auto|0|N       sequences per forward/backward tile of a micro-step (CPU\n"
    "                              tasks; weight gradients summed in tile order). auto\n"
    "                              (default): untiled with CUDA workers, else enough tiles\n"
    "                              that tiles x micro-steps cover the CPU workers; 0 = untiled\n"
    "  --head_chunk_tokens auto|N  tokens per chunk of the loss head's logits (the head\n"
    "                              never holds all N x vocab logits). auto (default): as\n"
    "                              many as keep chunk x vocab x 4 bytes within 256 MiB\n"
    "  --load PATH                 run: weights file or Hugging Face model directory to\n"
    "                              start from, or checkpoint directory to resume\n"
    "  --save DIR                  run: write a checkpoint there at the end (crash-safe:\n"
    "                              DIR/latest names the current DIR/step-N); a DIR that\n"
    "                              holds another run's checkpoint is refused unless this\n"
    "                              run resumes from it (--load DIR)\n"
    "  --save_interval N           run: also every N steps (default 0: at the end only)\n"
    "  --save_keep N               run: keep the newest N checkpoints (default 2, 0 = all)\n"
    "  --save_dtype f32|bf16       run: dtype of the saved weights (default f32)\n"
    "  --save_shard_size BYTES     run: split saved weights into shards of at most BYTES\n"
    "                              (e.g. 5e9) with an index, as save_pretrained; 0 = one file\n"
    "  --speculation MODE          run, SuperOffload: adaptive (default; never with Lion\n"
    "                              or Adagrad with weight_decay: speculate only while the\n"
    "                              norm stays under the clipping threshold, waiting at\n"
    "                              the start when clipping is on), always, never\n"
    "  --strict                    an unknown key in the config files is an error, not\n"
    "                              a warning (run config key \"strict\": true)\n"
    "  --optimizer_tile auto|0|N   elements per chunk of a CPU sub-group's optimizer\n"
    "                              chain (default auto: from the optimizer's workers)\n"
    "  --cast_placement MODE       casts of CPU sub-groups: scheduler (default), cpu,\n"
    "                              gpu, auto (link bytes against cast time), fused\n"
    "                              (in the CPU Adam's own pass: no cast tasks)\n"
    "  --lookahead N               run: steps in flight at once (default 2, 1 = wait for\n"
    "                              each step before submitting the next; at most 8)\n"
    "  --metrics FILE              run: JSONL metrics, one line per step\n"
    "  --trace FILE                run: Chrome trace of the last step\n"
    "  --eval_data PATH            run: held-out token shards (a file or glob, as --data;\n"
    "                              loss masks honoured) for the validation loss\n"
    "  --eval_interval N           run: also evaluate every N steps (default 0: at the\n"
    "                              last step only); needs --eval_data\n"
    "  --eval_batches N            run: micro-batches per evaluation (default 0: every\n"
    "                              whole micro-batch of --eval_data)\n"
    "  --numa_node N               run: bind CPU workers to NUMA node N's cores\n"
    "  --bind_cores_to_rank        run: rank r binds to NUMA node r mod count\n"
    "  --numa                      run: one StarPU memory node per NUMA node; each CPU\n"
    "                              sub-group's optimizer state and tasks on one node\n"
    "  --numa_emulate N            run: split this machine's cores into N emulated NUMA\n"
    "                              nodes (a hwloc topology; implies --numa; docs/training.md)\n"
    "  --comm_timeout S            run, several ranks: every rank ends with an error\n"
    "                              naming the rank that stopped answering once no\n"
    "                              collective completed for max(S, 10 step times)\n"
    "                              seconds (1 to 86400, default 60)\n"
    "  --set KEY=VALUE             set a DeepSpeed config key (dotted path, JSON value),\n"
    "                              e.g. --set offload_optimizer.ratio=0.8; repeatable\n"
    "\n"
    "Hugging Face Trainer arguments: they fill the DeepSpeed config's \"auto\" values as\n"
    "the Trainer does (docs/config-keys.md); a value the config gives for the same key\n"
    "stands in for one not given, else the Trainer's default applies; an option that\n"
    "differs from a value the config gives is refused:\n"
    "  --per_device_train_batch_size N   train_micro_batch_size_per_gpu (default 8)\n"
    "  --gradient_accumulation_steps N   gradient_accumulation_steps (default 1)\n"
    "  --learning_rate LR          optimizer lr and warmup_max_lr (default 5e-5)\n"
    "  --adam_beta1 B, --adam_beta2 B    optimizer betas (default 0.9, 0.999)\n"
    "  --adam_epsilon E            optimizer eps (default 1e-8)\n"
    "  --weight_decay W            optimizer weight_decay (default 0)\n"
    "  --max_grad_norm N           gradient_clipping (default 1)\n"
    "  --lr_warmup_steps N         the Trainer's warmup_steps: warmup_num_steps N when\n"
    "                              N >= 1, else ceil(N x steps) (default 0; at least 1)\n"
    "  --fp16, --bf16              fp16.enabled, bf16.enabled (default false)\n"
    "  (train_batch_size is dp_size x micro x accumulation; total_num_steps is --steps,\n"
    "  else --bench_steps; the buckets follow the model's hidden_size H: reduce H^2,\n"
    "  stage-3 prefetch int(0.9 H^2), stage-3 persistence 10 H)\n";

/* Boolean run options written as bare flags: they never take the next
 * argument as their value. */
static int is_switch(const char *name)
{
    static const char *const switches[] = {
        "activation_checkpointing", "bind_cores_to_rank", "fp16", "bf16", "numa", "strict"};
    for (size_t k = 0; k < sizeof switches / sizeof switches[0]; k++) {
        size_t i;
        for (i = 0; switches[k][i] &&
                    (name[i] == switches[k][i] || (name[i] == '-' && switches[k][i] == '_'));
             i++)
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

void sg_cli_print_run_flags_except(const char *const *shadowed, int n)
{
    int skipping = 0;
    for (const char *line = run_flags_help; *line;) {
        size_t len = strcspn(line, "\n");
        if (!strncmp(line, "  --", 4)) { /* an option's first line; others are indented more */
            size_t nl = strcspn(line + 4, " \n");
            skipping = 0;
            for (int k = 0; k < n && !skipping; k++)
                skipping = strlen(shadowed[k]) == nl && !strncmp(line + 4, shadowed[k], nl);
        } else if (strncmp(line, "      ", 6)) {
            skipping = 0; /* a heading or a blank line */
        }
        if (!skipping)
            fwrite(line, 1, len + (line[len] == '\n'), stdout);
        line += len + (line[len] == '\n');
    }
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

/* A finalize error is reported against the config file it checked, but the
 * value may have come from the command line (--max_length 100000): then the
 * message starts "ORIGIN: KEY ..." for a KEY the command line gave, and
 * ORIGIN becomes "command line (--KEY)" (sg_config_run_origin). */
static void blame_command_line(const sg_config *cfg, sg_error *err)
{
    const char *origin = cfg->run_path[0] ? cfg->run_path : "run options";
    size_t ol = strlen(origin);
    if (!err || strncmp(err->msg, origin, ol) || strncmp(err->msg + ol, ": ", 2))
        return;
    const char *rest = err->msg + ol + 2;
    size_t n = strcspn(rest, " :");
    char key[64], by[SG_PATH_MAX + 32], msg[sizeof err->msg];
    if (n == 0 || n >= sizeof key)
        return;
    snprintf(key, sizeof key, "%.*s", (int)n, rest);
    sg_config_run_origin(cfg, key, by, sizeof by);
    if (strcmp(by, origin) == 0)
        return;
    /* by is "command line (--KEY)" here: short */
    snprintf(msg, sizeof msg, "%.100s: %s", by, rest);
    snprintf(err->msg, sizeof err->msg, "%s", msg);
}

int sg_cli_load_config(int argc, char **argv, const sg_cli_opt *opts, int nopts, sg_config *cfg,
                       sg_error *err)
{
    return sg_cli_load_config_ex(argc, argv, opts, nopts, cfg, 1, err);
}

int sg_cli_load_config_ex(int argc, char **argv, const sg_cli_opt *opts, int nopts, sg_config *cfg,
                          int print_warnings, sg_error *err)
{
    const char *config_path = NULL;
    /* run-option overrides are applied after the file is loaded */
    const char **keys = calloc((size_t)argc + 1, sizeof *keys);
    const char **vals = calloc((size_t)argc + 1, sizeof *vals);
    const char **sets = calloc((size_t)argc + 1, sizeof *sets);
    int nover = 0, nsets = 0, rc = SG_OK;
    if (!keys || !vals || !sets) {
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
        if (!strcmp(a, "--set")) {
            if (i + 1 >= argc) {
                rc = sg_error_set(err, SG_EINVAL, "option --set needs KEY=VALUE");
                goto out;
            }
            sets[nsets++] = argv[++i];
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
            vals[nover++] = NULL; /* a boolean turns on; any other option says it needs a value */
    }
    if (!config_path) {
        rc = sg_error_set(err, SG_EINVAL, "missing CONFIG (a DeepSpeed or run config file)");
        goto out;
    }
    if ((rc = sg_config_load_with(config_path, sets, nsets, cfg, err)))
        goto out;
    for (int k = 0; k < nover; k++) {
        if ((rc = sg_run_option_set(&cfg->run, keys[k], vals[k], err)))
            goto out;
        sg_config_note_cli_option(cfg, keys[k]);
    }
    if ((rc = sg_config_finalize(cfg, err))) {
        blame_command_line(cfg, err);
        goto out;
    }
    /* strict: an unknown key is a mistake to stop at (a misspelled
     * zero_optimization would train at stage 0) */
    for (int w = 0; cfg->run.strict && w < cfg->warnings.count; w++)
        if (strstr(cfg->warnings.msg[w], "unknown key")) {
            char text[sizeof cfg->warnings.msg[0]];
            rc = sg_error_set(err, SG_EINVAL, "%s (strict: unknown keys are errors)",
                              sg_warning_as_error(cfg->warnings.msg[w], text, sizeof text));
            goto out;
        }
    for (int w = 0; print_warnings && w < cfg->warnings.count; w++)
        fprintf(stderr, "stepgraph: warning: %s\n", cfg->warnings.msg[w]);
out:
    free(keys);
    free(vals);
    free(sets);
    return rc;
}

int sg_cli_split_args(int argc, char **argv, const sg_cli_opt *opts, int nopts, const char **config,
                      char **pass, int *npass)
{
    *config = NULL;
    *npass = 0;
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        if (!is_flag(a)) {
            if (!*config)
                *config = a;
            continue;
        }
        const sg_cli_opt *o = find_opt(opts, nopts, a);
        if (o) {
            if (o->value && i + 1 < argc)
                i++;
            continue;
        }
        pass[(*npass)++] = argv[i];
        int takes_value = !strcmp(a, "--set") || (a[1] == '-' && i + 1 < argc &&
                                                  !is_flag(argv[i + 1]) && !is_switch(a + 2));
        if (takes_value && i + 1 < argc)
            pass[(*npass)++] = argv[++i];
    }
    return SG_OK;
}
