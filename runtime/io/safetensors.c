/* safetensors.c - safetensors reader (mmap + full validation) and atomic
 * writer (see safetensors.h). */
#define _POSIX_C_SOURCE 200809L /* mmap, fstat with -std=c11 */
#define _DEFAULT_SOURCE         /* madvise */

#include "runtime/io/safetensors.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "codelets/cpu/ops.h"
#include "common/atomic_file.h"
#include "common/json_util.h"

/* Tensor data is copied with memcpy as little-endian values. */
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
#error "safetensors.c assumes a little-endian host"
#endif

/* Largest integer a JSON number (a double in cJSON) holds exactly. */
#define JSON_INT_MAX 9007199254740992.0 /* 2^53 */

/* ------------------------------------------------------------------------ */
/* dtypes and conversions                                                    */

const char *sg_st_dtype_name(sg_dtype dt)
{
    switch (dt) {
    case SG_F32: return "F32";
    case SG_BF16: return "BF16";
    case SG_F16: return "F16";
    case SG_I32: return "I32";
    }
    return "?";
}

/* ------------------------------------------------------------------------ */
/* reader                                                                    */

static const char *const unsupported_dtypes[] = {
    "F64",  "I64",     "I32",     "I16",     "I8",      "U64",     "U32", "U16", "U8",
    "BOOL", "F8_E4M3", "F8_E5M2", "F8_E8M0", "F6_E2M3", "F6_E3M2", "F4",  "C64",
};

static int is_json_index(const cJSON *v, double max)
{
    return cJSON_IsNumber(v) && isfinite(v->valuedouble) && v->valuedouble >= 0 &&
           v->valuedouble <= max && floor(v->valuedouble) == v->valuedouble;
}

static void st_free_fields(sg_st_file *f)
{
    if (f->tensors)
        for (int i = 0; i < f->ntensors; i++)
            free(f->tensors[i].name);
    if (f->meta)
        for (int i = 0; i < f->nmeta; i++) {
            free((char *)f->meta[i].key);
            free((char *)f->meta[i].value);
        }
    free(f->tensors);
    free(f->by_name);
    free(f->meta);
    free(f->path);
    if (f->map && f->map != MAP_FAILED)
        munmap(f->map, f->map_len);
    memset(f, 0, sizeof *f);
}

void sg_st_close(sg_st_file *f)
{
    if (f)
        st_free_fields(f);
}

/* Sort helpers: qsort has no context argument in C11, so the arrays sorted
 * hold pointers to the tensors. */
static int cmp_name(const void *a, const void *b)
{
    const sg_st_tensor *x = *(sg_st_tensor *const *)a, *y = *(sg_st_tensor *const *)b;
    return strcmp(x->name, y->name);
}

static int cmp_offset(const void *a, const void *b)
{
    const sg_st_tensor *x = *(sg_st_tensor *const *)a, *y = *(sg_st_tensor *const *)b;
    if (x->begin != y->begin)
        return x->begin < y->begin ? -1 : 1;
    if (x->end != y->end)
        return x->end < y->end ? -1 : 1;
    return 0;
}

static void shape_str(const sg_st_tensor *t, char *buf, size_t size)
{
    size_t n = (size_t)snprintf(buf, size, "[");
    for (int d = 0; d < t->ndim && n < size; d++)
        n += (size_t)snprintf(buf + n, size - n, "%s%lld", d ? ", " : "", (long long)t->shape[d]);
    if (n < size)
        snprintf(buf + n, size - n, "]");
}

/* Parses one tensor entry of the header into t (name already set). */
static int parse_entry(const char *path, const cJSON *e, sg_st_tensor *t, uint64_t data_len,
                       sg_error *err)
{
    const char *nm = t->name;
    if (!cJSON_IsObject(e))
        return sg_error_set(err, SG_EINVAL,
                            "%s: tensor \"%s\": expected an object with dtype, shape and "
                            "data_offsets, got %s",
                            path, nm, sg_json_kind(e));
    const cJSON *dtype = NULL, *shape = NULL, *offs = NULL, *c;
    cJSON_ArrayForEach (c, e) {
        if (strcmp(c->string, "dtype") == 0 && !dtype)
            dtype = c;
        else if (strcmp(c->string, "shape") == 0 && !shape)
            shape = c;
        else if (strcmp(c->string, "data_offsets") == 0 && !offs)
            offs = c;
        else
            return sg_error_set(err, SG_EINVAL, "%s: tensor \"%s\": %s field \"%s\"", path, nm,
                                (dtype && !strcmp(c->string, "dtype")) ||
                                        (shape && !strcmp(c->string, "shape")) ||
                                        (offs && !strcmp(c->string, "data_offsets"))
                                    ? "duplicate"
                                    : "unknown",
                                c->string);
    }
    const char *missing = !dtype ? "dtype" : !shape ? "shape" : !offs ? "data_offsets" : NULL;
    if (missing)
        return sg_error_set(err, SG_EINVAL, "%s: tensor \"%s\": missing field \"%s\"", path, nm,
                            missing);

    /* dtype */
    if (!cJSON_IsString(dtype))
        return sg_error_set(err, SG_EINVAL, "%s: tensor \"%s\": dtype must be a string, got %s",
                            path, nm, sg_json_kind(dtype));
    const char *ds = dtype->valuestring;
    if (strcmp(ds, "F32") == 0)
        t->dtype = SG_F32;
    else if (strcmp(ds, "BF16") == 0)
        t->dtype = SG_BF16;
    else if (strcmp(ds, "F16") == 0)
        t->dtype = SG_F16;
    else {
        for (size_t i = 0; i < sizeof unsupported_dtypes / sizeof unsupported_dtypes[0]; i++)
            if (strcmp(ds, unsupported_dtypes[i]) == 0)
                return sg_error_set(err, SG_ENOTSUP,
                                    "%s: tensor \"%s\": dtype %s is not supported (stepgraph "
                                    "reads F32, BF16 and F16)",
                                    path, nm, ds);
        return sg_error_set(err, SG_EINVAL,
                            "%s: tensor \"%s\": unknown dtype \"%s\" (expected F32, BF16 or F16)",
                            path, nm, ds);
    }

    /* shape */
    if (!cJSON_IsArray(shape))
        return sg_error_set(err, SG_EINVAL, "%s: tensor \"%s\": shape must be an array, got %s",
                            path, nm, sg_json_kind(shape));
    int nd = cJSON_GetArraySize(shape);
    if (nd > SG_ST_MAX_DIMS)
        return sg_error_set(err, SG_ENOTSUP, "%s: tensor \"%s\": %d dimensions (at most %d)", path,
                            nm, nd, SG_ST_MAX_DIMS);
    t->ndim = nd;
    uint64_t numel = 1;
    int d = 0, overflow = 0;
    cJSON_ArrayForEach (c, shape) {
        if (!is_json_index(c, JSON_INT_MAX)) {
            char repr[64];
            sg_json_repr(c, repr, sizeof repr);
            return sg_error_set(err, SG_EINVAL,
                                "%s: tensor \"%s\": shape[%d] is %s (expected an integer >= 0)",
                                path, nm, d, repr);
        }
        uint64_t dim = (uint64_t)c->valuedouble;
        t->shape[d++] = (int64_t)dim;
        if (dim && numel > UINT64_MAX / 8 / dim)
            overflow = 1;
        else
            numel *= dim;
    }
    char sh[160];
    shape_str(t, sh, sizeof sh);
    if (overflow)
        return sg_error_set(err, SG_EINVAL, "%s: tensor \"%s\": shape %s is too large", path, nm,
                            sh);
    t->numel = (int64_t)numel;

    /* data_offsets */
    if (!cJSON_IsArray(offs) || cJSON_GetArraySize(offs) != 2 ||
        !is_json_index(cJSON_GetArrayItem(offs, 0), JSON_INT_MAX) ||
        !is_json_index(cJSON_GetArrayItem(offs, 1), JSON_INT_MAX)) {
        char repr[96];
        sg_json_repr(offs, repr, sizeof repr);
        return sg_error_set(err, SG_EINVAL,
                            "%s: tensor \"%s\": data_offsets is %s (expected [begin, end], two "
                            "integers >= 0)",
                            path, nm, repr);
    }
    t->begin = (uint64_t)cJSON_GetArrayItem(offs, 0)->valuedouble;
    t->end = (uint64_t)cJSON_GetArrayItem(offs, 1)->valuedouble;
    if (t->end < t->begin)
        return sg_error_set(err, SG_EINVAL,
                            "%s: tensor \"%s\": data_offsets [%llu, %llu] end before begin", path,
                            nm, (unsigned long long)t->begin, (unsigned long long)t->end);
    uint64_t want = numel * sg_dtype_size(t->dtype);
    if (t->end - t->begin != want)
        return sg_error_set(err, SG_EINVAL,
                            "%s: tensor \"%s\": shape %s of %s needs %llu bytes but data_offsets "
                            "[%llu, %llu] span %llu",
                            path, nm, sh, ds, (unsigned long long)want,
                            (unsigned long long)t->begin, (unsigned long long)t->end,
                            (unsigned long long)(t->end - t->begin));
    if (t->end > data_len)
        return sg_error_set(err, SG_EINVAL,
                            "%s: tensor \"%s\": data_offsets [%llu, %llu] out of range (the data "
                            "section has %llu bytes)",
                            path, nm, (unsigned long long)t->begin, (unsigned long long)t->end,
                            (unsigned long long)data_len);
    return SG_OK;
}

static int parse_metadata(const char *path, const cJSON *m, sg_st_file *f, sg_error *err)
{
    if (!cJSON_IsObject(m))
        return sg_error_set(err, SG_EINVAL, "%s: __metadata__ must be an object, got %s", path,
                            sg_json_kind(m));
    int n = cJSON_GetArraySize(m);
    f->meta = calloc((size_t)(n > 0 ? n : 1), sizeof *f->meta);
    if (!f->meta)
        return sg_error_set(err, SG_ENOMEM, "%s: out of memory", path);
    const cJSON *c;
    cJSON_ArrayForEach (c, m) {
        if (!cJSON_IsString(c)) {
            char repr[64];
            sg_json_repr(c, repr, sizeof repr);
            return sg_error_set(err, SG_EINVAL, "%s: __metadata__.%s: expected a string, got %s",
                                path, c->string, repr);
        }
        for (int i = 0; i < f->nmeta; i++)
            if (strcmp(f->meta[i].key, c->string) == 0)
                return sg_error_set(err, SG_EINVAL, "%s: __metadata__: duplicate key \"%s\"", path,
                                    c->string);
        char *k = strdup(c->string), *v = strdup(c->valuestring);
        if (!k || !v) {
            free(k);
            free(v);
            return sg_error_set(err, SG_ENOMEM, "%s: out of memory", path);
        }
        f->meta[f->nmeta].key = k;
        f->meta[f->nmeta].value = v;
        f->nmeta++;
    }
    return SG_OK;
}

/* Checks the parsed entries together: unique names, offsets contiguous from
 * 0 to the end of the data section without overlap. Fills f->by_name. */
static int check_layout(const char *path, sg_st_file *f, uint64_t data_len, sg_error *err)
{
    int n = f->ntensors;
    sg_st_tensor **p = malloc((size_t)(n > 0 ? n : 1) * sizeof *p);
    f->by_name = malloc((size_t)(n > 0 ? n : 1) * sizeof *f->by_name);
    if (!p || !f->by_name) {
        free(p);
        return sg_error_set(err, SG_ENOMEM, "%s: out of memory", path);
    }
    for (int i = 0; i < n; i++)
        p[i] = &f->tensors[i];
    qsort(p, (size_t)n, sizeof *p, cmp_name);
    for (int i = 1; i < n; i++)
        if (strcmp(p[i - 1]->name, p[i]->name) == 0) {
            sg_error_set(err, SG_EINVAL, "%s: tensor \"%s\" appears twice in the header", path,
                         p[i]->name);
            free(p);
            return SG_EINVAL;
        }
    for (int i = 0; i < n; i++)
        f->by_name[i] = (int)(p[i] - f->tensors);

    qsort(p, (size_t)n, sizeof *p, cmp_offset);
    uint64_t at = 0;
    const sg_st_tensor *prev = NULL;
    int rc = SG_OK;
    for (int i = 0; i < n && rc == SG_OK; i++) {
        const sg_st_tensor *t = p[i];
        if (t->begin < at)
            rc = sg_error_set(err, SG_EINVAL,
                              "%s: tensor \"%s\": data_offsets [%llu, %llu] overlap tensor "
                              "\"%s\" [%llu, %llu]",
                              path, t->name, (unsigned long long)t->begin,
                              (unsigned long long)t->end, prev->name,
                              (unsigned long long)prev->begin, (unsigned long long)prev->end);
        else if (t->begin > at)
            rc = sg_error_set(err, SG_EINVAL,
                              "%s: tensor \"%s\": data_offsets [%llu, %llu] leave a gap of %llu "
                              "bytes after offset %llu (tensors must be contiguous)",
                              path, t->name, (unsigned long long)t->begin,
                              (unsigned long long)t->end, (unsigned long long)(t->begin - at),
                              (unsigned long long)at);
        at = t->end;
        prev = t;
    }
    free(p);
    if (rc == SG_OK && at != data_len)
        rc = sg_error_set(err, SG_EINVAL,
                          "%s: the data section has %llu bytes but the tensors cover %llu "
                          "(file truncated or trailing bytes)",
                          path, (unsigned long long)data_len, (unsigned long long)at);
    return rc;
}

static int parse_header(const char *path, const char *hdr, size_t hlen, sg_st_file *f,
                        uint64_t data_len, sg_error *err)
{
    char origin[4200];
    snprintf(origin, sizeof origin, "%s: header", path);
    if (hlen == 0 || hdr[0] != '{') /* the format requires it */
        return sg_error_set(err, SG_EINVAL,
                            "%s: header does not start with '{' (not a safetensors file?)", path);
    cJSON *root = NULL;
    int rc = sg_json_parse_flags(hdr, hlen, origin, SG_JSON_DUP_KEYS_OK, &root, err);
    if (rc < 0)
        return rc;
    if (!cJSON_IsObject(root)) {
        cJSON_Delete(root);
        return sg_error_set(err, SG_EINVAL, "%s: header is not a JSON object", path);
    }
    int n = cJSON_GetArraySize(root);
    f->tensors = calloc((size_t)(n > 0 ? n : 1), sizeof *f->tensors);
    if (!f->tensors) {
        cJSON_Delete(root);
        return sg_error_set(err, SG_ENOMEM, "%s: out of memory", path);
    }
    const cJSON *c;
    int seen_meta = 0;
    cJSON_ArrayForEach (c, root) {
        if (strcmp(c->string, "__metadata__") == 0) {
            if (seen_meta++) {
                rc = sg_error_set(err, SG_EINVAL, "%s: __metadata__ appears twice", path);
                break;
            }
            rc = parse_metadata(path, c, f, err);
            if (rc < 0)
                break;
            continue;
        }
        sg_st_tensor *t = &f->tensors[f->ntensors];
        t->name = strdup(c->string);
        if (!t->name) {
            rc = sg_error_set(err, SG_ENOMEM, "%s: out of memory", path);
            break;
        }
        f->ntensors++;
        rc = parse_entry(path, c, t, data_len, err);
        if (rc < 0)
            break;
    }
    cJSON_Delete(root);
    if (rc < 0)
        return rc;
    return check_layout(path, f, data_len, err);
}

int sg_st_open(const char *path, sg_st_file *f, sg_error *err)
{
    memset(f, 0, sizeof *f);
    /* O_NONBLOCK: a FIFO is refused below, not waited on */
    int fd = open(path, O_RDONLY | O_NONBLOCK);
    if (fd < 0)
        return sg_error_set(err, errno == ENOENT ? SG_ENOENT : SG_EIO, "%s: %s", path,
                            strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0) {
        int e = errno;
        close(fd);
        return sg_error_set(err, SG_EIO, "%s: %s", path, strerror(e));
    }
    if (!S_ISREG(st.st_mode)) {
        close(fd);
        return sg_error_set(err, SG_EIO, "%s: %s", path,
                            S_ISDIR(st.st_mode) ? "is a directory" : "not a regular file");
    }
    uint64_t size = (uint64_t)st.st_size;
    if (size < 8) {
        close(fd);
        return sg_error_set(err, SG_EINVAL,
                            "%s: truncated: %llu bytes (a safetensors file starts with an 8-byte "
                            "header length)",
                            path, (unsigned long long)size);
    }
    f->path = strdup(path);
    f->map_len = (size_t)size;
    f->map = mmap(NULL, f->map_len, PROT_READ, MAP_PRIVATE, fd, 0);
    int e = errno;
    close(fd);
    if (!f->path || f->map == MAP_FAILED) {
        f->map = NULL;
        st_free_fields(f);
        return sg_error_set(err, SG_EIO, "%s: cannot map the file: %s", path, strerror(e));
    }
    const unsigned char *b = f->map;
    uint64_t n = 0;
    for (int i = 7; i >= 0; i--)
        n = (n << 8) | b[i];
    f->header_len = n;
    int rc;
    if (n > SG_ST_MAX_HEADER)
        rc = sg_error_set(err, SG_EINVAL,
                          "%s: header length %llu is larger than the limit of %llu bytes (not a "
                          "safetensors file?)",
                          path, (unsigned long long)n, (unsigned long long)SG_ST_MAX_HEADER);
    else if (n > size - 8)
        rc = sg_error_set(err, SG_EINVAL,
                          "%s: header length %llu exceeds the file (%llu bytes after the length "
                          "field): file truncated?",
                          path, (unsigned long long)n, (unsigned long long)(size - 8));
    else if (n < 2)
        rc = sg_error_set(err, SG_EINVAL, "%s: header length %llu is too small for a JSON object",
                          path, (unsigned long long)n);
    else {
        char *hdr = malloc((size_t)n + 1);
        if (!hdr)
            rc = sg_error_set(err, SG_ENOMEM, "%s: out of memory for a %llu-byte header", path,
                              (unsigned long long)n);
        else {
            memcpy(hdr, b + 8, (size_t)n);
            hdr[n] = '\0';
            rc = parse_header(path, hdr, (size_t)n, f, size - 8 - n, err);
            free(hdr);
        }
    }
    if (rc < 0) {
        st_free_fields(f);
        return rc;
    }
    for (int i = 0; i < f->ntensors; i++)
        f->tensors[i].data = b + 8 + n + f->tensors[i].begin;
    return SG_OK;
}

const sg_st_tensor *sg_st_find(const sg_st_file *f, const char *name)
{
    int lo = 0, hi = f->ntensors - 1;
    while (lo <= hi) {
        int mid = lo + (hi - lo) / 2;
        const sg_st_tensor *t = &f->tensors[f->by_name[mid]];
        int c = strcmp(t->name, name);
        if (c == 0)
            return t;
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid - 1;
    }
    return NULL;
}

const char *sg_st_meta_get(const sg_st_file *f, const char *key)
{
    for (int i = 0; i < f->nmeta; i++)
        if (strcmp(f->meta[i].key, key) == 0)
            return f->meta[i].value;
    return NULL;
}

/* 16-bit little-endian values (unaligned) to fp32, a chunk at a time
 * through an aligned buffer, so that the array casts convert them. */
static void read_16bit(const unsigned char *p, int64_t n, sg_dtype dtype, float *out)
{
    enum { CHUNK = 4096 };
    uint16_t buf[CHUNK];
    for (int64_t i = 0; i < n; i += CHUNK) {
        size_t m = (size_t)(n - i < CHUNK ? n - i : CHUNK);
        const unsigned char *q = p + 2 * i;
#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
        memcpy(buf, q, 2 * m);
#else
        for (size_t k = 0; k < m; k++)
            buf[k] = (uint16_t)(q[2 * k] | (q[2 * k + 1] << 8));
#endif
        if (dtype == SG_BF16)
            sg_cast_bf16_to_f32(out + i, buf, m);
        else
            sg_cast_f16_to_f32(out + i, buf, m);
    }
}

void sg_st_read_f32_range(const sg_st_tensor *t, int64_t lo, int64_t n, float *out)
{
    size_t es = sg_dtype_size(t->dtype);
    const unsigned char *p = t->data + (size_t)lo * es;
    switch (t->dtype) {
    case SG_F32: memcpy(out, p, (size_t)n * 4); break;
    case SG_BF16:
    case SG_F16: read_16bit(p, n, t->dtype, out); break;
    case SG_I32: /* never opened: the reader refuses I32 tensors */ break;
    }
}

void sg_st_read_f32(const sg_st_tensor *t, float *out)
{
    sg_st_read_f32_range(t, 0, t->numel, out);
}

void sg_st_read_f32_range_release(const sg_st_tensor *t, int64_t lo, int64_t n, float *out)
{
    sg_st_read_f32_range(t, lo, n, out);
    /* the whole pages inside the range's bytes: the mapping is read-only,
     * so they are the file's and come back from it if touched again */
    size_t es = sg_dtype_size(t->dtype);
    uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
    uintptr_t start = (uintptr_t)t->data + (uintptr_t)lo * es;
    uintptr_t a = (start + page - 1) & ~(page - 1);
    uintptr_t b = (start + (uintptr_t)n * es) & ~(page - 1);
    if (page > 1 && b > a)
        (void)madvise((void *)a, b - a, MADV_DONTNEED);
}

void sg_st_read_f32_release(const sg_st_tensor *t, float *out)
{
    sg_st_read_f32_range_release(t, 0, t->numel, out);
}

int sg_st_read_meta(const char *path, const char *key, char *buf, size_t size, sg_error *err)
{
    sg_st_file f;
    int rc = sg_st_open(path, &f, err);
    if (rc < 0)
        return rc;
    const char *v = sg_st_meta_get(&f, key);
    if (!v)
        rc = sg_error_set(err, SG_ENOENT, "%s: no __metadata__ key \"%s\"", path, key);
    else if (snprintf(buf, size, "%s", v) >= (int)size)
        rc = sg_error_set(err, SG_EINVAL, "%s: __metadata__.%s is too long", path, key);
    sg_st_close(&f);
    return rc;
}

/* ------------------------------------------------------------------------ */
/* writer                                                                    */

typedef struct strbuf {
    char *s;
    size_t len, cap;
    int oom;
} strbuf;

static void sb_putn(strbuf *b, const char *s, size_t n)
{
    if (b->oom)
        return;
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 4096;
        while (cap < b->len + n + 1)
            cap *= 2;
        char *ns = realloc(b->s, cap);
        if (!ns) {
            b->oom = 1;
            return;
        }
        b->s = ns;
        b->cap = cap;
    }
    memcpy(b->s + b->len, s, n);
    b->len += n;
    b->s[b->len] = '\0';
}

static void sb_puts(strbuf *b, const char *s)
{
    sb_putn(b, s, strlen(s));
}

static void sb_printf(strbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void sb_printf(strbuf *b, const char *fmt, ...)
{
    char tmp[128];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    if (n > 0)
        sb_putn(b, tmp, (size_t)n < sizeof tmp ? (size_t)n : sizeof tmp - 1);
}

/* JSON string literal; bytes >= 0x80 pass through (UTF-8 names). */
static void sb_json_str(strbuf *b, const char *s)
{
    sb_putn(b, "\"", 1);
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (*p == '"' || *p == '\\') {
            char esc[2] = {'\\', (char)*p};
            sb_putn(b, esc, 2);
        } else if (*p < 0x20) {
            sb_printf(b, "\\u%04x", *p);
        } else {
            sb_putn(b, (const char *)p, 1);
        }
    }
    sb_putn(b, "\"", 1);
}

static int st_dtype_supported(sg_dtype dt)
{
    return dt == SG_F32 || dt == SG_BF16 || dt == SG_F16;
}

static int64_t entry_numel(const sg_st_entry *e)
{
    int64_t n = 1;
    for (int d = 0; d < e->ndim; d++)
        n *= e->shape[d];
    return n;
}

static int check_entries(const char *path, const sg_st_entry *t, int n, const sg_st_meta *meta,
                         int nmeta, sg_error *err)
{
    for (int i = 0; i < n; i++) {
        const char *nm = t[i].name;
        if (!nm || !*nm || strcmp(nm, "__metadata__") == 0)
            return sg_error_set(err, SG_EINVAL, "%s: tensor %d has an invalid name \"%s\"", path, i,
                                nm ? nm : "(null)");
        if (t[i].ndim < 0 || t[i].ndim > SG_ST_MAX_DIMS || (t[i].ndim && !t[i].shape))
            return sg_error_set(err, SG_EINVAL, "%s: tensor \"%s\": bad number of dimensions %d",
                                path, nm, t[i].ndim);
        for (int d = 0; d < t[i].ndim; d++)
            if (t[i].shape[d] < 0)
                return sg_error_set(err, SG_EINVAL, "%s: tensor \"%s\": shape[%d] = %lld < 0", path,
                                    nm, d, (long long)t[i].shape[d]);
        /* the reader's dtypes only, so whatever is written can be read back */
        if (!st_dtype_supported(t[i].dtype) || !st_dtype_supported(t[i].src_dtype))
            return sg_error_set(err, SG_ENOTSUP,
                                "%s: tensor \"%s\": dtype %s from %s data is not supported "
                                "(expected F32, BF16 or F16)",
                                path, nm, sg_st_dtype_name(t[i].dtype),
                                sg_st_dtype_name(t[i].src_dtype));
        if (t[i].dtype != t[i].src_dtype && t[i].src_dtype != SG_F32)
            return sg_error_set(err, SG_ENOTSUP, "%s: tensor \"%s\": cannot convert %s data to %s",
                                path, nm, sg_st_dtype_name(t[i].src_dtype),
                                sg_st_dtype_name(t[i].dtype));
        if (!t[i].data && !t[i].fill && entry_numel(&t[i]) > 0)
            return sg_error_set(err, SG_EINVAL,
                                "%s: tensor \"%s\": no values (neither data "
                                "nor fill)",
                                path, nm);
        for (int j = 0; j < i; j++)
            if (strcmp(t[j].name, nm) == 0)
                return sg_error_set(err, SG_EINVAL, "%s: tensor \"%s\" given twice", path, nm);
    }
    for (int i = 0; i < nmeta; i++) {
        if (!meta[i].key || !meta[i].value)
            return sg_error_set(err, SG_EINVAL, "%s: metadata entry %d has no key or value", path,
                                i);
        for (int j = 0; j < i; j++)
            if (strcmp(meta[j].key, meta[i].key) == 0)
                return sg_error_set(err, SG_EINVAL, "%s: metadata key \"%s\" given twice", path,
                                    meta[i].key);
    }
    return SG_OK;
}

enum { WRITE_IO = -1, WRITE_FILL = -2 };

static int write_values(FILE *fp, const sg_st_entry *e, const void *data);

/* Writes one tensor's data (from its fill into tmp when it has no data). */
static int write_data(FILE *fp, const sg_st_entry *e, float *tmp)
{
    if (e->data || !e->fill)
        return write_values(fp, e, e->data);
    return e->fill(e->fill_ctx, e->fill_index, tmp) ? WRITE_FILL : write_values(fp, e, tmp);
}

/* The most values a fill writes: one buffer of that many serves every
 * fill, its pages touched once and not once per tensor. */
static int64_t most_filled(const sg_st_entry *t, int n)
{
    int64_t most = 1;
    for (int i = 0; i < n; i++)
        if (!t[i].data && t[i].fill && entry_numel(&t[i]) > most)
            most = entry_numel(&t[i]);
    return most;
}

/* The values, converting fp32 to 16 bits in chunks. */
static int write_values(FILE *fp, const sg_st_entry *e, const void *data)
{
    size_t n = (size_t)entry_numel(e);
    if (e->dtype == e->src_dtype)
        return n == 0 || fwrite(data, sg_dtype_size(e->dtype), n, fp) == n ? 0 : WRITE_IO;
    const float *src = data;
    enum { CHUNK = 8192 };
    uint16_t h[CHUNK];
    for (size_t i = 0; i < n; i += CHUNK) {
        size_t m = n - i < CHUNK ? n - i : CHUNK;
        if (e->dtype == SG_BF16)
            sg_cast_f32_to_bf16(h, src + i, m);
        else
            sg_cast_f32_to_f16(h, src + i, m);
#if __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
        for (size_t k = 0; k < m; k++) /* the file is little-endian */
            h[k] = (uint16_t)((h[k] >> 8) | (h[k] << 8));
#endif
        if (fwrite(h, 2, m, fp) != m)
            return WRITE_IO;
    }
    return 0;
}

int sg_st_write(const char *path, const sg_st_entry *t, int n, const sg_st_meta *meta, int nmeta,
                sg_error *err)
{
    int rc = check_entries(path, t, n, meta, nmeta, err);
    if (rc < 0)
        return rc;

    strbuf h = {0};
    sb_puts(&h, "{");
    int first = 1;
    if (nmeta > 0) {
        sb_puts(&h, "\"__metadata__\":{");
        for (int i = 0; i < nmeta; i++) {
            if (i)
                sb_puts(&h, ",");
            sb_json_str(&h, meta[i].key);
            sb_puts(&h, ":");
            sb_json_str(&h, meta[i].value);
        }
        sb_puts(&h, "}");
        first = 0;
    }
    uint64_t off = 0;
    for (int i = 0; i < n; i++) {
        if (!first)
            sb_puts(&h, ",");
        first = 0;
        sb_json_str(&h, t[i].name);
        sb_printf(&h, ":{\"dtype\":\"%s\",\"shape\":[", sg_st_dtype_name(t[i].dtype));
        for (int d = 0; d < t[i].ndim; d++)
            sb_printf(&h, "%s%lld", d ? "," : "", (long long)t[i].shape[d]);
        uint64_t bytes = (uint64_t)entry_numel(&t[i]) * sg_dtype_size(t[i].dtype);
        sb_printf(&h, "],\"data_offsets\":[%llu,%llu]}", (unsigned long long)off,
                  (unsigned long long)(off + bytes));
        off += bytes;
    }
    sb_puts(&h, "}");
    while (!h.oom && h.len % 8 != 0) /* the format allows trailing spaces */
        sb_puts(&h, " ");
    if (h.oom) {
        free(h.s);
        return sg_error_set(err, SG_ENOMEM, "%s: out of memory building the header", path);
    }

    int64_t most = most_filled(t, n);
    float *tmp = malloc((size_t)most * sizeof *tmp);
    if (!tmp) {
        free(h.s);
        return sg_error_set(err, SG_ENOMEM,
                            "%s: out of memory for a tensor's values (%lld "
                            "floats)",
                            path, (long long)most);
    }
    sg_atomic_file af;
    rc = sg_atomic_open(&af, path, err);
    if (rc < 0) {
        free(h.s);
        free(tmp);
        return rc;
    }
    unsigned char len8[8];
    for (int i = 0; i < 8; i++)
        len8[i] = (unsigned char)(((uint64_t)h.len >> (8 * i)) & 0xff);
    int bad = fwrite(len8, 1, 8, af.fp) != 8 || fwrite(h.s, 1, h.len, af.fp) != h.len;
    free(h.s);
    int at = 0;
    for (; at < n && !bad; at++)
        bad = write_data(af.fp, &t[at], tmp);
    int e = errno;
    free(tmp);
    if (bad) {
        sg_atomic_abort(&af);
        if (bad == WRITE_FILL)
            return sg_error_set(err, SG_EIO,
                                "%s: tensor \"%s\": its values could not be read "
                                "back",
                                path, t[at - 1].name);
        return sg_error_set(err, SG_EIO, "%s: write failed: %s", path, strerror(e));
    }
    return sg_atomic_commit(&af, err);
}
