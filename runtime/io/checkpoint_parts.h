/* checkpoint_parts.h - the optimizer partitions of a checkpoint written by
 * several ranks (docs/ranks.md, "Checkpoints").
 *
 * With dp ranks, each rank r writes into the step directory
 *   optim.rank<r>-of-<dp>.safetensors
 * holding, for every unit u of which it owns a part, elements [lo, hi) of
 * the unit's parameters (its tensors concatenated in sg_model_unit_tensors
 * order) as three F32 tensors "unit.<u>.master" (the exact fp32 parameters),
 * "unit.<u>.exp_avg" and "unit.<u>.exp_avg_sq" (Adam's moments), with
 * __metadata__ "unit.<u>.offset" = lo, "partition" = "<r> of <dp>", and the
 * training state's metadata (step, loss scaler, data position, RNG, config
 * hash: runtime/io/weights.h). A unit every rank holds whole is in rank 0's
 * file only. Reading needs no MPI: the files of all ranks together give the
 * whole optimizer state, which any number of ranks then shards again.
 */
#ifndef SG_CHECKPOINT_PARTS_H
#define SG_CHECKPOINT_PARTS_H

#include "runtime/io/weights.h"

/* "optim.rank<rank>-of-<dp>.safetensors" into out. */
void sg_checkpoint_part_name(char *out, size_t size, int rank, int dp);

/* Elements [lo, lo + n) of unit u, (to_tensors 0) copied out of the
 * per-tensor arrays data (ntensors tensors in unit order, tensor i of unit
 * unit[i]) into buf, or (to_tensors 1) from buf into them. */
void sg_unit_slice(int ntensors, const sg_tensor_info *info, const int *unit, float *const *data,
                   int u, int64_t lo, int64_t n, float *buf, int to_tensors);

/* Writes rank's partition into dir: for unit u, elements [lo[u], hi[u])
 * (none when hi[u] <= lo[u]) of w (the masters) and st's moments, with st's
 * metadata. Atomic. */
int sg_checkpoint_write_part(const char *dir, int rank, int dp, const sg_model *m,
                             const sg_weights *w, const sg_train_state *st, const int64_t *lo,
                             const int64_t *hi, sg_error *err);

/* The number of ranks whose partitions dir holds (from the name of rank 0's
 * file), or 0 when it holds none. */
int sg_checkpoint_parts_dp(const char *dir);

/* Reads the dp partitions of dir: every parameter's master into w (already
 * allocated, e.g. holding the weights file's values), and st (allocated
 * here) with the moments and the metadata. Refused, naming the file: a
 * missing, unreadable or malformed partition, one of another step, model or
 * partition count, or partitions that do not cover every parameter once. */
int sg_checkpoint_read_parts(const char *dir, int dp, const sg_model *m, sg_weights *w,
                             sg_train_state *st, sg_error *err);

#endif /* SG_CHECKPOINT_PARTS_H */
