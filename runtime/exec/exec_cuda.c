/* exec_cuda.c - per-device state of the CUDA workers (exec_cuda.h). Built
 * only with CUDA; runtime/exec/exec.c calls these through the stubs below when
 * CUDA is absent. */
#include "runtime/exec/exec_cuda.h"

#include <pthread.h>
#include <starpu.h>
#include <starpu_cublas.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef SG_HAVE_NCCL
#include <nccl.h>
#endif

#include "codelets/cuda/cuda_ops.h"
#include "codelets/starpu/comm.h"

static pthread_mutex_t setup_lock = PTHREAD_MUTEX_INITIALIZER;

static void setup_fail(sg_cuda_state *st, int code, const char *what, int devid)
{
    pthread_mutex_lock(&setup_lock);
    if (!st->failed) {
        st->failed = code;
        snprintf(st->msg, sizeof st->msg, "CUDA device %d: %s", devid, what);
    }
    pthread_mutex_unlock(&setup_lock);
}

/* What every CUDA worker's set-up gets: the NCCL communicator's unique id,
 * its rank count and this process's rank in it. */
typedef struct setup_arg {
    sg_exec_shared *sh;
    int nccl_ranks, nccl_rank;
    int have_id; /* 0: each device makes its own id (one rank) */
#ifdef SG_HAVE_NCCL
    ncclUniqueId id;
#endif
} setup_arg;

/* Runs on each CUDA worker (several workers may share a device). */
static void setup_worker(void *varg)
{
    setup_arg *a = varg;
    sg_exec_shared *sh = a->sh;
    sg_cuda_state *st = sh->cuda;
    int devid = starpu_worker_get_devid(starpu_worker_get_id());
    if (devid < 0 || devid >= SG_CUDA_MAX_DEVICES) {
        setup_fail(st, SG_ENOTSUP, "more devices than stepgraph supports", devid);
        return;
    }
    pthread_mutex_lock(&setup_lock);
    sg_cuda_device *d = &st->dev[devid];
    if (d->ready) {
        pthread_mutex_unlock(&setup_lock);
        return;
    }
    size_t bytes = sh->rope.T * sh->rope.half * sizeof(float);
    d->cos_tab = sg_cu_malloc(bytes);
    d->sin_tab = sg_cu_malloc(bytes);
    int ok = d->cos_tab && d->sin_tab && !sg_cu_to_device(d->cos_tab, sh->rope.cos_tab, bytes) &&
             !sg_cu_to_device(d->sin_tab, sh->rope.sin_tab, bytes);
    char what[200] = "cannot set up the rotary tables";
#ifdef SG_HAVE_NCCL
    if (ok) {
        ncclUniqueId id;
        ncclComm_t comm;
        ncclResult_t r = ncclSuccess;
        const char *call = "ncclGetUniqueId";
        if (a->have_id)
            id = a->id;
        else
            r = ncclGetUniqueId(&id);
        if (r == ncclSuccess) {
            call = "ncclCommInitRank";
            r = ncclCommInitRank(&comm, a->nccl_ranks, id, a->nccl_rank);
        }
        ok = r == ncclSuccess;
        if (ok)
            d->nccl = comm;
        else /* every NCCL error with the rank and the call */
            snprintf(what, sizeof what, "rank %d of %d: %s: %s", a->nccl_rank, a->nccl_ranks, call,
                     ncclGetErrorString(r));
    }
#endif
    d->ready = ok;
    pthread_mutex_unlock(&setup_lock);
    if (!ok)
        setup_fail(st, SG_EIO, what, devid);
}

static void teardown_worker(void *arg)
{
    sg_exec_shared *sh = arg;
    int devid = starpu_worker_get_devid(starpu_worker_get_id());
    if (devid < 0 || devid >= SG_CUDA_MAX_DEVICES)
        return;
    pthread_mutex_lock(&setup_lock);
    sg_cuda_device *d = &sh->cuda->dev[devid];
    sg_cu_free(d->cos_tab);
    sg_cu_free(d->sin_tab);
#ifdef SG_HAVE_NCCL
    if (d->nccl)
        ncclCommDestroy((ncclComm_t)d->nccl);
#endif
    memset(d, 0, sizeof *d);
    pthread_mutex_unlock(&setup_lock);
}

/* Under an MPI launch: rank 0's NCCL unique id to every rank, as an
 * all-gather of its bytes (block 0 is rank 0's) on the launch's
 * communicator; no task runs yet, so nothing else uses it. */
static int share_nccl_id(setup_arg *a, const sg_comm *launch, sg_error *err)
{
#ifdef SG_HAVE_NCCL
    if (starpu_cuda_worker_get_count() > 1) {
        if (launch->size > 1)
            return sg_error_set(err, SG_ENOTSUP,
                                "rank %d: %u CUDA workers: with several "
                                "ranks, one GPU per rank (STARPU_NCUDA=1)",
                                launch->rank, starpu_cuda_worker_get_count());
        return SG_OK; /* one rank, several devices: a communicator each, as without mpirun */
    }
    size_t n = sizeof a->id;
    unsigned char *all = calloc((size_t)launch->size, n);
    if (!all)
        return sg_error_set(err, SG_ENOMEM, "out of memory");
    ncclUniqueId id;
    memset(&id, 0, sizeof id);
    ncclResult_t r = launch->rank == 0 ? ncclGetUniqueId(&id) : ncclSuccess;
    if (r != ncclSuccess) {
        free(all);
        return sg_error_set(err, SG_EIO, "rank 0: ncclGetUniqueId: %s", ncclGetErrorString(r));
    }
    char msg[256] = "";
    int rc = launch->allgather(launch->impl, &id, all, n, msg, sizeof msg);
    if (rc) {
        free(all);
        return sg_error_set(err, rc, "broadcasting the NCCL unique id: %s", msg);
    }
    memcpy(&a->id, all, n);
    free(all);
    a->have_id = 1;
    a->nccl_ranks = launch->size;
    a->nccl_rank = launch->rank;
#else
    (void)a, (void)launch, (void)err;
#endif
    return SG_OK;
}

int sg_exec_cuda_init(sg_exec_shared *sh, const sg_comm *launch, sg_error *err)
{
    sh->cuda = NULL;
    if (starpu_cuda_worker_get_count() == 0)
        return SG_OK;
    setup_arg a = {.sh = sh, .nccl_ranks = 1, .nccl_rank = 0};
    int rc;
    /* the attention codelets read these at each call (attention_select.cu):
     * a bad value stops the run here, not in its first attention task */
    sg_cu_att_impl att_impl;
    size_t att_scratch;
    if ((rc = sg_cu_attention_impl_env(&att_impl, &att_scratch, err)))
        return rc;
    if (launch && (rc = share_nccl_id(&a, launch, err)))
        return rc;
    sh->cuda = calloc(1, sizeof *sh->cuda);
    if (!sh->cuda)
        return sg_error_set(err, SG_ENOMEM, "out of memory");
    starpu_cublas_init();
    starpu_execute_on_each_worker(setup_worker, &a, STARPU_CUDA);
    if (sh->cuda->failed)
        return sg_error_set(err, sh->cuda->failed, "%s (%s)", sh->cuda->msg, sg_cu_last_error());
    return SG_OK;
}

void sg_exec_cuda_shutdown(sg_exec_shared *sh)
{
    if (!sh->cuda)
        return;
    starpu_execute_on_each_worker(teardown_worker, sh, STARPU_CUDA);
    starpu_cublas_shutdown();
    free(sh->cuda);
    sh->cuda = NULL;
}
