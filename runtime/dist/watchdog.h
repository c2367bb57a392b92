/* watchdog.h - several ranks: a partition ends the job, it does not hang it
 * (docs/ranks.md, "When a rank stops answering").
 *
 * A blocking MPI collective waits forever for a peer whose link is down,
 * whose host is frozen (SIGSTOP) or gone without its TCP connections being
 * reset: no rank prints anything, mpirun itself may not act. Each rank runs
 * one watchdog thread that
 *   - counts progress: the completed collectives (dist.c tells it), the
 *     finished steps and their measured time (the training loop);
 *   - once armed (the training loop's start), ends this process when
 *     nothing progressed for max(comm_timeout, SG_WATCHDOG_STEPS x the mean
 *     step time) seconds: it writes one error to stderr naming this rank,
 *     the rank(s) and host(s) that stopped answering and the last complete
 *     checkpoint, then _exit(1), a path that cannot block (MPI_Abort may
 *     itself wait on the partition);
 *   - learns who stopped answering from heartbeats: every few hundred ms
 *     each rank sends a small message to every other on a communicator of
 *     its own and notes when each peer's last one arrived. A peer silent
 *     for more than half the bound is named; when every peer still answers,
 *     the message says so (a rank is stuck, not unreachable).
 * Every reachable rank has its own watchdog, so each ends within the bound
 * of its own last progress, whatever mpirun does. Built only with MPI.
 */
#ifndef SG_WATCHDOG_H
#define SG_WATCHDOG_H

#include "common/error.h"

/* The bound is at least this many mean step times. */
#define SG_WATCHDOG_STEPS 10
/* Bytes of one rank's "host (address)" name, with its NUL. */
#define SG_WATCHDOG_HOST_MAX 96

typedef struct sg_watchdog sg_watchdog;

/* This machine's name and first non-loopback IPv4 address ("vm
 * (10.123.4.1)"): what the messages call a host. */
void sg_watchdog_host_name(char *out, size_t size);

/* Starts the heartbeat thread (not armed). comm points to an MPI_Comm used
 * by the watchdog alone; hosts[r] names rank r's host (copied). */
int sg_watchdog_start(sg_watchdog **out, const void *comm, int rank, int size,
                      const char (*hosts)[SG_WATCHDOG_HOST_MAX], sg_error *err);

/* Arms it: timeout_s is comm_timeout; progress is counted from now. */
void sg_watchdog_arm(sg_watchdog *w, double timeout_s);

/* A collective completed (any thread). */
void sg_watchdog_progress(sg_watchdog *w);

/* A step finished in `seconds` (its measured time). */
void sg_watchdog_step(sg_watchdog *w, double seconds);

/* The last complete checkpoint, named in the error (copied). */
void sg_watchdog_checkpoint(sg_watchdog *w, const char *path);

/* Stops the thread, releases its requests, frees w (NULL: nothing). */
void sg_watchdog_stop(sg_watchdog *w);

#endif /* SG_WATCHDOG_H */
