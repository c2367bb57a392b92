/* first_touch.c - zeroing the state buffers on several threads (first_touch.h). */
#define _DEFAULT_SOURCE
#include "common/first_touch.h"

#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define HUGE_BYTES ((size_t)2 << 20)

typedef struct touch_work {
    void *const *ptrs;
    const size_t *bytes;
    int n;
    size_t *first_piece; /* per buffer: its first piece's global index (n + 1 entries) */
    size_t next;         /* the next piece to take, under lock */
    pthread_mutex_t lock;
} touch_work;

int sg_first_touch_threads(int *threads, sg_error *err)
{
    const char *v = getenv("STEPGRAPH_INIT_THREADS");
    if (v && v[0]) {
        char *end;
        long t = strtol(v, &end, 10);
        if (*end || t < 1 || t > 256)
            return sg_error_set(err, SG_EINVAL,
                                "STEPGRAPH_INIT_THREADS=%s: expected a number "
                                "of threads from 1 to 256",
                                v);
        *threads = (int)t;
        return SG_OK;
    }
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    *threads = (int)(cpus < 1 ? 1 : cpus > 32 ? 32 : cpus);
    return SG_OK;
}

/* Piece p of the work: a buffer's range [lo, hi). */
static void piece_range(const touch_work *w, size_t p, int *b, size_t *lo, size_t *hi)
{
    int i = 0;
    while (i + 1 < w->n && w->first_piece[i + 1] <= p)
        i++;
    *b = i;
    *lo = (p - w->first_piece[i]) * SG_FIRST_TOUCH_PIECE;
    *hi = *lo + SG_FIRST_TOUCH_PIECE < w->bytes[i] ? *lo + SG_FIRST_TOUCH_PIECE : w->bytes[i];
}

static void *touch_worker(void *arg)
{
    touch_work *w = arg;
    size_t total = w->first_piece[w->n];
    for (;;) {
        pthread_mutex_lock(&w->lock);
        size_t p = w->next++;
        pthread_mutex_unlock(&w->lock);
        if (p >= total)
            return NULL;
        int b;
        size_t lo, hi;
        piece_range(w, p, &b, &lo, &hi);
        memset((char *)w->ptrs[b] + lo, 0, hi - lo);
    }
}

/* Advice only: a buffer's whole 2 MiB pages become huge-page candidates. */
static void advise_huge(void *p, size_t bytes)
{
    if (bytes < 2 * HUGE_BYTES)
        return;
    uintptr_t a = ((uintptr_t)p + HUGE_BYTES - 1) & ~(uintptr_t)(HUGE_BYTES - 1);
    uintptr_t e = ((uintptr_t)p + bytes) & ~(uintptr_t)(HUGE_BYTES - 1);
#ifdef MADV_HUGEPAGE
    if (e > a)
        (void)madvise((void *)a, e - a, MADV_HUGEPAGE);
#else
    (void)a;
    (void)e;
#endif
}

int sg_first_touch_zero(void *const *ptrs, const size_t *bytes, int n, int threads)
{
    if (n <= 0)
        return 0;
    touch_work w = {.ptrs = ptrs, .bytes = bytes, .n = n, .next = 0};
    w.first_piece = malloc(((size_t)n + 1) * sizeof *w.first_piece);
    if (!w.first_piece)
        threads = 1; /* no plan: zero in order on this thread */
    for (int i = 0; i < n; i++) {
        advise_huge(ptrs[i], bytes[i]);
        if (w.first_piece)
            w.first_piece[i + 1] = (i ? w.first_piece[i] : 0) +
                                   (bytes[i] + SG_FIRST_TOUCH_PIECE - 1) / SG_FIRST_TOUCH_PIECE;
    }
    if (w.first_piece)
        w.first_piece[0] = 0;
    if (threads <= 1 || !w.first_piece || w.first_piece[n] < 2) {
        for (int i = 0; i < n; i++)
            memset(ptrs[i], 0, bytes[i]);
        free(w.first_piece);
        return 1;
    }
    if ((size_t)threads > w.first_piece[n])
        threads = (int)w.first_piece[n];
    pthread_mutex_init(&w.lock, NULL);
    pthread_t tid[256];
    int started = 0;
    for (; started < threads - 1; started++)
        if (pthread_create(&tid[started], NULL, touch_worker, &w))
            break;
    touch_worker(&w); /* this thread too, and alone if none started */
    for (int k = 0; k < started; k++)
        pthread_join(tid[k], NULL);
    pthread_mutex_destroy(&w.lock);
    free(w.first_piece);
    return started + 1;
}
