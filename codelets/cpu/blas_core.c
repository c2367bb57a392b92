/* blas_core.c - see blas_core.h. */
#define _GNU_SOURCE
#include "codelets/cpu/blas_core.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cblas.h>

/* Set by sg_blas_core_select() before it re-executes: what OpenBLAS chose on
 * its own. Its presence also says the re-execution already happened. */
#define DETECTED_VAR "STEPGRAPH_BLAS_DETECTED"

#if defined(__x86_64__) && defined(__GNUC__)
/* OpenBLAS's x86 core names older than Haswell (no AVX2/FMA kernels), as
 * openblas_get_corename() spells them. */
static int older_than_haswell(const char *name)
{
    static const char *const old[] = {"Unknown",   "Katmai",        "Coppermine",  "Northwood",
                                      "Prescott",  "Banias",        "Atom",        "Core2",
                                      "Penryn",    "Dunnington",    "Nehalem",     "Sandybridge",
                                      "Opteron",   "Opteron(SSE3)", "Barcelona",   "Bobcat",
                                      "Bulldozer", "Piledriver",    "Steamroller", "Excavator"};
    for (size_t i = 0; i < sizeof old / sizeof *old; i++)
        if (!strcasecmp(name, old[i]))
            return 1;
    return 0;
}

static int avx512_kernels(const char *name)
{
    return !strcasecmp(name, "SkylakeX") || !strcasecmp(name, "Cooperlake") ||
           !strcasecmp(name, "SapphireRapids");
}
#endif /* x86: elsewhere OpenBLAS's own choice is kept */

const char *sg_blas_core_better(const char *current)
{
#if defined(__x86_64__) && defined(__GNUC__)
    if (!current)
        return NULL;
    __builtin_cpu_init();
    int avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vl") &&
                 __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512dq");
    int avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    const char *best = NULL;
    if (avx512)
        best = __builtin_cpu_supports("avx512bf16") ? "Cooperlake" : "SkylakeX";
    else if (avx2)
        best = "Haswell";
    if (!best || avx512_kernels(current))
        return NULL;
    /* Haswell-class kernels (Haswell, Zen) are kept unless the CPU has
     * AVX-512; anything older is replaced by the best the CPU runs */
    if (older_than_haswell(current) || (avx512 && !strcasecmp(current, "Haswell")))
        return best;
    return NULL;
#else
    (void)current;
    return NULL;
#endif
}

void sg_blas_core_select(char **argv)
{
#ifdef OPENBLAS_VERSION
    if (getenv("OPENBLAS_CORETYPE") || getenv(DETECTED_VAR))
        return;
    const char *mine = openblas_get_corename();
    const char *better = sg_blas_core_better(mine);
    if (!better)
        return;
    char self[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    if (n <= 0)
        return;
    self[n] = '\0';
    if (setenv("OPENBLAS_CORETYPE", better, 1) || setenv(DETECTED_VAR, mine, 1))
        return;
    fflush(NULL);
    execv(self, argv);
    /* the exec failed: run on with OpenBLAS's own choice */
    unsetenv("OPENBLAS_CORETYPE");
    unsetenv(DETECTED_VAR);
#else
    (void)argv;
#endif
}

void sg_blas_core_describe(char *out, size_t size)
{
#ifdef OPENBLAS_VERSION
    /* OPENBLAS_VERSION is " OpenBLAS 0.3.21 ": without its spaces */
    char version[64];
    const char *v = OPENBLAS_VERSION;
    while (*v == ' ')
        v++;
    snprintf(version, sizeof version, "%s", v);
    for (size_t n = strlen(version); n > 0 && version[n - 1] == ' '; n--)
        version[n - 1] = '\0';
    const char *now = openblas_get_corename();
    const char *detected = getenv(DETECTED_VAR);
    const char *forced = getenv("OPENBLAS_CORETYPE");
    if (detected && forced)
        snprintf(out, size, "BLAS: %s, kernels %s (chosen by stepgraph; OpenBLAS's own choice: %s)",
                 version, now, detected);
    else if (forced)
        snprintf(out, size, "BLAS: %s, kernels %s (OPENBLAS_CORETYPE=%s)", version, now, forced);
    else
        snprintf(out, size, "BLAS: %s, kernels %s (OpenBLAS's own choice)", version, now);
#else
    snprintf(out, size, "BLAS: not OpenBLAS (its own kernel choice)");
#endif
}
