/* sim_costfit.c - per-kind task times fitted on a calibration run
 * (sim_costfit.h). */
#include "runtime/sim/sim_costfit.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NTERMS SG_COST_TERMS /* overhead, matmul GFLOP, attention GFLOP, GB */

static void terms(const sg_cost_sample *s, double x[NTERMS])
{
    x[0] = 1;
    x[1] = (s->flops - s->attention_flops) * 1e-9;
    x[2] = s->attention_flops * 1e-9;
    x[3] = s->bytes * 1e-9;
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
 * all of them (0 for terms left out). Returns the weighted squared relative
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
    for (int nterms = 1; nterms <= NTERMS; nterms++)
        for (unsigned mask = 1; mask < (1u << NTERMS); mask++) {
            if (__builtin_popcount(mask) != nterms)
                continue;
            double r = fit_subset(s, n, mask, coef);
            if (r < best * (1 - 1e-9) - 1e-300) {
                best = r;
                memcpy(best_coef, coef, sizeof coef);
            }
        }
    if (!isfinite(best))
        return SG_EINVAL;
    out->valid = 1;
    out->overhead_us = best_coef[0];
    out->us_per_gflop = best_coef[1];
    out->us_per_attention_gflop = best_coef[2];
    out->us_per_gb = best_coef[3];
    out->points = used;
    for (int i = 0; i < n; i++)
        if (s[i].us > 0) {
            double e =
                fabs(sg_cost_fit_us(out, s[i].flops, s[i].attention_flops, s[i].bytes) - s[i].us) /
                s[i].us;
            if (e > out->max_rel_err)
                out->max_rel_err = e;
        }
    return SG_OK;
}

double sg_cost_fit_us(const sg_cost_fit *f, double flops, double attention_flops, double bytes)
{
    return f->overhead_us + (flops - attention_flops) * 1e-9 * f->us_per_gflop +
           attention_flops * 1e-9 * f->us_per_attention_gflop + bytes * 1e-9 * f->us_per_gb;
}

double sg_cost_fit_node_us(const sg_cost_fit *f, const sg_node *nd)
{
    return sg_cost_fit_us(f, nd->flops, nd->attention_flops,
                          (double)(nd->bytes_read + nd->bytes_written));
}

/* ---- the node-times file ------------------------------------------------- */

#define MAX_LINE 1024

/* One data line: name,kind,flops,attention_flops,bytes,mean_us,samples, then
 * ,device (cpu or gpu) when the header has it (fields = 8). */
static int parse_line(char *line, int fields, sg_op_kind *kind, int *device, sg_cost_sample *smp)
{
    char *field[8];
    int n = 0;
    line[strcspn(line, "\r\n")] = '\0';
    for (char *p = line; p; n++) {
        if (n == fields)
            return -1; /* more fields than the header names */
        field[n] = p;
        char *comma = strchr(p, ',');
        if (comma)
            *comma = '\0';
        p = comma ? comma + 1 : NULL;
    }
    if (n != fields || sg_op_kind_parse(field[1], kind))
        return -1;
    double v[5];
    for (int i = 0; i < 5; i++) {
        char *end;
        v[i] = strtod(field[2 + i], &end);
        if (end == field[2 + i] || *end || !isfinite(v[i]) || v[i] < 0)
            return -1;
    }
    if (v[1] > v[0])
        return -1; /* attention FLOPs are part of the FLOPs */
    *device = SG_COST_CPU;
    if (fields == 8 && !strcmp(field[7], "gpu"))
        *device = SG_COST_GPU;
    else if (fields == 8 && strcmp(field[7], "cpu"))
        return -1;
    *smp = (sg_cost_sample){v[0], v[1], v[2], v[3], v[4]};
    return 0;
}

#define HEADER "name,kind,flops,attention_flops,bytes,mean_us,samples"

int sg_cost_fits_load(const char *path, sg_cost_fit fits[SG_COST_DEVICES][SG_OP_KIND_COUNT],
                      sg_error *err)
{
    memset(fits, 0, sizeof(sg_cost_fit) * SG_COST_DEVICES * SG_OP_KIND_COUNT);
    FILE *f = fopen(path, "r");
    if (!f)
        return sg_error_set(err, SG_EIO, "%s: cannot open (%s); calibrate the machine again", path,
                            strerror(errno));
    enum { SLOTS = SG_COST_DEVICES * SG_OP_KIND_COUNT };
    sg_cost_sample *smp[SLOTS] = {0};
    int count[SLOTS] = {0}, cap[SLOTS] = {0};
    char line[MAX_LINE];
    int rc = SG_OK, lineno = 0, fields = 7;
    while (!rc && fgets(line, sizeof line, f)) {
        lineno++;
        if (!strchr(line, '\n') && !feof(f)) {
            rc = sg_error_set(err, SG_EINVAL, "%s: line %d: longer than %d characters", path,
                              lineno, MAX_LINE - 1);
            break;
        }
        if (lineno == 1) {
            line[strcspn(line, "\r\n")] = '\0';
            if (!strcmp(line, HEADER ",device"))
                fields = 8;
            else if (strcmp(line, HEADER))
                rc = sg_error_set(err, SG_EINVAL, "%s: line 1: not a node-times header", path);
            continue;
        }
        sg_op_kind k;
        int d;
        sg_cost_sample s;
        if (parse_line(line, fields, &k, &d, &s)) {
            rc = sg_error_set(err, SG_EINVAL,
                              "%s: line %d: expected name,kind,flops,"
                              "attention_flops,bytes,mean_us,samples%s with a node kind and "
                              "numbers >= 0",
                              path, lineno, fields == 8 ? ",cpu|gpu" : "");
            break;
        }
        int slot = d * SG_OP_KIND_COUNT + (int)k;
        if (count[slot] == cap[slot]) {
            int nc = cap[slot] ? 2 * cap[slot] : 16;
            sg_cost_sample *g = realloc(smp[slot], (size_t)nc * sizeof *g);
            if (!g) {
                rc = sg_error_set(err, SG_ENOMEM, "out of memory");
                break;
            }
            smp[slot] = g;
            cap[slot] = nc;
        }
        smp[slot][count[slot]++] = s;
    }
    if (!rc && ferror(f))
        rc = sg_error_set(err, SG_EIO, "%s: read failed", path);
    if (!rc && lineno == 0)
        rc = sg_error_set(err, SG_EINVAL, "%s: empty", path);
    fclose(f);
    for (int slot = 0; slot < SLOTS; slot++) {
        if (!rc && count[slot] > 0)
            sg_cost_fit_samples(smp[slot], count[slot],
                                &fits[slot / SG_OP_KIND_COUNT][slot % SG_OP_KIND_COUNT]);
        free(smp[slot]);
    }
    return rc;
}
