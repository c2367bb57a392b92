/* atomic_file.h - write a file under a temporary name, rename on success.
 *
 * A crash or an error never leaves a half-written file at the final path,
 * and an existing file there is untouched until the new one is complete.
 */
#ifndef SG_ATOMIC_FILE_H
#define SG_ATOMIC_FILE_H

#include <stdio.h>

#include "common/error.h"

typedef struct sg_atomic_file {
    FILE *fp;         /* write here */
    char path[4096];  /* final path */
    char tmp[4096];   /* temporary path in the same directory */
    int cleanup_slot; /* 1 + tmp's slot in common/cleanup.h, 0 for none */
} sg_atomic_file;

int sg_atomic_open(sg_atomic_file *f, const char *path, sg_error *err);
/* Flushes, syncs and renames to the final path. On failure the temporary
 * file is removed and the final path is untouched. */
int sg_atomic_commit(sg_atomic_file *f, sg_error *err);
/* Discards the temporary file. Safe to call after commit or twice. */
void sg_atomic_abort(sg_atomic_file *f);
/* After writing to f->fp failed (rc, or SG_EIO when 0): discards the
 * temporary file and sets "PATH: write failed: REASON" (the stream's errno,
 * e.g. No space left on device, when the stream saw the error). Returns the
 * error code. */
int sg_atomic_fail(sg_atomic_file *f, int rc, sg_error *err);
/* Writes text (followed by a newline) to path atomically. */
int sg_atomic_write_text(const char *path, const char *text, sg_error *err);

#endif /* SG_ATOMIC_FILE_H */
