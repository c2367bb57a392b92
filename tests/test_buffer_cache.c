/* test_buffer_cache.c - the large-buffer cache's rule (runtime/exec/
 * buffer_cache.h) through StarPU's own allocation calls on a CPU worker: a
 * freed buffer of 32 MiB or more is kept and handed to a later request it
 * holds with at most a sixteenth to spare, the smallest such first; its
 * pages come back with no page fault (counted by getrusage: a fresh mapping
 * of 64 MiB faults 16,384 times with 4 KiB pages); a request that fits no
 * kept buffer unmaps kept ones, oldest first, until the kept bytes plus
 * those StarPU holds are under the highest StarPU held; small buffers are
 * not kept; uninstalled, StarPU allocates on its own again. The expected
 * figures are worked out here from that rule and the sizes asked for. */
#define _DEFAULT_SOURCE
#include <starpu.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "runtime/exec/buffer_cache.h"
#include "tests/tap.h"

#define MiB ((size_t)1 << 20)
#define FLAGS STARPU_MALLOC_COUNT

static long minor_faults(void)
{
    struct rusage u;
    getrusage(RUSAGE_SELF, &u);
    return u.ru_minflt;
}

static void *take(size_t bytes)
{
    void *p = NULL;
    if (starpu_malloc_flags(&p, bytes, FLAGS))
        return NULL;
    return p;
}

static void give(void *p, size_t bytes)
{
    starpu_free_flags(p, bytes, FLAGS);
}

/* frees two buffers; the bytes kept then */
static long long give_two(void *p, size_t p_bytes, void *q, size_t q_bytes)
{
    give(p, p_bytes);
    give(q, q_bytes);
    return (long long)sg_buffer_cache_get_stats().kept_bytes;
}

/* writes every page; the minor page faults it took */
static long touch(void *p, size_t bytes)
{
    long before = minor_faults();
    memset(p, 1, bytes);
    return minor_faults() - before;
}

int main(void)
{
    unsetenv("STEPGRAPH_BUFFER_CACHE");
    struct starpu_conf conf;
    starpu_conf_init(&conf);
    conf.ncpus = 1;
    conf.ncuda = 0;
    conf.nopencl = 0;
    if (starpu_init(&conf))
        return tap_plan_skip_all("StarPU did not start a CPU worker");
    if (!sg_buffer_cache_install()) {
        starpu_shutdown();
        return tap_plan_skip_all("the cache is not installed here (several NUMA memory nodes)");
    }
    tap_plan(17);
    long page = sysconf(_SC_PAGESIZE);

    void *a = take(64 * MiB);
    long fresh = a ? touch(a, 64 * MiB) : 0;
    sg_buffer_cache_stats s = sg_buffer_cache_get_stats();
    ok(a && s.maps == 1 && fresh >= (long)(64 * MiB) / page / 2,
       "a new buffer of 64 MiB is mapped and faults in as it is written (%ld faults)", fresh);
    give(a, 64 * MiB);
    is_int((long long)sg_buffer_cache_get_stats().kept_bytes, (long long)(64 * MiB),
           "freed, it is kept");

    void *b = take(64 * MiB);
    long again = b ? touch(b, 64 * MiB) : -1;
    s = sg_buffer_cache_get_stats();
    ok(b == a && s.hits == 1 && s.maps == 1, "the next request of its size gets it back");
    ok(again >= 0 && again < 1000,
       "written again, it faults %ld times, not the %ld of a new mapping", again, fresh);

    void *c = take(62 * MiB);
    s = sg_buffer_cache_get_stats();
    ok(c && s.maps == 2 && s.high_water == 126 * MiB,
       "a second buffer while the first is held is mapped: StarPU's mark is 64 + 62 MiB");
    is_int(give_two(b, 64 * MiB, c, 62 * MiB), (long long)(126 * MiB),
           "both freed: 126 MiB kept, no more than the mark");

    void *d = take(60 * MiB);
    s = sg_buffer_cache_get_stats();
    ok(d == c && s.hits == 2,
       "60 MiB gets the 62 MiB buffer (2 MiB to spare, under a sixteenth), not the 64 MiB one");

    void *e = take(40 * MiB);
    s = sg_buffer_cache_get_stats();
    ok(e && s.evictions == 1 && s.kept_bytes == 0 && s.maps == 3,
       "40 MiB fits neither (24 MiB to spare): held 62 + 40 + kept 64 would pass the 126 MiB "
       "mark, so the 64 MiB buffer is unmapped first");
    ok(s.kept_bytes + 102 * MiB <= s.high_water && s.high_water == 126 * MiB,
       "kept plus held (102 MiB) stay under the mark, which does not move");
    is_int(give_two(d, 60 * MiB, e, 40 * MiB), (long long)(102 * MiB),
           "freed: the 62 and 40 MiB buffers are kept");

    void *f = take(100 * MiB);
    s = sg_buffer_cache_get_stats();
    ok(f && s.evictions == 3 && s.kept_bytes == 0,
       "100 MiB: 100 + 102 kept passes the mark, and so would 100 + the 40 MiB one left "
       "once the oldest goes: both are unmapped");
    is_int((long long)s.high_water, (long long)(126 * MiB), "the mark stays at 126 MiB");

    void *small = take(MiB);
    if (small)
        memset(small, 2, MiB);
    give(small, MiB);
    s = sg_buffer_cache_get_stats();
    ok(small && s.kept_bytes == 0 && s.maps == 4, "a buffer of 1 MiB is malloc's, not kept");

    give(f, 100 * MiB);
    is_int((long long)sg_buffer_cache_get_stats().kept_bytes, (long long)(100 * MiB),
           "100 MiB freed: kept");
    sg_buffer_cache_trim();
    is_int((long long)sg_buffer_cache_get_stats().kept_bytes, 0, "a trim unmaps every kept buffer");

    sg_buffer_cache_uninstall();
    ok(!sg_buffer_cache_get_stats().installed, "uninstalled, the hooks are gone");
    void *g = NULL;
    int rc = starpu_malloc_flags(&g, 64 * MiB, 0);
    if (!rc)
        memset(g, 3, 64 * MiB);
    if (!rc)
        starpu_free_flags(g, 64 * MiB, 0);
    ok(rc == 0 && sg_buffer_cache_get_stats().maps == 4,
       "StarPU allocates and frees on its own again, past the hooks");
    starpu_shutdown();
    return tap_done();
}
