/* error.h - error codes and messages shared by every stepgraph module.
 *
 * House convention (libuv style): functions return 0 on success or a negative
 * SG_E* code, and fill a caller-provided sg_error with a one-line message that
 * says what was wrong and where (a config error names the JSON path and value).
 */
#ifndef SG_ERROR_H
#define SG_ERROR_H

#include <stddef.h>

enum {
    SG_OK = 0,
    SG_EINVAL = -22, /* bad input: config, model, data, flag */
    SG_ENOMEM = -12,
    SG_EIO = -5,      /* file could not be read or written */
    SG_ENOENT = -2,   /* file or named thing not found */
    SG_ENOTSUP = -95, /* valid request that stepgraph does not support */
};

#define SG_ERROR_MSG_MAX 1024

typedef struct sg_error {
    int code;
    char msg[SG_ERROR_MSG_MAX];
} sg_error;

/* Fills err (may be NULL) with a printf-style message; returns code so callers
 * can write `return sg_error_set(err, SG_EINVAL, "...", ...);`. */
int sg_error_set(sg_error *err, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Prepends context ("while reading X: ") to an existing message. */
int sg_error_prefix(sg_error *err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

void sg_error_clear(sg_error *err);

/* Short name of a code, e.g. "invalid input". */
const char *sg_strerror(int code);

#endif /* SG_ERROR_H */
