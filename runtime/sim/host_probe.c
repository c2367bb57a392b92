/* host_probe.c - this host's copy bandwidth and clock (host_probe.h). */
#define _POSIX_C_SOURCE 200809L
#include "runtime/sim/host_probe.h"
#include "common/clock.h"
#include "common/host_ram.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define PROBE_ROUNDS 3
#define PROBE_MAX_THREADS 1024

/* What the copying threads share: they start once every one of them exists
 * (or leave when one could not be created), then run each round together. */
typedef struct probe {
    pthread_mutex_t lock;
    pthread_cond_t cond;
    int state; /* 0 wait, 1 go, -1 leave */
    pthread_barrier_t round;
} probe;

typedef struct copier {
    probe *pr;
    char *src, *dst;
    size_t bytes;
    double start[PROBE_ROUNDS], end[PROBE_ROUNDS];
} copier;

/* Every round starts together (barrier) and copies once; the round's time is
 * from the first start to the last end. */
static void *copy_rounds(void *arg)
{
    copier *c = arg;
    pthread_mutex_lock(&c->pr->lock);
    while (c->pr->state == 0)
        pthread_cond_wait(&c->pr->cond, &c->pr->lock);
    int go = c->pr->state > 0;
    pthread_mutex_unlock(&c->pr->lock);
    if (!go)
        return NULL;
    memset(c->src, 1, c->bytes); /* first touch: the pages are this thread's */
    memset(c->dst, 2, c->bytes);
    for (int r = 0; r < PROBE_ROUNDS; r++) {
        pthread_barrier_wait(&c->pr->round);
        c->start[r] = sg_monotonic_s();
        memcpy(c->dst, c->src, c->bytes);
        c->end[r] = sg_monotonic_s();
    }
    return NULL;
}

static void release(probe *pr, int state)
{
    pthread_mutex_lock(&pr->lock);
    pr->state = state;
    pthread_cond_broadcast(&pr->cond);
    pthread_mutex_unlock(&pr->lock);
}

double sg_host_copy_gbs(int threads)
{
    if (threads < 1 || threads > PROBE_MAX_THREADS)
        return 0;
    /* 128 MiB a buffer for one thread (well past any cache); for many, 2 GiB
     * of sources shared out (as much again of destinations), at least 32 MiB
     * each, and all of it within a quarter of the RAM */
    size_t bytes = threads == 1 ? (size_t)128 << 20 : ((size_t)2 << 30) / (size_t)threads;
    if (bytes < ((size_t)32 << 20))
        bytes = (size_t)32 << 20;
    double quarter = sg_host_ram_bytes() / 4;
    if (quarter > 0 && 2.0 * (double)bytes * threads > quarter)
        bytes = (size_t)(quarter / (2.0 * threads));
    if (bytes < ((size_t)1 << 20))
        return 0;
    probe pr;
    pr.state = 0;
    if (pthread_mutex_init(&pr.lock, NULL) != 0)
        return 0;
    if (pthread_cond_init(&pr.cond, NULL) != 0) {
        pthread_mutex_destroy(&pr.lock);
        return 0;
    }
    if (pthread_barrier_init(&pr.round, NULL, (unsigned)threads) != 0) {
        pthread_cond_destroy(&pr.cond);
        pthread_mutex_destroy(&pr.lock);
        return 0;
    }
    copier *cs = calloc((size_t)threads, sizeof *cs);
    pthread_t *tid = calloc((size_t)threads, sizeof *tid);
    int started = 0, ok = cs && tid;
    for (int i = 0; ok && i < threads; i++) {
        cs[i] = (copier){&pr, malloc(bytes), malloc(bytes), bytes, {0}, {0}};
        ok = cs[i].src && cs[i].dst;
    }
    while (ok && started < threads) {
        if (pthread_create(&tid[started], NULL, copy_rounds, &cs[started]) != 0)
            ok = 0;
        else
            started++;
    }
    release(&pr, ok ? 1 : -1);
    for (int i = 0; i < started; i++)
        pthread_join(tid[i], NULL);
    double best = 0;
    for (int r = 0; ok && r < PROBE_ROUNDS; r++) {
        double a = cs[0].start[r], b = cs[0].end[r];
        for (int i = 1; i < threads; i++) {
            a = cs[i].start[r] < a ? cs[i].start[r] : a;
            b = cs[i].end[r] > b ? cs[i].end[r] : b;
        }
        double gbs = b > a ? 2.0 * (double)bytes * threads / (b - a) / 1e9 : 0;
        best = gbs > best ? gbs : best;
    }
    for (int i = 0; cs && i < threads; i++) {
        free(cs[i].src);
        free(cs[i].dst);
    }
    pthread_barrier_destroy(&pr.round);
    pthread_cond_destroy(&pr.cond);
    pthread_mutex_destroy(&pr.lock);
    free(cs);
    free(tid);
    return best;
}

double sg_host_cpu_ghz(void)
{
    FILE *f = fopen("/proc/cpuinfo", "r");
    char line[256];
    double mhz = 0;
    while (f && fgets(line, sizeof line, f)) {
        const char *colon = strchr(line, ':');
        if (!strncmp(line, "cpu MHz", 7) && colon && sscanf(colon + 1, "%lf", &mhz) == 1)
            break;
    }
    if (f)
        fclose(f);
    return mhz > 0 ? mhz / 1000 : 2.0;
}
