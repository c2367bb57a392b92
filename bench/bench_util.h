/* bench_util.h - what the CPU benchmarks share (bench/bench_adam.c,
 * bench_adam_chain.c, bench_adam_starpu.c): the thread-count limit, the
 * memory kernels' attribute (vectorised for the best ISA via
 * target_clones), the comma lists of thread counts and the peers' timings
 * given on the command line. Not a test; header-only. */
#ifndef SG_TESTS_BENCH_UTIL_H
#define SG_TESTS_BENCH_UTIL_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAXT 64

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define BW_KERNEL __attribute__((target_clones("avx512f", "avx2", "default"), optimize("O3")))
#elif defined(__GNUC__) && !defined(__clang__)
#define BW_KERNEL __attribute__((optimize("O3")))
#else
#define BW_KERNEL /* clang vectorises these at -O2 */
#endif

/* "1,2,4": at most max thread counts, each 1..MAXT; their count or -1 */
static inline int parse_list(const char *s, int *out, int max)
{
    int k = 0;
    while (*s && k < max) {
        char *end;
        long x = strtol(s, &end, 10);
        if (end == s || x < 1 || x > MAXT)
            return -1;
        out[k++] = (int)x;
        s = *end == ',' ? end + 1 : end;
        if (*end && *end != ',')
            return -1;
    }
    return k;
}

#define MAXPEER 6

typedef struct peer {
    char name[64];
    double s[MAXT + 1]; /* seconds per step at T threads, 0 = not measured */
} peer;

/* NAME=T:SECONDS,... (or T:SECONDS,... with name given); 0 or -1 on bad input */
static inline int parse_peer(const char *val, const char *name, peer *pr)
{
    memset(pr, 0, sizeof *pr);
    const char *s = val;
    if (!name) {
        const char *eq = strchr(val, '=');
        if (!eq || eq == val || (size_t)(eq - val) >= sizeof pr->name)
            return -1;
        memcpy(pr->name, val, (size_t)(eq - val));
        s = eq + 1;
    } else {
        snprintf(pr->name, sizeof pr->name, "%s", name);
    }
    for (const char *c = pr->name; *c; c++)
        if (*c == '|' || *c == '\n')
            return -1;
    while (*s) {
        char *end;
        long t = strtol(s, &end, 10);
        if (end == s || *end != ':' || t < 1 || t > MAXT)
            return -1;
        const char *num = end + 1;
        double v = strtod(num, &end);
        if (end == num || !(v >= 0) || isinf(v))
            return -1;
        pr->s[t] = v;
        if (*end && *end != ',')
            return -1;
        s = *end == ',' ? end + 1 : end;
    }
    return 0;
}

#endif /* SG_TESTS_BENCH_UTIL_H */
