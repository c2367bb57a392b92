/* fuzz_weights.c - a weights file (sg_weights_load) for a micro Llama. */
#include "tests/fuzz/fuzz_util.h"

#include "runtime/io/weights.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static sg_model *m;
    sg_error err = {0};
    if (!m) {
        m = calloc(1, sizeof *m);
        if (!m || sg_model_parse(fuzz_micro_model, "micro", m, &err) != SG_OK)
            abort();
    }
    char path[300];
    fuzz_write("model.safetensors", data, size, path);
    sg_weights w;
    sg_config_warnings warn;
    memset(&warn, 0, sizeof warn);
    if (sg_weights_load(path, m, &w, &warn, &err) == SG_OK)
        sg_weights_free(&w);
    return 0;
}
