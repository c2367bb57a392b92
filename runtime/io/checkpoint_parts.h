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

/* Where a partition's values come from, a unit's range at a time:
 * fill(ctx, set, u, lo, n, out) writes elements [lo, lo + n) of unit u of
 * set (runtime/io/weights.h: SG_SET_WEIGHTS for the fp32 masters,
 * SG_SET_EXP_AVG, SG_SET_EXP_AVG_SQ) into out, non-zero on failure. A save
 * reads them back from StarPU's buffers (runtime/exec/exec.h). */
typedef struct sg_unit_source {
    int (*fill)(void *ctx, int set, int u, int64_t lo, int64_t n, float *out);
    void *ctx;
} sg_unit_source;

/* Writes rank's partition into dir: for unit u, elements [lo[u], hi[u])
 * (none when hi[u] <= lo[u]) of the masters and moments src gives, with st's
 * metadata. Holds one unit's range at a time. Atomic; a failing fill leaves
 * no file and names the tensor. */
int sg_checkpoint_write_part(const char *dir, int rank, int dp, const sg_model *m,
                             const sg_train_state *st, const sg_unit_source *src, const int64_t *lo,
                             const int64_t *hi, sg_error *err);

/* The number of ranks whose partitions dir holds (from the name of rank 0's
 * file), or 0 when it holds none. */
int sg_checkpoint_parts_dp(const char *dir);

/* The dp partitions of dir, open, read a range at a time. sg_parts_open
 * checks everything but the values and fills st's metadata (step, scaler,
 * data position, RNG, config hash, ranks = dp; no moments). Refused, naming
 * the file: a missing, unreadable or malformed partition, one of another
 * step, model or partition count, or partitions that do not cover every
 * parameter once. sg_parts_read: elements [lo, lo + n) of unit u of set
 * (as sg_unit_source) into out from the partitions that hold them, checked
 * finite (second moments >= 0; an error names the file, the tensor and the
 * element); the pages read are given back to the file. */
typedef struct sg_parts_reader {
    int dp, nunits;
    sg_st_file *files;      /* (dp) open */
    int64_t *lo;            /* (dp x nunits) where rank r's part of unit u starts */
    const sg_st_tensor **t; /* (dp x nunits x 3) its master, exp_avg, exp_avg_sq;
                                     * NULL: rank r holds none of unit u */
} sg_parts_reader;

int sg_parts_open(const char *dir, int dp, const sg_model *m, sg_train_state *st,
                  sg_parts_reader *r, sg_error *err);
int sg_parts_read(const sg_parts_reader *r, int set, int u, int64_t lo, int64_t n, float *out,
                  sg_error *err);
void sg_parts_close(sg_parts_reader *r);

#endif /* SG_CHECKPOINT_PARTS_H */
