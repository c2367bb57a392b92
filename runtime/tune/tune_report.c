/* tune_report.c - CSV, Markdown, SVG and progress output of `stepgraph tune`
 * (see tune_report.h). */
#define _POSIX_C_SOURCE 200809L /* strnlen */
#include "runtime/tune/tune_report.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* The names are fixed-size arrays filled elsewhere: every read is bounded by
 * the array's size, so a name that fills its array is still read safely. */
#define FIELD(a) (a), sizeof(a)

static int same_field(const char *a, const char *b, size_t max)
{
    size_t n = strnlen(a, max);
    return strnlen(b, max) == n && memcmp(a, b, n) == 0;
}

static int same_name(const char *field, size_t max, const char *name)
{
    size_t n = strnlen(field, max);
    return strlen(name) == n && memcmp(field, name, n) == 0;
}

/* A point that can be compared: simulated, with a step time. */
static int feasible(const sg_tune_point *p)
{
    return p->status == SG_TUNE_OK && isfinite(p->step_s);
}

static const char *status_name(sg_tune_status st)
{
    switch (st) {
    case SG_TUNE_OK: return "ok";
    case SG_TUNE_INFEASIBLE: return "infeasible";
    default: return "failed";
    }
}

static int check_set(const sg_tune_set *s, FILE *out)
{
    if (!s || !out || s->nvary < 0 || s->nvary > SG_TUNE_MAX_VARY || s->npoints < 0 ||
        (s->npoints > 0 && !s->points))
        return SG_EINVAL;
    return SG_OK;
}

/* fflush first: a full disk only shows when the buffer is written. */
static int finish(FILE *out)
{
    return fflush(out) != 0 || ferror(out) ? SG_EIO : SG_OK;
}

/* Machines and policies in first-appearance order, so every output lists
 * them in the order the sweep ran them. */
typedef struct tune_index {
    int nmach, npol;
    int *mach, *pol;             /* per point: its machine, its policy */
    int *mach_first, *pol_first; /* per machine, policy: its first point */
} tune_index;

static int index_build(const sg_tune_set *s, tune_index *ix)
{
    size_t n = (size_t)s->npoints + 1;
    int *buf = malloc(4 * n * sizeof *buf);
    if (!buf)
        return SG_ENOMEM;
    *ix = (tune_index){0, 0, buf, buf + n, buf + 2 * n, buf + 3 * n};
    for (int i = 0; i < s->npoints; i++) {
        const sg_tune_point *p = &s->points[i];
        int m = 0, k = 0;
        while (m < ix->nmach &&
               !same_field(p->machine, s->points[ix->mach_first[m]].machine, sizeof p->machine))
            m++;
        if (m == ix->nmach)
            ix->mach_first[ix->nmach++] = i;
        while (k < ix->npol &&
               !same_field(p->sched, s->points[ix->pol_first[k]].sched, sizeof p->sched))
            k++;
        if (k == ix->npol)
            ix->pol_first[ix->npol++] = i;
        ix->mach[i] = m;
        ix->pol[i] = k;
    }
    return SG_OK;
}

static void index_free(tune_index *ix)
{
    free(ix->mach);
}

/* Seconds per token of a point (per step where its tokens are unknown):
 * what "fastest" means when a knob changes the tokens of a step. */
static double time_cost(const sg_tune_set *s, const sg_tune_point *p)
{
    for (int i = 0; i < s->npoints; i++)
        if (!(s->points[i].tokens > 0))
            return p->step_s;
    return p->step_s / p->tokens;
}

static double tokens_per_s(const sg_tune_point *p)
{
    return p->tokens > 0 && p->step_s > 0 ? p->tokens / p->step_s : NAN;
}

/* Fastest feasible point of machine m, policy k (-1: any) and priorities
 * prio (-1: either), or -1; ties go to the earlier point. */
static int best_where(const sg_tune_set *s, const tune_index *ix, int m, int k, int prio)
{
    int best = -1;
    for (int i = 0; i < s->npoints; i++) {
        const sg_tune_point *p = &s->points[i];
        if (ix->mach[i] != m || (k >= 0 && ix->pol[i] != k) || !feasible(p) ||
            (prio >= 0 && !p->priorities != !prio))
            continue;
        if (best < 0 || time_cost(s, p) < time_cost(s, &s->points[best]))
            best = i;
    }
    return best;
}

int sg_tune_best(const sg_tune_set *s, const char *machine)
{
    if (!s || !machine || s->npoints <= 0 || !s->points)
        return -1;
    int best = -1;
    for (int i = 0; i < s->npoints; i++) {
        const sg_tune_point *p = &s->points[i];
        if (!feasible(p) || !same_name(FIELD(p->machine), machine))
            continue;
        if (best < 0 || time_cost(s, p) < time_cost(s, &s->points[best]))
            best = i;
    }
    return best;
}

/* ---- CSV ---- */

/* RFC 4180: a field is quoted when asked or when it holds a separator,
 * a quote or a line break; quotes inside are doubled. */
static void csv_field(FILE *out, const char *s, size_t max, int quote)
{
    size_t n = strnlen(s, max);
    for (size_t i = 0; i < n && !quote; i++)
        quote = s[i] == ',' || s[i] == '"' || s[i] == '\n' || s[i] == '\r';
    if (!quote) {
        fwrite(s, 1, n, out);
        return;
    }
    fputc('"', out);
    for (size_t i = 0; i < n; i++) {
        if (s[i] == '"')
            fputc('"', out);
        fputc(s[i], out);
    }
    fputc('"', out);
}

/* Empty when unknown, so a spreadsheet reads a blank rather than "nan". */
static void csv_num(FILE *out, double v)
{
    fputc(',', out);
    if (isfinite(v))
        fprintf(out, "%.6g", v);
}

/* A knob's value as written: its word, or the number. */
static void vary_text(const sg_tune_set *s, int k, double v, char *buf, size_t size)
{
    int w = (int)v;
    if (s->nwords[k] > 0 && w >= 0 && w < s->nwords[k] && w == v)
        snprintf(buf, size, "%.*s", (int)sizeof s->words[k][w], s->words[k][w]);
    else
        snprintf(buf, size, "%.6g", v);
}

int sg_tune_write_csv(const sg_tune_set *s, FILE *out)
{
    int rc = check_set(s, out);
    if (rc)
        return rc;
    fputs("machine,sched,priorities", out);
    for (int k = 0; k < s->nvary; k++) {
        fputc(',', out);
        csv_field(out, FIELD(s->keys[k]), 0);
    }
    fputs(",status,step_ms,tflops,mfu,tokens_per_s,gpu_busy,adam_hidden,bound_ms,bound_by,note\n",
          out);
    for (int i = 0; i < s->npoints; i++) {
        const sg_tune_point *p = &s->points[i];
        csv_field(out, FIELD(p->machine), 0);
        fputc(',', out);
        csv_field(out, FIELD(p->sched), 0);
        fputs(p->priorities ? ",on" : ",off", out);
        for (int k = 0; k < s->nvary; k++) {
            char v[32];
            vary_text(s, k, p->vary[k], v, sizeof v);
            fprintf(out, ",%s", v);
        }
        fprintf(out, ",%s", status_name(p->status));
        if (p->status == SG_TUNE_OK) {
            csv_num(out, p->step_s * 1e3);
            csv_num(out, p->tflops);
            csv_num(out, p->mfu);
            csv_num(out, tokens_per_s(p));
            csv_num(out, p->gpu_busy);
            csv_num(out, p->adam_hidden);
        } else {
            fputs(",,,,,,", out);
        }
        csv_num(out, p->bound_s > 0 ? p->bound_s * 1e3 : NAN);
        fputc(',', out);
        csv_field(out, FIELD(p->bound_by), 0);
        fputc(',', out);
        csv_field(out, FIELD(p->note), 1);
        fputc('\n', out);
    }
    return finish(out);
}

/* ---- Markdown ---- */

/* A table cell: '|' would end the cell and a line break the row. */
static void md_cell(FILE *out, const char *s, size_t max)
{
    size_t n = strnlen(s, max);
    fputs("| ", out);
    if (n == 0)
        fputc('-', out);
    for (size_t i = 0; i < n; i++) {
        if (s[i] == '|')
            fputs("\\|", out);
        else
            fputc(s[i] == '\n' || s[i] == '\r' ? ' ' : s[i], out);
    }
    fputc(' ', out);
}

/* "| 12.34 " with scale and decimals, or "| - " when unknown. */
static void md_num(FILE *out, int known, double v, int prec, const char *unit)
{
    if (known && isfinite(v))
        fprintf(out, "| %.*f%s ", prec, v, unit);
    else
        fputs("| - ", out);
}

static void md_points(const sg_tune_set *s, FILE *out)
{
    fputs("### Simulated points\n\n| machine | sched | priorities ", out);
    for (int k = 0; k < s->nvary; k++)
        md_cell(out, FIELD(s->keys[k]));
    fputs("| status | step (ms) | TFLOPS | MFU | tokens/s | GPU busy | Adam hidden | bound (ms) | "
          "bound by | note |\n|---|---|---|",
          out);
    for (int k = 0; k < s->nvary; k++)
        fputs("---:|", out);
    fputs("---|---:|---:|---:|---:|---:|---:|---:|---|---|\n", out);
    for (int i = 0; i < s->npoints; i++) {
        const sg_tune_point *p = &s->points[i];
        int okp = p->status == SG_TUNE_OK;
        md_cell(out, FIELD(p->machine));
        md_cell(out, FIELD(p->sched));
        fprintf(out, "| %s ", p->priorities ? "on" : "off");
        for (int k = 0; k < s->nvary; k++) {
            char v[32];
            vary_text(s, k, p->vary[k], v, sizeof v);
            fprintf(out, "| %s ", v);
        }
        fprintf(out, "| %s ", status_name(p->status));
        md_num(out, okp, p->step_s * 1e3, 2, "");
        md_num(out, okp, p->tflops, 1, "");
        md_num(out, okp, p->mfu * 100.0, 1, "%");
        md_num(out, okp, tokens_per_s(p), 0, "");
        md_num(out, okp, p->gpu_busy * 100.0, 1, "%");
        md_num(out, okp, p->adam_hidden * 100.0, 1, "%");
        md_num(out, p->bound_s > 0, p->bound_s * 1e3, 2, "");
        md_cell(out, FIELD(p->bound_by));
        md_cell(out, FIELD(p->note));
        fputs("|\n", out);
    }
}

/* One paragraph per machine (blank-line separated) so each line starts with
 * "Best on" and still renders as its own line. */
static void md_best(const sg_tune_set *s, const tune_index *ix, FILE *out)
{
    fputs("\n### Best per machine\n", out);
    for (int m = 0; m < ix->nmach; m++) {
        const sg_tune_point *first = &s->points[ix->mach_first[m]];
        int b = best_where(s, ix, m, -1, -1);
        fprintf(out, "\nBest on %.*s: ", (int)strnlen(FIELD(first->machine)), first->machine);
        if (b < 0) {
            fputs("none fits (every point infeasible or failed)\n", out);
            continue;
        }
        const sg_tune_point *p = &s->points[b];
        fprintf(out, "%.*s, priorities %s", (int)strnlen(FIELD(p->sched)), p->sched,
                p->priorities ? "on" : "off");
        for (int k = 0; k < s->nvary; k++) {
            char v[32];
            vary_text(s, k, p->vary[k], v, sizeof v);
            fprintf(out, ", %.*s=%s", (int)strnlen(FIELD(s->keys[k])), s->keys[k], v);
        }
        fprintf(out, ": %.2f ms", p->step_s * 1e3);
        if (isfinite(tokens_per_s(p)))
            fprintf(out, ", %.0f tokens/s", tokens_per_s(p));
        fputc('\n', out);
    }
}

/* Only pairs that ran both ways are compared: elsewhere "change" would mix
 * policies or machines. */
static void md_priorities(const sg_tune_set *s, const tune_index *ix, FILE *out)
{
    int header = 0;
    for (int m = 0; m < ix->nmach; m++) {
        for (int k = 0; k < ix->npol; k++) {
            int has[2] = {0, 0};
            for (int i = 0; i < s->npoints; i++)
                if (ix->mach[i] == m && ix->pol[i] == k)
                    has[!!s->points[i].priorities] = 1;
            if (!has[0] || !has[1])
                continue;
            if (!header) {
                fputs("\n### What graph-aware priorities change\n\n"
                      "| machine | sched | best off (ms) | best on (ms) | change (%) |\n"
                      "|---|---|---:|---:|---:|\n",
                      out);
                header = 1;
            }
            int off = best_where(s, ix, m, k, 0), on = best_where(s, ix, m, k, 1);
            double off_ms = off >= 0 ? s->points[off].step_s * 1e3 : NAN;
            double on_ms = on >= 0 ? s->points[on].step_s * 1e3 : NAN;
            md_cell(out, FIELD(s->points[ix->mach_first[m]].machine));
            md_cell(out, FIELD(s->points[ix->pol_first[k]].sched));
            md_num(out, 1, off_ms, 2, "");
            md_num(out, 1, on_ms, 2, "");
            if (isfinite(off_ms) && isfinite(on_ms) && off_ms > 0)
                fprintf(out, "| %+.1f ", (on_ms - off_ms) / off_ms * 100.0);
            else
                fputs("| - ", out);
            fputs("|\n", out);
        }
    }
}

int sg_tune_write_markdown(const sg_tune_set *s, FILE *out)
{
    int rc = check_set(s, out);
    if (rc)
        return rc;
    tune_index ix;
    if ((rc = index_build(s, &ix)))
        return rc;
    md_points(s, out);
    md_best(s, &ix, out);
    md_priorities(s, &ix, out);
    index_free(&ix);
    return finish(out);
}

/* ---- SVG ---- */

#define PANEL_W 360.0
#define PANEL_H 240.0
#define GAP 24.0   /* around and between panels */
#define HEAD 64.0  /* title and legend above the panels */
#define PAD_L 58.0 /* plot area inside a panel: room for tick labels */
#define PAD_R 18.0
#define PAD_T 30.0
#define PAD_B 46.0

/* Tableau 10 without its red, which marks infeasible values. */
static const char *const palette[] = {"#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd", "#8c564b",
                                      "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"};
#define NPALETTE ((int)(sizeof palette / sizeof *palette))
#define RED "#d62728"

/* Text and attribute values: the five XML specials become entities and
 * control characters, which XML 1.0 forbids, become spaces. */
static void xml_text(FILE *out, const char *s, size_t max)
{
    size_t n = strnlen(s, max);
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        switch (c) {
        case '&': fputs("&amp;", out); break;
        case '<': fputs("&lt;", out); break;
        case '>': fputs("&gt;", out); break;
        case '"': fputs("&quot;", out); break;
        case '\'': fputs("&apos;", out); break;
        default: fputc(c < 0x20 ? ' ' : c, out);
        }
    }
}

typedef struct axis {
    double lo, hi, step;
} axis;

/* About five round-numbered ticks (1, 2 or 5 times a power of ten) that
 * cover [lo, hi]; an empty range is widened around its value. */
static axis nice_axis(double lo, double hi)
{
    if (!(hi > lo)) {
        double d = lo != 0.0 ? fabs(lo) * 0.5 : 1.0;
        lo -= d;
        hi += d;
    }
    double raw = (hi - lo) / 5.0, mag = pow(10.0, floor(log10(raw))), f = raw / mag;
    double step = (f < 1.5 ? 1.0 : f < 3.0 ? 2.0 : f < 7.0 ? 5.0 : 10.0) * mag;
    return (axis){floor(lo / step) * step, ceil(hi / step) * step, step};
}

/* The ticks of a, at most 20 whatever rounding does; -0 printed as 0. */
static int axis_ticks(const axis *a, double *t)
{
    int n = 0;
    for (; n < 20; n++) {
        double v = a->lo + n * a->step;
        if (v > a->hi + a->step * 1e-9)
            break;
        t[n] = fabs(v) < a->step * 1e-9 ? 0.0 : v;
    }
    return n;
}

typedef struct panel {
    double x0, y0;             /* top-left corner */
    double px0, px1, py0, py1; /* plot area; py1 is the x axis */
    axis x, y;
} panel;

static panel panel_at(int row, int col)
{
    panel p;
    p.x0 = GAP + col * (PANEL_W + GAP);
    p.y0 = HEAD + row * (PANEL_H + GAP);
    p.px0 = p.x0 + PAD_L;
    p.px1 = p.x0 + PANEL_W - PAD_R;
    p.py0 = p.y0 + PAD_T;
    p.py1 = p.y0 + PANEL_H - PAD_B;
    p.x = (axis){0.0, 1.0, 0.2};
    p.y = (axis){0.0, 1.0, 0.2};
    return p;
}

static double sx(const panel *p, double v)
{
    return p->px0 + (v - p->x.lo) / (p->x.hi - p->x.lo) * (p->px1 - p->px0);
}

static double sy(const panel *p, double v)
{
    return p->py1 - (v - p->y.lo) / (p->y.hi - p->y.lo) * (p->py1 - p->py0);
}

/* Frame, title, axis names and, when there is a time to show (ymax > 0 and
 * finite), y grid lines from 0; else the "no feasible point" text. */
static void panel_frame(FILE *out, panel *p, const char *title, size_t tmax, const char *xlabel,
                        size_t xmax, double ymax)
{
    fprintf(out,
            "<g>\n<rect x=\"%.1f\" y=\"%.1f\" width=\"%.0f\" height=\"%.0f\" fill=\"none\" "
            "stroke=\"#cccccc\"/>\n",
            p->x0, p->y0, PANEL_W, PANEL_H);
    fprintf(out,
            "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\" font-size=\"13\" "
            "font-weight=\"bold\">",
            p->x0 + PANEL_W / 2, p->y0 + 19);
    xml_text(out, title, tmax);
    fprintf(out, "</text>\n<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">",
            (p->px0 + p->px1) / 2, p->y0 + PANEL_H - 8);
    xml_text(out, xlabel, xmax);
    fprintf(out,
            "</text>\n<text transform=\"translate(%.1f,%.1f) rotate(-90)\" "
            "text-anchor=\"middle\">step (ms)</text>\n",
            p->x0 + 14, (p->py0 + p->py1) / 2);
    if (isfinite(ymax) && ymax > 0) {
        p->y = nice_axis(0.0, ymax);
        double t[20];
        int nt = axis_ticks(&p->y, t);
        for (int i = 0; i < nt; i++)
            fprintf(out,
                    "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#eeeeee\"/>\n"
                    "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\">%.6g</text>\n",
                    p->px0, sy(p, t[i]), p->px1, sy(p, t[i]), p->px0 - 6, sy(p, t[i]) + 4, t[i]);
    } else {
        fprintf(out,
                "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\" fill=\"#888888\">"
                "no feasible point</text>\n",
                (p->px0 + p->px1) / 2, (p->py0 + p->py1) / 2);
    }
    fprintf(out, "<path d=\"M%.1f %.1f V%.1f H%.1f\" fill=\"none\" stroke=\"#333333\"/>\n", p->px0,
            p->py0, p->py1, p->px1);
}

/* A red x; on the axis it carries the "infeasible" tooltip, in the legend
 * (tooltip 0) the text beside it says it. */
static void infeasible_mark(FILE *out, double x, double y, int tooltip)
{
    fprintf(out,
            "<g>%s<path d=\"M%.1f %.1f L%.1f %.1f M%.1f %.1f L%.1f %.1f\" stroke=\"" RED
            "\" stroke-width=\"2\"/></g>\n",
            tooltip ? "<title>infeasible</title>" : "", x - 4, y - 4, x + 4, y + 4, x - 4, y + 4,
            x + 4, y - 4);
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static int find_value(const double *v, int n, double x)
{
    int lo = 0, hi = n - 1;
    while (lo <= hi) {
        int mid = (lo + hi) / 2;
        if (v[mid] < x)
            lo = mid + 1;
        else if (v[mid] > x)
            hi = mid - 1;
        else
            return mid;
    }
    return -1;
}

/* Knob k on machine m: per policy, the best time at each value of k over
 * every other knob and both priority settings. */
static int svg_knob_panel(const sg_tune_set *s, const tune_index *ix, int k, int m, FILE *out,
                          int *any_inf)
{
    size_t n = (size_t)s->npoints + 1, np = (size_t)ix->npol;
    double *vals = malloc(n * sizeof *vals), *best = malloc(np * n * sizeof *best);
    int *npts = calloc(n, sizeof *npts), *ninf = calloc(n, sizeof *ninf);
    if (!vals || !best || !npts || !ninf) {
        free(vals), free(best), free(npts), free(ninf);
        return SG_ENOMEM;
    }
    int nv = 0;
    for (int i = 0; i < s->npoints; i++)
        if (ix->mach[i] == m && isfinite(s->points[i].vary[k]))
            vals[nv++] = s->points[i].vary[k];
    qsort(vals, (size_t)nv, sizeof *vals, cmp_double);
    int u = 0;
    for (int j = 0; j < nv; j++)
        if (u == 0 || vals[j] != vals[u - 1])
            vals[u++] = vals[j];
    nv = u;
    for (size_t j = 0; j < np * n; j++)
        best[j] = NAN;
    double ymax = NAN;
    for (int i = 0; i < s->npoints; i++) {
        const sg_tune_point *p = &s->points[i];
        int j = ix->mach[i] == m && isfinite(p->vary[k]) ? find_value(vals, nv, p->vary[k]) : -1;
        if (j < 0)
            continue;
        npts[j]++;
        ninf[j] += p->status == SG_TUNE_INFEASIBLE;
        double *b = &best[(size_t)ix->pol[i] * n + (size_t)j];
        if (feasible(p) && (isnan(*b) || p->step_s * 1e3 < *b))
            *b = p->step_s * 1e3;
        if (feasible(p) && !(p->step_s * 1e3 <= ymax))
            ymax = p->step_s * 1e3;
    }
    panel pn = panel_at(k, m);
    if (nv > 0)
        pn.x = nice_axis(vals[0], vals[nv - 1]);
    const sg_tune_point *first = &s->points[ix->mach_first[m]];
    panel_frame(out, &pn, FIELD(first->machine), FIELD(s->keys[k]), ymax);
    double t[20];
    int nt = axis_ticks(&pn.x, t);
    for (int i = 0; i < nt && !s->nwords[k]; i++)
        fprintf(out, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">%.6g</text>\n",
                sx(&pn, t[i]), pn.py1 + 16, t[i]);
    for (int j = 0; j < nv && s->nwords[k]; j++) { /* a word knob: its words at its values */
        char v[32];
        vary_text(s, k, vals[j], v, sizeof v);
        fprintf(out, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">", sx(&pn, vals[j]),
                pn.py1 + 16);
        xml_text(out, v, sizeof v);
        fputs("</text>\n", out);
    }
    for (int c = 0; c < ix->npol; c++) {
        const double *bc = &best[(size_t)c * n];
        const char *col = palette[c % NPALETTE];
        int any = 0;
        for (int j = 0; j < nv; j++)
            any |= !isnan(bc[j]);
        if (!any)
            continue;
        fprintf(out, "<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"2\" points=\"", col);
        for (int j = 0, sep = 0; j < nv; j++)
            if (!isnan(bc[j]))
                fprintf(out, "%s%.1f,%.1f", sep++ ? " " : "", sx(&pn, vals[j]), sy(&pn, bc[j]));
        fputs("\"/>\n", out);
        const char *sched = s->points[ix->pol_first[c]].sched;
        for (int j = 0; j < nv; j++) {
            if (isnan(bc[j]))
                continue;
            fprintf(out, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"3\" fill=\"%s\"><title>",
                    sx(&pn, vals[j]), sy(&pn, bc[j]), col);
            xml_text(out, sched, sizeof first->sched);
            fputs(", ", out);
            xml_text(out, FIELD(s->keys[k]));
            char v[32];
            vary_text(s, k, vals[j], v, sizeof v);
            fputc('=', out);
            xml_text(out, v, sizeof v);
            fprintf(out, ": %.2f ms</title></circle>\n", bc[j]);
        }
    }
    for (int j = 0; j < nv; j++)
        if (npts[j] > 0 && ninf[j] == npts[j]) {
            infeasible_mark(out, sx(&pn, vals[j]), pn.py1, 1);
            *any_inf = 1;
        }
    fputs("</g>\n", out);
    free(vals), free(best), free(npts), free(ninf);
    return SG_OK;
}

/* No knob varied: one bar per policy, its best time on machine m. */
static int svg_bar_panel(const sg_tune_set *s, const tune_index *ix, int m, FILE *out, int *any_inf)
{
    int *best = malloc(((size_t)ix->npol + 1) * sizeof *best);
    if (!best)
        return SG_ENOMEM;
    double ymax = NAN;
    for (int c = 0; c < ix->npol; c++) {
        best[c] = best_where(s, ix, m, c, -1);
        if (best[c] >= 0 && !(s->points[best[c]].step_s * 1e3 <= ymax))
            ymax = s->points[best[c]].step_s * 1e3;
    }
    panel pn = panel_at(0, m);
    const sg_tune_point *first = &s->points[ix->mach_first[m]];
    panel_frame(out, &pn, FIELD(first->machine), "policy", 7, ymax);
    double slot = (pn.px1 - pn.px0) / (ix->npol > 0 ? ix->npol : 1);
    for (int c = 0; c < ix->npol; c++) {
        double cx = pn.px0 + slot * (c + 0.5);
        const char *sched = s->points[ix->pol_first[c]].sched;
        fprintf(out, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">", cx, pn.py1 + 16);
        xml_text(out, sched, sizeof first->sched);
        fputs("</text>\n", out);
        if (best[c] >= 0) {
            double ms = s->points[best[c]].step_s * 1e3, top = sy(&pn, ms);
            fprintf(out,
                    "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" "
                    "fill=\"%s\"><title>",
                    cx - slot * 0.3, top, slot * 0.6, pn.py1 - top, palette[c % NPALETTE]);
            xml_text(out, sched, sizeof first->sched);
            fprintf(out, ": %.2f ms</title></rect>\n", ms);
            continue;
        }
        int npts = 0, ninf = 0;
        for (int i = 0; i < s->npoints; i++)
            if (ix->mach[i] == m && ix->pol[i] == c) {
                npts++;
                ninf += s->points[i].status == SG_TUNE_INFEASIBLE;
            }
        if (npts > 0 && ninf == npts) {
            infeasible_mark(out, cx, pn.py1, 1);
            *any_inf = 1;
        }
    }
    fputs("</g>\n", out);
    free(best);
    return SG_OK;
}

/* Swatch and name per policy, then the infeasible mark if one was drawn;
 * the width estimate assumes ~7 px per character at font-size 11. */
static void svg_legend(const sg_tune_set *s, const tune_index *ix, int any_inf, FILE *out)
{
    double x = GAP, y = 44;
    for (int c = 0; c < ix->npol; c++) {
        const char *sched = s->points[ix->pol_first[c]].sched;
        fprintf(out,
                "<rect x=\"%.1f\" y=\"%.1f\" width=\"12\" height=\"12\" fill=\"%s\"/>\n"
                "<text x=\"%.1f\" y=\"%.1f\">",
                x, y - 10, palette[c % NPALETTE], x + 16, y);
        xml_text(out, sched, sizeof s->points->sched);
        fputs("</text>\n", out);
        x += 34 + 7.0 * (double)strnlen(sched, sizeof s->points->sched);
    }
    if (any_inf) {
        infeasible_mark(out, x + 6, y - 4, 0);
        fprintf(out, "<text x=\"%.1f\" y=\"%.1f\">infeasible (every point)</text>\n", x + 16, y);
    }
}

static double legend_width(const sg_tune_set *s, const tune_index *ix)
{
    double w = 200; /* the infeasible entry */
    for (int c = 0; c < ix->npol; c++)
        w += 34 + 7.0 * (double)strnlen(FIELD(s->points[ix->pol_first[c]].sched));
    return w;
}

int sg_tune_write_svg(const sg_tune_set *s, FILE *out)
{
    int rc = check_set(s, out);
    if (rc)
        return rc;
    fputs("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n", out);
    tune_index ix;
    if ((rc = index_build(s, &ix)))
        return rc;
    if (ix.nmach == 0) {
        index_free(&ix);
        fputs("<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"360\" height=\"80\" "
              "viewBox=\"0 0 360 80\" font-family=\"sans-serif\" font-size=\"13\">\n"
              "<rect width=\"360\" height=\"80\" fill=\"white\"/>\n"
              "<text x=\"180\" y=\"44\" text-anchor=\"middle\">no feasible point</text>\n"
              "</svg>\n",
              out);
        return finish(out);
    }
    int rows = s->nvary > 0 ? s->nvary : 1;
    double w = GAP + ix.nmach * (PANEL_W + GAP), h = HEAD + rows * (PANEL_H + GAP);
    if (w < GAP + legend_width(s, &ix))
        w = GAP + legend_width(s, &ix);
    fprintf(out,
            "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" "
            "viewBox=\"0 0 %.0f %.0f\" font-family=\"sans-serif\" font-size=\"11\">\n"
            "<rect width=\"%.0f\" height=\"%.0f\" fill=\"white\"/>\n"
            "<text x=\"%.1f\" y=\"22\" font-size=\"15\" font-weight=\"bold\">"
            "Predicted step time (ms)%s</text>\n",
            w, h, w, h, w, h, GAP,
            s->nvary > 0 ? ", best over the other knobs and priority settings"
                         : ", best per policy");
    int any_inf = 0;
    for (int m = 0; m < ix.nmach && !rc; m++) {
        if (s->nvary == 0)
            rc = svg_bar_panel(s, &ix, m, out, &any_inf);
        for (int k = 0; k < s->nvary && !rc; k++)
            rc = svg_knob_panel(s, &ix, k, m, out, &any_inf);
    }
    if (!rc)
        svg_legend(s, &ix, any_inf, out);
    index_free(&ix);
    if (rc)
        return rc;
    fputs("</svg>\n", out);
    return finish(out);
}

/* ---- progress ---- */

/* "12 s", "3 min 05 s", "2 h 07 min": a duration a person reads */
static void format_duration(double s, char *buf, size_t size)
{
    long t = s > 0 ? (long)(s + 0.5) : 0;
    if (t < 60)
        snprintf(buf, size, "%ld s", t);
    else if (t < 3600)
        snprintf(buf, size, "%ld min %02ld s", t / 60, t % 60);
    else
        snprintf(buf, size, "%ld h %02ld min", t / 3600, (t % 3600) / 60);
}

void sg_tune_progress(int done, int total, const char *what, int is_tty, double elapsed_s)
{
    if (total <= 0)
        return;
    if (done < 0)
        done = 0;
    if (done > total)
        done = total;
    if (!what)
        what = "";
    /* the time left at the mean pace of the points so far */
    char spent[32], left[32], when[96];
    format_duration(elapsed_s, spent, sizeof spent);
    if (done == total)
        snprintf(when, sizeof when, "%s in all", spent);
    else if (done == 0)
        snprintf(when, sizeof when, "%s so far", spent);
    else {
        format_duration(elapsed_s / done * (total - done), left, sizeof left);
        snprintf(when, sizeof when, "%s so far, about %s left", spent, left);
    }
    if (is_tty) {
        char bar[31];
        int fill = (int)((long long)done * 30 / total);
        memset(bar, '#', (size_t)fill);
        memset(bar + fill, '-', (size_t)(30 - fill));
        bar[30] = '\0';
        /* ESC[K clears what a longer previous line left behind */
        fprintf(stderr, "\rtune: [%s] %d/%d %s; %s\033[K%s", bar, done, total, what, when,
                done == total ? "\n" : "");
        fflush(stderr);
        return;
    }
    /* a log: every point, as it finishes */
    fprintf(stderr, "tune: %d/%d (%d%%)%s%s; %s\n", done, total,
            (int)((long long)done * 100 / total), *what ? " " : "", what, when);
}
