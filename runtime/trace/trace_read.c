/* trace_read.c - a step's task times from a Chrome trace (trace_read.h). */
#define _POSIX_C_SOURCE 200809L

#include "runtime/trace/trace_read.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/json_strict.h"

#define TRACE_MAX ((size_t)512 << 20)

static int slurp(const char *path, char **out, size_t *len, sg_error *err)
{
    *out = NULL;
    FILE *f = fopen(path, "rb");
    if (!f)
        return sg_error_set(err, errno == ENOENT ? SG_ENOENT : SG_EIO, "trace %s: %s", path,
                            strerror(errno));
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap + 1);
    int rc = buf ? SG_OK : sg_error_set(err, SG_ENOMEM, "trace %s: out of memory", path);
    while (rc == SG_OK) {
        if (n == cap) {
            if (cap >= TRACE_MAX) {
                rc = sg_error_set(err, SG_EINVAL, "trace %s: larger than %zu MiB", path,
                                  TRACE_MAX >> 20);
                break;
            }
            char *nb = realloc(buf, 2 * cap + 1);
            if (!nb) {
                rc = sg_error_set(err, SG_ENOMEM, "trace %s: out of memory", path);
                break;
            }
            buf = nb;
            cap *= 2;
        }
        size_t r = fread(buf + n, 1, cap - n, f);
        n += r;
        if (r == 0) {
            if (ferror(f))
                rc = sg_error_set(err, SG_EIO, "trace %s: %s", path,
                                  errno ? strerror(errno) : "read error");
            break;
        }
    }
    fclose(f);
    if (rc) {
        free(buf);
        return rc;
    }
    buf[n] = '\0';
    *out = buf;
    *len = n;
    return SG_OK;
}

static int lane_index(sg_trace_times *t, const char *name)
{
    for (int i = 0; i < t->nlanes; i++)
        if (!strcmp(t->lane_names[i], name))
            return i;
    void *p = realloc(t->lane_names, (size_t)(t->nlanes + 1) * sizeof *t->lane_names);
    if (!p)
        return -1;
    t->lane_names = p;
    snprintf(t->lane_names[t->nlanes], SG_TRACE_LANE_NAME_MAX, "%s", name);
    return t->nlanes++;
}

static int read_events(const cJSON *events, const char *path, const sg_graph *g, sg_trace_times *t,
                       sg_error *err)
{
    /* lanes: tid -> thread_name */
    int ntid = 0;
    struct {
        int tid;
        const char *name;
    } tids[256];
    const cJSON *ev;
    cJSON_ArrayForEach (ev, events) {
        const cJSON *ph = cJSON_GetObjectItemCaseSensitive(ev, "ph");
        const cJSON *nm = cJSON_GetObjectItemCaseSensitive(ev, "name");
        const cJSON *tid = cJSON_GetObjectItemCaseSensitive(ev, "tid");
        const cJSON *args = cJSON_GetObjectItemCaseSensitive(ev, "args");
        const cJSON *an = cJSON_GetObjectItemCaseSensitive(args, "name");
        if (cJSON_IsString(ph) && !strcmp(ph->valuestring, "M") && cJSON_IsString(nm) &&
            !strcmp(nm->valuestring, "thread_name") && cJSON_IsNumber(tid) && cJSON_IsString(an) &&
            ntid < 256)
            tids[ntid].tid = tid->valueint, tids[ntid++].name = an->valuestring;
    }
    int tasks = 0;
    cJSON_ArrayForEach (ev, events) {
        const cJSON *ph = cJSON_GetObjectItemCaseSensitive(ev, "ph");
        if (!cJSON_IsString(ph) || strcmp(ph->valuestring, "X"))
            continue;
        const cJSON *nm = cJSON_GetObjectItemCaseSensitive(ev, "name");
        const cJSON *ts = cJSON_GetObjectItemCaseSensitive(ev, "ts");
        const cJSON *dur = cJSON_GetObjectItemCaseSensitive(ev, "dur");
        const cJSON *tid = cJSON_GetObjectItemCaseSensitive(ev, "tid");
        const cJSON *node =
            cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(ev, "args"), "node");
        if (!cJSON_IsNumber(node))
            continue; /* not a task (a transfer, a marker) */
        int id = node->valueint;
        if (!cJSON_IsString(nm) || !cJSON_IsNumber(ts) || !cJSON_IsNumber(dur) ||
            !(dur->valuedouble >= 0))
            return sg_error_set(err, SG_EINVAL,
                                "trace %s: event of node %d: expected name, ts "
                                "and dur >= 0",
                                path, id);
        if (id < 0 || id >= g->nnodes || node->valuedouble != id)
            return sg_error_set(err, SG_EINVAL,
                                "trace %s: node %g is not a node of this graph "
                                "(%d nodes): the trace is of another config",
                                path, node->valuedouble, g->nnodes);
        if (strcmp(nm->valuestring, g->nodes[id].name))
            return sg_error_set(err, SG_EINVAL,
                                "trace %s: node %d is \"%.64s\" in the trace "
                                "but \"%s\" in the graph: the trace is of another config",
                                path, id, nm->valuestring, g->nodes[id].name);
        t->start_us[id] = ts->valuedouble;
        t->end_us[id] = ts->valuedouble + dur->valuedouble;
        const char *lane = "lane";
        char buf[32];
        for (int k = 0; k < ntid; k++)
            if (cJSON_IsNumber(tid) && tids[k].tid == tid->valueint)
                lane = tids[k].name;
        if (!strcmp(lane, "lane") && cJSON_IsNumber(tid)) {
            snprintf(buf, sizeof buf, "lane %d", tid->valueint);
            lane = buf;
        }
        if ((t->lane[id] = lane_index(t, lane)) < 0)
            return sg_error_set(err, SG_ENOMEM, "trace %s: out of memory", path);
        tasks++;
    }
    if (!tasks)
        return sg_error_set(err, SG_EINVAL,
                            "trace %s: no task event (\"ph\": \"X\" with "
                            "args.node): not a stepgraph trace",
                            path);
    return SG_OK;
}

int sg_trace_times_read(const char *path, const sg_graph *g, sg_trace_times *t, sg_error *err)
{
    memset(t, 0, sizeof *t);
    t->nnodes = g->nnodes;
    size_t nn = (size_t)(g->nnodes > 0 ? g->nnodes : 1);
    t->start_us = malloc(nn * sizeof *t->start_us);
    t->end_us = malloc(nn * sizeof *t->end_us);
    t->lane = malloc(nn * sizeof *t->lane);
    if (!t->start_us || !t->end_us || !t->lane) {
        sg_trace_times_free(t);
        return sg_error_set(err, SG_ENOMEM, "trace %s: out of memory", path);
    }
    for (int i = 0; i < g->nnodes; i++) {
        t->start_us[i] = t->end_us[i] = -1;
        t->lane[i] = -1;
    }
    char *text = NULL;
    size_t len = 0;
    int rc = slurp(path, &text, &len, err);
    if (!rc)
        rc = sg_json_check_strict(text, len, 0, path, err);
    cJSON *root = rc ? NULL : cJSON_Parse(text);
    free(text);
    if (!rc && !root)
        rc = sg_error_set(err, SG_ENOMEM, "trace %s: out of memory", path);
    const cJSON *events = root ? cJSON_GetObjectItemCaseSensitive(root, "traceEvents") : NULL;
    if (!rc && !cJSON_IsArray(events))
        rc = sg_error_set(err, SG_EINVAL,
                          "trace %s: no \"traceEvents\" array: not a Chrome "
                          "trace",
                          path);
    if (!rc)
        rc = read_events(events, path, g, t, err);
    cJSON_Delete(root);
    if (rc)
        sg_trace_times_free(t);
    return rc;
}

void sg_trace_times_free(sg_trace_times *t)
{
    free(t->start_us);
    free(t->end_us);
    free(t->lane);
    free(t->lane_names);
    memset(t, 0, sizeof *t);
}
