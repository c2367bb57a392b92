/* trace.c - Chrome trace-event JSON, streamed to a temporary file and
 * renamed at close (see trace.h). */
#include "runtime/trace/trace.h"

#include <math.h>
#include <string.h>

#define SG_TRACE_PID 1

/* A JSON string literal: quotes, backslashes and control characters escaped;
 * other bytes (UTF-8) written as they are. */
static void put_json_string(FILE *fp, const char *s)
{
    fputc('"', fp);
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        switch (*p) {
        case '"': fputs("\\\"", fp); break;
        case '\\': fputs("\\\\", fp); break;
        case '\n': fputs("\\n", fp); break;
        case '\r': fputs("\\r", fp); break;
        case '\t': fputs("\\t", fp); break;
        case '\b': fputs("\\b", fp); break;
        case '\f': fputs("\\f", fp); break;
        default:
            if (*p < 0x20)
                fprintf(fp, "\\u%04x", *p);
            else
                fputc(*p, fp);
        }
    }
    fputc('"', fp);
}

/* Starts the next array element: a comma after the first, one event a line. */
static FILE *begin_event(sg_trace *t)
{
    FILE *fp = t->file.fp;
    fputs(t->nevents ? ",\n" : "\n", fp);
    t->nevents++;
    return fp;
}

static int end_event(sg_trace *t)
{
    if (ferror(t->file.fp)) {
        t->write_failed = 1;
        return SG_EIO;
    }
    return SG_OK;
}

static int metadata(sg_trace *t, const char *what, int tid, const char *key, const char *str_value,
                    int int_value)
{
    FILE *fp = begin_event(t);
    fprintf(fp, "{\"name\":\"%s\",\"ph\":\"M\",\"pid\":%d,\"tid\":%d,\"args\":{\"%s\":", what,
            SG_TRACE_PID, tid, key);
    if (str_value)
        put_json_string(fp, str_value);
    else
        fprintf(fp, "%d", int_value);
    fputs("}}", fp);
    return end_event(t);
}

int sg_trace_open(sg_trace *t, const char *path, sg_error *err)
{
    memset(t, 0, sizeof *t);
    int rc = sg_atomic_open(&t->file, path, err);
    if (rc)
        return rc;
    fputs("{\"displayTimeUnit\":\"ms\",\"traceEvents\":[", t->file.fp);
    metadata(t, "process_name", 0, "name", "stepgraph", 0);
    if (t->write_failed)
        return sg_atomic_fail(&t->file, SG_EIO, err);
    return SG_OK;
}

int sg_trace_lane(sg_trace *t, int lane_id, const char *lane_name, int sort_index)
{
    if (!t->file.fp)
        return SG_EIO;
    if (!lane_name)
        return SG_EINVAL;
    int rc = metadata(t, "thread_name", lane_id, "name", lane_name, 0);
    if (rc)
        return rc;
    return metadata(t, "thread_sort_index", lane_id, "sort_index", NULL, sort_index);
}

int sg_trace_event(sg_trace *t, int lane, const char *name, const char *category, double start_us,
                   double dur_us, const char *args_json)
{
    if (!t->file.fp)
        return SG_EIO;
    if (!name || !isfinite(start_us) || !isfinite(dur_us) || dur_us < 0.0)
        return SG_EINVAL;
    if (args_json) {
        /* written verbatim: at least make sure it is an object */
        const char *a = args_json + strspn(args_json, " \t\r\n");
        size_t len = strlen(a);
        while (len && strchr(" \t\r\n", a[len - 1]))
            len--;
        if (len < 2 || a[0] != '{' || a[len - 1] != '}')
            return SG_EINVAL;
    }
    FILE *fp = begin_event(t);
    fputs("{\"name\":", fp);
    put_json_string(fp, name);
    if (category) {
        fputs(",\"cat\":", fp);
        put_json_string(fp, category);
    }
    /* microseconds with ns resolution */
    fprintf(fp, ",\"ph\":\"X\",\"pid\":%d,\"tid\":%d,\"ts\":%.3f,\"dur\":%.3f", SG_TRACE_PID, lane,
            start_us, dur_us);
    if (args_json)
        fprintf(fp, ",\"args\":%s", args_json);
    fputc('}', fp);
    return end_event(t);
}

int sg_trace_flow(sg_trace *t, int64_t id, int from_lane, double from_ts_us, int to_lane,
                  double to_ts_us)
{
    if (!t->file.fp)
        return SG_EIO;
    if (!isfinite(from_ts_us) || !isfinite(to_ts_us))
        return SG_EINVAL;
    /* start and finish must share name, category and id to pair up */
    FILE *fp = begin_event(t);
    fprintf(fp,
            "{\"name\":\"dep\",\"cat\":\"dep\",\"ph\":\"s\",\"id\":%lld,\"pid\":%d,"
            "\"tid\":%d,\"ts\":%.3f}",
            (long long)id, SG_TRACE_PID, from_lane, from_ts_us);
    fp = begin_event(t);
    fprintf(fp,
            "{\"name\":\"dep\",\"cat\":\"dep\",\"ph\":\"f\",\"bp\":\"e\",\"id\":%lld,"
            "\"pid\":%d,\"tid\":%d,\"ts\":%.3f}",
            (long long)id, SG_TRACE_PID, to_lane, to_ts_us);
    return end_event(t);
}

int sg_trace_close(sg_trace *t, sg_error *err)
{
    if (!t->file.fp)
        return sg_error_set(err, SG_EINVAL, "trace is not open");
    fputs("\n]}\n", t->file.fp);
    if (t->write_failed || ferror(t->file.fp)) {
        sg_atomic_abort(&t->file);
        return sg_error_set(err, SG_EIO, "%s: writing the trace failed", t->file.path);
    }
    return sg_atomic_commit(&t->file, err);
}

void sg_trace_abort(sg_trace *t)
{
    sg_atomic_abort(&t->file);
}
