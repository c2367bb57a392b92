/* test_first_touch.c - common/first_touch.h: the state buffers zeroed on
 * several threads, every byte of every buffer (sizes around the 64 MiB piece,
 * an odd one, one byte), whatever the thread count; and the thread count
 * read from STEPGRAPH_INIT_THREADS, bad values refused naming it. */
#define _POSIX_C_SOURCE 200809L
#include <stdlib.h>
#include <string.h>

#include "common/first_touch.h"
#include "tests/tap.h"

#define NBUF 5

/* the first byte of p[0, n) that is not zero, or -1 */
static long first_nonzero(const unsigned char *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (p[i])
            return (long)i;
    return -1;
}

int main(void)
{
    tap_plan(11);
    const size_t piece = SG_FIRST_TOUCH_PIECE;
    /* one byte; a page and a byte; a piece and 3 bytes (two pieces); two
     * pieces and an odd tail (three); one whole piece */
    size_t bytes[NBUF] = {1, 4097, piece + 3, 2 * piece + 12345, piece};
    void *p[NBUF];
    int alloc_ok = 1;
    for (int i = 0; i < NBUF; i++)
        alloc_ok &= (p[i] = malloc(bytes[i])) != NULL;
    if (!ok(alloc_ok, "five buffers, %zu MiB in all", (bytes[2] + bytes[3] + bytes[4]) >> 20))
        return tap_done();
    int threads[3] = {1, 3, 7};
    for (int k = 0; k < 3; k++) {
        for (int i = 0; i < NBUF; i++)
            memset(p[i], 0xA5, bytes[i]);
        int used = sg_first_touch_zero(p, bytes, NBUF, threads[k]);
        long bad = -1;
        int which = -1;
        for (int i = 0; i < NBUF && bad < 0; i++)
            if ((bad = first_nonzero(p[i], bytes[i])) >= 0)
                which = i;
        ok(bad < 0, "%d thread(s): every byte zero (first left: buffer %d byte %ld)", threads[k],
           which, bad);
        ok(used >= 1 && used <= threads[k], "%d thread(s) asked, %d used", threads[k], used);
    }
    /* the bytes just past a buffer's end are left alone */
    unsigned char *big = malloc(piece + 16);
    memset(big, 0x5A, piece + 16);
    void *one[1] = {big};
    size_t n1[1] = {piece + 3};
    sg_first_touch_zero(one, n1, 1, 4);
    ok(first_nonzero(big, piece + 3) < 0 && big[piece + 3] == 0x5A && big[piece + 15] == 0x5A,
       "a buffer's bytes zeroed, not one past its end");
    free(big);
    for (int i = 0; i < NBUF; i++)
        free(p[i]);

    sg_error err = {0};
    int t = 0;
    unsetenv("STEPGRAPH_INIT_THREADS");
    int rc = sg_first_touch_threads(&t, &err);
    ok(rc == SG_OK && t >= 1 && t <= 32, "unset: the online CPUs, at most 32 (%d)", t);
    setenv("STEPGRAPH_INIT_THREADS", "5", 1);
    rc = sg_first_touch_threads(&t, &err);
    ok(rc == SG_OK && t == 5, "STEPGRAPH_INIT_THREADS=5: 5 (%d)", t);
    const char *bad[] = {"0", "257", "x", "3x"};
    int refused = 1;
    for (int i = 0; i < 4; i++) {
        setenv("STEPGRAPH_INIT_THREADS", bad[i], 1);
        memset(&err, 0, sizeof err);
        char want[64];
        snprintf(want, sizeof want, "STEPGRAPH_INIT_THREADS=%s:", bad[i]);
        refused &= sg_first_touch_threads(&t, &err) == SG_EINVAL && strstr(err.msg, want) != NULL;
    }
    ok(refused, "0, 257, x and 3x refused, naming the variable and its value (%s)", err.msg);
    return tap_done();
}
