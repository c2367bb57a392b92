/* starpu_info.c - StarPU version of the loaded library. */
#include "runtime/starpu_info.h"

#include <starpu.h>
#include <stdio.h>

void sg_starpu_version(char *buf, size_t size)
{
    int major = 0, minor = 0, release = 0;
    starpu_get_version(&major, &minor, &release);
    snprintf(buf, size, "%d.%d.%d", major, minor, release);
}
