/* unit_codelets.c - CPU entry points of the forward, recompute and backward
 * nodes: one graph unit (embedding, decoder layer, head + loss) for one
 * micro-batch, through codelets/cpu/block.h. */
#include <string.h>

#include "codelets/starpu/args.h"
#include "codelets/starpu/codelets.h"

typedef struct unit_call {
    const sg_task_ctx *c;
    void **buffers;
    const sg_model *m;
    int u, head;
    size_t B, T, N;
    sg_unit_io io;
    float *param_copy, *embed_copy;
    sg_f32_view views[6];
    int store[6];
    int nviews;
} unit_call;

/* An fp32 view of the slot holding `role` for `unit`; NULL when absent.
 * load: read the contents; zero: start from zeros (a gradient written
 * fresh); store: write back when the call ends. */
static float *view(unit_call *k, sg_buf_role role, int unit, int load, int store)
{
    int s = sg_arg_find(k->c, role, unit);
    if (s < 0 || k->nviews == 6)
        return NULL;
    const sg_buffer *b = sg_arg_buffer(k->c, s);
    sg_f32_view *v = &k->views[k->nviews];
    if (sg_f32_view_open(v, sg_arg_ptr(k->buffers, s), b->dtype, (size_t)b->elems, load))
        return NULL;
    k->store[k->nviews++] = store;
    return v->p;
}

/* A weight gradient: accumulated into (RW) or written fresh (W). */
static float *grad_view(unit_call *k, int unit)
{
    int s = sg_arg_find(k->c, SG_BUF_GRAD, unit);
    if (s < 0)
        return NULL;
    int fresh = sg_arg_write_only(k->c, s);
    float *p = view(k, SG_BUF_GRAD, unit, !fresh, 1);
    if (p && fresh)
        memset(p, 0, (size_t)sg_arg_buffer(k->c, s)->elems * sizeof(float));
    return p;
}

static int call_begin(unit_call *k, const sg_task_ctx *c, void **buffers)
{
    memset(k, 0, sizeof *k);
    const sg_exec_shared *sh = c->shared;
    k->c = c;
    k->buffers = buffers;
    k->m = sh->model;
    k->u = sh->graph->nodes[c->node].layer;
    k->head = sg_model_num_units(k->m) - 1;
    k->B = (size_t)sh->spec->micro_batch;
    k->T = (size_t)sh->spec->seq_len;
    k->N = k->B * k->T;
    k->io.rope = &sh->rope;
    k->io.params = sg_arg_unit_params(c, buffers, k->u, &k->param_copy);
    if (!k->io.params)
        return SG_ENOMEM;
    if (k->u == k->head && k->m->tie_word_embeddings &&
        !(k->io.embed = sg_arg_unit_params(c, buffers, 0, &k->embed_copy)))
        return SG_ENOMEM;
    int ts = sg_arg_find(c, SG_BUF_TOKENS, -2);
    if (ts >= 0) {
        const int32_t *tok = sg_arg_ptr(buffers, ts);
        k->io.tokens = tok;
        k->io.targets = tok + k->N;
    }
    k->io.scratch = sg_scratch(sg_unit_scratch_floats(k->m, k->u, k->B, k->T));
    return k->io.scratch ? SG_OK : SG_ENOMEM;
}

static void call_end(unit_call *k, int rc)
{
    for (int i = 0; i < k->nviews; i++)
        sg_f32_view_close(&k->views[i], rc == SG_OK && k->store[i]);
    free(k->param_copy);
    free(k->embed_copy);
}

static void forward(void *buffers[], void *arg, int recompute)
{
    const sg_task_ctx *c = arg;
    unit_call k;
    int rc = call_begin(&k, c, buffers);
    if (rc == SG_OK && k.u > 0 && !(k.io.x = view(&k, SG_BUF_ACT, k.u - 1, 1, 0)))
        rc = SG_ENOMEM;
    if (rc == SG_OK && !recompute) {
        if (k.u == k.head)
            k.io.loss = view(&k, SG_BUF_LOSS, k.u, 0, 1);
        else
            k.io.y = view(&k, SG_BUF_ACT, k.u, 0, 1);
        if (!k.io.loss && !k.io.y)
            rc = SG_ENOMEM;
    }
    if (rc == SG_OK && sg_arg_find(c, SG_BUF_SAVED, k.u) >= 0 &&
        !(k.io.saved = view(&k, SG_BUF_SAVED, k.u, 0, 1)))
        rc = SG_ENOMEM;
    if (rc == SG_OK)
        rc = sg_unit_forward(k.m, k.u, k.B, k.T, &k.io);
    call_end(&k, rc);
    if (rc)
        sg_task_fail(c, rc, rc == SG_ENOMEM ? "a buffer is missing or memory ran out"
                                           : "invalid token id or size");
}

void sg_forward_cpu(void *buffers[], void *arg)
{
    forward(buffers, arg, 0);
}

void sg_recompute_cpu(void *buffers[], void *arg)
{
    forward(buffers, arg, 1);
}

/* d(loss)/d(micro-step loss): DeepSpeed divides by the accumulation steps
 * and multiplies by the fp16 loss scale. */
static float head_dloss(unit_call *k)
{
    double d = 1.0 / (double)k->c->shared->spec->grad_accum;
    int s = sg_arg_find(k->c, SG_BUF_LOSS_SCALE, -2);
    if (s >= 0)
        d *= *(const float *)sg_arg_ptr(k->buffers, s);
    return (float)d;
}

void sg_backward_cpu(void *buffers[], void *arg)
{
    const sg_task_ctx *c = arg;
    unit_call k;
    float *dy = NULL, *dx = NULL, *dparams = NULL, *dembed = NULL;
    int rc = call_begin(&k, c, buffers);
    if (rc == SG_OK && k.u > 0 && !(k.io.x = view(&k, SG_BUF_ACT, k.u - 1, 1, 0)))
        rc = SG_ENOMEM;
    if (rc == SG_OK && sg_arg_find(c, SG_BUF_SAVED, k.u) >= 0 &&
        !(k.io.saved = view(&k, SG_BUF_SAVED, k.u, 1, 0)))
        rc = SG_ENOMEM;
    if (rc == SG_OK && k.u < k.head && !(dy = view(&k, SG_BUF_DACT, k.u, 1, 0)))
        rc = SG_ENOMEM;
    if (rc == SG_OK && k.u > 0 && !(dx = view(&k, SG_BUF_DACT, k.u - 1, 0, 1)))
        rc = SG_ENOMEM;
    if (rc == SG_OK && !(dparams = grad_view(&k, k.u)))
        rc = SG_ENOMEM;
    if (rc == SG_OK && k.u == k.head && k.m->tie_word_embeddings && !(dembed = grad_view(&k, 0)))
        rc = SG_ENOMEM;
    if (rc == SG_OK)
        rc = sg_unit_backward(k.m, k.u, k.B, k.T, &k.io, dy,
                              k.u == k.head ? head_dloss(&k) : 0.0f, dx, dparams, dembed);
    call_end(&k, rc);
    if (rc)
        sg_task_fail(c, rc, rc == SG_ENOMEM ? "a buffer is missing or memory ran out"
                                           : "invalid token id or size");
}
