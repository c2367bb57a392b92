/* fuzz_ds_config.c - a DeepSpeed config from JSON text (sg_ds_config_parse),
 * then DeepSpeed's batch rule for a few data-parallel sizes. */
#include "tests/fuzz/fuzz_util.h"

#include "common/json_util.h"
#include "runtime/config/ds_config.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *text = fuzz_strdup(data, size);
    sg_ds_config ds;
    sg_config_warnings warn;
    memset(&warn, 0, sizeof warn);
    sg_error err = {0};
    if (sg_ds_config_parse(text, "fuzz.json", &ds, &warn, &err) == SG_OK) {
        const int64_t dps[] = {1, 3, 1024};
        for (int i = 0; i < 3; i++) {
            sg_ds_config d = ds;
            sg_ds_config_batch_rule(&d, dps[i], "fuzz.json", &err);
        }
    }
    free(text);
    return 0;
}
