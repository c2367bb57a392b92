/* export.h - writes a step graph as DOT, JSON or a text summary.
 *
 * JSON schema (documented in docs/graph.md, "Graph JSON"):
 * {"nodes":[{"id","name","kind","layer","micro_step","subgroup","device",
 *            "link","flops","bytes","bytes_read","bytes_written","link_bytes",
 *            "buffers":[{"name","mode","bytes","space"}...]}...],
 *  "edges":[[from,to]...],
 *  "summary":{...}}
 * `layer` is the unit index (0 embedding, 1..L decoder layers, L+1 head) or
 * null; `bytes` = bytes_read + bytes_written.
 */
#ifndef SG_EXPORT_H
#define SG_EXPORT_H

#include <stdio.h>

#include "graph/analysis.h"
#include "graph/fold.h"
#include "graph/ir.h"
#include "graph/phase_layout.h"

int sg_export_dot(const sg_graph *g, FILE *out);
/* The same with fold's groups drawn as one box each (graph/fold.h), left to
 * right; every node has the SVG id "nID", every group "fG". NULL = unfolded. */
struct sg_fold;
int sg_export_dot_folded(const sg_graph *g, const struct sg_fold *fold, FILE *out);

/* How to draw (graph/phase_layout.h has the grid and the places): folding
 * (NULL: none); measured times as a red share of each node's width, from the
 * left (heat[i] in [0, 1], the longest task 1; < 0: not in the trace, drawn
 * dashed; NULL: no times); the critical path outlined (critical[i] != 0;
 * NULL: none); where each node ran (sg_where values; NULL: the planned
 * place). Fill = where a node runs, shape = its phase (forward, backward,
 * optimizer, transfer), its kind written in its label as "[kind]"; the
 * legend explains both. */
typedef struct sg_dot_style {
    const struct sg_fold *fold;
    const double *heat;
    const unsigned char *critical;
    const unsigned char *where;
} sg_dot_style;
int sg_export_dot_styled(const sg_graph *g, const sg_dot_style *st, FILE *out);
int sg_export_json(const sg_graph *g, const sg_summary *s, FILE *out);
int sg_summary_print(const sg_summary *s, FILE *out);
int sg_summary_json(const sg_summary *s, FILE *out);

/* s as a JSON string, quoted and escaped. */
void sg_json_write_string(FILE *out, const char *s);

/* Fill colour used for a kind in DOT (and the trace viewer legend). */
const char *sg_op_kind_color(sg_op_kind k);

#endif /* SG_EXPORT_H */
