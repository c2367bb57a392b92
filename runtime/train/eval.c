/* eval.c - the validation loss during a run (eval.h). */
#define _POSIX_C_SOURCE 200809L
#include "runtime/train/eval.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/clock.h"
#include "graph/analysis.h"
#include "graph/forward_only.h"
#include "runtime/dist/dist.h"

/* Trained targets of a batch (-1: not a target). */
static int64_t count_targets(const int32_t *targets, size_t n)
{
    int64_t c = 0;
    for (size_t i = 0; i < n; i++)
        c += targets[i] >= 0;
    return c;
}

/* The held-out shards: their tokens must be the model's and the training
 * data's (a shard's tokenizer-info.json says whose they are). */
static int check_tokens(sg_eval *e, const char *path, const char *model_path, const sg_model *m,
                        const sg_tokenizer_info *train_tok, sg_error *err)
{
    int rc;
    for (int i = 0; i < e->data.nfiles; i++)
        if (e->data.files[i].kind == SG_DATA_TEXT &&
            (rc = sg_tokenizer_check_text_data(model_path, e->data.files[i].path, err)))
            return sg_error_prefix(err, "eval_data %s: ", path), rc;
    if (e->data.files[0].kind == SG_DATA_TEXT)
        return SG_OK;
    sg_tokenizer_info ti;
    if ((rc = sg_tokenizer_info_read(e->data.files[0].path, &ti, err)) < 0)
        return sg_error_prefix(err, "eval_data %s: ", path), rc;
    if (rc == 0)
        return SG_OK;
    if (ti.vocab_size != m->vocab_size)
        return sg_error_set(err, SG_EINVAL,
                            "eval_data %s: the shards were made by tokenizer %s "
                            "with a vocabulary of %lld (%s), model %s has %lld",
                            path, ti.tokenizer, (long long)ti.vocab_size, ti.path, m->name,
                            (long long)m->vocab_size);
    if (train_tok && strcmp(ti.sha256, train_tok->sha256) != 0)
        return sg_error_set(err, SG_EINVAL,
                            "eval_data %s: the shards were made by tokenizer %s "
                            "(sha256 %.12s...), the training data by %s (sha256 %.12s...): "
                            "tokenize both with the same tokenizer",
                            path, ti.tokenizer, ti.sha256, train_tok->tokenizer, train_tok->sha256);
    return SG_OK;
}

/* How many micro-batches an evaluation reads, and that they hold a target. */
static int resolve_batches(sg_eval *e, const sg_run_options *r, const struct sg_dist *dist,
                           sg_error *err)
{
    uint64_t per = (uint64_t)(e->spec.micro_batch * e->world); /* windows per global batch */
    uint64_t avail = e->data.nwindows / per;
    if (avail == 0)
        return sg_error_set(err, SG_EINVAL,
                            "eval_data %s: %llu window%s of %lld + 1 tokens, "
                            "fewer than one micro-batch (%lld sequences x %d rank%s)",
                            r->eval_data, (unsigned long long)e->data.nwindows,
                            e->data.nwindows == 1 ? "" : "s", (long long)e->spec.seq_len,
                            (long long)e->spec.micro_batch, e->world, e->world == 1 ? "" : "s");
    if ((uint64_t)r->eval_batches > avail)
        return sg_error_set(err, SG_EINVAL,
                            "eval_batches %lld: eval_data %s holds %llu "
                            "micro-batch%s of %lld sequences x %d rank%s",
                            (long long)r->eval_batches, r->eval_data, (unsigned long long)avail,
                            avail == 1 ? "" : "es", (long long)e->spec.micro_batch, e->world,
                            e->world == 1 ? "" : "s");
    e->batches = r->eval_batches > 0 ? r->eval_batches : (int64_t)avail;
    /* a mask may leave no target at all: nothing to evaluate */
    size_t n = (size_t)(e->spec.micro_batch * e->spec.seq_len);
    double count = 0;
    int rc;
    for (int64_t b = 0; b < e->batches; b++) {
        if ((rc = sg_data_next(&e->data, NULL, e->targets, err)))
            return sg_error_prefix(err, "eval_data %s: ", r->eval_data), rc;
        count += (double)count_targets(e->targets, n);
    }
    if ((rc = sg_dist_host_allreduce(dist, &count, 1, SG_COMM_SUM, err)))
        return rc;
    if (count == 0)
        return sg_error_set(err, SG_EINVAL,
                            "eval_data %s: its loss masks leave no target in "
                            "the %lld micro-batch%s evaluated",
                            r->eval_data, (long long)e->batches, e->batches == 1 ? "" : "es");
    return SG_OK;
}

/* The forward of the run's step with `micro` micro-steps (what one run of
 * the forward graph evaluates), without checkpointing: the forward computes
 * the same either way, and a checkpointed step's backward runs forward-phase
 * nodes again (forward_only.h). */
static int compile_forward(sg_eval *e, const sg_model *m, int micro, sg_error *err)
{
    e->spec.grad_accum = micro;
    e->spec.micro_window = 0;
    e->spec.activation_checkpointing = 0;
    sg_graph step;
    sg_graph_init(&step);
    int rc = sg_compile_step(m, &e->spec, &step, err);
    if (!rc)
        rc = sg_graph_forward_only(&step, &e->graph, err);
    sg_graph_free(&step);
    if (rc)
        return sg_error_prefix(err, "eval_data: the forward graph: "), rc;
    sg_cost_model cm;
    sg_cost_model_gh200(&cm);
    if (sg_graph_set_priorities(&e->graph, &cm))
        return sg_error_set(err, SG_ENOMEM, "out of memory computing priorities");
    return SG_OK;
}

int sg_eval_open(sg_eval *e, const sg_config *cfg, const sg_model *m, const sg_step_spec *spec,
                 const struct sg_dist *dist, const sg_tokenizer_info *train_tok, sg_error *err)
{
    const sg_run_options *r = &cfg->run;
    memset(e, 0, sizeof *e);
    sg_graph_init(&e->graph);
    e->last_step = -1;
    if (!r->eval_data[0]) {
        if (r->eval_interval > 0 || r->eval_batches > 0)
            return sg_error_set(
                err, SG_EINVAL,
                "%s %lld: needs eval_data, the held-out token "
                "shards to evaluate on",
                r->eval_interval > 0 ? "eval_interval" : "eval_batches",
                (long long)(r->eval_interval > 0 ? r->eval_interval : r->eval_batches));
        return SG_OK;
    }
    e->on = 1;
    e->interval = r->eval_interval;
    e->rank = dist ? dist->rank : 0;
    e->world = dist ? dist->size : 1;
    e->spec = *spec;
    sg_data_opts o;
    sg_data_opts_default(&o);
    o.batch = spec->micro_batch;
    o.seq_len = spec->seq_len;
    o.vocab_size = m->vocab_size;
    o.shuffle = 0; /* file order: every evaluation reads the same windows */
    o.rank = e->rank;
    o.world = e->world;
    int rc = sg_data_open(&e->data, r->eval_data, &o, err);
    if (rc)
        return sg_error_prefix(err, "eval_data: "), rc;
    e->data_open = 1;
    e->model = m;
    size_t n = (size_t)(spec->micro_batch * spec->seq_len);
    e->inputs = malloc(n * sizeof *e->inputs);
    e->targets = malloc(n * sizeof *e->targets);
    if (!e->inputs || !e->targets)
        return sg_error_set(err, SG_ENOMEM, "out of memory");
    if ((rc = check_tokens(e, r->eval_data, r->model, m, train_tok, err)) ||
        (rc = resolve_batches(e, r, dist, err)))
        return rc;
    /* that the forward compiles is known before StarPU starts */
    if ((rc = compile_forward(e, m, 1, err)))
        return rc;
    return SG_OK;
}

int sg_eval_attach(sg_eval *e, sg_exec *x, const struct sg_dist *dist, sg_error *err)
{
    if (!e->on)
        return SG_OK;
    /* micro-batches run side by side on the compute CPU workers, as the
     * training's micro-steps do (at most that many micro-batches'
     * activations at once); with CUDA workers one at a time. Several ranks
     * take the fewest of any rank: every rank runs the same graph, whose
     * all-gathers are collectives */
    int ncpu, ncuda;
    sg_exec_worker_counts(&ncpu, &ncuda);
    int64_t micro = ncuda > 0 ? 1 : ncpu - x->low.split.reserved;
    micro = micro < 1 ? 1 : micro > e->batches ? e->batches : micro;
    double neg = -(double)micro;
    int rc = sg_dist_host_allreduce(dist, &neg, 1, SG_COMM_MAX, err);
    micro = (int64_t)-neg;
    if (!rc && micro > 1) {
        sg_graph_free(&e->graph);
        sg_graph_init(&e->graph);
        rc = compile_forward(e, e->model, (int)micro, err);
    }
    size_t n = (size_t)(micro * e->spec.micro_batch * e->spec.seq_len);
    int32_t *in = rc ? NULL : realloc(e->inputs, n * sizeof *in);
    if (in)
        e->inputs = in;
    int32_t *tg = in ? realloc(e->targets, n * sizeof *tg) : NULL;
    if (tg)
        e->targets = tg;
    e->losses = tg ? calloc((size_t)micro, sizeof *e->losses) : NULL;
    if (!rc && !e->losses)
        rc = sg_error_set(err, SG_ENOMEM, "out of memory");
    if (!rc) {
        rc = sg_exec_eval_init(&e->x, x, &e->spec, &e->graph, err);
        e->lowered = 1;
    }
    return rc ? sg_error_prefix(err, "eval_data: "), rc : SG_OK;
}

void sg_eval_print_header(const sg_eval *e, const char *path)
{
    if (!e->on)
        return;
    int64_t seqs = e->batches * e->spec.micro_batch * e->world;
    printf("  eval: %s (%llu window%s), %lld micro-batch%s (%lld sequence%s) ", path,
           (unsigned long long)e->data.nwindows, e->data.nwindows == 1 ? "" : "s",
           (long long)e->batches, e->batches == 1 ? "" : "es", (long long)seqs,
           seqs == 1 ? "" : "s");
    if (e->interval > 0)
        printf("every %lld step%s and after the last; ", (long long)e->interval,
               e->interval == 1 ? "" : "s");
    else
        printf("after the last step; ");
    printf("forward graph %d tasks, %d micro-batch%s at a time\n", e->graph.nnodes, e->x.micro,
           e->x.micro == 1 ? "" : "es");
}

int sg_eval_due(const sg_eval *e, int64_t step, int last)
{
    if (!e->on || step == e->last_step)
        return 0;
    return last || (e->interval > 0 && step % e->interval == 0);
}

int sg_eval_run(sg_eval *e, sg_exec *x, const struct sg_dist *dist, int64_t step,
                sg_metrics *metrics, sg_eval_result *out, sg_error *err)
{
    double t0 = sg_monotonic_s();
    size_t bt = (size_t)(e->spec.micro_batch * e->spec.seq_len); /* B*T */
    sg_data_pos first = {0, 0, e->data.nwindows};
    int rc = sg_data_seek(&e->data, first, err);
    double v[2] = {0, 0}; /* sum of loss x targets, targets */
    for (int64_t b = 0; b < e->batches && !rc; b += e->x.micro) {
        int n = (int)(e->batches - b < e->x.micro ? e->batches - b : e->x.micro);
        for (int i = 0; i < n && !rc; i++)
            rc = sg_data_next(&e->data, e->inputs + (size_t)i * bt, e->targets + (size_t)i * bt,
                              err);
        if (rc || (rc = sg_exec_eval_run(&e->x, x, n, e->inputs, e->targets, e->losses, err)))
            break;
        sg_dist_watch_progress(dist); /* the partition watchdog: this rank is alive */
        for (int i = 0; i < n; i++) {
            int64_t c = count_targets(e->targets + (size_t)i * bt, bt);
            v[0] += (double)e->losses[i] * (double)c;
            v[1] += (double)c;
        }
    }
    if (!rc)
        rc = sg_dist_host_allreduce(dist, v, 2, SG_COMM_SUM, err);
    if (rc)
        return sg_error_prefix(err, "evaluation after step %lld: ", (long long)step), rc;
    e->last_step = step;
    sg_eval_result res = {step, v[0] / v[1], exp(v[0] / v[1]), (int64_t)v[1],
                          sg_monotonic_s() - t0};
    if (out)
        *out = res;
    if (e->rank != 0)
        return SG_OK;
    printf("Eval at step %lld | eval_loss: %.4f | eval_ppl: %.2f | tokens: %lld | Time: %.2f "
           "ms\n",
           (long long)step, res.loss, res.ppl, (long long)res.tokens, res.seconds * 1e3);
    fflush(stdout);
    if (metrics && sg_metrics_write_eval(metrics, step, res.loss, res.ppl, res.tokens, res.seconds))
        return sg_error_set(err, SG_EIO,
                            "metrics %s: write failed at the evaluation after "
                            "step %lld",
                            metrics->path, (long long)step);
    return SG_OK;
}

void sg_eval_close(sg_eval *e, int lowering)
{
    if (e->lowered && lowering)
        sg_exec_eval_free(&e->x);
    else if (e->lowered) /* the handles stay with StarPU: only our memory */
        sg_exec_eval_forget(&e->x);
    if (e->data_open)
        sg_data_close(&e->data);
    sg_graph_free(&e->graph);
    free(e->inputs);
    free(e->targets);
    free(e->losses);
    memset(e, 0, sizeof *e);
}
