/* config_override.c - dotted KEY=VALUE assignments on a JSON object (config_override.h). */
#include "runtime/config/config_override.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/json_strict.h"

static int starts_with(const char *s, const char *prefix)
{
    return strncmp(s, prefix, strlen(prefix)) == 0;
}

/* 1 if VALUE is JSON text (it starts like a number, an array, an object or a
 * quoted string, or is true, false or null), 0 if it is a bare string;
 * JSON text must pass the strict check (01, 2. or "a\u0000b" are refused,
 * not read as 1, 2 or "a"), a bare string must be valid UTF-8. */
static int value_is_json(const char *text, const char *assignment, sg_error *err)
{
    char origin[300];
    snprintf(origin, sizeof origin, "--set %.200s%s", assignment,
             strlen(assignment) > 200 ? "..." : "");
    const char *p = text;
    while (*p == ' ' || *p == '\t')
        p++;
    size_t n = strlen(text);
    int json = strchr("{[\"-0123456789", *p) && *p;
    if (!json) {
        size_t e = n;
        while (e > 0 && (text[e - 1] == ' ' || text[e - 1] == '\t'))
            e--;
        size_t w = e - (size_t)(p - text);
        json = (w == 4 && !strncmp(p, "true", 4)) || (w == 5 && !strncmp(p, "false", 5)) ||
               (w == 4 && !strncmp(p, "null", 4));
    }
    if (json) {
        int rc = sg_json_check_strict(text, n, 0, origin, err);
        if (rc == SG_EINVAL && err && (*p == '-' || (*p >= '0' && *p <= '9'))) {
            size_t m = strlen(err->msg);
            snprintf(err->msg + m, sizeof err->msg - m,
                     " (a string value that starts like a number needs JSON quotes: "
                     "KEY='\"...\"')");
        }
        return rc ? rc : 1;
    }
    size_t bad;
    if (sg_utf8_check(text, n, &bad))
        return sg_error_set(err, SG_EINVAL, "%s: invalid UTF-8 at byte %zu of the value", origin,
                            bad + 1);
    return 0;
}

int sg_json_set_dotted(cJSON *obj, const char *assignment, sg_error *err)
{
    const char *eq = strchr(assignment, '=');
    if (!eq || eq == assignment)
        return sg_error_set(err, SG_EINVAL, "--set %s: expected KEY=VALUE", assignment);
    char key[256];
    if ((size_t)(eq - assignment) >= sizeof key)
        return sg_error_set(err, SG_EINVAL, "--set %s: key too long", assignment);
    if (starts_with(assignment, "offload_optimizer.") || starts_with(assignment, "offload_param."))
        snprintf(key, sizeof key, "zero_optimization.%.*s", (int)(eq - assignment), assignment);
    else
        snprintf(key, sizeof key, "%.*s", (int)(eq - assignment), assignment);
    const char *text = eq + 1;
    int rc = value_is_json(text, assignment, err);
    if (rc < 0)
        return rc;
    cJSON *value = rc ? cJSON_Parse(text) : cJSON_CreateString(text);
    if (!value)
        return sg_error_set(err, SG_ENOMEM, "out of memory");
    cJSON *at = obj;
    char *part = key, *dot;
    while ((dot = strchr(part, '.'))) {
        *dot = '\0';
        if (!*part) {
            cJSON_Delete(value);
            return sg_error_set(err, SG_EINVAL, "--set %s: empty key segment", assignment);
        }
        cJSON *next = cJSON_GetObjectItemCaseSensitive(at, part);
        if (!next) {
            next = cJSON_AddObjectToObject(at, part);
        } else if (!cJSON_IsObject(next)) {
            cJSON_Delete(value);
            return sg_error_set(err, SG_EINVAL, "--set %s: \"%s\" is not an object in the config",
                                assignment, part);
        }
        if (!next) {
            cJSON_Delete(value);
            return sg_error_set(err, SG_ENOMEM, "out of memory");
        }
        at = next;
        part = dot + 1;
    }
    if (!*part) {
        cJSON_Delete(value);
        return sg_error_set(err, SG_EINVAL, "--set %s: empty key", assignment);
    }
    if (cJSON_GetObjectItemCaseSensitive(at, part))
        cJSON_ReplaceItemInObjectCaseSensitive(at, part, value);
    else
        cJSON_AddItemToObject(at, part, value);
    return SG_OK;
}
