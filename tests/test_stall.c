/* test_stall.c - the stall watch's rule (runtime/exec/stall.h) on a clock
 * given by hand: when a step that waits counts as one that cannot
 * progress, and what keeps it from counting so (a codelet running, one
 * that began or ended lately, a check that came late because the process
 * did not run, a window of 0). The end-to-end case, a run under a
 * STARPU_LIMIT_CPU_MEM it cannot meet, is tests/test_bad_input.sh's. */
#include <stdlib.h>
#include <string.h>

#include "graph/ir.h"
#include "runtime/exec/stall.h"
#include "tests/tap.h"

#define S 1e6 /* one second of StarPU's clock, in us */

/* A watch with a window of `seconds`, armed at t = 0. */
static void armed(sg_stall_watch *w, double seconds)
{
    memset(w, 0, sizeof *w);
    w->seconds = seconds;
    w->last_check_us = w->restart_us = 0;
}

/* Checks once a second from t = from to t = to (seconds) with the given
 * activity; the first second at which the rule says "stalled", or -1. */
static int first_stall(sg_stall_watch *w, int from, int to, int running, double last_us)
{
    for (int t = from; t <= to; t++)
        if (sg_stall_quiet_past_window(w, t * S, running, last_us))
            return t;
    return -1;
}

int main(void)
{
    sg_stall_watch w;
    armed(&w, 30);
    is_int(first_stall(&w, 1, 60, 0, 0), 30,
           "nothing running or changing since the wait began: stalled once the 30 s window passes");
    armed(&w, 30);
    is_int(first_stall(&w, 1, 600, 1, 0), -1, "a codelet running (a long task): never stalled");
    armed(&w, 30);
    is_int(first_stall(&w, 1, 80, 0, 20 * S), 50,
           "a codelet that ended at 20 s: the window counts from there (stalled at 50 s)");
    armed(&w, 30);
    first_stall(&w, 1, 10, 0, 0);
    is_int(sg_stall_quiet_past_window(&w, 40 * S, 0, 0), 0,
           "a check 30 s after the last (the process was stopped): not stalled, the window "
           "starts again");
    is_int(first_stall(&w, 41, 100, 0, 0), 70, "... and passes 30 s after that late check");
    armed(&w, 30);
    first_stall(&w, 1, 3, 0, 0);
    is_int(first_stall(&w, 6, 40, 0, 0), 30,
           "a check 3 s after the last is on time (polls of 1 s, slack of 3): the window holds");
    armed(&w, 0);
    is_int(first_stall(&w, 1, 600, 0, 0), -1, "STEPGRAPH_STALL_SECONDS=0: never stalled");

    /* the window from the environment, and the room a step needs */
    sg_graph g;
    sg_graph_init(&g);
    sg_graph_add_buffer(&g, "state", 1 << 20, SG_F32, SG_MEM_HOST, 1);
    sg_graph_add_buffer(&g, "act", 1000, SG_F32, SG_MEM_HOST, 0);
    sg_graph_add_buffer(&g, "act.big", 3000, SG_F32, SG_MEM_GPU, 0);
    sg_error err = {0};
    unsetenv("STEPGRAPH_STALL_SECONDS");
    ok(sg_stall_watch_init(&w, &g, &err) == SG_OK && w.seconds == 30,
       "no STEPGRAPH_STALL_SECONDS: a window of 30 s");
    is_int(w.room_bytes, 12000 + ((int64_t)32 << 20),
           "room needed: the largest step-local buffer (3000 floats; state left out) plus one "
           "32 MiB chunk");
    setenv("STEPGRAPH_STALL_SECONDS", "2.5", 1);
    ok(sg_stall_watch_init(&w, &g, &err) == SG_OK && w.seconds == 2.5,
       "STEPGRAPH_STALL_SECONDS=2.5: a window of 2.5 s");
    const char *bad[] = {"-1", "abc", "5s", "nan", "inf", "2e6"};
    int refused = 0;
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        setenv("STEPGRAPH_STALL_SECONDS", bad[i], 1);
        memset(&err, 0, sizeof err);
        refused += sg_stall_watch_init(&w, &g, &err) == SG_EINVAL &&
                   strstr(err.msg, "STEPGRAPH_STALL_SECONDS=") != NULL;
    }
    is_int(refused, 6, "-1, abc, 5s, nan, inf and 2e6 are refused, naming the variable");
    sg_graph_free(&g);
    return tap_done();
}
