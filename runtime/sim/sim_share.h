/* sim_share.h - memory bandwidth shared by the simulated tasks that stream
 * at the same time.
 *
 * A pool is one memory: a socket's DRAM, or on a unified-memory machine
 * (MI300A) the HBM that CPU cores and GPU share. Every task running on the
 * pool's workers is a stream with a cap: what it could draw alone (a CPU
 * core's single-core bandwidth, the GPU's full bandwidth), lowered to its
 * compute rate's need when it is compute-bound. The pool's bandwidth is
 * divided max-min fairly (water filling: no stream gets more than its cap,
 * what a capped stream leaves goes to the others). The CPU streams together
 * may also be limited by what the cores can draw from the pool (cpu_limit:
 * on MI300A the CPU complex reaches only part of the HBM's bandwidth); the
 * CPU side then counts as one flow in the pool's share, its part water-
 * filled among the CPU streams.
 *
 * sim_exec.c keeps the set of streams of a running simulation and asks for
 * the rates whenever a stream starts, ends or reaches the end of a time
 * slice; this module only computes the shares, so it is tested alone.
 */
#ifndef SG_SIM_SHARE_H
#define SG_SIM_SHARE_H

typedef struct sg_bw_stream {
    int cpu;     /* 1: a CPU task (counts against cpu_limit) */
    double cap;  /* bytes/s it could draw alone (> 0) */
    double rate; /* out: its share, bytes/s */
} sg_bw_stream;

typedef struct sg_bw_pool {
    double capacity;  /* bytes/s of the memory */
    double cpu_limit; /* bytes/s the CPU streams may draw together; <= 0: no limit */
} sg_bw_pool;

/* Sets every stream's rate: max-min fair shares of p->capacity with the CPU
 * streams' total limited by p->cpu_limit. n may be 0. */
void sg_bw_share(const sg_bw_pool *p, sg_bw_stream *s, int n);

/* Max-min fair (water-filling) shares of capacity among n demands: out[i] =
 * min(cap[i], level) where the level makes the shares sum to capacity (or
 * every demand is met). Returns the total given. */
double sg_bw_water_fill(double capacity, const double *cap, double *out, int n);

#endif /* SG_SIM_SHARE_H */
