/* test_tune_report.c - what `stepgraph tune` writes: exact CSV rows with
 * quoted notes, the best point skips infeasible and failed ones, the Markdown
 * "Best on" lines and priority table, a well-formed SVG with one line per
 * policy per panel and escaped names, and the progress lines. */
#define _POSIX_C_SOURCE 200809L /* open_memstream, dup */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "runtime/tune/tune_report.h"
#include "tests/tap.h"
#include "tests/test_util.h"

static sg_tune_point point(const char *machine, const char *sched, int prio, double v,
                           sg_tune_status st, double ms, const char *note)
{
    sg_tune_point p;
    memset(&p, 0, sizeof p);
    snprintf(p.machine, sizeof p.machine, "%s", machine);
    snprintf(p.sched, sizeof p.sched, "%s", sched);
    snprintf(p.note, sizeof p.note, "%s", note);
    p.priorities = prio;
    p.vary[0] = v;
    p.status = st;
    p.step_s = ms / 1e3;
    p.tflops = 100.0;
    p.mfu = 0.25;
    p.gpu_busy = 0.8;
    p.adam_hidden = 0.5;
    return p;
}

typedef int (*writer)(const sg_tune_set *, FILE *);

/* What w writes, as a string the caller frees; rc gets its return value. */
static char *capture(writer w, const sg_tune_set *s, int *rc)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    if (!f) {
        *rc = -1;
        return NULL;
    }
    *rc = w(s, f);
    fclose(f);
    return buf;
}

/* Line n (from 0) of text, without its newline; "" past the end. */
static const char *nth_line(const char *text, int n, char *dst, size_t size)
{
    dst[0] = '\0';
    for (; text && n > 0; n--) {
        text = strchr(text, '\n');
        if (text)
            text++;
    }
    if (text) {
        size_t len = strcspn(text, "\n");
        if (len >= size)
            len = size - 1;
        memcpy(dst, text, len);
        dst[len] = '\0';
    }
    return dst;
}

static int count(const char *text, const char *sub)
{
    int n = 0;
    for (const char *p = text; p && (p = strstr(p, sub)); p += strlen(sub))
        n++;
    return n;
}

static int is_entity(const char *s)
{
    static const char *const ent[] = {"&amp;", "&lt;", "&gt;", "&quot;", "&apos;"};
    for (int i = 0; i < 5; i++)
        if (!strncmp(s, ent[i], strlen(ent[i])))
            return 1;
    return 0;
}

/* Enough of XML to judge our own output: one root element, tags that nest,
 * only the predefined entities, no loose '<' or '&', nothing but blanks
 * outside the root. Returns 1 when well formed. */
static int xml_well_formed(const char *s)
{
    char stack[64][32];
    int depth = 0, roots = 0;
    while (s && *s) {
        if (*s != '<') {
            if ((*s == '&' && !is_entity(s)) || (depth == 0 && !isspace((unsigned char)*s)))
                return 0;
            s++;
            continue;
        }
        if (!strncmp(s, "<?", 2)) {
            s = strstr(s, "?>");
            s = s ? s + 2 : NULL;
            continue;
        }
        int closing = s[1] == '/';
        const char *name = s + 1 + closing, *e = name;
        while (isalnum((unsigned char)*e) || *e == ':' || *e == '-' || *e == '_')
            e++;
        size_t len = (size_t)(e - name);
        if (len == 0 || len >= sizeof stack[0])
            return 0;
        char quote = 0;
        for (; *e && (quote || *e != '>'); e++) {
            if (quote && *e == quote)
                quote = 0;
            else if (quote && (*e == '<' || (*e == '&' && !is_entity(e))))
                return 0;
            else if (!quote && (*e == '"' || *e == '\''))
                quote = *e;
        }
        if (!*e)
            return 0;
        if (closing) {
            if (depth == 0 || strlen(stack[depth - 1]) != len ||
                memcmp(stack[depth - 1], name, len))
                return 0;
            depth--;
        } else {
            if (depth == 0)
                roots++;
            if (e[-1] != '/') {
                if (depth == 64)
                    return 0;
                memcpy(stack[depth], name, len);
                stack[depth++][len] = '\0';
            }
        }
        s = e + 1;
    }
    return s && depth == 0 && roots == 1;
}

/* <svg first (after an optional XML declaration), </svg> last. */
static int svg_framed(const char *svg)
{
    if (!svg)
        return 0;
    const char *p = svg;
    if (!strncmp(p, "<?xml", 5)) {
        p = strstr(p, "?>");
        if (!p)
            return 0;
        p += 2;
    }
    while (isspace((unsigned char)*p))
        p++;
    size_t n = strlen(svg);
    while (n > 0 && isspace((unsigned char)svg[n - 1]))
        n--;
    return !strncmp(p, "<svg", 4) && n >= 6 && !strncmp(svg + n - 6, "</svg>", 6);
}

/* The progress lines that calls make on stderr. */
static char *capture_progress(const int *done, int n, int total, const char *what, int tty,
                              double secs_per_point)
{
    FILE *tmp = tmpfile();
    if (!tmp)
        return NULL;
    fflush(stderr);
    int saved = dup(2);
    dup2(fileno(tmp), 2);
    for (int i = 0; i < n; i++)
        sg_tune_progress(done[i], total, what, tty, secs_per_point * done[i]);
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    long len = ftell(tmp);
    char *buf = calloc(1, (size_t)(len > 0 ? len : 0) + 1);
    rewind(tmp);
    if (buf && len > 0 && fread(buf, 1, (size_t)len, tmp) != (size_t)len)
        buf[0] = '\0';
    fclose(tmp);
    return buf;
}

int main(void)
{
    /* Two machines, three policies, both priority settings, one knob at
     * 0.25, 0.5 and 1: point = machine*18 + policy*6 + prio*3 + value. */
    static const char *const machines[] = {"gh200", "mi300a"}, *const scheds[] = {"dmdas", "eager",
                                                                                  "lws"};
    static const double ratio[] = {0.25, 0.5, 1.0}, ratio_ms[] = {4, 8, 0};
    sg_tune_point pts[36];
    int n = 0;
    for (int m = 0; m < 2; m++)
        for (int c = 0; c < 3; c++)
            for (int prio = 0; prio < 2; prio++)
                for (int r = 0; r < 3; r++) {
                    double ms = 100.0 + 50.0 * m + 10.0 * c - 5.0 * prio + ratio_ms[r];
                    pts[n++] = point(machines[m], scheds[c], prio, ratio[r], SG_TUNE_OK, ms, "");
                }
    /* gh200 at 0.25 does not fit, with a tempting time the best must skip */
    for (int i = 0; i < 18; i += 3)
        pts[i] = point("gh200", scheds[i / 6], i / 3 % 2, 0.25, SG_TUNE_INFEASIBLE, 1.0,
                       "needs 2.5 GiB more, of 96 GiB");
    pts[21] = point("mi300a", "dmdas", 1, 0.25, SG_TUNE_FAILED, 1.0, "simulation failed: \"boom\"");
    pts[18] = point("mi300a", "dmdas", 0, 0.25, SG_TUNE_INFEASIBLE, 1.0, "needs 1 GiB more");
    pts[5].step_s = 0.0951234567;
    pts[5].tflops = 123.456789;
    pts[5].gpu_busy = 0.9123456;
    snprintf(pts[5].note, sizeof pts[5].note, "policy \"dmdas\", warm");
    pts[5].bound_s = 0.0612345;
    snprintf(pts[5].bound_by, sizeof pts[5].bound_by, "GPU compute");
    sg_tune_set a = {.nvary = 1, .keys = {"offload_optimizer.ratio"}, .points = pts, .npoints = n};

    int rc;
    char line[512];
    char *csv = capture(sg_tune_write_csv, &a, &rc);
    is_int(rc, SG_OK, "csv: written");
    is_str(nth_line(csv, 0, line, sizeof line),
           "machine,sched,priorities,offload_optimizer.ratio,status,step_ms,tflops,mfu,tokens_per_"
           "s,gpu_busy,"
           "adam_hidden,bound_ms,bound_by,note",
           "csv: header");
    is_str(nth_line(csv, 6, line, sizeof line),
           "gh200,dmdas,on,1,ok,95.1235,123.457,0.25,,0.912346,0.5,61.2345,GPU compute,\"policy "
           "\"\"dmdas\"\", warm\"",
           "csv: an ok row, note quoted with its quotes doubled");
    is_str(nth_line(csv, 1, line, sizeof line),
           "gh200,dmdas,off,0.25,infeasible,,,,,,,,,\"needs 2.5 GiB more, of 96 GiB\"",
           "csv: an infeasible row has no figures and its comma stays in the quoted note");
    is_str(nth_line(csv, 22, line, sizeof line),
           "mi300a,dmdas,on,0.25,failed,,,,,,,,,\"simulation failed: \"\"boom\"\"\"",
           "csv: a failed row");
    is_str(nth_line(csv, 2, line, sizeof line),
           "gh200,dmdas,off,0.5,ok,108,100,0.25,,0.8,0.5,,,\"\"",
           "csv: an empty note is still quoted");
    is_int(count(csv, "\n"), 37, "csv: header and 36 rows");
    free(csv);

    is_int(sg_tune_best(&a, "gh200"), 5, "best on gh200: the fastest feasible point");
    is_int(sg_tune_best(&a, "mi300a"), 23, "best on mi300a skips the failed faster point");
    is_int(sg_tune_best(&a, "h100"), -1, "best on an unknown machine: none");

    /* ties, and a machine where nothing fits */
    sg_tune_point bp[] = {
        point("m1", "lws", 1, 0, SG_TUNE_OK, 50, ""),
        point("m1", "dmdas", 1, 0, SG_TUNE_INFEASIBLE, 1, "needs 1 GiB more"),
        point("m1", "eager", 1, 0, SG_TUNE_OK, 40, ""),
        point("m1", "eager", 1, 0, SG_TUNE_FAILED, 10, "crash"),
        point("m2", "dmdas", 1, 0, SG_TUNE_INFEASIBLE, 5, "needs 9 GiB more"),
        point("m1", "dmdas", 1, 0, SG_TUNE_OK, 40, ""),
        point("m2", "eager", 1, 0, SG_TUNE_INFEASIBLE, 5, "needs 8 GiB more"),
    };
    sg_tune_set b = {.nvary = 0, .keys = {{0}}, .points = bp, .npoints = 7};
    is_int(sg_tune_best(&b, "m1"), 2, "best: a tie goes to the earlier point");
    is_int(sg_tune_best(&b, "m2"), -1, "best: -1 when every point is infeasible");

    char *md = capture(sg_tune_write_markdown, &a, &rc);
    is_int(rc, SG_OK, "markdown: written");
    like(md, "\nBest on gh200: dmdas, priorities on, offload_optimizer.ratio=1: 95.12 ms\n",
         "markdown: best on gh200");
    like(md, "\nBest on mi300a: dmdas, priorities on, offload_optimizer.ratio=1: 145.00 ms\n",
         "markdown: best on mi300a");
    ok(md && strstr(md, "Best on gh200") < strstr(md, "Best on mi300a"),
       "markdown: machines in the order they appear");
    like(md,
         "\n| gh200 | dmdas | on | 1 | ok | 95.12 | 123.5 | 25.0% | - | 91.2% | 50.0% | 61.23 | "
         "GPU compute | policy \"dmdas\", warm |\n",
         "markdown: a point's row");
    like(md, "\n| gh200 | dmdas | off | 0.25 | infeasible | - | - | - | - | ",
         "markdown: '-' for figures an infeasible point lacks");
    like(md, "### What graph-aware priorities change", "markdown: priority table when both ran");
    like(md, "\n| gh200 | dmdas | 100.00 | 95.12 | -4.9 |\n", "... with off, on and the change");
    free(md);

    md = capture(sg_tune_write_markdown, &b, &rc);
    like(md, "\nBest on m2: none fits (every point infeasible or failed)\n",
         "markdown: a machine where nothing fits");
    like(md, "\nBest on m1: eager, priorities on: 40.00 ms\n", "markdown: no knob, no key=value");
    ok(md && !strstr(md, "priorities change"),
       "markdown: no priority table when only one setting ran");
    free(md);

    char *svg = capture(sg_tune_write_svg, &a, &rc);
    is_int(rc, SG_OK, "svg: written");
    ok(svg_framed(svg), "svg: starts with <svg, ends with </svg>");
    ok(xml_well_formed(svg), "svg: well formed");
    is_int(count(svg, "<polyline"), 6, "svg: one polyline per policy in each of the two panels");
    is_int(count(svg, "<title>infeasible</title>"), 1,
           "svg: one infeasible mark (gh200 at 0.25; not mi300a, feasible there too)");
    like(svg, ">offload_optimizer.ratio</text>", "svg: the knob names the x axis");
    like(svg, ">mi300a</text>", "svg: the machine titles its panel");
    free(svg);

    sg_tune_point ep[] = {
        point("a<&>b", "x\"y'z", 1, 1, SG_TUNE_OK, 10, ""),
        point("a<&>b", "x\"y'z", 1, 2, SG_TUNE_OK, 12, ""),
        point("a<&>b", "lws", 1, 3, SG_TUNE_INFEASIBLE, 1, ""),
    };
    sg_tune_set e = {.nvary = 1, .keys = {"k<1>"}, .points = ep, .npoints = 3};
    svg = capture(sg_tune_write_svg, &e, &rc);
    ok(svg_framed(svg) && xml_well_formed(svg), "svg: special characters keep it well formed");
    like(svg, "a&lt;&amp;&gt;b", "svg: machine name escaped");
    ok(svg && !strstr(svg, "a<&>b"), "... and never raw");
    like(svg, "x&quot;y&apos;z", "svg: policy name escaped");
    is_int(count(svg, "<polyline"), 1, "svg: no polyline for a policy without a feasible point");
    free(svg);

    svg = capture(sg_tune_write_svg, &b, &rc);
    ok(rc == SG_OK && svg_framed(svg) && xml_well_formed(svg), "svg: bar chart without a knob");
    is_int(count(svg, "<polyline"), 0, "svg: bars, no polyline");
    is_int(count(svg, "<title>infeasible</title>"), 2, "svg: m2's two policies marked infeasible");
    free(svg);

    sg_tune_set none = {.nvary = 1, .keys = {"ratio"}, .points = bp + 4, .npoints = 1};
    svg = capture(sg_tune_write_svg, &none, &rc);
    ok(rc == SG_OK && svg_framed(svg) && xml_well_formed(svg),
       "svg: no feasible point, still valid");
    like(svg, "no feasible point", "... and says so");
    free(svg);
    sg_tune_set empty = {.nvary = 1, .keys = {"ratio"}, .points = NULL, .npoints = 0};
    svg = capture(sg_tune_write_svg, &empty, &rc);
    ok(rc == SG_OK && svg_framed(svg) && xml_well_formed(svg) && strstr(svg, "no feasible point"),
       "svg: no point at all, still valid");
    free(svg);

    FILE *ro = fopen("/dev/null", "r");
    if (!ro) {
        tap_skip(3, "cannot open /dev/null");
    } else {
        is_int(sg_tune_write_csv(&a, ro), SG_EIO, "csv: a failed write is SG_EIO");
        clearerr(ro);
        is_int(sg_tune_write_markdown(&a, ro), SG_EIO, "markdown: a failed write is SG_EIO");
        clearerr(ro);
        is_int(sg_tune_write_svg(&a, ro), SG_EIO, "svg: a failed write is SG_EIO");
        fclose(ro);
    }
    sg_tune_set bad = a;
    bad.nvary = SG_TUNE_MAX_VARY + 1;
    is_int(sg_tune_write_csv(&bad, stdout), SG_EINVAL, "too many varied knobs is refused");

    int steps[24];
    for (int i = 0; i < 24; i++)
        steps[i] = i + 1;
    char *log = capture_progress(steps, 24, 24, "gh200 dmdas", 0, 5.0);
    is_int(count(log, "\n"), 24, "progress, not a terminal: one line per point");
    is_str(nth_line(log, 0, line, sizeof line),
           "tune: 1/24 (4%) gh200 dmdas; 5 s so far, about 1 min 55 s left",
           "... the first with the time left at the pace so far");
    is_str(nth_line(log, 23, line, sizeof line),
           "tune: 24/24 (100%) gh200 dmdas; 2 min 00 s in all",
           "... the last with the time it took");
    free(log);
    int half_end[] = {12, 24};
    log = capture_progress(half_end, 2, 24, "gh200 dmdas", 1, 300.0);
    is_str(log,
           "\rtune: [###############---------------] 12/24 gh200 dmdas; 1 h 00 min so far, "
           "about 1 h 00 min left\033[K"
           "\rtune: [##############################] 24/24 gh200 dmdas; 2 h 00 min in all"
           "\033[K\n",
           "progress on a terminal: one redrawn line with the time left, a newline at the end");
    free(log);
    log = capture_progress(half_end, 2, 0, "x", 1, 1.0);
    is_str(log, "", "progress: nothing when the total is 0");
    free(log);
    /* a knob of words: the points hold indices, the reports the words */
    sg_tune_point wp[] = {
        point("gh200", "dmda", 1, 0, SG_TUNE_OK, 1540, ""),
        point("gh200", "dmda", 1, 1, SG_TUNE_OK, 3217, ""),
    };
    sg_tune_set w = {.nvary = 1, .keys = {"cast_placement"}, .points = wp, .npoints = 2};
    w.nwords[0] = 2;
    snprintf(w.words[0][0], sizeof w.words[0][0], "cpu");
    snprintf(w.words[0][1], sizeof w.words[0][1], "gpu");
    char *wcsv = capture(sg_tune_write_csv, &w, &rc),
         *wmd = capture(sg_tune_write_markdown, &w, &rc);
    char *wsvg = capture(sg_tune_write_svg, &w, &rc);
    ok(wcsv && strstr(wcsv, "\ngh200,dmda,on,cpu,ok,1540,") &&
           strstr(wcsv, "\ngh200,dmda,on,gpu,ok,3217,"),
       "words: the CSV writes each point's word");
    like(wmd, "Best on gh200: dmda, priorities on, cast_placement=cpu: 1540.00 ms",
         "words: the best setting names the word");
    ok(wsvg && strstr(wsvg, ">cpu</text>") && strstr(wsvg, ">gpu</text>"),
       "words: the plot labels its axis with the words");
    free(wcsv);
    free(wmd);
    free(wsvg);
    /* dp_size varied: two ranks take longer per step but do twice the tokens,
     * so the best is the most tokens per second (2 x 4096 / 1.55 s against
     * 4096 / 1.54 s), and a set where one point lacks tokens falls back to
     * the shortest step */
    sg_tune_point dp[] = {
        point("gh200x2", "dmdas", 1, 1, SG_TUNE_OK, 1540, ""),
        point("gh200x2", "dmdas", 1, 2, SG_TUNE_OK, 1550, ""),
    };
    dp[0].tokens = 4096;
    dp[1].tokens = 8192;
    sg_tune_set d = {.nvary = 1, .keys = {"dp_size"}, .points = dp, .npoints = 2};
    is_int(sg_tune_best(&d, "gh200x2"), 1, "dp_size varied: the best is the most tokens/s");
    char *dmd = capture(sg_tune_write_markdown, &d, &rc),
         *dcsv = capture(sg_tune_write_csv, &d, &rc);
    like(dmd, "Best on gh200x2: dmdas, priorities on, dp_size=2: 1550.00 ms, 5285 tokens/s",
         "dp_size varied: the best line gives its tokens/s");
    ok(dcsv && strstr(dcsv, "\ngh200x2,dmdas,on,1,ok,1540,100,0.25,2659.74,"),
       "csv: tokens_per_s = tokens / step (4096 / 1.54 s)");
    free(dmd);
    free(dcsv);
    dp[1].tokens = 0;
    is_int(sg_tune_best(&d, "gh200x2"), 0, "a point without tokens: the shortest step");
    return tap_done();
}
