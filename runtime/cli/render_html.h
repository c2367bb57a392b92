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

typedef struct sg_html_page {
    const char *title;                 /* "llama-3.1-8b, configs/x.json" */
    const sg_graph *g;
    const sg_summary *s;
    const sg_fold *fold;
    const char *svg_folded, *svg_full; /* Graphviz SVG files to inline */
    const sg_trace_times *times;       /* NULL without a trace */
    const int *critical;               /* node ids, first to last */
    int ncritical;
    const char *critical_kind;         /* "executed" or "ideal-machine" */
    double critical_s, wait_s;         /* its length, and the waits in it */
    double step_s;                     /* the traced step's length, 0 without */
    double bound_s;                    /* the step's lower bound */
    const char *bound_by;              /* what sets it */
} sg_html_page;

int sg_render_html(const char *path, const sg_html_page *p, sg_error *err);

/* Pieces for other pages: text with <, >, & and " escaped; the <svg> element
 * of a Graphviz SVG file. */
void sg_html_text(FILE *out, const char *s);
int sg_html_inline_svg(FILE *out, const char *path, sg_error *err);

#endif /* SG_RENDER_HTML_H */
