/* error.c - error message helpers (see error.h). */
#define _POSIX_C_SOURCE 200809L
#include "common/error.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

int sg_error_set(sg_error *err, int code, const char *fmt, ...)
{
    if (err) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err->msg, sizeof err->msg, fmt, ap);
        va_end(ap);
        err->code = code;
    }
    return code;
}

int sg_error_prefix(sg_error *err, const char *fmt, ...)
{
    if (!err)
        return SG_OK;
    char prefix[SG_ERROR_MSG_MAX], old[SG_ERROR_MSG_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(prefix, sizeof prefix, fmt, ap);
    va_end(ap);
    memcpy(old, err->msg, sizeof old);
    size_t plen = strlen(prefix), olen = strnlen(old, sizeof old - 1);
    if (plen > sizeof err->msg - 1)
        plen = sizeof err->msg - 1;
    if (olen > sizeof err->msg - 1 - plen)
        olen = sizeof err->msg - 1 - plen; /* long messages are cut at the end */
    memcpy(err->msg, prefix, plen);
    memcpy(err->msg + plen, old, olen);
    err->msg[plen + olen] = '\0';
    return err->code;
}

void sg_error_clear(sg_error *err)
{
    if (err) {
        err->code = SG_OK;
        err->msg[0] = '\0';
    }
}

const char *sg_strerror(int code)
{
    switch (code) {
    case SG_OK: return "success";
    case SG_EINVAL: return "invalid input";
    case SG_ENOMEM: return "out of memory";
    case SG_EIO: return "input/output error";
    case SG_ENOENT: return "not found";
    case SG_ENOTSUP: return "not supported";
    default: return "unknown error";
    }
}
