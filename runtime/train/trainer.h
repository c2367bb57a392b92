/* trainer.h - the state of a training run (runtime/train/train.c) and the
 * steps its files provide one another: train_setup.c (set-up), train_step.c
 * (a step and checkpoints), train_report.c (memory and the summary). Not a
 * public header: train.h is the trainer's interface.
 */
#ifndef SG_TRAINER_H
#define SG_TRAINER_H

#include "runtime/train/train.h"

#include <stdint.h>

#include "codelets/cpu/adam.h"
#include "runtime/dist/dist.h"
#include "runtime/exec/exec.h"
#include "runtime/io/data_loader.h"
#include "runtime/io/tokenizer_info.h"
#include "runtime/io/weights.h"
#include "runtime/train/interrupt.h"
#include "runtime/train/loss_scaler.h"
#include "runtime/train/node_times.h"
#include "runtime/train/speculation.h"
#include "runtime/train/startup.h"
#include "runtime/train/state_source.h"
#include "runtime/train/step_log.h"
#include "runtime/train/eval.h"

typedef struct trainer {
    const sg_config *cfg;
    const sg_dist *dist; /* several ranks (runtime/dist/), or NULL */
    int rank, world;     /* 0 and 1 for one process */
    sg_model model;
    sg_step_spec spec;
    sg_graph graph;
    /* SuperOffload with speculation "adaptive" or "never": the same step
     * compiled without speculation, run while clipping keeps firing */
    sg_step_spec wait_spec;
    sg_graph wait_graph;
    int adaptive; /* choose per step; else wait_graph always runs */
    int have_wait;
    sg_speculation speculation; /* adaptive: the rule's state */
    int waiting;                /* the rule's mode after the steps finished so far */
    /* adaptive: the mode after n finished steps, at waiting_after[n % (SG_LOOKAHEAD_MAX + 1)];
     * step j runs the mode known after step j - lookahead, the last one that
     * has surely finished when it is submitted, so the choice does not
     * depend on timing */
    uint8_t waiting_after[SG_LOOKAHEAD_MAX + 1];
    int64_t waited_steps;
    sg_weights w;           /* names and shapes (values only while a save of
                                   several ranks reads them back) */
    sg_train_state st;      /* counters, scaler, data position; moments as w */
    sg_state_source source; /* the starting state, until StarPU holds it */
    int have_source;
    int resumed;
    char data_path[SG_PATH_MAX];
    sg_data_loader data;
    int data_open;
    sg_tokenizer_info tokenizer; /* who made the token shards, when they say */
    int have_tokenizer;
    sg_loss_scaler_params scaler_params;
    sg_loss_scaler_state scaler; /* the step's; read back from the exec after each step */
    sg_exec x;
    int exec_started;
    int64_t plan_host, plan_gpu; /* the plan's peaks for the workers (sg_trainer_plan_memory) */
    double peak_tflops;          /* the rank's GPUs' dense peak, MFU's denominator; 0
                                      unknown (sg_trainer_set_peak) */
    sg_node_times node_times;    /* cfg->node_times: CPU task times per node */
    sg_metrics metrics;
    int metrics_open;
    int32_t *inputs, *targets;
    float *losses;
    sg_step_stats stats;
    int64_t total_steps;
    int64_t rollbacks; /* SuperOffload sub-group steps undone, whole run */
    /* submission side, ahead of st by the steps in flight */
    int64_t submitted;        /* steps submitted */
    int64_t submit_adam_step; /* Adam steps done before the next submitted one */
    int advance_pending;      /* the last submitted step's skip is not known yet */
    int64_t finished;         /* steps finished (logged) */
    /* start-up, for the header: the trainer's start, and the parts (startup.h) */
    double start_s;
    sg_startup startup;
    sg_interrupt intr; /* SIGINT, SIGTERM: where to stop */
    int64_t saved_at;  /* the step of the last checkpoint written, or -1 */
    sg_eval eval;      /* the validation loss (eval.h) */
} trainer;

static inline sg_optim_algo optim_algo_of(sg_optimizer_type type)
{
    return type == SG_OPT_LION      ? SG_OPTIM_LION
           : type == SG_OPT_ADAGRAD ? SG_OPTIM_ADAGRAD
                                    : SG_OPTIM_ADAM;
}

/* train_setup.c */
int sg_trainer_check_outputs(const sg_run_options *r, int *created, sg_error *err);
int sg_trainer_setup_graph(trainer *t, sg_error *err);
int sg_trainer_setup_weights(trainer *t, sg_error *err);
int sg_trainer_setup_data(trainer *t, sg_error *err);
int sg_trainer_check_schedule(const trainer *t, sg_error *err);
void sg_trainer_drop_state_shapes(trainer *t);
int sg_trainer_setup_exec(trainer *t, sg_error *err);
void sg_trainer_print_header(const trainer *t);

/* train_step.c */
int sg_trainer_submit_step(trainer *t, sg_error *err);
int sg_trainer_finish_step(trainer *t, sg_error *err);
int sg_trainer_save_checkpoint(trainer *t, sg_error *err);

/* train_report.c */
int sg_trainer_check_host_memory(const trainer *t, sg_error *err);
void sg_trainer_set_peak(trainer *t);
void sg_trainer_plan_memory(trainer *t);
void sg_trainer_print_summary(const trainer *t);

#endif
