/* test_util.h - small helpers shared by the TAP test programs: where the
 * source tree and the reference Python are, and temporary-directory cleanup. */
#ifndef SG_TEST_UTIL_H
#define SG_TEST_UTIL_H

#include <dirent.h>
#include <math.h>
#include <stdint.h>
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

/* Deterministic random numbers for test inputs (splitmix64); a test sets
 * g_rng to its own seed. */
static uint64_t g_rng __attribute__((unused)) = 0x5eedc0ffee123457ull;

static inline uint64_t rng_u64(void)
{
    uint64_t z = (g_rng += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static inline double rng_unit(void) /* [0, 1) */
{
    return (double)(rng_u64() >> 11) * 0x1.0p-53;
}

static inline float rng_normal(void) /* Box-Muller */
{
    double u = rng_unit(), v = rng_unit();
    return (float)(sqrt(-2.0 * log(1.0 - u)) * cos(2.0 * 3.14159265358979323846 * v));
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
        size_t lp = strlen(path), le = strlen(e->d_name);
        char *p = malloc(lp + le + 2);
        if (!p)
            continue;
        memcpy(p, path, lp);
        p[lp] = '/';
        memcpy(p + lp + 1, e->d_name, le + 1);
        rm_tree(p);
        free(p);
    }
    closedir(d);
    rmdir(path);
}

#if defined(_XOPEN_SOURCE) || defined(_POSIX_C_SOURCE)
#include <errno.h>
#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>

extern char **environ;

/* Runs argv (searched in PATH); its stdout goes to our stderr (our stdout is
 * TAP), or both to /dev/null when quiet. Returns the exit status, or -1. */
static inline int run_program(char *const argv[], int quiet)
{
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    if (quiet) {
        posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
        posix_spawn_file_actions_addopen(&fa, 2, "/dev/null", O_WRONLY, 0);
    } else {
        posix_spawn_file_actions_adddup2(&fa, 2, 1);
    }
    pid_t pid;
    int rc = posix_spawnp(&pid, argv[0], &fa, NULL, argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    if (rc != 0)
        return -1;
    int status;
    while (waitpid(pid, &status, 0) < 0)
        if (errno != EINTR)
            return -1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

/* Creates the scratch directory $TMPDIR/PREFIX.XXXXXX (default /tmp) into
 * dir; returns 0, or -1 when it cannot. */
static inline int make_test_dir(char *dir, size_t size, const char *prefix)
{
    const char *tmp = getenv("TMPDIR");
    snprintf(dir, size, "%s/%s.XXXXXX", tmp && *tmp ? tmp : "/tmp", prefix);
    return mkdtemp(dir) ? 0 : -1;
}

/* For tests against PyTorch: 1 if $SYSTEM_PYTHON lacks numpy or torch (skip
 * all), -1 if the scratch directory $TMPDIR/PREFIX.XXXXXX cannot be made
 * (bail out; a message is printed), else 0 with its path in root. */
static inline int torch_test_begin(char *root, size_t size, const char *prefix)
{
    char *probe[] = {(char *)system_python(), "-c", "import numpy, torch", NULL};
    if (run_program(probe, 1) != 0)
        return 1;
    if (make_test_dir(root, size, prefix)) {
        printf("Bail out! mkdtemp %s: %s\n", root, strerror(errno));
        return -1;
    }
    return 0;
}
#endif

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

/* ---- host buffers (a failed allocation ends the test: "Bail out!") ------- */

static inline void *xmalloc(size_t bytes)
{
    void *p = malloc(bytes ? bytes : 1);
    if (!p) {
        printf("Bail out! out of memory\n");
        exit(1);
    }
    return p;
}

static inline float *alloc_f32(size_t n)
{
    return (float *)xmalloc(n * sizeof(float));
}

static inline float *dup_f32(const float *src, size_t n)
{
    float *p = alloc_f32(n);
    memcpy(p, src, n * sizeof *p);
    return p;
}

/* n floats, all NaN: outputs a kernel must overwrite. */
static inline float *nans(size_t n)
{
    float *p = alloc_f32(n);
    for (size_t i = 0; i < n; i++)
        p[i] = NAN;
    return p;
}

#if defined(SG_CODELETS_CPU_OPS_H) && defined(SG_IR_H)
/* x (n) = the values dtype dt can hold (round to nearest even): what a
 * kernel sees of x once it is stored in dt. */
/* fp32 <-> the bits of a 16-bit dtype (bf16 or f16). */
static inline uint16_t to16(float x, sg_dtype dt)
{
    return dt == SG_BF16 ? sg_f32_to_bf16(x) : sg_f32_to_f16(x);
}

static inline float from16(uint16_t h, sg_dtype dt)
{
    return dt == SG_BF16 ? sg_bf16_to_f32(h) : sg_f16_to_f32(h);
}

static inline void round_dt(float *x, size_t n, sg_dtype dt)
{
    if (dt != SG_F32)
        for (size_t i = 0; i < n; i++)
            x[i] = from16(to16(x[i], dt), dt);
}
#endif

#endif /* SG_TEST_UTIL_H */
