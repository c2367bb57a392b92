/* test_cleanup.c - common/cleanup.h's signal handler, each case in a child
 * process that sends itself the signals (raise, so the order is exact) and
 * reports through its exit status; the parent checks how the child ended
 * (waitpid) and what is left on disk:
 * - not deferring: SIGTERM removes a registered directory with its files
 *   and ends the process by SIGTERM;
 * - deferring: the first SIGTERM (or SIGINT) is only recorded, the process
 *   goes on (with the registered paths still there); a second signal ends
 *   it by that signal, removing the registered paths; a directory
 *   registered "if empty" is removed when empty, kept (with its file)
 *   otherwise;
 * - deferring, SIGHUP ends the process at once;
 * - defer off again: SIGTERM ends at once, and a signal recorded stays
 *   recorded;
 * - a signal ignored when the process started (nohup) stays ignored. */
#define _GNU_SOURCE
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/cleanup.h"
#include "tests/tap.h"

static char root[64];

static int exists(const char *name)
{
    char p[256];
    struct stat st;
    snprintf(p, sizeof p, "%s/%s", root, name);
    return stat(p, &st) == 0;
}

/* mkdir root/name, with a file in it when full */
static void make_dir(const char *name, int full)
{
    char p[256];
    snprintf(p, sizeof p, "%s/%s", root, name);
    mkdir(p, 0777);
    if (full) {
        strcat(p, "/f");
        FILE *f = fopen(p, "w");
        if (f)
            fclose(f);
    }
}

static void add(const char *name, int if_empty)
{
    char p[256];
    snprintf(p, sizeof p, "%s/%s", root, name);
    if (if_empty)
        sg_cleanup_add_if_empty(p);
    else
        sg_cleanup_add(p);
}

/* Runs child() in a child process; its wait status. */
static int in_child(void (*child)(void))
{
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        /* the handler is what is tested: a suite started under nohup or in
         * the background of a non-interactive shell inherits SIGHUP or
         * SIGINT ignored, and the handler leaves an ignored signal ignored */
        signal(SIGHUP, SIG_DFL);
        signal(SIGINT, SIG_DFL);
        signal(SIGTERM, SIG_DFL);
        sg_cleanup_on_signals();
        child();
        _exit(0); /* reached only when no signal ended it */
    }
    int status = 0;
    waitpid(pid, &status, 0);
    return status;
}

static int ended_by(int status, int sig)
{
    return WIFSIGNALED(status) && WTERMSIG(status) == sig;
}

static void plain(void)
{
    make_dir("staging", 1);
    add("staging", 0);
    raise(SIGTERM);
    _exit(3); /* still alive: wrong */
}

/* exit status 10 + the check that failed, before the second signal */
static void deferred(void)
{
    make_dir("stage2", 1);
    make_dir("empty", 0);
    make_dir("kept", 1);
    add("stage2", 0);
    add("empty", 1);
    add("kept", 1);
    sg_cleanup_defer_signals(1);
    if (sg_cleanup_deferred_signal() != 0)
        _exit(10);
    raise(SIGTERM);
    if (sg_cleanup_deferred_signal() != SIGTERM)
        _exit(11);
    if (!exists("stage2") || !exists("empty"))
        _exit(12);
    raise(SIGINT);
    _exit(13);
}

static void hangup(void)
{
    sg_cleanup_defer_signals(1);
    raise(SIGHUP);
    _exit(3);
}

static void off_again(void)
{
    sg_cleanup_defer_signals(1);
    raise(SIGINT);
    sg_cleanup_defer_signals(0);
    if (sg_cleanup_deferred_signal() != SIGINT)
        _exit(10);
    raise(SIGTERM);
    _exit(3);
}

/* a signal ignored when the process started (nohup) stays ignored */
static void ignored(void)
{
    sg_cleanup_on_signals();
    raise(SIGHUP);
    _exit(4);
}

int main(void)
{
    snprintf(root, sizeof root, "/tmp/sg_cleanup.XXXXXX");
    if (!mkdtemp(root))
        return tap_plan_skip_all("cannot create a temporary directory");
    tap_plan(8);
    int s = in_child(plain);
    ok(ended_by(s, SIGTERM) && !exists("staging"),
       "not deferring: SIGTERM removes the registered directory and ends the process by it");

    s = in_child(deferred);
    ok(ended_by(s, SIGINT),
       "deferring: the first SIGTERM is recorded and the process goes on; the second signal, "
       "SIGINT, ends it (status %d%s)",
       WIFEXITED(s) ? WEXITSTATUS(s) : -1, WIFEXITED(s) ? ": a check before it failed" : "");
    ok(!exists("stage2"), "the second signal removes the registered staging directory");
    ok(!exists("empty"), "and a directory registered if empty, being empty");
    ok(exists("kept") && exists("kept/f"), "but keeps one that holds a file");

    s = in_child(hangup);
    ok(ended_by(s, SIGHUP), "deferring: SIGHUP still ends the process at once");

    s = in_child(off_again);
    ok(ended_by(s, SIGTERM),
       "defer off again: SIGTERM ends at once, the SIGINT recorded before stays recorded "
       "(status %d)",
       WIFEXITED(s) ? WEXITSTATUS(s) : -1);

    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        signal(SIGHUP, SIG_IGN);
        ignored();
    }
    waitpid(pid, &s, 0);
    ok(WIFEXITED(s) && WEXITSTATUS(s) == 4,
       "SIGHUP ignored at the start (nohup): the handler leaves it ignored, the process goes on");

    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", root);
    if (system(cmd) != 0)
        tap_diag("could not remove %s", root);
    return tap_done();
}
