/* trace.h - a Chrome trace-event file writer (opens in Perfetto and
 * chrome://tracing).
 *
 * One job: stream what really ran into the JSON object format
 *   {"displayTimeUnit":"ms","traceEvents":[ ... ]}
 * with one process (pid 1, named "stepgraph") whose threads are "lanes": one
 * per worker and per link. Tasks are complete ("X") events; dependencies are
 * flow arrows ("s" then "f"). Timestamps and durations are microseconds.
 *
 * The file is written under a temporary name in the same directory and
 * renamed at sg_trace_close() (common/atomic_file.h): a viewer never opens
 * a half-written trace and an older trace at PATH stays until the new one is
 * complete. After any error, close removes the temporary file.
 */
#ifndef SG_TRACE_H
#define SG_TRACE_H

#include <stdint.h>

#include "common/error.h"
#include "common/atomic_file.h"

typedef struct sg_trace {
    sg_atomic_file file;
    int64_t nevents;  /* events written (for the separating commas) */
    int write_failed; /* a write failed: close will not publish */
} sg_trace;

/* Creates the temporary file and writes the header and the process name. */
int sg_trace_open(sg_trace *t, const char *path, sg_error *err);

/* Names lane `lane_id` (a thread of pid 1) and sets its place in the viewer
 * (thread_name and thread_sort_index metadata events). */
int sg_trace_lane(sg_trace *t, int lane_id, const char *lane_name, int sort_index);

/* A complete event on `lane`: name, category (NULL: none), start and
 * duration in microseconds (finite, duration >= 0), and args_json, the text
 * of a JSON object written as is (NULL: no args). Returns SG_EINVAL for bad
 * input (the event is not written). */
int sg_trace_event(sg_trace *t, int lane, const char *name, const char *category, double start_us,
                   double dur_us, const char *args_json);

/* A dependency arrow with a unique `id`: starts in the slice that encloses
 * from_ts_us on from_lane and ends in the slice that encloses to_ts_us on
 * to_lane (bind point "e", enclosing slice). So pass times inside the two
 * slices, e.g. a little before the producer's end and the consumer's
 * start. */
int sg_trace_flow(sg_trace *t, int64_t id, int from_lane, double from_ts_us, int to_lane,
                  double to_ts_us);

/* Closes the JSON, syncs and renames to the final path. On a write error
 * the final path is untouched and SG_EIO is returned. Bad-input calls that
 * returned SG_EINVAL wrote nothing and do not fail the close. */
int sg_trace_close(sg_trace *t, sg_error *err);

/* Discards the trace (temporary file removed). Safe after close. */
void sg_trace_abort(sg_trace *t);

#endif /* SG_TRACE_H */
