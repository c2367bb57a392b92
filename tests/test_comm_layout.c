/* test_comm_layout.c - the rank-major block layout the collectives share
 * (codelets/starpu/comm.h, sg_comm_layout_of): the MPI codelets on CPU
 * workers and the NCCL ones on CUDA workers take their shard sizes, padding
 * and offsets from it, so it is checked here on the CPU against a separately
 * written reference: block = the smallest b with b x size >= p (searched),
 * a rank's elements counted one by one (element i belongs to rank i / b),
 * and a reduce-scatter + all-gather of a padded buffer simulated over
 * arrays, which must give every rank the sum of the ranks' inputs. Prints
 * TAP. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "codelets/starpu/comm.h"
#include "common/error.h"
#include "tests/tap.h"

/* The reference: searched, not computed by the formula. */
static size_t ref_block(size_t p, size_t size)
{
    size_t b = 0;
    while (b * size < p)
        b++;
    return b;
}

static size_t ref_valid(size_t p, size_t block, size_t rank)
{
    size_t n = 0;
    for (size_t i = 0; i < p; i++)
        if (block && i / block == rank)
            n++;
    return n;
}

/* Every p in [0, 300) and size in [1, 9): the fields against the reference,
 * and the ranks' valid parts tile [0, p) in rank order. */
static int sweep(char *why, size_t n)
{
    for (size_t p = 0; p < 300; p++)
        for (int size = 1; size < 9; size++) {
            size_t next = 0, b = ref_block(p, (size_t)size);
            for (int r = 0; r < size; r++) {
                sg_comm_layout l;
                if (sg_comm_layout_of(&l, p, size, r)) {
                    snprintf(why, n, "p %zu size %d rank %d refused", p, size, r);
                    return 0;
                }
                size_t v = ref_valid(p, b, (size_t)r);
                if (l.elems != p || l.block != b || l.padded != b * (size_t)size ||
                    l.lo != b * (size_t)r || l.valid != v || l.pad != b - v ||
                    (v > 0 && l.lo != next)) {
                    snprintf(why, n,
                             "p %zu size %d rank %d: block %zu valid %zu pad %zu lo %zu "
                             "(expected %zu %zu %zu %zu)",
                             p, size, r, l.block, l.valid, l.pad, l.lo, b, v, b - v, next);
                    return 0;
                }
                next += v;
            }
            if (next != p) {
                snprintf(why, n, "p %zu size %d: the ranks cover %zu elements", p, size, next);
                return 0;
            }
        }
    return 1;
}

/* A reduce-scatter then an all-gather, simulated: rank q's input x_q[i] =
 * (q + 1) * 1000 + i over p elements, padded with zeros to `padded`; rank r
 * sums block r of every rank's buffer, then every rank gathers the blocks
 * and keeps the first p: each element must be sum_q x_q[i]. */
static int simulate(size_t p, int size)
{
    sg_comm_layout l[16];
    for (int r = 0; r < size; r++)
        if (sg_comm_layout_of(&l[r], p, size, r))
            return 0;
    size_t P = l[0].padded, B = l[0].block;
    double *in = calloc((size_t)size * P + 1, sizeof *in), *blocks = calloc(P + 1, sizeof *blocks);
    int good = in && blocks;
    for (int q = 0; good && q < size; q++)
        for (size_t i = 0; i < p; i++)
            in[(size_t)q * P + i] = (q + 1) * 1000.0 + (double)i;
    for (int r = 0; good && r < size; r++) /* reduce-scatter */
        for (size_t k = 0; k < B; k++)
            for (int q = 0; q < size; q++)
                blocks[l[r].lo + k] += in[(size_t)q * P + l[r].lo + k];
    for (size_t i = 0; good && i < P; i++) { /* all-gather, first p kept */
        double want = 0;
        for (int q = 0; q < size && i < p; q++)
            want += (q + 1) * 1000.0 + (double)i;
        good = blocks[i] == want; /* padding sums to 0 */
    }
    for (int r = 0; good && r < size; r++) /* a rank's padding is zero after the sum */
        for (size_t k = l[r].valid; k < B; k++)
            good = blocks[l[r].lo + k] == 0.0;
    free(in);
    free(blocks);
    return good;
}

int main(void)
{
    tap_plan(9);
    char why[256] = "";
    int good = sweep(why, sizeof why);
    ok(good, "every p < 300 and 1..8 ranks: block, padded, lo, valid and pad match the searched "
             "reference, the ranks' parts tile [0, p)");
    if (!good)
        tap_diag("%s", why);

    sg_comm_layout l;
    /* tiny-llama's layer, 3 ranks (tests/test_ranks.sh's padded case) */
    ok(!sg_comm_layout_of(&l, 196864, 3, 2) && l.block == 65622 && l.padded == 196866 &&
           l.lo == 131244 && l.valid == 65620 && l.pad == 2,
       "196864 elements over 3 ranks: blocks of 65622, the last rank's 2 padded");
    /* fewer elements than ranks: the last rank holds padding only */
    ok(!sg_comm_layout_of(&l, 2, 3, 2) && l.block == 1 && l.lo == 2 && l.valid == 0 && l.pad == 1,
       "2 elements over 3 ranks: rank 2's block is all padding");
    ok(sg_comm_layout_of(&l, 10, 0, 0) == SG_EINVAL &&
           sg_comm_layout_of(&l, 10, 2, 2) == SG_EINVAL &&
           sg_comm_layout_of(&l, 10, 2, -1) == SG_EINVAL,
       "no ranks, or a rank outside [0, size): refused");
    ok(sg_comm_layout_of(&l, SIZE_MAX, 2, 0) == SG_EINVAL,
       "size x block past SIZE_MAX: refused, not wrapped");

    ok(!sg_comm_layout_of(&l, 10, 3, 1) && sg_comm_layout_holds(&l, 4, 0) &&
           !sg_comm_layout_holds(&l, 3, 0) && sg_comm_layout_holds(&l, 10, 1) &&
           !sg_comm_layout_holds(&l, 4, 1),
       "pieces hold a sharded unit's block (4 of 10 over 3 ranks) or a whole unit (10)");

    ok(simulate(10, 3) && simulate(12, 3) && simulate(1, 4),
       "a simulated reduce-scatter + all-gather through the layout gives the sum (10 and 12 "
       "over 3 ranks, 1 over 4)");
    ok(simulate(196864, 3), "the same for 196864 elements over 3 ranks");
    ok(simulate(7, 1), "one rank: the layout is the unit itself");
    return tap_done();
}
