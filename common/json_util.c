/* json_util.c - typed cJSON getters with path-aware errors (see json_util.h). */
#define _POSIX_C_SOURCE 200809L

#include "common/json_util.h"

#include "common/json_strict.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* ---- files and parsing ------------------------------------------------ */

int sg_json_read_file(const char *path, char **text, size_t *len, sg_error *err)
{
    *text = NULL;
    *len = 0;
    FILE *f = fopen(path, "rb");
    if (!f) {
        int e = errno;
        return sg_error_set(err, e == ENOENT || e == ENOTDIR ? SG_ENOENT : SG_EIO,
                            "%s: cannot open: %s", path, strerror(e));
    }
    struct stat st;
    if (fstat(fileno(f), &st) == 0) {
        if (S_ISDIR(st.st_mode)) {
            fclose(f);
            return sg_error_set(err, SG_EIO, "%s: is a directory, not a JSON file", path);
        }
        if (S_ISREG(st.st_mode) && (uint64_t)st.st_size > SG_JSON_MAX_FILE) {
            fclose(f);
            return sg_error_set(err, SG_EINVAL,
                                "%s: file is %.1f MiB; JSON files over %u MiB are refused", path,
                                (double)st.st_size / (1024.0 * 1024.0), SG_JSON_MAX_FILE >> 20);
        }
    }
    /* Read in chunks: st_size is 0 for pipes and /proc files. */
    size_t cap = 4096, n = 0;
    char *buf = malloc(cap + 1);
    if (!buf) {
        fclose(f);
        return sg_error_set(err, SG_ENOMEM, "%s: out of memory", path);
    }
    for (;;) {
        if (n == cap) {
            if (cap > SG_JSON_MAX_FILE) {
                free(buf);
                fclose(f);
                return sg_error_set(err, SG_EINVAL,
                                    "%s: more than %u MiB; JSON files over %u MiB are refused",
                                    path, SG_JSON_MAX_FILE >> 20, SG_JSON_MAX_FILE >> 20);
            }
            size_t ncap = cap * 2;
            char *nb = realloc(buf, ncap + 1);
            if (!nb) {
                free(buf);
                fclose(f);
                return sg_error_set(err, SG_ENOMEM, "%s: out of memory", path);
            }
            buf = nb;
            cap = ncap;
        }
        size_t got = fread(buf + n, 1, cap - n, f);
        n += got;
        if (got == 0)
            break;
    }
    if (ferror(f)) {
        int e = errno;
        free(buf);
        fclose(f);
        return sg_error_set(err, SG_EIO, "%s: read error: %s", path, strerror(e));
    }
    fclose(f);
    if (n > SG_JSON_MAX_FILE) {
        free(buf);
        return sg_error_set(err, SG_EINVAL,
                            "%s: more than %u MiB; JSON files over %u MiB are refused", path,
                            SG_JSON_MAX_FILE >> 20, SG_JSON_MAX_FILE >> 20);
    }
    buf[n] = '\0';
    *text = buf;
    *len = n;
    return SG_OK;
}

int sg_json_parse(const char *text, size_t len, const char *origin, cJSON **root, sg_error *err)
{
    return sg_json_parse_flags(text, len, origin, 0, root, err);
}

int sg_json_parse_flags(const char *text, size_t len, const char *origin, unsigned flags,
                        cJSON **root, sg_error *err)
{
    *root = NULL;
    const char *start = text;
    if (len >= 3 && memcmp(text, "\xEF\xBB\xBF", 3) == 0) /* UTF-8 BOM */
        start += 3;
    const char *p = start;
    while (*p == ' ' || *p == '\t' || *p == '\r' || *p == '\n')
        p++;
    if (*p == '\0' && (size_t)(p - text) == len)
        return sg_error_set(err, SG_EINVAL, "%s: file is empty (expected a JSON object)", origin);
    size_t slen = strlen(text);
    if (slen != len)
        return sg_error_set(err, SG_EINVAL, "%s: invalid JSON: NUL byte at offset %zu", origin,
                            slen);
    /* cJSON is lenient (01, 2., \uZZZZ, \u0000, bad UTF-8, repeated keys):
     * only text that passes the strict check reaches it. */
    int rc = sg_json_check_strict(text, len, flags, origin, err);
    if (rc)
        return rc;

    const char *end = NULL;
    cJSON *j = cJSON_ParseWithOpts(start, &end, 1);
    if (!j) {
        if (!end || end < start || end > text + len)
            end = text + len;
        int line = 1;
        const char *ls = text;
        for (const char *q = text; q < end; q++)
            if (*q == '\n') {
                line++;
                ls = q + 1;
            }
        int col = (int)(end - ls) + 1;
        char near[32];
        size_t k = 0;
        for (const char *q = end; *q && *q != '\n' && *q != '\r' && k < 20; q++)
            near[k++] = *q;
        near[k] = '\0';
        if (k == 0)
            return sg_error_set(err, SG_EINVAL,
                                "%s: invalid JSON at line %d, column %d (at end of line or file)",
                                origin, line, col);
        return sg_error_set(err, SG_EINVAL, "%s: invalid JSON at line %d, column %d (near '%s')",
                            origin, line, col, near);
    }
    *root = j;
    return SG_OK;
}

/* ---- value formatting ------------------------------------------------- */

void sg_json_fmt_num(double v, char *buf, size_t size)
{
    if (!isfinite(v)) {
        snprintf(buf, size, "%s", isnan(v) ? "NaN" : (v > 0 ? "Infinity" : "-Infinity"));
        return;
    }
    if (v == floor(v) && fabs(v) < 1e15) {
        snprintf(buf, size, "%.0f", v);
        return;
    }
    snprintf(buf, size, "%.15g", v);
    if (strtod(buf, NULL) != v)
        snprintf(buf, size, "%.17g", v);
}

const char *sg_json_kind(const cJSON *item)
{
    if (!item || cJSON_IsInvalid(item))
        return "nothing";
    if (cJSON_IsBool(item))
        return "a boolean";
    if (cJSON_IsNull(item))
        return "null";
    if (cJSON_IsNumber(item))
        return "a number";
    if (cJSON_IsString(item))
        return "a string";
    if (cJSON_IsArray(item))
        return "an array";
    if (cJSON_IsObject(item))
        return "an object";
    return "an unknown value";
}

static size_t repr_into(const cJSON *item, char *buf, size_t size, int depth)
{
    if (size == 0)
        return 0;
    buf[0] = '\0';
    if (!item)
        return (size_t)snprintf(buf, size, "nothing");
    if (cJSON_IsTrue(item))
        return (size_t)snprintf(buf, size, "true");
    if (cJSON_IsFalse(item))
        return (size_t)snprintf(buf, size, "false");
    if (cJSON_IsNull(item))
        return (size_t)snprintf(buf, size, "null");
    if (cJSON_IsNumber(item)) {
        sg_json_fmt_num(item->valuedouble, buf, size);
        return strlen(buf);
    }
    if (cJSON_IsString(item)) {
        const char *s = item->valuestring ? item->valuestring : "";
        if (strlen(s) > 48)
            return (size_t)snprintf(buf, size, "\"%.45s...\"", s);
        return (size_t)snprintf(buf, size, "\"%s\"", s);
    }
    if (cJSON_IsObject(item))
        return (size_t)snprintf(buf, size, "an object");
    if (cJSON_IsArray(item)) {
        if (depth > 0)
            return (size_t)snprintf(buf, size, "[...]");
        size_t n = (size_t)snprintf(buf, size, "[");
        int i = 0;
        for (const cJSON *e = item->child; e && n < size; e = e->next, i++) {
            if (i == 4) {
                n += (size_t)snprintf(buf + n, size - n, ", ...");
                break;
            }
            if (i > 0 && n < size)
                n += (size_t)snprintf(buf + n, size - n, ", ");
            if (n < size)
                n += repr_into(e, buf + n, size - n, depth + 1);
        }
        if (n < size)
            n += (size_t)snprintf(buf + n, size - n, "]");
        return n;
    }
    return (size_t)snprintf(buf, size, "?");
}

void sg_json_repr(const cJSON *item, char *buf, size_t size)
{
    repr_into(item, buf, size, 0);
}

/* ---- errors and warnings ---------------------------------------------- */

int sg_json_error(const sg_json_ctx *c, int code, const char *fmt, ...)
{
    char body[SG_ERROR_MSG_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(body, sizeof body, fmt, ap);
    va_end(ap);
    return sg_error_set(c->err, code, "%s: %s%s", c->origin, c->prefix ? c->prefix : "", body);
}

void sg_config_warnings_add(sg_config_warnings *w, const char *msg)
{
    if (!w)
        return;
    if (w->count < SG_MAX_WARNINGS - 1) {
        snprintf(w->msg[w->count], sizeof w->msg[0], "%s", msg);
        w->count++;
    } else if (w->count == SG_MAX_WARNINGS - 1) {
        snprintf(w->msg[w->count], sizeof w->msg[0], "further warnings dropped (only %d are kept)",
                 SG_MAX_WARNINGS - 1);
        w->count++;
    }
}

void sg_json_warn(const sg_json_ctx *c, const char *fmt, ...)
{
    if (!c->warn)
        return;
    char body[512], line[600];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(body, sizeof body, fmt, ap);
    va_end(ap);
    snprintf(line, sizeof line, "%s: %s", c->origin, body);
    sg_config_warnings_add(c->warn, line);
}

static const char *auto_replacement(const char *what)
{
    if (strstr(what, "true or false"))
        return "true or false";
    if (strstr(what, "integer") || strstr(what, "number"))
        return "a number";
    return "an explicit value";
}

static int looks_numeric(const char *s)
{
    if (!s || !*s)
        return 0;
    char *end;
    errno = 0;
    (void)strtod(s, &end);
    return end != s && *end == '\0';
}

int sg_json_type_error(const sg_json_ctx *c, const cJSON *item, const char *path, const char *what)
{
    char v[128];
    sg_json_repr(item, v, sizeof v);
    if (cJSON_IsString(item)) {
        const char *s = item->valuestring ? item->valuestring : "";
        if (strcmp(s, "auto") == 0)
            return sg_json_error(
                c, SG_EINVAL,
                "%s: \"auto\" is not supported: \"auto\" must be replaced by %s "
                "(stepgraph reads the DeepSpeed config as is; no HF Trainer fills it in)",
                path, auto_replacement(what));
        const char *hint = "";
        if (strstr(what, "true or false") && (strcmp(s, "true") == 0 || strcmp(s, "false") == 0))
            hint = " (write true or false without quotes)";
        else if ((strstr(what, "integer") || strstr(what, "number")) && looks_numeric(s))
            hint = " (write numbers without quotes)";
        return sg_json_error(c, SG_EINVAL, "%s: expected %s, got the string %s%s", path, what, v,
                             hint);
    }
    return sg_json_error(c, SG_EINVAL, "%s: expected %s, got %s", path, what, v);
}

void sg_json_range_desc(char *buf, size_t size, const char *name, unsigned flags, double lo,
                        double hi)
{
    char a[40], b[40];
    sg_json_fmt_num(lo, a, sizeof a);
    sg_json_fmt_num(hi, b, sizeof b);
    if ((flags & SG_JSON_LO) && (flags & SG_JSON_HI))
        snprintf(buf, size, "expected %s %s %s %s %s", a,
                 (flags & SG_JSON_LO_OPEN) ? "<" : "<=", name,
                 (flags & SG_JSON_HI_OPEN) ? "<" : "<=", b);
    else if (flags & SG_JSON_LO)
        snprintf(buf, size, "expected %s %s %s", name, (flags & SG_JSON_LO_OPEN) ? ">" : ">=", a);
    else if (flags & SG_JSON_HI)
        snprintf(buf, size, "expected %s %s %s", name, (flags & SG_JSON_HI_OPEN) ? "<" : "<=", b);
    else
        snprintf(buf, size, "expected a valid %s", name);
}

int sg_json_in_range(double v, unsigned flags, double lo, double hi)
{
    if (flags & SG_JSON_LO) {
        if ((flags & SG_JSON_LO_OPEN) ? !(v > lo) : !(v >= lo))
            return 0;
    }
    if (flags & SG_JSON_HI) {
        if ((flags & SG_JSON_HI_OPEN) ? !(v < hi) : !(v <= hi))
            return 0;
    }
    return 1;
}

static int range_error(const sg_json_ctx *c, const cJSON *item, const char *path, const char *name,
                       unsigned flags, double lo, double hi, const char *expect)
{
    char v[64], d[160];
    sg_json_repr(item, v, sizeof v);
    if (expect)
        snprintf(d, sizeof d, "%s", expect);
    else
        sg_json_range_desc(d, sizeof d, name, flags, lo, hi);
    return sg_json_error(c, SG_EINVAL, "%s: %s is out of range (%s)", path, v, d);
}

/* ---- typed getters ---------------------------------------------------- */

int sg_json_int(const sg_json_ctx *c, const cJSON *item, const char *path, const char *name,
                unsigned flags, double lo, double hi, const char *expect, int64_t *out)
{
    if (!cJSON_IsNumber(item))
        return sg_json_type_error(c, item, path, "an integer");
    double v = item->valuedouble;
    if (!isfinite(v) || v != floor(v))
        return sg_json_type_error(c, item, path, "an integer");
    /* 2^63: JSON numbers are doubles in cJSON; 4e8 arrives as 400000000.0. */
    if (v < -9223372036854775808.0 || v >= 9223372036854775808.0)
        return range_error(c, item, path, name, 0, 0, 0,
                           "expected an integer that fits in 64 bits");
    if (!sg_json_in_range(v, flags, lo, hi))
        return range_error(c, item, path, name, flags, lo, hi, expect);
    *out = (int64_t)v;
    return SG_OK;
}

int sg_json_num(const sg_json_ctx *c, const cJSON *item, const char *path, const char *name,
                unsigned flags, double lo, double hi, const char *expect, double *out)
{
    if (!cJSON_IsNumber(item) || !isfinite(item->valuedouble))
        return sg_json_type_error(c, item, path, "a number");
    double v = item->valuedouble;
    if (!sg_json_in_range(v, flags, lo, hi))
        return range_error(c, item, path, name, flags, lo, hi, expect);
    *out = v;
    return SG_OK;
}

int sg_json_bool(const sg_json_ctx *c, const cJSON *item, const char *path, int *out)
{
    if (!cJSON_IsBool(item))
        return sg_json_type_error(c, item, path, "true or false");
    *out = cJSON_IsTrue(item) ? 1 : 0;
    return SG_OK;
}

int sg_json_str(const sg_json_ctx *c, const cJSON *item, const char *path, char *buf, size_t size)
{
    if (!cJSON_IsString(item) || !item->valuestring)
        return sg_json_type_error(c, item, path, "a string");
    size_t n = strlen(item->valuestring);
    if (n >= size)
        return sg_json_error(c, SG_EINVAL, "%s: string of %zu bytes is too long (at most %zu)",
                             path, n, size - 1);
    memcpy(buf, item->valuestring, n + 1);
    return SG_OK;
}

/* ---- suggestions ------------------------------------------------------ */

static size_t edit_distance(const char *a, const char *b)
{
    size_t la = strlen(a), lb = strlen(b);
    if (la > 63 || lb > 63)
        return 99;
    size_t prev[64], cur[64];
    for (size_t j = 0; j <= lb; j++)
        prev[j] = j;
    for (size_t i = 1; i <= la; i++) {
        cur[0] = i;
        for (size_t j = 1; j <= lb; j++) {
            size_t cost =
                tolower((unsigned char)a[i - 1]) == tolower((unsigned char)b[j - 1]) ? 0 : 1;
            size_t m = prev[j] + 1;
            if (cur[j - 1] + 1 < m)
                m = cur[j - 1] + 1;
            if (prev[j - 1] + cost < m)
                m = prev[j - 1] + cost;
            cur[j] = m;
        }
        memcpy(prev, cur, (lb + 1) * sizeof prev[0]);
    }
    return prev[lb];
}

const char *sg_json_suggest(const char *key, const char *const *cands, size_t n)
{
    const char *best = NULL;
    size_t bestd = 3;
    size_t klen = strlen(key);
    for (size_t i = 0; i < n; i++) {
        if (!cands[i])
            continue;
        size_t d = edit_distance(key, cands[i]);
        /* short keys: one edit at most, or everything would match */
        size_t limit = klen <= 4 ? 1 : 2;
        if (d <= limit && d < bestd) {
            best = cands[i];
            bestd = d;
        }
    }
    return best;
}

const char *sg_suggest_in_list(const char *key, const char *list, char *out, size_t size)
{
    enum { MAX_NAMES = 128 };
    char buf[2048];
    const char *names[MAX_NAMES] = {0};
    size_t n = 0;
    if (size)
        out[0] = '\0';
    snprintf(buf, sizeof buf, "%s", list);
    for (char *p = buf; *p && n < MAX_NAMES;) {
        names[n++] = p;
        char *sep = strstr(p, ", ");
        if (!sep)
            break;
        *sep = '\0';
        p = sep + 2;
    }
    const char *best = sg_json_suggest(key, names, n);
    if (best && size)
        snprintf(out, size, " (did you mean %s?)", best);
    return out;
}

const char *sg_warning_as_error(const char *warning, char *buf, size_t size)
{
    snprintf(buf, size, "%s", warning);
    char *ign = strstr(buf, " ignored");
    if (ign)
        memmove(ign, ign + 8, strlen(ign + 8) + 1);
    return buf;
}

static int cmp_names(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

void sg_json_list_dir(const char *dir, char *buf, size_t size)
{
    enum { MAX_NAMES = 256 };
    char *names[MAX_NAMES];
    size_t n = 0;
    if (size)
        buf[0] = '\0';
    DIR *d = opendir(dir);
    if (!d)
        return;
    struct dirent *de;
    while ((de = readdir(d)) != NULL && n < MAX_NAMES) {
        size_t len = strlen(de->d_name);
        if (len > 5 && !strcmp(de->d_name + len - 5, ".json") &&
            (names[n] = strndup(de->d_name, len - 5)) != NULL)
            n++;
    }
    closedir(d);
    qsort(names, n, sizeof names[0], cmp_names);
    size_t used = 0;
    for (size_t i = 0; i < n; i++) {
        int w = used < size ? snprintf(buf + used, size - used, "%s%s", used ? ", " : "", names[i])
                            : -1;
        if (w < 0 || (size_t)w >= size - used) {
            if (used < size)
                buf[used] = '\0'; /* whole names only */
            used = size;
        } else {
            used += (size_t)w;
        }
        free(names[i]);
    }
}

int sg_json_load_object(const char *path, cJSON **root, sg_error *err)
{
    char *text;
    size_t len;
    int rc = sg_json_read_file(path, &text, &len, err);
    if (rc)
        return rc;
    rc = sg_json_parse(text, len, path, root, err);
    free(text);
    if (rc)
        return rc;
    if (!cJSON_IsObject(*root)) {
        rc = sg_error_set(err, SG_EINVAL, "%s: expected a JSON object at the top level, got %s",
                          path, sg_json_kind(*root));
        cJSON_Delete(*root);
        *root = NULL;
    }
    return rc;
}

int sg_path_beside(const char *file, const char *rel, char *out, size_t size)
{
    int n;
    const char *slash = strrchr(file, '/');
    if (rel[0] == '/' || !slash)
        n = snprintf(out, size, "%s", rel);
    else
        n = snprintf(out, size, "%.*s/%s", (int)(slash - file), file, rel);
    return (n < 0 || (size_t)n >= size) ? -1 : 0;
}

int sg_is_simple_name(const char *s)
{
    if (!*s)
        return 0;
    for (; *s; s++)
        if (!((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') || (*s >= '0' && *s <= '9') ||
              *s == '-' || *s == '_' || *s == '.'))
            return 0;
    return 1;
}
