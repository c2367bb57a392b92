/* fuzz_weights.c - a weights file (sg_weights_load) for a micro Llama. */
#include "tests/fuzz/fuzz_util.h"

#include "runtime/io/weights.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const sg_model *m = fuzz_micro();
    sg_error err = {0};
    char path[300];
    fuzz_write("model.safetensors", data, size, path);
    sg_weights w;
    sg_config_warnings warn;
    memset(&warn, 0, sizeof warn);
    if (sg_weights_load(path, m, &w, &warn, &err) == SG_OK)
        sg_weights_free(&w);
    return 0;
}
