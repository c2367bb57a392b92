/* exec_eval.c - the forward-only graph on the training state (exec_eval.h). */
#include "runtime/exec/exec_eval.h"

#include <starpu.h>
#include <stdlib.h>
#include <string.h>

#define EH(e, b) ((starpu_data_handle_t)(e)->low.handles[b])

/* Loss buffers by micro-step, then tile (the graph lists buffers in order of
 * first use). */
static void sort_losses(sg_exec_eval *e, const sg_graph *g)
{
    for (int i = 1; i < e->nloss; i++)
        for (int j = i; j > 0; j--) {
            const sg_buffer *a = &g->buffers[e->loss[j - 1]], *b = &g->buffers[e->loss[j]];
            if (a->micro_step < b->micro_step ||
                (a->micro_step == b->micro_step && a->tile <= b->tile))
                break;
            int tmp = e->loss[j];
            e->loss[j] = e->loss[j - 1];
            e->loss[j - 1] = tmp;
        }
}

static int find_buffers(sg_exec_eval *e, const sg_graph *g, sg_error *err)
{
    for (int b = 0; b < g->nbuffers; b++)
        if (g->buffers[b].role == SG_BUF_TOKENS && g->buffers[b].micro_step + 1 > e->micro)
            e->micro = g->buffers[b].micro_step + 1;
    size_t nb = (size_t)(g->nbuffers > 0 ? g->nbuffers : 1);
    e->loss = malloc(nb * sizeof *e->loss);
    e->tokens = malloc((size_t)(e->micro > 0 ? e->micro : 1) * sizeof *e->tokens);
    if (!e->loss || !e->tokens)
        return sg_error_set(err, SG_ENOMEM, "out of memory");
    for (int m = 0; m < e->micro; m++)
        e->tokens[m] = -1;
    for (int b = 0; b < g->nbuffers; b++) {
        const sg_buffer *buf = &g->buffers[b];
        if (buf->role == SG_BUF_LOSS)
            e->loss[e->nloss++] = b;
        else if (buf->role == SG_BUF_TOKENS && (size_t)buf->elems == e->token_elems)
            e->tokens[buf->micro_step] = b;
    }
    sort_losses(e, g);
    for (int m = 0; m < e->micro; m++)
        if (e->tokens[m] < 0)
            return sg_error_set(err, SG_EINVAL, "the forward graph has no tokens for micro-step %d",
                                m);
    if (e->micro == 0 || e->nloss == 0)
        return sg_error_set(err, SG_EINVAL, "the forward graph has no token or loss buffer");
    return SG_OK;
}

int sg_exec_eval_init(sg_exec_eval *e, sg_exec *x, const sg_step_spec *spec, const sg_graph *g,
                      sg_error *err)
{
    memset(e, 0, sizeof *e);
    e->exec = x;
    e->shared = x->shared;
    e->shared.spec = spec;
    e->shared.graph = g;
    e->shared.failed = 0;
    e->shared.fail_msg[0] = '\0';
    e->token_elems = (size_t)(2 * spec->micro_batch * spec->seq_len);
    int rc = find_buffers(e, g, err);
    if (rc)
        return rc;
    /* one flight: a run is waited for before the next is submitted */
    sg_lower_target target = x->low.target;
    target.flights = 1;
    rc = sg_lower_init_sharing(&e->low, g, &e->shared, &target, &x->low, err);
    e->started = 1; /* freed by sg_exec_eval_free, also after a failure here */
    return rc;
}

/* Micro-step m's tokens: micro-batch m's, or none to train past n. */
static int write_tokens(sg_exec_eval *e, int m, int n, const int32_t *inputs,
                        const int32_t *targets, sg_error *err)
{
    size_t bt = e->token_elems / 2; /* B*T */
    starpu_data_handle_t h = EH(e, e->tokens[m]);
    if (starpu_data_acquire(h, STARPU_W))
        return sg_error_set(err, SG_EINVAL, "evaluation: cannot write the tokens");
    int32_t *p = (int32_t *)starpu_data_get_local_ptr(h);
    if (m < n) {
        memcpy(p, inputs + (size_t)m * bt, bt * sizeof *p);       // (B, T) inputs
        memcpy(p + bt, targets + (size_t)m * bt, bt * sizeof *p); // (B, T) targets
    } else {
        memset(p, 0, bt * sizeof *p);
        for (size_t i = 0; i < bt; i++)
            p[bt + i] = -1;
    }
    starpu_data_release(h);
    return SG_OK;
}

int sg_exec_eval_run(sg_exec_eval *e, sg_exec *x, int n, const int32_t *inputs,
                     const int32_t *targets, float *losses, sg_error *err)
{
    if (n < 1 || n > e->micro)
        return sg_error_set(err, SG_EINVAL, "evaluation: %d micro-batches for %d micro-steps", n,
                            e->micro);
    /* workers paused after a save or before the first step: they run it */
    if (x->paused) {
        starpu_resume();
        x->paused = 0;
    }
    int rc;
    for (int m = 0; m < e->micro; m++)
        if ((rc = write_tokens(e, m, n, inputs, targets, err)))
            return rc;
    sg_lower_flight *fl = &e->low.flight[0];
    fl->end_us = 0;
    if ((rc = sg_lower_submit_step(&e->low, 0, err))) {
        sg_lower_flight_wait(fl); /* what was submitted */
        return rc;
    }
    /* as a step is waited for: a run whose data StarPU cannot fit in memory
     * ends with an error instead of waiting for ever */
    sg_stall_watch_start(&x->stall, err);
    if ((rc = sg_lower_flight_wait_polling(fl, SG_STALL_POLL_S, sg_stall_check, &x->stall))) {
        x->stalled = 1;
        return rc;
    }
    if (e->shared.failed)
        return sg_error_set(err, e->shared.failed, "evaluation: %s", e->shared.fail_msg);
    /* batch tiles: each tile's loss buffer holds its share of the
     * micro-batch's mean, added in float in tile order as the training's
     * losses are (sg_exec_losses) */
    memset(losses, 0, (size_t)n * sizeof *losses);
    const sg_graph *g = e->low.graph;
    for (int i = 0; i < e->nloss; i++) {
        int m = g->buffers[e->loss[i]].micro_step;
        if (m >= n)
            continue;
        starpu_data_handle_t lh = EH(e, e->loss[i]);
        if (starpu_data_acquire(lh, STARPU_R))
            return sg_error_set(err, SG_EINVAL, "evaluation: cannot read the loss back");
        losses[m] += *(const float *)starpu_data_get_local_ptr(lh);
        starpu_data_release(lh);
    }
    return SG_OK;
}

void sg_exec_eval_forget(sg_exec_eval *e)
{
    free(e->loss);
    free(e->tokens);
    memset(e, 0, sizeof *e);
}

void sg_exec_eval_free(sg_exec_eval *e)
{
    /* a stalled run's workers never finish: what they hold ends with the
     * process (as sg_exec_shutdown leaves it) */
    if (e->started && !(e->exec && e->exec->stalled))
        sg_lower_free(&e->low);
    sg_exec_eval_forget(e);
}
