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

#ifdef SG_MODEL_H
/* Loads models/NAME.json from the source tree; a failure is a TAP diagnostic. */
static inline int load_model(const char *name, sg_model *m)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/models/%s.json", srcdir(), name);
    sg_error err = {0};
    int rc = sg_model_load(path, m, &err);
    if (rc)
        tap_diag("cannot load %s: %s", path, err.msg);
    return rc;
}
#endif

#ifdef SG_COMPILE_H
/* SuperOffload on a tiny model: bf16, stage 3, every unit gathered,
 * sub-groups small enough to get several. */
static inline void superoffload_spec(sg_step_spec *s, double ratio)
{
    sg_step_spec_defaults(s);
    s->zero_stage = 3;
    s->offload_optimizer = 1;
    s->super_offload = 1;
    s->offload_ratio = ratio;
    s->compute_dtype = SG_BF16;
    s->sub_group_size = 150000;
    s->param_persistence_threshold = 0;
    s->gradient_clipping = 1.0;
    s->seq_len = 64;
}
#endif

#endif /* SG_TEST_UTIL_H */
