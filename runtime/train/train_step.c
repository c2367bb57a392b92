/* train_step.c - one training step of a run (train.h): its batches fed,
 * its parameters (learning rate, betas, loss scale, SuperOffload's mode)
 * set, its graph submitted; once it ends, its losses and counters read back,
 * logged and the speculation rule updated; and checkpoints written. */

#define _POSIX_C_SOURCE 200809L
#include "runtime/train/trainer.h"

#include <math.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "common/clock.h"
#include "runtime/exec/buffer_cache.h"
#include "runtime/train/rank_save.h"
#include "runtime/train/lr_schedule.h"
#include "runtime/train/timeline.h"

/* Adaptive speculation (speculation.h): the next step's mode. */
static void update_speculation(trainer *t, int would_fail)
{
    int wait = sg_speculation_update(&t->speculation, would_fail);
    if (t->adaptive)
        t->waiting = wait;
    t->waiting_after[t->finished % (SG_LOOKAHEAD_MAX + 1)] = (uint8_t)t->waiting;
}

/* The mode of the step about to be submitted (waiting_after). */
static int submit_waiting(const trainer *t)
{
    int64_t n = t->submitted - t->cfg->run.lookahead + 1;
    return t->waiting_after[(n > 0 ? n : 0) % (SG_LOOKAHEAD_MAX + 1)];
}

static int feed_batches(trainer *t, sg_error *err)
{
    for (int mb = 0; mb < t->spec.grad_accum; mb++) {
        int rc = sg_data_next(&t->data, t->inputs, t->targets, err);
        if (rc)
            return rc;
        if (sg_exec_set_tokens(&t->x, mb, t->inputs, t->targets))
            return sg_error_set(err, SG_EINVAL,
                                "step %lld: cannot write micro-batch %d's "
                                "tokens",
                                (long long)t->submitted + 1, mb);
    }
    return SG_OK;
}

/* The hyper-parameters of the step about to be submitted: they depend on
 * how many Adam steps the steps before it made, so in fp16 on whether the
 * last one was skipped for an overflow (known once its overflow check ran,
 * before its optimizer tail: the tail still overlaps this step). */
static int set_step_params(trainer *t, sg_step_params *p, sg_error *err)
{
    if (t->advance_pending) {
        int skipped;
        if (sg_exec_wait_overflow(&t->x, &skipped))
            return sg_error_set(err, SG_EINVAL,
                                "step %lld: cannot read the overflow flag back "
                                "from StarPU",
                                (long long)t->submitted);
        t->submit_adam_step += !skipped;
        t->advance_pending = 0;
    }
    const sg_ds_config *ds = &t->cfg->ds;
    p->adam = SG_ADAM_PARAMS_DEFAULT;
    p->adam.lr = (float)sg_lr_at(ds, t->submit_adam_step);
    double beta1, beta2; /* below 1 for every update: check_schedule */
    sg_betas_at(ds, t->submit_adam_step, &beta1, &beta2);
    p->adam.beta1 = (float)beta1;
    p->adam.beta2 = (float)beta2;
    p->adam.eps = (float)ds->optimizer.eps;
    p->adam.weight_decay = (float)ds->optimizer.weight_decay;
    p->adam.adamw_mode = ds->optimizer.adam_w_mode;
    p->adam.bias_correction = ds->optimizer.bias_correction;
    p->adam.algo = optim_algo_of(ds->optimizer.type);
    p->adam.lr_decay = (float)ds->optimizer.lr_decay;
    p->t = t->submit_adam_step + 1;
    p->clip = ds->gradient_clipping;
    return SG_OK;
}

/* Submits the next step without waiting for the ones in flight. */
int sg_trainer_submit_step(trainer *t, sg_error *err)
{
    int rc;
    sg_step_params params;
    if ((rc = set_step_params(t, &params, err)))
        return rc;
    sg_exec_wait_for_norm(&t->x, submit_waiting(t));
    sg_step_params *p = sg_exec_begin_step(&t->x);
    if (!p)
        return sg_error_set(err, SG_EINVAL, "step %lld: too many steps in flight",
                            (long long)t->submitted + 1);
    *p = params;
    if ((rc = feed_batches(t, err)) || (rc = sg_exec_submit_step(&t->x, err)))
        return rc;
    t->submitted++;
    t->advance_pending = 1;
    return SG_OK;
}

/* per rank: the sequences this rank's GPU processes, as DeepSpeedExamples'
 * script logs them; MFU where sg_trainer_set_peak found the GPUs' peak */
static void step_rates(const trainer *t, double seconds, sg_step_rates *out)
{
    const sg_step_spec *s = &t->spec;
    sg_step_rates_of(&t->model, s->micro_batch * s->grad_accum, s->seq_len,
                     s->activation_checkpointing, seconds, t->peak_tflops, out);
}

/* MoE: the active-parameter estimate (NAN for dense models). */
static double step_active_tflops(const trainer *t, double seconds)
{
    const sg_step_spec *s = &t->spec;
    return sg_model_active_tflops(&t->model, s->micro_batch * s->grad_accum, s->seq_len,
                                  s->activation_checkpointing, seconds);
}

/* Waits for the oldest step in flight, then reads, logs and checks it. */
int sg_trainer_finish_step(trainer *t, sg_error *err)
{
    const sg_run_options *r = &t->cfg->run;
    int64_t i = t->finished;
    int rc;
    if ((rc = sg_exec_finish_step(&t->x, err)))
        return rc;
    t->finished++;
    const sg_adam_params *adam = &sg_exec_last_params(&t->x)->adam;
    sg_update_hyper hyper = {adam->lr, adam->beta1, adam->beta2};
    double scale = t->scaler.scale;
    int waited = sg_exec_last_graph(&t->x) != t->x.graph;
    int skipped, rollbacks, would_fail;
    if (sg_exec_losses(&t->x, t->losses) ||
        sg_exec_step_outcome(&t->x, &skipped, &rollbacks, &would_fail) ||
        sg_exec_loss_scaler(&t->x, &t->scaler) < 0)
        return sg_error_set(err, SG_EINVAL,
                            "step %lld: cannot read the step's results back "
                            "from StarPU",
                            (long long)t->st.step + 1);
    double loss = 0;
    for (int mb = 0; mb < t->spec.grad_accum; mb++)
        loss += t->losses[mb];
    loss /= (double)t->spec.grad_accum;
    /* several ranks: each micro-step's loss is already the mean over the
     * ranks (the gradient-norm collective averages them, graph/compile.c);
     * the main thread calls no collective while steps are in flight */
    t->rollbacks += rollbacks;
    t->waited_steps += waited;
    if (!waited && i >= r->warmup_steps)
        sg_node_times_add(&t->node_times, &t->graph, sg_exec_last_records(&t->x),
                          sg_exec_worker_is_cpu);
    update_speculation(t, would_fail);
    t->st.step++;
    if (!skipped)
        t->st.adam_step++;
    double secs = t->x.step_seconds;
    sg_dist_watch_step(t->dist, secs); /* the partition watchdog's bound scales with it */
    double tokens = (double)(t->spec.micro_batch * t->spec.grad_accum * t->spec.seq_len *
                             t->world); /* every rank's */
    sg_step_rates rates;
    step_rates(t, secs, &rates);
    double tflops = rates.tflops;
    sg_step_stats_add(&t->stats, t->st.step, secs, tokens, &rates, i < r->warmup_steps);
    sg_phase_times ph;
    sg_timeline_phases(&t->x, &ph);
    if (t->metrics_open &&
        sg_metrics_write_step(&t->metrics, t->st.step, loss, &hyper, sg_exec_grad_norm(&t->x),
                              scale, secs, tokens / secs, &rates, skipped, &ph))
        return sg_error_set(err, SG_EIO, "metrics %s: write failed at step %lld",
                            t->cfg->run.metrics, (long long)t->st.step);
    if (i == 0 || (i + 1) % r->log_interval == 0 || i + 1 == t->total_steps) {
        char line[256];
        sg_format_step_line(line, sizeof line, t->st.step, loss, secs * 1e3, tflops, tokens / secs);
        /* MoE: TFLOPS is n/a; the active-parameter figure, labelled; then
         * the model FLOPs' rate (MFU's numerator), labelled */
        char active[128] = "";
        double atf = step_active_tflops(t, secs);
        int na = isfinite(atf) ? snprintf(active, sizeof active, " | Active TFLOPS: %.2f", atf) : 0;
        if (isfinite(rates.model_tflops))
            na += snprintf(active + na, sizeof active - (size_t)na, " | Model TFLOPS: %.2f",
                           rates.model_tflops);
        if (isfinite(rates.mfu) && na < (int)sizeof active)
            snprintf(active + na, sizeof active - (size_t)na, " | MFU: %.1f%%", 100 * rates.mfu);
        /* SuperOffload: which graph ran, the speculative or the waiting one */
        const char *mode = !t->spec.super_offload ? ""
                           : waited               ? " | waited for the norm"
                                                  : " | speculative";
        /* a scheduled lr (and OneCycle's beta1): what this step's update used */
        char sched[64] = "";
        const sg_ds_config *ds = &t->cfg->ds;
        if (ds->scheduler.type == SG_SCHED_ONE_CYCLE && ds->scheduler.cycle_momentum)
            snprintf(sched, sizeof sched, " | LR: %.4g | Beta1: %.4g", hyper.lr, hyper.beta1);
        else if (ds->scheduler.type != SG_SCHED_NONE)
            snprintf(sched, sizeof sched, " | LR: %.4g", hyper.lr);
        printf("%s%s%s%s%s\n", line, active, sched, mode,
               skipped ? " | skipped (fp16 overflow)" : "");
        if (t->cfg->ds.wall_clock_breakdown) {
            sg_format_breakdown_line(line, sizeof line, &ph);
            printf("  %s\n", line);
        }
        fflush(stdout);
    }
    if (!isfinite(loss))
        return sg_error_set(err, SG_EINVAL,
                            "step %lld: the loss is %g (diverged); lower the "
                            "learning rate or enable gradient clipping",
                            (long long)t->st.step, loss);
    return SG_OK;
}

static int write_checkpoint(trainer *t, sg_state_reader *reader, sg_error *err)
{
    const sg_run_options *r = &t->cfg->run;
    int rc;
    t->st.loss_scale = t->scaler.scale;
    t->st.scaler_cur_iter = t->scaler.cur_iter;
    t->st.scaler_last_overflow_iter = t->scaler.last_overflow_iter;
    t->st.scaler_cur_hysteresis = t->scaler.cur_hysteresis;
    t->st.data = sg_data_tell(&t->data);
    t->st.config_hash = sg_config_resume_hash(t->cfg);
    sg_dtype dtype = strcmp(r->save_dtype, "bf16") == 0 ? SG_BF16 : SG_F32;
    /* progress: a large model's save takes minutes */
    printf("saving checkpoint %s/" SG_CHECKPOINT_STEP_PREFIX "%08lld...\n", r->save,
           (long long)t->st.step);
    fflush(stdout);
    double t0 = sg_monotonic_s();
    if (t->world > 1)
        rc = sg_rank_save(&(sg_rank_save_args){t->dist, t->rank, t->world, &t->model, &t->spec,
                                               &t->w, &t->st, reader, r},
                          dtype, err);
    else
        rc = sg_checkpoint_save(r->save, &t->w, &t->st, &t->model, dtype, r->save_keep,
                                r->save_shard_size, err);
    if (!rc) {
        double s = sg_monotonic_s() - t0;
        int64_t bytes = sg_checkpoint_step_bytes(r->save, t->st.step);
        char saved[SG_PATH_MAX + 64];
        snprintf(saved, sizeof saved, "%s/" SG_CHECKPOINT_STEP_PREFIX "%08lld", r->save,
                 (long long)t->st.step);
        sg_dist_watch_checkpoint(t->dist, saved); /* named if a peer stops answering */
        printf("saved checkpoint %s", saved);
        if (bytes >= 1000000000)
            printf(" (%.2f GB", bytes / 1e9);
        else if (bytes >= 0)
            printf(" (%.1f MB", bytes / 1e6);
        if (bytes >= 0)
            printf(" in %.2f s, %.0f MB/s)", s, s > 0 ? bytes / 1e6 / s : 0.0);
        putchar('\n');
        fflush(stdout);
    }
    return rc;
}

/* The files are written tensor by tensor from StarPU's buffers
 * (sg_state_reader; with several ranks, a rank's partition a unit's range at
 * a time, rank_save.c), so a save holds one tensor or unit, not the model. */
int sg_trainer_save_checkpoint(trainer *t, sg_error *err)
{
    sg_state_reader *reader = NULL;
    /* no step in flight: the save runs on this thread alone */
    sg_exec_idle(&t->x);
    /* the save's own buffers are outside StarPU's count: the large buffers
     * kept for the next step go first (buffer_cache.h) */
    sg_buffer_cache_trim();
    int rc = sg_weights_describe(&t->w, &t->model, err);
    if (!rc)
        rc = sg_train_state_describe_moments(&t->st, &t->model, err);
    if (!rc)
        rc = sg_state_reader_open(&t->x, &t->w, &reader, err);
    if (!rc) {
        /* every task that writes the state has finished (an acquire waits
         * for them) before the first tensor is read */
        sg_tensor_source source = {sg_state_reader_fill, reader};
        t->w.source = t->st.source = &source;
        rc = write_checkpoint(t, reader, err);
        t->w.source = t->st.source = NULL;
        if (!rc)
            t->saved_at = t->st.step;
    }
    sg_state_reader_close(reader);
    sg_trainer_drop_state_shapes(t);
    return rc;
}
