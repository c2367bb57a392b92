/* bench_adam.c - parameters per second of sg_adam_step (codelets/cpu/adam.c)
 * on N fp32 parameters, for Adam (default), Lion or Adagrad (--optim), against the memory-bandwidth bound of this machine
 * and against other optimizers (peers) whose timings are given. Run through
 * scripts/bench_adam.sh, which times the peers (torch.optim.AdamW,
 * DeepSpeedCPUAdam) in the same run and passes them with --peer; not a test
 * (timings are never asserted).
 *
 * Usage: bench_adam [--n N] [--threads 1,2] [--reps R] [--optim adam|lion|adagrad]
 *                   [--peer 'NAME=T:SECONDS,...']... [--torch T:SECONDS,...]
 *
 * --peer adds a column NAME (at most 6 peers) with the peer's seconds per step
 * of N parameters at T threads ("n/a" when a thread count is missing or the
 * seconds are 0); --torch T:S,... is --peer 'torch AdamW foreach=T:S,...'.
 * The "best peer" column is the fastest peer at that thread count and
 * "ours/best" sg_adam's parameters per second over it.
 *
 * Every figure is the best of R rounds (STREAM's convention), after one
 * warm-up round; a round times every kernel and variant once. fp32 Adam moves 28 bytes per parameter: reads p, g, m, v (16 B),
 * writes p, m, v back (12 B); Lion and Adagrad keep one state array and move
 * 20 bytes (read p, g and m or v, write p and m or v). The bound is the
 * fastest of three plain memory kernels on the same arrays and threads,
 * divided by those 28 or 20 bytes:
 *   rw4    read 4 arrays, write 3 of them back in place (Adam's own pattern)
 *   triad  a = b + s*c (STREAM counting: 12 B/element, no write-allocate)
 *   copy   a = b       (8 B/element)
 */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "codelets/cpu/adam.h"
#include "bench/bench_util.h"

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* ---- memory kernels (BW_KERNEL: bench_util.h) ---- */

BW_KERNEL static void k_rw4(float *restrict p, const float *restrict g, float *restrict m,
                            float *restrict v, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        float gi = g[i];
        p[i] += 1e-7f * gi;
        m[i] = 0.5f * m[i] + gi;
        v[i] = 0.5f * v[i] + gi * gi;
    }
}

BW_KERNEL static void k_triad(float *restrict a, const float *restrict b, const float *restrict c,
                              size_t n)
{
    for (size_t i = 0; i < n; i++)
        a[i] = b[i] + 0.5f * c[i];
}

BW_KERNEL static void k_copy(float *restrict a, const float *restrict b, size_t n)
{
    for (size_t i = 0; i < n; i++)
        a[i] = b[i];
}

enum { K_RW4, K_TRIAD, K_COPY };

typedef struct job {
    int kind;
    float *p, *m, *v;
    const float *g;
    size_t n;
} job;

static void *job_run(void *arg)
{
    job *j = arg;
    switch (j->kind) {
    case K_RW4: k_rw4(j->p, j->g, j->m, j->v, j->n); break;
    case K_TRIAD: k_triad(j->p, j->g, j->m, j->n); break;
    default: k_copy(j->p, j->g, j->n); break;
    }
    return NULL;
}

/* Runs one kernel over [0, n) split in nthreads chunks of whole cache lines. */
static void run_split(int kind, int nthreads, float *p, const float *g, float *m, float *v,
                      size_t n)
{
    job jobs[MAXT];
    pthread_t tid[MAXT];
    size_t per = ((n + (size_t)nthreads - 1) / (size_t)nthreads + 15) / 16 * 16;
    int nj = 0;
    for (size_t off = 0; off < n && nj < MAXT; off += per, nj++)
        jobs[nj] = (job){kind, p + off, m + off, v + off, g + off, n - off < per ? n - off : per};
    for (int i = 1; i < nj; i++)
        if (pthread_create(&tid[i], NULL, job_run, &jobs[i]))
            job_run(&jobs[i]), tid[i] = 0;
    job_run(&jobs[0]);
    for (int i = 1; i < nj; i++)
        if (tid[i])
            pthread_join(tid[i], NULL);
}

typedef struct ctx {
    float *p, *g, *m, *v;
    size_t n;
    int nthreads, kind;
    sg_adam_params prm;
    int64_t t;
} ctx;

static double time_kernel(void *arg)
{
    ctx *c = arg;
    double t0 = now();
    run_split(c->kind, c->nthreads, c->p, c->g, c->m, c->v, c->n);
    return now() - t0;
}

static double time_adam(void *arg)
{
    ctx *c = arg;
    double t0 = now();
    int rc = sg_adam_step_parallel(&c->prm, ++c->t, c->p, c->g, c->m, c->v, NULL, c->n, 1.0f,
                                   c->nthreads);
    double s = now() - t0;
    if (rc) {
        fprintf(stderr, "bench_adam: sg_adam_step_parallel: %s\n", sg_strerror(rc));
        exit(1);
    }
    return s;
}

/* SuperOffload's validation of a failed speculative step on one thread with
 * the default variant: sg_adam_rollback then sg_adam_step (two passes over
 * the state), against sg_adam_redo (one); rounds alternate, best of reps. */
static void time_validation(ctx *c, int reps)
{
    sg_adam_params prm = SG_ADAM_PARAMS_DEFAULT;
    prm.weight_decay = 0.01f;
    double best[2] = {0, 0};
    int rc = sg_adam_step(&prm, 1, c->p, c->g, c->m, c->v, NULL, c->n, 1.0f);
    for (int r = -1; r < reps && !rc; r++) {
        for (int k = 0; k < 2; k++) {
            double t0 = now();
            if (k == 0) {
                rc |= sg_adam_rollback(&prm, 1, c->p, c->g, c->m, c->v, c->n, 1.0f);
                rc |= sg_adam_step(&prm, 1, c->p, c->g, c->m, c->v, NULL, c->n, 1.0f);
            } else {
                rc |= sg_adam_redo(&prm, 1, c->p, c->g, c->m, c->v, c->n, 1.0f, 1.0f, 1);
            }
            double s = now() - t0;
            best[k] = r < 0 || s < best[k] ? s : best[k];
        }
    }
    if (rc) {
        fprintf(stderr, "bench_adam: validation failed (%d)\n", rc);
        return;
    }
    printf("\n# SuperOffload validation (rollback and redo), 1 thread, %s: rollback then "
           "step %.0f M/s, fused (sg_adam_redo) %.0f M/s: %.2fx\n",
           sg_adam_isa_name(SG_ADAM_ISA_AUTO), (double)c->n / best[0] / 1e6,
           (double)c->n / best[1] / 1e6, best[0] / best[1]);
}

int main(int argc, char **argv)
{
    size_t n = (size_t)64 << 20;
    int threads[8] = {1, 2}, nthr = 2, reps = 5;
    sg_optim_algo algo = SG_OPTIM_ADAM;
    static peer peers[MAXPEER];
    int npeer = 0;
    for (int i = 1; i < argc; i += 2) {
        const char *a = argv[i], *val = i + 1 < argc ? argv[i + 1] : NULL;
        if (!val) {
            fprintf(stderr, "bench_adam: %s needs a value\n", a);
            return 2;
        }
        if (strcmp(a, "--n") == 0) {
            n = (size_t)strtod(val, NULL);
        } else if (strcmp(a, "--threads") == 0) {
            if ((nthr = parse_list(val, threads, 8)) < 1) {
                fprintf(stderr, "bench_adam: --threads %s: expected e.g. 1,2\n", val);
                return 2;
            }
        } else if (strcmp(a, "--reps") == 0) {
            reps = atoi(val);
        } else if (strcmp(a, "--optim") == 0) {
            if (strcmp(val, "adam") == 0)
                algo = SG_OPTIM_ADAM;
            else if (strcmp(val, "lion") == 0)
                algo = SG_OPTIM_LION;
            else if (strcmp(val, "adagrad") == 0)
                algo = SG_OPTIM_ADAGRAD;
            else {
                fprintf(stderr, "bench_adam: --optim %s: expected adam, lion or adagrad\n", val);
                return 2;
            }
        } else if (strcmp(a, "--torch") == 0 || strcmp(a, "--peer") == 0) {
            int torch = strcmp(a, "--torch") == 0;
            if (npeer == MAXPEER) {
                fprintf(stderr, "bench_adam: at most %d peers\n", MAXPEER);
                return 2;
            }
            if (parse_peer(val, torch ? "torch AdamW foreach" : NULL, &peers[npeer])) {
                fprintf(stderr, "bench_adam: %s %s: expected %sT:SECONDS,...\n", a, val,
                        torch ? "" : "NAME=");
                return 2;
            }
            npeer++;
        } else {
            fprintf(stderr, "usage: bench_adam [--n N] [--threads 1,2] [--reps R] "
                            "[--optim adam|lion|adagrad] "
                            "[--peer 'NAME=T:SECONDS,...']... [--torch T:SECONDS,...]\n");
            return 2;
        }
    }
    if (n < 1024 || reps < 1) {
        fprintf(stderr, "bench_adam: --n >= 1024 and --reps >= 1\n");
        return 2;
    }
    sg_error err = {0};
    sg_adam_isa auto_isa;
    if (sg_adam_isa_resolve(SG_ADAM_ISA_AUTO, &auto_isa, &err)) {
        fprintf(stderr, "bench_adam: %s\n", err.msg);
        return 2;
    }

    float *buf[4];
    for (int k = 0; k < 4; k++) {
        if (posix_memalign((void **)&buf[k], 64, n * sizeof(float))) {
            fprintf(stderr, "bench_adam: cannot allocate %zu MB\n", 4 * n * 4 >> 20);
            return 1;
        }
    }
    ctx c = {.p = buf[0], .g = buf[1], .m = buf[2], .v = buf[3], .n = n};
    uint32_t x = 12345;
    for (size_t i = 0; i < n; i++) {
        x = x * 1664525u + 1013904223u;
        c.p[i] = (float)(x >> 8) * 0x1p-24f - 0.5f;
        c.g[i] = (float)((x >> 4) & 0xffff) * 0x1p-16f - 0.5f;
        c.m[i] = 0.0f;
        c.v[i] = 0.0f;
    }

    printf("# %s, N = %zu parameters (%.2f GB of fp32 p, g, m, v), best of %d, "
           "sg_adam default variant: %s\n",
           sg_optim_algo_name(algo), n, 16.0 * (double)n / 1e9, reps,
           sg_adam_isa_name(SG_ADAM_ISA_AUTO));

    /* rows: threads x {bound, variants} */
    /* three variants, best first; the ones this CPU lacks are left out (on
     * AArch64: NEON and scalar) */
#if defined(__aarch64__)
    static const sg_adam_isa isas[] = {SG_ADAM_ISA_NEON, SG_ADAM_ISA_AVX2, SG_ADAM_ISA_SCALAR};
#else
    static const sg_adam_isa isas[] = {SG_ADAM_ISA_AVX512, SG_ADAM_ISA_AVX2, SG_ADAM_ISA_SCALAR};
#endif
    double bound_pps[8], ours_pps[8][3];
    const double bytes[3] = {28.0, 12.0, 8.0};
    const double param_bytes = algo == SG_OPTIM_ADAM ? 28.0 : 20.0;
    for (int ti = 0; ti < nthr; ti++) {
        c.nthreads = threads[ti];
        /* Rounds interleave every kernel and variant, so a slow moment of
         * the machine hits them alike; each keeps its best round. */
        double best[6];
        for (int r = -1; r < reps; r++) { /* round -1: warm-up */
            for (int k = 0; k < 6; k++) {
                double s;
                if (k < 3) {
                    c.kind = k;
                    s = time_kernel(&c);
                } else {
                    if (!sg_adam_isa_supported(isas[k - 3]))
                        continue;
                    c.prm = SG_ADAM_PARAMS_DEFAULT;
                    c.prm.weight_decay = 0.01f;
                    c.prm.algo = algo; /* scripts/bench_adam.sh's hyper-parameters */
                    if (algo == SG_OPTIM_LION)
                        c.prm.lr = 1e-4f, c.prm.beta2 = 0.99f;
                    else if (algo == SG_OPTIM_ADAGRAD)
                        c.prm.lr = 1e-2f, c.prm.eps = 1e-10f;
                    c.prm.isa = isas[k - 3];
                    c.t = r + 1;
                    s = time_adam(&c);
                }
                best[k] = r < 0 || s < best[k] ? s : best[k];
            }
        }
        double gbs[3];
        bound_pps[ti] = 0;
        for (int k = 0; k < 3; k++) {
            gbs[k] = bytes[k] * (double)n / best[k] / 1e9;
            bound_pps[ti] = fmax(bound_pps[ti], gbs[k] * 1e9 / param_bytes);
        }
        printf("# %d thread(s): memory bandwidth rw4 %.1f GB/s, triad %.1f GB/s, "
               "copy %.1f GB/s\n",
               c.nthreads, gbs[0], gbs[1], gbs[2]);
        for (int k = 0; k < 3; k++)
            ours_pps[ti][k] = sg_adam_isa_supported(isas[k]) ? (double)n / best[3 + k] : NAN;
    }

    printf("\n| threads | sg_adam %s |", sg_adam_isa_name(auto_isa));
    for (int k = 0; k < npeer; k++)
        printf(" %s |", peers[k].name);
    printf(
        " best peer | ours/best | bound (%.0f B/param) | ours/bound | other variants |\n|---|---|",
        param_bytes);
    for (int k = 0; k < npeer; k++)
        printf("---|");
    printf("---|---|---|---|---|\n");
    for (int ti = 0; ti < nthr; ti++) {
        int t = threads[ti];
        int ka = auto_isa == isas[0] ? 0 : auto_isa == isas[1] ? 1 : 2;
        double ours = ours_pps[ti][ka], best_pps = 0;
        int best = -1;
        printf("| %d | %.0f M/s |", t, ours / 1e6);
        for (int k = 0; k < npeer; k++) {
            if (peers[k].s[t] > 0) {
                double pp = (double)n / peers[k].s[t];
                printf(" %.0f M/s |", pp / 1e6);
                if (pp > best_pps)
                    best_pps = pp, best = k;
            } else {
                printf(" n/a |");
            }
        }
        char other[128] = "";
        size_t len = 0;
        for (int k = 0; k < 3; k++)
            if (k != ka && !isnan(ours_pps[ti][k]))
                len += (size_t)snprintf(other + len, sizeof other - len, "%s%s %.0f M/s",
                                        len ? ", " : "", sg_adam_isa_name(isas[k]),
                                        ours_pps[ti][k] / 1e6);
        if (best >= 0)
            printf(" %s | %.2fx |", peers[best].name, ours / best_pps);
        else
            printf(" n/a | n/a |");
        printf(" %.0f M/s | %.0f%% | %s |\n", bound_pps[ti] / 1e6, 100.0 * ours / bound_pps[ti],
               other);
    }
    if (algo == SG_OPTIM_ADAM)
        time_validation(&c, reps);
    for (int k = 0; k < 4; k++)
        free(buf[k]);
    return 0;
}
