/* sim_share.c - max-min fair shares of a memory's bandwidth (sim_share.h). */
#include "runtime/sim/sim_share.h"

#include <stdlib.h>

double sg_bw_water_fill(double capacity, const double *cap, double *out, int n)
{
    /* raise a common level until the capacity is spent: each pass gives the
     * remaining capacity evenly to the demands not yet met, and fixes those
     * whose cap is below that even share */
    int left = n;
    double remaining = capacity > 0 ? capacity : 0, given = 0;
    for (int i = 0; i < n; i++)
        out[i] = -1; /* not fixed yet */
    while (left > 0) {
        double level = remaining / left;
        int fixed = 0;
        for (int i = 0; i < n; i++)
            if (out[i] < 0 && cap[i] <= level) {
                out[i] = cap[i] > 0 ? cap[i] : 0;
                remaining -= out[i];
                given += out[i];
                left--;
                fixed = 1;
            }
        if (!fixed) { /* every demand left is above the level: they share it */
            for (int i = 0; i < n; i++)
                if (out[i] < 0) {
                    out[i] = level;
                    given += level;
                }
            break;
        }
    }
    return given;
}

void sg_bw_share(const sg_bw_pool *p, sg_bw_stream *s, int n)
{
    if (n <= 0)
        return;
    double *cap = malloc((size_t)n * 2 * sizeof *cap);
    if (!cap) { /* no memory: everyone alone at its cap, bounded evenly */
        for (int i = 0; i < n; i++)
            s[i].rate = s[i].cap < p->capacity / n ? s[i].cap : p->capacity / n;
        return;
    }
    double *out = cap + n;
    /* the CPU side as one flow: what its streams could draw, within cpu_limit */
    int ncpu = 0;
    double cpu_want = 0;
    for (int i = 0; i < n; i++)
        if (s[i].cpu) {
            ncpu++;
            cpu_want += s[i].cap;
        }
    if (p->cpu_limit > 0 && cpu_want > p->cpu_limit)
        cpu_want = p->cpu_limit;
    /* the pool's flows: each non-CPU stream, then the CPU side (if any) */
    int nf = 0;
    for (int i = 0; i < n; i++)
        if (!s[i].cpu)
            cap[nf++] = s[i].cap;
    if (ncpu)
        cap[nf++] = cpu_want;
    sg_bw_water_fill(p->capacity, cap, out, nf);
    double cpu_given = ncpu ? out[nf - 1] : 0;
    int f = 0;
    for (int i = 0; i < n; i++)
        if (!s[i].cpu)
            s[i].rate = out[f++];
    if (ncpu) {
        int k = 0;
        for (int i = 0; i < n; i++)
            if (s[i].cpu)
                cap[k++] = s[i].cap;
        sg_bw_water_fill(cpu_given, cap, out, ncpu);
        k = 0;
        for (int i = 0; i < n; i++)
            if (s[i].cpu)
                s[i].rate = out[k++];
    }
    free(cap);
}
