/* calib_record.h - what `stepgraph calibrate` records of the job it
 * calibrated on (issue 45 item 1), so that:
 * - it prints a `stepgraph simulate` command that works for that job: the
 *   config, the run options and --set it was given, the machine file;
 * - the machine file's "calibration" says which job it was (the args, the
 *   model and the step's shape, the simulate command);
 * - calibrating another job under the same name is refused by name, not
 *   silently replacing the history the first job's simulations need
 *   (`--replace` replaces it on purpose). A job is "the same" when its task
 *   sizes are: model, sequence length, micro-batch, ranks, compute dtype.
 */
#ifndef SG_CLI_CALIB_RECORD_H
#define SG_CLI_CALIB_RECORD_H

#include <stddef.h>

#include <cjson/cJSON.h>

#include "common/error.h"
#include "runtime/config/config.h"

/* The shape that fixes a calibrated job's task sizes. */
typedef struct sg_calib_job {
    char config[4096]; /* CONFIG as given (files from before the record: compared) */
    char model[256];
    long long seq_len, micro_batch, grad_accum, dp_size;
    char dtype[8];
} sg_calib_job;

/* The job of cfg, read from CONFIG (its model loaded for the model's name). */
int sg_calib_job_of(const sg_config *cfg, const char *config, sg_calib_job *job, sg_error *err);

/* "stepgraph simulate CONFIG ARGS... --machine PATH[ --dp_size N]" with
 * each word quoted for a POSIX shell where it needs it; --dp_size added
 * when ranks > 1 and args do not name it. Returns 0, or SG_EINVAL when n
 * is too small. */
int sg_calib_simulate_command(char *out, size_t n, const char *config, char *const *args, int nargs,
                              const char *machine_path, int ranks);

/* Adds to the machine file's "calibration" object: "args" (the run options
 * and --set as given), "model", "seq_len", "micro_batch", "grad_accum",
 * "dp_size", "dtype", "simulate" (the command). Returns 0 or SG_ENOMEM. */
int sg_calib_record(cJSON *cal, const sg_calib_job *job, char *const *args, int nargs,
                    const char *simulate_command);

/* Before calibrating job under NAME into path (DIR/NAME.json): 0 when no
 * machine file is there, it is not a calibrated one, or it was calibrated
 * on the same job; SG_EINVAL naming the earlier job and the ways out
 * otherwise (replace = 1: 0 always). */
int sg_calib_check_name(const char *path, const char *name, const sg_calib_job *job, int replace,
                        sg_error *err);

#endif /* SG_CLI_CALIB_RECORD_H */
