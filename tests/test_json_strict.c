/* test_json_strict.c - the strict RFC 8259 check (common/json_strict.c) and
 * sg_json_parse on top of it.
 *
 * Valid edge cases still parse to the right values (exponents, -0, escapes,
 * surrogate pairs, raw UTF-8, empty containers, a BOM); each class of
 * invalid text is refused with line, column and what is wrong; the nesting
 * limit; duplicate keys (also spelt with escapes); sg_utf8_check.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/json_util.h"
#include "tests/tap.h"

static int check(const char *text)
{
    sg_error err = {0};
    int rc = sg_json_check_strict(text, strlen(text), 0, "t.json", &err);
    if (rc)
        tap_diag("  %s", err.msg);
    return rc;
}

static void test_valid(void)
{
    static const char *const good[] = {
        "{}",
        "[]",
        "[[], {}, [[]], {\"a\": {}}]",
        "0",
        "-0",
        "-0.0",
        "1e5",
        "1E+5",
        "1.5e-3",
        "123456789012345678901234567890",
        "1e400",
        "\"\"",
        "true",
        "false",
        "null",
        " \t\r\n{ \"a\" : [ 1 , 2 ] }\r\n",
        "\"\\\" \\\\ \\/ \\b \\f \\n \\r \\t\"",
        "\"caf\\u00e9 \\u00E9\"",
        "\"\\ud83d\\ude00\"",
        "\"caf\xc3\xa9 \xf0\x9f\x98\x80 \xef\xbf\xbf \xf4\x8f\xbf\xbf\"",
        "\"\x7f\"",
        "{\"a\": {\"a\": 1}, \"b\": {\"a\": 2}}",
        "{\"a\": 1, \"A\": 2, \"a \": 3}",
        "\xef\xbb\xbf{\"bom\": true}",
    };
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
        char shown[128];
        size_t k = 0;
        for (const char *p = good[i]; *p && k + 4 < sizeof shown; p++)
            if (*p == '\n' || *p == '\r' || *p == '\t')
                k += (size_t)snprintf(shown + k, sizeof shown - k, "\\%c",
                                      *p == '\n'   ? 'n'
                                      : *p == '\r' ? 'r'
                                                   : 't');
            else
                shown[k++] = *p;
        shown[k] = '\0';
        ok(check(good[i]) == 0, "valid: %s", shown);
    }

    /* and sg_json_parse reads them as written */
    sg_error err = {0};
    cJSON *j = NULL;
    const char *t =
        "[1e5, 1E+5, 1.5e-3, -0, -0.0, 0.5, \"caf\\u00e9\", \"\\ud83d\\ude00\", [], {}]";
    int rc = sg_json_parse(t, strlen(t), "t.json", &j, &err);
    if (!ok(rc == 0 && cJSON_GetArraySize(j) == 10, "a valid array parses"))
        tap_diag("  %s", err.msg);
    if (rc == 0) {
        ok(cJSON_GetArrayItem(j, 0)->valuedouble == 1e5 &&
               cJSON_GetArrayItem(j, 1)->valuedouble == 1e5 &&
               cJSON_GetArrayItem(j, 2)->valuedouble == 1.5e-3,
           "exponents: 1e5, 1E+5, 1.5e-3");
        ok(cJSON_GetArrayItem(j, 3)->valuedouble == 0 &&
               signbit(cJSON_GetArrayItem(j, 4)->valuedouble),
           "negative zero is zero (with its sign)");
        is_str(cJSON_GetArrayItem(j, 6)->valuestring, "caf\xc3\xa9", "\\u00e9 decodes to UTF-8");
        is_str(cJSON_GetArrayItem(j, 7)->valuestring, "\xf0\x9f\x98\x80",
               "a surrogate pair decodes to one 4-byte character");
        ok(cJSON_IsArray(cJSON_GetArrayItem(j, 8)) && cJSON_IsObject(cJSON_GetArrayItem(j, 9)),
           "empty array and object");
    }
    cJSON_Delete(j);
    j = NULL;
    t = "\xef\xbb\xbf{\"a\": 1}";
    rc = sg_json_parse(t, strlen(t), "bom.json", &j, &err);
    ok(rc == 0 && cJSON_GetObjectItem(j, "a"), "a leading UTF-8 BOM is skipped");
    cJSON_Delete(j);
}

typedef struct bad_case {
    const char *text;
    const char *want; /* substring of the message (after "t.json: ") */
} bad_case;

static void test_invalid(void)
{
    static const bad_case bad[] = {
        {"{\"a\": 01}", "line 1, column 7: number '01' has a leading zero"},
        {"{\"a\": -00.5}", "line 1, column 7: number '-00.5' has a leading zero"},
        {"{\"a\": 2.}", "line 1, column 7: number '2.' has no digits after '.'"},
        {"{\"a\": 2.e3}", "line 1, column 7: number '2.e3' has no digits after '.'"},
        {"{\"a\": .5}", "line 1, column 7: number '.5' has no digits before '.'"},
        {"{\"a\": 1e}", "line 1, column 7: number '1e' has an exponent without digits"},
        {"{\"a\": 1E-}", "line 1, column 7: number '1E-' has an exponent without digits"},
        {"{\"a\": -}", "line 1, column 7: number '-' has no digits after '-'"},
        {"{\"a\": +1}", "line 1, column 7: number '+1' starts with '+'"},
        {"{\"a\": NaN}", "line 1, column 7: unexpected word 'NaN'"},
        {"{\"a\": tru}", "line 1, column 7: unexpected word 'tru'"},
        {"{\"wall_c\\uZZZZlock_breakdown\": true}", "line 1, column 9: invalid escape '\\uZZZZ'"},
        {"[\"\\u12\"]", "line 1, column 3: invalid escape '\\u12\"]'"},
        {"[\"\\x41\"]", "line 1, column 3: invalid escape '\\x'"},
        {"[\"\\'\"]", "line 1, column 3: invalid escape '\\''"},
        {"[\"a\\ud800\"]", "line 1, column 4: unpaired surrogate \\uD800 (a high surrogate"},
        {"[\"\\ud800\\u0041\"]", "line 1, column 3: unpaired surrogate \\uD800"},
        {"[\"\\udc00\"]", "line 1, column 3: unpaired surrogate \\uDC00 (a low surrogate"},
        {"{\"optimizer\": \"AdamW\\u0000junk\"}",
         "line 1, column 21: \\u0000 (NUL) inside a string: C strings cannot hold it"},
        {"{\"ab\\u0000cd\": 1}", "line 1, column 5: \\u0000 (NUL) inside a string"},
        {"[\"a\tb\"]", "line 1, column 4: raw control character 0x09 inside a string (write it "
                       "as \\t)"},
        {"[\"a\x01\"]", "line 1, column 4: raw control character 0x01 inside a string"},
        {"[\"a\nb\"]", "line 1, column 4: line break inside a string"},
        {"{\x0c\"a\": 1}", "line 1, column 2: control character 0x0C"},
        {"{\"a\":\x0b 1}", "line 1, column 6: control character 0x0B"},
        {"[1,\xc2\xa0 2]", "line 1, column 4: unexpected character U+00A0"},
        {"[\"\xc0\xaf\"]", "line 1, column 3: invalid UTF-8 at byte 0xC0: an overlong encoding"},
        {"[\"\xe0\x80\xaf\"]", "line 1, column 3: invalid UTF-8 at byte 0xE0: an overlong "
                               "encoding"},
        {"[\"\xf0\x80\x80\xaf\"]", "line 1, column 3: invalid UTF-8 at byte 0xF0: an overlong"},
        {"[\"\xed\xa0\x80\"]", "line 1, column 3: invalid UTF-8 at byte 0xED: a UTF-16 "
                               "surrogate encoded in UTF-8"},
        {"[\"\xf4\x90\x80\x80\"]", "line 1, column 3: invalid UTF-8 at byte 0xF4: a code point "
                                   "above U+10FFFF"},
        {"[\"\xf8\x88\x80\x80\x80\"]", "line 1, column 3: invalid UTF-8 at byte 0xF8"},
        {"[\"ab\xe2\x82\"]", "line 1, column 5: invalid UTF-8 at byte 0xE2: a truncated"},
        {"[\"\xe2\x82", "line 1, column 3: invalid UTF-8 at byte 0xE2: a truncated"},
        {"[\"\x80\"]", "line 1, column 3: invalid UTF-8 at byte 0x80: a continuation byte"},
        {"[\"\xc3\xa9\", \xff]", "line 1, column 7: invalid UTF-8 at byte 0xFF"},
        {"{\"a\": 1, \"a\": 2}", "line 1, column 10: duplicate key \"a\" (first at line 1, "
                                 "column 2"},
        {"{\"a\": 1,\n \"b\": 2,\n \"\\u0061\": 3}",
         "line 3, column 2: duplicate key \"a\" (first at line 1, column 2"},
        {"{\"x\": {\"s\": 1, \"t\": 2, \"s\": 3, \"t\": 4}}",
         "line 1, column 24: duplicate key \"s\""},
        {"{\"a\\nb\": 1, \"a\\u000ab\": 2}", "line 1, column 13: duplicate key \"a?b\""},
        {"{\"k\": {\"0123456789012345678901234567890123456789012345678901234567890123456789"
         "0123456789\u00e9\": 1, \"0123456789012345678901234567890123456789012345678901234567890"
         "1234567890123456789\u00e9\": 2}}",
         "line 1, column 96: duplicate key "
         "\"01234567890123456789012345678901234567890123456789012345678901234567890"
         "123456789...\" (first at line 1, column 8"},
        {"{\"a\": 1} x", "line 1, column 10: text after the end of the JSON value"},
        {"{} \"abcdefghijklmnopqrstuvwxyz\"",
         "line 1, column 4: text after the end of the JSON value (near "
         "'\"abcdefghijklmnopqrs...')"},
        {"[\"\\u12\n4\"]", "line 1, column 3: invalid escape '\\u12' (\\u needs 4 hex digits)"},
        {"{\"a\": 1}{}", "line 1, column 9: text after the end of the JSON value"},
        {"[1, 2,]", "line 1, column 7: trailing comma before ']'"},
        {"{\"a\": 1,}", "line 1, column 9: trailing comma before '}'"},
        {"{a: 1}", "line 1, column 2: unexpected word 'a' (expected a key in double quotes"},
        {"{\"a\" 1}", "line 1, column 6: unexpected '1' (expected ':' after the key)"},
        {"[1 2]", "line 1, column 4: unexpected '2' (expected ',' or ']')"},
        {"{\"a\": [1, 2}", "line 1, column 12: unexpected '}' (expected ',' or ']')"},
        {"{\"a\": \"x", "line 1, column 7: string never ends"},
        {"{\"a\":", "line 1, column 6: unexpected end of text (expected a value)"},
        {"{\n  \"a\": 1,\n  \"b\": 007\n}", "line 3, column 8: number '007' has a leading zero"},
        {"{\"\xc3\xa9\xc3\xa9\": 1, \"x\": 01}", "line 1, column 16: number '01'"},
        {"\xef\xbb\xbf[01]", "line 1, column 2: number '01'"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        sg_error err = {0};
        cJSON *j = (cJSON *)1;
        int rc = sg_json_parse(bad[i].text, strlen(bad[i].text), "t.json", &j, &err);
        char want[600];
        snprintf(want, sizeof want, "t.json: invalid JSON at %s", bad[i].want);
        ok(rc == SG_EINVAL && j == NULL && strstr(err.msg, want),
           "refused with line and column: %s", bad[i].want);
        if (!strstr(err.msg, want))
            tap_diag("  got: %s", err.msg);
    }

    /* a NUL byte in the text itself */
    sg_error err = {0};
    ok(sg_json_check_strict("[1,\0 2]", 7, 0, "t.json", &err) == SG_EINVAL &&
           strstr(err.msg, "line 1, column 4: control character 0x00"),
       "a raw NUL byte is refused where it stands");
    /* duplicates may be left to the caller (safetensors names the tensor) */
    ok(sg_json_check_strict("{\"a\": 1, \"a\": 2}", 16, SG_JSON_DUP_KEYS_OK, "t", &err) == 0,
       "SG_JSON_DUP_KEYS_OK lets repeated keys through");
}

static char *nested(int depth, const char *open, const char *close)
{
    size_t lo = strlen(open), lc = strlen(close);
    char *s = malloc((size_t)depth * (lo + lc) + 1);
    char *p = s;
    for (int i = 0; i < depth; i++, p += lo)
        memcpy(p, open, lo);
    for (int i = 0; i < depth; i++, p += lc)
        memcpy(p, close, lc);
    *p = '\0';
    return s;
}

static void test_depth(void)
{
    sg_error err = {0};
    char *s = nested(SG_JSON_MAX_DEPTH, "[", "]");
    ok(sg_json_check_strict(s, strlen(s), 0, "t.json", &err) == 0, "%d nested arrays are fine",
       SG_JSON_MAX_DEPTH);
    free(s);
    s = nested(SG_JSON_MAX_DEPTH + 1, "[", "]");
    int rc = sg_json_check_strict(s, strlen(s), 0, "t.json", &err);
    ok(rc == SG_EINVAL && strstr(err.msg, "line 1, column 65: nesting deeper than 64 levels"),
       "%d levels: refused at the level too many", SG_JSON_MAX_DEPTH + 1);
    free(s);
    /* far deeper than cJSON's own limit (1000): the depth message, not a generic one */
    s = nested(5000, "[", "]");
    cJSON *j = NULL;
    rc = sg_json_parse(s, strlen(s), "deep.json", &j, &err);
    ok(rc == SG_EINVAL && !j &&
           strstr(err.msg, "deep.json: invalid JSON at line 1, column 65: nesting deeper than 64 "
                           "levels"),
       "5000 levels: the depth message");
    if (rc != SG_EINVAL)
        tap_diag("  %s", err.msg);
    free(s);
    s = nested(100, "{\"k\": ", "}");
    /* {"k": {"k": ... {"k": }}} is invalid at the bottom, but the depth is seen first */
    rc = sg_json_check_strict(s, strlen(s), 0, "t.json", &err);
    ok(rc == SG_EINVAL && strstr(err.msg, "nesting deeper than 64 levels"),
       "nested objects count the same");
    free(s);
}

static void test_utf8(void)
{
    size_t bad = 99;
    ok(sg_utf8_check("caf\xc3\xa9 \xf0\x9f\x98\x80", 10, &bad) == 0, "sg_utf8_check: valid text");
    ok(sg_utf8_check("ab\xc0\xaf", 4, &bad) == -1 && bad == 2,
       "sg_utf8_check: an overlong form at its offset");
    ok(sg_utf8_check("abc\xe2\x82", 5, &bad) == -1 && bad == 3,
       "sg_utf8_check: a truncated sequence at its offset");
}

int main(void)
{
    test_valid();
    test_invalid();
    test_depth();
    test_utf8();
    return tap_done();
}
