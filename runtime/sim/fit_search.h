/* fit_search.h - the largest model of a family that fits a machine: the
 * search behind `stepgraph fit`.
 *
 * Candidates are the family's shapes (models/model_family.h) at widths
 * min_hidden, min_hidden + 1024, ... max_hidden. Each is compiled into the
 * config's step graph for the machine (the graph `graph --machine` and
 * `simulate` build) and its peak memory (graph/analysis.h
 * sg_graph_peak_memory, nodes in program order) is held against the
 * machine's GPU and host memory (runtime/sim/sim_fit.h). Memory grows with
 * width, so a binary search over the widths finds the widest that fits; then
 * at the next width, which does not fit, a binary search over fewer layers
 * than the rule's finds the deepest model there that fits, the answer when
 * it has more parameters. Every compiled candidate gets the step's lower
 * bound on the machine (sg_step_lower_bound) and the TFLOPS it implies
 * (the seed's formula, as the step log's TFLOPS, over that time).
 */
#ifndef SG_SIM_FIT_SEARCH_H
#define SG_SIM_FIT_SEARCH_H

#include <stdint.h>

#include "common/error.h"
#include "models/model.h"
#include "runtime/config/config.h"
#include "runtime/config/machine.h"

typedef struct sg_fit_point {
    int64_t hidden, layers, params;
    int on_rule; /* layers from the family's rule (else: fewer) */
    int fits;
    double gpu_bytes, host_bytes; /* the step's peaks */
    double gpu_capacity, host_capacity;
    double disk_bytes, disk_capacity; /* ZeRO-Infinity ("nvme"): the state on disk, the
                                         machine's disk; host_bytes holds its RAM working set */
    double bound_s;                   /* the step's lower bound on the machine */
    double tflops;                    /* the step log's TFLOPS (the seed's formula,
                                    * models/step_rates.h) at bound_s; NAN if unknown */
    const char *bound_by;             /* "GPU compute", "CPU work", ... */
    char why[256];                    /* when it does not fit */
    int not_compiled;                 /* too large to compile: Adam's fp32 state alone exceeds
                                      the rank's memories (why says so); no peaks, no bound */
} sg_fit_point;

typedef struct sg_fit_result {
    sg_fit_point *points; /* in the order evaluated */
    int npoints, cap;
    int best;         /* the largest that fits (index), -1: none */
    int best_on_rule; /* the widest on the rule that fits, -1: none */
    int hit_max;      /* the widest candidate searched fits: search wider */
} sg_fit_result;

/* Called after each candidate is evaluated (progress output). */
typedef void (*sg_fit_progress_fn)(const sg_fit_point *p, void *ctx);

/* Searches family "llama" (the only one) from template tmpl (its vocabulary,
 * rope, head_chunk_tokens...) under cfg on machine mach. min_hidden and
 * max_hidden: multiples of 1024 within the family's range, min <= max.
 * SG_EINVAL with a message for bad arguments; a candidate that does not
 * compile stops the search with the compiler's message. */
int sg_fit_search(const sg_config *cfg, const sg_machine *mach, const char *family,
                  const sg_model *tmpl, int64_t min_hidden, int64_t max_hidden,
                  sg_fit_progress_fn progress, void *ctx, sg_fit_result *out, sg_error *err);
void sg_fit_result_free(sg_fit_result *r);

#endif /* SG_SIM_FIT_SEARCH_H */
