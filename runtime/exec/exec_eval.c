/* exec_eval.c - the forward-only graph on the training state (exec_eval.h). */
#include "runtime/exec/exec_eval.h"

#include <starpu.h>
#include <stdlib.h>
#include <string.h>

#define EH(e, b) ((starpu_data_handle_t)(e)->low.handles[b])

int sg_exec_eval_init(sg_exec_eval *e, sg_exec *x, const sg_step_spec *spec, const sg_graph *g,
                      sg_error *err)
{
    memset(e, 0, sizeof *e);
    e->tokens = -1;
    e->exec = x;
    e->shared = x->shared;
    e->shared.spec = spec;
    e->shared.graph = g;
    e->shared.failed = 0;
    e->shared.fail_msg[0] = '\0';
    e->loss = malloc((size_t)(g->nbuffers > 0 ? g->nbuffers : 1) * sizeof *e->loss);
    if (!e->loss)
        return sg_error_set(err, SG_ENOMEM, "out of memory");
    e->token_elems = (size_t)(2 * spec->micro_batch * spec->seq_len);
    for (int b = 0; b < g->nbuffers; b++) {
        const sg_buffer *buf = &g->buffers[b];
        if (buf->role == SG_BUF_LOSS)
            e->loss[e->nloss++] = b;
        else if (buf->role == SG_BUF_TOKENS && (size_t)buf->elems == e->token_elems)
            e->tokens = b;
    }
    /* in tile order (the forward graph lists buffers in order of first use) */
    for (int i = 1; i < e->nloss; i++)
        for (int j = i; j > 0 && g->buffers[e->loss[j]].tile < g->buffers[e->loss[j - 1]].tile;
             j--) {
            int tmp = e->loss[j];
            e->loss[j] = e->loss[j - 1];
            e->loss[j - 1] = tmp;
        }
    if (e->tokens < 0 || e->nloss == 0)
        return sg_error_set(err, SG_EINVAL, "the forward graph has no token or loss buffer");
    /* one flight: a batch is waited for before the next is submitted */
    sg_lower_target target = x->low.target;
    target.flights = 1;
    int rc = sg_lower_init_sharing(&e->low, g, &e->shared, &target, &x->low, err);
    e->started = 1; /* freed by sg_exec_eval_free, also after a failure here */
    return rc;
}

int sg_exec_eval_batch(sg_exec_eval *e, sg_exec *x, const int32_t *inputs,
                       const int32_t *targets, float *loss, sg_error *err)
{
    size_t n = e->token_elems / 2; /* B*T */
    /* workers paused after a save or before the first step: they run it */
    if (x->paused) {
        starpu_resume();
        x->paused = 0;
    }
    starpu_data_handle_t h = EH(e, e->tokens);
    if (starpu_data_acquire(h, STARPU_W))
        return sg_error_set(err, SG_EINVAL, "evaluation: cannot write the tokens");
    int32_t *p = (int32_t *)starpu_data_get_local_ptr(h);
    memcpy(p, inputs, n * sizeof *p);          // (B, T) inputs
    memcpy(p + n, targets, n * sizeof *p);     // (B, T) targets
    starpu_data_release(h);
    sg_lower_flight *fl = &e->low.flight[0];
    fl->end_us = 0;
    int rc = sg_lower_submit_step(&e->low, 0, err);
    if (rc) {
        sg_lower_flight_wait(fl); /* what was submitted */
        return rc;
    }
    /* as a step is waited for: a batch whose data StarPU cannot fit in
     * memory ends the run with an error instead of waiting for ever */
    sg_stall_watch_start(&x->stall, err);
    if ((rc = sg_lower_flight_wait_polling(fl, SG_STALL_POLL_S, sg_stall_check, &x->stall))) {
        x->stalled = 1;
        return rc;
    }
    if (e->shared.failed)
        return sg_error_set(err, e->shared.failed, "evaluation: %s", e->shared.fail_msg);
    /* batch tiles: each tile's loss buffer holds its share of the batch's
     * mean, added in float in tile order as the training's losses are
     * (sg_exec_losses) */
    float sum = 0.0f;
    for (int i = 0; i < e->nloss; i++) {
        starpu_data_handle_t lh = EH(e, e->loss[i]);
        if (starpu_data_acquire(lh, STARPU_R))
            return sg_error_set(err, SG_EINVAL, "evaluation: cannot read the loss back");
        sum += *(const float *)starpu_data_get_local_ptr(lh);
        starpu_data_release(lh);
    }
    *loss = sum;
    return SG_OK;
}

void sg_exec_eval_free(sg_exec_eval *e)
{
    /* a stalled run's workers never finish: what they hold ends with the
     * process (as sg_exec_shutdown leaves it) */
    if (e->started && !(e->exec && e->exec->stalled))
        sg_lower_free(&e->low);
    free(e->loss);
    memset(e, 0, sizeof *e);
}
