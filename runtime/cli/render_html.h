/* render_html.h - the interactive page of a step graph: one self-contained
 * HTML file (no network) with the folded and the full Graphviz drawings, the
 * graph's data, the critical path, the step's lower bound, and with a trace a
 * timeline of the step (a lane per worker and link). Its script is
 * runtime/cli/graph_page.js, embedded at build time.
 */
#ifndef SG_RENDER_HTML_H
#define SG_RENDER_HTML_H

#include <stdio.h>

#include "common/error.h"
#include "graph/analysis.h"
#include "graph/fold.h"
#include "graph/ir.h"
#include "runtime/trace/trace_read.h"

/* Past this many tasks the page has no unfolded drawing. */
#define SG_HTML_FULL_MAX 2500

typedef struct sg_html_page {
    const char *title; /* "llama-3.1-8b, configs/x.json" */
    const sg_graph *g;
    const sg_summary *s;
    const sg_fold *fold;
    const char *svg_folded, *svg_full; /* Graphviz SVG files to inline (svg_full may be
                                          NULL: too many tasks to draw unfolded) */
    const sg_trace_times *times;       /* NULL without a trace */
    const unsigned char *where;        /* per node, sg_where (NULL: planned places) */
    const int *critical;               /* node ids, first to last */
    int ncritical;
    const char *critical_kind; /* "executed" or "ideal-machine" */
    double critical_s, wait_s; /* its length, and the waits in it */
    double step_s;             /* the traced step's length, 0 without */
    double bound_s;            /* the step's lower bound */
    const char *bound_by;      /* what sets it */
} sg_html_page;

int sg_render_html(const char *path, const sg_html_page *p, sg_error *err);

/* The page of a graph view (runtime/cli/graph_view.h): its folded and full
 * drawings rendered with Graphviz, then the page. */
struct sg_graph_view;
int sg_render_view_html(const struct sg_graph_view *v, const char *title, const char *path,
                        sg_error *err);

/* `run --report` / `simulate --report`: the page of cfg's step with the trace
 * its run or simulation wrote. */
struct sg_config;
int sg_write_report(const struct sg_config *cfg, const char *trace, const char *path,
                    sg_error *err);

/* Pieces for other pages: text with <, >, & and " escaped; the <svg> element
 * of a Graphviz SVG file. */
void sg_html_text(FILE *out, const char *s);
int sg_html_inline_svg(FILE *out, const char *path, sg_error *err);

#endif /* SG_RENDER_HTML_H */
