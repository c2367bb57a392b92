/* test_util.h - small helpers shared by the TAP test programs: where the
 * source tree and the reference Python are, and temporary-directory cleanup. */
#ifndef SG_TEST_UTIL_H
#define SG_TEST_UTIL_H

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* The source tree (automake sets SG_SRCDIR to $(srcdir)). */
static inline const char *srcdir(void)
{
    const char *s = getenv("SG_SRCDIR");
    return s && *s ? s : ".";
}

/* The interpreter that has Debian's python3-torch (found by configure). */
static inline const char *system_python(void)
{
    const char *s = getenv("SYSTEM_PYTHON");
    return s && *s ? s : "/usr/bin/python3";
}

/* Removes a file or a directory tree (test scratch space only). */
static inline void rm_tree(const char *path)
{
    DIR *d = opendir(path);
    if (!d) {
        unlink(path);
        return;
    }
    struct dirent *e;
    while ((e = readdir(d))) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
            continue;
        char p[4096];
        snprintf(p, sizeof p, "%s/%s", path, e->d_name);
        rm_tree(p);
    }
    closedir(d);
    rmdir(path);
}

#endif /* SG_TEST_UTIL_H */
