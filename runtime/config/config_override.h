/* config_override.h - "--set KEY=VALUE" on a DeepSpeed config: KEY is a
 * dotted path into the JSON ("zero_optimization.offload_optimizer.ratio",
 * or "offload_optimizer.ratio" for short, see below), VALUE is JSON (a
 * number, true/false, an object...) or else taken as a string. */
#ifndef SG_CONFIG_OVERRIDE_H
#define SG_CONFIG_OVERRIDE_H

#include <cjson/cJSON.h>

#include "common/error.h"

/* Sets one assignment in obj, creating the objects on the path. A path that
 * starts with "offload_optimizer." or "offload_param." and is not found at
 * the top level means the one under "zero_optimization" (where DeepSpeed
 * reads it). Errors name the assignment. */
int sg_json_set_dotted(cJSON *obj, const char *assignment, sg_error *err);

#endif /* SG_CONFIG_OVERRIDE_H */
