/* clock.h - seconds on the monotonic clock, for durations a person reads
 * (progress lines, probes); StarPU's own clock times tasks. */
#ifndef SG_CLOCK_H
#define SG_CLOCK_H

#include <time.h>

static inline double sg_monotonic_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

#endif /* SG_CLOCK_H */
