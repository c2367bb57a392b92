/* cli.h - shared command-line handling of the stepgraph commands. */
#ifndef SG_CLI_H
#define SG_CLI_H

#include <stddef.h>
#include <stdio.h>

#include "common/error.h"
#include "runtime/config/config.h"
#include "runtime/config/config_args.h" /* sg_cli_opt, sg_cli_load_config */

int sg_cmd_run(int argc, char **argv);
int sg_cmd_graph(int argc, char **argv);
int sg_cmd_compare(int argc, char **argv);
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
