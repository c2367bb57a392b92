/* watchdog.c - the partition watchdog of several ranks (watchdog.h). */
#define _DEFAULT_SOURCE
#include "runtime/dist/watchdog.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "common/clock.h"
#include "sg_autoconf.h"

#ifdef SG_HAVE_MPI
#include <mpi.h>
#endif

void sg_watchdog_host_name(char *out, size_t size)
{
    char name[64] = "?", addr[INET_ADDRSTRLEN] = "";
    if (gethostname(name, sizeof name))
        snprintf(name, sizeof name, "?");
    name[sizeof name - 1] = '\0';
    struct ifaddrs *ifs = NULL;
    if (getifaddrs(&ifs) == 0) {
        for (struct ifaddrs *i = ifs; i && !addr[0]; i = i->ifa_next)
            if (i->ifa_addr && i->ifa_addr->sa_family == AF_INET && (i->ifa_flags & IFF_UP) &&
                !(i->ifa_flags & IFF_LOOPBACK))
                inet_ntop(AF_INET, &((struct sockaddr_in *)(void *)i->ifa_addr)->sin_addr, addr,
                          sizeof addr);
        freeifaddrs(ifs);
    }
    /* namespaces on one machine share the name: the address tells them apart */
    if (addr[0])
        snprintf(out, size, "%s (%s)", name, addr);
    else
        snprintf(out, size, "%s", name);
}

#ifdef SG_HAVE_MPI

#define TICK_NS 200000000L /* heartbeat period, 0.2 s */
#define TAG 7

struct sg_watchdog {
    MPI_Comm comm;
    int rank, size;
    char (*hosts)[SG_WATCHDOG_HOST_MAX];
    pthread_t thread;
    atomic_int stop, armed;
    atomic_llong progress_ns; /* monotonic ns of the last progress */
    pthread_mutex_t lock;     /* the fields below */
    double timeout_s;         /* comm_timeout */
    double step_sum_s;        /* measured step times, summed */
    long long steps;
    char checkpoint[4096];
    /* the heartbeat thread's own */
    MPI_Request *rreq, *sreq;
    int *rbuf, *sfail;
    long long *heard_ns; /* when each peer's last heartbeat arrived */
};

static long long now_ns(void)
{
    return (long long)(sg_monotonic_s() * 1e9);
}

/* Every pending heartbeat received, one sent to each peer whose last send
 * completed. Errors (a peer's connection gone) stop the sends to it; its
 * silence then names it. */
static void beat(sg_watchdog *w, long long now)
{
    static const int one = 1;
    for (int p = 0; p < w->size; p++) {
        if (p == w->rank)
            continue;
        for (int k = 0; k < 64; k++) { /* bounded: a peer sends one per tick */
            int done = 0;
            if (w->rreq[p] == MPI_REQUEST_NULL &&
                MPI_Irecv(&w->rbuf[p], 1, MPI_INT, p, TAG, w->comm, &w->rreq[p]) != MPI_SUCCESS)
                break;
            if (MPI_Test(&w->rreq[p], &done, MPI_STATUS_IGNORE) != MPI_SUCCESS || !done)
                break;
            w->heard_ns[p] = now;
        }
        int done = 1;
        if (w->sreq[p] != MPI_REQUEST_NULL &&
            MPI_Test(&w->sreq[p], &done, MPI_STATUS_IGNORE) != MPI_SUCCESS)
            w->sfail[p] = 1;
        if (done && !w->sfail[p] && w->sreq[p] == MPI_REQUEST_NULL &&
            MPI_Isend(&one, 1, MPI_INT, p, TAG, w->comm, &w->sreq[p]) != MPI_SUCCESS)
            w->sfail[p] = 1;
    }
}

/* max(comm_timeout, SG_WATCHDOG_STEPS x the mean step time so far) */
static double bound_s(sg_watchdog *w, double *mean_out)
{
    pthread_mutex_lock(&w->lock);
    double mean = w->steps > 0 ? w->step_sum_s / (double)w->steps : 0.0;
    double b = SG_WATCHDOG_STEPS * mean;
    if (mean_out)
        *mean_out = mean;
    if (b < w->timeout_s)
        b = w->timeout_s;
    pthread_mutex_unlock(&w->lock);
    return b;
}

/* The error, written with write(2) (no stdio lock another thread may hold),
 * then _exit: nothing here waits on the network. */
static void fire(sg_watchdog *w, long long now, double bound, double mean)
{
    char msg[8192];
    size_t n = 0, cap = sizeof msg;
    double idle = (double)(now - atomic_load(&w->progress_ns)) / 1e9;
#define PUT(...)                                                  \
    do {                                                          \
        if (n < cap)                                              \
            n += (size_t)snprintf(msg + n, cap - n, __VA_ARGS__); \
    } while (0)
    PUT("stepgraph: rank %d on %s: no collective completed for %.1f s (the bound: %.2f s = "
        "max(comm_timeout %.0f s, %d x mean step time %.4f s)); ",
        w->rank, w->hosts[w->rank], idle, bound, w->timeout_s, SG_WATCHDOG_STEPS, mean);
    int named = 0;
    for (int p = 0; p < w->size; p++) {
        double quiet = (double)(now - w->heard_ns[p]) / 1e9;
        if (p == w->rank || quiet <= bound / 2)
            continue;
        PUT("%srank %d on %s silent for %.1f s", named ? ", " : "stopped answering: ", p,
            w->hosts[p], quiet);
        named++;
    }
    if (!named)
        PUT("every rank still answers heartbeats (a rank is stuck, not unreachable)");
    pthread_mutex_lock(&w->lock);
    PUT("; last complete checkpoint: %s; ending this rank\n",
        w->checkpoint[0] ? w->checkpoint : "none (no checkpoint saved or loaded by this run)");
    pthread_mutex_unlock(&w->lock);
#undef PUT
    if (n >= cap) {
        n = cap - 1;
        msg[n - 1] = '\n';
    }
    for (size_t off = 0; off < n;) {
        ssize_t k = write(STDERR_FILENO, msg + off, n - off);
        if (k <= 0)
            break;
        off += (size_t)k;
    }
    _exit(1);
}

static void *watch(void *arg)
{
    sg_watchdog *w = arg;
    struct timespec tick = {0, TICK_NS};
    while (!atomic_load(&w->stop)) {
        long long now = now_ns();
        beat(w, now);
        if (atomic_load(&w->armed)) {
            double mean, bound = bound_s(w, &mean);
            if ((double)(now - atomic_load(&w->progress_ns)) / 1e9 > bound)
                fire(w, now, bound, mean);
        }
        nanosleep(&tick, NULL);
    }
    return NULL;
}

static void release(sg_watchdog *w)
{
    free(w->hosts);
    free(w->rreq);
    free(w->sreq);
    free(w->rbuf);
    free(w->sfail);
    free(w->heard_ns);
    pthread_mutex_destroy(&w->lock);
    free(w);
}

int sg_watchdog_start(sg_watchdog **out, const void *comm, int rank, int size,
                      const char (*hosts)[SG_WATCHDOG_HOST_MAX], sg_error *err)
{
    *out = NULL;
    sg_watchdog *w = calloc(1, sizeof *w);
    if (!w)
        return sg_error_set(err, SG_ENOMEM, "rank %d: out of memory", rank);
    pthread_mutex_init(&w->lock, NULL);
    w->comm = *(const MPI_Comm *)comm;
    w->rank = rank;
    w->size = size;
    size_t s = (size_t)size;
    w->hosts = malloc(s * sizeof *w->hosts);
    w->rreq = malloc(s * sizeof *w->rreq);
    w->sreq = malloc(s * sizeof *w->sreq);
    w->rbuf = calloc(s, sizeof *w->rbuf);
    w->sfail = calloc(s, sizeof *w->sfail);
    w->heard_ns = malloc(s * sizeof *w->heard_ns);
    if (!w->hosts || !w->rreq || !w->sreq || !w->rbuf || !w->sfail || !w->heard_ns) {
        release(w);
        return sg_error_set(err, SG_ENOMEM, "rank %d: out of memory", rank);
    }
    long long now = now_ns();
    memcpy(w->hosts, hosts, s * sizeof *w->hosts);
    for (int p = 0; p < size; p++) {
        w->rreq[p] = w->sreq[p] = MPI_REQUEST_NULL;
        w->heard_ns[p] = now;
    }
    atomic_store(&w->progress_ns, now);
    if (pthread_create(&w->thread, NULL, watch, w)) {
        release(w);
        return sg_error_set(err, SG_EIO, "rank %d: cannot start the watchdog thread", rank);
    }
    *out = w;
    return SG_OK;
}

void sg_watchdog_arm(sg_watchdog *w, double timeout_s)
{
    if (!w)
        return;
    pthread_mutex_lock(&w->lock);
    w->timeout_s = timeout_s;
    pthread_mutex_unlock(&w->lock);
    atomic_store(&w->progress_ns, now_ns());
    atomic_store(&w->armed, 1);
}

void sg_watchdog_progress(sg_watchdog *w)
{
    if (w)
        atomic_store(&w->progress_ns, now_ns());
}

void sg_watchdog_step(sg_watchdog *w, double seconds)
{
    if (!w)
        return;
    pthread_mutex_lock(&w->lock);
    w->step_sum_s += seconds;
    w->steps++;
    pthread_mutex_unlock(&w->lock);
    atomic_store(&w->progress_ns, now_ns());
}

void sg_watchdog_checkpoint(sg_watchdog *w, const char *path)
{
    if (!w)
        return;
    pthread_mutex_lock(&w->lock);
    snprintf(w->checkpoint, sizeof w->checkpoint, "%s", path);
    pthread_mutex_unlock(&w->lock);
}

void sg_watchdog_stop(sg_watchdog *w)
{
    if (!w)
        return;
    atomic_store(&w->stop, 1);
    pthread_join(w->thread, NULL);
    for (int p = 0; p < w->size; p++) {
        if (w->rreq[p] != MPI_REQUEST_NULL) {
            MPI_Cancel(&w->rreq[p]);
            MPI_Wait(&w->rreq[p], MPI_STATUS_IGNORE);
        }
        if (w->sreq[p] != MPI_REQUEST_NULL)
            MPI_Request_free(&w->sreq[p]); /* a small eager send: done or dropped */
    }
    release(w);
}

#else /* no MPI: one rank, nothing to watch */

int sg_watchdog_start(sg_watchdog **out, const void *comm, int rank, int size,
                      const char (*hosts)[SG_WATCHDOG_HOST_MAX], sg_error *err)
{
    (void)comm, (void)size, (void)hosts;
    *out = NULL;
    return sg_error_set(err, SG_ENOTSUP, "rank %d: the watchdog needs MPI", rank);
}

void sg_watchdog_arm(sg_watchdog *w, double timeout_s)
{
    (void)w, (void)timeout_s;
}

void sg_watchdog_progress(sg_watchdog *w)
{
    (void)w;
}

void sg_watchdog_step(sg_watchdog *w, double seconds)
{
    (void)w, (void)seconds;
}

void sg_watchdog_checkpoint(sg_watchdog *w, const char *path)
{
    (void)w, (void)path;
}

void sg_watchdog_stop(sg_watchdog *w)
{
    (void)w;
}

#endif /* SG_HAVE_MPI */
