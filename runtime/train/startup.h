/* startup.h - what a run spends before its first step, for the header's
 * "start-up:" line (scripts/bench_gpu_suite.py reads it; docs/gpu.md):
 * the process's start to the trainer (MPI, the config and the model
 * checked), the step's compilation, the starting state's shapes and the
 * data opened, StarPU's start, the state's allocation and the initial
 * state's load into StarPU's buffers. Seconds. */
#ifndef SG_TRAIN_STARTUP_H
#define SG_TRAIN_STARTUP_H

#include <stdio.h>

typedef struct sg_startup {
    double config_s;  /* process start to the trainer (0 where not known) */
    double compile_s; /* the step graph(s) compiled, priorities set */
    double inputs_s;  /* the state's source described or opened, the data opened */
    double starpu_s;  /* StarPU's start, with its CUDA set-up */
    double alloc_s;   /* the lowering: the state's buffers allocated and zeroed */
    double load_s;    /* the initial state drawn or read into the buffers */
    long long state_bytes, pinned_bytes; /* the state allocated, and of it pinned */
} sg_startup;

/* Seconds since this process started (Linux: /proc/self/stat's start time
 * against CLOCK_BOOTTIME, to the kernel's clock tick); 0 where unknown. */
double sg_process_age_s(void);

/* "  start-up: T s (config P s, compile C s, state and data D s, StarPU A s,
 * state allocation B s, initial state I s); state X GiB, Y GiB of it pinned":
 * T from the process's start to now (the trainer's own time when the
 * process's age is not known). */
void sg_startup_print(FILE *f, const sg_startup *s, double trainer_s);

#endif /* SG_TRAIN_STARTUP_H */
