/* task_record.h - when and where one node's task ran: what a real run's
 * task callbacks and a simulation record per node, and what traces and
 * overlap statistics read. */
#ifndef SG_TASK_RECORD_H
#define SG_TASK_RECORD_H

/* StarPU's profiling clock, microseconds. */
typedef struct sg_task_record {
    int worker; /* StarPU worker id, -1 if it did not run */
    double start_us, end_us;
} sg_task_record;

#endif /* SG_TASK_RECORD_H */
