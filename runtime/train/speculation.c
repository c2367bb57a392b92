/* speculation.c - the adaptive speculation rule (speculation.h). */
#include "runtime/train/speculation.h"

#include <string.h>

void sg_speculation_init(sg_speculation *s, int start_waiting)
{
    memset(s, 0, sizeof *s);
    if (!start_waiting)
        return;
    memset(s->would_fail, 1, sizeof s->would_fail);
    s->steps = SG_SPEC_WINDOW;
    s->waiting = 1;
}

int sg_speculation_update(sg_speculation *s, int would_fail)
{
    s->would_fail[s->steps++ % SG_SPEC_WINDOW] = (uint8_t)(would_fail != 0);
    int n = s->steps < SG_SPEC_WINDOW ? (int)s->steps : SG_SPEC_WINDOW, fails = 0;
    for (int i = 0; i < n; i++)
        fails += s->would_fail[i];
    if (!s->waiting && fails >= SG_SPEC_STOP)
        s->waiting = 1;
    else if (s->waiting && fails <= SG_SPEC_RESUME)
        s->waiting = 0;
    return s->waiting;
}
