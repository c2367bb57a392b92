/* atomic_file.c - temporary file + fsync + rename (see atomic_file.h). */
#define _POSIX_C_SOURCE 200809L
#include "common/atomic_file.h"

#include "common/cleanup.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int sg_atomic_open(sg_atomic_file *f, const char *path, sg_error *err)
{
    memset(f, 0, sizeof *f);
    if (snprintf(f->path, sizeof f->path, "%s", path) >= (int)sizeof f->path ||
        snprintf(f->tmp, sizeof f->tmp, "%s.tmp.XXXXXX", path) >= (int)sizeof f->tmp)
        return sg_error_set(err, SG_EINVAL, "%s: path too long", path);
    int fd = mkstemp(f->tmp);
    if (fd < 0)
        return sg_error_set(err, SG_EIO, "%s: cannot create a file there: %s", path,
                            strerror(errno));
    f->cleanup_slot = sg_cleanup_add(f->tmp) + 1;
    /* mkstemp creates 0600; give the file the mode a plain fopen would */
    mode_t mask = umask(0);
    umask(mask);
    if (fchmod(fd, 0666 & ~mask) != 0) {
        int e = errno;
        close(fd);
        unlink(f->tmp);
        sg_cleanup_forget(f->cleanup_slot - 1);
        f->cleanup_slot = 0;
        f->tmp[0] = '\0';
        return sg_error_set(err, SG_EIO, "%s: %s", path, strerror(e));
    }
    f->fp = fdopen(fd, "w");
    if (!f->fp) {
        int e = errno;
        close(fd);
        unlink(f->tmp);
        sg_cleanup_forget(f->cleanup_slot - 1);
        f->cleanup_slot = 0;
        f->tmp[0] = '\0';
        errno = e;
        return sg_error_set(err, SG_EIO, "%s: %s", path, strerror(errno));
    }
    return SG_OK;
}

int sg_atomic_commit(sg_atomic_file *f, sg_error *err)
{
    if (!f->fp)
        return sg_error_set(err, SG_EINVAL, "%s: file is not open", f->path);
    int bad = fflush(f->fp) != 0 || ferror(f->fp) || fsync(fileno(f->fp)) != 0;
    int saved = errno;
    if (fclose(f->fp) != 0 && !bad) {
        bad = 1;
        saved = errno;
    }
    f->fp = NULL;
    if (!bad && rename(f->tmp, f->path) != 0) {
        bad = 1;
        saved = errno;
    }
    if (bad)
        unlink(f->tmp);
    sg_cleanup_forget(f->cleanup_slot - 1);
    f->cleanup_slot = 0;
    f->tmp[0] = '\0';
    if (bad)
        return sg_error_set(err, SG_EIO, "%s: write failed: %s", f->path, strerror(saved));
    return SG_OK;
}

void sg_atomic_abort(sg_atomic_file *f)
{
    if (f->fp) {
        fclose(f->fp);
        f->fp = NULL;
    }
    if (f->tmp[0]) {
        unlink(f->tmp);
        f->tmp[0] = '\0';
    }
    sg_cleanup_forget(f->cleanup_slot - 1);
    f->cleanup_slot = 0;
}

int sg_atomic_fail(sg_atomic_file *f, int rc, sg_error *err)
{
    int e = errno;
    int stream = f->fp && ferror(f->fp);
    char path[sizeof f->path];
    memcpy(path, f->path, sizeof path);
    sg_atomic_abort(f);
    if (stream && e)
        return sg_error_set(err, rc ? rc : SG_EIO, "%s: write failed: %s", path, strerror(e));
    return sg_error_set(err, rc ? rc : SG_EIO, "%s: write failed", path);
}

int sg_atomic_write_text(const char *path, const char *text, sg_error *err)
{
    sg_atomic_file f;
    int rc = sg_atomic_open(&f, path, err);
    if (rc)
        return rc;
    if (fputs(text, f.fp) < 0 || fputc('\n', f.fp) == EOF)
        return sg_atomic_fail(&f, SG_EIO, err);
    return sg_atomic_commit(&f, err);
}
