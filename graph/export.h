/* export.h - writes a step graph as DOT, JSON or a text summary.
 *
 * JSON schema (documented in the README, "Graph JSON"):
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
#include "graph/ir.h"

/* Human-readable names of units: "embed", "layer3", "head". */
void sg_unit_label(const sg_graph *g, int unit, char *buf, size_t size);

int sg_export_dot(const sg_graph *g, FILE *out);
int sg_export_json(const sg_graph *g, const sg_summary *s, FILE *out);
int sg_summary_print(const sg_summary *s, FILE *out);
int sg_summary_json(const sg_summary *s, FILE *out);

/* Fill colour used for a kind in DOT (and the trace viewer legend). */
const char *sg_op_kind_color(sg_op_kind k);

#endif /* SG_EXPORT_H */
