/* activity.c - codelets running and the time of the last change (activity.h). */
#include "codelets/starpu/activity.h"

#include <starpu.h>

static int running;
static double last_us;

static void stamp(void)
{
    double now = starpu_timing_now();
    __atomic_store(&last_us, &now, __ATOMIC_RELEASE);
}

void sg_activity_begin(void)
{
    __atomic_add_fetch(&running, 1, __ATOMIC_ACQ_REL);
    stamp();
}

void sg_activity_end(void)
{
    stamp();
    __atomic_sub_fetch(&running, 1, __ATOMIC_ACQ_REL);
}

void sg_activity_note(void)
{
    stamp();
}

void sg_activity_read(int *n, double *at_us)
{
    *n = __atomic_load_n(&running, __ATOMIC_ACQUIRE);
    __atomic_load(&last_us, at_us, __ATOMIC_ACQUIRE);
}
