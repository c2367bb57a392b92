/* tap.h - a minimal Test Anything Protocol emitter for stepgraph's tests.
 *
 * Each test program calls tap_plan() (or tap_plan_skip_all()), then ok()/is_*
 * checks, and returns tap_done(). Output goes to stdout for automake's
 * tap-driver.sh; diagnostics are "# " lines.
 */
#ifndef SG_TAP_H
#define SG_TAP_H

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int tap_count_run;
static int tap_count_failed;
static int tap_planned = -1;

static inline void tap_plan(int n)
{
    tap_planned = n;
    printf("1..%d\n", n);
    fflush(stdout);
}

/* Skips the whole program: automake's tap-driver treats exit 77 as an error,
 * so a program that cannot run prints a skip plan and exits 0. */
static inline int tap_plan_skip_all(const char *reason)
{
    printf("1..0 # SKIP %s\n", reason);
    fflush(stdout);
    return 0;
}

static inline void tap_diag(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fputs("# ", stdout);
    vprintf(fmt, ap);
    fputc('\n', stdout);
    va_end(ap);
    fflush(stdout);
}

static inline int tap_ok_v(int cond, const char *fmt, va_list ap)
{
    tap_count_run++;
    if (!cond)
        tap_count_failed++;
    printf("%sok %d - ", cond ? "" : "not ", tap_count_run);
    vprintf(fmt, ap);
    putchar('\n');
    fflush(stdout);
    return cond;
}

static inline int ok(int cond, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static inline int ok(int cond, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int r = tap_ok_v(cond, fmt, ap);
    va_end(ap);
    return r;
}

static inline void tap_skip(int n, const char *reason)
{
    for (int i = 0; i < n; i++) {
        tap_count_run++;
        printf("ok %d # SKIP %s\n", tap_count_run, reason);
    }
    fflush(stdout);
}

#define is_int(got, want, ...)                                   \
    do {                                                         \
        long long g_ = (long long)(got), w_ = (long long)(want); \
        if (!ok(g_ == w_, __VA_ARGS__))                          \
            tap_diag("  got %lld, expected %lld", g_, w_);       \
    } while (0)

#define is_str(got, want, ...)                                                                 \
    do {                                                                                       \
        const char *g_ = (got), *w_ = (want);                                                  \
        int eq_ = g_ && w_ && strcmp(g_, w_) == 0;                                             \
        if (!ok(eq_, __VA_ARGS__))                                                             \
            tap_diag("  got \"%s\", expected \"%s\"", g_ ? g_ : "(null)", w_ ? w_ : "(null)"); \
    } while (0)

/* |got - want| <= rel * max(|want|, tiny) */
#define is_close(got, want, rel, ...)                                                  \
    do {                                                                               \
        double g_ = (got), w_ = (want);                                                \
        double s_ = fabs(w_) > 1e-30 ? fabs(w_) : 1e-30;                               \
        if (!ok(fabs(g_ - w_) <= (rel)*s_, __VA_ARGS__))                               \
            tap_diag("  got %.9g, expected %.9g (rel tol %g)", g_, w_, (double)(rel)); \
    } while (0)

#define like(got, substr, ...)                                                    \
    do {                                                                          \
        const char *g_ = (got), *s_ = (substr);                                   \
        if (!ok(g_ && strstr(g_, s_) != NULL, __VA_ARGS__))                       \
            tap_diag("  \"%s\" does not contain \"%s\"", g_ ? g_ : "(null)", s_); \
    } while (0)

static inline int tap_done(void)
{
    if (tap_planned < 0)
        printf("1..%d\n", tap_count_run);
    else if (tap_planned != tap_count_run)
        tap_diag("planned %d tests but ran %d", tap_planned, tap_count_run);
    fflush(stdout);
    return (tap_count_failed || (tap_planned >= 0 && tap_planned != tap_count_run)) ? 1 : 0;
}

#endif /* SG_TAP_H */
