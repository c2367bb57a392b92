/* loss_mask.h - which tokens of a token shard are trained as targets.
 *
 * Instruction data (scripts/prepare_instruct.py) trains on the responses
 * only: prompt and padding tokens are inputs but not targets, as labels of
 * -100 are in transformers. Beside a shard SHARD.bin the preparation writes
 * SHARD.bin.mask: a header of 256 little-endian int32 (header[0] magic
 * SG_LOSS_MASK_MAGIC, header[1] version 1, header[2] the shard's token
 * count) and then one byte per token, 1 when that token is a target to
 * train on, 0 when it is not. The loader turns the target of a position
 * whose next token has mask 0 into -1, which the loss ignores.
 *
 * Functions return 0 or a negative SG_E* code (common/error.h).
 */
#ifndef SG_LOSS_MASK_H
#define SG_LOSS_MASK_H

#include <stddef.h>
#include <stdint.h>

#include "common/error.h"

#define SG_LOSS_MASK_SUFFIX ".mask"
#define SG_LOSS_MASK_MAGIC 20261128
#define SG_LOSS_MASK_VERSION 1

typedef struct sg_loss_mask {
    void *map; /* the whole side file, read-only; NULL: no mask */
    size_t map_len;
    const unsigned char *bits; /* ntokens bytes, 0 or 1 */
    uint64_t trained;          /* tokens with mask 1 */
} sg_loss_mask;

/* Maps SHARD_PATH.mask when it exists (m->map NULL and 0 when it does not)
 * and checks it against the shard's ntokens: SG_EINVAL naming the file and
 * the header field or the first byte that is neither 0 nor 1. */
int sg_loss_mask_open(sg_loss_mask *m, const char *shard_path, uint64_t ntokens, sg_error *err);

void sg_loss_mask_close(sg_loss_mask *m);

#endif /* SG_LOSS_MASK_H */
