/* dist.c - MPI start-up, the two communicators and the collectives (dist.h). */
#define _POSIX_C_SOURCE 200809L
#include "runtime/dist/dist.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/dist/watchdog.h"
#include "sg_autoconf.h"

#ifdef SG_HAVE_MPI
#include <mpi.h>
#endif

static int env_set(const char *name)
{
    const char *v = getenv(name);
    return v && *v;
}

int sg_dist_launched(void)
{
    return env_set("OMPI_COMM_WORLD_SIZE") || env_set("PMIX_RANK") || env_set("PMI_RANK");
}

int sg_dist_available(void)
{
#ifdef SG_HAVE_MPI
    return 1;
#else
    return 0;
#endif
}

void sg_dist_fail(const sg_dist *d, int rc, const sg_error *err)
{
    const char *m = err && err->msg[0] ? err->msg : sg_strerror(rc);
    if (d && d->size > 1 && strncmp(m, "rank ", 5) != 0)
        fprintf(stderr, "stepgraph: rank %d: %s\n", d->rank, m);
    else
        fprintf(stderr, "stepgraph: %s\n", m);
    fflush(stderr);
    if (d && d->size > 1)
        sg_dist_abort(d, 1); /* the other ranks may wait in a collective for this one */
}

const sg_comm *sg_dist_comm(const sg_dist *d)
{
    return d && d->mpi && d->size > 1 ? &d->comm : NULL;
}

#ifdef SG_HAVE_MPI

typedef struct dist_impl {
    int rank;
    MPI_Comm tasks;  /* collective tasks only */
    MPI_Comm host;   /* the main thread only */
    MPI_Comm beat;   /* the watchdog's heartbeats only */
    sg_watchdog *wd; /* told of every completed collective */
    MPI_Comm votes;  /* the main thread's votes (sg_dist_vote_start) */
} dist_impl;

static sg_watchdog *wd_of(const sg_dist *d)
{
    return d && d->mpi && d->impl ? ((dist_impl *)d->impl)->wd : NULL;
}

/* "rank R: CALL: MPI's message" into msg; returns SG_EIO. */
static int mpi_fail(int rank, int code, const char *call, char *msg, size_t size)
{
    char s[MPI_MAX_ERROR_STRING];
    int len = 0;
    if (MPI_Error_string(code, s, &len) != MPI_SUCCESS)
        snprintf(s, sizeof s, "error %d", code);
    snprintf(msg, size, "rank %d: %s: %s", rank, call, s);
    return SG_EIO;
}

static int count_ok(int rank, size_t n, const char *call, char *msg, size_t size)
{
    if (n <= (size_t)INT_MAX)
        return SG_OK;
    snprintf(msg, size,
             "rank %d: %s: %zu elements per rank in one collective (at most %d "
             "supported)",
             rank, call, n, INT_MAX);
    return SG_ENOTSUP;
}

static int c_allgather(void *impl, const void *send, void *recv, size_t bytes, char *msg,
                       size_t size)
{
    dist_impl *p = impl;
    int rc = count_ok(p->rank, bytes, "MPI_Allgather", msg, size);
    if (rc)
        return rc;
    rc = MPI_Allgather(send, (int)bytes, MPI_BYTE, recv, (int)bytes, MPI_BYTE, p->tasks);
    sg_watchdog_progress(rc == MPI_SUCCESS ? p->wd : NULL);
    return rc == MPI_SUCCESS ? SG_OK : mpi_fail(p->rank, rc, "MPI_Allgather", msg, size);
}

static int c_reduce_scatter(void *impl, const float *send, float *recv, size_t count, char *msg,
                            size_t size)
{
    dist_impl *p = impl;
    int rc = count_ok(p->rank, count, "MPI_Reduce_scatter_block", msg, size);
    if (rc)
        return rc;
    rc = MPI_Reduce_scatter_block(send, recv, (int)count, MPI_FLOAT, MPI_SUM, p->tasks);
    sg_watchdog_progress(rc == MPI_SUCCESS ? p->wd : NULL);
    return rc == MPI_SUCCESS ? SG_OK : mpi_fail(p->rank, rc, "MPI_Reduce_scatter_block", msg, size);
}

static MPI_Datatype mpi_type(sg_comm_type t)
{
    return t == SG_COMM_F64 ? MPI_DOUBLE : t == SG_COMM_I32 ? MPI_INT32_T : MPI_FLOAT;
}

static int allreduce_on(const dist_impl *p, MPI_Comm comm, void *buf, size_t count,
                        sg_comm_type type, sg_comm_op op, char *msg, size_t size)
{
    int rc = count_ok(p->rank, count, "MPI_Allreduce", msg, size);
    if (rc)
        return rc;
    rc = MPI_Allreduce(MPI_IN_PLACE, buf, (int)count, mpi_type(type),
                       op == SG_COMM_MAX ? MPI_MAX : MPI_SUM, comm);
    if (rc != MPI_SUCCESS)
        return mpi_fail(p->rank, rc, "MPI_Allreduce", msg, size);
    sg_watchdog_progress(p->wd);
    return SG_OK;
}

static int c_allreduce(void *impl, void *buf, size_t count, sg_comm_type type, sg_comm_op op,
                       char *msg, size_t size)
{
    dist_impl *p = impl;
    return allreduce_on(p, p->tasks, buf, count, type, op, msg, size);
}

/* Every rank's host name (for the watchdog's messages), then its thread. */
static int start_watchdog(sg_dist *d, dist_impl *p, sg_error *err)
{
    char me[SG_WATCHDOG_HOST_MAX];
    char(*hosts)[SG_WATCHDOG_HOST_MAX] = calloc((size_t)d->size, sizeof *hosts);
    if (!hosts)
        return sg_error_set(err, SG_ENOMEM, "rank %d: out of memory", d->rank);
    memset(me, 0, sizeof me);
    sg_watchdog_host_name(me, sizeof me);
    int rc = MPI_Allgather(me, SG_WATCHDOG_HOST_MAX, MPI_CHAR, hosts, SG_WATCHDOG_HOST_MAX,
                           MPI_CHAR, p->host);
    if (rc != MPI_SUCCESS) {
        char msg[SG_ERROR_MSG_MAX];
        mpi_fail(d->rank, rc, "MPI_Allgather", msg, sizeof msg);
        free(hosts);
        return sg_error_set(err, SG_EIO, "%s", msg);
    }
    rc = sg_watchdog_start(&p->wd, &p->beat, d->rank, d->size,
                           (const char(*)[SG_WATCHDOG_HOST_MAX])hosts, err);
    free(hosts);
    return rc;
}

int sg_dist_init(sg_dist *d, sg_error *err)
{
    memset(d, 0, sizeof *d);
    d->size = d->local_size = 1;
    if (!sg_dist_launched())
        return SG_OK;
    int provided = 0, rc;
    char msg[SG_ERROR_MSG_MAX];
    if ((rc = MPI_Init_thread(NULL, NULL, MPI_THREAD_MULTIPLE, &provided)) != MPI_SUCCESS) {
        mpi_fail(-1, rc, "MPI_Init_thread", msg, sizeof msg);
        return sg_error_set(err, SG_EIO, "%s", msg);
    }
    d->mpi = 1;
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    MPI_Comm_rank(MPI_COMM_WORLD, &d->rank);
    MPI_Comm_size(MPI_COMM_WORLD, &d->size);
    if (provided < MPI_THREAD_MULTIPLE)
        return sg_error_set(err, SG_ENOTSUP,
                            "rank %d: MPI_Init_thread: this MPI provides "
                            "thread level %d, below MPI_THREAD_MULTIPLE (%d): StarPU workers "
                            "and the main thread call MPI at once",
                            d->rank, provided, MPI_THREAD_MULTIPLE);
    dist_impl *p = calloc(1, sizeof *p);
    if (!p)
        return sg_error_set(err, SG_ENOMEM, "rank %d: out of memory", d->rank);
    p->rank = d->rank;
    p->tasks = p->host = p->beat = p->votes = MPI_COMM_NULL;
    d->impl = p;
    if ((rc = MPI_Comm_dup(MPI_COMM_WORLD, &p->tasks)) != MPI_SUCCESS ||
        (rc = MPI_Comm_dup(MPI_COMM_WORLD, &p->host)) != MPI_SUCCESS ||
        (rc = MPI_Comm_dup(MPI_COMM_WORLD, &p->beat)) != MPI_SUCCESS ||
        (rc = MPI_Comm_dup(MPI_COMM_WORLD, &p->votes)) != MPI_SUCCESS) {
        mpi_fail(d->rank, rc, "MPI_Comm_dup", msg, sizeof msg);
        return sg_error_set(err, SG_EIO, "%s", msg);
    }
    MPI_Comm_set_errhandler(p->tasks, MPI_ERRORS_RETURN);
    MPI_Comm_set_errhandler(p->host, MPI_ERRORS_RETURN);
    MPI_Comm_set_errhandler(p->beat, MPI_ERRORS_RETURN);
    MPI_Comm_set_errhandler(p->votes, MPI_ERRORS_RETURN);
    /* the ranks that share this host's memory */
    MPI_Comm node = MPI_COMM_NULL;
    if ((rc = MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, d->rank, MPI_INFO_NULL,
                                  &node)) != MPI_SUCCESS ||
        (rc = MPI_Comm_size(node, &d->local_size)) != MPI_SUCCESS) {
        mpi_fail(d->rank, rc, "MPI_Comm_split_type", msg, sizeof msg);
        return sg_error_set(err, SG_EIO, "%s", msg);
    }
    MPI_Comm_free(&node);
    if (d->size > 1 && (rc = start_watchdog(d, p, err)))
        return rc;
    d->comm = (sg_comm){
        .rank = d->rank,
        .size = d->size,
        .impl = p,
        .allgather = c_allgather,
        .reduce_scatter = c_reduce_scatter,
        .allreduce = c_allreduce,
    };
    return SG_OK;
}

void sg_dist_finalize(sg_dist *d)
{
    if (!d->mpi)
        return;
    dist_impl *p = d->impl;
    if (p && p->wd) {
        /* every rank is here (the watchdog, still armed, ends a rank whose
         * peer never comes) before the heartbeats stop */
        MPI_Barrier(p->host);
        sg_watchdog_stop(p->wd);
        p->wd = NULL;
    }
    if (p) {
        if (p->beat != MPI_COMM_NULL)
            MPI_Comm_free(&p->beat);
        if (p->tasks != MPI_COMM_NULL)
            MPI_Comm_free(&p->tasks);
        if (p->host != MPI_COMM_NULL)
            MPI_Comm_free(&p->host);
        if (p->votes != MPI_COMM_NULL)
            MPI_Comm_free(&p->votes);
        free(p);
    }
    MPI_Finalize();
    memset(d, 0, sizeof *d);
    d->size = d->local_size = 1;
}

int sg_dist_host_allreduce(const sg_dist *d, double *v, int n, sg_comm_op op, sg_error *err)
{
    if (!d || !d->mpi || d->size == 1)
        return SG_OK;
    dist_impl *p = d->impl;
    char msg[SG_ERROR_MSG_MAX];
    int rc = allreduce_on(p, p->host, v, (size_t)n, SG_COMM_F64, op, msg, sizeof msg);
    return rc ? sg_error_set(err, rc, "%s", msg) : SG_OK;
}

int sg_dist_host_gather(const sg_dist *d, const float *send, float *recv, size_t count,
                        sg_error *err)
{
    if (!d || !d->mpi || d->size == 1) {
        memcpy(recv, send, count * sizeof(float));
        return SG_OK;
    }
    dist_impl *p = d->impl;
    char msg[SG_ERROR_MSG_MAX];
    int rc = count_ok(d->rank, count, "MPI_Gather", msg, sizeof msg);
    if (rc)
        return sg_error_set(err, rc, "%s", msg);
    rc = MPI_Gather(send, (int)count, MPI_FLOAT, recv, (int)count, MPI_FLOAT, 0, p->host);
    if (rc != MPI_SUCCESS) {
        mpi_fail(d->rank, rc, "MPI_Gather", msg, sizeof msg);
        return sg_error_set(err, SG_EIO, "%s", msg);
    }
    sg_watchdog_progress(p->wd);
    return SG_OK;
}

int sg_dist_vote_start(const sg_dist *d, sg_dist_vote *v, int value, sg_error *err)
{
    v->in = v->out = value;
    v->req = NULL;
    if (!d || !d->mpi || d->size == 1)
        return SG_OK;
    dist_impl *p = d->impl;
    MPI_Request *req = malloc(sizeof *req);
    if (!req)
        return sg_error_set(err, SG_ENOMEM, "rank %d: out of memory", d->rank);
    int rc = MPI_Iallreduce(&v->in, &v->out, 1, MPI_INT, MPI_MAX, p->votes, req);
    if (rc != MPI_SUCCESS) {
        free(req);
        char msg[SG_ERROR_MSG_MAX];
        mpi_fail(d->rank, rc, "MPI_Iallreduce", msg, sizeof msg);
        return sg_error_set(err, SG_EIO, "%s", msg);
    }
    v->req = req;
    return SG_OK;
}

int sg_dist_vote_wait(const sg_dist *d, sg_dist_vote *v, int *max, sg_error *err)
{
    int rc = MPI_SUCCESS;
    if (v->req) {
        rc = MPI_Wait(v->req, MPI_STATUS_IGNORE);
        free(v->req);
        v->req = NULL;
    }
    *max = v->out;
    if (rc != MPI_SUCCESS) {
        char msg[SG_ERROR_MSG_MAX];
        mpi_fail(d->rank, rc, "MPI_Wait (a vote)", msg, sizeof msg);
        return sg_error_set(err, SG_EIO, "%s", msg);
    }
    return SG_OK;
}

void sg_dist_abort(const sg_dist *d, int code)
{
    if (d && d->mpi && d->size > 1)
        MPI_Abort(MPI_COMM_WORLD, code ? code : 1);
}

#else /* no MPI in this build */

static sg_watchdog *wd_of(const sg_dist *d)
{
    (void)d;
    return NULL;
}

int sg_dist_init(sg_dist *d, sg_error *err)
{
    memset(d, 0, sizeof *d);
    d->size = d->local_size = 1;
    const char *n = getenv("OMPI_COMM_WORLD_SIZE");
    if (sg_dist_launched() && (!n || atoi(n) != 1))
        return sg_error_set(err, SG_ENOTSUP,
                            "started by an MPI launcher, but this stepgraph "
                            "was built without MPI support (configure found no MPI: "
                            "apt-get install libopenmpi-dev openmpi-bin, then reconfigure)");
    return SG_OK;
}

void sg_dist_finalize(sg_dist *d)
{
    (void)d;
}

int sg_dist_host_allreduce(const sg_dist *d, double *v, int n, sg_comm_op op, sg_error *err)
{
    (void)d, (void)v, (void)n, (void)op, (void)err;
    return SG_OK;
}

int sg_dist_host_gather(const sg_dist *d, const float *send, float *recv, size_t count,
                        sg_error *err)
{
    (void)d, (void)err;
    memcpy(recv, send, count * sizeof(float));
    return SG_OK;
}

int sg_dist_vote_start(const sg_dist *d, sg_dist_vote *v, int value, sg_error *err)
{
    (void)d, (void)err;
    v->in = v->out = value;
    v->req = NULL;
    return SG_OK;
}

int sg_dist_vote_wait(const sg_dist *d, sg_dist_vote *v, int *max, sg_error *err)
{
    (void)d, (void)err;
    *max = v->out;
    return SG_OK;
}

void sg_dist_abort(const sg_dist *d, int code)
{
    (void)d, (void)code;
}

#endif /* SG_HAVE_MPI */

void sg_dist_watch_arm(const sg_dist *d, double comm_timeout_s, const char *checkpoint)
{
    sg_watchdog *w = wd_of(d);
    if (checkpoint && checkpoint[0])
        sg_watchdog_checkpoint(w, checkpoint);
    sg_watchdog_arm(w, comm_timeout_s);
}

void sg_dist_watch_step(const sg_dist *d, double seconds)
{
    sg_watchdog_step(wd_of(d), seconds);
}

void sg_dist_watch_checkpoint(const sg_dist *d, const char *path)
{
    sg_watchdog_checkpoint(wd_of(d), path);
}

void sg_dist_watch_progress(const sg_dist *d)
{
    sg_watchdog_progress(wd_of(d));
}
