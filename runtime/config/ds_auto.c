/* ds_auto.c - "auto" values of a DeepSpeed config, filled as the Hugging
 * Face Trainer fills them (see ds_auto.h).
 *
 * The rules are transformers 5.x's HfTrainerDeepSpeedConfig:
 * trainer_config_process (batch sizes, clipping, optimizer and warm-up lr,
 * precision) and trainer_config_finalize (the hidden-size buckets, and the
 * schedule's totals once the number of updates is known). The Trainer takes
 * each value from a TrainingArguments field; stepgraph takes it from the run
 * option of the same name. When that option is not given, the value the
 * DeepSpeed config itself gives the key the Trainer matches it with stands
 * for it (the Trainer refuses the two differing, so a config that works with
 * the Trainer has them equal), else the Trainer's default.
 */
#define _POSIX_C_SOURCE 200809L

#include "runtime/config/ds_auto.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/json_util.h"
#include "models/model.h"

typedef struct filler {
    sg_ds_config *ds;
    const sg_run_options *run;
    const sg_json_ctx *c;
    sg_ds_autos *out;
} filler;

static int pending(const filler *f, int key)
{
    return (f->ds->auto_pending & SG_AUTO_BIT(key)) != 0;
}

static int given(const filler *f, int key)
{
    return (f->ds->auto_given & SG_AUTO_BIT(key)) != 0;
}

/* Records a filled key: its value as JSON writes it, and where it came from. */
static void record_text(filler *f, int key, const char *source, const char *value)
{
    sg_ds_auto_entry *e = &f->out->fill[f->out->n++];
    snprintf(e->key, sizeof e->key, "%s", sg_ds_auto_key_path(key));
    snprintf(e->value, sizeof e->value, "%s", value);
    snprintf(e->source, sizeof e->source, "%s", source);
    f->ds->auto_pending &= ~SG_AUTO_BIT(key);
}

/* The same for a number: fmt "%.0f" for integers, "%.9g" for reals. */
static void record(filler *f, int key, const char *source, const char *fmt, double v)
{
    char value[48];
    snprintf(value, sizeof value, fmt, v);
    record_text(f, key, source, value);
}

/* One TrainingArguments value and where it came from. */
typedef struct targ {
    double v;
    char from[100];
} targ;

/* The value of TrainingArguments field opt (opt_v: the run option, NAN when
 * not given): the run option, else the first of keys (with their values in
 * the config, vals) that the config gives, else the Trainer's default dflt.
 * A run option that differs from a value the config gives is an error, as in
 * the Trainer's fill_match; one that fills and matches nothing is warned
 * about. */
static int pick(filler *f, const char *opt, double opt_v, const int *keys, const double *vals,
                int nkeys, double dflt, targ *t)
{
    int used = 0;
    for (int i = 0; i < nkeys; i++) {
        used |= pending(f, keys[i]) || given(f, keys[i]);
        if (!isnan(opt_v) && given(f, keys[i]) && vals[i] != opt_v)
            return sg_json_error(f->c, SG_EINVAL,
                                 "%s: %.9g differs from run option %s %.9g (the Hugging Face "
                                 "Trainer refuses such a mismatch; write \"auto\" there to take "
                                 "the option, or drop the option)",
                                 sg_ds_auto_key_path(keys[i]), vals[i], opt, opt_v);
    }
    if (!isnan(opt_v)) {
        t->v = opt_v;
        snprintf(t->from, sizeof t->from, "run option %s", opt);
        if (!used)
            sg_json_warn(f->c,
                         "run option %s has no effect: the DeepSpeed config has no \"auto\" "
                         "it fills (%s%s)",
                         opt, f->c->prefix, sg_ds_auto_key_path(keys[0]));
        return SG_OK;
    }
    for (int i = 0; i < nkeys; i++)
        if (given(f, keys[i])) {
            t->v = vals[i];
            snprintf(t->from, sizeof t->from, "%s as %s gives it", opt,
                     sg_ds_auto_key_path(keys[i]));
            return SG_OK;
        }
    t->v = dflt;
    snprintf(t->from, sizeof t->from, "%s, the Trainer's default", opt);
    return SG_OK;
}

static double opt_int(int64_t v)
{
    return v < 0 ? NAN : (double)v;
}

/* Fills key with the TrainingArguments value t (printed with fmt). */
static void fill_from(filler *f, int key, const targ *t, const char *fmt, double *field)
{
    if (!pending(f, key))
        return;
    if (field)
        *field = t->v;
    record(f, key, t->from, fmt, t->v);
}

/* trainer_config_process: batch sizes. world_size is dp_size. */
static int fill_batch(filler *f)
{
    sg_ds_config *ds = f->ds;
    const sg_trainer_args *a = &f->run->hf;
    targ micro, accum;
    int k = SG_AUTO_MICRO_BATCH;
    double v = (double)ds->train_micro_batch_size_per_gpu;
    int rc = pick(f, "per_device_train_batch_size", opt_int(a->per_device_train_batch_size), &k, &v,
                  1, 8, &micro);
    k = SG_AUTO_ACCUM;
    v = (double)ds->gradient_accumulation_steps;
    if (!rc)
        rc = pick(f, "gradient_accumulation_steps", opt_int(a->gradient_accumulation_steps), &k, &v,
                  1, 1, &accum);
    if (rc)
        return rc;
    if (pending(f, SG_AUTO_MICRO_BATCH)) {
        ds->train_micro_batch_size_per_gpu = (int64_t)micro.v;
        record(f, SG_AUTO_MICRO_BATCH, micro.from, "%.0f", micro.v);
    }
    if (pending(f, SG_AUTO_ACCUM)) {
        ds->gradient_accumulation_steps = (int64_t)accum.v;
        record(f, SG_AUTO_ACCUM, accum.from, "%.0f", accum.v);
    }
    if (pending(f, SG_AUTO_TRAIN_BATCH)) {
        double t = (double)f->run->dp_size * micro.v * accum.v;
        if (t > 9e15)
            return sg_json_error(f->c, SG_EINVAL, "train_batch_size: \"auto\" overflows");
        ds->train_batch_size = (int64_t)t;
        char src[224];
        snprintf(src, sizeof src,
                 "dp_size %lld x per_device_train_batch_size %.0f x "
                 "gradient_accumulation_steps %.0f",
                 (long long)f->run->dp_size, micro.v, accum.v);
        record(f, SG_AUTO_TRAIN_BATCH, src, "%.0f", t);
    }
    return SG_OK;
}

/* A precision flag (fp16, bf16): the run option opt (-1 = not given) fills
 * key, an int field of the config. */
static int fill_bool(filler *f, int key, const char *opt, int opt_v, int *field)
{
    targ t;
    double v = *field;
    int rc = pick(f, opt, opt_v < 0 ? NAN : opt_v, &key, &v, 1, 0, &t);
    if (rc || !pending(f, key))
        return rc;
    *field = t.v != 0;
    record_text(f, key, t.from, t.v != 0 ? "true" : "false");
    return SG_OK;
}

/* trainer_config_process: clipping, the optimizer's parameters, the
 * warm-up's lr range, precision. */
static int fill_optimizer(filler *f)
{
    sg_ds_config *ds = f->ds;
    const sg_trainer_args *a = &f->run->hf;
    targ t, b1, b2;
    int k[2];
    double v[2];
    int rc;

    k[0] = SG_AUTO_CLIPPING, v[0] = ds->gradient_clipping;
    if ((rc = pick(f, "max_grad_norm", a->max_grad_norm, k, v, 1, 1.0, &t)))
        return rc;
    fill_from(f, SG_AUTO_CLIPPING, &t, "%.9g", &ds->gradient_clipping);

    k[0] = SG_AUTO_LR, v[0] = ds->optimizer.lr;
    k[1] = SG_AUTO_WARMUP_MAX_LR, v[1] = ds->scheduler.warmup_max_lr;
    if ((rc = pick(f, "learning_rate", a->learning_rate, k, v, 2, 5e-5, &t)))
        return rc;
    fill_from(f, SG_AUTO_LR, &t, "%.9g", &ds->optimizer.lr);
    fill_from(f, SG_AUTO_WARMUP_MAX_LR, &t, "%.9g", &ds->scheduler.warmup_max_lr);

    k[0] = SG_AUTO_BETAS, v[0] = ds->optimizer.beta1;
    if ((rc = pick(f, "adam_beta1", a->adam_beta1, k, v, 1, 0.9, &b1)))
        return rc;
    v[0] = ds->optimizer.beta2;
    if ((rc = pick(f, "adam_beta2", a->adam_beta2, k, v, 1, 0.999, &b2)))
        return rc;
    if (pending(f, SG_AUTO_BETAS)) {
        ds->optimizer.beta1 = b1.v;
        ds->optimizer.beta2 = b2.v;
        char src[224], val[48];
        snprintf(src, sizeof src, "%s; %s", b1.from, b2.from);
        snprintf(val, sizeof val, "[%.9g,%.9g]", b1.v, b2.v);
        record_text(f, SG_AUTO_BETAS, src, val);
    }

    k[0] = SG_AUTO_EPS, v[0] = ds->optimizer.eps;
    if ((rc = pick(f, "adam_epsilon", a->adam_epsilon, k, v, 1, 1e-8, &t)))
        return rc;
    fill_from(f, SG_AUTO_EPS, &t, "%.9g", &ds->optimizer.eps);

    k[0] = SG_AUTO_WEIGHT_DECAY, v[0] = ds->optimizer.weight_decay;
    if ((rc = pick(f, "weight_decay", a->weight_decay, k, v, 1, 0.0, &t)))
        return rc;
    fill_from(f, SG_AUTO_WEIGHT_DECAY, &t, "%.9g", &ds->optimizer.weight_decay);

    if (pending(f, SG_AUTO_WARMUP_MIN_LR)) {
        ds->scheduler.warmup_min_lr = 0.0;
        record(f, SG_AUTO_WARMUP_MIN_LR, "the Trainer's constant 0, no TrainingArguments field",
               "%.0f", 0.0);
    }

    if ((rc = fill_bool(f, SG_AUTO_FP16, "fp16", a->fp16, &ds->fp16.enabled)))
        return rc;
    return fill_bool(f, SG_AUTO_BF16, "bf16", a->bf16, &ds->bf16.enabled);
    return SG_OK;
}

/* The model's hidden size, as the Trainer reads model.config.hidden_size. */
static int model_hidden(filler *f, int64_t *hidden, char *name, size_t size)
{
    char path[SG_PATH_MAX];
    sg_model *m = calloc(1, sizeof *m);
    if (!m)
        return sg_error_set(f->c->err, SG_ENOMEM, "out of memory");
    int rc = sg_model_resolve(f->run->model, NULL, path, sizeof path, f->c->err);
    if (!rc)
        rc = sg_model_load(path, m, f->c->err);
    if (!rc) {
        *hidden = m->hidden_size;
        snprintf(name, size, "%s", m->name);
    }
    free(m);
    return rc;
}

/* trainer_config_finalize: the buckets that follow the model's hidden size
 * H: reduce_bucket_size H^2 at every stage; at stage 3 only,
 * stage3_prefetch_bucket_size int(0.9 H^2) and
 * stage3_param_persistence_threshold 10 H. */
static int fill_hidden(filler *f)
{
    sg_ds_config *ds = f->ds;
    /* below stage 3 the Trainer leaves these "auto"; DeepSpeed's pydantic
     * zero config drops an "auto" and keeps its default */
    int stage3_keys[2] = {SG_AUTO_PREFETCH_BUCKET, SG_AUTO_PERSISTENCE};
    int64_t stage3_defaults[2] = {ds->zero.stage3_prefetch_bucket_size,
                                  ds->zero.stage3_param_persistence_threshold};
    for (int i = 0; i < 2 && ds->zero.stage != 3; i++)
        if (pending(f, stage3_keys[i])) {
            char src[224];
            snprintf(src, sizeof src,
                     "left \"auto\" at stage %lld, where the Trainer does not "
                     "fill it: DeepSpeed drops it and takes its default",
                     (long long)ds->zero.stage);
            record(f, stage3_keys[i], src, "%.0f", (double)stage3_defaults[i]);
        }
    if (!pending(f, SG_AUTO_REDUCE_BUCKET) && !pending(f, SG_AUTO_PREFETCH_BUCKET) &&
        !pending(f, SG_AUTO_PERSISTENCE))
        return SG_OK;
    int64_t h = 0;
    char name[128], src[224];
    int rc = model_hidden(f, &h, name, sizeof name);
    if (rc)
        return sg_error_prefix(f->c->err, "filling the \"auto\" hidden-size buckets (set with "
                                          "run option model): ");
    if (h <= 0)
        return sg_json_error(f->c, SG_EINVAL,
                             "zero_optimization: the \"auto\" buckets follow "
                             "the model's hidden_size, which model %s does not give (run option "
                             "model); write integers instead",
                             name);
    double H = (double)h;
    if (pending(f, SG_AUTO_REDUCE_BUCKET)) {
        ds->zero.reduce_bucket_size = h * h;
        snprintf(src, sizeof src, "hidden_size %lld of model %s, squared", (long long)h, name);
        record(f, SG_AUTO_REDUCE_BUCKET, src, "%.0f", H * H);
    }
    if (pending(f, SG_AUTO_PREFETCH_BUCKET)) {
        /* Python's int(0.9 * hidden_size * hidden_size): left to right, in
         * doubles, truncated */
        double p = 0.9 * H * H;
        ds->zero.stage3_prefetch_bucket_size = (int64_t)p;
        snprintf(src, sizeof src, "int(0.9 x hidden_size %lld squared), model %s", (long long)h,
                 name);
        record(f, SG_AUTO_PREFETCH_BUCKET, src, "%.0f", trunc(p));
    }
    if (pending(f, SG_AUTO_PERSISTENCE)) {
        ds->zero.stage3_param_persistence_threshold = 10 * h;
        snprintf(src, sizeof src, "10 x hidden_size %lld of model %s", (long long)h, name);
        record(f, SG_AUTO_PERSISTENCE, src, "%.0f", 10 * H);
    }
    return SG_OK;
}

/* The Trainer's max(1, get_warmup_steps(total)): w updates when w >= 1,
 * else ceil(total x w); NAN for a ratio when total is not known. */
static double warmup_updates(double w, double total)
{
    double n = w >= 1 ? floor(w) : w == 0 ? 0 : isnan(total) ? NAN : ceil(total * w);
    return isnan(n) || n >= 1 ? n : 1;
}

/* trainer_config_finalize: the schedule's total (the Trainer's
 * num_training_steps: the run options steps, else bench_steps) and warm-up,
 * max(1, get_warmup_steps(total)): TrainingArguments.warmup_steps (here
 * lr_warmup_steps) when >= 1, else ceil(total x it). */
static int fill_schedule(filler *f)
{
    sg_ds_config *ds = f->ds;
    const sg_run_options *run = f->run;
    double total = run->steps > 0         ? (double)run->steps
                   : run->bench_steps > 0 ? (double)run->bench_steps
                                          : NAN;
    const char *total_from = run->steps > 0 ? "run option steps" : "run option bench_steps";
    if (isnan(total) && given(f, SG_AUTO_TOTAL_STEPS)) {
        total = (double)ds->scheduler.total_num_steps;
        total_from = "total_num_steps as the config gives it";
    }
    if (ds->scheduler.type == SG_SCHED_WARMUP_LR)
        /* WarmupLR does not decay: the parser already warned and dropped it */
        ds->auto_pending &= ~SG_AUTO_BIT(SG_AUTO_TOTAL_STEPS);
    if (pending(f, SG_AUTO_TOTAL_STEPS)) {
        if (isnan(total))
            return sg_json_error(f->c, SG_EINVAL,
                                 "%s: \"auto\" is the number of optimizer updates, which this run "
                                 "does not know before it reads its data: set run option steps "
                                 "(--steps N)",
                                 sg_ds_auto_key_path(SG_AUTO_TOTAL_STEPS));
        ds->scheduler.total_num_steps = (int64_t)total;
        record(f, SG_AUTO_TOTAL_STEPS, total_from, "%.0f", total);
    }
    /* the Trainer compares the updates the option gives with a value the
     * config gives, not the option itself */
    double opt = run->hf.lr_warmup_steps;
    if (!isnan(opt) && given(f, SG_AUTO_WARMUP_STEPS)) {
        double want = warmup_updates(opt, total);
        if (!isnan(want) && want != (double)ds->scheduler.warmup_num_steps)
            return sg_json_error(f->c, SG_EINVAL,
                                 "%s: %lld differs from the %.0f updates of run option "
                                 "lr_warmup_steps %g (the Hugging Face Trainer refuses such a "
                                 "mismatch; write \"auto\" there to take the option, or drop the "
                                 "option)",
                                 sg_ds_auto_key_path(SG_AUTO_WARMUP_STEPS),
                                 (long long)ds->scheduler.warmup_num_steps, want, opt);
        return SG_OK;
    }
    targ w;
    int k = SG_AUTO_WARMUP_STEPS;
    double v = (double)ds->scheduler.warmup_num_steps;
    int rc = pick(f, "lr_warmup_steps", opt, &k, &v, 1, 0.0, &w);
    if (rc || !pending(f, SG_AUTO_WARMUP_STEPS))
        return rc;
    double n = warmup_updates(w.v, total);
    char src[224];
    if (isnan(n))
        return sg_json_error(f->c, SG_EINVAL,
                             "%s: \"auto\" with run option lr_warmup_steps %g (a ratio of the "
                             "updates) needs the number of updates: set run option steps "
                             "(--steps N)",
                             sg_ds_auto_key_path(SG_AUTO_WARMUP_STEPS), w.v);
    if (w.v >= 1)
        snprintf(src, sizeof src, "%s", w.from);
    else if (w.v == 0)
        snprintf(src, sizeof src, "%s 0, at least 1", w.from);
    else
        snprintf(src, sizeof src, "ceil(%s %g x %.0f updates, %s), at least 1", w.from, w.v, total,
                 total_from);
    ds->scheduler.warmup_num_steps = (int64_t)n;
    record(f, SG_AUTO_WARMUP_STEPS, src, "%.0f", n);
    return SG_OK;
}

int sg_ds_auto_fill(sg_ds_config *ds, const sg_run_options *run, const sg_json_ctx *c,
                    sg_ds_autos *out)
{
    filler f = {ds, run, c, out};
    uint32_t was_pending = ds->auto_pending;
    out->n = 0;
    int rc = fill_batch(&f);
    if (!rc)
        rc = fill_optimizer(&f);
    if (!rc)
        rc = fill_hidden(&f);
    if (!rc)
        rc = fill_schedule(&f);
    if (rc)
        return rc;
    /* WarmupLR's warmup_max_lr defaults to the optimizer's lr, now filled */
    uint32_t max_lr = SG_AUTO_BIT(SG_AUTO_WARMUP_MAX_LR);
    if ((was_pending & SG_AUTO_BIT(SG_AUTO_LR)) && ds->scheduler.type == SG_SCHED_WARMUP_LR &&
        !((was_pending | ds->auto_given) & max_lr))
        ds->scheduler.warmup_max_lr = ds->optimizer.lr;
    return SG_OK;
}
