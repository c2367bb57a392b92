/* forward_only.h - the forward of a step graph alone: what an evaluation runs.
 *
 * An evaluation (runtime/train/eval.h) needs the loss of the model's current
 * weights on held-out tokens: the forward of its micro-steps and nothing else
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
 * success), in program order, the forward of every micro-step of step: its
 * forward-phase nodes (graph/op_kinds.h: the units' forwards, MoE experts and
 * combines) and the transfers that feed them (an all-gather or a
 * host-to-device fetch of a micro-step whose output a forward-phase node
 * reads next, not a backward's), with only the buffers those nodes access,
 * every field kept. step must be finalized and compiled without activation
 * checkpointing (a checkpointed MoE layer's recompute runs its experts
 * again, forward-phase nodes inside the backward): SG_EINVAL when it has a
 * recompute node or no forward node. */
int sg_graph_forward_only(const sg_graph *step, sg_graph *out, sg_error *err);

#endif /* SG_FORWARD_ONLY_H */
