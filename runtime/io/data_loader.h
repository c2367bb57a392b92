/* data_loader.h - training batches from llm.c token shards or raw text.
 *
 * Sources:
 *   - llm.c token shards (".bin"): a header of 256 little-endian int32,
 *     header[0] magic, header[1] version, header[2] token count, then the
 *     tokens. Magic 20240520 with version 1 holds uint16 tokens (GPT-2),
 *     magic 20240801 with version 7 holds uint32 tokens (Llama 3), as
 *     written by llm.c's dev/data/data_common.py. The file size must be
 *     exactly 1024 + count x token size.
 *   - any other file is raw text read as byte-level tokens (vocabulary 256:
 *     each byte is one token).
 *   - a glob pattern ("shards/train_*.bin") or a list of files: each file is
 *     a shard; text and token shards may be mixed.
 *   - a token shard may have a loss mask beside it (SHARD.bin.mask,
 *     runtime/io/loss_mask.h): instruction data, whose prompt and padding
 *     tokens are not targets.
 *
 * Windows: shard s of n tokens holds (n - 1) / T windows; window i covers
 * tokens [i*T, i*T + T] (T + 1 tokens: inputs are the first T, targets the
 * last T). Windows never cross a shard boundary and never overlap. The
 * windows of all shards are numbered in file order and visited in a random
 * permutation drawn from seed + epoch (Fisher-Yates on xoshiro256**, so the
 * order is the same on every machine); an epoch ends when every window was
 * used once, then the next epoch uses a new permutation. A batch that
 * reaches the end of an epoch continues in the next one.
 *
 * Data parallelism: with world ranks, a global batch is world x B
 * consecutive windows of the permutation; rank r reads the r-th B of them.
 *
 * The position (epoch, index of the next window in that epoch's order) can
 * be saved and restored: a loader seeked to a saved position returns exactly
 * the batches the original loader returned after that point.
 *
 * Files are memory-mapped read-only. Opening validates every file (header
 * fields, size, every token < vocab_size) so a bad file is reported before
 * training starts, with a message naming the file and the field or the
 * token position.
 */
#ifndef SG_DATA_LOADER_H
#define SG_DATA_LOADER_H

#include <stddef.h>
#include <stdint.h>

#include "common/error.h"
#include "runtime/io/loss_mask.h"

#define SG_DATA_HEADER_INTS 256
#define SG_DATA_MAGIC_U16 20240520 /* llm.c GPT-2 shards, version 1 */
#define SG_DATA_MAGIC_U32 20240801 /* llm.c Llama-3 shards, version 7 */
#define SG_DATA_VERSION_U16 1
#define SG_DATA_VERSION_U32 7

/* The Debian package that provides the default training text, and the text
 * inside it (vim's version 8 release notes: 1.6 MB of English). */
#define SG_DATA_DEFAULT_PACKAGE "vim-runtime"
#define SG_DATA_DEFAULT_GLOB "/usr/share/vim/vim*/doc/version8.txt"

typedef enum sg_data_kind {
    SG_DATA_TEXT = 0, /* bytes are tokens */
    SG_DATA_U16 = 1,  /* llm.c shard, magic 20240520 */
    SG_DATA_U32 = 2,  /* llm.c shard, magic 20240801 */
} sg_data_kind;

typedef struct sg_data_opts {
    int64_t batch;      /* B: windows per batch and rank (>= 1) */
    int64_t seq_len;    /* T: tokens per window, targets shifted by one (>= 1) */
    int64_t vocab_size; /* every token must be < vocab_size; 0: no check */
    uint64_t seed;      /* permutation of epoch e is drawn from seed + e */
    int shuffle;        /* 0: windows in file order every epoch */
    int rank, world;    /* data-parallel slice (0, 1 for a single process) */
} sg_data_opts;

/* B 4, T 256, vocab 0, seed 42, shuffle on, rank 0 of 1. */
void sg_data_opts_default(sg_data_opts *o);

/* Where the next batch starts. nwindows identifies the data and T it was
 * taken with (a position is refused by a loader with a different count). */
typedef struct sg_data_pos {
    uint64_t epoch;
    uint64_t index; /* windows of this epoch already used (all ranks) */
    uint64_t nwindows;
} sg_data_pos;

typedef struct sg_data_file {
    char *path;
    sg_data_kind kind;
    void *map; /* whole file, read-only */
    size_t map_len;
    const unsigned char *tokens; /* first token inside map */
    uint64_t ntokens;
    uint64_t nwindows; /* (ntokens - 1) / T */
    sg_loss_mask mask; /* SHARD.bin.mask (loss_mask.h), or none (mask.map NULL) */
} sg_data_file;

typedef struct sg_data_loader {
    sg_data_opts opts;
    int nfiles;
    sg_data_file *files;
    uint64_t *first_window; /* (nfiles + 1) prefix sums of nwindows */
    uint64_t ntokens;       /* all files */
    uint64_t nwindows;      /* all files */
    uint32_t *perm;         /* order of perm_epoch (NULL without shuffle) */
    uint64_t perm_epoch;
    int perm_valid;
    sg_data_pos pos;
} sg_data_loader;

/* Opens a file or a glob pattern (a spec containing '*', '?' or '[' is a
 * pattern; the matches are sorted). Errors: SG_ENOENT (no such file, no
 * match), SG_EIO (unreadable), SG_EINVAL (bad file or options). On error
 * dl is left closed. */
int sg_data_open(sg_data_loader *dl, const char *spec, const sg_data_opts *opts, sg_error *err);

/* Same from an explicit list of n files, in this order. */
int sg_data_open_files(sg_data_loader *dl, const char *const *paths, int n,
                       const sg_data_opts *opts, sg_error *err);

void sg_data_close(sg_data_loader *dl);

/* Fills the next batch and advances:
 *   inputs  (B, T) int32, row b = window tokens [0, T)
 *   targets (B, T) int32, row b = window tokens [1, T]; -1 (ignored by the
 *           loss) where the shard's loss mask marks that token untrained
 * Either may be NULL (skip a batch). Errors only if a file changed under
 * the mapping (a token out of the vocabulary). */
int sg_data_next(sg_data_loader *dl, int32_t *inputs, int32_t *targets, sg_error *err);

sg_data_pos sg_data_tell(const sg_data_loader *dl);

/* Restores a position from sg_data_tell (possibly of another process).
 * SG_EINVAL when pos.nwindows differs from this loader's (other data or
 * other T) or pos.index is out of range. */
int sg_data_seek(sg_data_loader *dl, sg_data_pos pos, sg_error *err);

/* The files with a loss mask: their count (0: none), the tokens the masks
 * mark as targets and the tokens of those files. */
int sg_data_mask_stats(const sg_data_loader *dl, uint64_t *trained, uint64_t *tokens);

/* Global window number of row b of the next batch (for tests and logs). */
uint64_t sg_data_peek_window(sg_data_loader *dl, int64_t b);

/* Writes the path of the default training text (the newest match of
 * SG_DATA_DEFAULT_GLOB) into buf. SG_ENOENT, with a message saying which
 * Debian package to install, when it is absent. */
int sg_data_default_text(char *buf, size_t size, sg_error *err);

#endif /* SG_DATA_LOADER_H */
