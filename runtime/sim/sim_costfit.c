/* sim_costfit.c - per-kind task times fitted on a calibration run
 * (sim_costfit.h). */
#include "runtime/sim/sim_costfit.h"

#include <math.h>
#include <string.h>


#define NTERMS 3 /* overhead, per GFLOP, per GB */

static void terms(const sg_cost_sample *s, double x[NTERMS])
{
    x[0] = 1;
    x[1] = s->flops * 1e-9;
    x[2] = s->bytes * 1e-9;
}

/* Solves the k x k system a c = b in place (Gauss with partial pivoting).
 * Returns -1 when it is singular. */
static int solve(double a[NTERMS][NTERMS], double b[NTERMS], int k)
{
    for (int col = 0; col < k; col++) {
        int piv = col;
        for (int r = col + 1; r < k; r++)
            if (fabs(a[r][col]) > fabs(a[piv][col]))
                piv = r;
        if (fabs(a[piv][col]) < 1e-300)
            return -1;
        if (piv != col) {
            for (int c = 0; c < k; c++) {
                double t = a[col][c];
                a[col][c] = a[piv][c];
                a[piv][c] = t;
            }
            double t = b[col];
            b[col] = b[piv];
            b[piv] = t;
        }
        for (int r = 0; r < k; r++) {
            if (r == col)
                continue;
            double f = a[r][col] / a[col][col];
            for (int c = col; c < k; c++)
                a[r][c] -= f * a[col][c];
            b[r] -= f * b[col];
        }
    }
    for (int r = 0; r < k; r++)
        b[r] /= a[r][r];
    return 0;
}

/* Least squares on the relative error with the terms in mask; coef gets
 * all three (0 for terms left out). Returns the weighted squared relative
 * residual, or INFINITY when singular or a coefficient is negative. */
static double fit_subset(const sg_cost_sample *s, int n, unsigned mask, double coef[NTERMS])
{
    int idx[NTERMS], k = 0;
    for (int t = 0; t < NTERMS; t++)
        if (mask & (1u << t))
            idx[k++] = t;
    double a[NTERMS][NTERMS] = {{0}}, b[NTERMS] = {0};
    for (int i = 0; i < n; i++) {
        if (!(s[i].us > 0))
            continue;
        double x[NTERMS], w = (s[i].weight > 0 ? s[i].weight : 1) / (s[i].us * s[i].us);
        terms(&s[i], x);
        for (int r = 0; r < k; r++) {
            for (int c = 0; c < k; c++)
                a[r][c] += w * x[idx[r]] * x[idx[c]];
            b[r] += w * x[idx[r]] * s[i].us;
        }
    }
    if (solve(a, b, k))
        return INFINITY;
    for (int t = 0; t < NTERMS; t++)
        coef[t] = 0;
    for (int r = 0; r < k; r++) {
        if (!(b[r] >= 0))
            return INFINITY;
        coef[idx[r]] = b[r];
    }
    double res = 0;
    for (int i = 0; i < n; i++) {
        if (!(s[i].us > 0))
            continue;
        double x[NTERMS], pred = 0;
        terms(&s[i], x);
        for (int t = 0; t < NTERMS; t++)
            pred += coef[t] * x[t];
        double e = (pred - s[i].us) / s[i].us;
        res += (s[i].weight > 0 ? s[i].weight : 1) * e * e;
    }
    return res;
}

int sg_cost_fit_samples(const sg_cost_sample *s, int n, sg_cost_fit *out)
{
    memset(out, 0, sizeof *out);
    int used = 0;
    for (int i = 0; i < n; i++)
        used += s[i].us > 0;
    if (used == 0)
        return SG_EINVAL;
    double best = INFINITY, coef[NTERMS], best_coef[NTERMS] = {0};
    /* fewer terms first: with as good a fit, the simpler one stays */
    static const unsigned masks[] = {1, 2, 4, 3, 5, 6, 7};
    for (size_t m = 0; m < sizeof masks / sizeof masks[0]; m++) {
        double r = fit_subset(s, n, masks[m], coef);
        if (r < best * (1 - 1e-9)) {
            best = r;
            memcpy(best_coef, coef, sizeof coef);
        }
    }
    if (!isfinite(best))
        return SG_EINVAL;
    out->valid = 1;
    out->overhead_us = best_coef[0];
    out->us_per_gflop = best_coef[1];
    out->us_per_gb = best_coef[2];
    out->points = used;
    for (int i = 0; i < n; i++)
        if (s[i].us > 0) {
            double e = fabs(sg_cost_fit_us(out, s[i].flops, s[i].bytes) - s[i].us) / s[i].us;
            if (e > out->max_rel_err)
                out->max_rel_err = e;
        }
    return SG_OK;
}

double sg_cost_fit_us(const sg_cost_fit *f, double flops, double bytes)
{
    return f->overhead_us + flops * 1e-9 * f->us_per_gflop + bytes * 1e-9 * f->us_per_gb;
}
