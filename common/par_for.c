/* par_for.c - contiguous parts of a range on several threads (par_for.h). */
#include "common/par_for.h"

#include <pthread.h>

typedef struct part {
    void (*fn)(void *, int64_t, int64_t);
    void *ctx;
    int64_t lo, hi;
} part;

static void *run_part(void *arg)
{
    part *p = arg;
    p->fn(p->ctx, p->lo, p->hi);
    return NULL;
}

int sg_par_for(int64_t n, int threads, void (*fn)(void *ctx, int64_t lo, int64_t hi), void *ctx)
{
    enum { MAX_PARTS = 256 };
    if (n <= 0)
        return 0;
    int64_t most = n / SG_PAR_FOR_MIN;
    int parts = threads < 1 ? 1 : threads > MAX_PARTS ? MAX_PARTS : threads;
    if (most < parts)
        parts = most > 1 ? (int)most : 1;
    if (parts == 1) {
        fn(ctx, 0, n);
        return 1;
    }
    part p[MAX_PARTS];
    pthread_t tid[MAX_PARTS];
    int started[MAX_PARTS];
    int64_t per = n / parts;
    for (int k = 0; k < parts; k++) {
        p[k] = (part){fn, ctx, k * per, k == parts - 1 ? n : (k + 1) * per};
        started[k] = k > 0 && pthread_create(&tid[k], NULL, run_part, &p[k]) == 0;
    }
    run_part(&p[0]);
    for (int k = 1; k < parts; k++) {
        if (started[k])
            pthread_join(tid[k], NULL);
        else
            run_part(&p[k]);
    }
    return parts;
}
