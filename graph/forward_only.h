/* forward_only.h - the forward of a step graph alone: what an evaluation runs.
 *
 * An evaluation (runtime/train/eval.h) needs the loss of the model's current
 * weights on held-out tokens: the forward of one micro-step and nothing else
 * (no backward, no gradient buffers, no optimizer node or state). Rather than
 * a second compiler, the forward is cut out of a compiled step: its nodes
 * are the step's own (stage-3 all-gathers and parameter fetches included),
 * named and accessing buffers named as in the step, so a lowering that
 * shares the step's buffers by name (runtime/exec/lower.h) runs it on the
 * training state without copying a weight.
 *
 * Pure C, no StarPU.
 */
#ifndef SG_FORWARD_ONLY_H
#define SG_FORWARD_ONLY_H

#include "common/error.h"
#include "graph/ir.h"

/* Copies into out (initialised by the caller with sg_graph_init; finalized on
 * success) the nodes of step's micro-step 0 in program order up to its last
 * forward-phase node (graph/op_kinds.h: the units' forwards, MoE experts and
 * combines) with the transfers among them (all-gathers, host-to-device
 * fetches), and only the buffers those nodes access. step must be a
 * finalized graph; SG_EINVAL when it has no forward node, or when a node of
 * another kind (a backward, an optimizer node) falls inside that range. */
int sg_graph_forward_only(const sg_graph *step, sg_graph *out, sg_error *err);

#endif /* SG_FORWARD_ONLY_H */
