/* fit_search.c - the largest model that fits a machine (fit_search.h). */
#include "runtime/sim/fit_search.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "graph/analysis.h"
#include "graph/compile.h"
#include "graph/disk_tier.h"
#include "models/model_family.h"
#include "runtime/config/step_spec.h"
#include "runtime/sim/sim_fit.h"
#include "models/step_rates.h"

typedef struct search {
    const sg_config *cfg;
    const sg_machine *mach;
    const sg_model *tmpl;
    sg_step_spec spec;
    sg_cost_model cm;
    sg_model *m; /* the candidate (a large struct: on the heap) */
    sg_fit_progress_fn progress;
    void *ctx;
    sg_fit_result *r;
    sg_error *err;
} search;

static int push(sg_fit_result *r, const sg_fit_point *p, sg_error *err)
{
    if (r->npoints == r->cap) {
        int cap = r->cap ? 2 * r->cap : 16;
        sg_fit_point *q = realloc(r->points, (size_t)cap * sizeof *q);
        if (!q)
            return sg_error_set(err, SG_ENOMEM, "out of memory");
        r->points = q;
        r->cap = cap;
    }
    r->points[r->npoints++] = *p;
    return SG_OK;
}

/* The optimizer's fp32 state alone (master and Adam's m and v: 12 bytes per
 * parameter; Lion's or Adagrad's one array: 8; sharded over the ranks)
 * beyond one rank's memories together cannot fit: such a
 * candidate is not compiled (far past the largest that fits, its graph would
 * pass the compiler's limits, e.g. 10^6 optimizer chunks). Fills p and
 * returns 1 for one. */
static int too_large(const search *s, sg_fit_point *p)
{
    const sg_machine *m = s->mach;
    double cap = m->cpu_memory_gb * 1e9 + (m->unified_memory ? 0.0 : m->gpu_memory_gb * 1e9);
    if (s->spec.nvme_optimizer)
        cap += m->disk_capacity_gb * 1e9; /* ZeRO-Infinity: the state's home is the disk */
    double per_param = 4.0 * (1 + sg_optimizer_state_arrays(s->spec.optimizer_state));
    double state =
        per_param * (double)p->params / (double)(s->spec.dp_size > 0 ? s->spec.dp_size : 1);
    if (state <= cap)
        return 0;
    p->gpu_capacity = (m->unified_memory ? m->cpu_memory_gb : m->gpu_memory_gb) * 1e9;
    p->host_capacity = m->cpu_memory_gb * 1e9;
    p->bound_s = NAN;
    p->not_compiled = 1;
    snprintf(p->why, sizeof p->why,
             "the optimizer's fp32 state alone is %.1f GiB per rank, more "
             "than the %.1f GiB of %s's memories%s together",
             state / 1073741824.0, cap / 1073741824.0, m->name,
             s->spec.nvme_optimizer ? " and disk" : "");
    return 1;
}

/* Compiles the candidate in s->m and fills p with its peaks, fit and bound. */
static int measure(search *s, sg_fit_point *p)
{
    sg_graph g;
    sg_graph_init(&g);
    int rc = sg_compile_step(s->m, &s->spec, &g, s->err);
    if (rc) {
        sg_error_prefix(s->err, "compiling the step of %s: ", s->m->name);
        sg_graph_free(&g);
        return rc;
    }
    sg_sim_fit fit;
    sg_summary sum;
    sg_disk_tier tier;
    if (sg_sim_check_fit_spec(&g, &s->spec, s->mach, &fit) ||
        sg_summary_compute(&g, &s->cm, &sum) || sg_disk_tier_compute(&g, &s->spec, &tier)) {
        sg_graph_free(&g);
        return sg_error_set(s->err, SG_ENOMEM, "out of memory summarising %s", s->m->name);
    }
    sg_graph_free(&g);
    sg_disk_tier_apply(&sum, &tier); /* the bound counts the disk's bytes */
    p->disk_bytes = fit.disk_bytes;
    p->disk_capacity = fit.disk_capacity;
    p->fits = fit.fits;
    p->gpu_bytes = fit.gpu_bytes;
    p->host_bytes = fit.host_bytes;
    p->gpu_capacity = fit.gpu_capacity;
    p->host_capacity = fit.host_capacity;
    snprintf(p->why, sizeof p->why, "%s", fit.why);
    p->bound_s = sg_step_lower_bound(&sum, &s->cm, NULL, &p->bound_by);
    /* per rank: the sequences this rank's GPU processes, as the step log */
    sg_step_rates rt;
    sg_step_rates_of(s->m, s->spec.micro_batch * s->spec.grad_accum, s->spec.seq_len,
                     s->spec.activation_checkpointing, p->bound_s, NAN, &rt);
    p->tflops = rt.tflops;
    return SG_OK;
}

/* Evaluates the candidate (hidden, layers; layers 0 = the rule's) and fills
 * *idx with its point's index (a candidate already seen is not redone). */
static int evaluate(search *s, int64_t hidden, int64_t layers, int *idx)
{
    int64_t L = layers ? layers : sg_llama_layers_for(hidden);
    for (int i = 0; i < s->r->npoints; i++)
        if (s->r->points[i].hidden == hidden && s->r->points[i].layers == L) {
            *idx = i;
            return SG_OK;
        }
    int rc = sg_llama_scaled(s->tmpl, hidden, L, s->m, s->err);
    if (rc)
        return rc;
    sg_fit_point p;
    memset(&p, 0, sizeof p);
    p.hidden = hidden;
    p.layers = L;
    p.on_rule = L == sg_llama_layers_for(hidden);
    p.params = sg_model_total_params(s->m);
    p.tflops = NAN;
    if (!too_large(s, &p) && (rc = measure(s, &p)))
        return rc;
    if ((rc = push(s->r, &p, s->err)))
        return rc;
    *idx = s->r->npoints - 1;
    if (s->progress)
        s->progress(&s->r->points[*idx], s->ctx);
    return SG_OK;
}

static int check_args(const char *family, const sg_model *tmpl, int64_t lo, int64_t hi,
                      sg_error *err)
{
    if (!family || strcmp(family, "llama"))
        return sg_error_set(err, SG_EINVAL, "--family %s: unknown model family (known: llama)",
                            family ? family : "(none)");
    if (!tmpl)
        return sg_error_set(err, SG_EINVAL, "fit: no template model");
    const char *which[2] = {"--min-hidden", "--max-hidden"};
    int64_t v[2] = {lo, hi};
    for (int i = 0; i < 2; i++)
        if (v[i] < SG_LLAMA_MIN_HIDDEN || v[i] > SG_LLAMA_MAX_HIDDEN || v[i] % SG_LLAMA_WIDTH_STEP)
            return sg_error_set(err, SG_EINVAL,
                                "%s %lld: expected a multiple of %d from %d "
                                "to %d",
                                which[i], (long long)v[i], SG_LLAMA_WIDTH_STEP, SG_LLAMA_MIN_HIDDEN,
                                SG_LLAMA_MAX_HIDDEN);
    if (lo > hi)
        return sg_error_set(err, SG_EINVAL,
                            "--min-hidden %lld is larger than --max-hidden "
                            "%lld",
                            (long long)lo, (long long)hi);
    return SG_OK;
}

/* The search proper: widths, then layers at the first width that does not fit. */
static int run_search(search *s, int64_t lo_h, int64_t hi_h)
{
    sg_fit_result *r = s->r;
    const int64_t step = SG_LLAMA_WIDTH_STEP;
    int i, rc;
    int64_t fit_h = 0, nofit_h = 0; /* widest known to fit, narrowest known not to */
    if ((rc = evaluate(s, lo_h, 0, &i)))
        return rc;
    if (r->points[i].fits) {
        fit_h = lo_h;
        r->best_on_rule = i;
        if ((rc = evaluate(s, hi_h, 0, &i)))
            return rc;
        if (r->points[i].fits) {
            r->best_on_rule = r->best = i;
            r->hit_max = 1;
            return SG_OK;
        }
        nofit_h = hi_h;
        while (nofit_h - fit_h > step) {
            int64_t mid = fit_h + (nofit_h - fit_h) / step / 2 * step;
            if ((rc = evaluate(s, mid, 0, &i)))
                return rc;
            if (r->points[i].fits) {
                fit_h = mid;
                r->best_on_rule = i;
            } else {
                nofit_h = mid;
            }
        }
    } else {
        nofit_h = lo_h;
    }
    r->best = r->best_on_rule;
    /* fewer layers at the first width that does not fit */
    int64_t yes = 0, no = sg_llama_layers_for(nofit_h);
    int yes_i = -1;
    while (no - yes > 1) {
        int64_t mid = yes + (no - yes) / 2;
        if ((rc = evaluate(s, nofit_h, mid, &i)))
            return rc;
        if (r->points[i].fits) {
            yes = mid;
            yes_i = i;
        } else {
            no = mid;
        }
    }
    if (yes_i >= 0 && (r->best < 0 || r->points[yes_i].params > r->points[r->best].params))
        r->best = yes_i;
    return SG_OK;
}

int sg_fit_search(const sg_config *cfg, const sg_machine *mach, const char *family,
                  const sg_model *tmpl, int64_t min_hidden, int64_t max_hidden,
                  sg_fit_progress_fn progress, void *ctx, sg_fit_result *out, sg_error *err)
{
    memset(out, 0, sizeof *out);
    out->best = out->best_on_rule = -1;
    int rc = check_args(family, tmpl, min_hidden, max_hidden, err);
    if (rc)
        return rc;
    if (!cfg || !mach)
        return sg_error_set(err, SG_EINVAL, "fit: no config or no machine");
    search s = {.cfg = cfg,
                .mach = mach,
                .tmpl = tmpl,
                .progress = progress,
                .ctx = ctx,
                .r = out,
                .err = err};
    sg_step_spec_for_machine(cfg, mach, &s.spec);
    if ((rc = sg_spec_check_disk(&s.spec, mach, err)))
        return rc;
    sg_machine_cost_model(mach, s.spec.compute_dtype, &s.cm);
    s.m = malloc(sizeof *s.m);
    if (!s.m)
        return sg_error_set(err, SG_ENOMEM, "out of memory");
    rc = run_search(&s, min_hidden, max_hidden);
    free(s.m);
    if (rc)
        sg_fit_result_free(out);
    return rc;
}

void sg_fit_result_free(sg_fit_result *r)
{
    if (!r)
        return;
    free(r->points);
    memset(r, 0, sizeof *r);
    r->best = r->best_on_rule = -1;
}
