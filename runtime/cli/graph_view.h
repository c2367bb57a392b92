/* graph_view.h - a config's step graph with everything its pictures and
 * pages show: the summary on a machine's cost model, the folding, the
 * critical path (ideal, or executed from a trace), the step's lower bound and,
 * with a trace, per-node times and the place (CPU or GPU worker) each task
 * ran. Shared by `graph` and `compare`.
 */
#ifndef SG_GRAPH_VIEW_H
#define SG_GRAPH_VIEW_H

#include "graph/analysis.h"
#include "graph/export.h"
#include "graph/fold.h"
#include "models/model.h"
#include "runtime/config/config.h"
#include "runtime/trace/trace_read.h"

typedef struct sg_graph_view {
    sg_model *model;
    sg_graph g;
    sg_cost_model cm;
    struct sg_machine *mach; /* NULL: the ideal GH200 */
    char machine[64];        /* the cost model's machine ("" = ideal GH200) */
    sg_summary s;
    sg_fold fold; /* empty when unfolded */
    sg_trace_times times;
    int have_times;
    double *heat;         /* per node, with times */
    unsigned char *where; /* per node, sg_where: where it ran (the trace's worker,
                                      CPU or GPU), else where it is planned to run */
    int *critical, ncritical;
    unsigned char *critical_mask;
    const char *critical_kind; /* "executed" or "ideal-machine" */
    double critical_s, wait_s, step_s;
    double bound_s;
    const char *bound_by;
    sg_dot_style style; /* fold (unless unfolded), heat, critical path, places */
} sg_graph_view;

/* Builds the view of cfg's step: on cfg->run.machine's cost model (ideal GH200
 * without), folded unless unfold, with the trace at times_path (NULL: none). */
int sg_graph_view_build(const sg_config *cfg, int unfold, const char *times_path, sg_graph_view *v,
                        sg_error *err);
void sg_graph_view_free(sg_graph_view *v);

#endif /* SG_GRAPH_VIEW_H */
