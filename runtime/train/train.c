/* train.c - the training loop of `stepgraph run` (train.h): set-up, steps
 * submitted up to the lookahead and finished in order, interrupts, the last
 * checkpoint and the summary. The set-up's parts are train_setup.c's, a
 * step's train_step.c's, memory and the summary train_report.c's (what
 * they share: trainer.h). */

#define _POSIX_C_SOURCE 200809L
#include "runtime/train/trainer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "codelets/cpu/gemm.h"
#include "common/cleanup.h"
#include "common/clock.h"
#include "runtime/exec/buffer_cache.h"
#include "runtime/train/timeline.h"

static void teardown(trainer *t)
{
    sg_node_times_free(&t->node_times);
    /* its lowering shares the exec's buffers: first, and left to StarPU
     * when StarPU is (several ranks after an error) */
    sg_eval_close(&t->eval, t->exec_started);
    if (t->exec_started)
        sg_exec_shutdown(&t->x);
    if (t->metrics_open) {
        /* still open only when the run already failed, with its own message */
        sg_error e;
        (void)sg_metrics_close(&t->metrics, &e);
    }
    if (t->data_open)
        sg_data_close(&t->data);
    sg_trainer_drop_state_shapes(t);
    sg_train_state_free(&t->st);
    sg_graph_free(&t->graph);
    sg_graph_free(&t->wait_graph);
    free(t->inputs);
    free(t->targets);
    free(t->losses);
}

static int finish_one(trainer *t, sg_train_result *res, sg_error *err)
{
    int rc = sg_trainer_finish_step(t, err);
    if (!rc)
        rc = sg_interrupt_finished(&t->intr, t->finished, err);
    if (rc)
        return rc;
    if (res->steps == 0)
        res->first_loss = t->losses[0];
    res->steps++;
    return SG_OK;
}

/* Several ranks: the config must say as many as were launched; what is not
 * supported with several yet is refused before anything runs. */
static int check_ranks(const trainer *t, sg_error *err)
{
    const sg_run_options *r = &t->cfg->run;
    long long dp = (long long)r->dp_size;
    if (dp > 1 && t->world == 1) {
        if (!sg_dist_available())
            return sg_error_set(err, SG_ENOTSUP,
                                "dp_size %lld: several ranks need MPI, and "
                                "this stepgraph was built without MPI support (apt-get install "
                                "libopenmpi-dev openmpi-bin, then reconfigure)",
                                dp);
        return sg_error_set(err, SG_EINVAL,
                            "dp_size %lld: one process per rank; launch with "
                            "`mpirun -np %lld stepgraph run CONFIG` (docs/ranks.md)",
                            dp, dp);
    }
    if (t->world > 1 && dp != t->world)
        return sg_error_set(err, SG_EINVAL,
                            "dp_size %lld in the config, but mpirun started %d "
                            "ranks: they must be equal (set dp_size %d, or mpirun -np %lld)",
                            dp, t->world, t->world, dp);
    return SG_OK;
}

/* The validation loss after the step just submitted when it is due
 * (eval.h): once every step in flight has finished, on every rank alike
 * (the step numbers are the same everywhere). */
static int maybe_eval(trainer *t, sg_train_result *res, int last, sg_error *err)
{
    int64_t step = t->st.step + sg_exec_in_flight(&t->x); /* the submitted step's number */
    if (!sg_eval_due(&t->eval, step, last))
        return SG_OK;
    int rc;
    while (sg_exec_in_flight(&t->x) > 0)
        if ((rc = finish_one(t, res, err)))
            return rc;
    return sg_eval_run(&t->eval, &t->x, t->dist, t->st.step, t->metrics_open ? &t->metrics : NULL,
                       NULL, err);
}

/* Up to `lookahead` steps in flight; finished (logged) in order. A
 * checkpoint, an evaluation, the trace and the end wait for every step in
 * flight. SIGINT or SIGTERM: no step is submitted after the one interrupt.h
 * names. */
static int train_loop(trainer *t, sg_train_result *res, sg_error *err)
{
    const sg_run_options *r = &t->cfg->run;
    int rc;
    for (int64_t i = 0; i < t->total_steps; i++) {
        while (sg_exec_in_flight(&t->x) >= (int)r->lookahead)
            if ((rc = finish_one(t, res, err)))
                return rc;
        if (!sg_interrupt_may_submit(&t->intr, t->submitted + 1))
            break;
        if ((rc = sg_trainer_submit_step(t, err)) ||
            (rc = sg_interrupt_submitted(&t->intr, t->submitted, err)))
            return rc;
        while (sg_exec_in_flight(&t->x) > 0 && sg_exec_oldest_done(&t->x))
            if ((rc = finish_one(t, res, err)))
                return rc;
        if ((rc = maybe_eval(t, res, i + 1 == t->total_steps, err)))
            return rc;
        if (r->save[0] && r->save_interval > 0 && (i + 1) % r->save_interval == 0 &&
            i + 1 < t->total_steps) {
            while (sg_exec_in_flight(&t->x) > 0)
                if ((rc = finish_one(t, res, err)))
                    return rc;
            if ((rc = sg_trainer_save_checkpoint(t, err)))
                return rc;
        }
    }
    while (sg_exec_in_flight(&t->x) > 0)
        if ((rc = finish_one(t, res, err)))
            return rc;
    /* a signal after the last vote stops the run here, where it ends anyway */
    return sg_interrupt_settle(&t->intr, err);
}

/* After the last step: the summary, the trace, the checkpoint, the node
 * times, the metrics closed. Interrupted before any step: nothing but the
 * metrics (there is no step to sum up, trace or save). */
static int end_run(trainer *t, sg_train_result *res, sg_error *err)
{
    const sg_config *cfg = t->cfg;
    const sg_run_options *r = &cfg->run;
    int rc = SG_OK;
    sg_exec_idle(&t->x); /* the rest (summary, trace, save) runs on this thread */
    res->signo = t->intr.signo;
    res->last_step = t->st.step;
    res->last_loss = t->losses[0];
    if (res->steps > 0) {
        sg_trainer_print_summary(t);
        sg_step_summary sum;
        sg_step_stats_summary(&t->stats, &sum);
        res->mean_step_s = sum.mean_s;
        res->tokens_per_s = sum.tokens_per_s;
        sg_exec_worker_counts(&res->workers_cpu, &res->workers_cuda);
        if (r->trace[0] && t->rank == 0) {
            if ((rc = sg_timeline_write_trace(&t->x, r->trace, err)))
                return rc;
            printf("trace of step %lld written to %s\n", (long long)t->st.step, r->trace);
        }
        /* an interrupt right after a periodic save: that one is this step's */
        if (r->save[0] && t->saved_at != t->st.step && (rc = sg_trainer_save_checkpoint(t, err)))
            return rc;
        if (cfg->node_times[0] &&
            (rc = sg_node_times_write(&t->node_times, &t->graph, cfg->node_times, err)))
            return rc;
    }
    if (t->metrics_open) {
        /* the file is complete only once closed: a failure here fails the run */
        t->metrics_open = 0;
        rc = sg_metrics_close(&t->metrics, err);
    }
    if (!rc && res->signo)
        sg_interrupt_print(&t->intr, res->steps, t->st.step, r->save);
    return rc;
}

int sg_train(const sg_config *cfg, sg_train_result *res, sg_error *err)
{
    return sg_train_ranks(cfg, NULL, res, err);
}

int sg_train_ranks(const sg_config *cfg, const sg_dist *dist, sg_train_result *res, sg_error *err)
{
    trainer t;
    memset(&t, 0, sizeof t);
    t.start_s = sg_monotonic_s();
    t.startup.config_s = sg_process_age_s();
    t.saved_at = -1;
    t.cfg = cfg;
    t.dist = dist;
    t.rank = dist ? dist->rank : 0;
    t.world = dist ? dist->size : 1;
    sg_step_stats_init(&t.stats);
    memset(res, 0, sizeof *res);
    const sg_run_options *r = &cfg->run;
    int rc;
    /* ranks first: a refused run creates no output directory */
    double stall_s;
    int save_created = 0, save_slot = -1;
    if ((rc = check_ranks(&t, err)) || (rc = sg_gemm_check_env(err)) ||
        (rc = sg_stall_seconds(&stall_s, err)) || (rc = sg_buffer_cache_check_env(err)) ||
        (rc = sg_trainer_check_outputs(r, &save_created, err)))
        goto out;
    /* a second signal ends the process at once: not with an empty directory */
    if (save_created)
        save_slot = sg_cleanup_add_if_empty(r->save);
    double t_set = sg_monotonic_s();
    if ((rc = sg_trainer_setup_graph(&t, err)) || (rc = sg_trainer_check_host_memory(&t, err)))
        goto out;
    t.startup.compile_s = sg_monotonic_s() - t_set;
    t_set = sg_monotonic_s();
    if ((rc = sg_trainer_setup_weights(&t, err)) ||
        (r->save[0] && (rc = sg_checkpoint_check_save(r->save, r->load, t.resumed, err))) ||
        (rc = sg_trainer_setup_data(&t, err)) || (rc = sg_trainer_check_schedule(&t, err)) ||
        (rc = sg_eval_open(&t.eval, cfg, &t.model, &t.spec, dist,
                           t.have_tokenizer ? &t.tokenizer : NULL, err)))
        goto out;
    t.startup.inputs_s = sg_monotonic_s() - t_set;
    /* several ranks: rank 0 writes the metrics and the trace, the others none */
    if (r->metrics[0] && t.rank == 0) {
        if ((rc = sg_metrics_open(&t.metrics, r->metrics, err)))
            goto out;
        t.metrics_open = 1;
    }
    if ((rc = sg_trainer_setup_exec(&t, err)) || (rc = sg_eval_attach(&t.eval, &t.x, dist, err)))
        goto out;
    if (cfg->node_times[0] && sg_node_times_init(&t.node_times, t.graph.nnodes)) {
        rc = sg_error_set(err, SG_ENOMEM, "out of memory");
        goto out;
    }
    sg_trainer_print_header(&t);
    sg_trainer_plan_memory(&t);
    sg_trainer_set_peak(&t);
    /* several ranks: from here a silent peer ends the run (runtime/dist/watchdog.h) */
    sg_dist_watch_arm(dist, (double)r->comm_timeout, t.resumed ? r->load : NULL);
    sg_interrupt_init(&t.intr, dist, (int)r->lookahead);
    if (!(rc = train_loop(&t, res, err)))
        rc = end_run(&t, res, err);
out:
    /* several ranks: after an error, StarPU's workers may wait in a
     * collective for a rank that will never call it, so StarPU is not shut
     * down (it would wait for them): the caller ends every rank
     * (sg_dist_abort) */
    if (rc && t.world > 1)
        t.exec_started = 0;
    teardown(&t);
    /* a refused, failed or interrupted run leaves no empty save directory
     * of its own (rmdir removes only an empty one: saved steps stay) */
    sg_cleanup_forget(save_slot);
    if (save_created)
        rmdir(r->save);
    return rc;
}
