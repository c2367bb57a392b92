/* json_util.h - typed cJSON getters whose errors name the JSON path.
 *
 * Private to the config and model loaders (not an installed header). Every
 * message starts with "origin: prefix+path: ", e.g.
 *   "run.json: deepspeed_config.zero_optimization.stage: 4 is out of range
 *    (expected 0, 1, 2 or 3)"
 * where origin is the file name and prefix locates an inline object.
 */
#ifndef SG_JSON_UTIL_H
#define SG_JSON_UTIL_H

#include <stddef.h>
#include <stdint.h>

#include <cjson/cJSON.h>

#include "common/error.h"
#include "common/json_strict.h"
#include "common/warnings.h"

/* Config files larger than this are refused before parsing. */
#define SG_JSON_MAX_FILE (16u << 20)

typedef struct sg_json_ctx {
    const char *origin;       /* file name, first word of every message */
    const char *prefix;       /* "" or e.g. "deepspeed_config." */
    sg_config_warnings *warn; /* may be NULL: warnings dropped */
    sg_error *err;
} sg_json_ctx;

/* Range flags for sg_json_int / sg_json_num. */
enum {
    SG_JSON_LO = 1,      /* has a lower bound */
    SG_JSON_HI = 2,      /* has an upper bound */
    SG_JSON_LO_OPEN = 4, /* lower bound excluded */
    SG_JSON_HI_OPEN = 8, /* upper bound excluded */
};

/* Reads a whole file (at most SG_JSON_MAX_FILE bytes) into a NUL-terminated
 * malloc'ed buffer. Missing file: SG_ENOENT; unreadable or not a regular
 * file: SG_EIO; too large: SG_EINVAL. */
int sg_json_read_file(const char *path, char **text, size_t *len, sg_error *err);

/* Parses text after the strict RFC 8259 check of json_strict.h (no leading
 * zeros, bad escapes, \u0000, bad UTF-8, control bytes, repeated keys,
 * nesting deeper than SG_JSON_MAX_DEPTH...); on an error the message gives
 * line and column and says what is wrong. An empty (whitespace-only) text is
 * an error of its own. A leading UTF-8 BOM is skipped. */
int sg_json_parse(const char *text, size_t len, const char *origin, cJSON **root, sg_error *err);
/* The same with sg_json_check_strict flags (SG_JSON_DUP_KEYS_OK). */
int sg_json_parse_flags(const char *text, size_t len, const char *origin, unsigned flags,
                        cJSON **root, sg_error *err);

/* Reads and parses a file that must hold a JSON object (errors name it). */
int sg_json_load_object(const char *path, cJSON **root, sg_error *err);

/* The directory of `file` joined with rel, unless rel is absolute: how a
 * path written in a JSON file is read. Returns 0, or -1 if out is too small. */
int sg_path_beside(const char *file, const char *rel, char *out, size_t size);

/* 1 if s is a non-empty run of letters, digits, '-', '_' and '.' (host and
 * machine names that become file names). */
int sg_is_simple_name(const char *s);

/* Short human form of a JSON value: 4096, 1.5, "cpu", true, [0.9, 0.999],
 * an object. */
void sg_json_repr(const cJSON *item, char *buf, size_t size);

/* "a number", "a string", "an array"... for messages. */
const char *sg_json_kind(const cJSON *item);

/* Integer field: accepts a JSON number that is integral (4e8 is fine, 1.5
 * is not) and within [lo, hi] per flags. name is the key used in the range
 * text; expect, when not NULL, replaces the generated "(expected ...)". */
int sg_json_int(const sg_json_ctx *c, const cJSON *item, const char *path, const char *name,
                unsigned flags, double lo, double hi, const char *expect, int64_t *out);

int sg_json_num(const sg_json_ctx *c, const cJSON *item, const char *path, const char *name,
                unsigned flags, double lo, double hi, const char *expect, double *out);

/* JSON true/false only ("true" strings and 0/1 are errors). */
int sg_json_bool(const sg_json_ctx *c, const cJSON *item, const char *path, int *out);

/* JSON string that fits in size bytes (with its NUL). */
int sg_json_str(const sg_json_ctx *c, const cJSON *item, const char *path, char *buf, size_t size);

/* "expected lo <= name <= hi" (or the one-sided form) for range errors. */
void sg_json_range_desc(char *buf, size_t size, const char *name, unsigned flags, double lo,
                        double hi);
int sg_json_in_range(double v, unsigned flags, double lo, double hi);

/* Number as the messages print it: 400000000, 1.5, 1e-05. */
void sg_json_fmt_num(double v, char *buf, size_t size);

/* Type error: "path: expected WHAT, got VALUE". */
int sg_json_type_error(const sg_json_ctx *c, const cJSON *item, const char *path, const char *what);

/* Error with the standard "origin: prefix" head. */
int sg_json_error(const sg_json_ctx *c, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Appends "origin: message" to the warning list (keeps the first
 * SG_MAX_WARNINGS - 1 and then one line saying more were dropped). */
void sg_json_warn(const sg_json_ctx *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Appends a warning with no origin processing (already formatted). */
void sg_config_warnings_add(sg_config_warnings *w, const char *msg);

/* A warning's text made an error's: " ignored" (as in "unknown key K
 * ignored") dropped, since the error stops there. Writes into buf. */
const char *sg_warning_as_error(const char *warning, char *buf, size_t size);

/* The candidate closest to key (case-insensitive edit distance <= 2, or a
 * case-only difference), or NULL. */
const char *sg_json_suggest(const char *key, const char *const *cands, size_t n);

/* The same over a list of names separated by ", " (as error messages list
 * them): writes " (did you mean NAME?)" into out when one is close enough,
 * else an empty string; returns out. */
const char *sg_suggest_in_list(const char *key, const char *list, char *out, size_t size);

/* The names of the *.json files in dir, without the extension, sorted and
 * separated by ", " (an empty string when none, or dir cannot be read). */
void sg_json_list_dir(const char *dir, char *buf, size_t size);

#endif /* SG_JSON_UTIL_H */
