/* cleanup.c - temporary paths removed on SIGINT, SIGTERM, SIGHUP (cleanup.h).
 *
 * The handler runs system calls only (openat, getdents64, unlinkat, close,
 * sigaction, raise), or while deferring one atomic compare-and-swap: it
 * may interrupt malloc or stdio in any thread. A slot is claimed with a
 * compare-and-swap (0 free, 1 being written, 2 ready) so that the handler
 * reads only complete paths. */
#define _GNU_SOURCE
#include "common/cleanup.h"

#include <fcntl.h>
#include <signal.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#define SLOTS 32
#define PATH_LEN 4096

static struct {
    int state;
    int if_empty; /* a directory removed only when empty, after the others */
    char path[PATH_LEN];
} slots[SLOTS];

/* sg_cleanup_defer_signals: whether to defer, and the signal deferred */
static int defer, deferred;

static int add(const char *path, int if_empty)
{
    size_t n = strlen(path);
    if (n == 0 || n >= PATH_LEN)
        return -1;
    for (int i = 0; i < SLOTS; i++) {
        int want = 0;
        if (__atomic_compare_exchange_n(&slots[i].state, &want, 1, 0, __ATOMIC_ACQ_REL,
                                        __ATOMIC_RELAXED)) {
            memcpy(slots[i].path, path, n + 1);
            slots[i].if_empty = if_empty;
            __atomic_store_n(&slots[i].state, 2, __ATOMIC_RELEASE);
            return i;
        }
    }
    return -1;
}

int sg_cleanup_add(const char *path)
{
    return add(path, 0);
}

int sg_cleanup_add_if_empty(const char *dir)
{
    return add(dir, 1);
}

void sg_cleanup_forget(int slot)
{
    if (slot >= 0 && slot < SLOTS)
        __atomic_store_n(&slots[slot].state, 0, __ATOMIC_RELEASE);
}

#ifdef __linux__
struct dirent64_raw {
    unsigned long long ino;
    long long off;
    unsigned short reclen;
    unsigned char type;
    char name[];
};

/* Removes name in the directory dirfd: a file, or a directory with its
 * contents (depth bounded: scratch directories are shallow). */
static void remove_at(int dirfd, const char *name, int depth)
{
    if (unlinkat(dirfd, name, 0) == 0 || depth > 8)
        return;
    int fd = openat(dirfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0)
        return;
    char buf[4096];
    for (int pass = 0; pass < 16; pass++) {
        long n = syscall(SYS_getdents64, fd, buf, sizeof buf);
        if (n <= 0)
            break;
        int removed = 0;
        for (long off = 0; off < n;) {
            struct dirent64_raw *d = (struct dirent64_raw *)(buf + off);
            off += d->reclen;
            if (strcmp(d->name, ".") && strcmp(d->name, "..")) {
                remove_at(fd, d->name, depth + 1);
                removed = 1;
            }
        }
        if (removed)
            lseek(fd, 0, SEEK_SET); /* entries moved: read the directory again */
        else
            break;
    }
    close(fd);
    unlinkat(dirfd, name, AT_REMOVEDIR);
}
#else
static void remove_at(int dirfd, const char *name, int depth)
{
    (void)depth;
    unlinkat(dirfd, name, 0);
}
#endif

void sg_remove_tree(const char *path)
{
    remove_at(AT_FDCWD, path, 0);
}

static void handler(int sig)
{
    /* deferred: the first SIGINT or SIGTERM is only recorded (the training
     * loop polls it); any later one ends the process below */
    if ((sig == SIGINT || sig == SIGTERM) && __atomic_load_n(&defer, __ATOMIC_ACQUIRE)) {
        int none = 0;
        if (__atomic_compare_exchange_n(&deferred, &none, sig, 0, __ATOMIC_ACQ_REL,
                                        __ATOMIC_RELAXED))
            return;
    }
    /* the staging paths first: a save directory is then empty if nothing
     * else was saved in it */
    for (int pass = 0; pass < 2; pass++)
        for (int i = 0; i < SLOTS; i++)
            if (__atomic_load_n(&slots[i].state, __ATOMIC_ACQUIRE) != 2 ||
                slots[i].if_empty != pass)
                continue;
            else if (pass)
                unlinkat(AT_FDCWD, slots[i].path, AT_REMOVEDIR);
            else
                remove_at(AT_FDCWD, slots[i].path, 0);
    struct sigaction dfl;
    memset(&dfl, 0, sizeof dfl);
    dfl.sa_handler = SIG_DFL;
    sigemptyset(&dfl.sa_mask);
    sigaction(sig, &dfl, NULL);
    raise(sig);
}

void sg_cleanup_on_signals(void)
{
    static int installed;
    if (installed)
        return;
    installed = 1;
    const int sigs[] = {SIGINT, SIGTERM, SIGHUP};
    for (size_t i = 0; i < sizeof sigs / sizeof sigs[0]; i++) {
        struct sigaction old, sa;
        if (sigaction(sigs[i], NULL, &old) != 0 || old.sa_handler == SIG_IGN)
            continue;
        memset(&sa, 0, sizeof sa);
        sa.sa_handler = handler;
        sigfillset(&sa.sa_mask); /* one handler at a time */
        /* a deferred signal returns: the system calls it interrupted go on */
        sa.sa_flags = SA_RESTART;
        sigaction(sigs[i], &sa, NULL);
    }
}

void sg_cleanup_defer_signals(int on)
{
    __atomic_store_n(&defer, on, __ATOMIC_RELEASE);
}

int sg_cleanup_deferred_signal(void)
{
    return __atomic_load_n(&deferred, __ATOMIC_ACQUIRE);
}
