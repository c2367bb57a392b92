/* dist.h - several data-parallel ranks: one process per rank (docs/ranks.md).
 *
 * `mpirun -np N stepgraph run CONFIG` starts N processes; each runs its own
 * StarPU on the same step graph over its own shard. This module is all the
 * rest of stepgraph sees of MPI:
 *   - sg_dist_init detects an MPI launch (Open MPI's OMPI_COMM_WORLD_SIZE,
 *     PMIx's PMIX_RANK, PMI's PMI_RANK), then calls MPI_Init_thread asking
 *     for MPI_THREAD_MULTIPLE (StarPU workers and the main thread call MPI
 *     at once) and duplicates three communicators: one used only by
 *     collective TASKS (sg_dist_comm, through codelets/starpu/comm.h), one
 *     used only by the main thread (sg_dist_host_allreduce), one by the
 *     main thread's votes (sg_dist_vote_start). Without a
 *     launch: rank 0 of 1 and no MPI call at all.
 *   - Every MPI error comes back as an sg_error "rank R: MPI_Xxx: ..." (the
 *     communicators use MPI_ERRORS_RETURN).
 *   - A build without MPI (configure found no ompi-c) is a world of one; a
 *     launch of several processes is then refused.
 *   - With several ranks, a watchdog thread (watchdog.h) ends each rank
 *     with an error naming the rank that stopped answering when no
 *     collective completes within the run's bound (comm_timeout).
 * Library code never exits (the watchdog's _exit is the one exception: a
 * partition leaves no caller to return to): the CLI calls sg_dist_abort
 * after printing an error when size > 1, so the other ranks end too.
 */
#ifndef SG_DIST_H
#define SG_DIST_H

#include "codelets/starpu/comm.h"
#include "common/error.h"

typedef struct sg_dist {
    int rank, size; /* 0 and 1 without an MPI launch */
    int local_size; /* the ranks on this host (sharing its memory); 1 without a launch */
    int mpi;        /* 1: MPI was initialised by sg_dist_init */
    sg_comm comm;   /* the task collectives (valid when mpi) */
    void *impl;     /* the communicators */
} sg_dist;

/* Whether this process was started by an MPI launcher (environment only). */
int sg_dist_launched(void);

/* Whether this build can run several ranks (configure found MPI). */
int sg_dist_available(void);

/* Fills d (rank 0 of 1 without a launch); initialises MPI under a launch. */
int sg_dist_init(sg_dist *d, sg_error *err);

/* Frees the communicators and finalises MPI (nothing without MPI). */
void sg_dist_finalize(sg_dist *d);

/* The collectives for the step's tasks, or NULL with one rank. */
const sg_comm *sg_dist_comm(const sg_dist *d);

/* Main thread only, and only while no step is in flight on any rank (e.g.
 * around a checkpoint, after every step finished): v[0..n) reduced over the
 * ranks in place on the host communicator; a no-op with one rank. A main
 * thread waiting in a collective while steps are in flight can deadlock
 * with a worker waiting in the next step's collective (docs/ranks.md). */
int sg_dist_host_allreduce(const sg_dist *d, double *v, int n, sg_comm_op op, sg_error *err);

/* Main thread only, same rule as sg_dist_host_allreduce: every rank's
 * send[0..count) end to end into rank 0's recv (count x size floats; recv
 * is not used on the other ranks). With one rank, a copy. */
int sg_dist_host_gather(const sg_dist *d, const float *send, float *recv, size_t count,
                        sg_error *err);

/* A vote: the largest of every rank's value, started without waiting
 * (MPI_Iallreduce on a third communicator, used by votes only) and waited
 * for later. Every rank starts its votes in the same order (the training
 * loop: one per step, at the step's submission) and waits for each once
 * (at the step's end). Unlike sg_dist_host_allreduce this may run while
 * steps are in flight: a rank waiting for a vote needs only that the
 * others started it, which they did before they could wait on anything of
 * this rank's. v must stay in place until waited for. With one rank: the
 * value itself. */
typedef struct sg_dist_vote {
    int in, out;
    void *req; /* the MPI request while in flight, else NULL */
} sg_dist_vote;
int sg_dist_vote_start(const sg_dist *d, sg_dist_vote *v, int value, sg_error *err);
/* *max: the largest value over the ranks; a zeroed vote never started
 * gives 0. */
int sg_dist_vote_wait(const sg_dist *d, sg_dist_vote *v, int *max, sg_error *err);

/* Ends every rank (MPI_Abort); returns only with one rank or without MPI. */
void sg_dist_abort(const sg_dist *d, int code);

/* A command's failure (rc != 0): prints "stepgraph: rank R: <err>" (an error
 * that already names its rank is printed as it is) and ends every rank with
 * several ranks; "stepgraph: <err>" and returns with one. */
void sg_dist_fail(const sg_dist *d, int rc, const sg_error *err);

/* The partition watchdog (watchdog.h), with several ranks; no-ops with one
 * rank or d NULL. Armed by the training loop with comm_timeout (seconds)
 * and the checkpoint it resumed from (NULL or "": none); told of each
 * finished step's measured time and each checkpoint written. It stays
 * armed to the end of sg_dist_finalize (whose barrier waits on every rank). */
void sg_dist_watch_arm(const sg_dist *d, double comm_timeout_s, const char *checkpoint);
void sg_dist_watch_step(const sg_dist *d, double seconds);
void sg_dist_watch_checkpoint(const sg_dist *d, const char *path);
/* Progress made outside steps and collectives (an evaluation's forward runs,
 * runtime/train/eval.h), so that a long one does not look like a rank that
 * stopped answering. */
void sg_dist_watch_progress(const sg_dist *d);

#endif /* SG_DIST_H */
