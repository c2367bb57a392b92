/* malloc_tune.c - glibc's malloc keeps step-local memory (malloc_tune.h). */
#include "runtime/exec/malloc_tune.h"

#include <stdlib.h>
#include <string.h>
#if defined(__GLIBC__)
#include <malloc.h>
#endif

/* the environment already says how malloc should behave */
static int environment_sets_malloc(void)
{
    const char *t = getenv("GLIBC_TUNABLES");
    if (t && strstr(t, "glibc.malloc."))
        return 1;
    static const char *const names[] = {"MALLOC_TOP_PAD_",        "MALLOC_MMAP_THRESHOLD_",
                                        "MALLOC_TRIM_THRESHOLD_", "MALLOC_MMAP_MAX_",
                                        "MALLOC_ARENA_MAX",       "MALLOC_ARENA_TEST"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (getenv(names[i]))
            return 1;
    return 0;
}

int sg_malloc_tune(void)
{
#if defined(__GLIBC__) && defined(M_TOP_PAD) && defined(M_MMAP_THRESHOLD) && \
    defined(M_TRIM_THRESHOLD)
    const char *v = getenv("STEPGRAPH_MALLOPT");
    if ((v && strcmp(v, "0") == 0) || sizeof(long) != 8 || environment_sets_malloc())
        return 0;
    /* glibc's DEFAULT_MMAP_THRESHOLD_MAX on 64-bit, and its heap size
     * (HEAP_MAX_SIZE, twice that) */
    const int mmap_max = 32 << 20, heap = 2 * mmap_max;
    return mallopt(M_MMAP_THRESHOLD, mmap_max) == 1 && mallopt(M_TRIM_THRESHOLD, heap) == 1 &&
           mallopt(M_TOP_PAD, heap) == 1;
#else
    return 0;
#endif
}
