/* first_touch.h - zero a run's state buffers on several threads at start-up.
 *
 * A run's persistent state (parameters, fp32 masters, moments) is tens to
 * hundreds of GB for the large models. Zeroing it on the main thread alone
 * made the state's allocation one of the longest parts of the start-up:
 * profiled on llama-3.2-1b's layout at 254 M parameters (4.6 GB of state),
 * a fifth of the start-up's CPU time went to page faults under that one
 * memset. Here the buffers are cut into pieces of SG_FIRST_TOUCH_PIECE
 * bytes, zeroed by up to `threads` threads at once, and buffers of 2 MiB or
 * more are first advised to the kernel as huge-page candidates
 * (MADV_HUGEPAGE: one fault per 2 MiB instead of one per 4 KiB where
 * transparent huge pages are in "madvise" mode; ignored where they are off
 * or the memory is not the kernel's ordinary anonymous memory). Zero is
 * zero: the values do not depend on the thread count. */
#ifndef SG_FIRST_TOUCH_H
#define SG_FIRST_TOUCH_H

#include <stddef.h>

#include "common/error.h"

#define SG_FIRST_TOUCH_PIECE ((size_t)64 << 20)

/* The threads to use: STEPGRAPH_INIT_THREADS when set (1 to 256), else the
 * online CPUs, at most 32. SG_EINVAL naming the variable and its value when
 * it is set to anything else. */
int sg_first_touch_threads(int *threads, sg_error *err);

/* Zeroes n buffers (ptrs[i], bytes[i]) with up to `threads` threads (1: on
 * this thread alone). Returns the threads used. */
int sg_first_touch_zero(void *const *ptrs, const size_t *bytes, int n, int threads);

#endif /* SG_FIRST_TOUCH_H */
