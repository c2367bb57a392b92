/* json_strict.h - a strict RFC 8259 check of JSON text, run before cJSON.
 *
 * cJSON is lenient: it reads 01 as 1 and 2. as 2, stops a string at an
 * escaped NUL, takes \uZZZZ for an empty code point, accepts any byte below
 * 0x20 as whitespace and any byte sequence as UTF-8, and keeps both copies of
 * a duplicated key. Every JSON text stepgraph reads (run and DeepSpeed
 * configs, machines, models, safetensors headers, --set values) passes this
 * check first, so what cJSON then builds is exactly what the text says.
 *
 * Refused, each with "origin: invalid JSON at line L, column C: what":
 * leading zeros, '.' or an exponent without digits, invalid escapes (\u
 * without 4 hex digits, unpaired surrogates), \u0000 (C strings cannot hold
 * it), raw control characters in strings, whitespace other than space, tab,
 * LF and CR, invalid UTF-8 (overlong forms, encoded surrogates, code points
 * above U+10FFFF, truncated sequences), nesting deeper than
 * SG_JSON_MAX_DEPTH, duplicate keys in one object, and anything after the
 * value. A leading UTF-8 BOM is skipped. Columns count characters from 1.
 */
#ifndef SG_JSON_STRICT_H
#define SG_JSON_STRICT_H

#include <stddef.h>

#include "common/error.h"

/* Arrays and objects nest at most this deep (the top level is level 1). */
#define SG_JSON_MAX_DEPTH 64

/* Flags of sg_json_check_strict. */
enum {
    /* Leave duplicate keys to the caller (safetensors headers name the
     * duplicated tensor in their own words). */
    SG_JSON_DUP_KEYS_OK = 1,
};

/* 0 if text[0..len) is one valid JSON value (surrounded by whitespace,
 * optionally after a UTF-8 BOM), else SG_EINVAL (SG_ENOMEM when out of
 * memory) with a message that starts with origin. */
int sg_json_check_strict(const char *text, size_t len, unsigned flags, const char *origin,
                         sg_error *err);

/* 0 if s[0..len) is valid UTF-8 (no overlong forms, no surrogates, nothing
 * above U+10FFFF), else -1 with *bad_off the offset of the first bad
 * sequence. */
int sg_utf8_check(const char *s, size_t len, size_t *bad_off);

#endif /* SG_JSON_STRICT_H */
