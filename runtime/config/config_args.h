/* config_args.h - a command line to a loaded config: CONFIG, the command's
 * own options, run-option flags and --set, shared by the stepgraph commands
 * (runtime/cli/) and by stepgraph-sim (runtime/sim/sim_main.c, and the
 * client that runs it, sim_client.c). Here rather than in runtime/cli/ so
 * that the simulator, below the CLI, may use it; the names keep the sg_cli_
 * prefix they had there. No StarPU.
 */
#ifndef SG_CONFIG_ARGS_H
#define SG_CONFIG_ARGS_H

#include <stddef.h>

#include "common/error.h"
#include "runtime/config/config.h"

/* A command's own option: "--name VALUE" (value != NULL) or "--name" (flag). */
typedef struct sg_cli_opt {
    const char *name;       /* without dashes, e.g. "format" */
    const char *short_name; /* e.g. "o", or NULL */
    const char **value;     /* receives the argument, or NULL for a flag */
    int *flag;              /* set to 1 when present (flags) */
} sg_cli_opt;

/* Parses `argv` (after the command name): exactly one positional CONFIG, the
 * command's options, and run-option flags (--max_length 4096, --seed 1,
 * --activation_checkpointing, ...) that override the config. Loads CONFIG,
 * applies the overrides, finalizes, and prints config warnings on stderr. */
int sg_cli_load_config(int argc, char **argv, const sg_cli_opt *opts, int nopts, sg_config *cfg,
                       sg_error *err);
/* The same, printing the config's warnings only if print_warnings. */
int sg_cli_load_config_ex(int argc, char **argv, const sg_cli_opt *opts, int nopts, sg_config *cfg,
                          int print_warnings, sg_error *err);

/* The same walk as sg_cli_load_config without loading: CONFIG (NULL if
 * none), and in pass (argc entries) the arguments that are not the
 * command's own options, i.e. the run options and --set with their values,
 * in order, to hand to another program. */
int sg_cli_split_args(int argc, char **argv, const sg_cli_opt *opts, int nopts, const char **config,
                      char **pass, int *npass);

/* Prints the run-option flags shared by the commands (for --help). */
void sg_cli_print_run_flags(void);
/* The same without the run options named in shadowed (n names, without the
 * leading --): a command whose own option of that name takes precedence. */
void sg_cli_print_run_flags_except(const char *const *shadowed, int n);

/* The default job's config: $STEPGRAPH_CONFIGS_DIR/default.json, else the
 * source tree's configs/default.json from a build tree, else the installed
 * one. */
void sg_default_config_path(char *buf, size_t n);

#endif /* SG_CONFIG_ARGS_H */
