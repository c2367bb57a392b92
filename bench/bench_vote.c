/* bench_vote.c - the cost of the vote an interrupted run's ranks stop by
 * (runtime/train/interrupt.h): sg_dist_vote_start then sg_dist_vote_wait, as
 * the training loop does once per step, timed back to back. Not a test:
 * nothing is asserted. Under mpirun, rank 0 prints the mean per vote of 3
 * rounds of N (default 2000); without a launch, a world of one (no MPI call).
 *
 * Usage: mpirun -np 2 bench/bench_vote [N] */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>

#include "common/clock.h"
#include "runtime/dist/dist.h"

int main(int argc, char **argv)
{
    int n = argc > 1 ? atoi(argv[1]) : 2000;
    sg_dist d;
    sg_error err = {0};
    if (n < 1 || sg_dist_init(&d, &err)) {
        fprintf(stderr, "bench_vote: %s\n", n < 1 ? "N must be at least 1" : err.msg);
        return 1;
    }
    for (int round = 0; round < 3; round++) {
        double h = 0; /* the ranks start the round together */
        if (sg_dist_host_allreduce(&d, &h, 1, SG_COMM_SUM, &err))
            break;
        double t0 = sg_monotonic_s();
        int max = 0;
        for (int i = 0; i < n && !err.msg[0]; i++) {
            sg_dist_vote v;
            if (sg_dist_vote_start(&d, &v, d.rank, &err) == 0)
                sg_dist_vote_wait(&d, &v, &max, &err);
        }
        double us = (sg_monotonic_s() - t0) / n * 1e6;
        if (d.rank == 0 && !err.msg[0])
            printf("%d ranks: %.2f us per vote (start + wait, 4 bytes, max %d)\n", d.size, us, max);
    }
    if (err.msg[0])
        fprintf(stderr, "bench_vote: rank %d: %s\n", d.rank, err.msg);
    sg_dist_finalize(&d);
    return err.msg[0] ? 1 : 0;
}
