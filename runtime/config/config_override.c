/* config_override.c - dotted KEY=VALUE assignments on a JSON object (config_override.h). */
#include "runtime/config/config_override.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int starts_with(const char *s, const char *prefix)
{
    return strncmp(s, prefix, strlen(prefix)) == 0;
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
    cJSON *value = cJSON_Parse(text);
    if (!value)
        value = cJSON_CreateString(text);
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
