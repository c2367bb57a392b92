/* test_dist.c - runtime/dist: the world of one, and under mpirun (run by
 * tests/test_dist_ranks.sh with 3 ranks) the collectives codelets call through
 * codelets/starpu/comm.h, each checked against a formula of the ranks'
 * inputs: an all-gather rank-major, a reduce-scatter of blocks (sums), an
 * in-place all-reduce (sum and max), the main thread's all-reduce, votes
 * (sg_dist_vote: several in flight, the max over the ranks), and a
 * count too large for MPI refused with the rank and the call. Every rank
 * checks its own results; rank 0 prints TAP, with every rank's failures
 * (the other ranks' stdout is not read). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/dist/dist.h"
#include "tests/tap.h"

/* Each check is decided on every rank, then combined (one failure fails it). */
static int all_ok(const sg_dist *d, int mine)
{
    double bad = mine ? 0.0 : 1.0;
    sg_error err = {0};
    if (sg_dist_host_allreduce(d, &bad, 1, SG_COMM_SUM, &err))
        return 0;
    return bad == 0.0;
}

static void report(const sg_dist *d, int mine, const char *what)
{
    int good = all_ok(d, mine);
    if (d->rank == 0)
        ok(good, "%d ranks: %s", d->size, what);
}

static void world_of_one(const sg_dist *d)
{
    ok(d->rank == 0 && d->size == 1 && d->local_size == 1 && !d->mpi && sg_dist_comm(d) == NULL,
       "no launcher: rank 0 of 1 (alone on its host), MPI not started, no task collectives");
    double v[2] = {3.0, -1.0};
    sg_error err = {0};
    ok(sg_dist_host_allreduce(d, v, 2, SG_COMM_SUM, &err) == 0 && v[0] == 3.0 && v[1] == -1.0,
       "no launcher: the host all-reduce leaves the values as they are");
    float f[3] = {1.5f, -2.0f, 7.0f}, g[3] = {0};
    ok(sg_dist_host_gather(d, f, g, 3, &err) == 0 && g[0] == 1.5f && g[1] == -2.0f && g[2] == 7.0f,
       "no launcher: the host gather copies the values");
    sg_dist_vote vote = {0}, never = {0};
    int max = -1, none = -1;
    ok(sg_dist_vote_start(d, &vote, 15, &err) == 0 &&
           sg_dist_vote_wait(d, &vote, &max, &err) == 0 && max == 15 &&
           sg_dist_vote_wait(d, &never, &none, &err) == 0 && none == 0,
       "no launcher: a vote gives the value itself, a vote never started 0");
}

/* Votes as the training loop uses them (runtime/train/interrupt.c): 4 in
 * flight at once, started in order, waited for in order, between them
 * the main thread's own collectives. Vote k: rank (k mod R) votes k + 1,
 * the others 0 (k = 3: every rank votes its rank): the max is k + 1 (R - 1). */
static int votes_in_flight(const sg_dist *d)
{
    int R = d->size, r = d->rank, good = 1;
    sg_dist_vote v[4];
    sg_error err = {0};
    memset(v, 0, sizeof v);
    for (int k = 0; k < 4; k++)
        good &= sg_dist_vote_start(d, &v[k], k == 3 ? r : r == k % R ? k + 1 : 0, &err) == 0;
    double h = 1.0;
    good &= sg_dist_host_allreduce(d, &h, 1, SG_COMM_SUM, &err) == 0 && h == R;
    for (int k = 0; k < 4; k++) {
        int max = -1;
        good &= sg_dist_vote_wait(d, &v[k], &max, &err) == 0 && max == (k == 3 ? R - 1 : k + 1);
        good &= v[k].req == NULL;
    }
    return good;
}

static void ranks(const sg_dist *d)
{
    const sg_comm *c = sg_dist_comm(d);
    int R = d->size, r = d->rank;
    char msg[256] = "";
    report(d, c && c->rank == r && c->size == R, "the task collectives know the rank and size");
    /* the ranks on this host, as the launcher counts them (Open MPI) */
    const char *local = getenv("OMPI_COMM_WORLD_LOCAL_SIZE");
    report(d, local ? d->local_size == atoi(local) : d->local_size >= 1 && d->local_size <= R,
           "the ranks sharing this host: the launcher's OMPI_COMM_WORLD_LOCAL_SIZE");

    /* all-gather: rank q sends 5 bytes q*10 + i; everyone gets them rank-major */
    unsigned char send[5], recv[5 * 16];
    for (int i = 0; i < 5; i++)
        send[i] = (unsigned char)(r * 10 + i);
    int good = R <= 16 && c->allgather(c->impl, send, recv, 5, msg, sizeof msg) == 0;
    for (int q = 0; good && q < R; q++)
        for (int i = 0; i < 5; i++)
            good &= recv[q * 5 + i] == (unsigned char)(q * 10 + i);
    report(d, good, "all-gather: every rank's bytes, rank-major");

    /* reduce-scatter: block b of rank q holds q + 1000 b + k; rank r gets block
     * r summed: sum_q q + R (1000 r + k) */
    enum { N = 7 };
    float *s = malloc(sizeof(float) * N * (size_t)R), out[N];
    for (int b = 0; b < R; b++)
        for (int k = 0; k < N; k++)
            s[b * N + k] = (float)(r + 1000 * b + k);
    good = c->reduce_scatter(c->impl, s, out, N, msg, sizeof msg) == 0;
    for (int k = 0; good && k < N; k++)
        good &= out[k] == (float)(R * (R - 1) / 2 + R * (1000 * r + k));
    free(s);
    report(d, good, "reduce-scatter: rank r gets the sum of every rank's block r");

    /* all-reduce in place: doubles summed, int32 max */
    double dv[3] = {1.0, (double)r, 0.5 * r};
    int32_t iv[2] = {r, -r};
    good = c->allreduce(c->impl, dv, 3, SG_COMM_F64, SG_COMM_SUM, msg, sizeof msg) == 0 &&
           c->allreduce(c->impl, iv, 2, SG_COMM_I32, SG_COMM_MAX, msg, sizeof msg) == 0;
    good &= dv[0] == R && dv[1] == R * (R - 1) / 2 && dv[2] == 0.25 * R * (R - 1);
    good &= iv[0] == R - 1 && iv[1] == 0;
    report(d, good, "all-reduce: f64 sum and i32 max, in place");

    /* the main thread's all-reduce */
    double h = r + 1.0;
    sg_error err = {0};
    good = sg_dist_host_allreduce(d, &h, 1, SG_COMM_MAX, &err) == 0 && h == R;
    report(d, good, "host all-reduce (max) on the main thread's communicator");

    /* the main thread's gather: rank q sends 3 floats 100 q + k; rank 0 gets them rank-major */
    float gs[3], gr[3 * 16];
    for (int k = 0; k < 3; k++)
        gs[k] = (float)(100 * r + k);
    good = R <= 16 && sg_dist_host_gather(d, gs, r == 0 ? gr : NULL, 3, &err) == 0;
    for (int q = 0; good && r == 0 && q < R; q++)
        for (int k = 0; k < 3; k++)
            good &= gr[q * 3 + k] == (float)(100 * q + k);
    report(d, good, "host gather to rank 0, rank-major, on the main thread's communicator");

    report(d, votes_in_flight(d),
           "4 votes in flight (max over the ranks), a host all-reduce "
           "between their starts and their waits");

    /* a count MPI cannot take: refused before any MPI call, naming rank and call */
    char want[64];
    snprintf(want, sizeof want, "rank %d: MPI_Reduce_scatter_block:", r);
    good = c->reduce_scatter(c->impl, NULL, NULL, (size_t)1 << 32, msg, sizeof msg) == SG_ENOTSUP &&
           strncmp(msg, want, strlen(want)) == 0;
    report(d, good, "more than INT_MAX elements: refused, the message names the rank and the call");
    if (r == 0)
        tap_diag("%s", msg);
}

int main(void)
{
    sg_dist d;
    sg_error err = {0};
    if (sg_dist_init(&d, &err)) {
        printf("not ok 1 - sg_dist_init: %s\n1..1\n", err.msg);
        sg_dist_abort(&d, 1);
        sg_dist_finalize(&d);
        return 1;
    }
    if (d.size == 1)
        world_of_one(&d);
    else
        ranks(&d);
    int rc = d.rank == 0 ? tap_done() : 0;
    sg_dist_finalize(&d);
    return rc;
}
