/* test_par_for.c - common/par_for.h: [0, n) cut into contiguous parts on
 * several threads; every element visited exactly once whatever the thread
 * count and the size (empty, under one part's minimum, at it, with an odd
 * tail), and the number of parts min(threads, n / SG_PAR_FOR_MIN), at
 * least 1, worked out here by hand for each case. */
#include <stdint.h>
#include <stdlib.h>

#include "common/par_for.h"
#include "tests/tap.h"

static void visit(void *ctx, int64_t lo, int64_t hi)
{
    unsigned char *seen = ctx;
    for (int64_t i = lo; i < hi; i++)
        __atomic_fetch_add(&seen[i], 1, __ATOMIC_RELAXED);
}

int main(void)
{
    const int64_t m = SG_PAR_FOR_MIN;
    /* n, threads, the parts expected */
    const struct {
        int64_t n;
        int threads, parts;
    } cases[] = {
        {0, 4, 0},      {1, 4, 1},         {m - 1, 4, 1},      {m, 4, 1},
        {2 * m, 4, 2},  {3 * m + 7, 4, 3}, {10 * m + 3, 4, 4}, {10 * m + 3, 1, 1},
        {10 * m, 0, 1}, {5 * m + 1, 7, 5},
    };
    int ncases = (int)(sizeof cases / sizeof cases[0]);
    tap_plan(ncases);
    unsigned char *seen = malloc((size_t)(10 * m + 7));
    if (!seen)
        return 1;
    for (int c = 0; c < ncases; c++) {
        int64_t n = cases[c].n;
        memset(seen, 0, (size_t)n + 1);
        int parts = sg_par_for(n, cases[c].threads, visit, seen);
        int64_t bad = -1;
        for (int64_t i = 0; i < n && bad < 0; i++)
            if (seen[i] != 1)
                bad = i;
        ok(parts == cases[c].parts && bad < 0 && seen[n] == 0,
           "n %lld, %d threads: %d parts (expected %d), every element once (first wrong: %lld)",
           (long long)n, cases[c].threads, parts, cases[c].parts, (long long)bad);
    }
    free(seen);
    return tap_done();
}
