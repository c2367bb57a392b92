/* buffer_cache.c - a step's large CPU buffers kept mapped for the next step
 * (buffer_cache.h). */
#define _DEFAULT_SOURCE /* MAP_ANONYMOUS with -std=c11 */
#include "runtime/exec/buffer_cache.h"

#include "runtime/exec/starpu_include.h"

#include <errno.h>
#include <stdint.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

/* one large buffer: mapped by the hooks, either held by StarPU or kept */
typedef struct block {
    void *addr;
    size_t bytes;
} block;

/* a list of blocks in the order they entered it */
typedef struct block_list {
    block *v;
    int n, cap;
} block_list;

static struct {
    pthread_mutex_t lock;
    block_list held;    /* handed to StarPU */
    block_list kept;    /* freed by StarPU, oldest first */
    long long live;     /* held through the hooks now: StarPU's buffers, tasks' memory */
    size_t small_align; /* alignment of the small buffers, 0: malloc's */
    sg_buffer_cache_stats stats;
} cache = {.lock = PTHREAD_MUTEX_INITIALIZER};

static int list_push(block_list *l, block b)
{
    if (l->n == l->cap) {
        int cap = l->cap ? 2 * l->cap : 64;
        block *v = realloc(l->v, (size_t)cap * sizeof *v);
        if (!v)
            return -1;
        l->v = v;
        l->cap = cap;
    }
    l->v[l->n++] = b;
    return 0;
}

static block list_take(block_list *l, int i)
{
    block b = l->v[i];
    memmove(&l->v[i], &l->v[i + 1], (size_t)(l->n - i - 1) * sizeof *l->v);
    l->n--;
    return b;
}

static int find_addr(const block_list *l, const void *addr)
{
    for (int i = l->n - 1; i >= 0; i--)
        if (l->v[i].addr == addr)
            return i;
    return -1;
}

/* the smallest kept buffer that holds `bytes` with at most a sixteenth more
 * (the most recently kept of those): a step asks for the same sizes again,
 * some of them a page's skew apart (lower.c's buffer_skew) */
static int find_fit(const block_list *l, size_t bytes)
{
    int best = -1;
    for (int i = l->n - 1; i >= 0; i--)
        if (l->v[i].bytes >= bytes && l->v[i].bytes - bytes <= bytes / 16 &&
            (best < 0 || l->v[i].bytes < l->v[best].bytes))
            best = i;
    return best;
}

/* unmaps kept buffers, oldest first, until the kept bytes plus `need` more
 * than is held are under the mark (or nothing is kept) */
static void evict_for(size_t need)
{
    /* below 0 when StarPU frees what it had before the hooks */
    size_t live = cache.live > 0 ? (size_t)cache.live : 0;
    while (cache.kept.n > 0 && live + need + cache.stats.kept_bytes > cache.stats.high_water) {
        block b = list_take(&cache.kept, 0);
        munmap(b.addr, b.bytes);
        cache.stats.kept_bytes -= b.bytes;
        cache.stats.evictions++;
    }
}

/* a kept buffer that fits, else a new mapping of `bytes` (whole pages) */
static block map_large(size_t bytes)
{
    int i = find_fit(&cache.kept, bytes);
    if (i >= 0) {
        block b = list_take(&cache.kept, i);
        cache.stats.kept_bytes -= b.bytes;
        cache.stats.hits++;
        return b;
    }
    evict_for(bytes);
    void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED && cache.kept.n > 0) {
        /* the kept buffers' room may be what the mapping needs */
        evict_for(SIZE_MAX / 2);
        p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    }
    if (p == MAP_FAILED)
        return (block){NULL, 0};
    cache.stats.maps++;
    return (block){p, bytes};
}

/* `bytes` more (or less) held through the hooks: the mark follows the highest */
static void count_live(long long bytes)
{
    cache.live += bytes;
    if (cache.live > 0 && (size_t)cache.live > cache.stats.high_water)
        cache.stats.high_water = (size_t)cache.live;
}

static int hook_malloc(unsigned node, void **out, size_t bytes, int flags)
{
    (void)node;
    (void)flags;
    if (bytes < SG_BUFFER_CACHE_MIN_BYTES) {
        if (cache.small_align ? posix_memalign(out, cache.small_align, bytes) != 0
                              : !(*out = malloc(bytes)))
            return -ENOMEM;
        pthread_mutex_lock(&cache.lock);
        count_live((long long)bytes);
        pthread_mutex_unlock(&cache.lock);
        return 0;
    }
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    pthread_mutex_lock(&cache.lock);
    block b = map_large((bytes + page - 1) / page * page);
    if (b.addr && list_push(&cache.held, b)) {
        munmap(b.addr, b.bytes);
        b.addr = NULL;
    }
    if (b.addr)
        count_live((long long)b.bytes); /* the whole block, slack included */
    pthread_mutex_unlock(&cache.lock);
    *out = b.addr;
    return b.addr ? 0 : -ENOMEM;
}

static int hook_free(unsigned node, void *addr, size_t bytes, int flags)
{
    (void)node;
    (void)flags;
    pthread_mutex_lock(&cache.lock);
    int i = bytes >= SG_BUFFER_CACHE_MIN_BYTES ? find_addr(&cache.held, addr) : -1;
    if (i >= 0) {
        block b = list_take(&cache.held, i);
        count_live(-(long long)b.bytes);
        /* kept: the kept bytes plus StarPU's are what they were before */
        if (list_push(&cache.kept, b))
            munmap(b.addr, b.bytes);
        else {
            cache.stats.kept_bytes += b.bytes;
            /* the kernel may take the pages back under memory pressure
             * (a later write keeps them if it has not) */
            madvise(b.addr, b.bytes, MADV_FREE);
        }
    } else {
        count_live(-(long long)bytes);
    }
    pthread_mutex_unlock(&cache.lock);
    if (i < 0)
        free(addr); /* small, or from StarPU's allocator before the hooks */
    return 0;
}

int sg_buffer_cache_check_env(sg_error *err)
{
    const char *v = getenv("STEPGRAPH_BUFFER_CACHE");
    if (v && *v && strcmp(v, "0") != 0 && strcmp(v, "1") != 0)
        return sg_error_set(err, SG_EINVAL,
                            "STEPGRAPH_BUFFER_CACHE=%s: expected 0 (large "
                            "buffers unmapped as they are freed) or 1 (kept, the default)",
                            v);
    return SG_OK;
}

static int wanted(void)
{
#ifdef STARPU_SIMGRID
    return 0;
#else
    const char *v = getenv("STEPGRAPH_BUFFER_CACHE");
    if (v && strcmp(v, "0") == 0)
        return 0;
    return starpu_cuda_worker_get_count() == 0 && starpu_memory_nodes_get_numa_count() == 1;
#endif
}

int sg_buffer_cache_install(void)
{
    if (cache.stats.installed || !wanted())
        return 0;
    starpu_malloc_set_hooks(hook_malloc, hook_free);
    cache.live = 0;
    cache.stats = (sg_buffer_cache_stats){.installed = 1}; /* this run's counts */
    return 1;
}

void sg_buffer_cache_align_small(size_t align)
{
    cache.small_align = align;
}

void sg_buffer_cache_trim(void)
{
    pthread_mutex_lock(&cache.lock);
    while (cache.kept.n > 0) {
        block b = list_take(&cache.kept, cache.kept.n - 1);
        munmap(b.addr, b.bytes);
    }
    cache.stats.kept_bytes = 0;
    pthread_mutex_unlock(&cache.lock);
}

void sg_buffer_cache_uninstall(void)
{
    sg_buffer_cache_trim();
    pthread_mutex_lock(&cache.lock);
    /* a buffer StarPU still holds must come back to hook_free */
    if (cache.stats.installed && cache.held.n == 0) {
        starpu_malloc_set_hooks(NULL, NULL);
        cache.stats.installed = 0;
        cache.live = 0;
        free(cache.held.v);
        free(cache.kept.v);
        cache.held = cache.kept = (block_list){0};
    }
    pthread_mutex_unlock(&cache.lock);
}

sg_buffer_cache_stats sg_buffer_cache_get_stats(void)
{
    pthread_mutex_lock(&cache.lock);
    sg_buffer_cache_stats s = cache.stats;
    pthread_mutex_unlock(&cache.lock);
    return s;
}
