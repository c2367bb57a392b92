/* cmd_fit.c - `stepgraph fit`: the largest model of a family that fits a
 * machine under a config (runtime/sim/fit_search.h does the search). */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/atomic_file.h"
#include "models/hf_config.h"
#include "models/model_family.h"
#include "runtime/cli/cli.h"
#include "runtime/config/machine.h"
#include "runtime/config/step_spec.h"
#include "runtime/sim/fit_search.h"

#define GIB (1024.0 * 1024.0 * 1024.0)
#define FAMILY_TEMPLATE "llama-3.1-8b" /* vocabulary, rope, eps, positions */

static void fit_help(void)
{
    printf("usage: stepgraph fit CONFIG --machine NAME [--family llama] [--min-hidden N]\n"
           "                    [--max-hidden N] [--write-model FILE] [run options]\n"
           "\n"
           "Finds the largest model of a family whose training step, as CONFIG sets it\n"
           "up (ZeRO stage, offload, SuperOffload, batch, sequence, checkpointing,\n"
           "dp_size ranks), fits the machine's GPU and host memory. Each candidate is\n"
           "compiled into its step graph and its peak memory is the one `graph\n"
           "--summary` prints. A binary search over widths finds the widest candidate\n"
           "that fits; at the next width, a binary search over fewer layers finds the\n"
           "deepest one there that fits, the answer when it is larger. Prints a table\n"
           "(hidden, layers, parameters, GPU and host peaks, fits, the step's lower\n"
           "bound on the machine and the TFLOPS it implies, by the step log's formula)\n"
           "and the largest that fits;\n"
           "progress goes to standard error. CONFIG's model is not used.\n"
           "\n"
           "  --machine NAME         machine model (configs/machines/NAME.json or a path);\n"
           "                         required here or in CONFIG\n"
           "  --family NAME          llama (the only family): Llama 3's shape at width H,\n"
           "                         a multiple of 1024: H/128 heads of 128, 8 KV heads,\n"
           "                         Meta's FFN rule (14336 at 4096, 28672 at 8192, 53248\n"
           "                         at 16384), layers interpolated between Llama 3's\n"
           "                         published depths (16 at 2048 ... 32 at 4096, 80 at\n"
           "                         8192, 126 at 16384), vocabulary and rope of %s\n"
           "  --min-hidden N         narrowest width searched (default %d)\n"
           "  --max-hidden N         widest width searched (default 32768, at most %d)\n"
           "  --write-model FILE     write the answer as a Hugging Face config.json\n"
           "                         (atomically), usable as --model FILE\n"
           "\n",
           FAMILY_TEMPLATE, SG_LLAMA_MIN_HIDDEN, SG_LLAMA_MAX_HIDDEN);
    sg_cli_print_run_flags();
}

static int parse_width(const char *opt, const char *s, int64_t *out, sg_error *err)
{
    char *end;
    errno = 0;
    long long v = s ? strtoll(s, &end, 10) : 0;
    if (!s || !*s || *end || errno)
        return sg_error_set(err, SG_EINVAL, "%s: expected an integer, got \"%s\"", opt, s ? s : "");
    *out = v;
    return SG_OK;
}

static void progress(const sg_fit_point *p, void *ctx)
{
    (void)ctx;
    if (p->not_compiled) {
        fprintf(stderr,
                "stepgraph fit: hidden %lld, %lld layers (%.2f B parameters): does not "
                "fit: %s\n",
                (long long)p->hidden, (long long)p->layers, (double)p->params / 1e9, p->why);
        return;
    }
    char disk[48] = "";
    if (p->disk_bytes > 0)
        snprintf(disk, sizeof disk, ", disk %.1f GiB", p->disk_bytes / GIB);
    fprintf(stderr,
            "stepgraph fit: hidden %lld, %lld layers (%.2f B parameters): GPU %.1f "
            "GiB, host %.1f GiB%s: %s\n",
            (long long)p->hidden, (long long)p->layers, (double)p->params / 1e9, p->gpu_bytes / GIB,
            p->host_bytes / GIB, disk, p->fits ? "fits" : "does not fit");
}

static int by_params(const void *a, const void *b)
{
    const sg_fit_point *x = a, *y = b;
    return (x->params > y->params) - (x->params < y->params);
}

static void print_table(const sg_fit_result *r, const sg_machine *mach, const sg_config *cfg)
{
    /* ZeRO-Infinity: a disk column, the state on disk */
    int disk = 0;
    for (int i = 0; i < r->npoints; i++)
        disk |= r->points[i].disk_bytes > 0;
    char dcap[48] = "";
    if (disk)
        snprintf(dcap, sizeof dcap, ", disk %.1f GiB", mach->disk_capacity_gb * 1e9 / GIB);
    printf("largest llama-shaped model on %s (GPU %.1f GiB, host %.1f GiB%s) under %s\n",
           mach->name, r->npoints ? r->points[0].gpu_capacity / GIB : 0.0,
           r->npoints ? r->points[0].host_capacity / GIB : 0.0, dcap,
           cfg->run_path[0] ? cfg->run_path : cfg->ds_path);
    printf("%7s %6s %12s %13s %14s%s %5s %14s %7s  %s\n", "hidden", "layers", "params (B)",
           "GPU peak GiB", "host peak GiB", disk ? "       disk GiB" : "", "fits", "step bound ms",
           "TFLOPS", "bound by");
    sg_fit_point *sorted = malloc((size_t)(r->npoints ? r->npoints : 1) * sizeof *sorted);
    if (!sorted)
        return;
    memcpy(sorted, r->points, (size_t)r->npoints * sizeof *sorted);
    qsort(sorted, (size_t)r->npoints, sizeof *sorted, by_params);
    for (int i = 0; i < r->npoints; i++) {
        const sg_fit_point *p = &sorted[i];
        char tf[32];
        if (isfinite(p->tflops))
            snprintf(tf, sizeof tf, "%.0f", p->tflops);
        else
            snprintf(tf, sizeof tf, "-");
        if (p->not_compiled) { // the optimizer's state alone is too large: no graph, no peaks
            printf("%7lld %5lld%s %12.2f %13s %14s%s %5s %14s %7s  %s\n", (long long)p->hidden,
                   (long long)p->layers, p->on_rule ? " " : "*", (double)p->params / 1e9, "-", "-",
                   disk ? "              -" : "", "no", "-", "-", "(optimizer state > memory)");
            continue;
        }
        char dcol[24] = "";
        if (disk)
            snprintf(dcol, sizeof dcol, " %14.1f", p->disk_bytes / GIB);
        printf("%7lld %5lld%s %12.2f %13.1f %14.1f%s %5s %14.0f %7s  %s\n", (long long)p->hidden,
               (long long)p->layers, p->on_rule ? " " : "*", (double)p->params / 1e9,
               p->gpu_bytes / GIB, p->host_bytes / GIB, dcol, p->fits ? "yes" : "no",
               p->bound_s * 1e3, tf, p->bound_by ? p->bound_by : "-");
    }
    free(sorted);
    printf("(* fewer layers than the shape rule's)\n");
}

/* The family's template: FAMILY_TEMPLATE with cfg's run options applied
 * (max_length checked against its positions, head_chunk_tokens). */
static int load_template(const sg_config *cfg, sg_model *m, sg_error *err)
{
    sg_config *c = malloc(sizeof *c);
    if (!c)
        return sg_error_set(err, SG_ENOMEM, "out of memory");
    *c = *cfg;
    snprintf(c->run.model, sizeof c->run.model, "%s", FAMILY_TEMPLATE);
    int rc = sg_config_load_model(c, m, err);
    free(c);
    return rc;
}

static int write_model(const char *path, const sg_model *tmpl, const sg_fit_point *p, sg_error *err)
{
    sg_model *m = malloc(sizeof *m);
    char *text = NULL;
    int rc = m ? sg_llama_scaled(tmpl, p->hidden, p->layers, m, err)
               : sg_error_set(err, SG_ENOMEM, "out of memory");
    if (!rc)
        rc = sg_hf_config_text(m, "bfloat16", &text, err);
    if (!rc)
        rc = sg_atomic_write_text(path, text, err);
    free(text);
    free(m);
    return rc;
}

int sg_cmd_fit(int argc, char **argv)
{
    const char *family = "llama", *min_s = NULL, *max_s = NULL, *out_path = NULL;
    int help = 0;
    sg_cli_opt opts[] = {
        {"family", NULL, &family, NULL},    {"min-hidden", NULL, &min_s, NULL},
        {"max-hidden", NULL, &max_s, NULL}, {"write-model", NULL, &out_path, NULL},
        {"help", "h", NULL, &help},
    };
    for (int i = 0; i < argc; i++)
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            fit_help();
            return 0;
        }
    sg_error err = {0};
    sg_config *cfg = calloc(1, sizeof *cfg);
    sg_machine *mach = calloc(1, sizeof *mach);
    sg_model *tmpl = calloc(1, sizeof *tmpl);
    sg_fit_result r;
    memset(&r, 0, sizeof r);
    int64_t lo = SG_LLAMA_MIN_HIDDEN, hi = 32768;
    int rc = cfg && mach && tmpl ? SG_OK : sg_error_set(&err, SG_ENOMEM, "out of memory");
    if (!rc)
        rc = sg_cli_load_config(argc, argv, opts, 5, cfg, &err);
    if (!rc && min_s)
        rc = parse_width("--min-hidden", min_s, &lo, &err);
    if (!rc && max_s)
        rc = parse_width("--max-hidden", max_s, &hi, &err);
    if (!rc && !cfg->run.machine[0])
        rc = sg_error_set(&err, SG_EINVAL,
                          "fit needs a machine model (--machine NAME, or "
                          "\"machine\" in the run config): its GPU and host memory decide");
    char path[4096];
    if (!rc && !(rc = sg_machine_resolve(cfg->run.machine, path, sizeof path, &err)))
        rc = sg_machine_load(path, mach, &err);
    if (!rc && out_path && !*out_path)
        rc = sg_error_set(&err, SG_EINVAL, "--write-model: expected a file name");
    if (!rc)
        rc = load_template(cfg, tmpl, &err);
    if (!rc)
        rc = sg_fit_search(cfg, mach, family, tmpl, lo, hi, progress, NULL, &r, &err);
    if (!rc) {
        print_table(&r, mach, cfg);
        if (r.best < 0) {
            printf("none fits: even %lld hidden with 1 layer needs more memory than %s has\n",
                   (long long)lo, mach->name);
            if (out_path)
                rc = sg_error_set(&err, SG_EINVAL,
                                  "--write-model %s: no model fits, nothing "
                                  "written",
                                  out_path);
        } else {
            const sg_fit_point *b = &r.points[r.best];
            char mem[160];
            if (mach->unified_memory || mach->gpu_count == 0) /* one memory holds both */
                snprintf(mem, sizeof mem, "GPU-side %.1f + host %.1f of %.1f GiB of %s memory",
                         b->gpu_bytes / GIB, b->host_bytes / GIB, b->host_capacity / GIB,
                         mach->unified_memory ? "unified" : "host");
            else
                snprintf(mem, sizeof mem, "GPU %.1f of %.1f GiB, host %.1f of %.1f GiB",
                         b->gpu_bytes / GIB, b->gpu_capacity / GIB, b->host_bytes / GIB,
                         b->host_capacity / GIB);
            printf("largest that fits: llama-scaled-h%lld-l%lld, %.2f B parameters (hidden "
                   "%lld, %lld layers%s), %s, step bound %.0f ms\n",
                   (long long)b->hidden, (long long)b->layers, (double)b->params / 1e9,
                   (long long)b->hidden, (long long)b->layers,
                   b->on_rule ? "" : ", fewer than the rule's", mem, b->bound_s * 1e3);
            if (r.hit_max)
                printf("the widest candidate searched fits: raise --max-hidden to look "
                       "further\n");
            if (out_path && !(rc = write_model(out_path, tmpl, b, &err)))
                fprintf(stderr, "stepgraph: wrote %s\n", out_path);
        }
    }
    if (rc)
        fprintf(stderr, "stepgraph: %s\n", err.msg[0] ? err.msg : sg_strerror(rc));
    sg_fit_result_free(&r);
    free(cfg);
    free(mach);
    free(tmpl);
    return rc ? 1 : 0;
}
