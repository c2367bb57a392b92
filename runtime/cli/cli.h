/* cli.h - shared command-line handling of the stepgraph commands. */
#ifndef SG_CLI_H
#define SG_CLI_H

#include <stddef.h>
#include <stdio.h>

#include "common/error.h"
#include "runtime/config/config.h"

/* A command's own option: "--name VALUE" (value != NULL) or "--name" (flag). */
typedef struct sg_cli_opt {
    const char *name;          /* without dashes, e.g. "format" */
    const char *short_name;    /* e.g. "o", or NULL */
    const char **value;        /* receives the argument, or NULL for a flag */
    int *flag;                 /* set to 1 when present (flags) */
} sg_cli_opt;

/* Parses `argv` (after the command name): exactly one positional CONFIG, the
 * command's options, and run-option flags (--max_length 4096, --seed 1,
 * --activation_checkpointing, ...) that override the config. Loads CONFIG,
 * applies the overrides, finalizes, and prints config warnings on stderr. */
int sg_cli_load_config(int argc, char **argv, const sg_cli_opt *opts, int nopts,
                       sg_config *cfg, sg_error *err);
/* The same, printing the config's warnings only if print_warnings. */
int sg_cli_load_config_ex(int argc, char **argv, const sg_cli_opt *opts, int nopts,
                          sg_config *cfg, int print_warnings, sg_error *err);

/* The same walk as sg_cli_load_config without loading: CONFIG (NULL if
 * none), and in pass (argc entries) the arguments that are not the
 * command's own options, i.e. the run options and --set with their values,
 * in order, to hand to another program. */
int sg_cli_split_args(int argc, char **argv, const sg_cli_opt *opts, int nopts,
                      const char **config, char **pass, int *npass);

/* Prints the run-option flags shared by the commands (for --help). */
void sg_cli_print_run_flags(void);
/* The same without the run options named in shadowed (n names, without the
 * leading --): a command whose own option of that name takes precedence. */
void sg_cli_print_run_flags_except(const char *const *shadowed, int n);

int sg_cmd_run(int argc, char **argv);
int sg_cmd_graph(int argc, char **argv);
int sg_cmd_compare(int argc, char **argv);

/* The default job's config: $STEPGRAPH_CONFIGS_DIR/default.json, else the
 * source tree's configs/default.json from a build tree, else the installed
 * one. */
void sg_default_config_path(char *buf, size_t n);
int sg_cmd_model(int argc, char **argv);
int sg_cmd_config(int argc, char **argv);
int sg_cmd_simulate(int argc, char **argv);
int sg_cmd_tune(int argc, char **argv);
int sg_cmd_calibrate(int argc, char **argv);
int sg_cmd_fit(int argc, char **argv);

/* Writes `text`-producing callbacks to a file atomically, or to stdout when
 * path is NULL or "-". */
typedef int (*sg_write_fn)(void *ctx, FILE *out);
int sg_cli_write_output(const char *path, sg_write_fn fn, void *ctx, sg_error *err);

/* Renders a DOT file to SVG with Graphviz's `dot`, atomically. */
int sg_render_svg(const char *dot_path, const char *svg_path, sg_error *err);
/* g drawn with style (graph/export.h) through Graphviz into path, atomically. */
struct sg_graph;
struct sg_dot_style;
int sg_render_graph_svg(const struct sg_graph *g, const struct sg_dot_style *style,
                        const char *path, sg_error *err);

#endif /* SG_CLI_H */
