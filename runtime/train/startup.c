/* startup.c - the run's start-up times (startup.h). */
#include "runtime/train/startup.h"

#include <string.h>
#include <time.h>
#include <unistd.h>

#define GIB 1073741824.0

double sg_process_age_s(void)
{
    FILE *f = fopen("/proc/self/stat", "r");
    if (!f)
        return 0.0;
    char buf[1024];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    /* field 2 (the command) may hold spaces: count fields after its ')' */
    char *p = strrchr(buf, ')');
    if (!p)
        return 0.0;
    unsigned long long start = 0;
    int field = 2;
    for (p++; *p && field < 22; p++)
        if (*p == ' ' && ++field == 22 && sscanf(p + 1, "%llu", &start) != 1)
            return 0.0;
    long tick = sysconf(_SC_CLK_TCK);
    struct timespec ts;
    if (field != 22 || tick <= 0 || clock_gettime(CLOCK_BOOTTIME, &ts))
        return 0.0;
    double age = (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec - (double)start / (double)tick;
    return age > 0.0 ? age : 0.0;
}

void sg_startup_print(FILE *f, const sg_startup *s, double trainer_s)
{
    fprintf(f,
            "  start-up: %.2f s (config %.2f s, compile %.2f s, state and data %.2f s, "
            "StarPU %.2f s, state allocation %.2f s, initial state %.2f s); state %.1f GiB, "
            "%.1f GiB of it pinned\n",
            s->config_s + trainer_s, s->config_s, s->compile_s, s->inputs_s, s->starpu_s,
            s->alloc_s, s->load_s, (double)s->state_bytes / GIB, (double)s->pinned_bytes / GIB);
}
