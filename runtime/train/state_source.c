/* state_source.c - a run's starting state a tensor at a time (state_source.h). */
#include "runtime/train/state_source.h"

#include <string.h>

static int fill(void *ctx, int set, int i, float *out)
{
    sg_state_source *s = ctx;
    const sg_tensor_info *info = &s->shape->info[i];
    if (set == SG_SET_EXP_AVG_SQ && !s->resumed && s->initial_squares != 0.0f) {
        for (int64_t k = 0; k < info->numel; k++)
            out[k] = s->initial_squares;
        return SG_OK;
    }
    if (s->have_reader)
        return sg_checkpoint_reader_fill(&s->reader, set, i, out);
    if (set != SG_SET_WEIGHTS)
        return SG_TENSOR_ABSENT; /* fresh moments: the buffers' zeros */
    /* tensor i alone, as sg_weights_init draws it in the whole model */
    sg_weights one = {.ntensors = 1, .info = (sg_tensor_info *)info, .data = &out};
    sg_weights_init(&one, s->seed, s->std);
    return SG_OK;
}

int sg_state_source_open(sg_state_source *s, const char *load, const sg_model *m, uint64_t seed,
                         sg_weights *shape, sg_train_state *st, int *resumed,
                         sg_config_warnings *warn, sg_error *err)
{
    memset(s, 0, sizeof *s);
    s->src.fill = fill;
    s->src.ctx = s;
    s->seed = seed;
    s->std = SG_INIT_STD;
    s->shape = shape;
    *resumed = 0;
    int rc;
    if (load && load[0]) {
        rc = sg_checkpoint_open(load, m, shape, st, resumed, warn, &s->reader, err);
        s->have_reader = rc == SG_OK;
    } else {
        rc = sg_train_state_describe(st, m, err);
        if (!rc)
            rc = sg_weights_describe(shape, m, err);
    }
    s->resumed = *resumed;
    return rc;
}

void sg_state_source_set_initial_squares(sg_state_source *s, float v)
{
    s->initial_squares = v;
}

const sg_error *sg_state_source_error(const sg_state_source *s)
{
    return &s->reader.err;
}

void sg_state_source_close(sg_state_source *s)
{
    if (s->have_reader)
        sg_checkpoint_reader_close(&s->reader);
    s->have_reader = 0;
}
