/* json_strict.c - strict RFC 8259 check of JSON text (json_strict.h).
 *
 * A recursive-descent recogniser over the raw bytes: it builds nothing but
 * the decoded keys of the objects still open (for the duplicate check), so
 * cJSON can then parse the same text knowing it means what it says. */
#include "common/json_strict.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct key_ent {
    size_t str_off; /* decoded key in checker.keys */
    size_t len;
    size_t src_off; /* its opening quote in the text */
    const char *s;  /* set just before sorting */
} key_ent;

typedef struct checker {
    const unsigned char *t;
    size_t len, pos;
    size_t line_start_at; /* 3 after a BOM: columns count from the first character */
    unsigned flags;
    const char *origin;
    sg_error *err;
    char *keys; /* decoded keys of the open objects, stacked */
    size_t keys_len, keys_cap;
    key_ent *ents;
    size_t nents, ents_cap;
} checker;

/* ---- positions and messages ------------------------------------------- */

/* 1-based line and column (in characters) of byte offset off. */
static void line_col(const checker *ck, size_t off, int *line, int *col)
{
    *line = 1;
    *col = 1;
    for (size_t i = ck->line_start_at; i < off && i < ck->len; i++) {
        if (ck->t[i] == '\n') {
            (*line)++;
            *col = 1;
        } else if ((ck->t[i] & 0xC0) != 0x80) {
            (*col)++;
        }
    }
}

static int fail_at(checker *ck, size_t off, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int fail_at(checker *ck, size_t off, const char *fmt, ...)
{
    char what[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    int line, col;
    line_col(ck, off, &line, &col);
    return sg_error_set(ck->err, SG_EINVAL, "%s: invalid JSON at line %d, column %d: %s",
                        ck->origin, line, col, what);
}

enum { SNIP_ASCII = 1, SNIP_DOTS = 2 };

/* At most max bytes of s[0..n) for a message (one line), in out. With
 * SNIP_ASCII it stops before a control byte or any byte above 0x7E (raw
 * text around an error); without, control bytes show as '?' (a decoded
 * key). Never cuts a UTF-8 character; with SNIP_DOTS, "..." marks a cut. */
static const char *snippet(const unsigned char *s, size_t n, size_t max, unsigned how, char *out,
                           size_t size)
{
    size_t i = 0;
    if (max > size - 4)
        max = size - 4;
    if (how & SNIP_ASCII)
        while (i < n && i < max && s[i] >= 0x20 && s[i] < 0x7F)
            i++;
    else
        i = n < max ? n : max;
    int cut = i == max && i < n;
    if (cut)
        while (i > 0 && (s[i] & 0xC0) == 0x80) /* back to a character boundary */
            i--;
    for (size_t j = 0; j < i; j++)
        out[j] = s[j] < 0x20 || s[j] == 0x7F ? '?' : (char)s[j];
    size_t k = i;
    if ((how & SNIP_DOTS) && cut) {
        memcpy(out + k, "...", 3);
        k += 3;
    }
    out[k] = '\0';
    return out;
}

/* ---- UTF-8 ------------------------------------------------------------ */

/* Length of the UTF-8 sequence at s[0..n) (n >= 1), or 0 with *why. */
static size_t utf8_seq(const unsigned char *s, size_t n, const char **why)
{
    unsigned c = s[0];
    if (c < 0x80)
        return 1;
    size_t need;
    unsigned long cp, min;
    if (c >= 0xC0 && c <= 0xDF) {
        need = 2, cp = c & 0x1F, min = 0x80;
    } else if (c >= 0xE0 && c <= 0xEF) {
        need = 3, cp = c & 0x0F, min = 0x800;
    } else if (c >= 0xF0 && c <= 0xF7) {
        need = 4, cp = c & 0x07, min = 0x10000;
    } else if (c <= 0xBF) {
        *why = "a continuation byte without a lead byte";
        return 0;
    } else {
        *why = "a byte that never occurs in UTF-8";
        return 0;
    }
    for (size_t i = 1; i < need; i++) {
        if (i >= n || (s[i] & 0xC0) != 0x80) {
            *why = "a truncated multi-byte sequence";
            return 0;
        }
        cp = (cp << 6) | (s[i] & 0x3F);
    }
    if (cp < min) {
        *why = "an overlong encoding";
        return 0;
    }
    if (cp >= 0xD800 && cp <= 0xDFFF) {
        *why = "a UTF-16 surrogate encoded in UTF-8";
        return 0;
    }
    if (cp > 0x10FFFF) {
        *why = "a code point above U+10FFFF";
        return 0;
    }
    return need;
}

int sg_utf8_check(const char *s, size_t len, size_t *bad_off)
{
    const unsigned char *u = (const unsigned char *)s;
    for (size_t i = 0; i < len;) {
        const char *why;
        size_t n = utf8_seq(u + i, len - i, &why);
        if (!n) {
            if (bad_off)
                *bad_off = i;
            return -1;
        }
        i += n;
    }
    return 0;
}

static int bad_utf8(checker *ck, size_t off)
{
    const char *why = "";
    (void)utf8_seq(ck->t + off, ck->len - off, &why);
    return fail_at(ck, off, "invalid UTF-8 at byte 0x%02X: %s", ck->t[off], why);
}

/* ---- tokens ----------------------------------------------------------- */

static void skip_ws(checker *ck)
{
    while (ck->pos < ck->len) {
        unsigned char c = ck->t[ck->pos];
        if (c != ' ' && c != '\t' && c != '\n' && c != '\r')
            break;
        ck->pos++;
    }
}

/* The character at pos is not what the grammar allows here. */
static int unexpected(checker *ck, const char *expected)
{
    size_t p = ck->pos;
    if (p >= ck->len)
        return fail_at(ck, p, "unexpected end of text (expected %s)", expected);
    unsigned char c = ck->t[p];
    if (c < 0x20 || c == 0x7F)
        return fail_at(ck, p,
                       "control character 0x%02X where %s was expected (JSON whitespace "
                       "is only space, tab, LF and CR)",
                       c, expected);
    if (c >= 0x80) {
        const char *why;
        size_t n = utf8_seq(ck->t + p, ck->len - p, &why);
        if (!n)
            return bad_utf8(ck, p);
        unsigned long cp = n == 2 ? (c & 0x1Fu) : n == 3 ? (c & 0x0Fu) : (c & 0x07u);
        for (size_t i = 1; i < n; i++)
            cp = (cp << 6) | (ck->t[p + i] & 0x3Fu);
        return fail_at(ck, p,
                       "unexpected character U+%04lX (expected %s; JSON whitespace is "
                       "only space, tab, LF and CR)",
                       cp, expected);
    }
    if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')) {
        size_t e = p;
        while (e < ck->len && e - p < 24 &&
               ((ck->t[e] >= 'a' && ck->t[e] <= 'z') || (ck->t[e] >= 'A' && ck->t[e] <= 'Z') ||
                (ck->t[e] >= '0' && ck->t[e] <= '9') || ck->t[e] == '_'))
            e++;
        return fail_at(ck, p,
                       "unexpected word '%.*s' (expected %s; the only JSON words are "
                       "true, false and null, and strings need double quotes)",
                       (int)(e - p), (const char *)ck->t + p, expected);
    }
    return fail_at(ck, p, "unexpected '%c' (expected %s)", c, expected);
}

static int is_digit(const checker *ck, size_t p)
{
    return p < ck->len && ck->t[p] >= '0' && ck->t[p] <= '9';
}

/* The number's text for messages: the run of number characters at off. */
static int num_text_len(const checker *ck, size_t off)
{
    size_t e = off;
    while (e < ck->len && e - off < 32 &&
           ((ck->t[e] >= '0' && ck->t[e] <= '9') || ck->t[e] == '.' || ck->t[e] == 'e' ||
            ck->t[e] == 'E' || ck->t[e] == '+' || ck->t[e] == '-'))
        e++;
    return (int)(e - off);
}

static int number(checker *ck)
{
    size_t start = ck->pos;
    const char *txt = (const char *)ck->t + start;
    if (ck->t[ck->pos] == '-')
        ck->pos++;
    if (!is_digit(ck, ck->pos))
        return fail_at(ck, start, "number '%.*s' has no digits after '-'", num_text_len(ck, start),
                       txt);
    if (ck->t[ck->pos] == '0' && is_digit(ck, ck->pos + 1))
        return fail_at(ck, start, "number '%.*s' has a leading zero (JSON allows none)",
                       num_text_len(ck, start), txt);
    while (is_digit(ck, ck->pos))
        ck->pos++;
    if (ck->pos < ck->len && ck->t[ck->pos] == '.') {
        ck->pos++;
        if (!is_digit(ck, ck->pos))
            return fail_at(ck, start, "number '%.*s' has no digits after '.'",
                           num_text_len(ck, start), txt);
        while (is_digit(ck, ck->pos))
            ck->pos++;
    }
    if (ck->pos < ck->len && (ck->t[ck->pos] == 'e' || ck->t[ck->pos] == 'E')) {
        ck->pos++;
        if (ck->pos < ck->len && (ck->t[ck->pos] == '+' || ck->t[ck->pos] == '-'))
            ck->pos++;
        if (!is_digit(ck, ck->pos))
            return fail_at(ck, start, "number '%.*s' has an exponent without digits",
                           num_text_len(ck, start), txt);
        while (is_digit(ck, ck->pos))
            ck->pos++;
    }
    return SG_OK;
}

static int literal(checker *ck, const char *word, const char *expected)
{
    size_t n = strlen(word);
    if (ck->len - ck->pos < n || memcmp(ck->t + ck->pos, word, n) != 0)
        return unexpected(ck, expected);
    ck->pos += n;
    return SG_OK;
}

static int key_append(checker *ck, const void *bytes, size_t n)
{
    if (ck->keys_len + n + 1 > ck->keys_cap) {
        size_t cap = ck->keys_cap ? ck->keys_cap : 256;
        while (cap < ck->keys_len + n + 1)
            cap *= 2;
        char *k = realloc(ck->keys, cap);
        if (!k)
            return sg_error_set(ck->err, SG_ENOMEM, "%s: out of memory checking JSON", ck->origin);
        ck->keys = k;
        ck->keys_cap = cap;
    }
    memcpy(ck->keys + ck->keys_len, bytes, n);
    ck->keys_len += n;
    return SG_OK;
}

static int hex4(const checker *ck, size_t p, unsigned *out)
{
    if (p > ck->len || ck->len - p < 4)
        return -1;
    unsigned v = 0;
    for (size_t i = p; i < p + 4; i++) {
        unsigned char c = ck->t[i];
        unsigned d;
        if (c >= '0' && c <= '9')
            d = c - '0';
        else if (c >= 'a' && c <= 'f')
            d = c - 'a' + 10;
        else if (c >= 'A' && c <= 'F')
            d = c - 'A' + 10;
        else
            return -1;
        v = v * 16 + d;
    }
    *out = v;
    return 0;
}

/* A string at pos (its opening quote); record: decode it onto ck->keys. */
static int string(checker *ck, int record)
{
    size_t start = ck->pos++;
    int rc;
    for (;;) {
        if (ck->pos >= ck->len)
            return fail_at(ck, start, "string never ends (no closing '\"')");
        unsigned char c = ck->t[ck->pos];
        if (c == '"') {
            ck->pos++;
            return record ? key_append(ck, "", 1) : SG_OK;
        }
        if (c < 0x20) {
            if (c == '\n' || c == '\r')
                return fail_at(ck, ck->pos,
                               "line break inside a string (a string ends on its "
                               "line; write \\n for a newline)");
            const char *esc = c == '\t' ? "\\t" : c == '\b' ? "\\b" : c == '\f' ? "\\f" : NULL;
            if (esc)
                return fail_at(ck, ck->pos,
                               "raw control character 0x%02X inside a string (write "
                               "it as %s)",
                               c, esc);
            return fail_at(ck, ck->pos,
                           "raw control character 0x%02X inside a string (write it "
                           "as \\u%04X)",
                           c, c);
        }
        if (c >= 0x80) {
            const char *why;
            size_t n = utf8_seq(ck->t + ck->pos, ck->len - ck->pos, &why);
            if (!n)
                return bad_utf8(ck, ck->pos);
            if (record && (rc = key_append(ck, ck->t + ck->pos, n)) < 0)
                return rc;
            ck->pos += n;
            continue;
        }
        if (c != '\\') {
            if (record && (rc = key_append(ck, &c, 1)) < 0)
                return rc;
            ck->pos++;
            continue;
        }
        size_t esc = ck->pos;
        if (esc + 1 >= ck->len)
            return fail_at(ck, start, "string never ends (no closing '\"')");
        unsigned char e = ck->t[esc + 1];
        const char *simple = strchr("\"\\/bfnrt", e);
        if (e && simple) {
            static const char dec[] = "\"\\/\b\f\n\r\t";
            if (record && (rc = key_append(ck, &dec[simple - "\"\\/bfnrt"], 1)) < 0)
                return rc;
            ck->pos += 2;
            continue;
        }
        if (e != 'u') {
            if (e > 0x20 && e < 0x7F)
                return fail_at(ck, esc,
                               "invalid escape '\\%c' (JSON has \\\" \\\\ \\/ \\b \\f "
                               "\\n \\r \\t and \\u followed by 4 hex digits)",
                               e);
            return fail_at(ck, esc, "invalid escape: '\\' followed by byte 0x%02X", e);
        }
        unsigned cp;
        if (hex4(ck, esc + 2, &cp)) {
            char near[16];
            return fail_at(
                ck, esc, "invalid escape '\\u%s' (\\u needs 4 hex digits)",
                snippet(ck->t + esc + 2, ck->len - esc - 2, 4, SNIP_ASCII, near, sizeof near));
        }
        ck->pos = esc + 6;
        if (cp == 0)
            return fail_at(ck, esc,
                           "\\u0000 (NUL) inside a string: C strings cannot hold it, "
                           "so the text after it would be lost");
        if (cp >= 0xDC00 && cp <= 0xDFFF)
            return fail_at(ck, esc,
                           "unpaired surrogate \\u%04X (a low surrogate must follow "
                           "a high one, \\uD800-\\uDBFF)",
                           cp);
        if (cp >= 0xD800 && cp <= 0xDBFF) {
            unsigned lo;
            if (ck->pos + 1 >= ck->len || ck->t[ck->pos] != '\\' || ck->t[ck->pos + 1] != 'u' ||
                hex4(ck, ck->pos + 2, &lo) || lo < 0xDC00 || lo > 0xDFFF)
                return fail_at(ck, esc,
                               "unpaired surrogate \\u%04X (a high surrogate must be "
                               "followed by a low one, \\uDC00-\\uDFFF)",
                               cp);
            cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
            ck->pos += 6;
        }
        if (record) {
            unsigned char u[4];
            size_t n;
            if (cp < 0x80) {
                u[0] = (unsigned char)cp, n = 1;
            } else if (cp < 0x800) {
                u[0] = (unsigned char)(0xC0 | (cp >> 6)),
                u[1] = (unsigned char)(0x80 | (cp & 0x3F));
                n = 2;
            } else if (cp < 0x10000) {
                u[0] = (unsigned char)(0xE0 | (cp >> 12));
                u[1] = (unsigned char)(0x80 | ((cp >> 6) & 0x3F));
                u[2] = (unsigned char)(0x80 | (cp & 0x3F));
                n = 3;
            } else {
                u[0] = (unsigned char)(0xF0 | (cp >> 18));
                u[1] = (unsigned char)(0x80 | ((cp >> 12) & 0x3F));
                u[2] = (unsigned char)(0x80 | ((cp >> 6) & 0x3F));
                u[3] = (unsigned char)(0x80 | (cp & 0x3F));
                n = 4;
            }
            if ((rc = key_append(ck, u, n)) < 0)
                return rc;
        }
    }
}

/* ---- values ----------------------------------------------------------- */

static int value(checker *ck, int depth);

static int cmp_key(const void *a, const void *b)
{
    const key_ent *x = a, *y = b;
    size_t n = x->len < y->len ? x->len : y->len;
    int c = memcmp(x->s, y->s, n);
    if (c)
        return c;
    return (x->len > y->len) - (x->len < y->len);
}

/* Keys ents[first..nents) belong to one object: refuse a repeated one,
 * naming its second occurrence (the earliest such in the text). */
static int check_dups(checker *ck, size_t first)
{
    key_ent *e = ck->ents + first;
    size_t n = ck->nents - first;
    if (n < 2)
        return SG_OK;
    for (size_t i = 0; i < n; i++)
        e[i].s = ck->keys + e[i].str_off;
    qsort(e, n, sizeof *e, cmp_key);
    size_t best = (size_t)-1, first_of_best = 0;
    for (size_t i = 0; i < n;) {
        size_t j = i + 1;
        size_t lo = e[i].src_off, lo2 = (size_t)-1;
        while (j < n && cmp_key(&e[i], &e[j]) == 0) {
            size_t o = e[j].src_off;
            if (o < lo) {
                lo2 = lo;
                lo = o;
            } else if (o < lo2) {
                lo2 = o;
            }
            j++;
        }
        if (lo2 != (size_t)-1 && lo2 < best) {
            best = lo2;
            first_of_best = lo;
        }
        i = j;
    }
    if (best == (size_t)-1)
        return SG_OK;
    char name[96] = "";
    for (size_t i = 0; i < n; i++)
        if (e[i].src_off == best)
            snippet((const unsigned char *)e[i].s, e[i].len, 80, SNIP_DOTS, name, sizeof name);
    int line, col;
    line_col(ck, first_of_best, &line, &col);
    return fail_at(ck, best,
                   "duplicate key \"%s\" (first at line %d, column %d; an object "
                   "holds each key once)",
                   name, line, col);
}

static int object(checker *ck, int depth)
{
    if (depth > SG_JSON_MAX_DEPTH)
        return fail_at(ck, ck->pos, "nesting deeper than %d levels", SG_JSON_MAX_DEPTH);
    size_t first = ck->nents, keys_mark = ck->keys_len;
    int dups = !(ck->flags & SG_JSON_DUP_KEYS_OK);
    int rc;
    ck->pos++;
    skip_ws(ck);
    if (ck->pos < ck->len && ck->t[ck->pos] == '}') {
        ck->pos++;
        return SG_OK;
    }
    for (;;) {
        skip_ws(ck);
        if (ck->pos >= ck->len || ck->t[ck->pos] != '"') {
            if (ck->pos < ck->len && ck->t[ck->pos] == '}')
                return fail_at(ck, ck->pos, "trailing comma before '}'");
            return unexpected(ck, "a key in double quotes");
        }
        if (dups) {
            if (ck->nents == ck->ents_cap) {
                size_t cap = ck->ents_cap ? ck->ents_cap * 2 : 32;
                key_ent *ne = realloc(ck->ents, cap * sizeof *ne);
                if (!ne)
                    return sg_error_set(ck->err, SG_ENOMEM, "%s: out of memory checking JSON",
                                        ck->origin);
                ck->ents = ne;
                ck->ents_cap = cap;
            }
            key_ent *k = &ck->ents[ck->nents++];
            k->str_off = ck->keys_len;
            k->src_off = ck->pos;
            if ((rc = string(ck, 1)) < 0)
                return rc;
            k = &ck->ents[ck->nents - 1];
            k->len = ck->keys_len - k->str_off - 1;
        } else if ((rc = string(ck, 0)) < 0) {
            return rc;
        }
        skip_ws(ck);
        if (ck->pos >= ck->len || ck->t[ck->pos] != ':')
            return unexpected(ck, "':' after the key");
        ck->pos++;
        if ((rc = value(ck, depth)) < 0)
            return rc;
        skip_ws(ck);
        if (ck->pos < ck->len && ck->t[ck->pos] == ',') {
            ck->pos++;
            continue;
        }
        if (ck->pos < ck->len && ck->t[ck->pos] == '}') {
            ck->pos++;
            break;
        }
        return unexpected(ck, "',' or '}'");
    }
    if (dups && (rc = check_dups(ck, first)) < 0)
        return rc;
    ck->nents = first;
    ck->keys_len = keys_mark;
    return SG_OK;
}

static int array(checker *ck, int depth)
{
    if (depth > SG_JSON_MAX_DEPTH)
        return fail_at(ck, ck->pos, "nesting deeper than %d levels", SG_JSON_MAX_DEPTH);
    int rc;
    ck->pos++;
    skip_ws(ck);
    if (ck->pos < ck->len && ck->t[ck->pos] == ']') {
        ck->pos++;
        return SG_OK;
    }
    for (;;) {
        skip_ws(ck);
        if (ck->pos < ck->len && ck->t[ck->pos] == ']')
            return fail_at(ck, ck->pos, "trailing comma before ']'");
        if ((rc = value(ck, depth)) < 0)
            return rc;
        skip_ws(ck);
        if (ck->pos < ck->len && ck->t[ck->pos] == ',') {
            ck->pos++;
            continue;
        }
        if (ck->pos < ck->len && ck->t[ck->pos] == ']') {
            ck->pos++;
            return SG_OK;
        }
        return unexpected(ck, "',' or ']'");
    }
}

static int value(checker *ck, int depth)
{
    skip_ws(ck);
    if (ck->pos >= ck->len)
        return unexpected(ck, "a value");
    unsigned char c = ck->t[ck->pos];
    switch (c) {
    case '{': return object(ck, depth + 1);
    case '[': return array(ck, depth + 1);
    case '"': return string(ck, 0);
    case 't': return literal(ck, "true", "a value");
    case 'f': return literal(ck, "false", "a value");
    case 'n': return literal(ck, "null", "a value");
    case '-': return number(ck);
    case '+':
        return fail_at(ck, ck->pos,
                       "number '%.*s' starts with '+' (JSON numbers have no '+' "
                       "sign)",
                       num_text_len(ck, ck->pos), (const char *)ck->t + ck->pos);
    case '.':
        return fail_at(ck, ck->pos, "number '%.*s' has no digits before '.'",
                       num_text_len(ck, ck->pos), (const char *)ck->t + ck->pos);
    default:
        if (c >= '0' && c <= '9')
            return number(ck);
        return unexpected(ck, "a value");
    }
}

int sg_json_check_strict(const char *text, size_t len, unsigned flags, const char *origin,
                         sg_error *err)
{
    checker ck = {.t = (const unsigned char *)text,
                  .len = len,
                  .flags = flags,
                  .origin = origin ? origin : "(JSON)",
                  .err = err};
    if (len >= 3 && memcmp(text, "\xEF\xBB\xBF", 3) == 0) /* UTF-8 BOM */
        ck.pos = ck.line_start_at = 3;
    int rc = value(&ck, 0);
    if (rc == 0) {
        skip_ws(&ck);
        if (ck.pos < ck.len) {
            unsigned char c = ck.t[ck.pos];
            if (c < 0x20 || c >= 0x7F) {
                rc = unexpected(&ck, "nothing after the JSON value");
            } else {
                char near[32];
                rc = fail_at(&ck, ck.pos, "text after the end of the JSON value (near '%s')",
                             snippet(ck.t + ck.pos, ck.len - ck.pos, 20, SNIP_ASCII | SNIP_DOTS,
                                     near, sizeof near));
            }
        }
    }
    free(ck.keys);
    free(ck.ents);
    return rc;
}
