/* cleanup.h - temporary paths removed when a signal ends the process.
 *
 * Atomic writes (atomic_file.h), Graphviz's DOT input, a checkpoint's
 * staging directory and the simulator's scratch directory live under
 * temporary names until they are renamed or removed. A command ended by
 * SIGINT (Ctrl-C), SIGTERM (timeout, a batch system) or SIGHUP would leave
 * them beside the user's files; with sg_cleanup_on_signals() installed, the
 * handler removes every registered path (a directory with its contents)
 * using system calls only, then ends the process by the same signal, as
 * the default action would. The final paths are never registered: an older
 * file there stays as it was.
 *
 * `stepgraph run` defers the first SIGINT or SIGTERM instead
 * (sg_cleanup_defer_signals): the handler then only records the signal,
 * and the training loop stops at a step boundary and saves
 * (runtime/train/interrupt.h); a second one, or SIGHUP, cleans up and ends
 * the process as above.
 */
#ifndef SG_CLEANUP_H
#define SG_CLEANUP_H

/* Installs the handlers (SIGINT, SIGTERM, SIGHUP) unless the signal is
 * ignored (as in a background job). Once per process; main() calls it. */
void sg_cleanup_on_signals(void);

/* Registers path (copied) for removal; returns its slot, or -1 when every
 * slot is taken or the path is too long (then it is simply not cleaned). */
int sg_cleanup_add(const char *path);
/* Registers a directory removed only when it is empty at the signal (after
 * the paths of sg_cleanup_add): a save directory a run created, which must
 * not be left behind empty. Same slots and return value. */
int sg_cleanup_add_if_empty(const char *dir);
/* Removes path now: a file, or a directory with its contents (8 levels deep
 * at most), as the handler does. */
void sg_remove_tree(const char *path);

/* Forgets a slot (after the path was renamed or removed); -1 is ignored. */
void sg_cleanup_forget(int slot);

/* on != 0: the first SIGINT or SIGTERM from now on is only recorded (the
 * handler sets a flag; the process goes on); 0: back to ending at once. A
 * signal recorded stays recorded. */
void sg_cleanup_defer_signals(int on);
/* The signal recorded while deferring (SIGINT or SIGTERM), or 0. */
int sg_cleanup_deferred_signal(void);

#endif /* SG_CLEANUP_H */
